/* The engine end to end on real models: the memory table adds up, the
 * context the store reports equals the fp32 sizes of what the operators saved
 * (predicted here from the architecture), bf16 halves the ACT part, forward
 * intermediates die early, and nothing leaks. */
#include "testutil.h"
#include "codec/codec.h"
#include <math.h>
#include <string.h>

typedef struct {
    actc_store_stats ss;
    actc_mem_stats ms;
    double loss;
} step_out;

/* One training step of `model` at batch b with `policy`; stats after it. */
static void run_step(const char *model, int b, const char *policy, step_out *out)
{
    actc_mem_stats start;
    actc_mem_get_stats(&start);
    actc_model_opts mo = actc_model_default_opts();
    mo.seed = 3;
    actc_model *m;
    assert_int_equal(actc_model_create(model, &mo, &m), ACTC_OK);
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, policy), ACTC_OK);
    actc_tensor **params;
    int np = actc_model_params(m, &params);
    actc_optim *opt = actc_sgd_new(params, np, 0.9f, 1, 5e-4f);
    int shp[4] = {b, 1, 28, 28};
    actc_tensor *x = tu_rand(4, shp, 11, -1, 1, 0);
    int32_t labels[64];
    for (int i = 0; i < b; i++) labels[i] = i % 10;
    actc_mem_reset_peak();
    actc_store_reset_peak(ctx);
    actc_tensor *logits = actc_model_forward(m, ctx, x);
    assert_non_null(logits);
    actc_tensor *loss = actc_cross_entropy(ctx, logits, labels, -1, NULL);
    actc_tensor_release(logits);
    assert_non_null(loss);
    out->loss = loss->data[0];
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    actc_tensor_release(loss);
    assert_int_equal(actc_optim_step(opt, 0.1f), ACTC_OK);
    actc_store_get_stats(ctx, &out->ss);
    actc_mem_get_stats(&out->ms);
    /* After backward the store and tape are empty. */
    assert_int_equal(out->ss.stored_bytes, 0);
    assert_int_equal(actc_tape_size(ctx), 0);
    actc_tensor_release(x);
    actc_model_zero_grad(m);
    actc_optim_free(opt);
    actc_ctx_free(ctx);
    actc_model_free(m);
    actc_mem_stats end;
    actc_mem_get_stats(&end);
    assert_int_equal(end.current_total, start.current_total); /* no leak */
}

/* Elements per sample of every distinct tensor ResNet-20 (28x28) saves:
 * the input, each convolution's output (batch-norm input), each ReLU output,
 * the pooled features and the logits. */
static size_t resnet20_saved_per_sample(void)
{
    size_t n = 784;                       /* image, saved by the stem conv     */
    n += 2 * 16 * 784;                    /* stem conv out, stem relu out      */
    const int ch[3] = {16, 32, 64}, hw[3] = {784, 196, 49};
    for (int s = 0; s < 3; s++)
        for (int j = 0; j < 3; j++) {
            size_t map = (size_t)ch[s] * (size_t)hw[s];
            n += 4 * map;                 /* conv1 out, relu1 out, conv2 out, block relu out */
            if (s > 0 && j == 0) n += map; /* shortcut conv out */
        }
    return n + 64 + 10;                   /* pooled features, logits */
}

