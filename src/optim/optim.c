/* Optimizer dispatch, state tensors and the step counter (see optim.h).
 *
 * A step is all-or-nothing: every gradient is checked (shape, presence) and
 * every missing state tensor is allocated before the first parameter changes,
 * so an error (a wrong-shaped gradient, the memory budget) leaves the
 * parameters and the state exactly as they were. */
#include "optim.h"
#include "../core/core.h"
#include "../grad/grad.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

actc_optim *actc__optim_new(const actc_optim_vt *vt, actc_tensor **params, int n, int nslots)
{
    if (nslots > ACTC_OPTIM_MAX_SLOTS) {
        actc_set_error(ACTC_ERR_INVALID, "%s: %d state arrays per parameter, over %d", vt->name, nslots,
                       ACTC_OPTIM_MAX_SLOTS);
        return NULL;
    }
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

/* The shape parameter i's state takes: the parameter's, or for a low-rank
 * gradient its factor's (the moments live in the subspace). */
static const actc_tensor *state_shape(const actc_optim *o, int i)
{
    const actc_tensor *f = actc__grad_factor(o->params[i], NULL);
    return f ? f : o->params[i];
}

/* Create the missing state tensors of parameter i (zeros, category OPTIM,
 * named "<param>.<optimizer>.<slot>" for messages and inspection), shaped
 * for the form of its gradient. */
static actc_status ensure_state(actc_optim *o, int i)
{
    for (int k = 0; k < o->nslots; k++) {
        actc_tensor **slot = &o->state[(size_t)i * o->nslots + k];
        const actc_tensor *p = o->params[i], *like = state_shape(o, i);
        /* Before the first step the state is zeros whatever its shape (made
         * early by actc_optim_state, say): it takes the gradient's. */
        if (*slot && o->steps == 0 && actc__grad_present(p) && !actc_same_shape(*slot, like)) {
            actc_tensor_release(*slot);
            *slot = NULL;
        }
        if (*slot) continue;
        actc_tensor *t = actc_tensor_zeros(ACTC_MEM_OPTIM, like->ndim, like->shape);
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

actc_status actc__optim_state_like(const actc_optim *o, int k, int ndim, const int *shape, actc_tensor **out)
{
    *out = NULL;
    if (!o || k < 0 || k >= o->n * o->nslots || ndim < 1 || ndim > ACTC_MAX_DIMS)
        return actc_set_error(ACTC_ERR_INVALID, "optimizer state %d: no such state or a bad shape", k);
    const actc_tensor *p = o->params[k / o->nslots];
    int ok = o->steps == 0 && ndim == p->ndim && shape[ndim - 1] >= 1 && shape[ndim - 1] <= p->shape[ndim - 1];
    for (int d = 0; ok && d < ndim - 1; d++) ok = shape[d] == p->shape[d];
    if (!ok) {
        char a[64];
        return actc_set_error(ACTC_ERR_INVALID, "%s state of %s cannot take that shape (the parameter is %s%s)",
                              o->vt->name, p->name[0] ? p->name : "a parameter", actc_shape_str(p, a, sizeof a),
                              o->steps ? ", and the optimizer has stepped" : "");
    }
    actc_tensor *t = actc_tensor_zeros(ACTC_MEM_OPTIM, ndim, shape);
    if (!t) return actc_last_status();
    if (o->state[k]) memcpy(t->name, o->state[k]->name, sizeof t->name);
    *out = t;
    return ACTC_OK;
}

void actc__optim_state_install(actc_optim *o, int k, actc_tensor *t)
{
    actc_tensor_release(o->state[k]);
    o->state[k] = t;
}

void actc__optim_state_bytes(const actc_optim *o, size_t *held, size_t *dense)
{
    *held = *dense = 0;
    for (int k = 0; o && k < o->n * o->nslots; k++) {
        if (!o->state[k]) continue;
        *held += o->state[k]->numel * sizeof(float);
        *dense += o->params[k / o->nslots]->numel * sizeof(float);
    }
}

uint64_t actc_optim_steps(const actc_optim *o) { return o ? o->steps : 0; }
void actc_optim_set_steps(actc_optim *o, uint64_t steps)
{
    if (o) o->steps = steps;
}

/* Check parameter i's gradient against the parameter and its state; *need
 * gets the floats of scratch its update takes (0 on the dense path). */
static actc_status check_param(const actc_optim *o, int i, size_t *need)
{
    const actc_tensor *p = o->params[i];
    const actc_tensor *g = p->grad;
    *need = 0;
    if (!p->data)
        return actc_set_error(ACTC_ERR_STATE, "%s: parameter %d (%s) has no data", o->vt->name, i, p->name);
    char a[64], b[64];
    switch (actc__grad_form(p)) {
    case ACTC_GRAD_QUANT:
        /* A dense gradient next to the encoded sum: a backward that failed
         * before its fold, or one added after it; neither is a gradient. */
        if (g)
            return actc_set_error(ACTC_ERR_STATE, "%s: %s holds an encoded gradient and a dense one not folded into it",
                                  o->vt->name, p->name[0] ? p->name : "a parameter");
        *need = p->numel; /* decoded into scratch */
        break;
    case ACTC_GRAD_LOWRANK: {
        actc_projection pr;
        const actc_tensor *f = actc__grad_factor(p, &pr);
        if (!o->vt->direction)
            return actc_set_error(ACTC_ERR_INVALID, "%s cannot step the low-rank gradient of %s", o->vt->name,
                                  p->name[0] ? p->name : "a parameter");
        /* the direction, then P (n x rank) for the step back */
        *need = f->numel + (size_t)pr.n * (size_t)pr.rank;
        break;
    }
    default:
        if (g && (!g->data || g->numel != p->numel))
            return actc_set_error(ACTC_ERR_INVALID, "%s: gradient of parameter %d (%s) has shape %s, the parameter %s",
                                  o->vt->name, i, p->name[0] ? p->name : "unnamed", actc_shape_str(g, a, sizeof a),
                                  actc_shape_str(p, b, sizeof b));
    }
    /* State made for another form of gradient (a subspace's moments, then
     * a dense gradient) does not fit this one once it has stepped (before,
     * it is zeros and ensure_state remakes it). */
    const actc_tensor *like = state_shape(o, i);
    for (int k = 0; o->steps && actc__grad_present(p) && k < o->nslots; k++) {
        const actc_tensor *st = o->state[(size_t)i * o->nslots + k];
        if (st && !actc_same_shape(st, like))
            return actc_set_error(ACTC_ERR_STATE, "%s: state of %s is %s but its %s gradient needs %s", o->vt->name,
                                  p->name[0] ? p->name : "a parameter", actc_shape_str(st, a, sizeof a),
                                  actc__grad_form(p) == ACTC_GRAD_LOWRANK ? "low-rank" : "dense",
                                  actc_shape_str(like, b, sizeof b));
    }
    return ACTC_OK;
}

/* A low-rank gradient F (rows x rank) standing for F P^T: the optimizer's
 * direction d is computed in the subspace, from F and the subspace state,
 * and the parameter steps back into its own space, p -= lr scale d P^T
 * (scale: the projection's, CompAct's alpha), after a decoupled decay
 * (p *= 1 - lr wd, for SGD too, whose dense step couples it: adding wd p P
 * to F would cost one more product of the weight per step).
 * When the projection asks for it, the state starts afresh with each new
 * projection (age 0) and the bias correction counts from there. */
static void step_lowrank(const actc_optim *o, actc_tensor *p, float *const *st, float lr, uint64_t step,
                         float *scratch)
{
    actc_projection pr;
    const actc_tensor *f = actc__grad_factor(p, &pr);
    float *d = scratch, *P = scratch + f->numel;
    if (pr.reset_state) {
        if (pr.age == 0)
            for (int k = 0; k < o->nslots; k++) memset(st[k], 0, f->numel * sizeof(float));
        if ((uint64_t)pr.age + 1 < step) step = (uint64_t)pr.age + 1;
    }
    o->vt->direction(o, f->data, st, d, f->numel, step);
    const float decay = (float)(1.0 - (double)lr * (double)o->weight_decay);
    if (decay != 1.0f)
        for (size_t j = 0; j < p->numel; j++) p->data[j] *= decay;
    actc__projection_fill(&pr, P);
    const float alpha = pr.scale > 0.0f ? pr.scale : 1.0f;
    actc__sgemm(0, 1, (int)(f->numel / (size_t)pr.rank), pr.n, pr.rank, -lr * alpha, d, pr.rank, P, pr.rank, 1.0f,
                p->data, pr.n);
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
    size_t scratch_n = 0;
    for (int i = 0; i < o->n; i++) {
        size_t need;
        actc_status s = check_param(o, i, &need);
        if (s != ACTC_OK) return s;
        if (need > scratch_n) scratch_n = need;
    }
    for (int i = 0; i < o->n; i++) {
        if (!actc__grad_present(o->params[i])) continue;
        actc_status s = ensure_state(o, i);
        if (s != ACTC_OK) return s;
    }
    /* One scratch buffer for every non-dense gradient, taken before the
     * first parameter changes (a step is all-or-nothing). */
    float *scratch = NULL;
    if (scratch_n && !(scratch = actc_mem_alloc(ACTC_MEM_SCRATCH, scratch_n * sizeof *scratch)))
        return actc_last_status();
    uint64_t step = o->steps + 1;
    for (int i = 0; i < o->n; i++) {
        actc_tensor *p = o->params[i];
        /* The state as plain arrays, in the gradient's shape (made above). */
        float *st[ACTC_OPTIM_MAX_SLOTS] = {NULL};
        for (int k = 0; k < o->nslots && actc__grad_present(p); k++) st[k] = o->state[(size_t)i * o->nslots + k]->data;
        switch (actc__grad_form(p)) {
        case ACTC_GRAD_LOWRANK: step_lowrank(o, p, st, lr, step, scratch); break;
        case ACTC_GRAD_QUANT:
            /* The dense update on the gradient decoded into scratch. */
            actc_grad_to_dense(p, scratch); /* cannot fail for this form */
            o->vt->update(o, p->data, scratch, st, p->numel, lr, step);
            break;
        default:
            if (!p->grad) continue; /* as PyTorch: no gradient, no update, no decay */
            o->vt->update(o, p->data, p->grad->data, st, p->numel, lr, step);
        }
        /* Every form writes p in place.  The store copies a parameter's
         * saves, but an optimizer may be handed any tensor, and a save that
         * holds one by reference must see the change. */
        actc_tensor_mark_changed(p);
    }
    actc_mem_free(scratch);
    o->steps = step;
    return ACTC_OK;
}

actc_status actc__grad_norm_sq(actc_tensor **params, int n, const uint8_t *skip, double *sq)
{
    *sq = 0.0;
    for (int i = 0; i < n; i++) {
        double one = 0.0;
        if (!params[i] || (skip && skip[i])) continue;
        actc_status s = actc__grad_sum_sq(params[i], &one);
        if (s != ACTC_OK) return s;
        *sq += one;
    }
    return ACTC_OK;
}

actc_status actc__clip_to_norm(actc_tensor **params, int n, float max_norm, double sq, float *norm_out)
{
    const double norm = sqrt(sq);
    if (norm_out) *norm_out = (float)norm;
    if (!isfinite(norm))
        return actc_set_error(ACTC_ERR_NUMERIC,
                              "the gradients' norm is %s: lower the learning rate (or check the data); nothing "
                              "was scaled", isnan(norm) ? "NaN" : "infinite");
    if (norm <= max_norm) return ACTC_OK;
    const float scale = (float)(max_norm / (norm + 1e-6));
    for (int i = 0; i < n; i++)
        if (params[i]) actc__grad_scale(params[i], scale);
    return ACTC_OK;
}

actc_status actc_clip_grad_norm(actc_tensor **params, int n, float max_norm, float *norm_out)
{
    if (norm_out) *norm_out = 0.0f;
    if (!(max_norm > 0.0f) || !isfinite(max_norm))
        return actc_set_error(ACTC_ERR_INVALID, "actc_clip_grad_norm: max_norm %g must be positive and finite",
                              (double)max_norm);
    double sq;
    actc_status s = actc__grad_norm_sq(params, n, NULL, &sq);
    return s == ACTC_OK ? actc__clip_to_norm(params, n, max_norm, sq, norm_out) : s;
}
