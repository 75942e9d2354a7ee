/* conv2d and linear: forward and backward against naive references written
 * here (including shapes whose im2col buffer exceeds the chunk cap, so the
 * chunked path runs), finite-difference gradient checks, what the store keeps,
 * leaks and bad shapes.  Every conv2d case runs on each backend built in
 * (im2col, and oneDNN when available), and oneDNN's results are also compared
 * with im2col's. */
#include "ops/conv2d_internal.h"
#include "testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- naive references (double accumulation) ------------------------------ */

typedef struct {
    int N, C, H, W, K, kh, kw, s, p;
} cshape;

static int out_h(const cshape *c) { return (c->H + 2 * c->p - c->kh) / c->s + 1; }
static int out_w(const cshape *c) { return (c->W + 2 * c->p - c->kw) / c->s + 1; }

static void ref_conv_fwd(const cshape *c, const float *x, const float *w, const float *b, float *y)
{
    int Ho = out_h(c), Wo = out_w(c);
    for (int n = 0; n < c->N; n++)
        for (int k = 0; k < c->K; k++)
            for (int oh = 0; oh < Ho; oh++)
                for (int ow = 0; ow < Wo; ow++) {
                    double acc = b ? b[k] : 0.0;
                    for (int ch = 0; ch < c->C; ch++)
                        for (int ki = 0; ki < c->kh; ki++)
                            for (int kj = 0; kj < c->kw; kj++) {
                                int ih = oh * c->s - c->p + ki, iw = ow * c->s - c->p + kj;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                acc += (double)x[(((size_t)n * c->C + ch) * c->H + ih) * c->W + iw] *
                                       w[(((size_t)k * c->C + ch) * c->kh + ki) * c->kw + kj];
                            }
                    y[(((size_t)n * c->K + k) * Ho + oh) * Wo + ow] = (float)acc;
                }
}

/* Gradients of sum(y * R): dx, dw, db (double, zeroed here). */
static void ref_conv_bwd(const cshape *c, const float *x, const float *w, const float *R, double *dx,
                         double *dw, double *db)
{
    int Ho = out_h(c), Wo = out_w(c);
    memset(dx, 0, sizeof(double) * (size_t)c->N * c->C * c->H * c->W);
    memset(dw, 0, sizeof(double) * (size_t)c->K * c->C * c->kh * c->kw);
    memset(db, 0, sizeof(double) * (size_t)c->K);
    for (int n = 0; n < c->N; n++)
        for (int k = 0; k < c->K; k++)
            for (int oh = 0; oh < Ho; oh++)
                for (int ow = 0; ow < Wo; ow++) {
                    double g = R[(((size_t)n * c->K + k) * Ho + oh) * Wo + ow];
                    db[k] += g;
                    for (int ch = 0; ch < c->C; ch++)
                        for (int ki = 0; ki < c->kh; ki++)
                            for (int kj = 0; kj < c->kw; kj++) {
                                int ih = oh * c->s - c->p + ki, iw = ow * c->s - c->p + kj;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                size_t xi = (((size_t)n * c->C + ch) * c->H + ih) * c->W + iw;
                                size_t wi = (((size_t)k * c->C + ch) * c->kh + ki) * c->kw + kj;
                                dx[xi] += g * w[wi];
                                dw[wi] += g * x[xi];
                            }
                }
}

/* max |a-b| / max(1, max|b|): a relative error that tolerates fp32 sums of
 * a thousand terms. */
static double rel_diff_f(const float *a, const float *b, size_t n)
{
    double m = 0, s = 1;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return m / s;
}
static double rel_diff_d(const float *a, const double *b, size_t n)
{
    double m = 0, s = 1;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs(b[i]));
    }
    return m / s;
}

/* ---- a loss op: sum(y * R) with R from a seed ----------------------------- */

static float rweight(size_t i) { return actc_rand_uniform(4242, i) - 0.5f; }

static actc_status rsum_backward(actc_ctx *ctx, actc_node *node)
{
    float *g;
    actc_status st = actc_grad_buffer(ctx, node->inputs[0], &g);
    if (st != ACTC_OK || !g) return st;
    float d = node->output->grad->data[0];
    for (size_t i = 0; i < node->inputs[0]->numel; i++) g[i] += d * rweight(i);
    return ACTC_OK;
}