static void test_resnet20_context_matches_architecture(void **state)
{
    (void)state;
    const int b = 8;
    step_out none, bf;
    run_step("resnet20", b, "none", &none);
    /* EXACT: mean and rstd per channel of each of the 22 batch norms. */
    size_t bn_channels = 16 + 6 * 16 + 7 * 32 + 7 * 64;
    size_t expect = (size_t)b * resnet20_saved_per_sample() * 4 + 2 * bn_channels * 4;
    print_message("resnet20 batch %d: fp32 context %zu, predicted %zu, stored %zu\n", b, none.ss.fp32_peak, expect,
                  none.ss.stored_peak);
    assert_int_equal(none.ss.fp32_peak, expect);
    /* none stores ACT and EXACT as fp32: equal to the reference. */
    assert_int_equal(none.ss.stored_by_kind[ACTC_SAVE_ACT], none.ss.fp32_by_kind[ACTC_SAVE_ACT]);
    assert_int_equal(none.ss.stored_by_kind[ACTC_SAVE_EXACT], 2 * bn_channels * 4);
    /* 19 ReLU masks at 1 bit per element. */
    size_t relu_elems = (size_t)b * (16 * 784 + 6 * 16 * 784 + 6 * 32 * 196 + 6 * 64 * 49);
    assert_int_equal(none.ss.stored_by_kind[ACTC_SAVE_MASK], relu_elems / 8);
    /* The shortcut conv saves the block input that conv1 already saved. */
    assert_true(none.ss.n_dedup >= 2);

    run_step("resnet20", b, "bf16", &bf);
    assert_int_equal(bf.ss.fp32_peak, none.ss.fp32_peak);
    assert_int_equal(2 * bf.ss.stored_by_kind[ACTC_SAVE_ACT], none.ss.stored_by_kind[ACTC_SAVE_ACT]);
    assert_int_equal(bf.ss.stored_by_kind[ACTC_SAVE_MASK], none.ss.stored_by_kind[ACTC_SAVE_MASK]);
    assert_int_equal(bf.ss.stored_by_kind[ACTC_SAVE_EXACT], none.ss.stored_by_kind[ACTC_SAVE_EXACT]);
    assert_true(bf.ms.peak[ACTC_MEM_CONTEXT] < none.ms.peak[ACTC_MEM_CONTEXT]);
}

/* The distinct ACT tensors ResNet-20 saves, per sample: D elements, saved
 * by a convolution (ActNN L1 quantizes those only) or by the loss (the actnn
 * levels keep those fp32).  The last ReLU output feeds the global pooling,
 * which keeps nothing, so it is only a MASK. */
typedef struct {
    size_t d;
    int conv, loss;
    int c, side; /* channels and side of the square maps, side 0: a vector */
} act_save;

static int resnet20_act_saves(act_save *a)
{
    int n = 0;
    a[n++] = (act_save){784, 1, 0, 1, 28};           /* image -> stem conv            */
    a[n++] = (act_save){16 * 784, 0, 0, 16, 28};     /* stem conv out -> BN           */
    a[n++] = (act_save){16 * 784, 1, 0, 16, 28};     /* stem ReLU out -> layer1.0     */
    const int ch[3] = {16, 32, 64}, side[3] = {28, 14, 7};
    for (int s = 0; s < 3; s++)
        for (int j = 0; j < 3; j++) {
            const size_t map = (size_t)ch[s] * (size_t)(side[s] * side[s]);
            const act_save bn = {map, 0, 0, ch[s], side[s]}, conv = {map, 1, 0, ch[s], side[s]};
            a[n++] = bn;                                /* conv1 out -> BN               */
            a[n++] = conv;                              /* ReLU1 out -> conv2            */
            a[n++] = bn;                                /* conv2 out -> BN               */
            if (s > 0 && j == 0) a[n++] = bn;           /* shortcut conv out -> BN       */
            if (s < 2 || j < 2) a[n++] = conv;          /* block out -> next convs       */
        }
    a[n++] = (act_save){64, 0, 0, 1, 0};             /* pooled features -> fc         */
    a[n++] = (act_save){10, 0, 1, 1, 0};             /* logits -> cross-entropy       */
    return n;
}

/* Bytes of one sample of D elements in the per-group quantizer at b bits:
 * bf16 zero point and range per group of 256, then ceil(g * b / 8) bytes
 * per group of g elements (a full group: 32 b bytes). */
static size_t quant_bytes(size_t d, int b)
{
    size_t G = ACTC_QUANT_GROUP;
    return (d + G - 1) / G * 4 + d / G * 32 * (size_t)b + ((d % G) * (size_t)b + 7) / 8;
}

/* ACT bytes of ResNet-20 at batch n when conv inputs take conv_bits, other
 * tensors other_bits and loss inputs loss_bits (0 = fp32). */
static size_t resnet20_act_bytes(int n, int conv_bits, int other_bits, int loss_bits)
{
    act_save a[64];
    int k = resnet20_act_saves(a);
    size_t sum = 0;
    for (int i = 0; i < k; i++) {
        int b = a[i].loss ? loss_bits : a[i].conv ? conv_bits : other_bits;
        sum += (size_t)n * (b ? quant_bytes(a[i].d, b) : a[i].d * 4);
    }
    return sum;
}

