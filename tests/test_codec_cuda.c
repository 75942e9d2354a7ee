/* The CUDA codecs without a GPU: every kernel's work replayed on the CPU,
 * unit by unit and lane by lane in the kernels' order (src/codec/cuda/
 * codec_cuda.cu: a warp per group or block, 8-element chunks or code
 * pairs per lane, the min/max merged by shuffles), through the same shared
 * arithmetic (codec_math.h) and the same views of the plan, must give the
 * CPU codecs' payload bytes and decoded values exactly, on random and
 * adversarial inputs.  The GPU's own run of the same comparison is
 * tests/gpu/gpu_codecs.c.  And the entry points refuse bad calls without
 * touching the buffers, on this machine (no GPU; or a build without CUDA). */
#include "testutil.h"
#include "codec/codec.h"
#include "codec/cuda/codec_cuda.h"
#include "codec/cuda/division_plane.h"
#include "codec_cases.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LANES 32

/* ---- the kernels, replayed ---------------------------------------------- */

static size_t sample_bytes(const actc__cu_quant *q, int b)
{
    return q->full * actc__quant_run_bytes(q->G, b) + actc__quant_run_bytes(q->tail, b);
}

/* group_offset() of the kernel: the group's first data byte and width. */
static size_t group_offset(const actc__cu_quant *q, const uint8_t *widths, size_t g, int *bits)
{
    const size_t s = g / q->gps, j = g % q->gps;
    const int b = widths ? actc__quant_clamp_bits(widths[s]) : q->bits;
    *bits = b;
    size_t off = j * actc__quant_run_bytes(q->G, b);
    if (!widths) return off + s * sample_bytes(q, b);
    for (size_t k = 0; k < s; k++) off += sample_bytes(q, actc__quant_clamp_bits(widths[k]));
    return off;
}

/* The warp's min/max: lanes by element, then shuffles down (every lane
 * reads the others' values of the previous round). */
static void warp_minmax(const float *x, size_t len, float *pmn, float *pmx)
{
    float mn[LANES], mx[LANES];
    for (int l = 0; l < LANES; l++) mn[l] = INFINITY, mx[l] = -INFINITY;
    const size_t rows = len / LANES * LANES;
    for (size_t i = 0; i < rows; i++) actc__minmax_step(x[i], &mn[i % LANES], &mx[i % LANES]);
    for (size_t i = rows; i < len; i++) actc__minmax_step(x[i], &mn[0], &mx[0]);
    for (int w = LANES / 2; w > 0; w /= 2) {
        float omn[LANES], omx[LANES];
        for (int l = 0; l < LANES; l++) {
            omn[l] = l + w < LANES ? mn[l + w] : mn[l];
            omx[l] = l + w < LANES ? mx[l + w] : mx[l];
        }
        for (int l = 0; l < LANES; l++) actc__minmax_merge(omn[l], omx[l], &mn[l], &mx[l]);
    }
    *pmn = mn[0];
    *pmx = mx[0];
}

static void quant_encode(const float *x, const actc__cu_quant *q, const uint8_t *sbits, uint8_t *payload)
{
    const size_t ng = q->N * q->gps;
    uint8_t *widths = q->mixed ? payload + ng * ACTC_QUANT_META : NULL;
    uint8_t *data = payload + ng * ACTC_QUANT_META + (q->mixed ? q->N : 0);
    for (size_t s = 0; widths && s < q->N; s++) widths[s] = (uint8_t)actc__quant_clamp_bits(sbits ? sbits[s] : q->bits);
    for (size_t g = 0; g < ng; g++) {
        int b;
        const size_t off = group_offset(q, widths, g, &b), len = g % q->gps < q->full ? q->G : q->tail;
        const float *xg = x + g / q->gps * q->D + g % q->gps * q->G;
        float mn, mx;
        warp_minmax(xg, len, &mn, &mx);
        uint8_t *meta = payload + g * ACTC_QUANT_META;
        actc__quant_meta_of(mn, mx, b, meta);
        const actc__qparams p = actc__quant_params_of(meta, b);
        const uint32_t seed = actc__quant_group_seed(q->key, g);
        for (size_t c0 = 0; c0 < len; c0 += 8) { /* lane c0 / 8 % 32's chunk */
            const int m = len - c0 < 8 ? (int)(len - c0) : 8;
            const uint64_t w = actc__quant_chunk_pack(xg + c0, m, p, seed, (uint32_t)c0);
            for (size_t k = 0; k < actc__quant_run_bytes((size_t)m, b); k++)
                data[off + c0 / 8 * (size_t)b + k] = (uint8_t)(w >> (8 * k));
        }
    }
}

