/* Internal helpers of the core layer shared by the layers above it. */
#ifndef ACTC_CORE_H
#define ACTC_CORE_H
#include "actc.h"
#include "hostdev.h" /* bf16 conversions, rng keys: shared with the CUDA codecs */

/* The process-wide settings (settings.c): one object the public setters
 * write (actc_set_threads, actc_set_deterministic, actc_set_gemm_backend,
 * actc_set_conv_backend, which check one another's fields here) and the
 * kernels read, so no layer's setter calls another layer's getter.  Fields
 * are written between steps and read per call (volatile: a plain int read
 * each time). */
enum { ACTC__BACKEND_AUTO = -1 }; /* gemm and conv: the per-call choice  */
enum { ACTC__GEMM_OPENBLAS = 0, ACTC__GEMM_DNNL = 1 };
enum { ACTC__CONV_IM2COL = 0, ACTC__CONV_DNNL = 1 };
typedef struct {
    volatile int threads;       /* what actc_set_threads last set (0: never) */
    volatile int deterministic; /* actc_set_deterministic                    */
    volatile int gemm;          /* ACTC__BACKEND_AUTO or ACTC__GEMM_*       */
    volatile int conv;          /* ACTC__BACKEND_AUTO or ACTC__CONV_*       */
    volatile int precision;     /* bits of the dense products' operands: 32
                                   (fp32) is the only one today            */
} actc__settings;
extern actc__settings actc__set;

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
/* 1 if the caller's reference is t's only one and t owns its buffer (not a
 * view): only then may t's data be moved or written over in place.  A
 * tensor the store keeps by reference has more than one. */
int actc__tensor_sole_owner(const actc_tensor *t);
/* A new tensor (its own id, no gradient, refs_ 1) sharing t's data: it
 * holds one reference to t (to t's base if t is a view itself) and drops it
 * when released.  The store's loads of a save kept by reference.  NULL with
 * ACTC_ERR_OOM. */
actc_tensor *actc__tensor_view(actc_tensor *t);
/* Product of dims; 0 ndim -> 1 (scalar). */
size_t actc__numel(int ndim, const int *shape);
/* Seconds on a monotonic clock. */
double actc__now(void);
/* The share [*lo, *hi) of `total` items of the calling thread inside an
 * OpenMP parallel region (contiguous and in order, so a thread walks its
 * items in memory order); [0, total) outside one. */
void actc__thread_share(size_t total, size_t *lo, size_t *hi);

/* Hot element-wise kernels are compiled once per x86 ISA level and picked
 * at load time (the library is built without -march, for any x86-64
 * machine): AVX2 and AVX-512 run several times faster than baseline SSE2,
 * which also lacks 32-bit multiplies and min/max.  GCC 12 is the first to
 * dispatch on ISA levels; clang 14 multiversions only functions declared so
 * everywhere, so it gets one version (e.g. the fuzz build). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    !defined(ACTC_QUANT_NO_CLONES)
#define ACTC_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "arch=x86-64-v2", "default")))
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(ACTC_QUANT_NO_CLONES)
#define ACTC_ISA_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ACTC_ISA_CLONES
#endif

/* Row-major C = alpha op(A) op(B) + beta C (ta/tb: transpose A/B), every
 * dense product of the library, on the backend actc_set_gemm_backend
 * chose; under actc_set_deterministic the same product in tiles summed in
 * an order that does not depend on the thread count (gemm.c). */
void actc__sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc);
/* The processor, read once per process (cpu.c). */
const actc_cpu_info *actc__cpu(void);
/* A parameter's gradient in a form other than dense (src/grad/form.c)
 * starts with this header: a tensor owns its gradient in every
 * form, and core clears or frees it through release (destroy 0: drop the
 * gradient held, keep the chosen form; 1: free it all) without knowing the
 * forms, which live in a layer above. */
struct actc_grad_state {
    void (*release)(actc_tensor *t, int destroy);
};
/* Write the projection's P (row-major n x rank) into P: what
 * actc_project builds for each call, for callers that hold the buffer. */
void actc__projection_fill(const actc_projection *p, float *P);
/* ACTC_OK if p describes a projection (sizes, kind, density, scale), else
 * ACTC_ERR_INVALID with a message starting with `what`. */
