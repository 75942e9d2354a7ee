/* Saved-context store accounting, exercised through real operators: bytes per
 * kind, the fp32 reference (each distinct tensor once), de-duplication, the
 * policy's effect on ACT saves only, and that the store, the tape and the
 * allocator are back to where they started after backward. */
#include "testutil.h"
#include "ops/conv2d_internal.h"
#include "autograd/autograd.h"
#include "policy/policy.h"
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
/* Per load: the loaded tensor's data and whether it was x's own struct, and
 * the allocator's CONTEXT and ACT bytes once it was released. */
static const float *g_loaded_data[SAVER_MAX];
static int g_loaded_x[SAVER_MAX];
static size_t g_ctx_after[SAVER_MAX], g_act_after[SAVER_MAX];

static actc_status saver_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    for (int k = 0; k < node->iattr[0]; k++) {
        actc_tensor *t = actc_load(ctx, node, k);
        if (!t) return actc_last_status();
        assert_int_equal(t->numel, x->numel);
        g_loaded_data[g_nloads] = t->data;
        g_loaded_x[g_nloads] = t == x;
        actc_tensor_release(t);
        g_ctx_after[g_nloads] = context_bytes();
        g_act_after[g_nloads] = act_bytes();
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
 * the plain forms: same outputs, same gradients, same saves.  Under a policy
 * that stores copies the consumed inputs' buffers are free for the outputs;
 * under `none` the store holds the inputs themselves (by reference), so the
 * take forms find them shared and write elsewhere. */
static void take_chain(const char *policy, int take, int share, int s4[4], float *out, float *gin,
                       size_t *act_peak, size_t *total_peak)
{
    int cs[1] = {s4[1]}, ws[4] = {s4[1], s4[1], 3, 3};
    actc_tensor *x = tu_rand(4, s4, 8, -1, 1, 1);
    actc_tensor *g = actc_param_new(1, cs, "g"), *b = actc_param_new(1, cs, "b");
    actc_tensor *w = actc_param_new(4, ws, "w");
    tu_fill_uniform(g, 3, 0.5f, 1.5f);
    tu_fill_uniform(w, 4, -0.3f, 0.3f);
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, policy), ACTC_OK);
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
    *total_peak = ms.peak_total;
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
    size_t p0, p1, p2, t0, t1, t2;
    /* bf16 copies every ACT save into its payload. */
    take_chain("bf16", 0, 0, s4, o0, g0, &p0, &t0);
    take_chain("bf16", 1, 0, s4, o1, g1, &p1, &t1);
    take_chain("bf16", 1, 1, s4, o2, g2, &p2, &t2);
    assert_memory_equal(o0, o1, bytes);
    assert_memory_equal(g0, g1, bytes);
    assert_memory_equal(o0, o2, bytes);
    assert_memory_equal(g0, g2, bytes);
    print_message("bf16: ACT peak of the forward: plain %zu, take %zu, take of a shared input %zu\n", p0, p1, p2);
    /* plain: x, h and the convolution's output (then the batch norm's, the
     * ReLU's, the sum) are alive together; take: x and one buffer for the
     * whole chain (with oneDNN, which runs the convolution in place). */
    assert_int_equal(p0, 3 * bytes);
    if (actc__conv_dnnl_compiled()) assert_int_equal(p1, 2 * bytes);
    else assert_true(p1 <= p0);
    assert_true(p2 > p1);
    /* none: the saved inputs are held, not copied; the same values, and
     * the take forms never need more than the plain ones. */
    take_chain("none", 0, 0, s4, o1, g1, &p0, &t0);
    assert_memory_equal(o0, o1, bytes);
    take_chain("none", 1, 0, s4, o2, g2, &p1, &t1);
    assert_memory_equal(o1, o2, bytes);
    assert_memory_equal(g1, g2, bytes);
    take_chain("none", 1, 1, s4, o2, g2, &p2, &t2);
    assert_memory_equal(o1, o2, bytes);
    assert_memory_equal(g1, g2, bytes);
    print_message("none: total peak of the forward: plain %zu, take %zu, take of a shared input %zu\n", t0, t1, t2);
    assert_true(t1 <= t0);
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

