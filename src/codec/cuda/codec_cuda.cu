/* The codecs' kernels on NVIDIA GPUs.  Every rounding rule, meta, table
 * lookup and seed comes from ../codec_math.h, which the CPU codecs use too;
 * this file only distributes the work and reproduces the CPU's order where
 * order matters (the min/max lanes of a quantizer group), so the payloads
 * are byte for byte the CPU's.  Built with -fmad=false (CMakeLists.txt):
 * nvcc would otherwise fuse the decoders' z + code * step into an FMA,
 * which rounds once where the CPU rounds twice.
 *
 * Work units: one warp per quantizer group or block-wise block (the warp
 * reduces the group's min/max or absmax with shuffles, then each lane
 * encodes whole 8-element chunks or 2-element code bytes), one thread per
 * element or code byte for the element-wise codecs.  Every kernel walks its
 * units in a grid-stride loop, so any size fits the grid. */
#include "codec_cuda.h"
#include "division_plane.h"
#include <cuda_runtime.h>

#define WARP 32
#define FULL_MASK 0xFFFFFFFFu
#define THREADS 256 /* per CUDA block: 8 warps */
#define MAX_BLOCKS (1u << 20)

/* ------------------------------------------------------------------------ */
/* Element access: the caller's dtype (actc_dtype) to and from float, by     */
/* hostdev.h's conversions (exact widening; rounding to nearest even)        */
/* ------------------------------------------------------------------------ */

/* With DT a constant, the shared loaders' dtype branches fold away. */
template <int DT> __device__ __forceinline__ float ld(const void *x, size_t i) { return actc__load_dt(x, DT, i); }
template <int DT> __device__ __forceinline__ void st(void *y, size_t i, float v) { actc__store_dt(y, DT, i, v); }
/* With dt a kernel argument (DIVISION's kernels, one version for all). */
__device__ __forceinline__ void st_dt(void *y, int dt, size_t i, float v) { actc__store_dt(y, dt, i, v); }

/* A 16-bit element's bits to float and back (DT 1 bfloat16, 2 float16):
 * the conversions ld and st make. */
template <int DT> __device__ __forceinline__ float from16(uint32_t u)
{
    return DT == 1 ? actc__bf16_to_f32((uint16_t)u) : actc__f16_to_f32((uint16_t)u);
}
template <int DT> __device__ __forceinline__ uint32_t to16(float v)
{
    return DT == 1 ? actc__f32_to_bf16(v) : actc__f32_to_f16(v);
}

/* Elements i .. i + 7 (a lane's chunk of 8): with 16-byte loads and stores
 * where the address is 16-byte aligned (every chunk of a tensor whose rows
 * hold a multiple of 8 elements: torch's and cudaMalloc's buffers are
 * aligned), one element at a time elsewhere; the same values either way.
 * A warp's lanes then move 32 contiguous bytes each (fp32) instead of 8
 * words 32 bytes apart, a quarter of the memory instructions. */
