/* AGoQ's layer-aware activation rule (Wang et al., section 4.1, Table 1):
 *   - attention's saved tensors (Q, K, V, output, probabilities, statistics)
 *     stay exact: their gradient error grows with the sequence length
 *     (appendix 8.1.3);
 *   - normalisations and activations are recomputed regions (actc_region_n):
 *     only their inputs are stored, at 4 bits, and their outputs - the inputs
 *     of the Q/K/V projections, FFN1/gate and FFN2 - are recomputed in
 *     backward, so those linear layers store nothing of their own;
 *   - every other ACT save (the remaining linear inputs) at 4 bits;
 *   - the loss keeps what it saves exact.
 * 4 bits = the block-wise codec (codec_block4.c), fp4-bnb with blocks of 128
 * by default (the paper's block-wise FP4 at 128). */
#include "policy.h"

typedef struct {
    int block, fmt, stochastic;
} agoq_state;

static int kept_exact(actc_role r)
{
    return actc_role_is_attention(r) || r == ACTC_ROLE_LOSS_IN || r == ACTC_ROLE_STATS || r == ACTC_ROLE_WEIGHT;
}

static actc_status agoq_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                               actc_codec_args *args)
{
    const agoq_state *s = p->state;
    if (kept_exact(d->role->role)) {
        *codec = &actc_codec_fp32;
        return ACTC_OK;
    }
    *codec = &actc_codec_block4;
    args->group = s->block;
    args->iparam[0] = s->fmt;
    args->iparam[1] = s->stochastic;
    return ACTC_OK;
}

actc_status actc__policy_agoq(const char *spec, int block, int fmt, int stochastic, actc_policy **out)
{
    actc_status st = actc__policy_new(spec, sizeof(agoq_state), agoq_choose, out);
    if (st != ACTC_OK) return st;
    *(agoq_state *)(*out)->state = (agoq_state){block, fmt, stochastic};
    (*out)->region[ACTC_REGION_NORM] = ACTC_PLAN_RECOMPUTE;
    (*out)->region[ACTC_REGION_ACT] = ACTC_PLAN_RECOMPUTE;
    return ACTC_OK;
}
