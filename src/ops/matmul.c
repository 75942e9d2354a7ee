/* Batched matrix product out[..., M, N] = op(a)[..., M, K] op(b)[..., K, N],
 * op(a) = a^T when trans_a (a stored [..., K, M]), likewise for b.  b has
 * a's leading dims, or is 2-D and shared by every item.
 *
 * One sgemm per item (actc__sgemm).  Many small items (attention heads) go to
 * threads, one item each: the OpenMP build of OpenBLAS runs single-threaded
 * inside a parallel region, which is what small products want.  With a
 * shared b and an untransposed a, the items are consecutive rows of one
 * [items*M, K] matrix, so a single sgemm (threaded by OpenBLAS) does them all.
 *
 * Backward, with dC the output gradient:
 *   dA = dC op(b)^T  (stored transposed when trans_a: op(b) dC^T)
 *   dB = op(a)^T dC  (stored transposed when trans_b: dC^T op(a))
 * so a is kept (ACT) only if b needs a gradient and b only if a does; a
 * parameter outlives the step and is read in place instead. */
#include "attn_internal.h"
#include <limits.h>
#include <omp.h>
#include <string.h>

/* Below this many flops a parallel region costs more than it saves. */
#define MM_PAR_MIN ((double)(1 << 18))

enum { IA_TA = 0, IA_TB, IA_ASLOT, IA_BSLOT };

/* A product after folding: nb items of [M,K] x [K,N], the stored row lengths
 * of a and b (their leading dimensions; also those of their gradients) and
 * the item strides in floats (sb = 0: b shared). */
typedef struct {
    int nb, M, N, K, lda, ldb;
    size_t sa, sb, sc;
} mm_dims;

static mm_dims mm_dims_of(const actc_tensor *a, const actc_tensor *b, int ta, int tb)
{
    const int ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    const int br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    mm_dims d;
    d.M = ta ? ac : ar;
    d.K = ta ? ar : ac;
    d.N = tb ? br : bc;
    d.lda = ac;
    d.ldb = bc;
    d.nb = (int)(a->numel / ((size_t)ar * ac));
    const int shared = b->ndim == 2 && a->ndim > 2;
    d.sa = (size_t)ar * ac;
    d.sb = shared ? 0 : (size_t)br * bc;
    d.sc = (size_t)d.M * d.N;
    if (shared && !ta) { /* one [nb*M, K] x [K, N] product */
        d.M *= d.nb;
        d.nb = 1;
    }
    return d;
}

/* C_i = op(A_i) op(B_i) + beta C_i for the nb items.  An output shared by
 * all items (sc == 0: dB of a shared b) is accumulated serially, each sgemm
 * then threaded by OpenBLAS. */
static void gemm_items(int nb, int ta, int tb, int M, int N, int K, const float *A,
                       int lda, size_t sa, const float *B, int ldb, size_t sb, float beta, float *C, int ldc,
                       size_t sc)
{
    const int par = nb > 1 && sc != 0 && nb >= omp_get_max_threads() && (double)nb * M * N * K >= MM_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (int i = 0; i < nb; i++)
        actc__sgemm(ta, tb, M, N, K, 1.0f, A + (size_t)i * sa, lda, B + (size_t)i * sb, ldb,
                    beta, C + (size_t)i * sc, ldc);
}


static actc_status matmul_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *a = node->inputs[0], *b = node->inputs[1];
    const int ta = node->iattr[IA_TA], tb = node->iattr[IA_TB];
    const mm_dims d = mm_dims_of(a, b, ta, tb);
    const float *dc = node->output->grad->data;
    float *ga, *gb;
    actc_status st;
    if ((st = actc_grad_buffer(ctx, a, &ga)) != ACTC_OK) return st;
    if ((st = actc_grad_buffer(ctx, b, &gb)) != ACTC_OK) return st;
    actc_tensor *owned;
    if (ga) { /* needs b */
        const float *bv = actc__input_value(ctx, node, 1, node->iattr[IA_BSLOT], "matmul", &owned);
        if (!bv) return actc_last_status();
        if (!ta)
            gemm_items(d.nb, 0, !tb, d.M, d.K, d.N, dc, d.N, d.sc, bv, d.ldb, d.sb, 1.0f, ga,
                       d.lda, d.sa);
        else
            gemm_items(d.nb, tb, 1, d.K, d.M, d.N, bv, d.ldb, d.sb, dc, d.N, d.sc, 1.0f, ga,
                       d.lda, d.sa);
        actc_tensor_release(owned);
    }
    if (gb) { /* needs a */
        const float *av = actc__input_value(ctx, node, 0, node->iattr[IA_ASLOT], "matmul", &owned);
        if (!av) return actc_last_status();
        if (!tb)
            gemm_items(d.nb, !ta, 0, d.K, d.N, d.M, av, d.lda, d.sa, dc, d.N, d.sc, 1.0f, gb,
                       d.ldb, d.sb);
        else
            gemm_items(d.nb, 1, ta, d.N, d.K, d.M, dc, d.N, d.sc, av, d.lda, d.sa, 1.0f, gb,
                       d.ldb, d.sb);
        actc_tensor_release(owned);
    }
    return ACTC_OK;
}

