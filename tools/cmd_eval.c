/* actc eval: test accuracy of an image classifier's checkpoint, or the
 * validation loss (bits per byte) of a language model's on held-out text. */
#include "cli.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *ckpt, *spec;
    int batch, threads;
    uint64_t eval_tokens;
    data_opts d;
} eval_opts;

static const char USAGE[] = "actc eval --checkpoint FILE [--data-dir DIR | --data text[:PATH] | --data graph[:PATH]]";
static const char ABOUT[] = "Evaluate a checkpoint: an image classifier's accuracy and mean loss on the test\n"
                           "set, a language model's loss in bits per byte on the held-out text, or a graph\n"
                           "model's accuracy on the validation and test nodes of its graph.";

static void build_flags(flag_def *f, void *opts)
{
    eval_opts *o = opts;
    flag_def defs[] = {
        {"--checkpoint", F_STR, &o->ckpt, "FILE", "checkpoint written by actc train --save (required)", 0},
        {"--batch", F_INT, &o->batch, "N", "evaluation batch size (256; language models: their training batch)", 0},
        {"--threads", F_INT, &o->threads, "N", "threads (default: all cores)", 0},
        {"--data", F_STR, &o->spec, "SPEC", "language models: text or text:PATH; graph models: graph, graph:PATH or sbm:N (the training run's)", 0},
        {"--eval-tokens", F_U64, &o->eval_tokens, "N", "language models: validation tokens, 0 = all of them (0)", 0},
        {"--data-dir", F_STR, &o->d.data_dir, "DIR", "directory with the Fashion-MNIST IDX files", 0},
        {"--test-images", F_STR, &o->d.test_images, "FILE", "IDX image file to evaluate on", 0},
        {"--test-labels", F_STR, &o->d.test_labels, "FILE", "IDX label file to evaluate on", 0},
        {"--limit-test", F_INT, &o->d.limit_test, "N", "use only the first N test images", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    memcpy(f, defs, sizeof defs);
}

/* A language model on the held-out text of its corpus (the one it was trained
 * on unless --data names another), in windows of its training length. */
static int eval_text(const eval_opts *o, const actc_ckpt_info *info, const actc_run_recipe *rec, actc_model *m,
                     actc_ctx *ctx)
{
    const char *spec = o->spec ? o->spec : rec->data[0] ? rec->data : "text";
    if (!text_spec(spec)) {
        fprintf(stderr, "error: --data %s: %s holds language model %s: use --data text or text:PATH\n", spec, o->ckpt,
                info->model);
        return 1;
    }
    actc_text_corpus c;
    if (text_open(spec, &c)) return 1;
    int rc = 1;
    const int context = actc_model_get_opts(m)->context, seq = rec->seq;
    const int T = seq > 0 && seq < context ? seq : context;
    actc_source *src = NULL;
    actc_eval_result r;
    if (actc_source_text_eval(&c, T, o->eval_tokens, o->batch, &src) != ACTC_OK ||
        actc_evaluate(m, ctx, src, &r) != ACTC_OK) {
        fprintf(stderr, "error: %s\n", actc_last_error());
        goto out;
    }
    printf("%s: model %s after %llu steps: validation loss %.4f = %.3f bits per byte (next-byte acc %.1f%%) on the "
           "held-out %zu bytes of %s (windows of %d); unigram baseline %.3f bpb\n",
           o->ckpt, info->model, (unsigned long long)info->step, r.loss, r.loss / M_LN2, 100 * r.accuracy,
           c.n - c.train_end, c.source, T, actc_text_unigram_bpb(&c));
    rc = 0;
out:
    actc_source_free(src);
    actc_text_free(&c);
    return rc;
}

/* A graph model on the validation and test nodes of its graph (the
 * training run's, split as it was, unless --data names another). */
static int eval_graph(const eval_opts *o, const actc_ckpt_info *info, const actc_run_recipe *rec, actc_model *m,
                      actc_ctx *ctx)
{
    const char *spec = o->spec ? o->spec : rec->data[0] ? rec->data : "graph";
    const int has_split = !o->spec && rec->split[0];
    if (!graph_spec(spec)) {
        fprintf(stderr, "error: --data %s: %s holds graph model %s: use --data graph, graph:PATH or sbm:N\n", spec,
                o->ckpt, info->model);
        return 1;
    }
    actc_graph *g = NULL;
    if (graph_open(spec, has_split ? rec->split : NULL, &g)) return 1;
    const actc_model_opts *mo = actc_model_get_opts(m);
    int rc = 1;
    if (mo->in_channels * mo->in_h * mo->in_w != g->n_features || g->n_classes > mo->num_classes) {
        fprintf(stderr, "error: %s takes %d node features in %d classes; the graph %s has %d features in %d\n",
                o->ckpt, mo->in_channels * mo->in_h * mo->in_w, mo->num_classes, g->source, g->n_features,
                g->n_classes);
        actc_graph_free(g);
        return 1;
    }
    actc_eval_result r[2];
    for (int i = 0; i < 2; i++) {
        actc_source *src = NULL;
        actc_status s = actc_source_graph(g, i ? ACTC_SPLIT_TEST : ACTC_SPLIT_VAL, &src);
        if (s == ACTC_OK) s = actc_evaluate(m, ctx, src, &r[i]);
        actc_source_free(src);
        if (s != ACTC_OK) {
            fprintf(stderr, "error: %s\n", actc_last_error());
            goto out;
        }
    }
    printf("%s: model %s after %llu steps: validation accuracy %.2f%% (loss %.4f) on %ld nodes, test accuracy "
           "%.2f%% (loss %.4f) on %ld nodes of %s\n",
           o->ckpt, info->model, (unsigned long long)info->step, 100 * r[0].accuracy, r[0].loss, r[0].rows,
           100 * r[1].accuracy, r[1].loss, r[1].rows, g->source);
    rc = 0;
out:
    actc_graph_free(g);
    return rc;
}

static int eval_images(const eval_opts *o, const actc_ckpt_info *info, actc_model *m, actc_ctx *ctx)
{
    if (o->spec && strcmp(o->spec, "fmnist")) {
        fprintf(stderr, "error: --data %s: %s holds image model %s: evaluate it on IDX images\n", o->spec, o->ckpt,
                info->model);
        return 1;
    }
    actc_image_dataset test;
    if (data_load(&o->d, NULL, &test)) return 1;
    int rc = 1;
    actc_source *src = NULL;
    const actc_model_opts *mo = actc_model_get_opts(m);
    if (mo->in_channels != test.c || mo->in_h != test.h || mo->in_w != test.w) {
        fprintf(stderr, "error: %s was trained on %dx%dx%d images; the test images are %dx%dx%d\n", o->ckpt,
                mo->in_channels, mo->in_h, mo->in_w, test.c, test.h, test.w);
        goto out;
    }
    if (test.num_classes > mo->num_classes) {
        fprintf(stderr, "error: the test labels go up to %d but %s has %d classes\n", test.num_classes - 1, o->ckpt,
                mo->num_classes);
        goto out;
    }
    actc_loader_opts lo = {FMNIST_MEAN, FMNIST_STD, 0, 0, 0, 0};
    actc_eval_result r;
    if (actc_source_images(&test, o->batch, 0, &lo, &src) != ACTC_OK || actc_evaluate(m, ctx, src, &r) != ACTC_OK) {
        fprintf(stderr, "error: %s\n", actc_last_error());
        goto out;
    }
    printf("%s: model %s after %llu epoch(s) / %llu steps: test accuracy %.2f%% (loss %.4f) on %d images\n", o->ckpt,
           info->model, (unsigned long long)info->epoch, (unsigned long long)info->step, 100 * r.accuracy, r.loss,
           test.n);
    rc = 0;
out:
    actc_source_free(src);
    actc_image_dataset_free(&test);
    return rc;
}

static int cmd_eval(int argc, char **argv)
{
    eval_opts o;
    memset(&o, 0, sizeof o);
    o.batch = 256;
    flag_def flags[MAX_FLAGS];
    build_flags(flags, &o);
    int help, rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, USAGE, ABOUT, flags);
        return 0;
    }
    if (rc) return 2;
    if (!o.ckpt) {
        fprintf(stderr, "error: --checkpoint FILE is required\n");
        return 2;
    }
    if (o.batch < 1 || o.threads < 0 || o.d.limit_test < 0) {
        fprintf(stderr, "error: need --batch >= 1, --threads >= 0 and --limit-test >= 0\n");
        return 2;
    }
    actc_set_threads(o.threads);
    actc_ckpt_info info;
    actc_model *m = NULL;
    if (model_from_checkpoint(o.ckpt, &info, &m)) return 1;
    /* The training run's data, window and batch (zero: not recorded). */
    actc_run_recipe rec;
    memset(&rec, 0, sizeof rec);
    cli_recipe_from_checkpoint(&info, &rec);
    /* Image flags mean nothing to a language or graph model: say so rather
     * than drop them (--data is how those take their data). */
    if (actc_model_takes_tokens(m) || actc_model_takes_graph(m)) {
        static const char *const image_flags[] = {"--test-images", "--test-labels", "--data-dir", "--limit-test"};
        for (size_t i = 0; i < sizeof image_flags / sizeof *image_flags; i++)
            if (flag_was_set(flags, image_flags[i]))
                fprintf(stderr, "note: %s is for image models; %s holds a %s model, evaluated on --data (%s)\n",
                        image_flags[i], o.ckpt, actc_model_takes_tokens(m) ? "language" : "graph",
                        o.spec ? o.spec : "the training run's");
    }
    actc_ctx *ctx = actc_ctx_new();
    if (!ctx) rc = fail("engine");
    else if (actc_model_takes_tokens(m)) {
        if (!flag_was_set(flags, "--batch") && rec.batch > 0) o.batch = rec.batch;
        rc = eval_text(&o, &info, &rec, m, ctx);
    } else if (actc_model_takes_graph(m)) {
        rc = eval_graph(&o, &info, &rec, m, ctx);
    } else {
        rc = eval_images(&o, &info, m, ctx);
    }
    actc_ctx_free(ctx);
    actc_model_free(m);
    return rc;
}

const command cmd_eval_def = {"eval", "evaluate a checkpoint on the test set (or held-out text)", USAGE, ABOUT,
                              build_flags, sizeof(eval_opts), cmd_eval};
