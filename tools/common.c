/* Training step, evaluation and data set-up shared by the commands. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Keep only the first `limit` samples (for quick runs and tests). */
static void truncate_set(actc_image_dataset *d, int limit)
{
    if (limit > 0 && limit < d->n) d->n = limit;
}

static int load_pair(const char *img, const char *lab, const char *what, actc_image_dataset *d)
{
    if (actc_idx_load(img, lab, d) != ACTC_OK) {
        fprintf(stderr, "error: cannot load the %s set: %s\n", what, actc_last_error());
        return 1;
    }
    return 0;
}

int data_load(const data_opts *o, actc_image_dataset *train, actc_image_dataset *test)
{
    int explicit_train = o->train_images || o->train_labels;
    int explicit_test = o->test_images || o->test_labels;
    if (train) {
        if (explicit_train) {
            if (!o->train_images || !o->train_labels) {
                fprintf(stderr, "error: --train-images and --train-labels go together\n");
                return 1;
            }
            if (load_pair(o->train_images, o->train_labels, "training", train)) return 1;
        } else if (actc_fashion_mnist_load(o->data_dir, 1, train) != ACTC_OK) {
            fprintf(stderr, "error: %s\n", actc_last_error());
            return 1;
        }
        truncate_set(train, o->limit_train);
    }
    if (test) {
        int rc;
        if (explicit_test) {
            if (!o->test_images || !o->test_labels) {
                fprintf(stderr, "error: --test-images and --test-labels go together\n");
                rc = 1;
            } else {
                rc = load_pair(o->test_images, o->test_labels, "test", test);
            }
        } else {
            rc = actc_fashion_mnist_load(o->data_dir, 0, test) != ACTC_OK;
            if (rc) fprintf(stderr, "error: %s\n", actc_last_error());
        }
        if (rc) {
            if (train) actc_image_dataset_free(train);
            return 1;
        }
        truncate_set(test, o->limit_test);
    }
    return 0;
}

actc_status loss_backward(actc_ctx *ctx, actc_tensor *logits, const int32_t *labels, step_result *r)
{
    if (!logits) {
        actc_ctx_reset(ctx);
        return actc_last_status();
    }
    int correct = 0;
    actc_tensor *loss = actc_cross_entropy(ctx, logits, labels, -1, &correct);
    r->n = logits->shape[0];
    actc_tensor_release(logits);
    if (!loss) {
        actc_ctx_reset(ctx);
        return actc_last_status();
    }
    r->loss = loss->data[0];
    r->correct = correct;
    actc_status s = actc_backward(ctx, loss);
    actc_tensor_release(loss);
    return s;
}

actc_status apply_update(actc_model *m, actc_optim *opt, float lr, float clip, step_result *r)
{
    r->grad_norm = 0;
    if (clip > 0) {
        actc_tensor **params;
        int np = actc_model_params(m, &params);
        actc_status s = actc_clip_grad_norm(params, np, clip, &r->grad_norm);
        if (s != ACTC_OK) return s;
    }
    return opt ? actc_optim_step(opt, lr) : ACTC_OK;
}

typedef struct {
    actc_model *m;
    actc_tensor *x;
    const int32_t *labels;
    step_result *r;
} image_pass;

/* Forward and backward of an image batch, or of its first max_samples. */
static actc_status image_fwdbwd(actc_ctx *ctx, void *user, int max_samples, int *samples)
{
    const image_pass *p = user;
    actc_tensor *x = p->x, *sub = NULL;
    if (max_samples > 0 && max_samples < x->shape[0]) {
        int shp[ACTC_MAX_DIMS];
        memcpy(shp, x->shape, sizeof shp);
        shp[0] = max_samples;
        if (!(sub = actc_tensor_new(ACTC_MEM_ACT, x->ndim, shp))) return actc_last_status();
        memcpy(sub->data, x->data, sub->numel * sizeof(float));
        x = sub;
    }
    *samples = x->shape[0];
    actc_ctx_set_training(ctx, 1);
    actc_status s = loss_backward(ctx, actc_model_forward(p->m, ctx, x), p->labels, p->r);
    actc_tensor_release(sub);
    return s;
}

actc_status run_fwdbwd(actc_model *m, actc_ctx *ctx, actc_controller *ctrl, actc_fwdbwd_fn fn, void *user)
{
    if (ctrl) return actc_controller_iterate(ctrl, fn, user);
    actc_model_zero_grad(m);
    int n;
    return fn(ctx, user, 0, &n);
}

actc_status train_step(actc_model *m, actc_ctx *ctx, actc_controller *ctrl, actc_optim *opt, actc_tensor *x,
                       const int32_t *labels, float lr, float clip, step_result *r)
{
    image_pass p = {m, x, labels, r};
    actc_status s = run_fwdbwd(m, ctx, ctrl, image_fwdbwd, &p);
    return s == ACTC_OK ? apply_update(m, opt, lr, clip, r) : s;
}

