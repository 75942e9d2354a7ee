/* Thread count for OpenMP kernels and OpenBLAS (the OpenMP build of OpenBLAS
 * follows omp_set_num_threads; we also call its own setter). */
#include "actc.h"
#include "core.h"
#include <omp.h>

void openblas_set_num_threads(int n);

void actc_set_threads(int n)
{
    if (n <= 0) return;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int actc_get_threads(void) { return omp_get_max_threads(); }

void actc__thread_share(size_t total, size_t *lo, size_t *hi)
{
    const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    *lo = total * t / nt;
    *hi = total * (t + 1) / nt;
}
