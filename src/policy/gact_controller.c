/* GACT's controller (paper sections 4.2 and 5.1): measures each saved
 * tensor's sensitivity with Algorithm 1, re-allocates bits, and keeps the
 * running gradient variance behind the variance alert.
 *
 * Algorithm 1 here: one reference pass g_0 and, per tensor l, one pass g_l
 * with only l's rounding stream re-keyed; every tensor at GACT_EST_BITS in
 * all of them, every pass on the same batch (a sub-batch of estimate_samples)
 * and the same step number, so dropout masks and every other stream repeat.
 * c_l = ||g_0 - g_l||^2 / 2 / S(GACT_EST_BITS): the difference of two
 * independent roundings of tensor l has twice the variance one adds.  The
 * passes run with the context's sensitivity_pass flag up, so batch norm does
 * not move its running statistics L + 1 more times.
 *
 * The compression variance is measured on the sub-batch; a batch-mean
 * gradient's variance falls as 1/batch, so the alert compares V(b) * n_est /
 * n_batch with the overall variance: an exponential moving average of
 * ||g_t - m_{t-1}||^2 with m the moving average of the gradients (the paper's
 * "running mean of the gradient"). */
#include "policy.h"
#include "../grad/grad.h"
#include "../autograd/autograd.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VAR_EMA 0.9      /* weight of the past in the running moments      */
#define WARMUP_HALVINGS 4 /* extra measurements in the first interval: / 2 ... / 16 */
#define WARMUP_MIN 16     /* ... each at least this many iterations in        */
#define VAR_MIN_STEPS 10 /* gradients seen before the alert is judged      */

struct actc_controller {
    actc_ctx *ctx;
    actc_tensor **params;
    int n_params;
    size_t P;                 /* parameter elements                        */
    actc_controller_opts o;
    uint64_t iter;
    float *mean;              /* running mean gradient (adaptive policies) */
    double overall;           /* running E||g - mean||^2; < 0 unknown      */
    int seen;                 /* gradients in the running moments          */
    double comp;              /* V(b) on the whole batch at the last adaptation */
    double comp_sub;          /* the same on the sub-batch                 */
    int est_n;                /* samples of the sensitivity passes         */
    int adapted, alert_due, alert_ready;
    char alert[512];
    /* Pipeline stages (actc_controller_set_stages): each holds part of the
     * model's tensors; the passes run on all of them together. */
    int stage, stages;
    actc_status (*sum)(double *v, int n, void *user);
    void *sum_user;
};

actc_controller_opts actc_controller_default_opts(void) { return (actc_controller_opts){1000, 8, 0.5}; }

actc_status actc__controller_check_opts(const actc_controller_opts *o)
{
    if (o->adapt_interval < 1 || o->estimate_samples < 0 || !(o->alert_fraction > 0) || !isfinite(o->alert_fraction))
        return actc_set_error(ACTC_ERR_INVALID, "controller options: adapt_interval %llu (>= 1), estimate_samples %d "
                                                "(>= 0), alert_fraction %g (> 0, finite)",
                              (unsigned long long)o->adapt_interval, o->estimate_samples, o->alert_fraction);
    return ACTC_OK;
}

actc_controller *actc_controller_new(actc_ctx *ctx, actc_tensor **params, int n, const actc_controller_opts *o)
{
    actc_controller_opts d = o ? *o : actc_controller_default_opts();
    if (!ctx || n < 0 || (n && !params)) {
        actc_set_error(ACTC_ERR_INVALID, "actc_controller_new: NULL context or parameters");
        return NULL;
    }
    if (actc__controller_check_opts(&d) != ACTC_OK) return NULL;
    actc_controller *c = calloc(1, sizeof *c);
    actc_tensor **pp = calloc((size_t)n + 1, sizeof *pp);
    if (!c || !pp) {
        free(c);
        free(pp);
        actc_set_error(ACTC_ERR_OOM, "out of memory for a controller");
        return NULL;
    }
    if (n) memcpy(pp, params, (size_t)n * sizeof *pp);
    for (int i = 0; i < n; i++) c->P += params[i]->numel;
    c->ctx = ctx;
    c->params = pp;
    c->n_params = n;
    c->o = d;
    c->overall = -1;
    return c;
}

