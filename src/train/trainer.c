/* The trainer: one training step of any model under any policy, epochs over
 * a data source, evaluation, and the hooks later layers (data parallelism,
 * low-rank and quantized gradients) attach to.  A step, top to bottom:
 *
 *   position the context at the step        (random streams are (seed, step))
 *   forward + loss + backward, per micro-batch, through the GACT controller
 *     (which first runs its measuring passes when due)
 *   gradient-complete events, then after-backward hook
 *   clip the global gradient norm, optimizer update, step += 1
 *
 * A step that fails leaves the parameters, the optimizer and the position
 * as they were: only the gradients are dropped. */
#include "train.h"
#include "../autograd/autograd.h"
#include "../core/core.h"
#include "../optim/optim.h"
#include "../policy/policy.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


actc_trainer_opts actc_trainer_default_opts(void)
{
    actc_trainer_opts o;
    memset(&o, 0, sizeof o);
    o.policy = "none";
    o.optim = "sgd";
    o.momentum = 0.9f;
    o.nesterov = 1;
    o.weight_decay = -1;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.eps = 1e-8f;
    o.schedule.kind = ACTC_LR_CONSTANT;
    o.accum = 1;
    o.seed = 1;
    o.controller = actc_controller_default_opts();
    return o;
}

actc_optim *actc__trainer_make_optim(const actc_trainer_opts *o, actc_tensor **params, int n)
{
    if (!strcmp(o->optim, "adamw")) return actc_adamw_new(params, n, o->beta1, o->beta2, o->eps, o->weight_decay);
    return actc_sgd_new(params, n, o->momentum, o->nesterov, o->weight_decay);
}

actc_trainer_opts actc_trainer_opts_for_model(const char *model)
{
    actc_trainer_opts o = actc_trainer_default_opts();
    o.schedule.kind = ACTC_LR_COSINE;
    o.schedule.warmup_steps = 50;
    if (model && actc_model_name_takes_tokens(model)) {
        /* Short runs on few tokens per step (nanoGPT's character-level
         * set-up). */
        o.optim = "adamw";
        o.beta2 = 0.99f;
        o.clip = 1.0f;
    } else if (model && actc_model_name_takes_graph(model)) {
        /* The GCN and GAT papers' rate and decay with AdamW (decoupled
         * decay: weaker than the papers' L2 term at this rate), constant. */
        o.optim = "adamw";
        o.lr = 0.01f;
        o.weight_decay = 5e-4f;
        o.schedule.kind = ACTC_LR_CONSTANT;
        o.schedule.warmup_steps = 0;
    }
    return o;
}

/* x in [0, 1) */
static int unit(float x) { return x >= 0.0f && x < 1.0f; }

/* Fill in the defaults that depend on the optimizer and check the rest:
 * every check of the options is here, for the trainer and for commands
 * that check before loading data (actc_trainer_check_opts). */
static actc_status resolve_opts(actc_trainer_opts *o)
{
    const int adamw = o->optim && !strcmp(o->optim, "adamw");
    if (!o->optim || (!adamw && strcmp(o->optim, "sgd")))
        return actc_set_error(ACTC_ERR_INVALID, "unknown optimizer '%s' (sgd or adamw)", o->optim ? o->optim : "(null)");
    if (o->lr == 0.0f) o->lr = adamw ? 1e-3f : 0.1f;
    if (o->weight_decay < 0.0f) o->weight_decay = adamw ? 0.01f : 5e-4f;
    /* Nesterov needs momentum: without it the option means nothing. */
    if (o->momentum == 0.0f) o->nesterov = 0;
    if (o->accum < 1) return actc_set_error(ACTC_ERR_INVALID, "accum %d: need at least 1 micro-batch a step", o->accum);
    if (o->grad_bits == 0) o->grad_bits = 32;
    if (o->grad_bits != 8 && o->grad_bits != 32)
        return actc_set_error(ACTC_ERR_INVALID, "grad_bits %d: gradients are held in 32 bits (fp32) or 8 (AGoQ's "
                                                "block-wise dynamic map)", o->grad_bits);
    if (!isfinite(o->clip) || o->clip < 0.0f)
        return actc_set_error(ACTC_ERR_INVALID, "clip %g must be finite and >= 0 (0: off)", (double)o->clip);
    if (!unit(o->momentum) || !unit(o->beta1) || !unit(o->beta2))
        return actc_set_error(ACTC_ERR_INVALID, "momentum %g, beta1 %g and beta2 %g must be in [0, 1)",
                              (double)o->momentum, (double)o->beta1, (double)o->beta2);
    if (!(o->eps > 0.0f) || !isfinite(o->eps) || !isfinite(o->weight_decay))
        return actc_set_error(ACTC_ERR_INVALID, "eps %g must be positive and finite, weight decay %g finite",
                              (double)o->eps, (double)o->weight_decay);
    if (!(o->schedule.min_lr >= 0.0f) || !isfinite(o->schedule.min_lr))
        return actc_set_error(ACTC_ERR_INVALID, "min lr %g must be finite and >= 0", (double)o->schedule.min_lr);
    actc_status s = actc__controller_check_opts(&o->controller);
    if (s != ACTC_OK) return s;
    o->schedule.base_lr = o->lr;
    return actc_lr_check(&o->schedule);
}

