/* Composition: a policy that decorates another (compact's projections over
 * a codec policy) forwards what it does not do itself to the policy it
 * wraps.  The forwarding is written once here, so a decorator sets only the
 * slots it adds or changes; what is looked up rather than forwarded (the
 * measure hooks, actc__policy_learner; the tensor table) is found by
 * walking the chain, and a decorator's after_backward is its own. */
#include "policy.h"
#include <stdlib.h>
#include <string.h>

static actc_status fwd_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                              actc_codec_args *args)
{
    return p->inner->choose(p->inner, d, codec, args);
}

static actc_status fwd_save(const actc_policy *p, actc__wbuf *w) { return p->inner->save_state(p->inner, w); }

static actc_status fwd_load(actc_policy *p, actc__rbuf *r) { return p->inner->load_state(p->inner, r); }

static void decorator_destroy(actc_policy *p)
{
    actc__policy_free(p->inner);
    free(p->state);
    free(p);
}

actc_status actc__policy_decorate(const char *spec, size_t state_bytes, actc_policy *inner, actc_policy **out)
{
    actc_status st = actc__policy_new(spec, state_bytes, fwd_choose, out);
    if (st != ACTC_OK) {
        actc__policy_free(inner);
        return st;
    }
    actc_policy *p = *out;
    p->inner = inner;
    p->save_state = inner->save_state ? fwd_save : NULL;
    p->load_state = inner->load_state ? fwd_load : NULL;
    p->destroy = decorator_destroy;
    memcpy(p->region, inner->region, sizeof p->region);
    return ACTC_OK;
}

actc_policy *actc__policy_find_tensors(const actc_policy *p)
{
    while (p && !p->tensors) p = p->inner;
    return (actc_policy *)p;
}
