/* ActNN's per-group stochastic quantizer (Chen et al. 2021, section 4.1) and
 * its per-tensor baseline.  The arithmetic lives in quant_kernels.c; this
 * file lays groups out in the payload and spreads them over threads.
 *
 * Payload of actc_codec_quant, for N samples of D elements in groups of G:
 *   [meta]  4 bytes per group (bf16 Z, bf16 R), all groups sample-major;
 *   [bits]  N bytes, each sample's width, only in mixed precision;
 *   [data]  each sample's groups in order, a group of g codes at b bits
 *           taking ceil(g*b/8) bytes.
 * A sample at b bits thus takes floor(D/G)*ceil(G*b/8) + ceil((D%G)*b/8)
 * data bytes (a full group of 256 exactly 32*b), and the whole payload
 *   4*N*ceil(D/G) + (mixed ? N : 0) + sum over samples of that.
 * Every offset follows arithmetically from the widths, so a thread can start
 * at any group.
 *
 * Payload of actc_codec_quant_tensor: 4 bytes of meta, then ceil(n*b/8)
 * bytes of codes (nothing at all for n = 0).
 *
 * Randomness: group gi (sample-major over the whole tensor) is seeded with
 * actc_rng_key(key, gi, tag), the per-tensor codec seeds each block of 256
 * elements with its block index; within a run, element i draws from a hash
 * of (seed, i) (quant_kernels.h).  The bytes are a function of (key, element
 * index) only: the thread count and the split never change them.
 *
 * What plan records for decode: group = G, bits = the uniform width (clamped
 * to 1..8), iparam[0] = 1 when the payload holds per-sample widths.  The
 * number of samples is re-derived from ndim/shape, which the store keeps.
 *
 * Both codecs decode any span of elements (decode_rows: the store's rows,
 * the first axis) from just the groups, or 8-element chunks, that hold it. */
#include "codec.h"
#include "quant_kernels.h"
#include "../core/core.h"
#include <math.h>

#define QUANT_TENSOR_TAG 0x51544E53ULL /* "QTNS" */
/* Below this many elements a parallel region costs more than it saves. */
#define QUANT_PAR_MIN 32768
/* Per-tensor codec: elements per seed / per parallel work item (a multiple
 * of 8, so blocks start on byte boundaries of the code stream). */
#define QT_BLOCK 256
/* Per-tensor min/max: elements per parallel work item. */
#define QT_MINMAX_BLOCK 65536

static size_t group_size(int group) { return group > 0 ? (size_t)group : ACTC_QUANT_GROUP; }

static uint32_t run_seed(uint64_t key, size_t index, uint64_t tag)
{
    return (uint32_t)actc_rng_key(key, index, tag);
}

/* ------------------------------------------------------------------------ */
/* Per-group layout                                                          */
/* ------------------------------------------------------------------------ */

typedef struct {
    size_t N, D;       /* samples, elements per sample                      */
    size_t G, gps;     /* group size, groups per sample                     */
    size_t full, tail; /* full groups per sample, length of the short one   */
    int bits;          /* width of every sample when widths is NULL         */
    const uint8_t *widths; /* per-sample widths (the payload's copy) or NULL */
} qlayout;

static int mixed_mode(const actc_codec_args *a) { return a->iparam[0] == 1; }

/* Samples are the first axis of a tensor of 2 or more dims; anything else
 * (or a shape that does not divide n) is a single sample. */
static size_t sample_count(const actc_codec_args *a, size_t n)
{
    if (n == 0) return 0;
    if (a->ndim >= 2 && a->shape[0] > 0 && n % (size_t)a->shape[0] == 0) return (size_t)a->shape[0];
    return 1;
}

static qlayout layout_of(const actc_codec_args *a, size_t n, const uint8_t *widths)
{
    qlayout L;
    L.N = sample_count(a, n);
    L.D = L.N ? n / L.N : 0;
    L.G = group_size(a->group);
    L.gps = (L.D + L.G - 1) / L.G;
    L.full = L.D / L.G;
    L.tail = L.D % L.G;
    L.bits = actc__quant_clamp_bits(a->bits);
    L.widths = mixed_mode(a) ? widths : NULL;
    return L;
}

static size_t meta_bytes(const qlayout *L) { return L->N * L->gps * ACTC_QUANT_META; }
static size_t header_bytes(const qlayout *L) { return meta_bytes(L) + (L->widths ? L->N : 0); }