actc_status actc_trainer_check_opts(const actc_trainer_opts *opts)
{
    actc_trainer_opts o = opts ? *opts : actc_trainer_default_opts();
    actc_status s = resolve_opts(&o);
    if (s != ACTC_OK) return s;
    actc_ctx *probe = actc_ctx_new();
    s = probe ? actc_ctx_set_policy(probe, o.policy ? o.policy : "none") : actc_last_status();
    actc_ctx_free(probe);
    return s;
}

/* The engine's gradient-complete event, forwarded to the user's hook during
 * the kept pass's last micro-batch only. */
static actc_status grad_ready(actc_ctx *ctx, actc_tensor *param, void *user)
{
    (void)ctx;
    actc_trainer *t = user;
    if (!t->events_on || !t->on_grad) return ACTC_OK;
    for (int i = 0; i < t->np; i++)
        if (t->params[i] == param) {
            if (t->fired[i]) return ACTC_OK;
            t->fired[i] = 1;
            return t->on_grad(t, param, i, t->on_grad_user);
        }
    return ACTC_OK; /* a parameter that is not the model's */
}

actc_status actc_trainer_new(actc_model *m, const actc_trainer_opts *opts, actc_trainer **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_new: out is NULL");
    *out = NULL;
    if (!m) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_new: model is NULL");
    actc_trainer_opts o = opts ? *opts : actc_trainer_default_opts();
    if (!o.policy) o.policy = "none";
    actc_status s = resolve_opts(&o);
    if (s != ACTC_OK) return s;
    actc_trainer *t = calloc(1, sizeof *t);
    if (!t) return actc_set_error(ACTC_ERR_OOM, "out of memory for a trainer");
    t->m = m;
    t->group.size = 1;
    t->pipe.stages = 1;
    t->np = actc_model_params(m, &t->params);
    if (!(t->fired = calloc((size_t)t->np + 1, 1))) {
        s = actc_set_error(ACTC_ERR_OOM, "out of memory for a trainer");
        goto fail;
    }
    for (int i = 0; o.grad_bits == 8 && i < t->np; i++)
        if ((s = actc_param_set_grad_codec(t->params[i], "dyn8")) != ACTC_OK) goto fail;
    if (!(t->ctx = actc_ctx_new())) goto fail_status;
    if ((s = actc_ctx_set_policy(t->ctx, o.policy)) != ACTC_OK) goto fail;
    actc_ctx_set_seed(t->ctx, o.seed);
    actc_ctx_on_grad_complete(t->ctx, grad_ready, t);
    if (!(t->opt = actc__trainer_make_optim(&o, t->params, t->np))) goto fail_status;
    if (!(t->ctrl = actc_controller_new(t->ctx, t->params, t->np, &o.controller))) goto fail_status;
    snprintf(t->policy, sizeof t->policy, "%s", actc_ctx_policy(t->ctx));
    snprintf(t->optim, sizeof t->optim, "%s", o.optim);
    o.policy = t->policy;
    o.optim = t->optim;
    t->o = o;
    t->sched = o.schedule;
    *out = t;
    return ACTC_OK;
fail_status:
    s = actc_last_status();
fail:
    actc_trainer_free(t);
    return s;
}

void actc_trainer_free(actc_trainer *t)
{
    if (!t) return;
    for (int i = 0; i < t->np; i++) actc_tensor_drop_grad(t->params[i]);
    actc_controller_free(t->ctrl);
    actc_optim_free(t->opt);
    actc_ctx_free(t->counter);
    actc_ctx_free(t->ctx);
    free(t->fired);
    free(t->shared);
    free(t->note);
    free(t);
}

const actc_trainer_opts *actc_trainer_get_opts(const actc_trainer *t) { return &t->o; }
actc_model *actc_trainer_model(actc_trainer *t) { return t->m; }
actc_ctx *actc_trainer_ctx(actc_trainer *t) { return t->ctx; }
actc_optim *actc_trainer_optim(actc_trainer *t) { return t->opt; }
actc_controller *actc_trainer_controller(actc_trainer *t) { return t->ctrl; }
uint64_t actc_trainer_steps(const actc_trainer *t) { return t->step; }
uint64_t actc_trainer_epoch(const actc_trainer *t) { return t->epoch; }
uint64_t actc_trainer_batch_in_epoch(const actc_trainer *t) { return t->batch; }

