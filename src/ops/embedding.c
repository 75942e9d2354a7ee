/* Token embedding: out[b, t, :] = weight[ids[b*T + t], :], weight [V, D].
 *
 * The ids belong to the caller, so the node keeps them through the store as
 * INDEX (lossless; one byte per id while V <= 256, two while V <= 65536)
 * instead of a private int32 copy: they then show up in the store's
 * accounting like every other saved tensor.
 *
 * Backward scatters dy rows into dWeight: a token id repeats within a batch,
 * so rows of dWeight are shared between tokens.  Threads split the D columns
 * into 64-byte blocks instead of splitting tokens, so every element of
 * dWeight has one writer and the tokens are added in their fixed order: no
 * races, no atomics, and a result independent of thread count and timing. */
#include "ops.h"

/* Columns per block: one 64-byte cache line of floats, so two threads never
 * write the same line of dWeight. */
#define EMB_COL_BLOCK 16
#define EMB_PAR_MIN ((size_t)1 << 15)

static actc_status emb_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *w = node->inputs[0];
    float *gw;
    actc_status st = actc_grad_buffer(ctx, w, &gw);
    if (st != ACTC_OK || !gw) return st;
    actc_tensor *ids = actc_load(ctx, node, 0);
    if (!ids) return actc_last_status();
    const int D = w->shape[1];
    const size_t ntok = ids->numel;
    const float *idf = ids->data, *gy = node->output->grad->data;
    const int nblk = (D + EMB_COL_BLOCK - 1) / EMB_COL_BLOCK;
#pragma omp parallel for schedule(static) if (ntok * (size_t)D >= EMB_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        const int c0 = blk * EMB_COL_BLOCK;
        const int nc = D - c0 < EMB_COL_BLOCK ? D - c0 : EMB_COL_BLOCK;
        for (size_t t = 0; t < ntok; t++) {
            /* The store's INDEX codec restores exact integers < V. */
            float *dst = gw + (size_t)idf[t] * D + c0;
            const float *src = gy + t * D + c0;
#pragma omp simd
            for (int c = 0; c < nc; c++) dst[c] += src[c];
        }
    }
    actc_tensor_release(ids);
    return ACTC_OK;
}

actc_tensor *actc_embedding(actc_ctx *ctx, const int32_t *ids, int B, int T, actc_tensor *weight)
{
    OP_CHECK(ctx, "embedding: NULL context");
    OP_CHECK(weight && weight->data, "embedding: weight is NULL or its data was already freed");
    char sw[64];
    actc_shape_str(weight, sw, sizeof sw);
    OP_CHECK(weight->ndim == 2 && weight->shape[0] > 0 && weight->shape[1] > 0,
             "embedding: weight must be [V, D] with V, D > 0, got %s", sw);
    OP_CHECK(B > 0 && T > 0, "embedding: B and T must be positive, got B=%d T=%d (weight %s)", B, T, sw);
    OP_CHECK(ids, "embedding: ids are NULL (B=%d T=%d, weight %s)", B, T, sw);
    const int V = weight->shape[0], D = weight->shape[1];
    const size_t ntok = (size_t)B * T;
    for (size_t i = 0; i < ntok; i++)
        OP_CHECK(ids[i] >= 0 && ids[i] < V,
                 "embedding: id %d at position %zu (b=%zu, t=%zu) is outside [0, %d) (weight %s)",
                 (int)ids[i], i, i / (size_t)T, i % (size_t)T, V, sw);
    /* Saved ids travel as floats, exact only up to 2^24. */
    OP_CHECK(!(actc_ctx_training(ctx) && weight->requires_grad) || V <= (1 << 24),
             "embedding: V=%d is too large to keep the ids for backward (at most 2^24 rows)", V);

    int shape[3] = {B, T, D};
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 3, shape);
    if (!y) return NULL;
    const float *wd = weight->data;
    float *yd = y->data;
#pragma omp parallel for schedule(static) if (ntok * (size_t)D >= EMB_PAR_MIN)
    for (size_t t = 0; t < ntok; t++) {
        const float *src = wd + (size_t)ids[t] * D;
        float *dst = yd + t * D;
#pragma omp simd
        for (int c = 0; c < D; c++) dst[c] = src[c];
    }

    actc_node *node;
    if (!actc__op_record(ctx, "embedding", emb_backward, y, 1, &weight, &node)) return NULL;
    /* The ids as floats: exact, see the V check above. */
    const int is[2] = {B, T};
    if (node && actc__save_indices(ctx, node, ids, 2, is) != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    return y;
}
