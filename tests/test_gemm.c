/* The dense products (src/core/gemm.c) and what the library reads of the
 * CPU (src/core/cpu.c): every backend computes the same products as a
 * naive reference (all transposes, strides, alpha and beta); deterministic
 * mode gives the same bits at 1, 2 and 3 threads on each backend; the
 * setting refuses what it cannot run; the CPU report is consistent. */
#include "testutil.h"
#include "core/core.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* s is ACTC_ERR_INVALID with a message containing needle. */
static void expect_invalid(actc_status s, const char *needle)
{
    assert_int_equal(s, ACTC_ERR_INVALID);
    if (!strstr(actc_last_error(), needle)) fail_msg("message '%s' lacks '%s'", actc_last_error(), needle);
    actc_clear_error();
}

/* The backends this build can run: openblas always, dnnl when built in. */
static int backends(const char **out)
{
    int n = 0;
    out[n++] = "openblas";
    if (actc_set_gemm_backend("dnnl") == ACTC_OK) out[n++] = "dnnl";
    actc_clear_error();
    assert_int_equal(actc_set_gemm_backend("auto"), ACTC_OK);
    return n;
}

static void fill(float *p, size_t n, uint64_t key)
{
    for (size_t i = 0; i < n; i++) p[i] = 2.0f * actc_rand_uniform(key, i) - 1.0f;
}

/* C = alpha op(A) op(B) + beta C in double, row-major. */
static void reference(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                     (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            C[(size_t)i * ldc + j] = (float)(alpha * s + (double)beta * C[(size_t)i * ldc + j]);
        }
}

typedef struct {
    int M, N, K, ta, tb, pad; /* pad: extra elements per row of A, B and C */
    float alpha, beta;
} gemm_case;

static const gemm_case cases[] = {
    {1, 1, 1, 0, 0, 0, 1, 0},        {7, 5, 3, 0, 0, 0, 1, 0},         {64, 48, 80, 1, 0, 0, 1, 0},
    {33, 65, 17, 0, 1, 3, 0.5f, 1},  {130, 70, 260, 1, 1, 1, -2, 0.25f}, {300, 20, 128, 0, 0, 5, 1, 1},
    {20, 300, 64, 1, 0, 0, 1, 1},    {256, 256, 32, 0, 1, 0, 1, 0},    {5, 7, 0, 0, 0, 0, 1, 0.5f},
    {512, 40, 300, 1, 0, 0, 1.5f, 0}, {1000, 64, 256, 1, 0, 24, 1, 0.25f},
};

/* Every backend against the reference, within float rounding of a sum of
 * K products of numbers in [-1, 1]. */
static void test_backends_agree(void **state)
{
    (void)state;
    const char *names[2];
    const int nb = backends(names);
    for (int b = 0; b < nb; b++) {
        assert_int_equal(actc_set_gemm_backend(names[b]), ACTC_OK);
        assert_string_equal(actc_gemm_backend_in_use(), names[b]);
        for (int det = 0; det <= 1; det++) {
            assert_int_equal(actc_set_deterministic(det), ACTC_OK);
            for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
                const gemm_case *g = &cases[c];
                const int lda = (g->ta ? g->M : g->K) + g->pad, ldb = (g->tb ? g->K : g->N) + g->pad,
                          ldc = g->N + g->pad;
                const size_t na = (size_t)(g->ta ? g->K : g->M) * lda + 1, nbb = (size_t)(g->tb ? g->N : g->K) * ldb + 1,
                             nc = (size_t)g->M * ldc;
                float *A = malloc(na * sizeof *A), *B = malloc(nbb * sizeof *B), *C = malloc(nc * sizeof *C),
                      *R = malloc(nc * sizeof *R);
                fill(A, na, 1 + c);
                fill(B, nbb, 100 + c);
                fill(C, nc, 200 + c);
                memcpy(R, C, nc * sizeof *C);
                actc__sgemm(g->ta, g->tb, g->M, g->N, g->K, g->alpha, A, lda, B, ldb, g->beta, C, ldc);
                reference(g->ta, g->tb, g->M, g->N, g->K, g->alpha, A, lda, B, ldb, g->beta, R, ldc);
                double worst = 0;
                for (int i = 0; i < g->M; i++)
                    for (int j = 0; j < g->N; j++) {
                        const double d = fabs((double)C[(size_t)i * ldc + j] - R[(size_t)i * ldc + j]);
                        if (d > worst) worst = d;
                    }
                /* the padding of C is not written */
                for (int i = 0; i < g->M; i++)
                    for (int j = g->N; j < ldc; j++) assert_true(C[(size_t)i * ldc + j] == R[(size_t)i * ldc + j]);
                if (worst > 1e-5 * (g->K + 1) * (fabs(g->alpha) + 1))
                    fail_msg("%s%s: %dx%dx%d %c%c: worst error %g", names[b], det ? " deterministic" : "", g->M, g->N,
                             g->K, g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', worst);
                free(A);
                free(B);
                free(C);
                free(R);
            }
        }
    }
    assert_int_equal(actc_set_deterministic(0), ACTC_OK);
    assert_int_equal(actc_set_gemm_backend("auto"), ACTC_OK);
}

/* Deterministic mode: the same bits at 1, 2 and 3 threads on each backend,
 * for products large enough to be cut into several tiles both ways. */