static actc_tensor *rsum(actc_ctx *ctx, actc_tensor *y)
{
    int one = 1;
    actc_tensor *l = actc_tensor_new(ACTC_MEM_ACT, 1, &one);
    assert_non_null(l);
    double s = 0;
    for (size_t i = 0; i < y->numel; i++) s += (double)y->data[i] * rweight(i);
    l->data[0] = (float)s;
    actc_node *node;
    assert_int_equal(actc_node_new(ctx, "rsum", rsum_backward, l, 1, &y, &node), ACTC_OK);
    assert_non_null(node);
    return l;
}

/* ---- backends --------------------------------------------------------------- */

static const actc_conv_backend backends[] = {ACTC_CONV_IM2COL, ACTC_CONV_DNNL};
static const char *const backend_names[] = {"im2col", "dnnl"};

/* Backends to run: im2col always, oneDNN when built in. */
static int n_backends(void) { return actc__conv_dnnl_compiled() ? 2 : 1; }

/* ---- forward and backward against the references -------------------------- */

/* Results of one backend, kept to compare the backends with each other. */
typedef struct {
    float *y, *dx, *dw, *db;
} conv_result;

static void result_free(conv_result *r)
{
    free(r->y);
    free(r->dx);
    free(r->dw);
    free(r->db);
    memset(r, 0, sizeof *r);
}

static float *dup_floats(const float *p, size_t n)
{
    float *q = malloc(n * sizeof *q);
    assert_non_null(q);
    memcpy(q, p, n * sizeof *q);
    return q;
}

static void check_conv_case_on(const cshape *c, int with_bias, int check_backward, conv_result *res)
{
    int xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->K, c->C, c->kh, c->kw};
    actc_tensor *x = tu_rand(4, xs, 11, -1.0f, 1.0f, 1);
    actc_tensor *w = actc_param_new(4, ws, "w");
    actc_tensor *b = with_bias ? actc_param_new(1, &c->K, "b") : NULL;
    tu_fill_uniform(w, 12, -0.5f, 0.5f);
    if (b) tu_fill_uniform(b, 13, -1.0f, 1.0f);

    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_conv2d(ctx, x, w, b, c->s, c->p);
    if (!y) fail_msg("conv2d failed: %s", actc_last_error());
    int Ho = out_h(c), Wo = out_w(c);
    assert_int_equal(y->ndim, 4);
    assert_int_equal(y->shape[0], c->N);
    assert_int_equal(y->shape[1], c->K);
    assert_int_equal(y->shape[2], Ho);
    assert_int_equal(y->shape[3], Wo);
    float *ref = malloc(y->numel * sizeof *ref);
    ref_conv_fwd(c, x->data, w->data, b ? b->data : NULL, ref);
    double e = rel_diff_f(y->data, ref, y->numel);
    print_message("  conv N%d C%d %dx%d K%d k%dx%d s%d p%d bias%d: fwd rel err %.2g\n", c->N, c->C,
                  c->H, c->W, c->K, c->kh, c->kw, c->s, c->p, with_bias, e);
    assert_true(e < 1e-5);
    res->y = dup_floats(y->data, y->numel);

    if (check_backward) {
        float *R = malloc(y->numel * sizeof *R);
        for (size_t i = 0; i < y->numel; i++) R[i] = rweight(i);
        double *dx = malloc(x->numel * sizeof *dx), *dw = malloc(w->numel * sizeof *dw),
               *db = malloc((size_t)c->K * sizeof *db);
        ref_conv_bwd(c, x->data, w->data, R, dx, dw, db);
        actc_tensor *loss = rsum(ctx, y);
        actc_tensor_release(y);
        y = NULL;
        if (actc_backward(ctx, loss) != ACTC_OK) fail_msg("backward: %s", actc_last_error());
        actc_tensor_release(loss);
        assert_non_null(x->grad);
        assert_non_null(w->grad);
        double ex = rel_diff_d(x->grad->data, dx, x->numel);
        double ew = rel_diff_d(w->grad->data, dw, w->numel);
        print_message("    bwd rel err dx %.2g dw %.2g", ex, ew);
        assert_true(ex < 1e-5);
        assert_true(ew < 1e-5);
        res->dx = dup_floats(x->grad->data, x->numel);
        res->dw = dup_floats(w->grad->data, w->numel);
        if (b) {
            double eb = rel_diff_d(b->grad->data, db, (size_t)c->K);
            print_message(" db %.2g", eb);
            assert_true(eb < 1e-5);
            res->db = dup_floats(b->grad->data, (size_t)c->K);
        }
        print_message("\n");
        free(R);
        free(dx);
        free(dw);
        free(db);
    }
    free(ref);
    actc_tensor_release(y);
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    actc_tensor_release(w);
    actc_tensor_release(b);
}

