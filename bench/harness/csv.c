/* The rows of actc bench as CSV: one line per run, every figure with its
 * unit in the column name, appended and fsync'ed as each run ends so that a
 * killed suite resumes from the rows it finished. */
#include "bench.h"
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const bench_kind_names[ROW_NKINDS] = {"train", "maxbatch", "maxseq", "accuracy", "variance", "pytorch"};

void bench_row_init(bench_row *r, row_kind kind, const char *model, const char *policy, int batch)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    snprintf(r->model, sizeof r->model, "%s", model);
    snprintf(r->policy, sizeof r->policy, "%s", policy);
    r->batch = batch;
    double *nums[] = {&r->samples_per_s, &r->tokens_per_s, &r->step_ms, &r->forward_ms, &r->codec_forward_ms,
                      &r->backward_ms, &r->codec_backward_ms, &r->update_ms, &r->controller_ms, &r->ctx_B,
                      &r->ctx_none_B, &r->ctx_ratio, &r->act_B, &r->mask_B, &r->index_B, &r->exact_B,
                      &r->alloc_peak_B, &r->rss_peak_B, &r->train_loss, &r->test_acc, &r->val_bpb,
                      &r->largest_batch, &r->longest_window, &r->variance_ratio, &r->seconds};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) *nums[i] = NAN;
}

double bench_row_rate(const bench_row *r)
{
    return isnan(r->tokens_per_s) ? r->samples_per_s : r->tokens_per_s;
}

void bench_row_key(const bench_row *r, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s|%.31s|%.159s|%d", bench_kind_names[r->kind], r->model, r->policy, r->batch);
}

/* The columns: name (with unit), type, where in the row. */
typedef enum { C_KIND, C_STR, C_INT, C_NUM, C_BYTES } col_type;
typedef struct {
    const char *name;
    col_type type;
    size_t off, cap;
} column;
#define S(f) offsetof(bench_row, f), sizeof(((bench_row *)0)->f)
#define N(f) offsetof(bench_row, f), 0
static const column COLS[] = {
    {"kind", C_KIND, N(kind)},
    {"model", C_STR, S(model)},
    {"policy", C_STR, S(policy)},
    {"batch_samples", C_INT, N(batch)},
    {"window_tokens", C_INT, N(seq)},
    {"status", C_STR, S(status)},
    {"samples_per_s", C_NUM, N(samples_per_s)},
    {"tokens_per_s", C_NUM, N(tokens_per_s)},
    {"step_ms", C_NUM, N(step_ms)},
    {"forward_ms", C_NUM, N(forward_ms)},
    {"codec_forward_ms", C_NUM, N(codec_forward_ms)},
    {"backward_ms", C_NUM, N(backward_ms)},
    {"codec_backward_ms", C_NUM, N(codec_backward_ms)},
    {"update_ms", C_NUM, N(update_ms)},
    {"controller_ms", C_NUM, N(controller_ms)},
    {"context_bytes", C_BYTES, N(ctx_B)},
    {"context_none_bytes", C_BYTES, N(ctx_none_B)},
    {"context_ratio", C_NUM, N(ctx_ratio)},
    {"context_act_bytes", C_BYTES, N(act_B)},
    {"context_mask_bytes", C_BYTES, N(mask_B)},
    {"context_index_bytes", C_BYTES, N(index_B)},
    {"context_exact_bytes", C_BYTES, N(exact_B)},
    {"allocator_peak_bytes", C_BYTES, N(alloc_peak_B)},
    {"peak_rss_bytes", C_BYTES, N(rss_peak_B)},
    {"train_loss_nats", C_NUM, N(train_loss)},
    {"test_acc_fraction", C_NUM, N(test_acc)},
    {"val_bits_per_byte", C_NUM, N(val_bpb)},
    {"largest_batch_samples", C_NUM, N(largest_batch)},
    {"longest_window_tokens", C_NUM, N(longest_window)},
    {"search_at_limit", C_INT, N(at_limit)},
    {"variance_ratio", C_NUM, N(variance_ratio)},
    {"wall_seconds", C_NUM, N(seconds)},
    {"note", C_STR, S(note)},
    {"suite_settings", C_STR, S(settings)},
};
#undef S
#undef N
#define NCOLS (sizeof COLS / sizeof *COLS)

static void header(FILE *f)
{
    for (size_t c = 0; c < NCOLS; c++) fprintf(f, "%s%s", c ? "," : "", COLS[c].name);
    fputc('\n', f);
}

