/* Operators: finite-difference gradient checks (fp32, `none` policy) for each
 * operator, forward values against simple references, and bad input. */
#include "testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAD_TOL 1e-3

/* Run a gradient check and report its worst error by name. */
static void check_grad(const char *what, tu_forward_fn f, actc_tensor **in, int n, void *user, float eps)
{
    double err = tu_gradcheck(f, in, n, user, eps);
    print_message("gradcheck %-28s worst rel err %.3g\n", what, err);
    assert_true(err < GRAD_TOL);
}

/* ---- relu ---------------------------------------------------------------- */

static actc_tensor *f_relu(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)user;
    return actc_relu(ctx, in[0]);
}

static void test_relu(void **state)
{
    (void)state;
    int shape[4] = {2, 3, 4, 5};
    actc_tensor *x = tu_rand(4, shape, 1, -1, 1, 1);
    tu_fill_distinct(x, 11, -1.0f, 1.0f, 0.05f);
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_relu(ctx, x);
    assert_non_null(y);
    for (size_t i = 0; i < x->numel; i++) assert_true(y->data[i] == fmaxf(x->data[i], 0.0f));
    actc_tensor_release(y);
    actc_ctx_reset(ctx);
    check_grad("relu", f_relu, &x, 1, NULL, 1e-3f);
    tu_expect_invalid(actc_relu(ctx, NULL), "relu");
    actc_ctx_free(ctx);
    actc_tensor_release(x);
}

/* ---- batchnorm ----------------------------------------------------------- */

typedef struct {
    actc_tensor *rm, *rv;
} bn_user;

static actc_tensor *f_bn(actc_ctx *ctx, actc_tensor **in, void *user)
{
    bn_user *u = user;
    return actc_batchnorm2d(ctx, in[0], in[1], in[2], u->rm, u->rv, 0.1f, 1e-5f);
}

/* Batchnorm without gamma/beta (tu_gradcheck takes no NULL inputs). */
static actc_tensor *f_bn_plain(actc_ctx *ctx, actc_tensor **in, void *user)
{
    bn_user *u = user;
    return actc_batchnorm2d(ctx, in[0], NULL, NULL, u->rm, u->rv, 0.1f, 1e-5f);
}

static void test_batchnorm_grad(void **state)
{
    (void)state;
    int xs[4] = {4, 3, 5, 5}, cs[1] = {3};
    actc_tensor *x = tu_rand(4, xs, 2, -1, 1, 1);
    /* A channel with an offset mean and a larger spread. */
    for (int n = 0; n < 4; n++)
        for (int i = 0; i < 25; i++) x->data[(n * 3 + 1) * 25 + i] = 2.0f + 3.0f * x->data[(n * 3 + 1) * 25 + i];
    actc_tensor *g = actc_param_new(1, cs, "gamma"), *b = actc_param_new(1, cs, "beta");
    tu_fill_uniform(g, 3, 0.5f, 1.5f);
    tu_fill_uniform(b, 4, -0.5f, 0.5f);
    bn_user u = {actc_tensor_zeros(ACTC_MEM_PARAM, 1, cs), actc_tensor_zeros(ACTC_MEM_PARAM, 1, cs)};
    actc_tensor *in[3] = {x, g, b};
    check_grad("batchnorm2d (x, gamma, beta)", f_bn, in, 3, &u, 1e-2f);

    /* gamma as a plain (non-parameter) tensor: saved as EXACT, still exact grads for x. */
    actc_tensor *gplain = actc_tensor_copy(ACTC_MEM_ACT, g);
    gplain->requires_grad = 1;
    actc_tensor *in2[3] = {x, gplain, b};
    check_grad("batchnorm2d (plain gamma)", f_bn, in2, 3, &u, 1e-2f);
    /* No affine transform. */
    check_grad("batchnorm2d (no affine)", f_bn_plain, &x, 1, &u, 1e-2f);

    actc_tensor_release(gplain);
    actc_tensor_release(u.rm);
    actc_tensor_release(u.rv);
    actc_tensor_release(x);
    actc_tensor_release(g);
    actc_tensor_release(b);
}

