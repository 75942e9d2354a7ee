/* Internal helpers of the core layer shared by the layers above it. */
#ifndef ACTC_CORE_H
#define ACTC_CORE_H
#include "actc.h"

/* The tape keeps a tensor's struct alive (for gradient routing) without
 * keeping its data alive: these count such references. */
void actc__tensor_tape_ref(actc_tensor *t);
void actc__tensor_tape_unref(actc_tensor *t);
/* Product of dims; 0 ndim -> 1 (scalar). */
size_t actc__numel(int ndim, const int *shape);
/* Minimum of two sizes. */
static inline size_t actc__min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* bf16 conversion with round-to-nearest-even (NaN kept quiet). */
static inline uint16_t actc__f32_to_bf16(float f)
{
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + rounding) >> 16);
}
static inline float actc__bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}
#endif
