/* ReLU.  Backward only needs to know where the output was positive, so the
 * output is saved as a 1-bit MASK: the store keeps n/8 bytes instead of 4n,
 * and because it is the output tensor itself (not a derived 0/1 copy), the
 * fp32 reference counts it once even when the next layer saves the same
 * tensor as ACT. */
#include "ops.h"

static actc_status relu_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    actc_tensor *mask = actc_load(ctx, node, 0);
    if (!mask) return actc_last_status();
    float *gx = actc_grad_of(ctx, x);
    if (!gx && x->requires_grad) {
        actc_tensor_release(mask);
        return ACTC_ERR_OOM; /* actc_grad_of set the message */
    }
    if (gx) {
        const float *gy = node->output->grad->data, *m = mask->data;
        const size_t n = mask->numel;
        /* A select, not gy*m: an Inf/NaN gradient where the unit was off
         * must not turn into NaN.  Both operands are loaded unconditionally
         * so the compiler turns the select into a vector blend. */
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) {
            const float g = gy[i], keep = m[i];
            gx[i] += keep > 0.5f ? g : 0.0f;
        }
    }
    actc_tensor_release(mask);
    return ACTC_OK;
}

actc_tensor *actc_relu(actc_ctx *ctx, actc_tensor *x)
{
    OP_CHECK(ctx, "relu: NULL context");
    OP_CHECK(x && x->data, "relu: input is NULL or its data was already freed");
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    const float *xd = x->data;
    float *yd = y->data;
    const size_t n = x->numel;
    /* x < 0 ? 0 : x lets a NaN through (as PyTorch does), so a diverging run
     * is caught by the loss check instead of being silently zeroed. */
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) yd[i] = xd[i] < 0.0f ? 0.0f : xd[i];

    actc_node *node;
    if (!actc__op_record(ctx, "relu", relu_backward, y, 1, &x, &node)) return NULL;
    if (node) OP_SAVE(ctx, node, y, ACTC_SAVE_MASK, y);
    return y;
}
