/* Internal helpers of the sparse graph operators (spmm, gat, edge_softmax,
 * edge_aggregate): argument checks of a CSR and of its transpose, and the
 * node state that keeps both for backward.
 *
 * A node keeps copies of the actc_csr structs (not of their arrays): the
 * caller's structs may go out of scope after forward, the arrays (the
 * graph's structure, like a parameter) must outlive backward. */
#ifndef ACTC_OPS_GRAPH_H
#define ACTC_OPS_GRAPH_H
#include "ops.h"
#include <limits.h>
#include <stdlib.h>

/* Work (entries x features) above which a graph kernel runs threaded; rows
 * are handed out dynamically in chunks (degrees vary: a hub row can hold a
 * large share of the entries), each row computed by one thread in a fixed
 * order, so the result does not depend on the thread count. */
#define GRAPH_PAR_MIN ((int64_t)1 << 15)
#define GRAPH_ROW_CHUNK 64

/* What a graph operator's node keeps: a, and its transpose when given. */
typedef struct {
    actc_csr a, at;
    int has_at;
} actc__graph_state;

/* NULL with ACTC_ERR_INVALID (message starting with op) unless a looks like
 * a CSR: n >= 1, arrays present, rowptr[0] == 0 and rowptr[n] == nnz.  The
 * columns are not scanned (O(nnz) per call); actc_csr_from_edges and
 * actc_csr_transpose make valid ones. */
static inline int actc__csr_ok(const char *op, const char *name, const actc_csr *a)
{
    if (!a) {
        actc_set_error(ACTC_ERR_INVALID, "%s: %s is NULL", op, name);
        return 0;
    }
    if (a->n < 1 || a->nnz < 0 || !a->rowptr || (a->nnz > 0 && !a->col)) {
        actc_set_error(ACTC_ERR_INVALID, "%s: %s is not a CSR (n=%d, nnz=%lld, rowptr %s, col %s)", op, name,
                       a->n, (long long)a->nnz, a->rowptr ? "set" : "NULL", a->col ? "set" : "NULL");
        return 0;
    }
    if (a->rowptr[0] != 0 || a->rowptr[a->n] != a->nnz) {
        actc_set_error(ACTC_ERR_INVALID, "%s: %s has rowptr[0]=%lld and rowptr[n=%d]=%lld, expected 0 and nnz=%lld",
                       op, name, (long long)a->rowptr[0], a->n, (long long)a->rowptr[a->n], (long long)a->nnz);
        return 0;
    }
    return 1;
}

/* at (if not NULL) must be a transpose of a: same n and nnz, with perm. */
static inline int actc__csr_transpose_ok(const char *op, const actc_csr *a, const actc_csr *at)
{
    if (!at) return 1;
    if (!actc__csr_ok(op, "the transpose at", at)) return 0;
    if (at->n != a->n || at->nnz != a->nnz || !at->perm) {
        actc_set_error(ACTC_ERR_INVALID,
                       "%s: at (n=%d, nnz=%lld, perm %s) is not a transpose of a (n=%d, nnz=%lld): make it with "
                       "actc_csr_transpose",
                       op, at->n, (long long)at->nnz, at->perm ? "set" : "NULL", a->n, (long long)a->nnz);
        return 0;
    }
    return 1;
}

/* Keep a (and at) in node->user for backward. */
static inline actc_status actc__graph_keep(actc_node *node, const actc_csr *a, const actc_csr *at)
{
    actc__graph_state *g = calloc(1, sizeof *g);
    if (!g) return actc_set_error(ACTC_ERR_OOM, "%s: out of memory for the node's graph", node->op);
    g->a = *a;
    if (at) g->at = *at;
    g->has_at = at != NULL;
    node->user = g;
    node->user_free = free;
    return ACTC_OK;
}
#endif
