/* The communicator: MPI set up (or borrowed), rank and size, and the small
 * collectives the trainer and the command need (sums of statistics, the
 * check that every rank was given the same settings). */
#include "dist.h"
#include <stdlib.h>
#include <string.h>

actc_status actc__mpi_error(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    return actc_set_error(ACTC_ERR_COMM, "%s: %s", what, msg);
}

int actc_dist_available(void) { return 1; }

actc_status actc_dist_new(const void *comm, actc_dist **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_dist_new: out is NULL");
    *out = NULL;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return actc_set_error(ACTC_ERR_STATE, "actc_dist_new: MPI has been finalised");
    int own = 0;
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return actc__mpi_error(rc, "MPI_Init_thread");
        own = 1;
        if (provided < MPI_THREAD_FUNNELED) {
            MPI_Finalize();
            return actc_set_error(ACTC_ERR_COMM, "this MPI offers no thread support (MPI_THREAD_FUNNELED), which actc's "
                                                 "OpenMP threads need");
        }
    }
    actc_dist *d = calloc(1, sizeof *d);
    if (!d) {
        if (own) MPI_Finalize();
        return actc_set_error(ACTC_ERR_OOM, "out of memory for the communicator");
    }
    d->own_mpi = own;
    int rc = MPI_Comm_dup(comm ? *(const MPI_Comm *)comm : MPI_COMM_WORLD, &d->comm);
    if (rc != MPI_SUCCESS) {
        actc_status s = actc__mpi_error(rc, "MPI_Comm_dup");
        d->comm = d->gather = MPI_COMM_NULL;
        actc_dist_free(d);
        return s;
    }
    d->gather = d->ping = MPI_COMM_NULL;
    if ((rc = MPI_Comm_dup(d->comm, &d->gather)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(d->comm, &d->ping)) != MPI_SUCCESS) {
        actc_status s = actc__mpi_error(rc, "MPI_Comm_dup");
        actc_dist_free(d);
        return s;
    }
    d->timeout_s = ACTC_DIST_TIMEOUT_S;
    /* Errors come back as codes (the default handler would abort with
     * MPI's message only). */
    MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(d->gather, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(d->ping, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->size);
    d->o = actc_dist_default_opts();
    d->st.ranks = d->size;
    d->st.rank = d->rank;
    *out = d;
    return ACTC_OK;
}

int actc_dist_rank(const actc_dist *d) { return d ? d->rank : 0; }
int actc_dist_size(const actc_dist *d) { return d ? d->size : 1; }

actc_status actc_dist_same(actc_dist *d, const void *data, size_t n, const char *what)
{
    if (!d || (!data && n)) return actc_set_error(ACTC_ERR_INVALID, "actc_dist_same: NULL argument");
    /* FNV-1a of the bytes and their length; rank 0's goes to all, and an
     * OR over the ranks tells every rank whether any differs. */
    const uint64_t h = actc_hash_bytes(ACTC_HASH_START ^ n, data, n);
    uint64_t h0 = h;
    MPI_Request req;
    int rc = MPI_Ibcast(&h0, 1, MPI_UINT64_T, 0, d->comm, &req);
    actc_status s = rc != MPI_SUCCESS ? actc__mpi_error(rc, "MPI_Ibcast") : actc__dist_wait(d, &req, "the check of the ranks' settings");
    if (s != ACTC_OK) return s;
    int differs = h0 != h, any = 0, first = differs ? d->rank : d->size;
    rc = MPI_Iallreduce(&differs, &any, 1, MPI_INT, MPI_LOR, d->comm, &req);
    s = rc != MPI_SUCCESS ? actc__mpi_error(rc, "MPI_Iallreduce") : actc__dist_wait(d, &req, "the check of the ranks' settings");
    if (s != ACTC_OK) return s;
    if (!any) return ACTC_OK;
    int who = first;
    rc = MPI_Iallreduce(&first, &who, 1, MPI_INT, MPI_MIN, d->comm, &req);
    s = rc != MPI_SUCCESS ? actc__mpi_error(rc, "MPI_Iallreduce") : actc__dist_wait(d, &req, "the check of the ranks' settings");
    if (s != ACTC_OK) return s;
    return actc_set_error(ACTC_ERR_COMM, "the ranks disagree on %s: rank %d's differs from rank 0's%s",
                          what ? what : "their data", who, differs ? " (this rank's too)" : "");
}

/* The trainer's group sum. */
static actc_status sum_doubles(double *v, int n, void *user)
{
    actc_dist *d = user;
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, d->comm, &req);
    return rc != MPI_SUCCESS ? actc__mpi_error(rc, "MPI_Iallreduce of the step's statistics")
                             : actc__dist_wait(d, &req, "the sum of the step's statistics");
}

actc_status actc__dist_set_group(actc_dist *d, actc_trainer *t)
{
    actc_trainer_group g = {d->rank, d->size, sum_doubles, d};
    return actc_trainer_set_group(t, &g);
}

actc_status actc_dist_allreduce(actc_dist *d, float *x, size_t n, int bits)
{
    if (!d || (!x && n)) return actc_set_error(ACTC_ERR_INVALID, "actc_dist_allreduce: NULL argument");
    actc__allreduce a;
    actc_status s = actc__allreduce_start(d, &a, bits, x, n, NULL, NULL);
    if (s == ACTC_OK) s = actc__allreduce_progress(d, &a, 1, 1);
    actc__allreduce_release(&a);
    return s;
}

void actc_dist_get_stats(const actc_dist *d, actc_dist_stats *s)
{
    if (!s) return;
    memset(s, 0, sizeof *s);
    if (d) *s = d->st;
}

void actc_dist_free(actc_dist *d)
{
    if (!d) return;
    actc_dist_detach(d);
    /* Exchanges left in flight by a failed step hold the communicators:
     * freeing them or finalising could wait forever (the job is ending). */
    if (!d->broken) {
        if (d->gather != MPI_COMM_NULL) MPI_Comm_free(&d->gather);
        if (d->ping != MPI_COMM_NULL) MPI_Comm_free(&d->ping);
        if (d->comm != MPI_COMM_NULL) MPI_Comm_free(&d->comm);
        if (d->own_mpi) MPI_Finalize();
    }
    free(d);
}