/* The case on every backend: each against the naive reference, then oneDNN
 * against im2col.  Both are fp32 with different summation orders (oneDNN
 * blocks the reduction over channels and, in backward-weights, over
 * samples), so they agree to the same relative 1e-5 as with the reference,
 * not bit for bit. */
static void check_conv_case(const cshape *c, int with_bias, int check_backward)
{
    conv_result r[2] = {{0}, {0}};
    const int Ho = out_h(c), Wo = out_w(c);
    const size_t ny = (size_t)c->N * c->K * Ho * Wo, nx = (size_t)c->N * c->C * c->H * c->W,
                 nw = (size_t)c->K * c->C * c->kh * c->kw;
    for (int i = 0; i < n_backends(); i++) {
        actc__conv_force_backend(backends[i]);
        print_message("  [%s]", backend_names[i]);
        check_conv_case_on(c, with_bias, check_backward, &r[i]);
    }
    actc__conv_force_backend(ACTC_CONV_AUTO);
    if (n_backends() == 2) {
        double ey = rel_diff_f(r[1].y, r[0].y, ny);
        double ex = check_backward ? rel_diff_f(r[1].dx, r[0].dx, nx) : 0;
        double ew = check_backward ? rel_diff_f(r[1].dw, r[0].dw, nw) : 0;
        double eb = r[0].db ? rel_diff_f(r[1].db, r[0].db, (size_t)c->K) : 0;
        print_message("    dnnl vs im2col: y %.2g dx %.2g dw %.2g db %.2g\n", ey, ex, ew, eb);
        assert_true(ey < 1e-5 && ex < 1e-5 && ew < 1e-5 && eb < 1e-5);
    }
    result_free(&r[0]);
    result_free(&r[1]);
}

static void test_conv_forward_small(void **state)
{
    (void)state;
    const cshape cases[] = {
        {2, 3, 7, 6, 4, 3, 3, 1, 1}, /* 3x3 same, non-square image */
        {2, 3, 9, 8, 5, 3, 3, 2, 1}, /* stride 2 pad 1             */
        {3, 4, 7, 7, 6, 1, 1, 2, 0}, /* 1x1 stride 2 (downsample)  */
        {1, 2, 6, 9, 3, 2, 3, 1, 0}, /* non-square kernel, N=1     */
        {2, 2, 5, 7, 3, 3, 2, 3, 2}, /* stride 3, pad > kernel/2   */
        {1, 1, 4, 4, 2, 5, 5, 1, 2}, /* kernel larger than the image   */
        {2, 2, 5, 6, 3, 1, 3, 1, 1}, /* 1x3, pad 1: Wo == W, Ho == H+2 */
        {2, 3, 6, 6, 4, 3, 3, 1, 0}, /* 3x3 valid (no padding)        */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_conv_case(&cases[i], 1, 0);
        check_conv_case(&cases[i], 0, 0);
        /* The same geometry with enough channels for the channels-last
         * unfolding (17: not a multiple of the transpose tile). */
        cshape wide = cases[i];
        wide.C = 17;
        check_conv_case(&wide, 1, 0);
    }
}

