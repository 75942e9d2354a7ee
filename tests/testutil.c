#include "testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tu_fill_uniform(actc_tensor *t, uint64_t seed, float lo, float hi)
{
    for (size_t i = 0; i < t->numel; i++) t->data[i] = lo + (hi - lo) * actc_rand_uniform(seed, i);
}

void tu_fill_distinct(actc_tensor *t, uint64_t seed, float lo, float hi, float min_abs)
{
    size_t n = t->numel;
    size_t *perm = malloc(n * sizeof *perm);
    for (size_t i = 0; i < n; i++) perm[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(actc_rand_uniform(seed, i) * (float)i);
        if (j >= i) j = i - 1;
        size_t tmp = perm[i - 1]; perm[i - 1] = perm[j]; perm[j] = tmp;
    }
    for (size_t i = 0; i < n; i++) {
        float v = n > 1 ? lo + (hi - lo) * (float)perm[i] / (float)(n - 1) : lo;
        if (fabsf(v) < min_abs) v = v < 0 ? -min_abs : min_abs;
        t->data[i] = v;
    }
    free(perm);
}

actc_tensor *tu_rand(int ndim, const int *shape, uint64_t seed, float lo, float hi, int requires_grad)
{
    actc_tensor *t = actc_tensor_new(ACTC_MEM_ACT, ndim, shape);
    assert_non_null(t);
    tu_fill_uniform(t, seed, lo, hi);
    t->requires_grad = requires_grad;
    return t;
}

void tu_expect_invalid(actc_tensor *y, const char *needle)
{
    assert_null(y);
    assert_int_equal(actc_last_status(), ACTC_ERR_INVALID);
    if (needle && !strstr(actc_last_error(), needle))
        fail_msg("error message '%s' lacks '%s'", actc_last_error(), needle);
    actc_clear_error();
}

void tu_expect_bad_policy(const char *spec, const char *needle)
{
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, spec), ACTC_ERR_INVALID);
    if (!strstr(actc_last_error(), needle)) fail_msg("%s: '%s' lacks '%s'", spec, actc_last_error(), needle);
    actc_ctx_free(ctx);
}

actc_ctx *tu_expect_policy(const char *spec, const char *canon)
{
    actc_ctx *ctx = actc_ctx_new();
    if (actc_ctx_set_policy(ctx, spec) != ACTC_OK) fail_msg("%s: %s", spec, actc_last_error());
    assert_string_equal(actc_ctx_policy(ctx), canon);
    assert_int_equal(actc_ctx_set_policy(ctx, canon), ACTC_OK);
    assert_string_equal(actc_ctx_policy(ctx), canon);
    return ctx;
}

uint8_t *tu_encode(const actc_codec *c, actc_codec_args *a, const float *x, size_t n, size_t *bytes)
{
    enum { GUARD = 64 };
    *bytes = c->plan(a, n);
    uint8_t *buf = malloc(*bytes + GUARD);
    assert_non_null(buf);
    memset(buf, 0xA5, *bytes + GUARD);
    c->encode(a, x, n, buf);
    for (size_t i = 0; i < GUARD; i++) assert_int_equal(buf[*bytes + i], 0xA5);
    return buf;
}

void tu_expect_nothing_recorded(actc_ctx *ctx, actc_tensor **outs, int n, size_t saves_before)
{
    for (int i = 0; i < n; i++) {
        assert_non_null(outs[i]);
        assert_int_equal(outs[i]->requires_grad, 0);
        actc_tensor_release(outs[i]);
    }
    assert_int_equal(actc_tape_size(ctx), 0);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    assert_int_equal(st.stored_bytes, 0);
    assert_int_equal(st.n_saves, saves_before);
}

double tu_max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m) m = d;
    }
    return m;
}

int tu_make_temp_dir(char *buf, size_t cap, const char *prefix)
{
    snprintf(buf, cap, "/tmp/%s_XXXXXX", prefix);
    return mkdtemp(buf) ? 0 : -1;
}

int tu_remove_dir(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

const char *tu_source_dir(void)
{
    const char *d = getenv("ACTC_SOURCE_DIR");
    return d ? d : ".";
}

/* loss = sum(out * R) in double, returned as float. */
static double weighted_sum(const actc_tensor *out, uint64_t rseed)
{
    double s = 0;
    for (size_t i = 0; i < out->numel; i++)
        s += (double)out->data[i] * (double)(actc_rand_uniform(rseed, i) - 0.5f);
    return s;
}

/* The weighted sum as an operator, so backward starts from a scalar. */
static actc_status wsum_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    float *gx;
    actc_status st = actc_grad_buffer(ctx, x, &gx);
    if (st != ACTC_OK || !gx) return st;
    float g = node->output->grad->data[0];
    uint64_t rseed = (uint64_t)node->iattr[0];
    for (size_t i = 0; i < x->numel; i++) gx[i] += g * (actc_rand_uniform(rseed, i) - 0.5f);
    return ACTC_OK;
}

