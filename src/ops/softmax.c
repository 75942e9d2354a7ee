/* Causal softmax over the last dim of x [..., T, T]:
 *   p[i, j] = exp(scale x[i, j] - m_i) / sum_{j' <= i} exp(scale x[i, j'] - m_i)  for j <= i,
 *   p[i, j] = 0 (exactly)                                                           for j > i,
 * with m_i the row's visible maximum (so exp never overflows).
 *
 * Saves the output p as ACT: backward needs only p,
 *   dx[i, j] = scale p[i, j] (g[i, j] - sum_j' g[i, j'] p[i, j']),
 * and p is what PyTorch keeps too.  Masked entries have p = 0, hence dx = 0.
 * The row kernels are shared with the naive attention operator. */
#include "attn_internal.h"
#include <float.h>
#include <math.h>
#include <string.h>

#define SOFTMAX_PAR_MIN ((size_t)1 << 14)

ACTC_ATTN_CLONES void actc__softmax_row(const float *x, float *p, int nv, int n, float scale)
{
    float m = -FLT_MAX;
#pragma omp simd reduction(max : m)
    for (int j = 0; j < nv; j++) {
        const float s = scale * x[j];
        m = s > m ? s : m;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < nv; j++) {
        const float e = actc__expf(scale * x[j] - m);
        p[j] = e;
        sum += e;
    }
    const float inv = 1.0f / sum; /* sum >= 1: the maximum contributes exp(0) */
#pragma omp simd
    for (int j = 0; j < nv; j++) p[j] *= inv;
    if (n > nv) memset(p + nv, 0, (size_t)(n - nv) * sizeof(float));
}

ACTC_ATTN_CLONES void actc__softmax_row_backward(const float *p, const float *g, float *dx, int nv, int n,
                                                 float scale, int accumulate)
{
    float c = 0.0f;
#pragma omp simd reduction(+ : c)
    for (int j = 0; j < nv; j++) c += g[j] * p[j];
    if (accumulate) {
#pragma omp simd
        for (int j = 0; j < nv; j++) dx[j] += scale * p[j] * (g[j] - c);
        return;
    }
#pragma omp simd
    for (int j = 0; j < nv; j++) dx[j] = scale * p[j] * (g[j] - c);
    if (n > nv) memset(dx + nv, 0, (size_t)(n - nv) * sizeof(float));
}

static actc_status softmax_backward(actc_ctx *ctx, actc_node *node)
{
    float *gx;
    actc_status st = actc_grad_buffer(ctx, node->inputs[0], &gx);
    if (st != ACTC_OK || !gx) return st;
    actc_tensor *p = actc_load(ctx, node, 0);
    if (!p) return actc_last_status();
    const int T = p->shape[p->ndim - 1];
    const size_t rows = p->numel / (size_t)T;
    const float *pd = p->data, *gy = node->output->grad->data;
    const float scale = node->fattr[0];
#pragma omp parallel for schedule(static) if (p->numel >= SOFTMAX_PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        const size_t o = r * (size_t)T;
        actc__softmax_row_backward(pd + o, gy + o, gx + o, (int)(r % (size_t)T) + 1, T, scale, 1);
    }
    actc_tensor_release(p);
    return ACTC_OK;
}

actc_tensor *actc_softmax_causal(actc_ctx *ctx, actc_tensor *x, float scale)
{
    char sx[64];
    OP_CHECK(ctx, "softmax_causal: NULL context");
    OP_CHECK(x && x->data, "softmax_causal: input is NULL or its data was already freed");
    actc_shape_str(x, sx, sizeof sx);
    OP_CHECK(x->ndim >= 2 && x->shape[x->ndim - 1] == x->shape[x->ndim - 2] && x->numel > 0,
             "softmax_causal: input must be [..., T, T] with T >= 1, got %s", sx);
    OP_CHECK(isfinite(scale), "softmax_causal: scale must be finite, got %g", (double)scale);
    const int T = x->shape[x->ndim - 1];
    const size_t rows = x->numel / (size_t)T;

    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    const float *xd = x->data;
    float *yd = y->data;
    /* Row r is row i = r mod T of its T x T matrix: i + 1 visible columns. */
#pragma omp parallel for schedule(static) if (x->numel >= SOFTMAX_PAR_MIN)
    for (size_t r = 0; r < rows; r++)
        actc__softmax_row(xd + r * (size_t)T, yd + r * (size_t)T, (int)(r % (size_t)T) + 1, T, scale);

    actc_node *node;
    if (!actc__op_record(ctx, "softmax_causal", softmax_backward, y, 1, &x, &node)) return NULL;
    if (node) {
        node->fattr[0] = scale;
        /* dx = y * (dy - sum(dy y)): quadratic in the saved output. */
        OP_SAVE(ctx, node, y, ACTC_SAVE_ACT, actc__role(ACTC_ROLE_SOFTMAX_OUT, 0), y);
    }
    return y;
}
