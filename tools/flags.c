/* Table-driven flag parsing: the same table produces the help text. */
#include "cli.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static flag_def *find(flag_def *flags, const char *name, size_t len)
{
    for (flag_def *f = flags; f->name; f++)
        if (strlen(f->name) == len && !strncmp(f->name, name, len)) return f;
    return NULL;
}

/* 1, 0, or -1 for a word that is not a boolean. */
static int parse_bool(const char *v)
{
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) return 1;
        if (!strcasecmp(v, no[i])) return 0;
    }
    return -1;
}

int flags_parse(flag_def *flags, int argc, char **argv, int first, int *want_help)
{
    *want_help = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *want_help = 1;
            return 1;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "error: unexpected argument '%s' (flags start with --; see --help)\n", a);
            return 2;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        flag_def *f = find(flags, a, len);
        if (!f) {
            fprintf(stderr, "error: unknown flag '%.*s' (see --help)\n", (int)len, a);
            return 2;
        }
        f->set = 1;
        if (f->type == F_BOOL) {
            int b = parse_bool(eq ? eq + 1 : "1");
            if (b < 0) {
                fprintf(stderr, "error: bad value '%s' for %s (expected 1/0, true/false, yes/no, on/off)\n",
                        eq + 1, f->name);
                return 2;
            }
            *(int *)f->ptr = b;
            continue;
        }
        /* "--log --epochs 1" must not log to a file named --epochs. */
        const char *v = eq ? eq + 1 : (i + 1 < argc && strncmp(argv[i + 1], "--", 2) ? argv[++i] : NULL);
        if (!v) {
            fprintf(stderr, "error: flag %s needs a value (%s)\n", f->name, f->meta);
            return 2;
        }
        char *end = NULL;
        errno = 0;
        switch (f->type) {
        case F_INT: {
            long x = strtol(v, &end, 10);
            if (*v == '\0' || *end || errno || x < -2147483647L || x > 2147483647L) goto bad;
            *(int *)f->ptr = (int)x;
            break;
        }
        case F_U64: {
            if (*v == '-') goto bad;
            unsigned long long x = strtoull(v, &end, 10);
            if (*v == '\0' || *end || errno) goto bad;
            *(uint64_t *)f->ptr = x;
            break;
        }
        case F_FLOAT: {
            float x = strtof(v, &end);
            if (*v == '\0' || *end || errno) goto bad;
            *(float *)f->ptr = x;
            break;
        }
        case F_STR: *(const char **)f->ptr = v; break;
        case F_BYTES:
            if (actc_parse_bytes(v, (size_t *)f->ptr) != ACTC_OK) {
                fprintf(stderr, "error: %s: %s\n", f->name, actc_last_error());
                return 2;
            }
            break;
        case F_BOOL: break;
        }
        continue;
    bad:
        fprintf(stderr, "error: bad value '%s' for %s (expected %s)\n", v, f->name, f->meta);
        return 2;
    }
    return 0;
}

void flags_help(FILE *out, const char *usage, const char *about, const flag_def *flags)
{
    fprintf(out, "usage: %s\n\n%s\n\nflags:\n", usage, about);
    for (const flag_def *f = flags; f->name; f++) {
        char left[48];
        snprintf(left, sizeof left, "%s%s%s", f->name, f->type == F_BOOL ? "" : " ",
                 f->type == F_BOOL ? "" : f->meta);
        fprintf(out, "  %-24s %s\n", left, f->help);
    }
    fprintf(out, "  %-24s %s\n", "--help", "show this help");
}

int flag_was_set(const flag_def *flags, const char *name)
{
    for (const flag_def *f = flags; f->name; f++)
        if (!strcmp(f->name, name)) return f->set;
    return 0;
}
