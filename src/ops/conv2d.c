/* 2-D convolution as im2col + sgemm.
 *
 * Backends.  When the build has oneDNN (ACTC_HAVE_DNNL), its JIT
 * convolutions (conv2d_dnnl.c) run every pass instead, because they were
 * measured ~1.7x (ResNet-18) and ~2.3x (ResNet-20) faster per training step
 * than this file's im2col + OpenBLAS; actc__conv_backend_for makes the
 * choice per call, actc_set_conv_backend forces one.  Geometries oneDNN has
 * no kernel for fall back to the im2col code below, which also remains the
 * reference the tests compare oneDNN with.
 *
 * Chunks.  A chunk of nb samples is unfolded into one column matrix so that
 * one sgemm covers the whole chunk.  Putting several samples side by side
 * matters for the deep layers of a ResNet on small images (4x4 or 7x7
 * outputs): per-sample products there have a dimension of 16-49, where sgemm
 * runs far below its peak.  The price is a scatter of the product into NCHW
 * (fused with the bias) and a gather of dY, O(K*HW*nb) against
 * O(K*CKK*HW*nb) for the products.
 *
 * Two unfoldings, same products (Yc[K][nb*HW] is the chunk's output, columns
 * j = (sample, oh, ow), CKK = C*kh*kw):
 *  - planar ("NCHW"): col[CKK][nb*HW], rows r = (c,ki,kj), built plane by
 *    plane from the NCHW input.  Used when C is small (the stem: C = 1),
 *    where runs of C floats would be too short to copy efficiently, and for
 *    1x1 kernels (see geom_from).
 *      Yc = W . col;  dW += dYc . col^T;  dcol = W^T . dYc
 *  - channels-last ("NHWC"): the chunk is first transposed to xt[nb][H][W][C]
 *    and unfolded as colT[nb*HW][kh*kw*C]; each (position, ki) is then one
 *    contiguous copy of kw*C floats, whatever the padding, stride or plane
 *    size.  The planar unfolding of a 4x4 or 7x7 plane is a storm of tiny
 *    copies and boundary tests: timing each phase of the 512@4x4 layer of
 *    ResNet-18 at batch 128, unfolding and folding took 23% of its time
 *    planar, under 6% channels-last (transposes included).  The weight is
 *    reordered once per call to wr[K][kh][kw][C] to match.
 *      Yc = wr . colT^T;  dwr += dYc . colT;  dcolT = dYc^T . wr
 *
 * Workspace is bounded: nb is chosen so that the chunk's buffers fit in
 * CONV_CHUNK_BYTES (at least one sample); they are SCRATCH, allocated once
 * per call and freed before returning, never sized by the batch.  The
 * channels-last path also holds wr (and dwr in backward): the size of the
 * weight, not of the batch.
 *
 * Threads: unfold, fold, transposes, scatter and gather are OpenMP loops
 * whose iterations write disjoint data (no atomics); the sgemms are called
 * outside any parallel region so that OpenBLAS (OpenMP build) threads them
 * itself.  The alternative, samples split over threads with per-thread
 * buffers and single-threaded sgemms, was measured on the ResNet-18 shapes
 * at batch 128: within 2% overall (+4% on the 64-channel layers, +10% on the
 * small 1x1 ones, even on the rest) for per-thread dW buffers and
 * reductions, so it was not kept.  bench/bench_conv.c measures the whole
 * operator against plain sgemm. */
#include "conv2d_internal.h"
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <omp.h>
#include <string.h>

/* Bytes of the per-chunk buffers.  Measured on the ResNet-18 shapes
 * (bench_conv and per-shape sweeps of the chunk size): 8 MiB keeps the
 * products large (the 4x4 layers get 23 samples per chunk, 368 columns) and
 * the buffers in L3; 4 MiB cost the 512@4x4 layer ~8%, 16 MiB the 64@28x28
 * layer ~10%. */
#define CONV_CHUNK_BYTES ((size_t)8 << 20)

/* Loops smaller than this many floats run on one thread: forking costs more
 * than it saves on the tiny shapes of the tests. */
#define CONV_PAR_MIN ((size_t)1 << 15)

/* Channels from which the channels-last unfolding is used (see top). */
#define CONV_CL_MIN_C 16

/* Tile of the NCHW <-> NHWC transposes: 16x16 floats = 1 KiB in and out. */
#define CONV_TB 16

enum { IA_STRIDE = 0, IA_PAD, IA_XSLOT, IA_WSLOT };

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

/* Output positions o (0 <= o < n_out) whose input position o*s - p + k lies
 * in [0, n_in): [*lo, *hi).  Keeps the inner loops free of bounds tests. */
