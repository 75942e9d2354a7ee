/* LayerNorm and RMSNorm over the last dim D; every leading dim is flattened
 * into R = numel / D rows.
 *
 *   LayerNorm: xhat = (x - mean) * rstd,  rstd = 1/sqrt(var + eps) (biased var)
 *              y = xhat * gamma + beta
 *   RMSNorm:   xhat = x * rstd,           rstd = 1/sqrt(mean(x^2) + eps)
 *              y = xhat * gamma
 *
 * Saves: x as ACT (the policy may compress it), the per-row statistics as
 * EXACT (R floats each: tiny next to x, and backward multiplies by them, so
 * any error there would scale whole rows).  Recomputing them from a
 * compressed x would not give the forward's values.  A gamma that is not a
 * parameter is saved as EXACT when dx needs it, since only parameters are
 * guaranteed to keep their data until backward.  When only beta needs a
 * gradient (dbeta = sum of dy over rows) nothing is saved.
 *
 * Backward, with g = dy * gamma and means over the row:
 *   LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 *   RMSNorm:   dx = rstd * (g - xhat * mean(g * xhat))
 *   dgamma += sum over rows of dy * xhat,  dbeta += sum over rows of dy.
 *
 * Determinism: per-row reductions are float `omp simd` reductions (fixed
 * order for a given build).  dgamma/dbeta sum over rows: rows are cut into at
 * most NORM_MAX_CHUNKS chunks whose count depends on R only, each chunk sums
 * its rows in order into its own partial row, and the partials are added in
 * chunk order, so the result depends neither on thread count nor timing. */
#include "ops.h"
#include <math.h>

#define NORM_PAR_MIN ((size_t)1 << 14)
#define NORM_MAX_CHUNKS 64
#define NORM_MIN_CHUNK_ROWS 32

enum { IA_RMS = 0, IA_XSLOT, IA_MSLOT, IA_RSLOT, IA_GSLOT };

/* gamma/beta must be [D] vectors with data. */
static int is_vec(const actc_tensor *t, int D) { return t->data && t->ndim == 1 && t->shape[0] == D; }

/* A SCRATCH [2*D] tensor of D ones then D zeros: the stand-in for an absent
 * gamma/beta, so the row loops have no per-element condition. */
static actc_tensor *ones_zeros(int D)
{
    int n = 2 * D;
    actc_tensor *t = actc_tensor_zeros(ACTC_MEM_SCRATCH, 1, &n);
    if (t)
        for (int d = 0; d < D; d++) t->data[d] = 1.0f;
    return t;
}

static actc_status norm_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0], *gamma = node->inputs[1];
    actc_tensor *beta = node->n_inputs > 2 ? node->inputs[2] : NULL;
    const int rms = node->iattr[IA_RMS];
    const int D = x->shape[x->ndim - 1];
    const size_t R = x->numel / (size_t)D;
    const float *dy = node->output->grad->data;
    actc_tensor *xs = NULL, *ms = NULL, *rs = NULL, *gs = NULL, *oz = NULL, *part = NULL;
    actc_status st = ACTC_OK;

    float *gx, *gg, *gb;
    if ((st = actc_grad_buffer(ctx, x, &gx)) != ACTC_OK || (st = actc_grad_buffer(ctx, gamma, &gg)) != ACTC_OK ||
        (st = actc_grad_buffer(ctx, beta, &gb)) != ACTC_OK)
        return st;
    /* x and the statistics were saved iff x or gamma needs a gradient. */
    const int have_x = node->iattr[IA_XSLOT] >= 0;
    if ((gx || gg) && !have_x)
        return actc_set_error(ACTC_ERR_STATE, "%s backward: input was not saved", node->op);
    if (have_x) {
        if (!(xs = actc_load(ctx, node, node->iattr[IA_XSLOT])) ||
            (!rms && !(ms = actc_load(ctx, node, node->iattr[IA_MSLOT]))) ||
            !(rs = actc_load(ctx, node, node->iattr[IA_RSLOT])) ||
            (node->iattr[IA_GSLOT] >= 0 && !(gs = actc_load(ctx, node, node->iattr[IA_GSLOT])))) {
            st = actc_last_status();
            goto done;
        }
    }
    if (!gamma && !(oz = ones_zeros(D))) {
        st = actc_last_status();
        goto done;
    }
    /* gamma's value serves dx only: then it is either a parameter (read in
     * place) or was saved. */
    const float *g = gs ? gs->data : gamma ? gamma->data : oz->data;
    if (gx && !g) {
        st = actc_set_error(ACTC_ERR_STATE, "%s backward: gamma was not saved", node->op);
        goto done;
    }

    /* Row chunks: a count that depends on R only (see the header). */
    size_t rows_per = (R + NORM_MAX_CHUNKS - 1) / NORM_MAX_CHUNKS;
    if (rows_per < NORM_MIN_CHUNK_ROWS) rows_per = NORM_MIN_CHUNK_ROWS;
    const int nch = (int)((R + rows_per - 1) / rows_per);
    float *pg = NULL, *pb = NULL;
    if (gg || gb) {
        int n = 2 * nch * D;
        if (!(part = actc_tensor_zeros(ACTC_MEM_SCRATCH, 1, &n))) {
            st = actc_last_status();
            goto done;
        }
        pg = part->data;
        pb = part->data + (size_t)nch * D;
    }
    const float *xd = xs ? xs->data : NULL, *mean = ms ? ms->data : NULL, *rstd = rs ? rs->data : NULL;
    const float invD = 1.0f / (float)D;

