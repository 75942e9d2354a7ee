/* Decoder-only transformer language models over token ids.
 *
 *  gpt   (GPT-2, Radford et al. 2019): token + learned position embeddings;
 *        per layer x += proj(attn(LN1(x))), x += fc2(gelu(fc1(LN2(x)))) with
 *        a 4x MLP and biases everywhere; final LayerNorm; the head is the
 *        token embedding transposed (tied).  Initialisation as GPT-2: N(0,
 *        0.02), residual projections N(0, 0.02 / sqrt(2 layers)), biases 0.
 *  llama (Touvron et al. 2023): token embedding, RMSNorm, rotary positions on
 *        Q and K, SwiGLU MLP w2(silu(w1 x) * w3 x) with hidden width
 *        256 * ceil((8 D / 3) / 256), no biases, an untied head.
 *
 * Q, K and V are three D x D projections of the same normalised input (the
 * store keeps that input once), so attention gets them as separate tensors
 * in its [B, T, H*Dh] layout with no split or copy.  Attention is the
 * memory-efficient form unless opts.attention asks for the textbook one or
 * the policy plans the other (actc_attention reads the plan itself).
 *
 * Every operator saves through the store, so every compression policy applies
 * to the whole model; scopes ("h3.attn", "h3.mlp", ...) name the saves.  The
 * norms and the MLP's activation are regions (actc_region, actc_region_n)
 * that a policy may have recomputed from their inputs (AGoQ), and each layer
 * is a BLOCK region a policy may checkpoint (GACT's CB levels). */
#include "model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NORM_EPS 1e-5f
#define INIT_STD 0.02f

struct tf_impl;

/* A normalisation's parameters, as a recompute region's argument (it must
 * outlive the step: it lives in the model). */
typedef struct {
    const struct tf_impl *t;
    actc_tensor *g, *b;
} norm_arg;

typedef struct {
    actc_tensor *n1_g, *n1_b, *n2_g, *n2_b;     /* norms (b: gpt only)       */
    norm_arg n1, n2;
    actc_tensor *wq, *bq, *wk, *bk, *wv, *bv;   /* attention projections     */
    actc_tensor *wo, *bo;
    actc_tensor *w1, *b1, *w2, *b2, *w3;        /* MLP (w3: llama's gate)    */
    const actc_model *m;                        /* for the layer as a segment */
    int index;
} tf_layer;

typedef struct tf_impl {
    int llama;
    int lo, hi;         /* the blocks this model runs (a pipeline part's)  */
    int embed, last;    /* it holds the embedding; the final norm and head */
    tf_layer *layers;
    actc_tensor *wte, *wpe, *nf_g, *nf_b, *head;
    norm_arg nf;
    int32_t *pos;       /* position ids 0..T-1 per row, grown on demand   */
    size_t pos_cap;
} tf_impl;

static void tf_free(void *p)
{
    tf_impl *t = p;
    if (!t) return;
    free(t->layers);
    free(t->pos);
    free(t);
}

/* Replace *cur by next (releasing the old one); NULL next propagates. */
static int step(actc_tensor **cur, actc_tensor *next)
{
    actc_tensor_release(*cur);
    *cur = next;
    return next != NULL;
}

static actc_tensor *norm_fn(actc_ctx *ctx, actc_tensor *x, void *user)
{
    const norm_arg *a = user;
    return a->t->llama ? actc_rmsnorm(ctx, x, a->g, NORM_EPS) : actc_layernorm(ctx, x, a->g, a->b, NORM_EPS);
}

/* The norm as a region (AGoQ recomputes it from its input, and the layers
 * reading its output save nothing of their own). */
static actc_tensor *norm(actc_ctx *ctx, actc_tensor *x, const norm_arg *a)
{
    return actc_region(ctx, ACTC_REGION_NORM, norm_fn, (void *)a, x);
}

/* The MLP's activation of u (gated by x[1] for llama) as a region; it takes
 * the inputs, so outside a recompute the derivative overwrites u's buffer. */
static actc_tensor *act_fn(actc_ctx *ctx, int n, actc_tensor *const *x, void *user)
{
    (void)user;
    if (n == 1) return actc_gelu_take(ctx, x[0]);
    actc_tensor *s = actc_silu_take(ctx, x[0]);
    actc_tensor *y = s ? actc_mul(ctx, s, x[1]) : NULL;
    actc_tensor_release(s);
    actc_tensor_release(x[1]);
    return y;
}

