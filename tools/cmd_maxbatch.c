/* actc maxbatch: the largest batch whose full training step (forward,
 * backward, optimizer step with its state) fits a memory budget.  Doubling
 * finds a failing size, bisection the boundary.  Inputs are synthetic: memory
 * does not depend on pixel or token values.  A language model's batch counts
 * windows of --seq tokens. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *compress, *optim, *attention;
    size_t budget;
    int threads, start, limit, width, in_c, in_h, in_w, classes, resolution, estimate;
    int layers, heads, context, vocab, seq; /* language models */
    uint64_t seed;
} mb_opts;

/* 1 if one step at batch b fits, 0 if it runs out of the budget, -1 on any
 * other error (message in why); *peak receives the allocator peak. */
static int try_batch(const mb_opts *o, int b, size_t *peak, char *why, size_t why_cap)
{
    actc_model_opts mo = actc_model_default_opts();
    mo.in_channels = o->in_c;
    mo.in_h = o->in_h;
    mo.in_w = o->in_w;
    mo.num_classes = o->classes;
    mo.width = o->width;
    mo.seed = o->seed;
    mo.n_layers = o->layers;
    mo.n_heads = o->heads;
    mo.context = o->context;
    mo.vocab = o->vocab;
    mo.attention = !strcmp(o->attention, "naive") ? ACTC_ATTN_NAIVE : ACTC_ATTN_FLASH;
    actc_model *m = NULL;
    actc_ctx *ctx = NULL;
    actc_controller *ctrl = NULL;
    actc_optim *opt = NULL;
    actc_tensor *x = NULL;
    lm_batch *lb = NULL;
    int32_t *labels = malloc((size_t)b * sizeof *labels);
    int ok = 0;
    actc_mem_stats before;
    actc_mem_get_stats(&before);
    actc_mem_reset_peak();
    actc_mem_set_budget(o->budget);
    if (!labels) {
        actc_set_error(ACTC_ERR_OOM, "out of memory for labels");
        goto out;
    }
    if (actc_model_create(o->model, &mo, &m) != ACTC_OK) goto out;
    if (!(ctx = actc_ctx_new()) || actc_ctx_set_policy(ctx, o->compress) != ACTC_OK) goto out;
    actc_ctx_set_seed(ctx, o->seed);
    actc_tensor **params;
    int np = actc_model_params(m, &params);
    opt = !strcmp(o->optim, "adamw") ? actc_adamw_new(params, np, 0.9f, 0.999f, 1e-8f, 0.01f)
                                     : actc_sgd_new(params, np, 0.9f, 1, 5e-4f);
    actc_controller_opts co = actc_controller_default_opts();
    co.estimate_samples = o->estimate;
    if (!opt || !(ctrl = actc_controller_new(ctx, params, np, &co))) goto out;
    const int lm = actc_model_takes_tokens(m);
    if (lm) {
        const actc_model_opts *r = actc_model_get_opts(m);
        const int T = o->seq ? o->seq : r->context;
        if (T > r->context) {
            actc_set_error(ACTC_ERR_INVALID, "--seq %d is over the model's context of %d", T, r->context);
            goto out;
        }
        if (!(lb = lm_batch_new(b, T))) goto out;
        for (size_t i = 0; i < (size_t)b * T; i++) {
            lb->ids[i] = (int32_t)(actc_rand_uniform(o->seed, i) * (r->vocab < 256 ? r->vocab : 256));
            lb->targets[i] = (int32_t)(i % (size_t)(r->vocab < 256 ? r->vocab : 256));
        }
    } else {
        int shp[4] = {b, o->in_c, o->in_h, o->in_w};
        if (!(x = actc_tensor_new(ACTC_MEM_SCRATCH, 4, shp))) goto out;
        for (size_t i = 0; i < x->numel; i++) x->data[i] = actc_rand_normal(o->seed, i);
        for (int i = 0; i < b; i++) labels[i] = i % o->classes;
    }
    /* Two steps: the first allocates the optimizer state (and, under gact,
     * measures sensitivities on a sub-batch of --estimate-samples: the bits
     * set the memory, not the estimate's precision), the second runs with
     * everything resident. */
    for (int s = 0; s < 2; s++) {
        step_result r;
        if ((lm ? lm_step(m, ctx, ctrl, opt, lb, 0.01f, 0, &r) : train_step(m, ctx, ctrl, opt, x, labels, 0.01f, 0, &r)) != ACTC_OK)
            goto out;
    }
    ok = 1;
out:
    if (!ok) {
        snprintf(why, why_cap, "%s", actc_last_error());
        if (actc_last_status() != ACTC_ERR_OOM) ok = -1;
    }
    actc_mem_set_budget(0);
    actc_mem_stats st;
    actc_mem_get_stats(&st);
    *peak = st.peak_total - before.current_total;
    actc_tensor_release(x);
    lm_batch_free(lb);
    if (m) actc_model_zero_grad(m);
    actc_optim_free(opt);
    actc_controller_free(ctrl);
    actc_ctx_free(ctx);
    actc_model_free(m);
    free(labels);
    return ok;
}

