/* Data layer: IDX reader (plain and gzip, every malformed case) and the batch
 * loader (determinism in (seed, epoch, index), one visit per sample and epoch,
 * crop/flip geometry, normalisation, thread-count independence). */
#include "testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char g_dir[64];

/* ---- writing test files ---------------------------------------------------- */

static void be32(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

/* dir/name (static buffer rotation so two paths can be live at once). */
static const char *tpath(const char *name)
{
    static char bufs[4][256];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, 256, "%s/%s", g_dir, name);
    return b;
}

static void write_raw(const char *path, const uint8_t *b, size_t n, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        if (n) assert_int_equal(gzwrite(f, b, (unsigned)n), (int)n);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        if (n) assert_int_equal(fwrite(b, 1, n, f), n);
        assert_int_equal(fclose(f), 0);
    }
}

/* An IDX file: magic 0x0000 08 nd, dims, then `ndata` bytes of data (which
 * may disagree with the dims, to make bad files). */
static void write_idx(const char *path, int gz, uint32_t magic, int nd, const uint32_t *dims,
                      const uint8_t *data, size_t ndata)
{
    size_t n = 4 + 4 * (size_t)nd + ndata;
    uint8_t *b = malloc(n);
    be32(b, magic);
    for (int i = 0; i < nd; i++) be32(b + 4 + 4 * i, dims[i]);
    if (ndata) memcpy(b + 4 + 4 * nd, data, ndata);
    write_raw(path, b, n, gz);
    free(b);
}

/* A valid pair: n images of h x w with pixel (i,y,x) = (i*7 + y*w + x) % 256
 * and label i % 3 (so num_classes == 3 when n >= 3). */
static void write_pair(const char *img, const char *lab, int gz, uint32_t n, uint32_t h, uint32_t w)
{
    uint8_t *px = malloc((size_t)n * h * w), *lb = malloc(n);
    for (uint32_t i = 0; i < n; i++) {
        lb[i] = (uint8_t)(i % 3);
        for (uint32_t j = 0; j < h * w; j++) px[(size_t)i * h * w + j] = (uint8_t)((i * 7 + j) % 256);
    }
    uint32_t di[3] = {n, h, w};
    write_idx(img, gz, 0x803, 3, di, px, (size_t)n * h * w);
    write_idx(lab, gz, 0x801, 1, &n, lb, n);
    free(px);
    free(lb);
}

static int setup(void **state)
{
    (void)state;
    return tu_make_temp_dir(g_dir, sizeof g_dir, "actc_test_data");
}

static int teardown(void **state)
{
    (void)state;
    return tu_remove_dir(g_dir);
}

/* ---- IDX reader ------------------------------------------------------------- */

static void check_pair_content(const actc_image_dataset *d, int n, int h, int w)
{
    assert_int_equal(d->n, n);
    assert_int_equal(d->c, 1);
    assert_int_equal(d->h, h);
    assert_int_equal(d->w, w);
    assert_int_equal(d->num_classes, 3);
    for (int i = 0; i < n; i++) {
        assert_int_equal(d->labels[i], i % 3);
        for (int j = 0; j < h * w; j++)
            assert_int_equal(d->pixels[(size_t)i * h * w + j], (i * 7 + j) % 256);
    }
}

static void test_idx_plain_and_gzip(void **state)
{
    (void)state;
    for (int gz = 0; gz < 2; gz++) {
        const char *img = tpath(gz ? "ok-img.gz" : "ok-img"), *lab = tpath(gz ? "ok-lab.gz" : "ok-lab");
        write_pair(img, lab, gz, 5, 3, 4);
        actc_image_dataset d;
        assert_int_equal(actc_idx_load(img, lab, &d), ACTC_OK);
        check_pair_content(&d, 5, 3, 4);
        actc_image_dataset_free(&d);
        assert_null(d.pixels);
    }
    /* A gzip image file with a plain label file is fine too. */
    actc_image_dataset d;
    assert_int_equal(actc_idx_load(tpath("ok-img.gz"), tpath("ok-lab"), &d), ACTC_OK);
    check_pair_content(&d, 5, 3, 4);
    actc_image_dataset_free(&d);
}

