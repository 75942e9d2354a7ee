/* The library's trainer: resumption equal to the uninterrupted run bit for
 * bit for every policy family at 1 and 2 threads (stopped mid-epoch), the
 * hooks (gradient-complete once per parameter, in reverse topological
 * order, before the update), micro-batches, a user-defined model through
 * the trainer and checkpoints, bad checkpoints refused without loading
 * half-way, the memory report and maxbatch through the API. */
#include "testutil.h"
#include "../src/train/train.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static char g_dir[64];

static int setup(void **state)
{
    (void)state;
    return tu_make_temp_dir(g_dir, sizeof g_dir, "actc_test_trainer");
}

static int teardown(void **state)
{
    (void)state;
    actc_shutdown();
    return tu_remove_dir(g_dir);
}

static void tpath(char *buf, const char *name) { snprintf(buf, 256, "%s/%s", g_dir, name); }

/* A corpus in memory: pseudo-text of n bytes, the last 10% held out. */
static actc_text_corpus corpus(size_t n)
{
    actc_text_corpus c;
    memset(&c, 0, sizeof c);
    c.data = malloc(n);
    assert_non_null(c.data);
    static const char words[] = "and the lord said unto them in that day ";
    for (size_t i = 0; i < n; i++) c.data[i] = (uint8_t)words[(i * 7 + i / 13) % (sizeof words - 1)];
    c.n = n;
    c.train_end = n - n / 10;
    snprintf(c.source, sizeof c.source, "memory");
    return c;
}

/* Random images in 10 classes. */
static actc_image_dataset images(int n, uint64_t seed)
{
    actc_image_dataset d = {n, 1, 28, 28, malloc((size_t)n * 784), malloc((size_t)n * sizeof(int32_t)), 10};
    for (size_t i = 0; i < (size_t)n * 784; i++) d.pixels[i] = (uint8_t)(255 * actc_rand_uniform(seed, i));
    for (int i = 0; i < n; i++) d.labels[i] = i % 10;
    return d;
}

/* A byte-level gpt of seed 3 (L layers of width W, H heads, context C). */
static actc_model *small_gpt(int L, int W, int H, int C)
{
    actc_model_opts mo = actc_model_default_opts();
    mo.n_layers = L;
    mo.width = W;
    mo.n_heads = H;
    mo.context = C;
    mo.vocab = 256;
    mo.seed = 3;
    actc_model *m = NULL;
    if (actc_model_create("gpt", &mo, &m) != ACTC_OK) fail_msg("gpt: %s", actc_last_error());
    return m;
}

static actc_model *tiny_gpt(void) { return small_gpt(2, 16, 2, 16); }

static actc_trainer *trainer_for(actc_model *m, const char *policy, const char *optim)
{
    actc_trainer_opts o = actc_trainer_default_opts();
    o.policy = policy;
    o.optim = optim;
    o.schedule.kind = ACTC_LR_COSINE;
    o.schedule.warmup_steps = 2;
    o.schedule.total_steps = 8;
    o.clip = 1.0f;
    o.controller.adapt_interval = 3;
    o.controller.estimate_samples = 2;
    actc_trainer *t = NULL;
    if (actc_trainer_new(m, &o, &t) != ACTC_OK) fail_msg("trainer %s: %s", policy, actc_last_error());
    return t;
}

/* Losses of steps [from, to) on src, in order (epochs of the source's
 * batches); the trainer's position decides where it starts. */
static void run_steps(actc_trainer *t, actc_source *src, uint64_t to, double *loss)
{
    while (actc_trainer_steps(t) < to) {
        actc_batch b;
        assert_int_equal(actc_source_get(src, actc_trainer_epoch(t), actc_trainer_batch_in_epoch(t), actc_trainer_steps(t), &b),
                         ACTC_OK);
        actc_step_result r;
        const uint64_t s = actc_trainer_steps(t);
        if (actc_trainer_step(t, &b, &r) != ACTC_OK) fail_msg("step %llu: %s", (unsigned long long)s, actc_last_error());
        loss[s] = r.loss;
        uint64_t e = actc_trainer_epoch(t), k = actc_trainer_batch_in_epoch(t) + 1;
        if (k == (uint64_t)actc_source_batches(src)) {
            e++;
            k = 0;
        }
        actc_trainer_set_position(t, actc_trainer_steps(t), e, k);
    }
}

static void params_copy(actc_model *m, float **out, size_t *n)
{
    actc_tensor **ps;
    int np = actc_model_state(m, &ps);
    *n = 0;
    for (int i = 0; i < np; i++) *n += ps[i]->numel;
    *out = malloc(*n * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        memcpy(*out + off, ps[i]->data, ps[i]->numel * sizeof(float));
        off += ps[i]->numel;
    }
}

#define STEPS 8
#define STOP 3 /* mid-way through the first epoch of 4 batches */

typedef actc_model *(*model_fn)(void);

/* The uninterrupted run against one stopped at STOP, saved, and resumed
 * by a new model and trainer from the file: equal losses and weights. */
