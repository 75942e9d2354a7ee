/*
 * actc.h - the one public header of actc, a C11 library for training neural
 * networks with compressed activations.
 *
 * Every tensor an operator keeps for its backward pass goes through the
 * saved-context store (actc_save / actc_load).  The active policy picks a codec
 * for each saved tensor; operators never know which one.  All tensor memory goes
 * through one accounting allocator with categories, peaks and an optional budget.
 *
 * Conventions
 *  - Every function that can fail returns an actc_status (or NULL) and leaves a
 *    message readable with actc_last_error().  The library never prints or exits.
 *  - Tensors are float32, contiguous, row-major, at most ACTC_MAX_DIMS dims.
 *    Image tensors are NCHW.
 *  - Ownership: a function returning a new actc_tensor* gives the caller one
 *    reference; drop it with actc_tensor_release().
 *  - Performance: the allocator reuses freed blocks itself (a training step
 *    frees and re-allocates the same large tensors), bounded by the cache
 *    limit (actc_mem_set_cache_limit); no malloc tuning is needed.
 *  - The allocator and the error message are process-wide (the message is per
 *    thread).  One actc_ctx is used from one thread at a time; kernels use OpenMP
 *    internally.
 */
#ifndef ACTC_H
#define ACTC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ACTC_API marks the public functions: the library is compiled with
 * -fvisibility=hidden, so these are the only symbols libactc.so exports (the
 * internal actc__* functions stay hidden).  Every function declared in this
 * header carries it (tests/install/symbols_test.sh checks). */
#if defined(__GNUC__) || defined(__clang__)
#define ACTC_API __attribute__((visibility("default")))
#else
#define ACTC_API
#endif

/* The library's version; CMakeLists.txt reads it from here (the SOVERSION
 * and the package files follow it).  ABI: before 1.0 a minor release may
 * break it (soname libactc.so.0.MINOR), from 1.0 only a major one; a patch
 * release never does (README, "Installing and linking"). */
#define ACTC_VERSION "0.15.0"
#define ACTC_VERSION_MAJOR 0
#define ACTC_VERSION_MINOR 15
#define ACTC_VERSION_PATCH 0
/* ACTC_VERSION_MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons. */
#define ACTC_VERSION_NUMBER (ACTC_VERSION_MAJOR * 10000 + ACTC_VERSION_MINOR * 100 + ACTC_VERSION_PATCH)
/* The version of the library linked at run time ("0.2.0"); compare with
 * ACTC_VERSION, the one the program was compiled against. */
ACTC_API const char *actc_version(void);

/* ------------------------------------------------------------------------ */
/* Library                                                                   */
/* ------------------------------------------------------------------------ */

/* Release the process-wide resources the library keeps across calls (the
 * oneDNN engine, stream and cached convolution primitives, the allocator's
 * cached blocks).  The library registers no exit handler: call this before
 * the program exits so that leak checkers (valgrind, LeakSanitizer) see
 * nothing left.  Safe to call more than once; the library stays usable
 * afterwards (the resources are made again on demand).  Call it while no
 * other thread is inside the library. */
