/* ResNets with a CIFAR-style stem (one 3x3 convolution, no max-pool), sized for
 * 28x28 Fashion-MNIST images.
 *  resnet20/32/56: He et al. 2016 section 4.2: 3 stages of n basic blocks
 *    (n = 3, 5, 9) with 16, 32, 64 channels; 28 -> 28 -> 14 -> 7.
 *  resnet18: 4 stages of 2 basic blocks with 64..512 channels (the usual
 *    CIFAR adaptation of ResNet-18); 28 -> 28 -> 14 -> 7 -> 4.
 * Shortcuts that change shape are 1x1 convolution + batch norm (option B),
 * identity otherwise.  Convolutions have no bias (batch norm follows). */
#include "model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BN_MOMENTUM 0.1f
#define BN_EPS 1e-5f

typedef struct {
    actc_tensor *w, *gamma, *beta, *mean, *var;
    int stride, pad;
} conv_bn;

typedef struct {
    conv_bn c1, c2, sc;
    int has_sc;
} block;

typedef struct {
    conv_bn stem;
    block *blocks;
    int n_blocks;
    int stage_start[5]; /* first block index of each stage, for scope names */
    actc_tensor *fc_w, *fc_b;
} resnet_impl;

static void resnet_free(void *p)
{
    resnet_impl *r = p;
    if (r) free(r->blocks);
    free(r);
}

static actc_status make_conv_bn(actc_model *m, conv_bn *cb, const char *prefix, int cin, int cout,
                                int k, int stride)
{
    char name[48];
    int ws[4] = {cout, cin, k, k};
    /* Kaiming normal, fan_out, as torchvision's ResNet. */
    float std = sqrtf(2.0f / (float)(cout * k * k));
    snprintf(name, sizeof name, "%s.weight", prefix);
    cb->w = actc__model_param(m, name, 4, ws, std, 0);
    snprintf(name, sizeof name, "%s.bn.weight", prefix);
    cb->gamma = actc__model_param(m, name, 1, &cout, 0, 1.0f);
    snprintf(name, sizeof name, "%s.bn.bias", prefix);
    cb->beta = actc__model_param(m, name, 1, &cout, 0, 0.0f);
    snprintf(name, sizeof name, "%s.bn.running_mean", prefix);
    cb->mean = actc__model_buffer(m, name, 1, &cout, 0.0f);
    snprintf(name, sizeof name, "%s.bn.running_var", prefix);
    cb->var = actc__model_buffer(m, name, 1, &cout, 1.0f);
    cb->stride = stride;
    cb->pad = k / 2;
    if (!cb->w || !cb->gamma || !cb->beta || !cb->mean || !cb->var) return actc_last_status();
    return ACTC_OK;
}

/* conv -> batch norm.  With `take` the caller's reference to x goes to the
 * convolution, which then computes in x's buffer (one activation fewer
 * alive); else x stays the caller's. */
static actc_tensor *conv_bn_fwd(actc_ctx *ctx, const conv_bn *cb, actc_tensor *x, int take)
{
    actc_tensor *h = take ? actc_conv2d_take(ctx, x, cb->w, NULL, cb->stride, cb->pad)
                          : actc_conv2d(ctx, x, cb->w, NULL, cb->stride, cb->pad);
    if (!h) return NULL;
    /* The batch norm normalises h in place: the store keeps what backward needs. */
    return actc_batchnorm2d_take(ctx, h, cb->gamma, cb->beta, cb->mean, cb->var, BN_MOMENTUM, BN_EPS);
}

/* relu(conv_bn(x)); x stays owned by the caller. */
static actc_tensor *conv_bn_relu(actc_ctx *ctx, const conv_bn *cb, actc_tensor *x)
{
    actc_tensor *h = conv_bn_fwd(ctx, cb, x, 0);
    return h ? actc_relu_take(ctx, h) : NULL;
}

static actc_tensor *block_fwd(actc_ctx *ctx, const block *b, actc_tensor *x)
{
    actc_tensor *h = conv_bn_relu(ctx, &b->c1, x);
    if (!h) return NULL;
    actc_tensor *h2 = conv_bn_fwd(ctx, &b->c2, h, 1);
    if (!h2) return NULL;
    actc_tensor *s = b->has_sc ? conv_bn_fwd(ctx, &b->sc, x, 0) : actc_tensor_retain(x);
    if (!s) {
        actc_tensor_release(h2);
        return NULL;
    }
    actc_tensor *sum = actc_add_take(ctx, h2, s); /* into h2's buffer */
    actc_tensor_release(s);
    if (!sum) return NULL;
    return actc_relu_take(ctx, sum);
}

/* A block as a segment function (x borrowed). */
static actc_tensor *block_segment(actc_ctx *ctx, actc_tensor *x, void *user) { return block_fwd(ctx, user, x); }

