/* Pooling over NCHW planes: max, average and global average.
 *
 * Every kernel works plane by plane (one (n, c) pair), which is both the
 * OpenMP unit and what makes backward race-free: overlapping windows only
 * scatter into their own plane, which one thread owns.
 *
 * Output size is floor((H + 2p - k) / s) + 1 (PyTorch, ceil_mode=False), and
 * p <= k/2 as PyTorch requires: then every window holds at least one real
 * cell, so max-pool always has a winner that is not padding. */
#include "ops.h"
#include <math.h>

/* Validate x and the window, compute the output size.  0 with an error set
 * on bad input. */
static int pool_geom(const char *op, const actc_tensor *x, int k, int s, int p, int *Ho, int *Wo)
{
    if (!x || !x->data) {
        actc_set_error(ACTC_ERR_INVALID, "%s: input is NULL or its data was already freed", op);
        return 0;
    }
    char sx[64];
    actc_shape_str(x, sx, sizeof sx);
    if (x->ndim != 4) {
        actc_set_error(ACTC_ERR_INVALID, "%s: input must be [N, C, H, W], got %s", op, sx);
        return 0;
    }
    if (k < 1 || s < 1 || p < 0 || p > k / 2) {
        actc_set_error(ACTC_ERR_INVALID,
                       "%s: invalid window k=%d stride=%d pad=%d (need k >= 1, stride >= 1, "
                       "0 <= pad <= k/2)", op, k, s, p);
        return 0;
    }
    const long H = x->shape[2], W = x->shape[3];
    if (H + 2L * p < k || W + 2L * p < k) {
        actc_set_error(ACTC_ERR_INVALID, "%s: window k=%d (pad %d) larger than the input %s", op, k, p, sx);
        return 0;
    }
    *Ho = (int)((H + 2L * p - k) / s + 1);
    *Wo = (int)((W + 2L * p - k) / s + 1);
    return 1;
}

/* ---- max pooling -------------------------------------------------------- */

static actc_status maxpool_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    actc_tensor *idx = actc_load(ctx, node, 0);
    if (!idx) return actc_last_status();
    float *gx;
    actc_status st = actc_grad_buffer(ctx, x, &gx);
    if (st != ACTC_OK || !gx) {
        actc_tensor_release(idx);
        return st;
    }
    const int k = node->iattr[0], s = node->iattr[1], p = node->iattr[2];
    const int planes = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3];
    const int Ho = node->output->shape[2], Wo = node->output->shape[3];
    const float *gy = node->output->grad->data, *id = idx->data;
#pragma omp parallel for schedule(static)
    for (int pl = 0; pl < planes; pl++) {
        float *gxp = gx + (size_t)pl * H * W;
        const float *gyp = gy + (size_t)pl * Ho * Wo, *ip = id + (size_t)pl * Ho * Wo;
        for (int oh = 0; oh < Ho; oh++)
            for (int ow = 0; ow < Wo; ow++) {
                const int o = oh * Wo + ow, w = (int)ip[o];
                const int ih = oh * s - p + w / k, iw = ow * s - p + w % k;
                gxp[ih * W + iw] += gyp[o];
            }
    }
    actc_tensor_release(idx);
    return ACTC_OK;
}

actc_tensor *actc_maxpool2d(actc_ctx *ctx, actc_tensor *x, int k, int s, int p)
{
    OP_CHECK(ctx, "maxpool2d: NULL context");
    int Ho, Wo;
    if (!pool_geom("maxpool2d", x, k, s, p, &Ho, &Wo)) return NULL;
    /* The argmax is saved as a position inside the window, stored as uint8. */
    OP_CHECK((long)k * k <= 256, "maxpool2d: window %dx%d has %ld cells; at most 256 are supported", k, k,
             (long)k * k);
    const int planes = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3];
    int shape[4] = {x->shape[0], x->shape[1], Ho, Wo};
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 4, shape);
    if (!y) return NULL;
    actc_node *node;
    if (!actc__op_record(ctx, "maxpool2d", maxpool_backward, y, 1, &x, &node)) return NULL;
    /* The argmax is only worth computing when backward will run. */
    actc_tensor *idx = NULL;
    if (node) {
        idx = actc_tensor_new(ACTC_MEM_SCRATCH, 4, shape);
        if (!idx) {
            actc_tensor_release(y);
            return NULL;
        }
        node->iattr[0] = k;
        node->iattr[1] = s;
        node->iattr[2] = p;
    }
    const float *xd = x->data;
    float *yd = y->data, *id = idx ? idx->data : NULL;
#pragma omp parallel for schedule(static)
    for (int pl = 0; pl < planes; pl++) {
        const float *xp = xd + (size_t)pl * H * W;
        float *yp = yd + (size_t)pl * Ho * Wo, *ip = id ? id + (size_t)pl * Ho * Wo : NULL;
        for (int oh = 0; oh < Ho; oh++) {
            const int h0 = oh * s - p;
            const int khs = h0 < 0 ? -h0 : 0, khe = h0 + k > H ? H - h0 : k;
            for (int ow = 0; ow < Wo; ow++) {
                const int w0 = ow * s - p;
                const int kws = w0 < 0 ? -w0 : 0, kwe = w0 + k > W ? W - w0 : k;
                /* Only real cells are scanned, so padding never wins; ties go
                 * to the first cell in row-major order. */
                float best = xp[(h0 + khs) * W + w0 + kws];
                int bi = khs * k + kws;
                for (int kh = khs; kh < khe; kh++)
                    for (int kw = kws; kw < kwe; kw++) {
                        const float v = xp[(h0 + kh) * W + w0 + kw];
                        if (v > best) {
                            best = v;
                            bi = kh * k + kw;
                        }
                    }
                yp[oh * Wo + ow] = best;
                if (ip) ip[oh * Wo + ow] = (float)bi;
            }
        }
    }
    if (idx) {
        const actc_save_role r = actc__role(ACTC_ROLE_INDEX, 1);
        actc_status st = actc_save_as(ctx, node, idx, ACTC_SAVE_INDEX, &r);
        actc_tensor_release(idx);
        if (st != ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
    }
    return y;
}