static void valid_range(int k, int s, int p, int n_in, int n_out, int *lo, int *hi)
{
    int a = p - k; /* need o*s >= a */
    int l = a <= 0 ? 0 : (a + s - 1) / s;
    int t = n_in - 1 + p - k; /* need o*s <= t */
    int h = t < 0 ? 0 : t / s + 1;
    if (h > n_out) h = n_out;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* Stride 1 with Wo == W ("same" width, e.g. 3x3 pad 1): output row oh of tap
 * (ki,kj) is input row oh+ki-p shifted by kj-p, so the whole valid block of a
 * tap is ONE contiguous run of the input plane at a fixed offset; only the
 * lo/hi boundary columns differ (they pick up a neighbouring row's edge
 * instead of zero padding).  One memcpy per tap instead of one per row: the
 * per-row version spent most of its time in call overhead on 28-wide rows. */
static int contiguous_taps(const conv_geom *g) { return g->s == 1 && g->Wo == g->W; }

/* Unfold one input plane xp[H][W] into its kh*kw rows of col, the row of
 * tap (ki,kj) at dst + (ki*kw+kj)*ldc, Ho*Wo floats each. */
static void unfold_plane(const conv_geom *g, const float *restrict xp, float *restrict dst,
                         size_t ldc)
{
    const int Wo = g->Wo, Ho = g->Ho, s = g->s, p = g->p;
    for (int ki = 0; ki < g->kh; ki++) {
        int oh_lo, oh_hi;
        valid_range(ki, s, p, g->H, Ho, &oh_lo, &oh_hi);
        for (int kj = 0; kj < g->kw; kj++) {
            float *restrict d = dst + (size_t)(ki * g->kw + kj) * ldc;
            int lo, hi;
            valid_range(kj, s, p, g->W, Wo, &lo, &hi);
            if (oh_lo > 0) memset(d, 0, (size_t)oh_lo * Wo * sizeof(float));
            if (oh_hi < Ho) memset(d + (size_t)oh_hi * Wo, 0, (size_t)(Ho - oh_hi) * Wo * sizeof(float));
            if (oh_hi <= oh_lo) continue;
            if (contiguous_taps(g)) {
                ptrdiff_t off = (ptrdiff_t)(ki - p) * g->W + (kj - p);
                ptrdiff_t a = (ptrdiff_t)oh_lo * Wo, b = (ptrdiff_t)oh_hi * Wo;
                /* Clamp to the plane; what is cut off is boundary columns,
                 * zeroed below. */
                if (a + off < 0) a = -off;
                if (b + off > (ptrdiff_t)g->plane) b = (ptrdiff_t)g->plane - off;
                if (b > a) memcpy(d + a, xp + a + off, (size_t)(b - a) * sizeof(float));
                if (lo > 0 || hi < Wo)
                    for (int oh = oh_lo; oh < oh_hi; oh++) {
                        float *r = d + (size_t)oh * Wo;
                        for (int ow = 0; ow < lo; ow++) r[ow] = 0.0f;
                        for (int ow = hi; ow < Wo; ow++) r[ow] = 0.0f;
                    }
                continue;
            }
            for (int oh = oh_lo; oh < oh_hi; oh++) {
                float *restrict r = d + (size_t)oh * Wo;
                const float *restrict srow = xp + (size_t)(oh * s - p + ki) * g->W - p + kj;
                for (int ow = 0; ow < lo; ow++) r[ow] = 0.0f;
                if (s == 1) {
                    for (int ow = lo; ow < hi; ow++) r[ow] = srow[ow];
                } else {
                    for (int ow = lo; ow < hi; ow++) r[ow] = srow[(size_t)ow * s];
                }
                for (int ow = hi; ow < Wo; ow++) r[ow] = 0.0f;
            }
        }
    }
}

/* xp[H][W] += fold of its kh*kw rows of dcol: the adjoint of unfold_plane.
 * dcol is scratch, so in the contiguous case its boundary columns are zeroed
 * first and each tap then becomes one branch-free run of adds. */
static void fold_plane(const conv_geom *g, float *restrict src, size_t ldc, float *restrict xp)
{
    const int Wo = g->Wo, Ho = g->Ho, s = g->s, p = g->p;
    for (int ki = 0; ki < g->kh; ki++) {
        int oh_lo, oh_hi;
        valid_range(ki, s, p, g->H, Ho, &oh_lo, &oh_hi);
        if (oh_hi <= oh_lo) continue;
        for (int kj = 0; kj < g->kw; kj++) {
            float *restrict d = src + (size_t)(ki * g->kw + kj) * ldc;
            int lo, hi;
            valid_range(kj, s, p, g->W, Wo, &lo, &hi);
            if (contiguous_taps(g)) {
                if (lo > 0 || hi < Wo)
                    for (int oh = oh_lo; oh < oh_hi; oh++) {
                        float *r = d + (size_t)oh * Wo;
                        for (int ow = 0; ow < lo; ow++) r[ow] = 0.0f;
                        for (int ow = hi; ow < Wo; ow++) r[ow] = 0.0f;
                    }
                ptrdiff_t off = (ptrdiff_t)(ki - p) * g->W + (kj - p);
                ptrdiff_t a = (ptrdiff_t)oh_lo * Wo, b = (ptrdiff_t)oh_hi * Wo;
                if (a + off < 0) a = -off;
                if (b + off > (ptrdiff_t)g->plane) b = (ptrdiff_t)g->plane - off;
                float *restrict xo = xp + off;
                for (ptrdiff_t j = a; j < b; j++) xo[j] += d[j];
                continue;
            }
            for (int oh = oh_lo; oh < oh_hi; oh++) {
                const float *restrict sv = d + (size_t)oh * Wo;
                float *restrict drow = xp + (size_t)(oh * s - p + ki) * g->W - p + kj;
                if (s == 1) {
                    for (int ow = lo; ow < hi; ow++) drow[ow] += sv[ow];
                } else {
                    for (int ow = lo; ow < hi; ow++) drow[(size_t)ow * s] += sv[ow];
                }
            }
        }
    }
}

/* col[r][i*HW + j] for samples n0..n0+nb-1 of x; ldc = nb*HW. */
static void im2col(const conv_geom *g, const float *x, int n0, int nb, float *col)
{
    const size_t ldc = (size_t)nb * g->HW;
    const int C = g->C, KK = g->kh * g->kw;
#pragma omp parallel for collapse(2) schedule(static) if (ldc * g->CKK >= CONV_PAR_MIN)
    for (int i = 0; i < nb; i++)
        for (int c = 0; c < C; c++)
            unfold_plane(g, x + ((size_t)(n0 + i) * C + c) * g->plane,
                         col + (size_t)c * KK * ldc + (size_t)i * g->HW, ldc);
}

/* dx[n0+i] += fold(dcol).  Each (sample, channel) plane is owned by one
 * thread, so the += needs no atomics.  dcol is clobbered. */
static void col2im(const conv_geom *g, float *dcol, int n0, int nb, float *dx)
{
    const size_t ldc = (size_t)nb * g->HW;
    const int C = g->C, KK = g->kh * g->kw;
#pragma omp parallel for collapse(2) schedule(static) if (ldc * g->CKK >= CONV_PAR_MIN)
    for (int i = 0; i < nb; i++)
        for (int c = 0; c < C; c++)
            fold_plane(g, dcol + (size_t)c * KK * ldc + (size_t)i * g->HW, ldc,
                       dx + ((size_t)(n0 + i) * C + c) * g->plane);
}


/* ---- channels-last unfolding ------------------------------------------- */

/* xt[i][q][c] = x[n0+i][c][q] for the chunk (q = h*W + w). */
static void to_nhwc(const conv_geom *g, const float *x, int n0, int nb, float *xt)
{
    const int C = g->C, P = (int)g->plane, ncb = (C + CONV_TB - 1) / CONV_TB;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)nb * g->plane * C >= CONV_PAR_MIN)
    for (int i = 0; i < nb; i++)
        for (int cb = 0; cb < ncb; cb++) {
            const float *src = x + (size_t)(n0 + i) * C * g->plane;
            float *dst = xt + (size_t)i * g->plane * C;
            int c0 = cb * CONV_TB, c1 = imin(C, c0 + CONV_TB);
            for (int q0 = 0; q0 < P; q0 += CONV_TB) {
                int q1 = imin(P, q0 + CONV_TB);
                for (int q = q0; q < q1; q++)
                    for (int c = c0; c < c1; c++) dst[(size_t)q * C + c] = src[(size_t)c * P + q];
            }
        }
}

