/*
 * actc.h - the one public header of actc, a C11 library for training neural
 * networks with compressed activations.
 *
 * Every tensor an operator keeps for its backward pass goes through the
 * saved-context store (actc_save / actc_load).  The active policy picks a codec
 * for each saved tensor; operators never know which one.  All tensor memory goes
 * through one accounting allocator with categories, peaks and an optional budget.
 *
 * Conventions
 *  - Every function that can fail returns an actc_status (or NULL) and leaves a
 *    message readable with actc_last_error().  The library never prints or exits.
 *  - Tensors are float32, contiguous, row-major, at most ACTC_MAX_DIMS dims.
 *    Image tensors are NCHW.
 *  - Ownership: a function returning a new actc_tensor* gives the caller one
 *    reference; drop it with actc_tensor_release().
 *  - Performance: a training step frees and re-allocates the same large
 *    tensors; applications should raise glibc's M_MMAP_THRESHOLD and
 *    M_TRIM_THRESHOLD (mallopt) so freed memory is reused rather than
 *    page-faulted in again every step (the actc command does; ~30% faster).
 *  - The allocator and the error message are process-wide (the message is per
 *    thread).  One actc_ctx is used from one thread at a time; kernels use OpenMP
 *    internally.
 */
#ifndef ACTC_H
#define ACTC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACTC_VERSION "0.1.0"

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum {
    ACTC_OK = 0,
    ACTC_ERR_INVALID = 1,  /* bad argument, shape mismatch, unknown name      */
    ACTC_ERR_OOM = 2,      /* allocation failed or the memory budget is hit   */
    ACTC_ERR_IO = 3,       /* a file could not be opened, read or written     */
    ACTC_ERR_FORMAT = 4,   /* a file is truncated, corrupt or of wrong kind   */
    ACTC_ERR_NUMERIC = 5,  /* NaN or Inf where a finite number is required    */
    ACTC_ERR_STATE = 6     /* call made in the wrong state (e.g. no tape)     */
} actc_status;

/* The message of the last failure on this thread ("" if none). */
const char *actc_last_error(void);
/* A short constant name for a status ("ACTC_ERR_OOM"...). */
const char *actc_status_name(actc_status s);
/* Record a failure: sets the thread's message (printf format) and returns s.
 * Public so that user-defined operators report errors the same way. */
