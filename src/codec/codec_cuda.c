/* The CUDA codecs' public entry points (actc.h, "Codecs on CUDA device
 * memory"): every check happens here, on the host, before anything is
 * queued; the kernels (cuda/codec_cuda.cu) run the codec layer's shared
 * arithmetic.  Built only with ACTC_WITH_CUDA (codec_cuda_off.c otherwise). */
#include "codec.h"
#include "cuda/codec_cuda.h"
#include "../core/core.h"
#include <cuda_runtime_api.h>

int actc_cuda_built(void) { return 1; }

static actc_status cuda_error(cudaError_t e, const char *fn, const char *what)
{
    return actc_set_error(ACTC_ERR_DEVICE, "%s: %s: %s (%s)", fn, what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int actc_cuda_device_count(void)
{
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not sticky: a later call may succeed */
        cuda_error(e, "actc_cuda_device_count", "no CUDA device");
        return 0;
    }
    return n;
}

static size_t dtype_size(actc_dtype dt) { return dt == ACTC_FLOAT32 ? 4 : 2; }

static int dtype_ok(const char *fn, const char *codec, actc_dtype dt)
{
    if (dt == ACTC_FLOAT32 || dt == ACTC_BFLOAT16 || dt == ACTC_FLOAT16) return 1;
    actc_set_error(ACTC_ERR_INVALID, "%s (%s): dtype %d is not ACTC_FLOAT32, ACTC_BFLOAT16 or ACTC_FLOAT16", fn, codec,
                   (int)dt);
    return 0;
}

#define CODEC_ADVICE "encode it with actc_codec_encode"
#define RANGES_ADVICE "the planner reads a host tensor's values itself: actc_save_query.data"

/* The device p lives on, or -1 with the error set (host or unknown memory). */
static int device_of(const void *p, const char *fn, const char *what, const char *codec, const char *advice)
{
    struct cudaPointerAttributes at;
    const cudaError_t e = cudaPointerGetAttributes(&at, p);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cuda_error(e, fn, what);
        return -1;
    }
    if (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged) {
        actc_set_error(ACTC_ERR_INVALID, "%s (%s): the %s is not device memory (a CPU tensor? %s)", fn, codec, what,
                       advice);
        return -1;
    }
    return at.device;
}

/* The stream's device, or -1 with the error set. */
static int stream_device(void *stream, const char *fn)
{
    int dev = -1;
    cudaError_t e = stream ? cudaStreamGetDevice((cudaStream_t)stream, &dev) : cudaGetDevice(&dev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cuda_error(e, fn, "the stream's device");
        return -1;
    }
    return dev;
}

/* The device the tensor, the other buffer and the stream are all on, or -1
 * with the error set (host memory, another device).  The queries run in
 * relaxed capture mode and the caller's mode is restored: some CUDA
 * versions refuse a stream's or a pointer's device to a thread capturing a
 * CUDA graph in global mode (torch.cuda.graph's default), which would
 * invalidate the caller's capture. */
static int common_device(const char *fn, const char *codec, const char *advice, const void *tensor,
                         const char *other_name, const void *other, void *stream)
{
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    const int sd = stream_device(stream, fn);
    const int td = sd < 0 ? -1 : device_of(tensor, fn, "tensor", codec, advice);
    const int od = td < 0 ? -1 : device_of(other, fn, other_name, codec, advice);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (od < 0) return -1;
    if (td != sd || od != sd) {
        actc_set_error(ACTC_ERR_INVALID, "%s (%s): the tensor is on device %d, the %s on %d, the stream on %d", fn,
                       codec, td, other_name, od, sd);
        return -1;
    }
    return sd;
}

/* [a, a + na) and [b, b + nb) share a byte: the kernels read the tensor
 * through __restrict__ pointers, so it may not overlap their output. */
static int overlap(const void *a, size_t na, const void *b, size_t nb)
{
    return (uintptr_t)a < (uintptr_t)b + nb && (uintptr_t)b < (uintptr_t)a + na;
}

/* Which kernels the plan's codec has (0: none). */
enum { K_NONE, K_FP32, K_BF16, K_MASK, K_QUANT, K_BLOCK4, K_DYN8, K_DIVISION };
static int kernels_of(const actc_codec *c, const actc_codec_plan *plan)
{
    /* The HFC-only ablation keeps its means nowhere in the payload. */
    if (c == &actc_codec_division) return plan->iparam_[1] == ACTC_DIV_HFC_ONLY ? K_NONE : K_DIVISION;
    if (c == &actc_codec_fp32) return K_FP32;
    if (c == &actc_codec_bf16) return K_BF16;
    if (c == &actc_codec_mask1) return K_MASK;
    if (c == &actc_codec_quant) return K_QUANT;
    if (c == &actc_codec_block4) return K_BLOCK4;
    if (c == &actc_codec_dyn8) return K_DYN8;
    return K_NONE;
}

