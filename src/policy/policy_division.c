/* DIVISION's policy (Wang et al., ICLR 2023, appendix I): the dual-precision
 * codec for the ACT tensors saved by linear, convolution and normalisation
 * layers; every other ACT save (attention, GELU/SiLU, softmax, element-wise
 * products, the loss's probabilities) stays fp32, and ReLU/dropout masks and
 * max-pool indices keep their lossless compact forms as for every policy
 * (appendix J).
 *
 * Which axes form the map follows the tensor's rank:
 *   4-D [N,C,H,W]  2-D maps (convolution and batch-norm inputs)
 *   5-D            3-D maps
 *   3-D [B,T,D]    a transformer's activations: pooled along the tokens
 *                  (one map per sample and feature) or along the features
 *                  (one map per sample and token), the spec's seq= option
 *                  (the language models' output head takes [B*T, D], a 2-D
 *                  tensor: its input pools along the features either way)
 *   2-D [N,D]      1-D maps, one per sample (Theorem 3B)
 *   1-D            the whole tensor is one map. */
#include "policy.h"

typedef actc_division_opts division_state;

/* The inputs of layers with weights and of normalisations.  Attention's
 * output is the output projection's input too: the store keeps the one
 * tensor once, in the codec of its first save (the attention's), so when
 * attention uses it linearly (the textbook form) it is compressed as that
 * linear's input would be; the memory-efficient form recomputes its
 * probabilities from it and keeps it exact. */
static int division_applies(const actc_save_desc *d)
{
    switch (d->role->role) {
    case ACTC_ROLE_LINEAR_IN:
    case ACTC_ROLE_PROJECTED: /* a linear input's projection (compact+division) */
    case ACTC_ROLE_CONV_IN:
    case ACTC_ROLE_NORM_IN: return 1;
    case ACTC_ROLE_ATTN_OUT: return d->role->linear;
    default: return 0;
    }
}

static actc_status division_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                                   actc_codec_args *args)
{
    const division_state *s = p->state;
    if (!division_applies(d)) {
        *codec = &actc_codec_fp32;
        return ACTC_OK;
    }
    *codec = &actc_codec_division;
    actc__division_args(s, d->t->ndim, args);
    return ACTC_OK;
}

actc_status actc__policy_division(const char *spec, const actc_division_opts *o, actc_policy **out)
{
    actc_status st = actc__policy_new(spec, sizeof(division_state), division_choose, out);
    if (st == ACTC_OK) *(division_state *)(*out)->state = *o;
    return st;
}
