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
 * Randomness: the quantizer's hash over the tensor in plane order, element
 * m of plane p drawing from seed + p M + m (seed = actc_rng_key(key, 0,
 * tag); one stream, so a chunk of planes rounds in one loop); the bytes do
 * not depend on the thread count. */
#include "codec.h"
#include "quant_kernels.h"
#include "../core/core.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Planes of up to this many elements are worked on in chunks of whole
 * planes held on the stack (residual computed once); longer planes
 * recompute their residual tile by tile. */
#define DIV_STACK_PLANE 4096
/* At most this many planes per chunk (tiny planes): bounds the per-plane
 * arrays on the stack. */
#define DIV_CHUNK_PLANES 256
/* Residual tile of the long-plane path (a multiple of 8: tiles start on
 * byte boundaries of any Q-bit code stream). */
#define DIV_TILE 512
#define DIV_PAR_MIN 32768
/* The small-plane path is compiled per ISA level (QK_CLONES); its helpers
 * are inlined into each copy. */
#define DIV_INLINE static inline __attribute__((always_inline))

typedef actc__div_view dview; /* codec_math.h */

static size_t cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

actc__div_view actc__division_view(const actc_codec_args *a, size_t n)
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
    v.cp = v.M && v.M <= DIV_STACK_PLANE ? actc__min_sz(DIV_STACK_PLANE / v.M, DIV_CHUNK_PLANES) : 1;
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
 * element xoff of the plane.  A NaN residual is 0x7FC00000 (actc__div_diff). */
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
                for (size_t kk = k; kk < kend; kk++) o[kk] = actc__div_diff(src[(rb + kk) * st], l);
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

/* Sum, minimum and maximum of x[0..n) (NaNs left out of the minimum and
 * maximum), in 16 lanes so the loops vectorise.  The inner loops are kept
 * as loops (GCC would unroll them whole, then fail to vectorise). */
#define DIV_LANES 16
DIV_INLINE void stats(const float *x, size_t n, float *sum, float *mn, float *mx)
{
    float s[DIV_LANES], a[DIV_LANES], b[DIV_LANES];
#pragma GCC unroll 1
    for (int l = 0; l < DIV_LANES; l++) s[l] = 0.0f, a[l] = INFINITY, b[l] = -INFINITY;
    size_t i = 0;
    for (; i + DIV_LANES <= n; i += DIV_LANES)
#pragma GCC unroll 1
        for (int l = 0; l < DIV_LANES; l++) {
            const float v = x[i + l];
            s[l] += v;
            a[l] = v < a[l] ? v : a[l];
            b[l] = v > b[l] ? v : b[l];
        }
#pragma GCC unroll 1
    for (size_t l = 0; l < n - i; l++) {
        const float v = x[i + l];
        s[l] += v;
        a[l] = v < a[l] ? v : a[l];
        b[l] = v > b[l] ? v : b[l];
    }
    float ss = 0.0f, aa = INFINITY, bb = -INFINITY;
    for (int l = 0; l < DIV_LANES; l++) {
        ss += s[l];
        aa = a[l] < aa ? a[l] : aa;
        bb = b[l] > bb ? b[l] : bb;
    }
    *sum = ss, *mn = aa, *mx = bb;
}

/* Pooled means of a contiguous plane: bf16 into lfc, their bf16 values as
 * floats into lfcf (what the residual and the decoder use).  Also the range
 * of the residual x - upsample(lfcf) over the plane, NaNs ignored as
 * actc__quant_minmax does, from each block's minimum and maximum of x:
 * fl(a - l) is monotone in a, so a block's smallest residual is exactly
 * fl(min x - l), and the quantizer's parameters are known before the
 * residual is formed.  A plane that is one block is summed flat; others sum
 * map rows into column sums (vector adds), then the columns of each block.
 * With over set, the row loops run to a multiple of DIV_LANES columns,
 * reading into the next row (columns past d2 are never used): map rows of
 * 7-28 elements otherwise leave most of the work to scalar loop tails.  The
 * caller sets it when DIV_LANES floats past the plane may be read. */
