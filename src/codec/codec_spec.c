/* Codec specs: the text that names a codec and its options ("quant:2",
 * "nf4,block=128", "division:b=8,q=2") turned into the codec and its
 * arguments.  The policies whose spec is a codec's (quant:B, division)
 * parse their options here too, so the two grammars cannot drift apart. */
#include "codec.h"
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define OPTS_MAX 64

static int int_in(const char *s, int lo, int hi, int *out)
{
    long long v;
    if (actc_parse_int(s, lo, hi, &v) != ACTC_OK) return 0;
    *out = (int)v;
    return 1;
}

/* "a,,b", ",a" and "a," have an empty option. */
static int empty_option(const char *s)
{
    const size_t n = strlen(s);
    return n && (s[0] == ',' || s[n - 1] == ',' || strstr(s, ",,"));
}

const char *actc__quant_parse(const char *opts, actc_quant_opts *o, char *canon, size_t cap)
{
    char buf[OPTS_MAX];
    if (strlen(opts) >= sizeof buf) return "too long";
    strcpy(buf, opts);
    char *opt = strchr(buf, ',');
    if (opt) *opt++ = '\0';
    *o = (actc_quant_opts){0, ACTC_QUANT_GROUP, 0};
    if (!int_in(buf, 1, 8, &o->bits)) return "quant takes a whole number of bits from 1 to 8";
    if (opt) {
        if (!strcasecmp(opt, "per-tensor")) {
            o->per_tensor = 1;
        } else if (!strncasecmp(opt, "group=", 6)) {
            if (!int_in(opt + 6, 1, 1 << 24, &o->group)) return "group must be a positive integer";
        } else {
            return "quant's option is group=G or per-tensor";
        }
    }
    if (o->per_tensor)
        snprintf(canon, cap, "quant:%d,per-tensor", o->bits);
    else if (o->group != ACTC_QUANT_GROUP)
        snprintf(canon, cap, "quant:%d,group=%d", o->bits, o->group);
    else
        snprintf(canon, cap, "quant:%d", o->bits);
    return NULL;
}

/* The canonical "division:b=B,q=Q[,lfc-only|,hfc-only][,seq=...]"; 0 if it
 * does not fit. */
static int division_spell(const actc_division_opts *o, char *canon, size_t cap)
{
    int len = o->mode == ACTC_DIV_LFC_ONLY ? snprintf(canon, cap, "division:b=%d", o->block)
                                           : snprintf(canon, cap, "division:b=%d,q=%d", o->block, o->bits);
    if (len < 0 || (size_t)len >= cap) return 0;
    if (o->mode != ACTC_DIV_FULL)
        len += snprintf(canon + len, cap - (size_t)len, ",%s", o->mode == ACTC_DIV_LFC_ONLY ? "lfc-only" : "hfc-only");
    if (o->tokens != ACTC_DIVISION_TOKENS && (size_t)len < cap)
        len += snprintf(canon + len, cap - (size_t)len, ",seq=%s", o->tokens ? "tokens" : "features");
    return (size_t)len < cap;
}

const char *actc__division_parse(const char *opts, actc_division_opts *o, char *canon, size_t cap)
{
    char buf[OPTS_MAX];
    if (strlen(opts) >= sizeof buf) return "too long";
    strcpy(buf, opts);
    *o = (actc_division_opts){-1, ACTC_DIVISION_BITS, ACTC_DIV_FULL, ACTC_DIVISION_TOKENS};
    int seen_b = 0, seen_q = 0, seen_seq = 0;
    if (empty_option(buf)) return "empty option";
    for (char *save = NULL, *opt = strtok_r(buf, ",", &save); opt; opt = strtok_r(NULL, ",", &save)) {
        if (!strncasecmp(opt, "b=", 2)) {
            if (seen_b++) return "b= given twice";
            if (!int_in(opt + 2, 1, 256, &o->block)) return "division's block b= is 1 to 256";
        } else if (!strncasecmp(opt, "q=", 2)) {
            if (seen_q++) return "q= given twice";
            if (!int_in(opt + 2, 1, 8, &o->bits)) return "division's residual bits q= are 1 to 8";
        } else if (!strcasecmp(opt, "lfc-only") || !strcasecmp(opt, "hfc-only")) {
            if (o->mode != ACTC_DIV_FULL) return "lfc-only and hfc-only exclude each other";
            o->mode = tolower((unsigned char)opt[0]) == 'l' ? ACTC_DIV_LFC_ONLY : ACTC_DIV_HFC_ONLY;
        } else if (!strcasecmp(opt, "seq=tokens") || !strcasecmp(opt, "seq=features")) {
            if (seen_seq++) return "seq= given twice";
            o->tokens = tolower((unsigned char)opt[4]) == 't';
        } else {
            return "division's options are b=B, q=Q, lfc-only, hfc-only, seq=tokens|features";
        }
    }
    if (o->mode == ACTC_DIV_LFC_ONLY && seen_q) return "lfc-only keeps no residual: q= does not apply";
    /* The paper's ablation without the HFC pools with B = 4 (appendix S). */
    if (o->block < 0) o->block = o->mode == ACTC_DIV_LFC_ONLY ? 4 : ACTC_DIVISION_BLOCK;
    return division_spell(o, canon, cap) ? NULL : "too long";
}

