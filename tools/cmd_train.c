/* actc train: train an image classifier on an image data set or a language
 * model on text with the library's trainer, with progress, a per-epoch
 * summary and memory table, JSON-lines logging, checkpoints and resume.  A
 * language model's "epoch" is --epoch-steps steps on random windows (its
 * batches are a pure function of the seed and the step), followed by the
 * validation loss.
 *
 * What the command adds to the trainer: the flags, the data, the printing,
 * and its own recipe (epochs, batch, data and window options) in the
 * checkpoint's note, so that --resume continues with the same recipe.  The
 * trainer's recipe for a model family, its checks and the log's records are
 * the library's (actc_trainer_opts_for_model, actc_trainer_check_opts,
 * actc_log_*). */
#include "cli.h"
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *compress, *optim, *schedule, *log_path, *save_path, *resume_path, *init_path, *progress;
    const char *data_spec, *attention, *split, *gemm;
    int epochs, batch, threads, augment, nesterov, width, log_every, eval_batch, accum, deterministic, grad_bits;
    int grad_comm;
    int comm_timeout;         /* seconds; 0: none */
    size_t bucket;
    int layers, heads, context, vocab, seq, epoch_steps;
    uint64_t eval_tokens;
    uint64_t seed, max_steps, warmup;
    float lr, momentum, wd, min_lr, dropout, beta1, beta2, clip, alert;
    size_t budget;
    actc_controller_opts ctl;
    data_opts data;
    /* strings taken from a checkpoint live here */
    char model_buf[32], compress_buf[ACTC_POLICY_MAX], optim_buf[16], schedule_buf[64], note_buf[ACTC_CKPT_NOTE_MAX];
} train_opts;

static const char USAGE[] = "actc train [--model NAME] [--compress SPEC] [--data SPEC] [--epochs N] [--batch N] ...";
static const char ABOUT[] =
    "Train a model with compressed activations: an image classifier on Fashion-MNIST\n"
    "(or any IDX files), or a language model (gpt-mini, llama-mini, gpt, llama,\n"
    "gpt2-124m) on byte-level text (--data text: the King James Bible; the last 10%\n"
    "of the bytes, from Acts 22:1, are held out for validation).  Prints a progress\n"
    "bar on a terminal (plain lines otherwise) and, after every epoch, the train\n"
    "loss, test accuracy or validation loss in bits per byte, throughput and the\n"
    "memory table.  --resume takes the recipe (model, policy, optimizer and its\n"
    "settings, schedule, batch, epochs, seed) from the checkpoint; flags given with\n"
    "it override them, except the model's shape.  Started by mpirun (mpirun -np N\n"
    "actc train ...), it trains data-parallel: --batch stays the global batch, each\n"
    "rank runs its share, gradients are all-reduced during backward (--grad-comm,\n"
    "--bucket), rank 0 prints, logs and saves.  Graph models (gcn, gat, gcnii)\n"
    "train full-batch on a graph (--data graph: the k-NN graph of Fashion-MNIST's\n"
    "70,000 images, built once and cached; graph:PATH; sbm:N): every step is one\n"
    "pass over the whole graph, an epoch --epoch-steps steps, then validation and\n"
    "test accuracy.";

