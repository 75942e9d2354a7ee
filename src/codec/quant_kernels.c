/* Hot kernels of the stochastic quantizer; the layout they produce is
 * described in quant_kernels.h.
 *
 * Each kernel works on tiles of QK_TILE elements: quantize into a byte per
 * code (a loop of plain float/int arithmetic that vectorises), then pack the
 * bytes into b-bit fields (shift-and-or loops that vectorise for b = 1, 2,
 * 3, 4, 8; 64-bit shifts and masks on 8 codes at a time for 5..7).  The bit
 * width is a compile-time constant in every inner loop (a switch
 * instantiates the always-inline bodies once per width), so the masks and
 * shifts fold to constants.
 *
 * The build has no -march (binaries run on any x86-64), so the entry points
 * are compiled for x86-64-v4 (AVX-512), AVX2, x86-64-v2 (SSE4.2) and
 * baseline x86-64, and the loader picks one per CPU (GCC function
 * multi-versioning).  Every operation is exact IEEE arithmetic (no
 * approximations; the project's -std=c11 keeps GCC from contracting into
 * FMAs), so all versions produce the same bytes. */
#include "quant_kernels.h"
#include "../core/core.h"
#include <float.h>
#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define QK_INLINE static inline __attribute__((always_inline))

/* Codes of one tile are staged in a stack buffer that stays in L1; a
 * multiple of 8 so tiles start on chunk (byte) boundaries. */
#define QK_TILE 256

void actc__quant_meta(float mn, float mx, int bits, uint8_t meta[ACTC_QUANT_META])
{
    actc__quant_meta_of(mn, mx, actc__quant_clamp_bits(bits), meta);
}

actc__qparams actc__quant_params(const uint8_t meta[ACTC_QUANT_META], int bits)
{
    return actc__quant_params_of(meta, actc__quant_clamp_bits(bits));
}

/* ------------------------------------------------------------------------ */
/* Min / max                                                                 */
/* ------------------------------------------------------------------------ */

/* 32 independent lanes: four vector registers' worth of dependency chains,
 * so the loop runs at load speed rather than at min/max latency.  The
 * comparisons are written so a NaN never replaces a lane value. */
#define QK_LANES ACTC_QUANT_LANES
QK_INLINE void minmax_body(const float *x, size_t n, float *pmn, float *pmx)
{
    float mn[QK_LANES], mx[QK_LANES];
    for (int j = 0; j < QK_LANES; j++) {
        mn[j] = INFINITY;
        mx[j] = -INFINITY;
    }
    size_t i = 0;
    for (; i + QK_LANES <= n; i += QK_LANES)
        for (int j = 0; j < QK_LANES; j++) {
            actc__minmax_step(x[i + j], &mn[j], &mx[j]);
        }
    for (; i < n; i++) actc__minmax_step(x[i], &mn[0], &mx[0]);
    /* Halving steps, each a vector operation, not 31 scalar ones. */
    for (int w = QK_LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) {
            actc__minmax_merge(mn[j + w], mx[j + w], &mn[j], &mx[j]);
        }
    *pmn = mn[0];
    *pmx = mx[0];
}

QK_CLONES void actc__quant_minmax(const float *x, size_t n, float *mn, float *mx)
{
    minmax_body(x, n, mn, mx);
}

/* ------------------------------------------------------------------------ */
/* Quantize / dequantize one tile (byte codes)                               */
/* ------------------------------------------------------------------------ */

/* Codes of x[0..n) (n <= QK_TILE), run indices i0 + i. */
QK_INLINE void quantize_tile(const float *restrict x, size_t n, const actc__qparams p, uint32_t seed,
                             uint32_t i0, uint8_t *restrict q, const int b)
{
    const float z = p.z, scale = p.scale;
    const int32_t B = (1 << b) - 1, top = (int32_t)actc__float_bits((float)B);
    const uint32_t base = seed + i0;
    /* 32-bit counter: a size_t one makes the vectorised hash input a
     * 64-bit induction variable, narrowed with shuffles on every vector. */
    for (uint32_t i = 0; i < (uint32_t)n; i++) q[i] = actc__quant_round_code(actc__quant_scaled(x[i], z, scale), base + i, B, top);
}

