/* The accounting allocator: every tensor byte is tagged with a category so the
 * memory table can say where the peak comes from, and a budget turns an
 * over-large request into a clean ACTC_ERR_OOM instead of a crash.
 *
 * It also keeps freed large blocks for reuse.  A training step frees and
 * re-allocates the same large tensors every step; glibc's malloc serves such
 * blocks with fresh mappings (and returns freed heap tops to the kernel), so
 * every step would page-fault its whole working set in again.  Freed blocks
 * above 64 KiB go to a list per size class instead, and a request of that
 * class (or up to a power of two smaller) takes one back: no system call, no
 * page fault.  The cache is bounded
 * (actc_mem_set_cache_limit), visible (actc_mem_stats.cached), never counted
 * as live bytes, kept within the budget together with the live bytes, and
 * emptied by actc_mem_trim. */
#include "actc.h"
#include "core.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

/* A cached block is free memory to the memory checkers: ASan and valgrind
 * still report a use after actc_mem_free (and, on reuse, a read of what the
 * block held before or a write past the new request). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#elif defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h> /* no-ops when not under valgrind */
#define POISON(p, n) VALGRIND_MAKE_MEM_NOACCESS(p, n)
#define UNPOISON(p, n) VALGRIND_MAKE_MEM_UNDEFINED(p, n)
#endif
#endif
#ifndef POISON
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define ALIGN 64

/* Size classes: CLASS_BITS=2 gives four per power of two (the spacing of
 * jemalloc's large classes), so rounding a request up to its class costs at
 * most 25% of address space and, for a block used at its size, no resident
 * memory (the tail pages are never touched).  Blocks of at most
 * 2^CACHE_MIN_LOG2 bytes go straight to malloc: they are below glibc's mmap
 * threshold, so its bins reuse them from the heap (caching them down to 4 KiB
 * saved under 0.4 MiB of page faults per step). */
#define CACHE_MIN_LOG2 16 /* 64 KiB */
#define CLASS_BITS 2
#define NCLASS ((64 - CACHE_MIN_LOG2) << CLASS_BITS)
/* A request whose class is empty takes the smallest cached block up to one
 * power of two larger: that block is resident already, a new one would add
 * pages (ResNet-18 batch 256 under actnn:L3: peak RSS 508 -> 419 MiB, as low
 * as jemalloc's; gpt-mini +5%).  Further up wasted more than it saved. */
#define CLASS_REACH (1 << CLASS_BITS)

/* Header placed just before every block; ALIGN bytes keep the payload aligned. */
typedef struct blk_hdr {
    size_t bytes;         /* requested: what the categories count        */
    size_t cap;           /* payload size (its class), 0: never cached   */
    struct blk_hdr *next; /* next block of the class while cached        */
    uint32_t cat;
    uint32_t magic;
} blk_hdr;
_Static_assert(sizeof(blk_hdr) <= ALIGN, "the header fits in front of the payload");
#define BLK_MAGIC 0xAC7CB10Cu  /* live */
#define BLK_CACHED 0xAC7CCAC4u /* in the cache: freeing it again is a bug */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static actc_mem_stats g_stats;
static blk_hdr *g_free[NCLASS]; /* cached blocks, one list per class */
static size_t g_limit = ACTC_MEM_CACHE_AUTO;
static size_t g_high_water; /* highest current_total ever (not reset) */

static const char *const cat_names[ACTC_MEM_NCAT] = {
    "PARAM", "GRAD", "OPTIM", "CONTEXT", "ACT", "SCRATCH", "COMM"};

const char *actc_mem_cat_name(actc_mem_cat c)
{
    return (unsigned)c < ACTC_MEM_NCAT ? cat_names[c] : "?";
}

/* The class of a request: its index, and its size in *cap; -1 for a block
 * that is not cached (small, or so large that rounding would overflow). */
static int size_class(size_t bytes, size_t *cap)
{
    if (bytes <= (size_t)1 << CACHE_MIN_LOG2) return -1;
    int k = 0; /* floor(log2(bytes - 1)): an exact power of two ends level k-1 */
    for (size_t v = bytes - 1; v > 1; v >>= 1) k++;
    const size_t step = (size_t)1 << (k - CLASS_BITS);
    const size_t c = (bytes + step - 1) / step * step;
    if (c < bytes || c > SIZE_MAX - ALIGN) return -1;
    *cap = c;
    /* c = 2^k + j*step with j in 1..2^CLASS_BITS */
    return ((k - CACHE_MIN_LOG2) << CLASS_BITS) + (int)(c / step - ((size_t)1 << CLASS_BITS)) - 1;
}