static void build_flags(flag_def *f, void *opts)
{
    train_opts *o = opts;
    flag_def defs[] = {
        {"--model", F_STR, &o->model, "NAME", "model: mlp, resnet20/32/56, resnet18, gpt-mini, llama-mini, gpt, llama, gpt2-124m, gcn, gat, gcnii (resnet20)", 0},
        {"--data", F_STR, &o->data_spec, "SPEC", "fmnist (image models) | text (the default corpus) | text:PATH (a file or directory) | graph | graph:PATH | sbm:N (graph models)", 0},
        {"--compress", F_STR, &o->compress, "SPEC", "activation compression policy (none); see actc --help", 0},
        {"--epochs", F_INT, &o->epochs, "N", "total epochs to train (1)", 0},
        {"--batch", F_INT, &o->batch, "N", "minibatch size (128; language models: 16 windows)", 0},
        {"--accum", F_INT, &o->accum, "N", "run each batch as N micro-batches, adding their gradients (1)", 0},
        {"--grad-bits", F_INT, &o->grad_bits, "N", "hold gradients between micro-batches in 32 bits or 8 (AGoQ's block-wise dynamic map) (32)", 0},
        {"--grad-comm", F_INT, &o->grad_comm, "N", "under mpirun: all-reduce gradients in 32 bits (fp32) or 8 (AGoQ's 8-bit all-to-all + all-gather) (32)", 0},
        {"--bucket", F_BYTES, &o->bucket, "SIZE", "under mpirun: gradient bytes per all-reduce bucket (25MiB)", 0},
        {"--comm-timeout", F_INT, &o->comm_timeout, "SECONDS", "under mpirun: the longest a rank waits for the others in one exchange before the job ends naming the ranks that do not answer (600; 0: no limit)", 0},
        {"--lr", F_FLOAT, &o->lr, "X", "peak learning rate (0.1 for sgd, 0.001 for adamw; graph models 0.01)", 0},
        {"--optim", F_STR, &o->optim, "NAME", "sgd or adamw (sgd; language and graph models: adamw)", 0},
        {"--momentum", F_FLOAT, &o->momentum, "X", "SGD momentum (0.9)", 0},
        {"--nesterov", F_BOOL, &o->nesterov, "", "Nesterov momentum (on; --nesterov=0 turns it off)", 0},
        {"--wd", F_FLOAT, &o->wd, "X", "weight decay (5e-4 sgd, 0.01 adamw; graph models 5e-4)", 0},
        {"--beta1", F_FLOAT, &o->beta1, "X", "AdamW first-moment decay (0.9)", 0},
        {"--beta2", F_FLOAT, &o->beta2, "X", "AdamW second-moment decay (0.999; language models 0.99)", 0},
        {"--clip", F_FLOAT, &o->clip, "X", "clip the gradients' global L2 norm to X, 0 = off (0; language models 1)", 0},
        {"--schedule", F_STR, &o->schedule, "SPEC", "cosine | const | step:STEPS:GAMMA (cosine; graph models const)", 0},
        {"--warmup", F_U64, &o->warmup, "STEPS", "linear learning-rate warm-up steps (50; graph models 0)", 0},
        {"--min-lr", F_FLOAT, &o->min_lr, "X", "floor of the cosine schedule, at most --lr (0)", 0},
        {"--augment", F_BOOL, &o->augment, "", "random crop (pad 2) and horizontal flip", 0},
        {"--width", F_INT, &o->width, "N", "hidden width of the mlp (256), of a transformer or graph model (the preset's)", 0},
        {"--layers", F_INT, &o->layers, "N", "transformer blocks or graph layers (the preset's: 6, gpt2-124m 12; gcn and gat 2, gcnii 16)", 0},
        {"--heads", F_INT, &o->heads, "N", "attention heads (the preset's: 8, gpt2-124m 12, gat 8)", 0},
        {"--context", F_INT, &o->context, "N", "positions the model holds (the preset's: 256, gpt2-124m 1024)", 0},
        {"--vocab", F_INT, &o->vocab, "N", "vocabulary size, at least 256 for bytes (the preset's)", 0},
        {"--attention", F_STR, &o->attention, "FORM", "flash (memory-efficient, default) or naive (saves the probabilities)", 0},
        {"--seq", F_INT, &o->seq, "N", "tokens per training window (the model's context)", 0},
        {"--epoch-steps", F_INT, &o->epoch_steps, "N", "language and graph models: steps per epoch (200; graphs 50)", 0},
        {"--split", F_STR, &o->split, "TRAIN:VAL", "graph models: redraw the split, TRAIN and VAL nodes, the rest test (the graph's own)", 0},
        {"--eval-tokens", F_U64, &o->eval_tokens, "N", "language models: validation tokens per evaluation, 0 = all (65536)", 0},
        {"--dropout", F_FLOAT, &o->dropout, "P", "dropout of the mlp (0) or of a graph model (gcn 0.5, gat and gcnii 0.6)", 0},
        {"--adapt-interval", F_U64, &o->ctl.adapt_interval, "N", "gact: steps between sensitivity measurements (1000)", 0},
        {"--estimate-samples", F_INT, &o->ctl.estimate_samples, "N", "gact: samples per sensitivity pass, 0 = the batch (8)", 0},
        {"--alert", F_FLOAT, &o->alert, "F", "gact: warn when compression variance passes F x the gradient variance (0.5)", 0},
        {"--seed", F_U64, &o->seed, "N", "seed of initialisation, data order and rounding (1)", 0},
        {"--threads", F_INT, &o->threads, "N", "threads (default: all cores)", 0},
        {"--deterministic", F_BOOL, &o->deterministic, "", "the same losses at any thread count (slower: see the README)", 0},
        {"--gemm", F_STR, &o->gemm, "NAME", "dense products on auto, dnnl (oneDNN) or openblas (auto: see actc info; ACTC_GEMM)", 0},
        {"--mem-budget", F_BYTES, &o->budget, "SIZE", "fail cleanly past this many bytes (e.g. 512MiB)", 0},
        {"--log", F_STR, &o->log_path, "FILE", "append JSON lines (steps and epochs) to FILE", 0},
        {"--log-every", F_INT, &o->log_every, "N", "log a step record every N steps (50)", 0},
        {"--save", F_STR, &o->save_path, "FILE", "write a checkpoint after every epoch and at the end", 0},
        {"--resume", F_STR, &o->resume_path, "FILE", "continue the run saved in FILE", 0},
        {"--init", F_STR, &o->init_path, "FILE", "start from the weights saved in FILE (fine-tuning: its model, a fresh optimizer, schedule and data order)", 0},
        {"--max-steps", F_U64, &o->max_steps, "N", "stop after N steps in total (0 = no limit)", 0},
        {"--eval-batch", F_INT, &o->eval_batch, "N", "batch size for evaluation (256; language models: --batch)", 0},
        {"--progress", F_STR, &o->progress, "MODE", "auto | on | off (auto: a bar on a terminal)", 0},
        {"--data-dir", F_STR, &o->data.data_dir, "DIR", "directory with the Fashion-MNIST IDX files", 0},
        {"--train-images", F_STR, &o->data.train_images, "FILE", "IDX image file for training", 0},
        {"--train-labels", F_STR, &o->data.train_labels, "FILE", "IDX label file for training", 0},
        {"--test-images", F_STR, &o->data.test_images, "FILE", "IDX image file for testing", 0},
        {"--test-labels", F_STR, &o->data.test_labels, "FILE", "IDX label file for testing", 0},
        {"--limit-train", F_INT, &o->data.limit_train, "N", "use only the first N training images", 0},
        {"--limit-test", F_INT, &o->data.limit_test, "N", "use only the first N test images", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    _Static_assert(sizeof defs <= MAX_FLAGS * sizeof(flag_def), "raise MAX_FLAGS");
    memcpy(f, defs, sizeof defs);
}

/* Trainer options t (optimizer optim) into the flags' fields. */
static void apply_trainer(train_opts *o, const actc_trainer_opts *t, const char *optim)
{
    snprintf(o->optim_buf, sizeof o->optim_buf, "%s", optim);
    o->optim = o->optim_buf;
    o->lr = t->lr;
    o->momentum = t->momentum;
    o->nesterov = t->nesterov;
    o->wd = t->weight_decay;
    o->beta1 = t->beta1;
    o->beta2 = t->beta2;
    o->clip = t->clip;
    o->accum = t->accum;
    o->grad_bits = t->grad_bits ? t->grad_bits : 32;
    o->seed = t->seed;
    o->warmup = t->schedule.warmup_steps;
    o->min_lr = t->schedule.min_lr;
    const actc_lr_schedule *s = &t->schedule;
    if (s->kind == ACTC_LR_STEP)
        snprintf(o->schedule_buf, sizeof o->schedule_buf, "step:%llu:%.9g", (unsigned long long)s->step_size,
                 (double)s->gamma);
    else snprintf(o->schedule_buf, sizeof o->schedule_buf, "%s", s->kind == ACTC_LR_COSINE ? "cosine" : "const");
    o->schedule = o->schedule_buf;
    o->ctl = t->controller;
    o->alert = (float)t->controller.alert_fraction;
}

static void defaults(train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->model = "resnet20";
    o->compress = "none";
    o->progress = "auto";
    o->epochs = 1;
    o->batch = 128;
    o->grad_comm = 32;
    o->comm_timeout = (int)ACTC_DIST_TIMEOUT_S;
    o->log_every = 50;
    o->eval_batch = 256;
    o->attention = "flash";
    o->epoch_steps = 200;
    o->eval_tokens = 65536;
    /* The trainer's options: an image classifier's recipe until the model
     * is known (model_recipe). */
    const actc_trainer_opts t = actc_trainer_opts_for_model(NULL);
    apply_trainer(o, &t, t.optim);
}

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
    int rank_states;         /* --resume gave each rank its own policy state */
    FILE *log;
} run_state;

static void run_free(run_state *r)
{
    actc_source_free(r->src);
    actc_source_free(r->eval);
    actc_source_free(r->test_src);
    actc_source_free(r->graph_src);
    actc_graph_free(r->graph);
    actc_dist_detach(r->dist.d); /* the handle outlives the trainer */
    actc_trainer_free(r->t);
    actc_model_free(r->model);
    if (r->have_corpus) actc_text_free(&r->corpus);
    if (r->have_train) actc_image_dataset_free(&r->train);
    if (r->have_test) actc_image_dataset_free(&r->test);
    if (r->log) fclose(r->log);
    actc_mem_set_budget(0);
}

/* The settings that decide a run's last bits beyond its recipe, as flags
 * of the note, so that a resumed run keeps them: the deterministic mode, a
 * dense-product backend forced (--gemm or ACTC_GEMM, set before the note is
 * made; auto is not written: it resolves again on the machine that
 * resumes), and under mpirun the gradients' wire (--grad-comm 8 rounds
 * them, blocks cut by --bucket).  A flag given with --resume still wins. */
static const char *bits_note(const train_opts *o, char *buf, size_t cap)
{
    const char *g = actc_get_gemm_backend();
    char bucket[40] = "";
    if (o->bucket) snprintf(bucket, sizeof bucket, " --bucket=%zu", o->bucket);
    snprintf(buf, cap, "%s%s%s%s", o->deterministic ? " --deterministic" : "",
             !strcmp(g, "dnnl") ? " --gemm=dnnl" : !strcmp(g, "openblas") ? " --gemm=openblas" : "",
             o->grad_comm != 32 ? " --grad-comm=8" : "", bucket);
    return buf;
}

/* The command's own recipe, which the trainer does not keep (the model's
 * shape and the trainer's options are in the checkpoint's records): into
 * buf as flags for --resume, eval and generate.  Returns the length
 * snprintf wanted (>= cap: it did not fit). */
static int format_note(const train_opts *o, int lm, char *buf, size_t cap)
{
    char bits[128];
    bits_note(o, bits, sizeof bits);
    if (graph_spec(o->data_spec)) {
        const int keep = !strchr(o->data_spec, ' ') && (!o->split || !strchr(o->split, ' '));
        return snprintf(buf, cap, "--epochs=%d --epoch-steps=%d%s%s%s%s%s", o->epochs, o->epoch_steps,
                        keep ? " --data=" : "", keep ? o->data_spec : "", keep && o->split ? " --split=" : "",
                        keep && o->split ? o->split : "", bits);
    }
    /* A --data path with a space cannot be a flag of the space-separated
     * note: it is left out (resume and eval then need --data again). */
    const int keep_data = lm && !strchr(o->data_spec, ' ');
    return lm ? snprintf(buf, cap, "--epochs=%d --batch=%d --seq=%d --epoch-steps=%d --eval-tokens=%llu%s%s%s",
                         o->epochs, o->batch, o->seq, o->epoch_steps, (unsigned long long)o->eval_tokens,
                         keep_data ? " --data=" : "", keep_data ? o->data_spec : "", bits)
              : snprintf(buf, cap, "--epochs=%d --batch=%d --augment=%d --limit-train=%d%s", o->epochs, o->batch,
                         o->augment, o->data.limit_train, bits);
}

/* The recipe a checkpoint records (a file of actc 0.1 keeps all of it in
 * its note, read afterwards). */
static void apply_checkpoint(train_opts *o, const actc_ckpt_info *info)
{
    snprintf(o->model_buf, sizeof o->model_buf, "%s", info->model);
    o->model = o->model_buf;
    snprintf(o->compress_buf, sizeof o->compress_buf, "%s", info->policy[0] ? info->policy : "none");
    o->compress = o->compress_buf;
    const actc_model_opts *mo = &info->model_opts;
    o->width = mo->width;
    o->layers = mo->n_layers;
    o->heads = mo->n_heads;
    o->context = mo->context;
    o->vocab = mo->vocab;
    o->attention = mo->attention == ACTC_ATTN_NAIVE ? "naive" : "flash";
    o->dropout = mo->dropout;
    if (info->has_trainer) apply_trainer(o, &info->trainer, info->optim[0] ? info->optim : "sgd");
}

/* The model family's recipe (actc_trainer_opts_for_model), then the
 * command line again, which overrides it. */
static void model_recipe(train_opts *o, flag_def *flags, int argc, char **argv)
{
    char model[sizeof o->model_buf];
    int help;
    snprintf(model, sizeof model, "%s", o->model);
    defaults(o);
    build_flags(flags, o);
    memcpy(o->model_buf, model, sizeof model);
    o->model = o->model_buf;
    const actc_trainer_opts t = actc_trainer_opts_for_model(model);
    apply_trainer(o, &t, t.optim);
    flags_clear_set(flags);
    flags_parse(flags, argc, argv, 2, &help); /* it parsed once already */
}

/* --init: the model of the checkpoint (its weights are loaded by setup),
 * nothing else of its run.  0, or prints why and returns 1. */
static int init_model(train_opts *o, flag_def *flags, actc_ckpt_info *info)
{
    if (actc_checkpoint_info(o->init_path, info) != ACTC_OK) return fail("--init");
    if (flag_was_set(flags, "--model") && strcmp(o->model, info->model)) {
        fprintf(stderr, "error: --init %s holds model %s, but --model %s was given\n", o->init_path, info->model,
                o->model);
        return 1;
    }
    static const char *const shape[] = {"--width", "--layers", "--heads", "--context", "--vocab"};
    for (size_t i = 0; i < sizeof shape / sizeof *shape; i++)
        if (flag_was_set(flags, shape[i])) {
            fprintf(stderr, "error: %s: a run started with --init keeps the model of its checkpoint (%s)\n", shape[i],
                    o->init_path);
            return 1;
        }
    snprintf(o->model_buf, sizeof o->model_buf, "%s", info->model);
    o->model = o->model_buf;
    return 0;
}

/* Defaults, then the checkpoint's recipe, then the command line (parsed
 * into flags again).  0, or the exit status. */
static int resume_recipe(train_opts *o, flag_def *flags, int argc, char **argv, actc_ckpt_info *info)
{
    const char *path = o->resume_path, *asked_model = flag_was_set(flags, "--model") ? o->model : NULL;
    if (actc_checkpoint_info(path, info) != ACTC_OK) return fail("--resume");
    if (asked_model && strcmp(asked_model, info->model)) {
        fprintf(stderr, "error: --resume %s holds model %s, but --model %s was given\n", path, info->model,
                asked_model);
        return 2;
    }
    static const char *const shape[] = {"--width", "--layers", "--heads", "--context", "--vocab", "--attention",
                                        "--dropout"};
    for (size_t i = 0; i < sizeof shape / sizeof *shape; i++)
        if (flag_was_set(flags, shape[i])) {
            fprintf(stderr, "error: %s: a resumed run keeps the model of its checkpoint (%s)\n", shape[i], path);
            return 2;
        }
    int help;
    defaults(o);
    build_flags(flags, o);
    apply_checkpoint(o, info);
    /* The note's flags: tokens point into o->note_buf, which lives as long
     * as the run. */
    char *tok[64];
    int nt = 2;
    tok[0] = tok[1] = "";
    snprintf(o->note_buf, sizeof o->note_buf, "%s", info->note);
    for (char *t = strtok(o->note_buf, " "); t && nt < 64; t = strtok(NULL, " ")) tok[nt++] = t;
    if (flags_parse(flags, nt, tok, 2, &help)) {
        fprintf(stderr, "error: --resume %s: unreadable run settings '%s'\n", path, info->note);
        return 1;
    }
    flags_clear_set(flags);
    flags_parse(flags, argc, argv, 2, &help); /* the command line wins; it parsed once already */
    if (info->epoch >= (uint64_t)o->epochs) {
        fprintf(stderr, "error: the run in %s already completed %llu of its %d epoch(s); pass --epochs N with N > "
                        "%llu to train further\n",
                path, (unsigned long long)info->epoch, o->epochs, (unsigned long long)info->epoch);
        return 2;
    }
    return 0;
}

/* The trainer's options from the flags (steps: batches per epoch) into
 * *out; ACTC_ERR_INVALID for a --schedule that does not parse. */
static actc_status trainer_opts(const train_opts *o, int steps, actc_trainer_opts *out)
{
    actc_trainer_opts t = actc_trainer_default_opts();
    t.policy = o->compress;
    t.optim = o->optim;
    t.lr = o->lr;
    t.momentum = o->momentum;
    t.nesterov = o->nesterov;
    t.weight_decay = o->wd;
    t.beta1 = o->beta1;
    t.beta2 = o->beta2;
    t.eps = 1e-8f;
    const actc_status s = actc_lr_parse(o->schedule, &t.schedule);
    t.schedule.min_lr = o->min_lr;
    t.schedule.warmup_steps = o->warmup;
    t.schedule.total_steps = (uint64_t)o->epochs * (uint64_t)steps;
    t.clip = o->clip;
    t.accum = o->accum;
    t.grad_bits = o->grad_bits;
    t.seed = o->seed;
    t.controller = o->ctl;
    t.controller.alert_fraction = o->alert;
    *out = t;
    return s;
}

/* The trainer's complaint about its options, its option names printed as
 * this command's flags.  Returns 2. */
static int fail_options(void)
{
    static const char *const name[][2] = {
        {"adapt_interval", "--adapt-interval"}, {"estimate_samples", "--estimate-samples"},
        {"alert_fraction", "--alert"}, {"grad_bits", "--grad-bits"}, {"weight decay", "--wd"},
        {"momentum", "--momentum"}, {"beta1", "--beta1"}, {"beta2", "--beta2"}, {"clip", "--clip"},
        {"accum", "--accum"}, {"min lr", "--min-lr"}, {"learning rate", "--lr"}};
    const char *m = actc_last_error();
    fputs("error: ", stderr);
    for (const char *p = m; *p;) {
        size_t i = 0, n = sizeof name / sizeof *name;
        /* whole words only */
        const int start = p == m || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '-');
        for (; start && i < n; i++) {
            const size_t len = strlen(name[i][0]);
            if (!strncmp(p, name[i][0], len) && !(isalnum((unsigned char)p[len]) || p[len] == '_')) break;
        }
        if (start && i < n) {
            fputs(name[i][1], stderr);
            p += strlen(name[i][0]);
        } else {
            fputc(*p++, stderr);
        }
    }
    fputc('\n', stderr);
    return 2;
}

