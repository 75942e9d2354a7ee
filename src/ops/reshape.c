/* reshape and flatten.  The output is a copy with the new shape (tensors own
 * their data, so a view would tie the input's lifetime to the output's),
 * unless the take form got x's only reference: then the output keeps x's
 * buffer.  The gradient is the output gradient read in the same flat order
 * (handed over as it is when nothing else owns it).  No saves. */
#include "ops.h"
#include <stdio.h>
#include <string.h>

static actc_status reshape_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    if (!x->requires_grad) return ACTC_OK;
    /* The same floats in the same order: the output's gradient becomes the
     * input's under the input's shape (adopt adds it if x has one already),
     * instead of a zeroed buffer and a pass over both. */
    actc_tensor *g = node->output->grad;
    if (g && actc__tensor_sole_owner(g) && g->numel == x->numel) {
        g->ndim = x->ndim;
        memcpy(g->shape, x->shape, sizeof g->shape);
        return actc_grad_adopt(ctx, x, actc_grad_take(node));
    }
    float *gx;
    actc_status st = actc_grad_buffer(ctx, x, &gx);
    if (st != ACTC_OK || !gx) return st;
    const float *gy = node->output->grad->data;
    const size_t n = x->numel;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) gx[i] += gy[i];
    return ACTC_OK;
}

static void dims_str(int ndim, const int *shape, char *buf, size_t cap)
{
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? ", %d" : "%d", shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static actc_tensor *reshape_impl(actc_ctx *ctx, actc_tensor *x, int ndim, const int *shape,
                                 const char *op, int take)
{
    OP_CHECK(ctx, "%s: NULL context", op);
    OP_CHECK(x && x->data, "%s: input is NULL or its data was already freed", op);
    OP_CHECK(shape && ndim >= 1 && ndim <= ACTC_MAX_DIMS, "%s: target needs 1 to %d dims, got %d", op,
             ACTC_MAX_DIMS, ndim);
    char sx[64], st[64];
    actc_shape_str(x, sx, sizeof sx);
    dims_str(ndim, shape, st, sizeof st);
    int out[ACTC_MAX_DIMS], infer = -1;
    size_t known = 1;
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1) {
            OP_CHECK(infer < 0, "%s: more than one -1 in target shape %s", op, st);
            infer = i;
        } else {
            OP_CHECK(shape[i] >= 0, "%s: negative dimension in target shape %s", op, st);
            known *= (size_t)shape[i];
        }
    }
    if (infer >= 0) {
        /* A zero-sized known part leaves -1 undetermined. */
        OP_CHECK(known > 0 && x->numel % known == 0 && x->numel / known <= (size_t)0x7fffffff,
                 "%s: cannot reshape %s (%zu elements) into %s", op, sx, x->numel, st);
        out[infer] = (int)(x->numel / known);
        known *= (size_t)out[infer];
    }
    OP_CHECK(known == x->numel, "%s: cannot reshape %s (%zu elements) into %s (%zu elements)", op, sx,
             x->numel, st, known);

    actc_tensor *y = actc__tensor_header(ACTC_MEM_ACT, ndim, out);
    if (!y) return NULL;
    const float *xd = x->data;
    if (actc__tensor_give_data(y, take ? x : NULL) != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    if (y->data != xd) actc__copy_floats(y->data, xd, y->numel);
    actc_node *node;
    return actc__op_record(ctx, op, reshape_backward, y, 1, &x, &node);
}

actc_tensor *actc_reshape(actc_ctx *ctx, actc_tensor *x, int ndim, const int *shape)
{
    return reshape_impl(ctx, x, ndim, shape, "reshape", 0);
}

actc_tensor *actc_reshape_take(actc_ctx *ctx, actc_tensor *x, int ndim, const int *shape)
{
    actc_tensor *y = reshape_impl(ctx, x, ndim, shape, "reshape", 1);
    actc_tensor_release(x);
    return y;
}

actc_tensor *actc_flatten(actc_ctx *ctx, actc_tensor *x)
{
    OP_CHECK(x && x->data, "flatten: input is NULL or its data was already freed");
    OP_CHECK(x->ndim >= 1, "flatten: input needs at least 1 dim (a batch dim), got a scalar");
    /* rest = product of the non-batch dims (1 for a 1-D input); computed
     * from numel so an empty batch still gives the right width. */
    size_t rest = actc__numel(x->ndim - 1, x->shape + 1);
    OP_CHECK(rest <= (size_t)0x7fffffff, "flatten: %zu features per sample do not fit an int", rest);
    int shape[2] = {x->shape[0], (int)rest};
    return reshape_impl(ctx, x, 2, shape, "flatten", 0);
}
