/* Core layer: allocator accounting and budget, RNG, tensor lifetime. */
#include "testutil.h"
#include <math.h>
#include <pthread.h>
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

/* The cache of freed blocks.  Each test starts from an empty cache under the
 * default limit (earlier tests may have left blocks in it). */
#define MiB ((size_t)1 << 20)

static actc_mem_stats mem_stats(void)
{
    actc_mem_stats s;
    actc_mem_get_stats(&s);
    return s;
}

static void cache_fresh(void)
{
    actc_mem_set_cache_limit(ACTC_MEM_CACHE_AUTO);
    actc_mem_trim();
    assert_int_equal(mem_stats().cached, 0);
}

static void test_cache_reuse(void **state)
{
    (void)state;
    cache_fresh();
    actc_mem_stats a = mem_stats();
    char *p = actc_mem_alloc(ACTC_MEM_ACT, MiB);
    assert_non_null(p);
    memset(p, 0x5a, MiB);
    actc_mem_free(p);
    actc_mem_stats b = mem_stats();
    /* kept, counted as cached (its class size: at least the request, under
     * 1.25x), not as live */
    assert_true(b.cached >= MiB && b.cached < MiB + MiB / 4);
    assert_true(b.cached <= b.cache_limit);
    assert_int_equal(b.current_total, a.current_total);
    assert_int_equal(b.n_sys_allocs, a.n_sys_allocs + 1);
    /* A smaller request of the same class takes it back: no system call. */
    char *q = actc_mem_calloc(ACTC_MEM_SCRATCH, MiB - 1000);
    actc_mem_stats c = mem_stats();
    assert_ptr_equal(q, p);
    assert_int_equal(c.n_sys_allocs, b.n_sys_allocs);
    assert_int_equal(c.n_allocs, b.n_allocs + 1);
    assert_int_equal(c.cached, 0);
    assert_int_equal(c.current[ACTC_MEM_SCRATCH] - a.current[ACTC_MEM_SCRATCH], MiB - 1000);
    assert_int_equal(actc_mem_size(q), MiB - 1000);
    assert_true(((uintptr_t)q & 63) == 0);
    for (size_t i = 0; i < MiB - 1000; i += 4093) assert_int_equal(q[i], 0); /* calloc clears reused blocks */
    /* Another class misses; a small block is never cached. */
    void *r = actc_mem_alloc(ACTC_MEM_ACT, 2 * MiB + 1);
    assert_non_null(r);
    assert_int_equal(mem_stats().n_sys_allocs, c.n_sys_allocs + 1);
    actc_mem_free(r);
    actc_mem_free(q);
    size_t held = mem_stats().cached;
    actc_mem_free(actc_mem_alloc(ACTC_MEM_ACT, 1000));
    assert_int_equal(mem_stats().cached, held);
    /* An empty class borrows a block of up to twice its size (the 2 MiB
     * block serves 900 KiB, class 1 MiB), not beyond (800 KiB: class
     * 896 KiB), and the block keeps its own class. */
    actc_mem_trim();
    void *big = actc_mem_alloc(ACTC_MEM_ACT, 2 * MiB);
    actc_mem_free(big);
    a = mem_stats();
    void *far = actc_mem_alloc(ACTC_MEM_ACT, 800 << 10);
    assert_ptr_not_equal(far, big);
    assert_int_equal(mem_stats().n_sys_allocs, a.n_sys_allocs + 1);
    void *near = actc_mem_alloc(ACTC_MEM_ACT, 900 << 10);
    assert_ptr_equal(near, big);
    assert_int_equal(actc_mem_size(near), 900 << 10);
    assert_int_equal(mem_stats().n_sys_allocs, a.n_sys_allocs + 1);
    assert_int_equal(mem_stats().current_total, a.current_total + (800 << 10) + (900 << 10));
    actc_mem_free(near);
    assert_int_equal(mem_stats().cached, 2 * MiB);
    actc_mem_free(far);
    actc_mem_trim();
}