/* ---- saves kept by reference --------------------------------------------- */

/* Under `none` a save holds the tensor, not a copy: its block moves from ACT
 * to CONTEXT (once, however many entries hold it: here an ACT save, its
 * duplicate and an EXACT save), stored_bytes is what the copies were, a
 * load shares the data through a tensor of its own, no codec runs, and the
 * block goes back to ACT when the last entry lets go. */
static void test_reference_saves(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now();
    int s[2] = {6, 40};
    const size_t bytes = 240 * sizeof(float);
    actc_tensor *x = tu_rand(2, s, 21, -1, 1, 1);
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, "none"), ACTC_OK);
    const size_t c0 = context_bytes(), a0 = act_bytes();
    actc_save_kind kinds[3] = {ACTC_SAVE_ACT, ACTC_SAVE_ACT, ACTC_SAVE_EXACT};
    g_nloads = 0;
    actc_tensor *y = t_saver(ctx, x, kinds, 3); /* y: an ACT copy of x */
    actc_store_stats st = store_stats(ctx);
    assert_int_equal(st.n_saves, 3);
    assert_int_equal(st.n_dedup, 1);
    assert_int_equal(st.stored_bytes, 2 * bytes); /* two entries, as the two copies were */
    assert_int_equal(st.fp32_bytes, bytes);
    assert_int_equal(context_bytes(), c0 + bytes); /* one block */
    assert_int_equal(act_bytes(), a0);             /* x left ACT, y joined it */
    assert_true(st.encode_s == 0);
    actc_store_item items[4];
    assert_int_equal(actc_store_list(ctx, items, 4), 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(items[i].codec, "fp32");
        assert_int_equal(items[i].stored_bytes, bytes);
    }
    backward_sum(ctx, y);
    assert_int_equal(g_nloads, 3);
    for (int i = 0; i < 3; i++) {
        assert_ptr_equal(g_loaded_data[i], x->data); /* no copy */
        assert_false(g_loaded_x[i]);                 /* but a tensor of its own */
    }
    assert_int_equal(g_ctx_after[1], c0 + bytes); /* the EXACT entry still holds it */
    assert_int_equal(g_ctx_after[2], c0);         /* back to ACT with the last */
    /* x back, y's gradient (y itself went before backward) and the loss */
    assert_int_equal(g_act_after[2], a0 + bytes + sizeof(float));
    st = store_stats(ctx);
    assert_true(st.encode_s == 0 && st.decode_s == 0);
    actc_tensor_drop_grad(x);

    /* The store's reference can be the last one: the data lives until
     * backward, then goes. */
    actc_tensor *x2 = tu_rand(2, s, 22, -1, 1, 1);
    y = t_saver(ctx, x2, kinds, 1);
    actc_tensor_release(x2); /* the caller's reference: x2's data stays */
    assert_non_null(x2->data);
    assert_int_equal(context_bytes(), c0 + bytes);
    g_nloads = 0;
    backward_sum(ctx, y);
    assert_int_equal(g_ctx_after[0], c0); /* freed with the load */

    /* A store cleared before backward (after an error) lets its references
     * go: the tensor still held by the caller keeps its values in ACT, the
     * one only the store held is freed. */
    actc_tensor *x3 = tu_rand(2, s, 23, -1, 1, 1), *x4 = tu_rand(2, s, 24, -1, 1, 1);
    float keep[240];
    memcpy(keep, x3->data, sizeof keep);
    actc_tensor *y3 = t_saver(ctx, x3, kinds, 3), *y4 = t_saver(ctx, x4, kinds, 2);
    actc_tensor_release(x4);
    assert_int_equal(context_bytes(), c0 + 2 * bytes);
    actc_ctx_reset(ctx);
    assert_int_equal(context_bytes(), c0);
    assert_int_equal(store_stats(ctx).stored_bytes, 0);
    assert_memory_equal(x3->data, keep, sizeof keep);
    actc_ctx_reset(ctx); /* twice: nothing released twice */
    actc_tensor_release(y3);
    actc_tensor_release(y4);
    actc_tensor_release(x3);
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    assert_int_equal(tu_mem_now(), m0);
}

