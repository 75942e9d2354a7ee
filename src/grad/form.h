/* Inside the gradient layer: the state a parameter's non-dense gradient
 * keeps (core holds it as t->gstate_) and the interface every form of
 * gradient implements (dense.c, lowrank.c, encoded.c).  form.c picks the
 * form a tensor's gradient is in and calls through it; nothing outside
 * src/grad sees this header. */
#ifndef ACTC_GRAD_FORM_H
#define ACTC_GRAD_FORM_H
#include "grad.h"
#include "../codec/codec.h"
#include "../core/core.h"

typedef struct {
    struct actc_grad_state head; /* first: what core sees (release) */
    /* encoded: the codec chosen (kept across steps) and the encoded sum */
    const actc_codec *codec;
    int bits;
    char codec_name[16];
    void *blob;             /* GRAD; NULL when no gradient is held          */
    size_t bytes;
    actc_codec_args args;
    float scale;            /* pending factor (clipping), applied on decode */
    /* low-rank */
    actc_tensor *factor;    /* GRAD; NULL when no gradient is held          */
    actc_projection proj;
} actc__grad_fstate;

/* One form of gradient.  t holds its gradient in this form (accumulate:
 * this form is the one chosen for t, and t->grad holds this backward
 * pass's dense gradient). */
typedef struct {
    actc_grad_form form;
    /* Backward will add to t->grad no more this pass: fold it into the
     * form, rounding with the streams of (seed, stream). */
    actc_status (*accumulate)(actc_tensor *t, uint64_t seed, uint64_t stream);
    /* The gradient as t->numel dense floats. */
    actc_status (*to_dense)(const actc_tensor *t, float *out);
    /* Squared L2 norm of the gradient the optimizer sees. */
    actc_status (*sum_sq)(const actc_tensor *t, double *sq);
    /* Multiply by c in the form. */
    void (*scale)(actc_tensor *t, float c);
    /* Bytes the form holds. */
    size_t (*bytes)(const actc_tensor *t);
    /* The wire: wire_len floats, written by wire_get, taken back by
     * wire_set in the same form (an encoding rounds with the streams of
     * (seed, step), the same on every rank). */
    size_t (*wire_len)(const actc_tensor *t);
    actc_status (*wire_get)(const actc_tensor *t, float *out);
    actc_status (*wire_set)(actc_tensor *t, uint64_t seed, uint64_t step, const float *in);
} actc__grad_form_vt;

extern const actc__grad_form_vt actc__grad_form_dense, actc__grad_form_lowrank, actc__grad_form_encoded;

/* t's form state, NULL if it has none; _make creates it (NULL, error
 * set, when out of memory). */
actc__grad_fstate *actc__grad_fs(const actc_tensor *t);
actc__grad_fstate *actc__grad_fs_make(actc_tensor *t);
/* x[0..n) *= c (in parallel when long). */
void actc__grad_scale_array(float *x, size_t n, float c);
/* The parameter's name for messages. */
const char *actc__grad_pname(const actc_tensor *t);
#endif
