/* Causal multi-head self-attention, memory-efficient form (Rabe & Staats
 * 2021; the loop order of FlashAttention-2).  Same inputs, output and
 * mathematics as actc_attention_naive (attention.c), but the T x T scores
 * never exist: per (batch item, head, block of BQ queries) the keys are
 * visited in blocks of BK with an online softmax (running row maximum m and
 * sum l; when m grows, l and the output row are rescaled by exp(m_old -
 * m_new)), and key blocks entirely after the query block are skipped.
 *
 * Saved: Q, K, V and the output O (ACT), and the per-row log-sum-exp
 * L = m + log(l) [B, H, T] (EXACT: backward exponentiates against it, so an
 * error there would scale whole rows of P).  When the policy stored Q or K
 * lossy, L no longer matches them and backward recomputes it from the
 * decoded Q and K first (see flash_backward).  Even so, P recomputed from
 * rounded Q and K is biased (exp of a noisy score): at 4 bits llama-mini
 * trains ~1 bpb worse than with the textbook form, whose saved P rounds
 * without bias (bench/RESULTS.md); the gact levels therefore ask for the
 * textbook form.  Backward recomputes
 * P = exp(scale Q K^T - L) block by block:
 *   D_i = rowsum(dO_i O_i),  dP = dO V^T,  dS = P (dP - D),
 *   dV += P^T dO,  dQ += scale dS K,  dK += scale dS^T Q.
 * All block products are sgemm calls on the heads in place (leading dim
 * H*Dh).  Forward tasks are (batch, head, query block), backward tasks are
 * (batch, head): one task owns its head's rows of dQ, dK and dV, so no two
 * threads write the same gradient.  Scratch (SCRATCH category) is a few
 * BQ x BK blocks per thread, whatever B and T. */
#include "attn_internal.h"
#include <math.h>
#include <omp.h>
#include <string.h>

enum { IA_H = 0, IA_BQ, IA_BK };
enum { FLASH_NSAVES = 5 }; /* Q, K, V, O, L */

static int g_bq = ACTC_FLASH_BQ, g_bk = ACTC_FLASH_BK;

void actc__flash_set_blocks(int bq, int bk)
{
    g_bq = bq > 0 ? bq : ACTC_FLASH_BQ;
    g_bk = bk > 0 ? bk : ACTC_FLASH_BK;
}

static int imin(int a, int b) { return a < b ? a : b; }

/* Keys of block [k0, k0+nk) visible from query t (those <= t): 0..nk. */
static int visible(int t, int k0, int nk)
{
    const int nv = t - k0 + 1;
    return nv < 0 ? 0 : nv > nk ? nk : nv;
}

/* One row of a score block in the online softmax: the visible scores
 * s[0..nv) become exp(s - m_new), the rest exactly 0, and the running
 * maximum *m, sum *l and output row o[0..Dh) move to the new maximum. */
ACTC_ATTN_CLONES static void online_row(float *s, int nv, int nk, float *m, float *l, float *o, int Dh)
{
    if (nv > 0) {
        float mx = *m;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < nv; j++) mx = s[j] > mx ? s[j] : mx;
        /* l == 0: nothing seen yet (m is -inf), o is still zero. */
        const float corr = *l > 0.0f ? expf(*m - mx) : 0.0f;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < nv; j++) {
            const float e = actc__expf(s[j] - mx);
            s[j] = e;
            sum += e;
        }
        *l = *l * corr + sum;
        *m = mx;
        if (o && corr != 1.0f) {
#pragma omp simd
            for (int e = 0; e < Dh; e++) o[e] *= corr;
        }
    }
    if (nk > nv) memset(s + nv, 0, (size_t)(nk - nv) * sizeof(float));
}

/* One row of a block in backward: the scores s become P = exp(s - L) where
 * visible and exactly 0 elsewhere, and dP becomes dS = P (dP - D) in place. */
ACTC_ATTN_CLONES static void backward_row(float *s, float *dp, int nv, int nk, float L, float D)
{
#pragma omp simd
    for (int j = 0; j < nv; j++) {
        const float p = actc__expf(s[j] - L);
        s[j] = p;
        dp[j] = p * (dp[j] - D);
    }
    for (int j = nv; j < nk; j++) s[j] = dp[j] = 0.0f;
}