static void test_batchnorm_forward(void **state)
{
    (void)state;
    const int N = 4, C = 3, HW = 6;
    int xs[4] = {N, C, 2, 3}, cs[1] = {C};
    actc_tensor *x = tu_rand(4, xs, 5, -2, 3, 0);
    actc_tensor *g = actc_param_new(1, cs, "gamma"), *b = actc_param_new(1, cs, "beta");
    tu_fill_uniform(g, 6, 0.5f, 1.5f);
    tu_fill_uniform(b, 7, -0.5f, 0.5f);
    actc_tensor *rm = actc_tensor_zeros(ACTC_MEM_PARAM, 1, cs), *rv = actc_tensor_zeros(ACTC_MEM_PARAM, 1, cs);
    for (int c = 0; c < C; c++) {
        rm->data[c] = 0.1f * (float)c;
        rv->data[c] = 1.0f + 0.5f * (float)c;
    }
    const float mom = 0.1f, eps = 1e-5f;
    double mean[3], var[3];
    for (int c = 0; c < C; c++) {
        double s = 0, ss = 0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) s += x->data[(n * C + c) * HW + i];
        mean[c] = s / (N * HW);
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                double d = x->data[(n * C + c) * HW + i] - mean[c];
                ss += d * d;
            }
        var[c] = ss / (N * HW);
    }

    actc_ctx *ctx = actc_ctx_new();
    /* Training: batch statistics normalise, running stats move. */
    double rm0[3], rv0[3];
    for (int c = 0; c < C; c++) rm0[c] = rm->data[c], rv0[c] = rv->data[c];
    actc_tensor *y = actc_batchnorm2d(ctx, x, g, b, rm, rv, mom, eps);
    assert_non_null(y);
    assert_int_equal(actc_tape_size(ctx), 1); /* gamma/beta need gradients */
    for (int c = 0; c < C; c++) {
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                int k = (n * C + c) * HW + i;
                double ref = (x->data[k] - mean[c]) / sqrt(var[c] + eps) * g->data[c] + b->data[c];
                assert_true(fabs(y->data[k] - ref) < 1e-5);
            }
        double erm = (1 - mom) * rm0[c] + mom * mean[c];
        double erv = (1 - mom) * rv0[c] + mom * var[c] * (N * HW) / (N * HW - 1.0);
        assert_true(fabs(rm->data[c] - erm) < 1e-6);
        assert_true(fabs(rv->data[c] - erv) < 1e-5);
    }
    actc_tensor_release(y);
    actc_ctx_reset(ctx);

    /* Eval: running statistics, nothing recorded, running stats unchanged. */
    actc_ctx_set_training(ctx, 0);
    float rmv[3], rvv[3];
    actc_store_stats st0, st;
    actc_store_get_stats(ctx, &st0);
    memcpy(rmv, rm->data, sizeof rmv);
    memcpy(rvv, rv->data, sizeof rvv);
    y = actc_batchnorm2d(ctx, x, g, b, rm, rv, mom, eps);
    assert_non_null(y);
    assert_int_equal(actc_tape_size(ctx), 0);
    assert_int_equal(y->requires_grad, 0);
    actc_store_get_stats(ctx, &st);
    assert_int_equal(st.n_saves, st0.n_saves);
    assert_memory_equal(rm->data, rmv, sizeof rmv);
    assert_memory_equal(rv->data, rvv, sizeof rvv);
    for (int c = 0; c < C; c++)
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                int k = (n * C + c) * HW + i;
                double ref = (x->data[k] - rmv[c]) / sqrt(rvv[c] + eps) * g->data[c] + b->data[c];
                assert_true(fabs(y->data[k] - ref) < 1e-5);
            }
    actc_tensor_release(y);

    /* Bad input. */
    tu_expect_invalid(actc_batchnorm2d(ctx, x, g, b, NULL, NULL, mom, eps), "running");
    actc_ctx_set_training(ctx, 1);
    int bad[3] = {4, 3, 6};
    actc_tensor *x3 = tu_rand(3, bad, 1, 0, 1, 0);
    tu_expect_invalid(actc_batchnorm2d(ctx, x3, g, b, rm, rv, mom, eps), "[4, 3, 6]");
    int c4[1] = {4};
    actc_tensor *g4 = actc_param_new(1, c4, "g4");
    tu_expect_invalid(actc_batchnorm2d(ctx, x, g4, b, rm, rv, mom, eps), "gamma");
    tu_expect_invalid(actc_batchnorm2d(ctx, x, g, b, rm, rv, 1.5f, eps), "momentum");
    tu_expect_invalid(actc_batchnorm2d(ctx, x, g, b, rm, rv, mom, 0.0f), "eps");
    int one[4] = {1, 3, 1, 1};
    actc_tensor *x1 = tu_rand(4, one, 1, 0, 1, 0);
    tu_expect_invalid(actc_batchnorm2d(ctx, x1, g, b, rm, rv, mom, eps), "more than one value");
    assert_int_equal(actc_tape_size(ctx), 0);

    actc_tensor_release(x1);
    actc_tensor_release(g4);
    actc_tensor_release(x3);
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    actc_tensor_release(g);
    actc_tensor_release(b);
    actc_tensor_release(rm);
    actc_tensor_release(rv);
}

/* ---- pooling ------------------------------------------------------------- */

typedef struct {
    int k, s, p;
} pool_args;