static void test_conv_backward_small(void **state)
{
    (void)state;
    const cshape cases[] = {
        {2, 3, 7, 6, 4, 3, 3, 1, 1},
        {2, 3, 9, 8, 5, 3, 3, 2, 1},
        {3, 4, 7, 7, 6, 1, 1, 2, 0},
        {1, 2, 6, 9, 3, 2, 3, 1, 0},
        {1, 1, 4, 4, 2, 5, 5, 1, 2},
        {2, 2, 5, 6, 3, 1, 3, 1, 1},
        {2, 2, 5, 7, 3, 3, 2, 3, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_conv_case(&cases[i], 1, 1);
        cshape wide = cases[i];
        wide.C = 17; /* channels-last unfolding */
        check_conv_case(&wide, 1, 1);
        wide.C = 40;
        wide.N = 1; /* fewer samples than threads: fold splits channels */
        check_conv_case(&wide, 1, 1);
    }
}

/* The chunk cap is 8 MiB of unfolded columns + output columns (+ the
 * transposed input on the channels-last path), at least one sample:
 *  - 64 ch 3x3 at 28x28: 2.1 MB per sample, chunks of 4: 6 samples = 4 + 2;
 *  - 128 ch 3x3 at 48x48: 11.8 MB per sample, one sample per chunk;
 *  - 96 ch 3x3 stride 2 at 30x30: 1.13 MB per sample, 10 samples = 7 + 3;
 *  - planar unfolding: 8 ch 3x3 at 96x96, 2.9 MB per sample, 3 = 2 + 1, and
 *    64 ch 1x1 stride 2 at 56x56, 0.3 MB per sample, 30 = 27 + 3. */
static void test_conv_chunked(void **state)
{
    (void)state;
    const cshape cases[] = {
        /* oneDNN's chunks (16 MiB of blocked copies, channels rounded up to
         * 16): 3.7 MB per sample, 5 = 3 + 2, two primitives and a weight
         * reordered for each if they want different layouts. */
        {5, 16, 170, 170, 8, 3, 3, 1, 1},
        {6, 64, 28, 28, 16, 3, 3, 1, 1},
        {2, 128, 48, 48, 4, 3, 3, 1, 1},
        {10, 96, 30, 30, 8, 3, 3, 2, 1},
        {3, 8, 96, 96, 8, 3, 3, 1, 1},
        {30, 64, 56, 56, 32, 1, 1, 2, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_conv_case(&cases[i], i % 2 == 0, 1);
}

/* ---- finite-difference gradient checks ----------------------------------- */

typedef struct {
    int stride, pad;
} conv_args;

static actc_tensor *conv_fn(actc_ctx *ctx, actc_tensor **in, void *user)
{
    const conv_args *a = user;
    return actc_conv2d(ctx, in[0], in[1], in[2], a->stride, a->pad);
}

static void gradcheck_conv(const int xs[4], const int ws[4], int stride, int pad, int with_bias,
                           int w_is_param)
{
    actc_tensor *in[3];
    in[0] = tu_rand(4, xs, 21, -1.0f, 1.0f, 1);
    if (w_is_param) {
        in[1] = actc_param_new(4, ws, "w");
        tu_fill_uniform(in[1], 22, -0.5f, 0.5f);
    } else {
        in[1] = tu_rand(4, ws, 22, -0.5f, 0.5f, 1); /* saved EXACT for dx */
    }
    in[2] = with_bias ? actc_param_new(1, &ws[0], "b") : NULL;
    if (in[2]) tu_fill_uniform(in[2], 23, -0.5f, 0.5f);
    conv_args a = {stride, pad};
    for (int i = 0; i < n_backends(); i++) {
        actc__conv_force_backend(backends[i]);
        print_message("  [%s]\n", backend_names[i]);
        double e = tu_gradcheck(conv_fn, in, with_bias ? 3 : 2, &a, 1e-2f);
        assert_true(e < 1e-3);
    }
    actc__conv_force_backend(ACTC_CONV_AUTO);
    for (int i = 0; i < 3; i++) actc_tensor_release(in[i]);
}

static void test_conv_gradcheck(void **state)
{
    (void)state;
    const int x1[4] = {2, 3, 5, 4}, w1[4] = {4, 3, 3, 3};
    gradcheck_conv(x1, w1, 1, 1, 1, 1); /* 3x3 stride 1 pad 1 */
    const int x2[4] = {2, 2, 7, 6}, w2[4] = {3, 2, 3, 3};
    gradcheck_conv(x2, w2, 2, 1, 1, 1); /* 3x3 stride 2 pad 1 */
    gradcheck_conv(x2, w2, 2, 1, 0, 0); /* no bias, weight not a parameter */
    const int x3[4] = {2, 3, 5, 5}, w3[4] = {4, 3, 1, 1};
    gradcheck_conv(x3, w3, 2, 0, 1, 1); /* 1x1 stride 2 */
    /* The same with 16 channels: the channels-last unfolding. */
    const int x4[4] = {2, 16, 5, 4}, w4[4] = {3, 16, 3, 3};
    gradcheck_conv(x4, w4, 1, 1, 1, 1);
    gradcheck_conv(x4, w4, 2, 1, 1, 0);
    const int x5[4] = {2, 16, 5, 5}, w5[4] = {3, 16, 1, 1};
    gradcheck_conv(x5, w5, 2, 0, 1, 1);
}

static actc_tensor *linear_fn(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)user;
    return actc_linear(ctx, in[0], in[1], in[2]);
}

static void test_linear_gradcheck(void **state)
{
    (void)state;
    const int xs[3] = {3, 2, 5}, ws[2] = {4, 5}; /* 3-D input: leading dims flattened */
    actc_tensor *in[3];
    in[0] = tu_rand(3, xs, 31, -1.0f, 1.0f, 1);
    in[1] = actc_param_new(2, ws, "w");
    tu_fill_uniform(in[1], 32, -0.5f, 0.5f);
    in[2] = actc_param_new(1, &ws[0], "b");
    tu_fill_uniform(in[2], 33, -0.5f, 0.5f);
    assert_true(tu_gradcheck(linear_fn, in, 3, NULL, 1e-2f) < 1e-3);
    /* weight that is not a parameter, no bias */
    actc_tensor *w2 = tu_rand(2, ws, 34, -0.5f, 0.5f, 1);
    actc_tensor *in2[3] = {in[0], w2, NULL};
    assert_true(tu_gradcheck(linear_fn, in2, 2, NULL, 1e-2f) < 1e-3);
    actc_tensor_release(w2);
    for (int i = 0; i < 3; i++) actc_tensor_release(in[i]);
}

static void test_linear_forward(void **state)
{
    (void)state;
    const int M = 37, IN = 29, OUT = 13;
    int xs[2] = {M, IN}, ws[2] = {OUT, IN};
    actc_tensor *x = tu_rand(2, xs, 41, -1.0f, 1.0f, 0);
    actc_tensor *w = tu_rand(2, ws, 42, -1.0f, 1.0f, 0);
    actc_tensor *b = tu_rand(1, &ws[0], 43, -1.0f, 1.0f, 0);
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_linear(ctx, x, w, b);
    assert_non_null(y);
    assert_int_equal(y->shape[0], M);
    assert_int_equal(y->shape[1], OUT);
    assert_int_equal(actc_tape_size(ctx), 0); /* nothing requires grad */
    float *ref = malloc(sizeof(float) * M * OUT);
    for (int m = 0; m < M; m++)
        for (int o = 0; o < OUT; o++) {
            double acc = b->data[o];
            for (int i = 0; i < IN; i++) acc += (double)x->data[m * IN + i] * w->data[o * IN + i];
            ref[m * OUT + o] = (float)acc;
        }
    assert_true(rel_diff_f(y->data, ref, y->numel) < 1e-5);
    free(ref);
    actc_tensor_release(y);
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    actc_tensor_release(w);
    actc_tensor_release(b);
}

/* ---- what the store keeps -------------------------------------------------- */

static size_t stored_after_conv(const char *policy, size_t *numel_x)
{
    const int xs[4] = {4, 3, 10, 9}, ws[4] = {8, 3, 3, 3};
    actc_tensor *x = tu_rand(4, xs, 51, -1.0f, 1.0f, 0); /* network input: no dx */
    actc_tensor *w = actc_param_new(4, ws, "w");
    actc_tensor *b = actc_param_new(1, &ws[0], "b");
    tu_fill_uniform(w, 52, -0.5f, 0.5f);
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, policy), ACTC_OK);
    actc_tensor *y = actc_conv2d(ctx, x, w, b, 1, 1);
    assert_non_null(y);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    *numel_x = x->numel;
    /* backward still works from the (possibly compressed) context */
    actc_tensor *loss = rsum(ctx, y);
    actc_tensor_release(y);
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    assert_non_null(w->grad);
    assert_non_null(b->grad);
    assert_null(x->grad);
    actc_tensor_release(loss);
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    actc_tensor_release(w);
    actc_tensor_release(b);
    return st.stored_bytes;
}

