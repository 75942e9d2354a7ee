/* actc variance: how much gradient variance activation compression adds,
 * next to the variance that minibatch sampling causes anyway (ActNN, Thm. 3
 * and Figure 5).  If the first is much smaller than the second, the
 * compressed run converges like full precision.
 *
 * Compression variance: one fixed minibatch, R forward+backward passes with
 * the policy, each with another rounding seed and the same step, so the only
 * thing that changes between passes is the stochastic rounding of the saved
 * contexts (an adaptive policy is frozen with what it learnt in the warm-up,
 * so every pass sees the same bit allocation).  Sampling variance: no compression, R different minibatches.
 * Both are reported as the trace of the covariance of each weight gradient:
 * the sum over its elements of the unbiased sample variance across passes. */
#include "cli.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *compress, *checkpoint;
    int batch, repeats, warmup, threads, width, json;
    uint64_t seed;
    data_opts data;
} var_opts;

static const char USAGE[] = "actc variance --model NAME --compress SPEC [--batch N] [--repeats R] [--json] ...";
static const char ABOUT[] =
    "Gradient variance per parameter tensor, as in ActNN's Figure 5:\n"
    "  compression  the same minibatch R times with --compress SPEC, a different\n"
    "               rounding seed each time (same step, no optimizer step): the\n"
    "               variance that the lossy saved contexts add;\n"
    "  sampling     no compression, R different minibatches of the same size:\n"
    "               the variance that SGD has anyway.\n"
    "Each is the sum over the tensor's elements of the unbiased sample variance\n"
    "across the R gradients.  The model runs in training mode (batch statistics)\n"
    "with dropout off, so that only the rounding differs between repeats.\n"
    "Adaptive policies (e.g. actnn:L3) learn gradient statistics from preceding\n"
    "backward passes: give them --warmup 20 or so before measuring.  Progress\n"
    "lines go to stderr.";


/* ---- accumulation ---------------------------------------------------------- */

/* Running mean and sum of squared deviations (Welford) of every parameter
 * element, in double: the compression variance can be many orders of
 * magnitude below the squared gradient, where E[g^2] - E[g]^2 in float would
 * be all cancellation.  Only two PARAM-sized arrays, not R gradient copies. */
typedef struct {
    actc_tensor **params;
    int np;
    size_t total;        /* elements over all parameters                  */
    double *mean, *m2;   /* total each, parameters one after another      */
    int n;               /* gradients folded in                           */
} welford;

static int welford_init(welford *w, actc_model *m)
{
    memset(w, 0, sizeof *w);
    w->np = actc_model_params(m, &w->params);
    w->total = actc_model_num_params(m);
    w->mean = calloc(w->total ? w->total : 1, sizeof *w->mean);
    w->m2 = calloc(w->total ? w->total : 1, sizeof *w->m2);
    if (!w->mean || !w->m2) {
        actc_set_error(ACTC_ERR_OOM, "out of memory for the variance accumulators (%zu parameters)", w->total);
        return 1;
    }
    return 0;
}

static void welford_free(welford *w)
{
    free(w->mean);
    free(w->m2);
}

static void welford_reset(welford *w)
{
    memset(w->mean, 0, w->total * sizeof *w->mean);
    memset(w->m2, 0, w->total * sizeof *w->m2);
    w->n = 0;
}

/* Fold in the gradients the last backward pass left in the parameters.  A
 * parameter without a gradient (unused by the loss) counts as zeros. */
static void welford_add(welford *w)
{
    w->n++;
    size_t off = 0;
    for (int p = 0; p < w->np; p++) {
        const actc_tensor *t = w->params[p];
        const float *g = t->grad ? t->grad->data : NULL;
        double *mean = w->mean + off, *m2 = w->m2 + off;
        for (size_t i = 0; i < t->numel; i++) {
            double x = g ? (double)g[i] : 0.0;
            double d = x - mean[i];
            mean[i] += d / w->n;
            m2[i] += d * (x - mean[i]);
        }
        off += t->numel;
    }
}

/* Per parameter: sum over its elements of M2 / (n - 1). */
static void welford_variances(const welford *w, double *out)
{
    size_t off = 0;
    for (int p = 0; p < w->np; p++) {
        double s = 0;
        for (size_t i = 0; i < w->params[p]->numel; i++) s += w->m2[off + i];
        out[p] = w->n > 1 ? s / (w->n - 1) : 0.0;
        off += w->params[p]->numel;
    }
}

/* ---- the passes ---------------------------------------------------------------- */

typedef struct {
    actc_image_dataset train;
    int have_train;
    actc_model *model;
    actc_trainer *t;       /* the measured policy (warm-up: gact measures)  */
    actc_trainer *plain;   /* no compression: the sampling passes           */
    actc_source *src;      /* the fixed shuffle of the training set         */
    welford acc;
    double *comp, *samp;   /* per-parameter results                          */
    double batch_loss;     /* loss of the fixed minibatch                   */
    char policy[ACTC_POLICY_MAX]; /* canonical spec of the measured policy         */
} var_run;