/* dx[n0+i][c][q] += xt[i][q][c]. */
static void add_from_nhwc(const conv_geom *g, const float *xt, int n0, int nb, float *dx)
{
    const int C = g->C, P = (int)g->plane, ncb = (C + CONV_TB - 1) / CONV_TB;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)nb * g->plane * C >= CONV_PAR_MIN)
    for (int i = 0; i < nb; i++)
        for (int cb = 0; cb < ncb; cb++) {
            const float *src = xt + (size_t)i * g->plane * C;
            float *dst = dx + (size_t)(n0 + i) * C * g->plane;
            int c0 = cb * CONV_TB, c1 = imin(C, c0 + CONV_TB);
            for (int q0 = 0; q0 < P; q0 += CONV_TB) {
                int q1 = imin(P, q0 + CONV_TB);
                for (int c = c0; c < c1; c++)
                    for (int q = q0; q < q1; q++) dst[(size_t)c * P + q] += src[(size_t)q * C + c];
            }
        }
}

/* colT[i*HW + oh*Wo + ow][(ki*kw + kj)*C + c] = xt[i][ih][iw][c] or 0. */
static void unfold_cl(const conv_geom *g, const float *xt, int nb, float *colT)
{
    const int C = g->C, kw = g->kw, Ho = g->Ho;
    const size_t runmax = (size_t)kw * C;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)nb * g->HW * g->CKK >= CONV_PAR_MIN)
    for (int i = 0; i < nb; i++)
        for (int oh = 0; oh < Ho; oh++) {
            const int ih0 = oh * g->s - g->p;
            for (int ow = 0; ow < g->Wo; ow++) {
                float *row = colT + ((size_t)i * g->HW + (size_t)oh * g->Wo + ow) * g->CKK;
                const int iw0 = ow * g->s - g->p;
                const int kj_lo = imax(0, -iw0), kj_hi = imin(kw, g->W - iw0);
                for (int ki = 0; ki < g->kh; ki++) {
                    float *d = row + (size_t)ki * runmax;
                    const int ih = ih0 + ki;
                    if (ih < 0 || ih >= g->H || kj_lo >= kj_hi) {
                        memset(d, 0, runmax * sizeof(float));
                        continue;
                    }
                    if (kj_lo > 0) memset(d, 0, (size_t)kj_lo * C * sizeof(float));
                    memcpy(d + (size_t)kj_lo * C,
                           xt + (((size_t)i * g->H + ih) * g->W + iw0 + kj_lo) * C,
                           (size_t)(kj_hi - kj_lo) * C * sizeof(float));
                    if (kj_hi < kw)
                        memset(d + (size_t)kj_hi * C, 0, (size_t)(kw - kj_hi) * C * sizeof(float));
                }
            }
        }
}

/* xt[i][ih][iw][c] += colT[...]: the adjoint of unfold_cl.  Windows of
 * neighbouring positions overlap, so threads split samples and, when there
 * are fewer samples than threads, channel ranges; never positions. */
static void fold_cl(const conv_geom *g, const float *colT, int nb, float *xt)
{
    const int C = g->C, kw = g->kw, Ho = g->Ho;
    const int nth = omp_get_max_threads();
    int parts = nb >= nth ? 1 : (nth + nb - 1) / nb;
    if (parts > C / CONV_TB) parts = imax(1, C / CONV_TB);
    const int cstep = (C + parts - 1) / parts;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)nb * g->HW * g->CKK >= CONV_PAR_MIN)
    for (int i = 0; i < nb; i++)
        for (int part = 0; part < parts; part++) {
            const int c0 = part * cstep, c1 = imin(C, c0 + cstep);
            for (int oh = 0; oh < Ho; oh++) {
                const int ih0 = oh * g->s - g->p;
                for (int ow = 0; ow < g->Wo; ow++) {
                    const float *row = colT + ((size_t)i * g->HW + (size_t)oh * g->Wo + ow) * g->CKK;
                    const int iw0 = ow * g->s - g->p;
                    const int kj_lo = imax(0, -iw0), kj_hi = imin(kw, g->W - iw0);
                    if (kj_lo >= kj_hi) continue;
                    for (int ki = 0; ki < g->kh; ki++) {
                        const int ih = ih0 + ki;
                        if (ih < 0 || ih >= g->H) continue;
                        /* Taps kj_lo..kj_hi-1 of this row and input pixels
                         * iw0+kj_lo.. are both runs of C floats per tap. */
                        const float *restrict sv = row + ((size_t)ki * kw + kj_lo) * C;
                        float *restrict dv = xt + (((size_t)i * g->H + ih) * g->W + iw0 + kj_lo) * C;
                        if (parts == 1) {
                            const size_t n = (size_t)(kj_hi - kj_lo) * C;
                            for (size_t e = 0; e < n; e++) dv[e] += sv[e];
                        } else {
                            for (int kj = 0; kj < kj_hi - kj_lo; kj++)
                                for (int c = c0; c < c1; c++)
                                    dv[(size_t)kj * C + c] += sv[(size_t)kj * C + c];
                        }
                    }
                }
            }
        }
}

