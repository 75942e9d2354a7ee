/* Compression policies: spec parsing, what DIVISION compresses, ActNN's
 * greedy bit allocation against an exhaustive search, the bits L3 gives to
 * samples and layers of a small network whose sensitivities are known, and
 * what each level quantizes. */
#include "testutil.h"
#include "autograd/autograd.h"
#include "policy/policy.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- spec parsing ----------------------------------------------------------- */

static void test_specs(void **state)
{
    (void)state;
    actc_ctx *ctx = actc_ctx_new();
    const char *good[][2] = {{"quant:2", "quant:2"},           {"quant:8", "quant:8"},
                             {"QUANT:3,per-tensor", "quant:3,per-tensor"},
                             {"quant:4,group=64", "quant:4,group=64"},
                             {"actnn:L0", "actnn:L0"},         {"actnn:l1", "actnn:L1"},
                             {"actnn:L2", "actnn:L2"},         {"actnn:L3", "actnn:L3"},
                             {"actnn:2", "actnn:2"},           {"actnn:1.5", "actnn:1.5"},
                             {"actnn:1.25", "actnn:1.25"},     {"actnn:8", "actnn:8"},
                             {"division", "division:b=8,q=2"}, {"DIVISION:q=4,b=16", "division:b=16,q=4"},
                             {"division:lfc-only", "division:b=4,lfc-only"},
                             {"division:b=8,lfc-only", "division:b=8,lfc-only"},
                             {"division:hfc-only", "division:b=8,q=2,hfc-only"},
                             {"division:seq=features", "division:b=8,q=2,seq=features"},
                             {"division:seq=tokens", "division:b=8,q=2"}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        assert_int_equal(actc_ctx_set_policy(ctx, good[i][0]), ACTC_OK);
        assert_string_equal(actc_ctx_policy(ctx), good[i][1]);
    }
    const char *bad[] = {"quant:9", "quant:0", "quant:", "quant:2.5", "quant:2,foo", "quant:2,group=0",
                         "actnn:0.5", "actnn:9",  "actnn:L4", "actnn:", "actnn:2x",  "actnn",
                         "quant",     "gact:x",  "division:b=0", "division:q=9", "division:b=8,x",
                         "division:lfc-only,hfc-only", "division:lfc-only,q=2", "division:seq=rows",
                         "division:",  "division:b=4,b=8", "division:,", "division:q=2,,b=8"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(actc_ctx_set_policy(ctx, bad[i]), ACTC_ERR_INVALID);
        /* The message names the spec and lists what is accepted. */
        assert_non_null(strstr(actc_last_error(), bad[i]));
        assert_non_null(strstr(actc_last_error(), "actnn:L3"));
        assert_non_null(strstr(actc_last_error(), "quant:B"));
    }
    actc_clear_error();
    actc_ctx_free(ctx);
}

/* DIVISION compresses what linear, convolution and normalisation layers
 * save, with the map rank following the tensor's; everything else stays
 * fp32. */
