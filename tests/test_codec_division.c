/* DIVISION's dual-precision codec (codec_division.c): exact byte counts (the
 * paper's N^2 Q/8 + 4 bytes per channel plus the bf16 LFC), the LFC equal to
 * the bf16 block means, every element within one quantization step of its
 * plane, unbiased HFC rounding, far smaller error than a per-channel Q-bit
 * quantizer of the raw input on smooth maps, the ablation modes, edge cases
 * (maps smaller than B, sizes not divisible by B, constant maps, empty),
 * tokens vs features pooling of [B, T, D], row decoding and determinism
 * across thread counts. */
#include "testutil.h"
#include "codec/codec.h"
#include "codec/quant_kernels.h"
#include "core/core.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

static actc_codec_args dargs(int nd, const int *shape, int B, int Q, int mode, int r, int tokens, uint64_t key)
{
    actc_codec_args a;
    memset(&a, 0, sizeof a);
    a.ndim = nd;
    for (int i = 0; i < nd; i++) a.shape[i] = shape[i];
    a.bits = Q;
    a.iparam[0] = B;
    a.iparam[1] = mode;
    a.iparam[2] = r;
    a.iparam[3] = tokens;
    a.key = key;
    return a;
}

static size_t numel(int nd, const int *shape)
{
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= (size_t)shape[i];
    return n;
}

/* plan + encode (guard zone checked) + decode; returns the payload. */
static uint8_t *roundtrip(actc_codec_args *a, const float *x, size_t n, float *y, size_t *bytes)
{
    *bytes = actc_codec_division.plan(a, n);
    uint8_t *buf = malloc(*bytes + GUARD);
    assert_non_null(buf);
    memset(buf, 0xA5, *bytes + GUARD);
    actc_codec_division.encode(a, x, n, buf);
    for (size_t i = 0; i < GUARD; i++) assert_int_equal(buf[*bytes + i], 0xA5);
    actc_codec_division.decode(a, buf, n, y);
    return buf;
}

static size_t cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

/* A smooth image-like map: low-frequency waves per (sample, channel), an
 * offset and a little noise. */
static void fill_smooth(float *x, int S, int C, int H, int W, uint64_t seed)
{
    for (int s = 0; s < S; s++)
        for (int c = 0; c < C; c++) {
            const float off = 2.0f * actc_rand_uniform(seed, (uint64_t)(s * C + c)) - 1.0f;
            const float amp = 0.5f + actc_rand_uniform(seed + 1, (uint64_t)(s * C + c));
            for (int i = 0; i < H; i++)
                for (int j = 0; j < W; j++) {
                    const size_t e = (((size_t)s * C + c) * H + i) * W + j;
                    x[e] = off + amp * sinf(0.05f * (float)i + 0.3f * c) * cosf(0.04f * (float)j) +
                           0.02f * (actc_rand_uniform(seed + 2, e) - 0.5f);
                }
        }
}

/* Reference LFC of plane (s, c) of a [S, C, H, W] tensor: bf16 of each
 * block's mean (blocks of min(B, dim), the last one partial). */
static float ref_lfc(const float *x, int C, int H, int W, int B, int s, int c, int i, int j)
{
    const int bh = H < B ? H : B, bw = W < B ? W : B;
    const int i0 = i / bh * bh, j0 = j / bw * bw;
    const int i1 = i0 + bh < H ? i0 + bh : H, j1 = j0 + bw < W ? j0 + bw : W;
    double acc = 0;
    for (int a = i0; a < i1; a++)
        for (int b = j0; b < j1; b++) acc += x[(((size_t)s * C + c) * H + a) * W + b];
    return actc__bf16_to_f32(actc__f32_to_bf16((float)(acc / ((i1 - i0) * (j1 - j0)))));
}