void actc_trainer_set_position(actc_trainer *t, uint64_t step, uint64_t epoch, uint64_t batch_in_epoch)
{
    t->step = step;
    t->epoch = epoch;
    t->batch = batch_in_epoch;
}

void actc_trainer_on_grad_complete(actc_trainer *t, actc_param_hook_fn fn, void *user)
{
    t->on_grad = fn;
    t->on_grad_user = user;
}

void actc_trainer_on_after_backward(actc_trainer *t, actc_step_hook_fn fn, void *user)
{
    t->on_after = fn;
    t->on_after_user = user;
}

actc_status actc_trainer_set_group(actc_trainer *t, const actc_trainer_group *g)
{
    if (!t) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_set_group: trainer is NULL");
    if (g && g->size > 1 && (g->rank < 0 || g->rank >= g->size || !g->sum))
        return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_set_group: rank %d of %d%s", g->rank, g->size,
                              g->sum ? "" : " without a sum function");
    if (g && g->size < 1) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_set_group: size %d", g->size);
    actc_trainer_group one = {0, 1, NULL, NULL};
    t->group = g && g->size > 1 ? *g : one;
    actc_ctx_set_stream(t->ctx, (uint64_t)t->group.rank);
    return ACTC_OK;
}

/* What this stage holds at once under the schedule, in micro-batch
 * blocks (the micro-batches held x the blocks of its part: its context
 * grows with both), and the most any stage holds (summed over the stages:
 * each its own), for the policies that compensate the stages holding
 * fewer (DBCA-PP). */
static actc_status stage_loads(const actc_trainer *t, const actc_trainer_pipe *p, int *load, int *most)
{
    int held = 0;
    actc_pipe_op *ops = malloc(2 * (size_t)t->o.accum * sizeof *ops);
    double *v = calloc((size_t)p->stages, sizeof *v);
    actc_status s = ops && v ? actc_pipe_ops(p->schedule, p->stage, p->stages, t->o.accum, ops, &held)
                             : actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline stage");
    const actc_model_opts *mo = actc_model_get_opts(t->m);
    *load = held * (mo->n_blocks ? mo->n_blocks : mo->n_layers);
    if (s == ACTC_OK) {
        v[p->stage] = *load;
        s = p->sum(v, p->stages, p->user);
    }
    *most = 0;
    for (int k = 0; s == ACTC_OK && k < p->stages; k++)
        if ((int)v[k] > *most) *most = (int)v[k];
    free(ops);
    free(v);
    return s;
}

actc_status actc_trainer_set_pipe(actc_trainer *t, const actc_trainer_pipe *p)
{
    if (!t) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_set_pipe: trainer is NULL");
    if (!p || p->stages <= 1) {
        free(t->shared);
        t->shared = NULL;
        memset(&t->pipe, 0, sizeof t->pipe);
        t->pipe.stages = 1;
        actc_ctx_set_stage(t->ctx, 0, 0);
        return actc_controller_set_stages(t->ctrl, 0, 1, NULL, NULL);
    }
    if (p->stage < 0 || p->stage >= p->stages || !p->start || !p->wait || !p->sum || (p->n_shared && !p->share) ||
        p->n_shared < 0 || (p->n_shared && !p->shared))
        return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_set_pipe: stage %d of %d, or a function missing", p->stage,
                              p->stages);
    if (!actc_model_takes_tokens(t->m) || actc_model_is_custom(t->m))
        return actc_set_error(ACTC_ERR_INVALID, "a pipeline stage trains a part of a transformer (gpt, llama), not "
                                                "model %s", actc_model_name(t->m));
    if (t->o.accum < p->stages)
        return actc_set_error(ACTC_ERR_INVALID, "a pipeline of %d stages needs at least %d micro-batches a step "
                                                "(accum is %d)", p->stages, p->stages, t->o.accum);
    for (int i = 0; i < p->n_shared; i++)
        if (p->shared[i] < 0 || p->shared[i] >= t->np)
            return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_set_pipe: shared parameter %d of %d", p->shared[i],
                                  t->np);
    if (p->n_shared && t->o.grad_bits != 32)
        return actc_set_error(ACTC_ERR_INVALID, "parameter %s is shared between pipeline stages (a tied embedding): its "
                                                "gradient is summed between them in fp32, so gradients must be held in "
                                                "32 bits, not %d", t->params[p->shared[0]]->name, t->o.grad_bits);
    int load = 0, most = 0;
    actc_status s = stage_loads(t, p, &load, &most);
    if (s == ACTC_OK) s = actc_controller_set_stages(t->ctrl, p->stage, p->stages, p->sum, p->user);
    if (s == ACTC_OK) s = actc_ctx_set_stage(t->ctx, load, most);
    if (s != ACTC_OK) return s;
    int *sh = p->n_shared ? malloc((size_t)p->n_shared * sizeof *sh) : NULL;
    if (p->n_shared && !sh) return actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline stage");
    if (sh) memcpy(sh, p->shared, (size_t)p->n_shared * sizeof *sh);
    free(t->shared);
    t->shared = sh;
    t->pipe = *p;
    t->pipe.shared = sh;
    return ACTC_OK;
}

