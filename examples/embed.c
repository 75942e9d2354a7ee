/* The smallest complete program: train ResNet-20 on Fashion-MNIST with a
 * compression policy, evaluate after every epoch, checkpoint, resume when
 * run again, and print the memory table, with the library's trainer.
 *
 * usage: embed [POLICY] [EPOCHS] [CHECKPOINT] [TRAIN_IMAGES]
 *        (defaults: actnn:L3, 1, embed.ckpt, all 60000; e.g. embed gact:4 3 r.ckpt 5000) */
#include <actc.h>
#include <stdio.h>
#include <stdlib.h>

static int die(void) { return fprintf(stderr, "error: %s\n", actc_last_error()), 1; }

int main(int argc, char **argv)
{
    const char *policy = argc > 1 ? argv[1] : "actnn:L3", *ckpt = argc > 3 ? argv[3] : "embed.ckpt";
    const int epochs = argc > 2 ? atoi(argv[2]) : 1, limit = argc > 4 ? atoi(argv[4]) : 0;
    actc_image_dataset train, test;
    actc_model *model;
    actc_trainer *t;
    actc_source *tr, *te;
    actc_loader_opts norm = {0.286f, 0.353f, 0, 0, 1, 1}; /* mean, std, no augmentation, shuffled */
    actc_trainer_opts o = actc_trainer_default_opts();   /* SGD, lr 0.1, momentum 0.9 */
    o.policy = policy;
    if (actc_fashion_mnist_load(NULL, 1, &train) || actc_fashion_mnist_load(NULL, 0, &test)) return die();
    if (limit > 0 && limit < train.n) train.n = limit;
    if (actc_source_images(&train, 128, 1, &norm, &tr) || actc_source_images(&test, 256, 0, &norm, &te)) return die();
    o.schedule.kind = ACTC_LR_COSINE; /* warm-up, then cosine decay over the run */
    o.schedule.total_steps = (uint64_t)epochs * (uint64_t)actc_source_batches(tr);
    o.schedule.warmup_steps = o.schedule.total_steps / 10;
    if (actc_model_create("resnet20", NULL, &model) || actc_trainer_new(model, &o, &t)) return die();
    actc_status s = actc_trainer_load(t, ckpt); /* resume where the last run stopped, if it did */
    if (s == ACTC_OK) printf("resumed %s at epoch %llu\n", ckpt, (unsigned long long)actc_trainer_epoch(t) + 1);
    else if (s != ACTC_ERR_IO) return die();
    while (actc_trainer_epoch(t) < (uint64_t)epochs) {
        actc_epoch_result e;
        actc_eval_result r;
        if (actc_trainer_train_epoch(t, tr, NULL, NULL, &e) || actc_trainer_evaluate(t, te, &r) ||
            actc_trainer_save(t, ckpt))
            return die();
        printf("epoch %llu (%s): train loss %.4f, test accuracy %.2f%%\n", (unsigned long long)actc_trainer_epoch(t),
               policy, e.loss, 100 * r.accuracy);
        actc_trainer_report_file(t, ACTC_REPORT_TEXT, stdout);
    }
    actc_source_free(tr), actc_source_free(te), actc_trainer_free(t), actc_model_free(model);
    actc_image_dataset_free(&train), actc_image_dataset_free(&test), actc_shutdown();
    return 0;
}
