/* Graph operators: CSR construction (validation, duplicate merging,
 * transpose, GCN normalisation), finite-difference gradient checks of every
 * sparse operator on small graphs with an empty row, self-loops, merged
 * duplicates and a hub, edge softmax normalisation, the kinds of what each
 * operator saves, bad arguments, and bitwise-identical results with 1 and 2
 * threads on a graph past the parallel thresholds. */
#include "testutil.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- graphs ------------------------------------------------------------- */

/* The small test graph: 10 nodes, node 0 a hub joined to every node 1..8
 * (edges i -> 0 for all of them, 0 -> i for the odd ones), a duplicated edge
 * 1 -> 2 (weights 0.7, then 9: the first stays), 2 -> 3, an explicit
 * self-loop 3 -> 3 (weight 1.5), 5 -> 4, 6 -> 4, 4 -> 7, and node 9
 * isolated.  Without self-loops and symmetry rows 6, 8 (nothing points to
 * them) and 9 are empty. */
#define SG_N 10
static void small_edges(int32_t *src, int32_t *dst, float *w, int *m)
{
    int k = 0;
    for (int i = 1; i <= 8; i++) {
        src[k] = i, dst[k] = 0, w[k] = 0.5f + 0.1f * (float)i, k++;
        if (i % 2) src[k] = 0, dst[k] = i, w[k] = 1.0f + 0.05f * (float)i, k++;
    }
    const int extra[][2] = {{1, 2}, {1, 2}, {2, 3}, {3, 3}, {5, 4}, {6, 4}, {4, 7}};
    const float ew[] = {0.7f, 9.0f, 0.8f, 1.5f, 1.2f, 0.9f, 1.1f};
    for (int e = 0; e < 7; e++) src[k] = extra[e][0], dst[k] = extra[e][1], w[k] = ew[e], k++;
    *m = k;
}

typedef struct {
    actc_csr a, at;
} graph;

static void graph_make(graph *g, int symmetric, int self_loops, int weighted)
{
    int32_t src[64], dst[64];
    float w[64];
    int m;
    small_edges(src, dst, w, &m);
    assert_int_equal(actc_csr_from_edges(SG_N, m, src, dst, weighted ? w : NULL, symmetric, self_loops, &g->a),
                     ACTC_OK);
    assert_int_equal(actc_csr_transpose(&g->a, &g->at), ACTC_OK);
}

static void graph_free(graph *g)
{
    actc_csr_free(&g->a);
    actc_csr_free(&g->at);
}

/* A random directed graph of n nodes with m random edges plus a hub (node
 * 0) receiving from and sending to every node. */
static void graph_random(graph *g, int n, int m, int symmetric, int self_loops, uint64_t seed)
{
    const int64_t tot = (int64_t)m + 2 * (n - 1);
    int32_t *src = malloc((size_t)tot * sizeof *src), *dst = malloc((size_t)tot * sizeof *dst);
    float *w = malloc((size_t)tot * sizeof *w);
    assert_non_null(src), assert_non_null(dst), assert_non_null(w);
    int64_t k = 0;
    for (int e = 0; e < m; e++, k++) {
        src[k] = (int32_t)(actc_rand_uniform(seed, 3 * (uint64_t)e) * (float)n) % n;
        dst[k] = (int32_t)(actc_rand_uniform(seed, 3 * (uint64_t)e + 1) * (float)n) % n;
        w[k] = 0.1f + actc_rand_uniform(seed, 3 * (uint64_t)e + 2);
    }
    for (int i = 1; i < n; i++) {
        src[k] = i, dst[k] = 0, w[k] = 0.5f, k++;
        src[k] = 0, dst[k] = i, w[k] = 0.25f, k++;
    }
    assert_int_equal(actc_csr_from_edges(n, tot, src, dst, w, symmetric, self_loops, &g->a), ACTC_OK);
    assert_int_equal(actc_csr_transpose(&g->a, &g->at), ACTC_OK);
    free(src), free(dst), free(w);
}

/* ---- CSR construction ---------------------------------------------------- */

static void expect_csr_error(int n, int64_t m, const int32_t *src, const int32_t *dst, const char *needle)
{
    actc_csr a;
    assert_int_equal(actc_csr_from_edges(n, m, src, dst, NULL, 0, 0, &a), ACTC_ERR_INVALID);
    if (!strstr(actc_last_error(), needle)) fail_msg("message \"%s\" lacks \"%s\"", actc_last_error(), needle);
    assert_null(a.rowptr);
    actc_csr_free(&a);
    actc_clear_error();
}

