/* A trainer as a data-parallel replica: the parameters broadcast from rank
 * 0, the trainer's group, and the gradient buckets that its hooks start as
 * backward completes them and finish after backward. */
#include "dist.h"
#include "../codec/codec.h"
#include "../grad/grad.h"
#include "../core/core.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BUCKET ((size_t)25 << 20) /* PyTorch DDP's bucket_cap_mb */

/* 1 if b's all-reduce is in flight. */
static int in_flight(const actc__bucket *b) { return b->ar.phase != AR_IDLE && b->ar.phase != AR_DONE; }

/* Drop the buckets' buffers between steps.  A collective still in flight
 * (a step failed half-way) cannot be cancelled (MPI forbids it for
 * collectives) nor its buffers freed: they stay, and the handle is broken. */
static void drop_buckets(actc_dist *d)
{
    for (int i = 0; i < d->nb; i++) {
        actc__bucket *b = &d->b[i];
        if (in_flight(b)) {
            d->broken = 1;
            b->buf = NULL; /* MPI's until the job ends */
            memset(&b->ar, 0, sizeof b->ar);
        }
        actc__allreduce_release(&b->ar);
        actc_mem_free(b->buf);
        b->buf = NULL;
        free(b->off);
        b->off = NULL;
        b->ar.phase = AR_IDLE;
        b->ar.req = MPI_REQUEST_NULL;
        b->ready = 0;
    }
    d->next = 0;
}

void actc_dist_detach(actc_dist *d)
{
    if (!d) return;
    drop_buckets(d);
    if (d->t) {
        actc_trainer_on_grad_complete(d->t, NULL, NULL);
        actc_trainer_on_after_backward(d->t, NULL, NULL);
        actc_trainer_set_group(d->t, NULL);
    }
    free(d->b);
    free(d->order);
    free(d->bucket_of);
    d->b = NULL;
    d->order = d->bucket_of = NULL;
    d->nb = 0;
    d->t = NULL;
}

/* The first event of a step: buckets left by a step that failed before
 * its end are dropped (none of their collectives in flight: the ranks
 * failed alike, before any started, and may go on) or make the handle
 * broken (this rank stopped with exchanges started: the job must end). */
static actc_status begin_step(actc_dist *d)
{
    const uint64_t step = actc_trainer_steps(d->t);
    if (step != d->step) {
        int left = 0;
        for (int i = 0; i < d->nb; i++) left |= d->b[i].ready > 0;
        if (left) drop_buckets(d);
        d->step = step;
    }
    if (d->broken)
        return actc_set_error(ACTC_ERR_COMM, "data parallel: a failed step left gradient exchanges in flight; this "
                                             "rank cannot exchange again (the job must end)");
    return ACTC_OK;
}

/* The floats parameter p's gradient takes in its bucket: its wire length,
 * rounded up in 8-bit exchanges to whole blocks of the dynamic map (zeros
 * after it), so that every block of the wire holds one parameter's values
 * from its first element on: the blocks of the gradient's own 8-bit form
 * when it is held in one (--grad-bits 8), which the exchange then re-encodes
 * to the same codes, so that the sum is its only rounding. */
static size_t slot_len(const actc_dist *d, const actc_tensor *p)
{
    const size_t n = actc__grad_wire_len(p), G = ACTC_DYN8_BLOCK;
    return d->o.grad_comm == 8 ? (n + G - 1) / G * G : n;
}

static actc_tensor *bucket_param(const actc__bucket *b, int k) { return b->d->params[b->d->order[b->first + k]]; }

/* The bucket's block `blk` as the codes of the parameter gradient held in
 * 8 bits that it belongs to (actc__codes_fn), the padding after the
 * parameter as zeros. */
static int held_codes(void *user, size_t blk, float *absmax, uint8_t *codes)
{
    const actc__bucket *b = user;
    const size_t G = ACTC_DYN8_BLOCK, e = blk * G;
    int lo = 0, hi = b->count - 1; /* the slot holding element e */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (b->off[mid] <= e) lo = mid;
        else hi = mid - 1;
    }
    const actc_tensor *p = bucket_param(b, lo);
    float scale;
    const void *payload = actc__grad_dyn8(p, &scale);
    if (!payload) return 0;
    const uint8_t *c;
    size_t len;
    *absmax = actc_dyn8_get_block(payload, p->numel, (e - b->off[lo]) / G, &c, &len) * scale;
    memcpy(codes, c, len);
    memset(codes + len, actc_dyn8_zero_code(), G - len);
    return 1;
}

/* The sum the 8-bit exchange delivered to p, the k-th parameter of b, in
 * its own 8-bit form: the codes, not their decoded values re-encoded. */
static actc_status set_held(actc_dist *d, actc__bucket *b, int k, actc_tensor *p)
{
    const size_t G = ACTC_DYN8_BLOCK, n = p->numel;
    uint8_t *payload = actc_mem_alloc(ACTC_MEM_SCRATCH, actc_dyn8_bytes(n, 0));
    if (!payload) return actc_last_status();
    for (size_t j = 0; j * G < n; j++) {
        const uint8_t *c;
        size_t len;
        const float absmax = actc__allreduce_block(d, &b->ar, b->off[k] / G + j, &c, &len);
        actc_dyn8_put_block(payload, n, j, absmax, c);
    }
    actc_status s = actc__grad_set_dyn8(p, payload);
    actc_mem_free(payload);
    return s;
}