template <int DT> __device__ __forceinline__ void ld8(const void *x, size_t i, float v[8])
{
    if (DT == 0) {
        const float *p = (const float *)x + i;
        if (((uintptr_t)p & 15u) == 0) {
            const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
            return;
        }
    } else {
        const uint16_t *p = (const uint16_t *)x + i;
        if (((uintptr_t)p & 15u) == 0) {
            const uint4 a = *(const uint4 *)p; /* little endian: element 2k in word k's low half */
            const uint32_t w[4] = {a.x, a.y, a.z, a.w};
            for (int k = 0; k < 4; k++) v[2 * k] = from16<DT>(w[k] & 0xFFFFu), v[2 * k + 1] = from16<DT>(w[k] >> 16);
            return;
        }
    }
    for (int k = 0; k < 8; k++) v[k] = ld<DT>(x, i + k);
}
template <int DT> __device__ __forceinline__ void st8(void *y, size_t i, const float v[8])
{
    if (DT == 0) {
        float *p = (float *)y + i;
        if (((uintptr_t)p & 15u) == 0) {
            ((float4 *)p)[0] = make_float4(v[0], v[1], v[2], v[3]);
            ((float4 *)p)[1] = make_float4(v[4], v[5], v[6], v[7]);
            return;
        }
    } else {
        uint16_t *p = (uint16_t *)y + i;
        if (((uintptr_t)p & 15u) == 0) {
            uint32_t w[4];
            for (int k = 0; k < 4; k++) w[k] = to16<DT>(v[2 * k]) | to16<DT>(v[2 * k + 1]) << 16;
            *(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
            return;
        }
    }
    for (int k = 0; k < 8; k++) st<DT>(y, i + k, v[k]);
}
/* Elements i and i + 1, one 8-byte (fp32) or 4-byte store where aligned. */
template <int DT> __device__ __forceinline__ void st2(void *y, size_t i, float a, float b)
{
    if (DT == 0) {
        float *p = (float *)y + i;
        if (((uintptr_t)p & 7u) == 0) {
            *(float2 *)p = make_float2(a, b);
            return;
        }
    } else {
        uint16_t *p = (uint16_t *)y + i;
        if (((uintptr_t)p & 3u) == 0) {
            *(uint32_t *)p = to16<DT>(a) | to16<DT>(b) << 16;
            return;
        }
    }
    st<DT>(y, i, a);
    st<DT>(y, i + 1, b);
}

/* A launcher's body: kernel K<dt> (dt 0..2: float32, bfloat16, float16)
 * launched, and the launch's error returned. */
#define LAUNCH_DT(dt, K, grid, stream, ...)                                                            \
    do {                                                                                               \
        cudaStream_t s_ = (cudaStream_t)(stream);                                                      \
        switch (dt) {                                                                                  \
        case 0: K<0><<<(grid), THREADS, 0, s_>>>(__VA_ARGS__); break;                                 \
        case 1: K<1><<<(grid), THREADS, 0, s_>>>(__VA_ARGS__); break;                                 \
        case 2: K<2><<<(grid), THREADS, 0, s_>>>(__VA_ARGS__); break;                                 \
        default: return (int)cudaErrorInvalidValue;                                                    \
        }                                                                                              \
        return (int)cudaGetLastError();                                                                \
    } while (0)

static unsigned grid_of(size_t units, size_t per_block)
{
    const size_t g = (units + per_block - 1) / per_block;
    return g == 0 ? 1u : g > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)g;
}
/* Grids of warps (one unit each) and of threads. */
static unsigned warp_grid(size_t units) { return grid_of(units, THREADS / WARP); }
static unsigned thread_grid(size_t units) { return grid_of(units, THREADS); }

#define WARP_LOOP(u, units)                                                                            \
    const int lane = (int)(threadIdx.x % WARP);                                                        \
    const size_t nwarps_ = (size_t)gridDim.x * (THREADS / WARP);                                       \
    for (size_t u = (size_t)blockIdx.x * (THREADS / WARP) + threadIdx.x / WARP; u < (units); u += nwarps_)
#define THREAD_LOOP(i, units)                                                                          \
    for (size_t i = (size_t)blockIdx.x * THREADS + threadIdx.x; i < (units); i += (size_t)gridDim.x * THREADS)

/* A block's absmax word: the payload is 16-byte aligned (the entry points
 * check) and the words come first, so each is 4-byte aligned; the GPU is
 * little endian, as the payload's words are. */
__device__ __forceinline__ void put_le32(uint8_t *p, uint32_t u) { *(uint32_t *)p = u; }
__device__ __forceinline__ uint32_t get_le32(const uint8_t *p) { return *(const uint32_t *)p; }

/* ------------------------------------------------------------------------ */
/* Per-group stochastic quantizer                                            */
/* ------------------------------------------------------------------------ */

__device__ __forceinline__ size_t sample_bytes(const actc__cu_quant &q, int b)
{
    return q.full * actc__quant_run_bytes(q.G, b) + actc__quant_run_bytes(q.tail, b);
}

/* Where group g's codes start in the data section, and its width. */
__device__ __forceinline__ size_t group_offset(const actc__cu_quant &q, const uint8_t *widths, size_t g, int lane,
                                               int *bits)
{
    const size_t s = g / q.gps, j = g % q.gps;
    const int b = widths ? actc__quant_clamp_bits(widths[s]) : q.bits;
    *bits = b;
    size_t off = j * actc__quant_run_bytes(q.G, b);
    if (!widths) return off + s * sample_bytes(q, b);
    /* Mixed widths: the samples before s, summed by the warp. */
    unsigned long long sum = 0;
    for (size_t k = (size_t)lane; k < s; k += WARP) sum += sample_bytes(q, actc__quant_clamp_bits(widths[k]));
    for (int w = WARP / 2; w > 0; w /= 2) sum += __shfl_xor_sync(FULL_MASK, sum, w);
    return off + (size_t)sum;
}

