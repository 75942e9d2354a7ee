/* Optimizers against values worked out by hand (torch.optim.SGD / AdamW
 * semantics), state handling, all-or-nothing steps, and the learning-rate
 * schedules. */
#include "testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A parameter of n elements with values v, and a gradient of the same shape. */
static actc_tensor *param(int n, const float *v, const char *name)
{
    actc_tensor *p = actc_param_new(1, &n, name);
    assert_non_null(p);
    memcpy(p->data, v, (size_t)n * sizeof(float));
    return p;
}

static void set_grad(actc_tensor *p, const float *g)
{
    if (!p->grad) p->grad = actc_tensor_new(ACTC_MEM_GRAD, p->ndim, p->shape);
    assert_non_null(p->grad);
    memcpy(p->grad->data, g, p->numel * sizeof(float));
}

/* Relative tolerance for float32 arithmetic against decimal hand values. */
#define NEAR(a, b) assert_float_equal((a), (b), 1e-6 * (1.0 + fabs((double)(b))))

/* SGD, momentum 0.9, lr 0.1, constant gradient 1 (element 1: mirrored, to
 * check signs):
 *   step 1: v = 1              p = 1    - 0.1*1    = 0.9
 *   step 2: v = 0.9*1 + 1 = 1.9  p = 0.9  - 0.19     = 0.71
 *   step 3: v = 1.71 + 1 = 2.71  p = 0.71 - 0.271    = 0.439 */
static void test_sgd_momentum(void **state)
{
    (void)state;
    float v0[2] = {1, -1}, g[2] = {1, -1};
    actc_tensor *p = param(2, v0, "w");
    actc_optim *o = actc_sgd_new(&p, 1, 0.9f, 0, 0.0f);
    assert_non_null(o);
    assert_string_equal(actc_optim_name(o), "sgd");
    const double want[3] = {0.9, 0.71, 0.439}, wantv[3] = {1, 1.9, 2.71};
    for (int s = 0; s < 3; s++) {
        set_grad(p, g);
        assert_int_equal(actc_optim_step(o, 0.1f), ACTC_OK);
        NEAR(p->data[0], want[s]);
        NEAR(p->data[1], -want[s]);
        actc_tensor **st;
        assert_int_equal(actc_optim_state(o, &st), 1);
        NEAR(st[0]->data[0], wantv[s]);
        assert_int_equal(st[0]->cat, ACTC_MEM_OPTIM);
    }
    assert_int_equal(actc_optim_steps(o), 3);
    actc_optim_free(o);
    actc_tensor_release(p);
}

/* Nesterov, momentum 0.9, lr 0.1, gradient 1: update = g + m*v
 *   step 1: v = 1     upd = 1 + 0.9    = 1.9    p = 1     - 0.19   = 0.81
 *   step 2: v = 1.9   upd = 1 + 1.71   = 2.71   p = 0.81  - 0.271  = 0.539
 *   step 3: v = 2.71  upd = 1 + 2.439  = 3.439  p = 0.539 - 0.3439 = 0.1951 */
static void test_sgd_nesterov(void **state)
{
    (void)state;
    float v0[1] = {1}, g[1] = {1};
    actc_tensor *p = param(1, v0, "w");
    actc_optim *o = actc_sgd_new(&p, 1, 0.9f, 1, 0.0f);
    const double want[3] = {0.81, 0.539, 0.1951};
    for (int s = 0; s < 3; s++) {
        set_grad(p, g);
        assert_int_equal(actc_optim_step(o, 0.1f), ACTC_OK);
        NEAR(p->data[0], want[s]);
    }
    actc_optim_free(o);
    actc_tensor_release(p);
    /* Nesterov without momentum is refused, as by PyTorch. */
    assert_null(actc_sgd_new(NULL, 0, 0.0f, 1, 0.0f));
    assert_int_equal(actc_last_status(), ACTC_ERR_INVALID);
}

/* Weight decay 0.1 added to the gradient, momentum 0.9, lr 0.1, raw grad 1:
 *   step 1: g = 1 + 0.1*1      = 1.1      v = 1.1                     p = 0.89
 *   step 2: g = 1 + 0.089      = 1.089    v = 0.99 + 1.089 = 2.079    p = 0.6821
 *   step 3: g = 1 + 0.06821    = 1.06821  v = 1.8711 + 1.06821 = 2.93931
 *                                                                     p = 0.388169
 * Plain SGD (momentum 0), wd 0.5, lr 0.1, p = 2, grad 1:
 *   step 1: g = 2    p = 1.8;   step 2: g = 1.9   p = 1.61 */
