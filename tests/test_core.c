/* Core layer: allocator accounting and budget, RNG, tensor lifetime. */
#include "testutil.h"
#include <math.h>
#include <string.h>

static void test_alloc_accounting(void **state)
{
    (void)state;
    actc_mem_stats a, b;
    actc_mem_get_stats(&a);
    void *p = actc_mem_alloc(ACTC_MEM_SCRATCH, 1000);
    void *q = actc_mem_alloc(ACTC_MEM_ACT, 3000);
    assert_non_null(p);
    assert_non_null(q);
    actc_mem_get_stats(&b);
    assert_int_equal(b.current[ACTC_MEM_SCRATCH] - a.current[ACTC_MEM_SCRATCH], 1000);
    assert_int_equal(b.current[ACTC_MEM_ACT] - a.current[ACTC_MEM_ACT], 3000);
    assert_int_equal(b.current_total - a.current_total, 4000);
    assert_int_equal(actc_mem_size(q), 3000);
    assert_true(((uintptr_t)q & 63) == 0);
    actc_mem_free(p);
    actc_mem_free(q);
    actc_mem_get_stats(&b);
    assert_int_equal(b.current_total, a.current_total);
    assert_true(b.peak_total >= a.current_total + 4000);
}

static void test_budget(void **state)
{
    (void)state;
    actc_mem_stats a;
    actc_mem_get_stats(&a);
    actc_mem_set_budget(a.current_total + 4096);
    void *p = actc_mem_alloc(ACTC_MEM_CONTEXT, 4000);
    assert_non_null(p);
    void *q = actc_mem_alloc(ACTC_MEM_CONTEXT, 200);
    assert_null(q);
    assert_int_equal(actc_last_status(), ACTC_ERR_OOM);
    assert_non_null(strstr(actc_last_error(), "CONTEXT"));
    assert_non_null(strstr(actc_last_error(), "200 B"));
    actc_mem_free(p);
    actc_mem_set_budget(0);
    actc_mem_stats b;
    actc_mem_get_stats(&b);
    assert_int_equal(b.current_total, a.current_total);
}

static void test_parse_bytes(void **state)
{
    (void)state;
    size_t v;
    assert_int_equal(actc_parse_bytes("512MiB", &v), ACTC_OK);
    assert_int_equal(v, 512ull << 20);
    assert_int_equal(actc_parse_bytes("2GiB", &v), ACTC_OK);
    assert_int_equal(v, 2ull << 30);
    assert_int_equal(actc_parse_bytes("1.5G", &v), ACTC_OK);
    assert_int_equal(v, 3ull << 29);
    assert_int_equal(actc_parse_bytes("100MB", &v), ACTC_OK);
    assert_int_equal(v, 100000000ull);
    assert_int_equal(actc_parse_bytes("12parsecs", &v), ACTC_ERR_INVALID);
    assert_int_equal(actc_parse_bytes("", &v), ACTC_ERR_INVALID);
    assert_int_equal(actc_parse_bytes("-3M", &v), ACTC_ERR_INVALID);
}

static void test_rng(void **state)
{
    (void)state;
    /* Pure function of (key, i); mean and variance of U(0,1). */
    assert_true(actc_rand_uniform(5, 17) == actc_rand_uniform(5, 17));
    assert_true(actc_rand_uniform(5, 17) != actc_rand_uniform(6, 17));
    double s = 0, s2 = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double u = actc_rand_uniform(99, (uint64_t)i);
        assert_true(u >= 0 && u < 1);
        s += u;
        s2 += u * u;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    assert_true(fabs(mean - 0.5) < 0.005);
    assert_true(fabs(var - 1.0 / 12) < 0.002);
    double z = 0, z2 = 0;
    for (int i = 0; i < n; i++) {
        double v = actc_rand_normal(3, (uint64_t)i);
        z += v;
        z2 += v * v;
    }
    assert_true(fabs(z / n) < 0.01);
    assert_true(fabs(z2 / n - 1.0) < 0.02);
}

static void test_tensor_lifetime(void **state)
{
    (void)state;
    actc_mem_stats a, b;
    actc_mem_get_stats(&a);
    int shp[2] = {4, 5};
    actc_tensor *t = actc_tensor_zeros(ACTC_MEM_ACT, 2, shp);
    assert_int_equal(t->numel, 20);
    actc_tensor_retain(t);
    actc_tensor_release(t);
    assert_non_null(t->data);
    actc_tensor_release(t);
    actc_mem_get_stats(&b);
    assert_int_equal(b.current_total, a.current_total);
    int bad[1] = {-1};
    assert_null(actc_tensor_new(ACTC_MEM_ACT, 1, bad));
    assert_int_equal(actc_last_status(), ACTC_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_accounting), cmocka_unit_test(test_budget),
        cmocka_unit_test(test_parse_bytes),      cmocka_unit_test(test_rng),
        cmocka_unit_test(test_tensor_lifetime),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
