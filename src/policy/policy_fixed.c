/* Fixed-codec policies: every ACT save goes through one codec.
 *   none  - fp32 copy (what a plain framework keeps)
 *   bf16  - bfloat16, half the bytes
 *   nf4, fp4, e2m1 [,block=G][,round=R] - AGoQ's 4-bit block-wise formats
 *           with their options, for every ACT save but the loss's (kept
 *           fp32, as quant:B keeps it): the format without AGoQ's rule */
#include "policy.h"
#include <stdlib.h>
#include <string.h>

static actc_status fixed_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                                actc_codec_args *args)
{
    (void)d; (void)args;
    *codec = (const actc_codec *)p->state;
    return ACTC_OK;
}

static void fixed_destroy(actc_policy *p) { free(p); }

actc_status actc__policy_fixed(const char *spec, const actc_codec *codec, actc_policy **out)
{
    actc_status st = actc__policy_new(spec, 0, fixed_choose, out);
    if (st != ACTC_OK) return st;
    /* The codec is static data, not state to free. */
    (*out)->state = (void *)codec;
    (*out)->destroy = fixed_destroy;
    return ACTC_OK;
}

typedef struct {
    const actc_codec *codec;
    actc_codec_args args; /* the codec's options; the key is the store's */
} codec_state;

static actc_status codec_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                                actc_codec_args *args)
{
    const codec_state *s = p->state;
    if (d->role->role == ACTC_ROLE_LOSS_IN) {
        *codec = &actc_codec_fp32;
        return ACTC_OK;
    }
    *codec = s->codec;
    args->group = s->args.group;
    memcpy(args->iparam, s->args.iparam, sizeof args->iparam);
    return ACTC_OK;
}

actc_status actc__policy_codec(const char *spec, const actc_codec *codec, const actc_codec_args *a,
                               actc_policy **out)
{
    actc_status st = actc__policy_new(spec, sizeof(codec_state), codec_choose, out);
    if (st == ACTC_OK) *(codec_state *)(*out)->state = (codec_state){codec, *a};
    return st;
}