__device__ __forceinline__ size_t group_len(const actc__cu_quant &q, size_t g)
{
    return g % q.gps < q.full ? q.G : q.tail;
}

/* A run's minimum and maximum (NaNs ignored) in the CPU's lane order
 * (codec_math.h): whole rows of 32 by lane, the rest on lane 0, lanes
 * merged downwards; every lane gets the result. */
template <int DT>
__device__ __forceinline__ void group_minmax(const void *x, size_t elem, size_t len, int lane, float *pmn, float *pmx)
{
    float mn = INFINITY, mx = -INFINITY;
    const size_t rows = len / WARP * WARP;
    /* Unrolled: a group of 256 is 8 independent loads in flight per lane. */
#pragma unroll 8
    for (size_t i = (size_t)lane; i < rows; i += WARP) actc__minmax_step(ld<DT>(x, elem + i), &mn, &mx);
    if (lane == 0)
        for (size_t i = rows; i < len; i++) actc__minmax_step(ld<DT>(x, elem + i), &mn, &mx);
    for (int w = WARP / 2; w > 0; w /= 2) {
        const float omn = __shfl_down_sync(FULL_MASK, mn, w), omx = __shfl_down_sync(FULL_MASK, mx, w);
        actc__minmax_merge(omn, omx, &mn, &mx);
    }
    *pmn = __shfl_sync(FULL_MASK, mn, 0);
    *pmx = __shfl_sync(FULL_MASK, mx, 0);
}

/* Per-sample widths (clamped) written into the payload from a kernel
 * parameter: no host buffer for the stream to read later, no pageable
 * copy (which may synchronise), and safe to capture in a CUDA graph. */
static __global__ void widths_k(actc__cu_widths w, uint8_t *dst)
{
    for (size_t i = threadIdx.x; i < w.n; i += blockDim.x) dst[i] = w.b[i];
}

template <int DT> __global__ void quant_encode_k(const void *__restrict__ x, actc__cu_quant q, uint8_t *payload)
{
    const size_t ng = q.N * q.gps;
    uint8_t *metas = payload;
    const uint8_t *widths = q.mixed ? payload + ng * ACTC_QUANT_META : NULL;
    uint8_t *data = payload + ng * ACTC_QUANT_META + (q.mixed ? q.N : 0);
    WARP_LOOP(g, ng)
    {
        int b;
        const size_t off = group_offset(q, widths, g, lane, &b), len = group_len(q, g);
        const size_t elem = g / q.gps * q.D + g % q.gps * q.G;
        float mn, mx;
        group_minmax<DT>(x, elem, len, lane, &mn, &mx);
        uint8_t meta[ACTC_QUANT_META];
        actc__quant_meta_of(mn, mx, b, meta);
        if (lane == 0)
            for (int k = 0; k < ACTC_QUANT_META; k++) metas[g * ACTC_QUANT_META + k] = meta[k];
        const actc__qparams p = actc__quant_params_of(meta, b);
        const uint32_t seed = actc__quant_group_seed(q.key, g);
        uint8_t *out = data + off;
        for (size_t c0 = 8 * (size_t)lane; c0 < len; c0 += 8 * WARP) {
            const int m = len - c0 < 8 ? (int)(len - c0) : 8;
            float v[8];
            if (m == 8)
                ld8<DT>(x, elem + c0, v);
            else
                for (int k = 0; k < m; k++) v[k] = ld<DT>(x, elem + c0 + k);
            const uint64_t w = actc__quant_chunk_pack(v, m, p, seed, (uint32_t)c0);
            const size_t nb = actc__quant_run_bytes((size_t)m, b);
            for (size_t k = 0; k < nb; k++) out[c0 / 8 * (size_t)b + k] = (uint8_t)(w >> (8 * k));
        }
    }
}

