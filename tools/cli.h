/* Shared pieces of the `actc` command: flag tables, the training step, data
 * set-up, progress display and the memory report. */
#ifndef ACTC_CLI_H
#define ACTC_CLI_H
#include "actc.h"
#include <stdio.h>

/* ---- flags ---------------------------------------------------------------- */
typedef enum { F_INT, F_U64, F_FLOAT, F_STR, F_BOOL, F_BYTES } flag_type;
typedef struct {
    const char *name;  /* "--batch" */
    flag_type type;
    void *ptr;
    const char *meta;  /* "N" shown in help */
    const char *help;
    int set;           /* filled by the parser: given on the command line */
} flag_def;

/* Parse argv[first..] against flags (terminated by name == NULL).  Prints a
 * clear message naming the flag and returns non-zero on a bad or unknown flag;
 * returns 1 with *want_help set for --help. */
int flags_parse(flag_def *flags, int argc, char **argv, int first, int *want_help);
void flags_help(FILE *f, const char *usage, const char *about, const flag_def *flags);
int flag_was_set(const flag_def *flags, const char *name);

/* ---- shared options ---------------------------------------------------------- */
typedef struct {
    const char *data_dir;      /* directory with the four IDX files        */
    const char *train_images, *train_labels, *test_images, *test_labels;
    int limit_train, limit_test;
} data_opts;

/* Load train/test sets per opts (any of the explicit paths wins over dir).
 * test may be NULL. Returns 0 on success, prints the error otherwise. */
int data_load(const data_opts *o, actc_image_dataset *train, actc_image_dataset *test);
/* Fashion-MNIST normalisation constants. */
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f

/* ---- training -------------------------------------------------------------------- */
typedef struct {
    double loss;
    int correct;
    int n;
    float grad_norm;   /* before clipping; 0 when not clipped */
} step_result;

/* Mean cross-entropy of logits (taken over; NULL: the forward failed, its
 * error stands) against labels, and backward; fills r (r->n: the logits'
 * rows). */
actc_status loss_backward(actc_ctx *ctx, actc_tensor *logits, const int32_t *labels, step_result *r);
/* Clip the gradients' global norm to clip (0: off; r->grad_norm gets the norm
 * before), then the optimizer step (when opt is not NULL). */
actc_status apply_update(actc_model *m, actc_optim *opt, float lr, float clip, step_result *r);
/* One full training step: zero grads, forward, loss, backward, clipping
 * (clip > 0), optimizer step.  With a controller (may be NULL) the forward
 * and backward go through actc_controller_iterate, which may run them on a
 * sub-batch first to measure sensitivities. */
actc_status train_step(actc_model *m, actc_ctx *ctx, actc_controller *ctrl, actc_optim *opt, actc_tensor *x,
                       const int32_t *labels, float lr, float clip, step_result *r);
/* fn through the controller, or (ctrl NULL) after zeroing m's gradients. */
actc_status run_fwdbwd(actc_model *m, actc_ctx *ctx, actc_controller *ctrl, actc_fwdbwd_fn fn, void *user);
/* A controller over m's parameters with the options of the train flags;
 * prints the error and returns NULL on failure. */
actc_controller *controller_for(actc_ctx *ctx, actc_model *m, const actc_controller_opts *o);
/* Accuracy and mean loss over a data set in eval mode. */
actc_status evaluate(actc_model *m, actc_ctx *ctx, const actc_image_dataset *d, int batch,
                     double *acc, double *loss);

/* ---- checkpoints ---- */
/* Model options a checkpoint records: its settings' --width, --layers,
 * --heads, --context, --vocab and --attention, its input shape and classes
 * (what is absent stays as mo has it). */
void model_opts_from_meta(const actc_ckpt_meta *meta, actc_model_opts *mo);
/* Build the checkpoint's model (base, or the defaults when NULL, for what
 * the checkpoint does not record) and load its weights: 0, or prints the
 * error and returns 1. */
int model_from_checkpoint(const char *path, const actc_model_opts *base, actc_ckpt_meta *meta, actc_model **m);
/* --NAME=V of a checkpoint's settings: the int (-1 if absent), or the string
 * copied into buf (1; 0 if absent or longer than cap - 1). */
