/* Transformer language models (gpt, llama): whole-model finite-difference
 * gradient checks on tiny shapes, the two attention forms giving the same
 * logits and gradients, the presets' parameter counts, causality, bad input,
 * and memory coming back. */
#include "testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TB 2
#define TT 5

typedef struct {
    actc_model *m;
    int32_t ids[TB * TT];
} lm_case;

static actc_tensor *f_model(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)in;
    lm_case *c = user;
    return actc_model_forward_tokens(c->m, ctx, c->ids, TB, TT);
}

static actc_model *tiny(const char *name, int attention, uint64_t seed)
{
    actc_model_opts o = actc_model_default_opts();
    o.n_layers = 2;
    o.width = 8;
    o.n_heads = 2;
    o.context = 6;
    o.vocab = 7;
    o.attention = attention;
    o.seed = seed;
    actc_model *m = NULL;
    assert_int_equal(actc_model_create(name, &o, &m), ACTC_OK);
    assert_true(actc_model_takes_tokens(m));
    /* Larger weights than the 0.02 initialisation, so every path (attention
     * scores, norms, gates) carries a gradient finite differences can see. */
    actc_tensor **p;
    int np = actc_model_params(m, &p);
    for (int i = 0; i < np; i++) {
        /* Q and K larger still: scores that differ by O(1) give attention
         * gradients well above the fp32 noise of the differences. */
        float r = strstr(p[i]->name, "attn.q.") || strstr(p[i]->name, "attn.k.") ? 1.0f : 0.4f;
        if (p[i]->ndim == 2) tu_fill_uniform(p[i], 100 + (uint64_t)i, -r, r);
        else tu_fill_uniform(p[i], 100 + (uint64_t)i, 0.7f, 1.3f);
    }
    return m;
}

static void fill_ids(lm_case *c, int vocab)
{
    for (int i = 0; i < TB * TT; i++) c->ids[i] = (i * 5 + 3) % vocab;
}

static void gradcheck_model(const char *name, int attention)
{
    const size_t m0 = tu_mem_now();
    lm_case c;
    c.m = tiny(name, attention, 3);
    fill_ids(&c, 7);
    actc_tensor **all, *p[64];
    int np = 0, na = actc_model_params(c.m, &all);
    for (int i = 0; i < na; i++)
        if (!strstr(all[i]->name, "attn.k.bias")) p[np++] = all[i]; /* zero gradient: below */
    char what[64];
    snprintf(what, sizeof what, "%s (%s attention), all parameters", name, attention ? "naive" : "flash");
    /* Whole-model differences in fp32 are noisier than one operator's: the
     * attention gradients of the second layer are ~1e-3 of the loss's, near
     * the rounding of the 2-layer forward.  Every operator passes 1e-3 on its
     * own (test_ops_transformer, test_ops_attention); here 1e-2 catches a
     * wrong or missing connection (which gives errors near 1). */
    double err = tu_gradcheck(f_model, p, np, &c, 1e-2f);
    printf("gradcheck %s: worst rel err %.3g\n", what, err);
    assert_true(err < 1e-2);
    /* The key bias shifts a whole row of scores, which softmax ignores. */
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = f_model(ctx, NULL, &c), *loss = tu_wsum(ctx, y, 2);
    actc_tensor_release(y);
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    actc_tensor_release(loss);
    for (int i = 0; i < na; i++)
        if (strstr(all[i]->name, "attn.k.bias"))
            for (size_t j = 0; j < all[i]->numel; j++) assert_true(fabsf(all[i]->grad->data[j]) < 1e-5f);
    actc_model_zero_grad(c.m);
    actc_ctx_free(ctx);
    actc_model_free(c.m);
    assert_int_equal(tu_mem_now(), m0);
}

static void test_gpt_gradcheck(void **state)
{
    (void)state;
    gradcheck_model("gpt", ACTC_ATTN_FLASH);
    gradcheck_model("gpt", ACTC_ATTN_NAIVE);
}

