/* actc inspect: what a policy does to a model.  Builds the model, takes one
 * real batch (Fashion-MNIST for image models, the text corpus for language
 * models) and runs a step.  For every policy: the context before backward
 * of the whole step against `none`'s, each from a real step (actc train's
 * memory table heads with the same ratio, measuring `none` by a counting
 * forward).  For gact: lets the
 * controller measure every saved tensor's sensitivity and allocate bits, and
 * prints per tensor the operator that saved it, its shape, c_l, the bits
 * chosen and its stored bytes.  For compact (alone or over a codec policy):
 * the same step without compact too, and per category (CONTEXT, GRAD,
 * OPTIM) what compact removed.  For agoq: one forward pass with and without
 * it, and one block's context per component of AGoQ's Table 1. */
#include "cli.h"
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
typedef struct {
    const char *model, *compress, *log_path, *data_spec;
    int batch, threads, seq, layers, width, heads, context;
    uint64_t seed;
    actc_controller_opts co;
    data_opts d;
} inspect_opts;

static const char USAGE[] = "actc inspect --compress SPEC [--model NAME] [--batch N]";
static const char ABOUT[] = "Any policy: one training step with it and one with none, and the context\n"
                           "before backward of each (every save backward reads, the loss's too): the\n"
                           "ratio actc train's memory table heads with.  And by policy:\n"
                           "gact: measure the sensitivity of every tensor the model saves for backward on\n"
                           "one real batch, allocate bits as the policy does, and print the table:\n"
                           "operator, scope, shape, sensitivity c_l, bits and stored bytes per tensor.\n"
                           "compact (compact:...[+P]): run one training step with and without compact\n"
                           "(P alone) and print, per category, the bytes compact removed: the context\n"
                           "saved for backward, the gradients and the optimizer state (and P's table\n"
                           "when P is a gact policy).\n"
                           "agoq (agoq[:...]): one forward pass of a transformer with and without it, and\n"
                           "the context one block keeps per component (QKV input, attention, output\n"
                           "projection input, norm, FFN1 input, activation function, FFN2 input) in\n"
                           "AGoQ's unit U = batch x seq x hidden x 2 bytes, next to the paper's Table 1.";

