/* Shared between conv2d.c (operator, im2col backend, backend choice) and
 * conv2d_dnnl.c (oneDNN backend).  Internal: tests and benches may use it. */
#ifndef ACTC_CONV2D_INTERNAL_H
#define ACTC_CONV2D_INTERNAL_H
#include "ops.h"

typedef struct {
    int N, C, H, W, K, kh, kw, s, p, Ho, Wo;
    size_t HW, CKK, plane; /* Ho*Wo, C*kh*kw, H*W */
    int cl;                /* im2col: channels-last unfolding */
} conv_geom;

/* Backends of conv2d. */
typedef enum { ACTC_CONV_AUTO = -1, ACTC_CONV_IM2COL = 0, ACTC_CONV_DNNL = 1 } actc_conv_backend;

/* Force a backend for every later conv2d call of the process (tests, benches):
 * the setting actc_set_conv_backend makes, by enum; ACTC_CONV_AUTO returns to
 * the per-call choice.  Unlike the public call it accepts DNNL in a build
 * without oneDNN, which makes conv2d fail with ACTC_ERR_STATE. */
void actc__conv_force_backend(actc_conv_backend b);
/* The backend a call with this geometry would use now. */
actc_conv_backend actc__conv_backend_for(const conv_geom *g);

/* 1 if this build has the oneDNN backend. */
int actc__conv_dnnl_compiled(void);

/* oneDNN backend.  All three work on plain NCHW / OIHW fp32 arrays, all N
 * samples of g, and return ACTC_OK or an error with the message set.
 * Forward overwrites y; the backward passes ADD into dx / dw (gradients
 * accumulate).  If oneDNN has no implementation for the geometry (or cannot
 * start), *unsupported is set to 1, nothing is written and ACTC_OK is
 * returned, so the caller can run im2col instead. */
actc_status actc__conv_dnnl_forward(const conv_geom *g, const float *x, const float *w,
                                    const float *b, float *y, int *unsupported);
actc_status actc__conv_dnnl_backward_data(const conv_geom *g, const float *w, const float *dy,
                                          float *dx, int *unsupported);
/* The weight gradient reads x a chunk of samples at a time; xrows (if not
 * NULL) fills samples [n0, n0 + m) into dst instead of reading them from x,
 * so a saved input can be decoded chunk by chunk (see actc_load_rows). */
typedef struct {
    actc_status (*fill)(void *user, int n0, int m, float *dst);
    void *user;
} conv_rows;
actc_status actc__conv_dnnl_backward_weights(const conv_geom *g, const float *x, const conv_rows *xrows,
                                             const float *dy, float *dw, int *unsupported);
/* The chunk size (samples) the backward passes use for g, and whether
 * oneDNN can run both passes on chunks of that size and on the tail chunk
 * (*unsupported = 1 if not); creates the primitives.  Calling a pass with a
 * geometry of one such chunk runs it in one piece. */
actc_status actc__conv_dnnl_backward_plan(const conv_geom *g, int *nb, int *unsupported);
/* The same for the forward pass (with or without a bias). */
actc_status actc__conv_dnnl_forward_plan(const conv_geom *g, int bias, int *nb, int *unsupported);

/* Let oneDNN pick blocked layouts (1: format_tag any, with reorders to and
 * from the plain tensors), run it on the plain layouts directly (0), or
 * choose per pass and geometry (-1, the default).  For benches; primitives
 * of both kinds are cached separately. */
void actc__conv_dnnl_set_blocked(int blocked);

/* Destroy the cached primitives, the stream and the engine (for
 * actc__conv_release); the next oneDNN pass creates them again.  Not
 * thread-safe against running convolutions. */
void actc__conv_dnnl_cleanup(void);

#endif
