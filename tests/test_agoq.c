/* AGoQ (issue 19): the agoq policy's specs, the transformers' recomputed
 * regions (identical gradients when the inputs are kept exactly, per
 * component), what the policy keeps of a llama block, and gradients held in
 * 8 bits between micro-batches. */
#include "testutil.h"
#include "codec/codec.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 16 };

typedef struct {
    int32_t ids[B * T], labels[B * T];
    actc_batch b;
} toy_batch;

static void toy_batch_init(toy_batch *tb, int salt)
{
    for (int i = 0; i < B * T; i++) tb->ids[i] = (i * 37 + salt) % 256, tb->labels[i] = (i * 11 + 3 + salt) % 256;
    memset(&tb->b, 0, sizeof tb->b);
    tb->b.ids = tb->ids;
    tb->b.labels = tb->labels;
    tb->b.B = B;
    tb->b.T = T;
}

static actc_model *toy_model(const char *name)
{
    actc_model_opts mo = actc_model_default_opts();
    mo.n_layers = 2;
    mo.width = 32;
    mo.n_heads = 2;
    mo.context = T;
    mo.vocab = 256;
    actc_model *m = NULL;
    assert_int_equal(actc_model_create(name, &mo, &m), ACTC_OK);
    return m;
}

static actc_trainer *toy_trainer(actc_model *m, const char *policy, int accum, int grad_bits)
{
    actc_trainer_opts to = actc_trainer_default_opts();
    to.policy = policy;
    to.optim = "adamw";
    to.lr = 3e-3f;
    to.accum = accum;
    to.grad_bits = grad_bits;
    actc_trainer *t = NULL;
    if (actc_trainer_new(m, &to, &t) != ACTC_OK) fail_msg("%s: %s", policy, actc_last_error());
    return t;
}

/* ---- specs ------------------------------------------------------------------------- */

static void test_specs(void **state)
{
    (void)state;
    static const char *const ok[][2] = {
        {"agoq", "agoq:block=128,fmt=fp4-bnb"},
        {"agoq:fmt=nf4", "agoq:block=128,fmt=nf4"},
        {"agoq:block=64,fmt=fp4-e2m1", "agoq:block=64,fmt=fp4-e2m1"},
        {"agoq:round=stochastic,block=256", "agoq:block=256,fmt=fp4-bnb,round=stochastic"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        actc_ctx *ctx = tu_expect_policy(ok[i][0], ok[i][1]);
        assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_NORM), ACTC_PLAN_RECOMPUTE);
        assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_ACT), ACTC_PLAN_RECOMPUTE);
        assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_BLOCK), ACTC_PLAN_ANY);
        actc_ctx_free(ctx);
    }
    tu_expect_bad_policy("agoq:fmt=fp4", "fp4-bnb (bitsandbytes' FP4), fp4-e2m1 (OCP MX) or nf4");
    tu_expect_bad_policy("agoq:block=100", "power of two from 32 to 4096");
    tu_expect_bad_policy("agoq:block=16", "power of two from 32 to 4096");
    tu_expect_bad_policy("agoq:bits=4", "agoq's options are");
    tu_expect_bad_policy("agoq:", "no options");
    tu_expect_bad_policy("agoq:fmt=nf4,", "empty option");
    /* The formats alone, as policies: no recompute plans. */
    static const char *const formats[][2] = {
        {"NF4", "nf4,block=64"},
        {"fp4,block=128", "fp4-bnb,block=128"},
        {"e2m1,round=stochastic", "fp4-e2m1,block=64,round=stochastic"},
    };
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        actc_ctx *ctx = tu_expect_policy(formats[i][0], formats[i][1]);
        assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_NORM), ACTC_PLAN_ANY);
        actc_ctx_free(ctx);
    }
    tu_expect_bad_policy("nf4,block=100", "power of two from 32 to 4096");
    tu_expect_bad_policy("nf4x", "unknown codec");
}

/* ---- recompute regions: the saved path's gradients, to the bit --------------------- */

/* Every parameter's gradient after one backward of model `name` under
 * policy none, with the NORM and ACT regions planned as given. */
