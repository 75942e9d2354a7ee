/* DIVISION's codec one plane at a time, for the CUDA kernels (one thread
 * per plane, codec_cuda.cu) and for the CPU test that runs these very
 * functions (tests/test_codec_cuda.c).  codec_division.c computes the same
 * payload with vectorised loops; what decides its bits is the order of its
 * float sums and of its min/max merges, which differs between its paths,
 * so each path's order is reproduced here:
 *   planes of up to ACTC_DIV_STACK_PLANE elements ("small"):
 *     one block per plane: 16 running sums, minima and maxima, element i
 *       of each whole row of 16 on lane i % 16, the rest on lanes 0, 1, ...,
 *       then the lanes in order; the mean is sum / M;
 *     several blocks: per column k of a block row, the rows' sum (and min,
 *       max) in row order, then the block's columns in order; the mean is
 *       sum / (rows * columns) with rows a float;
 *     the residual's range from each block's min and max of x (exact: fl(a
 *       - l) is monotone in a), the blocks in order;
 *   longer planes ("large"): each block summed row by row, element by
 *     element, over the integer count; the residual's range by the
 *     quantizer's 32 lanes over tiles of ACTC_DIV_TILE elements, the tiles
 *     merged in order.
 * Codes: element m of plane p rounds ((x - l) - Z) * B / R with hash input
 * seed + p M + m, packed as one run per plane.  The HFC-only ablation
 * (its means kept nowhere in the payload) has no GPU version. */
#ifndef ACTC_DIVISION_PLANE_H
#define ACTC_DIVISION_PLANE_H
#include "../codec_math.h"

#define ACTC_DIV_STACK_PLANE 4096 /* codec_division.c's DIV_STACK_PLANE */
#define ACTC_DIV_TILE 512         /* codec_division.c's DIV_TILE        */
#define ACTC_DIV_LANES 16         /* codec_division.c's DIV_LANES       */

/* First element of plane p; element m of the plane is stride apart. */
ACTC_HD size_t actc__div_plane_base(const actc__div_view *v, size_t p)
{
    return v->stride == 1 ? p * v->M : p / v->C * v->M * v->C + p % v->C;
}

/* Element (i, j, k) of the plane's map. */
ACTC_HD float actc__div_at(const actc__div_view *v, const void *x, int dt, size_t base, size_t i, size_t j, size_t k)
{
    return actc__load_dt(x, dt, base + ((i * v->d[1] + j) * v->d[2] + k) * v->stride);
}

/* The stored mean of map element m. */
ACTC_HD float actc__div_mean_of(const actc__div_view *v, const uint16_t *lfc, size_t m)
{
    const size_t k = m % v->d[2], row = m / v->d[2], i = row / v->d[1], j = row % v->d[1];
    return actc__bf16_to_f32(lfc[(i / v->b[0] * v->nbk[1] + j / v->b[1]) * v->nbk[2] + k / v->b[2]]);
}

ACTC_HD size_t actc__div_min(size_t a, size_t b) { return a < b ? a : b; }

/* Pooled means of plane p into lfc (bf16), and the range of its residual
 * (*mn > *mx when nothing is finite). */
