/* Gradient forms: a parameter's gradient held dense (t->grad, the default
 * and the fast path: nothing here runs for it), low-rank (a factor F for
 * F P^T, added by an operator that saved a projection) or encoded with a
 * codec between backward passes (folded in when backward completes the
 * gradient, so micro-batches accumulate in the encoded form).  The
 * engine, the optimizers, clipping, data parallelism, the GACT controller
 * and the memory report reach the forms through the functions below
 * (grad.h).  This layer sits on core and codec only: the random streams it
 * rounds with come from its callers as (seed, stream). */
#include "grad.h"
#include "../codec/codec.h"
#include "../core/core.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    struct actc_grad_state head; /* first: what core sees (release) */
    /* QUANT: the codec chosen (kept across steps) and the encoded sum */
    const actc_codec *codec;
    int bits;
    char codec_name[16];
    void *blob;             /* GRAD; NULL when no gradient is held          */
    size_t bytes;
    actc_codec_args args;
    float scale;            /* pending factor (clipping), applied on decode */
    /* LOWRANK */
    actc_tensor *factor;    /* GRAD; NULL when no gradient is held          */
    actc_projection proj;
} form_state;

static form_state *fs(const actc_tensor *t) { return (form_state *)t->gstate_; }

/* core's release: drop the gradient held (the chosen codec stays), and with
 * destroy the state too. */
static void release(actc_tensor *t, int destroy)
{
    form_state *g = fs(t);
    actc_mem_free(g->blob);
    g->blob = NULL;
    g->bytes = 0;
    g->scale = 1.0f;
    actc_tensor_release(g->factor);
    g->factor = NULL;
    if (destroy) {
        free(g);
        t->gstate_ = NULL;
    }
}

static form_state *state(actc_tensor *t)
{
    if (!t->gstate_) {
        form_state *g = calloc(1, sizeof *g);
        if (!g) {
            actc_set_error(ACTC_ERR_OOM, "out of memory for the gradient form of '%s'", t->name);
            return NULL;
        }
        g->head.release = release;
        g->scale = 1.0f;
        t->gstate_ = &g->head;
    }
    return fs(t);
}

static const char *pname(const actc_tensor *t) { return t->name[0] ? t->name : "unnamed parameter"; }

actc_status actc_param_set_grad_codec(actc_tensor *t, const char *codec)
{
    if (!t || !t->is_param)
        return actc_set_error(ACTC_ERR_INVALID, "actc_param_set_grad_codec: %s", t ? "not a parameter" : "NULL tensor");
    if (actc__grad_present(t))
        return actc_set_error(ACTC_ERR_STATE, "cannot change the gradient form of '%s' while it holds a gradient",
                              pname(t));
    const actc_codec *c = NULL;
    int bits = 0;
    if (!codec || !strcmp(codec, "fp32")) {
        c = NULL;
    } else if (!strcmp(codec, "bf16")) {
        c = &actc_codec_bf16;
    } else if (!strcmp(codec, "dyn8")) {
        c = &actc_codec_dyn8;
    } else if (!strncmp(codec, "quant:", 6)) {
        long long b;
        if (actc_parse_int(codec + 6, 2, 8, &b) != ACTC_OK)
            return actc_set_error(ACTC_ERR_INVALID, "gradient codec '%s': quant takes 2..8 bits", codec);
        c = &actc_codec_quant;
        bits = (int)b;
    } else {
        return actc_set_error(ACTC_ERR_INVALID, "unknown gradient codec '%s' (fp32, bf16, dyn8 or quant:B)", codec);
    }
    if (!c && !t->gstate_) return ACTC_OK;
    form_state *g = state(t);
    if (!g) return actc_last_status();
    g->codec = c;
    g->bits = bits;
    snprintf(g->codec_name, sizeof g->codec_name, "%s", c ? codec : "");
    return ACTC_OK;
}

int actc__grad_present(const actc_tensor *t)
{
    const form_state *g = fs(t);
    return t->grad || (g && (g->blob || g->factor));
}

int actc__grad_encoded(const actc_tensor *t)
{
    const form_state *g = fs(t);
    return g && g->codec;
}

actc_grad_form actc__grad_form(const actc_tensor *t)
{
    const form_state *g = fs(t);
    if (g && g->factor) return ACTC_GRAD_LOWRANK;
    if (g && g->blob) return ACTC_GRAD_QUANT;
    return ACTC_GRAD_DENSE;
}

