/* What the block-wise codecs (codec_block4.c, codec_dyn8.c) share: one fp32
 * absmax per block, stored little-endian at any alignment, taken over the
 * block's finite elements. */
#ifndef ACTC_BLOCKWISE_H
#define ACTC_BLOCKWISE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "codec_math.h"

#define BW_INLINE static inline __attribute__((always_inline))

static inline uint32_t bw_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bw_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Little-endian fp32 at any alignment (the payloads' absmaxes). */
static inline void bw_put_f32(uint8_t *p, float f)
{
    const uint32_t u = bw_f32_bits(f);
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(u >> (8 * k));
}

static inline float bw_get_f32(const uint8_t *p)
{
    return bw_f32_from_bits((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* max |x| over the finite elements (0 if none).  On the bit patterns:
 * non-negative floats order like their bits, and a signed integer max
 * reduction vectorises (even on SSE2) where a float one (NaN semantics) or
 * an unsigned one does not. */
BW_INLINE float bw_absmax_finite(const float *x, size_t n)
{
    int32_t mx = 0;
    for (size_t i = 0; i < n; i++) {
        const int32_t b = actc__absmax_bits(x[i]);
        mx = b > mx ? b : mx;
    }
    return bw_f32_from_bits((uint32_t)mx);
}
#endif
