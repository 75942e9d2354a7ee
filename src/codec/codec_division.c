/* DIVISION's dual-precision codec (Wang et al., ICLR 2023, sections 4.1-4.2
 * and appendix F): a low-frequency component (LFC) kept in bfloat16 plus a
 * high-frequency residual (HFC) quantized to Q bits per sample and channel.
 *
 * A tensor is viewed as S samples x C channels x a map of M elements (1, 2
 * or 3 dimensions); one (sample, channel) map is a "plane":
 *   layout 0: the map is the last r axes, channels the axes between the first
 *             and the map ([N,C,H,W] with r = 2; [N,D] with r = 1 is one
 *             plane per sample, Theorem 3B's case; [B,T,D] with r = 1 pools
 *             each token's features);
 *   layout 1: [S, T, C...] pooled along axis 1 (a transformer's tokens), one
 *             plane per sample and feature, its elements C apart.
 * Per plane:
 *   LFC  = average pooling with block and stride B along every map axis (an
 *          axis shorter than B pools over its whole length; a last, partial
 *          block averages what it holds), stored as bf16;
 *   HFC  = x - nearest-neighbour upsampling of the *stored* LFC, so the bf16
 *          rounding of the LFC is part of what the HFC carries;
 *   codes: HFC scaled to [0, 2^Q - 1] with the plane's minimum and range and
 *          rounded stochastically (unbiased), packed at Q bits; the minimum
 *          and range are kept as bf16, rounded outwards so they cover the
 *          plane (the paper keeps minimum and step; the range is the same
 *          information, step = range / (2^Q - 1)).
 * Decode: upsample(LFC) + dequantized HFC.
 *
 * Ablations (paper section 5.4): mode 1 keeps the LFC alone (decode =
 * upsampled LFC), mode 2 the quantized HFC alone (decode = dequantized HFC,
 * the mean of each block lost).
 *
 * Payload, P = S*C planes, nb pooled blocks per plane:
 *   [meta]  4 bytes per plane (bf16 minimum, bf16 range)      (modes 0, 2)
 *   [lfc]   2*nb bytes per plane (bf16, block-major)            (modes 0, 1)
 *   [codes] ceil(M*Q/8) bytes per plane                          (modes 0, 2)
 * so a 2-D plane of N x N costs N^2 Q/8 + 4 + 2 ceil(N/B)^2 bytes, the
 * paper's per-channel figure plus the LFC.
 *
 * Args: bits = Q (1..8), iparam[0] = B, iparam[1] = mode, iparam[2] = r
 * (1..3), iparam[3] = layout; ndim/shape the tensor's.  A shape that does
 * not describe n elements is one 1-D plane of n.
 *
 * Randomness: plane p rounds with the quantizer's hash seeded by
 * actc_rng_key(key, p, tag), element i of the plane drawing from seed + i;
 * the bytes do not depend on the thread count. */
#include "codec.h"
#include "quant_kernels.h"
#include "../core/core.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DIV_TAG 0x44495653ULL /* "DIVS" */
/* Planes of up to this many elements are worked on in chunks of whole
 * planes held on the stack (residual computed once); longer planes
 * recompute their residual tile by tile. */
#define DIV_STACK_PLANE 4096
/* Residual tile of the long-plane path (a multiple of 8: tiles start on
 * byte boundaries of any Q-bit code stream). */
#define DIV_TILE 512
#define DIV_PAR_MIN 32768
/* The small-plane path is compiled per ISA level (QK_CLONES); its helpers
 * are inlined into each copy. */
#define DIV_INLINE static inline __attribute__((always_inline))

typedef struct {
    size_t S, C, M;       /* samples, channels, elements per plane            */
    size_t stride;        /* distance between consecutive map elements        */
    size_t d[3], b[3];    /* map dims (leading 1s) and block sizes            */
    size_t nbk[3], nb;    /* blocks per axis, per plane                       */
    int q, mode;
    size_t meta_sz, lfc_sz, code_sz; /* bytes per plane of each section       */
    size_t cp;            /* small planes: planes per chunk                    */
    const int32_t *blk;   /* small planes: chunk_block_map                     */
} dview;

static size_t cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