/* Byte counts: per plane 4 (min, range) + 2 per pooled block + ceil(M Q/8). */
static void test_plan_bytes(void **state)
{
    (void)state;
    const struct {
        int nd, shape[5], B, Q, r, tokens;
        size_t planes, blocks, M;
    } c[] = {
        {4, {3, 5, 28, 28}, 8, 2, 2, 0, 15, 16, 784},     /* the paper's N = 28 case     */
        {4, {2, 4, 7, 7}, 8, 2, 2, 0, 8, 1, 49},          /* N < B: one block           */
        {4, {2, 3, 13, 9}, 8, 2, 2, 0, 6, 4, 117},        /* not divisible by B         */
        {4, {2, 3, 32, 32}, 8, 4, 2, 0, 6, 16, 1024},     /* Q = 4                      */
        {4, {1, 2, 30, 30}, 12, 2, 2, 0, 2, 9, 900},      /* B = 12                     */
        {2, {4, 300}, 8, 2, 1, 0, 4, 38, 300},            /* [N, D]: Theorem 3B         */
        {3, {2, 37, 20}, 8, 2, 1, 1, 40, 5, 37},          /* tokens: per (sample, feature) */
        {3, {2, 37, 20}, 8, 2, 1, 0, 74, 3, 20},          /* features: per (sample, token) */
        {5, {2, 3, 9, 10, 11}, 8, 2, 3, 0, 6, 8, 990},    /* 3-D maps                   */
        {1, {300}, 8, 2, 1, 0, 1, 38, 300},               /* 1-D: one plane             */
    };
    for (size_t k = 0; k < sizeof c / sizeof *c; k++)
        for (int mode = 0; mode < 3; mode++) {
            actc_codec_args a = dargs(c[k].nd, c[k].shape, c[k].B, c[k].Q, mode, c[k].r, c[k].tokens, 1);
            const size_t n = numel(c[k].nd, c[k].shape);
            const size_t hfc = 4 + cdiv(c[k].M * (size_t)c[k].Q, 8), lfc = 2 * c[k].blocks;
            const size_t per = mode == ACTC_DIV_FULL ? hfc + lfc : mode == ACTC_DIV_LFC_ONLY ? lfc : hfc;
            assert_int_equal(actc_codec_division.plan(&a, n), c[k].planes * per);
        }
    /* The paper's per-channel figure at N = 28, B = 8, Q = 2: N^2 Q/8 + 4 =
     * 200 bytes of HFC plus 2 ceil(N/B)^2 = 32 of LFC, against 4 N^2 = 3136. */
    int s[4] = {1, 1, 28, 28};
    actc_codec_args a = dargs(4, s, 8, 2, ACTC_DIV_FULL, 2, 0, 1);
    assert_int_equal(actc_codec_division.plan(&a, 784), 28 * 28 * 2 / 8 + 4 + 2 * 16);
    assert_int_equal(actc_codec_division.plan(&a, 0), 0);
}

/* The payload's LFC holds the bf16 block means; the full decode is within
 * one quantization step (the plane's stored range / (2^Q - 1)) of x; LFC
 * alone decodes to the upsampled means exactly. */
static void test_lfc_and_error_bound(void **state)
{
    (void)state;
    /* Rows of 9-12 with several blocks: the encoder's pooling reads past a
     * row, never past the tensor (the buffers are exact, for ASan). */
    const int shapes[][4] = {{2, 3, 28, 28}, {2, 2, 13, 9}, {3, 4, 7, 7}, {1, 2, 5, 40},
                             {3, 1, 1, 9},   {4, 2, 1, 12}, {2, 3, 2, 9}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const int S = shapes[k][0], C = shapes[k][1], H = shapes[k][2], W = shapes[k][3], B = 8;
        const size_t n = numel(4, shapes[k]), M = (size_t)H * W;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *z = malloc(n * sizeof *z);
        for (size_t i = 0; i < n; i++) x[i] = 4.0f * actc_rand_uniform(7, i) - 1.0f;
        actc_codec_args a = dargs(4, shapes[k], B, 2, ACTC_DIV_FULL, 2, 0, 99);
        size_t bytes;
        uint8_t *buf = roundtrip(&a, x, n, y, &bytes);
        const size_t P = (size_t)S * C, nb = cdiv((size_t)H, (size_t)(H < B ? H : B)) *
                                                   cdiv((size_t)W, (size_t)(W < B ? W : B));
        const uint16_t *lfc = (const uint16_t *)(buf + 4 * P);
        for (int s = 0; s < S; s++)
            for (int c = 0; c < C; c++) {
                const size_t p = (size_t)s * C + c;
                const uint8_t *m = buf + 4 * p;
                const float R = actc__bf16_to_f32((uint16_t)(m[2] | m[3] << 8));
                const float step = R / 3.0f;
                for (int i = 0; i < H; i++)
                    for (int j = 0; j < W; j++) {
                        const size_t e = p * M + (size_t)i * W + j;
                        assert_true(fabsf(y[e] - x[e]) <= step * (1 + 1e-5f) + 1e-6f);
                    }
                /* Every block's stored mean. */
                const int bh = H < B ? H : B, bw = W < B ? W : B, nbw = (W + bw - 1) / bw;
                for (size_t blk = 0; blk < nb; blk++)
                    assert_true(actc__bf16_to_f32(lfc[p * nb + blk]) ==
                                ref_lfc(x, C, H, W, B, s, c, (int)(blk / nbw) * bh, (int)(blk % nbw) * bw));
            }
        free(buf);
        a = dargs(4, shapes[k], B, 2, ACTC_DIV_LFC_ONLY, 2, 0, 99);
        buf = roundtrip(&a, x, n, z, &bytes);
        for (int s = 0; s < S; s++)
            for (int c = 0; c < C; c++)
                for (int i = 0; i < H; i++)
                    for (int j = 0; j < W; j++)
                        assert_true(z[(((size_t)s * C + c) * H + i) * W + j] == ref_lfc(x, C, H, W, B, s, c, i, j));
        free(buf);
        free(x);
        free(y);
        free(z);
    }
}