/* Check the arguments and allocate the output [..., M, N] (ACT); NULL with
 * ACTC_ERR_INVALID naming the shapes. */
static actc_tensor *matmul_output(const actc_ctx *ctx, const actc_tensor *a, const actc_tensor *b, int ta,
                                  int tb)
{
    char sa[64], sb[64];
    OP_CHECK(ctx, "matmul: NULL context");
    OP_CHECK(a && a->data && b && b->data, "matmul: input %s is NULL or its data was already freed",
             !a || !a->data ? "a" : "b");
    actc_shape_str(a, sa, sizeof sa);
    actc_shape_str(b, sb, sizeof sb);
    OP_CHECK(a->ndim >= 2 && b->ndim >= 2, "matmul: a %s and b %s must have at least 2 dims", sa, sb);
    OP_CHECK(a->numel > 0 && b->numel > 0, "matmul: empty input (a %s, b %s)", sa, sb);
    OP_CHECK(b->ndim == 2 || (b->ndim == a->ndim &&
                              !memcmp(a->shape, b->shape, (size_t)(a->ndim - 2) * sizeof(int))),
             "matmul: b %s must be 2-D or have the leading dims of a %s", sb, sa);
    const int ka = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    const int kb = tb ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    OP_CHECK(ka == kb, "matmul: inner dims differ: a %s%s has K=%d, b %s%s has K=%d", sa,
             ta ? " (transposed)" : "", ka, sb, tb ? " (transposed)" : "", kb);
    OP_CHECK(a->numel / (size_t)ka <= (size_t)INT_MAX, "matmul: a %s has too many rows", sa);
    int yshape[ACTC_MAX_DIMS];
    memcpy(yshape, a->shape, sizeof yshape);
    yshape[a->ndim - 2] = ta ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2];
    yshape[a->ndim - 1] = tb ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    return actc_tensor_new(ACTC_MEM_ACT, a->ndim, yshape);
}

actc_tensor *actc_matmul(actc_ctx *ctx, actc_tensor *a, actc_tensor *b, int trans_a, int trans_b)
{
    const int ta = trans_a != 0, tb = trans_b != 0;
    actc_tensor *y = matmul_output(ctx, a, b, ta, tb);
    if (!y) return NULL;
    const mm_dims d = mm_dims_of(a, b, ta, tb);
    gemm_items(d.nb, ta, tb, d.M, d.N, d.K, a->data, d.lda, d.sa, b->data, d.ldb, d.sb, 0.0f, y->data,
               d.N, d.sc);

    actc_tensor *in[2] = {a, b};
    actc_node *node;
    if (!actc__op_record(ctx, "matmul", matmul_backward, y, 2, in, &node)) return NULL;
    if (node) {
        node->iattr[IA_TA] = ta;
        node->iattr[IA_TB] = tb;
        /* Each operand's gradient is linear in the other.  An operand
         * multiplied by a parameter is a layer's input. */
        actc_save_role ar = actc__role(b->is_param ? ACTC_ROLE_LINEAR_IN : ACTC_ROLE_MATMUL_IN, 1),
                       br = actc__role(a->is_param ? ACTC_ROLE_LINEAR_IN : ACTC_ROLE_MATMUL_IN, 1);
        ar.fan_in = br.fan_in = mm_dims_of(a, b, ta, tb).K;
        if (actc__save_operands(ctx, node, a, b, &ar, &br, &node->iattr[IA_ASLOT], &node->iattr[IA_BSLOT]) != ACTC_OK) {
            actc_tensor_release(y);
            return NULL;
        }
    }
    return y;
}
