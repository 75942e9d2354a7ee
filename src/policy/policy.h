/* The policy layer: builds policies from their --compress specs.  The
 * interface they implement is the store's (autograd/policy_iface.h). */
#ifndef ACTC_POLICY_H
#define ACTC_POLICY_H
#include "../autograd/policy_iface.h"

/* Build a policy from its spec; ACTC_ERR_INVALID with a message listing the
 * valid specs when unknown. */
actc_status actc__policy_create(const char *spec, actc_policy **out);

/* A new policy with `spec`, the given functions and a zeroed state of
 * state_bytes (none if 0) whose destroy frees p->state and p unless the
 * family passes its own.  ACTC_ERR_OOM with a message on failure. */
actc_status actc__policy_new(const char *spec, size_t state_bytes,
                             actc_status (*choose)(actc_policy *, const actc_save_desc *, const actc_codec **,
                                                   actc_codec_args *),
                             actc_policy **out);

/* A policy decorating inner (composition: compact's projections over a
 * codec policy): it takes ownership of inner (and frees it on failure), and
 * every slot the decorator does not set itself reaches inner's: choose,
 * save_state/load_state and the region plans; the measure hooks and the
 * tensor table are found on the chain (actc__policy_learner,
 * actc__policy_find_tensors), and after_backward is the decorator's own.
 * destroy frees inner, the state and p. */
actc_status actc__policy_decorate(const char *spec, size_t state_bytes, actc_policy *inner, actc_policy **out);
/* The policy on p's chain with a tensor table, or NULL. */
actc_policy *actc__policy_find_tensors(const actc_policy *p);

/* Constructors of the policy families (one file each); spec is the
 * canonical spelling kept in the policy. */
actc_status actc__policy_fixed(const char *spec, const actc_codec *codec, actc_policy **out);
/* Every ACT save but the loss's through codec with the options of a (its
 * group and iparam; the 4-bit block-wise formats as policies). */
actc_status actc__policy_codec(const char *spec, const actc_codec *codec, const actc_codec_args *a,
                               actc_policy **out);
actc_status actc__policy_quant(const char *spec, int bits, int group, int per_tensor, int conv_only,
                               actc_policy **out);
actc_status actc__policy_actnn_mixed(const char *spec, double budget, actc_policy **out);
/* DIVISION (policy_division.c): the dual-precision codec with the options
 * of o (block B, Q residual bits, mode ACTC_DIV_*, tokens: pool [B,T,D]
 * activations along T, else D) for linear, convolution and normalisation
 * inputs. */
actc_status actc__policy_division(const char *spec, const actc_division_opts *o, actc_policy **out);
/* CompAct (policy_compact.c): random projections of linear inputs. */
typedef struct {
    double fraction;  /* rank as a fraction of the layer's width (rank 0)  */
    int rank;         /* absolute rank (> 0), else the fraction applies     */
    uint32_t gap;     /* steps per seed epoch; 0: one projection for good   */
    float scale;      /* alpha: the optimizer's step back                   */
    int sparse;       /* sparse JL signs instead of Gaussian entries        */
    float density;    /* sparse: fraction of non-zero entries               */
    int shared_seed;  /* one P for every layer of the same width            */
    int all_linear;   /* also inputs another save keeps (attention output)  */
    int reset;        /* zero the subspace state with each new projection   */
} actc_compact_opts;
#define ACTC_COMPACT_FRACTION 0.25
#define ACTC_COMPACT_GAP 50      /* the paper's T for 60M-350M (appendix B.1) */
#define ACTC_COMPACT_SCALE 0.25f /* the paper's alpha (appendix B.1)          */
#define ACTC_COMPACT_DENSITY (1.0f / 3.0f) /* Achlioptas' sparse signs       */
#define ACTC_COMPACT_LAYERS_MAX 96  /* bytes of a layers= value, NUL included */
/* A compact policy over the codec policy inner (it takes ownership, and
 * frees inner on failure); layers: '|'-separated globs over scopes, or ""
 * for the default, the linear layers inside the model's blocks. */
actc_status actc__policy_compact(const char *spec, const actc_compact_opts *o, const char *layers, actc_policy *inner,
                                 actc_policy **out);