static void quant_decode(const uint8_t *payload, const actc__cu_quant *q, float *y)
{
    const size_t ng = q->N * q->gps;
    const uint8_t *widths = q->mixed ? payload + ng * ACTC_QUANT_META : NULL;
    const uint8_t *data = payload + ng * ACTC_QUANT_META + (q->mixed ? q->N : 0);
    for (size_t g = 0; g < ng; g++) {
        int b;
        const size_t off = group_offset(q, widths, g, &b), len = g % q->gps < q->full ? q->G : q->tail;
        float *yg = y + g / q->gps * q->D + g % q->gps * q->G;
        const actc__qparams p = actc__quant_params_of(payload + g * ACTC_QUANT_META, b);
        for (size_t c0 = 0; c0 < len; c0 += 8) {
            const int m = len - c0 < 8 ? (int)(len - c0) : 8;
            uint64_t w = 0;
            for (size_t k = 0; k < actc__quant_run_bytes((size_t)m, b); k++)
                w |= (uint64_t)data[off + c0 / 8 * (size_t)b + k] << (8 * k);
            float v[8];
            actc__quant_chunk_values(w, m, p, v);
            memcpy(yg + c0, v, (size_t)m * sizeof *v);
        }
    }
}

static uint32_t block_absmax_bits(const float *x, size_t len)
{
    int32_t lane[LANES] = {0};
    for (size_t i = 0; i < len; i++) {
        const int32_t b = actc__absmax_bits(x[i]);
        lane[i % LANES] = b > lane[i % LANES] ? b : lane[i % LANES];
    }
    int32_t m = 0;
    for (int l = 0; l < LANES; l++) m = lane[l] > m ? lane[l] : m;
    return (uint32_t)m;
}

static void put_le32(uint8_t *p, uint32_t u)
{
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(u >> (8 * k));
}
static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void block4_encode(const float *x, const actc__cu_block4 *c, uint8_t *payload)
{
    uint8_t *codes = payload + 4 * c->nb;
    for (size_t blk = 0; blk < c->nb; blk++) {
        const size_t s = blk * c->B, len = c->n - s < c->B ? c->n - s : c->B;
        const uint32_t mb = block_absmax_bits(x + s, len);
        const float amax = actc__bits_float(mb);
        put_le32(payload + 4 * blk, mb);
        const uint32_t seed = c->sr ? actc__b4_seed(c->key, blk) : 0u;
        for (size_t i = 0; i < len; i += 2) {
            const uint8_t hi = actc__b4_code(x[s + i], amax, &c->L, c->sr, seed, (uint32_t)i);
            const uint8_t lo =
                i + 1 < len ? actc__b4_code(x[s + i + 1], amax, &c->L, c->sr, seed, (uint32_t)i + 1) : (uint8_t)0;
            codes[(s + i) / 2] = (uint8_t)(hi << 4 | lo);
        }
    }
}

static void block4_decode(const uint8_t *payload, const actc__cu_block4 *c, float *y)
{
    const uint8_t *codes = payload + 4 * c->nb;
    for (size_t k = 0; k < (c->n + 1) / 2; k++) {
        const size_t e = 2 * k;
        const float amax = actc__bits_float(get_le32(payload + 4 * (e / c->B)));
        y[e] = c->L.value[codes[k] >> 4] * amax;
        if (e + 1 < c->n) y[e + 1] = c->L.value[codes[k] & 15] * amax;
    }
}

static void dyn8_encode(const float *x, const actc__cu_dyn8 *c, uint8_t *payload)
{
    uint8_t *codes = payload + 4 * c->nb;
    for (size_t blk = 0; blk < c->nb; blk++) {
        const size_t s = blk * c->B, len = c->n - s < c->B ? c->n - s : c->B;
        const uint32_t mb = block_absmax_bits(x + s, len);
        put_le32(payload + 4 * blk, mb);
        for (size_t i = 0; i < len; i++) codes[s + i] = actc__dyn8_search(x[s + i] / actc__bits_float(mb), c->mid);
    }
}