void actc_trainer_pipe_stats(const actc_trainer *t, actc_pipe_stats *s)
{
    if (s) memset(s, 0, sizeof *s);
    if (t && s) *s = t->pst;
}

/* The stages' shared parameters' gradients summed with their other copies
 * (a tied embedding's, between the first and the last stage). */
static actc_status share_grads(actc_trainer *t)
{
    for (int i = 0; i < t->pipe.n_shared; i++) {
        actc_tensor *p = t->params[t->shared[i]];
        float *g;
        actc_grad_info gi;
        actc_grad_get_info(p, &gi);
        if (gi.present && gi.form != ACTC_GRAD_DENSE)
            return actc_set_error(ACTC_ERR_INVALID, "parameter %s is shared between pipeline stages: its gradient "
                                                    "must be dense fp32 (no 8-bit or low-rank gradients)", p->name);
        actc_status s = actc_grad_buffer(t->ctx, p, &g); /* zeros if this stage's backward did not reach it */
        if (s == ACTC_OK) s = t->pipe.share(g, p->numel, t->pipe.user);
        if (s != ACTC_OK) return s;
    }
    return ACTC_OK;
}

/* Sum v[0..n) over the group (nothing alone). */
static actc_status group_sum(const actc_trainer *t, double *v, int n)
{
    return t->group.size > 1 ? t->group.sum(v, n, t->group.user) : ACTC_OK;
}

actc_status actc_trainer_set_note(actc_trainer *t, const char *note)
{
    if (note && strlen(note) >= ACTC_CKPT_NOTE_MAX)
        return actc_set_error(ACTC_ERR_INVALID, "the note is %zu bytes; a checkpoint keeps at most %d",
                              strlen(note), ACTC_CKPT_NOTE_MAX - 1);
    char *n = note ? strdup(note) : NULL;
    if (note && !n) return actc_set_error(ACTC_ERR_OOM, "out of memory for the note");
    free(t->note);
    t->note = n;
    return ACTC_OK;
}

const char *actc_trainer_note(const actc_trainer *t) { return t->note ? t->note : ""; }

actc_status actc_trainer_set_recipe(actc_trainer *t, const actc_run_recipe *r)
{
    if (!t) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_set_recipe: trainer is NULL");
    if (r && (!memchr(r->data, '\0', sizeof r->data) || !memchr(r->split, '\0', sizeof r->split) ||
              !memchr(r->gemm, '\0', sizeof r->gemm)))
        return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_set_recipe: a string of the recipe (data, split or gemm) "
                                                "does not end inside its array");
    t->has_recipe = r != NULL;
    if (r) t->recipe = *r;
    return ACTC_OK;
}

const actc_run_recipe *actc_trainer_recipe(const actc_trainer *t) { return t->has_recipe ? &t->recipe : NULL; }

/* ---- the step ---------------------------------------------------------------- */

/* Rows [off, off + k) of b as a batch of its own; an image sub-batch is a
 * copy (*copy, released by the caller) unless it is the whole batch. */
static actc_status slice(const actc_batch *b, int off, int k, actc_batch *part, actc_tensor **copy)
{
    *part = *b;
    *copy = NULL;
    if (b->graph) return ACTC_OK; /* one sample: k is 1, the whole graph */
    if (b->x) {
        const actc_tensor *x = b->x;
        if (off != 0 || k != x->shape[0]) {
            int shp[ACTC_MAX_DIMS];
            memcpy(shp, x->shape, sizeof shp);
            shp[0] = k;
            if (!(*copy = actc_tensor_new(ACTC_MEM_ACT, x->ndim, shp))) return actc_last_status();
            const size_t row = x->numel / (size_t)x->shape[0];
            memcpy((*copy)->data, x->data + (size_t)off * row, (*copy)->numel * sizeof(float));
            part->x = *copy;
        }
        if (b->labels) part->labels = b->labels + off;
    } else {
        part->B = k;
        if (b->ids) part->ids = b->ids + (size_t)off * (size_t)b->T;
        if (b->labels) part->labels = b->labels + (size_t)off * (size_t)b->T;
    }
    return ACTC_OK;
}