/* A string field: quoted when it holds a comma or a quote (notes do). */
static void put_str(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '\n' || *s == '\r') continue;
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void put_row(FILE *f, const bench_row *r)
{
    for (size_t c = 0; c < NCOLS; c++) {
        const char *p = (const char *)r + COLS[c].off;
        if (c) fputc(',', f);
        switch (COLS[c].type) {
        case C_KIND: fputs(bench_kind_names[r->kind], f); break;
        case C_STR: put_str(f, p); break;
        case C_INT: fprintf(f, "%d", *(const int *)p); break;
        case C_NUM:
            if (!isnan(*(const double *)p)) fprintf(f, "%.6g", *(const double *)p);
            break;
        case C_BYTES:
            if (!isnan(*(const double *)p)) fprintf(f, "%.0f", *(const double *)p);
            break;
        }
    }
    fputc('\n', f);
}

/* Split one CSV line into fields (in place); returns how many. */
static size_t split(char *line, char **fields, size_t cap)
{
    size_t n = 0;
    char *p = line;
    while (n < cap) {
        if (*p == '"') {
            char *w = ++p;
            fields[n++] = w;
            for (;;) {
                if (!*p) break;
                if (*p == '"' && p[1] == '"') {
                    *w++ = '"';
                    p += 2;
                } else if (*p == '"') {
                    p++;
                    break;
                } else {
                    *w++ = *p++;
                }
            }
            *w = '\0';
        } else {
            fields[n++] = p;
            p += strcspn(p, ",");
        }
        if (*p != ',') {
            *p = '\0';
            break;
        }
        *p++ = '\0';
    }
    return n;
}

