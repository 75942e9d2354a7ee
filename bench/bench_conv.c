/* bench_conv: conv2d forward + backward on the convolutions of ResNet-18 for
 * 28x28 inputs (stem without maxpool, four stages 64@28, 128@14, 256@7,
 * 512@4), against plain sgemm in the same run.
 *
 *   bench_conv [batch=128] [reps=3] [backend=auto|im2col|dnnl|dnnl-plain|dnnl-blocked]
 *
 * backend forces conv2d's backend; dnnl-plain / dnnl-blocked also force
 * oneDNN's layouts (plain NCHW/OIHW, or its blocked ones with reorders) where
 * dnnl chooses per layer; auto is the library's own choice.
 *
 * For each shape it prints the best of `reps` timings of forward and of
 * backward (dW + dx; the stem has no dx, as for network input images) in
 * GFLOP/s, and the "ceiling": the same three matrix products (W.col,
 * dY.col^T, W^T.dY) done by cblas_sgemm on ready-made operands for the whole
 * batch, i.e. without im2col, col2im, scatter/gather or chunking.  The totals
 * weight each shape by how often it occurs in ResNet-18, giving the conv time
 * of one training step and the images/s it would allow on its own.  A big
 * square sgemm is also timed as the machine's reference speed. */
#include "actc.h"
#include "autograd/autograd.h"
#include "ops/conv2d_internal.h"
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    const char *name;
    int C, K, H, k, s, p;
    int count;   /* occurrences in ResNet-18 */
    int need_dx; /* 0 for the stem: the input images need no gradient */
} layer;

static const layer layers[] = {
    {"stem 1->64 3x3 @28", 1, 64, 28, 3, 1, 1, 1, 0},
    {"64->64 3x3 @28", 64, 64, 28, 3, 1, 1, 4, 1},
    {"64->128 3x3 s2 @28", 64, 128, 28, 3, 2, 1, 1, 1},
    {"64->128 1x1 s2 @28", 64, 128, 28, 1, 2, 0, 1, 1},
    {"128->128 3x3 @14", 128, 128, 14, 3, 1, 1, 3, 1},
    {"128->256 3x3 s2 @14", 128, 256, 14, 3, 2, 1, 1, 1},
    {"128->256 1x1 s2 @14", 128, 256, 14, 1, 2, 0, 1, 1},
    {"256->256 3x3 @7", 256, 256, 7, 3, 1, 1, 3, 1},
    {"256->512 3x3 s2 @7", 256, 512, 7, 3, 2, 1, 1, 1},
    {"256->512 1x1 s2 @7", 256, 512, 7, 1, 2, 0, 1, 1},
    {"512->512 3x3 @4", 512, 512, 4, 3, 1, 1, 3, 1},
};

static void fill(float *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) p[i] = actc_rand_uniform(seed, i) - 0.5f;
}

/* The three whole-batch products of one conv layer, on ready operands. */
static void ceiling(int M, int Ncols, int Kdim, int need_dx, int reps, double *tf, double *tb)
{
    float *w = malloc(sizeof(float) * (size_t)M * Kdim);
    float *col = malloc(sizeof(float) * (size_t)Kdim * Ncols);
    float *y = malloc(sizeof(float) * (size_t)M * Ncols);
    float *dw = calloc((size_t)M * Kdim, sizeof(float));
    if (!w || !col || !y || !dw) {
        fprintf(stderr, "bench_conv: out of memory for the ceiling operands\n");
        exit(1);
    }
    fill(w, (size_t)M * Kdim, 1);
    fill(col, (size_t)Kdim * Ncols, 2);
    fill(y, (size_t)M * Ncols, 3);
    *tf = *tb = 1e30;
    for (int r = 0; r <= reps; r++) { /* r == 0 warms up */
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, Ncols, Kdim, 1.0f, w, Kdim, col,
                    Ncols, 0.0f, y, Ncols);
        double t1 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, Kdim, Ncols, 1.0f, y, Ncols, col,
                    Ncols, 1.0f, dw, Kdim);
        if (need_dx)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Kdim, Ncols, M, 1.0f, w, Kdim, y,
                        Ncols, 0.0f, col, Ncols);
        double t2 = now();
        if (r > 0) {
            if (t1 - t0 < *tf) *tf = t1 - t0;
            if (t2 - t1 < *tb) *tb = t2 - t1;
        }
    }
    free(w);
    free(col);
    free(y);
    free(dw);
}