int ckpt_setting_int(const actc_ckpt_meta *meta, const char *name);
int ckpt_setting_str(const actc_ckpt_meta *meta, const char *name, char *buf, size_t cap);

/* ---- language models (tools/lm.c) ------------------------------------------------ */
/* The held-out part of every text corpus: the last 10% of its bytes, from the
 * next line start (for the default corpus: Acts 22:1 to the end). */
#define TEXT_VAL_FRACTION 0.1
/* 1 if spec is "text" or "text:PATH". */
int text_spec(const char *spec);
/* Load the corpus of spec ("text": the default KJV corpus; "text:PATH").
 * Returns 0, or prints the error and returns 1. */
int text_open(const char *spec, actc_text_corpus *c);
/* 0 if both parts hold a window of T+1 bytes, else prints why and returns 1. */
int text_check_windows(const actc_text_corpus *c, int T);

typedef struct {
    int B, T;
    int32_t *window;   /* B windows of T+1 bytes                         */
    int32_t *ids;      /* B*T inputs                                     */
    int32_t *targets;  /* B*T next bytes                                 */
} lm_batch;
lm_batch *lm_batch_new(int B, int T);
void lm_batch_free(lm_batch *b);
/* Forward and mean cross-entropy of b's inputs against its targets. */
actc_status lm_forward_loss(actc_model *m, actc_ctx *ctx, const lm_batch *b, actc_tensor **loss, int *correct);
/* One training step (zero grads, forward, loss, backward, optimizer) on b. */
actc_status lm_step(actc_model *m, actc_ctx *ctx, actc_controller *ctrl, actc_optim *opt, const lm_batch *b,
                    float lr, float clip, step_result *r);
/* One training step on the random train windows of (seed, step). */
actc_status lm_train_step(actc_model *m, actc_ctx *ctx, actc_controller *ctrl, actc_optim *opt,
                          const actc_text_corpus *c, lm_batch *b,
                          uint64_t seed, uint64_t step, float lr, float clip, step_result *r);
/* Mean loss (nats per byte) and next-byte accuracy on the validation part:
 * eval_tokens / T windows spread evenly over it (0: all of it, tiled). */
actc_status lm_evaluate(actc_model *m, actc_ctx *ctx, const actc_text_corpus *c, int T, long eval_tokens, int batch,
                        double *loss, double *acc);
/* Bits per byte of the validation part under the train part's byte
 * frequencies: the bar a model must get clearly under. */
double lm_unigram_bpb(const actc_text_corpus *c);

/* ---- output ---------------------------------------------------------------------- */
typedef struct {
    int tty;           /* redraw a bar on stderr                       */
    double t_start, t_last_print;
    int last_plain;    /* last step printed in plain mode              */
    const char *unit;  /* "samples" (default) or "tokens"              */
} progress;
void progress_init(progress *p, const char *mode); /* "auto", "on", "off" */
void progress_update(progress *p, int epoch, int epochs, int step, int steps, double loss,
                     double acc, double samples_per_s);
void progress_done(progress *p);
double now_seconds(void);

/* Memory table: per-category peaks, total, context stored vs fp32, RSS. */
void report_memory(FILE *f, const actc_mem_stats *ms, const actc_store_stats *ss);
/* The same as a JSON object (no newline). */
void report_memory_json(FILE *f, const actc_mem_stats *ms, const actc_store_stats *ss);
/* GACT's per-tensor table: operator, scope, shape, sensitivity, bits and
 * bytes of each saved tensor, then the totals. */
void report_tensors(FILE *f, const actc_controller *c);
/* The same as a JSON array (no newline). */
void report_tensors_json(FILE *f, const actc_controller *c);
/* After a training step: when the controller adapted, a line on stdout (after
 * a progress bar: on a new line) and, with a log, an "adapt" record with the
 * tensor table; a pending variance alert goes to stderr and the log. */
void report_adaptation(actc_controller *c, FILE *log, uint64_t step, int bar);
/* Context ratio fp32 / stored (0 if nothing stored). */
double context_ratio(const actc_store_stats *ss);
#endif
