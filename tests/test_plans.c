/* The second seam's plans and gradient forms, exercised end to end by test
 * methods that are none of the papers: a "projection" transform on a toy
 * linear operator with a test policy and a test optimizer, a recompute of a
 * toy norm from an exact save, and gradients encoded across micro-batches. */
#include "testutil.h"
#include "autograd/autograd.h"
#include "grad/grad.h"
#include "core/core.h"
#include "optim/optim.h"
#include "policy/policy.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- region plans ------------------------------------------------------------------ */

static void test_region_plans(void **state)
{
    (void)state;
    actc_ctx *ctx = actc_ctx_new();
    for (int r = 0; r < ACTC_REGION_NKINDS; r++) assert_int_equal(actc_ctx_plan_region(ctx, r), ACTC_PLAN_ANY);
    static const struct {
        const char *spec;
        int block, attn;
    } want[] = {{"none", ACTC_PLAN_ANY, ACTC_PLAN_ANY},         {"actnn:L3", ACTC_PLAN_ANY, ACTC_PLAN_ANY},
                {"gact:4", ACTC_PLAN_ANY, ACTC_PLAN_SAVE},      {"gact:CB1", ACTC_PLAN_RECOMPUTE, ACTC_PLAN_SAVE},
                {"gact:CB2", ACTC_PLAN_RECOMPUTE, ACTC_PLAN_RECOMPUTE}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        assert_int_equal(actc_ctx_set_policy(ctx, want[i].spec), ACTC_OK);
        assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_BLOCK), want[i].block);
        assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_ATTN), want[i].attn);
        assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_NORM), ACTC_PLAN_ANY);
    }
    /* An override wins over the policy, survives a policy change, and ANY
     * gives the decision back. */
    assert_int_equal(actc_ctx_set_region_plan(ctx, ACTC_REGION_BLOCK, ACTC_PLAN_SAVE), ACTC_OK);
    assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_BLOCK), ACTC_PLAN_SAVE);
    assert_int_equal(actc_ctx_set_policy(ctx, "gact:CB1"), ACTC_OK);
    assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_BLOCK), ACTC_PLAN_SAVE);
    assert_int_equal(actc_ctx_set_region_plan(ctx, ACTC_REGION_BLOCK, ACTC_PLAN_ANY), ACTC_OK);
    assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_BLOCK), ACTC_PLAN_RECOMPUTE);
    assert_int_equal(actc_ctx_set_region_plan(ctx, ACTC_REGION_ATTN, ACTC_PLAN_RECOMPUTE), ACTC_OK);
    assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_ATTN), ACTC_PLAN_RECOMPUTE);
    assert_int_equal(actc_ctx_set_region_plan(ctx, ACTC_REGION_NKINDS, ACTC_PLAN_SAVE), ACTC_ERR_INVALID);
    assert_int_equal(actc_ctx_set_region_plan(ctx, ACTC_REGION_NORM, 7), ACTC_ERR_INVALID);
    assert_int_equal(actc_ctx_plan_region(ctx, (actc_region_kind)99), ACTC_PLAN_ANY);
    actc_ctx_free(ctx);
}

/* Bytes the attention's saves take on a fresh context under an ATTN plan
 * (ACTC_PLAN_ANY: none): form -1 calls the textbook operator, -2 the
 * memory-efficient one, else actc_attention with that default form. */
static size_t attention_saved(int plan, int form)
{
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_region_plan(ctx, ACTC_REGION_ATTN, plan), ACTC_OK);
    const int shape[3] = {2, 16, 8};
    actc_tensor *qkv[3];
    for (int i = 0; i < 3; i++) {
        qkv[i] = actc_tensor_new(ACTC_MEM_ACT, 3, shape);
        for (size_t j = 0; j < qkv[i]->numel; j++) qkv[i]->data[j] = actc_rand_uniform((uint64_t)i, j) - 0.5f;
        qkv[i]->requires_grad = 1;
    }
    actc_tensor *y = form == -1   ? actc_attention_naive(ctx, qkv[0], qkv[1], qkv[2], 2)
                     : form == -2 ? actc_attention_flash(ctx, qkv[0], qkv[1], qkv[2], 2)
                                  : actc_attention(ctx, qkv[0], qkv[1], qkv[2], 2, form);
    assert_non_null(y);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    actc_tensor_release(y);
    for (int i = 0; i < 3; i++) actc_tensor_release(qkv[i]);
    actc_ctx_free(ctx);
    return st.stored_bytes;
}

/* The attention operator reads the ATTN plan itself: SAVE gives the
 * textbook form (it keeps the T x T probabilities), RECOMPUTE the
 * memory-efficient one, no plan the form the caller asked for. */
static void test_attention_follows_its_plan(void **state)
{
    (void)state;
    const size_t naive = attention_saved(ACTC_PLAN_ANY, -1), flash = attention_saved(ACTC_PLAN_ANY, -2);
    assert_true(naive > flash);
    assert_int_equal(attention_saved(ACTC_PLAN_ANY, ACTC_ATTN_NAIVE), naive);
    assert_int_equal(attention_saved(ACTC_PLAN_ANY, ACTC_ATTN_FLASH), flash);
    assert_int_equal(attention_saved(ACTC_PLAN_SAVE, ACTC_ATTN_FLASH), naive);
    assert_int_equal(attention_saved(ACTC_PLAN_RECOMPUTE, ACTC_ATTN_NAIVE), flash);
    actc_ctx *ctx = actc_ctx_new();
    assert_null(actc_attention(ctx, NULL, NULL, NULL, 2, 7));
    assert_int_equal(actc_last_status(), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "ACTC_ATTN_FLASH"));
    actc_clear_error();
    actc_ctx_free(ctx);
}