static void build_flags(flag_def *f, void *opts)
{
    inspect_opts *o = opts;
    flag_def defs[] = {
        {"--model", F_STR, &o->model, "NAME", "model (resnet20)", 0},
        {"--compress", F_STR, &o->compress, "SPEC", "any policy; gact (gact:4, gact:fix4, gact:CB1 ...), compact (compact:r=0.25[+gact:4]) and agoq add their tables (required)", 0},
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

/* The data, read once for every run of the command (a policy's and
 * none's): a corpus given as a pipe can be read only once. */
static struct {
    actc_image_dataset train;
    actc_text_corpus corpus;
    int have_train, have_corpus;
} g_data;

static void data_free(void)
{
    if (g_data.have_corpus) actc_text_free(&g_data.corpus);
    if (g_data.have_train) actc_image_dataset_free(&g_data.train);
    memset(&g_data, 0, sizeof g_data);
}

/* One model, trainer and batch of a policy. */
typedef struct {
    actc_model *m;
    actc_trainer *t;
    int samples;
    actc_source *src;
    actc_batch b;
} run;

static void run_close(run *r)
{
    actc_source_free(r->src);
    actc_trainer_free(r->t);
    actc_model_free(r->m);
    memset(r, 0, sizeof *r);
}

/* 0, or prints why and returns 2 (bad flags) or 1. */
static int run_open(const inspect_opts *o, const char *policy, run *r)
{
    memset(r, 0, sizeof *r);
    actc_model_opts mo = actc_model_default_opts();
    mo.seed = o->seed;
    mo.n_layers = o->layers;
    mo.width = o->width;
    mo.n_heads = o->heads;
    mo.context = o->context;
    if (actc_model_create(o->model, &mo, &r->m) != ACTC_OK) return fail("--model"), 2;
    actc_trainer_opts to = actc_trainer_default_opts();
    to.policy = policy;
    to.seed = o->seed;
    to.controller = o->co;
    to.controller.adapt_interval = 1;
    if (actc_model_takes_tokens(r->m)) to.optim = "adamw"; /* as actc train's language models */
    if (actc_trainer_new(r->m, &to, &r->t) != ACTC_OK) return fail("--compress"), run_close(r), 2;
    actc_status s;
    if (actc_model_takes_tokens(r->m)) {
        const int T = o->seq ? o->seq : actc_model_get_opts(r->m)->context;
        if (!g_data.have_corpus && text_open(o->data_spec ? o->data_spec : "text", &g_data.corpus))
            return run_close(r), 1;
        g_data.have_corpus = 1;
        r->samples = o->batch ? o->batch : 16;
        s = actc_source_text(&g_data.corpus, r->samples, T, o->seed, 1, &r->src);
    } else {
        if (!g_data.have_train && data_load(&o->d, &g_data.train, NULL)) return run_close(r), 1;
        g_data.have_train = 1;
        actc_loader_opts lopt = {FMNIST_MEAN, FMNIST_STD, 0, 0, 1, o->seed};
        r->samples = o->batch ? o->batch : 128;
        s = actc_source_images(&g_data.train, r->samples, 1, &lopt, &r->src);
    }
    if (s != ACTC_OK || actc_source_get(r->src, 0, 0, 0, &r->b) != ACTC_OK) return fail("data"), run_close(r), 1;
    return 0;
}

/* After a step: the context before backward, the gradients' bytes and the
 * optimizer state's. */
static void category_bytes(run *r, size_t out[3])
{
    actc_store_stats ss;
    actc_store_get_stats(actc_trainer_ctx(r->t), &ss);
    out[0] = ss.forward_bytes;
    out[1] = out[2] = 0;
    actc_tensor **ps, **st;
    const int np = actc_model_params(r->m, &ps);
    for (int i = 0; i < np; i++) {
        actc_grad_info gi;
        actc_grad_get_info(ps[i], &gi);
        out[1] += gi.bytes;
    }
    const int ns = actc_optim_state(actc_trainer_optim(r->t), &st);
    for (int i = 0; i < ns; i++) out[2] += st[i]->numel * sizeof(float);
}

/* The step of policy: its bytes by category with the gradients still held
 * (backward, then the optimizer's state made by one update). */
static int step_bytes(const inspect_opts *o, const char *policy, size_t out[3], run *keep)
{
    run r;
    int rc = run_open(o, policy, &r);
    if (rc) return rc;
    actc_step_result sr;
    if (actc_trainer_backward(r.t, &r.b, &sr) != ACTC_OK ||
        actc_optim_step(actc_trainer_optim(r.t), 0.0f) != ACTC_OK) {
        fprintf(stderr, "error: the step of %s failed: %s\n", policy, actc_last_error());
        run_close(&r);
        return 1;
    }
    category_bytes(&r, out);
    if (keep) *keep = r;
    else run_close(&r);
    return 0;
}

/* The whole step's context before backward under the policy (pol bytes;
 * canon its canonical spec) against a real step under none, printed, and
 * logged as an inspect_context event. */
static int context_vs_none(const inspect_opts *o, const char *canon, size_t pol, FILE *log)
{
    size_t none[3];
    int rc = step_bytes(o, "none", none, NULL);
    if (rc) return rc;
    const double ratio = pol ? (double)none[0] / (double)pol : 0.0;
    printf("context before backward, the whole step (every save backward reads, the loss's too):\n"
           "  none %zu bytes, %s %zu bytes: %.2fx smaller\n",
           none[0], canon, pol, ratio);
    if (log)
        fprintf(log, "{\"event\":\"inspect_context\",\"model\":\"%s\",\"policy\":\"%s\",\"none\":%zu,\"stored\":%zu,"
                     "\"ratio\":%.4f}\n",
                o->model, canon, none[0], pol, ratio);
    return 0;
}

/* Any other policy: the whole step's context against none's. */
static int inspect_context(const inspect_opts *o, FILE *log)
{
    size_t pol[3];
    run r;
    int rc = step_bytes(o, o->compress, pol, &r);
    if (rc) return rc;
    char canon[ACTC_POLICY_MAX];
    snprintf(canon, sizeof canon, "%s", actc_trainer_get_opts(r.t)->policy);
    printf("inspect: model %s, policy %s, batch %d\n", o->model, canon, r.samples);
    run_close(&r);
    return context_vs_none(o, canon, pol[0], log);
}

static int inspect_compact(const inspect_opts *o, FILE *log)
{
    /* The codec part of a composed spec: after the '+' a policy name
     * (a letter) follows, as the library parses it. */
    const char *plus = o->compress;
    while ((plus = strchr(plus, '+')) && !isalpha((unsigned char)plus[1])) plus++;
    const char *codec = plus ? plus + 1 : "none";
    size_t with[3], without[3];
    run r;
    int rc = step_bytes(o, o->compress, with, &r);
    if (rc) return rc;
    if ((rc = step_bytes(o, codec, without, NULL))) return run_close(&r), rc;
    static const char *const names[3] = {"CONTEXT", "GRAD", "OPTIM"};
    printf("inspect: model %s, policy %s against %s, batch %d: what compact removed\n", o->model,
           actc_trainer_get_opts(r.t)->policy, codec, r.samples);
    printf("  %-8s %14s %14s %14s\n", "category", "without", "with compact", "removed");
    for (int k = 0; k < 3; k++) {
        char a[32], b[32], c[32];
        const size_t gone = without[k] > with[k] ? without[k] - with[k] : 0;
        printf("  %-8s %14s %14s %14s (%.1f%%)\n", names[k], actc_format_bytes(without[k], a, sizeof a),
               actc_format_bytes(with[k], b, sizeof b), actc_format_bytes(gone, c, sizeof c),
               without[k] ? 100.0 * (double)gone / (double)without[k] : 0.0);
    }
    printf("  (CONTEXT: saved for backward, at the end of the forward pass; GRAD: the gradients before the update;\n"
           "   OPTIM: the optimizer's state)\n");
    const actc_controller *ctrl = actc_trainer_controller(r.t);
    if (!strncasecmp(codec, "gact:", 5)) actc_controller_report_file(ctrl, ACTC_REPORT_TEXT, stdout);
    if (log)
        fprintf(log, "{\"event\":\"inspect\",\"model\":\"%s\",\"policy\":\"%s\",\"without\":{\"context\":%zu,"
                     "\"grad\":%zu,\"optim\":%zu},\"with\":{\"context\":%zu,\"grad\":%zu,\"optim\":%zu}}\n",
                o->model, actc_trainer_get_opts(r.t)->policy, without[0], without[1], without[2], with[0], with[1],
                with[2]);
    char canon[ACTC_POLICY_MAX];
    snprintf(canon, sizeof canon, "%s", actc_trainer_get_opts(r.t)->policy);
    run_close(&r);
    return context_vs_none(o, canon, with[0], log);
}

/* ---- agoq: the context of one transformer block per component ----------------------- */

/* AGoQ's Table 1 components, and the paper's figures for them (U). */
enum { C_QKV, C_ATTN, C_PROJ, C_NORM, C_FFN1, C_ACT, C_FFN2, C_OTHER, C_N };
static const char *const comp_names[C_N] = {"QKV input",  "attention",           "output projection input",
                                            "norm",       "FFN1 input",          "activation function",
                                            "FFN2 input", "other (unclassified)"};
static const double paper_megatron[C_N] = {1, 5, 1, 4, 1, 12, 4, 0};
static const double paper_agoq[C_N] = {0, 5, 0.25, 0.5, 0, 2, 0, 0};

/* Which component of block `block` a payload belongs to (-1: another
 * block, the embedding or the head).  In the attention scope the first
 * linear input is Q/K/V's (saved once for the three), a later one the
 * output projection's (unless the attention's saved output stands for it);
 * in the MLP scope a linear input of the model's width is FFN1's (and the
 * gate's), a wider one FFN2's. */
static int component(const actc_store_item *it, int block, int width, int *seen_linear)
{
    char attn[32], mlp[32];
    snprintf(attn, sizeof attn, "h%d.attn", block);
    snprintf(mlp, sizeof mlp, "h%d.mlp", block);
    const int in_attn = !strcmp(it->scope, attn), in_mlp = !strcmp(it->scope, mlp);
    if (!in_attn && !in_mlp) return -1;
    if (actc_role_is_attention(it->role) || it->role == ACTC_ROLE_SOFTMAX_OUT || it->role == ACTC_ROLE_MATMUL_IN)
        return in_attn ? C_ATTN : C_OTHER;
    switch (it->role) {
    case ACTC_ROLE_NORM_IN:
    case ACTC_ROLE_STATS: return C_NORM;
    case ACTC_ROLE_LINEAR_IN:
        if (in_attn) return (*seen_linear)++ ? C_PROJ : C_QKV;
        return it->ndim > 0 && it->shape[it->ndim - 1] == width ? C_FFN1 : C_FFN2;
    case ACTC_ROLE_ACT_IN:
    case ACTC_ROLE_ACT_DERIV:
    case ACTC_ROLE_MUL_IN:
    case ACTC_ROLE_MASK: return in_mlp ? C_ACT : C_OTHER;
    default: return C_OTHER;
    }
}

/* The forward pass of policy on the batch: bytes per component of block 0,
 * the block's measured total and the whole store's (stats). */
static int forward_components(const inspect_opts *o, const char *policy, size_t comp[C_N], size_t *block_total,
                              size_t *all, char *canon, size_t canon_cap, int *samples, int *tokens)
{
    run r;
    int rc = run_open(o, policy, &r);
    if (rc) return rc;
    actc_ctx *ctx = actc_trainer_ctx(r.t);
    actc_ctx_set_training(ctx, 1);
    actc_tensor *y = actc_model_forward_batch(r.m, ctx, &r.b);
    if (!y) {
        fprintf(stderr, "error: the forward pass of %s failed: %s\n", policy, actc_last_error());
        run_close(&r);
        return 1;
    }
    const int n = actc_store_list(ctx, NULL, 0);
    actc_store_item *items = calloc((size_t)n + 1, sizeof *items);
    if (!items) {
        actc_tensor_release(y);
        run_close(&r);
        return fail("memory"), 1;
    }
    actc_store_list(ctx, items, n);
    memset(comp, 0, C_N * sizeof *comp);
    *block_total = *all = 0;
    int seen_linear = 0;
    const int width = actc_model_get_opts(r.m)->width;
    for (int i = 0; i < n; i++) {
        *all += items[i].stored_bytes;
        const int c = component(&items[i], 0, width, &seen_linear);
        if (c < 0) continue;
        comp[c] += items[i].stored_bytes;
        *block_total += items[i].stored_bytes;
    }
    actc_store_stats ss;
    actc_store_get_stats(ctx, &ss);
    if (ss.stored_bytes != *all) {
        fprintf(stderr, "error: the store lists %zu bytes but counts %zu\n", *all, ss.stored_bytes);
        rc = 1;
    }
    snprintf(canon, canon_cap, "%s", actc_trainer_get_opts(r.t)->policy);
    *samples = r.b.B;
    *tokens = r.b.T;
    free(items);
    actc_tensor_release(y);
    actc_ctx_reset(ctx);
    run_close(&r);
    return rc;
}

static int inspect_agoq(const inspect_opts *o, FILE *log)
{
    size_t c_pol[C_N], c_none[C_N], blk_pol, blk_none, all_pol, all_none;
    char canon[ACTC_POLICY_MAX], none[ACTC_POLICY_MAX];
    int B, T;
    int rc = forward_components(o, o->compress, c_pol, &blk_pol, &all_pol, canon, sizeof canon, &B, &T);
    if (!rc) rc = forward_components(o, "none", c_none, &blk_none, &all_none, none, sizeof none, &B, &T);
    if (rc) return rc;
    actc_model *m;
    actc_model_opts mo = actc_model_default_opts();
    mo.width = o->width;
    if (actc_model_create(o->model, &mo, &m) != ACTC_OK) return fail("--model"), 2;
    const int D = actc_model_get_opts(m)->width, llama = !strncmp(o->model, "llama", 5);
    actc_model_free(m);
    const double U = (double)B * T * D * 2.0;
    char ub[32];
    printf("inspect: model %s, policy %s against none, batch %d x %d tokens, width %d\n", o->model, canon, B, T, D);
    printf("context saved for backward by one block (h0), in U = batch x seq x hidden x 2 bytes = %s\n",
           actc_format_bytes((size_t)U, ub, sizeof ub));
    printf("(actc trains in fp32: an exact tensor of the model's width is 2U; the paper's columns are bf16)\n");
    printf("  %-26s %10s %10s %16s %14s\n", "component", "none", "policy", "Megatron (paper)", "AGoQ (paper)");
    double tp = 0, ta = 0;
    for (int c = 0; c < C_N; c++) {
        if (c == C_OTHER && !c_pol[c] && !c_none[c]) continue;
        const char *name = c == C_NORM ? (llama ? "RMSNorm" : "LayerNorm") : comp_names[c];
        printf("  %-26s %9.2fU %9.2fU %15.2fU %13.2fU\n", name, c_none[c] / U, c_pol[c] / U, paper_megatron[c],
               paper_agoq[c]);
        tp += paper_megatron[c];
        ta += paper_agoq[c];
    }
    printf("  %-26s %9.2fU %9.2fU %15.2fU %13.2fU\n", "total", blk_none / U, blk_pol / U, tp, ta);
    printf("  block total: none %zu bytes, policy %zu bytes (the components sum to it); %.2fx smaller\n", blk_none,
           blk_pol, blk_pol ? (double)blk_none / (double)blk_pol : 0.0);
    printf("  forward alone (embedding, every block, head; no loss): none %zu bytes, policy %zu bytes: %.2fx "
           "smaller\n",
           all_none, all_pol, all_pol ? (double)all_none / (double)all_pol : 0.0);
    if (c_pol[C_PROJ] == 0 && c_pol[C_ATTN])
        printf("  (the output projection reads the attention's output, which the attention keeps: one payload,\n"
               "   counted under attention)\n");
    if (log) {
        fprintf(log, "{\"event\":\"inspect\",\"model\":\"%s\",\"policy\":\"%s\",\"unit_bytes\":%.0f,\"block\":{",
                o->model, canon, U);
        static const char *const keys[C_N] = {"qkv_in", "attention", "proj_in", "norm", "ffn1_in", "act", "ffn2_in",
                                              "other"};
        for (int c = 0; c < C_N; c++)
            fprintf(log, "%s\"%s\":{\"none\":%zu,\"policy\":%zu}", c ? "," : "", keys[c], c_none[c], c_pol[c]);
        fprintf(log, "},\"block_total\":{\"none\":%zu,\"policy\":%zu},\"total\":{\"none\":%zu,\"policy\":%zu}}\n",
                blk_none, blk_pol, all_none, all_pol);
    }
    size_t step[3];
    if ((rc = step_bytes(o, o->compress, step, NULL))) return rc;
    return context_vs_none(o, canon, step[0], log);
}

static int inspect_gact(const inspect_opts *o, FILE *log)
{
    run r;
    int rc = run_open(o, o->compress, &r);
    if (rc) return rc;
    if (actc_trainer_backward(r.t, &r.b, NULL) != ACTC_OK) {
        fprintf(stderr, "error: the step failed: %s\n", actc_last_error());
        run_close(&r);
        return 1;
    }
    const actc_controller *ctrl = actc_trainer_controller(r.t);
    size_t pol[3];
    category_bytes(&r, pol);
    printf("inspect: model %s, policy %s, batch %d, sensitivity passes on %d sample(s) at 4 bits\n", o->model,
           actc_trainer_get_opts(r.t)->policy, r.samples,
           o->co.estimate_samples && o->co.estimate_samples < r.samples ? o->co.estimate_samples : r.samples);
    actc_controller_report_file(ctrl, ACTC_REPORT_TEXT, stdout);
    if (log) {
        fprintf(log, "{\"event\":\"inspect\",\"model\":\"%s\",\"policy\":\"%s\",\"tensors\":", o->model,
                actc_trainer_get_opts(r.t)->policy);
        actc_controller_report_file(ctrl, ACTC_REPORT_JSON, log);
        fprintf(log, "}\n");
    }
    char canon[ACTC_POLICY_MAX];
    snprintf(canon, sizeof canon, "%s", actc_trainer_get_opts(r.t)->policy);
    run_close(&r);
    return context_vs_none(o, canon, pol[0], log);
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
    const int compact = o.compress && !strncasecmp(o.compress, "compact", 7);
    const int agoq = o.compress && !strncasecmp(o.compress, "agoq", 4) && (!o.compress[4] || o.compress[4] == ':');
    const int gact = o.compress && !strncasecmp(o.compress, "gact:", 5);
    if (!o.compress) {
        fprintf(stderr, "error: --compress is required: the policy to inspect (any; gact, compact and agoq add "
                        "what GACT measures and allocates, what CompAct removes, where AGoQ's bytes go)\n");
        return 2;
    }
    if (agoq && strncmp(o.model, "llama", 5) && strncmp(o.model, "gpt", 3)) {
        fprintf(stderr, "error: inspect --compress agoq shows a transformer block (--model llama-mini, gpt-mini, ...)\n");
        return 2;
    }
    if (o.batch < 0 || o.seq < 0 || o.co.estimate_samples < 0 || o.layers < 0 || o.width < 0 || o.heads < 0 ||
        o.context < 0 || o.threads < 0) {
        fprintf(stderr, "error: --batch, --seq, --estimate-samples, --threads and the model sizes must not be negative\n");
        return 2;
    }
    actc_set_threads(o.threads);
    FILE *log = NULL;
    if (o.log_path && !(log = fopen(o.log_path, "a"))) {
        fprintf(stderr, "error: --log %s: cannot open for appending\n", o.log_path);
        return 1;
    }
    rc = compact ? inspect_compact(&o, log)
         : agoq  ? inspect_agoq(&o, log)
         : gact  ? inspect_gact(&o, log)
                 : inspect_context(&o, log);
    data_free();
    if (log) fclose(log);
    return rc;
}

const command cmd_inspect_def = {"inspect", "a policy's context before backward against none's; GACT's per-tensor bits, CompAct's and AGoQ's bytes", USAGE,
                                 ABOUT, build_flags, sizeof(inspect_opts), cmd_inspect};
