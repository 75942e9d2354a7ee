/* ActNN L3: fine-grained mixed precision (paper sections 4.2-4.3).
 *
 * Each ACT save l (a layer, identified by its stable key) has a per-layer
 * budget b^(l), an average number of bits per element.  Its variance
 * contribution at b bits for sample n is w_n / (2^b - 1)^2 with
 *     w_n = s^(l) * g^(l) * ||R_n||^2
 * (the paper's G/6 factor is common to all terms and dropped): ||R_n||^2 is
 * the sum of squared per-group ranges of the sample, g^(l) the moving average
 * over steps of the per-sample squared norm of the gradient reaching the
 * saving operators' outputs (the engine reports it during backward; a tensor
 * several operators saved sums their reports, as its real sensitivity does),
 * and s^(l) the operator's factor (paper appendix B, ActNN's code): 1 for a
 * linear layer (Eq. 9); kh*kw/(H*W) for a convolution's input (each input
 * element meets kh*kw of the H*W output positions' gradients; without it
 * the allocation was worse than uniform bits); 1 otherwise.
 *
 *  1. per-sample allocation, during forward: the layer's samples share
 *     N * b^(l) bits; greedy from 8 bits per sample.  The chosen per-sample
 *     bits go into the payload with the data.
 *  2. per-layer allocation, after backward: the same problem over every
 *     (layer, sample) of the step, each bit costing D^(l) (elements per
 *     sample), under the model-wide budget; then b^(l) <- mean_n b^(l)_n.
 *     The inputs of normalisation layers (batch, layer, RMS norm) take no
 *     part: they keep the average budget (with per-sample allocation).
 *     Their own weight gradient (gamma, beta) is tiny, but noise in their
 *     input reaches the previous layer's weight gradient through dx, which
 *     the per-layer objective (paper Eq. 8) leaves out; ActNN's code gives a
 *     batch norm the bits of the convolution before it.  Measured with
 *     `actc variance` (ResNet-20, batch 64): letting them into the per-layer
 *     allocation tripled the compression variance at 2 bits, keeping them
 *     at the budget lowered it 16% below uniform 2 bits.
 *
 * Before a layer's first backward its gradient magnitude is unknown and all
 * layers weigh the same.  What the loss saves stays fp32, as in ActNN. */
#include "policy.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ACTNN_MAX_BITS 8
#define GRAD_EMA 0.9 /* weight of the past in the gradient-magnitude average */

typedef struct {
    uint64_t key;
    uint64_t step;      /* last step this layer saved in                  */
    double bits;        /* b^(l): average bits per element                */
    double grad_sq;     /* g^(l); < 0 until the first backward            */
    double grad_step;   /* reports of the current backward, summed        */
    double scale;       /* s^(l) of the last save                         */
    int fixed;          /* a normalisation input: keeps the budget        */
    size_t D;           /* elements per sample                            */
    int N, cap;         /* samples of the last save; capacity of arrays   */
    double *range_sq;   /* ||R_n||^2 of the last save                     */
    uint8_t *sbits;     /* per-sample bits of the last save               */
} layer;

typedef struct {
    double budget;      /* average bits per element over the model        */
    uint64_t step;      /* step of the current forward                    */
    layer *layers;
    int n_layers, cap_layers;
} actnn_state;

static layer *find_layer(actnn_state *s, uint64_t key)
{
    for (int i = 0; i < s->n_layers; i++)
        if (s->layers[i].key == key) return &s->layers[i];
    return NULL;
}

