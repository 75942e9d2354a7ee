/* Arithmetic compiled by both the C compiler and nvcc (the CUDA codecs,
 * src/codec/cuda/), so the CPU and the GPU compute the same bits: every
 * function here is plain integer or IEEE float arithmetic, marked ACTC_HD,
 * which adds __host__ __device__ under nvcc.  Float expressions are written
 * so that no compiler may contract them: the C side is built -std=c11 (GCC
 * does not form FMAs in ISO mode), the CUDA files with -fmad=false. */
#ifndef ACTC_HOSTDEV_H
#define ACTC_HOSTDEV_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define ACTC_HD static inline __host__ __device__ __attribute__((always_inline))
#else
/* always_inline: these sit in the CPU kernels' vectorised loops. */
#define ACTC_HD static inline __attribute__((always_inline))
#endif

ACTC_HD uint32_t actc__float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
ACTC_HD float actc__bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A NaN's sign and payload are not the same on the two sides of the CUDA
 * codecs: a GPU's float arithmetic returns one canonical NaN (0x7FFFFFFF)
 * whatever its operands, x86 keeps an operand's NaN or makes 0xFFC00000
 * (inf - inf).  So no conversion below lets them through: every NaN
 * becomes its format's one quiet NaN. */

/* bf16 conversion with round-to-nearest-even; any NaN is 0x7FC0. */
ACTC_HD uint16_t actc__f32_to_bf16(float f)
{
    const uint32_t u = actc__float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7FC0u;
    const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding) >> 16);
}
ACTC_HD float actc__bf16_to_f32(uint16_t h) { return actc__bits_float((uint32_t)h << 16); }

/* IEEE half precision, in integers (the CUDA codecs' float16 tensors, so
 * no compiler's or device's own conversion decides a bit): to half with
 * round-to-nearest-even (overflow to inf, any NaN 0x7E00), and back
 * exactly. */
ACTC_HD uint16_t actc__f32_to_f16(float f)
{
    const uint32_t x = actc__float_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return 0x7E00u;
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520: rounds to inf */
    if (ax >= 0x38800000u) {                                   /* a normal half */
        const uint32_t r = ax + 0xFFFu + ((ax >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    const uint32_t e = ax >> 23;
    if (e < 102) return (uint16_t)sign; /* below 2^-25: rounds to 0 */
    /* A subnormal half: the value in units of 2^-24, rounded to even. */
    const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u, shift = 126 - e, half = 1u << (shift - 1);
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}
ACTC_HD float actc__f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 31) return actc__bits_float(sign | 0x7F800000u | (m << 13));
    if (e) return actc__bits_float(sign | ((e + 112) << 23) | (m << 13));
    if (!m) return actc__bits_float(sign);
    uint32_t ee = 113, mm = m;
    while (!(mm & 0x400u)) mm <<= 1, ee--;
    return actc__bits_float(sign | (ee << 23) | ((mm & 0x3FFu) << 13));
}

/* Element i of an array of dtype dt (actc_dtype: 0 float32, 1 bfloat16,
 * 2 float16) as a float, and a float stored into one (rounded to nearest
 * even). */
ACTC_HD float actc__load_dt(const void *x, int dt, size_t i)
{
    if (dt == 1) return actc__bf16_to_f32(((const uint16_t *)x)[i]);
    if (dt == 2) return actc__f16_to_f32(((const uint16_t *)x)[i]);
    return ((const float *)x)[i];
}
ACTC_HD void actc__store_dt(void *y, int dt, size_t i, float v)
{
    if (dt == 1)
        ((uint16_t *)y)[i] = actc__f32_to_bf16(v);
    else if (dt == 2)
        ((uint16_t *)y)[i] = actc__f32_to_f16(v);
    else
        ((float *)y)[i] = v;
}

/* SplitMix64's finaliser, and actc_rng_key (actc.h) built from it: the
 * seeds of the stochastic codecs' runs and blocks. */
ACTC_HD uint64_t actc__splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}
ACTC_HD uint64_t actc__rng_key(uint64_t a, uint64_t b, uint64_t c)
{
    return actc__splitmix64(actc__splitmix64(actc__splitmix64(a) ^ b) ^ c);
}

/* lowbias32 (C. Wellons' hash prospector): a 32-bit bijection with good
 * avalanche, two multiplies, vectorisable.  The stochastic rounding's
 * per-element random word (quant_kernels.h). */
ACTC_HD uint32_t actc__hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}
#endif
