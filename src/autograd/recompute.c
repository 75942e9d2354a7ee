/* Forward work rerun in backward instead of kept: segments and
 * input-recompute regions.  Both run their function without a tape in
 * forward, record one node that saves only the inputs (through the store, so
 * the policy compresses them), and in backward rerun the function with a
 * tape from the decoded inputs and differentiate it at once
 * (actc__backward_nodes), so the rerun's saves live only while this node is
 * being differentiated.
 *
 *  segment (actc_segment, GACT's checkpointed blocks): the function is a
 *    whole block; the rerun's saves go through the policy.  A model marks
 *    its blocks with actc_region (or actc_region_take, for a block that
 *    consumes its input: a residual added in place) and the plan of
 *    ACTC_REGION_BLOCK decides; the model never asks which policy runs.
 *  region (actc_region_n, AGoQ's norm and activation rule): the function is
 *    cheap (a normalisation, a gated activation) and its output feeds layers
 *    that would save it.  A later ACT save of that output stores a reference
 *    instead of a payload (store.c, finding the region through the
 *    tensor's producer) and loading it reruns the function without a tape
 *    (the node's rerun_, region_value here), so the consumers stay outside and
 *    no product is computed twice.  The backward rerun saves exactly: those
 *    saves live only there, and re-quantizing them would add error AGoQ's
 *    scheme does not have. */
#include "autograd.h"
#include "../core/core.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    actc_region_fn fn;
    void *user;
    uint64_t key_counter; /* random keys drawn before the node: rewound on reruns */
    int region;           /* 1: an input-recompute region, 0: a segment */
    /* a one-input function and its argument (actc_segment, actc_region),
     * called through fn = call_segment; seg_takes: it takes its input
     * (actc_region_take), else it borrows it */
    actc_segment_fn seg_fn;
    void *seg_user;
    int seg_takes;
    int block;            /* recorded inside one of the model's blocks
                             (ACTC_REGION_BLOCK): its reruns' saves are too */
} rerun_state;

static actc_status rerun_backward(actc_ctx *ctx, actc_node *node);

/* A one-input function that borrows x (or takes a reference of its own),
 * called as a region's (which owns x). */
static actc_tensor *call_segment(actc_ctx *ctx, int n, actc_tensor *const *x, void *user)
{
    (void)n;
    const rerun_state *st = user;
    actc_tensor *y = st->seg_fn(ctx, st->seg_takes ? actc_tensor_retain(x[0]) : x[0], st->seg_user);
    actc_tensor_release(x[0]);
    return y;
}

/* Rerun node's function on x (it takes the references) in the scope and
 * random stream the forward had (dropout draws the same masks;
 * actc_ctx_replaying() is 1). */
static actc_tensor *rerun(actc_ctx *ctx, const actc_node *node, actc_tensor *const *x)
{
    const rerun_state *st = node->user;
    char scope[sizeof ctx->scope];
    memcpy(scope, ctx->scope, sizeof scope);
    const int depth = ctx->scope_depth, replaying = ctx->replaying;
    const uint64_t keys = ctx->key_counter;
    memcpy(ctx->scope, node->scope_, sizeof ctx->scope);
    ctx->key_counter = st->key_counter;
    ctx->replaying = 1;
    ctx->blocks += st->block; /* its saves are planned as the forward's were */
    actc_tensor *y = st->fn(ctx, node->n_inputs, x, st->user);
    ctx->blocks -= st->block;
    ctx->replaying = replaying;
    ctx->key_counter = keys;
    memcpy(ctx->scope, scope, sizeof scope);
    ctx->scope_depth = depth;
    return y;
}

/* The output of region node, rerun without a tape from its decoded inputs
 * (their saves stay in the store): a region node's rerun_, called by the
 * store to load a save of the output. */
static actc_tensor *region_value(actc_ctx *ctx, actc_node *region)
{
    actc_tensor *x[ACTC_NODE_MAX_INPUTS] = {0};
    const int n = region->n_inputs;
    for (int i = 0; i < n; i++) {
        if (!(x[i] = actc__store_peek(ctx, region, i))) {
            for (int j = 0; j < i; j++) actc_tensor_release(x[j]);
            return NULL;
        }
    }
    const int no_record = ctx->no_record;
    ctx->no_record = 1;
    actc_tensor *y = rerun(ctx, region, x);
    ctx->no_record = no_record;
    return y;
}