/* Pack bucket b's gradients and start their all-reduce. */
static actc_status launch(actc_dist *d, actc__bucket *b)
{
    size_t n = 0;
    if (!(b->off = malloc(((size_t)b->count + 1) * sizeof *b->off)))
        return actc_set_error(ACTC_ERR_OOM, "out of memory for a gradient bucket");
    for (int k = 0; k < b->count; k++) {
        b->off[k] = n;
        n += slot_len(d, bucket_param(b, k));
    }
    b->off[b->count] = n;
    if (!(b->buf = actc_mem_alloc(ACTC_MEM_COMM, (n ? n : 1) * sizeof *b->buf))) return actc_last_status();
    int held = 0; /* a gradient held in 8 bits: its codes travel */
    for (int k = 0; k < b->count; k++) {
        const actc_tensor *p = bucket_param(b, k);
        float scale;
        held |= d->o.grad_comm == 8 && actc__grad_dyn8(p, &scale);
        float *x = b->buf + b->off[k];
        actc_status s = actc__grad_wire_get(p, x);
        if (s != ACTC_OK) return s;
        /* The 8-bit codes have no NaN or infinity (the codec maps them to
         * finite values): refuse them here, as clipping and the optimizer
         * would after an fp32 exchange. */
        const size_t len = actc__grad_wire_len(p);
        for (size_t j = 0; d->o.grad_comm == 8 && j < len; j++)
            if (!isfinite(x[j]))
                return actc_set_error(ACTC_ERR_NUMERIC, "the gradient of '%s' holds %s (element %zu): not sent",
                                      p->name, isnan(x[j]) ? "NaN" : "an infinity", j);
        memset(x + len, 0, (b->off[k + 1] - b->off[k] - len) * sizeof *x);
        d->st.fp32_floats += p->numel;
    }
    if (d->next == 0) d->t_start = actc__now();
    d->st.floats += n;
    actc_status s =
        actc__allreduce_start(d, &b->ar, d->o.grad_comm, b->buf, n, held ? held_codes : NULL, b);
    d->st.bytes_sent += b->ar.sent;
    return s;
}

/* Start every bucket whose turn it is and which is complete; test the
 * ones in flight (MPI moves non-blocking collectives forward only inside
 * MPI calls). */
static actc_status advance(actc_dist *d)
{
    actc_status s = ACTC_OK;
    while (s == ACTC_OK && d->next < d->nb && d->b[d->next].ready == d->b[d->next].count) {
        if (d->next == 0) d->st.floats = d->st.fp32_floats = d->st.bytes_sent = 0;
        s = launch(d, &d->b[d->next]);
        d->next++;
    }
    /* All-gathers start in bucket order on every rank. */
    int turn = 1;
    for (int i = 0; s == ACTC_OK && i < d->next; i++) {
        s = actc__allreduce_progress(d, &d->b[i].ar, 0, turn);
        turn = turn && d->b[i].ar.phase != AR_SPREAD && d->b[i].ar.phase != AR_SUMMED;
    }
    return s;
}

static actc_status on_grad(actc_trainer *t, actc_tensor *param, int index, void *user)
{
    (void)t, (void)param;
    actc_dist *d = user;
    if (index < 0 || index >= d->np) return ACTC_OK;
    actc_status s = begin_step(d);
    if (s != ACTC_OK) return s;
    actc__bucket *b = &d->b[d->bucket_of[index]];
    if (++b->ready > b->count)
        return actc_set_error(ACTC_ERR_STATE, "data parallel: a gradient completed twice in one step (a failed step "
                                              "left the buckets behind: the job must end)");
    return advance(d);
}

/* After backward: every bucket started (the trainer has completed every
 * parameter), wait for them in order and put the sums back. */
static actc_status after_backward(actc_trainer *t, void *user)
{
    actc_dist *d = user;
    const double t0 = actc__now();
    actc_status s = begin_step(d);
    if (s == ACTC_OK) s = advance(d);
    if (s == ACTC_OK && d->next < d->nb)
        s = actc_set_error(ACTC_ERR_STATE, "data parallel: bucket %d of %d never completed", d->next, d->nb);
    actc_ctx *ctx = actc_trainer_ctx(t);
    for (int i = 0; s == ACTC_OK && i < d->nb; i++) {
        actc__bucket *b = &d->b[i];
        s = actc__allreduce_progress(d, &b->ar, 1, 1);
        /* One rank sums nothing: its gradients stay as they are. */
        for (int k = 0; s == ACTC_OK && d->size > 1 && k < b->count; k++) {
            actc_tensor *p = bucket_param(b, k);
            float scale;
            if (d->o.grad_comm == 8 && actc__grad_dyn8(p, &scale)) s = set_held(d, b, k, p);
            else s = actc__grad_wire_set(p, actc_ctx_seed(ctx), actc_ctx_step(ctx), b->buf + b->off[k]);
        }
    }
    drop_buckets(d); /* on failure, broken if any exchange is still in flight */
    if (s != ACTC_OK) return s;
    const double t1 = actc__now();
    d->st.exposed_s = t1 - t0;
    d->st.comm_s = t1 - d->t_start;
    d->st.total_exposed_s += d->st.exposed_s;
    d->st.total_comm_s += d->st.comm_s;
    d->st.steps++;
    return ACTC_OK;
}