void actc_controller_free(actc_controller *c)
{
    if (!c) return;
    actc_mem_free(c->mean);
    free(c->params);
    free(c);
}

/* Drop the gradients (freed, not zeroed: they are not held through the
 * forward pass), rewind the step, run fn; a failed fn leaves no tape. */
static actc_status pass(actc_controller *c, actc_fwdbwd_fn fn, void *user, uint64_t step, int max_samples,
                        int *samples)
{
    for (int i = 0; i < c->n_params; i++) actc_tensor_drop_grad(c->params[i]);
    actc_ctx_set_step(c->ctx, step);
    *samples = 0;
    actc_status s = fn(c->ctx, user, max_samples, samples);
    if (s != ACTC_OK) actc_ctx_reset(c->ctx);
    return s;
}

/* Parameter p's gradient as dense values: its own buffer when dense, else
 * decoded (low-rank F P^T, or an encoded sum) into scratch (p->numel
 * floats); NULL when it has none. */
static const float *grad_values(const actc_tensor *p, float *scratch, actc_status *s)
{
    if (!actc__grad_present(p)) return NULL;
    if (actc__grad_form(p) == ACTC_GRAD_DENSE) return p->grad->data;
    *s = actc_grad_to_dense(p, scratch);
    return *s == ACTC_OK ? scratch : NULL;
}

/* A scratch buffer for the largest parameter whose gradient is not dense
 * (NULL with ACTC_OK when every one is). */
static actc_status form_scratch(const actc_controller *c, float **out)
{
    size_t n = 0;
    *out = NULL;
    for (int i = 0; i < c->n_params; i++)
        if (actc__grad_form(c->params[i]) != ACTC_GRAD_DENSE && c->params[i]->numel > n) n = c->params[i]->numel;
    if (n && !(*out = actc_mem_alloc(ACTC_MEM_SCRATCH, n * sizeof **out))) return actc_last_status();
    return ACTC_OK;
}

/* *d = sum over parameters of (grad - ref)^2 (then, with mean set, ref
 * moves towards the gradients as a running mean), or copy the gradients
 * into ref when copy is set; missing gradients count as zeros. */
static actc_status grad_diff(const actc_controller *c, float *ref, int copy, int mean, double *d)
{
    float *scratch;
    actc_status s = form_scratch(c, &scratch);
    if (d) *d = 0;
    size_t off = 0;
    for (int i = 0; s == ACTC_OK && i < c->n_params; i++) {
        const actc_tensor *p = c->params[i];
        const float *g = grad_values(p, scratch, &s);
        float *r = ref + off;
        const size_t n = p->numel;
        if (copy) {
            if (g) memcpy(r, g, n * sizeof *r);
            else memset(r, 0, n * sizeof *r);
        } else {
            *d += actc__sum_sq_diff(g, r, n);
            if (mean)
                for (size_t j = 0; j < n; j++) r[j] = (float)(VAR_EMA * r[j] + (1 - VAR_EMA) * (g ? g[j] : 0.0f));
        }
        off += n;
    }
    actc_mem_free(scratch);
    return s;
}


actc_status actc_controller_set_stages(actc_controller *c, int stage, int stages,
                                       actc_status (*sum)(double *v, int n, void *user), void *user)
{
    if (!c || stages < 1 || stage < 0 || stage >= stages || (stages > 1 && !sum))
        return actc_set_error(ACTC_ERR_INVALID, "actc_controller_set_stages: stage %d of %d%s", stage, stages,
                              sum ? "" : " without a sum");
    c->stage = stage;
    c->stages = stages;
    c->sum = sum;
    c->sum_user = user;
    return ACTC_OK;
}

/* v summed over the stages (nothing alone). */
static actc_status stage_sum(const actc_controller *c, double *v, int n)
{
    return c->stages > 1 ? c->sum(v, n, c->sum_user) : ACTC_OK;
}