/* The quantizing policies store exactly what the codec's byte formula says
 * for every tensor the architecture saves; the fp32 reference, masks and
 * batch statistics do not change. */
static void test_resnet20_quantized_context_matches_architecture(void **state)
{
    (void)state;
    const int b = 8;
    step_out none, o;
    run_step("resnet20", b, "none", &none);
    assert_int_equal(none.ss.stored_by_kind[ACTC_SAVE_ACT], resnet20_act_bytes(b, 0, 0, 0));
    const struct {
        const char *policy;
        int conv, other, loss;
    } cases[] = {{"quant:2", 2, 2, 0}, {"quant:8", 8, 8, 0}, {"actnn:L1", 4, 0, 0}, {"actnn:L2", 4, 4, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_step("resnet20", b, cases[i].policy, &o);
        size_t expect = resnet20_act_bytes(b, cases[i].conv, cases[i].other, cases[i].loss);
        print_message("%-9s ACT stored %zu predicted %zu, context ratio %.2fx\n", cases[i].policy,
                      o.ss.stored_by_kind[ACTC_SAVE_ACT], expect, (double)o.ss.fp32_peak / o.ss.stored_peak);
        assert_int_equal(o.ss.stored_by_kind[ACTC_SAVE_ACT], expect);
        assert_int_equal(o.ss.fp32_peak, none.ss.fp32_peak);
        assert_int_equal(o.ss.stored_by_kind[ACTC_SAVE_MASK], none.ss.stored_by_kind[ACTC_SAVE_MASK]);
        assert_int_equal(o.ss.stored_by_kind[ACTC_SAVE_EXACT], none.ss.stored_by_kind[ACTC_SAVE_EXACT]);
    }
    /* L3 at 2 bits: per-sample bits vary, but the data bits stay within the
     * budget, so ACT is at most the uniform 2-bit size plus one byte of bits
     * per sample and tensor and one byte of tail rounding per sample and
     * tensor (the loss input stays fp32). */
    run_step("resnet20", b, "actnn:L3", &o);
    act_save a[64];
    size_t slack = 2 * (size_t)b * (size_t)resnet20_act_saves(a);
    size_t bound = resnet20_act_bytes(b, 2, 2, 0) + slack;
    print_message("actnn:L3  ACT stored %zu, bound %zu, context ratio %.2fx\n",
                  o.ss.stored_by_kind[ACTC_SAVE_ACT], bound, (double)o.ss.fp32_peak / o.ss.stored_peak);
    assert_true(o.ss.stored_by_kind[ACTC_SAVE_ACT] <= bound);
    assert_true(o.ss.stored_by_kind[ACTC_SAVE_ACT] >= resnet20_act_bytes(b, 1, 1, 0));
}

/* DIVISION's bytes for one sample of a save, B = 8, Q = 2: per channel of an
 * N x N map the paper's N^2 Q/8 + 4 bytes plus 2 ceil(N/B)^2 of bf16 LFC
 * (appendix G's arithmetic); the fc input is one 1-D map per sample; the
 * loss input stays fp32. */
static size_t division_bytes(const act_save *s)
{
    if (s->loss) return s->d * 4;
    const size_t N = (size_t)(s->side ? s->side : 1), M = s->side ? N * N : s->d;
    const size_t blocks = s->side ? ((N + 7) / 8) * ((N + 7) / 8) : (s->d + 7) / 8;
    return (size_t)s->c * ((M * 2 + 7) / 8 + 4 + 2 * blocks); /* whole bytes: 7x7 takes 13, not 12.25 */
}

/* DIVISION's compression rate by Theorem 3A (appendix G), B = 8, Q = 2:
 * R = 9N^2 / (2 (2 ceil(N/B)^2 + N^2 Q/8 + 4) + N^2/8) per channel of a
 * conv-BN-ReLU block on N x N maps, averaged over blocks {count, channels,
 * N} weighted by their fp32 bytes.  The paper's reference counts 4N^2 for
 * the conv input, 4N^2 for the BN input and N^2 (int8) for the ReLU;
 * actc's counts the ReLU output once, as the next convolution's input (what
 * PyTorch keeps), so actc's ratio is this times 8/9. */
static double theorem3a(const int (*blocks)[3], int n)
{
    double ref = 0, div = 0;
    for (int i = 0; i < n; i++) {
        const double cnt = blocks[i][0], c = blocks[i][1], N = blocks[i][2], N2 = N * N;
        const double L = (double)((blocks[i][2] + 7) / 8) * ((blocks[i][2] + 7) / 8);
        ref += cnt * c * 9 * N2;
        div += cnt * c * (2 * (2 * L + N2 * 2 / 8 + 4) + N2 / 8);
    }
    return ref / div;
}

/* The context under `division` is what the Theorem 3A arithmetic gives for
 * ResNet-20's saves, to the byte; the masks (N^2/8, the theorem's ReLU
 * term), batch statistics and fp32 reference do not change.  Also prints the
 * paper's block formula R = 9N^2 / (2 (2 ceil(N/B)^2 + N^2 Q/8 + 4) + N^2/8)
 * averaged over the conv-BN-ReLU blocks, whose reference also counts one
 * byte per ReLU element that actc's (PyTorch-like) reference does not. */
static void test_resnet20_division_context_matches_theorem(void **state)
{
    (void)state;
    const int b = 8;
    step_out none, o;
    run_step("resnet20", b, "none", &none);
    run_step("resnet20", b, "division", &o);
    act_save a[64];
    const int k = resnet20_act_saves(a);
    size_t expect = 0;
    for (int i = 0; i < k; i++) expect += (size_t)b * division_bytes(&a[i]);
    assert_int_equal(o.ss.stored_by_kind[ACTC_SAVE_ACT], expect);
    assert_int_equal(o.ss.fp32_peak, none.ss.fp32_peak);
    assert_int_equal(o.ss.stored_by_kind[ACTC_SAVE_MASK], none.ss.stored_by_kind[ACTC_SAVE_MASK]);
    assert_int_equal(o.ss.stored_by_kind[ACTC_SAVE_EXACT], none.ss.stored_by_kind[ACTC_SAVE_EXACT]);
    const double measured = (double)o.ss.fp32_peak / (double)o.ss.stored_peak;
    /* ResNet-20's 19 conv-BN-ReLU blocks: the stem and 18 block
     * convolutions (the shortcut convolutions have no ReLU of their own). */
    const int blocks[][3] = {{1, 16, 28}, {6, 16, 28}, {6, 32, 14}, {6, 64, 7}};
    const double theorem = theorem3a(blocks, 4), theorem_actc = theorem * 8 / 9;
    print_message("resnet20 division: ACT %zu bytes = predicted %zu; context ratio %.2fx measured, Theorem 3A "
                  "over the blocks %.2fx (paper's reference) = %.2fx with actc's\n",
                  o.ss.stored_by_kind[ACTC_SAVE_ACT], expect, measured, theorem, theorem_actc);
    assert_true(fabs(measured / theorem_actc - 1) < 0.05);
}

/* ResNet-18 (CIFAR-style stem, 28x28 input: maps of 28, 14, 7 and 4) under
 * `division`: the measured context ratio within 5% of Theorem 3A. */
static void test_resnet18_division_ratio_matches_theorem(void **state)
{
    (void)state;
    step_out o;
    run_step("resnet18", 4, "division", &o);
    const int blocks[][3] = {{1, 64, 28}, {4, 64, 28}, {4, 128, 14}, {4, 256, 7}, {4, 512, 4}};
    const double measured = (double)o.ss.fp32_peak / (double)o.ss.stored_peak, theorem = theorem3a(blocks, 5);
    print_message("resnet18 division: context ratio %.2fx measured, Theorem 3A %.2fx (paper's reference) = %.2fx "
                  "with actc's\n", measured, theorem, theorem * 8 / 9);
    assert_true(fabs(measured / (theorem * 8 / 9) - 1) < 0.05);
}

static void test_memory_table_adds_up(void **state)
{
    (void)state;
    step_out o;
    run_step("resnet20", 16, "none", &o);
    size_t sum = 0, mx = 0;
    for (int c = 0; c < ACTC_MEM_NCAT; c++) {
        sum += o.ms.peak[c];
        if (o.ms.peak[c] > mx) mx = o.ms.peak[c];
    }
    assert_true(o.ms.peak_total <= sum);
    assert_true(o.ms.peak_total >= mx);
    /* The CONTEXT category holds exactly the store's payloads. */
    assert_int_equal(o.ms.peak[ACTC_MEM_CONTEXT], o.ss.stored_peak);
    /* Forward intermediates are freed as soon as consumed: live activations
     * stay far below what is saved for backward. */
    print_message("peaks: ACT %zu CONTEXT %zu SCRATCH %zu total %zu\n", o.ms.peak[ACTC_MEM_ACT],
                  o.ms.peak[ACTC_MEM_CONTEXT], o.ms.peak[ACTC_MEM_SCRATCH], o.ms.peak_total);
    assert_true(o.ms.peak[ACTC_MEM_ACT] * 4 < o.ms.peak[ACTC_MEM_CONTEXT]);
}

static void test_models_build_and_step(void **state)
{
    (void)state;
    const char *models[] = {"mlp", "resnet32", "resnet18"};
    const size_t nparams[] = {0, 0, 0};
    (void)nparams;
    for (int i = 0; i < 3; i++) {
        step_out o;
        run_step(models[i], 4, "none", &o);
        assert_true(o.loss > 1.0 && o.loss < 5.0); /* ~ln(10) at initialisation */
    }
    actc_model *m;
    actc_model_opts mo = actc_model_default_opts();
    assert_int_equal(actc_model_create("resnet20", &mo, &m), ACTC_OK);
    assert_int_equal(actc_model_num_params(m), 272186); /* 0.27M, as He et al. (with 1x1 projections) */
    actc_model_free(m);
    assert_int_equal(actc_model_create("resnet18", &mo, &m), ACTC_OK);
    assert_true(actc_model_num_params(m) > 11000000 && actc_model_num_params(m) < 11300000);
    actc_model_free(m);
    assert_int_equal(actc_model_create("vgg", &mo, &m), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "vgg"));
}

