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
#include <stdlib.h>
#include <math.h>

/* [C] vector check for gamma/beta/running stats; NULL is checked by callers. */
static int is_vec(const actc_tensor *t, int C)
{
    return t->data && t->ndim == 1 && t->shape[0] == C;
}

/* Backward in two passes over the saved input, decoded a chunk of samples
 * at a time (it never exists whole): per-channel sums of dy and dy * xhat,
 * then dx written over dy, whose buffer becomes x's gradient.  This step of
 * the backward pass then holds one activation-sized gradient instead of a
 * gradient, a decoded input and a second gradient.  The sums add the same
 * terms in the same order as a single pass would (planes in sample order). */
static actc_status bn_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0], *gamma = node->inputs[1], *beta = node->inputs[2];
    actc_tensor *ms = actc_load(ctx, node, 1);
    actc_tensor *rs = ms ? actc_load(ctx, node, 2) : NULL;
    actc_tensor *gs = (rs && node->iattr[0]) ? actc_load(ctx, node, 3) : NULL;
    float *xc = NULL, *gg, *gb;
    double *sums = NULL;
    actc_status st = ACTC_OK;
    if (!rs || (node->iattr[0] && !gs)) {
        st = actc_last_status();
        goto done;
    }
    if ((st = actc_grad_buffer(ctx, gamma, &gg)) != ACTC_OK || (st = actc_grad_buffer(ctx, beta, &gb)) != ACTC_OK)
        goto done;
    const int N = x->shape[0], C = x->shape[1], HW = x->shape[2] * x->shape[3], chunk = actc__chunk_rows(x);
    const double M = (double)N * HW;
    const float *g = gamma ? (gs ? gs->data : gamma->data) : NULL;
    const float *mean = ms->data, *rstd = rs->data;
    float *gy = node->output->grad->data;
    xc = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)chunk * C * HW * sizeof(float));
    sums = calloc(2 * (size_t)C, sizeof *sums); /* sum dy, sum dy*xhat per channel */
    if (!xc || !sums) {
        st = xc ? actc_set_error(ACTC_ERR_OOM, "batchnorm2d backward: out of memory") : actc_last_status();
        goto done;
    }
    for (int n0 = 0; n0 < N; n0 += chunk) {
        const int nr = N - n0 < chunk ? N - n0 : chunk;
        if ((st = actc_load_rows(ctx, node, 0, n0, nr, xc)) != ACTC_OK) goto done;
#pragma omp parallel for schedule(static)
        for (int c = 0; c < C; c++) {
            const float mu = mean[c], r = rstd[c];
            /* Per-plane float sums in a vectorised fixed-order reduction,
             * planes accumulated in double (as in the forward statistics). */
            for (int n = 0; n < nr; n++) {
                const float *dy = gy + ((size_t)(n0 + n) * C + c) * HW, *xp = xc + ((size_t)n * C + c) * HW;
                float pdy = 0.0f, pdyx = 0.0f;
#pragma omp simd reduction(+ : pdy, pdyx)
                for (int i = 0; i < HW; i++) {
                    pdy += dy[i];
                    pdyx += dy[i] * ((xp[i] - mu) * r);
                }
                sums[c] += pdy;
                sums[C + c] += pdyx;
            }
        }
    }
    for (int c = 0; c < C; c++) {
        if (gb) gb[c] += (float)sums[c];
        if (gg) gg[c] += (float)sums[C + c];
    }
    if (!x->requires_grad) goto done;
    for (int n0 = 0; n0 < N; n0 += chunk) {
        const int nr = N - n0 < chunk ? N - n0 : chunk;
        if ((st = actc_load_rows(ctx, node, 0, n0, nr, xc)) != ACTC_OK) goto done;
#pragma omp parallel for schedule(static)
        for (int c = 0; c < C; c++) {
            /* dx = gamma * rstd / M * (M dy - sum(dy) - xhat * sum(dy xhat)) */
            const float mu = mean[c], r = rstd[c], k = (float)((g ? g[c] : 1.0f) * r / M);
            const float a = (float)sums[c], b = (float)sums[C + c], m = (float)M;
            for (int n = 0; n < nr; n++) {
                float *dy = gy + ((size_t)(n0 + n) * C + c) * HW;
                const float *xp = xc + ((size_t)n * C + c) * HW;
                for (int i = 0; i < HW; i++) dy[i] = k * (m * dy[i] - a - (xp[i] - mu) * r * b);
            }
        }
    }
    st = actc_grad_adopt(ctx, x, actc_grad_take(node));
done:
    actc_mem_free(xc);
    free(sums);
    actc_tensor_release(ms);
    actc_tensor_release(rs);
    actc_tensor_release(gs);
    return st;
}

/* take: the output may reuse x's buffer (see actc_batchnorm2d_take); it is
 * then written only after x was saved. */
/* Per channel of x [N, C, HW]: the batch mean, the (biased) variance and
 * 1 / sqrt(var + eps). */
static void batch_stats(const float *xd, int N, int C, int HW, float eps, float *md, float *vd, float *rd)
{
    const size_t M = (size_t)N * HW;
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
    }
}

