/* The largest batch whose full training step fits a memory budget (the
 * experiment behind ActNN's and GACT's "N x larger batch"): doubling finds
 * a failing size, bisection the boundary.  A trial builds everything a run
 * allocates (model, trainer with optimizer and controller, a batch) under
 * the budget and takes two steps: the first creates the optimizer state
 * (and under gact measures on a sub-batch), the second runs with everything
 * resident.  Inputs are synthetic: memory does not depend on the values. */
#include "train.h"
#include <stdlib.h>
#include <string.h>

actc_maxbatch_opts actc_maxbatch_default_opts(void)
{
    actc_maxbatch_opts o;
    memset(&o, 0, sizeof o);
    o.model = "resnet20";
    o.model_opts = actc_model_default_opts();
    o.trainer = actc_trainer_default_opts();
    o.start = 1;
    o.limit = 1 << 16;
    o.resolution = 1;
    o.graph_degree = 10;
    return o;
}

int actc_maxbatch_try(const actc_maxbatch_opts *o, int b, size_t *peak)
{
    actc_model *m = NULL;
    actc_trainer *t = NULL;
    actc_tensor *x = NULL;
    int32_t *labels = NULL, *ids = NULL;
    actc_graph *g = NULL;
    actc_source *gsrc = NULL;
    int ok = 0;
    actc_mem_stats before;
    actc_mem_get_stats(&before);
    actc_mem_reset_peak();
    actc_mem_set_budget(o->budget);
    if (actc_model_create(o->model, &o->model_opts, &m) != ACTC_OK) goto out;
    if (actc_trainer_new(m, &o->trainer, &t) != ACTC_OK) goto out;
    actc_batch batch;
    memset(&batch, 0, sizeof batch);
    const uint64_t seed = o->trainer.seed;
    if (actc_model_takes_graph(m)) {
        /* A graph of b nodes: its features and adjacency are part of what
         * a run of that size holds, so they are built under the budget. */
        const actc_model_opts *r = actc_model_get_opts(m);
        actc_sbm_opts so = actc_sbm_default_opts();
        so.n = b < 2 ? 2 : b;
        so.classes = r->num_classes;
        so.n_features = r->in_channels * r->in_h * r->in_w;
        so.degree = o->graph_degree > 0 ? o->graph_degree : 10;
        so.n_train = so.n > 2000 ? 1000 : so.n / 2;
        so.n_val = 0;
        so.seed = seed;
        if (so.n_features < so.classes) so.classes = so.n_features;
        if (so.n < so.classes) so.classes = so.n;
        if (actc_graph_sbm(&so, &g) != ACTC_OK || actc_source_graph(g, ACTC_SPLIT_TRAIN, &gsrc) != ACTC_OK ||
            actc_source_get(gsrc, 0, 0, 0, &batch) != ACTC_OK)
            goto out;
    } else if (actc_model_takes_tokens(m)) {
        const actc_model_opts *r = actc_model_get_opts(m);
        const int T = o->seq ? o->seq : r->context;
        if (T > r->context) {
            actc_set_error(ACTC_ERR_INVALID, "--seq %d is over the model's context of %d", T, r->context);
            goto out;
        }
        const size_t n = (size_t)b * (size_t)T;
        const int V = r->vocab < 256 ? r->vocab : 256;
        if (!(ids = malloc(n * sizeof *ids)) || !(labels = malloc(n * sizeof *labels))) {
            actc_set_error(ACTC_ERR_OOM, "out of memory for %zu token ids", n);
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            ids[i] = (int32_t)(actc_rand_uniform(seed, i) * V);
            labels[i] = (int32_t)(i % (size_t)V);
        }
        batch = (actc_batch){.ids = ids, .B = b, .T = T, .labels = labels};
    } else {
        const actc_model_opts *r = actc_model_get_opts(m);
        int shp[4] = {b, r->in_channels, r->in_h, r->in_w};
        if (!(labels = malloc((size_t)b * sizeof *labels))) {
            actc_set_error(ACTC_ERR_OOM, "out of memory for %d labels", b);
            goto out;
        }
        if (!(x = actc_tensor_new(ACTC_MEM_SCRATCH, 4, shp))) goto out;
        for (size_t i = 0; i < x->numel; i++) x->data[i] = actc_rand_normal(seed, i);
        for (int i = 0; i < b; i++) labels[i] = i % r->num_classes;
        batch = (actc_batch){.x = x, .labels = labels};
    }
    for (int s = 0; s < 2; s++)
        if (actc_trainer_step(t, &batch, NULL) != ACTC_OK) goto out;
    ok = 1;
out:
    if (!ok && actc_last_status() != ACTC_ERR_OOM) ok = -1;
    actc_mem_set_budget(0);
    actc_mem_stats st;
    actc_mem_get_stats(&st);
    *peak = st.peak_total > before.current_total ? st.peak_total - before.current_total : 0;
    char why[1024];
    snprintf(why, sizeof why, "%s", actc_last_error()); /* the frees below must not hide it */
    actc_status status = actc_last_status();
    actc_tensor_release(x);
    actc_source_free(gsrc);
    actc_graph_free(g);
    free(ids);
    free(labels);
    actc_trainer_free(t);
    actc_model_free(m);
    if (ok != 1) actc_set_error(status, "%s", why);
    return ok;
}

