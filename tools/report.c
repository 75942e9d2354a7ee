/* The progress display (the memory report is the library's). */
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