template <int DT> __global__ void quant_decode_k(const uint8_t *payload, actc__cu_quant q, void *__restrict__ y)
{
    const size_t ng = q.N * q.gps;
    const uint8_t *metas = payload;
    const uint8_t *widths = q.mixed ? payload + ng * ACTC_QUANT_META : NULL;
    const uint8_t *data = payload + ng * ACTC_QUANT_META + (q.mixed ? q.N : 0);
    WARP_LOOP(g, ng)
    {
        int b;
        const size_t off = group_offset(q, widths, g, lane, &b), len = group_len(q, g);
        const size_t elem = g / q.gps * q.D + g % q.gps * q.G;
        const actc__qparams p = actc__quant_params_of(metas + g * ACTC_QUANT_META, b);
        const uint8_t *in = data + off;
        for (size_t c0 = 8 * (size_t)lane; c0 < len; c0 += 8 * WARP) {
            const int m = len - c0 < 8 ? (int)(len - c0) : 8;
            const size_t nb = actc__quant_run_bytes((size_t)m, b);
            uint64_t w = 0;
            for (size_t k = 0; k < nb; k++) w |= (uint64_t)in[c0 / 8 * (size_t)b + k] << (8 * k);
            float v[8];
            actc__quant_chunk_values(w, m, p, v);
            if (m == 8)
                st8<DT>(y, elem + c0, v);
            else
                for (int k = 0; k < m; k++) st<DT>(y, elem + c0 + k, v[k]);
        }
    }
}

/* ActNN's per-sample ranges (actc_cuda_range_sq): a warp per group writes
 * its (max - min)^2 to part[], then a warp per sample folds its groups in
 * codec_math.h's order (actc__range_sq_term), as actc_quant_range_sq does. */
template <int DT>
__global__ void range_groups_k(const void *__restrict__ x, size_t N, size_t D, size_t G, double *part)
{
    const size_t gps = (D + G - 1) / G;
    WARP_LOOP(g, N * gps)
    {
        const size_t j = g % gps * G, len = D - j < G ? D - j : G;
        float mn, mx;
        group_minmax<DT>(x, g / gps * D + j, len, lane, &mn, &mx);
        if (lane == 0) part[g] = actc__range_sq_term(mn, mx);
    }
}

static __global__ void range_fold_k(const double *__restrict__ part, size_t N, size_t gps, double *out)
{
    WARP_LOOP(s, N)
    {
        double acc = 0.0;
        for (size_t g = (size_t)lane; g < gps; g += WARP) acc += part[s * gps + g];
        for (int w = WARP / 2; w > 0; w /= 2) acc += __shfl_down_sync(FULL_MASK, acc, w);
        if (lane == 0) out[s] = acc;
    }
}

/* ------------------------------------------------------------------------ */
/* 4-bit block-wise                                                          */
/* ------------------------------------------------------------------------ */

/* max |x| over a warp's block (finite elements), on the bit patterns. */
template <int DT> __device__ __forceinline__ int32_t block_absmax_bits(const void *x, size_t s, size_t len, int lane)
{
    int32_t m = 0;
    for (size_t i = (size_t)lane; i < len; i += WARP) m = max(m, actc__absmax_bits(ld<DT>(x, s + i)));
    for (int w = WARP / 2; w > 0; w /= 2) m = max(m, __shfl_xor_sync(FULL_MASK, m, w));
    return m;
}

template <int DT> __global__ void block4_encode_k(const void *__restrict__ x, actc__cu_block4 c, uint8_t *payload)
{
    __shared__ actc__b4_levels L;
    if (threadIdx.x == 0) L = c.L;
    __syncthreads();
    uint8_t *absmax = payload, *codes = payload + 4 * c.nb;
    WARP_LOOP(blk, c.nb)
    {
        const size_t s = blk * c.B, len = c.n - s < c.B ? c.n - s : c.B;
        const int32_t mb = block_absmax_bits<DT>(x, s, len, lane);
        const float amax = actc__bits_float((uint32_t)mb);
        if (lane == 0) put_le32(absmax + 4 * blk, (uint32_t)mb);
        const uint32_t seed = c.sr ? actc__b4_seed(c.key, blk) : 0u;
        for (size_t pr = (size_t)lane; pr < (len + 1) / 2; pr += WARP) {
            const size_t i = 2 * pr;
            const uint8_t hi = actc__b4_code(ld<DT>(x, s + i), amax, &L, c.sr, seed, (uint32_t)i);
            const uint8_t lo = i + 1 < len ? actc__b4_code(ld<DT>(x, s + i + 1), amax, &L, c.sr, seed, (uint32_t)i + 1)
                                           : (uint8_t)0;
            codes[(s + i) / 2] = (uint8_t)(hi << 4 | lo);
        }
    }
}