static void resume_case(model_fn make, actc_source *src, const char *policy, const char *optim, int threads)
{
    actc_set_threads(threads);
    char path[256];
    tpath(path, "resume.ckpt");
    double full[STEPS], part[STEPS];
    actc_model *m = make();
    actc_trainer *t = trainer_for(m, policy, optim);
    run_steps(t, src, STEPS, full);
    float *w_full;
    size_t n;
    params_copy(m, &w_full, &n);
    actc_trainer_free(t);
    actc_model_free(m);

    m = make();
    t = trainer_for(m, policy, optim);
    run_steps(t, src, STOP, part);
    assert_int_equal(actc_trainer_set_note(t, "resumable"), ACTC_OK);
    if (actc_trainer_save(t, path) != ACTC_OK) fail_msg("save: %s", actc_last_error());
    actc_trainer_free(t);
    actc_model_free(m);

    m = make(); /* fresh weights: everything must come from the file */
    t = trainer_for(m, policy, optim);
    if (actc_trainer_load(t, path) != ACTC_OK) fail_msg("load %s: %s", policy, actc_last_error());
    assert_int_equal(actc_trainer_steps(t), STOP);
    assert_int_equal(actc_trainer_batch_in_epoch(t), STOP);
    assert_string_equal(actc_trainer_note(t), "resumable");
    run_steps(t, src, STEPS, part);
    for (int s = STOP; s < STEPS; s++)
        if (full[s] != part[s])
            fail_msg("%s, %d thread(s): step %d loss %.9g resumed vs %.9g uninterrupted", policy, threads, s, part[s],
                     full[s]);
    float *w_part;
    size_t n2;
    params_copy(m, &w_part, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(w_full, w_part, n * sizeof(float));
    printf("  %-10s %d thread(s): %d resumed steps equal bit for bit\n", policy, threads, STEPS - STOP);
    free(w_full);
    free(w_part);
    actc_trainer_free(t);
    actc_model_free(m);
}

static void test_resume_every_policy(void **state)
{
    (void)state;
    actc_text_corpus c = corpus(4000);
    actc_source *src;
    assert_int_equal(actc_source_text(&c, 4, 16, 7, 4, &src), ACTC_OK);
    /* compact with a new projection every 2 steps: the resumed run crosses
     * one, rebuilding P from the step, and restores r x m moments. */
    static const char *const policies[] = {"none",     "bf16",   "quant:3",           "actnn:L2",
                                           "actnn:L3", "division", "gact:4",          "gact:CB1",
                                           "compact:r=0.5,gap=2", "compact:r=0.25,gap=2,reset+gact:4",
                                           "compact:r=0.25,gap=2,proj=sparse", "agoq",
                                           "agoq:block=32,fmt=nf4,round=stochastic"};
    for (int threads = 1; threads <= 2; threads++)
        for (size_t i = 0; i < sizeof policies / sizeof *policies; i++)
            resume_case(tiny_gpt, src, policies[i], "adamw", threads);
    actc_source_free(src);
    actc_text_free(&c);
}

static actc_model *small_resnet(void)
{
    actc_model_opts mo = actc_model_default_opts();
    mo.seed = 5;
    actc_model *m = NULL;
    if (actc_model_create("resnet20", &mo, &m) != ACTC_OK) fail_msg("resnet20: %s", actc_last_error());
    return m;
}

/* Convolutions, batch norm's running statistics, SGD momentum and ActNN's
 * per-sample bits of convolution inputs. */
static void test_resume_resnet(void **state)
{
    (void)state;
    actc_image_dataset d = images(32, 11);
    actc_loader_opts lo = {0.3f, 0.35f, 2, 1, 1, 5};
    actc_source *src;
    assert_int_equal(actc_source_images(&d, 8, 1, &lo, &src), ACTC_OK);
    resume_case(small_resnet, src, "actnn:L3", "sgd", 2);
    resume_case(small_resnet, src, "gact:CB1", "sgd", 2);
    actc_source_free(src);
    actc_image_dataset_free(&d);
}

/* The test above would pass for a policy whose state is not needed: under
 * actnn:L3 a resume that loads only the weights and the optimizer (what
 * actc 0.1 did) must differ, or the test proves nothing. */
static void test_policy_state_matters(void **state)
{
    (void)state;
    actc_set_threads(2);
    actc_text_corpus c = corpus(4000);
    actc_source *src;
    assert_int_equal(actc_source_text(&c, 4, 16, 7, 4, &src), ACTC_OK);
    char path[256];
    tpath(path, "weights.ckpt");
    double full[STEPS], part[STEPS];
    actc_model *m = tiny_gpt();
    actc_trainer *t = trainer_for(m, "actnn:L3", "adamw");
    run_steps(t, src, STEPS, full);
    actc_trainer_free(t);
    actc_model_free(m);
    m = tiny_gpt();
    t = trainer_for(m, "actnn:L3", "adamw");
    run_steps(t, src, STOP, part);
    assert_int_equal(actc_checkpoint_save(path, m, actc_trainer_optim(t), NULL), ACTC_OK);
    actc_trainer_free(t);
    actc_model_free(m);
    m = tiny_gpt();
    t = trainer_for(m, "actnn:L3", "adamw");
    assert_int_equal(actc_checkpoint_load(path, m, actc_trainer_optim(t), NULL), ACTC_OK);
    actc_trainer_set_position(t, STOP, 0, STOP);
    run_steps(t, src, STEPS, part);
    int differ = 0;
    for (int s = STOP; s < STEPS; s++) differ += part[s] != full[s];
    assert_true(differ > 0);
    actc_trainer_free(t);
    actc_model_free(m);
    actc_source_free(src);
    actc_text_free(&c);
}

/* ---- hooks ---- */

typedef struct {
    actc_trainer *t;
    int n_params;
    int order[256];       /* parameter indices in event order            */
    int count[256];
    int events, afters, bad_order;
    uint64_t steps_at_event;
    float first_w;        /* a weight when its event came                */
} hook_log;

static actc_status on_grad(actc_trainer *t, actc_tensor *p, int index, void *user)
{
    hook_log *h = user;
    assert_true(index >= 0 && index < h->n_params);
    h->order[h->events++] = index;
    h->count[index]++;
    h->steps_at_event = actc_trainer_steps(t); /* before the update: not advanced */
    actc_tensor **ps;
    actc_model_params(actc_trainer_model(t), &ps);
    assert_ptr_equal(ps[index], p);
    if (index == 0) h->first_w = p->data[0];
    return ACTC_OK;
}

static actc_status on_after(actc_trainer *t, void *user)
{
    (void)t;
    hook_log *h = user;
    h->afters++;
    return ACTC_OK;
}

static void check_hooks(const char *policy, int accum)
{
    actc_set_threads(2);
    actc_text_corpus c = corpus(4000);
    actc_source *src;
    assert_int_equal(actc_source_text(&c, 4, 16, 7, 4, &src), ACTC_OK);
    actc_model *m = tiny_gpt();
    actc_trainer_opts o = actc_trainer_default_opts();
    o.policy = policy;
    o.optim = "adamw";
    o.accum = accum;
    o.controller.adapt_interval = 1; /* measuring passes every step: no events from them */
    o.controller.estimate_samples = 2;
    actc_trainer *t = NULL;
    assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_OK);
    hook_log h;
    memset(&h, 0, sizeof h);
    actc_tensor **ps;
    h.n_params = actc_model_params(m, &ps);
    h.t = t;
    actc_trainer_on_grad_complete(t, on_grad, &h);
    actc_trainer_on_after_backward(t, on_after, &h);
    for (int step = 0; step < 2; step++) {
        memset(h.count, 0, sizeof h.count);
        h.events = 0;
        actc_batch b;
        assert_int_equal(actc_source_get(src, 0, (uint64_t)step, (uint64_t)step, &b), ACTC_OK);
        const float w0 = ps[0]->data[0];
        assert_int_equal(actc_trainer_step(t, &b, NULL), ACTC_OK);
        /* Once per parameter, before the update (the weight the hook saw is
         * the old one, and the step count had not moved). */
        assert_int_equal(h.events, h.n_params);
        for (int i = 0; i < h.n_params; i++) assert_int_equal(h.count[i], 1);
        assert_true(h.first_w == w0);
        assert_true(ps[0]->data[0] != w0);
        assert_int_equal(h.steps_at_event, (uint64_t)step);
        assert_int_equal(h.afters, step + 1);
        /* Reverse topological order: the head and the last block's
         * parameters (created last) complete before the embeddings (first,
         * used first in forward).  Parameter 0 is the token embedding, tied
         * to the head: used first and last, it completes last. */
        assert_int_equal(h.order[h.n_params - 1], 0);
        int first_block = -1, last_block = -1;
        for (int i = 0; i < h.n_params; i++) {
            if (strncmp(ps[h.order[i]]->name, "h0.", 3) == 0 && first_block < 0) first_block = i;
            if (strncmp(ps[h.order[i]]->name, "h1.", 3) == 0) last_block = i;
        }
        if (first_block >= 0 && last_block >= 0) assert_true(last_block < first_block);
    }
    actc_trainer_free(t);
    actc_model_free(m);
    actc_source_free(src);
    actc_text_free(&c);
}

static void test_hooks(void **state)
{
    (void)state;
    check_hooks("none", 1);
    check_hooks("gact:4", 1);  /* measuring passes raise no events */
    check_hooks("gact:CB1", 2); /* segments recomputed in backward, two micro-batches */
}

/* ---- micro-batches ---- */

/* With accum = 2 the gradient is the whole batch's (to float rounding) and
 * the context before backward holds one micro-batch. */
static void test_accum(void **state)
{
    (void)state;
    actc_set_threads(2);
    actc_text_corpus c = corpus(4000);
    actc_source *src;
    assert_int_equal(actc_source_text(&c, 8, 16, 7, 4, &src), ACTC_OK);
    actc_batch b;
    assert_int_equal(actc_source_get(src, 0, 0, 0, &b), ACTC_OK);
    float *g[2];
    size_t ctx_bytes[2];
    double loss[2];
    size_t total = 0;
    for (int k = 0; k < 2; k++) {
        actc_model *m = tiny_gpt();
        actc_trainer_opts o = actc_trainer_default_opts();
        o.optim = "adamw";
        o.accum = k + 1;
        actc_trainer *t = NULL;
        assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_OK);
        actc_store_reset_peak(actc_trainer_ctx(t));
        actc_step_result r;
        assert_int_equal(actc_trainer_backward(t, &b, &r), ACTC_OK);
        loss[k] = r.loss;
        assert_int_equal(r.rows, 8 * 16);
        actc_store_stats ss;
        actc_store_get_stats(actc_trainer_ctx(t), &ss);
        ctx_bytes[k] = ss.stored_peak;
        actc_tensor **ps;
        int np = actc_model_params(m, &ps);
        total = 0;
        for (int i = 0; i < np; i++) total += ps[i]->numel;
        g[k] = malloc(total * sizeof(float));
        size_t off = 0;
        for (int i = 0; i < np; i++) {
            memcpy(g[k] + off, ps[i]->grad->data, ps[i]->numel * sizeof(float));
            off += ps[i]->numel;
        }
        actc_trainer_free(t);
        actc_model_free(m);
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < total; i++) {
        num += ((double)g[0][i] - g[1][i]) * ((double)g[0][i] - g[1][i]);
        den += (double)g[0][i] * g[0][i];
    }
    assert_true(sqrt(num / den) < 1e-5);
    assert_true(fabs(loss[0] - loss[1]) < 1e-6 * fabs(loss[0]));
    assert_true(ctx_bytes[1] * 10 < ctx_bytes[0] * 6); /* about half */
    printf("  accum 2: gradient within %.2g of the whole batch's, context %zu vs %zu bytes\n", sqrt(num / den),
           ctx_bytes[1], ctx_bytes[0]);
    free(g[0]);
    free(g[1]);
    actc_source_free(src);
    actc_text_free(&c);
}

