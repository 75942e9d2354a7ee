/* The report of actc bench: markdown tables from the rows (every figure is
 * one the CSV holds) and the plots, drawn by gnuplot from data files it
 * writes next to them; without gnuplot the tables stand alone. */
#include "cli.h"
#include "bench.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB 1048576.0

/* ---- looking rows up ------------------------------------------------------------- */
typedef struct {
    const char *v[64];
    int n;
} names;

static void add_name(names *n, const char *s)
{
    for (int i = 0; i < n->n; i++)
        if (!strcmp(n->v[i], s)) return;
    if (n->n < 64) n->v[n->n++] = s;
}

/* Models, and per model the policies and batches, in the order the rows came. */
static void models_of(const bench_table *t, names *out)
{
    out->n = 0;
    for (int i = 0; i < t->n; i++) add_name(out, t->rows[i].model);
}
/* (A policy whose only row says n/a has nothing to plot; the throughput
 * table lists it with its note.) */
static void policies_of(const bench_table *t, const char *model, row_kind kind, names *out)
{
    out->n = 0;
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].kind == kind && !strcmp(t->rows[i].model, model) && strcmp(t->rows[i].status, "n/a"))
            add_name(out, t->rows[i].policy);
}
static int batches_of(const bench_table *t, const char *model, row_kind kind, int *out, int cap)
{
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        const bench_row *r = &t->rows[i];
        if (r->kind != kind || strcmp(r->model, model) || r->batch <= 0) continue;
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= out[k] == r->batch;
        if (!seen && n < cap) out[n++] = r->batch;
    }
    for (int a = 1; a < n; a++) /* ascending */
        for (int b = a; b > 0 && out[b] < out[b - 1]; b--) {
            int x = out[b];
            out[b] = out[b - 1];
            out[b - 1] = x;
        }
    return n;
}
static const bench_row *row(const bench_table *t, row_kind kind, const char *model, const char *policy, int batch)
{
    for (int i = t->n - 1; i >= 0; i--) {
        const bench_row *r = &t->rows[i];
        if (r->kind == kind && !strcmp(r->model, model) && !strcmp(r->policy, policy) && r->batch == batch) return r;
    }
    return NULL;
}
static int ok(const bench_row *r)
{
    return r && !strcmp(r->status, "ok");
}

/* The batch the context and time figures show: the largest at which every
 * policy's train run fit; without train rows, the accuracy rows (batch 0). */
static int reference_batch(const bench_table *t, const char *model, row_kind *kind)
{
    int bs[32];
    const int nb = batches_of(t, model, ROW_TRAIN, bs, 32);
    names pol;
    policies_of(t, model, ROW_TRAIN, &pol);
    *kind = ROW_TRAIN;
    for (int b = nb - 1; b >= 0; b--) {
        int all = 1;
        for (int p = 0; p < pol.n; p++) {
            const bench_row *r = row(t, ROW_TRAIN, model, pol.v[p], bs[b]);
            if (r && strcmp(r->status, "ok") && strcmp(r->status, "n/a")) all = 0;
        }
        if (all) return bs[b];
    }
    if (nb) return bs[0];
    *kind = ROW_ACCURACY;
    return 0;
}

static const char *bytes(double b, char *buf)
{
    if (isnan(b)) return "-";
    return actc_format_bytes((size_t)b, buf, 32);
}