QK_INLINE void dequantize_tile(const uint8_t *q, size_t n, const actc__qparams p, float *out)
{
    const float z = p.z, step = p.step;
    for (size_t i = 0; i < n; i++) out[i] = actc__quant_value(q[i], z, step);
}

/* ------------------------------------------------------------------------ */
/* Bit packing: 8 byte codes <-> b bytes                                     */
/* ------------------------------------------------------------------------ */

/* Little-endian byte order of the stream, whatever the host's. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define QK_LE16(w) __builtin_bswap16(w)
#define QK_LE32(w) __builtin_bswap32(w)
#define QK_LE64(w) __builtin_bswap64(w)
#else
#define QK_LE16(w) (w)
#define QK_LE32(w) (w)
#define QK_LE64(w) (w)
#endif
/* A partial word is composed from single bytes in registers: going through
 * a zeroed 8-byte variable in memory (memcpy of 3 bytes into it) makes the
 * CPU read back a word it wrote in pieces, a store-forwarding stall that
 * cost more than the rest of the decoder. */
QK_INLINE void store_le(uint8_t *p, uint64_t w, size_t nbytes)
{
    if (nbytes == 8) {
        w = QK_LE64(w);
        memcpy(p, &w, 8);
        return;
    }
    for (size_t k = 0; k < nbytes; k++) p[k] = (uint8_t)(w >> (8 * k));
}
QK_INLINE uint64_t load_le(const uint8_t *p, size_t nbytes)
{
    uint64_t w = 0;
    if (nbytes == 8) {
        memcpy(&w, p, 8);
        return QK_LE64(w);
    }
    for (size_t k = 0; k < nbytes; k++) w |= (uint64_t)p[k] << (8 * k);
    return w;
}

/* Widths dividing 8 put e = 8/b whole codes in a byte, code j at bit j*b.
 * Read the e byte codes of one output byte as one little-endian word (code j
 * at bit 8j): OR-ing it with itself shifted right by (8-b)*s for s = 1, 2,
 * 4, ... < e moves code j to bit j*b (doubling: each step merges twice as
 * many codes), and the low byte is the packed byte.  Unpacking shifts left
 * the same way and masks.  Plain loops over the bytes, one word type per
 * width, so the compiler vectorises them. */
#define QK_BYTEWISE(e, word, le)                                                                     \
    QK_INLINE void pack_bytes_##e(const uint8_t *restrict q, size_t nbytes, uint8_t *restrict out)  \
    {                                                                                                \
        const int b = 8 / (e);                                                                       \
        for (size_t k = 0; k < nbytes; k++) {                                                        \
            word w;                                                                                  \
            memcpy(&w, q + (e) * k, sizeof w);                                                       \
            w = le(w);                                                                               \
            for (int s = 1; s < (e); s *= 2) w |= (word)(w >> ((8 - b) * s));                        \
            out[k] = (uint8_t)w;                                                                     \
        }                                                                                            \
    }                                                                                                \
    QK_INLINE void unpack_bytes_##e(const uint8_t *restrict in, size_t nbytes, uint8_t *restrict q) \
    {                                                                                                \
        const int b = 8 / (e);                                                                       \
        const word mask = (word)actc__rep64(actc__low_mask(b), 8);                                                 \
        for (size_t k = 0; k < nbytes; k++) {                                                        \
            word w = in[k];                                                                          \
            for (int s = 1; s < (e); s *= 2) w |= (word)(w << ((8 - b) * s));                        \
            w = le((word)(w & mask));                                                                \
            memcpy(q + (e) * k, &w, sizeof w);                                                       \
        }                                                                                            \
    }
QK_BYTEWISE(8, uint64_t, QK_LE64) /* b = 1 */
QK_BYTEWISE(4, uint32_t, QK_LE32) /* b = 2 */
QK_BYTEWISE(2, uint16_t, QK_LE16) /* b = 4 */
#undef QK_BYTEWISE

/* Output byte m of a chunk as the OR of the (parts of) codes that overlap
 * it; with b constant every shift folds, and the loop over chunks
 * vectorises (8-byte load groups, b-byte store groups).  Faster than
 * actc__squeeze8() at b = 3 with AVX2 or AVX-512; at 5..7 GCC does not vectorise
 * it and actc__squeeze8() wins. */