/* ---- a toy norm, recomputed from an exact save ------------------------------------- */

/* y = x / sqrt(mean(x^2) + eps) per row: saves x (NORM_IN, not linear). */
static actc_status toynorm_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = actc_load(ctx, node, 0);
    if (!x) return actc_last_status();
    float *gx;
    actc_status s = actc_grad_buffer(ctx, node->inputs[0], &gx);
    const int rows = x->shape[0], d = x->shape[1];
    const float *gy = node->output->grad->data;
    for (int r = 0; s == ACTC_OK && gx && r < rows; r++) {
        const float *xr = x->data + (size_t)r * d, *g = gy + (size_t)r * d;
        double ms = 0, dot = 0;
        for (int j = 0; j < d; j++) ms += (double)xr[j] * xr[j];
        ms = ms / d + 1e-5;
        const double inv = 1.0 / sqrt(ms);
        for (int j = 0; j < d; j++) dot += (double)g[j] * xr[j];
        for (int j = 0; j < d; j++)
            gx[(size_t)r * d + j] += (float)(inv * g[j] - inv * inv * inv * xr[j] * dot / d);
    }
    actc_tensor_release(x);
    return s;
}

static actc_tensor *toynorm(actc_ctx *ctx, actc_tensor *x)
{
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    const int rows = x->shape[0], d = x->shape[1];
    for (int r = 0; r < rows; r++) {
        double ms = 0;
        for (int j = 0; j < d; j++) ms += (double)x->data[(size_t)r * d + j] * x->data[(size_t)r * d + j];
        const double inv = 1.0 / sqrt(ms / d + 1e-5);
        for (int j = 0; j < d; j++) y->data[(size_t)r * d + j] = (float)(x->data[(size_t)r * d + j] * inv);
    }
    actc_node *node;
    static const actc_save_role role = {.role = ACTC_ROLE_NORM_IN};
    actc_status s = actc_node_new(ctx, "toynorm", toynorm_backward, y, 1, &x, &node);
    if (s == ACTC_OK && node) s = actc_save_as(ctx, node, x, ACTC_SAVE_ACT, &role);
    if (s != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    return y;
}

/* The region: the norm alone; the product that consumes its output stays
 * outside (its save of the norm's output becomes a reference). */
static actc_tensor *norm_region(actc_ctx *ctx, actc_tensor *x, void *user)
{
    (void)user;
    return toynorm(ctx, x);
}

/* Gradients of x and w after sum(R * (norm(x) W^T)) under `plan`;
 * *stored: the store's bytes before backward. */
static void norm_grads(int plan, const char *policy, float *gx, float *gw, size_t *stored)
{
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, policy), ACTC_OK);
    assert_int_equal(actc_ctx_set_region_plan(ctx, ACTC_REGION_NORM, plan), ACTC_OK);
    const int xs[2] = {6, 16}, ws[2] = {8, 16};
    actc_tensor *x = tu_rand(2, xs, 5, -2, 2, 1);
    actc_tensor *w = actc_param_new(2, ws, "w");
    tu_fill_uniform(w, 6, -0.5f, 0.5f);
    actc_tensor *h = actc_region(ctx, ACTC_REGION_NORM, norm_region, NULL, x);
    assert_non_null(h);
    actc_tensor *y = actc_linear(ctx, h, w, NULL);
    assert_non_null(y);
    actc_tensor *loss = tu_wsum(ctx, y, 9);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    *stored = st.stored_bytes;
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    memcpy(gx, x->grad->data, x->numel * sizeof *gx);
    memcpy(gw, w->grad->data, w->numel * sizeof *gw);
    actc_tensor_release(loss);
    actc_tensor_release(y);
    actc_tensor_release(h);
    actc_tensor_release(x);
    actc_tensor_release(w);
    actc_ctx_free(ctx);
}

static void test_recompute_toy_norm(void **state)
{
    (void)state;
    float gx0[96], gw0[128], gx1[96], gw1[128];
    size_t saved, recomputed;
    norm_grads(ACTC_PLAN_SAVE, "none", gx0, gw0, &saved);
    norm_grads(ACTC_PLAN_RECOMPUTE, "none", gx1, gw1, &recomputed);
    /* Recomputed from an fp32 save: the same gradients to the bit. */
    assert_memory_equal(gx0, gx1, sizeof gx0);
    assert_memory_equal(gw0, gw1, sizeof gw0);
    /* Saved: the norm's input and its output (the product's input); with
     * the region recomputed only the input. */
    assert_int_equal(saved, 2 * 96 * sizeof(float));
    assert_int_equal(recomputed, 96 * sizeof(float));
    /* The region's input goes through the policy like any save. */
    size_t bf16;
    norm_grads(ACTC_PLAN_RECOMPUTE, "bf16", gx1, gw1, &bf16);
    assert_int_equal(bf16, 96 * sizeof(uint16_t));
    assert_true(tu_max_abs_diff(gw0, gw1, 128) < 0.05);
}

/* ---- a block that takes its input: x + gelu(x W^T), the residual added in place ---- */

static actc_tensor *residual_block(actc_ctx *ctx, actc_tensor *x, void *user)
{
    actc_tensor *h = actc_linear(ctx, x, user, NULL);
    actc_tensor *g = h ? actc_gelu(ctx, h) : NULL;
    actc_tensor_release(h);
    actc_tensor *y = g ? actc_add_take(ctx, x, g) : NULL; /* takes x */
    if (!g) actc_tensor_release(x);
    actc_tensor_release(g);
    return y;
}

