/* Byte-size parsing and formatting, the process peak RSS and the clock. */
#include "core.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

double actc__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Length of the strict decimal number at the start of s: an optional '-',
 * digits, optionally '.' and digits (digits on at least one side), and an
 * optional exponent; 0 if s does not start with one.  Unlike strtod: no
 * leading space, no '+', no hexadecimal, no inf or nan. */
static size_t number_prefix(const char *s, int allow_fraction)
{
    size_t i = 0, digits = 0;
    if (s[i] == '-') i++;
    while (isdigit((unsigned char)s[i])) i++, digits++;
    if (allow_fraction && s[i] == '.') {
        i++;
        while (isdigit((unsigned char)s[i])) i++, digits++;
    }
    if (!digits) return 0;
    if (allow_fraction && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (s[j] == '-' || s[j] == '+') j++;
        if (isdigit((unsigned char)s[j])) {
            while (isdigit((unsigned char)s[j])) j++;
            i = j;
        }
    }
    return i;
}

actc_status actc_parse_int(const char *s, long long lo, long long hi, long long *out)
{
    if (!s || !out) return actc_set_error(ACTC_ERR_INVALID, "actc_parse_int: NULL argument");
    const size_t n = number_prefix(s, 0);
    errno = 0;
    char *end;
    long long v = n ? strtoll(s, &end, 10) : 0;
    if (!n || s[n] || errno || v < lo || v > hi)
        return actc_set_error(ACTC_ERR_INVALID, "'%s' is not a whole number from %lld to %lld", s, lo, hi);
    *out = v;
    return ACTC_OK;
}

actc_status actc_parse_number(const char *s, double *out)
{
    if (!s || !out) return actc_set_error(ACTC_ERR_INVALID, "actc_parse_number: NULL argument");
    const size_t n = number_prefix(s, 1);
    errno = 0;
    double v = n ? strtod(s, NULL) : 0;
    if (!n || s[n] || errno == ERANGE || !isfinite(v))
        return actc_set_error(ACTC_ERR_INVALID, "'%s' is not a finite decimal number", s);
    *out = v;
    return ACTC_OK;
}

actc_status actc_parse_bytes(const char *s, size_t *out)
{
    if (!s || !*s) return actc_set_error(ACTC_ERR_INVALID, "empty byte size");
    const size_t nlen = number_prefix(s, 1);
    double v = nlen ? strtod(s, NULL) : -1;
    const char *end = s + nlen;
    if (!nlen || !(v >= 0) || !isfinite(v))
        return actc_set_error(ACTC_ERR_INVALID, "bad byte size '%s' (expected e.g. 512MiB, 2GiB)", s);
    double mul = 1;
    static const struct { const char *suf; double mul; } sufs[] = {
        {"", 1}, {"b", 1}, {"k", 1024.0}, {"kib", 1024.0}, {"kb", 1e3},
        {"m", 1048576.0}, {"mib", 1048576.0}, {"mb", 1e6},
        {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
        {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12}};
    size_t i;
    for (i = 0; i < sizeof sufs / sizeof sufs[0]; i++)
        if (strcasecmp(end, sufs[i].suf) == 0) { mul = sufs[i].mul; break; }
    if (i == sizeof sufs / sizeof sufs[0])
        return actc_set_error(ACTC_ERR_INVALID, "bad byte size '%s': unknown unit '%s' (use KiB, MiB, GiB)", s, end);
    double b = v * mul;
    if (b > 1.8e19) return actc_set_error(ACTC_ERR_INVALID, "byte size '%s' is too large", s);
    *out = (size_t)b;
    return ACTC_OK;
}

char *actc_format_bytes(size_t bytes, char *buf, size_t cap)
{
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int i = 0;
    while (v >= 1024.0 && i < 4) { v /= 1024.0; i++; }
    if (i == 0) snprintf(buf, cap, "%zu B", bytes);
    else snprintf(buf, cap, "%.1f %s", v, u[i]);
    return buf;
}

size_t actc_process_peak_rss(void)
{
    /* VmHWM is the high-water mark of the resident set. */
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        size_t kb = 0;
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "VmHWM:", 6) == 0) { kb = strtoull(line + 6, NULL, 10); break; }
        fclose(f);
        if (kb) return kb * 1024;
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) return (size_t)ru.ru_maxrss * 1024;
    return 0;
}
