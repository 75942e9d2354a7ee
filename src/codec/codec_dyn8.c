/* 8-bit block-wise dynamic quantization (Dettmers et al. 2022, "8-bit
 * optimizers via block-wise quantization"), AGoQ's gradient format; see
 * ../shared/reference/blockwise-formats.md.
 *
 * The signed dynamic map: decades i = 0..6 at scale 10^(i-6), decade i
 * holding 2^i values per sign at the midpoints of linspace(0.1, 1, 2^i + 1)
 * times the scale, plus 0 and 1.0: 127 positive, 127 negative, 0 and 1.0,
 * 256 entries sorted ascending (the code is the index).  There is no -1:
 * the most negative entry is -0.99296875, so an element equal to -absmax
 * comes back 0.7% smaller in magnitude, as in bitsandbytes.  The entries are
 * computed in double and rounded once to float.
 *
 * Per block of G elements (any G >= 1; the last block holds the rest and its
 * absmax only those): absmax = max |x| over the finite elements, stored as
 * fp32; v = x / absmax; code = the index of the nearest map entry, i.e.
 * the number of the 255 midpoints of neighbouring entries below v (a v on
 * a midpoint goes up), what a binary search over the midpoints finds.
 * Decode: map[code] * absmax.
 *
 * The search: eight halving steps are eight dependent table lookups, which
 * vectorise only as gathers (slow: 4 ns an element on AMD Zen 4).  Instead
 * the sign, the exponent and the top 6 mantissa bits of v pick one of 3200
 * buckets, whose table entry is the number of midpoints below every v of
 * the bucket; no bucket holds more than one midpoint (a bucket, 1/64 of a
 * binade, is narrower than the map's spacing everywhere), so one comparison
 * with the next midpoint finishes: two lookups instead of eight (1 ns), with
 * the same result as the binary search (the test compares them on, and one
 * and two floats either side of, every midpoint).
 *
 * Payload: ceil(n/G) little-endian fp32 absmaxes, then n code bytes.  The
 * bytes depend only on the input and G (no randomness, no thread count),
 * so ranks of an all-reduce can quantize shards of one buffer independently.
 *
 * Non-finite input never makes a non-finite output: the absmax ignores NaN
 * and +-inf, NaN encodes as 0, +inf as 1.0 and -inf as the most negative
 * entry (times the finite absmax; 0 if the block has no non-zero finite
 * element). */
#include "codec.h"
#include "quant_kernels.h"
#include "blockwise.h"
#include "../core/core.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define D8_PAR_MIN 32768
#define D8_INLINE static inline __attribute__((always_inline))
#define D8_DECADES 7
/* Buckets of the search: per sign, magnitudes below 2^-23 (all nearest to
 * 0: the smallest midpoint is 2.75e-7), the 23 binades 2^-23 .. 1 cut into
 * 2^D8_MBITS, and magnitudes >= 1. */
#define D8_MBITS 6
#define D8_E0 104 /* biased exponent of 2^-23 */
#define D8_NE 24  /* exponent classes 0 .. D8_NE per sign */
#define D8_BUCKETS ((2 * (D8_NE + 1)) << D8_MBITS)

/* ------------------------------------------------------------------------ */
/* The map                                                                   */
/* ------------------------------------------------------------------------ */

/* g_mid[255] = +inf: the comparison after the last midpoint. */
static float g_map[256], g_mid[256];
static int32_t g_start[D8_BUCKETS];
static pthread_once_t g_map_once = PTHREAD_ONCE_INIT;

/* Bucket of v, NaN counting as 0; integer arithmetic only, so it
 * vectorises. */
D8_INLINE int32_t bucket_of(float v)
{
    const uint32_t bits = bw_f32_bits(v);
    /* A mask, not a select: GCC 12 does not vectorise the select here. */
    const uint32_t u = bits & -(uint32_t)((int32_t)(bits & 0x7FFFFFFFu) <= 0x7F800000);
    int32_t e = (int32_t)((u >> 23) & 0xFFu) - (D8_E0 - 1);
    e = e < 0 ? 0 : e;
    e = e > D8_NE ? D8_NE : e;
    int32_t m = (int32_t)((u >> (23 - D8_MBITS)) & ((1u << D8_MBITS) - 1));
    m = e == 0 || e == D8_NE ? 0 : m;
    return (((int32_t)(u >> 31) * (D8_NE + 1) + e) << D8_MBITS) | m;
}

/* Number of midpoints below v. */
static int32_t count_below(float v)
{
    int32_t c = 0;
    while (c < 255 && g_mid[c] < v) c++;
    return c;
}

/* The start of every bucket: the midpoints below its smallest member (for
 * a negative bucket the one of largest magnitude; the top class reaches
 * -inf). */
