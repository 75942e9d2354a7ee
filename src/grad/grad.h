/* The gradient layer: a parameter's gradient in its form (dense.c,
 * lowrank.c, encoded.c: one interface, form.h, which form.c dispatches
 * through), for the engine (tape.c folds a completed gradient into its
 * form), the optimizers, clipping, data parallelism, the GACT controller
 * and the memory report.  Over core and codec only. */
#ifndef ACTC_GRAD_H
#define ACTC_GRAD_H
#include "actc.h"

/* 1 if t holds a gradient in any form. */
int actc__grad_present(const actc_tensor *t);
/* The form of the gradient t holds (DENSE when it holds none). */
actc_grad_form actc__grad_form(const actc_tensor *t);
/* Backward will add to t's gradient no more this pass: fold the dense
 * gradient into t's encoded form, if it has one (else nothing), rounding
 * with the streams of (seed, stream): the context's seed and the
 * micro-batch's stream. */
actc_status actc__grad_complete(actc_tensor *t, uint64_t seed, uint64_t stream);
/* The low-rank factor and its projection, or NULL if t's gradient is not
 * low-rank. */
const actc_tensor *actc__grad_factor(const actc_tensor *t, actc_projection *proj);
/* Squared L2 norm of the gradient in its form (a low-rank one: of the
 * factor, the gradient the optimizer sees); 0 without one. */
actc_status actc__grad_sum_sq(const actc_tensor *t, double *sq);
/* 1 if t's gradient is to be held encoded (actc_param_set_grad_codec). */
int actc__grad_encoded(const actc_tensor *t);
/* Multiply the gradient by c in its form (an encoded one: on decode). */
void actc__grad_scale(actc_tensor *t, float c);
/* The gradient as data-parallel communication sends it: wire_len floats
 * (the parameter's numel, or a low-rank gradient's factor), wire_get
 * writes them (zeros without a gradient, an encoded one decoded), wire_set
 * replaces the gradient by them in the same form (an encoded one
 * re-encoded with the streams of (seed, step), the same on every rank;
 * nothing when t holds none). */
size_t actc__grad_wire_len(const actc_tensor *t);
/* The 8-bit wire's own form: t's gradient held in the dynamic map (blocks
 * of ACTC_DYN8_BLOCK from its first element, as actc_param_set_grad_codec
 * "dyn8" holds it): its payload (numel values) and the factor its values
 * carry (*scale), or NULL; set_dyn8 replaces it by payload (the same
 * blocks: the codes an exchange delivered, not re-encoded), factor 1. */
const void *actc__grad_dyn8(const actc_tensor *t, float *scale);
actc_status actc__grad_set_dyn8(actc_tensor *t, const void *payload);
actc_status actc__grad_wire_get(const actc_tensor *t, float *out);
actc_status actc__grad_wire_set(actc_tensor *t, uint64_t seed, uint64_t step, const float *in);
#endif
