/* GACT (Liu et al. 2022): every ACT save, whatever operator made it, goes
 * through ActNN's per-group quantizer at a width chosen per tensor from its
 * measured sensitivity c_l (paper section 4).
 *
 * Tensors are told apart by the store's stable key (scope, operator, save
 * index, occurrence), not by save order, so a graph that changes between
 * steps keeps each tensor's bits.  The widths come from the ladder 32 (fp32),
 * 8, 4, 2, 1 by the greedy of bit_alloc.c and its local refinement: minimise sum_l c_l S(b_l) under
 * sum_l b_l D_l <= budget * sum_l D_l, with S(b) = (2^b - 1)^-2 (S(32) is
 * ~5e-20: fp32 adds no variance).
 *
 * The sensitivities are measured by the controller (gact_controller.c):
 * during its passes every tensor is quantized at GACT_EST_BITS with its
 * usual rounding stream except the one tensor being measured, whose stream
 * is re-keyed.  Until the first measurement (a policy used without the
 * controller) a tensor gets the budget rounded down to the ladder, and what
 * the loss saves stays fp32, the way the measurement ends up anyway.
 *
 *   gact:fix4      every ACT tensor at 4 bits, the loss's too (the paper's
 *                  "Fix 4bit" column); sensitivities are still measured, for
 *                  inspection and the variance alert
 *   gact:B         adaptive at an average of B bits (L1 = 4) */
#include "policy.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int k_ladder[] = {32, 8, 4, 2, 1};
#define LADDER_LEVELS ((int)(sizeof k_ladder / sizeof k_ladder[0]))

typedef struct {
    uint64_t key;
    actc_saved_info info;   /* op, scope, shape, c_l, bits, bytes          */
    size_t D;               /* elements of the last save                   */
    uint32_t pass;          /* estimation pass that last saw it            */
} gact_tensor;

typedef struct {
    double budget;          /* average bits (adaptive); 0: fixed           */
    int fixed_bits;         /* gact:fix4: 4                                */
    gact_tensor *t;
    int n, cap;
    int estimating;         /* all tensors at GACT_EST_BITS                */
    uint32_t pass;          /* current estimation pass id                  */
    uint64_t perturb_key;   /* re-keyed tensor (0: none)                   */
    uint64_t salt;
} gact_state;

static gact_tensor *find(gact_state *s, uint64_t key)
{
    for (int i = 0; i < s->n; i++)
        if (s->t[i].key == key) return &s->t[i];
    return NULL;
}

static int default_bits(const gact_state *s, actc_role role)
{
    if (s->fixed_bits) return s->fixed_bits;
    if (role == ACTC_ROLE_LOSS_IN) return 32;
    for (int k = 0; k < LADDER_LEVELS; k++)
        if (k_ladder[k] <= s->budget) return k_ladder[k];
    return 1;
}

static gact_tensor *get(gact_state *s, const actc_save_desc *d)
{
    gact_tensor *g = find(s, d->stable_key);
    if (g) return g;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        gact_tensor *n = realloc(s->t, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        s->t = n;
        s->cap = cap;
    }
    g = &s->t[s->n++];
    memset(g, 0, sizeof *g);
    g->key = d->stable_key;
    g->info.sensitivity = -1;
    g->info.bits = default_bits(s, d->role->role);
    return g;
}

static actc_status gact_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                               actc_codec_args *args)
{
    gact_state *s = p->state;
    gact_tensor *g = get(s, d);
    if (!g) return actc_set_error(ACTC_ERR_OOM, "out of memory for GACT's tensor table");
    snprintf(g->info.op, sizeof g->info.op, "%s", d->op);
    snprintf(g->info.scope, sizeof g->info.scope, "%s", d->scope);
    g->info.ndim = d->t->ndim;
    memcpy(g->info.shape, d->t->shape, sizeof g->info.shape);
    g->D = d->t->numel;
    g->info.fp32_bytes = d->t->numel * sizeof(float);
    g->pass = s->pass;
    const int bits = s->estimating ? GACT_EST_BITS : g->info.bits;
    if (bits >= 32) {
        *codec = &actc_codec_fp32;
    } else {
        *codec = &actc_codec_quant;
        args->bits = bits;
        args->group = ACTC_QUANT_GROUP;
    }
    if (s->estimating && d->stable_key == s->perturb_key) args->key = actc_rng_key(args->key, s->salt, 0x5E45);
    if (!s->estimating) g->info.stored_bytes = (*codec)->plan(args, d->t->numel);
    return ACTC_OK;
}

static void gact_destroy(actc_policy *p)
{
    gact_state *s = p->state;
    if (s) free(s->t);
    free(s);
    free(p);
}

