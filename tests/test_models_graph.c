/* Graph networks (gcn, gat, gcnii): whole-model gradient checks on a tiny
 * graph, training on a planted-partition graph under several policies,
 * the stored context of GCN against its exact formula, the same bits at
 * any thread count, the rules of a graph batch, and bad input. */
#include "testutil.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A small planted-partition graph: 4 blocks, 16 noisy features. */
static actc_graph *sbm(int n, uint64_t seed)
{
    actc_sbm_opts o = actc_sbm_default_opts();
    o.n = n;
    o.classes = 4;
    o.n_features = 16;
    o.degree = 8;
    o.p_in = 0.8;
    o.noise = 1.0;
    o.n_train = n / 5;
    o.n_val = n / 5;
    o.seed = seed;
    actc_graph *g = NULL;
    assert_int_equal(actc_graph_sbm(&o, &g), ACTC_OK);
    return g;
}

static actc_model *model(const char *name, const actc_graph *g, int layers, int width, int heads, float dropout)
{
    actc_model_opts o = actc_model_default_opts();
    o.in_channels = g->n_features;
    o.in_h = o.in_w = 1;
    o.num_classes = g->n_classes;
    o.n_layers = layers;
    o.width = width;
    o.n_heads = heads;
    o.dropout = dropout;
    o.seed = 5;
    actc_model *m = NULL;
    assert_int_equal(actc_model_create(name, &o, &m), ACTC_OK);
    assert_true(actc_model_takes_graph(m));
    assert_true(actc_model_name_takes_graph(name));
    return m;
}

/* The batch of a split: every node of it. */
typedef struct {
    actc_source *src;
    actc_batch b;
} split_batch;

static void split_open(split_batch *s, const actc_graph *g, int split)
{
    assert_int_equal(actc_source_graph(g, split, &s->src), ACTC_OK);
    assert_int_equal(actc_source_get(s->src, 0, 0, 0, &s->b), ACTC_OK);
    assert_ptr_equal(s->b.graph, g);
    assert_int_equal(actc_batch_samples(&s->b), 1);
}

typedef struct {
    actc_model *m;
    actc_batch *b;
} fwd_case;

static actc_tensor *f_model(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)in;
    fwd_case *c = user;
    return actc_model_forward_batch(c->m, ctx, c->b);
}

static void gradcheck(const char *name, int layers, int heads)
{
    const size_t m0 = tu_mem_now();
    actc_graph *g = sbm(24, 3);
    actc_model *m = model(name, g, layers, 8, heads, 0);
    split_batch s;
    split_open(&s, g, ACTC_SPLIT_TRAIN);
    fwd_case c = {m, &s.b};
    actc_tensor **all, *p[64];
    const int na = actc_model_params(m, &all);
    int np = 0;
    /* Larger weights than the initialisation, so attention scores differ by
     * O(1) and every path carries a gradient differences can see.  GAT's
     * att_dst is left out: where every score of a row falls on one side of
     * the LeakyReLU, the softmax cancels it and its gradient is exactly 0,
     * which relative differences cannot measure (its operator passes 1e-3
     * in test_ops_graph's GAT layer check). */
    for (int i = 0; i < na; i++) {
        tu_fill_uniform(all[i], 40 + (uint64_t)i, -0.4f, 0.4f);
        if (!strstr(all[i]->name, "att_dst")) p[np++] = all[i];
    }
    char what[64];
    snprintf(what, sizeof what, "%s, %d layers, all parameters", name, layers);
    /* Whole-model differences in fp32 are noisier than one operator's, and
     * on a 24-node graph a few ReLU / LeakyReLU inputs lie within the step
     * of their kink, which costs up to a few 1e-2 (it shrinks with the
     * step).  Each operator passes 1e-3 alone (test_ops_graph); 5e-2 here
     * still catches a missing connection or a wrong factor such as
     * GCNII's (1 - alpha), which give errors of 0.1 to 1. */
    const double err = tu_gradcheck(f_model, p, np, &c, 1e-3f);
    printf("gradcheck %-40s worst rel err %.3g\n", what, err);
    assert_true(err < 5e-2);
    actc_model_zero_grad(m);
    actc_source_free(s.src);
    actc_model_free(m);
    actc_graph_free(g);
    assert_int_equal(tu_mem_now(), m0);
}

static void test_gradcheck_gcn(void **state)
{
    (void)state;
    gradcheck("gcn", 2, 1);
    gradcheck("gcn", 3, 1);
}

static void test_gradcheck_gat(void **state)
{
    (void)state;
    gradcheck("gat", 2, 2);
}

static void test_gradcheck_gcnii(void **state)
{
    (void)state;
    gradcheck("gcnii", 1, 1);
    gradcheck("gcnii", 2, 1);
    gradcheck("gcnii", 1, 1);
    gradcheck("gcnii", 4, 1);
}