actc_tensor *tu_wsum(actc_ctx *ctx, actc_tensor *x, int rseed)
{
    int one = 1;
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 1, &one);
    assert_non_null(y);
    y->data[0] = (float)weighted_sum(x, (uint64_t)rseed);
    actc_node *node;
    assert_int_equal(actc_node_new(ctx, "wsum", wsum_backward, y, 1, &x, &node), ACTC_OK);
    if (node) node->iattr[0] = rseed;
    return y;
}

static double eval_loss(tu_forward_fn f, actc_tensor **in, void *user, int rseed)
{
    actc_ctx *ctx = actc_ctx_new();
    actc_ctx_set_seed(ctx, 7);
    actc_tensor *out = f(ctx, in, user);
    assert_non_null(out);
    double l = weighted_sum(out, (uint64_t)rseed);
    actc_tensor_release(out);
    actc_ctx_reset(ctx);
    actc_ctx_free(ctx);
    return l;
}

double tu_gradcheck(tu_forward_fn f, actc_tensor **in, int n, void *user, float eps)
{
    const int rseed = 12345;
    actc_ctx *ctx = actc_ctx_new();
    actc_ctx_set_seed(ctx, 7);
    for (int i = 0; i < n; i++)
        if (in[i]) actc_tensor_drop_grad(in[i]);
    actc_tensor *out = f(ctx, in, user);
    assert_non_null(out);
    actc_tensor *loss = tu_wsum(ctx, out, rseed);
    actc_tensor_release(out);
    actc_status s = actc_backward(ctx, loss);
    if (s != ACTC_OK) fail_msg("backward failed: %s", actc_last_error());
    actc_tensor_release(loss);
    actc_ctx_free(ctx);

    double worst = 0;
    for (int k = 0; k < n; k++) {
        actc_tensor *t = in[k];
        if (!t || !t->requires_grad) continue;
        assert_non_null(t->grad);
        double num2 = 0, ga2 = 0, gn2 = 0;
        for (size_t i = 0; i < t->numel; i++) {
            float orig = t->data[i];
            t->data[i] = orig + eps;
            double lp = eval_loss(f, in, user, rseed);
            t->data[i] = orig - eps;
            double lm = eval_loss(f, in, user, rseed);
            t->data[i] = orig;
            double gn = (lp - lm) / (2.0 * (double)eps);
            double ga = t->grad->data[i];
            num2 += (ga - gn) * (ga - gn);
            ga2 += ga * ga;
            gn2 += gn * gn;
        }
        double denom = fmax(fmax(sqrt(ga2), sqrt(gn2)), 1e-6);
        double rel = sqrt(num2) / denom;
        print_message("  input %d (%s, %zu elems): rel err %.3g\n", k, t->name[0] ? t->name : "-",
                      t->numel, rel);
        if (rel > worst) worst = rel;
        actc_tensor_drop_grad(t);
    }
    return worst;
}

static double g_grad_worst = 0.0; /* worst tu_check_grad error of the program */

void tu_check_grad(const char *what, tu_forward_fn f, actc_tensor **in, int n, void *user, float eps)
{
    double err = tu_gradcheck(f, in, n, user, eps);
    print_message("gradcheck %-40s worst rel err %.3g\n", what, err);
    if (err > g_grad_worst) g_grad_worst = err;
    assert_true(err < TU_GRAD_TOL);
}

int tu_grad_report(void **state)
{
    (void)state;
    print_message("worst gradcheck rel err over all checks: %.3g\n", g_grad_worst);
    return 0;
}

size_t tu_mem_now(void)
{
    actc_mem_stats m;
    actc_mem_get_stats(&m);
    return m.current_total;
}

size_t tu_stored_after(actc_ctx *ctx, actc_tensor *y)
{
    assert_non_null(y);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    actc_tensor_release(y);
    actc_ctx_reset(ctx);
    return st.stored_bytes;
}

float *tu_dup_floats(const float *p, size_t n)
{
    float *d = malloc(n * sizeof *d);
    assert_non_null(d);
    memcpy(d, p, n * sizeof *d);
    return d;
}

double tu_mean_rel_err(const double *sum, int count, const double *exact, size_t n)
{
    double num = 0, den = 0;
    for (size_t j = 0; j < n; j++) {
        const double d = sum[j] / count - exact[j];
        num += d * d;
        den += exact[j] * exact[j];
    }
    return sqrt(num / den);
}
