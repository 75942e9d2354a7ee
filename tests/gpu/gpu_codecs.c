/* gpu_codecs: the CUDA codecs on a GPU (run by tests/gpu/run.sh; a ctest
 * test that skips, exit 77, where there is no GPU).
 *
 *   1. byte identity: every case of tests/codec_cases.h on every input kind,
 *      encoded on the GPU from float32, bfloat16 and float16 (the widened
 *      values on the CPU), equals actc_codec_encode's payload; the GPU's
 *      decode equals actc_codec_decode's values (float32) and their
 *      round-to-nearest-even (bfloat16, float16);
 *   2. unbiasedness at 2 bits: the mean of K decodes (K keys) approaches x
 *      as 1/sqrt(K);
 *   3. throughput of every encode and decode kernel on 64 MiB and 256 MiB of
 *      float32 against a device-to-device copy of the input (both counting
 *      bytes read and written; at least 40% asked);
 *   4. bad input: a host pointer, a misaligned, short or overlapping payload, a stream of
 *      another device: refused with nothing written;
 *   5. ActNN's per-sample ranges (actc_cuda_range_sq) bit for bit the
 *      planner's from the same values on the host;
 *   6. a CUDA graph: per-sample-width encodes and the ranges captured on a
 *      stream and replayed give the CPU's bytes.
 * Prints one line per check and a summary; exit 0 when every check holds. */
#include "actc.h"
#include "codec/codec.h"
#include "codec_cases.h"
#include "core/hostdev.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failed;

#define CUDA_OK(call)                                                                                  \
    do {                                                                                               \
        cudaError_t e_ = (call);                                                                       \
        if (e_ != cudaSuccess) {                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));     \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)
#define ACTC_OK(call)                                                                                  \
    do {                                                                                               \
        actc_status s_ = (call);                                                                       \
        if (s_ != ACTC_OK) {                                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, actc_last_error());         \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static void check(int ok, const char *fmt, const char *what)
{
    if (!ok) {
        g_failed++;
        printf("FAIL ");
        printf(fmt, what);
        printf("\n");
    }
}

/* The setup's copies and memsets run on the legacy stream, which the
 * tests' non-blocking stream does not wait for (and a pageable copy may
 * return before its data lands): wait for them before queuing work. */
static void settle(void) { CUDA_OK(cudaDeviceSynchronize()); }

static uint16_t to_half(float f) { return actc__f32_to_f16(f); }
static float from_half(uint16_t u) { return actc__f16_to_f32(u); }

/* x narrowed to dtype dt and widened back (the values a bf16/fp16 tensor
 * holds), and its bytes in that dtype. */
static void narrow(const float *x, size_t n, actc_dtype dt, float *wide, uint16_t *bits)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == ACTC_FLOAT32) {
            wide[i] = x[i];
            continue;
        }
        bits[i] = dt == ACTC_BFLOAT16 ? actc__f32_to_bf16(x[i]) : to_half(x[i]);
        wide[i] = dt == ACTC_BFLOAT16 ? actc__bf16_to_f32(bits[i]) : from_half(bits[i]);
    }
}

static float rounded(float v, actc_dtype dt)
{
    return dt == ACTC_FLOAT32 ? v : dt == ACTC_BFLOAT16 ? actc__bf16_to_f32(actc__f32_to_bf16(v)) : from_half(to_half(v));
}

/* ---- 1. byte identity ----------------------------------------------------- */

