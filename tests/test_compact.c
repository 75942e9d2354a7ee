/* CompAct (issue 18): the linear layer under a compact policy (forward, dx
 * and db bit-identical, z = x P saved, the low-rank weight gradient), the
 * unbiasedness of P G^ over seeds (Gaussian and sparse), P rebuilt
 * identically at 1 and 2 threads, the optimizer in the subspace (alpha,
 * moments kept or reset with each new projection), the exact bytes of a
 * llama block against the paper's Table 1, the policy's plans (seed
 * epochs, ages, shared keys, which layers) and its specs and errors.
 * Resumption with compact policies is in test_trainer. */
#include "testutil.h"
#include "../src/core/core.h"
#include "../src/policy/policy.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 24, N_IN = 32, M_OUT = 6 };

/* y = linear(x, w, b), loss = wsum(y), backward; the store's bytes before
 * backward in *stored. */
static void linear_pass(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b, float *y_out, size_t *stored)
{
    actc_tensor *y = actc_linear(ctx, x, w, b);
    assert_non_null(y);
    if (y_out) memcpy(y_out, y->data, y->numel * sizeof(float));
    actc_tensor *loss = tu_wsum(ctx, y, 5);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    if (stored) *stored = st.stored_bytes;
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    actc_tensor_release(loss);
    actc_tensor_release(y);
}

static actc_ctx *ctx_with(const char *policy, uint64_t seed)
{
    actc_ctx *ctx = actc_ctx_new();
    actc_ctx_set_seed(ctx, seed);
    if (actc_ctx_set_policy(ctx, policy) != ACTC_OK) fail_msg("%s: %s", policy, actc_last_error());
    return ctx;
}

static void test_linear_exact_parts(void **state)
{
    (void)state;
    const size_t mem0 = tu_mem_now();
    const int xs[3] = {2, ROWS / 2, N_IN}, ws[2] = {M_OUT, N_IN}, bs[1] = {M_OUT};
    actc_tensor *x = tu_rand(3, xs, 1, -1, 1, 1);
    actc_tensor *w = actc_param_new(2, ws, "w"), *b = actc_param_new(1, bs, "b");
    tu_fill_uniform(w, 2, -0.3f, 0.3f);
    tu_fill_uniform(b, 3, -0.1f, 0.1f);
    float y0[ROWS * M_OUT], y1[ROWS * M_OUT];
    size_t stored0, stored1;

    actc_ctx *plain = ctx_with("none", 7);
    linear_pass(plain, x, w, b, y0, &stored0);
    float *gx = tu_dup_floats(x->grad->data, x->numel), *gb = tu_dup_floats(b->grad->data, b->numel);
    float *gw = tu_dup_floats(w->grad->data, w->numel);
    actc_tensor_drop_grad(x);
    actc_tensor_drop_grad(w);
    actc_tensor_drop_grad(b);

    actc_ctx *ctx = ctx_with("compact:r=0.25,layers=*", 7);
    linear_pass(ctx, x, w, b, y1, &stored1);
    const int r = N_IN / 4;
    assert_memory_equal(y0, y1, sizeof y0);                               /* forward exact */
    assert_memory_equal(gx, x->grad->data, x->numel * sizeof(float));     /* dL/dx exact   */
    assert_memory_equal(gb, b->grad->data, b->numel * sizeof(float));     /* bias exact    */
    assert_int_equal(stored0, (size_t)ROWS * N_IN * sizeof(float));
    assert_int_equal(stored1, (size_t)ROWS * r * sizeof(float));          /* rows x r      */
    actc_grad_info gi;
    actc_grad_get_info(w, &gi);
    assert_int_equal(gi.form, ACTC_GRAD_LOWRANK);
    assert_int_equal(gi.proj.rank, r);
    assert_int_equal(gi.proj.n, N_IN);
    assert_int_equal(gi.bytes, (size_t)M_OUT * r * sizeof(float));       /* GRAD r x m    */
    assert_true(fabsf(gi.proj.scale - 0.25f) < 1e-7f);
    /* G^ = dy^T (x P) = dW P: the factor stands for dW P P^T. */
    float want[M_OUT * N_IN] = {0}, got[M_OUT * N_IN], zr[M_OUT * N_IN / 4];
    assert_int_equal(actc_project(&gi.proj, gw, M_OUT, zr), ACTC_OK);
    assert_int_equal(actc_project_back(&gi.proj, zr, M_OUT, 1.0f, want), ACTC_OK);
    assert_int_equal(actc_grad_to_dense(w, got), ACTC_OK);
    double err = 0, ref = 0;
    for (int i = 0; i < M_OUT * N_IN; i++) err += (got[i] - want[i]) * (got[i] - want[i]), ref += want[i] * want[i];
    assert_true(sqrt(err / ref) < 1e-5);

    /* A weight that is not a parameter has no low-rank form: x is saved
     * (and the weight), and a pass that projected nothing is refused. */
    actc_tensor_drop_grad(x);
    actc_tensor *wa = tu_rand(2, ws, 9, -0.3f, 0.3f, 1);
    actc_tensor *ya = actc_linear(ctx, x, wa, NULL), *la = tu_wsum(ctx, ya, 5);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    assert_int_equal(st.stored_bytes, (size_t)ROWS * N_IN * sizeof(float) + wa->numel * sizeof(float));
    assert_int_equal(actc_backward(ctx, la), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "projected no linear layer"));
    actc_tensor_release(la);
    actc_tensor_release(ya);
    free(gx), free(gb), free(gw);
    actc_tensor_release(wa);
    actc_tensor_release(x);
    actc_tensor_release(w);
    actc_tensor_release(b);
    actc_ctx_free(plain);
    actc_ctx_free(ctx);
    assert_int_equal(tu_mem_now(), mem0);
}

