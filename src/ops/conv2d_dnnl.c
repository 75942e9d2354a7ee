/* conv2d on oneDNN (Debian's libdnnl 2.x, C API).
 *
 * Why: oneDNN's AVX-512 JIT convolutions are about twice as fast on this
 * class of machine as im2col + OpenBLAS sgemm (which the environment may pin
 * to AVX2 with OPENBLAS_CORETYPE); PyTorch's CPU convolutions are these
 * kernels.  conv2d.c decides per call whether this backend runs and keeps
 * im2col as the fallback and the reference.
 *
 * Layouts.  The caller's tensors stay plain NCHW / OIHW: the saved input x
 * is an ordinary tensor that the store (and its compression policy) sees.
 * By default oneDNN chooses its layouts (format_tag any: nChw16c activations,
 * OIhw16i16o-like weights) and we reorder to and from them; the alternative,
 * oneDNN on the plain layouts directly, selects its gemm-based convolution
 * and was slower (see bench_conv, actc__conv_dnnl_set_blocked).
 *
 * Memory.  Every buffer oneDNN needs comes from actc_mem_alloc(SCRATCH) and
 * is freed before the call returns: primitives are created in user
 * scratchpad mode (so oneDNN allocates no hidden scratchpad) and the blocked
 * copies are ours.  Convolutions need no workspace.  Activation-sized
 * copies are per chunk of samples, bounded by DNNL_CHUNK_BYTES, not per
 * batch; weight-sized copies are per call.
 *
 * Gradients accumulate (a tensor may feed several consumers), while oneDNN
 * overwrites diff_src / diff_weights: those are computed into a scratch copy
 * and added by a reorder with a sum post-op (one pass, also converting the
 * layout).
 *
 * Primitives are expensive to create (JIT code generation, ~ms), so they are
 * cached per (pass, chunk shape, kernel, stride, pad, bias, layout mode) in a
 * small process-wide cache with a mutex, bounded in size (oldest unused entry
 * evicted) and freed by actc_shutdown (actc__conv_dnnl_cleanup). */
#include "conv2d_internal.h"

#ifndef ACTC_HAVE_DNNL

int actc__conv_dnnl_compiled(void) { return 0; }
void actc__conv_dnnl_set_blocked(int blocked) { (void)blocked; }
void actc__conv_dnnl_cleanup(void) {}

static actc_status no_dnnl(int *unsupported)
{
    *unsupported = 1;
    return ACTC_OK;
}
actc_status actc__conv_dnnl_forward(const conv_geom *g, const float *x, const float *w,
                                    const float *b, float *y, int *unsupported)
{
    (void)g, (void)x, (void)w, (void)b, (void)y;
    return no_dnnl(unsupported);
}
actc_status actc__conv_dnnl_backward_data(const conv_geom *g, const float *w, const float *dy,
                                          float *dx, int *unsupported)
{
    (void)g, (void)w, (void)dy, (void)dx;
    return no_dnnl(unsupported);
}
actc_status actc__conv_dnnl_backward_weights(const conv_geom *g, const float *x, const conv_rows *xrows,
                                             const float *dy, float *dw, int *unsupported)
{
    (void)g, (void)x, (void)xrows, (void)dy, (void)dw;
    return no_dnnl(unsupported);
}
actc_status actc__conv_dnnl_backward_plan(const conv_geom *g, int *nb, int *unsupported)
{
    (void)g;
    *nb = 0;
    return no_dnnl(unsupported);
}
actc_status actc__conv_dnnl_forward_plan(const conv_geom *g, int bias, int *nb, int *unsupported)
{
    (void)g, (void)bias;
    *nb = 0;
    return no_dnnl(unsupported);
}

#else

#include <dnnl.h>
#include <dnnl_debug.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of the activation-sized blocked copies of one chunk (inputs and
 * output together, estimated with channels rounded up to 16). */
#define DNNL_CHUNK_BYTES ((size_t)16 << 20)

/* Cached primitives.  ResNet-18 at one batch size needs ~35 (11 shapes x 3
 * passes, + a tail chunk shape for some); the bound only stops a program
 * that sweeps shapes from growing without limit. */
#define DNNL_CACHE_MAX 128