static dview view_of(const actc_codec_args *a, size_t n)
{
    dview v;
    memset(&v, 0, sizeof v);
    const int B = a->iparam[0] > 0 ? a->iparam[0] : 8;
    const int r = a->iparam[2] >= 1 && a->iparam[2] <= 3 ? a->iparam[2] : 1;
    const int layout = a->iparam[3];
    v.q = actc__quant_clamp_bits(a->bits);
    v.mode = a->iparam[1] >= ACTC_DIV_FULL && a->iparam[1] <= ACTC_DIV_HFC_ONLY ? a->iparam[1] : ACTC_DIV_FULL;
    v.d[0] = v.d[1] = 1;
    v.d[2] = n;
    v.S = v.C = 1;
    v.M = n;
    v.stride = 1;
    const int nd = a->ndim;
    const int valid = nd >= 1 && nd <= ACTC_MAX_DIMS && actc__numel(nd, a->shape) == n && n > 0;
    if (valid && layout == 1 && nd >= 2) {
        v.S = (size_t)a->shape[0];
        v.M = v.d[2] = (size_t)a->shape[1];
        v.C = n / (v.S * v.M);
        v.stride = v.C;
    } else if (valid) {
        const int mr = nd > r ? r : nd; /* map axes */
        v.M = 1;
        for (int k = 0; k < mr; k++) {
            v.d[3 - mr + k] = (size_t)a->shape[nd - mr + k];
            v.M *= v.d[3 - mr + k];
        }
        v.S = nd > mr ? (size_t)a->shape[0] : 1;
        v.C = n / (v.S * v.M);
    }
    v.nb = 1;
    for (int k = 0; k < 3; k++) {
        v.b[k] = v.d[k] < (size_t)B ? (v.d[k] ? v.d[k] : 1) : (size_t)B;
        v.nbk[k] = cdiv(v.d[k], v.b[k]);
        v.nb *= v.nbk[k];
    }
    if (n == 0) v.S = v.C = v.M = v.nb = 0;
    v.cp = v.M && v.M <= DIV_STACK_PLANE ? DIV_STACK_PLANE / v.M : 1;
    v.meta_sz = v.mode != ACTC_DIV_LFC_ONLY ? ACTC_QUANT_META : 0;
    v.lfc_sz = v.mode != ACTC_DIV_HFC_ONLY ? 2 * v.nb : 0;
    v.code_sz = v.mode != ACTC_DIV_LFC_ONLY ? actc__quant_run_bytes(v.M, v.q) : 0;
    return v;
}

static size_t planes(const dview *v) { return v->S * v->C; }

/* Payload sections. */
typedef struct {
    uint8_t *meta;
    uint16_t *lfc;
    uint8_t *codes;
} dsections;

static dsections sections(const dview *v, const void *payload)
{
    uint8_t *p = (uint8_t *)payload;
    const size_t P = planes(v);
    dsections s = {p, (uint16_t *)(void *)(p + P * v->meta_sz), p + P * (v->meta_sz + v->lfc_sz)};
    return s;
}

/* First element of plane p (elements of a plane are v->stride apart). */
static size_t plane_base(const dview *v, size_t p)
{
    const size_t s = p / v->C, c = p % v->C;
    return v->stride == 1 ? p * v->M : s * v->M * v->C + c;
}

/* Average pooling of one plane into bf16. */
static void pool_plane(const dview *v, const float *x, uint16_t *lfc)
{
    const size_t st = v->stride, d1 = v->d[1], d2 = v->d[2];
    size_t blk = 0;
    for (size_t i0 = 0; i0 < v->d[0]; i0 += v->b[0])
        for (size_t j0 = 0; j0 < d1; j0 += v->b[1])
            for (size_t k0 = 0; k0 < d2; k0 += v->b[2], blk++) {
                const size_t i1 = actc__min_sz(i0 + v->b[0], v->d[0]), j1 = actc__min_sz(j0 + v->b[1], d1),
                             k1 = actc__min_sz(k0 + v->b[2], d2);
                float acc = 0.0f;
                for (size_t i = i0; i < i1; i++)
                    for (size_t j = j0; j < j1; j++) {
                        const float *row = x + ((i * d1 + j) * d2) * st;
                        for (size_t k = k0; k < k1; k++) acc += row[k * st];
                    }
                lfc[blk] = actc__f32_to_bf16(acc / (float)((i1 - i0) * (j1 - j0) * (k1 - k0)));
            }
}

