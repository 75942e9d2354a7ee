/* AdamW as torch.optim.AdamW (amsgrad off), step t counted from 1:
 *   p *= 1 - lr * wd                        (decoupled decay, before the moments)
 *   m  = m + (1 - b1) (g - m)               (PyTorch's lerp form of b1 m + (1-b1) g)
 *   v  = b2 v + (1 - b2) g^2
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * The bias corrections are computed in double once per step, as PyTorch does
 * in Python floats.  t is the optimizer's step count, which equals PyTorch's
 * per-parameter count when every parameter has a gradient at every step (a
 * parameter skipped for lack of a gradient still sees the global count). */
#include "optim.h"
#include "../core/core.h"
#include <math.h>

/* One step's constants, in float as the update uses them. */
typedef struct {
    float decay, step_size, bc2_sqrt, one_m_b1, one_m_b2, b2, eps;
} adamw_k;

/* The update of n consecutive elements, compiled per ISA level: square
 * roots and divisions dominate, and AVX2 or AVX-512 take 8 or 16 lanes
 * where the baseline build takes 4.  Element-wise, without a reduction and
 * without contraction into FMA (ISO C), so every level gives the same
 * bits. */
ACTC_ISA_CLONES static void adamw_range(float *w, const float *g, float *m, float *v, size_t n, const adamw_k *k)
{
    const adamw_k c = *k;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float wi = w[i] * c.decay;
        float mi = m[i] + c.one_m_b1 * (gi - m[i]);
        float vi = c.b2 * v[i] + c.one_m_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        /* Same operation order as PyTorch's addcdiv_ (rounding included). */
        w[i] = wi - c.step_size * (mi / (sqrtf(vi) / c.bc2_sqrt + c.eps));
    }
}

static void adamw_update(const actc_optim *o, float *w, const float *g, float *const *st, size_t n, float lr,
                         uint64_t step)
{
    float *m = st[0], *v = st[1];
    const double b1 = o->beta1, b2 = o->beta2;
    const double bc1 = 1.0 - pow(b1, (double)step);
    const double bc2 = 1.0 - pow(b2, (double)step);
    const adamw_k k = {(float)(1.0 - (double)lr * (double)o->weight_decay), (float)((double)lr / bc1),
                       (float)sqrt(bc2), (float)(1.0 - b1), (float)(1.0 - b2), (float)b2, o->eps};
#pragma omp parallel if (n >= ACTC_OPTIM_PAR_MIN)
    {
        size_t lo, hi;
        actc__thread_share(n, &lo, &hi);
        if (lo < hi) adamw_range(w + lo, g + lo, m + lo, v + lo, hi - lo, &k);
    }
}

/* The same moments in a subspace (a low-rank gradient: CompAct keeps them
 * r x m), decay apart: d = m_hat / (sqrt(v_hat) + eps). */
static void adamw_direction(const actc_optim *o, const float *g, float *const *st, float *d, size_t n,
                            uint64_t step)
{
    float *m = st[0], *v = st[1];
    const double b1 = o->beta1, b2 = o->beta2;
    const float inv_bc1 = (float)(1.0 / (1.0 - pow(b1, (double)step)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)step));
    const float one_m_b1 = (float)(1.0 - b1), one_m_b2 = (float)(1.0 - b2), fb2 = (float)b2;
    for (size_t i = 0; i < n; i++) {
        float mi = m[i] + one_m_b1 * (g[i] - m[i]);
        float vi = fb2 * v[i] + one_m_b2 * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        d[i] = inv_bc1 * (mi / (sqrtf(vi) / bc2_sqrt + o->eps));
    }
}

static const actc_optim_vt adamw_vt = {"adamw", adamw_update, adamw_direction};

actc_optim *actc_adamw_new(actc_tensor **params, int n, float beta1, float beta2, float eps,
                           float weight_decay)
{
    if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f)) {
        actc_set_error(ACTC_ERR_INVALID, "adamw: betas (%g, %g) must be in [0, 1)", (double)beta1,
                       (double)beta2);
        return NULL;
    }
    if (!isfinite(eps) || eps < 0.0f) {
        actc_set_error(ACTC_ERR_INVALID, "adamw: eps %g must be finite and >= 0", (double)eps);
        return NULL;
    }
    if (!isfinite(weight_decay) || weight_decay < 0.0f) {
        actc_set_error(ACTC_ERR_INVALID, "adamw: weight decay %g must be finite and >= 0",
                       (double)weight_decay);
        return NULL;
    }
    actc_optim *o = actc__optim_new(&adamw_vt, params, n, 2);
    if (!o) return NULL;
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->weight_decay = weight_decay;
    return o;
}
