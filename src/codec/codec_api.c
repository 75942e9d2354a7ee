/* The codecs on caller buffers (actc.h, "Codecs on caller buffers"): a plan
 * is the codec's arguments resolved from a spec, a shape and a key; encode
 * and decode run the same kernels the store runs, on memory the caller
 * owns.  Nothing here allocates or keeps state. */
#include "codec.h"
#include "../core/core.h"
#include <math.h>
#include <omp.h>
#include <string.h>

/* The codecs a plan can name, by plan->id_ (0 is "not a plan"). */
static const actc_codec *const g_codecs[] = {NULL,
                                             &actc_codec_fp32,
                                             &actc_codec_bf16,
                                             &actc_codec_mask1,
                                             &actc_codec_index,
                                             &actc_codec_quant,
                                             &actc_codec_quant_tensor,
                                             &actc_codec_block4,
                                             &actc_codec_dyn8,
                                             &actc_codec_division};
enum { NCODECS = sizeof g_codecs / sizeof g_codecs[0] };

static int codec_id(const actc_codec *c)
{
    for (int i = 1; i < NCODECS; i++)
        if (g_codecs[i] == c) return i;
    return 0;
}

uint64_t actc__plan_widths_hash(const uint8_t *sample_bits, const actc_codec_plan *p)
{
    if (!sample_bits) return 0;
    return actc_hash_bytes(ACTC_HASH_START, sample_bits, p->ndim > 0 ? (size_t)p->shape[0] : 1);
}

/* The store's arguments for the plan (what encode and decode read). */
actc_codec_args actc__plan_args(const actc_codec_plan *p, const uint8_t *sample_bits)
{
    actc_codec_args a;
    memset(&a, 0, sizeof a);
    a.bits = p->bits_;
    a.group = p->group_;
    a.width = p->width_;
    a.ndim = p->ndim;
    memcpy(a.shape, p->shape, sizeof p->shape);
    a.key = p->key;
    memcpy(a.iparam, p->iparam_, sizeof a.iparam);
    a.sample_bits = sample_bits;
    return a;
}

/* The plan of codec with its arguments a for numel elements (the spelling
 * in plan->codec is the caller's). */
static void fill_plan(const actc_codec *codec, actc_codec_args *a, size_t numel, actc_codec_plan *plan)
{
    plan->ndim = a->ndim;
    memcpy(plan->shape, a->shape, sizeof plan->shape);
    plan->numel = numel;
    plan->key = a->key;
    plan->bytes = codec->plan(a, numel);
    plan->id_ = codec_id(codec);
    plan->bits_ = a->bits;
    plan->group_ = a->group;
    plan->width_ = a->width;
    memcpy(plan->iparam_, a->iparam, sizeof plan->iparam_);
    plan->sample_widths = a->sample_bits != NULL;
    plan->sample_bits_hash_ = actc__plan_widths_hash(a->sample_bits, plan);
}

actc_status actc_codec_plan_make(const char *spec, int ndim, const int *shape, uint64_t key,
                                 const uint8_t *sample_bits, actc_codec_plan *plan)
{
    if (!plan) return actc_set_error(ACTC_ERR_INVALID, "actc_codec_plan_make: NULL plan");
    memset(plan, 0, sizeof *plan);
    if (!spec) return actc_set_error(ACTC_ERR_INVALID, "actc_codec_plan_make: NULL codec spec");
    if (ndim < 0 || ndim > ACTC_MAX_DIMS || (ndim > 0 && !shape))
        return actc_set_error(ACTC_ERR_INVALID, "codec '%s': a shape has 0 to %d dims (got %d)", spec, ACTC_MAX_DIMS,
                              ndim);
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return actc_set_error(ACTC_ERR_INVALID, "codec '%s': dim %d of the shape is %d (sizes are positive)",
                                  spec, i, shape[i]);
        if (numel > ((size_t)1 << 40) / (size_t)shape[i])
            return actc_set_error(ACTC_ERR_INVALID, "codec '%s': the shape has more than 2^40 elements", spec);
        numel *= (size_t)shape[i];
    }
    const actc_codec *codec;
    actc_codec_args a;
    const char *why = actc__codec_parse(spec, ndim, &codec, &a, plan->codec, sizeof plan->codec);
    if (why) {
        memset(plan, 0, sizeof *plan);
        return actc_set_error(ACTC_ERR_INVALID, "bad codec '%s': %s", spec, why);
    }
    if (sample_bits && codec != &actc_codec_quant)
        return actc_set_error(ACTC_ERR_INVALID, "codec '%s': per-sample widths apply to quant:B only", spec);
    for (size_t s = 0; sample_bits && s < (ndim > 0 ? (size_t)shape[0] : 1); s++)
        if (sample_bits[s] < 1 || sample_bits[s] > 8)
            return actc_set_error(ACTC_ERR_INVALID, "codec '%s': sample %zu's width is %d (1 to 8 bits)", spec, s,
                                  sample_bits[s]);
    a.ndim = ndim;
    for (int i = 0; i < ndim; i++) a.shape[i] = shape[i];
    a.key = key;
    a.sample_bits = sample_bits;
    fill_plan(codec, &a, numel, plan);
    return ACTC_OK;
}