/* Seconds the store has spent in codecs since its last reset. */
static double codec_seconds(const actc_ctx *ctx)
{
    actc_store_stats ss;
    actc_store_get_stats(ctx, &ss);
    return ss.encode_s + ss.decode_s;
}

actc_tensor *actc__trainer_loss(actc_trainer *t, actc_ctx *ctx, const actc_batch *b, int *correct, long *rows)
{
    actc_tensor *out = actc_model_forward_batch(t->m, ctx, b);
    *correct = 0;
    *rows = 0;
    if (!out) return NULL;
    if (b->labels) {
        *rows = out->ndim >= 1 ? out->shape[0] : 1;
        actc_tensor *loss = actc_cross_entropy(ctx, out, b->labels, -1, correct);
        actc_tensor_release(out);
        return loss;
    }
    if (out->numel != 1) {
        char shp[64];
        actc_shape_str(out, shp, sizeof shp); /* before out goes */
        actc_tensor_release(out);
        actc_set_error(ACTC_ERR_INVALID, "a batch without labels needs a forward that returns the loss (a scalar), "
                                         "not a tensor of shape %s", shp);
        return NULL;
    }
    return out;
}

/* Forward, loss and backward of rows [off, off + k) of the n the pass
 * covers, the gradient scaled by k / n.  The kept pass first gives the
 * store what `none` keeps for this micro-batch (reference.c). */
static actc_status micro_batch(actc__pass_state *p, actc_ctx *ctx, int off, int k, int n)
{
    actc_batch part;
    actc_tensor *copy;
    actc_status s = slice(p->b, off, k, &part, &copy);
    if (s != ACTC_OK) return s;
    if (p->kept) actc__trainer_reference(p->t, ctx, &part);
    double t0 = actc__now(), c0 = codec_seconds(ctx);
    actc__profile_reset(ctx); /* the slice above is not the first operator's */
    int correct;
    long rows;
    actc_tensor *loss = actc__trainer_loss(p->t, ctx, &part, &correct, &rows);
    actc_tensor_release(copy);
    if (!loss) return actc_last_status();
    const double lv = loss->data[0];
    double t1 = actc__now(), c1 = codec_seconds(ctx);
    /* k / n is exactly 1 for a single micro-batch: the unscaled gradient. */
    s = actc_backward_scaled(ctx, loss, (float)k / (float)n);
    actc_tensor_release(loss);
    p->forward_s += t1 - t0;
    p->backward_s += actc__now() - t1;
    p->codec_forward_s += c1 - c0;
    p->codec_backward_s += codec_seconds(ctx) - c1;
    if (s != ACTC_OK) return s;
    p->loss_sum += lv * (double)(rows ? rows : k);
    p->correct += correct;
    p->rows += rows;
    return ACTC_OK;
}

/* The controller's fwdbwd: the batch (or its first max_samples samples) in
 * micro-batches of ceil(N / accum). */
static actc_status trainer_pass(actc_ctx *ctx, void *user, int max_samples, int *samples)
{
    actc__pass_state *p = user;
    actc_trainer *t = p->t;
    const int N = actc_batch_samples(p->b);
    const int n = max_samples > 0 && max_samples < N ? max_samples : N;
    const int micro = (N + t->o.accum - 1) / t->o.accum;
    /* The controller's measuring passes run with the replaying flag up; the
     * pass it keeps is the last one, without it. */
    const int kept = p->kept = !actc_ctx_replaying(ctx);
    /* The kept pass scales by the whole batch, so that the processes'
     * gradients add up to its mean; a measuring pass by what it ran. */
    const int denom = kept ? p->total : n;
    const uint64_t step = actc_ctx_step(ctx);
    p->loss_sum = 0;
    p->correct = p->rows = 0;
    p->forward_s = p->backward_s = p->codec_forward_s = p->codec_backward_s = 0;
    double t0 = actc__now();
    actc_ctx_set_training(ctx, 1);
    actc_status s = ACTC_OK;
    uint32_t k = 0;
    for (int off = 0; off < n && s == ACTC_OK; off += micro, k++) {
        const int len = n - off < micro ? n - off : micro;
        actc_ctx_set_step(ctx, step);
        actc_ctx_set_substep(ctx, k);
        t->events_on = kept && off + len >= n;
        s = micro_batch(p, ctx, off, len, denom);
    }
    t->events_on = 0;
    actc_ctx_set_step(ctx, step + 1); /* as one actc_backward would leave it */
    p->pass_s = actc__now() - t0;
    *samples = n;
    p->samples = n;
    return s;
}

static void drop_grads(actc_trainer *t)
{
    for (int i = 0; i < t->np; i++) actc_tensor_drop_grad(t->params[i]);
}