template <int DT> __global__ void block4_decode_k(const uint8_t *payload, actc__cu_block4 c, void *__restrict__ y)
{
    __shared__ float value[16];
    if (threadIdx.x < 16) value[threadIdx.x] = c.L.value[threadIdx.x];
    __syncthreads();
    const uint8_t *absmax = payload, *codes = payload + 4 * c.nb;
    THREAD_LOOP(k, (c.n + 1) / 2)
    {
        const size_t e = 2 * k;
        const float amax = actc__bits_float(get_le32(absmax + 4 * (e / c.B)));
        const uint8_t code = codes[k];
        if (e + 1 < c.n)
            st2<DT>(y, e, value[code >> 4] * amax, value[code & 15] * amax);
        else
            st<DT>(y, e, value[code >> 4] * amax);
    }
}

/* ------------------------------------------------------------------------ */
/* 8-bit dynamic map                                                         */
/* ------------------------------------------------------------------------ */

template <int DT> __global__ void dyn8_encode_k(const void *__restrict__ x, actc__cu_dyn8 c, uint8_t *payload)
{
    __shared__ float mid[256];
    for (int k = (int)threadIdx.x; k < 256; k += THREADS) mid[k] = c.mid[k];
    __syncthreads();
    uint8_t *absmax = payload, *codes = payload + 4 * c.nb;
    WARP_LOOP(blk, c.nb)
    {
        const size_t s = blk * c.B, len = c.n - s < c.B ? c.n - s : c.B;
        const int32_t mb = block_absmax_bits<DT>(x, s, len, lane);
        const float amax = actc__bits_float((uint32_t)mb);
        if (lane == 0) put_le32(absmax + 4 * blk, (uint32_t)mb);
        for (size_t i = (size_t)lane; i < len; i += WARP) codes[s + i] = actc__dyn8_search(ld<DT>(x, s + i) / amax, mid);
    }
}

template <int DT> __global__ void dyn8_decode_k(const uint8_t *payload, actc__cu_dyn8 c, void *__restrict__ y)
{
    __shared__ float map[256];
    for (int k = (int)threadIdx.x; k < 256; k += THREADS) map[k] = c.map[k];
    __syncthreads();
    const uint8_t *absmax = payload, *codes = payload + 4 * c.nb;
    THREAD_LOOP(i, c.n)
    {
        const float amax = actc__bits_float(get_le32(absmax + 4 * (i / c.B)));
        st<DT>(y, i, map[codes[i]] * amax);
    }
}

/* ------------------------------------------------------------------------ */
/* DIVISION: a CUDA block per plane (division_plane.h's units)               */
/* ------------------------------------------------------------------------ */

#define DIVB 128 /* threads per plane */

