/* A pipeline stage's pass over the step's micro-batches: the schedule's
 * forwards and backwards in its order (pipe_schedule.c), each micro-batch's
 * tape parked as a frame between its forward and its backward, hidden
 * states and their gradients exchanged through the pipe's transport.
 * Receives are posted one forward ahead (the next micro-batch's input) and
 * at each forward (its gradient), sends start as soon as their data exist,
 * so the transfers overlap the stage's compute. */
#include "train.h"
#include "../autograd/autograd.h"
#include "../core/core.h"
#include <stdlib.h>
#include <string.h>

/* One micro-batch in flight on this stage. */
typedef struct {
    int off, len;
    actc_frame *frame;      /* its tape between forward and backward       */
    actc_tensor *in;        /* the hidden states received (stage > 0)      */
    actc_tensor *out;       /* its output: hidden states, or the loss      */
    actc_tensor *grad;      /* the output's gradient received (not last)   */
    void *rx_in, *rx_grad;  /* receives posted                             */
    void *tx_out, *tx_grad; /* sends started (from out, from in's gradient) */
} slot;

typedef struct {
    actc_trainer *t;
    const actc_trainer_pipe *p;
    int last;
    int T;
    size_t row;             /* floats of one sample's hidden states        */
    int held, held_peak;    /* micro-batches between forward and backward  */
} stage_io;

static actc_status wait_req(const stage_io *io, void **req)
{
    if (!*req) return ACTC_OK;
    actc_status s = io->p->wait(*req, io->p->user);
    if (s == ACTC_OK) *req = NULL; /* a failed one is still the transport's */
    return s;
}

/* Post the receive of micro-batch k's input (stage > 0). */
static actc_status post_input(const stage_io *io, slot *q, int k)
{
    if (io->p->stage == 0 || q->in) return ACTC_OK;
    int shp[3] = {q->len, io->T, (int)(io->row / (size_t)io->T)};
    if (!(q->in = actc_tensor_new(ACTC_MEM_ACT, 3, shp))) return actc_last_status();
    q->in->requires_grad = 1; /* a leaf: backward leaves its gradient for stage - 1 */
    return io->p->start(0, q->in->data, q->in->numel, io->p->stage - 1, 2 * k, &q->rx_in, io->p->user);
}

static actc_status forward_op(actc__pass_state *ps, stage_io *io, actc_ctx *ctx, slot *sl, int k, int M)
{
    slot *q = &sl[k];
    const actc_batch *b = ps->b;
    const uint64_t step = actc_ctx_step(ctx);
    actc_status s = post_input(io, q, k);
    if (s == ACTC_OK) s = wait_req(io, &q->rx_in);
    if (s == ACTC_OK && k + 1 < M) s = post_input(io, &sl[k + 1], k + 1);
    if (s != ACTC_OK) return s;
    actc_batch part = {.x = q->in, .B = q->len, .T = io->T};
    part.ids = b->ids + (size_t)q->off * (size_t)io->T;
    if (io->last) part.labels = b->labels + (size_t)q->off * (size_t)io->T;
    actc_ctx_set_step(ctx, step);
    actc_ctx_set_substep(ctx, (uint32_t)k);
    actc_store_stats before;
    actc_store_get_stats(ctx, &before);
    double t0 = actc__now();
    if (io->last) {
        int correct;
        long rows;
        q->out = actc__trainer_loss(io->t, ctx, &part, &correct, &rows);
        if (q->out) {
            ps->loss_sum += (double)q->out->data[0] * (double)(rows ? rows : q->len);
            ps->correct += correct;
            ps->rows += rows;
        }
    } else {
        q->out = actc_model_forward_batch(io->t->m, ctx, &part);
    }
    ps->forward_s += actc__now() - t0;
    if (!q->out) return actc_last_status();
    if (++io->held > io->held_peak) io->held_peak = io->held;
    if (k == 0 && ps->kept) {
        actc_store_stats after;
        actc_store_get_stats(ctx, &after);
        io->t->pst.micro_context = after.stored_bytes - before.stored_bytes;
    }
    if (!io->last) {
        const int next = io->p->stage + 1;
        if ((s = io->p->start(1, q->out->data, q->out->numel, next, 2 * k, &q->tx_out, io->p->user)) != ACTC_OK)
            return s;
        if (!(q->grad = actc_tensor_new(ACTC_MEM_COMM, q->out->ndim, q->out->shape))) return actc_last_status();
        s = io->p->start(0, q->grad->data, q->grad->numel, next, 2 * k + 1, &q->rx_grad, io->p->user);
        if (s != ACTC_OK) return s;
    }
    s = actc_ctx_park(ctx, &q->frame); /* the frame keeps micro-batch k's keys */
    actc_ctx_set_step(ctx, step);
    return s;
}

