/* Waiting for an exchange, with a limit.  MPI_Wait waits forever, so one
 * rank stopped (SIGSTOP, a debugger, a swapped-out host) would hang the
 * job: every wait here tests its request instead, answers the other ranks'
 * pings meanwhile, and after the handle's timeout (actc_dist_set_timeout)
 * pings every rank on a communicator of its own.  The ranks that do not
 * answer within PING_S are the ones named; the caller gets ACTC_ERR_COMM
 * and must end the job (the exchange stays in flight: the handle is
 * broken).  A live rank answers from any wait, and every rank spends its
 * time between steps' exchanges in one, or computing: a rank that computes
 * for longer than the timeout is taken for a stopped one, so the timeout
 * must exceed a step (the command's default is 10 minutes). */
#include "dist.h"
#include "../core/core.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_PING 1
#define TAG_PONG 2
#define PING_S 5.0

/* Answer every ping that has arrived (a pong carries nothing). */
static void answer_pings(actc_dist *d)
{
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_PING, d->ping, &flag, &st) != MPI_SUCCESS || !flag) return;
        char b;
        MPI_Recv(&b, 1, MPI_CHAR, st.MPI_SOURCE, TAG_PING, d->ping, MPI_STATUS_IGNORE);
        MPI_Send(&b, 1, MPI_CHAR, st.MPI_SOURCE, TAG_PONG, d->ping); /* eager: does not wait */
    }
}

static void pause_briefly(double waited)
{
    /* Spin for the first millisecond (most exchanges end within it), then
     * sleep 50 us between tests: negligible against a step, and the core
     * stays free for the rank's other threads. */
    if (waited < 1e-3) return;
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

/* The timeout passed: which ranks answer?  The error names the others. */
static actc_status stalled(actc_dist *d, const char *what, double waited)
{
    const int P = d->size;
    char *answered = calloc((size_t)P, 1);
    MPI_Request *req = calloc((size_t)P, sizeof *req);
    char *pong = calloc((size_t)P, 1);
    static char ping; /* outlives the sends to silent ranks, never completed */
    d->broken = 1; /* the exchange cannot be cancelled */
    if (!answered || !req || !pong) {
        free(answered), free(req), free(pong);
        return actc_set_error(ACTC_ERR_COMM, "%s did not complete in %.0f s: a rank stopped answering", what, waited);
    }
    for (int r = 0; r < P; r++) {
        req[r] = MPI_REQUEST_NULL;
        if (r == d->rank) continue;
        MPI_Request sent; /* a stopped rank never takes it: not waited for */
        MPI_Isend(&ping, 1, MPI_CHAR, r, TAG_PING, d->ping, &sent);
        MPI_Request_free(&sent);
        MPI_Irecv(&pong[r], 1, MPI_CHAR, r, TAG_PONG, d->ping, &req[r]);
    }
    answered[d->rank] = 1;
    const double t0 = actc__now();
    for (int left = P - 1; left > 0 && actc__now() - t0 < PING_S;) {
        answer_pings(d);
        for (int r = 0; r < P; r++) {
            int done = 0;
            if (answered[r] || MPI_Test(&req[r], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) continue;
            answered[r] = 1;
            left--;
        }
        pause_briefly(1);
    }
    char names[160] = "";
    int silent = 0;
    for (int r = 0; r < P; r++) {
        if (answered[r]) continue;
        size_t o = strlen(names);
        if (o < sizeof names - 16) snprintf(names + o, sizeof names - o, "%s%d", silent ? ", " : "", r);
        silent++;
        /* Its pong will not be read: the receive is withdrawn before pong
         * goes (a cancelled receive completes locally). */
        MPI_Cancel(&req[r]);
        MPI_Wait(&req[r], MPI_STATUS_IGNORE);
    }
    free(answered), free(req), free(pong);
    if (!silent)
        return actc_set_error(ACTC_ERR_COMM, "%s did not complete in %.0f s although every rank answers (ranks in "
                                             "different exchanges?); the job must end", what, waited);
    return actc_set_error(ACTC_ERR_COMM, "%s did not complete in %.0f s: rank%s %s did not answer (stopped or hung; "
                                         "--comm-timeout sets the limit); the job must end",
                          what, waited, silent > 1 ? "s" : "", names);
}

actc_status actc__dist_wait(actc_dist *d, MPI_Request *req, const char *what)
{
    const double t0 = actc__now();
    for (;;) {
        int done = 0;
        int e = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (e != MPI_SUCCESS) return actc__mpi_error(e, what);
        if (done) return ACTC_OK;
        answer_pings(d);
        const double waited = actc__now() - t0;
        if (d->timeout_s > 0 && waited > d->timeout_s) return stalled(d, what, waited);
        pause_briefly(waited);
    }
}

void actc_dist_set_timeout(actc_dist *d, double seconds)
{
    if (d) d->timeout_s = seconds > 0 ? seconds : 0;
}