/* Load and expect status st with a message containing both needles. */
static void expect_fail(const char *img, const char *lab, actc_status st, const char *needle1,
                        const char *needle2)
{
    actc_image_dataset d;
    memset(&d, 0x5a, sizeof d);
    actc_clear_error();
    actc_status s = actc_idx_load(img, lab, &d);
    if (s != st || !strstr(actc_last_error(), needle1) || (needle2 && !strstr(actc_last_error(), needle2)))
        fail_msg("expected %s with '%s'/'%s', got %s: %s", actc_status_name(st), needle1,
                 needle2 ? needle2 : "", actc_status_name(s), actc_last_error());
    /* Nothing half-loaded is handed back. */
    assert_null(d.pixels);
    assert_null(d.labels);
    assert_int_equal(d.n, 0);
}

static void test_idx_bad_files(void **state)
{
    (void)state;
    /* Own copies: tpath's buffers rotate. */
    char img[256], lab[256];
    snprintf(img, sizeof img, "%s", tpath("good-img"));
    snprintf(lab, sizeof lab, "%s", tpath("good-lab"));
    write_pair(img, lab, 0, 6, 2, 2);
    uint8_t px[64] = {0}, lb[16] = {0};

    /* Missing files: I/O error naming the path. */
    expect_fail(tpath("nope-img"), lab, ACTC_ERR_IO, tpath("nope-img"), NULL);
    expect_fail(img, tpath("nope-lab"), ACTC_ERR_IO, tpath("nope-lab"), NULL);
    /* A directory instead of a file. */
    expect_fail(g_dir, lab, ACTC_ERR_IO, g_dir, "directory");

    for (int gz = 0; gz < 2; gz++) {
        char name[64];
#define BAD(tag) (snprintf(name, sizeof name, "bad-%s%s", tag, gz ? ".gz" : ""), tpath(name))
        uint32_t d3[3] = {6, 2, 2}, d4[4] = {6, 1, 2, 2};
        /* Wrong magic (not an IDX file at all). */
        const char *p = BAD("magic");
        write_idx(p, gz, 0x12345678, 3, d3, px, 24);
        expect_fail(p, lab, ACTC_ERR_FORMAT, p, "magic");
        /* A label file given as the image file: IDX, but 1 dim. */
        expect_fail(lab, lab, ACTC_ERR_FORMAT, lab, "dimensions");
        /* Right type, wrong number of dims. */
        p = BAD("dims");
        write_idx(p, gz, 0x804, 4, d4, px, 24);
        expect_fail(p, lab, ACTC_ERR_FORMAT, p, "4 dimensions");
        /* Image data shorter than the header promises. */
        p = BAD("trunc");
        write_idx(p, gz, 0x803, 3, d3, px, 23);
        expect_fail(p, lab, ACTC_ERR_FORMAT, p, "truncated");
        /* Header itself cut short. */
        p = BAD("trunchdr");
        write_idx(p, gz, 0x803, 1, d3, NULL, 0); /* magic + 1 of 3 dims */
        expect_fail(p, lab, ACTC_ERR_FORMAT, p, "truncated");
        p = BAD("empty");
        write_raw(p, NULL, 0, gz);
        expect_fail(p, lab, ACTC_ERR_FORMAT, p, "truncated");
        /* Truncated labels. */
        p = BAD("trunclab");
        uint32_t six = 6;
        write_idx(p, gz, 0x801, 1, &six, lb, 5);
        expect_fail(img, p, ACTC_ERR_FORMAT, p, "truncated");
        /* Trailing garbage is rejected (see idx.c: usually a wrong file). */
        p = BAD("trail");
        write_idx(p, gz, 0x803, 3, d3, px, 25);
        expect_fail(p, lab, ACTC_ERR_FORMAT, p, "trailing");
        /* Zero images, zero labels. */
        uint32_t d0[3] = {0, 2, 2}, zero = 0;
        p = BAD("zero");
        write_idx(p, gz, 0x803, 3, d0, NULL, 0);
        expect_fail(p, lab, ACTC_ERR_FORMAT, p, "zero images");
        p = BAD("zerolab");
        write_idx(p, gz, 0x801, 1, &zero, NULL, 0);
        expect_fail(img, p, ACTC_ERR_FORMAT, p, "zero labels");
        /* Image count != label count: both files named. */
        p = BAD("fivelab");
        uint32_t five = 5;
        write_idx(p, gz, 0x801, 1, &five, lb, 5);
        expect_fail(img, p, ACTC_ERR_FORMAT, img, p);
#undef BAD
    }

    /* A gzip stream cut in the middle of the data. */
    const char *gzfull = tpath("cut-img.gz");
    uint32_t dd[3] = {6, 8, 8};
    uint8_t big[384];
    for (int i = 0; i < 384; i++) big[i] = (uint8_t)(i * 37 + (i >> 3));
    write_idx(gzfull, 1, 0x803, 3, dd, big, sizeof big);
    FILE *f = fopen(gzfull, "rb");
    assert_non_null(f);
    uint8_t raw[2048];
    size_t n = fread(raw, 1, sizeof raw, f);
    fclose(f);
    assert_true(n > 40 && n < sizeof raw);
    const char *cut = tpath("cut2-img.gz");
    write_raw(cut, raw, n / 2, 0);
    expect_fail(cut, lab, ACTC_ERR_FORMAT, cut, NULL);
    /* Corrupt gzip body (CRC or inflate error). */
    raw[n / 2] ^= 0xff;
    raw[n / 2 + 1] ^= 0xff;
    const char *bad = tpath("corrupt-img.gz");
    write_raw(bad, raw, n, 0);
    expect_fail(bad, lab, ACTC_ERR_FORMAT, bad, NULL);
    raw[n / 2] ^= 0xff;
    raw[n / 2 + 1] ^= 0xff;

    /* The member whole, then garbage after it; a second member that makes
     * the data longer than the header declares; the member without its
     * 8-byte trailer (CRC-32 and length never checked): all refused
     * (zlib's gzread accepted each of them). */
    uint8_t more[4096];
    assert_true(2 * n <= sizeof more);
    n = n < sizeof more / 2 ? n : sizeof more / 2; /* (the compiler cannot see the assert) */
    memcpy(more, raw, n);
    memcpy(more + n, "garbage!", 8);
    const char *trail = tpath("trail-img.gz");
    write_raw(trail, more, n + 8, 0);
    expect_fail(trail, lab, ACTC_ERR_FORMAT, trail, "after its last gzip member");
    memcpy(more + n, raw, n);
    write_raw(trail, more, 2 * n, 0);
    expect_fail(trail, lab, ACTC_ERR_FORMAT, trail, "trailing data after the");
    write_raw(trail, raw, n - 8, 0);
    expect_fail(trail, lab, ACTC_ERR_FORMAT, trail, "truncated");
    /* A wrong CRC in the trailer, the data intact. */
    memcpy(more, raw, n);
    more[n - 8] ^= 1;
    write_raw(trail, more, n, 0);
    expect_fail(trail, lab, ACTC_ERR_FORMAT, trail, "gzip");
    /* The intact file still loads. */
    write_raw(trail, raw, n, 0);
    actc_image_dataset ok;
    uint32_t six = 6;
    uint8_t lb6[6] = {0, 1, 2, 3, 4, 5};
    const char *lab6 = tpath("lab6");
    write_idx(lab6, 0, 0x801, 1, &six, lb6, 6);
    assert_int_equal(actc_idx_load(trail, lab6, &ok), ACTC_OK);
    assert_memory_equal(ok.pixels, big, sizeof big);
    actc_image_dataset_free(&ok);
    /* A legal gzip file of two members (`gzip -c a >> f`; gzip -t accepts
     * it): the file's first 100 bytes in one, the rest in another. */
    char plain[256], m1[256], m2[256], two[256], lab6b[256]; /* tpath keeps four names at a time */
    snprintf(plain, sizeof plain, "%s", tpath("plain-img"));
    snprintf(m1, sizeof m1, "%s", tpath("m1.gz"));
    snprintf(m2, sizeof m2, "%s", tpath("m2.gz"));
    snprintf(two, sizeof two, "%s", tpath("two-img.gz"));
    snprintf(lab6b, sizeof lab6b, "%s", tpath("lab6"));
    write_idx(plain, 0, 0x803, 3, dd, big, sizeof big);
    uint8_t whole[512], mem[2048];
    f = fopen(plain, "rb");
    assert_non_null(f);
    const size_t wn = fread(whole, 1, sizeof whole, f);
    fclose(f);
    assert_true(wn == 16 + sizeof big);
    write_raw(m1, whole, 100, 1);
    write_raw(m2, whole + 100, wn - 100, 1);
    size_t mn = 0;
    for (int k = 0; k < 2; k++) {
        f = fopen(k ? m2 : m1, "rb");
        assert_non_null(f);
        mn += fread(mem + mn, 1, sizeof mem - mn, f);
        fclose(f);
    }
    write_raw(two, mem, mn, 0);
    if (actc_idx_load(two, lab6b, &ok) != ACTC_OK) fail_msg("two members: %s", actc_last_error());
    assert_memory_equal(ok.pixels, big, sizeof big);
    actc_image_dataset_free(&ok);
    /* ... and garbage after the second member is still refused. */
    memcpy(mem + mn, "xyz", 3);
    write_raw(two, mem, mn + 3, 0);
    expect_fail(two, lab6b, ACTC_ERR_FORMAT, two, "after its last gzip member");
}