static actc_tensor *f_maxpool(actc_ctx *ctx, actc_tensor **in, void *user)
{
    pool_args *a = user;
    return actc_maxpool2d(ctx, in[0], a->k, a->s, a->p);
}
static actc_tensor *f_avgpool(actc_ctx *ctx, actc_tensor **in, void *user)
{
    pool_args *a = user;
    return actc_avgpool2d(ctx, in[0], a->k, a->s, a->p);
}
static actc_tensor *f_gap(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)user;
    return actc_global_avgpool(ctx, in[0]);
}

/* Naive pooling over the padded input: max over real cells, or the sum of
 * real cells divided by k*k. */
static float ref_pool(const actc_tensor *x, int pl, int oh, int ow, const pool_args *a, int is_max)
{
    const int H = x->shape[2], W = x->shape[3];
    float best = -INFINITY, sum = 0;
    for (int i = 0; i < a->k; i++)
        for (int j = 0; j < a->k; j++) {
            int h = oh * a->s - a->p + i, w = ow * a->s - a->p + j;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            float v = x->data[(size_t)pl * H * W + h * W + w];
            best = fmaxf(best, v);
            sum += v;
        }
    return is_max ? best : sum / (float)(a->k * a->k);
}

static void check_pool_forward(actc_tensor *x, pool_args *a, int is_max)
{
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = is_max ? actc_maxpool2d(ctx, x, a->k, a->s, a->p) : actc_avgpool2d(ctx, x, a->k, a->s, a->p);
    assert_non_null(y);
    const int H = x->shape[2], W = x->shape[3];
    const int Ho = (H + 2 * a->p - a->k) / a->s + 1, Wo = (W + 2 * a->p - a->k) / a->s + 1;
    assert_int_equal(y->shape[2], Ho);
    assert_int_equal(y->shape[3], Wo);
    for (int pl = 0; pl < x->shape[0] * x->shape[1]; pl++)
        for (int oh = 0; oh < Ho; oh++)
            for (int ow = 0; ow < Wo; ow++) {
                float r = ref_pool(x, pl, oh, ow, a, is_max);
                assert_true(fabsf(y->data[(size_t)pl * Ho * Wo + oh * Wo + ow] - r) < 1e-6f);
            }
    actc_tensor_release(y);
    actc_ctx_free(ctx);
}

static void test_maxpool(void **state)
{
    (void)state;
    int s1[4] = {2, 2, 7, 7}, s2[4] = {2, 3, 6, 6};
    actc_tensor *x1 = tu_rand(4, s1, 1, 0, 1, 1), *x2 = tu_rand(4, s2, 1, 0, 1, 1);
    tu_fill_distinct(x1, 21, -1.0f, 1.0f, 0.0f);
    tu_fill_distinct(x2, 22, -1.0f, 1.0f, 0.0f);
    pool_args a1 = {3, 2, 1}, a2 = {2, 2, 0};
    check_pool_forward(x1, &a1, 1);
    check_pool_forward(x2, &a2, 1);
    check_grad("maxpool2d k3 s2 p1", f_maxpool, &x1, 1, &a1, 1e-3f);
    check_grad("maxpool2d k2 s2 p0", f_maxpool, &x2, 1, &a2, 1e-3f);

    /* Padded cells never win: an all-negative input pools to negatives. */
    actc_ctx *ctx = actc_ctx_new();
    for (size_t i = 0; i < x1->numel; i++) x1->data[i] = -1.0f - (float)i;
    actc_tensor *y = actc_maxpool2d(ctx, x1, 3, 2, 1);
    assert_non_null(y);
    for (size_t i = 0; i < y->numel; i++) assert_true(y->data[i] < 0.0f);
    actc_tensor_release(y);
    actc_ctx_reset(ctx);

    /* The window index fits a byte: k*k <= 256. */
    int big[4] = {1, 1, 20, 20};
    actc_tensor *xb = tu_rand(4, big, 3, 0, 1, 1);
    y = actc_maxpool2d(ctx, xb, 16, 1, 0);
    assert_non_null(y);
    actc_tensor_release(y);
    actc_ctx_reset(ctx);
    tu_expect_invalid(actc_maxpool2d(ctx, xb, 17, 1, 0), "256");
    tu_expect_invalid(actc_maxpool2d(ctx, xb, 3, 0, 1), "stride");
    tu_expect_invalid(actc_maxpool2d(ctx, xb, 3, 1, 2), "pad");
    tu_expect_invalid(actc_maxpool2d(ctx, xb, 21, 1, 0), "larger than");
    int flat[2] = {4, 5};
    actc_tensor *x2d = tu_rand(2, flat, 3, 0, 1, 1);
    tu_expect_invalid(actc_maxpool2d(ctx, x2d, 2, 2, 0), "[4, 5]");
    assert_int_equal(actc_tape_size(ctx), 0);
    actc_tensor_release(x2d);
    actc_tensor_release(xb);
    actc_ctx_free(ctx);
    actc_tensor_release(x1);
    actc_tensor_release(x2);
}