actc_status actc_grad_add_lowrank(actc_ctx *ctx, actc_tensor *t, const actc_tensor *factor, const actc_projection *proj)
{
    (void)ctx;
    if (!t || !factor || !factor->data || !proj)
        return actc_set_error(ACTC_ERR_INVALID, "actc_grad_add_lowrank: NULL tensor, factor or projection");
    if (!t->requires_grad) return ACTC_OK;
    if (!t->is_param)
        return actc_set_error(ACTC_ERR_INVALID, "actc_grad_add_lowrank: '%s' is not a parameter", pname(t));
    actc_status cs = actc__projection_check("actc_grad_add_lowrank", proj);
    if (cs != ACTC_OK) return cs;
    const int last = t->ndim - 1;
    int ok = t->ndim >= 1 && proj->rank >= 1 && factor->ndim == t->ndim && t->shape[last] == proj->n && factor->shape[last] == proj->rank;
    for (int i = 0; ok && i < last; i++) ok = factor->shape[i] == t->shape[i];
    if (!ok) {
        char a[64], b[64];
        return actc_set_error(ACTC_ERR_INVALID, "low-rank gradient of '%s' %s: factor %s with a projection %d -> %d",
                              pname(t), actc_shape_str(t, a, sizeof a), actc_shape_str(factor, b, sizeof b), proj->n,
                              proj->rank);
    }
    if (t->grad || (fs(t) && fs(t)->blob))
        return actc_set_error(ACTC_ERR_STATE, "'%s' already holds a dense or encoded gradient: one parameter, one form "
                              "of gradient per step", pname(t));
    form_state *g = state(t);
    if (!g) return actc_last_status();
    if (!g->factor) {
        if (!(g->factor = actc_tensor_copy(ACTC_MEM_GRAD, factor))) return actc_last_status();
        g->proj = *proj;
        return ACTC_OK;
    }
    if (!actc__projection_same(&g->proj, proj))
        return actc_set_error(ACTC_ERR_INVALID, "low-rank gradient of '%s': a second projection (key %llx, rank %d) "
                              "where the gradient holds key %llx, rank %d",
                              pname(t), (unsigned long long)proj->key, proj->rank, (unsigned long long)g->proj.key,
                              g->proj.rank);
    float *d = g->factor->data;
    const float *s = factor->data;
    for (size_t i = 0; i < factor->numel; i++) d[i] += s[i];
    return ACTC_OK;
}

static void decode_scaled(const form_state *g, size_t n, float *out)
{
    g->codec->decode(&g->args, g->blob, n, out);
    if (g->scale != 1.0f)
        for (size_t i = 0; i < n; i++) out[i] *= g->scale;
}

/* Encode x (t->numel floats) as t's gradient, replacing the blob held,
 * with rounding streams keyed by (seed, stream).  Nothing changes unless it
 * succeeds. */
static actc_status encode_as(uint64_t seed, uint64_t stream, actc_tensor *t, form_state *g, const float *x)
{
    const size_t n = t->numel;
    actc_codec_args a;
    memset(&a, 0, sizeof a);
    a.bits = g->bits;
    a.ndim = 1;
    a.shape[0] = n <= INT_MAX ? (int)n : INT_MAX; /* 1-D: one sample, whatever the shape says */
    const uint64_t h = actc_hash_bytes(ACTC_HASH_START, t->name, strlen(t->name));
    a.key = actc_rng_key(seed ^ 0x4752414453ULL, stream, t->name[0] ? h : t->id);
    const size_t bytes = g->codec->plan(&a, n);
    void *blob = actc_mem_alloc(ACTC_MEM_GRAD, bytes);
    if (!blob) return actc_last_status();
    g->codec->encode(&a, x, n, blob);
    actc_mem_free(g->blob);
    g->blob = blob;
    g->bytes = bytes;
    g->args = a;
    g->scale = 1.0f;
    return ACTC_OK;
}

actc_status actc__grad_complete(actc_tensor *t, uint64_t seed, uint64_t stream)
{
    form_state *g = fs(t);
    if (!g || !t->grad) return ACTC_OK;
    if (g->factor)
        return actc_set_error(ACTC_ERR_STATE, "'%s' has a low-rank gradient and a dense one in the same step",
                              pname(t));
    if (!g->codec) return ACTC_OK;
    /* The sum so far (decoded, scaled) plus this pass's dense gradient,
     * encoded afresh: one rounding per micro-batch.  Nothing changes until
     * every buffer is there (a failure keeps the previous sum and the
     * dense gradient apart, both intact). */
    const size_t n = t->numel;
    float *sum = t->grad->data, *tmp = NULL;
    if (g->blob) {
        if (!(tmp = actc_mem_alloc(ACTC_MEM_SCRATCH, n * sizeof *tmp))) return actc_last_status();
        decode_scaled(g, n, tmp);
        for (size_t i = 0; i < n; i++) tmp[i] += sum[i];
        sum = tmp;
    }
    actc_status s = encode_as(seed, stream, t, g, sum);
    actc_mem_free(tmp);
    if (s != ACTC_OK) return s;
    actc_tensor *dense = t->grad; /* not actc_tensor_drop_grad: that clears every form */
    t->grad = NULL;
    actc_tensor_release(dense);
    return ACTC_OK;
}

size_t actc__grad_wire_len(const actc_tensor *t)
{
    const form_state *g = fs(t);
    return g && g->factor ? g->factor->numel : t->numel;
}