/* E[decode] = x: the mean of many encodings (different keys) converges to x
 * at the rate of the rounding noise (each draw within one step of x), on
 * small planes, planes past the stack path (4900 and 10000 elements) and
 * strided token planes. */
static void test_unbiased(void **state)
{
    (void)state;
    const struct {
        int nd, shape[4], r, tokens;
    } c[] = {{4, {2, 3, 12, 12}, 2, 0}, {4, {1, 2, 70, 70}, 2, 0}, {2, {2, 10000}, 1, 0}, {3, {2, 40, 6}, 1, 1}};
    const int K = 400;
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        const size_t n = numel(c[k].nd, c[k].shape);
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        double *sum = calloc(n, sizeof *sum), worst_step = 0;
        for (size_t i = 0; i < n; i++) x[i] = 3.0f * actc_rand_uniform(5, i) - 1.0f;
        for (int key = 0; key < K; key++) {
            actc_codec_args a = dargs(c[k].nd, c[k].shape, 8, 2, ACTC_DIV_FULL, c[k].r, c[k].tokens, 1000 + key);
            size_t bytes;
            uint8_t *buf = roundtrip(&a, x, n, y, &bytes);
            for (size_t i = 0; i < n; i++) sum[i] += y[i];
            const uint8_t *m = buf;
            const double step = actc__bf16_to_f32((uint16_t)(m[2] | m[3] << 8)) / 3.0;
            if (step > worst_step) worst_step = step;
            free(buf);
        }
        /* One draw is within a step (variance <= step^2 / 4); the mean of K
         * has sd <= step / (2 sqrt K): 5 sd bounds every element here. */
        double worst = 0, total = 0;
        for (size_t i = 0; i < n; i++) {
            const double e = fabs(sum[i] / K - x[i]);
            worst = e > worst ? e : worst;
            total += sum[i] / K - x[i];
        }
        const double sd = worst_step / (2 * sqrt((double)K));
        print_message("unbiased case %zu: worst |mean - x| %.4f, 5 sd %.4f, mean error %.2e\n", k, worst, 5 * sd,
                      total / (double)n);
        assert_true(worst < 6 * sd);
        assert_true(fabs(total / (double)n) < 0.1 * sd);
        free(x);
        free(y);
        free(sum);
    }
}

/* On smooth image-like maps the dual representation is much more accurate
 * than Q-bit per-channel quantization of the raw map (the quantizer with one
 * group per 32x32 channel), at nearly the same bytes. */