static float *grads(const char *name, int norm_plan, int act_plan, size_t *stored)
{
    actc_model *m = toy_model(name);
    actc_trainer *t = toy_trainer(m, "none", 1, 32);
    actc_ctx *ctx = actc_trainer_ctx(t);
    assert_int_equal(actc_ctx_set_region_plan(ctx, ACTC_REGION_NORM, norm_plan), ACTC_OK);
    assert_int_equal(actc_ctx_set_region_plan(ctx, ACTC_REGION_ACT, act_plan), ACTC_OK);
    toy_batch tb;
    toy_batch_init(&tb, 0);
    assert_int_equal(actc_trainer_backward(t, &tb.b, NULL), ACTC_OK);
    actc_store_stats ss;
    actc_store_get_stats(ctx, &ss);
    *stored = ss.forward_bytes;
    actc_tensor **ps;
    const int np = actc_model_params(m, &ps);
    size_t total = 0;
    for (int i = 0; i < np; i++) total += ps[i]->numel;
    float *g = malloc(total * sizeof *g), *at = g;
    for (int i = 0; i < np; i++, at += ps[i - 1]->numel) assert_int_equal(actc_grad_to_dense(ps[i], at), ACTC_OK);
    actc_trainer_free(t);
    actc_model_free(m);
    return g;
}

static void check_identical(const char *name)
{
    actc_model *m = toy_model(name);
    const size_t n = actc_model_num_params(m);
    actc_model_free(m);
    size_t s_saved, s_norm, s_act, s_both;
    float *saved = grads(name, ACTC_PLAN_SAVE, ACTC_PLAN_SAVE, &s_saved);
    float *norm = grads(name, ACTC_PLAN_RECOMPUTE, ACTC_PLAN_SAVE, &s_norm);
    float *act = grads(name, ACTC_PLAN_SAVE, ACTC_PLAN_RECOMPUTE, &s_act);
    float *both = grads(name, ACTC_PLAN_RECOMPUTE, ACTC_PLAN_RECOMPUTE, &s_both);
    /* per component, and together: the same gradients to the bit */
    assert_memory_equal(saved, norm, n * sizeof *saved);
    assert_memory_equal(saved, act, n * sizeof *saved);
    assert_memory_equal(saved, both, n * sizeof *saved);
    /* and each recompute keeps less */
    print_message("  %s: context %zu bytes saved, %zu norms recomputed, %zu activations, %zu both\n", name, s_saved,
                  s_norm, s_act, s_both);
    assert_true(s_norm < s_saved && s_act < s_saved && s_both < s_norm && s_both < s_act);
    free(saved);
    free(norm);
    free(act);
    free(both);
}

static void test_recompute_identical_llama(void **state)
{
    (void)state;
    check_identical("llama");
}

static void test_recompute_identical_gpt(void **state)
{
    (void)state;
    check_identical("gpt");
}

/* ---- what agoq keeps ------------------------------------------------------------------ */

static void test_llama_saves(void **state)
{
    (void)state;
    size_t total[2] = {0, 0};
    const char *const policies[2] = {"none", "agoq"};
    for (int k = 0; k < 2; k++) {
        actc_model *m = toy_model("llama");
        actc_trainer *t = toy_trainer(m, policies[k], 1, 32);
        actc_ctx *ctx = actc_trainer_ctx(t);
        toy_batch tb;
        toy_batch_init(&tb, 0);
        actc_ctx_set_training(ctx, 1);
        actc_tensor *y = actc_model_forward_batch(m, ctx, &tb.b);
        assert_non_null(y);
        const int n = actc_store_list(ctx, NULL, 0);
        actc_store_item *it = calloc((size_t)n, sizeof *it);
        assert_int_equal(actc_store_list(ctx, it, n), n);
        int refs = 0;
        for (int i = 0; i < n; i++) {
            total[k] += it[i].stored_bytes;
            if (k == 0 || it[i].kind != ACTC_SAVE_ACT) continue;
            const actc_role r = it[i].role;
            if (!strcmp(it[i].codec, "recompute")) {
                /* the norms' and activations' outputs: the Q/K/V, FFN1, gate,
                 * FFN2 and head inputs */
                assert_int_equal(it[i].stored_bytes, 0);
                assert_int_equal(r, ACTC_ROLE_LINEAR_IN);
                refs++;
            } else if (actc_role_is_attention(r)) {
                assert_string_equal(it[i].codec, "fp32");
            } else {
                /* the norms' and activations' inputs, at 4 bits */
                if (strcmp(it[i].codec, "block4")) fail_msg("%s %s (%s) stored as %s", it[i].scope, it[i].op,
                                                            actc_role_name(r), it[i].codec);
                assert_true(r == ACTC_ROLE_NORM_IN || r == ACTC_ROLE_ACT_IN);
            }
        }
        /* per layer: the attention norm's output (read by Q, K, V), the MLP
         * norm's (FFN1 and gate) and the activation's (FFN2); the head's */
        if (k == 1) assert_int_equal(refs, 2 * 3 + 1);
        actc_store_stats ss;
        actc_store_get_stats(ctx, &ss);
        assert_int_equal(ss.stored_bytes, total[k]);
        free(it);
        actc_tensor_release(y);
        actc_ctx_reset(ctx);
        actc_trainer_free(t);
        actc_model_free(m);
    }
    print_message("  llama (2 layers, width 32): context %zu bytes with none, %zu with agoq (%.2fx)\n", total[0],
                  total[1], (double)total[0] / (double)total[1]);
    assert_true(total[0] >= 3 * total[1]);
}