/* A batch size near INT_MAX is one batch of the whole set, not an overflow
 * (actc eval --batch 2147483647 once overflowed n + batch - 1). */
static void test_loader_huge_batch(void **state)
{
    (void)state;
    const char *img = tpath("huge-img"), *lab = tpath("huge-lab");
    write_pair(img, lab, 0, 5, 3, 4);
    actc_image_dataset d;
    assert_int_equal(actc_idx_load(img, lab, &d), ACTC_OK);
    const int sizes[] = {6, 2147483640, 2147483647};
    for (int i = 0; i < 3; i++) {
        actc_loader *l = actc_loader_new(&d, sizes[i], 0, NULL);
        assert_non_null(l);
        assert_int_equal(actc_loader_num_batches(l), 1);
        actc_tensor *x;
        const int32_t *labels;
        int bs;
        assert_int_equal(actc_loader_get(l, 0, 0, &x, &labels, &bs), ACTC_OK);
        assert_int_equal(bs, 5);
        assert_int_equal(x->shape[0], 5);
        actc_tensor_release(x);
        actc_loader_free(l);
    }
    assert_null(actc_loader_new(&d, 2147483647, 1, NULL)); /* drop_last: no batch at all */
    actc_image_dataset_free(&d);
}

static void test_fashion_dir_lookup(void **state)
{
    (void)state;
    /* train-* as gzip, t10k-* plain, in our own directory. */
    char sub[128];
    snprintf(sub, sizeof sub, "%s/fm", g_dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    char a[256], b[256];
    snprintf(a, sizeof a, "%s/train-images-idx3-ubyte.gz", sub);
    snprintf(b, sizeof b, "%s/train-labels-idx1-ubyte.gz", sub);
    write_pair(a, b, 1, 9, 4, 4);
    snprintf(a, sizeof a, "%s/t10k-images-idx3-ubyte", sub);
    snprintf(b, sizeof b, "%s/t10k-labels-idx1-ubyte", sub);
    write_pair(a, b, 0, 4, 4, 4);
    actc_image_dataset d;
    assert_int_equal(actc_fashion_mnist_load(sub, 1, &d), ACTC_OK);
    check_pair_content(&d, 9, 4, 4);
    actc_image_dataset_free(&d);
    assert_int_equal(actc_fashion_mnist_load(sub, 0, &d), ACTC_OK);
    check_pair_content(&d, 4, 4, 4);
    actc_image_dataset_free(&d);
    /* Missing: the message says how to get the data. */
    snprintf(a, sizeof a, "%s/absent", g_dir);
    assert_int_equal(actc_fashion_mnist_load(a, 1, &d), ACTC_ERR_IO);
    assert_non_null(strstr(actc_last_error(), "dataset-fashion-mnist"));
    assert_non_null(strstr(actc_last_error(), a));
}

static void test_fashion_mnist_real(void **state)
{
    (void)state;
    struct stat st;
    if (stat("/usr/share/datasets/fashion-mnist", &st) != 0) {
        print_message("  /usr/share/datasets/fashion-mnist absent: skipped\n");
        skip();
    }
    actc_image_dataset d;
    assert_int_equal(actc_fashion_mnist_load(NULL, 1, &d), ACTC_OK);
    assert_int_equal(d.n, 60000);
    assert_int_equal(d.h, 28);
    assert_int_equal(d.w, 28);
    assert_int_equal(d.num_classes, 10);
    /* Fashion-MNIST is balanced: 6000 of each class. */
    int count[10] = {0};
    for (int i = 0; i < d.n; i++) count[d.labels[i]]++;
    for (int k = 0; k < 10; k++) assert_int_equal(count[k], 6000);
    actc_image_dataset_free(&d);
    assert_int_equal(actc_fashion_mnist_load(NULL, 0, &d), ACTC_OK);
    assert_int_equal(d.n, 10000);
    assert_int_equal(d.num_classes, 10);
    actc_image_dataset_free(&d);
}

/* ---- loader -------------------------------------------------------------------- */

/* In-memory dataset: n images 1 x h x w, label = index, pixels random in
 * [1, 255] (never 0, so zero padding is recognisable). */
static actc_image_dataset make_ds(int n, int h, int w, uint64_t seed)
{
    actc_image_dataset d = {n, 1, h, w, NULL, NULL, n};
    d.pixels = malloc((size_t)n * h * w);
    d.labels = malloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) d.labels[i] = i;
    for (size_t i = 0; i < (size_t)n * h * w; i++)
        d.pixels[i] = (uint8_t)(1 + (int)(actc_rand_uniform(seed, i) * 255.0f));
    return d;
}

