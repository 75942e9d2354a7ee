/* Codecs: pure encode/decode kernels on float arrays.  A codec knows nothing of
 * tensors, operators or policies; the saved-context store drives it in three
 * calls: plan (exact encoded size, may fill derived fields of the args), encode
 * into a buffer of that size, decode back to float32. */
#ifndef ACTC_CODEC_H
#define ACTC_CODEC_H
#include "actc.h"
#include "codec_math.h"

/* Parameters of one encoding; the store keeps them with the payload. */
typedef struct {
    int bits;               /* quantizer width (codecs that use it)           */
    int group;              /* elements per quantization group                */
    int width;              /* INDEX: bytes per element, the caller's         */
    int ndim;               /* shape of the original tensor (some codecs pool */
    int shape[ACTC_MAX_DIMS]; /*  or group along axes)                        */
    uint64_t key;           /* random stream for stochastic rounding          */
    float fparam[4];        /* codec-specific extras                          */
    int iparam[4];
    /* quant: bits of each sample (shape[0] entries, 1..8) for mixed precision,
     * or NULL for `bits` everywhere.  Read by plan and encode only (the
     * payload keeps its own copy), so it may point into policy state that
     * changes after encode returns. */
    const uint8_t *sample_bits;
} actc_codec_args;

typedef struct actc_codec {
    const char *name;
    /* Exact byte count of encode's output for n elements: from the args
     * and n alone, never the data (INDEX's width is the caller's). */
    size_t (*plan)(actc_codec_args *a, size_t n);
    void (*encode)(const actc_codec_args *a, const float *x, size_t n, void *dst);
    void (*decode)(const actc_codec_args *a, const void *src, size_t n, float *dst);
    /* Decode only rows [row0, row0 + nrows) of the first axis
     * (args->shape[0] rows of n / shape[0] elements), so an operator can
     * walk a saved tensor a chunk of samples at a time.  Every codec has
     * one: a caller never needs scratch for the whole tensor. */
    void (*decode_rows)(const actc_codec_args *a, const void *src, size_t n, size_t row0, size_t nrows,
                        float *dst);
} actc_codec;

extern const actc_codec actc_codec_fp32;  /* lossless copy                    */
extern const actc_codec actc_codec_bf16;  /* round-to-nearest-even bfloat16   */
extern const actc_codec actc_codec_mask1; /* 1 bit per element: x > 0         */
extern const actc_codec actc_codec_index; /* uint8/16/32 integers, lossless   */
/* The INDEX width (bytes) that holds indices up to max_value: 1, 2 or 4. */
int actc_index_width(double max_value);
/* ActNN's per-group stochastic quantizer (codec_quant.c).  Samples are the
 * first axis (a 1-D tensor is one sample); each sample's flattened elements
 * are cut into groups of args->group (0 means ACTC_QUANT_GROUP), the last one
 * possibly shorter.  Per group: zero point and range in bfloat16 (rounded
 * outwards, so the stored pair covers the group), values scaled to
 * [0, 2^b - 1] and rounded up with probability equal to the fraction, packed
 * densely at b bits (1..8).  Mixed precision: args->sample_bits.  plan()
 * records what decode needs in the args: group (resolved), bits (clamped to
 * 1..8) and iparam[0] = 1 when per-sample widths are in the payload.  A
 * group's range is stored as bf16, so ranges beyond the largest bf16
 * (3.39e38) saturate and their extreme values come back clamped. */
extern const actc_codec actc_codec_quant;
/* The same quantizer with one zero point and range for the whole tensor
 * (BLPA-like per-tensor baseline); args->bits only. */
extern const actc_codec actc_codec_quant_tensor;
#define ACTC_QUANT_GROUP 256
/* DIVISION's dual-precision codec (codec_division.c): per (sample, channel)
 * map, a bf16 average-pooled low-frequency part (block B) and the residual
 * quantized stochastically at Q bits with one bf16 minimum and range.
 * args: bits = Q; iparam[0] = B; iparam[1] = ACTC_DIV_FULL / _LFC_ONLY /
 * _HFC_ONLY; iparam[2] = map rank r (1..3, the last r axes are the map, the
 * axes between the first and the map are channels); iparam[3] = 1 to pool
 * along axis 1 instead ([S, T, C...]: tokens, one map per sample and
 * feature).  The payload's layout and byte count are in codec_division.c. */
