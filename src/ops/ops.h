/* Internal helpers shared by the operator implementations. */
#ifndef ACTC_OPS_H
#define ACTC_OPS_H
#include "actc.h"
#include "../core/core.h"

/* Fail an operator: set ACTC_ERR_INVALID with a message and return NULL. */
#define OP_CHECK(cond, ...)                                   \
    do {                                                      \
        if (!(cond)) {                                        \
            actc_set_error(ACTC_ERR_INVALID, __VA_ARGS__);    \
            return NULL;                                      \
        }                                                     \
    } while (0)

/* db[F] += the column sums of dy[M, F] (the gradient of a bias added to
 * every row), threaded over column blocks: the same bits at any thread
 * count. */
void actc__bias_grad(const float *dy, int M, int F, float *db);

/* Free what the convolution backends keep across calls (oneDNN's engine,
 * stream and cached primitives), for actc_shutdown; they are created again
 * on demand.  Must not run concurrently with a convolution. */
void actc__conv_release(void);

/* Record y's node; on failure release y and return NULL with the error set.
 * *node is NULL when nothing needs recording (eval mode / no grad). */
static inline actc_tensor *actc__op_record(actc_ctx *ctx, const char *op, actc_backward_fn bw,
                                           actc_tensor *y, int n, actc_tensor *const *in,
                                           actc_node **node)
{
    if (actc_node_new(ctx, op, bw, y, n, in, node) != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    return y;
}

/* Rows (samples along the first axis) per chunk for an operator that walks
 * a saved tensor with actc_load_rows: about 2 MiB of decoded floats, so the
 * decoded copy stays in cache and never exists whole. */
static inline int actc__chunk_rows(const actc_tensor *t)
{
    const int rows = t->ndim > 0 ? t->shape[0] : 1;
    const size_t per = t->numel / (size_t)(rows > 0 ? rows : 1);
    size_t r = per ? ((size_t)2 << 20) / (per * sizeof(float)) : (size_t)rows;
    if (r < 1) r = 1;
    return r < (size_t)rows ? (int)r : rows;
}

/* A save's declaration (actc_save_role) in one expression. */
static inline actc_save_role actc__role(actc_role role, int linear)
{
    actc_save_role r = {.role = role, .linear = linear};
    return r;
}

/* Save helper for forward code: on failure release y and return NULL. */
#define OP_SAVE(ctx, node, t, kind, role, y)                                   \
    do {                                                                       \
        const actc_save_role op_save_role_ = (role);                           \
        if (actc_save_as((ctx), (node), (t), (kind), &op_save_role_) != ACTC_OK) { \
            actc_tensor_release(y);                                            \
            return NULL;                                                       \
        }                                                                      \
    } while (0)
/* Check two inputs of an element-wise binary op (present, same shape) and
 * make its output; NULL with ACTC_ERR_INVALID naming op and shapes.  With
 * take, the output takes a's buffer when the caller holds a's only
 * reference (see actc__tensor_give_data; element-wise ops may then compute
 * in place, having read a's data pointer first). */
static inline actc_tensor *actc__binary_output_take(const char *op, const char *sym, actc_tensor *a,
                                                    const actc_tensor *b, int take)
{
    if (!a || !a->data || !b || !b->data) {
        actc_set_error(ACTC_ERR_INVALID, "%s: an input is NULL or its data was already freed", op);
        return NULL;
    }
    if (!actc_same_shape(a, b)) {
        char sa[64], sb[64];
        actc_set_error(ACTC_ERR_INVALID, "%s: shapes differ: %s %s %s", op, actc_shape_str(a, sa, sizeof sa), sym,
                       actc_shape_str(b, sb, sizeof sb));
        return NULL;
    }
    actc_tensor *y = actc__tensor_header(ACTC_MEM_ACT, a->ndim, a->shape);
    if (y && actc__tensor_give_data(y, take ? a : NULL) != ACTC_OK) {
        actc_tensor_release(y);
        return NULL;
    }
    return y;
}
static inline actc_tensor *actc__binary_output(const char *op, const char *sym, actc_tensor *a,
                                               const actc_tensor *b)
{
    return actc__binary_output_take(op, sym, a, b, 0);
}

/* What a product y = f(x, w) (linear, conv2d) keeps for backward: x only
 * if w needs a gradient (dW needs x), as xrole declares it; w's value only
 * if x needs a gradient (dx needs w).  A parameter outlives the step and is
 * read in place; any other weight may be freed before backward, so it is
 * kept exactly.  *xslot and *wslot receive the save indices for actc_load,
 * or -1.  done not NULL: x's save offers xrole->transforms
 * (actc_save_offer), and *done says which the store kept. */
static inline actc_status actc__save_product_inputs(actc_ctx *ctx, actc_node *node, actc_tensor *x,
                                                    actc_tensor *w, const actc_save_role *xrole, int *xslot,
                                                    int *wslot, actc_transform *done)
{
    int k = 0;
    actc_status s = ACTC_OK;
    *xslot = *wslot = -1;
    if (done) *done = (actc_transform){ACTC_XFORM_NONE, {0}};
    if (w->requires_grad) {
        s = done ? actc_save_offer(ctx, node, x, xrole, done) : actc_save_as(ctx, node, x, ACTC_SAVE_ACT, xrole);
        if (s != ACTC_OK) return s;
        *xslot = k++;
    }
    if (x->requires_grad && !w->is_param) {
        const actc_save_role wrole = actc__role(ACTC_ROLE_WEIGHT, 1);
        if ((s = actc_save_as(ctx, node, w, ACTC_SAVE_EXACT, &wrole)) != ACTC_OK) return s;
        *wslot = k++;
    }
    return s;
}

/* Integer indices (token ids, gathered rows) for backward: the store takes
 * tensors, so they go in as floats of the given shape (exact below 2^24;
 * the callers check their range) through a temporary, as an INDEX save. */
static inline actc_status actc__save_indices(actc_ctx *ctx, actc_node *node, const int32_t *idx, int ndim,
                                             const int *shape)
{
    actc_tensor *t = actc_tensor_new(ACTC_MEM_SCRATCH, ndim, shape);
    if (!t) return actc_last_status();
    for (size_t i = 0; i < t->numel; i++) t->data[i] = (float)idx[i];
    const actc_save_role role = actc__role(ACTC_ROLE_INDEX, 1);
    const actc_status s = actc_save_as(ctx, node, t, ACTC_SAVE_INDEX, &role);
    actc_tensor_release(t);
    return s;
}

/* What an element-wise or matrix product y = a * b (mul, matmul) keeps for
 * backward: each input is the other's gradient factor, so a is saved (ACT,
 * as arole declares it) only if b needs a gradient and b only if a does; a
 * parameter outlives the step and is never saved (actc__input_value reads
 * it in place).  *aslot and *bslot receive the save indices for actc_load,
 * or -1. */
static inline actc_status actc__save_operands(actc_ctx *ctx, actc_node *node, actc_tensor *a, actc_tensor *b,
                                              const actc_save_role *arole, const actc_save_role *brole, int *aslot,
                                              int *bslot)
{
    int k = 0;
    actc_status s;
    *aslot = *bslot = -1;
    if (b->requires_grad && !a->is_param) {
        if ((s = actc_save_as(ctx, node, a, ACTC_SAVE_ACT, arole)) != ACTC_OK) return s;
        *aslot = k++;
    }
    if (a->requires_grad && !b->is_param) {
        if ((s = actc_save_as(ctx, node, b, ACTC_SAVE_ACT, brole)) != ACTC_OK) return s;
        *bslot = k++;
    }
    return ACTC_OK;
}

/* The value of input k of node for backward, for a product that keeps an
 * input only when the other input's gradient needs it: slot >= 0 is the
 * input's save index, loaded into *owned (released by the caller); slot < 0
 * means nothing was saved because the input is a parameter, which outlives
 * the step and is read in place (*owned stays NULL).  NULL with the error set
 * (ACTC_ERR_STATE naming op if the input was neither saved nor a parameter). */
static inline const float *actc__input_value(actc_ctx *ctx, actc_node *node, int k, int slot, const char *op,
                                             actc_tensor **owned)
{
    *owned = NULL;
    if (slot < 0) {
        if (node->inputs[k]->is_param && node->inputs[k]->data) return node->inputs[k]->data;
        actc_set_error(ACTC_ERR_STATE, "%s backward: input %d was not saved", op, k);
        return NULL;
    }
    *owned = actc_load(ctx, node, slot);
    return *owned ? (*owned)->data : NULL;
}

/* A float's bits, for the branch-free helpers below. */
typedef union {
    float f;
    int32_t i;
} actc__f32_bits;

/* lt ? a : b as a bit blend of an all-ones/all-zeros mask.  GCC will not
 * if-convert a float ?: whose result feeds further arithmetic (with the
 * default -ftrapping-math), which would keep the calling loop scalar. */
static inline float actc__blendf(int lt, float a, float b)
{
    const actc__f32_bits x = {a}, y = {b};
    const int32_t m = -(int32_t)lt;
    actc__f32_bits r;
    r.i = (x.i & m) | (y.i & ~m);
    return r.f;
}

/* exp(x) for any float x, vectorisable: libm's expf is a scalar call
 * without -ffast-math (the library is built without -march and without
 * fast-math), which would keep the GELU/SiLU and softmax loops scalar.  A
 * branch-free Cephes-style kernel, relative error ~2 ulp: the argument is
 * clamped to [-87, 88] (so n below stays in [-126, 127]: the result is a
 * finite normal float), split as x = n ln2 + r with |r| <= ln2/2, exp(r)
 * from a degree-7 polynomial, times 2^n built in the exponent bits.  So
 * exp(-inf) is ~1e-38, not 0: callers mask out what must be exactly zero.
 * A NaN argument ends up as the upper clamp (comparisons with NaN are
 * false); callers that must propagate NaN carry it otherwise (GELU and SiLU
 * multiply by x). */
static inline float actc__expf(float x)
{
    x = actc__blendf(x < 88.0f, x, 88.0f);
    x = actc__blendf(x > -87.0f, x, -87.0f);
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
    actc__f32_bits scale;
    scale.i = ((int32_t)fn + 127) << 23; /* n in [-126, 127]: a normal power of two */
    return p * scale.f;
}
#endif
