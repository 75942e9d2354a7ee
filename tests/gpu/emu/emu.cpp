/* The CUDA runtime and the kernels' threads, emulated on the CPU
 * (cuda_runtime_api.h says why, and what is checked).
 *
 * Memory: a device allocation is host memory with a guard page after it
 * (the end of the buffer rounded up to 256 bytes, cudaMalloc's alignment,
 * then the page), filled with a pattern, not zeros; the bytes between the
 * end and the guard hold a canary that every kernel given the buffer must
 * leave alone.  Under AddressSanitizer it is plain malloc'd memory, which
 * ASan guards to the byte.
 *
 * Streams run their work at once, in order (so a missing synchronisation
 * goes unseen); a stream being captured records it into the graph instead,
 * and a graph launch runs the records.  During a capture the calls CUDA
 * may refuse are refused (stricter than some CUDA versions: a stream's or
 * a pointer's device too, unless the thread has relaxed its capture mode
 * with cudaThreadExchangeStreamCaptureMode; an asynchronous copy to or
 * from host memory, all of which is pageable here), and the capture is
 * invalidated, as CUDA does.
 *
 * Kernels: the grid's blocks run one after another, last first (no block
 * may rely on another's order); a block's threads are fibers (below: a
 * stack each, switched by a few instructions on x86-64, by ucontext
 * elsewhere), each run until it finishes or waits at a shuffle or a barrier,
 * thread 0 first.  ACTC_CUDA_EMU_ORDER=reverse turns both orders round
 * (then a read of shared memory before the barrier after thread 0's write
 * sees the previous block's values, or zeros in the first block: shared
 * memory is one static copy per kernel, not reset between blocks).  A warp's
 * shuffle completes once its 32 lanes wait at the same one; a barrier once
 * every thread of the block waits at the same one.  Anything else (lanes
 * at different shuffles, a shuffle or barrier some threads have left) is a
 * hang or undefined on a GPU, and a fatal error here; so are a host pointer
 * or another device's memory given to a kernel, and a write past a buffer.
 * Fatal errors print what happened and where the kernel was launched, and
 * abort: on a GPU they would be a fault that ends the context.
 *
 * One host thread: the tables have no lock, and a call from a second
 * thread is a fatal error. */
#include "cuda_runtime.h"
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

struct actc_emu_stream {
    int device;
    unsigned flags;      /* cudaStreamNonBlocking or not */
    cudaGraph_t capture; /* non-null while capturing */
    cudaStreamCaptureMode mode;
    bool invalidated;
};
struct actc_emu_event {
    double ms;
    bool recorded;
};
/* A graph and its instance: the captured work, in order. */
struct actc_emu_graph {
    std::vector<std::function<void()>> nodes;
};
struct actc_emu_graph_exec : actc_emu_graph {};

namespace {

[[noreturn]] __attribute__((format(printf, 1, 2))) void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda_emu: FATAL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    abort();
}

thread_local cudaError_t last_error = cudaSuccess;

/* A failed call: says why on stderr (the emulator's diagnostics), sets the
 * last error as CUDA does, and returns the code. */
__attribute__((format(printf, 2, 3))) cudaError_t fail(cudaError_t e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda_emu: %s: ", cudaGetErrorName(e));
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    last_error = e;
    return e;
}

int device_count()
{
    static const int n = [] {
        const char *e = getenv("ACTC_CUDA_EMU_DEVICES");
        const int v = e ? atoi(e) : 2;
        return v < 0 ? 0 : v;
    }();
    return n;
}
thread_local int current_device = 0;
/* The thread's capture mode (cudaThreadExchangeStreamCaptureMode). */
thread_local cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;

void one_thread()
{
    static const std::thread::id first = std::this_thread::get_id();
    if (std::this_thread::get_id() != first) fatal("a call from a second host thread (the emulator takes one)");
}

/* ---- device memory ------------------------------------------------------ */

struct allocation {
    char *user;
    size_t size, span; /* span: size rounded up to 256, canary after size */
    int device;
    void *map;
    size_t map_len;
};
std::map<uintptr_t, allocation> allocations;
const unsigned char CANARY = 0xEE, FRESH = 0xA7;

