/* 4-bit block-wise quantization as bitsandbytes defines it (Dettmers et al.
 * 2022, 2023), the activation format of AGoQ.  The tables and the error
 * figures they must reproduce are in ../shared/reference/blockwise-formats.md.
 *
 * The flattened tensor is cut into blocks of G elements (a power of two, so
 * every block starts on a byte); the last block holds the n % G remaining
 * elements, and its absmax covers only those.  Per block:
 *   absmax = max |x| over the block's finite elements (fp32, exact);
 *   v      = x / absmax, in [-1, 1];
 *   code   = the table entry nearest to v (a tie goes to the larger value;
 *            in the FP4s to the larger magnitude), or with stochastic
 *            rounding one of the two entries around v, the upper one with
 *            probability (v - lower) / (upper - lower): E[decode] = x.
 * Decode: table[code] * absmax.
 *
 * Tables (code -> value):
 *   nf4       16 normal quantiles, ascending with the code, exact 0 at 7;
 *   fp4-bnb   sign in bit 3 (0b1000 is -0), magnitudes by the low three
 *             bits 0, 1/192, 8/12, 12/12, 4/12, 6/12, 2/12, 3/12;
 *   fp4-e2m1  OCP MX E2M1 / 6: sign in bit 3, then 2 exponent bits and 1
 *             mantissa bit, magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 over 6.
 * The two FP4 tables share every value but the smallest non-zero magnitude
 * (1/192 against 1/12) and differ in bit order; the names keep them apart.
 * The FP4s are rounded in sign-magnitude form: the sign bit of x, then the
 * magnitude |v| on the 8 magnitudes (so -0.0 encodes as 0b1000).
 *
 * Payload: ceil(n/G) absmaxes as little-endian fp32, then ceil(n/2) bytes
 * of codes, element 2j in the high nibble of byte j and 2j+1 in the low one;
 * an odd n leaves the last low nibble 0.
 *
 * Args: group = G (0: ACTC_B4_BLOCK; plan rounds anything else down to a
 * power of two and clamps it to [ACTC_B4_BLOCK_MIN, ACTC_B4_BLOCK_MAX]),
 * iparam[0] = format (an unknown one becomes nf4), iparam[1] = 1 for
 * stochastic rounding; plan writes the resolved values back, so decode
 * reads what encode used.
 *
 * Non-finite input never makes a non-finite output: the absmax ignores NaN
 * and +-inf, a NaN encodes as 0 (+-0 in the FP4s), +-inf as +-1 (+-absmax;
 * in a block whose finite elements are all 0 that is 0).  A block whose
 * absmax is 0 decodes to zeros.
 *
 * Randomness (stochastic rounding): block b is seeded with
 * actc_rng_key(key, b, tag) and its element i draws from the quantizer's
 * hash of (seed + i), through actc__quant_round at one bit on the fraction
 * (quant_kernels.h), so the bytes depend on (key, element) only, never on
 * the thread count.
 *
 * Kernels: a tile of codes at a time, as quant_kernels.c does: a count of
 * the midpoints below v (branch-free compares over a compile-time number of
 * levels, which vectorise), then a packing loop; compiled per x86 ISA level
 * (QK_CLONES). */
#include "codec.h"
#include "quant_kernels.h"
#include "blockwise.h"
#include "../core/core.h"
#include <math.h>
#include <string.h>

/* Below this many elements a parallel region costs more than it saves. */
#define B4_PAR_MIN 32768
/* Codes staged per tile on the stack (even: tiles start on a byte). */
#define B4_TILE 256
#define B4_INLINE static inline __attribute__((always_inline))
#define B4_NFORMATS 3