static void test_smooth_beats_raw_per_channel(void **state)
{
    (void)state;
    int shape[4] = {4, 8, 32, 32};
    const size_t n = numel(4, shape);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *q = malloc(n * sizeof *q);
    fill_smooth(x, 4, 8, 32, 32, 21);
    actc_codec_args a = dargs(4, shape, 8, 2, ACTC_DIV_FULL, 2, 0, 5);
    size_t bytes;
    free(roundtrip(&a, x, n, y, &bytes));
    actc_codec_args r;
    memset(&r, 0, sizeof r);
    r.ndim = 4;
    memcpy(r.shape, shape, sizeof shape);
    r.bits = 2;
    r.group = 32 * 32;
    r.key = 5;
    const size_t rb = actc_codec_quant.plan(&r, n);
    uint8_t *buf = malloc(rb);
    actc_codec_quant.encode(&r, x, n, buf);
    actc_codec_quant.decode(&r, buf, n, q);
    free(buf);
    double ed = 0, eq = 0;
    for (size_t i = 0; i < n; i++) {
        ed += (double)(y[i] - x[i]) * (y[i] - x[i]);
        eq += (double)(q[i] - x[i]) * (q[i] - x[i]);
    }
    print_message("smooth maps: rms error division %.4f (%zu bytes), raw per-channel 2-bit %.4f (%zu bytes)\n",
                  sqrt(ed / n), bytes, sqrt(eq / n), rb);
    assert_true(ed * 6.25 < eq); /* at least 2.5x smaller rms error (2.9x here) */
    free(x);
    free(y);
    free(q);
}

/* HFC alone decodes to the residual against the stored means: its mean over
 * keys is x - upsample(bf16 block means), i.e. the block means are lost. */
static void test_hfc_only(void **state)
{
    (void)state;
    int shape[4] = {1, 2, 16, 16};
    const size_t n = numel(4, shape);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    double *sum = calloc(n, sizeof *sum);
    fill_smooth(x, 1, 2, 16, 16, 3);
    const int K = 300;
    double worst_step = 0;
    for (int key = 0; key < K; key++) {
        actc_codec_args a = dargs(4, shape, 8, 2, ACTC_DIV_HFC_ONLY, 2, 0, 50 + key);
        size_t bytes;
        uint8_t *buf = roundtrip(&a, x, n, y, &bytes);
        for (int c = 0; c < 2; c++) /* meta of both planes: the payload starts with it */
            worst_step = fmax(worst_step, actc__bf16_to_f32((uint16_t)(buf[4 * c + 2] | buf[4 * c + 3] << 8)) / 3.0);
        free(buf);
        for (size_t i = 0; i < n; i++) sum[i] += y[i];
    }
    double worst = 0;
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                const size_t e = ((size_t)c * 16 + i) * 16 + j;
                const double want = x[e] - ref_lfc(x, 2, 16, 16, 8, 0, c, i, j);
                worst = fmax(worst, fabs(sum[e] / K - want));
            }
    print_message("hfc-only: worst |mean - (x - lfc)| %.4f, 6 sd %.4f\n", worst, 6 * worst_step / (2 * sqrt(K)));
    assert_true(worst < 6 * worst_step / (2 * sqrt(K)));
    free(x);
    free(y);
    free(sum);
}

/* Constant maps come back (nearly) exactly, whatever the plane size; maps
 * smaller than B pool over their whole length; empty tensors are empty. */
static void test_edge_cases(void **state)
{
    (void)state;
    const int shapes[][4] = {{2, 3, 5, 5}, {1, 1, 1, 1}, {2, 2, 9, 17}, {1, 1, 80, 80}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const size_t n = numel(4, shapes[k]);
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        for (size_t i = 0; i < n; i++) x[i] = 3.14159f;
        actc_codec_args a = dargs(4, shapes[k], 8, 2, ACTC_DIV_FULL, 2, 0, 1);
        size_t bytes;
        free(roundtrip(&a, x, n, y, &bytes));
        for (size_t i = 0; i < n; i++) assert_true(fabsf(y[i] - x[i]) <= 1e-5f * 3.14159f);
        /* A map smaller than B: one block per plane, its mean exact. */
        if (shapes[k][2] < 8) {
            const size_t M = (size_t)shapes[k][2] * shapes[k][3];
            for (size_t i = 0; i < n; i++) x[i] = (float)(i % M);
            a = dargs(4, shapes[k], 8, 2, ACTC_DIV_LFC_ONLY, 2, 0, 1);
            assert_int_equal(actc_codec_division.plan(&a, n), 2 * (size_t)shapes[k][0] * shapes[k][1]);
            free(roundtrip(&a, x, n, y, &bytes));
            for (size_t i = 0; i < n; i++) assert_true(y[i] == (float)(M - 1) / 2); /* 12 or 0: exact in bf16 */
        }
        free(x);
        free(y);
    }
    /* An infinite value makes its block's mean infinite and the block's
     * residuals inf (or NaN for the infinite element itself); the range
     * leaves the NaNs out, as the quantizer's minmax does, whether the plane
     * is one block or several.  7x7 (one block): every residual +inf, so
     * minimum and maximum saturate (0x7F7F, 0x7F7F; leaving the NaN in gave
     * 0, 0).  9x9: the other blocks' residuals are 0, so Z = 0 and R
     * saturates. */
    const struct {
        int side;
        uint16_t z, r;
    } inf_case[] = {{7, 0x7F7F, 0x7F7F}, {9, 0x0000, 0x7F7F}};
    for (size_t k = 0; k < sizeof inf_case / sizeof *inf_case; k++) {
        const int side = inf_case[k].side;
        int shp[4] = {1, 1, side, side};
        const size_t n = (size_t)side * side;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        for (size_t i = 0; i < n; i++) x[i] = 1.0f;
        x[3] = -INFINITY;
        actc_codec_args a = dargs(4, shp, 8, 2, ACTC_DIV_FULL, 2, 0, 1);
        size_t bytes;
        uint8_t *buf = roundtrip(&a, x, n, y, &bytes);
        assert_int_equal(buf[0] | buf[1] << 8, inf_case[k].z);
        assert_int_equal(buf[2] | buf[3] << 8, inf_case[k].r);
        free(buf);
        free(x);
        free(y);
    }
    int empty[4] = {0, 3, 8, 8};
    actc_codec_args a = dargs(4, empty, 8, 2, ACTC_DIV_FULL, 2, 0, 1);
    assert_int_equal(actc_codec_division.plan(&a, 0), 0);
    actc_codec_division.encode(&a, NULL, 0, NULL);
    actc_codec_division.decode(&a, NULL, 0, NULL);
}

