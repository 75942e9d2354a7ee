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
    actc_policy *p = calloc(1, sizeof *p);
    if (!p) return actc_set_error(ACTC_ERR_OOM, "out of memory for policy '%s'", spec);
    strncpy(p->spec, spec, sizeof p->spec - 1);
    p->choose = fixed_choose;
    p->destroy = fixed_destroy;
    p->state = (void *)codec;
    *out = p;
    return ACTC_OK;
}
