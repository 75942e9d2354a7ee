/* How the programs set up malloc (include once per program, from main's file).
 *
 * Training allocates and frees the same large tensors every step.  With
 * jemalloc (the programs' malloc when CMake finds it) freed pages are never
 * purged: the next step reuses them without page faults, and jemalloc's size
 * classes keep the resident set at the live bytes (measured: ResNet-20 batch
 * 128 re-faults nothing after the first step, RSS 196 MiB vs glibc's 303).
 * With glibc, blocks above its mmap threshold would be fresh mappings and
 * freed heap tops would go back to the kernel, so every step would fault its
 * working set in again (30% of a ResNet-20 step): raise both thresholds.
 * The library's own cache of freed blocks (src/core/mem.c) now does this
 * for any program; jemalloc keeps the programs' RSS a few percent lower
 * (bench/RESULTS.md, "malloc"). */
#ifndef ACTC_MALLOC_CONF_H
#define ACTC_MALLOC_CONF_H
#ifdef ACTC_WITH_JEMALLOC
/* Read by jemalloc at start-up; MALLOC_CONF in the environment still wins. */
const char *malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1";
static void actc_setup_malloc(void) {}
#else
#include <malloc.h>
static void actc_setup_malloc(void)
{
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
}
#endif
#endif
