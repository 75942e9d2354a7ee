/* Saved-context store accounting, exercised through real operators: bytes per
 * kind, the fp32 reference (each distinct tensor once), de-duplication, the
 * policy's effect on ACT saves only, and that the store, the tape and the
 * allocator are back to where they started after backward. */
#include "testutil.h"
#include "ops/conv2d_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t context_bytes(void)
{
    actc_mem_stats m;
    actc_mem_get_stats(&m);
    return m.current[ACTC_MEM_CONTEXT];
}
static size_t act_bytes(void)
{
    actc_mem_stats m;
    actc_mem_get_stats(&m);
    return m.current[ACTC_MEM_ACT];
}
static actc_store_stats store_stats(actc_ctx *ctx)
{
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    return st;
}

/* ---- tiny custom operators ----------------------------------------------- */

/* loss = sum(x), so backward starts from a scalar. */
static actc_status sum_backward(actc_ctx *ctx, actc_node *node)
{
    float *gx;
    actc_status st = actc_grad_buffer(ctx, node->inputs[0], &gx);
    if (st != ACTC_OK) return st;
    if (gx)
        for (size_t i = 0; i < node->inputs[0]->numel; i++) gx[i] += node->output->grad->data[0];
    return ACTC_OK;
}
static actc_tensor *t_sum(actc_ctx *ctx, actc_tensor *x)
{
    int one = 1;
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 1, &one);
    double s = 0;
    for (size_t i = 0; i < x->numel; i++) s += x->data[i];
    y->data[0] = (float)s;
    actc_node *node;
    assert_int_equal(actc_node_new(ctx, "t_sum", sum_backward, y, 1, &x, &node), ACTC_OK);
    return y;
}

/* y = copy of x; x is saved once per entry of kinds[].  Backward loads the
 * saves in order and records the store's stats after each load in g_after[]. */
#define SAVER_MAX 4
static actc_store_stats g_after[SAVER_MAX];
static int g_nloads;

static actc_status saver_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    for (int k = 0; k < node->iattr[0]; k++) {
        actc_tensor *t = actc_load(ctx, node, k);
        if (!t) return actc_last_status();
        assert_int_equal(t->numel, x->numel);
        actc_tensor_release(t);
        actc_store_get_stats(ctx, &g_after[g_nloads++]);
    }
    float *gx;
    actc_status st = actc_grad_buffer(ctx, x, &gx);
    if (st != ACTC_OK) return st;
    if (gx)
        for (size_t i = 0; i < x->numel; i++) gx[i] += node->output->grad->data[i];
    return ACTC_OK;
}
static actc_tensor *t_saver(actc_ctx *ctx, actc_tensor *x, const actc_save_kind *kinds, int nk)
{
    actc_tensor *y = actc_tensor_copy(ACTC_MEM_ACT, x);
    actc_node *node;
    assert_int_equal(actc_node_new(ctx, "t_saver", saver_backward, y, 1, &x, &node), ACTC_OK);
    assert_non_null(node);
    node->iattr[0] = nk;
    for (int k = 0; k < nk; k++) assert_int_equal(actc_save(ctx, node, x, kinds[k]), ACTC_OK);
    return y;
}

/* Backward from sum(y), then check the store and tape are empty. */
static void backward_sum(actc_ctx *ctx, actc_tensor *y)
{
    actc_tensor *loss = t_sum(ctx, y);
    actc_tensor_release(y);
    if (actc_backward(ctx, loss) != ACTC_OK) fail_msg("backward: %s", actc_last_error());
    actc_tensor_release(loss);
    actc_store_stats st = store_stats(ctx);
    assert_int_equal(st.stored_bytes, 0);
    assert_int_equal(st.fp32_bytes, 0);
    assert_int_equal(actc_tape_size(ctx), 0);
}

/* y = copy of x, saving x once as ACT; backward reads the save row by row
 * (actc_load_rows, in reverse order, and two rows at once), checks every
 * row bit for bit against the whole decode (actc_load) and the input within
 * the policy's error, then hands the gradient over with actc_grad_adopt. */
