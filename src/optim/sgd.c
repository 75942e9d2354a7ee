/* SGD as torch.optim.SGD with dampening 0:
 *   g = grad + wd * p                       (L2 decay added to the gradient)
 *   momentum m > 0:  v = m v + g            (v starts at 0, so step 1 gives v = g,
 *                                            as PyTorch's clone of the first grad)
 *                    g = nesterov ? g + m v : v
 *   p -= lr * g
 * With momentum 0 there is no state at all. */
#include "optim.h"
#include "../core/core.h"
#include <math.h>
#include <string.h>

/* The update of n consecutive elements (v NULL: no momentum), compiled per
 * ISA level; element-wise, so every level gives the same bits. */
ACTC_ISA_CLONES static void sgd_range(float *w, const float *g, float *v, size_t n, float lr, float m, float wd,
                                      int nesterov)
{
    if (!v) {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            w[i] -= lr * gi;
        }
    } else if (nesterov) {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            float vi = m * v[i] + gi;
            v[i] = vi;
            w[i] -= lr * (gi + m * vi);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            float vi = m * v[i] + gi;
            v[i] = vi;
            w[i] -= lr * vi;
        }
    }
}

static void sgd_update(const actc_optim *o, float *w, const float *g, float *const *st, size_t n, float lr,
                       uint64_t step)
{
    (void)step;
    float *v = o->momentum == 0.0f ? NULL : st[0];
#pragma omp parallel if (n >= ACTC_OPTIM_PAR_MIN)
    {
        size_t lo, hi;
        actc__thread_share(n, &lo, &hi);
        if (lo < hi) sgd_range(w + lo, g + lo, v ? v + lo : NULL, hi - lo, lr, o->momentum, o->weight_decay, o->nesterov);
    }
}

/* The same recurrence in a subspace (a low-rank gradient), decay apart. */
static void sgd_direction(const actc_optim *o, const float *g, float *const *st, float *d, size_t n, uint64_t step)
{
    (void)step;
    const float m = o->momentum;
    if (m == 0.0f) {
        memcpy(d, g, n * sizeof *d);
        return;
    }
    float *v = st[0];
    for (size_t i = 0; i < n; i++) {
        float vi = m * v[i] + g[i];
        v[i] = vi;
        d[i] = o->nesterov ? g[i] + m * vi : vi;
    }
}

static const actc_optim_vt sgd_vt = {"sgd", sgd_update, sgd_direction};

actc_optim *actc_sgd_new(actc_tensor **params, int n, float momentum, int nesterov,
                         float weight_decay)
{
    if (!isfinite(momentum) || momentum < 0.0f) {
        actc_set_error(ACTC_ERR_INVALID, "sgd: momentum %g must be finite and >= 0", (double)momentum);
        return NULL;
    }
    if (!isfinite(weight_decay) || weight_decay < 0.0f) {
        actc_set_error(ACTC_ERR_INVALID, "sgd: weight decay %g must be finite and >= 0",
                       (double)weight_decay);
        return NULL;
    }
    if (nesterov && momentum == 0.0f) {
        /* PyTorch refuses this too: Nesterov without momentum is plain SGD in
         * disguise and almost always a configuration mistake. */
        actc_set_error(ACTC_ERR_INVALID, "sgd: nesterov requires a momentum > 0");
        return NULL;
    }
    actc_optim *o = actc__optim_new(&sgd_vt, params, n, momentum > 0.0f ? 1 : 0);
    if (!o) return NULL;
    o->momentum = momentum;
    o->nesterov = nesterov != 0;
    o->weight_decay = weight_decay;
    return o;
}
