/* Optimizer dispatch, state tensors and the step counter (see optim.h).
 *
 * A step is all-or-nothing: every gradient is checked (shape, presence) and
 * every missing state tensor is allocated before the first parameter changes,
 * so an error (a wrong-shaped gradient, the memory budget) leaves the
 * parameters and the state exactly as they were. */
#include "optim.h"
#include "../core/core.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

actc_optim *actc__optim_new(const actc_optim_vt *vt, actc_tensor **params, int n, int nslots)
{
    if (n < 0 || (n > 0 && !params)) {
        actc_set_error(ACTC_ERR_INVALID, "%s: %d parameters%s", vt->name, n,
                       n > 0 ? " but the array is NULL" : "");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!params[i] || !params[i]->data) {
            actc_set_error(ACTC_ERR_INVALID, "%s: parameter %d is NULL or has no data", vt->name, i);
            return NULL;
        }
    actc_optim *o = calloc(1, sizeof *o);
    if (!o) {
        actc_set_error(ACTC_ERR_OOM, "out of memory for an optimizer");
        return NULL;
    }
    o->vt = vt;
    o->n = n;
    o->nslots = nslots;
    /* +1: malloc(0) may return NULL, which would look like a failure. */
    o->params = malloc(((size_t)n + 1) * sizeof *o->params);
    o->state = calloc((size_t)n * (size_t)nslots + 1, sizeof *o->state);
    if (!o->params || !o->state) {
        actc_optim_free(o);
        actc_set_error(ACTC_ERR_OOM, "out of memory for an optimizer over %d parameters", n);
        return NULL;
    }
    if (n) memcpy(o->params, params, (size_t)n * sizeof *params);
    return o;
}

void actc_optim_free(actc_optim *o)
{
    if (!o) return;
    if (o->state)
        for (int i = 0; i < o->n * o->nslots; i++) actc_tensor_release(o->state[i]);
    free(o->state);
    free(o->params);
    free(o);
}

const char *actc_optim_name(const actc_optim *o) { return o ? o->vt->name : ""; }

/* Create the missing state tensors of parameter i (zeros, category OPTIM,
 * named "<param>.<optimizer>.<slot>" for messages and inspection). */
static actc_status ensure_state(actc_optim *o, int i)
{
    for (int k = 0; k < o->nslots; k++) {
        actc_tensor **slot = &o->state[(size_t)i * o->nslots + k];
        if (*slot) continue;
        const actc_tensor *p = o->params[i];
        actc_tensor *t = actc_tensor_zeros(ACTC_MEM_OPTIM, p->ndim, p->shape);
        if (!t) return actc_last_status();
        snprintf(t->name, sizeof t->name, "%.36s.%s%d", p->name[0] ? p->name : "param",
                 o->vt->name, k);
        *slot = t;
    }
    return ACTC_OK;
}

actc_status actc_optim_init_state(actc_optim *o)
{
    if (!o) return actc_set_error(ACTC_ERR_INVALID, "actc_optim_init_state: optimizer is NULL");
    for (int i = 0; i < o->n; i++) {
        actc_status s = ensure_state(o, i);
        if (s != ACTC_OK) return s;
    }
    return ACTC_OK;
}

/* The array is the optimizer's own (param-major, slot-minor): stable across
 * calls, so a checkpoint written by one process loads in another.  All state
 * is created first, so the count does not depend on which parameters have
 * had gradients yet.  Returns -1 (error set) if that allocation fails. */
int actc_optim_state(actc_optim *o, actc_tensor ***out)
{
    if (!o) {
        actc_set_error(ACTC_ERR_INVALID, "actc_optim_state: optimizer is NULL");
        return -1;
    }
    if (actc_optim_init_state(o) != ACTC_OK) return -1;
    if (out) *out = o->state;
    return o->n * o->nslots;
}

uint64_t actc_optim_steps(const actc_optim *o) { return o ? o->steps : 0; }
void actc_optim_set_steps(actc_optim *o, uint64_t steps)
{
    if (o) o->steps = steps;
}

actc_status actc_optim_step(actc_optim *o, float lr)
{
    if (!o) return actc_set_error(ACTC_ERR_INVALID, "actc_optim_step: optimizer is NULL");
    if (!isfinite(lr))
        return actc_set_error(ACTC_ERR_NUMERIC, "%s: learning rate %g is not finite", o->vt->name,
                              (double)lr);
    if (lr < 0.0f)
        return actc_set_error(ACTC_ERR_INVALID, "%s: learning rate %g is negative", o->vt->name,
                              (double)lr);
    for (int i = 0; i < o->n; i++) {
        const actc_tensor *p = o->params[i];
        const actc_tensor *g = p->grad;
        if (!p->data)
            return actc_set_error(ACTC_ERR_STATE, "%s: parameter %d (%s) has no data", o->vt->name,
                                  i, p->name);
        if (!g) continue;
        if (!g->data || g->numel != p->numel) {
            char a[64], b[64];
            return actc_set_error(ACTC_ERR_INVALID,
                                  "%s: gradient of parameter %d (%s) has shape %s, the parameter %s",
                                  o->vt->name, i, p->name[0] ? p->name : "unnamed",
                                  actc_shape_str(g, a, sizeof a), actc_shape_str(p, b, sizeof b));
        }
    }
    for (int i = 0; i < o->n; i++) {
        if (!o->params[i]->grad) continue;
        actc_status s = ensure_state(o, i);
        if (s != ACTC_OK) return s;
    }
    uint64_t step = o->steps + 1;
    for (int i = 0; i < o->n; i++) {
        actc_tensor *p = o->params[i];
        if (!p->grad) continue; /* as PyTorch: no gradient, no update, no decay */
        o->vt->update(o, p, o->nslots ? &o->state[(size_t)i * o->nslots] : NULL, lr, step);
    }
    o->steps = step;
    return ACTC_OK;
}

actc_status actc_clip_grad_norm(actc_tensor **params, int n, float max_norm, float *norm_out)
{
    if (norm_out) *norm_out = 0.0f;
    if (!(max_norm > 0.0f) || !isfinite(max_norm))
        return actc_set_error(ACTC_ERR_INVALID, "actc_clip_grad_norm: max_norm %g must be positive and finite",
                              (double)max_norm);
    double sq = 0.0;
    for (int i = 0; i < n; i++) {
        const actc_tensor *g = params[i] ? params[i]->grad : NULL;
        if (!g || !g->data) continue;
        sq += actc__sum_sq_diff(g->data, NULL, g->numel);
    }
    const double norm = sqrt(sq);
    if (norm_out) *norm_out = (float)norm;
    if (!isfinite(norm))
        return actc_set_error(ACTC_ERR_NUMERIC,
                              "the gradients' norm is %s: lower the learning rate (or check the data); nothing "
                              "was scaled", isnan(norm) ? "NaN" : "infinite");
    if (norm <= max_norm) return ACTC_OK;
    const float scale = (float)(max_norm / (norm + 1e-6));
    for (int i = 0; i < n; i++) {
        actc_tensor *g = params[i] ? params[i]->grad : NULL;
        if (!g || !g->data) continue;
        float *d = g->data;
#pragma omp parallel for simd schedule(static) if (g->numel > 65536)
        for (size_t j = 0; j < g->numel; j++) d[j] *= scale;
    }
    return ACTC_OK;
}