static __global__ void division_encode_k(const void *__restrict__ x, int dt, actc__cu_division d, uint8_t *payload)
{
    const actc__div_view *v = &d.v;
    const size_t P = v->S * v->C;
    uint16_t *lfc = (uint16_t *)(payload + P * v->meta_sz);
    uint8_t *codes = payload + P * (v->meta_sz + v->lfc_sz);
    __shared__ actc__div_pick s_mn[DIVB], s_mx[DIVB];
    __shared__ float s_range[2];
    const int tid = (int)threadIdx.x, lane = tid % WARP, warp = tid / WARP;
    const int small = v->M <= ACTC_DIV_STACK_PLANE;
    for (size_t p = blockIdx.x; p < P; p += gridDim.x) {
        const size_t base = actc__div_plane_base(v, p);
        uint16_t *pl = lfc + p * v->nb;
        actc__div_pick mn = actc__div_pick_none(1), mx = actc__div_pick_none(0);
        if (small && v->nb == 1) {
            if (tid == 0) {
                pl[0] = actc__div_single(v, x, dt, base, &mn.v, &mx.v);
                mn.i = mx.i = 0;
            }
        } else {
            /* The means, a block per thread; a small plane's range from the
             * blocks, a long plane's from the residual over tiles, a tile
             * per warp once every mean is written. */
            for (size_t b = (size_t)tid; b < v->nb; b += DIVB) {
                float lo, hi;
                pl[b] = actc__div_block_mean(v, x, dt, base, b, &lo, &hi);
                if (small) actc__div_pick_min(&mn, lo, b), actc__div_pick_max(&mx, hi, b);
            }
            if (!small) {
                __syncthreads();
                for (size_t t = (size_t)warp; t < actc__div_tiles(v); t += DIVB / WARP) {
                    const size_t t0 = t * ACTC_DIV_TILE, len = actc__div_min(ACTC_DIV_TILE, v->M - t0);
                    const size_t rows = len / WARP * WARP;
                    float a = INFINITY, b = -INFINITY;
                    for (size_t u = (size_t)lane; u < rows; u += WARP)
                        actc__minmax_step(actc__div_residual(v, x, dt, base, pl, t0 + u), &a, &b);
                    if (lane == 0)
                        for (size_t u = rows; u < len; u++)
                            actc__minmax_step(actc__div_residual(v, x, dt, base, pl, t0 + u), &a, &b);
                    for (int w = WARP / 2; w > 0; w /= 2) {
                        const float oa = __shfl_down_sync(FULL_MASK, a, w), ob = __shfl_down_sync(FULL_MASK, b, w);
                        actc__minmax_merge(oa, ob, &a, &b);
                    }
                    if (lane == 0) actc__div_pick_min(&mn, a, t), actc__div_pick_max(&mx, b, t);
                }
            }
        }
        s_mn[tid] = mn;
        s_mx[tid] = mx;
        __syncthreads();
        if (tid == 0) {
            for (int k = 1; k < DIVB; k++) {
                actc__div_pick_min(&mn, s_mn[k].v, s_mn[k].i);
                actc__div_pick_max(&mx, s_mx[k].v, s_mx[k].i);
            }
            s_range[0] = mn.v;
            s_range[1] = mx.v;
        }
        __syncthreads();
        if (v->mode != ACTC_DIV_LFC_ONLY) {
            uint8_t meta[ACTC_QUANT_META];
            actc__quant_meta_of(s_range[0], s_range[1], v->q, meta);
            if (tid == 0)
                for (int k = 0; k < ACTC_QUANT_META; k++) payload[p * ACTC_QUANT_META + k] = meta[k];
            const actc__qparams qp = actc__quant_params_of(meta, v->q);
            const uint32_t seed = d.seed + (uint32_t)(p * v->M);
            uint8_t *pc = codes + p * v->code_sz;
            for (size_t c = (size_t)tid; 8 * c < v->M; c += DIVB) {
                int m;
                const uint64_t w = actc__div_chunk_codes(v, x, dt, base, pl, c, qp, seed, &m);
                for (size_t k = 0; k < actc__quant_run_bytes((size_t)m, v->q); k++)
                    pc[c * (size_t)v->q + k] = (uint8_t)(w >> (8 * k));
            }
        }
        /* No barrier before the next plane: its writes of s_mn come after
         * the barrier above, which thread 0 passed once it had read them,
         * and its s_range after the next plane's first barrier, which every
         * thread reaches once it has read this plane's. */
    }
}

