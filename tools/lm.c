/* Language-model pieces of the actc command: where the text corpus behind
 * --data text[:PATH] is. */
#include "cli.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The default corpus: $ACTC_TEXT, else data/kjv.txt next to the actc program
 * (the Makefile's `make corpus` writes build/data/kjv.txt). */
static int default_corpus(char *buf, size_t cap)
{
    const char *env = getenv("ACTC_TEXT");
    if (env && *env) return snprintf(buf, cap, "%s", env) < (int)cap ? 0 : -1;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = '\0';
    return snprintf(buf, cap, "%s/data/kjv.txt", exe) < (int)cap ? 0 : -1;
}

int text_spec(const char *spec) { return spec && (!strcmp(spec, "text") || !strncmp(spec, "text:", 5)); }

int text_open(const char *spec, actc_text_corpus *c)
{
    char path[PATH_MAX + 16];
    int is_default = !strcmp(spec, "text");
    if (is_default) {
        if (default_corpus(path, sizeof path) != 0) {
            fprintf(stderr, "error: --data text: cannot locate the default corpus; pass --data text:PATH\n");
            return 1;
        }
        if (access(path, R_OK) != 0) {
            fprintf(stderr,
                    "error: --data text: the default corpus %s is missing: run `make corpus` (it extracts the King "
                    "James Bible from Debian's bible-kjv), set ACTC_TEXT, or pass --data text:PATH\n",
                    path);
            return 1;
        }
    } else {
        snprintf(path, sizeof path, "%s", spec + 5);
        if (!path[0]) {
            fprintf(stderr, "error: --data text: needs a file or directory after the colon\n");
            return 1;
        }
    }
    if (actc_text_load(path, TEXT_VAL_FRACTION, c) != ACTC_OK) {
        fprintf(stderr, "error: --data %s: %s\n", spec, actc_last_error());
        return 1;
    }
    return 0;
}

