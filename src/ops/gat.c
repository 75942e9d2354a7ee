/* GAT's attention scores, in two operators:
 *
 *   actc_head_dot:   s[i, h] = sum_d x[i, h*D + d] w[h, d]   (x [n, H*D], w [H, D])
 *   actc_gat_scores: e[k, h] = LeakyReLU(s_dst[i, h] + s_src[j, h]) for entry k = (i, j)
 *
 * gat_scores keeps only the sign of each score (MASK, one bit per edge and
 * head): de = g where the score was positive, slope g elsewhere (the kink at
 * 0 takes the slope side); ds_dst[i] sums de over row i, ds_src[j] over the
 * transpose's row j (column j of A, entries read through at->perm), so every
 * row of both gradients has one writer.  head_dot is a per-head product: dW
 * needs x (saved as LINEAR_IN, contracted size D), dx needs w (a parameter
 * is read in place, any other weight kept exactly). */
#include "graph.h"
#include <math.h>
#include <string.h>

/* ---- head_dot ----------------------------------------------------------- */

enum { HD_XSLOT = 0, HD_WSLOT };
#define HD_COL_BLOCK 16 /* one 64-byte line of dW per block: one writer */

static actc_status head_dot_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *xt = node->inputs[0], *wt = node->inputs[1];
    const int H = wt->shape[0], D = wt->shape[1], F = H * D, n = xt->shape[0];
    const float *ds = node->output->grad->data;
    float *dw, *dx;
    actc_status st = actc_grad_buffer(ctx, wt, &dw);
    if (st != ACTC_OK) return st;
    if (dw) {
        actc_tensor *xs;
        const float *x = actc__input_value(ctx, node, 0, node->iattr[HD_XSLOT], "head_dot", &xs);
        if (!x) return actc_last_status();
        /* dW[h, d] += sum_i ds[i, h] x[i, h*D + d]: column blocks over
         * threads, rows in order within a block. */
        const int nblk = (F + HD_COL_BLOCK - 1) / HD_COL_BLOCK;
#pragma omp parallel for schedule(static) if ((int64_t)n * F >= GRAPH_PAR_MIN)
        for (int b = 0; b < nblk; b++) {
            const int c0 = b * HD_COL_BLOCK, c1 = c0 + HD_COL_BLOCK < F ? c0 + HD_COL_BLOCK : F;
            float acc[HD_COL_BLOCK] = {0};
            for (int i = 0; i < n; i++) {
                const float *xi = x + (size_t)i * F, *dsi = ds + (size_t)i * H;
                for (int c = c0; c < c1; c++) acc[c - c0] += dsi[c / D] * xi[c];
            }
            for (int c = c0; c < c1; c++) dw[c] += acc[c - c0];
        }
        actc_tensor_release(xs);
    }
    if ((st = actc_grad_buffer(ctx, xt, &dx)) != ACTC_OK) return st;
    if (dx) {
        actc_tensor *ws;
        const float *w = actc__input_value(ctx, node, 1, node->iattr[HD_WSLOT], "head_dot", &ws);
        if (!w) return actc_last_status();
#pragma omp parallel for schedule(static) if ((int64_t)n * F >= GRAPH_PAR_MIN)
        for (int i = 0; i < n; i++)
            for (int h = 0; h < H; h++) {
                const float g = ds[(size_t)i * H + h];
                float *dxi = dx + (size_t)i * F + (size_t)h * D;
                const float *wh = w + (size_t)h * D;
#pragma omp simd
                for (int d = 0; d < D; d++) dxi[d] += g * wh[d];
            }
        actc_tensor_release(ws);
    }
    return ACTC_OK;
}

actc_tensor *actc_head_dot(actc_ctx *ctx, actc_tensor *x, actc_tensor *w)
{
    char sx[64], sw[64];
    OP_CHECK(ctx, "head_dot: NULL context");
    OP_CHECK(x && x->data && w && w->data, "head_dot: %s is NULL or its data was already freed",
             !(x && x->data) ? "x" : "w");
    actc_shape_str(x, sx, sizeof sx);
    actc_shape_str(w, sw, sizeof sw);
    OP_CHECK(w->ndim == 2 && w->shape[0] >= 1 && w->shape[1] >= 1, "head_dot: w must be [H, D], got %s", sw);
    const int H = w->shape[0], D = w->shape[1];
    OP_CHECK(x->ndim == 2 && (int64_t)x->shape[1] == (int64_t)H * D,
             "head_dot: x %s must be [n, H*D] = [n, %d] for w %s", sx, H * D, sw);
    const int n = x->shape[0], F = H * D;
    const int ys[2] = {n, H};
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 2, ys);
    if (!y) return NULL;
    const float *xd = x->data, *wd = w->data;
    float *yd = y->data;
#pragma omp parallel for schedule(static) if ((int64_t)n * F >= GRAPH_PAR_MIN)
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++) {
            const float *xi = xd + (size_t)i * F + (size_t)h * D, *wh = wd + (size_t)h * D;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int d = 0; d < D; d++) s += xi[d] * wh[d];
            yd[(size_t)i * H + h] = s;
        }

    actc_tensor *in[2] = {x, w};
    actc_node *node;
    if (!actc__op_record(ctx, "head_dot", head_dot_backward, y, 2, in, &node)) return NULL;
    if (node) {
        /* dW = ds^T x per head: linear in x, contracted over D per head. */
        actc_save_role xr = actc__role(ACTC_ROLE_LINEAR_IN, 1);
        xr.fan_in = D;
        if (actc__save_product_inputs(ctx, node, x, w, &xr, &node->iattr[HD_XSLOT], &node->iattr[HD_WSLOT], NULL) !=
            ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
    }
    return y;
}

/* ---- gat_scores --------------------------------------------------------- */

