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
} step_result;

/* One full training step: zero grads, forward, loss, backward, optimizer step. */
actc_status train_step(actc_model *m, actc_ctx *ctx, actc_optim *opt, actc_tensor *x,
                       const int32_t *labels, float lr, step_result *r);
/* Accuracy and mean loss over a data set in eval mode. */
actc_status evaluate(actc_model *m, actc_ctx *ctx, const actc_image_dataset *d, int batch,
                     double *acc, double *loss);

/* ---- output ---------------------------------------------------------------------- */
typedef struct {
    int tty;           /* redraw a bar on stderr                       */
    double t_start, t_last_print;
    int last_plain;    /* last step printed in plain mode              */
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
/* Context ratio fp32 / stored (0 if nothing stored). */
double context_ratio(const actc_store_stats *ss);
#endif