static float g_rows_err;
static actc_status rows_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    const int rows = x->shape[0];
    const size_t d = x->numel / (size_t)rows;
    float *buf = malloc(x->numel * sizeof *buf), *two = malloc(2 * d * sizeof *two);
    assert_non_null(buf);
    assert_non_null(two);
    g_rows_err = 0;
    for (int r = rows - 1; r >= 0; r--) { /* any order, any number of times */
        assert_int_equal(actc_load_rows(ctx, node, 0, r, 1, buf + (size_t)r * d), ACTC_OK);
        for (size_t i = 0; i < d; i++) {
            float e = fabsf(buf[(size_t)r * d + i] - x->data[(size_t)r * d + i]);
            if (e > g_rows_err) g_rows_err = e;
        }
    }
    assert_int_equal(actc_load_rows(ctx, node, 0, rows - 2, 2, two), ACTC_OK);
    assert_memory_equal(two, buf + (size_t)(rows - 2) * d, 2 * d * sizeof(float));
    assert_int_equal(actc_load_rows(ctx, node, 0, rows - 1, 2, buf), ACTC_ERR_INVALID);
    assert_int_equal(actc_load_rows(ctx, node, 0, -1, 1, buf), ACTC_ERR_INVALID);
    assert_int_equal(actc_load_rows(ctx, node, 1, 0, 1, buf), ACTC_ERR_INVALID);
    actc_clear_error();
    /* The save is still there for a whole load, equal to the rows, then gone. */
    actc_tensor *t = actc_load(ctx, node, 0);
    assert_non_null(t);
    assert_memory_equal(t->data, buf, x->numel * sizeof(float));
    actc_tensor_release(t);
    assert_int_equal(actc_load_rows(ctx, node, 0, 0, 1, buf), ACTC_ERR_STATE);
    actc_clear_error();
    free(buf);
    free(two);
    return actc_grad_adopt(ctx, x, actc_grad_take(node));
}

static void test_load_rows_and_adopt(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now();
    int s[3] = {5, 3, 37}; /* rows of 111 elements: not a multiple of 8 or 256 */
    const char *policies[] = {"none", "bf16", "quant:4", "actnn:2"};
    const float tol[] = {0.0f, 0.01f, 0.2f, 1.1f};
    for (int p = 0; p < 4; p++) {
        actc_tensor *x = tu_rand(3, s, 4, -1, 1, 1);
        actc_ctx *ctx = actc_ctx_new();
        assert_int_equal(actc_ctx_set_policy(ctx, policies[p]), ACTC_OK);
        actc_tensor *y = actc_tensor_copy(ACTC_MEM_ACT, x);
        actc_node *node;
        assert_int_equal(actc_node_new(ctx, "t_rows", rows_backward, y, 1, &x, &node), ACTC_OK);
        assert_int_equal(actc_save(ctx, node, x, ACTC_SAVE_ACT), ACTC_OK);
        size_t act0 = act_bytes();
        backward_sum(ctx, y);
        print_message("%-8s rows vs input: max error %g\n", policies[p], (double)g_rows_err);
        assert_true(g_rows_err <= tol[p]);
        /* The output's gradient (all ones) became x's gradient. */
        for (size_t i = 0; i < x->numel; i++) assert_true(x->grad->data[i] == 1.0f);
        assert_true(act_bytes() <= act0 + x->numel * sizeof(float));
        actc_ctx_free(ctx);
        actc_tensor_release(x);
    }
    assert_int_equal(tu_mem_now(), m0);
}

/* actc_grad_adopt: a fresh gradient takes the buffer (no copy: the bytes
 * move from SCRATCH to ACT), an existing one adds it, a wrong shape fails. */
