/* Index codec: non-negative integers held in floats (max-pool argmax within
 * the window, token ids) stored in the smallest of uint8/uint16/uint32 that
 * holds the largest value.  plan() scans for the maximum and sets a->width. */
#include "codec.h"
#include <string.h>

static size_t index_plan(actc_codec_args *a, const float *x, size_t n)
{
    float mx = 0.0f;
    for (size_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    a->width = mx < 256.0f ? 1 : (mx < 65536.0f ? 2 : 4);
    return n * (size_t)a->width;
}

static void index_encode(const actc_codec_args *a, const float *x, size_t n, void *dst)
{
    if (a->width == 1) {
        uint8_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = (uint8_t)x[i];
    } else if (a->width == 2) {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = (uint16_t)x[i];
    } else {
        uint32_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = (uint32_t)x[i];
    }
}

static void index_decode(const actc_codec_args *a, const void *src, size_t n, float *dst)
{
    if (a->width == 1) {
        const uint8_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
    } else if (a->width == 2) {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
    } else {
        const uint32_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
    }
}
const actc_codec actc_codec_index = {"index", index_plan, index_encode, index_decode, NULL};
