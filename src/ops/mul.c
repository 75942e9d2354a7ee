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

static actc_status mul_backward(actc_ctx *ctx, actc_node *node)
{
    const float *gy = node->output->grad->data;
    const size_t n = node->output->numel;
    for (int k = 0; k < 2; k++) {
        actc_tensor *t = node->inputs[k];
        float *g;
        actc_status st = actc_grad_buffer(ctx, t, &g);
        if (st != ACTC_OK) return st;
        if (!g) continue;
        actc_tensor *owned;
        const int o = 1 - k; /* the other input */
        const float *other =
            actc__input_value(ctx, node, o, node->iattr[o == 0 ? IA_ASLOT : IA_BSLOT], "mul", &owned);
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
        /* da = dy * b, db = dy * a: each linear in the other operand. */
        const actc_save_role r = actc__role(ACTC_ROLE_MUL_IN, 1);
        if (actc__save_operands(ctx, node, a, b, &r, &r, &node->iattr[IA_ASLOT], &node->iattr[IA_BSLOT]) != ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
    }
    return y;
}
