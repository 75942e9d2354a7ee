/* Causal multi-head self-attention, textbook form, and the helpers both
 * attention forms share (argument checks, dims, loads, scratch).
 *
 * q, k, v are [B, T, H*Dh] (the outputs of the projections; [B, T, H, Dh]
 * is accepted too, same memory), head h being columns [h*Dh, (h+1)*Dh) of
 * each row; the output O is [B, T, H*Dh] in the same layout, ready for the
 * output projection.  Heads are read in place as T x Dh matrices with
 * leading dimension H*Dh, so nothing is transposed or copied.
 *
 * Per (batch item, head), with scale = 1/sqrt(Dh):
 *   S = scale Q K^T,  P = causal softmax(S),  O = P V
 * One node keeps what a framework's naive attention keeps: Q, K, V and P
 * [B, H, T, T], all ACT, and O (ACT; the output projection saves the same
 * tensor, so the store keeps it once).  Backward:
 *   dV = P^T dO,  dP = dO V^T,  dS = P (dP - D),  D = rowsum(dP P) = rowsum(dO O)
 *   dQ = scale dS K,  dK = scale dS^T Q.
 * D is taken as rowsum(dO O), as the memory-efficient form does: with P
 * stored lossily, rowsum(dP P) would multiply P's rounding by itself (a bias
 * of dP times P's rounding variance in every dS), while P (dP - rowsum(dO
 * O)) is linear in P and O, each rounded on its own: unbiased.
 * Scratch: P for all heads while it is saved (it is the saved tensor), one
 * T x T block per thread otherwise (eval mode) and for dP in backward.
 * Heads go to threads, each sgemm then single-threaded (OpenBLAS inside an
 * OpenMP region); a single head leaves the threading to OpenBLAS. */
#include "attn_internal.h"
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>

enum { IA_H = 0 };
enum { NAIVE_NSAVES = 5 }; /* Q, K, V, P, O (O with role ATTN_OUT: the output projection reads it) */

/* ---- shared by both forms ------------------------------------------------ */

actc__attn_dims actc__attn_dims_of(const actc_tensor *q, int n_heads)
{
    actc__attn_dims d;
    d.B = q->shape[0];
    d.T = q->shape[1];
    d.D = (int)(q->numel / ((size_t)d.B * d.T));
    d.H = n_heads;
    d.Dh = d.D / n_heads;
    d.scale = 1.0f / sqrtf((float)d.Dh);
    return d;
}

actc_tensor *actc__attn_prepare(const char *op, actc_ctx *ctx, const actc_tensor *q, const actc_tensor *k,
                                const actc_tensor *v, int n_heads, actc__attn_dims *d)
{
    OP_CHECK(ctx, "%s: NULL context", op);
    const actc_tensor *in[3] = {q, k, v};
    char s[3][64];
    for (int i = 0; i < 3; i++) {
        OP_CHECK(in[i] && in[i]->data, "%s: %c is NULL or its data was already freed", op, "qkv"[i]);
        actc_shape_str(in[i], s[i], sizeof s[i]);
    }
    OP_CHECK(n_heads >= 1, "%s: n_heads must be >= 1, got %d", op, n_heads);
    for (int i = 0; i < 3; i++)
        OP_CHECK((in[i]->ndim == 3 || (in[i]->ndim == 4 && in[i]->shape[2] == n_heads)) && in[i]->numel > 0,
                 "%s: %c must be a non-empty [B, T, H*Dh] or [B, T, H=%d, Dh], got %s", op, "qkv"[i], n_heads,
                 s[i]);
    const size_t W = q->numel / ((size_t)q->shape[0] * q->shape[1]);
    for (int i = 1; i < 3; i++)
        OP_CHECK(in[i]->shape[0] == q->shape[0] && in[i]->shape[1] == q->shape[1] &&
                     in[i]->numel == q->numel,
                 "%s: q %s, k %s and v %s must agree in B, T and width", op, s[0], s[1], s[2]);
    OP_CHECK(W % (size_t)n_heads == 0, "%s: n_heads %d does not divide the width %zu of q %s", op, n_heads, W,
             s[0]);
    OP_CHECK(W <= (size_t)INT_MAX, "%s: q %s is too wide", op, s[0]);
    *d = actc__attn_dims_of(q, n_heads);
    int shape[3] = {d->B, d->T, d->D};
    return actc_tensor_new(ACTC_MEM_ACT, 3, shape);
}