static void test_csr_build(void **state)
{
    (void)state;
    /* Duplicates merge, keeping the first weight; an explicit self-loop
     * keeps its weight over the added one; columns ascend. */
    const int32_t src[] = {2, 0, 0, 1, 2}, dst[] = {1, 1, 1, 1, 1};
    const float w[] = {4.0f, 2.0f, 5.0f, 3.0f, 6.0f};
    actc_csr a;
    assert_int_equal(actc_csr_from_edges(3, 5, src, dst, w, 0, 1, &a), ACTC_OK);
    assert_int_equal(a.n, 3);
    assert_int_equal(a.nnz, 5);
    const int64_t rp[] = {0, 1, 4, 5};
    const int32_t col[] = {0, 0, 1, 2, 2};
    const float val[] = {1.0f, 2.0f, 3.0f, 4.0f, 1.0f};
    for (int i = 0; i <= 3; i++) assert_int_equal(a.rowptr[i], rp[i]);
    for (int k = 0; k < 5; k++) {
        assert_int_equal(a.col[k], col[k]);
        assert_true(a.val[k] == val[k]);
    }
    assert_null(a.perm);
    actc_csr_free(&a);
    actc_csr_free(&a); /* a freed one is fine */

    /* Without weights: no values; symmetric adds the reverse edges. */
    assert_int_equal(actc_csr_from_edges(3, 5, src, dst, NULL, 1, 0, &a), ACTC_OK);
    assert_null(a.val);
    assert_int_equal(a.nnz, 5); /* (0,1) (1,0) (1,1) (1,2) (2,1) */
    actc_csr_free(&a);

    /* The small graph: 8 hub in-edges + 4 out-edges + 7 extras of which one
     * duplicate = 18 entries; rows 6, 8 and 9 (isolated) empty. */
    graph g;
    graph_make(&g, 0, 0, 1);
    assert_int_equal(g.a.nnz, 18);
    assert_int_equal(g.a.rowptr[10] - g.a.rowptr[9], 0);
    assert_int_equal(g.a.rowptr[9] - g.a.rowptr[8], 0);
    assert_int_equal(g.a.rowptr[1] - g.a.rowptr[0], 8); /* the hub's row */
    for (int64_t k = g.a.rowptr[2]; k < g.a.rowptr[3]; k++)
        if (g.a.col[k] == 1) assert_true(g.a.val[k] == 0.7f); /* 1 -> 2 merged, first weight */
    for (int i = 0; i < g.a.n; i++)
        for (int64_t k = g.a.rowptr[i] + 1; k < g.a.rowptr[i + 1]; k++) assert_true(g.a.col[k - 1] < g.a.col[k]);

    /* Transpose: entry p of at (row j, column i) is entry perm[p] = (i, j)
     * of a; transposing twice gives a's structure back. */
    for (int j = 0; j < g.at.n; j++)
        for (int64_t p = g.at.rowptr[j]; p < g.at.rowptr[j + 1]; p++) {
            const int64_t k = g.at.perm[p];
            const int i = g.at.col[p];
            assert_true(k >= g.a.rowptr[i] && k < g.a.rowptr[i + 1]);
            assert_int_equal(g.a.col[k], j);
        }
    assert_null(g.at.val);
    actc_csr att;
    assert_int_equal(actc_csr_transpose(&g.at, &att), ACTC_OK);
    assert_int_equal(att.nnz, g.a.nnz);
    assert_memory_equal(att.rowptr, g.a.rowptr, (size_t)(g.a.n + 1) * sizeof(int64_t));
    assert_memory_equal(att.col, g.a.col, (size_t)g.a.nnz * sizeof(int32_t));
    for (int64_t k = 0; k < g.a.nnz; k++) assert_int_equal(g.at.perm[att.perm[k]], k);
    actc_csr_free(&att);
    graph_free(&g);

    /* Errors name the edge and its values. */
    const int32_t s1[] = {0, 3}, d1[] = {1, 2};
    expect_csr_error(3, 2, s1, d1, "edge 1 (src 3 -> dst 2)");
    const int32_t s2[] = {0, 1, 2}, d2[] = {1, 2, -1};
    expect_csr_error(3, 3, s2, d2, "edge 2 (src 2 -> dst -1)");
    expect_csr_error(0, 0, NULL, NULL, "n=0");
    expect_csr_error(-2, 2, s1, d1, "n=-2");
    expect_csr_error(3, 2, NULL, d1, "src is NULL");
    const float bad_w[] = {1.0f, NAN};
    assert_int_equal(actc_csr_from_edges(3, 2, s2, d2, bad_w, 0, 0, &a), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "edge 1"));
    actc_clear_error();
    assert_int_equal(actc_csr_from_edges(3, 1, s1, d1, NULL, 0, 0, NULL), ACTC_ERR_INVALID);
    actc_clear_error();
    /* No edges at all: n empty rows, or n self-loops. */
    assert_int_equal(actc_csr_from_edges(4, 0, NULL, NULL, NULL, 1, 0, &a), ACTC_OK);
    assert_int_equal(a.nnz, 0);
    actc_csr at;
    assert_int_equal(actc_csr_transpose(&a, &at), ACTC_OK);
    assert_int_equal(at.nnz, 0);
    actc_csr_free(&at);
    actc_csr_free(&a);
    assert_int_equal(actc_csr_from_edges(4, 0, NULL, NULL, NULL, 1, 1, &a), ACTC_OK);
    assert_int_equal(a.nnz, 4);
    actc_csr_free(&a);
}

static void test_gcn_norm(void **state)
{
    (void)state;
    /* Path 0 - 1 - 2 with self-loops: degrees 2, 3, 2. */
    const int32_t src[] = {0, 1}, dst[] = {1, 2};
    actc_csr a;
    assert_int_equal(actc_csr_from_edges(3, 2, src, dst, NULL, 1, 1, &a), ACTC_OK);
    assert_int_equal(a.nnz, 7);
    float w[7];
    assert_int_equal(actc_csr_gcn_norm(&a, w), ACTC_OK);
    const double d[3] = {2, 3, 2};
    const int32_t col[] = {0, 1, 0, 1, 2, 1, 2};
    for (int i = 0; i < 3; i++)
        for (int64_t k = a.rowptr[i]; k < a.rowptr[i + 1]; k++) {
            assert_int_equal(a.col[k], col[k]);
            assert_float_equal(w[k], 1.0 / sqrt(d[i] * d[a.col[k]]), 1e-7);
        }
    assert_float_equal(w[0], 0.5, 1e-7);
    assert_float_equal(w[1], 1.0 / sqrt(6.0), 1e-7);
    assert_float_equal(w[3], 1.0 / 3.0, 1e-7);
    /* Weighted: d_i = sum of row i's weights, w = a_ij / sqrt(d_i d_j). */
    const float wt[] = {2.0f, 4.0f};
    actc_csr b;
    assert_int_equal(actc_csr_from_edges(3, 2, src, dst, wt, 1, 1, &b), ACTC_OK);
    assert_int_equal(actc_csr_gcn_norm(&b, w), ACTC_OK);
    const double db[3] = {3, 7, 5};
    for (int i = 0; i < 3; i++)
        for (int64_t k = b.rowptr[i]; k < b.rowptr[i + 1]; k++)
            assert_float_equal(w[k], b.val[k] / sqrt(db[i] * db[b.col[k]]), 1e-7);
    assert_int_equal(actc_csr_gcn_norm(&b, b.val), ACTC_OK); /* in place */
    assert_memory_equal(b.val, w, (size_t)b.nnz * sizeof(float));
    actc_csr_free(&b);
    /* A node without entries is fine (nothing to normalise) ... */
    actc_csr c;
    assert_int_equal(actc_csr_from_edges(4, 2, src, dst, NULL, 1, 0, &c), ACTC_OK);
    assert_int_equal(actc_csr_gcn_norm(&c, w), ACTC_OK);
    actc_csr_free(&c);
    /* ... but a zero degree under an entry is not. */
    const float wz[] = {0.0f, 1.0f};
    assert_int_equal(actc_csr_from_edges(3, 2, src, dst, wz, 1, 0, &c), ACTC_OK);
    assert_int_equal(actc_csr_gcn_norm(&c, w), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "degree"));
    actc_clear_error();
    actc_csr_free(&c);
    actc_csr_free(&a);
}

