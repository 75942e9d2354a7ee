/* GACT's reports: the per-tensor table (actc inspect, train --log) and the
 * adaptation notices of a training run. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

/* The controller's tensor table in a fresh array (*n entries), or NULL. */
static actc_saved_info *tensors(const actc_controller *c, int *n)
{
    *n = actc_controller_tensors(c, NULL, 0);
    actc_saved_info *t = *n ? malloc((size_t)*n * sizeof *t) : NULL;
    if (t) actc_controller_tensors(c, t, *n);
    else *n = 0;
    return t;
}

static void shape_str(const actc_saved_info *t, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int d = 0; d < t->ndim && len + 1 < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", d ? "x" : "", t->shape[d]);
}

void report_tensors(FILE *f, const actc_controller *c)
{
    int n;
    actc_saved_info *t = tensors(c, &n);
    fprintf(f, "  %3s  %-18s %-16s %-16s %12s %5s %12s %12s\n", "#", "scope", "operator", "shape", "c_l", "bits",
            "stored", "fp32");
    double bits = 0, elems = 0;
    size_t stored = 0, fp32 = 0;
    for (int i = 0; i < n; i++) {
        char shp[64], a[32], b[32], cl[32];
        shape_str(&t[i], shp, sizeof shp);
        if (t[i].sensitivity >= 0) snprintf(cl, sizeof cl, "%.4g", t[i].sensitivity);
        else snprintf(cl, sizeof cl, "-");
        fprintf(f, "  %3d  %-18s %-16s %-16s %12s %5d %12s %12s\n", i, t[i].scope[0] ? t[i].scope : "-", t[i].op, shp,
                cl, t[i].bits, actc_format_bytes(t[i].stored_bytes, a, sizeof a),
                actc_format_bytes(t[i].fp32_bytes, b, sizeof b));
        bits += (double)t[i].bits * (double)(t[i].fp32_bytes / 4);
        elems += (double)(t[i].fp32_bytes / 4);
        stored += t[i].stored_bytes;
        fp32 += t[i].fp32_bytes;
    }
    char a[32], b[32];
    double comp, overall;
    actc_controller_variances(c, &comp, &overall);
    fprintf(f, "  %d ACT tensors: %.2f bits per element on average, stored %s vs fp32 %s (%.2fx); "
               "compression variance V(b) = %.4g\n",
            n, elems > 0 ? bits / elems : 0, actc_format_bytes(stored, a, sizeof a), actc_format_bytes(fp32, b, sizeof b),
            stored ? (double)fp32 / (double)stored : 0, comp);
    free(t);
}

void report_tensors_json(FILE *f, const actc_controller *c)
{
    int n;
    actc_saved_info *t = tensors(c, &n);
    fprintf(f, "[");
    for (int i = 0; i < n; i++) {
        char shp[64];
        shape_str(&t[i], shp, sizeof shp);
        fprintf(f, "%s{\"scope\":\"%s\",\"op\":\"%s\",\"shape\":\"%s\",\"c\":%.6g,\"bits\":%d,\"stored\":%zu,\"fp32\":%zu}",
                i ? "," : "", t[i].scope, t[i].op, shp, t[i].sensitivity, t[i].bits, t[i].stored_bytes, t[i].fp32_bytes);
    }
    fprintf(f, "]");
    free(t);
}

void report_adaptation(actc_controller *c, FILE *log, uint64_t step, int bar)
{
    double comp, overall;
    actc_controller_variances(c, &comp, &overall);
    if (actc_controller_adapted(c)) {
        int n = actc_controller_tensors(c, NULL, 0);
        printf("%sstep %llu: measured the sensitivity of %d saved tensors and re-allocated their bits\n",
               bar ? "\n" : "", (unsigned long long)step, n);
        fflush(stdout);
        if (log) {
            fprintf(log, "{\"event\":\"adapt\",\"step\":%llu,\"tensors\":", (unsigned long long)step);
            report_tensors_json(log, c);
            fprintf(log, "}\n");
            fflush(log);
        }
    }
    const char *alert = actc_controller_take_alert(c);
    if (alert) {
        fprintf(stderr, "%swarning: step %llu: %s\n", bar ? "\n" : "", (unsigned long long)step, alert);
        if (log) {
            fprintf(log, "{\"event\":\"variance_alert\",\"step\":%llu,\"compression_variance\":%.6g,"
                         "\"gradient_variance\":%.6g}\n",
                    (unsigned long long)step, comp, overall);
            fflush(log);
        }
    }
}