float *actc__attn_thread_scratch(int nt, size_t floats_per_thread, size_t *stride)
{
    *stride = (floats_per_thread + 15) & ~(size_t)15; /* 64-byte lines */
    return actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)nt * *stride * sizeof(float));
}

void actc__attn_release(int n, actc_tensor **t)
{
    for (int i = 0; i < n; i++) {
        actc_tensor_release(t[i]);
        t[i] = NULL;
    }
}

actc_status actc__attn_load(actc_ctx *ctx, actc_node *node, int n, actc_tensor **t, actc__attn_bufs *b)
{
    memset(b, 0, sizeof *b);
    for (int i = 0; i < n; i++) t[i] = NULL;
    actc_status st = ACTC_OK;
    if ((st = actc_grad_buffer(ctx, node->inputs[0], &b->gq)) != ACTC_OK ||
        (st = actc_grad_buffer(ctx, node->inputs[1], &b->gk)) != ACTC_OK ||
        (st = actc_grad_buffer(ctx, node->inputs[2], &b->gv)) != ACTC_OK)
        return st;
    for (int i = 0; i < n; i++)
        if (!(t[i] = actc_load(ctx, node, i))) {
            st = actc_last_status();
            actc__attn_release(i, t);
            return st;
        }
    b->q = t[0]->data;
    b->k = t[1]->data;
    b->v = t[2]->data;
    b->dout = node->output->grad->data;
    return ACTC_OK;
}

/* ---- naive form ---------------------------------------------------------- */

/* S = scale Q K^T into P (T x T), the causal softmax in place, O = P V. */
static void naive_head_forward(const actc__attn_dims *d, const actc__attn_bufs *x, float *o, float *P, int b,
                               int h)
{
    const size_t off = actc__attn_head(d, b, h);
    const int T = d->T, D = d->D;
    actc__sgemm(0, 1, T, T, d->Dh, d->scale, x->q + off, D, x->k + off, D,
                0.0f, P, T);
    for (int i = 0; i < T; i++) actc__softmax_row(P + (size_t)i * T, P + (size_t)i * T, i + 1, T, 1.0f);
    actc__sgemm(0, 0, T, d->Dh, T, 1.0f, P, T, x->v + off, D, 0.0f, o + off,
                D);
}

/* One head's gradients from its P; dP is a T x T scratch block. */
static void naive_head_backward(const actc__attn_dims *d, const actc__attn_bufs *x, const float *P, float *dP,
                                int b, int h)
{
    const size_t off = actc__attn_head(d, b, h);
    const int T = d->T, D = d->D, Dh = d->Dh;
    actc__sgemm(0, 1, T, T, Dh, 1.0f, x->dout + off, D, x->v + off, D, 0.0f,
                dP, T);
    if (x->gv)
        actc__sgemm(1, 0, T, Dh, T, 1.0f, P, T, x->dout + off, D, 1.0f,
                    x->gv + off, D);
    if (!x->gq && !x->gk) return;
    /* dS in place of dP; the scale of S goes into the products below. */
    for (int i = 0; i < T; i++) {
        const float *go = x->dout + off + (size_t)i * D, *oi = x->o + off + (size_t)i * D;
        float Di = 0.0f;
        for (int c = 0; c < Dh; c++) Di += go[c] * oi[c];
        const float *pi = P + (size_t)i * T;
        float *di = dP + (size_t)i * T;
        for (int j = 0; j <= i; j++) di[j] = pi[j] * (di[j] - Di);
        if (i + 1 < T) memset(di + i + 1, 0, (size_t)(T - i - 1) * sizeof *di);
    }
    if (x->gq)
        actc__sgemm(0, 0, T, Dh, T, d->scale, dP, T, x->k + off, D, 1.0f,
                    x->gq + off, D);
    if (x->gk)
        actc__sgemm(1, 0, T, Dh, T, d->scale, dP, T, x->q + off, D, 1.0f,
                    x->gk + off, D);
}

static actc_status naive_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *t[NAIVE_NSAVES];
    actc__attn_bufs x;
    actc_status st = actc__attn_load(ctx, node, NAIVE_NSAVES, t, &x);
    if (st != ACTC_OK) return st;
    const actc__attn_dims d = actc__attn_dims_of(node->inputs[0], node->iattr[IA_H]);
    const size_t TT = (size_t)d.T * d.T;
    const int BH = d.B * d.H, nt = omp_get_max_threads();
    size_t stride;
    float *scratch = actc__attn_thread_scratch(nt, TT, &stride);
    if (!scratch) {
        actc__attn_release(NAIVE_NSAVES, t);
        return actc_last_status();
    }
    const float *P = t[3]->data;
    x.o = t[4]->data;
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (BH > 1)
    for (int bh = 0; bh < BH; bh++)
        naive_head_backward(&d, &x, P + (size_t)bh * TT, scratch + (size_t)omp_get_thread_num() * stride,
                            bh / d.H, bh % d.H);
    actc_mem_free(scratch);
    actc__attn_release(NAIVE_NSAVES, t);
    return ACTC_OK;
}

