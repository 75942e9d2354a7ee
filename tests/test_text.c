/* Text corpora (src/data/text.c): loading a file or a directory tree (order by
 * path), the split at a line start, every rejected input, and the random
 * windows (purity in (seed, step), windows inside their part, full coverage
 * of the possible offsets, too-short parts).  With the default corpus
 * available (build/data/kjv.txt, or the `bible` program to make it) the real
 * King James Bible is loaded and the documented split is checked. */
#include "testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

static int setup(void **state)
{
    (void)state;
    return tu_make_temp_dir(g_dir, sizeof g_dir, "actc_test_text");
}

static int teardown(void **state)
{
    (void)state;
    return tu_remove_dir(g_dir);
}

/* g_dir/name (static buffer rotation so several paths can be live at once). */
static const char *tpath(const char *name)
{
    static char bufs[4][256];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, 256, "%s/%s", g_dir, name);
    return b;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void write_str(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

static void make_dir(const char *path) { assert_int_equal(mkdir(path, 0755), 0); }

/* Load and expect status st with the path (and needle, if any) in the message;
 * nothing is handed back. */
static void expect_fail(const char *path, double f, actc_status st, const char *needle)
{
    actc_text_corpus c;
    memset(&c, 0x5a, sizeof c);
    actc_clear_error();
    actc_status s = actc_text_load(path, f, &c);
    const char *msg = actc_last_error();
    if (s != st || !strstr(msg, path) || (needle && !strstr(msg, needle)))
        fail_msg("%s (f=%g): expected %s with '%s', got %s: %s", path, f, actc_status_name(st),
                 needle ? needle : "", actc_status_name(s), msg);
    assert_null(c.data);
    assert_int_equal(c.n, 0);
    assert_int_equal(c.train_end, 0);
}

/* ---- loading ------------------------------------------------------------------ */

static void test_single_file(void **state)
{
    (void)state;
    /* 10 lines of 10 bytes. */
    char text[101];
    for (int i = 0; i < 10; i++) snprintf(text + 10 * i, 11, "line %03d.\n", i);
    const char *p = tpath("one.txt");
    write_str(p, text);

    actc_text_corpus c;
    assert_int_equal(actc_text_load(p, 0.5, &c), ACTC_OK);
    assert_int_equal(c.n, 100);
    assert_memory_equal(c.data, text, 100);
    assert_string_equal(c.source, p);
    assert_int_equal(c.train_end, 50); /* 50 is a line start: stays */
    actc_text_free(&c);
    assert_null(c.data);
    assert_int_equal(c.n, 0);
    actc_text_free(&c); /* twice is harmless */
    actc_text_free(NULL);

    /* 25% held out: cut at 75, moved forward to the line start 80. */
    assert_int_equal(actc_text_load(p, 0.25, &c), ACTC_OK);
    assert_int_equal(c.train_end, 80);
    assert_int_equal(c.data[c.train_end - 1], '\n');
    actc_text_free(&c);

    /* Any fraction: the cut is the first line start at or after floor(n(1-f)). */
    for (int k = 1; k < 100; k++) {
        double f = k / 100.0;
        size_t lo = (size_t)(100 * (1 - f));
        if (lo > 90) { /* moved to the end: no validation text */
            assert_int_equal(actc_text_load(p, f, &c), ACTC_ERR_FORMAT);
            continue;
        }
        assert_int_equal(actc_text_load(p, f, &c), ACTC_OK);
        assert_int_equal(c.train_end, (lo + 9) / 10 * 10);
        actc_text_free(&c);
    }
}

static void test_split_at_line_start(void **state)
{
    (void)state;
    /* Lines of different lengths: the cut moves to the byte after the next
     * '\n', never into the middle of a line. */
    const char *text = "first line\nsecond, a longer line\nthird\nfourth line is here\nfifth\n";
    const size_t n = strlen(text);
    const char *p = tpath("lines.txt");
    write_str(p, text);
    for (int k = 5; k <= 60; k += 5) {
        double f = k / 100.0;
        actc_text_corpus c;
        actc_status s = actc_text_load(p, f, &c);
        size_t lo = (size_t)((double)n * (1 - f));
        /* expected: the first line start >= lo */
        size_t want = lo;
        while (want > 0 && want < n && text[want - 1] != '\n') want++;
        if (n - want < 2) {
            assert_int_equal(s, ACTC_ERR_FORMAT);
            continue;
        }
        assert_int_equal(s, ACTC_OK);
        assert_int_equal(c.train_end, want);
        assert_int_equal(c.data[c.train_end - 1], '\n');
        actc_text_free(&c);
    }
    /* No line break after the cut: no validation text. */
    write_str(tpath("oneline.txt"), "a single line without any line break at all");
    expect_fail(tpath("oneline.txt"), 0.1, ACTC_ERR_FORMAT, "0 validation");
    /* The only line break after the cut ends the file: same. */
    write_str(tpath("lastbreak.txt"), "a\nbcdefghijklmnop\n");
    expect_fail(tpath("lastbreak.txt"), 0.5, ACTC_ERR_FORMAT, "validation");
    /* Train part shorter than 2 bytes. */
    write_str(tpath("shorttrain.txt"), "a\nbcdefghijklmnop\nqrstuvwxyz\n");
    expect_fail(tpath("shorttrain.txt"), 0.97, ACTC_ERR_FORMAT, "0 train");
    /* A line break at the very end leaves 1 validation byte: rejected. */
    write_str(tpath("onebyte.txt"), "abcdefghijklmnopqrstuvwxyz\n\n");
    expect_fail(tpath("onebyte.txt"), 0.02, ACTC_ERR_FORMAT, "1 validation");
    /* Two bytes each is enough. */
    write_str(tpath("tiny.txt"), "a\nb\n");
    actc_text_corpus c;
    assert_int_equal(actc_text_load(tpath("tiny.txt"), 0.5, &c), ACTC_OK);
    assert_int_equal(c.train_end, 2);
    actc_text_free(&c);
}

static void test_directory_nested(void **state)
{
    (void)state;
    make_dir(tpath("tree"));
    make_dir(tpath("tree/a"));
    make_dir(tpath("tree/a/b"));
    make_dir(tpath("tree/empty"));
    make_dir(tpath("tree/a-c"));
    write_str(tpath("tree/b.txt"), "3 b.txt\n");
    write_str(tpath("tree/a/z.txt"), "2 a/z.txt\n");
    write_str(tpath("tree/a/b/c.txt"), "1 a/b/c.txt\n");
    write_str(tpath("tree/c"), "4 c\n");
    write_str(tpath("tree/a-c/x"), "0 a-c/x\n"); /* '-' sorts before '/' */
    write_str(tpath("tree/a/b/empty.txt"), "");
    /* A link to a regular file counts; a link to a directory (here a cycle)
     * and a dangling link do not. */
    assert_int_equal(symlink("c", tpath("tree/d-link")), 0);
    assert_int_equal(symlink(".", tpath("tree/a/loop")), 0);
    assert_int_equal(symlink("nowhere", tpath("tree/dangling")), 0);
    const char *want = "0 a-c/x\n1 a/b/c.txt\n2 a/z.txt\n3 b.txt\n4 c\n4 c\n";

    actc_text_corpus c;
    assert_int_equal(actc_text_load(tpath("tree"), 0.2, &c), ACTC_OK);
    assert_int_equal(c.n, strlen(want));
    assert_memory_equal(c.data, want, c.n);
    assert_string_equal(c.source, tpath("tree"));
    assert_int_equal(c.data[c.train_end - 1], '\n');
    actc_text_free(&c);
    /* A trailing slash gives the same bytes. */
    char slash[300];
    snprintf(slash, sizeof slash, "%s/", tpath("tree"));
    assert_int_equal(actc_text_load(slash, 0.2, &c), ACTC_OK);
    assert_int_equal(c.n, strlen(want));
    assert_memory_equal(c.data, want, c.n);
    actc_text_free(&c);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    write_str(tpath("empty.txt"), "");
    expect_fail(tpath("empty.txt"), 0.1, ACTC_ERR_FORMAT, "empty");
    make_dir(tpath("emptydir"));
    expect_fail(tpath("emptydir"), 0.1, ACTC_ERR_FORMAT, "empty");
    make_dir(tpath("emptyfiles"));
    write_str(tpath("emptyfiles/a"), "");
    write_str(tpath("emptyfiles/b"), "");
    expect_fail(tpath("emptyfiles"), 0.1, ACTC_ERR_FORMAT, "empty");

    expect_fail(tpath("no-such-file.txt"), 0.1, ACTC_ERR_IO, NULL);
    expect_fail(tpath("no-such-dir/x.txt"), 0.1, ACTC_ERR_IO, NULL);

    write_str(tpath("ok.txt"), "hello\nworld\nagain\n");
    const double bad[] = {0.0, 1.0, -0.1, 1.5, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_fail(tpath("ok.txt"), bad[i], ACTC_ERR_INVALID, "fraction");
    /* An invalid fraction is reported even when the file is missing. */
    expect_fail(tpath("no-such-file.txt"), 0.0, ACTC_ERR_INVALID, "fraction");

    actc_text_corpus c;
    assert_int_equal(actc_text_load(NULL, 0.1, &c), ACTC_ERR_INVALID);
    assert_null(c.data);
    assert_int_equal(actc_text_load(tpath("ok.txt"), 0.1, NULL), ACTC_ERR_INVALID);
}

/* ---- batches ------------------------------------------------------------------- */

/* A corpus of ntrain lowercase bytes in lines of 20 then nval uppercase bytes
 * without line breaks, loaded so the split falls exactly between them. */
static void load_disjoint(const char *name, size_t ntrain, size_t nval, actc_text_corpus *c)
{
    size_t n = ntrain + nval;
    char *b = malloc(n);
    uint64_t key = actc_rng_key(99, ntrain, nval);
    for (size_t i = 0; i < ntrain; i++) {
        uint32_t r[4];
        actc_philox(key, i, r);
        b[i] = (i % 20 == 19) ? '\n' : (char)('a' + r[0] % 26);
    }
    for (size_t i = 0; i < nval; i++) b[ntrain + i] = (char)('A' + i % 26);
    assert_int_equal(ntrain % 20, 0);
    write_bytes(tpath(name), b, n);
    free(b);
    /* Any fraction whose cut falls in the last train line works. */
    double f = ((double)nval + 10.0) / (double)n;
    assert_int_equal(actc_text_load(tpath(name), f, c), ACTC_OK);
    assert_int_equal(c->train_end, ntrain);
}

static void test_batch_determinism(void **state)
{
    (void)state;
    actc_text_corpus c;
    load_disjoint("det.txt", 4000, 600, &c);
    enum { B = 8, T = 31, W = T + 1 };
    int32_t a[B * W], b[B * W], d[B * W];
    for (int split = 0; split < 2; split++) {
        assert_int_equal(actc_text_batch(&c, split, B, T, 5, 17, a), ACTC_OK);
        assert_int_equal(actc_text_batch(&c, split, B, T, 5, 17, b), ACTC_OK);
        assert_memory_equal(a, b, sizeof a);
        assert_int_equal(actc_text_batch(&c, split, B, T, 5, 18, d), ACTC_OK);
        assert_memory_not_equal(a, d, sizeof a);
        assert_int_equal(actc_text_batch(&c, split, B, T, 6, 17, d), ACTC_OK);
        assert_memory_not_equal(a, d, sizeof a);
        /* Window b does not depend on B: a smaller batch is a prefix. */
        assert_int_equal(actc_text_batch(&c, split, 3, T, 5, 17, d), ACTC_OK);
        assert_memory_equal(a, d, 3 * W * sizeof(int32_t));
        /* Each window is T+1 consecutive corpus bytes, values 0..255. */
        const uint8_t *part = split ? c.data + c.train_end : c.data;
        size_t len = split ? c.n - c.train_end : c.train_end;
        for (int w = 0; w < B; w++) {
            int found = 0;
            for (size_t off = 0; off + W <= len && !found; off++) {
                int same = 1;
                for (int t = 0; t < W && same; t++) same = part[off + t] == a[w * W + t];
                found = same;
            }
            assert_true(found);
        }
    }
    /* The train and validation streams differ. */
    assert_int_equal(actc_text_batch(&c, 0, B, T, 5, 17, a), ACTC_OK);
    assert_int_equal(actc_text_batch(&c, 1, B, T, 5, 17, b), ACTC_OK);
    assert_memory_not_equal(a, b, sizeof a);
    actc_text_free(&c);
}

static void test_batch_inside_part(void **state)
{
    (void)state;
    /* Short parts so that many draws must reach both ends of each part. */
    actc_text_corpus c;
    load_disjoint("parts.txt", 40, 12, &c);
    enum { T = 7, W = T + 1, B = 16 };
    int32_t ids[B * W];
    /* Offsets reachable: train 40-8+1 = 33, validation 12-8+1 = 5. */
    int seen_train[40] = {0}, seen_val[12] = {0};
    for (uint64_t step = 0; step < 200; step++) {
        assert_int_equal(actc_text_batch(&c, 0, B, T, 1, step, ids), ACTC_OK);
        for (int i = 0; i < B * W; i++)
            assert_true((ids[i] >= 'a' && ids[i] <= 'z') || ids[i] == '\n');
        for (int w = 0; w < B; w++) {
            /* the train bytes are distinct enough: locate the window */
            int hits = 0;
            for (int off = 0; off + W <= 40; off++) {
                int same = 1;
                for (int t = 0; t < W && same; t++) same = c.data[off + t] == ids[w * W + t];
                if (same) {
                    seen_train[off]++;
                    hits++;
                }
            }
            assert_int_equal(hits, 1);
        }
        assert_int_equal(actc_text_batch(&c, 1, B, T, 1, step, ids), ACTC_OK);
        for (int w = 0; w < B; w++) {
            for (int t = 0; t < W; t++) assert_true(ids[w * W + t] >= 'A' && ids[w * W + t] <= 'Z');
            int off = ids[w * W] - 'A';
            assert_true(off >= 0 && off + W <= 12);
            for (int t = 0; t < W; t++) assert_int_equal(ids[w * W + t], 'A' + off + t);
            seen_val[off]++;
        }
    }
    /* Every offset is drawn, about uniformly (3200 draws each). */
    for (int off = 0; off < 40; off++) {
        if (off + W <= 40) {
            if (seen_train[off] < 50 || seen_train[off] > 160)
                fail_msg("train offset %d drawn %d times of 3200 (expected ~97)", off, seen_train[off]);
        } else {
            assert_int_equal(seen_train[off], 0);
        }
    }
    for (int off = 0; off < 12; off++) {
        if (off + W <= 12) {
            if (seen_val[off] < 500 || seen_val[off] > 780)
                fail_msg("validation offset %d drawn %d times of 3200 (expected 640)", off,
                         seen_val[off]);
        } else {
            assert_int_equal(seen_val[off], 0);
        }
    }
    actc_text_free(&c);
}

static void test_batch_errors(void **state)
{
    (void)state;
    actc_text_corpus c;
    load_disjoint("short.txt", 40, 12, &c);
    int32_t ids[64 * 64];
    /* Validation part of 12 bytes: T = 11 fits exactly (one offset), 12 not. */
    assert_int_equal(actc_text_batch(&c, 1, 4, 11, 0, 0, ids), ACTC_OK);
    for (int w = 0; w < 4; w++)
        for (int t = 0; t < 12; t++) assert_int_equal(ids[w * 12 + t], 'A' + t);
    actc_clear_error();
    assert_int_equal(actc_text_batch(&c, 1, 4, 12, 0, 0, ids), ACTC_ERR_INVALID);
    const char *msg = actc_last_error();
    if (!strstr(msg, "validation") || !strstr(msg, "12 bytes") || !strstr(msg, "13 bytes") ||
        !strstr(msg, tpath("short.txt")))
        fail_msg("unexpected message: %s", msg);
    /* Train part of 40 bytes. */
    assert_int_equal(actc_text_batch(&c, 0, 2, 39, 0, 0, ids), ACTC_OK);
    assert_int_equal(actc_text_batch(&c, 0, 2, 40, 0, 0, ids), ACTC_ERR_INVALID);
    msg = actc_last_error();
    if (!strstr(msg, "train") || !strstr(msg, "40 bytes") || !strstr(msg, "41 bytes"))
        fail_msg("unexpected message: %s", msg);
    /* Bad arguments. */
    assert_int_equal(actc_text_batch(&c, 2, 2, 4, 0, 0, ids), ACTC_ERR_INVALID);
    assert_int_equal(actc_text_batch(&c, -1, 2, 4, 0, 0, ids), ACTC_ERR_INVALID);
    assert_int_equal(actc_text_batch(&c, 0, 0, 4, 0, 0, ids), ACTC_ERR_INVALID);
    assert_int_equal(actc_text_batch(&c, 0, 2, 0, 0, 0, ids), ACTC_ERR_INVALID);
    assert_int_equal(actc_text_batch(&c, 0, 2, 4, 0, 0, NULL), ACTC_ERR_INVALID);
    assert_int_equal(actc_text_batch(NULL, 0, 2, 4, 0, 0, ids), ACTC_ERR_INVALID);
    actc_text_free(&c);
    assert_int_equal(actc_text_batch(&c, 0, 2, 4, 0, 0, ids), ACTC_ERR_INVALID);
}

/* All 256 byte values come back as ids 0..255 (no sign extension). */
static void test_batch_all_bytes(void **state)
{
    (void)state;
    uint8_t b[512];
    for (int i = 0; i < 256; i++) b[i] = (uint8_t)(255 - i);
    b[255] = '\n';
    for (int i = 0; i < 256; i++) b[256 + i] = (uint8_t)i;
    write_bytes(tpath("bytes.bin"), b, sizeof b);
    actc_text_corpus c;
    assert_int_equal(actc_text_load(tpath("bytes.bin"), 0.5, &c), ACTC_OK);
    assert_int_equal(c.train_end, 256);
    int32_t ids[256];
    assert_int_equal(actc_text_batch(&c, 0, 1, 255, 3, 4, ids), ACTC_OK);
    for (int t = 0; t < 255; t++) assert_int_equal(ids[t], 255 - t);
    assert_int_equal(ids[255], '\n');
    int32_t v[256];
    assert_int_equal(actc_text_batch(&c, 1, 1, 255, 3, 4, v), ACTC_OK);
    for (int t = 0; t < 256; t++) assert_int_equal(v[t], t);
    actc_text_free(&c);
}

/* ---- the default corpus ---------------------------------------------------------- */

static int starts_with(const uint8_t *p, size_t n, const char *s)
{
    size_t k = strlen(s);
    return n >= k && memcmp(p, s, k) == 0;
}

static void test_kjv_real(void **state)
{
    (void)state;
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/build/data/kjv.txt", tu_source_dir());
    if (stat(path, &st) != 0) {
        if (system("command -v bible >/dev/null 2>&1") != 0) {
            print_message("  no build/data/kjv.txt and no `bible` program (bible-kjv): skipped\n");
            skip();
        }
        char cmd[1024];
        snprintf(path, sizeof path, "%s/kjv.txt", g_dir);
        snprintf(cmd, sizeof cmd, "bash '%s/tools/make_kjv_corpus.sh' '%s' >/dev/null", tu_source_dir(),
                 path);
        assert_int_equal(system(cmd), 0);
    }
    actc_text_corpus c;
    assert_int_equal(actc_text_load(path, 0.1, &c), ACTC_OK);
    print_message("  %s: %zu bytes, train %zu, validation %zu\n", path, c.n, c.train_end,
                  c.n - c.train_end);
    assert_true(c.n > 4000000);
    assert_true(starts_with(c.data, c.n, "In the beginning God created the heaven and the earth.\n"));
    for (size_t i = 0; i < c.n; i++) assert_true(c.data[i] < 128);
    /* The documented split (src/data/text.c): 10% -> from Acts 22:1. */
    assert_int_equal(c.n, 4137850);
    assert_int_equal(c.train_end, 3724089);
    assert_true(starts_with(c.data + c.train_end, c.n - c.train_end,
                            "Men, brethren, and fathers, hear ye my defence"));
    actc_text_free(&c);
    /* 0.09266 -> exactly Romans to Revelation. */
    assert_int_equal(actc_text_load(path, 0.09266, &c), ACTC_OK);
    assert_int_equal(c.train_end, 4137850 - 383397);
    assert_true(starts_with(c.data + c.train_end, c.n - c.train_end,
                            "Paul, a servant of Jesus Christ, called to be an apostle"));
    actc_text_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_file),
        cmocka_unit_test(test_split_at_line_start),
        cmocka_unit_test(test_directory_nested),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_batch_determinism),
        cmocka_unit_test(test_batch_inside_part),
        cmocka_unit_test(test_batch_errors),
        cmocka_unit_test(test_batch_all_bytes),
        cmocka_unit_test(test_kjv_real),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
