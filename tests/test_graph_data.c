/* Graph data: actc_graph_new (adjacency, GCN weights, edge count, every
 * refusal), the graph file (round trip of every field; every malformed file
 * refused with the right status and a telling message), the split, the
 * graph source, the SBM generator (determinism, edge count, intra-block
 * fraction, split) and the kNN graph against a brute-force reference. */
#include "testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static char g_dir[64];

static const char *tpath(const char *name)
{
    static char bufs[4][256];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, 256, "%s/%s", g_dir, name);
    return b;
}

static void write_bytes(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static uint8_t *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n + 1);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

/* Expect status st and a message containing every needle (NULL-ended). */
static void expect_err(actc_status got, actc_status st, const char *needle, const char *needle2)
{
    if (got != st || !strstr(actc_last_error(), needle) || (needle2 && !strstr(actc_last_error(), needle2)))
        print_error("status %s, message: %s (wanted %s with '%s'%s%s)\n", actc_status_name(got), actc_last_error(),
                    actc_status_name(st), needle, needle2 ? " and " : "", needle2 ? needle2 : "");
    assert_int_equal(got, st);
    assert_non_null(strstr(actc_last_error(), needle));
    if (needle2) assert_non_null(strstr(actc_last_error(), needle2));
    actc_clear_error();
}

/* ---- a graph file in memory, field by field ---- */

typedef struct {
    int32_t n, nf, nc;
    int64_t m;
    float x[64];
    int32_t y[16];
    int8_t split[16];
    int32_t src[16], dst[16];
} raw_graph;

static void put32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* The file bytes of r (sizes as r says), CRC fixed; *len its size. */
static uint8_t *raw_file(const raw_graph *r, size_t *len)
{
    const size_t n = (size_t)r->n, xs = n * (size_t)r->nf;
    *len = 32 + 4 * xs + 4 * n + n + 8 * (size_t)r->m + 4;
    uint8_t *b = calloc(1, *len + 16), *p = b;
    memcpy(p, "ACTCGRPH", 8);
    put32(p + 8, 1);
    put32(p + 12, (uint32_t)r->n);
    put32(p + 16, (uint32_t)r->nf);
    put32(p + 20, (uint32_t)r->nc);
    put32(p + 24, (uint32_t)r->m);
    put32(p + 28, (uint32_t)((uint64_t)r->m >> 32));
    p += 32;
    memcpy(p, r->x, 4 * xs), p += 4 * xs;
    memcpy(p, r->y, 4 * n), p += 4 * n;
    memcpy(p, r->split, n), p += n;
    memcpy(p, r->src, 4 * (size_t)r->m), p += 4 * (size_t)r->m;
    memcpy(p, r->dst, 4 * (size_t)r->m), p += 4 * (size_t)r->m;
    put32(p, (uint32_t)crc32(0, b, (uInt)(*len - 4)));
    return b;
}

static void fix_crc(uint8_t *b, size_t len) { put32(b + len - 4, (uint32_t)crc32(0, b, (uInt)(len - 4))); }

/* 4 nodes, 2 features, 3 classes, 3 edges: a valid small graph. */
static raw_graph small_raw(void)
{
    raw_graph r;
    memset(&r, 0, sizeof r);
    r.n = 4, r.nf = 2, r.nc = 3, r.m = 3;
    for (int i = 0; i < 8; i++) r.x[i] = 0.5f * (float)i;
    const int32_t y[4] = {0, 1, 2, 1};
    const int8_t sp[4] = {0, 1, 2, -1};
    const int32_t s[3] = {0, 1, 2}, d[3] = {1, 2, 3};
    memcpy(r.y, y, sizeof y), memcpy(r.split, sp, sizeof sp), memcpy(r.src, s, sizeof s), memcpy(r.dst, d, sizeof d);
    return r;
}

static actc_status load_raw(const raw_graph *r, const char *name)
{
    size_t len;
    uint8_t *b = raw_file(r, &len);
    write_bytes(tpath(name), b, len);
    free(b);
    actc_graph *g = NULL;
    actc_status st = actc_graph_load(tpath(name), &g);
    assert_true(st == ACTC_OK ? g != NULL : g == NULL);
    actc_graph_free(g);
    return st;
}

/* ---- tests ---- */