static void test_grad_adopt(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now();
    int s[2] = {4, 6}, s2[2] = {6, 4};
    actc_tensor *t = tu_rand(2, s, 5, -1, 1, 1);
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *g = tu_rand(2, s, 6, -1, 1, 0);
    actc_mem_stats a, b;
    actc_tensor *gs = actc_tensor_copy(ACTC_MEM_SCRATCH, g);
    actc_mem_get_stats(&a);
    assert_int_equal(actc_grad_adopt(ctx, t, gs), ACTC_OK);
    actc_mem_get_stats(&b);
    assert_ptr_equal(t->grad, gs);
    assert_int_equal(b.current_total, a.current_total);
    assert_int_equal(b.current[ACTC_MEM_SCRATCH] + 96, a.current[ACTC_MEM_SCRATCH]);
    assert_int_equal(b.current[ACTC_MEM_ACT], a.current[ACTC_MEM_ACT] + 96);
    assert_int_equal(actc_grad_adopt(ctx, t, actc_tensor_copy(ACTC_MEM_SCRATCH, g)), ACTC_OK);
    for (size_t i = 0; i < t->numel; i++) assert_true(t->grad->data[i] == 2 * g->data[i]);
    assert_int_equal(actc_grad_adopt(ctx, t, tu_rand(2, s2, 7, -1, 1, 0)), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "[6, 4]"));
    /* A buffer with another owner cannot become a gradient (the owner would
     * see it change); t's gradient is untouched. */
    actc_tensor *shared = actc_tensor_copy(ACTC_MEM_SCRATCH, g);
    actc_tensor_retain(shared);
    assert_int_equal(actc_grad_adopt(ctx, t, shared), ACTC_ERR_INVALID);
    assert_true(t->grad != shared && shared->data != NULL);
    for (size_t i = 0; i < t->numel; i++) assert_true(t->grad->data[i] == 2 * g->data[i]);
    actc_tensor_release(shared);
    actc_clear_error();
    assert_int_equal(actc_grad_adopt(ctx, g, actc_tensor_copy(ACTC_MEM_SCRATCH, g)), ACTC_OK); /* no grad wanted */
    assert_null(g->grad);
    actc_tensor_drop_grad(t);
    actc_tensor_release(g);
    actc_tensor_release(t);
    actc_ctx_free(ctx);
    assert_int_equal(tu_mem_now(), m0);
}

/* The _take forms (convolution, batch norm, ReLU, addition) compute in the input's
 * buffer when the caller held its only reference, and otherwise behave like
 * the plain forms: same outputs, same gradients, same saves. */
static void take_chain(int take, int share, int s4[4], float *out, float *gin, size_t *act_peak)
{
    int cs[1] = {s4[1]}, ws[4] = {s4[1], s4[1], 3, 3};
    actc_tensor *x = tu_rand(4, s4, 8, -1, 1, 1);
    actc_tensor *g = actc_param_new(1, cs, "g"), *b = actc_param_new(1, cs, "b");
    actc_tensor *w = actc_param_new(4, ws, "w");
    tu_fill_uniform(g, 3, 0.5f, 1.5f);
    tu_fill_uniform(w, 4, -0.3f, 0.3f);
    actc_ctx *ctx = actc_ctx_new();
    actc_mem_reset_peak();
    actc_tensor *h = actc_mul(ctx, x, x); /* an intermediate the chain may consume */
    actc_tensor *keep = share ? actc_tensor_retain(h) : NULL;
    actc_tensor *y;
    if (take) {
        y = actc_conv2d_take(ctx, h, w, NULL, 1, 1);
        y = actc_batchnorm2d_take(ctx, y, g, b, NULL, NULL, 0.1f, 1e-5f);
        y = actc_relu_take(ctx, y);
        y = actc_add_take(ctx, y, x);
    } else {
        actc_tensor *t0 = actc_conv2d(ctx, h, w, NULL, 1, 1);
        actc_tensor_release(h);
        actc_tensor *t1 = actc_batchnorm2d(ctx, t0, g, b, NULL, NULL, 0.1f, 1e-5f);
        actc_tensor_release(t0);
        actc_tensor *t2 = actc_relu(ctx, t1);
        actc_tensor_release(t1);
        y = actc_add(ctx, t2, x);
        actc_tensor_release(t2);
    }
    assert_non_null(y);
    actc_mem_stats ms;
    actc_mem_get_stats(&ms);
    *act_peak = ms.peak[ACTC_MEM_ACT];
    if (keep) {
        assert_non_null(keep->data); /* a shared input keeps its values */
        actc_tensor_release(keep);
    }
    memcpy(out, y->data, y->numel * sizeof(float));
    actc_tensor *loss = tu_wsum(ctx, y, 99);
    actc_tensor_release(y);
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    actc_tensor_release(loss);
    memcpy(gin, x->grad->data, x->numel * sizeof(float));
    actc_tensor *ps[] = {g, b, w};
    for (int i = 0; i < 3; i++) {
        actc_tensor_drop_grad(ps[i]);
        actc_tensor_release(ps[i]);
    }
    actc_tensor_release(x);
    actc_ctx_free(ctx);
}