/* ---- markdown ---------------------------------------------------------------------- */
static void md_context(FILE *f, const bench_table *t, const names *models)
{
    fprintf(f, "## Context before backward, by kind\n\nWhat the store holds when backward begins (the memory table's "
               "\"context before backward\"), against what `none` keeps for the same step, at the largest batch every "
               "policy fit.\n\n"
               "| model | policy | batch | stored | none | smaller | ACT | MASK | INDEX | EXACT |\n"
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int m = 0; m < models->n; m++) {
        row_kind k;
        const int b = reference_batch(t, models->v[m], &k);
        names pol;
        policies_of(t, models->v[m], k, &pol);
        for (int p = 0; p < pol.n; p++) {
            const bench_row *r = row(t, k, models->v[m], pol.v[p], b);
            if (!ok(r)) continue;
            char a[6][32], batch[32] = "recipe";
            if (k != ROW_ACCURACY) snprintf(batch, sizeof batch, "%d", b);
            fprintf(f, "| %s | %s | %s | %s | %s | %.2fx | %s | %s | %s | %s |\n", r->model, r->policy, batch,
                    bytes(r->ctx_B, a[0]),
                    bytes(r->ctx_none_B, a[1]), r->ctx_ratio, bytes(r->act_B, a[2]), bytes(r->mask_B, a[3]),
                    bytes(r->index_B, a[4]), bytes(r->exact_B, a[5]));
        }
    }
    fputc('\n', f);
}

/* 1 if t has a row of that kind with a batch (a run, not an n/a note). */
static int has_runs(const bench_table *t, row_kind kind)
{
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].kind == kind && t->rows[i].batch > 0) return 1;
    return 0;
}

static void md_throughput(FILE *f, const bench_table *t, const names *models, const char *budget)
{
    if (!has_runs(t, ROW_TRAIN)) return;
    fprintf(f, "## Throughput against batch size\n\nSamples per second (tokens per second for language models) of "
               "the second epoch of each train run; **OOM**: the run stopped at the budget (%s); the allocator peak "
               "and the process peak RSS of each run are in results.csv.\n\n",
            budget);
    for (int m = 0; m < models->n; m++) {
        int bs[32];
        const int nb = batches_of(t, models->v[m], ROW_TRAIN, bs, 32);
        if (!nb) continue;
        names pol;
        policies_of(t, models->v[m], ROW_TRAIN, &pol);
        names peer;
        policies_of(t, models->v[m], ROW_TORCH, &peer);
        fprintf(f, "%s:\n\n| policy |", models->v[m]);
        for (int b = 0; b < nb; b++) fprintf(f, " batch %d |", bs[b]);
        fprintf(f, "\n|---|");
        for (int b = 0; b < nb; b++) fprintf(f, "---:|");
        fputc('\n', f);
        for (int p = 0; p < pol.n + peer.n; p++) {
            const int is_peer = p >= pol.n;
            const char *name = is_peer ? peer.v[p - pol.n] : pol.v[p];
            fprintf(f, "| %s |", name);
            for (int b = 0; b < nb; b++) {
                const bench_row *r = row(t, is_peer ? ROW_TORCH : ROW_TRAIN, models->v[m], name, bs[b]);
                if (ok(r)) fprintf(f, " %.1f |", bench_row_rate(r));
                else fprintf(f, " %s |", !r ? "-" : !strcmp(r->status, "oom") ? "**OOM**" : r->status);
            }
            fputc('\n', f);
        }
        fputc('\n', f);
        for (int i = 0; i < t->n; i++) {
            const bench_row *r = &t->rows[i];
            if (r->kind == ROW_TRAIN && !strcmp(r->model, models->v[m]) && !strcmp(r->status, "n/a"))
                fprintf(f, "%s, %s: not run (%s).\n\n", r->model, r->policy, r->note);
        }
    }
}