ACTC_API void actc_shutdown(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum {
    ACTC_OK = 0,
    ACTC_ERR_INVALID = 1,  /* bad argument, shape mismatch, unknown name      */
    ACTC_ERR_OOM = 2,      /* allocation failed or the memory budget is hit   */
    ACTC_ERR_IO = 3,       /* a file could not be opened, read or written     */
    ACTC_ERR_FORMAT = 4,   /* a file is truncated, corrupt or of wrong kind   */
    ACTC_ERR_NUMERIC = 5,  /* NaN or Inf where a finite number is required    */
    ACTC_ERR_STATE = 6,    /* call made in the wrong state (e.g. no tape)     */
    ACTC_ERR_COMM = 7,     /* communication between processes failed (MPI), or
                              the processes disagree (flags, sizes)           */
    ACTC_ERR_DEVICE = 8    /* the GPU or its runtime failed (CUDA's message)  */
} actc_status;

/* The message of the last failure on this thread ("" if none). */
ACTC_API const char *actc_last_error(void);
/* A short constant name for a status ("ACTC_ERR_OOM"...). */
ACTC_API const char *actc_status_name(actc_status s);
/* Record a failure: sets the thread's message (printf format) and returns s.
 * Public so that user-defined operators report errors the same way. */
ACTC_API actc_status actc_set_error(actc_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Status of the last failure on this thread (ACTC_OK after actc_clear_error). */
ACTC_API actc_status actc_last_status(void);
/* Forget the last failure. */
ACTC_API void actc_clear_error(void);

/* ------------------------------------------------------------------------ */
/* Accounting allocator                                                      */
/* ------------------------------------------------------------------------ */

typedef enum {
    ACTC_MEM_PARAM = 0,  /* model parameters and buffers (running stats)      */
    ACTC_MEM_GRAD,       /* parameter gradients                                */
    ACTC_MEM_OPTIM,      /* optimizer state                                    */
    ACTC_MEM_CONTEXT,    /* what the saved-context store holds for backward    */
    ACTC_MEM_ACT,        /* live forward outputs and backward gradients        */
    ACTC_MEM_SCRATCH,    /* workspaces (im2col, decoded contexts, data batch)  */
    ACTC_MEM_COMM,       /* communication buffers (data-parallel gradients)    */
    ACTC_MEM_NCAT
} actc_mem_cat;

typedef struct {
    size_t current[ACTC_MEM_NCAT]; /* bytes live now, per category            */
    size_t peak[ACTC_MEM_NCAT];    /* highest value of current[c] since reset */
    size_t current_total;          /* sum of current[]                        */
    size_t peak_total;             /* highest value of current_total          */
    size_t budget;                 /* 0 = unlimited                           */
    size_t n_allocs;               /* allocations since the start             */
    size_t n_sys_allocs;           /* those of them the system malloc served
                                      (the others reused a cached block)     */
    size_t cached;                 /* bytes (class sizes) of freed blocks kept
                                      for reuse: not live, so in no current[],
                                      peak[], current_total or peak_total    */
    size_t cache_limit;            /* most bytes the cache may hold now: the
                                      limit (by default 2 x high-water mark
                                      - current_total), at most budget -
                                      current_total under a budget          */
} actc_mem_stats;

/* actc_mem_set_cache_limit's default: live + cached bytes stay within twice
 * the most bytes ever live at once. */
#define ACTC_MEM_CACHE_AUTO ((size_t)-1)

/* Allocate `bytes` (64-byte aligned) tagged with `cat`.  Returns NULL and sets
 * ACTC_ERR_OOM, with a message naming the category and the request, when the
 * budget would be exceeded or the system is out of memory.  bytes==0 is valid. */
ACTC_API void *actc_mem_alloc(actc_mem_cat cat, size_t bytes);
/* As actc_mem_alloc, zero-filled. */
ACTC_API void *actc_mem_calloc(actc_mem_cat cat, size_t bytes);
/* Free a block from actc_mem_alloc (NULL is ignored).  A block above 64 KiB
 * may be kept for reuse (see actc_mem_set_cache_limit). */
ACTC_API void actc_mem_free(void *p);
/* Size in bytes of a block from actc_mem_alloc. */
ACTC_API size_t actc_mem_size(const void *p);
/* Move the block at p (and its bytes in the statistics) to category cat:
 * for a buffer that changes role without a copy (a decoded save that becomes
 * a gradient). */
ACTC_API void actc_mem_retag(void *p, actc_mem_cat cat);
/* Limit the total of live bytes (all categories); 0 removes the limit.
 * Cached blocks count too: live + cached never exceeds the budget, as cached
 * blocks are freed to make room, so they never cause a refusal. */
ACTC_API void actc_mem_set_budget(size_t bytes);
/* Freed blocks above 64 KiB are kept in size classes (four per power of two;
 * a request is rounded up to its class) and reused by the next request of
 * their class, or by one down to half their size whose own class has none,
 * so a training step does not page-fault its working set in again.  This
 * sets the most bytes the cache holds (cached blocks over it are freed now);
 * 0 turns the cache off (and the rounding).  The default, ACTC_MEM_CACHE_AUTO,
 * keeps live + cached within twice the high-water mark of live bytes (since
 * the start, not reset by actc_mem_reset_peak): a step's freed blocks
 * measured 0.7x (gpt-mini) to 1.3x (ResNet-20) its peak, so a training loop
 * keeps its working set, and no pattern of requests makes live + cached
 * exceed twice the most bytes the process had live. */
ACTC_API void actc_mem_set_cache_limit(size_t bytes);
/* Free every cached block (to give the memory back between phases). */
ACTC_API void actc_mem_trim(void);
/* Copy the counters into *out. */
ACTC_API void actc_mem_get_stats(actc_mem_stats *out);
/* Set every peak to the current value (start of a measured interval). */
ACTC_API void actc_mem_reset_peak(void);
/* "PARAM", "GRAD", ... */
ACTC_API const char *actc_mem_cat_name(actc_mem_cat c);
/* Parse "512MiB", "2GiB", "1.5G", "4096" (bytes).  K/M/G/T are powers of
 * 1024 with or without "iB"; "KB"/"MB"/"GB" are powers of 1000. */
ACTC_API actc_status actc_parse_bytes(const char *s, size_t *out);
/* A whole decimal number in [lo, hi]: an optional '-' and digits, nothing
 * else (no spaces, '+', hexadecimal or trailing characters).
 * ACTC_ERR_INVALID otherwise. */
ACTC_API actc_status actc_parse_int(const char *s, long long lo, long long hi, long long *out);
/* A finite decimal number as strict as actc_parse_int: '-', digits, an
 * optional fraction and exponent ("0.5", "-3e-4"); no spaces, '+', hex,
 * inf or nan. */
ACTC_API actc_status actc_parse_number(const char *s, double *out);
/* Format bytes as "12.3 MiB" into buf. Returns buf. */
ACTC_API char *actc_format_bytes(size_t bytes, char *buf, size_t cap);
/* Peak resident set size of this process in bytes (0 if unknown). */
ACTC_API size_t actc_process_peak_rss(void);

/* ------------------------------------------------------------------------ */
/* Counter-based random numbers                                              */
/* ------------------------------------------------------------------------ */

/* Philox-4x32-10: the i-th output of stream (key) is a pure function of
 * (key, i), so results do not depend on thread count or call order. */
ACTC_API void actc_philox(uint64_t key, uint64_t counter, uint32_t out[4]);
/* Uniform float in [0,1) for element i of stream key. */
ACTC_API float actc_rand_uniform(uint64_t key, uint64_t i);
/* Standard normal for element i of stream key (Box-Muller). */
ACTC_API float actc_rand_normal(uint64_t key, uint64_t i);
/* Mix several words into one stream key (splitmix64 based). */
ACTC_API uint64_t actc_rng_key(uint64_t a, uint64_t b, uint64_t c);
/* 64-bit FNV-1a of n bytes, continuing from h: start a hash with
 * ACTC_HASH_START and pass each result on to hash more bytes.  For names
 * (stable keys) and for checking that processes hold the same bytes; not
 * a cryptographic hash. */
#define ACTC_HASH_START 0xCBF29CE484222325ULL
ACTC_API uint64_t actc_hash_bytes(uint64_t h, const void *data, size_t n);

/* ------------------------------------------------------------------------ */
/* Threads                                                                   */
/* ------------------------------------------------------------------------ */

/* Set the number of OpenMP (and BLAS) threads; n<=0 keeps the default. */
ACTC_API void actc_set_threads(int n);
/* The number of threads kernels will use. */
ACTC_API int actc_get_threads(void);
/* Deterministic mode (off by default): with on != 0, every result of the
 * library (forward values, gradients, losses, the policies' statistics)
 * depends on the inputs, the seeds and the operations only, not on the
 * thread count: dense products are computed in tiles whose shape depends on
 * the product's shape alone, each on one thread, and convolutions run on
 * im2col + those products instead of oneDNN (whose weight gradient is
 * reduced across threads).  It costs speed (bench/RESULTS.md,
 * "Deterministic mode").  Without it, results are reproducible at a fixed
 * thread count only: OpenBLAS and oneDNN split their sums by the thread
 * count (the library's own kernels reduce in a fixed order either way).
 * Fails with ACTC_ERR_INVALID, changing nothing, when the convolution
 * backend is forced to "dnnl".  Set it while nothing runs, like the
 * threads.  The dense products keep the promise on either backend
 * (actc_set_gemm_backend): each tile is one single-threaded call of it. */
ACTC_API actc_status actc_set_deterministic(int on);
/* 1 in deterministic mode, else 0. */
ACTC_API int actc_get_deterministic(void);

/* ------------------------------------------------------------------------ */
/* The processor and the dense products                                      */
/* ------------------------------------------------------------------------ */

/* Vector instruction-set levels (actc_cpu_info.isa_level, openblas_level). */
#define ACTC_ISA_BASE 0   /* SSE only                         */
#define ACTC_ISA_AVX 1    /* AVX without AVX2 + FMA           */
#define ACTC_ISA_AVX2 2   /* AVX2 and FMA                     */
#define ACTC_ISA_AVX512 3 /* AVX-512 F, BW and VL (and AVX2)  */

/* What the processor offers, read from cpuid once per process, and the
 * kernels OpenBLAS loaded for it.  An extension counts only when the
 * operating system saves its registers (XCR0), as a VM may hide some. */
typedef struct actc_cpu_info {
    char vendor[16];        /* "GenuineIntel", "AuthenticAMD"; "" off x86    */
    char brand[64];         /* the brand string, e.g. "AMD EPYC"             */
    int family, model, stepping; /* display family and model (Intel's
                               Emerald Rapids: family 6, model 0xCF)        */
    char features[192];     /* those found of: sse4.2 avx avx2 fma avx512f
                               avx512bw avx512vl avx512_vnni avx512_bf16
                               amx_tile amx_bf16 amx_int8, space-separated  */
    int isa_level;          /* ACTC_ISA_*: the widest level usable          */
    int amx;                /* AMX tiles present and their state enabled
                               in XCR0 (on Linux a process still asks for
                               them with arch_prctl; oneDNN does)           */
    char openblas_core[32]; /* the kernel set OpenBLAS chose
                               (openblas_get_corename: "Haswell", "Zen",
                               "SkylakeX", "Prescott"...)                   */
    int openblas_level;     /* ACTC_ISA_* of that kernel set                */
    char openblas_config[96]; /* openblas_get_config(): its version and
                               build options                                */
    int openblas_generic;   /* 1: OpenBLAS runs kernels without AVX2 on a
                               CPU that has AVX2 or more (Debian 12's
                               OpenBLAS 0.3.21 on Intel models from 0xB0 on
                               runs "Prescott", SSE3, 3-7x slower)           */
    char dnnl_version[16];  /* oneDNN's version ("2.6.3"), "" in a build
                               without it                                   */
} actc_cpu_info;
/* Fill *out.  ACTC_ERR_INVALID for NULL. */
ACTC_API actc_status actc_get_cpu_info(actc_cpu_info *out);
/* The name of an ACTC_ISA_* level: "sse", "avx", "avx2", "avx512". */
ACTC_API const char *actc_isa_name(int level);
/* Choose the backend of every dense product of the process (linear layers,
 * attention, im2col convolutions, projections): "auto" (the default),
 * "dnnl" (oneDNN's dnnl_sgemm, JIT kernels for the CPU's feature bits) or
 * "openblas" (cblas_sgemm of the OpenBLAS the library is linked to).  auto
 * is a function of the machine, not of a timing, so the same command gives
 * the same bits on the same machine: oneDNN when OpenBLAS runs generic
 * kernels (actc_cpu_info.openblas_generic; they took 2.1x oneDNN's time on
 * a gpt-mini step's products), else OpenBLAS, so that machines whose
 * OpenBLAS kernels are tuned keep their results (there the two backends'
 * steps were within 15% of each other, each faster on some models:
 * bench/RESULTS.md, "CPU speed"); OpenBLAS in a build without oneDNN.  Results differ
 * between backends in the last bits of the sums (as between thread
 * counts).  "dnnl" in a build without oneDNN, or on an x86 CPU without
 * SSE4.2, and unknown names fail with ACTC_ERR_INVALID and change nothing.
 * The library reads no environment; the actc command passes its --gemm (or
 * ACTC_GEMM) here.  Set it while nothing runs, like the threads. */
ACTC_API actc_status actc_set_gemm_backend(const char *name);
/* The setting: "auto", "dnnl" or "openblas". */
ACTC_API const char *actc_get_gemm_backend(void);
/* The backend products run on now: "dnnl" or "openblas" (auto resolved). */
ACTC_API const char *actc_gemm_backend_in_use(void);
/* Why: auto's reason ("OpenBLAS loaded its Prescott kernels (sse) on this
 * avx512 CPU: generic"), or "forced (actc_set_gemm_backend)".  Static
 * storage.
 * A product oneDNN refuses (it refuses only arguments OpenBLAS refuses too)
 * runs on OpenBLAS. */
ACTC_API const char *actc_gemm_backend_reason(void);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

#define ACTC_MAX_DIMS 5

typedef struct actc_tensor {
    int ndim;
    int shape[ACTC_MAX_DIMS];
    size_t numel;
    float *data;               /* numel floats, from the library's allocator
                                  (actc_tensor_new and friends); NULL after
                                  the data is freed                           */
    struct actc_tensor *grad;  /* dL/d(this), same shape; NULL until set      */
    actc_mem_cat cat;          /* category of data                            */
    int requires_grad;         /* gradients flow to (or through) this tensor  */
    int is_param;              /* a trainable parameter (grad kept as GRAD)   */
    uint64_t id;               /* unique for the process, never reused        */
    char name[48];             /* optional, for messages and checkpoints      */
    /* private: reference counts (see actc_tensor_release) */
    int refs_;                 /* owners of the data                           */
    int tape_refs_;            /* tape nodes that route gradients through it  */
    int grad_uses_;            /* parameters: tape nodes that will still add
                                  to the gradient in this backward            */
    struct actc_grad_state *gstate_; /* parameters: a gradient form other than
                                  dense fp32 (actc_grad_info), or NULL        */
    struct actc_tensor *base_; /* a loaded save's view: the tensor whose data
                                  it shares (one reference to it), or NULL    */
    uint32_t version_;         /* bumped by actc_tensor_mark_changed           */
    int store_refs_;           /* saves holding the data by reference: while
                                  any does, its bytes count as CONTEXT        */
    struct actc_node *producer_; /* the last live tape node whose output
                                  this is, or NULL                          */
} actc_tensor;

/* New tensor with uninitialised data in category cat. NULL on failure. */
ACTC_API actc_tensor *actc_tensor_new(actc_mem_cat cat, int ndim, const int *shape);
/* New zero-filled tensor. */
ACTC_API actc_tensor *actc_tensor_zeros(actc_mem_cat cat, int ndim, const int *shape);
/* New tensor holding a copy of src's data and shape (category cat). */
ACTC_API actc_tensor *actc_tensor_copy(actc_mem_cat cat, const actc_tensor *src);
/* A trainable parameter (category PARAM, requires_grad, is_param) named name. */
ACTC_API actc_tensor *actc_param_new(int ndim, const int *shape, const char *name);
/* Add one owner. Returns t. */
ACTC_API actc_tensor *actc_tensor_retain(actc_tensor *t);
/* Drop one owner.  When the last owner goes, the data is freed at once (this is
 * how forward intermediates die as soon as their consumers have run); the
 * struct itself lives on while the tape still routes gradients through it.
 * A save the store keeps in fp32 is one of the owners (see actc_load). */
ACTC_API void actc_tensor_release(actc_tensor *t);
/* Say that t's data was written in place (t NULL: nothing).  Call it after
 * writing into a tensor that already existed, as actc's own in-place writers
 * (optimizers, checkpoint loading, running statistics) do: the store keeps
 * fp32 saves by reference, not as copies, and a load of a save whose tensor
 * changed since the save fails with ACTC_ERR_STATE ("modified in place after
 * it was saved for backward") instead of giving a wrong gradient.  Operators
 * that write only into tensors they just made need not call it. */
ACTC_API void actc_tensor_mark_changed(actc_tensor *t);
/* 1 if the two tensors have the same ndim and shape. */
ACTC_API int actc_same_shape(const actc_tensor *a, const actc_tensor *b);
/* Write "[2, 3, 4]" into buf. Returns buf. */
ACTC_API char *actc_shape_str(const actc_tensor *t, char *buf, size_t cap);
/* Free t->grad (parameters: call before each step or use actc_zero_grads). */
ACTC_API void actc_tensor_drop_grad(actc_tensor *t);

/* ------------------------------------------------------------------------ */
/* Codecs on caller buffers: the store's codecs without the engine           */
/* ------------------------------------------------------------------------ */
/* Every codec the saved-context store uses, callable on plain float arrays
 * and caller-provided buffers, with no context, tape or policy: what a
 * binding (the PyTorch package) or another implementation of the codecs
 * calls.  A plan is plain data computed from the codec spec, the shape and
 * a key alone (never from the values), so the payload's exact size is known
 * before the data exists; encode and decode allocate nothing and keep no
 * state between calls.  The bytes are those the store writes for the same
 * codec, arguments and key, at any thread count.
 *
 * Codec specs (case-insensitive; the canonical spelling is kept in
 * plan->codec):
 *   fp32                 lossless copy
 *   bf16                 bfloat16, round to nearest even
 *   mask                 1 bit per element: (x > 0)
 *   index:W              non-negative integers held in floats (exact below
 *                        2^24), W = 1, 2 or 4 bytes each (uint8/16/32);
 *                        values must fit W bytes
 *   quant:B[,group=G]    ActNN's per-group stochastic quantizer, B = 1..8
 *                        bits, groups of G elements (default 256) within
 *                        each sample (the first axis is the sample axis of a
 *                        tensor of 2 or more dims); with sample_bits (one
 *                        width 1..8 per sample) it is ActNN's mixed
 *                        precision and B is unused
 *   quant:B,per-tensor   one zero point and range for the whole tensor
 *   nf4 | fp4-bnb | fp4-e2m1 [,block=G][,round=nearest|stochastic]
 *                        4-bit block-wise (AGoQ's and bitsandbytes' tables),
 *                        one fp32 absmax per block of G elements (a power of
 *                        two from 32 to 4096, default 64); "fp4" is fp4-bnb,
 *                        "e2m1" is fp4-e2m1
 *   dyn8[,block=G]       8-bit dynamic map with an fp32 absmax per block of
 *                        G elements (default 256)
 *   division[:b=B,q=Q,lfc-only|hfc-only,seq=tokens|features]
 *                        DIVISION's bf16 low-frequency part (block B,
 *                        default 8) and Q-bit residual (default 2); the map
 *                        axes follow the rank as under the division policy
 *                        (4-D: 2-D maps; 5-D: 3-D maps; 3-D: per seq=;
 *                        2-D and 1-D: 1-D maps)
 * Stochastic codecs draw from a counter-based stream of (key, element
 * index): the same key gives the same bytes; give each tensor and step its
 * own key (e.g. actc_rng_key(seed, step, tensor_id)). */
typedef struct {
    char codec[48];              /* canonical spec ("quant:2", "nf4,block=64") */
    int ndim;
    int shape[ACTC_MAX_DIMS];
    size_t numel;
    size_t bytes;                /* exact size of the payload encode writes   */
    uint64_t key;                /* random stream of the stochastic codecs    */
    int sample_widths;           /* 1: made with per-sample widths, which
                                    encode needs again (quant only)           */
    int threads;                 /* CPU threads encode and decode use: 0 (what
                                    actc_set_threads set), or a count for the
                                    calls with this plan alone (the caller
                                    sets it after actc_codec_plan_make; the
                                    bytes do not depend on it)               */
    /* Resolved by actc_codec_plan_make for encode and decode: do not change. */
    int id_, bits_, group_, width_;
    int iparam_[4];
    uint64_t sample_bits_hash_;  /* of the per-sample widths the plan sized   */
} actc_codec_plan;

/* Plan the encoding of a tensor of the given shape (ndim 1..ACTC_MAX_DIMS,
 * positive sizes; ndim 0 is a scalar) with the codec of spec.  sample_bits:
 * quant only, shape[0] widths (1..8) for per-sample precision, or NULL.
 * ACTC_ERR_INVALID with a message for an unknown codec, a bad option or
 * shape, or sample_bits given to another codec. */
ACTC_API actc_status actc_codec_plan_make(const char *spec, int ndim, const int *shape, uint64_t key,
                                          const uint8_t *sample_bits, actc_codec_plan *plan);
/* Encode plan->numel floats of x into dst (dst_bytes >= plan->bytes;
 * exactly plan->bytes are written).  sample_bits: the same widths the plan
 * was made with (checked) or NULL.  ACTC_ERR_INVALID for a short buffer, a
 * plan not from actc_codec_plan_make, other widths, or an index:W value
 * that is not an integer in [0, 2^(8W))). */
ACTC_API actc_status actc_codec_encode(const actc_codec_plan *plan, const float *x, const uint8_t *sample_bits,
                                       void *dst, size_t dst_bytes);
/* Decode a payload of plan->bytes (src_bytes >= that) into plan->numel
 * floats. */
ACTC_API actc_status actc_codec_decode(const actc_codec_plan *plan, const void *src, size_t src_bytes, float *dst);
/* Decode rows [row0, row0 + nrows) of the first axis only (nrows *
 * numel / shape[0] floats into dst): the same values as those rows of a
 * whole decode. */
ACTC_API actc_status actc_codec_decode_rows(const actc_codec_plan *plan, const void *src, size_t src_bytes,
                                            size_t row0, size_t nrows, float *dst);

/* ------------------------------------------------------------------------ */
/* Codecs on CUDA device memory                                              */
/* ------------------------------------------------------------------------ */
/* The codecs above on NVIDIA GPUs (src/codec/cuda/; built when nvcc is
 * found, -DACTC_WITH_CUDA=ON|OFF), for tensors in device memory.  A payload
 * encoded on the GPU is byte for byte the one actc_codec_encode writes on
 * the CPU for the same values, plan and key, and decodes to the same
 * values: both sides run the same arithmetic (src/codec/codec_math.h).
 * Plans are the CPU's (actc_codec_plan_make; plan->bytes sizes the
 * payload).  Codecs with GPU kernels: fp32, bf16, mask, quant:B[,group=G]
 * with or without per-sample widths, nf4 / fp4-bnb / fp4-e2m1 (either
 * rounding), dyn8, division and division:lfc-only; quant per-tensor,
 * index and division:hfc-only fail with ACTC_ERR_INVALID naming the codec.
 *
 * The tensor holds plan->numel elements of dtype (bfloat16 and float16 are
 * widened exactly, so their payload is that of the same values in float32;
 * decode rounds to the output dtype to nearest even).  Every pointer is
 * device memory of one device; stream is a cudaStream_t of that device
 * (NULL: the legacy default stream).  The work is queued on the stream and
 * the call returns without waiting, as a kernel launch does; nothing is
 * allocated on the device; sample_bits (host memory, quant only) go into
 * the payload by value (a kernel's parameters: the host buffer may be
 * reused when the call returns, no copy from pageable memory, safe to
 * capture in a CUDA graph, in any capture mode: the calls' own checks
 * run relaxed).  The payload buffer is 16-byte aligned,
 * the tensor aligned to its element size.  Errors, with nothing queued:
 * ACTC_ERR_INVALID for a plan not from actc_codec_plan_make, a codec
 * without kernels, an unknown dtype, a host pointer, a misaligned or short
 * buffer, a tensor overlapping the payload, other widths than the plan's,
 * or a stream of another device;
 * ACTC_ERR_DEVICE with CUDA's message when the runtime fails (no device,
 * a launch refused); ACTC_ERR_STATE when the library was built without
 * CUDA. */
typedef enum { ACTC_FLOAT32 = 0, ACTC_BFLOAT16 = 1, ACTC_FLOAT16 = 2 } actc_dtype;
/* 1 if this library was built with the CUDA codecs. */
ACTC_API int actc_cuda_built(void);
/* Number of CUDA devices the runtime sees: 0 when there are none or the
 * library was built without CUDA (actc_last_error says why). */
ACTC_API int actc_cuda_device_count(void);
ACTC_API actc_status actc_cuda_encode(const actc_codec_plan *plan, const void *x, actc_dtype dtype,
                                      const uint8_t *sample_bits, void *dst, size_t dst_bytes, void *stream);
ACTC_API actc_status actc_cuda_decode(const actc_codec_plan *plan, const void *src, size_t src_bytes, void *dst,
                                      actc_dtype dtype, void *stream);
/* ActNN's per-sample ranges of x (N samples of D elements of dtype, device
 * memory), what a planner for actnn:L2/L3 needs of a tensor it cannot read
 * (actc_save_query.sample_range_sq): out[n] = the sum over sample n's
 * groups of 256 elements of (max - min)^2 in double, NaNs ignored, bit for
 * bit what the planner computes from the same values on the host (both
 * sum in one order, src/codec/codec_math.h).  out: device memory of
 * out_len >= actc_cuda_range_sq_len(N, D) doubles, 8-byte aligned; the
 * first N receive the sums, the rest is the kernels' scratch (nothing is
 * allocated).  Queued on stream like actc_cuda_encode, with its errors
 * (an empty tensor is ACTC_ERR_INVALID).  Copy out[0..N) to the host for
 * the planner. */
ACTC_API size_t actc_cuda_range_sq_len(int N, size_t D);
ACTC_API actc_status actc_cuda_range_sq(const void *x, actc_dtype dtype, int N, size_t D, double *out,
                                        size_t out_len, void *stream);

/* ------------------------------------------------------------------------ */
/* Engine context: tape, saved-context store, policy                         */
/* ------------------------------------------------------------------------ */

typedef struct actc_ctx actc_ctx;
typedef struct actc_node actc_node;

/* Kinds of saved tensors: how the store may treat them. */
typedef enum {
    ACTC_SAVE_ACT = 0, /* real-valued activation: compressible, policy decides */
    ACTC_SAVE_MASK,    /* boolean map, bit = (value > 0): 1 bit/elem, lossless */
    ACTC_SAVE_INDEX,   /* small non-negative integers stored as floats:
                          smallest of uint8/16/32 that holds the max, lossless */
    ACTC_SAVE_EXACT,   /* must stay fp32 (statistics, parameters)             */
    ACTC_SAVE_NKINDS
} actc_save_kind;

/* What a saved tensor is to the operator that saved it: policies decide on
 * roles and shapes, never on operator names, so a user's operator that
 * declares a role is compressed as the built-in one with that role.  The
 * operators below document the role and linearity of each of their saves. */
typedef enum {
    ACTC_ROLE_UNKNOWN = 0, /* undeclared (actc_save)                              */
    ACTC_ROLE_LINEAR_IN,   /* the input of a layer that multiplies it by a weight
                              matrix (linear; matmul with a parameter operand):
                              dW = x^T dy; fan_in = the contracted size          */
    ACTC_ROLE_MATMUL_IN,   /* an operand of a product of two activations         */
    ACTC_ROLE_CONV_IN,     /* a convolution's input; fan_in = C kh kw, kernel   */
    ACTC_ROLE_NORM_IN,     /* a normalisation's input (batch, layer, RMS norm)  */
    ACTC_ROLE_ACT_IN,      /* an element-wise function's input, its derivative
                              recomputed from it in backward                    */
    ACTC_ROLE_ACT_DERIV,   /* an element-wise function's derivative f'(x)       */
    ACTC_ROLE_MUL_IN,      /* an operand of an element-wise product             */
    ACTC_ROLE_ATTN_Q,      /* attention's queries, keys, values, output (the    */
    ACTC_ROLE_ATTN_K,      /* output projection's input), probabilities and    */
    ACTC_ROLE_ATTN_V,      /* per-row statistics (log-sum-exp)                  */
    ACTC_ROLE_ATTN_OUT,
    ACTC_ROLE_ATTN_PROBS,
    ACTC_ROLE_ATTN_STATS,
    ACTC_ROLE_SOFTMAX_OUT, /* a softmax's output                                */
    ACTC_ROLE_LOSS_IN,     /* what a loss keeps (its probabilities)             */
    ACTC_ROLE_SEGMENT_IN,  /* the input a checkpointed region is recomputed from */
    ACTC_ROLE_STATS,       /* exact statistics (batch mean, rstd)               */
    ACTC_ROLE_WEIGHT,      /* a weight that is not a parameter, kept exactly    */
    ACTC_ROLE_MASK,        /* a boolean map (ReLU sign, dropout keep-mask)      */
    ACTC_ROLE_INDEX,       /* integer indices (max-pool argmax, token ids)      */
    ACTC_ROLE_PROJECTED,   /* a projection x P of a LINEAR_IN save, kept in its
                              place when the policy planned ACTC_XFORM_PROJECT  */
    ACTC_ROLE_NROLES
} actc_role;

/* A save's declaration.  linear: 1 if backward uses the saved values
 * linearly (the gradient is a linear function of them, or a product of
 * independently stored ones), so stochastic rounding leaves the gradient
 * unbiased; 0 if not (a normalisation, a softmax, a recomputation: rounding
 * then biases the gradient, and a policy may keep such saves more
 * precise).  Zero-initialise it and set what applies. */
typedef struct {
    actc_role role;
    int linear;            /* backward is linear in the save (1) or not (0)      */
    int fan_in;            /* LINEAR_IN, MATMUL_IN: the contracted size; CONV_IN:
                              input channels x kernel height x kernel width     */
    int kernel_h, kernel_w;/* CONV_IN                                            */
    unsigned transforms;   /* ACTC_XFORM_* bits: transforms the operator's
                              backward can work from (actc_save_offer)        */
} actc_save_role;

/* The saves of the built-in operators (role, and L when backward uses the
 * save linearly, N when not; kinds as documented at each operator):
 *   linear, conv2d        x: LINEAR_IN / CONV_IN, L (dW = x^T dy); a weight
 *                         that is not a parameter: WEIGHT, L, exact
 *   matmul, mul           each operand: LINEAR_IN when the other is a
 *                         parameter, else MATMUL_IN / MUL_IN, L
 *   batchnorm2d,          x: NORM_IN, N (dx depends on x through its
 *   layernorm, rmsnorm    normalised value); mean, rstd: STATS, exact
 *   gelu, silu            f'(x): ACT_DERIV, L (dx = dy f'(x))
 *   softmax_causal        y: SOFTMAX_OUT, N (dx = y (dy - sum dy y))
 *   attention_naive       q, k, v, probabilities, output: ATTN_Q/K/V/PROBS/
 *                         OUT, L (each gradient is a product of saves)
 *   attention_flash       q, k, v, output: ATTN_Q/K/V/OUT, N (backward
 *                         recomputes the probabilities from q and k);
 *                         log-sum-exp rows: ATTN_STATS, exact
 *   cross_entropy         probabilities: LOSS_IN, L
 *   relu, dropout         MASK; maxpool2d, embedding: INDEX (lossless)
 *   gat_scores            MASK; gather_rows: INDEX; spmm, scale_add: nothing
 *   edge_softmax          alpha: SOFTMAX_OUT, N
 *   edge_aggregate        alpha: ATTN_PROBS, L; x: ATTN_V, L
 *   head_dot              x: LINEAR_IN (fan_in D), L; w as linear's weight
 *   elu                   y: ACT_DERIV, L (dx = dy (y > 0 ? 1 : y + alpha))
 *   segment               its input: SEGMENT_IN, N (recomputed from)
 * Stochastic rounding of an L save leaves the gradient unbiased; of an N
 * save it does not.  Issue 17 reports, through this API against PyTorch's
 * exact gradient averaged over 6,400 roundings at 2 bits: LayerNorm and
 * RMSNorm about 1% bias in dx, the causal softmax about 15%, the flash
 * attention 13-17% in dq/dk/dv, the L saves none. */
/* A role's name ("linear_in", "conv_in", ...), for messages and tables. */
ACTC_API const char *actc_role_name(actc_role r);
/* 1 for the attention's roles (ACTC_ROLE_ATTN_Q, _K, _V, _OUT, _PROBS,
 * _STATS). */
ACTC_API int actc_role_is_attention(actc_role r);

/* ---- Policies on caller tensors ------------------------------------------
 * A planner is a compression policy without the engine: for a save another
 * framework makes (the PyTorch package's saved-tensor hooks), described by
 * its layer, its number there, its role and its values, it answers the codec
 * plan the store would use, to be carried out with actc_codec_encode on the
 * caller's buffers.  The policy's state is the planner's; nothing else is
 * shared, so planners of different threads do not meet.
 *
 * Every spec actc_ctx_set_policy accepts, except those whose answer is not a
 * codec: compact (a projection of the input: a change of the layer, which
 * the package makes with actc.torch.compact) and gact:CB1, gact:CB2,
 * gact:CKPT (recomputed blocks: the model's checkpointing).  agoq's plans
 * to recompute normalisations and activations have no meaning here: those
 * saves get its codec.  Learning policies learn through the planner:
 *  - ActNN's mixed precision (actnn:L3, actnn:X) from gradient reports
 *    (actc_planner_observe during backward, actc_planner_replan after it);
 *  - GACT (gact:B, gact:fixB, gact:L1) from measuring passes the caller runs
 *    on one batch: actc_planner_measure_begin, a reference forward and
 *    backward (gradient g_0), then for each l < actc_planner_measure_count
 *    actc_planner_measure_perturb(l) and a pass (g_l), then
 *    actc_planner_measure_commit with ||g_0 - g_l||^2 (GACT's Algorithm 1,
 *    as the engine's controller runs it); saves planned in between are those
 *    of the passes.  Before its first commit gact:B plans every save at
 *    the widest rung of its ladder (32/8/4/2/1) within B. */
typedef struct actc_planner actc_planner;
typedef struct {
    const char *scope;    /* the layer that saves ("layer1.0.conv1"; NULL or
                             "": none)                                         */
    int index;            /* the save's number within the layer in this step:
                             (scope, index) names the same tensor every step  */
    actc_save_role role;  /* what the save is (role.role ACTC_ROLE_UNKNOWN when
                             the caller cannot tell); no transforms            */
    int ndim;             /* 0..ACTC_MAX_DIMS; the first axis is the samples'  */
    const int *shape;
    const float *data;    /* the values (read only: the mixed-precision policy
                             sizes per-sample widths from their ranges), or
                             NULL when the host cannot read them (device
                             memory): then sample_range_sq                     */
    uint64_t step;        /* the training step (random streams, learning)      */
    const double *sample_range_sq; /* NULL, or shape[0] values: sample n's sum
                             over groups of 256 elements of (max - min)^2,
                             what ActNN's L2/L3 read from the data otherwise
                             (actnn with NULL data and NULL sample_range_sq:
                             ACTC_ERR_INVALID)                                 */
} actc_save_query;
/* A planner for policy spec with random streams keyed by seed.
 * ACTC_ERR_INVALID with a message for an unknown spec or one the planner
 * cannot carry out (which, and what to use instead). */
ACTC_API actc_status actc_planner_new(const char *policy, uint64_t seed, actc_planner **out);
ACTC_API void actc_planner_free(actc_planner *p);
/* The planner's canonical policy spec ("" for NULL). */
ACTC_API const char *actc_planner_policy(const actc_planner *p);
/* 1 when the policy learns from gradient reports (actc_planner_observe), or
 * from measuring passes (actc_planner_measure_*); 0 otherwise or for NULL. */
ACTC_API int actc_planner_observes(const actc_planner *p);
ACTC_API int actc_planner_measures(const actc_planner *p);
/* The plan of save q: plan->bytes is the payload actc_codec_encode writes.
 * sample_bits: NULL or room for max(1, shape[0]) widths; when the policy
 * chooses per-sample widths (plan->sample_widths), they are written there
 * and encode takes them (ACTC_ERR_INVALID if the room was NULL).  The
 * random key is (seed, step, save)'s. */
ACTC_API actc_status actc_planner_plan(actc_planner *p, const actc_save_query *q, actc_codec_plan *plan,
                                       uint8_t *sample_bits);
/* During backward: the mean over samples of the squared L2 norm of the
 * gradient reaching the output of layer scope, whose saves of this step
 * were indices[0..n).  A no-op for a policy that does not observe. */
ACTC_API actc_status actc_planner_observe(actc_planner *p, const char *scope, const int *indices, int n,
                                          double grad_sq);
/* After each backward: re-plan from the step's reports (ActNN's per-layer
 * allocation).  A no-op for a policy that does not observe. */
ACTC_API actc_status actc_planner_replan(actc_planner *p);
/* GACT's measuring passes (above).  begin: ACTC_ERR_STATE for a policy
 * that measures nothing.  count: the tensors the reference pass saved (-1
 * with the error set when not measuring).  perturb: the next pass rounds
 * tensor l with a stream of its own.  commit: n = count differences,
 * finite and >= 0; ends the measurement, re-plans, and leaves the policy
 * unchanged on error.  cancel: ends it without a commit. */
ACTC_API actc_status actc_planner_measure_begin(actc_planner *p);
ACTC_API int actc_planner_measure_count(actc_planner *p);
ACTC_API actc_status actc_planner_measure_perturb(actc_planner *p, int l);
ACTC_API actc_status actc_planner_measure_commit(actc_planner *p, const double *sq_diff, int n);
ACTC_API void actc_planner_measure_cancel(actc_planner *p);

/* New context: training mode, policy "none", seed 0. NULL on failure. */
ACTC_API actc_ctx *actc_ctx_new(void);
/* Free the context, its tape and its store. */
ACTC_API void actc_ctx_free(actc_ctx *ctx);
/* Select the compression policy from a spec string ("none", "bf16", ...;
 * actc_policy_list() names them).  Unknown specs fail with ACTC_ERR_INVALID,
 * and so do specs whose canonical form (actc_ctx_policy) would not fit in
 * ACTC_POLICY_MAX bytes with its NUL. */
#define ACTC_POLICY_MAX 160
ACTC_API actc_status actc_ctx_set_policy(actc_ctx *ctx, const char *spec);
/* The canonical spec of the active policy. */
ACTC_API const char *actc_ctx_policy(const actc_ctx *ctx);
/* Multi-line help text listing every policy spec and its parameters. */
ACTC_API const char *actc_policy_list(void);
/* 1 when the active policy, or one it decorates, learns by measuring (it
 * has measurement hooks; today the gact levels other than gact:CKPT, alone
 * or under compact:...+gact:...): the controller then runs L + 1 extra
 * forward and backward passes whenever it measures
 * (actc_controller_iterate).  0 otherwise or for NULL. */
ACTC_API int actc_ctx_policy_measures(const actc_ctx *ctx);
/* 1 when the active policy learns its state from the data it sees (ActNN's
 * adaptive levels from gradient statistics, GACT from its measurements,
 * alone or under compact): under data parallelism each rank learns from its
 * own share, so the ranks' states differ.  0 otherwise or for NULL. */
ACTC_API int actc_ctx_policy_learns(const actc_ctx *ctx);
/* Stop (1) or resume (0) an adaptive policy's learning (ActNN L3's gradient
 * statistics and per-layer bits, GACT's measurements: the controller then
 * only runs the pass): frozen, it keeps compressing with the state it has.
 * For measurements that must see one fixed policy (actc variance). */
ACTC_API void actc_ctx_freeze_policy(actc_ctx *ctx, int frozen);
/* Training mode records the tape and saves contexts; eval mode does neither
 * (batchnorm uses running statistics, dropout is the identity). */
ACTC_API void actc_ctx_set_training(actc_ctx *ctx, int training);
ACTC_API int actc_ctx_training(const actc_ctx *ctx);
/* Seed of every random stream of the context (dropout, stochastic rounding). */
ACTC_API void actc_ctx_set_seed(actc_ctx *ctx, uint64_t seed);
ACTC_API uint64_t actc_ctx_seed(const actc_ctx *ctx);
/* A second key of the per-step random streams (dropout, stochastic
 * rounding of saved tensors and of encoded gradients): data parallelism sets
 * it to the rank, so that ranks draw independent, reproducible streams.  0,
 * the default, leaves every stream as it was.  CompAct's projections are
 * keyed by the seed alone, so every rank projects with the same matrices. */
ACTC_API void actc_ctx_set_stream(actc_ctx *ctx, uint64_t stream);
/* Step counter: random streams depend on (seed, step), so re-running a step
 * with the same step number reproduces it exactly.  actc_backward advances it. */
ACTC_API void actc_ctx_set_step(actc_ctx *ctx, uint64_t step);
ACTC_API uint64_t actc_ctx_step(const actc_ctx *ctx);
/* A fresh stream key for an operator's randomness in the current step
 * (deterministic in seed, step and call order within the step). */
ACTC_API uint64_t actc_ctx_next_key(actc_ctx *ctx);
/* 1 while the engine runs a forward pass a second time: a recomputed segment
 * (actc_segment) during backward, or a sensitivity pass of the GACT
 * controller.  Operators with side effects beyond their output (batch norm's
 * running statistics) must not apply them again then; a user-defined
 * operator with such state should check this too. */
ACTC_API int actc_ctx_replaying(const actc_ctx *ctx);
/* 1 when operators record tape nodes and saves: training mode, outside the
 * first forward of a segment (actc_segment).  An operator that prepares
 * something only for its backward (a score matrix to save) can skip it
 * otherwise; actc_node_new records no node then anyway. */
ACTC_API int actc_ctx_recording(const actc_ctx *ctx);

/* Segment checkpointing (gradient checkpointing, Chen et al. 2016).
 * fn computes a segment (a residual or transformer block) from x: it must not
 * release x and returns a new reference to its output (NULL with an error set
 * on failure).  actc_segment runs fn without recording a tape, and saves only
 * x, through the store (so the policy compresses it, as an ACT save of
 * operator "segment").  During backward, the segment's node decodes x, runs
 * fn again with recording on (actc_ctx_replaying() is 1; dropout draws the
 * same masks: the operators' random keys are rewound to the segment's start)
 * and back-propagates through the recomputed operators at once, so their
 * saves live only while that segment is being differentiated.  The recompute
 * starts from the decoded x, so a lossy policy makes it inexact (GACT 5.5).
 * In eval mode, or when x needs no gradient, or inside another segment's
 * first forward, it just returns fn(x).
 * What fn reads besides x (parameters, user state) must stay alive and
 * unchanged until the backward pass: the node keeps no reference to it.
 * Only fn's returned tensor carries gradients out of the segment.  The
 * recomputed saves are named when backward reaches them, so their stable
 * keys count occurrences in backward order (scopes keep them apart). */
typedef actc_tensor *(*actc_segment_fn)(actc_ctx *ctx, actc_tensor *x, void *user);
ACTC_API actc_tensor *actc_segment(actc_ctx *ctx, actc_segment_fn fn, void *user, actc_tensor *x);

/* ---- Recompute plans: regions a model marks, the policy decides -----------
 * A model marks the parts of its forward that could be recomputed in
 * backward instead of keeping what they save; the policy (or an override)
 * plans each kind of region: save as usual, recompute from the region's
 * input, or no opinion (the model's own default).  New kinds of region are
 * added here; a policy that wants them sets its plan for them. */
typedef enum {
    ACTC_REGION_BLOCK = 0, /* a residual or transformer block: recompute =
                              segment checkpointing (GACT's CB levels); the
                              saves made inside one know it, whatever the
                              plan (compact projects the linear layers of
                              the blocks by default)                          */
    ACTC_REGION_ATTN,      /* attention's probabilities: recompute = the
                              memory-efficient form (ACTC_ATTN_FLASH), save =
                              the textbook one (ACTC_ATTN_NAIVE)              */
    ACTC_REGION_NORM,      /* a normalisation: recompute = keep only its input
                              (AGoQ); the layers consuming its output save
                              nothing of their own                            */
    ACTC_REGION_ACT,       /* an element-wise activation, gated or not (its
                              inputs), likewise (AGoQ)                        */
    ACTC_REGION_NKINDS
} actc_region_kind;
enum { ACTC_PLAN_ANY = -1, ACTC_PLAN_SAVE = 0, ACTC_PLAN_RECOMPUTE = 1 };
/* The plan for regions of kind r: the context's override if set, else the
 * active policy's: ACTC_PLAN_SAVE, ACTC_PLAN_RECOMPUTE or ACTC_PLAN_ANY
 * (no opinion: the model's default).  ACTC_PLAN_ANY for an unknown kind. */
ACTC_API int actc_ctx_plan_region(const actc_ctx *ctx, actc_region_kind r);
/* Override the policy's plan for regions of kind r (ACTC_PLAN_ANY gives
 * the decision back to the policy); kept across actc_ctx_set_policy.
 * ACTC_ERR_INVALID for an unknown kind or plan. */
ACTC_API actc_status actc_ctx_set_region_plan(actc_ctx *ctx, actc_region_kind r, int plan);
/* Run fn(ctx, x, user) as a region of kind r: directly unless the plan is
 * ACTC_PLAN_RECOMPUTE.  Recomputed, a BLOCK region goes through
 * actc_segment (fn includes the block's consumers of its intermediate
 * values; only x is saved and fn reruns in backward); a NORM or ACT region
 * is an input-recompute region (actc_region_n).  fn follows actc_segment's
 * rules.  A region with an exact (fp32) save of x gives gradients
 * identical to the bit to the direct path. */
ACTC_API actc_tensor *actc_region(actc_ctx *ctx, actc_region_kind r, actc_segment_fn fn, void *user,
                                  actc_tensor *x);
/* A region of n inputs (1..ACTC_NODE_MAX_INPUTS): fn computes a small
 * function of x[0..n) (a normalisation, a gated activation) and returns a
 * new reference to its output.  actc_region_n takes the caller's
 * references to x (as the _take operators do; on failure too) and hands fn
 * one reference to each, which fn must release (or give to _take
 * operators), on failure too: run directly, with no other references, fn's
 * in-place operators reuse the inputs' buffers.  Kinds NORM and ACT only.  Recomputed (plan ACTC_PLAN_RECOMPUTE, training, an
 * input that needs a gradient), fn runs without a tape and the region
 * records one node ("recompute") that saves only its inputs, through the
 * policy (roles NORM_IN or ACT_IN); a later ACT save of the region's output
 * by any operator (the linear layer that consumes it) stores no payload but
 * a reference: loading it reruns fn on the decoded inputs, without a tape.
 * In backward the node reruns fn with a tape, with exact (fp32) saves, and
 * differentiates it.  Unlike a segment, the consumers stay outside the
 * region: their products are not recomputed.  Otherwise fn runs directly.
 * What fn reads besides x (its parameters) must stay alive and unchanged
 * until backward, as for actc_segment. */
typedef actc_tensor *(*actc_region_fn)(actc_ctx *ctx, int n, actc_tensor *const *x, void *user);
ACTC_API actc_tensor *actc_region_n(actc_ctx *ctx, actc_region_kind r, actc_region_fn fn, void *user, int n,
                                    actc_tensor *const *x);
/* As actc_region, for a region whose function takes its input: fn(ctx, x,
 * user) consumes the reference to x it is given (so it may add a residual
 * into x in place, as the transformer's blocks do), and so does
 * actc_region_take (on failure too).  Recomputed (a BLOCK region planned
 * ACTC_PLAN_RECOMPUTE: gact:CB1, gact:CB2, gact:CKPT), fn is called with a
 * reference of its own in forward and in each rerun, and the region keeps
 * x as a segment keeps it. */
ACTC_API actc_tensor *actc_region_take(actc_ctx *ctx, actc_region_kind r, actc_segment_fn fn, void *user,
                                       actc_tensor *x);

/* Name scopes ("layer1.0.conv1"): nodes record the scope they were made in,
 * giving saved tensors stable names across steps (used by policies that keep
 * per-tensor state and by inspection). */
ACTC_API actc_status actc_scope_push(actc_ctx *ctx, const char *name);
ACTC_API void actc_scope_pop(actc_ctx *ctx);

/* Run the tape backwards from a scalar loss (dloss = 1): gradients accumulate
 * into the .grad of every parameter; intermediate gradients and saved contexts
 * are freed as soon as consumed.  Clears the tape and the store, advances the
 * step.  On failure the tape is cleared as well. */
ACTC_API actc_status actc_backward(actc_ctx *ctx, actc_tensor *loss);
/* As actc_backward with dloss = scale: the gradients of scale * loss are
 * added to the parameters' (a micro-batch's share of a larger batch). */
ACTC_API actc_status actc_backward_scaled(actc_ctx *ctx, actc_tensor *loss, float scale);
/* Backward from y, a tensor the tape recorded (a pipeline stage's output),
 * with dy (y's shape) as its gradient (what the next stage sent back):
 * otherwise as actc_backward (gradients into the parameters and into any
 * tensor with requires_grad that fed the tape, such as the stage's input;
 * the tape and the store cleared, the step advanced). */
ACTC_API actc_status actc_backward_from(actc_ctx *ctx, actc_tensor *y, const actc_tensor *dy);

/* Several micro-batches in flight on one context (pipeline schedules run
 * other micro-batches' forwards before a micro-batch's backward).
 * actc_ctx_park takes the tape recorded since the context's last park,
 * resume or backward, with what keys its saves (step, micro-batch and the
 * save counts that make stable keys), off the context as a frame; its
 * saves stay in the store (and in its statistics: the context held is
 * every frame's).  The context then records afresh.  actc_ctx_resume puts
 * a frame back as the tape (the context's own tape must be empty: park or
 * run it first) and frees the frame; its backward then runs as if no other
 * micro-batch had been recorded.  actc_frame_drop frees a frame and its
 * saves without backward (after an error).  A frame belongs to the context
 * that parked it and must be resumed or dropped before the context is
 * freed.  Parking inside a scope or a segment's forward is ACTC_ERR_STATE. */
typedef struct actc_frame actc_frame;
ACTC_API actc_status actc_ctx_park(actc_ctx *ctx, actc_frame **out);
ACTC_API actc_status actc_ctx_resume(actc_ctx *ctx, actc_frame *f);
ACTC_API void actc_frame_drop(actc_ctx *ctx, actc_frame *f);
/* The context as a pipeline stage that holds `held` at once when the
 * fullest stage holds held_max, counted in micro-batch blocks (the
 * micro-batches its schedule holds, actc_pipe_ops, times the blocks of its
 * part: the trainer sets it): policies that compensate the stages holding
 * less (agoq:dbca) read it.  0, 0: not a stage (the default). */
ACTC_API actc_status actc_ctx_set_stage(actc_ctx *ctx, int held, int held_max);
/* The bits the context's policy gives the compressed saves of such a stage
 * (agoq:dbca: 4 to 8); 0 for a policy that does not compensate. */
ACTC_API int actc_ctx_stage_bits(const actc_ctx *ctx, int held, int held_max);
/* Micro-batch k of the current step draws random streams (dropout,
 * stochastic rounding) of its own; 0, the default, is the step's own
 * streams.  actc_ctx_set_step resets it to 0. */
ACTC_API void actc_ctx_set_substep(actc_ctx *ctx, uint32_t k);
/* Called during backward for each parameter (a tensor made with
 * actc_param_new) as soon as no operator left on the tape will add to its
 * gradient: in reverse topological order, once per parameter that the
 * recorded graph uses (inside checkpointed segments too, after the
 * segment's recompute).  A non-OK status stops backward with it.  fn NULL
 * removes the callback. */
typedef actc_status (*actc_grad_ready_fn)(actc_ctx *ctx, actc_tensor *param, void *user);
ACTC_API void actc_ctx_on_grad_complete(actc_ctx *ctx, actc_grad_ready_fn fn, void *user);
/* Drop the tape and the store without a backward pass (after an error);
 * with frames parked, the saves they hold stay. */
ACTC_API void actc_ctx_reset(actc_ctx *ctx);
/* Number of nodes currently on the tape. */
ACTC_API int actc_tape_size(const actc_ctx *ctx);

/* Operator time profile: where a context's training steps spend their time,
 * by the operator names the tape records ("linear", "layernorm",
 * "attention", ...).  A forward has no single entry point, so an operator's
 * forward time is the time from the previous recorded operator (or from the
 * start of the forward) to its own record: it includes unrecorded work just
 * before it (views, operations on inputs that need no gradient).  Backward
 * time is its backward function's, exclusive of nested nodes (a recompute
 * region's operators are charged to themselves, the recompute's forward to
 * the region).  The optimizer and the loss scaling are not operators: the
 * trainer reports them (actc_step_result).  Cost: two clock reads per
 * node. */
typedef struct {
    const char *op;          /* operator name (valid while the profile is)   */
    double forward_s;        /* seconds in its forwards, as above            */
    double backward_s;       /* seconds in its backward functions            */
    long forward_calls;      /* nodes recorded                               */
    long backward_calls;     /* backward functions run                       */
} actc_op_time;
/* Start profiling ctx, or start over (the totals go back to zero). */
ACTC_API actc_status actc_ctx_profile_start(actc_ctx *ctx);
/* Stop profiling and free the profile (no-op if not profiling). */
ACTC_API void actc_ctx_profile_stop(actc_ctx *ctx);
/* The profile's operators, the largest forward + backward time first: up to
 * max copied to out (out may be NULL); returns how many there are (0 when
 * not profiling). */
ACTC_API int actc_ctx_profile_get(const actc_ctx *ctx, actc_op_time *out, int max);

/* Statistics of the saved-context store.  Activation memory as the papers
 * count it is the context before backward: what the store holds when a
 * backward pass begins (context_bytes, the largest since the reset), set
 * against what the `none` policy keeps for the same step (context_none,
 * given by whoever ran that step: actc_store_set_reference; the trainer
 * does).  With recompute regions or segment checkpointing the store may
 * hold more during backward (context_backward_peak; forward_bytes and
 * backward_peak are the same two for the last backward, GACT's AM1 and
 * AM2).  stored_peak is the store's peak at any moment. */
typedef struct {
    size_t stored_bytes;          /* bytes the store holds now (all payloads)  */
    size_t fp32_bytes;            /* what a plain fp32 framework would hold    */
    size_t stored_peak;           /* peak of stored_bytes since the reset      */
    size_t fp32_peak;             /* fp32_bytes at the moment of stored_peak   */
    size_t stored_by_kind[ACTC_SAVE_NKINDS]; /* at stored_peak                 */
    size_t fp32_by_kind[ACTC_SAVE_NKINDS];   /* at stored_peak                 */
    size_t n_saves;               /* actc_save calls since the reset           */
    size_t n_dedup;               /* of which answered by an existing entry    */
    size_t forward_bytes;         /* stored_bytes when the last backward began */
    size_t backward_peak;         /* peak of stored_bytes during that backward */
    double encode_s, decode_s;    /* seconds in the codecs' encode and decode
                                     since the reset (every pass: forward,
                                     backward, recomputes, GACT's measuring;
                                     an fp32 save, kept by reference, costs
                                     none)                                    */
    /* The context before backward: of the backward passes since the reset
     * (not GACT's measuring passes), the one that began with the most bytes
     * stored. */
    size_t context_bytes;         /* stored when it began                     */
    size_t context_by_kind[ACTC_SAVE_NKINDS];
    size_t context_fp32;          /* the fp32 reference of those saves        */
    size_t context_none;          /* the context `none` keeps for that step:
                                     the reference set when it ran (0: none
                                     was set)                                 */
    size_t context_none_by_kind[ACTC_SAVE_NKINDS];
    size_t context_backward_peak; /* the most stored during any backward since
                                     the reset (>= context_bytes when a
                                     backward ran)                            */
} actc_store_stats;
ACTC_API void actc_store_get_stats(const actc_ctx *ctx, actc_store_stats *out);
/* The context `none` keeps for the passes that follow (until set again;
 * bytes 0 clears it), by kind (by_kind may be NULL): the store pairs it
 * with its context before backward (context_none), so that reports set
 * what a policy keeps against what `none` keeps for the same step, as the
 * papers do.  Measure it with a counting context (actc_ctx_set_counting)
 * running the same forward and loss. */
ACTC_API void actc_store_set_reference(actc_ctx *ctx, size_t bytes, const size_t *by_kind);
/* A counting context (on 1) measures its saves and keeps nothing: every
 * save is planned by its codec and counted in the statistics as it would
 * be stored (stored_bytes, by kind), but no payload is encoded and no
 * tensor is held, so a forward costs its activations' transient memory
 * only.  Loads and backward fail.  For the context a forward would keep
 * under a policy (`none`: no policy installed), without keeping it.  Set
 * before recording; actc_ctx_reset drops what was counted. */
ACTC_API actc_status actc_ctx_set_counting(actc_ctx *ctx, int on);
/* One payload in the store (saves of the same tensor and kind share one). */
typedef struct {
    char op[24];              /* the operator that saved it first            */
    char scope[128];          /* its scope                                    */
    actc_role role;           /* that save's role                             */
    actc_save_kind kind;
    int ndim, shape[ACTC_MAX_DIMS];
    char codec[16];           /* the codec's name, or "recompute": a reference
                                 to a recompute region's output (actc_region_n),
                                 no payload.  "fp32" holds the saved tensor
                                 by reference (a parameter's: a copy)        */
    size_t stored_bytes;      /* payload bytes (CONTEXT); for fp32, the
                                 tensor's                                     */
    size_t fp32_bytes;        /* its share of the fp32 reference (each tensor
                                 is counted once)                             */
    int loads;                /* loads still expected                         */
} actc_store_item;
/* The payloads in the store now (after a forward pass: what backward will
 * read), in save order: up to cap written to out (out may be NULL);
 * returns how many there are.  Their stored_bytes sum to the store's
 * stored_bytes. */
ACTC_API int actc_store_list(const actc_ctx *ctx, actc_store_item *out, int cap);
ACTC_API void actc_store_reset_peak(actc_ctx *ctx);

/* ---- Writing an operator --------------------------------------------------
 * An operator is a forward function that records a node and saves what its
 * backward needs, and a backward function; examples/custom_op.c is a whole
 * one.  Check every call, release what you allocated on every path, and pass
 * failures on with their status (the message is already set):
 *
 * forward:
 *     actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, ...);  compute y;
 *     actc_node *node;
 *     actc_status st = actc_node_new(ctx, "myop", myop_backward, y, n, in, &node);
 *     if (st == ACTC_OK && node) st = actc_save(ctx, node, x, ACTC_SAVE_ACT);
 *     if (st != ACTC_OK) { actc_tensor_release(y); return NULL; }
 *     return y;
 *   (node NULL with ACTC_OK: nothing is recorded, so nothing is saved.)
 * backward (returns ACTC_OK or the status of the first failure):
 *     actc_tensor *x = actc_load(ctx, node, 0);   read-only (see actc_load)
 *     if (!x) return actc_last_status();
 *     float *gx;
 *     actc_status st = actc_grad_buffer(ctx, node->inputs[0], &gx);
 *     if (st == ACTC_OK && gx) gx[i] += ... node->output->grad->data[i] ...;
 *     actc_tensor_release(x);
 *     return st;
 *   (gx NULL with ACTC_OK: that input needs no gradient.  An error, out of
 *   memory included, must be returned: actc_backward then fails with it
 *   rather than finishing with gradients missing.) */
typedef actc_status (*actc_backward_fn)(actc_ctx *ctx, actc_node *node);

#define ACTC_NODE_MAX_INPUTS 8
#define ACTC_NODE_MAX_SAVES 8

struct actc_node {
    const char *op;                           /* operator name (static string) */
    actc_backward_fn backward;
    actc_tensor *inputs[ACTC_NODE_MAX_INPUTS];
    int n_inputs;
    actc_tensor *output;
    int iattr[8];                             /* operator attributes            */
    float fattr[8];
    void *user;                               /* operator state, freed with     */
    void (*user_free)(void *);                /* user_free when the node dies   */
    /* private */
    int slots_[ACTC_NODE_MAX_SAVES];
    int n_slots_;
    int index_;                               /* position on the tape          */
    char scope_[128];
    actc_tensor **held_;                      /* parameters a segment holds    */
    int n_held_;
    int uses_released_;
    /* an input-recompute region: a save of its output keeps a reference to
     * the node, and a load calls this to rerun it (NULL for other nodes) */
    actc_tensor *(*rerun_)(actc_ctx *ctx, actc_node *node);
};

/* Record on ctx's tape a node for output y computed from inputs in[0..n-1]
 * (an entry may be NULL: an absent bias), whose backward is bw; op names it
 * in messages and stable keys and must outlive it (a string literal).
 * *out receives the node, or NULL with ACTC_OK when nothing needs
 * recording: eval mode, a segment's first forward (actc_ctx_recording() is
 * 0), or no input requires a gradient; then y->requires_grad stays 0 and
 * the operator saves nothing.  A recorded node sets y->requires_grad and
 * keeps the structs (not the data) of y and the inputs until the tape is
 * dropped.  Errors (*out NULL): ACTC_ERR_INVALID for a NULL ctx, op, y, in
 * or out, or n outside [0, ACTC_NODE_MAX_INPUTS]; ACTC_ERR_OOM when the
 * tape cannot grow. */
ACTC_API actc_status actc_node_new(actc_ctx *ctx, const char *op, actc_backward_fn bw,
                                   actc_tensor *y, int n, actc_tensor *const *in,
                                   actc_node **out);
/* Keep t for node's backward, as `kind`.  Saves are loaded back by their
 * order: the k-th actc_save on a node is actc_load(ctx, node, k).  The same
 * tensor saved twice with the same kind is stored once.  A save stored in
 * fp32 keeps a reference to t instead of a copy (a parameter's is copied):
 * t's data then lives until backward loads it, counted as CONTEXT, and t
 * must not be written in place before that (actc_tensor_mark_changed). */
ACTC_API actc_status actc_save(actc_ctx *ctx, actc_node *node, const actc_tensor *t,
                               actc_save_kind kind);
/* As actc_save, declaring what the save is (role NULL: ACTC_ROLE_UNKNOWN,
 * not linear).  The policy sees the role; MASK, INDEX and EXACT kinds are
 * stored losslessly whatever the role says. */
ACTC_API actc_status actc_save_as(actc_ctx *ctx, actc_node *node, const actc_tensor *t, actc_save_kind kind,
                                  const actc_save_role *role);
/* ---- Transforms: an ACT save kept as a transform of the tensor ----------
 * An operator whose backward can work from a transform of a save (a linear
 * layer from a random projection x P of its input, giving a low-rank weight
 * gradient) offers it in role->transforms and saves with actc_save_offer.
 * The policy answers the save once: a codec for t, or a transform with its
 * parameters, which the store applies, saving the result (role
 * ACTC_ROLE_PROJECTED for a projection) in t's place; the policy may
 * compress that again with any codec.  The operator learns which from
 * actc_save_offer's done. */
#define ACTC_XFORM_NONE 0u
#define ACTC_XFORM_PROJECT 1u   /* z = x P, P: n x rank (actc_projection)     */
/* A random projection P (n x rank), never stored: a pure function of its
 * fields, regenerated wherever it is needed (forward, backward, optimizer),
 * whatever the thread count.  E[P P^T] = I for both kinds: GAUSS entries
 * are N(0, 1/rank); SPARSE (Achlioptas / Li et al. sparse signs) entries are
 * +-1/sqrt(rank * density) with probability density/2 each, else 0.  A
 * low-rank gradient carries its projection to the optimizer, and with it
 * how the optimizer steps back: p -= lr * scale * d P^T (CompAct's alpha),
 * and whether subspace state carries over when the projection changes.
 * Zero-initialise it: zero fields are the defaults (GAUSS, scale 1). */
#define ACTC_PROJ_GAUSS 0
#define ACTC_PROJ_SPARSE 1
typedef struct {
    int n;                 /* rows of P: the width projected from             */
    int rank;              /* columns of P                                     */
    uint64_t key;          /* P's random stream                                */
    int kind;              /* ACTC_PROJ_GAUSS or ACTC_PROJ_SPARSE              */
    float density;         /* SPARSE: fraction of non-zero entries, (0, 1]     */
    float scale;           /* the optimizer's step-back scale (0: 1)           */
    uint32_t age;          /* steps this projection has been in use before the
                              current one (0: its first step)                  */
    int reset_state;       /* 1: an optimizer zeroes its subspace state when a
                              projection starts (age 0) and corrects the bias
                              of its moments from there; 0: state carries over
                              (CompAct's reference implementation)             */
} actc_projection;
typedef struct {
    unsigned kind;         /* ACTC_XFORM_NONE or ACTC_XFORM_PROJECT           */
    actc_projection proj;  /* PROJECT: the projection to apply                */
} actc_transform;
/* An ACT save of t (as actc_save_as) that offers the transforms in
 * role->transforms.  done->kind is ACTC_XFORM_NONE when t itself was saved
 * (with the codec the policy picked), or the transform the store applied in
 * its place, with its parameters (for backward: a projection's z = t P is
 * loaded as save k, its share of the fp32 reference t's size, counted once,
 * so the context ratio compares with saving t).  Errors as actc_save_as;
 * ACTC_ERR_INVALID when done is NULL or the policy plans a transform the
 * role does not offer. */
ACTC_API actc_status actc_save_offer(actc_ctx *ctx, actc_node *node, const actc_tensor *t,
                                     const actc_save_role *role, actc_transform *done);
/* z[rows x rank] = x[rows x n] P.  P is built in SCRATCH memory for the
 * call (n x rank floats) and freed before it returns.  ACTC_ERR_INVALID for
 * a bad projection, ACTC_ERR_OOM when P cannot be allocated. */
ACTC_API actc_status actc_project(const actc_projection *p, const float *x, int rows, float *z);
/* out[rows x n] += alpha * u[rows x rank] P^T: back from the subspace. */
ACTC_API actc_status actc_project_back(const actc_projection *p, const float *u, int rows, float alpha,
                                       float *out);
/* The k-th saved tensor of node, as a new tensor of the original shape
 * (MASK: 0/1 floats, INDEX: integer floats) that the caller releases.  The
 * store frees an entry once every save of it was loaded.
 * Treat the result as read-only.  A save stored in fp32 (the `none` policy,
 * EXACT saves, any save a policy keeps exact) is a reference to the saved
 * tensor, not a copy, and the loaded tensor shares its data: writing into
 * it would change the saved tensor (and other loads of it); copy it first
 * (actc_tensor_copy) to work in place.  Other saves are decoded into a
 * SCRATCH tensor.  NULL with ACTC_ERR_STATE when the saved tensor was
 * written in place after the save (see actc_tensor_mark_changed). */
ACTC_API actc_tensor *actc_load(actc_ctx *ctx, actc_node *node, int k);
/* 1 if the k-th save of node, not loaded yet, is stored exactly (fp32 or an
 * integer index), 0 if the policy stored it lossy (or k is not pending).  An
 * operator that saved quantities derived from its inputs (a softmax
 * normaliser, say) can tell whether they still match what it will load. */
ACTC_API int actc_saved_lossless(const actc_ctx *ctx, const actc_node *node, int k);
/* Decode rows [row0, row0 + nrows) of the first axis of the k-th save of
 * node into dst (nrows * numel / shape[0] floats) and leave the save in the
 * store: for an operator that walks a saved tensor a chunk of samples at a
 * time, so its decoded copy never exists whole.  The store drops the save
 * when the node's backward returns (or at actc_load).  ACTC_ERR_STATE as
 * actc_load when the saved tensor changed in place. */
ACTC_API actc_status actc_load_rows(actc_ctx *ctx, actc_node *node, int k, int row0, int nrows, float *dst);
/* For a backward function: in *out, the gradient buffer of t (t->grad's
 * data, t->numel floats) to accumulate its contribution into (+=), made
 * zero-filled on first use (category GRAD for a parameter, ACT otherwise).
 * *out is NULL with ACTC_OK when t needs no gradient (t NULL or
 * t->requires_grad 0).  When the buffer cannot be allocated (no system
 * memory, or over the actc_mem_set_budget budget) returns ACTC_ERR_OOM with
 * a message naming t and the request, *out NULL: return that status from
 * the backward function.  ACTC_ERR_INVALID if out is NULL. */
ACTC_API actc_status actc_grad_buffer(actc_ctx *ctx, actc_tensor *t, float **out);
/* Hand over a gradient contribution the operator computed in a buffer it
 * owns (a decoded save it no longer needs, or its output's gradient taken
 * with actc_grad_take), instead of accumulating into actc_grad_buffer's:
 * if t has no gradient yet, g (same shape) becomes it without a copy or a
 * zero fill; otherwise g is added into it.  Takes the caller's reference to
 * g in every case (released at once if t needs no gradient).  Saves a
 * tensor-sized buffer at the moments that set the backward peak. */
ACTC_API actc_status actc_grad_adopt(actc_ctx *ctx, actc_tensor *t, actc_tensor *g);
/* Detach and return node's output gradient (the caller owns it), for an
 * operator whose input gradient is its output gradient, changed in place or
 * not (addition, ReLU); NULL if there is none. */
ACTC_API actc_tensor *actc_grad_take(actc_node *node);

/* ---- Gradient forms ------------------------------------------------------
 * A parameter's gradient is held in one of three forms.  DENSE (the
 * default): t->grad, fp32, the parameter's shape; operators add into it.
 * LOWRANK: a factor F whose last axis is a projection's rank, standing for
 * F P^T (the parameter's shape); an operator that saved a projection adds
 * its factor with actc_grad_add_lowrank; t->grad stays NULL.  QUANT: after
 * each backward that completes the parameter's gradient, the dense
 * gradient is added into an encoded copy (actc_param_set_grad_codec) and
 * freed, so micro-batches accumulate in the encoded form.  Every form's
 * bytes are GRAD-accounted.  Optimizers step every form (a low-rank one in
 * the subspace: their state takes the factor's shape, and the step back is
 * p -= lr scale d P^T after a decoupled decay p *= 1 - lr wd, for SGD too,
 * whose dense step adds wd p to the gradient instead), actc_clip_grad_norm
 * measures and scales every form, and actc_tensor_drop_grad clears every
 * form.  Micro-batches adding to one low-rank gradient must use the same
 * projection: a compact policy derives it from the context's step, which
 * actc_backward advances, so set the step back (actc_ctx_set_step) before
 * each micro-batch of one update, as the trainer does. */
typedef enum { ACTC_GRAD_DENSE = 0, ACTC_GRAD_LOWRANK, ACTC_GRAD_QUANT, ACTC_GRAD_NFORMS } actc_grad_form;
typedef struct {
    actc_grad_form form;   /* of the gradient held now (DENSE if none)         */
    int present;           /* 1 if the parameter holds a gradient              */
    size_t bytes;          /* bytes the gradient holds (GRAD)                  */
    actc_projection proj;  /* LOWRANK: the factor is [.., proj.rank]           */
    char codec[16];        /* QUANT: the codec's name ("bf16", "quant:8")      */
} actc_grad_info;
/* Add factor (the parameter's shape with its last axis replaced by
 * proj->rank) into t's low-rank gradient with projection proj.
 * ACTC_ERR_INVALID for a shape that does not match, or a projection that
 * differs from the one the gradient already holds; ACTC_ERR_STATE if t
 * holds a gradient of another form. */
ACTC_API actc_status actc_grad_add_lowrank(actc_ctx *ctx, actc_tensor *t, const actc_tensor *factor,
                                           const actc_projection *proj);
/* Hold parameter t's gradient encoded between backward passes (a low-rank
 * gradient, whose factor is already small, stays low-rank): codec
 * "bf16", "quant:B" (B = 2..8 bits, ActNN's per-group quantizer with
 * stochastic rounding: unbiased), "dyn8" (AGoQ's and bitsandbytes' 8-bit
 * block-wise dynamic map, blocks of 256 with one fp32 absmax, nearest
 * rounding) or "fp32"/NULL (dense, the default).
 * ACTC_ERR_INVALID for another codec or a tensor that is not a parameter;
 * ACTC_ERR_STATE while t holds a gradient. */
ACTC_API actc_status actc_param_set_grad_codec(actc_tensor *t, const char *codec);
/* What t's gradient is now. */
ACTC_API void actc_grad_get_info(const actc_tensor *t, actc_grad_info *out);
/* t's gradient as dense fp32 in out (t->numel floats), whatever its form;
 * zeros if there is none.  ACTC_ERR_INVALID for NULL arguments,
 * ACTC_ERR_OOM when a low-rank form's projection cannot be built. */
ACTC_API actc_status actc_grad_to_dense(const actc_tensor *t, float *out);

/* ------------------------------------------------------------------------ */
/* Operators (forward; backward is recorded on the tape)                     */
/* All return a new tensor (caller releases) or NULL with an error set.      */
/* ------------------------------------------------------------------------ */

/* y[N,out] = x[N,in] W[out,in]^T + b[out] (b may be NULL). x may have more
 * than 2 dims: the last dim is `in`, the others are flattened into N. */
ACTC_API actc_tensor *actc_linear(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b);
/* 2-D convolution, x[N,C,H,W], w[K,C,kh,kw], b[K] or NULL.  Runs on oneDNN
 * when built with it, else on im2col + OpenBLAS sgemm, which is also the
 * fallback for geometries oneDNN cannot run (actc_set_conv_backend chooses
 * otherwise); every buffer either backend needs is SCRATCH-accounted and
 * bounded per chunk. */
ACTC_API actc_tensor *actc_conv2d(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b,
                                  int stride, int pad);
/* Choose the backend of every later convolution of the process (forward
 * and backward): "auto" (the default: oneDNN when the library was built
 * with it, falling back to im2col per geometry), "dnnl" (oneDNN only: a
 * geometry it cannot run fails with ACTC_ERR_STATE) or "im2col" (im2col +
 * sgemm).  The library reads no environment variable; the actc command
 * passes its ACTC_CONV here.  Unknown names, and "dnnl" in a build without
 * oneDNN, fail with ACTC_ERR_INVALID and change nothing; so does "dnnl" in
 * deterministic mode (actc_set_deterministic), which runs "auto" on
 * im2col.  Set it while no
 * convolution is running (before training, or between steps). */
ACTC_API actc_status actc_set_conv_backend(const char *name);
/* The backend set by actc_set_conv_backend: "auto", "dnnl" or "im2col". */
ACTC_API const char *actc_get_conv_backend(void);
/* Batch normalisation over N,H,W per channel.  Training: batch statistics,
 * running_mean/var updated with `momentum` (PyTorch convention, unbiased var).
 * Eval: running statistics.  gamma/beta are parameters [C]. */
ACTC_API actc_tensor *actc_batchnorm2d(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma,
                                       actc_tensor *beta, actc_tensor *running_mean,
                                       actc_tensor *running_var, float momentum, float eps);
/* max(x, 0). */
ACTC_API actc_tensor *actc_relu(actc_ctx *ctx, actc_tensor *x);
/* As actc_conv2d, actc_batchnorm2d and actc_relu, but taking over the
 * caller's reference to x (released in every case, errors included): when it
 * was x's only reference, the result is computed in x's own buffer (x keeps
 * no data afterwards), so a model that no longer needs x holds one
 * activation fewer.  What backward needs was saved before x was
 * overwritten.  conv2d does so when the output is as large as the input
 * (stride 1, as many output as input channels) on the oneDNN backend, a
 * chunk of samples at a time; otherwise it allocates as actc_conv2d does. */
ACTC_API actc_tensor *actc_conv2d_take(actc_ctx *ctx, actc_tensor *x, actc_tensor *w, actc_tensor *b,
                                       int stride, int pad);
ACTC_API actc_tensor *actc_batchnorm2d_take(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma,
                                            actc_tensor *beta, actc_tensor *running_mean,
                                            actc_tensor *running_var, float momentum, float eps);
ACTC_API actc_tensor *actc_relu_take(actc_ctx *ctx, actc_tensor *x);
/* Max pooling, window k, stride s, zero... padding p (padded cells never win). */
ACTC_API actc_tensor *actc_maxpool2d(actc_ctx *ctx, actc_tensor *x, int k, int s, int p);
/* Average pooling (padding counted in the divisor, as PyTorch's default). */
ACTC_API actc_tensor *actc_avgpool2d(actc_ctx *ctx, actc_tensor *x, int k, int s, int p);
/* [N,C,H,W] -> [N,C]. */
ACTC_API actc_tensor *actc_global_avgpool(actc_ctx *ctx, actc_tensor *x);
/* Inverted dropout with drop probability p (identity in eval mode). */
ACTC_API actc_tensor *actc_dropout(actc_ctx *ctx, actc_tensor *x, float p);
/* a + b, same shapes (residual connection). */
ACTC_API actc_tensor *actc_add(actc_ctx *ctx, actc_tensor *a, actc_tensor *b);
/* As actc_add, taking over the caller's reference to a (like actc_relu_take). */
ACTC_API actc_tensor *actc_add_take(actc_ctx *ctx, actc_tensor *a, actc_tensor *b);
/* Same data, new shape (same numel); one dim may be -1. */
ACTC_API actc_tensor *actc_reshape(actc_ctx *ctx, actc_tensor *x, int ndim, const int *shape);
/* As actc_reshape, taking over the caller's reference to x (like
 * actc_relu_take): with x's only reference the result keeps x's buffer, no
 * copy. */
ACTC_API actc_tensor *actc_reshape_take(actc_ctx *ctx, actc_tensor *x, int ndim, const int *shape);
/* [N, ...] -> [N, rest]. */
ACTC_API actc_tensor *actc_flatten(actc_ctx *ctx, actc_tensor *x);
/* Mean softmax cross-entropy of logits[N,K] against integer labels[N] (values
 * in [0,K), or ignore_index to skip a row; pass -1 for none).  Returns a
 * scalar tensor.  If n_correct is not NULL it receives the count of rows whose
 * argmax equals the label.  Saves the probabilities softmax(logits) for
 * backward (an ACT save: policies may round them; the gradient is linear in
 * them, so stochastic rounding keeps it unbiased). */
ACTC_API actc_tensor *actc_cross_entropy(actc_ctx *ctx, actc_tensor *logits, const int32_t *labels,
                                         int ignore_index, int *n_correct);

/* ---- Graph operators: sparse adjacency in CSR --------------------------
 * Row i of an adjacency lists the nodes i aggregates from: y[i] = sum over
 * entries k in [rowptr[i], rowptr[i+1]) of val[k] x[col[k]].  The structure
 * (rowptr, col, perm) is the graph's, read in place like a parameter: it
 * must outlive the backward pass and is not context.  What is computed per
 * node or per edge (features, attention scores and coefficients) goes
 * through the saved-context store, so every policy applies to it.
 * Backward walks the transpose (actc_csr_transpose: the same entries by
 * column, perm[k] naming the entry of the original), so every output row
 * has one writer: no atomics, and the same bits at any thread count. */
typedef struct {
    int n;                 /* rows = columns = nodes                           */
    int64_t nnz;           /* stored entries                                   */
    int64_t *rowptr;       /* [n + 1]                                          */
    int32_t *col;          /* [nnz] in [0, n), ascending within a row          */
    float *val;            /* [nnz] entry weights, or NULL: all ones           */
    int64_t *perm;         /* a transpose: entry k is entry perm[k] of the
                              matrix it was made from; otherwise NULL          */
} actc_csr;

/* The CSR of n nodes with m edges src[e] -> dst[e] (row dst[e] gets column
 * src[e]), weights w (NULL: ones, and out->val is NULL).  With symmetric
 * each edge is also added the other way, with the same weight; with
 * self_loops every node gets i -> i (weight 1).  Columns ascend within a
 * row.  Duplicate entries are merged into one, keeping the weight of the
 * first in this order: the edges in order (each followed by its reverse
 * when symmetric), then the added self-loops; so an explicit self-loop
 * keeps its weight, and with symmetric an edge given both ways keeps the
 * weight of whichever comes first.  out->perm is NULL.  ACTC_ERR_INVALID
 * (out zeroed) naming the edge and its values for an index outside [0, n)
 * (negative included) or a weight that is not finite, and for n < 1, m < 0,
 * NULL src/dst with m > 0 or NULL out; ACTC_ERR_OOM.  Free with
 * actc_csr_free. */
ACTC_API actc_status actc_csr_from_edges(int n, int64_t m, const int32_t *src, const int32_t *dst, const float *w,
                                         int symmetric, int self_loops, actc_csr *out);
/* The transpose of a: out->perm[k] is the entry of a that out's entry k is
 * (out->val is NULL: backward reads a's values through perm); columns
 * ascend within a row.  ACTC_ERR_INVALID for a column of a outside [0, n). */
ACTC_API actc_status actc_csr_transpose(const actc_csr *a, actc_csr *out);
/* GCN's symmetric normalisation of a (which should hold its self-loops and
 * be symmetric): w[k] = 1 / sqrt(d_i d_j) for entry k = (i, j), d = entries
 * per row; when a has weights, w[k] = a_k / sqrt(d_i d_j) with d_i = sum of
 * row i's weights.  w has a->nnz floats (w may be a->val: in place).  ACTC_ERR_INVALID naming the entry when a degree under an
 * entry is not positive; a row without entries is fine. */
ACTC_API actc_status actc_csr_gcn_norm(const actc_csr *a, float *w);
/* Free the arrays of a CSR made by actc_csr_from_edges or
 * actc_csr_transpose (they come from actc_mem_alloc, category SCRATCH, so
 * a memory budget covers the graph); not the struct.  A zeroed or freed
 * one is fine.  A CSR you fill yourself is yours to free. */
ACTC_API void actc_csr_free(actc_csr *a);

/* y[n, F] = A x for x [n, F] (any trailing shape, flattened to F; y has
 * x's shape).  at is actc_csr_transpose(a) (backward: dx = A^T dy, one
 * writer per row of dx), or NULL when a is symmetric in structure and
 * values.  Saves nothing: dx needs only A.  The graph operators check a's
 * header (n, nnz, rowptr[0] and rowptr[n]) and at's (same n and nnz, perm
 * set), not every column: build them with the functions above. */
ACTC_API actc_tensor *actc_spmm(actc_ctx *ctx, const actc_csr *a, const actc_csr *at, actc_tensor *x);
/* GAT's edge scores: e[k, h] = LeakyReLU(s_dst[i, h] + s_src[j, h]) for
 * entry k = (i, j) of a, s_dst and s_src [n, H], slope the negative slope
 * (0.2 in GAT; finite and >= 0, so that e > 0 exactly where the sum is).
 * The result is [nnz, H].  at is actc_csr_transpose(a) (backward of s_src);
 * it may be NULL when s_src needs no gradient (or in eval mode).  Saves
 * the sign of each score as a MASK (one bit per edge and head; a sum of
 * exactly 0 takes the slope side). */
ACTC_API actc_tensor *actc_gat_scores(actc_ctx *ctx, const actc_csr *a, const actc_csr *at, actc_tensor *s_dst,
                                      actc_tensor *s_src, float slope);
/* Softmax of e [nnz, H] over each row's entries, per head (the row's
 * maximum subtracted first): every row with entries sums to one; a row
 * without entries has none to produce.  Saves the output as ACT
 * (SOFTMAX_OUT, not linear). */
ACTC_API actc_tensor *actc_edge_softmax(actc_ctx *ctx, const actc_csr *a, actc_tensor *e);
/* Attention-weighted aggregation: y[i, h*D + d] = sum over entries k = (i, j)
 * of alpha[k, h] x[j, h*D + d], alpha [nnz, H], x [n, F] (2-D, F divisible
 * by H, D = F / H); y is [n, F], 0 in rows without entries.  at
 * is actc_csr_transpose(a), for dx; it may be NULL when x needs no
 * gradient.  Saves alpha (ACT, ATTN_PROBS) when x needs a gradient and x
 * (ACT, ATTN_V) when alpha does, both linear. */
ACTC_API actc_tensor *actc_edge_aggregate(actc_ctx *ctx, const actc_csr *a, const actc_csr *at, actc_tensor *alpha,
                                          actc_tensor *x);
/* Per-head dot product: s[i, h] = sum_d x[i, h*D + d] w[h, d], x [n, H*D]
 * (2-D), w [H, D] (GAT's attention vectors); s is [n, H].  Saves x (ACT,
 * LINEAR_IN, fan_in D) when w needs a gradient; a parameter w is read in
 * place, another w needed for dx is kept EXACT (as linear does). */
ACTC_API actc_tensor *actc_head_dot(actc_ctx *ctx, actc_tensor *x, actc_tensor *w);
/* Rows of x [n, ...] picked by idx[0..m): y[r] = x[idx[r]] (m >= 1 rows,
 * repeats allowed; y is [m, ...]).  ACTC_ERR_INVALID naming the position
 * for an index outside [0, n).  The indices are kept as INDEX (floats: x
 * may have at most 2^24 rows when it needs a gradient); backward adds each
 * row back to its source, sources split across threads so that every row
 * of dx has one writer. */
ACTC_API actc_tensor *actc_gather_rows(actc_ctx *ctx, actc_tensor *x, const int32_t *idx, int m);
/* ELU: x for x > 0, alpha (exp(x) - 1) otherwise (alpha finite, >= 0).
 * Saves the output (ACT, ACT_DERIV, linear: the derivative is 1 where
 * y > 0, else y + alpha). */
ACTC_API actc_tensor *actc_elu(actc_ctx *ctx, actc_tensor *x, float alpha);
/* x [..., F] + b [F] on every row.  Saves nothing. */
ACTC_API actc_tensor *actc_bias_add(actc_ctx *ctx, actc_tensor *x, actc_tensor *b);
/* a x + b y for x, y of the same shape (y NULL: a x; y may be x).  Saves
 * nothing. */
ACTC_API actc_tensor *actc_scale_add(actc_ctx *ctx, actc_tensor *x, float a, actc_tensor *y, float b);

/* ---- Transformer building blocks (normalise / activate over the last dim) */

/* Token embedding: out[b,t,:] = weight[ids[b*T+t], :] for ids in [0, V).
 * weight is [V, D]; the result is [B, T, D].  The ids are kept as INDEX. */
ACTC_API actc_tensor *actc_embedding(actc_ctx *ctx, const int32_t *ids, int B, int T, actc_tensor *weight);
/* LayerNorm over the last dim D: (x - mean) * rstd * gamma + beta; gamma and
 * beta are [D] (either may be NULL).  Saves x as ACT and mean/rstd as EXACT. */
ACTC_API actc_tensor *actc_layernorm(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma, actc_tensor *beta,
                                     float eps);
/* RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * gamma (gamma [D] or NULL). */
ACTC_API actc_tensor *actc_rmsnorm(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma, float eps);
/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
ACTC_API actc_tensor *actc_gelu(actc_ctx *ctx, actc_tensor *x);
/* SiLU: x * sigmoid(x). */
ACTC_API actc_tensor *actc_silu(actc_ctx *ctx, actc_tensor *x);
/* As actc_gelu / actc_silu, taking over the caller's reference to x (like
 * actc_relu_take): with x's only reference the derivative they save is
 * written over x's buffer, so forward holds no extra full-size tensor. */
ACTC_API actc_tensor *actc_gelu_take(actc_ctx *ctx, actc_tensor *x);
ACTC_API actc_tensor *actc_silu_take(actc_ctx *ctx, actc_tensor *x);
/* Element-wise product a * b of equal shapes (SwiGLU is mul(silu(a), b)). */
ACTC_API actc_tensor *actc_mul(actc_ctx *ctx, actc_tensor *a, actc_tensor *b);

/* ---- Attention: causal self-attention and its parts ----------------------
 * Layout: q, k, v and the attention output are [B, T, H*Dh], head h being
 * columns [h*Dh, (h+1)*Dh) of every row: the outputs of the Q/K/V linear
 * projections as they are, and the input of the output projection.
 * [B, T, H, Dh] (RoPE's layout) is the same memory and is accepted too. */

/* Batched matrix product out[..., M, N] = op(a) op(b): op(a) is a [..., M, K],
 * or with trans_a the transpose of a stored [..., K, M]; likewise b [..., K, N]
 * or [..., N, K] with trans_b.  b has a's leading dims, or is 2-D and shared
 * by every item.  One OpenBLAS sgemm per item, many small items spread over
 * threads.  Saves a (ACT) only if b needs a gradient and b only if a does;
 * a parameter is read in place instead. */
ACTC_API actc_tensor *actc_matmul(actc_ctx *ctx, actc_tensor *a, actc_tensor *b, int trans_a, int trans_b);
/* Causal softmax over the last dim of x [..., T, T]: row i is
 * softmax(scale * x[i, j]) over the columns j <= i and exactly 0 for j > i.
 * Saves the output (the probabilities) as ACT. */
ACTC_API actc_tensor *actc_softmax_causal(actc_ctx *ctx, actc_tensor *x, float scale);
/* Rotary position embedding on x [B, T, H, Dh] (or [B, T, Dh], one head): at
 * position t (dim 1, from 0) every head's pairs (x[2i], x[2i+1]) are rotated
 * by the angle t * base^(-2i/Dh).  base 0 selects 10000 (LLaMA); Dh must be
 * even.  Saves nothing (backward rotates the gradient back). */
ACTC_API actc_tensor *actc_rope(actc_ctx *ctx, actc_tensor *x, float base);
/* Causal multi-head self-attention, textbook form: per head
 * O = softmax(Q K^T / sqrt(Dh), causal) V with Dh = width / n_heads; returns
 * [B, T, H*Dh].  One node keeping Q, K, V and the probabilities P [B, H, T, T]
 * (ACT): 4 (3 B T H Dh + B H T^2) bytes in fp32. */
ACTC_API actc_tensor *actc_attention_naive(actc_ctx *ctx, actc_tensor *q, actc_tensor *k, actc_tensor *v, int n_heads);
/* The same attention, memory-efficient form (FlashAttention-2 style): keys in
 * blocks with an online softmax, fully masked blocks skipped, so no T x T
 * scores exist (scratch: a few 64 x 64 blocks per thread); backward
 * recomputes P block by block.  Keeps Q, K, V, the output (ACT; the output
 * projection keeps that tensor anyway, and the store holds it once) and the
 * per-row log-sum-exp [B, H, T] (EXACT): 4 (4 B T H Dh + B H T) bytes in fp32,
 * less than the naive form for T > Dh + 1 and 4x less for T >= 13 Dh + 4.
 * When a policy stores Q or K lossy, backward first recomputes the
 * log-sum-exp from the decoded Q and K (one more Q K^T pass), so the
 * probabilities it rebuilds are an exact softmax of what it decoded.
 * Same results as actc_attention_naive to float rounding. */
ACTC_API actc_tensor *actc_attention_flash(actc_ctx *ctx, actc_tensor *q, actc_tensor *k, actc_tensor *v, int n_heads);
/* Attention forms (actc_attention, actc_model_opts.attention). */
enum { ACTC_ATTN_FLASH = 0, ACTC_ATTN_NAIVE = 1 };
/* The attention in the form the plan of ACTC_REGION_ATTN asks for: SAVE the
 * textbook form (actc_attention_naive), RECOMPUTE the memory-efficient one
 * (actc_attention_flash), no plan: form (ACTC_ATTN_FLASH or ACTC_ATTN_NAIVE,
 * the model's default).  The gact levels plan the textbook form (GACT's L1
 * and CB1 save the softmax's probabilities), gact:CB2 the memory-efficient
 * one; the other policies have no opinion.  ACTC_ERR_INVALID for another
 * form. */
ACTC_API actc_tensor *actc_attention(actc_ctx *ctx, actc_tensor *q, actc_tensor *k, actc_tensor *v, int n_heads,
                                     int form);

/* ------------------------------------------------------------------------ */
/* GACT controller: run-time sensitivity and per-tensor bits                 */
/* ------------------------------------------------------------------------ */

/* The C counterpart of GACT's controller.iterate(fwdbwdprop).  With a gact:
 * policy on the context, when actc_controller_measure_due says so (at the
 * first iteration, every adapt_interval iterations, and four times more
 * during the first interval) the controller measures each saved tensor's
 * sensitivity c_l (GACT Algorithm 1): it runs fn L + 1 extra times on the same batch and step, all
 * tensors quantized at 4 bits with fixed rounding streams, re-keying one
 * tensor's stream per pass; c_l = ||g_0 - g_l||^2 / 2 / S(4), S(b) =
 * (2^b - 1)^-2, over all parameter gradients.  Then, under an adaptive level
 * (gact:4, gact:3, gact:2, gact:CB1, gact:CB2), it gives each tensor 32, 8,
 * 4, 2 or 1 bits minimising sum c_l S(b_l) under the average budget
 * (gact:fixB keeps its bits; its sensitivities feed the alert and
 * inspection).  With any other policy, gact:CKPT included (nothing is
 * compressed), iterate just runs fn once.
 *
 * fn runs forward and backward on the current batch (the controller zeroes
 * the parameters' gradients before every call): with max_samples > 0 on at
 * most the first max_samples samples (the sensitivity passes use a sub-batch,
 * as GACT's code does; 0 means the whole batch), storing in *samples how many
 * it used.  The call the training step keeps is the last one. */
typedef actc_status (*actc_fwdbwd_fn)(actc_ctx *ctx, void *user, int max_samples, int *samples);

typedef struct {
    uint64_t adapt_interval;  /* iterations between sensitivity measurements (1000) */
    int estimate_samples;     /* samples per sensitivity pass (8; 0: whole batch)    */
    double alert_fraction;    /* alert when V(b) exceeds this share of the overall
                                 gradient variance (0.5)                            */
} actc_controller_opts;

/* What the controller knows about one saved tensor. */
typedef struct {
    char op[24];              /* operator that saved it                       */
    char scope[64];           /* its name scope                               */
    int ndim, shape[ACTC_MAX_DIMS];
    double sensitivity;       /* c_l at the last measurement; < 0: none yet   */
    int bits;                 /* width it is stored at (32: fp32)             */
    size_t stored_bytes;      /* payload of its last save                     */
    size_t fp32_bytes;        /* the same tensor in fp32                      */
} actc_saved_info;

typedef struct actc_controller actc_controller;

ACTC_API actc_controller_opts actc_controller_default_opts(void);
/* A controller for ctx, measuring gradients of params[0..n-1] (the array is
 * copied; the tensors stay the caller's).  o NULL: the defaults.  NULL with
 * an error on bad options or no memory.  Under a gact policy it keeps a
 * running mean of the gradient for the alert (4 bytes per parameter,
 * accounted as OPTIM) and, while measuring, a copy of the reference gradient
 * (SCRATCH).  Its measurements are not part of model checkpoints: a resumed
 * run measures again at its first iteration. */
ACTC_API actc_controller *actc_controller_new(actc_ctx *ctx, actc_tensor **params, int n, const actc_controller_opts *o);
ACTC_API void actc_controller_free(actc_controller *c);
/* One training iteration's forward and backward (measuring and re-allocating
 * first when due).  The optimizer step is the caller's, after this returns.
 * The context's step number is the same for every pass and advances once. */
ACTC_API actc_status actc_controller_iterate(actc_controller *c, actc_fwdbwd_fn fn, void *user);
/* The controller of pipeline stage `stage` of `stages`, each holding part
 * of the model: the sensitivity passes run on every stage together (as
 * many as all stages' tensors, pass j perturbing the j-th of them on its
 * own stage), the gradients' change and the variances summed over the
 * stages with sum (blocking, n doubles).  Each stage then allocates bits
 * among its own tensors.  The trainer sets it (actc_trainer_set_pipe);
 * stages 1: alone. */
ACTC_API actc_status actc_controller_set_stages(actc_controller *c, int stage, int stages,
                                               actc_status (*sum)(double *v, int n, void *user), void *user);
/* 1 if GACT's sensitivities are measured at iteration iter (counted from 0)
 * with this adapt_interval: at iteration 0 and every adapt_interval
 * iterations, as GACT does, and within the first interval also at
 * adapt_interval / 16, / 8, / 4 and / 2 (integer division; each of at least
 * 16 iterations, so an interval under 32 adds none).  Sensitivities move
 * most at the start of a run from scratch: an untrained classifier's flat
 * softmax makes what the loss saves look insensitive, and a 4-layer GPT
 * measured at step 0 only ended 0.10 bits per byte above fp32 after 1,000
 * steps (bench/RESULTS.md, issue 37).  The controller and the PyTorch
 * package's hooks both follow this schedule.  0 when adapt_interval is 0. */
ACTC_API int actc_controller_measure_due(uint64_t iter, uint64_t adapt_interval);
/* 1 if the last iterate measured sensitivities and re-allocated bits. */
ACTC_API int actc_controller_adapted(const actc_controller *c);
/* The variance alert: a message with the numbers and the advice to raise
 * the budget when, after an adaptation, the estimated compression variance
 * V(b) = sum c_l S(b_l) exceeds alert_fraction of the overall gradient
 * variance (a running estimate over the iterations); else NULL.  Each
 * adaptation raises it at most once; this returns it once. */
ACTC_API const char *actc_controller_take_alert(actc_controller *c);
/* V(b) scaled to the whole batch, and the running overall gradient variance
 * (sum over parameters; < 0 while unknown). */
ACTC_API void actc_controller_variances(const actc_controller *c, double *compression, double *overall);
/* The tensors of the gact policy on the context (up to cap written; returns
 * how many there are, 0 for another policy), in first-save order. */
ACTC_API int actc_controller_tensors(const actc_controller *c, actc_saved_info *out, int cap);

/* ------------------------------------------------------------------------ */
/* Models                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct actc_model actc_model;

typedef struct {
    int in_channels;   /* default 1 */
    int in_h, in_w;    /* default 28 x 28 */
    int num_classes;   /* default 10 */
    int width;         /* MLP hidden width (256), transformer model width
                          (the preset's); 0 = the model's default */
    float dropout;     /* MLP dropout (default 0) */
    uint64_t seed;     /* parameter initialisation */
    /* Transformer language models (0 = the preset's value): */
    int n_layers;      /* blocks                                           */
    int n_heads;       /* attention heads (must divide width)              */
    int context;       /* maximum sequence length (positions)              */
    int vocab;         /* vocabulary size (256 for byte-level text)        */
    int attention;     /* ACTC_ATTN_FLASH (default) or ACTC_ATTN_NAIVE     */
    /* A pipeline stage's part of a transformer: blocks [first_block,
     * first_block + n_blocks), with the embedding when first_block is 0 and
     * the final norm and head when the run ends at the last block (a tied
     * head keeps its own copy of the token embedding, "wte").  Only those
     * parameters are kept, under the whole model's names and with its
     * initial values.  A part without the embedding takes the hidden
     * states [B, T, width] as its input (actc_batch.x), one without the
     * head returns them.  n_blocks 0: the whole model. */
    int first_block, n_blocks;
} actc_model_opts;

/* Default options (1x28x28 input, 10 classes). */
ACTC_API actc_model_opts actc_model_default_opts(void);
/* Build a model by name: image classifiers "mlp", "resnet20", "resnet32",
 * "resnet56", "resnet18"; language models "gpt", "llama" (6 layers, width
 * 256, 8 heads, context 256, vocabulary 256 unless opts say otherwise), the
 * presets "gpt-mini" and "llama-mini" (the same shapes) and "gpt2-124m" (12
 * layers, width 768, 12 heads, context 1024, vocabulary 50257); graph
 * networks "gcn" (2 layers, width 64), "gat" (2 layers, 8 heads of 8
 * features, one head on the output layer) and "gcnii" (16 layers, width 64,
 * alpha 0.1, lambda 0.5), whose input is in_channels * in_h * in_w node
 * features and whose dropout (opts.dropout; the command's presets are 0.5,
 * 0.6 and 0.6) applies to features, and in gat to attention too. */
ACTC_API actc_status actc_model_create(const char *name, const actc_model_opts *o, actc_model **out);
ACTC_API void actc_model_free(actc_model *m);
/* Names accepted by actc_model_create, one per line with a description. */
ACTC_API const char *actc_model_list(void);
ACTC_API const char *actc_model_name(const actc_model *m);
ACTC_API const actc_model_opts *actc_model_get_opts(const actc_model *m);
/* logits[N,num_classes] for a batch x[N,C,H,W].  Records the tape in training
 * mode.  The caller releases the result. */
ACTC_API actc_tensor *actc_model_forward(actc_model *m, actc_ctx *ctx, actc_tensor *x);
/* 1 for a language model (fed token ids), 0 for an image classifier. */
ACTC_API int actc_model_takes_tokens(const actc_model *m);
/* The same by name, before building: 1 if actc_model_create(name) makes a
 * language model. */
ACTC_API int actc_model_name_takes_tokens(const char *name);
/* 1 for a graph model (gcn, gat, gcnii: fed a graph batch, see
 * actc_source_graph), 0 otherwise; the same by name before building. */
ACTC_API int actc_model_takes_graph(const actc_model *m);
ACTC_API int actc_model_name_takes_graph(const char *name);
/* Language models: logits [B*T, vocab] (row b*T + t predicts the token after
 * ids[b*T + t]) for B sequences of T token ids (ids[b*T + t] in [0, vocab),
 * 1 <= T <= context).  Records the tape in training mode. */
ACTC_API actc_tensor *actc_model_forward_tokens(actc_model *m, actc_ctx *ctx, const int32_t *ids, int B, int T);
/* One minibatch as a model's forward sees it.  The trainer cuts a batch
 * along its first axis (x's first dimension, ids' rows, labels) into
 * micro-batches and sub-batches; `user` is passed through unchanged. */
typedef struct actc_batch {
    actc_tensor *x;          /* image models: the input [N, C, H, W]; user models:
                                any input tensor whose first dim is the sample
                                axis; NULL for language models                */
    const int32_t *ids;      /* language models: B rows of T token ids         */
    int B, T;
    const int32_t *labels;   /* one target per row of the logits: N labels, or
                                B*T next tokens; NULL when a user model's
                                forward returns the loss itself                */
    void *user;              /* anything a user-defined forward needs          */
    /* Graph models: the whole graph (x its features, ids the B nodes whose
     * logits the forward returns, labels theirs).  A graph batch is one
     * sample: it is never cut into micro-batches or shared by processes. */
    const struct actc_graph *graph;
} actc_batch;

/* Samples in b: 1 for a graph batch, x's first dimension when x is set,
 * else B. */
ACTC_API int actc_batch_samples(const actc_batch *b);

/* Forward of a user-defined model: the logits for batch b (one row per
 * label), or, when b->labels is NULL, the scalar loss.  It builds them with
 * the operators (and its own, see "Writing an operator"), reading its
 * parameters and whatever it keeps in user. */
typedef actc_tensor *(*actc_forward_fn)(actc_ctx *ctx, const actc_batch *b, void *user);
/* Wrap your own model as an actc_model, so that the trainer, checkpoints
 * and maxbatch take it like a built-in one: params (trainable, from
 * actc_param_new) and buffers (saved, not trained: running statistics),
 * every one named, names unique (checkpoints store tensors by name).  The
 * model takes a reference to each tensor (drop yours when you like) and
 * forward is called with user.  actc_model_get_opts reports the defaults. */
ACTC_API actc_status actc_model_custom(const char *name, actc_tensor *const *params, int n_params, actc_tensor *const *buffers,
                                       int n_buffers, actc_forward_fn forward, void *user, actc_model **out);
/* 1 for a model made by actc_model_custom. */
ACTC_API int actc_model_is_custom(const actc_model *m);
/* The logits (or a user model's loss) for batch b: x for image models, ids
 * for language models, the user's forward for a custom one.  A part of a
 * transformer (actc_model_opts.n_blocks) reads x [B, T, width] when it has
 * no embedding and returns hidden states when it has no head. */
ACTC_API actc_tensor *actc_model_forward_batch(actc_model *m, actc_ctx *ctx, const actc_batch *b);
/* Trainable parameters (order is stable). */
ACTC_API int actc_model_params(actc_model *m, actc_tensor ***out);
/* Everything a checkpoint must hold: parameters then buffers (running stats). */
ACTC_API int actc_model_state(actc_model *m, actc_tensor ***out);
/* Total number of trainable scalars. */
ACTC_API size_t actc_model_num_params(actc_model *m);
/* Free the .grad of every parameter. */
ACTC_API void actc_model_zero_grad(actc_model *m);

/* ------------------------------------------------------------------------ */
/* Optimizers and learning-rate schedules                                    */
/* ------------------------------------------------------------------------ */

typedef struct actc_optim actc_optim;

/* SGD with momentum (0 = plain), Nesterov, L2 weight decay (added to grad). */
ACTC_API actc_optim *actc_sgd_new(actc_tensor **params, int n, float momentum, int nesterov,
                                  float weight_decay);
/* AdamW (decoupled weight decay). */
ACTC_API actc_optim *actc_adamw_new(actc_tensor **params, int n, float beta1, float beta2,
                                    float eps, float weight_decay);
ACTC_API void actc_optim_free(actc_optim *o);
/* One update with learning rate lr using each parameter's gradient in its
 * form (a parameter without one is skipped): dense as is, an encoded one
 * decoded, a low-rank one F P^T stepped in the subspace (the state takes
 * F's shape, the parameter moves by -lr d P^T, and weight decay is
 * decoupled for SGD too).  State made for another form (a low-rank
 * gradient's, then a dense one) is refused with ACTC_ERR_STATE before any
 * parameter changes.  Does not clear the gradients. */
ACTC_API actc_status actc_optim_step(actc_optim *o, float lr);
/* Scale the gradients of params[0..n) (those that have one) by
 * max_norm / (norm + 1e-6) when their global L2 norm exceeds max_norm > 0
 * (PyTorch's clip_grad_norm_).  *norm_out (may be NULL) receives the norm
 * before clipping.  Every gradient form counts: an encoded one decoded (and
 * scaled on decode), a low-rank one by its factor (what the optimizer
 * steps on).  A non-finite norm scales nothing and returns
 * ACTC_ERR_NUMERIC, so an Inf/NaN gradient never reaches the optimizer. */
ACTC_API actc_status actc_clip_grad_norm(actc_tensor **params, int n, float max_norm, float *norm_out);
/* "sgd" or "adamw". */
ACTC_API const char *actc_optim_name(const actc_optim *o);
/* State tensors for checkpoints (momentum buffers, Adam moments), in
 * parameter order then slot order; missing state is created as zeros first
 * (-1 if that allocation fails).  The array belongs to the optimizer. */
ACTC_API int actc_optim_state(actc_optim *o, actc_tensor ***out);
/* Allocate all state tensors now (zeros). */
ACTC_API actc_status actc_optim_init_state(actc_optim *o);
/* Number of steps taken (AdamW bias correction); settable for resume. */
ACTC_API uint64_t actc_optim_steps(const actc_optim *o);
ACTC_API void actc_optim_set_steps(actc_optim *o, uint64_t steps);

typedef enum { ACTC_LR_CONSTANT = 0, ACTC_LR_STEP, ACTC_LR_COSINE } actc_lr_kind;
typedef struct {
    actc_lr_kind kind;
    float base_lr;
    float min_lr;          /* cosine floor                                  */
    uint64_t warmup_steps; /* step s < W gets base_lr*(s+1)/W, then the
                              schedule runs on step - W                     */
    uint64_t total_steps;  /* cosine horizon (warm-up included); min_lr after;
                              0: no horizon, no decay                       */
    uint64_t step_size;    /* step decay every step_size steps              */
    float gamma;           /* step decay factor                             */
} actc_lr_schedule;
/* Learning rate at (0-based) step. */
ACTC_API float actc_lr_at(const actc_lr_schedule *s, uint64_t step);
/* Parse "const" (or "constant"), "cosine", or "step:STEP_SIZE:GAMMA" (decay by
 * GAMMA > 0 every STEP_SIZE > 0 steps).  Sets kind (and step_size, gamma);
 * the caller fills base_lr, min_lr, warmup_steps, total_steps.  *s is left
 * untouched on error. */
ACTC_API actc_status actc_lr_parse(const char *spec, actc_lr_schedule *s);
/* Check a filled schedule: base_lr positive and finite; a cosine floor in
 * [0, base_lr]; a step decay with step_size > 0 and 0 < gamma <= 1 (a
 * schedule that claims to decay must not raise the rate).  ACTC_ERR_INVALID
 * with the numbers otherwise. */
ACTC_API actc_status actc_lr_check(const actc_lr_schedule *s);

/* ------------------------------------------------------------------------ */
/* Data                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct {
    int n, c, h, w;        /* images[n][c][h][w] as uint8                    */
    uint8_t *pixels;       /* n*c*h*w bytes                                  */
    int32_t *labels;       /* n labels                                       */
    int num_classes;       /* 1 + max label                                  */
} actc_image_dataset;