/* A whole field as an integer in [lo, hi]: 0, or -1. */
static int field_int(const char *f, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    const long v = strtol(f, &end, 10);
    if (!*f || *end || errno || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* The columns' plausible ranges: a figure outside is a damaged row. */
#define NUM_MAX 1e18

static int known_status(const char *s)
{
    static const char *const ok[] = {"ok", "oom", "failed", "n/a"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (!strcmp(s, ok[i])) return 1;
    return 0;
}

/* Parse and check one line's fields into r: 0, or -1 with why. */
static int parse_row(char *line, bench_row *r, char *why, size_t cap)
{
    char *f[NCOLS + 1];
    const size_t n = split(line, f, NCOLS + 1);
    if (n != NCOLS) {
        snprintf(why, cap, "%zu fields where a row has %zu", n, NCOLS);
        return -1;
    }
    int kind = -1;
    for (int k = 0; k < ROW_NKINDS; k++)
        if (!strcmp(f[0], bench_kind_names[k])) kind = k;
    if (kind < 0) {
        snprintf(why, cap, "unknown kind '%.40s'", f[0]);
        return -1;
    }
    bench_row_init(r, (row_kind)kind, "", "", 0);
    for (size_t c = 1; c < NCOLS; c++) {
        char *p = (char *)r + COLS[c].off;
        switch (COLS[c].type) {
        case C_KIND: break;
        case C_STR:
            if (strlen(f[c]) >= COLS[c].cap) {
                snprintf(why, cap, "%s is longer than %zu bytes", COLS[c].name, COLS[c].cap - 1);
                return -1;
            }
            snprintf(p, COLS[c].cap, "%s", f[c]);
            break;
        case C_INT:
            if (field_int(f[c], 0, strcmp(COLS[c].name, "search_at_limit") ? 1 << 30 : 1, (int *)p)) {
                snprintf(why, cap, "%s '%.40s' is not an integer in its range", COLS[c].name, f[c]);
                return -1;
            }
            break;
        case C_NUM:
        case C_BYTES: {
            if (!*f[c]) break; /* not measured */
            char *end;
            const double v = strtod(f[c], &end);
            const double hi = !strcmp(COLS[c].name, "test_acc_fraction") ? 1.0 : NUM_MAX;
            if (*end || !isfinite(v) || fpclassify(v) == FP_SUBNORMAL || v < 0 || v > hi) {
                snprintf(why, cap, "%s '%.40s' is not a number in [0, %g]", COLS[c].name, f[c], hi);
                return -1;
            }
            *(double *)p = v;
            break;
        }
        }
    }
    if (!r->model[0] || !r->policy[0]) {
        snprintf(why, cap, "an empty model or policy");
        return -1;
    }
    if (!known_status(r->status)) {
        snprintf(why, cap, "status '%.40s' is none of ok, oom, failed, n/a", r->status);
        return -1;
    }
    return 0;
}

static int push(bench_table *t, const bench_row *r)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        bench_row *n = realloc(t->rows, (size_t)cap * sizeof *n);
        if (!n) return 1;
        t->rows = n;
        t->cap = cap;
    }
    t->rows[t->n++] = *r;
    return 0;
}

/* Write every row of t to path through path.tmp, fsync'ed and renamed. */
static int rewrite(const char *path, const bench_table *t)
{
    char tmp[4200];
    if (bench_path(tmp, sizeof tmp, "%s.tmp", path)) return 1;
    FILE *f = fopen(tmp, "we");
    if (!f) return 1;
    header(f);
    for (int i = 0; i < t->n; i++) put_row(f, &t->rows[i]);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    return bad || rename(tmp, path);
}

int bench_csv_load(const char *path, bench_table *t)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char want[2048];
    {
        /* the header this version writes, to compare */
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        if (!m) {
            fclose(f);
            return 1;
        }
        header(m);
        fclose(m);
        snprintf(want, sizeof want, "%s", buf);
        free(buf);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got = getline(&line, &cap, f);
    int rc = 0, lineno = 1, dropped = 0;
    if (got > 0 && strcmp(line, want)) {
        fprintf(stderr, "error: %s: not a CSV of this version of actc bench (its header differs); give another --out "
                        "or remove the file\n", path);
        rc = 1;
    }
    /* got <= 0: an empty file, no rows yet */
    while (!rc && got > 0 && (got = getline(&line, &cap, f)) > 0) {
        lineno++;
        const int whole = line[got - 1] == '\n';
        line[strcspn(line, "\r\n")] = '\0';
        if (!*line) continue;
        bench_row r;
        char why[256];
        if (!whole) {
            /* a suite killed while writing its last row: dropped (the file is
             * rewritten below) and that configuration runs again */
            printf("note: %s:%d: an unfinished last row, run again\n", path, lineno);
            dropped = 1;
            break;
        }
        if (parse_row(line, &r, why, sizeof why)) {
            printf("note: %s:%d: a damaged row (%s): dropped, its configuration runs again\n", path, lineno, why);
            dropped = 1;
            continue;
        }
        if (strcmp(r.settings, t->settings)) {
            fprintf(stderr, "error: %s:%d: a row measured with other settings (%s; now %s): give another --out\n",
                    path, lineno, r.settings, t->settings);
            rc = 1;
        } else if (push(t, &r)) {
            fprintf(stderr, "error: out of memory reading %s\n", path);
            rc = 1;
        }
    }
    free(line);
    if (!rc && ferror(f)) {
        fprintf(stderr, "error: cannot read %s\n", path);
        rc = 1;
    }
    fclose(f);
    if (!rc && dropped && rewrite(path, t)) {
        fprintf(stderr, "error: rewriting %s failed\n", path);
        rc = 1;
    }
    return rc;
}

int bench_csv_append(const char *path, bench_table *t, const bench_row *row)
{
    bench_row stamped = *row, *r = &stamped;
    snprintf(r->settings, sizeof r->settings, "%s", t->settings);
    char key[1024], k[1024];
    bench_row_key(r, key, sizeof key);
    for (int i = 0; i < t->n; i++) {
        bench_row_key(&t->rows[i], k, sizeof k);
        if (strcmp(k, key)) continue;
        t->rows[i] = *r;
        if (rewrite(path, t)) {
            fprintf(stderr, "error: rewriting %s failed (disk full?)\n", path);
            return 1;
        }
        return 0;
    }
    if (push(t, r)) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    FILE *f = fopen(path, "ae");
    if (!f) {
        fprintf(stderr, "error: cannot append to %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    if (ftell(f) == 0) header(f);
    put_row(f, r);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad) {
        fprintf(stderr, "error: writing %s failed (disk full?)\n", path);
        return 1;
    }
    return 0;
}

const bench_row *bench_table_find(const bench_table *t, const char *key)
{
    char k[512];
    for (int i = t->n - 1; i >= 0; i--) {
        bench_row_key(&t->rows[i], k, sizeof k);
        if (!strcmp(k, key)) return &t->rows[i];
    }
    return NULL;
}

void bench_table_free(bench_table *t)
{
    free(t->rows);
    memset(t, 0, sizeof *t);
}