actc_status actc__projection_check(const char *what, const actc_projection *p);
/* 1 if a and b are the same projection (every field but age). */
int actc__projection_same(const actc_projection *a, const actc_projection *b);
/* sum (a[i] - b[i])^2 in double, a or b NULL meaning zeros; in an order
 * that does not depend on the thread count. */
double actc__sum_sq_diff(const float *a, const float *b, size_t n);
/* Move the live block at p (from actc_mem_alloc) to category cat: its bytes
 * leave the current count of its category and join cat's (whose peak may
 * rise); the total does not change.  Returns the category it had.  The
 * store counts a tensor it keeps by reference as CONTEXT this way. */
actc_mem_cat actc__mem_move(void *p, actc_mem_cat cat);
/* Free every block the allocator keeps for reuse (actc_mem_trim; also for
 * the process-wide teardown). */
void actc__mem_release_cache(void);
/* dst[0..n) = src[0..n), on the threads when n is large and the caller is
 * not in a parallel region already (one thread's memcpy is a serial
 * section that grows with the batch). */
void actc__copy_floats(float *dst, const float *src, size_t n);
/* dst[0..n) = 0, likewise on the threads. */
void actc__zero_floats(float *dst, size_t n);
/* Each of rows rows of dst (width floats, contiguous) = row, likewise. */
void actc__repeat_row(float *dst, const float *row, size_t rows, size_t width);
/* Minimum of two sizes. */
static inline size_t actc__min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* ---- little-endian serialisation (bytes.c) ---- */
/* A writer: bytes append to a growable buffer (zero-initialise it; free
 * with actc__wbuf_free), or, with sink set, go to sink(sink_ctx, ...) and
 * are not kept, or, with count_only, are only counted.  len counts the
 * bytes written in every mode; failed is set (and later writes do nothing)
 * when memory runs out or the sink reports an error. */
typedef struct {
    uint8_t *p;
    size_t len, cap;
    int failed;
    int count_only;
    int (*sink)(void *sink_ctx, const void *p, size_t n); /* 0 ok, else failed */
    void *sink_ctx;
} actc__wbuf;
void actc__wbuf_free(actc__wbuf *w);
void actc__w_bytes(actc__wbuf *w, const void *p, size_t n);
void actc__w_u32(actc__wbuf *w, uint32_t v);
void actc__w_u64(actc__wbuf *w, uint64_t v);
void actc__w_f32(actc__wbuf *w, float f);
void actc__w_f64(actc__wbuf *w, double d);
/* u32 length, then the bytes (no NUL); NULL writes an empty string. */
void actc__w_str(actc__wbuf *w, const char *s);
void actc__w_floats(actc__wbuf *w, const float *p, size_t n);
/* A cursor over [p + pos, p + end): reading past the end sets bad and
 * returns zeros, so a parser checks once at the end. */
typedef struct {
    const uint8_t *p;
    size_t pos, end;
    int bad;
} actc__rbuf;
const uint8_t *actc__r_take(actc__rbuf *r, size_t n);
uint32_t actc__r_u32(actc__rbuf *r);
uint64_t actc__r_u64(actc__rbuf *r);
float actc__r_f32(actc__rbuf *r);
double actc__r_f64(actc__rbuf *r);
/* A string of fewer than cap bytes into dst: 1, or 0 (bad set). */
int actc__r_str(actc__rbuf *r, char *dst, size_t cap);
void actc__put_u32(uint8_t *b, uint32_t v);
void actc__put_u64(uint8_t *b, uint64_t v);
uint32_t actc__get_u32(const uint8_t *b);
uint64_t actc__get_u64(const uint8_t *b);
/* n little-endian floats from src into dst. */
void actc__get_floats(float *dst, const uint8_t *src, size_t n);
/* a * b into *out: 1, or 0 when it overflows size_t. */
int actc__mul_size(size_t a, size_t b, size_t *out);
/* A Philox word as a uniform float in [0, 1) with 24 random bits: what
 * actc_rand_uniform returns for its word (loops that need four uniforms
 * from one block use it directly). */
static inline float actc__word_uniform(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }
#endif