/* Read an IDX image file (magic 0x00000803, dims n,h,w) and its IDX label file
 * (0x00000801, dim n), gzip-compressed or not.  Errors name the file: missing
 * (ACTC_ERR_IO), wrong magic or dims, truncated, trailing bytes, count
 * mismatch, classes not numbered from 0 without gaps (every class from 0 to
 * the largest label must occur: a damaged label would otherwise add classes
 * to the model; the message says how many never occur and how many labels
 * lie above the gap) (ACTC_ERR_FORMAT).  Pixels and labels are malloc'd
 * input data, not accounted by the allocator. */
ACTC_API actc_status actc_idx_load(const char *images_path, const char *labels_path,
                                   actc_image_dataset *out);
/* Fashion-MNIST from directory dir (default /usr/share/datasets/fashion-mnist
 * when dir is NULL): train=1 -> train-*, train=0 -> t10k-*; either .gz or not.
 * Labels outside its 10 classes are refused with their count. */
ACTC_API actc_status actc_fashion_mnist_load(const char *dir, int train, actc_image_dataset *out);
ACTC_API void actc_image_dataset_free(actc_image_dataset *d);

typedef struct {
    float mean, std;       /* normalisation x = (p/255 - mean) / std          */
    int crop_pad;          /* random crop with this zero padding (0 = off)    */
    int hflip;             /* random horizontal flip                          */
    int shuffle;
    uint64_t seed;
} actc_loader_opts;

