/* Pipeline stages over MPI: the world's ranks as a grid of stages x
 * replicas (rank r is stage r / D, replica r % D, for D = N / P), a handle
 * on each replica's stages (point-to-point hidden states and gradients,
 * the sums over stages) and one on each stage's replicas (data
 * parallelism: actc_dist_attach), and the transport the trainer's pipeline
 * pass calls (actc_trainer_pipe). */
#include "dist.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* A handle on the ranks of world with the same color (ordered by key). */
static actc_status split(actc_dist *world, int color, int key, actc_dist **out)
{
    MPI_Comm c;
    int rc = MPI_Comm_split(world->comm, color, key, &c);
    if (rc != MPI_SUCCESS) return actc__mpi_error(rc, "MPI_Comm_split");
    actc_status s = actc_dist_new(&c, out);
    MPI_Comm_free(&c);
    if (s == ACTC_OK) actc_dist_set_timeout(*out, world->timeout_s);
    return s;
}

actc_status actc_pipe_new(actc_dist *world, int stages, actc_pipe **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_pipe_new: out is NULL");
    *out = NULL;
    if (!world) return actc_set_error(ACTC_ERR_INVALID, "actc_pipe_new: NULL communicator handle");
    if (stages < 1 || world->size % stages)
        return actc_set_error(ACTC_ERR_INVALID, "%d ranks cannot form pipelines of %d stages: the ranks must be a "
                                                "multiple of the stages (the rest is data parallelism)",
                              world->size, stages);
    actc_pipe *p = calloc(1, sizeof *p);
    if (!p) return actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline");
    const int D = world->size / stages;
    p->stages = stages;
    p->stage = world->rank / D;
    actc_status s = split(world, world->rank % D, p->stage, &p->pp);
    if (s == ACTC_OK && D > 1) s = split(world, p->stage, world->rank % D, &p->dp);
    if (s != ACTC_OK) {
        actc_pipe_free(p);
        return s;
    }
    *out = p;
    return ACTC_OK;
}

int actc_pipe_stage(const actc_pipe *p) { return p ? p->stage : 0; }
int actc_pipe_stages(const actc_pipe *p) { return p ? p->stages : 1; }
actc_dist *actc_pipe_replicas(actc_pipe *p) { return p ? p->dp : NULL; }

/* ---- the trainer's transport ----------------------------------------------- */

static actc_status msg_start(int send, float *buf, size_t n, int peer, int tag, void **req, void *user)
{
    actc_pipe *p = user;
    *req = NULL;
    if (n > INT_MAX) return actc_set_error(ACTC_ERR_INVALID, "a pipeline message of %zu floats is over MPI's count", n);
    MPI_Request *r = malloc(sizeof *r);
    if (!r) return actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline message");
    int rc = send ? MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, p->pp->comm, r)
                  : MPI_Irecv(buf, (int)n, MPI_FLOAT, peer, tag, p->pp->comm, r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return actc__mpi_error(rc, send ? "MPI_Isend to the next stage" : "MPI_Irecv from a neighbouring stage");
    }
    *req = r;
    return ACTC_OK;
}

static actc_status msg_wait(void *req, void *user)
{
    actc_pipe *p = user;
    actc_status s = actc__dist_wait(p->pp, req, "a pipeline stage's hidden states or gradient");
    if (s == ACTC_OK) free(req); /* a request still in flight stays MPI's */
    return s;
}

static actc_status stage_sum(double *v, int n, void *user)
{
    actc_pipe *p = user;
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, p->pp->comm, &req);
    return rc != MPI_SUCCESS ? actc__mpi_error(rc, "MPI_Iallreduce over the stages")
                             : actc__dist_wait(p->pp, &req, "the sum over the pipeline's stages");
}

actc_status actc_pipe_sum(actc_pipe *p, double *v, int n)
{
    if (!p || (!v && n)) return actc_set_error(ACTC_ERR_INVALID, "actc_pipe_sum: NULL argument");
    return stage_sum(v, n, p);
}

/* Exchange n bytes with peer on the handle's second communicator (no
 * micro-batch's tag can match): out goes, in arrives. */
static actc_status swap(actc_pipe *p, int peer, const void *out, void *in, size_t n)
{
    MPI_Request r[2];
    int rc = MPI_Irecv(in, (int)n, MPI_BYTE, peer, 0, p->pp->gather, &r[0]);
    if (rc == MPI_SUCCESS) rc = MPI_Isend(out, (int)n, MPI_BYTE, peer, 0, p->pp->gather, &r[1]);
    if (rc != MPI_SUCCESS) return actc__mpi_error(rc, "an exchange between the first and the last stage");
    actc_status s = actc__dist_wait(p->pp, &r[0], "the shared parameters' exchange");
    return s == ACTC_OK ? actc__dist_wait(p->pp, &r[1], "the shared parameters' exchange") : s;
}