static void free_ds(actc_image_dataset *d)
{
    free(d->pixels);
    free(d->labels);
}

static actc_loader_opts plain_opts(void)
{
    actc_loader_opts o = {.mean = 0.0f, .std = 1.0f, .seed = 42};
    return o;
}

/* Fetch a batch; returns the tensor and copies the labels out. */
static actc_tensor *get(actc_loader *l, int e, int i, int32_t *lab, int *bs)
{
    actc_tensor *x = NULL;
    const int32_t *lp = NULL;
    actc_status s = actc_loader_get(l, e, i, &x, &lp, bs);
    if (s != ACTC_OK) fail_msg("loader_get(%d, %d): %s", e, i, actc_last_error());
    memcpy(lab, lp, (size_t)*bs * sizeof *lab);
    return x;
}

static void test_loader_batches_and_order(void **state)
{
    (void)state;
    actc_image_dataset d = make_ds(50, 4, 4, 1);
    actc_loader_opts o = plain_opts();
    o.shuffle = 1;
    actc_loader *l = actc_loader_new(&d, 8, 0, &o);
    assert_non_null(l);
    assert_int_equal(actc_loader_num_batches(l), 7); /* 6 full + one of 2 */
    actc_loader *ld = actc_loader_new(&d, 8, 1, &o);
    assert_int_equal(actc_loader_num_batches(ld), 6);

    int32_t order[3][50], lab[8];
    for (int e = 0; e < 3; e++) {
        int seen[50] = {0}, k = 0;
        for (int i = 0; i < 7; i++) {
            int bs;
            actc_tensor *x = get(l, e, i, lab, &bs);
            assert_int_equal(bs, i < 6 ? 8 : 2);
            assert_int_equal(x->ndim, 4);
            assert_int_equal(x->shape[0], bs);
            assert_int_equal(x->shape[1], 1);
            assert_int_equal(x->shape[2], 4);
            assert_int_equal(x->cat, ACTC_MEM_SCRATCH);
            /* The pixels are those of the labelled sample (no augmentation). */
            for (int b = 0; b < bs; b++)
                for (int j = 0; j < 16; j++)
                    assert_float_equal(x->data[b * 16 + j] * 255.0f,
                                       (float)d.pixels[lab[b] * 16 + j], 1e-3);
            for (int b = 0; b < bs; b++) {
                seen[lab[b]]++;
                order[e][k++] = lab[b];
            }
            actc_tensor_release(x);
        }
        for (int j = 0; j < 50; j++) assert_int_equal(seen[j], 1); /* once per epoch */
    }
    assert_memory_not_equal(order[0], order[1], sizeof order[0]);
    assert_memory_not_equal(order[1], order[2], sizeof order[0]);

    /* drop_last: the 2 samples of the last partial batch are not visited. */
    int visited = 0;
    for (int i = 0; i < 6; i++) {
        int bs;
        actc_tensor *x = get(ld, 1, i, lab, &bs);
        assert_int_equal(bs, 8);
        for (int b = 0; b < 8; b++) assert_int_equal(lab[b], order[1][i * 8 + b]);
        visited += bs;
        actc_tensor_release(x);
    }
    assert_int_equal(visited, 48);

    /* Pure function of (seed, epoch, index): a fresh loader, asked out of
     * order, gives the same batch. */
    actc_loader *l2 = actc_loader_new(&d, 8, 0, &o);
    int bs;
    actc_tensor *x = get(l2, 2, 3, lab, &bs);
    for (int b = 0; b < 8; b++) assert_int_equal(lab[b], order[2][24 + b]);
    actc_tensor_release(x);
    x = get(l2, 0, 3, lab, &bs);
    for (int b = 0; b < 8; b++) assert_int_equal(lab[b], order[0][24 + b]);
    actc_tensor_release(x);
    /* Another seed, another order. */
    o.seed = 43;
    actc_loader *l3 = actc_loader_new(&d, 50, 0, &o);
    int32_t all[50];
    x = get(l3, 0, 0, all, &bs);
    assert_memory_not_equal(all, order[0], sizeof all);
    actc_tensor_release(x);

    /* No shuffle: dataset order. */
    o.shuffle = 0;
    actc_loader *l4 = actc_loader_new(&d, 50, 0, &o);
    x = get(l4, 5, 0, all, &bs);
    for (int j = 0; j < 50; j++) assert_int_equal(all[j], j);
    actc_tensor_release(x);

    actc_loader_free(l);
    actc_loader_free(ld);
    actc_loader_free(l2);
    actc_loader_free(l3);
    actc_loader_free(l4);
    free_ds(&d);
}

