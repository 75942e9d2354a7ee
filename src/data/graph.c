/* Graphs for full-batch node classification: construction, validation, the
 * adjacency (A + I made symmetric, its transpose and GCN's weights), the
 * split.
 *
 * Every graph the library hands out passes the same checks (actc_graph_new,
 * the file reader, the generators all end in actc__graph_finish): node
 * indices of every edge in [0, n), labels in [0, n_classes), split values
 * in {-1, 0, 1, 2} and at least one training node.
 *
 * Memory: everything a graph holds (the features, an actc tensor the models
 * read like any input batch; labels, split, GCN's weights and the CSR
 * arrays) comes from the accounting allocator in SCRATCH: a full-batch run
 * holds its whole graph for the whole run, so a budget and the memory table
 * must cover it (maxbatch's largest graph counts it). */
#include "../core/core.h"
#include "data.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

actc_status actc__graph_alloc(int n, int n_features, int n_classes, actc_graph **out)
{
    *out = NULL;
    if (n < 1) return actc_set_error(ACTC_ERR_INVALID, "a graph needs at least 1 node (got n = %d)", n);
    if (n_features < 1)
        return actc_set_error(ACTC_ERR_INVALID, "a graph needs at least 1 feature per node (got %d)", n_features);
    if (n_classes < 1)
        return actc_set_error(ACTC_ERR_INVALID, "a graph needs at least 1 class (got %d)", n_classes);
    /* Every node has one label: more classes than nodes cannot all occur,
     * and the model's output width (one logit per class, per node) would
     * grow for nothing (2^20 classes on 300 nodes ran into the budget). */
    if (n_classes > n)
        return actc_set_error(ACTC_ERR_INVALID, "a graph of %d nodes cannot have %d classes (at most one per node)", n,
                              n_classes);
    size_t feats, bytes;
    if (!actc__mul_size((size_t)n, (size_t)n_features, &feats) || !actc__mul_size(feats, sizeof(float), &bytes))
        return actc_set_error(ACTC_ERR_INVALID, "a graph of %d nodes with %d features is too large", n, n_features);
    actc_graph *g = calloc(1, sizeof *g);
    if (!g) return actc_set_error(ACTC_ERR_OOM, "out of memory for a graph");
    g->n = n;
    g->n_features = n_features;
    g->n_classes = n_classes;
    const int shape[2] = {n, n_features};
    g->y = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)n * sizeof *g->y);
    g->split = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)n);
    char why[512];
    if (!g->y || !g->split) {
        /* The allocator's message names the budget or the size. */
        snprintf(why, sizeof why, "%s", actc_last_error());
        actc_graph_free(g);
        return actc_set_error(ACTC_ERR_OOM, "the labels of a graph of %d nodes: %s", n, why);
    }
    if (!(g->x = actc_tensor_new(ACTC_MEM_SCRATCH, 2, shape))) {
        snprintf(why, sizeof why, "%s", actc_last_error());
        actc_graph_free(g);
        return actc_set_error(ACTC_ERR_OOM, "the features of a graph (%d nodes x %d features): %s", n, n_features, why);
    }
    snprintf(g->source, sizeof g->source, "memory");
    *out = g;
    return ACTC_OK;
}

void actc_graph_free(actc_graph *g)
{
    if (!g) return;
    actc_csr_free(&g->adj);
    actc_csr_free(&g->adj_t);
    actc_mem_free(g->norm);
    actc_tensor_release(g->x);
    actc_mem_free(g->y);
    actc_mem_free(g->split);
    free(g);
}