#pragma omp parallel for schedule(static) if (R * (size_t)D >= NORM_PAR_MIN)
    for (int ch = 0; ch < nch; ch++) {
        const size_t r0 = (size_t)ch * rows_per, r1 = r0 + rows_per < R ? r0 + rows_per : R;
        float *cg = pg ? pg + (size_t)ch * D : NULL, *cb = pb ? pb + (size_t)ch * D : NULL;
        for (size_t r = r0; r < r1; r++) {
            const float *dyr = dy + r * D;
            if (cb) {
#pragma omp simd
                for (int d = 0; d < D; d++) cb[d] += dyr[d];
            }
            if (!xd) continue; /* only dbeta was needed */
            const float *xr = xd + r * D;
            const float mu = mean ? mean[r] : 0.0f, rsd = rstd[r];
            if (cg) {
#pragma omp simd
                for (int d = 0; d < D; d++) cg[d] += dyr[d] * ((xr[d] - mu) * rsd);
            }
            if (!gx) continue;
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (int d = 0; d < D; d++) {
                const float gd = dyr[d] * g[d];
                sg += gd;
                sgx += gd * ((xr[d] - mu) * rsd);
            }
            /* RMSNorm has no mean to subtract, so mean(g) drops out. */
            const float mg = rms ? 0.0f : sg * invD, mgx = sgx * invD;
            float *gxr = gx + r * D;
#pragma omp simd
            for (int d = 0; d < D; d++) {
                const float xh = (xr[d] - mu) * rsd;
                gxr[d] += rsd * (dyr[d] * g[d] - mg - xh * mgx);
            }
        }
    }
    if (part) {
        /* Partials added in chunk order: deterministic. */
#pragma omp parallel for schedule(static) if ((size_t)nch * D >= NORM_PAR_MIN)
        for (int d = 0; d < D; d++) {
            float sg = 0.0f, sb = 0.0f;
            for (int ch = 0; ch < nch; ch++) {
                sg += pg[(size_t)ch * D + d];
                sb += pb[(size_t)ch * D + d];
            }
            if (gg) gg[d] += sg;
            if (gb) gb[d] += sb;
        }
    }
done:
    actc_tensor_release(xs);
    actc_tensor_release(ms);
    actc_tensor_release(rs);
    actc_tensor_release(gs);
    actc_tensor_release(oz);
    actc_tensor_release(part);
    return st;
}