typedef struct actc_loader actc_loader;
/* Batches of `batch` images (the last partial batch is dropped if drop_last;
 * then batch > d->n is an error).  d must outlive the loader (not copied); o
 * may be NULL for defaults (mean 0, std 1, no augmentation, no shuffle). */
ACTC_API actc_loader *actc_loader_new(const actc_image_dataset *d, int batch, int drop_last,
                                      const actc_loader_opts *o);
ACTC_API void actc_loader_free(actc_loader *l);
/* Number of batches per epoch. */
ACTC_API int actc_loader_num_batches(const actc_loader *l);
/* Fill x (a [B,C,H,W] SCRATCH tensor the loader allocates; caller releases)
 * and labels (B entries, owned by the loader until the next call) with batch
 * `index` of epoch `epoch`.  Order and augmentation are a pure function of
 * (seed, epoch, index), so a resumed run sees the same batches. */
ACTC_API actc_status actc_loader_get(actc_loader *l, int epoch, int index, actc_tensor **x,
                                     const int32_t **labels, int *batch_size);

/* ---- Text corpora: byte-level tokens (vocabulary 256) ---- */

typedef struct {
    uint8_t *data;         /* the whole corpus, n bytes                       */
    size_t n;
    size_t train_end;      /* bytes [0, train_end) train, [train_end, n) are the
                              held-out validation text                        */
    char source[256];      /* what was loaded (path)                          */
} actc_text_corpus;

