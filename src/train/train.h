/* Internals of the train layer shared by the trainer, its checkpoints and
 * maxbatch. */
#ifndef ACTC_TRAIN_H
#define ACTC_TRAIN_H
#include "actc.h"
#include "../data/data.h"

/* What one pass over the batch (the controller runs one or more) needs and
 * what it measured. */
typedef struct {
    struct actc_trainer *t;
    const actc_batch *b;       /* this process's rows of the batch            */
    int total;                 /* samples of the whole batch (every process's) */
    double loss_sum;           /* loss x rows (or x samples for a user loss) */
    long correct, rows;
    int samples;
    int kept;                  /* the pass the controller keeps (not a measuring one) */
    double forward_s, backward_s, pass_s;
    double codec_forward_s, codec_backward_s; /* the store's encode + decode inside them */
} actc__pass_state;

/* What `none` keeps for micro-batches of one shape (reference.c). */
typedef struct {
    int ndim, shape[ACTC_MAX_DIMS]; /* x's; for token ids {B, T}           */
    const void *graph;
    int labels;
    size_t bytes;                   /* 0: it could not be measured          */
    size_t by_kind[ACTC_SAVE_NKINDS];
} actc__reference;
#define ACTC__REFERENCES 8

struct actc_trainer {
    actc_model *m;             /* the caller's                                */
    actc_ctx *ctx;
    actc_optim *opt;
    actc_controller *ctrl;
    actc_trainer_opts o;       /* resolved; strings point at the arrays below */
    char policy[ACTC_POLICY_MAX], optim[16];
    actc_lr_schedule sched;
    actc_tensor **params;      /* the model's, in order                       */
    int np;
    uint64_t step, epoch, batch;
    char *note;
    actc_run_recipe recipe;    /* the run's own, saved with it when has_recipe */
    int has_recipe;
    /* hooks */
    actc_param_hook_fn on_grad;
    void *on_grad_user;
    actc_step_hook_fn on_after;
    void *on_after_user;
    actc_trainer_group group;  /* size 1 when alone                          */
    actc_trainer_pipe pipe;    /* stages 1 when not a pipeline stage         */
    int *shared;               /* pipe.shared's copy                          */
    actc_pipe_stats pst;       /* the epoch's, pipe_pass.c                    */
    int pipe_broken;           /* a failed pass left messages in flight       */
    uint8_t *fired;            /* per parameter: complete event raised       */
    int events_on;             /* forward the engine's events (final pass,
                                  last micro-batch)                          */
    /* the memory figures of the last epoch (the report's) */
    actc_mem_stats ms;
    actc_store_stats ss;
    int have_snapshot;
    /* the gradients' bytes by form (actc_grad_form) at the step of the
     * epoch whose gradients held the most, and their dense fp32 size */
    size_t grad_bytes[ACTC_GRAD_NFORMS], grad_fp32;
    /* what `none` keeps, per batch shape (reference.c) */
    actc_ctx *counter;         /* a counting context without a policy         */
    actc__reference refs[ACTC__REFERENCES];
    int n_refs;
};

/* The model's forward on b and the loss (the cross-entropy against b's
 * labels, or the forward's own scalar when b has none), recorded on ctx;
 * *correct and *rows as actc_cross_entropy counts them.  NULL on error. */
actc_tensor *actc__trainer_loss(actc_trainer *t, actc_ctx *ctx, const actc_batch *b, int *correct, long *rows);
/* The controller's fwdbwd for a pipeline stage: the pipe's schedule over
 * the micro-batches of the pass (pipe_pass.c); user an actc__pass_state. */
actc_status actc__pipe_pass(actc_ctx *ctx, void *user, int max_samples, int *samples);
/* An evaluation forward of batch b on a pipeline stage (pipe_pass.c):
 * stage > 0 receives its input, stage < last sends its output; the last
 * stage's logits into *out (NULL on the others). */
actc_status actc__pipe_eval_forward(actc_trainer *t, actc_ctx *ctx, const actc_batch *b, actc_tensor **out);

/* Give ctx's store what `none` keeps for micro-batch b (measured once per
 * batch shape by a counting forward; see reference.c).  Never fails: a
 * shape that cannot be measured gets no reference. */
void actc__trainer_reference(actc_trainer *t, actc_ctx *ctx, const actc_batch *b);

/* The optimizer a trainer's options ask for, over the model's parameters. */
actc_optim *actc__trainer_make_optim(const actc_trainer_opts *o, actc_tensor **params, int n);

/* Data parallelism's per-rank policy state (checkpoint.c; src/dist uses
 * them).  learnt_state: this trainer's policy and controller state as one
 * malloc'd blob (actc__learnt_save's).  save_ranks: actc_trainer_save with a RANKS section
 * holding state[r] (state_len[r] bytes) for r = 1 .. ranks-1.  load_rank:
 * after actc_trainer_load of the same file, install rank's own state from
 * its RANKS section when it was written by size ranks (*applied = 1; rank
 * 0's is the file's LEARNT section); *applied = 0 and nothing
 * changed when the file has no such section or another rank count. */
actc_status actc__trainer_learnt_state(const actc_trainer *t, uint8_t **out, size_t *len);
actc_status actc__trainer_save_ranks(actc_trainer *t, const char *path, int ranks, const uint8_t *const *state,
                                     const size_t *state_len);
actc_status actc__trainer_load_rank(actc_trainer *t, const char *path, int rank, int size, int *applied);
/* Pipelines (src/dist/pipe.c): stage 0 writes the whole model m and its
 * optimizer o (filled from every stage) with t's record, position and
 * recipe, state[0] (stage 0's learnt state) as LEARNT and the other
 * stages' in a STAGES section.  load_state: load_rank's for the section of
 * stages (stages 1) or of ranks (0). */
actc_status actc__trainer_save_whole(actc_trainer *t, const char *path, actc_model *m, actc_optim *o, int stages,
                                     const uint8_t *const *state, const size_t *state_len);
actc_status actc__trainer_load_state(actc_trainer *t, const char *path, int stages, int rank, int size, int *applied);
#endif
