/* The stochastic quantizer codecs (quant, quant_tensor): error bounds read
 * from the payload's own meta (and the meta checked to cover its group
 * tightly), unbiasedness and variance over many keys, exact byte counts and
 * the payload layout, edge inputs, determinism across thread counts, mixed
 * precision, decoding row ranges, and the range statistics for the policy. */
#include "testutil.h"
#include "codec/codec.h"
#include "codec/quant_kernels.h"
#include "core/core.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static actc_codec_args make_args(int N, int D, int bits, int group, uint64_t key)
{
    actc_codec_args a;
    memset(&a, 0, sizeof a);
    a.ndim = 2;
    a.shape[0] = N;
    a.shape[1] = D;
    a.bits = bits;
    a.group = group;
    a.key = key;
    return a;
}

static size_t roundtrip(const actc_codec *c, actc_codec_args *a, const float *x, size_t n, float *y,
                        uint8_t **payload)
{
    size_t bytes;
    uint8_t *buf = tu_encode(c, a, x, n, &bytes);
    c->decode(a, buf, n, y);
    if (payload)
        *payload = buf;
    else
        free(buf);
    return bytes;
}

static size_t cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

/* Zero point and range of meta entry g. */
static void meta_zr(const uint8_t *payload, size_t g, float *z, float *r)
{
    const uint8_t *m = payload + 4 * g;
    *z = actc__bf16_to_f32((uint16_t)(m[0] | m[1] << 8));
    *r = actc__bf16_to_f32((uint16_t)(m[2] | m[3] << 8));
}

/* Meta entry of element i for N samples of D in groups of G (G = 0: one
 * group for the whole tensor, the per-tensor codec). */
static size_t group_of(size_t i, size_t D, size_t G)
{
    if (G == 0) return 0;
    return i / D * cdiv(D, G) + i % D / G;
}

/* Every element decodes within one step R/B of its group (plus float
 * rounding), every group's stored pair covers it (Z <= min, Z + R >= max)
 * and is tight (R at most the true range rounded up, so the step is not
 * inflated).  Elements above Z + R (only when the range overflowed bf16) are
 * reported through *clamped instead. */
static void check_within_step(const float *x, const float *y, size_t n, size_t D, size_t G, int bits,
                              const uint8_t *payload, size_t *clamped)
{
    const double B = (double)((1 << bits) - 1);
    const size_t ngroups = G ? n / D * cdiv(D, G) : 1;
    double *mn = malloc(ngroups * sizeof *mn), *mx = malloc(ngroups * sizeof *mx);
    for (size_t g = 0; g < ngroups; g++) {
        mn[g] = INFINITY;
        mx[g] = -INFINITY;
    }
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        const size_t g = group_of(i, D, G);
        mn[g] = fmin(mn[g], x[i]);
        mx[g] = fmax(mx[g], x[i]);
    }
    size_t over = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t g = group_of(i, D, G);
        float z, r;
        meta_zr(payload, g, &z, &r);
        assert_true(isfinite(z) && isfinite(r) && r >= 0.0f);
        assert_true(z <= mn[g]);
        const double top = (double)z + (double)r;
        /* Tight: Z one bf16 rounding below the minimum, R at most the range
         * rounded up (8 significant bits), or the smallest range whose scale
         * B / R is a finite float; 2e-40 covers bf16's subnormal spacing. */
        assert_true((double)z >= mn[g] - fabs(mn[g]) / 128 - 2e-40);
        assert_true((double)r <= fmax((mx[g] - z) * (1.0 + 1.0 / 128), B / FLT_MAX * (1.0 + 1.0 / 128)) + 2e-40);
        assert_true(isfinite(y[i]));
        if (isnan(x[i])) continue;
        const double step = (double)r / B;
        /* Decoding Z + q * step in float adds rounding relative to |Z|+R. */
        const double tol = step * (1.0 + 1e-5) + (fabs((double)z) + r) * 1e-6 + 1e-40;
        if (mx[g] <= top) {
            if (fabs((double)y[i] - x[i]) > tol)
                fail_msg("element %zu: x=%g y=%g step=%g (b=%d G=%zu D=%zu)", i, (double)x[i], (double)y[i],
                         step, bits, G, D);
        } else {
            /* Saturated range: values above Z + R come back as Z + R. */
            assert_true(x[i] <= top || fabs((double)y[i] - top) <= tol);
            if (x[i] > top) over++;
        }
    }
    if (clamped)
        *clamped = over;
    else
        assert_int_equal(over, 0);
    free(mn);
    free(mx);
}

