/* The memory report: what the allocator and the store saw, formatted by the
 * library into the caller's buffer (the library never prints), as the text
 * table of `actc train` or as one JSON object. */
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

double actc_context_ratio(const actc_store_stats *ss)
{
    return ss && ss->stored_peak ? (double)ss->fp32_peak / (double)ss->stored_peak : 0.0;
}

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
    put(o, "context before backward: stored %s vs fp32 %s -> %.2fx smaller\n",
        actc_format_bytes(ss->stored_peak, a, sizeof a), actc_format_bytes(ss->fp32_peak, b, sizeof b),
        actc_context_ratio(ss));
    for (int k = 0; k < ACTC_SAVE_NKINDS; k++) {
        if (!ss->stored_by_kind[k] && !ss->fp32_by_kind[k]) continue;
        put(o, "  %-6s stored %12s   fp32 %12s\n", kind_names[k], actc_format_bytes(ss->stored_by_kind[k], a, sizeof a),
            actc_format_bytes(ss->fp32_by_kind[k], b, sizeof b));
    }
    if (ss->backward_peak > ss->forward_bytes)
        put(o, "context with recomputed segments or regions: %s before backward, peak %s during backward\n",
            actc_format_bytes(ss->forward_bytes, a, sizeof a), actc_format_bytes(ss->backward_peak, b, sizeof b));
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
    put(o, "},\"peak_total\":%zu,\"context_stored\":%zu,\"context_fp32\":%zu,\"context_ratio\":%.4f", ms->peak_total,
        ss->stored_peak, ss->fp32_peak, actc_context_ratio(ss));
    put(o, ",\"context_by_kind\":{");
    for (int k = 0; k < ACTC_SAVE_NKINDS; k++)
        put(o, "%s\"%s\":{\"stored\":%zu,\"fp32\":%zu}", k ? "," : "", kind_names[k], ss->stored_by_kind[k],
            ss->fp32_by_kind[k]);
    put(o, "},\"context_before_backward\":%zu,\"context_backward_peak\":%zu,\"peak_rss\":%zu", ss->forward_bytes,
        ss->backward_peak, actc_process_peak_rss());
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