/* The allocation p points into (its end included: a pointer one past the
 * end is a valid kernel argument), or null. */
const allocation *find(const void *p)
{
    one_thread();
    auto it = allocations.upper_bound((uintptr_t)p);
    if (it == allocations.begin()) return nullptr;
    --it;
    return (uintptr_t)p <= (uintptr_t)it->second.user + it->second.size ? &it->second : nullptr;
}

/* [p, p + n) inside one allocation. */
bool inside(const void *p, size_t n)
{
    const allocation *a = find(p);
    return a && (const char *)p + n <= a->user + a->size;
}

void check_canary(const allocation &a, const char *what)
{
    for (size_t i = a.size; i < a.span; i++)
        if ((unsigned char)a.user[i] != CANARY)
            fatal("%s wrote past the end of a device buffer (byte %zu past its %zu bytes, at %p)", what, i - a.size,
                  a.size, (void *)a.user);
}

/* ---- streams and capture ---------------------------------------------- */

std::set<cudaStream_t> streams;

void invalidate_captures()
{
    for (cudaStream_t s : streams)
        if (s->capture) s->invalidated = true;
}

/* A call CUDA may refuse during a capture (one that may synchronise,
 * allocate, or that some versions refuse): refused, and the capture
 * invalidated, unless this thread relaxed its mode or every capture began
 * relaxed (one host thread: every capture is this thread's). */
cudaError_t unsafe(const char *fn)
{
    if (thread_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
    bool strict = false;
    for (cudaStream_t s : streams) strict |= s->capture && s->mode != cudaStreamCaptureModeRelaxed;
    if (!strict) return cudaSuccess;
    invalidate_captures();
    return fail(cudaErrorStreamCaptureUnsupported, "%s during a CUDA graph capture", fn);
}

/* Work on the legacy stream while a blocking stream is captured. */
bool legacy_refused()
{
    for (cudaStream_t s : streams)
        if (s->capture && !(s->flags & cudaStreamNonBlocking)) return true;
    return false;
}

bool known(cudaStream_t s)
{
    one_thread();
    return streams.count(s) != 0;
}

/* The stream's device; s null is the current device's legacy stream. */
cudaError_t stream_device(cudaStream_t s, const char *fn, int *dev)
{
    if (!s) {
        *dev = current_device;
        return cudaSuccess;
    }
    if (!known(s))
        return fail(cudaErrorInvalidResourceHandle, "%s: stream %p was not created (or destroyed)", fn, (void *)s);
    *dev = s->device;
    return cudaSuccess;
}

/* Runs work on stream s now, or records it when s is being captured. */
cudaError_t enqueue(cudaStream_t s, const char *fn, std::function<void()> work)
{
    int dev = -1;
    if (cudaError_t e = stream_device(s, fn, &dev)) return e;
    if (!s) {
        if (legacy_refused()) {
            invalidate_captures();
            return fail(cudaErrorStreamCaptureImplicit, "%s on the legacy stream while a blocking stream is captured",
                        fn);
        }
    } else if (s->capture) {
        if (s->invalidated) return fail(cudaErrorStreamCaptureInvalidated, "%s: the capture was invalidated", fn);
        s->capture->nodes.push_back(std::move(work));
        return cudaSuccess;
    }
    work();
    return cudaSuccess;
}

double now_ms()
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/* ---- fibers: a stack each, and a switch between them -------------------- */

/* Not under CET (-fcf-protection): a return into a fiber's first frame is
 * not a return to its call, which a shadow stack refuses. */
#if defined(__x86_64__) && !defined(ACTC_EMU_UCONTEXT) && !defined(__CET__)
/* The callee-saved registers, the SSE and x87 control words, then the
 * stack pointer: what a function call may assume kept (System V ABI).
 * glibc's swapcontext also saves the signal mask, a system call each way,
 * which made the emulator spend more time in the kernel than in kernels. */
extern "C" void actc_emu_switch(void **save_sp, void *to_sp);
asm(R"(
    .text
    .p2align 4
    .type actc_emu_switch, @function
actc_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size actc_emu_switch, .-actc_emu_switch
)");
struct context {
    void *sp;
};
/* A frame actc_emu_switch returns from into fn, which must not return:
 * the control words (the caller's, as ucontext would inherit them), six
 * zero registers, fn as the return address, and a slot that leaves the
 * stack aligned as after a call. */
void context_start(context &c, char *stack, size_t size, void (*fn)())
{
    uint32_t mxcsr;
    uint16_t fcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fcw));
    uint64_t *p = (uint64_t *)((uintptr_t)(stack + size) & ~(uintptr_t)15);
    *--p = 0;
    *--p = (uint64_t)(uintptr_t)fn;
    for (int r = 0; r < 6; r++) *--p = 0;
    *--p = mxcsr | (uint64_t)fcw << 32;
    c.sp = p;
}
void context_switch(context &from, context &to) { actc_emu_switch(&from.sp, to.sp); }
#else
struct context {
    ucontext_t uc;
};
void context_start(context &c, char *stack, size_t size, void (*fn)())
{
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, fn, 0);
}
void context_switch(context &from, context &to) { swapcontext(&from.uc, &to.uc); }
#endif

