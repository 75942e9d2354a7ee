/* Smooth element-wise activations of transformer MLPs: GELU (tanh form) and
 * SiLU.  Both save their input x as ACT (the policy may compress it) and
 * recompute everything else in backward, which is cheaper than keeping the
 * output or the derivative: those would be one more full-size tensor each.
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
    float *gx = actc_grad_of(ctx, x);
    if (!gx) return x->requires_grad ? ACTC_ERR_OOM : ACTC_OK; /* message set by actc_grad_of */
    actc_tensor *xs = actc_load(ctx, node, 0);
    if (!xs) return actc_last_status();
    const float *xd = xs->data, *gy = node->output->grad->data;
    const size_t n = xs->numel;
    if (node->iattr[0] == ACT_GELU) {
#pragma omp parallel for simd schedule(static) if (n > ACT_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i], v2 = v * v;
            const float u2 = 2.0f * GELU_C * (v + GELU_K * v2 * v);
            const float s = 1.0f / (1.0f + actc__expf(-u2));
            const float du2 = 2.0f * GELU_C * (1.0f + 3.0f * GELU_K * v2);
            /* (v s)(1 - s): multiplied in this order so s(1-s) ~ 1e-38
             * for very negative v does not meet v^2 in an overflow. */
            gx[i] += gy[i] * (s + (v * s) * (1.0f - s) * du2);
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n > ACT_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i];
            const float s = 1.0f / (1.0f + actc__expf(-v));
            gx[i] += gy[i] * (s * (1.0f + v * (1.0f - s)));
        }
    }
    actc_tensor_release(xs);
    return ACTC_OK;
}

static actc_tensor *act_forward(actc_ctx *ctx, actc_tensor *x, int kind, const char *name)
{
    OP_CHECK(ctx, "%s: NULL context", name);
    OP_CHECK(x && x->data, "%s: input is NULL or its data was already freed", name);
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    const float *xd = x->data;
    float *yd = y->data;
    const size_t n = x->numel;
    if (kind == ACT_GELU) {
#pragma omp parallel for simd schedule(static) if (n > ACT_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i];
            const float u2 = 2.0f * GELU_C * (v + GELU_K * v * v * v);
            yd[i] = v / (1.0f + actc__expf(-u2));
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n > ACT_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i];
            yd[i] = v / (1.0f + actc__expf(-v));
        }
    }
    actc_node *node;
    if (!actc__op_record(ctx, name, act_backward, y, 1, &x, &node)) return NULL;
    if (node) {
        node->iattr[0] = kind;
        OP_SAVE(ctx, node, x, ACTC_SAVE_ACT, y);
    }
    return y;
}

actc_tensor *actc_gelu(actc_ctx *ctx, actc_tensor *x) { return act_forward(ctx, x, ACT_GELU, "gelu"); }

actc_tensor *actc_silu(actc_ctx *ctx, actc_tensor *x) { return act_forward(ctx, x, ACT_SILU, "silu"); }
