/* The reports: the memory report (what the allocator and the store saw)
 * and the GACT controller's tensor table, formatted by the library into the
 * caller's buffer or file (the library never prints on its own), as the
 * text tables of `actc train` and `actc inspect` or as JSON. */
#include "train.h"
#include "../optim/optim.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* snprintf that appends and keeps counting past the end, so the caller
 * learns the length the whole report needs. */
typedef struct {
    char *buf;
    size_t cap, len;
} out;

static void put(out *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void put(out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t left = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(left ? o->buf + o->len : NULL, left, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

/* The reference the context is set against: what `none` keeps for the
 * same step when the caller measured it (the trainer does), else the fp32
 * size of the policy's own saves. */
static size_t reference(const actc_store_stats *ss) { return ss->context_none ? ss->context_none : ss->context_fp32; }

static double ratio(size_t ref, size_t stored) { return stored ? (double)ref / (double)stored : 0.0; }

double actc_context_ratio(const actc_store_stats *ss) { return ss ? ratio(reference(ss), ss->context_bytes) : 0.0; }

static const char *const kind_names[ACTC_SAVE_NKINDS] = {"ACT", "MASK", "INDEX", "EXACT"};

/* The gradients by form (the trainer's figures), or NULL. */
typedef struct {
    const size_t *by_form; /* dense, low-rank, encoded */
    size_t fp32;
    size_t optim, optim_dense; /* optimizer state, and at the parameters' shapes */
} grad_figures;

static void text(out *o, const actc_mem_stats *ms, const actc_store_stats *ss, const grad_figures *g)
{
    char a[32], b[32];
    size_t sum = 0;
    put(o, "memory (peaks over the epoch)\n");
    put(o, "  %-10s %12s\n", "category", "peak");
    for (int c = 0; c < ACTC_MEM_NCAT; c++) {
        put(o, "  %-10s %12s\n", actc_mem_cat_name((actc_mem_cat)c), actc_format_bytes(ms->peak[c], a, sizeof a));
        sum += ms->peak[c];
    }
    put(o, "  %-10s %12s  (allocator peak; the categories peak at different moments, sum %s)\n", "total",
        actc_format_bytes(ms->peak_total, a, sizeof a), actc_format_bytes(sum, b, sizeof b));
    const size_t ref = reference(ss);
    if (ss->context_none)
        put(o, "context before backward: stored %s vs %s under none for the same step -> %.2fx smaller\n",
            actc_format_bytes(ss->context_bytes, a, sizeof a), actc_format_bytes(ref, b, sizeof b),
            actc_context_ratio(ss));
    else /* no reference measured: say what the ratio is against */
        put(o, "context before backward: stored %s vs %s for the same saves in fp32 -> %.2fx smaller (what none "
               "keeps was not measured)\n",
            actc_format_bytes(ss->context_bytes, a, sizeof a), actc_format_bytes(ref, b, sizeof b),
            actc_context_ratio(ss));
    for (int k = 0; k < ACTC_SAVE_NKINDS; k++) {
        if (!ss->context_by_kind[k] && !ss->context_none_by_kind[k]) continue;
        put(o, "  %-6s stored %12s", kind_names[k], actc_format_bytes(ss->context_by_kind[k], a, sizeof a));
        if (ss->context_none) put(o, "   none %12s", actc_format_bytes(ss->context_none_by_kind[k], b, sizeof b));
        put(o, "\n");
    }
    if (ss->context_backward_peak)
        put(o, "context peak during backward: %s -> %.2fx smaller than %s%s\n",
            actc_format_bytes(ss->context_backward_peak, a, sizeof a), ratio(ref, ss->context_backward_peak),
            ss->context_none ? "none's" : "the fp32 saves",
            ss->context_backward_peak > ss->context_bytes ? " (recomputed segments or regions save again)" : "");
    if (g && (g->by_form[ACTC_GRAD_LOWRANK] || g->by_form[ACTC_GRAD_QUANT])) {
        char c[32], d[32];
        put(o, "gradients before the update: dense %s, low-rank %s, encoded %s (dense fp32: %s)\n",
            actc_format_bytes(g->by_form[ACTC_GRAD_DENSE], a, sizeof a),
            actc_format_bytes(g->by_form[ACTC_GRAD_LOWRANK], b, sizeof b),
            actc_format_bytes(g->by_form[ACTC_GRAD_QUANT], c, sizeof c), actc_format_bytes(g->fp32, d, sizeof d));
    }
    if (g && g->optim != g->optim_dense)
        put(o, "optimizer state: %s (at the parameters' shapes: %s)\n", actc_format_bytes(g->optim, a, sizeof a),
            actc_format_bytes(g->optim_dense, b, sizeof b));
    put(o, "process peak RSS: %s\n", actc_format_bytes(actc_process_peak_rss(), a, sizeof a));
}

static void json(out *o, const actc_mem_stats *ms, const actc_store_stats *ss, const grad_figures *g)
{
    put(o, "{\"peak\":{");
    for (int c = 0; c < ACTC_MEM_NCAT; c++)
        put(o, "%s\"%s\":%zu", c ? "," : "", actc_mem_cat_name((actc_mem_cat)c), ms->peak[c]);
    const size_t ref = reference(ss);
    put(o, "},\"peak_total\":%zu,\"context_stored\":%zu,\"context_none\":%zu,\"context_fp32\":%zu,"
           "\"context_reference\":\"%s\",\"context_ratio\":%.4f",
        ms->peak_total, ss->context_bytes, ss->context_none, ss->context_fp32,
        ss->context_none ? "none" : "same saves in fp32", actc_context_ratio(ss));
    put(o, ",\"context_by_kind\":{");
    for (int k = 0; k < ACTC_SAVE_NKINDS; k++)
        put(o, "%s\"%s\":{\"stored\":%zu,\"none\":%zu}", k ? "," : "", kind_names[k], ss->context_by_kind[k],
            ss->context_none_by_kind[k]);
    put(o, "},\"context_before_backward\":%zu,\"context_backward_peak\":%zu,\"context_ratio_backward_peak\":%.4f,"
           "\"peak_rss\":%zu",
        ss->context_bytes, ss->context_backward_peak, ratio(ref, ss->context_backward_peak), actc_process_peak_rss());
    if (g)
        put(o, ",\"gradients\":{\"dense\":%zu,\"lowrank\":%zu,\"encoded\":%zu,\"fp32\":%zu}",
            g->by_form[ACTC_GRAD_DENSE], g->by_form[ACTC_GRAD_LOWRANK], g->by_form[ACTC_GRAD_QUANT], g->fp32);
    if (g) put(o, ",\"optimizer_state\":{\"held\":%zu,\"dense\":%zu}", g->optim, g->optim_dense);
    put(o, "}");
}

static int report(const actc_mem_stats *ms, const actc_store_stats *ss, const grad_figures *g, int format, char *buf,
                  size_t cap)
{
    out o = {buf, buf ? cap : 0, 0};
    if (o.cap) buf[0] = '\0';
    if (!ms || !ss) return 0;
    if (format == ACTC_REPORT_JSON) json(&o, ms, ss, g);
    else text(&o, ms, ss, g);
    return (int)o.len;
}

int actc_memory_report(const actc_mem_stats *ms, const actc_store_stats *ss, int format, char *buf, size_t cap)
{
    return report(ms, ss, NULL, format, buf, cap);
}

/* The figures the report is about: the last epoch's, or now. */
static void figures(const actc_trainer *t, actc_mem_stats *ms, actc_store_stats *ss)
{
    if (t->have_snapshot) {
        *ms = t->ms;
        *ss = t->ss;
    } else {
        actc_mem_get_stats(ms);
        actc_store_get_stats(t->ctx, ss);
    }
}

int actc_trainer_report(const actc_trainer *t, int format, char *buf, size_t cap)
{
    if (!t) {
        if (buf && cap) buf[0] = '\0';
        return 0;
    }
    actc_mem_stats ms;
    actc_store_stats ss;
    figures(t, &ms, &ss);
    grad_figures g = {t->grad_bytes, t->grad_fp32, 0, 0};
    actc__optim_state_bytes(t->opt, &g.optim, &g.optim_dense);
    return report(&ms, &ss, &g, format, buf, cap);
}

actc_status actc_trainer_report_file(const actc_trainer *t, int format, FILE *f)
{
    if (!t || !f) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_report_file: NULL trainer or file");
    char small[2048];
    int n = actc_trainer_report(t, format, small, sizeof small);
    if ((size_t)n < sizeof small) {
        if (fputs(small, f) == EOF) return actc_set_error(ACTC_ERR_IO, "cannot write the memory report");
        return ACTC_OK;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) return actc_set_error(ACTC_ERR_OOM, "out of memory for the memory report");
    actc_trainer_report(t, format, big, (size_t)n + 1);
    int rc = fputs(big, f);
    free(big);
    return rc == EOF ? actc_set_error(ACTC_ERR_IO, "cannot write the memory report") : ACTC_OK;
}

/* ---- the controller's tensor table ---- */

/* The controller's tensor table in a fresh array (*n entries), or NULL. */
static actc_saved_info *tensors(const actc_controller *c, int *n)
{
    *n = actc_controller_tensors(c, NULL, 0);
    actc_saved_info *t = *n > 0 ? malloc((size_t)*n * sizeof *t) : NULL;
    if (t) actc_controller_tensors(c, t, *n);
    else if (*n < 0) *n = 0;
    return t;
}

static void shape_str(const actc_saved_info *t, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int d = 0; d < t->ndim && len + 1 < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", d ? "x" : "", t->shape[d]);
}

static void tensors_text(FILE *f, const actc_controller *c, const actc_saved_info *t, int n)
{
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
}

static void tensors_json(FILE *f, const actc_saved_info *t, int n)
{
    fputc('[', f);
    for (int i = 0; i < n; i++) {
        char shp[64];
        shape_str(&t[i], shp, sizeof shp);
        fputs(i ? ",{\"scope\":" : "{\"scope\":", f);
        actc_json_string(f, t[i].scope);
        fputs(",\"op\":", f);
        actc_json_string(f, t[i].op);
        fprintf(f, ",\"shape\":\"%s\",\"c\":%.6g,\"bits\":%d,\"stored\":%zu,\"fp32\":%zu}", shp, t[i].sensitivity,
                t[i].bits, t[i].stored_bytes, t[i].fp32_bytes);
    }
    fputc(']', f);
}

actc_status actc_controller_report_file(const actc_controller *c, int format, FILE *f)
{
    if (!f) return actc_set_error(ACTC_ERR_INVALID, "actc_controller_report_file: NULL file");
    int n;
    actc_saved_info *t = tensors(c, &n);
    if (n && !t) return actc_set_error(ACTC_ERR_OOM, "out of memory for the tensor table");
    if (format == ACTC_REPORT_JSON) tensors_json(f, t, n);
    else tensors_text(f, c, t, n);
    free(t);
    return ferror(f) ? actc_set_error(ACTC_ERR_IO, "cannot write the tensor table") : ACTC_OK;
}
