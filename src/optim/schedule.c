/* Learning-rate schedules: a pure function of the (0-based) global step, so a
 * resumed run recomputes the rate from the step counter alone.
 *
 * Warm-up (warmup_steps = W > 0): steps 0..W-1 get base_lr * (step+1) / W,
 * rising linearly from base_lr/W to base_lr (a rate of exactly 0 at step 0
 * would waste a step).  The schedule proper then runs on t = step - W:
 *  - constant: base_lr;
 *  - step:     base_lr * gamma^floor(t / step_size) (step_size 0: no decay);
 *  - cosine:   min_lr + (base_lr - min_lr) (1 + cos(pi t / T)) / 2 with
 *              T = total_steps - W, as PyTorch's CosineAnnealingLR; from t = T
 *              on (or if 0 < total_steps <= W) the rate stays at min_lr;
 *              total_steps 0 (no horizon given) is no decay, as step_size 0
 *              is for the step schedule: a caller that forgot the horizon
 *              keeps training at base_lr instead of stopping at min_lr.
 * Computed in double, returned as float. */
#include "actc.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

float actc_lr_at(const actc_lr_schedule *s, uint64_t step)
{
    if (!s) return 0.0f;
    const double base = s->base_lr;
    const uint64_t W = s->warmup_steps;
    if (W > 0 && step < W) return (float)(base * (double)(step + 1) / (double)W);
    const uint64_t t = step - W;
    switch (s->kind) {
    case ACTC_LR_STEP:
        if (s->step_size == 0) return (float)base;
        return (float)(base * pow((double)s->gamma, (double)(t / s->step_size)));
    case ACTC_LR_COSINE: {
        if (s->total_steps == 0) return (float)base;
        const uint64_t T = s->total_steps > W ? s->total_steps - W : 0;
        if (t >= T) return s->min_lr;
        const double minlr = s->min_lr;
        const double pi = 3.14159265358979323846;
        return (float)(minlr + (base - minlr) * 0.5 * (1.0 + cos(pi * (double)t / (double)T)));
    }
    case ACTC_LR_CONSTANT:
    default:
        return (float)base;
    }
}

/* "const" (or "constant"), "cosine", "step:STEP_SIZE:GAMMA" with STEP_SIZE a
 * positive integer number of steps and GAMMA a finite number > 0.  Sets kind
 * and, for "step", step_size and gamma; every other field (base_lr, min_lr,
 * warmup_steps, total_steps) is the caller's.  *s is untouched on error. */
actc_status actc_lr_parse(const char *spec, actc_lr_schedule *s)
{
    if (!spec || !s) return actc_set_error(ACTC_ERR_INVALID, "actc_lr_parse: NULL argument");
    if (!strcmp(spec, "const") || !strcmp(spec, "constant")) {
        s->kind = ACTC_LR_CONSTANT;
        return ACTC_OK;
    }
    if (!strcmp(spec, "cosine")) {
        s->kind = ACTC_LR_COSINE;
        return ACTC_OK;
    }
    if (!strncmp(spec, "step:", 5)) {
        char size_s[32];
        const char *colon = strchr(spec + 5, ':');
        const size_t len = colon ? (size_t)(colon - (spec + 5)) : 0;
        long long size;
        double gamma;
        if (!colon || len == 0 || len >= sizeof size_s) goto bad_step;
        memcpy(size_s, spec + 5, len);
        size_s[len] = '\0';
        /* The library's strict parsers: no sign tricks, spaces or hex. */
        if (actc_parse_int(size_s, 1, INT64_MAX, &size) != ACTC_OK || actc_parse_number(colon + 1, &gamma) != ACTC_OK ||
            !(gamma > 0.0) || gamma > 3.4e38)
            goto bad_step;
        s->kind = ACTC_LR_STEP;
        s->step_size = (uint64_t)size;
        s->gamma = (float)gamma;
        return ACTC_OK;
    bad_step:
        return actc_set_error(ACTC_ERR_INVALID,
                              "bad learning-rate schedule '%s': expected step:STEP_SIZE:GAMMA with "
                              "STEP_SIZE a positive integer and GAMMA > 0 (e.g. step:30:0.1)",
                              spec);
    }
    return actc_set_error(ACTC_ERR_INVALID,
                          "unknown learning-rate schedule '%s' (expected const, cosine or "
                          "step:STEP_SIZE:GAMMA)",
                          spec);
}

actc_status actc_lr_check(const actc_lr_schedule *s)
{
    if (!s) return actc_set_error(ACTC_ERR_INVALID, "actc_lr_check: NULL schedule");
    if (!isfinite(s->base_lr) || !(s->base_lr > 0.0f))
        return actc_set_error(ACTC_ERR_INVALID, "learning rate %g must be positive and finite", (double)s->base_lr);
    switch (s->kind) {
    case ACTC_LR_CONSTANT: return ACTC_OK;
    case ACTC_LR_COSINE:
        /* A floor above the peak would make the "decay" raise the rate. */
        if (!isfinite(s->min_lr) || !(s->min_lr >= 0.0f) || s->min_lr > s->base_lr)
            return actc_set_error(ACTC_ERR_INVALID,
                                  "the cosine schedule decays from the learning rate %g to its floor: the floor (min "
                                  "lr) %g must be in [0, %g]",
                                  (double)s->base_lr, (double)s->min_lr, (double)s->base_lr);
        return ACTC_OK;
    case ACTC_LR_STEP:
        if (s->step_size == 0 || !isfinite(s->gamma) || !(s->gamma > 0.0f) || s->gamma > 1.0f)
            return actc_set_error(ACTC_ERR_INVALID,
                                  "the step schedule decays the learning rate by GAMMA every STEP_SIZE steps: need "
                                  "STEP_SIZE > 0 and 0 < GAMMA <= 1 (got %llu and %g)",
                                  (unsigned long long)s->step_size, (double)s->gamma);
        return ACTC_OK;
    default: return actc_set_error(ACTC_ERR_INVALID, "unknown learning-rate schedule kind %d", (int)s->kind);
    }
}