actc_status actc_set_error(actc_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Status of the last failure on this thread (ACTC_OK after actc_clear_error). */
actc_status actc_last_status(void);
/* Forget the last failure. */
void actc_clear_error(void);

/* ------------------------------------------------------------------------ */
/* Accounting allocator                                                      */
/* ------------------------------------------------------------------------ */

typedef enum {
    ACTC_MEM_PARAM = 0,  /* model parameters and buffers (running stats)      */
    ACTC_MEM_GRAD,       /* parameter gradients                                */
    ACTC_MEM_OPTIM,      /* optimizer state                                    */
    ACTC_MEM_CONTEXT,    /* what the saved-context store holds for backward    */
    ACTC_MEM_ACT,        /* live forward outputs and backward gradients        */
    ACTC_MEM_SCRATCH,    /* workspaces (im2col, decoded contexts, data batch)  */
    ACTC_MEM_NCAT
} actc_mem_cat;

typedef struct {
    size_t current[ACTC_MEM_NCAT]; /* bytes live now, per category            */
    size_t peak[ACTC_MEM_NCAT];    /* highest value of current[c] since reset */
    size_t current_total;          /* sum of current[]                        */
    size_t peak_total;             /* highest value of current_total          */
    size_t budget;                 /* 0 = unlimited                           */
    size_t n_allocs;               /* allocations since the start             */
} actc_mem_stats;

/* Allocate `bytes` (64-byte aligned) tagged with `cat`.  Returns NULL and sets
 * ACTC_ERR_OOM, with a message naming the category and the request, when the
 * budget would be exceeded or the system is out of memory.  bytes==0 is valid. */
void *actc_mem_alloc(actc_mem_cat cat, size_t bytes);
/* As actc_mem_alloc, zero-filled. */
void *actc_mem_calloc(actc_mem_cat cat, size_t bytes);
/* Free a block from actc_mem_alloc (NULL is ignored). */
void actc_mem_free(void *p);
/* Size in bytes of a block from actc_mem_alloc. */
size_t actc_mem_size(const void *p);
/* Move the block at p (and its bytes in the statistics) to category cat:
 * for a buffer that changes role without a copy (a decoded save that becomes
 * a gradient). */
void actc_mem_retag(void *p, actc_mem_cat cat);
/* Limit the total of live bytes (all categories); 0 removes the limit. */
void actc_mem_set_budget(size_t bytes);
/* Copy the counters into *out. */
void actc_mem_get_stats(actc_mem_stats *out);
/* Set every peak to the current value (start of a measured interval). */
void actc_mem_reset_peak(void);
/* "PARAM", "GRAD", ... */
const char *actc_mem_cat_name(actc_mem_cat c);
/* Parse "512MiB", "2GiB", "1.5G", "4096" (bytes).  K/M/G/T are powers of
 * 1024 with or without "iB"; "KB"/"MB"/"GB" are powers of 1000. */
actc_status actc_parse_bytes(const char *s, size_t *out);
/* Format bytes as "12.3 MiB" into buf. Returns buf. */
char *actc_format_bytes(size_t bytes, char *buf, size_t cap);
/* Peak resident set size of this process in bytes (0 if unknown). */
size_t actc_process_peak_rss(void);

/* ------------------------------------------------------------------------ */
/* Counter-based random numbers                                              */
/* ------------------------------------------------------------------------ */

/* Philox-4x32-10: the i-th output of stream (key) is a pure function of
 * (key, i), so results do not depend on thread count or call order. */
void actc_philox(uint64_t key, uint64_t counter, uint32_t out[4]);
/* Uniform float in [0,1) for element i of stream key. */
float actc_rand_uniform(uint64_t key, uint64_t i);
/* Standard normal for element i of stream key (Box-Muller). */
float actc_rand_normal(uint64_t key, uint64_t i);
/* Mix several words into one stream key (splitmix64 based). */
uint64_t actc_rng_key(uint64_t a, uint64_t b, uint64_t c);

/* ------------------------------------------------------------------------ */
/* Threads                                                                   */
/* ------------------------------------------------------------------------ */

/* Set the number of OpenMP (and BLAS) threads; n<=0 keeps the default. */
void actc_set_threads(int n);
/* The number of threads kernels will use. */
int actc_get_threads(void);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

#define ACTC_MAX_DIMS 5

typedef struct actc_tensor {
    int ndim;
    int shape[ACTC_MAX_DIMS];
    size_t numel;
    float *data;               /* numel floats; NULL after the data is freed  */
    struct actc_tensor *grad;  /* dL/d(this), same shape; NULL until set      */
    actc_mem_cat cat;          /* category of data                            */
    int requires_grad;         /* gradients flow to (or through) this tensor  */
    int is_param;              /* a trainable parameter (grad kept as GRAD)   */
    uint64_t id;               /* unique for the process, never reused        */
    char name[48];             /* optional, for messages and checkpoints      */
    /* private: reference counts (see actc_tensor_release) */
    int refs_;                 /* owners of the data                           */
    int tape_refs_;            /* tape nodes that route gradients through it  */
} actc_tensor;

/* New tensor with uninitialised data in category cat. NULL on failure. */
actc_tensor *actc_tensor_new(actc_mem_cat cat, int ndim, const int *shape);
/* New zero-filled tensor. */
actc_tensor *actc_tensor_zeros(actc_mem_cat cat, int ndim, const int *shape);
/* New tensor holding a copy of src's data and shape (category cat). */
actc_tensor *actc_tensor_copy(actc_mem_cat cat, const actc_tensor *src);
/* A trainable parameter (category PARAM, requires_grad, is_param) named name. */
actc_tensor *actc_param_new(int ndim, const int *shape, const char *name);
/* Add one owner. Returns t. */
actc_tensor *actc_tensor_retain(actc_tensor *t);
/* Drop one owner.  When the last owner goes, the data is freed at once (this is
 * how forward intermediates die as soon as their consumers have run); the
 * struct itself lives on while the tape still routes gradients through it. */
void actc_tensor_release(actc_tensor *t);
/* 1 if the two tensors have the same ndim and shape. */
int actc_same_shape(const actc_tensor *a, const actc_tensor *b);
/* Write "[2, 3, 4]" into buf. Returns buf. */
char *actc_shape_str(const actc_tensor *t, char *buf, size_t cap);
/* Free t->grad (parameters: call before each step or use actc_zero_grads). */
void actc_tensor_drop_grad(actc_tensor *t);

/* ------------------------------------------------------------------------ */
/* Engine context: tape, saved-context store, policy                         */
/* ------------------------------------------------------------------------ */

typedef struct actc_ctx actc_ctx;
typedef struct actc_node actc_node;

/* Kinds of saved tensors: how the store may treat them. */
typedef enum {
    ACTC_SAVE_ACT = 0, /* real-valued activation: compressible, policy decides */
    ACTC_SAVE_MASK,    /* boolean map, bit = (value > 0): 1 bit/elem, lossless */
    ACTC_SAVE_INDEX,   /* small non-negative integers stored as floats:
                          smallest of uint8/16/32 that holds the max, lossless */
    ACTC_SAVE_EXACT,   /* must stay fp32 (statistics, parameters)             */
    ACTC_SAVE_NKINDS
} actc_save_kind;

/* New context: training mode, policy "none", seed 0. NULL on failure. */
actc_ctx *actc_ctx_new(void);
/* Free the context, its tape and its store. */
void actc_ctx_free(actc_ctx *ctx);
/* Select the compression policy from a spec string ("none", "bf16", ...;
 * actc_policy_list() names them).  Unknown specs fail with ACTC_ERR_INVALID. */
actc_status actc_ctx_set_policy(actc_ctx *ctx, const char *spec);
/* The canonical spec of the active policy. */
const char *actc_ctx_policy(const actc_ctx *ctx);
/* Multi-line help text listing every policy spec and its parameters. */
const char *actc_policy_list(void);
/* Stop (1) or resume (0) an adaptive policy's learning (ActNN L3's gradient
 * statistics and per-layer bits): frozen, it keeps compressing with the state
 * it has.  For measurements that must see one fixed policy (actc variance). */
void actc_ctx_freeze_policy(actc_ctx *ctx, int frozen);
/* Training mode records the tape and saves contexts; eval mode does neither
 * (batchnorm uses running statistics, dropout is the identity). */
void actc_ctx_set_training(actc_ctx *ctx, int training);
int actc_ctx_training(const actc_ctx *ctx);
/* Seed of every random stream of the context (dropout, stochastic rounding). */
void actc_ctx_set_seed(actc_ctx *ctx, uint64_t seed);
uint64_t actc_ctx_seed(const actc_ctx *ctx);
/* Step counter: random streams depend on (seed, step), so re-running a step
 * with the same step number reproduces it exactly.  actc_backward advances it. */
void actc_ctx_set_step(actc_ctx *ctx, uint64_t step);
uint64_t actc_ctx_step(const actc_ctx *ctx);
/* A fresh stream key for an operator's randomness in the current step
 * (deterministic in seed, step and call order within the step). */
uint64_t actc_ctx_next_key(actc_ctx *ctx);
/* 1 while the engine runs a forward pass a second time: a recomputed segment
 * (actc_segment) during backward, or a sensitivity pass of the GACT
 * controller.  Operators with side effects beyond their output (batch norm's
 * running statistics) must not apply them again then; a user-defined
 * operator with such state should check this too. */
int actc_ctx_replaying(const actc_ctx *ctx);
/* 1 when operators record tape nodes and saves: training mode, outside the
 * first forward of a segment (actc_segment).  An operator that prepares
 * something only for its backward (a score matrix to save) can skip it
 * otherwise; actc_node_new returns NULL then anyway. */
int actc_ctx_recording(const actc_ctx *ctx);
/* 1 if the active policy asks models to checkpoint their blocks with
 * actc_segment (gact:CB1, gact:CB2, gact:CKPT). */
int actc_ctx_wants_segments(const actc_ctx *ctx);
/* The attention form the active policy asks for (ACTC_ATTN_FLASH or
 * ACTC_ATTN_NAIVE, see the models section), or model_default when it asks
 * for none.  The gact levels ask for the textbook form (GACT's L1 and CB1
 * save the softmax's probabilities), gact:CB2 for the memory-efficient one;
 * every other policy asks for none. */
int actc_ctx_attention(const actc_ctx *ctx, int model_default);

/* Segment checkpointing (gradient checkpointing, Chen et al. 2016).
 * fn computes a segment (a residual or transformer block) from x: it must not
 * release x and returns a new reference to its output (NULL with an error set
 * on failure).  actc_segment runs fn without recording a tape, and saves only
 * x, through the store (so the policy compresses it, as an ACT save of
 * operator "segment").  During backward, the segment's node decodes x, runs
 * fn again with recording on (actc_ctx_replaying() is 1; dropout draws the
 * same masks: the operators' random keys are rewound to the segment's start)
 * and back-propagates through the recomputed operators at once, so their
 * saves live only while that segment is being differentiated.  The recompute
 * starts from the decoded x, so a lossy policy makes it inexact (GACT 5.5).
 * In eval mode, or when x needs no gradient, or inside another segment's
 * first forward, it just returns fn(x).
 * What fn reads besides x (parameters, user state) must stay alive and
 * unchanged until the backward pass: the node keeps no reference to it.
 * Only fn's returned tensor carries gradients out of the segment.  The
 * recomputed saves are named when backward reaches them, so their stable
 * keys count occurrences in backward order (scopes keep them apart). */
typedef actc_tensor *(*actc_segment_fn)(actc_ctx *ctx, actc_tensor *x, void *user);
actc_tensor *actc_segment(actc_ctx *ctx, actc_segment_fn fn, void *user, actc_tensor *x);

/* Name scopes ("layer1.0.conv1"): nodes record the scope they were made in,
 * giving saved tensors stable names across steps (used by policies that keep
 * per-tensor state and by inspection). */
actc_status actc_scope_push(actc_ctx *ctx, const char *name);
void actc_scope_pop(actc_ctx *ctx);

/* Run the tape backwards from a scalar loss (dloss = 1): gradients accumulate
 * into the .grad of every parameter; intermediate gradients and saved contexts
 * are freed as soon as consumed.  Clears the tape and the store, advances the
 * step.  On failure the tape is cleared as well. */
actc_status actc_backward(actc_ctx *ctx, actc_tensor *loss);
/* Drop the tape and the store without a backward pass (after an error). */
void actc_ctx_reset(actc_ctx *ctx);
/* Number of nodes currently on the tape. */
int actc_tape_size(const actc_ctx *ctx);

/* Statistics of the saved-context store.  "Activation memory" is stored_peak:
 * the store's bytes at the end of the forward pass (with segment
 * checkpointing the recomputes may push it higher during backward:
 * forward_bytes and backward_peak tell the two apart, GACT's AM1 and AM2). */
typedef struct {
    size_t stored_bytes;          /* bytes the store holds now (all payloads)  */
    size_t fp32_bytes;            /* what a plain fp32 framework would hold    */
    size_t stored_peak;           /* peak of stored_bytes since the reset      */
    size_t fp32_peak;             /* fp32_bytes at the moment of stored_peak   */
    size_t stored_by_kind[ACTC_SAVE_NKINDS]; /* at stored_peak                 */
    size_t fp32_by_kind[ACTC_SAVE_NKINDS];   /* at stored_peak                 */
    size_t n_saves;               /* actc_save calls since the reset           */
    size_t n_dedup;               /* of which answered by an existing entry    */
    size_t forward_bytes;         /* stored_bytes when the last backward began */
    size_t backward_peak;         /* peak of stored_bytes during that backward */
} actc_store_stats;
void actc_store_get_stats(const actc_ctx *ctx, actc_store_stats *out);
void actc_store_reset_peak(actc_ctx *ctx);

/* ---- Writing an operator --------------------------------------------------
 * forward:  y = new output; node = actc_node_new(ctx, "myop", backward, y, n, in);
 *           if (node) { actc_save(ctx, node, x, ACTC_SAVE_ACT); ... }
 * backward: actc_tensor *x = actc_load(ctx, node, 0); ... actc_tensor_release(x);
 *           float *gx = actc_grad_of(ctx, node->inputs[0]);  (NULL: no grad)
 *           accumulate into gx from node->output->grad->data.
 * A backward function returns ACTC_OK or an error status. */
typedef actc_status (*actc_backward_fn)(actc_ctx *ctx, actc_node *node);

#define ACTC_NODE_MAX_INPUTS 8
#define ACTC_NODE_MAX_SAVES 8

struct actc_node {
    const char *op;                           /* operator name (static string) */
    actc_backward_fn backward;
    actc_tensor *inputs[ACTC_NODE_MAX_INPUTS];
    int n_inputs;
    actc_tensor *output;
    int iattr[8];                             /* operator attributes            */
    float fattr[8];
    void *user;                               /* operator state, freed with     */
    void (*user_free)(void *);                /* user_free when the node dies   */
    /* private */
    int slots_[ACTC_NODE_MAX_SAVES];
    int n_slots_;
    int index_;                               /* position on the tape          */
    char scope_[128];
};

/* Record a node for output y computed from inputs in[0..n-1].  Returns NULL
 * (without error) when nothing needs recording: eval mode, a segment's first
 * forward (actc_ctx_recording() is 0), or no input requires a gradient.  Then y->requires_grad stays 0 and the op saves
 * nothing.  On failure returns NULL and sets an error (check
 * actc_last_status() != ACTC_OK after clearing it, or use actc_node_new2). */
actc_node *actc_node_new(actc_ctx *ctx, const char *op, actc_backward_fn bw,
                         actc_tensor *y, int n, actc_tensor *const *in);
/* As actc_node_new but reports failure through the status: *out is NULL with
 * ACTC_OK when no node is needed. */
actc_status actc_node_new2(actc_ctx *ctx, const char *op, actc_backward_fn bw,
                           actc_tensor *y, int n, actc_tensor *const *in,
                           actc_node **out);
/* Keep t for node's backward, as `kind`.  Saves are loaded back by their
 * order: the k-th actc_save on a node is actc_load(ctx, node, k).  The same
 * tensor saved twice with the same kind is stored once. */
actc_status actc_save(actc_ctx *ctx, actc_node *node, const actc_tensor *t,
                      actc_save_kind kind);
/* Decode the k-th saved tensor of node into a new SCRATCH tensor of the
 * original shape (MASK: 0/1 floats, INDEX: integer floats).  The caller
 * releases it.  The store frees an entry once every save of it was loaded. */
actc_tensor *actc_load(actc_ctx *ctx, actc_node *node, int k);
/* 1 if the k-th save of node, not loaded yet, is stored exactly (fp32 or an
 * integer index), 0 if the policy stored it lossy (or k is not pending).  An
 * operator that saved quantities derived from its inputs (a softmax
 * normaliser, say) can tell whether they still match what it will load. */
int actc_saved_lossless(const actc_ctx *ctx, const actc_node *node, int k);
/* Decode rows [row0, row0 + nrows) of the first axis of the k-th save of
 * node into dst (nrows * numel / shape[0] floats) and leave the save in the
 * store: for an operator that walks a saved tensor a chunk of samples at a
 * time, so its decoded copy never exists whole.  The store drops the save
 * when the node's backward returns (or at actc_load). */
actc_status actc_load_rows(actc_ctx *ctx, actc_node *node, int k, int row0, int nrows, float *dst);
/* The gradient buffer of t, zero-filled on first use (ACT category, GRAD for
 * parameters), to accumulate into.  NULL if t needs no gradient (or on OOM:
 * then actc_last_status() is ACTC_ERR_OOM). */
float *actc_grad_of(actc_ctx *ctx, actc_tensor *t);
/* Hand over a gradient contribution the operator computed in a buffer it
 * owns (a decoded save it no longer needs, or its output's gradient taken
 * with actc_grad_take), instead of accumulating into actc_grad_of: if t has
 * no gradient yet, g (same shape) becomes it without a copy or a zero fill;
 * otherwise g is added into it.  Takes the caller's reference to g in every
 * case (released at once if t needs no gradient).  Saves a tensor-sized
 * buffer at the moments that set the backward peak. */
actc_status actc_grad_adopt(actc_ctx *ctx, actc_tensor *t, actc_tensor *g);
/* Detach and return node's output gradient (the caller owns it), for an
 * operator whose input gradient is its output gradient, changed in place or
 * not (addition, ReLU); NULL if there is none. */
actc_tensor *actc_grad_take(actc_node *node);

/* ------------------------------------------------------------------------ */
/* Operators (forward; backward is recorded on the tape)                     */
/* All return a new tensor (caller releases) or NULL with an error set.      */
/* ------------------------------------------------------------------------ */

/* y[N,out] = x[N,in] W[out,in]^T + b[out] (b may be NULL). x may have more
 * than 2 dims: the last dim is `in`, the others are flattened into N. */
actc_tensor *actc_linear(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b);
/* 2-D convolution, x[N,C,H,W], w[K,C,kh,kw], b[K] or NULL.  Runs on oneDNN
 * when built with it (ACTC_CONV=im2col in the environment forces the
 * im2col + OpenBLAS sgemm path, which is also the fallback); every buffer
 * either backend needs is SCRATCH-accounted and bounded per chunk. */
actc_tensor *actc_conv2d(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b,
                         int stride, int pad);
/* Batch normalisation over N,H,W per channel.  Training: batch statistics,
 * running_mean/var updated with `momentum` (PyTorch convention, unbiased var).
 * Eval: running statistics.  gamma/beta are parameters [C]. */
actc_tensor *actc_batchnorm2d(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma,
                              actc_tensor *beta, actc_tensor *running_mean,
                              actc_tensor *running_var, float momentum, float eps);
/* max(x, 0). */
actc_tensor *actc_relu(actc_ctx *ctx, actc_tensor *x);
/* As actc_conv2d, actc_batchnorm2d and actc_relu, but taking over the
 * caller's reference to x (released in every case, errors included): when it
 * was x's only reference, the result is computed in x's own buffer (x keeps
 * no data afterwards), so a model that no longer needs x holds one
 * activation fewer.  What backward needs was saved before x was
 * overwritten.  conv2d does so when the output is as large as the input
 * (stride 1, as many output as input channels) on the oneDNN backend, a
 * chunk of samples at a time; otherwise it allocates as actc_conv2d does. */
actc_tensor *actc_conv2d_take(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b,
                              int stride, int pad);
actc_tensor *actc_batchnorm2d_take(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma,
                                   actc_tensor *beta, actc_tensor *running_mean,
                                   actc_tensor *running_var, float momentum, float eps);
actc_tensor *actc_relu_take(actc_ctx *ctx, actc_tensor *x);
/* Max pooling, window k, stride s, zero... padding p (padded cells never win). */
actc_tensor *actc_maxpool2d(actc_ctx *ctx, actc_tensor *x, int k, int s, int p);
/* Average pooling (padding counted in the divisor, as PyTorch's default). */
actc_tensor *actc_avgpool2d(actc_ctx *ctx, actc_tensor *x, int k, int s, int p);
/* [N,C,H,W] -> [N,C]. */
actc_tensor *actc_global_avgpool(actc_ctx *ctx, actc_tensor *x);
/* Inverted dropout with drop probability p (identity in eval mode). */
actc_tensor *actc_dropout(actc_ctx *ctx, actc_tensor *x, float p);
/* a + b, same shapes (residual connection). */
actc_tensor *actc_add(actc_ctx *ctx, actc_tensor *a, actc_tensor *b);
/* As actc_add, taking over the caller's reference to a (like actc_relu_take). */
actc_tensor *actc_add_take(actc_ctx *ctx, actc_tensor *a, actc_tensor *b);
/* Same data, new shape (same numel); one dim may be -1. */
actc_tensor *actc_reshape(actc_ctx *ctx, actc_tensor *x, int ndim, const int *shape);
/* As actc_reshape, taking over the caller's reference to x (like
 * actc_relu_take): with x's only reference the result keeps x's buffer, no
 * copy. */
actc_tensor *actc_reshape_take(actc_ctx *ctx, actc_tensor *x, int ndim, const int *shape);
/* [N, ...] -> [N, rest]. */
actc_tensor *actc_flatten(actc_ctx *ctx, actc_tensor *x);
/* Mean softmax cross-entropy of logits[N,K] against integer labels[N] (values
 * in [0,K), or ignore_index to skip a row; pass -1 for none).  Returns a
 * scalar tensor.  If n_correct is not NULL it receives the count of rows whose
 * argmax equals the label.  Saves the probabilities softmax(logits) for
 * backward (an ACT save: policies may round them; the gradient is linear in
 * them, so stochastic rounding keeps it unbiased). */
actc_tensor *actc_cross_entropy(actc_ctx *ctx, actc_tensor *logits, const int32_t *labels,
                                int ignore_index, int *n_correct);

/* ---- Transformer building blocks (normalise / activate over the last dim) */

/* Token embedding: out[b,t,:] = weight[ids[b*T+t], :] for ids in [0, V).
 * weight is [V, D]; the result is [B, T, D].  The ids are kept as INDEX. */
actc_tensor *actc_embedding(actc_ctx *ctx, const int32_t *ids, int B, int T, actc_tensor *weight);
/* LayerNorm over the last dim D: (x - mean) * rstd * gamma + beta; gamma and
 * beta are [D] (either may be NULL).  Saves x as ACT and mean/rstd as EXACT. */
actc_tensor *actc_layernorm(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma, actc_tensor *beta,
                            float eps);
/* RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * gamma (gamma [D] or NULL). */
actc_tensor *actc_rmsnorm(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma, float eps);
/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
actc_tensor *actc_gelu(actc_ctx *ctx, actc_tensor *x);
/* SiLU: x * sigmoid(x). */
actc_tensor *actc_silu(actc_ctx *ctx, actc_tensor *x);
/* As actc_gelu / actc_silu, taking over the caller's reference to x (like
 * actc_relu_take): with x's only reference the derivative they save is
 * written over x's buffer, so forward holds no extra full-size tensor. */
actc_tensor *actc_gelu_take(actc_ctx *ctx, actc_tensor *x);
actc_tensor *actc_silu_take(actc_ctx *ctx, actc_tensor *x);
/* Element-wise product a * b of equal shapes (SwiGLU is mul(silu(a), b)). */
actc_tensor *actc_mul(actc_ctx *ctx, actc_tensor *a, actc_tensor *b);

/* ---- Attention: causal self-attention and its parts ----------------------
 * Layout: q, k, v and the attention output are [B, T, H*Dh], head h being
 * columns [h*Dh, (h+1)*Dh) of every row: the outputs of the Q/K/V linear
 * projections as they are, and the input of the output projection.
 * [B, T, H, Dh] (RoPE's layout) is the same memory and is accepted too. */

/* Batched matrix product out[..., M, N] = op(a) op(b): op(a) is a [..., M, K],
 * or with trans_a the transpose of a stored [..., K, M]; likewise b [..., K, N]
 * or [..., N, K] with trans_b.  b has a's leading dims, or is 2-D and shared
 * by every item.  One OpenBLAS sgemm per item, many small items spread over
 * threads.  Saves a (ACT) only if b needs a gradient and b only if a does;
 * a parameter is read in place instead. */
actc_tensor *actc_matmul(actc_ctx *ctx, actc_tensor *a, actc_tensor *b, int trans_a, int trans_b);
/* Causal softmax over the last dim of x [..., T, T]: row i is
 * softmax(scale * x[i, j]) over the columns j <= i and exactly 0 for j > i.
 * Saves the output (the probabilities) as ACT. */
actc_tensor *actc_softmax_causal(actc_ctx *ctx, actc_tensor *x, float scale);
/* Rotary position embedding on x [B, T, H, Dh] (or [B, T, Dh], one head): at
 * position t (dim 1, from 0) every head's pairs (x[2i], x[2i+1]) are rotated
 * by the angle t * base^(-2i/Dh).  base 0 selects 10000 (LLaMA); Dh must be
 * even.  Saves nothing (backward rotates the gradient back). */
actc_tensor *actc_rope(actc_ctx *ctx, actc_tensor *x, float base);
/* Causal multi-head self-attention, textbook form: per head
 * O = softmax(Q K^T / sqrt(Dh), causal) V with Dh = width / n_heads; returns
 * [B, T, H*Dh].  One node keeping Q, K, V and the probabilities P [B, H, T, T]
 * (ACT): 4 (3 B T H Dh + B H T^2) bytes in fp32. */
actc_tensor *actc_attention_naive(actc_ctx *ctx, actc_tensor *q, actc_tensor *k, actc_tensor *v, int n_heads);
/* The same attention, memory-efficient form (FlashAttention-2 style): keys in
 * blocks with an online softmax, fully masked blocks skipped, so no T x T
 * scores exist (scratch: a few 64 x 64 blocks per thread); backward
 * recomputes P block by block.  Keeps Q, K, V, the output (ACT; the output
 * projection keeps that tensor anyway, and the store holds it once) and the
 * per-row log-sum-exp [B, H, T] (EXACT): 4 (4 B T H Dh + B H T) bytes in fp32,
 * less than the naive form for T > Dh + 1 and 4x less for T >= 13 Dh + 4.
 * When a policy stores Q or K lossy, backward first recomputes the
 * log-sum-exp from the decoded Q and K (one more Q K^T pass), so the
 * probabilities it rebuilds are an exact softmax of what it decoded.
 * Same results as actc_attention_naive to float rounding. */
actc_tensor *actc_attention_flash(actc_ctx *ctx, actc_tensor *q, actc_tensor *k, actc_tensor *v, int n_heads);

/* ------------------------------------------------------------------------ */
/* GACT controller: run-time sensitivity and per-tensor bits                 */
/* ------------------------------------------------------------------------ */

/* The C counterpart of GACT's controller.iterate(fwdbwdprop).  With a gact:
 * policy on the context, every adapt_interval iterations (and at the first)
 * the controller measures each saved tensor's sensitivity c_l (GACT
 * Algorithm 1): it runs fn L + 1 extra times on the same batch and step, all
 * tensors quantized at 4 bits with fixed rounding streams, re-keying one
 * tensor's stream per pass; c_l = ||g_0 - g_l||^2 / 2 / S(4), S(b) =
 * (2^b - 1)^-2, over all parameter gradients.  Then, under an adaptive level
 * (gact:4, gact:3, gact:2, gact:CB1, gact:CB2), it gives each tensor 32, 8,
 * 4, 2 or 1 bits minimising sum c_l S(b_l) under the average budget
 * (gact:fixB keeps its bits; its sensitivities feed the alert and
 * inspection).  With any other policy, gact:CKPT included (nothing is
 * compressed), iterate just runs fn once.
 *
 * fn runs forward and backward on the current batch (the controller zeroes
 * the parameters' gradients before every call): with max_samples > 0 on at
 * most the first max_samples samples (the sensitivity passes use a sub-batch,
 * as GACT's code does; 0 means the whole batch), storing in *samples how many
 * it used.  The call the training step keeps is the last one. */
typedef actc_status (*actc_fwdbwd_fn)(actc_ctx *ctx, void *user, int max_samples, int *samples);

typedef struct {
    uint64_t adapt_interval;  /* iterations between sensitivity measurements (1000) */
    int estimate_samples;     /* samples per sensitivity pass (8; 0: whole batch)    */
    double alert_fraction;    /* alert when V(b) exceeds this share of the overall
                                 gradient variance (0.5)                            */
} actc_controller_opts;

/* What the controller knows about one saved tensor. */
typedef struct {
    char op[24];              /* operator that saved it                       */
    char scope[64];           /* its name scope                               */
    int ndim, shape[ACTC_MAX_DIMS];
    double sensitivity;       /* c_l at the last measurement; < 0: none yet   */
    int bits;                 /* width it is stored at (32: fp32)             */
    size_t stored_bytes;      /* payload of its last save                     */
    size_t fp32_bytes;        /* the same tensor in fp32                      */
} actc_saved_info;

typedef struct actc_controller actc_controller;

actc_controller_opts actc_controller_default_opts(void);
/* A controller for ctx, measuring gradients of params[0..n-1] (the array is
 * copied; the tensors stay the caller's).  o NULL: the defaults.  NULL with
 * an error on bad options or no memory.  Under a gact policy it keeps a
 * running mean of the gradient for the alert (4 bytes per parameter,
 * accounted as OPTIM) and, while measuring, a copy of the reference gradient
 * (SCRATCH).  Its measurements are not part of model checkpoints: a resumed
 * run measures again at its first iteration. */
actc_controller *actc_controller_new(actc_ctx *ctx, actc_tensor **params, int n, const actc_controller_opts *o);
void actc_controller_free(actc_controller *c);
/* One training iteration's forward and backward (measuring and re-allocating
 * first when due).  The optimizer step is the caller's, after this returns.
 * The context's step number is the same for every pass and advances once. */
actc_status actc_controller_iterate(actc_controller *c, actc_fwdbwd_fn fn, void *user);
/* 1 if the last iterate measured sensitivities and re-allocated bits. */
int actc_controller_adapted(const actc_controller *c);
/* The variance alert: a message with the numbers and the advice to raise
 * the budget when, after an adaptation, the estimated compression variance
 * V(b) = sum c_l S(b_l) exceeds alert_fraction of the overall gradient
 * variance (a running estimate over the iterations); else NULL.  Each
 * adaptation raises it at most once; this returns it once. */
const char *actc_controller_take_alert(actc_controller *c);
/* V(b) scaled to the whole batch, and the running overall gradient variance
 * (sum over parameters; < 0 while unknown). */
void actc_controller_variances(const actc_controller *c, double *compression, double *overall);
/* The tensors of the gact policy on the context (up to cap written; returns
 * how many there are, 0 for another policy), in first-save order. */
int actc_controller_tensors(const actc_controller *c, actc_saved_info *out, int cap);

/* ------------------------------------------------------------------------ */
/* Models                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct actc_model actc_model;

/* Attention form of the transformer models (actc_model_opts.attention). */
enum { ACTC_ATTN_FLASH = 0, ACTC_ATTN_NAIVE = 1 };

typedef struct {
    int in_channels;   /* default 1 */
    int in_h, in_w;    /* default 28 x 28 */
    int num_classes;   /* default 10 */
    int width;         /* MLP hidden width (256), transformer model width
                          (the preset's); 0 = the model's default */
    float dropout;     /* MLP dropout (default 0) */
    uint64_t seed;     /* parameter initialisation */
    /* Transformer language models (0 = the preset's value): */
    int n_layers;      /* blocks                                           */
    int n_heads;       /* attention heads (must divide width)              */
    int context;       /* maximum sequence length (positions)              */
    int vocab;         /* vocabulary size (256 for byte-level text)        */
    int attention;     /* ACTC_ATTN_FLASH (default) or ACTC_ATTN_NAIVE     */
} actc_model_opts;

/* Default options (1x28x28 input, 10 classes). */
actc_model_opts actc_model_default_opts(void);
/* Build a model by name: image classifiers "mlp", "resnet20", "resnet32",
 * "resnet56", "resnet18"; language models "gpt", "llama" (6 layers, width
 * 256, 8 heads, context 256, vocabulary 256 unless opts say otherwise), the
 * presets "gpt-mini" and "llama-mini" (the same shapes) and "gpt2-124m" (12
 * layers, width 768, 12 heads, context 1024, vocabulary 50257). */
actc_status actc_model_create(const char *name, const actc_model_opts *o, actc_model **out);
void actc_model_free(actc_model *m);
/* Names accepted by actc_model_create, one per line with a description. */
const char *actc_model_list(void);
const char *actc_model_name(const actc_model *m);
const actc_model_opts *actc_model_get_opts(const actc_model *m);
/* logits[N,num_classes] for a batch x[N,C,H,W].  Records the tape in training
 * mode.  The caller releases the result. */
actc_tensor *actc_model_forward(actc_model *m, actc_ctx *ctx, actc_tensor *x);
/* 1 for a language model (fed token ids), 0 for an image classifier. */
int actc_model_takes_tokens(const actc_model *m);
/* The same by name, before building: 1 if actc_model_create(name) makes a
 * language model. */
int actc_model_name_takes_tokens(const char *name);
/* Language models: logits [B*T, vocab] (row b*T + t predicts the token after
 * ids[b*T + t]) for B sequences of T token ids (ids[b*T + t] in [0, vocab),
 * 1 <= T <= context).  Records the tape in training mode. */
actc_tensor *actc_model_forward_tokens(actc_model *m, actc_ctx *ctx, const int32_t *ids, int B, int T);
/* Trainable parameters (order is stable). */
int actc_model_params(actc_model *m, actc_tensor ***out);
/* Everything a checkpoint must hold: parameters then buffers (running stats). */
int actc_model_state(actc_model *m, actc_tensor ***out);
/* Total number of trainable scalars. */
size_t actc_model_num_params(actc_model *m);
/* Free the .grad of every parameter. */
void actc_model_zero_grad(actc_model *m);

/* ------------------------------------------------------------------------ */
/* Optimizers and learning-rate schedules                                    */
/* ------------------------------------------------------------------------ */

typedef struct actc_optim actc_optim;

/* SGD with momentum (0 = plain), Nesterov, L2 weight decay (added to grad). */
actc_optim *actc_sgd_new(actc_tensor **params, int n, float momentum, int nesterov,
                         float weight_decay);
/* AdamW (decoupled weight decay). */
actc_optim *actc_adamw_new(actc_tensor **params, int n, float beta1, float beta2,
                           float eps, float weight_decay);
void actc_optim_free(actc_optim *o);
/* One update with learning rate lr using each parameter's .grad (a parameter
 * without grad is skipped).  Does not clear the gradients. */
actc_status actc_optim_step(actc_optim *o, float lr);
/* Scale the gradients of params[0..n) (those that have one) by
 * max_norm / (norm + 1e-6) when their global L2 norm exceeds max_norm > 0
 * (PyTorch's clip_grad_norm_).  *norm_out (may be NULL) receives the norm
 * before clipping.  A non-finite norm scales nothing and returns
 * ACTC_ERR_NUMERIC, so an Inf/NaN gradient never reaches the optimizer. */
actc_status actc_clip_grad_norm(actc_tensor **params, int n, float max_norm, float *norm_out);
/* "sgd" or "adamw". */
const char *actc_optim_name(const actc_optim *o);
/* State tensors for checkpoints (momentum buffers, Adam moments), in
 * parameter order then slot order; missing state is created as zeros first
 * (-1 if that allocation fails).  The array belongs to the optimizer. */
int actc_optim_state(actc_optim *o, actc_tensor ***out);
/* Allocate all state tensors now (zeros). */
actc_status actc_optim_init_state(actc_optim *o);
/* Number of steps taken (AdamW bias correction); settable for resume. */
uint64_t actc_optim_steps(const actc_optim *o);
void actc_optim_set_steps(actc_optim *o, uint64_t steps);

typedef enum { ACTC_LR_CONSTANT = 0, ACTC_LR_STEP, ACTC_LR_COSINE } actc_lr_kind;
typedef struct {
    actc_lr_kind kind;
    float base_lr;
    float min_lr;          /* cosine floor                                  */
    uint64_t warmup_steps; /* step s < W gets base_lr*(s+1)/W, then the
                              schedule runs on step - W                     */
    uint64_t total_steps;  /* cosine horizon (warm-up included); min_lr after */
    uint64_t step_size;    /* step decay every step_size steps              */
    float gamma;           /* step decay factor                             */
} actc_lr_schedule;
/* Learning rate at (0-based) step. */
float actc_lr_at(const actc_lr_schedule *s, uint64_t step);
/* Parse "const" (or "constant"), "cosine", or "step:STEP_SIZE:GAMMA" (decay by
 * GAMMA > 0 every STEP_SIZE > 0 steps).  Sets kind (and step_size, gamma);
 * the caller fills base_lr, min_lr, warmup_steps, total_steps.  *s is left
 * untouched on error. */
actc_status actc_lr_parse(const char *spec, actc_lr_schedule *s);

/* ------------------------------------------------------------------------ */
/* Data                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct {
    int n, c, h, w;        /* images[n][c][h][w] as uint8                    */
    uint8_t *pixels;       /* n*c*h*w bytes                                  */
    int32_t *labels;       /* n labels                                       */
    int num_classes;       /* 1 + max label                                  */
} actc_image_dataset;