/* Walks elements [m0, m0 + len) of a plane in map order, pairing each with
 * its block's stored LFC value (lfc NULL: zeros).  Encode (src set): out[t]
 * = src[m] - lfc, the residual.  Decode (src NULL): dst[m] = out[t] + lfc.
 * Plane element m is at [(m - xoff) * stride] of src / dst: they point at
 * element xoff of the plane. */
static void walk(const dview *v, const float *src, float *dst, size_t xoff, const uint16_t *lfc, size_t m0,
                 size_t len, float *out)
{
    const size_t st = v->stride, d1 = v->d[1], d2 = v->d[2], b2 = v->b[2];
    size_t k = m0 % d2, row = m0 / d2, t = 0;
    while (t < len) {
        const size_t i = row / d1, j = row % d1;
        const uint16_t *lr = lfc ? lfc + (i / v->b[0] * v->nbk[1] + j / v->b[1]) * v->nbk[2] : NULL;
        const size_t rb = row * d2 - xoff; /* wraps harmlessly: rb + k >= 0 */
        while (k < d2 && t < len) {
            const size_t kend = actc__min_sz(actc__min_sz((k / b2 + 1) * b2, d2), k + (len - t));
            const float l = lr ? actc__bf16_to_f32(lr[k / b2]) : 0.0f;
            float *o = out + t - k;
            if (src)
                for (size_t kk = k; kk < kend; kk++) o[kk] = src[(rb + kk) * st] - l;
            else
                for (size_t kk = k; kk < kend; kk++) dst[(rb + kk) * st] = o[kk] + l;
            t += kend - k;
            k = kend;
        }
        k = 0;
        row++;
    }
}

/* ---- Planes of up to DIV_STACK_PLANE elements: chunks on the stack -------
 * A strided plane (tokens) is gathered first.  Pooling sums whole map rows
 * into column sums (vector adds), then the columns of each block. */

/* Pooled means of a contiguous plane: bf16 into lfc, their bf16 values as
 * floats into lfcf (what the residual and the decoder use). */
DIV_INLINE void pool_contig(const dview *v, const float *x, uint16_t *lfc, float *lfcf)
{
    const size_t d1 = v->d[1], d2 = v->d[2], b2 = v->b[2];
    float col[DIV_STACK_PLANE];
    size_t blk = 0;
    for (size_t i0 = 0; i0 < v->d[0]; i0 += v->b[0])
        for (size_t j0 = 0; j0 < d1; j0 += v->b[1]) {
            const size_t i1 = actc__min_sz(i0 + v->b[0], v->d[0]), j1 = actc__min_sz(j0 + v->b[1], d1);
            const float *first = x + (i0 * d1 + j0) * d2;
            for (size_t k = 0; k < d2; k++) col[k] = first[k];
            for (size_t i = i0; i < i1; i++)
                for (size_t j = i == i0 ? j0 + 1 : j0; j < j1; j++) {
                    const float *row = x + (i * d1 + j) * d2;
                    for (size_t k = 0; k < d2; k++) col[k] += row[k];
                }
            const float rows = (float)((i1 - i0) * (j1 - j0));
            for (size_t k0 = 0; k0 < d2; k0 += b2, blk++) {
                const size_t k1 = actc__min_sz(k0 + b2, d2);
                float acc = 0.0f;
                for (size_t k = k0; k < k1; k++) acc += col[k];
                lfc[blk] = actc__f32_to_bf16(acc / (rows * (float)(k1 - k0)));
                lfcf[blk] = actc__bf16_to_f32(lfc[blk]);
            }
        }
}

/* The block of every element of a chunk of v->cp planes: plane j's element
 * m pairs with pooled value j * nb + (block of m), so one flat loop over a
 * chunk upsamples (it vectorises as a gather; rows of 7-28 elements left
 * most of the work to scalar loop tails). */
static void chunk_block_map(const dview *v, int32_t *blk)
{
    size_t m = 0;
    for (size_t i = 0; i < v->d[0]; i++)
        for (size_t j = 0; j < v->d[1]; j++) {
            const size_t row = (i / v->b[0] * v->nbk[1] + j / v->b[1]) * v->nbk[2];
            for (size_t k = 0; k < v->d[2]; k++) blk[m++] = (int32_t)(row + k / v->b[2]);
        }
    for (size_t t = v->M; t < v->cp * v->M; t++) blk[t] = blk[t - v->M] + (int32_t)v->nb;
}

