/* The device side of the CPU emulation (cuda_runtime_api.h says why): what
 * src/codec/cuda/codec_cuda.cu uses of CUDA C++, in plain C++17, so that
 * g++ compiles the kernels unchanged once their launches `K<<<g, b, m, s>>>(a)`
 * are spelled `actc_emu::launch(K, g, b, m, s, __func__, __LINE__)(a)`
 * (unchevron.cmake does that to a copy of the file at build time).
 *
 * Every CUDA thread runs as a fiber with its own stack (emu.cpp); a thread
 * gives way only at a warp shuffle or a block barrier, which complete once
 * every thread they wait for has reached the same one (same source line). */
#ifndef ACTC_CUDA_EMU_DEVICE_H
#define ACTC_CUDA_EMU_DEVICE_H
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
/* One copy, which every block uses in turn (blocks run one after another
 * on one host thread); not reset between blocks (emu.cpp). */
#define __shared__ static

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
/* CUDA's vector types, with their alignment (a misaligned vector access is
 * a fault on the GPU; UBSan reports it here). */
struct __attribute__((aligned(8))) float2 {
    float x, y;
};
struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
};
struct __attribute__((aligned(16))) uint4 {
    unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

/* CUDA's max and min overloads. */
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline float min(float a, float b) { return fminf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(double a, double b) { return fmin(a, b); }

namespace actc_emu {

/* The running thread's coordinates (emu.cpp). */
const uint3 &thread_idx();
const uint3 &block_idx();
const uint3 &block_dim();
const uint3 &grid_dim();

enum { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR };
/* Waits for the warp's other lanes at this shuffle and returns the source
 * lane's bits (emu.cpp). */
/* file, line, site: the call's (site: the macro expansion's number, so
 * two calls on one line differ), which all must share. */
uint64_t shuffle(const char *file, int line, int site, unsigned mask, uint64_t bits, int kind, int arg, int width);
void barrier(const char *file, int line, int site);

template <class T>
T shuffle_as(const char *file, int line, int site, int kind, unsigned mask, T v, int arg, int width = 32)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "a shuffle moves up to 8 bytes");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    bits = shuffle(file, line, site, mask, bits, kind, arg, width);
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

/* A launch: its configuration, where it was made, and the kernel's
 * arguments as the kernel's parameter types (copied, as CUDA copies them). */
struct launch_site {
    dim3 grid, block;
    size_t shared_bytes;
    cudaStream_t stream;
    const char *fn;
    int line;
};
/* Runs body once per thread of the grid now, or records it into the
 * stream's capture; checks the configuration, that each of `pointers` is
 * device memory of the stream's device, and the parameters' size. */
void submit(const launch_site &at, std::function<void()> body, size_t param_bytes,
            const std::vector<const void *> &pointers);

template <class... P> struct launcher {
    void (*kernel)(P...);
    launch_site at;
    template <class... A> void operator()(A &&...a) const
    {
        static_assert(sizeof...(A) == sizeof...(P), "a kernel launched with the wrong number of arguments");
        auto args = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(a)...);
        std::vector<const void *> pointers;
        std::apply(
            [&](const auto &...x) {
                (
                    [&] {
                        if constexpr (std::is_pointer_v<std::decay_t<decltype(x)>>) pointers.push_back((const void *)x);
                    }(),
                    ...);
            },
            *args);
        auto k = kernel;
        submit(at, [k, args] { std::apply(k, *args); }, sizeof(std::tuple<std::decay_t<P>...>), pointers);
    }
};

template <class... P>
launcher<P...> launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                      const char *fn, int line)
{
    return launcher<P...>{kernel, {grid, block, shared_bytes, stream, fn, line}};
}

} // namespace actc_emu

#define threadIdx (actc_emu::thread_idx())
#define blockIdx (actc_emu::block_idx())
#define blockDim (actc_emu::block_dim())
#define gridDim (actc_emu::grid_dim())

/* (mask, value, lane or delta or lane mask[, width]), as CUDA's. */
#define __shfl_sync(...) actc_emu::shuffle_as(__FILE__, __LINE__, __COUNTER__, actc_emu::SHFL_IDX, __VA_ARGS__)
#define __shfl_up_sync(...) actc_emu::shuffle_as(__FILE__, __LINE__, __COUNTER__, actc_emu::SHFL_UP, __VA_ARGS__)
#define __shfl_down_sync(...) actc_emu::shuffle_as(__FILE__, __LINE__, __COUNTER__, actc_emu::SHFL_DOWN, __VA_ARGS__)
#define __shfl_xor_sync(...) actc_emu::shuffle_as(__FILE__, __LINE__, __COUNTER__, actc_emu::SHFL_XOR, __VA_ARGS__)
#define __syncthreads() actc_emu::barrier(__FILE__, __LINE__, __COUNTER__)
#endif