void actc__division_args(const actc_division_opts *o, int ndim, actc_codec_args *a)
{
    a->bits = o->bits;
    a->iparam[0] = o->block;
    a->iparam[1] = o->mode;
    a->iparam[2] = ndim >= 5 ? 3 : ndim == 4 ? 2 : 1;
    a->iparam[3] = ndim == 3 && o->tokens;
}

static void block4_spell(const actc_codec_args *a, char *canon, size_t cap)
{
    snprintf(canon, cap, "%s,block=%d%s", actc_block4_format_name(a->iparam[0]), a->group,
             a->iparam[1] ? ",round=stochastic" : "");
}

/* nf4 | fp4-bnb | fp4-e2m1 (fp4, e2m1) [,block=G][,round=nearest|stochastic] */
static const char *block4_parse(const char *spec, actc_codec_args *a, char *canon, size_t cap)
{
    char buf[OPTS_MAX];
    if (strlen(spec) >= sizeof buf) return "too long";
    strcpy(buf, spec);
    if (empty_option(buf)) return "empty option";
    char *save = NULL, *name = strtok_r(buf, ",", &save);
    for (char *c = name; c && *c; c++) *c = (char)tolower((unsigned char)*c); /* specs are case-insensitive */
    int fmt = actc_block4_format(name);
    if (fmt < 0 && !strcasecmp(name, "fp4")) fmt = ACTC_B4_FP4_BNB;
    if (fmt < 0 && !strcasecmp(name, "e2m1")) fmt = ACTC_B4_FP4_E2M1;
    int block = ACTC_B4_BLOCK, stochastic = 0, seen_block = 0, seen_round = 0;
    for (char *opt = strtok_r(NULL, ",", &save); opt; opt = strtok_r(NULL, ",", &save)) {
        if (!strncasecmp(opt, "block=", 6)) {
            if (seen_block++) return "block= given twice";
            if (!int_in(opt + 6, ACTC_B4_BLOCK_MIN, ACTC_B4_BLOCK_MAX, &block) || (block & (block - 1)))
                return "a 4-bit codec's block= is a power of two from 32 to 4096";
        } else if (!strcasecmp(opt, "round=nearest") || !strcasecmp(opt, "round=stochastic")) {
            if (seen_round++) return "round= given twice";
            stochastic = tolower((unsigned char)opt[6]) == 's';
        } else {
            return "a 4-bit codec's options are block=G and round=nearest|stochastic";
        }
    }
    a->group = block;
    a->iparam[0] = fmt;
    a->iparam[1] = stochastic;
    block4_spell(a, canon, cap);
    return NULL;
}

/* dyn8[,block=G] */
static const char *dyn8_parse(const char *opts, actc_codec_args *a, char *canon, size_t cap)
{
    int block = ACTC_DYN8_BLOCK;
    if (*opts) {
        if (strncasecmp(opts, ",block=", 7) || !int_in(opts + 7, 1, 1 << 24, &block))
            return "dyn8's option is block=G, a positive integer";
    }
    a->group = block;
    snprintf(canon, cap, "dyn8,block=%d", block);
    return NULL;
}

/* Is spec the name n, alone or followed by options (after sep)? */
static int named(const char *spec, const char *n, char sep)
{
    const size_t len = strlen(n);
    return !strncasecmp(spec, n, len) && (spec[len] == '\0' || spec[len] == sep);
}

