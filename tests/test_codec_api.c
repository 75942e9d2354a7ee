/* The codecs on caller buffers (actc_codec_plan_make, _encode, _decode,
 * _decode_rows): every codec encodes and decodes through the public calls
 * alone, with no context; the sizes are the plan's, written exactly; the
 * bytes are those the policies' choices give the store's codecs; and the
 * refusals say what is wrong. */
#include "testutil.h"
#include "policy/policy.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { GUARD = 32 };

/* Values with every sign and a spread of magnitudes, per-tensor stream s. */
static float *make_input(size_t n, int s)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = (actc_rand_uniform((uint64_t)s, i) - 0.5f) * (1.0f + (float)(i % 7)) + 0.25f * (float)(i % 3);
    return x;
}

/* Encode through the public API into a guarded buffer: exactly plan.bytes
 * written (the guard intact), and returned. */
static uint8_t *encode(const actc_codec_plan *p, const float *x, const uint8_t *sbits)
{
    uint8_t *buf = malloc(p->bytes + GUARD);
    assert_non_null(buf);
    memset(buf, 0xA5, p->bytes + GUARD);
    assert_int_equal(actc_codec_encode(p, x, sbits, buf, p->bytes), ACTC_OK);
    for (size_t i = 0; i < GUARD; i++) assert_int_equal(buf[p->bytes + i], 0xA5);
    return buf;
}

typedef struct {
    const char *spec;
    int lossless;     /* decode gives x back exactly (after the codec's map) */
    double max_err;   /* else: |x - y| at most max_err * the input's range */
} codec_case;

static const codec_case g_cases[] = {
    {"fp32", 1, 0},
    {"bf16", 0, 1.0 / 128},
    {"quant:1", 0, 1.0},
    {"quant:2", 0, 1.0 / 3 + 1e-3},
    {"quant:4", 0, 1.0 / 15 + 1e-3},
    {"quant:8", 0, 1.0 / 255 + 1e-3},
    {"quant:3,group=100", 0, 1.0 / 7 + 1e-3},
    {"quant:2,per-tensor", 0, 1.0 / 3 + 1e-3},
    {"nf4", 0, 0.5},
    {"fp4-bnb,block=128", 0, 0.5},
    {"fp4-e2m1,block=32,round=stochastic", 0, 0.5},
    {"dyn8", 0, 0.1},
    {"dyn8,block=100", 0, 0.1},
    {"division", 0, 1.0},
    {"division:b=4,q=4,seq=features", 0, 1.0},
    {"division:lfc-only", 0, 2.0},
    {"division:b=2,hfc-only", 0, 1.0},
};

/* Shape k (k = 0..3) has k + 1 dims. */
static int shape_of(int k, int *shape)
{
    static const int sizes[4][4] = {{1001}, {6, 300}, {3, 33, 20}, {4, 3, 11, 9}};
    for (int i = 0; i <= k; i++) shape[i] = sizes[k][i];
    return k + 1;
}

/* Every codec, every rank: the plan's size is written exactly, the decode
 * is within the codec's error, decode_rows matches the whole decode row by
 * row, the same key gives the same bytes and the thread count changes none. */
static void test_every_codec_round_trips(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof g_cases / sizeof g_cases[0]; c++) {
        for (int k = 0; k < 4; k++) {
            int shape[ACTC_MAX_DIMS];
            const int nd = shape_of(k, shape);
            actc_codec_plan p;
            assert_int_equal(actc_codec_plan_make(g_cases[c].spec, nd, shape, 77 + (uint64_t)c, NULL, &p), ACTC_OK);
            assert_true(p.bytes > 0);
            float *x = make_input(p.numel, (int)c);
            float *y = malloc(p.numel * sizeof *y), *r = malloc(p.numel * sizeof *r);
            float lo = x[0], hi = x[0];
            for (size_t i = 0; i < p.numel; i++) {
                lo = fminf(lo, x[i]);
                hi = fmaxf(hi, x[i]);
            }
            actc_set_threads(2);
            uint8_t *b = encode(&p, x, NULL);
            actc_set_threads(1);
            uint8_t *b1 = encode(&p, x, NULL);
            assert_memory_equal(b, b1, p.bytes);
            assert_int_equal(actc_codec_decode(&p, b, p.bytes, y), ACTC_OK);
            double worst = 0;
            for (size_t i = 0; i < p.numel; i++) worst = fmax(worst, fabs((double)x[i] - y[i]));
            if (g_cases[c].lossless)
                assert_memory_equal(x, y, p.numel * sizeof *x);
            else if (worst > g_cases[c].max_err * (hi - lo))
                fail_msg("%s, %d dims: error %g over a range of %g", g_cases[c].spec, nd, worst, (double)(hi - lo));
            const size_t rows = (size_t)shape[0], per = p.numel / rows;
            for (size_t r0 = 0; r0 < rows; r0 += 2) {
                const size_t nr = r0 + 2 <= rows ? 2 : rows - r0;
                assert_int_equal(actc_codec_decode_rows(&p, b, p.bytes, r0, nr, r), ACTC_OK);
                assert_memory_equal(r, y + r0 * per, nr * per * sizeof *r);
            }
            free(b1);
            free(b);
            free(r);
            free(y);
            free(x);
        }
    }
    actc_set_threads(0);
}

