/* Element-wise product y = a * b of equal shapes (gating: SwiGLU is
 * mul(silu(a), b)).
 *
 * da = dy * b and db = dy * a, so each input's value is needed only for the
 * other's gradient: a is kept only if b needs a gradient and vice versa.
 * What is kept is saved as ACT (both are activations; the policy decides).
 * A parameter outlives the step and is read in place instead of saved.
 * mul(x, x) saves x once (the store de-duplicates), and both gradient passes
 * land in the same buffer, giving 2 x dy. */
#include "ops.h"

#define MUL_PAR_MIN ((size_t)1 << 16)

/* iattr: save index of a's value and of b's value (-1: not saved). */
enum { IA_ASLOT = 0, IA_BSLOT };

/* The value of input k for backward: its saved copy, or the parameter itself
 * (then *owned stays NULL).  NULL with the error set on failure. */
static const float *input_value(actc_ctx *ctx, actc_node *node, int k, actc_tensor **owned)
{
    *owned = NULL;
    const int slot = node->iattr[k == 0 ? IA_ASLOT : IA_BSLOT];
    if (slot < 0) {
        if (node->inputs[k]->is_param && node->inputs[k]->data) return node->inputs[k]->data;
        actc_set_error(ACTC_ERR_STATE, "mul backward: input %d was not saved", k);
        return NULL;
    }
    *owned = actc_load(ctx, node, slot);
    return *owned ? (*owned)->data : NULL;
}

static actc_status mul_backward(actc_ctx *ctx, actc_node *node)
{
    const float *gy = node->output->grad->data;
    const size_t n = node->output->numel;
    for (int k = 0; k < 2; k++) {
        actc_tensor *t = node->inputs[k];
        float *g = actc_grad_of(ctx, t);
        if (!g && t->requires_grad) return ACTC_ERR_OOM; /* message set by actc_grad_of */
        if (!g) continue;
        actc_tensor *owned;
        const float *other = input_value(ctx, node, 1 - k, &owned);
        if (!other) return actc_last_status();
#pragma omp parallel for simd schedule(static) if (n > MUL_PAR_MIN)
        for (size_t i = 0; i < n; i++) g[i] += gy[i] * other[i];
        actc_tensor_release(owned);
    }
    return ACTC_OK;
}

actc_tensor *actc_mul(actc_ctx *ctx, actc_tensor *a, actc_tensor *b)
{
    OP_CHECK(ctx, "mul: NULL context");
    actc_tensor *y = actc__binary_output("mul", "*", a, b);
    if (!y) return NULL;
    const float *ad = a->data, *bd = b->data;
    float *yd = y->data;
    const size_t n = a->numel;
#pragma omp parallel for simd schedule(static) if (n > MUL_PAR_MIN)
    for (size_t i = 0; i < n; i++) yd[i] = ad[i] * bd[i];

    actc_tensor *in[2] = {a, b};
    actc_node *node;
    if (!actc__op_record(ctx, "mul", mul_backward, y, 2, in, &node)) return NULL;
    if (node) {
        int k = 0;
        node->iattr[IA_ASLOT] = node->iattr[IA_BSLOT] = -1;
        if (b->requires_grad && !a->is_param) {
            OP_SAVE(ctx, node, a, ACTC_SAVE_ACT, y);
            node->iattr[IA_ASLOT] = k++;
        }
        if (a->requires_grad && !b->is_param) {
            OP_SAVE(ctx, node, b, ACTC_SAVE_ACT, y);
            node->iattr[IA_BSLOT] = k++;
        }
    }
    return y;
}
