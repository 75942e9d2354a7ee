/* A run's learnt adaptation as one blob: the policy's state (ActNN's
 * per-layer gradient statistics and bits, GACT's sensitivities, CompAct's
 * projection ages...) and its controller's (when the next measurement is
 * due, the running gradient moments behind the alert), framed by lengths so
 * each loads with its own checks.  The checkpoint keeps it whole, the same
 * for rank 0 and for the other ranks of a data-parallel run. */
#include "policy.h"

/* One part (0: the policy's, 1: the controller's) into w. */
static actc_status put_part(int k, const actc_policy *p, const actc_controller *c, actc__wbuf *w)
{
    if (k == 0) return p && p->save_state ? p->save_state(p, w) : ACTC_OK;
    return c ? actc__controller_save(c, w) : ACTC_OK;
}

/* Each part is counted first, then written behind its length: streamed,
 * never copied (the controller's running mean is one float a parameter). */
actc_status actc__learnt_save(const actc_policy *p, const actc_controller *c, actc__wbuf *w)
{
    for (int k = 0; k < 2; k++) {
        actc__wbuf n = {0};
        n.count_only = 1;
        actc_status s = put_part(k, p, c, &n);
        if (s != ACTC_OK) return s;
        actc__w_u64(w, n.len);
        const size_t at = w->len;
        if ((s = put_part(k, p, c, w)) != ACTC_OK) return s;
        if (!w->failed && w->len - at != n.len)
            return actc_set_error(ACTC_ERR_STATE, "the %s state changed while it was written",
                                  k ? "controller's" : "policy's");
    }
    return ACTC_OK;
}

int actc__learnt_split(const uint8_t *blob, size_t n, const uint8_t **pol, size_t *plen, const uint8_t **ctl,
                       size_t *clen)
{
    actc__rbuf b = {blob, 0, n, 0};
    const uint64_t pn = actc__r_u64(&b);
    const uint8_t *p = pn <= n ? actc__r_take(&b, (size_t)pn) : NULL;
    const uint64_t cn = actc__r_u64(&b);
    const uint8_t *c = cn <= n ? actc__r_take(&b, (size_t)cn) : NULL;
    if (!blob || b.bad || b.pos != b.end || (pn && !p) || (cn && !c)) return 0;
    *pol = p;
    *plen = (size_t)pn;
    *ctl = c;
    *clen = (size_t)cn;
    return 1;
}