/* ---- gradient checks ------------------------------------------------------ */

typedef struct {
    const actc_csr *a, *at;
    float slope;
    const int32_t *idx;
    int m;
} gu;

static actc_tensor *f_spmm(actc_ctx *ctx, actc_tensor **in, void *user)
{
    gu *u = user;
    return actc_spmm(ctx, u->a, u->at, in[0]);
}
static actc_tensor *f_gat(actc_ctx *ctx, actc_tensor **in, void *user)
{
    gu *u = user;
    return actc_gat_scores(ctx, u->a, u->at, in[0], in[1], u->slope);
}
static actc_tensor *f_softmax(actc_ctx *ctx, actc_tensor **in, void *user)
{
    gu *u = user;
    return actc_edge_softmax(ctx, u->a, in[0]);
}
static actc_tensor *f_aggregate(actc_ctx *ctx, actc_tensor **in, void *user)
{
    gu *u = user;
    return actc_edge_aggregate(ctx, u->a, u->at, in[0], in[1]);
}
static actc_tensor *f_head_dot(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)user;
    return actc_head_dot(ctx, in[0], in[1]);
}
static actc_tensor *f_gather(actc_ctx *ctx, actc_tensor **in, void *user)
{
    gu *u = user;
    return actc_gather_rows(ctx, in[0], u->idx, u->m);
}
static actc_tensor *f_elu(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)user;
    return actc_elu(ctx, in[0], 0.7f);
}
static actc_tensor *f_scale_add(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)user;
    return actc_scale_add(ctx, in[0], 0.6f, in[1], -1.3f);
}
static actc_tensor *f_scale(actc_ctx *ctx, actc_tensor **in, void *user)
{
    (void)user;
    return actc_scale_add(ctx, in[0], 2.5f, NULL, 0.0f);
}

/* A whole GAT layer: s = x w per head, scores, softmax, aggregation of x, ELU. */
static actc_tensor *f_gat_layer(actc_ctx *ctx, actc_tensor **in, void *user)
{
    gu *u = user;
    actc_tensor *sd = actc_head_dot(ctx, in[0], in[1]), *ss = actc_head_dot(ctx, in[0], in[2]);
    actc_tensor *e = actc_gat_scores(ctx, u->a, u->at, sd, ss, u->slope);
    actc_tensor_release(sd), actc_tensor_release(ss);
    actc_tensor *al = actc_edge_softmax(ctx, u->a, e);
    actc_tensor_release(e);
    actc_tensor *y = actc_edge_aggregate(ctx, u->a, u->at, al, in[0]);
    actc_tensor_release(al);
    actc_tensor *z = actc_elu(ctx, y, 1.0f);
    actc_tensor_release(y);
    return z;
}

/* Smallest |s_dst[i] + s_src[j]| over a's entries: how far the scores are
 * from LeakyReLU's kink. */
static float min_abs_score(const actc_csr *a, const actc_tensor *sd, const actc_tensor *ss)
{
    const int H = sd->shape[1];
    float mn = INFINITY;
    for (int i = 0; i < a->n; i++)
        for (int64_t k = a->rowptr[i]; k < a->rowptr[i + 1]; k++)
            for (int h = 0; h < H; h++) {
                const float z = fabsf(sd->data[i * H + h] + ss->data[a->col[k] * H + h]);
                mn = z < mn ? z : mn;
            }
    return mn;
}

