/* Internals of the data layer used by the layers above it. */
#ifndef ACTC_DATA_H
#define ACTC_DATA_H
#include "actc.h"

/* Drop the batch a source holds (its image tensor), so that it does not
 * outlive the epoch or evaluation that asked for it. */
void actc__source_drop(actc_source *s);

/* ---- graphs (graph.c) ---- */
/* A graph of n nodes whose x, y and split are allocated but not filled and
 * whose adjacency is empty: the readers and generators fill it in place
 * (no copy of the features) and call actc__graph_finish.  Checks the sizes
 * (n, n_features, n_classes >= 1, the features' bytes representable). */
actc_status actc__graph_alloc(int n, int n_features, int n_classes, actc_graph **out);
/* Check g's labels and split (the rules of actc_graph_new) and the m edges
 * src[e] - dst[e], then build adj, adj_t, norm and n_edges.
 * ACTC_ERR_INVALID naming the first problem; g is left for the caller to
 * free either way. */
actc_status actc__graph_finish(actc_graph *g, int64_t m, const int32_t *src, const int32_t *dst);
/* The split of actc_graph_resplit into split[0..n): a partial Fisher-Yates
 * shuffle of 0..n-1 by seed, its first n_train train, next n_val
 * validation, the rest test.  ACTC_ERR_INVALID (nothing written) unless
 * 1 <= n_train and n_train + n_val <= n, n_val >= 0. */
actc_status actc__graph_split_fill(int8_t *split, int n, int n_train, int n_val, uint64_t seed);
#endif
