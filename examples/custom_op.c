/* A user-defined model with a user-defined operator, trained with the public
 * API only.  The operator (swish, y = x * sigmoid(x)) saves its input through
 * the store like the built-in ones, so compression applies to it without the
 * operator knowing: run it with "bf16" and its saved bytes halve.
 *
 * Each step goes through GACT's controller (actc_controller_iterate, the C
 * form of GACT's controller.iterate(fwdbwdprop)): under a gact: policy it
 * measures how sensitive the gradient is to every saved tensor, the swish
 * input included, and gives each its bits; under any other policy it just
 * runs the step.
 *
 * usage: custom_op [POLICY] [STEPS]      (defaults: bf16, 300; e.g. gact:4)
 * Trains on Fashion-MNIST from /usr/share/datasets/fashion-mnist. */
#include <actc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- the operator -------------------------------------------------------- */

static actc_status swish_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = actc_load(ctx, node, 0); /* decoded by whatever codec stored it */
    if (!x) return actc_last_status();
    float *gx = actc_grad_of(ctx, node->inputs[0]);
    const float *gy = node->output->grad->data;
    if (gx)
        for (size_t i = 0; i < x->numel; i++) {
            float s = 1.0f / (1.0f + expf(-x->data[i]));
            gx[i] += gy[i] * (s + x->data[i] * s * (1.0f - s));
        }
    actc_tensor_release(x);
    return ACTC_OK;
}

