/* Smooth element-wise activations of transformer MLPs: GELU (tanh form) and
 * SiLU.  Both save their derivative f'(x) as ACT (the policy may compress
 * it), not their input x: the same bytes, but backward is then linear in the
 * saved tensor (gx = gy * f'), so an unbiased rounding of it gives an
 * unbiased gradient.  Saving x and evaluating f' at a rounded x is biased
 * (f' is not linear), and at 2-4 bits that bias, not the variance the
 * policies budget for, is what a language model's loss feels.  The price is
 * one transient full-size tensor in forward, freed once the store has
 * encoded it; the _take forms write f' over the input's buffer instead (the
 * models' MLPs use them: a checkpointed gpt-mini's recompute at batch 240
 * did not fit 1 GiB with the transient).
 *
 * Both are written as x * sigmoid(z):
 *     SiLU:  z = x
 *     GELU:  0.5 x (1 + tanh(u)) = x * sigmoid(2u),  u = sqrt(2/pi)(x + 0.044715 x^3)
 * (1 + tanh(u) = 2 sigmoid(2u)).  The sigmoid form has no cancellation in
 * 1 + tanh(u) for negative x, and needs one exp and one division.
 * Derivatives:  d/dx [x s(z)] = s + x s (1 - s) dz/dx.
 *
 * libm's expf/tanhf are scalar calls without -ffast-math, which would keep
 * the loops from vectorising (the library is built without -march and
 * without fast-math), so they use actc__expf (ops.h), a branch-free
 * Cephes-style exponential (relative error ~2 ulp) that GCC vectorises. */
#include "ops.h"

#define ACT_PAR_MIN ((size_t)1 << 16)

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K 0.044715f

enum { ACT_GELU = 0, ACT_SILU = 1 };

static actc_status act_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    float *gx;
    actc_status st = actc_grad_buffer(ctx, x, &gx);
    if (st != ACTC_OK || !gx) return st;
    actc_tensor *ds = actc_load(ctx, node, 0);
    if (!ds) return actc_last_status();
    const float *d = ds->data, *gy = node->output->grad->data;
    const size_t n = ds->numel;
#pragma omp parallel for simd schedule(static) if (n > ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) gx[i] += gy[i] * d[i];
    actc_tensor_release(ds);
    return ACTC_OK;
}

/* y = f(x) over [0, n) and, when dd is not NULL, dd = f'(x); one loop per
 * case, so each vectorises (a test of dd inside the loop kept GCC from it),
 * compiled per ISA level.  x and dd may be the same buffer (take): each
 * element is read before it is written. */
ACTC_ISA_CLONES static void act_range(int kind, const float *xd, float *yd, float *dd, size_t n)
{
    /* y is the same expression with and without dd: a recompute without a
     * tape (actc_region_n) must give the taped forward's y to the bit. */
    if (kind == ACT_GELU && dd) {
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i], v2 = v * v;
            const float e = actc__expf(-(2.0f * GELU_C * (v + GELU_K * v2 * v)));
            const float s = 1.0f / (1.0f + e);
            const float du2 = 2.0f * GELU_C * (1.0f + 3.0f * GELU_K * v2);
            yd[i] = v / (1.0f + e);
            /* (v s)(1 - s): multiplied in this order so s(1-s) ~ 1e-38 for
             * very negative v does not meet v^2 in an overflow. */
            dd[i] = s + (v * s) * (1.0f - s) * du2;
        }
    } else if (kind == ACT_GELU) {
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i], v2 = v * v;
            yd[i] = v / (1.0f + actc__expf(-(2.0f * GELU_C * (v + GELU_K * v2 * v))));
        }
    } else if (dd) {
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i];
            const float e = actc__expf(-v);
            const float s = 1.0f / (1.0f + e);
            yd[i] = v / (1.0f + e);
            dd[i] = s * (1.0f + v * (1.0f - s));
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i];
            yd[i] = v / (1.0f + actc__expf(-v));
        }
    }
}

static void act_eval(int kind, const float *xd, float *yd, float *dd, size_t n)
{
#pragma omp parallel if (n > ACT_PAR_MIN)
    {
        size_t lo, hi;
        actc__thread_share(n, &lo, &hi);
        if (lo < hi) act_range(kind, xd + lo, yd + lo, dd ? dd + lo : NULL, hi - lo);
    }
}

/* take: f' may overwrite x's buffer (x's only reference is the caller's,
 * which the _take forms then drop): act_eval reads each element before it
 * writes the same element. */
static actc_tensor *act_forward(actc_ctx *ctx, actc_tensor *x, int kind, const char *name, int take)
{
    OP_CHECK(ctx, "%s: NULL context", name);
    OP_CHECK(x && x->data, "%s: input is NULL or its data was already freed", name);
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    actc_tensor *d = NULL;
    if (actc_ctx_recording(ctx) && x->requires_grad) {
        d = actc__tensor_header(take ? x->cat : ACTC_MEM_SCRATCH, x->ndim, x->shape);
        if (!d || actc__tensor_give_data(d, take ? x : NULL) != ACTC_OK) {
            actc_tensor_release(d);
            actc_tensor_release(y);
            return NULL;
        }
    }
    const float *xd = d && !x->data ? d->data : x->data;
    act_eval(kind, xd, y->data, d ? d->data : NULL, y->numel);
    actc_node *node;
    if (!actc__op_record(ctx, name, act_backward, y, 1, &x, &node)) {
        actc_tensor_release(d);
        return NULL;
    }
    actc_status s = ACTC_OK;
    if (node) {
        node->iattr[0] = kind;
        /* dx = dy * f'(x): linear in the saved derivative. */
        const actc_save_role r = actc__role(ACTC_ROLE_ACT_DERIV, 1);
        s = actc_save_as(ctx, node, d, ACTC_SAVE_ACT, &r);
    }
    actc_tensor_release(d);
    if (s != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    return y;
}

actc_tensor *actc_gelu(actc_ctx *ctx, actc_tensor *x) { return act_forward(ctx, x, ACT_GELU, "gelu", 0); }

actc_tensor *actc_silu(actc_ctx *ctx, actc_tensor *x) { return act_forward(ctx, x, ACT_SILU, "silu", 0); }

actc_tensor *actc_gelu_take(actc_ctx *ctx, actc_tensor *x)
{
    actc_tensor *y = act_forward(ctx, x, ACT_GELU, "gelu", 1);
    actc_tensor_release(x);
    return y;
}

actc_tensor *actc_silu_take(actc_ctx *ctx, actc_tensor *x)
{
    actc_tensor *y = act_forward(ctx, x, ACT_SILU, "silu", 1);
    actc_tensor_release(x);
    return y;
}
