/* The graph data of the commands: --data graph (the Fashion-MNIST k-NN
 * graph, built once and cached), graph:PATH (a graph file, docs/graphs.md)
 * or sbm:N (a planted-partition graph of N nodes, for tests and scale
 * runs), and --split TRAIN:VAL to redraw the split. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int graph_spec(const char *spec)
{
    return spec && (!strcmp(spec, "graph") || !strncmp(spec, "graph:", 6) || !strncmp(spec, "sbm:", 4));
}

/* "TRAIN:VAL" into two positive counts (VAL may be 0). */
static int parse_split(const char *s, int *tr, int *va)
{
    char *end;
    long a = strtol(s, &end, 10);
    if (end == s || *end != ':' || a < 1 || a > 1 << 30) return 1;
    const char *v = end + 1;
    long b = strtol(v, &end, 10);
    if (end == v || *end || b < 0 || b > 1 << 30) return 1;
    *tr = (int)a;
    *va = (int)b;
    return 0;
}

int graph_open(const char *spec, const char *split, actc_graph **g)
{
    *g = NULL;
    int tr = 0, va = 0;
    if (split && parse_split(split, &tr, &va)) {
        fprintf(stderr, "error: --split %s: expected TRAIN:VAL node counts, e.g. 1000:1000 (the rest is test)\n", split);
        return 1;
    }
    actc_status s;
    if (!strcmp(spec, "graph")) {
        const char *cache = cli_graph_cache();
        const int cached = access(cache, R_OK) == 0;
        printf("graph: the k-NN graph of Fashion-MNIST (cache %s%s)\n", cache,
               cached ? "" : ": not built yet, building it now, about 1-2 minutes");
        fflush(stdout);
        const double t0 = now_seconds();
        s = actc_graph_fashion_mnist(NULL, cache, g);
        struct stat st;
        if (s == ACTC_OK && !cached && stat(cache, &st) == 0)
            printf("graph: built in %.1f s, wrote %s (%lld bytes)\n", now_seconds() - t0, cache, (long long)st.st_size);
    } else if (!strncmp(spec, "sbm:", 4)) {
        actc_sbm_opts so = actc_sbm_default_opts();
        char *end;
        long n = strtol(spec + 4, &end, 10);
        if (end == spec + 4 || *end || n < 2 || n > 1L << 30) {
            fprintf(stderr, "error: --data %s: expected sbm:N with N >= 2 nodes\n", spec);
            return 1;
        }
        so.n = (int)n;
        if (so.degree > so.n - 1) so.degree = so.n - 1;
        if (so.classes > so.n) so.classes = (int)so.n;
        if (so.n_train + so.n_val >= so.n) {
            so.n_train = so.n / 10 > 0 ? so.n / 10 : 1;
            so.n_val = so.n / 10;
        }
        s = actc_graph_sbm(&so, g);
    } else {
        s = actc_graph_load(spec + 6, g);
    }
    if (s == ACTC_OK && split) s = actc_graph_resplit(*g, tr, va, 0);
    if (s != ACTC_OK) {
        actc_graph_free(*g);
        *g = NULL;
        return fail(split ? "--data/--split" : "--data");
    }
    return 0;
}
