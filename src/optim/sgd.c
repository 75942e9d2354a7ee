/* SGD as torch.optim.SGD with dampening 0:
 *   g = grad + wd * p                       (L2 decay added to the gradient)
 *   momentum m > 0:  v = m v + g            (v starts at 0, so step 1 gives v = g,
 *                                            as PyTorch's clone of the first grad)
 *                    g = nesterov ? g + m v : v
 *   p -= lr * g
 * With momentum 0 there is no state at all. */
#include "optim.h"
#include <math.h>
#include <string.h>

static void sgd_update(const actc_optim *o, actc_tensor *p, actc_tensor **st, float lr,
                       uint64_t step)
{
    (void)step;
    float *w = p->data;
    const float *g = p->grad->data;
    const float m = o->momentum, wd = o->weight_decay;
    const long n = (long)p->numel;
    if (m == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n >= ACTC_OPTIM_PAR_MIN)
        for (long i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            w[i] -= lr * gi;
        }
        return;
    }
    float *v = st[0]->data;
    const int nesterov = o->nesterov;
#pragma omp parallel for simd schedule(static) if (n >= ACTC_OPTIM_PAR_MIN)
    for (long i = 0; i < n; i++) {
        float gi = g[i] + wd * w[i];
        float vi = m * v[i] + gi;
        v[i] = vi;
        w[i] -= lr * (nesterov ? gi + m * vi : vi);
    }
}

/* The same recurrence in a subspace (a low-rank gradient), decay apart. */
static void sgd_direction(const actc_optim *o, const float *g, actc_tensor **st, float *d, size_t n, uint64_t step)
{
    (void)step;
    const float m = o->momentum;
    if (m == 0.0f) {
        memcpy(d, g, n * sizeof *d);
        return;
    }
    float *v = st[0]->data;
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
