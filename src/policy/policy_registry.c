/* The table of policy specs accepted by --compress / actc_ctx_set_policy:
 * parses a spec and hands its parameters to the policy family's constructor. */
#include "policy.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
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
    "  division          DIVISION (b=8,q=2): linear, convolution and normalisation inputs\n"
    "                    as a bf16 average-pooled part (block 8) plus the 2-bit residual\n"
    "                    (one bf16 minimum and range per sample and channel); other ACT\n"
    "                    saves fp32\n"
    "  division:b=B,q=Q  the same with block B (1..256) and Q residual bits (1..8)\n"
    "  division:lfc-only DIVISION's ablation: the pooled part alone (block 4, as the paper)\n"
    "  division:hfc-only DIVISION's ablation: the Q-bit residual alone, no pooled part\n"
    "  division:...,seq=tokens|features  how [batch, tokens, features] activations\n"
    "                    pool: along the tokens (default) or along the features\n"
    "  gact:L1, gact:4    GACT: every ACT tensor of any operator through the per-group\n"
    "                    quantizer, 32/8/4/2/1 bits per tensor chosen from its measured\n"
    "                    sensitivity, 4 bits per element on average (the controller\n"
    "                    re-measures every --adapt-interval steps); transformers\n"
    "                    use the textbook attention, which saves the probabilities\n"
    "  gact:3, gact:2    the same at 3 or 2 bits on average (gact:X, 1 <= X <= 8)\n"
    "  gact:fix4         every ACT tensor at 4 bits, the loss's too (gact:fixB, B = 1..8)\n"
    "  gact:CB1          gact:4 + segment checkpointing (one segment per residual or\n"
    "                    transformer block: only its compressed input is kept, the\n"
    "                    block is recomputed in backward), textbook attention\n"
    "  gact:CB2          gact:CB1 with memory-efficient attention\n"
    "  gact:CKPT         segment checkpointing without compression (the baseline)\n"
    "  gact:L0           no compression (= none)\n"
    "  agoq              AGoQ's layer-aware rule (block=128,fmt=fp4-bnb): attention's\n"
    "                    saves and the loss's exact; normalisations and activations\n"
    "                    recomputed in backward from their 4-bit inputs (the linear\n"
    "                    layers reading their outputs store nothing); other saves 4-bit\n"
    "  agoq:block=B,fmt=F,round=R  blocks of B (32..4096, a power of two), F = fp4-bnb\n"
    "                    (bitsandbytes' FP4), fp4-e2m1 (OCP MX) or nf4, R = nearest or\n"
    "                    stochastic\n"
    "  agoq:dbca         AGoQ with DBCA-PP on pipeline stages (--pipeline): a stage that\n"
    "                    holds less at once than the fullest (micro-batches held x its\n"
    "                    blocks) takes the most bits (up to 8) that keep its compressed\n"
    "                    context at the fullest stage's 4-bit one: 5-7 bits per-group\n"
    "                    (groups of the block, bf16 zero point and range), 8 bits the\n"
    "                    block-wise dynamic map; outside a pipeline it is agoq (options\n"
    "                    combine: agoq:dbca,block=64)\n"
    "  nf4, fp4, e2m1    every ACT save but the loss's in AGoQ's 4-bit block-wise format\n"
    "                    (NormalFloat4, bitsandbytes' FP4, OCP MX E2M1), without AGoQ's rule;\n"
    "                    options ,block=G (32..4096, a power of two, default 64) and\n"
    "                    ,round=nearest|stochastic (e.g. nf4,block=128)\n"
    "  compact[:opts]    CompAct: the linear layers of the model's blocks save a random\n"
    "                    projection x P of their input (rank r) and get a low-rank weight\n"
    "                    gradient the optimizer steps in the subspace; opts, comma-separated:\n"
    "                    r=F (a fraction of the width, default 0.25) or r=N (a rank),\n"
    "                    gap=N (a new P every N steps, default 50) or gap=none (one P),\n"
    "                    scale=A (the step back's alpha, default 0.25),\n"
    "                    proj=gauss|sparse|shared (sparse JL signs, or one P for every\n"
    "                    layer), density=D (sparse: non-zero fraction, default 1/3),\n"
    "                    layers=GLOB|GLOB (scopes instead of the blocks, e.g. *.mlp),\n"
    "                    all-linear (also the layers whose input another operator keeps,\n"
    "                    the attention output projection), reset (fresh moments with each P)\n"
    "  compact:...+P     CompAct with codec policy P for every save, the projections\n"
    "                    included (e.g. compact:r=0.25+gact:4, compact:r=0.5+division)\n"
    "  (MASK and INDEX saves are always stored compactly and losslessly: ReLU and\n"
    "   dropout keep 1 bit per element, max-pool a uint8 window index.  quant and\n"
    "   actnn keep what the loss saves (the probabilities) in fp32, as ActNN does.)\n";