static void md_maxbatch(FILE *f, const bench_table *t, const names *models, const char *budget)
{
    int any = 0;
    for (int i = 0; i < t->n; i++) any |= t->rows[i].kind == ROW_MAXBATCH;
    if (!any) return;
    fprintf(f, "## The largest batch under %s\n\n`actc maxbatch`, bisection to within %d samples (language models: %d "
               "window); for language models in the paper suite also the longest window at batch 1, to within %d "
               "tokens, up to %d.  0: not even the smallest fits; >= N: the search stopped at its limit N, which "
               "fit.\n\n"
               "| model | policy | largest batch | its allocator peak | longest window (tokens) |\n"
               "|---|---|---:|---:|---:|\n",
            budget, BENCH_RES_IMAGE, BENCH_RES_LM, BENCH_RES_SEQ, BENCH_SEQ_LIMIT);
    for (int m = 0; m < models->n; m++) {
        names pol;
        policies_of(t, models->v[m], ROW_MAXBATCH, &pol);
        for (int p = 0; p < pol.n; p++) {
            const bench_row *r = row(t, ROW_MAXBATCH, models->v[m], pol.v[p], 0);
            const bench_row *s = row(t, ROW_MAXSEQ, models->v[m], pol.v[p], 1);
            char a[32], sq[32] = "-", lb[32];
            if (s && isnan(s->longest_window)) snprintf(sq, sizeof sq, "%s", s->status);
            else if (s) snprintf(sq, sizeof sq, "%s%.0f", s->at_limit ? ">= " : "", s->longest_window);
            if (!isnan(r->largest_batch)) snprintf(lb, sizeof lb, "%s%.0f", r->at_limit ? ">= " : "", r->largest_batch);
            else snprintf(lb, sizeof lb, "%s", r->status);
            fprintf(f, "| %s | %s | %s | %s | %s |\n", r->model, r->policy, lb, bytes(r->alloc_peak_B, a), sq);
        }
    }
    fputc('\n', f);
    for (int i = 0; i < t->n; i++) {
        const bench_row *r = &t->rows[i];
        if (r->kind == ROW_MAXSEQ && !strcmp(r->status, "n/a"))
            fprintf(f, "%s, %s: no longest window (%s).\n\n", r->model, r->policy, r->note);
    }
}

static void md_time(FILE *f, const bench_table *t, const names *models)
{
    if (!has_runs(t, ROW_TRAIN)) return;
    fprintf(f, "## Where a step's time goes\n\nMilliseconds per step of the second epoch at the context table's batch: "
               "forward and backward, each split into the codecs' share (encode and decode, timed by the store; in "
               "backward also a recomputed segment's encodes) and the rest, the optimizer update, and the controller "
               "(GACT's sensitivity passes and bookkeeping).\n\n"
               "| model | policy | forward | codecs in forward | backward | codecs in backward | update | controller "
               "| step |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int m = 0; m < models->n; m++) {
        row_kind k;
        const int b = reference_batch(t, models->v[m], &k);
        if (k != ROW_TRAIN) continue;
        names pol;
        policies_of(t, models->v[m], k, &pol);
        for (int p = 0; p < pol.n; p++) {
            const bench_row *r = row(t, k, models->v[m], pol.v[p], b);
            if (!ok(r)) continue;
            fprintf(f, "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", r->model, r->policy,
                    r->forward_ms - r->codec_forward_ms, r->codec_forward_ms, r->backward_ms - r->codec_backward_ms,
                    r->codec_backward_ms, r->update_ms, r->controller_ms, r->step_ms);
        }
    }
    fputc('\n', f);
}

/* A recipe's flags as `actc CMD FLAGS`. */
static void recipe(FILE *f, const char *cmd, const char *const *args)
{
    fprintf(f, "`actc %s", cmd);
    for (; *args; args++) fprintf(f, " %s", *args);
    fputc('`', f);
}