static void test_hand_graph(void **state)
{
    (void)state;
    /* 0-1, 1-2, 2-1 (a duplicate), 3-3 (a self-loop), 1-0 (a duplicate) */
    const int32_t src[5] = {0, 1, 2, 3, 1}, dst[5] = {1, 2, 1, 3, 0}, y[4] = {0, 1, 0, 1};
    const int8_t split[4] = {0, 0, 1, 2};
    float x[8];
    for (int i = 0; i < 8; i++) x[i] = (float)i;
    actc_graph *g = NULL;
    assert_int_equal(actc_graph_new(4, 2, 2, x, y, split, 5, src, dst, &g), ACTC_OK);
    assert_int_equal(g->n_edges, 2);
    const int64_t rowptr[5] = {0, 2, 5, 7, 8};
    const int32_t col[8] = {0, 1, 0, 1, 2, 1, 2, 3};
    assert_int_equal(g->adj.nnz, 8);
    assert_memory_equal(g->adj.rowptr, rowptr, sizeof rowptr);
    assert_memory_equal(g->adj.col, col, sizeof col);
    /* degrees 2, 3, 2, 1: w = 1 / sqrt(d_i d_j) */
    const double d[4] = {2, 3, 2, 1};
    for (int i = 0; i < 4; i++)
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++)
            assert_true(fabs(g->norm[k] - 1.0 / sqrt(d[i] * d[col[k]])) < 1e-6);
    /* the transpose of a symmetric matrix: same structure, perm names the entry (j, i) */
    assert_memory_equal(g->adj_t.rowptr, rowptr, sizeof rowptr);
    for (int i = 0; i < 4; i++)
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) assert_int_equal(g->adj.col[g->adj_t.perm[k]], i);
    assert_memory_equal(g->x->data, x, sizeof x);
    assert_int_equal(g->x->shape[0], 4);
    assert_int_equal(g->x->shape[1], 2);
    int counts[3];
    actc_graph_split_counts(g, counts);
    assert_int_equal(counts[0], 2);
    assert_int_equal(counts[1], 1);
    assert_int_equal(counts[2], 1);
    actc_graph_free(g);
}

static void test_new_refusals(void **state)
{
    (void)state;
    float x[8] = {0};
    int32_t y[4] = {0, 1, 0, 1}, src[2] = {0, 1}, dst[2] = {1, 2};
    int8_t split[4] = {0, 1, 2, -1};
    actc_graph *g = (actc_graph *)1;
    expect_err(actc_graph_new(0, 2, 2, x, y, split, 2, src, dst, &g), ACTC_ERR_INVALID, "node", NULL);
    assert_null(g);
    expect_err(actc_graph_new(4, 0, 2, x, y, split, 2, src, dst, &g), ACTC_ERR_INVALID, "feature", NULL);
    expect_err(actc_graph_new(4, 2, 0, x, y, split, 2, src, dst, &g), ACTC_ERR_INVALID, "class", NULL);
    /* More classes than nodes: they cannot all occur (2^20 on 4 nodes once ran into the budget). */
    expect_err(actc_graph_new(4, 2, 1 << 20, x, y, split, 2, src, dst, &g), ACTC_ERR_INVALID, "4 nodes cannot have 1048576 classes", NULL);
    dst[1] = 4;
    expect_err(actc_graph_new(4, 2, 2, x, y, split, 2, src, dst, &g), ACTC_ERR_INVALID, "edge 1", "node 4");
    dst[1] = -5;
    expect_err(actc_graph_new(4, 2, 2, x, y, split, 2, src, dst, &g), ACTC_ERR_INVALID, "edge 1", "-5");
    dst[1] = 2;
    y[2] = 2;
    expect_err(actc_graph_new(4, 2, 2, x, y, split, 2, src, dst, &g), ACTC_ERR_INVALID, "label 2", NULL);
    y[2] = -1;
    expect_err(actc_graph_new(4, 2, 2, x, y, split, 2, src, dst, &g), ACTC_ERR_INVALID, "label -1", NULL);
    y[2] = 0;
    split[3] = 3;
    expect_err(actc_graph_new(4, 2, 2, x, y, split, 2, src, dst, &g), ACTC_ERR_INVALID, "split value 3", NULL);
    split[3] = -1;
    split[0] = 2;
    expect_err(actc_graph_new(4, 2, 2, x, y, split, 2, src, dst, &g), ACTC_ERR_INVALID, "no training node", NULL);
    assert_null(g);
}