static void test_division_targets(void **state)
{
    (void)state;
    actc_policy *p, *pf;
    assert_int_equal(actc__policy_create("division", &p), ACTC_OK);
    assert_int_equal(actc__policy_create("division:seq=features", &pf), ACTC_OK);
    /* Each operator's save with the role that operator declares for it
     * (the policy decides on the role, not on the name). */
    const struct {
        const char *op;
        int ndim, div, rank, tokens, save_index;
        actc_role role;
        int linear;
    } c[] = {{"conv2d", 4, 1, 2, 0, 0, ACTC_ROLE_CONV_IN, 1},  {"batchnorm2d", 4, 1, 2, 0, 0, ACTC_ROLE_NORM_IN, 0},
             {"linear", 2, 1, 1, 0, 0, ACTC_ROLE_LINEAR_IN, 1}, {"linear", 3, 1, 1, 1, 0, ACTC_ROLE_LINEAR_IN, 1},
             {"layernorm", 3, 1, 1, 1, 0, ACTC_ROLE_NORM_IN, 0}, {"rmsnorm", 3, 1, 1, 1, 0, ACTC_ROLE_NORM_IN, 0},
             {"gelu", 3, 0, 0, 0, 0, ACTC_ROLE_ACT_DERIV, 1},    {"attention_flash", 4, 0, 0, 0, 0, ACTC_ROLE_ATTN_Q, 0},
             {"cross_entropy", 2, 0, 0, 0, 0, ACTC_ROLE_LOSS_IN, 1}, {"matmul", 3, 0, 0, 0, 0, ACTC_ROLE_MATMUL_IN, 1},
             {"conv2d", 5, 1, 3, 0, 0, ACTC_ROLE_CONV_IN, 1},
             /* The textbook attention's Q and P stay fp32; its output O
              * (save 4) is the output projection's input.  The memory-
              * efficient form's O (save 3) stays fp32. */
             {"attention_naive", 3, 0, 0, 0, 0, ACTC_ROLE_ATTN_Q, 1}, {"attention_naive", 4, 0, 0, 0, 3, ACTC_ROLE_ATTN_PROBS, 1},
             {"attention_naive", 3, 1, 1, 1, 4, ACTC_ROLE_ATTN_OUT, 1},
             {"attention_flash", 3, 0, 0, 0, 3, ACTC_ROLE_ATTN_OUT, 0}};
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        int shape[5] = {2, 3, 4, 5, 6};
        actc_tensor *t = actc_tensor_new(ACTC_MEM_ACT, c[i].ndim, shape);
        actc_save_desc d;
        memset(&d, 0, sizeof d);
        const actc_save_role role = {.role = c[i].role, .linear = c[i].linear};
        d.op = c[i].op;
        d.save_index = c[i].save_index;
        d.kind = ACTC_SAVE_ACT;
        d.role = &role;
        d.t = t;
        for (int k = 0; k < 2; k++) {
            actc_policy *pol = k ? pf : p;
            const actc_codec *codec = NULL;
            actc_codec_args a;
            memset(&a, 0, sizeof a);
            assert_int_equal(pol->choose(pol, &d, &codec, &a), ACTC_OK);
            assert_ptr_equal(codec, c[i].div ? &actc_codec_division : &actc_codec_fp32);
            if (!c[i].div) continue;
            assert_int_equal(a.bits, 2);
            assert_int_equal(a.iparam[0], 8);
            assert_int_equal(a.iparam[1], ACTC_DIV_FULL);
            assert_int_equal(a.iparam[2], c[i].rank);
            assert_int_equal(a.iparam[3], k ? 0 : c[i].tokens);
        }
        actc_tensor_release(t);
    }
    actc__policy_free(p);
    actc__policy_free(pf);
    /* The ablations reach the codec as its mode (lfc-only pooling at B = 4). */
    const struct {
        const char *spec;
        int block, mode;
    } abl[] = {{"division:lfc-only", 4, ACTC_DIV_LFC_ONLY}, {"division:hfc-only", 8, ACTC_DIV_HFC_ONLY},
               {"division:b=16,q=3", 16, ACTC_DIV_FULL}};
    for (size_t i = 0; i < sizeof abl / sizeof *abl; i++) {
        int shape[4] = {2, 3, 4, 5};
        actc_tensor *t = actc_tensor_new(ACTC_MEM_ACT, 4, shape);
        actc_save_desc d;
        memset(&d, 0, sizeof d);
        const actc_save_role role = {.role = ACTC_ROLE_CONV_IN, .linear = 1, .kernel_h = 3, .kernel_w = 3};
        d.op = "conv2d";
        d.kind = ACTC_SAVE_ACT;
        d.role = &role;
        d.t = t;
        assert_int_equal(actc__policy_create(abl[i].spec, &p), ACTC_OK);
        const actc_codec *codec = NULL;
        actc_codec_args a;
        memset(&a, 0, sizeof a);
        assert_int_equal(p->choose(p, &d, &codec, &a), ACTC_OK);
        assert_ptr_equal(codec, &actc_codec_division);
        assert_int_equal(a.iparam[0], abl[i].block);
        assert_int_equal(a.iparam[1], abl[i].mode);
        if (abl[i].mode == ACTC_DIV_FULL) assert_int_equal(a.bits, 3);
        actc__policy_free(p);
        actc_tensor_release(t);
    }
}

/* ---- roles: a user's operator is compressed as the built-in one ------------------ */

static actc_status no_backward(actc_ctx *ctx, actc_node *node)
{
    (void)ctx;
    (void)node;
    return ACTC_OK;
}

/* Bytes the store holds after a user operator saves x with role (NULL:
 * plain actc_save); the tape is dropped afterwards. */
static size_t user_save(actc_ctx *ctx, actc_tensor *x, const actc_save_role *role)
{
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    actc_node *node = NULL;
    assert_int_equal(actc_node_new(ctx, "my_op", no_backward, y, 1, &x, &node), ACTC_OK);
    assert_non_null(node);
    assert_int_equal(role ? actc_save_as(ctx, node, x, ACTC_SAVE_ACT, role) : actc_save(ctx, node, x, ACTC_SAVE_ACT),
                     ACTC_OK);
    return tu_stored_after(ctx, y);
}