static void dyn8_decode(const uint8_t *payload, const actc__cu_dyn8 *c, float *y)
{
    for (size_t i = 0; i < c->n; i++)
        y[i] = c->map[payload[4 * c->nb + i]] * actc__bits_float(get_le32(payload + 4 * (i / c->B)));
}

/* DIVISION's kernels: a CUDA block of DIVB threads per plane; thread t
 * takes blocks t, t + DIVB, ...; warp w tiles w, w + DIVB / 32, ...; thread
 * 0 folds every thread's picks, in thread order. */
#define DIVB 128
static void division_encode(const float *x, const actc__cu_division *d, uint8_t *payload)
{
    const actc__div_view *v = &d->v;
    const size_t P = v->S * v->C;
    uint16_t *lfc = (uint16_t *)(void *)(payload + P * v->meta_sz);
    uint8_t *codes = payload + P * (v->meta_sz + v->lfc_sz);
    const int small = v->M <= ACTC_DIV_STACK_PLANE;
    float *r = malloc(ACTC_DIV_TILE * sizeof *r);
    assert_non_null(r);
    for (size_t p = 0; p < P; p++) {
        const size_t base = actc__div_plane_base(v, p);
        uint16_t *pl = lfc + p * v->nb;
        actc__div_pick mn[DIVB], mx[DIVB];
        for (int t = 0; t < DIVB; t++) mn[t] = actc__div_pick_none(1), mx[t] = actc__div_pick_none(0);
        if (small && v->nb == 1) {
            pl[0] = actc__div_single(v, x, 0, base, &mn[0].v, &mx[0].v);
            mn[0].i = mx[0].i = 0;
        } else {
            for (size_t b = 0; b < v->nb; b++) {
                float lo, hi;
                pl[b] = actc__div_block_mean(v, x, 0, base, b, &lo, &hi);
                if (small) actc__div_pick_min(&mn[b % DIVB], lo, b), actc__div_pick_max(&mx[b % DIVB], hi, b);
            }
            for (size_t t = 0; !small && t < actc__div_tiles(v); t++) {
                const size_t t0 = t * ACTC_DIV_TILE, len = actc__div_min(ACTC_DIV_TILE, v->M - t0);
                for (size_t u = 0; u < len; u++) r[u] = actc__div_residual(v, x, 0, base, pl, t0 + u);
                float a, b;
                warp_minmax(r, len, &a, &b);
                const size_t lane0 = t % (DIVB / LANES) * LANES;
                actc__div_pick_min(&mn[lane0], a, t), actc__div_pick_max(&mx[lane0], b, t);
            }
        }
        for (int t = 1; t < DIVB; t++) {
            actc__div_pick_min(&mn[0], mn[t].v, mn[t].i);
            actc__div_pick_max(&mx[0], mx[t].v, mx[t].i);
        }
        if (v->mode == ACTC_DIV_LFC_ONLY) continue;
        uint8_t *meta = payload + p * ACTC_QUANT_META;
        actc__quant_meta_of(mn[0].v, mx[0].v, v->q, meta);
        const actc__qparams qp = actc__quant_params_of(meta, v->q);
        for (size_t c = 0; 8 * c < v->M; c++) {
            int m;
            const uint64_t w = actc__div_chunk_codes(v, x, 0, base, pl, c, qp, d->seed + (uint32_t)(p * v->M), &m);
            for (size_t k = 0; k < actc__quant_run_bytes((size_t)m, v->q); k++)
                codes[p * v->code_sz + c * (size_t)v->q + k] = (uint8_t)(w >> (8 * k));
        }
    }
    free(r);
}

