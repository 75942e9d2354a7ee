/* The tape: nodes recorded in forward order, run in reverse by actc_backward.
 * A node references its input and output tensors' structs (for gradient
 * routing) but not their data: what backward needs lives in the store. */
#include "autograd.h"
#include "../grad/grad.h"
#include "../core/core.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

actc_status actc_node_new(actc_ctx *ctx, const char *op, actc_backward_fn bw, actc_tensor *y, int n,
                          actc_tensor *const *in, actc_node **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_node_new: NULL out pointer");
    *out = NULL;
    if (!ctx || !op || !y || (n > 0 && !in))
        return actc_set_error(ACTC_ERR_INVALID, "actc_node_new: NULL %s",
                              !ctx ? "context" : !op ? "operator name" : !y ? "output" : "input array");
    if (n < 0 || n > ACTC_NODE_MAX_INPUTS)
        return actc_set_error(ACTC_ERR_INVALID, "operator %s: %d inputs (at most %d)", op, n,
                              ACTC_NODE_MAX_INPUTS);
    if (!actc_ctx_recording(ctx)) {
        /* A segment's first forward records nothing, but its node must know
         * which parameters the recompute will add to (gradient-complete
         * events wait for them). */
        if (ctx->training && ctx->collect) return actc__collect_params(ctx, n, in);
        return ACTC_OK;
    }
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
    y->producer_ = node; /* the latest: an in-place operator's node follows */
    y->requires_grad = 1;
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->is_param) in[i]->grad_uses_++;
    node->index_ = ctx->n_nodes;
    memcpy(node->scope_, ctx->scope, sizeof node->scope_); /* same size, NUL-terminated */
    ctx->nodes[ctx->n_nodes++] = node;
    *out = node;
    actc__profile_record(ctx, op);
    return ACTC_OK;
}

actc_status actc_grad_buffer(actc_ctx *ctx, actc_tensor *t, float **out)
{
    (void)ctx;
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_grad_buffer: NULL out pointer");
    *out = NULL;
    if (!t || !t->requires_grad) return ACTC_OK;
    if (!t->grad) {
        t->grad = actc_tensor_zeros(t->is_param ? ACTC_MEM_GRAD : ACTC_MEM_ACT, t->ndim, t->shape);
        if (!t->grad) {
            /* The allocator's message names the category and the size; say
             * whose gradient it was (copied: the message is rewritten). */
            char why[512], what[64];
            snprintf(why, sizeof why, "%s", actc_last_error());
            if (t->name[0]) snprintf(what, sizeof what, "'%s'", t->name);
            else actc_shape_str(t, what, sizeof what);
            return actc_set_error(actc_last_status(), "gradient of %s: %s", what, why);
        }
    }
    *out = t->grad->data;
    return ACTC_OK;
}

actc_status actc_grad_adopt(actc_ctx *ctx, actc_tensor *t, actc_tensor *g)
{
    (void)ctx;
    if (!g) return ACTC_OK;
    if (!t || !t->requires_grad) {
        actc_tensor_release(g);
        return ACTC_OK;
    }
    if (!actc_same_shape(t, g) || !actc__tensor_sole_owner(g)) { /* a loaded view's data is the save's */
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
    float *dst = t->grad->data; /* t has a gradient already: add into it */
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

/* The node will add to its parameters' gradients no more: count the uses
 * down and, when fire is set (backward ran it), raise the gradient-complete
 * event of each parameter no other node still uses.  Once per node. */
static actc_status release_uses(actc_ctx *ctx, actc_node *node, int fire)
{
    if (node->uses_released_) return ACTC_OK;
    node->uses_released_ = 1;
    actc_status s = ACTC_OK;
    const int n = node->n_inputs + node->n_held_;
    for (int i = 0; i < n; i++) {
        actc_tensor *t = i < node->n_inputs ? node->inputs[i] : node->held_[i - node->n_inputs];
        if (!t || !t->is_param || t->grad_uses_ <= 0) continue;
        if (--t->grad_uses_ == 0 && fire && s == ACTC_OK) {
            s = actc__grad_complete(t, ctx->seed, actc__stream_step(ctx)); /* into its form */
            if (s == ACTC_OK && ctx->on_grad) s = ctx->on_grad(ctx, t, ctx->on_grad_user);
        }
    }
    return s;
}

actc_status actc__collect_params(actc_ctx *ctx, int n, actc_tensor *const *in)
{
    actc_param_list *l = ctx->collect;
    for (int i = 0; i < n; i++) {
        actc_tensor *t = in[i];
        if (!t || !t->is_param) continue;
        int seen = 0;
        for (int k = 0; k < l->n && !seen; k++) seen = l->t[k] == t;
        if (seen) continue;
        if (l->n == l->cap) {
            int cap = l->cap ? 2 * l->cap : 16;
            actc_tensor **nt = realloc(l->t, (size_t)cap * sizeof *nt);
            if (!nt) return actc_set_error(ACTC_ERR_OOM, "out of memory recording a segment's parameters");
            l->t = nt;
            l->cap = cap;
        }
        l->t[l->n++] = t;
    }
    return ACTC_OK;
}

void actc__node_hold_params(actc_node *node, actc_tensor **params, int n)
{
    node->held_ = params;
    node->n_held_ = n;
    for (int i = 0; i < n; i++) params[i]->grad_uses_++;
}

static void node_free(actc_node *node)
{
    free(node->held_);
    for (int i = 0; i < node->n_inputs; i++)
        if (node->inputs[i]) actc__tensor_tape_unref(node->inputs[i]);
    /* Cleared, not restored to an earlier producer: that one may belong to
     * another context's tape and die first.  (Within a tape the newer node
     * of a tensor is an in-place write, which a truncation only removes in a
     * rerun's backward, on the rerun's own tensors.) */
    if (node->output->producer_ == node) node->output->producer_ = NULL;
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
        release_uses(ctx, node, 0);
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
    ctx->no_record = ctx->replaying = ctx->in_backward = ctx->exact_saves = 0;
    if (ctx->occ) memset(ctx->occ, 0, ctx->occ_cap * sizeof *ctx->occ);
    actc__profile_reset(ctx);
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
            double child = 0, t0 = actc__profile_enter(ctx, &child);
            actc_status s = node->backward(ctx, node);
            actc__profile_leave(ctx, node->op, t0, child);
            if (s != ACTC_OK) return s;
        }
        /* Saves never loaded (no gradient reached this node) are dropped now,
         * and the output's gradient has been consumed. */
        actc__store_release_node(ctx, node);
        if (!out->is_param) actc_tensor_drop_grad(out);
        actc_status s = release_uses(ctx, node, 1);
        if (s != ACTC_OK) return s;
    }
    return ACTC_OK;
}

