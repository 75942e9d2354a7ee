/* Training-step benchmark: samples/s of a full step (forward + loss, backward,
 * optimizer) and the time split between the three, for one model, batch and
 * policy per process (so the peak RSS printed belongs to that configuration).
 *
 * usage: bench_step MODEL BATCH [POLICY] [STEPS] [THREADS] [SEQ]
 * Inputs are synthetic (speed does not depend on pixel or token values). Two
 * warm-up steps are not timed.  Image models train with SGD (momentum,
 * Nesterov) and report samples/s; language models (gpt-mini, llama-mini,
 * gpt2-124m) train with AdamW on SEQ-token windows (default: the model's
 * context) and report tokens/s.  Output: one human line and one JSON line. */
#include "actc.h"
#include "malloc_conf.h"
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int die(const char *what)
{
    fprintf(stderr, "bench_step: %s: %s\n", what, actc_last_error());
    return 1;
}

typedef struct {
    actc_model *m;
    actc_ctx *ctx;
    actc_tensor *x;
    const int32_t *ids, *labels;
    int batch, T;
} warm_pass;

/* Forward, loss and backward of the whole batch (the controller's fn). */
static actc_status warm_fwdbwd(actc_ctx *ctx, void *user, int max_samples, int *samples)
{
    const warm_pass *w = user;
    int n = max_samples > 0 && max_samples < w->batch ? max_samples : w->batch;
    actc_tensor *in = NULL;
    if (w->x) {
        int shp[4] = {n, w->x->shape[1], w->x->shape[2], w->x->shape[3]};
        if (!(in = actc_tensor_new(ACTC_MEM_SCRATCH, 4, shp))) return actc_last_status();
        memcpy(in->data, w->x->data, in->numel * sizeof(float));
    }
    *samples = n;
    actc_tensor *logits = w->x ? actc_model_forward(w->m, ctx, in) : actc_model_forward_tokens(w->m, ctx, w->ids, n, w->T);
    actc_tensor_release(in);
    if (!logits) return actc_last_status();
    actc_tensor *loss = actc_cross_entropy(ctx, logits, w->labels, -1, NULL);
    actc_tensor_release(logits);
    if (!loss) return actc_last_status();
    actc_status s = actc_backward(ctx, loss);
    actc_tensor_release(loss);
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_step MODEL BATCH [POLICY] [STEPS] [THREADS] [SEQ]\n");
        return 2;
    }
    actc_setup_malloc(); /* as the actc command does */
    const char *model = argv[1], *policy = argc > 3 ? argv[3] : "none";
    int batch = atoi(argv[2]), steps = argc > 4 ? atoi(argv[4]) : 10;
    if (argc > 5) actc_set_threads(atoi(argv[5]));
    actc_model_opts mo = actc_model_default_opts();
    mo.seed = 1;
    actc_model *m;
    if (actc_model_create(model, &mo, &m) != ACTC_OK) return die("model");
    actc_ctx *ctx = actc_ctx_new();
    if (!ctx || actc_ctx_set_policy(ctx, policy) != ACTC_OK) return die("policy");
    actc_tensor **params;
    int np = actc_model_params(m, &params);
    const int lm = actc_model_takes_tokens(m);
    const int T = lm ? (argc > 6 ? atoi(argv[6]) : actc_model_get_opts(m)->context) : 1;
    const int V = actc_model_get_opts(m)->vocab;
    actc_optim *opt = lm ? actc_adamw_new(params, np, 0.9f, 0.999f, 1e-8f, 0.01f)
                         : actc_sgd_new(params, np, 0.9f, 1, 5e-4f);
    int shp[4] = {batch, 1, 28, 28};
    actc_tensor *x = lm ? NULL : actc_tensor_new(ACTC_MEM_SCRATCH, 4, shp);
    const size_t rows = (size_t)batch * T;
    int32_t *labels = malloc(rows * sizeof *labels), *ids = malloc(rows * sizeof *ids);
    if (!opt || (!lm && !x) || !labels || !ids || T < 1) return die("setup");
    if (x)
        for (size_t i = 0; i < x->numel; i++) x->data[i] = actc_rand_normal(3, i);
    for (size_t i = 0; i < rows; i++) {
        labels[i] = lm ? (int32_t)(actc_rand_uniform(4, i) * (V < 256 ? V : 256)) : (int32_t)(i % 10);
        ids[i] = lm ? (int32_t)(actc_rand_uniform(5, i) * (V < 256 ? V : 256)) : 0;
    }

    /* One untimed step through the controller first: a gact policy measures
     * sensitivities and allocates its bits there, so the timed steps run with
     * them (bench/gact_overhead.sh times the measurement itself). */
    actc_controller_opts co = actc_controller_default_opts();
    co.adapt_interval = UINT64_MAX;
    actc_controller *ctrl = actc_controller_new(ctx, params, np, &co);
    warm_pass wp = {m, ctx, x, ids, labels, batch, T};
    if (!ctrl || actc_controller_iterate(ctrl, warm_fwdbwd, &wp) != ACTC_OK) return die("controller step");
    actc_controller_free(ctrl);

    double tf = 0, tb = 0, to = 0;
    actc_store_stats ss;
    for (int s = -2; s < steps; s++) {
        if (s == 0) {
            actc_mem_reset_peak();
            actc_store_reset_peak(ctx);
        }
        actc_model_zero_grad(m);
        double t0 = now();
        actc_tensor *logits = lm ? actc_model_forward_tokens(m, ctx, ids, batch, T) : actc_model_forward(m, ctx, x);
        if (!logits) return die("forward");
        actc_tensor *loss = actc_cross_entropy(ctx, logits, labels, -1, NULL);
        actc_tensor_release(logits);
        if (!loss) return die("loss");
        double t1 = now();
        if (actc_backward(ctx, loss) != ACTC_OK) return die("backward");
        actc_tensor_release(loss);
        double t2 = now();
        if (actc_optim_step(opt, 0.01f) != ACTC_OK) return die("optimizer");
        double t3 = now();
        if (s >= 0) {
            tf += t1 - t0;
            tb += t2 - t1;
            to += t3 - t2;
        }
    }
    actc_store_get_stats(ctx, &ss);
    actc_mem_stats ms;
    actc_mem_get_stats(&ms);
    double total = tf + tb + to, sps = (double)rows * steps / total;
    printf("%-9s batch %4d %-8s %8.1f %s/s  forward %4.1f%%  backward %4.1f%%  optimizer %4.1f%%  "
           "context %.1f MiB (%.2fx)  peak %.1f MiB  RSS %.1f MiB\n",
           model, batch, policy, sps, lm ? "tokens" : "samples", 100 * tf / total, 100 * tb / total, 100 * to / total,
           ss.stored_peak / 1048576.0, ss.stored_peak ? (double)ss.fp32_peak / ss.stored_peak : 0,
           ms.peak_total / 1048576.0, actc_process_peak_rss() / 1048576.0);
    printf("{\"model\":\"%s\",\"batch\":%d,\"seq\":%d,\"policy\":\"%s\",\"threads\":%d,\"steps\":%d,\"%s_per_s\":%.2f,"
           "\"forward_s\":%.4f,\"backward_s\":%.4f,\"optimizer_s\":%.4f,\"context_bytes\":%zu,\"context_fp32\":%zu,"
           "\"peak_total\":%zu,\"peak_rss\":%zu}\n",
           model, batch, T, policy, actc_get_threads(), steps, lm ? "tokens" : "samples", sps, tf / steps, tb / steps, to / steps, ss.stored_peak,
           ss.fp32_peak, ms.peak_total, actc_process_peak_rss());
    actc_tensor_release(x);
    free(labels);
    free(ids);
    actc_optim_free(opt);
    actc_ctx_free(ctx);
    actc_model_free(m);
    return 0;
}