/* y = x + sign * upsample(lfcf) over np planes of a chunk (x NULL: zeros).
 * Maps no larger than B (one block per plane) need no block map. */
DIV_INLINE void upsample_add(const dview *v, const float *lfcf, const float *x, float *y, size_t np, float sign)
{
    const size_t M = v->M, L = np * M;
    if (v->nb == 1) {
        for (size_t j = 0; j < np; j++) {
            const float l = sign * lfcf[j];
            float *yj = y + j * M;
            if (x)
                for (size_t m = 0; m < M; m++) yj[m] = x[j * M + m] + l;
            else
                for (size_t m = 0; m < M; m++) yj[m] = l;
        }
        return;
    }
    const int32_t *blk = v->blk;
    if (x)
        for (size_t t = 0; t < L; t++) y[t] = x[t] + sign * lfcf[blk[t]];
    else
        for (size_t t = 0; t < L; t++) y[t] = sign * lfcf[blk[t]];
}

/* Strided (token) planes [p, p + np) into / out of contiguous g (plane j
 * at g + j M).  Consecutive planes of a sample are consecutive features, so
 * each token's run of them is read (written) contiguously: a transpose
 * through L1 rather than np passes with a stride of a whole token. */
DIV_INLINE void gather_planes(const dview *v, const float *x, size_t p, size_t np, float *g)
{
    const size_t M = v->M, st = v->stride;
    for (size_t j = 0; j < np;) {
        const size_t c = (p + j) % v->C, run = actc__min_sz(np - j, v->C - c);
        const float *base = x + plane_base(v, p + j);
        for (size_t m = 0; m < M; m++)
            for (size_t i = 0; i < run; i++) g[(j + i) * M + m] = base[m * st + i];
        j += run;
    }
}

DIV_INLINE void scatter_planes(const dview *v, const float *g, size_t p, size_t np, float *dst, size_t off)
{
    const size_t M = v->M, st = v->stride;
    for (size_t j = 0; j < np;) {
        const size_t c = (p + j) % v->C, run = actc__min_sz(np - j, v->C - c);
        float *base = dst + (plane_base(v, p + j) - off);
        for (size_t m = 0; m < M; m++)
            for (size_t i = 0; i < run; i++) base[m * st + i] = g[(j + i) * M + m];
        j += run;
    }
}

/* Planes [p0, p1) in chunks of v->cp planes: pooling per plane, then the
 * residual of the whole chunk in one loop and its quantization in one call. */
QK_CLONES static void encode_small(const dview *v, const dsections *sec, const float *x, size_t p0, size_t p1,
                                   uint64_t key)
{
    float g[DIV_STACK_PLANE], res[DIV_STACK_PLANE], lfcf[DIV_STACK_PLANE];
    uint16_t own[DIV_STACK_PLANE];
    uint32_t seeds[DIV_STACK_PLANE];
    const size_t M = v->M, nb = v->nb;
    for (size_t p = p0; p < p1; p += v->cp) {
        const size_t np = actc__min_sz(v->cp, p1 - p);
        const float *xc = x + p * M; /* stride 1: the chunk is contiguous */
        if (v->stride != 1) {
            gather_planes(v, x, p, np, g);
            xc = g;
        }
        /* HFC alone still needs the pooled means for its residual. */
        uint16_t *lfc = v->lfc_sz ? sec->lfc + p * nb : own;
        for (size_t j = 0; j < np; j++) pool_contig(v, xc + j * M, lfc + j * nb, lfcf + j * nb);
        if (v->mode == ACTC_DIV_LFC_ONLY) continue;
        upsample_add(v, lfcf, xc, res, np, -1.0f);
        for (size_t j = 0; j < np; j++) seeds[j] = (uint32_t)actc_rng_key(key, p + j, DIV_TAG);
        actc__quant_encode_runs(res, np, M, v->q, seeds, sec->meta + p * ACTC_QUANT_META,
                                sec->codes + p * v->code_sz);
    }
}