/* Code -> value in [-1, 1], the reference file's digits. */
static const float B4_VALUES[B4_NFORMATS][16] = {
    [ACTC_B4_NF4] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                     -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                     0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
                     0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f},
    [ACTC_B4_FP4_BNB] = {0.0f, 0.005208333f, 0.6666667f, 1.0f, 0.3333333f, 0.5f, 0.1666667f, 0.25f,
                         -0.0f, -0.005208333f, -0.6666667f, -1.0f, -0.3333333f, -0.5f, -0.1666667f, -0.25f},
    [ACTC_B4_FP4_E2M1] = {0.0f, 0.5f / 6, 1.0f / 6, 1.5f / 6, 2.0f / 6, 3.0f / 6, 4.0f / 6, 1.0f,
                          -0.0f, -0.5f / 6, -1.0f / 6, -1.5f / 6, -2.0f / 6, -3.0f / 6, -4.0f / 6, -1.0f},
};
static const char *const B4_NAMES[B4_NFORMATS] = {
    [ACTC_B4_NF4] = "nf4", [ACTC_B4_FP4_BNB] = "fp4-bnb", [ACTC_B4_FP4_E2M1] = "fp4-e2m1"};

int actc_block4_format(const char *name)
{
    if (!name) return -1;
    for (int f = 0; f < B4_NFORMATS; f++)
        if (strcmp(name, B4_NAMES[f]) == 0) return f;
    return -1;
}

const char *actc_block4_format_name(int fmt) { return fmt >= 0 && fmt < B4_NFORMATS ? B4_NAMES[fmt] : NULL; }

/* The FP4s are symmetric with a sign bit: rounded as sign and magnitude. */
static int sign_magnitude(int fmt) { return fmt != ACTC_B4_NF4; }

/* ------------------------------------------------------------------------ */
/* Rounding tables                                                           */
/* ------------------------------------------------------------------------ */

/* The format's rounding tables (codec_math.h), derived from its values. */
void actc__block4_levels(int fmt, actc__b4_levels *L)
{
    fmt = fmt >= 0 && fmt < B4_NFORMATS ? fmt : ACTC_B4_NF4;
    const float *val = B4_VALUES[fmt];
    memset(L, 0, sizeof *L);
    L->sm = sign_magnitude(fmt);
    L->n = L->sm ? 8 : 16;
    memcpy(L->value, val, sizeof L->value);
    for (int k = 0; k < L->n; k++) {
        /* Insertion sort: 16 entries. */
        int j = k;
        for (; j > 0 && L->level[j - 1] > val[k]; j--) {
            L->level[j] = L->level[j - 1];
            L->code[j] = L->code[j - 1];
        }
        L->level[j] = val[k];
        L->code[j] = k;
    }
    for (int k = 0; k + 1 < L->n; k++) {
        L->mid[k] = 0.5f * (L->level[k] + L->level[k + 1]);
        L->step[k] = L->code[k + 1] - L->code[k];
    }
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* Nearest codes of x[0..m): each midpoint below v adds the code step
 * between its two levels.  nm (the midpoints) is a constant, so the inner
 * loop unrolls and the element loop vectorises. */
B4_INLINE void codes_nearest(const float *restrict x, size_t m, float amax, const actc__b4_levels *L, uint8_t *restrict q,
                             const int sm)
{
    const int nm = sm ? 7 : 15;
    float mid[15];
    int step[15];
    for (int k = 0; k < nm; k++) {
        mid[k] = L->mid[k];
        step[k] = L->step[k];
    }
    const int c0 = L->code[0];
    for (size_t i = 0; i < m; i++) q[i] = actc__b4_nearest(x[i], amax, mid, step, c0, sm);
}

/* Stochastic codes of x[0..m) (m <= B4_TILE), element i drawing from hash
 * input h0 + i: the levels around v by selects (the levels are ascending,
 * so the last one <= v wins), the fraction p between them, and the
 * quantizer's one-bit stochastic rounding of p picks the upper one.  p is a
 * division, not a multiply by a stored reciprocal: exactly 0 and 1 on the
 * levels, so a value on a level (the absmax itself) never moves. */
B4_INLINE void codes_stochastic(const float *restrict x, size_t m, float amax, const actc__b4_levels *L, uint32_t h0,
                                uint8_t *restrict q, const int sm)
{
    const int nl = sm ? 8 : 16;
    float level[16];
    int code[16];
    for (int k = 0; k < nl; k++) {
        level[k] = L->level[k];
        code[k] = L->code[k];
    }
    float p[B4_TILE];
    uint8_t lo[B4_TILE], hi[B4_TILE], up[B4_TILE];
    for (size_t i = 0; i < m; i++) p[i] = actc__b4_between(x[i], amax, level, code, sm, &lo[i], &hi[i]);
    /* p is clamped to [0, 1] there (+-inf's p too): p = 1 always rounds up. */
    actc__quant_round(p, m, 1, h0, up);
    for (size_t i = 0; i < m; i++) q[i] = up[i] ? hi[i] : lo[i];
}

/* m codes -> ceil(m/2) bytes, the first of a pair in the high nibble. */
B4_INLINE void pack_pairs(const uint8_t *restrict q, size_t m, uint8_t *restrict out)
{
    const size_t h = m / 2;
    for (size_t j = 0; j < h; j++) out[j] = (uint8_t)(q[2 * j] << 4 | q[2 * j + 1]);
    if (m & 1) out[h] = (uint8_t)(q[m - 1] << 4);
}

/* Elements [k, kend) of a block whose codes start at c, through the
 * block's scaled table st (st[code] = value * absmax), into
 * out[0 .. kend - k).  The lookups vectorise as gathers; a tree of selects
 * on the code's bits (15 blends an element, the table in registers) and
 * unpacking into a tile first measured slower on AMD Zen 4, where gathers
 * run at about the speed of scalar loads. */
B4_INLINE void unpack_range(const uint8_t *restrict c, size_t k, size_t kend, const float *restrict st,
                            float *restrict out)
{
    if (k >= kend) return;
    if (k & 1) {
        *out++ = st[c[k / 2] & 15];
        k++;
    }
    const size_t pairs = (kend - k) / 2;
    const uint8_t *cp = c + k / 2;
    for (size_t j = 0; j < pairs; j++) {
        out[2 * j] = st[cp[j] >> 4];
        out[2 * j + 1] = st[cp[j] & 15];
    }
    if ((kend - k) & 1) out[2 * pairs] = st[cp[pairs] >> 4];
}

/* ------------------------------------------------------------------------ */
/* Blocks                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
    size_t n, B, nb; /* elements, block size, blocks */
    int fmt, sr;
} b4_view;

