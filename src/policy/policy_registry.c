/* The table of policy specs accepted by --compress / actc_ctx_set_policy:
 * parses a spec and hands its parameters to the policy family's constructor. */
#include "policy.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const g_list =
    "  none              fp32: every saved tensor kept as is (the baseline)\n"
    "  bf16              ACT tensors stored as bfloat16 (2x smaller, lossy)\n"
    "  quant:B           ActNN per-group quantizer, B = 1..8 bits for every ACT tensor\n"
    "                    (groups of 256 elements of one sample, bf16 zero point and range)\n"
    "  quant:B,group=G   the same with groups of G elements\n"
    "  quant:B,per-tensor  one zero point and range per tensor (BLPA-like baseline)\n"
    "  actnn:L0          no compression (= none)\n"
    "  actnn:L1          4-bit per-group for the inputs saved by convolutions only\n"
    "  actnn:L2          4-bit per-group for every ACT tensor\n"
    "  actnn:L3          mixed precision, 2 bits per element on average (ActNN's L3)\n"
    "  actnn:X           mixed precision with an average of X bits, 1 <= X <= 8 (e.g. actnn:1.5)\n"
    "  (MASK and INDEX saves are always stored compactly and losslessly: ReLU and\n"
    "   dropout keep 1 bit per element, max-pool a uint8 window index.  quant and\n"
    "   actnn keep what the loss saves (the logits) in fp32, as ActNN does.)\n";

const char *actc_policy_list(void) { return g_list; }

static actc_status bad_spec(const char *spec, const char *why)
{
    return actc_set_error(ACTC_ERR_INVALID, "bad compression policy '%s': %s; valid values:\n%s", spec, why,
                          g_list);
}

/* A whole-string integer in [lo, hi]. */
static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

/* quant:B[,group=G|,per-tensor] */
static actc_status parse_quant(const char *spec, const char *args, actc_policy **out)
{
    char buf[64];
    if (strlen(args) >= sizeof buf) return bad_spec(spec, "too long");
    strcpy(buf, args);
    char *opt = strchr(buf, ',');
    if (opt) *opt++ = '\0';
    int bits, group = ACTC_QUANT_GROUP, per_tensor = 0;
    if (!parse_int(buf, 1, 8, &bits)) return bad_spec(spec, "quant takes a whole number of bits from 1 to 8");
    if (opt) {
        if (!strcasecmp(opt, "per-tensor")) {
            per_tensor = 1;
        } else if (!strncasecmp(opt, "group=", 6)) {
            if (!parse_int(opt + 6, 1, 1 << 24, &group)) return bad_spec(spec, "group must be a positive integer");
        } else {
            return bad_spec(spec, "quant's option is group=G or per-tensor");
        }
    }
    char canon[64];
    if (per_tensor)
        snprintf(canon, sizeof canon, "quant:%d,per-tensor", bits);
    else if (group != ACTC_QUANT_GROUP)
        snprintf(canon, sizeof canon, "quant:%d,group=%d", bits, group);
    else
        snprintf(canon, sizeof canon, "quant:%d", bits);
    return actc__policy_quant(canon, bits, group, per_tensor, 0, out);
}

/* actnn:L0..L3 or actnn:X (mixed precision at X average bits) */
static actc_status parse_actnn(const char *spec, const char *arg, actc_policy **out)
{
    if ((arg[0] == 'L' || arg[0] == 'l') && arg[1] >= '0' && arg[1] <= '3' && !arg[2]) {
        switch (arg[1]) {
        case '0': return actc__policy_fixed("actnn:L0", &actc_codec_fp32, out);
        case '1': return actc__policy_quant("actnn:L1", 4, ACTC_QUANT_GROUP, 0, 1, out);
        case '2': return actc__policy_quant("actnn:L2", 4, ACTC_QUANT_GROUP, 0, 0, out);
        default: return actc__policy_actnn_mixed("actnn:L3", 2.0, out);
        }
    }
    char *end;
    double b = strtod(arg, &end);
    if (end == arg || *end || !(b >= 1.0 && b <= 8.0))
        return bad_spec(spec, "actnn takes a level L0..L3 or an average number of bits from 1 to 8");
    char canon[64];
    snprintf(canon, sizeof canon, "actnn:%g", b);
    return actc__policy_actnn_mixed(canon, b, out);
}

actc_status actc__policy_create(const char *spec, actc_policy **out)
{
    *out = NULL;
    if (!spec) spec = "none";
    if (!strcasecmp(spec, "none") || !strcasecmp(spec, "fp32"))
        return actc__policy_fixed("none", &actc_codec_fp32, out);
    if (!strcasecmp(spec, "bf16")) return actc__policy_fixed("bf16", &actc_codec_bf16, out);
    if (!strncasecmp(spec, "quant:", 6)) return parse_quant(spec, spec + 6, out);
    if (!strncasecmp(spec, "actnn:", 6)) return parse_actnn(spec, spec + 6, out);
    return actc_set_error(ACTC_ERR_INVALID, "unknown compression policy '%s'; valid values:\n%s", spec, g_list);
}

actc_status actc_ctx_set_policy(actc_ctx *ctx, const char *spec)
{
    if (actc_tape_size(ctx))
        return actc_set_error(ACTC_ERR_STATE, "cannot change the compression policy while a tape is recorded");
    actc_policy *p;
    actc_status s = actc__policy_create(spec, &p);
    return s == ACTC_OK ? actc__ctx_install_policy(ctx, p) : s;
}
