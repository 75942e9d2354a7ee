/* bench_spmm: sparse times dense (actc_spmm, y = A x) on a random graph,
 * against memcpy bandwidth measured in the same run.
 *
 *   bench_spmm [threads=2] [nodes=70000] [degree=20] [reps=10]
 *
 * The graph: nodes * degree / 2 random undirected edges (both directions
 * stored) plus self-loops, so about degree + 1 entries per row, with GCN
 * weights; x is [nodes, F] for F = 64 and 16.  Forward only, in eval
 * mode (nothing recorded; the output's allocation is inside the timing).
 *
 * Bytes touched per call: rowptr (8 (n+1)) + col and val (8 nnz) + the
 * gathered x rows (4 F nnz: every entry reads a row, wherever the cache
 * serves it from) + y (4 F n).  memcpy's figure counts read + write bytes
 * (2 per byte copied) of a buffer of the same total size, with the same
 * threads, each one contiguous share.  Best of `reps` rounds, all cases
 * interleaved, after a warm-up round; one line per case.  The machine is
 * shared: compare ratios within one run. */
#include "actc.h"
#include <omp.h>
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

static double time_memcpy(char *dst, const char *src, size_t n)
{
    const double t0 = now();
#pragma omp parallel
    {
        const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
        memcpy(dst + lo, src + lo, hi - lo);
    }
    return now() - t0;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_spmm: %s: %s\n", what, actc_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const int n = argc > 2 ? atoi(argv[2]) : 70000;
    const int degree = argc > 3 ? atoi(argv[3]) : 20;
    const int reps = argc > 4 ? atoi(argv[4]) : 10;
    if (threads < 1 || n < 2 || degree < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_spmm [threads=2] [nodes=70000] [degree=20] [reps=10]\n");
        return 2;
    }
    omp_set_num_threads(threads);

    const int64_t m = (int64_t)n * degree / 2;
    int32_t *src = malloc((size_t)m * sizeof *src), *dst = malloc((size_t)m * sizeof *dst);
    if (!src || !dst) return 1;
    for (int64_t e = 0; e < m; e++) {
        src[e] = (int32_t)(actc_rand_uniform(1, 2 * (uint64_t)e) * (float)n) % n;
        dst[e] = (int32_t)(actc_rand_uniform(1, 2 * (uint64_t)e + 1) * (float)n) % n;
    }
    actc_csr a;
    if (actc_csr_from_edges(n, m, src, dst, NULL, 1, 1, &a) != ACTC_OK) die("csr");
    free(src), free(dst);
    float *w = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)a.nnz * sizeof *w); /* a has no values yet: degrees count entries */
    if (!w || actc_csr_gcn_norm(&a, w) != ACTC_OK) die("gcn_norm");
    a.val = w;

    actc_ctx *ctx = actc_ctx_new();
    actc_ctx_set_training(ctx, 0);
    const int Fs[2] = {64, 16};
    actc_tensor *x[2];
    double best[2], bytes[2];
    for (int c = 0; c < 2; c++) {
        const int shape[2] = {n, Fs[c]};
        x[c] = actc_tensor_new(ACTC_MEM_ACT, 2, shape);
        if (!x[c]) die("x");
        for (size_t i = 0; i < x[c]->numel; i++) x[c]->data[i] = actc_rand_uniform(2, i) - 0.5f;
        bytes[c] = 8.0 * (n + 1) + 8.0 * (double)a.nnz + 4.0 * Fs[c] * ((double)a.nnz + n);
        best[c] = 1e30;
    }
    const size_t cpy = (size_t)(bytes[0] / 2);
    char *cs = malloc(cpy), *cd = malloc(cpy);
    if (!cs || !cd) return 1;
    memset(cs, 1, cpy), memset(cd, 0, cpy);
    double best_cpy = 1e30;
    for (int r = 0; r <= reps; r++) {
        for (int c = 0; c < 2; c++) {
            const double t0 = now();
            actc_tensor *y = actc_spmm(ctx, &a, NULL, x[c]);
            const double t = now() - t0;
            if (!y) die("spmm");
            actc_tensor_release(y);
            if (r > 0 && t < best[c]) best[c] = t;
        }
        const double t = time_memcpy(cd, cs, cpy);
        if (r > 0 && t < best_cpy) best_cpy = t;
    }
    const double cpy_gbs = 2.0 * (double)cpy / best_cpy * 1e-9;
    for (int c = 0; c < 2; c++) {
        const double gbs = bytes[c] / best[c] * 1e-9;
        printf("spmm n=%d nnz=%lld (%.1f per row) F=%-2d threads=%d: %7.2f ms  %6.2f GB/s touched  "
               "memcpy %6.2f GB/s  ratio %.2f\n",
               n, (long long)a.nnz, (double)a.nnz / n, Fs[c], threads, 1e3 * best[c], gbs, cpy_gbs, gbs / cpy_gbs);
    }
    actc_tensor_release(x[0]), actc_tensor_release(x[1]);
    actc_ctx_free(ctx);
    free(cs), free(cd);
    actc_csr_free(&a);
    return 0;
}
