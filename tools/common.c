/* Data set-up, errors and checkpoint models shared by the commands. */
#include "cli.h"
#include <time.h>

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Keep only the first `limit` samples (for quick runs and tests). */
static void truncate_set(actc_image_dataset *d, int limit)
{
    if (limit > 0 && limit < d->n) d->n = limit;
}

static int load_pair(const char *img, const char *lab, const char *what, actc_image_dataset *d)
{
    if (actc_idx_load(img, lab, d) != ACTC_OK) {
        fprintf(stderr, "error: cannot load the %s set: %s\n", what, actc_last_error());
        return 1;
    }
    return 0;
}

int data_load(const data_opts *o, actc_image_dataset *train, actc_image_dataset *test)
{
    int explicit_train = o->train_images || o->train_labels;
    int explicit_test = o->test_images || o->test_labels;
    if (train) {
        if (explicit_train) {
            if (!o->train_images || !o->train_labels) {
                fprintf(stderr, "error: --train-images and --train-labels go together\n");
                return 1;
            }
            if (load_pair(o->train_images, o->train_labels, "training", train)) return 1;
        } else if (actc_fashion_mnist_load(o->data_dir, 1, train) != ACTC_OK) {
            fprintf(stderr, "error: %s\n", actc_last_error());
            return 1;
        }
        truncate_set(train, o->limit_train);
    }
    if (test) {
        int rc;
        if (explicit_test) {
            if (!o->test_images || !o->test_labels) {
                fprintf(stderr, "error: --test-images and --test-labels go together\n");
                rc = 1;
            } else {
                rc = load_pair(o->test_images, o->test_labels, "test", test);
            }
        } else {
            rc = actc_fashion_mnist_load(o->data_dir, 0, test) != ACTC_OK;
            if (rc) fprintf(stderr, "error: %s\n", actc_last_error());
        }
        if (rc) {
            if (train) actc_image_dataset_free(train);
            return 1;
        }
        truncate_set(test, o->limit_test);
    }
    return 0;
}

int fail(const char *what)
{
    fprintf(stderr, "error: %s: %s\n", what, actc_last_error());
    return 1;
}

int cli_check_policy(const char *spec, const char *flag)
{
    actc_ctx *probe = actc_ctx_new();
    const actc_status s = probe ? actc_ctx_set_policy(probe, spec) : actc_last_status();
    actc_ctx_free(probe);
    return s == ACTC_OK ? 0 : (fail(flag), 2);
}

int cli_check_model(const char *name, const actc_model_opts *opts, const char *flag)
{
    const actc_model_opts def = actc_model_default_opts();
    actc_model *probe = NULL;
    if (actc_model_create(name, opts ? opts : &def, &probe) != ACTC_OK) return fail(flag), 2;
    actc_model_free(probe);
    return 0;
}

int model_from_checkpoint(const char *path, actc_ckpt_info *info, actc_model **m)
{
    *m = NULL;
    if (actc_checkpoint_info(path, info) != ACTC_OK || actc_checkpoint_model(path, m) != ACTC_OK) {
        fprintf(stderr, "error: --checkpoint: %s\n", actc_last_error());
        return 1;
    }
    return 0;
}