/* ---- gradients in 8 bits between micro-batches --------------------------------------- */

/* Losses of `steps` steps at batch B in two micro-batches; *grad_bytes: the
 * gradients' bytes before the last update. */
static void run_steps(int grad_bits, int steps, float *loss, size_t *grad_bytes)
{
    actc_model *m = toy_model("llama");
    actc_trainer *t = toy_trainer(m, "agoq", 2, grad_bits);
    for (int s = 0; s < steps; s++) {
        toy_batch tb;
        toy_batch_init(&tb, s % 3);
        actc_step_result r;
        if (s == steps - 1) {
            assert_int_equal(actc_trainer_backward(t, &tb.b, &r), ACTC_OK);
            actc_tensor **ps;
            const int np = actc_model_params(m, &ps);
            *grad_bytes = 0;
            for (int i = 0; i < np; i++) {
                actc_grad_info gi;
                actc_grad_get_info(ps[i], &gi);
                assert_int_equal(gi.form, grad_bits == 8 ? ACTC_GRAD_QUANT : ACTC_GRAD_DENSE);
                if (grad_bits == 8) {
                    assert_string_equal(gi.codec, "dyn8");
                    assert_int_equal(gi.bytes, actc_dyn8_bytes(ps[i]->numel, 0));
                }
                *grad_bytes += gi.bytes;
            }
        } else {
            assert_int_equal(actc_trainer_step(t, &tb.b, &r), ACTC_OK);
        }
        loss[s] = r.loss;
    }
    actc_trainer_free(t);
    actc_model_free(m);
}

static void test_grad_bits(void **state)
{
    (void)state;
    enum { STEPS = 12 };
    float l32[STEPS], l8[STEPS];
    size_t b32, b8;
    run_steps(32, STEPS, l32, &b32);
    run_steps(8, STEPS, l8, &b8);
    print_message("  gradients %zu bytes in fp32, %zu in 8 bits; loss after %d steps %.4f vs %.4f\n", b32, b8, STEPS,
                  (double)l32[STEPS - 1], (double)l8[STEPS - 1]);
    /* 1 byte an element and 4 bytes per block of 256, against 4 */
    assert_true(b8 * 3 < b32 && b8 * 4 > b32);
    /* the same step the first time (same forward), then close: 8-bit
     * block-wise gradients change AdamW's steps by little */
    assert_true(l8[0] == l32[0]);
    for (int s = 0; s < STEPS; s++) assert_true(fabsf(l8[s] - l32[s]) < 0.02f * l32[s]);
    assert_true(l8[STEPS - 1] < l8[0]);
    /* bad input */
    actc_model *m = toy_model("llama");
    actc_trainer_opts to = actc_trainer_default_opts();
    to.grad_bits = 16;
    actc_trainer *t = NULL;
    assert_int_equal(actc_trainer_new(m, &to, &t), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "grad_bits 16"));
    actc_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_specs),
        cmocka_unit_test(test_recompute_identical_llama),
        cmocka_unit_test(test_recompute_identical_gpt),
        cmocka_unit_test(test_llama_saves),
        cmocka_unit_test(test_grad_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