static actc_status gat_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *sdst = node->inputs[0], *ssrc = node->inputs[1];
    const actc__graph_state *g = node->user;
    const int H = sdst->shape[1];
    const float slope = node->fattr[0];
    float *gd, *gs;
    actc_status st = actc_grad_buffer(ctx, sdst, &gd);
    if (st == ACTC_OK) st = actc_grad_buffer(ctx, ssrc, &gs);
    if (st != ACTC_OK) return st;
    if (!gd && !gs) return ACTC_OK;
    if (gs && !g->has_at) return actc_set_error(ACTC_ERR_STATE, "gat_scores backward: no transpose for s_src");
    /* de overwrites the decoded mask: a MASK save is always decoded into a
     * tensor of its own (only fp32 saves are shared with the saved tensor,
     * store.c), so writing into this load is safe. */
    actc_tensor *m = actc_load(ctx, node, 0);
    if (!m) return actc_last_status();
    float *de = m->data;
    const float *gy = node->output->grad->data;
    const size_t ne = m->numel;
#pragma omp parallel for simd schedule(static) if ((int64_t)ne >= GRAPH_PAR_MIN)
    for (size_t k = 0; k < ne; k++) de[k] = gy[k] * (de[k] > 0.5f ? 1.0f : slope);

    const int n = g->a.n;
    if (gd) {
        const int64_t *rp = g->a.rowptr;
#pragma omp parallel for schedule(dynamic, GRAPH_ROW_CHUNK) if ((int64_t)ne >= GRAPH_PAR_MIN)
        for (int i = 0; i < n; i++) {
            float *gi = gd + (size_t)i * H;
            for (int64_t k = rp[i]; k < rp[i + 1]; k++) {
                const float *dk = de + (size_t)k * H;
#pragma omp simd
                for (int h = 0; h < H; h++) gi[h] += dk[h];
            }
        }
    }
    if (gs) {
        const int64_t *rp = g->at.rowptr, *perm = g->at.perm;
#pragma omp parallel for schedule(dynamic, GRAPH_ROW_CHUNK) if ((int64_t)ne >= GRAPH_PAR_MIN)
        for (int j = 0; j < n; j++) {
            float *gj = gs + (size_t)j * H;
            for (int64_t k = rp[j]; k < rp[j + 1]; k++) {
                const float *dk = de + (size_t)perm[k] * H;
#pragma omp simd
                for (int h = 0; h < H; h++) gj[h] += dk[h];
            }
        }
    }
    actc_tensor_release(m);
    return ACTC_OK;
}

actc_tensor *actc_gat_scores(actc_ctx *ctx, const actc_csr *a, const actc_csr *at, actc_tensor *s_dst,
                             actc_tensor *s_src, float slope)
{
    char sd[64], ss[64];
    OP_CHECK(ctx, "gat_scores: NULL context");
    OP_CHECK(s_dst && s_dst->data && s_src && s_src->data, "gat_scores: %s is NULL or its data was already freed",
             !(s_dst && s_dst->data) ? "s_dst" : "s_src");
    if (!actc__csr_ok("gat_scores", "a", a) || !actc__csr_transpose_ok("gat_scores", a, at)) return NULL;
    actc_shape_str(s_dst, sd, sizeof sd);
    actc_shape_str(s_src, ss, sizeof ss);
    OP_CHECK(s_dst->ndim == 2 && s_dst->shape[0] == a->n && s_dst->shape[1] >= 1,
             "gat_scores: s_dst %s must be [n, H] with n = a->n = %d", sd, a->n);
    OP_CHECK(actc_same_shape(s_dst, s_src), "gat_scores: s_src %s must have s_dst's shape %s", ss, sd);
    OP_CHECK(isfinite(slope) && slope >= 0.0f, "gat_scores: slope must be finite and >= 0, got %g", (double)slope);
    const int H = s_dst->shape[1];
    OP_CHECK(a->nnz <= INT_MAX, "gat_scores: a has %lld entries, at most %d fit a tensor's first axis",
             (long long)a->nnz, INT_MAX);
    OP_CHECK(at || !s_src->requires_grad || !actc_ctx_training(ctx),
             "gat_scores: s_src %s needs a gradient: pass at = actc_csr_transpose(a)", ss);

    const int es[2] = {(int)a->nnz, H};
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 2, es);
    if (!y) return NULL;
    const float *dd = s_dst->data, *sr = s_src->data;
    float *e = y->data;
    const int n = a->n;
    const int64_t *rp = a->rowptr;
    const int32_t *col = a->col;
#pragma omp parallel for schedule(dynamic, GRAPH_ROW_CHUNK) if (a->nnz * H >= GRAPH_PAR_MIN)
    for (int i = 0; i < n; i++) {
        const float *di = dd + (size_t)i * H;
        for (int64_t k = rp[i]; k < rp[i + 1]; k++) {
            const float *sj = sr + (size_t)col[k] * H;
            float *ek = e + (size_t)k * H;
#pragma omp simd
            for (int h = 0; h < H; h++) {
                const float z = di[h] + sj[h];
                ek[h] = z > 0.0f ? z : slope * z;
            }
        }
    }

    actc_tensor *in[2] = {s_dst, s_src};
    actc_node *node;
    if (!actc__op_record(ctx, "gat_scores", gat_backward, y, 2, in, &node)) return NULL;
    if (node) {
        node->fattr[0] = slope;
        if (actc__graph_keep(node, a, at) != ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
        const actc_save_role r = actc__role(ACTC_ROLE_MASK, 1);
        /* e > 0 exactly where the pre-activation was (slope >= 0): the
         * output itself is the mask (counted once in the fp32 reference). */
        OP_SAVE(ctx, node, y, ACTC_SAVE_MASK, r, y);
    }
    return y;
}
