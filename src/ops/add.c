/* Element-wise sum of two same-shaped tensors (residual connections).  The
 * gradient is the output gradient for both inputs, so nothing is saved. */
#include "ops.h"

static actc_status add_backward(actc_ctx *ctx, actc_node *node)
{
    /* The second input accumulates the output gradient; then that buffer
     * itself is handed to the first input (a + a: adopt adds it to the
     * gradient the first pass made, giving the correct 2*gy). */
    actc_tensor *b = node->inputs[1];
    const float *gy = node->output->grad->data;
    const size_t n = node->output->numel;
    float *g;
    actc_status st = actc_grad_buffer(ctx, b, &g);
    if (st != ACTC_OK) return st;
    if (g) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) g[i] += gy[i];
    }
    return actc_grad_adopt(ctx, node->inputs[0], actc_grad_take(node));
}

static actc_tensor *add_forward(actc_ctx *ctx, actc_tensor *a, actc_tensor *b, int take)
{
    OP_CHECK(ctx, "add: NULL context");
    const float *ad = a ? a->data : NULL, *bd = b ? b->data : NULL; /* before y may take a's buffer */
    actc_tensor *y = actc__binary_output_take("add", "+", a, b, take);
    if (!y) return NULL;
    float *yd = y->data;
    const size_t n = a->numel;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) yd[i] = ad[i] + bd[i];
    actc_tensor *in[2] = {a, b};
    actc_node *node;
    return actc__op_record(ctx, "add", add_backward, y, 2, in, &node);
}

actc_tensor *actc_add(actc_ctx *ctx, actc_tensor *a, actc_tensor *b) { return add_forward(ctx, a, b, 0); }

actc_tensor *actc_add_take(actc_ctx *ctx, actc_tensor *a, actc_tensor *b)
{
    actc_tensor *y = add_forward(ctx, a, b, 1);
    actc_tensor_release(a);
    return y;
}