static actc_status rerun_backward(actc_ctx *ctx, actc_node *node)
{
    const rerun_state *st = node->user;
    const int n = node->n_inputs;
    actc_tensor *x[ACTC_NODE_MAX_INPUTS] = {0};
    actc_status s = ACTC_OK;
    int loaded = 0;
    for (; loaded < n; loaded++) {
        actc_tensor *xi = actc_load(ctx, node, loaded);
        if (!xi) break;
        xi->requires_grad = node->inputs[loaded]->requires_grad;
        /* A tape reference keeps x's struct (its gradient) alive once its
         * data is released below. */
        actc__tensor_tape_ref(xi);
        x[loaded] = xi;
    }
    actc_tensor *y = NULL;
    const int lo = ctx->n_nodes;
    if (loaded < n) {
        s = actc_last_status();
        for (int i = 0; i < loaded; i++) actc_tensor_release(x[i]);
    } else {
        /* The function takes the decoded inputs: the rerun operators saved
         * what their backward needs, and the inputs and, once its gradient
         * is handed over, the output are dead weight during this backward
         * (two activations at the peak); the tape references keep the
         * inputs' structs for their gradients. */
        const int exact = ctx->exact_saves;
        ctx->exact_saves = st->region;
        y = rerun(ctx, node, x);
        ctx->exact_saves = exact;
        s = y ? ACTC_OK : actc_last_status();
    }
    if (y && y->requires_grad && ctx->n_nodes > lo) {
        s = actc_grad_adopt(ctx, y, actc_grad_take(node));
        actc_tensor_release(y);
        y = NULL;
        if (s == ACTC_OK) s = actc__backward_nodes(ctx, lo);
    }
    actc_tensor_release(y);
    actc__tape_truncate(ctx, lo);
    for (int i = 0; i < loaded; i++) {
        if (s == ACTC_OK && x[i]->grad) {
            actc_tensor *gx = x[i]->grad;
            x[i]->grad = NULL;
            s = actc_grad_adopt(ctx, node->inputs[i], gx);
        }
        actc_tensor_drop_grad(x[i]);
        actc__tensor_tape_unref(x[i]);
    }
    return s;
}

/* Run st's function on x without a tape, then record the node that saves x
 * with role (or return the function's result alone when nothing records).
 * The function takes one reference to each input: the caller's (take) or
 * one made here. */
static actc_tensor *record(actc_ctx *ctx, rerun_state *st, const char *op, actc_role role, int n,
                           actc_tensor *const *x, int take)
{
    rerun_state *own = malloc(sizeof *own);
    if (!own) {
        actc_set_error(ACTC_ERR_OOM, "out of memory for a %s", op);
        for (int i = 0; take && i < n; i++) actc_tensor_release(x[i]);
        return NULL;
    }
    *own = *st;
    own->key_counter = ctx->key_counter;
    own->block = ctx->blocks > 0;
    if (own->seg_fn) own->user = own; /* call_segment reads seg_fn from here */
    /* Our references keep the inputs intact until they are saved: in-place
     * (_take) operators in the function see shared tensors and write
     * elsewhere. */
    for (int i = 0; i < n; i++) {
        actc_tensor_retain(x[i]);
        if (!take) actc_tensor_retain(x[i]);
    }
    /* The parameters the function uses: the node holds their gradients open
     * until it is differentiated (gradient-complete events wait for it). */
    actc_param_list used = {0};
    ctx->collect = &used;
    ctx->no_record = 1;
    actc_tensor *y = own->fn(ctx, n, x, own->user);
    ctx->no_record = 0;
    ctx->collect = NULL;
    int is_input = 0;
    for (int i = 0; y && i < n; i++) is_input |= y == x[i];
    actc_node *node = NULL;
    if (y && !is_input) {
        if (actc_node_new(ctx, op, rerun_backward, y, n, (actc_tensor **)x, &node) != ACTC_OK) {
            actc_tensor_release(y); /* its error stands */
            y = NULL;
        } else if (node) {
            node->user = own;
            node->user_free = free;
            own = NULL;
            actc__node_hold_params(node, used.t, used.n);
            used.t = NULL;
            if (st->region) node->rerun_ = region_value;
            const actc_save_role r = {.role = role};
            for (int i = 0; y && i < n; i++) {
                if (actc_save_as(ctx, node, x[i], ACTC_SAVE_ACT, &r) != ACTC_OK) {
                    actc_tensor_release(y);
                    y = NULL;
                }
            }
        }
    }
    free(used.t);
    free(own);
    for (int i = 0; i < n; i++) actc_tensor_release(x[i]);
    return y;
}

/* A segment of fn on x (borrowed); takes: fn takes a reference of its own
 * to x (actc_region_take's functions), else it borrows x. */
static actc_tensor *segment(actc_ctx *ctx, actc_segment_fn fn, void *user, actc_tensor *x, int takes)
{
    if (!ctx || !fn || !x || !x->data) {
        actc_set_error(ACTC_ERR_INVALID, "actc_segment: NULL context, function or input");
        return NULL;
    }
    /* Nothing to checkpoint: eval mode, inside another segment's first
     * forward, or an input without gradient (its parameters then record as
     * usual inside fn). */
    if (!ctx->training || ctx->no_record || !x->requires_grad)
        return fn(ctx, takes ? actc_tensor_retain(x) : x, user);
    rerun_state st = {call_segment, NULL, 0, 0, fn, user, takes, 0};
    /* The segment is recomputed from x: not linear in it. */
    return record(ctx, &st, "segment", ACTC_ROLE_SEGMENT_IN, 1, &x, 0);
}

