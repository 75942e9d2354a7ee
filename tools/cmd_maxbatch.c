/* actc maxbatch: the largest batch whose full training step (forward,
 * backward, optimizer step with its state) fits a memory budget: the
 * library's actc_maxbatch, with a line per batch size tried.  A language
 * model's batch counts windows of --seq tokens. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *compress, *optim, *attention;
    size_t budget;
    int threads, start, limit, width, in_c, in_h, in_w, classes, resolution, estimate;
    int layers, heads, context, vocab, seq; /* language models */
    uint64_t seed;
    int grad_bits; /* 0: 32 */
    const char *search; /* graph models: "nodes", "depth" or "width" */
    int nodes;          /* graph models, --search depth: nodes of the graph */
    double degree;
    float dropout;      /* graph models: -1 = the preset's (as actc train) */
    int batch;          /* language models, --search seq: windows per step */
    int json;           /* the answer as one JSON line as well */
} mb_opts;

static const char USAGE[] = "actc maxbatch --budget SIZE [--model NAME] [--compress SPEC]";
static const char ABOUT[] = "Find the largest batch size whose full training step (forward, backward and\n"
                           "optimizer step, all accounted memory) fits the budget: doubling, then bisection.\n"
                           "Graph models (gcn, gat, gcnii) train full-batch: the answer is the largest graph\n"
                           "(nodes of a planted-partition graph of --degree, --channels x --height x\n"
                           "--width-px features: Fashion-MNIST's 784 by default), or with --search depth the\n"
                           "most layers (--search width: the widest layers) on a graph of --nodes nodes.";

