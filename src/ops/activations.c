/* Smooth element-wise activations of transformer MLPs: GELU (tanh form) and
 * SiLU.  Both save their input x as ACT (the policy may compress it) and
 * recompute everything else in backward, which is cheaper than keeping the
 * output or the derivative: those would be one more full-size tensor each.
 *
 * Both are written as x * sigmoid(z):
 *     SiLU:  z = x
 *     GELU:  0.5 x (1 + tanh(u)) = x * sigmoid(2u),  u = sqrt(2/pi)(x + 0.044715 x^3)
 * (1 + tanh(u) = 2 sigmoid(2u)).  The sigmoid form has no cancellation in
 * 1 + tanh(u) for negative x, and needs one exp and one division.
 * Derivatives:  d/dx [x s(z)] = s + x s (1 - s) dz/dx.
 *
 * libm's expf/tanhf are scalar calls without -ffast-math, which would keep
 * the loops from vectorising (the library is built without -march and
 * without fast-math), so act_expf below is a branch-free Cephes-style
 * exponential (relative error ~2 ulp) that GCC vectorises. */
#include "ops.h"
#include <stdint.h>

#define ACT_PAR_MIN ((size_t)1 << 16)

typedef union {
    float f;
    int32_t i;
} act_bits;

/* lt ? a : b as a bit blend of an all-ones/all-zeros mask.  GCC 12 will not
 * if-convert a float ?: whose result feeds further arithmetic (with the
 * default -ftrapping-math), which kept the whole loop scalar. */
static inline float act_blend(int lt, float a, float b)
{
    const act_bits x = {a}, y = {b};
    const int32_t m = -(int32_t)lt;
    act_bits r;
    r.i = (x.i & m) | (y.i & ~m);
    return r.f;
}

/* exp(x) for any float x: the argument is clamped to [-87, 88] (so n below
 * stays in [-126, 127]: the result is a finite normal float),
 * split as x = n ln2 + r with |r| <= ln2/2, exp(r) from a degree-7
 * polynomial, times 2^n built in the exponent bits.  A NaN argument ends up
 * as the upper clamp (comparisons with NaN are false); callers multiply by x,
 * which carries the NaN into their result. */
static inline float act_expf(float x)
{
    x = act_blend(x < 88.0f, x, 88.0f);
    x = act_blend(x > -87.0f, x, -87.0f);
    /* Round x*log2(e) to nearest with the 1.5*2^23 trick: no floorf (not
     * vectorisable on plain SSE2) and no branch. */
    const float magic = 12582912.0f;
    const float fn = (x * 1.44269504088896341f + magic) - magic;
    float r = x - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    act_bits scale;
    scale.i = ((int32_t)fn + 127) << 23; /* n in [-126, 127]: a normal power of two */
    return p * scale.f;
}

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K 0.044715f

enum { ACT_GELU = 0, ACT_SILU = 1 };

static actc_status act_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    float *gx = actc_grad_of(ctx, x);
    if (!gx) return x->requires_grad ? ACTC_ERR_OOM : ACTC_OK; /* message set by actc_grad_of */
    actc_tensor *xs = actc_load(ctx, node, 0);
    if (!xs) return actc_last_status();
    const float *xd = xs->data, *gy = node->output->grad->data;
    const size_t n = xs->numel;
    if (node->iattr[0] == ACT_GELU) {
#pragma omp parallel for simd schedule(static) if (n > ACT_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i], v2 = v * v;
            const float u2 = 2.0f * GELU_C * (v + GELU_K * v2 * v);
            const float s = 1.0f / (1.0f + act_expf(-u2));
            const float du2 = 2.0f * GELU_C * (1.0f + 3.0f * GELU_K * v2);
            /* (v s)(1 - s): multiplied in this order so s(1-s) ~ 1e-38
             * for very negative v does not meet v^2 in an overflow. */
            gx[i] += gy[i] * (s + (v * s) * (1.0f - s) * du2);
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n > ACT_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i];
            const float s = 1.0f / (1.0f + act_expf(-v));
            gx[i] += gy[i] * (s * (1.0f + v * (1.0f - s)));
        }
    }
    actc_tensor_release(xs);
    return ACTC_OK;
}

static actc_tensor *act_forward(actc_ctx *ctx, actc_tensor *x, int kind, const char *name)
{
    OP_CHECK(ctx, "%s: NULL context", name);
    OP_CHECK(x && x->data, "%s: input is NULL or its data was already freed", name);
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    const float *xd = x->data;
    float *yd = y->data;
    const size_t n = x->numel;
    if (kind == ACT_GELU) {
#pragma omp parallel for simd schedule(static) if (n > ACT_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i];
            const float u2 = 2.0f * GELU_C * (v + GELU_K * v * v * v);
            yd[i] = v / (1.0f + act_expf(-u2));
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n > ACT_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            const float v = xd[i];
            yd[i] = v / (1.0f + act_expf(-v));
        }
    }
    actc_node *node;
    if (!actc__op_record(ctx, name, act_backward, y, 1, &x, &node)) return NULL;
    if (node) {
        node->iattr[0] = kind;
        OP_SAVE(ctx, node, x, ACTC_SAVE_ACT, y);
    }
    return y;
}

actc_tensor *actc_gelu(actc_ctx *ctx, actc_tensor *x) { return act_forward(ctx, x, ACT_GELU, "gelu"); }

actc_tensor *actc_silu(actc_ctx *ctx, actc_tensor *x) { return act_forward(ctx, x, ACT_SILU, "silu"); }