QK_INLINE void pack_bytes_odd(const uint8_t *restrict q, size_t full, uint8_t *restrict out, const int b)
{
    for (size_t c = 0; c < full; c++) {
        const uint8_t *s = q + 8 * c;
        for (int m = 0; m < b; m++) {
            unsigned acc = 0;
            for (int j = 0; j < 8; j++) {
                const int sh = j * b - 8 * m;
                if (sh > -8 && sh < 8) acc |= sh >= 0 ? (unsigned)s[j] << sh : (unsigned)s[j] >> -sh;
            }
            out[c * b + m] = (uint8_t)acc;
        }
    }
}

/* How many of the `full` chunks of b bytes of a stretch of n codes can be
 * accessed as a whole 8-byte word without leaving the stretch's bytes. */
static inline size_t word_chunks(size_t n, int b, size_t full)
{
    const size_t nbytes = actc__quant_run_bytes(n, b);
    const size_t fit = nbytes >= 8 ? (nbytes - 8) / (size_t)b + 1 : 0;
    return fit < full ? fit : full;
}

/* n byte codes -> ceil(n*b/8) bytes.  A final partial chunk is padded with
 * zero codes and writes only its own bytes (the next run may belong to
 * another thread). */
QK_INLINE void pack_codes(const uint8_t *q, size_t n, uint8_t *out, const int b)
{
    const size_t full = n / 8;
    switch (b) {
    case 1: pack_bytes_8(q, full, out); break;
    case 2: pack_bytes_4(q, 2 * full, out); break;
    case 4: pack_bytes_2(q, 4 * full, out); break;
    case 8: memcpy(out, q, 8 * full); break;
    case 3: pack_bytes_odd(q, full, out, 3); break;
    default: {
        /* Chunks of b bytes: store whole 8-byte words while they end inside
         * this call's output (the excess bytes are zeros that the next chunk
         * overwrites), then exactly b bytes. */
        const size_t wide = word_chunks(n, b, full);
        for (size_t c = 0; c < wide; c++) store_le(out + c * b, actc__squeeze8(load_le(q + 8 * c, 8), b), 8);
        for (size_t c = wide; c < full; c++) store_le(out + c * b, actc__squeeze8(load_le(q + 8 * c, 8), b), (size_t)b);
    }
    }
    const size_t rest = n % 8;
    if (rest) {
        uint8_t tmp[8] = {0};
        memcpy(tmp, q + 8 * full, rest);
        store_le(out + full * b, actc__squeeze8(load_le(tmp, 8), b), actc__quant_run_bytes(rest, b));
    }
}

/* ceil(n*b/8) bytes -> n byte codes (reads only the run's own bytes). */
QK_INLINE void unpack_codes(const uint8_t *in, size_t n, uint8_t *q, const int b)
{
    const size_t full = n / 8;
    switch (b) {
    case 1: unpack_bytes_8(in, full, q); break;
    case 2: unpack_bytes_4(in, 2 * full, q); break;
    case 4: unpack_bytes_2(in, 4 * full, q); break;
    case 8: memcpy(q, in, 8 * full); break;
    default: {
        /* As in pack_codes: whole-word loads while they stay inside this
         * call's input (spread ignores the bits above 8b). */
        const size_t wide = word_chunks(n, b, full);
        for (size_t c = 0; c < wide; c++) store_le(q + 8 * c, actc__spread8(load_le(in + c * b, 8), b), 8);
        for (size_t c = wide; c < full; c++) store_le(q + 8 * c, actc__spread8(load_le(in + c * b, (size_t)b), b), 8);
    }
    }
    const size_t rest = n % 8;
    if (rest) {
        uint8_t tmp[8];
        store_le(tmp, actc__spread8(load_le(in + full * b, actc__quant_run_bytes(rest, b)), b), 8);
        memcpy(q + 8 * full, tmp, rest);
    }
}

/* ------------------------------------------------------------------------ */
/* Runs                                                                      */
/* ------------------------------------------------------------------------ */

