/* The gradient all-reduce alone (AGoQ's Table 4 shape), under mpirun:
 *
 *   mpirun -np 2 build/bench_allreduce [MiB ...]      (default 1 32 256)
 *
 * For each size, the fp32 all-reduce (MPI_Iallreduce + MPI_Wait, what
 * training issues) and the 8-bit one (all-to-all of codes and absmaxes,
 * fp32 sum, all-gather) on the same random gradients, rounds interleaved,
 * best round: milliseconds, bus bandwidth, bytes each rank hands MPI, the
 * ratio 8-bit / fp32, and the 8-bit result's largest error relative to the
 * largest |sum|.  The times include encoding and decoding. */
#include "actc.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds of one all-reduce of x (n floats), the slowest rank's. */
static double timed(actc_dist *d, float *x, size_t n, int bits, int P)
{
    float sync = 0;
    actc_dist_allreduce(d, &sync, 1, 32); /* start together */
    const double t0 = now();
    if (actc_dist_allreduce(d, x, n, bits) != ACTC_OK) {
        fprintf(stderr, "all-reduce: %s\n", actc_last_error());
        exit(1);
    }
    /* The slowest rank: the largest time as a sum of one-hot vectors. */
    float *t = calloc((size_t)P, sizeof *t);
    int rank = 0;
    actc_dist_stats st;
    actc_dist_get_stats(d, &st);
    rank = st.rank;
    t[rank] = (float)(now() - t0);
    actc_dist_allreduce(d, t, (size_t)P, 32);
    double worst = 0;
    for (int r = 0; r < P; r++) worst = fmax(worst, t[r]);
    free(t);
    return worst;
}

int main(int argc, char **argv)
{
    actc_dist *d = NULL;
    if (actc_dist_new(NULL, &d) != ACTC_OK) {
        fprintf(stderr, "bench_allreduce: %s\n", actc_last_error());
        return 1;
    }
    const int P = actc_dist_size(d), me = actc_dist_rank(d);
    static const int defaults[] = {1, 32, 256};
    const int nsizes = argc > 1 ? argc - 1 : 3;
    if (me == 0)
        printf("%d ranks; best of the rounds; bus bandwidth = 2 (P-1)/P x fp32 bytes / time\n"
               "%8s %6s %10s %10s %14s %8s %10s\n", P, "MiB", "bits", "ms", "bus GB/s", "sent/rank", "vs fp32",
               "max err");
    for (int k = 0; k < nsizes; k++) {
        const int mib = argc > 1 ? atoi(argv[k + 1]) : defaults[k];
        const size_t n = (size_t)mib << 18; /* floats */
        float *g = malloc(n * sizeof *g), *x = malloc(n * sizeof *x), *ref = malloc(n * sizeof *ref);
        if (!g || !x || !ref) return fprintf(stderr, "out of memory\n"), 1;
        /* gradient-like: per block of 256 a scale over 6 decades */
        for (size_t i = 0; i < n; i++)
            g[i] = (float)(pow(10.0, -6.0 * actc_rand_uniform(7, i / 256)) *
                           (2.0 * actc_rand_uniform(actc_rng_key(9, (uint64_t)me, 0), i) - 1.0));
        const int rounds = mib <= 1 ? 20 : mib <= 32 ? 5 : 2;
        double best[2] = {1e30, 1e30};
        size_t sent[2] = {0, 0};
        for (int r = 0; r < rounds; r++)
            for (int b = 0; b < 2; b++) {
                for (size_t i = 0; i < n; i++) x[i] = g[i];
                best[b] = fmin(best[b], timed(d, x, n, b ? 8 : 32, P));
                if (b == 0) for (size_t i = 0; i < n; i++) ref[i] = x[i];
            }
        double err = 0, amax = 0;
        for (size_t i = 0; i < n; i++) {
            err = fmax(err, fabs((double)x[i] - ref[i]));
            amax = fmax(amax, fabs((double)ref[i]));
        }
        /* bytes: fp32 ring 2 (P-1)/P x 4n; 8 bits: (P-1)/P x (n + 4n/256) each way */
        sent[0] = 2 * (size_t)(P - 1) * n * 4 / (size_t)P;
        sent[1] = 2 * (size_t)(P - 1) * (n + n / 64) / (size_t)P;
        if (me == 0)
            for (int b = 0; b < 2; b++)
                printf("%8d %6d %10.2f %10.2f %11.1f MiB %8.2f %10.2g\n", mib, b ? 8 : 32, 1e3 * best[b],
                       (double)sent[0] / best[b] / 1e9, (double)sent[b] / 1048576.0, best[b] / best[0],
                       b ? err / amax : 0.0);
        free(g);
        free(x);
        free(ref);
    }
    actc_dist_free(d);
    return 0;
}
