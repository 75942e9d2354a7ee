/* Shared pieces of the fuzz targets (libFuzzer, built by -DACTC_FUZZ=ON with
 * clang): a scratch file for the readers that take a path, and the check
 * that a reader leaves no accounted memory behind. */
#ifndef ACTC_FUZZ_UTIL_H
#define ACTC_FUZZ_UTIL_H
#include "actc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A per-process file name under $TMPDIR (or /tmp) with the given suffix. */
static inline const char *fuzz_path(const char *suffix)
{
    static char path[512];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/actc_fuzz_%d%s", dir && *dir ? dir : "/tmp", (int)getpid(), suffix);
    return path;
}

/* Write data to path; aborts (a harness bug, not a finding) on failure. */
static inline void fuzz_write(const char *path, const uint8_t *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) abort();
}

/* Every accounted byte a call allocated must be freed again: a leak in an
 * error path shows up here even where LeakSanitizer would not see it (the
 * allocator keeps freed blocks). */
static inline void fuzz_check_balanced(size_t before)
{
    actc_mem_stats st;
    actc_mem_get_stats(&st);
    if (st.current_total != before) {
        fprintf(stderr, "accounted memory not released: %zu bytes live, %zu before\n", st.current_total, before);
        abort();
    }
}

static inline size_t fuzz_live(void)
{
    actc_mem_stats st;
    actc_mem_get_stats(&st);
    return st.current_total;
}
#endif
