/* 2-D convolution as im2col + sgemm.
 *
 * Layout.  A chunk of nb samples is unfolded into one column matrix
 *   col[C*kh*kw][nb*Ho*Wo]     (row r = (c,ki,kj), column j = (sample, oh, ow))
 * so that one sgemm covers the whole chunk:
 *   forward   Yc[K][nb*HW]   = W[K][CKK] . col
 *   backward  dW[K][CKK]    += dYc . col^T
 *             dcol[CKK][nb*HW] = W^T . dYc          (written over col)
 * Putting several samples side by side matters for the deep layers of a
 * ResNet on small images (4x4 or 7x7 outputs): per-sample products there have
 * an inner or outer dimension of 16-49, where sgemm runs far below its peak.
 * The price is a scatter of Yc into NCHW (fused with the bias) and a gather of
 * dY, both O(K*HW*nb) against O(K*CKK*HW*nb) for the products.
 *
 * Workspace is bounded: nb is chosen so that col and the Yc/dYc buffer fit in
 * CONV_CHUNK_BYTES (at least one sample), allocated once per call as SCRATCH
 * and freed before returning; it never grows with the batch.
 *
 * Threads: im2col, col2im, scatter and gather are OpenMP loops over
 * (sample, channel) planes, so no two threads write the same element; the
 * sgemms are called outside any parallel region so that OpenBLAS (OpenMP
 * build) threads them itself.  bench/bench_conv.c measures this against a
 * plain sgemm of the same size. */
#include "ops.h"
#include <cblas.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>

/* Bytes of col + Yc per chunk.  Measured with bench_conv on the ResNet-18
 * shapes: 8 MiB keeps the products large enough (the 4x4 layers get 28
 * samples per chunk) while staying well inside L3 with the products' own
 * packing buffers. */
#define CONV_CHUNK_BYTES ((size_t)8 << 20)

/* Loops smaller than this many floats run on one thread: forking costs more
 * than it saves on the tiny shapes of the tests. */
#define CONV_PAR_MIN ((size_t)1 << 15)

typedef struct {
    int N, C, H, W, K, kh, kw, s, p, Ho, Wo;
    size_t HW, CKK, plane; /* Ho*Wo, C*kh*kw, H*W */
} conv_geom;

enum { IA_STRIDE = 0, IA_PAD, IA_XSLOT, IA_WSLOT };

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

/* Samples per chunk: col (CKK rows) and Yc/dYc (K rows) within the cap. */
static int chunk_samples(const conv_geom *g)
{
    size_t per = (g->CKK + (size_t)g->K) * g->HW * sizeof(float);
    size_t nb = per ? CONV_CHUNK_BYTES / per : (size_t)g->N;
    /* cblas takes int sizes: keep nb*HW and nb*HW*CKK indices sane. */
    size_t max_cols = (size_t)INT_MAX / (g->HW ? g->HW : 1);
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
}

/* The gradient buffer of t, distinguishing "no gradient wanted" (*out NULL,
 * ACTC_OK) from an allocation failure. */
static actc_status grad_buf(actc_ctx *ctx, actc_tensor *t, float **out)
{
    *out = NULL;
    if (!t || !t->requires_grad) return ACTC_OK;
    *out = actc_grad_of(ctx, t);
    return *out ? ACTC_OK : actc_last_status();
}

