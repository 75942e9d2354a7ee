/* AGoQ's layer-aware activation rule (Wang et al., section 4.1, Table 1):
 *   - attention's saved tensors (Q, K, V, output, probabilities, statistics)
 *     stay exact: their gradient error grows with the sequence length
 *     (appendix 8.1.3);
 *   - normalisations and activations are recomputed regions (actc_region_n):
 *     only their inputs are stored, at 4 bits, and their outputs - the inputs
 *     of the Q/K/V projections, FFN1/gate and FFN2 - are recomputed in
 *     backward, so those linear layers store nothing of their own;
 *   - every other ACT save (the remaining linear inputs) at 4 bits;
 *   - the loss keeps what it saves exact.
 * 4 bits = the block-wise codec (codec_block4.c), fp4-bnb with blocks of 128
 * by default (the paper's block-wise FP4 at 128).
 *
 * agoq:dbca adds DBCA-PP (section 4.2): on a pipeline stage that holds less
 * at once than the fullest (actc_ctx_set_stage: micro-batches held x the
 * blocks of the stage), the compressed saves take the most bits B that
 * keep the stage's compressed context at most the fullest stage's at 4
 * bits: held x bytes(B) <= held_max x bytes(4), bytes per element as the
 * codecs plan them (so the formats' block scales count: 4.25 bits at
 * blocks of 128), B from 4 to 8: Eq. 22's 4 N_max / N_i, rounded down to
 * what fits, with the stages' blocks counted (the paper's stages hold equal
 * layers; a layout balanced by parameters need not, and the fullest stage
 * need not be the first).  5 to 7 bits through
 * the per-group k-bit quantizer (groups of the block size, a bf16 zero point
 * and range each, stochastic rounding), 8 through the block-wise 8-bit
 * dynamic map (blocks of 256, an fp32 absmax each). */
#include "policy.h"

typedef struct {
    int block, fmt, stochastic;
    int dbca;
    double cost[9];          /* bytes per element at 4..8 bits              */
} agoq_state;

/* The codec and its options for the compressed saves at b bits. */
static const actc_codec *codec_at(const agoq_state *s, int b, actc_codec_args *args)
{
    if (b == 8) {
        args->group = ACTC_DYN8_BLOCK;
        return &actc_codec_dyn8;
    }
    if (b > 4) {
        args->bits = b;
        args->group = s->block;
        return &actc_codec_quant;
    }
    args->group = s->block;
    args->iparam[0] = s->fmt;
    args->iparam[1] = s->stochastic;
    return &actc_codec_block4;
}

static int agoq_stage_bits(const actc_policy *p, int held, int held_max)
{
    const agoq_state *s = p->state;
    if (!s->dbca || held <= 0) return 4;
    for (int b = 8; b > 4; b--)
        if ((double)held * s->cost[b] <= (double)held_max * s->cost[4]) return b;
    return 4;
}

static int kept_exact(actc_role r)
{
    return actc_role_is_attention(r) || r == ACTC_ROLE_LOSS_IN || r == ACTC_ROLE_STATS || r == ACTC_ROLE_WEIGHT;
}

static actc_status agoq_choose(actc_policy *p, const actc_save_desc *d, const actc_codec **codec,
                               actc_codec_args *args)
{
    const agoq_state *s = p->state;
    if (kept_exact(d->role->role)) {
        *codec = &actc_codec_fp32;
        return ACTC_OK;
    }
    *codec = codec_at(s, agoq_stage_bits(p, d->stage_held, d->stage_held_max), args);
    return ACTC_OK;
}

actc_status actc__policy_agoq(const char *spec, int block, int fmt, int stochastic, int dbca, actc_policy **out)
{
    actc_status st = actc__policy_new(spec, sizeof(agoq_state), agoq_choose, out);
    if (st != ACTC_OK) return st;
    agoq_state *s = (*out)->state;
    *s = (agoq_state){.block = block, .fmt = fmt, .stochastic = stochastic, .dbca = dbca};
    /* Bytes per element of a large activation (16 samples of 65536). */
    for (int b = 4; b <= 8; b++) {
        actc_codec_args a = {.ndim = 2, .shape = {16, 65536}};
        const actc_codec *c = codec_at(s, b, &a);
        s->cost[b] = (double)c->plan(&a, (size_t)16 * 65536) / (16.0 * 65536.0);
    }
    if (dbca) (*out)->stage_bits = agoq_stage_bits;
    (*out)->region[ACTC_REGION_NORM] = ACTC_PLAN_RECOMPUTE;
    (*out)->region[ACTC_REGION_ACT] = ACTC_PLAN_RECOMPUTE;
    return ACTC_OK;
}