static void test_eval_mode_records_nothing(void **state)
{
    (void)state;
    actc_model_opts mo = actc_model_default_opts();
    actc_model *m;
    assert_int_equal(actc_model_create("resnet20", &mo, &m), ACTC_OK);
    actc_ctx *ctx = actc_ctx_new();
    actc_ctx_set_training(ctx, 0);
    int shp[4] = {4, 1, 28, 28};
    actc_tensor *x = tu_rand(4, shp, 1, -1, 1, 0);
    actc_tensor *y = actc_model_forward(m, ctx, x);
    assert_non_null(y);
    assert_int_equal(actc_tape_size(ctx), 0);
    actc_store_stats ss;
    actc_store_get_stats(ctx, &ss);
    assert_int_equal(ss.n_saves, 0);
    int bad[4] = {4, 3, 28, 28};
    actc_tensor *xb = tu_rand(4, bad, 1, -1, 1, 0);
    assert_null(actc_model_forward(m, ctx, xb));
    assert_int_equal(actc_last_status(), ACTC_ERR_INVALID);
    actc_tensor_release(xb);
    actc_tensor_release(y);
    actc_tensor_release(x);
    actc_ctx_free(ctx);
    actc_model_free(m);
}

/* ---- out of memory in backward ------------------------------------------ */

