/* Internal interface of the optimizers: one struct, one small vtable.
 *
 * optim.c owns what every optimizer shares: the parameter list, the state
 * tensors (slots per parameter, category OPTIM, created zero-filled), the step
 * counter and the checks made before any parameter is touched.  An optimizer
 * (sgd.c, adamw.c) only supplies its per-parameter update, so adding one
 * (subspace Adam, 8-bit states) is one file plus a constructor. */
#ifndef ACTC_OPTIM_INTERNAL_H
#define ACTC_OPTIM_INTERNAL_H
#include "actc.h"
#include <stdint.h>

typedef struct actc_optim_vt {
    const char *name; /* "sgd", "adamw": stored in checkpoints */
    /* Update n elements of a parameter in place: w its values, g its
     * gradient (dense, or an encoded one decoded for the call), st[0..
     * nslots-1] its state arrays (n floats each, already allocated).
     * Plain arrays: an optimizer knows nothing of tensors or gradient
     * forms.  `step` is the 1-based number of this step (AdamW bias
     * correction).  Cannot fail: all checks and allocations happen before
     * the first update. */
    void (*update)(const actc_optim *o, float *w, const float *g, float *const *st, size_t n, float lr,
                   uint64_t step);
    /* For a gradient in a subspace (a low-rank form): from g (n floats)
     * and the state st (n floats each, allocated at g's shape), write the
     * direction d such that the parameter moves by -lr d in that subspace
     * (without weight decay, which optim.c applies decoupled).  NULL: the
     * optimizer steps dense gradients only. */
    void (*direction)(const actc_optim *o, const float *g, float *const *st, float *d, size_t n, uint64_t step);
} actc_optim_vt;

struct actc_optim {
    const actc_optim_vt *vt;
    actc_tensor **params; /* copy of the caller's array (the tensors are not owned) */
    int n;
    int nslots;           /* state tensors per parameter (0 for plain SGD)         */
    actc_tensor **state;  /* n * nslots, param-major; NULL entries until created   */
    uint64_t steps;
    /* hyper-parameters (meaning depends on the optimizer) */
    float momentum, weight_decay, beta1, beta2, eps;
    int nesterov;
};

/* Common constructor: validates params and allocates the struct.  NULL with
 * an error set on failure. */
actc_optim *actc__optim_new(const actc_optim_vt *vt, actc_tensor **params, int n, int nslots);

/* A checkpoint holding a low-rank gradient's state (whose shape the
 * optimizer only learns from the gradient) loads into a fresh optimizer in
 * two steps, so that a load refused later changes nothing: state_like
 * checks that state tensor k (param-major, slot-minor) of an optimizer that
 * has not stepped may take shape[ndim] (the parameter's, or a subspace of
 * it: its last axis a rank from 1 to the parameter's) and returns new zeros
 * of that shape (ACTC_ERR_INVALID otherwise); state_install puts such a
 * tensor in slot k (taking the reference; the old one is released). */
actc_status actc__optim_state_like(const actc_optim *o, int k, int ndim, const int *shape, actc_tensor **out);
void actc__optim_state_install(actc_optim *o, int k, actc_tensor *t);

/* actc_clip_grad_norm in two halves, for gradients spread over processes:
 * the squared norm of params' gradients (those with skip[i] set left out;
 * skip may be NULL), and the clip to max_norm (> 0) given the whole
 * squared norm. */
actc_status actc__grad_norm_sq(actc_tensor **params, int n, const uint8_t *skip, double *sq);
actc_status actc__clip_to_norm(actc_tensor **params, int n, float max_norm, double sq, float *norm_out);

/* Bytes of the state tensors made so far (*held), and what they would be
 * at their parameters' shapes (*dense): a subspace's state is smaller. */
void actc__optim_state_bytes(const actc_optim *o, size_t *held, size_t *dense);

/* Elementwise loops are parallel above this many elements.  An update is
 * memory-bound at ~12-20 bytes per element; below 64k elements (~1 MB, tens
 * of microseconds) an OpenMP fork, especially on busy cores, costs more than
 * it saves. */
#define ACTC_OPTIM_PAR_MIN 65536

/* The most state arrays an optimizer keeps per parameter (AdamW: 2). */
#define ACTC_OPTIM_MAX_SLOTS 4
#endif