static void md_accuracy(FILE *f, const bench_table *t, const names *models)
{
    int any = 0;
    for (int i = 0; i < t->n; i++) any |= t->rows[i].kind == ROW_ACCURACY;
    if (!any) return;
    fprintf(f, "## Accuracy of a short fixed recipe\n\nImage models: ");
    recipe(f, "train", bench_acc_image);
    fprintf(f, " (test accuracy on the test images used); language models: ");
    recipe(f, "train", bench_acc_lm);
    fprintf(f, " (validation bits per byte).  One seed: a difference within the spread between seeds (bench/RESULTS.md "
               "gives it) is not a difference.\n\n"
               "| model | policy | test accuracy | val bpb | context | smaller | allocator peak | peak RSS | "
               "throughput |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int m = 0; m < models->n; m++) {
        names pol;
        policies_of(t, models->v[m], ROW_ACCURACY, &pol);
        for (int p = 0; p < pol.n; p++) {
            const bench_row *r = row(t, ROW_ACCURACY, models->v[m], pol.v[p], 0);
            char a[3][32], acc[32] = "-", bpb[32] = "-";
            if (!ok(r)) {
                if (r) fprintf(f, "| %s | %s | %s | | | | | | |\n", r->model, r->policy, r->status);
                continue;
            }
            if (!isnan(r->test_acc)) snprintf(acc, sizeof acc, "%.2f%%", 100 * r->test_acc);
            if (!isnan(r->val_bpb)) snprintf(bpb, sizeof bpb, "%.3f", r->val_bpb);
            fprintf(f, "| %s | %s | %s | %s | %s | %.2fx | %s | %s | %.1f/s |\n", r->model, r->policy, acc, bpb,
                    bytes(r->ctx_B, a[0]), r->ctx_ratio, bytes(r->alloc_peak_B, a[1]), bytes(r->rss_peak_B, a[2]),
                    bench_row_rate(r));
        }
    }
    fputc('\n', f);
}

static void md_variance(FILE *f, const bench_table *t, const names *models)
{
    int any = 0;
    for (int i = 0; i < t->n; i++) any |= t->rows[i].kind == ROW_VARIANCE;
    if (!any) return;
    fprintf(f, "## Gradient variance against bits (ActNN's Figure 5)\n\nThe variance compression adds to the gradient "
               "over the variance SGD's sampling has anyway, summed over every parameter (");
    recipe(f, "variance --compress quant:B", bench_variance_args);
    fprintf(f, ").\n\n| model | policy | variance / SGD's |\n|---|---|---:|\n");
    for (int i = 0; i < t->n; i++) {
        const bench_row *r = &t->rows[i];
        if (r->kind != ROW_VARIANCE) continue;
        if (ok(r)) fprintf(f, "| %s | %s | %.4g |\n", r->model, r->policy, r->variance_ratio);
        else fprintf(f, "| %s | %s | %s |\n", r->model, r->policy, r->status);
    }
    (void)models;
    fputc('\n', f);
}

/* ---- plots --------------------------------------------------------------------------- */
/* The head of a plot script: PNG now, the same plot as SVG after it. */
static void gp_begin(FILE *g, const char *name, const char *title, const char *xlabel, const char *ylabel)
{
    fprintf(g, "reset\nset terminal pngcairo noenhanced size 960,540 font ',11'\n"
               "set output '%s.png'\nset title \"%s\"\nset xlabel \"%s\"\nset ylabel \"%s\"\n"
               "set grid ytics\nset key outside right top\n",
            name, title, xlabel, ylabel);
}
static void gp_end(FILE *g, const char *name)
{
    fprintf(g, "set terminal svg noenhanced size 960,540 dynamic\nset output '%s.svg'\nreplot\nunset output\n", name);
}

/* A bar per policy of the reference rows, its series stacked (or side by
 * side when clustered): values() gives a row's ns figures. */
