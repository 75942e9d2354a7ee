/* The encoded form: a gradient held with a codec between backward passes
 * (actc_param_set_grad_codec: bf16, AGoQ's 8-bit dynamic map, or k-bit
 * per-group quantization), folded in when backward completes the gradient,
 * so micro-batches accumulate in it; clipping's factor waits for the next
 * decode.  The 8-bit wire sends dyn8 payloads as they are
 * (actc__grad_dyn8). */
#include "form.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

actc_status actc_param_set_grad_codec(actc_tensor *t, const char *codec)
{
    if (!t || !t->is_param)
        return actc_set_error(ACTC_ERR_INVALID, "actc_param_set_grad_codec: %s", t ? "not a parameter" : "NULL tensor");
    if (actc__grad_present(t))
        return actc_set_error(ACTC_ERR_STATE, "cannot change the gradient form of '%s' while it holds a gradient",
                              actc__grad_pname(t));
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
    actc__grad_fstate *g = actc__grad_fs_make(t);
    if (!g) return actc_last_status();
    g->codec = c;
    g->bits = bits;
    snprintf(g->codec_name, sizeof g->codec_name, "%s", c ? codec : "");
    return ACTC_OK;
}

static void decode_scaled(const actc__grad_fstate *g, size_t n, float *out)
{
    g->codec->decode(&g->args, g->blob, n, out);
    if (g->scale != 1.0f)
        for (size_t i = 0; i < n; i++) out[i] *= g->scale;
}

/* Encode x (t->numel floats) as t's gradient, replacing the blob held,
 * with rounding streams keyed by (seed, stream).  Nothing changes unless it
 * succeeds. */
static actc_status encode_as(uint64_t seed, uint64_t stream, actc_tensor *t, const float *x)
{
    actc__grad_fstate *g = actc__grad_fs(t);
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

/* The sum so far (decoded, scaled) plus this pass's dense gradient,
 * encoded afresh: one rounding per micro-batch.  Nothing changes until
 * every buffer is there (a failure keeps the previous sum and the dense
 * gradient apart, both intact). */
static actc_status accumulate(actc_tensor *t, uint64_t seed, uint64_t stream)
{
    const actc__grad_fstate *g = actc__grad_fs(t);
    const size_t n = t->numel;
    float *sum = t->grad->data, *tmp = NULL;
    if (g->blob) {
        if (!(tmp = actc_mem_alloc(ACTC_MEM_SCRATCH, n * sizeof *tmp))) return actc_last_status();
        decode_scaled(g, n, tmp);
        for (size_t i = 0; i < n; i++) tmp[i] += sum[i];
        sum = tmp;
    }
    actc_status s = encode_as(seed, stream, t, sum);
    actc_mem_free(tmp);
    if (s != ACTC_OK) return s;
    actc_tensor *dense = t->grad; /* not actc_tensor_drop_grad: that clears every form */
    t->grad = NULL;
    actc_tensor_release(dense);
    return ACTC_OK;
}

static actc_status to_dense(const actc_tensor *t, float *out)
{
    decode_scaled(actc__grad_fs(t), t->numel, out);
    return ACTC_OK;
}

static actc_status sum_sq(const actc_tensor *t, double *sq)
{
    float *d = actc_mem_alloc(ACTC_MEM_SCRATCH, t->numel * sizeof *d);
    if (!d) return actc_last_status();
    decode_scaled(actc__grad_fs(t), t->numel, d);
    *sq = actc__sum_sq_diff(d, NULL, t->numel);
    actc_mem_free(d);
    return ACTC_OK;
}

static void scale(actc_tensor *t, float c) { actc__grad_fs(t)->scale *= c; }

static size_t bytes(const actc_tensor *t) { return actc__grad_fs(t)->bytes; }

static size_t wire_len(const actc_tensor *t) { return t->numel; }

/* The same stream on every rank (not the rank's): the reduced gradient
 * must round alike everywhere, or the replicas drift apart. */
static actc_status wire_set(actc_tensor *t, uint64_t seed, uint64_t step, const float *in)
{
    return encode_as(seed, actc_rng_key(step, 0, 0x57495245ULL), t, in);
}

const actc__grad_form_vt actc__grad_form_encoded = {ACTC_GRAD_QUANT, accumulate, to_dense, sum_sq, scale,
                                               bytes, wire_len, to_dense, wire_set};

int actc__grad_encoded(const actc_tensor *t)
{
    const actc__grad_fstate *g = actc__grad_fs(t);
    return g && g->codec;
}

const void *actc__grad_dyn8(const actc_tensor *t, float *scale)
{
    const actc__grad_fstate *g = actc__grad_fs(t);
    if (!g || !g->blob || g->codec != &actc_codec_dyn8 || (g->args.group && g->args.group != ACTC_DYN8_BLOCK))
        return NULL;
    *scale = g->scale;
    return g->blob;
}

actc_status actc__grad_set_dyn8(actc_tensor *t, const void *payload)
{
    float scale;
    actc__grad_fstate *g = actc__grad_fs(t);
    if (!actc__grad_dyn8(t, &scale))
        return actc_set_error(ACTC_ERR_STATE, "'%s' holds no 8-bit gradient to replace", actc__grad_pname(t));
    memcpy(g->blob, payload, g->bytes);
    g->scale = 1.0f;
    return ACTC_OK;
}
