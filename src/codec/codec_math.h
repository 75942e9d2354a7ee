/* The codecs' per-element and per-group arithmetic, shared by the CPU
 * kernels (quant_kernels.c, codec_block4.c, codec_dyn8.c, codec_mask.c) and
 * the CUDA kernels (cuda/codec_cuda.cu): both sides call these functions, so
 * a payload's bytes are the same whichever side wrote it.  The CPU files
 * arrange the calls for vectorisation, the CUDA file for warps; neither
 * re-implements a rounding rule, a meta or a table lookup. */
#ifndef ACTC_CODEC_MATH_H
#define ACTC_CODEC_MATH_H
#include "../core/hostdev.h"
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* Stochastic k-bit quantizer (layout: quant_kernels.h)                       */
/* ------------------------------------------------------------------------ */

#define ACTC_QUANT_META 4     /* bytes of meta per group                  */
#define ACTC_BF16_MAX_BITS 0x7F7Fu /* largest finite bfloat16             */

/* Bytes of a run of n codes at b bits. */
ACTC_HD size_t actc__quant_run_bytes(size_t n, int b) { return (n * (size_t)b + 7) / 8; }

/* Bits clamped to the supported 1..8 (policies validate; this keeps a bad
 * value from ever indexing out of range). */
ACTC_HD int actc__quant_clamp_bits(int b) { return b < 1 ? 1 : b > 8 ? 8 : b; }

/* What the encoder and decoder of a run need, derived from the stored meta
 * only, so both sides use the rounded Z and R. */
typedef struct {
    float z;     /* zero point                              */
    float scale; /* B / R: value offset -> code units (0 if R == 0) */
    float step;  /* R / B: code units -> value offset       */
    int bits;
} actc__qparams;

/* bf16 >= f for f >= 0 (including +inf), saturated to the largest finite
 * bf16: on non-negative floats the bit pattern is monotone, so rounding up
 * is a ceiling on the top 16 bits. */
ACTC_HD uint16_t actc__bf16_up_pos(float f)
{
    const uint32_t h = (actc__float_bits(f) + 0xFFFFu) >> 16;
    return (uint16_t)(h > ACTC_BF16_MAX_BITS ? ACTC_BF16_MAX_BITS : h);
}

/* bf16 <= f (toward -inf), magnitude saturated to the largest finite bf16. */
ACTC_HD uint16_t actc__bf16_down(float f)
{
    const uint32_t u = actc__float_bits(f);
    /* Negative: round the magnitude up; positive: truncate. */
    uint32_t h = (u & 0x80000000u) ? (u + 0xFFFFu) >> 16 : u >> 16;
    if ((h & 0x7FFFu) > ACTC_BF16_MAX_BITS) h = (h & 0x8000u) | ACTC_BF16_MAX_BITS;
    return (uint16_t)h;
}

/* Smallest float >= a - b (a >= b, both finite or a = +inf).  The double
 * difference can itself be rounded when the exponents are far apart (a = 1,
 * b = -1e-30), so recover its error exactly (Knuth's TwoSum) and step up one
 * float when the rounding went below the true value. */
ACTC_HD float actc__diff_up(float a, float b)
{
    const double x = a, y = -(double)b;
    const double s = x + y, yy = s - x, err = (x - (s - yy)) + (y - yy);
    float f = (float)s;
    if ((double)f < s || ((double)f == s && err > 0)) f = actc__bits_float(actc__float_bits(f) + 1u);
    return f;
}

/* Meta of a run with raw minimum mn and maximum mx (NaNs excluded; mn > mx
 * means no finite value): Z = mn rounded down to bf16, R = mx - Z rounded up,
 * so Z + R >= mx holds exactly; saturates at the largest finite bf16.  Z
 * and R little-endian, in that order.  bits: 1..8. */