/* Gradients of a and w after two blocks on x = 2a under a BLOCK plan;
 * *stored: the store's bytes before backward. */
static void block_grads(int plan, float *ga, float *gw, size_t *stored)
{
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_region_plan(ctx, ACTC_REGION_BLOCK, plan), ACTC_OK);
    const int as[2] = {4, 16}, ws[2] = {16, 16};
    actc_tensor *a = tu_rand(2, as, 21, -1, 1, 1);
    actc_tensor *w = actc_param_new(2, ws, "w");
    tu_fill_uniform(w, 22, -0.3f, 0.3f);
    actc_tensor *x = actc_add(ctx, a, a);
    for (int b = 0; x && b < 2; b++) x = actc_region_take(ctx, ACTC_REGION_BLOCK, residual_block, w, x);
    assert_non_null(x);
    actc_tensor *loss = tu_wsum(ctx, x, 23);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    *stored = st.stored_bytes;
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    memcpy(ga, a->grad->data, a->numel * sizeof *ga);
    memcpy(gw, w->grad->data, w->numel * sizeof *gw);
    actc_tensor *all[] = {loss, x, a, w};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) actc_tensor_release(all[i]);
    actc_ctx_free(ctx);
}

/* actc_region_take: the block runs directly (taking x) or, planned
 * RECOMPUTE, as a segment that keeps only its input; the same gradients to
 * the bit either way, and a NULL input is refused. */
static void test_region_take(void **state)
{
    (void)state;
    float ga0[64], gw0[256], ga1[64], gw1[256];
    size_t saved, recomputed;
    block_grads(ACTC_PLAN_SAVE, ga0, gw0, &saved);
    block_grads(ACTC_PLAN_RECOMPUTE, ga1, gw1, &recomputed);
    assert_memory_equal(ga0, ga1, sizeof ga0);
    assert_memory_equal(gw0, gw1, sizeof gw0);
    /* Saved: per block the linear's input and the GELU's input (64 floats
     * each); checkpointed: each block's input alone. */
    assert_int_equal(saved, 2 * 2 * 64 * sizeof(float));
    assert_int_equal(recomputed, 2 * 64 * sizeof(float));
    actc_ctx *ctx = actc_ctx_new();
    assert_null(actc_region_take(ctx, ACTC_REGION_BLOCK, residual_block, NULL, NULL));
    assert_int_equal(actc_last_status(), ACTC_ERR_INVALID);
    actc_clear_error();
    actc_ctx_free(ctx);
}

/* ---- a two-input region: SiLU-and-multiply recomputed from its inputs -------------- */

static actc_tensor *swiglu_region(actc_ctx *ctx, int n, actc_tensor *const *x, void *user)
{
    (void)n, (void)user;
    actc_tensor *s = actc_silu_take(ctx, x[0]);
    actc_tensor *y = s ? actc_mul(ctx, s, x[1]) : NULL;
    actc_tensor_release(s);
    actc_tensor_release(x[1]);
    return y;
}

/* Gradients of u, g, w after sum(R * (silu(u) g) W^T) under `plan`, with u
 * and g computed from a (so they are not leaves). */
static void swiglu_grads(int plan, const char *policy, float *ga, float *gw, size_t *stored)
{
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, policy), ACTC_OK);
    assert_int_equal(actc_ctx_set_region_plan(ctx, ACTC_REGION_ACT, plan), ACTC_OK);
    const int as[2] = {4, 24}, ws[2] = {5, 24};
    actc_tensor *a = tu_rand(2, as, 11, -2, 2, 1);
    actc_tensor *w = actc_param_new(2, ws, "w");
    tu_fill_uniform(w, 12, -0.5f, 0.5f);
    actc_tensor *u = actc_add(ctx, a, a);     /* 2a    */
    actc_tensor *g = actc_mul(ctx, a, a);     /* a^2   */
    actc_store_stats before;
    actc_store_get_stats(ctx, &before);
    /* the region takes references: ours stay for the release below */
    actc_tensor *in[2] = {actc_tensor_retain(u), actc_tensor_retain(g)};
    actc_tensor *h = actc_region_n(ctx, ACTC_REGION_ACT, swiglu_region, NULL, 2, in);
    assert_non_null(h);
    actc_tensor *y = actc_linear(ctx, h, w, NULL);
    actc_tensor *loss = tu_wsum(ctx, y, 13);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    *stored = st.stored_bytes - before.stored_bytes;
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    memcpy(ga, a->grad->data, a->numel * sizeof *ga);
    memcpy(gw, w->grad->data, w->numel * sizeof *gw);
    actc_tensor *all[] = {loss, y, h, u, g, a, w};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) actc_tensor_release(all[i]);
    actc_ctx_free(ctx);
}