static layer *get_layer(actnn_state *s, uint64_t key)
{
    layer *l = find_layer(s, key);
    if (l) return l;
    if (s->n_layers == s->cap_layers) {
        int cap = s->cap_layers ? 2 * s->cap_layers : 64;
        layer *n = realloc(s->layers, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        s->layers = n;
        s->cap_layers = cap;
    }
    l = &s->layers[s->n_layers++];
    memset(l, 0, sizeof *l);
    l->key = key;
    l->bits = s->budget;
    l->grad_sq = -1;
    return l;
}

static int reserve_samples(layer *l, int N)
{
    if (N <= l->cap) return 1;
    double *r = realloc(l->range_sq, (size_t)N * sizeof *r);
    if (!r) return 0;
    l->range_sq = r;
    uint8_t *b = realloc(l->sbits, (size_t)N);
    if (!b) return 0;
    l->sbits = b;
    l->cap = N;
    return 1;
}

/* s^(l): how strongly the saving operator's weight gradient reacts to noise
 * in this input (see the top of the file). */
static double op_scale(const actc_save_desc *d)
{
    const actc_tensor *t = d->t;
    const actc_save_role *r = d->role;
    if (r->role == ACTC_ROLE_CONV_IN && t->ndim == 4 && r->kernel_h > 0 && r->kernel_w > 0)
        return (double)r->kernel_h * r->kernel_w / ((double)t->shape[2] * t->shape[3]);
    return 1.0;
}

static actc_status actnn_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                                actc_codec_args *args)
{
    actnn_state *s = p->state;
    if (d->role->role == ACTC_ROLE_LOSS_IN) {
        *codec = &actc_codec_fp32;
        return ACTC_OK;
    }
    const actc_tensor *t = d->t;
    int N = t->ndim >= 2 ? t->shape[0] : 1;
    if (N == 0 || t->numel == 0) { /* nothing to quantize */
        *codec = &actc_codec_fp32;
        return ACTC_OK;
    }
    size_t D = t->numel / (size_t)N;
    layer *l = get_layer(s, d->stable_key);
    if (!l || !reserve_samples(l, N))
        return actc_set_error(ACTC_ERR_OOM, "out of memory for the mixed-precision state of %s", d->op);
    s->step = d->step;
    l->step = d->step;
    l->N = N;
    l->D = D;
    l->scale = op_scale(d);
    l->fixed = d->role->role == ACTC_ROLE_NORM_IN;
    if (d->range_sq)
        memcpy(l->range_sq, d->range_sq, (size_t)N * sizeof *l->range_sq);
    else if (t->data)
        actc_quant_range_sq(t->data, N, D, ACTC_QUANT_GROUP, l->range_sq);
    else
        return actc_set_error(ACTC_ERR_INVALID,
                              "%s: ActNN sizes per-sample widths from the values: give the planner the data or "
                              "sample_range_sq",
                              d->op);
    /* Within one layer g^(l) is common to all samples: ||R_n||^2 decides. */
    actc_status st = actc__alloc_bits_greedy(N, l->range_sq, NULL, 1, ACTNN_MAX_BITS, l->bits * N, l->sbits);
    if (st != ACTC_OK) return st;
    *codec = &actc_codec_quant;
    args->group = ACTC_QUANT_GROUP;
    args->sample_bits = l->sbits;
    return ACTC_OK;
}

static void actnn_observe_grad(actc_policy *p, const uint64_t *keys, int n_keys, double grad_sq)
{
    actnn_state *s = p->state;
    for (int i = 0; i < n_keys; i++) {
        layer *l = find_layer(s, keys[i]);
        if (l) l->grad_step += grad_sq;
    }
}

/* Fold this step's gradient reports into the moving averages. */
static void update_grad_averages(actnn_state *s)
{
    for (int i = 0; i < s->n_layers; i++) {
        layer *l = &s->layers[i];
        if (l->step != s->step || l->grad_step <= 0) continue;
        l->grad_sq = l->grad_sq < 0 ? l->grad_step : GRAD_EMA * l->grad_sq + (1 - GRAD_EMA) * l->grad_step;
        l->grad_step = 0;
    }
}

/* Per-layer re-allocation over every (layer, sample) of the step just done. */
static actc_status actnn_replan(actc_policy *p)
{
    actnn_state *s = p->state;
    update_grad_averages(s);
    int items = 0, n_seen = 0;
    double g_mean = 0;
    for (int i = 0; i < s->n_layers; i++) {
        const layer *l = &s->layers[i];
        if (l->step == s->step && !l->fixed) items += l->N;
        if (l->grad_sq >= 0) {
            g_mean += l->grad_sq;
            n_seen++;
        }
    }
    if (!items) return ACTC_OK;
    /* A layer no gradient reached yet weighs as an average one. */
    g_mean = n_seen ? g_mean / n_seen : 1.0;
    double *w = malloc((size_t)items * sizeof *w), *c = malloc((size_t)items * sizeof *c);
    uint8_t *bits = malloc((size_t)items);
    if (w && c && bits) {
        double budget = 0;
        int k = 0;
        for (int i = 0; i < s->n_layers; i++) {
            const layer *l = &s->layers[i];
            if (l->step != s->step || l->fixed) continue;
            double g = (l->grad_sq < 0 ? g_mean : l->grad_sq) * l->scale;
            for (int n = 0; n < l->N; n++, k++) {
                w[k] = g * l->range_sq[n];
                c[k] = (double)l->D;
                budget += s->budget * (double)l->D;
            }
        }
        /* On OOM the layers keep their budgets: allocation is an
         * optimisation, never a reason to fail a step that succeeded. */
        if (actc__alloc_bits_greedy(items, w, c, 1, ACTNN_MAX_BITS, budget, bits) == ACTC_OK) {
            k = 0;
            for (int i = 0; i < s->n_layers; i++) {
                layer *l = &s->layers[i];
                if (l->step != s->step || l->fixed) continue;
                double sum = 0;
                for (int n = 0; n < l->N; n++) sum += bits[k++];
                l->bits = sum / l->N;
            }
        } else {
            actc_clear_error();
        }
    }
    free(w);
    free(c);
    free(bits);
    return ACTC_OK;
}