static void test_avgpool(void **state)
{
    (void)state;
    int s1[4] = {2, 2, 7, 7}, s2[4] = {2, 3, 5, 6};
    actc_tensor *x1 = tu_rand(4, s1, 31, -1, 1, 1), *x2 = tu_rand(4, s2, 32, -1, 1, 1);
    pool_args a1 = {3, 2, 1}, a2 = {2, 1, 1};
    check_pool_forward(x1, &a1, 0);
    check_pool_forward(x2, &a2, 0);
    /* count_include_pad: the top-left output of k3 p1 averages 4 real cells over 9. */
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_avgpool2d(ctx, x1, 3, 2, 1);
    const float *d = x1->data;
    assert_true(fabsf(y->data[0] - (d[0] + d[1] + d[7] + d[8]) / 9.0f) < 1e-6f);
    actc_tensor_release(y);
    actc_ctx_reset(ctx);
    check_grad("avgpool2d k3 s2 p1", f_avgpool, &x1, 1, &a1, 1e-2f);
    check_grad("avgpool2d k2 s1 p1", f_avgpool, &x2, 1, &a2, 1e-2f);
    tu_expect_invalid(actc_avgpool2d(ctx, x1, 2, 2, 2), "pad");

    /* global average pooling */
    y = actc_global_avgpool(ctx, x2);
    assert_non_null(y);
    assert_int_equal(y->ndim, 2);
    assert_int_equal(y->shape[0], 2);
    assert_int_equal(y->shape[1], 3);
    for (int pl = 0; pl < 6; pl++) {
        double s = 0;
        for (int i = 0; i < 30; i++) s += x2->data[pl * 30 + i];
        assert_true(fabs(y->data[pl] - s / 30) < 1e-6);
    }
    actc_tensor_release(y);
    actc_ctx_reset(ctx);
    check_grad("global_avgpool", f_gap, &x2, 1, NULL, 1e-2f);
    tu_expect_invalid(actc_global_avgpool(ctx, NULL), "global_avgpool");
    int s3[3] = {2, 3, 4};
    actc_tensor *x3 = tu_rand(3, s3, 1, 0, 1, 0);
    tu_expect_invalid(actc_global_avgpool(ctx, x3), "[2, 3, 4]");
    actc_tensor_release(x3);
    actc_ctx_free(ctx);
    actc_tensor_release(x1);
    actc_tensor_release(x2);
}

/* ---- dropout ------------------------------------------------------------- */

static actc_tensor *f_dropout(actc_ctx *ctx, actc_tensor **in, void *user)
{
    return actc_dropout(ctx, in[0], *(float *)user);
}

static void test_dropout(void **state)
{
    (void)state;
    int s[2] = {6, 20};
    actc_tensor *x = tu_rand(2, s, 41, -1, 1, 1);
    float p = 0.3f, p0 = 0.0f;
    check_grad("dropout p=0.3", f_dropout, &x, 1, &p, 1e-2f);
    check_grad("dropout p=0", f_dropout, &x, 1, &p0, 1e-2f);

    /* Statistics of the keep mask and the 1/(1-p) scale. */
    int sb[1] = {200000};
    actc_tensor *ones = actc_tensor_new(ACTC_MEM_ACT, 1, sb);
    for (size_t i = 0; i < ones->numel; i++) ones->data[i] = 1.0f;
    actc_ctx *ctx = actc_ctx_new();
    actc_ctx_set_seed(ctx, 99);
    actc_tensor *y = actc_dropout(ctx, ones, p);
    assert_non_null(y);
    size_t kept = 0;
    for (size_t i = 0; i < y->numel; i++) {
        if (y->data[i] != 0.0f) {
            kept++;
            assert_true(fabsf(y->data[i] - 1.0f / 0.7f) < 1e-6f);
        }
    }
    double frac = (double)kept / (double)y->numel;
    print_message("dropout p=0.3 kept fraction %.4f\n", frac);
    assert_true(fabs(frac - 0.7) < 0.005);

    /* Same seed and step: the same mask; another step: a different one. */
    actc_ctx *ctx2 = actc_ctx_new();
    actc_ctx_set_seed(ctx2, 99);
    actc_tensor *y2 = actc_dropout(ctx2, ones, p);
    assert_memory_equal(y->data, y2->data, y->numel * sizeof(float));
    actc_tensor_release(y2);
    actc_ctx_set_step(ctx2, 1);
    y2 = actc_dropout(ctx2, ones, p);
    assert_true(memcmp(y->data, y2->data, y->numel * sizeof(float)) != 0);
    actc_tensor_release(y2);
    /* Another stream (a data-parallel rank): another mask, reproducibly;
     * stream 0 is the streams as they always were. */
    actc_ctx_set_step(ctx2, 0);
    actc_ctx_set_stream(ctx2, 1);
    y2 = actc_dropout(ctx2, ones, p);
    assert_true(memcmp(y->data, y2->data, y->numel * sizeof(float)) != 0);
    actc_ctx_set_step(ctx2, 0);
    actc_tensor *y3 = actc_dropout(ctx2, ones, p);
    assert_memory_equal(y2->data, y3->data, y->numel * sizeof(float));
    actc_tensor_release(y3);
    actc_tensor_release(y2);
    actc_ctx_set_stream(ctx2, 0);
    /* The decisions are actc_rand_uniform(key, i) >= p with the op's key. */
    actc_ctx_set_step(ctx2, 0);
    uint64_t key = actc_ctx_next_key(ctx2);
    for (size_t i = 0; i < 1000; i++) assert_int_equal(y->data[i] != 0.0f, actc_rand_uniform(key, i) >= p);
    actc_tensor_release(y);
    actc_ctx_free(ctx2);

    /* Eval mode: an exact copy, nothing recorded. */
    actc_ctx_reset(ctx);
    actc_ctx_set_training(ctx, 0);
    y = actc_dropout(ctx, x, p);
    assert_non_null(y);
    assert_memory_equal(y->data, x->data, x->numel * sizeof(float));
    assert_int_equal(actc_tape_size(ctx), 0);
    actc_tensor_release(y);
    actc_ctx_set_training(ctx, 1);

    tu_expect_invalid(actc_dropout(ctx, x, 1.0f), "dropout");
    tu_expect_invalid(actc_dropout(ctx, x, -0.1f), "dropout");
    tu_expect_invalid(actc_dropout(ctx, x, NAN), "dropout");
    actc_ctx_free(ctx);
    actc_tensor_release(ones);
    actc_tensor_release(x);
}

