/* The process-wide settings: one object (core.h) instead of a global per
 * layer, so that the setters that must refuse a combination (deterministic
 * mode with oneDNN's convolutions) read a field here rather than call into
 * the layer that owns the other setting.  actc_set_threads and
 * actc_set_deterministic live here; the backends' setters next to their
 * backends (gemm.c, src/ops/conv2d.c), which check what only they know
 * (oneDNN built in, the CPU) and write their field. */
#include "core.h"
#include <omp.h>

actc__settings actc__set = {0, 0, ACTC__BACKEND_AUTO, ACTC__BACKEND_AUTO, 32};

void openblas_set_num_threads(int n);

void actc_set_threads(int n)
{
    if (n <= 0) return;
    /* The OpenMP build of OpenBLAS follows omp_set_num_threads; its own
     * setter too, for the pthreads build. */
    actc__set.threads = n;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int actc_get_threads(void) { return omp_get_max_threads(); }

actc_status actc_set_deterministic(int on)
{
    /* oneDNN's weight gradient of a convolution is reduced across threads in
     * an order set by their number; im2col + actc__sgemm is not. */
    if (on && actc__set.conv == ACTC__CONV_DNNL)
        return actc_set_error(ACTC_ERR_INVALID, "deterministic mode: the convolution backend is forced to dnnl, "
                                                "whose weight gradients depend on the thread count (use auto or "
                                                "im2col)");
    actc__set.deterministic = on != 0;
    return ACTC_OK;
}

int actc_get_deterministic(void) { return actc__set.deterministic; }