/* Planes [p0, p1) into dst, which holds the tensor's elements from off on. */
QK_CLONES static void decode_small(const dview *v, const dsections *sec, size_t p0, size_t p1, float *dst,
                                   size_t off)
{
    float buf[DIV_STACK_PLANE], lfcf[DIV_STACK_PLANE];
    const size_t M = v->M, nb = v->nb;
    for (size_t p = p0; p < p1; p += v->cp) {
        const size_t np = actc__min_sz(v->cp, p1 - p);
        float *y = v->stride == 1 ? dst + (p * M - off) : buf;
        if (v->mode == ACTC_DIV_LFC_ONLY) {
            const uint16_t *lfc = sec->lfc + p * nb;
            for (size_t b = 0; b < np * nb; b++) lfcf[b] = actc__bf16_to_f32(lfc[b]);
            upsample_add(v, lfcf, NULL, y, np, 1.0f);
        } else if (v->mode == ACTC_DIV_HFC_ONLY) {
            actc__quant_decode_runs(sec->codes + p * v->code_sz, np, M, v->q, sec->meta + p * ACTC_QUANT_META, y);
        } else {
            const uint16_t *lfc = sec->lfc + p * nb;
            for (size_t b = 0; b < np * nb; b++) lfcf[b] = actc__bf16_to_f32(lfc[b]);
            /* Codes into buf, then buf + LFC into y (dst, or buf itself). */
            actc__quant_decode_runs(sec->codes + p * v->code_sz, np, M, v->q, sec->meta + p * ACTC_QUANT_META, buf);
            upsample_add(v, lfcf, buf, y, np, 1.0f);
        }
        if (v->stride != 1) scatter_planes(v, y, p, np, dst, off);
    }
}

/* ---- Longer planes: tiles, the residual recomputed per pass ------------- */

static void encode_large(const dview *v, const dsections *sec, const float *xp, size_t p, uint32_t seed)
{
    float buf[DIV_TILE];
    uint16_t own[DIV_STACK_PLANE];
    uint16_t *lfc = v->lfc_sz ? sec->lfc + p * v->nb : NULL, *heap = NULL;
    if (!lfc) {
        /* HFC alone still needs the pooled means for its residual.  Past
         * 4096 blocks (a 512 x 512 map at B = 8) on the heap; if even that
         * fails the residual is taken against zero (plain per-plane
         * quantization of this ablation), which still decodes consistently:
         * encode cannot fail. */
        lfc = v->nb <= DIV_STACK_PLANE ? own : (heap = malloc(v->nb * sizeof *heap));
    }
    if (lfc) pool_plane(v, xp, lfc);
    if (v->mode != ACTC_DIV_LFC_ONLY) {
        uint8_t *meta = sec->meta + p * ACTC_QUANT_META, *codes = sec->codes + p * v->code_sz;
        float mn = INFINITY, mx = -INFINITY;
        for (size_t m = 0; m < v->M; m += DIV_TILE) {
            const size_t len = actc__min_sz(DIV_TILE, v->M - m);
            float a, b;
            walk(v, xp, NULL, 0, lfc, m, len, buf);
            actc__quant_minmax(buf, len, &a, &b);
            mn = a < mn ? a : mn;
            mx = b > mx ? b : mx;
        }
        actc__quant_meta(mn, mx, v->q, meta);
        const actc__qparams qp = actc__quant_params(meta, v->q);
        for (size_t m = 0; m < v->M; m += DIV_TILE) {
            const size_t len = actc__min_sz(DIV_TILE, v->M - m);
            walk(v, xp, NULL, 0, lfc, m, len, buf);
            /* Element m + i of the plane draws from seed + m + i, as in one
             * call over the whole plane. */
            actc__quant_pack(buf, len, qp, seed + (uint32_t)m, codes + actc__quant_run_bytes(m, v->q));
        }
    }
    free(heap);
}

/* Elements [e0, e1) of plane p into dst (dst[0] is element e0), whole
 * tiles unpacked (they start on code bytes) and the wanted part rebuilt. */
static void decode_span(const dview *v, const dsections *sec, size_t p, size_t e0, size_t e1, float *dst)
{
    const uint16_t *lfc = v->lfc_sz ? sec->lfc + p * v->nb : NULL;
    const uint8_t *codes = sec->codes + p * v->code_sz;
    actc__qparams qp;
    memset(&qp, 0, sizeof qp);
    if (v->mode != ACTC_DIV_LFC_ONLY) qp = actc__quant_params(sec->meta + p * ACTC_QUANT_META, v->q);
    float buf[DIV_TILE];
    for (size_t m = e0 / DIV_TILE * DIV_TILE; m < e1; m += DIV_TILE) {
        const size_t len = actc__min_sz(DIV_TILE, v->M - m);
        if (v->mode == ACTC_DIV_LFC_ONLY)
            memset(buf, 0, len * sizeof *buf);
        else
            actc__quant_unpack(codes + actc__quant_run_bytes(m, v->q), len, qp, buf);
        const size_t lo = m > e0 ? m : e0, hi = actc__min_sz(m + len, e1);
        walk(v, NULL, dst, e0, lfc, lo, hi - lo, buf + (lo - m));
    }
}

