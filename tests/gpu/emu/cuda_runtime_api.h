/* The CUDA runtime API, emulated on the CPU: the part of <cuda_runtime_api.h>
 * that actc's CUDA codecs (src/codec/codec_cuda.c, src/codec/cuda/) and their
 * GPU test (tests/gpu/gpu_codecs.c) call, with the real names, values and
 * signatures, implemented by emu.cpp.
 *
 * Why: the project's machines have nvcc but rarely a GPU, so without this
 * the kernels and the entry points' host code would only ever run when a
 * GPU is lent.  With it, the very same sources (the kernels compiled as C++,
 * emu_device.h) run in ctest on every build, the sanitizer one included:
 * gpu_codecs_emu compares their payloads with the CPU codecs' byte for byte.
 * What it checks besides the values (emu.cpp says how): a kernel given a
 * host pointer, a launch on a stream of another device, an invalid launch
 * configuration, a shuffle or barrier some threads do not reach, a
 * kernel's write past its buffer, a call that a CUDA graph capture may
 * refuse.  What it cannot see: speed, memory coalescing, races between
 * threads (it runs them one after another, in either order) and a missing
 * synchronisation (streams run their work at once), the device's own float
 * arithmetic: its rounding (the same compiler rounds both sides here;
 * -fmad=false and the shared arithmetic are what make the GPU agree) and
 * its NaNs (a GPU's arithmetic makes one canonical NaN, x86 keeps an
 * operand's: no payload may depend on a NaN's bits, which
 * tests/test_codec_cuda checks on the CPU).
 *
 * Devices: ACTC_CUDA_EMU_DEVICES (default 2, so that a stream of another
 * device can be tried). */
#ifndef ACTC_CUDA_EMU_RUNTIME_API_H
#define ACTC_CUDA_EMU_RUNTIME_API_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

/* The values are CUDA's own (driver_types.h). */
enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureImplicit = 906
};
typedef enum cudaError cudaError_t;

enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3
};
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};
/* Only the fields the tests read. */
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor;
};

typedef struct actc_emu_stream *cudaStream_t;
typedef struct actc_emu_event *cudaEvent_t;
typedef struct actc_emu_graph *cudaGraph_t;
typedef struct actc_emu_graph_exec *cudaGraphExec_t;

const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamGetDevice(cudaStream_t s, int *d);
cudaError_t cudaStreamSynchronize(cudaStream_t s);

cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *ge, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t ge, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t ge);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

#ifdef __cplusplus
}
#endif
#endif
