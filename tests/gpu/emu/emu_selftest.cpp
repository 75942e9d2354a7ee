/* The CPU emulation of CUDA checked on its own (tests/gpu/emu): what
 * gpu_codecs_emu's passing is worth rests on the emulator refusing what a
 * GPU would not do.  Small kernels: the shuffles' source lanes against
 * CUDA's documented rules at widths 32, 16 and 4; blocks, threads and
 * shared memory; and, each in a child process that must die with the
 * emulator's message, a shuffle some lanes miss or reach at another call,
 * a barrier some threads miss, a host pointer or another device's memory
 * given to a kernel, a write past a buffer; and the runtime's refusals:
 * calls a graph capture may refuse (unless relaxed), a launch on a stream
 * of another device, an invalid configuration.  Prints one line per check;
 * exit 0 when all hold. */
#include "cuda_runtime.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

#define LAUNCH(k, grid, block, stream) actc_emu::launch(k, grid, block, 0, stream, __func__, __LINE__)

static int failed;

static void check(bool ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failed += !ok;
}

/* ---- kernels -------------------------------------------------------------- */

/* out[4 * t + k]: lane t's results of shfl idx (lane t ^ 5), up 3, down 3,
 * xor 6, at the given width. */
static __global__ void shuffles_k(int width, int *out)
{
    const int t = (int)threadIdx.x, v = 100 + t;
    out[4 * t + 0] = __shfl_sync(0xFFFFFFFFu, v, t ^ 5, width);
    out[4 * t + 1] = __shfl_up_sync(0xFFFFFFFFu, v, 3, width);
    out[4 * t + 2] = __shfl_down_sync(0xFFFFFFFFu, v, 3, width);
    out[4 * t + 3] = __shfl_xor_sync(0xFFFFFFFFu, v, 6, width);
}

/* Each block sums its threads' indices through shared memory. */
static __global__ void block_sum_k(int *out)
{
    __shared__ int s[64];
    s[threadIdx.x] = (int)(blockIdx.x * 1000 + threadIdx.x);
    __syncthreads();
    if (threadIdx.x == 0) {
        int sum = 0;
        for (unsigned k = 0; k < blockDim.x; k++) sum += s[k];
        out[blockIdx.x] = sum;
    }
}

static __global__ void lane_exits_k(int *out)
{
    if (threadIdx.x == 7) return;
    out[threadIdx.x] = __shfl_down_sync(0xFFFFFFFFu, (int)threadIdx.x, 1);
}

static __global__ void two_calls_k(int *out)
{
    const int v = (int)threadIdx.x; /* two shuffles on one line */
    out[threadIdx.x] = threadIdx.x % 2 ? __shfl_xor_sync(0xFFFFFFFFu, v, 1) : __shfl_xor_sync(0xFFFFFFFFu, v, 2);
}

static __global__ void half_barrier_k(int *out)
{
    if (threadIdx.x < 32) __syncthreads();
    out[threadIdx.x] = 1;
}

static __global__ void write_k(int *out, int n)
{
    if (threadIdx.x == 0) out[n] = 1;
}

/* ---- helpers ---------------------------------------------------------------- */

/* fn in a child process must abort with `needle` on stderr (or, under
 * AddressSanitizer, which sees a write past a buffer first, with `asan`). */
static void dies(const char *what, const char *needle, void (*fn)(), const char *asan = nullptr)
{
    int pipefd[2];
    if (pipe(pipefd)) abort();
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        fn();
        _exit(0);
    }
    close(pipefd[1]);
    char buf[4096] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(pipefd[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)r;
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const bool ok = (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(buf, needle)) ||
                    (asan && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && strstr(buf, asan));
    if (!ok) fprintf(stderr, "  (child said: %s)\n", buf);
    check(ok, what);
}

static int *device_ints(size_t n)
{
    void *p = nullptr;
    if (cudaMalloc(&p, n * sizeof(int)) || cudaMemset(p, 0, n * sizeof(int))) abort();
    return (int *)p;
}

static void run_lane_exits() { LAUNCH(lane_exits_k, 1, 32, nullptr)(device_ints(32)); }
static void run_two_calls() { LAUNCH(two_calls_k, 1, 32, nullptr)(device_ints(32)); }
static void run_half_barrier() { LAUNCH(half_barrier_k, 1, 64, nullptr)(device_ints(64)); }
static void run_host_pointer()
{
    static int host[4];
    LAUNCH(write_k, 1, 32, nullptr)(host, 0);
}
static void run_other_device()
{
    cudaSetDevice(1);
    int *p = device_ints(4);
    cudaSetDevice(0);
    LAUNCH(write_k, 1, 32, nullptr)(p, 0);
}
static void run_write_past()
{
    int *p = device_ints(5);
    LAUNCH(write_k, 1, 32, nullptr)(p, 5);
}