/* ---- the kernels' threads ---------------------------------------------- */

enum { RUN, AT_SHUFFLE, AT_BARRIER, DONE };

struct fiber {
    context ctx;
    char *stack;
    uint3 tid;
    int state;
    /* at a shuffle or a barrier: its call (file, line and the expansion's
     * number: two shuffles on one line differ) */
    const char *file;
    unsigned line;
    int site;
    unsigned mask;
    int kind, arg, width;
    uint64_t bits, result;
    void *asan_fake;
};

const size_t STACK = 128 << 10;

struct grid_run {
    const actc_emu::launch_site *at;
    const std::function<void()> *body;
    uint3 block_idx, block_dim, grid_dim;
    std::vector<fiber> f;
    unsigned cur;
    context sched;
    const void *sched_bottom;
    size_t sched_size;
    void *sched_fake;
};
thread_local grid_run *G;
thread_local std::vector<char *> stacks; /* one per thread of a block, kept */

char *stack_of(unsigned t)
{
    while (stacks.size() <= t) {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        void *m = mmap(nullptr, STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) fatal("no memory for a thread's stack");
        mprotect(m, page, PROT_NONE); /* an overflow faults */
        stacks.push_back((char *)m + page);
    }
    return stacks[t];
}

[[noreturn]] void fiber_main()
{
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &G->sched_bottom, &G->sched_size);
#endif
    (*G->body)();
    fiber &f = G->f[G->cur];
    f.state = DONE;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, G->sched_bottom, G->sched_size);
#endif
    context_switch(f.ctx, G->sched);
    fatal("a finished thread resumed");
}

void resume(grid_run &g, unsigned t)
{
    g.cur = t;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&g.sched_fake, g.f[t].stack, STACK);
#endif
    context_switch(g.sched, g.f[t].ctx);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(g.sched_fake, nullptr, nullptr);
#endif
}

/* The running thread waits (state AT_SHUFFLE or AT_BARRIER, set by the
 * caller) until the scheduler resumes it. */
void yield()
{
    fiber &f = G->f[G->cur];
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&f.asan_fake, G->sched_bottom, G->sched_size);
#endif
    context_switch(f.ctx, G->sched);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake, nullptr, nullptr);
#endif
}

/* Two threads waiting at the same shuffle or barrier (__FILE__ strings may
 * differ in address only). */
bool same_site(const fiber &a, const fiber &b)
{
    return a.site == b.site && a.line == b.line && (a.file == b.file || strcmp(a.file, b.file) == 0);
}

const char *where(const grid_run &g)
{
    static thread_local char buf[256];
    snprintf(buf, sizeof buf, "kernel launched by %s at line %d, block (%u,%u,%u)", g.at->fn, g.at->line,
             g.block_idx.x, g.block_idx.y, g.block_idx.z);
    return buf;
}

const char *state_name(int s)
{
    return s == DONE ? "has exited" : s == AT_BARRIER ? "waits at a __syncthreads" : "runs";
}

