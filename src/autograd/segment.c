/* Segment checkpointing: a block's forward runs without a tape, only its
 * input is saved (through the store, so the policy compresses it), and the
 * block is recomputed and differentiated when backward reaches it.  The
 * recompute records onto the end of the tape and is run backwards at once
 * (actc__backward_nodes), so its saves live only while this segment is being
 * differentiated: the peak is the segment inputs plus one segment's context. */
#include "autograd.h"
#include "../core/core.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    actc_segment_fn fn;
    void *user;
    uint64_t key_counter; /* random keys drawn before the segment: rewound on recompute */
} segment_state;

static actc_status segment_backward(actc_ctx *ctx, actc_node *node)
{
    const segment_state *sg = node->user;
    actc_tensor *x = actc_load(ctx, node, 0);
    if (!x) return actc_last_status();
    x->requires_grad = 1;
    /* A tape reference keeps x's struct (its gradient) alive once its data
     * is released below. */
    actc__tensor_tape_ref(x);
    const int lo = ctx->n_nodes;

    /* Recompute in the scope and random stream the forward had. */
    char scope[sizeof ctx->scope];
    memcpy(scope, ctx->scope, sizeof scope);
    memcpy(ctx->scope, node->scope_, sizeof ctx->scope);
    const int depth = ctx->scope_depth;
    const uint64_t keys = ctx->key_counter;
    ctx->key_counter = sg->key_counter;
    ctx->replaying = 1;
    actc_tensor *y = sg->fn(ctx, x, sg->user);
    ctx->replaying = 0;
    ctx->key_counter = keys;
    memcpy(ctx->scope, scope, sizeof scope);
    ctx->scope_depth = depth;
    /* The recomputed operators saved what their backward needs: the decoded
     * input and, once its gradient is handed over, the output are dead
     * weight during the segment's backward (two activations at the peak). */
    actc_tensor_release(x);

    actc_status s = y ? ACTC_OK : actc_last_status();
    if (y && y->requires_grad && ctx->n_nodes > lo) {
        s = actc_grad_adopt(ctx, y, actc_grad_take(node));
        actc_tensor_release(y);
        y = NULL;
        if (s == ACTC_OK) s = actc__backward_nodes(ctx, lo);
    }
    actc_tensor_release(y);
    actc__tape_truncate(ctx, lo);
    if (s == ACTC_OK && x->grad) {
        actc_tensor *gx = x->grad;
        x->grad = NULL;
        s = actc_grad_adopt(ctx, node->inputs[0], gx);
    }
    actc_tensor_drop_grad(x);
    actc__tensor_tape_unref(x);
    return s;
}

actc_tensor *actc_segment(actc_ctx *ctx, actc_segment_fn fn, void *user, actc_tensor *x)
{
    if (!ctx || !fn || !x || !x->data) {
        actc_set_error(ACTC_ERR_INVALID, "actc_segment: NULL context, function or input");
        return NULL;
    }
    /* Nothing to checkpoint: eval mode, inside another segment's first
     * forward, or an input without gradient (its parameters then record as
     * usual inside fn). */
    if (!ctx->training || ctx->no_record || !x->requires_grad) return fn(ctx, x, user);
    segment_state *sg = malloc(sizeof *sg);
    if (!sg) {
        actc_set_error(ACTC_ERR_OOM, "out of memory for a segment");
        return NULL;
    }
    *sg = (segment_state){fn, user, ctx->key_counter};
    /* Our reference keeps x intact: in-place (_take) operators in fn see a
     * shared tensor and write elsewhere. */
    actc_tensor_retain(x);
    /* The parameters fn uses: the node holds their gradients open until the
     * segment is differentiated (gradient-complete events wait for it). */
    actc_param_list used = {0};
    ctx->collect = &used;
    ctx->no_record = 1;
    actc_tensor *y = fn(ctx, x, user);
    ctx->no_record = 0;
    ctx->collect = NULL;
    actc_node *node = NULL;
    if (y && y != x) {
        if (actc_node_new(ctx, "segment", segment_backward, y, 1, &x, &node) != ACTC_OK) {
            actc_tensor_release(y); /* its error stands */
            y = NULL;
        } else if (node) {
            node->user = sg;
            node->user_free = free;
            sg = NULL;
            actc__node_hold_params(node, used.t, used.n);
            used.t = NULL;
            /* The region is recomputed from x: not linear in it. */
            static const actc_save_role r = {.role = ACTC_ROLE_SEGMENT_IN};
            if (actc_save_as(ctx, node, x, ACTC_SAVE_ACT, &r) != ACTC_OK) {
                actc_tensor_release(y);
                y = NULL;
            }
        }
    }
    free(used.t);
    free(sg);
    actc_tensor_release(x);
    return y;
}
