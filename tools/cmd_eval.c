/* actc eval: test accuracy of a checkpoint. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

int cmd_eval(int argc, char **argv)
{
    const char *ckpt = NULL;
    int batch = 256, threads = 0;
    data_opts d;
    memset(&d, 0, sizeof d);
    flag_def flags[] = {
        {"--checkpoint", F_STR, &ckpt, "FILE", "checkpoint written by actc train --save (required)", 0},
        {"--batch", F_INT, &batch, "N", "evaluation batch size (256)", 0},
        {"--threads", F_INT, &threads, "N", "threads (default: all cores)", 0},
        {"--data-dir", F_STR, &d.data_dir, "DIR", "directory with the Fashion-MNIST IDX files", 0},
        {"--test-images", F_STR, &d.test_images, "FILE", "IDX image file to evaluate on", 0},
        {"--test-labels", F_STR, &d.test_labels, "FILE", "IDX label file to evaluate on", 0},
        {"--limit-test", F_INT, &d.limit_test, "N", "use only the first N test images", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    int help, rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, "actc eval --checkpoint FILE [--data-dir DIR]",
                   "Evaluate a checkpoint on the test set: accuracy and mean loss.", flags);
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
    if (actc_checkpoint_peek(ckpt, &meta) != ACTC_OK) {
        fprintf(stderr, "error: --checkpoint: %s\n", actc_last_error());
        return 1;
    }
    actc_image_dataset test;
    if (data_load(&d, NULL, &test)) return 1;
    rc = 1;
    actc_model *m = NULL;
    actc_ctx *ctx = NULL;
    actc_model_opts mo = actc_model_default_opts();
    mo.in_channels = test.c;
    mo.in_h = test.h;
    mo.in_w = test.w;
    if (test.num_classes > mo.num_classes) mo.num_classes = test.num_classes;
    if (meta.num_classes > 0) mo.num_classes = meta.num_classes;
    {
        /* The model's width is part of the recipe the checkpoint keeps. */
        const char *w = strstr(meta.settings, "--width=");
        if (w) mo.width = atoi(w + 8);
    }
    if (meta.input[0] > 0 && (meta.input[0] != test.c || meta.input[1] != test.h || meta.input[2] != test.w)) {
        fprintf(stderr, "error: %s was trained on %dx%dx%d images; the test images are %dx%dx%d\n", ckpt,
                meta.input[0], meta.input[1], meta.input[2], test.c, test.h, test.w);
        actc_image_dataset_free(&test);
        return 1;
    }
    if (test.num_classes > mo.num_classes) {
        fprintf(stderr, "error: the test labels go up to %d but %s has %d classes\n", test.num_classes - 1, ckpt,
                mo.num_classes);
        actc_image_dataset_free(&test);
        return 1;
    }
    double acc, loss;
    if (actc_model_create(meta.model, &mo, &m) != ACTC_OK || !(ctx = actc_ctx_new()) ||
        actc_checkpoint_load(ckpt, m, NULL, &meta) != ACTC_OK ||
        evaluate(m, ctx, &test, batch, &acc, &loss) != ACTC_OK) {
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