static void grad_checks_on(const char *gname, const graph *g, int symmetric_vals)
{
    char what[96];
    const int n = g->a.n, nnz = (int)g->a.nnz, H = 2, D = 3, F = H * D;
    gu u = {&g->a, &g->at, 0.2f, NULL, 0};

    /* spmm with the transpose; 3-D x (trailing shape flattened). */
    int xs3[3] = {n, 2, 2};
    actc_tensor *x3 = tu_rand(3, xs3, 1, -1, 1, 1);
    snprintf(what, sizeof what, "spmm %s", gname);
    tu_check_grad(what, f_spmm, &x3, 1, &u, 1e-2f);
    if (symmetric_vals) {
        gu us = u;
        us.at = NULL;
        snprintf(what, sizeof what, "spmm %s (at NULL)", gname);
        tu_check_grad(what, f_spmm, &x3, 1, &us, 1e-2f);
    }
    actc_tensor_release(x3);

    /* gat_scores: both inputs, scores kept off the kink. */
    int ss[2] = {n, H};
    actc_tensor *sd = tu_rand(2, ss, 2, -1, 1, 1), *sr = tu_rand(2, ss, 3, -1, 1, 1);
    for (uint64_t seed = 10; min_abs_score(&g->a, sd, sr) < 0.03f; seed++) {
        tu_fill_distinct(sd, seed, -1.0f, 1.0f, 0.01f);
        tu_fill_distinct(sr, seed + 1000, -1.0f, 1.0f, 0.01f);
    }
    actc_tensor *gin[2] = {sd, sr};
    snprintf(what, sizeof what, "gat_scores %s", gname);
    tu_check_grad(what, f_gat, gin, 2, &u, 1e-3f);
    sd->requires_grad = 0; /* s_src only */
    snprintf(what, sizeof what, "gat_scores %s (s_src)", gname);
    tu_check_grad(what, f_gat, gin, 2, &u, 1e-3f);
    sd->requires_grad = 1;
    sr->requires_grad = 0; /* s_dst only: no transpose needed */
    gu un = u;
    un.at = NULL;
    snprintf(what, sizeof what, "gat_scores %s (s_dst, at NULL)", gname);
    tu_check_grad(what, f_gat, gin, 2, &un, 1e-3f);
    actc_tensor_release(sd), actc_tensor_release(sr);

    /* edge_softmax. */
    int es[2] = {nnz, H};
    actc_tensor *e = tu_rand(2, es, 4, -2, 2, 1);
    snprintf(what, sizeof what, "edge_softmax %s", gname);
    tu_check_grad(what, f_softmax, &e, 1, &u, 1e-2f);
    actc_tensor_release(e);

    /* edge_aggregate: both, alpha only, x only. */
    int xs[2] = {n, F};
    actc_tensor *al = tu_rand(2, es, 5, -1, 1, 1), *x = tu_rand(2, xs, 6, -1, 1, 1);
    actc_tensor *ain[2] = {al, x};
    snprintf(what, sizeof what, "edge_aggregate %s", gname);
    tu_check_grad(what, f_aggregate, ain, 2, &u, 1e-2f);
    x->requires_grad = 0;
    snprintf(what, sizeof what, "edge_aggregate %s (alpha, at NULL)", gname);
    tu_check_grad(what, f_aggregate, ain, 2, &un, 1e-2f);
    x->requires_grad = 1;
    al->requires_grad = 0;
    snprintf(what, sizeof what, "edge_aggregate %s (x)", gname);
    tu_check_grad(what, f_aggregate, ain, 2, &u, 1e-2f);
    actc_tensor_release(al);

    /* A GAT layer end to end (x, both attention vectors as parameters). */
    int ws[2] = {H, D};
    actc_tensor *w1 = actc_param_new(2, ws, "att_dst"), *w2 = actc_param_new(2, ws, "att_src");
    tu_fill_uniform(w1, 7, -1, 1);
    tu_fill_uniform(w2, 8, -1, 1);
    actc_tensor *lin[3] = {x, w1, w2};
    snprintf(what, sizeof what, "gat layer %s", gname);
    tu_check_grad(what, f_gat_layer, lin, 3, &u, 1e-3f);
    actc_tensor_release(w1), actc_tensor_release(w2);
    actc_tensor_release(x);
}

static void test_graph_grads(void **state)
{
    (void)state;
    const size_t m0 = tu_mem_now();
    graph g;
    /* Directed, weighted, no self-loops added: empty rows (3 nodes), an
     * explicit self-loop, a merged duplicate, the hub. */
    graph_make(&g, 0, 0, 1);
    grad_checks_on("directed", &g, 0);
    graph_free(&g);
    /* Symmetric with self-loops and GCN values (symmetric values: spmm
     * with at NULL too); the isolated node has only its self-loop. */
    graph_make(&g, 1, 1, 0);
    float *w = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)g.a.nnz * sizeof *w);
    assert_int_equal(actc_csr_gcn_norm(&g.a, w), ACTC_OK);
    g.a.val = w;
    grad_checks_on("symmetric+loops", &g, 1);
    graph_free(&g);
    assert_int_equal(tu_mem_now(), m0);
}

static void test_dense_grads(void **state)
{
    (void)state;
    const size_t m0 = tu_mem_now();
    /* head_dot with a plain w (kept EXACT) and with a parameter. */
    int xs[2] = {7, 6}, ws[2] = {2, 3};
    actc_tensor *x = tu_rand(2, xs, 1, -1, 1, 1), *w = tu_rand(2, ws, 2, -1, 1, 1);
    actc_tensor *in[2] = {x, w};
    tu_check_grad("head_dot", f_head_dot, in, 2, NULL, 1e-2f);
    actc_tensor *wp = actc_param_new(2, ws, "att");
    tu_fill_uniform(wp, 3, -1, 1);
    actc_tensor *inp[2] = {x, wp};
    tu_check_grad("head_dot (parameter w)", f_head_dot, inp, 2, NULL, 1e-2f);
    actc_tensor_release(wp);
    actc_tensor_release(w);

    /* gather_rows: repeats, a row never picked, 3-D x. */
    int gs[3] = {SG_N, 2, 3};
    actc_tensor *xg = tu_rand(3, gs, 4, -1, 1, 1);
    const int32_t idx[] = {3, 0, 3, 9, 7, 3, 0, 1, 2, 4, 5, 6};
    gu u = {NULL, NULL, 0, idx, 12};
    tu_check_grad("gather_rows", f_gather, &xg, 1, &u, 1e-2f);
    actc_tensor *yg = actc_gather_rows(NULL, xg, idx, 12);
    tu_expect_invalid(yg, "gather_rows");
    actc_tensor_release(xg);

    /* elu on distinct values away from 0. */
    tu_fill_distinct(x, 5, -2.0f, 2.0f, 0.05f);
    tu_check_grad("elu", f_elu, &x, 1, NULL, 1e-3f);
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_elu(ctx, x, 0.7f);
    assert_non_null(y);
    for (size_t i = 0; i < x->numel; i++) {
        const float v = x->data[i];
        assert_float_equal(y->data[i], v > 0 ? v : 0.7 * expm1(v), 1e-6);
    }
    actc_tensor_release(y);
    actc_ctx_free(ctx);

    /* scale_add, with y and without. */
    actc_tensor *x2 = tu_rand(2, xs, 6, -1, 1, 1);
    actc_tensor *sin[2] = {x, x2};
    tu_check_grad("scale_add", f_scale_add, sin, 2, NULL, 1e-2f);
    tu_check_grad("scale_add (y NULL)", f_scale, &x, 1, NULL, 1e-2f);
    actc_tensor_release(x2);
    actc_tensor_release(x);
    assert_int_equal(tu_mem_now(), m0);
}

