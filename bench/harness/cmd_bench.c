/* actc bench: every method on the same models and machine.  The suite is a
 * matrix of models x policies x batch sizes; each configuration runs as
 * its own `actc train`, `actc maxbatch` or `actc variance` (or a PyTorch
 * peer script) in a fresh child process, one CSV row per run.  Everything
 * is checked before the first run; finished rows are kept, so a killed
 * suite continues where it stopped. */
#include "cli.h"
#include "bench.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define BENCH_STR_(x) #x
#define BENCH_STR(x) BENCH_STR_(x) /* a number macro as a string literal */

#ifndef ACTC_BENCH_SCRIPTS
#define ACTC_BENCH_SCRIPTS "bench"
#endif

typedef struct {
    const char *suite, *models, *policies, *batches, *out, *scripts;
    size_t budget;
    int threads, steps, torch, report_only;
} bench_opts;

static const char USAGE[] = "actc bench [--suite quick|paper|demo] [--models LIST] [--policies LIST] [--budget SIZE] "
                            "[--out DIR]";
static const char ABOUT[] =
    "Compare compression policies on the same models and machine.  Each configuration\n"
    "(model x policy x batch) runs as its own actc train / maxbatch / variance in a\n"
    "fresh child process; every run is one row of OUT/results.csv (units in the column\n"
    "names), and OUT/report.md holds the tables, OUT/plots/ the figures (PNG and SVG,\n"
    "drawn by gnuplot when installed).  Rows:\n"
    "  train     a short run (2 epochs of --steps steps; the second is measured) at each\n"
    "            batch: throughput, step time split (forward, backward, update, the\n"
    "            codecs' encode and decode), context before backward by kind, the\n"
    "            allocator and process peaks; over --budget it is the OOM point\n"
    "  maxbatch  the largest batch under --budget\n"
    "  maxseq    (paper) language models: the longest window at batch 1 under --budget,\n"
    "            searched up to " BENCH_STR(BENCH_SEQ_LIMIT) " tokens (beyond: \"at least\"); not for gact (its\n"
    "            sensitivity passes make each trial some 45 steps)\n"
    "  accuracy  (paper, demo) a fixed short recipe: test accuracy, or validation bits\n"
    "            per byte for language models\n"
    "  variance  (paper) gradient variance of quant:B against SGD's, B = 1, 2, 4, 8\n"
    "  pytorch   the PyTorch peer at each batch when python3-torch is installed\n"
    "Suites: quick (resnet20 and gpt-mini, budget 128MiB, about 5 minutes on 2 cores),\n"
    "paper (adds accuracy, variance, bf16 and gact:2; budget 1GiB; about an hour),\n"
    "demo (resnet20, none against gact:4, accuracy rows, side by side).  A killed\n"
    "suite resumes: run the same command again (failed rows are run again).";

