/* What `none` keeps for a micro-batch: the reference the memory report sets
 * a policy's context before backward against, as the papers count
 * activation memory (the uncompressed framework on the same step).
 *
 * The fp32 size of the policy's own saves is not that figure: a policy
 * changes what is saved, not only how (AGoQ recomputes normalisations and
 * activations and its linear layers then save nothing, GACT saves the
 * textbook attention's probabilities, CompAct a projection, segment
 * checkpointing a block's input).  So the trainer runs the micro-batch's
 * forward and loss once more on a counting context with no policy
 * (actc_ctx_set_counting): every save is measured as `none` would store it
 * and nothing is kept, which costs one forward's time and the transient
 * memory of its activations.  What `none` keeps depends on the batch's
 * shape only, so each shape is measured once and remembered.
 *
 * The counting forward must leave training untouched: it runs on its own
 * context (its own random streams; the training context's step, keys and
 * policy state are not read), and the model's buffers (batch-norm running
 * statistics) are put back as they were. */
#include "train.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static actc__reference key_of(const actc_batch *b)
{
    actc__reference r;
    memset(&r, 0, sizeof r);
    if (b->x) {
        r.ndim = b->x->ndim;
        memcpy(r.shape, b->x->shape, sizeof r.shape);
    } else {
        r.ndim = 2;
        r.shape[0] = b->B;
        r.shape[1] = b->T;
    }
    r.graph = b->graph;
    r.labels = b->labels != NULL;
    return r;
}

static int same_key(const actc__reference *a, const actc__reference *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof a->shape) && a->graph == b->graph &&
           a->labels == b->labels;
}

/* The model's buffers (state after the parameters) copied out, or back in
 * (restore set).  *copy is malloc'd by the first call; NULL when there are
 * none or memory is short (then the measurement is skipped). */
static int buffers(actc_model *m, float **copy, int restore)
{
    actc_tensor **ps, **st;
    const int np = actc_model_params(m, &ps), ns = actc_model_state(m, &st);
    size_t n = 0;
    for (int i = np; i < ns; i++) n += st[i]->numel;
    if (!n) return 1;
    if (!restore && !(*copy = malloc(n * sizeof(float)))) return 0;
    size_t at = 0;
    for (int i = np; i < ns; i++) {
        const size_t bytes = st[i]->numel * sizeof(float);
        if (restore) memcpy(st[i]->data, *copy + at, bytes);
        else memcpy(*copy + at, st[i]->data, bytes);
        at += st[i]->numel;
    }
    return 1;
}

/* Measure what `none` keeps for b into r (r->bytes 0 when it cannot be:
 * the forward failed, e.g. under a memory budget, or memory is short). */
static void measure(actc_trainer *t, const actc_ctx *ctx, const actc_batch *b, actc__reference *r)
{
    if (!t->counter) {
        if (!(t->counter = actc_ctx_new()) || actc_ctx_set_counting(t->counter, 1) != ACTC_OK) {
            actc_ctx_free(t->counter);
            t->counter = NULL;
            return;
        }
        actc_ctx_set_seed(t->counter, t->o.seed);
    }
    float *saved = NULL;
    if (!buffers(t->m, &saved, 0)) return;
    actc_ctx_set_step(t->counter, actc_ctx_step(ctx));
    actc_ctx_set_training(t->counter, 1);
    int correct;
    long rows;
    actc_tensor *loss = actc__trainer_loss(t, t->counter, b, &correct, &rows);
    if (loss) {
        actc_store_stats ss;
        actc_store_get_stats(t->counter, &ss);
        r->bytes = ss.stored_bytes;
        memcpy(r->by_kind, ss.stored_by_kind, sizeof r->by_kind); /* the store only grew: its peak is now */
        actc_tensor_release(loss);
    }
    actc_ctx_reset(t->counter);
    actc_store_reset_peak(t->counter);
    if (saved) buffers(t->m, &saved, 1);
    free(saved);
}

void actc__trainer_reference(actc_trainer *t, actc_ctx *ctx, const actc_batch *b)
{
    actc__reference key = key_of(b);
    for (int i = 0; i < t->n_refs && i < ACTC__REFERENCES; i++)
        if (same_key(&t->refs[i], &key)) {
            actc_store_set_reference(ctx, t->refs[i].bytes, t->refs[i].by_kind);
            return;
        }
    /* The step's error state is the training's: a failed measurement
     * leaves no message behind. */
    char why[1024];
    const actc_status was = actc_last_status();
    snprintf(why, sizeof why, "%s", actc_last_error());
    measure(t, ctx, b, &key);
    if (actc_last_status() != was) {
        if (was == ACTC_OK) actc_clear_error();
        else actc_set_error(was, "%s", why);
    }
    t->refs[t->n_refs++ % ACTC__REFERENCES] = key;
    actc_store_set_reference(ctx, key.bytes, key.by_kind);
}