/* Mean over K seeds of the dense image P G^ of the low-rank gradient,
 * relative error to the exact dW. */
static double mean_error(const char *policy, int K, const float *exact, actc_tensor *x, actc_tensor *w)
{
    double *sum = calloc(M_OUT * N_IN, sizeof *sum), ex[M_OUT * N_IN];
    for (int i = 0; i < M_OUT * N_IN; i++) ex[i] = exact[i];
    float g[M_OUT * N_IN];
    for (int k = 0; k < K; k++) {
        actc_ctx *ctx = ctx_with(policy, 100 + (uint64_t)k);
        linear_pass(ctx, x, w, NULL, NULL, NULL);
        assert_int_equal(actc_grad_to_dense(w, g), ACTC_OK);
        for (int i = 0; i < M_OUT * N_IN; i++) sum[i] += g[i];
        actc_tensor_drop_grad(w);
        actc_tensor_drop_grad(x);
        actc_ctx_free(ctx);
    }
    const double e = tu_mean_rel_err(sum, K, ex, M_OUT * N_IN);
    free(sum);
    return e;
}

/* E[P P^T] = I: the mean of P G^ over seeds tends to dW as 1/sqrt(seeds). */
static void test_unbiased_over_seeds(void **state)
{
    (void)state;
    const int xs[2] = {ROWS, N_IN}, ws[2] = {M_OUT, N_IN};
    actc_tensor *x = tu_rand(2, xs, 21, -1, 1, 1);
    actc_tensor *w = actc_param_new(2, ws, "w");
    tu_fill_uniform(w, 22, -0.3f, 0.3f);
    actc_ctx *plain = ctx_with("none", 1);
    linear_pass(plain, x, w, NULL, NULL, NULL);
    float *exact = tu_dup_floats(w->grad->data, w->numel);
    actc_tensor_drop_grad(w);
    actc_tensor_drop_grad(x);
    actc_ctx_free(plain);
    static const char *const policies[] = {"compact:r=0.25,layers=*", "compact:r=0.25,proj=sparse,layers=*"};
    for (int p = 0; p < 2; p++) {
        const double e100 = mean_error(policies[p], 100, exact, x, w);
        const double e1600 = mean_error(policies[p], 1600, exact, x, w);
        printf("  %-38s mean of P G^ vs dW: %.4f over 100 seeds, %.4f over 1600 (ratio %.2f, 1/sqrt: 4)\n",
               policies[p], e100, e1600, e100 / e1600);
        assert_true(e1600 < 0.1);
        assert_true(e100 / e1600 > 2.5 && e100 / e1600 < 6.5);
    }
    free(exact);
    actc_tensor_release(x);
    actc_tensor_release(w);
}