/* ---- a user-defined model ---- */

typedef struct {
    actc_tensor *w1, *b1, *w2, *b2;
} user_net;

static actc_tensor *user_forward(actc_ctx *ctx, const actc_batch *b, void *user)
{
    user_net *n = user;
    actc_tensor *f = actc_flatten(ctx, b->x);
    actc_tensor *h = f ? actc_linear(ctx, f, n->w1, n->b1) : NULL;
    actc_tensor_release(f);
    actc_tensor *a = h ? actc_relu(ctx, h) : NULL;
    actc_tensor_release(h);
    actc_tensor *y = a ? actc_linear(ctx, a, n->w2, n->b2) : NULL;
    actc_tensor_release(a);
    return y;
}

static actc_model *user_model(user_net *n, uint64_t seed)
{
    int s1[2] = {32, 784}, s2[1] = {32}, s3[2] = {10, 32}, s4[1] = {10};
    n->w1 = actc_param_new(2, s1, "w1");
    n->b1 = actc_param_new(1, s2, "b1");
    n->w2 = actc_param_new(2, s3, "w2");
    n->b2 = actc_param_new(1, s4, "b2");
    actc_tensor *ps[4] = {n->w1, n->b1, n->w2, n->b2};
    for (int i = 0; i < 4; i++) tu_fill_uniform(ps[i], seed + (uint64_t)i, -0.05f, 0.05f);
    actc_model *m = NULL;
    if (actc_model_custom("user-mlp", ps, 4, NULL, 0, user_forward, n, &m) != ACTC_OK)
        fail_msg("custom: %s", actc_last_error());
    for (int i = 0; i < 4; i++) actc_tensor_release(ps[i]); /* the model holds them */
    return m;
}

static void test_user_model(void **state)
{
    (void)state;
    actc_set_threads(2);
    actc_image_dataset d = images(64, 3);
    actc_loader_opts lo = {0.3f, 0.35f, 0, 0, 1, 5};
    actc_source *src;
    assert_int_equal(actc_source_images(&d, 16, 1, &lo, &src), ACTC_OK);
    char path[256];
    tpath(path, "user.ckpt");
    user_net n1, n2;
    actc_model *m = user_model(&n1, 1);
    assert_int_equal(actc_model_is_custom(m), 1);
    actc_trainer_opts o = actc_trainer_default_opts();
    o.policy = "actnn:L3";
    actc_trainer *t = NULL;
    assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_OK);
    actc_epoch_result er;
    assert_int_equal(actc_trainer_train_epoch(t, src, NULL, NULL, &er), ACTC_OK);
    assert_int_equal(er.steps, 4);
    assert_int_equal(er.finished, 1);
    assert_int_equal(actc_trainer_epoch(t), 1);
    assert_int_equal(actc_trainer_save(t, path), ACTC_OK);
    double next[1];
    actc_batch b;
    assert_int_equal(actc_source_get(src, 1, 0, 4, &b), ACTC_OK);
    actc_step_result r;
    assert_int_equal(actc_trainer_step(t, &b, &r), ACTC_OK);
    next[0] = r.loss;
    actc_ckpt_info info;
    assert_int_equal(actc_checkpoint_info(path, &info), ACTC_OK);
    assert_int_equal(info.custom, 1);
    assert_string_equal(info.model, "user-mlp");
    assert_int_equal(info.has_trainer, 1);
    assert_string_equal(info.trainer.policy, "actnn:L3");
    assert_int_equal(info.epoch, 1);
    actc_model *none = NULL;
    assert_int_equal(actc_checkpoint_model(path, &none), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "actc_model_custom"));
    /* The user's own model, rebuilt with other weights, resumes. */
    actc_model *m2 = user_model(&n2, 99);
    actc_trainer *t2 = NULL;
    assert_int_equal(actc_trainer_new(m2, &info.trainer, &t2), ACTC_OK);
    assert_int_equal(actc_trainer_load(t2, path), ACTC_OK);
    assert_int_equal(actc_source_get(src, 1, 0, 4, &b), ACTC_OK);
    assert_int_equal(actc_trainer_step(t2, &b, &r), ACTC_OK);
    assert_true(r.loss == next[0]);
    actc_eval_result ev;
    assert_int_equal(actc_trainer_evaluate(t2, src, &ev), ACTC_OK);
    assert_int_equal(ev.rows, 64);
    assert_true(ev.accuracy >= 0 && ev.accuracy <= 1 && isfinite(ev.loss));
    actc_trainer_free(t);
    actc_trainer_free(t2);
    actc_model_free(m);
    actc_model_free(m2);
    actc_source_free(src);
    actc_image_dataset_free(&d);
}

static void test_custom_model_checks(void **state)
{
    (void)state;
    int s[1] = {4};
    actc_tensor *a = actc_param_new(1, s, "a"), *b = actc_param_new(1, s, "a"), *u = actc_param_new(1, s, "");
    actc_tensor *ab[2] = {a, b};
    actc_model *m = NULL;
    assert_int_equal(actc_model_custom("x", ab, 2, NULL, 0, user_forward, NULL, &m), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "two tensors are named 'a'"));
    assert_int_equal(actc_model_custom("x", &u, 1, NULL, 0, user_forward, NULL, &m), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "no name"));
    assert_int_equal(actc_model_custom("x", &a, 1, NULL, 0, NULL, NULL, &m), ACTC_ERR_INVALID);
    assert_null(m);
    actc_tensor_release(a);
    actc_tensor_release(b);
    actc_tensor_release(u);
}

/* ---- bad checkpoints for a trainer ---- */

typedef struct {
    unsigned char *b;
    size_t n;
} file_image;

static file_image slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    file_image im = {NULL, (size_t)ftell(f)};
    fseek(f, 0, SEEK_SET);
    im.b = malloc(im.n);
    assert_int_equal(fread(im.b, 1, im.n, f), im.n);
    fclose(f);
    return im;
}