static void identity(cudaStream_t stream)
{
    const actc_dtype dts[3] = {ACTC_FLOAT32, ACTC_BFLOAT16, ACTC_FLOAT16};
    const char *dtn[3] = {"float32", "bfloat16", "float16"};
    int cases = 0, bad = 0;
    uint8_t widths[16];
    for (int s = 0; s < 16; s++) widths[s] = (uint8_t)(1 + (s * 3) % 8);
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        const uint8_t *sbits = CASES[c].mixed ? widths : NULL;
        actc_codec_plan p;
        ACTC_OK(actc_codec_plan_make(CASES[c].spec, CASES[c].ndim, CASES[c].shape, 1000 + c, sbits, &p));
        const size_t n = p.numel;
        for (int kind = 0; kind < N_INPUTS; kind++)
            for (int d = 0; d < 3; d++) {
                float *x = make_input(n, kind), *wide = malloc(n * 4), *ycpu = malloc(n * 4), *ygpu = malloc(n * 4);
                uint16_t *bits = malloc(n * 2);
                uint8_t *cpu = malloc(p.bytes + 1), *back = malloc(p.bytes + 1);
                narrow(x, n, dts[d], wide, bits);
                ACTC_OK(actc_codec_encode(&p, wide, sbits, cpu, p.bytes));
                ACTC_OK(actc_codec_decode(&p, cpu, p.bytes, ycpu));
                void *dx, *dp, *dy;
                const size_t esz = dts[d] == ACTC_FLOAT32 ? 4 : 2;
                CUDA_OK(cudaMalloc(&dx, n * esz));
                CUDA_OK(cudaMalloc(&dp, p.bytes + 16));
                CUDA_OK(cudaMalloc(&dy, n * esz));
                CUDA_OK(cudaMemcpy(dx, dts[d] == ACTC_FLOAT32 ? (void *)wide : (void *)bits, n * esz,
                                   cudaMemcpyHostToDevice));
                CUDA_OK(cudaMemset(dp, 0xA5, p.bytes + 16));
                settle();
                ACTC_OK(actc_cuda_encode(&p, dx, dts[d], sbits, dp, p.bytes, stream));
                ACTC_OK(actc_cuda_decode(&p, dp, p.bytes, dy, dts[d], stream));
                CUDA_OK(cudaStreamSynchronize(stream));
                CUDA_OK(cudaMemcpy(back, dp, p.bytes, cudaMemcpyDeviceToHost));
                int ok = memcmp(cpu, back, p.bytes) == 0;
                if (!ok) {
                    size_t i = 0;
                    while (cpu[i] == back[i]) i++;
                    printf("FAIL %s, %s input in %s: payload byte %zu of %zu: CPU %#x, GPU %#x\n", p.codec,
                           INPUT_NAMES[kind], dtn[d], i, p.bytes, cpu[i], back[i]);
                }
                /* The decode: the CPU's values, rounded to the dtype. */
                CUDA_OK(cudaMemcpy(dts[d] == ACTC_FLOAT32 ? (void *)ygpu : (void *)bits, dy, n * esz,
                                   cudaMemcpyDeviceToHost));
                for (size_t i = 0; ok && i < n; i++) {
                    const float g = dts[d] == ACTC_FLOAT32  ? ygpu[i]
                                    : dts[d] == ACTC_BFLOAT16 ? actc__bf16_to_f32(bits[i])
                                                              : from_half(bits[i]);
                    const float want = rounded(ycpu[i], dts[d]);
                    if (memcmp(&g, &want, 4) != 0 && !(isnan(g) && isnan(want))) {
                        printf("FAIL %s, %s input in %s: decoded element %zu is %a on the GPU, %a on the CPU\n",
                               p.codec, INPUT_NAMES[kind], dtn[d], i, (double)g, (double)want);
                        ok = 0;
                    }
                }
                bad += !ok;
                cases++;
                cudaFree(dx), cudaFree(dp), cudaFree(dy);
                free(x), free(wide), free(ycpu), free(ygpu), free(bits), free(cpu), free(back);
            }
    }
    g_failed += bad;
    printf("%s byte identity: %d of %d (codec, input, dtype) cases identical to the CPU, payload and decode\n",
           bad ? "FAIL" : "ok  ", cases - bad, cases);
}

/* ---- 2. unbiasedness -------------------------------------------------------- */