static void test_sgd_weight_decay(void **state)
{
    (void)state;
    float v0[1] = {1}, g[1] = {1};
    actc_tensor *p = param(1, v0, "w");
    actc_optim *o = actc_sgd_new(&p, 1, 0.9f, 0, 0.1f);
    const double want[3] = {0.89, 0.6821, 0.388169};
    for (int s = 0; s < 3; s++) {
        set_grad(p, g);
        assert_int_equal(actc_optim_step(o, 0.1f), ACTC_OK);
        NEAR(p->data[0], want[s]);
    }
    actc_optim_free(o);

    p->data[0] = 2;
    o = actc_sgd_new(&p, 1, 0.0f, 0, 0.5f);
    actc_tensor **st;
    assert_int_equal(actc_optim_state(o, &st), 0); /* plain SGD keeps no state */
    set_grad(p, g);
    assert_int_equal(actc_optim_step(o, 0.1f), ACTC_OK);
    NEAR(p->data[0], 1.8);
    assert_int_equal(actc_optim_step(o, 0.1f), ACTC_OK);
    NEAR(p->data[0], 1.61);
    actc_optim_free(o);
    actc_tensor_release(p);
}

/* AdamW, b1 0.9, b2 0.999, eps 1e-8, wd 0.01, lr 0.1, p = 1, grads 0.5, -1, 0.25:
 * step 1: p = 1*(1 - 0.001) = 0.999; m = 0.05; v = 0.00025;
 *         m^ = 0.05/0.1 = 0.5; v^ = 0.00025/0.001 = 0.25; sqrt = 0.5
 *         p = 0.999 - 0.1*0.5/(0.5 + 1e-8) = 0.899000002
 * step 2: p = 0.899000002*0.999 = 0.898101002; m = 0.045 - 0.1 = -0.055;
 *         v = 0.00024975 + 0.001 = 0.00124975; m^ = -0.055/0.19 = -0.28947368;
 *         v^ = 0.00124975/0.001999 = 0.62518759, sqrt = 0.79068805
 *         p = 0.898101002 + 0.1*0.28947368/0.79068806 = 0.93471135
 * step 3: p = 0.93471135*0.999 = 0.93377664; m = -0.0495 + 0.025 = -0.0245;
 *         v = 0.00124850025 + 0.0000625 = 0.00131100025;
 *         m^ = -0.0245/0.271 = -0.09040590; v^ = 0.00131100025/0.002997001
 *         = 0.43743405, sqrt = 0.66138797
 *         p = 0.93377664 + 0.1*0.09040590/0.66138797 = 0.94744571 */
static void test_adamw(void **state)
{
    (void)state;
    float v0[1] = {1};
    const float gs[3] = {0.5f, -1.0f, 0.25f};
    const double want[3] = {0.899000002, 0.93471135, 0.94744571};
    const double wm[3] = {0.05, -0.055, -0.0245}, wv[3] = {0.00025, 0.00124975, 0.00131100025};
    actc_tensor *p = param(1, v0, "w");
    actc_optim *o = actc_adamw_new(&p, 1, 0.9f, 0.999f, 1e-8f, 0.01f);
    assert_non_null(o);
    assert_string_equal(actc_optim_name(o), "adamw");
    for (int s = 0; s < 3; s++) {
        set_grad(p, &gs[s]);
        assert_int_equal(actc_optim_step(o, 0.1f), ACTC_OK);
        NEAR(p->data[0], want[s]);
        actc_tensor **st;
        assert_int_equal(actc_optim_state(o, &st), 2);
        NEAR(st[0]->data[0], wm[s]);
        NEAR(st[1]->data[0], wv[s]);
    }
    /* Resuming: the step count drives the bias correction.  Set back to 2 and
     * replay step 3 from the step-2 state: same result. */
    actc_tensor **st;
    actc_optim_state(o, &st);
    p->data[0] = 0.93471135f;
    st[0]->data[0] = -0.055f;
    st[1]->data[0] = 0.00124975f;
    actc_optim_set_steps(o, 2);
    set_grad(p, &gs[2]);
    assert_int_equal(actc_optim_step(o, 0.1f), ACTC_OK);
    NEAR(p->data[0], want[2]);
    assert_int_equal(actc_optim_steps(o), 3);
    actc_optim_free(o);
    actc_tensor_release(p);

    assert_null(actc_adamw_new(NULL, 0, 1.0f, 0.999f, 1e-8f, 0.0f));
    assert_int_equal(actc_last_status(), ACTC_ERR_INVALID);
    assert_null(actc_adamw_new(NULL, 0, 0.9f, 0.999f, -1.0f, 0.0f));
}