static int step_failed(int b, const char *why)
{
    fprintf(stderr, "error: the training step at batch %d failed for a reason other than memory: %s\n", b, why);
    return 1;
}

int cmd_maxbatch(int argc, char **argv)
{
    mb_opts o = {"resnet20", "none", NULL, "flash", 0, 0, 1, 1 << 16, 0, 1, 28, 28, 10, 1, 2, 0, 0, 0, 0, 0, 1};
    flag_def flags[] = {
        {"--budget", F_BYTES, &o.budget, "SIZE", "memory budget for the whole step, e.g. 2GiB (required)", 0},
        {"--model", F_STR, &o.model, "NAME", "model (resnet20)", 0},
        {"--compress", F_STR, &o.compress, "SPEC", "activation compression policy (none)", 0},
        {"--optim", F_STR, &o.optim, "NAME", "sgd or adamw (sgd; language models adamw): its state counts", 0},
        {"--start", F_INT, &o.start, "N", "first batch size tried (1)", 0},
        {"--limit", F_INT, &o.limit, "N", "largest batch size tried (65536)", 0},
        {"--estimate-samples", F_INT, &o.estimate, "N", "gact: samples per sensitivity pass (2: only the bits matter here)", 0},
        {"--resolution", F_INT, &o.resolution, "N", "stop bisecting when the fitting and failing sizes are N apart (1)", 0},
        {"--width", F_INT, &o.width, "N", "mlp hidden width (256), transformer width (the preset's)", 0},
        {"--layers", F_INT, &o.layers, "N", "transformer blocks (the preset's)", 0},
        {"--heads", F_INT, &o.heads, "N", "attention heads (the preset's)", 0},
        {"--context", F_INT, &o.context, "N", "positions of a language model (the preset's)", 0},
        {"--vocab", F_INT, &o.vocab, "N", "vocabulary of a language model (the preset's)", 0},
        {"--seq", F_INT, &o.seq, "N", "tokens per window of a language model (its context)", 0},
        {"--attention", F_STR, &o.attention, "FORM", "flash (default) or naive attention of a language model", 0},
        {"--channels", F_INT, &o.in_c, "N", "input channels (1)", 0},
        {"--height", F_INT, &o.in_h, "N", "input height (28)", 0},
        {"--width-px", F_INT, &o.in_w, "N", "input width (28)", 0},
        {"--classes", F_INT, &o.classes, "N", "number of classes (10)", 0},
        {"--seed", F_U64, &o.seed, "N", "seed (1)", 0},
        {"--threads", F_INT, &o.threads, "N", "threads (default: all cores)", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    int help, rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, "actc maxbatch --budget SIZE [--model NAME] [--compress SPEC]",
                   "Find the largest batch size whose full training step (forward, backward and\n"
                   "optimizer step, all accounted memory) fits the budget: doubling, then bisection.",
                   flags);
        return 0;
    }
    if (rc) return 2;
    if (!o.budget) {
        fprintf(stderr, "error: --budget SIZE is required (e.g. --budget 2GiB)\n");
        return 2;
    }
    if (o.start < 1 || o.limit < o.start || o.classes < 1 || o.resolution < 1 || o.estimate < 0) {
        fprintf(stderr, "error: need 1 <= --start <= --limit, --classes >= 1, --resolution >= 1 and --estimate-samples >= 0\n");
        return 2;
    }
    if (strcmp(o.attention, "flash") && strcmp(o.attention, "naive")) {
        fprintf(stderr, "error: --attention must be flash or naive, not '%s'\n", o.attention);
        return 2;
    }
    if (o.width < 0 || o.layers < 0 || o.heads < 0 || o.context < 0 || o.vocab < 0 || o.seq < 0) {
        fprintf(stderr, "error: --width, --layers, --heads, --context, --vocab and --seq must not be negative\n");
        return 2;
    }
    actc_set_threads(o.threads);
    char why[1024] = "", bud[32], pk[32];
    size_t peak = 0;
    /* Fail early with the real reason if the model or policy is unknown. */
    actc_model *probe = NULL;
    actc_model_opts po = actc_model_default_opts();
    po.width = o.width;
    po.n_layers = o.layers;
    po.n_heads = o.heads;
    po.context = o.context;
    po.vocab = o.vocab;
    if (actc_model_create(o.model, &po, &probe) != ACTC_OK) {
        fprintf(stderr, "error: --model: %s\n", actc_last_error());
        return 2;
    }
    if (!o.optim) o.optim = actc_model_takes_tokens(probe) ? "adamw" : "sgd";
    actc_model_free(probe);
    actc_ctx *pc = actc_ctx_new();
    if (!pc || actc_ctx_set_policy(pc, o.compress) != ACTC_OK) {
        fprintf(stderr, "error: --compress: %s\n", actc_last_error());
        actc_ctx_free(pc);
        return 2;
    }
    actc_ctx_free(pc);

    actc_format_bytes(o.budget, bud, sizeof bud);
    printf("maxbatch: model %s, policy %s, budget %s\n", o.model, o.compress, bud);
    int good = 0, bad = 0;
    size_t good_peak = 0;
    for (int b = o.start;;) {
        int ok = try_batch(&o, b, &peak, why, sizeof why);
        if (ok < 0) return step_failed(b, why);
        printf("  batch %6d: %s (peak %s)\n", b, ok ? "fits" : "over budget", actc_format_bytes(peak, pk, sizeof pk));
        fflush(stdout);
        if (!ok) { bad = b; break; }
        good = b;
        good_peak = peak;
        if (b >= o.limit) break;
        b = b > o.limit / 2 ? o.limit : 2 * b;
    }
    if (!good) {
        fprintf(stderr, "error: not even batch %d fits in %s: %s\n", o.start, bud, why);
        return 1;
    }
    while (bad && bad - good > o.resolution) {
        int mid = good + (bad - good) / 2;
        int ok = try_batch(&o, mid, &peak, why, sizeof why);
        if (ok < 0) return step_failed(mid, why);
        printf("  batch %6d: %s (peak %s)\n", mid, ok ? "fits" : "over budget", actc_format_bytes(peak, pk, sizeof pk));
        fflush(stdout);
        if (ok) { good = mid; good_peak = peak; }
        else bad = mid;
    }
    printf("largest batch: %d (peak %s of %s)%s\n", good, actc_format_bytes(good_peak, pk, sizeof pk), bud,
           !bad ? " - the --limit was reached" : bad - good > 1 ? " - bisection stopped at --resolution" : "");
    if (bad && bad - good > 1) printf("smallest failing batch tried: %d\n", bad);
    return 0;
}