static void test_deterministic_each_backend(void **state)
{
    (void)state;
    const char *names[2];
    const int nb = backends(names), threads0 = actc_get_threads();
    const int M = 900, N = 300, K = 257;
    float *A = malloc((size_t)M * K * sizeof *A), *B = malloc((size_t)K * N * sizeof *B);
    float *C[3];
    fill(A, (size_t)M * K, 5);
    fill(B, (size_t)K * N, 6);
    assert_int_equal(actc_set_deterministic(1), ACTC_OK);
    for (int b = 0; b < nb; b++) {
        assert_int_equal(actc_set_gemm_backend(names[b]), ACTC_OK);
        for (int shape = 0; shape < 2; shape++) { /* rows split (M >= N), then columns (M < N) */
            const int m = shape ? N : M, n = shape ? M : N;
            for (int t = 1; t <= 3; t++) {
                actc_set_threads(t);
                C[t - 1] = calloc((size_t)m * n, sizeof(float));
                /* op(A) m x K: A itself, or for the column case B^T (K x N read transposed) */
                if (!shape) actc__sgemm(0, 0, m, n, K, 1, A, K, B, N, 0, C[t - 1], n);
                else actc__sgemm(1, 1, m, n, K, 1, B, N, A, K, 0, C[t - 1], n);
            }
            assert_memory_equal(C[0], C[1], (size_t)m * n * sizeof(float));
            assert_memory_equal(C[0], C[2], (size_t)m * n * sizeof(float));
            for (int t = 0; t < 3; t++) free(C[t]);
        }
    }
    assert_int_equal(actc_set_deterministic(0), ACTC_OK);
    assert_int_equal(actc_set_gemm_backend("auto"), ACTC_OK);
    actc_set_threads(threads0);
    free(A);
    free(B);
}

/* The setting: names, refusals that change nothing, auto's reason. */
static void test_setting(void **state)
{
    (void)state;
    assert_string_equal(actc_get_gemm_backend(), "auto");
    const char *in_use = actc_gemm_backend_in_use();
    assert_true(!strcmp(in_use, "openblas") || !strcmp(in_use, "dnnl"));
    assert_true(strlen(actc_gemm_backend_reason()) > 10);
    assert_int_equal(actc_set_gemm_backend("openblas"), ACTC_OK);
    assert_string_equal(actc_get_gemm_backend(), "openblas");
    assert_string_equal(actc_gemm_backend_in_use(), "openblas");
    assert_non_null(strstr(actc_gemm_backend_reason(), "forced"));
    expect_invalid(actc_set_gemm_backend("mkl"), "unknown dense-product backend 'mkl'");
    expect_invalid(actc_set_gemm_backend(NULL), "NULL");
    assert_string_equal(actc_get_gemm_backend(), "openblas"); /* unchanged */
    if (actc_set_gemm_backend("dnnl") != ACTC_OK) /* a build without oneDNN says so */
        assert_non_null(strstr(actc_last_error(), "oneDNN"));
    actc_clear_error();
    assert_int_equal(actc_set_gemm_backend("auto"), ACTC_OK);
    assert_string_equal(actc_gemm_backend_in_use(), in_use);
}

/* The CPU report: a level its features justify, OpenBLAS's core named,
 * generic exactly when OpenBLAS's kernels lack AVX2 on a CPU that has it,
 * and auto on oneDNN in that case when the build has it. */
static void test_cpu_info(void **state)
{
    (void)state;
    actc_cpu_info c;
    expect_invalid(actc_get_cpu_info(NULL), "NULL");
    assert_int_equal(actc_get_cpu_info(&c), ACTC_OK);
    print_message("cpu: %s %s family %d model 0x%X: %s (level %s); OpenBLAS %s (%s)%s; oneDNN %s; auto: %s (%s)\n",
                  c.vendor, c.brand, c.family, (unsigned)c.model, c.features, actc_isa_name(c.isa_level),
                  c.openblas_core, actc_isa_name(c.openblas_level), c.openblas_generic ? ", generic" : "",
                  c.dnnl_version, actc_gemm_backend_in_use(), actc_gemm_backend_reason());
    assert_true(c.openblas_core[0] != 0);
    assert_true(c.isa_level >= ACTC_ISA_BASE && c.isa_level <= ACTC_ISA_AVX512);
    if (c.isa_level >= ACTC_ISA_AVX2) {
        assert_non_null(strstr(c.features, "avx2"));
        assert_non_null(strstr(c.features, "fma"));
    }
    if (c.isa_level == ACTC_ISA_AVX512) assert_non_null(strstr(c.features, "avx512f"));
    assert_int_equal(c.openblas_generic, c.isa_level >= ACTC_ISA_AVX2 && c.openblas_level < ACTC_ISA_AVX2);
    assert_string_equal(actc_isa_name(ACTC_ISA_AVX2), "avx2");
    if (c.openblas_generic && c.dnnl_version[0]) assert_string_equal(actc_gemm_backend_in_use(), "dnnl");
    if (!c.dnnl_version[0]) assert_string_equal(actc_gemm_backend_in_use(), "openblas");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_setting),
        cmocka_unit_test(test_cpu_info),
        cmocka_unit_test(test_backends_agree),
        cmocka_unit_test(test_deterministic_each_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