/* Under policies that decide by role (DIVISION: layer inputs; actnn:L1:
 * convolution inputs), a user-defined operator that declares the role of
 * the built-in one is stored in the same number of bytes as the built-in
 * operator's save; one that declares nothing is left in fp32. */
static void test_user_op_roles(void **state)
{
    (void)state;
    actc_ctx *ctx = actc_ctx_new();
    int xs[2] = {16, 96}, ws[2] = {32, 96}, is[4] = {4, 8, 12, 12}, ks[4] = {8, 8, 3, 3};
    actc_tensor *x = tu_rand(2, xs, 1, -1, 1, 1), *w = actc_param_new(2, ws, "w");
    actc_tensor *img = tu_rand(4, is, 3, -1, 1, 1), *k = actc_param_new(4, ks, "k");
    tu_fill_uniform(w, 2, -1, 1);
    tu_fill_uniform(k, 4, -1, 1);
    const size_t fp32_x = x->numel * sizeof(float), fp32_img = img->numel * sizeof(float);

    assert_int_equal(actc_ctx_set_policy(ctx, "division"), ACTC_OK);
    const size_t builtin = tu_stored_after(ctx, actc_linear(ctx, x, w, NULL));
    actc_save_role lin = {.role = ACTC_ROLE_LINEAR_IN, .linear = 1, .fan_in = 96};
    assert_true(builtin < fp32_x / 4);
    assert_int_equal(user_save(ctx, x, &lin), builtin);
    assert_int_equal(user_save(ctx, x, NULL), fp32_x);
    const actc_save_role deriv = {.role = ACTC_ROLE_ACT_DERIV, .linear = 1};
    assert_int_equal(user_save(ctx, x, &deriv), fp32_x); /* DIVISION keeps element-wise saves exact */

    assert_int_equal(actc_ctx_set_policy(ctx, "actnn:L1"), ACTC_OK);
    const size_t conv = tu_stored_after(ctx, actc_conv2d(ctx, img, k, NULL, 1, 1));
    const actc_save_role cin = {.role = ACTC_ROLE_CONV_IN, .linear = 1, .fan_in = 72, .kernel_h = 3, .kernel_w = 3};
    assert_true(conv < fp32_img / 6);
    assert_int_equal(user_save(ctx, img, &cin), conv);
    assert_int_equal(user_save(ctx, img, &lin), fp32_img); /* L1: convolution inputs only */

    assert_int_equal(actc_ctx_set_policy(ctx, "actnn:L2"), ACTC_OK);
    const actc_save_role loss = {.role = ACTC_ROLE_LOSS_IN, .linear = 1};
    assert_int_equal(user_save(ctx, x, &loss), fp32_x); /* what a loss keeps stays exact */
    assert_true(user_save(ctx, x, NULL) < fp32_x / 6);
    /* An undefined role is refused. */
    const actc_save_role bogus = {.role = (actc_role)99, .linear = 1};
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 2, xs);
    actc_node *node = NULL;
    assert_int_equal(actc_node_new(ctx, "my_op", no_backward, y, 1, &x, &node), ACTC_OK);
    assert_int_equal(actc_save_as(ctx, node, x, ACTC_SAVE_ACT, &bogus), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "unknown save role 99"));
    actc_ctx_reset(ctx);
    actc_tensor_release(y);
    actc_tensor_release(x);
    actc_tensor_release(w);
    actc_tensor_release(img);
    actc_tensor_release(k);
    actc_ctx_free(ctx);
}

/* ---- greedy allocation --------------------------------------------------------- */

static double objective(int n, const double *w, const uint8_t *b)
{
    double v = 0;
    for (int i = 0; i < n; i++) {
        double L = (double)((1 << b[i]) - 1);
        v += w[i] / (L * L);
    }
    return v;
}

/* Best objective over all bit vectors in [1,8]^n within the budget. */
static double exhaustive(int n, const double *w, const double *c, double budget)
{
    double best = INFINITY;
    uint8_t b[4];
    for (int code = 0; code < (1 << (3 * n)); code++) {
        double cost = 0;
        for (int i = 0; i < n; i++) {
            b[i] = (uint8_t)(1 + ((code >> (3 * i)) & 7));
            cost += c[i] * b[i];
        }
        if (cost <= budget + 1e-9) {
            double v = objective(n, w, b);
            if (v < best) best = v;
        }
    }
    return best;
}