static void unbiased(cudaStream_t stream, int small)
{
    /* On the emulator (small): 8 rows and K = 4, 64, the same 4x expected. */
    const int shape[2] = {small ? 8 : 64, 4096};
    const size_t n = (size_t)shape[0] * 4096;
    float *x = make_input(n, IN_RANDOM), *y = malloc(n * 4);
    double *sum = calloc(n, sizeof *sum);
    void *dx, *dp, *dy;
    CUDA_OK(cudaMalloc(&dx, n * 4));
    CUDA_OK(cudaMalloc(&dy, n * 4));
    CUDA_OK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
    settle();
    double err[2] = {0, 0};
    const int Ks[2] = {small ? 4 : 16, small ? 64 : 256};
    int k = 0;
    for (int r = 0; r < 2; r++) {
        for (; k < Ks[r]; k++) {
            actc_codec_plan p;
            ACTC_OK(actc_codec_plan_make("quant:2", 2, shape, 5000 + (uint64_t)k, NULL, &p));
            if (k == 0) CUDA_OK(cudaMalloc(&dp, p.bytes));
            ACTC_OK(actc_cuda_encode(&p, dx, ACTC_FLOAT32, NULL, dp, p.bytes, stream));
            ACTC_OK(actc_cuda_decode(&p, dp, p.bytes, dy, ACTC_FLOAT32, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            CUDA_OK(cudaMemcpy(y, dy, n * 4, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < n; i++) sum[i] += y[i];
        }
        for (size_t i = 0; i < n; i++) err[r] += fabs(sum[i] / Ks[r] - x[i]);
        err[r] /= (double)n;
    }
    /* Unbiased: the error of the mean falls as 1/sqrt(K), 4x from K to 16 K
     * (a bias would stop it at the bias). */
    const double ratio = err[0] / err[1];
    check(ratio > 3.0 && ratio < 5.5, "unbiasedness: %s", "the mean's error does not fall as 1/sqrt(K)");
    printf("%s unbiased at 2 bits: mean |mean of K decodes - x| %.3g at K=%d, %.3g at K=%d (ratio %.2f, 4 "
           "expected)\n",
           ratio > 3.0 && ratio < 5.5 ? "ok  " : "FAIL", err[0], Ks[0], err[1], Ks[1], ratio);
    cudaFree(dx), cudaFree(dp), cudaFree(dy);
    free(x), free(y), free(sum);
}

/* ---- 3. throughput ------------------------------------------------------------- */

static float time_ms(cudaStream_t stream, int reps, const actc_codec_plan *p, const void *in, void *out,
                     int what /* 0 copy, 1 encode, 2 decode, 3 ranges */, size_t copy_bytes)
{
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    float best = 1e30f;
    for (int r = 0; r < reps + 1; r++) {
        CUDA_OK(cudaEventRecord(a, stream));
        if (what == 0)
            CUDA_OK(cudaMemcpyAsync(out, in, copy_bytes, cudaMemcpyDeviceToDevice, stream));
        else if (what == 1)
            ACTC_OK(actc_cuda_encode(p, in, ACTC_FLOAT32, NULL, out, p->bytes, stream));
        else if (what == 2)
            ACTC_OK(actc_cuda_decode(p, in, p->bytes, out, ACTC_FLOAT32, stream));
        else /* ActNN's ranges, p's shape as [shape[0], rest] */
            ACTC_OK(actc_cuda_range_sq(in, ACTC_FLOAT32, p->shape[0], p->numel / (size_t)p->shape[0], out,
                                       copy_bytes / sizeof(double), stream));
        CUDA_OK(cudaEventRecord(b, stream));
        CUDA_OK(cudaEventSynchronize(b));
        float ms;
        CUDA_OK(cudaEventElapsedTime(&ms, a, b));
        if (r > 0 && ms < best) best = ms; /* the first is the warm-up */
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    return best;
}

static void throughput(cudaStream_t stream)
{
    const char *specs[] = {"quant:1", "quant:2", "quant:4", "quant:8", "nf4", "fp4", "e2m1",
                           "nf4,round=stochastic", "dyn8", "division", "mask", "bf16", "fp32"};
    const size_t mib[2] = {64, 256};
    for (int s = 0; s < 2; s++) {
        const size_t n = mib[s] << 18; /* floats */
        const int shape[4] = {64, 64, (int)(n / 64 / 64 / 64), 64};
        void *dx, *dp, *dy;
        CUDA_OK(cudaMalloc(&dx, n * 4));
        CUDA_OK(cudaMalloc(&dy, n * 4));
        CUDA_OK(cudaMalloc(&dp, n * 4 + 16));
        float *h = make_input(1 << 20, IN_RANDOM);
        for (size_t off = 0; off < n; off += 1 << 20) CUDA_OK(cudaMemcpy((float *)dx + off, h, 4 << 20, cudaMemcpyHostToDevice));
        free(h);
        settle();
        const float copy = time_ms(stream, 10, NULL, dx, dy, 0, n * 4);
        const double copy_bw = 2.0 * n * 4 / (copy * 1e-3) / 1e9;
        printf("     %zu MiB: device-to-device copy %.0f GB/s (read + write)\n", mib[s], copy_bw);
        for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
            actc_codec_plan p;
            ACTC_OK(actc_codec_plan_make(specs[k], 4, shape, 7, NULL, &p));
            const float te = time_ms(stream, 10, &p, dx, dp, 1, 0);
            const float td = time_ms(stream, 10, &p, dp, dy, 2, 0);
            const double be = (n * 4.0 + p.bytes) / (te * 1e-3) / 1e9, bd = (n * 4.0 + p.bytes) / (td * 1e-3) / 1e9;
            const int ok = be >= 0.4 * copy_bw && bd >= 0.4 * copy_bw;
            g_failed += !ok;
            printf("%s %zu MiB %-22s encode %6.0f GB/s (%.2fx copy)  decode %6.0f GB/s (%.2fx copy)\n",
                   ok ? "ok  " : "FAIL", mib[s], specs[k], be, be / copy_bw, bd, bd / copy_bw);
        }
        /* The ranges the actnn hooks compute before planning (one read). */
        actc_codec_plan p;
        ACTC_OK(actc_codec_plan_make("quant:2", 4, shape, 7, NULL, &p));
        const float tr = time_ms(stream, 10, &p, dx, dp, 3, n * 4);
        const double br = n * 4.0 / (tr * 1e-3) / 1e9;
        printf("     %zu MiB %-22s %6.0f GB/s read (%.2fx copy; reported, not checked)\n", mib[s], "ranges (actnn)", br,
               br / copy_bw);
        cudaFree(dx), cudaFree(dp), cudaFree(dy);
    }
}

/* ---- 4. bad input ------------------------------------------------------------------ */

static void bad_input(cudaStream_t stream)
{
    const int shape[2] = {4, 256};
    actc_codec_plan p;
    ACTC_OK(actc_codec_plan_make("quant:2", 2, shape, 1, NULL, &p));
    float host[1024] = {0};
    void *dx, *dp;
    CUDA_OK(cudaMalloc(&dx, sizeof host));
    CUDA_OK(cudaMalloc(&dp, p.bytes + 64));
    CUDA_OK(cudaMemset(dp, 0xA5, p.bytes + 64));
    struct {
        const char *what, *needle;
        actc_status st;
    } r[5];
    r[0].what = "host tensor", r[0].needle = "not device memory";
    r[0].st = actc_cuda_encode(&p, host, ACTC_FLOAT32, NULL, dp, p.bytes, stream);
    r[1].what = "misaligned payload", r[1].needle = "misaligned";
    r[1].st = actc_cuda_encode(&p, dx, ACTC_FLOAT32, NULL, (uint8_t *)dp + 1, p.bytes, stream);
    r[2].what = "short payload", r[2].needle = "the plan needs";
    r[2].st = actc_cuda_encode(&p, dx, ACTC_FLOAT32, NULL, dp, p.bytes - 1, stream);
    r[3].what = "host payload", r[3].needle = "not device memory";
    r[3].st = actc_cuda_encode(&p, dx, ACTC_FLOAT32, NULL, host, sizeof host, stream);
    r[4].what = "payload overlapping the tensor", r[4].needle = "overlap";
    r[4].st = actc_cuda_encode(&p, dx, ACTC_FLOAT32, NULL, dx, p.bytes, stream);
    double *dr;
    CUDA_OK(cudaMalloc((void **)&dr, 64 * sizeof *dr));
    const actc_status rs = actc_cuda_range_sq(host, ACTC_FLOAT32, 4, 256, dr, 64, stream);
    g_failed += rs != ACTC_ERR_INVALID;
    printf("%s bad input: ranges of a host tensor refused\n", rs == ACTC_ERR_INVALID ? "ok  " : "FAIL");
    cudaFree(dr);
    for (int i = 0; i < 5; i++) {
        const int ok = r[i].st == ACTC_ERR_INVALID;
        g_failed += !ok;
        printf("%s bad input: %s refused (%s)\n", ok ? "ok  " : "FAIL", r[i].what,
               ok ? r[i].needle : actc_status_name(r[i].st));
    }
    int ndev = 0;
    CUDA_OK(cudaGetDeviceCount(&ndev));
    if (ndev > 1) {
        cudaStream_t other;
        CUDA_OK(cudaSetDevice(1));
        CUDA_OK(cudaStreamCreate(&other));
        CUDA_OK(cudaSetDevice(0));
        const actc_status st = actc_cuda_encode(&p, dx, ACTC_FLOAT32, NULL, dp, p.bytes, other);
        CUDA_OK(cudaStreamDestroy(other));
        g_failed += st != ACTC_ERR_INVALID;
        printf("%s bad input: a stream of device 1 for device 0's memory refused\n", st == ACTC_ERR_INVALID ? "ok  " : "FAIL");
    } else {
        printf("     bad input: a stream of another device: not checked (one device)\n");
    }
    uint8_t back[64];
    CUDA_OK(cudaMemcpy(back, dp, sizeof back, cudaMemcpyDeviceToHost));
    int untouched = 1;
    for (size_t i = 0; i < sizeof back; i++) untouched &= back[i] == 0xA5;
    g_failed += !untouched;
    printf("%s bad input: nothing written\n", untouched ? "ok  " : "FAIL");
    cudaFree(dx), cudaFree(dp);
}

/* ---- 5. ActNN's per-sample ranges -------------------------------------------- */

static void ranges(cudaStream_t stream)
{
    const actc_dtype dts[3] = {ACTC_FLOAT32, ACTC_BFLOAT16, ACTC_FLOAT16};
    const struct { int N; size_t D; } shapes[] = {{1, 5}, {3, 700}, {8, 256 * 40 + 17}, {16, 256}, {64, 4096}};
    int cases = 0, bad = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int N = shapes[k].N;
        const size_t D = shapes[k].D, n = (size_t)N * D, len = actc_cuda_range_sq_len(N, D);
        for (int kind = 0; kind < N_INPUTS; kind++)
            for (int d = 0; d < 3; d++) {
                float *x = make_input(n, kind), *wide = malloc(n * 4);
                uint16_t *bits = malloc(n * 2);
                double *cpu = malloc(N * sizeof *cpu), *gpu = malloc(N * sizeof *gpu);
                narrow(x, n, dts[d], wide, bits);
                actc_quant_range_sq(wide, N, D, 0, cpu);
                const size_t esz = dts[d] == ACTC_FLOAT32 ? 4 : 2;
                void *dx, *dout;
                CUDA_OK(cudaMalloc(&dx, n * esz));
                CUDA_OK(cudaMalloc(&dout, len * sizeof(double)));
                CUDA_OK(cudaMemcpy(dx, dts[d] == ACTC_FLOAT32 ? (void *)wide : (void *)bits, n * esz,
                                   cudaMemcpyHostToDevice));
                settle();
                ACTC_OK(actc_cuda_range_sq(dx, dts[d], N, D, dout, len, stream));
                CUDA_OK(cudaStreamSynchronize(stream));
                CUDA_OK(cudaMemcpy(gpu, dout, N * sizeof *gpu, cudaMemcpyDeviceToHost));
                if (memcmp(cpu, gpu, N * sizeof *cpu) != 0) {
                    int s = 0;
                    while (memcmp(&cpu[s], &gpu[s], sizeof *cpu) == 0) s++;
                    printf("FAIL ranges of %d x %zu, %s input, dtype %d: sample %d %a on the CPU, %a on the GPU\n",
                           N, D, INPUT_NAMES[kind], (int)dts[d], s, cpu[s], gpu[s]);
                    bad++;
                }
                cases++;
                cudaFree(dx), cudaFree(dout);
                free(x), free(wide), free(bits), free(cpu), free(gpu);
            }
    }
    /* A group of one infinity among NaNs: range 0 on both sides (inf - inf
     * would be a NaN whose bits differ between CPUs and GPUs). */
    float odd[600];
    for (int i = 0; i < 600; i++) odd[i] = i < 256 ? (i == 7 ? INFINITY : NAN) : (float)(i % 13);
    double want[2], got[2];
    actc_quant_range_sq(odd, 2, 300, 0, want);
    const size_t len = actc_cuda_range_sq_len(2, 300);
    void *dx, *dout;
    CUDA_OK(cudaMalloc(&dx, sizeof odd));
    CUDA_OK(cudaMalloc(&dout, len * sizeof(double)));
    CUDA_OK(cudaMemcpy(dx, odd, sizeof odd, cudaMemcpyHostToDevice));
    settle();
    ACTC_OK(actc_cuda_range_sq(dx, ACTC_FLOAT32, 2, 300, dout, len, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    if (memcmp(want, got, sizeof got) != 0) {
        printf("FAIL ranges of a group of one infinity among NaNs: %a, %a on the CPU, %a, %a on the GPU\n", want[0],
               want[1], got[0], got[1]);
        bad++;
    }
    cases++;
    cudaFree(dx), cudaFree(dout);
    g_failed += bad;
    printf("%s ranges: %d of %d (shape, input, dtype) cases bit for bit the planner's\n", bad ? "FAIL" : "ok  ",
           cases - bad, cases);
}

/* ---- 6. CUDA graphs ------------------------------------------------------------------ */

static void graph(cudaStream_t stream)
{
    const int shape[2] = {6, 1000};
    const size_t n = 6000;
    uint8_t widths[6] = {1, 8, 2, 3, 4, 2};
    actc_codec_plan p;
    ACTC_OK(actc_codec_plan_make("quant:2", 2, shape, 99, widths, &p));
    float *x = make_input(n, IN_RANDOM);
    uint8_t *cpu = malloc(p.bytes), *back = malloc(p.bytes);
    double want[6], got[6];
    ACTC_OK(actc_codec_encode(&p, x, widths, cpu, p.bytes));
    actc_quant_range_sq(x, 6, 1000, 0, want);
    const size_t len = actc_cuda_range_sq_len(6, 1000);
    void *dx, *dp, *dr;
    CUDA_OK(cudaMalloc(&dx, n * 4));
    CUDA_OK(cudaMalloc(&dp, p.bytes));
    CUDA_OK(cudaMalloc(&dr, len * sizeof(double)));
    CUDA_OK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
    settle();
    cudaGraph_t g;
    cudaGraphExec_t ge;
    int ok = 1;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const actc_status se = actc_cuda_encode(&p, dx, ACTC_FLOAT32, widths, dp, p.bytes, stream);
    const actc_status sr = actc_cuda_range_sq(dx, ACTC_FLOAT32, 6, 1000, dr, len, stream);
    const cudaError_t ce = cudaStreamEndCapture(stream, &g);
    if (se != ACTC_OK || sr != ACTC_OK || ce != cudaSuccess) {
        printf("FAIL CUDA graph: capture refused (encode %s, ranges %s, end %s: %s)\n", actc_status_name(se),
               actc_status_name(sr), cudaGetErrorString(ce), actc_last_error());
        g_failed++;
        cudaGetLastError();
    } else {
        memset(widths, 8, sizeof widths); /* captured by value: the graph keeps the old widths */
        CUDA_OK(cudaGraphInstantiateWithFlags(&ge, g, 0));
        for (int r = 0; r < 2; r++) {
            CUDA_OK(cudaMemsetAsync(dp, 0, p.bytes, stream));
            CUDA_OK(cudaGraphLaunch(ge, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            CUDA_OK(cudaMemcpy(back, dp, p.bytes, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(got, dr, sizeof got, cudaMemcpyDeviceToHost));
            ok &= memcmp(cpu, back, p.bytes) == 0 && memcmp(want, got, sizeof got) == 0;
        }
        g_failed += !ok;
        printf("%s CUDA graph: mixed-width quant:2 encode and the ranges captured, replayed twice: %s\n",
               ok ? "ok  " : "FAIL", ok ? "the CPU's bytes" : "bytes differ");
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
    }
    cudaFree(dx), cudaFree(dp), cudaFree(dr);
    free(x), free(cpu), free(back);
}

/* --quick: no throughput; --emulator (on tests/gpu/emu, CUDA emulated on
 * the CPU): no throughput, and the unbiasedness check on fewer rows. */
int main(int argc, char **argv)
{
    const int emulator = argc > 1 && strcmp(argv[1], "--emulator") == 0;
    const int quick = emulator || (argc > 1 && strcmp(argv[1], "--quick") == 0);
    int ndev = actc_cuda_device_count();
    if (!actc_cuda_built() || ndev == 0) {
        printf("no GPU: the CUDA codecs' GPU checks are skipped (%s)\n", actc_last_error());
        return 77;
    }
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    printf("GPU: %s (sm_%d%d, %.0f GiB), actc %s\n", prop.name, prop.major, prop.minor,
           prop.totalGlobalMem / 1073741824.0, actc_version());
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    identity(stream);
    ranges(stream);
    graph(stream);
    unbiased(stream, emulator);
    if (!quick) throughput(stream);
    bad_input(stream);
    CUDA_OK(cudaStreamDestroy(stream));
    printf("%s: %d check(s) failed\n", g_failed ? "FAILED" : "PASSED", g_failed);
    return g_failed ? 1 : 0;
}
