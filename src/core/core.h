/* Internal helpers of the core layer shared by the layers above it. */
#ifndef ACTC_CORE_H
#define ACTC_CORE_H
#include "actc.h"

/* The tape keeps a tensor's struct alive (for gradient routing) without
 * keeping its data alive: these count such references. */
void actc__tensor_tape_ref(actc_tensor *t);
void actc__tensor_tape_unref(actc_tensor *t);
/* A tensor of that shape without data yet (data NULL): for an operator that
 * must record its output before it decides where the output's data lives. */
actc_tensor *actc__tensor_header(actc_mem_cat cat, int ndim, const int *shape);
/* Give the header `to` its data: the buffer of `from` (if not NULL, of the
 * same size and category) when the caller's reference is its only one, so
 * nobody can read it again (from keeps its struct for the tape, but no
 * data); otherwise a new block of to's category.  Returns ACTC_OK, or
 * ACTC_ERR_OOM with the message set. */
actc_status actc__tensor_give_data(actc_tensor *to, actc_tensor *from);
/* Product of dims; 0 ndim -> 1 (scalar). */
size_t actc__numel(int ndim, const int *shape);
/* The share [*lo, *hi) of `total` items of the calling thread inside an
 * OpenMP parallel region (contiguous and in order, so a thread walks its
 * items in memory order); [0, total) outside one. */
void actc__thread_share(size_t total, size_t *lo, size_t *hi);
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