/* Load a text file, or every regular file below a directory (sorted by path,
 * concatenated).  The last val_fraction of the bytes (0 < f < 1), moved
 * forward to the next line start, is held out for validation.  Errors name
 * the path: missing (ACTC_ERR_IO), empty (ACTC_ERR_FORMAT). */
ACTC_API actc_status actc_text_load(const char *path, double val_fraction, actc_text_corpus *out);
ACTC_API void actc_text_free(actc_text_corpus *c);
/* B windows of T+1 consecutive bytes (inputs and next-byte targets) from the
 * train (split 0) or validation (split 1) part into ids[B*(T+1)], at offsets
 * that are a pure function of (seed, step).  ACTC_ERR_INVALID, naming the
 * sizes, when the part is shorter than T+1 bytes. */
ACTC_API actc_status actc_text_batch(const actc_text_corpus *c, int split, int B, int T, uint64_t seed,
                                     uint64_t step, int32_t *ids);

/* ---- Graphs: full-batch node classification ---- */

/* A graph with node features, labels and a split, ready for the graph
 * models: adj is A + I (the edges made symmetric, self-loops added,
 * duplicates merged), adj_t its transpose, norm GCN's weights over adj's
 * entries.  x is [n, n_features] (an actc tensor in SCRATCH, not trained). */