enum { PASS_FWD = 0, PASS_BWD_DATA, PASS_BWD_WEIGHTS };
static const char *const pass_name[] = {"forward", "backward-data", "backward-weights"};

typedef struct {
    int pass, N, C, H, W, K, kh, kw, s, p, bias, blocked;
} dkey;

/* One tensor argument of the convolution primitive: the caller's plain
 * layout, the primitive's layout, and the reorder between them (user ->
 * prim for inputs, prim -> user for the output, the latter with a sum
 * post-op when accumulating); NULL reorder = the primitive reads or writes
 * the caller's array directly. */
typedef struct {
    int arg;
    dnnl_memory_desc_t user, prim;
    dnnl_primitive_t reorder;
    dnnl_memory_desc_t rsp; /* the reorder's scratchpad */
    size_t bytes;           /* size of the prim-layout copy when reordering */
} dslot;

/* Slots: FWD a = src, b = weights, out = dst; BWD_DATA a = diff_dst,
 * b = weights, out = diff_src (+=); BWD_WEIGHTS a = src, b = diff_dst,
 * out = diff_weights (+=). */
typedef struct {
    dkey key;
    int users;           /* calls running with this entry: not evictable */
    unsigned long stamp; /* last use, for eviction */
    int unsupported;     /* oneDNN has no implementation: use im2col */
    dnnl_primitive_t conv;
    dnnl_memory_desc_t csp, bias;
    dslot a, b, out;
    size_t sp_bytes; /* largest scratchpad of the conv and its reorders */
} dentry;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static int g_engine_failed;
static dentry *g_cache[DNNL_CACHE_MAX];
static int g_ncache;
static unsigned long g_clock;
static int g_layout = -1; /* -1: per pass (layout_blocked), 0: plain, 1: blocked */

int actc__conv_dnnl_compiled(void) { return 1; }

void actc__conv_dnnl_set_blocked(int blocked)
{
    pthread_mutex_lock(&g_lock);
    g_layout = blocked < 0 ? -1 : blocked != 0;
    pthread_mutex_unlock(&g_lock);
}

/* Blocked layouts win by far on the 3x3 layers with 64+ channels (bench_conv
 * at batch 128: 300 against 200 GFLOP/s), but on the plain layouts oneDNN
 * runs the few-channel stem forward 4x faster (its blocked kernel for C = 1
 * is poor) and the 1x1 stride-2 shortcuts up to 2x faster (no reorder of
 * the whole input of which a quarter is used). */
static int layout_blocked(int pass, const conv_geom *g)
{
    if (g_layout >= 0) return g_layout;
    if (g->kh * g->kw == 1) return 0;
    if (pass == PASS_FWD && g->C < 8) return 0;
    return 1;
}

static void slot_destroy(dslot *s)
{
    if (s->reorder) dnnl_primitive_destroy(s->reorder);
    s->reorder = NULL;
}

static void entry_free(dentry *e)
{
    if (!e) return;
    if (e->conv) dnnl_primitive_destroy(e->conv);
    slot_destroy(&e->a);
    slot_destroy(&e->b);
    slot_destroy(&e->out);
    free(e);
}

void actc__conv_dnnl_cleanup(void)
{
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_ncache; i++) entry_free(g_cache[i]);
    g_ncache = 0;
    if (g_stream) dnnl_stream_destroy(g_stream);
    if (g_engine) dnnl_engine_destroy(g_engine);
    g_stream = NULL;
    g_engine = NULL;
    g_engine_failed = 0;
    pthread_mutex_unlock(&g_lock);
}

/* Under g_lock.  0 if there is no usable CPU engine (then im2col runs). */
static int engine_ready(void)
{
    if (g_engine) return 1;
    if (g_engine_failed) return 0;
    if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) {
        g_engine = NULL;
        g_engine_failed = 1;
        return 0;
    }
    if (dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(g_engine);
        g_engine = NULL;
        g_engine_failed = 1;
        return 0;
    }
    /* The library registers no exit handler (a library must not run code
     * at its host's exit): actc_shutdown frees the engine, stream and
     * primitives (actc__conv_dnnl_cleanup) while oneDNN is still alive; a
     * program that never calls it leaves them, still reachable from these
     * statics, to the end of the process. */
    return 1;
}

