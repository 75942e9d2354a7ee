/* The CUDA codecs' entry points in a build without CUDA (ACTC_WITH_CUDA off
 * or nvcc not found): every call says so. */
#include "codec.h"

#define OFF_MSG "actc was built without CUDA (configure with -DACTC_WITH_CUDA=ON where nvcc is installed)"

int actc_cuda_built(void) { return 0; }

int actc_cuda_device_count(void)
{
    actc_set_error(ACTC_ERR_STATE, "actc_cuda_device_count: " OFF_MSG);
    return 0;
}

actc_status actc_cuda_encode(const actc_codec_plan *plan, const void *x, actc_dtype dtype,
                             const uint8_t *sample_bits, void *dst, size_t dst_bytes, void *stream)
{
    (void)plan, (void)x, (void)dtype, (void)sample_bits, (void)dst, (void)dst_bytes, (void)stream;
    return actc_set_error(ACTC_ERR_STATE, "actc_cuda_encode: " OFF_MSG);
}

actc_status actc_cuda_decode(const actc_codec_plan *plan, const void *src, size_t src_bytes, void *dst,
                             actc_dtype dtype, void *stream)
{
    (void)plan, (void)src, (void)src_bytes, (void)dst, (void)dtype, (void)stream;
    return actc_set_error(ACTC_ERR_STATE, "actc_cuda_decode: " OFF_MSG);
}

actc_status actc_cuda_range_sq(const void *x, actc_dtype dtype, int N, size_t D, double *out, size_t out_len,
                               void *stream)
{
    (void)x, (void)dtype, (void)N, (void)D, (void)out, (void)out_len, (void)stream;
    return actc_set_error(ACTC_ERR_STATE, "actc_cuda_range_sq: " OFF_MSG);
}