/* ---- forward values -------------------------------------------------------- */

static void test_forward_values(void **state)
{
    (void)state;
    graph g;
    graph_make(&g, 0, 0, 1);
    const int n = g.a.n, nnz = (int)g.a.nnz, H = 3, F = 6, D = 2;
    actc_ctx *ctx = actc_ctx_new();
    actc_ctx_set_training(ctx, 0);

    /* Edge softmax: every non-empty row sums to one per head; empty rows
     * have no entries and are simply absent. */
    int es[2] = {nnz, H};
    actc_tensor *e = tu_rand(2, es, 9, -30, 30, 0);
    e->data[0] = 80.0f; /* exp would overflow without the row maximum */
    actc_tensor *al = actc_edge_softmax(ctx, &g.a, e);
    assert_non_null(al);
    int nonempty = 0;
    for (int i = 0; i < n; i++) {
        if (g.a.rowptr[i] == g.a.rowptr[i + 1]) continue;
        nonempty++;
        for (int h = 0; h < H; h++) {
            double s = 0;
            for (int64_t k = g.a.rowptr[i]; k < g.a.rowptr[i + 1]; k++) {
                assert_true(al->data[k * H + h] >= 0.0f && isfinite(al->data[k * H + h]));
                s += al->data[k * H + h];
            }
            assert_float_equal(s, 1.0, 1e-6);
        }
    }
    assert_int_equal(nonempty, 7); /* rows 6, 8 and 9 are empty */

    /* spmm against a dense product; edge_aggregate against a loop. */
    int xs[2] = {n, F};
    actc_tensor *x = tu_rand(2, xs, 10, -1, 1, 0);
    actc_tensor *y = actc_spmm(ctx, &g.a, &g.at, x), *z = actc_edge_aggregate(ctx, &g.a, &g.at, al, x);
    assert_non_null(y), assert_non_null(z);
    for (int i = 0; i < n; i++)
        for (int f = 0; f < F; f++) {
            double s = 0, t = 0;
            for (int64_t k = g.a.rowptr[i]; k < g.a.rowptr[i + 1]; k++) {
                s += g.a.val[k] * x->data[g.a.col[k] * F + f];
                t += al->data[k * H + f / D] * x->data[g.a.col[k] * F + f];
            }
            assert_float_equal(y->data[i * F + f], s, 1e-5);
            assert_float_equal(z->data[i * F + f], t, 1e-5);
        }
    /* gat_scores: LeakyReLU of the sum. */
    int ss[2] = {n, H};
    actc_tensor *sd = tu_rand(2, ss, 11, -1, 1, 0), *sr = tu_rand(2, ss, 12, -1, 1, 0);
    actc_tensor *sc = actc_gat_scores(ctx, &g.a, NULL, sd, sr, 0.2f);
    assert_non_null(sc);
    for (int i = 0; i < n; i++)
        for (int64_t k = g.a.rowptr[i]; k < g.a.rowptr[i + 1]; k++)
            for (int h = 0; h < H; h++) {
                const float v = sd->data[i * H + h] + sr->data[g.a.col[k] * H + h];
                assert_float_equal(sc->data[k * H + h], v > 0 ? v : 0.2f * v, 1e-6);
            }
    /* head_dot and gather_rows. */
    int ws[2] = {H, D};
    actc_tensor *w = tu_rand(2, ws, 13, -1, 1, 0);
    actc_tensor *hd = actc_head_dot(ctx, x, w);
    assert_non_null(hd);
    assert_int_equal(hd->shape[0], n), assert_int_equal(hd->shape[1], H);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++) {
            double s = 0;
            for (int d = 0; d < D; d++) s += x->data[i * F + h * D + d] * w->data[h * D + d];
            assert_float_equal(hd->data[i * H + h], s, 1e-6);
        }
    const int32_t idx[] = {9, 9, 0, 4};
    actc_tensor *gr = actc_gather_rows(ctx, x, idx, 4);
    assert_non_null(gr);
    assert_int_equal(gr->shape[0], 4);
    for (int r = 0; r < 4; r++) assert_memory_equal(gr->data + r * F, x->data + idx[r] * F, F * sizeof(float));

    actc_tensor *outs[] = {al, y, z, sc, hd, gr, e, x, sd, sr, w};
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) actc_tensor_release(outs[i]);
    actc_ctx_free(ctx);
    graph_free(&g);
}

/* ---- what is saved --------------------------------------------------------- */

/* The store after one forward call: number of payloads, the kind of each,
 * their total bytes; then release y and drop the tape. */