static size_t md_size(const dnnl_memory_desc_t *md) { return dnnl_memory_desc_get_size(md); }

/* Primitive attributes with user scratchpad (and a sum post-op). */
static dnnl_status_t make_attr(int sum, dnnl_primitive_attr_t *attr)
{
    dnnl_status_t st = dnnl_primitive_attr_create(attr);
    if (st != dnnl_success) return st;
    st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && sum) {
        dnnl_post_ops_t po;
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) {
            st = dnnl_post_ops_append_sum(po, 1.0f);
            if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(*attr, po);
            dnnl_post_ops_destroy(po);
        }
    }
    if (st != dnnl_success) dnnl_primitive_attr_destroy(*attr);
    return st;
}

/* Fill slot s: prim is the primitive's layout; an input is reordered
 * user -> prim when they differ, an output prim -> user when they differ or
 * when it accumulates. */
static dnnl_status_t slot_init(dslot *s, int arg, const dnnl_memory_desc_t *user,
                               const dnnl_memory_desc_t *prim, int output, int accumulate)
{
    memset(s, 0, sizeof *s);
    s->arg = arg;
    s->user = *user;
    s->prim = *prim;
    if (!accumulate && dnnl_memory_desc_equal(user, prim)) return dnnl_success;
    dnnl_primitive_attr_t attr;
    dnnl_status_t st = make_attr(accumulate, &attr);
    if (st != dnnl_success) return st;
    dnnl_primitive_desc_t pd;
    st = output ? dnnl_reorder_primitive_desc_create(&pd, prim, g_engine, user, g_engine, attr)
                : dnnl_reorder_primitive_desc_create(&pd, user, g_engine, prim, g_engine, attr);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return st;
    s->rsp = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    st = dnnl_primitive_create(&s->reorder, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) s->reorder = NULL;
    s->bytes = md_size(prim);
    return st;
}

static const dnnl_memory_desc_t *qmd(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int i)
{
    return dnnl_primitive_desc_query_md(pd, what, i);
}

