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

typedef struct actc_optim_vt {
    const char *name; /* "sgd", "adamw": stored in checkpoints */
    /* Update one parameter p (its grad is p->grad, same numel: dense, or an
     * encoded gradient decoded for the call) using its
     * state tensors st[0..nslots-1] (already allocated).  `step` is the
     * 1-based number of this step (AdamW bias correction).  Cannot fail: all
     * checks and allocations happen before the first update. */
    void (*update)(const actc_optim *o, actc_tensor *p, actc_tensor **st, float lr,
                   uint64_t step);
    /* For a gradient in a subspace (a low-rank form): from g (n floats)
     * and the state st (n floats each, allocated at g's shape), write the
     * direction d such that the parameter moves by -lr d in that subspace
     * (without weight decay, which optim.c applies decoupled).  NULL: the
     * optimizer steps dense gradients only. */
    void (*direction)(const actc_optim *o, const float *g, actc_tensor **st, float *d, size_t n, uint64_t step);
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

/* Elementwise loops are parallel above this many elements.  An update is
 * memory-bound at ~12-20 bytes per element; below 64k elements (~1 MB, tens
 * of microseconds) an OpenMP fork, especially on busy cores, costs more than
 * it saves. */
#define ACTC_OPTIM_PAR_MIN 65536
#endif