actc_status actc__codec_plan_of(const actc_codec *c, actc_codec_args *a, actc_codec_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    if (!codec_id(c) || a->ndim < 0 || a->ndim > ACTC_MAX_DIMS)
        return actc_set_error(ACTC_ERR_INVALID, "codec %s: no public plan", c ? c->name : "(none)");
    const char *why = actc__codec_spell(c, a, plan->codec, sizeof plan->codec);
    if (why) return actc_set_error(ACTC_ERR_INVALID, "codec %s: %s", c->name, why);
    size_t numel = 1;
    for (int i = 0; i < a->ndim; i++) numel *= (size_t)a->shape[i];
    fill_plan(c, a, numel, plan);
    return ACTC_OK;
}

const actc_codec *actc__plan_codec(const actc_codec_plan *p, const char *fn, const void *buf, size_t buf_bytes)
{
    if (!p || p->id_ <= 0 || p->id_ >= NCODECS) {
        actc_set_error(ACTC_ERR_INVALID, "%s: not a plan from actc_codec_plan_make", fn);
        return NULL;
    }
    if ((!buf && p->bytes) || buf_bytes < p->bytes) {
        actc_set_error(ACTC_ERR_INVALID, "%s (%s): the payload buffer holds %zu bytes, the plan needs %zu", fn,
                       p->codec, buf ? buf_bytes : 0, p->bytes);
        return NULL;
    }
    return g_codecs[p->id_];
}

/* A plan's own thread count for one call: the calling thread's OpenMP
 * setting (what its parallel regions use) changed and restored around it,
 * so other threads and later calls are unaffected. */
static int threads_enter(const actc_codec_plan *p)
{
    if (p->threads <= 0) return 0;
    const int prev = omp_get_max_threads();
    omp_set_num_threads(p->threads);
    return prev;
}
static void threads_leave(int prev)
{
    if (prev > 0) omp_set_num_threads(prev);
}

actc_status actc_codec_encode(const actc_codec_plan *plan, const float *x, const uint8_t *sample_bits, void *dst,
                              size_t dst_bytes)
{
    const actc_codec *c = actc__plan_codec(plan, "actc_codec_encode", dst, dst_bytes);
    if (!c) return actc_last_status();
    if (!x && plan->numel) return actc_set_error(ACTC_ERR_INVALID, "actc_codec_encode (%s): NULL input", plan->codec);
    if (actc__plan_widths_hash(sample_bits, plan) != plan->sample_bits_hash_)
        return actc_set_error(ACTC_ERR_INVALID,
                              "actc_codec_encode (%s): per-sample widths differ from those the plan was made with",
                              plan->codec);
    if (c == &actc_codec_index) {
        /* The codec casts: a value its width cannot hold would be undefined. */
        const double top = plan->width_ == 4 ? 4294967296.0 : (double)(1u << (8 * plan->width_));
        for (size_t i = 0; i < plan->numel; i++)
            if (!(x[i] >= 0.0f) || x[i] >= top || x[i] != floorf(x[i]))
                return actc_set_error(ACTC_ERR_INVALID,
                                      "actc_codec_encode (%s): element %zu is %g, not an integer in [0, %.0f)",
                                      plan->codec, i, (double)x[i], top);
    }
    const actc_codec_args a = actc__plan_args(plan, sample_bits);
    const int prev = threads_enter(plan);
    c->encode(&a, x, plan->numel, dst);
    threads_leave(prev);
    return ACTC_OK;
}

actc_status actc_codec_decode(const actc_codec_plan *plan, const void *src, size_t src_bytes, float *dst)
{
    const actc_codec *c = actc__plan_codec(plan, "actc_codec_decode", src, src_bytes);
    if (!c) return actc_last_status();
    if (!dst && plan->numel) return actc_set_error(ACTC_ERR_INVALID, "actc_codec_decode (%s): NULL output", plan->codec);
    const actc_codec_args a = actc__plan_args(plan, NULL);
    const int prev = threads_enter(plan);
    c->decode(&a, src, plan->numel, dst);
    threads_leave(prev);
    return ACTC_OK;
}

actc_status actc_codec_decode_rows(const actc_codec_plan *plan, const void *src, size_t src_bytes, size_t row0,
                                   size_t nrows, float *dst)
{
    const actc_codec *c = actc__plan_codec(plan, "actc_codec_decode_rows", src, src_bytes);
    if (!c) return actc_last_status();
    const size_t rows = plan->ndim > 0 ? (size_t)plan->shape[0] : 1;
    if (row0 > rows || nrows > rows - row0)
        return actc_set_error(ACTC_ERR_INVALID, "actc_codec_decode_rows (%s): rows %zu..%zu of %zu", plan->codec,
                              row0, row0 + nrows, rows);
    if (nrows == 0) return ACTC_OK;
    if (!dst) return actc_set_error(ACTC_ERR_INVALID, "actc_codec_decode_rows (%s): NULL output", plan->codec);
    const actc_codec_args a = actc__plan_args(plan, NULL);
    const int prev = threads_enter(plan);
    if (plan->ndim > 0)
        c->decode_rows(&a, src, plan->numel, row0, nrows, dst);
    else
        c->decode(&a, src, plan->numel, dst);
    threads_leave(prev);
    return ACTC_OK;
}