/* wr[k][t][c] = w[k][c][t], t = ki*kw + kj. */
static void reorder_w(const conv_geom *g, const float *w, float *wr)
{
    const int C = g->C, KK = g->kh * g->kw, K = g->K;
#pragma omp parallel for schedule(static) if ((size_t)K * g->CKK >= CONV_PAR_MIN)
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < KK; t++)
                wr[(size_t)k * g->CKK + (size_t)t * C + c] = w[(size_t)k * g->CKK + (size_t)c * KK + t];
}

/* dw[k][c][t] += dwr[k][t][c]. */
static void add_unreorder_w(const conv_geom *g, const float *dwr, float *dw)
{
    const int C = g->C, KK = g->kh * g->kw, K = g->K;
#pragma omp parallel for schedule(static) if ((size_t)K * g->CKK >= CONV_PAR_MIN)
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < KK; t++)
                dw[(size_t)k * g->CKK + (size_t)c * KK + t] += dwr[(size_t)k * g->CKK + (size_t)t * C + c];
}

/* ---- shared by both unfoldings ------------------------------------------ */

/* y[n0+i][k][:] = yc[k][i*HW ..] + b[k] (b may be NULL). */
static void scatter_out(const conv_geom *g, const float *yc, const float *b, int n0, int nb,
                        float *y)
{
    const size_t ldc = (size_t)nb * g->HW, HW = g->HW;
    const int K = g->K;
#pragma omp parallel for collapse(2) schedule(static) if (ldc * K >= CONV_PAR_MIN)
    for (int i = 0; i < nb; i++)
        for (int k = 0; k < K; k++) {
            const float *src = yc + (size_t)k * ldc + (size_t)i * HW;
            float *dst = y + ((size_t)(n0 + i) * K + k) * HW;
            float bk = b ? b[k] : 0.0f;
            for (size_t j = 0; j < HW; j++) dst[j] = src[j] + bk;
        }
}

/* dyc[k][i*HW ..] = dy[n0+i][k][:]. */
static void gather_dy(const conv_geom *g, const float *dy, int n0, int nb, float *dyc)
{
    const size_t ldc = (size_t)nb * g->HW, HW = g->HW;
    const int K = g->K;
#pragma omp parallel for collapse(2) schedule(static) if (ldc * K >= CONV_PAR_MIN)
    for (int i = 0; i < nb; i++)
        for (int k = 0; k < K; k++)
            memcpy(dyc + (size_t)k * ldc + (size_t)i * HW, dy + ((size_t)(n0 + i) * K + k) * HW,
                   HW * sizeof(float));
}

/* Samples per chunk: the unfolded columns (CKK per output position), Yc/dYc
 * (K per position) and, channels-last, the transposed input, within the cap. */
static int chunk_samples(const conv_geom *g)
{
    size_t per = ((g->CKK + (size_t)g->K) * g->HW + (g->cl ? g->C * g->plane : 0)) * sizeof(float);
    size_t nb = CONV_CHUNK_BYTES / per;
    /* cblas takes int sizes: keep nb*HW within int. */
    size_t max_cols = (size_t)INT_MAX / g->HW;
    if (nb > max_cols) nb = max_cols;
    if (nb < 1) nb = 1;
    if (nb > (size_t)g->N) nb = (size_t)g->N;
    return (int)nb;
}

static void geom_from(conv_geom *g, const actc_tensor *x, const actc_tensor *w, int s, int p)
{
    g->N = x->shape[0];
    g->C = x->shape[1];
    g->H = x->shape[2];
    g->W = x->shape[3];
    g->K = w->shape[0];
    g->kh = w->shape[2];
    g->kw = w->shape[3];
    g->s = s;
    g->p = p;
    g->Ho = (g->H + 2 * p - g->kh) / s + 1;
    g->Wo = (g->W + 2 * p - g->kw) / s + 1;
    g->HW = (size_t)g->Ho * g->Wo;
    g->CKK = (size_t)g->C * g->kh * g->kw;
    g->plane = (size_t)g->H * g->W;
    /* 1x1 kernels stay planar: their unfolding is a plain (strided) copy of
     * the input already, and the transpose would read every pixel even when
     * a stride of 2 uses a quarter of them (measured 1.3-1.6x slower). */
    g->cl = g->C >= CONV_CL_MIN_C && g->kh * g->kw > 1;
}

/* Per-call scratch. */
typedef struct {
    float *col;  /* col or colT (and dcol/dcolT over it)          */
    float *yc;   /* Yc/dYc when nb > 1                             */
    float *xt;   /* channels-last input chunk (and its gradient)   */
    float *wr;   /* channels-last weight                           */
    float *dwr;  /* channels-last weight gradient                  */
} conv_ws;

static void ws_free(conv_ws *ws)
{
    actc_mem_free(ws->col);
    actc_mem_free(ws->yc);
    actc_mem_free(ws->xt);
    actc_mem_free(ws->wr);
    actc_mem_free(ws->dwr);
    memset(ws, 0, sizeof *ws);
}

/* Allocate what a pass needs; need_wr/need_dwr only matter channels-last. */
static actc_status ws_alloc(conv_ws *ws, const conv_geom *g, int nb, int need_col, int need_wr,
                            int need_dwr)
{
    const size_t cols = (size_t)nb * g->HW, f = sizeof(float);
    memset(ws, 0, sizeof *ws);
    if (need_col && !(ws->col = actc_mem_alloc(ACTC_MEM_SCRATCH, g->CKK * cols * f))) goto oom;
    if (nb > 1 && !(ws->yc = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)g->K * cols * f))) goto oom;
    if (g->cl) {
        if (need_col && !(ws->xt = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)nb * g->plane * g->C * f)))
            goto oom;
        if (need_wr && !(ws->wr = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)g->K * g->CKK * f)))
            goto oom;
        if (need_dwr && !(ws->dwr = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)g->K * g->CKK * f)))
            goto oom;
    }
    return ACTC_OK;