static void test_llama_gradcheck(void **state)
{
    (void)state;
    gradcheck_model("llama", ACTC_ATTN_FLASH);
    gradcheck_model("llama", ACTC_ATTN_NAIVE);
}

/* logits and every parameter gradient of one forward/backward. */
static float *run(actc_model *m, const int32_t *ids, int B, int T, float ***grads)
{
    actc_ctx *ctx = actc_ctx_new();
    actc_model_zero_grad(m);
    actc_tensor *y = actc_model_forward_tokens(m, ctx, ids, B, T);
    assert_non_null(y);
    assert_int_equal(y->ndim, 2);
    assert_int_equal(y->shape[0], B * T);
    assert_int_equal(y->shape[1], actc_model_get_opts(m)->vocab);
    float *out = tu_dup_floats(y->data, y->numel);
    actc_tensor *loss = tu_wsum(ctx, y, 9);
    actc_tensor_release(y);
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    actc_tensor_release(loss);
    actc_tensor **p;
    int np = actc_model_params(m, &p);
    *grads = calloc((size_t)np, sizeof **grads);
    for (int i = 0; i < np; i++) {
        assert_non_null(p[i]->grad);
        (*grads)[i] = tu_dup_floats(p[i]->grad->data, p[i]->numel);
    }
    actc_model_zero_grad(m);
    actc_ctx_free(ctx);
    return out;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)a[i] * a[i];
    }
    return sqrt(d / (s > 1e-30 ? s : 1e-30));
}

/* The flash and textbook attention forms inside a whole model, at the
 * gpt-mini head width, with T spanning several 64-key blocks. */
static void same_forms(const char *name)
{
    actc_model_opts o = actc_model_default_opts();
    o.n_layers = 2;
    o.width = 64;
    o.n_heads = 2;
    o.context = 160;
    o.seed = 5;
    actc_model *mf = NULL, *mn = NULL;
    assert_int_equal(actc_model_create(name, &o, &mf), ACTC_OK);
    o.attention = ACTC_ATTN_NAIVE;
    assert_int_equal(actc_model_create(name, &o, &mn), ACTC_OK);
    const int B = 2, T = 150;
    int32_t *ids = malloc(sizeof *ids * B * T);
    for (int i = 0; i < B * T; i++) ids[i] = (int32_t)((i * 37 + 11) % 256);
    float **gf, **gn;
    float *yf = run(mf, ids, B, T, &gf), *yn = run(mn, ids, B, T, &gn);
    double worst = rel_diff(yn, yf, (size_t)B * T * 256);
    actc_tensor **p;
    int np = actc_model_params(mf, &p);
    for (int i = 0; i < np; i++) {
        /* The key bias has no gradient (it adds q.b_k to a whole row of
         * scores, which softmax ignores): both forms hold rounding noise. */
        double e = strstr(p[i]->name, "attn.k.bias") ? 0 : rel_diff(gn[i], gf[i], p[i]->numel);
        if (e > 1e-4) printf("  %s: %.2e\n", p[i]->name, e);
        if (e > worst) worst = e;
        free(gf[i]);
        free(gn[i]);
    }
    printf("%s: flash vs naive attention, logits and all gradients: worst rel diff %.2e\n", name, worst);
    assert_true(worst < 1e-4);
    free(gf);
    free(gn);
    free(yf);
    free(yn);
    free(ids);
    actc_model_free(mf);
    actc_model_free(mn);
}

static void test_flash_equals_naive(void **state)
{
    (void)state;
    same_forms("gpt");
    same_forms("llama");
}