/* Bytes the cache may hold now: the limit, and with a budget what the live
 * bytes leave of it.  The default limit keeps live + cached within twice the
 * high-water mark of live bytes: a step's freed blocks can be more than its
 * peak (ResNet-20: 1.33x, blocks of different classes whose lives do not
 * overlap), and a cache too small for them misses every step and, as the
 * blocks it lets go raise glibc's mmap threshold, fragments the heap (1x:
 * 14 misses per ResNet-20 step, peak RSS 215 -> 242 MiB).  Lock held. */
static size_t cache_room(void)
{
    size_t room = g_limit;
    if (g_limit == ACTC_MEM_CACHE_AUTO) {
        /* current_total may be a reservation above the mark, not yet counted */
        size_t high = g_high_water > g_stats.current_total ? g_high_water : g_stats.current_total;
        size_t bound = high > SIZE_MAX / 2 ? SIZE_MAX : 2 * high;
        room = bound > g_stats.current_total ? bound - g_stats.current_total : 0;
    }
    if (g_stats.budget) {
        size_t left = g_stats.budget > g_stats.current_total ? g_stats.budget - g_stats.current_total : 0;
        if (left < room) room = left;
    }
    return room;
}

/* Take cached blocks out, largest class first (fewest blocks to free), until
 * at most `keep` bytes stay cached.  Lock held; returns them as a list for
 * release_list, which frees them after the lock is dropped (unmapping a large
 * block is a system call other threads need not wait for). */
static blk_hdr *evict_to(size_t keep)
{
    blk_hdr *out = NULL;
    for (int c = NCLASS - 1; c >= 0 && g_stats.cached > keep; c--)
        while (g_free[c] && g_stats.cached > keep) {
            blk_hdr *h = g_free[c];
            g_free[c] = h->next;
            g_stats.cached -= h->cap;
            h->next = out;
            out = h;
        }
    return out;
}

static void release_list(blk_hdr *h)
{
    while (h) {
        blk_hdr *next = h->next;
        h->magic = 0;
        free(h);
        h = next;
    }
}

/* Count a block that became live (lock held). */
static void note_live(actc_mem_cat cat)
{
    if (g_stats.current[cat] > g_stats.peak[cat]) g_stats.peak[cat] = g_stats.current[cat];
    if (g_stats.current_total > g_stats.peak_total) g_stats.peak_total = g_stats.current_total;
    if (g_stats.current_total > g_high_water) g_high_water = g_stats.current_total;
    g_stats.n_allocs++;
}

void *actc_mem_alloc(actc_mem_cat cat, size_t bytes)
{
    if ((unsigned)cat >= ACTC_MEM_NCAT) {
        actc_set_error(ACTC_ERR_INVALID, "allocation with unknown memory category %d", (int)cat);
        return NULL;
    }
    char hbuf[32], bbuf[32], cbuf[32];
    size_t cap = 0;
    int cls = size_class(bytes, &cap);
    pthread_mutex_lock(&g_lock);
    if (g_limit == 0) cls = -1; /* no cache: no rounding up either */
    if (g_stats.budget && g_stats.current_total + bytes > g_stats.budget) {
        size_t cur = g_stats.current_total, bud = g_stats.budget;
        pthread_mutex_unlock(&g_lock);
        actc_set_error(ACTC_ERR_OOM,
                       "memory budget exceeded: %s allocation of %s with %s already in use "
                       "(budget %s)",
                       cat_names[cat], actc_format_bytes(bytes, hbuf, sizeof hbuf),
                       actc_format_bytes(cur, cbuf, sizeof cbuf),
                       actc_format_bytes(bud, bbuf, sizeof bbuf));
        return NULL;
    }
    /* Reserve before allocating so two threads cannot both pass the check. */
    g_stats.current[cat] += bytes;
    g_stats.current_total += bytes;
    blk_hdr *h = NULL;
    for (int c = cls; c >= 0 && c <= cls + CLASS_REACH && c < NCLASS && !h; c++)
        if ((h = g_free[c])) g_free[c] = h->next;
    if (h) { /* a hit: live + cached does not grow (h->cap >= bytes) */
        g_stats.cached -= h->cap;
        note_live(cat);
        pthread_mutex_unlock(&g_lock);
        UNPOISON((char *)h + ALIGN, bytes);
    } else {
        /* A miss adds live bytes: with a budget, cached blocks make room. */
        blk_hdr *drop = evict_to(cache_room());
        pthread_mutex_unlock(&g_lock);
        release_list(drop);
        size_t total = ALIGN + (cls >= 0 ? cap : ((bytes + ALIGN - 1) / ALIGN) * ALIGN);
        if (total < bytes) total = 0; /* overflow: fail below */
        h = total ? aligned_alloc(ALIGN, total) : NULL;
        if (!h && total) { /* what the cache holds may be what the system lacks */
            actc__mem_release_cache();
            h = aligned_alloc(ALIGN, total);
        }
        pthread_mutex_lock(&g_lock);
        if (!h) {
            g_stats.current[cat] -= bytes;
            g_stats.current_total -= bytes;
            pthread_mutex_unlock(&g_lock);
            actc_set_error(ACTC_ERR_OOM, "out of system memory: %s allocation of %s",
                           cat_names[cat], actc_format_bytes(bytes, hbuf, sizeof hbuf));
            return NULL;
        }
        note_live(cat);
        g_stats.n_sys_allocs++;
        pthread_mutex_unlock(&g_lock);
        h->cap = cls >= 0 ? cap : 0;
    }
    h->bytes = bytes;
    h->cat = (uint32_t)cat;
    h->next = NULL;
    h->magic = BLK_MAGIC;
    return (char *)h + ALIGN;
}