static void test_cache_not_live(void **state)
{
    (void)state;
    cache_fresh();
    actc_mem_reset_peak();
    actc_mem_stats a = mem_stats();
    /* The same 3 MiB twice through the cache, then retagged: every category's
     * current and peak count the requested bytes, never the cached ones. */
    for (int i = 0; i < 2; i++) {
        void *p = actc_mem_alloc(ACTC_MEM_ACT, 3 * MiB - 64);
        assert_non_null(p);
        actc_mem_retag(p, ACTC_MEM_GRAD);
        actc_mem_free(p);
    }
    actc_mem_stats b = mem_stats();
    assert_true(b.cached >= 3 * MiB - 64);
    assert_int_equal(b.n_sys_allocs, a.n_sys_allocs + 1);
    for (int c = 0; c < ACTC_MEM_NCAT; c++) assert_int_equal(b.current[c], a.current[c]);
    assert_int_equal(b.current_total, a.current_total);
    assert_int_equal(b.peak[ACTC_MEM_ACT] - a.current[ACTC_MEM_ACT], 3 * MiB - 64);
    assert_int_equal(b.peak[ACTC_MEM_GRAD] - a.current[ACTC_MEM_GRAD], 3 * MiB - 64);
    assert_int_equal(b.peak[ACTC_MEM_PARAM], a.current[ACTC_MEM_PARAM]);
    assert_int_equal(b.peak_total - a.current_total, 3 * MiB - 64);
    actc_mem_trim();
}

static void test_cache_trim(void **state)
{
    (void)state;
    cache_fresh();
    void *p[4];
    for (int i = 0; i < 4; i++) assert_non_null(p[i] = actc_mem_alloc(ACTC_MEM_ACT, (size_t)(i + 1) * MiB));
    for (int i = 0; i < 4; i++) actc_mem_free(p[i]);
    actc_mem_stats a = mem_stats();
    assert_int_equal(a.cached, 10 * MiB); /* powers of two and 3 MiB are class sizes */
    actc_mem_trim();
    actc_mem_stats b = mem_stats();
    assert_int_equal(b.cached, 0);
    assert_int_equal(b.current_total, a.current_total);
    /* Nothing left to reuse: the next request goes to the system. */
    actc_mem_free(actc_mem_alloc(ACTC_MEM_ACT, 4 * MiB));
    assert_int_equal(mem_stats().n_sys_allocs, b.n_sys_allocs + 1);
    actc_mem_trim();
}

static void test_cache_budget(void **state)
{
    (void)state;
    cache_fresh();
    const size_t live = mem_stats().current_total;
    void *p[4];
    for (int i = 0; i < 4; i++) assert_non_null(p[i] = actc_mem_alloc(ACTC_MEM_ACT, MiB));
    for (int i = 0; i < 4; i++) actc_mem_free(p[i]);
    assert_int_equal(mem_stats().cached, 4 * MiB);
    /* A budget under live + cached frees cached blocks at once. */
    const size_t budget = live + 3 * MiB;
    actc_mem_set_budget(budget);
    actc_mem_stats a = mem_stats();
    assert_int_equal(a.cached, 3 * MiB);
    assert_int_equal(a.cache_limit, 3 * MiB);
    /* A request that fits the live bytes succeeds although the cache held
     * the room: cached blocks are let go, never the request refused. */
    void *q = actc_mem_alloc(ACTC_MEM_CONTEXT, 3 * MiB - 4096);
    assert_non_null(q);
    actc_mem_stats b = mem_stats();
    assert_true(b.current_total + b.cached <= budget);
    assert_int_equal(b.current_total, live + 3 * MiB - 4096);
    actc_mem_free(q); /* fits the budget again: cached */
    assert_int_equal(mem_stats().cached, 3 * MiB);
    void *small = actc_mem_alloc(ACTC_MEM_SCRATCH, 5000);
    assert_non_null(small);
    b = mem_stats();
    assert_true(b.current_total + b.cached <= budget);
    actc_mem_free(small);
    /* Over the budget in live bytes is still refused, naming the category. */
    assert_null(actc_mem_alloc(ACTC_MEM_CONTEXT, 3 * MiB + 1));
    assert_int_equal(actc_last_status(), ACTC_ERR_OOM);
    assert_non_null(strstr(actc_last_error(), "CONTEXT"));
    actc_clear_error();
    actc_mem_set_budget(0);
    assert_int_equal(mem_stats().current_total, live);
    actc_mem_trim();
}