static size_t stored_after_linear(const char *policy, size_t *numel_x)
{
    const int xs[2] = {6, 20}, ws[2] = {7, 20};
    actc_tensor *x = tu_rand(2, xs, 61, -1.0f, 1.0f, 1);
    actc_tensor *w = actc_param_new(2, ws, "w");
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, policy), ACTC_OK);
    actc_tensor *y = actc_linear(ctx, x, w, NULL);
    assert_non_null(y);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    *numel_x = x->numel;
    actc_tensor_release(y);
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    actc_tensor_release(w);
    return st.stored_bytes;
}

static void test_context_bytes(void **state)
{
    (void)state;
    /* Separate statements: n is set by the call. */
    size_t n = 0, bytes;
    /* The store sees the plain input whichever backend runs. */
    for (int i = 0; i < n_backends(); i++) {
        actc__conv_force_backend(backends[i]);
        bytes = stored_after_conv("none", &n);
        assert_int_equal(bytes, 4 * n);
        bytes = stored_after_conv("bf16", &n);
        assert_int_equal(bytes, 2 * n);
    }
    actc__conv_force_backend(ACTC_CONV_AUTO);
    bytes = stored_after_linear("none", &n);
    assert_int_equal(bytes, 4 * n);
    bytes = stored_after_linear("bf16", &n);
    assert_int_equal(bytes, 2 * n);
}