static void spit(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A version 4 file with `cut` bytes removed from section `tag` and every
 * length and checksum made right again, so only the reader's parsing of
 * the section can notice.  part < 0: from the section's end; 0 or 1: from
 * the end of the LEARNT section's policy or controller state, whose own
 * length is fixed too. */
static void cut_section(file_image *im, uint32_t tag, int part, size_t cut)
{
    const size_t R = im->b[20] | (size_t)im->b[21] << 8 | (size_t)im->b[22] << 16;
    size_t pos = 24 + R + 4;
    while (pos < im->n - 4) {
        uint32_t tg = im->b[pos] | (uint32_t)im->b[pos + 1] << 8;
        uint64_t len = get64(im->b + pos + 4);
        if (tg == tag) {
            assert_true(len >= cut);
            size_t end = pos + 12 + len; /* where the bytes cut end */
            if (part >= 0) {
                size_t at = pos + 12 + 4 + (im->b[pos + 12] | (size_t)im->b[pos + 13] << 8); /* after the spec */
                if (part == 1) at += 8 + get64(im->b + at);
                const uint64_t plen = get64(im->b + at);
                assert_true(plen >= cut);
                put64(im->b + at, plen - cut);
                end = at + 8 + plen;
            }
            put64(im->b + pos + 4, len - cut);
            memmove(im->b + end - cut, im->b + end, im->n - end);
            im->n -= cut;
            put64(im->b + 12, im->n);
            put32(im->b + 24 + R, (uint32_t)crc32(crc32(0L, Z_NULL, 0), im->b, (uInt)(24 + R)));
            put32(im->b + im->n - 4, (uint32_t)crc32(crc32(0L, Z_NULL, 0), im->b, (uInt)(im->n - 4)));
            return;
        }
        pos += 12 + len;
    }
    fail_msg("no section %u", tag);
}

/* Load must fail with st and a message holding needle, changing nothing:
 * the weights, the position and the next step's loss stay. */
static void expect_refused(actc_trainer *t, const char *path, actc_status st, const char *needle)
{
    actc_model *m = actc_trainer_model(t);
    float *before, *after;
    size_t n, n2;
    params_copy(m, &before, &n);
    const uint64_t steps = actc_trainer_steps(t);
    actc_status s = actc_trainer_load(t, path);
    if (s != st || !strstr(actc_last_error(), needle))
        fail_msg("%s: expected %s with '%s', got %s: %s", path, actc_status_name(st), needle, actc_status_name(s),
                 actc_last_error());
    params_copy(m, &after, &n2);
    assert_memory_equal(before, after, n * sizeof(float));
    assert_int_equal(actc_trainer_steps(t), steps);
    free(before);
    free(after);
}

static void test_bad_trainer_checkpoints(void **state)
{
    (void)state;
    actc_set_threads(2);
    actc_text_corpus c = corpus(4000);
    actc_source *src;
    assert_int_equal(actc_source_text(&c, 4, 16, 7, 4, &src), ACTC_OK);
    char good[256], bad[256];
    tpath(good, "good.ckpt");
    tpath(bad, "bad.ckpt");
    double loss[STEPS];
    actc_model *m = tiny_gpt();
    actc_trainer *t = trainer_for(m, "gact:4", "adamw");
    run_steps(t, src, 2, loss);
    assert_int_equal(actc_trainer_save(t, good), ACTC_OK);
    actc_trainer_free(t);
    actc_model_free(m);

    /* The trainer that must stay untouched: same model, other state. */
    m = tiny_gpt();
    t = trainer_for(m, "gact:4", "adamw");
    run_steps(t, src, 1, loss);
    /* Another policy. */
    actc_trainer *t3 = trainer_for(m, "actnn:L3", "adamw");
    expect_refused(t3, good, ACTC_ERR_INVALID, "trained with policy gact:4");
    actc_trainer_free(t3);
    /* Another optimizer. */
    t3 = trainer_for(m, "gact:4", "sgd");
    expect_refused(t3, good, ACTC_ERR_INVALID, "adamw optimizer state, not sgd");
    actc_trainer_free(t3);
    /* Another shape. */
    actc_model_opts mo = *actc_model_get_opts(m);
    mo.width = 32;
    actc_model *wide = NULL;
    assert_int_equal(actc_model_create("gpt", &mo, &wide), ACTC_OK);
    t3 = trainer_for(wide, "gact:4", "adamw");
    expect_refused(t3, good, ACTC_ERR_INVALID, "shape");
    actc_trainer_free(t3);
    actc_model_free(wide);
    /* Another model. */
    actc_model *mlp = NULL;
    assert_int_equal(actc_model_create("mlp", NULL, &mlp), ACTC_OK);
    t3 = trainer_for(mlp, "gact:4", "adamw");
    expect_refused(t3, good, ACTC_ERR_INVALID, "holds model gpt, not mlp");
    actc_trainer_free(t3);
    actc_model_free(mlp);
    /* The learnt state's section, its policy state and its controller
     * state cut short (checksums recomputed, so only the parsers can
     * tell). */
    for (int part = -1; part <= 1; part++) {
        file_image im = slurp(good);
        cut_section(&im, 6, part, 8);
        spit(bad, im.b, im.n);
        expect_refused(t, bad, ACTC_ERR_FORMAT, part < 0 ? "malformed: section 6" : part ? "controller state" : "policy state");
        free(im.b);
    }
    /* A damaged byte in the policy section: the checksum. */
    file_image im = slurp(good);
    im.b[im.n - 40] ^= 4;
    spit(bad, im.b, im.n);
    expect_refused(t, bad, ACTC_ERR_FORMAT, "checksum mismatch");
    free(im.b);
    /* The good file loads into the same trainer. */
    assert_int_equal(actc_trainer_load(t, good), ACTC_OK);
    assert_int_equal(actc_trainer_steps(t), 2);
    actc_trainer_free(t);
    actc_model_free(m);
    actc_source_free(src);
    actc_text_free(&c);
}

/* tests/data/gpt_gact_v4.ckpt was written before the LEARNT section (the
 * policy's state and the controller's in POLICY and CONTROLLER sections),
 * by actc at commit 0709c4e: a 1-layer gpt of width 8 (heads 1, context 8,
 * vocabulary 256, seed 3) under gact:4 with SGD, adapt_interval 2 and
 * estimate_samples 2, after 3 steps on corpus(2000) in windows of 8, batch
 * 4, at 2 threads.  It loads with its learnt state (a fresh GACT has
 * neither sensitivities nor a compression variance), and written again as
 * LEARNT it gives a trainer that goes on exactly as the first one. */
static actc_trainer *old_fixture_trainer(actc_model **m)
{
    *m = small_gpt(1, 8, 1, 8);
    actc_trainer_opts o = actc_trainer_default_opts();
    o.policy = "gact:4";
    o.optim = "sgd";
    o.controller.adapt_interval = 2;
    o.controller.estimate_samples = 2;
    actc_trainer *t = NULL;
    assert_int_equal(actc_trainer_new(*m, &o, &t), ACTC_OK);
    return t;
}

static void test_old_learnt_sections(void **state)
{
    (void)state;
    actc_set_threads(2);
    char old[512], again[256];
    snprintf(old, sizeof old, "%s/tests/data/gpt_gact_v4.ckpt", tu_source_dir());
    tpath(again, "learnt_again.ckpt");
    actc_text_corpus c = corpus(2000);
    actc_source *src;
    assert_int_equal(actc_source_text(&c, 4, 8, 7, 4, &src), ACTC_OK);
    actc_model *m1, *m2;
    actc_trainer *t1 = old_fixture_trainer(&m1), *t2 = old_fixture_trainer(&m2);
    double fresh_comp, fresh_overall;
    actc_controller_variances(actc_trainer_controller(t1), &fresh_comp, &fresh_overall);
    assert_true(fresh_comp == 0.0);
    if (actc_trainer_load(t1, old) != ACTC_OK) fail_msg("%s: %s", old, actc_last_error());
    assert_int_equal(actc_trainer_steps(t1), 3);
    double comp1, overall1, comp2, overall2;
    actc_controller_variances(actc_trainer_controller(t1), &comp1, &overall1);
    assert_true(comp1 > 0.0);
    actc_saved_info info1[64], info2[64];
    const int n1 = actc_controller_tensors(actc_trainer_controller(t1), info1, 64);
    assert_true(n1 > 0 && n1 <= 64);
    for (int i = 0; i < n1; i++) assert_true(info1[i].sensitivity >= 0.0);
    assert_int_equal(actc_trainer_save(t1, again), ACTC_OK);
    assert_int_equal(actc_trainer_load(t2, again), ACTC_OK);
    actc_controller_variances(actc_trainer_controller(t2), &comp2, &overall2);
    assert_true(comp1 == comp2 && overall1 == overall2);
    assert_int_equal(actc_controller_tensors(actc_trainer_controller(t2), info2, 64), n1);
    for (int i = 0; i < n1; i++)
        assert_true(info1[i].sensitivity == info2[i].sensitivity && info1[i].bits == info2[i].bits);
    double l1[8], l2[8];
    run_steps(t1, src, 6, l1); /* a measurement falls at step 4 */
    run_steps(t2, src, 6, l2);
    for (int s = 3; s < 6; s++)
        if (l1[s] != l2[s]) fail_msg("step %d: %.9g from the old sections, %.9g from LEARNT", s, l1[s], l2[s]);
    actc_trainer_free(t1);
    actc_trainer_free(t2);
    actc_model_free(m1);
    actc_model_free(m2);
    actc_source_free(src);
    actc_text_free(&c);
}

/* ---- options, report, maxbatch ---- */

static void test_bad_options(void **state)
{
    (void)state;
    actc_model *m = tiny_gpt();
    actc_trainer *t = NULL;
    actc_trainer_opts o = actc_trainer_default_opts();
    o.optim = "adam";
    assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "unknown optimizer 'adam'"));
    o = actc_trainer_default_opts();
    o.policy = "quant:9";
    assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_ERR_INVALID);
    o = actc_trainer_default_opts();
    o.schedule.kind = ACTC_LR_COSINE;
    o.lr = 0.01f;
    o.schedule.min_lr = 0.5f; /* a "decay" that would raise the rate */
    assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "floor"));
    o = actc_trainer_default_opts();
    o.schedule.kind = ACTC_LR_STEP;
    o.schedule.step_size = 10;
    o.schedule.gamma = 2.0f;
    assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_ERR_INVALID);
    o = actc_trainer_default_opts();
    o.accum = 0;
    assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_ERR_INVALID);
    assert_null(t);
    /* Every option the trainer takes is checked by it, and the same check
     * runs without a model (what a command calls before loading data). */
    static const struct {
        const char *field, *message;
    } bad[] = {{"momentum", "momentum 1,"}, {"beta1", "beta1 -0.5 and"}, {"beta2", "beta2 nan must"}, {"eps", "eps 0 must"},
               {"clip", "clip inf must"}, {"grad_bits", "grad_bits 4"}, {"adapt_interval", "adapt_interval 0"},
               {"alert", "alert_fraction inf"}, {"policy", "quant:9"}, {"wd", "weight decay nan"},
               {"min_lr", "min lr -1 must"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        o = actc_trainer_default_opts();
        const char *f = bad[i].field;
        if (!strcmp(f, "momentum")) o.momentum = 1.0f;
        if (!strcmp(f, "beta1")) o.beta1 = -0.5f;
        if (!strcmp(f, "beta2")) o.beta2 = NAN;
        if (!strcmp(f, "eps")) o.eps = 0.0f;
        if (!strcmp(f, "clip")) o.clip = INFINITY;
        if (!strcmp(f, "grad_bits")) o.grad_bits = 4;
        if (!strcmp(f, "adapt_interval")) o.controller.adapt_interval = 0;
        if (!strcmp(f, "alert")) o.controller.alert_fraction = INFINITY;
        if (!strcmp(f, "policy")) o.policy = "quant:9";
        if (!strcmp(f, "wd")) o.weight_decay = NAN;
        if (!strcmp(f, "min_lr")) o.schedule.min_lr = -1.0f; /* a constant rate: lr_check reads no floor */
        assert_int_equal(actc_trainer_check_opts(&o), ACTC_ERR_INVALID);
        if (!strstr(actc_last_error(), bad[i].message)) fail_msg("%s: '%s'", f, actc_last_error());
        assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_ERR_INVALID);
        assert_null(t);
    }
    o = actc_trainer_default_opts();
    assert_int_equal(actc_trainer_check_opts(&o), ACTC_OK);
    assert_int_equal(actc_trainer_check_opts(NULL), ACTC_OK);
    /* A batch without labels for a built-in model. */
    assert_int_equal(actc_trainer_new(m, NULL, &t), ACTC_OK);
    int32_t ids[16] = {0};
    actc_batch b = {.ids = ids, .B = 1, .T = 16};
    assert_int_equal(actc_trainer_step(t, &b, NULL), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "no labels"));
    assert_int_equal(actc_trainer_steps(t), 0);
    actc_trainer_free(t);
    actc_model_free(m);
}

