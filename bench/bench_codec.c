/* bench_codec: throughput of the stochastic quantizer codecs, DIVISION's
 * dual-precision codec and the block-wise codecs (4-bit NF4 / FP4, 8-bit
 * dynamic) on an activation-like tensor, against memcpy of the same bytes.
 *
 *   bench_codec [threads=2] [batch=256] [reps=20] [side=32]
 *
 * The tensor is [batch, 64, side, side] fp32 (64 MiB at batch 256, side 32):
 * ReLU of a normal with a per-channel shift, times a per-channel scale
 * spanning two decades, so groups differ in range the way conv activations
 * do.
 *
 * For every case it times plan+encode and decode separately and prints the
 * GB/s of fp32 input processed (4 bytes per element over the time) and the
 * ratio to memcpy, which copies the same 4n bytes with the same threads
 * (each thread one contiguous share).  All timings are the best of `reps`
 * rounds over every case and memcpy, after a warm-up round.  A JSON line
 * follows.  The machine is shared: when another process takes a core, a
 * two-thread region waits for its descheduled thread, so single runs scatter
 * by 2-3x; repeat runs and compare ratios. */
#include "actc.h"
#include "codec/codec.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define C_CH 64
static int g_side = 32; /* maps are g_side x g_side */
#define HW ((size_t)g_side * (size_t)g_side)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "bench_codec: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    memset(p, 0, bytes); /* fault the pages in before timing */
    return p;
}

static void fill_activations(float *x, int batch)
{
    float shift[C_CH], scale[C_CH];
    for (int c = 0; c < C_CH; c++) {
        shift[c] = 2.0f * actc_rand_uniform(11, (uint64_t)c) - 1.0f;
        scale[c] = powf(10.0f, 2.0f * actc_rand_uniform(12, (uint64_t)c) - 1.0f);
    }
    const size_t n = (size_t)batch * C_CH * HW;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const int c = (int)(i / HW % C_CH);
        const float v = actc_rand_normal(13, i) + shift[c];
        x[i] = v > 0.0f ? v * scale[c] : 0.0f;
    }
}

static double time_memcpy(float *dst, const float *src, size_t n)
{
    const double t0 = now();
#pragma omp parallel
    {
        const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
        memcpy(dst + lo, src + lo, (hi - lo) * sizeof *dst);
    }
    return now() - t0;
}

typedef struct {
    const char *name;
    const actc_codec *codec;
    int bits;
    int group;                      /* block4 / dyn8 block size (0: default) */
    int mixed;
    int iparam[4];                  /* division: B, mode, map rank, layout;
                                       block4: format, stochastic          */
    void *buf;                      /* payload                             */
    double bits_per_elem, enc, dec; /* results: payload size, best seconds */
} bench_case;

static void case_args(const bench_case *bc, const actc_codec_args *proto, actc_codec_args *a)
{
    *a = *proto;
    a->bits = bc->bits;
    a->group = bc->group;
    memcpy(a->iparam, bc->iparam, sizeof a->iparam);
    if (!bc->mixed) a->sample_bits = NULL;
}

/* One timed encode (plan included, as the store does it) and decode. */
static void time_case(bench_case *bc, const float *x, float *y, const actc_codec_args *proto, size_t n)
{
    actc_codec_args a;
    case_args(bc, proto, &a);
    const double t0 = now();
    bc->codec->plan(&a, n);
    bc->codec->encode(&a, x, n, bc->buf);
    const double t1 = now();
    bc->codec->decode(&a, bc->buf, n, y);
    const double t2 = now();
    if (t1 - t0 < bc->enc) bc->enc = t1 - t0;
    if (t2 - t1 < bc->dec) bc->dec = t2 - t1;
}

