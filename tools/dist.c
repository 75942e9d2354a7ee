/* The command's side of data parallelism: a process that mpirun started
 * joins the job, only rank 0 prints, and a rank that fails ends the job
 * (MPI_Abort), so that no rank waits forever for it.  The training itself
 * is the library's (actc_dist_attach). */
#include "cli.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef ACTC_HAVE_MPI
#include <mpi.h>
#endif

int cli_dist_begin(cli_dist *c, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->size = 1;
    const int launched = actc_dist_launched();
    if (!launched) return 0;
    if (!actc_dist_available()) {
        fprintf(stderr, "error: started by mpirun (%d processes), but this actc was built without MPI: install "
                        "libopenmpi-dev and build again\n", launched);
        return 2;
    }
    if (actc_dist_new(NULL, &c->d) != ACTC_OK) return fail("MPI");
    c->rank = actc_dist_rank(c->d);
    c->size = actc_dist_size(c->d);
    /* Every rank must run the same command (the program's path aside):
     * a rank given other flags is stopped here, on every rank. */
    size_t n = 0;
    for (int i = 1; i < argc; i++) n += strlen(argv[i]) + 1;
    char *all = malloc(n + 1), *p = all;
    if (!all) return fprintf(stderr, "error: out of memory\n"), 1;
    for (int i = 1; i < argc; i++) { /* not argv[0]: hosts may keep actc elsewhere */
        const size_t len = strlen(argv[i]) + 1; /* with its NUL: "a b" differs from "a" "b" */
        memcpy(p, argv[i], len);
        p += len;
    }
    actc_status s = actc_dist_same(c->d, all, n, "the command line");
    free(all);
    if (s != ACTC_OK) return fail("mpirun");
    /* Only rank 0 speaks; the others keep stderr for their errors. */
    if (c->rank > 0 && !freopen("/dev/null", "w", stdout)) return fprintf(stderr, "error: /dev/null\n"), 1;
    return 0;
}

int cli_dist_same_file(cli_dist *c, const char *path, const char *what)
{
    if (!c->d) return 0;
    /* FNV-1a of the file's bytes, then the ranks compare the hashes. */
    uint64_t h = ACTC_HASH_START;
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "error: %s: cannot open %s\n", what, path), 1;
    unsigned char buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0)
        h = actc_hash_bytes(h, buf, k);
    const int bad = ferror(f);
    fclose(f);
    if (bad) return fprintf(stderr, "error: %s: cannot read %s\n", what, path), 1;
    if (actc_dist_same(c->d, &h, sizeof h, what) != ACTC_OK) return fail(what);
    return 0;
}

int cli_dist_threads(const cli_dist *c)
{
    if (c->size <= 1) return 0;
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const long cores = sysconf(_SC_NPROCESSORS_ONLN), per = local && atoi(local) > 0 ? atoi(local) : 1;
    return cores / per > 1 ? (int)(cores / per) : 1;
}

int cli_dist_end(cli_dist *c, int rc)
{
    if (c->d && rc != 0 && c->size > 1) {
        fprintf(stderr, "actc: rank %d of %d failed (exit status %d): ending the job\n", c->rank, c->size, rc);
        fflush(stdout);
        fflush(stderr);
#ifdef ACTC_HAVE_MPI
        MPI_Abort(MPI_COMM_WORLD, rc);
#endif
    }
    actc_dist_free(c->d);
    c->d = NULL;
    return rc;
}
