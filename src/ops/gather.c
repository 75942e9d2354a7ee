/* Row gather: y[r] = x[idx[r]] for r in [0, m), x [n, ...] (repeats
 * allowed; a mini-batch's nodes, a layer's sampled neighbours).
 *
 * The indices are the caller's, so the node keeps them through the store as
 * INDEX (lossless; as embedding does), floats exact below 2^24 rows.
 * Backward adds dy rows back to their sources without atomics: it buckets
 * the output rows by source (a counting sort, stable, so each source's rows
 * stay in output order), then threads take ranges of source rows, each row
 * of dx written by one thread in a fixed order: the same bits at any thread
 * count. */
#include "graph.h"
#include <string.h>

#define GATHER_PAR_MIN ((size_t)1 << 15)

static actc_status gather_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    float *dx;
    actc_status st = actc_grad_buffer(ctx, x, &dx);
    if (st != ACTC_OK || !dx) return st;
    actc_tensor *ids = actc_load(ctx, node, 0);
    if (!ids) return actc_last_status();
    const int n = x->shape[0], m = (int)ids->numel;
    const size_t per = x->numel / (size_t)n;
    int64_t *start = actc_mem_alloc(ACTC_MEM_SCRATCH, ((size_t)n + 1) * sizeof *start);
    int32_t *order = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)(m ? m : 1) * sizeof *order);
    if (!start || !order) {
        actc_mem_free(start), actc_mem_free(order);
        actc_tensor_release(ids);
        return actc_last_status();
    }
    const float *idf = ids->data;
    memset(start, 0, ((size_t)n + 1) * sizeof *start);
    for (int r = 0; r < m; r++) start[(int)idf[r] + 1]++;
    for (int i = 0; i < n; i++) start[i + 1] += start[i];
    /* Fill with start[i] as the cursor of bucket i, then shift back. */
    for (int r = 0; r < m; r++) order[start[(int)idf[r]]++] = r;
    for (int i = n; i > 0; i--) start[i] = start[i - 1];
    start[0] = 0;
    actc_tensor_release(ids);

    const float *dy = node->output->grad->data;
#pragma omp parallel for schedule(dynamic, 256) if ((size_t)m * per >= GATHER_PAR_MIN)
    for (int i = 0; i < n; i++) {
        float *di = dx + (size_t)i * per;
        for (int64_t p = start[i]; p < start[i + 1]; p++) {
            const float *src = dy + (size_t)order[p] * per;
#pragma omp simd
            for (size_t c = 0; c < per; c++) di[c] += src[c];
        }
    }
    actc_mem_free(start);
    actc_mem_free(order);
    return ACTC_OK;
}

actc_tensor *actc_gather_rows(actc_ctx *ctx, actc_tensor *x, const int32_t *idx, int m)
{
    char sx[64];
    OP_CHECK(ctx, "gather_rows: NULL context");
    OP_CHECK(x && x->data, "gather_rows: x is NULL or its data was already freed");
    actc_shape_str(x, sx, sizeof sx);
    OP_CHECK(x->ndim >= 1 && x->shape[0] >= 1, "gather_rows: x %s must have at least one row", sx);
    OP_CHECK(m >= 1, "gather_rows: m=%d rows to pick, need m >= 1 (x %s)", m, sx);
    OP_CHECK(idx, "gather_rows: idx is NULL (m=%d, x %s)", m, sx);
    const int n = x->shape[0];
    for (int r = 0; r < m; r++)
        OP_CHECK(idx[r] >= 0 && idx[r] < n, "gather_rows: idx[%d] = %d is outside [0, %d) (x %s)", r, (int)idx[r], n,
                 sx);
    /* Saved indices travel as floats, exact only up to 2^24. */
    OP_CHECK(!(actc_ctx_training(ctx) && x->requires_grad) || n <= (1 << 24),
             "gather_rows: x %s has too many rows to keep the indices for backward (at most 2^24)", sx);
    const size_t per = x->numel / (size_t)n;
    int ys[ACTC_MAX_DIMS];
    memcpy(ys, x->shape, sizeof ys);
    ys[0] = m;
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, ys);
    if (!y) return NULL;
    const float *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for schedule(static) if ((size_t)m * per >= GATHER_PAR_MIN)
    for (int r = 0; r < m; r++) memcpy(yd + (size_t)r * per, xd + (size_t)idx[r] * per, per * sizeof *yd);

    actc_node *node;
    if (!actc__op_record(ctx, "gather_rows", gather_backward, y, 1, &x, &node)) return NULL;
    const int is[1] = {m};
    if (node && actc__save_indices(ctx, node, idx, 1, is) != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    return y;
}
