/* Policies without the engine (actc.h, "Policies on caller tensors"): a
 * planner holds one policy and answers, for a save described by its layer,
 * its number within the layer, its role and its shape, the codec plan the
 * store would use, so that a binding (the PyTorch package) compresses what
 * another framework saves with the same decisions and the same bytes.  The
 * adaptive policy that learns by observing (ActNN's mixed precision) gets
 * its gradient reports and its re-plan through the planner, and the one
 * that learns by measuring passes (GACT) its mode, perturbations and commit,
 * the passes being the caller's.  A policy whose answer is not a codec (a
 * transform, a recomputed block) needs the engine: the planner refuses it,
 * saying what to use instead. */
#include "policy.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct actc_planner {
    actc_policy *policy;
    uint64_t seed;
    int measuring;        /* between measure_begin and commit or cancel     */
    uint64_t *keys;       /* the tensors of the reference pass               */
    int n_keys;
};

/* What a save is called across steps: its layer and its number there. */
static uint64_t save_key(const char *scope, int index)
{
    const uint64_t h = actc_hash_bytes(ACTC_HASH_START, scope, strlen(scope));
    return actc_rng_key(h, (uint64_t)index, 0x504C414EULL);
}

/* Why the planner cannot carry out policy p, or NULL. */
static const char *unplannable(const actc_policy *p)
{
    for (const actc_policy *q = p; q; q = q->inner)
        if (q->transform)
            return "it changes what a layer saves (a projection of the input), which a codec cannot; "
                   "in PyTorch use actc.torch.compact on the layers, with a codec policy";
    if (p->region[ACTC_REGION_BLOCK] == ACTC_PLAN_RECOMPUTE)
        return "it recomputes whole blocks in backward (segment checkpointing), which is the model's choice, "
               "not a codec's; in PyTorch use torch.utils.checkpoint with a codec policy";
    return NULL;
}

actc_status actc_planner_new(const char *policy, uint64_t seed, actc_planner **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_planner_new: NULL out");
    *out = NULL;
    if (!policy) return actc_set_error(ACTC_ERR_INVALID, "actc_planner_new: NULL policy spec");
    actc_policy *p;
    actc_status st = actc__policy_create(policy, &p);
    if (st != ACTC_OK) return st;
    const char *why = unplannable(p);
    if (why) {
        st = actc_set_error(ACTC_ERR_INVALID, "policy '%s' cannot run outside the engine: %s", p->spec, why);
        actc__policy_free(p);
        return st;
    }
    actc_planner *pl = calloc(1, sizeof *pl);
    if (!pl) {
        actc__policy_free(p);
        return actc_set_error(ACTC_ERR_OOM, "out of memory for a planner");
    }
    pl->policy = p;
    pl->seed = seed;
    *out = pl;
    return ACTC_OK;
}

void actc_planner_free(actc_planner *p)
{
    if (!p) return;
    free(p->keys);
    actc__policy_free(p->policy);
    free(p);
}

const char *actc_planner_policy(const actc_planner *p) { return p ? p->policy->spec : ""; }

int actc_planner_observes(const actc_planner *p)
{
    const actc_policy *l = p ? actc__policy_learner(p->policy) : NULL;
    return l && l->measure->observe_grad;
}

int actc_planner_measures(const actc_planner *p) { return p && actc__policy_measurer(p->policy); }

