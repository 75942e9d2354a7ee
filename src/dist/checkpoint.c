/* Checkpoints of a data-parallel run.  The replicas' weights and optimizer
 * state are identical, so rank 0's file holds them; a policy that learns
 * from the rows it sees (actc_ctx_policy_learns: ActNN's adaptive levels,
 * GACT) learns on each rank from that rank's share, so the ranks' states
 * differ, and rank 0 writes the others' beside its own.  A resume on as
 * many ranks gives each rank back its own state: the run continues bit for
 * bit.  On another number of ranks every rank continues from rank 0's. */
#include "dist.h"
#include "../train/train.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

actc_status actc_dist_save(actc_dist *d, const char *path)
{
    if (!d || !d->t) return actc_set_error(ACTC_ERR_INVALID, "actc_dist_save: the handle has no trainer attached");
    actc_trainer *t = d->t;
    if (d->size == 1 || !actc_ctx_policy_learns(actc_trainer_ctx(t)))
        return d->rank == 0 ? actc_trainer_save(t, path) : ACTC_OK;
    /* A rank that fails here returns its error before the next collective;
     * as after a failed step, the program must then end the job (the
     * others wait for it). */
    uint8_t *mine = NULL, *all = NULL, **state = NULL;
    size_t len = 0, *lens = NULL;
    unsigned long long l, *ls = NULL;
    int *cnt = NULL, *off = NULL;
    actc_status s = actc__trainer_learnt_state(t, &mine, &len);
    if (s == ACTC_OK && len > INT_MAX) s = actc_set_error(ACTC_ERR_COMM, "a policy state of %zu bytes", len);
    if (s != ACTC_OK) goto out;
    l = len;
    const size_t P = (size_t)d->size;
    if (d->rank == 0 && (!(ls = calloc(P, sizeof *ls)) || !(cnt = calloc(P, sizeof *cnt)) ||
                         !(off = calloc(P, sizeof *off)) || !(state = calloc(P, sizeof *state)) ||
                         !(lens = calloc(P, sizeof *lens)))) {
        s = actc_set_error(ACTC_ERR_OOM, "out of memory gathering the ranks' policy states");
        goto out;
    }
    MPI_Request req;
    int e = MPI_Igather(&l, 1, MPI_UNSIGNED_LONG_LONG, ls, 1, MPI_UNSIGNED_LONG_LONG, 0, d->comm, &req);
    s = e != MPI_SUCCESS ? actc__mpi_error(e, "MPI_Igather of the policy states' lengths")
                         : actc__dist_wait(d, &req, "the gather of the policy states");
    if (s != ACTC_OK) goto out;
    if (d->rank == 0) {
        size_t total = 0;
        for (size_t r = 0; r < P; r++) {
            off[r] = (int)total;
            cnt[r] = (int)ls[r];
            total += ls[r];
            if (total > INT_MAX) {
                s = actc_set_error(ACTC_ERR_COMM, "the ranks' policy states take over 2 GiB");
                goto out;
            }
        }
        if (!(all = malloc(total ? total : 1))) {
            s = actc_set_error(ACTC_ERR_OOM, "out of memory gathering the ranks' policy states");
            goto out;
        }
    }
    e = MPI_Igatherv(mine, (int)l, MPI_BYTE, all, cnt, off, MPI_BYTE, 0, d->comm, &req);
    s = e != MPI_SUCCESS ? actc__mpi_error(e, "MPI_Igatherv of the policy states")
                         : actc__dist_wait(d, &req, "the gather of the policy states");
    if (s != ACTC_OK) goto out;
    if (d->rank == 0) {
        for (size_t r = 1; r < P; r++) {
            state[r] = all + off[r];
            lens[r] = ls[r];
        }
        s = actc__trainer_save_ranks(t, path, d->size, (const uint8_t *const *)state, lens);
    }
out:
    free(mine);
    free(all);
    free(ls);
    free(cnt);
    free(off);
    free(state);
    free(lens);
    return s;
}

actc_status actc_dist_resume(actc_dist *d, const char *path, int *applied)
{
    if (applied) *applied = 0;
    if (!d || !d->t || !path)
        return actc_set_error(ACTC_ERR_INVALID, "actc_dist_resume: no trainer attached, or no path");
    int ok = 0;
    actc_status s = actc__trainer_load_rank(d->t, path, d->rank, d->size, &ok);
    if (applied) *applied = ok;
    return s;
}
