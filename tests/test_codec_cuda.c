/* The CUDA codecs' pieces that need no device: the shared arithmetic the
 * kernels use where it differs from the CPU codecs' own path (the 8-bit
 * map's binary search, the float16 conversions), the ranges' edge cases on
 * the CPU side, and the entry points' refusals on this machine (no GPU; or
 * a build without CUDA).  The kernels themselves run in gpu_codecs: on a
 * GPU (tests/gpu/run.sh), and in every build on CUDA emulated on the CPU
 * (gpu_codecs_emu, tests/gpu/emu), against the CPU codecs' bytes. */
#include "testutil.h"
#include "codec/codec.h"
#include "codec_cases.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ActNN's per-sample ranges on the CPU, where the kernels must agree
 * (gpu_codecs compares them): a group of one infinity among NaNs has range
 * 0, not inf - inf (a NaN whose bits differ between CPUs and GPUs); the
 * scratch the CUDA entry point asks for. */
static void test_range_sq_edges(void **state)
{
    (void)state;
    float odd[2 * 300];
    for (int i = 0; i < 600; i++) odd[i] = i < 256 ? (i == 7 ? INFINITY : NAN) : (float)(i % 13);
    double r[2];
    actc_quant_range_sq(odd, 2, 300, 0, r);
    assert_true(r[0] == 144.0 && r[1] == 144.0 + 144.0);
    assert_int_equal(actc_cuda_range_sq_len(8, 256 * 40 + 17), 8 + 8 * 41);
    assert_int_equal(actc_cuda_range_sq_len(0, 100), 0);
}

/* No payload depends on a NaN's payload bits, nor on the sign of a NaN the
 * arithmetic made (hostdev.h: a GPU's arithmetic makes one canonical +NaN,
 * x86 keeps an operand's or makes -NaN of inf - inf): every codec case but
 * fp32 (which copies the input's bits, on both sides) encodes the "NaN and
 * inf" input, whose NaNs are of five kinds, to the bytes it gives with
 * every NaN the default one of the same sign (an input NaN's sign is the
 * input's: the quantizer's code and FP4's sign bit follow it on both
 * sides); a block mean of inf - inf is 0x7FC00000 and its residuals code B
 * whatever the CPU's default NaN; a decoded NaN is 0x7FC00000; the
 * conversions take any NaN alike. */
static void test_nan_bits_reach_no_payload(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        if (strcmp(CASES[c].spec, "fp32") == 0) continue;
        uint8_t widths[16];
        for (int s = 0; s < 16; s++) widths[s] = (uint8_t)(1 + (s * 3) % 8);
        const uint8_t *sbits = CASES[c].mixed ? widths : NULL;
        actc_codec_plan p;
        assert_int_equal(actc_codec_plan_make(CASES[c].spec, CASES[c].ndim, CASES[c].shape, 7, sbits, &p), ACTC_OK);
        const size_t n = p.numel;
        float *x = make_input(n, IN_NONFINITE), *plain = malloc(n * sizeof *plain), *y = malloc(n * sizeof *y);
        uint8_t *a = malloc(p.bytes), *b = malloc(p.bytes);
        assert_true(plain && y && a && b);
        for (size_t i = 0; i < n; i++) plain[i] = isnan(x[i]) ? copysignf(NAN, x[i]) : x[i];
        assert_int_equal(actc_codec_encode(&p, x, sbits, a, p.bytes), ACTC_OK);
        assert_int_equal(actc_codec_encode(&p, plain, sbits, b, p.bytes), ACTC_OK);
        if (memcmp(a, b, p.bytes) != 0) {
            size_t i = 0;
            while (a[i] == b[i]) i++;
            fail_msg("%s: payload byte %zu differs with NaNs of other signs or payloads (%#x, %#x)", p.codec, i, a[i],
                     b[i]);
        }
        assert_int_equal(actc_codec_decode(&p, a, p.bytes, y), ACTC_OK);
        for (size_t i = 0; i < n; i++)
            if (isnan(y[i]) && actc__float_bits(y[i]) != 0x7FC00000u)
                fail_msg("%s: decoded element %zu is the NaN %#x", p.codec, i, actc__float_bits(y[i]));
        free(x), free(plain), free(y), free(a), free(b);
    }
    for (size_t k = 0; k < 5; k++) {
        const float f = nan_kind(k);
        assert_int_equal(actc__f32_to_bf16(f), 0x7FC0);
        assert_int_equal(actc__f32_to_f16(f), 0x7E00);
    }
    const float d = actc__div_scaled(INFINITY, INFINITY, 0.0f, 1.0f);
    assert_int_equal(actc__float_bits(d), 0x7FC00000u);
    assert_int_equal(actc__quant_round_code(d, 1, 3, (int32_t)actc__float_bits(3.0f)), 3);
    assert_int_equal(actc__float_bits(actc__div_value(1, 0.0f, 1.0f, NAN)), 0x7FC00000u);
}

