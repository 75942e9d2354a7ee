/* The CUDA codecs' launchers (codec_cuda.cu), called by the public entry
 * points in ../codec_cuda.c after every check: each launches its kernels on
 * `stream` (a cudaStream_t) and returns the launch's cudaError_t (0 on
 * success).  Pointers are device memory; x and y hold n elements of dtype
 * dt (an actc_dtype); payloads are laid out as the CPU codec's. */
#ifndef ACTC_CODEC_CUDA_H
#define ACTC_CODEC_CUDA_H
#include "actc.h"
#include "../codec_math.h"
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* The per-group quantizer's layout (codec_quant.c): N samples of D
 * elements, groups of G (gps per sample, `full` whole ones and a tail),
 * `bits` everywhere or, with mixed, the widths in the payload after the
 * metas. */
typedef struct {
    size_t N, D, G, gps, full, tail;
    int bits, mixed;
    uint64_t key;
} actc__cu_quant;

/* Up to ACTC_CU_WIDTHS per-sample widths, passed by value to the kernel
 * that writes them into a payload (a kernel's parameters: 4 KiB). */
#define ACTC_CU_WIDTHS 2048
typedef struct {
    size_t n;
    uint8_t b[ACTC_CU_WIDTHS];
} actc__cu_widths;

/* 4-bit block-wise: n elements in blocks of B (a power of two >= 32). */
typedef struct {
    size_t n, B, nb;
    int sr;
    uint64_t key;
    actc__b4_levels L;
} actc__cu_block4;

/* 8-bit dynamic map: n elements in blocks of B (any B >= 1). */
typedef struct {
    size_t n, B, nb;
    float map[256], mid[256];
} actc__cu_dyn8;

/* DIVISION: the codec's view (codec_math.h) and its seed. */
typedef struct {
    actc__div_view v;
    uint32_t seed;
} actc__cu_division;

/* The views of a plan from actc_codec_plan_make (codec_cuda_views.c). */
actc__cu_quant actc__cu_quant_of(const actc_codec_plan *plan);
actc__cu_block4 actc__cu_block4_of(const actc_codec_plan *plan);
actc__cu_dyn8 actc__cu_dyn8_of(const actc_codec_plan *plan);
actc__cu_division actc__cu_division_of(const actc_codec_plan *plan);

/* With q->mixed, sample_bits (host memory, N widths; NULL: q->bits) go
 * into the payload first. */
int actc__cu_quant_encode(const void *x, int dt, const actc__cu_quant *q, const uint8_t *sample_bits,
                          uint8_t *payload, void *stream);
int actc__cu_quant_decode(const uint8_t *payload, const actc__cu_quant *q, void *y, int dt, void *stream);
/* ActNN's per-sample ranges of x ([N, D], groups of G): out[0..N) the
 * sums, out[N..N + N * ceil(D / G)) the groups' terms (scratch). */
int actc__cu_range_sq(const void *x, int dt, size_t N, size_t D, size_t G, double *out, void *stream);
int actc__cu_block4_encode(const void *x, int dt, const actc__cu_block4 *b, uint8_t *payload, void *stream);
int actc__cu_block4_decode(const uint8_t *payload, const actc__cu_block4 *b, void *y, int dt, void *stream);
int actc__cu_dyn8_encode(const void *x, int dt, const actc__cu_dyn8 *d, uint8_t *payload, void *stream);
int actc__cu_dyn8_decode(const uint8_t *payload, const actc__cu_dyn8 *d, void *y, int dt, void *stream);
int actc__cu_division_encode(const void *x, int dt, const actc__cu_division *d, uint8_t *payload, void *stream);
int actc__cu_division_decode(const uint8_t *payload, const actc__cu_division *d, void *y, int dt, void *stream);
/* mask: bit i = x[i] > 0; bf16: round to nearest even; fp32: the values. */
int actc__cu_mask_encode(const void *x, int dt, size_t n, uint8_t *payload, void *stream);
int actc__cu_mask_decode(const uint8_t *payload, size_t n, void *y, int dt, void *stream);
int actc__cu_bf16_encode(const void *x, int dt, size_t n, uint8_t *payload, void *stream);
int actc__cu_bf16_decode(const uint8_t *payload, size_t n, void *y, int dt, void *stream);
int actc__cu_fp32_encode(const void *x, int dt, size_t n, uint8_t *payload, void *stream);
int actc__cu_fp32_decode(const uint8_t *payload, size_t n, void *y, int dt, void *stream);

#ifdef __cplusplus
}
#endif
#endif