/* ---- add, reshape, flatten ----------------------------------------------- */

static actc_tensor *f_add(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)user;
    return actc_add(ctx, in[0], in[1]);
}
static actc_tensor *f_reshape(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)user;
    int shape[2] = {4, -1};
    /* Reshape then a nonlinear op, so a misrouted gradient would show. */
    actc_tensor *r = actc_reshape(ctx, in[0], 2, shape);
    actc_tensor *y = actc_relu(ctx, r);
    actc_tensor_release(r);
    return y;
}
/* x reaches y through two reshapes and directly: the reshapes' gradient is
 * handed back to x, which by then has one from the product (added, not
 * replaced). */
static actc_tensor *f_reshape_twice(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)user;
    actc_tensor *r = actc_reshape(ctx, in[0], 2, (int[]){4, -1});
    actc_tensor *back = r ? actc_reshape_take(ctx, r, in[0]->ndim, in[0]->shape) : NULL;
    actc_tensor *y = back ? actc_mul(ctx, back, in[0]) : NULL;
    actc_tensor_release(back);
    return y;
}
static actc_tensor *f_flatten(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)user;
    return actc_flatten(ctx, in[0]);
}

static void test_add_reshape(void **state)
{
    (void)state;
    int s[3] = {2, 3, 4};
    actc_tensor *a = tu_rand(3, s, 51, -1, 1, 1), *b = tu_rand(3, s, 52, -1, 1, 1);
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_add(ctx, a, b);
    for (size_t i = 0; i < a->numel; i++) assert_true(y->data[i] == a->data[i] + b->data[i]);
    actc_tensor_release(y);
    actc_ctx_reset(ctx);
    actc_tensor *in[2] = {a, b};
    check_grad("add", f_add, in, 2, NULL, 1e-2f);
    int s2[3] = {2, 4, 3};
    actc_tensor *c = tu_rand(3, s2, 53, -1, 1, 0);
    tu_expect_invalid(actc_add(ctx, a, c), "[2, 4, 3]");

    tu_fill_distinct(a, 54, -1.0f, 1.0f, 0.05f);
    y = actc_reshape(ctx, a, 2, (int[]){4, -1});
    assert_non_null(y);
    assert_int_equal(y->ndim, 2);
    assert_int_equal(y->shape[1], 6);
    assert_memory_equal(y->data, a->data, a->numel * sizeof(float));
    actc_tensor_release(y);
    actc_ctx_reset(ctx);
    check_grad("reshape [2,3,4]->[4,-1]", f_reshape, &a, 1, NULL, 1e-3f);
    check_grad("reshape there and back, times x", f_reshape_twice, &a, 1, NULL, 1e-3f);
    int s4[4] = {2, 3, 2, 2};
    actc_tensor *x4 = tu_rand(4, s4, 55, -1, 1, 1);
    y = actc_flatten(ctx, x4);
    assert_int_equal(y->ndim, 2);
    assert_int_equal(y->shape[0], 2);
    assert_int_equal(y->shape[1], 12);
    actc_tensor_release(y);
    actc_ctx_reset(ctx);
    check_grad("flatten", f_flatten, &x4, 1, NULL, 1e-2f);

    tu_expect_invalid(actc_reshape(ctx, a, 2, (int[]){5, -1}), "24 elements");
    tu_expect_invalid(actc_reshape(ctx, a, 2, (int[]){5, 5}), "reshape");
    tu_expect_invalid(actc_reshape(ctx, a, 3, (int[]){-1, 2, -1}), "-1");
    tu_expect_invalid(actc_reshape(ctx, a, 2, (int[]){-2, -12}), "negative");
    tu_expect_invalid(actc_reshape(ctx, a, 0, NULL), "reshape");
    assert_int_equal(actc_tape_size(ctx), 0);
    actc_ctx_free(ctx);
    actc_tensor_release(x4);
    actc_tensor_release(c);
    actc_tensor_release(a);
    actc_tensor_release(b);
}