/* Groups of different scales and offsets, as activations have. */
static void fill_varied(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        const float scale = powf(10.0f, (float)((i / 97) % 7) - 3.0f);
        const float shift = (float)((i / 131) % 5) - 2.0f;
        x[i] = (actc_rand_uniform(seed, i) - 0.5f) * scale + shift * scale;
    }
}

/* ------------------------------------------------------------------------ */
/* 1. Round trip within one step                                             */
/* ------------------------------------------------------------------------ */

static void test_roundtrip_within_step(void **state)
{
    (void)state;
    /* D = 700 = 2 full groups + 188 (not a multiple of 8 either: 188 = 23*8
     * + 4); group 100 and group 8 give many tails; N = 1 and N = 3.  [4, 1024]
     * has 16 groups, so 64 bytes of meta and a 16-byte aligned data section:
     * the non-temporal store path; the others take the ordinary one. */
    const struct { int N, D, G; } shapes[] = {{3, 700, 0}, {1, 1000, 100}, {2, 13, 8}, {5, 256, 0}, {4, 1024, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t n = (size_t)shapes[s].N * (size_t)shapes[s].D;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        fill_varied(x, n, 10 + s);
        for (int b = 1; b <= 8; b++) {
            actc_codec_args a = make_args(shapes[s].N, shapes[s].D, b, shapes[s].G, 99);
            uint8_t *payload;
            roundtrip(&actc_codec_quant, &a, x, n, y, &payload);
            check_within_step(x, y, n, (size_t)shapes[s].D, a.group, b, payload, NULL);
            free(payload);

            a = make_args(shapes[s].N, shapes[s].D, b, 0, 99);
            roundtrip(&actc_codec_quant_tensor, &a, x, n, y, &payload);
            check_within_step(x, y, n, n, 0, b, payload, NULL);
            free(payload);
        }
        free(x);
        free(y);
    }
}

/* The stored pair covers [min, max] exactly, also when the difference of
 * the two is not representable (far-apart exponents, signs). */
static void test_meta_rounds_outwards(void **state)
{
    (void)state;
    uint8_t m[4];
    float z, r;
    /* Z < 0 tiny, max 1: R must exceed 1 although 1 - (-1e-30) rounds to 1. */
    actc__quant_meta(-1e-30f, 1.0f, 2, m);
    meta_zr(m, 0, &z, &r);
    assert_true(z <= -1e-30f && z < 0.0f);
    assert_true(r > 1.0f);
    /* Exact bf16 values stay exact. */
    actc__quant_meta(-2.0f, 1.5f, 4, m);
    meta_zr(m, 0, &z, &r);
    assert_true(z == -2.0f && r == 3.5f);
    /* Random pairs over 60 decades: exact check in double (exponent gaps
     * stay below double's precision here). */
    for (uint64_t k = 0; k < 20000; k++) {
        const float e1 = 30.0f * (actc_rand_uniform(5, 2 * k) - 0.5f);
        const float e2 = 30.0f * (actc_rand_uniform(5, 2 * k + 1) - 0.5f);
        float p = (actc_rand_uniform(6, k) - 0.5f) * powf(10.0f, e1);
        float q = (actc_rand_uniform(7, k) - 0.5f) * powf(10.0f, e2);
        const float lo = fminf(p, q), hi = fmaxf(p, q);
        actc__quant_meta(lo, hi, 1 + (int)(k % 8), m);
        meta_zr(m, 0, &z, &r);
        assert_true(z <= lo);
        assert_true((double)z + (double)r >= (double)hi);
    }
}

/* ------------------------------------------------------------------------ */
/* 2, 3. Unbiasedness and variance over many keys                            */
/* ------------------------------------------------------------------------ */

#define TRIALS 2000
#define EARLY 125

typedef struct {
    double rms_early, rms_final; /* RMS over elements of (mean - x) / step       */
    double rms_theory;           /* its prediction sqrt(mean f(1-f) / TRIALS)      */
    double worst_excess;         /* max |mean - x| / step minus its bound (< 0 ok) */
    double mean_signed, mean_signed_se; /* average signed error, its std. error   */
    double var_ratio;            /* sum of empirical variances / predicted ones   */
    double var_ratio_uniform;    /* ... / ActNN's R^2 / (6 B^2) per element        */
} quant_stats;

/* Decodes x TRIALS times with different keys and compares the statistics
 * of the decodes with stochastic rounding's: E = x, Var = step^2 f (1 - f)
 * with f the fraction of x's scaled value (taken from the stored meta). */
static quant_stats run_trials(const actc_codec *c, const float *x, int N, int D, int bits, int group)
{
    const size_t n = (size_t)N * (size_t)D;
    const size_t G = c == &actc_codec_quant_tensor ? 0 : (group ? (size_t)group : ACTC_QUANT_GROUP);
    const double B = (double)((1 << bits) - 1);
    double *sum = calloc(n, sizeof *sum), *sumsq = calloc(n, sizeof *sumsq);
    double *step = malloc(n * sizeof *step), *fvar = malloc(n * sizeof *fvar);
    float *y = malloc(n * sizeof *y);
    quant_stats st;
    memset(&st, 0, sizeof st);
    double fsum = 0.0, pred = 0.0, pred_uniform = 0.0;
    for (int k = 0; k < TRIALS; k++) {
        actc_codec_args a = make_args(N, D, bits, group, actc_rng_key(2024, (uint64_t)k, 0));
        uint8_t *payload;
        roundtrip(c, &a, x, n, y, &payload);
        if (k == 0) {
            /* The meta does not depend on the key: derive the steps and
             * fractions with the codec's own float arithmetic. */
            for (size_t i = 0; i < n; i++) {
                float z, r;
                meta_zr(payload, group_of(i, (size_t)D, G), &z, &r);
                const float scale = (float)B / r, u = (x[i] - z) * scale;
                const double f = (double)u - floor((double)u);
                step[i] = (double)r / B;
                fvar[i] = f * (1.0 - f);
                fsum += fvar[i];
                pred += step[i] * step[i] * fvar[i];
                pred_uniform += step[i] * step[i] / 6.0;
            }
        }
        free(payload);
        for (size_t i = 0; i < n; i++) {
            const double e = (double)y[i] - (double)x[i]; /* small: keeps sums exact */
            sum[i] += e;
            sumsq[i] += e * e;
        }
        if (k + 1 == EARLY) {
            double acc = 0.0;
            for (size_t i = 0; i < n; i++) acc += pow(sum[i] / EARLY / step[i], 2);
            st.rms_early = sqrt(acc / (double)n);
        }
    }
    double acc = 0.0, signed_sum = 0.0, emp = 0.0;
    st.worst_excess = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        const double m = sum[i] / TRIALS; /* mean error */
        acc += pow(m / step[i], 2);
        signed_sum += m / step[i];
        /* 5 standard errors, plus 3 rounding events of slack for elements
         * whose fraction is so close to 0 or 1 that the count is Poisson. */
        const double bound = 5.0 * sqrt(fvar[i] / TRIALS) + 3.0 / TRIALS;
        st.worst_excess = fmax(st.worst_excess, fabs(m) / step[i] - bound);
        emp += (sumsq[i] - sum[i] * m) / (TRIALS - 1);
    }
    st.rms_final = sqrt(acc / (double)n);
    st.rms_theory = sqrt(fsum / (double)n / TRIALS);
    st.mean_signed = signed_sum / (double)n;
    st.mean_signed_se = st.rms_theory / sqrt((double)n);
    st.var_ratio = emp / pred;
    st.var_ratio_uniform = emp / pred_uniform;
    free(sum);
    free(sumsq);
    free(step);
    free(fvar);
    free(y);
    return st;
}