/* The recipes of the model families: images SGD under a cosine schedule,
 * language models AdamW with beta2 0.99 and clipping, graph networks AdamW
 * at the papers' rate and decay, constant; each passes the trainer's
 * checks. */
static void test_recipes(void **state)
{
    (void)state;
    const actc_trainer_opts def = actc_trainer_default_opts();
    actc_trainer_opts o = actc_trainer_opts_for_model("resnet20");
    assert_string_equal(o.optim, "sgd");
    assert_int_equal(o.schedule.kind, ACTC_LR_COSINE);
    assert_int_equal(o.schedule.warmup_steps, 50);
    assert_true(o.lr == 0.0f && o.weight_decay < 0 && o.clip == 0.0f && o.beta2 == def.beta2);
    assert_int_equal(actc_trainer_check_opts(&o), ACTC_OK);
    actc_trainer_opts n = actc_trainer_opts_for_model(NULL); /* an image classifier's */
    assert_true(!strcmp(n.optim, "sgd") && n.schedule.kind == ACTC_LR_COSINE && n.schedule.warmup_steps == 50);
    o = actc_trainer_opts_for_model("llama-mini");
    assert_string_equal(o.optim, "adamw");
    assert_true(o.beta2 == 0.99f && o.clip == 1.0f && o.lr == 0.0f);
    assert_int_equal(o.schedule.kind, ACTC_LR_COSINE);
    assert_int_equal(actc_trainer_check_opts(&o), ACTC_OK);
    o = actc_trainer_opts_for_model("gat");
    assert_string_equal(o.optim, "adamw");
    assert_true(o.lr == 0.01f && o.weight_decay == 5e-4f);
    assert_int_equal(o.schedule.kind, ACTC_LR_CONSTANT);
    assert_int_equal(o.schedule.warmup_steps, 0);
    assert_int_equal(actc_trainer_check_opts(&o), ACTC_OK);
    /* The rest is the defaults'. */
    assert_true(o.seed == def.seed && o.accum == def.accum && o.momentum == def.momentum);
}