static void build_flags(flag_def *f, void *opts)
{
    bench_opts *o = opts;
    flag_def defs[] = {
        {"--suite", F_STR, &o->suite, "NAME", "quick, paper or demo (quick)", 0},
        {"--models", F_STR, &o->models, "LIST", "comma-separated models (the suite's)", 0},
        {"--policies", F_STR, &o->policies, "LIST", "comma-separated policies (the suite's)", 0},
        {"--batches", F_STR, &o->batches, "LIST", "comma-separated batch sizes for every model (the suite's per model)", 0},
        {"--budget", F_BYTES, &o->budget, "SIZE", "memory budget of the train runs and maxbatch, 0 = none (quick 128MiB, paper 1GiB)", 0},
        {"--steps", F_INT, &o->steps, "N", "steps per epoch of the train runs (quick 3, paper 5)", 0},
        {"--out", F_STR, &o->out, "DIR", "output directory (bench-out/SUITE)", 0},
        {"--threads", F_INT, &o->threads, "N", "threads of each run (default: all cores)", 0},
        {"--torch", F_BOOL, &o->torch, NULL, "run the PyTorch peer where python3-torch is installed (on; --torch=0: off)", 0},
        {"--report-only", F_BOOL, &o->report_only, NULL, "write the report and plots from the rows already in OUT, run nothing", 0},
        {"--scripts", F_STR, &o->scripts, "DIR", "directory of the PyTorch peer scripts (the source tree's bench/)", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    memcpy(f, defs, sizeof defs);
}

/* ---- the suites ------------------------------------------------------------ */
typedef struct {
    const char *name, *models, *policies;
    size_t budget;
    int steps;
    int accuracy, variance, train, maxbatch, maxseq;
} suite_def;

static const suite_def SUITES[] = {
    {"quick", "resnet20,gpt-mini", "none,actnn:L3,gact:4,division,agoq,compact", 128u << 20, 3, 0, 0, 1, 1, 0},
    {"paper", "resnet20,gpt-mini", "none,bf16,actnn:L3,gact:4,gact:2,division,agoq,compact", 1024u << 20, 5, 1, 1, 1, 1, 1},
    {"demo", "resnet20", "none,gact:4", 0, 0, 1, 0, 0, 0, 0},
};

/* Batch sizes of the train rows: image models in samples, language models
 * in windows of the model's context. */
static const char *default_batches(const char *suite, int lm)
{
    if (!strcmp(suite, "paper")) return lm ? "4,16,64" : "32,128,512,2048";
    return lm ? "2,4" : "32,128,512";
}

/* The fixed short recipe of the accuracy rows, and the variance rows'. */
const char *const bench_acc_image[] = {"--batch", "64", "--epochs", "1", "--limit-train", "30000", "--limit-test",
                                       "2000", NULL};
/* 100 steps for language models (about a minute a policy, and already a bit
 * per byte under the unigram baseline on gpt-mini: 3.4 against 4.36), in two
 * epochs: the batch of 8 windows is GACT's whole measuring sub-batch, so the
 * first epoch's context and speed are the 4-bit measuring passes'; the
 * second epoch's, which the row reports, are the allocation's. */
const char *const bench_acc_lm[] = {"--batch", "8", "--epochs", "2", "--epoch-steps", "50", "--eval-tokens", "16384",
                                    NULL};
const char *const bench_variance_args[] = {"--batch", "64", "--repeats", "4", NULL};
static const int VARIANCE_BITS[] = {1, 2, 4, 8};

/* ---- a job: one row and the command that measures it --------------------------- */
#define MAX_ARGS 48
typedef struct {
    bench_row row;
    char *argv[MAX_ARGS];
    int argc;
    char log[PATH_MAX], out[PATH_MAX];
    int has_log;
} job;

typedef struct {
    job *v;
    int n, cap;
} job_list;

static job *job_new(job_list *l, row_kind kind, const char *model, const char *policy, int batch)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        job *n = realloc(l->v, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        l->v = n;
        l->cap = cap;
    }
    job *j = &l->v[l->n++];
    memset(j, 0, sizeof *j);
    bench_row_init(&j->row, kind, model, policy, batch);
    return j;
}

static void arg(job *j, const char *s)
{
    if (j->argc < MAX_ARGS - 1) j->argv[j->argc++] = strdup(s);
}
static void argi(job *j, long v)
{
    char b[32];
    snprintf(b, sizeof b, "%ld", v);
    arg(j, b);
}
static void args(job *j, const char *const *a)
{
    for (; *a; a++) arg(j, *a);
}

static void jobs_free(job_list *l)
{
    for (int i = 0; i < l->n; i++)
        for (int k = 0; k < l->v[i].argc; k++) free(l->v[i].argv[k]);
    free(l->v);
}

/* Where a job's output goes: OUT/runs/KEY.txt (and .jsonl), the key's
 * characters made safe for a file name. */
static void job_paths(job *j, const char *runs)
{
    char key[512], safe[512];
    bench_row_key(&j->row, key, sizeof key);
    size_t i = 0;
    for (; key[i] && i < sizeof safe - 1; i++)
        safe[i] = (key[i] == '|' || key[i] == ':' || key[i] == '/' || key[i] == ',' || key[i] == '=') ? '_' : key[i];
    safe[i] = '\0';
    bench_path(j->out, sizeof j->out, "%s/%s.txt", runs, safe);
    bench_path(j->log, sizeof j->log, "%s/%s.jsonl", runs, safe);
}

/* ---- checks before the first run ------------------------------------------------- */
typedef struct {
    char **v;
    int n;
} list;

static void list_add(list *l, const char *t)
{
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->v[i], t)) return; /* a name given twice runs once */
    char **n = realloc(l->v, (size_t)(l->n + 1) * sizeof *n);
    if (!n) return;
    l->v = n;
    l->v[l->n++] = strdup(t);
}

static int is_policy(const char *spec)
{
    actc_ctx *c = actc_ctx_new();
    const int ok = c && actc_ctx_set_policy(c, spec) == ACTC_OK;
    actc_ctx_free(c);
    return ok;
}

/* Whether piece t of a --policies list continues the spec before it: specs
 * hold commas of their own (quant:4,group=64; agoq:block=64,fmt=nf4;
 * compact:r=0.25,gap=100+gact:4), after their ':'.  An option is key=value
 * or a word; a piece naming a policy ("none", "quant:9") starts one. */