/* Q or K for llama: project, rotate in the [B, T, H, Dh] view, back to
 * [B, T, D] (the views keep the buffer: no copies). */
static actc_tensor *rotated(actc_ctx *ctx, actc_tensor *h, actc_tensor *w, int H)
{
    actc_tensor *p = actc_linear(ctx, h, w, NULL);
    if (!p) return NULL;
    const int B = p->shape[0], T = p->shape[1], D = p->shape[2];
    int heads[4] = {B, T, H, D / H}, flat[3] = {B, T, D};
    if (!(p = actc_reshape_take(ctx, p, 4, heads))) return NULL;
    actc_tensor *r = actc_rope(ctx, p, 0.0f);
    actc_tensor_release(p);
    return r ? actc_reshape_take(ctx, r, 3, flat) : NULL;
}

/* x + attention(norm(x)); consumes x. */
static actc_tensor *attn_block(const actc_model *m, const tf_impl *t, const tf_layer *L, actc_ctx *ctx,
                               actc_tensor *x)
{
    const int H = m->opts.n_heads;
    actc_tensor *h = norm(ctx, x, &L->n1), *q = NULL, *k = NULL, *v = NULL, *a = NULL, *o = NULL;
    if (!h) goto fail;
    if (t->llama) {
        q = rotated(ctx, h, L->wq, H);
        k = q ? rotated(ctx, h, L->wk, H) : NULL;
    } else {
        q = actc_linear(ctx, h, L->wq, L->bq);
        k = q ? actc_linear(ctx, h, L->wk, L->bk) : NULL;
    }
    v = k ? actc_linear(ctx, h, L->wv, L->bv) : NULL;
    actc_tensor_release(h);
    if (!v) goto fail;
    a = actc_attention(ctx, q, k, v, H, m->opts.attention);
    actc_tensor_release(q);
    actc_tensor_release(k);
    actc_tensor_release(v);
    q = k = v = NULL;
    if (!a) goto fail;
    o = actc_linear(ctx, a, L->wo, L->bo);
    actc_tensor_release(a);
    if (!o) goto fail;
    actc_tensor *y = actc_add_take(ctx, x, o);
    actc_tensor_release(o);
    return y;
fail:
    actc_tensor_release(q);
    actc_tensor_release(k);
    actc_tensor_release(v);
    actc_tensor_release(x);
    return NULL;
}

/* x + mlp(norm(x)); consumes x. */
static actc_tensor *mlp_block(const tf_impl *t, const tf_layer *L, actc_ctx *ctx, actc_tensor *x)
{
    actc_tensor *h = norm(ctx, x, &L->n2), *u = NULL;
    if (!h) goto fail;
    actc_tensor *in[2] = {actc_linear(ctx, h, L->w1, L->b1), NULL};
    if (in[0] && t->llama) in[1] = actc_linear(ctx, h, L->w3, NULL);
    actc_tensor_release(h);
    if (in[0] && (!t->llama || in[1])) {
        u = actc_region_n(ctx, ACTC_REGION_ACT, act_fn, NULL, t->llama ? 2 : 1, in); /* takes in[] */
    } else {
        actc_tensor_release(in[0]);
        actc_tensor_release(in[1]);
    }
    if (!u || !step(&u, actc_linear(ctx, u, L->w2, L->b2))) goto fail;
    actc_tensor *y = actc_add_take(ctx, x, u);
    actc_tensor_release(u);
    return y;
fail:
    actc_tensor_release(u);
    actc_tensor_release(x);
    return NULL;
}

static actc_tensor *embed(actc_model *m, tf_impl *t, actc_ctx *ctx, const int32_t *ids, int B, int T)
{
    actc_tensor *x = actc_embedding(ctx, ids, B, T, t->wte);
    if (!x || t->llama) return x;
    size_t need = (size_t)B * T;
    if (need > t->pos_cap) {
        int32_t *p = realloc(t->pos, need * sizeof *p);
        if (!p) {
            actc_tensor_release(x);
            actc_set_error(ACTC_ERR_OOM, "out of memory for %zu position ids of %s", need, m->name);
            return NULL;
        }
        t->pos = p;
        t->pos_cap = need;
    }
    for (size_t i = 0; i < need; i++) t->pos[i] = (int32_t)(i % (size_t)T);
    actc_tensor *p = actc_embedding(ctx, t->pos, B, T, t->wpe);
    if (!p) {
        actc_tensor_release(x);
        return NULL;
    }
    actc_tensor *y = actc_add_take(ctx, x, p);
    actc_tensor_release(p);
    return y;
}

