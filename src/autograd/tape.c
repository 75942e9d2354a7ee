/* The tape: nodes recorded in forward order, run in reverse by actc_backward.
 * A node references its input and output tensors' structs (for gradient
 * routing) but not their data: what backward needs lives in the store. */
#include "autograd.h"
#include "../core/core.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

actc_status actc_node_new2(actc_ctx *ctx, const char *op, actc_backward_fn bw, actc_tensor *y,
                           int n, actc_tensor *const *in, actc_node **out)
{
    *out = NULL;
    if (!actc_ctx_recording(ctx)) return ACTC_OK;
    if (n < 0 || n > ACTC_NODE_MAX_INPUTS)
        return actc_set_error(ACTC_ERR_INVALID, "operator %s: %d inputs (at most %d)", op, n,
                              ACTC_NODE_MAX_INPUTS);
    int any = 0;
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->requires_grad) any = 1;
    if (!any) return ACTC_OK;
    if (ctx->n_nodes == ctx->cap_nodes) {
        int cap = ctx->cap_nodes ? 2 * ctx->cap_nodes : 256;
        actc_node **nn = realloc(ctx->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return actc_set_error(ACTC_ERR_OOM, "out of memory growing the tape");
        ctx->nodes = nn;
        ctx->cap_nodes = cap;
    }
    actc_node *node = calloc(1, sizeof *node);
    if (!node) return actc_set_error(ACTC_ERR_OOM, "out of memory for a tape node");
    node->op = op;
    node->backward = bw;
    node->n_inputs = n;
    for (int i = 0; i < n; i++) {
        node->inputs[i] = in[i];
        if (in[i]) actc__tensor_tape_ref(in[i]);
    }
    node->output = y;
    actc__tensor_tape_ref(y);
    y->requires_grad = 1;
    node->index_ = ctx->n_nodes;
    memcpy(node->scope_, ctx->scope, sizeof node->scope_); /* same size, NUL-terminated */
    ctx->nodes[ctx->n_nodes++] = node;
    *out = node;
    return ACTC_OK;
}

actc_node *actc_node_new(actc_ctx *ctx, const char *op, actc_backward_fn bw, actc_tensor *y, int n,
                         actc_tensor *const *in)
{
    actc_node *node;
    if (actc_node_new2(ctx, op, bw, y, n, in, &node) != ACTC_OK) return NULL;
    return node;
}

float *actc_grad_of(actc_ctx *ctx, actc_tensor *t)
{
    (void)ctx;
    if (!t || !t->requires_grad) return NULL;
    if (!t->grad) {
        t->grad = actc_tensor_zeros(t->is_param ? ACTC_MEM_GRAD : ACTC_MEM_ACT, t->ndim, t->shape);
        if (!t->grad) return NULL;
    }
    return t->grad->data;
}

actc_status actc_grad_adopt(actc_ctx *ctx, actc_tensor *t, actc_tensor *g)
{
    if (!g) return ACTC_OK;
    if (!t || !t->requires_grad) {
        actc_tensor_release(g);
        return ACTC_OK;
    }
    if (!actc_same_shape(t, g) || g->refs_ != 1) {
        char st[64], sg[64];
        actc_shape_str(g, sg, sizeof sg); /* before g goes */
        actc_shape_str(t, st, sizeof st);
        actc_tensor_release(g);
        return actc_set_error(ACTC_ERR_INVALID, "gradient of shape %s handed to a tensor of shape %s (or the "
                                                "buffer has other owners)", sg, st);
    }
    if (!t->grad) {
        /* The buffer becomes the gradient: same bytes, gradient's category. */
        actc_mem_cat cat = t->is_param ? ACTC_MEM_GRAD : ACTC_MEM_ACT;
        actc_mem_retag(g->data, cat);
        g->cat = cat;
        g->requires_grad = 0;
        t->grad = g;
        return ACTC_OK;
    }
    float *dst = actc_grad_of(ctx, t);
    const float *src = g->data;
    const size_t n = g->numel;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
    actc_tensor_release(g);
    return ACTC_OK;
}