/* y = 2x, an operator written as the header's "Writing an operator" says:
 * its backward returns what actc_grad_buffer returns. */
static actc_status twice_backward(actc_ctx *ctx, actc_node *node)
{
    float *gx;
    actc_status st = actc_grad_buffer(ctx, node->inputs[0], &gx);
    if (st != ACTC_OK || !gx) return st;
    const float *gy = node->output->grad->data;
    for (size_t i = 0; i < node->inputs[0]->numel; i++) gx[i] += 2.0f * gy[i];
    return ACTC_OK;
}

static actc_tensor *twice(actc_ctx *ctx, actc_tensor *x, actc_tensor *unused)
{
    (void)unused;
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    assert_non_null(y);
    for (size_t i = 0; i < x->numel; i++) y->data[i] = 2.0f * x->data[i];
    actc_node *node;
    assert_int_equal(actc_node_new(ctx, "twice", twice_backward, y, 1, &x, &node), ACTC_OK);
    assert_non_null(node);
    return y;
}

static actc_tensor *linear_nobias(actc_ctx *ctx, actc_tensor *x, actc_tensor *w)
{
    return actc_linear(ctx, x, w, NULL);
}

/* A backward pass whose gradient buffer cannot be allocated fails with
 * ACTC_ERR_OOM and the allocator's message: it does not return ACTC_OK
 * with the gradient missing.  The budget leaves room for everything the
 * backward needs except the parameter's gradient, which is allocated last
 * (the output gradient of the operator is alive then).  Both a user-defined
 * operator (through the public actc_grad_buffer) and a built-in one
 * (linear).  Afterwards nothing is left behind, and without the budget the
 * same step works. */