/* Rows [q0, q0+nq) of head (b, h): O and L.  S is BQ x BK, m and l BQ. */
static void flash_fwd_task(const actc__attn_dims *d, const actc__attn_bufs *x, float *o, float *lse, int b,
                           int h, int q0, int bq, int bk, float *S, float *m, float *l)
{
    const int T = d->T, D = d->D, Dh = d->Dh, nq = imin(bq, T - q0);
    const size_t head = actc__attn_head(d, b, h), qoff = head + (size_t)q0 * D;
    float *oi = o + qoff;
    for (int r = 0; r < nq; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        memset(oi + (size_t)r * D, 0, (size_t)Dh * sizeof(float));
    }
    /* Key blocks starting after the last query of the block are masked. */
    for (int k0 = 0; k0 <= q0 + nq - 1; k0 += bk) {
        const int nk = imin(bk, T - k0);
        const size_t koff = head + (size_t)k0 * D;
        actc__sgemm(0, 1, nq, nk, Dh, d->scale, x->q + qoff, D, x->k + koff, D,
                    0.0f, S, bk);
        for (int r = 0; r < nq; r++)
            online_row(S + (size_t)r * bk, visible(q0 + r, k0, nk), nk, &m[r], &l[r], oi + (size_t)r * D, Dh);
        actc__sgemm(0, 0, nq, Dh, nk, 1.0f, S, bk, x->v + koff, D, 1.0f, oi,
                    D);
    }
    float *lrow = lse + ((size_t)b * d->H + h) * T + q0;
    for (int r = 0; r < nq; r++) {
        const float inv = 1.0f / l[r]; /* l >= 1: key 0 is visible to every row */
#pragma omp simd
        for (int e = 0; e < Dh; e++) oi[(size_t)r * D + e] *= inv;
        lrow[r] = m[r] + logf(l[r]);
    }
}

/* Log-sum-exp of every row of head (b, h) from the Q and K backward loaded,
 * into lse: forward's online softmax without the output.  S is BQ x BK, m
 * and l BQ. */
static void lse_task(const actc__attn_dims *d, const actc__attn_bufs *x, float *lse, int b, int h, int bq, int bk,
                     float *S, float *m, float *l)
{
    const int T = d->T, D = d->D, Dh = d->Dh;
    const size_t head = actc__attn_head(d, b, h);
    float *lrow = lse + ((size_t)b * d->H + h) * T;
    for (int q0 = 0; q0 < T; q0 += bq) {
        const int nq = imin(bq, T - q0);
        for (int r = 0; r < nq; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        for (int k0 = 0; k0 <= q0 + nq - 1; k0 += bk) {
            const int nk = imin(bk, T - k0);
            actc__sgemm(0, 1, nq, nk, Dh, d->scale, x->q + head + (size_t)q0 * D,
                        D, x->k + head + (size_t)k0 * D, D, 0.0f, S, bk);
            for (int r = 0; r < nq; r++)
                online_row(S + (size_t)r * bk, visible(q0 + r, k0, nk), nk, &m[r], &l[r], NULL, Dh);
        }
        for (int r = 0; r < nq; r++) lrow[q0 + r] = m[r] + logf(l[r]);
    }
}

/* All gradients of head (b, h).  S and dP are BQ x BK, Dr is BQ. */
static void flash_bwd_task(const actc__attn_dims *d, const actc__attn_bufs *x, int b, int h, int bq, int bk,
                           float *S, float *dP, float *Dr)
{
    const int T = d->T, D = d->D, Dh = d->Dh;
    const size_t head = actc__attn_head(d, b, h);
    const float *lrow = x->lse + ((size_t)b * d->H + h) * T;
    for (int q0 = 0; q0 < T; q0 += bq) {
        const int nq = imin(bq, T - q0);
        const size_t qoff = head + (size_t)q0 * D;
        for (int r = 0; r < nq; r++) { /* D_i = rowsum(dO_i O_i) */
            const float *go = x->dout + qoff + (size_t)r * D, *oo = x->o + qoff + (size_t)r * D;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int e = 0; e < Dh; e++) s += go[e] * oo[e];
            Dr[r] = s;
        }
        for (int k0 = 0; k0 <= q0 + nq - 1; k0 += bk) {
            const int nk = imin(bk, T - k0);
            const size_t koff = head + (size_t)k0 * D;
            actc__sgemm(0, 1, nq, nk, Dh, d->scale, x->q + qoff, D,
                        x->k + koff, D, 0.0f, S, bk);
            actc__sgemm(0, 1, nq, nk, Dh, 1.0f, x->dout + qoff, D, x->v + koff,
                        D, 0.0f, dP, bk);
            for (int r = 0; r < nq; r++)
                backward_row(S + (size_t)r * bk, dP + (size_t)r * bk, visible(q0 + r, k0, nk), nk, lrow[q0 + r],
                             Dr[r]);
            if (x->gv)
                actc__sgemm(1, 0, nk, Dh, nq, 1.0f, S, bk, x->dout + qoff, D,
                            1.0f, x->gv + koff, D);
            if (x->gq)
                actc__sgemm(0, 0, nq, Dh, nk, d->scale, dP, bk, x->k + koff,
                            D, 1.0f, x->gq + qoff, D);
            if (x->gk)
                actc__sgemm(1, 0, nk, Dh, nq, d->scale, dP, bk, x->q + qoff, D,
                            1.0f, x->gk + koff, D);
        }
    }
}