/* The same P bytes at 1 and 2 threads (a P large enough to be filled in
 * parallel), for both kinds; the sparse one has the density asked for. */
static void test_projection_threads(void **state)
{
    (void)state;
    const int threads = actc_get_threads();
    for (int kind = ACTC_PROJ_GAUSS; kind <= ACTC_PROJ_SPARSE; kind++) {
        const actc_projection p = {.n = 512, .rank = 256, .key = 77, .kind = kind, .density = 0.25f};
        const size_t nn = (size_t)p.n * p.rank;
        float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b);
        actc_set_threads(1);
        actc__projection_fill(&p, a);
        actc_set_threads(2);
        actc__projection_fill(&p, b);
        assert_memory_equal(a, b, nn * sizeof *a);
        double sq = 0;
        size_t nz = 0;
        for (size_t i = 0; i < nn; i++) sq += (double)a[i] * a[i], nz += a[i] != 0.0f;
        /* entries of variance 1/rank: the mean square is 1/rank */
        assert_true(fabs(sq / nn * p.rank - 1.0) < 0.02);
        if (kind == ACTC_PROJ_SPARSE) assert_true(fabs((double)nz / nn - 0.25) < 0.01);
        free(a);
        free(b);
    }
    actc_set_threads(threads);
}

/* AdamW on a low-rank gradient: p -= lr alpha d P^T; the moments carry
 * over a new projection by default and restart with reset (bias corrected
 * from the projection's first step). */
static void test_optimizer_subspace(void **state)
{
    (void)state;
    const int ws[2] = {M_OUT, N_IN}, fs[2] = {M_OUT, 4};
    actc_tensor *w[2];
    actc_optim *o[2];
    for (int k = 0; k < 2; k++) {
        w[k] = actc_param_new(2, ws, "w");
        tu_fill_uniform(w[k], 31, -0.3f, 0.3f);
        o[k] = actc_adamw_new(&w[k], 1, 0.9f, 0.999f, 1e-8f, 0.0f);
    }
    actc_tensor *f = actc_tensor_new(ACTC_MEM_SCRATCH, 2, fs);
    actc_ctx *ctx = actc_ctx_new();
    for (int step = 0; step < 3; step++) {
        for (int k = 0; k < 2; k++) {
            /* one projection for steps 0-1, a new one at step 2 */
            actc_projection p = {.n = N_IN, .rank = 4, .key = step < 2 ? 5 : 6, .scale = 0.5f,
                                 .age = (uint32_t)(step < 2 ? step : 0), .reset_state = k};
            tu_fill_uniform(f, 40 + (uint64_t)step, -1, 1);
            float before[M_OUT * N_IN];
            memcpy(before, w[k]->data, sizeof before);
            assert_int_equal(actc_grad_add_lowrank(ctx, w[k], f, &p), ACTC_OK);
            actc_tensor **st;
            assert_int_equal(actc_optim_state(o[k], &st), 2);
            assert_int_equal(st[0]->shape[1], 4); /* moments r x m */
            float m[M_OUT * 4], v[M_OUT * 4];
            memcpy(m, st[0]->data, sizeof m);
            memcpy(v, st[1]->data, sizeof v);
            assert_int_equal(actc_optim_step(o[k], 0.1f), ACTC_OK);
            /* The expected update from the moments before the step. */
            const int fresh = k == 1 && step == 2;
            const double t = fresh ? 1 : step + 1;
            float d[M_OUT * 4], want[M_OUT * N_IN];
            for (int i = 0; i < M_OUT * 4; i++) {
                const float g = f->data[i], m0 = fresh ? 0 : m[i], v0 = fresh ? 0 : v[i];
                const float mi = m0 + 0.1f * (g - m0), vi = 0.999f * v0 + 0.001f * g * g;
                d[i] = (float)(mi / (1 - pow(0.9, t)) / (sqrt(vi / (1 - pow(0.999, t))) + 1e-8));
            }
            memcpy(want, before, sizeof want);
            assert_int_equal(actc_project_back(&p, d, M_OUT, -0.1f * 0.5f, want), ACTC_OK);
            assert_true(tu_max_abs_diff(want, w[k]->data, M_OUT * N_IN) < 1e-5);
            actc_tensor_drop_grad(w[k]);
        }
        if (step == 2) /* after a new projection the two runs differ */
            assert_true(tu_max_abs_diff(w[0]->data, w[1]->data, M_OUT * N_IN) > 1e-4);
        else
            assert_memory_equal(w[0]->data, w[1]->data, M_OUT * N_IN * sizeof(float));
    }
    for (int k = 0; k < 2; k++) {
        actc_optim_free(o[k]);
        actc_tensor_release(w[k]);
    }
    actc_tensor_release(f);
    actc_ctx_free(ctx);
}