static int resolve_block(int g)
{
    if (g <= 0) return ACTC_B4_BLOCK;
    if (g < ACTC_B4_BLOCK_MIN) return ACTC_B4_BLOCK_MIN;
    if (g > ACTC_B4_BLOCK_MAX) return ACTC_B4_BLOCK_MAX;
    while (g & (g - 1)) g &= g - 1; /* clear low bits down to the top one */
    return g;
}

static b4_view view_of(const actc_codec_args *a, size_t n)
{
    b4_view v;
    v.n = n;
    v.B = (size_t)resolve_block(a->group);
    v.nb = (n + v.B - 1) / v.B;
    v.fmt = a->iparam[0] >= 0 && a->iparam[0] < B4_NFORMATS ? a->iparam[0] : ACTC_B4_NF4;
    v.sr = a->iparam[1] != 0;
    return v;
}

typedef struct {
    b4_view v;
    actc__b4_levels L;
    const float *x;
    uint8_t *absmax, *codes; /* the payload's sections */
    uint64_t key;
} b4_encoder;

B4_INLINE void encode_blocks_body(const b4_encoder *E, size_t b0, size_t b1, const int sm)
{
    uint8_t q[B4_TILE];
    const size_t B = E->v.B, n = E->v.n;
    for (size_t b = b0; b < b1; b++) {
        const size_t s = b * B, len = n - s < B ? n - s : B;
        const float *x = E->x + s;
        const float amax = bw_absmax_finite(x, len);
        bw_put_f32(E->absmax + 4 * b, amax);
        const uint32_t seed = E->v.sr ? actc__b4_seed(E->key, b) : 0u;
        for (size_t t = 0; t < len; t += B4_TILE) {
            const size_t m = len - t < B4_TILE ? len - t : B4_TILE;
            if (E->v.sr)
                codes_stochastic(x + t, m, amax, &E->L, seed + (uint32_t)t, q, sm);
            else
                codes_nearest(x + t, m, amax, &E->L, q, sm);
            pack_pairs(q, m, E->codes + (s + t) / 2);
        }
    }
}