/* Forward and backward of b through the controller, the gradient-complete
 * events and the after-backward hook: the gradients are left in the
 * parameters, res gets the loss and the times. */
static actc_status gradients(actc_trainer *t, const actc_batch *b, actc_step_result *res)
{
    if (!t || !b) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_step: NULL trainer or batch");
    const int N = actc_batch_samples(b);
    if (N < 1 || (!b->x && (!b->ids || b->T < 1)))
        return actc_set_error(ACTC_ERR_INVALID, "step %llu: the batch is empty (it needs x, or ids with B, T >= 1)",
                              (unsigned long long)t->step);
    if (!b->labels && !actc_model_is_custom(t->m))
        return actc_set_error(ACTC_ERR_INVALID, "step %llu: the batch has no labels", (unsigned long long)t->step);
    const int P = t->group.size;
    if (b->graph && (t->o.accum > 1 || P > 1))
        return actc_set_error(ACTC_ERR_INVALID,
                              "step %llu: a graph batch is one whole graph: it cannot be cut into %d micro-batches "
                              "or shared by %d processes (full-batch training; use accum 1 and one process)",
                              (unsigned long long)t->step, t->o.accum, P);
    if (N < P)
        return actc_set_error(ACTC_ERR_INVALID, "step %llu: a batch of %d sample(s) cannot be shared by %d processes",
                              (unsigned long long)t->step, N, P);
    memset(res, 0, sizeof *res);
    res->lr = actc_lr_at(&t->sched, t->step);
    memset(t->fired, 0, (size_t)t->np);
    actc_ctx_set_step(t->ctx, t->step);
    actc_batch mine = *b;
    actc_tensor *copy = NULL;
    if (P > 1) {
        const int lo = (int)((long long)N * t->group.rank / P), hi = (int)((long long)N * (t->group.rank + 1) / P);
        actc_status ss = slice(b, lo, hi - lo, &mine, &copy);
        if (ss != ACTC_OK) return ss;
    }
    actc__pass_state p = {.t = t, .b = &mine, .total = N};
    double t0 = actc__now();
    const int piped = t->pipe.stages > 1;
    actc_status s = actc_controller_iterate(t->ctrl, piped ? actc__pipe_pass : trainer_pass, &p);
    const double iterate_s = actc__now() - t0;
    actc_ctx_set_step(t->ctx, t->step);
    /* Parameters the graph did not reach complete now, in order. */
    for (int i = 0; s == ACTC_OK && t->on_grad && i < t->np; i++)
        if (!t->fired[i]) {
            t->fired[i] = 1;
            s = t->on_grad(t, t->params[i], i, t->on_grad_user);
        }
    if (s == ACTC_OK && t->on_after) s = t->on_after(t, t->on_after_user);
    if (s == ACTC_OK && piped) s = share_grads(t);
    actc_tensor_release(copy);
    double v[4] = {p.loss_sum, (double)p.correct, (double)p.rows, (double)p.samples};
    if (piped && t->pipe.stage != t->pipe.stages - 1) memset(v, 0, sizeof v); /* the last stage's */
    if (s == ACTC_OK) s = group_sum(t, v, 4);
    if (s == ACTC_OK && piped) s = t->pipe.sum(v, 4, t->pipe.user);
    p.loss_sum = v[0];
    p.correct = (long)v[1];
    p.rows = (long)v[2];
    p.samples = (int)v[3];
    res->loss = (p.rows || p.samples) ? p.loss_sum / (double)(p.rows ? p.rows : p.samples) : 0;
    res->correct = p.correct;
    res->rows = p.rows;
    res->samples = p.samples;
    res->adapted = actc_controller_adapted(t->ctrl);
    res->forward_s = p.forward_s;
    res->backward_s = p.backward_s;
    res->codec_forward_s = p.codec_forward_s;
    res->codec_backward_s = p.codec_backward_s;
    res->measure_s = iterate_s > p.pass_s ? iterate_s - p.pass_s : 0;
    return s;
}

/* A failed step: the gradients go, the message says which step. */
static actc_status step_failed(actc_trainer *t, actc_status s)
{
    char why[1024];
    snprintf(why, sizeof why, "%s", actc_last_error());
    actc_status st = actc_last_status() != ACTC_OK ? actc_last_status() : s;
    drop_grads(t);
    return actc_set_error(st, "training step %llu: %s", (unsigned long long)t->step, why);
}

actc_status actc_trainer_backward(actc_trainer *t, const actc_batch *b, actc_step_result *r)
{
    actc_step_result res;
    actc_status s = gradients(t, b, &res);
    if (s != ACTC_OK) return t ? step_failed(t, s) : s;
    if (r) *r = res;
    return ACTC_OK;
}