static actc_status conv2d_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *xt = node->inputs[0], *wt = node->inputs[1];
    actc_tensor *bt = node->n_inputs > 2 ? node->inputs[2] : NULL;
    const float *dy = node->output->grad->data;
    conv_geom g;
    geom_from(&g, xt, wt, node->iattr[IA_STRIDE], node->iattr[IA_PAD]);

    actc_tensor *xs = NULL, *ws = NULL;
    float *col = NULL, *dyc_buf = NULL;
    float *dx, *dw, *db;
    actc_status st;
    if ((st = grad_buf(ctx, xt, &dx)) != ACTC_OK) return st;
    if ((st = grad_buf(ctx, wt, &dw)) != ACTC_OK) return st;
    if ((st = grad_buf(ctx, bt, &db)) != ACTC_OK) return st;

    if (db) {
        const int K = g.K, N = g.N;
        const size_t HW = g.HW;
#pragma omp parallel for schedule(static) if ((size_t)N * K * HW >= CONV_PAR_MIN)
        for (int k = 0; k < K; k++) {
            double acc = 0; /* a batch of 128 x 784 terms: keep the sum exact-ish */
            for (int n = 0; n < N; n++) {
                const float *p = dy + ((size_t)n * K + k) * HW;
                float part = 0.0f;
                for (size_t j = 0; j < HW; j++) part += p[j];
                acc += part;
            }
            db[k] += (float)acc;
        }
    }
    if (!dx && !dw) return ACTC_OK;

    /* The forward pass saved exactly what this backward needs (see actc_conv2d). */
    const float *x = NULL, *w = wt->data;
    if (dw) {
        if (node->iattr[IA_XSLOT] < 0)
            return actc_set_error(ACTC_ERR_STATE, "conv2d backward: input was not saved");
        xs = actc_load(ctx, node, node->iattr[IA_XSLOT]);
        if (!xs) return actc_last_status();
        x = xs->data;
    }
    if (dx && node->iattr[IA_WSLOT] >= 0) {
        ws = actc_load(ctx, node, node->iattr[IA_WSLOT]);
        if (!ws) { st = actc_last_status(); goto done; }
        w = ws->data;
    }
    if (dx && !w) {
        st = actc_set_error(ACTC_ERR_STATE, "conv2d backward: the weight's data was freed");
        goto done;
    }

    const int nb = chunk_samples(&g);
    col = actc_mem_alloc(ACTC_MEM_SCRATCH, g.CKK * (size_t)nb * g.HW * sizeof(float));
    if (!col) { st = actc_last_status(); goto done; }
    if (nb > 1) {
        dyc_buf = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)g.K * nb * g.HW * sizeof(float));
        if (!dyc_buf) { st = actc_last_status(); goto done; }
    }
    for (int n0 = 0; n0 < g.N; n0 += nb) {
        int m = g.N - n0 < nb ? g.N - n0 : nb;
        int cols = (int)((size_t)m * g.HW);
        const float *dyc;
        if (m == 1) {
            dyc = dy + (size_t)n0 * g.K * g.HW; /* one sample is already [K][HW] */
        } else {
            gather_dy(&g, dy, n0, m, dyc_buf);
            dyc = dyc_buf;
        }
        if (dw) {
            im2col(&g, x, n0, m, col);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.K, (int)g.CKK, cols, 1.0f, dyc,
                        cols, col, cols, 1.0f, dw, (int)g.CKK);
        }
        if (dx) {
            /* col is free again: reuse it for dcol. */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)g.CKK, cols, g.K, 1.0f, w,
                        (int)g.CKK, dyc, cols, 0.0f, col, cols);
            col2im(&g, col, n0, m, dx);
        }
    }
    st = ACTC_OK;
done:
    actc_mem_free(col);
    actc_mem_free(dyc_buf);
    actc_tensor_release(xs);
    actc_tensor_release(ws);
    return st;
}

actc_tensor *actc_conv2d(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b, int stride,
                         int pad)
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

    int yshape[4] = {g.N, g.K, g.Ho, g.Wo};
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 4, yshape);
    if (!y) return NULL;

    if (g.N > 0) {
        const int nb = chunk_samples(&g);
        float *col = actc_mem_alloc(ACTC_MEM_SCRATCH, g.CKK * (size_t)nb * g.HW * sizeof(float));
        float *yc = nb > 1 ? actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)g.K * nb * g.HW * sizeof(float))
                           : NULL;
        if (!col || (nb > 1 && !yc)) {
            actc_mem_free(col);
            actc_mem_free(yc);
            actc_tensor_release(y);
            return NULL;
        }
        const float *bias = b ? b->data : NULL;
        for (int n0 = 0; n0 < g.N; n0 += nb) {
            int m = g.N - n0 < nb ? g.N - n0 : nb;
            int cols = (int)((size_t)m * g.HW);
            im2col(&g, x->data, n0, m, col);
            /* A lone sample's product is already in NCHW order: write it in
             * place and add the bias there. */
            float *dst = m == 1 ? y->data + (size_t)n0 * g.K * g.HW : yc;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.K, cols, (int)g.CKK, 1.0f,
                        w->data, (int)g.CKK, col, cols, 0.0f, dst, cols);
            if (m > 1) {
                scatter_out(&g, yc, bias, n0, m, y->data);
            } else if (bias) {
                for (int k = 0; k < g.K; k++)
                    for (size_t j = 0; j < g.HW; j++) dst[(size_t)k * g.HW + j] += bias[k];
            }
        }
        actc_mem_free(col);
        actc_mem_free(yc);
    }

    actc_tensor *in[3] = {x, w, b};
    actc_node *node;
    if (!actc__op_record(ctx, "conv2d", conv2d_backward, y, b ? 3 : 2, in, &node)) return NULL;
    if (node) {
        node->iattr[IA_STRIDE] = stride;
        node->iattr[IA_PAD] = pad;
        node->iattr[IA_XSLOT] = -1;
        node->iattr[IA_WSLOT] = -1;
        int k = 0;
        /* x is needed only for dW; the weight's value only for dx.  A parameter
         * outlives the step and is read in place; any other weight may be
         * freed before backward, so it is kept exactly. */
        if (w->requires_grad) {
            OP_SAVE(ctx, node, x, ACTC_SAVE_ACT, y);
            node->iattr[IA_XSLOT] = k++;
        }
        if (x->requires_grad && !w->is_param) {
            OP_SAVE(ctx, node, w, ACTC_SAVE_EXACT, y);
            node->iattr[IA_WSLOT] = k++;
        }
    }
    return y;
}