/* Every check common to encode and decode: the plan and its payload buffer,
 * the codec's kernels, the dtype, both pointers on the stream's device and
 * aligned.  Returns the kernel kind, or K_NONE with the error set. */
static int check_call(const char *fn, const actc_codec_plan *plan, const void *tensor, actc_dtype dt,
                      const void *payload, size_t payload_bytes, void *stream, int *device)
{
    const actc_codec *c = actc__plan_codec(plan, fn, payload, payload_bytes);
    if (!c) return K_NONE;
    const int k = kernels_of(c, plan);
    if (k == K_NONE) {
        actc_set_error(ACTC_ERR_INVALID,
                       "%s: codec '%s' has no CUDA kernels (those with: fp32, bf16, mask, quant:B[,group=G], nf4, "
                       "fp4-bnb, fp4-e2m1, dyn8, division and division:lfc-only); run it on the CPU "
                       "(actc_codec_encode)",
                       fn, plan->codec);
        return K_NONE;
    }
    if (!dtype_ok(fn, plan->codec, dt)) return K_NONE;
    if (plan->numel == 0) return k; /* nothing to touch */
    if (!tensor) {
        actc_set_error(ACTC_ERR_INVALID, "%s (%s): NULL tensor", fn, plan->codec);
        return K_NONE;
    }
    if ((uintptr_t)tensor % dtype_size(dt) || (uintptr_t)payload % 16) {
        actc_set_error(ACTC_ERR_INVALID,
                       "%s (%s): misaligned buffer (tensor at %p needs %zu-byte alignment, payload at %p 16-byte)", fn,
                       plan->codec, tensor, dtype_size(dt), payload);
        return K_NONE;
    }
    if (overlap(tensor, plan->numel * dtype_size(dt), payload, plan->bytes)) {
        actc_set_error(ACTC_ERR_INVALID, "%s (%s): the tensor (%p) and the payload (%p) overlap", fn, plan->codec,
                       tensor, payload);
        return K_NONE;
    }
    const int sd = common_device(fn, plan->codec, CODEC_ADVICE, tensor, "payload", payload, stream);
    if (sd < 0) return K_NONE;
    *device = sd;
    return k;
}

/* Runs the launch on the stream's device (the caller's current device is
 * restored), and turns a CUDA error into ACTC_ERR_DEVICE. */
#define ON_DEVICE(fn, device, launch)                                                                  \
    do {                                                                                               \
        int prev_ = -1;                                                                                \
        cudaGetDevice(&prev_);                                                                         \
        if (prev_ != (device)) cudaSetDevice(device);                                                  \
        const cudaError_t e_ = (cudaError_t)(launch);                                                  \
        if (prev_ >= 0 && prev_ != (device)) cudaSetDevice(prev_);                                     \
        if (e_ != cudaSuccess) return cuda_error(e_, fn, "kernel launch");                             \
    } while (0)

actc_status actc_cuda_encode(const actc_codec_plan *plan, const void *x, actc_dtype dtype,
                             const uint8_t *sample_bits, void *dst, size_t dst_bytes, void *stream)
{
    const char *fn = "actc_cuda_encode";
    int dev = -1;
    const int k = check_call(fn, plan, x, dtype, dst, dst_bytes, stream, &dev);
    if (k == K_NONE) return actc_last_status();
    if (actc__plan_widths_hash(sample_bits, plan) != plan->sample_bits_hash_)
        return actc_set_error(ACTC_ERR_INVALID, "%s (%s): per-sample widths differ from those the plan was made with",
                              fn, plan->codec);
    if (plan->numel == 0) return ACTC_OK;
    uint8_t *out = dst;
    const int dt = (int)dtype;
    switch (k) {
    case K_FP32: ON_DEVICE(fn, dev, actc__cu_fp32_encode(x, dt, plan->numel, out, stream)); break;
    case K_BF16: ON_DEVICE(fn, dev, actc__cu_bf16_encode(x, dt, plan->numel, out, stream)); break;
    case K_MASK: ON_DEVICE(fn, dev, actc__cu_mask_encode(x, dt, plan->numel, out, stream)); break;
    case K_BLOCK4: {
        const actc__cu_block4 b = actc__cu_block4_of(plan);
        ON_DEVICE(fn, dev, actc__cu_block4_encode(x, dt, &b, out, stream));
        break;
    }
    case K_DYN8: {
        const actc__cu_dyn8 d = actc__cu_dyn8_of(plan);
        ON_DEVICE(fn, dev, actc__cu_dyn8_encode(x, dt, &d, out, stream));
        break;
    }
    case K_DIVISION: {
        const actc__cu_division d = actc__cu_division_of(plan);
        ON_DEVICE(fn, dev, actc__cu_division_encode(x, dt, &d, out, stream));
        break;
    }
    default: {
        const actc__cu_quant q = actc__cu_quant_of(plan);
        ON_DEVICE(fn, dev, actc__cu_quant_encode(x, dt, &q, sample_bits, out, stream));
    }
    }
    return ACTC_OK;
}

