/* ELU: y = x for x > 0, alpha (exp(x) - 1) otherwise (GAT's activation).
 *
 * Saves the output y (ACT): the derivative is 1 where y > 0 and y + alpha
 * (= alpha exp(x)) elsewhere, so backward needs nothing else, and the next
 * layer's save of the same tensor is stored once.  Declared ACT_DERIV,
 * linear: the derivative is an affine function of the saved value on each
 * side of 0 (with alpha = 1 it is continuous there too), so an unbiased
 * rounding of y gives an unbiased gradient away from the sign change. */
#include "ops.h"
#include <math.h>

#define ELU_PAR_MIN ((size_t)1 << 16)

static actc_status elu_backward(actc_ctx *ctx, actc_node *node)
{
    float *gx;
    actc_status st = actc_grad_buffer(ctx, node->inputs[0], &gx);
    if (st != ACTC_OK || !gx) return st;
    actc_tensor *ys = actc_load(ctx, node, 0);
    if (!ys) return actc_last_status();
    const float alpha = node->fattr[0];
    const float *y = ys->data, *gy = node->output->grad->data;
    const size_t n = ys->numel;
#pragma omp parallel for simd schedule(static) if (n > ELU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float v = y[i];
        gx[i] += gy[i] * (v > 0.0f ? 1.0f : v + alpha);
    }
    actc_tensor_release(ys);
    return ACTC_OK;
}

actc_tensor *actc_elu(actc_ctx *ctx, actc_tensor *x, float alpha)
{
    OP_CHECK(ctx, "elu: NULL context");
    OP_CHECK(x && x->data, "elu: input is NULL or its data was already freed");
    OP_CHECK(isfinite(alpha) && alpha >= 0.0f, "elu: alpha must be finite and >= 0, got %g", (double)alpha);
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    const float *xd = x->data;
    float *yd = y->data;
    const size_t n = x->numel;
#pragma omp parallel for simd schedule(static) if (n > ELU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float v = xd[i];
        const float neg = alpha * (actc__expf(v) - 1.0f);
        yd[i] = v > 0.0f ? v : neg;
    }

    actc_node *node;
    if (!actc__op_record(ctx, "elu", elu_backward, y, 1, &x, &node)) return NULL;
    if (node) {
        node->fattr[0] = alpha;
        OP_SAVE(ctx, node, y, ACTC_SAVE_ACT, actc__role(ACTC_ROLE_ACT_DERIV, 1), y);
    }
    return y;
}