/* Read an IDX image file (magic 0x00000803, dims n,h,w) and its IDX label file
 * (0x00000801, dim n), gzip-compressed or not.  Errors name the file: missing
 * (ACTC_ERR_IO), wrong magic or dims, truncated, trailing bytes, count
 * mismatch (ACTC_ERR_FORMAT).  Pixels and labels are malloc'd input data, not
 * accounted by the allocator. */
actc_status actc_idx_load(const char *images_path, const char *labels_path,
                          actc_image_dataset *out);
/* Fashion-MNIST from directory dir (default /usr/share/datasets/fashion-mnist
 * when dir is NULL): train=1 -> train-*, train=0 -> t10k-*; either .gz or not. */
actc_status actc_fashion_mnist_load(const char *dir, int train, actc_image_dataset *out);
void actc_image_dataset_free(actc_image_dataset *d);

typedef struct {
    float mean, std;       /* normalisation x = (p/255 - mean) / std          */
    int crop_pad;          /* random crop with this zero padding (0 = off)    */
    int hflip;             /* random horizontal flip                          */
    int shuffle;
    uint64_t seed;
} actc_loader_opts;

typedef struct actc_loader actc_loader;
/* Batches of `batch` images (the last partial batch is dropped if drop_last;
 * then batch > d->n is an error).  d must outlive the loader (not copied); o
 * may be NULL for defaults (mean 0, std 1, no augmentation, no shuffle). */
