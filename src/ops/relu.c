/* ReLU.  Backward only needs to know where the output was positive, so the
 * output is saved as a 1-bit MASK: the store keeps n/8 bytes instead of 4n,
 * and because it is the output tensor itself (not a derived 0/1 copy), the
 * fp32 reference counts it once even when the next layer saves the same
 * tensor as ACT. */
#include "ops.h"

static actc_status relu_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    if (!x->requires_grad) return ACTC_OK;
    /* dx overwrites dy, whose buffer then becomes x's gradient; the mask is
     * decoded a chunk of samples at a time.  So this step of the backward
     * pass holds one activation-sized gradient, not two plus a decoded mask. */
    const int rows = x->ndim > 0 ? x->shape[0] : 1, chunk = actc__chunk_rows(x);
    const size_t per = x->numel / (size_t)(rows > 0 ? rows : 1);
    float *m = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)chunk * per * sizeof(float));
    if (!m) return actc_last_status();
    float *gy = node->output->grad->data;
    actc_status st = ACTC_OK;
    for (int r0 = 0; r0 < rows && st == ACTC_OK; r0 += chunk) {
        const int nr = rows - r0 < chunk ? rows - r0 : chunk;
        if ((st = actc_load_rows(ctx, node, 0, r0, nr, m)) != ACTC_OK) break;
        float *g = gy + (size_t)r0 * per;
        const size_t n = (size_t)nr * per;
        /* A select, not g*m: an Inf/NaN gradient where the unit was off must
         * not turn into NaN.  Both operands are loaded unconditionally so the
         * compiler turns the select into a vector blend. */
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) {
            const float gi = g[i], keep = m[i];
            g[i] = keep > 0.5f ? gi : 0.0f;
        }
    }
    actc_mem_free(m);
    return st == ACTC_OK ? actc_grad_adopt(ctx, x, actc_grad_take(node)) : st;
}

/* take: the output may reuse x's buffer (see actc_relu_take). */
static actc_tensor *relu_forward(actc_ctx *ctx, actc_tensor *x, int take)
{
    OP_CHECK(ctx, "relu: NULL context");
    OP_CHECK(x && x->data, "relu: input is NULL or its data was already freed");
    const float *xd = x->data;
    actc_tensor *y = actc__tensor_header(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    if (actc__tensor_give_data(y, take ? x : NULL) != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    float *yd = y->data; /* may be xd: element-wise, so in place is fine */
    const size_t n = x->numel;
    /* x < 0 ? 0 : x lets a NaN through (as PyTorch does), so a diverging run
     * is caught by the loss check instead of being silently zeroed. */
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) yd[i] = xd[i] < 0.0f ? 0.0f : xd[i];

    actc_node *node;
    if (!actc__op_record(ctx, "relu", relu_backward, y, 1, &x, &node)) return NULL;
    if (node) OP_SAVE(ctx, node, y, ACTC_SAVE_MASK, actc__role(ACTC_ROLE_MASK, 1), y);
    return y;
}

actc_tensor *actc_relu(actc_ctx *ctx, actc_tensor *x) { return relu_forward(ctx, x, 0); }

actc_tensor *actc_relu_take(actc_ctx *ctx, actc_tensor *x)
{
    actc_tensor *y = relu_forward(ctx, x, 1);
    actc_tensor_release(x);
    return y;
}