static const char *kernel_isa(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
#if __GNUC__ >= 12 && !defined(__clang__)
    if (__builtin_cpu_supports("x86-64-v4")) return "x86-64-v4";
#endif
    return __builtin_cpu_supports("avx2") ? "avx2" : "default";
#else
    return "default";
#endif
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const int batch = argc > 2 ? atoi(argv[2]) : 256;
    const int reps = argc > 3 ? atoi(argv[3]) : 20;
    if (argc > 4) g_side = atoi(argv[4]);
    if (threads < 1 || batch < 1 || reps < 1 || g_side < 1) {
        fprintf(stderr, "usage: bench_codec [threads=2] [batch=256] [reps=20] [side=32]\n");
        return 2;
    }
    omp_set_num_threads(threads);
    const size_t n = (size_t)batch * C_CH * HW;
    float *x = xmalloc(n * sizeof *x), *y = xmalloc(n * sizeof *y);
    fill_activations(x, batch);

    uint8_t *widths = xmalloc((size_t)batch);
    for (int s = 0; s < batch; s++) widths[s] = (uint8_t)(2 + s % 3); /* 2, 3, 4: ActNN-like */
    actc_codec_args proto;
    memset(&proto, 0, sizeof proto);
    proto.ndim = 4;
    proto.shape[0] = batch;
    proto.shape[1] = C_CH;
    proto.shape[2] = g_side;
    proto.shape[3] = g_side;
    proto.key = 42;
    proto.sample_bits = widths;

    bench_case cases[] = {
        {"quant b=1", &actc_codec_quant, 1, 0, 0, {0}, NULL, 0, 1e30, 1e30},
        {"quant b=2", &actc_codec_quant, 2, 0, 0, {0}, NULL, 0, 1e30, 1e30},
        {"quant b=3", &actc_codec_quant, 3, 0, 0, {0}, NULL, 0, 1e30, 1e30},
        {"quant b=4", &actc_codec_quant, 4, 0, 0, {0}, NULL, 0, 1e30, 1e30},
        {"quant b=8", &actc_codec_quant, 8, 0, 0, {0}, NULL, 0, 1e30, 1e30},
        {"quant mixed 2/3/4", &actc_codec_quant, 2, 0, 1, {0}, NULL, 0, 1e30, 1e30},
        {"quant_tensor b=2", &actc_codec_quant_tensor, 2, 0, 0, {0}, NULL, 0, 1e30, 1e30},
        /* DIVISION on the same maps: 2-D pooling (r = 2), B = 8, Q = 2. */
        {"division b=8 q=2", &actc_codec_division, 2, 0, 0, {8, ACTC_DIV_FULL, 2, 0}, NULL, 0, 1e30, 1e30},
        {"division lfc-only b=4", &actc_codec_division, 2, 0, 0, {4, ACTC_DIV_LFC_ONLY, 2, 0}, NULL, 0, 1e30, 1e30},
        {"division hfc-only", &actc_codec_division, 2, 0, 0, {8, ACTC_DIV_HFC_ONLY, 2, 0}, NULL, 0, 1e30, 1e30},
        /* Block-wise (AGoQ): 4-bit at bitsandbytes' default block 64 and the
         * paper's 128, nearest and stochastic; 8-bit dynamic at 256. */
        {"nf4 g=64", &actc_codec_block4, 4, 64, 0, {ACTC_B4_NF4, 0}, NULL, 0, 1e30, 1e30},
        {"fp4-bnb g=64", &actc_codec_block4, 4, 64, 0, {ACTC_B4_FP4_BNB, 0}, NULL, 0, 1e30, 1e30},
        {"fp4-e2m1 g=64", &actc_codec_block4, 4, 64, 0, {ACTC_B4_FP4_E2M1, 0}, NULL, 0, 1e30, 1e30},
        {"nf4 g=128", &actc_codec_block4, 4, 128, 0, {ACTC_B4_NF4, 0}, NULL, 0, 1e30, 1e30},
        {"nf4 g=64 stochastic", &actc_codec_block4, 4, 64, 0, {ACTC_B4_NF4, 1}, NULL, 0, 1e30, 1e30},
        {"fp4-bnb g=64 stoch.", &actc_codec_block4, 4, 64, 0, {ACTC_B4_FP4_BNB, 1}, NULL, 0, 1e30, 1e30},
        {"dyn8 g=256", &actc_codec_dyn8, 8, 256, 0, {0}, NULL, 0, 1e30, 1e30},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncases; i++) {
        actc_codec_args a;
        case_args(&cases[i], &proto, &a);
        const size_t bytes = cases[i].codec->plan(&a, n);
        cases[i].buf = xmalloc(bytes);
        cases[i].bits_per_elem = 8.0 * (double)bytes / (double)n;
    }
    /* Rounds over all cases, memcpy included, best of each: the machine is
     * shared, and interleaving exposes every case to the same quiet spells.
     * Round 0 warms up (page faults, the CPU dispatch, thread start). */
    double tcopy = 1e30;
    for (int r = 0; r <= reps; r++) {
        const double t = time_memcpy(y, x, n);
        if (r > 0 && t < tcopy) tcopy = t;
        for (int i = 0; i < ncases; i++) {
            if (r == 0) {
                bench_case warm = cases[i];
                time_case(&warm, x, y, &proto, n);
            } else {
                time_case(&cases[i], x, y, &proto, n);
            }
        }
    }
    const double gb = 4.0 * (double)n / 1e9;
    const double copy_gbs = gb / tcopy;
    printf("bench_codec: [%d, %d, %d, %d] fp32 = %.1f MiB, %d threads, best of %d, kernels %s\n", batch, C_CH,
           g_side, g_side,
           4.0 * (double)n / 1048576.0, threads, reps, kernel_isa());
    printf("%-22s %8.2f GB/s\n", "memcpy", copy_gbs);
    for (int i = 0; i < ncases; i++) {
        const bench_case *c = &cases[i];
        printf("%-22s %5.2f bits/elem  encode %6.2f GB/s (%4.2fx memcpy)  decode %6.2f GB/s (%4.2fx memcpy)\n",
               c->name, c->bits_per_elem, gb / c->enc, gb / c->enc / copy_gbs, gb / c->dec,
               gb / c->dec / copy_gbs);
    }

    printf("{\"bench\":\"codec\",\"threads\":%d,\"elements\":%zu,\"isa\":\"%s\",\"memcpy_gbs\":%.3f,\"cases\":[",
           threads, n, kernel_isa(), copy_gbs);
    for (int i = 0; i < ncases; i++) {
        const bench_case *c = &cases[i];
        printf("%s{\"name\":\"%s\",\"bits_per_elem\":%.3f,\"encode_gbs\":%.3f,\"encode_ratio\":%.3f,"
               "\"decode_gbs\":%.3f,\"decode_ratio\":%.3f}",
               i ? "," : "", c->name, c->bits_per_elem, gb / c->enc, gb / c->enc / copy_gbs, gb / c->dec,
               gb / c->dec / copy_gbs);
    }
    printf("]}\n");
    for (int i = 0; i < ncases; i++) free(cases[i].buf);
    free(x);
    free(y);
    free(widths);
    return 0;
}
