/* Random projections P (n x rank) for transforms that save x P instead of x
 * and for low-rank gradients F P^T.  P is never kept: each call builds it
 * from (key, element index) with the counter-based RNG, so forward,
 * backward and the optimizer see the same matrix whatever the thread count,
 * and its n x rank floats are SCRATCH for one product only.  Both kinds
 * have E[P P^T] = I (entries of variance 1/rank). */
#include "core.h"
#include <math.h>

actc_status actc__projection_check(const char *what, const actc_projection *p)
{
    if (!p) return actc_set_error(ACTC_ERR_INVALID, "%s: NULL projection", what);
    if (p->n < 1 || p->rank < 1)
        return actc_set_error(ACTC_ERR_INVALID, "%s: projection of width %d to rank %d (both must be >= 1)", what,
                              p->n, p->rank);
    if (p->kind != ACTC_PROJ_GAUSS && p->kind != ACTC_PROJ_SPARSE)
        return actc_set_error(ACTC_ERR_INVALID, "%s: unknown projection kind %d", what, p->kind);
    if (p->kind == ACTC_PROJ_SPARSE && !(p->density > 0.0f && p->density <= 1.0f))
        return actc_set_error(ACTC_ERR_INVALID, "%s: sparse projection of density %g (must be in (0, 1])", what,
                              (double)p->density);
    if (!isfinite(p->scale) || p->scale < 0.0f)
        return actc_set_error(ACTC_ERR_INVALID, "%s: projection step scale %g (must be finite and >= 0)", what,
                              (double)p->scale);
    return ACTC_OK;
}

int actc__projection_same(const actc_projection *a, const actc_projection *b)
{
    /* age is when P started, not what P is: micro-batches of one update that
     * count steps apart still project alike. */
    return a->n == b->n && a->rank == b->rank && a->key == b->key && a->kind == b->kind &&
           a->density == b->density && a->scale == b->scale && a->reset_state == b->reset_state;
}

/* Entries 4 blk .. 4 blk + 3 of P from one Philox block: for the Gaussian
 * kind two Box-Muller pairs (cosine and sine of each), for the sparse one
 * four uniforms.  Building P is on every projected layer's forward and
 * update, so one counter evaluation serves four entries. */
static void fill_block(const actc_projection *p, uint64_t blk, float g, float out[4])
{
    uint32_t r[4];
    actc_philox(p->key ^ 0x50524F4A4543ULL, blk, r);
    if (p->kind == ACTC_PROJ_SPARSE) {
        const float half = 0.5f * p->density;
        for (int j = 0; j < 4; j++) {
            const float u = (float)(r[j] >> 8) * (1.0f / 16777216.0f);
            out[j] = u < half ? -g : u >= 1.0f - half ? g : 0.0f;
        }
        return;
    }
    for (int j = 0; j < 2; j++) {
        const double u1 = ((double)r[2 * j] + 1.0) * (1.0 / 4294967296.0); /* (0, 1] */
        const float a = 6.2831853f * (float)r[2 * j + 1] * (1.0f / 4294967296.0f);
        const float rad = g * (float)sqrt(-2.0 * log(u1));
        out[2 * j] = rad * cosf(a);
        out[2 * j + 1] = rad * sinf(a);
    }
}

void actc__projection_fill(const actc_projection *p, float *P)
{
    const size_t nn = (size_t)p->n * (size_t)p->rank;
    const long blocks = (long)((nn + 3) / 4);
    /* Gaussian: N(0, 1/rank); sparse: +-1/sqrt(rank density) with
     * probability density/2 each, so the variance is 1/rank too. */
    const float g = (float)(1.0 / sqrt((double)p->rank * (p->kind == ACTC_PROJ_SPARSE ? (double)p->density : 1.0)));
#pragma omp parallel for schedule(static) if (nn > 65536)
    for (long b = 0; b < blocks; b++) {
        float v[4];
        fill_block(p, (uint64_t)b, g, v);
        const size_t i0 = (size_t)b * 4, k = nn - i0 < 4 ? nn - i0 : 4;
        for (size_t j = 0; j < k; j++) P[i0 + j] = v[j];
    }
}

/* Check the arguments, build P in SCRATCH memory for the one product
 * (back: out[rows x n] += alpha in P^T, else out[rows x rank] = in P) and
 * free it. */
static actc_status product(const char *what, const actc_projection *p, const float *in, int rows, float alpha,
                           float *out, int back)
{
    actc_status s = actc__projection_check(what, p);
    if (s != ACTC_OK) return s;
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