actc_status actc__graph_finish(actc_graph *g, int64_t m, const int32_t *src, const int32_t *dst)
{
    const int n = g->n;
    if (m < 0) return actc_set_error(ACTC_ERR_INVALID, "a graph cannot have %lld edges", (long long)m);
    if (m > 0 && (!src || !dst)) return actc_set_error(ACTC_ERR_INVALID, "%lld edges but no edge arrays", (long long)m);
    for (int64_t e = 0; e < m; e++) {
        const int32_t a = src[e], b = dst[e];
        if (a < 0 || a >= n || b < 0 || b >= n)
            return actc_set_error(ACTC_ERR_INVALID,
                                  "edge %lld (%d - %d) names node %d, outside the graph's nodes [0, %d)", (long long)e,
                                  (int)a, (int)b, (int)(a < 0 || a >= n ? a : b), n);
    }
    /* A NaN or infinite feature would only show up as a NaN loss later. */
    const float *xf = g->x->data;
    const size_t nf = g->x->numel;
    for (size_t i = 0; i < nf; i++)
        if (!isfinite(xf[i]))
            return actc_set_error(ACTC_ERR_INVALID, "node %zu has a feature that is not finite (feature %zu: %g)",
                                  i / (size_t)g->n_features, i % (size_t)g->n_features, (double)xf[i]);
    for (int i = 0; i < n; i++)
        if (g->y[i] < 0 || g->y[i] >= g->n_classes)
            return actc_set_error(ACTC_ERR_INVALID, "node %d has label %d, outside the classes [0, %d)", i,
                                  (int)g->y[i], g->n_classes);
    int counts[4] = {0, 0, 0, 0}; /* none, train, val, test */
    for (int i = 0; i < n; i++) {
        if (g->split[i] < ACTC_SPLIT_NONE || g->split[i] > ACTC_SPLIT_TEST)
            return actc_set_error(ACTC_ERR_INVALID,
                                  "node %d has split value %d (must be -1 none, 0 train, 1 validation or 2 test)", i,
                                  (int)g->split[i]);
        counts[g->split[i] + 1]++;
    }
    if (counts[1] == 0)
        return actc_set_error(ACTC_ERR_INVALID,
                              "no training node: of %d nodes %d are validation, %d test and %d in no split", n,
                              counts[2], counts[3], counts[0]);
    actc_csr_free(&g->adj);
    actc_csr_free(&g->adj_t);
    actc_mem_free(g->norm);
    g->norm = NULL;
    actc_status st = actc_csr_from_edges(n, m, src, dst, NULL, 1, 1, &g->adj);
    if (st == ACTC_OK) st = actc_csr_transpose(&g->adj, &g->adj_t);
    if (st == ACTC_OK && !(g->norm = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)g->adj.nnz * sizeof *g->norm)))
        st = actc_set_error(ACTC_ERR_OOM, "out of memory for the weights of %lld adjacency entries",
                            (long long)g->adj.nnz);
    if (st == ACTC_OK) st = actc_csr_gcn_norm(&g->adj, g->norm);
    if (st != ACTC_OK) return st;
    g->n_edges = (g->adj.nnz - n) / 2; /* symmetric, every self-loop once */
    return ACTC_OK;
}

actc_status actc_graph_new(int n, int n_features, int n_classes, const float *x, const int32_t *y,
                           const int8_t *split, int64_t m, const int32_t *src, const int32_t *dst, actc_graph **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_graph_new: out is NULL");
    *out = NULL;
    if (n >= 1 && (!x || !y || !split))
        return actc_set_error(ACTC_ERR_INVALID, "actc_graph_new: the %s are NULL",
                              !x ? "features" : !y ? "labels" : "split values");
    actc_graph *g;
    actc_status st = actc__graph_alloc(n, n_features, n_classes, &g);
    if (st != ACTC_OK) return st;
    memcpy(g->x->data, x, g->x->numel * sizeof(float));
    memcpy(g->y, y, (size_t)n * sizeof *y);
    memcpy(g->split, split, (size_t)n);
    if ((st = actc__graph_finish(g, m, src, dst)) != ACTC_OK) {
        actc_graph_free(g);
        return st;
    }
    *out = g;
    return ACTC_OK;
}

void actc_graph_split_counts(const actc_graph *g, int counts[3])
{
    counts[0] = counts[1] = counts[2] = 0;
    if (!g || !g->split) return;
    for (int i = 0; i < g->n; i++)
        if (g->split[i] >= ACTC_SPLIT_TRAIN && g->split[i] <= ACTC_SPLIT_TEST) counts[g->split[i]]++;
}

actc_status actc__graph_split_fill(int8_t *split, int n, int n_train, int n_val, uint64_t seed)
{
    if (n_train < 1 || n_val < 0 || (int64_t)n_train + n_val > n)
        return actc_set_error(ACTC_ERR_INVALID,
                              "a split of %d training and %d validation nodes does not fit %d nodes (need at least 1 "
                              "training node, no negative count, and train + validation <= nodes)",
                              n_train, n_val, n);
    int32_t *perm = malloc((size_t)n * sizeof *perm);
    if (!perm) return actc_set_error(ACTC_ERR_OOM, "out of memory to split %d nodes", n);
    for (int i = 0; i < n; i++) perm[i] = i;
    const uint64_t key = actc_rng_key(seed, 0x73706c6974ULL /* "split" */, 0);
    const int picked = n_train + n_val;
    for (int i = 0; i < picked && i < n - 1; i++) {
        uint32_t r[4];
        actc_philox(key, (uint64_t)i, r);
        const uint64_t u = ((uint64_t)r[0] << 32) | r[1];
        const int j = i + (int)(u % (uint64_t)(n - i));
        const int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    memset(split, ACTC_SPLIT_TEST, (size_t)n);
    for (int i = 0; i < picked; i++) split[perm[i]] = (int8_t)(i < n_train ? ACTC_SPLIT_TRAIN : ACTC_SPLIT_VAL);
    free(perm);
    return ACTC_OK;
}

actc_status actc_graph_resplit(actc_graph *g, int n_train, int n_val, uint64_t seed)
{
    if (!g || !g->split) return actc_set_error(ACTC_ERR_INVALID, "actc_graph_resplit: no graph");
    return actc__graph_split_fill(g->split, g->n, n_train, n_val, seed);
}