static int continues(const char *spec, const char *t)
{
    if (!strchr(spec, ':') || is_policy(t)) return 0;
    const char *colon = strchr(t, ':'), *eq = strchr(t, '=');
    return !colon || (eq && eq < colon);
}

static void list_free(list *l)
{
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* A comma-separated list (of policies: see continues()); a name given
 * twice is kept once (list_add).  An empty item (a,,b or a comma at an
 * end) is refused, naming flag: 0, or 1 after the message. */
static int split_list(const char *s, list *l, int policies, const char *flag)
{
    l->v = NULL;
    l->n = 0;
    char *copy = strdup(s), spec[ACTC_POLICY_MAX] = "";
    if (!copy) return 1;
    int bad = 0;
    for (char *t = copy, *next; t && !bad; t = next) {
        next = strchr(t, ',');
        if (next) *next++ = '\0';
        if (!*t) {
            fprintf(stderr, "error: %s '%s': an empty item (two commas, or one at an end)\n", flag, s);
            bad = 1;
            break;
        }
        if (policies && *spec && continues(spec, t)) {
            snprintf(spec + strlen(spec), sizeof spec - strlen(spec), ",%s", t);
            continue;
        }
        if (*spec) list_add(l, spec);
        snprintf(spec, sizeof spec, "%s", t);
    }
    if (!bad && *spec) list_add(l, spec);
    free(copy);
    if (bad) list_free(l);
    return bad;
}

static int check_model(const char *name)
{
    if (actc_model_name_takes_graph(name)) {
        fprintf(stderr, "error: --models: %s trains full-batch on a graph; actc bench compares batch sizes, so graph "
                        "models are measured by bench/graph_*.sh instead\n", name);
        return 1;
    }
    return cli_check_model(name, NULL, "--models");
}

/* CompAct projects the linear layers of transformer blocks: on other models
 * it has nothing to act on, and its row says so instead of running. */
static int applies(const char *model, const char *policy)
{
    return strncmp(policy, "compact", 7) || actc_model_name_takes_tokens(model);
}

/* Why a maxseq row is not run, or NULL.  GACT measures its sensitivities
 * with L + 1 extra passes over a sub-batch, and at batch 1 the sub-batch is
 * the whole window: each trial costs some 45 steps on gpt-mini (3.4 min at
 * 2,048 tokens against 4.5 s for none), so the search would take hours. */
static const char *maxseq_skip(const char *policy)
{
    actc_ctx *ctx = actc_ctx_new();
    const int measures = ctx && actc_ctx_set_policy(ctx, policy) == ACTC_OK && actc_ctx_policy_measures(ctx);
    actc_ctx_free(ctx);
    if (measures)
        return "GACT's sensitivity passes (L + 1 of them) run over the whole window at batch 1, so each trial costs "
               "some 45 steps on gpt-mini: a search takes hours";
    return NULL;
}

/* A row that is listed but not run, with the reason. */
static int add_skipped(job_list *l, row_kind kind, const char *model, const char *policy, int batch,
                       const char *why)
{
    job *j = job_new(l, kind, model, policy, batch);
    if (!j) return 1;
    snprintf(j->row.status, sizeof j->row.status, "n/a");
    snprintf(j->row.note, sizeof j->row.note, "%s", why);
    j->row.seconds = 0;
    return 0;
}

/* What the matrix is built from. */
typedef struct {
    const bench_opts *o;
    const suite_def *s;
    char self[PATH_MAX];
    const char *python; /* NULL: no PyTorch peer */
    char budget[32];
} ctx;

/* The budget must let at least one policy train each model at its smallest
 * batch.  Asked before any run, of actc maxbatch in a child (a step in
 * this process would leave it, and so every child forked from it, large). */
static int check_budget(const ctx *c, const char *model, const list *pol, int batch)
{
    int tried = 0;
    for (int p = 0; p < pol->n; p++) {
        if (!applies(model, pol->v[p])) continue;
        tried++;
        char b[16], budget[32];
        snprintf(b, sizeof b, "%d", batch);
        snprintf(budget, sizeof budget, "%zu", c->o->budget);
        char *const argv[] = {(char *)c->self, "maxbatch", "--model", (char *)model, "--compress", pol->v[p],
                              "--budget", budget, "--start", b, "--limit", b, "--threads", "1", NULL};
        const int rc = bench_spawn(argv, "/dev/null", 0, NULL, NULL);
        if (rc == 0) return 0;
        if (rc != 1) {
            fprintf(stderr, "error: actc maxbatch --model %s --compress %s failed (exit %d) checking --budget\n",
                    model, pol->v[p], rc);
            return 1;
        }
    }
    char a[32];
    if (!tried)
        fprintf(stderr, "error: --policies: none of them applies to %s (CompAct needs transformer blocks)\n", model);
    else
        fprintf(stderr, "error: --budget %s is too small: not one policy trains %s at batch %d within it\n",
                actc_format_bytes(c->o->budget, a, sizeof a), model, batch);
    return 1;
}

static int mkdirs(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) && errno != EEXIST) return 1;
            *p = '/';
        }
    return mkdir(buf, 0755) && errno != EEXIST;
}