static int starts(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

/* Logs each step's record from the progress callback. */
static int log_steps(actc_trainer *t, const actc_progress *p, void *user)
{
    (void)t;
    assert_int_equal(actc_log_step(user, p, "tokens", 123.0), ACTC_OK);
    return 0;
}

/* The run's JSON lines: one record a line with the figures of the step,
 * the epoch and the controller, written by the library; a failed write is
 * an error, not a lost record. */
static void test_log_records(void **state)
{
    (void)state;
    actc_text_corpus c = corpus(4096);
    actc_source *src = NULL, *ev = NULL;
    assert_int_equal(actc_source_text(&c, 4, 16, 7, 3, &src), ACTC_OK);
    assert_int_equal(actc_source_text_eval(&c, 16, 256, 4, &ev), ACTC_OK);
    actc_model *m = tiny_gpt();
    actc_trainer *t = trainer_for(m, "gact:4", "adamw");
    char path[256];
    tpath(path, "run.jsonl");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    actc_epoch_result er;
    assert_int_equal(actc_trainer_train_epoch(t, src, log_steps, f, &er), ACTC_OK);
    actc_eval_result val;
    assert_int_equal(actc_trainer_evaluate(t, ev, &val), ACTC_OK);
    const actc_log_epoch_info li = {"gpt", 4, 16, "val", &val, NULL, NULL};
    assert_int_equal(actc_log_epoch(f, t, &er, &li), ACTC_OK);
    assert_int_equal(actc_log_adapt(f, actc_trainer_controller(t), 0), ACTC_OK);
    assert_int_equal(actc_log_alert(f, actc_trainer_controller(t), 2), ACTC_OK);
    fclose(f);
    char line[8192], want[128];
    f = fopen(path, "r");
    assert_non_null(f);
    for (int step = 1; step <= 3; step++) { /* the steps, in order */
        assert_non_null(fgets(line, sizeof line, f));
        snprintf(want, sizeof want, "{\"event\":\"step\",\"epoch\":1,\"step\":%d,\"loss\":", step);
        assert_true(starts(line, want));
        assert_non_null(strstr(line, "\"tokens_per_s\":123.00}\n"));
    }
    assert_non_null(fgets(line, sizeof line, f));
    snprintf(want, sizeof want, "\"val_loss\":%.6f,\"val_bpb\":%.6f,\"seq\":16,", val.loss, val.loss / M_LN2);
    assert_true(starts(line, "{\"event\":\"epoch\",\"epoch\":1,\"step\":3,\"model\":\"gpt\",\"policy\":\"gact:4"));
    assert_non_null(strstr(line, want));
    snprintf(want, sizeof want, "\"train_loss\":%.6f,", er.loss);
    assert_non_null(strstr(line, want));
    assert_null(strstr(line, "test_acc")); /* no test set given */
    assert_null(strstr(line, "comm"));
    assert_non_null(strstr(line, "\"memory\":{"));
    assert_non_null(strstr(line, "}}\n"));
    assert_non_null(fgets(line, sizeof line, f));
    assert_true(starts(line, "{\"event\":\"adapt\",\"step\":0,\"tensors\":[{\"scope\":"));
    assert_non_null(fgets(line, sizeof line, f));
    assert_true(starts(line, "{\"event\":\"variance_alert\",\"step\":2,\"compression_variance\":"));
    assert_null(fgets(line, sizeof line, f));
    fclose(f);
    /* Refusals: a NULL argument, a write that fails (a full disk). */
    assert_int_equal(actc_log_epoch(NULL, t, &er, &li), ACTC_ERR_INVALID);
    const actc_log_epoch_info unnamed = {"gpt", 4, 16, NULL, &val, NULL, NULL};
    assert_int_equal(actc_log_epoch(stderr, t, &er, &unnamed), ACTC_ERR_INVALID);
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        assert_int_equal(actc_log_epoch(full, t, &er, &li), ACTC_ERR_IO);
        fclose(full);
    }
    actc_trainer_free(t);
    actc_model_free(m);
    actc_source_free(src);
    actc_source_free(ev);
    actc_text_free(&c);
}

/* Gradients held in bf16 between two micro-batches: the trainer steps on
 * them, and the memory report shows their bytes by form. */
static void test_encoded_gradients_in_trainer(void **state)
{
    (void)state;
    actc_set_threads(2);
    actc_text_corpus c = corpus(4000);
    actc_source *src;
    assert_int_equal(actc_source_text(&c, 4, 16, 7, 2, &src), ACTC_OK);
    double loss[2][16];
    char text[4096], json[4096];
    for (int enc = 0; enc < 2; enc++) {
        actc_model *m = tiny_gpt();
        actc_tensor **p;
        const int np = actc_model_params(m, &p);
        size_t numel = 0;
        for (int i = 0; i < np; i++) {
            numel += p[i]->numel;
            if (enc) assert_int_equal(actc_param_set_grad_codec(p[i], "bf16"), ACTC_OK);
        }
        actc_trainer_opts o = actc_trainer_default_opts();
        o.optim = "adamw";
        o.accum = 2;
        o.clip = 1.0f;
        actc_trainer *t = NULL;
        assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_OK);
        run_steps(t, src, 12, loss[enc]);
        if (enc) {
            assert_int_equal(actc_trainer_train_epoch(t, src, NULL, NULL, NULL), ACTC_OK);
            actc_trainer_report(t, ACTC_REPORT_TEXT, text, sizeof text);
            actc_trainer_report(t, ACTC_REPORT_JSON, json, sizeof json);
            char want[160];
            snprintf(want, sizeof want, "\"gradients\":{\"dense\":0,\"lowrank\":0,\"encoded\":%zu,\"fp32\":%zu}",
                     numel * 2, numel * 4);
            if (!strstr(json, want)) fail_msg("%s not in %s", want, json);
            assert_non_null(strstr(text, "gradients before the update: dense 0 B, low-rank 0 B, encoded"));
        }
        actc_trainer_free(t);
        actc_model_free(m);
    }
    /* The first step's loss comes before any update; then bf16 gradients
     * move the losses a little, not far. */
    assert_true(loss[0][0] == loss[1][0]);
    int differ = 0;
    for (int s = 1; s < 12; s++) {
        differ += loss[0][s] != loss[1][s];
        assert_true(fabs(loss[1][s] - loss[0][s]) < 0.02 * loss[0][s]);
    }
    assert_true(differ > 0);
    actc_source_free(src);
    actc_text_free(&c);
}

static void test_report_and_maxbatch(void **state)
{
    (void)state;
    actc_set_threads(2);
    actc_text_corpus c = corpus(4000);
    actc_source *src;
    assert_int_equal(actc_source_text(&c, 4, 16, 7, 2, &src), ACTC_OK);
    actc_model *m = tiny_gpt();
    actc_trainer *t = trainer_for(m, "quant:2", "adamw");
    assert_int_equal(actc_trainer_train_epoch(t, src, NULL, NULL, NULL), ACTC_OK);
    char small[16], text[4096], json[4096];
    const int need = actc_trainer_report(t, ACTC_REPORT_TEXT, small, sizeof small);
    assert_int_equal(strlen(small), sizeof small - 1); /* cut, NUL-terminated */
    assert_true(need > (int)sizeof small);
    assert_int_equal(actc_trainer_report(t, ACTC_REPORT_TEXT, text, sizeof text), need);
    assert_non_null(strstr(text, "context before backward: stored"));
    assert_non_null(strstr(text, "CONTEXT"));
    actc_trainer_report(t, ACTC_REPORT_JSON, json, sizeof json);
    assert_true(json[0] == '{' && json[strlen(json) - 1] == '}');
    assert_non_null(strstr(json, "\"context_ratio\":"));
    actc_store_stats ss;
    actc_store_get_stats(actc_trainer_ctx(t), &ss);
    /* 2-bit saves, but the loss's probabilities (256 per token) stay fp32. */
    const double ratio = actc_context_ratio(&ss);
    assert_true(ratio > 1.5 && strstr(json, "\"context_ratio\":") != NULL);
    actc_trainer_free(t);
    actc_model_free(m);
    actc_source_free(src);
    actc_text_free(&c);

    actc_maxbatch_opts mo = actc_maxbatch_default_opts();
    mo.model = "mlp";
    mo.model_opts.width = 64;
    mo.budget = 6u << 20;
    mo.start = 64;
    mo.limit = 4096;
    mo.trainer.policy = "none";
    actc_maxbatch_result r;
    assert_int_equal(actc_maxbatch(&mo, NULL, NULL, &r), ACTC_OK);
    assert_true(r.batch >= 64 && r.failing == r.batch + 1 && r.peak <= mo.budget);
    int none = r.batch;
    mo.trainer.policy = "actnn:L3";
    assert_int_equal(actc_maxbatch(&mo, NULL, NULL, &r), ACTC_OK);
    assert_true(r.batch > none); /* compression fits a larger batch */
    printf("  maxbatch mlp in 6 MiB: none %d, actnn:L3 %d\n", none, r.batch);
    mo.budget = 1u << 10;
    assert_int_equal(actc_maxbatch(&mo, NULL, NULL, &r), ACTC_ERR_OOM);
    assert_non_null(strstr(actc_last_error(), "not even batch 64"));
}

