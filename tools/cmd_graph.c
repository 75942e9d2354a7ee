/* actc graph: build, generate and describe graph files (docs/graphs.md).
 *   actc graph build  the Fashion-MNIST kNN graph (cached for actc train)
 *   actc graph sbm    a planted-partition graph
 *   actc graph info   what a graph file holds */
#include "cli.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef ACTC_GRAPH_CACHE
#define ACTC_GRAPH_CACHE "data/fmnist-knn10.graph"
#endif

const char *cli_graph_cache(void) { return ACTC_GRAPH_CACHE; }

typedef struct {
    const char *out, *data_dir;
    int k, nodes, classes, features, train, val;
    float degree, p_in, noise;
    uint64_t seed;
} graph_opts;

static const char USAGE[] = "actc graph build [--out PATH] [--k 10] [--data-dir DIR]\n"
                            "       actc graph sbm --nodes N [--degree D] [--classes C] [--features F] [--p-in P]\n"
                            "                      [--noise S] [--train N] [--val N] [--seed S] --out PATH\n"
                            "       actc graph info PATH";
static const char ABOUT[] =
    "build: the k-nearest-neighbour graph of Fashion-MNIST's 70,000 images (train then\n"
    "test; cosine similarity of the pixels), split by seed 0 into 1,000 train, 1,000\n"
    "validation and 68,000 test nodes, written to PATH (default: the cache actc train\n"
    "reads: data/fmnist-knn10.graph in the build directory).\n"
    "sbm: a planted-partition graph (stochastic block model): N nodes in C blocks,\n"
    "mean degree D, a fraction P of the edges inside a block, features the block's\n"
    "one-hot plus Gaussian noise.\n"
    "info: nodes, edges, features, classes, split counts and degrees of a graph file.";