static void build_flags(flag_def *f, void *opts)
{
    mb_opts *o = opts;
    flag_def defs[] = {
        {"--budget", F_BYTES, &o->budget, "SIZE", "memory budget for the whole step, e.g. 2GiB (required)", 0},
        {"--model", F_STR, &o->model, "NAME", "model (resnet20)", 0},
        {"--compress", F_STR, &o->compress, "SPEC", "activation compression policy (none)", 0},
        {"--optim", F_STR, &o->optim, "NAME", "sgd or adamw (sgd; language models adamw): its state counts", 0},
        {"--grad-bits", F_INT, &o->grad_bits, "N", "gradients held in 32 bits or 8 (AGoQ's block-wise dynamic map) (32)", 0},
        {"--start", F_INT, &o->start, "N", "first batch size tried (1)", 0},
        {"--limit", F_INT, &o->limit, "N", "largest batch size tried (65536)", 0},
        {"--estimate-samples", F_INT, &o->estimate, "N", "gact: samples per sensitivity pass (2: only the bits matter here)", 0},
        {"--resolution", F_INT, &o->resolution, "N", "stop bisecting when the fitting and failing sizes are N apart (1)", 0},
        {"--width", F_INT, &o->width, "N", "mlp hidden width (256), transformer width (the preset's)", 0},
        {"--layers", F_INT, &o->layers, "N", "transformer blocks (the preset's)", 0},
        {"--heads", F_INT, &o->heads, "N", "attention heads (the preset's)", 0},
        {"--context", F_INT, &o->context, "N", "positions of a language model (the preset's)", 0},
        {"--vocab", F_INT, &o->vocab, "N", "vocabulary of a language model (the preset's)", 0},
        {"--seq", F_INT, &o->seq, "N", "tokens per window of a language model (its context)", 0},
        {"--attention", F_STR, &o->attention, "FORM", "flash (default) or naive attention of a language model", 0},
        {"--channels", F_INT, &o->in_c, "N", "input channels (1)", 0},
        {"--height", F_INT, &o->in_h, "N", "input height (28)", 0},
        {"--width-px", F_INT, &o->in_w, "N", "input width (28)", 0},
        {"--classes", F_INT, &o->classes, "N", "number of classes (10)", 0},
        {"--seed", F_U64, &o->seed, "N", "seed (1)", 0},
        {"--search", F_STR, &o->search, "WHAT", "graph models: nodes (the largest graph), depth (the most layers) or width (the widest layers) (nodes); language models: batch (the most windows) or seq (the longest window at --batch) (batch)", 0},
        {"--batch", F_INT, &o->batch, "N", "language models, --search seq: windows per step (1)", 0},
        {"--nodes", F_INT, &o->nodes, "N", "graph models, --search depth or width: nodes of the graph (70000)", 0},
        {"--degree", F_FLOAT, &o->degree, "D", "graph models: mean degree of the synthetic graph (10)", 0},
        {"--dropout", F_FLOAT, &o->dropout, "P", "graph models: dropout, whose masks and copies count (actc train's presets: gcn 0.5, gat and gcnii 0.6)", 0},
        {"--threads", F_INT, &o->threads, "N", "threads (default: all cores)", 0},
        {"--json", F_BOOL, &o->json, NULL, "end with the answer as one JSON line (for scripts and actc bench)", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    memcpy(f, defs, sizeof defs);
}

static void on_trial(int batch, int fits, size_t peak, void *user)
{
    const char *what = user ? user : "batch";
    char pk[32];
    printf("  %s %6d: %s (peak %s)\n", what, batch, fits ? "fits" : "over budget", actc_format_bytes(peak, pk, sizeof pk));
    fflush(stdout);
}

/* --search depth / width: a trial is the model with `v` layers (or hidden
 * features) on a graph of --nodes nodes. */
typedef struct {
    actc_maxbatch_opts mo;
    int nodes, width;
    int seq_batch; /* language models, --search seq: the batch; the trial's v is the window */
} shape_search;

static int shape_trial(int v, size_t *peak, void *user)
{
    shape_search *d = user;
    actc_maxbatch_opts o = d->mo;
    if (d->seq_batch) {
        /* The model holds as many positions as the window is long. */
        o.seq = v;
        o.model_opts.context = v;
        return actc_maxbatch_try(&o, d->seq_batch, peak);
    }
    if (d->width) {
        /* GAT's width is heads x features: keep it a multiple of the heads. */
        const int h = o.model_opts.n_heads > 0 ? o.model_opts.n_heads : 1;
        o.model_opts.width = v * h;
    } else {
        o.model_opts.n_layers = v;
    }
    return actc_maxbatch_try(&o, d->nodes, peak);
}

static int cmd_maxbatch(int argc, char **argv)
{
    mb_opts o = {"resnet20", "none", NULL, "flash", 0, 0, 1, 1 << 16, 0, 1, 28, 28, 10, 1, 2, 0, 0, 0, 0, 0, 1, 0,
                 NULL, 70000, 10, -1, 1, 0};
    flag_def flags[MAX_FLAGS];
    build_flags(flags, &o);
    int help, rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, USAGE, ABOUT, flags);
        return 0;
    }
    if (rc) return 2;
    if (!o.budget) {
        fprintf(stderr, "error: --budget SIZE is required (e.g. --budget 2GiB)\n");
        return 2;
    }
    if (o.start < 1 || o.limit < o.start || o.classes < 1 || o.resolution < 1 || o.estimate < 0 || o.threads < 0) {
        fprintf(stderr, "error: need 1 <= --start <= --limit, --classes >= 1, --resolution >= 1, --estimate-samples >= 0 "
                        "and --threads >= 0\n");
        return 2;
    }
    if (strcmp(o.attention, "flash") && strcmp(o.attention, "naive")) {
        fprintf(stderr, "error: --attention must be flash or naive, not '%s'\n", o.attention);
        return 2;
    }
    if (o.width < 0 || o.layers < 0 || o.heads < 0 || o.context < 0 || o.vocab < 0 || o.seq < 0 || o.in_c < 1 ||
        o.in_h < 1 || o.in_w < 1) {
        fprintf(stderr, "error: --width, --layers, --heads, --context, --vocab and --seq must not be negative, the input "
                        "sizes at least 1\n");
        return 2;
    }
    const int gr = actc_model_name_takes_graph(o.model), lm = actc_model_name_takes_tokens(o.model);
    if (!o.search) o.search = gr ? "nodes" : "batch";
    const int width = gr && !strcmp(o.search, "width"), depth = gr && !strcmp(o.search, "depth");
    const int seq = lm && !strcmp(o.search, "seq"), shape = depth || width || seq;
    if (gr && strcmp(o.search, "nodes") && !depth && !width) {
        fprintf(stderr, "error: --search must be nodes, depth or width for a graph model, not '%s'\n", o.search);
        return 2;
    }
    if (lm && strcmp(o.search, "batch") && !seq) {
        fprintf(stderr, "error: --search must be batch or seq for a language model, not '%s'\n", o.search);
        return 2;
    }
    if (!gr && !lm && strcmp(o.search, "batch")) {
        fprintf(stderr, "error: --search %s: model %s has only a batch to search (seq is for language models; nodes, "
                        "depth and width for graph models)\n", o.search, o.model);
        return 2;
    }
    if (!gr && (flag_was_set(flags, "--nodes") || flag_was_set(flags, "--degree"))) {
        fprintf(stderr, "error: --nodes and --degree are for graph models (gcn, gat, gcnii)\n");
        return 2;
    }
    if (flag_was_set(flags, "--batch") && !seq) {
        fprintf(stderr, "error: --batch is the fixed batch of a language model's --search seq\n");
        return 2;
    }
    if (o.batch < 1) {
        fprintf(stderr, "error: --batch must be at least 1\n");
        return 2;
    }
    if (o.nodes < 2 || !(o.degree > 0) || o.degree > 1e6) {
        fprintf(stderr, "error: need --nodes >= 2 and 0 < --degree <= 1e6\n");
        return 2;
    }
    actc_set_threads(o.threads);
    actc_maxbatch_opts mo = actc_maxbatch_default_opts();
    mo.graph_degree = o.degree;
    if (gr && !flag_was_set(flags, "--limit")) o.limit = shape ? 4096 : 1 << 24;
    if (seq && !flag_was_set(flags, "--start")) o.start = 16; /* a window of a few tokens says nothing */
    if (gr && !shape && !flag_was_set(flags, "--start")) o.start = 1024; /* graphs: start at a real size */
    if (gr && !strcmp(o.model, "gat") && o.heads == 0) o.heads = 8; /* the preset's, for --search width */
    /* A graph model's trial runs actc train's recipe: its dropout too. */
    if (gr && o.dropout < 0) o.dropout = !strcmp(o.model, "gcn") ? 0.5f : 0.6f;
    if (o.dropout < 0) o.dropout = 0;
    if (!(o.dropout < 1)) {
        fprintf(stderr, "error: --dropout must be in [0, 1)\n");
        return 2;
    }
    mo.model_opts.dropout = o.dropout;
    mo.budget = o.budget;
    mo.model = o.model;
    mo.model_opts.in_channels = o.in_c;
    mo.model_opts.in_h = o.in_h;
    mo.model_opts.in_w = o.in_w;
    mo.model_opts.num_classes = o.classes;
    mo.model_opts.width = o.width;
    mo.model_opts.seed = o.seed;
    mo.model_opts.n_layers = o.layers;
    mo.model_opts.n_heads = o.heads;
    mo.model_opts.context = o.context;
    mo.model_opts.vocab = o.vocab;
    mo.model_opts.attention = !strcmp(o.attention, "naive") ? ACTC_ATTN_NAIVE : ACTC_ATTN_FLASH;
    mo.seq = o.seq;
    mo.start = o.start;
    mo.limit = o.limit;
    mo.resolution = o.resolution;
    /* actc train's recipe for the model (its optimizer decides the state
     * a trial holds). */
    mo.trainer = actc_trainer_opts_for_model(o.model);
    mo.trainer.policy = o.compress;
    if (o.optim) mo.trainer.optim = o.optim;
    mo.trainer.seed = o.seed;
    mo.trainer.grad_bits = o.grad_bits;
    mo.trainer.controller.estimate_samples = o.estimate;
    /* Fail early with the real reason if the model or an option is bad. */
    if (cli_check_model(o.model, &mo.model_opts, "--model")) return 2;
    if (actc_trainer_check_opts(&mo.trainer) != ACTC_OK) return fail("training options"), 2;

    char bud[32], pk[32];
    actc_format_bytes(o.budget, bud, sizeof bud);
    const char *what = depth ? "layers" : width ? "width" : seq ? "seq" : gr ? "nodes" : "batch";
    if (gr)
        printf("maxbatch: model %s, policy %s, budget %s; %s of a planted-partition graph of mean degree %g, %d "
               "features, dropout %g\n", o.model, o.compress, bud, depth ? "the most layers" : width ? "the widest layers" : "the largest number of nodes",
               o.degree, o.in_c * o.in_h * o.in_w, (double)o.dropout);
    else printf("maxbatch: model %s, policy %s, budget %s\n", o.model, o.compress, bud);
    if (seq) printf("the longest window (tokens, the model's context with it) at batch %d\n", o.batch);
    else if (shape)
        printf("graph: %d nodes%s\n", o.nodes, width && !strcmp(o.model, "gat") ? "; width counts features per head" : "");
    fflush(stdout);
    shape_search ds = {mo, o.nodes, width, seq ? o.batch : 0};
    if (shape) {
        mo.trial = shape_trial;
        mo.trial_user = &ds;
    }
    actc_maxbatch_result r;
    if (actc_maxbatch(&mo, on_trial, (void *)what, &r) != ACTC_OK) {
        fprintf(stderr, "error: %s\n", actc_last_error());
        return 1;
    }
    printf("largest %s: %d (peak %s of %s)%s\n", depth ? "depth" : width ? "width" : seq ? "window" : gr ? "graph" : "batch", r.batch,
           actc_format_bytes(r.peak, pk, sizeof pk), bud,
           !r.failing ? " - the --limit was reached" : r.failing - r.batch > 1 ? " - bisection stopped at --resolution" : "");
    if (r.failing && r.failing - r.batch > 1) printf("smallest failing %s tried: %d\n", what, r.failing);
    if (o.json)
        printf("{\"model\":\"%s\",\"policy\":\"%s\",\"budget\":%zu,\"search\":\"%s\",\"largest\":%d,\"peak\":%zu,"
               "\"failing\":%d,\"peak_rss\":%zu}\n", o.model, o.compress, o.budget, o.search, r.batch, r.peak, r.failing,
               actc_process_peak_rss());
    return 0;
}

const command cmd_maxbatch_def = {"maxbatch", "largest batch whose training step fits a memory budget", USAGE, ABOUT,
                                  build_flags, sizeof(mb_opts), cmd_maxbatch};