static actc_tensor *swish(actc_ctx *ctx, actc_tensor *x)
{
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    for (size_t i = 0; i < x->numel; i++) y->data[i] = x->data[i] / (1.0f + expf(-x->data[i]));
    actc_node *node;
    if (actc_node_new2(ctx, "swish", swish_backward, y, 1, &x, &node) != ACTC_OK ||
        (node && actc_save(ctx, node, x, ACTC_SAVE_ACT) != ACTC_OK)) {
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

static actc_tensor *net_forward(net *n, actc_ctx *ctx, actc_tensor *x)
{
    actc_tensor *f = actc_flatten(ctx, x);
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

/* ---- one training iteration for the controller ------------------------------ */

typedef struct {
    net *n;
    actc_tensor *x;          /* the batch                                   */
    const int32_t *labels;
    double loss;
} batch_pass;

/* Forward and backward on the batch, or on its first max_samples samples
 * (the controller's sensitivity passes use a few). */
static actc_status fwdbwd(actc_ctx *ctx, void *user, int max_samples, int *samples)
{
    batch_pass *b = user;
    actc_tensor *x = b->x;
    int shape[4] = {x->shape[0], x->shape[1], x->shape[2], x->shape[3]};
    if (max_samples > 0 && max_samples < shape[0]) shape[0] = max_samples;
    actc_tensor *in = actc_tensor_new(ACTC_MEM_ACT, 4, shape);
    if (!in) return actc_last_status();
    for (size_t i = 0; i < in->numel; i++) in->data[i] = x->data[i];
    *samples = shape[0];
    actc_tensor *logits = net_forward(b->n, ctx, in);
    actc_tensor_release(in);
    if (!logits) return actc_last_status();
    actc_tensor *loss = actc_cross_entropy(ctx, logits, b->labels, -1, NULL);
    actc_tensor_release(logits);
    if (!loss) return actc_last_status();
    b->loss = loss->data[0];
    actc_status st = actc_backward(ctx, loss);
    actc_tensor_release(loss);
    return st;
}

int main(int argc, char **argv)
{
    const char *policy = argc > 1 ? argv[1] : "bf16";
    int steps = argc > 2 ? atoi(argv[2]) : 300;
    int rc = 1;
    actc_image_dataset train = {0}, test = {0};
    if (actc_fashion_mnist_load(NULL, 1, &train) != ACTC_OK || actc_fashion_mnist_load(NULL, 0, &test) != ACTC_OK) {
        fprintf(stderr, "error: %s\n", actc_last_error());
        return 1;
    }
    net n = {param(128, 784, "w1", 1), param(128, 0, "b1", 2), param(10, 128, "w2", 3), param(10, 0, "b2", 4)};
    actc_tensor *params[4] = {n.w1, n.b1, n.w2, n.b2};
    actc_ctx *ctx = actc_ctx_new();
    actc_controller *ctrl = NULL;
    actc_optim *opt = actc_adamw_new(params, 4, 0.9f, 0.999f, 1e-8f, 0.0f);
    actc_loader_opts lo = {0.2860f, 0.3530f, 0, 0, 1, 42};
    actc_loader *loader = actc_loader_new(&train, 64, 1, &lo);
    if (!n.w1 || !n.b1 || !n.w2 || !n.b2 || !ctx || !opt || !loader || actc_ctx_set_policy(ctx, policy) != ACTC_OK ||
        !(ctrl = actc_controller_new(ctx, params, 4, NULL))) {
        fprintf(stderr, "error: %s\n", actc_last_error());
        goto out;
    }
    double loss_avg = 0;
    for (int s = 0; s < steps; s++) {
        actc_tensor *x;
        const int32_t *labels;
        int bs;
        int nb = actc_loader_num_batches(loader);
        if (actc_loader_get(loader, s / nb, s % nb, &x, &labels, &bs) != ACTC_OK) goto fail;
        batch_pass b = {&n, x, labels, 0};
        actc_status st = actc_controller_iterate(ctrl, fwdbwd, &b); /* zeroes the gradients first */
        actc_tensor_release(x);
        if (st != ACTC_OK || actc_optim_step(opt, 1e-3f) != ACTC_OK) goto fail;
        loss_avg = s ? 0.98 * loss_avg + 0.02 * b.loss : b.loss;
        const char *alert = actc_controller_take_alert(ctrl);
        if (alert) printf("step %d: %s\n", s, alert);
    }
    /* Accuracy on the first 2000 test images. */
    actc_ctx_set_training(ctx, 0);
    actc_loader_opts to = {0.2860f, 0.3530f, 0, 0, 0, 0};
    actc_loader *tl = actc_loader_new(&test, 500, 0, &to);
    if (!tl) goto fail;
    int correct = 0, seen = 0;
    for (int b = 0; b < 4 && b < actc_loader_num_batches(tl); b++) {
        actc_tensor *x;
        const int32_t *labels;
        int bs, c = 0;
        if (actc_loader_get(tl, 0, b, &x, &labels, &bs) != ACTC_OK) { actc_loader_free(tl); goto fail; }
        actc_tensor *logits = net_forward(&n, ctx, x);
        actc_tensor_release(x);
        actc_tensor *l = logits ? actc_cross_entropy(ctx, logits, labels, -1, &c) : NULL;
        actc_tensor_release(logits);
        if (!l) { actc_loader_free(tl); goto fail; }
        actc_tensor_release(l);
        correct += c;
        seen += bs;
    }
    actc_loader_free(tl);
    actc_store_stats ss;
    actc_store_get_stats(ctx, &ss);
    printf("policy %s: %d steps, train loss %.3f, test accuracy %.1f%% on %d images\n", actc_ctx_policy(ctx), steps,
           loss_avg, 100.0 * correct / seen, seen);
    printf("saved for backward per step: %zu bytes (fp32 would be %zu; ACT part %zu vs %zu)\n", ss.stored_peak,
           ss.fp32_peak, ss.stored_by_kind[ACTC_SAVE_ACT], ss.fp32_by_kind[ACTC_SAVE_ACT]);
    /* Under gact: what the controller measured and chose per saved tensor. */
    actc_saved_info info[8];
    const int nt = actc_controller_tensors(ctrl, info, 8);
    for (int i = 0; i < nt && i < 8; i++)
        printf("  saved by %-13s sensitivity %10.4g  %2d bits  %zu of %zu bytes\n", info[i].op, info[i].sensitivity,
               info[i].bits, info[i].stored_bytes, info[i].fp32_bytes);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "error: %s\n", actc_last_error());
out:
    actc_loader_free(loader);
    actc_optim_free(opt);
    actc_controller_free(ctrl);
    actc_ctx_free(ctx);
    for (int i = 0; i < 4; i++) actc_tensor_release(params[i]);
    actc_image_dataset_free(&train);
    actc_image_dataset_free(&test);
    return rc;
}