/* A frozen weight needs no dW, so x is not kept at all; dx still flows. */
static void test_frozen_weight_saves_nothing(void **state)
{
    (void)state;
    const int xs[4] = {2, 3, 6, 6}, ws[4] = {4, 3, 3, 3};
    actc_tensor *x = tu_rand(4, xs, 71, -1.0f, 1.0f, 1);
    actc_tensor *w = actc_param_new(4, ws, "w");
    w->requires_grad = 0;
    tu_fill_uniform(w, 72, -0.5f, 0.5f);
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_conv2d(ctx, x, w, NULL, 1, 1);
    assert_non_null(y);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    assert_int_equal(st.stored_bytes, 0);
    actc_tensor_release(y);
    actc_ctx_free(ctx);
    actc_tensor *in[3] = {x, w, NULL};
    conv_args a = {1, 1};
    for (int i = 0; i < n_backends(); i++) {
        actc__conv_force_backend(backends[i]);
        assert_true(tu_gradcheck(conv_fn, in, 2, &a, 1e-2f) < 1e-3);
    }
    actc__conv_force_backend(ACTC_CONV_AUTO);
    actc_tensor_release(x);
    actc_tensor_release(w);
}

static void test_eval_mode_records_nothing(void **state)
{
    (void)state;
    const int xs[4] = {2, 3, 6, 6}, ws[4] = {4, 3, 3, 3};
    actc_tensor *x = tu_rand(4, xs, 81, -1.0f, 1.0f, 1);
    actc_tensor *w = actc_param_new(4, ws, "w");
    actc_ctx *ctx = actc_ctx_new();
    actc_ctx_set_training(ctx, 0);
    actc_tensor *y = actc_conv2d(ctx, x, w, NULL, 1, 1);
    assert_non_null(y);
    assert_int_equal(actc_tape_size(ctx), 0);
    assert_int_equal(y->requires_grad, 0);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    assert_int_equal(st.stored_bytes, 0);
    actc_tensor_release(y);
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    actc_tensor_release(w);
}

/* ---- leaks ------------------------------------------------------------------ */

static void test_no_leaks(void **state)
{
    (void)state;
    for (int i = 0; i < n_backends(); i++) {
        actc__conv_force_backend(backends[i]);
        actc_mem_stats before, after;
        actc_mem_get_stats(&before);
        {
            const int xs[4] = {5, 16, 12, 12}, ws[4] = {8, 16, 3, 3}, ws2[4] = {8, 8, 1, 1};
            actc_tensor *x = tu_rand(4, xs, 91, -1.0f, 1.0f, 1);
            actc_tensor *w = actc_param_new(4, ws, "w");
            actc_tensor *w2 = tu_rand(4, ws2, 92, -1.0f, 1.0f, 1); /* non-parameter weight */
            actc_tensor *b = actc_param_new(1, &ws[0], "b");
            const int lw[2] = {3, 6};
            actc_tensor *wl = actc_param_new(2, lw, "wl");
            tu_fill_uniform(w, 93, -0.5f, 0.5f);
            tu_fill_uniform(wl, 94, -0.5f, 0.5f);
            actc_ctx *ctx = actc_ctx_new();
            actc_tensor *h = actc_conv2d(ctx, x, w, b, 1, 1);
            actc_tensor *h2 = actc_conv2d(ctx, h, w2, NULL, 2, 0);
            actc_tensor_release(h);
            /* linear on a 4-D input: [5,8,6,6] x [3,6]^T -> [5,8,6,3] */
            actc_tensor *l = actc_linear(ctx, h2, wl, NULL);
            actc_tensor_release(h2);
            assert_non_null(l);
            actc_tensor *loss = rsum(ctx, l);
            actc_tensor_release(l);
            assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
            actc_tensor_release(loss);
            /* a step abandoned after forward must not leak either */
            actc_tensor *y = actc_conv2d(ctx, x, w, b, 1, 1);
            actc_tensor_release(y);
            actc_ctx_reset(ctx);
            actc_ctx_free(ctx);
            actc_tensor_release(x);
            actc_tensor_release(w);
            actc_tensor_release(w2);
            actc_tensor_release(b);
            actc_tensor_release(wl);
        }
        actc_mem_get_stats(&after);
        assert_int_equal(after.current_total, before.current_total);
        assert_int_equal(after.current[ACTC_MEM_SCRATCH], before.current[ACTC_MEM_SCRATCH]);
    }
    actc__conv_force_backend(ACTC_CONV_AUTO);
}

/* oneDNN's scratch (blocked copies, scratchpad) is accounted: under a budget
 * that leaves room for the output but not for it, conv2d fails with
 * ACTC_ERR_OOM and leaves nothing behind; with room it works. */