static void division_decode(const uint8_t *payload, const actc__cu_division *d, float *y)
{
    const actc__div_view *v = &d->v;
    const size_t P = v->S * v->C;
    const uint16_t *lfc = (const uint16_t *)(const void *)(payload + P * v->meta_sz);
    const uint8_t *codes = payload + P * (v->meta_sz + v->lfc_sz);
    for (size_t p = 0; p < P; p++) {
        const size_t base = actc__div_plane_base(v, p);
        actc__qparams qp = {0.0f, 0.0f, 0.0f, v->q};
        if (v->mode != ACTC_DIV_LFC_ONLY) qp = actc__quant_params_of(payload + p * ACTC_QUANT_META, v->q);
        for (size_t c0 = 0; c0 < v->M; c0 += 8) {
            const int m = v->M - c0 < 8 ? (int)(v->M - c0) : 8;
            uint64_t w = 0;
            if (v->mode != ACTC_DIV_LFC_ONLY) {
                for (size_t k = 0; k < actc__quant_run_bytes((size_t)m, v->q); k++)
                    w |= (uint64_t)codes[p * v->code_sz + c0 / 8 * (size_t)v->q + k] << (8 * k);
                w = actc__spread8(w, v->q);
            }
            for (int k = 0; k < m; k++)
                y[base + (c0 + (size_t)k) * v->stride] =
                    actc__div_decoded(v, lfc + p * v->nb, c0 + (size_t)k, (unsigned)(w >> (8 * k)) & 0xFFu, qp);
        }
    }
}

static void mask_encode(const float *x, size_t n, uint8_t *payload)
{
    for (size_t k = 0; k < (n + 7) / 8; k++) {
        unsigned v = 0;
        for (size_t j = 0; j < 8 && 8 * k + j < n; j++) v |= actc__mask_bit(x[8 * k + j]) << j;
        payload[k] = (uint8_t)v;
    }
}

/* The replayed kernels' payload and decode of x under plan p. */
static void replay(const actc_codec_plan *p, const float *x, const uint8_t *sbits, uint8_t *payload, float *y)
{
    const size_t n = p->numel;
    if (strncmp(p->codec, "quant", 5) == 0) {
        const actc__cu_quant q = actc__cu_quant_of(p);
        quant_encode(x, &q, sbits, payload);
        quant_decode(payload, &q, y);
    } else if (strncmp(p->codec, "dyn8", 4) == 0) {
        const actc__cu_dyn8 d = actc__cu_dyn8_of(p);
        dyn8_encode(x, &d, payload);
        dyn8_decode(payload, &d, y);
    } else if (strncmp(p->codec, "division", 8) == 0) {
        const actc__cu_division d = actc__cu_division_of(p);
        division_encode(x, &d, payload);
        division_decode(payload, &d, y);
    } else if (strcmp(p->codec, "mask") == 0) {
        mask_encode(x, n, payload);
        for (size_t i = 0; i < n; i++) y[i] = (float)((payload[i / 8] >> (i % 8)) & 1u);
    } else if (strcmp(p->codec, "bf16") == 0) {
        for (size_t i = 0; i < n; i++) {
            const uint16_t h = actc__f32_to_bf16(x[i]);
            memcpy(payload + 2 * i, &h, 2);
            y[i] = actc__bf16_to_f32(h);
        }
    } else if (strcmp(p->codec, "fp32") == 0) {
        memcpy(payload, x, n * sizeof *x);
        memcpy(y, x, n * sizeof *x);
    } else {
        const actc__cu_block4 b = actc__cu_block4_of(p);
        block4_encode(x, &b, payload);
        block4_decode(payload, &b, y);
    }
}

static void test_kernels_replayed_match_cpu(void **state)
{
    (void)state;
    int compared = 0;
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        const cuda_case *k = &CASES[c];
        uint8_t widths[16];
        for (int s = 0; s < 16; s++) widths[s] = (uint8_t)(1 + (s * 3) % 8);
        const uint8_t *sbits = k->mixed ? widths : NULL;
        actc_codec_plan p;
        assert_int_equal(actc_codec_plan_make(k->spec, k->ndim, k->shape, 1000 + c, sbits, &p), ACTC_OK);
        for (int kind = 0; kind < N_INPUTS; kind++) {
            float *x = make_input(p.numel, kind);
            uint8_t *cpu = calloc(p.bytes + 1, 1), *gpu = calloc(p.bytes + 1, 1);
            float *ycpu = malloc(p.numel * sizeof *ycpu), *ygpu = malloc(p.numel * sizeof *ygpu);
            assert_true(cpu && gpu && ycpu && ygpu);
            assert_int_equal(actc_codec_encode(&p, x, sbits, cpu, p.bytes), ACTC_OK);
            assert_int_equal(actc_codec_decode(&p, cpu, p.bytes, ycpu), ACTC_OK);
            replay(&p, x, sbits, gpu, ygpu);
            if (memcmp(cpu, gpu, p.bytes) != 0) {
                size_t i = 0;
                while (cpu[i] == gpu[i]) i++;
                fail_msg("%s on %s input: payload byte %zu of %zu is %#x on the CPU, %#x replayed", p.codec,
                         INPUT_NAMES[kind], i, p.bytes, cpu[i], gpu[i]);
            }
            if (memcmp(ycpu, ygpu, p.numel * sizeof *ycpu) != 0)
                fail_msg("%s on %s input: the decoded values differ", p.codec, INPUT_NAMES[kind]);
            compared++;
            free(x), free(cpu), free(gpu), free(ycpu), free(ygpu);
        }
    }
    assert_int_equal(compared, (int)(sizeof CASES / sizeof CASES[0]) * N_INPUTS);
}