actc_status actc_cuda_decode(const actc_codec_plan *plan, const void *src, size_t src_bytes, void *dst,
                             actc_dtype dtype, void *stream)
{
    const char *fn = "actc_cuda_decode";
    int dev = -1;
    const int k = check_call(fn, plan, dst, dtype, src, src_bytes, stream, &dev);
    if (k == K_NONE) return actc_last_status();
    if (plan->numel == 0) return ACTC_OK;
    const uint8_t *in = src;
    const int dt = (int)dtype;
    switch (k) {
    case K_FP32: ON_DEVICE(fn, dev, actc__cu_fp32_decode(in, plan->numel, dst, dt, stream)); break;
    case K_BF16: ON_DEVICE(fn, dev, actc__cu_bf16_decode(in, plan->numel, dst, dt, stream)); break;
    case K_MASK: ON_DEVICE(fn, dev, actc__cu_mask_decode(in, plan->numel, dst, dt, stream)); break;
    case K_BLOCK4: {
        const actc__cu_block4 b = actc__cu_block4_of(plan);
        ON_DEVICE(fn, dev, actc__cu_block4_decode(in, &b, dst, dt, stream));
        break;
    }
    case K_DYN8: {
        const actc__cu_dyn8 d = actc__cu_dyn8_of(plan);
        ON_DEVICE(fn, dev, actc__cu_dyn8_decode(in, &d, dst, dt, stream));
        break;
    }
    case K_DIVISION: {
        const actc__cu_division d = actc__cu_division_of(plan);
        ON_DEVICE(fn, dev, actc__cu_division_decode(in, &d, dst, dt, stream));
        break;
    }
    default: {
        const actc__cu_quant q = actc__cu_quant_of(plan);
        ON_DEVICE(fn, dev, actc__cu_quant_decode(in, &q, dst, dt, stream));
    }
    }
    return ACTC_OK;
}

actc_status actc_cuda_range_sq(const void *x, actc_dtype dtype, int N, size_t D, double *out, size_t out_len,
                               void *stream)
{
    const char *fn = "actc_cuda_range_sq";
    if (N < 0) return actc_set_error(ACTC_ERR_INVALID, "%s: %d samples", fn, N);
    if (!dtype_ok(fn, "ranges", dtype)) return actc_last_status();
    if (N == 0 || D == 0)
        return actc_set_error(ACTC_ERR_INVALID, "%s: an empty tensor (%d x %zu) has no ranges", fn, N, D);
    const size_t need = actc_cuda_range_sq_len(N, D);
    if (!x || !out) return actc_set_error(ACTC_ERR_INVALID, "%s: NULL %s", fn, x ? "output" : "tensor");
    if (out_len < need)
        return actc_set_error(ACTC_ERR_INVALID, "%s: output of %zu doubles, needs %zu (actc_cuda_range_sq_len)", fn,
                              out_len, need);
    if ((uintptr_t)x % dtype_size(dtype) || (uintptr_t)out % sizeof(double))
        return actc_set_error(ACTC_ERR_INVALID,
                              "%s: misaligned buffer (tensor at %p needs %zu-byte alignment, output at %p 8-byte)", fn,
                              x, dtype_size(dtype), (void *)out);
    if (overlap(x, (size_t)N * D * dtype_size(dtype), out, need * sizeof(double)))
        return actc_set_error(ACTC_ERR_INVALID, "%s: the tensor (%p) and the output (%p) overlap", fn, x, (void *)out);
    const int sd = common_device(fn, "ranges", RANGES_ADVICE, x, "output", out, stream);
    if (sd < 0) return actc_last_status();
    ON_DEVICE(fn, sd, actc__cu_range_sq(x, (int)dtype, (size_t)N, D, ACTC_QUANT_GROUP, out, stream));
    return ACTC_OK;
}