/* Two samples of 600 (groups of 256, 256, 88 each), uniform in per-group
 * ranges of different widths and offsets. */
static float *trial_tensor(void)
{
    float *x = malloc(1200 * sizeof *x);
    for (size_t i = 0; i < 1200; i++) {
        const size_t g = i % 600 / 256 + 3 * (i / 600);
        x[i] = ((float)g - 2.5f) + actc_rand_uniform(31, i) * (0.5f + 0.7f * (float)g);
    }
    return x;
}

static void test_unbiased(void **state)
{
    (void)state;
    float *x = trial_tensor();
    const actc_codec *codecs[2] = {&actc_codec_quant, &actc_codec_quant_tensor};
    const int widths[2] = {2, 3};
    for (int c = 0; c < 2; c++) {
        const quant_stats st = run_trials(codecs[c], x, 2, 600, widths[c], 0);
        print_message("%s b=%d: rms error/step %.4f after %d, %.4f after %d (theory %.4f), ratio %.2f\n",
                      codecs[c]->name, widths[c], st.rms_early, EARLY, st.rms_final, TRIALS, st.rms_theory,
                      st.rms_early / st.rms_final);
        /* 1/sqrt(n): 16x the trials, a quarter of the error. */
        assert_true(st.rms_early / st.rms_final > 3.2 && st.rms_early / st.rms_final < 5.0);
        assert_true(fabs(st.rms_final / st.rms_theory - 1.0) < 0.15);
        /* Every element within a few standard errors, no systematic drift. */
        assert_true(st.worst_excess <= 0.0);
        assert_true(fabs(st.mean_signed) < 5.0 * st.mean_signed_se);
    }
    free(x);
}