static actc_tensor *norm_forward(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma, actc_tensor *beta,
                                 float eps, int rms, const char *name)
{
    OP_CHECK(ctx, "%s: NULL context", name);
    OP_CHECK(x && x->data, "%s: input x is NULL or its data was already freed", name);
    char sx[64], sv[64];
    actc_shape_str(x, sx, sizeof sx);
    OP_CHECK(x->ndim >= 1 && x->numel > 0 && x->shape[x->ndim - 1] > 0,
             "%s: x must have at least one dim and one element, got %s", name, sx);
    const int D = x->shape[x->ndim - 1];
    const size_t R = x->numel / (size_t)D;
    OP_CHECK(!gamma || is_vec(gamma, D), "%s: gamma must be [%d] (the last dim of x %s), got %s", name, D,
             sx, actc_shape_str(gamma, sv, sizeof sv));
    OP_CHECK(!beta || is_vec(beta, D), "%s: beta must be [%d] (the last dim of x %s), got %s", name, D,
             sx, actc_shape_str(beta, sv, sizeof sv));
    OP_CHECK(eps > 0.0f && isfinite(eps), "%s: eps must be positive and finite, got %g", name,
             (double)eps);
    OP_CHECK(R <= (size_t)0x7fffffff, "%s: x %s has too many rows", name, sx);

    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    int rn = (int)R;
    actc_tensor *mean = rms ? NULL : actc_tensor_new(ACTC_MEM_SCRATCH, 1, &rn);
    actc_tensor *rstd = actc_tensor_new(ACTC_MEM_SCRATCH, 1, &rn);
    actc_tensor *oz = (!gamma || !beta) ? ones_zeros(D) : NULL;
    if (!y || (!rms && !mean) || !rstd || ((!gamma || !beta) && !oz)) goto fail;
    const float *xd = x->data;
    const float *gd = gamma ? gamma->data : oz->data, *bd = beta ? beta->data : oz->data + D;
    float *yd = y->data, *md = mean ? mean->data : NULL, *rd = rstd->data;
    const float invD = 1.0f / (float)D;

#pragma omp parallel for schedule(static) if (x->numel >= NORM_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        const float *xr = xd + r * D;
        float *yr = yd + r * D;
        float mu = 0.0f;
        if (!rms) {
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int d = 0; d < D; d++) s += xr[d];
            mu = s * invD;
            md[r] = mu;
        }
        /* Two passes for LayerNorm: E[x^2] - E[x]^2 cancels badly when
         * |mean| >> std.  For RMSNorm mu = 0 and this is mean(x^2). */
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int d = 0; d < D; d++) {
            const float c = xr[d] - mu;
            ss += c * c;
        }
        const float rsd = 1.0f / sqrtf(ss * invD + eps);
        rd[r] = rsd;
#pragma omp simd
        for (int d = 0; d < D; d++) yr[d] = (xr[d] - mu) * rsd * gd[d] + bd[d];
    }

    actc_tensor *in[3] = {x, gamma, beta};
    actc_node *node;
    if (!actc__op_record(ctx, name, norm_backward, y, rms ? 2 : 3, in, &node)) {
        y = NULL; /* released by actc__op_record */
        goto fail;
    }
    if (node) {
        int k = 0;
        node->iattr[IA_RMS] = rms;
        node->iattr[IA_XSLOT] = node->iattr[IA_MSLOT] = node->iattr[IA_RSLOT] = node->iattr[IA_GSLOT] = -1;
        /* dbeta needs only dy; x and the statistics serve dx and dgamma.
         * dx is not linear in x (x-hat and its projection on dy): rounding
         * x biases it by about 1% (measured against PyTorch, issue 17). */
        const actc_save_role xr = actc__role(ACTC_ROLE_NORM_IN, 0), sr = actc__role(ACTC_ROLE_STATS, 0),
                             gr = actc__role(ACTC_ROLE_WEIGHT, 1);
        if (x->requires_grad || (gamma && gamma->requires_grad)) {
            if (actc_save_as(ctx, node, x, ACTC_SAVE_ACT, &xr) != ACTC_OK) goto fail;
            node->iattr[IA_XSLOT] = k++;
            if (!rms) {
                if (actc_save_as(ctx, node, mean, ACTC_SAVE_EXACT, &sr) != ACTC_OK) goto fail;
                node->iattr[IA_MSLOT] = k++;
            }
            if (actc_save_as(ctx, node, rstd, ACTC_SAVE_EXACT, &sr) != ACTC_OK) goto fail;
            node->iattr[IA_RSLOT] = k++;
        }
        if (x->requires_grad && gamma && !gamma->is_param) {
            if (actc_save_as(ctx, node, gamma, ACTC_SAVE_EXACT, &gr) != ACTC_OK) goto fail;
            node->iattr[IA_GSLOT] = k++;
        }
    }
    actc_tensor_release(mean);
    actc_tensor_release(rstd);
    actc_tensor_release(oz);
    return y;

fail:
    actc_tensor_release(y);
    actc_tensor_release(mean);
    actc_tensor_release(rstd);
    actc_tensor_release(oz);
    return NULL;
}

actc_tensor *actc_layernorm(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma, actc_tensor *beta,
                            float eps)
{
    return norm_forward(ctx, x, gamma, beta, eps, 0, "layernorm");
}

actc_tensor *actc_rmsnorm(actc_ctx *ctx, actc_tensor *x, actc_tensor *gamma, float eps)
{
    return norm_forward(ctx, x, gamma, NULL, eps, 1, "rmsnorm");
}