/* Every flag checked before any data is read.  0, or exit status 2. */
static int check_flags(train_opts *o, const flag_def *flags, int lm)
{
    const int gr = actc_model_name_takes_graph(o->model);
    if (!o->data_spec) o->data_spec = lm ? "text" : gr ? "graph" : "fmnist";
    if (gr != graph_spec(o->data_spec)) {
        if (gr) fprintf(stderr, "error: --data %s: model %s is a graph network: use --data graph, graph:PATH or sbm:N\n", o->data_spec, o->model);
        else fprintf(stderr, "error: --data %s: model %s does not take a graph: use gcn, gat or gcnii\n", o->data_spec, o->model);
        return 2;
    }
    if (!gr && o->split) {
        fprintf(stderr, "error: --split is for graph models (gcn, gat, gcnii)\n");
        return 2;
    }
    if (gr && o->accum > 1) {
        fprintf(stderr, "error: --accum %d: graph models train full-batch, one whole graph a step\n", o->accum);
        return 2;
    }
    if (!gr && (lm != text_spec(o->data_spec) || (!lm && strcmp(o->data_spec, "fmnist")))) {
        if (lm) fprintf(stderr, "error: --data %s: model %s is a language model: use --data text or text:PATH\n", o->data_spec, o->model);
        else if (text_spec(o->data_spec))
            fprintf(stderr, "error: --data %s: model %s classifies images: use a language model (gpt-mini, llama-mini, gpt, llama, gpt2-124m) for text\n", o->data_spec, o->model);
        else fprintf(stderr, "error: unknown --data '%s' (fmnist, text or text:PATH)\n", o->data_spec);
        return 2;
    }
    if (strcmp(o->attention, "flash") && strcmp(o->attention, "naive")) {
        fprintf(stderr, "error: --attention must be flash or naive, not '%s'\n", o->attention);
        return 2;
    }
    if (o->layers < 0 || o->heads < 0 || o->context < 0 || o->vocab < 0 || o->seq < 0 || o->width < 0 || o->epoch_steps < 1) {
        fprintf(stderr, "error: --layers, --heads, --context, --vocab, --seq and --width must not be negative, --epoch-steps at least 1\n");
        return 2;
    }
    if (lm && o->vocab && o->vocab < 256) {
        fprintf(stderr, "error: --vocab %d: byte-level text needs a vocabulary of at least 256\n", o->vocab);
        return 2;
    }
    /* 0 and -1 mean "the optimizer's" to the trainer, not given values. */
    if ((flag_was_set(flags, "--lr") && !(o->lr > 0)) || (flag_was_set(flags, "--wd") && !(o->wd >= 0))) {
        fprintf(stderr, "error: --lr must be positive and --wd not negative\n");
        return 2;
    }
    if (o->epochs < 1 || o->batch < 1 || o->eval_batch < 1 || o->log_every < 1 || o->accum < 1) {
        fprintf(stderr, "error: --epochs, --batch, --accum, --eval-batch and --log-every must be at least 1\n");
        return 2;
    }
    if (o->batch % o->accum) {
        fprintf(stderr, "error: --accum %d does not divide --batch %d: each micro-batch has the same size\n", o->accum,
                o->batch);
        return 2;
    }
    if (o->grad_comm != 8 && o->grad_comm != 32) {
        fprintf(stderr, "error: --grad-comm %d: gradients are all-reduced in 32 bits (fp32) or 8 (AGoQ's 8-bit "
                        "all-reduce)\n", o->grad_comm);
        return 2;
    }
    if (o->comm_timeout < 0) {
        fprintf(stderr, "error: --comm-timeout %d: seconds, 0 for no limit\n", o->comm_timeout);
        return 2;
    }
    if (flag_was_set(flags, "--bucket") && o->bucket < 1024) {
        fprintf(stderr, "error: --bucket %zu: a bucket holds at least 1KiB of gradients\n", o->bucket);
        return 2;
    }
    if (o->threads < 0 || o->data.limit_train < 0 || o->data.limit_test < 0) {
        fprintf(stderr, "error: --threads, --limit-train and --limit-test must not be negative\n");
        return 2;
    }
    if (!(o->dropout >= 0 && o->dropout < 1)) {
        fprintf(stderr, "error: --dropout %g: need 0 <= P < 1\n", (double)o->dropout);
        return 2;
    }
    if (flag_was_set(flags, "--mem-budget") && o->budget == 0) {
        fprintf(stderr, "error: --mem-budget must be positive (leave it out for no limit)\n");
        return 2;
    }
    if (strcmp(o->progress, "auto") && strcmp(o->progress, "on") && strcmp(o->progress, "off")) {
        fprintf(stderr, "error: --progress must be auto, on or off, not '%s'\n", o->progress);
        return 2;
    }
    /* The trainer's options, the policy included, before spending time on
     * the data (the trainer checks them: its messages name the option). */
    actc_trainer_opts t;
    if (trainer_opts(o, 1, &t) != ACTC_OK) return fail("--schedule"), 2;
    if (actc_trainer_check_opts(&t) != ACTC_OK) return fail_options();
    return 0;
}

