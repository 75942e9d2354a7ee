/* Results that do not depend on the thread count (the switch is in
 * settings.c: actc_set_deterministic): the fixed-order sum of squares. */
#include "actc.h"
#include "core.h"
#include <omp.h>

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