actc_controller *controller_for(actc_ctx *ctx, actc_model *m, const actc_controller_opts *o)
{
    actc_tensor **params;
    int np = actc_model_params(m, &params);
    actc_controller *c = actc_controller_new(ctx, params, np, o);
    if (!c) fprintf(stderr, "error: %s\n", actc_last_error());
    return c;
}

actc_status evaluate(actc_model *m, actc_ctx *ctx, const actc_image_dataset *d, int batch,
                     double *acc, double *loss)
{
    actc_loader_opts lo = {FMNIST_MEAN, FMNIST_STD, 0, 0, 0, 0};
    actc_loader *l = actc_loader_new(d, batch, 0, &lo);
    if (!l) return actc_last_status();
    int was_training = actc_ctx_training(ctx);
    actc_ctx_set_training(ctx, 0);
    double total_loss = 0;
    long correct = 0, n = 0;
    actc_status s = ACTC_OK;
    for (int b = 0; b < actc_loader_num_batches(l); b++) {
        actc_tensor *x;
        const int32_t *labels;
        int bs;
        if ((s = actc_loader_get(l, 0, b, &x, &labels, &bs)) != ACTC_OK) break;
        actc_tensor *logits = actc_model_forward(m, ctx, x);
        actc_tensor_release(x);
        if (!logits) { s = actc_last_status(); break; }
        int c = 0;
        actc_tensor *lt = actc_cross_entropy(ctx, logits, labels, -1, &c);
        actc_tensor_release(logits);
        if (!lt) { s = actc_last_status(); break; }
        total_loss += (double)lt->data[0] * bs;
        actc_tensor_release(lt);
        correct += c;
        n += bs;
    }
    actc_ctx_set_training(ctx, was_training);
    actc_loader_free(l);
    if (s != ACTC_OK) return s;
    *acc = n ? (double)correct / (double)n : 0;
    *loss = n ? total_loss / (double)n : 0;
    return ACTC_OK;
}

/* Start of the value of --NAME= in settings, or NULL. */
static const char *setting_at(const char *settings, const char *name)
{
    char key[32];
    snprintf(key, sizeof key, "--%s=", name);
    for (const char *p = strstr(settings, key); p; p = strstr(p + 1, key))
        if (p == settings || p[-1] == ' ') return p + strlen(key);
    return NULL;
}

static int setting_int(const char *settings, const char *name)
{
    const char *v = setting_at(settings, name);
    return v ? atoi(v) : -1;
}

int ckpt_setting_int(const actc_ckpt_meta *meta, const char *name) { return setting_int(meta->settings, name); }

int ckpt_setting_str(const actc_ckpt_meta *meta, const char *name, char *buf, size_t cap)
{
    const char *v = setting_at(meta->settings, name);
    if (!v || cap == 0) return 0;
    size_t n = strcspn(v, " ");
    if (n >= cap) return 0;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return 1;
}

void model_opts_from_meta(const actc_ckpt_meta *meta, actc_model_opts *mo)
{
    const char *st = meta->settings;
    int v;
    if ((v = setting_int(st, "width")) > 0) mo->width = v;
    if ((v = setting_int(st, "layers")) > 0) mo->n_layers = v;
    if ((v = setting_int(st, "heads")) > 0) mo->n_heads = v;
    if ((v = setting_int(st, "context")) > 0) mo->context = v;
    if ((v = setting_int(st, "vocab")) > 0) mo->vocab = v;
    const char *a = strstr(st, "--attention=");
    if (a) mo->attention = !strncmp(a + 12, "naive", 5) ? ACTC_ATTN_NAIVE : ACTC_ATTN_FLASH;
    if (meta->num_classes > 0) mo->num_classes = meta->num_classes;
    if (meta->input[0] > 0) {
        mo->in_channels = meta->input[0];
        mo->in_h = meta->input[1];
        mo->in_w = meta->input[2];
    }
}

int model_from_checkpoint(const char *path, const actc_model_opts *base, actc_ckpt_meta *meta, actc_model **m)
{
    *m = NULL;
    if (actc_checkpoint_peek(path, meta) != ACTC_OK) {
        fprintf(stderr, "error: --checkpoint: %s\n", actc_last_error());
        return 1;
    }
    actc_model_opts mo = base ? *base : actc_model_default_opts();
    model_opts_from_meta(meta, &mo);
    if (actc_model_create(meta->model, &mo, m) != ACTC_OK || actc_checkpoint_load(path, *m, NULL, meta) != ACTC_OK) {
        fprintf(stderr, "error: --checkpoint %s: %s\n", path, actc_last_error());
        actc_model_free(*m);
        *m = NULL;
        return 1;
    }
    return 0;
}
