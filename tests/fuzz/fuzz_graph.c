/* Fuzz target: the graph file reader (actc_graph_load).  The first input
 * byte picks the mode: odd, the file's CRC-32 is recomputed before loading,
 * so that mutations reach the content checks behind it; even, the rest is
 * loaded as it is (the CRC check itself).  Every input is
 * loaded or refused with a message naming the file; what loads is
 * consistent (sizes, labels, split, a symmetric adjacency with every
 * self-loop, weights finite) and saves to a file that loads back as the
 * same graph. */
#include "fuzz_util.h"
#include <math.h>
#include <zlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (n < 1) return 0;
    const int fix = data[0] & 1;
    data++, n--;
    char path[512];
    snprintf(path, sizeof path, "%s", fuzz_path(".graph"));
    uint8_t *copy = malloc(n + 1);
    if (!copy) abort();
    memcpy(copy, data, n);
    if (fix && n >= 4) {
        const uint32_t c = (uint32_t)crc32(0, copy, (uInt)(n - 4));
        for (int i = 0; i < 4; i++) copy[n - 4 + i] = (uint8_t)(c >> (8 * i));
    }
    fuzz_write(path, copy, n);
    free(copy);
    const size_t live = fuzz_live();
    actc_graph *g = NULL;
    if (actc_graph_load(path, &g) == ACTC_OK) {
        if (!g || g->n < 1 || g->n_features < 1 || g->n_classes < 1 || g->n_edges < 0 ||
            g->adj.nnz != 2 * g->n_edges + g->n || g->adj_t.nnz != g->adj.nnz)
            abort();
        int train = 0;
        for (int i = 0; i < g->n; i++) {
            if (g->y[i] < 0 || g->y[i] >= g->n_classes || g->split[i] < -1 || g->split[i] > 2) abort();
            train += g->split[i] == ACTC_SPLIT_TRAIN;
            int self = 0;
            for (int64_t k = g->adj.rowptr[i]; k < g->adj.rowptr[i + 1]; k++) {
                if (g->adj.col[k] < 0 || g->adj.col[k] >= g->n) abort();
                if (k > g->adj.rowptr[i] && g->adj.col[k] <= g->adj.col[k - 1]) abort();
                self += g->adj.col[k] == i;
                if (!isfinite(g->norm[k]) || g->norm[k] <= 0) abort();
            }
            if (self != 1) abort();
        }
        if (!train) abort();
        /* saved and loaded again: the same graph */
        char again[600];
        snprintf(again, sizeof again, "%s.again", path);
        actc_graph *h = NULL;
        if (actc_graph_save(g, again) != ACTC_OK || actc_graph_load(again, &h) != ACTC_OK) abort();
        if (h->n != g->n || h->adj.nnz != g->adj.nnz ||
            memcmp(h->adj.col, g->adj.col, (size_t)g->adj.nnz * sizeof *g->adj.col) != 0 ||
            memcmp(h->x->data, g->x->data, g->x->numel * sizeof(float)) != 0 ||
            memcmp(h->split, g->split, (size_t)g->n) != 0)
            abort();
        unlink(again);
        actc_graph_free(h);
        actc_graph_free(g);
    } else if (g || !strstr(actc_last_error(), path)) {
        fprintf(stderr, "refused without naming the file: %s\n", actc_last_error());
        abort();
    }
    fuzz_check_balanced(live);
    unlink(path);
    return 0;
}
