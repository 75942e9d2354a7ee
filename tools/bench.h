/* actc bench: one matrix of models x policies x batch sizes, each
 * configuration run by the `actc` commands themselves (train, maxbatch,
 * variance) in a fresh child process, so every figure is the one a single
 * run prints and the peak RSS is the child's alone.  cmd_bench.c builds
 * the matrix and runs it; bench_child.c runs one configuration and reads
 * its figures; bench_csv.c keeps the rows (the record a killed suite
 * resumes from); bench_report.c writes the markdown report and the plots. */
#ifndef ACTC_BENCH_H
#define ACTC_BENCH_H
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
    char model[32], policy[64];
    int batch;                 /* samples or windows; 0 where none applies   */
    int seq;                   /* language models' window, else 0             */
    char status[12];           /* ok, oom (over the budget), failed, n/a      */
    double per_s;              /* samples/s, or tokens/s for language models  */
    double step_ms, forward_ms, backward_ms, update_ms, controller_ms, encode_ms, decode_ms;
    double ctx_B, ctx_fp32_B, ctx_ratio, act_B, mask_B, index_B, exact_B;
    double alloc_peak_B, rss_peak_B;
    double train_loss, test_acc, val_bpb;
    double largest;            /* maxbatch: batch; maxseq: tokens             */
    double variance_ratio;     /* compression variance / SGD's sampling variance */
    double seconds;            /* wall time of the child                      */
    char note[200];
} bench_row;

void bench_row_init(bench_row *r, row_kind kind, const char *model, const char *policy, int batch);
/* "train|resnet20|gact:4|64": the key a resumed suite skips by. */
void bench_row_key(const bench_row *r, char *buf, size_t cap);

/* ---- bench_csv.c ---- */
typedef struct {
    bench_row *rows;
    int n, cap;
} bench_table;
/* Read path into t (a missing file is an empty table).  0, or prints why
 * (a file from another version of the harness, a malformed line) and
 * returns 1. */
int bench_csv_load(const char *path, bench_table *t);
/* Append r to the file (writing the header first into a new one) and to
 * t; the line is flushed and fsync'ed before this returns, so a killed
 * suite keeps it.  0, or prints why and returns 1. */
int bench_csv_append(const char *path, bench_table *t, const bench_row *r);
const bench_row *bench_table_find(const bench_table *t, const char *key);
void bench_table_free(bench_table *t);

/* ---- bench_child.c ---- */
/* snprintf for paths: 0, or 1 when the path did not fit (buf then holds
 * an empty string, so nothing is written to a truncated name). */
int bench_path(char *buf, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Run argv (argv[0] a path, or a name looked up in PATH) with stdout and
 * stderr in out_path; *rss gets its peak RSS in bytes, *secs its wall
 * time.  Returns its exit status, 127 when it could not start, 128 + N on
 * signal N. */
int bench_spawn(char *const argv[], const char *out_path, double *rss, double *secs);
/* Run r's configuration: argv is the whole command (actc train with --log
 * log_path for train and accuracy rows, actc maxbatch --json, actc variance
 * --json, or a PyTorch script), its output kept in out_path.  Fills r's
 * figures and status: ok, oom (the child stopped at the memory budget) or
 * failed (r->note: the child's last line). */
void bench_run_row(bench_row *r, char *const argv[], const char *log_path, const char *out_path);
/* The number after "key": in a JSON text (the last occurrence when last),
 * or NAN. */
double bench_json_num(const char *json, const char *key, int last);

/* ---- bench_report.c ---- */
typedef struct {
    const char *out_dir;       /* OUT: report.md and plots/ go there          */
    const char *suite;
    const char *gnuplot;       /* gnuplot (ACTC_GNUPLOT), NULL: tables only   */
    size_t budget;
    int threads;
    const char *command;       /* the command line that produced the rows     */
} bench_report_opts;
/* report.md from the table and, when gnuplot runs, plots/NAME.png and
 * .svg.  Returns the number of plots written, -1 if report.md could not be
 * written (message printed). */
int bench_report(const bench_report_opts *o, const bench_table *t);
/* The demo's side-by-side table of the accuracy rows on stdout. */
void bench_print_side_by_side(const bench_table *t);
#endif