/* ---- cross-entropy ------------------------------------------------------- */

typedef struct {
    const int32_t *labels;
    int ignore;
} ce_args;

static actc_tensor *f_ce(actc_ctx *ctx, actc_tensor **in, void *user)
{
    ce_args *a = user;
    return actc_cross_entropy(ctx, in[0], a->labels, a->ignore, NULL);
}

static int argmax5(const float *r)
{
    int am = 0;
    for (int j = 1; j < 5; j++)
        if (r[j] > r[am]) am = j;
    return am;
}

/* The loss saves its probabilities, not its logits, so that a policy that
 * rounds them (gact:fixB rounds the loss's save too) leaves the gradient
 * unbiased: softmax(z) - onehot is linear in them, where a softmax
 * recomputed from rounded logits is not (exp of a noisy logit).  Confident
 * rows (logits up to +-6, 256 classes as a byte model's), 2 bits: the error
 * of the gradient averaged over R rounding seeds keeps falling from R/4 to R
 * (noise halves; a bias would stay) and ends small. */
static void test_cross_entropy_rounded_unbiased(void **state)
{
    (void)state;
    const size_t m0 = tu_mem_now();
    enum { N = 4, K = 256, R = 400 };
    int s[2] = {N, K};
    actc_tensor *z = tu_rand(2, s, 77, -6, 6, 1);
    int32_t labels[N] = {3, 100, 200, 255};
    double exact[N * K], mean[N * K] = {0}, err[2] = {0, 0};
    for (int r = -1; r < R; r++) { /* r = -1: exact gradient, policy none */
        actc_ctx *ctx = actc_ctx_new();
        assert_int_equal(actc_ctx_set_policy(ctx, r < 0 ? "none" : "gact:fix2"), ACTC_OK);
        actc_ctx_set_seed(ctx, (uint64_t)r + 1);
        actc_tensor *y = actc_cross_entropy(ctx, z, labels, -1, NULL);
        assert_non_null(y);
        assert_int_equal(actc_backward(ctx, y), ACTC_OK);
        actc_tensor_release(y);
        for (int j = 0; j < N * K; j++) {
            if (r < 0) exact[j] = z->grad->data[j];
            else mean[j] += z->grad->data[j];
        }
        actc_tensor_drop_grad(z);
        actc_ctx_free(ctx);
        if (r + 1 == R / 4 || r + 1 == R) err[r + 1 == R] = tu_mean_rel_err(mean, r + 1, exact, N * K);
    }
    printf("cross-entropy gradient averaged over %d / %d 2-bit roundings vs exact (relative L2): %.4f / %.4f\n",
           R / 4, R, err[0], err[1]);
    assert_true(err[1] < 0.65 * err[0]);
    assert_true(err[1] < 0.05);
    actc_tensor_release(z);
    assert_int_equal(tu_mem_now(), m0);
}