actc_loader *actc_loader_new(const actc_image_dataset *d, int batch, int drop_last,
                             const actc_loader_opts *o);
void actc_loader_free(actc_loader *l);
/* Number of batches per epoch. */
int actc_loader_num_batches(const actc_loader *l);
/* Fill x (a [B,C,H,W] SCRATCH tensor the loader allocates; caller releases)
 * and labels (B entries, owned by the loader until the next call) with batch
 * `index` of epoch `epoch`.  Order and augmentation are a pure function of
 * (seed, epoch, index), so a resumed run sees the same batches. */
actc_status actc_loader_get(actc_loader *l, int epoch, int index, actc_tensor **x,
                            const int32_t **labels, int *batch_size);

/* ---- Text corpora: byte-level tokens (vocabulary 256) ---- */

typedef struct {
    uint8_t *data;         /* the whole corpus, n bytes                       */
    size_t n;
    size_t train_end;      /* bytes [0, train_end) train, [train_end, n) are the
                              held-out validation text                        */
    char source[256];      /* what was loaded (path)                          */
} actc_text_corpus;

/* Load a text file, or every regular file below a directory (sorted by path,
 * concatenated).  The last val_fraction of the bytes (0 < f < 1), moved
 * forward to the next line start, is held out for validation.  Errors name
 * the path: missing (ACTC_ERR_IO), empty (ACTC_ERR_FORMAT). */
