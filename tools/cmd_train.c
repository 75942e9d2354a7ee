/* actc train: train an image classifier on an image data set or a language
 * model on text, with progress, a per-epoch summary and memory table,
 * JSON-lines logging, checkpoints and resume.  A language model's "epoch" is
 * --epoch-steps steps on random windows (its batches are a pure function of
 * the seed and the step), followed by the validation loss. */
#include "cli.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *compress, *optim, *schedule, *log_path, *save_path, *resume_path, *progress;
    const char *data_spec, *attention;
    int epochs, batch, threads, augment, nesterov, width, log_every, eval_batch;
    int layers, heads, context, vocab, seq, epoch_steps;
    uint64_t eval_tokens;
    uint64_t seed, max_steps, warmup;
    float lr, momentum, wd, min_lr, dropout, beta1, beta2, clip, alert;
    size_t budget;
    actc_controller_opts ctl;
    data_opts data;
} train_opts;

static const char *USAGE = "actc train [--model NAME] [--compress SPEC] [--data SPEC] [--epochs N] [--batch N] ...";
static const char *ABOUT =
    "Train a model with compressed activations: an image classifier on Fashion-MNIST\n"
    "(or any IDX files), or a language model (gpt-mini, llama-mini, gpt, llama,\n"
    "gpt2-124m) on byte-level text (--data text: the King James Bible; the last 10%\n"
    "of the bytes, from Acts 22:1, are held out for validation).  Prints a progress\n"
    "bar on a terminal (plain lines otherwise) and, after every epoch, the train\n"
    "loss, test accuracy or validation loss in bits per byte, throughput and the\n"
    "memory table.";

