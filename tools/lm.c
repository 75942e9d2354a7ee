/* Language-model pieces of the actc command: the text corpus behind --data
 * text[:PATH], the training step on random windows, validation loss in bits
 * per byte, and the unigram baseline it is judged against. */
#include "cli.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The default corpus: $ACTC_TEXT, else data/kjv.txt next to the actc program
 * (the Makefile's `make corpus` writes build/data/kjv.txt). */
static int default_corpus(char *buf, size_t cap)
{
    const char *env = getenv("ACTC_TEXT");
    if (env && *env) return snprintf(buf, cap, "%s", env) < (int)cap ? 0 : -1;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = '\0';
    return snprintf(buf, cap, "%s/data/kjv.txt", exe) < (int)cap ? 0 : -1;
}

int text_spec(const char *spec) { return spec && (!strcmp(spec, "text") || !strncmp(spec, "text:", 5)); }

int text_open(const char *spec, actc_text_corpus *c)
{
    char path[PATH_MAX + 16];
    int is_default = !strcmp(spec, "text");
    if (is_default) {
        if (default_corpus(path, sizeof path) != 0) {
            fprintf(stderr, "error: --data text: cannot locate the default corpus; pass --data text:PATH\n");
            return 1;
        }
        if (access(path, R_OK) != 0) {
            fprintf(stderr,
                    "error: --data text: the default corpus %s is missing: run `make corpus` (it extracts the King "
                    "James Bible from Debian's bible-kjv), set ACTC_TEXT, or pass --data text:PATH\n",
                    path);
            return 1;
        }
    } else {
        snprintf(path, sizeof path, "%s", spec + 5);
        if (!path[0]) {
            fprintf(stderr, "error: --data text: needs a file or directory after the colon\n");
            return 1;
        }
    }
    if (actc_text_load(path, TEXT_VAL_FRACTION, c) != ACTC_OK) {
        fprintf(stderr, "error: --data %s: %s\n", spec, actc_last_error());
        return 1;
    }
    return 0;
}

int text_check_windows(const actc_text_corpus *c, int T)
{
    size_t tr = c->train_end, va = c->n - c->train_end;
    if (tr < (size_t)T + 1 || va < (size_t)T + 1) {
        fprintf(stderr,
                "error: the corpus %s is too short for windows of %d tokens: its train part has %zu bytes and its "
                "validation part %zu (each needs at least %d); use a longer text (or train with a smaller --seq)\n",
                c->source, T, tr, va, T + 1);
        return 1;
    }
    return 0;
}

lm_batch *lm_batch_new(int B, int T)
{
    lm_batch *b = calloc(1, sizeof *b);
    size_t n = (size_t)B * T;
    if (!b || !(b->window = malloc((n + (size_t)B) * sizeof(int32_t))) || !(b->ids = malloc(n * sizeof(int32_t))) ||
        !(b->targets = malloc(n * sizeof(int32_t)))) {
        lm_batch_free(b);
        actc_set_error(ACTC_ERR_OOM, "out of memory for a batch of %d x %d tokens", B, T);
        return NULL;
    }
    b->B = B;
    b->T = T;
    return b;
}

void lm_batch_free(lm_batch *b)
{
    if (!b) return;
    free(b->window);
    free(b->ids);
    free(b->targets);
    free(b);
}

/* Split B windows of T+1 bytes into inputs and next-byte targets. */
static void split_windows(lm_batch *b)
{
    for (int r = 0; r < b->B; r++)
        for (int t = 0; t < b->T; t++) {
            b->ids[(size_t)r * b->T + t] = b->window[(size_t)r * (b->T + 1) + t];
            b->targets[(size_t)r * b->T + t] = b->window[(size_t)r * (b->T + 1) + t + 1];
        }
}

actc_status lm_forward_loss(actc_model *m, actc_ctx *ctx, const lm_batch *b, actc_tensor **loss, int *correct)
{
    actc_tensor *logits = actc_model_forward_tokens(m, ctx, b->ids, b->B, b->T);
    if (!logits) return actc_last_status();
    *loss = actc_cross_entropy(ctx, logits, b->targets, -1, correct);
    actc_tensor_release(logits);
    return *loss ? ACTC_OK : actc_last_status();
}

typedef struct {
    actc_model *m;
    const lm_batch *b;
    step_result *r;
} lm_pass;

/* Forward and backward of the batch's windows, or of its first max_samples. */
static actc_status lm_fwdbwd(actc_ctx *ctx, void *user, int max_samples, int *samples)
{
    const lm_pass *p = user;
    lm_batch sub = *p->b;
    if (max_samples > 0 && max_samples < sub.B) sub.B = max_samples;
    *samples = sub.B;
    actc_ctx_set_training(ctx, 1);
    return loss_backward(ctx, actc_model_forward_tokens(p->m, ctx, sub.ids, sub.B, sub.T), sub.targets, p->r);
}

actc_status lm_step(actc_model *m, actc_ctx *ctx, actc_controller *ctrl, actc_optim *opt, const lm_batch *b,
                    float lr, float clip, step_result *r)
{
    lm_pass p = {m, b, r};
    actc_status s = run_fwdbwd(m, ctx, ctrl, lm_fwdbwd, &p);
    return s == ACTC_OK ? apply_update(m, opt, lr, clip, r) : s;
}

actc_status lm_train_step(actc_model *m, actc_ctx *ctx, actc_controller *ctrl, actc_optim *opt,
                          const actc_text_corpus *c, lm_batch *b,
                          uint64_t seed, uint64_t step, float lr, float clip, step_result *r)
{
    actc_status s = actc_text_batch(c, 0, b->B, b->T, seed, step, b->window);
    if (s != ACTC_OK) return s;
    split_windows(b);
    return lm_step(m, ctx, ctrl, opt, b, lr, clip, r);
}

/* Validation: n windows of T+1 bytes spread evenly over the held-out part
 * (first at its start, last at its end), n = eval_tokens / T; or, when
 * eval_tokens is 0, windows every T bytes, so that every byte of the part
 * but the first (and a tail shorter than a window) is predicted exactly once,
 * from the bytes before it in its window.  The loss is the mean over every
 * position of every window. */
actc_status lm_evaluate(actc_model *m, actc_ctx *ctx, const actc_text_corpus *c, int T, long eval_tokens, int batch,
                        double *loss, double *acc)
{
    const uint8_t *val = c->data + c->train_end;
    const size_t len = c->n - c->train_end, span = len - (size_t)T - 1; /* last window start */
    size_t n = eval_tokens > 0 ? (size_t)eval_tokens / (size_t)T : (len - 1) / (size_t)T;
    if (n < 1) n = 1;
    if (n > span + 1) n = span + 1;
    int B = batch < (int)n ? batch : (int)n;
    lm_batch *b = lm_batch_new(B, T);
    if (!b) return actc_last_status();
    int was_training = actc_ctx_training(ctx);
    actc_ctx_set_training(ctx, 0);
    double total = 0;
    long correct = 0, counted = 0;
    actc_status s = ACTC_OK;
    for (size_t w0 = 0; w0 < n && s == ACTC_OK; w0 += (size_t)B) {
        int nb = (int)(n - w0 < (size_t)B ? n - w0 : (size_t)B);
        for (int r = 0; r < nb; r++) {
            size_t w = w0 + (size_t)r;
            size_t off = eval_tokens == 0 ? w * (size_t)T : (n > 1 ? w * span / (n - 1) : 0);
            for (int t = 0; t <= T; t++) b->window[(size_t)r * (T + 1) + t] = val[off + (size_t)t];
        }
        b->B = nb;
        split_windows(b);
        actc_tensor *lt = NULL;
        int cr = 0;
        if ((s = lm_forward_loss(m, ctx, b, &lt, &cr)) != ACTC_OK) break;
        total += (double)lt->data[0] * nb * T;
        actc_tensor_release(lt);
        correct += cr;
        counted += (long)nb * T;
    }
    actc_ctx_set_training(ctx, was_training);
    lm_batch_free(b);
    if (s != ACTC_OK) return s;
    *loss = total / (double)counted;
    *acc = (double)correct / (double)counted;
    return ACTC_OK;
}

double lm_unigram_bpb(const actc_text_corpus *c)
{
    /* Byte frequencies of the train part (add-one smoothed, so a byte only
     * the validation part has costs a finite amount), scored on validation. */
    double cnt[256], h = 0;
    for (int i = 0; i < 256; i++) cnt[i] = 1;
    for (size_t i = 0; i < c->train_end; i++) cnt[c->data[i]] += 1;
    const double total = (double)c->train_end + 256;
    for (size_t i = c->train_end; i < c->n; i++) h -= log2(cnt[c->data[i]] / total);
    return h / (double)(c->n - c->train_end);
}
