/* The policy layer: builds policies from their --compress specs.  The
 * interface they implement is the store's (autograd/policy_iface.h). */
#ifndef ACTC_POLICY_H
#define ACTC_POLICY_H
#include "../autograd/policy_iface.h"

/* Build a policy from its spec; ACTC_ERR_INVALID with a message listing the
 * valid specs when unknown. */
actc_status actc__policy_create(const char *spec, actc_policy **out);
#endif