static void test_loader_errors(void **state)
{
    (void)state;
    actc_image_dataset d = make_ds(10, 4, 4, 2);
    actc_loader_opts o = plain_opts();
    assert_null(actc_loader_new(&d, 0, 0, &o));
    assert_int_equal(actc_last_status(), ACTC_ERR_INVALID);
    assert_null(actc_loader_new(&d, 11, 1, &o)); /* drop_last, batch > n */
    assert_non_null(strstr(actc_last_error(), "drop_last"));
    o.std = 0.0f;
    assert_null(actc_loader_new(&d, 4, 0, &o));
    assert_non_null(strstr(actc_last_error(), "std"));
    o = plain_opts();
    o.crop_pad = -1;
    assert_null(actc_loader_new(&d, 4, 0, &o));
    actc_image_dataset empty = {0};
    assert_null(actc_loader_new(&empty, 4, 0, NULL));

    actc_loader *l = actc_loader_new(&d, 4, 0, NULL); /* NULL opts: defaults */
    assert_non_null(l);
    assert_int_equal(actc_loader_num_batches(l), 3);
    actc_tensor *x = (actc_tensor *)1;
    const int32_t *lab;
    int bs;
    assert_int_equal(actc_loader_get(l, 0, 3, &x, &lab, &bs), ACTC_ERR_INVALID);
    assert_null(x);
    assert_non_null(strstr(actc_last_error(), "3"));
    assert_int_equal(actc_loader_get(l, 0, -1, &x, &lab, &bs), ACTC_ERR_INVALID);
    assert_int_equal(actc_loader_get(l, -1, 0, &x, &lab, &bs), ACTC_ERR_INVALID);
    assert_int_equal(actc_loader_get(l, 0, 2, &x, &lab, &bs), ACTC_OK);
    assert_int_equal(bs, 2);
    actc_tensor_release(x);
    actc_loader_free(l);
    free_ds(&d);
}