static actc_status push_layer_scope(actc_ctx *ctx, int l, const char *part)
{
    char name[32];
    snprintf(name, sizeof name, "h%d.%s", l, part);
    return actc_scope_push(ctx, name);
}

/* One transformer layer (attention then MLP) of user (a tf_layer);
 * consumes x: a region that takes its input (actc_region_take), so the
 * policy's plan of ACTC_REGION_BLOCK decides whether it is checkpointed. */
static actc_tensor *layer_run(actc_ctx *ctx, actc_tensor *x, void *user)
{
    const tf_layer *L = user;
    const tf_impl *t = L->m->impl;
    /* A failed scope push (nesting too deep) is an error, never a silent pop
     * of the caller's scope. */
    if (push_layer_scope(ctx, L->index, "attn") != ACTC_OK) return step(&x, NULL), NULL;
    x = attn_block(L->m, t, L, ctx, x);
    actc_scope_pop(ctx);
    if (!x) return NULL;
    if (push_layer_scope(ctx, L->index, "mlp") != ACTC_OK) return step(&x, NULL), NULL;
    x = mlp_block(t, L, ctx, x);
    actc_scope_pop(ctx);
    return x;
}

/* Blocks [lo, hi) and the head (when held) from the hidden states x;
 * consumes x. */
static actc_tensor *run_blocks(actc_model *m, actc_ctx *ctx, actc_tensor *x, int B, int T)
{
    tf_impl *t = m->impl;
    for (int l = t->lo; x && l < t->hi; l++) x = actc_region_take(ctx, ACTC_REGION_BLOCK, layer_run, &t->layers[l], x);
    if (!x || !t->last) return x;
    if (actc_scope_push(ctx, "head") != ACTC_OK) return step(&x, NULL), NULL;
    actc_tensor *logits = NULL;
    int shp[2] = {B * T, m->opts.width};
    /* flattened first, so the head reads the norm's output itself */
    if ((x = actc_reshape_take(ctx, x, 2, shp)) && step(&x, norm(ctx, x, &t->nf)))
        logits = actc_linear(ctx, x, t->head, NULL);
    actc_scope_pop(ctx);
    actc_tensor_release(x);
    return logits;
}

static actc_tensor *tf_forward_tokens(actc_model *m, actc_ctx *ctx, const int32_t *ids, int B, int T)
{
    tf_impl *t = m->impl;
    if (!t->embed) {
        actc_set_error(ACTC_ERR_INVALID, "model %s: this part starts at block %d: it takes hidden states "
                                         "(actc_batch.x), not token ids", m->name, t->lo);
        return NULL;
    }
    if (actc_scope_push(ctx, "embed") != ACTC_OK) return NULL;
    actc_tensor *x = embed(m, t, ctx, ids, B, T);
    actc_scope_pop(ctx);
    return x ? run_blocks(m, ctx, x, B, T) : NULL;
}

/* A part without the embedding: x [B, T, width] (kept: the caller reads
 * its gradient). */
static actc_tensor *tf_forward_hidden(actc_model *m, actc_ctx *ctx, actc_tensor *x)
{
    const tf_impl *t = m->impl;
    if (t->embed) {
        actc_set_error(ACTC_ERR_INVALID, "model %s holds its embedding: it takes token ids", m->name);
        return NULL;
    }
    if (!x || x->ndim != 3 || x->shape[2] != m->opts.width || x->shape[1] > m->opts.context) {
        char shp[64] = "(null)";
        if (x) actc_shape_str(x, shp, sizeof shp);
        actc_set_error(ACTC_ERR_INVALID, "model %s from block %d expects hidden states [B, T <= %d, %d], got %s",
                       m->name, t->lo, m->opts.context, m->opts.width, shp);
        return NULL;
    }
    return run_blocks(m, ctx, actc_tensor_retain(x), x->shape[0], x->shape[1]);
}

/* The unit of a tensor by its name: 0 the embedding, 1 + l block l, L + 1
 * the final norm and head. */