static void test_take_forms(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now();
    int s4[4] = {4, 3, 5, 6};
    const size_t n = 360, bytes = n * sizeof(float);
    float o0[360], g0[360], o1[360], g1[360], o2[360], g2[360];
    size_t p0, p1, p2;
    take_chain(0, 0, s4, o0, g0, &p0);
    take_chain(1, 0, s4, o1, g1, &p1);
    take_chain(1, 1, s4, o2, g2, &p2);
    assert_memory_equal(o0, o1, bytes);
    assert_memory_equal(g0, g1, bytes);
    assert_memory_equal(o0, o2, bytes);
    assert_memory_equal(g0, g2, bytes);
    print_message("ACT peak of the forward: plain %zu, take %zu, take of a shared input %zu\n", p0, p1, p2);
    /* plain: x, h and the convolution's output (then the batch norm's, the
     * ReLU's, the sum) are alive together; take: x and one buffer for the
     * whole chain (with oneDNN, which runs the convolution in place). */
    assert_int_equal(p0, 3 * bytes);
    if (actc__conv_dnnl_compiled()) assert_int_equal(p1, 2 * bytes);
    else assert_true(p1 <= p0);
    assert_true(p2 > p1);
    assert_int_equal(tu_mem_now(), m0);
}

/* ---- tests --------------------------------------------------------------- */

static void test_relu_mask_bytes(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now(), c0 = context_bytes();
    int s[3] = {3, 5, 7}; /* 105 elements: not a multiple of 8 */
    actc_tensor *x = tu_rand(3, s, 1, -1, 1, 1);
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_relu(ctx, x);
    actc_store_stats st = store_stats(ctx);
    assert_int_equal(st.stored_bytes, 14);
    assert_int_equal(st.stored_by_kind[ACTC_SAVE_MASK], 14);
    assert_int_equal(st.fp32_bytes, 105 * 4);
    assert_int_equal(st.fp32_by_kind[ACTC_SAVE_MASK], 105 * 4);
    assert_int_equal(context_bytes() - c0, 14);
    backward_sum(ctx, y);
    for (size_t i = 0; i < x->numel; i++) assert_true(x->grad->data[i] == (x->data[i] > 0 ? 1.0f : 0.0f));
    assert_int_equal(context_bytes(), c0);
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    assert_int_equal(tu_mem_now(), m0);
}

static void test_mask_and_act_counted_once(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now();
    int s[4] = {2, 3, 4, 4}, cs[1] = {3};
    const size_t n = 96;
    actc_tensor *x = tu_rand(4, s, 2, -1, 1, 1);
    actc_tensor *g = actc_param_new(1, cs, "g"), *b = actc_param_new(1, cs, "b");
    tu_fill_uniform(g, 3, 0.5f, 1.5f);
    actc_ctx *ctx = actc_ctx_new();
    /* relu saves r as MASK, batchnorm saves the same r as ACT. */
    actc_tensor *r = actc_relu(ctx, x);
    actc_tensor *y = actc_batchnorm2d(ctx, r, g, b, NULL, NULL, 0.1f, 1e-5f);
    assert_non_null(y);
    actc_tensor_release(r);
    actc_store_stats st = store_stats(ctx);
    assert_int_equal(st.stored_bytes, n / 8 + 4 * n + 2 * 3 * 4);
    assert_int_equal(st.fp32_bytes, 4 * n + 2 * 3 * 4);
    /* Which kind's row carries the shared tensor is the store's choice;
     * together they count it once. */
    assert_int_equal(st.fp32_by_kind[ACTC_SAVE_MASK] + st.fp32_by_kind[ACTC_SAVE_ACT], 4 * n);
    assert_int_equal(st.n_dedup, 0); /* different kinds: two payloads */
    backward_sum(ctx, y);

    /* One node saving x as MASK then ACT: when the MASK entry (which holds
     * the tensor's fp32 share) is loaded first, the share moves to the
     * still-live ACT entry instead of vanishing. */
    actc_save_kind kinds[2] = {ACTC_SAVE_MASK, ACTC_SAVE_ACT};
    g_nloads = 0;
    y = t_saver(ctx, x, kinds, 2);
    st = store_stats(ctx);
    assert_int_equal(st.stored_bytes, n / 8 + 4 * n);
    assert_int_equal(st.fp32_bytes, 4 * n);
    backward_sum(ctx, y);
    assert_int_equal(g_nloads, 2);
    assert_int_equal(g_after[0].stored_bytes, 4 * n);
    assert_int_equal(g_after[0].fp32_bytes, 4 * n);
    assert_int_equal(g_after[1].stored_bytes, 0);
    assert_int_equal(g_after[1].fp32_bytes, 0);

    /* ACT first, then MASK: the ACT entry holds the share and is loaded
     * first, so the share must move to the MASK entry still waiting. */
    actc_save_kind kinds2[2] = {ACTC_SAVE_ACT, ACTC_SAVE_MASK};
    g_nloads = 0;
    y = t_saver(ctx, x, kinds2, 2);
    st = store_stats(ctx);
    assert_int_equal(st.fp32_by_kind[ACTC_SAVE_ACT], 4 * n);
    assert_int_equal(st.fp32_by_kind[ACTC_SAVE_MASK], 0);
    backward_sum(ctx, y);
    assert_int_equal(g_nloads, 2);
    assert_int_equal(g_after[0].stored_bytes, n / 8);
    assert_int_equal(g_after[0].fp32_bytes, 4 * n); /* handed over, not lost */
    assert_int_equal(g_after[1].fp32_bytes, 0);

    actc_ctx_free(ctx);
    actc_tensor_drop_grad(g);
    actc_tensor_drop_grad(b);
    actc_tensor_release(g);
    actc_tensor_release(b);
    actc_tensor_release(x);
    assert_int_equal(tu_mem_now(), m0);
}