static void test_variance(void **state)
{
    (void)state;
    float *x = trial_tensor();
    const actc_codec *codecs[2] = {&actc_codec_quant, &actc_codec_quant_tensor};
    for (int c = 0; c < 2; c++) {
        const quant_stats st = run_trials(codecs[c], x, 2, 600, 2, 0);
        print_message("%s b=2: variance / step^2 f(1-f) = %.4f, / (R^2 / 6B^2) = %.4f\n", codecs[c]->name,
                      st.var_ratio, st.var_ratio_uniform);
        assert_true(fabs(st.var_ratio - 1.0) < 0.10);
        /* Uniform data: fractions uniform, ActNN's R^2 G / (6 B^2) per group. */
        assert_true(fabs(st.var_ratio_uniform - 1.0) < 0.10);
    }
    free(x);
}

/* ------------------------------------------------------------------------ */
/* 4. Exact byte counts and layout                                           */
/* ------------------------------------------------------------------------ */

/* The payload size from the documented formula. */
static size_t expected_bytes(int N, int D, int G, int bits, const uint8_t *sample_bits)
{
    const size_t g = G ? (size_t)G : ACTC_QUANT_GROUP, gps = cdiv((size_t)D, g);
    size_t total = 4 * (size_t)N * gps + (sample_bits ? (size_t)N : 0);
    for (int s = 0; s < N; s++) {
        const size_t b = sample_bits ? sample_bits[s] : (size_t)bits;
        total += (size_t)D / g * cdiv(g * b, 8) + cdiv((size_t)D % g * b, 8);
    }
    return total;
}