actc_status actc_text_load(const char *path, double val_fraction, actc_text_corpus *out);
void actc_text_free(actc_text_corpus *c);
/* B windows of T+1 consecutive bytes (inputs and next-byte targets) from the
 * train (split 0) or validation (split 1) part into ids[B*(T+1)], at offsets
 * that are a pure function of (seed, step).  ACTC_ERR_INVALID, naming the
 * sizes, when the part is shorter than T+1 bytes. */
actc_status actc_text_batch(const actc_text_corpus *c, int split, int B, int T, uint64_t seed,
                            uint64_t step, int32_t *ids);

/* ------------------------------------------------------------------------ */
/* Checkpoints                                                               */
/* ------------------------------------------------------------------------ */

typedef struct {
    char model[32];        /* model name                                    */
    char optim[16];        /* optimizer name ("" if none)                   */
    char policy[64];       /* compression policy spec                       */
    uint64_t epoch;        /* epochs completed                              */
    uint64_t step;         /* global steps completed                        */
    uint64_t batch_in_epoch; /* batches of `epoch` already done             */
    uint64_t seed;
    int32_t batch;
    float extra[8];        /* free for the caller                           */
    int32_t input[3];      /* input channels, height, width (0 = unknown)   */
    int32_t num_classes;   /* model output classes (0 = unknown)            */
    char settings[512];    /* free text for the caller: the actc command
                              keeps the run's training flags here so that
                              --resume continues with the same recipe       */
} actc_ckpt_meta;

/* Write model state (and optimizer state when o is not NULL) to path: written
 * to path.tmp, fsync'ed, then renamed.  Header: magic, version, total length;
 * then names and shapes with the data; a CRC-32 over everything.  The model
 * and optimizer names are taken from the objects, not from meta. */
actc_status actc_checkpoint_save(const char *path, actc_model *m, actc_optim *o,
                                 const actc_ckpt_meta *meta);
/* Read only the metadata (to create the right model first). */
actc_status actc_checkpoint_peek(const char *path, actc_ckpt_meta *meta);
/* Load into an existing model (and optimizer if not NULL).  Checks the magic,
 * version, length, checksum, model name and every tensor name and shape;
 * nothing (meta included) is modified unless all checks pass.  Missing file:
 * ACTC_ERR_IO; truncated or corrupted: ACTC_ERR_FORMAT; another model, shape
 * or optimizer (or an optimizer asked for that the file lacks): ACTC_ERR_INVALID,
 * naming both sides. */
actc_status actc_checkpoint_load(const char *path, actc_model *m, actc_optim *o,
                                 actc_ckpt_meta *meta);

#ifdef __cplusplus
}
#endif
#endif /* ACTC_H */
