/* Frames: a micro-batch's tape parked off its context while other
 * micro-batches run forward (pipeline schedules), and put back for its
 * backward.  The store is shared: a frame's saves stay where they are,
 * their nodes' slots still index them, and a reset with frames parked
 * frees only entries no node holds (store.c). */
#include "autograd.h"
#include <stdlib.h>
#include <string.h>

/* Exchange the context's tape and its keys with the frame's. */
static void swap_tape(actc_ctx *ctx, actc_frame *f)
{
    actc_frame mine = {ctx->nodes, ctx->n_nodes, ctx->cap_nodes, ctx->occ, ctx->occ_cap, ctx->occ_used,
                       ctx->step, ctx->key_counter, ctx->substep};
    ctx->nodes = f->nodes;
    ctx->n_nodes = f->n_nodes;
    ctx->cap_nodes = f->cap_nodes;
    ctx->occ = f->occ;
    ctx->occ_cap = f->occ_cap;
    ctx->occ_used = f->occ_used;
    ctx->step = f->step;
    ctx->key_counter = f->key_counter;
    ctx->substep = f->substep;
    *f = mine;
}

actc_status actc_ctx_park(actc_ctx *ctx, actc_frame **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_ctx_park: out is NULL");
    *out = NULL;
    if (!ctx) return actc_set_error(ACTC_ERR_INVALID, "actc_ctx_park: NULL context");
    if (ctx->scope_depth || ctx->no_record || ctx->replaying || ctx->in_backward || ctx->blocks)
        return actc_set_error(ACTC_ERR_STATE, "actc_ctx_park: the context is inside a %s",
                              ctx->scope_depth ? "name scope" : ctx->in_backward ? "backward pass" : "segment or block");
    actc_frame *f = calloc(1, sizeof *f);
    if (!f) return actc_set_error(ACTC_ERR_OOM, "out of memory for a frame");
    /* The context starts a tape of its own, with the same position. */
    f->step = ctx->step;
    f->substep = ctx->substep;
    swap_tape(ctx, f);
    ctx->parked++;
    *out = f;
    return ACTC_OK;
}

actc_status actc_ctx_resume(actc_ctx *ctx, actc_frame *f)
{
    if (!ctx || !f) return actc_set_error(ACTC_ERR_INVALID, "actc_ctx_resume: NULL context or frame");
    if (ctx->n_nodes)
        return actc_set_error(ACTC_ERR_STATE, "actc_ctx_resume: the context holds a tape of %d node(s) of its own "
                                              "(park it or run its backward first)",
                              ctx->n_nodes);
    free(ctx->nodes);
    free(ctx->occ);
    swap_tape(ctx, f); /* f now holds the freed ones */
    ctx->parked--;
    free(f);
    return ACTC_OK;
}

void actc_frame_drop(actc_ctx *ctx, actc_frame *f)
{
    if (!ctx || !f) return;
    /* Its tape in place of the context's for the time of a truncation. */
    swap_tape(ctx, f);
    actc__tape_truncate(ctx, 0);
    free(ctx->nodes);
    free(ctx->occ);
    swap_tape(ctx, f); /* the context's own back; f holds the freed ones */
    ctx->parked--;
    free(f);
    actc__store_clear(ctx); /* the store's array once nothing is held */
}