/* Lanes lo .. hi of a warp, some at a shuffle: all must be at that one. */
void exchange(grid_run &g, unsigned lo, unsigned hi)
{
    unsigned r = lo;
    while (g.f[r].state != AT_SHUFFLE) r++;
    const fiber &ref = g.f[r];
    for (unsigned t = lo; t < hi; t++) {
        const fiber &x = g.f[t];
        if (x.state != AT_SHUFFLE)
            fatal("%s: lane %u waits at the warp shuffle at %s:%u while lane %u %s (a hang or undefined on a GPU)",
                  where(g), r - lo, ref.file, ref.line, t - lo, state_name(x.state));
        if (!same_site(x, ref) || x.kind != ref.kind || x.width != ref.width)
            fatal("%s: lanes %u and %u of a warp wait at different shuffles (%s:%u, %s:%u)", where(g), r - lo,
                  t - lo, ref.file, ref.line, x.file, x.line);
        if (x.mask != 0xFFFFFFFFu)
            fatal("%s: a shuffle with mask %#x at %s:%u (the emulator takes whole-warp masks only)", where(g), x.mask,
                  x.file, x.line);
    }
    if (hi - lo != 32)
        fatal("%s: a whole-warp shuffle at %s:%u in a warp of %u threads", where(g), ref.file, ref.line, hi - lo);
    const int w = ref.width;
    if (w < 1 || w > 32 || (w & (w - 1))) fatal("%s: shuffle width %d at %s:%u", where(g), w, ref.file, ref.line);
    /* The source lane as PTX's shfl.sync takes it (the lane or offset's
     * low 5 bits; a segment of w lanes): idx within the segment, up and
     * down the own value past the segment's edge, xor the own value past
     * its end (an earlier segment may be read). */
    for (unsigned t = lo; t < hi; t++) {
        fiber &x = g.f[t];
        const int lane = (int)(t - lo), seg = lane & ~(w - 1), last = seg + w - 1, b = x.arg & 31;
        int src = lane;
        switch (x.kind) {
        case actc_emu::SHFL_IDX: src = seg | (b & (w - 1)); break;
        case actc_emu::SHFL_UP: src = lane - b >= seg ? lane - b : lane; break;
        case actc_emu::SHFL_DOWN: src = lane + b <= last ? lane + b : lane; break;
        default: src = (lane ^ b) <= last ? lane ^ b : lane;
        }
        x.result = g.f[lo + (unsigned)src].bits;
    }
    for (unsigned t = lo; t < hi; t++) g.f[t].state = RUN;
}

/* ACTC_CUDA_EMU_ORDER=reverse: threads and blocks in the other order. */
bool reverse_order()
{
    static const bool r = [] {
        const char *e = getenv("ACTC_CUDA_EMU_ORDER");
        return e && strcmp(e, "reverse") == 0;
    }();
    return r;
}

void run_block(grid_run &g)
{
    const uint3 bd = g.block_dim;
    const unsigned n = bd.x * bd.y * bd.z;
    if (g.f.size() < n) g.f.resize(n);
    for (unsigned t = 0; t < n; t++) {
        fiber &f = g.f[t];
        f.state = RUN;
        f.tid = {t % bd.x, t / bd.x % bd.y, t / (bd.x * bd.y)};
        f.stack = stack_of(t);
#ifdef EMU_ASAN
        /* The frames a finished thread left (it switched away, never
         * returned) keep their redzones poisoned: clear them for the next. */
        __asan_unpoison_memory_region(f.stack, STACK);
#endif
        context_start(f.ctx, f.stack, STACK, fiber_main);
    }
    const bool rev = reverse_order();
    for (;;) {
        /* Warp by warp, until each thread has exited or waits at a barrier. */
        for (unsigned w = 0; w < (n + 31) / 32; w++) {
            const unsigned lo = 32 * (rev ? (n + 31) / 32 - 1 - w : w), hi = lo + 32 < n ? lo + 32 : n;
            for (;;) {
                bool shuffle = false;
                for (unsigned k = lo; k < hi; k++) {
                    const unsigned t = rev ? lo + hi - 1 - k : k;
                    if (g.f[t].state == RUN) resume(g, t);
                    shuffle |= g.f[t].state == AT_SHUFFLE;
                }
                if (!shuffle) break;
                exchange(g, lo, hi);
            }
        }
        unsigned waiting = 0, first = n;
        for (unsigned t = 0; t < n; t++)
            if (g.f[t].state == AT_BARRIER) waiting++, first = first < t ? first : t;
        if (!waiting) return;
        const fiber &ref = g.f[first];
        for (unsigned t = 0; t < n; t++) {
            const fiber &x = g.f[t];
            if (x.state != AT_BARRIER)
                fatal("%s: thread %u waits at the __syncthreads at %s:%u while thread %u %s", where(g), first, ref.file,
                      ref.line, t, state_name(x.state));
            if (!same_site(x, ref))
                fatal("%s: threads %u and %u wait at different __syncthreads (%s:%u, %s:%u)", where(g), first, t,
                      ref.file, ref.line, x.file, x.line);
        }
        for (unsigned t = 0; t < n; t++) g.f[t].state = RUN;
    }
}