ACTC_HD void actc__quant_meta_of(float mn, float mx, int bits, uint8_t meta[ACTC_QUANT_META])
{
    uint16_t zb = 0, rb = 0;
    if (mn <= mx) {
        zb = actc__bf16_down(mn);
        const float z = actc__bf16_to_f32(zb);
        rb = actc__bf16_up_pos(actc__diff_up(mx, z));
        /* A range below B / FLT_MAX would make the scale B / R overflow;
         * widen it to the smallest range whose scale is finite.  The pair
         * still covers the group and the codes stay unbiased. */
        const float B = (float)((1 << bits) - 1);
        const float rmin = (float)((double)B / FLT_MAX * (1.0 + 1e-6));
        if (rb != 0 && actc__bf16_to_f32(rb) < rmin) rb = actc__bf16_up_pos(rmin);
    }
    meta[0] = (uint8_t)zb;
    meta[1] = (uint8_t)(zb >> 8);
    meta[2] = (uint8_t)rb;
    meta[3] = (uint8_t)(rb >> 8);
}

ACTC_HD actc__qparams actc__quant_params_of(const uint8_t meta[ACTC_QUANT_META], int bits)
{
    const float z = actc__bf16_to_f32((uint16_t)(meta[0] | meta[1] << 8));
    const float r = actc__bf16_to_f32((uint16_t)(meta[2] | meta[3] << 8));
    const float B = (float)((1 << bits) - 1);
    actc__qparams p = {z, r > 0.0f ? B / r : 0.0f, r / B, bits};
    return p;
}

/* The code of one element from its scaled value u = (x - Z) * B / R and
 * its hash input h (the run's seed + the element's index in the run): u
 * clamped to [0, B], code = floor(u + r) for a 24-bit uniform r in [0, 1),
 * i.e. floor(u) + 1 with probability frac(u).  (Adding r to u in float
 * rounds away r's bits below u's ulp; that shifts the probability by at most
 * 2^-17, far below the noise of the rounding itself.)  u + r can round up to
 * B + 1 at u = B, hence the final clamp.
 *
 * The clamps work on integers: GCC will not if-convert a float compare
 * against a constant under the default -ftrapping-math, and the loop would
 * not vectorise.  As signed integers, the bit patterns of non-negative floats
 * are ordered like the values, and negative floats (and -NaN) are negative,
 * so they clamp to 0; a +NaN clamps to B.  top = the bits of (float)B.  (A
 * NaN's sign: see actc__quant_chunk_pack.) */
ACTC_HD uint8_t actc__quant_round_code(float u, uint32_t h, int32_t B, int32_t top)
{
    int32_t ub = (int32_t)actc__float_bits(u);
    ub = ub > 0 ? ub : 0;
    ub = ub < top ? ub : top;
    const float r = (float)(int32_t)(actc__hash32(h) >> 8) * 0x1p-24f;
    const int32_t c = (int32_t)(actc__bits_float((uint32_t)ub) + r);
    return (uint8_t)(c < B ? c : B);
}

/* The scaled value of x: (x - Z) * B / R, a subtraction and a multiply
 * (never fused). */
ACTC_HD float actc__quant_scaled(float x, float z, float scale) { return (x - z) * scale; }
/* The value of a code: Z + code * R / B. */
ACTC_HD float actc__quant_value(unsigned code, float z, float step) { return z + (float)code * step; }

/* Bit packing: eight codes of b bits in the bytes of a little-endian word
 * (code k in byte k) <-> one 8b-bit field, code k at bit k*b. */
ACTC_HD uint64_t actc__rep64(uint64_t v, int lane)
{
    uint64_t r = 0;
    for (int s = 0; s < 64; s += lane) r |= v << s;
    return r;
}
ACTC_HD uint64_t actc__low_mask(int k) { return k >= 64 ? ~0ull : (1ull << k) - 1; }

/* Merge neighbouring lanes three times (8 -> 16 -> 32 -> 64 bits). */
ACTC_HD uint64_t actc__squeeze8(uint64_t w, const int b)
{
    w = (w & actc__rep64(actc__low_mask(b), 16)) | ((w >> (8 - b)) & actc__rep64(actc__low_mask(b) << b, 16));
    w = (w & actc__rep64(actc__low_mask(2 * b), 32)) |
        ((w >> (16 - 2 * b)) & actc__rep64(actc__low_mask(2 * b) << (2 * b), 32));
    w = (w & actc__low_mask(4 * b)) | ((w >> (32 - 4 * b)) & (actc__low_mask(4 * b) << (4 * b)));
    return w;
}
/* The inverse of squeeze (bits above 8b ignored). */
ACTC_HD uint64_t actc__spread8(uint64_t w, const int b)
{
    w = (w & actc__low_mask(4 * b)) | ((w << (32 - 4 * b)) & (actc__low_mask(4 * b) << 32));
    w = (w & actc__rep64(actc__low_mask(2 * b), 32)) |
        ((w << (16 - 2 * b)) & actc__rep64(actc__low_mask(2 * b) << 16, 32));
    w = (w & actc__rep64(actc__low_mask(b), 16)) | ((w << (8 - b)) & actc__rep64(actc__low_mask(b) << 8, 16));
    return w;
}

