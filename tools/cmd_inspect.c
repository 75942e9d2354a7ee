/* actc inspect: what a gact policy does to a model.  Builds the model, takes
 * one real batch (Fashion-MNIST for image models, the text corpus for
 * language models), lets the controller measure every saved tensor's
 * sensitivity and allocate bits, runs the step, and prints per tensor the
 * operator that saved it, its shape, c_l, the bits chosen and its stored
 * bytes. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *compress, *log_path, *data_spec;
    int batch, threads, seq, layers, width, heads, context;
    uint64_t seed;
    actc_controller_opts co;
    data_opts d;
} inspect_opts;

static const char USAGE[] = "actc inspect --compress gact:SPEC [--model NAME] [--batch N]";
static const char ABOUT[] = "Measure the sensitivity of every tensor the model saves for backward on one\n"
                           "real batch, allocate bits as the policy does, and print the table: operator,\n"
                           "scope, shape, sensitivity c_l, bits and stored bytes per tensor.";

static void build_flags(flag_def *f, void *opts)
{
    inspect_opts *o = opts;
    flag_def defs[] = {
        {"--model", F_STR, &o->model, "NAME", "model (resnet20)", 0},
        {"--compress", F_STR, &o->compress, "SPEC", "a gact policy: gact:4, gact:3, gact:2, gact:fix4, gact:CB1 ... (required)", 0},
        {"--batch", F_INT, &o->batch, "N", "batch size (image models 128, language models 16)", 0},
        {"--seq", F_INT, &o->seq, "N", "tokens per window of a language model (its context)", 0},
        {"--estimate-samples", F_INT, &o->co.estimate_samples, "N", "samples per sensitivity pass, 0 = the batch (8)", 0},
        {"--data", F_STR, &o->data_spec, "SPEC", "fmnist | text | text:PATH (by the model)", 0},
        {"--data-dir", F_STR, &o->d.data_dir, "DIR", "directory with the Fashion-MNIST IDX files", 0},
        {"--train-images", F_STR, &o->d.train_images, "FILE", "IDX image file (instead of --data-dir)", 0},
        {"--train-labels", F_STR, &o->d.train_labels, "FILE", "IDX label file", 0},
        {"--layers", F_INT, &o->layers, "N", "transformer blocks (the preset's)", 0},
        {"--width", F_INT, &o->width, "N", "transformer width (the preset's)", 0},
        {"--heads", F_INT, &o->heads, "N", "attention heads (the preset's)", 0},
        {"--context", F_INT, &o->context, "N", "positions of a language model (the preset's)", 0},
        {"--log", F_STR, &o->log_path, "FILE", "append the table as a JSON line to FILE", 0},
        {"--seed", F_U64, &o->seed, "N", "seed of initialisation, batch and rounding (1)", 0},
        {"--threads", F_INT, &o->threads, "N", "threads (default: all cores)", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    memcpy(f, defs, sizeof defs);
}

static int cmd_inspect(int argc, char **argv)
{
    inspect_opts o;
    memset(&o, 0, sizeof o);
    o.model = "resnet20";
    o.seed = 1;
    o.co = actc_controller_default_opts();
    flag_def flags[MAX_FLAGS];
    build_flags(flags, &o);
    int help, rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, USAGE, ABOUT, flags);
        return 0;
    }
    if (rc) return 2;
    if (!o.compress || strncmp(o.compress, "gact:", 5)) {
        fprintf(stderr, "error: --compress must be a gact policy (gact:4, gact:fix4, ...): inspect shows what GACT "
                        "measures and allocates\n");
        return 2;
    }
    if (o.batch < 0 || o.seq < 0 || o.co.estimate_samples < 0 || o.layers < 0 || o.width < 0 || o.heads < 0 ||
        o.context < 0 || o.threads < 0) {
        fprintf(stderr, "error: --batch, --seq, --estimate-samples, --threads and the model sizes must not be negative\n");
        return 2;
    }
    actc_set_threads(o.threads);
    rc = 1;
    actc_model *m = NULL;
    actc_trainer *t = NULL;
    actc_image_dataset train = {0};
    int have_train = 0, have_corpus = 0;
    actc_text_corpus corpus;
    actc_source *src = NULL;
    FILE *log = NULL;
    actc_model_opts mo = actc_model_default_opts();
    mo.seed = o.seed;
    mo.n_layers = o.layers;
    mo.width = o.width;
    mo.n_heads = o.heads;
    mo.context = o.context;
    if (actc_model_create(o.model, &mo, &m) != ACTC_OK) {
        fail("--model");
        return 2;
    }
    actc_trainer_opts to = actc_trainer_default_opts();
    to.policy = o.compress;
    to.seed = o.seed;
    to.controller = o.co;
    to.controller.adapt_interval = 1;
    if (actc_trainer_new(m, &to, &t) != ACTC_OK) {
        fail("--compress");
        rc = 2;
        goto out;
    }
    if (o.log_path && !(log = fopen(o.log_path, "a"))) {
        fprintf(stderr, "error: --log %s: cannot open for appending\n", o.log_path);
        goto out;
    }
    int samples;
    actc_status s;
    if (actc_model_takes_tokens(m)) {
        const int T = o.seq ? o.seq : actc_model_get_opts(m)->context;
        if (text_open(o.data_spec ? o.data_spec : "text", &corpus)) goto out;
        have_corpus = 1;
        samples = o.batch ? o.batch : 16;
        s = actc_source_text(&corpus, samples, T, o.seed, 1, &src);
    } else {
        if (data_load(&o.d, &train, NULL)) goto out;
        have_train = 1;
        actc_loader_opts lopt = {FMNIST_MEAN, FMNIST_STD, 0, 0, 1, o.seed};
        samples = o.batch ? o.batch : 128;
        s = actc_source_images(&train, samples, 1, &lopt, &src);
    }
    actc_batch b;
    if (s != ACTC_OK || actc_source_get(src, 0, 0, 0, &b) != ACTC_OK) {
        fail("data");
        goto out;
    }
    if (actc_trainer_backward(t, &b, NULL) != ACTC_OK) {
        fprintf(stderr, "error: the step failed: %s\n", actc_last_error());
        goto out;
    }
    const actc_controller *ctrl = actc_trainer_controller(t);
    printf("inspect: model %s, policy %s, batch %d, sensitivity passes on %d sample(s) at 4 bits\n", o.model,
           actc_trainer_get_opts(t)->policy, samples,
           o.co.estimate_samples && o.co.estimate_samples < samples ? o.co.estimate_samples : samples);
    report_tensors(stdout, ctrl);
    if (log) {
        fprintf(log, "{\"event\":\"inspect\",\"model\":\"%s\",\"policy\":\"%s\",\"tensors\":", o.model,
                actc_trainer_get_opts(t)->policy);
        report_tensors_json(log, ctrl);
        fprintf(log, "}\n");
    }
    rc = 0;
out:
    if (log) fclose(log);
    actc_source_free(src);
    if (have_corpus) actc_text_free(&corpus);
    if (have_train) actc_image_dataset_free(&train);
    actc_trainer_free(t);
    actc_model_free(m);
    return rc;
}

const command cmd_inspect_def = {"inspect", "per saved tensor: GACT's measured sensitivity, bits and bytes", USAGE,
                                 ABOUT, build_flags, sizeof(inspect_opts), cmd_inspect};