static void test_greedy_matches_exhaustive(void **state)
{
    (void)state;
    const double ones[4] = {1, 1, 1, 1};
    for (int trial = 0; trial < 40; trial++) {
        double w[4];
        for (int i = 0; i < 4; i++) w[i] = pow(10.0, 4.0 * actc_rand_uniform(7, (uint64_t)(trial * 4 + i)));
        double budget = 4 + trial % 25; /* 4 (all 1 bit) .. 28 bits */
        uint8_t b[4];
        assert_int_equal(actc__alloc_bits_greedy(4, w, ones, 1, 8, budget, b), ACTC_OK);
        double used = 0;
        for (int i = 0; i < 4; i++) {
            assert_in_range(b[i], 1, 8);
            used += b[i];
        }
        assert_true(used <= budget);
        /* With equal costs the objective is separable and convex in each
         * item's bits, so greedy is optimal. */
        double best = exhaustive(4, w, ones, budget);
        assert_true(fabs(objective(4, w, b) - best) <= 1e-12 * best);
    }
    /* Unequal costs (per-layer allocation: a bit costs D^(l)): the budget
     * always holds, and greedy stays close to the optimum. */
    for (int trial = 0; trial < 40; trial++) {
        double w[4], c[4], total = 0;
        for (int i = 0; i < 4; i++) {
            w[i] = pow(10.0, 4.0 * actc_rand_uniform(8, (uint64_t)(trial * 4 + i)));
            c[i] = 1 + 15 * actc_rand_uniform(9, (uint64_t)(trial * 4 + i));
            total += c[i];
        }
        double budget = total * (1.5 + 3 * actc_rand_uniform(10, (uint64_t)trial));
        uint8_t b[4];
        assert_int_equal(actc__alloc_bits_greedy(4, w, c, 1, 8, budget, b), ACTC_OK);
        double used = 0;
        for (int i = 0; i < 4; i++) used += c[i] * b[i];
        assert_true(used <= budget);
        assert_true(objective(4, w, b) <= 4 * exhaustive(4, w, c, budget));
    }
    /* A budget below all-lo leaves everything at lo; a generous one at hi. */
    double w[3] = {1, 2, 3};
    uint8_t b[3];
    assert_int_equal(actc__alloc_bits_greedy(3, w, NULL, 1, 8, 1.0, b), ACTC_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(b[i], 1);
    assert_int_equal(actc__alloc_bits_greedy(3, w, NULL, 1, 8, 100.0, b), ACTC_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(b[i], 8);
}

/* ---- L3 on a network with known sensitivities --------------------------------- */

enum { NS = 8, DIM = 512 };

/* h = x W1^T, y = h W2^T, loss = sum(y * R) (tu_wsum, R uniform in
 * [-0.5, 0.5) from seed 99), with W1 = I and W2 = scale2 * I: x and h have the
 * same values (same ranges), but the gradient reaching h's consumer's output
 * (dL/dy = R) is scale2 times smaller than the one reaching x's consumer's
 * output (dL/dh = scale2 R).  Sample 0 of x spans a 100x larger range. */
static void two_layer_step(actc_ctx *ctx, float scale2)
{
    int ws[2] = {DIM, DIM}, xs[2] = {NS, DIM};
    actc_tensor *w1 = actc_param_new(2, ws, "w1"), *w2 = actc_param_new(2, ws, "w2");
    memset(w1->data, 0, w1->numel * sizeof(float));
    memset(w2->data, 0, w2->numel * sizeof(float));
    for (int i = 0; i < DIM; i++) {
        w1->data[i * DIM + i] = 1.0f;
        w2->data[i * DIM + i] = scale2;
    }
    actc_tensor *x = tu_rand(2, xs, 5, -1, 1, 0);
    for (int i = 0; i < DIM; i++) x->data[i] *= 100.0f;
    actc_tensor *h = actc_linear(ctx, x, w1, NULL);
    actc_tensor *y = actc_linear(ctx, h, w2, NULL);
    actc_tensor *loss = tu_wsum(ctx, y, 99);
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    actc_tensor_release(loss);
    actc_tensor_release(y);
    actc_tensor_release(h);
    actc_tensor_release(x);
    actc_tensor_release(w1);
    actc_tensor_release(w2);
}

static void test_mixed_precision_bits(void **state)
{
    (void)state;
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, "actnn:2"), ACTC_OK);
    uint64_t keys[4];
    double bits[4], g[4];
    assert_int_equal(actc__actnn_layers(ctx->policy, keys, bits, g, 4), 0);

    two_layer_step(ctx, 100.0f);
    assert_int_equal(actc__actnn_layers(ctx->policy, keys, bits, g, 4), 2);
    /* Layer 0 is x (saved by the first linear), layer 1 is h.  Their
     * gradient magnitudes are what the engine measured on the outputs. */
    print_message("layer bits %.3f %.3f, grad^2 %.4g %.4g\n", bits[0], bits[1], g[0], g[1]);
    assert_true(g[0] > 0 && g[1] > 0);
    assert_true(fabs(g[0] / g[1] - 1e4) < 1e4 * 1e-3);
    /* Per-layer allocation: the layer whose gradient is 100x larger gets
     * more bits, and the two (equal sized) layers share the 2-bit budget. */
    assert_true(bits[0] > 2.0 && bits[1] < 2.0);
    assert_true(bits[0] + bits[1] <= 4.0 + 1e-9);

    /* Per-sample allocation (made during the forward of this step from the
     * budgets above): sample 0, with the widest range, gets the most bits;
     * the samples' total stays within N * b^(l). */
    two_layer_step(ctx, 100.0f);
    int n;
    const uint8_t *sb = actc__actnn_sample_bits(ctx->policy, keys[0], &n);
    assert_non_null(sb);
    assert_int_equal(n, NS);
    int sum = 0;
    for (int i = 0; i < NS; i++) {
        sum += sb[i];
        if (i) assert_true(sb[0] > sb[i]);
    }
    assert_true(sum <= bits[0] * NS + 1e-9);
    actc_ctx_free(ctx);
}