/* range_groups_k and range_fold_k replayed: a warp per group's term, then
 * per sample lane l sums groups l, l + 32, ... and the lanes fold down by
 * shuffles; bit for bit the planner's actc_quant_range_sq. */
static void range_sq_replayed(const float *x, size_t N, size_t D, double *out)
{
    const size_t G = ACTC_QUANT_GROUP, gps = (D + G - 1) / G;
    for (size_t s = 0; s < N; s++) {
        double lane[LANES] = {0};
        for (size_t g = 0; g < gps; g++) {
            float mn, mx;
            warp_minmax(x + s * D + g * G, D - g * G < G ? D - g * G : G, &mn, &mx);
            lane[g % LANES] += actc__range_sq_term(mn, mx);
        }
        for (int w = LANES / 2; w > 0; w /= 2) {
            double down[LANES];
            for (int l = 0; l < LANES; l++) down[l] = l + w < LANES ? lane[l + w] : lane[l];
            for (int l = 0; l < LANES; l++) lane[l] += down[l];
        }
        out[s] = lane[0];
    }
}

static void test_range_sq_replayed_match_cpu(void **state)
{
    (void)state;
    const struct { size_t N, D; } shapes[] = {{1, 5}, {3, 700}, {8, 256 * 40 + 17}, {16, 256}, {2, 256 * 70}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const size_t N = shapes[k].N, D = shapes[k].D;
        for (int kind = 0; kind < N_INPUTS; kind++) {
            float *x = make_input(N * D, kind);
            double cpu[16], gpu[16];
            actc_quant_range_sq(x, (int)N, D, 0, cpu);
            range_sq_replayed(x, N, D, gpu);
            for (size_t s = 0; s < N; s++)
                if (memcmp(&cpu[s], &gpu[s], sizeof(double)) != 0)
                    fail_msg("ranges of %zu x %zu (%s input), sample %zu: %a on the CPU, %a replayed", N, D,
                             INPUT_NAMES[kind], s, cpu[s], gpu[s]);
            free(x);
        }
    }
    /* A group of one infinity among NaNs has range 0, not inf - inf (a NaN
     * whose bits differ between CPUs and GPUs). */
    float odd[2 * 300];
    for (int i = 0; i < 600; i++) odd[i] = i < 256 ? (i == 7 ? INFINITY : NAN) : (float)(i % 13);
    double r[2], rr[2];
    actc_quant_range_sq(odd, 2, 300, 0, r);
    range_sq_replayed(odd, 2, 300, rr);
    assert_true(r[0] == 144.0 && r[1] == 144.0 + 144.0 && memcmp(r, rr, sizeof r) == 0);
    assert_int_equal(actc_cuda_range_sq_len(8, 256 * 40 + 17), 8 + 8 * 41);
    assert_int_equal(actc_cuda_range_sq_len(0, 100), 0);
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
    assert_int_equal(get_le32(cpu), actc__float_bits(1.0f));
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
    float x[256] = {0};
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
        cmocka_unit_test(test_kernels_replayed_match_cpu),
        cmocka_unit_test(test_range_sq_replayed_match_cpu),
        cmocka_unit_test(test_dyn8_search_matches_buckets),
        cmocka_unit_test(test_half_conversions),
        cmocka_unit_test(test_entry_points_refuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
