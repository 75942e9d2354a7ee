/* Index codec: non-negative integers held in floats (max-pool argmax within
 * the window, token ids) stored as uint8, uint16 or uint32.  The width is
 * the caller's (args->width, from actc_index_width of the largest value it
 * will encode): plan never reads the data, so a payload's size is known
 * from the shape and the arguments alone.  A width other than 1, 2 or 4 is
 * taken as 4, which holds every index. */
#include "codec.h"
#include <string.h>

static size_t index_plan(actc_codec_args *a, size_t n)
{
    if (a->width != 1 && a->width != 2) a->width = 4;
    return n * (size_t)a->width;
}

int actc_index_width(double max_value) { return max_value < 256.0 ? 1 : max_value < 65536.0 ? 2 : 4; }

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

/* Elements [i0, i0 + n) of the payload into dst. */
static void decode_span(int width, const void *src, size_t i0, size_t n, float *dst)
{
    if (width == 1) {
        const uint8_t *s = (const uint8_t *)src + i0;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
    } else if (width == 2) {
        const uint16_t *s = (const uint16_t *)src + i0;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
    } else {
        const uint32_t *s = (const uint32_t *)src + i0;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
    }
}

static void index_decode(const actc_codec_args *a, const void *src, size_t n, float *dst)
{
    decode_span(a->width, src, 0, n, dst);
}

static void index_decode_rows(const actc_codec_args *a, const void *src, size_t n, size_t row0, size_t nrows,
                              float *dst)
{
    const size_t per = a->ndim > 0 && a->shape[0] > 0 ? n / (size_t)a->shape[0] : n;
    decode_span(a->width, src, row0 * per, nrows * per, dst);
}
const actc_codec actc_codec_index = {"index", index_plan, index_encode, index_decode, index_decode_rows};
