/* actc bench: one matrix of models x policies x batch sizes, each
 * configuration run by the `actc` commands themselves (train, maxbatch,
 * variance) in a fresh child process, so every figure is the one a single
 * run prints and the peak RSS is the child's alone.  cmd_bench.c builds
 * the matrix and runs it; child.c runs one configuration and reads its
 * figures; csv.c keeps the rows (the record a killed suite resumes from);
 * report.c writes the markdown report and the plots.  The command's entry
 * (tools/main.c) only dispatches here. */
#ifndef ACTC_BENCH_H
#define ACTC_BENCH_H
#include "actc.h"
#include <stddef.h>

/* What a row measures. */
typedef enum {
    ROW_TRAIN,    /* a short training run at one batch: speed, time split,
                     context by kind, peaks (actc train, its last epoch)    */
    ROW_MAXBATCH, /* the largest batch under the budget (actc maxbatch)       */
    ROW_MAXSEQ,   /* language models: the longest window at batch 1          */
    ROW_ACCURACY, /* the suite's fixed recipe: test accuracy or val bpb      */
    ROW_VARIANCE, /* gradient variance of quant:B against SGD's (actc variance) */
    ROW_TORCH,    /* the PyTorch peer at one batch (bench/pytorch_*.py)       */
    ROW_NKINDS
} row_kind;
extern const char *const bench_kind_names[ROW_NKINDS];

/* One row of the CSV.  Figures not measured are NAN (an empty field). */
typedef struct {
    row_kind kind;
    char model[32], policy[ACTC_POLICY_MAX];
    int batch;                 /* samples (a language model's sample is a
                                  window); 0 where none applies               */
    int seq;                   /* language models: tokens per window, else 0  */
    char status[12];           /* ok, oom (over the budget), failed, n/a      */
    double samples_per_s, tokens_per_s;
    /* ms per step; the codecs' (encode and decode) share of forward and of
     * backward is inside forward_ms and backward_ms */
    double step_ms, forward_ms, codec_forward_ms, backward_ms, codec_backward_ms, update_ms, controller_ms;
    double ctx_B, ctx_none_B, ctx_ratio, act_B, mask_B, index_B, exact_B;
    double alloc_peak_B, rss_peak_B;
    double train_loss, test_acc, val_bpb;
    double largest_batch, longest_window;
    int at_limit;              /* maxbatch, maxseq: the search reached its
                                  --limit, so the figure is a lower bound      */
    double variance_ratio;     /* compression variance / SGD's sampling variance */
    double seconds;            /* wall time of the child                      */
    char note[200];
    char settings[256];        /* the suite's settings it was measured with
                                  (bench_csv_append stamps the table's)      */
} bench_row;
/* Samples or tokens per second, whichever the row has. */
double bench_row_rate(const bench_row *r);

void bench_row_init(bench_row *r, row_kind kind, const char *model, const char *policy, int batch);
/* "train|resnet20|gact:4|64": the key a resumed suite skips by. */
void bench_row_key(const bench_row *r, char *buf, size_t cap);

/* The recipes, shared by the runs (cmd_bench.c) and the report that
 * describes them: NULL-terminated flag lists of actc train, actc variance,
 * and maxbatch's bisection resolutions. */
extern const char *const bench_acc_image[], *const bench_acc_lm[], *const bench_variance_args[];
/* Coarse on purpose: each trial near the answer is a whole step at the
 * largest batch (15-25 s for ResNet-20 at 6,000 samples), and a bisection
 * within about 1% of the answer is two trials fewer per row than within
 * 0.25%, which is what brings the paper suite near an hour. */
#define BENCH_RES_IMAGE 64  /* samples */
#define BENCH_RES_LM 4      /* windows */
#define BENCH_RES_SEQ 1024  /* tokens */
/* The longest window a maxseq row tries.  A trial is a whole step at batch
 * 1 and its attention's work grows with the square of the window: bf16's
 * search under 1 GiB on gpt-mini (to 15,872 tokens) took 7 minutes, and the
 * compressing policies' context per token, 3-8x smaller, puts their limits
 * beyond what a one-hour suite can search, so those rows say "at least". */
#define BENCH_SEQ_LIMIT 16384

/* ---- csv.c ---- */
typedef struct {
    bench_row *rows;
    int n, cap;
    char settings[256];        /* the suite's (version, suite, budget, steps,
                                  threads): set before load; every row must
                                  have been measured with them               */
} bench_table;
/* Read path into t (a missing or empty file is an empty table).  Every
 * field of every row is checked (kind, names, integers, a known status,
 * numbers finite, not subnormal, in their ranges): a row that fails is
 * dropped with a note naming its line and why, and its configuration runs
 * again; so is an unfinished last line (a suite killed while writing it).
 * The file is then rewritten without them.  0, or prints why and returns 1
 * for a file from another version of the harness (its header) or rows
 * measured with other settings than t->settings. */
int bench_csv_load(const char *path, bench_table *t);
/* Add r to t and to the file (a new file gets the header first): appended,
 * or when t has a row of the same key (a failed run run again) the file is
 * rewritten without the old row.  Flushed and fsync'ed before this
 * returns, so a killed suite keeps it.  0, or prints why and returns 1. */
int bench_csv_append(const char *path, bench_table *t, const bench_row *r);
const bench_row *bench_table_find(const bench_table *t, const char *key);
void bench_table_free(bench_table *t);

/* ---- child.c ---- */
/* snprintf for paths: 0, or 1 when the path did not fit (buf then holds
 * an empty string, so nothing is written to a truncated name). */
int bench_path(char *buf, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Run argv (argv[0] a path, or a name looked up in PATH) with stdout and
 * stderr in out_path, after a first line "$ COMMAND" when log_command (for
 * a reader of runs/ to repeat it).  The child dies with this process.
 * *rss (may be NULL) gets its peak RSS in bytes as the kernel counts it
 * for the child (which includes this process's at the fork), *secs its
 * wall time.  Returns its exit status, 127 when it could not start,
 * 128 + N on signal N. */
int bench_spawn(char *const argv[], const char *out_path, int log_command, double *rss, double *secs);
/* Run r's configuration: argv is the whole command (actc train with --log
 * log_path for train and accuracy rows, actc maxbatch --json, actc variance
 * --json, or a PyTorch script), its output kept in out_path.  Fills r's
 * figures and status: ok, oom (the child stopped at the memory budget) or
 * failed (r->note: the child's last line). */
void bench_run_row(bench_row *r, char *const argv[], const char *log_path, const char *out_path);
/* The number after "key": in a JSON text (the last occurrence when last),
 * or NAN. */
double bench_json_num(const char *json, const char *key, int last);

/* ---- report.c ---- */
typedef struct {
    const char *out_dir;       /* OUT: report.md and plots/ go there          */
    const char *suite;
    const char *gnuplot;       /* gnuplot (ACTC_GNUPLOT), NULL: tables only   */
    size_t budget;
    int threads;
    const char *command;       /* the command line that produced the rows     */
    const char *note;          /* e.g. why there is no PyTorch peer, or NULL  */
} bench_report_opts;
/* report.md from the table and, when gnuplot runs, plots/NAME.png and
 * .svg.  Returns the number of plots written, -1 if report.md could not be
 * written (message printed). */
int bench_report(const bench_report_opts *o, const bench_table *t);
/* The demo's side-by-side table of the accuracy rows on stdout. */
void bench_print_side_by_side(const bench_table *t);
#endif