/* OUT and OUT/runs exist and take files. */
static int check_out(const char *out, char *runs, size_t cap)
{
    bench_path(runs, cap, "%s/runs", out);
    char probe[PATH_MAX];
    bench_path(probe, sizeof probe, "%s/.write-test", out);
    FILE *f = NULL;
    if (mkdirs(out) || mkdirs(runs) || !(f = fopen(probe, "w"))) {
        fprintf(stderr, "error: --out %s: cannot write there (%s)\n", out, strerror(errno));
        return 1;
    }
    fclose(f);
    remove(probe);
    return 0;
}

/* OUT/suite.txt records the settings the rows were measured with; a resumed
 * suite must have the same (rows of two budgets would mix in one plot). */
static int check_settings(const char *out, const char *settings)
{
    char path[PATH_MAX], have[512] = "";
    bench_path(path, sizeof path, "%s/suite.txt", out);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(have, sizeof have, f)) have[0] = '\0';
        fclose(f);
        have[strcspn(have, "\n")] = '\0';
        if (strcmp(have, settings)) {
            fprintf(stderr, "error: --out %s holds rows measured with other settings (%s; now %s): give another --out\n",
                    out, have, settings);
            return 1;
        }
        return 0;
    }
    if (!(f = fopen(path, "w")) || fprintf(f, "%s\n", settings) < 0 || fclose(f)) {
        fprintf(stderr, "error: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

/* One suite at a time in OUT: two would run the same rows and share the
 * cores.  The lock (on OUT/suite.txt) goes with the process. */
static int lock_out(const char *out)
{
    char path[PATH_MAX];
    bench_path(path, sizeof path, "%s/suite.txt", out);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB)) {
        fprintf(stderr, "error: --out %s: another actc bench is running there\n", out);
        if (fd >= 0) close(fd);
        return 1;
    }
    return 0; /* fd stays open: the lock lasts until exit */
}

/* The PyTorch peer of a model, or NULL. */
static const char *peer_script(const char *model)
{
    /* the models the scripts build (pytorch_step.py's make(), pytorch_gpt.py's PRESETS) */
    if (!strcmp(model, "resnet20") || !strcmp(model, "resnet18")) return "pytorch_step.py";
    if (!strcmp(model, "gpt-mini") || !strcmp(model, "llama-mini") || !strcmp(model, "gpt2-124m"))
        return "pytorch_gpt.py";
    return NULL;
}

/* ---- the matrix ------------------------------------------------------------------- */

static void common(const ctx *c, job *j, const char *cmd)
{
    arg(j, c->self);
    arg(j, cmd);
    arg(j, "--model");
    arg(j, j->row.model);
    if (c->o->threads) {
        arg(j, "--threads");
        argi(j, c->o->threads);
    }
}

static int add_train(const ctx *c, job_list *l, const char *model, const char *policy, int batch, int accuracy)
{
    const int lm = actc_model_name_takes_tokens(model);
    job *j = job_new(l, accuracy ? ROW_ACCURACY : ROW_TRAIN, model, policy, batch);
    if (!j) return 1;
    common(c, j, "train");
    arg(j, "--compress");
    arg(j, policy);
    arg(j, "--progress");
    arg(j, "off");
    if (accuracy) {
        args(j, lm ? bench_acc_lm : bench_acc_image);
    } else {
        arg(j, "--batch");
        argi(j, batch);
        arg(j, "--epochs");
        arg(j, "2");
        if (lm) {
            arg(j, "--epoch-steps");
            argi(j, c->o->steps);
            arg(j, "--eval-tokens");
            arg(j, "2048");
        } else {
            arg(j, "--limit-train");
            argi(j, (long)batch * c->o->steps);
            arg(j, "--limit-test");
            arg(j, "256");
        }
        /* Only the bits matter here: maxbatch's sample count. */
        if (!strncmp(policy, "gact", 4)) {
            arg(j, "--estimate-samples");
            arg(j, "2");
        }
        if (c->o->budget) {
            arg(j, "--mem-budget");
            arg(j, c->budget);
        }
    }
    if (lm) {
        arg(j, "--data");
        arg(j, "text");
    }
    arg(j, "--log");
    j->has_log = 1;
    return 0;
}