/* Whole tiles whose bytes start on a 16-byte boundary are written with
 * non-temporal stores: the payload is read back only in the backward pass,
 * long after the forward pass has streamed everything else through the
 * caches, and bypassing them saves reading every output line before writing
 * it (a third more memory traffic at 8 bits).  A full tile is 32*b bytes, so
 * in a 16-byte aligned data section every full group is aligned.  Partial
 * or misaligned tiles use ordinary stores: mixing both kinds in one cache
 * line costs more than it saves.  The writer calls actc__quant_fence before
 * the payload is read. */
QK_INLINE void store_tile(uint8_t *out, const uint8_t *q, size_t m, const int b)
{
#if defined(__SSE2__)
    if (m == QK_TILE && ((uintptr_t)out & 15) == 0) {
        uint8_t packed[QK_TILE];
        pack_codes(q, m, packed, b);
        for (int k = 0; k < QK_TILE / 8 * b; k += 16)
            _mm_stream_si128((__m128i *)(void *)(out + k), _mm_loadu_si128((const __m128i *)(const void *)(packed + k)));
        return;
    }
#endif
    pack_codes(q, m, out, b);
}

void actc__quant_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

QK_INLINE void pack_run(const float *x, size_t n, const actc__qparams p, uint32_t seed, uint8_t *out, const int b)
{
    uint8_t q[QK_TILE];
    for (size_t t = 0; t < n; t += QK_TILE) {
        const size_t m = n - t < QK_TILE ? n - t : QK_TILE;
        quantize_tile(x + t, m, p, seed, (uint32_t)t, q, b);
        store_tile(out + t / 8 * b, q, m, b);
    }
}

QK_INLINE void unpack_run(const uint8_t *in, size_t n, const actc__qparams p, float *out, const int b)
{
    uint8_t q[QK_TILE];
    for (size_t t = 0; t < n; t += QK_TILE) {
        const size_t m = n - t < QK_TILE ? n - t : QK_TILE;
        if (b == 8) {
            /* The bytes are the codes already. */
            dequantize_tile(in + t, m, p, out + t);
        } else {
            unpack_codes(in + t / 8 * b, m, q, b);
            dequantize_tile(q, m, p, out + t);
        }
    }
}

/* The switches give every width its own copy of the body with b constant. */
#define QK_DISPATCH(b, call)                                                                         \
    switch (b) {                                                                                     \
    case 1: call(1); break;                                                                          \
    case 2: call(2); break;                                                                          \
    case 3: call(3); break;                                                                          \
    case 4: call(4); break;                                                                          \
    case 5: call(5); break;                                                                          \
    case 6: call(6); break;                                                                          \
    case 7: call(7); break;                                                                          \
    default: call(8); break;                                                                         \
    }

QK_CLONES void actc__quant_pack(const float *x, size_t n, actc__qparams p, uint32_t seed, uint8_t *out)
{
#define QK_PACK(B) pack_run(x, n, p, seed, out, B)
    QK_DISPATCH(p.bits, QK_PACK)
#undef QK_PACK
}

void actc__quant_encode_group(const float *x, size_t n, int bits, uint32_t seed, uint8_t meta[ACTC_QUANT_META],
                              uint8_t *out)
{
    actc__quant_encode_runs(x, 1, n, bits, &seed, meta, out);
}

QK_CLONES void actc__quant_unpack(const uint8_t *in, size_t n, actc__qparams p, float *out)
{
#define QK_UNPACK(B) unpack_run(in, n, p, out, B)
    QK_DISPATCH(p.bits, QK_UNPACK)
#undef QK_UNPACK
}

void actc__quant_meta_runs(const float *mn, const float *mx, size_t n, int bits, uint8_t *metas, actc__qparams *p)
{
    bits = actc__quant_clamp_bits(bits);
    for (size_t r = 0; r < n; r++) {
        actc__quant_meta_of(mn[r], mx[r], bits, metas + r * ACTC_QUANT_META);
        p[r] = actc__quant_params_of(metas + r * ACTC_QUANT_META, bits);
    }
}

void actc__quant_params_runs(const uint8_t *metas, size_t n, int bits, actc__qparams *p)
{
    bits = actc__quant_clamp_bits(bits);
    for (size_t r = 0; r < n; r++) p[r] = actc__quant_params_of(metas + r * ACTC_QUANT_META, bits);
}

