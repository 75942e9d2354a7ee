/* Codec kernels: exact round trips where lossless, error bounds where not,
 * exact byte counts, tails that are not a multiple of the packing unit. */
#include "testutil.h"
#include "codec/codec.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t roundtrip_w(const actc_codec *c, int width, const float *x, size_t n, float *out)
{
    actc_codec_args a;
    memset(&a, 0, sizeof a);
    a.width = width;
    size_t bytes = c->plan(&a, n);
    void *buf = malloc(bytes ? bytes : 1);
    c->encode(&a, x, n, buf);
    c->decode(&a, buf, n, out);
    free(buf);
    return bytes;
}

static size_t roundtrip(const actc_codec *c, const float *x, size_t n, float *out)
{
    return roundtrip_w(c, 0, x, n, out);
}

static void test_fp32_and_bf16(void **state)
{
    (void)state;
    const size_t n = 1001;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) x[i] = (actc_rand_uniform(1, i) - 0.5f) * powf(10.0f, (float)(i % 9) - 4);
    x[0] = 0.0f;
    x[1] = -0.0f;
    x[2] = INFINITY;
    assert_int_equal(roundtrip(&actc_codec_fp32, x, n, y), 4 * n);
    assert_memory_equal(x, y, n * sizeof *x);
    assert_int_equal(roundtrip(&actc_codec_bf16, x, n, y), 2 * n);
    for (size_t i = 0; i < n; i++) {
        if (isinf(x[i])) {
            assert_true(isinf(y[i]));
            continue;
        }
        /* round to nearest, 8 significant bits: half an ulp is at most 2^-8 of |x| */
        assert_true(fabsf(y[i] - x[i]) <= fabsf(x[i]) * (1.0f / 256.0f) + 1e-38f);
    }
    free(x);
    free(y);
}

static void test_mask_tails(void **state)
{
    (void)state;
    float x[67], y[67];
    for (size_t n = 1; n <= 67; n++) {
        for (size_t i = 0; i < n; i++) x[i] = actc_rand_uniform(n, i) - 0.5f;
        memset(y, 0x7f, sizeof y);
        assert_int_equal(roundtrip(&actc_codec_mask1, x, n, y), (n + 7) / 8);
        for (size_t i = 0; i < n; i++) assert_true(y[i] == (x[i] > 0 ? 1.0f : 0.0f));
    }
}

static void test_index_widths(void **state)
{
    (void)state;
    const float maxes[3] = {255.0f, 256.0f, 65536.0f};
    const size_t widths[3] = {1, 2, 4};
    float x[13], y[13];
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 13; i++) x[i] = (float)(i * 7 % 13);
        x[5] = maxes[k];
        assert_int_equal(actc_index_width(maxes[k]), (int)widths[k]);
        assert_int_equal(roundtrip_w(&actc_codec_index, actc_index_width(maxes[k]), x, 13, y), 13 * widths[k]);
        assert_memory_equal(x, y, sizeof x);
    }
    /* A width that is not 1, 2 or 4 plans the widest, which holds any index. */
    assert_int_equal(roundtrip_w(&actc_codec_index, 3, x, 13, y), 13 * 4);
    assert_memory_equal(x, y, sizeof x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32_and_bf16),
        cmocka_unit_test(test_mask_tails),
        cmocka_unit_test(test_index_widths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
