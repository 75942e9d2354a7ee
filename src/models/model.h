/* Internal model representation: a list of state tensors (parameters first,
 * then buffers such as batch-norm running statistics) and a forward function.
 * Builders add tensors with actc__model_param / actc__model_buffer. */
#ifndef ACTC_MODEL_H
#define ACTC_MODEL_H
#include "actc.h"

struct actc_model {
    char name[32];
    actc_model_opts opts;
    actc_tensor **params;   /* trainable                                    */
    int n_params;
    actc_tensor **state;    /* params then buffers (checkpoint order)       */
    int n_state, cap_state;
    int n_buffers;
    actc_tensor *(*forward)(actc_model *m, actc_ctx *ctx, actc_tensor *x);   /* image models */
    actc_tensor *(*forward_tokens)(actc_model *m, actc_ctx *ctx, const int32_t *ids, int B,
                                   int T);                               /* language models */
    actc_tensor *(*forward_graph)(actc_model *m, actc_ctx *ctx, const actc_batch *b); /* graph models */
    actc_tensor *(*forward_hidden)(actc_model *m, actc_ctx *ctx, actc_tensor *x); /* a transformer's part
                                                                             after its embedding */
    void *impl;
    void (*impl_free)(void *impl);
    uint64_t init_counter;  /* distinct init stream per parameter           */
    /* A user-defined model (actc_model_custom): its forward and data.       */
    int custom;
    actc_forward_fn user_forward;
    void *user;
    /* Bytes the state tensors may take in all (0: no limit): a model built
     * from a checkpoint's record is refused before it outgrows the file.    */
    size_t state_limit, state_bytes;
    char limit_what[256];
    /* A build that allocates no parameter (actc__model_count): a
     * transformer's parameters by unit go to unit_sizes (L + 2 entries,
     * malloc'd by the builder, in actc__model_count's order). */
    int count_only;
    size_t *unit_sizes;
};

/* Add a parameter initialised from N(0, std^2) (std > 0), U(-bound, bound)
 * (std < 0 means bound = -std) or the constant `fill` (std == 0). */
actc_tensor *actc__model_param(actc_model *m, const char *name, int ndim, const int *shape, float std,
                         float fill);
/* Add a non-trainable buffer filled with `fill`. */
actc_tensor *actc__model_buffer(actc_model *m, const char *name, int ndim, const int *shape, float fill);
/* Split state into params (first n_state - n_buffers entries): call after building. */
actc_status actc__model_finish(actc_model *m);

/* actc_model_create with a limit on the bytes of the model's state: past
 * it, ACTC_ERR_FORMAT naming `what` (the file the record came from). */
actc_status actc__model_create_limited(const char *name, const actc_model_opts *o, size_t limit, const char *what,
                                       actc_model **out);

actc_status actc__mlp_build(actc_model *m);
actc_status actc__resnet_build(actc_model *m, const char *variant);
/* gpt, llama, gpt-mini, llama-mini, gpt2-124m. */
actc_status actc__transformer_build(actc_model *m, const char *name);
/* A transformer's shape without its parameters: m->unit_sizes gets their
 * numel by unit, [0] the embedding, [1 + l] block l, [L + 1] the final
 * norm and head (with the tied head's copy of the embedding); nothing is
 * allocated but the model's bookkeeping (free it with actc_model_free). */
actc_status actc__model_count(const char *name, const actc_model_opts *o, actc_model **out);
/* gcn, gat, gcnii. */
actc_status actc__gnn_build(actc_model *m, const char *name);
#endif