static void run_free(var_run *r)
{
    welford_free(&r->acc);
    free(r->comp);
    free(r->samp);
    actc_source_free(r->src);
    actc_trainer_free(r->t);
    actc_trainer_free(r->plain);
    actc_model_free(r->model);
    if (r->have_train) actc_image_dataset_free(&r->train);
}

/* Forward+backward of the g-th batch of the fixed shuffle (g past the end of
 * an epoch continues into the next epoch's shuffle) at step `step`, training
 * mode, no optimizer step: the gradients stay in the parameters' .grad.  The
 * trainer's controller measures (under gact) unless the policy is frozen. */
static actc_status grad_pass(var_run *r, actc_trainer *t, int g, uint64_t step, double *loss)
{
    const int nb = actc_source_batches(r->src);
    actc_batch b;
    actc_status s = actc_source_get(r->src, (uint64_t)(g / nb), (uint64_t)(g % nb), 0, &b);
    if (s != ACTC_OK) return s;
    actc_trainer_set_position(t, step, 0, 0);
    actc_step_result sr;
    s = actc_trainer_backward(t, &b, &sr);
    if (s == ACTC_OK) *loss = sr.loss;
    return s;
}

static void note_pass(const char *phase, int i, int n, double loss, double t0)
{
    fprintf(stderr, "variance: %s pass %d/%d, loss %.4f, %.1f s\n", phase, i + 1, n, loss, now_seconds() - t0);
}

/* Warm-up passes with the policy on batches after the measured ones, so an
 * adaptive policy starts the measurement with gradient statistics. */
static int run_warmup(var_run *r, const var_opts *o)
{
    double t0 = now_seconds(), loss;
    for (int w = 0; w < o->warmup; w++) {
        if (grad_pass(r, r->t, o->repeats + w, (uint64_t)w, &loss) != ACTC_OK) return fail("warm-up pass");
        note_pass("warm-up", w, o->warmup, loss, t0);
    }
    return 0;
}

/* The same batch 0 and the same step every time; only the seed moves, and the
 * store derives every stochastic-rounding key from (seed, step, tensor). */
static int run_compression(var_run *r, const var_opts *o)
{
    double t0 = now_seconds();
    welford_reset(&r->acc);
    actc_ctx *ctx = actc_trainer_ctx(r->t);
    actc_ctx_freeze_policy(ctx, 1);
    for (int i = 0; i < o->repeats; i++) {
        actc_ctx_set_seed(ctx, o->seed + (uint64_t)i);
        if (grad_pass(r, r->t, 0, (uint64_t)o->warmup, &r->batch_loss) != ACTC_OK) return fail("compression pass");
        welford_add(&r->acc);
        note_pass("compression", i, o->repeats, r->batch_loss, t0);
    }
    welford_variances(&r->acc, r->comp);
    return 0;
}

/* Batches 0..R-1 without compression: the plain SGD gradient noise. */
static int run_sampling(var_run *r, const var_opts *o)
{
    double t0 = now_seconds(), loss;
    welford_reset(&r->acc);
    for (int i = 0; i < o->repeats; i++) {
        if (grad_pass(r, r->plain, i, (uint64_t)o->warmup, &loss) != ACTC_OK) return fail("sampling pass");
        welford_add(&r->acc);
        note_pass("sampling", i, o->repeats, loss, t0);
    }
    welford_variances(&r->acc, r->samp);
    return 0;
}

/* ---- output ------------------------------------------------------------------------ */

/* The ratio compression / sampling; NaN when sampling is 0 (shown as - / null). */
static double ratio(double comp, double samp)
{
    return samp > 0 ? comp / samp : NAN;
}

static void json_number(FILE *f, double x)
{
    if (isfinite(x)) fprintf(f, "%.9g", x);
    else fputs("null", f);
}