typedef struct actc_graph {
    int n, n_features, n_classes;
    int64_t n_edges;       /* undirected edges of the input, after merging,
                              self-loops not counted                           */
    actc_csr adj, adj_t;
    float *norm;           /* [adj.nnz]                                        */
    actc_tensor *x;        /* [n, n_features]                                  */
    int32_t *y;            /* [n] in [0, n_classes)                            */
    int8_t *split;         /* [n]: ACTC_SPLIT_TRAIN, _VAL, _TEST or _NONE     */
    char source[256];      /* where it came from                               */
} actc_graph;

enum { ACTC_SPLIT_NONE = -1, ACTC_SPLIT_TRAIN = 0, ACTC_SPLIT_VAL = 1, ACTC_SPLIT_TEST = 2 };

/* Build a graph from n nodes' features x [n * n_features], labels y (in
 * [0, n_classes)), split (per node, the enum above) and m undirected edges
 * src[e] - dst[e] (any order, either direction; duplicates and self-loops
 * are merged).  Copies everything.  ACTC_ERR_INVALID naming the first
 * problem: n < 1, n_features < 1, n_classes < 1, an edge to a node outside
 * [0, n) (the edge's number and the index), a label outside
 * [0, n_classes), a split value outside the enum, no training node.  Every
 * graph the library hands out (file, generators) obeys the same rules. */
ACTC_API actc_status actc_graph_new(int n, int n_features, int n_classes, const float *x, const int32_t *y,
                                    const int8_t *split, int64_t m, const int32_t *src, const int32_t *dst,
                                    actc_graph **out);
ACTC_API void actc_graph_free(actc_graph *g);
/* The graph file (docs/graphs.md): magic "ACTCGRPH", version, n,
 * n_features, n_classes, m, then features (f32), labels (i32), split (i8),
 * edges (i32 pairs), little-endian, and a CRC-32 of all that came before.
 * Load refuses anything malformed (ACTC_ERR_FORMAT or ACTC_ERR_IO naming
 * the file and the problem: bad magic or version, a size that disagrees
 * with the header, the CRC, then actc_graph_new's rules), never crashes,
 * and checks the header against the file's size before allocating.  Save
 * writes each undirected edge once (adj's entries below the diagonal), so a
 * saved graph loads back identical. */
ACTC_API actc_status actc_graph_load(const char *path, actc_graph **out);
ACTC_API actc_status actc_graph_save(const actc_graph *g, const char *path);
/* Nodes per split: counts[0..2] = train, validation, test. */
ACTC_API void actc_graph_split_counts(const actc_graph *g, int counts[3]);
/* Redraw the split: a permutation of the nodes by seed, the first n_train
 * train, the next n_val validation, every other node test.  A pure function
 * of (n, n_train, n_val, seed).  ACTC_ERR_INVALID, the split unchanged,
 * unless n_train >= 1, n_val >= 0 and n_train + n_val <= n. */
ACTC_API actc_status actc_graph_resplit(actc_graph *g, int n_train, int n_val, uint64_t seed);

/* A planted-partition graph (stochastic block model) for tests and scale
 * runs: n nodes in `classes` equal blocks (node i in block i % classes,
 * its label), about n * degree / 2 edges (round(n * degree / 2) drawn,
 * duplicates merged) of which a fraction p_in join nodes of the same block,
 * features a noisy one-hot of the block (the first `classes` of n_features
 * >= classes columns, Gaussian noise of std `noise` on all), split n_train
 * / n_val / rest as actc_graph_resplit by seed.  Pure function of the
 * options, at any thread count.  ACTC_ERR_INVALID naming a bad option
 * (o NULL: the defaults). */
typedef struct {
    int n, classes, n_features;
    double degree, p_in, noise;
    int n_train, n_val;
    uint64_t seed;
} actc_sbm_opts;
ACTC_API actc_sbm_opts actc_sbm_default_opts(void);
ACTC_API actc_status actc_graph_sbm(const actc_sbm_opts *o, actc_graph **out);

/* The k-nearest-neighbour graph of images, the parts concatenated (all of
 * the same c x h x w): cosine similarity of the raw pixels, each image
 * joined to its k most similar others (1 <= k < n; ties to the lower
 * index; an all-zero image has similarity 0 to everything), the edges made
 * symmetric (every degree >= k); features the pixels scaled to [0, 1],
 * labels the images', n_classes 1 + the largest.  Split by seed 0:
 * min(1000, n / 3) train (at least 1), min(1000, n / 3) validation, the
 * rest test (actc_graph_resplit for another).  Dense similarity blocks
 * through sgemm (a block of rows at a time, never n x n), threaded. */
ACTC_API actc_status actc_graph_knn_images(const actc_image_dataset *const *parts, int n_parts, int k,
                                           actc_graph **out);
/* The default graph: Fashion-MNIST's 70,000 images (train then test) from
 * dir (NULL: the Debian package's), k = 10, split by seed 0 into 1,000
 * train, 1,000 validation and 68,000 test nodes.  Cached in the graph file
 * cache (built and saved there when missing, through a temporary file
 * renamed into place, the directory created; NULL: no cache).  A cache that
 * is not this graph (size, classes, split) is ACTC_ERR_FORMAT. */
ACTC_API actc_status actc_graph_fashion_mnist(const char *dir, const char *cache, actc_graph **out);

/* ---- Data sources: the batches of an epoch ---- */

/* A data source hands out the batches of an epoch by index, as a pure
 * function of (epoch, index, step), so a resumed run sees the same batches.
 * The batch's memory belongs to the source and stays valid until the next
 * actc_source_get on it or actc_source_free. */
typedef struct actc_source actc_source;
/* Batches of `batch` images of d (o as actc_loader_new's: normalisation,
 * augmentation, shuffling by epoch); drop_last drops a final partial batch.
 * d must outlive the source. */
ACTC_API actc_status actc_source_images(const actc_image_dataset *d, int batch, int drop_last, const actc_loader_opts *o,
                                        actc_source **out);
/* Language-model training: B random windows of T + 1 bytes of the train
 * part of c per batch (inputs and next-byte targets), drawn from (seed,
 * step) as actc_text_batch does; an epoch is `batches` batches.  c must
 * outlive the source. */
ACTC_API actc_status actc_source_text(const actc_text_corpus *c, int B, int T, uint64_t seed, int batches,
                                      actc_source **out);
/* Language-model validation: n = tokens / T windows (tokens 0: every T
 * bytes, so each held-out byte but the first is predicted once) spread
 * evenly over the validation part of c, first at its start, last at its
 * end, in batches of up to B windows. */
ACTC_API actc_status actc_source_text_eval(const actc_text_corpus *c, int T, uint64_t tokens, int B, actc_source **out);
/* Full-batch node classification: one batch per epoch, the whole graph g
 * (x its features, graph g, ids the nodes of `split` ascending, B their
 * count, T 1, labels theirs).  ACTC_ERR_INVALID for a split other than
 * ACTC_SPLIT_TRAIN, _VAL or _TEST or one that selects no node.  g must
 * outlive the source (its split is read once, here). */
ACTC_API actc_status actc_source_graph(const actc_graph *g, int split, actc_source **out);
/* Your own data: get fills *b with batch `index` of `epoch` (step: the
 * trainer's global step); `batches` per epoch. */
typedef actc_status (*actc_source_get_fn)(void *user, uint64_t epoch, uint64_t index, uint64_t step,
                                          actc_batch *b);
ACTC_API actc_status actc_source_custom(actc_source_get_fn get, void *user, int batches, actc_source **out);
ACTC_API void actc_source_free(actc_source *s);
/* Batches per epoch. */
ACTC_API int actc_source_batches(const actc_source *s);
/* Batch `index` (0 <= index < actc_source_batches) of `epoch` into *b. */
ACTC_API actc_status actc_source_get(actc_source *s, uint64_t epoch, uint64_t index, uint64_t step, actc_batch *b);

/* Bits per byte of the validation part of c under the train part's byte
 * frequencies (add-one smoothed): the bar a language model must get under. */
ACTC_API double actc_text_unigram_bpb(const actc_text_corpus *c);

/* ------------------------------------------------------------------------ */
/* Trainer: the training step, evaluation and checkpoints of a whole run     */
/* ------------------------------------------------------------------------ */

