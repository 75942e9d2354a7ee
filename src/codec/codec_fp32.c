/* fp32 codec: a plain copy (the `none` policy and EXACT saves). */
#include "codec.h"
#include <string.h>

static size_t fp32_plan(actc_codec_args *a, size_t n)
{
    (void)a;
    return n * sizeof(float);
}
static void fp32_encode(const actc_codec_args *a, const float *x, size_t n, void *dst)
{
    (void)a;
    memcpy(dst, x, n * sizeof(float));
}
static void fp32_decode(const actc_codec_args *a, const void *src, size_t n, float *dst)
{
    (void)a;
    memcpy(dst, src, n * sizeof(float));
}
static void fp32_decode_rows(const actc_codec_args *a, const void *src, size_t n, size_t row0, size_t nrows,
                             float *dst)
{
    const size_t d = n / (size_t)a->shape[0];
    memcpy(dst, (const float *)src + row0 * d, nrows * d * sizeof(float));
}
const actc_codec actc_codec_fp32 = {"fp32", fp32_plan, fp32_encode, fp32_decode, fp32_decode_rows};