oom:
    ws_free(ws);
    return actc_last_status();
}

/* ---- backend choice ------------------------------------------------------ */

/* The backend every conv2d call of the process uses is the setting
 * actc__set.conv (src/core/settings.c): ACTC_CONV_AUTO (the per-call
 * choice below) unless actc_set_conv_backend (or, in tests and benches,
 * actc__conv_force_backend) forced one.  The library reads no environment:
 * a program that wants a variable to choose (the actc command's ACTC_CONV)
 * reads it and calls actc_set_conv_backend. */
_Static_assert((int)ACTC_CONV_AUTO == (int)ACTC__BACKEND_AUTO && (int)ACTC_CONV_IM2COL == (int)ACTC__CONV_IM2COL &&
                   (int)ACTC_CONV_DNNL == (int)ACTC__CONV_DNNL,
               "the convolution backends are the settings' values");

void actc__conv_force_backend(actc_conv_backend b) { actc__set.conv = b; }

actc_status actc_set_conv_backend(const char *name)
{
    if (!name) return actc_set_error(ACTC_ERR_INVALID, "convolution backend: NULL name (auto, dnnl, im2col)");
    if (strcmp(name, "auto") == 0) {
        actc__set.conv = ACTC_CONV_AUTO;
    } else if (strcmp(name, "im2col") == 0) {
        actc__set.conv = ACTC_CONV_IM2COL;
    } else if (strcmp(name, "dnnl") == 0) {
        if (actc__set.deterministic)
            return actc_set_error(ACTC_ERR_INVALID, "convolution backend 'dnnl': its weight gradients depend on the "
                                                    "thread count, and deterministic mode is on (use auto or im2col)");
        if (!actc__conv_dnnl_compiled())
            return actc_set_error(ACTC_ERR_INVALID, "convolution backend 'dnnl': this build of actc has no oneDNN "
                                                    "(use auto or im2col)");
        actc__set.conv = ACTC_CONV_DNNL;
    } else {
        return actc_set_error(ACTC_ERR_INVALID, "unknown convolution backend '%s' (auto, dnnl, im2col)", name);
    }
    return ACTC_OK;
}

const char *actc_get_conv_backend(void)
{
    switch (actc__set.conv) {
    case ACTC_CONV_IM2COL: return "im2col";
    case ACTC_CONV_DNNL: return "dnnl";
    default: return "auto";
    }
}

void actc__conv_release(void) { actc__conv_dnnl_cleanup(); }

/* The forced backend, or ACTC_CONV_AUTO. */
static actc_conv_backend conv_forced_backend(void) { return (actc_conv_backend)actc__set.conv; }

actc_conv_backend actc__conv_backend_for(const conv_geom *g)
{
    actc_conv_backend f = conv_forced_backend();
    if (f != ACTC_CONV_AUTO) return f;
    (void)g;
    /* oneDNN reduces the weight gradient across threads (actc_set_deterministic). */
    if (actc__set.deterministic) return ACTC_CONV_IM2COL;
    /* oneDNN whenever it is built in: it was faster on every ResNet-18 and
     * ResNet-20 shape measured (bench_conv), and its passes fall back to
     * im2col by themselves when it has no implementation for a geometry. */
    return actc__conv_dnnl_compiled() ? ACTC_CONV_DNNL : ACTC_CONV_IM2COL;
}

/* After a oneDNN pass: *ran = 1 if it did the work, 0 if im2col must.  A
 * geometry oneDNN cannot run falls back to im2col quietly, unless oneDNN was
 * forced (then the caller asked for it explicitly, e.g. a test). */
static actc_status dnnl_outcome(actc_status st, int unsupported, const conv_geom *g, int *ran)
{
    *ran = 0;
    if (st != ACTC_OK) return st;
    if (!unsupported) {
        *ran = 1;
        return ACTC_OK;
    }
    if (conv_forced_backend() == ACTC_CONV_DNNL)
        return actc_set_error(ACTC_ERR_STATE,
                              actc__conv_dnnl_compiled()
                                  ? "conv2d: the oneDNN backend was forced (dnnl) but cannot run input "
                                    "[%d, %d, %d, %d] with a %dx%d kernel, stride %d, pad %d"
                                  : "conv2d: the oneDNN backend was forced (dnnl) but this build has "
                                    "no oneDNN (input [%d, %d, %d, %d], %dx%d kernel, stride %d, "
                                    "pad %d)",
                              g->N, g->C, g->H, g->W, g->kh, g->kw, g->s, g->p);
    return ACTC_OK;
}

/* Forward of samples [n0, n0+m): y (NCHW) = conv(x) + b. */
static void forward_chunk(const conv_geom *g, const conv_ws *ws, const float *x, const float *w,
                          const float *bias, int n0, int m, float *y)
{
    const int cols = (int)((size_t)m * g->HW), CKK = (int)g->CKK;
    /* A lone sample's product is already in NCHW order: write it in place. */
    float *dst = m == 1 ? y + (size_t)n0 * g->K * g->HW : ws->yc;
    if (g->cl) {
        to_nhwc(g, x, n0, m, ws->xt);
        unfold_cl(g, ws->xt, m, ws->col);
        actc__sgemm(0, 1, g->K, cols, CKK, 1.0f, ws->wr, CKK,
                    ws->col, CKK, 0.0f, dst, cols);
    } else {
        im2col(g, x, n0, m, ws->col);
        actc__sgemm(0, 0, g->K, cols, CKK, 1.0f, w, CKK,
                    ws->col, cols, 0.0f, dst, cols);
    }
    if (m > 1) {
        scatter_out(g, ws->yc, bias, n0, m, y);
    } else if (bias) {
        for (int k = 0; k < g->K; k++)
            for (size_t j = 0; j < g->HW; j++) dst[(size_t)k * g->HW + j] += bias[k];
    }
}