static void test_maxpool_index_bytes(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now();
    int s[4] = {2, 3, 8, 8};
    actc_tensor *x = tu_rand(4, s, 4, -1, 1, 1);
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_maxpool2d(ctx, x, 2, 2, 0); /* [2,3,4,4]: 96 outputs */
    actc_store_stats st = store_stats(ctx);
    assert_int_equal(st.stored_by_kind[ACTC_SAVE_INDEX], 96);
    assert_int_equal(st.stored_bytes, 96);
    assert_int_equal(st.fp32_by_kind[ACTC_SAVE_INDEX], 96 * 4);
    backward_sum(ctx, y);
    /* Non-overlapping windows: exactly one input per window gets the gradient. */
    double gs = 0;
    for (size_t i = 0; i < x->numel; i++) gs += x->grad->data[i];
    assert_true(gs == 96.0);
    actc_tensor_drop_grad(x);

    /* The largest window (16x16: index up to 255) still takes one byte. */
    int sb[4] = {1, 2, 16, 17};
    actc_tensor *xb = tu_rand(4, sb, 5, -1, 1, 1);
    y = actc_maxpool2d(ctx, xb, 16, 1, 0); /* [1,2,1,2] */
    st = store_stats(ctx);
    assert_int_equal(st.stored_bytes, 4);
    backward_sum(ctx, y);

    actc_ctx_free(ctx);
    actc_tensor_release(xb);
    actc_tensor_release(x);
    assert_int_equal(tu_mem_now(), m0);
}

/* batchnorm -> relu -> maxpool on x[2,3,8,8] under a policy. */
typedef struct {
    actc_store_stats st;  /* at the end of forward */
    size_t context;       /* CONTEXT bytes the allocator saw then */
    float gx[384], gg[3], gb[3];
} chain_result;

static void run_chain(const char *policy, int release_early, chain_result *res)
{
    size_t m0 = tu_mem_now(), c0 = context_bytes();
    int s[4] = {2, 3, 8, 8}, cs[1] = {3};
    actc_tensor *x = tu_rand(4, s, 6, -1, 1, 1);
    tu_fill_distinct(x, 7, -2.0f, 2.0f, 0.0f);
    actc_tensor *g = actc_param_new(1, cs, "g"), *b = actc_param_new(1, cs, "b");
    tu_fill_uniform(g, 8, 0.5f, 1.5f);
    tu_fill_uniform(b, 9, -0.2f, 0.2f);
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, policy), ACTC_OK);

    actc_tensor *y1 = actc_batchnorm2d(ctx, x, g, b, NULL, NULL, 0.1f, 1e-5f);
    actc_tensor *y2 = actc_relu(ctx, y1);
    if (release_early) {
        /* Nothing keeps y1's data (batchnorm saved its input, relu its
         * output): releasing it frees the data at once. */
        size_t a0 = act_bytes();
        actc_tensor_release(y1);
        assert_int_equal(a0 - act_bytes(), 384 * 4);
        assert_null(y1->data); /* the struct lives on for the tape */
    }
    actc_tensor *y3 = actc_maxpool2d(ctx, y2, 2, 2, 0);
    assert_non_null(y3);
    actc_tensor_release(y2);
    res->st = store_stats(ctx);
    res->context = context_bytes() - c0;
    assert_int_equal(res->context, res->st.stored_bytes);
    assert_int_equal(res->st.stored_peak, res->st.stored_bytes);
    assert_int_equal(res->st.n_saves, 5);

    backward_sum(ctx, y3);
    if (!release_early) actc_tensor_release(y1);
    assert_int_equal(context_bytes(), c0);
    memcpy(res->gx, x->grad->data, sizeof res->gx);
    memcpy(res->gg, g->grad->data, sizeof res->gg);
    memcpy(res->gb, b->grad->data, sizeof res->gb);

    actc_ctx_free(ctx);
    actc_tensor_drop_grad(g);
    actc_tensor_drop_grad(b);
    actc_tensor_release(g);
    actc_tensor_release(b);
    actc_tensor_release(x);
    assert_int_equal(tu_mem_now(), m0); /* no leaks */
}