static int saved_after(actc_ctx *ctx, actc_tensor *y, actc_save_kind *kinds, size_t *bytes)
{
    assert_non_null(y);
    actc_store_item it[8];
    const int n = actc_store_list(ctx, it, 8);
    assert_true(n <= 8);
    *bytes = 0;
    for (int i = 0; i < n; i++) {
        kinds[i] = it[i].kind;
        *bytes += it[i].stored_bytes;
    }
    actc_tensor_release(y);
    actc_ctx_reset(ctx);
    return n;
}

static void test_saves(void **state)
{
    (void)state;
    graph g;
    graph_make(&g, 1, 1, 1);
    const int n = g.a.n, nnz = (int)g.a.nnz, H = 2, F = 6;
    actc_ctx *ctx = actc_ctx_new(); /* training, policy none */
    int xs[2] = {n, F}, es[2] = {nnz, H}, ss[2] = {n, H}, ws[2] = {H, F / H};
    actc_tensor *x = tu_rand(2, xs, 1, -1, 1, 1), *e = tu_rand(2, es, 2, -1, 1, 1);
    actc_tensor *sd = tu_rand(2, ss, 3, -1, 1, 1), *sr = tu_rand(2, ss, 4, -1, 1, 1);
    actc_tensor *wp = actc_param_new(2, ws, "att");
    actc_save_kind k[8];
    size_t b;

    assert_int_equal(saved_after(ctx, actc_spmm(ctx, &g.a, &g.at, x), k, &b), 0);
    actc_store_stats st;
    actc_store_get_stats(ctx, &st);
    assert_int_equal(st.n_saves, 0);

    assert_int_equal(saved_after(ctx, actc_edge_softmax(ctx, &g.a, e), k, &b), 1);
    assert_int_equal(k[0], ACTC_SAVE_ACT);
    assert_int_equal(b, (size_t)nnz * H * 4);

    assert_int_equal(saved_after(ctx, actc_gat_scores(ctx, &g.a, &g.at, sd, sr, 0.2f), k, &b), 1);
    assert_int_equal(k[0], ACTC_SAVE_MASK);
    assert_true(b <= ((size_t)nnz * H + 7) / 8 + 64);

    /* alpha for dx, x for dalpha: only what a required gradient needs. */
    assert_int_equal(saved_after(ctx, actc_edge_aggregate(ctx, &g.a, &g.at, e, x), k, &b), 2);
    assert_int_equal(k[0], ACTC_SAVE_ACT), assert_int_equal(k[1], ACTC_SAVE_ACT);
    assert_int_equal(b, ((size_t)nnz * H + (size_t)n * F) * 4);
    e->requires_grad = 0;
    assert_int_equal(saved_after(ctx, actc_edge_aggregate(ctx, &g.a, &g.at, e, x), k, &b), 1);
    assert_int_equal(b, (size_t)nnz * H * 4); /* alpha */
    e->requires_grad = 1;
    x->requires_grad = 0;
    assert_int_equal(saved_after(ctx, actc_edge_aggregate(ctx, &g.a, NULL, e, x), k, &b), 1);
    assert_int_equal(b, (size_t)n * F * 4); /* x */

    /* head_dot with a parameter: x (for dW) only, w read in place. */
    assert_int_equal(saved_after(ctx, actc_head_dot(ctx, x, wp), k, &b), 1);
    assert_int_equal(b, (size_t)n * F * 4);
    x->requires_grad = 1;
    assert_int_equal(saved_after(ctx, actc_head_dot(ctx, x, wp), k, &b), 1);
    wp->requires_grad = 0;
    assert_int_equal(saved_after(ctx, actc_head_dot(ctx, x, wp), k, &b), 0);
    wp->requires_grad = 1;

    const int32_t idx[] = {1, 1, 0, 9, 3};
    assert_int_equal(saved_after(ctx, actc_gather_rows(ctx, x, idx, 5), k, &b), 1);
    assert_int_equal(k[0], ACTC_SAVE_INDEX);
    assert_int_equal(b, 5); /* one byte per index below 256 */

    assert_int_equal(saved_after(ctx, actc_elu(ctx, x, 1.0f), k, &b), 1);
    assert_int_equal(k[0], ACTC_SAVE_ACT);
    assert_int_equal(saved_after(ctx, actc_scale_add(ctx, x, 1.0f, x, 2.0f), k, &b), 0);

    /* Nothing recorded or saved in eval mode, or without gradients. */
    for (int mode = 1; mode >= 0; mode--) {
        actc_ctx_set_training(ctx, mode);
        x->requires_grad = e->requires_grad = sd->requires_grad = sr->requires_grad = wp->requires_grad = !mode;
        actc_store_stats before;
        actc_store_get_stats(ctx, &before);
        actc_tensor *outs[8] = {actc_spmm(ctx, &g.a, NULL, x),
                                actc_gat_scores(ctx, &g.a, NULL, sd, sr, 0.2f),
                                actc_edge_softmax(ctx, &g.a, e),
                                actc_edge_aggregate(ctx, &g.a, NULL, e, x),
                                actc_head_dot(ctx, x, wp),
                                actc_gather_rows(ctx, x, idx, 5),
                                actc_elu(ctx, x, 1.0f),
                                actc_scale_add(ctx, x, 1.0f, NULL, 0.0f)};
        tu_expect_nothing_recorded(ctx, outs, 8, before.n_saves);
    }
    actc_tensor *rel[] = {x, e, sd, sr, wp};
    for (int i = 0; i < 5; i++) actc_tensor_release(rel[i]);
    actc_ctx_free(ctx);
    graph_free(&g);
}

/* ---- bad arguments ----------------------------------------------------------- */

