/* Codecs: pure encode/decode kernels on float arrays.  A codec knows nothing of
 * tensors, operators or policies; the saved-context store drives it in three
 * calls: plan (exact encoded size, may fill derived fields of the args), encode
 * into a buffer of that size, decode back to float32. */
#ifndef ACTC_CODEC_H
#define ACTC_CODEC_H
#include "actc.h"

/* Parameters of one encoding; the store keeps them with the payload. */
typedef struct {
    int bits;               /* quantizer width (codecs that use it)           */
    int group;              /* elements per quantization group                */
    int width;              /* INDEX: bytes per element, set by plan          */
    int ndim;               /* shape of the original tensor (some codecs pool */
    int shape[ACTC_MAX_DIMS]; /*  or group along axes)                        */
    uint64_t key;           /* random stream for stochastic rounding          */
    float fparam[4];        /* codec-specific extras                          */
    int iparam[4];
} actc_codec_args;

typedef struct actc_codec {
    const char *name;
    /* Exact byte count of encode's output for n elements of x. */
    size_t (*plan)(actc_codec_args *a, const float *x, size_t n);
    void (*encode)(const actc_codec_args *a, const float *x, size_t n, void *dst);
    void (*decode)(const actc_codec_args *a, const void *src, size_t n, float *dst);
} actc_codec;

extern const actc_codec actc_codec_fp32;  /* lossless copy                    */
extern const actc_codec actc_codec_bf16;  /* round-to-nearest-even bfloat16   */
extern const actc_codec actc_codec_mask1; /* 1 bit per element: x > 0         */
extern const actc_codec actc_codec_index; /* uint8/16/32 integers, lossless   */

/* Kernels the codecs are built from, exposed for tests and other codecs. */
void actc_bf16_encode(const float *x, size_t n, uint16_t *dst);
void actc_bf16_decode(const uint16_t *src, size_t n, float *dst);
void actc_mask_pack(const float *x, size_t n, uint8_t *bits);
void actc_mask_unpack(const uint8_t *bits, size_t n, float *dst);
#endif