static void test_recompute_two_inputs(void **state)
{
    (void)state;
    float ga0[96], gw0[120], ga1[96], gw1[120];
    size_t saved, recomputed;
    swiglu_grads(ACTC_PLAN_SAVE, "none", ga0, gw0, &saved);
    swiglu_grads(ACTC_PLAN_RECOMPUTE, "none", ga1, gw1, &recomputed);
    assert_memory_equal(ga0, ga1, sizeof ga0);
    assert_memory_equal(gw0, gw1, sizeof gw0);
    /* Saved: silu's derivative, mul's two operands and the product's input
     * (4 tensors of 96); recomputed: the region's two inputs only. */
    assert_int_equal(saved, 4 * 96 * sizeof(float));
    assert_int_equal(recomputed, 2 * 96 * sizeof(float));
    /* Lossy inputs: the rerun starts from the decoded ones. */
    swiglu_grads(ACTC_PLAN_RECOMPUTE, "bf16", ga1, gw1, &recomputed);
    assert_int_equal(recomputed, 2 * 96 * sizeof(uint16_t));
    assert_true(tu_max_abs_diff(gw0, gw1, 120) < 0.05);
    /* Bad input. */
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *in[1] = {NULL};
    assert_null(actc_region_n(ctx, ACTC_REGION_ACT, swiglu_region, NULL, 1, in));
    assert_null(actc_region_n(ctx, ACTC_REGION_BLOCK, swiglu_region, NULL, 0, in));
    assert_non_null(strstr(actc_last_error(), "inputs"));
    /* a refused region still takes its inputs (LeakSanitizer checks) */
    const int shp[1] = {4};
    in[0] = actc_tensor_zeros(ACTC_MEM_ACT, 1, shp);
    assert_null(actc_region_n(ctx, ACTC_REGION_BLOCK, swiglu_region, NULL, 1, in));
    assert_non_null(strstr(actc_last_error(), "not an input-recompute kind"));
    actc_ctx_free(ctx);
}

/* ---- a projection transform on a toy linear ---------------------------------------- */

/* The test policy: fp32 for every save, and a projection to rank 4 for
 * every save that offers one, keyed by the save's stable key. */
static uint64_t g_planned_key, g_projected_key; /* stable keys the policy saw */

static actc_status fp32_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                               actc_codec_args *args)
{
    (void)p, (void)args;
    if (d->role->role == ACTC_ROLE_PROJECTED) g_projected_key = d->stable_key;
    *codec = &actc_codec_fp32;
    return ACTC_OK;
}

static actc_status project_plan(actc_policy *p, const actc_save_desc *d, actc_transform *out)
{
    (void)p;
    if (d->role->role != ACTC_ROLE_LINEAR_IN) return ACTC_OK;
    out->kind = ACTC_XFORM_PROJECT;
    out->proj.n = d->role->fan_in;
    out->proj.rank = 4;
    out->proj.key = d->stable_key ^ 0x70726F6AULL;
    g_planned_key = d->stable_key;
    return ACTC_OK;
}

static actc_ctx *project_ctx(void)
{
    actc_ctx *ctx = actc_ctx_new();
    actc_policy *p;
    assert_int_equal(actc__policy_new("test-project", 0, fp32_choose, &p), ACTC_OK);
    p->transform = project_plan;
    assert_int_equal(actc__ctx_install_policy(ctx, p), ACTC_OK);
    return ctx;
}

/* y[rows, m] = x[rows, n] W[m, n]^T, saving x or its projection x P. */
typedef struct {
    int projected;
    actc_projection proj;
} toylin_state;

static actc_status toylin_backward(actc_ctx *ctx, actc_node *node)
{
    const toylin_state *ts = node->user;
    actc_tensor *x = node->inputs[0], *w = node->inputs[1];
    const int m = w->shape[0], n = w->shape[1], rows = x->shape[0];
    const float *gy = node->output->grad->data;
    float *gx;
    actc_status s = actc_grad_buffer(ctx, x, &gx);
    if (s == ACTC_OK && gx) actc__sgemm(0, 0, rows, n, m, 1.0f, gy, m, w->data, n, 1.0f, gx, n);
    actc_tensor *saved = s == ACTC_OK ? actc_load(ctx, node, 0) : NULL;
    if (!saved) return s != ACTC_OK ? s : actc_last_status();
    if (ts->projected) {
        /* The weight gradient in the subspace: F = dy^T z, m x rank. */
        const int fs[2] = {m, ts->proj.rank};
        actc_tensor *f = actc_tensor_new(ACTC_MEM_SCRATCH, 2, fs);
        if (!f) s = actc_last_status();
        else {
            actc__sgemm(1, 0, m, ts->proj.rank, rows, 1.0f, gy, m, saved->data, ts->proj.rank, 0.0f, f->data,
                        ts->proj.rank);
            s = actc_grad_add_lowrank(ctx, w, f, &ts->proj);
            actc_tensor_release(f);
        }
    } else {
        float *gw;
        if ((s = actc_grad_buffer(ctx, w, &gw)) == ACTC_OK && gw)
            actc__sgemm(1, 0, m, n, rows, 1.0f, gy, m, saved->data, n, 1.0f, gw, n);
    }
    actc_tensor_release(saved);
    return s;
}

static actc_tensor *toylin(actc_ctx *ctx, actc_tensor *x, actc_tensor *w)
{
    const int m = w->shape[0], n = w->shape[1], rows = x->shape[0];
    const int ys[2] = {rows, m};
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 2, ys);
    actc__sgemm(0, 1, rows, m, n, 1.0f, x->data, n, w->data, n, 0.0f, y->data, m);
    actc_tensor *in[2] = {x, w};
    actc_node *node;
    actc_status s = actc_node_new(ctx, "toylin", toylin_backward, y, 2, in, &node);
    if (s != ACTC_OK || !node) return y;
    toylin_state *ts = calloc(1, sizeof *ts);
    node->user = ts;
    node->user_free = free;
    const actc_save_role role = {.role = ACTC_ROLE_LINEAR_IN, .linear = 1, .fan_in = n, .transforms = ACTC_XFORM_PROJECT};
    actc_transform done;
    assert_int_equal(actc_save_offer(ctx, node, x, &role, &done), ACTC_OK);
    if (done.kind == ACTC_XFORM_PROJECT) {
        ts->projected = 1;
        ts->proj = done.proj;
    }
    return y;
}

enum { ROWS = 12, N_IN = 32, M_OUT = 5, RANK = 4 };

/* One forward/backward of the toy linear in ctx, the store's bytes before
 * backward in *stored (if not NULL). */