/* The gradients' bytes by form before the update, for the memory report
 * (the epoch keeps the step that held the most). */
static void note_grad_bytes(actc_trainer *t)
{
    size_t by[ACTC_GRAD_NFORMS] = {0}, fp32 = 0, all = 0, best = 0;
    for (int i = 0; i < t->np; i++) {
        actc_grad_info gi;
        actc_grad_get_info(t->params[i], &gi);
        if (!gi.present) continue;
        by[gi.form] += gi.bytes;
        all += gi.bytes;
        fp32 += t->params[i]->numel * sizeof(float);
    }
    for (int f = 0; f < ACTC_GRAD_NFORMS; f++) best += t->grad_bytes[f];
    if (all >= best) {
        memcpy(t->grad_bytes, by, sizeof by);
        t->grad_fp32 = fp32;
    }
}

/* Clip the gradients' norm to the option's, over every stage's parameters
 * when the trainer is a pipeline stage (shared ones counted once). */
static actc_status clip(actc_trainer *t, float *norm)
{
    if (t->pipe.stages <= 1) return actc_clip_grad_norm(t->params, t->np, t->o.clip, norm);
    uint8_t *skip = NULL;
    if (!t->pipe.shared_counted && t->pipe.n_shared) {
        if (!(skip = calloc((size_t)t->np, 1))) return actc_set_error(ACTC_ERR_OOM, "out of memory clipping");
        for (int i = 0; i < t->pipe.n_shared; i++) skip[t->shared[i]] = 1;
    }
    double sq;
    actc_status s = actc__grad_norm_sq(t->params, t->np, skip, &sq);
    free(skip);
    if (s == ACTC_OK) s = t->pipe.sum(&sq, 1, t->pipe.user);
    return s == ACTC_OK ? actc__clip_to_norm(t->params, t->np, t->o.clip, sq, norm) : s;
}

actc_status actc_trainer_step(actc_trainer *t, const actc_batch *b, actc_step_result *r)
{
    actc_step_result res;
    actc_status s = gradients(t, b, &res);
    double t1 = actc__now();
    if (s == ACTC_OK) note_grad_bytes(t);
    if (s == ACTC_OK && t->o.clip > 0) s = clip(t, &res.grad_norm);
    if (s == ACTC_OK) s = actc_optim_step(t->opt, res.lr);
    if (s != ACTC_OK) return t ? step_failed(t, s) : s;
    res.update_s = actc__now() - t1;
    t->step++;
    if (r) *r = res;
    return ACTC_OK;
}

/* ---- epochs and evaluation ----------------------------------------------------- */

actc_status actc_trainer_train_epoch(actc_trainer *t, actc_source *src, actc_progress_fn fn, void *user,
                                     actc_epoch_result *r)
{
    if (!t || !src) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_train_epoch: NULL trainer or source");
    const int nb = actc_source_batches(src);
    actc_mem_reset_peak();
    actc_store_reset_peak(t->ctx);
    memset(&t->pst, 0, sizeof t->pst);
    memset(t->grad_bytes, 0, sizeof t->grad_bytes);
    t->grad_fp32 = 0;
    const double t0 = actc__now();
    double loss_sum = 0, fwd = 0, bwd = 0, upd = 0, meas = 0, cfwd = 0, cbwd = 0;
    long correct = 0, rows = 0, samples = 0;
    int steps = 0, stop = 0;
    actc_status s = ACTC_OK;
    while (!stop && t->batch < (uint64_t)nb) {
        actc_batch b;
        if ((s = actc_source_get(src, t->epoch, t->batch, t->step, &b)) != ACTC_OK) {
            char why[1024];
            snprintf(why, sizeof why, "%s", actc_last_error());
            s = actc_set_error(s, "data for step %llu (epoch %llu, batch %llu): %s", (unsigned long long)t->step,
                               (unsigned long long)t->epoch + 1, (unsigned long long)t->batch, why);
            break;
        }
        actc_step_result sr;
        if ((s = actc_trainer_step(t, &b, &sr)) != ACTC_OK) break;
        t->batch++;
        steps++;
        const long w = sr.rows ? sr.rows : sr.samples;
        loss_sum += sr.loss * (double)w;
        correct += sr.correct;
        rows += w;
        samples += sr.samples;
        fwd += sr.forward_s;
        bwd += sr.backward_s;
        upd += sr.update_s;
        meas += sr.measure_s;
        cfwd += sr.codec_forward_s;
        cbwd += sr.codec_backward_s;
        if (fn) {
            actc_progress pr = {.step = t->step, .epoch = t->epoch, .batch = (int)t->batch, .batches = nb,
                                .last = &sr, .loss = loss_sum / (double)rows,
                                .accuracy = (double)correct / (double)rows, .samples = samples, .rows = rows,
                                .seconds = actc__now() - t0};
            stop = fn(t, &pr, user);
        }
    }
    const double secs = actc__now() - t0;
    actc__source_drop(src);
    actc_mem_get_stats(&t->ms);
    actc_store_get_stats(t->ctx, &t->ss);
    t->have_snapshot = 1;
    if (s != ACTC_OK) return s;
    const int finished = t->batch >= (uint64_t)nb;
    if (finished) {
        t->epoch++;
        t->batch = 0;
    }
    if (r) {
        r->loss = rows ? loss_sum / (double)rows : 0;
        r->accuracy = rows ? (double)correct / (double)rows : 0;
        r->samples = samples;
        r->rows = rows;
        r->steps = steps;
        r->finished = finished;
        r->seconds = secs;
        r->forward_s = fwd;
        r->backward_s = bwd;
        r->update_s = upd;
        r->measure_s = meas;
        r->codec_forward_s = cfwd;
        r->codec_backward_s = cbwd;
    }
    return ACTC_OK;
}

