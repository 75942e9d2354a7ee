/* Mean softmax cross-entropy of logits[N, K] against integer labels.
 *
 * loss = (1/R) sum over counted rows of (logsumexp(z_r) - z_r[label_r]),
 * R = rows whose label is not ignore_index.  logsumexp subtracts the row
 * maximum first, so large logits do not overflow.  If every row is ignored
 * the loss is 0 with a zero gradient (PyTorch gives NaN, which would stop
 * training on a batch that is all padding).
 *
 * Backward: dz_r = g/R * (softmax(z_r) - onehot(label_r)).  Forward saves
 * the probabilities softmax(z) as ACT (the policy decides how to store
 * them), not the logits: the gradient is linear in them, so rounding them
 * stochastically keeps it unbiased, where a softmax recomputed from rounded
 * logits is biased (exp of a noisy logit; 4-bit logits cost llama-mini
 * measurably, bench/RESULTS.md).  They are computed exactly as backward
 * used to recompute them, so uncompressed gradients did not change by a
 * bit.  The labels are integers owned by the caller, so the node keeps its
 * own copy in node->user. */
#include "ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static actc_status ce_backward(actc_ctx *ctx, actc_node *node)
{
    actc_tensor *x = node->inputs[0];
    actc_tensor *p = actc_load(ctx, node, 0);
    if (!p) return actc_last_status();
    float *gx;
    actc_status st = actc_grad_buffer(ctx, x, &gx);
    if (st != ACTC_OK || !gx) {
        actc_tensor_release(p);
        return st;
    }
    const int N = x->shape[0], K = x->shape[1], ignore = node->iattr[1];
    const int counted = node->iattr[0];
    const int32_t *labels = node->user;
    if (counted > 0) {
        const float g = node->output->grad->data[0] / (float)counted;
        const float *pd = p->data;
#pragma omp parallel for schedule(static) if ((size_t)N * K > 16384)
        for (int r = 0; r < N; r++) {
            if (labels[r] == ignore) continue;
            const float *pr = pd + (size_t)r * K;
            float *gr = gx + (size_t)r * K;
            for (int j = 0; j < K; j++) gr[j] += g * pr[j];
            gr[labels[r]] -= g;
        }
    }
    actc_tensor_release(p);
    return ACTC_OK;
}

/* Per row of logits z [N, K]: the loss (0 for an ignored row) into
 * row_loss and, when p is not NULL, the probabilities; the number of rows
 * whose arg-max is the label. */
static int ce_rows(const float *zd, int N, int K, const int32_t *labels, int ignore_index, double *row_loss, float *pd)
{
    int correct = 0;
#pragma omp parallel for schedule(static) reduction(+ : correct) if ((size_t)N * K > 16384)
    for (int r = 0; r < N; r++) {
        row_loss[r] = 0.0;
        if (labels[r] == ignore_index) continue;
        const float *zr = zd + (size_t)r * K;
        float mx = zr[0];
        int am = 0;
        for (int j = 1; j < K; j++)
            if (zr[j] > mx) {
                mx = zr[j];
                am = j;
            }
        double s = 0.0;
        for (int j = 0; j < K; j++) s += exp((double)(zr[j] - mx));
        row_loss[r] = (double)mx + log(s) - (double)zr[labels[r]];
        correct += am == labels[r];
        if (pd) {
            const double inv = 1.0 / s;
            float *pr = pd + (size_t)r * K;
            for (int j = 0; j < K; j++) pr[j] = (float)(exp((double)(zr[j] - mx)) * inv);
        }
    }
    return correct;
}

actc_tensor *actc_cross_entropy(actc_ctx *ctx, actc_tensor *logits, const int32_t *labels,
                                int ignore_index, int *n_correct)
{
    OP_CHECK(ctx, "cross_entropy: NULL context");
    OP_CHECK(logits && logits->data, "cross_entropy: logits are NULL or their data was already freed");
    char sx[64];
    actc_shape_str(logits, sx, sizeof sx);
    OP_CHECK(logits->ndim == 2 && logits->shape[0] > 0 && logits->shape[1] > 0,
             "cross_entropy: logits must be [N, K] with N, K > 0, got %s", sx);
    OP_CHECK(labels, "cross_entropy: labels are NULL (logits %s)", sx);
    const int N = logits->shape[0], K = logits->shape[1];
    int counted = 0;
    for (int r = 0; r < N; r++) {
        if (labels[r] == ignore_index) continue;
        OP_CHECK(labels[r] >= 0 && labels[r] < K,
                 "cross_entropy: label %d at row %d is outside [0, %d) (logits %s, ignore_index %d)",
                 (int)labels[r], r, K, sx, ignore_index);
        counted++;
    }

    int one = 1;
    actc_tensor *y = actc_tensor_new(ACTC_MEM_ACT, 1, &one);
    if (!y) return NULL;
    const float *zd = logits->data;
    /* Per-row losses summed serially afterwards: an OpenMP reduction combines
     * thread partials in arrival order, which would make the loss (and so
     * the exact-resume guarantee) depend on timing with 3+ threads. */
    double *row_loss = malloc((size_t)N * sizeof *row_loss);
    if (!row_loss) {
        actc_tensor_release(y);
        actc_set_error(ACTC_ERR_OOM, "cross_entropy: out of memory for %d row losses", N);
        return NULL;
    }
    /* The probabilities only when they will be saved (the condition under
     * which actc_node_new records a node); ignored rows stay 0. */
    const int keep = actc_ctx_recording(ctx) && logits->requires_grad;
    actc_tensor *probs = keep ? actc_tensor_new(ACTC_MEM_SCRATCH, 2, logits->shape) : NULL;
    if (keep && !probs) {
        free(row_loss);
        actc_tensor_release(y);
        return NULL;
    }
    float *pd = probs ? probs->data : NULL;
    if (pd) memset(pd, 0, logits->numel * sizeof *pd);
    const int correct = ce_rows(zd, N, K, labels, ignore_index, row_loss, pd);
    double total = 0.0;
    for (int r = 0; r < N; r++) total += row_loss[r];
    free(row_loss);
    y->data[0] = counted ? (float)(total / counted) : 0.0f;
    if (n_correct) *n_correct = correct;

    actc_node *node;
    if (!actc__op_record(ctx, "cross_entropy", ce_backward, y, 1, &logits, &node)) {
        actc_tensor_release(probs);
        return NULL;
    }
    if (node) {
        node->iattr[0] = counted;
        node->iattr[1] = ignore_index;
        int32_t *copy = malloc((size_t)N * sizeof *copy);
        if (!copy) {
            actc_tensor_release(y);
            actc_tensor_release(probs);
            actc_set_error(ACTC_ERR_OOM, "cross_entropy: out of memory copying %d labels", N);
            return NULL;
        }
        memcpy(copy, labels, (size_t)N * sizeof *copy);
        node->user = copy;
        node->user_free = free;
        /* dlogits = (p - onehot) / N: linear in the saved probabilities. */
        const actc_save_role r = actc__role(ACTC_ROLE_LOSS_IN, 1);
        if (actc_save_as(ctx, node, probs, ACTC_SAVE_ACT, &r) != ACTC_OK) {
            actc_tensor_release(y);
            y = NULL;
        }
    }
    actc_tensor_release(probs); /* the store holds its own reference */
    return y;
}