DIV_INLINE void pool_contig(const dview *v, const float *x, int over, uint16_t *lfc, float *lfcf, float *mn,
                            float *mx)
{
    if (v->nb == 1) {
        float sum, a, b;
        stats(x, v->M, &sum, &a, &b);
        lfc[0] = actc__f32_to_bf16(sum / (float)v->M);
        lfcf[0] = actc__bf16_to_f32(lfc[0]);
        /* An infinite mean makes inf - inf: a NaN residual, left out. */
        const float lo = a - lfcf[0], hi = b - lfcf[0];
        *mn = lo == lo ? lo : INFINITY, *mx = hi == hi ? hi : -INFINITY;
        return;
    }
    const size_t d1 = v->d[1], d2 = v->d[2], b2 = v->b[2];
    const size_t w = over ? (d2 + DIV_LANES - 1) / DIV_LANES * DIV_LANES : d2;
    float col[DIV_STACK_PLANE + DIV_LANES], cmn[DIV_STACK_PLANE + DIV_LANES], cmx[DIV_STACK_PLANE + DIV_LANES];
    float rmn = INFINITY, rmx = -INFINITY;
    size_t blk = 0;
    for (size_t i0 = 0; i0 < v->d[0]; i0 += v->b[0])
        for (size_t j0 = 0; j0 < d1; j0 += v->b[1]) {
            const size_t i1 = actc__min_sz(i0 + v->b[0], v->d[0]), j1 = actc__min_sz(j0 + v->b[1], d1);
            for (size_t k = 0; k < w; k++) col[k] = 0.0f, cmn[k] = INFINITY, cmx[k] = -INFINITY;
            for (size_t i = i0; i < i1; i++)
                for (size_t j = j0; j < j1; j++) {
                    const float *row = x + (i * d1 + j) * d2;
                    for (size_t k = 0; k < w; k++) {
                        col[k] += row[k];
                        cmn[k] = row[k] < cmn[k] ? row[k] : cmn[k];
                        cmx[k] = row[k] > cmx[k] ? row[k] : cmx[k];
                    }
                }
            const float rows = (float)((i1 - i0) * (j1 - j0));
            for (size_t k0 = 0; k0 < d2; k0 += b2, blk++) {
                const size_t k1 = actc__min_sz(k0 + b2, d2);
                float acc = 0.0f, bmn = INFINITY, bmx = -INFINITY;
                for (size_t k = k0; k < k1; k++) {
                    acc += col[k];
                    bmn = cmn[k] < bmn ? cmn[k] : bmn;
                    bmx = cmx[k] > bmx ? cmx[k] : bmx;
                }
                lfc[blk] = actc__f32_to_bf16(acc / (rows * (float)(k1 - k0)));
                lfcf[blk] = actc__bf16_to_f32(lfc[blk]);
                const float lo = bmn - lfcf[blk], hi = bmx - lfcf[blk];
                rmn = lo < rmn ? lo : rmn;
                rmx = hi > rmx ? hi : rmx;
            }
        }
    *mn = rmn, *mx = rmx;
}

/* What map_plane computes per element, l being the element's pooled value:
 *   MAP_RESIDUAL  y = ((x - l) - z) * c   the residual scaled for the
 *                                         quantizer (z = Z, c = B / R)
 *   MAP_DECODE    y = (z + q * c) + l      dequantized code plus LFC
 *                                         (z = Z, c = R / B)
 *   MAP_LFC       y = l                    the LFC alone
 * The expressions are the quantizer's own, so the codes and the decoded
 * values are what quantizing the residual as an array would give. */
enum { MAP_RESIDUAL, MAP_DECODE, MAP_LFC };

DIV_INLINE float map_one(const int op, float x, uint8_t q, float z, float c, float l)
{
    return op == MAP_RESIDUAL ? actc__div_scaled(x, l, z, c) : op == MAP_DECODE ? actc__div_value(q, z, c, l) : l;
}

/* One contiguous plane, band by band (the rows that share a row of
 * blocks; for a given i they are consecutive), each band one loop.  When a
 * row is one block the band has one pooled value; otherwise its upsampled
 * values are built once per band (a row of blocks, repeated by doubling). */