static int sample_bits(const qlayout *L, size_t s)
{
    return L->widths ? actc__quant_clamp_bits(L->widths[s]) : L->bits;
}

static size_t sample_bytes(const qlayout *L, int b)
{
    return L->full * actc__quant_run_bytes(L->G, b) + actc__quant_run_bytes(L->tail, b);
}

/* Data bytes of samples [0, s). */
static size_t data_offset(const qlayout *L, size_t s)
{
    if (!L->widths) return s * sample_bytes(L, L->bits);
    size_t off = 0;
    for (size_t k = 0; k < s; k++) off += sample_bytes(L, sample_bits(L, k));
    return off;
}

static size_t group_len(const qlayout *L, size_t j) { return j < L->full ? L->G : L->tail; }

/* Position of one group while walking the groups in payload order. */
typedef struct {
    size_t gi;   /* global group index (meta entry)  */
    size_t s, j; /* sample, group within the sample  */
    size_t elem; /* first element                    */
    size_t off;  /* first byte in the data section   */
    size_t len;  /* elements                         */
    int b;       /* width of the sample              */
} qcursor;

static void cursor_fill(const qlayout *L, qcursor *c)
{
    c->elem = c->s * L->D + c->j * L->G;
    c->len = group_len(L, c->j);
}

static qcursor cursor_at(const qlayout *L, size_t gi)
{
    qcursor c;
    c.gi = gi;
    c.s = gi / L->gps;
    c.j = gi % L->gps;
    c.b = sample_bits(L, c.s);
    c.off = data_offset(L, c.s) + c.j * actc__quant_run_bytes(L->G, c.b);
    cursor_fill(L, &c);
    return c;
}

static void cursor_next(const qlayout *L, qcursor *c)
{
    c->off += actc__quant_run_bytes(c->len, c->b);
    c->gi++;
    if (++c->j == L->gps) {
        c->j = 0;
        if (++c->s < L->N) c->b = sample_bits(L, c->s);
    }
    cursor_fill(L, c);
}

/* Global index of the group holding element e. */
static size_t group_index(const qlayout *L, size_t e) { return e / L->D * L->gps + e % L->D / L->G; }

typedef void (*group_fn)(void *ctx, const qcursor *c);

/* Calls fn on groups [lo, hi), each thread on a contiguous share; nelem
 * (the elements involved) decides whether threads are worth starting. */
static void for_each_group(const qlayout *L, size_t lo, size_t hi, size_t nelem, group_fn fn, void *ctx)
{
#pragma omp parallel if (nelem >= QUANT_PAR_MIN && hi - lo > 1)
    {
        size_t mine_lo, mine_hi;
        actc__thread_share(hi - lo, &mine_lo, &mine_hi);
        if (mine_lo < mine_hi) {
            qcursor c = cursor_at(L, lo + mine_lo);
            for (size_t k = mine_lo; k < mine_hi; k++, cursor_next(L, &c)) fn(ctx, &c);
        }
        actc__quant_fence();
    }
}

/* Elements [*e0, *e1) of rows [row0, row0 + nrows): the store's rows are
 * the first axis, whatever the codec's grouping. */
static void row_span(const actc_codec_args *a, size_t n, size_t row0, size_t nrows, size_t *e0, size_t *e1)
{
    const size_t rows = a->ndim > 0 && a->shape[0] > 0 ? (size_t)a->shape[0] : 1, d = n / rows;
    *e0 = row0 * d < n ? row0 * d : n;
    *e1 = (row0 + nrows) * d < n ? (row0 + nrows) * d : n;
}

/* ------------------------------------------------------------------------ */
/* actc_codec_quant                                                          */
/* ------------------------------------------------------------------------ */

static size_t quant_plan(actc_codec_args *a, size_t n)
{
    a->group = (int)group_size(a->group);
    a->bits = actc__quant_clamp_bits(a->bits);
    a->iparam[0] = a->sample_bits != NULL;
    /* The sizes come from the caller's widths: the payload copy does not
     * exist yet. */
    const qlayout L = layout_of(a, n, a->sample_bits);
    return header_bytes(&L) + data_offset(&L, L.N);
}

typedef struct {
    const float *x;
    uint8_t *meta, *data;
    uint64_t key;
} encode_ctx;