static void toylin_pass(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, int rseed, size_t *stored)
{
    actc_tensor *y = toylin(ctx, x, w);
    actc_tensor *loss = tu_wsum(ctx, y, rseed);
    if (stored) {
        actc_store_stats st;
        actc_store_get_stats(ctx, &st);
        *stored = st.stored_bytes;
    }
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    actc_tensor_release(loss);
    actc_tensor_release(y);
}

/* A test optimizer: sign descent, with a state that counts steps per
 * element (to see its shape follow the gradient's form). */
static void sign_update(const actc_optim *o, float *w, const float *g, float *const *st, size_t n, float lr,
                        uint64_t step)
{
    (void)o, (void)step;
    for (size_t i = 0; i < n; i++) {
        w[i] -= lr * (float)((g[i] > 0) - (g[i] < 0));
        st[0][i] += 1.0f;
    }
}

static void sign_direction(const actc_optim *o, const float *g, float *const *st, float *d, size_t n, uint64_t step)
{
    (void)o, (void)step;
    for (size_t i = 0; i < n; i++) {
        d[i] = (float)((g[i] > 0) - (g[i] < 0));
        st[0][i] += 1.0f;
    }
}

static const actc_optim_vt sign_vt = {"signtest", sign_update, sign_direction};

static void test_projection_transform(void **state)
{
    (void)state;
    const size_t mem0 = tu_mem_now();
    const int xs[2] = {ROWS, N_IN}, ws[2] = {M_OUT, N_IN};
    actc_tensor *x = tu_rand(2, xs, 11, -1, 1, 1);
    actc_tensor *w = actc_param_new(2, ws, "toy.w");
    tu_fill_uniform(w, 12, -0.3f, 0.3f);

    /* The dense path (no policy) for reference. */
    actc_ctx *plain = actc_ctx_new();
    size_t dense_bytes;
    toylin_pass(plain, x, w, 3, &dense_bytes);
    float *gx_dense = tu_dup_floats(x->grad->data, x->numel), *gw_dense = tu_dup_floats(w->grad->data, w->numel);
    actc_tensor_drop_grad(x);
    actc_tensor_drop_grad(w);
    assert_int_equal(dense_bytes, (size_t)ROWS * N_IN * sizeof(float));

    /* Projected: the store holds rows x rank, dx is exact, dW is low-rank. */
    actc_ctx *ctx = project_ctx();
    size_t proj_bytes;
    toylin_pass(ctx, x, w, 3, &proj_bytes);
    assert_int_equal(proj_bytes, (size_t)ROWS * RANK * sizeof(float));
    /* One key per save: the projection is saved under the key the input
     * would have had, the one the policy planned it with. */
    assert_true(g_planned_key != 0 && g_projected_key == g_planned_key);
    assert_memory_equal(x->grad->data, gx_dense, x->numel * sizeof(float));
    assert_null(w->grad);
    actc_grad_info gi;
    actc_grad_get_info(w, &gi);
    assert_int_equal(gi.form, ACTC_GRAD_LOWRANK);
    assert_int_equal(gi.present, 1);
    assert_int_equal(gi.proj.rank, RANK);
    assert_int_equal(gi.proj.n, N_IN);
    assert_int_equal(gi.bytes, (size_t)M_OUT * RANK * sizeof(float));
    /* F = dy^T (x P): the dense gradient projected, (x^T dy)^T P = gw P. */
    float want[M_OUT * RANK];
    assert_int_equal(actc_project(&gi.proj, gw_dense, M_OUT, want), ACTC_OK);
    const actc_tensor *f = actc__grad_factor(w, NULL);
    assert_true(tu_max_abs_diff(f->data, want, M_OUT * RANK) < 1e-5);
    /* As a dense gradient it is F P^T. */
    float dense[M_OUT * N_IN] = {0}, back[M_OUT * N_IN] = {0};
    assert_int_equal(actc_grad_to_dense(w, dense), ACTC_OK);
    assert_int_equal(actc_project_back(&gi.proj, f->data, M_OUT, 1.0f, back), ACTC_OK);
    assert_memory_equal(dense, back, sizeof dense);

    /* A second backward with the same projection accumulates in the form. */
    float once[M_OUT * RANK];
    memcpy(once, f->data, sizeof once);
    actc_ctx_set_step(ctx, 0); /* same step: same stable keys, same projection */
    toylin_pass(ctx, x, w, 3, NULL);
    f = actc__grad_factor(w, NULL);
    for (int i = 0; i < M_OUT * RANK; i++) assert_float_equal(f->data[i], 2 * once[i], 1e-6);

    /* The test optimizer steps in the subspace: w -= lr sign(F) P^T, its
     * state takes F's shape. */
    actc_tensor *params[1] = {w};
    actc_optim *o = actc__optim_new(&sign_vt, params, 1, 1);
    float *w0 = tu_dup_floats(w->data, w->numel), expect[M_OUT * N_IN];
    memcpy(expect, w0, sizeof expect);
    float sign[M_OUT * RANK];
    for (int i = 0; i < M_OUT * RANK; i++) sign[i] = (float)((f->data[i] > 0) - (f->data[i] < 0));
    assert_int_equal(actc_project_back(&gi.proj, sign, M_OUT, -0.1f, expect), ACTC_OK);
    assert_int_equal(actc_optim_step(o, 0.1f), ACTC_OK);
    assert_true(tu_max_abs_diff(w->data, expect, w->numel) < 1e-6);
    actc_tensor **st;
    assert_int_equal(actc_optim_state(o, &st), 1);
    assert_int_equal(st[0]->ndim, 2);
    assert_int_equal(st[0]->shape[0], M_OUT);
    assert_int_equal(st[0]->shape[1], RANK);
    for (int i = 0; i < M_OUT * RANK; i++) assert_float_equal(st[0]->data[i], 1.0f, 0);
    /* A dense gradient next: its state no longer fits, and nothing moves. */
    actc_tensor_drop_grad(w);
    actc_grad_get_info(w, &gi);
    assert_int_equal(gi.present, 0);
    toylin_pass(plain, x, w, 3, NULL);
    memcpy(w0, w->data, w->numel * sizeof *w0);
    assert_int_equal(actc_optim_step(o, 0.1f), ACTC_ERR_STATE);
    assert_memory_equal(w0, w->data, w->numel * sizeof *w0);
    actc_optim_free(o);
    actc_tensor_drop_grad(w);
    actc_tensor_drop_grad(x);

    /* Clipping measures and scales the factor. */
    toylin_pass(ctx, x, w, 3, NULL);
    f = actc__grad_factor(w, &gi.proj);
    const double fn = sqrt(actc__sum_sq_diff(f->data, NULL, f->numel));
    float norm;
    assert_int_equal(actc_clip_grad_norm(params, 1, (float)(fn / 2), &norm), ACTC_OK);
    assert_float_equal(norm, fn, 1e-4 * fn);
    assert_float_equal(sqrt(actc__sum_sq_diff(f->data, NULL, f->numel)), fn / 2, 1e-4 * fn);
    /* Another projection in the same gradient is refused, and so is a
     * low-rank contribution on top of a dense one. */
    actc_projection other = gi.proj;
    other.key ^= 1;
    assert_int_equal(actc_grad_add_lowrank(ctx, w, f, &other), ACTC_ERR_INVALID);
    other.key ^= 1;
    actc_tensor_drop_grad(w);
    actc_tensor_drop_grad(x);
    toylin_pass(plain, x, w, 3, NULL);
    const int fs[2] = {M_OUT, RANK};
    actc_tensor *f2 = actc_tensor_zeros(ACTC_MEM_SCRATCH, 2, fs);
    assert_int_equal(actc_grad_add_lowrank(ctx, w, f2, &other), ACTC_ERR_STATE);
    actc_tensor_release(f2);
    actc_tensor_drop_grad(w);
    actc_tensor_drop_grad(x);

    /* Built-in AdamW: moments of F's shape, the step of AdamW in the
     * subspace taken back with P. */
    toylin_pass(ctx, x, w, 3, NULL);
    f = actc__grad_factor(w, &gi.proj);
    actc_optim *adam = actc_adamw_new(params, 1, 0.9f, 0.999f, 1e-8f, 0.0f);
    memcpy(expect, w->data, sizeof expect);
    float d[M_OUT * RANK];
    for (int i = 0; i < M_OUT * RANK; i++) {
        const float g = f->data[i], m = 0.1f * g, v = 0.001f * g * g;
        d[i] = (m / 0.1f) / (sqrtf(v) / sqrtf(0.001f) + 1e-8f);
    }
    assert_int_equal(actc_project_back(&gi.proj, d, M_OUT, -0.01f, expect), ACTC_OK);
    assert_int_equal(actc_optim_step(adam, 0.01f), ACTC_OK);
    assert_true(tu_max_abs_diff(w->data, expect, w->numel) < 1e-5);
    assert_int_equal(actc_optim_state(adam, &st), 2);
    assert_int_equal(st[1]->shape[1], RANK);
    actc_optim_free(adam);

    /* Unbiased: E[P P^T] = I, so the mean of F P^T over projections tends
     * to the dense gradient. */
    double *sum = calloc(M_OUT * N_IN, sizeof *sum), exact[M_OUT * N_IN];
    for (int i = 0; i < M_OUT * N_IN; i++) exact[i] = gw_dense[i];
    const int K = 1600;
    for (int k = 0; k < K; k++) {
        actc_projection pr = {.n = N_IN, .rank = RANK, .key = 1000u + (uint64_t)k};
        float z[M_OUT * RANK], g[M_OUT * N_IN] = {0};
        actc_project(&pr, gw_dense, M_OUT, z);
        actc_project_back(&pr, z, M_OUT, 1.0f, g);
        for (int i = 0; i < M_OUT * N_IN; i++) sum[i] += g[i];
    }
    const double err = tu_mean_rel_err(sum, K, exact, M_OUT * N_IN);
    print_message("projection rank %d of %d: mean of %d low-rank gradients within %.3f of the dense one\n", RANK,
                  N_IN, K, err);
    assert_true(err < 0.1); /* one projection alone: about sqrt(N_IN / RANK) = 2.8, over K: 2.8 / 40 */
    free(sum);

    actc_tensor_drop_grad(w);
    actc_tensor_release(x);
    actc_tensor_release(w);
    free(gx_dense);
    free(gw_dense);
    free(w0);
    actc_ctx_free(ctx);
    actc_ctx_free(plain);
    assert_int_equal(tu_mem_now(), mem0);
}