void *actc_mem_calloc(actc_mem_cat cat, size_t bytes)
{
    void *p = actc_mem_alloc(cat, bytes);
    if (p && bytes) memset(p, 0, bytes);
    return p;
}

void actc_mem_free(void *p)
{
    if (!p) return;
    blk_hdr *h = (blk_hdr *)((char *)p - ALIGN);
    if (h->magic != BLK_MAGIC) abort(); /* not ours, or freed twice: a bug, not a user error */
    size_t cap = 0;
    const int cls = h->cap ? size_class(h->cap, &cap) : -1;
    pthread_mutex_lock(&g_lock);
    g_stats.current[h->cat] -= h->bytes;
    g_stats.current_total -= h->bytes;
    const int keep = cls >= 0 && g_stats.cached + h->cap <= cache_room();
    if (keep) {
        POISON(p, h->cap);
        h->magic = BLK_CACHED;
        h->next = g_free[cls];
        g_free[cls] = h;
        g_stats.cached += h->cap;
    }
    pthread_mutex_unlock(&g_lock);
    if (!keep) {
        h->magic = 0;
        free(h);
    }
}

/* A move changes no total: the block stays live, only its category's count
 * goes from one to the other (so peak_total cannot move; the destination's
 * peak can).  The category is written under the lock, as actc_mem_free
 * reads it there. */
actc_mem_cat actc__mem_move(void *p, actc_mem_cat cat)
{
    if (!p || (unsigned)cat >= ACTC_MEM_NCAT) return cat;
    blk_hdr *h = (blk_hdr *)((char *)p - ALIGN);
    if (h->magic != BLK_MAGIC) abort(); /* not ours, or freed: a bug */
    pthread_mutex_lock(&g_lock);
    const actc_mem_cat from = (actc_mem_cat)h->cat;
    g_stats.current[from] -= h->bytes;
    g_stats.current[cat] += h->bytes;
    if (g_stats.current[cat] > g_stats.peak[cat]) g_stats.peak[cat] = g_stats.current[cat];
    h->cat = (uint32_t)cat;
    pthread_mutex_unlock(&g_lock);
    return from;
}

void actc_mem_retag(void *p, actc_mem_cat cat) { (void)actc__mem_move(p, cat); }

size_t actc_mem_size(const void *p)
{
    if (!p) return 0;
    const blk_hdr *h = (const blk_hdr *)((const char *)p - ALIGN);
    return h->bytes;
}

void actc_mem_set_budget(size_t bytes)
{
    pthread_mutex_lock(&g_lock);
    g_stats.budget = bytes;
    blk_hdr *drop = evict_to(cache_room());
    pthread_mutex_unlock(&g_lock);
    release_list(drop);
}

void actc_mem_set_cache_limit(size_t bytes)
{
    pthread_mutex_lock(&g_lock);
    g_limit = bytes;
    blk_hdr *drop = evict_to(cache_room());
    pthread_mutex_unlock(&g_lock);
    release_list(drop);
}

void actc__mem_release_cache(void)
{
    pthread_mutex_lock(&g_lock);
    blk_hdr *drop = evict_to(0);
    pthread_mutex_unlock(&g_lock);
    release_list(drop);
}

void actc_mem_trim(void) { actc__mem_release_cache(); }

void actc_mem_get_stats(actc_mem_stats *out)
{
    pthread_mutex_lock(&g_lock);
    *out = g_stats;
    out->cache_limit = cache_room();
    pthread_mutex_unlock(&g_lock);
}

void actc_mem_reset_peak(void)
{
    pthread_mutex_lock(&g_lock);
    for (int c = 0; c < ACTC_MEM_NCAT; c++) g_stats.peak[c] = g_stats.current[c];
    g_stats.peak_total = g_stats.current_total;
    pthread_mutex_unlock(&g_lock);
}
