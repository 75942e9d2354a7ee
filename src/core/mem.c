/* The accounting allocator: every tensor byte is tagged with a category so the
 * memory table can say where the peak comes from, and a budget turns an
 * over-large request into a clean ACTC_ERR_OOM instead of a crash. */
#include "actc.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#define ALIGN 64

/* Header placed just before every block; ALIGN bytes keep the payload aligned. */
typedef struct {
    size_t bytes;
    uint32_t cat;
    uint32_t magic;
} blk_hdr;
#define BLK_MAGIC 0xAC7CB10Cu

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static actc_mem_stats g_stats;

static const char *const cat_names[ACTC_MEM_NCAT] = {
    "PARAM", "GRAD", "OPTIM", "CONTEXT", "ACT", "SCRATCH"};

const char *actc_mem_cat_name(actc_mem_cat c)
{
    return (unsigned)c < ACTC_MEM_NCAT ? cat_names[c] : "?";
}

void *actc_mem_alloc(actc_mem_cat cat, size_t bytes)
{
    if ((unsigned)cat >= ACTC_MEM_NCAT) {
        actc_set_error(ACTC_ERR_INVALID, "allocation with unknown memory category %d", (int)cat);
        return NULL;
    }
    char hbuf[32], bbuf[32], cbuf[32];
    pthread_mutex_lock(&g_lock);
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
    pthread_mutex_unlock(&g_lock);

    size_t total = ALIGN + ((bytes + ALIGN - 1) / ALIGN) * ALIGN;
    char *raw = (total >= bytes) ? aligned_alloc(ALIGN, total) : NULL;
    pthread_mutex_lock(&g_lock);
    if (!raw) {
        g_stats.current[cat] -= bytes;
        g_stats.current_total -= bytes;
        pthread_mutex_unlock(&g_lock);
        actc_set_error(ACTC_ERR_OOM, "out of system memory: %s allocation of %s",
                       cat_names[cat], actc_format_bytes(bytes, hbuf, sizeof hbuf));
        return NULL;
    }
    if (g_stats.current[cat] > g_stats.peak[cat]) g_stats.peak[cat] = g_stats.current[cat];
    if (g_stats.current_total > g_stats.peak_total) g_stats.peak_total = g_stats.current_total;
    g_stats.n_allocs++;
    pthread_mutex_unlock(&g_lock);
    blk_hdr *h = (blk_hdr *)raw;
    h->bytes = bytes;
    h->cat = (uint32_t)cat;
    h->magic = BLK_MAGIC;
    return raw + ALIGN;
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
    if (h->magic != BLK_MAGIC) abort(); /* not ours: a bug, not a user error */
    h->magic = 0;
    pthread_mutex_lock(&g_lock);
    g_stats.current[h->cat] -= h->bytes;
    g_stats.current_total -= h->bytes;
    pthread_mutex_unlock(&g_lock);
    free(h);
}

void actc_mem_retag(void *p, actc_mem_cat cat)
{
    if (!p || (unsigned)cat >= ACTC_MEM_NCAT) return;
    blk_hdr *h = (blk_hdr *)((char *)p - ALIGN);
    if (h->magic != BLK_MAGIC) abort();
    pthread_mutex_lock(&g_lock);
    g_stats.current[h->cat] -= h->bytes;
    g_stats.current[cat] += h->bytes;
    if (g_stats.current[cat] > g_stats.peak[cat]) g_stats.peak[cat] = g_stats.current[cat];
    pthread_mutex_unlock(&g_lock);
    h->cat = (uint32_t)cat;
}

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
    pthread_mutex_unlock(&g_lock);
}

void actc_mem_get_stats(actc_mem_stats *out)
{
    pthread_mutex_lock(&g_lock);
    *out = g_stats;
    pthread_mutex_unlock(&g_lock);
}

void actc_mem_reset_peak(void)
{
    pthread_mutex_lock(&g_lock);
    for (int c = 0; c < ACTC_MEM_NCAT; c++) g_stats.peak[c] = g_stats.current[c];
    g_stats.peak_total = g_stats.current_total;
    pthread_mutex_unlock(&g_lock);
}
