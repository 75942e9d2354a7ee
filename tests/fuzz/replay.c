/* Runs a fuzz target's function on files and directories of inputs, with no
 * fuzzer: the seed corpus and every input a fuzzer once crashed on
 * (tests/fuzz/regress/TARGET) replay in the ordinary test builds, release
 * and sanitizer, without clang. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (!b || (n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n)) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        fclose(f);
        free(b);
        return 1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(b, (size_t)n);
    free(b);
    return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    int ran = 0, rc = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) continue; /* an optional directory that does not exist */
        if (!S_ISDIR(st.st_mode)) {
            rc |= run_file(argv[i]);
            ran++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) return 1;
        char *names[4096];
        int n = 0;
        for (struct dirent *e; (e = readdir(d)) && n < 4096;)
            if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
        closedir(d);
        qsort(names, (size_t)n, sizeof *names, cmp);
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
            rc |= run_file(path);
            ran++;
            free(names[k]);
        }
    }
    printf("replayed %d inputs\n", ran);
    return rc || ran == 0;
}