/* Where this stage's L tensors begin among every stage's (*first) and how
 * many there are in all (*total): the passes perturb them in stage order. */
static actc_status stage_tensors(const actc_controller *c, int L, int *first, int *total)
{
    *first = 0;
    *total = L;
    if (c->stages <= 1) return ACTC_OK;
    double *v = calloc((size_t)c->stages, sizeof *v);
    if (!v) return actc_set_error(ACTC_ERR_OOM, "out of memory measuring sensitivities");
    v[c->stage] = L;
    actc_status s = stage_sum(c, v, c->stages);
    *total = 0;
    for (int i = 0; s == ACTC_OK && i < c->stages; i++) {
        if (i == c->stage) *first = *total;
        *total += (int)v[i];
    }
    free(v);
    return s;
}

/* Algorithm 1 through the measuring policy m's hooks, then its commit.
 * Across pipeline stages every stage runs every pass: pass j perturbs the
 * j-th tensor of them all (its own stage's), and the gradients' change is
 * summed over the stages. */
static actc_status estimate(actc_controller *c, actc_policy *m, actc_fwdbwd_fn fn, void *user)
{
    const actc_policy_measure *h = m->measure;
    const uint64_t step = actc_ctx_step(c->ctx);
    float *g0 = actc_mem_alloc(ACTC_MEM_SCRATCH, (c->P ? c->P : 1) * sizeof *g0);
    uint64_t *keys = NULL;
    double *cl = NULL;
    if (!g0) return actc_last_status();
    c->ctx->sensitivity_pass = 1;
    h->mode(m, 1, 0, 0);
    int n = 0, L = 0, first = 0, total = 0;
    actc_status s = pass(c, fn, user, step, c->o.estimate_samples, &n);
    if (s == ACTC_OK) s = grad_diff(c, g0, 1, 0, NULL);
    if (s == ACTC_OK) {
        L = h->keys(m, NULL, 0);
        keys = malloc((size_t)(L ? L : 1) * sizeof *keys);
        cl = malloc((size_t)(L ? L : 1) * sizeof *cl);
        if (!keys || !cl) s = actc_set_error(ACTC_ERR_OOM, "out of memory measuring sensitivities");
        else h->keys(m, keys, L);
        if (s == ACTC_OK) s = stage_tensors(c, L, &first, &total);
        const double S = h->unit_variance(m);
        for (int j = 0; s == ACTC_OK && j < total; j++) {
            const int l = j - first, mine = l >= 0 && l < L;
            h->mode(m, 1, mine ? keys[l] : 0, 0x9E3779B97F4A7C15ULL + (uint64_t)j);
            int nl = 0;
            s = pass(c, fn, user, step, c->o.estimate_samples, &nl);
            double d = 0;
            if (s == ACTC_OK) s = grad_diff(c, g0, 0, 0, &d);
            if (s == ACTC_OK) s = stage_sum(c, &d, 1);
            if (s == ACTC_OK && mine) cl[l] = 0.5 * d / S;
        }
    }
    h->mode(m, 0, 0, 0);
    c->ctx->sensitivity_pass = 0;
    actc_ctx_set_step(c->ctx, step);
    /* Committed only when every pass succeeded: no table of mixed ages. */
    if (s == ACTC_OK) s = h->commit(m, keys, cl, L);
    free(keys);
    free(cl);
    actc_mem_free(g0);
    if (s != ACTC_OK) return s;
    c->est_n = n;
    c->comp_sub = h->variance(m);
    if ((s = stage_sum(c, &c->comp_sub, 1)) != ACTC_OK) return s; /* every stage's tensors' */
    c->adapted = 1;
    c->alert_due = 1;
    return ACTC_OK;
}