static void encode_planes(const dview *v, const dsections *sec, const float *x, size_t p0, size_t p1, uint64_t key)
{
    if (v->M <= DIV_STACK_PLANE) {
        encode_small(v, sec, x, p0, p1, key);
        return;
    }
    for (size_t p = p0; p < p1; p++)
        encode_large(v, sec, x + plane_base(v, p), p, (uint32_t)actc_rng_key(key, p, DIV_TAG));
}

static void decode_planes(const dview *v, const dsections *sec, size_t p0, size_t p1, float *dst, size_t off)
{
    if (v->M <= DIV_STACK_PLANE) {
        decode_small(v, sec, p0, p1, dst, off);
        return;
    }
    for (size_t p = p0; p < p1; p++) decode_span(v, sec, p, 0, v->M, dst + (plane_base(v, p) - off));
}

static size_t division_plan(actc_codec_args *a, const float *x, size_t n)
{
    (void)x;
    const dview v = view_of(a, n);
    /* What decode must see again, resolved. */
    a->bits = v.q;
    a->iparam[1] = v.mode;
    if (a->iparam[0] <= 0) a->iparam[0] = 8;
    return planes(&v) * (v.meta_sz + v.lfc_sz + v.code_sz);
}

static void division_encode(const actc_codec_args *a, const float *x, size_t n, void *dst)
{
    dview v = view_of(a, n);
    int32_t blk[DIV_STACK_PLANE];
    if (v.M <= DIV_STACK_PLANE) chunk_block_map(&v, blk), v.blk = blk;
    const dsections sec = sections(&v, dst);
    const size_t P = planes(&v);
#pragma omp parallel if (n >= DIV_PAR_MIN && P > 1)
    {
        size_t lo, hi;
        actc__thread_share(P, &lo, &hi);
        encode_planes(&v, &sec, x, lo, hi, a->key);
        actc__quant_fence();
    }
}

/* Decodes samples [s0, s1) into dst (dst[0] is sample s0's first element). */
static void decode_samples(const dview *view, const void *src, size_t s0, size_t s1, float *dst)
{
    dview vv = *view, *v = &vv;
    int32_t blk[DIV_STACK_PLANE];
    if (v->M <= DIV_STACK_PLANE) chunk_block_map(v, blk), v->blk = blk;
    const dsections sec = sections(v, src);
    const size_t p0 = s0 * v->C, p1 = s1 * v->C, off = s0 * v->C * v->M;
#pragma omp parallel if ((p1 - p0) * v->M >= DIV_PAR_MIN && p1 - p0 > 1)
    {
        size_t lo, hi;
        actc__thread_share(p1 - p0, &lo, &hi);
        decode_planes(v, &sec, p0 + lo, p0 + hi, dst, off);
    }
}

static void division_decode(const actc_codec_args *a, const void *src, size_t n, float *dst)
{
    const dview v = view_of(a, n);
    decode_samples(&v, src, 0, v.S, dst);
}

/* The store's rows are the first axis; the codec's samples are too, unless
 * the tensor is one plane (below). */
static void division_decode_rows(const actc_codec_args *a, const void *src, size_t n, size_t row0, size_t nrows,
                                 float *dst)
{
    const dview v = view_of(a, n);
    const size_t rows = a->ndim > 0 && a->shape[0] > 0 ? (size_t)a->shape[0] : 1;
    if (v.S == rows) {
        decode_samples(&v, src, row0, row0 + nrows, dst);
        return;
    }
    /* One plane holding several rows (a map over a whole 1-D tensor, or a
     * shape that does not describe it): the plane is the flat tensor, so
     * the rows are its elements [row0 d, (row0 + nrows) d). */
    const size_t d = n / rows;
    const dsections sec = sections(&v, src);
    decode_span(&v, &sec, 0, row0 * d, (row0 + nrows) * d, dst);
}

const actc_codec actc_codec_division = {"division", division_plan, division_encode, division_decode,
                                        division_decode_rows};