static int unit_of(const char *name, int L)
{
    if (name[0] == 'h' && name[1] >= '0' && name[1] <= '9') return 1 + atoi(name + 1);
    return !strcmp(name, "wte") || !strcmp(name, "wpe") ? 0 : L + 1;
}

/* Which tensors a part holds, by name: "h<l>." for its blocks, the
 * embedding's and the head's by their own. */
static int part_keeps(const tf_impl *t, const char *name, int L)
{
    const int u = unit_of(name, L);
    if (!strcmp(name, "wte")) return t->embed || (t->last && !t->llama); /* tied: the head's too */
    return u == 0 ? t->embed : u == L + 1 ? t->last : u - 1 >= t->lo && u - 1 < t->hi;
}

/* ---- building ----------------------------------------------------------------------- */

typedef struct {
    actc_model *m;
    const tf_impl *t;
    char prefix[32];
} builder;

/* What param() gives for a parameter the model does not hold (another
 * part's, or every one when only counting): never read. */
static actc_tensor not_held;

static actc_tensor *param(builder *b, const char *name, int rows, int cols, float std, float fill)
{
    char full[64];
    snprintf(full, sizeof full, "%s%s", b->prefix, name);
    actc_model *m = b->m;
    const int L = m->opts.n_layers;
    if (m->count_only || (m->opts.n_blocks && !part_keeps(b->t, full, L))) {
        /* Its initialisation stream is still drawn, so the parameters a
         * part holds get the whole model's values. */
        m->init_counter++;
        if (m->unit_sizes) m->unit_sizes[unit_of(full, L)] += (size_t)(rows ? rows : 1) * (size_t)cols;
        return &not_held;
    }
    int shp[2] = {rows, cols};
    return rows ? actc__model_param(m, full, 2, shp, std, fill) : actc__model_param(m, full, 1, &cols, std, fill);
}

/* Per-model defaults (the presets) under whatever the caller set. */
static actc_status resolve(actc_model *m, const char *name)
{
    actc_model_opts *o = &m->opts;
    int big = !strcmp(name, "gpt2-124m");
    int d_layers = big ? 12 : 6, d_width = big ? 768 : 256, d_heads = big ? 12 : 8;
    int d_ctx = big ? 1024 : 256, d_vocab = big ? 50257 : 256;
    if (o->n_layers <= 0) o->n_layers = d_layers;
    if (o->width <= 0) o->width = d_width;
    if (o->n_heads <= 0) o->n_heads = d_heads;
    if (o->context <= 0) o->context = d_ctx;
    if (o->vocab <= 0) o->vocab = d_vocab;
    if (o->width % o->n_heads)
        return actc_set_error(ACTC_ERR_INVALID, "model %s: width %d is not a multiple of the %d heads", name,
                              o->width, o->n_heads);
    if (!strncmp(name, "llama", 5) && (o->width / o->n_heads) % 2)
        return actc_set_error(ACTC_ERR_INVALID,
                              "model %s: the head width %d / %d heads must be even for rotary positions",
                              name, o->width, o->n_heads);
    if (o->attention != ACTC_ATTN_FLASH && o->attention != ACTC_ATTN_NAIVE)
        return actc_set_error(ACTC_ERR_INVALID, "model %s: unknown attention form %d", name, o->attention);
    return ACTC_OK;
}