static void test_cache_limit(void **state)
{
    (void)state;
    cache_fresh();
    const size_t cls = 768 << 10; /* 700 KiB rounds up to the 768 KiB class */
    actc_mem_set_cache_limit(2 * MiB);
    assert_int_equal(mem_stats().cache_limit, 2 * MiB);
    void *p[5];
    for (int i = 0; i < 5; i++) assert_non_null(p[i] = actc_mem_alloc(ACTC_MEM_ACT, 700 << 10));
    for (int i = 0; i < 5; i++) actc_mem_free(p[i]);
    assert_int_equal(mem_stats().cached, 2 * cls); /* a third would be over */
    actc_mem_set_cache_limit(MiB); /* lowering it frees what is over */
    assert_int_equal(mem_stats().cached, cls);
    /* 0: no cache; every request is the system's. */
    actc_mem_set_cache_limit(0);
    actc_mem_stats a = mem_stats();
    assert_int_equal(a.cached, 0);
    for (int i = 0; i < 3; i++) actc_mem_free(actc_mem_alloc(ACTC_MEM_ACT, MiB));
    actc_mem_stats b = mem_stats();
    assert_int_equal(b.cached, 0);
    assert_int_equal(b.n_sys_allocs, a.n_sys_allocs + 3);
    /* The default keeps live + cached within twice the high-water mark H of
     * live bytes.  H is set here by a block larger than any other test's
     * (never touched: address space only); then blocks of ever larger
     * classes, each live alone next to a held one (H does not move), fill
     * the cache up to 2H - live and no further. */
    actc_mem_set_cache_limit(ACTC_MEM_CACHE_AUTO);
    const size_t live0 = mem_stats().current_total, big = 256 * MiB, high = live0 + big;
    actc_mem_free(actc_mem_alloc(ACTC_MEM_ACT, big));
    void *held = actc_mem_alloc(ACTC_MEM_ACT, 8 * MiB);
    assert_non_null(held);
    const size_t room = 2 * high - (live0 + 8 * MiB);
    a = mem_stats();
    assert_int_equal(a.cache_limit, room);
    assert_int_equal(a.cached, big);
    size_t last = 0, freed = big;
    for (size_t n = 96 << 10; a.current_total + n <= high; n += n / 4) {
        actc_mem_free(actc_mem_alloc(ACTC_MEM_ACT, n));
        freed += n;
        last = n;
    }
    b = mem_stats();
    assert_true(freed > room);                  /* more was freed than fits */
    assert_int_equal(b.cache_limit, room);      /* H did not move */
    assert_true(b.cached <= room);              /* the bound holds */
    assert_true(b.cached + 2 * last >= room);   /* and the cache filled up to it */
    actc_mem_free(held);
    actc_mem_trim();
}

/* Threads allocating and freeing through the cache at once: every block
 * keeps its own bytes (a mark every 4 KiB: the calls, not the writes, are
 * what must collide), and the accounting returns to where it was. */
static void *cache_worker(void *arg)
{
    const unsigned seed = (unsigned)(uintptr_t)arg;
    unsigned char *held[8] = {0};
    size_t size[8] = {0};
    for (int it = 0; it < 50000; it++) {
        int k = (int)(actc_rand_uniform(seed, (uint64_t)it) * 8);
        const unsigned char mark = (unsigned char)(seed * 8u + (unsigned)k);
        if (held[k]) {
            for (size_t i = 0; i < size[k]; i += 4096)
                if (held[k][i] != mark) return (void *)1;
            actc_mem_free(held[k]);
            held[k] = NULL;
        } else {
            /* half below the cache's 64 KiB floor, half above */
            size[k] = ((size_t)32 << 10) + (size_t)it % 7 * 4096;
            if (actc_rand_uniform(seed + 100u, (uint64_t)it) < 0.5) size[k] += (size_t)300 << 10;
            if (!(held[k] = actc_mem_alloc(ACTC_MEM_SCRATCH, size[k]))) return (void *)1;
            for (size_t i = 0; i < size[k]; i += 4096) held[k][i] = mark;
        }
    }
    for (int k = 0; k < 8; k++) actc_mem_free(held[k]);
    return NULL;
}

static void test_cache_threads(void **state)
{
    (void)state;
    cache_fresh();
    const size_t live = mem_stats().current_total;
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, cache_worker, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < 4; i++) {
        void *ret;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_null(ret);
    }
    actc_mem_stats s = mem_stats();
    assert_int_equal(s.current_total, live);
    assert_true(s.cached > 0 && s.cached <= s.cache_limit);
    actc_mem_trim();
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
        cmocka_unit_test(test_tensor_lifetime),  cmocka_unit_test(test_cache_reuse),
        cmocka_unit_test(test_cache_not_live),   cmocka_unit_test(test_cache_trim),
        cmocka_unit_test(test_cache_budget),     cmocka_unit_test(test_cache_limit),
        cmocka_unit_test(test_cache_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