/* The paper's Table 1 on one llama block: the bytes of CONTEXT, GRAD and
 * OPTIM that compact:r removes, exactly. */
static void block_bytes(const char *policy, size_t *context, size_t *grad, size_t *optim, int *D, int *F, int *rows)
{
    actc_model_opts mo = actc_model_default_opts();
    mo.n_layers = 1;
    mo.width = 32;
    mo.n_heads = 2;
    mo.context = 16;
    mo.vocab = 256;
    actc_model *m = NULL;
    assert_int_equal(actc_model_create("llama", &mo, &m), ACTC_OK);
    actc_trainer_opts to = actc_trainer_default_opts();
    to.policy = policy;
    to.optim = "adamw";
    actc_trainer *t = NULL;
    if (actc_trainer_new(m, &to, &t) != ACTC_OK) fail_msg("%s: %s", policy, actc_last_error());
    enum { B = 2, T = 16 };
    int32_t ids[B * T], labels[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (i * 37) % 256, labels[i] = (i * 11 + 3) % 256;
    actc_batch b;
    memset(&b, 0, sizeof b);
    b.ids = ids;
    b.labels = labels;
    b.B = B;
    b.T = T;
    actc_step_result r;
    assert_int_equal(actc_trainer_step(t, &b, &r), ACTC_OK);
    actc_store_stats ss;
    actc_store_get_stats(actc_trainer_ctx(t), &ss);
    *context = ss.forward_bytes;
    char json[4096];
    actc_trainer_report(t, ACTC_REPORT_JSON, json, sizeof json);
    size_t dense, lowrank, enc, fp32, held, odense;
    const char *g = strstr(json, "\"gradients\":");
    const char *os = strstr(json, "\"optimizer_state\":");
    assert_non_null(g);
    assert_non_null(os);
    assert_int_equal(sscanf(g, "\"gradients\":{\"dense\":%zu,\"lowrank\":%zu,\"encoded\":%zu,\"fp32\":%zu", &dense,
                            &lowrank, &enc, &fp32), 4);
    assert_int_equal(sscanf(os, "\"optimizer_state\":{\"held\":%zu,\"dense\":%zu", &held, &odense), 2);
    *grad = dense + lowrank + enc;
    *optim = held;
    *D = mo.width;
    *F = 256 * ((8 * mo.width / 3 + 255) / 256); /* llama's SwiGLU width (transformer.c) */
    *rows = B * T;
    actc_trainer_free(t);
    actc_model_free(m);
}

static void test_llama_block_bytes(void **state)
{
    (void)state;
    size_t c0, g0, o0, c1, g1, o1;
    int D, F, R;
    block_bytes("none", &c0, &g0, &o0, &D, &F, &R);
    block_bytes("compact:r=0.25", &c1, &g1, &o1, &D, &F, &R);
    const size_t r = (size_t)D / 4, rf = (size_t)F / 4, f = sizeof(float);
    /* Activations: q, k, v share one input and w1, w3 another (each saved
     * once without compact); with it each of the six layers saves its own
     * rows x r (rows x F/4 for w2, whose input is F wide). */
    const size_t ctx_removed = (size_t)R * (2 * D + F) * f, ctx_added = (size_t)R * (5 * r + rf) * f;
    /* Gradients and AdamW's two moments: r x m instead of n x m for
     * wq, wk, wv (D x D), w1, w3 (F x D) and w2 (D x F). */
    const size_t g_removed = (3 * (size_t)D * D + 2 * (size_t)F * D + (size_t)D * F) * f;
    const size_t g_added = (3 * r * D + 2 * r * F + rf * D) * f;
    printf("  llama block (D %d, F %d, rows %d): CONTEXT %zu -> %zu, GRAD %zu -> %zu, OPTIM %zu -> %zu bytes\n", D, F,
           R, c0, c1, g0, g1, o0, o1);
    assert_int_equal(c0 - c1, ctx_removed - ctx_added);
    assert_int_equal(g0 - g1, g_removed - g_added);
    assert_int_equal(o0 - o1, 2 * (g_removed - g_added));
}


/* The projection a gradient carries, as the policy planned it at a step. */
static actc_projection planned_at(actc_ctx *ctx, uint64_t step, actc_tensor *x, actc_tensor *w)
{
    actc_ctx_set_step(ctx, step);
    linear_pass(ctx, x, w, NULL, NULL, NULL);
    actc_grad_info gi;
    actc_grad_get_info(w, &gi);
    assert_int_equal(gi.form, ACTC_GRAD_LOWRANK);
    actc_tensor_drop_grad(w);
    actc_tensor_drop_grad(x);
    return gi.proj;
}

/* Seed epochs: a new key every gap steps, the age within the epoch, reset
 * carried to the optimizer; gap=none keeps one key; proj=shared gives
 * layers of the same width the same key, and their own otherwise. */
static void test_policy_plans(void **state)
{
    (void)state;
    const int xs[2] = {ROWS, N_IN}, ws[2] = {M_OUT, N_IN};
    actc_tensor *x = tu_rand(2, xs, 1, -1, 1, 1);
    actc_tensor *w = actc_param_new(2, ws, "w");
    tu_fill_uniform(w, 2, -0.3f, 0.3f);
    actc_ctx *ctx = ctx_with("compact:r=0.25,gap=3,reset,layers=*", 4);
    actc_projection p[7];
    for (int t = 0; t < 7; t++) p[t] = planned_at(ctx, (uint64_t)t, x, w);
    for (int t = 0; t < 7; t++) {
        assert_int_equal(p[t].age, (uint32_t)(t % 3));
        assert_int_equal(p[t].reset_state, 1);
        assert_true((p[t].key == p[t / 3 * 3].key));
    }
    assert_true(p[0].key != p[3].key && p[3].key != p[6].key);
    actc_ctx_free(ctx);
    ctx = ctx_with("compact:r=0.25,gap=none,layers=*", 4);
    assert_true(planned_at(ctx, 0, x, w).key == planned_at(ctx, 1000, x, w).key);
    actc_ctx_free(ctx);

    /* Two layers of one width in two scopes: one key each, or one for both. */
    actc_tensor *w2 = actc_param_new(2, ws, "w2");
    tu_fill_uniform(w2, 3, -0.3f, 0.3f);
    for (int shared = 0; shared <= 1; shared++) {
        ctx = ctx_with(shared ? "compact:proj=shared,layers=*" : "compact:layers=*", 4);
        actc_tensor *y[2], *loss[2];
        assert_int_equal(actc_scope_push(ctx, "a"), ACTC_OK);
        y[0] = actc_linear(ctx, x, w, NULL);
        actc_scope_pop(ctx);
        assert_int_equal(actc_scope_push(ctx, "b"), ACTC_OK);
        y[1] = actc_linear(ctx, x, w2, NULL);
        actc_scope_pop(ctx);
        actc_tensor *sum = actc_add(ctx, y[0], y[1]);
        loss[0] = tu_wsum(ctx, sum, 1);
        /* Two projections of one input: stored rows x r twice, while the
         * fp32 reference counts the input once (what `none` would keep). */
        actc_store_stats ss;
        actc_store_get_stats(ctx, &ss);
        assert_int_equal(ss.stored_bytes, 2 * (size_t)ROWS * (N_IN / 4) * sizeof(float));
        assert_int_equal(ss.fp32_bytes, (size_t)ROWS * N_IN * sizeof(float));
        assert_int_equal(actc_backward(ctx, loss[0]), ACTC_OK);
        actc_grad_info g1, g2;
        actc_grad_get_info(w, &g1);
        actc_grad_get_info(w2, &g2);
        assert_int_equal(g1.form, ACTC_GRAD_LOWRANK);
        assert_int_equal(g2.form, ACTC_GRAD_LOWRANK);
        assert_int_equal(g1.proj.key == g2.proj.key, shared);
        actc_tensor_release(loss[0]);
        actc_tensor_release(sum);
        actc_tensor_release(y[0]);
        actc_tensor_release(y[1]);
        actc_tensor_drop_grad(w), actc_tensor_drop_grad(w2), actc_tensor_drop_grad(x);
        actc_ctx_free(ctx);
    }
    actc_tensor_release(w2);
    actc_tensor_release(x);
    actc_tensor_release(w);
}

/* A model's block holding one linear layer (user: the weight). */
static actc_tensor *linear_block(actc_ctx *ctx, actc_tensor *x, void *user)
{
    return actc_linear(ctx, x, user, NULL);
}

/* Which layers: by default those inside the model's blocks (not by scope
 * name), else layers= globs over scopes; inputs another save keeps left
 * exact unless all-linear, and a policy that projects nothing is an error
 * at the end of backward. */
static void test_layer_selection(void **state)
{
    (void)state;
    const int xs[2] = {ROWS, N_IN}, ws[2] = {M_OUT, N_IN};
    actc_tensor *x = tu_rand(2, xs, 1, -1, 1, 1);
    actc_tensor *c = tu_rand(2, xs, 2, -1, 1, 1); /* makes mul keep x */
    actc_tensor *w = actc_param_new(2, ws, "w");
    tu_fill_uniform(w, 2, -0.3f, 0.3f);
    static const struct {
        const char *policy, *scope;
        int kept, block, lowrank;
    } cases[] = {
        {"compact:layers=*.attn", "h0.attn", 0, 0, 1}, {"compact:layers=*.attn", "h0.mlp", 0, 1, 0},
        {"compact:layers=*.attn|*.mlp", "h0.mlp", 0, 0, 1}, {"compact", "h0.mlp", 0, 1, 1},
        {"compact", "h0.attn", 0, 0, 0}, {"compact", "head", 0, 0, 0}, {"compact", "h2.attn", 1, 1, 0},
        {"compact:all-linear", "h2.attn", 1, 1, 1},
        /* a block recomputed in backward (a GACT segment) projects the same
         * layer again when it reruns: still inside the block */
        {"compact+gact:CB1", "h0.mlp", 0, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        actc_ctx *ctx = ctx_with(cases[i].policy, 1);
        assert_int_equal(actc_scope_push(ctx, cases[i].scope), ACTC_OK);
        actc_tensor *m = cases[i].kept ? actc_mul(ctx, x, c) : NULL;
        actc_tensor *y = cases[i].block ? actc_region(ctx, ACTC_REGION_BLOCK, linear_block, w, x)
                                        : actc_linear(ctx, x, w, NULL);
        assert_non_null(y);
        actc_scope_pop(ctx);
        actc_tensor *loss = tu_wsum(ctx, y, 1);
        if (m) {
            actc_tensor *lm = tu_wsum(ctx, m, 2), *both = actc_add(ctx, loss, lm);
            actc_tensor_release(lm);
            actc_tensor_release(loss);
            loss = both;
        }
        const actc_status st = actc_backward(ctx, loss);
        actc_grad_info gi;
        actc_grad_get_info(w, &gi);
        if (cases[i].lowrank) {
            assert_int_equal(st, ACTC_OK);
            assert_int_equal(gi.form, ACTC_GRAD_LOWRANK);
        } else {
            /* the layer was left exact, and it was the only one: refused,
             * naming the layers the policy looked for */
            assert_int_equal(st, ACTC_ERR_INVALID);
            assert_non_null(strstr(actc_last_error(), "projected no linear layer"));
            const char *p = strchr(cases[i].policy, '=');
            assert_non_null(strstr(actc_last_error(), p ? p + 1 : "inside the model's blocks"));
        }
        actc_tensor_release(loss);
        actc_tensor_release(y);
        actc_tensor_release(m);
        actc_tensor_drop_grad(w), actc_tensor_drop_grad(x), actc_tensor_drop_grad(c);
        actc_ctx_free(ctx);
    }
    actc_tensor_release(x);
    actc_tensor_release(c);
    actc_tensor_release(w);
}

/* SGD with momentum and weight decay on a low-rank gradient: v = m v + F
 * in the subspace, p *= 1 - lr wd, p -= lr alpha v P^T. */
static void test_sgd_subspace(void **state)
{
    (void)state;
    const int ws[2] = {M_OUT, N_IN}, fs[2] = {M_OUT, 4};
    actc_tensor *w = actc_param_new(2, ws, "w");
    tu_fill_uniform(w, 31, -0.3f, 0.3f);
    actc_optim *o = actc_sgd_new(&w, 1, 0.9f, 0, 0.1f);
    actc_tensor *f = actc_tensor_new(ACTC_MEM_SCRATCH, 2, fs);
    actc_ctx *ctx = actc_ctx_new();
    float v[M_OUT * 4] = {0};
    for (int step = 0; step < 2; step++) {
        const actc_projection p = {.n = N_IN, .rank = 4, .key = 9, .scale = 0.25f};
        tu_fill_uniform(f, 50 + (uint64_t)step, -1, 1);
        float want[M_OUT * N_IN];
        for (int i = 0; i < M_OUT * N_IN; i++) want[i] = w->data[i] * (1.0f - 0.05f * 0.1f);
        for (int i = 0; i < M_OUT * 4; i++) v[i] = 0.9f * v[i] + f->data[i];
        assert_int_equal(actc_project_back(&p, v, M_OUT, -0.05f * 0.25f, want), ACTC_OK);
        assert_int_equal(actc_grad_add_lowrank(ctx, w, f, &p), ACTC_OK);
        assert_int_equal(actc_optim_step(o, 0.05f), ACTC_OK);
        assert_true(tu_max_abs_diff(want, w->data, M_OUT * N_IN) < 1e-6);
        actc_tensor_drop_grad(w);
    }
    actc_optim_free(o);
    actc_tensor_release(f);
    actc_tensor_release(w);
    actc_ctx_free(ctx);
}

/* State made before the first step (at the parameters' shape: a
 * checkpoint written at step 0, say) takes the low-rank gradient's. */
static void test_early_state(void **state)
{
    (void)state;
    const int ws[2] = {M_OUT, N_IN}, fs[2] = {M_OUT, 4};
    actc_tensor *w = actc_param_new(2, ws, "w");
    actc_optim *o = actc_adamw_new(&w, 1, 0.9f, 0.999f, 1e-8f, 0.0f);
    actc_tensor **st;
    assert_int_equal(actc_optim_state(o, &st), 2);
    assert_int_equal(st[0]->shape[1], N_IN);
    actc_tensor *f = actc_tensor_new(ACTC_MEM_SCRATCH, 2, fs);
    tu_fill_uniform(f, 1, -1, 1);
    actc_ctx *ctx = actc_ctx_new();
    const actc_projection p = {.n = N_IN, .rank = 4, .key = 9};
    assert_int_equal(actc_grad_add_lowrank(ctx, w, f, &p), ACTC_OK);
    assert_int_equal(actc_optim_step(o, 0.01f), ACTC_OK);
    assert_int_equal(actc_optim_state(o, &st), 2);
    assert_int_equal(st[0]->shape[1], 4);
    /* once stepped, a dense gradient no longer fits the subspace state */
    actc_tensor_drop_grad(w);
    float *g;
    assert_int_equal(actc_grad_buffer(ctx, w, &g), ACTC_OK);
    assert_int_equal(actc_optim_step(o, 0.01f), ACTC_ERR_STATE);
    actc_optim_free(o);
    actc_tensor_release(f);
    actc_tensor_release(w);
    actc_ctx_free(ctx);
}

static void test_specs(void **state)
{
    (void)state;
    static const char *const ok[][2] = {
        {"compact", "compact:r=0.25,gap=50,scale=0.25"},
        {"compact:r=0.5,gap=200,scale=1", "compact:r=0.5,gap=200,scale=1"},
        {"compact:r=16,gap=none", "compact:r=16,gap=none,scale=0.25"},
        {"compact:proj=sparse", "compact:r=0.25,gap=50,scale=0.25,proj=sparse,density=0.333333343"},
        {"compact:r=1.0,scale=1e+2", "compact:r=1.0,gap=50,scale=100"},
        {"compact:proj=shared,reset,all-linear", "compact:r=0.25,gap=50,scale=0.25,proj=shared,all-linear,reset"},
        {"compact:r=0.25+gact:4", "compact:r=0.25,gap=50,scale=0.25+gact:4"},
        {"compact:r=0.5+division", "compact:r=0.5,gap=50,scale=0.25+division:b=8,q=2"},
        {"compact:r=0.25+actnn:L3", "compact:r=0.25,gap=50,scale=0.25+actnn:L3"},
        {"compact:layers=enc/*.q|[!x]?", "compact:r=0.25,gap=50,scale=0.25,layers=enc/*.q|[!x]?"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) actc_ctx_free(tu_expect_policy(ok[i][0], ok[i][1]));
    tu_expect_bad_policy("compact:r=0", "r= is a fraction");
    tu_expect_bad_policy("compact:r=1.5", "r= is a fraction");
    tu_expect_bad_policy("compact:gap=0", "gap= is a number of steps >= 1, or none");
    tu_expect_bad_policy("compact:rank=4", "compact's options are");
    tu_expect_bad_policy("compact:density=0.1", "density= applies to proj=sparse");
    tu_expect_bad_policy("compact+gact:4+actnn:L3", "one codec policy");
    tu_expect_bad_policy("gact:4+compact", "only compact composes");
    tu_expect_bad_policy("compact+compact", "compact given twice");
    tu_expect_bad_policy("compact+", "nothing after '+'");
    /* a '+' in a glob would make the canonical spec compose ("layers=c+") */
    tu_expect_bad_policy("compact:layers=c+,r=2", "without spaces, ',' or '+'");
    tu_expect_bad_policy("compact:layers=a b", "without spaces, ',' or '+'");
    tu_expect_bad_policy("compact+zip", "unknown compression policy 'zip'");

    /* A rank above the layer's width is refused when the layer is met. */
    const int xs[2] = {4, 8}, ws[2] = {3, 8};
    actc_tensor *x = tu_rand(2, xs, 1, -1, 1, 1), *w = actc_param_new(2, ws, "w");
    actc_ctx *ctx = ctx_with("compact:r=9,layers=*", 1);
    actc_tensor *y = actc_linear(ctx, x, w, NULL);
    assert_null(y);
    assert_non_null(strstr(actc_last_error(), "rank 9 is above the width 8"));
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    actc_tensor_release(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_exact_parts), cmocka_unit_test(test_unbiased_over_seeds),
        cmocka_unit_test(test_projection_threads), cmocka_unit_test(test_optimizer_subspace),
        cmocka_unit_test(test_llama_block_bytes),  cmocka_unit_test(test_specs),
        cmocka_unit_test(test_policy_plans),       cmocka_unit_test(test_layer_selection),
        cmocka_unit_test(test_sgd_subspace),       cmocka_unit_test(test_early_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