static void test_backward_oom_is_an_error(void **state)
{
    (void)state;
    typedef actc_tensor *(*op_fn)(actc_ctx *, actc_tensor *, actc_tensor *);
    const op_fn ops[2] = {twice, linear_nobias};
    const char *names[2] = {"user-defined twice", "linear"};
    const size_t m0 = tu_mem_now();
    for (int k = 0; k < 2; k++) {
        int xs[2] = {64, 64}, ws[2] = {64, 64};
        /* twice: the parameter p is the operator's input; linear: its
         * weight (the input x needs no gradient). */
        actc_tensor *p = actc_param_new(2, k == 0 ? xs : ws, "p");
        assert_non_null(p);
        tu_fill_uniform(p, 21, -1, 1);
        actc_tensor *x = k == 0 ? NULL : tu_rand(2, xs, 22, -1, 1, 0);
        actc_ctx *ctx = actc_ctx_new();
        assert_non_null(ctx);
        const size_t gbytes = p->numel * sizeof(float);
        for (int budgeted = 1; budgeted >= 0; budgeted--) {
            actc_tensor *y = k == 0 ? ops[k](ctx, p, NULL) : ops[k](ctx, x, p);
            assert_non_null(y);
            actc_tensor *loss = tu_wsum(ctx, y, 5);
            actc_tensor_release(y);
            /* Room for the loss's and y's gradients (y's is as large as p's),
             * not for p's as well. */
            if (budgeted) actc_mem_set_budget(tu_mem_now() + gbytes + gbytes / 2);
            actc_clear_error();
            actc_status st = actc_backward(ctx, loss);
            actc_mem_set_budget(0);
            actc_tensor_release(loss);
            if (budgeted) {
                print_message("%-20s backward over budget: %s: %s\n", names[k], actc_status_name(st),
                              actc_last_error());
                assert_int_equal(st, ACTC_ERR_OOM);
                assert_int_equal(actc_last_status(), ACTC_ERR_OOM);
                assert_non_null(strstr(actc_last_error(), "memory budget exceeded: GRAD"));
                assert_non_null(strstr(actc_last_error(), "'p'")); /* names the tensor */
                assert_null(p->grad);                              /* no partial gradient */
                assert_int_equal(actc_tape_size(ctx), 0);          /* the failed pass dropped the tape */
                actc_store_stats ss;
                actc_store_get_stats(ctx, &ss);
                assert_int_equal(ss.stored_bytes, 0);
            } else {
                assert_int_equal(st, ACTC_OK);
                assert_non_null(p->grad);
                double norm = 0;
                for (size_t i = 0; i < p->numel; i++) norm += fabs(p->grad->data[i]);
                assert_true(norm > 0);
            }
        }
        actc_ctx_free(ctx);
        actc_tensor_release(x);
        actc_tensor_release(p); /* its gradient goes with it */
        assert_int_equal(tu_mem_now(), m0);
    }
    actc_clear_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet20_context_matches_architecture),
        cmocka_unit_test(test_resnet20_quantized_context_matches_architecture),
        cmocka_unit_test(test_resnet20_division_context_matches_theorem),
        cmocka_unit_test(test_resnet18_division_ratio_matches_theorem),
        cmocka_unit_test(test_memory_table_adds_up),
        cmocka_unit_test(test_models_build_and_step),
        cmocka_unit_test(test_eval_mode_records_nothing),
        cmocka_unit_test(test_backward_oom_is_an_error),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    actc_shutdown(); /* the ResNets ran on oneDNN: free its engine and primitives */
    return failed;
}