void run_grid(const actc_emu::launch_site &at, const std::function<void()> &body)
{
    one_thread();
    if (G) fatal("a kernel launched from a kernel (%s, line %d)", at.fn, at.line);
    grid_run g;
    g.at = &at;
    g.body = &body;
    g.block_dim = {at.block.x, at.block.y, at.block.z};
    g.grid_dim = {at.grid.x, at.grid.y, at.grid.z};
    g.cur = 0;
    G = &g;
    const size_t blocks = (size_t)at.grid.x * at.grid.y * at.grid.z;
    for (size_t k = 0; k < blocks; k++) {
        const size_t b = reverse_order() ? k : blocks - 1 - k;
        g.block_idx = {(unsigned)(b % at.grid.x), (unsigned)(b / at.grid.x % at.grid.y),
                       (unsigned)(b / ((size_t)at.grid.x * at.grid.y))};
        run_block(g);
    }
    G = nullptr;
}

const grid_run &running()
{
    if (!G) fatal("threadIdx, a shuffle or a barrier outside a kernel");
    return *G;
}

} // namespace

/* ---- the device side (emu_device.h) -------------------------------------- */

namespace actc_emu {

const uint3 &thread_idx() { return running().f[G->cur].tid; }
const uint3 &block_idx() { return running().block_idx; }
const uint3 &block_dim() { return running().block_dim; }
const uint3 &grid_dim() { return running().grid_dim; }

uint64_t shuffle(const char *file, int line, int site, unsigned mask, uint64_t bits, int kind, int arg, int width)
{
    fiber &f = G->f[running().cur];
    f.state = AT_SHUFFLE;
    f.file = file;
    f.line = (unsigned)line;
    f.site = site;
    f.mask = mask;
    f.kind = kind;
    f.arg = arg;
    f.width = width;
    f.bits = bits;
    yield();
    return f.result;
}

void barrier(const char *file, int line, int site)
{
    fiber &f = G->f[running().cur];
    f.state = AT_BARRIER;
    f.file = file;
    f.line = (unsigned)line;
    f.site = site;
    yield();
}

void submit(const launch_site &at, std::function<void()> body, size_t param_bytes,
            const std::vector<const void *> &pointers)
{
    const char *fn = "kernel launch";
    const dim3 b = at.block, g = at.grid;
    if (!b.x || !b.y || !b.z || b.x > 1024 || b.y > 1024 || b.z > 64 || (size_t)b.x * b.y * b.z > 1024 || !g.x ||
        !g.y || !g.z || g.x > 0x7FFFFFFFu || g.y > 65535 || g.z > 65535 || at.shared_bytes > 48 * 1024) {
        fail(cudaErrorInvalidConfiguration, "%s at line %d: grid (%u,%u,%u), block (%u,%u,%u), %zu bytes shared",
             at.fn, at.line, g.x, g.y, g.z, b.x, b.y, b.z, at.shared_bytes);
        return;
    }
    if (param_bytes > 4096) {
        fail(cudaErrorInvalidValue, "%s at line %d: %zu bytes of parameters (4 KiB, the limit before CUDA 12.1)",
             at.fn, at.line, param_bytes);
        return;
    }
    int dev = -1;
    if (stream_device(at.stream, fn, &dev)) return;
    if (dev != current_device) {
        fail(cudaErrorInvalidResourceHandle, "%s at line %d: a stream of device %d while device %d is current", at.fn,
             at.line, dev, current_device);
        return;
    }
    std::vector<uintptr_t> touched; /* the allocations' starts: found again when the work runs */
    for (size_t i = 0; i < pointers.size(); i++) {
        if (!pointers[i]) continue;
        const allocation *a = find(pointers[i]);
        if (!a)
            fatal("kernel launched by %s at line %d: pointer argument %p is not device memory (host memory?)", at.fn,
                  at.line, pointers[i]);
        if (a->device != dev)
            fatal("kernel launched by %s at line %d: pointer argument %p is memory of device %d, the stream's is %d",
                  at.fn, at.line, pointers[i], a->device, dev);
        touched.push_back((uintptr_t)a->user);
    }
    const launch_site site = at;
    enqueue(at.stream, fn, [site, body = std::move(body), touched] {
        for (uintptr_t u : touched)
            if (!allocations.count(u))
                fatal("the kernel launched by %s at line %d: a buffer it was given was freed before it ran", site.fn,
                      site.line);
        run_grid(site, body);
        char what[128];
        snprintf(what, sizeof what, "the kernel launched by %s at line %d", site.fn, site.line);
        for (uintptr_t u : touched) check_canary(allocations.at(u), what);
    });
}

} // namespace actc_emu