/* A larger parameter (parallel path) against a double-precision textbook
 * AdamW, and a parameter without gradient left alone. */
static void test_adamw_large_and_skip(void **state)
{
    (void)state;
    const int n = 100000;
    actc_tensor *p = actc_param_new(1, &n, "big");
    tu_fill_uniform(p, 1, -1, 1);
    float v1[3] = {1, 2, 3};
    actc_tensor *q = param(3, v1, "nograd");
    actc_tensor *ps[2] = {p, q};
    double *ref = malloc((size_t)n * sizeof *ref), *m = calloc((size_t)n, sizeof *m),
           *v = calloc((size_t)n, sizeof *v);
    for (int i = 0; i < n; i++) ref[i] = p->data[i];
    actc_mem_stats a, b;
    actc_mem_get_stats(&a);
    actc_optim *o = actc_adamw_new(ps, 2, 0.8f, 0.99f, 1e-6f, 0.05f);
    p->grad = actc_tensor_new(ACTC_MEM_GRAD, 1, &n);
    const double lr = 0.01;
    for (int s = 1; s <= 3; s++) {
        tu_fill_uniform(p->grad, 100 + s, -2, 2);
        assert_int_equal(actc_optim_step(o, (float)lr), ACTC_OK);
        for (int i = 0; i < n; i++) {
            double g = p->grad->data[i];
            ref[i] *= 1 - lr * 0.05;
            m[i] = 0.8 * m[i] + 0.2 * g;
            v[i] = 0.99 * v[i] + 0.01 * g * g;
            double mh = m[i] / (1 - pow(0.8, s)), vh = v[i] / (1 - pow(0.99, s));
            ref[i] -= lr * mh / (sqrt(vh) + 1e-6);
        }
    }
    double worst = 0;
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(ref[i] - p->data[i]));
    assert_true(worst < 1e-5);
    /* q: no gradient, so no update, no decay and (lazily) no state yet. */
    assert_float_equal(q->data[2], 3.0f, 0);
    actc_mem_get_stats(&b);
    assert_int_equal(b.current[ACTC_MEM_OPTIM] - a.current[ACTC_MEM_OPTIM], 2 * (size_t)n * 4);
    /* Asking for the state creates the rest, in a stable order. */
    actc_tensor **st;
    assert_int_equal(actc_optim_state(o, &st), 4);
    assert_int_equal(st[0]->numel, (size_t)n);
    assert_int_equal(st[1]->numel, (size_t)n);
    assert_int_equal(st[2]->numel, 3);
    assert_int_equal(st[3]->numel, 3);
    actc_tensor **st2;
    actc_optim_state(o, &st2);
    assert_ptr_equal(st[0], st2[0]);
    actc_optim_free(o);
    actc_mem_get_stats(&b);
    assert_int_equal(b.current[ACTC_MEM_OPTIM], a.current[ACTC_MEM_OPTIM]);
    free(ref);
    free(m);
    free(v);
    actc_tensor_release(p);
    actc_tensor_release(q);
}