/* A save without transforms, or a policy without the hook: the tensor
 * itself is saved. */
static void test_transform_not_offered(void **state)
{
    (void)state;
    actc_ctx *ctx = project_ctx();
    const int xs[2] = {4, 8};
    actc_tensor *x = tu_rand(2, xs, 1, -1, 1, 1);
    actc_tensor *y = actc_relu(ctx, x);
    actc_node *node = ctx->nodes[ctx->n_nodes - 1];
    const int slots = node->n_slots_;
    const actc_save_role plain = {.role = ACTC_ROLE_LINEAR_IN, .linear = 1, .fan_in = 8};
    actc_transform done;
    assert_int_equal(actc_save_offer(ctx, node, x, &plain, &done), ACTC_OK);
    assert_int_equal(done.kind, ACTC_XFORM_NONE);
    actc_tensor *back = actc_load(ctx, node, slots);
    assert_int_equal(back->shape[1], 8); /* x itself */
    actc_tensor_release(back);
    const actc_save_role offers = {.role = ACTC_ROLE_LINEAR_IN, .linear = 1, .fan_in = 8, .transforms = ACTC_XFORM_PROJECT};
    assert_int_equal(actc_save_offer(ctx, node, x, &offers, &done), ACTC_OK);
    assert_int_equal(done.kind, ACTC_XFORM_PROJECT);
    assert_int_equal(done.proj.rank, 4);
    back = actc_load(ctx, node, slots + 1);
    assert_int_equal(back->shape[1], 4); /* x P */
    actc_tensor_release(back);
    assert_int_equal(actc_save_offer(ctx, node, x, &offers, NULL), ACTC_ERR_INVALID);
    assert_int_equal(actc_ctx_set_policy(ctx, "none"), ACTC_ERR_STATE); /* a tape is recorded */
    actc_ctx_reset(ctx);
    assert_int_equal(actc_ctx_set_policy(ctx, "gact:4"), ACTC_OK);
    actc_tensor_release(y);
    y = actc_relu(ctx, x);
    node = ctx->nodes[ctx->n_nodes - 1];
    assert_int_equal(actc_save_offer(ctx, node, x, &offers, &done), ACTC_OK);
    assert_int_equal(done.kind, ACTC_XFORM_NONE);
    const actc_projection bad = {.n = 0, .rank = 4, .key = 1};
    assert_int_equal(actc_project(&bad, x->data, 4, y->data), ACTC_ERR_INVALID);
    actc_ctx_reset(ctx);
    actc_tensor_release(y);
    actc_tensor_release(x);
    actc_ctx_free(ctx);
}