/* The graph's training batch, every step of an epoch. */
static actc_status repeat_graph(void *user, uint64_t epoch, uint64_t index, uint64_t step, actc_batch *b)
{
    (void)epoch;
    (void)index;
    return actc_source_get(user, 0, 0, step, b);
}

/* Data, model, sources and trainer.  0, or prints why and returns 1. */
static int setup(run_state *r, train_opts *o, int lm)
{
    actc_model_opts mo = actc_model_default_opts();
    const int gr = graph_spec(o->data_spec);
    if (gr) {
        if (graph_open(o->data_spec, o->split, &r->graph)) return 1;
        const actc_graph *g = r->graph;
        int c[3];
        actc_graph_split_counts(g, c);
        printf("graph %s: %d nodes, %lld edges (mean degree %.1f), %d features, %d classes; split %d train, %d "
               "validation, %d test\n",
               g->source, g->n, (long long)g->n_edges, 2.0 * (double)g->n_edges / g->n, g->n_features, g->n_classes,
               c[0], c[1], c[2]);
        mo.in_channels = g->n_features;
        mo.in_h = mo.in_w = 1;
        mo.num_classes = g->n_classes;
        mo.n_layers = o->layers;
        mo.n_heads = o->heads;
    } else if (lm) {
        if (text_open(o->data_spec, &r->corpus)) return 1;
        r->have_corpus = 1;
        mo.n_layers = o->layers;
        mo.n_heads = o->heads;
        mo.context = o->context;
        mo.vocab = o->vocab;
        mo.attention = !strcmp(o->attention, "naive") ? ACTC_ATTN_NAIVE : ACTC_ATTN_FLASH;
    } else {
        if (data_load(&o->data, &r->train, &r->test)) return 1;
        r->have_train = r->have_test = 1;
        if (r->test.c != r->train.c || r->test.h != r->train.h || r->test.w != r->train.w) {
            fprintf(stderr, "error: test images are %dx%dx%d but training images %dx%dx%d\n", r->test.c, r->test.h,
                    r->test.w, r->train.c, r->train.h, r->train.w);
            return 1;
        }
        mo.in_channels = r->train.c;
        mo.in_h = r->train.h;
        mo.in_w = r->train.w;
        mo.num_classes = r->train.num_classes > r->test.num_classes ? r->train.num_classes : r->test.num_classes;
    }
    mo.width = o->width;
    mo.dropout = o->dropout;
    mo.seed = o->seed;
    if (o->resume_path || o->init_path) {
        const char *path = o->resume_path ? o->resume_path : o->init_path;
        const char *flag = o->resume_path ? "--resume" : "--init";
        if (actc_checkpoint_model(path, &r->model) != ACTC_OK) return fail(flag);
        const actc_model_opts *c = actc_model_get_opts(r->model);
        if (!lm && (c->in_channels * c->in_h * c->in_w != mo.in_channels * mo.in_h * mo.in_w || c->in_h != mo.in_h || c->in_w != mo.in_w ||
                    c->num_classes < mo.num_classes)) {
            if (gr) /* a graph model's input is a node's feature vector (held as C x 1 x 1) */
                fprintf(stderr, "error: %s %s: its model takes %d features per node in %d classes; the graph has %d "
                                "features in %d\n", flag, path, c->in_channels, c->num_classes, mo.in_channels,
                        mo.num_classes);
            else
                fprintf(stderr, "error: %s %s: its model takes %dx%dx%d images in %d classes; the data has %dx%dx%d "
                                "images in %d\n", flag, path, c->in_channels, c->in_h, c->in_w, c->num_classes,
                        mo.in_channels, mo.in_h, mo.in_w, mo.num_classes);
            return 1;
        }
    } else if (actc_model_create(o->model, &mo, &r->model) != ACTC_OK) {
        return fail("--model");
    }
    int steps;
    actc_status s;
    if (gr) {
        /* An epoch is --epoch-steps passes over the whole graph. */
        s = actc_source_graph(r->graph, ACTC_SPLIT_TRAIN, &r->graph_src);
        if (s == ACTC_OK) s = actc_source_custom(repeat_graph, r->graph_src, o->epoch_steps, &r->src);
        /* A split without validation or test nodes is reported as such. */
        int c[3];
        actc_graph_split_counts(r->graph, c);
        if (s == ACTC_OK && c[1]) s = actc_source_graph(r->graph, ACTC_SPLIT_VAL, &r->eval);
        if (s == ACTC_OK && c[2]) s = actc_source_graph(r->graph, ACTC_SPLIT_TEST, &r->test_src);
        if (s != ACTC_OK) return fail("--data");
        r->graph_run = 1;
        steps = o->epoch_steps;
    } else if (lm) {
        const int context = actc_model_get_opts(r->model)->context, T = r->T = o->seq ? o->seq : context;
        if (T > context) {
            fprintf(stderr, "error: --seq %d is over the context of model %s (%d positions); pass --context to build a "
                            "longer one\n", T, o->model, context);
            return 1;
        }
        s = actc_source_text(&r->corpus, o->batch, T, o->seed, o->epoch_steps, &r->src);
        if (s == ACTC_OK) s = actc_source_text_eval(&r->corpus, T, o->eval_tokens, o->eval_batch, &r->eval);
        if (s != ACTC_OK) return fail("--data");
        steps = o->epoch_steps;
    } else {
        actc_loader_opts lo = {FMNIST_MEAN, FMNIST_STD, o->augment ? 2 : 0, o->augment, 1, o->seed};
        actc_loader_opts te = {FMNIST_MEAN, FMNIST_STD, 0, 0, 0, 0};
        if (actc_source_images(&r->train, o->batch, 1, &lo, &r->src) != ACTC_OK) return fail("--batch");
        if (actc_source_images(&r->test, o->eval_batch, 0, &te, &r->eval) != ACTC_OK) return fail("--eval-batch");
        steps = actc_source_batches(r->src);
    }
    actc_trainer_opts to;
    trainer_opts(o, steps, &to); /* checked already */
    if (actc_trainer_new(r->model, &to, &r->t) != ACTC_OK) return fail("trainer");
    if (o->resume_path && actc_trainer_load(r->t, o->resume_path) != ACTC_OK) return fail("--resume");
    if (r->dist.d) {
        /* Every host's copy of the checkpoint must be the same file. */
        const char *ck = o->resume_path ? o->resume_path : o->init_path;
        if (ck && cli_dist_same_file(&r->dist, ck, o->resume_path ? "--resume" : "--init")) return 1;
        actc_dist_opts dop = {o->grad_comm, o->bucket};
        actc_dist_set_timeout(r->dist.d, o->comm_timeout);
        if (actc_dist_attach(r->dist.d, r->t, &dop) != ACTC_OK) return fail("data parallel");
        /* Each rank's own learnt policy state, if the file holds them. */
        if (o->resume_path && actc_dist_resume(r->dist.d, o->resume_path, &r->rank_states) != ACTC_OK)
            return fail("--resume");
    }
    /* Rank 0 writes the checkpoints (the others send it their policy
     * states: actc_dist_save) and the log. */
    if (r->dist.rank > 0) o->log_path = NULL;
    if (o->save_path && r->dist.rank == 0) {
        /* Find out now, not after the first epoch, if the run cannot be saved. */
        char note[ACTC_CKPT_NOTE_MAX];
        int need = format_note(o, lm, note, sizeof note);
        if (need >= (int)sizeof note) {
            fprintf(stderr, "error: --save: the run's settings take %d bytes, over the checkpoint's %zu; shorten "
                            "--data\n", need, sizeof note - 1);
            return 1;
        }
        if (actc_trainer_set_note(r->t, note) != ACTC_OK || actc_checkpoint_probe(o->save_path) != ACTC_OK)
            return fail("--save");
    }
    if (o->log_path && !(r->log = fopen(o->log_path, "a"))) {
        fprintf(stderr, "error: --log: cannot open %s for appending\n", o->log_path);
        return 1;
    }
    return 0;
}

