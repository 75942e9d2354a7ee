/* Fixed-codec policies: every ACT save goes through one codec.
 *   none  - fp32 copy (what a plain framework keeps)
 *   bf16  - bfloat16, half the bytes */
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
