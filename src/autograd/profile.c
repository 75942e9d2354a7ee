/* Per-operator time profile of a context (actc_ctx_profile_start): where a
 * training step's time goes, by the operator names the tape records.
 *
 * Operators run as plain function calls, so there is no one place that
 * wraps a forward.  What every recorded operator does pass through is
 * actc_node_new, at the end of its forward: the forward time of an operator
 * is the time since the previous record (or since the tape was last reset),
 * which also charges it with the unrecorded work before it (a view, an op
 * on inputs that need no gradient).  Backward functions are timed around
 * their call, exclusive of nested backward passes (a recompute region runs
 * its own nodes inside its backward): each nested node is charged to itself
 * and subtracted from the node that ran it. */
#include "autograd.h"
#include "../core/core.h"
#include <stdlib.h>
#include <string.h>

struct actc_profile {
    actc_op_time *ops;
    int n, cap;
    double last;   /* the previous forward record, or the reset            */
    double child;  /* time of nested backward nodes under the current one  */
    int depth;     /* backward nodes running (nested recomputes)           */
};

static actc_op_time *entry(actc_profile *p, const char *op)
{
    for (int i = 0; i < p->n; i++) /* a few dozen names: a scan is enough */
        if (p->ops[i].op == op || !strcmp(p->ops[i].op, op)) return &p->ops[i];
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 32;
        actc_op_time *o = realloc(p->ops, (size_t)cap * sizeof *o);
        if (!o) return NULL; /* the profile loses this name; training goes on */
        p->ops = o;
        p->cap = cap;
    }
    p->ops[p->n] = (actc_op_time){.op = op};
    return &p->ops[p->n++];
}

actc_status actc_ctx_profile_start(actc_ctx *ctx)
{
    if (!ctx) return actc_set_error(ACTC_ERR_INVALID, "actc_ctx_profile_start: NULL context");
    if (!ctx->prof) {
        ctx->prof = calloc(1, sizeof *ctx->prof);
        if (!ctx->prof) return actc_set_error(ACTC_ERR_OOM, "out of memory for a profile");
    }
    ctx->prof->n = 0;
    ctx->prof->last = actc__now();
    return ACTC_OK;
}

void actc_ctx_profile_stop(actc_ctx *ctx)
{
    if (!ctx || !ctx->prof) return;
    free(ctx->prof->ops);
    free(ctx->prof);
    ctx->prof = NULL;
}

static int by_total(const void *a, const void *b)
{
    const actc_op_time *x = a, *y = b;
    double tx = x->forward_s + x->backward_s, ty = y->forward_s + y->backward_s;
    return (tx < ty) - (tx > ty);
}

int actc_ctx_profile_get(const actc_ctx *ctx, actc_op_time *out, int max)
{
    if (!ctx || !ctx->prof) return 0;
    actc_profile *p = ctx->prof;
    qsort(p->ops, (size_t)p->n, sizeof *p->ops, by_total);
    for (int i = 0; i < p->n && i < max && out; i++) out[i] = p->ops[i];
    return p->n;
}

void actc__profile_record(actc_ctx *ctx, const char *op)
{
    actc_profile *p = ctx->prof;
    if (!p || p->depth) return; /* a recompute's forward is its backward node's time */
    const double t = actc__now();
    actc_op_time *e = entry(p, op);
    if (e) {
        e->forward_s += t - p->last;
        e->forward_calls++;
    }
    p->last = t;
}

void actc__profile_reset(actc_ctx *ctx)
{
    if (ctx->prof) ctx->prof->last = actc__now();
}

double actc__profile_enter(actc_ctx *ctx, double *saved_child)
{
    actc_profile *p = ctx->prof;
    if (!p) return 0;
    *saved_child = p->child;
    p->child = 0;
    p->depth++;
    return actc__now();
}

void actc__profile_leave(actc_ctx *ctx, const char *op, double t0, double saved_child)
{
    actc_profile *p = ctx->prof;
    if (!p) return;
    const double dt = actc__now() - t0;
    actc_op_time *e = entry(p, op);
    if (e) {
        e->backward_s += dt - p->child;
        e->backward_calls++;
    }
    p->child = saved_child + dt;
    p->depth--;
}
