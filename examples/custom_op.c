/* A user-defined model with a user-defined operator, trained with the public
 * API only, checkpointed half-way and resumed.  The operator (swish,
 * y = x * sigmoid(x)) saves its input through the store like the built-in
 * ones, declaring its role (actc_save_as), so compression applies to it as
 * to a built-in operator's save of that role, without the operator knowing
 * the policy: run it
 * with "bf16" and its saved bytes halve.  The model is the user's own
 * (actc_model_custom: its parameters and its forward), so the library's
 * trainer steps it, saves and loads it by parameter name, and, under a
 * gact: policy, its controller measures how sensitive the gradient is to
 * every saved tensor, the swish input included, and gives each its bits.
 *
 * usage: custom_op [POLICY] [STEPS] [CHECKPOINT]
 *        (defaults: bf16, 300, custom_op.ckpt; e.g. gact:4)
 * Trains on Fashion-MNIST from /usr/share/datasets/fashion-mnist. */
#include <actc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- the operator -------------------------------------------------------- */

/* Every call that can fail is checked, and every failure is returned as the
 * status it came with (the message is already set): actc_backward stops and
 * hands it to the caller.  Out of memory is never mistaken for "this input
 * needs no gradient" (actc_grad_buffer tells the two apart). */
static actc_status swish_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = actc_load(ctx, node, 0); /* decoded by whatever codec stored it: read-only */
    if (!x) return actc_last_status();
    float *gx;
    actc_status st = actc_grad_buffer(ctx, node->inputs[0], &gx);
    if (st == ACTC_OK && gx) { /* gx NULL with ACTC_OK: the input needs no gradient */
        const float *gy = node->output->grad->data;
        for (size_t i = 0; i < x->numel; i++) {
            float s = 1.0f / (1.0f + expf(-x->data[i]));
            gx[i] += gy[i] * (s + x->data[i] * s * (1.0f - s));
        }
    }
    actc_tensor_release(x); /* on the error path too */
    return st;
}

static actc_tensor *swish(actc_ctx *ctx, actc_tensor *x)
{
    if (!ctx || !x || !x->data) {
        actc_set_error(ACTC_ERR_INVALID, "swish: NULL context or input (or its data was released)");
        return NULL;
    }
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL; /* the allocator set the message */
    for (size_t i = 0; i < x->numel; i++) y->data[i] = x->data[i] / (1.0f + expf(-x->data[i]));
    /* node is NULL with ACTC_OK when nothing is recorded (eval mode, or x
     * needs no gradient): then there is nothing to save either. */
    actc_node *node;
    actc_status st = actc_node_new(ctx, "swish", swish_backward, y, 1, &x, &node);
    /* The save declares its role: the input of an element-wise function
     * whose derivative backward recomputes from it, non-linearly (so a
     * policy may keep it more precise), as for any built-in op's. */
    const actc_save_role role = {.role = ACTC_ROLE_ACT_IN, .linear = 0};
    if (st == ACTC_OK && node) st = actc_save_as(ctx, node, x, ACTC_SAVE_ACT, &role);
    if (st != ACTC_OK) {
        /* Our reference to y goes; a node already recorded stays on the tape
         * until the caller drops it (actc_ctx_reset), like the built-in ops'. */
        actc_tensor_release(y);
        return NULL;
    }
    return y;
}

/* ---- the model: flatten -> linear -> swish -> linear ---------------------- */

typedef struct {
    actc_tensor *w1, *b1, *w2, *b2;
} net;

static actc_tensor *param(int rows, int cols, const char *name, uint64_t seed)
{
    int shape[2] = {rows, cols};
    actc_tensor *t = actc_param_new(cols ? 2 : 1, shape, name);
    if (!t) return NULL;
    float bound = cols ? 1.0f / sqrtf((float)cols) : 0.0f;
    for (size_t i = 0; i < t->numel; i++) t->data[i] = bound * (2 * actc_rand_uniform(seed, i) - 1);
    return t;
}

/* The forward the trainer calls (actc_forward_fn): logits for the batch. */
static actc_tensor *net_forward(actc_ctx *ctx, const actc_batch *b, void *user)
{
    net *n = user;
    actc_tensor *f = actc_flatten(ctx, b->x);
    if (!f) return NULL;
    actc_tensor *h = actc_linear(ctx, f, n->w1, n->b1);
    actc_tensor_release(f); /* released as soon as consumed: only the store keeps it */
    if (!h) return NULL;
    actc_tensor *a = swish(ctx, h);
    actc_tensor_release(h);
    if (!a) return NULL;
    actc_tensor *logits = actc_linear(ctx, a, n->w2, n->b2);
    actc_tensor_release(a);
    return logits;
}

