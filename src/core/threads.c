/* Each thread's share of a loop (the thread count is a setting:
 * settings.c), and the bulk copies and fills of a step on the threads
 * (one thread's memcpy or memset of a step's buffer is a serial section that
 * grows with the batch: at 16 threads it costs what 16 times its bytes of
 * parallel work do). */
#include "actc.h"
#include "core.h"
#include <omp.h>
#include <string.h>

/* 256 KiB a thread at least: below that the fork costs more than it saves. */
#define COPY_PAR_MIN ((size_t)1 << 16)

void actc__copy_floats(float *dst, const float *src, size_t n)
{
    if (n < 2 * COPY_PAR_MIN || omp_in_parallel()) {
        memcpy(dst, src, n * sizeof *dst);
        return;
    }
#pragma omp parallel
    {
        size_t lo, hi;
        actc__thread_share(n, &lo, &hi);
        memcpy(dst + lo, src + lo, (hi - lo) * sizeof *dst);
    }
}

void actc__zero_floats(float *dst, size_t n)
{
    if (n < 2 * COPY_PAR_MIN || omp_in_parallel()) {
        memset(dst, 0, n * sizeof *dst);
        return;
    }
#pragma omp parallel
    {
        size_t lo, hi;
        actc__thread_share(n, &lo, &hi);
        memset(dst + lo, 0, (hi - lo) * sizeof *dst);
    }
}

void actc__repeat_row(float *dst, const float *row, size_t rows, size_t width)
{
    const int par = rows * width >= 2 * COPY_PAR_MIN && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
    for (size_t m = 0; m < rows; m++) memcpy(dst + m * width, row, width * sizeof *dst);
}

void actc__thread_share(size_t total, size_t *lo, size_t *hi)
{
    const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    *lo = total * t / nt;
    *hi = total * (t + 1) / nt;
}