static int add_maxbatch(const ctx *c, job_list *l, const char *model, const char *policy, int seq)
{
    job *j = job_new(l, seq ? ROW_MAXSEQ : ROW_MAXBATCH, model, policy, seq ? 1 : 0);
    if (!j) return 1;
    common(c, j, "maxbatch");
    arg(j, "--compress");
    arg(j, policy);
    arg(j, "--budget");
    arg(j, c->budget);
    arg(j, "--json");
    /* Bisect to a few percent: each trial of a large batch is a whole step. */
    arg(j, "--resolution");
    argi(j, seq ? BENCH_RES_SEQ : actc_model_name_takes_tokens(model) ? BENCH_RES_LM : BENCH_RES_IMAGE);
    if (seq) {
        arg(j, "--search");
        arg(j, "seq");
        arg(j, "--batch");
        arg(j, "1");
        arg(j, "--limit");
        argi(j, BENCH_SEQ_LIMIT);
    }
    return 0;
}

static int add_variance(const ctx *c, job_list *l, const char *model, int bits)
{
    char pol[16];
    snprintf(pol, sizeof pol, "quant:%d", bits);
    job *j = job_new(l, ROW_VARIANCE, model, pol, atoi(bench_variance_args[1]));
    if (!j) return 1;
    common(c, j, "variance");
    const char *const a[] = {"--compress", pol, "--json", NULL};
    args(j, a);
    args(j, bench_variance_args);
    return 0;
}

static int add_torch(const ctx *c, job_list *l, const char *model, int batch)
{
    job *j = job_new(l, ROW_TORCH, model, "pytorch (fp32)", batch);
    if (!j) return 1;
    char script[PATH_MAX];
    bench_path(script, sizeof script, "%s/%s", c->o->scripts, peer_script(model));
    const int threads = c->o->threads ? c->o->threads : actc_get_threads();
    arg(j, c->python);
    arg(j, script);
    if (actc_model_name_takes_tokens(model)) {
        const char *const a[] = {"--model", model, "--steps", "3", "--warmup", "1", "--json", NULL};
        args(j, a);
        arg(j, "--batch");
        argi(j, batch);
        arg(j, "--threads");
        argi(j, threads);
    } else {
        arg(j, model);
        argi(j, batch);
        argi(j, c->o->steps * 2);
        argi(j, threads);
    }
    return 0;
}

/* Parse a comma-separated list of positive batch sizes. */
static int parse_batches(const char *s, int *out, int cap)
{
    list l;
    if (split_list(s, &l, 0, "--batches")) return -1;
    int n = 0, bad = l.n == 0;
    for (int i = 0; i < l.n && !bad; i++) {
        char *end;
        long v = strtol(l.v[i], &end, 10);
        if (*end || v < 1 || v > 1 << 20 || n == cap) bad = 1;
        else out[n++] = (int)v;
    }
    list_free(&l);
    if (bad) {
        fprintf(stderr, "error: --batches '%s': need up to %d comma-separated sizes from 1 to 1048576\n", s, cap);
        return -1;
    }
    return n;
}

/* ---- running ---------------------------------------------------------------------- */
static void describe(const bench_row *r, char *buf, size_t cap)
{
    char a[32], b[32];
    if (strcmp(r->status, "ok")) {
        snprintf(buf, cap, "%s%s%s", r->status, *r->note ? ": " : "", r->note);
        return;
    }
    switch (r->kind) {
    case ROW_TRAIN:
    case ROW_ACCURACY:
        if (isnan(r->ctx_B) || isnan(r->alloc_peak_B)) {
            snprintf(buf, cap, "%.1f %s/s", bench_row_rate(r), r->seq ? "tokens" : "samples");
            break;
        }
        snprintf(buf, cap, "%.1f %s/s, context %s (%.2fx smaller), allocator peak %s", bench_row_rate(r),
                 r->seq ? "tokens" : "samples", actc_format_bytes((size_t)r->ctx_B, a, sizeof a), r->ctx_ratio,
                 actc_format_bytes((size_t)r->alloc_peak_B, b, sizeof b));
        if (r->kind == ROW_ACCURACY)
            snprintf(buf + strlen(buf), cap - strlen(buf), isnan(r->val_bpb) ? ", test acc %.2f%%" : ", val %.3f bpb",
                     isnan(r->val_bpb) ? 100 * r->test_acc : r->val_bpb);
        break;
    case ROW_MAXBATCH:
        snprintf(buf, cap, "largest batch %s%.0f", r->at_limit ? "at least " : "", r->largest_batch);
        break;
    case ROW_MAXSEQ:
        snprintf(buf, cap, "longest window %s%.0f tokens", r->at_limit ? "at least " : "", r->longest_window);
        break;
    case ROW_VARIANCE: snprintf(buf, cap, "variance %.4g x SGD's", r->variance_ratio); break;
    case ROW_TORCH:
        snprintf(buf, cap, "%.1f %s/s, peak RSS %.0f MiB", bench_row_rate(r), isnan(r->tokens_per_s) ? "samples" : "tokens",
                 r->rss_peak_B / 1048576);
        break;
    default: buf[0] = '\0';
    }
}