typedef struct {
    const actc_maxbatch_opts *o;
    actc_maxbatch_fn fn;
    void *user;
} search;

static int trial(search *s, int b, size_t *peak)
{
    int ok = s->o->trial ? s->o->trial(b, peak, s->o->trial_user) : actc_maxbatch_try(s->o, b, peak);
    if (ok >= 0 && s->fn) {
        char why[1024];
        snprintf(why, sizeof why, "%s", actc_last_error()); /* a callback may clear it */
        actc_status st = actc_last_status();
        s->fn(b, ok, *peak, s->user);
        if (!ok) actc_set_error(st, "%s", why);
    }
    return ok;
}

static actc_status other_failure(int b)
{
    char why[1024];
    snprintf(why, sizeof why, "%s", actc_last_error());
    return actc_set_error(ACTC_ERR_STATE, "the training step at batch %d failed for a reason other than memory: %s", b,
                          why);
}

actc_status actc_maxbatch(const actc_maxbatch_opts *o, actc_maxbatch_fn fn, void *user, actc_maxbatch_result *r)
{
    if (!o || !r) return actc_set_error(ACTC_ERR_INVALID, "actc_maxbatch: NULL options or result");
    memset(r, 0, sizeof *r);
    if (!o->budget) return actc_set_error(ACTC_ERR_INVALID, "maxbatch needs a memory budget");
    if (o->start < 1 || o->limit < o->start || o->resolution < 1 || o->seq < 0)
        return actc_set_error(ACTC_ERR_INVALID, "maxbatch: need 1 <= start (%d) <= limit (%d), resolution >= 1 (%d) "
                                                "and seq >= 0 (%d)",
                              o->start, o->limit, o->resolution, o->seq);
    if (!o->trial && !o->model) return actc_set_error(ACTC_ERR_INVALID, "maxbatch: no model and no trial function");
    search s = {o, fn, user};
    size_t peak = 0;
    int good = 0, bad = 0;
    for (int b = o->start;;) {
        int ok = trial(&s, b, &peak);
        if (ok < 0) return other_failure(b);
        if (!ok) {
            bad = b;
            break;
        }
        good = b;
        r->peak = peak;
        if (b >= o->limit) break;
        b = b > o->limit / 2 ? o->limit : 2 * b;
    }
    if (!good) {
        char why[1024], bud[32];
        snprintf(why, sizeof why, "%s", actc_last_error());
        r->failing = bad;
        return actc_set_error(ACTC_ERR_OOM, "not even batch %d fits in %s: %s", o->start,
                              actc_format_bytes(o->budget, bud, sizeof bud), why);
    }
    while (bad && bad - good > o->resolution) {
        const int mid = good + (bad - good) / 2;
        int ok = trial(&s, mid, &peak);
        if (ok < 0) return other_failure(mid);
        if (ok) {
            good = mid;
            r->peak = peak;
        } else {
            bad = mid;
        }
    }
    r->batch = good;
    r->failing = bad;
    actc_clear_error();
    return ACTC_OK;
}
