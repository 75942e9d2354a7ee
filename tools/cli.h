/* Shared pieces of the `actc` command: flag tables, data set-up, the
 * progress display and the GACT tables.  The training itself is the
 * library's (actc_trainer); the command chooses the data, parses flags and
 * prints. */
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
/* Forget which flags were given (before parsing the real command line
 * after a checkpoint's). */
void flags_clear_set(flag_def *flags);

/* ---- the commands: one table feeds main, --help and the man page ---------- */
typedef struct {
    const char *name;      /* "train"                                       */
    const char *summary;   /* one line for `actc --help`                     */
    const char *usage;
    const char *about;
    /* The flag table over a zeroed options struct of opts_size bytes (the
     * man page builds it without running the command). */
    void (*flags)(flag_def *out, void *opts);
    size_t opts_size;
    int (*run)(int argc, char **argv);
} command;
#define MAX_FLAGS 64
extern const command cmd_train_def, cmd_eval_def, cmd_generate_def, cmd_maxbatch_def, cmd_inspect_def,
    cmd_variance_def, cmd_graph_def, cmd_bench_def, cmd_info_def;

/* ---- graphs (tools/cmd_graph.c) ---- */
/* The default Fashion-MNIST kNN graph file that `actc graph build` writes
 * and graph training reads: ACTC_GRAPH_CACHE, set by CMake to
 * BUILD_DIR/data/fmnist-knn10.graph. */
const char *cli_graph_cache(void);

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
/* "error: WHAT: <the library's message>" on stderr; returns 1. */
int fail(const char *what);
/* Before any work: 0 if spec is a policy the library knows, else prints
 * the library's reason under the flag's name and returns 2. */
int cli_check_policy(const char *spec, const char *flag);
/* The same for a model built with opts (NULL: the defaults). */
int cli_check_model(const char *name, const actc_model_opts *opts, const char *flag);
double now_seconds(void);

/* ---- the machine (tools/machine.c) ---- */
/* actc_set_gemm_backend(name), or the library's reason under `what` on
 * stderr and 2. */
int cli_set_gemm(const char *name, const char *what);
/* One line: the CPU, its vector level and the dense products' backend with
 * the reason. */
void cli_machine_line(FILE *f);
/* A warning line when the dense products run on OpenBLAS's generic kernels
 * on a CPU that has better ones; returns 1 if it printed. */
int cli_machine_warn(FILE *f);
/* The machine as JSON members (no braces): "cpu":{...},"openblas":{...},
 * "dnnl":"...","gemm":{...},"conv":"...","threads":N,"deterministic":0|1. */
void cli_machine_json(FILE *f);

/* ---- data parallelism (tools/dist.c) ---- */
typedef struct {
    actc_dist *d;              /* NULL: one process                           */
    int rank, size;
} cli_dist;
/* Started by mpirun: join the job (MPI), check that every rank runs the
 * same command line, and send the output of ranks other than 0 to
 * /dev/null (their errors still reach stderr).  0, or prints why and
 * returns the exit status. */
int cli_dist_begin(cli_dist *c, int argc, char **argv);
/* Under mpirun: 0 if every rank reads the same bytes at path (what: for
 * the message, e.g. "--resume"), else prints why (on every rank) and
 * returns 1.  One process: 0. */
int cli_dist_same_file(cli_dist *c, const char *path, const char *what);
/* Threads per rank when --threads is not given: the cores over the ranks
 * on this host (0: one process, leave the default). */
int cli_dist_threads(const cli_dist *c);
/* The end of the command: rc != 0 on a rank of several ends the whole job
 * (MPI_Abort: the other ranks would wait for this one forever); otherwise
 * leaves MPI.  Returns rc. */
int cli_dist_end(cli_dist *c, int rc);

/* ---- checkpoints ---- */
/* The run recipe a checkpoint holds into r (tools/run_recipe.c): its
 * recipe field, or in a file written before the field (actc 0.9.0 and
 * earlier), the flags actc train wrote in its note; fields such a note does
 * not name keep r's values.  0, or -1 when the note holds a word that is
 * not a flag or a value that does not read (the rest is read all the
 * same). */
int cli_recipe_from_checkpoint(const actc_ckpt_info *info, actc_run_recipe *r);
/* The built-in model of a checkpoint with its weights: 0, or prints the
 * error (naming --checkpoint) and returns 1. */
int model_from_checkpoint(const char *path, actc_ckpt_info *info, actc_model **m);

/* ---- language models (tools/lm.c) ------------------------------------------------ */
/* The held-out part of every text corpus: the last 10% of its bytes, from the
 * next line start (for the default corpus: Acts 22:1 to the end). */
#define TEXT_VAL_FRACTION 0.1
/* 1 if spec is "text" or "text:PATH". */
int text_spec(const char *spec);
/* Load the corpus of spec ("text": the default KJV corpus; "text:PATH").
 * Returns 0, or prints the error and returns 1. */
int text_open(const char *spec, actc_text_corpus *c);

/* ---- graphs (tools/graph.c) ------------------------------------------------------ */
/* 1 if spec is "graph", "graph:PATH" or "sbm:N". */
int graph_spec(const char *spec);
/* The graph of spec ("graph": the Fashion-MNIST k-NN graph from
 * cli_graph_cache(), built there when missing; "graph:PATH"; "sbm:N"), its
 * split redrawn when split ("TRAIN:VAL") is not NULL.  0, or prints the
 * error and returns 1. */
int graph_open(const char *spec, const char *split, actc_graph **g);

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

/* After a training step: when the controller adapted, a line on stdout (after
 * a progress bar: on a new line) and, with a log, an "adapt" record with the
 * tensor table; a pending variance alert goes to stderr and the log. */
void report_adaptation(actc_controller *c, FILE *log, uint64_t step, int bar);
#endif
