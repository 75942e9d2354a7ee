/* The policy interface the saved-context store calls.  Policies decide, for
 * every ACT tensor saved for backward, which codec stores it and with which
 * parameters; they live in the policy layer (src/policy), above this one, and
 * are installed into a context with actc__ctx_install_policy.  MASK, INDEX and
 * EXACT saves never reach a policy: the store keeps them lossless.  A policy
 * may keep state across steps (per-tensor bits, sensitivities) keyed by the
 * stable save key. */
#ifndef ACTC_POLICY_IFACE_H
#define ACTC_POLICY_IFACE_H
#include "actc.h"
#include "../codec/codec.h"

/* What the store tells a policy about one save. */
typedef struct {
    const char *op;          /* operator name of the saving node              */
    const char *scope;       /* name scope of the node ("layer1.0")           */
    int save_index;          /* k-th save on that node                        */
    int node_index;          /* position of the node on the tape             */
    uint64_t stable_key;     /* hash of (scope, op, save_index, occurrence):
                                the same tensor of the same layer has the same
                                key in every step, whatever the save order     */
    actc_save_kind kind;
    const actc_tensor *t;    /* the tensor being saved (data readable)        */
    uint64_t step;           /* training step                                 */
} actc_save_desc;

typedef struct actc_policy actc_policy;
struct actc_policy {
    char spec[64];           /* canonical spec, e.g. "bf16"                   */
    /* Choose the codec for an ACT save.  args->key is preset to a stream
     * derived from (seed, step, stable_key); a policy may replace it. */
    actc_status (*choose)(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                          actc_codec_args *args);
    /* Called after each backward pass (per-layer re-allocation etc.); may be NULL. */
    void (*after_backward)(actc_policy *p, actc_ctx *ctx);
    void (*destroy)(actc_policy *p);
    void *state;
};

/* Give ctx a new policy (it takes ownership; the old one is destroyed).
 * Fails with ACTC_ERR_STATE while a tape is recorded. */
actc_status actc__ctx_install_policy(actc_ctx *ctx, actc_policy *p);
void actc__policy_free(actc_policy *p);
#endif