/* Tokens pooling of [B, T, D] is the features pooling of its transpose
 * [B, D, T]: same bytes, same decoded values (same plane order and keys). */
static void test_tokens_vs_features(void **state)
{
    (void)state;
    const int B = 2, T = 37, D = 20;
    int s_td[3] = {B, T, D}, s_dt[3] = {B, D, T};
    const size_t n = (size_t)B * T * D;
    float *x = malloc(n * sizeof *x), *xt = malloc(n * sizeof *xt), *y = malloc(n * sizeof *y),
          *yt = malloc(n * sizeof *yt);
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * actc_rand_uniform(9, i) - 1.0f;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++)
                xt[((size_t)b * D + d) * T + t] = x[((size_t)b * T + t) * D + d];
    for (int mode = 0; mode < 3; mode++) {
        actc_codec_args a = dargs(3, s_td, 8, 2, mode, 1, 1, 77), at = dargs(3, s_dt, 8, 2, mode, 1, 0, 77);
        size_t b1, b2;
        uint8_t *p1 = roundtrip(&a, x, n, y, &b1), *p2 = roundtrip(&at, xt, n, yt, &b2);
        assert_int_equal(b1, b2);
        assert_memory_equal(p1, p2, b1);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int d = 0; d < D; d++)
                    assert_true(y[((size_t)b * T + t) * D + d] == yt[((size_t)b * D + d) * T + t]);
        free(p1);
        free(p2);
    }
    free(x);
    free(xt);
    free(y);
    free(yt);
}

/* decode_rows gives the rows of the full decode, for both layouts, planes
 * past the stack path and a 1-D tensor (one plane spanning all rows). */
static void test_decode_rows(void **state)
{
    (void)state;
    const struct {
        int nd, shape[4], r, tokens;
    } c[] = {{4, {5, 3, 9, 9}, 2, 0}, {3, {4, 33, 10}, 1, 1}, {2, {3, 5000}, 1, 0}, {1, {1500}, 1, 0}};
    for (size_t k = 0; k < sizeof c / sizeof *c; k++)
        for (int mode = 0; mode < 3; mode++) {
            const size_t n = numel(c[k].nd, c[k].shape), rows = (size_t)c[k].shape[0], d = n / rows;
            float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *z = malloc(n * sizeof *z);
            for (size_t i = 0; i < n; i++) x[i] = actc_rand_uniform(4, i) * (float)(i % 7);
            actc_codec_args a = dargs(c[k].nd, c[k].shape, 8, 2, mode, c[k].r, c[k].tokens, 3);
            size_t bytes;
            uint8_t *buf = roundtrip(&a, x, n, y, &bytes);
            const size_t spans[][2] = {{0, rows}, {1, rows - 1}, {rows - 1, 1}, {rows / 2, (rows + 1) / 2}};
            for (size_t s = 0; s < 4; s++) {
                size_t r0 = spans[s][0], nr = spans[s][1];
                if (r0 + nr > rows) nr = rows - r0;
                memset(z, 0, n * sizeof *z);
                actc_codec_division.decode_rows(&a, buf, n, r0, nr, z);
                assert_memory_equal(z, y + r0 * d, nr * d * sizeof *z);
            }
            free(buf);
            free(x);
            free(y);
            free(z);
        }
}

