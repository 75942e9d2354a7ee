/* Fully connected layer: y[M,out] = x[M,in] W[out,in]^T + b, with every
 * leading dim of x flattened into M.  All three products are single sgemm
 * calls (OpenBLAS threads them); only the bias sums are our own loops.
 *
 * When W is a parameter, the input's save offers a projection transform:
 * if the policy plans one (CompAct), the store keeps z = x P (rows x rank)
 * in x's place (actc_save_offer) and backward adds the weight gradient as the low-rank factor
 * dy^T z (out x rank) standing for dy^T x P P^T; y, dx and db stay exact. */
#include "ops.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { IA_M = 0, IA_XSLOT, IA_WSLOT };

/* W's gradient in the subspace: F[out,rank] = dy^T z from the saved
 * z = x P, added as W's low-rank gradient (F P^T). */
static actc_status lowrank_grad(actc_ctx *ctx, actc_node *node, actc_tensor *wt, const actc_projection *proj,
                                const float *dy, int M, int out)
{
    actc_tensor *zs = actc_load(ctx, node, node->iattr[IA_XSLOT]);
    if (!zs) return actc_last_status();
    const int fshape[2] = {out, proj->rank};
    actc_tensor *f = actc_tensor_new(ACTC_MEM_SCRATCH, 2, fshape);
    if (!f) {
        actc_tensor_release(zs);
        return actc_last_status();
    }
    actc__sgemm(1, 0, out, proj->rank, M, 1.0f, dy, out, zs->data, proj->rank, 0.0f, f->data, proj->rank);
    actc_tensor_release(zs);
    actc_status st = actc_grad_add_lowrank(ctx, wt, f, proj);
    actc_tensor_release(f);
    return st;
}

/* The store kept x P in x's place (save 0; W, a parameter, is read in
 * place): backward needs P's parameters. */
static actc_status keep_projection(actc_node *node, const actc_projection *proj)
{
    actc_projection *p = malloc(sizeof *p);
    if (!p) return actc_set_error(ACTC_ERR_OOM, "out of memory for a linear layer's projection");
    *p = *proj;
    node->user = p;
    node->user_free = free;
    return ACTC_OK;
}

static actc_status linear_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *xt = node->inputs[0], *wt = node->inputs[1];
    actc_tensor *bt = node->n_inputs > 2 ? node->inputs[2] : NULL;
    const int M = node->iattr[IA_M], out = wt->shape[0], in = wt->shape[1];
    const float *dy = node->output->grad->data;
    const actc_projection *proj = node->user; /* the saved input is x P */
    float *dx, *dw = NULL, *db;
    actc_status st;
    /* dx is allocated after dW is done: the decoded input and dx are never
     * alive together. */
    if (!proj && (st = actc_grad_buffer(ctx, wt, &dw)) != ACTC_OK) return st;
    if ((st = actc_grad_buffer(ctx, bt, &db)) != ACTC_OK) return st;
    if (M == 0) return ACTC_OK;

    if (db) actc__bias_grad(dy, M, out, db);
    if (proj) {
        if ((st = lowrank_grad(ctx, node, wt, proj, dy, M, out)) != ACTC_OK) return st;
    } else if (dw) {
        /* x was saved because W needs a gradient (see actc_linear). */
        if (node->iattr[IA_XSLOT] < 0)
            return actc_set_error(ACTC_ERR_STATE, "linear backward: input was not saved");
        actc_tensor *xs = actc_load(ctx, node, node->iattr[IA_XSLOT]);
        if (!xs) return actc_last_status();
        /* dW[out,in] += dy^T[out,M] . x[M,in] */
        actc__sgemm(1, 0, out, in, M, 1.0f, dy, out, xs->data, in,
                    1.0f, dw, in);
        actc_tensor_release(xs);
    }
    if ((st = actc_grad_buffer(ctx, xt, &dx)) != ACTC_OK) return st;
    if (dx) {
        actc_tensor *ws = NULL;
        const float *w = wt->data;
        if (node->iattr[IA_WSLOT] >= 0) {
            ws = actc_load(ctx, node, node->iattr[IA_WSLOT]);
            if (!ws) return actc_last_status();
            w = ws->data;
        }
        if (!w) return actc_set_error(ACTC_ERR_STATE, "linear backward: the weight's data was freed");
        /* dx[M,in] += dy[M,out] . W[out,in] */
        actc__sgemm(0, 0, M, in, out, 1.0f, dy, out, w, in,
                    1.0f, dx, in);
        actc_tensor_release(ws);
    }
    return ACTC_OK;
}

actc_tensor *actc_linear(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b)
{
    char xs[64], wss[64], bs[64];
    OP_CHECK(ctx && x && w, "linear: NULL %s", !ctx ? "context" : !x ? "input" : "weight");
    OP_CHECK(x->data && w->data && (!b || b->data), "linear: a tensor without data (released?)");
    actc_shape_str(x, xs, sizeof xs);
    actc_shape_str(w, wss, sizeof wss);
    OP_CHECK(w->ndim == 2, "linear: weight must be 2-D [out,in], got %s", wss);
    OP_CHECK(w->shape[0] >= 1 && w->shape[1] >= 1, "linear: empty weight %s", wss);
    OP_CHECK(x->ndim >= 1 && x->shape[x->ndim - 1] == w->shape[1],
             "linear: input %s must end in %d (the weight %s is [out,in])", xs, w->shape[1], wss);
    OP_CHECK(!b || (b->ndim == 1 && b->shape[0] == w->shape[0]),
             "linear: bias %s must be [%d] for weight %s", actc_shape_str(b, bs, sizeof bs),
             w->shape[0], wss);
    const int out = w->shape[0], in = w->shape[1];
    const size_t Mz = x->numel / (size_t)in;
    OP_CHECK(Mz <= (size_t)INT_MAX, "linear: input %s has too many rows", xs);
    const int M = (int)Mz;

    int yshape[ACTC_MAX_DIMS];
    memcpy(yshape, x->shape, sizeof yshape);
    yshape[x->ndim - 1] = out;
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, yshape);
    if (!y) return NULL;
    if (M > 0) {
        /* Start y from the bias rows so the product accumulates onto them:
         * one pass over y instead of a second one after the sgemm. */
        if (b) actc__repeat_row(y->data, b->data, (size_t)M, (size_t)out);
        actc__sgemm(0, 1, M, out, in, 1.0f, x->data, in, w->data,
                    in, b ? 1.0f : 0.0f, y->data, out);
    }

    actc_tensor *inp[3] = {x, w, b};
    actc_node *node;
    if (!actc__op_record(ctx, "linear", linear_backward, y, b ? 3 : 2, inp, &node)) return NULL;
    if (node) {
        node->iattr[IA_M] = M;
        /* dW = x^T dy is linear in the saved input.  Only a parameter can
         * hold a low-rank gradient, so only then is a projection offered. */
        actc_save_role xr = actc__role(ACTC_ROLE_LINEAR_IN, 1);
        xr.fan_in = in;
        xr.transforms = w->is_param && w->requires_grad ? ACTC_XFORM_PROJECT : ACTC_XFORM_NONE;
        actc_transform done;
        actc_status st = actc__save_product_inputs(ctx, node, x, w, &xr, &node->iattr[IA_XSLOT],
                                                   &node->iattr[IA_WSLOT], &done);
        if (st == ACTC_OK && done.kind == ACTC_XFORM_PROJECT) st = keep_projection(node, &done.proj);
        if (st != ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
    }
    return y;
}
