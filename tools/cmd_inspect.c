/* actc inspect: what a gact policy does to a model.  Builds the model, takes
 * one real batch (Fashion-MNIST for image models, the text corpus for
 * language models), lets the controller measure every saved tensor's
 * sensitivity and allocate bits, runs the step, and prints per tensor the
 * operator that saved it, its shape, c_l, the bits chosen and its stored
 * bytes. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

int cmd_inspect(int argc, char **argv)
{
    const char *model = "resnet20", *compress = NULL, *log_path = NULL, *data_spec = NULL;
    int batch = 0, threads = 0, seq = 0, layers = 0, width = 0, heads = 0, context = 0;
    uint64_t seed = 1;
    actc_controller_opts co = actc_controller_default_opts();
    data_opts d = {0};
    flag_def flags[] = {
        {"--model", F_STR, &model, "NAME", "model (resnet20)", 0},
        {"--compress", F_STR, &compress, "SPEC", "a gact policy: gact:4, gact:3, gact:2, gact:fix4, gact:CB1 ... (required)", 0},
        {"--batch", F_INT, &batch, "N", "batch size (image models 128, language models 16)", 0},
        {"--seq", F_INT, &seq, "N", "tokens per window of a language model (its context)", 0},
        {"--estimate-samples", F_INT, &co.estimate_samples, "N", "samples per sensitivity pass, 0 = the batch (8)", 0},
        {"--data", F_STR, &data_spec, "SPEC", "fmnist | text | text:PATH (by the model)", 0},
        {"--data-dir", F_STR, &d.data_dir, "DIR", "directory with the Fashion-MNIST IDX files", 0},
        {"--train-images", F_STR, &d.train_images, "FILE", "IDX image file (instead of --data-dir)", 0},
        {"--train-labels", F_STR, &d.train_labels, "FILE", "IDX label file", 0},
        {"--layers", F_INT, &layers, "N", "transformer blocks (the preset's)", 0},
        {"--width", F_INT, &width, "N", "transformer width (the preset's)", 0},
        {"--heads", F_INT, &heads, "N", "attention heads (the preset's)", 0},
        {"--context", F_INT, &context, "N", "positions of a language model (the preset's)", 0},
        {"--log", F_STR, &log_path, "FILE", "append the table as a JSON line to FILE", 0},
        {"--seed", F_U64, &seed, "N", "seed of initialisation, batch and rounding (1)", 0},
        {"--threads", F_INT, &threads, "N", "threads (default: all cores)", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    int help, rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, "actc inspect --compress gact:SPEC [--model NAME] [--batch N]",
                   "Measure the sensitivity of every tensor the model saves for backward on one\n"
                   "real batch, allocate bits as the policy does, and print the table: operator,\n"
                   "scope, shape, sensitivity c_l, bits and stored bytes per tensor.",
                   flags);
        return 0;
    }
    if (rc) return 2;
    if (!compress || strncmp(compress, "gact:", 5)) {
        fprintf(stderr, "error: --compress must be a gact policy (gact:4, gact:fix4, ...): inspect shows what GACT "
                        "measures and allocates\n");
        return 2;
    }
    if (batch < 0 || seq < 0 || co.estimate_samples < 0 || layers < 0 || width < 0 || heads < 0 || context < 0) {
        fprintf(stderr, "error: --batch, --seq, --estimate-samples and the model sizes must not be negative\n");
        return 2;
    }
    actc_set_threads(threads);
    rc = 1;
    actc_model *m = NULL;
    actc_ctx *ctx = NULL;
    actc_controller *ctrl = NULL;
    actc_image_dataset train = {0};
    int have_train = 0, have_corpus = 0;
    actc_text_corpus corpus;
    lm_batch *lb = NULL;
    actc_loader *loader = NULL;
    actc_tensor *x = NULL;
    FILE *log = NULL;
    actc_model_opts mo = actc_model_default_opts();
    mo.seed = seed;
    mo.n_layers = layers;
    mo.width = width;
    mo.n_heads = heads;
    mo.context = context;
    if (actc_model_create(model, &mo, &m) != ACTC_OK) {
        fprintf(stderr, "error: --model: %s\n", actc_last_error());
        return 2;
    }
    if (!(ctx = actc_ctx_new()) || actc_ctx_set_policy(ctx, compress) != ACTC_OK) {
        fprintf(stderr, "error: --compress: %s\n", actc_last_error());
        rc = 2;
        goto out;
    }
    actc_ctx_set_seed(ctx, seed);
    co.adapt_interval = 1;
    if (!(ctrl = controller_for(ctx, m, &co))) goto out;
    if (log_path && !(log = fopen(log_path, "a"))) {
        fprintf(stderr, "error: --log %s: cannot open for appending\n", log_path);
        goto out;
    }
    step_result sr;
    actc_status s;
    int samples = batch;
    const int lm = actc_model_takes_tokens(m);
    if (lm) {
        const int T = seq ? seq : actc_model_get_opts(m)->context;
        if (text_open(data_spec ? data_spec : "text", &corpus)) goto out;
        have_corpus = 1;
        samples = batch ? batch : 16;
        if (text_check_windows(&corpus, T) || !(lb = lm_batch_new(samples, T))) goto out;
        s = lm_train_step(m, ctx, ctrl, NULL, &corpus, lb, seed, 0, 0.0f, 0.0f, &sr);
    } else {
        if (data_load(&d, &train, NULL)) goto out;
        have_train = 1;
        actc_loader_opts lopt = {FMNIST_MEAN, FMNIST_STD, 0, 0, 1, seed};
        const int32_t *labels;
        int bs;
        samples = batch ? batch : 128;
        if (!(loader = actc_loader_new(&train, samples, 1, &lopt)) ||
            actc_loader_get(loader, 0, 0, &x, &labels, &bs) != ACTC_OK) {
            fprintf(stderr, "error: data: %s\n", actc_last_error());
            goto out;
        }
        s = train_step(m, ctx, ctrl, NULL, x, labels, 0.0f, 0.0f, &sr);
    }
    if (s != ACTC_OK) {
        fprintf(stderr, "error: the step failed: %s\n", actc_last_error());
        goto out;
    }
    printf("inspect: model %s, policy %s, batch %d, sensitivity passes on %d sample(s) at 4 bits\n", model,
           actc_ctx_policy(ctx), samples,
           co.estimate_samples && co.estimate_samples < samples ? co.estimate_samples : samples);
    report_tensors(stdout, ctrl);
    if (log) {
        fprintf(log, "{\"event\":\"inspect\",\"model\":\"%s\",\"policy\":\"%s\",\"tensors\":", model,
                actc_ctx_policy(ctx));
        report_tensors_json(log, ctrl);
        fprintf(log, "}\n");
    }
    rc = 0;
out:
    if (log) fclose(log);
    actc_tensor_release(x);
    actc_loader_free(loader);
    lm_batch_free(lb);
    if (have_corpus) actc_text_free(&corpus);
    if (have_train) actc_image_dataset_free(&train);
    if (m) actc_model_zero_grad(m);
    actc_controller_free(ctrl);
    actc_ctx_free(ctx);
    actc_model_free(m);
    return rc;
}
