/* The policy interface the saved-context store calls.  Policies plan, for
 * every ACT tensor saved for backward, which codec stores it and with which
 * parameters, or which transform the operator applies first (when the
 * save's role advertises one), and, per kind of region, whether models
 * recompute it; they live in the policy layer (src/policy), above this one, and
 * are installed into a context with actc__ctx_install_policy.  MASK, INDEX and
 * EXACT saves never reach a policy: the store keeps them lossless.  A policy
 * may keep state across steps (per-tensor bits, sensitivities) keyed by the
 * stable save key. */
#ifndef ACTC_POLICY_IFACE_H
#define ACTC_POLICY_IFACE_H
#include "actc.h"
#include "../codec/codec.h"
#include "../core/core.h"

/* What the store tells a policy about one save.  Policies decide on the
 * role and the shapes; op, scope and save_index are for naming (tables,
 * messages) and for the stable key, never for choosing a codec. */
typedef struct {
    const char *op;          /* operator name of the saving node              */
    const char *scope;       /* name scope of the node ("layer1.0")           */
    int save_index;          /* k-th save on that node                        */
    int node_index;          /* position of the node on the tape             */
    uint64_t stable_key;     /* hash of (scope, op, save_index, occurrence):
                                the same tensor of the same layer has the same
                                key in every step, whatever the save order     */
    actc_save_kind kind;
    const actc_save_role *role; /* what the save is (never NULL)             */
    const actc_tensor *t;    /* the tensor being saved (data readable, except
                                from a planner given device memory: NULL)      */
    uint64_t step;           /* training step                                 */
    const actc_node *node;   /* the saving node (its inputs' shapes, attrs)   */
    int kept;                /* transform plans: another save still pending
                                holds this tensor, so storing a transform of
                                it saves no memory (0 for codec choices)       */
    uint64_t seed;           /* the context's seed (for a policy's own streams) */
    int in_block;            /* saved inside one of the model's repeated blocks
                                (a region of kind ACTC_REGION_BLOCK)          */
    const double *range_sq;  /* the planner's caller's per-sample ||R_n||^2
                                (actc_save_query.sample_range_sq) when t's
                                values are not readable here; else NULL        */
    int stage_held, stage_held_max; /* a pipeline stage's context: the
                                micro-batches it holds at once, and the most
                                any stage holds (actc_ctx_set_stage); 0, 0
                                outside a pipeline                           */
} actc_save_desc;

typedef struct actc_policy actc_policy;

/* How a policy learns: its measure hooks (NULL for a policy that learns
 * nothing).  Two ways, each optional (NULL slots):
 *  - observing, driven by the engine: during every backward pass
 *    observe_grad receives the gradient statistics of each node's output,
 *    and replan follows the pass (ActNN's per-layer and per-sample bits);
 *  - measuring passes, driven by the controller
 *    (src/policy/gact_controller.c), which runs one reference pass and one
 *    pass per measured tensor on the same batch and step, then commits
 *    (GACT's Algorithm 1): mode, keys, unit_variance, commit and variance,
 *    all set or all NULL.
 * The engine and the controller find the learning policy on a decorator
 * chain themselves (actc__policy_learner), so decorators forward none of
 * this. */
typedef struct {
    /* Gradient statistics, during backward, before a node's backward
     * function runs: the stable keys of the node's ACT saves and the mean
     * over samples (first axis of the node's output) of the squared L2 norm
     * of the gradient reaching that output: the ||grad H^(l)_n||^2 of
     * ActNN's sensitivity (its "moving average of the gradient magnitude
     * across samples" is kept by the policy). */
    void (*observe_grad)(actc_policy *p, const uint64_t *keys, int n_keys, double grad_sq_per_sample);
    /* After each backward pass: re-plan from what it observed.  An error
     * fails the backward pass (actc_backward returns it). */
    actc_status (*replan)(actc_policy *p);
    /* Enter (on = 1) or leave the measuring passes' mode; perturb_key: the
     * tensor whose rounding stream is re-keyed with salt (0: none). */
    void (*mode)(actc_policy *p, int on, uint64_t perturb_key, uint64_t salt);
    /* Keys of the tensors saved since mode(on): all counted, up to cap
     * written. */
    int (*keys)(const actc_policy *p, uint64_t *keys, int cap);
    /* The variance one rounding adds per unit of sensitivity during the
     * measuring passes: c_l = ||g_0 - g_l||^2 / 2 / unit_variance(p). */
    double (*unit_variance)(const actc_policy *p);
    /* Take the n sensitivities c[i] of keys[i] (called only once every pass
     * succeeded) and re-plan from them. */
    actc_status (*commit)(actc_policy *p, const uint64_t *keys, const double *c, int n);
    /* The compression variance of the committed plan (the variance alert's
     * V(b)). */
    double (*variance)(const actc_policy *p);
} actc_policy_measure;

