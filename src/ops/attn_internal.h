/* Internal helpers shared by the attention operators: matmul.c, softmax.c,
 * rope.c, attention.c (naive form) and attention_flash.c (memory-efficient
 * form).  Tests may include it to reach the flash block-size knob. */
#ifndef ACTC_ATTN_INTERNAL_H
#define ACTC_ATTN_INTERNAL_H
#include "ops.h"

/* The row kernels below (exp-bound) are compiled for AVX2 and for baseline
 * x86-64, the loader picking one per CPU, as the quantizer kernels do: the
 * build has no -march.  No FMA either way, but the row sums run on 8 lanes
 * instead of 4, so the two may differ in the last bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) /* clang: see quant_kernels.h */
#define ACTC_ATTN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ACTC_ATTN_CLONES
#endif

/* Causal softmax of one row of n scores (softmax.c): p[j] = exp(scale x[j] -
 * max) / sum over the nv visible columns j < nv (1 <= nv <= n), p[j] = 0
 * exactly for j >= nv.  x may be p (in place). */
void actc__softmax_row(const float *x, float *p, int nv, int n, float scale);
/* Backward of one such row given its output p: with c = sum_j g[j] p[j],
 * dx[j] = scale p[j] (g[j] - c).  accumulate: dx[j] += that over the visible
 * columns; otherwise dx is overwritten, zeros beyond nv (g may be dx). */
void actc__softmax_row_backward(const float *p, const float *g, float *dx, int nv, int n, float scale,
                                int accumulate);

/* Shapes of one attention call: q, k, v are [B, T, D] with D = H * Dh, head h
 * being columns [h*Dh, (h+1)*Dh) of every row. */
typedef struct {
    int B, T, H, Dh, D;
    float scale; /* 1 / sqrt(Dh) */
} actc__attn_dims;

/* The dims of an attention node from its q input and head count. */
actc__attn_dims actc__attn_dims_of(const actc_tensor *q, int n_heads);

/* The tensors of one attention call, all [B, T, D] except lse [B, H, T]
 * (per-row log-sum-exp of the flash form).  Gradients are NULL when not
 * needed; they may coincide when q, k, v are one tensor. */
typedef struct {
    const float *q, *k, *v, *o, *lse, *dout;
    float *gq, *gk, *gv;
} actc__attn_bufs;

/* Load saves 0..n-1 of node into t[] (read-only: decoded copies, or views
 * of tensors saved exactly; release with actc__attn_release), and the
 * gradient buffers of inputs q, k, v into b.
 * On failure everything loaded is released and the status returned. */
actc_status actc__attn_load(actc_ctx *ctx, actc_node *node, int n, actc_tensor **t, actc__attn_bufs *b);
void actc__attn_release(int n, actc_tensor **t);

/* Check the arguments of an attention form named op (q, k, v each
 * [B, T, H*Dh] or [B, T, H, Dh], same B, T and width, H = n_heads dividing
 * the width), fill *d and allocate the [B, T, D] output (ACT).  NULL with
 * ACTC_ERR_INVALID naming op and the shapes. */
actc_tensor *actc__attn_prepare(const char *op, actc_ctx *ctx, const actc_tensor *q, const actc_tensor *k,
                                const actc_tensor *v, int n_heads, actc__attn_dims *d);

/* Element (b, t=0, column h*Dh) of a [B, T, D] buffer: head h of batch item b
 * is then a T x Dh matrix with leading dimension D. */
static inline size_t actc__attn_head(const actc__attn_dims *d, int b, int h)
{
    return (size_t)b * d->T * d->D + (size_t)h * d->Dh;
}

/* Per-thread scratch of `floats_per_thread` floats for nt threads, each
 * thread's part starting on its own cache line (no false sharing).  SCRATCH
 * category; NULL with ACTC_ERR_OOM set.  *stride receives the per-thread
 * stride in floats. */
float *actc__attn_thread_scratch(int nt, size_t floats_per_thread, size_t *stride);

/* Default block sizes of the flash form (queries x keys).  64 x 64 scores
 * are 16 KiB: the S and dP blocks of a thread stay in L1/L2 next to the
 * head's Q, K, V rows. */
#define ACTC_FLASH_BQ 64
#define ACTC_FLASH_BK 64
/* Per-thread scratch floats of the flash form: forward S + m + l, backward
 * S + dP + D (attention_flash.c; tests bound the SCRATCH peak with these). */
#define ACTC_FLASH_FWD_SCRATCH(bq, bk) ((size_t)(bq) * (bk) + 2 * (size_t)(bq))
#define ACTC_FLASH_BWD_SCRATCH(bq, bk) (2 * (size_t)(bq) * (bk) + (size_t)(bq))
/* Block sizes of the flash form (queries x keys): 0 restores the defaults.
 * Not thread-safe; for tests that need several blocks on small inputs. */
void actc__flash_set_blocks(int bq, int bk);
#endif
