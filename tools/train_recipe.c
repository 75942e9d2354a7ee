/* Where actc train's options come from: its defaults, the model family's
 * recipe (actc_trainer_opts_for_model), or the checkpoint it resumes (the
 * trainer's options and the model's from their records, the run's own
 * recipe from its field, or from the note of an older file:
 * cli_recipe_from_checkpoint), and the flags given with them, which win.
 * And the way back: the trainer's options and the run's recipe from the
 * flags. */
#include "train_cmd.h"
#include <string.h>

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

void train_defaults(train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->model = "resnet20";
    o->compress = "none";
    o->progress = "auto";
    o->epochs = 1;
    o->batch = 128;
    o->grad_comm = 32;
    o->comm_timeout = (int)ACTC_DIST_TIMEOUT_S;
    o->pipeline = 1;
    o->pipe_schedule = "1f1b";
    o->log_every = 50;
    o->eval_batch = 256;
    o->attention = "flash";
    o->epoch_steps = 200;
    o->eval_tokens = 65536;
    /* The trainer's options: an image classifier's recipe until the model
     * is known (train_model_recipe). */
    const actc_trainer_opts t = actc_trainer_opts_for_model(NULL);
    apply_trainer(o, &t, t.optim);
}

void train_run_recipe(const train_opts *o, actc_run_recipe *r)
{
    memset(r, 0, sizeof *r);
    r->epochs = o->epochs;
    r->batch = o->batch;
    r->seq = o->seq;
    r->epoch_steps = o->epoch_steps;
    r->eval_tokens = o->eval_tokens;
    r->augment = o->augment;
    r->limit_train = o->data.limit_train;
    snprintf(r->data, sizeof r->data, "%s", o->data_spec ? o->data_spec : "");
    snprintf(r->split, sizeof r->split, "%s", o->split ? o->split : "");
    /* The settings that decide a run's last bits beyond its recipe, so that
     * a resumed run keeps them: the deterministic mode, a dense-product
     * backend forced (--gemm or ACTC_GEMM, set before the recipe is made;
     * auto is not kept: it resolves again on the machine that resumes), and
     * under mpirun the gradients' wire (--grad-comm 8 rounds them, blocks
     * cut by --bucket).  A flag given with --resume still wins. */
    r->deterministic = o->deterministic;
    const char *g = actc_get_gemm_backend();
    if (!strcmp(g, "dnnl") || !strcmp(g, "openblas")) snprintf(r->gemm, sizeof r->gemm, "%s", g);
    r->grad_comm = o->grad_comm;
    r->bucket = o->bucket;
}

/* A run recipe into the flags' fields, its strings kept in o->saved (an
 * empty one leaves its flag unset). */
static void apply_recipe(train_opts *o, const actc_run_recipe *r)
{
    o->saved = *r;
    o->epochs = r->epochs;
    o->batch = r->batch;
    o->seq = r->seq;
    o->epoch_steps = r->epoch_steps;
    o->eval_tokens = r->eval_tokens;
    o->augment = r->augment;
    o->data.limit_train = r->limit_train;
    if (o->saved.data[0]) o->data_spec = o->saved.data;
    if (o->saved.split[0]) o->split = o->saved.split;
    o->deterministic = r->deterministic;
    if (o->saved.gemm[0]) o->gemm = o->saved.gemm;
    o->grad_comm = r->grad_comm;
    o->bucket = r->bucket;
}

/* The model and the trainer's options a checkpoint records (a file of
 * actc 0.1 has no trainer record: the library reads the options from its
 * settings text). */
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
    if (info->has_trainer || info->version < 4)
        apply_trainer(o, &info->trainer, info->optim[0] ? info->optim : "sgd");
}

void train_model_recipe(train_opts *o, flag_def *flags, int argc, char **argv)
{
    char model[sizeof o->model_buf];
    int help;
    snprintf(model, sizeof model, "%s", o->model);
    train_defaults(o);
    train_build_flags(flags, o);
    memcpy(o->model_buf, model, sizeof model);
    o->model = o->model_buf;
    const actc_trainer_opts t = actc_trainer_opts_for_model(model);
    apply_trainer(o, &t, t.optim);
    flags_clear_set(flags);
    flags_parse(flags, argc, argv, 2, &help); /* it parsed once already */
}

int train_init_model(train_opts *o, flag_def *flags, actc_ckpt_info *info)
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

int train_resume_recipe(train_opts *o, flag_def *flags, int argc, char **argv, actc_ckpt_info *info)
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
    train_defaults(o);
    train_build_flags(flags, o);
    apply_checkpoint(o, info);
    /* The run's own recipe: the checkpoint's over the defaults. */
    actc_run_recipe rec;
    train_run_recipe(o, &rec);
    if (cli_recipe_from_checkpoint(info, &rec)) {
        fprintf(stderr, "error: --resume %s: unreadable run settings '%s'\n", path, info->note);
        return 1;
    }
    apply_recipe(o, &rec);
    flags_parse(flags, argc, argv, 2, &help); /* the command line wins; it parsed once already */
    if (info->epoch >= (uint64_t)o->epochs) {
        fprintf(stderr, "error: the run in %s already completed %llu of its %d epoch(s); pass --epochs N with N > "
                        "%llu to train further\n",
                path, (unsigned long long)info->epoch, o->epochs, (unsigned long long)info->epoch);
        return 2;
    }
    return 0;
}

actc_status train_trainer_opts(const train_opts *o, int steps, actc_trainer_opts *out)
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
