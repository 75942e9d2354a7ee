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

/* ---- scale_add: a x + b y ------------------------------------------------
 * Linear, so nothing is saved: dx = a dy, dy_in = b dy (y NULL: a x). */

static actc_status scale_add_backward(actc_ctx *ctx, actc_node *node)
{
    const float *gy = node->output->grad->data;
    const size_t n = node->output->numel;
    for (int k = 0; k < node->n_inputs; k++) {
        float *g;
        actc_status st = actc_grad_buffer(ctx, node->inputs[k], &g);
        if (st != ACTC_OK) return st;
        if (!g) continue;
        const float c = node->fattr[k];
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) g[i] += c * gy[i];
    }
    return ACTC_OK;
}

actc_tensor *actc_scale_add(actc_ctx *ctx, actc_tensor *x, float a, actc_tensor *y, float b)
{
    OP_CHECK(ctx, "scale_add: NULL context");
    OP_CHECK(x && x->data, "scale_add: x is NULL or its data was already freed");
    actc_tensor *out = y ? actc__binary_output("scale_add", "+", x, y)
                         : actc__binary_output("scale_add", "+", x, x);
    if (!out) return NULL;
    const float *xd = x->data, *yd = y ? y->data : NULL;
    float *od = out->data;
    const size_t n = x->numel;
    if (yd) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) od[i] = a * xd[i] + b * yd[i];
    } else {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) od[i] = a * xd[i];
    }
    actc_tensor *in[2] = {x, y};
    actc_node *node;
    if (!actc__op_record(ctx, "scale_add", scale_add_backward, out, y ? 2 : 1, in, &node)) return NULL;
    if (node) {
        node->fattr[0] = a;
        node->fattr[1] = b;
    }
    return out;
}