static void test_chain_policies(void **state)
{
    (void)state;
    static chain_result none, early, bf;
    run_chain("none", 0, &none);
    run_chain("none", 1, &early);
    run_chain("bf16", 1, &bf);

    /* none: everything but MASK/INDEX is stored at its fp32 size. */
    const size_t n = 384, nout = 96, C = 3;
    const actc_store_stats *st = &none.st;
    assert_int_equal(st->stored_by_kind[ACTC_SAVE_ACT], 4 * n);
    assert_int_equal(st->fp32_by_kind[ACTC_SAVE_ACT], 4 * n);
    assert_int_equal(st->stored_by_kind[ACTC_SAVE_EXACT], 2 * 4 * C);
    assert_int_equal(st->fp32_by_kind[ACTC_SAVE_EXACT], 2 * 4 * C);
    assert_int_equal(st->stored_by_kind[ACTC_SAVE_MASK], n / 8);
    assert_int_equal(st->fp32_by_kind[ACTC_SAVE_MASK], 4 * n);
    assert_int_equal(st->stored_by_kind[ACTC_SAVE_INDEX], nout);
    assert_int_equal(st->fp32_by_kind[ACTC_SAVE_INDEX], 4 * nout);
    assert_int_equal(st->stored_peak, 4 * n + 8 * C + n / 8 + nout);
    assert_int_equal(st->fp32_peak, 4 * n + 8 * C + 4 * n + 4 * nout);

    /* Forward timed its codecs (five saves, each a copy at least); nothing
     * was decoded yet. */
    assert_true(none.st.encode_s > 0);
    assert_true(none.st.decode_s == 0);

    /* Releasing an intermediate early changes nothing in the result (the
     * codecs' times aside). */
    early.st.encode_s = none.st.encode_s;
    early.st.decode_s = none.st.decode_s;
    assert_memory_equal(&early.st, &none.st, sizeof none.st);
    assert_memory_equal(early.gx, none.gx, sizeof none.gx);
    assert_memory_equal(early.gg, none.gg, sizeof none.gg);
    assert_memory_equal(early.gb, none.gb, sizeof none.gb);

    /* bf16: the ACT part halves, the lossless kinds do not move. */
    assert_int_equal(bf.st.stored_by_kind[ACTC_SAVE_ACT] * 2, none.st.stored_by_kind[ACTC_SAVE_ACT]);
    for (int k = ACTC_SAVE_MASK; k < ACTC_SAVE_NKINDS; k++)
        assert_int_equal(bf.st.stored_by_kind[k], none.st.stored_by_kind[k]);
    assert_memory_equal(bf.st.fp32_by_kind, none.st.fp32_by_kind, sizeof bf.st.fp32_by_kind);
    /* ...and the gradients stay close (x is saved in bf16). */
    double d = tu_max_abs_diff(bf.gx, none.gx, n), mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(none.gx[i]));
    print_message("bf16 vs none: max |dgx| %.3g (max |gx| %.3g)\n", d, mx);
    assert_true(d < 0.05 * mx);
}