static void test_plan_bytes(void **state)
{
    (void)state;
    const struct { int N, D, G; } shapes[] = {{1, 256, 0},  {1, 700, 0},   {4, 259, 0}, {3, 13, 0},
                                              {2, 1000, 100}, {7, 5, 8},   {1, 1, 0},   {16, 4097, 0}};
    const uint8_t widths[16] = {1, 8, 3, 5, 2, 7, 4, 6, 8, 1, 2, 3, 4, 5, 6, 7};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s].N, D = shapes[s].D, G = shapes[s].G;
        const size_t n = (size_t)N * (size_t)D;
        float *x = malloc(n * sizeof *x);
        fill_varied(x, n, 3);
        for (int b = 1; b <= 8; b++) {
            actc_codec_args a = make_args(N, D, b, G, 1);
            size_t bytes;
            free(tu_encode(&actc_codec_quant, &a, x, n, &bytes)); /* also checks the guard */
            assert_int_equal(bytes, expected_bytes(N, D, G, b, NULL));
            assert_int_equal(a.group, G ? G : ACTC_QUANT_GROUP);
            assert_int_equal(a.iparam[0], 0);
            if (D % 256 == 0 && G == 0) assert_int_equal(bytes, (size_t)N * (D / 256) * (4 + 32 * (size_t)b));

            a = make_args(N, D, b, G, 1);
            free(tu_encode(&actc_codec_quant_tensor, &a, x, n, &bytes));
            assert_int_equal(bytes, 4 + cdiv(n * (size_t)b, 8));
        }
        actc_codec_args a = make_args(N, D, 3, G, 1);
        a.sample_bits = widths;
        size_t bytes;
        free(tu_encode(&actc_codec_quant, &a, x, n, &bytes));
        assert_int_equal(bytes, expected_bytes(N, D, G, 3, widths));
        assert_int_equal(a.iparam[0], 1);
        free(x);
    }
    /* Empty tensors take nothing. */
    actc_codec_args a = make_args(0, 10, 4, 0, 1);
    assert_int_equal(actc_codec_quant.plan(&a, 0), 0);
    assert_int_equal(actc_codec_quant_tensor.plan(&a, 0), 0);
}

/* The bytes themselves: meta as bf16 pairs, per-sample widths, codes as a
 * dense little-endian bit stream. */
static void test_payload_layout(void **state)
{
    (void)state;
    /* Sample 0: values 0..7 over [0, 7] at 3 bits, sample 1: 0..255 over
     * [0, 255] at 8 bits.  Then Z = 0, R = B, the scale is 1 and the codes
     * are the values (rounding up would need r within 2^-16 of 1). */
    enum { D = 19 };
    float x[2 * D];
    for (int i = 0; i < D; i++) {
        x[i] = (float)((i * 5 + 3) % 8);
        x[D + i] = (float)((i * 37 + 11) % 256);
    }
    x[0] = x[D] = 0.0f;
    x[1] = 7.0f;
    x[D + 1] = 255.0f;
    const uint8_t widths[2] = {3, 8};
    actc_codec_args a = make_args(2, D, 0, 0, 5);
    a.sample_bits = widths;
    size_t bytes;
    uint8_t *p = tu_encode(&actc_codec_quant, &a, x, 2 * D, &bytes);
    assert_int_equal(bytes, 2 * 4 + 2 + 8 + D); /* ceil(19*3/8) = 8 */
    assert_int_equal(p[0] | p[1] << 8, 0x0000); /* Z = 0.0   */
    assert_int_equal(p[2] | p[3] << 8, 0x40E0); /* R = 7.0   */
    assert_int_equal(p[4] | p[5] << 8, 0x0000); /* Z = 0.0   */
    assert_int_equal(p[6] | p[7] << 8, 0x437F); /* R = 255.0 */
    assert_int_equal(p[8], 3);
    assert_int_equal(p[9], 8);
    /* Code i at bits 3i .. 3i+2 of a little-endian stream. */
    uint8_t want[8] = {0};
    for (int i = 0; i < D; i++)
        for (int k = 0; k < 3; k++)
            if (((int)x[i] >> k) & 1) want[(3 * i + k) / 8] |= (uint8_t)(1u << ((3 * i + k) % 8));
    assert_memory_equal(p + 10, want, 8);
    for (int i = 0; i < D; i++) assert_int_equal(p[18 + i], (int)x[D + i]);
    free(p);
}

/* ------------------------------------------------------------------------ */
/* 5. Edge inputs                                                            */
/* ------------------------------------------------------------------------ */