/* ---- average pooling ---------------------------------------------------- */

static actc_status avgpool_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    float *gx;
    actc_status st = actc_grad_buffer(ctx, x, &gx);
    if (st != ACTC_OK || !gx) return st;
    const int k = node->iattr[0], s = node->iattr[1], p = node->iattr[2];
    const int planes = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3];
    const int Ho = node->output->shape[2], Wo = node->output->shape[3];
    const float inv = 1.0f / (float)(k * k);
    const float *gy = node->output->grad->data;
#pragma omp parallel for schedule(static)
    for (int pl = 0; pl < planes; pl++) {
        float *gxp = gx + (size_t)pl * H * W;
        const float *gyp = gy + (size_t)pl * Ho * Wo;
        for (int oh = 0; oh < Ho; oh++) {
            const int h0 = oh * s - p;
            const int khs = h0 < 0 ? -h0 : 0, khe = h0 + k > H ? H - h0 : k;
            for (int ow = 0; ow < Wo; ow++) {
                const int w0 = ow * s - p;
                const int kws = w0 < 0 ? -w0 : 0, kwe = w0 + k > W ? W - w0 : k;
                const float g = gyp[oh * Wo + ow] * inv;
                for (int kh = khs; kh < khe; kh++)
                    for (int kw = kws; kw < kwe; kw++) gxp[(h0 + kh) * W + w0 + kw] += g;
            }
        }
    }
    return ACTC_OK;
}

actc_tensor *actc_avgpool2d(actc_ctx *ctx, actc_tensor *x, int k, int s, int p)
{
    OP_CHECK(ctx, "avgpool2d: NULL context");
    int Ho, Wo;
    if (!pool_geom("avgpool2d", x, k, s, p, &Ho, &Wo)) return NULL;
    const int planes = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3];
    int shape[4] = {x->shape[0], x->shape[1], Ho, Wo};
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 4, shape);
    if (!y) return NULL;
    /* Padded cells count in the divisor (count_include_pad=True). */
    const float inv = 1.0f / (float)(k * k);
    const float *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for schedule(static)
    for (int pl = 0; pl < planes; pl++) {
        const float *xp = xd + (size_t)pl * H * W;
        float *yp = yd + (size_t)pl * Ho * Wo;
        for (int oh = 0; oh < Ho; oh++) {
            const int h0 = oh * s - p;
            const int khs = h0 < 0 ? -h0 : 0, khe = h0 + k > H ? H - h0 : k;
            for (int ow = 0; ow < Wo; ow++) {
                const int w0 = ow * s - p;
                const int kws = w0 < 0 ? -w0 : 0, kwe = w0 + k > W ? W - w0 : k;
                float acc = 0.0f;
                for (int kh = khs; kh < khe; kh++)
                    for (int kw = kws; kw < kwe; kw++) acc += xp[(h0 + kh) * W + w0 + kw];
                yp[oh * Wo + ow] = acc * inv;
            }
        }
    }
    actc_node *node;
    if (!actc__op_record(ctx, "avgpool2d", avgpool_backward, y, 1, &x, &node)) return NULL;
    if (node) {
        node->iattr[0] = k;
        node->iattr[1] = s;
        node->iattr[2] = p;
    }
    return y;
}

/* ---- global average pooling --------------------------------------------- */

static actc_status gap_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    float *gx;
    actc_status st = actc_grad_buffer(ctx, x, &gx);
    if (st != ACTC_OK || !gx) return st;
    const int planes = x->shape[0] * x->shape[1], HW = x->shape[2] * x->shape[3];
    const float inv = 1.0f / (float)HW;
    const float *gy = node->output->grad->data;
#pragma omp parallel for schedule(static) if ((size_t)planes * HW > 16384)
    for (int pl = 0; pl < planes; pl++) {
        float *gxp = gx + (size_t)pl * HW;
        const float g = gy[pl] * inv;
        for (int i = 0; i < HW; i++) gxp[i] += g;
    }
    return ACTC_OK;
}

actc_tensor *actc_global_avgpool(actc_ctx *ctx, actc_tensor *x)
{
    OP_CHECK(ctx, "global_avgpool: NULL context");
    OP_CHECK(x && x->data, "global_avgpool: input is NULL or its data was already freed");
    char sx[64];
    OP_CHECK(x->ndim == 4 && x->shape[2] * x->shape[3] > 0,
             "global_avgpool: input must be [N, C, H, W] with H, W > 0, got %s",
             actc_shape_str(x, sx, sizeof sx));
    const int planes = x->shape[0] * x->shape[1], HW = x->shape[2] * x->shape[3];
    int shape[2] = {x->shape[0], x->shape[1]};
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 2, shape);
    if (!y) return NULL;
    const float *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for schedule(static) if ((size_t)planes * HW > 16384)
    for (int pl = 0; pl < planes; pl++) {
        const float *xp = xd + (size_t)pl * HW;
        /* double: the sum of a large plane keeps full float precision. */
        double acc = 0.0;
        for (int i = 0; i < HW; i++) acc += xp[i];
        yd[pl] = (float)(acc / HW);
    }
    actc_node *node;
    return actc__op_record(ctx, "global_avgpool", gap_backward, y, 1, &x, &node);
}