actc_status actc_dist_attach(actc_dist *d, actc_trainer *t, const actc_dist_opts *o)
{
    if (!d || !t) return actc_set_error(ACTC_ERR_INVALID, "actc_dist_attach: NULL handle or trainer");
    actc_dist_opts opt = o ? *o : actc_dist_default_opts();
    if (opt.grad_comm != 32 && opt.grad_comm != 8)
        return actc_set_error(ACTC_ERR_INVALID, "grad_comm %d: gradients travel in 32 bits (fp32) or 8 (AGoQ's "
                                                "8-bit all-reduce)", opt.grad_comm);
    if (!opt.bucket_bytes) opt.bucket_bytes = DEFAULT_BUCKET;
    actc_dist_detach(d);
    d->o = opt;
    d->np = actc_model_params(actc_trainer_model(t), &d->params);
    /* The same model (every parameter's and buffer's shape) and position
     * everywhere, then rank 0's weights and buffers (batch-norm statistics):
     * a rank that resumed from another copy of a checkpoint is refused or
     * overwritten, never left to drift. */
    actc_tensor **state;
    const int ns = actc_model_state(actc_trainer_model(t), &state);
    int *shape = calloc((size_t)ns * (ACTC_MAX_DIMS + 1) + 6, sizeof *shape);
    if (!shape) return actc_set_error(ACTC_ERR_OOM, "out of memory for the replica");
    for (int i = 0; i < ns; i++) {
        shape[i * (ACTC_MAX_DIMS + 1)] = state[i]->ndim;
        memcpy(shape + i * (ACTC_MAX_DIMS + 1) + 1, state[i]->shape, sizeof state[i]->shape);
    }
    const uint64_t pos[3] = {actc_trainer_steps(t), actc_trainer_epoch(t), actc_trainer_batch_in_epoch(t)};
    memcpy(shape + (size_t)ns * (ACTC_MAX_DIMS + 1), pos, sizeof pos);
    actc_status s = actc_dist_same(d, shape, ((size_t)ns * (ACTC_MAX_DIMS + 1)) * sizeof *shape + sizeof pos,
                                   "the model's shapes and the training position (step, epoch, batch)");
    free(shape);
    if (s != ACTC_OK) return s;
    for (int i = 0; i < ns; i++) {
        actc_tensor *p = state[i];
        for (size_t off = 0; off < p->numel;) {
            const size_t k = p->numel - off < (size_t)1 << 30 ? p->numel - off : (size_t)1 << 30;
            MPI_Request req;
            int rc = MPI_Ibcast(p->data + off, (int)k, MPI_FLOAT, 0, d->comm, &req);
            if (rc != MPI_SUCCESS) return actc__mpi_error(rc, "MPI_Ibcast of the weights");
            if ((s = actc__dist_wait(d, &req, "the broadcast of the weights")) != ACTC_OK) return s;
            off += k;
        }
        actc_tensor_mark_changed(p); /* rank 0's values, written in place */
    }
    d->order = malloc(((size_t)d->np + 1) * sizeof *d->order);
    d->bucket_of = malloc(((size_t)d->np + 1) * sizeof *d->bucket_of);
    d->b = calloc((size_t)d->np + 1, sizeof *d->b);
    if (!d->order || !d->bucket_of || !d->b) {
        actc_dist_detach(d);
        return actc_set_error(ACTC_ERR_OOM, "out of memory for the gradient buckets");
    }
    size_t bytes = 0;
    for (int k = 0; k < d->np; k++) {
        const int i = d->np - 1 - k;
        d->order[k] = i;
        if (d->nb == 0 || bytes >= opt.bucket_bytes) {
            d->b[d->nb].first = k;
            d->b[d->nb].d = d;
            d->b[d->nb].ar.req = MPI_REQUEST_NULL;
            d->nb++;
            bytes = 0;
        }
        d->b[d->nb - 1].count++;
        d->bucket_of[i] = d->nb - 1;
        bytes += d->params[i]->numel * sizeof(float);
    }
    d->t = t;
    d->step = actc_trainer_steps(t);
    if ((s = actc__dist_set_group(d, t)) != ACTC_OK) {
        actc_dist_detach(d);
        return s;
    }
    actc_trainer_on_grad_complete(t, on_grad, d);
    actc_trainer_on_after_backward(t, after_backward, d);
    memset(&d->st, 0, sizeof d->st);
    d->st.ranks = d->size;
    d->st.rank = d->rank;
    d->st.grad_comm = opt.grad_comm;
    d->st.buckets = d->nb;
    return ACTC_OK;
}
