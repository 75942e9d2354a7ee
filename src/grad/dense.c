/* The dense form: t->grad, the default and the fast path (the engine adds
 * into it directly; nothing is folded at the end of backward). */
#include "form.h"
#include <string.h>

static actc_status accumulate(actc_tensor *t, uint64_t seed, uint64_t stream)
{
    (void)t;
    (void)seed;
    (void)stream;
    return ACTC_OK;
}

static actc_status to_dense(const actc_tensor *t, float *out)
{
    if (t->grad) memcpy(out, t->grad->data, t->numel * sizeof *out);
    else memset(out, 0, t->numel * sizeof *out);
    return ACTC_OK;
}

static actc_status sum_sq(const actc_tensor *t, double *sq)
{
    *sq = t->grad && t->grad->data ? actc__sum_sq_diff(t->grad->data, NULL, t->grad->numel) : 0.0;
    return ACTC_OK;
}

static void scale(actc_tensor *t, float c)
{
    if (t->grad && t->grad->data) actc__grad_scale_array(t->grad->data, t->grad->numel, c);
}

static size_t bytes(const actc_tensor *t) { return t->grad ? t->grad->numel * sizeof(float) : 0; }

static size_t wire_len(const actc_tensor *t) { return t->numel; }

static actc_status wire_set(actc_tensor *t, uint64_t seed, uint64_t step, const float *in)
{
    (void)seed;
    (void)step;
    if (t->grad) memcpy(t->grad->data, in, t->numel * sizeof *in);
    return ACTC_OK;
}

const actc__grad_form_vt actc__grad_form_dense = {ACTC_GRAD_DENSE, accumulate, to_dense, sum_sq, scale,
                                             bytes, wire_len, to_dense, wire_set};