static actc_tensor *resnet_forward(actc_model *m, actc_ctx *ctx, actc_tensor *x)
{
    resnet_impl *r = m->impl;
    /* Scopes name the saved tensors; a failed push (nesting too deep) is an
     * error, never a silent pop of the caller's scope. */
    if (actc_scope_push(ctx, "stem") != ACTC_OK) return NULL;
    actc_tensor *h = conv_bn_relu(ctx, &r->stem, x);
    actc_scope_pop(ctx);
    int stage = 0;
    for (int i = 0; h && i < r->n_blocks; i++) {
        while (stage < 4 && i >= r->stage_start[stage + 1]) stage++;
        char scope[32];
        snprintf(scope, sizeof scope, "layer%d.%d", stage + 1, i - r->stage_start[stage]);
        actc_tensor *y = NULL;
        if (actc_scope_push(ctx, scope) == ACTC_OK) {
            y = actc_region(ctx, ACTC_REGION_BLOCK, block_segment, &r->blocks[i], h);
            actc_scope_pop(ctx);
        }
        actc_tensor_release(h);
        h = y;
    }
    if (!h) return NULL;
    actc_tensor *p = actc_global_avgpool(ctx, h);
    actc_tensor_release(h);
    if (!p) return NULL;
    actc_tensor *logits = NULL;
    if (actc_scope_push(ctx, "fc") == ACTC_OK) {
        logits = actc_linear(ctx, p, r->fc_w, r->fc_b);
        actc_scope_pop(ctx);
    }
    actc_tensor_release(p);
    return logits;
}

actc_status actc__resnet_build(actc_model *m, const char *variant)
{
    int n_stages, blocks_per_stage[4], widths[4];
    if (!strcmp(variant, "resnet18")) {
        n_stages = 4;
        for (int s = 0; s < 4; s++) {
            blocks_per_stage[s] = 2;
            widths[s] = 64 << s;
        }
    } else {
        int n = !strcmp(variant, "resnet20") ? 3
              : !strcmp(variant, "resnet32") ? 5
              : !strcmp(variant, "resnet56") ? 9 : 0;
        if (!n)
            return actc_set_error(ACTC_ERR_INVALID, "unknown model '%s'; valid models:\n%s", variant,
                                  actc_model_list());
        n_stages = 3;
        for (int s = 0; s < 3; s++) {
            blocks_per_stage[s] = n;
            widths[s] = 16 << s;
        }
    }
    resnet_impl *r = calloc(1, sizeof *r);
    if (!r) return actc_set_error(ACTC_ERR_OOM, "out of memory building %s", variant);
    m->impl = r;
    m->impl_free = resnet_free;
    m->forward = resnet_forward;
    for (int s = 0; s < n_stages; s++) r->n_blocks += blocks_per_stage[s];
    r->blocks = calloc((size_t)r->n_blocks, sizeof *r->blocks);
    if (!r->blocks) return actc_set_error(ACTC_ERR_OOM, "out of memory building %s", variant);

    actc_status st = make_conv_bn(m, &r->stem, "stem", m->opts.in_channels, widths[0], 3, 1);
    if (st != ACTC_OK) return st;
    int cin = widths[0], bi = 0;
    for (int s = 0; s < n_stages; s++) {
        r->stage_start[s] = bi;
        for (int j = 0; j < blocks_per_stage[s]; j++, bi++) {
            block *b = &r->blocks[bi];
            int stride = (s > 0 && j == 0) ? 2 : 1, cout = widths[s];
            char prefix[40];
            snprintf(prefix, sizeof prefix, "layer%d.%d.conv1", s + 1, j);
            if ((st = make_conv_bn(m, &b->c1, prefix, cin, cout, 3, stride)) != ACTC_OK) return st;
            snprintf(prefix, sizeof prefix, "layer%d.%d.conv2", s + 1, j);
            if ((st = make_conv_bn(m, &b->c2, prefix, cout, cout, 3, 1)) != ACTC_OK) return st;
            b->has_sc = stride != 1 || cin != cout;
            if (b->has_sc) {
                snprintf(prefix, sizeof prefix, "layer%d.%d.shortcut", s + 1, j);
                if ((st = make_conv_bn(m, &b->sc, prefix, cin, cout, 1, stride)) != ACTC_OK) return st;
            }
            cin = cout;
        }
    }
    for (int s = n_stages; s < 5; s++) r->stage_start[s] = r->n_blocks;
    int ws[2] = {m->opts.num_classes, cin};
    float bound = 1.0f / sqrtf((float)cin);
    r->fc_w = actc__model_param(m, "fc.weight", 2, ws, -bound, 0);
    r->fc_b = actc__model_param(m, "fc.bias", 1, &m->opts.num_classes, -bound, 0);
    if (!r->fc_w || !r->fc_b) return actc_last_status();
    return ACTC_OK;
}