const char *actc_policy_list(void) { return g_list; }

static void policy_destroy(actc_policy *p)
{
    free(p->state);
    free(p);
}

actc_status actc__policy_new(const char *spec, size_t state_bytes,
                             actc_status (*choose)(actc_policy *, const actc_save_desc *, const actc_codec **,
                                                   actc_codec_args *),
                             actc_policy **out)
{
    actc_policy *p = calloc(1, sizeof *p);
    void *state = state_bytes ? calloc(1, state_bytes) : NULL;
    if (!p || (state_bytes && !state)) {
        free(p);
        free(state);
        return actc_set_error(ACTC_ERR_OOM, "out of memory for policy '%s'", spec);
    }
    strncpy(p->spec, spec, sizeof p->spec - 1);
    p->choose = choose;
    p->destroy = policy_destroy;
    memset(p->region, ACTC_PLAN_ANY, sizeof p->region);
    p->state = state;
    *out = p;
    return ACTC_OK;
}

static actc_status bad_spec(const char *spec, const char *why)
{
    return actc_set_error(ACTC_ERR_INVALID, "bad compression policy '%s': %s; valid values:\n%s", spec, why,
                          g_list);
}

/* A whole-string integer in [lo, hi], strictly decimal (no spaces, '+'
 * or hex: "quant: 4" is not a spec). */
static int parse_int(const char *s, int lo, int hi, int *out)
{
    long long v;
    if (actc_parse_int(s, lo, hi, &v) != ACTC_OK) return 0;
    *out = (int)v;
    return 1;
}

/* A strict decimal number in [lo, hi] ("1.5", not "0x4" or " 2"). */
static int parse_real(const char *s, double lo, double hi, double *out)
{
    double v;
    if (actc_parse_number(s, &v) != ACTC_OK || !(v >= lo && v <= hi)) return 0;
    *out = v;
    return 1;
}

/* The same for an option kept as a float: the range is checked on the
 * float, so that the canonical spelling of what is kept (%.9g of the
 * float) parses back to it (1e-6 became 9.99999997e-07, under the bound;
 * found by fuzz_spec). */
static int parse_real_f(const char *s, float lo, float hi, float *out)
{
    double v;
    if (actc_parse_number(s, &v) != ACTC_OK || !(v >= -3.4e38 && v <= 3.4e38)) return 0;
    const float f = (float)v;
    if (!(f >= lo && f <= hi)) return 0;
    *out = f;
    return 1;
}

/* quant:B[,group=G|,per-tensor]: the codec's spec (codec_spec.c) */
static actc_status parse_quant(const char *spec, const char *args, actc_policy **out)
{
    actc_quant_opts o;
    char canon[64];
    const char *why = actc__quant_parse(args, &o, canon, sizeof canon);
    if (why) return bad_spec(spec, why);
    return actc__policy_quant(canon, o.bits, o.group, o.per_tensor, 0, out);
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
    double b;
    if (!parse_real(arg, 1.0, 8.0, &b))
        return bad_spec(spec, "actnn takes a level L0..L3 or an average number of bits from 1 to 8");
    char canon[64];
    snprintf(canon, sizeof canon, "actnn:%g", b);
    return actc__policy_actnn_mixed(canon, b, out);
}

/* division[:opt,...] with opt b=B, q=Q, lfc-only, hfc-only, seq=tokens|features:
 * the codec's spec (codec_spec.c) */
static actc_status parse_division(const char *spec, const char *args, actc_policy **out)
{
    actc_division_opts o;
    char canon[64];
    const char *why = actc__division_parse(args, &o, canon, sizeof canon);
    if (why) return bad_spec(spec, why);
    return actc__policy_division(canon, &o, out);
}

