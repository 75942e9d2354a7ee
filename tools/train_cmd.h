/* actc train, one job per file: cmd_train.c (the flags, the run's course
 * and its epoch loop), train_recipe.c (where the options come from: the
 * defaults, a model family's recipe, a checkpoint's), train_checks.c (every
 * flag checked before any data is read), train_setup.c (data, model,
 * sources, trainer, data parallelism) and train_report.c (what the run
 * prints and logs). */
#ifndef ACTC_TRAIN_CMD_H
#define ACTC_TRAIN_CMD_H
#include "cli.h"

#define ACTC_MAX_STAGES 256 /* --pipeline's limit (a stage per block at most) */

typedef struct {
    const char *model, *compress, *optim, *schedule, *log_path, *save_path, *resume_path, *init_path, *progress;
    const char *data_spec, *attention, *split, *gemm;
    int epochs, batch, threads, augment, nesterov, width, log_every, eval_batch, accum, deterministic, grad_bits;
    int grad_comm;
    int comm_timeout;         /* seconds; 0: none */
    int pipeline;             /* stages (1: none)                     */
    const char *pipe_schedule; /* 1f1b or gpipe                       */
    size_t bucket;
    int layers, heads, context, vocab, seq, epoch_steps;
    uint64_t eval_tokens;
    uint64_t seed, max_steps, warmup;
    float lr, momentum, wd, min_lr, dropout, beta1, beta2, clip, alert;
    size_t budget;
    actc_controller_opts ctl;
    data_opts data;
    /* strings taken from a checkpoint live here */
    char model_buf[32], compress_buf[ACTC_POLICY_MAX], optim_buf[16], schedule_buf[64];
    actc_run_recipe saved;
} train_opts;

/* Everything a run owns, freed in one place. */
typedef struct {
    actc_image_dataset train, test;
    int have_train, have_test;
    actc_text_corpus corpus; /* language models */
    int have_corpus;
    actc_graph *graph;       /* graph models                          */
    actc_source *graph_src, *test_src; /* its training batch, its test nodes */
    int graph_run;
    actc_model *model;
    actc_trainer *t;
    actc_source *src, *eval;
    int T;                   /* language models: tokens per window */
    cli_dist dist;           /* under mpirun                       */
    actc_pipe *pipe;         /* --pipeline: this rank's stage      */
    int first_block[ACTC_MAX_STAGES], n_blocks[ACTC_MAX_STAGES]; /* every stage's part */
    int rank_states;         /* --resume gave each rank its own policy state */
    FILE *log;
} run_state;

/* What the progress callback needs. */
typedef struct {
    const train_opts *o;
    run_state *r;
    progress pg;
} cb_state;

/* ---- cmd_train.c ---- */
/* The flag table over opts (a train_opts). */
void train_build_flags(flag_def *f, void *opts);

/* ---- train_recipe.c ---- */
/* The command's defaults: an image classifier's recipe until the model is
 * known. */
void train_defaults(train_opts *o);
/* The model family's recipe (actc_trainer_opts_for_model), then the
 * command line again, which overrides it. */
void train_model_recipe(train_opts *o, flag_def *flags, int argc, char **argv);
/* --init: the model of the checkpoint (its weights are loaded by
 * train_setup), nothing else of its run.  0, or prints why and returns 1. */
int train_init_model(train_opts *o, flag_def *flags, actc_ckpt_info *info);
/* --resume: defaults, then the checkpoint's recipe, then the command line
 * (parsed into flags again).  0, or the exit status. */
int train_resume_recipe(train_opts *o, flag_def *flags, int argc, char **argv, actc_ckpt_info *info);
/* The trainer's options from the flags (steps: batches per epoch) into
 * *out; ACTC_ERR_INVALID for a --schedule that does not parse. */
actc_status train_trainer_opts(const train_opts *o, int steps, actc_trainer_opts *out);
/* The run's own recipe, which the trainer's options do not hold: the flags'
 * values and the dense-product backend forced now (its strings must fit:
 * train_check_flags). */
void train_run_recipe(const train_opts *o, actc_run_recipe *r);

/* ---- train_checks.c ---- */
/* Every flag checked before any data is read.  0, or exit status 2. */
int train_check_flags(train_opts *o, const flag_def *flags, int lm);

/* ---- train_setup.c ---- */
/* Data, model, sources and trainer (and its place among the ranks, its
 * checkpoints' recipe and the log).  0, or prints why and returns 1. */
int train_setup(run_state *r, train_opts *o, int lm);
/* Everything r holds, as far as train_setup got. */
void train_free(run_state *r);

/* ---- train_report.c ---- */
/* The run's header (model, policy, machine, data, where it resumes) and
 * the log's start record. */
void train_print_start(const train_opts *o, run_state *r, int lm, const cli_dist *dist, const actc_ckpt_info *info);
/* After every step: the progress display, the log's step record, and
 * --max-steps (returns 1 to stop). */
int train_on_step(actc_trainer *t, const actc_progress *p, void *user);
/* The epoch's summary line, memory table and log record.  0, or prints
 * why and returns 1. */
int train_epoch_report(const train_opts *o, run_state *r, int lm, const actc_epoch_result *er);
#endif