static void actnn_destroy(actc_policy *p)
{
    actnn_state *s = p->state;
    for (int i = 0; i < s->n_layers; i++) {
        free(s->layers[i].range_sq);
        free(s->layers[i].sbits);
    }
    free(s->layers);
    free(s);
    free(p);
}

/* Checkpoint state: every layer's key, last step, budget b^(l), gradient
 * average g^(l) and this step's pending reports, in table order (the
 * per-layer allocation walks the table in order, so order is state too).
 * What a save recomputes (ranges, per-sample bits, scale) is not kept. */
#define LAYER_BYTES (8 + 8 + 8 + 8 + 8)

static actc_status actnn_save_state(const actc_policy *p, actc__wbuf *w)
{
    const actnn_state *s = p->state;
    actc__w_f64(w, s->budget);
    actc__w_u64(w, s->step);
    actc__w_u32(w, (uint32_t)s->n_layers);
    for (int i = 0; i < s->n_layers; i++) {
        const layer *l = &s->layers[i];
        actc__w_u64(w, l->key);
        actc__w_u64(w, l->step);
        actc__w_f64(w, l->bits);
        actc__w_f64(w, l->grad_sq);
        actc__w_f64(w, l->grad_step);
    }
    return ACTC_OK;
}

static actc_status actnn_load_state(actc_policy *p, actc__rbuf *r)
{
    actnn_state *s = p->state;
    const double budget = actc__r_f64(r);
    const uint64_t step = actc__r_u64(r);
    const uint32_t n = actc__r_u32(r);
    if (r->bad || n > (r->end - r->pos) / LAYER_BYTES)
        return actc_set_error(ACTC_ERR_FORMAT, "the %s policy state is truncated", p->spec);
    if (budget != s->budget)
        return actc_set_error(ACTC_ERR_INVALID, "the policy state is for an average of %g bits, the policy %s has %g",
                              budget, p->spec, s->budget);
    layer *ls = calloc((size_t)n + 1, sizeof *ls);
    if (!ls) return actc_set_error(ACTC_ERR_OOM, "out of memory loading the %s policy state", p->spec);
    for (uint32_t i = 0; i < n; i++) {
        ls[i].key = actc__r_u64(r);
        ls[i].step = actc__r_u64(r);
        ls[i].bits = actc__r_f64(r);
        ls[i].grad_sq = actc__r_f64(r);
        ls[i].grad_step = actc__r_f64(r);
        if (!(ls[i].bits >= 1 && ls[i].bits <= ACTNN_MAX_BITS)) r->bad = 1;
        /* g^(l) is a mean of squares (or -1: not seen yet), the step's sum
         * one too: NaN, infinities and other negatives are forged. */
        if (!isfinite(ls[i].grad_sq) || (ls[i].grad_sq < 0 && ls[i].grad_sq != -1)) r->bad = 1;
        if (!isfinite(ls[i].grad_step) || ls[i].grad_step < 0) r->bad = 1;
    }
    if (r->bad) {
        free(ls);
        return actc_set_error(ACTC_ERR_FORMAT, "the %s policy state is malformed", p->spec);
    }
    for (int i = 0; i < s->n_layers; i++) {
        free(s->layers[i].range_sq);
        free(s->layers[i].sbits);
    }
    free(s->layers);
    s->layers = ls;
    s->n_layers = (int)n;
    s->cap_layers = (int)n + 1;
    s->step = step;
    return ACTC_OK;
}

static const actc_policy_measure actnn_measure = {.observe_grad = actnn_observe_grad, .replan = actnn_replan};

actc_status actc__policy_actnn_mixed(const char *spec, double budget, actc_policy **out)
{
    actc_status st = actc__policy_new(spec, sizeof(actnn_state), actnn_choose, out);
    if (st != ACTC_OK) return st;
    actc_policy *p = *out;
    ((actnn_state *)p->state)->budget = budget;
    p->measure = &actnn_measure;
    p->destroy = actnn_destroy;
    p->save_state = actnn_save_state;
    p->load_state = actnn_load_state;
    return ACTC_OK;
}

/* ActNN's mixed precision on p's chain (the learner, if it is one). */
static const actc_policy *observer(const actc_policy *p)
{
    p = actc__policy_learner(p);
    return p && p->measure == &actnn_measure ? p : NULL;
}

int actc__actnn_layers(const actc_policy *p, uint64_t *keys, double *bits, double *grad_sq, int cap)
{
    if (!(p = observer(p))) return -1;
    const actnn_state *s = p->state;
    for (int i = 0; i < s->n_layers && i < cap; i++) {
        keys[i] = s->layers[i].key;
        bits[i] = s->layers[i].bits;
        grad_sq[i] = s->layers[i].grad_sq;
    }
    return s->n_layers;
}

const uint8_t *actc__actnn_sample_bits(const actc_policy *p, uint64_t key, int *n)
{
    if (!(p = observer(p))) return NULL;
    layer *l = find_layer(p->state, key);
    if (!l) return NULL;
    *n = l->N;
    return l->sbits;
}