/* Batches first, first + stride, ... of src; r gets the sums (loss x rows
 * in r->loss). */
static actc_status evaluate(actc_model *m, actc_trainer *piped, actc_ctx *ctx, actc_source *src, int first, int stride,
                            actc_eval_result *r)
{
    memset(r, 0, sizeof *r);
    const int was_training = actc_ctx_training(ctx);
    actc_ctx_set_training(ctx, 0);
    double total = 0;
    long correct = 0, rows = 0, samples = 0;
    actc_status s = ACTC_OK;
    for (int i = first; i < actc_source_batches(src) && s == ACTC_OK; i += stride) {
        actc_batch b;
        if ((s = actc_source_get(src, 0, (uint64_t)i, 0, &b)) != ACTC_OK) break;
        const int n = actc_batch_samples(&b);
        actc_tensor *out = NULL;
        if (piped) {
            /* Only the last stage has the logits. */
            if ((s = actc__pipe_eval_forward(piped, ctx, &b, &out)) != ACTC_OK || !out) {
                samples += n;
                continue;
            }
        } else if (!(out = actc_model_forward_batch(m, ctx, &b))) {
            s = actc_last_status();
            break;
        }
        int c = 0;
        long w = n;
        actc_tensor *loss = out;
        if (b.labels) {
            w = out->ndim >= 1 ? out->shape[0] : 1;
            loss = actc_cross_entropy(ctx, out, b.labels, -1, &c);
            actc_tensor_release(out);
            if (!loss) {
                s = actc_last_status();
                break;
            }
        }
        total += (double)loss->data[0] * (double)w;
        actc_tensor_release(loss);
        correct += c;
        rows += w;
        samples += n;
    }
    actc_ctx_set_training(ctx, was_training);
    actc__source_drop(src);
    if (s != ACTC_OK) return s;
    r->loss = total;
    r->accuracy = (double)correct;
    r->rows = rows;
    r->samples = samples;
    return ACTC_OK;
}

/* Sums into means. */
static void eval_means(actc_eval_result *r)
{
    r->loss = r->rows ? r->loss / (double)r->rows : 0;
    r->accuracy = r->rows ? r->accuracy / (double)r->rows : 0;
}

actc_status actc_evaluate(actc_model *m, actc_ctx *ctx, actc_source *src, actc_eval_result *r)
{
    if (!m || !ctx || !src || !r) return actc_set_error(ACTC_ERR_INVALID, "actc_evaluate: NULL argument");
    actc_status s = evaluate(m, NULL, ctx, src, 0, 1, r);
    if (s == ACTC_OK) eval_means(r);
    return s;
}

actc_status actc_trainer_evaluate(actc_trainer *t, actc_source *src, actc_eval_result *r)
{
    if (!t || !src || !r) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_evaluate: NULL argument");
    const int piped = t->pipe.stages > 1;
    actc_status s = evaluate(t->m, piped ? t : NULL, t->ctx, src, t->group.rank, t->group.size, r);
    double v[4] = {r->loss, r->accuracy, (double)r->rows, (double)r->samples};
    if (piped && t->pipe.stage != t->pipe.stages - 1) memset(v, 0, sizeof v); /* the last stage's */
    /* A failed rank still takes part in the sum, so the others do not wait
     * for it; its status fails this rank only. */
    actc_status gs = group_sum(t, v, 4);
    if (gs == ACTC_OK && piped) gs = t->pipe.sum(v, 4, t->pipe.user);
    if (s != ACTC_OK) return s;
    if (gs != ACTC_OK) return gs;
    r->loss = v[0];
    r->accuracy = v[1];
    r->rows = (long)v[2];
    r->samples = (long)v[3];
    eval_means(r);
    return ACTC_OK;
}