/* A trainer owns an engine context with the policy, the optimizer and the
 * GACT controller of a model it does not own.  One step is: forward, loss
 * (mean cross-entropy against the batch's labels, or the loss a user
 * forward returns), backward (through actc_controller_iterate, which under a
 * gact: policy measures sensitivities first when due), the hooks, gradient
 * clipping, the optimizer update.  With accum > 1 the batch runs as accum
 * micro-batches (sizes ceil(N / accum), the last one smaller) whose
 * gradients add up to the whole batch's: only one micro-batch's
 * activations are alive at a time.  The trainer tracks its position (global
 * step, epoch, batch in the epoch) and saves and loads the whole training
 * state (actc_trainer_save). */
typedef struct actc_trainer actc_trainer;

typedef struct {
    const char *policy;        /* compression policy spec ("none")              */
    const char *optim;         /* "sgd" (default) or "adamw"                    */
    float lr;                  /* peak learning rate; 0: the optimizer's default
                                  (sgd 0.1, adamw 1e-3)                         */
    float momentum;            /* sgd momentum (0.9)                            */
    int nesterov;              /* sgd Nesterov momentum (1; off when momentum 0) */
    float weight_decay;        /* < 0: the optimizer's default (sgd 5e-4 as L2,
                                  adamw 0.01 decoupled)                         */
    float beta1, beta2, eps;   /* adamw (0.9, 0.999, 1e-8)                      */
    actc_lr_schedule schedule; /* kind, min_lr, warmup_steps, total_steps,
                                  step_size, gamma (constant, no warm-up); its
                                  base_lr is taken from lr                      */
    float clip;                /* clip the gradients' global L2 norm; 0 = off   */
    int accum;                 /* micro-batches per step (1)                    */
    uint64_t seed;             /* dropout and stochastic-rounding streams (1)   */
    actc_controller_opts controller; /* gact: measurement interval, samples, alert */
    int grad_bits;             /* 8: hold each parameter's gradient in AGoQ's
                                  8-bit block-wise form between micro-batches
                                  (actc_param_set_grad_codec "dyn8"); 32 or 0:
                                  leave the parameters' gradient forms alone  */
} actc_trainer_opts;

/* The defaults above. */
ACTC_API actc_trainer_opts actc_trainer_default_opts(void);
/* The recipe for a model family (model: a name actc_model_create takes;
 * NULL or unknown: an image classifier's), the one `actc train` uses: the
 * defaults above with a cosine schedule after 50 warm-up steps, and
 *   language models (actc_model_name_takes_tokens): adamw, beta2 0.99,
 *     clip 1 (short runs on few tokens per step, as nanoGPT's
 *     character-level set-up);
 *   graph networks (actc_model_name_takes_graph): adamw at lr 0.01 and
 *     weight decay 5e-4 (the GCN and GAT papers'), a constant rate, no
 *     warm-up.
 * lr and weight decay are otherwise left to the optimizer's defaults;
 * schedule.total_steps is the caller's (epochs x batches per epoch). */
ACTC_API actc_trainer_opts actc_trainer_opts_for_model(const char *model);
/* Check o (NULL: the defaults) as actc_trainer_new does, policy spec
 * included, without a model: ACTC_ERR_INVALID naming the first bad option,
 * so that a command can refuse a configuration before it loads data. */
ACTC_API actc_status actc_trainer_check_opts(const actc_trainer_opts *o);
/* A trainer for model m (which must outlive it).  Checks every option
 * (unknown policy or optimizer, lr, betas, min_lr above lr...) and fails
 * with ACTC_ERR_INVALID naming it.  o NULL: the defaults.  The option
 * strings are copied. */
ACTC_API actc_status actc_trainer_new(actc_model *m, const actc_trainer_opts *o, actc_trainer **out);
ACTC_API void actc_trainer_free(actc_trainer *t);
/* The trainer's options (lr and weight decay resolved; strings its own). */
ACTC_API const actc_trainer_opts *actc_trainer_get_opts(const actc_trainer *t);
ACTC_API actc_model *actc_trainer_model(actc_trainer *t);
/* The engine context (policy, seed, store statistics), the optimizer and
 * the controller the trainer uses. */
ACTC_API actc_ctx *actc_trainer_ctx(actc_trainer *t);
ACTC_API actc_optim *actc_trainer_optim(actc_trainer *t);
ACTC_API actc_controller *actc_trainer_controller(actc_trainer *t);

typedef struct {
    double loss;               /* mean loss of the batch                        */
    long correct;              /* rows whose argmax is the label                */
    long rows;                 /* rows the loss averages over (0 for a loss a
                                  user forward returned)                        */
    int samples;               /* samples of the batch                          */
    float lr;                  /* learning rate of this step                    */
    float grad_norm;           /* global gradient norm before clipping (0 when
                                  clipping is off)                              */
    int adapted;               /* the controller measured and re-allocated bits */
    double forward_s, backward_s, update_s; /* time of the kept pass's forward
                                  (loss included) and backward, and of
                                  clipping plus the update                      */
    double codec_forward_s, codec_backward_s; /* of forward_s and backward_s:
                                  the store's codecs (encode and decode; in
                                  backward also a recompute's encodes)          */
    double measure_s;          /* time of the controller's sensitivity passes  */
} actc_step_result;

/* One training step on b.  On failure (out of memory or budget, a NaN or
 * infinite loss, a bad batch) nothing has been updated, the step count
 * stays, and the error names the step.  r may be NULL.  The first step on
 * micro-batches of a new shape also runs their forward and loss once on a
 * counting context without a policy (actc_ctx_set_counting), for what
 * `none` keeps: the memory report's reference (actc_store_set_reference).
 * That forward keeps nothing, leaves the model's buffers as they were and
 * its timing out of r; a user forward runs one more time then. */
ACTC_API actc_status actc_trainer_step(actc_trainer *t, const actc_batch *b, actc_step_result *r);
/* The step without clipping and update: forward and backward (through the
 * controller, which may measure first), the gradient-complete events and
 * the after-backward hook; the gradients stay in the parameters' .grad and
 * the position does not move.  For measurements (gradient variance) and
 * for loops that update by themselves. */
ACTC_API actc_status actc_trainer_backward(actc_trainer *t, const actc_batch *b, actc_step_result *r);

/* Where the trainer is: steps taken, epochs completed, batches of the
 * current epoch done. */
ACTC_API uint64_t actc_trainer_steps(const actc_trainer *t);
ACTC_API uint64_t actc_trainer_epoch(const actc_trainer *t);
ACTC_API uint64_t actc_trainer_batch_in_epoch(const actc_trainer *t);
/* Move the position (e.g. to skip ahead); the optimizer state stays. */
ACTC_API void actc_trainer_set_position(actc_trainer *t, uint64_t step, uint64_t epoch, uint64_t batch_in_epoch);

/* What actc_trainer_train_epoch tells its callback after every step. */
typedef struct {
    uint64_t step;             /* steps taken so far (this one included)        */
    uint64_t epoch;            /* 0-based epoch                                 */
    int batch, batches;        /* 1-based batch just done, batches per epoch    */
    const actc_step_result *last;
    double loss;               /* mean loss since this call began               */
    double accuracy;           /* mean accuracy since this call began           */
    long samples;              /* samples since this call began                 */
    long rows;                 /* rows of logits since this call began (tokens
                                  for a language model, samples for images)     */
    double seconds;            /* since this call began                         */
} actc_progress;
/* Return non-zero to stop after this step (the position is kept). */
typedef int (*actc_progress_fn)(actc_trainer *t, const actc_progress *p, void *user);

typedef struct {
    double loss, accuracy;     /* means over the steps this call ran            */
    long samples, rows;
    int steps;                 /* steps run                                     */
    int finished;              /* 1: the epoch ended (position moved to the next
                                  epoch); 0: the callback stopped it            */
    double seconds;            /* training time (evaluation not included)      */
    double forward_s, backward_s, update_s, measure_s; /* the steps' actc_step_result
                                  times, summed over the steps this call ran   */
    double codec_forward_s, codec_backward_s; /* likewise                     */
} actc_epoch_result;

/* Train from the current position to the end of the epoch on src (its
 * batches in order, from actc_trainer_batch_in_epoch), calling fn (may be
 * NULL) after every step.  Resets the allocator's and the store's peaks
 * first, and snapshots the memory statistics at the end (the report's
 * figures: "peaks over the epoch").  r may be NULL. */
ACTC_API actc_status actc_trainer_train_epoch(actc_trainer *t, actc_source *src, actc_progress_fn fn, void *user,
                                              actc_epoch_result *r);

typedef struct {
    double loss;               /* mean loss over every row                      */
    double accuracy;           /* share of rows whose argmax is the label       */
    long rows, samples;
} actc_eval_result;
/* Mean loss and accuracy of m over one epoch of src in eval mode (running
 * statistics, no dropout, nothing saved).  ctx is any context (its
 * training flag is restored). */
ACTC_API actc_status actc_evaluate(actc_model *m, actc_ctx *ctx, actc_source *src, actc_eval_result *r);
/* The same with the trainer's model and context. */
ACTC_API actc_status actc_trainer_evaluate(actc_trainer *t, actc_source *src, actc_eval_result *r);

/* Hooks.  after_backward runs once per step after the kept backward pass
 * (all micro-batches done), before clipping and the update.  grad_complete
 * runs for each parameter as soon as its gradient for the step is final:
 * during the last micro-batch's backward, as backward leaves the last
 * operator that uses it (reverse topological order), and, for parameters
 * the step did not reach, after backward in parameter order; once per
 * parameter per step, never during the controller's measuring passes.
 * index is the parameter's position in actc_model_params.  A non-OK
 * status fails the step.  fn NULL removes the hook. */
typedef actc_status (*actc_param_hook_fn)(actc_trainer *t, actc_tensor *param, int index, void *user);
typedef actc_status (*actc_step_hook_fn)(actc_trainer *t, void *user);
ACTC_API void actc_trainer_on_grad_complete(actc_trainer *t, actc_param_hook_fn fn, void *user);
ACTC_API void actc_trainer_on_after_backward(actc_trainer *t, actc_step_hook_fn fn, void *user);

/* Data parallelism: the trainer as one of g->size processes that train one
 * model together (the dist layer below sets this up over MPI; a program
 * with a transport of its own can too).  Every process is given the same
 * global batch; each step runs rows [rank N / size, (rank + 1) N / size) of
 * it (shares differ by at most one row), its gradient scaled by its rows /
 * N, so that the sum of the processes' gradients, which the grad-complete
 * and after-backward hooks must form, is the batch's mean gradient.  The
 * step's loss, accuracy and counts are the whole batch's (added up with
 * g->sum, a blocking sum of n doubles over the processes, which every
 * process calls at the same point of every step and evaluation; a non-OK
 * status fails the step).  Evaluation runs batches rank, rank + size, ...
 * and adds the results up.  The context's stream becomes rank
 * (actc_ctx_set_stream).  A batch of fewer samples than processes fails
 * the step with ACTC_ERR_INVALID.  g NULL or g->size 1: one process. */
typedef struct {
    int rank, size;
    actc_status (*sum)(double *v, int n, void *user);
    void *user;
} actc_trainer_group;
ACTC_API actc_status actc_trainer_set_group(actc_trainer *t, const actc_trainer_group *g);

/* Pipeline stages: the model is cut into P stages of contiguous blocks
 * (actc_model_opts.first_block, n_blocks), each trained by its own
 * process, and every step's micro-batches (actc_trainer_opts.accum, at
 * least P) flow through them: stage s runs a micro-batch's forward on the
 * hidden states stage s - 1 sent, sends its own to s + 1, and later runs
 * its backward from the gradient s + 1 sent back, sending its input's
 * gradient to s - 1.  The order of a stage's forwards and backwards is a
 * schedule, as data: */
typedef enum {
    ACTC_PIPE_1F1B = 0,   /* one forward, one backward (PipeDream-Flush,
                             Megatron-LM's default): stage s runs P - 1 - s
                             forwards first, then alternates, and holds at
                             most min(P - s, M) micro-batches            */
    ACTC_PIPE_GPIPE = 1   /* all M forwards, then all M backwards (GPipe):
                             every stage holds all M                     */
} actc_pipe_schedule;
/* One operation of a schedule: the forward or the backward of micro-batch
 * micro. */
typedef struct {
    int backward, micro;
} actc_pipe_op;
/* Stage stage's 2 M operations for stages stages and M micro-batches into
 * ops (2 M entries) and the most micro-batches it holds at once (forwarded,
 * backward not yet run) into *peak (may be NULL).  Backwards run in
 * micro-batch order on every stage, as one process accumulates them. */
ACTC_API actc_status actc_pipe_ops(actc_pipe_schedule schedule, int stage, int stages, int micro, actc_pipe_op *ops,
                                   int *peak);
/* How P stages split transformer `name` (gpt, llama and their presets)
 * under options o: stage s gets blocks [first_block[s], first_block[s] +
 * n_blocks[s]) (arrays of P), at least one each, the embedding on stage 0
 * and the final norm and head on stage P - 1 (with a tied head's copy of
 * the embedding), the largest stage's parameters as few as a contiguous
 * split allows.  P over the model's blocks is ACTC_ERR_INVALID. */
ACTC_API actc_status actc_pipe_layout(const char *name, const actc_model_opts *o, int stages, int *first_block,
                                      int *n_blocks);
/* The bubble of a schedule: the fraction of a step a stage idles when
 * every forward and backward of a micro-batch takes the same time, (P - 1)
 * / (M + P - 1) for 1F1B and GPipe. */
ACTC_API double actc_pipe_bubble(actc_pipe_schedule schedule, int stages, int micro);

/* The trainer as stage `stage` of `stages` (its model that stage's part),
 * with a transport of its own (src/dist sets one up over MPI).  Messages:
 * a micro-batch's hidden states forward and their gradient backward, n
 * floats each, tagged 2 k (forward) or 2 k + 1 (backward) for micro-batch
 * k; start begins one (send 1: from buf to stage peer; 0: into buf from
 * it) and gives a request that wait completes (buf stays the trainer's
 * until then).  sum adds n doubles over the stages (blocking): the step's
 * loss and counts (the last stage's), the gradients' squared norm for
 * clipping.  shared[0..n_shared) are parameters (indices of
 * actc_model_params) whose gradient is summed with another stage's copy
 * (a tied embedding) by share, blocking, after backward; shared_counted:
 * this stage counts them in the norm (exactly one copy must).  Evaluation
 * runs every batch through the stages.  Every stage sets its pipe
 * together: the call sums each stage's load (actc_ctx_set_stage) with
 * sum.  p NULL or p->stages 1: no pipeline. */
typedef struct {
    int stage, stages;
    actc_pipe_schedule schedule;
    actc_status (*start)(int send, float *buf, size_t n, int peer, int tag, void **req, void *user);
    actc_status (*wait)(void *req, void *user);
    actc_status (*sum)(double *v, int n, void *user);
    const int *shared;
    int n_shared, shared_counted;
    actc_status (*share)(float *g, size_t n, void *user);
    void *user;
} actc_trainer_pipe;
ACTC_API actc_status actc_trainer_set_pipe(actc_trainer *t, const actc_trainer_pipe *p);
/* What a pipeline stage measured over the current epoch's steps (reset
 * when an epoch starts; the controller's measuring passes left out). */
typedef struct {
    uint64_t steps;
    int held_peak;            /* most micro-batches held at once (forward
                                 run, backward not yet)                      */
    size_t micro_context;     /* what one micro-batch's forward left in the
                                 store (the last step's first micro-batch)   */
    double compute_s;         /* forwards and backwards, waits left out      */
    double pass_s;            /* the passes' whole time: 1 - compute / pass is
                                 the stage's idle (bubble) fraction          */
} actc_pipe_stats;
ACTC_API void actc_trainer_pipe_stats(const actc_trainer *t, actc_pipe_stats *s);

/* ------------------------------------------------------------------------ */
/* Data parallelism over MPI (src/dist)                                       */
/* ------------------------------------------------------------------------ */

/* N processes (ranks, started by mpirun) train one model: every rank holds
 * the whole model, runs its share of each batch (actc_trainer_set_group),
 * and the gradients are summed across ranks during backward, in buckets,
 * with non-blocking MPI collectives started as soon as a bucket's
 * gradients are complete, so that communication overlaps the rest of
 * backward (as PyTorch's DistributedDataParallel does).  Each rank then
 * steps an identical optimizer on identical gradients: the replicas stay
 * bit-identical.  The library is built with MPI when CMake finds it (Open
 * MPI: Debian's libopenmpi-dev); without it the functions below fail with
 * ACTC_ERR_STATE, except actc_dist_available and actc_dist_launched.
 *
 * A rank that fails (a bad file, the memory budget, a NaN loss) must end
 * the job: the others would wait for it in the next collective.  The actc
 * command calls MPI_Abort after printing the error; a program of its own
 * does the same. */
typedef struct actc_dist actc_dist;

/* 1 if the library was built with MPI. */
ACTC_API int actc_dist_available(void);
/* The number of processes mpirun (Open MPI, MPICH or a PMI launcher)
 * started this one among, from the environment; 0 when not started by a
 * launcher.  Needs no MPI. */
ACTC_API int actc_dist_launched(void);
/* A handle on the communicator *(const MPI_Comm *)comm (duplicated; NULL:
 * MPI_COMM_WORLD).  Initialises MPI if the program did not, with
 * MPI_THREAD_FUNNELED: actc calls MPI only from the thread that runs the
 * trainer, which must then be the thread that initialised MPI (a program
 * that trains on another thread initialises MPI itself, with at least
 * MPI_THREAD_SERIALIZED), and finalises it in actc_dist_free.  Errors of
 * MPI calls on the handle's communicators come back as ACTC_ERR_COMM with
 * MPI's message (a failure inside MPI_Init is MPI's to report).
 *
 * Collective: every rank calls actc_dist_new, actc_dist_attach,
 * actc_dist_same and actc_dist_allreduce, and with a trainer attached
 * every step and actc_trainer_evaluate, in the same order (a progress
 * callback's decision to stop must be the same on every rank).  The
 * ranks' backward passes must reach the same parameters with the same
 * gradient forms (every built-in model does; a custom model whose forward
 * skips parameters depending on its data must not). */
ACTC_API actc_status actc_dist_new(const void *comm, actc_dist **out);
ACTC_API void actc_dist_free(actc_dist *d);
/* The longest a rank waits for one exchange (default ACTC_DIST_TIMEOUT_S,
 * 10 minutes; 0 or less: no limit).  Past it the rank pings every other
 * rank on a communicator of its own (a rank answers from any of its
 * waits) and the call fails with ACTC_ERR_COMM naming those that did not
 * answer within 5 s (stopped, hung, or computing longer than the limit:
 * it must exceed a step); the handle is then broken and the job must end.
 * Without it, one rank stopped (SIGSTOP) would hang every other. */
#define ACTC_DIST_TIMEOUT_S 600.0
ACTC_API void actc_dist_set_timeout(actc_dist *d, double seconds);
ACTC_API int actc_dist_rank(const actc_dist *d);
ACTC_API int actc_dist_size(const actc_dist *d);

/* How gradients travel. */
typedef struct {
    int grad_comm;             /* 32: MPI_Iallreduce of fp32 (the default);
                                  8: AGoQ's all-reduce: each rank quantizes
                                  the bucket with the 8-bit block-wise dynamic
                                  map (blocks of 256, one fp32 absmax each),
                                  an all-to-all gives rank r every rank's
                                  codes of its share of whole blocks, r
                                  decodes and sums them in fp32 with its own
                                  values exact, requantizes, and an
                                  all-gather gives every rank every share.
                                  The last block of a bucket holds the rest
                                  (its absmax covers only it); ranks beyond
                                  the number of blocks get an empty share.  */
    size_t bucket_bytes;       /* fp32 gradient bytes per bucket (0: 25 MiB)  */
} actc_dist_opts;
ACTC_API actc_dist_opts actc_dist_default_opts(void);

/* Make t (whose model every rank built alike) a data-parallel replica:
 * checks that every rank's model has the same shapes and the trainer the
 * same position (step, epoch, batch; after a resume), broadcasts the
 * parameters and buffers from rank 0, sets the trainer's group and
 * installs its grad-complete and after-backward hooks (replacing any).
 * Buckets: the parameters in reverse order (about the order backward
 * completes them) cut into runs of bucket_bytes; bucket k starts after
 * buckets 0..k-1, so that every rank issues the same collectives in the
 * same order.  A low-rank gradient (CompAct) travels as its factor, an
 * encoded one (--grad-bits 8) decoded to fp32 and comes back re-encoded;
 * a parameter no rank's backward reached keeps no gradient.  Communication
 * buffers are allocated in ACTC_MEM_COMM.  One trainer per handle; d must
 * outlive t's training. */