struct actc_policy {
    char spec[ACTC_POLICY_MAX];      /* canonical spec, e.g. "bf16"             */
    /* Choose the codec for an ACT save.  args->key is preset to a stream
     * derived from (seed, step, stable_key); a policy may replace it. */
    actc_status (*choose)(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                          actc_codec_args *args);
    /* Called after each backward pass, before the learning policy's replan
     * (a check of the pass: compact's "projected nothing"); may be NULL.  An
     * error fails the backward pass (actc_backward returns it). */
    actc_status (*after_backward)(actc_policy *p, actc_ctx *ctx);
    void (*destroy)(actc_policy *p);
    /* What a checkpoint keeps of the policy's learnt state (both NULL for a
     * stateless policy).  save_state appends it to w (w->failed on OOM);
     * load_state reads what save_state wrote, checking all of it before
     * changing anything: a malformed section is ACTC_ERR_FORMAT and leaves
     * the policy as it was. */
    actc_status (*save_state)(const actc_policy *p, actc__wbuf *w);
    actc_status (*load_state)(actc_policy *p, actc__rbuf *r);
    /* Transform plan for a save whose role advertises transforms
     * (d->role->transforms != 0); may be NULL (then never).  out->kind is
     * preset to ACTC_XFORM_NONE; a policy sets a transform the role
     * advertises, with its parameters (rank, key). */
    actc_status (*transform)(actc_policy *p, const actc_save_desc *d, actc_transform *out);
    /* How it learns (above); NULL unless it does. */
    const actc_policy_measure *measure;
    /* The per-tensor state the policy learnt, for inspection (GACT's table:
     * up to cap written, the count returned); may be NULL. */
    int (*tensors)(const actc_policy *p, actc_saved_info *out, int cap);
    /* The bit width its saves take on a pipeline stage that holds `held`
     * micro-batches at once when the fullest holds held_max (DBCA-PP); NULL
     * for a policy that does not compensate. */
    int (*stage_bits)(const actc_policy *p, int held, int held_max);
    /* The policy this one decorates (compact's codec policy: composition,
     * actc__policy_decorate), which it owns; NULL for a plain policy. */
    actc_policy *inner;
    void *state;
    /* Recompute plan of each kind of region: ACTC_PLAN_ANY (the model's
     * default, what actc__policy_new sets), _SAVE or _RECOMPUTE. */
    signed char region[ACTC_REGION_NKINDS];
    int frozen;              /* set by actc_ctx_freeze_policy: the engine then
                                calls neither after_backward nor the
                                measure hooks, and the controller measures
                                nothing                                      */
};

/* The policy on p's decorator chain that learns (has measure hooks), or
 * NULL. */
static inline actc_policy *actc__policy_learner(const actc_policy *p)
{
    while (p && !p->measure) p = p->inner;
    return (actc_policy *)p;
}

/* The policy on p's chain that learns by measuring passes (GACT), or
 * NULL. */
static inline actc_policy *actc__policy_measurer(const actc_policy *p)
{
    actc_policy *l = actc__policy_learner(p);
    return l && l->measure->commit ? l : NULL;
}

/* Give ctx a new policy (it takes ownership; the old one is destroyed).
 * Fails with ACTC_ERR_STATE while a tape is recorded. */
actc_status actc__ctx_install_policy(actc_ctx *ctx, actc_policy *p);
/* The policy installed in ctx (NULL: none), for the layers above that save
 * and load its state. */
actc_policy *actc__ctx_policy_of(const actc_ctx *ctx);
void actc__policy_free(actc_policy *p);
#endif