static void print_json(const var_run *r, const var_opts *o, double comp_total, double samp_total)
{
    const welford *w = &r->acc;
    printf("{\"model\":");
    actc_json_string(stdout, actc_model_name(r->model));
    printf(",\"policy\":");
    actc_json_string(stdout, r->policy);
    printf(",\"batch\":%d,\"repeats\":%d,\"warmup\":%d,\"seed\":%llu,\"checkpoint\":", o->batch, o->repeats,
           o->warmup, (unsigned long long)o->seed);
    if (o->checkpoint) actc_json_string(stdout, o->checkpoint);
    else printf("null");
    printf(",\"loss\":%.9g,\"params\":[", r->batch_loss);
    for (int p = 0; p < w->np; p++) {
        const actc_tensor *t = w->params[p];
        printf("%s{\"name\":", p ? "," : "");
        actc_json_string(stdout, t->name);
        printf(",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) printf("%s%d", d ? "," : "", t->shape[d]);
        printf("],\"numel\":%zu,\"compression\":%.9g,\"sampling\":%.9g,\"ratio\":", t->numel, r->comp[p],
               r->samp[p]);
        json_number(stdout, ratio(r->comp[p], r->samp[p]));
        printf("}");
    }
    printf("],\"total\":{\"numel\":%zu,\"compression\":%.9g,\"sampling\":%.9g,\"ratio\":", w->total, comp_total,
           samp_total);
    json_number(stdout, ratio(comp_total, samp_total));
    printf("},\"peak_rss\":%zu}\n", actc_process_peak_rss());
}

static void print_row(int name_w, const char *name, const char *shape, double comp, double samp)
{
    double q = ratio(comp, samp);
    printf("  %-*s %-16s %13.6e %13.6e ", name_w, name, shape, comp, samp);
    if (isfinite(q)) printf("%11.4e\n", q);
    else printf("%11s\n", "-");
}

static void print_table(const var_run *r, const var_opts *o, double comp_total, double samp_total)
{
    const welford *w = &r->acc;
    int name_w = 9;
    for (int p = 0; p < w->np; p++) {
        int len = (int)strlen(w->params[p]->name);
        if (len > name_w) name_w = len;
    }
    printf("actc %s variance: model %s (%zu parameters), policy %s, batch %d, repeats %d, warmup %d, seed %llu%s%s\n",
           ACTC_VERSION, actc_model_name(r->model), w->total, r->policy, o->batch, o->repeats, o->warmup,
           (unsigned long long)o->seed, o->checkpoint ? ", weights from " : "", o->checkpoint ? o->checkpoint : "");
    printf("gradient variance per parameter tensor (sum over its elements of the sample variance\n"
           "across the repeats); loss of the fixed batch %.4f\n", r->batch_loss);
    printf("  %-*s %-16s %13s %13s %11s\n", name_w, "parameter", "shape", "compression", "sampling", "comp/sampl");
    char shape[64];
    for (int p = 0; p < w->np; p++)
        print_row(name_w, w->params[p]->name, actc_shape_str(w->params[p], shape, sizeof shape), r->comp[p],
                  r->samp[p]);
    print_row(name_w, "total", "", comp_total, samp_total);
}

static void report(const var_run *r, const var_opts *o)
{
    double comp_total = 0, samp_total = 0;
    for (int p = 0; p < r->acc.np; p++) {
        comp_total += r->comp[p];
        samp_total += r->samp[p];
    }
    if (o->json) print_json(r, o, comp_total, samp_total);
    else print_table(r, o, comp_total, samp_total);
}

/* ---- set-up ---------------------------------------------------------------------- */

/* Exit status 2 (after a message naming the flag) unless the flags make sense;
 * the model and policy names are checked before any data is read. */
static int check_opts(const var_opts *o)
{
    if (o->repeats < 2) {
        fprintf(stderr, "error: --repeats must be at least 2 (a sample variance needs two gradients), not %d\n",
                o->repeats);
        return 2;
    }
    if (o->batch < 1 || o->warmup < 0 || o->threads < 0 || o->width < 1 || o->data.limit_train < 0) {
        fprintf(stderr, "error: need --batch >= 1, --width >= 1, and --warmup, --threads, --limit-train >= 0\n");
        return 2;
    }
    if (cli_check_model(o->model, NULL, "--model")) return 2;
    return cli_check_policy(o->compress, "--compress");
}

/* With --checkpoint: its model unless --model names another (an error). */
static int peek_checkpoint(var_opts *o, const flag_def *flags, actc_ckpt_info *info)
{
    if (actc_checkpoint_info(o->checkpoint, info) != ACTC_OK) return fail("--checkpoint");
    if (flag_was_set(flags, "--model") && strcmp(o->model, info->model)) {
        fprintf(stderr, "error: --checkpoint %s holds model %s, but --model %s was given\n", o->checkpoint,
                info->model, o->model);
        return 2;
    }
    o->model = info->model;
    return 0;
}

/* Data, model (initialised from the seed or loaded from --checkpoint),
 * context with the policy, and the fixed shuffle of the training set. */
static int setup(var_run *r, const var_opts *o, const actc_ckpt_info *info)
{
    if (data_load(&o->data, &r->train, NULL)) return 1;
    r->have_train = 1;
    if (o->batch > r->train.n) {
        fprintf(stderr, "error: --batch %d is larger than the training set (%d images)\n", o->batch, r->train.n);
        return 1;
    }
    actc_model_opts mo = actc_model_default_opts();
    mo.in_channels = r->train.c;
    mo.in_h = r->train.h;
    mo.in_w = r->train.w;
    if (r->train.num_classes > mo.num_classes) mo.num_classes = r->train.num_classes;
    mo.width = o->width;
    if (o->checkpoint) mo = info->model_opts; /* the checkpoint's shape wins */
    mo.dropout = 0; /* dropout masks follow the seed too: keep them out */
    mo.seed = o->seed;
    if (actc_model_create(o->model, &mo, &r->model) != ACTC_OK) return fail("--model");
    if (o->checkpoint && actc_checkpoint_load(o->checkpoint, r->model, NULL, NULL) != ACTC_OK) {
        return fail("--checkpoint");
    }
    actc_trainer_opts to = actc_trainer_default_opts();
    to.policy = o->compress;
    to.seed = o->seed;
    if (actc_trainer_new(r->model, &to, &r->t) != ACTC_OK) return fail("--compress");
    to.policy = "none";
    if (actc_trainer_new(r->model, &to, &r->plain) != ACTC_OK) return fail("engine");
    snprintf(r->policy, sizeof r->policy, "%s", actc_trainer_get_opts(r->t)->policy);
    actc_loader_opts lo = {FMNIST_MEAN, FMNIST_STD, 0, 0, 1, o->seed};
    if (actc_source_images(&r->train, o->batch, 1, &lo, &r->src) != ACTC_OK) return fail("data loader");
    if (welford_init(&r->acc, r->model)) return fail("accumulators");
    r->comp = calloc((size_t)r->acc.np + 1, sizeof *r->comp);
    r->samp = calloc((size_t)r->acc.np + 1, sizeof *r->samp);
    if (!r->comp || !r->samp) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    return 0;
}

static void build_flags(flag_def *f, void *opts)
{
    var_opts *o = opts;
    flag_def defs[] = {
        {"--model", F_STR, &o->model, "NAME", "model (resnet20, or the --checkpoint's)", 0},
        {"--compress", F_STR, &o->compress, "SPEC", "compression policy measured (none); see actc --help", 0},
        {"--batch", F_INT, &o->batch, "N", "minibatch size (128)", 0},
        {"--repeats", F_INT, &o->repeats, "R", "gradients per variance, at least 2 (10)", 0},
        {"--warmup", F_INT, &o->warmup, "W", "passes with the policy before measuring (0; ~20 for actnn:*, 1 for gact:* to measure and allocate)", 0},
        {"--checkpoint", F_STR, &o->checkpoint, "FILE", "measure at the weights of FILE (actc train --save)", 0},
        {"--width", F_INT, &o->width, "N", "hidden width of the mlp (256; a checkpoint's own otherwise)", 0},
        {"--seed", F_U64, &o->seed, "N", "seed of initialisation, data order and the first rounding seed (1)", 0},
        {"--threads", F_INT, &o->threads, "N", "threads (default: all cores)", 0},
        {"--json", F_BOOL, &o->json, "", "print one JSON object instead of the table", 0},
        {"--data-dir", F_STR, &o->data.data_dir, "DIR", "directory with the Fashion-MNIST IDX files", 0},
        {"--train-images", F_STR, &o->data.train_images, "FILE", "IDX image file to draw minibatches from", 0},
        {"--train-labels", F_STR, &o->data.train_labels, "FILE", "IDX label file to draw minibatches from", 0},
        {"--limit-train", F_INT, &o->data.limit_train, "N", "use only the first N training images", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    memcpy(f, defs, sizeof defs);
}

static int cmd_variance(int argc, char **argv)
{
    var_opts o;
    memset(&o, 0, sizeof o);
    o.model = "resnet20";
    o.compress = "none";
    o.batch = 128;
    o.repeats = 10;
    o.width = 256;
    o.seed = 1;
    flag_def flags[MAX_FLAGS];
    build_flags(flags, &o);
    int help, rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, USAGE, ABOUT, flags);
        printf("\ncompression policies (--compress):\n%s", actc_policy_list());
        return 0;
    }
    if (rc) return 2;
    actc_ckpt_info meta;
    memset(&meta, 0, sizeof meta);
    if (o.checkpoint && (rc = peek_checkpoint(&o, flags, &meta))) return rc;
    if ((rc = check_opts(&o))) return rc;

    actc_set_threads(o.threads);
    var_run r;
    memset(&r, 0, sizeof r);
    rc = setup(&r, &o, &meta) || run_warmup(&r, &o) || run_compression(&r, &o) || run_sampling(&r, &o);
    if (!rc) report(&r, &o);
    run_free(&r);
    return rc;
}

const command cmd_variance_def = {"variance", "gradient variance from compression vs minibatch sampling, per layer",
                                  USAGE, ABOUT, build_flags, sizeof(var_opts), cmd_variance};
