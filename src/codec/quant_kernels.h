/* Kernels of the stochastic quantizer (quant_kernels.c), shared by the
 * per-group and the per-tensor codec (codec_quant.c).
 *
 * A "run" is a stretch of elements quantized with one zero point and range
 * and one random seed.  Its codes are a dense little-endian bit stream:
 * chunks of 8 elements take exactly b bytes (element k of a chunk at bits
 * k*b .. k*b+b-1), a final chunk of k < 8 elements takes ceil(k*b/8) bytes.
 * Element i of a run is rounded up when the top 24 bits of
 * lowbias32(seed + i), read as a fraction, are below the fraction of its
 * scaled value, so the bytes depend on (seed, i) only and any run can be
 * encoded by any thread.
 *
 * The per-group meta is 4 bytes: the zero point Z and the range R as
 * little-endian bfloat16, in that order. */
#ifndef ACTC_QUANT_KERNELS_H
#define ACTC_QUANT_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#include "../core/core.h"
#include "codec_math.h" /* the arithmetic, shared with the CUDA codecs */

/* Kernels are compiled once per x86 ISA level (core.h). */
#define QK_CLONES ACTC_ISA_CLONES

/* Meta of a run with raw minimum mn and maximum mx (NaNs excluded; mn > mx
 * means no finite value): Z = mn rounded down to bf16, R = mx - Z rounded up,
 * so Z + R >= mx holds exactly.  Saturates at the largest finite bf16 (the
 * encoder then clamps the values outside [Z, Z + R]). */
void actc__quant_meta(float mn, float mx, int bits, uint8_t meta[ACTC_QUANT_META]);
actc__qparams actc__quant_params(const uint8_t meta[ACTC_QUANT_META], int bits);

/* Minimum and maximum of x[0..n), NaNs ignored (+inf, -inf if none). */
void actc__quant_minmax(const float *x, size_t n, float *mn, float *mx);
/* The encoders may write the payload with non-temporal stores: every
 * thread that encoded calls this before the payload is read. */
void actc__quant_fence(void);
/* Quantize and pack a run of n elements with given parameters. */
void actc__quant_pack(const float *x, size_t n, actc__qparams p, uint32_t seed, uint8_t *out);
/* One group in one pass: min/max, meta, quantize, pack. */
void actc__quant_encode_group(const float *x, size_t n, int bits, uint32_t seed,
                              uint8_t meta[ACTC_QUANT_META], uint8_t *out);
/* nruns runs of len elements, consecutive in x: each encoded as by
 * actc__quant_encode_group with seeds[r], metas one after another (4 bytes
 * each), codes at out + r * actc__quant_run_bytes(len, bits). */
void actc__quant_encode_runs(const float *x, size_t nruns, size_t len, int bits, const uint32_t *seeds,
                             uint8_t *metas, uint8_t *out);
/* The inverse: runs laid out as encode_runs writes them, into out. */
void actc__quant_decode_runs(const uint8_t *in, size_t nruns, size_t len, int bits, const uint8_t *metas,
                             float *out);
/* The pieces of encode_runs / decode_runs for a caller that forms and
 * scales the values itself (DIVISION folds its residual into the scaling),
 * over byte codes (one per element, 0 .. 2^bits - 1):
 * meta_runs: the metas of n runs from their minima and maxima (as
 *   actc__quant_meta) and each run's parameters (as actc__quant_params);
 *   params_runs: the parameters from stored metas;
 * round: codes of n values already scaled to u = (x - Z) * B / R with the
 *   parameters' z and scale, element i drawing from hash input h0 + i (a
 *   run with seed s and its elements from i0 on: h0 = s + i0), the codes
 *   actc__quant_pack would pack;
 * pack_runs / unpack_runs: nruns runs of len byte codes, consecutive in q,
 *   to and from runs of packed codes actc__quant_run_bytes(len, bits) apart. */
void actc__quant_meta_runs(const float *mn, const float *mx, size_t n, int bits, uint8_t *metas, actc__qparams *p);
void actc__quant_params_runs(const uint8_t *metas, size_t n, int bits, actc__qparams *p);
void actc__quant_round(const float *u, size_t n, int bits, uint32_t h0, uint8_t *q);
void actc__quant_pack_runs(const uint8_t *q, size_t nruns, size_t len, int bits, uint8_t *out);
void actc__quant_unpack_runs(const uint8_t *in, size_t nruns, size_t len, int bits, uint8_t *q);
/* Unpack and dequantize a run of n elements. */
void actc__quant_unpack(const uint8_t *in, size_t n, actc__qparams p, float *out);
/* Elements [k, kend) of the run starting at `run` (k need not start a
 * chunk) into out[0 .. kend - k). */
void actc__quant_unpack_range(const uint8_t *run, size_t k, size_t kend, actc__qparams p, float *out);
#endif