/* A tensor two operators saved is stored once; its gradient magnitude is
 * the sum of what reaches both savers' outputs (here both get R). */
static void test_shared_save_sums_gradients(void **state)
{
    (void)state;
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, "actnn:2"), ACTC_OK);
    int ws[2] = {DIM, DIM}, xs[2] = {NS, DIM};
    actc_tensor *w1 = actc_param_new(2, ws, "w1"), *w2 = actc_param_new(2, ws, "w2");
    tu_fill_uniform(w1, 1, -0.1f, 0.1f);
    tu_fill_uniform(w2, 2, -0.1f, 0.1f);
    actc_tensor *x = tu_rand(2, xs, 5, -1, 1, 0);
    actc_tensor *h1 = actc_linear(ctx, x, w1, NULL), *h2 = actc_linear(ctx, x, w2, NULL);
    actc_tensor *y = actc_add(ctx, h1, h2);
    actc_tensor *loss = tu_wsum(ctx, y, 99);
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    uint64_t keys[4];
    double bits[4], g[4];
    assert_int_equal(actc__actnn_layers(ctx->policy, keys, bits, g, 4), 1);
    double r2 = 0;
    for (size_t i = 0; i < (size_t)NS * DIM; i++) {
        double r = actc_rand_uniform(99, i) - 0.5f;
        r2 += r * r;
    }
    print_message("shared save: grad^2 %.6g, expected 2 x %.6g\n", g[0], r2 / NS);
    assert_true(fabs(g[0] - 2 * r2 / NS) < 1e-4 * r2);
    actc_tensor *ts[] = {loss, y, h1, h2, x, w1, w2};
    for (int i = 0; i < 7; i++) actc_tensor_release(ts[i]);
    actc_ctx_free(ctx);
}

/* An empty batch saves nothing to quantize: no division by its zero
 * samples, nothing stored, and the policy learns no layer from it. */
static void test_empty_batch(void **state)
{
    (void)state;
    const char *specs[] = {"actnn:2", "quant:2", "quant:2,per-tensor", "division"};
    for (int p = 0; p < 4; p++) {
        actc_ctx *ctx = actc_ctx_new();
        assert_int_equal(actc_ctx_set_policy(ctx, specs[p]), ACTC_OK);
        int ws[2] = {4, 6}, xs[2] = {0, 6};
        actc_tensor *w = actc_param_new(2, ws, "w"), *x = actc_tensor_new(ACTC_MEM_ACT, 2, xs);
        actc_tensor *y = actc_linear(ctx, x, w, NULL);
        assert_non_null(y);
        assert_int_equal(y->numel, 0);
        actc_store_stats st;
        actc_store_get_stats(ctx, &st);
        assert_int_equal(st.stored_bytes, 0);
        uint64_t keys[2];
        double bits[2], g[2];
        if (p == 0) assert_int_equal(actc__actnn_layers(ctx->policy, keys, bits, g, 2), 0);
        actc_tensor_release(y);
        actc_tensor_release(x);
        actc_tensor_release(w);
        actc_ctx_free(ctx);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_specs),
        cmocka_unit_test(test_division_targets),
        cmocka_unit_test(test_user_op_roles),
        cmocka_unit_test(test_greedy_matches_exhaustive),
        cmocka_unit_test(test_mixed_precision_bits),
        cmocka_unit_test(test_shared_save_sums_gradients),
        cmocka_unit_test(test_empty_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