/* ---- the runtime API (cuda_runtime_api.h) ---------------------------------- */

extern "C" {

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError(void)
{
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = device_count();
    return *n ? cudaSuccess : fail(cudaErrorNoDevice, "ACTC_CUDA_EMU_DEVICES=0");
}

cudaError_t cudaGetDevice(int *d)
{
    if (!device_count()) return fail(cudaErrorNoDevice, "cudaGetDevice");
    *d = current_device;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    if (d < 0 || d >= device_count()) return fail(cudaErrorInvalidDevice, "cudaSetDevice(%d)", d);
    current_device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    if (d < 0 || d >= device_count()) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d)", d);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CUDA emulated on the CPU (tests/gpu/emu), device %d", d);
    p->totalGlobalMem = (size_t)1 << 30;
    p->major = 9;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return unsafe("cudaDeviceSynchronize"); }

cudaError_t cudaMalloc(void **p, size_t n)
{
    if (cudaError_t e = unsafe("cudaMalloc")) return e;
    if (!device_count()) return fail(cudaErrorNoDevice, "cudaMalloc");
    allocation a;
    a.size = n;
    a.device = current_device;
#ifdef EMU_ASAN
    a.span = n;
    a.map_len = 0;
    if (posix_memalign(&a.map, 256, n ? n : 1)) return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu)", n);
    a.user = (char *)a.map;
#else
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    a.span = (n + 255) / 256 * 256;
    const size_t data = (a.span + page - 1) / page * page;
    a.map_len = data + 2 * page;
    a.map = mmap(nullptr, a.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a.map == MAP_FAILED) return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu)", n);
    mprotect(a.map, page, PROT_NONE);
    mprotect((char *)a.map + page + data, page, PROT_NONE);
    a.user = (char *)a.map + page + data - a.span;
#endif
    memset(a.user, FRESH, n);
    memset(a.user + n, CANARY, a.span - n);
    allocations[(uintptr_t)a.user] = a;
    *p = a.user;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (cudaError_t e = unsafe("cudaFree")) return e;
    if (!p) return cudaSuccess;
    auto it = allocations.find((uintptr_t)p);
    if (it == allocations.end()) return fail(cudaErrorInvalidValue, "cudaFree(%p): not an allocation's start", p);
    const allocation a = it->second;
    allocations.erase(it);
    check_canary(a, "something");
#ifdef EMU_ASAN
    free(a.map);
#else
    munmap(a.map, a.map_len);
#endif
    return cudaSuccess;
}