ACTC_HD void actc__div_pool(const actc__div_view *v, const void *x, int dt, size_t p, uint16_t *lfc, float *mn,
                            float *mx)
{
    const size_t base = actc__div_plane_base(v, p), d0 = v->d[0], d1 = v->d[1], d2 = v->d[2];
    if (v->M <= ACTC_DIV_STACK_PLANE && v->nb == 1) {
        float s[ACTC_DIV_LANES], a[ACTC_DIV_LANES], b[ACTC_DIV_LANES];
        for (int l = 0; l < ACTC_DIV_LANES; l++) s[l] = 0.0f, a[l] = INFINITY, b[l] = -INFINITY;
        const size_t full = v->M / ACTC_DIV_LANES * ACTC_DIV_LANES;
        for (size_t m = 0; m < v->M; m++) {
            const int l = (int)(m < full ? m % ACTC_DIV_LANES : m - full);
            const float e = actc__load_dt(x, dt, base + m * v->stride);
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
        lfc[0] = actc__f32_to_bf16(ss / (float)v->M);
        const float l0 = actc__bf16_to_f32(lfc[0]), lo = aa - l0, hi = bb - l0;
        *mn = lo == lo ? lo : INFINITY;
        *mx = hi == hi ? hi : -INFINITY;
        return;
    }
    float rmn = INFINITY, rmx = -INFINITY;
    size_t blk = 0;
    for (size_t i0 = 0; i0 < d0; i0 += v->b[0])
        for (size_t j0 = 0; j0 < d1; j0 += v->b[1])
            for (size_t k0 = 0; k0 < d2; k0 += v->b[2], blk++) {
                const size_t i1 = actc__div_min(i0 + v->b[0], d0), j1 = actc__div_min(j0 + v->b[1], d1),
                             k1 = actc__div_min(k0 + v->b[2], d2);
                float acc = 0.0f;
                if (v->M <= ACTC_DIV_STACK_PLANE) {
                    float bmn = INFINITY, bmx = -INFINITY;
                    for (size_t k = k0; k < k1; k++) {
                        float col = 0.0f, cmn = INFINITY, cmx = -INFINITY;
                        for (size_t i = i0; i < i1; i++)
                            for (size_t j = j0; j < j1; j++) {
                                const float e = actc__div_at(v, x, dt, base, i, j, k);
                                col += e;
                                cmn = e < cmn ? e : cmn;
                                cmx = e > cmx ? e : cmx;
                            }
                        acc += col;
                        bmn = cmn < bmn ? cmn : bmn;
                        bmx = cmx > bmx ? cmx : bmx;
                    }
                    const float rows = (float)((i1 - i0) * (j1 - j0));
                    lfc[blk] = actc__f32_to_bf16(acc / (rows * (float)(k1 - k0)));
                    const float l = actc__bf16_to_f32(lfc[blk]), lo = bmn - l, hi = bmx - l;
                    rmn = lo < rmn ? lo : rmn;
                    rmx = hi > rmx ? hi : rmx;
                } else {
                    for (size_t i = i0; i < i1; i++)
                        for (size_t j = j0; j < j1; j++)
                            for (size_t k = k0; k < k1; k++) acc += actc__div_at(v, x, dt, base, i, j, k);
                    lfc[blk] = actc__f32_to_bf16(acc / (float)((i1 - i0) * (j1 - j0) * (k1 - k0)));
                }
            }
    if (v->M > ACTC_DIV_STACK_PLANE) {
        /* The residual's range, tile by tile, in the quantizer's lanes. */
        for (size_t t0 = 0; t0 < v->M; t0 += ACTC_DIV_TILE) {
            const size_t len = actc__div_min(ACTC_DIV_TILE, v->M - t0), rows = len / ACTC_QUANT_LANES * ACTC_QUANT_LANES;
            float a[ACTC_QUANT_LANES], b[ACTC_QUANT_LANES];
            for (int l = 0; l < ACTC_QUANT_LANES; l++) a[l] = INFINITY, b[l] = -INFINITY;
            for (size_t t = 0; t < len; t++) {
                const size_t m = t0 + t;
                const float r = actc__load_dt(x, dt, base + m * v->stride) - actc__div_mean_of(v, lfc, m);
                actc__minmax_step(r, &a[t < rows ? t % ACTC_QUANT_LANES : 0], &b[t < rows ? t % ACTC_QUANT_LANES : 0]);
            }
            for (int w = ACTC_QUANT_LANES / 2; w > 0; w /= 2)
                for (int l = 0; l < w; l++) actc__minmax_merge(a[l + w], b[l + w], &a[l], &b[l]);
            rmn = a[0] < rmn ? a[0] : rmn;
            rmx = b[0] > rmx ? b[0] : rmx;
        }
    }
    *mn = rmn;
    *mx = rmx;
}

/* Plane p into its payload sections (meta, lfc, codes: the whole
 * tensor's, as codec_division.c lays them out); seed = actc__div_seed. */
ACTC_HD void actc__div_encode_plane(const actc__div_view *v, const void *x, int dt, size_t p, uint32_t seed,
                                    uint8_t *meta, uint16_t *lfc, uint8_t *codes)
{
    float mn, mx;
    uint16_t *pl = lfc + p * v->nb;
    actc__div_pool(v, x, dt, p, pl, &mn, &mx);
    if (v->mode == 1) return; /* ACTC_DIV_LFC_ONLY */
    uint8_t *pm = meta + p * ACTC_QUANT_META, *pc = codes + p * v->code_sz;
    actc__quant_meta_of(mn, mx, v->q, pm);
    const actc__qparams qp = actc__quant_params_of(pm, v->q);
    const size_t base = actc__div_plane_base(v, p);
    const uint32_t s = seed + (uint32_t)(p * v->M);
    for (size_t c0 = 0; c0 < v->M; c0 += 8) {
        const int m = v->M - c0 < 8 ? (int)(v->M - c0) : 8;
        float r[8];
        for (int k = 0; k < m; k++)
            r[k] = actc__load_dt(x, dt, base + (c0 + k) * v->stride) - actc__div_mean_of(v, pl, c0 + k);
        const uint64_t w = actc__quant_chunk_pack(r, m, qp, s, (uint32_t)c0);
        for (size_t k = 0; k < actc__quant_run_bytes((size_t)m, v->q); k++)
            pc[c0 / 8 * (size_t)v->q + k] = (uint8_t)(w >> (8 * k));
    }
}

/* Plane p's values into y (the whole tensor, dtype dt). */
ACTC_HD void actc__div_decode_plane(const actc__div_view *v, const uint8_t *meta, const uint16_t *lfc,
                                    const uint8_t *codes, size_t p, void *y, int dt)
{
    const size_t base = actc__div_plane_base(v, p);
    const uint16_t *pl = lfc + p * v->nb;
    if (v->mode == 1) { /* LFC alone: the mean (the long path adds it to 0) */
        for (size_t m = 0; m < v->M; m++) {
            const float l = actc__div_mean_of(v, pl, m);
            actc__store_dt(y, dt, base + m * v->stride, v->M <= ACTC_DIV_STACK_PLANE ? l : 0.0f + l);
        }
        return;
    }
    const actc__qparams qp = actc__quant_params_of(meta + p * ACTC_QUANT_META, v->q);
    const uint8_t *pc = codes + p * v->code_sz;
    for (size_t c0 = 0; c0 < v->M; c0 += 8) {
        const int m = v->M - c0 < 8 ? (int)(v->M - c0) : 8;
        uint64_t w = 0;
        for (size_t k = 0; k < actc__quant_run_bytes((size_t)m, v->q); k++)
            w |= (uint64_t)pc[c0 / 8 * (size_t)v->q + k] << (8 * k);
        w = actc__spread8(w, v->q);
        for (int k = 0; k < m; k++)
            actc__store_dt(y, dt, base + (c0 + k) * v->stride,
                           actc__div_value((unsigned)(w >> (8 * k)) & 0xFFu, qp.z, qp.step,
                                           actc__div_mean_of(v, pl, c0 + k)));
    }
}
#endif
