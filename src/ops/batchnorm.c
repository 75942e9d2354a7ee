/* 2-D batch normalisation over (N, H, W) for each channel.
 *
 * Training: y = (x - mean) * rstd * gamma + beta with the batch mean and the
 * biased variance (rstd = 1/sqrt(var + eps)), and the running statistics
 * move towards the batch's with PyTorch's convention
 *     r = (1 - momentum) * r + momentum * batch     (running_var: unbiased).
 * Saves: x as ACT (the policy may compress it), mean and rstd as EXACT (C
 * floats each: tiny, and backward divides by them).  A gamma that is not a
 * parameter is saved as EXACT too, since only parameters are guaranteed to
 * keep their data until backward.
 * Eval: the running statistics normalise, nothing is recorded.
 *
 * gamma/beta may be NULL (no affine transform); running_mean/var may be NULL
 * in training (no tracking) but are required in eval mode. */
#include "ops.h"
#include <math.h>

/* [C] vector check for gamma/beta/running stats; NULL is checked by callers. */
static int is_vec(const actc_tensor *t, int C)
{
    return t->data && t->ndim == 1 && t->shape[0] == C;
}

static actc_status bn_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0], *gamma = node->inputs[1], *beta = node->inputs[2];
    actc_tensor *xs = actc_load(ctx, node, 0);
    actc_tensor *ms = xs ? actc_load(ctx, node, 1) : NULL;
    actc_tensor *rs = ms ? actc_load(ctx, node, 2) : NULL;
    actc_tensor *gs = (rs && node->iattr[0]) ? actc_load(ctx, node, 3) : NULL;
    actc_status st = ACTC_OK;
    if (!rs || (node->iattr[0] && !gs)) {
        st = actc_last_status();
        goto done;
    }
    float *gx = actc_grad_of(ctx, x);
    float *gg = gamma ? actc_grad_of(ctx, gamma) : NULL;
    float *gb = beta ? actc_grad_of(ctx, beta) : NULL;
    if ((!gx && x->requires_grad) || (!gg && gamma && gamma->requires_grad) ||
        (!gb && beta && beta->requires_grad)) {
        st = ACTC_ERR_OOM; /* message set by actc_grad_of */
        goto done;
    }
    const float *g = gamma ? (gs ? gs->data : gamma->data) : NULL;
    const int N = x->shape[0], C = x->shape[1], HW = x->shape[2] * x->shape[3];
    const double M = (double)N * HW;
    const float *xd = xs->data, *mean = ms->data, *rstd = rs->data;
    const float *gy = node->output->grad->data;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        const float mu = mean[c], r = rstd[c];
        /* Per-plane float sums in a vectorised fixed-order reduction,
         * planes accumulated in double (as in the forward statistics). */
        double sdy = 0.0, sdyx = 0.0;
        for (int n = 0; n < N; n++) {
            const size_t off = ((size_t)n * C + c) * HW;
            float pdy = 0.0f, pdyx = 0.0f;
#pragma omp simd reduction(+ : pdy, pdyx)
            for (int i = 0; i < HW; i++) {
                const float dy = gy[off + i];
                pdy += dy;
                pdyx += dy * ((xd[off + i] - mu) * r);
            }
            sdy += pdy;
            sdyx += pdyx;
        }
        if (gb) gb[c] += (float)sdy;
        if (gg) gg[c] += (float)sdyx;
        if (!gx) continue;
        /* dx = gamma * rstd / M * (M dy - sum(dy) - xhat * sum(dy xhat)) */
        const float k = (float)((g ? g[c] : 1.0f) * r / M);
        const float a = (float)sdy, b = (float)sdyx, m = (float)M;
        for (int n = 0; n < N; n++) {
            const size_t off = ((size_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++) {
                const float xh = (xd[off + i] - mu) * r;
                gx[off + i] += k * (m * gy[off + i] - a - xh * b);
            }
        }
    }
done:
    actc_tensor_release(xs);
    actc_tensor_release(ms);
    actc_tensor_release(rs);
    actc_tensor_release(gs);
    return st;
}