/* A parameter's save is a copy (its bytes stay PARAM's, the optimizer
 * writes it in place): a change after the save does not reach backward. */
static void test_parameter_saves_copy(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now();
    int s[1] = {16};
    actc_tensor *p = actc_param_new(1, s, "p");
    tu_fill_uniform(p, 25, -1, 1);
    float before[16];
    memcpy(before, p->data, sizeof before);
    actc_ctx *ctx = actc_ctx_new();
    actc_mem_stats a, b;
    actc_mem_get_stats(&a);
    actc_save_kind kinds[1] = {ACTC_SAVE_EXACT};
    g_nloads = 0;
    actc_tensor *y = t_saver(ctx, p, kinds, 1);
    actc_mem_get_stats(&b);
    assert_int_equal(b.current[ACTC_MEM_PARAM], a.current[ACTC_MEM_PARAM]);
    assert_int_equal(b.current[ACTC_MEM_CONTEXT], a.current[ACTC_MEM_CONTEXT] + sizeof before);
    for (int i = 0; i < 16; i++) p->data[i] += 1.0f;
    actc_tensor_mark_changed(p);
    backward_sum(ctx, y);
    assert_true(g_loaded_data[0] != p->data);
    assert_int_equal(context_bytes(), a.current[ACTC_MEM_CONTEXT]);
    actc_tensor_drop_grad(p);
    actc_tensor_release(p);
    actc_ctx_free(ctx);
    assert_int_equal(tu_mem_now(), m0);
}

/* A user's operator through the public API alone: y = 2 x, saving x, whose
 * backward reads the save whole (mode 0) or by rows (mode 1). */
static actc_status twice_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    float *gx;
    actc_status st = actc_grad_buffer(ctx, x, &gx);
    if (st != ACTC_OK || !gx) return st;
    if (node->iattr[0] == 0) {
        actc_tensor *xs = actc_load(ctx, node, 0);
        if (!xs) return actc_last_status();
        actc_tensor_release(xs);
    } else {
        float row[64];
        if ((st = actc_load_rows(ctx, node, 0, 0, 1, row)) != ACTC_OK) return st;
    }
    for (size_t i = 0; i < x->numel; i++) gx[i] += 2.0f * node->output->grad->data[i];
    return ACTC_OK;
}
static actc_tensor *user_twice(actc_ctx *ctx, actc_tensor *x, int rows)
{
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    for (size_t i = 0; i < x->numel; i++) y->data[i] = 2.0f * x->data[i];
    actc_node *node;
    actc_status st = actc_node_new(ctx, "user_twice", twice_backward, y, 1, &x, &node);
    if (st == ACTC_OK && node) {
        node->iattr[0] = rows;
        st = actc_save(ctx, node, x, ACTC_SAVE_ACT);
    }
    if (st != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    return y;
}

/* A saved tensor written in place (and said so with
 * actc_tensor_mark_changed) makes its load fail, naming the operator, the
 * save and the shape, through actc_load and actc_load_rows alike; a store
 * that kept a copy (bf16) still has the values of the save.  The same
 * tensor saved again after the change is not de-duplicated. */
static void test_modified_after_save(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now();
    int s[2] = {3, 5};
    for (int rows = 0; rows < 2; rows++)
        for (int bf = 0; bf < 2; bf++) {
            actc_tensor *x = tu_rand(2, s, 26, -1, 1, 1);
            actc_ctx *ctx = actc_ctx_new();
            assert_int_equal(actc_ctx_set_policy(ctx, bf ? "bf16" : "none"), ACTC_OK);
            actc_tensor *y = user_twice(ctx, x, rows);
            assert_non_null(y);
            x->data[0] += 1.0f; /* what a careless in-place operator would do */
            actc_tensor_mark_changed(x);
            actc_tensor *loss = t_sum(ctx, y);
            actc_tensor_release(y);
            const actc_status st = actc_backward(ctx, loss);
            actc_tensor_release(loss);
            if (bf) {
                assert_int_equal(st, ACTC_OK);
            } else {
                assert_int_equal(st, ACTC_ERR_STATE);
                const char *msg = actc_last_error();
                print_message("%s\n", msg);
                assert_non_null(strstr(msg, "modified in place after it was saved for backward"));
                assert_non_null(strstr(msg, "user_twice"));
                assert_non_null(strstr(msg, "save 0"));
                assert_non_null(strstr(msg, "[3, 5]"));
                actc_clear_error();
            }
            actc_ctx_reset(ctx);
            actc_tensor_drop_grad(x);
            actc_ctx_free(ctx);
            actc_tensor_release(x);
        }

    actc_tensor *x = tu_rand(2, s, 27, -1, 1, 1);
    actc_ctx *ctx = actc_ctx_new();
    actc_save_kind kinds[1] = {ACTC_SAVE_ACT};
    actc_tensor *y1 = t_saver(ctx, x, kinds, 1);
    actc_tensor_mark_changed(x);
    actc_tensor *y2 = t_saver(ctx, x, kinds, 1);
    assert_int_equal(store_stats(ctx).n_dedup, 0);
    assert_int_equal(actc_store_list(ctx, NULL, 0), 2);
    actc_ctx_reset(ctx);
    actc_tensor_release(y1);
    actc_tensor_release(y2);
    actc_ctx_free(ctx);
    actc_tensor_release(x);
    assert_int_equal(tu_mem_now(), m0);
}

/* ---- every model family: references give the copies' gradients ---------- */

/* The fp32 codec's functions at another address: the store copies what a
 * policy answering it keeps (only actc_codec_fp32 itself is held). */
static actc_codec g_fp32_copy;
static actc_status copy_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                               actc_codec_args *args)
{
    (void)p, (void)d, (void)args;
    *codec = &g_fp32_copy;
    return ACTC_OK;
}