/* gact:L0|L1|B|fixB|CB1|CB2|CKPT */
static actc_status parse_gact(const char *spec, const char *arg, actc_policy **out)
{
    int bits;
    if (!strcasecmp(arg, "L0")) return actc__policy_fixed("gact:L0", &actc_codec_fp32, out);
    if (!strcasecmp(arg, "L1")) return actc__policy_gact("gact:4", 4.0, 0, 0, ACTC_ATTN_NAIVE, out);
    if (!strcasecmp(arg, "CB1")) return actc__policy_gact("gact:CB1", 4.0, 0, 1, ACTC_ATTN_NAIVE, out);
    if (!strcasecmp(arg, "CB2")) return actc__policy_gact("gact:CB2", 4.0, 0, 1, ACTC_ATTN_FLASH, out);
    if (!strcasecmp(arg, "CKPT")) return actc__policy_gact("gact:CKPT", 32.0, 32, 1, ACTC_ATTN_NAIVE, out);
    char canon[64];
    if (!strncasecmp(arg, "fix", 3)) {
        if (!parse_int(arg + 3, 1, 8, &bits)) return bad_spec(spec, "gact:fixB takes B = 1 to 8 bits");
        snprintf(canon, sizeof canon, "gact:fix%d", bits);
        return actc__policy_gact(canon, bits, bits, 0, ACTC_ATTN_NAIVE, out);
    }
    double b;
    if (!parse_real(arg, 1.0, 8.0, &b))
        return bad_spec(spec, "gact takes L0, L1, CB1, CB2, CKPT, fixB or an average number of bits from 1 to 8");
    snprintf(canon, sizeof canon, "gact:%g", b);
    return actc__policy_gact(canon, b, 0, 0, ACTC_ATTN_NAIVE, out);
}

static actc_status policy_create(const char *spec, actc_policy **out);

/* agoq[:block=B,fmt=F,round=nearest|stochastic] */
static actc_status parse_agoq(const char *spec, const char *args, actc_policy **out)
{
    char buf[96];
    if (strlen(args) >= sizeof buf) return bad_spec(spec, "too long");
    strcpy(buf, args);
    int block = ACTC_AGOQ_BLOCK, fmt = ACTC_B4_FP4_BNB, stochastic = 0, dbca = 0;
    const size_t len0 = strlen(buf);
    if (len0 && (buf[0] == ',' || buf[len0 - 1] == ',' || strstr(buf, ",,"))) return bad_spec(spec, "empty option");
    for (char *save = NULL, *opt = strtok_r(buf, ",", &save); opt; opt = strtok_r(NULL, ",", &save)) {
        if (!strncasecmp(opt, "block=", 6)) {
            if (!parse_int(opt + 6, ACTC_B4_BLOCK_MIN, ACTC_B4_BLOCK_MAX, &block) || (block & (block - 1)))
                return bad_spec(spec, "agoq's block= is a power of two from 32 to 4096 (the paper: 128)");
        } else if (!strncasecmp(opt, "fmt=", 4)) {
            if ((fmt = actc_block4_format(opt + 4)) < 0)
                return bad_spec(spec, "agoq's fmt= is fp4-bnb (bitsandbytes' FP4), fp4-e2m1 (OCP MX) or nf4");
        } else if (!strcasecmp(opt, "round=nearest") || !strcasecmp(opt, "round=stochastic")) {
            stochastic = tolower((unsigned char)opt[6]) == 's';
        } else if (!strcasecmp(opt, "dbca")) {
            dbca = 1;
        } else {
            return bad_spec(spec, "agoq's options are block=B, fmt=fp4-bnb|fp4-e2m1|nf4, round=nearest|stochastic, "
                                  "dbca");
        }
    }
    char canon[96];
    snprintf(canon, sizeof canon, "agoq:block=%d,fmt=%s%s%s", block, actc_block4_format_name(fmt),
             stochastic ? ",round=stochastic" : "", dbca ? ",dbca" : "");
    return actc__policy_agoq(canon, block, fmt, stochastic, dbca, out);
}

/* One of compact's options into o (layers: the scopes' globs); NULL, or
 * why it is bad. */