static int plot_bars(FILE *g, const char *dir, const char *name, const char *title, const char *ylabel,
                     const bench_table *t, const char *model, row_kind k, int b, const char *const *series, int ns,
                     void (*values)(const bench_row *, double *), int clustered)
{
    char path[PATH_MAX];
    bench_path(path, sizeof path, "%s/%s.dat", dir, name);
    FILE *d = fopen(path, "w");
    if (!d) return 0;
    names pol;
    policies_of(t, model, k, &pol);
    int rows = 0;
    for (int p = 0; p < pol.n; p++) {
        const bench_row *r = row(t, k, model, pol.v[p], b);
        /* a search where not even the smallest fits plots as 0 */
        const int none_fit = r && (k == ROW_MAXBATCH || k == ROW_MAXSEQ) && !strcmp(r->status, "oom");
        if (!ok(r) && !none_fit) continue;
        double v[8];
        values(r, v);
        fprintf(d, "\"%s\"", r->policy);
        for (int s = 0; s < ns; s++) fprintf(d, " %.6g", v[s]);
        fputc('\n', d);
        rows++;
    }
    fclose(d);
    if (!rows) return 0;
    gp_begin(g, name, title, "policy", ylabel);
    fprintf(g, "set style data histograms\nset style histogram %s\nset style fill solid 0.8 border -1\n"
               "set boxwidth %s\nset xtics rotate by -30\nset yrange [0:*]\nplot ",
            clustered ? "clustered gap 1" : "rowstacked", clustered ? "0.9" : "0.7");
    for (int s = 0; s < ns; s++)
        fprintf(g, "%s'%s.dat' using %d%s title '%s'", s ? ", " : "", name, s + 2, s ? "" : ":xtic(1)", series[s]);
    fputc('\n', g);
    gp_end(g, name);
    return 1;
}

static void context_values(const bench_row *r, double *v)
{
    v[0] = r->act_B / MIB;
    v[1] = r->mask_B / MIB;
    v[2] = r->index_B / MIB;
    v[3] = r->exact_B / MIB;
}
static void time_values(const bench_row *r, double *v)
{
    v[0] = r->forward_ms - r->codec_forward_ms;
    v[1] = r->codec_forward_ms;
    v[2] = r->backward_ms - r->codec_backward_ms;
    v[3] = r->codec_backward_ms;
    v[4] = r->update_ms;
    v[5] = r->controller_ms;
}
static void memory_values(const bench_row *r, double *v)
{
    v[0] = r->ctx_B / MIB;
    v[1] = r->alloc_peak_B / MIB;
    v[2] = r->rss_peak_B / MIB;
}
static void largest_values(const bench_row *r, double *v)
{
    v[0] = r->kind == ROW_MAXSEQ ? r->longest_window : r->largest_batch;
}
static void accuracy_values(const bench_row *r, double *v)
{
    v[0] = isnan(r->val_bpb) ? 100 * r->test_acc : r->val_bpb;
}

/* Throughput against batch: a line per policy (and the PyTorch peer), and
 * in the same colour a cross on the axis at each batch over the budget
 * (the policies' crosses side by side around it). */
static int plot_throughput(FILE *g, const char *dir, const bench_table *t, const char *model, const char *budget)
{
    char name[96], path[PATH_MAX];
    snprintf(name, sizeof name, "throughput_%s", model);
    bench_path(path, sizeof path, "%s/%s.dat", dir, name);
    int bs[32];
    const int nb = batches_of(t, model, ROW_TRAIN, bs, 32);
    names pol, peer;
    policies_of(t, model, ROW_TRAIN, &pol);
    policies_of(t, model, ROW_TORCH, &peer);
    FILE *d = nb ? fopen(path, "w") : NULL;
    if (!d) return 0;
    /* two blocks per series: its points, then its OOM batches (a dummy
     * point off the axis when none, so that every block has one) */
    int series = 0, any = 0;
    for (int p = 0; p < pol.n + peer.n; p++) {
        const int is_peer = p >= pol.n;
        const char *pn = is_peer ? peer.v[p - pol.n] : pol.v[p];
        int pts = 0, ooms = 0;
        fprintf(d, "%s\"%s\"\n", series ? "\n\n" : "", pn);
        for (int b = 0; b < nb; b++) {
            const bench_row *r = row(t, is_peer ? ROW_TORCH : ROW_TRAIN, model, pn, bs[b]);
            if (ok(r) && (pts += 1)) fprintf(d, "%d %.6g\n", bs[b], bench_row_rate(r));
        }
        if (!pts) fprintf(d, "%d NaN\n", bs[0]);
        fprintf(d, "\n\n\"%s: over %s\"\n", pn, budget);
        for (int b = 0; b < nb; b++) {
            const bench_row *r = row(t, ROW_TRAIN, model, pn, bs[b]);
            if (!is_peer && r && !strcmp(r->status, "oom") && (ooms += 1)) fprintf(d, "%d 0\n", bs[b]);
        }
        if (!ooms) fprintf(d, "%d NaN\n", bs[0]);
        any |= pts || ooms;
        series++;
    }
    fclose(d);
    if (!any) return 0;
    const int lm = actc_model_name_takes_tokens(model);
    char title[200];
    snprintf(title, sizeof title, "%s: throughput against batch size; x on the axis: over the budget (%s)", model,
             budget);
    gp_begin(g, name, title, lm ? "batch (windows)" : "batch (samples)", lm ? "tokens per second" : "samples per second");
    fprintf(g, "set logscale x 2\nset yrange [0:*]\nset offsets graph 0.05, graph 0.05, graph 0.05, 0\n"
               "plot for [i=0:%d] '%s.dat' index 2*i using 1:2 with linespoints lw 2 pt 7 lc i+1 title columnheader(1), "
               "for [i=0:%d] '%s.dat' index 2*i+1 using ($1*2**(0.12*(i-%g))):2 with points pt 2 ps 3 lw 3 lc i+1 "
               "notitle\n",
            series - 1, name, series - 1, name, (series - 1) / 2.0);
    gp_end(g, name);
    return 1;
}