static void build_buckets(void)
{
    for (int32_t s = 0; s < 2; s++)
        for (int32_t e = 0; e <= D8_NE; e++)
            for (int32_t m = 0; m < 1 << D8_MBITS; m++) {
                if ((e == 0 || e == D8_NE) && m) continue;
                /* Magnitude bits of the bucket's first member and of the
                 * next bucket's (a carry out of m is the next binade). */
                const uint32_t first = e == 0 ? 0u : (uint32_t)(e + D8_E0 - 1) << 23 | (uint32_t)m << (23 - D8_MBITS);
                const uint32_t next = e == 0 ? (uint32_t)D8_E0 << 23 : first + (1u << (23 - D8_MBITS));
                float vmin = bw_f32_from_bits(first);
                if (s) vmin = e == D8_NE ? -INFINITY : -bw_f32_from_bits(next - 1);
                g_start[bucket_of(s ? -bw_f32_from_bits(first) : bw_f32_from_bits(first))] = count_below(vmin);
            }
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void build_map(void)
{
    /* The decades' scales as literals: pow(10, i - 6) need not be exact. */
    static const double scale[D8_DECADES] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
    int k = 0;
    for (int i = 0; i < D8_DECADES; i++) {
        const int m = 1 << i;
        for (int j = 0; j < m; j++) {
            /* Midpoint of linspace(0.1, 1, m + 1)[j .. j + 1]. */
            const double lo = 0.1 + 0.9 * j / m, hi = 0.1 + 0.9 * (j + 1) / m;
            const float v = (float)(0.5 * (lo + hi) * scale[i]);
            g_map[k++] = v;
            g_map[k++] = -v;
        }
    }
    g_map[k++] = 0.0f;
    g_map[k++] = 1.0f;
    qsort(g_map, 256, sizeof *g_map, cmp_float);
    for (int j = 0; j < 255; j++) g_mid[j] = 0.5f * (g_map[j] + g_map[j + 1]);
    g_mid[255] = INFINITY;
    build_buckets();
}

const float *actc_dyn8_map(void)
{
    pthread_once(&g_map_once, build_map);
    return g_map;
}

const float *actc__dyn8_mids(void)
{
    pthread_once(&g_map_once, build_map);
    return g_mid;
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* Codes of x[0..n) with absmax amax: the bucket's start, plus one if v is
 * above the midpoint that follows it. */
D8_INLINE void quantize(const float *restrict x, size_t n, float amax, const int32_t *restrict start,
                        const float *restrict mid, uint8_t *restrict c)
{
    for (size_t i = 0; i < n; i++) {
        /* A division (exact at +-absmax, no overflow of 1/absmax).  NaN
         * (and 0/0) falls in the bucket of 0 and is above no midpoint: 0.
         * (Replacing it by 0.0f first would keep the loop from
         * vectorising.) */
        const float t = x[i] / amax;
        int32_t pos = start[bucket_of(t)];
        pos += t > mid[pos] ? 1 : 0;
        c[i] = (uint8_t)pos;
    }
}

/* out = (add ? out : 0) + map[c] * amax over n elements. */
D8_INLINE void dequantize(const uint8_t *restrict c, size_t n, float amax, const float *restrict map,
                          float *restrict out, const int add)
{
    if (add)
        for (size_t i = 0; i < n; i++) out[i] += map[c[i]] * amax;
    else
        for (size_t i = 0; i < n; i++) out[i] = map[c[i]] * amax;
}

typedef struct {
    size_t n, B, nb;
} d8_view;

static d8_view view_of(size_t n, int block)
{
    d8_view v;
    v.n = n;
    v.B = block > 0 ? (size_t)block : ACTC_DYN8_BLOCK;
    v.nb = (n + v.B - 1) / v.B;
    return v;
}

QK_CLONES static void encode_blocks(const d8_view *v, const float *x, size_t b0, size_t b1, uint8_t *absmax,
                                    uint8_t *codes)
{
    for (size_t b = b0; b < b1; b++) {
        const size_t s = b * v->B, len = v->n - s < v->B ? v->n - s : v->B;
        const float *xb = x + s;
        uint8_t *cb = codes + s;
        const float amax = bw_absmax_finite(xb, len);
        bw_put_f32(absmax + 4 * b, amax);
        quantize(xb, len, amax, g_start, g_mid, cb);
    }
}

/* Elements [e0, e1) of blocks [b0, b1): dst[i - e0] = decoded (add = 0) or
 * += decoded (add = 1). */
D8_INLINE void decode_blocks_body(const d8_view *v, const uint8_t *absmax, const uint8_t *codes, size_t b0, size_t b1,
                                  size_t e0, size_t e1, float *dst, const int add)
{
    const float *map = g_map;
    for (size_t b = b0; b < b1; b++) {
        const size_t s = b * v->B, end = v->n - s < v->B ? v->n : s + v->B;
        const size_t lo = s > e0 ? s : e0, hi = end < e1 ? end : e1;
        const float amax = bw_get_f32(absmax + 4 * b);
        dequantize(codes + lo, hi - lo, amax, map, dst + (lo - e0), add);
    }
}

QK_CLONES static void decode_blocks(const d8_view *v, const uint8_t *absmax, const uint8_t *codes, size_t b0,
                                    size_t b1, size_t e0, size_t e1, float *dst, int add)
{
    if (add)
        decode_blocks_body(v, absmax, codes, b0, b1, e0, e1, dst, 1);
    else
        decode_blocks_body(v, absmax, codes, b0, b1, e0, e1, dst, 0);
}

/* ------------------------------------------------------------------------ */
/* Plain kernels                                                             */
/* ------------------------------------------------------------------------ */

size_t actc_dyn8_bytes(size_t n, int block)
{
    const d8_view v = view_of(n, block);
    return 4 * v.nb + n;
}

void actc_dyn8_encode(const float *x, size_t n, int block, void *dst)
{
    if (!n) return;
    actc_dyn8_map();
    const d8_view v = view_of(n, block);
    uint8_t *absmax = dst, *codes = absmax + 4 * v.nb;
#pragma omp parallel if (n >= D8_PAR_MIN && v.nb > 1)
    {
        size_t lo, hi;
        actc__thread_share(v.nb, &lo, &hi);
        if (lo < hi) encode_blocks(&v, x, lo, hi, absmax, codes);
    }
}

float actc_dyn8_get_block(const void *payload, size_t n, size_t b, const uint8_t **codes, size_t *len)
{
    const d8_view v = view_of(n, 0);
    const uint8_t *absmax = payload;
    const size_t s = b * v.B;
    *codes = absmax + 4 * v.nb + s;
    *len = n - s < v.B ? n - s : v.B;
    return bw_get_f32(absmax + 4 * b);
}

void actc_dyn8_put_block(void *payload, size_t n, size_t b, float absmax, const uint8_t *codes)
{
    const d8_view v = view_of(n, 0);
    uint8_t *a = payload;
    const size_t s = b * v.B;
    bw_put_f32(a + 4 * b, absmax);
    memcpy(a + 4 * v.nb + s, codes, n - s < v.B ? n - s : v.B);
}

float actc_dyn8_encode_block(const float *x, size_t len, uint8_t *codes)
{
    actc_dyn8_map();
    const float amax = bw_absmax_finite(x, len);
    quantize(x, len, amax, g_start, g_mid, codes);
    return amax;
}

uint8_t actc_dyn8_zero_code(void)
{
    const float zero = 0.0f;
    uint8_t c;
    actc_dyn8_encode_block(&zero, 1, &c);
    return c;
}

/* Elements [e0, e1) of a payload of n: only the blocks holding them. */
static void decode_span(const void *src, size_t n, int block, size_t e0, size_t e1, float *dst, int add)
{
    e1 = e1 < n ? e1 : n;
    if (e0 >= e1) return;
    actc_dyn8_map();
    const d8_view v = view_of(n, block);
    const uint8_t *absmax = src, *codes = absmax + 4 * v.nb;
    const size_t b0 = e0 / v.B, b1 = (e1 - 1) / v.B + 1;
#pragma omp parallel if (e1 - e0 >= D8_PAR_MIN && b1 - b0 > 1)
    {
        size_t lo, hi;
        actc__thread_share(b1 - b0, &lo, &hi);
        if (lo < hi) decode_blocks(&v, absmax, codes, b0 + lo, b0 + hi, e0, e1, dst, add);
    }
}

void actc_dyn8_decode(const void *src, size_t n, int block, float *dst) { decode_span(src, n, block, 0, n, dst, 0); }

void actc_dyn8_decode_add(const void *src, size_t n, int block, float *acc)
{
    decode_span(src, n, block, 0, n, acc, 1);
}

/* ------------------------------------------------------------------------ */
/* The codec                                                                 */
/* ------------------------------------------------------------------------ */

static size_t dyn8_plan(actc_codec_args *a, size_t n)
{
    a->group = (int)view_of(n, a->group).B;
    return actc_dyn8_bytes(n, a->group);
}

static void dyn8_encode(const actc_codec_args *a, const float *x, size_t n, void *dst)
{
    actc_dyn8_encode(x, n, a->group, dst);
}

static void dyn8_decode(const actc_codec_args *a, const void *src, size_t n, float *dst)
{
    actc_dyn8_decode(src, n, a->group, dst);
}

/* The store's rows are the first axis, whatever the blocks. */
static void dyn8_decode_rows(const actc_codec_args *a, const void *src, size_t n, size_t row0, size_t nrows,
                             float *dst)
{
    const size_t rows = a->ndim > 0 && a->shape[0] > 0 ? (size_t)a->shape[0] : 1, d = n / rows;
    const size_t e0 = row0 * d < n ? row0 * d : n, e1 = (row0 + nrows) * d < n ? (row0 + nrows) * d : n;
    decode_span(src, n, a->group, e0, e1, dst, 0);
}

const actc_codec actc_codec_dyn8 = {"dyn8", dyn8_plan, dyn8_encode, dyn8_decode, dyn8_decode_rows};