/* Train `steps` full-graph steps; the test accuracy. */
static double train(const char *name, const char *policy, const actc_graph *g, int layers, int steps, double *loss0,
                    double *loss1)
{
    actc_model *m = model(name, g, layers, 16, !strcmp(name, "gat") ? 4 : 1, 0.5f);
    actc_trainer_opts o = actc_trainer_default_opts();
    o.policy = policy;
    o.optim = "adamw";
    o.lr = 0.01f;
    o.weight_decay = 5e-4f;
    actc_trainer *t = NULL;
    assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_OK);
    split_batch tr, te;
    split_open(&tr, g, ACTC_SPLIT_TRAIN);
    for (int i = 0; i < steps; i++) {
        actc_step_result r;
        assert_int_equal(actc_trainer_step(t, &tr.b, &r), ACTC_OK);
        if (i == 0 && loss0) *loss0 = r.loss;
        if (loss1) *loss1 = r.loss;
        assert_true(isfinite(r.loss));
    }
    actc_source_free(tr.src);
    split_open(&te, g, ACTC_SPLIT_TEST);
    actc_source_free(te.src);
    actc_source *src;
    assert_int_equal(actc_source_graph(g, ACTC_SPLIT_TEST, &src), ACTC_OK);
    actc_eval_result ev;
    assert_int_equal(actc_trainer_evaluate(t, src, &ev), ACTC_OK);
    int c[3];
    actc_graph_split_counts(g, c);
    assert_int_equal(ev.rows, c[2]);
    actc_source_free(src);
    actc_trainer_free(t);
    actc_model_free(m);
    return ev.accuracy;
}

/* Every model learns the planted partition (chance is 25%; the features
 * alone give about 60%, the neighbourhoods far more) under fp32 and under
 * GACT's adaptive 2 and 4 bits. */
static void test_training(void **state)
{
    (void)state;
    const size_t m0 = tu_mem_now();
    actc_graph *g = sbm(1500, 7);
    const char *models[] = {"gcn", "gat", "gcnii"};
    const char *policies[] = {"none", "gact:4", "gact:2"};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            double l0, l1;
            const double acc = train(models[i], policies[j], g, i == 2 ? 8 : 2, 60, &l0, &l1);
            printf("%-6s %-7s loss %.3f -> %.3f, test acc %.1f%%\n", models[i], policies[j], l0, l1, 100 * acc);
            assert_true(l1 < 0.7 * l0);
            assert_true(acc > 0.85);
        }
    actc_graph_free(g);
    assert_int_equal(tu_mem_now(), m0);
}

/* GCN's context under `none`, from the operators' saves: the first layer
 * keeps its input features in fp32 (4 F bytes a node; dropout on the data
 * keeps no mask, the data needs no gradient); every later layer keeps its
 * input in fp32, the ReLU's 1-bit mask and the dropout's 1-bit mask (4 W +
 * 2 W / 8 bytes a node); propagation keeps nothing (the adjacency is the
 * graph's); the output keeps the labelled nodes' indices and
 * probabilities. */
static void test_context_formula(void **state)
{
    (void)state;
    actc_graph *g = sbm(1000, 2);
    const int W = 24, L = 3, K = g->n_classes, F = g->n_features;
    const size_t n = (size_t)g->n;
    actc_model *m = model("gcn", g, L, W, 1, 0.5f);
    split_batch s;
    split_open(&s, g, ACTC_SPLIT_TRAIN);
    const size_t B = (size_t)s.b.B;
    int32_t maxid = 0;
    for (size_t i = 0; i < B; i++) maxid = s.b.ids[i] > maxid ? s.b.ids[i] : maxid;
    const size_t idx_bytes = maxid < 256 ? 1 : maxid < 65536 ? 2 : 4;
    size_t expect = 4 * n * (size_t)F;
    for (int l = 1; l < L; l++) expect += 4 * n * W + 2 * ((n * W + 7) / 8);
    expect += B * idx_bytes + 4 * B * (size_t)K;
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, "none"), ACTC_OK);
    actc_ctx_set_training(ctx, 1);
    actc_tensor *y = actc_model_forward_batch(m, ctx, &s.b);
    assert_non_null(y);
    actc_tensor *loss = actc_cross_entropy(ctx, y, s.b.labels, -1, NULL);
    actc_tensor_release(y);
    const size_t got = tu_stored_after(ctx, loss);
    printf("gcn %d layers, width %d, %zu nodes, %d features: context %zu bytes, formula %zu (%.2f bytes a node in "
           "each hidden layer)\n", L, W, n, F, got, expect, 4.0 * W + 2.0 * W / 8);
    assert_int_equal(got, expect);
    actc_ctx_free(ctx);
    actc_source_free(s.src);
    actc_model_free(m);
    actc_graph_free(g);
}

/* Loss and parameters after a few steps: the same bits with 1 and 2
 * threads (gat walks edges both ways, gcnii runs 8 propagations). */