/* Checkpoint state: the measurement pass counter and the tensor table in
 * order (key, what inspection shows, the element count and the pass that
 * last saw it), so a resumed run keeps every tensor's bits and measures
 * again when the controller's interval says so, not at once. */
static void w_info(actc__wbuf *w, const actc_saved_info *in)
{
    actc__w_str(w, in->op);
    actc__w_str(w, in->scope);
    actc__w_u32(w, (uint32_t)in->ndim);
    for (int d = 0; d < ACTC_MAX_DIMS; d++) actc__w_u32(w, (uint32_t)in->shape[d]);
    actc__w_f64(w, in->sensitivity);
    actc__w_u32(w, (uint32_t)in->bits);
    actc__w_u64(w, in->stored_bytes);
    actc__w_u64(w, in->fp32_bytes);
}

static void r_info(actc__rbuf *r, actc_saved_info *in)
{
    actc__r_str(r, in->op, sizeof in->op);
    actc__r_str(r, in->scope, sizeof in->scope);
    uint32_t nd = actc__r_u32(r);
    if (nd > ACTC_MAX_DIMS) r->bad = 1;
    in->ndim = (int)nd;
    for (int d = 0; d < ACTC_MAX_DIMS; d++) in->shape[d] = (int)actc__r_u32(r);
    in->sensitivity = actc__r_f64(r);
    in->bits = (int)actc__r_u32(r);
    in->stored_bytes = (size_t)actc__r_u64(r);
    in->fp32_bytes = (size_t)actc__r_u64(r);
    const int b = in->bits;
    if (b != 32 && !(b >= 1 && b <= 8)) r->bad = 1; /* fp32, or the quantizer's widths */
    /* A sensitivity is a variance: finite and >= 0 (a forged NaN or -1
     * would steer the bit allocation anywhere). */
    if (!isfinite(in->sensitivity) || in->sensitivity < 0) r->bad = 1;
}

static actc_status gact_save_state(const actc_policy *p, actc__wbuf *w)
{
    const gact_state *s = p->state;
    actc__w_f64(w, s->budget);
    actc__w_u32(w, (uint32_t)s->fixed_bits);
    actc__w_u32(w, s->pass);
    actc__w_u32(w, (uint32_t)s->n);
    for (int i = 0; i < s->n; i++) {
        actc__w_u64(w, s->t[i].key);
        w_info(w, &s->t[i].info);
        actc__w_u64(w, s->t[i].D);
        actc__w_u32(w, s->t[i].pass);
    }
    return ACTC_OK;
}

/* The smallest record of one tensor (empty op and scope). */
#define TENSOR_MIN_BYTES (8 + 4 + 4 + 4 + 4 * ACTC_MAX_DIMS + 8 + 4 + 8 + 8 + 8 + 4)

static actc_status gact_load_state(actc_policy *p, actc__rbuf *r)
{
    gact_state *s = p->state;
    const double budget = actc__r_f64(r);
    const uint32_t fixed = actc__r_u32(r), pass = actc__r_u32(r), n = actc__r_u32(r);
    if (r->bad || n > (r->end - r->pos) / TENSOR_MIN_BYTES)
        return actc_set_error(ACTC_ERR_FORMAT, "the %s policy state is truncated", p->spec);
    if (budget != s->budget || (int)fixed != s->fixed_bits)
        return actc_set_error(ACTC_ERR_INVALID, "the policy state is for another gact level than %s", p->spec);
    gact_tensor *t = calloc((size_t)n + 1, sizeof *t);
    if (!t) return actc_set_error(ACTC_ERR_OOM, "out of memory loading the %s policy state", p->spec);
    for (uint32_t i = 0; i < n && !r->bad; i++) {
        t[i].key = actc__r_u64(r);
        r_info(r, &t[i].info);
        t[i].D = (size_t)actc__r_u64(r);
        t[i].pass = actc__r_u32(r);
    }
    if (r->bad) {
        free(t);
        return actc_set_error(ACTC_ERR_FORMAT, "the %s policy state is malformed", p->spec);
    }
    free(s->t);
    s->t = t;
    s->n = (int)n;
    s->cap = (int)n + 1;
    s->pass = pass;
    return ACTC_OK;
}

/* ---- measurement (the controller's hooks) ---------------------------------------- */

static void gact_mode(actc_policy *p, int on, uint64_t perturb_key, uint64_t salt)
{
    gact_state *s = p->state;
    if (on && !s->estimating) s->pass++;
    s->estimating = on;
    s->perturb_key = perturb_key;
    s->salt = salt;
}