actc_tensor *actc_attention_naive(actc_ctx *ctx, actc_tensor *q, actc_tensor *k, actc_tensor *v, int n_heads)
{
    actc__attn_dims d;
    actc_tensor *y = actc__attn_prepare("attention_naive", ctx, q, k, v, n_heads, &d);
    if (!y) return NULL;
    const size_t TT = (size_t)d.T * d.T;
    const int BH = d.B * d.H, nt = omp_get_max_threads();
    /* P of every head only when it will be saved (the same condition under
     * which actc_node_new records a node). */
    const int keep = actc_ctx_recording(ctx) && (q->requires_grad || k->requires_grad || v->requires_grad);
    int pshape[4] = {d.B, d.H, d.T, d.T};
    actc_tensor *pall = keep ? actc_tensor_new(ACTC_MEM_SCRATCH, 4, pshape) : NULL;
    size_t stride = TT;
    float *pbuf = keep ? (pall ? pall->data : NULL) : actc__attn_thread_scratch(nt, TT, &stride);
    if (!pbuf) {
        actc_tensor_release(y);
        return NULL;
    }
    const actc__attn_bufs x = {q->data, k->data, v->data, NULL, NULL, NULL, NULL, NULL, NULL};
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (BH > 1)
    for (int bh = 0; bh < BH; bh++)
        naive_head_forward(&d, &x, y->data, pbuf + (keep ? (size_t)bh : (size_t)omp_get_thread_num()) * stride,
                           bh / d.H, bh % d.H);
    if (!keep) actc_mem_free(pbuf);

    actc_tensor *in[3] = {q, k, v};
    actc_node *node;
    if (!actc__op_record(ctx, "attention_naive", naive_backward, y, 3, in, &node)) y = NULL;
    if (y && node) {
        node->iattr[IA_H] = d.H;
        const actc_tensor *save[NAIVE_NSAVES] = {q, k, v, pall, y};
        /* Backward is linear in each save: dV = P^T dO, dP = dO V^T, dS =
         * P (dP - rowsum(dO O)), dQ = dS K, dK = dS^T Q (products of
         * independently rounded saves stay unbiased). */
        static const actc_role roles[NAIVE_NSAVES] = {ACTC_ROLE_ATTN_Q, ACTC_ROLE_ATTN_K, ACTC_ROLE_ATTN_V,
                                                       ACTC_ROLE_ATTN_PROBS, ACTC_ROLE_ATTN_OUT};
        for (int i = 0; i < NAIVE_NSAVES && y; i++) {
            const actc_save_role r = actc__role(roles[i], 1);
            if (actc_save_as(ctx, node, save[i], ACTC_SAVE_ACT, &r) != ACTC_OK) {
                actc_tensor_release(y);
                y = NULL;
            }
        }
    }
    actc_tensor_release(pall); /* the store holds a copy or a reference of its own */
    return y;
}

/* ---- the form the plan asks for ------------------------------------------ */

actc_tensor *actc_attention(actc_ctx *ctx, actc_tensor *q, actc_tensor *k, actc_tensor *v, int n_heads, int form)
{
    if (form != ACTC_ATTN_FLASH && form != ACTC_ATTN_NAIVE) {
        actc_set_error(ACTC_ERR_INVALID, "actc_attention: form %d (ACTC_ATTN_FLASH %d or ACTC_ATTN_NAIVE %d)", form,
                       ACTC_ATTN_FLASH, ACTC_ATTN_NAIVE);
        return NULL;
    }
    switch (actc_ctx_plan_region(ctx, ACTC_REGION_ATTN)) {
    case ACTC_PLAN_SAVE: form = ACTC_ATTN_NAIVE; break;
    case ACTC_PLAN_RECOMPUTE: form = ACTC_ATTN_FLASH; break;
    default: break;
    }
    return form == ACTC_ATTN_NAIVE ? actc_attention_naive(ctx, q, k, v, n_heads)
                                   : actc_attention_flash(ctx, q, k, v, n_heads);
}