static void test_dnnl_scratch_budget(void **state)
{
    (void)state;
    if (!actc__conv_dnnl_compiled()) skip();
    actc__conv_force_backend(ACTC_CONV_DNNL);
    const int xs[4] = {4, 32, 16, 16}, ws[4] = {32, 32, 3, 3};
    actc_tensor *x = tu_rand(4, xs, 101, -1.0f, 1.0f, 0);
    actc_tensor *w = actc_param_new(4, ws, "w");
    tu_fill_uniform(w, 102, -0.5f, 0.5f);
    actc_ctx *ctx = actc_ctx_new();
    actc_ctx_set_training(ctx, 0);
    actc_mem_stats before, peak, after;
    /* How much the call needs beyond its output, measured. */
    actc_mem_get_stats(&before);
    actc_mem_reset_peak();
    actc_tensor *y = actc_conv2d(ctx, x, w, NULL, 1, 1);
    assert_non_null(y);
    actc_mem_get_stats(&peak);
    const size_t ybytes = y->numel * sizeof(float);
    actc_tensor_release(y);
    print_message("  oneDNN scratch peak %zu bytes (output %zu)\n",
                  peak.peak[ACTC_MEM_SCRATCH] - before.current[ACTC_MEM_SCRATCH], ybytes);
    assert_true(peak.peak[ACTC_MEM_SCRATCH] > before.current[ACTC_MEM_SCRATCH]); /* blocked copies */
    actc_mem_set_budget(before.current_total + ybytes + 4096);
    y = actc_conv2d(ctx, x, w, NULL, 1, 1);
    actc_mem_set_budget(0);
    assert_null(y);
    assert_int_equal(actc_last_status(), ACTC_ERR_OOM);
    actc_clear_error();
    actc_mem_get_stats(&after);
    assert_int_equal(after.current_total, before.current_total);
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    actc_tensor_release(w);
    actc__conv_force_backend(ACTC_CONV_AUTO);
}

/* ---- backend choice and shutdown ------------------------------------------- */

/* y = conv(x, w) on a fixed case, copied out (caller frees). */
static float *conv_once(size_t *n)
{
    const int xs[4] = {2, 8, 9, 9}, ws[4] = {8, 8, 3, 3};
    actc_tensor *x = tu_rand(4, xs, 31, -1.0f, 1.0f, 0);
    actc_tensor *w = tu_rand(4, ws, 32, -0.5f, 0.5f, 0);
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_conv2d(ctx, x, w, NULL, 1, 1);
    if (!y) fail_msg("conv2d: %s", actc_last_error());
    *n = y->numel;
    float *out = dup_floats(y->data, y->numel);
    actc_tensor_release(y);
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    actc_tensor_release(w);
    return out;
}

/* actc_set_conv_backend: the names it takes, the errors for the others
 * (which change nothing), and that it picks what the internal switch the
 * other tests use picks.  actc_shutdown: twice in a row is fine and the
 * convolution works after it, with the same result and no memory left. */
static void test_backend_choice_and_shutdown(void **state)
{
    (void)state;
    const size_t m0 = tu_mem_now();
    assert_string_equal(actc_get_conv_backend(), "auto");
    assert_int_equal(actc_set_conv_backend("im2col"), ACTC_OK);
    assert_string_equal(actc_get_conv_backend(), "im2col");
    assert_int_equal(actc_set_conv_backend("fft"), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "unknown convolution backend 'fft' (auto, dnnl, im2col)"));
    assert_int_equal(actc_set_conv_backend(NULL), ACTC_ERR_INVALID);
    assert_string_equal(actc_get_conv_backend(), "im2col");
    actc_clear_error();
    for (int i = 0; i < n_backends(); i++) {
        size_t n1, n2;
        assert_int_equal(actc_set_conv_backend(backend_names[i]), ACTC_OK);
        assert_string_equal(actc_get_conv_backend(), backend_names[i]);
        float *by_name = conv_once(&n1);
        actc__conv_force_backend(backends[i]);
        float *forced = conv_once(&n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(by_name, forced, n1 * sizeof(float));
        free(by_name);
        free(forced);
    }
    if (!actc__conv_dnnl_compiled()) {
        assert_int_equal(actc_set_conv_backend("dnnl"), ACTC_ERR_INVALID);
        assert_non_null(strstr(actc_last_error(), "no oneDNN"));
        actc_clear_error();
    }
    assert_int_equal(actc_set_conv_backend("auto"), ACTC_OK);
    assert_string_equal(actc_get_conv_backend(), "auto");

    size_t n1, n2;
    float *before = conv_once(&n1); /* creates oneDNN's engine and primitives */
    actc_shutdown();
    actc_shutdown();
    float *after = conv_once(&n2); /* ... made again */
    assert_int_equal(n1, n2);
    assert_memory_equal(before, after, n1 * sizeof(float));
    free(before);
    free(after);
    assert_int_equal(tu_mem_now(), m0);
}