/* The binary search of the GPU against the CPU's bucket table, on and
 * around every midpoint of the 8-bit map and on the non-finite values. */
static void test_dyn8_search_matches_buckets(void **state)
{
    (void)state;
    const float *mid = actc__dyn8_mids();
    float probe[255 * 5 + 6];
    size_t n = 0;
    for (int j = 0; j < 255; j++) {
        probe[n++] = mid[j];
        probe[n++] = nextafterf(mid[j], INFINITY);
        probe[n++] = nextafterf(mid[j], -INFINITY);
        probe[n++] = nextafterf(nextafterf(mid[j], INFINITY), INFINITY);
        probe[n++] = nextafterf(nextafterf(mid[j], -INFINITY), -INFINITY);
    }
    const float special[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1.0f};
    for (size_t k = 0; k < 6; k++) probe[n++] = special[k];
    /* One block of absmax 1: the codes are the map's codes of the values. */
    const int shape[1] = {(int)n};
    actc_codec_plan p;
    assert_int_equal(actc_codec_plan_make("dyn8,block=4096", 1, shape, 0, NULL, &p), ACTC_OK);
    probe[n - 1] = 1.0f; /* the absmax stays 1 (inf is not finite) */
    uint8_t *cpu = malloc(p.bytes);
    assert_non_null(cpu);
    assert_int_equal(actc_codec_encode(&p, probe, NULL, cpu, p.bytes), ACTC_OK);
    uint32_t amax;
    memcpy(&amax, cpu, 4); /* little endian */
    assert_int_equal(amax, actc__float_bits(1.0f));
    for (size_t i = 0; i < n; i++)
        if (cpu[4 + i] != actc__dyn8_search(probe[i] / 1.0f, mid))
            fail_msg("dyn8 code of %a: %d by buckets, %d by search", (double)probe[i], cpu[4 + i],
                     actc__dyn8_search(probe[i], mid));
    free(cpu);
}

/* The float16 conversions the kernels read and write half tensors with:
 * every half widens exactly and narrows back to itself; rounding to
 * nearest even at the edges of the normal and subnormal ranges. */
static void test_half_conversions(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = actc__f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            assert_true((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu));
            continue;
        }
        assert_int_equal(actc__f32_to_f16(f), h);
    }
    const struct {
        float f;
        uint16_t h;
    } known[] = {{1.0f, 0x3C00}, {-2.0f, 0xC000}, {65504.0f, 0x7BFF}, {65519.0f, 0x7BFF}, {65520.0f, 0x7C00},
                 {1e10f, 0x7C00}, {0x1p-24f, 0x0001}, {0x1p-25f, 0x0000}, {0x1.8p-25f, 0x0001},
                 {0x1.8p-24f, 0x0002}, {0x1p-14f, 0x0400}, {0x1.ffcp-15f, 0x0400}, {-0.0f, 0x8000},
                 {1.0f + 0x1p-11f, 0x3C00}, {1.0f + 0x1.8p-10f, 0x3C02}, {INFINITY, 0x7C00}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (actc__f32_to_f16(known[i].f) != known[i].h)
            fail_msg("float16 of %a: %#06x, expected %#06x", (double)known[i].f, actc__f32_to_f16(known[i].f),
                     known[i].h);
}

/* ---- the entry points on this machine ----------------------------------- */

static void expect_refused(actc_status got, actc_status want, const char *needle, const uint8_t *buf, size_t n)
{
    assert_int_equal(got, want);
    if (!strstr(actc_last_error(), needle)) fail_msg("'%s' lacks '%s'", actc_last_error(), needle);
    for (size_t i = 0; i < n; i++) assert_int_equal(buf[i], 0xA5);
}