static int plot_variance(FILE *g, const char *dir, const bench_table *t, const names *models)
{
    char path[PATH_MAX];
    bench_path(path, sizeof path, "%s/variance.dat", dir);
    FILE *d = fopen(path, "w");
    if (!d) return 0;
    int blocks = 0;
    for (int m = 0; m < models->n; m++) {
        int pts = 0;
        for (int i = 0; i < t->n; i++) {
            const bench_row *r = &t->rows[i];
            if (r->kind != ROW_VARIANCE || strcmp(r->model, models->v[m]) || !ok(r) || !(r->variance_ratio > 0)) continue;
            if (!pts++) fprintf(d, "%s\"%s\"\n", blocks ? "\n\n" : "", r->model);
            fprintf(d, "%s %.6g\n", strchr(r->policy, ':') ? strchr(r->policy, ':') + 1 : r->policy, r->variance_ratio);
        }
        blocks += pts > 0;
    }
    fclose(d);
    if (!blocks) return 0;
    gp_begin(g, "variance", "gradient variance from compression over SGD's variance", "bits per element (quant:B)",
             "variance ratio");
    fprintf(g, "set logscale y\nset xtics (1,2,3,4,8)\nplot for [i=0:%d] 'variance.dat' index i using 1:2 with "
               "linespoints lw 2 pt 7 title columnheader(1)\n",
            blocks - 1);
    gp_end(g, "variance");
    return 1;
}

static int file_size(const char *dir, const char *name, const char *ext)
{
    char p[PATH_MAX];
    struct stat st;
    bench_path(p, sizeof p, "%s/%s.%s", dir, name, ext);
    return stat(p, &st) == 0 && st.st_size > 0;
}

/* Writes the scripts, runs gnuplot once over all of them; returns the
 * plots made (their names appended to the report's list). */