actc_status actc__grad_wire_get(const actc_tensor *t, float *out)
{
    const form_state *g = fs(t);
    if (g && g->factor) {
        memcpy(out, g->factor->data, g->factor->numel * sizeof *out);
        return ACTC_OK;
    }
    return actc_grad_to_dense(t, out);
}

actc_status actc__grad_wire_set(actc_tensor *t, uint64_t seed, uint64_t step, const float *in)
{
    form_state *g = fs(t);
    switch (actc__grad_form(t)) {
    /* The same stream on every rank (not the rank's): the reduced gradient
     * must round alike everywhere, or the replicas drift apart. */
    case ACTC_GRAD_QUANT: return encode_as(seed, actc_rng_key(step, 0, 0x57495245ULL), t, g, in);
    case ACTC_GRAD_LOWRANK: memcpy(g->factor->data, in, g->factor->numel * sizeof *in); return ACTC_OK;
    default:
        if (t->grad) memcpy(t->grad->data, in, t->numel * sizeof *in);
        return ACTC_OK;
    }
}

const void *actc__grad_dyn8(const actc_tensor *t, float *scale)
{
    const form_state *g = fs(t);
    if (!g || !g->blob || g->codec != &actc_codec_dyn8 || (g->args.group && g->args.group != ACTC_DYN8_BLOCK))
        return NULL;
    *scale = g->scale;
    return g->blob;
}

actc_status actc__grad_set_dyn8(actc_tensor *t, const void *payload)
{
    float scale;
    form_state *g = fs(t);
    if (!actc__grad_dyn8(t, &scale))
        return actc_set_error(ACTC_ERR_STATE, "'%s' holds no 8-bit gradient to replace", pname(t));
    memcpy(g->blob, payload, g->bytes);
    g->scale = 1.0f;
    return ACTC_OK;
}

void actc_grad_get_info(const actc_tensor *t, actc_grad_info *out)
{
    memset(out, 0, sizeof *out);
    if (!t) return;
    out->form = actc__grad_form(t);
    out->present = actc__grad_present(t);
    const form_state *g = fs(t);
    switch (out->form) {
    case ACTC_GRAD_LOWRANK:
        out->proj = g->proj;
        out->bytes = g->factor->numel * sizeof(float);
        break;
    case ACTC_GRAD_QUANT:
        out->bytes = g->bytes;
        snprintf(out->codec, sizeof out->codec, "%s", g->codec_name);
        break;
    default: out->bytes = t->grad ? t->grad->numel * sizeof(float) : 0;
    }
}

const actc_tensor *actc__grad_factor(const actc_tensor *t, actc_projection *proj)
{
    const form_state *g = fs(t);
    if (!g || !g->factor) return NULL;
    if (proj) *proj = g->proj;
    return g->factor;
}

actc_status actc_grad_to_dense(const actc_tensor *t, float *out)
{
    if (!t || !out) return actc_set_error(ACTC_ERR_INVALID, "actc_grad_to_dense: NULL tensor or output");
    const form_state *g = fs(t);
    switch (actc__grad_form(t)) {
    case ACTC_GRAD_QUANT: decode_scaled(g, t->numel, out); return ACTC_OK;
    case ACTC_GRAD_LOWRANK:
        memset(out, 0, t->numel * sizeof *out);
        return actc_project_back(&g->proj, g->factor->data, (int)(g->factor->numel / (size_t)g->proj.rank), 1.0f, out);
    default:
        if (t->grad) memcpy(out, t->grad->data, t->numel * sizeof *out);
        else memset(out, 0, t->numel * sizeof *out);
        return ACTC_OK;
    }
}

actc_status actc__grad_sum_sq(const actc_tensor *t, double *sq)
{
    const form_state *g = fs(t);
    switch (actc__grad_form(t)) {
    case ACTC_GRAD_QUANT: {
        float *d = actc_mem_alloc(ACTC_MEM_SCRATCH, t->numel * sizeof *d);
        if (!d) return actc_last_status();
        decode_scaled(g, t->numel, d);
        *sq = actc__sum_sq_diff(d, NULL, t->numel);
        actc_mem_free(d);
        return ACTC_OK;
    }
    case ACTC_GRAD_LOWRANK: *sq = actc__sum_sq_diff(g->factor->data, NULL, g->factor->numel); return ACTC_OK;
    default: *sq = t->grad && t->grad->data ? actc__sum_sq_diff(t->grad->data, NULL, t->grad->numel) : 0.0; return ACTC_OK;
    }
}

void actc__grad_scale(actc_tensor *t, float c)
{
    form_state *g = fs(t);
    actc_tensor *d = NULL;
    switch (actc__grad_form(t)) {
    case ACTC_GRAD_QUANT: g->scale *= c; return;
    case ACTC_GRAD_LOWRANK: d = g->factor; break;
    default: d = t->grad;
    }
    if (!d || !d->data) return;
    float *x = d->data;
#pragma omp parallel for simd schedule(static) if (d->numel > 65536)
    for (size_t j = 0; j < d->numel; j++) x[j] *= c;
}