/* A write to the log failed (a full disk): say so once and stop logging;
 * the training, and its checkpoints, go on. */
static void log_failed(run_state *r)
{
    fprintf(stderr, "warning: --log: %s; no more records are written, training goes on\n", actc_last_error());
    fclose(r->log);
    r->log = NULL;
}

/* What the progress callback needs. */
typedef struct {
    const train_opts *o;
    run_state *r;
    progress pg;
} cb_state;

static int on_step(actc_trainer *t, const actc_progress *p, void *user)
{
    cb_state *c = user;
    const train_opts *o = c->o;
    report_adaptation(actc_trainer_controller(t), c->r->log, p->step - 1, c->pg.tty == 1);
    const double sps = p->seconds > 0 ? (double)p->rows / p->seconds : 0;
    progress_update(&c->pg, (int)p->epoch + 1, o->epochs, p->batch, p->batches, p->loss, p->accuracy, sps);
    if (c->r->log && p->step % (uint64_t)o->log_every == 0 && actc_log_step(c->r->log, p, c->pg.unit, sps) != ACTC_OK)
        log_failed(c->r);
    return o->max_steps && p->step >= o->max_steps;
}

static int save(const train_opts *o, run_state *r)
{
    if (o->save_path && (r->dist.d ? actc_dist_save(r->dist.d, o->save_path) : actc_trainer_save(r->t, o->save_path)) != ACTC_OK)
        return fail("saving checkpoint");
    return 0;
}