/* Create the primitives of e->key (under g_lock). */
static dnnl_status_t entry_build(dentry *e)
{
    const dkey *k = &e->key;
    const int64_t Ho = (k->H + 2 * k->p - k->kh) / k->s + 1, Wo = (k->W + 2 * k->p - k->kw) / k->s + 1;
    dnnl_dims_t xd = {k->N, k->C, k->H, k->W}, wd = {k->K, k->C, k->kh, k->kw},
                yd = {k->N, k->K, Ho, Wo}, bd = {k->K};
    /* Symmetric padding as PyTorch passes it: with floor division the right
     * padding p gives the same output size as the exact one. */
    dnnl_dims_t st2 = {k->s, k->s}, pad = {k->p, k->p};
    dnnl_memory_desc_t ux, uw, uy, ub, ax, aw, ay;
    const dnnl_format_tag_t act = k->blocked ? dnnl_format_tag_any : dnnl_nchw;
    const dnnl_format_tag_t wt = k->blocked ? dnnl_format_tag_any : dnnl_oihw;
    dnnl_status_t st;
#define TRY(call)                                 \
    do {                                          \
        if ((st = (call)) != dnnl_success) goto out; \
    } while (0)
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fpd = NULL, cpd = NULL;
    TRY(dnnl_memory_desc_init_by_tag(&ux, 4, xd, dnnl_f32, dnnl_nchw));
    TRY(dnnl_memory_desc_init_by_tag(&uw, 4, wd, dnnl_f32, dnnl_oihw));
    TRY(dnnl_memory_desc_init_by_tag(&uy, 4, yd, dnnl_f32, dnnl_nchw));
    TRY(dnnl_memory_desc_init_by_tag(&ub, 1, bd, dnnl_f32, dnnl_a));
    TRY(dnnl_memory_desc_init_by_tag(&ax, 4, xd, dnnl_f32, act));
    TRY(dnnl_memory_desc_init_by_tag(&aw, 4, wd, dnnl_f32, wt));
    TRY(dnnl_memory_desc_init_by_tag(&ay, 4, yd, dnnl_f32, act));
    TRY(make_attr(0, &attr));

    /* The forward descriptor is also the hint the backward passes need. */
    dnnl_convolution_desc_t fd, bdsc;
    TRY(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &ax,
                                           &aw, k->bias ? &ub : NULL, &ay, st2, pad, pad));
    TRY(dnnl_primitive_desc_create(&fpd, &fd, attr, g_engine, NULL));
    if (k->pass == PASS_FWD) {
        cpd = fpd;
        fpd = NULL;
        TRY(slot_init(&e->a, DNNL_ARG_SRC, &ux, qmd(cpd, dnnl_query_src_md, 0), 0, 0));
        TRY(slot_init(&e->b, DNNL_ARG_WEIGHTS, &uw, qmd(cpd, dnnl_query_weights_md, 0), 0, 0));
        TRY(slot_init(&e->out, DNNL_ARG_DST, &uy, qmd(cpd, dnnl_query_dst_md, 0), 1, 0));
        if (k->bias) e->bias = *qmd(cpd, dnnl_query_weights_md, 1);
    } else if (k->pass == PASS_BWD_DATA) {
        TRY(dnnl_convolution_backward_data_desc_init(&bdsc, dnnl_convolution_direct, &ax, &aw, &ay,
                                                     st2, pad, pad));
        TRY(dnnl_primitive_desc_create(&cpd, &bdsc, attr, g_engine, fpd));
        TRY(slot_init(&e->a, DNNL_ARG_DIFF_DST, &uy, qmd(cpd, dnnl_query_diff_dst_md, 0), 0, 0));
        TRY(slot_init(&e->b, DNNL_ARG_WEIGHTS, &uw, qmd(cpd, dnnl_query_weights_md, 0), 0, 0));
        TRY(slot_init(&e->out, DNNL_ARG_DIFF_SRC, &ux, qmd(cpd, dnnl_query_diff_src_md, 0), 1, 1));
    } else {
        TRY(dnnl_convolution_backward_weights_desc_init(&bdsc, dnnl_convolution_direct, &ax, &aw,
                                                        NULL, &ay, st2, pad, pad));
        TRY(dnnl_primitive_desc_create(&cpd, &bdsc, attr, g_engine, fpd));
        TRY(slot_init(&e->a, DNNL_ARG_SRC, &ux, qmd(cpd, dnnl_query_src_md, 0), 0, 0));
        TRY(slot_init(&e->b, DNNL_ARG_DIFF_DST, &uy, qmd(cpd, dnnl_query_diff_dst_md, 0), 0, 0));
        TRY(slot_init(&e->out, DNNL_ARG_DIFF_WEIGHTS, &uw, qmd(cpd, dnnl_query_diff_weights_md, 0), 1,
                      1));
    }
    e->csp = *qmd(cpd, dnnl_query_scratchpad_md, 0);
    TRY(dnnl_primitive_create(&e->conv, cpd));
    e->sp_bytes = md_size(&e->csp);
    const dslot *sl[3] = {&e->a, &e->b, &e->out};
    for (int i = 0; i < 3; i++)
        if (sl[i]->reorder && md_size(&sl[i]->rsp) > e->sp_bytes) e->sp_bytes = md_size(&sl[i]->rsp);
#undef TRY
out:
    if (st != dnnl_success) e->conv = NULL; /* not created (creation sets it only on success) */
    if (cpd) dnnl_primitive_desc_destroy(cpd);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}

static actc_status dnnl_error(dnnl_status_t st, const char *what, const dkey *k)
{
    return actc_set_error(st == dnnl_out_of_memory ? ACTC_ERR_OOM : ACTC_ERR_STATE,
                          "conv2d: oneDNN %s failed (%s) for input [%d, %d, %d, %d], weight "
                          "[%d, %d, %d, %d], stride %d, pad %d",
                          what, dnnl_status2str(st), k->N, k->C, k->H, k->W, k->K, k->C, k->kh,
                          k->kw, k->s, k->p);
}

/* The cached entry for key (created on first use), marked in use; NULL with
 * *unsupported = 1 when oneDNN cannot run it, NULL with an error set on
 * failure. */
