/* Thread count for OpenMP kernels and OpenBLAS (the OpenMP build of OpenBLAS
 * follows omp_set_num_threads; we also call its own setter). */
#include "actc.h"
#include <omp.h>

void openblas_set_num_threads(int n);

void actc_set_threads(int n)
{
    if (n <= 0) return;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int actc_get_threads(void) { return omp_get_max_threads(); }