static int other_end(const actc_pipe *p) { return p->stage == 0 ? p->stages - 1 : 0; }

/* The other copy's gradient added: the first stage computes g0 + g1, the
 * last g1 + g0, the same floats. */
static actc_status share_grad(float *g, size_t n, void *user)
{
    actc_pipe *p = user;
    if (n > INT_MAX / sizeof(float))
        return actc_set_error(ACTC_ERR_INVALID, "a shared gradient of %zu floats is over MPI's count", n);
    float *in = actc_mem_alloc(ACTC_MEM_COMM, n * sizeof *in);
    if (!in) return actc_last_status();
    actc_status s = swap(p, other_end(p), g, in, n * sizeof *g);
    if (s == ACTC_OK)
        for (size_t i = 0; i < n; i++) g[i] += in[i];
    actc_mem_free(in);
    return s;
}

/* The parameters the first and the last stage both hold (a tied
 * embedding), by name and size. */
static actc_status find_shared(actc_pipe *p, actc_tensor **params, int np)
{
    free(p->shared);
    p->shared = NULL;
    p->n_shared = 0;
    if (p->stages == 1 || (p->stage != 0 && p->stage != p->stages - 1)) return ACTC_OK;
    uint64_t *mine = malloc(((size_t)np + 1) * 2 * sizeof *mine);
    int theirs_n = 0;
    actc_status s = mine ? ACTC_OK : actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline");
    for (int i = 0; s == ACTC_OK && i < np; i++) {
        mine[2 * i] = actc_hash_bytes(ACTC_HASH_START, params[i]->name, strlen(params[i]->name));
        mine[2 * i + 1] = params[i]->numel;
    }
    if (s == ACTC_OK) s = swap(p, other_end(p), &np, &theirs_n, sizeof np);
    uint64_t *theirs = s == ACTC_OK ? malloc(((size_t)theirs_n + 1) * 2 * sizeof *theirs) : NULL;
    if (s == ACTC_OK && !theirs) s = actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline");
    /* Equal counts are not needed: each side sends its own list, and the
     * receive is sized by the other's count (sent first). */
    if (s == ACTC_OK) {
        MPI_Request r[2];
        int rc = MPI_Irecv(theirs, 2 * theirs_n, MPI_UINT64_T, other_end(p), 1, p->pp->gather, &r[0]);
        if (rc == MPI_SUCCESS) rc = MPI_Isend(mine, 2 * np, MPI_UINT64_T, other_end(p), 1, p->pp->gather, &r[1]);
        s = rc != MPI_SUCCESS ? actc__mpi_error(rc, "the stages' parameter names")
                              : actc__dist_wait(p->pp, &r[0], "the stages' parameter names");
        if (s == ACTC_OK) s = actc__dist_wait(p->pp, &r[1], "the stages' parameter names");
    }
    if (s == ACTC_OK && !(p->shared = malloc(((size_t)np + 1) * sizeof *p->shared)))
        s = actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline");
    for (int i = 0; s == ACTC_OK && i < np; i++)
        for (int j = 0; j < theirs_n; j++)
            if (mine[2 * i] == theirs[2 * j] && mine[2 * i + 1] == theirs[2 * j + 1]) {
                p->shared[p->n_shared++] = i;
                break;
            }
    free(mine);
    free(theirs);
    return s;
}

actc_status actc_pipe_attach(actc_pipe *p, actc_trainer *t, actc_pipe_schedule schedule)
{
    if (!p || !t) return actc_set_error(ACTC_ERR_INVALID, "actc_pipe_attach: NULL pipeline or trainer");
    int check[2] = {p->stages, (int)schedule};
    actc_status s = actc_dist_same(p->pp, check, sizeof check, "the pipeline's stages and schedule");
    actc_tensor **params;
    const int np = actc_model_params(actc_trainer_model(t), &params);
    if (s == ACTC_OK) s = find_shared(p, params, np);
    if (s != ACTC_OK) return s;
    actc_trainer_pipe tp = {.stage = p->stage, .stages = p->stages, .schedule = schedule, .start = msg_start,
                            .wait = msg_wait, .sum = stage_sum, .shared = p->shared, .n_shared = p->n_shared,
                            .shared_counted = p->stage == p->stages - 1, .share = share_grad, .user = p};
    if ((s = actc_trainer_set_pipe(t, &tp)) != ACTC_OK) return s;
    p->t = t;
    return ACTC_OK;
}

void actc_pipe_free(actc_pipe *p)
{
    if (!p) return;
    if (p->t) actc_trainer_set_pipe(p->t, NULL);
    actc_dist_free(p->dp);
    actc_dist_free(p->pp);
    free(p->shared);
    free(p);
}
