/* Internal helpers shared by the operator implementations. */
#ifndef ACTC_OPS_H
#define ACTC_OPS_H
#include "actc.h"
#include "../core/core.h"

/* Fail an operator: set ACTC_ERR_INVALID with a message and return NULL. */
#define OP_CHECK(cond, ...)                                   \
    do {                                                      \
        if (!(cond)) {                                        \
            actc_set_error(ACTC_ERR_INVALID, __VA_ARGS__);    \
            return NULL;                                      \
        }                                                     \
    } while (0)

/* Record y's node; on failure release y and return NULL with the error set.
 * *node is NULL when nothing needs recording (eval mode / no grad). */
static inline actc_tensor *actc__op_record(actc_ctx *ctx, const char *op, actc_backward_fn bw,
                                           actc_tensor *y, int n, actc_tensor *const *in,
                                           actc_node **node)
{
    if (actc_node_new2(ctx, op, bw, y, n, in, node) != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    return y;
}

/* Save helper for forward code: on failure release y and return NULL. */
#define OP_SAVE(ctx, node, t, kind, y)                                  \
    do {                                                                \
        if (actc_save((ctx), (node), (t), (kind)) != ACTC_OK) {         \
            actc_tensor_release(y);                                     \
            return NULL;                                                \
        }                                                               \
    } while (0)
/* Check two inputs of an element-wise binary op (present, same shape) and
 * allocate its output; NULL with ACTC_ERR_INVALID naming op and shapes. */
static inline actc_tensor *actc__binary_output(const char *op, const char *sym, const actc_tensor *a,
                                               const actc_tensor *b)
{
    if (!a || !a->data || !b || !b->data) {
        actc_set_error(ACTC_ERR_INVALID, "%s: an input is NULL or its data was already freed", op);
        return NULL;
    }
    if (!actc_same_shape(a, b)) {
        char sa[64], sb[64];
        actc_set_error(ACTC_ERR_INVALID, "%s: shapes differ: %s %s %s", op, actc_shape_str(a, sa, sizeof sa), sym,
                       actc_shape_str(b, sb, sizeof sb));
        return NULL;
    }
    return actc_tensor_new(ACTC_MEM_ACT, a->ndim, a->shape);
}

/* What a product y = f(x, w) (linear, conv2d) keeps for backward: x only
 * if w needs a gradient (dW needs x), w's value only if x needs a gradient
 * (dx needs w).  A parameter outlives the step and is read in place; any other
 * weight may be freed before backward, so it is kept exactly.  *xslot and
 * *wslot receive the save indices for actc_load, or -1. */
static inline actc_status actc__save_product_inputs(actc_ctx *ctx, actc_node *node, actc_tensor *x,
                                                    actc_tensor *w, int *xslot, int *wslot)
{
    int k = 0;
    actc_status s = ACTC_OK;
    *xslot = *wslot = -1;
    if (w->requires_grad) {
        if ((s = actc_save(ctx, node, x, ACTC_SAVE_ACT)) != ACTC_OK) return s;
        *xslot = k++;
    }
    if (x->requires_grad && !w->is_param) {
        if ((s = actc_save(ctx, node, w, ACTC_SAVE_EXACT)) != ACTC_OK) return s;
        *wslot = k++;
    }
    return s;
}
#endif