/* The minimum and maximum of a run, NaNs ignored: element i of a run of n
 * goes to lane i % ACTC_QUANT_LANES while a whole row of lanes remains, the
 * rest to lane 0 in order; then lanes j and j + w are merged for w = 16, 8,
 * 4, 2, 1.  The CPU's vector loop and a CUDA warp both follow this order,
 * which decides between -0.0 and +0.0 (different bf16 zero points). */
#define ACTC_QUANT_LANES 32
ACTC_HD void actc__minmax_step(float v, float *mn, float *mx)
{
    *mn = v < *mn ? v : *mn;
    *mx = v > *mx ? v : *mx;
}
/* Lane j's (mn, mx) merged with lane j + w's (omn, omx). */
ACTC_HD void actc__minmax_merge(float omn, float omx, float *mn, float *mx)
{
    *mn = omn < *mn ? omn : *mn;
    *mx = omx > *mx ? omx : *mx;
}

/* ActNN's per-sample squared range (actc_quant_range_sq): a group's
 * (max - min)^2 in double (the difference of two huge floats may overflow
 * a float), 0 for a constant group or one of NaNs only.  A sample's groups
 * are summed in one order on the CPU and a CUDA warp alike, so the sums
 * agree bit for bit: group g into lane g % ACTC_QUANT_LANES in order, then
 * lanes j and j + w merged (lane j's sum first) for w = 16, 8, 4, 2, 1. */
ACTC_HD double actc__range_sq_term(float mn, float mx)
{
    /* mn == mx gives 0 without subtracting: inf - inf (a group of one
     * infinity and NaNs) would be a NaN whose bits differ between CPUs
     * and GPUs. */
    return mn < mx ? ((double)mx - mn) * ((double)mx - mn) : 0.0;
}

/* The seed of group gi (sample-major over the tensor) of the per-group
 * quantizer; element i of the group draws from hash input seed + i. */
#define ACTC_QUANT_GROUP_TAG 0x51475250ULL /* "QGRP" */
ACTC_HD uint32_t actc__quant_group_seed(uint64_t key, uint64_t gi)
{
    return (uint32_t)actc__rng_key(key, gi, ACTC_QUANT_GROUP_TAG);
}

/* One chunk of a run (elements i0 .. i0 + m - 1, m <= 8, i0 a multiple of
 * 8): the m codes packed at b bits, code k at bit k*b, the rest zero; the
 * chunk's bytes are the low actc__quant_run_bytes(m, b) bytes, little
 * endian.  What the CPU's tile loops compute for those elements.
 *
 * The CUDA kernels' path.  (x - Z) * S is a NaN only where x is one (Z and
 * S are finite, and S = 0 only for a group without infinities), and a
 * CPU's arithmetic returns that NaN, sign included, where a GPU's returns
 * its one canonical +NaN (hostdev.h): so a NaN is taken with x's own sign,
 * which decides its code (0 or B), as on the CPU.  The CPU's vectorised
 * loops need no such step. */
ACTC_HD uint64_t actc__quant_chunk_pack(const float v[8], int m, actc__qparams p, uint32_t seed, uint32_t i0)
{
    const int32_t B = (1 << p.bits) - 1, top = (int32_t)actc__float_bits((float)B);
    uint64_t w = 0;
    for (int k = 0; k < m; k++) {
        const float u = actc__quant_scaled(v[k], p.z, p.scale);
        w |= (uint64_t)actc__quant_round_code(u == u ? u : v[k], seed + i0 + (uint32_t)k, B, top) << (8 * k);
    }
    return actc__squeeze8(w, p.bits);
}
/* The inverse: the m values of a chunk from its packed word. */
ACTC_HD void actc__quant_chunk_values(uint64_t packed, int m, actc__qparams p, float out[8])
{
    const uint64_t w = actc__spread8(packed, p.bits);
    for (int k = 0; k < m; k++) out[k] = actc__quant_value((unsigned)(w >> (8 * k)) & 0xFFu, p.z, p.step);
}