/* Backward of samples [n0, n0+m) given their dY in dyc ([K][m*HW]). */
static void backward_chunk(const conv_geom *g, const conv_ws *ws, const float *x, const float *w,
                           const float *dyc, int n0, int m, int first, float *dx, float *dw)
{
    const int cols = (int)((size_t)m * g->HW), CKK = (int)g->CKK;
    if (g->cl) {
        if (dw) {
            to_nhwc(g, x, n0, m, ws->xt);
            unfold_cl(g, ws->xt, m, ws->col);
            /* dwr starts from zero at the first chunk: no separate clear. */
            actc__sgemm(0, 0, g->K, CKK, cols, 1.0f, dyc, cols,
                        ws->col, CKK, first ? 0.0f : 1.0f, ws->dwr, CKK);
        }
        if (dx) {
            actc__sgemm(1, 0, cols, CKK, g->K, 1.0f, dyc, cols,
                        ws->wr, CKK, 0.0f, ws->col, CKK);
            memset(ws->xt, 0, (size_t)m * g->plane * g->C * sizeof(float));
            fold_cl(g, ws->col, m, ws->xt);
            add_from_nhwc(g, ws->xt, n0, m, dx);
        }
    } else {
        if (dw) {
            im2col(g, x, n0, m, ws->col);
            actc__sgemm(0, 1, g->K, CKK, cols, 1.0f, dyc, cols,
                        ws->col, cols, 1.0f, dw, CKK);
        }
        if (dx) {
            /* col is free again: reuse it for dcol. */
            actc__sgemm(1, 0, CKK, cols, g->K, 1.0f, w, CKK, dyc,
                        cols, 0.0f, ws->col, cols);
            col2im(g, ws->col, n0, m, dx);
        }
    }
}

/* Samples of a saved input, decoded on demand (oneDNN weight gradient):
 * rows [base + n0, base + n0 + m) of the save. */
typedef struct {
    actc_ctx *ctx;
    actc_node *node;
    int slot, base;
} saved_rows;

static actc_status fill_saved_rows(void *user, int n0, int m, float *dst)
{
    const saved_rows *s = user;
    return actc_load_rows(s->ctx, s->node, s->slot, s->base + n0, m, dst);
}

/* The oneDNN backward, one chunk of samples at a time: dW from the saved
 * input's rows of the chunk (decoded just for it), then dx of the same
 * samples.  When x has no gradient yet and dx is as large as dy (a stride-1
 * convolution keeping the channel count), each chunk's dx replaces its dy,
 * and dy's buffer becomes x's gradient: this moment of the backward pass
 * then holds two activation-sized gradients instead of three, and no input
 * is ever decoded whole.  *ran = 0 (nothing done) if oneDNN cannot run the
 * geometry. */
static actc_status dnnl_backward(actc_ctx *ctx, actc_node *node, const conv_geom *g, const float *w,
                                 float *dw, int want_dx, int *ran)
{
    actc_tensor *xin = node->inputs[0];
    int nb, unsup;
    *ran = 0;
    actc_status st = actc__conv_dnnl_backward_plan(g, &nb, &unsup);
    if ((st = dnnl_outcome(st, unsup, g, ran)) != ACTC_OK || !*ran) return st;
    const size_t xs = (size_t)g->C * g->plane, ys = (size_t)g->K * g->HW;
    float *dy = node->output->grad->data, *dx = NULL, *tmp = NULL;
    const int in_place = want_dx && !xin->grad && xs == ys;
    if (in_place) {
        if (!(tmp = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)nb * xs * sizeof(float)))) return actc_last_status();
    } else if (want_dx && (st = actc_grad_buffer(ctx, xin, &dx)) != ACTC_OK) {
        return st;
    }
    for (int n0 = 0; n0 < g->N && st == ACTC_OK; n0 += nb) {
        conv_geom gc = *g;
        gc.N = imin(nb, g->N - n0);
        float *dyc = dy + (size_t)n0 * ys;
        if (dw) {
            saved_rows sr = {ctx, node, node->iattr[IA_XSLOT], n0};
            conv_rows xrows = {fill_saved_rows, &sr};
            st = actc__conv_dnnl_backward_weights(&gc, NULL, &xrows, dyc, dw, &unsup);
            if (st == ACTC_OK && unsup) st = actc_set_error(ACTC_ERR_STATE, "conv2d: oneDNN refused a chunk it planned");
        }
        if (st == ACTC_OK && want_dx) {
            float *out = in_place ? tmp : dx + (size_t)n0 * xs;
            if (in_place) memset(tmp, 0, (size_t)gc.N * xs * sizeof(float));
            st = actc__conv_dnnl_backward_data(&gc, w, dyc, out, &unsup);
            if (st == ACTC_OK && unsup) st = actc_set_error(ACTC_ERR_STATE, "conv2d: oneDNN refused a chunk it planned");
            if (st == ACTC_OK && in_place) memcpy(dyc, tmp, (size_t)gc.N * xs * sizeof(float));
        }
    }
    actc_mem_free(tmp);
    if (st == ACTC_OK && in_place) {
        actc_tensor *gt = actc_grad_take(node); /* now dx, in dy's [N,K,Ho,Wo] shape */
        gt->ndim = xin->ndim;
        memcpy(gt->shape, xin->shape, sizeof gt->shape);
        st = actc_grad_adopt(ctx, xin, gt);
    }
    return st;
}