ACTC_API actc_status actc_dist_attach(actc_dist *d, actc_trainer *t, const actc_dist_opts *o);
/* Undo actc_dist_attach (hooks and group off, buckets freed): before
 * actc_trainer_free when the handle lives on.  actc_dist_free detaches too,
 * so the trainer must outlive an attached handle or be detached first.  NULL
 * or a detached handle: nothing. */
ACTC_API void actc_dist_detach(actc_dist *d);
/* After a step that failed on this rank with gradient exchanges in flight
 * the handle is broken: every later step fails with ACTC_ERR_COMM, and
 * actc_dist_free leaves MPI as it is (MPI cannot cancel a collective, and
 * finalising would wait for the other ranks).  The program must end the
 * job (MPI_Abort).  A step that failed alike on every rank before any
 * exchange started leaves the handle usable. */
/* ACTC_ERR_COMM on every rank unless all ranks passed the same n bytes
 * (what names them in the message: "the command line"...). */
ACTC_API actc_status actc_dist_same(actc_dist *d, const void *data, size_t n, const char *what);
/* Sum x[0..n) over the ranks in place, blocking: bits 32 with
 * MPI_Allreduce, bits 8 with the 8-bit all-reduce above (every rank gets
 * the same result). */
ACTC_API actc_status actc_dist_allreduce(actc_dist *d, float *x, size_t n, int bits);

/* Checkpoints of a data-parallel run.  actc_dist_save: collective; rank 0
 * writes t's checkpoint to path (actc_trainer_save; the other ranks do not
 * use path) and, when the policy learns per rank (actc_ctx_policy_learns:
 * each rank learns from its own rows, so the ranks' states differ), the
 * other ranks' learnt states beside its own.  Rank 0 returns the write's
 * status, the others ACTC_OK once their state is sent.  actc_dist_resume:
 * after actc_trainer_load(t, path) on every rank and actc_dist_attach,
 * each rank takes back its own learnt state when path holds the states of
 * as many ranks as d has (*applied = 1, on every rank alike: the resumed
 * run is the uninterrupted one bit for bit); *applied = 0 when it holds
 * none (a policy that learns nothing, or a file written by one process or
 * by actc_trainer_save) or was written by another number of ranks: every
 * rank then keeps rank 0's state.  Not collective (every rank reads the
 * file). */
ACTC_API actc_status actc_dist_save(actc_dist *d, const char *path);
ACTC_API actc_status actc_dist_resume(actc_dist *d, const char *path, int *applied);

typedef struct {
    int ranks, rank, grad_comm, buckets;
    uint64_t steps;            /* steps communicated                          */
    size_t floats;             /* gradient floats per step (a low-rank one's
                                  factor counted; in 8 bits each parameter
                                  rounded up to whole blocks of 256, so that
                                  no block mixes two parameters)              */
    size_t fp32_floats;        /* the same at the parameters' dense shapes   */
    size_t bytes_sent;         /* bytes this rank sends per step: for 8 bits
                                  its all-to-all payload and its own share to
                                  each other rank in the all-gather (what the
                                  all-gather's algorithm relays is MPI's); for
                                  fp32 what a ring all-reduce sends, 2 (P-1) /
                                  P x 4 x floats (MPI picks its algorithm)    */
    double comm_s;             /* last step: first bucket started to last one
                                  done and unpacked                           */
    double exposed_s;          /* last step: after backward ended, waiting for
                                  the buckets and unpacking them              */
    double total_comm_s, total_exposed_s; /* over all steps                   */
} actc_dist_stats;
ACTC_API void actc_dist_get_stats(const actc_dist *d, actc_dist_stats *s);

/* Pipeline stages over MPI.  The N ranks of a handle form a grid of P
 * stages x N / P replicas: rank r is stage r / (N / P) and replica r %
 * (N / P).  Each rank builds its stage's part of the model
 * (actc_pipe_layout, actc_model_opts.first_block and n_blocks), makes a
 * trainer of it, attaches the stage's replicas handle for data parallelism
 * when there are several (actc_dist_attach(actc_pipe_replicas(p), t, ...)),
 * then actc_pipe_attach.  Collective over world (actc_pipe_new) and over
 * the replica's stages (actc_pipe_attach, every step, evaluation).  N not a
 * multiple of P is ACTC_ERR_INVALID on every rank. */
typedef struct actc_pipe actc_pipe;
ACTC_API actc_status actc_pipe_new(actc_dist *world, int stages, actc_pipe **out);
ACTC_API void actc_pipe_free(actc_pipe *p);
ACTC_API int actc_pipe_stage(const actc_pipe *p);
ACTC_API int actc_pipe_stages(const actc_pipe *p);
/* Sum v[0..n) over this replica's stages, blocking (every stage calls it:
 * rank 0 gathers the stages' figures with it, each filling its own). */
ACTC_API actc_status actc_pipe_sum(actc_pipe *p, double *v, int n);
/* The handle on this stage's replicas, NULL when the stage has one. */
ACTC_API actc_dist *actc_pipe_replicas(actc_pipe *p);
/* Make t (over this stage's part) stage actc_pipe_stage(p) under the
 * schedule: the trainer's transport over MPI (non-blocking point-to-point
 * messages on the replica's stages), the parameters the first and last
 * stage both hold (the tied embedding of gpt) found by name and their
 * gradients summed between them after backward (their gradients must be
 * held in fp32: grad_bits 32).  actc_pipe_free detaches the trainer (free
 * the pipe before the trainer). */
ACTC_API actc_status actc_pipe_attach(actc_pipe *p, actc_trainer *t, actc_pipe_schedule schedule);
/* Checkpoints of a pipeline.  actc_pipe_save: collective (every rank);
 * stage 0 of replica 0 writes one file of the whole model, as one process
 * would (its optimizer state, position, recipe), filled from every stage
 * by name, with each stage's learnt policy state (stage 0's where one
 * process keeps its own, the others' beside it); it holds the whole model
 * and optimizer in memory while it writes.  That rank returns the write's
 * status, the others ACTC_OK once their part is sent.  Any run loads the
 * file: one process as it loads any checkpoint, a pipeline stage by
 * actc_trainer_load on its part (its tensors by name) then
 * actc_pipe_resume, which gives each stage its own learnt state back when
 * the file was written by as many stages (*applied = 1: the same layout,
 * so the run goes on bit for bit; with several replicas per stage, a
 * policy that learns continues on every replica from replica 0's state,
 * as a data-parallel resume on another rank count does); otherwise
 * (*applied = 0), as in one
 * process loading it, a policy that learns (actc_ctx_policy_learns)
 * starts learning afresh: each stage's state is about its own tensors.
 * Weights, optimizer state and position load exactly either way. */
ACTC_API actc_status actc_pipe_save(actc_pipe *p, const char *path);
ACTC_API actc_status actc_pipe_resume(actc_pipe *p, const char *path, int *applied);

/* ------------------------------------------------------------------------ */
/* Memory report                                                              */
/* ------------------------------------------------------------------------ */

enum { ACTC_REPORT_TEXT = 0, ACTC_REPORT_JSON = 1 };
/* The memory table (per-category peaks, the allocator's total peak, the
 * context before backward against what `none` keeps for the same step, by
 * kind, with the ratio (actc_context_ratio), the context's peak during
 * backward, the process peak RSS) as text lines
 * or one JSON object (no newline), into buf (cap bytes, always
 * NUL-terminated when cap > 0).  Returns the length the whole report needs
 * (excluding the NUL), as snprintf does. */
ACTC_API int actc_memory_report(const actc_mem_stats *ms, const actc_store_stats *ss, int format, char *buf, size_t cap);
/* The same for the trainer's last epoch snapshot (or now, before any). */
ACTC_API int actc_trainer_report(const actc_trainer *t, int format, char *buf, size_t cap);
/* The same written to f. */
ACTC_API actc_status actc_trainer_report_file(const actc_trainer *t, int format, FILE *f);
/* The controller's tensor table (actc_controller_tensors: GACT's per-tensor
 * sensitivity and bits) written to f: as text, a row per tensor (scope,
 * operator, shape, c_l, bits, stored and fp32 bytes) and a line of totals
 * with V(b); as JSON, an array (no newline) of {"scope", "op", "shape"
 * ("AxBxC"), "c", "bits", "stored", "fp32"}.  An empty table (another
 * policy, c NULL) is the header and totals, or []. */
ACTC_API actc_status actc_controller_report_file(const actc_controller *c, int format, FILE *f);
/* The context ratio of the store statistics: context_none / context_bytes,
 * how many times smaller the context before backward is than what `none`
 * keeps for the same step; without a reference (context_none 0),
 * context_fp32 / context_bytes (the same saves in fp32).  0 if no backward
 * began with anything stored. */
ACTC_API double actc_context_ratio(const actc_store_stats *ss);

/* ------------------------------------------------------------------------ */
/* A run's log: JSON lines                                                    */
/* ------------------------------------------------------------------------ */

/* The records `actc train --log FILE` appends, one JSON object per line,
 * each flushed at once (a run that dies keeps every record before it).
 * Each actc_log_ call writes one record to f and returns ACTC_ERR_IO when
 * writing fails (f's error indicator set, by this write or an earlier one),
 * ACTC_ERR_INVALID for a NULL argument.  Names are JSON strings; a
 * non-finite figure prints as nan or inf, which JSON parsers refuse (a run
 * that diverged fails before its epoch record). */

/* s as a JSON string (quoted, '"', '\\' and control characters escaped;
 * NULL as ""), into f. */
ACTC_API void actc_json_string(FILE *f, const char *s);
/* {"event":"step","epoch":E,"step":S,"loss":L,"lr":R,"UNIT_per_s":X}: the
 * step the progress callback p reports (epoch 1-based; p->last required),
 * rate in unit per second ("samples", "tokens"). */
ACTC_API actc_status actc_log_step(FILE *f, const actc_progress *p, const char *unit, double rate);
/* What an epoch's record holds besides the trainer's own figures. */
typedef struct {
    const char *model;            /* the model's name (required)               */
    int batch;                    /* samples (windows) per step                */
    int seq;                      /* language models: tokens per window (the
                                     record then gives val_bpb and rates in
                                     tokens); 0 otherwise                      */
    const char *eval_name;        /* "val" or "test": what eval measured
                                     (required with eval)                     */
    const actc_eval_result *eval; /* the held-out evaluation; NULL: none       */
    const actc_eval_result *test; /* a second one on test data (graph runs:
                                     the test nodes); NULL: none              */
    const actc_dist_stats *comm;  /* data parallel: this rank's communication;
                                     NULL: one process                        */
} actc_log_epoch_info;
/* {"event":"epoch","epoch":E,"step":S,"model":..,"policy":..,"batch":..,
 * "train_loss":..,"train_acc":.., [EVAL_acc, EVAL_loss,] [val_bpb, seq,]
 * [test_acc, test_loss,] [comm:{..},] "time_ms":{per step: forward, codecs,
 * backward, update, controller}, "samples_per_s"|"tokens_per_s", "seconds",
 * "memory":{actc_trainer_report's JSON}}: the epoch er that t just
 * finished. */
ACTC_API actc_status actc_log_epoch(FILE *f, const actc_trainer *t, const actc_epoch_result *er,
                                    const actc_log_epoch_info *info);
/* {"event":"adapt","step":S,"tensors":[...]}: the controller re-allocated
 * its bits at step S (actc_controller_adapted). */
ACTC_API actc_status actc_log_adapt(FILE *f, const actc_controller *c, uint64_t step);
/* {"event":"variance_alert","step":S,"compression_variance":V,
 * "gradient_variance":G}: the controller's variance alert at step S
 * (actc_controller_take_alert gave one). */
ACTC_API actc_status actc_log_alert(FILE *f, const actc_controller *c, uint64_t step);

/* ------------------------------------------------------------------------ */
/* Largest batch under a memory budget                                       */
/* ------------------------------------------------------------------------ */

/* One trial: 1 if a training step at `batch` fits (*peak: the allocator
 * peak it took), 0 if it ran out of the budget, -1 on any other error
 * (message set). */
typedef int (*actc_trial_fn)(int batch, size_t *peak, void *user);
typedef struct {
    size_t budget;             /* bytes for the whole step (required)          */
    const char *model;         /* a built-in model, shaped by model_opts ...    */
    actc_model_opts model_opts;
    actc_trial_fn trial;       /* ... or your own trial (then model unused)     */
    void *trial_user;
    actc_trainer_opts trainer; /* policy, optimizer (its state counts) ...      */
    int seq;                   /* language models: tokens per window (context)  */
    double graph_degree;       /* graph models: the batch is the number of nodes
                                  of a planted-partition graph of this mean
                                  degree (10), model_opts.in_channels features,
                                  num_classes blocks, 1,000 labelled nodes (or
                                  half of them if fewer)                        */
    int start, limit;          /* first and largest batch tried (1, 65536)      */
    int resolution;            /* stop bisecting within this many (1)           */
} actc_maxbatch_opts;
typedef struct {
    int batch;                 /* largest batch that fits (0: not even start)   */
    size_t peak;               /* its allocator peak                            */
    int failing;               /* smallest failing batch tried (0: none)        */
} actc_maxbatch_result;
/* Called after each trial (may be NULL). */
typedef void (*actc_maxbatch_fn)(int batch, int fits, size_t peak, void *user);
/* Defaults: start 1, limit 65536, resolution 1, default trainer options,
 * default model options. */
ACTC_API actc_maxbatch_opts actc_maxbatch_default_opts(void);
/* The largest batch whose full training step (forward, backward, optimizer
 * step with its state: two steps, the second with everything resident)
 * fits the budget: doubling from start, then bisection.  Built-in models
 * train on synthetic inputs (memory does not depend on the values); for a
 * graph model the batch is the number of nodes of a synthetic graph, built
 * inside the budget (its features and adjacency count).
 * ACTC_ERR_OOM with the reason when not even `start` fits; another error if
 * a step fails for a reason other than memory. */
ACTC_API actc_status actc_maxbatch(const actc_maxbatch_opts *o, actc_maxbatch_fn fn, void *user, actc_maxbatch_result *r);
/* The built-in trial of actc_maxbatch (o->model), for one batch size. */
ACTC_API int actc_maxbatch_try(const actc_maxbatch_opts *o, int batch, size_t *peak);

/* ------------------------------------------------------------------------ */
/* Checkpoints                                                               */
/* ------------------------------------------------------------------------ */

/* A checkpoint file holds a model's parameters and buffers by name with a
 * structured record of the model (family and shape), and optionally the
 * optimizer's state, or with actc_trainer_save the whole training state:
 * recipe (actc_trainer_opts), position (step, epoch, batch), the policy's
 * and the controller's state, the run's own recipe (actc_run_recipe) and
 * a free text for the application.  Files
 * are written to PATH.tmp, fsync'ed and renamed.  The header and its record
 * carry their own CRC-32 (checked before anything is sized from them), the
 * whole file another one (checked before anything is loaded); loading
 * changes nothing unless every check passes.  Versions 2 and 3 (actc 0.1)
 * still load: their model shape and the trainer's options come from their
 * settings text. */

#define ACTC_CKPT_NOTE_MAX 1024
#define ACTC_RECIPE_DATA_MAX 4096

/* A run's own recipe: what a training program decides beyond the model and
 * the trainer's options (how long it trains, on which data, in which
 * windows, and the settings that decide its last bits), so that the
 * program can resume, evaluate or continue the run from its checkpoint
 * alone.  A trainer keeps it (actc_trainer_set_recipe), actc_trainer_save
 * and actc_dist_save write it as a field of the record, actc_checkpoint_info
 * reads it back (actc_ckpt_info.recipe).  The library records it and acts
 * on none of it.  Strings end with a NUL inside their arrays. */
typedef struct {
    int epochs;                /* total epochs of the run                       */
    int batch;                 /* samples (windows) per step                    */
    int seq;                   /* language models: tokens per training window
                                  (0: the model's context)                      */
    int epoch_steps;           /* steps per epoch where the data does not set
                                  it (language and graph models)                */
    uint64_t eval_tokens;      /* language models: validation tokens per
                                  evaluation (0: all)                           */
    int augment;               /* images: random crop and horizontal flip       */
    int limit_train;           /* only the first N training samples (0: all)    */
    char data[ACTC_RECIPE_DATA_MAX]; /* the data, as the program names it
                                  (actc train: "fmnist", "text:PATH", ...)      */
    char split[64];            /* graph models: the split redrawn ("TRAIN:VAL";
                                  "": the graph's own)                          */
    int deterministic;         /* the run set actc_set_deterministic(1)         */
    char gemm[16];             /* the dense-product backend forced ("dnnl",
                                  "openblas"; "": chosen on the machine)        */
    int grad_comm;             /* data parallel: bits per gradient on the wire
                                  (32 or 8; actc_dist_opts.grad_comm)           */
    size_t bucket;             /* data parallel: gradient bytes per bucket
                                  (0: the default)                              */
} actc_run_recipe;

typedef struct {
    uint32_t version;          /* format version of the file                   */
    char model[32];            /* model name                                   */
    int custom;                /* a user-defined model (actc_model_custom)      */
    actc_model_opts model_opts;/* a built-in model's shape                     */
    size_t n_params;           /* trainable scalars in the file                */
    char optim[16];            /* "" when the file has no optimizer state      */
    char policy[ACTC_POLICY_MAX]; /* compression policy ("" if none recorded)  */
    int has_trainer;           /* trainer, position and policy state follow    */
    actc_trainer_opts trainer; /* the trainer's options (strings point into
                                  this struct); in files of versions 2 and 3,
                                  those their settings text names              */
    uint64_t step, epoch, batch_in_epoch;
    char note[ACTC_CKPT_NOTE_MAX]; /* the application's text                   */
    int has_recipe;            /* the file holds a run recipe                  */
    actc_run_recipe recipe;    /* that recipe (zero when it holds none)        */
} actc_ckpt_info;

/* Read and check a checkpoint's header and record (not the tensors).
 * Missing file: ACTC_ERR_IO; truncated, corrupted, not a checkpoint or an
 * unknown version: ACTC_ERR_FORMAT. */
ACTC_API actc_status actc_checkpoint_info(const char *path, actc_ckpt_info *info);
/* Build the built-in model a checkpoint holds, with its weights.  A record
 * describing a model larger than the file can hold is refused before any
 * allocation. */
ACTC_API actc_status actc_checkpoint_model(const char *path, actc_model **out);
/* Write m's state and, when o is not NULL, o's (note: the application's
 * text, may be NULL). */
ACTC_API actc_status actc_checkpoint_save(const char *path, actc_model *m, actc_optim *o, const char *note);
/* Load into m (and o when not NULL): names, shapes and the model's name
 * must match (ACTC_ERR_INVALID naming both sides).  info may be NULL. */
ACTC_API actc_status actc_checkpoint_load(const char *path, actc_model *m, actc_optim *o, actc_ckpt_info *info);

/* Check early that a checkpoint can be written at path (the directory
 * exists and is writable): creates and removes path.tmp.  ACTC_ERR_IO with
 * the reason otherwise. */
ACTC_API actc_status actc_checkpoint_probe(const char *path);

/* The whole training state: model, optimizer, position, recipe, policy and
 * controller state, the run's recipe (actc_trainer_set_recipe) and the note
 * (actc_trainer_set_note). */
ACTC_API actc_status actc_trainer_save(actc_trainer *t, const char *path);
/* Restore a state saved by actc_trainer_save into t (same model name and
 * shapes, same optimizer, same policy: a mismatch, or a policy-state section
 * the policy cannot read, fails with a message and changes nothing).  The
 * run then continues bit for bit as if never interrupted (at the same
 * thread count).  Files without a trainer record (actc_checkpoint_save,
 * versions 2 and 3) restore the model, the optimizer and the position they
 * have.  The file's run recipe and note replace t's.  A part of a model
 * (a pipeline stage: actc_model_opts.n_blocks) takes its tensors and their
 * optimizer state by name from a file of the whole model, and the learnt
 * policy state only through actc_pipe_resume from a pipeline's file of as
 * many stages; a pipeline's file (actc_pipe_save) loaded in one process
 * gives none either: a policy that learns then starts afresh. */
ACTC_API actc_status actc_trainer_load(actc_trainer *t, const char *path);
/* The application's text saved with the trainer (NULL clears it). */
ACTC_API actc_status actc_trainer_set_note(actc_trainer *t, const char *note);
ACTC_API const char *actc_trainer_note(const actc_trainer *t);
/* Keep a copy of the run's recipe r with t, saved with it (NULL: none).
 * ACTC_ERR_INVALID, and t unchanged, for a string without its NUL inside
 * its array. */
ACTC_API actc_status actc_trainer_set_recipe(actc_trainer *t, const actc_run_recipe *r);
/* The run's recipe kept with t, or NULL when it has none. */
ACTC_API const actc_run_recipe *actc_trainer_recipe(const actc_trainer *t);

#ifdef __cplusplus
}
#endif
#endif /* ACTC_H */