DIV_INLINE void map_plane(const dview *v, const int op, const float *lfcf, const float *x, const uint8_t *q, float z,
                          float c, float *y)
{
    const size_t d1 = v->d[1], d2 = v->d[2], b2 = v->b[2];
    float u[DIV_STACK_PLANE];
    for (size_t i0 = 0, bi = 0; i0 < v->d[0]; i0 += v->b[0], bi++)
        for (size_t j0 = 0, bj = 0; j0 < d1; j0 += v->b[1], bj++) {
            const size_t i1 = actc__min_sz(i0 + v->b[0], v->d[0]), j1 = actc__min_sz(j0 + v->b[1], d1);
            const float *lr = lfcf + (bi * v->nbk[1] + bj) * v->nbk[2];
            const size_t len = (j1 - j0) * d2;
            if (v->nbk[2] == 1) {
                const float l = lr[0];
                for (size_t i = i0; i < i1; i++) {
                    const size_t o = (i * d1 + j0) * d2;
                    for (size_t k = 0; k < len; k++)
                        y[o + k] = map_one(op, x ? x[o + k] : 0.0f, q ? q[o + k] : 0, z, c, l);
                }
                continue;
            }
            for (size_t k0 = 0, b = 0; k0 < d2; k0 += b2, b++) {
                const size_t k1 = actc__min_sz(k0 + b2, d2);
                for (size_t k = k0; k < k1; k++) u[k] = lr[b];
            }
            for (size_t have = d2; have < len; have *= 2) memcpy(u + have, u, actc__min_sz(have, len - have) * sizeof *u);
            for (size_t i = i0; i < i1; i++) {
                const size_t o = (i * d1 + j0) * d2;
                for (size_t k = 0; k < len; k++)
                    y[o + k] = map_one(op, x ? x[o + k] : 0.0f, q ? q[o + k] : 0, z, c, u[k]);
            }
        }
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

/* Planes [p0, p1) in chunks of v->cp planes: pooling plane by plane (which
 * also gives each residual's range), the chunk's quantizer parameters in
 * one call, the residuals already scaled plane by plane, then the chunk's
 * codes in one loop and their packing. */
QK_CLONES static void encode_small(const dview *v, const dsections *sec, const float *x, size_t p0, size_t p1,
                                   uint32_t seed)
{
    /* g: DIV_LANES floats of slack for pool_contig's reads past a plane. */
    float g[DIV_STACK_PLANE + DIV_LANES], u[DIV_STACK_PLANE], lfcf[DIV_STACK_PLANE], mn[DIV_CHUNK_PLANES],
        mx[DIV_CHUNK_PLANES];
    actc__qparams qp[DIV_CHUNK_PLANES];
    uint8_t q[DIV_STACK_PLANE];
    uint16_t own[DIV_STACK_PLANE];
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
        for (size_t j = 0; j < np; j++) {
            /* Past the tensor's end nothing may be read. */
            const int over = v->stride != 1 || (planes(v) - (p + j + 1)) * M >= DIV_LANES;
            pool_contig(v, xc + j * M, over, lfc + j * nb, lfcf + j * nb, mn + j, mx + j);
        }
        if (v->mode == ACTC_DIV_LFC_ONLY) continue;
        actc__quant_meta_runs(mn, mx, np, v->q, sec->meta + p * ACTC_QUANT_META, qp);
        for (size_t j = 0; j < np; j++)
            map_plane(v, MAP_RESIDUAL, lfcf + j * nb, xc + j * M, NULL, qp[j].z, qp[j].scale, u + j * M);
        actc__quant_round(u, np * M, v->q, seed + (uint32_t)(p * M), q);
        actc__quant_pack_runs(q, np, M, v->q, sec->codes + p * v->code_sz);
    }
}

