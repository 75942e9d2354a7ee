/* Byte-size parsing and formatting, and the process peak RSS. */
#include "actc.h"
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

actc_status actc_parse_bytes(const char *s, size_t *out)
{
    if (!s || !*s) return actc_set_error(ACTC_ERR_INVALID, "empty byte size");
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0) || !isfinite(v))
        return actc_set_error(ACTC_ERR_INVALID, "bad byte size '%s' (expected e.g. 512MiB, 2GiB)", s);
    while (*end == ' ') end++;
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
