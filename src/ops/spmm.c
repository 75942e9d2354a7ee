/* Sparse times dense: y[n, F] = A x, A a CSR adjacency (graph.h).
 *
 * Forward: one row of y per iteration, rows dealt to threads in dynamic
 * chunks (degrees vary), the row's entries added in CSR order with the
 * feature loop vectorised: each y row has one writer and a fixed order.
 * Backward: dx = A^T dy by the same kernel over the transpose at, reading
 * A's values through at->perm (or over A itself when at is NULL: A is then
 * symmetric), so again one writer per row of dx, no atomics, and the same
 * bits at any thread count.  Nothing is saved: dx needs only A. */
#include "graph.h"
#include <string.h>

#define SPMM_PREFETCH 16 /* entries ahead */

/* y[i] (+)= sum over entries k of row i of val[perm[k]] x[col[k]] for every
 * row; val NULL: ones; perm NULL: identity; zero: start y's rows at 0. */
static void spmm_rows(const actc_csr *s, const float *val, const int64_t *perm, const float *x, float *y, size_t F,
                      int zero)
{
    const int n = s->n;
    const int64_t *rp = s->rowptr, nnz = s->nnz;
    const int32_t *col = s->col;
#pragma omp parallel for schedule(dynamic, GRAPH_ROW_CHUNK) if (s->nnz * (int64_t)F >= GRAPH_PAR_MIN)
    for (int i = 0; i < n; i++) {
        float *yi = y + (size_t)i * F;
        if (zero) memset(yi, 0, F * sizeof *yi);
        for (int64_t k = rp[i]; k < rp[i + 1]; k++) {
            const float v = val ? val[perm ? perm[k] : k] : 1.0f;
            const float *xj = x + (size_t)col[k] * F;
#if defined(__GNUC__)
            /* The x rows are random reads: ask for one a few entries ahead
             * (the column array runs on into the next rows). */
            if (k + SPMM_PREFETCH < nnz) {
                const char *pf = (const char *)(x + (size_t)col[k + SPMM_PREFETCH] * F);
                for (size_t b = 0; b < F * sizeof(float); b += 64) __builtin_prefetch(pf + b, 0, 3);
            }
#endif
#pragma omp simd
            for (size_t f = 0; f < F; f++) yi[f] += v * xj[f];
        }
    }
}

static actc_status spmm_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    float *dx;
    actc_status st = actc_grad_buffer(ctx, x, &dx);
    if (st != ACTC_OK || !dx) return st;
    const actc__graph_state *g = node->user;
    const size_t F = x->numel / (size_t)g->a.n;
    /* A^T: the transpose's rows with A's values, or A itself (symmetric). */
    spmm_rows(g->has_at ? &g->at : &g->a, g->a.val, g->has_at ? g->at.perm : NULL, node->output->grad->data, dx, F, 0);
    return ACTC_OK;
}

actc_tensor *actc_spmm(actc_ctx *ctx, const actc_csr *a, const actc_csr *at, actc_tensor *x)
{
    char sx[64];
    OP_CHECK(ctx, "spmm: NULL context");
    OP_CHECK(x && x->data, "spmm: input x is NULL or its data was already freed");
    if (!actc__csr_ok("spmm", "a", a) || !actc__csr_transpose_ok("spmm", a, at)) return NULL;
    actc_shape_str(x, sx, sizeof sx);
    OP_CHECK(x->ndim >= 1 && x->shape[0] == a->n, "spmm: x %s must have a->n = %d rows", sx, a->n);
    const size_t F = x->numel / (size_t)a->n;

    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    if (F > 0) spmm_rows(a, a->val, NULL, x->data, y->data, F, 1);

    actc_node *node;
    if (!actc__op_record(ctx, "spmm", spmm_backward, y, 1, &x, &node)) return NULL;
    if (node && actc__graph_keep(node, a, at) != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    return y;
}