static void check_case(const float *x, int N, int D, int G, int bits, size_t *clamped)
{
    const size_t n = (size_t)N * (size_t)D;
    float *y = malloc(n * sizeof *y);
    actc_codec_args a = make_args(N, D, bits, G, 17);
    uint8_t *payload;
    roundtrip(&actc_codec_quant, &a, x, n, y, &payload);
    check_within_step(x, y, n, (size_t)D, a.group, bits, payload, clamped);
    free(payload);
    a = make_args(N, D, bits, 0, 17);
    roundtrip(&actc_codec_quant_tensor, &a, x, n, y, &payload);
    check_within_step(x, y, n, n, 0, bits, payload, clamped);
    free(payload);
    free(y);
}

static void test_edge_inputs(void **state)
{
    (void)state;
    enum { N = 3, D = 300 };
    float x[N * D], y[N * D];
    /* Constants that are bf16 values come back exactly (R = 0). */
    const float exact[3] = {0.0f, 1.5f, -3.0f};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < N * D; i++) x[i] = exact[k];
        for (int b = 1; b <= 8; b += 7) {
            actc_codec_args a = make_args(N, D, b, 0, 1);
            roundtrip(&actc_codec_quant, &a, x, N * D, y, NULL);
            assert_memory_equal(x, y, sizeof x);
            a = make_args(N, D, b, 0, 1);
            roundtrip(&actc_codec_quant_tensor, &a, x, N * D, y, NULL);
            assert_memory_equal(x, y, sizeof x);
        }
    }
    for (int b = 1; b <= 8; b++) {
        /* A constant that is not a bf16 value: a tiny range, still a step. */
        for (int i = 0; i < N * D; i++) x[i] = 0.1f;
        check_case(x, N, D, 0, b, NULL);
        /* Tiny and huge magnitudes, negative-only. */
        const float scales[4] = {1e-30f, 1e-38f, 1e30f, 1e37f};
        for (int k = 0; k < 4; k++) {
            for (int i = 0; i < N * D; i++) x[i] = (actc_rand_uniform((uint64_t)k, (uint64_t)i) - 0.5f) * scales[k];
            check_case(x, N, D, 0, b, NULL);
        }
        for (int i = 0; i < N * D; i++) x[i] = -1.0f - 4.0f * actc_rand_uniform(9, (uint64_t)i);
        check_case(x, N, D, 0, b, NULL);
        /* A single element, fewer elements than a group, group tails. */
        x[0] = 0.3f;
        check_case(x, 1, 1, 0, b, NULL);
        check_case(x, 1, 37, 0, b, NULL);
        check_case(x, 3, 259, 0, b, NULL);
        check_case(x, 4, 13, 8, b, NULL);
    }
    /* +-3e38 in one group: the range 6e38 exceeds the largest bf16 (3.39e38),
     * so it saturates; values below Z + R stay within a step, the ones above
     * come back as Z + R, and nothing overflows to inf or NaN. */
    for (int i = 0; i < N * D; i++) x[i] = (i % 2 ? 3e38f : -3e38f) * actc_rand_uniform(4, (uint64_t)i);
    x[0] = 3e38f;
    x[1] = -3e38f;
    for (int b = 1; b <= 8; b++) {
        size_t clamped = 0;
        check_case(x, N, D, 0, b, &clamped);
    }
    /* A NaN does not disturb its group. */
    for (int i = 0; i < N * D; i++) x[i] = actc_rand_uniform(8, (uint64_t)i);
    x[5] = NAN;
    check_case(x, N, D, 0, 4, NULL);
}

/* ------------------------------------------------------------------------ */
/* 6. Determinism                                                            */
/* ------------------------------------------------------------------------ */

static uint8_t *encode_threads(const actc_codec *c, int threads, const float *x, int N, int D, uint64_t key,
                               const uint8_t *widths, size_t *bytes)
{
    const int before = actc_get_threads();
    actc_set_threads(threads);
    actc_codec_args a = make_args(N, D, 3, 0, key);
    a.sample_bits = widths;
    uint8_t *p = tu_encode(c, &a, x, (size_t)N * (size_t)D, bytes);
    actc_set_threads(before);
    return p;
}

