/* Frames: a micro-batch's tape parked off its context while other
 * micro-batches run forward (pipeline schedules), and put back for its
 * backward.  The store is shared: a frame's saves stay where they are,
 * their nodes' slots still index them, and a reset with frames parked
 * frees only entries no node holds (store.c). */
#include "autograd.h"
#include <stdlib.h>
#include <string.h>

/* Move the tape and its keys between the context and a frame. */
static void take(actc_frame *to, actc_ctx *from)
{
    to->nodes = from->nodes;
    to->n_nodes = from->n_nodes;
    to->cap_nodes = from->cap_nodes;
    to->occ = from->occ;
    to->occ_cap = from->occ_cap;
    to->occ_used = from->occ_used;
    to->step = from->step;
    to->key_counter = from->key_counter;
    to->substep = from->substep;
}

static void give(actc_ctx *to, const actc_frame *from)
{
    to->nodes = from->nodes;
    to->n_nodes = from->n_nodes;
    to->cap_nodes = from->cap_nodes;
    to->occ = from->occ;
    to->occ_cap = from->occ_cap;
    to->occ_used = from->occ_used;
    to->step = from->step;
    to->key_counter = from->key_counter;
    to->substep = from->substep;
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
    take(f, ctx);
    /* The context starts a tape of its own, with the same position. */
    actc_frame fresh = {.step = f->step, .substep = f->substep};
    give(ctx, &fresh);
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
    give(ctx, f);
    ctx->parked--;
    free(f);
    return ACTC_OK;
}

void actc_frame_drop(actc_ctx *ctx, actc_frame *f)
{
    if (!ctx || !f) return;
    /* Its tape in place of the context's for the time of a truncation. */
    actc_frame mine;
    take(&mine, ctx);
    give(ctx, f);
    actc__tape_truncate(ctx, 0);
    free(ctx->nodes);
    free(ctx->occ);
    give(ctx, &mine);
    ctx->parked--;
    free(f);
    actc__store_clear(ctx); /* the store's array once nothing is held */
}