actc_tensor *actc_batchnorm2d(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma, actc_tensor *beta,
                              actc_tensor *running_mean, actc_tensor *running_var, float momentum,
                              float eps)
{
    OP_CHECK(ctx, "batchnorm2d: NULL context");
    OP_CHECK(x && x->data, "batchnorm2d: input x is NULL or its data was already freed");
    char sx[64], sv[64];
    actc_shape_str(x, sx, sizeof sx);
    OP_CHECK(x->ndim == 4, "batchnorm2d: x must be [N, C, H, W], got %s", sx);
    const int N = x->shape[0], C = x->shape[1], HW = x->shape[2] * x->shape[3];
    const int training = actc_ctx_training(ctx);
    OP_CHECK(!gamma || is_vec(gamma, C), "batchnorm2d: gamma must be [%d] for x %s, got %s", C, sx,
             actc_shape_str(gamma, sv, sizeof sv));
    OP_CHECK(!beta || is_vec(beta, C), "batchnorm2d: beta must be [%d] for x %s, got %s", C, sx,
             actc_shape_str(beta, sv, sizeof sv));
    OP_CHECK(!running_mean || is_vec(running_mean, C),
             "batchnorm2d: running_mean must be [%d] for x %s, got %s", C, sx,
             actc_shape_str(running_mean, sv, sizeof sv));
    OP_CHECK(!running_var || is_vec(running_var, C),
             "batchnorm2d: running_var must be [%d] for x %s, got %s", C, sx,
             actc_shape_str(running_var, sv, sizeof sv));
    OP_CHECK(!running_mean == !running_var,
             "batchnorm2d: running_mean and running_var must both be given or both be NULL");
    OP_CHECK(training || running_mean, "batchnorm2d: eval mode needs running_mean and running_var");
    OP_CHECK(eps > 0.0f && isfinite(eps), "batchnorm2d: eps must be positive, got %g", (double)eps);
    OP_CHECK(momentum >= 0.0f && momentum <= 1.0f, "batchnorm2d: momentum %g outside [0, 1]",
             (double)momentum);
    const size_t M = (size_t)N * HW;
    /* One value per channel has no variance (PyTorch refuses it too). */
    OP_CHECK(!training || M > 1, "batchnorm2d: training needs more than one value per channel, x is %s",
             sx);

    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 4, x->shape);
    if (!y) return NULL;
    const float *xd = x->data;
    float *yd = y->data;
    const float *gd = gamma ? gamma->data : NULL, *bd = beta ? beta->data : NULL;

    if (!training) {
        const float *rm = running_mean->data, *rv = running_var->data;
#pragma omp parallel for schedule(static)
        for (int pl = 0; pl < N * C; pl++) {
            const int c = pl % C;
            const float scale = (gd ? gd[c] : 1.0f) / sqrtf(rv[c] + eps);
            const float shift = (bd ? bd[c] : 0.0f) - rm[c] * scale;
            const float *xp = xd + (size_t)pl * HW;
            float *yp = yd + (size_t)pl * HW;
            for (int i = 0; i < HW; i++) yp[i] = xp[i] * scale + shift;
        }
        return y;
    }

    int cs = C;
    actc_tensor *mean = actc_tensor_new(ACTC_MEM_SCRATCH, 1, &cs);
    actc_tensor *rstd = actc_tensor_new(ACTC_MEM_SCRATCH, 1, &cs);
    actc_tensor *var = actc_tensor_new(ACTC_MEM_SCRATCH, 1, &cs);
    if (!mean || !rstd || !var) goto fail;
    float *md = mean->data, *rd = rstd->data, *vd = var->data;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        /* Two passes: the one-pass E[x^2]-E[x]^2 cancels badly when
         * |mean| >> std.  Each plane is summed in float with a vectorised
         * (fixed-order, so reproducible) reduction; planes add up in double. */
        double s = 0.0;
        for (int n = 0; n < N; n++) {
            const float *xp = xd + ((size_t)n * C + c) * HW;
            float ps = 0.0f;
#pragma omp simd reduction(+ : ps)
            for (int i = 0; i < HW; i++) ps += xp[i];
            s += ps;
        }
        const double mu = s / (double)M;
        const float muf0 = (float)mu;
        double ss = 0.0;
        for (int n = 0; n < N; n++) {
            const float *xp = xd + ((size_t)n * C + c) * HW;
            float pss = 0.0f;
#pragma omp simd reduction(+ : pss)
            for (int i = 0; i < HW; i++) {
                const float d = xp[i] - muf0;
                pss += d * d;
            }
            ss += pss;
        }
        const double v = ss / (double)M;
        const float r = (float)(1.0 / sqrt(v + (double)eps));
        md[c] = (float)mu;
        vd[c] = (float)v;
        rd[c] = r;
        const float scale = (gd ? gd[c] : 1.0f) * r, beta_c = bd ? bd[c] : 0.0f;
        const float muf = (float)mu;
        for (int n = 0; n < N; n++) {
            const size_t off = ((size_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++) yd[off + i] = (xd[off + i] - muf) * scale + beta_c;
        }
    }

    actc_tensor *in[3] = {x, gamma, beta};
    actc_node *node;
    if (!actc__op_record(ctx, "batchnorm2d", bn_backward, y, 3, in, &node)) {
        y = NULL; /* released by actc__op_record */
        goto fail;
    }
    if (node) {
        node->iattr[0] = gamma && !gamma->is_param;
        if (actc_save(ctx, node, x, ACTC_SAVE_ACT) != ACTC_OK ||
            actc_save(ctx, node, mean, ACTC_SAVE_EXACT) != ACTC_OK ||
            actc_save(ctx, node, rstd, ACTC_SAVE_EXACT) != ACTC_OK ||
            (node->iattr[0] && actc_save(ctx, node, gamma, ACTC_SAVE_EXACT) != ACTC_OK))
            goto fail;
    }
    /* Running statistics move only once the step's forward has succeeded. */
    if (running_mean) {
        float *rm = running_mean->data, *rv = running_var->data;
        const float m = momentum, unbias = (float)((double)M / (double)(M - 1));
        for (int c = 0; c < C; c++) {
            rm[c] = (1.0f - m) * rm[c] + m * md[c];
            rv[c] = (1.0f - m) * rv[c] + m * vd[c] * unbias;
        }
    }
    actc_tensor_release(mean);
    actc_tensor_release(rstd);
    actc_tensor_release(var);
    return y;

fail:
    actc_tensor_release(y);
    actc_tensor_release(mean);
    actc_tensor_release(rstd);
    actc_tensor_release(var);
    return NULL;
}
