/* CompAct (Shamshoum et al., NAACL 2025): the linear layers of the chosen
 * scopes save a random projection z = x P of their input (rows x r) in place
 * of x, and their weight gradient is the low-rank factor dy^T z (out x r)
 * that the optimizer steps in the subspace (moments r x out) and projects
 * back with the same P, scaled by alpha (Algorithms 1-3).  The policy only
 * plans: the linear operator offers the transform, the gradient carries its
 * projection to the optimizer (src/optim/optim.c step_lowrank).
 *
 * P is a pure function of (context seed, seed epoch, layer): the epoch is
 * step / gap (the paper's "every T steps s <- s + 1"), so forward, backward
 * and the optimizer of one step, and a resumed run, rebuild the same P.
 * Layers whose input another save already keeps (the attention output
 * projection's: the attention keeps its output) are left exact, as the
 * paper leaves that layer: projecting a tensor kept anyway saves nothing.
 *
 * compact composes with one codec policy ("compact:r=0.25+gact:4"): that
 * policy chooses the codec of every save, z's included, plans the regions,
 * and keeps its own learnt state; this one only adds the transforms. */
#include "policy.h"
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    actc_compact_opts o;
    char layers[ACTC_COMPACT_LAYERS_MAX];  /* '|'-separated globs over the save's scope;
                                              "": the linear layers in the model's blocks */
    uint64_t planned;         /* projections planned since the last backward */
} compact_state;

static compact_state *cs(const actc_policy *p) { return p->state; }

/* The layers the user named by scope, or by default those inside the
 * blocks the model marks (actc_region with ACTC_REGION_BLOCK): the
 * transformer's attention and MLP, not its head, whose output is the
 * logits, nor layers of models that have no blocks. */
static int layer_selected(const char *layers, const actc_save_desc *d)
{
    if (!*layers) return d->in_block;
    char buf[ACTC_COMPACT_LAYERS_MAX];
    snprintf(buf, sizeof buf, "%s", layers);
    for (char *save = NULL, *g = strtok_r(buf, "|", &save); g; g = strtok_r(NULL, "|", &save))
        if (!fnmatch(g, d->scope, 0)) return 1;
    return 0;
}

static int compact_rank(const actc_compact_opts *o, int n)
{
    if (o->rank > 0) return o->rank;
    int r = (int)lround(o->fraction * n);
    return r < 1 ? 1 : r;
}

static actc_status compact_transform(actc_policy *p, const actc_save_desc *d, actc_transform *out)
{
    compact_state *s = cs(p);
    if (d->role->role != ACTC_ROLE_LINEAR_IN || !(d->role->transforms & ACTC_XFORM_PROJECT)) return ACTC_OK;
    if (d->kept && !s->o.all_linear) return ACTC_OK;
    if (!layer_selected(s->layers, d)) return ACTC_OK;
    const int n = d->t->shape[d->t->ndim - 1];
    const int r = compact_rank(&s->o, n);
    if (r > n)
        return actc_set_error(ACTC_ERR_INVALID, "%s: rank %d is above the width %d of the linear layer in %s "
                              "(give r as a fraction, e.g. r=0.25, or at most %d)", p->spec, r, n, d->scope, n);
    const uint64_t epoch = s->o.gap ? d->step / s->o.gap : 0;
    out->kind = ACTC_XFORM_PROJECT;
    out->proj.n = n;
    out->proj.rank = r;
    out->proj.key = actc_rng_key(d->seed ^ 0x434F4D50414354ULL, epoch, s->o.shared_seed ? 0 : d->stable_key);
    out->proj.kind = s->o.sparse ? ACTC_PROJ_SPARSE : ACTC_PROJ_GAUSS;
    out->proj.density = s->o.sparse ? s->o.density : 0.0f;
    out->proj.scale = s->o.scale;
    out->proj.age = (uint32_t)(s->o.gap ? d->step % s->o.gap : d->step);
    out->proj.reset_state = s->o.reset;
    s->planned++;
    return ACTC_OK;
}

/* A backward pass with nothing projected means the policy matched no layer
 * of the model: training on would be `none` under another name. */
static actc_status compact_after(actc_policy *p, actc_ctx *ctx)
{
    compact_state *s = cs(p);
    if (!s->planned)
        return actc_set_error(ACTC_ERR_INVALID, "policy %s projected no linear layer: it applies to linear layers "
                              "whose weight is a trained parameter, %s%s%s, except those whose input another "
                              "operator keeps (all-linear includes them)", p->spec,
                              *s->layers ? "in the scopes layers= selects (" : "inside the model's blocks (a model "
                              "without blocks needs layers=, globs over its scopes", s->layers, ")");
    (void)ctx;
    s->planned = 0;
    return ACTC_OK;
}

actc_status actc__policy_compact(const char *spec, const actc_compact_opts *o, const char *layers, actc_policy *inner,
                                 actc_policy **out)
{
    /* Everything but the transforms (and the check after backward) is the
     * codec policy's: the decorator forwards it. */
    actc_status st = actc__policy_decorate(spec, sizeof(compact_state), inner, out);
    if (st != ACTC_OK) return st;
    actc_policy *p = *out;
    compact_state *s = cs(p);
    s->o = *o;
    snprintf(s->layers, sizeof s->layers, "%s", layers);
    p->transform = compact_transform;
    p->after_backward = compact_after;
    return ACTC_OK;
}