static void run_steps(const char *name, const actc_graph *g, int threads, float **params, size_t *count, double *loss)
{
    omp_set_num_threads(threads);
    actc_model *m = model(name, g, !strcmp(name, "gcnii") ? 8 : 2, 16, !strcmp(name, "gat") ? 4 : 1, 0.5f);
    actc_trainer_opts o = actc_trainer_default_opts();
    o.policy = "gact:2";
    o.optim = "adamw";
    o.lr = 0.01f;
    actc_trainer *t = NULL;
    assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_OK);
    split_batch tr;
    split_open(&tr, g, ACTC_SPLIT_TRAIN);
    for (int i = 0; i < 3; i++) {
        actc_step_result r;
        assert_int_equal(actc_trainer_step(t, &tr.b, &r), ACTC_OK);
        *loss = r.loss;
    }
    actc_tensor **p;
    const int np = actc_model_params(m, &p);
    size_t total = 0;
    for (int i = 0; i < np; i++) total += p[i]->numel;
    float *all = malloc(total * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < np; i++) {
        memcpy(all + k, p[i]->data, p[i]->numel * sizeof(float));
        k += p[i]->numel;
    }
    *params = all;
    *count = total;
    actc_source_free(tr.src);
    actc_trainer_free(t);
    actc_model_free(m);
}

static void test_threads(void **state)
{
    (void)state;
    /* The graph operators sum in a fixed order at any thread count; the
     * dense products do so only in deterministic mode (a threaded sgemm
     * splits its sums by the thread count on some kernels, e.g. OpenBLAS's
     * generic ones and oneDNN's). */
    assert_int_equal(actc_set_deterministic(1), ACTC_OK);
    actc_graph *g = sbm(3000, 4);
    const char *models[] = {"gcn", "gat", "gcnii"};
    for (int i = 0; i < 3; i++) {
        float *a, *b;
        size_t na, nb;
        double la, lb;
        run_steps(models[i], g, 1, &a, &na, &la);
        run_steps(models[i], g, 2, &b, &nb, &lb);
        assert_int_equal(na, nb);
        assert_true(la == lb);
        assert_memory_equal(a, b, na * sizeof(float));
        free(a);
        free(b);
    }
    omp_set_num_threads(2);
    actc_graph_free(g);
}

/* Whether test_threads passed or failed, the tests after it run in the
 * default mode. */
static int deterministic_off(void **state)
{
    (void)state;
    omp_set_num_threads(2);
    return actc_set_deterministic(0) == ACTC_OK ? 0 : -1;
}

/* A graph batch is one sample: never cut into micro-batches; the model
 * refuses a batch without a graph or with the wrong features. */
static void test_batch_rules(void **state)
{
    (void)state;
    actc_graph *g = sbm(200, 1);
    actc_model *m = model("gcn", g, 2, 8, 1, 0);
    actc_trainer_opts o = actc_trainer_default_opts();
    o.accum = 2;
    actc_trainer *t = NULL;
    assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_OK);
    split_batch s;
    split_open(&s, g, ACTC_SPLIT_TRAIN);
    actc_step_result r;
    assert_int_equal(actc_trainer_step(t, &s.b, &r), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "whole graph"));
    actc_trainer_free(t);

    actc_ctx *ctx = actc_ctx_new();
    actc_batch nog = s.b;
    nog.graph = NULL;
    tu_expect_invalid(actc_model_forward_batch(m, ctx, &nog), "takes a graph");
    actc_batch noids = s.b;
    noids.ids = NULL;
    tu_expect_invalid(actc_model_forward_batch(m, ctx, &noids), "no node");
    int shape[2] = {g->n, g->n_features + 1};
    actc_tensor *wrong = actc_tensor_zeros(ACTC_MEM_SCRATCH, 2, shape);
    actc_batch wx = s.b;
    wx.x = wrong;
    tu_expect_invalid(actc_model_forward_batch(m, ctx, &wx), "node features");
    actc_tensor_release(wrong);
    tu_expect_invalid(actc_model_forward(m, ctx, g->x), "graph");
    actc_ctx_free(ctx);
    actc_source_free(s.src);
    actc_model_free(m);

    /* Shapes the builder refuses. */
    actc_model_opts mo = actc_model_default_opts();
    mo.width = 10;
    mo.n_heads = 4;
    actc_model *bad = NULL;
    assert_int_equal(actc_model_create("gat", &mo, &bad), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "heads"));
    mo.width = 8;
    mo.n_layers = 100000;
    assert_int_equal(actc_model_create("gcnii", &mo, &bad), ACTC_ERR_INVALID);
    actc_graph_free(g);
}

int main(void)
{
    omp_set_num_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_gcn),  cmocka_unit_test(test_gradcheck_gat),
        cmocka_unit_test(test_gradcheck_gcnii), cmocka_unit_test(test_context_formula),
        cmocka_unit_test(test_batch_rules),    cmocka_unit_test_teardown(test_threads, deterministic_off),
        cmocka_unit_test(test_training),
    };
    return cmocka_run_group_tests(tests, NULL, tu_grad_report);
}