static void clock_str(double s, char *buf, size_t cap)
{
    const long t = (long)(s + 0.5);
    snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

/* Rows of the matrix not yet in the table (or failed there). */
static int pending_rows(const job_list *l, const bench_table *t)
{
    int pending = 0;
    char key[512];
    for (int i = 0; i < l->n; i++) {
        bench_row_key(&l->v[i].row, key, sizeof key);
        const bench_row *had = bench_table_find(t, key);
        if (!had || !strcmp(had->status, "failed")) pending++;
    }
    return pending;
}

static int run_jobs(job_list *l, bench_table *t, const char *csv, const char *runs)
{
    const int pending = pending_rows(l, t);
    int failed = 0;
    char key[512];
    if (pending < l->n) printf("resuming: %d of %d rows already in %s\n", l->n - pending, l->n, csv);
    double spent = 0;
    int done = 0;
    for (int i = 0; i < l->n; i++) {
        job *j = &l->v[i];
        bench_row_key(&j->row, key, sizeof key);
        const bench_row *had = bench_table_find(t, key);
        if (had && strcmp(had->status, "failed")) continue;
        job_paths(j, runs);
        if (j->has_log) arg(j, j->log);
        char what[160];
        snprintf(what, sizeof what, "%s %s %s", bench_kind_names[j->row.kind], j->row.model, j->row.policy);
        if (j->row.batch && j->row.kind != ROW_MAXSEQ)
            snprintf(what + strlen(what), sizeof what - strlen(what), " batch %d", j->row.batch);
        printf("[%*d/%d] %s ... ", pending >= 100 ? 3 : 2, done + 1, pending, what);
        fflush(stdout);
        if (strcmp(j->row.status, "n/a")) bench_run_row(&j->row, j->argv, j->has_log ? j->log : NULL, j->out);
        if (bench_csv_append(csv, t, &j->row)) return -1;
        done++;
        spent += isnan(j->row.seconds) ? 0 : j->row.seconds;
        char desc[300], eta[32], took[32];
        describe(&j->row, desc, sizeof desc);
        clock_str(spent / done * (pending - done), eta, sizeof eta);
        clock_str(isnan(j->row.seconds) ? 0 : j->row.seconds, took, sizeof took);
        printf("%s [%s; ETA %s]\n", desc, took, eta);
        if (!strcmp(j->row.status, "failed")) {
            failed++;
            printf("    output: %s\n", j->out);
        }
        fflush(stdout);
    }
    return failed;
}

/* --report-only: the rows listed as not applicable cost nothing to record,
 * so the report has them with their reasons.  0, or -1 when the CSV could
 * not be written. */
static int record_skipped(job_list *l, bench_table *t, const char *csv)
{
    char key[512];
    for (int i = 0; i < l->n; i++) {
        bench_row_key(&l->v[i].row, key, sizeof key);
        if (!strcmp(l->v[i].row.status, "n/a") && !bench_table_find(t, key) && bench_csv_append(csv, t, &l->v[i].row))
            return -1;
    }
    return 0;
}

static int cmd_bench(int argc, char **argv)
{
    bench_opts o = {"quick", NULL, NULL, NULL, NULL, ACTC_BENCH_SCRIPTS, 0, 0, 0, 1, 0};
    flag_def flags[MAX_FLAGS];
    build_flags(flags, &o);
    int help, rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, USAGE, ABOUT, flags);
        return 0;
    }
    if (rc) return 2;
    const suite_def *s = NULL;
    for (size_t i = 0; i < sizeof SUITES / sizeof *SUITES; i++)
        if (!strcmp(o.suite, SUITES[i].name)) s = &SUITES[i];
    if (!s) {
        fprintf(stderr, "error: --suite must be quick, paper or demo, not '%s'\n", o.suite);
        return 2;
    }
    if (!flag_was_set(flags, "--budget")) o.budget = s->budget;
    if (!flag_was_set(flags, "--steps")) o.steps = s->steps ? s->steps : 2;
    if (o.steps < 1 || o.threads < 0) {
        fprintf(stderr, "error: need --steps >= 1 and --threads >= 0\n");
        return 2;
    }
    char out_default[64];
    snprintf(out_default, sizeof out_default, "bench-out/%s", s->name);
    if (!o.out) o.out = out_default;
    list models = {0}, pols = {0};
    rc = 2;
    job_list jobs = {0};
    bench_table table = {0};
    int fixed[16], nfixed = 0;
    if (split_list(o.models ? o.models : s->models, &models, 0, "--models") ||
        split_list(o.policies ? o.policies : s->policies, &pols, 1, "--policies"))
        goto out;
    if (!models.n || !pols.n) {
        fprintf(stderr, "error: --models and --policies need at least one name each\n");
        goto out;
    }
    if (o.batches && (nfixed = parse_batches(o.batches, fixed, 16)) < 0) goto out;
    for (int m = 0; m < models.n; m++)
        if (check_model(models.v[m])) goto out;
    for (int p = 0; p < pols.n; p++)
        if (cli_check_policy(pols.v[p], "--policies")) goto out;
    if (o.threads) actc_set_threads(o.threads);
    ctx c = {&o, s, "", NULL, ""};
    snprintf(c.budget, sizeof c.budget, "%zu", o.budget); /* exact, for the children */
    ssize_t n = readlink("/proc/self/exe", c.self, sizeof c.self - 1);
    if (n <= 0) {
        fprintf(stderr, "error: cannot find this program (/proc/self/exe) to run its configurations\n");
        goto out;
    }
    c.self[n] = '\0';
    char torch_note[PATH_MAX + 128] = "";
    /* The matrix, in the order it runs: per model, each policy's rows. */
    for (int m = 0; m < models.n; m++) {
        const char *model = models.v[m];
        const int lm = actc_model_name_takes_tokens(model);
        int bs[16], nb = nfixed;
        memcpy(bs, fixed, sizeof bs);
        if (!nfixed) nb = parse_batches(default_batches(s->name, lm), bs, 16);
        int smallest = bs[0];
        for (int i = 1; i < nb; i++)
            if (bs[i] < smallest) smallest = bs[i];
        /* What the runs derive from the flags, checked before the first:
         * an image model's train run reads --steps batches of each size. */
        for (int i = 0; s->train && !lm && i < nb; i++)
            if ((long long)bs[i] * o.steps > INT_MAX) {
                fprintf(stderr, "error: --steps %d at batch %d: the train runs would read %lld images "
                                "(--limit-train), over %d\n",
                        o.steps, bs[i], (long long)bs[i] * o.steps, INT_MAX);
                goto out;
            }
        if (o.budget && !o.report_only && check_budget(&c, model, &pols, smallest)) goto out;
        for (int p = 0; p < pols.n; p++) {
            const char *pol = pols.v[p];
            if (!applies(model, pol)) {
                char why[160];
                snprintf(why, sizeof why, "CompAct projects the linear layers of transformer blocks; %s has none",
                         model);
                if (add_skipped(&jobs, ROW_TRAIN, model, pol, 0, why)) goto out;
                continue;
            }
            for (int b = 0; s->train && b < nb; b++)
                if (add_train(&c, &jobs, model, pol, bs[b], 0)) goto out;
            if (s->maxbatch && o.budget && add_maxbatch(&c, &jobs, model, pol, 0)) goto out;
            const char *no_seq = s->maxseq && o.budget && lm ? maxseq_skip(pol) : NULL;
            if (s->maxseq && o.budget && lm &&
                (no_seq ? add_skipped(&jobs, ROW_MAXSEQ, model, pol, 1, no_seq) : add_maxbatch(&c, &jobs, model, pol, 1)))
                goto out;
            if (s->accuracy && add_train(&c, &jobs, model, pol, 0, 1)) goto out;
        }
        if (s->variance && !lm)
            for (size_t b = 0; b < sizeof VARIANCE_BITS / sizeof *VARIANCE_BITS; b++)
                if (add_variance(&c, &jobs, model, VARIANCE_BITS[b])) goto out;
        if (o.torch && s->train && peer_script(model)) {
            if (!c.python) {
                /* Is the peer there?  Asked once, in a child like the rest. */
                /* Debian's python3-torch belongs to /usr/bin/python3, which
                 * a python3 earlier in PATH (a virtualenv, pyenv) may hide. */
                const char *py = getenv("ACTC_PYTHON")             ? getenv("ACTC_PYTHON")
                                 : access("/usr/bin/python3", X_OK) ? "python3"
                                                                    : "/usr/bin/python3";
                char script[PATH_MAX];
                bench_path(script, sizeof script, "%s/%s", o.scripts, peer_script(model));
                char *const pa[] = {(char *)py, "-c", "import torch", NULL};
                if (access(script, R_OK)) {
                    snprintf(torch_note, sizeof torch_note, "no PyTorch peer: %s is not there (--scripts DIR)", script);
                    o.torch = 0;
                } else if (bench_spawn(pa, "/dev/null", 0, NULL, NULL) != 0) {
                    snprintf(torch_note, sizeof torch_note,
                             "no PyTorch peer: %s cannot import torch (Debian: apt-get install python3-torch)", py);
                    o.torch = 0;
                } else {
                    c.python = py;
                }
                if (*torch_note) printf("note: %s\n", torch_note);
            }
            for (int b = 0; c.python && b < nb; b++)
                if (add_torch(&c, &jobs, model, bs[b])) goto out;
        }
    }
    char runs[PATH_MAX], csv[PATH_MAX], settings[256];
    if (check_out(o.out, runs, sizeof runs)) goto out;
    snprintf(settings, sizeof settings, "actc=%s suite=%s budget=%zu steps=%d threads=%d", actc_version(), s->name,
             o.budget, o.steps, o.threads);
    if (check_settings(o.out, settings) || lock_out(o.out)) goto out;
    bench_path(csv, sizeof csv, "%s/results.csv", o.out);
    snprintf(table.settings, sizeof table.settings, "%s", settings);
    if (bench_csv_load(csv, &table)) goto out;

    char bud[32] = "none";
    if (o.budget) actc_format_bytes(o.budget, bud, sizeof bud);
    printf("actc bench %s: %d models x %d policies, %d runs, budget %s, %d thread(s) per run; rows in %s\n", s->name,
           models.n, pols.n, jobs.n, bud, o.threads ? o.threads : actc_get_threads(), csv);
    fflush(stdout);
    const int failed = o.report_only ? record_skipped(&jobs, &table, csv) : run_jobs(&jobs, &table, csv, runs);
    if (failed < 0) {
        rc = 1;
        goto out;
    }
    const int pending = pending_rows(&jobs, &table);
    char note[sizeof torch_note + 200];
    snprintf(note, sizeof note, "%s", torch_note);
    if (pending)
        snprintf(note + strlen(note), sizeof note - strlen(note), "%s%d of the suite's %d rows %s", *note ? "; " : "",
                 pending, jobs.n,
                 o.report_only ? "have not run yet or failed: the same command without --report-only runs them"
                               : "failed: the same command runs them again");
    if (o.report_only && pending) printf("note: %d of %d rows not run yet; the report has the others\n", pending, jobs.n);
    char cmdline[1024] = "actc";
    for (int i = 1; i < argc; i++)
        snprintf(cmdline + strlen(cmdline), sizeof cmdline - strlen(cmdline), " %s", argv[i]);
    const char *gp = getenv("ACTC_GNUPLOT") ? getenv("ACTC_GNUPLOT") : "gnuplot";
    bench_report_opts ro = {o.out, s->name, gp, o.budget, o.threads ? o.threads : actc_get_threads(), cmdline,
                            *note ? note : NULL};
    if (!strcmp(s->name, "demo")) bench_print_side_by_side(&table);
    const int plots = bench_report(&ro, &table);
    if (plots < 0) {
        rc = 1;
        goto out;
    }
    printf("report: %s/report.md; %d plot(s) in %s/plots%s\n", o.out, plots, o.out,
           plots ? "" : " (none: gnuplot did not run; the report has the tables)");
    if (failed) printf("%d run(s) failed: their output is in %s (run the same command again to retry them)\n", failed,
                       runs);
    rc = failed ? 1 : 0;
out:
    list_free(&models);
    list_free(&pols);
    jobs_free(&jobs);
    bench_table_free(&table);
    return rc;
}

const command cmd_bench_def = {"bench", "compare compression policies: a matrix of runs, CSV, report and plots", USAGE,
                               ABOUT, build_flags, sizeof(bench_opts), cmd_bench};
