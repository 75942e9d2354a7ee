/* Fuzz target: actc bench's results.csv reader (bench/harness/csv.c).  Every
 * input loads, dropping the rows it names as damaged, or is refused (a
 * header of another version, rows of other settings); what loads holds
 * only checked rows (a known kind and status, names, numbers finite and
 * in range or not measured), and the file it leaves behind loads again to
 * the same rows with nothing dropped. */
#include "fuzz_util.h"
#include "bench.h"
#include <math.h>
#include <stdarg.h>

/* bench/harness/child.c's, which the reader uses for its temporary name. */
int bench_path(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap) {
        buf[0] = '\0';
        return 1;
    }
    return 0;
}

static void check_rows(const bench_table *t)
{
    for (int i = 0; i < t->n; i++) {
        const bench_row *r = &t->rows[i];
        if ((unsigned)r->kind >= ROW_NKINDS || !r->model[0] || !r->policy[0] || r->batch < 0 || r->seq < 0) abort();
        if (strcmp(r->status, "ok") && strcmp(r->status, "oom") && strcmp(r->status, "failed") &&
            strcmp(r->status, "n/a"))
            abort();
        const double v[] = {r->samples_per_s, r->tokens_per_s, r->step_ms, r->ctx_B, r->ctx_ratio, r->test_acc,
                            r->largest_batch, r->variance_ratio, r->seconds};
        for (size_t k = 0; k < sizeof v / sizeof *v; k++)
            if (!isnan(v[k]) && (!isfinite(v[k]) || v[k] < 0)) abort();
        if (!isnan(r->test_acc) && r->test_acc > 1) abort();
        if (strcmp(r->settings, t->settings)) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s", fuzz_path(".csv"));
    fuzz_write(path, data, n);
    bench_table t = {0};
    snprintf(t.settings, sizeof t.settings, "actc=0.9.0 suite=quick budget=25165824 steps=2 threads=1");
    if (bench_csv_load(path, &t) == 0) {
        check_rows(&t);
        /* What it left behind (rewritten if it dropped rows) loads again,
         * whole. */
        bench_table again = {0};
        memcpy(again.settings, t.settings, sizeof t.settings);
        if (bench_csv_load(path, &again) != 0 || again.n != t.n) abort();
        for (int i = 0; i < t.n; i++)
            if (again.rows[i].kind != t.rows[i].kind || strcmp(again.rows[i].model, t.rows[i].model) ||
                again.rows[i].batch != t.rows[i].batch)
                abort();
        bench_table_free(&again);
    }
    bench_table_free(&t);
    unlink(path);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp);
    return 0;
}