static void test_dedup(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now();
    int s[4] = {2, 3, 4, 4}, cs[1] = {3};
    const size_t n = 96;
    actc_tensor *x = tu_rand(4, s, 10, -1, 1, 1);
    actc_ctx *ctx = actc_ctx_new();

    /* One node saving the same tensor twice as ACT. */
    actc_save_kind kinds[2] = {ACTC_SAVE_ACT, ACTC_SAVE_ACT};
    g_nloads = 0;
    actc_tensor *y = t_saver(ctx, x, kinds, 2);
    actc_store_stats st = store_stats(ctx);
    assert_int_equal(st.n_saves, 2);
    assert_int_equal(st.n_dedup, 1);
    assert_int_equal(st.stored_bytes, 4 * n);
    assert_int_equal(st.fp32_bytes, 4 * n);
    backward_sum(ctx, y);
    assert_int_equal(g_nloads, 2);
    assert_int_equal(g_after[0].stored_bytes, 4 * n); /* still held for the 2nd load */
    assert_int_equal(g_after[1].stored_bytes, 0);
    actc_tensor_drop_grad(x);

    /* Two batchnorms on the same input: x stored once, statistics twice. */
    actc_store_reset_peak(ctx);
    actc_tensor *g = actc_param_new(1, cs, "g");
    tu_fill_uniform(g, 11, 0.5f, 1.5f);
    actc_tensor *y1 = actc_batchnorm2d(ctx, x, g, NULL, NULL, NULL, 0.1f, 1e-5f);
    actc_tensor *y2 = actc_batchnorm2d(ctx, x, g, NULL, NULL, NULL, 0.1f, 1e-5f);
    actc_tensor *sum = actc_add(ctx, y1, y2);
    actc_tensor_release(y1);
    actc_tensor_release(y2);
    st = store_stats(ctx);
    assert_int_equal(st.n_saves, 6);
    assert_int_equal(st.n_dedup, 1);
    assert_int_equal(st.stored_by_kind[ACTC_SAVE_ACT], 4 * n);
    assert_int_equal(st.stored_by_kind[ACTC_SAVE_EXACT], 4 * 4 * 3);
    assert_int_equal(st.fp32_bytes, 4 * n + 4 * 4 * 3);
    backward_sum(ctx, sum);
    assert_non_null(g->grad);

    actc_ctx_free(ctx);
    actc_tensor_drop_grad(g);
    actc_tensor_drop_grad(x);
    actc_tensor_release(g);
    actc_tensor_release(x);
    assert_int_equal(tu_mem_now(), m0);
}

/* Dropout's keep mask is a MASK save; cross-entropy's logits are ACT and
 * follow the policy. */
static void test_dropout_ce_saves(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now();
    int s[2] = {8, 10};
    actc_tensor *x = tu_rand(2, s, 12, -1, 1, 1);
    int32_t labels[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int pol = 0; pol < 2; pol++) {
        actc_ctx *ctx = actc_ctx_new();
        assert_int_equal(actc_ctx_set_policy(ctx, pol ? "bf16" : "none"), ACTC_OK);
        actc_tensor *d = actc_dropout(ctx, x, 0.5f);
        actc_tensor *loss = actc_cross_entropy(ctx, d, labels, -1, NULL);
        actc_tensor_release(d);
        actc_store_stats st = store_stats(ctx);
        assert_int_equal(st.stored_by_kind[ACTC_SAVE_MASK], 10);
        assert_int_equal(st.stored_by_kind[ACTC_SAVE_ACT], pol ? 160 : 320);
        assert_int_equal(st.fp32_bytes, 320 + 320);
        assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
        actc_tensor_release(loss);
        assert_int_equal(store_stats(ctx).stored_bytes, 0);
        assert_int_equal(actc_tape_size(ctx), 0);
        actc_ctx_free(ctx);
        actc_tensor_drop_grad(x);
    }
    actc_tensor_release(x);
    assert_int_equal(tu_mem_now(), m0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relu_mask_bytes),
        cmocka_unit_test(test_load_rows_and_adopt),
        cmocka_unit_test(test_grad_adopt),
        cmocka_unit_test(test_take_forms),
        cmocka_unit_test(test_mask_and_act_counted_once),
        cmocka_unit_test(test_maxpool_index_bytes),
        cmocka_unit_test(test_chain_policies),
        cmocka_unit_test(test_dedup),
        cmocka_unit_test(test_dropout_ce_saves),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    actc_shutdown(); /* convolutions ran on oneDNN: free its engine and primitives */
    return failed;
}
