/* One configuration of actc bench in a fresh child process: the child is
 * the `actc` command itself (or a PyTorch peer script), so the figures are
 * the ones a user's single run prints, and the child's peak RSS is its
 * own. */
#define _GNU_SOURCE
#include "bench.h"
#include "cli.h"
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int bench_path(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < cap) return 0;
    if (cap) buf[0] = '\0';
    return 1;
}

int bench_spawn(char *const argv[], const char *out_path, int log_command, double *rss, double *secs)
{
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return 127;
    if (log_command) {
        FILE *f = fdopen(dup(fd), "w");
        if (f) {
            fputs("$", f);
            for (int i = 0; argv[i]; i++) fprintf(f, " %s", argv[i]);
            fputs("\n", f);
            fclose(f);
        }
    }
    fflush(NULL);
    const pid_t parent = getpid();
    const double t0 = now_seconds();
    pid_t pid = fork();
    if (pid < 0) {
        close(fd);
        return 127;
    }
    if (pid == 0) {
        /* A suite killed midway must not leave a configuration running
         * into the next one; only async-signal-safe calls until exec. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        int in = open("/dev/null", O_RDONLY);
        if (in < 0 || dup2(in, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(127);
        close(in);
        execvp(argv[0], argv);
        static const char msg[] = "cannot run the command (exec failed)\n";
        if (write(2, msg, sizeof msg - 1) < 0) _exit(127);
        _exit(127);
    }
    close(fd);
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &st, 0, &ru) < 0)
        if (errno != EINTR) return 127;
    if (secs) *secs = now_seconds() - t0;
    if (rss) *rss = (double)ru.ru_maxrss * 1024.0; /* Linux: KiB */
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return WEXITSTATUS(st);
}

/* The whole file (NUL-terminated; NULL if unreadable).  Children's logs
 * and outputs are small: a short run's lines. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *b = realloc(buf, cap *= 2);
        if (!b) {
            free(buf);
            buf = NULL;
        } else {
            buf = b;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

double bench_json_num(const char *json, const char *key, int last)
{
    if (!json) return NAN;
    char k[96];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *hit = NULL;
    for (const char *p = strstr(json, k); p; p = strstr(p + 1, k)) {
        hit = p;
        if (!last) break;
    }
    if (!hit) return NAN;
    char *end;
    const double v = strtod(hit + strlen(k), &end);
    return end == hit + strlen(k) ? NAN : v;
}

/* The last line of text holding needle (NUL-terminated in place), or NULL. */
static char *last_line_with(char *text, const char *needle)
{
    char *hit = NULL;
    for (char *p = text ? strstr(text, needle) : NULL; p; p = strstr(p + 1, needle)) hit = p;
    if (!hit) return NULL;
    while (hit > text && hit[-1] != '\n') hit--;
    hit[strcspn(hit, "\n")] = '\0';
    return hit;
}

/* The figures of an epoch record (actc train --log) a row takes as they are:
 * the record's key (the by-kind bytes under "KIND":{"stored") and the field. */
static const struct {
    const char *key;
    size_t off;
} EPOCH_FIELDS[] = {
    {"forward", offsetof(bench_row, forward_ms)},
    {"codec_forward", offsetof(bench_row, codec_forward_ms)},
    {"backward", offsetof(bench_row, backward_ms)},
    {"codec_backward", offsetof(bench_row, codec_backward_ms)},
    {"update", offsetof(bench_row, update_ms)},
    {"controller", offsetof(bench_row, controller_ms)},
    {"context_stored", offsetof(bench_row, ctx_B)},
    {"context_none", offsetof(bench_row, ctx_none_B)},
    {"context_ratio", offsetof(bench_row, ctx_ratio)},
    {"ACT\":{\"stored", offsetof(bench_row, act_B)},
    {"MASK\":{\"stored", offsetof(bench_row, mask_B)},
    {"INDEX\":{\"stored", offsetof(bench_row, index_B)},
    {"EXACT\":{\"stored", offsetof(bench_row, exact_B)},
    {"peak_total", offsetof(bench_row, alloc_peak_B)},
    {"train_loss", offsetof(bench_row, train_loss)},
    {"test_acc", offsetof(bench_row, test_acc)},
    {"val_bpb", offsetof(bench_row, val_bpb)},
};

/* A run's memory and time from its last epoch record. */
static void read_epoch(bench_row *r, const char *rec)
{
    const double seq = bench_json_num(rec, "seq", 0);
    if (!isnan(seq)) {
        r->seq = (int)seq;
        r->tokens_per_s = bench_json_num(rec, "tokens_per_s", 0);
    } else {
        r->samples_per_s = bench_json_num(rec, "samples_per_s", 0);
    }
    for (size_t i = 0; i < sizeof EPOCH_FIELDS / sizeof *EPOCH_FIELDS; i++)
        *(double *)((char *)r + EPOCH_FIELDS[i].off) = bench_json_num(rec, EPOCH_FIELDS[i].key, 0);
    r->step_ms = r->forward_ms + r->backward_ms + r->update_ms + r->controller_ms;
}

/* The child's last non-empty line, for a note. */
static void last_line(const char *text, char *note, size_t cap)
{
    if (!text) {
        snprintf(note, cap, "no output");
        return;
    }
    const char *end = text + strlen(text);
    while (end > text && (end[-1] == '\n' || end[-1] == ' ')) end--;
    const char *start = end;
    while (start > text && start[-1] != '\n') start--;
    snprintf(note, cap, "%.*s", (int)(end - start), start);
}

void bench_run_row(bench_row *r, char *const argv[], const char *log_path, const char *out_path)
{
    if (log_path) remove(log_path); /* a row run again starts afresh */
    double rss = NAN, secs = NAN;
    const int rc = bench_spawn(argv, out_path, 1, &rss, &secs);
    r->seconds = secs;
    char *out = slurp(out_path);
    if (rc != 0) {
        /* Over the budget is a result (the OOM point), not a failure. */
        const int oom = out && (strstr(out, "memory budget exceeded") || strstr(out, "not even"));
        snprintf(r->status, sizeof r->status, "%s", oom ? "oom" : "failed");
        if (oom && r->kind == ROW_MAXBATCH) r->largest_batch = 0;
        if (oom && r->kind == ROW_MAXSEQ) r->longest_window = 0;
        last_line(out, r->note, sizeof r->note);
        if (rc >= 128) snprintf(r->note, sizeof r->note, "killed by signal %d", rc - 128);
        free(out);
        return;
    }
    snprintf(r->status, sizeof r->status, "ok");
    char *json = NULL, *log = NULL;
    switch (r->kind) {
    case ROW_TRAIN:
    case ROW_ACCURACY:
        log = slurp(log_path);
        json = last_line_with(log, "\"event\":\"epoch\"");
        if (json) read_epoch(r, json);
        break;
    case ROW_MAXBATCH:
    case ROW_MAXSEQ:
        json = last_line_with(out, "\"largest\":");
        *(r->kind == ROW_MAXBATCH ? &r->largest_batch : &r->longest_window) = bench_json_num(json, "largest", 0);
        r->alloc_peak_B = bench_json_num(json, "peak", 0);
        r->at_limit = bench_json_num(json, "failing", 0) == 0; /* no size failed: --limit fits */
        break;
    case ROW_VARIANCE:
        json = last_line_with(out, "\"total\":");
        r->variance_ratio = bench_json_num(json, "ratio", 1);
        break;
    case ROW_TORCH:
        json = last_line_with(out, "\"peer\": \"pytorch\"");
        r->samples_per_s = bench_json_num(json, "samples_per_s", 0);
        r->tokens_per_s = bench_json_num(json, "tokens_per_s", 0);
        r->step_ms = bench_json_num(json, "step_ms", 0);
        if (isnan(r->step_ms)) {
            r->forward_ms = 1e3 * bench_json_num(json, "forward_s", 0);
            r->backward_ms = 1e3 * bench_json_num(json, "backward_s", 0);
            r->update_ms = 1e3 * bench_json_num(json, "optimizer_s", 0);
            r->step_ms = r->forward_ms + r->backward_ms + r->update_ms;
        }
        /* its own figure: bytes (pytorch_step.py) or MiB (pytorch_gpt.py) */
        r->rss_peak_B = bench_json_num(json, "peak_rss", 0);
        if (isnan(r->rss_peak_B)) r->rss_peak_B = 1048576.0 * bench_json_num(json, "peak_rss_mib", 0);
        break;
    default: break;
    }
    /* The child's own peak (VmHWM, as its memory table prints it): the
     * kernel's figure for a child starts from this process's at the fork. */
    if (r->kind != ROW_TORCH) r->rss_peak_B = bench_json_num(json, "peak_rss", 0);
    if (isnan(r->rss_peak_B)) r->rss_peak_B = rss;
    if (!json) {
        snprintf(r->status, sizeof r->status, "failed");
        snprintf(r->note, sizeof r->note, "no result record in %s", log ? log_path : out_path);
    }
    free(log);
    free(out);
}