static void test_cross_entropy(void **state)
{
    (void)state;
    int s[2] = {4, 5};
    actc_tensor *z = tu_rand(2, s, 61, -2, 2, 1);
    int32_t labels[4] = {1, 0, 4, 2};
    ce_args a = {labels, -1};
    check_grad("cross_entropy", f_ce, &z, 1, &a, 1e-2f);
    int32_t lab_ign[4] = {1, -100, 4, -100};
    ce_args ai = {lab_ign, -100};
    check_grad("cross_entropy (ignored rows)", f_ce, &z, 1, &ai, 1e-2f);

    /* Value by hand and n_correct. */
    double total = 0;
    int correct = 0;
    for (int r = 0; r < 4; r++) {
        double s = 0;
        for (int j = 0; j < 5; j++) s += exp(z->data[r * 5 + j]);
        total += log(s) - z->data[r * 5 + labels[r]];
        correct += argmax5(z->data + r * 5) == labels[r];
    }
    actc_ctx *ctx = actc_ctx_new();
    int nc = -1;
    actc_tensor *y = actc_cross_entropy(ctx, z, labels, -1, &nc);
    assert_non_null(y);
    assert_int_equal(y->ndim, 1);
    assert_int_equal(y->shape[0], 1);
    assert_true(fabs(y->data[0] - total / 4) < 1e-5);
    assert_int_equal(nc, correct);
    actc_tensor_release(y);
    actc_ctx_reset(ctx);

    /* Rows 0 and 2 predict their labels, row 1 does not; row 3 as it falls.
     * With row 2's label set to ignore_index it no longer counts. */
    z->data[0 * 5 + 1] = 10.0f;
    z->data[2 * 5 + 4] = 10.0f;
    z->data[1 * 5 + 3] = 10.0f;
    const int row3 = argmax5(z->data + 15) == labels[3];
    y = actc_cross_entropy(ctx, z, labels, -1, &nc);
    assert_int_equal(nc, 2 + row3);
    actc_tensor_release(y);
    actc_ctx_reset(ctx);
    int32_t lab2[4] = {1, 0, 7, 2};
    y = actc_cross_entropy(ctx, z, lab2, 7, &nc);
    assert_non_null(y);
    assert_int_equal(nc, 1 + row3);
    actc_tensor_release(y);
    actc_ctx_reset(ctx);

    /* Stable for huge logits. */
    int s1[2] = {1, 3};
    actc_tensor *zb = actc_tensor_new(ACTC_MEM_ACT, 2, s1);
    zb->data[0] = 1000.0f;
    zb->data[1] = 0.0f;
    zb->data[2] = -1000.0f;
    int32_t l1[1] = {1};
    y = actc_cross_entropy(ctx, zb, l1, -1, NULL);
    assert_true(fabs(y->data[0] - 1000.0) < 1e-3);
    actc_tensor_release(y);

    /* Every row ignored: loss 0, not NaN. */
    int32_t all_ign[4] = {-1, -1, -1, -1};
    y = actc_cross_entropy(ctx, z, all_ign, -1, &nc);
    assert_true(y->data[0] == 0.0f);
    assert_int_equal(nc, 0);
    actc_tensor_release(y);
    actc_ctx_reset(ctx);

    int32_t bad[4] = {1, 0, 5, 2};
    tu_expect_invalid(actc_cross_entropy(ctx, z, bad, -1, NULL), "row 2");
    bad[2] = -3;
    tu_expect_invalid(actc_cross_entropy(ctx, z, bad, -1, NULL), "-3");
    tu_expect_invalid(actc_cross_entropy(ctx, z, NULL, -1, NULL), "labels");
    int s3[3] = {2, 2, 5};
    actc_tensor *z3 = tu_rand(3, s3, 1, 0, 1, 1);
    tu_expect_invalid(actc_cross_entropy(ctx, z3, labels, -1, NULL), "[2, 2, 5]");
    assert_int_equal(actc_tape_size(ctx), 0);
    actc_ctx_free(ctx);
    actc_tensor_release(z3);
    actc_tensor_release(zb);
    actc_tensor_release(z);
}

/* ---- recording rules shared by all operators ----------------------------- */

static void test_no_grad_no_record(void **state)
{
    (void)state;
    actc_mem_stats m0, m1;
    actc_mem_get_stats(&m0);
    int s[4] = {2, 3, 4, 4}, cs[1] = {3};
    actc_tensor *x = tu_rand(4, s, 71, -1, 1, 0); /* no gradient needed */
    actc_tensor *rm = actc_tensor_zeros(ACTC_MEM_PARAM, 1, cs), *rv = actc_tensor_zeros(ACTC_MEM_PARAM, 1, cs);
    actc_ctx *ctx = actc_ctx_new();
    for (int mode = 1; mode >= 0; mode--) {
        /* mode 1: training but nothing needs a gradient; mode 0: eval, where
         * even a gradient-requiring input records nothing. */
        actc_ctx_set_training(ctx, mode);
        x->requires_grad = !mode;
        actc_tensor *outs[8];
        int32_t labels[2] = {0, 1};
        outs[0] = actc_relu(ctx, x);
        outs[1] = actc_maxpool2d(ctx, x, 2, 2, 0);
        outs[2] = actc_avgpool2d(ctx, x, 2, 2, 0);
        outs[3] = actc_global_avgpool(ctx, x);
        outs[4] = actc_dropout(ctx, x, 0.5f);
        outs[5] = actc_add(ctx, x, x);
        outs[6] = actc_batchnorm2d(ctx, x, NULL, NULL, rm, rv, 0.1f, 1e-5f);
        outs[7] = actc_cross_entropy(ctx, outs[3], labels, -1, NULL);
        tu_expect_nothing_recorded(ctx, outs, 8, 0);
    }
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    actc_tensor_release(rm);
    actc_tensor_release(rv);
    actc_mem_get_stats(&m1);
    assert_int_equal(m1.current_total, m0.current_total);
}

