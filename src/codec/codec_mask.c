/* 1-bit mask codec: bit i of the payload is (x[i] > 0), little-endian within a
 * byte.  Lossless for ReLU (the sign of the output) and dropout keep-masks. */
#include "codec.h"

void actc_mask_pack(const float *x, size_t n, uint8_t *bits)
{
    size_t nb = (n + 7) / 8;
#pragma omp parallel for schedule(static) if (n > 262144)
    for (size_t b = 0; b < nb; b++) {
        size_t base = b * 8, end = base + 8 < n ? base + 8 : n;
        uint8_t v = 0;
        for (size_t i = base; i < end; i++) v |= (uint8_t)(actc__mask_bit(x[i]) << (i - base));
        bits[b] = v;
    }
}

void actc_mask_unpack(const uint8_t *bits, size_t n, float *dst)
{
    /* Whole bytes first (8 independent lanes the compiler vectorises), then
     * the tail. */
    const size_t full = n / 8;
#pragma omp parallel for schedule(static) if (n > 262144)
    for (size_t b = 0; b < full; b++) {
        const unsigned v = bits[b];
        float *d = dst + 8 * b;
        for (int j = 0; j < 8; j++) d[j] = (float)((v >> j) & 1u);
    }
    for (size_t i = 8 * full; i < n; i++) dst[i] = (float)((bits[i >> 3] >> (i & 7)) & 1);
}

static size_t mask_plan(actc_codec_args *a, size_t n)
{
    (void)a;
    return (n + 7) / 8;
}
static void mask_encode(const actc_codec_args *a, const float *x, size_t n, void *dst)
{
    (void)a;
    actc_mask_pack(x, n, dst);
}
static void mask_decode(const actc_codec_args *a, const void *src, size_t n, float *dst)
{
    (void)a;
    actc_mask_unpack(src, n, dst);
}
/* Rows start at bit row0 * d, which is byte-aligned when d is a multiple
 * of 8 (every feature map of the models); otherwise the head bits up to
 * the next byte are read one by one. */
static void mask_decode_rows(const actc_codec_args *a, const void *src, size_t n, size_t row0, size_t nrows,
                             float *dst)
{
    const uint8_t *bits = src;
    const size_t d = n / (size_t)a->shape[0], first = row0 * d, count = nrows * d;
    size_t head = (8 - (first & 7)) & 7;
    if (head > count) head = count;
    for (size_t i = 0; i < head; i++) dst[i] = (float)((bits[(first + i) >> 3] >> ((first + i) & 7)) & 1);
    actc_mask_unpack(bits + (first + head) / 8, count - head, dst + head);
}
const actc_codec actc_codec_mask1 = {"mask1", mask_plan, mask_encode, mask_decode, mask_decode_rows};