static void test_loader_normalisation(void **state)
{
    (void)state;
    actc_image_dataset d = make_ds(3, 2, 3, 3);
    actc_loader_opts o = plain_opts();
    o.mean = 0.2860f;
    o.std = 0.3530f;
    actc_loader *l = actc_loader_new(&d, 3, 0, &o);
    int32_t lab[3];
    int bs;
    actc_tensor *x = get(l, 0, 0, lab, &bs);
    for (int i = 0; i < 18; i++) {
        float want = ((float)d.pixels[i] / 255.0f - o.mean) / o.std;
        assert_float_equal(x->data[i], want, 1e-5);
    }
    actc_tensor_release(x);
    actc_loader_free(l);
    free_ds(&d);
}

/* The augmented image of src with shift (dy, dx) then mirror, as torchvision
 * RandomCrop(padding) + RandomHorizontalFlip, in raw pixels (0 = padding). */
static void ref_aug(const uint8_t *src, int h, int w, int dy, int dx, int mirror, float *out)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int sx = (mirror ? w - 1 - x : x) + dx, sy = y + dy;
            out[y * w + x] = (sy < 0 || sy >= h || sx < 0 || sx >= w) ? 0.0f : (float)src[sy * w + sx];
        }
}

/* Which (dy, dx, mirror) explains out (in raw pixels)?  Returns the number of
 * candidates that match; *code receives the last one. */
