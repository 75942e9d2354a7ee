/* Inverted dropout: kept elements are scaled by 1/(1-p) in training so the
 * layer is the identity in eval mode.
 *
 * The keep decisions come from the counter-based generator with a key from
 * actc_ctx_next_key: element i is kept iff actc_rand_uniform(key, i) >= p, a
 * pure function of (seed, step, call order, i), so re-running a step
 * reproduces it and the result does not depend on the thread count.  The
 * keep mask is saved as a 1-bit MASK (bit = kept). */
#include "ops.h"
#include <math.h>
#include <string.h>

static actc_status dropout_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    actc_tensor *mask = NULL;
    if (node->iattr[0]) {
        mask = actc_load(ctx, node, 0);
        if (!mask) return actc_last_status();
    }
    float *gx;
    actc_status st = actc_grad_buffer(ctx, x, &gx);
    if (st != ACTC_OK || !gx) {
        actc_tensor_release(mask);
        return st;
    }
    const float *gy = node->output->grad->data;
    const size_t n = x->numel;
    if (mask) {
        const float scale = node->fattr[0], *m = mask->data;
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) gx[i] += m[i] != 0.0f ? gy[i] * scale : 0.0f;
    } else {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) gx[i] += gy[i];
    }
    actc_tensor_release(mask);
    return ACTC_OK;
}

actc_tensor *actc_dropout(actc_ctx *ctx, actc_tensor *x, float p)
{
    OP_CHECK(ctx, "dropout: NULL context");
    OP_CHECK(x && x->data, "dropout: input is NULL or its data was already freed");
    OP_CHECK(p >= 0.0f && p < 1.0f, "dropout: drop probability %g outside [0, 1)", (double)p);
    actc_node *node;

    if (!actc_ctx_training(ctx) || p == 0.0f) {
        /* Identity.  With p == 0 in training the copy is still recorded (as a
         * pass-through node) so gradients reach x. */
        actc_tensor *y = actc_tensor_copy(ACTC_MEM_ACT, x);
        if (!y) return NULL;
        if (!actc__op_record(ctx, "dropout", dropout_backward, y, 1, &x, &node)) return NULL;
        if (node) node->iattr[0] = 0;
        return y;
    }

    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    const uint64_t key = actc_ctx_next_key(ctx);
    const float scale = 1.0f / (1.0f - p);
    if (!actc__op_record(ctx, "dropout", dropout_backward, y, 1, &x, &node)) return NULL;
    actc_tensor *mask = NULL;
    if (node) {
        mask = actc_tensor_new(ACTC_MEM_SCRATCH, x->ndim, x->shape);
        if (!mask) {
            actc_tensor_release(y);
            return NULL;
        }
        node->iattr[0] = 1;
        node->fattr[0] = scale;
    }
    const float *xd = x->data;
    float *yd = y->data, *md = mask ? mask->data : NULL;
    const size_t n = x->numel;
    /* actc_rand_uniform(key, i) is word i % 4 of Philox block i / 4: one
     * block serves four elements (the same bits, a quarter of the work). */
    const size_t blocks = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (n > 16384)
    for (size_t b = 0; b < blocks; b++) {
        uint32_t r[4];
        actc_philox(key, b, r);
        const size_t i0 = 4 * b, i1 = i0 + 4 < n ? i0 + 4 : n;
        for (size_t i = i0; i < i1; i++) {
            const int keep = actc__word_uniform(r[i & 3]) >= p;
            yd[i] = keep ? xd[i] * scale : 0.0f;
            if (md) md[i] = (float)keep;
        }
    }
    if (mask) {
        const actc_save_role r = actc__role(ACTC_ROLE_MASK, 1);
        actc_status st = actc_save_as(ctx, node, mask, ACTC_SAVE_MASK, &r);
        actc_tensor_release(mask);
        if (st != ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
    }
    return y;
}