const char *actc__codec_parse(const char *spec, int ndim, const actc_codec **codec, actc_codec_args *a, char *canon,
                              size_t cap)
{
    memset(a, 0, sizeof *a);
    *codec = NULL;
    static const struct {
        const char *name;
        const actc_codec *codec;
    } plain[] = {{"fp32", &actc_codec_fp32}, {"bf16", &actc_codec_bf16}, {"mask", &actc_codec_mask1}};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (!strcasecmp(spec, plain[i].name)) {
            *codec = plain[i].codec;
            snprintf(canon, cap, "%s", plain[i].name);
            return NULL;
        }
    if (named(spec, "index", ':')) {
        if (!int_in(spec[5] ? spec + 6 : "", 1, 4, &a->width) || a->width == 3)
            return "index takes its width in bytes: index:1, index:2 or index:4";
        *codec = &actc_codec_index;
        snprintf(canon, cap, "index:%d", a->width);
        return NULL;
    }
    if (named(spec, "quant", ':')) {
        actc_quant_opts o;
        const char *why = actc__quant_parse(spec[5] ? spec + 6 : "", &o, canon, cap);
        if (why) return why;
        *codec = o.per_tensor ? &actc_codec_quant_tensor : &actc_codec_quant;
        a->bits = o.bits;
        a->group = o.group;
        return NULL;
    }
    if (named(spec, "division", ':')) {
        actc_division_opts o;
        const char *why = actc__division_parse(spec[8] ? spec + 9 : "", &o, canon, cap);
        if (why) return why;
        *codec = &actc_codec_division;
        actc__division_args(&o, ndim, a);
        return NULL;
    }
    if (named(spec, "dyn8", ',')) {
        *codec = &actc_codec_dyn8;
        return dyn8_parse(spec + 4, a, canon, cap);
    }
    static const char *const formats[] = {"nf4", "fp4-bnb", "fp4-e2m1", "fp4", "e2m1"};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (named(spec, formats[i], ',')) {
            *codec = &actc_codec_block4;
            return block4_parse(spec, a, canon, cap);
        }
    return "unknown codec (fp32, bf16, mask, index:W, quant:B[,group=G|,per-tensor], nf4|fp4-bnb|fp4-e2m1"
           "[,block=G][,round=R], dyn8[,block=G], division[:options])";
}

const char *actc__codec_spell(const actc_codec *c, const actc_codec_args *a, char *canon, size_t cap)
{
    const int g = a->group > 0 ? a->group : ACTC_QUANT_GROUP;
    if (c == &actc_codec_quant_tensor) {
        snprintf(canon, cap, "quant:%d,per-tensor", a->bits);
    } else if (c == &actc_codec_quant) {
        char bits[16] = "mixed";
        if (!a->sample_bits) snprintf(bits, sizeof bits, "%d", a->bits);
        if (g != ACTC_QUANT_GROUP)
            snprintf(canon, cap, "quant:%s,group=%d", bits, g);
        else
            snprintf(canon, cap, "quant:%s", bits);
    } else if (c == &actc_codec_division) {
        /* iparam[3] (pool along the tokens) is only ever set for 3-D. */
        const actc_division_opts o = {a->iparam[0], a->bits, a->iparam[1],
                                      a->ndim == 3 ? a->iparam[3] : ACTC_DIVISION_TOKENS};
        if (!division_spell(&o, canon, cap)) return "too long";
    } else if (c == &actc_codec_block4) {
        actc_codec_args b = *a;
        if (b.group <= 0) b.group = ACTC_B4_BLOCK;
        block4_spell(&b, canon, cap);
    } else if (c == &actc_codec_dyn8) {
        snprintf(canon, cap, "dyn8,block=%d", a->group > 0 ? a->group : ACTC_DYN8_BLOCK);
    } else if (c == &actc_codec_index) {
        snprintf(canon, cap, "index:%d", a->width);
    } else if (c == &actc_codec_fp32 || c == &actc_codec_bf16 || c == &actc_codec_mask1) {
        snprintf(canon, cap, "%s", c == &actc_codec_fp32 ? "fp32" : c == &actc_codec_bf16 ? "bf16" : "mask");
    } else {
        return "a codec with no spec";
    }
    return NULL;
}