/* Running moments of the full-batch gradient, then the alert once due. */
static actc_status track_variance(actc_controller *c, int n_batch)
{
    actc_status s;
    c->comp = c->est_n > 0 && n_batch > 0 ? c->comp_sub * c->est_n / n_batch : c->comp_sub;
    if (!c->mean) {
        c->mean = actc_mem_alloc(ACTC_MEM_OPTIM, (c->P ? c->P : 1) * sizeof *c->mean);
        if (!c->mean) return actc_last_status();
        if ((s = grad_diff(c, c->mean, 1, 0, NULL)) == ACTC_OK) c->seen = 1;
        return s;
    }
    double d = 0;
    if ((s = grad_diff(c, c->mean, 0, 1, &d)) == ACTC_OK) s = stage_sum(c, &d, 1);
    if (s != ACTC_OK) {
        /* A failure part-way (no memory to build a projection) leaves the
         * mean half-moved: start it again rather than keep it. */
        actc_mem_free(c->mean);
        c->mean = NULL;
        c->seen = 0;
        return s;
    }
    c->overall = c->overall < 0 ? d : VAR_EMA * c->overall + (1 - VAR_EMA) * d;
    c->seen++;
    if (c->alert_due && c->seen > VAR_MIN_STEPS) {
        c->alert_due = 0;
        if (c->comp > c->o.alert_fraction * c->overall) {
            snprintf(c->alert, sizeof c->alert,
                     "compression variance %.4g is %.0f%% of the overall gradient variance %.4g (alert above "
                     "%.0f%%): compression adds too much noise to the gradient; raise the bit budget (policy %s)",
                     c->comp, 100.0 * c->comp / c->overall, c->overall, 100.0 * c->o.alert_fraction,
                     actc_ctx_policy(c->ctx));
            c->alert_ready = 1;
        }
    }
    return ACTC_OK;
}

actc_status actc_controller_iterate(actc_controller *c, actc_fwdbwd_fn fn, void *user)
{
    if (!c || !fn) return actc_set_error(ACTC_ERR_INVALID, "actc_controller_iterate: NULL controller or function");
    /* A frozen policy (actc_ctx_freeze_policy) is measured no more: the pass
     * runs with the bits it has and leaves the controller's state alone. */
    actc_policy *m = c->ctx->policy && c->ctx->policy->frozen ? NULL : actc__policy_measurer(c->ctx->policy);
    const uint64_t step = actc_ctx_step(c->ctx);
    c->adapted = 0;
    actc_status s = ACTC_OK;
    if (!m && c->ctx->policy && c->ctx->policy->frozen) {
        int n = 0;
        return pass(c, fn, user, step, 0, &n);
    }
    if (m && actc_controller_measure_due(c->iter, c->o.adapt_interval) && (s = estimate(c, m, fn, user)) != ACTC_OK)
        return s;
    int n = 0;
    if ((s = pass(c, fn, user, step, 0, &n)) != ACTC_OK) return s;
    c->iter++;
    return m ? track_variance(c, n) : ACTC_OK;
}

/* GACT measures every adapt_interval iterations; the halvings of the first
 * interval follow the sensitivities while they move fastest (a run from
 * scratch), for WARMUP_HALVINGS measurements in the whole run. */
int actc_controller_measure_due(uint64_t iter, uint64_t adapt_interval)
{
    if (!adapt_interval) return 0;
    if (iter % adapt_interval == 0) return 1;
    for (int k = 1; k <= WARMUP_HALVINGS; k++)
        if ((adapt_interval >> k) >= WARMUP_MIN && iter == adapt_interval >> k) return 1;
    return 0;
}

int actc_controller_adapted(const actc_controller *c) { return c && c->adapted; }

int actc_ctx_policy_measures(const actc_ctx *ctx) { return ctx && actc__policy_measurer(ctx->policy) != NULL; }

/* A policy learns from what it sees if it measures (GACT) or observes
 * gradients (ActNN's adaptive levels, also under compact). */
int actc_ctx_policy_learns(const actc_ctx *ctx) { return ctx && actc__policy_learner(ctx->policy) != NULL; }

const char *actc_controller_take_alert(actc_controller *c)
{
    if (!c || !c->alert_ready) return NULL;
    c->alert_ready = 0;
    return c->alert;
}

void actc_controller_variances(const actc_controller *c, double *compression, double *overall)
{
    if (compression) *compression = c ? c->comp : 0;
    if (overall) *overall = c ? c->overall : -1;
}