int main(int argc, char **argv)
{
    int batch = argc > 1 ? atoi(argv[1]) : 128;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    if (batch < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_conv [batch>=1] [reps>=1]\n");
        return 2;
    }
    const char *backend = argc > 3 ? argv[3] : "auto";
    if (strcmp(backend, "im2col") == 0) {
        actc__conv_force_backend(ACTC_CONV_IM2COL);
    } else if (strcmp(backend, "dnnl") == 0) {
        actc__conv_force_backend(ACTC_CONV_DNNL);
    } else if (strcmp(backend, "dnnl-plain") == 0 || strcmp(backend, "dnnl-blocked") == 0) {
        actc__conv_force_backend(ACTC_CONV_DNNL);
        actc__conv_dnnl_set_blocked(strcmp(backend, "dnnl-blocked") == 0);
    } else if (strcmp(backend, "auto") != 0) {
        fprintf(stderr, "bench_conv: backend must be auto, im2col, dnnl, dnnl-plain or dnnl-blocked\n");
        return 2;
    }
    printf("bench_conv: batch %d, best of %d, %d threads, conv backend %s, %s\n", batch, reps,
           actc_get_threads(), backend, openblas_get_config());

    /* Machine reference: a big square sgemm. */
    {
        const int n = 2048;
        float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
              *c = malloc(sizeof(float) * n * n);
        fill(a, (size_t)n * n, 4);
        fill(b, (size_t)n * n, 5);
        double best = 1e30;
        for (int r = 0; r <= reps; r++) {
            double t0 = now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f,
                        c, n);
            double t = now() - t0;
            if (r > 0 && t < best) best = t;
        }
        printf("sgemm %dx%dx%d: %.1f GFLOP/s\n\n", n, n, n, 2.0 * n * n * n / best * 1e-9);
        free(a);
        free(b);
        free(c);
    }

    printf("%-22s %8s %8s %8s | %8s %8s | %6s\n", "layer (x count)", "fwd", "bwd", "f+b",
           "ceil f+b", "ceil fwd", "ratio");
    printf("%-22s %8s %8s %8s | %8s %8s | %6s\n", "", "GFLOP/s", "GFLOP/s", "GFLOP/s", "GFLOP/s",
           "GFLOP/s", "");
    double tot_flop = 0, tot_t = 0, tot_ceil_t = 0, fresh_bytes = 0;
    actc_ctx *ctx = actc_ctx_new();
    for (size_t li = 0; li < sizeof layers / sizeof layers[0]; li++) {
        const layer *L = &layers[li];
        int Ho = (L->H + 2 * L->p - L->k) / L->s + 1;
        int xs[4] = {batch, L->C, L->H, L->H}, ws[4] = {L->K, L->C, L->k, L->k},
            ys[4] = {batch, L->K, Ho, Ho};
        actc_tensor *x = actc_tensor_new(ACTC_MEM_ACT, 4, xs);
        actc_tensor *w = actc_param_new(4, ws, "w");
        actc_tensor *dy = actc_tensor_new(ACTC_MEM_ACT, 4, ys);
        if (!x || !w || !dy) {
            fprintf(stderr, "bench_conv: %s\n", actc_last_error());
            return 1;
        }
        fill(x->data, x->numel, 6);
        fill(w->data, w->numel, 7);
        fill(dy->data, dy->numel, 8);
        x->requires_grad = L->need_dx;

        double tf = 1e30, tb = 1e30;
        for (int r = 0; r <= reps; r++) {
            double t0 = now();
            actc_tensor *y = actc_conv2d(ctx, x, w, NULL, L->s, L->p);
            double t1 = now();
            if (!y || actc_tape_size(ctx) != 1) {
                fprintf(stderr, "bench_conv: conv2d failed: %s\n", actc_last_error());
                return 1;
            }
            /* Run this node's backward alone, with a fixed output gradient. */
            actc_node *node = ctx->nodes[0];
            y->grad = actc_tensor_retain(dy);
            double t2 = now();
            actc_status s = node->backward(ctx, node);
            double t3 = now();
            if (s != ACTC_OK) {
                fprintf(stderr, "bench_conv: backward failed: %s\n", actc_last_error());
                return 1;
            }
            actc_tensor_release(y);
            actc_ctx_reset(ctx); /* drops y (and its grad reference) and the store */
            actc_tensor_drop_grad(x);
            actc_tensor_drop_grad(w);
            if (r > 0) {
                if (t1 - t0 < tf) tf = t1 - t0;
                if (t3 - t2 < tb) tb = t3 - t2;
            }
        }
        double f1 = 2.0 * batch * L->K * (double)Ho * Ho * L->C * L->k * L->k;
        double fb = f1 * (L->need_dx ? 2 : 1);
        double cf, cb;
        ceiling(L->K, batch * Ho * Ho, L->C * L->k * L->k, L->need_dx, reps, &cf, &cb);
        char nm[48];
        snprintf(nm, sizeof nm, "%s x%d", L->name, L->count);
        printf("%-22s %8.1f %8.1f %8.1f | %8.1f %8.1f | %5.0f%%\n", nm, f1 / tf * 1e-9,
               fb / tb * 1e-9, (f1 + fb) / (tf + tb) * 1e-9, (f1 + fb) / (cf + cb) * 1e-9,
               f1 / cf * 1e-9, 100.0 * (cf + cb) / (tf + tb));
        fflush(stdout);
        /* Fresh memory per call: y, the store's copy of x, the decoded x,
         * dx, and the chunk scratch (bounded by 8 MiB + the weight twice). */
        fresh_bytes += L->count * (4.0 * (double)dy->numel + 4.0 * (double)x->numel * (L->need_dx ? 3 : 2) +
                                   2 * (8.0 * 1048576 + 8.0 * (double)w->numel));
        tot_flop += L->count * (f1 + fb);
        tot_t += L->count * (tf + tb);
        tot_ceil_t += L->count * (cf + cb);
        actc_tensor_release(x);
        actc_tensor_release(w);
        actc_tensor_release(dy);
    }
    actc_ctx_free(ctx);

    /* What fresh memory costs: every conv call gets its output, the store's
     * copy of x, the decoded x, dx and its scratch from the allocator; in
     * this VM the first touch of a fresh page is a page fault. */
    {
        const size_t bytes = (size_t)64 << 20;
        double t_fresh = 1e30, t_warm = 1e30;
        for (int r = 0; r < 3; r++) {
            char *p = actc_mem_alloc(ACTC_MEM_SCRATCH, bytes);
            if (!p) break;
            double t0 = now();
            memset(p, 1, bytes);
            double t1 = now();
            memset(p, 2, bytes);
            double t2 = now();
            actc_mem_free(p);
            if (t1 - t0 < t_fresh) t_fresh = t1 - t0;
            if (t2 - t1 < t_warm) t_warm = t2 - t1;
        }
        double per_byte = (t_fresh - t_warm) / (double)bytes;
        printf("\nallocator: writing a fresh 64 MiB block %.1f GB/s, the same block again %.1f GB/s\n",
               bytes / t_fresh * 1e-9, bytes / t_warm * 1e-9);
        printf("the convs of one step allocate ~%.0f MiB of fresh tensors and scratch: ~%.3f s of "
               "first-touch page faults in the times above\n",
               fresh_bytes / 1048576.0, fresh_bytes * per_byte);
    }
    printf("\nResNet-18 convs, one training step of %d images: %.1f GFLOP in %.3f s = %.1f GFLOP/s "
           "(sgemm ceiling %.1f GFLOP/s, %.0f%%)\n",
           batch, tot_flop * 1e-9, tot_t, tot_flop / tot_t * 1e-9, tot_flop / tot_ceil_t * 1e-9,
           100.0 * tot_ceil_t / tot_t);
    printf("convs alone allow %.1f images/s\n", batch / tot_t);
    return 0;
}