static void test_preset_sizes(void **state)
{
    (void)state;
    /* GPT-2 small is 124,439,808 parameters with its 50257-token vocabulary
     * and 1024 positions (tied head); the minis as their shapes give. */
    const struct {
        const char *name;
        size_t params;
        int layers, width, heads, context, vocab;
    } want[] = {{"gpt2-124m", 124439808, 12, 768, 12, 1024, 50257},
                {"gpt-mini", 4870144, 6, 256, 8, 256, 256},
                {"llama-mini", 5246208, 6, 256, 8, 256, 256}};
    for (int i = 0; i < 3; i++) {
        actc_model *m = NULL;
        actc_model_opts o = actc_model_default_opts();
        assert_int_equal(actc_model_create(want[i].name, &o, &m), ACTC_OK);
        const actc_model_opts *r = actc_model_get_opts(m);
        assert_int_equal(actc_model_num_params(m), want[i].params);
        assert_int_equal(r->n_layers, want[i].layers);
        assert_int_equal(r->width, want[i].width);
        assert_int_equal(r->n_heads, want[i].heads);
        assert_int_equal(r->context, want[i].context);
        assert_int_equal(r->vocab, want[i].vocab);
        actc_model_free(m);
    }
}

/* Changing token t changes no logit before t (the model is causal). */
static void test_causal(void **state)
{
    (void)state;
    const char *names[2] = {"gpt", "llama"};
    for (int k = 0; k < 2; k++) {
        lm_case c;
        c.m = tiny(names[k], ACTC_ATTN_FLASH, 4);
        fill_ids(&c, 7);
        actc_ctx *ctx = actc_ctx_new();
        actc_ctx_set_training(ctx, 0);
        actc_tensor *a = actc_model_forward_tokens(c.m, ctx, c.ids, TB, TT);
        c.ids[TT + 3] = (c.ids[TT + 3] + 1) % 7; /* sequence 1, position 3 */
        actc_tensor *b = actc_model_forward_tokens(c.m, ctx, c.ids, TB, TT);
        assert_non_null(a);
        assert_non_null(b);
        for (int r = 0; r < TB * TT; r++) {
            double d = tu_max_abs_diff(a->data + r * 7, b->data + r * 7, 7);
            if (r < TT + 3) assert_true(d == 0.0);
            else if (r < 2 * TT) assert_true(d > 0.0);
        }
        actc_tensor_release(a);
        actc_tensor_release(b);
        actc_ctx_free(ctx);
        actc_model_free(c.m);
    }
}

static void test_bad_input(void **state)
{
    (void)state;
    const size_t m0 = tu_mem_now();
    lm_case c;
    c.m = tiny("gpt", ACTC_ATTN_FLASH, 1);
    fill_ids(&c, 7);
    actc_ctx *ctx = actc_ctx_new();
    int32_t ids[7] = {0, 1, 2, 3, 4, 5, 6};
    tu_expect_invalid(actc_model_forward_tokens(c.m, ctx, ids, 1, 7), "over its context of 6");
    tu_expect_invalid(actc_model_forward_tokens(c.m, ctx, ids, 0, 3), "B >= 1");
    ids[2] = 7;
    tu_expect_invalid(actc_model_forward_tokens(c.m, ctx, ids, 1, 3), "embedding");
    int xs[4] = {1, 1, 28, 28};
    actc_tensor *x = actc_tensor_zeros(ACTC_MEM_ACT, 4, xs);
    tu_expect_invalid(actc_model_forward(c.m, ctx, x), "token ids");
    actc_model *r = NULL;
    actc_model_opts o = actc_model_default_opts();
    assert_int_equal(actc_model_create("resnet20", &o, &r), ACTC_OK);
    tu_expect_invalid(actc_model_forward_tokens(r, ctx, ids, 1, 2), "takes images");
    actc_model_free(r);
    actc_tensor_release(x);
    actc_ctx_reset(ctx);
    actc_ctx_free(ctx);
    actc_model_free(c.m);
    actc_model *m = NULL;
    o.width = 30;
    o.n_heads = 4;
    assert_int_equal(actc_model_create("gpt", &o, &m), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "not a multiple of the 4 heads"));
    o.width = 36;
    o.n_heads = 4;
    assert_int_equal(actc_model_create("llama", &o, &m), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "must be even"));
    assert_null(m);
    assert_int_equal(tu_mem_now(), m0);
}

