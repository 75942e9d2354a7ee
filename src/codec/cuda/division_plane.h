/* DIVISION's codec in units a CUDA block of threads distributes over one
 * plane (codec_cuda.cu; run without a GPU on the CPU emulation,
 * tests/gpu/emu, by gpu_codecs_emu).  codec_division.c computes the
 * same payload with vectorised loops; what decides its bits is the order of
 * its float sums and of its min/max merges, which differs between its
 * paths, so each unit reproduces its path's order:
 *   planes of up to ACTC_DIV_STACK_PLANE elements ("small"):
 *     one block per plane (actc__div_single): 16 running sums, minima and
 *       maxima, element i of each whole row of 16 on lane i % 16, the rest
 *       on lanes 0, 1, ..., then the lanes in order; the mean is sum / M;
 *     several blocks (actc__div_block_mean): per column k of the block,
 *       its rows' sum (and min, max) in row order, then the columns in
 *       order; the mean is sum / (rows * columns) with rows a float; the
 *       block's residual range from its min and max of x (exact: fl(a - l)
 *       is monotone in a);
 *   longer planes: each block summed row by row, element by element, over
 *     the integer count; the residual's range by the quantizer's 32 lanes
 *     over tiles of ACTC_DIV_TILE elements (actc__div_tile_range, a warp's
 *     work on the GPU).
 * The plane's range is the CPU's in-order fold over blocks (or tiles) of
 * `v < best ? v : best`: the first of the least values, NaN never.  Taken
 * in any order as the least value with the lowest index (actc__div_pick),
 * threads can fold their own blocks and then each other's.
 * Codes: element m of plane p rounds ((x - l) - Z) * B / R with hash input
 * seed + p M + m, packed as one run per plane, 8 elements a unit.  The
 * HFC-only ablation (its means kept nowhere in the payload) has no GPU
 * version. */
#ifndef ACTC_DIVISION_PLANE_H
#define ACTC_DIVISION_PLANE_H
#include "../codec_math.h"

#define ACTC_DIV_STACK_PLANE 4096 /* codec_division.c's DIV_STACK_PLANE */
#define ACTC_DIV_TILE 512         /* codec_division.c's DIV_TILE        */
#define ACTC_DIV_LANES 16         /* codec_division.c's DIV_LANES       */

ACTC_HD size_t actc__div_min(size_t a, size_t b) { return a < b ? a : b; }

/* First element of plane p; element m of the plane is stride apart. */
ACTC_HD size_t actc__div_plane_base(const actc__div_view *v, size_t p)
{
    return v->stride == 1 ? p * v->M : p / v->C * v->M * v->C + p % v->C;
}

ACTC_HD float actc__div_elem(const actc__div_view *v, const void *x, int dt, size_t base, size_t m)
{
    return actc__load_dt(x, dt, base + m * v->stride);
}

/* The stored mean of map element m (pl: the plane's means). */
ACTC_HD float actc__div_mean_of(const actc__div_view *v, const uint16_t *pl, size_t m)
{
    const size_t k = m % v->d[2], row = m / v->d[2], i = row / v->d[1], j = row % v->d[1];
    return actc__bf16_to_f32(pl[(i / v->b[0] * v->nbk[1] + j / v->b[1]) * v->nbk[2] + k / v->b[2]]);
}

/* The least (or greatest) value with the lowest index, NaNs never. */
typedef struct {
    float v;
    size_t i;
} actc__div_pick;
ACTC_HD actc__div_pick actc__div_pick_none(int least)
{
    actc__div_pick p = {least ? INFINITY : -INFINITY, (size_t)-1};
    return p;
}
ACTC_HD void actc__div_pick_min(actc__div_pick *p, float v, size_t i)
{
    if (v < p->v || (v == p->v && i < p->i)) p->v = v, p->i = i;
}
ACTC_HD void actc__div_pick_max(actc__div_pick *p, float v, size_t i)
{
    if (v > p->v || (v == p->v && i < p->i)) p->v = v, p->i = i;
}

/* A small plane that is one block: its mean and its residual's range. */
ACTC_HD uint16_t actc__div_single(const actc__div_view *v, const void *x, int dt, size_t base, float *mn, float *mx)
{
    float s[ACTC_DIV_LANES], a[ACTC_DIV_LANES], b[ACTC_DIV_LANES];
    for (int l = 0; l < ACTC_DIV_LANES; l++) s[l] = 0.0f, a[l] = INFINITY, b[l] = -INFINITY;
    const size_t full = v->M / ACTC_DIV_LANES * ACTC_DIV_LANES;
    for (size_t m = 0; m < v->M; m++) {
        const int l = (int)(m < full ? m % ACTC_DIV_LANES : m - full);
        const float e = actc__div_elem(v, x, dt, base, m);
        s[l] += e;
        a[l] = e < a[l] ? e : a[l];
        b[l] = e > b[l] ? e : b[l];
    }
    float ss = 0.0f, aa = INFINITY, bb = -INFINITY;
    for (int l = 0; l < ACTC_DIV_LANES; l++) {
        ss += s[l];
        aa = a[l] < aa ? a[l] : aa;
        bb = b[l] > bb ? b[l] : bb;
    }
    const uint16_t mean = actc__f32_to_bf16(ss / (float)v->M);
    const float l0 = actc__bf16_to_f32(mean), lo = aa - l0, hi = bb - l0;
    *mn = lo == lo ? lo : INFINITY;
    *mx = hi == hi ? hi : -INFINITY;
    return mean;
}