/* ------------------------------------------------------------------------ */
/* 1-bit mask (codec_mask.c): bit i of the payload is x[i] > 0               */
/* ------------------------------------------------------------------------ */

ACTC_HD unsigned actc__mask_bit(float x) { return x > 0.0f; }

/* ------------------------------------------------------------------------ */
/* Block-wise formats (codec_block4.c, codec_dyn8.c)                          */
/* ------------------------------------------------------------------------ */

/* max |x| step of the block's absmax on bit patterns: non-finite values
 * count as 0 (non-negative floats order like their bits). */
ACTC_HD int32_t actc__absmax_bits(float x)
{
    const int32_t b = (int32_t)(actc__float_bits(x) & 0x7FFFFFFFu);
    return b < 0x7F800000 ? b : 0;
}

/* v = x / absmax with NaN (also 0/0 in an all-zero block) as 0.  A division,
 * not a multiply by the reciprocal: exact at x = +-absmax and no overflow
 * of 1/absmax for subnormal blocks. */
ACTC_HD float actc__block_scaled(float x, float amax)
{
    const float v = x / amax;
    return v == v ? v : 0.0f;
}

/* What a 4-bit format's encoder needs (codec_block4.c derives it from the
 * format's value table): the levels it rounds to in ascending order (the 8
 * magnitudes of a sign-magnitude format, else all 16 values) with their
 * codes, and the value of every code. */
typedef struct {
    int n;           /* levels: 8 or 16                                 */
    int sm;          /* 1: sign-magnitude (the FP4s), the sign in bit 3 */
    float level[16]; /* ascending                                       */
    int code[16];    /* code of each level (sign bit excluded)          */
    float mid[15];   /* (level[k] + level[k+1]) / 2: nearest's bounds   */
    int step[15];    /* code[k+1] - code[k]: a count of midpoints below
                        v, each weighted by it, sums to v's code        */
    float value[16]; /* code -> value in [-1, 1] (decode)               */
} actc__b4_levels;

/* The sign bit of a sign-magnitude code: x's own sign bit (so -0.0 and -NaN
 * encode as 0b1000). */
ACTC_HD int actc__b4_sign(float x) { return (int)(actc__float_bits(x) >> 31) << 3; }

/* Nearest code of x in a block of absmax amax: each midpoint below v adds
 * the code step between its two levels (a tie goes to the larger level).
 * mid, step: nm = (sm ? 7 : 15) entries, c0 = the lowest level's code. */
ACTC_HD uint8_t actc__b4_nearest(float x, float amax, const float *mid, const int *step, int c0, const int sm)
{
    const int nm = sm ? 7 : 15;
    const float v = actc__block_scaled(x, amax), a = sm ? fabsf(v) : v;
    int c = c0;
#if !defined(__CUDACC__)
#pragma GCC unroll 16
#endif
    for (int k = 0; k < nm; k++) c += a > mid[k] ? step[k] : 0;
    if (sm) c |= actc__b4_sign(x);
    return (uint8_t)c;
}

/* Stochastic rounding of x between the two levels around v: the lower and
 * upper codes (*lo, *hi) and the fraction p between them (the caller rounds
 * p at one bit with actc__quant_round_code and picks hi on a 1).  p is a
 * division, exactly 0 and 1 on the levels.  level, code: nl = (sm ? 8 :
 * 16) entries. */
ACTC_HD float actc__b4_between(float x, float amax, const float *level, const int *code, const int sm, uint8_t *lo,
                               uint8_t *hi)
{
    const int nl = sm ? 8 : 16;
    const float v = actc__block_scaled(x, amax), a = sm ? fabsf(v) : v;
    float tl = level[0], th = level[1];
    int cl = code[0], ch = code[1];
    /* Level nl - 1 is never the lower one: v = 1 is p = 1 above nl - 2. */
#if !defined(__CUDACC__)
#pragma GCC unroll 16
#endif
    for (int k = 1; k < nl - 1; k++) {
        const int c = a >= level[k];
        tl = c ? level[k] : tl;
        th = c ? level[k + 1] : th;
        cl = c ? code[k] : cl;
        ch = c ? code[k + 1] : ch;
    }
    const int s = sm ? actc__b4_sign(x) : 0;
    *lo = (uint8_t)(cl | s);
    *hi = (uint8_t)(ch | s);
    return (a - tl) / (th - tl);
}