static actc_status conv2d_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *xin = node->inputs[0], *win = node->inputs[1];
    actc_tensor *bin = node->n_inputs > 2 ? node->inputs[2] : NULL;
    const float *dy = node->output->grad->data;
    conv_geom g;
    geom_from(&g, xin, win, node->iattr[IA_STRIDE], node->iattr[IA_PAD]);

    /* dx is allocated only once the weight gradient is done (oneDNN path):
     * the decoded input is released first, so the two are never alive
     * together at the moments that set the backward peak. */
    float *dx = NULL, *dw, *db;
    int want_dx = xin->requires_grad;
    actc_status st;
    if ((st = actc_grad_buffer(ctx, win, &dw)) != ACTC_OK) return st;
    if ((st = actc_grad_buffer(ctx, bin, &db)) != ACTC_OK) return st;

    if (db) {
        const int K = g.K, N = g.N;
        const size_t HW = g.HW;
#pragma omp parallel for schedule(static) if ((size_t)N * K * HW >= CONV_PAR_MIN)
        for (int k = 0; k < K; k++) {
            double acc = 0; /* N*HW terms: float partials per plane, double across */
            for (int n = 0; n < N; n++) {
                const float *p = dy + ((size_t)n * K + k) * HW;
                float part = 0.0f;
                for (size_t j = 0; j < HW; j++) part += p[j];
                acc += part;
            }
            db[k] += (float)acc;
        }
    }
    if ((!want_dx && !dw) || g.N == 0) return ACTC_OK;

    /* The forward pass saved exactly what this backward needs (see actc_conv2d). */
    actc_tensor *xs = NULL, *wsv = NULL;
    conv_ws ws = {0};
    const float *x = NULL, *w = win->data;
    if (dw && node->iattr[IA_XSLOT] < 0)
        return actc_set_error(ACTC_ERR_STATE, "conv2d backward: input was not saved");
    if (want_dx && node->iattr[IA_WSLOT] >= 0) {
        wsv = actc_load(ctx, node, node->iattr[IA_WSLOT]);
        if (!wsv) { st = actc_last_status(); goto done; }
        w = wsv->data;
    }
    if (want_dx && !w) {
        st = actc_set_error(ACTC_ERR_STATE, "conv2d backward: the weight's data was freed");
        goto done;
    }

    if (actc__conv_backend_for(&g) == ACTC_CONV_DNNL) {
        int ran;
        st = dnnl_backward(ctx, node, &g, w, dw, want_dx, &ran);
        if (st != ACTC_OK || ran) goto done;
    }

    if (dw) {
        xs = actc_load(ctx, node, node->iattr[IA_XSLOT]);
        if (!xs) { st = actc_last_status(); goto done; }
        x = xs->data;
    }
    if (want_dx && (st = actc_grad_buffer(ctx, xin, &dx)) != ACTC_OK) goto done;
    const int nb = chunk_samples(&g);
    if ((st = ws_alloc(&ws, &g, nb, 1, dx != NULL, dw != NULL)) != ACTC_OK) goto done;
    if (g.cl && dx) reorder_w(&g, w, ws.wr);
    for (int n0 = 0; n0 < g.N; n0 += nb) {
        const int m = imin(nb, g.N - n0);
        const float *dyc = dy + (size_t)n0 * g.K * g.HW; /* one sample is already [K][HW] */
        if (m > 1) {
            gather_dy(&g, dy, n0, m, ws.yc);
            dyc = ws.yc;
        }
        backward_chunk(&g, &ws, x, w, dyc, n0, m, n0 == 0, dx, dw);
    }
    if (g.cl && dw) add_unreorder_w(&g, ws.dwr, dw);
    st = ACTC_OK;
done:
    ws_free(&ws);
    actc_tensor_release(xs);
    actc_tensor_release(wsv);
    return st;
}

/* Record the node and its saves (the forward result y need not be computed
 * yet: only its shape matters).  Releases y on failure. */
static actc_tensor *record_conv(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b, int stride, int pad,
                                actc_tensor *y)
{
    actc_tensor *in[3] = {x, w, b};
    actc_node *node;
    if (!actc__op_record(ctx, "conv2d", conv2d_backward, y, b ? 3 : 2, in, &node)) return NULL;
    if (node) {
        node->iattr[IA_STRIDE] = stride;
        node->iattr[IA_PAD] = pad;
        /* dW is a correlation of the saved input with dy: linear in it. */
        actc_save_role xr = actc__role(ACTC_ROLE_CONV_IN, 1);
        xr.kernel_h = w->shape[2];
        xr.kernel_w = w->shape[3];
        xr.fan_in = w->shape[1] * w->shape[2] * w->shape[3];
        if (actc__save_product_inputs(ctx, node, x, w, &xr, &node->iattr[IA_XSLOT], &node->iattr[IA_WSLOT], NULL) !=
            ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
    }
    return y;
}

/* The forward computed in x's own buffer, a chunk of samples at a time
 * (each output sample depends on its input sample only): x is saved first,
 * then every chunk's output goes to a chunk-sized scratch and over the
 * chunk's input, and y takes x's buffer.  Only when the caller held x's
 * only reference, y is as large as x and oneDNN runs the geometry; NULL
 * without an error otherwise (*err ACTC_OK), NULL with *err set on failure.
 * When the save kept x by reference (the `none` policy) x is no longer the
 * caller's alone, and y is computed into a buffer of its own. */
static actc_tensor *conv_in_place(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b, int stride,
                                  int pad, const conv_geom *g, actc_status *err)
{
    int nb, unsup;
    const size_t xs = (size_t)g->C * g->plane, ys = (size_t)g->K * g->HW;
    *err = ACTC_OK;
    if (!actc__tensor_sole_owner(x) || x->cat != ACTC_MEM_ACT || xs != ys || g->N == 0 ||
        actc__conv_backend_for(g) != ACTC_CONV_DNNL)
        return NULL;
    if ((*err = actc__conv_dnnl_forward_plan(g, b != NULL, &nb, &unsup)) != ACTC_OK || unsup) return NULL;
    int yshape[4] = {g->N, g->K, g->Ho, g->Wo};
    actc_tensor *y = actc__tensor_header(ACTC_MEM_ACT, 4, yshape);
    if (!y || !(y = record_conv(ctx, x, w, b, stride, pad, y))) {
        *err = actc_last_status();
        return NULL;
    }
    /* Recording saved x: when the store kept it by reference (fp32) the
     * caller's reference is no longer the only one and x must keep its
     * values for backward, so each chunk's output goes straight to a buffer
     * of y's own (the same chunks, so the same bits). */
    const int in_place = actc__tensor_sole_owner(x);
    float *tmp = in_place ? actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)nb * ys * sizeof(float)) : NULL;
    if (in_place ? !tmp : (*err = actc__tensor_give_data(y, NULL)) != ACTC_OK) {
        *err = actc_last_status();
        actc_tensor_release(y);
        return NULL;
    }
    float *xd = x->data;
    if (in_place) actc_tensor_mark_changed(x); /* written over, chunk by chunk, below */
    for (int n0 = 0; n0 < g->N && *err == ACTC_OK; n0 += nb) {
        conv_geom gc = *g;
        gc.N = imin(nb, g->N - n0);
        float *out = in_place ? tmp : y->data + (size_t)n0 * ys;
        *err = actc__conv_dnnl_forward(&gc, xd + (size_t)n0 * xs, w->data, b ? b->data : NULL, out, &unsup);
        if (*err == ACTC_OK && unsup) *err = actc_set_error(ACTC_ERR_STATE, "conv2d: oneDNN refused a chunk it planned");
        if (*err == ACTC_OK && in_place) memcpy(xd + (size_t)n0 * xs, tmp, (size_t)gc.N * ys * sizeof(float));
    }
    actc_mem_free(tmp);
    if (*err == ACTC_OK && in_place) *err = actc__tensor_give_data(y, x); /* x's buffer: its only reference */
    if (*err != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    return y;
}