/* The lossless integer and mask codecs, at each width. */
static void test_index_and_mask(void **state)
{
    (void)state;
    const int shape[2] = {5, 13};
    const int widths[3] = {1, 2, 4};
    const float tops[3] = {255.0f, 65535.0f, 16777216.0f};
    float x[65], y[65];
    for (int w = 0; w < 3; w++) {
        char spec[16];
        snprintf(spec, sizeof spec, "index:%d", widths[w]);
        actc_codec_plan p;
        assert_int_equal(actc_codec_plan_make(spec, 2, shape, 0, NULL, &p), ACTC_OK);
        assert_int_equal(p.bytes, 65 * (size_t)widths[w]);
        for (int i = 0; i < 65; i++) x[i] = (float)(i * 7 % 13);
        x[64] = tops[w];
        uint8_t *b = encode(&p, x, NULL);
        assert_int_equal(actc_codec_decode(&p, b, p.bytes, y), ACTC_OK);
        assert_memory_equal(x, y, sizeof x);
        free(b);
        /* A value the width cannot hold, a fraction, a negative: refused. */
        uint8_t buf[65 * 4];
        const float bad[3] = {widths[w] == 4 ? 5e9f : tops[w] + 1.0f, 2.5f, -1.0f};
        for (int j = 0; j < 3; j++) {
            x[3] = bad[j];
            assert_int_equal(actc_codec_encode(&p, x, NULL, buf, sizeof buf), ACTC_ERR_INVALID);
            assert_non_null(strstr(actc_last_error(), "not an integer in"));
        }
    }
    actc_codec_plan p;
    assert_int_equal(actc_codec_plan_make("mask", 2, shape, 0, NULL, &p), ACTC_OK);
    assert_int_equal(p.bytes, (65 + 7) / 8);
    for (int i = 0; i < 65; i++) x[i] = (float)(i % 3) - 1.0f;
    uint8_t *b = encode(&p, x, NULL);
    assert_int_equal(actc_codec_decode(&p, b, p.bytes, y), ACTC_OK);
    for (int i = 0; i < 65; i++) assert_true(y[i] == (x[i] > 0 ? 1.0f : 0.0f));
    free(b);
}

/* Per-sample widths (ActNN's mixed precision): sized from the widths, each
 * sample within its own width's error, other widths at encode refused. */
static void test_mixed_precision(void **state)
{
    (void)state;
    const int shape[2] = {4, 512};
    const uint8_t sbits[4] = {1, 2, 4, 8};
    actc_codec_plan p, u;
    assert_int_equal(actc_codec_plan_make("quant:2", 2, shape, 5, sbits, &p), ACTC_OK);
    assert_int_equal(actc_codec_plan_make("quant:2", 2, shape, 5, NULL, &u), ACTC_OK);
    /* Widths 1+2+4+8 = 15 against 4 * 2 = 8 bits per element, and 4 bytes of widths. */
    assert_int_equal(p.bytes - u.bytes, 4 + (15 - 8) * 512 / 8);
    float *x = make_input(p.numel, 3), y[4 * 512];
    uint8_t *b = encode(&p, x, sbits);
    assert_int_equal(actc_codec_decode(&p, b, p.bytes, y), ACTC_OK);
    for (int s = 0; s < 4; s++) {
        float lo = INFINITY, hi = -INFINITY;
        double worst = 0;
        for (int i = 0; i < 512; i++) {
            lo = fminf(lo, x[s * 512 + i]);
            hi = fmaxf(hi, x[s * 512 + i]);
            worst = fmax(worst, fabs((double)x[s * 512 + i] - y[s * 512 + i]));
        }
        assert_true(worst <= (hi - lo) / ((1 << sbits[s]) - 1) * 1.01);
    }
    const uint8_t other[4] = {1, 2, 4, 7};
    assert_int_equal(actc_codec_encode(&p, x, other, b, p.bytes), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "widths differ"));
    assert_int_equal(actc_codec_encode(&p, x, NULL, b, p.bytes), ACTC_ERR_INVALID);
    const uint8_t zero[4] = {1, 0, 4, 8};
    assert_int_equal(actc_codec_plan_make("quant:2", 2, shape, 5, zero, &p), ACTC_ERR_INVALID);
    assert_int_equal(actc_codec_plan_make("nf4", 2, shape, 5, sbits, &p), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "quant:B only"));
    free(b);
    free(x);
}