QK_CLONES static void encode_blocks(const b4_encoder *E, size_t b0, size_t b1)
{
    if (sign_magnitude(E->v.fmt))
        encode_blocks_body(E, b0, b1, 1);
    else
        encode_blocks_body(E, b0, b1, 0);
}

/* Elements [e0, e1) of blocks [b0, b1) into dst (dst[0] is element e0). */
QK_CLONES static void decode_blocks(const b4_view *v, const uint8_t *absmax, const uint8_t *codes, size_t b0,
                                    size_t b1, size_t e0, size_t e1, float *dst)
{
    const float *val = B4_VALUES[v->fmt];
    for (size_t b = b0; b < b1; b++) {
        const size_t s = b * v->B, end = v->n - s < v->B ? v->n : s + v->B;
        const size_t lo = s > e0 ? s : e0, hi = end < e1 ? end : e1;
        const float amax = bw_get_f32(absmax + 4 * b);
        float st[16];
        for (int k = 0; k < 16; k++) st[k] = val[k] * amax;
        unpack_range(codes + s / 2, lo - s, hi - s, st, dst + (lo - e0));
    }
}

/* ------------------------------------------------------------------------ */
/* The codec                                                                 */
/* ------------------------------------------------------------------------ */

static size_t payload_bytes(const b4_view *v) { return 4 * v->nb + (v->n + 1) / 2; }

static size_t b4_plan(actc_codec_args *a, size_t n)
{
    const b4_view v = view_of(a, n);
    a->group = (int)v.B;
    a->iparam[0] = v.fmt;
    a->iparam[1] = v.sr;
    return payload_bytes(&v);
}

static void b4_encode(const actc_codec_args *a, const float *x, size_t n, void *dst)
{
    if (!n) return;
    b4_encoder E;
    E.v = view_of(a, n);
    actc__block4_levels(E.v.fmt, &E.L);
    E.x = x;
    E.absmax = dst;
    E.codes = E.absmax + 4 * E.v.nb;
    E.key = a->key;
#pragma omp parallel if (n >= B4_PAR_MIN && E.v.nb > 1)
    {
        size_t lo, hi;
        actc__thread_share(E.v.nb, &lo, &hi);
        if (lo < hi) encode_blocks(&E, lo, hi);
    }
}

/* Decodes elements [e0, e1) into dst: only the blocks holding them. */
static void b4_decode_span(const actc_codec_args *a, const void *src, size_t n, size_t e0, size_t e1, float *dst)
{
    e1 = e1 < n ? e1 : n;
    if (e0 >= e1) return;
    const b4_view v = view_of(a, n);
    const uint8_t *absmax = src, *codes = absmax + 4 * v.nb;
    const size_t b0 = e0 / v.B, b1 = (e1 - 1) / v.B + 1;
#pragma omp parallel if (e1 - e0 >= B4_PAR_MIN && b1 - b0 > 1)
    {
        size_t lo, hi;
        actc__thread_share(b1 - b0, &lo, &hi);
        if (lo < hi) decode_blocks(&v, absmax, codes, b0 + lo, b0 + hi, e0, e1, dst);
    }
}

static void b4_decode(const actc_codec_args *a, const void *src, size_t n, float *dst)
{
    b4_decode_span(a, src, n, 0, n, dst);
}

/* The store's rows are the first axis, whatever the blocks. */
static void b4_decode_rows(const actc_codec_args *a, const void *src, size_t n, size_t row0, size_t nrows,
                           float *dst)
{
    const size_t rows = a->ndim > 0 && a->shape[0] > 0 ? (size_t)a->shape[0] : 1, d = n / rows;
    const size_t e0 = row0 * d < n ? row0 * d : n, e1 = (row0 + nrows) * d < n ? (row0 + nrows) * d : n;
    b4_decode_span(a, src, n, e0, e1, dst);
}

const actc_codec actc_codec_block4 = {"block4", b4_plan, b4_encode, b4_decode, b4_decode_rows};
