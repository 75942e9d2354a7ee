/* actc generate: continue a prompt with a language model from a checkpoint,
 * sampling one byte at a time (temperature, top-k), streamed to stdout. */
#include "cli.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Index drawn from softmax(logits / temperature) over the k largest logits
 * (k = 0: all; ties at the cut go to the lower index); temperature 0 is the
 * argmax.  u is uniform in [0, 1); prob and order are V-entry scratch. */
static int sample(const float *logits, int V, float temperature, int k, float u, float *prob, int *order)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature == 0.0f) return best;
    if (k <= 0 || k > V) k = V;
    /* The k largest first: a partial selection sort of the indices. */
    for (int i = 0; i < V; i++) order[i] = i;
    for (int j = 0; j < k && k < V; j++) {
        int m = j;
        for (int i = j + 1; i < V; i++)
            if (logits[order[i]] > logits[order[m]]) m = i;
        int t = order[j];
        order[j] = order[m];
        order[m] = t;
    }
    double sum = 0;
    for (int j = 0; j < k; j++) {
        prob[j] = (float)exp((double)(logits[order[j]] - logits[best]) / temperature);
        sum += prob[j];
    }
    double r = (double)u * sum, acc = 0;
    for (int j = 0; j < k; j++) {
        acc += prob[j];
        if (r < acc) return order[j];
    }
    return best;
}

typedef struct {
    const char *ckpt, *prompt;
    int tokens, top_k, threads;
    float temperature;
    uint64_t seed;
} gen_opts;

static const char USAGE[] = "actc generate --checkpoint FILE [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]";
static const char ABOUT[] = "Continue the prompt with the language model of a checkpoint, one byte at a time,\n"
                           "printing the prompt and then each byte as it comes.  The model sees the last\n"
                           "bytes of the text so far, as many as it was trained on (--seq, or its context).";

static void build_flags(flag_def *f, void *opts)
{
    gen_opts *o = opts;
    flag_def defs[] = {
        {"--checkpoint", F_STR, &o->ckpt, "FILE", "checkpoint of a language model (actc train --save) (required)", 0},
        {"--prompt", F_STR, &o->prompt, "TEXT", "text to continue, any bytes (a newline)", 0},
        {"--tokens", F_INT, &o->tokens, "N", "bytes to generate (200)", 0},
        {"--temperature", F_FLOAT, &o->temperature, "T", "sampling temperature; 0 = always the likeliest byte (0.8)", 0},
        {"--top-k", F_INT, &o->top_k, "K", "sample among the K likeliest bytes only; 0 = all (0)", 0},
        {"--seed", F_U64, &o->seed, "N", "seed of the sampling (1)", 0},
        {"--threads", F_INT, &o->threads, "N", "threads (default: all cores)", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    memcpy(f, defs, sizeof defs);
}

static int cmd_generate(int argc, char **argv)
{
    gen_opts go = {NULL, "\n", 200, 0, 0, 0.8f, 1};
    flag_def flags[MAX_FLAGS];
    build_flags(flags, &go);
    int help, rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, USAGE, ABOUT, flags);
        return 0;
    }
    const char *ckpt = go.ckpt, *prompt = go.prompt;
    const int tokens = go.tokens, top_k = go.top_k, threads = go.threads;
    const float temperature = go.temperature;
    const uint64_t seed = go.seed;
    if (rc) return 2;
    if (!ckpt) {
        fprintf(stderr, "error: --checkpoint FILE is required\n");
        return 2;
    }
    if (tokens < 0 || top_k < 0 || threads < 0 || !(temperature >= 0) || !isfinite(temperature)) {
        fprintf(stderr, "error: need --tokens >= 0, --top-k >= 0, --threads >= 0 and a finite --temperature >= 0\n");
        return 2;
    }
    if (!prompt[0]) prompt = "\n";
    actc_set_threads(threads);
    actc_ckpt_info meta;
    actc_model *m = NULL;
    if (model_from_checkpoint(ckpt, &meta, &m)) return 1;
    rc = 1;
    actc_ctx *ctx = NULL;
    int32_t *text = NULL;
    float *prob = NULL;
    int *order = NULL;
    if (!actc_model_takes_tokens(m)) {
        fprintf(stderr, "error: %s holds model %s, an image classifier: generate needs a language model "
                        "(gpt-mini, llama-mini, gpt, llama, gpt2-124m)\n", ckpt, meta.model);
        goto out;
    }
    const actc_model_opts *mo = actc_model_get_opts(m);
    /* The model sees at most the window length it was trained on. */
    actc_run_recipe rec;
    memset(&rec, 0, sizeof rec);
    cli_recipe_from_checkpoint(&meta, &rec);
    const int V = mo->vocab, seq = rec.seq;
    const int C = seq > 0 && seq < mo->context ? seq : mo->context;
    if (top_k > V) {
        fprintf(stderr, "error: --top-k %d is over the model's vocabulary of %d\n", top_k, V);
        goto out;
    }
    size_t np = strlen(prompt), cap = np + (size_t)tokens;
    text = malloc(cap * sizeof *text);
    prob = malloc((size_t)V * sizeof *prob);
    order = malloc((size_t)V * sizeof *order);
    if (!text || !prob || !order || !(ctx = actc_ctx_new())) {
        fprintf(stderr, "error: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < np; i++) {
        text[i] = (unsigned char)prompt[i];
        if (text[i] >= V) {
            fprintf(stderr, "error: the prompt's byte %zu (value %d) is outside the model's vocabulary of %d\n", i,
                    text[i], V);
            goto out;
        }
    }
    actc_ctx_set_training(ctx, 0);
    fwrite(prompt, 1, np, stdout);
    fflush(stdout);
    for (size_t n = np; n < cap; n++) {
        int T = n < (size_t)C ? (int)n : C;
        actc_tensor *logits = actc_model_forward_tokens(m, ctx, text + n - (size_t)T, 1, T);
        if (!logits) {
            fprintf(stderr, "\nerror: %s\n", actc_last_error());
            goto out;
        }
        float u = actc_rand_uniform(actc_rng_key(seed, 0x67656E, 0), n);
        text[n] = sample(logits->data + (size_t)(T - 1) * V, V, temperature, top_k, u, prob, order);
        actc_tensor_release(logits);
        putchar(text[n] < 256 ? text[n] : '?');
        fflush(stdout);
    }
    putchar('\n');
    rc = 0;
out:
    free(text);
    free(prob);
    free(order);
    actc_ctx_free(ctx);
    actc_model_free(m);
    return rc;
}

const command cmd_generate_def = {"generate", "continue a prompt with a language model's checkpoint", USAGE, ABOUT,
                                  build_flags, sizeof(gen_opts), cmd_generate};
