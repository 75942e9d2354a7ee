/* Checkpoints of a pipeline: one file of the whole model, as one process
 * writes it.  Every stage sends stage 0 its tensors (model state and
 * optimizer state, by name) and its policy's learnt state; stage 0 puts
 * them in a model and optimizer of the whole shape and writes the file
 * (STAGES holds stages 1 .. P-1's learnt states).  A part loads its own
 * tensors from it by name, so a run with another number of stages, or one
 * process, loads it too; with as many stages each takes back its own learnt
 * state and the run goes on bit for bit.  The replicas of a stage hold the
 * same weights: replica 0's pipeline writes. */
#include "dist.h"
#include "../train/train.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define TAG_CKPT 100 /* + the sending stage; on the handle's second communicator */

typedef struct {
    char name[48];
    uint64_t numel;
} wire_head;

/* Blocking send or receive of n bytes with stage peer. */
static actc_status xfer(actc_pipe *p, int send, void *buf, size_t n, int peer, int tag)
{
    if (n > INT_MAX) return actc_set_error(ACTC_ERR_COMM, "a checkpoint message of %zu bytes", n);
    MPI_Request req;
    int rc = send ? MPI_Isend(buf, (int)n, MPI_BYTE, peer, tag, p->pp->gather, &req)
                  : MPI_Irecv(buf, (int)n, MPI_BYTE, peer, tag, p->pp->gather, &req);
    return rc != MPI_SUCCESS ? actc__mpi_error(rc, "a pipeline checkpoint's exchange")
                             : actc__dist_wait(p->pp, &req, "the stages' tensors for the checkpoint");
}

/* The tensors a stage sends: its model's state, then its optimizer's. */
static int stage_tensors(actc_trainer *t, actc_tensor ***ms, actc_tensor ***os, int *no)
{
    const int nm = actc_model_state(actc_trainer_model(t), ms);
    *no = actc_optim_state(actc_trainer_optim(t), os);
    return nm;
}

/* A stage > 0: everything to stage 0. */
static actc_status send_stage(actc_pipe *p, actc_trainer *t)
{
    actc_tensor **ms, **os;
    int no;
    const int nm = stage_tensors(t, &ms, &os, &no);
    if (no < 0) return actc_last_status();
    uint8_t *blob = NULL;
    size_t len = 0;
    actc_status s = actc__trainer_learnt_state(t, &blob, &len);
    uint64_t head[2] = {(uint64_t)(nm + no), len};
    const int tag = TAG_CKPT + p->stage;
    if (s == ACTC_OK) s = xfer(p, 1, head, sizeof head, 0, tag);
    for (int i = 0; s == ACTC_OK && i < nm + no; i++) {
        actc_tensor *x = i < nm ? ms[i] : os[i - nm];
        wire_head h;
        memset(&h, 0, sizeof h);
        snprintf(h.name, sizeof h.name, "%s", x->name);
        h.numel = x->numel;
        s = xfer(p, 1, &h, sizeof h, 0, tag);
        if (s == ACTC_OK) s = xfer(p, 1, x->data, x->numel * sizeof(float), 0, tag);
    }
    if (s == ACTC_OK && len) s = xfer(p, 1, blob, len, 0, tag);
    free(blob);
    return s;
}

/* Copy src's values into the whole model's or optimizer's tensor of the
 * same name, counting each one filled once. */
static actc_status fill(actc_tensor **wm, int nwm, actc_tensor **wo, int nwo, uint8_t *done, const char *name,
                        const float *src, size_t numel)
{
    int k = 0;
    while (k < nwm + nwo && strcmp((k < nwm ? wm[k] : wo[k - nwm])->name, name)) k++;
    if (k == nwm + nwo) return actc_set_error(ACTC_ERR_STATE, "a stage holds tensor '%s', which the whole model lacks", name);
    actc_tensor *d = k < nwm ? wm[k] : wo[k - nwm];
    if (d->numel != numel)
        return actc_set_error(ACTC_ERR_STATE, "tensor '%s': %zu values on its stage, %zu in the whole model", name, numel,
                              d->numel);
    if (!done[k]) memcpy(d->data, src, numel * sizeof *src); /* a tied copy: the same values */
    done[k] = 1;
    return ACTC_OK;
}