static __global__ void division_decode_k(const uint8_t *payload, actc__cu_division d, void *__restrict__ y, int dt)
{
    const actc__div_view *v = &d.v;
    const size_t P = v->S * v->C;
    const uint16_t *lfc = (const uint16_t *)(payload + P * v->meta_sz);
    const uint8_t *codes = payload + P * (v->meta_sz + v->lfc_sz);
    for (size_t p = blockIdx.x; p < P; p += gridDim.x) {
        const size_t base = actc__div_plane_base(v, p);
        const uint16_t *pl = lfc + p * v->nb;
        actc__qparams qp = {0.0f, 0.0f, 0.0f, v->q};
        if (v->mode != ACTC_DIV_LFC_ONLY) qp = actc__quant_params_of(payload + p * ACTC_QUANT_META, v->q);
        const uint8_t *pc = codes + p * v->code_sz;
        for (size_t c = threadIdx.x; 8 * c < v->M; c += DIVB) {
            const size_t c0 = 8 * c;
            const int m = v->M - c0 < 8 ? (int)(v->M - c0) : 8;
            uint64_t w = 0;
            if (v->mode != ACTC_DIV_LFC_ONLY) {
                for (size_t k = 0; k < actc__quant_run_bytes((size_t)m, v->q); k++)
                    w |= (uint64_t)pc[c * (size_t)v->q + k] << (8 * k);
                w = actc__spread8(w, v->q);
            }
            for (int k = 0; k < m; k++)
                st_dt(y, dt, base + (c0 + (size_t)k) * v->stride,
                      actc__div_decoded(v, pl, c0 + (size_t)k, (unsigned)(w >> (8 * k)) & 0xFFu, qp));
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Element-wise codecs                                                       */
/* ------------------------------------------------------------------------ */

template <int DT> __global__ void mask_encode_k(const void *__restrict__ x, size_t n, uint8_t *payload)
{
    THREAD_LOOP(k, (n + 7) / 8)
    {
        unsigned v = 0;
        if (8 * k + 8 <= n) {
            float e[8];
            ld8<DT>(x, 8 * k, e);
            for (int j = 0; j < 8; j++) v |= actc__mask_bit(e[j]) << j;
        } else {
            for (int j = 0; 8 * k + j < n; j++) v |= actc__mask_bit(ld<DT>(x, 8 * k + j)) << j;
        }
        payload[k] = (uint8_t)v;
    }
}

template <int DT> __global__ void mask_decode_k(const uint8_t *payload, size_t n, void *__restrict__ y)
{
    THREAD_LOOP(k, (n + 7) / 8)
    {
        const unsigned v = payload[k];
        if (8 * k + 8 <= n) {
            float e[8];
            for (int j = 0; j < 8; j++) e[j] = (float)((v >> j) & 1u);
            st8<DT>(y, 8 * k, e);
        } else {
            for (int j = 0; 8 * k + j < n; j++) st<DT>(y, 8 * k + j, (float)((v >> j) & 1u));
        }
    }
}

template <int DT> __global__ void bf16_encode_k(const void *__restrict__ x, size_t n, uint8_t *payload)
{
    THREAD_LOOP(i, n)((uint16_t *)payload)[i] = actc__f32_to_bf16(ld<DT>(x, i));
}

template <int DT> __global__ void bf16_decode_k(const uint8_t *payload, size_t n, void *__restrict__ y)
{
    THREAD_LOOP(i, n) st<DT>(y, i, actc__bf16_to_f32(((const uint16_t *)payload)[i]));
}

template <int DT> __global__ void fp32_encode_k(const void *__restrict__ x, size_t n, uint8_t *payload)
{
    THREAD_LOOP(i, n)((uint32_t *)payload)[i] = actc__float_bits(ld<DT>(x, i));
}

template <int DT> __global__ void fp32_decode_k(const uint8_t *payload, size_t n, void *__restrict__ y)
{
    THREAD_LOOP(i, n) st<DT>(y, i, actc__bits_float(((const uint32_t *)payload)[i]));
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

extern "C" {

int actc__cu_quant_encode(const void *x, int dt, const actc__cu_quant *q, const uint8_t *sample_bits,
                          uint8_t *payload, void *stream)
{
    if (q->mixed) {
        /* The widths go into the payload first, as the CPU writes them;
         * the kernel reads them from there. */
        uint8_t *dst = payload + q->N * q->gps * ACTC_QUANT_META;
        for (size_t s0 = 0; s0 < q->N; s0 += ACTC_CU_WIDTHS) {
            actc__cu_widths w;
            w.n = q->N - s0 < ACTC_CU_WIDTHS ? q->N - s0 : ACTC_CU_WIDTHS;
            for (size_t i = 0; i < w.n; i++)
                w.b[i] = (uint8_t)actc__quant_clamp_bits(sample_bits ? sample_bits[s0 + i] : q->bits);
            widths_k<<<1, THREADS, 0, (cudaStream_t)stream>>>(w, dst + s0);
            const cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) return (int)e;
        }
    }
    LAUNCH_DT(dt, quant_encode_k, warp_grid(q->N * q->gps), stream, x, *q, payload);
}

int actc__cu_quant_decode(const uint8_t *payload, const actc__cu_quant *q, void *y, int dt, void *stream)
{
    LAUNCH_DT(dt, quant_decode_k, warp_grid(q->N * q->gps), stream, payload, *q, y);
}

static int range_groups(const void *x, int dt, size_t N, size_t D, size_t G, double *part, void *stream)
{
    LAUNCH_DT(dt, range_groups_k, warp_grid(N * ((D + G - 1) / G)), stream, x, N, D, G, part);
}

int actc__cu_range_sq(const void *x, int dt, size_t N, size_t D, size_t G, double *out, void *stream)
{
    const int e = range_groups(x, dt, N, D, G, out + N, stream);
    if (e) return e;
    range_fold_k<<<warp_grid(N), THREADS, 0, (cudaStream_t)stream>>>(out + N, N, (D + G - 1) / G, out);
    return (int)cudaGetLastError();
}

int actc__cu_block4_encode(const void *x, int dt, const actc__cu_block4 *b, uint8_t *payload, void *stream)
{
    LAUNCH_DT(dt, block4_encode_k, warp_grid(b->nb), stream, x, *b, payload);
}

int actc__cu_block4_decode(const uint8_t *payload, const actc__cu_block4 *b, void *y, int dt, void *stream)
{
    LAUNCH_DT(dt, block4_decode_k, thread_grid((b->n + 1) / 2), stream, payload, *b, y);
}

int actc__cu_dyn8_encode(const void *x, int dt, const actc__cu_dyn8 *d, uint8_t *payload, void *stream)
{
    LAUNCH_DT(dt, dyn8_encode_k, warp_grid(d->nb), stream, x, *d, payload);
}

int actc__cu_dyn8_decode(const uint8_t *payload, const actc__cu_dyn8 *d, void *y, int dt, void *stream)
{
    LAUNCH_DT(dt, dyn8_decode_k, thread_grid(d->n), stream, payload, *d, y);
}

int actc__cu_division_encode(const void *x, int dt, const actc__cu_division *d, uint8_t *payload, void *stream)
{
    division_encode_k<<<grid_of(d->v.S * d->v.C, 1), DIVB, 0, (cudaStream_t)stream>>>(x, dt, *d, payload);
    return (int)cudaGetLastError();
}

int actc__cu_division_decode(const uint8_t *payload, const actc__cu_division *d, void *y, int dt, void *stream)
{
    division_decode_k<<<grid_of(d->v.S * d->v.C, 1), DIVB, 0, (cudaStream_t)stream>>>(payload, *d, y, dt);
    return (int)cudaGetLastError();
}

int actc__cu_mask_encode(const void *x, int dt, size_t n, uint8_t *payload, void *stream)
{
    LAUNCH_DT(dt, mask_encode_k, thread_grid((n + 7) / 8), stream, x, n, payload);
}

int actc__cu_mask_decode(const uint8_t *payload, size_t n, void *y, int dt, void *stream)
{
    LAUNCH_DT(dt, mask_decode_k, thread_grid((n + 7) / 8), stream, payload, n, y);
}

int actc__cu_bf16_encode(const void *x, int dt, size_t n, uint8_t *payload, void *stream)
{
    LAUNCH_DT(dt, bf16_encode_k, thread_grid(n), stream, x, n, payload);
}

int actc__cu_bf16_decode(const uint8_t *payload, size_t n, void *y, int dt, void *stream)
{
    LAUNCH_DT(dt, bf16_decode_k, thread_grid(n), stream, payload, n, y);
}

int actc__cu_fp32_encode(const void *x, int dt, size_t n, uint8_t *payload, void *stream)
{
    LAUNCH_DT(dt, fp32_encode_k, thread_grid(n), stream, x, n, payload);
}

int actc__cu_fp32_decode(const uint8_t *payload, size_t n, void *y, int dt, void *stream)
{
    LAUNCH_DT(dt, fp32_decode_k, thread_grid(n), stream, payload, n, y);
}
}