static int plots(const bench_report_opts *o, const bench_table *t, const names *models, FILE *md)
{
    char dir[PATH_MAX], script[PATH_MAX], log[PATH_MAX], budget[32] = "no budget";
    bench_path(dir, sizeof dir, "%s/plots", o->out_dir);
    if (mkdir(dir, 0755) && access(dir, W_OK)) return 0;
    if (o->budget) actc_format_bytes(o->budget, budget, sizeof budget);
    bench_path(script, sizeof script, "%s/plots.gp", dir);
    FILE *g = fopen(script, "w");
    if (!g) return 0;
    char made[64][96];
    int n = 0;
    static const char *const KINDS[] = {"ACT", "MASK", "INDEX", "EXACT"};
    static const char *const PARTS[] = {"forward", "codecs in forward", "backward", "codecs in backward", "update",
                                        "controller"};
    static const char *const ONE[] = {"largest batch"};
    for (int m = 0; m < models->n && n < 56; m++) {
        const char *model = models->v[m];
        row_kind k;
        const int b = reference_batch(t, model, &k);
        char name[96], title[200];
        snprintf(name, sizeof name, "context_%s", model);
        char at[48] = "the accuracy recipe";
        if (k == ROW_TRAIN) snprintf(at, sizeof at, "batch %d", b);
        snprintf(title, sizeof title, "%s: context before backward by kind (%s)", model, at);
        if (plot_bars(g, dir, name, title, "MiB", t, model, k, b, KINDS, 4, context_values, 0)) snprintf(made[n++], 96, "%s", name);
        static const char *const MEM[] = {"context before backward", "allocator peak", "process peak RSS"};
        snprintf(name, sizeof name, "memory_%s", model);
        snprintf(title, sizeof title, "%s: memory (%s)", model, at);
        if (plot_bars(g, dir, name, title, "MiB", t, model, k, b, MEM, 3, memory_values, 1)) snprintf(made[n++], 96, "%s", name);
        if (plot_throughput(g, dir, t, model, budget)) snprintf(made[n++], 96, "throughput_%s", model);
        snprintf(name, sizeof name, "time_%s", model);
        snprintf(title, sizeof title, "%s: time per step at batch %d", model, b);
        if (k == ROW_TRAIN && plot_bars(g, dir, name, title, "ms per step", t, model, k, b, PARTS, 6, time_values, 0))
            snprintf(made[n++], 96, "%s", name);
        snprintf(name, sizeof name, "maxbatch_%s", model);
        snprintf(title, sizeof title, "%s: the largest batch under %s", model, budget);
        if (plot_bars(g, dir, name, title, "batch (samples)", t, model, ROW_MAXBATCH, 0, ONE, 1, largest_values, 0))
            snprintf(made[n++], 96, "%s", name);
        static const char *const SEQ[] = {"longest window"};
        snprintf(name, sizeof name, "maxseq_%s", model);
        snprintf(title, sizeof title, "%s: the longest window at batch 1 under %s (a bar at %d: at least)", model,
                 budget, BENCH_SEQ_LIMIT);
        if (plot_bars(g, dir, name, title, "tokens", t, model, ROW_MAXSEQ, 1, SEQ, 1, largest_values, 0))
            snprintf(made[n++], 96, "%s", name);
        const int lm = actc_model_name_takes_tokens(model);
        const char *acc[] = {lm ? "validation bits per byte" : "test accuracy (%)"};
        snprintf(name, sizeof name, "accuracy_%s", model);
        snprintf(title, sizeof title, "%s: %s after the short recipe", model, acc[0]);
        if (plot_bars(g, dir, name, title, acc[0], t, model, ROW_ACCURACY, 0, acc, 1, accuracy_values, 0))
            snprintf(made[n++], 96, "%s", name);
    }
    if (plot_variance(g, dir, t, models)) snprintf(made[n++], 96, "variance");
    fclose(g);
    if (!n) return 0;
    bench_path(log, sizeof log, "%s/gnuplot.log", dir);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd) || chdir(dir)) return 0;
    char *const argv[] = {(char *)o->gnuplot, "plots.gp", NULL};
    const int rc = bench_spawn(argv, "gnuplot.log", 0, NULL, NULL);
    if (chdir(cwd)) return 0;
    if (rc != 0) {
        fprintf(md, "No plots: %s did not run (exit %d; %s). The tables above hold every figure; Debian: apt-get "
                    "install gnuplot-nox.\n",
                o->gnuplot, rc, log);
        printf("note: no plots: %s did not run (see %s); the report has the tables\n", o->gnuplot, log);
        return 0;
    }
    int good = 0;
    fprintf(md, "## Plots\n\n");
    for (int i = 0; i < n; i++)
        if (file_size(dir, made[i], "png") && file_size(dir, made[i], "svg")) {
            fprintf(md, "![%s](plots/%s.png)\n\n", made[i], made[i]);
            good++;
        }
    return good;
}

