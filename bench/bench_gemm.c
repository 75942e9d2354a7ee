/* The dense products of one training step on each backend (actc__sgemm with
 * actc_set_gemm_backend "openblas" and "dnnl"): per product shape its GFLOP/s
 * and its milliseconds per step (calls per step x time per call), and the
 * step's total per backend.
 *
 * usage: bench_gemm [THREADS] [REPS] [SHAPE...]
 *   SHAPE = TATB:MxNxK:CALLS[:par], e.g. TN:1024x256x4096:6 (par: CALLS
 *   products spread over the threads, each on one thread, as the
 *   memory-efficient attention calls them).  Default: the products of a
 *   gpt-mini step at batch 16, context 256 (6 blocks of width 256, MLP
 *   1024, 8 heads, attention blocks of 64 rows), as the step issues them.
 * The operands of successive calls rotate through at most 64 slots of a
 * pool of 128 MiB or more, so a large product reads its operands from
 * memory as in a training step (a product timed on the same hot buffers
 * flatters some kernels: oneDNN's transposed products with leading
 * dimensions of 512 or 1024 floats ran 2x faster hot than cold here); the
 * attention's small blocks (64 slots of 16 KiB) stay in cache, as they
 * largely do in the attention's loops.  OPENBLAS_CORETYPE=Prescott in the
 * environment shows what OpenBLAS gives a CPU it does not know. */
#include "actc.h"
#include "core/core.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int ta, tb, M, N, K, calls, par;
} shape;

/* One gpt-mini step (batch 16 x 256 tokens = 4096 rows): Q, K, V, output
 * projection and head (4096 x 256 x 256, 25 of each pass), the MLP (x 6),
 * the attention's 64-row blocks (Dh 32). */
static const shape gpt_mini[] = {
    {0, 1, 4096, 256, 256, 25, 0},  {0, 1, 4096, 1024, 256, 6, 0}, {0, 1, 4096, 256, 1024, 6, 0},
    {0, 0, 4096, 256, 256, 25, 0},  {0, 0, 4096, 1024, 256, 6, 0}, {0, 0, 4096, 256, 1024, 6, 0},
    {1, 0, 256, 256, 4096, 25, 0},  {1, 0, 1024, 256, 4096, 6, 0}, {1, 0, 256, 1024, 4096, 6, 0},
    {0, 1, 64, 64, 32, 23040, 1},   {0, 0, 64, 32, 64, 15360, 1},  {1, 0, 64, 32, 64, 15360, 1},
};

static int parse(const char *s, shape *o)
{
    char t[3];
    memset(o, 0, sizeof *o);
    int n = sscanf(s, "%2[NT]:%dx%dx%d:%d", t, &o->M, &o->N, &o->K, &o->calls);
    if (n != 5 || strlen(t) != 2 || o->M < 1 || o->N < 1 || o->K < 1 || o->calls < 1) return 0;
    o->ta = t[0] == 'T';
    o->tb = t[1] == 'T';
    o->par = strstr(s, ":par") != NULL;
    return 1;
}