static int identify(const uint8_t *src, int h, int w, int pad, const float *x, int *code)
{
    float ref[64 * 64], raw[64 * 64];
    for (int i = 0; i < h * w; i++) raw[i] = x[i] * 255.0f;
    int found = 0;
    for (int m = 0; m < 2; m++)
        for (int dy = -pad; dy <= pad; dy++)
            for (int dx = -pad; dx <= pad; dx++) {
                ref_aug(src, h, w, dy, dx, m, ref);
                if (tu_max_abs_diff(ref, raw, (size_t)h * w) < 1e-2) {
                    found++;
                    *code = (m * (2 * pad + 1) + dy + pad) * (2 * pad + 1) + dx + pad;
                }
            }
    return found;
}

static void test_loader_crop_flip(void **state)
{
    (void)state;
    const int n = 200, h = 6, w = 5, pad = 2;
    actc_image_dataset d = make_ds(n, h, w, 4);
    int ncode = 2 * (2 * pad + 1) * (2 * pad + 1);
    for (int mode = 0; mode < 3; mode++) { /* flip only, crop only, both */
        actc_loader_opts o = plain_opts();
        o.shuffle = 1;
        o.hflip = mode != 1;
        o.crop_pad = mode != 0 ? pad : 0;
        actc_loader *l = actc_loader_new(&d, 40, 0, &o);
        int *hist = calloc((size_t)ncode, sizeof *hist);
        int32_t lab[40];
        int codes0[40];
        for (int i = 0; i < 5; i++) {
            int bs;
            actc_tensor *x = get(l, 0, i, lab, &bs);
            for (int b = 0; b < bs; b++) {
                int code = -1;
                int nf = identify(d.pixels + (size_t)lab[b] * h * w, h, w, pad, x->data + b * h * w, &code);
                assert_true(nf >= 1);
                int m = code / ((2 * pad + 1) * (2 * pad + 1));
                int dy = code / (2 * pad + 1) % (2 * pad + 1) - pad, dx = code % (2 * pad + 1) - pad;
                if (mode == 0) assert_true(dy == 0 && dx == 0 && nf == 1);
                if (mode == 1) assert_true(m == 0 && nf == 1);
                hist[code]++;
                if (i == 0) codes0[b] = code;
            }
            actc_tensor_release(x);
        }
        /* Both outcomes of each random choice occur over 200 samples. */
        int distinct = 0;
        for (int c = 0; c < ncode; c++) distinct += hist[c] > 0;
        if (mode == 0) assert_int_equal(distinct, 2);
        else assert_true(distinct >= (mode == 1 ? 20 : 35));
        /* Same (seed, epoch, index): same augmentation; the next epoch draws
         * anew (positions differ by sample, so compare the codes per slot). */
        int bs, same = 0;
        actc_tensor *x = get(l, 0, 0, lab, &bs);
        for (int b = 0; b < bs; b++) {
            int code;
            identify(d.pixels + (size_t)lab[b] * h * w, h, w, pad, x->data + b * h * w, &code);
            assert_int_equal(code, codes0[b]);
        }
        actc_tensor_release(x);
        x = get(l, 1, 0, lab, &bs);
        for (int b = 0; b < bs; b++) {
            int code;
            identify(d.pixels + (size_t)lab[b] * h * w, h, w, pad, x->data + b * h * w, &code);
            same += code == codes0[b];
        }
        assert_true(same < bs);
        actc_tensor_release(x);
        free(hist);
        actc_loader_free(l);
    }
    free_ds(&d);
}