/* The query checked, and the tensor header it describes (no data copied). */
static actc_status query_tensor(const actc_save_query *q, actc_tensor *t)
{
    memset(t, 0, sizeof *t);
    if (q->ndim < 0 || q->ndim > ACTC_MAX_DIMS || (q->ndim > 0 && !q->shape))
        return actc_set_error(ACTC_ERR_INVALID, "actc_planner_plan: a shape has 0 to %d dims (got %d)",
                              ACTC_MAX_DIMS, q->ndim);
    if (q->role.role < 0 || q->role.role >= ACTC_ROLE_NROLES)
        return actc_set_error(ACTC_ERR_INVALID, "actc_planner_plan: role %d is not an actc_role", (int)q->role.role);
    if (q->role.transforms)
        return actc_set_error(ACTC_ERR_INVALID, "actc_planner_plan: a planner offers no transforms");
    t->ndim = q->ndim;
    t->numel = 1;
    for (int i = 0; i < q->ndim; i++) {
        if (q->shape[i] <= 0 || t->numel > ((size_t)1 << 40) / (size_t)q->shape[i])
            return actc_set_error(ACTC_ERR_INVALID, "actc_planner_plan: dim %d of the shape is %d", i, q->shape[i]);
        t->shape[i] = q->shape[i];
        t->numel *= (size_t)q->shape[i];
    }
    /* Read only, and only by the host: a device tensor's is NULL here. */
    t->data = (float *)q->data;
    return ACTC_OK;
}

actc_status actc_planner_plan(actc_planner *p, const actc_save_query *q, actc_codec_plan *plan,
                              uint8_t *sample_bits)
{
    if (!p || !q || !plan) return actc_set_error(ACTC_ERR_INVALID, "actc_planner_plan: NULL argument");
    memset(plan, 0, sizeof *plan);
    actc_tensor t;
    actc_status st = query_tensor(q, &t);
    if (st != ACTC_OK) return st;
    const char *scope = q->scope ? q->scope : "";
    actc_save_desc d;
    memset(&d, 0, sizeof d);
    d.op = "save";
    d.scope = scope;
    d.save_index = q->index;
    d.range_sq = q->sample_range_sq;
    d.node_index = -1;
    d.stable_key = save_key(scope, q->index);
    d.kind = ACTC_SAVE_ACT;
    d.role = &q->role;
    d.t = &t;
    d.step = q->step;
    d.seed = p->seed;
    actc_codec_args a;
    memset(&a, 0, sizeof a);
    a.ndim = t.ndim;
    memcpy(a.shape, t.shape, sizeof a.shape);
    /* The store's rule: one stream per (seed, step, save). */
    a.key = actc_rng_key(p->seed ^ 0x53544F5245ULL, q->step, d.stable_key);
    const actc_codec *codec = NULL;
    if ((st = p->policy->choose(p->policy, &d, &codec, &a)) != ACTC_OK) return st;
    if (a.sample_bits) {
        if (!sample_bits)
            return actc_set_error(ACTC_ERR_INVALID, "actc_planner_plan: policy %s chose per-sample widths and "
                                                    "sample_bits is NULL", p->policy->spec);
        const size_t n = t.ndim > 0 ? (size_t)t.shape[0] : 1;
        memcpy(sample_bits, a.sample_bits, n);
        a.sample_bits = sample_bits; /* the policy's copy changes with its next plan */
    }
    return actc__codec_plan_of(codec, &a, plan);
}

actc_status actc_planner_observe(actc_planner *p, const char *scope, const int *indices, int n, double grad_sq)
{
    if (!p || (n > 0 && !indices) || n < 0)
        return actc_set_error(ACTC_ERR_INVALID, "actc_planner_observe: NULL planner or indices");
    if (!(grad_sq >= 0))
        return actc_set_error(ACTC_ERR_INVALID, "actc_planner_observe: gradient norm %g is not a number >= 0",
                              grad_sq);
    actc_policy *l = actc__policy_learner(p->policy);
    if (!l || !l->measure->observe_grad) return ACTC_OK;
    uint64_t keys[64];
    for (int i = 0; i < n; i += 64) {
        const int m = n - i < 64 ? n - i : 64;
        for (int j = 0; j < m; j++) keys[j] = save_key(scope ? scope : "", indices[i + j]);
        l->measure->observe_grad(l, keys, m, grad_sq);
    }
    return ACTC_OK;
}

actc_status actc_planner_replan(actc_planner *p)
{
    if (!p) return actc_set_error(ACTC_ERR_INVALID, "actc_planner_replan: NULL planner");
    actc_policy *l = actc__policy_learner(p->policy);
    if (!l || !l->measure->replan) return ACTC_OK;
    return l->measure->replan(l);
}