static void test_determinism(void **state)
{
    (void)state;
    /* Large enough for the parallel paths, with tails in every sample. */
    enum { N = 16, D = 4100 };
    float *x = malloc((size_t)N * D * sizeof *x);
    fill_varied(x, (size_t)N * D, 21);
    uint8_t widths[N];
    for (int s = 0; s < N; s++) widths[s] = (uint8_t)(1 + s % 8);
    const actc_codec *codecs[3] = {&actc_codec_quant, &actc_codec_quant_tensor, &actc_codec_quant};
    for (int c = 0; c < 3; c++) {
        const uint8_t *w = c == 2 ? widths : NULL;
        size_t b1, b2, b3, b4;
        uint8_t *p1 = encode_threads(codecs[c], 1, x, N, D, 7, w, &b1);
        uint8_t *p2 = encode_threads(codecs[c], 2, x, N, D, 7, w, &b2);
        uint8_t *p3 = encode_threads(codecs[c], 3, x, N, D, 7, w, &b3);
        uint8_t *p4 = encode_threads(codecs[c], 2, x, N, D, 8, w, &b4);
        assert_int_equal(b1, b2);
        assert_int_equal(b1, b3);
        assert_memory_equal(p1, p2, b1);
        assert_memory_equal(p1, p3, b1);
        /* Another key: same meta, different codes. */
        assert_int_equal(b1, b4);
        assert_true(memcmp(p1, p4, b1) != 0);
        free(p1);
        free(p2);
        free(p3);
        free(p4);
    }
    free(x);
}

/* ------------------------------------------------------------------------ */
/* 7. Mixed precision                                                        */
/* ------------------------------------------------------------------------ */

static void test_mixed_precision(void **state)
{
    (void)state;
    enum { N = 4, D = 1000 };
    float x[N * D], y[N * D];
    /* The same values in every sample, so the samples' errors compare. */
    for (int i = 0; i < N * D; i++) x[i] = actc_rand_uniform(12, (uint64_t)(i % D)) * 4.0f - 1.0f;
    uint8_t widths[N] = {1, 8, 3, 5};
    actc_codec_args a = make_args(N, D, 2, 0, 3);
    a.sample_bits = widths;
    size_t bytes;
    uint8_t *p = tu_encode(&actc_codec_quant, &a, x, N * D, &bytes);
    /* The policy may change its widths after encode, or drop them; decode
     * must read the payload's copy either way. */
    widths[0] = widths[1] = widths[2] = widths[3] = 2;
    actc_codec_quant.decode(&a, p, N * D, y);
    float y2[N * D];
    a.sample_bits = NULL;
    actc_codec_quant.decode(&a, p, N * D, y2);
    assert_memory_equal(y, y2, sizeof y);
    const size_t gps = cdiv(D, ACTC_QUANT_GROUP);
    const int want[N] = {1, 8, 3, 5};
    double rms[N];
    for (int s = 0; s < N; s++) {
        assert_int_equal(p[4 * N * gps + (size_t)s], want[s]);
        double acc = 0.0;
        for (int i = 0; i < D; i++) {
            const size_t k = (size_t)s * D + (size_t)i;
            float z, r;
            meta_zr(p, group_of(k, D, ACTC_QUANT_GROUP), &z, &r);
            const double step = (double)r / ((1 << want[s]) - 1);
            assert_true(fabs((double)y[k] - x[k]) <= step * (1 + 1e-5) + 1e-6);
            acc += pow((double)y[k] - x[k], 2);
        }
        rms[s] = sqrt(acc / D);
    }
    /* Error shrinks with the width: 8 bits is ~255x finer than 1 bit. */
    assert_true(rms[1] < rms[0] / 50);
    assert_true(rms[1] < rms[3] && rms[3] < rms[2] && rms[2] < rms[0]);
    free(p);
}

/* ------------------------------------------------------------------------ */
/* decode_rows                                                               */
/* ------------------------------------------------------------------------ */