/* The parallel path (large batches) gives the same bytes with 1 or 2 threads. */
static void test_loader_threads(void **state)
{
    (void)state;
    /* Batch 0 has 256 x 64 x 64 >= 2^20 pixels: the loader's parallel path. */
    actc_image_dataset d = make_ds(300, 64, 64, 5);
    actc_loader_opts o = plain_opts();
    o.shuffle = o.hflip = 1;
    o.crop_pad = 3;
    o.mean = 0.5f;
    o.std = 0.5f;
    actc_loader *l = actc_loader_new(&d, 256, 0, &o);
    int32_t lab1[256], lab2[256];
    int bs1, bs2;
    int saved = actc_get_threads();
    actc_set_threads(1);
    actc_tensor *a = get(l, 7, 0, lab1, &bs1);
    actc_set_threads(2);
    actc_tensor *b = get(l, 7, 0, lab2, &bs2);
    actc_set_threads(saved);
    assert_int_equal(bs1, bs2);
    assert_memory_equal(lab1, lab2, sizeof lab1);
    assert_memory_equal(a->data, b->data, a->numel * sizeof(float));
    actc_tensor_release(a);
    actc_tensor_release(b);
    actc_loader_free(l);
    free_ds(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_plain_and_gzip),
        cmocka_unit_test(test_idx_bad_files),
        cmocka_unit_test(test_loader_huge_batch),
        cmocka_unit_test(test_fashion_dir_lookup),
        cmocka_unit_test(test_fashion_mnist_real),
        cmocka_unit_test(test_loader_batches_and_order),
        cmocka_unit_test(test_loader_errors),
        cmocka_unit_test(test_loader_normalisation),
        cmocka_unit_test(test_loader_crop_flip),
        cmocka_unit_test(test_loader_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