extern const actc_codec actc_codec_division;
/* ACTC_DIV_FULL / _LFC_ONLY / _HFC_ONLY: codec_math.h */
/* bitsandbytes-style 4-bit block-wise quantizer (codec_block4.c), AGoQ's
 * activation format.  The flattened tensor is cut into blocks of
 * args->group elements (0 means ACTC_B4_BLOCK; a power of two from
 * ACTC_B4_BLOCK_MIN to ACTC_B4_BLOCK_MAX, the last block possibly shorter);
 * per block one fp32 absmax over its (finite) elements, values divided by it
 * and mapped to a 16-entry table: iparam[0] = ACTC_B4_NF4, _FP4_BNB (the
 * table bitsandbytes calls fp4, smallest magnitude 1/192) or _FP4_E2M1 (OCP
 * MX E2M1 / 6).  iparam[1] = 1: stochastic rounding between the two
 * neighbouring table values (unbiased), else nearest.  Payload: the absmaxes,
 * then two codes a byte (element 2j in the high nibble); ceil(n/G)*4 +
 * ceil(n/2) bytes.  plan() records the resolved group, format and rounding
 * in the args (policies validate; plan coerces bad values, see the file). */
extern const actc_codec actc_codec_block4;
enum { ACTC_B4_NF4 = 0, ACTC_B4_FP4_BNB = 1, ACTC_B4_FP4_E2M1 = 2 };
#define ACTC_B4_BLOCK 64
#define ACTC_B4_BLOCK_MIN 32
#define ACTC_B4_BLOCK_MAX 4096
/* "nf4", "fp4-bnb", "fp4-e2m1" -> the ACTC_B4_* format, anything else -1;
 * and back (NULL for a value that is not a format). */
int actc_block4_format(const char *name);
const char *actc_block4_format_name(int fmt);
/* The rounding and decoding tables of format fmt (an unknown one is nf4),
 * for a kernel outside codec_block4.c (the CUDA codecs). */
void actc__block4_levels(int fmt, actc__b4_levels *L);
/* 8-bit block-wise dynamic quantizer (codec_dyn8.c), AGoQ's and
 * bitsandbytes' optimizer/gradient format: per block of args->group
 * elements (0 means ACTC_DYN8_BLOCK; any positive size) one fp32 absmax,
 * values divided by it and stored as the index of the nearest entry of the
 * signed dynamic map (actc_dyn8_map), one byte each.  Payload: the
 * absmaxes, then the codes; ceil(n/G)*4 + n bytes.  Deterministic. */
extern const actc_codec actc_codec_dyn8;
#define ACTC_DYN8_BLOCK 256
/* The same as kernels on any float buffer (gradients, all-reduce shards);
 * block <= 0 means ACTC_DYN8_BLOCK.  decode_add adds the decoded values to
 * acc (accumulating shards).  The map: 256 ascending entries. */
size_t actc_dyn8_bytes(size_t n, int block);
void actc_dyn8_encode(const float *x, size_t n, int block, void *dst);
void actc_dyn8_decode(const void *src, size_t n, int block, float *dst);
void actc_dyn8_decode_add(const void *src, size_t n, int block, float *acc);
const float *actc_dyn8_map(void);
/* The 255 midpoints between neighbouring map entries (ascending), for
 * actc__dyn8_search (codec_math.h). */
const float *actc__dyn8_mids(void);
/* Blocks of a payload in ACTC_DYN8_BLOCK blocks one by one, for the 8-bit
 * wire, which moves a gradient's codes between payloads without decoding
 * and re-encoding them (that would round again: the map is asymmetric, so
 * a block whose absmax was negative re-encodes to another absmax).
 * get_block: block b of a payload of n values, its absmax, *codes and *len
 * (the last block may be short); put_block writes them into a payload of n
 * values (len: that block's length there, at most what codes holds);
 * encode_block encodes len values as one block (codes; returns the
 * absmax); zero_code is the code of 0 (padding). */
