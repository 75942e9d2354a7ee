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
#endif
