/* A trainer as a data-parallel replica: the parameters broadcast from rank
 * 0, the trainer's group, and the gradient buckets that its hooks start as
 * backward completes them and finish after backward. */
#include "dist.h"
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

/* Pack bucket b's gradients and start their all-reduce. */
static actc_status launch(actc_dist *d, actc__bucket *b)
{
    size_t n = 0;
    for (int k = 0; k < b->count; k++) n += actc__grad_wire_len(d->params[d->order[b->first + k]]);
    if (!(b->buf = actc_mem_alloc(ACTC_MEM_COMM, (n ? n : 1) * sizeof *b->buf))) return actc_last_status();
    size_t off = 0;
    for (int k = 0; k < b->count; k++) {
        const actc_tensor *p = d->params[d->order[b->first + k]];
        actc_status s = actc__grad_wire_get(p, b->buf + off);
        if (s != ACTC_OK) return s;
        /* The 8-bit codes have no NaN or infinity (the codec maps them to
         * finite values): refuse them here, as clipping and the optimizer
         * would after an fp32 exchange. */
        const size_t len = actc__grad_wire_len(p);
        for (size_t j = 0; d->o.grad_comm == 8 && j < len; j++)
            if (!isfinite(b->buf[off + j]))
                return actc_set_error(ACTC_ERR_NUMERIC, "the gradient of '%s' holds %s (element %zu): not sent",
                                      p->name, isnan(b->buf[off + j]) ? "NaN" : "an infinity", j);
        off += len;
        d->st.fp32_floats += p->numel;
    }
    if (d->next == 0) d->t_start = actc__now();
    d->st.floats += n;
    actc_status s = actc__allreduce_start(d, &b->ar, d->o.grad_comm, b->buf, n);
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
        size_t off = 0;
        for (int k = 0; s == ACTC_OK && k < b->count; k++) {
            actc_tensor *p = d->params[d->order[b->first + k]];
            s = actc__grad_wire_set(p, actc_ctx_seed(ctx), actc_ctx_step(ctx), b->buf + off);
            off += actc__grad_wire_len(p);
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
