/* The data-parallel API of a library built without MPI: every call but
 * the two questions fails and says how to get it. */
#include "actc.h"
#include <stdlib.h>
#include <string.h>

static actc_status no_mpi(const char *fn)
{
    return actc_set_error(ACTC_ERR_STATE, "%s: this actc was built without MPI (install Open MPI, e.g. Debian's "
                                          "libopenmpi-dev, and configure again)", fn);
}

int actc_dist_available(void) { return 0; }
actc_status actc_dist_new(const void *comm, actc_dist **out)
{
    (void)comm;
    if (out) *out = NULL;
    return no_mpi("actc_dist_new");
}
void actc_dist_free(actc_dist *d) { (void)d; }
void actc_dist_detach(actc_dist *d) { (void)d; }
int actc_dist_rank(const actc_dist *d) { return (void)d, 0; }
int actc_dist_size(const actc_dist *d) { return (void)d, 1; }
actc_status actc_dist_attach(actc_dist *d, actc_trainer *t, const actc_dist_opts *o)
{
    (void)d, (void)t, (void)o;
    return no_mpi("actc_dist_attach");
}
actc_status actc_dist_same(actc_dist *d, const void *data, size_t n, const char *what)
{
    (void)d, (void)data, (void)n, (void)what;
    return no_mpi("actc_dist_same");
}
actc_status actc_dist_allreduce(actc_dist *d, float *x, size_t n, int bits)
{
    (void)d, (void)x, (void)n, (void)bits;
    return no_mpi("actc_dist_allreduce");
}
void actc_dist_get_stats(const actc_dist *d, actc_dist_stats *s)
{
    (void)d;
    if (s) memset(s, 0, sizeof *s);
}
actc_status actc_dist_save(actc_dist *d, const char *path)
{
    (void)d, (void)path;
    return no_mpi("actc_dist_save");
}
actc_status actc_dist_resume(actc_dist *d, const char *path, int *applied)
{
    (void)d, (void)path;
    if (applied) *applied = 0;
    return no_mpi("actc_dist_resume");
}
void actc_dist_set_timeout(actc_dist *d, double seconds) { (void)d, (void)seconds; }
actc_status actc_pipe_new(actc_dist *world, int stages, actc_pipe **out)
{
    (void)world, (void)stages;
    if (out) *out = NULL;
    return no_mpi("actc_pipe_new");
}
void actc_pipe_free(actc_pipe *p) { (void)p; }
int actc_pipe_stage(const actc_pipe *p) { return (void)p, 0; }
int actc_pipe_stages(const actc_pipe *p) { return (void)p, 1; }
actc_dist *actc_pipe_replicas(actc_pipe *p) { return (void)p, NULL; }
actc_status actc_pipe_save(actc_pipe *p, const char *path)
{
    (void)p, (void)path;
    return no_mpi("actc_pipe_save");
}
actc_status actc_pipe_resume(actc_pipe *p, const char *path, int *applied)
{
    (void)p, (void)path;
    if (applied) *applied = 0;
    return no_mpi("actc_pipe_resume");
}
actc_status actc_pipe_sum(actc_pipe *p, double *v, int n)
{
    (void)p, (void)v, (void)n;
    return no_mpi("actc_pipe_sum");
}
actc_status actc_pipe_attach(actc_pipe *p, actc_trainer *t, actc_pipe_schedule schedule)
{
    (void)p, (void)t, (void)schedule;
    return no_mpi("actc_pipe_attach");
}
