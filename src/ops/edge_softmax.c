/* Softmax over each CSR row's entries, per head: for e [nnz, H] and row i,
 *   alpha[k, h] = exp(e[k, h] - m_ih) / sum_{k' in row i} exp(e[k', h] - m_ih)
 * with m_ih the row's maximum for head h (so exp never overflows).  A row
 * without entries has nothing to normalise and produces nothing.
 *
 * Saves alpha as ACT (SOFTMAX_OUT, not linear, as softmax_causal): backward
 * needs only it, de = alpha (g - sum_row(alpha g)) per head.  Rows go to
 * threads in dynamic chunks, each row by one thread in entry order: the same
 * bits at any thread count. */
#include "graph.h"
#include <float.h>

static actc_status esm_backward(actc_ctx *ctx, actc_node *node)
{
    float *de;
    actc_status st = actc_grad_buffer(ctx, node->inputs[0], &de);
    if (st != ACTC_OK || !de) return st;
    actc_tensor *p = actc_load(ctx, node, 0);
    if (!p) return actc_last_status();
    const actc__graph_state *gs = node->user;
    const int n = gs->a.n, H = p->shape[1];
    const int64_t *rp = gs->a.rowptr;
    const float *al = p->data, *g = node->output->grad->data;
#pragma omp parallel for schedule(dynamic, GRAPH_ROW_CHUNK) if ((int64_t)p->numel >= GRAPH_PAR_MIN)
    for (int i = 0; i < n; i++) {
        const int64_t k0 = rp[i], k1 = rp[i + 1];
        for (int h = 0; h < H; h++) {
            float c = 0.0f;
            for (int64_t k = k0; k < k1; k++) c += al[k * H + h] * g[k * H + h];
            for (int64_t k = k0; k < k1; k++) de[k * H + h] += al[k * H + h] * (g[k * H + h] - c);
        }
    }
    actc_tensor_release(p);
    return ACTC_OK;
}

actc_tensor *actc_edge_softmax(actc_ctx *ctx, const actc_csr *a, actc_tensor *e)
{
    char se[64];
    OP_CHECK(ctx, "edge_softmax: NULL context");
    OP_CHECK(e && e->data, "edge_softmax: e is NULL or its data was already freed");
    if (!actc__csr_ok("edge_softmax", "a", a)) return NULL;
    actc_shape_str(e, se, sizeof se);
    OP_CHECK(e->ndim == 2 && (int64_t)e->shape[0] == a->nnz && e->shape[1] >= 1,
             "edge_softmax: e %s must be [nnz, H] with nnz = %lld (a's entries)", se, (long long)a->nnz);
    const int n = a->n, H = e->shape[1];
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 2, e->shape);
    if (!y) return NULL;
    const int64_t *rp = a->rowptr;
    const float *x = e->data;
    float *p = y->data;
#pragma omp parallel for schedule(dynamic, GRAPH_ROW_CHUNK) if ((int64_t)e->numel >= GRAPH_PAR_MIN)
    for (int i = 0; i < n; i++) {
        const int64_t k0 = rp[i], k1 = rp[i + 1];
        for (int h = 0; h < H; h++) {
            float m = -FLT_MAX;
            for (int64_t k = k0; k < k1; k++) m = x[k * H + h] > m ? x[k * H + h] : m;
            float sum = 0.0f;
            for (int64_t k = k0; k < k1; k++) {
                const float v = actc__expf(x[k * H + h] - m);
                p[k * H + h] = v;
                sum += v;
            }
            const float inv = 1.0f / sum; /* >= 1 term equal to exp(0) */
            for (int64_t k = k0; k < k1; k++) p[k * H + h] *= inv;
        }
    }

    actc_node *node;
    if (!actc__op_record(ctx, "edge_softmax", esm_backward, y, 1, &e, &node)) return NULL;
    if (node) {
        if (actc__graph_keep(node, a, NULL) != ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
        /* de = alpha (g - sum alpha g): quadratic in the saved output. */
        OP_SAVE(ctx, node, y, ACTC_SAVE_ACT, actc__role(ACTC_ROLE_SOFTMAX_OUT, 0), y);
    }
    return y;
}