actc_status actc_pipe_save(actc_pipe *p, const char *path)
{
    if (!p || !p->t || !path) return actc_set_error(ACTC_ERR_INVALID, "actc_pipe_save: no trainer attached, or no path");
    if (p->dp && actc_dist_rank(p->dp) != 0) return ACTC_OK;
    actc_trainer *t = p->t;
    if (p->stage != 0) return send_stage(p, t);
    /* Stage 0: the whole model and optimizer, filled from every stage. */
    actc_model_opts mo = *actc_model_get_opts(actc_trainer_model(t));
    mo.first_block = mo.n_blocks = 0;
    actc_model *wm = NULL;
    actc_optim *wo = NULL;
    uint8_t **state = calloc((size_t)p->stages, sizeof *state), *done = NULL;
    size_t *lens = calloc((size_t)p->stages, sizeof *lens);
    actc_status s = state && lens ? ACTC_OK : actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline's checkpoint");
    if (s == ACTC_OK) s = actc_model_create(actc_model_name(actc_trainer_model(t)), &mo, &wm);
    actc_tensor **wms = NULL, **wos = NULL, **wps;
    int nwm = 0, nwo = 0;
    if (s == ACTC_OK) {
        const int np = actc_model_params(wm, &wps);
        nwm = actc_model_state(wm, &wms);
        if (!(wo = actc__trainer_make_optim(actc_trainer_get_opts(t), wps, np)) || (nwo = actc_optim_state(wo, &wos)) < 0)
            s = actc_last_status();
    }
    if (s == ACTC_OK && !(done = calloc((size_t)(nwm + nwo) + 1, 1)))
        s = actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline's checkpoint");
    /* Its own tensors and state. */
    actc_tensor **ms, **os;
    int no;
    const int nm = stage_tensors(t, &ms, &os, &no);
    if (s == ACTC_OK && no < 0) s = actc_last_status();
    for (int i = 0; s == ACTC_OK && i < nm + no; i++) {
        const actc_tensor *x = i < nm ? ms[i] : os[i - nm];
        s = fill(wms, nwm, wos, nwo, done, x->name, x->data, x->numel);
    }
    if (s == ACTC_OK) s = actc__trainer_learnt_state(t, &state[0], &lens[0]);
    /* Every other stage's, in order (each sends all of it: a failure here
     * ends the job, as a failed step does). */
    float *buf = NULL;
    size_t cap = 0;
    for (int k = 1; s == ACTC_OK && k < p->stages; k++) {
        uint64_t head[2];
        const int tag = TAG_CKPT + k;
        s = xfer(p, 0, head, sizeof head, k, tag);
        for (uint64_t i = 0; s == ACTC_OK && i < head[0]; i++) {
            wire_head h;
            s = xfer(p, 0, &h, sizeof h, k, tag);
            h.name[sizeof h.name - 1] = '\0';
            if (s == ACTC_OK && h.numel > cap) {
                float *nb = realloc(buf, (size_t)h.numel * sizeof *nb);
                if (!nb) s = actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline's checkpoint");
                else buf = nb, cap = (size_t)h.numel;
            }
            if (s == ACTC_OK) s = xfer(p, 0, buf, (size_t)h.numel * sizeof *buf, k, tag);
            if (s == ACTC_OK) s = fill(wms, nwm, wos, nwo, done, h.name, buf, (size_t)h.numel);
        }
        if (s == ACTC_OK && head[1] && !(state[k] = malloc((size_t)head[1])))
            s = actc_set_error(ACTC_ERR_OOM, "out of memory for a pipeline's checkpoint");
        lens[k] = (size_t)head[1];
        if (s == ACTC_OK && head[1]) s = xfer(p, 0, state[k], lens[k], k, tag);
    }
    free(buf);
    for (int k = 0; s == ACTC_OK && k < nwm + nwo; k++)
        if (!done[k])
            s = actc_set_error(ACTC_ERR_STATE, "no stage holds tensor '%s' of the whole model",
                               (k < nwm ? wms[k] : wos[k - nwm])->name);
    if (s == ACTC_OK) {
        actc_optim_set_steps(wo, actc_optim_steps(actc_trainer_optim(t)));
        s = actc__trainer_save_whole(t, path, wm, wo, p->stages, (const uint8_t *const *)state, lens);
    }
    for (int k = 0; state && k < p->stages; k++) free(state[k]);
    free(state);
    free(lens);
    free(done);
    actc_optim_free(wo);
    actc_model_free(wm);
    return s;
}

actc_status actc_pipe_resume(actc_pipe *p, const char *path, int *applied)
{
    if (applied) *applied = 0;
    if (!p || !p->t || !path || !applied)
        return actc_set_error(ACTC_ERR_INVALID, "actc_pipe_resume: no trainer attached, or a NULL argument");
    return actc__trainer_load_state(p->t, path, 1, p->stage, p->stages, applied);
}