QK_CLONES void actc__quant_round(const float *u, size_t n, int bits, uint32_t h0, uint8_t *q)
{
    bits = actc__quant_clamp_bits(bits);
    const int32_t B = (1 << bits) - 1, top = (int32_t)actc__float_bits((float)B);
    for (uint32_t i = 0; i < (uint32_t)n; i++) q[i] = actc__quant_round_code(u[i], h0 + i, B, top);
}

/* Runs of whole bytes (len * bits a multiple of 8) follow each other in the
 * stream exactly as one run of all their codes would: one call then. */
QK_CLONES void actc__quant_pack_runs(const uint8_t *q, size_t nruns, size_t len, int bits, uint8_t *out)
{
    bits = actc__quant_clamp_bits(bits);
    if (len * (size_t)bits % 8 == 0) len *= nruns, nruns = 1;
    const size_t stride = actc__quant_run_bytes(len, bits);
#define QK_RUNS(B)                                                                                   \
    for (size_t r = 0; r < nruns; r++) pack_codes(q + r * len, len, out + r * stride, B);
    QK_DISPATCH(bits, QK_RUNS)
#undef QK_RUNS
}

QK_CLONES void actc__quant_unpack_runs(const uint8_t *in, size_t nruns, size_t len, int bits, uint8_t *q)
{
    bits = actc__quant_clamp_bits(bits);
    if (len * (size_t)bits % 8 == 0) len *= nruns, nruns = 1;
    const size_t stride = actc__quant_run_bytes(len, bits);
#define QK_RUNS(B)                                                                                   \
    for (size_t r = 0; r < nruns; r++) unpack_codes(in + r * stride, len, q + r * len, B);
    QK_DISPATCH(bits, QK_RUNS)
#undef QK_RUNS
}

/* Runs one after another: the loop inside the width dispatch, so many short
 * runs (DIVISION's 7x7 planes) pay the dispatch and call once. */
QK_CLONES void actc__quant_encode_runs(const float *x, size_t nruns, size_t len, int bits, const uint32_t *seeds,
                                       uint8_t *metas, uint8_t *out)
{
    bits = actc__quant_clamp_bits(bits);
    const size_t stride = actc__quant_run_bytes(len, bits);
#define QK_RUNS(B)                                                                                   \
    for (size_t r = 0; r < nruns; r++) {                                                             \
        const float *xr = x + r * len;                                                               \
        uint8_t *meta = metas + r * ACTC_QUANT_META;                                                 \
        float mn, mx;                                                                                \
        minmax_body(xr, len, &mn, &mx);                                                              \
        actc__quant_meta_of(mn, mx, B, meta);                                                                    \
        pack_run(xr, len, actc__quant_params_of(meta, B), seeds[r], out + r * stride, B);                        \
    }
    QK_DISPATCH(bits, QK_RUNS)
#undef QK_RUNS
}

QK_CLONES void actc__quant_decode_runs(const uint8_t *in, size_t nruns, size_t len, int bits, const uint8_t *metas,
                                       float *out)
{
    bits = actc__quant_clamp_bits(bits);
    const size_t stride = actc__quant_run_bytes(len, bits);
#define QK_RUNS(B)                                                                                   \
    for (size_t r = 0; r < nruns; r++)                                                               \
        unpack_run(in + r * stride, len, actc__quant_params_of(metas + r * ACTC_QUANT_META, B), out + r * len, B);
    QK_DISPATCH(bits, QK_RUNS)
#undef QK_RUNS
}

void actc__quant_unpack_range(const uint8_t *run, size_t k, size_t kend, actc__qparams p, float *out)
{
    if (k >= kend) return;
    const size_t head = k % 8;
    if (head) {
        /* A cut chunk: decode it whole (it starts on a byte) and keep the
         * wanted part. */
        const size_t k8 = k - head, m = kend - k8 < 8 ? kend - k8 : 8;
        float tmp[8];
        actc__quant_unpack(run + k8 / 8 * (size_t)p.bits, m, p, tmp);
        memcpy(out, tmp + head, (m - head) * sizeof *out);
        out += m - head;
        k = k8 + m;
    }
    if (k < kend) actc__quant_unpack(run + k / 8 * (size_t)p.bits, kend - k, p, out);
}
