/* actc train: train an image classifier on an image data set or a language
 * model on text with the library's trainer, with progress, a per-epoch
 * summary and memory table, JSON-lines logging, checkpoints and resume.  A
 * language model's "epoch" is --epoch-steps steps on random windows (its
 * batches are a pure function of the seed and the step), followed by the
 * validation loss.
 *
 * What the command adds to the trainer: the flags, the data, the printing,
 * and its own recipe (epochs, batch, data and window options), which its
 * checkpoints keep (actc_trainer_set_recipe), so that --resume continues
 * with the same recipe.  The trainer's recipe for a model family, its
 * checks and the log's records are the library's
 * (actc_trainer_opts_for_model, actc_trainer_check_opts, actc_log_*).
 *
 * This file holds the flags and the run's course; train_cmd.h lists the
 * files that do the rest. */
#include "train_cmd.h"
#include <string.h>

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

/* --pipeline and --pipeline-schedule against the model, the ranks and the
 * other flags: the same verdict on every rank.  0, or exit status 2. */
static int pipeline_checks(const train_opts *o, int lm, const cli_dist *dist)
{
    if (strcmp(o->pipe_schedule, "1f1b") && strcmp(o->pipe_schedule, "gpipe")) {
        fprintf(stderr, "error: --pipeline-schedule %s: 1f1b or gpipe\n", o->pipe_schedule);
        return 2;
    }
    if (o->pipeline == 1) return 0;
    if (o->pipeline < 1 || o->pipeline > ACTC_MAX_STAGES) {
        fprintf(stderr, "error: --pipeline %d: from 1 to %d stages\n", o->pipeline, ACTC_MAX_STAGES);
        return 2;
    }
    if (!lm) {
        fprintf(stderr, "error: --pipeline %d: pipeline stages split a transformer (gpt-mini, llama-mini, gpt, llama, "
                        "gpt2-124m), not model %s\n", o->pipeline, o->model);
        return 2;
    }
    if (dist->size % o->pipeline) {
        fprintf(stderr, "error: --pipeline %d: the %d process(es) %s must be a multiple of the stages (the rest is "
                        "data parallelism)%s\n", o->pipeline, dist->size, dist->size > 1 ? "mpirun started" : "running",
                dist->size > 1 ? "" : ": start it with mpirun -np N");
        return 2;
    }
    if (o->accum < o->pipeline) {
        fprintf(stderr, "error: --accum %d: a pipeline of %d stages needs at least %d micro-batches a step (--accum "
                        "%d or more)\n", o->accum, o->pipeline, o->pipeline, o->pipeline);
        return 2;
    }
    return 0;
}

void train_build_flags(flag_def *f, void *opts)
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
        {"--pipeline", F_INT, &o->pipeline, "P", "under mpirun -np N (N a multiple of P): transformers in P pipeline stages of contiguous blocks, balanced by parameters, the other factor N / P data parallelism; each step's --accum micro-batches (at least P) flow through the stages (1)", 0},
        {"--pipeline-schedule", F_STR, &o->pipe_schedule, "NAME", "1f1b (one forward, one backward: stage s holds P - s micro-batches) or gpipe (all forwards, then all backwards: every stage holds --accum) (1f1b)", 0},
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
        {"--adapt-interval", F_U64, &o->ctl.adapt_interval, "N", "gact: steps between sensitivity measurements (1000; also at its halvings in the first)", 0},
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

static int save(const train_opts *o, run_state *r)
{
    if (!o->save_path) return 0;
    actc_status s = r->pipe     ? actc_pipe_save(r->pipe, o->save_path)
                    : r->dist.d ? actc_dist_save(r->dist.d, o->save_path)
                                : actc_trainer_save(r->t, o->save_path);
    if (s != ACTC_OK) return fail("saving checkpoint");
    return 0;
}

static int run_train(train_opts *po, flag_def *flags, int argc, char **argv, const cli_dist *dist);

static int cmd_train(int argc, char **argv)
{
    train_opts o;
    train_defaults(&o);
    flag_def flags[MAX_FLAGS];
    train_build_flags(flags, &o);
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
    if (o.resume_path && (rc = train_resume_recipe(&o, flags, argc, argv, &info))) return rc;
    if (o.init_path && (rc = train_init_model(&o, flags, &info))) return rc;
    /* The trainer's recipe for the model (a resumed run has its own), and
     * the data's: language models 16 windows a step; graph models 4 epochs
     * of 50 full-graph steps, with the papers' dropout. */
    if (!o.resume_path) train_model_recipe(&o, flags, argc, argv);
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
    if ((rc = train_check_flags(&o, flags, lm))) return rc;
    if ((rc = pipeline_checks(&o, lm, dist))) return rc;
    const int replicas = dist->size / o.pipeline;
    if (o.batch < replicas) {
        fprintf(stderr, "error: --batch %d: a batch is shared by the %d replicas, so it needs at least %d samples\n",
                o.batch, replicas, replicas);
        return 2;
    }
    /* The stages' schedules (and DBCA-PP's bits) count --accum equal
     * micro-batches in each replica's share. */
    if (o.pipeline > 1 && (o.batch % replicas || (o.batch / replicas) % o.accum)) {
        fprintf(stderr, "error: --batch %d: each of the %d replica(s) of the %d stages runs its share as --accum %d "
                        "equal micro-batches, so the batch must be a multiple of %d\n",
                o.batch, replicas, o.pipeline, o.accum, replicas * o.accum);
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
    if (train_setup(&r, &o, lm)) goto out;
    train_print_start(&o, &r, lm, dist, &info);

    cb_state cb = {&o, &r, {0}};
    progress_init(&cb.pg, o.progress);
    if (lm) cb.pg.unit = "tokens";
    else if (graph_spec(o.data_spec)) cb.pg.unit = "train nodes";
    while (actc_trainer_epoch(r.t) < (uint64_t)o.epochs) {
        actc_epoch_result er;
        if (!(o.max_steps && actc_trainer_steps(r.t) >= o.max_steps)) {
            actc_status s = actc_trainer_train_epoch(r.t, r.src, train_on_step, &cb, &er);
            progress_done(&cb.pg);
            if (s != ACTC_OK) {
                fprintf(stderr, "error: %s\n", actc_last_error());
                goto out;
            }
            if (er.finished) {
                if (train_epoch_report(&o, &r, lm, &er) || save(&o, &r)) goto out;
                continue;
            }
        }
        printf("stopped after step %llu (--max-steps)\n", (unsigned long long)actc_trainer_steps(r.t));
        if (save(&o, &r)) goto out;
        break;
    }
    rc = 0;
out:
    train_free(&r);
    return rc;
}

const command cmd_train_def = {"train", "train a model (progress, memory table, --log, --save/--resume)", USAGE, ABOUT,
                               train_build_flags, sizeof(train_opts), cmd_train};