/* Every field of two graphs. */
static void assert_same_graph(const actc_graph *a, const actc_graph *b)
{
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->n_features, b->n_features);
    assert_int_equal(a->n_classes, b->n_classes);
    assert_int_equal(a->n_edges, b->n_edges);
    assert_int_equal(a->adj.nnz, b->adj.nnz);
    assert_memory_equal(a->adj.rowptr, b->adj.rowptr, ((size_t)a->n + 1) * sizeof(int64_t));
    assert_memory_equal(a->adj.col, b->adj.col, (size_t)a->adj.nnz * sizeof(int32_t));
    assert_memory_equal(a->adj_t.rowptr, b->adj_t.rowptr, ((size_t)a->n + 1) * sizeof(int64_t));
    assert_memory_equal(a->adj_t.col, b->adj_t.col, (size_t)a->adj.nnz * sizeof(int32_t));
    assert_memory_equal(a->adj_t.perm, b->adj_t.perm, (size_t)a->adj.nnz * sizeof(int64_t));
    assert_memory_equal(a->norm, b->norm, (size_t)a->adj.nnz * sizeof(float));
    assert_int_equal(a->x->numel, b->x->numel);
    assert_memory_equal(a->x->data, b->x->data, a->x->numel * sizeof(float));
    assert_memory_equal(a->y, b->y, (size_t)a->n * sizeof(int32_t));
    assert_memory_equal(a->split, b->split, (size_t)a->n);
}