/* ---- bad input ------------------------------------------------------------- */

static void test_bad_shapes(void **state)
{
    (void)state;
    actc_mem_stats before, after;
    actc_mem_get_stats(&before);
    actc_ctx *ctx = actc_ctx_new();
    const int x4[4] = {2, 3, 8, 8}, x3[3] = {3, 8, 8}, w4[4] = {4, 3, 3, 3}, wc[4] = {4, 5, 3, 3},
              wbig[4] = {4, 3, 11, 3}, w2[2] = {4, 3};
    actc_tensor *x = tu_rand(4, x4, 1, -1, 1, 1), *xb = tu_rand(3, x3, 2, -1, 1, 1);
    actc_tensor *w = actc_param_new(4, w4, "w"), *wcm = actc_param_new(4, wc, "wc");
    actc_tensor *wk = actc_param_new(4, wbig, "wk"), *wm = actc_param_new(2, w2, "wm");
    const int five = 5, four = 4;
    actc_tensor *b5 = actc_param_new(1, &five, "b5"), *b4 = actc_param_new(1, &four, "b4");

    tu_expect_invalid(actc_conv2d(ctx, xb, w, NULL, 1, 1), "conv2d");  /* x not 4-D */
    tu_expect_invalid(actc_conv2d(ctx, x, wm, NULL, 1, 1), "conv2d");  /* w not 4-D */
    tu_expect_invalid(actc_conv2d(ctx, x, wcm, NULL, 1, 1), "conv2d"); /* channels */
    tu_expect_invalid(actc_conv2d(ctx, x, w, b5, 1, 1), "conv2d");     /* bias length */
    tu_expect_invalid(actc_conv2d(ctx, x, w, wm, 1, 1), "conv2d");     /* bias not 1-D */
    tu_expect_invalid(actc_conv2d(ctx, x, w, b4, 0, 1), "conv2d");     /* stride 0 */
    tu_expect_invalid(actc_conv2d(ctx, x, w, b4, 1, -1), "conv2d");    /* negative pad */
    tu_expect_invalid(actc_conv2d(ctx, x, wk, NULL, 1, 1), "conv2d");  /* output < 1 */
    tu_expect_invalid(actc_conv2d(ctx, NULL, w, NULL, 1, 1), "conv2d");

    const int xl[2] = {6, 3}, xw[2] = {6, 7};
    actc_tensor *l = tu_rand(2, xl, 3, -1, 1, 1), *lbad = tu_rand(2, xw, 4, -1, 1, 1);
    actc_tensor *y = actc_linear(ctx, l, wm, b4);
    assert_non_null(y); /* the good case */
    actc_tensor_release(y);
    tu_expect_invalid(actc_linear(ctx, lbad, wm, NULL), "linear"); /* in mismatch */
    tu_expect_invalid(actc_linear(ctx, l, w, NULL), "linear");     /* w not 2-D */
    tu_expect_invalid(actc_linear(ctx, l, wm, b5), "linear");      /* bias length */
    tu_expect_invalid(actc_linear(ctx, l, NULL, NULL), "linear");

    actc_ctx_reset(ctx);
    actc_ctx_free(ctx);
    actc_tensor *all[] = {x, xb, w, wcm, wk, wm, b5, b4, l, lbad};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) actc_tensor_release(all[i]);
    actc_mem_get_stats(&after);
    assert_int_equal(after.current_total, before.current_total);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_forward_small),
        cmocka_unit_test(test_conv_backward_small),
        cmocka_unit_test(test_conv_chunked),
        cmocka_unit_test(test_conv_gradcheck),
        cmocka_unit_test(test_linear_forward),
        cmocka_unit_test(test_linear_gradcheck),
        cmocka_unit_test(test_context_bytes),
        cmocka_unit_test(test_frozen_weight_saves_nothing),
        cmocka_unit_test(test_eval_mode_records_nothing),
        cmocka_unit_test(test_no_leaks),
        cmocka_unit_test(test_dnnl_scratch_budget),
        cmocka_unit_test(test_backend_choice_and_shutdown),
        cmocka_unit_test(test_bad_shapes),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    /* oneDNN's engine and cached primitives outlive the tests: the library
     * frees them only when asked, so that leak checkers see a clean exit. */
    actc_shutdown();
    return failed;
}
