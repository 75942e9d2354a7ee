/* Attention-weighted aggregation over a CSR adjacency, per head:
 *   y[i, h*D + d] = sum over entries k = (i, j) of alpha[k, h] x[j, h*D + d]
 * for alpha [nnz, H], x [n, H*D].
 *
 * Backward, each gradient with one writer per row (no atomics, the same bits
 * at any thread count):
 *   dalpha[k, h] = dot(dy[i, head h], x[j, head h])   rows i of A: row i owns
 *                                                      its entries k
 *   dx[j, head h] += sum over the transpose's row j of alpha[perm, h] dy[i, head h]
 * alpha is saved (ACT, ATTN_PROBS, linear: dx is linear in it) when x needs a
 * gradient, x (ACT, ATTN_V, linear: dalpha is) when alpha does; a parameter
 * is read in place instead. */
#include "graph.h"
#include <string.h>

enum { EA_ASLOT = 0, EA_XSLOT };

static actc_status ea_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *alt = node->inputs[0], *xt = node->inputs[1];
    const actc__graph_state *gs = node->user;
    const int n = gs->a.n, H = alt->shape[1], F = xt->shape[1], D = F / H;
    const float *dy = node->output->grad->data;
    const int64_t work = gs->a.nnz * F;
    float *dal, *dx;
    actc_status st = actc_grad_buffer(ctx, alt, &dal);
    if (st != ACTC_OK) return st;
    if (dal) {
        actc_tensor *xs;
        const float *x = actc__input_value(ctx, node, 1, node->iattr[EA_XSLOT], "edge_aggregate", &xs);
        if (!x) return actc_last_status();
        const int64_t *rp = gs->a.rowptr;
        const int32_t *col = gs->a.col;
#pragma omp parallel for schedule(dynamic, GRAPH_ROW_CHUNK) if (work >= GRAPH_PAR_MIN)
        for (int i = 0; i < n; i++) {
            const float *dyi = dy + (size_t)i * F;
            for (int64_t k = rp[i]; k < rp[i + 1]; k++) {
                const float *xj = x + (size_t)col[k] * F;
                for (int h = 0; h < H; h++) {
                    float s = 0.0f;
#pragma omp simd reduction(+ : s)
                    for (int d = 0; d < D; d++) s += dyi[h * D + d] * xj[h * D + d];
                    dal[k * H + h] += s;
                }
            }
        }
        actc_tensor_release(xs);
    }
    if ((st = actc_grad_buffer(ctx, xt, &dx)) != ACTC_OK) return st;
    if (dx) {
        if (!gs->has_at) return actc_set_error(ACTC_ERR_STATE, "edge_aggregate backward: no transpose for x");
        actc_tensor *as;
        const float *al = actc__input_value(ctx, node, 0, node->iattr[EA_ASLOT], "edge_aggregate", &as);
        if (!al) return actc_last_status();
        const int64_t *rp = gs->at.rowptr, *perm = gs->at.perm;
        const int32_t *col = gs->at.col;
#pragma omp parallel for schedule(dynamic, GRAPH_ROW_CHUNK) if (work >= GRAPH_PAR_MIN)
        for (int j = 0; j < n; j++) {
            float *dxj = dx + (size_t)j * F;
            for (int64_t k = rp[j]; k < rp[j + 1]; k++) {
                const float *dyi = dy + (size_t)col[k] * F, *ak = al + (size_t)perm[k] * H;
                for (int h = 0; h < H; h++) {
                    const float c = ak[h];
#pragma omp simd
                    for (int d = 0; d < D; d++) dxj[h * D + d] += c * dyi[h * D + d];
                }
            }
        }
        actc_tensor_release(as);
    }
    return ACTC_OK;
}

actc_tensor *actc_edge_aggregate(actc_ctx *ctx, const actc_csr *a, const actc_csr *at, actc_tensor *alpha,
                                 actc_tensor *x)
{
    char sa[64], sx[64];
    OP_CHECK(ctx, "edge_aggregate: NULL context");
    OP_CHECK(alpha && alpha->data && x && x->data, "edge_aggregate: %s is NULL or its data was already freed",
             !(alpha && alpha->data) ? "alpha" : "x");
    if (!actc__csr_ok("edge_aggregate", "a", a) || !actc__csr_transpose_ok("edge_aggregate", a, at)) return NULL;
    actc_shape_str(alpha, sa, sizeof sa);
    actc_shape_str(x, sx, sizeof sx);
    OP_CHECK(alpha->ndim == 2 && (int64_t)alpha->shape[0] == a->nnz && alpha->shape[1] >= 1,
             "edge_aggregate: alpha %s must be [nnz, H] with nnz = %lld (a's entries)", sa, (long long)a->nnz);
    const int H = alpha->shape[1];
    OP_CHECK(x->ndim == 2 && x->shape[0] == a->n, "edge_aggregate: x %s must be [n, F] with n = a->n = %d", sx,
             a->n);
    OP_CHECK(x->shape[1] % H == 0, "edge_aggregate: x %s has F = %d columns, not divisible by H = %d heads (alpha %s)",
             sx, x->shape[1], H, sa);
    OP_CHECK(at || !x->requires_grad || !actc_ctx_training(ctx),
             "edge_aggregate: x %s needs a gradient: pass at = actc_csr_transpose(a)", sx);
    const int n = a->n, F = x->shape[1], D = F / H;

    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 2, x->shape);
    if (!y) return NULL;
    const int64_t *rp = a->rowptr;
    const int32_t *col = a->col;
    const float *al = alpha->data, *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for schedule(dynamic, GRAPH_ROW_CHUNK) if (a->nnz * F >= GRAPH_PAR_MIN)
    for (int i = 0; i < n; i++) {
        float *yi = yd + (size_t)i * F;
        memset(yi, 0, (size_t)F * sizeof *yi);
        for (int64_t k = rp[i]; k < rp[i + 1]; k++) {
            const float *xj = xd + (size_t)col[k] * F, *ak = al + (size_t)k * H;
            for (int h = 0; h < H; h++) {
                const float c = ak[h];
#pragma omp simd
                for (int d = 0; d < D; d++) yi[h * D + d] += c * xj[h * D + d];
            }
        }
    }

    actc_tensor *in[2] = {alpha, x};
    actc_node *node;
    if (!actc__op_record(ctx, "edge_aggregate", ea_backward, y, 2, in, &node)) return NULL;
    if (node) {
        const actc_save_role ar = actc__role(ACTC_ROLE_ATTN_PROBS, 1), xr = actc__role(ACTC_ROLE_ATTN_V, 1);
        if (actc__graph_keep(node, a, at) != ACTC_OK ||
            actc__save_operands(ctx, node, alpha, x, &ar, &xr, &node->iattr[EA_ASLOT], &node->iattr[EA_XSLOT]) !=
                ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
    }
    return y;
}
