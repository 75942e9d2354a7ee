/* The policy layer: builds policies from their --compress specs.  The
 * interface they implement is the store's (autograd/policy_iface.h). */
#ifndef ACTC_POLICY_H
#define ACTC_POLICY_H
#include "../autograd/policy_iface.h"

/* Build a policy from its spec; ACTC_ERR_INVALID with a message listing the
 * valid specs when unknown. */
actc_status actc__policy_create(const char *spec, actc_policy **out);

/* A new policy with `spec`, the given functions and a zeroed state of
 * state_bytes (none if 0) whose destroy frees p->state and p unless the
 * family passes its own.  ACTC_ERR_OOM with a message on failure. */
actc_status actc__policy_new(const char *spec, size_t state_bytes,
                             actc_status (*choose)(actc_policy *, const actc_save_desc *, const actc_codec **,
                                                   actc_codec_args *),
                             actc_policy **out);

/* Constructors of the policy families (one file each); spec is the
 * canonical spelling kept in the policy. */
actc_status actc__policy_fixed(const char *spec, const actc_codec *codec, actc_policy **out);
actc_status actc__policy_quant(const char *spec, int bits, int group, int per_tensor, int conv_only,
                               actc_policy **out);
actc_status actc__policy_actnn_mixed(const char *spec, double budget, actc_policy **out);
/* DIVISION (policy_division.c): the dual-precision codec with block B, Q
 * residual bits and mode ACTC_DIV_* for linear, convolution and
 * normalisation inputs; tokens: pool [B,T,D] activations along T (else D). */
actc_status actc__policy_division(const char *spec, int block, int bits, int mode, int tokens, actc_policy **out);
#define ACTC_DIVISION_BLOCK 8
#define ACTC_DIVISION_BITS 2
#define ACTC_DIVISION_TOKENS 1 /* default pooling of [B,T,D]: bench/RESULTS.md */
/* 1 for operators that compute a loss: ActNN and GACT keep their saves exact. */
int actc__is_loss_op(const char *op);
/* The mixed-precision policy's per-layer state, for tests and inspection:
 * stable key, budget b^(l) and gradient magnitude g^(l) (< 0: not seen in a
 * backward yet) of up to cap layers.  Returns the number of layers, or -1 if
 * p is not an actnn mixed-precision policy. */
int actc__actnn_layers(const actc_policy *p, uint64_t *keys, double *bits, double *grad_sq, int cap);
/* The per-sample bits the policy chose for layer `key`'s last save (*n
 * samples), or NULL. */
const uint8_t *actc__actnn_sample_bits(const actc_policy *p, uint64_t key, int *n);

/* ActNN's greedy allocation (bit_alloc.c): bits[i] in [lo, hi] minimising
 * sum w[i] / (2^bits[i] - 1)^2 under sum c[i] * bits[i] <= budget, starting
 * from hi and lowering the item whose move adds the least variance per unit
 * of cost (c NULL: every cost is 1).  If even all-lo exceeds the budget, all
 * items end at lo. */
actc_status actc__alloc_bits_greedy(int n, const double *w, const double *c, int lo, int hi, double budget,
                                    uint8_t *bits);
#endif