static dentry *entry_get(dkey key, const conv_geom *g, int *unsupported, actc_status *err)
{
    *err = ACTC_OK;
    pthread_mutex_lock(&g_lock);
    dentry *e = NULL;
    key.blocked = layout_blocked(key.pass, g);
    if (!engine_ready()) {
        *unsupported = 1;
        goto done;
    }
    for (int i = 0; i < g_ncache; i++)
        if (memcmp(&g_cache[i]->key, &key, sizeof key) == 0) {
            e = g_cache[i];
            break;
        }
    if (!e) {
        if (g_ncache == DNNL_CACHE_MAX) { /* evict the least recently used idle entry */
            int victim = -1;
            for (int i = 0; i < g_ncache; i++)
                if (g_cache[i]->users == 0 && (victim < 0 || g_cache[i]->stamp < g_cache[victim]->stamp))
                    victim = i;
            if (victim < 0) {
                *err = actc_set_error(ACTC_ERR_STATE, "conv2d: oneDNN primitive cache full");
                goto done;
            }
            entry_free(g_cache[victim]);
            g_cache[victim] = g_cache[--g_ncache];
        }
        e = calloc(1, sizeof *e);
        if (!e) {
            *err = actc_set_error(ACTC_ERR_OOM, "conv2d: out of memory for a oneDNN primitive");
            goto done;
        }
        e->key = key;
        dnnl_status_t st = entry_build(e);
        if (st == dnnl_unimplemented || st == dnnl_invalid_arguments) {
            /* Kept, so that the next call does not try again. */
            entry_free(e);
            e = calloc(1, sizeof *e);
            if (!e) {
                *err = actc_set_error(ACTC_ERR_OOM, "conv2d: out of memory for a oneDNN primitive");
                goto done;
            }
            e->key = key;
            e->unsupported = 1;
        } else if (st != dnnl_success) {
            *err = dnnl_error(st, "primitive creation", &key);
            entry_free(e);
            e = NULL;
            goto done;
        }
        g_cache[g_ncache++] = e;
    }
    e->stamp = ++g_clock;
    if (e->unsupported) {
        *unsupported = 1;
        e = NULL;
    } else {
        e->users++;
    }
done:
    pthread_mutex_unlock(&g_lock);
    return e;
}

static void entry_put(dentry *e)
{
    if (!e) return;
    pthread_mutex_lock(&g_lock);
    e->users--;
    pthread_mutex_unlock(&g_lock);
}

/* Execute p with (arg, layout, pointer) triples and the scratchpad. */
typedef struct {
    int arg;
    const dnnl_memory_desc_t *md;
    const void *ptr;
} xarg;

static dnnl_status_t execute(dnnl_primitive_t p, const xarg *xa, int n, const dnnl_memory_desc_t *sp,
                             void *spbuf)
{
    dnnl_exec_arg_t args[6];
    int m = 0;
    dnnl_status_t st = dnnl_success;
    for (int i = 0; i < n && st == dnnl_success; i++) {
        /* oneDNN takes non-const handles; inputs are only read. */
        st = dnnl_memory_create(&args[m].memory, xa[i].md, g_engine, (void *)xa[i].ptr);
        if (st == dnnl_success) args[m++].arg = xa[i].arg;
    }
    if (st == dnnl_success && md_size(sp) > 0) {
        st = dnnl_memory_create(&args[m].memory, sp, g_engine, spbuf);
        if (st == dnnl_success) args[m++].arg = DNNL_ARG_SCRATCHPAD;
    }
    if (st == dnnl_success) st = dnnl_primitive_execute(p, g_stream, m, args);
    if (st == dnnl_success) st = dnnl_stream_wait(g_stream);
    for (int i = 0; i < m; i++) dnnl_memory_destroy(args[i].memory);
    return st;
}

static dnnl_status_t run_reorder(const dslot *s, int output, const void *from, void *to, void *spbuf)
{
    xarg xa[2] = {{DNNL_ARG_FROM, output ? &s->prim : &s->user, from},
                  {DNNL_ARG_TO, output ? &s->user : &s->prim, to}};
    return execute(s->reorder, xa, 2, &s->rsp, spbuf);
}

static size_t rup16(int c) { return ((size_t)c + 15) / 16 * 16; }