/* How fp32 saves are kept: by reference (`none`), copied by the store
 * (every one, EXACT ones too), or copied because the policy's codec is not
 * actc_codec_fp32 (ACT saves). */
enum { KEEP_REF, KEEP_STORE_COPY, KEEP_POLICY_COPY };

/* The gradients of every parameter (concatenated, malloc'ed; *n floats) and
 * the loss after one step of model `name` at a tiny shape.  regions 1: plan
 * every recompute region (blocks, norms, activations) for recompute; 2: the
 * textbook attention (it saves the probabilities). */
static float *model_grads(const char *name, int keep, int regions, size_t *n, float *loss_out)
{
    actc_model_opts mo = actc_model_default_opts();
    mo.seed = 31;
    if (regions == 2) mo.attention = ACTC_ATTN_NAIVE;
    const int lm = actc_model_name_takes_tokens(name), graph = actc_model_name_takes_graph(name);
    actc_graph *g = NULL;
    if (lm) {
        mo.n_layers = 2, mo.width = 32, mo.n_heads = 4, mo.context = 16, mo.vocab = 48;
    } else if (graph) {
        actc_sbm_opts so = actc_sbm_default_opts();
        so.n = 60, so.classes = 3, so.n_features = 8, so.degree = 5, so.n_train = 30, so.n_val = 10, so.seed = 4;
        assert_int_equal(actc_graph_sbm(&so, &g), ACTC_OK);
        mo.in_channels = g->n_features, mo.in_h = mo.in_w = 1, mo.num_classes = g->n_classes;
        mo.width = 8, mo.n_heads = 2, mo.n_layers = 2, mo.dropout = 0.2f;
    } else {
        mo.in_h = mo.in_w = 8, mo.width = 24, mo.dropout = 0.25f;
    }
    actc_model *m;
    if (actc_model_create(name, &mo, &m) != ACTC_OK) fail_msg("%s: %s", name, actc_last_error());
    actc_ctx *ctx = actc_ctx_new();
    if (keep == KEEP_POLICY_COPY) {
        g_fp32_copy = actc_codec_fp32;
        actc_policy *p;
        assert_int_equal(actc__policy_new("test-fp32-copy", 0, copy_choose, &p), ACTC_OK);
        assert_int_equal(actc__ctx_install_policy(ctx, p), ACTC_OK);
    } else {
        assert_int_equal(actc_ctx_set_policy(ctx, "none"), ACTC_OK);
    }
    ctx->fp32_copies = keep == KEEP_STORE_COPY;
    for (int r = 0; regions == 1 && r < ACTC_REGION_NKINDS; r++)
        if (r != ACTC_REGION_ATTN) assert_int_equal(actc_ctx_set_region_plan(ctx, r, ACTC_PLAN_RECOMPUTE), ACTC_OK);
    actc_tensor *logits, *x = NULL;
    const int B = 3, T = 12;
    int32_t ids[36], labels[36];
    actc_source *src = NULL;
    actc_batch b;
    for (int i = 0; i < B * T; i++) ids[i] = (int32_t)((i * 7 + 3) % 48), labels[i] = (int32_t)((i * 5 + 1) % 48);
    if (lm) {
        logits = actc_model_forward_tokens(m, ctx, ids, B, T);
    } else if (graph) {
        assert_int_equal(actc_source_graph(g, 0, &src), ACTC_OK);
        assert_int_equal(actc_source_get(src, 0, 0, 0, &b), ACTC_OK);
        logits = actc_model_forward_batch(m, ctx, &b);
    } else {
        int xs[4] = {4, 1, 8, 8};
        x = tu_rand(4, xs, 32, -1, 1, 0);
        for (int i = 0; i < 4; i++) labels[i] = i % 10;
        logits = actc_model_forward(m, ctx, x);
    }
    if (!logits) fail_msg("%s forward: %s", name, actc_last_error());
    actc_tensor *loss = actc_cross_entropy(ctx, logits, graph ? b.labels : labels, -1, NULL);
    actc_tensor_release(logits);
    assert_non_null(loss);
    *loss_out = loss->data[0];
    if (actc_backward(ctx, loss) != ACTC_OK) fail_msg("%s backward: %s", name, actc_last_error());
    actc_tensor_release(loss);
    actc_tensor **params;
    const int np = actc_model_params(m, &params);
    *n = 0;
    for (int i = 0; i < np; i++) *n += params[i]->numel;
    float *out = calloc(*n, sizeof *out);
    assert_non_null(out);
    size_t o = 0;
    for (int i = 0; i < np; i++) {
        if (params[i]->grad) memcpy(out + o, params[i]->grad->data, params[i]->numel * sizeof(float));
        o += params[i]->numel;
    }
    actc_tensor_release(x);
    actc_source_free(src);
    actc_model_zero_grad(m);
    actc_ctx_free(ctx);
    actc_model_free(m);
    actc_graph_free(g);
    return out;
}