/* The epoch's summary line, memory table and log record. */
static int epoch_report(const train_opts *o, run_state *r, int lm, const actc_epoch_result *er)
{
    actc_eval_result ev = {0}, te = {0};
    double t_eval = now_seconds();
    /* A graph's split may hold no validation or no test node. */
    if (r->eval && actc_trainer_evaluate(r->t, r->eval, &ev) != ACTC_OK) return fail("evaluation");
    if (r->test_src && actc_trainer_evaluate(r->t, r->test_src, &te) != ACTC_OK) return fail("evaluation");
    t_eval = now_seconds() - t_eval;
    const int epoch = (int)actc_trainer_epoch(r->t); /* completed, 1-based */
    const double sps = er->rows ? (double)er->rows / er->seconds : 0;
    if (r->graph_run) {
        char va[64] = "no validation nodes", ta[64] = "no test nodes";
        if (r->eval) snprintf(va, sizeof va, "validation acc %.2f%% (loss %.4f)", 100 * ev.accuracy, ev.loss);
        if (r->test_src) snprintf(ta, sizeof ta, "test acc %.2f%% (loss %.4f)", 100 * te.accuracy, te.loss);
        printf("epoch %d/%d (step %llu): train loss %.4f (acc %.2f%%), %s, %s, %.2f steps/s, %.1f s\n", epoch,
               o->epochs, (unsigned long long)actc_trainer_steps(r->t), er->loss, 100 * er->accuracy, va, ta,
               er->seconds > 0 ? er->steps / er->seconds : 0, er->seconds);
    } else if (lm)
        printf("epoch %d/%d: train loss %.4f (%.3f bpb), validation loss %.4f = %.3f bits per byte (next-byte acc "
               "%.1f%%, %.1f s), %.0f tokens/s, %.1f s\n",
               epoch, o->epochs, er->loss, er->loss / M_LN2, ev.loss, ev.loss / M_LN2, 100 * ev.accuracy, t_eval, sps,
               er->seconds);
    else
        printf("epoch %d/%d: train loss %.4f (acc %.2f%%), test acc %.2f%% (loss %.4f), %.1f samples/s, %.1f s\n", epoch,
               o->epochs, er->loss, 100 * er->accuracy, 100 * ev.accuracy, ev.loss, sps, er->seconds);
    actc_trainer_report_file(r->t, ACTC_REPORT_TEXT, stdout);
    /* Where a step's time went: the trainer times forward, backward and
     * update, the store its codecs (inside forward and backward). */
    const double per = er->steps ? 1e3 / er->steps : 0;
    printf("time per step: forward %.2f ms (codecs %.2f ms of it), backward %.2f ms (codecs %.2f ms of it), update "
           "%.2f ms", per * er->forward_s, per * er->codec_forward_s, per * er->backward_s, per * er->codec_backward_s,
           per * er->update_s);
    /* The controller: GACT's sensitivity passes and bookkeeping (next to
     * nothing under other policies). */
    printf(", controller %.2f ms\n", per * er->measure_s);
    actc_dist_stats ds;
    actc_dist_get_stats(r->dist.d, &ds);
    char a[32], b[32], c[32];
    if (r->dist.d && ds.steps)
        printf("communication (rank %d of %d, figures per rank; COMM above is its buffers): %s of gradients a step "
               "(dense fp32 %s) in %d bucket(s), %s sent a step in %d bits; waiting after backward %.1f ms a step, "
               "%.1f ms from the first bucket to the last done\n",
               ds.rank, ds.ranks, actc_format_bytes(ds.floats * 4, a, sizeof a),
               actc_format_bytes(ds.fp32_floats * 4, b, sizeof b), ds.buckets,
               actc_format_bytes(ds.bytes_sent, c, sizeof c), ds.grad_comm, 1e3 * ds.total_exposed_s / (double)ds.steps,
               1e3 * ds.total_comm_s / (double)ds.steps);
    fflush(stdout);
    /* Graph runs: validation and test nodes, each when the split has them. */
    const actc_log_epoch_info li = {o->model, o->batch, lm ? r->T : 0, lm || r->graph_run ? "val" : "test",
                                    r->eval ? &ev : NULL, r->test_src ? &te : NULL, r->dist.d ? &ds : NULL};
    if (r->log && actc_log_epoch(r->log, r->t, er, &li) != ACTC_OK) log_failed(r);
    return 0;
}

