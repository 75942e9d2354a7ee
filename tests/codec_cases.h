/* The codecs, shapes and inputs on which the CUDA codecs must give the CPU
 * codecs' bytes: shared by the CPU replay of the kernels
 * (tests/test_codec_cuda.c) and the GPU run (tests/gpu/gpu_codecs.c). */
#ifndef ACTC_TEST_CODEC_CASES_H
#define ACTC_TEST_CODEC_CASES_H
#include "actc.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The NaNs of the "NaN and inf" input, in turn: the default quiet NaN,
 * its negative, quiet ones with payloads, a signalling one.  A GPU's
 * arithmetic makes one canonical NaN whatever its operands, x86 keeps an
 * operand's: no payload may depend on which. */
static const uint32_t NAN_BITS[5] = {0x7FC00000u, 0xFFC00000u, 0x7FC12345u, 0xFFE00001u, 0x7F800001u};
static float nan_kind(size_t i)
{
    float f;
    memcpy(&f, &NAN_BITS[i % 5], sizeof f);
    return f;
}

enum { IN_RANDOM, IN_ZEROS, IN_CONSTANT, IN_HUGE, IN_NONFINITE, IN_SIGNED_ZEROS, IN_ONLY_ZEROS, IN_TINY, N_INPUTS };
static const char *const INPUT_NAMES[N_INPUTS] = {"random", "zeros", "constant groups", "huge ranges",
                                                   "NaN and inf", "signed zeros", "zeros of both signs",
                                                   "subnormal"};

static float *make_input(size_t n, int kind)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x) abort();
    for (size_t i = 0; i < n; i++) {
        const float u = actc_rand_normal(77, i);
        switch (kind) {
        case IN_ZEROS: x[i] = 0.0f; break;
        case IN_CONSTANT: x[i] = 1.5f + (float)(i / 300); break;
        case IN_HUGE: x[i] = i % 5 == 0 ? u * 3.0e38f : i % 5 == 1 ? u * 1e-30f : u; break;
        case IN_NONFINITE:
            x[i] = i % 11 == 3 ? nan_kind(i / 11) : i % 17 == 5 ? INFINITY : i % 19 == 7 ? -INFINITY : u;
            break;
        case IN_SIGNED_ZEROS: x[i] = i % 3 == 0 ? 0.0f : i % 3 == 1 ? -0.0f : fabsf(u) * (i % 64 < 32); break;
        case IN_ONLY_ZEROS: x[i] = (i / 3 + i / 37) % 2 ? -0.0f : 0.0f; break;
        case IN_TINY: x[i] = u * 1e-40f; break;
        default: x[i] = u * (1.0f + (float)(i % 5));
        }
    }
    return x;
}

typedef struct {
    const char *spec;
    int ndim, shape[4];
    int mixed;
} cuda_case;

static const cuda_case CASES[] = {
    {"quant:1", 2, {8, 1000}, 0},         {"quant:2", 4, {4, 3, 17, 19}, 0},  {"quant:3", 4, {3, 5, 7, 11}, 0},
    {"quant:4", 2, {5, 777}, 0},          {"quant:5", 2, {2, 3000}, 0},       {"quant:6", 3, {2, 9, 40}, 0},
    {"quant:7", 1, {1031}, 0},            {"quant:8", 4, {4, 3, 17, 19}, 0},  {"quant:2,group=64", 2, {6, 333}, 0},
    {"quant:3,group=100", 2, {4, 1001}, 0}, {"quant:2", 4, {16, 3, 9, 9}, 1}, {"quant:2,group=64", 2, {9, 130}, 1},
    {"nf4", 2, {7, 333}, 0},              {"fp4", 1, {1001}, 0},              {"e2m1", 4, {4, 3, 17, 19}, 0},
    {"nf4,round=stochastic", 2, {7, 333}, 0}, {"fp4,round=stochastic,block=32", 1, {999}, 0},
    {"e2m1,round=stochastic,block=128", 2, {3, 1000}, 0}, {"nf4,block=4096", 2, {3, 5000}, 0},
    {"dyn8", 2, {7, 333}, 0},             {"dyn8,block=100", 1, {1001}, 0},   {"dyn8,block=1", 1, {77}, 0},
    {"division", 4, {4, 3, 17, 19}, 0},   {"division:b=4,q=3", 4, {2, 5, 9, 16}, 0},
    {"division", 2, {7, 5}, 0},           {"division", 2, {6, 100}, 0},       {"division:seq=tokens", 3, {2, 40, 24}, 0},
    {"division:seq=features", 3, {3, 10, 37}, 0}, {"division", 4, {2, 1, 80, 80}, 0},
    {"division:q=4", 4, {1, 2, 70, 90}, 0}, {"division:lfc-only", 4, {3, 4, 9, 9}, 0},
    {"division:lfc-only", 4, {1, 1, 81, 81}, 0}, {"division:b=2,q=1", 2, {5, 4097}, 0},
    {"division:b=32", 2, {6, 30}, 0},      {"division:b=64,q=5", 2, {5, 50}, 0},
    {"division:b=128", 4, {1, 2, 80, 80}, 0},
    {"mask", 2, {7, 333}, 0},             {"bf16", 2, {7, 333}, 0},           {"fp32", 1, {1001}, 0},
};
#endif