static const char *compact_option(const char *opt, actc_compact_opts *o, char *layers, size_t layers_cap,
                                  int *seen_density)
{
    double v;
    int n;
    if (!strncasecmp(opt, "r=", 2)) {
        /* A whole number is a rank, a decimal one a fraction of the width. */
        if (!strchr(opt + 2, '.') && parse_int(opt + 2, 1, 1 << 20, &n)) {
            o->rank = n;
        } else if (parse_real(opt + 2, 1e-9, 1.0, &v)) {
            o->rank = 0;
            o->fraction = v;
        } else {
            return "r= is a fraction of the layer's width in (0, 1] (e.g. 0.25) or a rank >= 1";
        }
    } else if (!strncasecmp(opt, "gap=", 4)) {
        if (!strcasecmp(opt + 4, "none")) o->gap = 0;
        else if (parse_int(opt + 4, 1, INT32_MAX, &n)) o->gap = (uint32_t)n;
        else return "gap= is a number of steps >= 1, or none for one fixed projection";
    } else if (!strncasecmp(opt, "scale=", 6)) {
        if (!parse_real_f(opt + 6, 1e-6f, 1e6f, &o->scale)) return "scale= is a positive number (alpha)";
    } else if (!strcasecmp(opt, "proj=gauss") || !strcasecmp(opt, "proj=gaussian")) {
        o->sparse = o->shared_seed = 0;
    } else if (!strcasecmp(opt, "proj=sparse")) {
        o->sparse = 1;
    } else if (!strcasecmp(opt, "proj=shared")) {
        o->shared_seed = 1;
    } else if (!strncasecmp(opt, "density=", 8)) {
        if (!parse_real_f(opt + 8, 1e-6f, 1.0f, &o->density)) return "density= is in (0, 1]";
        *seen_density = 1;
    } else if (!strncasecmp(opt, "layers=", 7)) {
        /* Any printable character but '+', which always means composition
         * (so the canonical spec parses back), and ',' which ends the option. */
        const char *g = opt + 7;
        int ok = *g && strlen(g) < layers_cap;
        for (; ok && *g; g++) ok = *g > ' ' && *g < 0x7f && *g != '+';
        if (!ok) return "layers= takes '|'-separated globs over scopes (printable, without spaces, ',' or '+')";
        strcpy(layers, opt + 7);
    } else if (!strcasecmp(opt, "all-linear")) {
        o->all_linear = 1;
    } else if (!strcasecmp(opt, "reset")) {
        o->reset = 1;
    } else {
        return "compact's options are r=, gap=, scale=, proj=gauss|sparse|shared, density=, layers=, all-linear, "
               "reset";
    }
    return NULL;
}

/* The canonical spelling: every option that is not the default, then the
 * inner policy's canonical spec (NULL: none given).  It parses back to the
 * same policy (checkpoints rebuild it from the text): floats in full
 * precision, a fraction with its point ("r=1.0" is not the rank "r=1").
 * The length snprintf would have written. */
static int compact_canon(const actc_compact_opts *o, const char *layers, const char *inner, char *canon, size_t cap)
{
    char frac[32];
    snprintf(frac, sizeof frac, "%.17g", o->fraction);
    if (!strpbrk(frac, ".e")) strcat(frac, ".0");
    int len = o->rank ? snprintf(canon, cap, "compact:r=%d", o->rank) : snprintf(canon, cap, "compact:r=%s", frac);
#define ADD(...) len += snprintf(canon + len, len < (int)cap ? cap - (size_t)len : 0, __VA_ARGS__)
    if (o->gap) ADD(",gap=%u", o->gap);
    else ADD(",gap=none");
    ADD(",scale=%.9g", (double)o->scale);
    if (o->sparse) ADD(",proj=sparse,density=%.9g", (double)o->density);
    if (o->shared_seed) ADD(",proj=shared");
    if (*layers) ADD(",layers=%s", layers);
    if (o->all_linear) ADD(",all-linear");
    if (o->reset) ADD(",reset");
    if (inner) ADD("+%s", inner);
#undef ADD
    return len;
}

