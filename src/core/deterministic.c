/* Results that do not depend on the thread count: the switch
 * (actc_set_deterministic, which the dense products of gemm.c follow) and
 * the fixed-order sum of squares (actc__sum_sq_diff). */
#include "actc.h"
#include "core.h"
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
