/* bf16 codec: keep the top 16 bits of each float, rounded to nearest even. */
#include "codec.h"
#include "../core/core.h"

void actc_bf16_encode(const float *x, size_t n, uint16_t *dst)
{
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = actc__f32_to_bf16(x[i]);
}

void actc_bf16_decode(const uint16_t *src, size_t n, float *dst)
{
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = actc__bf16_to_f32(src[i]);
}

static size_t bf16_plan(actc_codec_args *a, size_t n)
{
    (void)a;
    return n * sizeof(uint16_t);
}
static void bf16_encode(const actc_codec_args *a, const float *x, size_t n, void *dst)
{
    (void)a;
    actc_bf16_encode(x, n, dst);
}
static void bf16_decode(const actc_codec_args *a, const void *src, size_t n, float *dst)
{
    (void)a;
    actc_bf16_decode(src, n, dst);
}
static void bf16_decode_rows(const actc_codec_args *a, const void *src, size_t n, size_t row0, size_t nrows,
                             float *dst)
{
    const size_t d = n / (size_t)a->shape[0];
    actc_bf16_decode((const uint16_t *)src + row0 * d, nrows * d, dst);
}
const actc_codec actc_codec_bf16 = {"bf16", bf16_plan, bf16_encode, bf16_decode, bf16_decode_rows};