/* compact[:opt,...][+codec policy] */
static actc_status parse_compact(const char *spec, actc_policy **out)
{
    char buf[ACTC_POLICY_MAX], layers[ACTC_COMPACT_LAYERS_MAX] = "";
    if (strlen(spec) >= sizeof buf) return bad_spec(spec, "too long");
    strcpy(buf, spec);
    /* The '+' before a policy name (a letter follows), not an exponent's
     * sign ("scale=1e+2"), nor a '+' that ends the spec. */
    char *inner_spec = buf;
    while ((inner_spec = strchr(inner_spec, '+')) && inner_spec[1] && !isalpha((unsigned char)inner_spec[1]))
        inner_spec++;
    if (inner_spec) *inner_spec++ = '\0';
    char *opts = buf + 7; /* after "compact" */
    if (*opts == ':') opts++;
    else if (*opts) return bad_spec(spec, "compact's options follow a ':'");
    actc_compact_opts o = {ACTC_COMPACT_FRACTION, 0, ACTC_COMPACT_GAP, ACTC_COMPACT_SCALE, 0, ACTC_COMPACT_DENSITY,
                           0, 0, 0};
    int seen_density = 0;
    const size_t len0 = strlen(opts);
    if (len0 && (opts[0] == ',' || opts[len0 - 1] == ',' || strstr(opts, ",,"))) return bad_spec(spec, "empty option");
    for (char *save = NULL, *opt = strtok_r(opts, ",", &save); opt; opt = strtok_r(NULL, ",", &save)) {
        const char *why = compact_option(opt, &o, layers, sizeof layers, &seen_density);
        if (why) return bad_spec(spec, why);
    }
    if (seen_density && !o.sparse) return bad_spec(spec, "density= applies to proj=sparse");
    actc_policy *inner = NULL;
    if (inner_spec) {
        if (!*inner_spec) return bad_spec(spec, "nothing after '+'");
        if (strchr(inner_spec, '+'))
            return bad_spec(spec, "compact composes with one codec policy (compact:...+P), not two");
        if (!strncasecmp(inner_spec, "compact", 7)) return bad_spec(spec, "compact given twice");
    }
    actc_status st = policy_create(inner_spec ? inner_spec : "none", &inner);
    if (st != ACTC_OK) return st;
    char canon[ACTC_POLICY_MAX];
    if (compact_canon(&o, layers, inner_spec ? inner->spec : NULL, canon, sizeof canon) >= (int)sizeof canon) {
        actc__policy_free(inner);
        return bad_spec(spec, "too long");
    }
    return actc__policy_compact(canon, &o, layers, inner, out);
}

actc_status actc__policy_create(const char *spec, actc_policy **out)
{
    *out = NULL;
    if (spec && !strncasecmp(spec, "compact", 7)) return parse_compact(spec, out);
    if (spec && strchr(spec, '+'))
        return bad_spec(spec, "only compact composes with a codec policy, and comes first (compact:...+P)");
    return policy_create(spec, out);
}

static actc_status policy_create(const char *spec, actc_policy **out)
{
    *out = NULL;
    if (!spec) spec = "none";
    if (!strcasecmp(spec, "none") || !strcasecmp(spec, "fp32"))
        return actc__policy_fixed("none", &actc_codec_fp32, out);
    if (!strcasecmp(spec, "bf16")) return actc__policy_fixed("bf16", &actc_codec_bf16, out);
    if (!strncasecmp(spec, "quant:", 6)) return parse_quant(spec, spec + 6, out);
    if (!strncasecmp(spec, "actnn:", 6)) return parse_actnn(spec, spec + 6, out);
    if (!strncasecmp(spec, "gact:", 5)) return parse_gact(spec, spec + 5, out);
    if (!strcasecmp(spec, "division")) return parse_division(spec, "", out);
    if (!strcasecmp(spec, "agoq")) return parse_agoq(spec, "", out);
    if (!strncasecmp(spec, "agoq:", 5))
        return spec[5] ? parse_agoq(spec, spec + 5, out) : bad_spec(spec, "no options after 'agoq:'");
    if (!strncasecmp(spec, "division:", 9))
        return spec[9] ? parse_division(spec, spec + 9, out) : bad_spec(spec, "no options after 'division:'");
    if (actc_block4_format(spec) >= 0 || !strncasecmp(spec, "fp4", 3) || !strncasecmp(spec, "e2m1", 4) ||
        !strncasecmp(spec, "nf4", 3)) {
        const actc_codec *codec;
        actc_codec_args a;
        char canon[ACTC_POLICY_MAX];
        const char *why = actc__codec_parse(spec, 0, &codec, &a, canon, sizeof canon);
        if (!why && codec == &actc_codec_block4) return actc__policy_codec(canon, codec, &a, out);
        return bad_spec(spec, why ? why : "not a 4-bit format");
    }
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