actc_tensor *actc_segment(actc_ctx *ctx, actc_segment_fn fn, void *user, actc_tensor *x)
{
    return segment(ctx, fn, user, x, 0);
}

/* A region of kind r running st's function on x[0..n), whose references it
 * takes (on failure too). */
static actc_tensor *region(actc_ctx *ctx, actc_region_kind r, rerun_state *st, int n, actc_tensor *const *x)
{
    int grad = 0, ok = ctx && x && n >= 1 && n <= ACTC_NODE_MAX_INPUTS;
    if (!ok)
        actc_set_error(ACTC_ERR_INVALID, "actc_region_n: NULL context or inputs, or %d inputs (1..%d)", n,
                       ACTC_NODE_MAX_INPUTS);
    else if (r != ACTC_REGION_NORM && r != ACTC_REGION_ACT)
        ok = 0, actc_set_error(ACTC_ERR_INVALID,
                               "actc_region_n: region kind %d is not an input-recompute kind (NORM, ACT)", (int)r);
    for (int i = 0; ok && i < n; i++) {
        if (!x[i] || !x[i]->data)
            ok = 0, actc_set_error(ACTC_ERR_INVALID, "actc_region_n: input %d is NULL or has no data", i);
        else
            grad |= x[i]->requires_grad;
    }
    if (!ok) {
        for (int i = 0; x && i < n && i < ACTC_NODE_MAX_INPUTS; i++) actc_tensor_release(x[i]);
        return NULL;
    }
    if (actc_ctx_plan_region(ctx, r) != ACTC_PLAN_RECOMPUTE || !ctx->training || ctx->no_record || !grad) {
        rerun_state direct = *st;
        if (direct.seg_fn) direct.user = &direct;
        return direct.fn(ctx, n, x, direct.user);
    }
    return record(ctx, st, "recompute", r == ACTC_REGION_NORM ? ACTC_ROLE_NORM_IN : ACTC_ROLE_ACT_IN, n, x, 1);
}

actc_tensor *actc_region_n(actc_ctx *ctx, actc_region_kind r, actc_region_fn fn, void *user, int n,
                           actc_tensor *const *x)
{
    rerun_state st = {fn, user, 0, 1, NULL, NULL, 0, 0};
    if (!fn) {
        actc_set_error(ACTC_ERR_INVALID, "actc_region_n: NULL function");
        for (int i = 0; x && i < n && i < ACTC_NODE_MAX_INPUTS; i++) actc_tensor_release(x[i]);
        return NULL;
    }
    return region(ctx, r, &st, n, x);
}

/* A one-input region of kind NORM or ACT on x (borrowed), as segment. */
static actc_tensor *region_one(actc_ctx *ctx, actc_region_kind r, actc_segment_fn fn, void *user, actc_tensor *x,
                               int takes)
{
    rerun_state st = {call_segment, NULL, 0, 1, fn, user, takes, 0};
    actc_tensor_retain(x); /* the caller keeps x; the region takes a reference */
    return region(ctx, r, &st, 1, &x);
}

/* fn on x (borrowed) as a region of kind r, the plan permitting. */
static actc_tensor *planned(actc_ctx *ctx, actc_region_kind r, actc_segment_fn fn, void *user, actc_tensor *x,
                            int takes)
{
    if (r != ACTC_REGION_NORM && r != ACTC_REGION_ACT) return segment(ctx, fn, user, x, takes);
    return region_one(ctx, r, fn, user, x, takes);
}

actc_tensor *actc_region(actc_ctx *ctx, actc_region_kind r, actc_segment_fn fn, void *user, actc_tensor *x)
{
    if (!ctx || !fn || !x) {
        actc_set_error(ACTC_ERR_INVALID, "actc_region: NULL context, function or input");
        return NULL;
    }
    const int block = r == ACTC_REGION_BLOCK; /* its saves know it: actc_save_desc.in_block */
    ctx->blocks += block;
    actc_tensor *y = actc_ctx_plan_region(ctx, r) != ACTC_PLAN_RECOMPUTE ? fn(ctx, x, user)
                                                                        : planned(ctx, r, fn, user, x, 0);
    ctx->blocks -= block;
    return y;
}

actc_tensor *actc_region_take(actc_ctx *ctx, actc_region_kind r, actc_segment_fn fn, void *user, actc_tensor *x)
{
    if (!ctx || !fn || !x) {
        actc_set_error(ACTC_ERR_INVALID, "actc_region_take: NULL context, function or input");
        actc_tensor_release(x);
        return NULL;
    }
    const int block = r == ACTC_REGION_BLOCK;
    ctx->blocks += block;
    actc_tensor *y = NULL;
    if (actc_ctx_plan_region(ctx, r) != ACTC_PLAN_RECOMPUTE) {
        y = fn(ctx, x, user);
    } else {
        y = planned(ctx, r, fn, user, x, 1);
        actc_tensor_release(x);
    }
    ctx->blocks -= block;
    return y;
}