int bench_report(const bench_report_opts *o, const bench_table *t)
{
    char path[PATH_MAX], tmp[PATH_MAX], budget[32] = "none";
    bench_path(path, sizeof path, "%s/report.md", o->out_dir);
    bench_path(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "we");
    if (!f) {
        fprintf(stderr, "error: cannot write %s\n", tmp);
        return -1;
    }
    if (o->budget) actc_format_bytes(o->budget, budget, sizeof budget);
    names models;
    models_of(t, &models);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(f, "# actc bench: %s suite\n\nGenerated by `%s` (actc %s) from results.csv, every figure measured by a "
               "child `actc` run in the same suite: budget %s, %d thread(s) per run, on a machine with %ld core(s). "
               "Each run's own output is in runs/.\n\n",
            o->suite, o->command, actc_version(), budget, o->threads, cores);
    int failed = 0;
    for (int i = 0; i < t->n; i++) failed += !strcmp(t->rows[i].status, "failed");
    if (failed) fprintf(f, "**%d run(s) failed**; their rows say why (results.csv, note) and runs/ has their output.\n\n", failed);
    if (o->note) fprintf(f, "Note: %s.\n\n", o->note);
    md_context(f, t, &models);
    md_throughput(f, t, &models, budget);
    md_maxbatch(f, t, &models, budget);
    md_time(f, t, &models);
    md_accuracy(f, t, &models);
    md_variance(f, t, &models);
    int n = 0;
    if (o->gnuplot) n = plots(o, t, &models, f);
    int bad = fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        fprintf(stderr, "error: writing %s failed\n", path);
        return -1;
    }
    return n;
}

void bench_print_side_by_side(const bench_table *t)
{
    names models;
    models_of(t, &models);
    for (int m = 0; m < models.n; m++) {
        names pol;
        policies_of(t, models.v[m], ROW_ACCURACY, &pol);
        if (!pol.n) continue;
        const bench_row *r[8];
        int n = 0;
        for (int p = 0; p < pol.n && n < 8; p++) {
            const bench_row *x = row(t, ROW_ACCURACY, models.v[m], pol.v[p], 0);
            if (ok(x)) r[n++] = x;
        }
        if (!n) continue;
        printf("\n%s, the same short recipe under each policy:\n%-26s", models.v[m], "");
        for (int i = 0; i < n; i++) printf(" %16s", r[i]->policy);
        char a[32];
        printf("\n%-26s", isnan(r[0]->val_bpb) ? "test accuracy" : "validation bits per byte");
        for (int i = 0; i < n; i++)
            if (isnan(r[i]->val_bpb)) printf(" %15.2f%%", 100 * r[i]->test_acc);
            else printf(" %16.3f", r[i]->val_bpb);
        printf("\n%-26s", "context before backward");
        for (int i = 0; i < n; i++) printf(" %16s", bytes(r[i]->ctx_B, a));
        printf("\n%-26s", "  smaller than none");
        for (int i = 0; i < n; i++) printf(" %15.2fx", r[i]->ctx_ratio);
        printf("\n%-26s", "allocator peak");
        for (int i = 0; i < n; i++) printf(" %16s", bytes(r[i]->alloc_peak_B, a));
        printf("\n%-26s", "process peak RSS");
        for (int i = 0; i < n; i++) printf(" %16s", bytes(r[i]->rss_peak_B, a));
        printf("\n%-26s", r[0]->seq ? "tokens per second" : "samples per second");
        for (int i = 0; i < n; i++) printf(" %16.1f", bench_row_rate(r[i]));
        printf("\n%-26s", "  speed against the first");
        for (int i = 0; i < n; i++) printf(" %15.2fx", bench_row_rate(r[i]) / bench_row_rate(r[0]));
        printf("\n\n");
    }
}
