/* actc eval: test accuracy of an image classifier's checkpoint, or the
 * validation loss (bits per byte) of a language model's on held-out text. */
#include "cli.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A language model on the held-out text of its corpus (the one it was trained
 * on unless --data names another), in windows of its training length. */
static int eval_text(const char *ckpt, const actc_ckpt_meta *meta, actc_model *m, actc_ctx *ctx, const char *spec,
                     int batch, long eval_tokens)
{
    char saved[256];
    if (!spec) spec = ckpt_setting_str(meta, "data", saved, sizeof saved) ? saved : "text";
    if (!text_spec(spec)) {
        fprintf(stderr, "error: --data %s: %s holds language model %s: use --data text or text:PATH\n", spec, ckpt,
                meta->model);
        return 1;
    }
    actc_text_corpus c;
    if (text_open(spec, &c)) return 1;
    int rc = 1;
    const int context = actc_model_get_opts(m)->context, seq = ckpt_setting_int(meta, "seq");
    const int T = seq > 0 && seq < context ? seq : context;
    double loss, acc;
    if (text_check_windows(&c, T)) goto out;
    if (lm_evaluate(m, ctx, &c, T, eval_tokens, batch, &loss, &acc) != ACTC_OK) {
        fprintf(stderr, "error: %s\n", actc_last_error());
        goto out;
    }
    printf("%s: model %s after %llu steps: validation loss %.4f = %.3f bits per byte (next-byte acc %.1f%%) on the "
           "held-out %zu bytes of %s (windows of %d); unigram baseline %.3f bpb\n",
           ckpt, meta->model, (unsigned long long)meta->step, loss, loss / M_LN2, 100 * acc, c.n - c.train_end,
           c.source, T, lm_unigram_bpb(&c));
    rc = 0;
out:
    actc_text_free(&c);
    return rc;
}

int cmd_eval(int argc, char **argv)
{
    const char *ckpt = NULL, *spec = NULL;
    int batch = 256, threads = 0;
    uint64_t eval_tokens = 0;
    data_opts d;
    memset(&d, 0, sizeof d);
    flag_def flags[] = {
        {"--checkpoint", F_STR, &ckpt, "FILE", "checkpoint written by actc train --save (required)", 0},
        {"--batch", F_INT, &batch, "N", "evaluation batch size (256; language models: their training batch)", 0},
        {"--threads", F_INT, &threads, "N", "threads (default: all cores)", 0},
        {"--data", F_STR, &spec, "SPEC", "language models: text (the default corpus) or text:PATH (the training run's)", 0},
        {"--eval-tokens", F_U64, &eval_tokens, "N", "language models: validation tokens, 0 = all of them (0)", 0},
        {"--data-dir", F_STR, &d.data_dir, "DIR", "directory with the Fashion-MNIST IDX files", 0},
        {"--test-images", F_STR, &d.test_images, "FILE", "IDX image file to evaluate on", 0},
        {"--test-labels", F_STR, &d.test_labels, "FILE", "IDX label file to evaluate on", 0},
        {"--limit-test", F_INT, &d.limit_test, "N", "use only the first N test images", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    int help, rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, "actc eval --checkpoint FILE [--data-dir DIR | --data text[:PATH]]",
                   "Evaluate a checkpoint: an image classifier's accuracy and mean loss on the test\n"
                   "set, or a language model's loss in bits per byte on the held-out text.", flags);
        return 0;
    }
    if (rc) return 2;
    if (!ckpt) {
        fprintf(stderr, "error: --checkpoint FILE is required\n");
        return 2;
    }
    if (batch < 1) {
        fprintf(stderr, "error: --batch must be at least 1\n");
        return 2;
    }
    actc_set_threads(threads);
    actc_ckpt_meta meta;
    actc_model *m = NULL;
    actc_ctx *ctx = NULL;
    if (actc_checkpoint_peek(ckpt, &meta) != ACTC_OK) {
        fprintf(stderr, "error: --checkpoint: %s\n", actc_last_error());
        return 1;
    }
    const int lm = actc_model_name_takes_tokens(meta.model);
    if (lm) {
        if (model_from_checkpoint(ckpt, NULL, &meta, &m)) return 1;
        if (!flag_was_set(flags, "--batch") && meta.batch > 0) batch = meta.batch;
        rc = (ctx = actc_ctx_new()) ? eval_text(ckpt, &meta, m, ctx, spec, batch, (long)eval_tokens) : 1;
        if (!ctx) fprintf(stderr, "error: %s\n", actc_last_error());
        actc_ctx_free(ctx);
        actc_model_free(m);
        return rc;
    }
    if (spec && strcmp(spec, "fmnist")) {
        fprintf(stderr, "error: --data %s: %s holds image model %s: evaluate it on IDX images\n", spec, ckpt, meta.model);
        return 1;
    }
    actc_image_dataset test;
    if (data_load(&d, NULL, &test)) return 1;
    rc = 1;
    /* The test set fills in what a checkpoint does not record. */
    actc_model_opts base = actc_model_default_opts();
    base.in_channels = test.c;
    base.in_h = test.h;
    base.in_w = test.w;
    if (test.num_classes > base.num_classes) base.num_classes = test.num_classes;
    if (model_from_checkpoint(ckpt, &base, &meta, &m) || !(ctx = actc_ctx_new())) goto out;
    const actc_model_opts *mo = actc_model_get_opts(m);
    if (mo->in_channels != test.c || mo->in_h != test.h || mo->in_w != test.w) {
        fprintf(stderr, "error: %s was trained on %dx%dx%d images; the test images are %dx%dx%d\n", ckpt,
                mo->in_channels, mo->in_h, mo->in_w, test.c, test.h, test.w);
        goto out;
    }
    if (test.num_classes > mo->num_classes) {
        fprintf(stderr, "error: the test labels go up to %d but %s has %d classes\n", test.num_classes - 1, ckpt,
                mo->num_classes);
        goto out;
    }
    double acc, loss;
    if (evaluate(m, ctx, &test, batch, &acc, &loss) != ACTC_OK) {
        fprintf(stderr, "error: %s\n", actc_last_error());
        goto out;
    }
    printf("%s: model %s after %llu epoch(s) / %llu steps: test accuracy %.2f%% (loss %.4f) on %d images\n", ckpt,
           meta.model, (unsigned long long)meta.epoch, (unsigned long long)meta.step, 100 * acc, loss, test.n);
    rc = 0;
out:
    actc_ctx_free(ctx);
    actc_model_free(m);
    actc_image_dataset_free(&test);
    return rc;
}
