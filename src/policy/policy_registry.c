/* The table of policy specs accepted by --compress / actc_ctx_set_policy. */
#include "policy.h"
#include <string.h>
#include <strings.h>

actc_status actc__policy_fixed(const char *spec, const actc_codec *codec, actc_policy **out);

static const char *const g_list =
    "  none            fp32: every saved tensor kept as is (the baseline)\n"
    "  bf16            ACT tensors stored as bfloat16 (2x smaller, lossy)\n"
    "  (MASK and INDEX saves are always stored compactly and losslessly: ReLU and\n"
    "   dropout keep 1 bit per element, max-pool a uint8 window index.)\n";

const char *actc_policy_list(void) { return g_list; }

actc_status actc__policy_create(const char *spec, actc_policy **out)
{
    *out = NULL;
    if (!spec) spec = "none";
    if (!strcasecmp(spec, "none") || !strcasecmp(spec, "fp32"))
        return actc__policy_fixed("none", &actc_codec_fp32, out);
    if (!strcasecmp(spec, "bf16")) return actc__policy_fixed("bf16", &actc_codec_bf16, out);
    return actc_set_error(ACTC_ERR_INVALID, "unknown compression policy '%s'; valid values:\n%s",
                          spec, g_list);
}

actc_status actc_ctx_set_policy(actc_ctx *ctx, const char *spec)
{
    if (actc_tape_size(ctx))
        return actc_set_error(ACTC_ERR_STATE, "cannot change the compression policy while a tape is recorded");
    actc_policy *p;
    actc_status s = actc__policy_create(spec, &p);
    return s == ACTC_OK ? actc__ctx_install_policy(ctx, p) : s;
}