/* Payload and decode are functions of (key, data): one thread or two, for
 * small planes, planes past the stack path and strided token planes (each
 * large enough for the parallel path). */
static void test_threads_deterministic(void **state)
{
    (void)state;
    const struct {
        int nd, shape[4], r, tokens;
    } c[] = {{4, {16, 16, 28, 28}, 2, 0}, {2, {8, 5000}, 1, 0}, {3, {4, 300, 40}, 1, 1}, {3, {2, 5000, 4}, 1, 1}};
    const int saved = omp_get_max_threads();
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        const size_t n = numel(c[k].nd, c[k].shape);
        float *x = malloc(n * sizeof *x), *y1 = malloc(n * sizeof *y1), *y2 = malloc(n * sizeof *y2);
        for (size_t i = 0; i < n; i++) x[i] = actc_rand_normal(8, i);
        actc_codec_args a = dargs(c[k].nd, c[k].shape, 8, 2, ACTC_DIV_FULL, c[k].r, c[k].tokens, 11);
        size_t b1, b2;
        omp_set_num_threads(1);
        uint8_t *p1 = roundtrip(&a, x, n, y1, &b1);
        omp_set_num_threads(2);
        uint8_t *p2 = roundtrip(&a, x, n, y2, &b2);
        assert_int_equal(b1, b2);
        assert_memory_equal(p1, p2, b1);
        assert_memory_equal(y1, y2, n * sizeof *y1);
        free(p1);
        free(p2);
        free(x);
        free(y1);
        free(y2);
    }
    omp_set_num_threads(saved);
}

/* Other block sizes and widths, and 3-D maps: every element within one step
 * of its plane, each plane's residual range covering its elements. */
static void test_other_parameters(void **state)
{
    (void)state;
    const struct {
        int nd, shape[5], B, Q, r;
    } c[] = {{4, {2, 3, 20, 20}, 4, 4, 2}, {4, {2, 3, 20, 20}, 12, 3, 2}, {4, {1, 2, 30, 30}, 8, 8, 2},
             {5, {2, 2, 9, 10, 11}, 8, 2, 3}, {5, {1, 2, 20, 20, 20}, 4, 2, 3}, {2, {3, 77}, 16, 1, 1}};
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        const size_t n = numel(c[k].nd, c[k].shape), P = (size_t)c[k].shape[0] * c[k].shape[1];
        const size_t M = c[k].r == 1 ? (size_t)c[k].shape[1] : n / P, planes = c[k].r == 1 ? (size_t)c[k].shape[0] : P;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        for (size_t i = 0; i < n; i++) x[i] = 2.0f * actc_rand_uniform(31, i) + sinf(0.01f * (float)i);
        actc_codec_args a = dargs(c[k].nd, c[k].shape, c[k].B, c[k].Q, ACTC_DIV_FULL, c[k].r, 0, 17);
        size_t bytes;
        uint8_t *buf = roundtrip(&a, x, n, y, &bytes);
        for (size_t p = 0; p < planes; p++) {
            const float R = actc__bf16_to_f32((uint16_t)(buf[4 * p + 2] | buf[4 * p + 3] << 8));
            const float step = R / (float)((1 << c[k].Q) - 1);
            for (size_t m = 0; m < M; m++)
                assert_true(fabsf(y[p * M + m] - x[p * M + m]) <= step * (1 + 1e-5f) + 1e-6f);
        }
        free(buf);
        free(x);
        free(y);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_bytes),
        cmocka_unit_test(test_lfc_and_error_bound),
        cmocka_unit_test(test_unbiased),
        cmocka_unit_test(test_smooth_beats_raw_per_channel),
        cmocka_unit_test(test_hfc_only),
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_tokens_vs_features),
        cmocka_unit_test(test_decode_rows),
        cmocka_unit_test(test_threads_deterministic),
        cmocka_unit_test(test_other_parameters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