static cudaError_t copy_check(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, const char *fn)
{
    if (kind == cudaMemcpyDefault) kind = (enum cudaMemcpyKind)((find(src) ? 2 : 0) + (find(dst) ? 1 : 0));
    const bool sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice,
               dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice)
        return fail(cudaErrorInvalidValue, "%s: copy kind %d", fn, (int)kind);
    if (!n) return cudaSuccess;
    if (sd ? !inside(src, n) : find(src) != nullptr)
        return fail(cudaErrorInvalidValue, "%s: the source [%p, +%zu) is not %s", fn, src, n,
                    sd ? "inside one device allocation" : "host memory");
    if (dd ? !inside(dst, n) : find(dst) != nullptr)
        return fail(cudaErrorInvalidValue, "%s: the destination [%p, +%zu) is not %s", fn, dst, n,
                    dd ? "inside one device allocation" : "host memory");
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    if (cudaError_t e = unsafe("cudaMemcpy")) return e;
    if (cudaError_t e = copy_check(dst, src, n, kind, "cudaMemcpy")) return e;
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    if (cudaError_t e = copy_check(dst, src, n, kind, "cudaMemcpyAsync")) return e;
    if (s && known(s) && s->capture && n && (!find(src) || !find(dst))) {
        invalidate_captures();
        return fail(cudaErrorStreamCaptureUnsupported, "cudaMemcpyAsync to or from pageable host memory, captured");
    }
    return enqueue(s, "cudaMemcpyAsync", [=] {
        if (n) memmove(dst, src, n);
    });
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
    if (cudaError_t e = unsafe("cudaMemset")) return e;
    if (n && !inside(p, n)) return fail(cudaErrorInvalidValue, "cudaMemset: [%p, +%zu) is not device memory", p, n);
    memset(p, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    if (n && !inside(p, n)) return fail(cudaErrorInvalidValue, "cudaMemsetAsync: [%p, +%zu) is not device memory", p, n);
    return enqueue(s, "cudaMemsetAsync", [=] { memset(p, v, n); });
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *at, const void *p)
{
    if (cudaError_t e = unsafe("cudaPointerGetAttributes")) return e;
    const allocation *a = find(p);
    at->type = a ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    at->device = a ? a->device : -2;
    at->devicePointer = a ? (void *)p : nullptr;
    at->hostPointer = a ? nullptr : (void *)p;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    if (!device_count()) return fail(cudaErrorNoDevice, "cudaStreamCreate");
    one_thread();
    *s = new actc_emu_stream{current_device, flags, nullptr, cudaStreamCaptureModeGlobal, false};
    streams.insert(*s);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!known(s)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p)", (void *)s);
    streams.erase(s);
    delete s->capture;
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamGetDevice(cudaStream_t s, int *d)
{
    if (cudaError_t e = unsafe("cudaStreamGetDevice")) return e;
    return stream_device(s, "cudaStreamGetDevice", d);
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    int dev = -1;
    if (cudaError_t e = stream_device(s, "cudaStreamSynchronize", &dev)) return e;
    return unsafe("cudaStreamSynchronize");
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    *e = new actc_emu_event{0.0, false};
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    return enqueue(s, "cudaEventRecord", [e] {
        e->ms = now_ms();
        e->recorded = true;
    });
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    (void)e;
    return unsafe("cudaEventSynchronize");
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: not recorded");
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    const cudaStreamCaptureMode m = thread_mode;
    thread_mode = *mode;
    *mode = m;
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    if (!s) return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture on the legacy stream");
    if (!known(s)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamBeginCapture(%p)", (void *)s);
    if (s->capture) return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: already capturing");
    s->capture = new actc_emu_graph;
    s->mode = mode;
    s->invalidated = false;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    if (!known(s) || !s->capture) return fail(cudaErrorInvalidValue, "cudaStreamEndCapture: not capturing");
    const bool bad = s->invalidated;
    *g = bad ? nullptr : s->capture;
    if (bad) delete s->capture;
    s->capture = nullptr;
    s->invalidated = false;
    return bad ? fail(cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture") : cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *ge, cudaGraph_t g, unsigned long long flags)
{
    (void)flags;
    if (!g) return fail(cudaErrorInvalidValue, "cudaGraphInstantiateWithFlags: no graph");
    *ge = new actc_emu_graph_exec;
    (*ge)->nodes = g->nodes;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t ge, cudaStream_t s)
{
    return enqueue(s, "cudaGraphLaunch", [ge] {
        for (auto &node : ge->nodes) node();
    });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t ge)
{
    delete ge;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}

} /* extern "C" */
