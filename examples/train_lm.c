/* Train a built-in language model (a GPT-2-style decoder on bytes) on a
 * text file through the library's trainer: AdamW with warm-up and cosine
 * decay, gradient clipping, a compression policy, a line every few steps
 * from the progress callback, and the validation loss in bits per byte.
 *
 * usage: train_lm TEXT_FILE [POLICY] [STEPS] [LAYERS]
 *        (defaults: gact:4, 100 steps, 2 layers of width 128) */
#include <actc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int every_10(actc_trainer *t, const actc_progress *p, void *user)
{
    (void)t;
    (void)user;
    if (p->step % 10 == 0)
        printf("step %4llu: loss %.3f (%.3f bits per byte), lr %.2e, %.0f tokens/s\n", (unsigned long long)p->step,
               p->last->loss, p->last->loss / M_LN2, p->last->lr, p->rows / p->seconds);
    return 0; /* non-zero would stop the epoch here */
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: train_lm TEXT_FILE [POLICY] [STEPS] [LAYERS]\n");
        return 2;
    }
    const char *policy = argc > 2 ? argv[2] : "gact:4";
    const int steps = argc > 3 ? atoi(argv[3]) : 100, layers = argc > 4 ? atoi(argv[4]) : 2;
    actc_text_corpus text;
    if (actc_text_load(argv[1], 0.1, &text) != ACTC_OK) {
        fprintf(stderr, "error: %s\n", actc_last_error());
        return 1;
    }
    actc_model_opts mo = actc_model_default_opts();
    mo.n_layers = layers;
    mo.width = 128;
    mo.n_heads = 4;
    mo.context = 64;
    actc_trainer_opts o = actc_trainer_default_opts();
    o.policy = policy;
    o.optim = "adamw";
    o.lr = 3e-3f;
    o.beta2 = 0.99f;
    o.clip = 1.0f;
    o.schedule.kind = ACTC_LR_COSINE;
    o.schedule.warmup_steps = steps / 10;
    o.schedule.total_steps = (uint64_t)steps;
    o.controller.adapt_interval = 50; /* a short run: measure GACT's sensitivities often */
    o.controller.estimate_samples = 4;
    actc_model *m = NULL;
    actc_trainer *t = NULL;
    actc_source *train = NULL, *val = NULL;
    actc_epoch_result e;
    actc_eval_result r;
    int rc = 1;
    if (actc_model_create("gpt", &mo, &m) || actc_trainer_new(m, &o, &t) ||
        actc_source_text(&text, 16, 64, 1, steps, &train) || actc_source_text_eval(&text, 64, 16384, 16, &val) ||
        actc_trainer_train_epoch(t, train, every_10, NULL, &e) || actc_trainer_evaluate(t, val, &r)) {
        fprintf(stderr, "error: %s\n", actc_last_error());
        goto out;
    }
    printf("%s: %d steps of model gpt (%zu parameters) under %s: validation %.3f bits per byte (unigram %.3f), "
           "%.0f tokens/s\n",
           argv[1], e.steps, actc_model_num_params(m), policy, r.loss / M_LN2, actc_text_unigram_bpb(&text),
           e.rows / e.seconds);
    actc_trainer_report_file(t, ACTC_REPORT_TEXT, stdout);
    rc = 0;
out:
    actc_source_free(train);
    actc_source_free(val);
    actc_trainer_free(t);
    actc_model_free(m);
    actc_text_free(&text);
    actc_shutdown();
    return rc;
}