#define MAX_FLAGS 64
static void build_flags(flag_def *f, train_opts *o)
{
    flag_def defs[] = {
        {"--model", F_STR, &o->model, "NAME", "model: mlp, resnet20/32/56, resnet18, gpt-mini, llama-mini, gpt, llama, gpt2-124m (resnet20)", 0},
        {"--data", F_STR, &o->data_spec, "SPEC", "fmnist (image models) | text (the default corpus) | text:PATH (a file or directory)", 0},
        {"--compress", F_STR, &o->compress, "SPEC", "activation compression policy (none); see actc --help", 0},
        {"--epochs", F_INT, &o->epochs, "N", "total epochs to train (1)", 0},
        {"--batch", F_INT, &o->batch, "N", "minibatch size (128; language models: 16 windows)", 0},
        {"--lr", F_FLOAT, &o->lr, "X", "peak learning rate (0.1 for sgd, 0.001 for adamw)", 0},
        {"--optim", F_STR, &o->optim, "NAME", "sgd or adamw (sgd; language models: adamw)", 0},
        {"--momentum", F_FLOAT, &o->momentum, "X", "SGD momentum (0.9)", 0},
        {"--nesterov", F_BOOL, &o->nesterov, "", "Nesterov momentum (on; --nesterov=0 turns it off)", 0},
        {"--wd", F_FLOAT, &o->wd, "X", "weight decay (5e-4 sgd, 0.01 adamw)", 0},
        {"--beta1", F_FLOAT, &o->beta1, "X", "AdamW first-moment decay (0.9)", 0},
        {"--beta2", F_FLOAT, &o->beta2, "X", "AdamW second-moment decay (0.999; language models 0.99)", 0},
        {"--clip", F_FLOAT, &o->clip, "X", "clip the gradients' global L2 norm to X, 0 = off (0; language models 1)", 0},
        {"--schedule", F_STR, &o->schedule, "SPEC", "cosine | const | step:STEPS:GAMMA (cosine)", 0},
        {"--warmup", F_U64, &o->warmup, "STEPS", "linear learning-rate warm-up steps (50)", 0},
        {"--min-lr", F_FLOAT, &o->min_lr, "X", "floor of the cosine schedule (0)", 0},
        {"--augment", F_BOOL, &o->augment, "", "random crop (pad 2) and horizontal flip", 0},
        {"--width", F_INT, &o->width, "N", "hidden width of the mlp (256), width of a transformer (the preset's)", 0},
        {"--layers", F_INT, &o->layers, "N", "transformer blocks (the preset's: 6, gpt2-124m 12)", 0},
        {"--heads", F_INT, &o->heads, "N", "attention heads (the preset's: 8, gpt2-124m 12)", 0},
        {"--context", F_INT, &o->context, "N", "positions the model holds (the preset's: 256, gpt2-124m 1024)", 0},
        {"--vocab", F_INT, &o->vocab, "N", "vocabulary size, at least 256 for bytes (the preset's)", 0},
        {"--attention", F_STR, &o->attention, "FORM", "flash (memory-efficient, default) or naive (saves the probabilities)", 0},
        {"--seq", F_INT, &o->seq, "N", "tokens per training window (the model's context)", 0},
        {"--epoch-steps", F_INT, &o->epoch_steps, "N", "language models: steps per epoch (200)", 0},
        {"--eval-tokens", F_U64, &o->eval_tokens, "N", "language models: validation tokens per evaluation, 0 = all (65536)", 0},
        {"--dropout", F_FLOAT, &o->dropout, "P", "dropout of the mlp (0)", 0},
        {"--adapt-interval", F_U64, &o->ctl.adapt_interval, "N", "gact: steps between sensitivity measurements (1000)", 0},
        {"--estimate-samples", F_INT, &o->ctl.estimate_samples, "N", "gact: samples per sensitivity pass, 0 = the batch (8)", 0},
        {"--alert", F_FLOAT, &o->alert, "F", "gact: warn when compression variance passes F x the gradient variance (0.5)", 0},
        {"--seed", F_U64, &o->seed, "N", "seed of initialisation, data order and rounding (1)", 0},
        {"--threads", F_INT, &o->threads, "N", "threads (default: all cores)", 0},
        {"--mem-budget", F_BYTES, &o->budget, "SIZE", "fail cleanly past this many bytes (e.g. 512MiB)", 0},
        {"--log", F_STR, &o->log_path, "FILE", "append JSON lines (steps and epochs) to FILE", 0},
        {"--log-every", F_INT, &o->log_every, "N", "log a step record every N steps (50)", 0},
        {"--save", F_STR, &o->save_path, "FILE", "write a checkpoint after every epoch and at the end", 0},
        {"--resume", F_STR, &o->resume_path, "FILE", "continue the run saved in FILE", 0},
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

static void defaults(train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->model = "resnet20";
    o->compress = "none";
    o->optim = "sgd";
    o->schedule = "cosine";
    o->progress = "auto";
    o->epochs = 1;
    o->batch = 128;
    o->nesterov = 1;
    o->momentum = 0.9f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->warmup = 50;
    o->seed = 1;
    o->log_every = 50;
    o->eval_batch = 256;
    o->width = 0; /* the model's own default */
    o->attention = "flash";
    o->epoch_steps = 200;
    o->eval_tokens = 65536;
    o->ctl = actc_controller_default_opts();
    o->alert = (float)o->ctl.alert_fraction;
}

static int fail(const char *what)
{
    fprintf(stderr, "error: %s: %s\n", what, actc_last_error());
    return 1;
}

/* Everything a run owns, freed in one place. */
typedef struct {
    actc_image_dataset train, test;
    int have_train, have_test;
    actc_model *model;
    actc_ctx *ctx;
    actc_controller *ctrl;
    actc_optim *opt;
    actc_loader *loader;
    actc_text_corpus corpus; /* language models */
    int have_corpus;
    lm_batch *batch;
    FILE *log;
} run_state;

static void run_free(run_state *r)
{
    actc_loader_free(r->loader);
    lm_batch_free(r->batch);
    if (r->have_corpus) actc_text_free(&r->corpus);
    actc_optim_free(r->opt);
    actc_controller_free(r->ctrl);
    actc_ctx_free(r->ctx);
    actc_model_free(r->model);
    if (r->have_train) actc_image_dataset_free(&r->train);
    if (r->have_test) actc_image_dataset_free(&r->test);
    if (r->log) fclose(r->log);
    actc_mem_set_budget(0);
}

/* The run's recipe as flags, into buf: --resume parses them before the
 * command line; eval, generate and variance read the model's shape (and a
 * language model's --seq and --data) back.  The options common to both kinds
 * of model, then each kind's own.  Returns the length snprintf wanted (>= cap
 * means it did not fit). */
static int format_settings(const train_opts *o, const actc_model_opts *mo, int lm, char *buf, size_t cap)
{
    int n = snprintf(buf, cap,
                     "--epochs=%d --batch=%d --optim=%s --lr=%.9g --momentum=%.9g --nesterov=%d --wd=%.9g "
                     "--beta1=%.9g --beta2=%.9g --clip=%.9g --schedule=%s --warmup=%llu --min-lr=%.9g --seed=%llu "
                     "--width=%d ",
                     o->epochs, o->batch, o->optim, o->lr, o->momentum, o->nesterov, o->wd, o->beta1, o->beta2,
                     o->clip, o->schedule, (unsigned long long)o->warmup, o->min_lr, (unsigned long long)o->seed,
                     mo->width);
    if (n < 0 || (size_t)n >= cap) return n < 0 ? (int)cap : n;
    size_t left = cap - (size_t)n;
    /* A --data path with a space cannot be a flag of the space-separated
     * recipe: it is left out (resume and eval then need --data again). */
    int keep_data = lm && !strchr(o->data_spec, ' ');
    int m = lm ? snprintf(buf + n, left,
                          "--layers=%d --heads=%d --context=%d --vocab=%d --attention=%s --seq=%d --epoch-steps=%d "
                          "--eval-tokens=%llu%s%s",
                          mo->n_layers, mo->n_heads, mo->context, mo->vocab, o->attention, o->seq, o->epoch_steps,
                          (unsigned long long)o->eval_tokens, keep_data ? " --data=" : "", keep_data ? o->data_spec : "")
               : snprintf(buf + n, left, "--augment=%d --dropout=%.9g --limit-train=%d", o->augment, o->dropout,
                          o->data.limit_train);
    return m < 0 ? (int)cap : n + m;
}

static int save_ckpt(const train_opts *o, run_state *r, uint64_t epoch, uint64_t batch_in_epoch,
                     uint64_t step)
{
    actc_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.model, sizeof meta.model, "%s", o->model);
    snprintf(meta.optim, sizeof meta.optim, "%s", o->optim);
    snprintf(meta.policy, sizeof meta.policy, "%s", actc_ctx_policy(r->ctx));
    meta.epoch = epoch;
    meta.batch_in_epoch = batch_in_epoch;
    meta.step = step;
    meta.seed = o->seed;
    meta.batch = o->batch;
    const actc_model_opts *mo = actc_model_get_opts(r->model);
    if (!r->have_corpus) {
        meta.input[0] = r->train.c;
        meta.input[1] = r->train.h;
        meta.input[2] = r->train.w;
        meta.num_classes = mo->num_classes;
    }
    /* Its length was checked before training started. */
    format_settings(o, mo, r->have_corpus, meta.settings, sizeof meta.settings);
    if (actc_checkpoint_save(o->save_path, r->model, r->opt, &meta) != ACTC_OK) return fail("saving checkpoint");
    return 0;
}

int cmd_train(int argc, char **argv)
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
        printf("\n--resume takes the recipe (epochs, batch, optimizer and its settings, schedule,\n"
               "seed, model, policy) from the checkpoint; flags given with it override them.\n");
        return 0;
    }
    if (rc) return 2;

    actc_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    char settings_buf[sizeof meta.settings];
    if (o.resume_path) {
        if (actc_checkpoint_peek(o.resume_path, &meta) != ACTC_OK) return fail("--resume");
        if (flag_was_set(flags, "--model") && strcmp(o.model, meta.model)) {
            fprintf(stderr, "error: --resume %s holds model %s, but --model %s was given\n", o.resume_path,
                    meta.model, o.model);
            return 2;
        }
        /* Defaults, then the checkpoint's recipe, then the command line. */
        defaults(&o);
        flag_def saved[MAX_FLAGS];
        build_flags(saved, &o);
        char *tok[64];
        int nt = 2;
        /* String options (--optim, --schedule) point into settings_buf: it
         * lives as long as the run. */
        snprintf(settings_buf, sizeof settings_buf, "%s", meta.settings);
        tok[0] = tok[1] = "";
        for (char *t = strtok(settings_buf, " "); t && nt < 64; t = strtok(NULL, " ")) tok[nt++] = t;
        if (flags_parse(saved, nt, tok, 2, &help)) {
            fprintf(stderr, "error: --resume %s: unreadable run settings '%s'\n", o.resume_path, meta.settings);
            return 1;
        }
        o.model = meta.model;
        o.compress = meta.policy;
        build_flags(flags, &o);
        flags_parse(flags, argc, argv, 2, &help); /* the command line wins; it parsed once already */
        if (meta.epoch >= (uint64_t)o.epochs) {
            fprintf(stderr, "error: the run in %s already completed %llu of its %d epoch(s); pass --epochs N "
                            "with N > %llu to train further\n",
                    o.resume_path, (unsigned long long)meta.epoch, o.epochs, (unsigned long long)meta.epoch);
            return 2;
        }
    }
    /* Language models train on text with AdamW, 16 windows a step, unless
     * told otherwise (a resumed run has its recipe already). */
    const int lm = actc_model_name_takes_tokens(o.model);
    if (lm && !o.resume_path) {
        if (!flag_was_set(flags, "--optim")) o.optim = "adamw";
        if (!flag_was_set(flags, "--batch")) o.batch = 16;
        /* Short runs on few tokens per step (nanoGPT's character-level set-up). */
        if (!flag_was_set(flags, "--beta2")) o.beta2 = 0.99f;
        if (!flag_was_set(flags, "--clip")) o.clip = 1.0f;
    }
    /* Validation windows go through the model in training-sized batches: a
     * batch of 256 windows would hold activations for 65536 tokens. */
    if (lm && !flag_was_set(flags, "--eval-batch")) o.eval_batch = o.batch;
    if (!o.data_spec) o.data_spec = lm ? "text" : "fmnist";
    if (lm != text_spec(o.data_spec) || (!lm && strcmp(o.data_spec, "fmnist"))) {
        if (lm) fprintf(stderr, "error: --data %s: model %s is a language model: use --data text or text:PATH\n", o.data_spec, o.model);
        else if (text_spec(o.data_spec))
            fprintf(stderr, "error: --data %s: model %s classifies images: use a language model (gpt-mini, llama-mini, gpt, llama, gpt2-124m) for text\n", o.data_spec, o.model);
        else fprintf(stderr, "error: unknown --data '%s' (fmnist, text or text:PATH)\n", o.data_spec);
        return 2;
    }
    if (strcmp(o.attention, "flash") && strcmp(o.attention, "naive")) {
        fprintf(stderr, "error: --attention must be flash or naive, not '%s'\n", o.attention);
        return 2;
    }
    if (o.layers < 0 || o.heads < 0 || o.context < 0 || o.vocab < 0 || o.seq < 0 || o.width < 0 || o.epoch_steps < 1) {
        fprintf(stderr, "error: --layers, --heads, --context, --vocab, --seq and --width must not be negative, --epoch-steps at least 1\n");
        return 2;
    }
    if (lm && o.vocab && o.vocab < 256) {
        fprintf(stderr, "error: --vocab %d: byte-level text needs a vocabulary of at least 256\n", o.vocab);
        return 2;
    }
    int is_adamw = !strcmp(o.optim, "adamw");
    if (!is_adamw && strcmp(o.optim, "sgd")) {
        fprintf(stderr, "error: unknown --optim '%s' (sgd or adamw)\n", o.optim);
        return 2;
    }
    if (!o.resume_path || !strstr(meta.settings, "--lr=")) {
        if (!flag_was_set(flags, "--lr")) o.lr = is_adamw ? 1e-3f : 0.1f;
        if (!flag_was_set(flags, "--wd")) o.wd = is_adamw ? 0.01f : 5e-4f;
    }
    /* Nesterov needs momentum: with --momentum 0 it is off unless asked for. */
    if (o.momentum == 0.0f && !flag_was_set(flags, "--nesterov")) o.nesterov = 0;
    if (o.epochs < 1 || o.batch < 1 || o.eval_batch < 1 || o.log_every < 1) {
        fprintf(stderr, "error: --epochs, --batch, --eval-batch and --log-every must be at least 1\n");
        return 2;
    }
    if (o.threads < 0 || o.data.limit_train < 0 || o.data.limit_test < 0) {
        fprintf(stderr, "error: --threads, --limit-train and --limit-test must not be negative\n");
        return 2;
    }
    if (!(o.lr > 0) || !isfinite(o.lr) || !(o.min_lr >= 0) || !isfinite(o.min_lr) || !(o.wd >= 0) ||
        !(o.momentum >= 0 && o.momentum < 1) || !(o.dropout >= 0 && o.dropout < 1) || !(o.beta1 >= 0 && o.beta1 < 1) ||
        !(o.beta2 >= 0 && o.beta2 < 1) || !(o.clip >= 0) || !isfinite(o.clip)) {
        fprintf(stderr, "error: need --lr > 0, --min-lr >= 0, --wd >= 0, 0 <= --momentum < 1, 0 <= --dropout < 1, "
                        "0 <= --beta1, --beta2 < 1, --clip >= 0\n");
        return 2;
    }
    if (flag_was_set(flags, "--mem-budget") && o.budget == 0) {
        fprintf(stderr, "error: --mem-budget must be positive (leave it out for no limit)\n");
        return 2;
    }
    if (strcmp(o.progress, "auto") && strcmp(o.progress, "on") && strcmp(o.progress, "off")) {
        fprintf(stderr, "error: --progress must be auto, on or off, not '%s'\n", o.progress);
        return 2;
    }
    actc_lr_schedule sched;
    if (actc_lr_parse(o.schedule, &sched) != ACTC_OK) {
        fprintf(stderr, "error: --schedule: %s\n", actc_last_error());
        return 2;
    }
    {
        /* Check the policy spec before spending time on the data. */
        actc_ctx *probe = actc_ctx_new();
        actc_status ps = probe ? actc_ctx_set_policy(probe, o.compress) : actc_last_status();
        actc_ctx_free(probe);
        if (ps != ACTC_OK) {
            fail("--compress");
            return 2;
        }
    }

    actc_set_threads(o.threads);
    run_state r;
    memset(&r, 0, sizeof r);
    /* The budget covers everything the run allocates through actc, data included. */
    actc_mem_set_budget(o.budget);
    rc = 1;
    actc_model_opts mo = actc_model_default_opts();
    if (lm) {
        if (text_open(o.data_spec, &r.corpus)) goto out;
        r.have_corpus = 1;
        mo.n_layers = o.layers;
        mo.n_heads = o.heads;
        mo.context = o.context;
        mo.vocab = o.vocab;
        mo.attention = !strcmp(o.attention, "naive") ? ACTC_ATTN_NAIVE : ACTC_ATTN_FLASH;
    } else {
        if (data_load(&o.data, &r.train, &r.test)) goto out;
        r.have_train = r.have_test = 1;
    }
    if (!lm && (r.test.c != r.train.c || r.test.h != r.train.h || r.test.w != r.train.w)) {
        fprintf(stderr, "error: test images are %dx%dx%d but training images %dx%dx%d\n", r.test.c, r.test.h,
                r.test.w, r.train.c, r.train.h, r.train.w);
        goto out;
    }
    mo.in_channels = r.train.c;
    mo.in_h = r.train.h;
    mo.in_w = r.train.w;
    mo.num_classes = lm ? 0 : r.train.num_classes > r.test.num_classes ? r.train.num_classes : r.test.num_classes;
    mo.width = o.width;
    mo.dropout = o.dropout;
    mo.seed = o.seed;
    if (actc_model_create(o.model, &mo, &r.model) != ACTC_OK) { fail("--model"); goto out; }
    if (!(r.ctx = actc_ctx_new())) { fail("engine"); goto out; }
    if (actc_ctx_set_policy(r.ctx, o.compress) != ACTC_OK) { fail("--compress"); goto out; }
    actc_ctx_set_seed(r.ctx, o.seed);
    actc_tensor **params;
    int np = actc_model_params(r.model, &params);
    r.opt = is_adamw ? actc_adamw_new(params, np, o.beta1, o.beta2, 1e-8f, o.wd)
                     : actc_sgd_new(params, np, o.momentum, o.nesterov, o.wd);
    if (!r.opt) { fail("optimizer"); goto out; }
    o.ctl.alert_fraction = o.alert;
    if (!(r.ctrl = controller_for(r.ctx, r.model, &o.ctl))) goto out;
    if (o.resume_path) {
        if (actc_optim_init_state(r.opt) != ACTC_OK) { fail("optimizer"); goto out; }
        if (actc_checkpoint_load(o.resume_path, r.model, r.opt, &meta) != ACTC_OK) { fail("--resume"); goto out; }
    }
    const int context = actc_model_get_opts(r.model)->context, T = o.seq ? o.seq : context;
    int steps_per_epoch;
    if (lm) {
        if (T > context) {
            fprintf(stderr, "error: --seq %d is over the context of model %s (%d positions); pass --context to build a "
                            "longer one\n", T, o.model, context);
            goto out;
        }
        if (text_check_windows(&r.corpus, T)) goto out;
        if (!(r.batch = lm_batch_new(o.batch, T))) { fail("batch"); goto out; }
        steps_per_epoch = o.epoch_steps;
    } else {
        actc_loader_opts lo = {FMNIST_MEAN, FMNIST_STD, o.augment ? 2 : 0, o.augment, 1, o.seed};
        if (!(r.loader = actc_loader_new(&r.train, o.batch, 1, &lo))) { fail("data loader"); goto out; }
        steps_per_epoch = actc_loader_num_batches(r.loader);
        if (steps_per_epoch < 1) {
            fprintf(stderr, "error: the training set (%d images) is smaller than one batch of %d\n", r.train.n, o.batch);
            goto out;
        }
    }
    if (o.save_path) {
        /* Find out now, not after the first epoch, if the recipe cannot be saved. */
        char probe[sizeof meta.settings];
        int need = format_settings(&o, actc_model_get_opts(r.model), lm, probe, sizeof probe);
        if (need >= (int)sizeof probe) {
            fprintf(stderr, "error: --save: the run's settings take %d bytes, over the checkpoint's %zu; shorten "
                            "--schedule or --data\n", need, sizeof probe - 1);
            goto out;
        }
    }
    if (o.log_path && !(r.log = fopen(o.log_path, "a"))) {
        fprintf(stderr, "error: --log: cannot open %s for appending\n", o.log_path);
        goto out;
    }
    sched.base_lr = o.lr;
    sched.min_lr = o.min_lr;
    sched.warmup_steps = o.warmup;
    sched.total_steps = (uint64_t)o.epochs * (uint64_t)steps_per_epoch;

    char pbuf[32];
    printf("actc %s: model %s (%zu parameters, %s), policy %s, %d epoch(s) of %d steps at batch %d, %d thread(s)\n",
           ACTC_VERSION, o.model, actc_model_num_params(r.model),
           actc_format_bytes(actc_model_num_params(r.model) * 4, pbuf, sizeof pbuf), actc_ctx_policy(r.ctx),
           o.epochs, steps_per_epoch, o.batch, actc_get_threads());
    if (lm) {
        size_t nv = r.corpus.n - r.corpus.train_end;
        printf("text %s: %zu bytes, %zu for training, %zu held out for validation (from byte %zu); windows of %d "
               "tokens; unigram baseline %.3f bits per byte on validation\n",
               r.corpus.source, r.corpus.n, r.corpus.train_end, nv, r.corpus.train_end, T, lm_unigram_bpb(&r.corpus));
    }
    if (o.resume_path)
        printf("resuming %s at epoch %llu, step %llu\n", o.resume_path, (unsigned long long)meta.epoch + 1,
               (unsigned long long)meta.step);
    fflush(stdout);

    uint64_t step = meta.step;
    int start_epoch = (int)meta.epoch, start_batch = (int)meta.batch_in_epoch;
    int stopped = 0;
    progress pg;
    progress_init(&pg, o.progress);
    if (lm) pg.unit = "tokens";
    for (int epoch = start_epoch; epoch < o.epochs && !stopped; epoch++) {
        actc_mem_reset_peak();
        actc_store_reset_peak(r.ctx);
        double t0 = now_seconds(), loss_sum = 0;
        long correct = 0, seen = 0;
        int b;
        for (b = (epoch == start_epoch ? start_batch : 0); b < steps_per_epoch; b++) {
            if (o.max_steps && step >= o.max_steps) { stopped = 1; break; }
            actc_ctx_set_step(r.ctx, step);
            float lr = actc_lr_at(&sched, step);
            step_result sr;
            actc_status s;
            if (lm) {
                s = lm_train_step(r.model, r.ctx, r.ctrl, r.opt, &r.corpus, r.batch, o.seed, step, lr, o.clip, &sr);
            } else {
                actc_tensor *x;
                const int32_t *labels;
                int bs;
                if (actc_loader_get(r.loader, epoch, b, &x, &labels, &bs) != ACTC_OK) { fail("data"); goto out; }
                s = train_step(r.model, r.ctx, r.ctrl, r.opt, x, labels, lr, o.clip, &sr);
                actc_tensor_release(x);
            }
            if (s != ACTC_OK) {
                fprintf(stderr, "%serror: training step %llu (epoch %d, batch %d): %s\n", pg.tty == 1 ? "\n" : "",
                        (unsigned long long)step, epoch + 1, b, actc_last_error());
                goto out;
            }
            report_adaptation(r.ctrl, r.log, step, pg.tty == 1);
            step++;
            loss_sum += sr.loss * sr.n;
            correct += sr.correct;
            seen += sr.n;
            double sps = seen / (now_seconds() - t0);
            progress_update(&pg, epoch + 1, o.epochs, b + 1, steps_per_epoch, loss_sum / seen,
                            (double)correct / seen, sps);
            if (r.log && (step % (uint64_t)o.log_every == 0)) {
                fprintf(r.log, "{\"event\":\"step\",\"epoch\":%d,\"step\":%llu,\"loss\":%.9g,\"lr\":%.6g,\"%s_per_s\":%.2f}\n",
                        epoch + 1, (unsigned long long)step, sr.loss, lr, pg.unit, sps);
                fflush(r.log);
            }
        }
        progress_done(&pg);
        double train_time = now_seconds() - t0;
        if (stopped) {
            printf("stopped after step %llu (--max-steps)\n", (unsigned long long)step);
            if (o.save_path && save_ckpt(&o, &r, (uint64_t)epoch, (uint64_t)b, step)) goto out;
            break;
        }
        actc_mem_stats ms;
        actc_store_stats ss;
        actc_mem_get_stats(&ms);
        actc_store_get_stats(r.ctx, &ss);
        double acc = 0, tloss = 0;
        double t_eval = now_seconds();
        actc_status es = lm ? lm_evaluate(r.model, r.ctx, &r.corpus, T, (long)o.eval_tokens, o.eval_batch, &tloss, &acc)
                            : evaluate(r.model, r.ctx, &r.test, o.eval_batch, &acc, &tloss);
        if (es != ACTC_OK) { fail("evaluation"); goto out; }
        t_eval = now_seconds() - t_eval;
        double sps = seen ? seen / train_time : 0, train_loss = seen ? loss_sum / seen : 0;
        if (lm)
            printf("epoch %d/%d: train loss %.4f (%.3f bpb), validation loss %.4f = %.3f bits per byte (next-byte acc "
                   "%.1f%%, %.1f s), %.0f tokens/s, %.1f s\n",
                   epoch + 1, o.epochs, train_loss, train_loss / M_LN2, tloss, tloss / M_LN2, 100 * acc, t_eval, sps,
                   train_time);
        else
            printf("epoch %d/%d: train loss %.4f (acc %.2f%%), test acc %.2f%% (loss %.4f), %.1f samples/s, %.1f s\n",
                   epoch + 1, o.epochs, train_loss, seen ? 100.0 * correct / seen : 0, 100 * acc, tloss, sps,
                   train_time);
        report_memory(stdout, &ms, &ss);
        fflush(stdout);
        if (r.log) {
            fprintf(r.log, "{\"event\":\"epoch\",\"epoch\":%d,\"step\":%llu,\"model\":\"%s\",\"policy\":\"%s\",\"batch\":%d,"
                    "\"train_loss\":%.6f,\"train_acc\":%.6f,\"%s_acc\":%.6f,\"%s_loss\":%.6f,",
                    epoch + 1, (unsigned long long)step, o.model, actc_ctx_policy(r.ctx), o.batch, train_loss,
                    seen ? (double)correct / seen : 0, lm ? "val" : "test", acc, lm ? "val" : "test", tloss);
            if (lm) fprintf(r.log, "\"val_bpb\":%.6f,\"seq\":%d,", tloss / M_LN2, T);
            fprintf(r.log, "\"%s_per_s\":%.2f,\"seconds\":%.2f,\"memory\":", pg.unit, sps, train_time);
            report_memory_json(r.log, &ms, &ss);
            fprintf(r.log, "}\n");
            fflush(r.log);
        }
        if (o.save_path && save_ckpt(&o, &r, (uint64_t)epoch + 1, 0, step)) goto out;
    }
    rc = 0;
out:
    run_free(&r);
    return rc;
}