/* ---- gradients encoded across micro-batches ---------------------------------------- */

/* A two-layer network's parameters. */
typedef struct {
    actc_tensor *w1, *b1, *w2;
} mlp2;

static mlp2 mlp2_new(void)
{
    const int s1[2] = {16, 24}, sb[1] = {16}, s2[2] = {3, 16};
    mlp2 m = {actc_param_new(2, s1, "w1"), actc_param_new(1, sb, "b1"), actc_param_new(2, s2, "w2")};
    tu_fill_uniform(m.w1, 21, -0.3f, 0.3f);
    tu_fill_uniform(m.b1, 22, -0.1f, 0.1f);
    tu_fill_uniform(m.w2, 23, -0.3f, 0.3f);
    return m;
}

static void mlp2_free(mlp2 *m)
{
    actc_tensor_release(m->w1);
    actc_tensor_release(m->b1);
    actc_tensor_release(m->w2);
}

/* Micro-batch k's forward and backward (scaled by 1/4). */
static void mlp2_micro(actc_ctx *ctx, mlp2 *m, int k)
{
    const int xs[2] = {5, 24};
    actc_tensor *x = tu_rand(2, xs, 100 + (uint64_t)k, -1, 1, 0);
    actc_ctx_set_step(ctx, 7);
    actc_ctx_set_substep(ctx, (uint32_t)k);
    actc_tensor *h = actc_linear(ctx, x, m->w1, m->b1);
    actc_tensor *a = actc_relu(ctx, h);
    actc_tensor *y = actc_linear(ctx, a, m->w2, NULL);
    actc_tensor *loss = tu_wsum(ctx, y, 40 + k);
    assert_int_equal(actc_backward_scaled(ctx, loss, 0.25f), ACTC_OK);
    actc_tensor_release(loss);
    actc_tensor_release(y);
    actc_tensor_release(a);
    actc_tensor_release(h);
    actc_tensor_release(x);
}

/* Count the gradient-complete events and check each arrives folded. */
typedef struct {
    int n;
    actc_tensor *order[12];
} events;

static actc_status on_complete(actc_ctx *ctx, actc_tensor *p, void *user)
{
    (void)ctx;
    events *e = user;
    actc_grad_info gi;
    actc_grad_get_info(p, &gi);
    if (!gi.present) print_error("no gradient in %s at its event\n", p->name);
    assert_int_equal(gi.present, 1);
    assert_null(gi.form == ACTC_GRAD_QUANT ? p->grad : NULL); /* the dense buffer is gone */
    if (e->n < 12) e->order[e->n] = p;
    e->n++;
    return ACTC_OK;
}