/* The plan is the policies' choice: a save the store would encode with a
 * policy's codec gives the same bytes through the public calls with the
 * codec spec of the same name and the same key. */
static void test_same_bytes_as_the_policies(void **state)
{
    (void)state;
    static const struct {
        const char *policy, *codec;
        actc_role role;
    } pairs[] = {
        {"quant:2", "quant:2", ACTC_ROLE_LINEAR_IN},
        {"quant:3,group=64", "quant:3,group=64", ACTC_ROLE_LINEAR_IN},
        {"quant:4,per-tensor", "quant:4,per-tensor", ACTC_ROLE_LINEAR_IN},
        {"bf16", "bf16", ACTC_ROLE_LINEAR_IN},
        {"division", "division", ACTC_ROLE_LINEAR_IN},
        {"division:b=4,q=3,seq=features", "division:b=4,q=3,seq=features", ACTC_ROLE_NORM_IN},
        {"agoq", "fp4-bnb,block=128", ACTC_ROLE_MUL_IN},
        {"agoq:block=64,fmt=nf4,round=stochastic", "nf4,block=64,round=stochastic", ACTC_ROLE_MUL_IN},
        {"gact:fix3", "quant:3", ACTC_ROLE_LINEAR_IN},
    };
    const int shapes[2][3] = {{4, 30, 24}, {6, 80, 0}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        for (int k = 0; k < 2; k++) {
            const int nd = shapes[k][2] ? 3 : 2;
            actc_tensor *t = actc_tensor_new(ACTC_MEM_SCRATCH, nd, shapes[k]);
            float *x = make_input(t->numel, (int)i);
            memcpy(t->data, x, t->numel * sizeof *x);
            actc_policy *pol;
            assert_int_equal(actc__policy_create(pairs[i].policy, &pol), ACTC_OK);
            const actc_save_role role = {pairs[i].role, 1, 0, 0, 0, 0};
            actc_save_desc d = {"op", "blocks.0.mlp", 0, 0, 42, ACTC_SAVE_ACT, &role, t, 0, NULL, 0, 1, 1, NULL, 0, 0};
            const actc_codec *codec = NULL;
            actc_codec_args a;
            memset(&a, 0, sizeof a);
            a.ndim = t->ndim;
            memcpy(a.shape, t->shape, sizeof a.shape);
            a.key = 99;
            assert_int_equal(pol->choose(pol, &d, &codec, &a), ACTC_OK);
            size_t bytes;
            uint8_t *want = tu_encode(codec, &a, x, t->numel, &bytes);
            actc_codec_plan p;
            assert_int_equal(actc_codec_plan_make(pairs[i].codec, nd, shapes[k], 99, NULL, &p), ACTC_OK);
            assert_int_equal(p.bytes, bytes);
            uint8_t *got = encode(&p, x, NULL);
            if (memcmp(got, want, bytes)) fail_msg("%s vs %s: the bytes differ", pairs[i].policy, pairs[i].codec);
            free(got);
            free(want);
            pol->destroy(pol);
            free(x);
            actc_tensor_release(t);
        }
    }
}

static void expect_bad(const char *spec, const char *needle)
{
    const int shape[2] = {2, 8};
    actc_codec_plan p;
    assert_int_equal(actc_codec_plan_make(spec, 2, shape, 0, NULL, &p), ACTC_ERR_INVALID);
    if (!strstr(actc_last_error(), needle)) fail_msg("'%s': message '%s' lacks '%s'", spec, actc_last_error(), needle);
    assert_int_equal(p.id_, 0); /* a refused plan is not usable */
}

/* A plan's own thread count: the same bytes at 1 and 3 threads as at the
 * library's setting, and the setting (the calling thread's OpenMP count)
 * as it was after the calls. */