int actc_controller_tensors(const actc_controller *c, actc_saved_info *out, int cap)
{
    const actc_policy *p = c ? actc__policy_find_tensors(c->ctx->policy) : NULL;
    return p ? p->tensors(p, out, cap) : 0;
}

/* Checkpoint state: the iteration count (when the next measurement is due),
 * the running gradient moments behind the alert and the alert's own state,
 * so a resumed run measures and alerts when the uninterrupted one would. */
actc_status actc__controller_save(const actc_controller *c, actc__wbuf *w)
{
    actc__w_u64(w, c->iter);
    actc__w_u64(w, (uint64_t)c->P);
    actc__w_u32(w, c->mean != NULL);
    if (c->mean) actc__w_floats(w, c->mean, c->P);
    actc__w_f64(w, c->overall);
    actc__w_u32(w, (uint32_t)c->seen);
    actc__w_f64(w, c->comp);
    actc__w_f64(w, c->comp_sub);
    actc__w_u32(w, (uint32_t)c->est_n);
    actc__w_u32(w, (uint32_t)c->alert_due);
    actc__w_u32(w, (uint32_t)c->alert_ready);
    actc__w_str(w, c->alert);
    return ACTC_OK;
}

actc_status actc__controller_load(actc_controller *c, actc__rbuf *r)
{
    const uint64_t iter = actc__r_u64(r), P = actc__r_u64(r);
    const uint32_t has_mean = actc__r_u32(r);
    if (r->bad) return actc_set_error(ACTC_ERR_FORMAT, "the controller state is truncated");
    if (P != (uint64_t)c->P)
        return actc_set_error(ACTC_ERR_INVALID, "the controller state is for %llu parameters, this model has %zu",
                              (unsigned long long)P, c->P);
    const uint8_t *mean = has_mean ? actc__r_take(r, 4 * (size_t)P) : NULL;
    const double overall = actc__r_f64(r);
    const int seen = (int)actc__r_u32(r);
    const double comp = actc__r_f64(r), comp_sub = actc__r_f64(r);
    const int est_n = (int)actc__r_u32(r), due = (int)actc__r_u32(r), ready = (int)actc__r_u32(r);
    char alert[sizeof c->alert];
    actc__r_str(r, alert, sizeof alert);
    if (r->bad || has_mean > 1) return actc_set_error(ACTC_ERR_FORMAT, "the controller state is malformed");
    /* Variances are finite and >= 0 (overall: -1 until the first
     * measurement); counts and flags in their ranges; the running mean
     * finite.  Checked before anything changes. */
    const char *why = !isfinite(overall) || (overall < 0 && overall != -1) ? "the overall variance"
                      : !isfinite(comp) || comp < 0 || !isfinite(comp_sub) || comp_sub < 0 ? "a compression variance"
                      : due < 0 || due > 1 || ready < 0 || ready > 1 ? "a flag"
                      : seen < 0 || est_n < 0 ? "a count" : NULL;
    for (size_t i = 0; !why && mean && i < c->P; i++) {
        float v;
        actc__get_floats(&v, mean + 4 * i, 1);
        if (!isfinite(v)) why = "the running gradient mean";
    }
    if (why) return actc_set_error(ACTC_ERR_FORMAT, "the controller state is out of range: %s", why);
    if (mean && !c->mean && !(c->mean = actc_mem_alloc(ACTC_MEM_OPTIM, (c->P ? c->P : 1) * sizeof *c->mean)))
        return actc_last_status();
    if (mean) actc__get_floats(c->mean, mean, c->P);
    else {
        actc_mem_free(c->mean);
        c->mean = NULL;
    }
    c->iter = iter;
    c->overall = overall;
    c->seen = seen;
    c->comp = comp;
    c->comp_sub = comp_sub;
    c->est_n = est_n;
    c->alert_due = due;
    c->alert_ready = ready;
    memcpy(c->alert, alert, sizeof alert);
    c->adapted = 0;
    return ACTC_OK;
}
