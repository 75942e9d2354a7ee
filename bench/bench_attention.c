/* Causal self-attention benchmark: forward + backward of the naive and the
 * flash form on the same random q, k, v; tokens/s, the forward/backward
 * split, and the peak SCRATCH and CONTEXT bytes of one step.
 *
 * usage: bench_attention [B] [T] [H] [Dh] [REPS] [THREADS]
 *        (defaults 8 256 8 32 10, threads as OpenMP decides)
 * One untimed warm-up step per form.  The loss is sum(out * R) for a fixed R.
 * Output: one human line and one JSON line per form.  The PyTorch peer is
 * bench/pytorch_attention.py with the same arguments. */
#include "actc.h"
#include "malloc_conf.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int die(const char *what)
{
    fprintf(stderr, "bench_attention: %s: %s\n", what, actc_last_error());
    return 1;
}

/* loss = sum(out * R): R travels in node->user (not owned). */
static actc_status loss_backward(actc_ctx *ctx, actc_node *node)
{
    float *gx;
    actc_status st = actc_grad_buffer(ctx, node->inputs[0], &gx);
    if (st != ACTC_OK || !gx) return st;
    const actc_tensor *r = node->user;
    const float g = node->output->grad->data[0];
    for (size_t i = 0; i < r->numel; i++) gx[i] += g * r->data[i];
    return ACTC_OK;
}

static actc_tensor *loss_of(actc_ctx *ctx, actc_tensor *y, actc_tensor *r)
{
    int one = 1;
    actc_tensor *l = actc_tensor_new(ACTC_MEM_ACT, 1, &one);
    if (!l) return NULL;
    double s = 0;
    for (size_t i = 0; i < y->numel; i++) s += (double)y->data[i] * r->data[i];
    l->data[0] = (float)s;
    actc_node *node;
    if (actc_node_new(ctx, "bench_loss", loss_backward, l, 1, &y, &node) != ACTC_OK) {
        actc_tensor_release(l);
        return NULL;
    }
    if (node) node->user = r;
    return l;
}

typedef actc_tensor *(*attn_fn)(actc_ctx *, actc_tensor *, actc_tensor *, actc_tensor *, int);

int main(int argc, char **argv)
{
    actc_setup_malloc();
    const int B = argc > 1 ? atoi(argv[1]) : 8, T = argc > 2 ? atoi(argv[2]) : 256;
    const int H = argc > 3 ? atoi(argv[3]) : 8, Dh = argc > 4 ? atoi(argv[4]) : 32;
    const int reps = argc > 5 ? atoi(argv[5]) : 10;
    if (argc > 6) actc_set_threads(atoi(argv[6]));
    if (B < 1 || T < 1 || H < 1 || Dh < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_attention [B] [T] [H] [Dh] [REPS] [THREADS]\n");
        return 2;
    }
    int shape[3] = {B, T, H * Dh};
    actc_tensor *q = actc_tensor_new(ACTC_MEM_ACT, 3, shape), *k = actc_tensor_new(ACTC_MEM_ACT, 3, shape);
    actc_tensor *v = actc_tensor_new(ACTC_MEM_ACT, 3, shape), *r = actc_tensor_new(ACTC_MEM_SCRATCH, 3, shape);
    actc_ctx *ctx = actc_ctx_new();
    if (!q || !k || !v || !r || !ctx) return die("setup");
    actc_tensor *in[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        for (size_t j = 0; j < q->numel; j++) in[i]->data[j] = actc_rand_normal((uint64_t)i + 1, j);
        in[i]->requires_grad = 1;
    }
    for (size_t j = 0; j < r->numel; j++) r->data[j] = actc_rand_uniform(9, j) - 0.5f;

    const char *names[2] = {"naive", "flash"};
    const attn_fn fns[2] = {actc_attention_naive, actc_attention_flash};
    printf("attention B=%d T=%d H=%d Dh=%d, %d threads, %d reps\n", B, T, H, Dh, actc_get_threads(), reps);
    for (int f = 0; f < 2; f++) {
        double tf = 0, tb = 0;
        actc_mem_stats ms;
        actc_store_stats ss;
        size_t scratch0 = 0, context0 = 0;
        for (int s = -1; s < reps; s++) {
            if (s == 0) {
                actc_mem_get_stats(&ms);
                scratch0 = ms.current[ACTC_MEM_SCRATCH];
                context0 = ms.current[ACTC_MEM_CONTEXT];
                actc_mem_reset_peak();
                actc_store_reset_peak(ctx);
            }
            const double t0 = now();
            actc_tensor *y = fns[f](ctx, q, k, v, H);
            if (!y) return die(names[f]);
            const double t1 = now();
            actc_tensor *loss = loss_of(ctx, y, r);
            actc_tensor_release(y);
            if (!loss) return die("loss");
            const double t2 = now();
            if (actc_backward(ctx, loss) != ACTC_OK) return die("backward");
            const double t3 = now();
            actc_tensor_release(loss);
            for (int i = 0; i < 3; i++) actc_tensor_drop_grad(in[i]);
            if (s >= 0) {
                tf += t1 - t0;
                tb += t3 - t2;
            }
        }
        actc_mem_get_stats(&ms);
        actc_store_get_stats(ctx, &ss);
        const double tok = (double)B * T * reps / (tf + tb);
        const size_t scratch = ms.peak[ACTC_MEM_SCRATCH] - scratch0, context = ms.peak[ACTC_MEM_CONTEXT] - context0;
        printf("%-5s %9.0f tokens/s  forward %7.2f ms  backward %7.2f ms  "
               "peak SCRATCH %8.2f MiB  CONTEXT %8.2f MiB\n",
               names[f], tok, 1e3 * tf / reps, 1e3 * tb / reps, scratch / 1048576.0, context / 1048576.0);
        printf("{\"bench\":\"attention\",\"form\":\"%s\",\"B\":%d,\"T\":%d,\"H\":%d,\"Dh\":%d,\"threads\":%d,"
               "\"tokens_per_s\":%.1f,\"forward_ms\":%.3f,\"backward_ms\":%.3f,\"peak_scratch_bytes\":%zu,"
               "\"peak_context_bytes\":%zu,\"store_peak_bytes\":%zu}\n",
               names[f], B, T, H, Dh, actc_get_threads(), tok, 1e3 * tf / reps, 1e3 * tb / reps, scratch, context,
               ss.stored_peak);
    }
    actc_ctx_free(ctx);
    actc_tensor_release(q);
    actc_tensor_release(k);
    actc_tensor_release(v);
    actc_tensor_release(r);
    return 0;
}