static actc_model *dropout_mlp(void)
{
    actc_model_opts mo = actc_model_default_opts();
    mo.width = 32;
    mo.dropout = 0.25f;
    mo.seed = 2;
    actc_model *m = NULL;
    if (actc_model_create("mlp", &mo, &m) != ACTC_OK) fail_msg("mlp: %s", actc_last_error());
    return m;
}

/* One trainer step of a fresh model under policy on b: the store's figures. */
static actc_store_stats one_step(model_fn make, const char *policy, const actc_batch *b, actc_model **keep)
{
    actc_model *m = make();
    actc_trainer *t = trainer_for(m, policy, "sgd");
    actc_step_result r;
    if (actc_trainer_step(t, b, &r) != ACTC_OK) fail_msg("%s: %s", policy, actc_last_error());
    actc_store_stats ss;
    actc_store_get_stats(actc_trainer_ctx(t), &ss);
    actc_trainer_free(t);
    if (keep) *keep = m;
    else actc_model_free(m);
    return ss;
}

/* The memory report's reference: what `none` keeps for the step, which
 * the trainer measures by a counting forward that keeps nothing, equals a
 * real step under none, kind by kind, for an image model (batch norm, ReLU
 * masks), an mlp with dropout (its masks) and a transformer, under
 * policies that change what is saved and not only how (recompute regions,
 * segments, projections).  The counting forward changes nothing: the
 * batch-norm running statistics after a trainer step are those of one
 * plain forward. */
static void test_none_reference(void **state)
{
    (void)state;
    actc_set_threads(2);
    actc_image_dataset d = images(16, 13);
    actc_loader_opts lo = {0.3f, 0.35f, 0, 0, 1, 5};
    actc_text_corpus c = corpus(4000);
    actc_source *isrc, *tsrc;
    assert_int_equal(actc_source_images(&d, 8, 1, &lo, &isrc), ACTC_OK);
    assert_int_equal(actc_source_text(&c, 4, 16, 7, 1, &tsrc), ACTC_OK);
    static const struct {
        model_fn make;
        int text;
        const char *policies[4];
    } cases[] = {{small_resnet, 0, {"quant:2", "gact:CB1", "agoq", NULL}},
                 {dropout_mlp, 0, {"actnn:L3", "agoq", NULL}},
                 {tiny_gpt, 1, {"gact:CB2", "agoq", "compact:r=0.5+gact:4", "division"}}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        actc_batch b;
        assert_int_equal(actc_source_get(cases[i].text ? tsrc : isrc, 0, 0, 0, &b), ACTC_OK);
        actc_model *m1;
        const actc_store_stats none = one_step(cases[i].make, "none", &b, &m1);
        assert_true(none.context_bytes > 0);
        assert_int_equal(none.context_none, none.context_bytes); /* counted = kept */
        assert_memory_equal(none.context_none_by_kind, none.context_by_kind, sizeof none.context_by_kind);
        for (int k = 0; k < 4 && cases[i].policies[k]; k++) {
            const actc_store_stats ss = one_step(cases[i].make, cases[i].policies[k], &b, NULL);
            if (ss.context_none != none.context_bytes)
                fail_msg("%s: reference %zu, a step under none keeps %zu", cases[i].policies[k], ss.context_none,
                         none.context_bytes);
            assert_memory_equal(ss.context_none_by_kind, none.context_by_kind, sizeof none.context_by_kind);
            assert_true(ss.context_bytes < ss.context_none);
            assert_true(ss.context_backward_peak >= ss.context_bytes);
        }
        /* The state after the trainer's step against one plain forward and
         * backward of the same batch on a fresh model. */
        actc_model *m2 = cases[i].make();
        actc_ctx *ctx = actc_ctx_new();
        actc_tensor *y = actc_model_forward_batch(m2, ctx, &b);
        assert_non_null(y);
        actc_tensor *loss = actc_cross_entropy(ctx, y, b.labels, -1, NULL);
        assert_non_null(loss);
        assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
        actc_tensor_release(loss);
        actc_tensor_release(y);
        actc_tensor **p1, **s1, **s2;
        const int np = actc_model_params(m1, &p1), ns = actc_model_state(m1, &s1);
        assert_int_equal(actc_model_state(m2, &s2), ns);
        for (int j = np; j < ns; j++) assert_memory_equal(s1[j]->data, s2[j]->data, s1[j]->numel * sizeof(float));
        if (i == 0) assert_true(ns > np); /* the resnet has running statistics to compare */
        actc_ctx_free(ctx);
        actc_model_free(m1);
        actc_model_free(m2);
    }
    actc_source_free(isrc);
    actc_source_free(tsrc);
    actc_image_dataset_free(&d);
    actc_text_free(&c);
}

/* A counting context keeps nothing and refuses what needs what it kept. */
static void test_counting_context(void **state)
{
    (void)state;
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_counting(ctx, 1), ACTC_OK);
    int shp[2] = {64, 32};
    actc_tensor *x = actc_param_new(2, shp, "x");
    actc_tensor *h = actc_tensor_new(ACTC_MEM_ACT, 2, shp);
    for (size_t i = 0; i < h->numel; i++) h->data[i] = (float)i - 1000.0f;
    actc_tensor *a = actc_mul(ctx, h, x); /* saves h and x */
    assert_non_null(a);
    actc_store_stats ss;
    actc_store_get_stats(ctx, &ss);
    assert_true(ss.stored_bytes >= h->numel * sizeof(float));
    actc_mem_stats ms;
    actc_mem_get_stats(&ms);
    assert_int_equal(ms.current[ACTC_MEM_CONTEXT], 0); /* nothing held */
    assert_int_equal(actc_ctx_set_counting(ctx, 0), ACTC_ERR_STATE); /* not while a tape is recorded */
    int32_t labels[64] = {0};
    actc_tensor *l = actc_cross_entropy(ctx, a, labels, -1, NULL);
    assert_non_null(l);
    assert_int_equal(actc_backward(ctx, l), ACTC_ERR_STATE);
    assert_non_null(strstr(actc_last_error(), "counting"));
    actc_store_get_stats(ctx, &ss);
    assert_int_equal(ss.stored_bytes, 0); /* the failed backward dropped the tape */
    assert_int_equal(actc_ctx_set_counting(ctx, 0), ACTC_OK);
    assert_int_equal(actc_ctx_set_counting(NULL, 1), ACTC_ERR_INVALID);
    actc_tensor_release(l);
    actc_tensor_release(a);
    actc_tensor_release(h);
    actc_tensor_release(x);
    actc_ctx_free(ctx);
}

/* Count of an operator's forwards and backwards in the profile (-1: absent). */
static void op_calls(const actc_op_time *ops, int n, const char *op, long *fw, long *bw)
{
    *fw = *bw = -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(ops[i].op, op)) {
            *fw = ops[i].forward_calls;
            *bw = ops[i].backward_calls;
        }
}

/* The operator profile: the step's operators by name, in order of time,
 * their calls counted, the times inside the trainer's forward and backward
 * (nested recompute nodes charged once, to themselves: a checkpointed run
 * has the same linear backwards as a plain one), and its edges. */