static int run_train(train_opts *po, flag_def *flags, int argc, char **argv, const cli_dist *dist);

static int cmd_train(int argc, char **argv)
{
    train_opts o;
    defaults(&o);
    flag_def flags[MAX_FLAGS];
    build_flags(flags, &o);
    int help;
    int rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, USAGE, ABOUT, flags);
        printf("\ncompression policies (--compress):\n%s", actc_policy_list());
        return 0;
    }
    if (rc) return 2;
    cli_dist dist;
    if ((rc = cli_dist_begin(&dist, argc, argv))) return cli_dist_end(&dist, rc);
    return cli_dist_end(&dist, run_train(&o, flags, argc, argv, &dist));
}

/* The command after its flags parsed, on this rank. */
static int run_train(train_opts *po, flag_def *flags, int argc, char **argv, const cli_dist *dist)
{
    train_opts o = *po;
    int rc;
    actc_ckpt_info info;
    memset(&info, 0, sizeof info);
    if (o.init_path && o.resume_path) {
        fprintf(stderr, "error: --init and --resume exclude each other (--resume continues a run, --init starts one "
                        "from its weights)\n");
        return 2;
    }
    if (o.resume_path && (rc = resume_recipe(&o, flags, argc, argv, &info))) return rc;
    if (o.init_path && (rc = init_model(&o, flags, &info))) return rc;
    /* The trainer's recipe for the model (a resumed run has its own), and
     * the data's: language models 16 windows a step; graph models 4 epochs
     * of 50 full-graph steps, with the papers' dropout. */
    if (!o.resume_path) model_recipe(&o, flags, argc, argv);
    const int lm = actc_model_name_takes_tokens(o.model);
    if (lm && !o.resume_path && !flag_was_set(flags, "--batch")) o.batch = 16;
    const int gr = actc_model_name_takes_graph(o.model);
    if (gr && !o.resume_path) {
        if (!flag_was_set(flags, "--epoch-steps")) o.epoch_steps = 50;
        if (!flag_was_set(flags, "--epochs")) o.epochs = 4;
        if (!flag_was_set(flags, "--dropout")) o.dropout = !strcmp(o.model, "gcn") ? 0.5f : 0.6f;
    }
    if (gr && dist->size > 1) {
        fprintf(stderr, "error: model %s trains full-batch: every step is the whole graph, which one process holds; "
                        "run it without mpirun\n", o.model);
        return 2;
    }
    if (gr && flag_was_set(flags, "--batch"))
        fprintf(stderr, "note: --batch does not apply to graph models: every step is the whole graph\n");
    if (gr) o.batch = 1;
    /* Validation windows go through the model in training-sized batches: a
     * batch of 256 windows would hold activations for 65536 tokens. */
    if (lm && !flag_was_set(flags, "--eval-batch")) o.eval_batch = o.batch;
    if ((rc = check_flags(&o, flags, lm))) return rc;
    if (o.batch < dist->size) {
        fprintf(stderr, "error: --batch %d: a batch is shared by the %d ranks, so it needs at least %d samples\n",
                o.batch, dist->size, dist->size);
        return 2;
    }
    if (!flag_was_set(flags, "--threads") && cli_dist_threads(dist)) o.threads = cli_dist_threads(dist);
    if (dist->size == 1 && (flag_was_set(flags, "--grad-comm") || flag_was_set(flags, "--bucket") || flag_was_set(flags, "--comm-timeout")))
        fprintf(stderr, "note: --grad-comm, --bucket and --comm-timeout act under mpirun; one process has nothing to exchange\n");
    if (dist->rank > 0) o.progress = "off";

    actc_set_threads(o.threads);
    if (o.deterministic && actc_set_deterministic(1) != ACTC_OK) {
        fprintf(stderr, "error: --deterministic: %s\n", actc_last_error());
        return 2;
    }
    if (o.gemm && (rc = cli_set_gemm(o.gemm, "--gemm"))) return rc;
    run_state r;
    memset(&r, 0, sizeof r);
    r.dist = *dist;
    /* The budget covers everything the run allocates through actc, data included. */
    actc_mem_set_budget(o.budget);
    rc = 1;
    if (setup(&r, &o, lm)) goto out;
    const actc_trainer_opts *to = actc_trainer_get_opts(r.t);
    const int steps = actc_source_batches(r.src);
    char pbuf[32];
    actc_model *m = r.model;
    char bdesc[48];
    if (r.graph) snprintf(bdesc, sizeof bdesc, "full-graph steps");
    else snprintf(bdesc, sizeof bdesc, "steps at batch %d", o.batch);
    printf("actc %s: model %s (%zu parameters, %s), policy %s, %d epoch(s) of %d %s, %d thread(s)%s\n",
           actc_version(), o.model, actc_model_num_params(m), actc_format_bytes(actc_model_num_params(m) * 4, pbuf, sizeof pbuf),
           to->policy, o.epochs, steps, bdesc, actc_get_threads(), o.deterministic ? ", deterministic" : "");
    cli_machine_line(stdout);
    cli_machine_warn(stderr);
    if (r.log) {
        fprintf(r.log, "{\"event\":\"start\",\"version\":\"%s\",\"model\":", actc_version());
        actc_json_string(r.log, o.model);
        fputs(",\"policy\":", r.log);
        actc_json_string(r.log, to->policy);
        fputc(',', r.log);
        cli_machine_json(r.log);
        fprintf(r.log, "}\n");
        fflush(r.log);
    }
    if (lm) {
        const actc_text_corpus *c = &r.corpus;
        const int T = r.T;
        printf("text %s: %zu bytes, %zu for training, %zu held out for validation (from byte %zu); windows of %d "
               "tokens; unigram baseline %.3f bits per byte on validation\n",
               c->source, c->n, c->train_end, c->n - c->train_end, c->train_end, T, actc_text_unigram_bpb(c));
    }
    if (dist->size > 1)
        printf("data parallel: %d ranks, %d thread(s) each; each step rank r runs rows [r B / %d, (r + 1) B / %d) of "
               "the batch of B = %d; gradients all-reduced in %d bits\n",
               dist->size, actc_get_threads(), dist->size, dist->size, o.batch, o.grad_comm);
    if (o.resume_path)
        printf("resuming %s at epoch %llu, step %llu\n", o.resume_path, (unsigned long long)actc_trainer_epoch(r.t) + 1,
               (unsigned long long)actc_trainer_steps(r.t));
    /* Files of actc 0.1 (versions 2 and 3) hold no policy state. */
    if (o.resume_path && info.version < 4 && actc_ctx_policy_learns(actc_trainer_ctx(r.t)))
        printf("note: %s is a version %u checkpoint, which holds no policy state: %s learns its state afresh\n",
               o.resume_path, (unsigned)info.version, actc_ctx_policy(actc_trainer_ctx(r.t)));
    /* Each rank's policy learnt from its own rows: a checkpoint written by
     * as many ranks gave each its own state back; otherwise every rank
     * continues from rank 0's. */
    if (o.resume_path && dist->size > 1 && actc_ctx_policy_learns(actc_trainer_ctx(r.t)) && !r.rank_states)
        printf("note: %s learns its state on each rank from that rank's rows, and %s holds the states of another "
               "number of ranks (or of one process): every rank continues from rank 0's, so this run follows the "
               "uninterrupted one closely but not bit for bit (a resume on the ranks that saved it is)\n",
               actc_ctx_policy(actc_trainer_ctx(r.t)), o.resume_path);
    fflush(stdout);

    cb_state cb = {&o, &r, {0}};
    progress_init(&cb.pg, o.progress);
    if (lm) cb.pg.unit = "tokens";
    else if (graph_spec(o.data_spec)) cb.pg.unit = "train nodes";
    while (actc_trainer_epoch(r.t) < (uint64_t)o.epochs) {
        actc_epoch_result er;
        if (!(o.max_steps && actc_trainer_steps(r.t) >= o.max_steps)) {
            actc_status s = actc_trainer_train_epoch(r.t, r.src, on_step, &cb, &er);
            progress_done(&cb.pg);
            if (s != ACTC_OK) {
                fprintf(stderr, "error: %s\n", actc_last_error());
                goto out;
            }
            if (er.finished) {
                if (epoch_report(&o, &r, lm, &er) || save(&o, &r)) goto out;
                continue;
            }
        }
        printf("stopped after step %llu (--max-steps)\n", (unsigned long long)actc_trainer_steps(r.t));
        if (save(&o, &r)) goto out;
        break;
    }
    rc = 0;
out:
    run_free(&r);
    return rc;
}

const command cmd_train_def = {"train", "train a model (progress, memory table, --log, --save/--resume)", USAGE, ABOUT,
                               build_flags, sizeof(train_opts), cmd_train};
