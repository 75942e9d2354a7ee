/* The low-rank form: a factor F (rows x rank) standing for F P^T, added by
 * an operator that saved a projection (CompAct's linear); the optimizer
 * steps it in the subspace (optim.c), the wire carries F. */
#include "form.h"
#include <string.h>

actc_status actc_grad_add_lowrank(actc_ctx *ctx, actc_tensor *t, const actc_tensor *factor, const actc_projection *proj)
{
    (void)ctx;
    if (!t || !factor || !factor->data || !proj)
        return actc_set_error(ACTC_ERR_INVALID, "actc_grad_add_lowrank: NULL tensor, factor or projection");
    if (!t->requires_grad) return ACTC_OK;
    if (!t->is_param)
        return actc_set_error(ACTC_ERR_INVALID, "actc_grad_add_lowrank: '%s' is not a parameter", actc__grad_pname(t));
    actc_status cs = actc__projection_check("actc_grad_add_lowrank", proj);
    if (cs != ACTC_OK) return cs;
    const int last = t->ndim - 1;
    int ok = t->ndim >= 1 && proj->rank >= 1 && factor->ndim == t->ndim && t->shape[last] == proj->n && factor->shape[last] == proj->rank;
    for (int i = 0; ok && i < last; i++) ok = factor->shape[i] == t->shape[i];
    if (!ok) {
        char a[64], b[64];
        return actc_set_error(ACTC_ERR_INVALID, "low-rank gradient of '%s' %s: factor %s with a projection %d -> %d",
                              actc__grad_pname(t), actc_shape_str(t, a, sizeof a), actc_shape_str(factor, b, sizeof b),
                              proj->n, proj->rank);
    }
    if (t->grad || (actc__grad_fs(t) && actc__grad_fs(t)->blob))
        return actc_set_error(ACTC_ERR_STATE, "'%s' already holds a dense or encoded gradient: one parameter, one form "
                              "of gradient per step", actc__grad_pname(t));
    actc__grad_fstate *g = actc__grad_fs_make(t);
    if (!g) return actc_last_status();
    if (!g->factor) {
        if (!(g->factor = actc_tensor_copy(ACTC_MEM_GRAD, factor))) return actc_last_status();
        g->proj = *proj;
        return ACTC_OK;
    }
    if (!actc__projection_same(&g->proj, proj))
        return actc_set_error(ACTC_ERR_INVALID, "low-rank gradient of '%s': a second projection (key %llx, rank %d) "
                              "where the gradient holds key %llx, rank %d",
                              actc__grad_pname(t), (unsigned long long)proj->key, proj->rank,
                              (unsigned long long)g->proj.key, g->proj.rank);
    float *d = g->factor->data;
    const float *s = factor->data;
    for (size_t i = 0; i < factor->numel; i++) d[i] += s[i];
    return ACTC_OK;
}

/* A dense gradient beside the factor: an operator added each form. */
static actc_status accumulate(actc_tensor *t, uint64_t seed, uint64_t stream)
{
    (void)seed;
    (void)stream;
    return actc_set_error(ACTC_ERR_STATE, "'%s' has a low-rank gradient and a dense one in the same step",
                          actc__grad_pname(t));
}

static actc_status to_dense(const actc_tensor *t, float *out)
{
    const actc__grad_fstate *g = actc__grad_fs(t);
    memset(out, 0, t->numel * sizeof *out);
    return actc_project_back(&g->proj, g->factor->data, (int)(g->factor->numel / (size_t)g->proj.rank), 1.0f, out);
}

/* Of the factor: the gradient the optimizer sees. */
static actc_status sum_sq(const actc_tensor *t, double *sq)
{
    const actc_tensor *f = actc__grad_fs(t)->factor;
    *sq = actc__sum_sq_diff(f->data, NULL, f->numel);
    return ACTC_OK;
}

static void scale(actc_tensor *t, float c)
{
    actc_tensor *f = actc__grad_fs(t)->factor;
    actc__grad_scale_array(f->data, f->numel, c);
}

static size_t wire_len(const actc_tensor *t) { return actc__grad_fs(t)->factor->numel; }

static size_t bytes(const actc_tensor *t) { return wire_len(t) * sizeof(float); }

static actc_status wire_get(const actc_tensor *t, float *out)
{
    const actc_tensor *f = actc__grad_fs(t)->factor;
    memcpy(out, f->data, f->numel * sizeof *out);
    return ACTC_OK;
}

static actc_status wire_set(actc_tensor *t, uint64_t seed, uint64_t step, const float *in)
{
    (void)seed;
    (void)step;
    actc_tensor *f = actc__grad_fs(t)->factor;
    memcpy(f->data, in, f->numel * sizeof *in);
    return ACTC_OK;
}

const actc__grad_form_vt actc__grad_form_lowrank = {ACTC_GRAD_LOWRANK, accumulate, to_dense, sum_sq, scale,
                                               bytes, wire_len, wire_get, wire_set};

const actc_tensor *actc__grad_factor(const actc_tensor *t, actc_projection *proj)
{
    const actc__grad_fstate *g = actc__grad_fs(t);
    if (!g || !g->factor) return NULL;
    if (proj) *proj = g->proj;
    return g->factor;
}