float actc_dyn8_get_block(const void *payload, size_t n, size_t b, const uint8_t **codes, size_t *len);
void actc_dyn8_put_block(void *payload, size_t n, size_t b, float absmax, const uint8_t *codes);
float actc_dyn8_encode_block(const float *x, size_t len, uint8_t *codes);
uint8_t actc_dyn8_zero_code(void);

/* ---- Codec specs (codec_spec.c) ---- */
/* spec -> the codec and its arguments for a tensor of ndim dims (the grammar
 * is actc.h's, at actc_codec_plan_make), its canonical spelling in canon.
 * NULL on success, else why the spec is bad. */
const char *actc__codec_parse(const char *spec, int ndim, const actc_codec **codec, actc_codec_args *a, char *canon,
                              size_t cap);
/* The canonical spec of codec c with arguments a (what actc__codec_parse
 * would give for it; a quantizer with per-sample widths is "quant:mixed").
 * NULL on success, else why it cannot be spelled. */
const char *actc__codec_spell(const actc_codec *c, const actc_codec_args *a, char *canon, size_t cap);
/* The public plan of codec c with arguments a (a->ndim, a->shape, a->key
 * and a->sample_bits set; codec_api.c), as actc_codec_plan_make makes it
 * from a spec.  ACTC_ERR_INVALID for a codec that has no public plan. */
actc_status actc__codec_plan_of(const actc_codec *c, actc_codec_args *a, actc_codec_plan *plan);
/* What the entry points on plans share (codec_api.c): the plan's codec, or
 * NULL with the error set when p is not a plan or buf (buf_bytes) cannot
 * hold its payload (fn names the caller in the message); the codec's
 * arguments; the hash of per-sample widths a plan records (0 for NULL). */
const actc_codec *actc__plan_codec(const actc_codec_plan *p, const char *fn, const void *buf, size_t buf_bytes);
actc_codec_args actc__plan_args(const actc_codec_plan *p, const uint8_t *sample_bits);
uint64_t actc__plan_widths_hash(const uint8_t *sample_bits, const actc_codec_plan *p);
/* The options after "quant:" (B[,group=G|,per-tensor]), shared with the
 * quant:B policy; canon is the whole spec ("quant:2,group=64"). */
typedef struct {
    int bits, group, per_tensor;
} actc_quant_opts;
const char *actc__quant_parse(const char *opts, actc_quant_opts *o, char *canon, size_t cap);
/* The options after "division:" (b=B, q=Q, lfc-only|hfc-only,
 * seq=tokens|features; "" for the defaults), shared with the division
 * policy; canon is the whole spec ("division:b=8,q=2"). */
typedef struct {
    int block, bits, mode, tokens;
} actc_division_opts;
#define ACTC_DIVISION_BLOCK 8
#define ACTC_DIVISION_BITS 2
#define ACTC_DIVISION_TOKENS 1 /* default pooling of [B,T,D]: bench/RESULTS.md */
const char *actc__division_parse(const char *opts, actc_division_opts *o, char *canon, size_t cap);
/* The codec's arguments for a tensor of ndim dims: which axes form the map
 * follows the rank (policy_division.c's table). */
void actc__division_args(const actc_division_opts *o, int ndim, actc_codec_args *a);
/* How the codec sees a tensor of n elements with arguments a (planes,
 * blocks, payload sections). */
actc__div_view actc__division_view(const actc_codec_args *a, size_t n);

/* Per-sample sum over groups of the squared group range (max - min), with
 * the quantizer's grouping: ActNN's ||R_n||^2 for the sensitivity of sample n.
 * x holds N samples of D elements each. */
void actc_quant_range_sq(const float *x, int N, size_t D, int group, double *out);

/* Kernels the codecs are built from, exposed for tests and other codecs. */
void actc_bf16_encode(const float *x, size_t n, uint16_t *dst);
void actc_bf16_decode(const uint16_t *src, size_t n, float *dst);
void actc_mask_pack(const float *x, size_t n, uint8_t *bits);
void actc_mask_unpack(const uint8_t *bits, size_t n, float *dst);
#endif