/* ---- GACT's Algorithm 1, passes run by the caller ---- */

actc_status actc_planner_measure_begin(actc_planner *p)
{
    actc_policy *m = p ? actc__policy_measurer(p->policy) : NULL;
    if (!m) return actc_set_error(ACTC_ERR_STATE, "actc_planner_measure_begin: policy %s measures nothing",
                                  p ? p->policy->spec : "(NULL planner)");
    free(p->keys);
    p->keys = NULL;
    p->n_keys = -1; /* until the reference pass is over */
    p->measuring = 1;
    m->measure->mode(m, 1, 0, 0);
    return ACTC_OK;
}

/* The keys of the reference pass, taken once it is over. */
static actc_status reference_keys(actc_planner *p, actc_policy *m)
{
    if (p->n_keys >= 0) return ACTC_OK;
    const int n = m->measure->keys(m, NULL, 0);
    p->keys = malloc((size_t)(n ? n : 1) * sizeof *p->keys);
    if (!p->keys) return actc_set_error(ACTC_ERR_OOM, "out of memory measuring sensitivities");
    m->measure->keys(m, p->keys, n);
    p->n_keys = n;
    return ACTC_OK;
}

int actc_planner_measure_count(actc_planner *p)
{
    actc_policy *m = p && p->measuring ? actc__policy_measurer(p->policy) : NULL;
    if (!m) {
        actc_set_error(ACTC_ERR_STATE, "actc_planner_measure_count: not measuring");
        return -1;
    }
    return reference_keys(p, m) == ACTC_OK ? p->n_keys : -1;
}

actc_status actc_planner_measure_perturb(actc_planner *p, int l)
{
    actc_policy *m = p && p->measuring ? actc__policy_measurer(p->policy) : NULL;
    if (!m) return actc_set_error(ACTC_ERR_STATE, "actc_planner_measure_perturb: not measuring");
    actc_status st = reference_keys(p, m);
    if (st != ACTC_OK) return st;
    if (l < 0 || l >= p->n_keys)
        return actc_set_error(ACTC_ERR_INVALID, "actc_planner_measure_perturb: tensor %d of %d", l, p->n_keys);
    /* The controller's salts, so both measure alike. */
    m->measure->mode(m, 1, p->keys[l], 0x9E3779B97F4A7C15ULL + (uint64_t)l);
    return ACTC_OK;
}

void actc_planner_measure_cancel(actc_planner *p)
{
    actc_policy *m = p && p->measuring ? actc__policy_measurer(p->policy) : NULL;
    if (m) m->measure->mode(m, 0, 0, 0);
    if (p) p->measuring = 0;
}

actc_status actc_planner_measure_commit(actc_planner *p, const double *sq_diff, int n)
{
    actc_policy *m = p && p->measuring ? actc__policy_measurer(p->policy) : NULL;
    if (!m) return actc_set_error(ACTC_ERR_STATE, "actc_planner_measure_commit: not measuring");
    actc_status st = reference_keys(p, m);
    if (st == ACTC_OK && (n != p->n_keys || (n && !sq_diff)))
        st = actc_set_error(ACTC_ERR_INVALID, "actc_planner_measure_commit: %d differences for %d tensors", n,
                            p->n_keys);
    double *c = st == ACTC_OK ? malloc((size_t)(n ? n : 1) * sizeof *c) : NULL;
    if (st == ACTC_OK && !c) st = actc_set_error(ACTC_ERR_OOM, "out of memory measuring sensitivities");
    const double S = m->measure->unit_variance(m);
    for (int l = 0; st == ACTC_OK && l < n; l++) {
        if (!(sq_diff[l] >= 0) || !isfinite(sq_diff[l]))
            st = actc_set_error(ACTC_ERR_NUMERIC, "actc_planner_measure_commit: difference %d is %g", l, sq_diff[l]);
        else
            c[l] = 0.5 * sq_diff[l] / S;
    }
    actc_planner_measure_cancel(p);
    if (st == ACTC_OK) st = m->measure->commit(m, p->keys, c, n);
    free(c);
    return st;
}
