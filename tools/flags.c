/* Table-driven flag parsing: the same table produces the help text. */
#include "cli.h"
#include <math.h>
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
        /* One strict number parser for every command (the library's): no
         * spaces, '+', hexadecimal, inf or nan, nothing after the number. */
        long long iv;
        double dv;
        switch (f->type) {
        case F_INT:
            if (actc_parse_int(v, -2147483647LL, 2147483647LL, &iv) != ACTC_OK) goto bad;
            *(int *)f->ptr = (int)iv;
            break;
        case F_U64:
            /* Counts of steps and tokens: up to 2^62, far past any run. */
            if (actc_parse_int(v, 0, 4611686018427387904LL, &iv) != ACTC_OK) goto bad;
            *(uint64_t *)f->ptr = (uint64_t)iv;
            break;
        case F_FLOAT:
            if (actc_parse_number(v, &dv) != ACTC_OK || fabs(dv) > 3.4e38) goto bad;
            *(float *)f->ptr = (float)dv;
            break;
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

void flags_clear_set(flag_def *flags)
{
    for (flag_def *f = flags; f->name; f++) f->set = 0;
}