static void test_bad_input(void **state)
{
    (void)state;
    graph g, o;
    graph_make(&g, 0, 0, 1);
    graph_make(&o, 1, 1, 0); /* another graph: its transpose is not g's */
    const int n = g.a.n, nnz = (int)g.a.nnz;
    actc_ctx *ctx = actc_ctx_new();
    int xs[2] = {n, 6}, xb[2] = {n + 1, 6}, es[2] = {nnz, 2}, eb[2] = {nnz + 1, 2}, e1[1] = {nnz};
    int ss[2] = {n, 2}, sb[2] = {n, 3}, ws[2] = {2, 3}, wb[2] = {3, 3}, e4[2] = {nnz, 4};
    actc_tensor *x = tu_rand(2, xs, 1, -1, 1, 1), *xbad = tu_rand(2, xb, 2, -1, 1, 1);
    actc_tensor *e = tu_rand(2, es, 3, -1, 1, 1), *ebad = tu_rand(2, eb, 4, -1, 1, 1);
    actc_tensor *e1d = tu_rand(1, e1, 5, -1, 1, 1), *e4h = tu_rand(2, e4, 6, -1, 1, 1);
    actc_tensor *s = tu_rand(2, ss, 7, -1, 1, 1), *sbad = tu_rand(2, sb, 8, -1, 1, 1);
    actc_tensor *w = tu_rand(2, ws, 9, -1, 1, 1), *wbad = tu_rand(2, wb, 10, -1, 1, 1);
    actc_csr broken = g.a;
    broken.rowptr = NULL;

    /* spmm */
    tu_expect_invalid(actc_spmm(ctx, NULL, NULL, x), "spmm: a is NULL");
    tu_expect_invalid(actc_spmm(ctx, &g.a, NULL, NULL), "spmm: input x is NULL");
    tu_expect_invalid(actc_spmm(NULL, &g.a, NULL, x), "spmm");
    tu_expect_invalid(actc_spmm(ctx, &g.a, &g.at, xbad), "x [11, 6] must have a->n = 10 rows");
    tu_expect_invalid(actc_spmm(ctx, &broken, NULL, x), "not a CSR");
    tu_expect_invalid(actc_spmm(ctx, &g.a, &g.a, x), "not a transpose"); /* no perm */
    tu_expect_invalid(actc_spmm(ctx, &g.a, &o.at, x), "not a transpose");
    /* gat_scores */
    tu_expect_invalid(actc_gat_scores(ctx, &g.a, &g.at, NULL, s, 0.2f), "gat_scores: s_dst is NULL");
    tu_expect_invalid(actc_gat_scores(ctx, &g.a, &g.at, s, sbad, 0.2f), "s_src [10, 3] must have s_dst's shape");
    tu_expect_invalid(actc_gat_scores(ctx, &g.a, &g.at, xbad, xbad, 0.2f), "s_dst [11, 6] must be [n, H]");
    tu_expect_invalid(actc_gat_scores(ctx, &g.a, NULL, s, s, 0.2f), "pass at");
    tu_expect_invalid(actc_gat_scores(ctx, &g.a, &g.at, s, s, -0.1f), "slope");
    /* edge_softmax */
    tu_expect_invalid(actc_edge_softmax(ctx, &g.a, NULL), "edge_softmax: e is NULL");
    tu_expect_invalid(actc_edge_softmax(ctx, NULL, e), "edge_softmax: a is NULL");
    tu_expect_invalid(actc_edge_softmax(ctx, &g.a, ebad), "e [19, 2] must be [nnz, H] with nnz = 18");
    tu_expect_invalid(actc_edge_softmax(ctx, &g.a, e1d), "must be [nnz, H]");
    /* edge_aggregate */
    tu_expect_invalid(actc_edge_aggregate(ctx, &g.a, &g.at, NULL, x), "edge_aggregate: alpha is NULL");
    tu_expect_invalid(actc_edge_aggregate(ctx, &g.a, &g.at, e, NULL), "edge_aggregate: x is NULL");
    tu_expect_invalid(actc_edge_aggregate(ctx, &g.a, &g.at, ebad, x), "alpha [19, 2] must be [nnz, H]");
    tu_expect_invalid(actc_edge_aggregate(ctx, &g.a, &g.at, e, xbad), "x [11, 6] must be [n, F] with n = a->n = 10");
    tu_expect_invalid(actc_edge_aggregate(ctx, &g.a, &g.at, e4h, x), "F = 6 columns, not divisible by H = 4");
    tu_expect_invalid(actc_edge_aggregate(ctx, &g.a, NULL, e, x), "pass at");
    /* head_dot */
    tu_expect_invalid(actc_head_dot(ctx, x, NULL), "head_dot: w is NULL");
    tu_expect_invalid(actc_head_dot(ctx, x, wbad), "x [10, 6] must be [n, H*D] = [n, 9]");
    tu_expect_invalid(actc_head_dot(ctx, x, e1d), "w must be [H, D]");
    /* gather_rows */
    const int32_t idx[] = {0, 10, 2}, neg[] = {-1};
    tu_expect_invalid(actc_gather_rows(ctx, x, idx, 3), "idx[1] = 10 is outside [0, 10)");
    tu_expect_invalid(actc_gather_rows(ctx, x, neg, 1), "idx[0] = -1");
    tu_expect_invalid(actc_gather_rows(ctx, x, NULL, 3), "idx is NULL");
    tu_expect_invalid(actc_gather_rows(ctx, x, idx, 0), "m=0");
    tu_expect_invalid(actc_gather_rows(ctx, NULL, idx, 1), "gather_rows: x is NULL");
    /* elu, scale_add */
    tu_expect_invalid(actc_elu(ctx, NULL, 1.0f), "elu");
    tu_expect_invalid(actc_elu(ctx, x, NAN), "alpha");
    tu_expect_invalid(actc_scale_add(ctx, x, 1.0f, xbad, 1.0f), "scale_add: shapes differ");
    tu_expect_invalid(actc_scale_add(ctx, NULL, 1.0f, x, 1.0f), "scale_add: x is NULL");
    /* CSR helpers */
    actc_csr t;
    assert_int_equal(actc_csr_transpose(NULL, &t), ACTC_ERR_INVALID);
    assert_int_equal(actc_csr_transpose(&broken, &t), ACTC_ERR_INVALID);
    assert_int_equal(actc_csr_gcn_norm(&g.a, NULL), ACTC_ERR_INVALID);
    actc_clear_error();
    assert_int_equal(actc_tape_size(ctx), 0);

    actc_tensor *rel[] = {x, xbad, e, ebad, e1d, e4h, s, sbad, w, wbad};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) actc_tensor_release(rel[i]);
    actc_ctx_free(ctx);
    graph_free(&g);
    graph_free(&o);
}