static void test_profile(void **state)
{
    (void)state;
    enum { PSTEPS = 2, NB = 2, NT = 16 };
    int32_t ids[NB * NT], labels[NB * NT];
    for (int i = 0; i < NB * NT; i++) {
        ids[i] = (i * 37) % 256;
        labels[i] = (i * 11 + 5) % 256;
    }
    const actc_batch b = {.ids = ids, .B = NB, .T = NT, .labels = labels};
    const char *policies[] = {"none", "gact:CKPT"};
    long linear_bw[2] = {0}, linear_fw[2] = {0};
    for (int p = 0; p < 2; p++) {
        actc_model *m = tiny_gpt();
        actc_trainer *t = trainer_for(m, policies[p], "adamw");
        actc_ctx *ctx = actc_trainer_ctx(t);
        assert_int_equal(actc_ctx_profile_get(ctx, NULL, 0), 0); /* not profiling */
        actc_step_result r;
        assert_int_equal(actc_trainer_step(t, &b, &r), ACTC_OK);
        assert_int_equal(actc_ctx_profile_start(ctx), ACTC_OK);
        double fb = 0;
        for (int s = 0; s < PSTEPS; s++) {
            assert_int_equal(actc_trainer_step(t, &b, &r), ACTC_OK);
            fb += r.forward_s + r.backward_s;
        }
        actc_op_time ops[64];
        const int n = actc_ctx_profile_get(ctx, ops, 64);
        assert_true(n >= 4 && n < 64);
        double sum = 0;
        for (int i = 0; i < n; i++) {
            assert_true(ops[i].forward_s >= 0 && ops[i].backward_s >= 0);
            if (i) assert_true(ops[i - 1].forward_s + ops[i - 1].backward_s >= ops[i].forward_s + ops[i].backward_s);
            assert_true(ops[i].forward_calls % PSTEPS == 0 && ops[i].backward_calls % PSTEPS == 0);
            sum += ops[i].forward_s + ops[i].backward_s;
        }
        assert_true(sum <= fb * 1.0001 + 1e-6); /* sub-intervals of the trainer's, none counted twice */
        long fw, bw;
        op_calls(ops, n, "cross_entropy", &fw, &bw);
        assert_int_equal(fw, PSTEPS);
        assert_int_equal(bw, PSTEPS);
        op_calls(ops, n, "linear", &linear_fw[p], &linear_bw[p]);
        /* Starting over empties the table; stopping frees it. */
        assert_int_equal(actc_ctx_profile_start(ctx), ACTC_OK);
        assert_int_equal(actc_ctx_profile_get(ctx, ops, 64), 0);
        actc_ctx_profile_stop(ctx);
        actc_ctx_profile_stop(ctx);
        assert_int_equal(actc_trainer_step(t, &b, &r), ACTC_OK);
        assert_int_equal(actc_ctx_profile_get(ctx, ops, 64), 0);
        actc_trainer_free(t);
        actc_model_free(m);
    }
    /* A tiny gpt: q, k, v, the projection and two MLP products in each of
     * 2 blocks, and the head. */
    assert_int_equal(linear_fw[0], PSTEPS * 13);
    assert_int_equal(linear_bw[0], PSTEPS * 13);
    assert_int_equal(linear_bw[1], linear_bw[0]);  /* recomputed ones charged to themselves */
    assert_true(linear_fw[1] < linear_fw[0]);      /* their forwards are the regions' */
    assert_int_equal(actc_ctx_profile_start(NULL), ACTC_ERR_INVALID);
    assert_int_equal(actc_ctx_profile_get(NULL, NULL, 0), 0);
    actc_ctx_profile_stop(NULL);
}

/* Per-rank policy states in a checkpoint (what actc_dist_save writes under
 * mpirun): rank 1's learnt state goes back to rank 1, byte for byte; a
 * file of another rank count, or one without the section, changes nothing. */
static void test_rank_states(void **state)
{
    (void)state;
    enum { NB = 2, NT = 16 };
    int32_t ids[NB * NT], labels[NB * NT], ids2[NB * NT];
    for (int i = 0; i < NB * NT; i++) {
        ids[i] = (i * 37) % 256;
        ids2[i] = (i * 91 + 7) % 256;
        labels[i] = (i * 11 + 5) % 256;
    }
    const actc_batch b0 = {.ids = ids, .B = NB, .T = NT, .labels = labels};
    const actc_batch b1 = {.ids = ids2, .B = NB, .T = NT, .labels = labels};
    const char *policies[] = {"actnn:L3", "gact:4"};
    for (int p = 0; p < 2; p++) {
        actc_model *m0 = tiny_gpt(), *m1 = tiny_gpt(), *m2 = tiny_gpt();
        actc_trainer *t0 = trainer_for(m0, policies[p], "adamw"), *t1 = trainer_for(m1, policies[p], "adamw"),
                     *t2 = trainer_for(m2, policies[p], "adamw");
        actc_step_result r;
        for (int s = 0; s < 4; s++) { /* two "ranks" that learn from other rows */
            assert_int_equal(actc_trainer_step(t0, &b0, &r), ACTC_OK);
            assert_int_equal(actc_trainer_step(t1, &b1, &r), ACTC_OK);
        }
        uint8_t *st0, *st1, *st2;
        size_t n0, n1, n2;
        assert_int_equal(actc__trainer_learnt_state(t0, &st0, &n0), ACTC_OK);
        assert_int_equal(actc__trainer_learnt_state(t1, &st1, &n1), ACTC_OK);
        assert_true(n0 != n1 || memcmp(st0, st1, n0)); /* they did learn differently */
        char path[256];
        tpath(path, "ranks.ckpt");
        const uint8_t *states[2] = {NULL, st1};
        const size_t lens[2] = {0, n1};
        /* The run's recipe goes into the data-parallel save too. */
        actc_run_recipe rec;
        memset(&rec, 0, sizeof rec);
        rec.grad_comm = 8;
        snprintf(rec.data, sizeof rec.data, "text");
        assert_int_equal(actc_trainer_set_recipe(t0, &rec), ACTC_OK);
        assert_int_equal(actc__trainer_save_ranks(t0, path, 2, states, lens), ACTC_OK);
        actc_ckpt_info info;
        assert_int_equal(actc_checkpoint_info(path, &info), ACTC_OK);
        assert_true(info.has_recipe && info.recipe.grad_comm == 8 && !strcmp(info.recipe.data, "text"));
        int applied = -1;
        assert_int_equal(actc_trainer_load(t2, path), ACTC_OK); /* rank 0's, as every rank loads */
        assert_int_equal(actc__trainer_load_rank(t2, path, 1, 3, &applied), ACTC_OK);
        assert_int_equal(applied, 0); /* written by 2 ranks, read by 3: rank 0's kept */
        assert_int_equal(actc__trainer_learnt_state(t2, &st2, &n2), ACTC_OK);
        assert_true(n2 == n0 && !memcmp(st2, st0, n0));
        free(st2);
        assert_int_equal(actc__trainer_load_rank(t2, path, 0, 2, &applied), ACTC_OK);
        assert_int_equal(applied, 1);
        assert_int_equal(actc__trainer_load_rank(t2, path, 1, 2, &applied), ACTC_OK);
        assert_int_equal(applied, 1);
        assert_int_equal(actc__trainer_learnt_state(t2, &st2, &n2), ACTC_OK);
        assert_true(n2 == n1 && !memcmp(st2, st1, n1)); /* rank 1's own, byte for byte */
        free(st2);
        /* A file without the section: nothing applied. */
        assert_int_equal(actc_trainer_save(t0, path), ACTC_OK);
        assert_int_equal(actc__trainer_load_rank(t2, path, 1, 2, &applied), ACTC_OK);
        assert_int_equal(applied, 0);
        free(st0);
        free(st1);
        actc_trainer_free(t0);
        actc_trainer_free(t1);
        actc_trainer_free(t2);
        actc_model_free(m0);
        actc_model_free(m1);
        actc_model_free(m2);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_every_policy),    cmocka_unit_test(test_resume_resnet),
        cmocka_unit_test(test_policy_state_matters),   cmocka_unit_test(test_hooks),
        cmocka_unit_test(test_accum),                  cmocka_unit_test(test_user_model),
        cmocka_unit_test(test_custom_model_checks),    cmocka_unit_test(test_bad_trainer_checkpoints),
        cmocka_unit_test(test_old_learnt_sections),
        cmocka_unit_test(test_bad_options),            cmocka_unit_test(test_report_and_maxbatch),
        cmocka_unit_test(test_encoded_gradients_in_trainer), cmocka_unit_test(test_profile),
        cmocka_unit_test(test_rank_states),            cmocka_unit_test(test_none_reference),
        cmocka_unit_test(test_counting_context),       cmocka_unit_test(test_recipes),
        cmocka_unit_test(test_log_records),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