/* y = x normalised with the running statistics (eval mode). */
static void eval_affine(const float *xd, float *yd, int N, int C, int HW, const float *gd, const float *bd,
                        const float *rm, const float *rv, float eps)
{
#pragma omp parallel for schedule(static)
    for (int pl = 0; pl < N * C; pl++) {
        const int c = pl % C;
        const float scale = (gd ? gd[c] : 1.0f) / sqrtf(rv[c] + eps);
        const float shift = (bd ? bd[c] : 0.0f) - rm[c] * scale;
        const float *xp = xd + (size_t)pl * HW;
        float *yp = yd + (size_t)pl * HW;
        for (int i = 0; i < HW; i++) yp[i] = xp[i] * scale + shift;
    }
}

/* y = (x - mean) rstd gamma + beta with the batch's statistics. */
static void batch_affine(const float *xd, float *yd, int N, int C, int HW, const float *gd, const float *bd,
                         const float *md, const float *rd)
{
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        const float scale = (gd ? gd[c] : 1.0f) * rd[c], beta_c = bd ? bd[c] : 0.0f, muf = md[c];
        for (int n = 0; n < N; n++) {
            const size_t off = ((size_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++) yd[off + i] = (xd[off + i] - muf) * scale + beta_c;
        }
    }
}

static actc_tensor *bn_forward(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma, actc_tensor *beta,
                               actc_tensor *running_mean, actc_tensor *running_var, float momentum, float eps,
                               int take)
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

    const float *xd = x->data;
    const float *gd = gamma ? gamma->data : NULL, *bd = beta ? beta->data : NULL;
    actc_tensor *y = actc__tensor_header(ACTC_MEM_ACT, 4, x->shape);
    if (!y) return NULL;

    if (!training) {
        if (actc__tensor_give_data(y, take ? x : NULL) != ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
        eval_affine(xd, y->data, N, C, HW, gd, bd, running_mean->data, running_var->data, eps);
        return y;
    }

    int cs = C;
    actc_tensor *mean = actc_tensor_new(ACTC_MEM_SCRATCH, 1, &cs);
    actc_tensor *rstd = actc_tensor_new(ACTC_MEM_SCRATCH, 1, &cs);
    actc_tensor *var = actc_tensor_new(ACTC_MEM_SCRATCH, 1, &cs);
    if (!mean || !rstd || !var) goto fail;
    float *md = mean->data, *rd = rstd->data, *vd = var->data;
    batch_stats(xd, N, C, HW, eps, md, vd, rd);

    actc_tensor *in[3] = {x, gamma, beta};
    actc_node *node;
    if (!actc__op_record(ctx, "batchnorm2d", bn_backward, y, 3, in, &node)) {
        y = NULL; /* released by actc__op_record */
        goto fail;
    }
    if (node) {
        node->iattr[0] = gamma && !gamma->is_param;
        /* dx depends on x through the normalised x-hat and its mean with dy:
         * not linear in x (rounding x biases dx). */
        const actc_save_role xr = actc__role(ACTC_ROLE_NORM_IN, 0), sr = actc__role(ACTC_ROLE_STATS, 0),
                             gr = actc__role(ACTC_ROLE_WEIGHT, 1);
        if (actc_save_as(ctx, node, x, ACTC_SAVE_ACT, &xr) != ACTC_OK ||
            actc_save_as(ctx, node, mean, ACTC_SAVE_EXACT, &sr) != ACTC_OK ||
            actc_save_as(ctx, node, rstd, ACTC_SAVE_EXACT, &sr) != ACTC_OK ||
            (node->iattr[0] && actc_save_as(ctx, node, gamma, ACTC_SAVE_EXACT, &gr) != ACTC_OK))
            goto fail;
    }
    /* x is saved: now y may take its buffer over. */
    if (actc__tensor_give_data(y, take ? x : NULL) != ACTC_OK) goto fail;
    batch_affine(xd, y->data, N, C, HW, gd, bd, md, rd);
    /* Running statistics move only once the step's forward has succeeded,
     * and once per step: not again in a recomputed segment or a sensitivity
     * pass. */
    if (running_mean && !actc_ctx_replaying(ctx)) {
        float *rm = running_mean->data, *rv = running_var->data;
        const float m = momentum, unbias = (float)((double)M / (double)(M - 1));
        for (int c = 0; c < C; c++) {
            rm[c] = (1.0f - m) * rm[c] + m * md[c];
            rv[c] = (1.0f - m) * rv[c] + m * vd[c] * unbias;
        }
        actc_tensor_mark_changed(running_mean); /* buffers, written in place */
        actc_tensor_mark_changed(running_var);
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

actc_tensor *actc_batchnorm2d(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma, actc_tensor *beta,
                              actc_tensor *running_mean, actc_tensor *running_var, float momentum, float eps)
{
    return bn_forward(ctx, x, gamma, beta, running_mean, running_var, momentum, eps, 0);
}

actc_tensor *actc_batchnorm2d_take(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma, actc_tensor *beta,
                                   actc_tensor *running_mean, actc_tensor *running_var, float momentum,
                                   float eps)
{
    actc_tensor *y = bn_forward(ctx, x, gamma, beta, running_mean, running_var, momentum, eps, 1);
    actc_tensor_release(x);
    return y;
}