/* Balanced chunks of samples bounded by DNNL_CHUNK_BYTES: at most two chunk
 * sizes (nb, and tail for the last chunk), hence two primitives per pass. */
static void chunking(const conv_geom *g, int *nb, int *tail)
{
    size_t per = (rup16(g->C) * g->plane + rup16(g->K) * g->HW) * sizeof(float);
    size_t nbmax = DNNL_CHUNK_BYTES / per;
    if (nbmax < 1) nbmax = 1;
    size_t nchunks = ((size_t)g->N + nbmax - 1) / nbmax;
    *nb = (int)(((size_t)g->N + nchunks - 1) / nchunks);
    *tail = g->N - (int)(nchunks - 1) * *nb;
}

/* The passes' primitives for chunks of nb samples and the tail chunk. */
static actc_status plan_passes(const conv_geom *g, int first, int last, int bias, int *nb, int *unsupported)
{
    int tail;
    *unsupported = 0;
    chunking(g, nb, &tail);
    for (int pass = first; pass <= last; pass++)
        for (int k = 0; k < 2; k++) {
            dkey key = {pass, k ? tail : *nb, g->C, g->H, g->W, g->K, g->kh, g->kw, g->s, g->p,
                        pass == PASS_FWD && bias, 0};
            actc_status err;
            dentry *e = entry_get(key, g, unsupported, &err);
            if (!e) return err;
            entry_put(e);
        }
    return ACTC_OK;
}

actc_status actc__conv_dnnl_backward_plan(const conv_geom *g, int *nb, int *unsupported)
{
    return plan_passes(g, PASS_BWD_DATA, PASS_BWD_WEIGHTS, 0, nb, unsupported);
}

actc_status actc__conv_dnnl_forward_plan(const conv_geom *g, int bias, int *nb, int *unsupported)
{
    return plan_passes(g, PASS_FWD, PASS_FWD, bias, nb, unsupported);
}

/* The three passes share this driver.  a is chunked by samples; b is the
 * weight (FWD, BWD_DATA: whole, reordered once) or dy (BWD_WEIGHTS:
 * chunked); out is y / dx (chunked) or dw (whole, += per chunk). */
