/* Fixed-bit quantization policies (ActNN levels L1 and L2, and quant:B).
 *   quant:B              every ACT save at B bits, per-group (G = 256)
 *   quant:B,group=G      the same with groups of G elements
 *   quant:B,per-tensor   one zero point and range per tensor (BLPA-like)
 *   actnn:L1             4 bits for the inputs saved by convolutions only
 *   actnn:L2             4 bits for every ACT save but the loss's
 * ActNN never replaces the loss layer, so these policies keep what the loss
 * saves (the probabilities, a few values per sample) in fp32: quant:B is then
 * exactly ActNN's L2 at B bits, and per-group vs per-tensor and fixed vs
 * mixed precision compare on the same tensors. */
#include "policy.h"

typedef struct {
    int bits, group, per_tensor;
    int conv_only;
} quant_state;

static actc_status quant_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                                actc_codec_args *args)
{
    const quant_state *q = p->state;
    const actc_role r = d->role->role;
    if (r == ACTC_ROLE_LOSS_IN || (q->conv_only && r != ACTC_ROLE_CONV_IN)) {
        *codec = &actc_codec_fp32;
        return ACTC_OK;
    }
    *codec = q->per_tensor ? &actc_codec_quant_tensor : &actc_codec_quant;
    args->bits = q->bits;
    args->group = q->group;
    return ACTC_OK;
}

actc_status actc__policy_quant(const char *spec, int bits, int group, int per_tensor, int conv_only,
                               actc_policy **out)
{
    actc_status st = actc__policy_new(spec, sizeof(quant_state), quant_choose, out);
    if (st == ACTC_OK) *(quant_state *)(*out)->state = (quant_state){bits, group, per_tensor, conv_only};
    return st;
}
