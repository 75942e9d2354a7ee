/* Internal state of an engine context: the tape (nodes in forward order) and
 * the saved-context store (compressed payloads waiting for backward). */
#ifndef ACTC_AUTOGRAD_H
#define ACTC_AUTOGRAD_H
#include "actc.h"
#include "../codec/codec.h"
#include "policy_iface.h"

typedef struct {
    uint64_t tensor_id;
    uint64_t ref_id;         /* the tensor whose fp32 size the entry stands
                                for: tensor_id, or for a transform (z = x P)
                                the original x                              */
    uint64_t stable_key;     /* the save's key (policy_iface.h)             */
    actc_save_kind kind;
    const actc_codec *codec;
    actc_codec_args args;
    void *blob;              /* CONTEXT-accounted payload; NULL once freed  */
    actc_tensor *held;       /* an fp32 save kept by reference (no blob): the
                                tensor (a view's base), one reference held,
                                its block counted as CONTEXT; NULL otherwise */
    uint32_t version;        /* the saved tensor's version_ at the save      */
    size_t bytes;            /* payload bytes                               */
    size_t fp32_bytes;       /* this entry's share of the fp32 reference    */
    size_t numel;
    int ndim, shape[ACTC_MAX_DIMS];
    int pending;             /* loads still expected                        */
    const actc_node *saver;  /* the first node that saved it (alive while
                                the entry is: nodes die with the tape)       */
    actc_role role;          /* that save's role                             */
    actc_node *recompute;    /* a reference to the output of this recompute
                                region (actc_region_n): no payload, a load
                                reruns the region; NULL for a payload        */
} actc_store_entry;

typedef struct {
    uint64_t key;
    uint32_t count;
} actc_key_count;

/* Parameters a segment's first forward touched (no tape is recorded then). */
typedef struct {
    actc_tensor **t;
    int n, cap;
} actc_param_list;

typedef struct actc_profile actc_profile;

struct actc_ctx {
    int training;
    int no_record;           /* a segment's first forward: record nothing    */
    int replaying;           /* a segment's recompute (actc_ctx_replaying)   */
    int sensitivity_pass;    /* set by the GACT controller around its extra
                                passes (also reported as replaying)          */
    int in_backward;         /* backward_peak is being tracked               */
    int exact_saves;         /* a recompute region's backward rerun: ACT
                                saves are kept fp32 (they live only there)   */
    int fp32_copies;         /* tests: keep fp32 saves as copies, not by
                                reference (the store before references), to
                                compare the two bit for bit                  */
    int counting;            /* actc_ctx_set_counting: saves measured only   */
    int blocks;              /* depth of the model's blocks being run
                                (ACTC_REGION_BLOCK regions): in_block       */
    size_t ref_bytes;        /* actc_store_set_reference: what `none` keeps  */
    size_t ref_by_kind[ACTC_SAVE_NKINDS];
    uint64_t seed, step, key_counter;
    uint64_t stream;           /* actc_ctx_set_stream: the rank, or 0 */
    uint32_t substep;        /* micro-batch of the step (actc_ctx_set_substep) */
    actc_grad_ready_fn on_grad; /* gradient-complete event                  */
    void *on_grad_user;
    actc_param_list *collect; /* a segment's first forward: its parameters   */
    actc_policy *policy;
    signed char region_plan[ACTC_REGION_NKINDS]; /* overrides; ACTC_PLAN_ANY: the policy's */

    actc_node **nodes;
    int n_nodes, cap_nodes;

    actc_store_entry *entries;
    int n_entries, cap_entries;
    actc_store_stats st;
    size_t cur_by_kind[ACTC_SAVE_NKINDS];      /* live payload bytes per kind */
    size_t cur_fp32_by_kind[ACTC_SAVE_NKINDS]; /* live fp32 reference per kind */

    /* occurrences of each (scope, op, save index) this step: stable keys */
    actc_key_count *occ;
    size_t occ_cap, occ_used;

    char scope[128];
    int scope_len[32];
    int scope_depth;

    actc_profile *prof;      /* actc_ctx_profile_start; NULL: not profiling  */
    int stage_held, stage_held_max; /* actc_ctx_set_stage                   */
    int parked;              /* frames parked off this context (frame.c):
                                their saves stay in the store, so a reset
                                frees only what no frame holds              */
};

/* A micro-batch's tape parked off its context (actc_ctx_park): its nodes
 * and what keys its saves (the step, micro-batch, key counter and the
 * occurrence counts), so that its backward, after other micro-batches'
 * forwards, sees the context as its own forward left it. */
struct actc_frame {
    actc_node **nodes;
    int n_nodes, cap_nodes;
    actc_key_count *occ;
    size_t occ_cap, occ_used;
    uint64_t step, key_counter;
    uint32_t substep;
};

/* The operator profile (profile.c); each a no-op when not profiling.
 * record: an operator's node was recorded (the end of its forward); reset:
 * a forward begins (the time before it is nobody's); enter/leave: around a
 * node's backward function. */
void actc__profile_record(actc_ctx *ctx, const char *op);
void actc__profile_reset(actc_ctx *ctx);
double actc__profile_enter(actc_ctx *ctx, double *saved_child);
void actc__profile_leave(actc_ctx *ctx, const char *op, double t0, double saved_child);

/* Store internals used by the tape. */
/* A backward pass (not a measuring one) begins: the context before it. */
void actc__store_backward_begins(actc_ctx *ctx);
void actc__store_release_node(actc_ctx *ctx, actc_node *node);
/* Hand the learning policy's measure->observe_grad the gradient
 * statistics of node's output (a no-op unless the policy asks for them and
 * the node holds ACT saves). */
void actc__store_observe_grad(actc_ctx *ctx, actc_node *node);
void actc__store_clear(actc_ctx *ctx);
/* Run the backward functions of tape nodes [lo, n_nodes) in reverse order,
 * releasing each node's saves and its output's gradient as it goes. */
actc_status actc__backward_nodes(actc_ctx *ctx, int lo);
/* Free tape nodes [lo, n_nodes) (their outputs' gradients and the saves
 * they still hold too) and shorten the tape to lo. */
void actc__tape_truncate(actc_ctx *ctx, int lo);
void actc__store_free(actc_ctx *ctx);
/* The k-th save of node as actc_load gives it (a new tensor, decoded or
 * sharing a save kept by reference), leaving it in the store. */
actc_tensor *actc__store_peek(actc_ctx *ctx, actc_node *node, int k);
/* Add the parameters among in[0..n) to ctx->collect (once each). */
actc_status actc__collect_params(actc_ctx *ctx, int n, actc_tensor *const *in);
/* The node holds these parameters' gradients open until it is done (a
 * segment's, for what its recompute will use); it takes the array. */
void actc__node_hold_params(actc_node *node, actc_tensor **params, int n);
/* The step that keys random streams: the step itself, or a mix of it with
 * the micro-batch index and the context's stream (the rank). */
uint64_t actc__stream_step(const actc_ctx *ctx);
#endif