/* Errors leave everything as it was. */
static void test_step_errors(void **state)
{
    (void)state;
    float v0[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1};
    actc_tensor *p = param(4, v0, "a");
    actc_tensor *q = param(3, v0, "b");
    actc_tensor *ps[2] = {p, q};
    actc_optim *o = actc_sgd_new(ps, 2, 0.9f, 0, 0.0f);
    set_grad(p, g);
    int two = 2;
    q->grad = actc_tensor_zeros(ACTC_MEM_GRAD, 1, &two); /* wrong shape */
    assert_int_equal(actc_optim_step(o, 0.1f), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "b"));
    assert_memory_equal(p->data, v0, sizeof v0); /* p was not updated either */
    assert_int_equal(actc_optim_steps(o), 0);
    actc_tensor_drop_grad(q);
    assert_int_equal(actc_optim_step(o, NAN), ACTC_ERR_NUMERIC);
    assert_int_equal(actc_optim_step(o, -1.0f), ACTC_ERR_INVALID);
    assert_memory_equal(p->data, v0, sizeof v0);

    /* Over budget while creating the momentum buffer: clean OOM, no change. */
    actc_mem_stats a;
    actc_mem_get_stats(&a);
    actc_mem_set_budget(a.current_total + 8);
    assert_int_equal(actc_optim_step(o, 0.1f), ACTC_ERR_OOM);
    actc_mem_set_budget(0);
    assert_memory_equal(p->data, v0, sizeof v0);
    assert_int_equal(actc_optim_step(o, 0.1f), ACTC_OK);
    NEAR(p->data[0], 0.9);
    assert_float_equal(q->data[0], 1.0f, 0);
    actc_optim_free(o);
    actc_tensor_release(p);
    actc_tensor_release(q);

    assert_null(actc_sgd_new(NULL, 2, 0.9f, 0, 0.0f));
    assert_null(actc_sgd_new(NULL, 0, -0.5f, 0, 0.0f));
    assert_null(actc_sgd_new(NULL, 0, 0.5f, 0, -1.0f));
    /* No parameters at all is a valid (if useless) optimizer. */
    o = actc_sgd_new(NULL, 0, 0.9f, 0, 0.0f);
    assert_non_null(o);
    assert_int_equal(actc_optim_step(o, 0.1f), ACTC_OK);
    assert_int_equal(actc_optim_init_state(o), ACTC_OK);
    actc_optim_free(o);
}

#define LR(s, step, want) assert_float_equal(actc_lr_at((s), (step)), (want), 1e-6)

static void test_schedules(void **state)
{
    (void)state;
    actc_lr_schedule s = {.kind = ACTC_LR_CONSTANT, .base_lr = 0.4f};
    LR(&s, 0, 0.4);
    LR(&s, 123456, 0.4);
    /* Warm-up over 4 steps: base/4, 2 base/4, 3 base/4, base, then the schedule. */
    s.warmup_steps = 4;
    LR(&s, 0, 0.1);
    LR(&s, 1, 0.2);
    LR(&s, 2, 0.3);
    LR(&s, 3, 0.4);
    LR(&s, 4, 0.4);

    /* Step decay: x0.1 every 10 steps. */
    actc_lr_schedule st = {.kind = ACTC_LR_STEP, .base_lr = 1.0f, .step_size = 10, .gamma = 0.1f};
    LR(&st, 0, 1.0);
    LR(&st, 9, 1.0);
    LR(&st, 10, 0.1);
    LR(&st, 25, 0.01);
    st.warmup_steps = 5; /* decay counts from the end of the warm-up */
    LR(&st, 0, 0.2);
    LR(&st, 5, 1.0);
    LR(&st, 14, 1.0);
    LR(&st, 15, 0.1);

    /* Cosine from 1 to 0.1 over 100 steps: 0.1 + 0.45 (1 + cos(pi t/100)). */
    actc_lr_schedule c = {.kind = ACTC_LR_COSINE, .base_lr = 1.0f, .min_lr = 0.1f, .total_steps = 100};
    LR(&c, 0, 1.0);
    LR(&c, 25, 0.1 + 0.45 * (1 + cos(M_PI / 4))); /* 0.868198 */
    LR(&c, 50, 0.55);
    LR(&c, 75, 0.1 + 0.45 * (1 + cos(3 * M_PI / 4)));
    LR(&c, 100, 0.1);
    LR(&c, 1000, 0.1);
    /* With 10 warm-up steps the cosine runs over the remaining 100 of 110. */
    c.warmup_steps = 10;
    c.total_steps = 110;
    LR(&c, 0, 0.1);
    LR(&c, 9, 1.0);
    LR(&c, 10, 1.0);
    LR(&c, 60, 0.55);
    LR(&c, 110, 0.1);
    /* No horizon (total_steps 0): no decay after the warm-up, rather than
     * the floor from step W on. */
    c.total_steps = 0;
    LR(&c, 9, 1.0);
    LR(&c, 10, 1.0);
    LR(&c, 100000, 1.0);
}