/* Block b's mean (bf16) in its path's order; for a small plane also the
 * block's share of the residual's range (*lo, *hi), else +-inf. */
ACTC_HD uint16_t actc__div_block_mean(const actc__div_view *v, const void *x, int dt, size_t base, size_t b, float *lo,
                                      float *hi)
{
    const size_t d0 = v->d[0], d1 = v->d[1], d2 = v->d[2];
    const size_t bk = b % v->nbk[2], bj = b / v->nbk[2] % v->nbk[1], bi = b / (v->nbk[2] * v->nbk[1]);
    const size_t i0 = bi * v->b[0], j0 = bj * v->b[1], k0 = bk * v->b[2];
    const size_t i1 = actc__div_min(i0 + v->b[0], d0), j1 = actc__div_min(j0 + v->b[1], d1),
                 k1 = actc__div_min(k0 + v->b[2], d2);
    float acc = 0.0f;
    *lo = INFINITY, *hi = -INFINITY;
    if (v->M > ACTC_DIV_STACK_PLANE) {
        for (size_t i = i0; i < i1; i++)
            for (size_t j = j0; j < j1; j++)
                for (size_t k = k0; k < k1; k++) acc += actc__div_elem(v, x, dt, base, (i * d1 + j) * d2 + k);
        return actc__f32_to_bf16(acc / (float)((i1 - i0) * (j1 - j0) * (k1 - k0)));
    }
    float bmn = INFINITY, bmx = -INFINITY;
    for (size_t k = k0; k < k1; k++) {
        float col = 0.0f, cmn = INFINITY, cmx = -INFINITY;
        for (size_t i = i0; i < i1; i++)
            for (size_t j = j0; j < j1; j++) {
                const float e = actc__div_elem(v, x, dt, base, (i * d1 + j) * d2 + k);
                col += e;
                cmn = e < cmn ? e : cmn;
                cmx = e > cmx ? e : cmx;
            }
        acc += col;
        bmn = cmn < bmn ? cmn : bmn;
        bmx = cmx > bmx ? cmx : bmx;
    }
    const uint16_t mean = actc__f32_to_bf16(acc / ((float)((i1 - i0) * (j1 - j0)) * (float)(k1 - k0)));
    const float l = actc__bf16_to_f32(mean);
    *lo = bmn - l, *hi = bmx - l;
    return mean;
}

/* A long plane's residual over tile t: element t0 + u of the tile on lane
 * u % 32 while a whole row of lanes remains, the rest on lane 0, lanes
 * merged 16, 8, 4, 2, 1 (what a warp does with shuffles). */
ACTC_HD size_t actc__div_tiles(const actc__div_view *v) { return (v->M + ACTC_DIV_TILE - 1) / ACTC_DIV_TILE; }
ACTC_HD float actc__div_residual(const actc__div_view *v, const void *x, int dt, size_t base, const uint16_t *pl,
                                 size_t m)
{
    return actc__div_diff(actc__div_elem(v, x, dt, base, m), actc__div_mean_of(v, pl, m));
}

/* Chunk c (elements 8c .. 8c + 7) of plane p: its codes packed (the low
 * actc__quant_run_bytes(m, q) bytes of the result); seed: the plane's,
 * actc__div_seed(key) + p M. */
ACTC_HD uint64_t actc__div_chunk_codes(const actc__div_view *v, const void *x, int dt, size_t base,
                                       const uint16_t *pl, size_t c, actc__qparams qp, uint32_t seed, int *m)
{
    const size_t c0 = 8 * c;
    *m = v->M - c0 < 8 ? (int)(v->M - c0) : 8;
    float r[8];
    for (int k = 0; k < *m; k++) r[k] = actc__div_residual(v, x, dt, base, pl, c0 + (size_t)k);
    return actc__quant_chunk_pack(r, *m, qp, seed, (uint32_t)c0);
}

/* Element m's decoded value: dequantized code plus mean, or (lfc-only) the
 * mean alone (the long path adds it to 0, which turns -0 into +0). */
ACTC_HD float actc__div_decoded(const actc__div_view *v, const uint16_t *pl, size_t m, unsigned code,
                                actc__qparams qp)
{
    const float l = actc__div_mean_of(v, pl, m);
    if (v->mode == ACTC_DIV_LFC_ONLY) return v->M <= ACTC_DIV_STACK_PLANE ? l : 0.0f + l;
    return actc__div_value(code, qp.z, qp.step, l);
}
#endif