actc_status actc_backward(actc_ctx *ctx, actc_tensor *loss) { return actc_backward_scaled(ctx, loss, 1.0f); }

void actc_ctx_on_grad_complete(actc_ctx *ctx, actc_grad_ready_fn fn, void *user)
{
    ctx->on_grad = fn;
    ctx->on_grad_user = user;
}

/* Checks common to every backward: what it runs from is on a tape. */
static actc_status check_backward(const actc_ctx *ctx, const actc_tensor *y)
{
    if (ctx->counting)
        return actc_set_error(ACTC_ERR_STATE, "backward on a counting context (actc_ctx_set_counting): it kept "
                                              "nothing to run backward from");
    if (!y->requires_grad || ctx->n_nodes == 0)
        return actc_set_error(ACTC_ERR_STATE, "backward without a recorded tape (eval mode, or a loss "
                                              "that depends on no parameter)");
    return ACTC_OK;
}

/* The tape backwards from the gradient seeded in its output, the policy's
 * after-backward work, and the context cleared for the next forward. */
static actc_status run_backward(actc_ctx *ctx)
{
    actc__store_backward_begins(ctx);
    ctx->in_backward = 1;
    actc_status s = actc__backward_nodes(ctx, 0);
    if (s == ACTC_OK && ctx->policy && !ctx->policy->frozen) {
        if (ctx->policy->after_backward) s = ctx->policy->after_backward(ctx->policy, ctx);
        actc_policy *learner = actc__policy_learner(ctx->policy);
        if (s == ACTC_OK && learner && learner->measure->replan) s = learner->measure->replan(learner);
    }
    return s;
}

/* Every backward ends here, failed or not. */
static actc_status backward_done(actc_ctx *ctx, actc_status s)
{
    actc_ctx_reset(ctx);
    if (s == ACTC_OK) actc_ctx_set_step(ctx, ctx->step + 1);
    return s;
}

actc_status actc_backward_scaled(actc_ctx *ctx, actc_tensor *loss, float scale)
{
    actc_status s = ACTC_OK;
    if (!loss || loss->numel != 1) {
        s = actc_set_error(ACTC_ERR_INVALID, "backward needs a scalar loss");
        goto done;
    }
    if (!isfinite(scale)) {
        s = actc_set_error(ACTC_ERR_INVALID, "backward: the loss scale %g is not finite", (double)scale);
        goto done;
    }
    if ((s = check_backward(ctx, loss)) != ACTC_OK) goto done;
    if (loss->data && !isfinite(loss->data[0])) {
        s = actc_set_error(ACTC_ERR_NUMERIC, "the loss is %s at step %llu; lower the learning rate "
                                             "or check the data",
                           isnan(loss->data[0]) ? "NaN" : "infinite", (unsigned long long)ctx->step);
        goto done;
    }
    float *g;
    if ((s = actc_grad_buffer(ctx, loss, &g)) != ACTC_OK) goto done;
    g[0] += scale;
    s = run_backward(ctx);
done:
    return backward_done(ctx, s);
}

actc_status actc_backward_from(actc_ctx *ctx, actc_tensor *y, const actc_tensor *dy)
{
    actc_status s = ACTC_OK;
    if (!ctx) return actc_set_error(ACTC_ERR_INVALID, "actc_backward_from: NULL context");
    if (!y || !dy || !dy->data || !actc_same_shape(y, dy)) {
        char a[64] = "(null)", b[64] = "(null)";
        if (y) actc_shape_str(y, a, sizeof a);
        if (dy) actc_shape_str(dy, b, sizeof b);
        s = actc_set_error(ACTC_ERR_INVALID, "actc_backward_from: a gradient of shape %s for an output of shape %s",
                           b, a);
        goto done;
    }
    if ((s = check_backward(ctx, y)) != ACTC_OK) goto done;
    float *g;
    if ((s = actc_grad_buffer(ctx, y, &g)) != ACTC_OK) goto done;
    for (size_t i = 0; i < y->numel; i++) g[i] += dy->data[i];
    s = run_backward(ctx);
done:
    return backward_done(ctx, s);
}