/* Rows are the first axis (for a 1-D tensor single elements, which cut
 * through the codec's groups and 8-element chunks); every row range decodes
 * to exactly the slice of the full decode and writes nothing past it. */
static void test_decode_rows(void **state)
{
    (void)state;
    const struct { int ndim, shape[3], G; } shapes[] = {
        {2, {5, 300, 0}, 100}, {2, {6, 13, 0}, 8}, {1, {1000, 0, 0}, 0}, {3, {4, 3, 7}, 0}, {1, {37, 0, 0}, 8}};
    const actc_codec *codecs[2] = {&actc_codec_quant, &actc_codec_quant_tensor};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int rows = shapes[s].shape[0];
        size_t n = 1;
        for (int d = 0; d < shapes[s].ndim; d++) n *= (size_t)shapes[s].shape[d];
        const size_t per_row = n / (size_t)rows;
        float *x = malloc(n * sizeof *x), *full = malloc(n * sizeof *full), *part = malloc((n + 8) * sizeof *part);
        fill_varied(x, n, 50 + s);
        for (int c = 0; c < 2; c++) {
            actc_codec_args a = make_args(rows, 1, 3, shapes[s].G, 9);
            a.ndim = shapes[s].ndim;
            memcpy(a.shape, shapes[s].shape, sizeof shapes[s].shape);
            uint8_t *payload;
            roundtrip(codecs[c], &a, x, n, full, &payload);
            assert_non_null(codecs[c]->decode_rows);
            const int step = rows > 40 ? 37 : 1;
            for (int r0 = 0; r0 < rows; r0 += step)
                for (int nr = 0; r0 + nr <= rows; nr += nr < 3 ? 1 : step + 2) {
                    const size_t m = (size_t)nr * per_row;
                    for (size_t i = 0; i < m + 8; i++) part[i] = -12345.0f;
                    codecs[c]->decode_rows(&a, payload, n, (size_t)r0, (size_t)nr, part);
                    assert_memory_equal(part, full + (size_t)r0 * per_row, m * sizeof *part);
                    for (size_t i = m; i < m + 8; i++) assert_true(part[i] == -12345.0f);
                }
            free(payload);
        }
        free(x);
        free(full);
        free(part);
    }
}

/* ------------------------------------------------------------------------ */
/* 8. Range statistics                                                       */
/* ------------------------------------------------------------------------ */

static void test_range_sq(void **state)
{
    (void)state;
    const struct { int N, D, G; } shapes[] = {{3, 700, 0}, {2, 1000, 100}, {1, 5, 0}, {64, 1030, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s].N, D = shapes[s].D;
        const size_t G = shapes[s].G ? (size_t)shapes[s].G : ACTC_QUANT_GROUP;
        float *x = malloc((size_t)N * D * sizeof *x);
        fill_varied(x, (size_t)N * D, 40 + s);
        double out[64];
        actc_quant_range_sq(x, N, (size_t)D, shapes[s].G, out);
        for (int n = 0; n < N; n++) {
            double want = 0.0;
            for (size_t j = 0; j < (size_t)D; j += G) {
                float lo = INFINITY, hi = -INFINITY;
                for (size_t i = j; i < j + G && i < (size_t)D; i++) {
                    lo = fminf(lo, x[(size_t)n * D + i]);
                    hi = fmaxf(hi, x[(size_t)n * D + i]);
                }
                want += ((double)hi - lo) * ((double)hi - lo);
            }
            assert_true(fabs(out[n] - want) <= 1e-12 * want);
        }
        free(x);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_within_step),
        cmocka_unit_test(test_meta_rounds_outwards),
        cmocka_unit_test(test_unbiased),
        cmocka_unit_test(test_variance),
        cmocka_unit_test(test_plan_bytes),
        cmocka_unit_test(test_payload_layout),
        cmocka_unit_test(test_edge_inputs),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_mixed_precision),
        cmocka_unit_test(test_decode_rows),
        cmocka_unit_test(test_range_sq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