/* The tensors saved in the current measuring pass. */
static int gact_keys(const actc_policy *p, uint64_t *keys, int cap)
{
    const gact_state *s = p->state;
    int n = 0;
    for (int i = 0; i < s->n; i++)
        if (s->t[i].pass == s->pass) {
            if (n < cap) keys[n] = s->t[i].key;
            n++;
        }
    return n;
}

/* Re-allocate the live tensors' bits from their sensitivities (adaptive
 * levels; gact:fixB keeps its width). */
static actc_status allocate(gact_state *s)
{
    if (s->fixed_bits) return ACTC_OK;
    int n = 0;
    for (int i = 0; i < s->n; i++) n += s->t[i].pass == s->pass && s->t[i].info.sensitivity >= 0;
    if (!n) return ACTC_OK;
    double *w = malloc((size_t)n * sizeof *w), *c = malloc((size_t)n * sizeof *c);
    uint8_t *bits = malloc((size_t)n);
    int *idx = malloc((size_t)n * sizeof *idx);
    actc_status st = ACTC_OK;
    if (!w || !c || !bits || !idx) {
        st = actc_set_error(ACTC_ERR_OOM, "out of memory allocating GACT's bits");
        goto out;
    }
    double total = 0;
    n = 0;
    for (int i = 0; i < s->n; i++) {
        const gact_tensor *g = &s->t[i];
        if (g->pass != s->pass || g->info.sensitivity < 0) continue;
        w[n] = g->info.sensitivity;
        c[n] = (double)g->D;
        total += (double)g->D;
        idx[n++] = i;
    }
    st = actc__alloc_bits_ladder(n, w, c, k_ladder, LADDER_LEVELS, s->budget * total, bits);
    if (st == ACTC_OK) actc__alloc_refine(n, w, c, k_ladder, LADDER_LEVELS, s->budget * total, bits);
    for (int j = 0; st == ACTC_OK && j < n; j++) s->t[idx[j]].info.bits = bits[j];
out:
    free(w);
    free(c);
    free(bits);
    free(idx);
    return st;
}

static actc_status gact_commit(actc_policy *p, const uint64_t *keys, const double *c, int n)
{
    gact_state *s = p->state;
    for (int i = 0; i < n; i++) {
        gact_tensor *g = find(s, keys[i]);
        if (g) g->info.sensitivity = c[i];
    }
    return allocate(s);
}

/* sum_l c_l S(b_l) over the live tensors: the compression variance V(b). */
static double gact_variance(const actc_policy *p)
{
    const gact_state *s = p->state;
    double v = 0;
    for (int i = 0; i < s->n; i++)
        if (s->t[i].pass == s->pass && s->t[i].info.sensitivity > 0)
            v += s->t[i].info.sensitivity * actc__quant_var_factor(s->t[i].info.bits);
    return v;
}

/* The tensor table (all tensors ever seen). */
static int gact_tensors(const actc_policy *p, actc_saved_info *out, int cap)
{
    const gact_state *s = p->state;
    int n = 0;
    for (int i = 0; i < s->n; i++) {
        if (n < cap) out[n] = s->t[i].info;
        n++;
    }
    return n;
}

/* Every tensor is rounded at GACT_EST_BITS during the measuring passes. */
static double gact_unit_variance(const actc_policy *p)
{
    (void)p;
    return actc__quant_var_factor(GACT_EST_BITS);
}

static const actc_policy_measure gact_measure = {.mode = gact_mode, .keys = gact_keys,
                                                 .unit_variance = gact_unit_variance, .commit = gact_commit,
                                                 .variance = gact_variance};

actc_status actc__policy_gact(const char *spec, double budget, int fixed_bits, int segments, int attention,
                              actc_policy **out)
{
    actc_status st = actc__policy_new(spec, sizeof(gact_state), gact_choose, out);
    if (st != ACTC_OK) return st;
    actc_policy *p = *out;
    gact_state *s = p->state;
    s->budget = budget;
    s->fixed_bits = fixed_bits;
    p->destroy = gact_destroy;
    p->save_state = gact_save_state;
    p->load_state = gact_load_state;
    p->tensors = gact_tensors;
    /* gact:CKPT (everything fp32) has nothing to measure. */
    p->measure = fixed_bits >= 32 ? NULL : &gact_measure;
    if (segments) p->region[ACTC_REGION_BLOCK] = ACTC_PLAN_RECOMPUTE;
    if (attention >= 0)
        p->region[ACTC_REGION_ATTN] = attention == ACTC_ATTN_FLASH ? ACTC_PLAN_RECOMPUTE : ACTC_PLAN_SAVE;
    return ACTC_OK;
}