/* ---- deterministic mode ------------------------------------------------- */

/* Outputs and gradients of a linear layer, a convolution and a batched
 * matmul (the operators on dense products), concatenated into out. */
static size_t products_run(float *out)
{
    int xs[2] = {150, 300}, ws[2] = {200, 300}, bs[1] = {200};
    int cxs[4] = {4, 8, 12, 12}, cws[4] = {16, 8, 3, 3};
    int as[3] = {6, 40, 70}, mbs[3] = {6, 70, 50};
    const int nd[7] = {2, 2, 1, 4, 4, 3, 3};
    const int *shapes[7] = {xs, ws, bs, cxs, cws, as, mbs};
    actc_tensor *in[7];
    for (int i = 0; i < 7; i++) { /* parameters: their gradients outlive backward */
        assert_non_null(in[i] = actc_param_new(nd[i], shapes[i], "p"));
        tu_fill_uniform(in[i], 81 + i, -1, 1);
    }
    actc_ctx *ctx = actc_ctx_new();
    assert_non_null(ctx);
    size_t n = 0;
    for (int k = 0; k < 3; k++) { /* one operator per backward pass (a pass consumes the tape) */
        actc_tensor *y = k == 0   ? actc_linear(ctx, in[0], in[1], in[2])
                         : k == 1 ? actc_conv2d(ctx, in[3], in[4], NULL, 1, 1)
                                  : actc_matmul(ctx, in[5], in[6], 0, 0);
        assert_non_null(y);
        memcpy(out + n, y->data, y->numel * sizeof(float));
        n += y->numel;
        actc_tensor *loss = tu_wsum(ctx, y, 7 + k);
        assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
        actc_tensor_release(loss);
        actc_tensor_release(y);
    }
    for (int i = 0; i < 7; i++) {
        assert_non_null(in[i]->grad);
        memcpy(out + n, in[i]->grad->data, in[i]->numel * sizeof(float));
        n += in[i]->numel;
        actc_tensor_release(in[i]);
    }
    actc_ctx_free(ctx);
    return n;
}

/* actc_set_deterministic: the same bits at 1, 2 and 3 threads, the same
 * values as the default mode up to rounding, and oneDNN refused while on. */
static void test_deterministic_products(void **state)
{
    (void)state;
    const int threads0 = actc_get_threads();
    const size_t cap = 1 << 20;
    float *ref = malloc(cap * sizeof *ref), *got = malloc(cap * sizeof *got);
    assert_non_null(ref);
    assert_non_null(got);
    assert_int_equal(actc_set_deterministic(1), ACTC_OK);
    assert_int_equal(actc_get_deterministic(), 1);
    size_t n = 0;
    for (int t = 1; t <= 3; t++) {
        actc_set_threads(t);
        const size_t m = products_run(t == 1 ? ref : got);
        assert_true(m <= cap);
        if (t == 1) n = m;
        else {
            assert_int_equal(m, n);
            assert_memory_equal(ref, got, n * sizeof *ref);
        }
    }
    /* oneDNN cannot be forced while the mode is on, nor the mode turned on
     * while oneDNN is forced. */
    assert_int_equal(actc_set_conv_backend("dnnl"), ACTC_ERR_INVALID);
    assert_string_equal(actc_get_conv_backend(), "auto");
    assert_int_equal(actc_set_deterministic(0), ACTC_OK);
    if (actc_set_conv_backend("dnnl") == ACTC_OK) {
        assert_int_equal(actc_set_deterministic(1), ACTC_ERR_INVALID);
        assert_int_equal(actc_get_deterministic(), 0);
        assert_int_equal(actc_set_conv_backend("auto"), ACTC_OK);
    }
    actc_clear_error();
    /* The default mode computes the same values, summed in another order. */
    actc_set_threads(2);
    assert_int_equal(products_run(got), n);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - ref[i]) / (fabs(ref[i]) + 1.0);
        if (d > worst) worst = d;
    }
    print_message("deterministic vs default: worst relative difference %.3g over %zu values\n", worst, n);
    assert_true(worst < 1e-4);
    actc_set_threads(threads0);
    free(ref);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_batchnorm_grad),
        cmocka_unit_test(test_batchnorm_forward),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_avgpool),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_add_reshape),
        cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_cross_entropy_rounded_unbiased),
        cmocka_unit_test(test_no_grad_no_record),
        cmocka_unit_test(test_deterministic_products),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