/* Planes [p0, p1) into dst, which holds the tensor's elements from off on. */
QK_CLONES static void decode_small(const dview *v, const dsections *sec, size_t p0, size_t p1, float *dst,
                                   size_t off)
{
    float buf[DIV_STACK_PLANE], lfcf[DIV_STACK_PLANE];
    actc__qparams qp[DIV_CHUNK_PLANES];
    uint8_t q[DIV_STACK_PLANE];
    const size_t M = v->M, nb = v->nb;
    for (size_t p = p0; p < p1; p += v->cp) {
        const size_t np = actc__min_sz(v->cp, p1 - p);
        float *y = v->stride == 1 ? dst + (p * M - off) : buf;
        if (v->mode == ACTC_DIV_HFC_ONLY) {
            actc__quant_decode_runs(sec->codes + p * v->code_sz, np, M, v->q, sec->meta + p * ACTC_QUANT_META, y);
        } else {
            const uint16_t *lfc = sec->lfc + p * nb;
            for (size_t b = 0; b < np * nb; b++) lfcf[b] = actc__bf16_to_f32(lfc[b]);
            if (v->mode == ACTC_DIV_FULL) {
                actc__quant_unpack_runs(sec->codes + p * v->code_sz, np, M, v->q, q);
                actc__quant_params_runs(sec->meta + p * ACTC_QUANT_META, np, v->q, qp);
            }
            for (size_t j = 0; j < np; j++) {
                if (v->mode == ACTC_DIV_LFC_ONLY)
                    map_plane(v, MAP_LFC, lfcf + j * nb, NULL, NULL, 0.0f, 0.0f, y + j * M);
                else
                    map_plane(v, MAP_DECODE, lfcf + j * nb, NULL, q + j * M, qp[j].z, qp[j].step, y + j * M);
            }
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
            /* Element m + i of plane p draws from seed + p M + m + i. */
            actc__quant_pack(buf, len, qp, seed + (uint32_t)(p * v->M + m), codes + actc__quant_run_bytes(m, v->q));
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

static void encode_planes(const dview *v, const dsections *sec, const float *x, size_t p0, size_t p1, uint32_t seed)
{
    if (v->M <= DIV_STACK_PLANE) {
        encode_small(v, sec, x, p0, p1, seed);
        return;
    }
    for (size_t p = p0; p < p1; p++) encode_large(v, sec, x + plane_base(v, p), p, seed);
}

static void decode_planes(const dview *v, const dsections *sec, size_t p0, size_t p1, float *dst, size_t off)
{
    if (v->M <= DIV_STACK_PLANE) {
        decode_small(v, sec, p0, p1, dst, off);
        return;
    }
    for (size_t p = p0; p < p1; p++) decode_span(v, sec, p, 0, v->M, dst + (plane_base(v, p) - off));
}

static size_t division_plan(actc_codec_args *a, size_t n)
{
    const dview v = actc__division_view(a, n);
    /* What decode must see again, resolved. */
    a->bits = v.q;
    a->iparam[1] = v.mode;
    if (a->iparam[0] <= 0) a->iparam[0] = 8;
    return planes(&v) * (v.meta_sz + v.lfc_sz + v.code_sz);
}

static void division_encode(const actc_codec_args *a, const float *x, size_t n, void *dst)
{
    const dview v = actc__division_view(a, n);
    const dsections sec = sections(&v, dst);
    const size_t P = planes(&v);
#pragma omp parallel if (n >= DIV_PAR_MIN && P > 1)
    {
        size_t lo, hi;
        actc__thread_share(P, &lo, &hi);
        encode_planes(&v, &sec, x, lo, hi, actc__div_seed(a->key));
        actc__quant_fence();
    }
}

/* Decodes samples [s0, s1) into dst (dst[0] is sample s0's first element). */
static void decode_samples(const dview *view, const void *src, size_t s0, size_t s1, float *dst)
{
    const dview *v = view;
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
    const dview v = actc__division_view(a, n);
    decode_samples(&v, src, 0, v.S, dst);
}

/* The store's rows are the first axis; the codec's samples are too, unless
 * the tensor is one plane (below). */
static void division_decode_rows(const actc_codec_args *a, const void *src, size_t n, size_t row0, size_t nrows,
                                 float *dst)
{
    const dview v = actc__division_view(a, n);
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