static void test_encoded_gradients(void **state)
{
    (void)state;
    const size_t mem0 = tu_mem_now();
    /* The reference: each micro-batch's dense gradient on its own. */
    mlp2 ref = mlp2_new();
    actc_ctx *rc = actc_ctx_new();
    float *g1[4], *g2[4], *gb[4];
    for (int k = 0; k < 4; k++) {
        mlp2_micro(rc, &ref, k);
        g1[k] = tu_dup_floats(ref.w1->grad->data, ref.w1->numel);
        g2[k] = tu_dup_floats(ref.w2->grad->data, ref.w2->numel);
        gb[k] = tu_dup_floats(ref.b1->grad->data, ref.b1->numel);
        actc_tensor_drop_grad(ref.w1);
        actc_tensor_drop_grad(ref.w2);
        actc_tensor_drop_grad(ref.b1);
    }

    /* w2 in bf16, w1 at 8 bits, b1 dense. */
    mlp2 m = mlp2_new();
    assert_int_equal(actc_param_set_grad_codec(m.w2, "bf16"), ACTC_OK);
    assert_int_equal(actc_param_set_grad_codec(m.w1, "quant:8"), ACTC_OK);
    assert_int_equal(actc_param_set_grad_codec(m.b1, "fp32"), ACTC_OK);
    assert_int_equal(actc_param_set_grad_codec(m.b1, "quant:9"), ACTC_ERR_INVALID);
    assert_int_equal(actc_param_set_grad_codec(m.b1, "fp8"), ACTC_ERR_INVALID);
    actc_ctx *ctx = actc_ctx_new();
    events ev = {0};
    actc_ctx_on_grad_complete(ctx, on_complete, &ev);
    for (int k = 0; k < 4; k++) {
        mlp2_micro(ctx, &m, k);
        assert_null(m.w2->grad);
        assert_null(m.w1->grad);
        assert_non_null(m.b1->grad);
    }
    /* Once per parameter per backward, in reverse topological order. */
    assert_int_equal(ev.n, 12);
    actc_tensor *const want[3] = {m.w2, m.w1, m.b1}; /* the last layer first; a node's inputs in order */
    for (int i = 0; i < 12; i++) assert_ptr_equal(ev.order[i], want[i % 3]);
    /* bf16: one rounding per micro-batch, of the running sum. */
    float acc2[48];
    for (int i = 0; i < 48; i++) {
        float a = 0;
        for (int k = 0; k < 4; k++) {
            a += g2[k][i];
            uint16_t h;
            actc_bf16_encode(&a, 1, &h);
            actc_bf16_decode(&h, 1, &a);
        }
        acc2[i] = a;
    }
    float got2[48];
    assert_int_equal(actc_grad_to_dense(m.w2, got2), ACTC_OK);
    assert_memory_equal(got2, acc2, sizeof acc2);
    /* 8 bits: within four roundings of a step of the sum's range. */
    float got1[16 * 24];
    assert_int_equal(actc_grad_to_dense(m.w1, got1), ACTC_OK);
    double lo = 0, hi = 0, worst = 0;
    for (int i = 0; i < 16 * 24; i++) {
        const double s = (double)g1[0][i] + g1[1][i] + g1[2][i] + g1[3][i];
        lo = fmin(lo, s), hi = fmax(hi, s);
        worst = fmax(worst, fabs(got1[i] - s));
    }
    assert_true(worst <= 4 * 2 * (hi - lo) / 255);
    assert_true(worst > 0); /* it is encoded */
    /* b1 stayed dense: the exact sum. */
    for (int i = 0; i < 16; i++)
        assert_float_equal(m.b1->grad->data[i], gb[0][i] + gb[1][i] + gb[2][i] + gb[3][i], 1e-6);
    actc_grad_info gi;
    actc_grad_get_info(m.w1, &gi);
    assert_int_equal(gi.form, ACTC_GRAD_QUANT);
    assert_string_equal(gi.codec, "quant:8");
    assert_true(gi.bytes < 16 * 24 + 64); /* about a byte per element */
    actc_grad_get_info(m.w2, &gi);
    assert_int_equal(gi.bytes, 48 * sizeof(uint16_t));
    assert_int_equal(actc_param_set_grad_codec(m.w2, "fp32"), ACTC_ERR_STATE); /* holds one */

    /* Clipping sees the decoded values and scales on decode. */
    actc_tensor *params[3] = {m.w1, m.b1, m.w2};
    double sq = 0;
    for (int i = 0; i < 16 * 24; i++) sq += (double)got1[i] * got1[i];
    for (int i = 0; i < 48; i++) sq += (double)got2[i] * got2[i];
    for (int i = 0; i < 16; i++) sq += (double)m.b1->grad->data[i] * m.b1->grad->data[i];
    float norm;
    assert_int_equal(actc_clip_grad_norm(params, 3, (float)(sqrt(sq) / 4), &norm), ACTC_OK);
    assert_float_equal(norm, sqrt(sq), 1e-5 * sqrt(sq));
    float clipped[48];
    assert_int_equal(actc_grad_to_dense(m.w2, clipped), ACTC_OK);
    for (int i = 0; i < 48; i++) assert_float_equal(clipped[i], got2[i] * (float)(sqrt(sq) / 4 / (sqrt(sq) + 1e-6)), 1e-6);

    /* SGD steps on the decoded gradient: w -= lr g. */
    actc_optim *o = actc_sgd_new(params, 3, 0.0f, 0, 0.0f);
    float w2want[48];
    for (int i = 0; i < 48; i++) w2want[i] = m.w2->data[i] - 0.5f * clipped[i];
    assert_int_equal(actc_optim_step(o, 0.5f), ACTC_OK);
    assert_memory_equal(m.w2->data, w2want, sizeof w2want);
    actc_optim_free(o);
    for (int i = 0; i < 3; i++) actc_tensor_drop_grad(params[i]);
    actc_grad_get_info(m.w1, &gi);
    assert_int_equal(gi.present, 0);

    for (int k = 0; k < 4; k++) free(g1[k]), free(g2[k]), free(gb[k]);
    mlp2_free(&m);
    mlp2_free(&ref);
    actc_ctx_free(ctx);
    actc_ctx_free(rc);
    assert_int_equal(tu_mem_now(), mem0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_region_plans),
        cmocka_unit_test(test_attention_follows_its_plan),
        cmocka_unit_test(test_region_take),
        cmocka_unit_test(test_recompute_toy_norm),
        cmocka_unit_test(test_recompute_two_inputs),
        cmocka_unit_test(test_projection_transform),
        cmocka_unit_test(test_transform_not_offered),
        cmocka_unit_test(test_encoded_gradients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
