/* Random projections P (n x rank, entries N(0, 1/rank)) for transforms that
 * save x P instead of x and for low-rank gradients F P^T.  P is never kept:
 * each call builds it from (key, element index) with the counter-based RNG,
 * so forward, backward and the optimizer see the same matrix whatever the
 * thread count, and its n x rank floats are SCRATCH for one product only. */
#include "core.h"
#include <math.h>

void actc__projection_fill(const actc_projection *p, float *P)
{
    const float scale = (float)(1.0 / sqrt((double)p->rank));
    const long nn = (long)((size_t)p->n * (size_t)p->rank);
#pragma omp parallel for schedule(static) if (nn > 65536)
    for (long i = 0; i < nn; i++) P[i] = scale * actc_rand_normal(p->key, (uint64_t)i);
}

/* Check the arguments, build P in SCRATCH memory for the one product
 * (back: out[rows x n] += alpha in P^T, else out[rows x rank] = in P) and
 * free it. */
static actc_status product(const char *what, const actc_projection *p, const float *in, int rows, float alpha,
                           float *out, int back)
{
    if (!p) return actc_set_error(ACTC_ERR_INVALID, "%s: NULL projection", what);
    if (p->n < 1 || p->rank < 1)
        return actc_set_error(ACTC_ERR_INVALID, "%s: projection of width %d to rank %d (both must be >= 1)", what,
                              p->n, p->rank);
    if (rows < 0 || (rows > 0 && (!in || !out)))
        return actc_set_error(ACTC_ERR_INVALID, "%s: %d rows, NULL input or output", what, rows);
    if (rows == 0) return ACTC_OK;
    float *P = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)p->n * (size_t)p->rank * sizeof *P);
    if (!P) return actc_last_status();
    actc__projection_fill(p, P);
    if (back) actc__sgemm(0, 1, rows, p->n, p->rank, alpha, in, p->rank, P, p->rank, 1.0f, out, p->n);
    else actc__sgemm(0, 0, rows, p->rank, p->n, 1.0f, in, p->n, P, p->rank, 0.0f, out, p->rank);
    actc_mem_free(P);
    return ACTC_OK;
}

actc_status actc_project(const actc_projection *p, const float *x, int rows, float *z)
{
    return product("actc_project", p, x, rows, 1.0f, z, 0);
}

actc_status actc_project_back(const actc_projection *p, const float *u, int rows, float alpha, float *out)
{
    return product("actc_project_back", p, u, rows, alpha, out, 1);
}
