/* Every dense product of the library (actc__sgemm) and the backend it runs
 * on: OpenBLAS (cblas_sgemm) or oneDNN (dnnl_sgemm), chosen once per process
 * from the CPU's feature bits and the kernels OpenBLAS loaded (cpu.c), or
 * forced with actc_set_gemm_backend.
 *
 * Why two: OpenBLAS picks its kernels by CPU model at load time and runs
 * generic SSE3 ones on models it does not know (Debian 12's 0.3.21 on Intel
 * family 6 from model 0xB0), while oneDNN dispatches on feature bits and
 * JIT-compiles AVX2 or AVX-512 kernels for whatever it finds.  On a gpt-mini
 * step's products OpenBLAS's generic kernels took 2.1x oneDNN's time; where
 * OpenBLAS's kernels are tuned the two were within 15% (oneDNN faster on
 * the attention's small blocks, half as fast on two transposed weight
 * gradients: bench/RESULTS.md, "CPU speed"), and OpenBLAS stays the
 * default there, so that results on those machines do not move.
 *
 * Why not a timing: auto is a function of the machine, not of a
 * measurement, so two runs of the same command on the same machine compute
 * the same bits (a timed choice flips with the load, and a resumed run
 * would continue on other kernels).  bench_gemm measures both.
 *
 * Deterministic mode (actc_set_deterministic): the product is cut into
 * tiles whose shape depends only on the product's shape, each computed by
 * a single-threaded call of the backend (OpenBLAS and oneDNN both run on
 * one thread inside an OpenMP parallel region), so every element is summed
 * in the same order whatever the thread count, on either backend.  A
 * threaded product splits its sums by the thread count (a weight gradient
 * [256 x 784] over 32 rows already differs in the last bits between 1, 2
 * and 3 threads). */
#include "core.h"
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#ifdef ACTC_HAVE_DNNL
#include <dnnl.h>
#endif

enum { GEMM_AUTO = ACTC__BACKEND_AUTO, GEMM_OPENBLAS = ACTC__GEMM_OPENBLAS, GEMM_DNNL = ACTC__GEMM_DNNL };

/* The setting is actc__set.gemm (settings.c); the choice auto resolves to
 * is made once. */
static int g_auto;
static char g_auto_why[160];
static pthread_once_t g_auto_once = PTHREAD_ONCE_INIT;

static int dnnl_built(void)
{
#ifdef ACTC_HAVE_DNNL
    return 1;
#else
    return 0;
#endif
}

static void resolve_auto(void)
{
    const actc_cpu_info *c = actc__cpu();
    g_auto = GEMM_OPENBLAS;
    if (!dnnl_built()) {
        snprintf(g_auto_why, sizeof g_auto_why, "this build has no oneDNN");
    } else if (c->openblas_generic) {
        g_auto = GEMM_DNNL;
        snprintf(g_auto_why, sizeof g_auto_why, "OpenBLAS loaded its %s kernels (%s) on this %s CPU: generic",
                 c->openblas_core, actc_isa_name(c->openblas_level), actc_isa_name(c->isa_level));
    } else {
        snprintf(g_auto_why, sizeof g_auto_why, "OpenBLAS loaded its %s kernels (%s) on this %s CPU",
                 c->openblas_core, actc_isa_name(c->openblas_level), actc_isa_name(c->isa_level));
    }
}

static int backend(void)
{
    const int f = actc__set.gemm;
    if (f != GEMM_AUTO) return f;
    pthread_once(&g_auto_once, resolve_auto);
    return g_auto;
}

