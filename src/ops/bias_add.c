/* Bias on every row: y[m, :] = x[m, :] + b for x [..., F], b [F] (GCN adds
 * its bias after propagation).  The gradient of x is the output gradient
 * and b's is its column sums, so nothing is saved.  The column sums are
 * shared with linear's bias gradient (actc__bias_grad). */
#include "ops.h"
#include <limits.h>

/* Column block of the bias-gradient sum: one 64-byte line of floats, so each
 * thread streams whole rows of its block instead of striding over dy. */
#define BIAS_BLOCK 16
#define BIAS_PAR_MIN ((size_t)1 << 15)

/* Columns [o0, o1) of one block, summed over the M rows in row order: the
 * lanes are columns, so the vector width (compiled per ISA level) changes
 * no sum's order and every level gives the same bits. */
ACTC_ISA_CLONES static void bias_block(const float *dy, int M, int F, int o0, int o1, float *db)
{
    float acc[BIAS_BLOCK] = {0};
    if (o1 - o0 == BIAS_BLOCK) { /* a whole line: a fixed trip count vectorises */
        for (int m = 0; m < M; m++) {
            const float *row = dy + (size_t)m * F + o0;
            for (int o = 0; o < BIAS_BLOCK; o++) acc[o] += row[o];
        }
    } else {
        for (int m = 0; m < M; m++) {
            const float *row = dy + (size_t)m * F;
            for (int o = o0; o < o1; o++) acc[o - o0] += row[o];
        }
    }
    for (int o = o0; o < o1; o++) db[o] += acc[o - o0];
}

void actc__bias_grad(const float *dy, int M, int F, float *db)
{
    const int nblk = (F + BIAS_BLOCK - 1) / BIAS_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)M * F >= BIAS_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++)
        bias_block(dy, M, F, blk * BIAS_BLOCK, blk * BIAS_BLOCK + BIAS_BLOCK < F ? blk * BIAS_BLOCK + BIAS_BLOCK : F, db);
}

static actc_status bias_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *b = node->inputs[1];
    float *db;
    actc_status st = actc_grad_buffer(ctx, b, &db);
    if (st != ACTC_OK) return st;
    const int F = b->shape[0];
    if (db) actc__bias_grad(node->output->grad->data, (int)(node->output->numel / (size_t)F), F, db);
    return actc_grad_adopt(ctx, node->inputs[0], actc_grad_take(node));
}

actc_tensor *actc_bias_add(actc_ctx *ctx, actc_tensor *x, actc_tensor *b)
{
    char xs[64], bs[64];
    OP_CHECK(ctx && x && b, "bias_add: NULL %s", !ctx ? "context" : !x ? "input" : "bias");
    OP_CHECK(x->data && b->data, "bias_add: a tensor without data (released?)");
    actc_shape_str(x, xs, sizeof xs);
    actc_shape_str(b, bs, sizeof bs);
    OP_CHECK(b->ndim == 1 && x->ndim >= 1 && x->shape[x->ndim - 1] == b->shape[0],
             "bias_add: bias %s must be [F] for input %s [..., F]", bs, xs);
    OP_CHECK(x->numel / (size_t)b->shape[0] <= (size_t)INT_MAX, "bias_add: input %s has too many rows", xs);
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, x->ndim, x->shape);
    if (!y) return NULL;
    const int F = b->shape[0];
    const size_t M = x->numel / (size_t)F;
    const float *xd = x->data, *bd = b->data;
    float *yd = y->data;
#pragma omp parallel for schedule(static) if (x->numel >= BIAS_PAR_MIN)
    for (size_t m = 0; m < M; m++) {
#pragma omp simd
        for (int f = 0; f < F; f++) yd[m * F + f] = xd[m * F + f] + bd[f];
    }
    actc_tensor *in[2] = {x, b};
    actc_node *node;
    return actc__op_record(ctx, "bias_add", bias_backward, y, 2, in, &node);
}
