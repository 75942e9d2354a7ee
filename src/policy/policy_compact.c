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
    char layers[ACTC_COMPACT_LAYERS_MAX];  /* '|'-separated globs over the save's scope */
    actc_policy *inner;       /* the codec policy (fp32 when none given)   */
    uint64_t planned;         /* projections planned since the last backward */
} compact_state;

static compact_state *cs(const actc_policy *p) { return p->state; }

static int layer_selected(const char *layers, const char *scope)
{
    char buf[ACTC_COMPACT_LAYERS_MAX];
    snprintf(buf, sizeof buf, "%s", layers);
    for (char *save = NULL, *g = strtok_r(buf, "|", &save); g; g = strtok_r(NULL, "|", &save))
        if (!fnmatch(g, scope, 0)) return 1;
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
    if (!layer_selected(s->layers, d->scope)) return ACTC_OK;
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

/* Everything but the transforms is the codec policy's. */
static actc_status compact_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                                  actc_codec_args *args)
{
    actc_policy *in = cs(p)->inner;
    return in->choose(in, d, codec, args);
}

static void compact_observe(actc_policy *p, const uint64_t *keys, int n, double g)
{
    actc_policy *in = cs(p)->inner;
    in->observe_grad(in, keys, n, g);
}

/* A backward pass with nothing projected means the policy matched no layer
 * of the model: training on would be `none` under another name. */
static actc_status compact_after(actc_policy *p, actc_ctx *ctx)
{
    compact_state *s = cs(p);
    if (!s->planned)
        return actc_set_error(ACTC_ERR_INVALID, "policy %s projected no linear layer: it applies to linear layers "
                              "whose weight is a trained parameter, in the scopes layers= selects (%s; the default %s "
                              "is the transformer blocks), except those whose input another operator keeps "
                              "(all-linear includes them)", p->spec, s->layers, ACTC_COMPACT_LAYERS);
    s->planned = 0;
    actc_policy *in = s->inner;
    return in->after_backward ? in->after_backward(in, ctx) : ACTC_OK;
}

static actc_status compact_save(const actc_policy *p, actc__wbuf *w)
{
    const actc_policy *in = cs(p)->inner;
    return in->save_state ? in->save_state(in, w) : ACTC_OK;
}

static actc_status compact_load(actc_policy *p, actc__rbuf *r)
{
    actc_policy *in = cs(p)->inner;
    return in->load_state ? in->load_state(in, r) : ACTC_OK;
}

static void compact_destroy(actc_policy *p)
{
    actc__policy_free(cs(p)->inner);
    free(p->state);
    free(p);
}

actc_policy *actc__policy_codec_part(actc_policy *p)
{
    return p && p->transform == compact_transform ? cs(p)->inner : p;
}

actc_status actc__policy_compact(const char *spec, const actc_compact_opts *o, const char *layers, actc_policy *inner,
                                 actc_policy **out)
{
    actc_status st = actc__policy_new(spec, sizeof(compact_state), compact_choose, out);
    if (st != ACTC_OK) {
        actc__policy_free(inner);
        return st;
    }
    actc_policy *p = *out;
    compact_state *s = cs(p);
    s->o = *o;
    snprintf(s->layers, sizeof s->layers, "%s", layers);
    s->inner = inner;
    p->transform = compact_transform;
    p->observe_grad = inner->observe_grad ? compact_observe : NULL;
    p->after_backward = compact_after;
    p->save_state = inner->save_state ? compact_save : NULL;
    p->load_state = inner->load_state ? compact_load : NULL;
    p->destroy = compact_destroy;
    memcpy(p->region, inner->region, sizeof p->region);
    return ACTC_OK;
}