/* ---- checks ----------------------------------------------------------------- */

static void shuffle_rules()
{
    int *d = device_ints(128), got[128];
    for (int width : {32, 16, 4}) {
        LAUNCH(shuffles_k, 1, 32, nullptr)(width, d);
        cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost);
        bool ok = true;
        for (int t = 0; t < 32; t++) {
            const int seg = t / width * width;
            /* CUDA C++ Programming Guide, warp shuffle functions */
            const int idx = seg + ((t ^ 5) % width);
            const int up = t - seg >= 3 ? t - 3 : t;
            const int down = t - seg + 3 < width ? t + 3 : t;
            const int x = (t ^ 6) < seg + width ? t ^ 6 : t; /* an earlier segment may be read */
            ok &= got[4 * t] == 100 + idx && got[4 * t + 1] == 100 + up && got[4 * t + 2] == 100 + down &&
                  got[4 * t + 3] == 100 + x;
        }
        char what[96];
        snprintf(what, sizeof what, "shuffles idx, up, down, xor at width %d: CUDA's source lanes", width);
        check(ok, what);
    }
    cudaFree(d);
}

static void blocks_and_shared()
{
    int *d = device_ints(5), got[5];
    LAUNCH(block_sum_k, 5, 64, nullptr)(d);
    cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int b = 0; b < 5; b++) ok &= got[b] == b * 1000 * 64 + 63 * 64 / 2;
    check(ok, "five blocks of 64 threads: block and thread indices, shared memory behind a barrier");
    cudaFree(d);
}

static void runtime_refusals()
{
    cudaStream_t s, other;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaSetDevice(1);
    cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
    cudaSetDevice(0);
    int *d = device_ints(4);

    LAUNCH(write_k, 1, 32, other)(d, 0);
    check(cudaGetLastError() == cudaErrorInvalidResourceHandle, "a launch on a stream of another device refused");
    LAUNCH(write_k, 1, 2048, s)(d, 0);
    check(cudaGetLastError() == cudaErrorInvalidConfiguration, "a block of 2048 threads refused");

    /* A capture: a kernel is recorded, not run; a pointer's device asked in
     * global mode invalidates it; relaxed, it does not. */
    cudaGraph_t g = nullptr;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    LAUNCH(write_k, 1, 32, s)(d, 0);
    int zero = -1;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaPointerAttributes at;
    const cudaError_t relaxed = cudaPointerGetAttributes(&at, d);
    cudaThreadExchangeStreamCaptureMode(&mode);
    check(relaxed == cudaSuccess && cudaStreamEndCapture(s, &g) == cudaSuccess && g,
          "a pointer's device asked during a capture in relaxed mode");
    cudaMemcpy(&zero, d, sizeof zero, cudaMemcpyDeviceToHost);
    check(zero == 0, "a captured kernel runs only when the graph is launched");
    cudaGraphExec_t ge;
    cudaGraphInstantiateWithFlags(&ge, g, 0);
    cudaGraphLaunch(ge, s);
    cudaMemcpy(&zero, d, sizeof zero, cudaMemcpyDeviceToHost);
    check(zero == 1, "the graph's launch runs it");
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);

    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    const cudaError_t q = cudaPointerGetAttributes(&at, d);
    void *p = nullptr;
    const cudaError_t m = cudaMalloc(&p, 16);
    check(q == cudaErrorStreamCaptureUnsupported && m == cudaErrorStreamCaptureUnsupported &&
              cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated && !g,
          "a pointer's device and cudaMalloc during a global capture refused, the capture invalidated");
    cudaGetLastError();
    cudaFree(d);
    cudaStreamDestroy(s);
    cudaStreamDestroy(other);
}

int main()
{
    shuffle_rules();
    blocks_and_shared();
    runtime_refusals();
    dies("a lane that exited before a whole-warp shuffle", "has exited", run_lane_exits);
    dies("lanes at two shuffles of one line", "different shuffles", run_two_calls);
    dies("a barrier half the block misses", "__syncthreads", run_half_barrier);
    dies("a host pointer given to a kernel", "not device memory", run_host_pointer);
    dies("another device's memory given to a kernel", "memory of device 1", run_other_device);
    dies("a write past a buffer", "wrote past the end", run_write_past, "heap-buffer-overflow");
    printf("%s: %d check(s) failed\n", failed ? "FAILED" : "PASSED", failed);
    return failed ? 1 : 0;
}