static void build_flags(flag_def *f, void *opts)
{
    graph_opts *o = opts;
    flag_def defs[] = {
        {"--out", F_STR, &o->out, "PATH", "build, sbm: the graph file to write (build: the default cache)", 0},
        {"--k", F_INT, &o->k, "N", "build: neighbours per image (10)", 0},
        {"--data-dir", F_STR, &o->data_dir, "DIR", "build: directory with the Fashion-MNIST IDX files", 0},
        {"--nodes", F_INT, &o->nodes, "N", "sbm: nodes (required)", 0},
        {"--degree", F_FLOAT, &o->degree, "D", "sbm: mean degree (10)", 0},
        {"--classes", F_INT, &o->classes, "C", "sbm: blocks = classes (10)", 0},
        {"--features", F_INT, &o->features, "F", "sbm: features per node, >= classes (32)", 0},
        {"--p-in", F_FLOAT, &o->p_in, "P", "sbm: fraction of edges inside a block (0.8)", 0},
        {"--noise", F_FLOAT, &o->noise, "S", "sbm: std of the features' Gaussian noise (1)", 0},
        {"--train", F_INT, &o->train, "N", "sbm: training nodes (1000)", 0},
        {"--val", F_INT, &o->val, "N", "sbm: validation nodes (1000)", 0},
        {"--seed", F_U64, &o->seed, "S", "sbm: seed of the graph, features and split (1)", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    memcpy(f, defs, sizeof defs);
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Only the flags of subcommand `sub` may be given. */
static int check_flags(const flag_def *flags, const char *sub, const char *const *allowed)
{
    for (const flag_def *f = flags; f->name; f++) {
        if (!f->set) continue;
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(*a, f->name);
        if (!ok) {
            fprintf(stderr, "error: %s does not apply to actc graph %s (see actc graph --help)\n", f->name, sub);
            return 1;
        }
    }
    return 0;
}

static void print_summary(const actc_graph *g)
{
    int counts[3];
    actc_graph_split_counts(g, counts);
    int dmin = 0, dmax = 0;
    for (int i = 0; i < g->n; i++) {
        const int d = (int)(g->adj.rowptr[i + 1] - g->adj.rowptr[i] - 1); /* without the self-loop */
        if (i == 0 || d < dmin) dmin = d;
        if (i == 0 || d > dmax) dmax = d;
    }
    printf("nodes %d, edges %lld (undirected), features %d, classes %d\n", g->n, (long long)g->n_edges,
           g->n_features, g->n_classes);
    printf("split: %d train, %d validation, %d test, %d none\n", counts[0], counts[1], counts[2],
           g->n - counts[0] - counts[1] - counts[2]);
    printf("degree (self-loop not counted): min %d, mean %.2f, max %d\n", dmin, 2.0 * (double)g->n_edges / g->n, dmax);
}

static int run_build(const graph_opts *o)
{
    const char *out = o->out ? o->out : cli_graph_cache();
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    if (o->out) {
        /* As for graph sbm --out and --save, the directory must exist; found
         * out now, not after minutes of building. */
        FILE *f = fopen(tmp, "wb");
        if (!f) {
            fprintf(stderr, "error: graph build --out %s: cannot write there: %s\n", out, strerror(errno));
            return 1;
        }
        fclose(f);
        remove(tmp);
    }
    actc_image_dataset train, test;
    if (actc_fashion_mnist_load(o->data_dir, 1, &train) != ACTC_OK) return fail("graph build");
    if (actc_fashion_mnist_load(o->data_dir, 0, &test) != ACTC_OK) {
        actc_image_dataset_free(&train);
        return fail("graph build");
    }
    const actc_image_dataset *parts[2] = {&train, &test};
    actc_graph *g = NULL;
    const double t0 = now_seconds();
    actc_status st = actc_graph_knn_images(parts, 2, o->k, &g);
    const double secs = now_seconds() - t0;
    actc_image_dataset_free(&train);
    actc_image_dataset_free(&test);
    if (st == ACTC_OK) st = actc_graph_resplit(g, 1000, 1000, 0);
    if (st != ACTC_OK) {
        actc_graph_free(g);
        return fail("graph build");
    }
    /* Through a temporary file renamed into place: no half-written cache.
     * The default cache's directories are made (~/.cache/actc/...). */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (!o->out && slash && slash != dir) {
        *slash = '\0';
        for (char *p = dir + 1;; p++) {
            const char c = *p;
            if (c == '/' || c == '\0') {
                *p = '\0';
                mkdir(dir, 0777);
                *p = c;
            }
            if (!c) break;
        }
    }
    int rc = 0;
    if (actc_graph_save(g, tmp) != ACTC_OK) {
        rc = fail("graph build");
    } else if (rename(tmp, out) != 0) {
        perror("error: graph build: rename");
        remove(tmp);
        rc = 1;
    } else {
        printf("built the %d-nearest-neighbour graph of Fashion-MNIST in %.1f s (%d threads)\n", o->k, secs,
               actc_get_threads());
        print_summary(g);
        printf("wrote %s (%lld bytes)\n", out, file_size(out));
    }
    actc_graph_free(g);
    return rc;
}

static int run_sbm(const graph_opts *o, const flag_def *flags)
{
    if (!o->out || !flag_was_set(flags, "--nodes")) {
        fprintf(stderr, "error: actc graph sbm needs --nodes N and --out PATH\n");
        return 2;
    }
    actc_sbm_opts so = actc_sbm_default_opts();
    so.n = o->nodes;
    if (flag_was_set(flags, "--degree")) so.degree = o->degree;
    if (flag_was_set(flags, "--classes")) so.classes = o->classes;
    if (flag_was_set(flags, "--features")) so.n_features = o->features;
    if (flag_was_set(flags, "--p-in")) so.p_in = o->p_in;
    if (flag_was_set(flags, "--noise")) so.noise = o->noise;
    if (flag_was_set(flags, "--train")) so.n_train = o->train;
    if (flag_was_set(flags, "--val")) so.n_val = o->val;
    if (flag_was_set(flags, "--seed")) so.seed = o->seed;
    actc_graph *g = NULL;
    const double t0 = now_seconds();
    if (actc_graph_sbm(&so, &g) != ACTC_OK) return fail("graph sbm");
    const double secs = now_seconds() - t0;
    int rc = 0;
    if (actc_graph_save(g, o->out) != ACTC_OK) {
        rc = fail("graph sbm");
    } else {
        printf("generated %s in %.1f s\n", g->source, secs);
        print_summary(g);
        printf("wrote %s (%lld bytes)\n", o->out, file_size(o->out));
    }
    actc_graph_free(g);
    return rc;
}

static int run_info(const char *path)
{
    actc_graph *g = NULL;
    if (actc_graph_load(path, &g) != ACTC_OK) return fail("graph info");
    printf("%s (%lld bytes)\n", path, file_size(path));
    print_summary(g);
    actc_graph_free(g);
    return 0;
}

static int cmd_graph(int argc, char **argv)
{
    graph_opts o;
    memset(&o, 0, sizeof o);
    o.k = 10;
    flag_def flags[MAX_FLAGS];
    build_flags(flags, &o);
    const char *sub = argc > 2 ? argv[2] : NULL;
    if (!sub) {
        fprintf(stderr, "error: actc graph needs a subcommand: build, sbm or info (see actc graph --help)\n");
        return 2;
    }
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        flags_help(stdout, USAGE, ABOUT, flags);
        return 0;
    }
    const int is_info = !strcmp(sub, "info");
    if (!is_info && strcmp(sub, "build") && strcmp(sub, "sbm")) {
        fprintf(stderr, "error: unknown graph subcommand '%s' (build, sbm, info; see actc graph --help)\n", sub);
        return 2;
    }
    const char *path = NULL;
    int first = 3;
    if (is_info && argc > 3 && strncmp(argv[3], "--", 2) != 0) {
        path = argv[3];
        first = 4;
    }
    int help, rc = flags_parse(flags, argc, argv, first, &help);
    if (help) {
        flags_help(stdout, USAGE, ABOUT, flags);
        return 0;
    }
    if (rc) return 2;
    if (is_info) {
        static const char *const none[] = {NULL};
        if (check_flags(flags, sub, none)) return 2;
        if (!path) {
            fprintf(stderr, "error: actc graph info needs the graph file: actc graph info PATH\n");
            return 2;
        }
        return run_info(path);
    }
    if (!strcmp(sub, "build")) {
        static const char *const allowed[] = {"--out", "--k", "--data-dir", NULL};
        if (check_flags(flags, sub, allowed)) return 2;
        if (o.k < 1) {
            fprintf(stderr, "error: --k must be at least 1 (got %d)\n", o.k);
            return 2;
        }
        /* --data graph reads the default cache as the k = 10 graph. */
        if (o.k != 10 && !o.out) {
            fprintf(stderr, "error: --k %d: the default cache %s holds the 10-nearest-neighbour graph; write another k "
                            "with --out PATH (and train on it with --data graph:PATH)\n", o.k, cli_graph_cache());
            return 2;
        }
        return run_build(&o);
    }
    static const char *const allowed[] = {"--out",  "--nodes", "--degree", "--classes", "--features", "--p-in",
                                          "--noise", "--train", "--val",   "--seed",    NULL};
    if (check_flags(flags, sub, allowed)) return 2;
    return run_sbm(&o, flags);
}

const command cmd_graph_def = {"graph", "build, generate or describe a graph file (node classification)", USAGE, ABOUT,
                               build_flags, sizeof(graph_opts), cmd_graph};