/* The seed of block b of a stochastic 4-bit encoding; element i of the
 * block draws from hash input seed + i. */
#define ACTC_B4_TAG 0x42344B53ULL /* "B4KS" */
ACTC_HD uint32_t actc__b4_seed(uint64_t key, uint64_t b) { return (uint32_t)actc__rng_key(key, b, ACTC_B4_TAG); }

/* The code of element i of a block (absmax amax, seed as above): nearest,
 * or with sr stochastic rounding between the two levels around it. */
ACTC_HD uint8_t actc__b4_code(float x, float amax, const actc__b4_levels *L, int sr, uint32_t seed, uint32_t i)
{
    if (!sr) return actc__b4_nearest(x, amax, L->mid, L->step, L->code[0], L->sm);
    uint8_t lo, hi;
    const float p = actc__b4_between(x, amax, L->level, L->code, L->sm, &lo, &hi);
    return actc__quant_round_code(p, seed + i, 1, (int32_t)actc__float_bits(1.0f)) ? hi : lo;
}

/* The 8-bit dynamic map's code of t = x / absmax: the number of the 255
 * midpoints of neighbouring map entries below t (NaN as 0), found by
 * binary search (the CPU finds the same count through a bucket table,
 * codec_dyn8.c; its test compares the two on every midpoint). */
ACTC_HD uint8_t actc__dyn8_search(float t, const float mid[255])
{
    t = t == t ? t : 0.0f;
    int lo = 0, hi = 255; /* the count is in [lo, hi] */
    while (lo < hi) {
        const int m = (lo + hi) / 2;
        if (mid[m] < t)
            lo = m + 1;
        else
            hi = m;
    }
    return (uint8_t)lo;
}
/* ------------------------------------------------------------------------ */
/* DIVISION's dual-precision codec (codec_division.c)                        */
/* ------------------------------------------------------------------------ */

/* iparam[1] of DIVISION's codec (codec.h): both parts, or one alone. */
enum { ACTC_DIV_FULL = 0, ACTC_DIV_LFC_ONLY = 1, ACTC_DIV_HFC_ONLY = 2 };

/* A tensor as DIVISION sees it (codec_division.c computes it from the
 * codec's arguments, actc__division_view). */
typedef struct {
    size_t S, C, M;       /* samples, channels, elements per plane            */
    size_t stride;        /* distance between consecutive map elements        */
    size_t d[3], b[3];    /* map dims (leading 1s) and block sizes            */
    size_t nbk[3], nb;    /* blocks per axis, per plane                       */
    int q, mode;
    size_t meta_sz, lfc_sz, code_sz; /* bytes per plane of each section       */
    size_t cp;            /* small planes: planes per chunk                    */
} actc__div_view;

/* The seed of a tensor's codes: element m of plane p draws from hash
 * input seed + p * M + m. */
#define ACTC_DIV_TAG 0x44495653ULL /* "DIVS" */
ACTC_HD uint32_t actc__div_seed(uint64_t key) { return (uint32_t)actc__rng_key(key, 0, ACTC_DIV_TAG); }

/* An element's residual against its block's stored mean l; a NaN (x or l
 * one, or inf - inf) as the quiet NaN 0x7FC00000, whose code is B: which
 * NaN the subtraction returns differs between a GPU (one canonical +NaN),
 * x86 (the operand's, or -NaN for inf - inf) and ARM (+NaN for inf - inf). */
ACTC_HD float actc__div_diff(float x, float l)
{
    const float d = x - l;
    return d == d ? d : actc__bits_float(0x7FC00000u);
}
/* The residual scaled for the quantizer (z = Z, c = B / R), and the decoded
 * value (c = R / B), a NaN (a block mean that is one) as 0x7FC00000. */
ACTC_HD float actc__div_scaled(float x, float l, float z, float c) { return (actc__div_diff(x, l) - z) * c; }
ACTC_HD float actc__div_value(unsigned q, float z, float c, float l)
{
    const float v = (z + (float)q * c) + l;
    return v == v ? v : actc__bits_float(0x7FC00000u);
}
#endif