static void test_lr_parse(void **state)
{
    (void)state;
    actc_lr_schedule s = {.base_lr = 0.3f, .min_lr = 0.01f, .warmup_steps = 7, .total_steps = 99};
    assert_int_equal(actc_lr_parse("cosine", &s), ACTC_OK);
    assert_int_equal(s.kind, ACTC_LR_COSINE);
    assert_int_equal(actc_lr_parse("const", &s), ACTC_OK);
    assert_int_equal(s.kind, ACTC_LR_CONSTANT);
    assert_int_equal(actc_lr_parse("step:30:0.1", &s), ACTC_OK);
    assert_int_equal(s.kind, ACTC_LR_STEP);
    assert_int_equal(s.step_size, 30);
    assert_float_equal(s.gamma, 0.1f, 0);
    /* The caller's fields are left alone. */
    assert_float_equal(s.base_lr, 0.3f, 0);
    assert_float_equal(s.min_lr, 0.01f, 0);
    assert_int_equal(s.warmup_steps, 7);
    assert_int_equal(s.total_steps, 99);
    const char *bad[] = {"", "linear", "step", "step:30", "step:0:0.1", "step:-3:0.1", "step:30:abc",
                         "step:30:0.1x", "step:30:0", "step:x:0.1", "cosine "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        actc_lr_schedule t = s;
        if (actc_lr_parse(bad[i], &t) != ACTC_ERR_INVALID) fail_msg("'%s' accepted", bad[i]);
        assert_non_null(strstr(actc_last_error(), bad[i]));
        assert_memory_equal(&t, &s, sizeof s); /* untouched on error */
    }
}

/* Global-norm clipping: the norm over every gradient, scaled to max_norm
 * only above it, parameters without a gradient skipped. */
static void test_clip_grad_norm(void **state)
{
    (void)state;
    int s3[1] = {3}, s2[1] = {2};
    actc_tensor *a = actc_param_new(1, s3, "a"), *b = actc_param_new(1, s2, "b"), *c = actc_param_new(1, s2, "c");
    a->grad = actc_tensor_new(ACTC_MEM_GRAD, 1, s3);
    b->grad = actc_tensor_new(ACTC_MEM_GRAD, 1, s2);
    const float ga[3] = {3, 0, 4}, gb[2] = {0, 12}; /* norm sqrt(9 + 16 + 144) = 13 */
    memcpy(a->grad->data, ga, sizeof ga);
    memcpy(b->grad->data, gb, sizeof gb);
    actc_tensor *p[3] = {a, b, c};
    float norm = 0;
    assert_int_equal(actc_clip_grad_norm(p, 3, 20.0f, &norm), ACTC_OK);
    assert_float_equal(norm, 13.0f, 1e-5f);
    assert_true(a->grad->data[2] == 4.0f && b->grad->data[1] == 12.0f); /* under the limit: untouched */
    assert_int_equal(actc_clip_grad_norm(p, 3, 6.5f, &norm), ACTC_OK);
    assert_float_equal(norm, 13.0f, 1e-5f);
    assert_float_equal(a->grad->data[0], 1.5f, 1e-5f);
    assert_float_equal(a->grad->data[2], 2.0f, 1e-5f);
    assert_float_equal(b->grad->data[1], 6.0f, 1e-5f);
    assert_null(c->grad);
    b->grad->data[0] = INFINITY;
    assert_int_equal(actc_clip_grad_norm(p, 3, 6.5f, &norm), ACTC_ERR_NUMERIC);
    assert_true(isinf(norm));
    assert_float_equal(a->grad->data[0], 1.5f, 1e-5f); /* nothing scaled */
    assert_int_equal(actc_clip_grad_norm(p, 3, 0.0f, NULL), ACTC_ERR_INVALID);
    assert_int_equal(actc_clip_grad_norm(p, 3, NAN, NULL), ACTC_ERR_INVALID);
    actc_tensor_release(a);
    actc_tensor_release(b);
    actc_tensor_release(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_momentum),      cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_sgd_weight_decay),  cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_adamw_large_and_skip), cmocka_unit_test(test_step_errors),
        cmocka_unit_test(test_schedules),         cmocka_unit_test(test_lr_parse),
        cmocka_unit_test(test_clip_grad_norm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