static void encode_one(void *ctx, const qcursor *c)
{
    const encode_ctx *e = ctx;
    actc__quant_encode_group(e->x + c->elem, c->len, c->b, actc__quant_group_seed(e->key, c->gi),
                             e->meta + c->gi * ACTC_QUANT_META, e->data + c->off);
}

static void quant_encode(const actc_codec_args *a, const float *x, size_t n, void *dst)
{
    uint8_t *meta = dst;
    /* The widths are copied into the payload first and read back from
     * there, so encode and decode see the same (clamped) values. */
    qlayout L = layout_of(a, n, NULL);
    uint8_t *widths = meta + meta_bytes(&L);
    if (mixed_mode(a)) {
        for (size_t s = 0; s < L.N; s++)
            widths[s] = (uint8_t)actc__quant_clamp_bits(a->sample_bits ? a->sample_bits[s] : a->bits);
        L.widths = widths;
    }
    encode_ctx e = {x, meta, meta + header_bytes(&L), a->key};
    for_each_group(&L, 0, L.N * L.gps, n, encode_one, &e);
}

typedef struct {
    const uint8_t *meta, *data;
    size_t e0, e1; /* the elements wanted; dst[0] is element e0 */
    float *dst;
} decode_ctx;

static void decode_one(void *ctx, const qcursor *c)
{
    const decode_ctx *d = ctx;
    const actc__qparams p = actc__quant_params(d->meta + c->gi * ACTC_QUANT_META, c->b);
    /* Only the first and last group of a span can be cut. */
    const size_t lo = c->elem > d->e0 ? c->elem : d->e0;
    const size_t hi = c->elem + c->len < d->e1 ? c->elem + c->len : d->e1;
    actc__quant_unpack_range(d->data + c->off, lo - c->elem, hi - c->elem, p, d->dst + (lo - d->e0));
}

/* Decodes elements [e0, e1) into dst: only the groups holding them. */
static void quant_decode_span(const actc_codec_args *a, const void *src, size_t n, size_t e0, size_t e1,
                              float *dst)
{
    if (e0 >= e1) return;
    const uint8_t *meta = src;
    qlayout L = layout_of(a, n, NULL);
    if (mixed_mode(a)) L.widths = meta + meta_bytes(&L);
    decode_ctx d = {meta, meta + header_bytes(&L), e0, e1, dst};
    for_each_group(&L, group_index(&L, e0), group_index(&L, e1 - 1) + 1, e1 - e0, decode_one, &d);
}

static void quant_decode(const actc_codec_args *a, const void *src, size_t n, float *dst)
{
    quant_decode_span(a, src, n, 0, n, dst);
}

static void quant_decode_rows(const actc_codec_args *a, const void *src, size_t n, size_t row0, size_t nrows,
                              float *dst)
{
    size_t e0, e1;
    row_span(a, n, row0, nrows, &e0, &e1);
    quant_decode_span(a, src, n, e0, e1, dst);
}

const actc_codec actc_codec_quant = {"quant", quant_plan, quant_encode, quant_decode, quant_decode_rows};

/* ------------------------------------------------------------------------ */
/* actc_codec_quant_tensor                                                   */
/* ------------------------------------------------------------------------ */

static size_t quant_tensor_plan(actc_codec_args *a, size_t n)
{
    a->bits = actc__quant_clamp_bits(a->bits);
    return n ? ACTC_QUANT_META + actc__quant_run_bytes(n, a->bits) : 0;
}

static void tensor_minmax(const float *x, size_t n, float *pmn, float *pmx)
{
    const size_t nblk = (n + QT_MINMAX_BLOCK - 1) / QT_MINMAX_BLOCK;
    float mn = INFINITY, mx = -INFINITY;
#pragma omp parallel for schedule(static) reduction(min : mn) reduction(max : mx) if (n >= QUANT_PAR_MIN)
    for (size_t k = 0; k < nblk; k++) {
        const size_t lo = k * QT_MINMAX_BLOCK, len = n - lo < QT_MINMAX_BLOCK ? n - lo : QT_MINMAX_BLOCK;
        float bmn, bmx;
        actc__quant_minmax(x + lo, len, &bmn, &bmx);
        mn = bmn < mn ? bmn : mn;
        mx = bmx > mx ? bmx : mx;
    }
    *pmn = mn;
    *pmx = mx;
}