static void test_round_trip(void **state)
{
    (void)state;
    actc_sbm_opts o = actc_sbm_default_opts();
    o.n = 300, o.n_train = 30, o.n_val = 20, o.classes = 3, o.n_features = 5, o.degree = 6;
    actc_graph *g = NULL, *h = NULL;
    assert_int_equal(actc_graph_sbm(&o, &g), ACTC_OK);
    g->split[7] = ACTC_SPLIT_NONE;
    assert_int_equal(actc_graph_save(g, tpath("rt.graph")), ACTC_OK);
    assert_int_equal(actc_graph_load(tpath("rt.graph"), &h), ACTC_OK);
    assert_same_graph(g, h);
    assert_string_equal(h->source, tpath("rt.graph"));
    /* saved again: the same bytes */
    assert_int_equal(actc_graph_save(h, tpath("rt2.graph")), ACTC_OK);
    size_t n1, n2;
    uint8_t *b1 = read_bytes(tpath("rt.graph"), &n1), *b2 = read_bytes(tpath("rt2.graph"), &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    assert_int_equal(n1, 32 + 4 * 300 * 5 + 5 * 300 + 8 * (size_t)g->n_edges + 4);
    free(b1), free(b2);
    actc_graph_free(g);
    actc_graph_free(h);
    /* the small raw graph loads as written */
    raw_graph r = small_raw();
    assert_int_equal(load_raw(&r, "small.graph"), ACTC_OK);
}

static void test_bad_files(void **state)
{
    (void)state;
    actc_graph *g = (actc_graph *)1;
    expect_err(actc_graph_load(tpath("missing.graph"), &g), ACTC_ERR_IO, "missing.graph", NULL);
    assert_null(g);
    expect_err(actc_graph_load(g_dir, &g), ACTC_ERR_IO, "directory", NULL);
    raw_graph r = small_raw();
    size_t len;
    uint8_t *b = raw_file(&r, &len);
    const char *p = tpath("bad.graph");
    /* bad magic */
    b[0] = 'X';
    write_bytes(p, b, len);
    expect_err(actc_graph_load(p, &g), ACTC_ERR_FORMAT, "magic", "bad.graph");
    b[0] = 'A';
    /* truncated at several points */
    const size_t cuts[] = {0, 5, 8, 20, 31, 32, 40, len - 30, len - 5, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        write_bytes(p, b, cuts[i]);
        expect_err(actc_graph_load(p, &g), ACTC_ERR_FORMAT, "truncated", "bad.graph");
        assert_null(g);
    }
    /* a trailing byte */
    write_bytes(p, b, len + 1);
    expect_err(actc_graph_load(p, &g), ACTC_ERR_FORMAT, "trailing", "bad.graph");
    /* a flipped byte: the CRC */
    b[40] ^= 0x10;
    write_bytes(p, b, len);
    expect_err(actc_graph_load(p, &g), ACTC_ERR_FORMAT, "CRC", "bad.graph");
    b[40] ^= 0x10;
    b[len - 1] ^= 1;
    write_bytes(p, b, len);
    expect_err(actc_graph_load(p, &g), ACTC_ERR_FORMAT, "CRC", NULL);
    /* an unknown version */
    b[len - 1] ^= 1;
    b[8] = 2;
    fix_crc(b, len);
    write_bytes(p, b, len);
    expect_err(actc_graph_load(p, &g), ACTC_ERR_FORMAT, "version 2", NULL);
    /* the header claims one more node than the arrays hold (labels...) */
    b[8] = 1;
    put32(b + 12, 5);
    fix_crc(b, len);
    write_bytes(p, b, len);
    expect_err(actc_graph_load(p, &g), ACTC_ERR_FORMAT, "label count mismatch", "declares");
    /* ...or a huge count: refused before any allocation */
    put32(b + 12, 0x7fffffff);
    put32(b + 16, 0x7fffffff);
    put32(b + 28, 0x10000000);
    fix_crc(b, len);
    write_bytes(p, b, len);
    expect_err(actc_graph_load(p, &g), ACTC_ERR_FORMAT, "declares", NULL);
    free(b);
    /* content: the rules of actc_graph_new, as format errors naming the file */
    r = small_raw();
    r.dst[2] = 4;
    expect_err(load_raw(&r, "e.graph"), ACTC_ERR_FORMAT, "e.graph", "edge 2");
    r.dst[2] = -1;
    expect_err(load_raw(&r, "e.graph"), ACTC_ERR_FORMAT, "node -1", NULL);
    r = small_raw();
    r.y[1] = 3;
    expect_err(load_raw(&r, "l.graph"), ACTC_ERR_FORMAT, "l.graph", "label 3");
    r = small_raw();
    r.split[2] = 9;
    expect_err(load_raw(&r, "s.graph"), ACTC_ERR_FORMAT, "s.graph", "split value 9");
    r = small_raw();
    r.split[0] = 1;
    expect_err(load_raw(&r, "t.graph"), ACTC_ERR_FORMAT, "t.graph", "no training node");
    r = small_raw();
    r.n = 0, r.m = 0;
    expect_err(load_raw(&r, "z.graph"), ACTC_ERR_FORMAT, "z.graph", "empty");
    r = small_raw();
    r.n = -3, r.m = 0;
    {
        size_t l;
        uint8_t *nb = raw_file(&(raw_graph){.n = 0, .nf = 2, .nc = 3}, &l);
        put32(nb + 12, (uint32_t)-3);
        fix_crc(nb, l);
        write_bytes(p, nb, l);
        free(nb);
        expect_err(actc_graph_load(p, &g), ACTC_ERR_FORMAT, "negative", NULL);
    }
    r = small_raw();
    r.nc = 0;
    expect_err(load_raw(&r, "c.graph"), ACTC_ERR_FORMAT, "class", NULL);
    assert_null(g);
}

static void test_split_and_source(void **state)
{
    (void)state;
    actc_sbm_opts o = actc_sbm_default_opts();
    o.n = 500, o.n_train = 50, o.n_val = 100;
    actc_graph *g = NULL;
    assert_int_equal(actc_graph_sbm(&o, &g), ACTC_OK);
    int c[3];
    actc_graph_split_counts(g, c);
    assert_int_equal(c[0], 50), assert_int_equal(c[1], 100), assert_int_equal(c[2], 350);
    int8_t *before = malloc(500);
    memcpy(before, g->split, 500);
    assert_int_equal(actc_graph_resplit(g, 10, 20, 5), ACTC_OK);
    actc_graph_split_counts(g, c);
    assert_int_equal(c[0], 10), assert_int_equal(c[1], 20), assert_int_equal(c[2], 470);
    int8_t *s5 = malloc(500);
    memcpy(s5, g->split, 500);
    assert_int_equal(actc_graph_resplit(g, 10, 20, 6), ACTC_OK);
    assert_true(memcmp(s5, g->split, 500) != 0);
    assert_int_equal(actc_graph_resplit(g, 10, 20, 5), ACTC_OK);
    assert_memory_equal(s5, g->split, 500); /* a pure function of the seed */
    expect_err(actc_graph_resplit(g, 0, 20, 5), ACTC_ERR_INVALID, "training", NULL);
    expect_err(actc_graph_resplit(g, 400, 101, 5), ACTC_ERR_INVALID, "500 nodes", NULL);
    assert_memory_equal(s5, g->split, 500); /* unchanged by a refusal */
    /* the source: one batch, the validation nodes ascending and their labels */
    actc_source *src = NULL;
    assert_int_equal(actc_source_graph(g, ACTC_SPLIT_VAL, &src), ACTC_OK);
    assert_int_equal(actc_source_batches(src), 1);
    actc_batch b;
    assert_int_equal(actc_source_get(src, 3, 0, 7, &b), ACTC_OK);
    assert_ptr_equal(b.x, g->x);
    assert_ptr_equal(b.graph, g);
    assert_int_equal(b.B, 20);
    assert_int_equal(b.T, 1);
    /* actc_batch_samples(&b) == 1 belongs to the models layer (src/models/model.c), not done here */
    for (int i = 0; i < b.B; i++) {
        assert_int_equal(g->split[b.ids[i]], ACTC_SPLIT_VAL);
        assert_int_equal(b.labels[i], g->y[b.ids[i]]);
        if (i) assert_true(b.ids[i] > b.ids[i - 1]);
    }
    actc_source_free(src);
    /* no test node: the source refuses */
    for (int i = 0; i < 500; i++)
        if (g->split[i] == ACTC_SPLIT_TEST) g->split[i] = ACTC_SPLIT_NONE;
    src = (actc_source *)1;
    expect_err(actc_source_graph(g, ACTC_SPLIT_TEST, &src), ACTC_ERR_INVALID, "selects no node", "test");
    assert_null(src);
    expect_err(actc_source_graph(g, 3, &src), ACTC_ERR_INVALID, "split 3", NULL);
    expect_err(actc_source_graph(g, -1, &src), ACTC_ERR_INVALID, "split -1", NULL);
    free(before), free(s5);
    actc_graph_free(g);
}

static void test_sbm(void **state)
{
    (void)state;
    actc_sbm_opts o = actc_sbm_default_opts();
    o.n = 20000;
    actc_graph *a = NULL, *b = NULL;
    assert_int_equal(actc_graph_sbm(&o, &a), ACTC_OK);
    actc_set_threads(1);
    assert_int_equal(actc_graph_sbm(&o, &b), ACTC_OK);
    actc_set_threads(0);
    assert_same_graph(a, b); /* a pure function of the seed, at any thread count */
    actc_graph_free(b);
    o.seed = 2;
    assert_int_equal(actc_graph_sbm(&o, &b), ACTC_OK);
    assert_true(a->adj.nnz != b->adj.nnz || memcmp(a->adj.col, b->adj.col, (size_t)a->adj.nnz * 4) != 0);
    actc_graph_free(b);
    /* about n * degree / 2 edges (a few duplicates merged) */
    const double want = 20000 * 10 / 2.0;
    assert_true(a->n_edges <= (int64_t)want && a->n_edges > 0.99 * want);
    /* a fraction p_in of them inside a block; labels the blocks */
    int64_t intra = 0;
    for (int i = 0; i < a->n; i++)
        for (int64_t k = a->adj.rowptr[i]; k < a->adj.rowptr[i + 1]; k++)
            if (a->adj.col[k] < i) intra += a->y[a->adj.col[k]] == a->y[i];
    const double frac = (double)intra / (double)a->n_edges;
    print_message("  sbm n=20000: %lld edges, %.4f inside a block\n", (long long)a->n_edges, frac);
    assert_true(fabs(frac - 0.8) < 0.01);
    int c[3];
    actc_graph_split_counts(a, c);
    assert_int_equal(c[0], 1000), assert_int_equal(c[1], 1000), assert_int_equal(c[2], 18000);
    /* features: the block's one-hot plus noise of std 1 */
    double on = 0, off = 0, var = 0;
    for (int i = 0; i < a->n; i++)
        for (int f = 0; f < 32; f++) {
            const double v = a->x->data[(size_t)i * 32 + f];
            if (f == a->y[i]) on += v;
            else off += v, var += v * v;
        }
    on /= a->n, off /= (double)a->n * 31, var /= (double)a->n * 31;
    assert_true(fabs(on - 1) < 0.05 && fabs(off) < 0.02 && fabs(var - 1) < 0.03);
    actc_graph_free(a);
    /* options checked */
    actc_graph *g = (actc_graph *)1;
    o = actc_sbm_default_opts();
    o.n_features = 5;
    expect_err(actc_graph_sbm(&o, &g), ACTC_ERR_INVALID, "features", NULL);
    o = actc_sbm_default_opts();
    o.p_in = 1.5;
    expect_err(actc_graph_sbm(&o, &g), ACTC_ERR_INVALID, "p_in", NULL);
    o = actc_sbm_default_opts();
    o.n = 1500;
    expect_err(actc_graph_sbm(&o, &g), ACTC_ERR_INVALID, "training", NULL);
    o = actc_sbm_default_opts();
    o.degree = NAN;
    expect_err(actc_graph_sbm(&o, &g), ACTC_ERR_INVALID, "degree", NULL);
    assert_null(g);
}

/* Reference: exact integer dot products, the library's ranking (dot / |p_j|
 * in float, ties to the lower index), symmetric neighbour sets. */
static void test_knn(void **state)
{
    (void)state;
    enum { N0 = 200, N1 = 100, N = N0 + N1, D = 64, K = 5 };
    actc_image_dataset p0 = {N0, 1, 8, 8, malloc(N0 * D), malloc(N0 * 4), 10};
    actc_image_dataset p1 = {N1, 1, 8, 8, malloc(N1 * D), malloc(N1 * 4), 10};
    uint8_t *px = malloc(N * D);
    int32_t lab[N];
    for (int i = 0; i < N * D; i++) px[i] = (uint8_t)(actc_rand_uniform(99, (uint64_t)i) * 256);
    for (int i = 0; i < N; i++) lab[i] = (int32_t)(actc_rand_uniform(98, (uint64_t)i) * 7);
    memset(px + 17 * D, 0, D);            /* an all-zero image */
    memcpy(px + 250 * D, px + 3 * D, D);  /* duplicates: exact ties */
    memcpy(px + 251 * D, px + 3 * D, D);
    memcpy(p0.pixels, px, N0 * D), memcpy(p1.pixels, px + N0 * D, N1 * D);
    memcpy(p0.labels, lab, N0 * 4), memcpy(p1.labels, lab + N0, N1 * 4);
    const actc_image_dataset *parts[2] = {&p0, &p1};
    actc_graph *g = NULL;
    assert_int_equal(actc_graph_knn_images(parts, 2, K, &g), ACTC_OK);
    assert_int_equal(g->n, N);
    assert_int_equal(g->n_features, D);
    int maxl = 0;
    for (int i = 0; i < N; i++) maxl = lab[i] > maxl ? lab[i] : maxl;
    assert_int_equal(g->n_classes, maxl + 1);
    assert_memory_equal(g->y, lab, sizeof lab);
    for (int i = 0; i < N * D; i++) assert_true(g->x->data[i] == (float)px[i] * (1.0f / 255.0f));
    /* brute force */
    float inv[N];
    for (int j = 0; j < N; j++) {
        uint64_t ss = 0;
        for (int t = 0; t < D; t++) ss += (uint64_t)px[j * D + t] * px[j * D + t];
        inv[j] = ss ? (float)(1.0 / sqrt((double)ss)) : 0.0f;
    }
    uint8_t *want = calloc(N * N, 1);
    for (int i = 0; i < N; i++) {
        float s[N];
        for (int j = 0; j < N; j++) {
            int64_t dot = 0;
            for (int t = 0; t < D; t++) dot += (int64_t)px[i * D + t] * px[j * D + t];
            s[j] = (float)dot * inv[j];
        }
        uint8_t chosen[N] = {0};
        for (int r = 0; r < K; r++) { /* selection: largest, then lowest index */
            int best = -1;
            for (int j = 0; j < N; j++)
                if (j != i && !chosen[j] && (best < 0 || s[j] > s[best])) best = j;
            chosen[best] = 1;
            want[i * N + best] = want[best * N + i] = 1;
        }
        if (i == 17)
            for (int j = 0; j < K; j++) assert_true(want[17 * N + j]); /* the zero image: the lowest indices */
    }
    assert_true(want[3 * N + 250] && want[3 * N + 251] && want[250 * N + 251]);
    int64_t edges = 0;
    for (int i = 0; i < N; i++) {
        int deg = 0;
        for (int64_t k = g->adj.rowptr[i]; k < g->adj.rowptr[i + 1]; k++) {
            const int j = g->adj.col[k];
            if (j == i) continue;
            assert_true(want[i * N + j]);
            deg++;
        }
        int wdeg = 0;
        for (int j = 0; j < N; j++) wdeg += want[i * N + j];
        assert_int_equal(deg, wdeg);
        assert_true(deg >= K);
        edges += deg;
    }
    assert_int_equal(edges, 2 * g->n_edges);
    int c[3];
    actc_graph_split_counts(g, c);
    assert_int_equal(c[0], 100), assert_int_equal(c[1], 100), assert_int_equal(c[2], 100);
    actc_graph_free(g);
    /* refusals */
    g = (actc_graph *)1;
    expect_err(actc_graph_knn_images(parts, 2, N, &g), ACTC_ERR_INVALID, "k = 300", NULL);
    expect_err(actc_graph_knn_images(parts, 2, 0, &g), ACTC_ERR_INVALID, "k = 0", NULL);
    p1.w = 4, p1.h = 16;
    expect_err(actc_graph_knn_images(parts, 2, K, &g), ACTC_ERR_INVALID, "same shape", NULL);
    assert_null(g);
    free(want), free(px);
    actc_image_dataset_free(&p0);
    actc_image_dataset_free(&p1);
}

/* The Fashion-MNIST graph from its cache, when `actc graph build` wrote it
 * (building it here would take a minute); a cache that is another graph
 * is refused. */
static void test_fashion_mnist_cache(void **state)
{
    (void)state;
    actc_sbm_opts o = actc_sbm_default_opts();
    actc_graph *g = NULL;
    assert_int_equal(actc_graph_sbm(&o, &g), ACTC_OK);
    assert_int_equal(actc_graph_save(g, tpath("other.graph")), ACTC_OK);
    actc_graph_free(g);
    g = (actc_graph *)1;
    expect_err(actc_graph_fashion_mnist("/nonexistent", tpath("other.graph"), &g), ACTC_ERR_FORMAT,
               "not the Fashion-MNIST", "other.graph");
    assert_null(g);
    expect_err(actc_graph_fashion_mnist("/nonexistent", tpath("none.graph"), &g), ACTC_ERR_IO, "Fashion-MNIST",
               NULL);
    char path[512];
    snprintf(path, sizeof path, "%s/build/data/fmnist-knn10.graph", tu_source_dir());
    FILE *f = fopen(path, "rb");
    if (!f) {
        print_message("  no %s (actc graph build): skipped\n", path);
        return;
    }
    fclose(f);
    assert_int_equal(actc_graph_fashion_mnist(NULL, path, &g), ACTC_OK);
    int c[3];
    actc_graph_split_counts(g, c);
    assert_int_equal(g->n, 70000);
    assert_int_equal(c[0], 1000), assert_int_equal(c[1], 1000), assert_int_equal(c[2], 68000);
    for (int i = 0; i < g->n; i++) assert_true(g->adj.rowptr[i + 1] - g->adj.rowptr[i] >= 11);
    actc_graph_free(g);
}

static int setup(void **state)
{
    (void)state;
    return tu_make_temp_dir(g_dir, sizeof g_dir, "actc_graph");
}

static int teardown(void **state)
{
    (void)state;
    return tu_remove_dir(g_dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_graph),   cmocka_unit_test(test_new_refusals), cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_bad_files),    cmocka_unit_test(test_split_and_source), cmocka_unit_test(test_sbm),
        cmocka_unit_test(test_knn),          cmocka_unit_test(test_fashion_mnist_cache),
    };
    const int rc = cmocka_run_group_tests(tests, setup, teardown);
    actc_shutdown();
    return rc;
}