/* ---- thread-count independence ----------------------------------------------- */

#define BIG_N 6000
#define BIG_F 16
#define BIG_H 2

typedef struct {
    float *out[8];
    size_t len[8];
    int n;
} results;

static void keep(results *r, const actc_tensor *t)
{
    r->out[r->n] = tu_dup_floats(t->data, t->numel);
    r->len[r->n++] = t->numel;
}

/* Every operator forward and backward on the big graph with `threads`
 * threads; keeps outputs and gradients. */
static void run_big(const graph *g, const graph *gs, int threads, results *r)
{
    omp_set_num_threads(threads);
    memset(r, 0, sizeof *r);
    const int n = g->a.n, D = BIG_F / BIG_H;
    int xs[2] = {n, BIG_F}, ws[2] = {BIG_H, D};
    actc_tensor *x = tu_rand(2, xs, 21, -1, 1, 1);
    actc_tensor *w1 = tu_rand(2, ws, 22, -1, 1, 1), *w2 = tu_rand(2, ws, 23, -1, 1, 1);
    int32_t *idx = malloc(2 * n * sizeof *idx);
    for (int i = 0; i < 2 * n; i++) idx[i] = (int32_t)((uint32_t)i * 2654435761u % (uint32_t)n) / 2;
    actc_ctx *ctx = actc_ctx_new();

    actc_tensor *h1 = actc_spmm(ctx, &g->a, &g->at, x), *h2 = actc_spmm(ctx, &gs->a, NULL, x);
    actc_tensor *sd = actc_head_dot(ctx, h1, w1), *ss = actc_head_dot(ctx, h1, w2);
    actc_tensor *e = actc_gat_scores(ctx, &g->a, &g->at, sd, ss, 0.2f);
    actc_tensor *al = actc_edge_softmax(ctx, &g->a, e);
    actc_tensor *y = actc_edge_aggregate(ctx, &g->a, &g->at, al, h2);
    actc_tensor *z = actc_elu(ctx, y, 1.0f);
    actc_tensor *gz = actc_gather_rows(ctx, z, idx, 2 * n), *gh = actc_gather_rows(ctx, h1, idx, 2 * n);
    actc_tensor *out = actc_scale_add(ctx, gz, 1.0f, gh, 0.5f);
    assert_non_null(out);
    keep(r, h1), keep(r, h2), keep(r, e), keep(r, al), keep(r, out);
    actc_tensor *loss = tu_wsum(ctx, out, 99);
    actc_tensor *rel[] = {h1, h2, sd, ss, e, al, y, z, gz, gh, out};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) actc_tensor_release(rel[i]);
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    actc_tensor_release(loss);
    keep(r, x->grad), keep(r, w1->grad), keep(r, w2->grad);
    actc_ctx_free(ctx);
    actc_tensor_release(x), actc_tensor_release(w1), actc_tensor_release(w2);
    free(idx);
}

static void test_threads_bitwise(void **state)
{
    (void)state;
    const int t0 = omp_get_max_threads();
    graph g, gs;
    graph_random(&g, BIG_N, 8 * BIG_N, 0, 1, 5);
    graph_random(&gs, BIG_N, 8 * BIG_N, 1, 1, 6);
    float *w = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)gs.a.nnz * sizeof *w);
    assert_int_equal(actc_csr_gcn_norm(&gs.a, w), ACTC_OK);
    actc_mem_free(gs.a.val);
    gs.a.val = w;
    /* Past every operator's parallel threshold (2^15 or 2^16 elements). */
    assert_true(g.a.nnz * BIG_F > (1 << 16) && (int64_t)BIG_N * BIG_F > (1 << 16));
    results r1, r2;
    run_big(&g, &gs, 1, &r1);
    run_big(&g, &gs, 2, &r2);
    omp_set_num_threads(t0);
    assert_int_equal(r1.n, r2.n);
    for (int i = 0; i < r1.n; i++) {
        assert_int_equal(r1.len[i], r2.len[i]);
        if (memcmp(r1.out[i], r2.out[i], r1.len[i] * sizeof(float)))
            fail_msg("result %d differs between 1 and 2 threads (max diff %g)", i,
                     tu_max_abs_diff(r1.out[i], r2.out[i], r1.len[i]));
        free(r1.out[i]), free(r2.out[i]);
    }
    print_message("1 and 2 threads: %d results bitwise identical (n=%d, nnz=%lld, hub degree %lld)\n", r1.n,
                  BIG_N, (long long)g.a.nnz, (long long)(g.a.rowptr[1] - g.a.rowptr[0]));
    graph_free(&g);
    graph_free(&gs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csr_build),      cmocka_unit_test(test_gcn_norm),
        cmocka_unit_test(test_graph_grads),    cmocka_unit_test(test_dense_grads),
        cmocka_unit_test(test_forward_values), cmocka_unit_test(test_saves),
        cmocka_unit_test(test_bad_input),      cmocka_unit_test(test_threads_bitwise),
    };
    return cmocka_run_group_tests(tests, NULL, tu_grad_report);
}