static void test_threads_per_call(void **state)
{
    (void)state;
    const int shape[2] = {64, 2048};
    const size_t n = 64 * 2048;
    float *x = make_input(n, 9), *y = malloc(n * sizeof *y), *y1 = malloc(n * sizeof *y1);
    assert_true(y && y1);
    const int before = actc_get_threads();
    for (size_t s = 0; s < 3; s++) {
        const char *spec = s == 0 ? "quant:2" : s == 1 ? "nf4,round=stochastic" : "division";
        actc_codec_plan p;
        assert_int_equal(actc_codec_plan_make(spec, 2, shape, 5, NULL, &p), ACTC_OK);
        uint8_t *ref = encode(&p, x, NULL);
        assert_int_equal(actc_codec_decode(&p, ref, p.bytes, y), ACTC_OK);
        for (int th = 1; th <= 3; th += 2) {
            p.threads = th;
            uint8_t *got = encode(&p, x, NULL);
            assert_memory_equal(got, ref, p.bytes);
            assert_int_equal(actc_codec_decode(&p, got, p.bytes, y1), ACTC_OK);
            assert_memory_equal(y1, y, n * sizeof *y);
            assert_int_equal(actc_codec_decode_rows(&p, got, p.bytes, 3, 5, y1), ACTC_OK);
            assert_int_equal(actc_get_threads(), before);
            free(got);
        }
        free(ref);
    }
    free(x), free(y), free(y1);
}

static void test_refusals(void **state)
{
    (void)state;
    expect_bad("zip", "unknown codec");
    expect_bad("quant:9", "bits from 1 to 8");
    expect_bad("quant:2,group=0", "group must be");
    expect_bad("index", "index:1, index:2 or index:4");
    expect_bad("index:3", "index:1, index:2 or index:4");
    expect_bad("nf4,block=48", "power of two");
    expect_bad("nf4,block=64,block=64", "given twice");
    expect_bad("fp4,size=3", "options are");
    expect_bad("dyn8,block=0", "block=G");
    expect_bad("division:q=9", "q= are 1 to 8");
    expect_bad("division:lfc-only,q=2", "no residual");
    expect_bad("nf4,", "empty option");
    actc_codec_plan p;
    const int zero[2] = {2, 0}, ok[2] = {2, 8};
    assert_int_equal(actc_codec_plan_make("fp32", 2, zero, 0, NULL, &p), ACTC_ERR_INVALID);
    assert_int_equal(actc_codec_plan_make("fp32", 6, ok, 0, NULL, &p), ACTC_ERR_INVALID);
    assert_int_equal(actc_codec_plan_make(NULL, 2, ok, 0, NULL, &p), ACTC_ERR_INVALID);
    /* Short buffers, a plan never made, NULL data: refused, nothing written. */
    assert_int_equal(actc_codec_plan_make("quant:2", 2, ok, 0, NULL, &p), ACTC_OK);
    float x[16] = {0}, y[16];
    uint8_t buf[64];
    assert_int_equal(actc_codec_encode(&p, x, NULL, buf, p.bytes - 1), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "the plan needs"));
    assert_int_equal(actc_codec_encode(&p, NULL, NULL, buf, sizeof buf), ACTC_ERR_INVALID);
    assert_int_equal(actc_codec_encode(&p, x, NULL, buf, sizeof buf), ACTC_OK);
    assert_int_equal(actc_codec_decode(&p, buf, p.bytes - 1, y), ACTC_ERR_INVALID);
    assert_int_equal(actc_codec_decode_rows(&p, buf, p.bytes, 1, 2, y), ACTC_ERR_INVALID);
    actc_codec_plan blank;
    memset(&blank, 0, sizeof blank);
    assert_int_equal(actc_codec_decode(&blank, buf, sizeof buf, y), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "not a plan"));
    /* Canonical spellings. */
    assert_int_equal(actc_codec_plan_make("FP4", 2, ok, 0, NULL, &p), ACTC_OK);
    assert_string_equal(p.codec, "fp4-bnb,block=64");
    assert_int_equal(actc_codec_plan_make("e2m1,round=stochastic", 2, ok, 0, NULL, &p), ACTC_OK);
    assert_string_equal(p.codec, "fp4-e2m1,block=64,round=stochastic");
    assert_int_equal(actc_codec_plan_make("division", 2, ok, 0, NULL, &p), ACTC_OK);
    assert_string_equal(p.codec, "division:b=8,q=2");
    assert_int_equal(actc_codec_plan_make("dyn8", 2, ok, 0, NULL, &p), ACTC_OK);
    assert_string_equal(p.codec, "dyn8,block=256");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_codec_round_trips),
        cmocka_unit_test(test_index_and_mask),
        cmocka_unit_test(test_mixed_precision),
        cmocka_unit_test(test_same_bytes_as_the_policies),
        cmocka_unit_test(test_threads_per_call),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
