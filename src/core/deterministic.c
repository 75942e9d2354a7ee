/* Results that do not depend on the thread count: the switch
 * (actc_set_deterministic), the one place dense products go to OpenBLAS
 * (actc__sgemm) and the fixed-order sum of squares (actc__sum_sq_diff).
 *
 * Why a wrapper: a threaded OpenBLAS sgemm splits the product by the thread
 * count, and its sums differ in the last bits between 1, 2 and 3 threads (a
 * weight gradient [256 x 784] over 32 rows already does).  Under
 * actc_set_deterministic the product is cut into tiles whose shape depends
 * only on the product's shape, each computed by a single-threaded sgemm
 * (OpenBLAS runs on one thread inside an OpenMP parallel region), so every
 * element is summed in the same order whatever the thread count.  Otherwise
 * the call goes straight to OpenBLAS. */
#include "actc.h"
#include "core.h"
#include <cblas.h>
#include <omp.h>

#include <string.h>

static int g_deterministic;

actc_status actc_set_deterministic(int on)
{
    /* oneDNN's weight gradient of a convolution is reduced across threads in
     * an order set by their number; im2col + actc__sgemm is not. */
    if (on && strcmp(actc_get_conv_backend(), "dnnl") == 0)
        return actc_set_error(ACTC_ERR_INVALID, "deterministic mode: the convolution backend is forced to dnnl, "
                                                "whose weight gradients depend on the thread count (use auto or "
                                                "im2col)");
    g_deterministic = on != 0;
    return ACTC_OK;
}

int actc_get_deterministic(void) { return g_deterministic; }

/* The tile edge along the split dimension: at least 64 rows (sgemm keeps
 * its speed on panels that wide), at most 24 tiles so that 1-3 threads
 * share them evenly; a multiple of 16.  A function of the size only. */
static int tile_of(int dim)
{
    int t = (dim + 23) / 24;
    t = (t + 15) / 16 * 16;
    return t < 64 ? 64 : t;
}

static void tile_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc, int split_rows, int t0, int t1)
{
    /* Row tile [t0, t1) of C needs rows t0.. of op(A); a column tile needs
     * columns t0.. of op(B).  Row-major: row r of A is A + r*lda, row r of
     * A^T is column r of A, i.e. A + r. */
    if (split_rows)
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, t1 - t0, N, K,
                    alpha, A + (ta ? (size_t)t0 : (size_t)t0 * lda), lda, B, ldb, beta, C + (size_t)t0 * ldc, ldc);
    else
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, t1 - t0, K,
                    alpha, A, lda, B + (tb ? (size_t)t0 * ldb : (size_t)t0), ldb, beta, C + t0, ldc);
}

void actc__sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    if (!g_deterministic) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                    lda, B, ldb, beta, C, ldc);
        return;
    }
    const int split_rows = M >= N, dim = split_rows ? M : N, tile = tile_of(dim), nt = (dim + tile - 1) / tile;
    if (omp_in_parallel()) { /* already one thread of a team: OpenBLAS runs single-threaded */
        for (int t = 0; t < nt; t++)
            tile_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, split_rows, t * tile,
                      t * tile + tile < dim ? t * tile + tile : dim);
        return;
    }
    /* An active region even for one tile, so that OpenBLAS does not thread
     * inside it (a region of one thread is inactive, but then OpenBLAS has
     * one thread too). */
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < nt; t++)
        tile_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, split_rows, t * tile,
                  t * tile + tile < dim ? t * tile + tile : dim);
}

/* Blocks of a fixed count (not of the thread count), each summed in one
 * order, the blocks' sums added in block order: the same result at any
 * thread count. */
#define SUM_BLOCKS 64

double actc__sum_sq_diff(const float *a, const float *b, size_t n)
{
    double part[SUM_BLOCKS];
    const size_t per = (n + SUM_BLOCKS - 1) / SUM_BLOCKS;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int k = 0; k < SUM_BLOCKS; k++) {
        const size_t lo = (size_t)k * per < n ? (size_t)k * per : n, hi = lo + per < n ? lo + per : n;
        double s = 0.0;
        if (a && b) {
#pragma omp simd reduction(+ : s)
            for (size_t i = lo; i < hi; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        } else if (a || b) {
            const float *x = a ? a : b;
#pragma omp simd reduction(+ : s)
            for (size_t i = lo; i < hi; i++) s += (double)x[i] * x[i];
        }
        part[k] = s;
    }
    double s = 0.0;
    for (int k = 0; k < SUM_BLOCKS; k++) s += part[k];
    return s;
}