static void test_entry_points_refuse(void **state)
{
    (void)state;
    const int shape[2] = {4, 64};
    _Alignas(16) float x[256] = {0};
    _Alignas(16) uint8_t buf[512];
    memset(buf, 0xA5, sizeof buf);
    actc_codec_plan p, div;
    assert_int_equal(actc_codec_plan_make("quant:2", 2, shape, 1, NULL, &p), ACTC_OK);
    assert_int_equal(actc_codec_plan_make("division:hfc-only", 2, shape, 1, NULL, &div), ACTC_OK);
    if (!actc_cuda_built()) {
        expect_refused(actc_cuda_encode(&p, x, ACTC_FLOAT32, NULL, buf, sizeof buf, NULL), ACTC_ERR_STATE,
                       "built without CUDA", buf, sizeof buf);
        expect_refused(actc_cuda_decode(&p, buf, sizeof buf, x, ACTC_FLOAT32, NULL), ACTC_ERR_STATE,
                       "built without CUDA", buf, sizeof buf);
        assert_int_equal(actc_cuda_device_count(), 0);
        expect_refused(actc_cuda_range_sq(x, ACTC_FLOAT32, 4, 64, (double *)buf, 64, NULL), ACTC_ERR_STATE,
                       "built without CUDA", buf, sizeof buf);
        return;
    }
    double *out = (double *)buf; /* 64 doubles */
    expect_refused(actc_cuda_range_sq(x, (actc_dtype)7, 4, 64, out, 64, NULL), ACTC_ERR_INVALID, "dtype 7", buf,
                   sizeof buf);
    expect_refused(actc_cuda_range_sq(x, ACTC_FLOAT32, 4, 64, out, 7, NULL), ACTC_ERR_INVALID, "needs 8", buf,
                   sizeof buf);
    expect_refused(actc_cuda_range_sq(x, ACTC_FLOAT32, 0, 64, out, 64, NULL), ACTC_ERR_INVALID, "empty", buf,
                   sizeof buf);
    expect_refused(actc_cuda_range_sq(x, ACTC_FLOAT32, 4, 64, (double *)(buf + 4), 60, NULL), ACTC_ERR_INVALID,
                   "misaligned", buf, sizeof buf);
    const int gpus = actc_cuda_device_count();
    const actc_status rh = actc_cuda_range_sq(x, ACTC_FLOAT32, 4, 64, out, 64, NULL);
    if (gpus > 0)
        expect_refused(rh, ACTC_ERR_INVALID, "not device memory", buf, sizeof buf);
    else
        expect_refused(rh, ACTC_ERR_DEVICE, "actc_cuda_range_sq", buf, sizeof buf);
    /* Checked before any device is asked. */
    expect_refused(actc_cuda_encode(&div, x, ACTC_FLOAT32, NULL, buf, sizeof buf, NULL), ACTC_ERR_INVALID,
                   "no CUDA kernels", buf, sizeof buf);
    expect_refused(actc_cuda_encode(&p, x, ACTC_FLOAT32, NULL, buf, 3, NULL), ACTC_ERR_INVALID, "holds 3 bytes",
                   buf, sizeof buf);
    expect_refused(actc_cuda_encode(&p, x, (actc_dtype)7, NULL, buf, sizeof buf, NULL), ACTC_ERR_INVALID,
                   "dtype 7", buf, sizeof buf);
    expect_refused(actc_cuda_encode(&p, x, ACTC_FLOAT32, NULL, buf + 1, sizeof buf - 1, NULL), ACTC_ERR_INVALID,
                   "misaligned", buf, sizeof buf);
    expect_refused(actc_cuda_encode(&p, x, ACTC_FLOAT32, NULL, (uint8_t *)x + 512, p.bytes, NULL), ACTC_ERR_INVALID,
                   "overlap", buf, sizeof buf);
    expect_refused(actc_cuda_range_sq(x, ACTC_FLOAT32, 4, 64, (double *)(x + 8), 64, NULL), ACTC_ERR_INVALID,
                   "overlap", buf, sizeof buf);
    const uint8_t widths[4] = {2, 2, 2, 2};
    const actc_status st = actc_cuda_encode(&p, x, ACTC_FLOAT32, widths, buf, sizeof buf, NULL);
    assert_int_not_equal(st, ACTC_OK);
    /* Host memory: "not device memory" with a GPU, the runtime's own
     * refusal without one; nothing written either way. */
    const actc_status host = actc_cuda_encode(&p, x, ACTC_FLOAT32, NULL, buf, sizeof buf, NULL);
    if (gpus > 0)
        expect_refused(host, ACTC_ERR_INVALID, "not device memory", buf, sizeof buf);
    else
        expect_refused(host, ACTC_ERR_DEVICE, "actc_cuda_encode", buf, sizeof buf);
    const actc_status hd = actc_cuda_decode(&p, buf, sizeof buf, x, ACTC_BFLOAT16, NULL);
    assert_true(hd == ACTC_ERR_INVALID || hd == ACTC_ERR_DEVICE);
    for (size_t i = 0; i < 256; i++) assert_true(x[i] == 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range_sq_edges),
        cmocka_unit_test(test_nan_bits_reach_no_payload),
        cmocka_unit_test(test_dyn8_search_matches_buckets),
        cmocka_unit_test(test_half_conversions),
        cmocka_unit_test(test_entry_points_refuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
