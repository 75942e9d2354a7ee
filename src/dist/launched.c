/* Whether a launcher started this process, from its environment: needs no
 * MPI, so a build without it can still say why `mpirun actc` cannot work. */
#include "actc.h"
#include <stdlib.h>

int actc_dist_launched(void)
{
    /* Open MPI's mpirun, then MPICH's hydra and other PMI launchers. */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 0;
}