static void test_models_references_match_copies(void **state)
{
    (void)state;
    size_t m0 = tu_mem_now();
    static const struct {
        const char *name;
        int regions;
    } runs[] = {{"mlp", 0},   {"resnet20", 0}, {"gpt", 0}, {"gpt", 1}, {"gpt", 2},
                {"llama", 0}, {"llama", 1},    {"gcn", 0}, {"gat", 0}, {"gcnii", 0}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        size_t n[3];
        float loss[3], *gr[3];
        for (int k = 0; k < 3; k++) gr[k] = model_grads(runs[r].name, k, runs[r].regions, &n[k], &loss[k]);
        static const char *const how[] = {"", " (recomputed regions)", " (textbook attention)"};
        print_message("%-9s%s: %zu gradients, loss %.6f\n", runs[r].name, how[runs[r].regions], n[0],
                      (double)loss[0]);
        for (int k = 1; k < 3; k++) {
            assert_int_equal(n[k], n[0]);
            assert_memory_equal(&loss[k], &loss[0], sizeof loss[0]);
            assert_memory_equal(gr[k], gr[0], n[0] * sizeof(float));
        }
        for (int k = 0; k < 3; k++) free(gr[k]);
    }
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
        cmocka_unit_test(test_reference_saves),
        cmocka_unit_test(test_parameter_saves_copy),
        cmocka_unit_test(test_modified_after_save),
        cmocka_unit_test(test_models_references_match_copies),
        cmocka_unit_test(test_dropout_ce_saves),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    actc_shutdown(); /* convolutions ran on oneDNN: free its engine and primitives */
    return failed;
}