static actc_tensor *conv2d_forward(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b, int stride,
                                   int pad, int take)
{
    char xs[64], wss[64], bs[64];
    OP_CHECK(ctx && x && w, "conv2d: NULL %s", !ctx ? "context" : !x ? "input" : "weight");
    OP_CHECK(x->data && w->data && (!b || b->data), "conv2d: a tensor without data (released?)");
    actc_shape_str(x, xs, sizeof xs);
    actc_shape_str(w, wss, sizeof wss);
    OP_CHECK(x->ndim == 4, "conv2d: input must be 4-D [N,C,H,W], got %s", xs);
    OP_CHECK(w->ndim == 4, "conv2d: weight must be 4-D [K,C,kh,kw], got %s", wss);
    OP_CHECK(x->shape[1] == w->shape[1],
             "conv2d: input %s has %d channels but weight %s expects %d", xs, x->shape[1], wss,
             w->shape[1]);
    OP_CHECK(w->shape[0] >= 1 && w->shape[1] >= 1 && w->shape[2] >= 1 && w->shape[3] >= 1,
             "conv2d: empty weight %s", wss);
    OP_CHECK(!b || (b->ndim == 1 && b->shape[0] == w->shape[0]),
             "conv2d: bias %s must be [%d] for weight %s", actc_shape_str(b, bs, sizeof bs),
             w->shape[0], wss);
    OP_CHECK(stride >= 1, "conv2d: stride %d must be >= 1 (input %s, weight %s)", stride, xs, wss);
    OP_CHECK(pad >= 0, "conv2d: padding %d must be >= 0 (input %s, weight %s)", pad, xs, wss);
    OP_CHECK(pad <= INT_MAX / 4 - x->shape[2] && pad <= INT_MAX / 4 - x->shape[3],
             "conv2d: padding %d is too large (input %s)", pad, xs);
    OP_CHECK(x->shape[2] + 2 * pad >= w->shape[2] && x->shape[3] + 2 * pad >= w->shape[3],
             "conv2d: kernel %dx%d larger than the padded input %dx%d (input %s, weight %s, pad %d)",
             w->shape[2], w->shape[3], x->shape[2] + 2 * pad, x->shape[3] + 2 * pad, xs, wss, pad);
    conv_geom g;
    geom_from(&g, x, w, stride, pad);
    OP_CHECK(g.CKK <= (size_t)INT_MAX && g.HW <= (size_t)INT_MAX / 2,
             "conv2d: input %s with weight %s is too large", xs, wss);

    if (take) {
        actc_status err;
        actc_tensor *yp = conv_in_place(ctx, x, w, b, stride, pad, &g, &err);
        if (yp || err != ACTC_OK) return yp;
    }
    int yshape[4] = {g.N, g.K, g.Ho, g.Wo};
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 4, yshape);
    if (!y) return NULL;

    int ran = 0;
    if (g.N > 0 && actc__conv_backend_for(&g) == ACTC_CONV_DNNL) {
        int unsup;
        actc_status st =
            actc__conv_dnnl_forward(&g, x->data, w->data, b ? b->data : NULL, y->data, &unsup);
        if (dnnl_outcome(st, unsup, &g, &ran) != ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
    }
    if (g.N > 0 && !ran) {
        const int nb = chunk_samples(&g);
        conv_ws ws;
        if (ws_alloc(&ws, &g, nb, 1, 1, 0) != ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
        if (g.cl) reorder_w(&g, w->data, ws.wr);
        for (int n0 = 0; n0 < g.N; n0 += nb)
            forward_chunk(&g, &ws, x->data, w->data, b ? b->data : NULL, n0, imin(nb, g.N - n0),
                          y->data);
        ws_free(&ws);
    }

    return record_conv(ctx, x, w, b, stride, pad, y);
}

actc_tensor *actc_conv2d(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b, int stride, int pad)
{
    return conv2d_forward(ctx, x, w, b, stride, pad, 0);
}

actc_tensor *actc_conv2d_take(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b, int stride, int pad)
{
    actc_tensor *y = conv2d_forward(ctx, x, w, b, stride, pad, 1);
    actc_tensor_release(x);
    return y;
}