static actc_status backward_op(actc__pass_state *ps, stage_io *io, actc_ctx *ctx, slot *sl, int k, int M,
                               int denom)
{
    slot *q = &sl[k];
    actc_status s = wait_req(io, &q->rx_grad);
    if (s == ACTC_OK) s = actc_ctx_resume(ctx, q->frame);
    if (s != ACTC_OK) return s;
    q->frame = NULL;
    io->held--;
    const uint64_t step = actc_ctx_step(ctx);
    io->t->events_on = ps->kept && k == M - 1;
    double t0 = actc__now();
    if (io->last) s = actc_backward_scaled(ctx, q->out, (float)q->len / (float)denom);
    else s = actc_backward_from(ctx, q->out, q->grad);
    ps->backward_s += actc__now() - t0;
    actc_ctx_set_step(ctx, step);
    if (s == ACTC_OK) s = wait_req(io, &q->tx_out); /* out's bytes are on their way: it may go */
    if (!q->tx_out) {
        actc_tensor_release(q->out);
        q->out = NULL;
    }
    actc_tensor_release(q->grad); /* its receive is done (waited above) */
    q->grad = NULL;
    if (s != ACTC_OK || io->p->stage == 0) return s;
    float *g;
    if ((s = actc_grad_buffer(ctx, q->in, &g)) != ACTC_OK) return s; /* zeros if nothing reached it */
    s = io->p->start(1, g, q->in->numel, io->p->stage - 1, 2 * k + 1, &q->tx_grad, io->p->user);
    /* The previous micro-batch's gradient has travelled during this
     * backward: its input may go. */
    if (s == ACTC_OK && k > 0 && (s = wait_req(io, &sl[k - 1].tx_grad)) == ACTC_OK) {
        actc_tensor_release(sl[k - 1].in);
        sl[k - 1].in = NULL;
    }
    return s;
}

/* Whatever a pass leaves: frames dropped, sends waited for, tensors
 * released.  After a failure a request may never complete (the other
 * stages stopped elsewhere): the buffers it reads or writes stay MPI's,
 * the trainer's pipeline is broken, and the job must end. */
static actc_status finish(const stage_io *io, actc_ctx *ctx, slot *sl, int M, actc_status s)
{
    for (int k = 0; k < M; k++) {
        slot *q = &sl[k];
        if (s == ACTC_OK) s = wait_req(io, &q->tx_grad);
        if (s == ACTC_OK) s = wait_req(io, &q->tx_out);
        if (q->frame) actc_frame_drop(ctx, q->frame);
        const int in_flight = q->rx_in || q->rx_grad || q->tx_out || q->tx_grad;
        io->t->pipe_broken |= in_flight;
        if (!q->rx_in && !q->tx_grad) actc_tensor_release(q->in);
        if (!q->tx_out) actc_tensor_release(q->out);
        if (!q->rx_grad) actc_tensor_release(q->grad);
    }
    free(sl);
    return s;
}