/* Seconds per step of shape s on the current backend: the best of reps. */
static double time_shape(const shape *s, int reps, float *pool, size_t pool_n, float *C)
{
    const size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N;
    const int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    const size_t span = na + nb, slots = pool_n / span > 64 ? 64 : pool_n / span;
    double best = 1e30;
    size_t next = 0;
    for (int r = 0; r < reps; r++) {
        const double t0 = actc__now();
        if (s->par) {
#pragma omp parallel for schedule(static)
            for (int c = 0; c < s->calls; c++) {
                const float *a = pool + (size_t)(c % (int)slots) * span;
                actc__sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, a, lda, a + na, ldb, 0.0f,
                            C + (size_t)omp_get_thread_num() * s->M * s->N, s->N);
            }
        } else {
            for (int c = 0; c < s->calls; c++) {
                const float *a = pool + (next++ % slots) * span;
                actc__sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, a, lda, a + na, ldb, 0.0f, C, s->N);
            }
        }
        const double t = actc__now() - t0;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 3;
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_gemm [THREADS] [REPS] [TATB:MxNxK:CALLS[:par]...]\n");
        return 2;
    }
    actc_set_threads(threads);
    shape user[32];
    int ns = 0;
    if (argc - 3 > 32) {
        fprintf(stderr, "bench_gemm: at most 32 shapes\n");
        return 2;
    }
    for (int i = 3; i < argc; i++)
        if (!parse(argv[i], &user[ns++])) {
            fprintf(stderr, "bench_gemm: bad shape '%s' (e.g. TN:1024x256x4096:6 or NT:64x64x32:23040:par)\n", argv[i]);
            return 2;
        }
    const shape *shapes = ns ? user : gpt_mini;
    if (!ns) ns = (int)(sizeof gpt_mini / sizeof *gpt_mini);
    size_t span_max = 0, c_max = 0;
    for (int i = 0; i < ns; i++) {
        const size_t span = (size_t)shapes[i].M * shapes[i].K + (size_t)shapes[i].K * shapes[i].N;
        if (span > span_max) span_max = span;
        const size_t c = (size_t)shapes[i].M * shapes[i].N * (shapes[i].par ? (size_t)threads : 1);
        if (c > c_max) c_max = c;
    }
    /* 128 MiB of operands at least: past any last-level cache here. */
    const size_t pool_n = span_max * 4 > ((size_t)32 << 20) ? span_max * 4 : (size_t)32 << 20;
    float *pool = malloc(pool_n * sizeof *pool), *C = malloc(c_max * sizeof *C);
    if (!pool || !C) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < pool_n; i++) pool[i] = actc_rand_uniform(7, i) - 0.5f;
    actc_cpu_info cpu;
    actc_get_cpu_info(&cpu);
    const char *backends[2] = {"openblas", "dnnl"};
    const int nb = actc_set_gemm_backend("dnnl") == ACTC_OK ? 2 : 1;
    printf("cpu %s (%s), OpenBLAS %s kernels (%s), %d thread(s); ms per step = calls x time per call\n", cpu.brand,
           actc_isa_name(cpu.isa_level), cpu.openblas_core, actc_isa_name(cpu.openblas_level), threads);
    printf("%-2s %16s %6s |", "op", "MxNxK", "calls");
    for (int b = 0; b < nb; b++) printf(" %8s GFLOP/s ms/step |", backends[b]);
    printf("\n");
    double total[2] = {0, 0};
    for (int i = 0; i < ns; i++) {
        const shape *s = &shapes[i];
        char dims[32];
        snprintf(dims, sizeof dims, "%dx%dx%d", s->M, s->N, s->K);
        printf("%c%c %16s %6d |", s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', dims, s->calls);
        for (int b = 0; b < nb; b++) {
            actc_set_gemm_backend(backends[b]);
            const double t = time_shape(s, reps, pool, pool_n, C);
            total[b] += t;
            printf(" %16.1f %7.1f |", 2.0 * s->M * s->N * s->K * s->calls / t * 1e-9, 1e3 * t);
        }
        printf("\n");
    }
    printf("step total: openblas %.1f ms", 1e3 * total[0]);
    if (nb == 2) printf(", dnnl %.1f ms (dnnl / openblas %.2f)", 1e3 * total[1], total[1] / total[0]);
    printf("\n{\"bench\":\"gemm\",\"threads\":%d,\"openblas_core\":\"%s\",\"isa\":\"%s\",\"openblas_ms\":%.2f,"
           "\"dnnl_ms\":%.2f}\n",
           threads, cpu.openblas_core, actc_isa_name(cpu.isa_level), 1e3 * total[0], nb == 2 ? 1e3 * total[1] : 0.0);
    actc_set_gemm_backend("auto");
    free(pool);
    free(C);
    actc_shutdown();
    return 0;
}
