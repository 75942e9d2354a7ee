/* actc train's checks: every flag before any data is read (the data's, the
 * model's shape, the command's own), the trainer's options through the
 * trainer's own check, whose messages are printed with this command's flag
 * names. */
#include "train_cmd.h"
#include <ctype.h>
#include <string.h>

/* The trainer's complaint about its options, its option names printed as
 * this command's flags.  Returns 2. */
static int fail_options(void)
{
    static const char *const name[][2] = {
        {"adapt_interval", "--adapt-interval"}, {"estimate_samples", "--estimate-samples"},
        {"alert_fraction", "--alert"}, {"grad_bits", "--grad-bits"}, {"weight decay", "--wd"},
        {"momentum", "--momentum"}, {"beta1", "--beta1"}, {"beta2", "--beta2"}, {"clip", "--clip"},
        {"accum", "--accum"}, {"min lr", "--min-lr"}, {"learning rate", "--lr"}};
    const char *m = actc_last_error();
    fputs("error: ", stderr);
    for (const char *p = m; *p;) {
        size_t i = 0, n = sizeof name / sizeof *name;
        /* whole words only */
        const int start = p == m || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '-');
        for (; start && i < n; i++) {
            const size_t len = strlen(name[i][0]);
            if (!strncmp(p, name[i][0], len) && !(isalnum((unsigned char)p[len]) || p[len] == '_')) break;
        }
        if (start && i < n) {
            fputs(name[i][1], stderr);
            p += strlen(name[i][0]);
        } else {
            fputc(*p++, stderr);
        }
    }
    fputc('\n', stderr);
    return 2;
}

int train_check_flags(train_opts *o, const flag_def *flags, int lm)
{
    const int gr = actc_model_name_takes_graph(o->model);
    if (!o->data_spec) o->data_spec = lm ? "text" : gr ? "graph" : "fmnist";
    if (gr != graph_spec(o->data_spec)) {
        if (gr) fprintf(stderr, "error: --data %s: model %s is a graph network: use --data graph, graph:PATH or sbm:N\n", o->data_spec, o->model);
        else fprintf(stderr, "error: --data %s: model %s does not take a graph: use gcn, gat or gcnii\n", o->data_spec, o->model);
        return 2;
    }
    if (!gr && o->split) {
        fprintf(stderr, "error: --split is for graph models (gcn, gat, gcnii)\n");
        return 2;
    }
    if (gr && o->accum > 1) {
        fprintf(stderr, "error: --accum %d: graph models train full-batch, one whole graph a step\n", o->accum);
        return 2;
    }
    if (!gr && (lm != text_spec(o->data_spec) || (!lm && strcmp(o->data_spec, "fmnist")))) {
        if (lm) fprintf(stderr, "error: --data %s: model %s is a language model: use --data text or text:PATH\n", o->data_spec, o->model);
        else if (text_spec(o->data_spec))
            fprintf(stderr, "error: --data %s: model %s classifies images: use a language model (gpt-mini, llama-mini, gpt, llama, gpt2-124m) for text\n", o->data_spec, o->model);
        else fprintf(stderr, "error: unknown --data '%s' (fmnist, text or text:PATH)\n", o->data_spec);
        return 2;
    }
    if (strcmp(o->attention, "flash") && strcmp(o->attention, "naive")) {
        fprintf(stderr, "error: --attention must be flash or naive, not '%s'\n", o->attention);
        return 2;
    }
    if (o->layers < 0 || o->heads < 0 || o->context < 0 || o->vocab < 0 || o->seq < 0 || o->width < 0 || o->epoch_steps < 1) {
        fprintf(stderr, "error: --layers, --heads, --context, --vocab, --seq and --width must not be negative, --epoch-steps at least 1\n");
        return 2;
    }
    if (lm && o->vocab && o->vocab < 256) {
        fprintf(stderr, "error: --vocab %d: byte-level text needs a vocabulary of at least 256\n", o->vocab);
        return 2;
    }
    /* 0 and -1 mean "the optimizer's" to the trainer, not given values. */
    if ((flag_was_set(flags, "--lr") && !(o->lr > 0)) || (flag_was_set(flags, "--wd") && !(o->wd >= 0))) {
        fprintf(stderr, "error: --lr must be positive and --wd not negative\n");
        return 2;
    }
    if (o->epochs < 1 || o->batch < 1 || o->eval_batch < 1 || o->log_every < 1 || o->accum < 1) {
        fprintf(stderr, "error: --epochs, --batch, --accum, --eval-batch and --log-every must be at least 1\n");
        return 2;
    }
    if (o->batch % o->accum) {
        fprintf(stderr, "error: --accum %d does not divide --batch %d: each micro-batch has the same size\n", o->accum,
                o->batch);
        return 2;
    }
    if (o->grad_comm != 8 && o->grad_comm != 32) {
        fprintf(stderr, "error: --grad-comm %d: gradients are all-reduced in 32 bits (fp32) or 8 (AGoQ's 8-bit "
                        "all-reduce)\n", o->grad_comm);
        return 2;
    }
    if (o->comm_timeout < 0) {
        fprintf(stderr, "error: --comm-timeout %d: seconds, 0 for no limit\n", o->comm_timeout);
        return 2;
    }
    if (flag_was_set(flags, "--bucket") && o->bucket < 1024) {
        fprintf(stderr, "error: --bucket %zu: a bucket holds at least 1KiB of gradients\n", o->bucket);
        return 2;
    }
    if (o->threads < 0 || o->data.limit_train < 0 || o->data.limit_test < 0) {
        fprintf(stderr, "error: --threads, --limit-train and --limit-test must not be negative\n");
        return 2;
    }
    if (!(o->dropout >= 0 && o->dropout < 1)) {
        fprintf(stderr, "error: --dropout %g: need 0 <= P < 1\n", (double)o->dropout);
        return 2;
    }
    if (flag_was_set(flags, "--mem-budget") && o->budget == 0) {
        fprintf(stderr, "error: --mem-budget must be positive (leave it out for no limit)\n");
        return 2;
    }
    if (strcmp(o->progress, "auto") && strcmp(o->progress, "on") && strcmp(o->progress, "off")) {
        fprintf(stderr, "error: --progress must be auto, on or off, not '%s'\n", o->progress);
        return 2;
    }
    /* A checkpoint keeps the run's recipe, whose strings have arrays of a
     * fixed size: find out now, not after the first epoch, if it cannot. */
    const size_t data_cap = ACTC_RECIPE_DATA_MAX, split_cap = sizeof ((actc_run_recipe *)0)->split;
    if (o->save_path && strlen(o->data_spec) >= data_cap) {
        fprintf(stderr, "error: --save: --data takes %zu bytes, over the %zu a checkpoint keeps; shorten it\n",
                strlen(o->data_spec), data_cap - 1);
        return 2;
    }
    if (o->save_path && o->split && strlen(o->split) >= split_cap) {
        fprintf(stderr, "error: --save: --split takes %zu bytes, over the %zu a checkpoint keeps\n", strlen(o->split),
                split_cap - 1);
        return 2;
    }
    /* The trainer's options, the policy included, before spending time on
     * the data (the trainer checks them: its messages name the option). */
    actc_trainer_opts t;
    if (train_trainer_opts(o, 1, &t) != ACTC_OK) return fail("--schedule"), 2;
    if (actc_trainer_check_opts(&t) != ACTC_OK) return fail_options();
    return 0;
}