/* AGoQ (policy_agoq.c): attention and loss saves exact, norms and
 * activations recomputed from their 4-bit inputs, other ACT saves at 4
 * bits: block-wise format fmt (ACTC_B4_*), blocks of `block`, stochastic
 * or nearest rounding; dbca: DBCA-PP's bits on pipeline stages. */
actc_status actc__policy_agoq(const char *spec, int block, int fmt, int stochastic, int dbca, actc_policy **out);
#define ACTC_AGOQ_BLOCK 128 /* the paper's blocksize (section 4.1.2) */
/* GACT (policy_gact.c): adaptive at an average of `budget` bits over the
 * ladder 32/8/4/2/1, or every ACT tensor at fixed_bits when non-zero;
 * segments: ask models to checkpoint their blocks; attention: the attention
 * form to ask for (-1: the model's). */
actc_status actc__policy_gact(const char *spec, double budget, int fixed_bits, int segments, int attention,
                              actc_policy **out);
#define GACT_EST_BITS 4 /* every tensor's width during the sensitivity passes */

/* ACTC_ERR_INVALID naming the bad field of controller options o. */
actc_status actc__controller_check_opts(const actc_controller_opts *o);
/* The controller's checkpoint state (gact_controller.c): what save wrote,
 * load checks in full before changing the controller. */
actc_status actc__controller_save(const actc_controller *c, actc__wbuf *w);
actc_status actc__controller_load(actc_controller *c, actc__rbuf *r);
/* What a checkpoint keeps of a run's adaptation, as one blob (learnt.c):
 * the policy's learnt state (p's save_state on its chain; nothing for a
 * policy that keeps none) and the state of the controller that drives it
 * (c), each behind its u64 length.  A trainer's checkpoint holds rank 0's
 * blob, and under data parallelism every other rank's. */
actc_status actc__learnt_save(const actc_policy *p, const actc_controller *c, actc__wbuf *w);
/* The two parts of such a blob of n bytes, pointing into it.  0 if the
 * blob is malformed. */
int actc__learnt_split(const uint8_t *blob, size_t n, const uint8_t **pol, size_t *plen, const uint8_t **ctl,
                       size_t *clen);

/* The mixed-precision policy's per-layer state, for tests and inspection:
 * stable key, budget b^(l) and gradient magnitude g^(l) (< 0: not seen in a
 * backward yet) of up to cap layers.  Returns the number of layers, or -1 if
 * no policy on p's chain observes gradients (only ActNN's mixed precision
 * does). */
int actc__actnn_layers(const actc_policy *p, uint64_t *keys, double *bits, double *grad_sq, int cap);
/* The per-sample bits the policy chose for layer `key`'s last save (*n
 * samples), or NULL. */
const uint8_t *actc__actnn_sample_bits(const actc_policy *p, uint64_t key, int *n);

/* ActNN's greedy allocation (bit_alloc.c): bits[i] in [lo, hi] minimising
 * sum w[i] / (2^bits[i] - 1)^2 under sum c[i] * bits[i] <= budget, starting
 * from hi and lowering the item whose move adds the least variance per unit
 * of cost (c NULL: every cost is 1).  If even all-lo exceeds the budget, all
 * items end at lo. */
actc_status actc__alloc_bits_greedy(int n, const double *w, const double *c, int lo, int hi, double budget,
                                    uint8_t *bits);
/* The same greedy over an arbitrary falling ladder of widths (GACT's 32, 8,
 * 4, 2, 1): every item starts at ladder[0]; a move takes one item one rung
 * down, the move adding the least variance per unit of cost saved first. */
actc_status actc__alloc_bits_ladder(int n, const double *w, const double *c, const int *ladder, int levels,
                                    double budget, uint8_t *bits);
/* Improve a ladder allocation in place by the best feasible change of one
 * or two items' rungs, until none lowers the objective (GACT's allocation:
 * the ladder's uneven rungs make the greedy overshoot the budget). */
void actc__alloc_refine(int n, const double *w, const double *c, const int *ladder, int levels, double budget,
                        uint8_t *bits);
/* S(b) = (2^b - 1)^-2: the variance factor of b-bit stochastic rounding. */
double actc__quant_var_factor(int b);
#endif