actc_status actc_set_gemm_backend(const char *name)
{
    if (!name) return actc_set_error(ACTC_ERR_INVALID, "dense-product backend: NULL name (auto, dnnl, openblas)");
    if (!strcmp(name, "auto")) {
        actc__set.gemm = GEMM_AUTO;
    } else if (!strcmp(name, "openblas")) {
        actc__set.gemm = GEMM_OPENBLAS;
    } else if (!strcmp(name, "dnnl")) {
        if (!dnnl_built())
            return actc_set_error(ACTC_ERR_INVALID, "dense-product backend 'dnnl': this build of actc has no oneDNN "
                                                    "(use auto or openblas)");
#if defined(__x86_64__) || defined(__i386__)
        /* oneDNN's JIT kernels need SSE4.1 at least (cpu.c reports SSE4.2,
         * which implies it); below it only its reference gemm runs, slower
         * than any OpenBLAS. */
        if (!strstr(actc__cpu()->features, "sse4.2"))
            return actc_set_error(ACTC_ERR_INVALID, "dense-product backend 'dnnl': oneDNN has no optimised kernels "
                                                    "for this CPU (no SSE4.2; use auto or openblas)");
#endif
        actc__set.gemm = GEMM_DNNL;
    } else {
        return actc_set_error(ACTC_ERR_INVALID, "unknown dense-product backend '%s' (auto, dnnl, openblas)", name);
    }
    return ACTC_OK;
}

const char *actc_get_gemm_backend(void)
{
    switch (actc__set.gemm) {
    case GEMM_OPENBLAS: return "openblas";
    case GEMM_DNNL: return "dnnl";
    default: return "auto";
    }
}

const char *actc_gemm_backend_in_use(void) { return backend() == GEMM_DNNL ? "dnnl" : "openblas"; }

const char *actc_gemm_backend_reason(void)
{
    if (actc__set.gemm != GEMM_AUTO) return "forced (actc_set_gemm_backend)";
    pthread_once(&g_auto_once, resolve_auto);
    return g_auto_why;
}

/* One product on the backend b, threaded as the backend likes (one thread
 * inside an OpenMP parallel region).  oneDNN refuses only arguments that
 * OpenBLAS would also refuse (actc's callers pass none); the fallback keeps
 * a refused call from leaving C unwritten. */
static void gemm_on(int b, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                    int ldb, float beta, float *C, int ldc)
{
#ifdef ACTC_HAVE_DNNL
    if (b == GEMM_DNNL &&
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success)
        return;
#else
    (void)b;
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

/* The tile edge along the split dimension: at least 64 rows (sgemm keeps
 * its speed on panels that wide), at most 24 tiles so that 1-3 threads
 * share them evenly; a multiple of 16.  A function of the size only. */
static int tile_of(int dim)
{
    int t = (dim + 23) / 24;
    t = (t + 15) / 16 * 16;
    return t < 64 ? 64 : t;
}

static void tile_gemm(int b, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc, int split_rows, int t0, int t1)
{
    /* Row tile [t0, t1) of C needs rows t0.. of op(A); a column tile needs
     * columns t0.. of op(B).  Row-major: row r of A is A + r*lda, row r of
     * A^T is column r of A, i.e. A + r. */
    if (split_rows)
        gemm_on(b, ta, tb, t1 - t0, N, K, alpha, A + (ta ? (size_t)t0 : (size_t)t0 * lda), lda, B, ldb, beta,
                C + (size_t)t0 * ldc, ldc);
    else
        gemm_on(b, ta, tb, M, t1 - t0, K, alpha, A, lda, B + (tb ? (size_t)t0 * ldb : (size_t)t0), ldb, beta, C + t0,
                ldc);
}

void actc__sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    const int b = backend();
    if (!actc__set.deterministic) {
        gemm_on(b, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const int split_rows = M >= N, dim = split_rows ? M : N, tile = tile_of(dim), nt = (dim + tile - 1) / tile;
    if (omp_in_parallel()) { /* already one thread of a team: the backend runs single-threaded */
        for (int t = 0; t < nt; t++)
            tile_gemm(b, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, split_rows, t * tile,
                      t * tile + tile < dim ? t * tile + tile : dim);
        return;
    }
    /* An active region even for one tile, so that the backend does not
     * thread inside it (a region of one thread is inactive, but then the
     * backend has one thread too). */
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < nt; t++)
        tile_gemm(b, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, split_rows, t * tile,
                  t * tile + tile < dim ? t * tile + tile : dim);
}