/* The model with fresh weights from seed; the model holds the parameters. */
static actc_model *make_model(net *n, uint64_t seed)
{
    *n = (net){param(128, 784, "w1", seed), param(128, 0, "b1", seed + 1), param(10, 128, "w2", seed + 2),
               param(10, 0, "b2", seed + 3)};
    actc_tensor *params[4] = {n->w1, n->b1, n->w2, n->b2};
    actc_model *m = NULL;
    if (n->w1 && n->b1 && n->w2 && n->b2) actc_model_custom("swish-mlp", params, 4, NULL, 0, net_forward, n, &m);
    for (int i = 0; i < 4; i++) actc_tensor_release(params[i]);
    return m;
}

/* Steps [from, to) on the training source; the running mean of the loss. */
static actc_status train(actc_trainer *t, actc_source *src, int to, double *loss_avg)
{
    const int nb = actc_source_batches(src);
    for (int s = (int)actc_trainer_steps(t); s < to; s++) {
        actc_batch b;
        actc_step_result r;
        actc_status st = actc_source_get(src, (uint64_t)(s / nb), (uint64_t)(s % nb), (uint64_t)s, &b);
        if (st == ACTC_OK) st = actc_trainer_step(t, &b, &r);
        if (st != ACTC_OK) return st;
        *loss_avg = s ? 0.98 * *loss_avg + 0.02 * r.loss : r.loss;
        const char *alert = actc_controller_take_alert(actc_trainer_controller(t));
        if (alert) printf("step %d: %s\n", s, alert);
    }
    return ACTC_OK;
}

int main(int argc, char **argv)
{
    const char *policy = argc > 1 ? argv[1] : "bf16", *ckpt = argc > 3 ? argv[3] : "custom_op.ckpt";
    const int steps = argc > 2 ? atoi(argv[2]) : 300;
    int rc = 1;
    actc_image_dataset train_set = {0}, test = {0};
    if (actc_fashion_mnist_load(NULL, 1, &train_set) != ACTC_OK || actc_fashion_mnist_load(NULL, 0, &test) != ACTC_OK) {
        fprintf(stderr, "error: %s\n", actc_last_error());
        return 1;
    }
    if (test.n > 2000) test.n = 2000; /* accuracy on the first 2000 test images */
    net n;
    actc_model *m = NULL;
    actc_trainer *t = NULL;
    actc_source *src = NULL, *val = NULL;
    actc_trainer_opts o = actc_trainer_default_opts();
    o.policy = policy;
    o.optim = "adamw";
    o.weight_decay = 0;
    actc_loader_opts lo = {0.2860f, 0.3530f, 0, 0, 1, 42}, to = {0.2860f, 0.3530f, 0, 0, 0, 0};
    double loss_avg = 0;
    actc_eval_result ev;
    if (!(m = make_model(&n, 1)) || actc_trainer_new(m, &o, &t) != ACTC_OK ||
        actc_source_images(&train_set, 64, 1, &lo, &src) != ACTC_OK ||
        actc_source_images(&test, 500, 0, &to, &val) != ACTC_OK)
        goto fail;
    /* The first half; then the whole training state goes to a file. */
    if (train(t, src, steps / 2, &loss_avg) != ACTC_OK || actc_trainer_save(t, ckpt) != ACTC_OK) goto fail;
    actc_trainer_free(t);
    actc_model_free(m);
    t = NULL;
    /* A new model with other weights and a new trainer continue from the
     * file exactly where the first stopped (optimizer moments, position,
     * the policy's bits and measurements included). */
    if (!(m = make_model(&n, 99)) || actc_trainer_new(m, &o, &t) != ACTC_OK || actc_trainer_load(t, ckpt) != ACTC_OK)
        goto fail;
    printf("resumed %s at step %llu\n", ckpt, (unsigned long long)actc_trainer_steps(t));
    if (train(t, src, steps, &loss_avg) != ACTC_OK || actc_trainer_evaluate(t, val, &ev) != ACTC_OK) goto fail;
    actc_store_stats ss;
    actc_store_get_stats(actc_trainer_ctx(t), &ss);
    printf("policy %s: %d steps, train loss %.3f, test accuracy %.1f%% on %ld images\n", actc_trainer_get_opts(t)->policy,
           steps, loss_avg, 100.0 * ev.accuracy, ev.samples);
    printf("saved for backward per step: %zu bytes (fp32 would be %zu; ACT part %zu vs %zu)\n", ss.stored_peak,
           ss.fp32_peak, ss.stored_by_kind[ACTC_SAVE_ACT], ss.fp32_by_kind[ACTC_SAVE_ACT]);
    /* Under gact: what the controller measured and chose per saved tensor. */
    actc_saved_info info[8];
    const int nt = actc_controller_tensors(actc_trainer_controller(t), info, 8);
    for (int i = 0; i < nt && i < 8; i++)
        printf("  saved by %-13s sensitivity %10.4g  %2d bits  %zu of %zu bytes\n", info[i].op, info[i].sensitivity,
               info[i].bits, info[i].stored_bytes, info[i].fp32_bytes);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "error: %s\n", actc_last_error());
out:
    actc_source_free(src);
    actc_source_free(val);
    actc_trainer_free(t);
    actc_model_free(m);
    actc_image_dataset_free(&train_set);
    actc_image_dataset_free(&test);
    actc_shutdown();
    return rc;
}