static actc_status flash_backward(actc_ctx *ctx, actc_node *node)
{
    /* Forward's log-sum-exp belongs to the exact Q and K.  When the policy
     * stored them lossy, the scores recomputed from the decoded ones can
     * exceed it by far (2-bit Q and K: exp overflowed into NaN gradients on
     * llama-mini), and its rows of P would not sum to 1: then the
     * normaliser is recomputed from what was decoded, so P is the exact
     * softmax of the decoded scores, as the textbook form's stored P is. */
    const int renorm = !actc_saved_lossless(ctx, node, 0) || !actc_saved_lossless(ctx, node, 1);
    actc_tensor *t[FLASH_NSAVES];
    actc__attn_bufs x;
    actc_status st = actc__attn_load(ctx, node, FLASH_NSAVES, t, &x);
    if (st != ACTC_OK) return st;
    x.o = t[3]->data;
    const actc__attn_dims d = actc__attn_dims_of(node->inputs[0], node->iattr[IA_H]);
    const int bq = node->iattr[IA_BQ], bk = node->iattr[IA_BK], BH = d.B * d.H, nt = omp_get_max_threads();
    const size_t blk = (size_t)bq * bk;
    size_t stride;
    float *scratch = actc__attn_thread_scratch(nt, ACTC_FLASH_BWD_SCRATCH(bq, bk), &stride);
    /* The recomputed normaliser goes to a buffer of its own: the loaded one
     * is read-only (an exact save shares the saved tensor's data). */
    float *lse = renorm && scratch ? actc_mem_alloc(ACTC_MEM_SCRATCH, t[4]->numel * sizeof(float)) : NULL;
    if (!scratch || (renorm && !lse)) {
        actc_mem_free(scratch);
        actc__attn_release(FLASH_NSAVES, t);
        return actc_last_status();
    }
    x.lse = renorm ? lse : t[4]->data;
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (BH > 1)
    for (int bh = 0; bh < BH; bh++) {
        float *s = scratch + (size_t)omp_get_thread_num() * stride;
        if (renorm) lse_task(&d, &x, lse, bh / d.H, bh % d.H, bq, bk, s, s + blk, s + blk + bq);
        flash_bwd_task(&d, &x, bh / d.H, bh % d.H, bq, bk, s, s + blk, s + 2 * blk);
    }
    actc_mem_free(lse);
    actc_mem_free(scratch);
    actc__attn_release(FLASH_NSAVES, t);
    return ACTC_OK;
}

actc_tensor *actc_attention_flash(actc_ctx *ctx, actc_tensor *q, actc_tensor *k, actc_tensor *v, int n_heads)
{
    actc__attn_dims d;
    actc_tensor *y = actc__attn_prepare("attention_flash", ctx, q, k, v, n_heads, &d);
    if (!y) return NULL;
    const int bq = g_bq, bk = g_bk, nt = omp_get_max_threads();
    const int nqb = (d.T + bq - 1) / bq, ntask = d.B * d.H * nqb;
    int lshape[3] = {d.B, d.H, d.T};
    actc_tensor *lse = actc_tensor_new(ACTC_MEM_SCRATCH, 3, lshape);
    size_t stride;
    float *scratch = lse ? actc__attn_thread_scratch(nt, ACTC_FLASH_FWD_SCRATCH(bq, bk), &stride) : NULL;
    if (!scratch) {
        actc_tensor_release(lse);
        actc_tensor_release(y);
        return NULL;
    }
    const actc__attn_bufs x = {q->data, k->data, v->data, NULL, NULL, NULL, NULL, NULL, NULL};
    /* Later query blocks visit more key blocks: dynamic scheduling. */
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (ntask > 1)
    for (int task = 0; task < ntask; task++) {
        float *s = scratch + (size_t)omp_get_thread_num() * stride;
        const int bh = task / nqb, qb = task % nqb;
        flash_fwd_task(&d, &x, y->data, lse->data, bh / d.H, bh % d.H, qb * bq, bq, bk, s, s + (size_t)bq * bk,
                       s + (size_t)bq * bk + bq);
    }
    actc_mem_free(scratch);

    actc_tensor *in[3] = {q, k, v};
    actc_node *node;
    if (!actc__op_record(ctx, "attention_flash", flash_backward, y, 3, in, &node)) y = NULL;
    if (y && node) {
        node->iattr[IA_H] = d.H;
        node->iattr[IA_BQ] = bq;
        node->iattr[IA_BK] = bk;
        const actc_tensor *save[FLASH_NSAVES] = {q, k, v, y, lse};
        /* Backward recomputes P = softmax(Q K^T) from the saved Q and K: the
         * exponential of a rounded score is biased, so none of the saves is
         * used linearly (13-17% bias in dq/dk/dv with all of them rounded,
         * measured against PyTorch, issue 17). */
        static const actc_role roles[FLASH_NSAVES] = {ACTC_ROLE_ATTN_Q, ACTC_ROLE_ATTN_K, ACTC_ROLE_ATTN_V,
                                                       ACTC_ROLE_ATTN_OUT, ACTC_ROLE_ATTN_STATS};
        for (int i = 0; i < FLASH_NSAVES && y; i++) {
            const actc_save_role r = actc__role(roles[i], 0);
            if (actc_save_as(ctx, node, save[i], i < 4 ? ACTC_SAVE_ACT : ACTC_SAVE_EXACT, &r) != ACTC_OK) {
                actc_tensor_release(y);
                y = NULL;
            }
        }
    }
    actc_tensor_release(lse);
    return y;
}