/* What a forward keeps, to the byte (fp32, `none`), per token (row), for
 * L layers of width D, H heads, T positions, vocabulary V, MLP hidden F:
 *  gpt   ACT  per layer: LN1 input D, its output D (Q/K/V's shared input),
 *             Q, K, V 3D, attention output D (also the projection's input,
 *             held once), LN2 input D, its output D, GELU input 4D, output 4D
 *             = 16D; textbook attention adds its probabilities H*T.  Then the
 *             final LN's input and output 2D (the logits V are the loss's).
 *        EXACT per layer: mean and rstd of both LNs (4), flash's log-sum-exp H;
 *             final LN 2.
 *  llama ACT  per layer: norm input D, output D, rotated Q, K and V 3D,
 *             attention output D, norm input D, output D (w1/w3's input),
 *             SiLU input F, SiLU output and gate F + F (the product's
 *             operands), product F (w2's input) = 8D + 4F; then 2D.
 *        EXACT per layer: rstd of both norms (2) + H; final norm 1. */
static void test_context_bytes(void **state)
{
    (void)state;
    const int B = TB, T = TT, L = 2, D = 8, H = 2, F = 256; /* llama's hidden: 256 * ceil(21/256) */
    const char *names[2] = {"gpt", "llama"};
    for (int k = 0; k < 2; k++)
        for (int naive = 0; naive < 2; naive++) {
            lm_case c;
            c.m = tiny(names[k], naive ? ACTC_ATTN_NAIVE : ACTC_ATTN_FLASH, 2);
            fill_ids(&c, 7);
            actc_ctx *ctx = actc_ctx_new();
            actc_tensor *y = actc_model_forward_tokens(c.m, ctx, c.ids, B, T);
            assert_non_null(y);
            actc_store_stats st;
            actc_store_get_stats(ctx, &st);
            size_t act = k ? (size_t)L * (8 * D + 4 * F) : (size_t)L * 16 * D;
            size_t exact = k ? (size_t)L * (2 + (naive ? 0 : H)) + 1 : (size_t)L * (4 + (naive ? 0 : H)) + 2;
            act += 2 * D + (naive ? (size_t)L * H * T : 0);
            printf("%s, %s attention: ACT %zu B (%zu per token), EXACT %zu B\n", names[k], naive ? "naive" : "flash",
                   st.fp32_by_kind[ACTC_SAVE_ACT], st.fp32_by_kind[ACTC_SAVE_ACT] / (B * T),
                   st.fp32_by_kind[ACTC_SAVE_EXACT]);
            assert_int_equal(st.fp32_by_kind[ACTC_SAVE_ACT], 4 * act * B * T);
            assert_int_equal(st.stored_by_kind[ACTC_SAVE_ACT], 4 * act * B * T);
            assert_int_equal(st.fp32_by_kind[ACTC_SAVE_EXACT], 4 * exact * B * T);
            actc_tensor_release(y);
            actc_ctx_free(ctx);
            actc_model_free(c.m);
        }
}

/* reshape_take keeps the buffer of a tensor it got the only reference to. */
static void test_reshape_take(void **state)
{
    (void)state;
    int s[2] = {3, 4}, t[3] = {3, 2, 2};
    actc_tensor *x = tu_rand(2, s, 1, -1, 1, 0);
    float *before = x->data, first = x->data[5];
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_reshape_take(ctx, x, 3, t);
    assert_non_null(y);
    assert_ptr_equal(y->data, before);
    assert_true(y->data[5] == first);
    actc_tensor *z = actc_reshape_take(ctx, actc_tensor_retain(y), 2, s); /* shared: copies */
    assert_non_null(z);
    assert_ptr_not_equal(z->data, y->data);
    assert_true(z->data[5] == first);
    actc_tensor_release(y);
    actc_tensor_release(z);
    actc_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_gradcheck),    cmocka_unit_test(test_llama_gradcheck),
        cmocka_unit_test(test_flash_equals_naive), cmocka_unit_test(test_preset_sizes),
        cmocka_unit_test(test_causal),           cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_reshape_take),     cmocka_unit_test(test_context_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