actc_status actc__pipe_pass(actc_ctx *ctx, void *user, int max_samples, int *samples)
{
    actc__pass_state *ps = user;
    actc_trainer *t = ps->t;
    const actc_trainer_pipe *p = &t->pipe;
    if (t->pipe_broken)
        return actc_set_error(ACTC_ERR_COMM, "pipeline stage %d: a failed step left messages in flight; this stage "
                                             "cannot take part in another (the job must end)", p->stage);
    const int N = actc_batch_samples(ps->b);
    const int n = max_samples > 0 && max_samples < N ? max_samples : N;
    const int M = t->o.accum < n ? t->o.accum : n;
    const int micro = (n + M - 1) / M;
    const int kept = ps->kept = !actc_ctx_replaying(ctx);
    const int denom = kept ? ps->total : n;
    const uint64_t step = actc_ctx_step(ctx);
    stage_io io = {t, p, p->stage == p->stages - 1, ps->b->T,
                   (size_t)ps->b->T * (size_t)actc_model_get_opts(t->m)->width, 0, 0};
    ps->loss_sum = 0;
    ps->correct = ps->rows = 0;
    ps->forward_s = ps->backward_s = ps->codec_forward_s = ps->codec_backward_s = 0;
    *samples = ps->samples = n;
    actc_pipe_op *ops = malloc(2 * (size_t)M * sizeof *ops);
    slot *sl = calloc((size_t)M, sizeof *sl);
    if (!ops || !sl) {
        free(ops);
        free(sl);
        return actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline's %d micro-batches", M);
    }
    int m = 0;
    for (int off = 0; off < n; off += micro, m++) {
        sl[m].off = off;
        sl[m].len = n - off < micro ? n - off : micro;
    }
    double t0 = actc__now();
    actc_ctx_set_training(ctx, 1);
    actc_status s = actc_pipe_ops(p->schedule, p->stage, p->stages, m, ops, NULL);
    for (int i = 0; s == ACTC_OK && i < 2 * m; i++)
        s = ops[i].backward ? backward_op(ps, &io, ctx, sl, ops[i].micro, m, denom)
                            : forward_op(ps, &io, ctx, sl, ops[i].micro, m);
    t->events_on = 0;
    free(ops);
    s = finish(&io, ctx, sl, m, s);
    if (s != ACTC_OK) actc_ctx_reset(ctx);
    actc_ctx_set_step(ctx, step + 1); /* as one actc_backward would leave it */
    ps->pass_s = actc__now() - t0;
    if (s == ACTC_OK && kept) {
        actc_pipe_stats *st = &t->pst;
        st->steps++;
        if (io.held_peak > st->held_peak) st->held_peak = io.held_peak;
        st->compute_s += ps->forward_s + ps->backward_s;
        st->pass_s += ps->pass_s;
    }
    return s;
}

actc_status actc__pipe_eval_forward(actc_trainer *t, actc_ctx *ctx, const actc_batch *b, actc_tensor **out)
{
    const actc_trainer_pipe *p = &t->pipe;
    const int last = p->stage == p->stages - 1;
    *out = NULL;
    if (t->pipe_broken)
        return actc_set_error(ACTC_ERR_COMM, "pipeline stage %d: a failed step left messages in flight; this stage "
                                             "cannot evaluate (the job must end)", p->stage);
    if (!b->ids || b->B < 1 || b->T < 1)
        return actc_set_error(ACTC_ERR_INVALID, "a pipeline stage evaluates token batches (B, T >= 1)");
    stage_io io = {t, p, last, b->T, (size_t)b->T * (size_t)actc_model_get_opts(t->m)->width, 0, 0};
    slot q = {.len = b->B};
    actc_batch part = *b;
    actc_status s = post_input(&io, &q, 0);
    if (s == ACTC_OK) s = wait_req(&io, &q.rx_in);
    if (q.rx_in) { /* still MPI's: see finish */
        t->pipe_broken = 1;
        return s;
    }
    part.x = q.in;
    actc_tensor *y = s == ACTC_OK ? actc_model_forward_batch(t->m, ctx, &part) : NULL;
    actc_tensor_release(q.in);
    if (!y) return s != ACTC_OK ? s : actc_last_status();
    if (last) {
        *out = y;
        return ACTC_OK;
    }
    void *tx = NULL;
    s = p->start(1, y->data, y->numel, p->stage + 1, 0, &tx, p->user);
    if (s == ACTC_OK) s = wait_req(&io, &tx);
    if (tx) t->pipe_broken = 1; /* y stays MPI's */
    else actc_tensor_release(y);
    return s;
}
