/* MLP: flatten -> linear -> relu [-> dropout] -> linear -> relu -> linear. */
#include "model.h"
#include <math.h>
#include <stdlib.h>

typedef struct {
    actc_tensor *w[3], *b[3];
} mlp_impl;

/* Replace *cur by next (releasing the old one); NULL next propagates. */
static int step(actc_tensor **cur, actc_tensor *next)
{
    actc_tensor_release(*cur);
    *cur = next;
    return next != NULL;
}

static actc_tensor *mlp_forward(actc_model *m, actc_ctx *ctx, actc_tensor *x)
{
    mlp_impl *p = m->impl;
    actc_tensor *h = actc_flatten(ctx, x);
    if (!h) return NULL;
    for (int l = 0; l < 3; l++) {
        if (!step(&h, actc_linear(ctx, h, p->w[l], p->b[l]))) return NULL;
        if (l == 2) break;
        if (!step(&h, actc_relu(ctx, h))) return NULL;
        if (m->opts.dropout > 0 && !step(&h, actc_dropout(ctx, h, m->opts.dropout))) return NULL;
    }
    return h;
}

actc_status actc__mlp_build(actc_model *m)
{
    mlp_impl *p = calloc(1, sizeof *p);
    if (!p) return actc_set_error(ACTC_ERR_OOM, "out of memory building mlp");
    m->impl = p;
    m->impl_free = free;
    m->forward = mlp_forward;
    if (m->opts.width == 0) m->opts.width = 256;
    int dims[4] = {m->opts.in_channels * m->opts.in_h * m->opts.in_w, m->opts.width, m->opts.width,
                   m->opts.num_classes};
    for (int l = 0; l < 3; l++) {
        char name[32];
        int ws[2] = {dims[l + 1], dims[l]};
        float bound = 1.0f / sqrtf((float)dims[l]); /* PyTorch's nn.Linear default */
        snprintf(name, sizeof name, "fc%d.weight", l + 1);
        p->w[l] = actc__model_param(m, name, 2, ws, -bound, 0);
        snprintf(name, sizeof name, "fc%d.bias", l + 1);
        p->b[l] = actc__model_param(m, name, 1, &dims[l + 1], -bound, 0);
        if (!p->w[l] || !p->b[l]) return actc_last_status();
    }
    return ACTC_OK;
}
