/* The CUDA kernels' views of a plan (codec_cuda.h): the layouts of
 * codec_quant.c, codec_block4.c and codec_dyn8.c as plain numbers and
 * tables.  Plain C, built with or without CUDA (the CPU emulation of the
 * kernels, tests/gpu/emu, reads them from the library). */
#include "codec_cuda.h"
#include "../codec.h"
#include <string.h>

actc__cu_quant actc__cu_quant_of(const actc_codec_plan *plan)
{
    const actc_codec_args a = actc__plan_args(plan, NULL);
    actc__cu_quant q;
    memset(&q, 0, sizeof q);
    const size_t n = plan->numel;
    q.N = n == 0 ? 0 : a.ndim >= 2 && n % (size_t)a.shape[0] == 0 ? (size_t)a.shape[0] : 1;
    q.D = q.N ? n / q.N : 0;
    q.G = a.group > 0 ? (size_t)a.group : ACTC_QUANT_GROUP;
    q.gps = (q.D + q.G - 1) / q.G;
    q.full = q.D / q.G;
    q.tail = q.D % q.G;
    q.bits = actc__quant_clamp_bits(a.bits);
    q.mixed = a.iparam[0] == 1;
    q.key = a.key;
    return q;
}

actc__cu_block4 actc__cu_block4_of(const actc_codec_plan *plan)
{
    actc__cu_block4 b;
    memset(&b, 0, sizeof b);
    b.n = plan->numel;
    b.B = (size_t)plan->group_; /* resolved by the plan */
    b.nb = (b.n + b.B - 1) / b.B;
    b.sr = plan->iparam_[1] != 0;
    b.key = plan->key;
    actc__block4_levels(plan->iparam_[0], &b.L);
    return b;
}

actc__cu_dyn8 actc__cu_dyn8_of(const actc_codec_plan *plan)
{
    actc__cu_dyn8 d;
    d.n = plan->numel;
    d.B = plan->group_ > 0 ? (size_t)plan->group_ : ACTC_DYN8_BLOCK;
    d.nb = (d.n + d.B - 1) / d.B;
    memcpy(d.map, actc_dyn8_map(), sizeof d.map);
    memcpy(d.mid, actc__dyn8_mids(), sizeof d.mid);
    return d;
}

actc__cu_division actc__cu_division_of(const actc_codec_plan *plan)
{
    const actc_codec_args a = actc__plan_args(plan, NULL);
    actc__cu_division d;
    d.v = actc__division_view(&a, plan->numel);
    d.seed = actc__div_seed(plan->key);
    return d;
}
