/* Engine context: mode, seeds, scopes and policy selection. */
#include "autograd.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

actc_ctx *actc_ctx_new(void)
{
    actc_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        actc_set_error(ACTC_ERR_OOM, "out of memory for an engine context");
        return NULL;
    }
    ctx->training = 1; /* no policy installed: the store keeps fp32 ("none") */
    memset(ctx->region_plan, ACTC_PLAN_ANY, sizeof ctx->region_plan);
    return ctx;
}

void actc_ctx_free(actc_ctx *ctx)
{
    if (!ctx) return;
    actc_ctx_reset(ctx);
    actc__store_free(ctx);
    actc__policy_free(ctx->policy);
    actc_ctx_profile_stop(ctx);
    free(ctx->nodes);
    free(ctx->occ);
    free(ctx);
}

void actc_ctx_freeze_policy(actc_ctx *ctx, int frozen)
{
    if (ctx && ctx->policy) ctx->policy->frozen = frozen != 0;
}

actc_status actc__ctx_install_policy(actc_ctx *ctx, actc_policy *p)
{
    if (ctx->n_nodes) {
        actc__policy_free(p);
        return actc_set_error(ACTC_ERR_STATE, "cannot change the compression policy while a tape is recorded");
    }
    actc__policy_free(ctx->policy);
    ctx->policy = p;
    return ACTC_OK;
}

actc_policy *actc__ctx_policy_of(const actc_ctx *ctx) { return ctx ? ctx->policy : NULL; }

void actc__policy_free(actc_policy *p)
{
    if (p && p->destroy) p->destroy(p);
}

int actc_ctx_replaying(const actc_ctx *ctx) { return ctx->replaying || ctx->sensitivity_pass; }
int actc_ctx_recording(const actc_ctx *ctx) { return ctx->training && !ctx->no_record; }
int actc_ctx_plan_region(const actc_ctx *ctx, actc_region_kind r)
{
    if (!ctx || (unsigned)r >= ACTC_REGION_NKINDS) return ACTC_PLAN_ANY;
    if (ctx->region_plan[r] != ACTC_PLAN_ANY) return ctx->region_plan[r];
    return ctx->policy ? ctx->policy->region[r] : ACTC_PLAN_ANY;
}

actc_status actc_ctx_set_region_plan(actc_ctx *ctx, actc_region_kind r, int plan)
{
    if (!ctx) return actc_set_error(ACTC_ERR_INVALID, "actc_ctx_set_region_plan: NULL context");
    if ((unsigned)r >= ACTC_REGION_NKINDS)
        return actc_set_error(ACTC_ERR_INVALID, "unknown kind of region %d", (int)r);
    if (plan != ACTC_PLAN_ANY && plan != ACTC_PLAN_SAVE && plan != ACTC_PLAN_RECOMPUTE)
        return actc_set_error(ACTC_ERR_INVALID, "unknown region plan %d (ANY -1, SAVE 0, RECOMPUTE 1)", plan);
    ctx->region_plan[r] = (signed char)plan;
    return ACTC_OK;
}

const char *actc_ctx_policy(const actc_ctx *ctx) { return ctx->policy ? ctx->policy->spec : "none"; }
void actc_ctx_set_training(actc_ctx *ctx, int training) { ctx->training = training != 0; }
int actc_ctx_training(const actc_ctx *ctx) { return ctx->training; }
void actc_ctx_set_seed(actc_ctx *ctx, uint64_t seed) { ctx->seed = seed; }
uint64_t actc_ctx_seed(const actc_ctx *ctx) { return ctx->seed; }
void actc_ctx_set_stream(actc_ctx *ctx, uint64_t stream) { ctx->stream = stream; }

actc_status actc_ctx_set_stage(actc_ctx *ctx, int held, int held_max)
{
    if (!ctx || held < 0 || held > held_max || (held == 0) != (held_max == 0))
        return actc_set_error(ACTC_ERR_INVALID, "actc_ctx_set_stage: a stage holding %d of at most %d micro-batches",
                              held, held_max);
    ctx->stage_held = held;
    ctx->stage_held_max = held_max;
    return ACTC_OK;
}

int actc_ctx_stage_bits(const actc_ctx *ctx, int held, int held_max)
{
    const actc_policy *p = ctx ? ctx->policy : NULL;
    while (p && !p->stage_bits) p = p->inner;
    return p && held > 0 && held <= held_max ? p->stage_bits(p, held, held_max) : 0;
}

void actc_ctx_set_step(actc_ctx *ctx, uint64_t step)
{
    ctx->step = step;
    ctx->key_counter = 0;
    ctx->substep = 0;
}

void actc_ctx_set_substep(actc_ctx *ctx, uint32_t k)
{
    ctx->substep = k;
    ctx->key_counter = 0;
}

uint64_t actc__stream_step(const actc_ctx *ctx)
{
    /* Micro-batch 0 keeps the step's own streams, so a run without
     * micro-batches draws exactly what it always did. */
    const uint64_t s = ctx->substep ? actc_rng_key(ctx->step, ctx->substep, 0x5355425354455053ULL) : ctx->step;
    /* Stream 0 (one process) keeps them too. */
    return ctx->stream ? actc_rng_key(s, ctx->stream, 0x52414E4BULL) : s;
}
uint64_t actc_ctx_step(const actc_ctx *ctx) { return ctx->step; }

uint64_t actc_ctx_next_key(actc_ctx *ctx)
{
    return actc_rng_key(ctx->seed, actc__stream_step(ctx), 0x4F50000000000000ULL + ctx->key_counter++);
}

actc_status actc_scope_push(actc_ctx *ctx, const char *name)
{
    if (ctx->scope_depth >= 32)
        return actc_set_error(ACTC_ERR_INVALID, "name scopes nested deeper than 32");
    size_t len = strlen(ctx->scope);
    int n = snprintf(ctx->scope + len, sizeof ctx->scope - len, "%s%s", len ? "." : "", name);
    if (n < 0 || (size_t)n >= sizeof ctx->scope - len) {
        ctx->scope[len] = '\0';
        return actc_set_error(ACTC_ERR_INVALID, "name scope too long at '%s'", name);
    }
    ctx->scope_len[ctx->scope_depth++] = (int)len;
    return ACTC_OK;
}

void actc_scope_pop(actc_ctx *ctx)
{
    if (ctx->scope_depth > 0) ctx->scope[ctx->scope_len[--ctx->scope_depth]] = '\0';
}