actc_tensor *actc_grad_take(actc_node *node)
{
    actc_tensor *g = node ? node->output->grad : NULL;
    if (g) node->output->grad = NULL;
    return g;
}

static void node_free(actc_node *node)
{
    for (int i = 0; i < node->n_inputs; i++)
        if (node->inputs[i]) actc__tensor_tape_unref(node->inputs[i]);
    actc__tensor_tape_unref(node->output);
    if (node->user_free) node->user_free(node->user);
    free(node);
}

void actc__tape_truncate(actc_ctx *ctx, int lo)
{
    /* Gradients of intermediates die with the tape; parameters keep theirs. */
    for (int i = ctx->n_nodes - 1; i >= lo; i--) {
        actc_node *node = ctx->nodes[i];
        if (!node->output->is_param) actc_tensor_drop_grad(node->output);
        actc__store_release_node(ctx, node); /* a recompute that did not run backward */
        node_free(node);
    }
    ctx->n_nodes = lo;
}

void actc_ctx_reset(actc_ctx *ctx)
{
    actc__tape_truncate(ctx, 0);
    actc__store_clear(ctx);
    ctx->key_counter = 0;
    ctx->occ_used = 0;
    ctx->no_record = ctx->replaying = ctx->in_backward = 0;
    if (ctx->occ) memset(ctx->occ, 0, ctx->occ_cap * sizeof *ctx->occ);
}

int actc_tape_size(const actc_ctx *ctx) { return ctx->n_nodes; }

actc_status actc__backward_nodes(actc_ctx *ctx, int lo)
{
    /* ctx->nodes may grow (a segment's recompute appends to it): index it
     * afresh each time; the nodes themselves do not move. */
    for (int i = ctx->n_nodes - 1; i >= lo; i--) {
        actc_node *node = ctx->nodes[i];
        actc_tensor *out = node->output;
        if (out->grad && node->backward) {
            actc__store_observe_grad(ctx, node);
            actc_status s = node->backward(ctx, node);
            if (s != ACTC_OK) return s;
        }
        /* Saves never loaded (no gradient reached this node) are dropped now,
         * and the output's gradient has been consumed. */
        actc__store_release_node(ctx, node);
        if (!out->is_param) actc_tensor_drop_grad(out);
    }
    return ACTC_OK;
}

actc_status actc_backward(actc_ctx *ctx, actc_tensor *loss)
{
    actc_status s = ACTC_OK;
    if (!loss || loss->numel != 1) {
        s = actc_set_error(ACTC_ERR_INVALID, "backward needs a scalar loss");
        goto done;
    }
    if (!loss->requires_grad || ctx->n_nodes == 0) {
        s = actc_set_error(ACTC_ERR_STATE, "backward without a recorded tape (eval mode, or a loss "
                                           "that depends on no parameter)");
        goto done;
    }
    if (loss->data && !isfinite(loss->data[0])) {
        s = actc_set_error(ACTC_ERR_NUMERIC, "the loss is %s at step %llu; lower the learning rate "
                                             "or check the data",
                           isnan(loss->data[0]) ? "NaN" : "infinite", (unsigned long long)ctx->step);
        goto done;
    }
    float *g = actc_grad_of(ctx, loss);
    if (!g) { s = actc_last_status(); goto done; }
    g[0] += 1.0f;
    ctx->st.forward_bytes = ctx->st.backward_peak = ctx->st.stored_bytes;
    ctx->in_backward = 1;
    s = actc__backward_nodes(ctx, 0);
    if (s != ACTC_OK) goto done;
    if (ctx->policy && ctx->policy->after_backward && !ctx->policy->frozen)
        ctx->policy->after_backward(ctx->policy, ctx);
done:
    actc_ctx_reset(ctx);
    if (s == ACTC_OK) actc_ctx_set_step(ctx, ctx->step + 1);
    return s;
}
