/* Progress display and the memory report. */
#include "cli.h"
#include <string.h>
#include <unistd.h>

void progress_init(progress *p, const char *mode)
{
    memset(p, 0, sizeof *p);
    p->tty = !strcmp(mode, "on") || (!strcmp(mode, "auto") && isatty(2));
    if (!strcmp(mode, "off")) p->tty = -1;
    p->t_start = p->t_last_print = now_seconds();
    p->last_plain = -1;
    p->unit = "samples";
}

static void fmt_time(double s, char *buf, size_t cap)
{
    int t = (int)(s + 0.5);
    snprintf(buf, cap, "%d:%02d:%02d", t / 3600, (t / 60) % 60, t % 60);
}

void progress_update(progress *p, int epoch, int epochs, int step, int steps, double loss, double acc,
                     double sps)
{
    double t = now_seconds();
    double frac = steps ? (double)step / steps : 1;
    double elapsed = t - p->t_start;
    double eta = frac > 0 ? elapsed / frac - elapsed : 0;
    char eta_s[16];
    fmt_time(eta, eta_s, sizeof eta_s);
    if (p->tty == 1) {
        if (step < steps && t - p->t_last_print < 0.2) return;
        p->t_last_print = t;
        char bar[31];
        int fill = (int)(frac * 30);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[30] = '\0';
        fprintf(stderr, "\repoch %d/%d [%s] %d/%d loss %.4f acc %5.1f%% %.0f %s/s ETA %s ", epoch,
                epochs, bar, step, steps, loss, 100 * acc, sps, p->unit, eta_s);
        fflush(stderr);
    } else if (p->tty == 0) {
        /* Plain lines: about every 10% of the epoch or every 30 s. */
        int every = steps >= 10 ? steps / 10 : 1;
        if (step != steps && step - p->last_plain < every && t - p->t_last_print < 30) return;
        if (p->last_plain < 0 && step < every && step != steps) return;
        p->last_plain = step;
        p->t_last_print = t;
        printf("epoch %d/%d step %d/%d loss %.4f acc %.1f%% %.0f %s/s ETA %s\n", epoch, epochs,
               step, steps, loss, 100 * acc, sps, p->unit, eta_s);
        fflush(stdout);
    }
}

void progress_done(progress *p)
{
    if (p->tty == 1) fprintf(stderr, "\n");
    p->t_start = p->t_last_print = now_seconds();
    p->last_plain = -1;
}

double context_ratio(const actc_store_stats *ss)
{
    return ss->stored_peak ? (double)ss->fp32_peak / (double)ss->stored_peak : 0.0;
}

static const char *kind_names[ACTC_SAVE_NKINDS] = {"ACT", "MASK", "INDEX", "EXACT"};

void report_memory(FILE *f, const actc_mem_stats *ms, const actc_store_stats *ss)
{
    char a[32], b[32];
    size_t sum = 0;
    fprintf(f, "memory (peaks over the epoch)\n");
    fprintf(f, "  %-10s %12s\n", "category", "peak");
    for (int c = 0; c < ACTC_MEM_NCAT; c++) {
        fprintf(f, "  %-10s %12s\n", actc_mem_cat_name((actc_mem_cat)c),
                actc_format_bytes(ms->peak[c], a, sizeof a));
        sum += ms->peak[c];
    }
    fprintf(f, "  %-10s %12s  (allocator peak; the categories peak at different moments, sum %s)\n",
            "total", actc_format_bytes(ms->peak_total, a, sizeof a), actc_format_bytes(sum, b, sizeof b));
    fprintf(f, "context before backward: stored %s vs fp32 %s -> %.2fx smaller\n",
            actc_format_bytes(ss->stored_peak, a, sizeof a), actc_format_bytes(ss->fp32_peak, b, sizeof b),
            context_ratio(ss));
    for (int k = 0; k < ACTC_SAVE_NKINDS; k++) {
        if (!ss->stored_by_kind[k] && !ss->fp32_by_kind[k]) continue;
        fprintf(f, "  %-6s stored %12s   fp32 %12s\n", kind_names[k],
                actc_format_bytes(ss->stored_by_kind[k], a, sizeof a),
                actc_format_bytes(ss->fp32_by_kind[k], b, sizeof b));
    }
    if (ss->backward_peak > ss->forward_bytes)
        fprintf(f, "context with recomputed segments: %s before backward, peak %s during backward\n",
                actc_format_bytes(ss->forward_bytes, a, sizeof a), actc_format_bytes(ss->backward_peak, b, sizeof b));
    fprintf(f, "process peak RSS: %s\n", actc_format_bytes(actc_process_peak_rss(), a, sizeof a));
}

void report_memory_json(FILE *f, const actc_mem_stats *ms, const actc_store_stats *ss)
{
    fprintf(f, "{\"peak\":{");
    for (int c = 0; c < ACTC_MEM_NCAT; c++)
        fprintf(f, "%s\"%s\":%zu", c ? "," : "", actc_mem_cat_name((actc_mem_cat)c), ms->peak[c]);
    fprintf(f, "},\"peak_total\":%zu,\"context_stored\":%zu,\"context_fp32\":%zu,\"context_ratio\":%.4f",
            ms->peak_total, ss->stored_peak, ss->fp32_peak, context_ratio(ss));
    fprintf(f, ",\"context_by_kind\":{");
    for (int k = 0; k < ACTC_SAVE_NKINDS; k++)
        fprintf(f, "%s\"%s\":{\"stored\":%zu,\"fp32\":%zu}", k ? "," : "", kind_names[k],
                ss->stored_by_kind[k], ss->fp32_by_kind[k]);
    fprintf(f, "},\"context_before_backward\":%zu,\"context_backward_peak\":%zu,\"peak_rss\":%zu}", ss->forward_bytes,
            ss->backward_peak, actc_process_peak_rss());
}