static actc_status run_pass(int pass, const conv_geom *g, const float *a, const conv_rows *arows,
                            const float *b, const float *bias, float *out, int *unsupported)
{
    *unsupported = 0;
    if (g->N == 0) return ACTC_OK;
    const size_t xs = (size_t)g->C * g->plane, ys = (size_t)g->K * g->HW;
    const size_t a_stride = pass == PASS_BWD_DATA ? ys : xs;
    const size_t b_stride = pass == PASS_BWD_WEIGHTS ? ys : 0;
    const size_t o_stride = pass == PASS_FWD ? ys : pass == PASS_BWD_DATA ? xs : 0;

    int nb, tail;
    chunking(g, &nb, &tail);

    dkey key = {pass, nb, g->C, g->H, g->W, g->K, g->kh, g->kw, g->s, g->p,
                pass == PASS_FWD && bias != NULL, 0};
    actc_status err;
    dentry *e[2] = {NULL, NULL};
    void *abuf = NULL, *bbuf = NULL, *obuf = NULL, *spbuf = NULL;
    float *achunk = NULL; /* a's chunk when it comes from arows */
    e[0] = entry_get(key, g, unsupported, &err);
    if (!e[0]) return err;
    if (tail != nb) {
        key.N = tail;
        e[1] = entry_get(key, g, unsupported, &err);
        if (!e[1]) {
            entry_put(e[0]);
            return err;
        }
    }

    /* Scratch sized for the larger of the two entries. */
    size_t sa = 0, sb = 0, so = 0, ssp = 0;
    for (int i = 0; i < 2 && e[i]; i++) {
        if (e[i]->a.reorder && e[i]->a.bytes > sa) sa = e[i]->a.bytes;
        if (e[i]->b.reorder && e[i]->b.bytes > sb) sb = e[i]->b.bytes;
        if (e[i]->out.reorder && e[i]->out.bytes > so) so = e[i]->out.bytes;
        if (e[i]->sp_bytes > ssp) ssp = e[i]->sp_bytes;
    }
    err = ACTC_OK;
    if ((sa && !(abuf = actc_mem_alloc(ACTC_MEM_SCRATCH, sa))) ||
        (sb && !(bbuf = actc_mem_alloc(ACTC_MEM_SCRATCH, sb))) ||
        (so && !(obuf = actc_mem_alloc(ACTC_MEM_SCRATCH, so))) ||
        (ssp && !(spbuf = actc_mem_alloc(ACTC_MEM_SCRATCH, ssp))) ||
        (arows && !(achunk = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)nb * a_stride * sizeof(float))))) {
        err = actc_last_status();
        goto done;
    }

    dnnl_status_t st = dnnl_success;
    const dnnl_memory_desc_t *b_layout = NULL; /* layout the weight in bbuf has */
    for (int n0 = 0; n0 < g->N;) {
        const int m = n0 + nb <= g->N ? nb : tail;
        dentry *c = m == nb ? e[0] : e[1];
        const float *ap = achunk;
        if (arows) {
            if ((err = arows->fill(arows->user, n0, m, achunk)) != ACTC_OK) goto done;
        } else {
            ap = a + (size_t)n0 * a_stride;
        }
        const void *a_use = ap, *b_use;
        void *o_use;
        if (c->a.reorder) {
            if ((st = run_reorder(&c->a, 0, ap, abuf, spbuf)) != dnnl_success) goto fail;
            a_use = abuf;
        }
        if (pass == PASS_BWD_WEIGHTS) {
            const float *bp = b + (size_t)n0 * b_stride;
            b_use = bp;
            if (c->b.reorder) {
                if ((st = run_reorder(&c->b, 0, bp, bbuf, spbuf)) != dnnl_success) goto fail;
                b_use = bbuf;
            }
        } else {
            b_use = b;
            if (c->b.reorder) {
                /* The weight is reordered once per call, again only if the
                 * tail chunk's primitive wants another layout. */
                if (!b_layout || !dnnl_memory_desc_equal(b_layout, &c->b.prim)) {
                    if ((st = run_reorder(&c->b, 0, b, bbuf, spbuf)) != dnnl_success) goto fail;
                    b_layout = &c->b.prim;
                }
                b_use = bbuf;
            }
        }
        float *op = out + (size_t)n0 * o_stride;
        o_use = c->out.reorder ? obuf : (void *)op;
        xarg xa[4] = {{c->a.arg, &c->a.prim, a_use},
                      {c->b.arg, &c->b.prim, b_use},
                      {c->out.arg, &c->out.prim, o_use},
                      {DNNL_ARG_BIAS, &c->bias, bias}};
        if ((st = execute(c->conv, xa, key.bias ? 4 : 3, &c->csp, spbuf)) != dnnl_success) goto fail;
        if (c->out.reorder && (st = run_reorder(&c->out, 1, obuf, op, spbuf)) != dnnl_success)
            goto fail;
        n0 += m;
    }
    goto done;
fail:
    key.N = g->N;
    err = dnnl_error(st, pass_name[pass], &key);
done:
    actc_mem_free(achunk);
    actc_mem_free(abuf);
    actc_mem_free(bbuf);
    actc_mem_free(obuf);
    actc_mem_free(spbuf);
    entry_put(e[0]);
    entry_put(e[1]);
    return err;
}

actc_status actc__conv_dnnl_forward(const conv_geom *g, const float *x, const float *w,
                                    const float *b, float *y, int *unsupported)
{
    return run_pass(PASS_FWD, g, x, NULL, w, b, y, unsupported);
}

actc_status actc__conv_dnnl_backward_data(const conv_geom *g, const float *w, const float *dy,
                                          float *dx, int *unsupported)
{
    return run_pass(PASS_BWD_DATA, g, dy, NULL, w, NULL, dx, unsupported);
}

actc_status actc__conv_dnnl_backward_weights(const conv_geom *g, const float *x, const conv_rows *xrows,
                                             const float *dy, float *dw, int *unsupported)
{
    return run_pass(PASS_BWD_WEIGHTS, g, x, xrows, dy, NULL, dw, unsupported);
}

#endif /* ACTC_HAVE_DNNL */
