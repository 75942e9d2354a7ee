/* Rotary position embedding (RoFormer, as in LLaMA) on x [B, T, H, Dh] (or
 * [B, T, Dh], one head): the layout of the attention operators' q and k
 * ([B, T, H*Dh] with heads as blocks of Dh), so no transpose is needed.  At
 * position t (0-based, dim 1) every head rotates its pairs (x[2i], x[2i+1])
 * by the angle t * base^(-2i/Dh):
 *     y[2i]   = x[2i] cos - x[2i+1] sin
 *     y[2i+1] = x[2i] sin + x[2i+1] cos
 * The rotation is orthogonal, so backward is the inverse rotation of the
 * gradient (angle negated).  Nothing is saved: the angles follow from the
 * input's shape and the base (node fattr[0]). */
#include "attn_internal.h"
#include <math.h>

#define ROPE_PAR_MIN ((size_t)1 << 15)
#define ROPE_DEFAULT_BASE 10000.0f

/* (cos, sin) of t * base^(-2i/Dh) at [t][i][0..1] for t < T, i < Dh/2, a
 * SCRATCH [T, Dh] table.  Computed in double: angles reach T radians, and
 * float argument reduction would lose digits at large t. */
static actc_tensor *rope_table(int T, int Dh, float base)
{
    int shape[2] = {T, Dh};
    actc_tensor *tab = actc_tensor_new(ACTC_MEM_SCRATCH, 2, shape);
    if (!tab) return NULL;
    for (int i = 0; i < Dh / 2; i++) {
        const double freq = pow((double)base, -2.0 * i / Dh);
        for (int t = 0; t < T; t++) {
            tab->data[(size_t)t * Dh + 2 * i] = (float)cos(t * freq);
            tab->data[(size_t)t * Dh + 2 * i + 1] = (float)sin(t * freq);
        }
    }
    return tab;
}

/* dst = R(dir * angle) src (or dst += when accumulate) for every row of x:
 * dir = 1 is the forward rotation, dir = -1 its inverse. */
static void rope_apply(const actc_tensor *x, const float *src, float *dst, const float *tab, float dir,
                       int accumulate)
{
    const int T = x->shape[1], Dh = x->shape[x->ndim - 1];
    const size_t W = x->numel / ((size_t)x->shape[0] * T); /* H * Dh floats per (b, t) */
    const size_t rows = (size_t)x->shape[0] * T;
#pragma omp parallel for schedule(static) if (x->numel >= ROPE_PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        const float *cs = tab + (r % (size_t)T) * Dh;
        for (size_t h0 = 0; h0 < W; h0 += (size_t)Dh) {
            const float *xs = src + r * W + h0;
            float *yd = dst + r * W + h0;
            for (int i = 0; i < Dh; i += 2) {
                const float c = cs[i], s = dir * cs[i + 1], x0 = xs[i], x1 = xs[i + 1];
                const float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
                if (accumulate) {
                    yd[i] += y0;
                    yd[i + 1] += y1;
                } else {
                    yd[i] = y0;
                    yd[i + 1] = y1;
                }
            }
        }
    }
}

static actc_status rope_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    float *gx;
    actc_status st = actc_grad_buffer(ctx, x, &gx);
    if (st != ACTC_OK || !gx) return st;
    actc_tensor *tab = rope_table(x->shape[1], x->shape[x->ndim - 1], node->fattr[0]);
    if (!tab) return actc_last_status();
    rope_apply(x, node->output->grad->data, gx, tab->data, -1.0f, 1);
    actc_tensor_release(tab);
    return ACTC_OK;
}

actc_tensor *actc_rope(actc_ctx *ctx, actc_tensor *x, float base)
{
    char sx[64];
    OP_CHECK(ctx, "rope: NULL context");
    OP_CHECK(x && x->data, "rope: input is NULL or its data was already freed");
    actc_shape_str(x, sx, sizeof sx);
    OP_CHECK((x->ndim == 3 || x->ndim == 4) && x->numel > 0,
             "rope: input must be [B, T, H, Dh] or [B, T, Dh], got %s", sx);
    OP_CHECK(x->shape[x->ndim - 1] % 2 == 0, "rope: head dim Dh must be even (pairs rotate), got %s", sx);
    OP_CHECK(isfinite(base) && base >= 0.0f, "rope: base must be positive (0 for %g), got %g",
             (double)ROPE_DEFAULT_BASE, (double)base);
    if (base == 0.0f) base = ROPE_DEFAULT_BASE;

    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    actc_tensor *tab = y ? rope_table(x->shape[1], x->shape[x->ndim - 1], base) : NULL;
    if (!tab) {
        actc_tensor_release(y);
        return NULL;
    }
    rope_apply(x, x->data, y->data, tab->data, 1.0f, 0);
    actc_tensor_release(tab);

    actc_node *node;
    if (!actc__op_record(ctx, "rope", rope_backward, y, 1, &x, &node)) return NULL;
    if (node) node->fattr[0] = base;
    return y;
}