actc_status actc__transformer_build(actc_model *m, const char *name)
{
    actc_status s = resolve(m, name);
    if (s != ACTC_OK) return s;
    tf_impl *t = calloc(1, sizeof *t);
    if (!t) return actc_set_error(ACTC_ERR_OOM, "out of memory building %s", name);
    m->impl = t;
    m->impl_free = tf_free;
    m->forward_tokens = tf_forward_tokens;
    m->forward_hidden = tf_forward_hidden;
    const actc_model_opts *o = &m->opts;
    const int D = o->width, L = o->n_layers, V = o->vocab;
    t->llama = !strncmp(name, "llama", 5);
    if (o->n_blocks < 0 || (o->n_blocks > 0 && (o->first_block < 0 || o->first_block + o->n_blocks > L)))
        return actc_set_error(ACTC_ERR_INVALID, "model %s: part of blocks [%d, %d) is not within its %d blocks", name,
                              o->first_block, o->first_block + o->n_blocks, L);
    t->lo = o->n_blocks ? o->first_block : 0;
    t->hi = o->n_blocks ? o->first_block + o->n_blocks : L;
    t->embed = t->lo == 0;
    t->last = t->hi == L;
    t->layers = calloc((size_t)L, sizeof *t->layers);
    if (!t->layers) return actc_set_error(ACTC_ERR_OOM, "out of memory building %s", name);
    for (int l = 0; l < L; l++) {
        t->layers[l].m = m;
        t->layers[l].index = l;
    }
    const int hidden = t->llama ? 256 * ((8 * D / 3 + 255) / 256) : 4 * D;
    const float res_std = INIT_STD / sqrtf(2.0f * (float)L);
    const int bias = !t->llama;
    if (m->count_only && !(m->unit_sizes = calloc((size_t)L + 2, sizeof *m->unit_sizes)))
        return actc_set_error(ACTC_ERR_OOM, "out of memory building %s", name);
    builder b = {m, t, ""};
    t->wte = param(&b, "wte", V, D, INIT_STD, 0);
    if (!t->llama) t->wpe = param(&b, "wpe", o->context, D, INIT_STD, 0);
    for (int l = 0; l < L; l++) {
        tf_layer *y = &t->layers[l];
        snprintf(b.prefix, sizeof b.prefix, "h%d.", l);
        y->n1_g = param(&b, "norm1.weight", 0, D, 0, 1.0f);
        if (bias) y->n1_b = param(&b, "norm1.bias", 0, D, 0, 0.0f);
        y->wq = param(&b, "attn.q.weight", D, D, INIT_STD, 0);
        if (bias) y->bq = param(&b, "attn.q.bias", 0, D, 0, 0.0f);
        y->wk = param(&b, "attn.k.weight", D, D, INIT_STD, 0);
        if (bias) y->bk = param(&b, "attn.k.bias", 0, D, 0, 0.0f);
        y->wv = param(&b, "attn.v.weight", D, D, INIT_STD, 0);
        if (bias) y->bv = param(&b, "attn.v.bias", 0, D, 0, 0.0f);
        y->wo = param(&b, "attn.proj.weight", D, D, res_std, 0);
        if (bias) y->bo = param(&b, "attn.proj.bias", 0, D, 0, 0.0f);
        y->n2_g = param(&b, "norm2.weight", 0, D, 0, 1.0f);
        if (bias) y->n2_b = param(&b, "norm2.bias", 0, D, 0, 0.0f);
        y->n1 = (norm_arg){t, y->n1_g, y->n1_b};
        y->n2 = (norm_arg){t, y->n2_g, y->n2_b};
        y->w1 = param(&b, "mlp.fc1.weight", hidden, D, INIT_STD, 0);
        if (bias) y->b1 = param(&b, "mlp.fc1.bias", 0, hidden, 0, 0.0f);
        if (t->llama) y->w3 = param(&b, "mlp.gate.weight", hidden, D, INIT_STD, 0);
        y->w2 = param(&b, "mlp.fc2.weight", D, hidden, res_std, 0);
        if (bias) y->b2 = param(&b, "mlp.fc2.bias", 0, D, 0, 0.0f);
        if (!y->n1_g || !y->wq || !y->wk || !y->wv || !y->wo || !y->n2_g || !y->w1 || !y->w2 ||
            (bias && (!y->n1_b || !y->bq || !y->bk || !y->bv || !y->bo || !y->n2_b || !y->b1 || !y->b2)) ||
            (t->llama && !y->w3))
            return actc_last_status();
    }
    b.prefix[0] = '\0';
    t->nf_g = param(&b, "norm_f.weight", 0, D, 0, 1.0f);
    if (bias) t->nf_b = param(&b, "norm_f.bias", 0, D, 0, 0.0f);
    t->nf = (norm_arg){t, t->nf_g, t->nf_b};
    t->head = t->llama ? param(&b, "head.weight", V, D, INIT_STD, 0) : t->wte;
    if (!t->wte || (!t->llama && !t->wpe) || !t->nf_g || (bias && !t->nf_b) || !t->head)
        return actc_last_status();
    if (m->unit_sizes && !t->llama) m->unit_sizes[L + 1] += (size_t)V * (size_t)D; /* the tied head's copy */
    return ACTC_OK;
}