static void quant_tensor_encode(const actc_codec_args *a, const float *x, size_t n, void *dst)
{
    if (!n) return;
    const int b = actc__quant_clamp_bits(a->bits);
    uint8_t *meta = dst, *data = meta + ACTC_QUANT_META;
    float mn, mx;
    tensor_minmax(x, n, &mn, &mx);
    actc__quant_meta(mn, mx, b, meta);
    const actc__qparams p = actc__quant_params(meta, b);
    const size_t nblk = (n + QT_BLOCK - 1) / QT_BLOCK;
#pragma omp parallel if (n >= QUANT_PAR_MIN)
    {
#pragma omp for schedule(static) nowait
        for (size_t k = 0; k < nblk; k++) {
            const size_t lo = k * QT_BLOCK, len = n - lo < QT_BLOCK ? n - lo : QT_BLOCK;
            actc__quant_pack(x + lo, len, p, run_seed(a->key, k, QUANT_TENSOR_TAG),
                             data + actc__quant_run_bytes(lo, b));
        }
        actc__quant_fence();
    }
}

/* Decodes elements [e0, e1): a cut first chunk alone, then blocks that
 * start on chunk boundaries in parallel. */
static void quant_tensor_decode_span(const actc_codec_args *a, const void *src, size_t n, size_t e0, size_t e1,
                                     float *dst)
{
    e1 = e1 < n ? e1 : n;
    if (e0 >= e1) return;
    const int b = actc__quant_clamp_bits(a->bits);
    const uint8_t *meta = src, *data = meta + ACTC_QUANT_META;
    const actc__qparams p = actc__quant_params(meta, b);
    const size_t a0 = (e0 + 7) / 8 * 8 < e1 ? (e0 + 7) / 8 * 8 : e1;
    actc__quant_unpack_range(data, e0, a0, p, dst);
    const size_t nblk = (e1 - a0 + QT_BLOCK - 1) / QT_BLOCK;
#pragma omp parallel for schedule(static) if (e1 - a0 >= QUANT_PAR_MIN)
    for (size_t k = 0; k < nblk; k++) {
        const size_t lo = a0 + k * QT_BLOCK, len = e1 - lo < QT_BLOCK ? e1 - lo : QT_BLOCK;
        actc__quant_unpack(data + actc__quant_run_bytes(lo, b), len, p, dst + (lo - e0));
    }
}

static void quant_tensor_decode(const actc_codec_args *a, const void *src, size_t n, float *dst)
{
    quant_tensor_decode_span(a, src, n, 0, n, dst);
}

static void quant_tensor_decode_rows(const actc_codec_args *a, const void *src, size_t n, size_t row0,
                                     size_t nrows, float *dst)
{
    size_t e0, e1;
    row_span(a, n, row0, nrows, &e0, &e1);
    quant_tensor_decode_span(a, src, n, e0, e1, dst);
}

const actc_codec actc_codec_quant_tensor = {"quant_tensor", quant_tensor_plan, quant_tensor_encode,
                                            quant_tensor_decode, quant_tensor_decode_rows};

/* ------------------------------------------------------------------------ */
/* Range statistics for the mixed-precision policy                           */
/* ------------------------------------------------------------------------ */

void actc_quant_range_sq(const float *x, int N, size_t D, int group, double *out)
{
    const size_t G = group_size(group);
#pragma omp parallel for schedule(static) if ((size_t)(N > 0 ? N : 0) * D >= QUANT_PAR_MIN)
    for (int s = 0; s < N; s++) {
        const float *xs = x + (size_t)s * D;
        /* codec_math.h's order, which the CUDA kernels follow too. */
        double lane[ACTC_QUANT_LANES] = {0};
        size_t g = 0;
        for (size_t j = 0; j < D; j += G, g++) {
            float mn, mx;
            actc__quant_minmax(xs + j, D - j < G ? D - j : G, &mn, &mx);
            lane[g % ACTC_QUANT_LANES] += actc__range_sq_term(mn, mx);
        }
        for (int w = ACTC_QUANT_LANES / 2; w > 0; w /= 2)
            for (int l = 0; l < w; l++) lane[l] += lane[l + w];
        out[s] = lane[0];
    }
}

/* What actc_cuda_range_sq needs (actc.h): it lives here, built with or
 * without CUDA. */
size_t actc_cuda_range_sq_len(int N, size_t D)
{
    if (N <= 0) return 0;
    return (size_t)N + (size_t)N * ((D + ACTC_QUANT_GROUP - 1) / ACTC_QUANT_GROUP);
}
