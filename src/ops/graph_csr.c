/* Sparse adjacency in CSR: construction from an edge list, transpose (with
 * the permutation backward passes read values through), GCN normalisation.
 *
 * Construction lists every candidate entry in a fixed order (edge e's entry
 * dst[e] <- src[e], then with symmetric its reverse, then with self_loops
 * i <- i for every node), buckets them by row keeping that order, sorts each
 * row by column (ties by order) and keeps the first of equal columns: so a
 * duplicate edge keeps the weight of its first occurrence, and an added
 * self-loop (weight 1) never replaces one the edge list gives.  The arrays
 * come from the accounting allocator (SCRATCH, like a data batch: a graph
 * is the run's data, and a budget covers it) and go with actc_csr_free. */
#include "graph.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void actc_csr_free(actc_csr *a)
{
    if (!a) return;
    actc_mem_free(a->rowptr);
    actc_mem_free(a->col);
    actc_mem_free(a->val);
    actc_mem_free(a->perm);
    memset(a, 0, sizeof *a);
}

static int cmp_u64(const void *p, const void *q)
{
    const uint64_t a = *(const uint64_t *)p, b = *(const uint64_t *)q;
    return (a > b) - (a < b);
}

actc_status actc_csr_from_edges(int n, int64_t m, const int32_t *src, const int32_t *dst, const float *w,
                                int symmetric, int self_loops, actc_csr *out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_csr_from_edges: out is NULL");
    memset(out, 0, sizeof *out);
    if (n < 1) return actc_set_error(ACTC_ERR_INVALID, "actc_csr_from_edges: n=%d nodes, need n >= 1", n);
    if (m < 0) return actc_set_error(ACTC_ERR_INVALID, "actc_csr_from_edges: m=%lld edges is negative", (long long)m);
    if (m > 0 && (!src || !dst))
        return actc_set_error(ACTC_ERR_INVALID, "actc_csr_from_edges: %s is NULL with m=%lld edges",
                              !src ? "src" : "dst", (long long)m);
    if (m > (INT64_MAX / 4))
        return actc_set_error(ACTC_ERR_INVALID, "actc_csr_from_edges: m=%lld edges is too many", (long long)m);
    for (int64_t e = 0; e < m; e++) {
        if (src[e] < 0 || src[e] >= n || dst[e] < 0 || dst[e] >= n)
            return actc_set_error(ACTC_ERR_INVALID,
                                  "actc_csr_from_edges: edge %lld (src %d -> dst %d) has an index outside [0, %d)",
                                  (long long)e, (int)src[e], (int)dst[e], n);
        if (w && !isfinite(w[e]))
            return actc_set_error(ACTC_ERR_INVALID, "actc_csr_from_edges: edge %lld (src %d -> dst %d) has weight %g",
                                  (long long)e, (int)src[e], (int)dst[e], (double)w[e]);
    }

    /* Candidates per row, in candidate order. */
    int64_t *start = actc_mem_calloc(ACTC_MEM_SCRATCH, ((size_t)n + 1) * sizeof *start);
    if (!start) return actc_set_error(ACTC_ERR_OOM, "actc_csr_from_edges: out of memory (n=%d)", n);
    int64_t total = 0;
    for (int64_t e = 0; e < m; e++) {
        start[dst[e] + 1]++;
        if (symmetric && src[e] != dst[e]) start[src[e] + 1]++;
    }
    if (self_loops)
        for (int i = 0; i < n; i++) start[i + 1]++;
    for (int i = 0; i < n; i++) start[i + 1] += start[i];
    total = start[n];

    /* key = column << 32 | position within the row (the candidate order),
     * so sorting a row's keys sorts by column with ties in order. */
    uint64_t *key = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)(total ? total : 1) * sizeof *key);
    float *cw = w ? actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)(total ? total : 1) * sizeof *cw) : NULL;
    int64_t *fill = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)n * sizeof *fill);
    if (!key || (w && !cw) || !fill) {
        actc_mem_free(start), actc_mem_free(key), actc_mem_free(cw), actc_mem_free(fill);
        return actc_set_error(ACTC_ERR_OOM, "actc_csr_from_edges: out of memory for %lld entries", (long long)total);
    }
    memcpy(fill, start, (size_t)n * sizeof *fill);
#define CSR_PUT(row, c, wt)                                                          \
    do {                                                                             \
        const int64_t p_ = fill[(row)]++;                                            \
        key[p_] = ((uint64_t)(uint32_t)(c) << 32) | (uint64_t)(p_ - start[(row)]);   \
        if (cw) cw[p_] = (wt);                                                       \
    } while (0)
    for (int64_t e = 0; e < m; e++) {
        const float we = w ? w[e] : 1.0f;
        CSR_PUT(dst[e], src[e], we);
        if (symmetric && src[e] != dst[e]) CSR_PUT(src[e], dst[e], we);
    }
    if (self_loops)
        for (int i = 0; i < n; i++) CSR_PUT(i, i, 1.0f);
#undef CSR_PUT
    actc_mem_free(fill);

    /* Sort each row, count distinct columns. */
    int64_t nnz = 0;
    for (int i = 0; i < n; i++) {
        const int64_t r0 = start[i], r1 = start[i + 1];
        if (r1 - r0 > 1) qsort(key + r0, (size_t)(r1 - r0), sizeof *key, cmp_u64);
        for (int64_t p = r0; p < r1; p++)
            if (p == r0 || (key[p] >> 32) != (key[p - 1] >> 32)) nnz++;
    }
    out->n = n;
    out->nnz = nnz;
    out->rowptr = actc_mem_alloc(ACTC_MEM_SCRATCH, ((size_t)n + 1) * sizeof *out->rowptr);
    out->col = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)(nnz ? nnz : 1) * sizeof *out->col);
    out->val = w ? actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)(nnz ? nnz : 1) * sizeof *out->val) : NULL;
    if (!out->rowptr || !out->col || (w && !out->val)) {
        actc_mem_free(start), actc_mem_free(key), actc_mem_free(cw);
        actc_csr_free(out);
        return actc_set_error(ACTC_ERR_OOM, "actc_csr_from_edges: out of memory for %lld entries", (long long)nnz);
    }
    int64_t k = 0;
    out->rowptr[0] = 0;
    for (int i = 0; i < n; i++) {
        const int64_t r0 = start[i], r1 = start[i + 1];
        for (int64_t p = r0; p < r1; p++) {
            if (p > r0 && (key[p] >> 32) == (key[p - 1] >> 32)) continue; /* a duplicate: the first one stays */
            out->col[k] = (int32_t)(key[p] >> 32);
            if (cw) out->val[k] = cw[r0 + (int64_t)(key[p] & 0xffffffffu)];
            k++;
        }
        out->rowptr[i + 1] = k;
    }
    actc_mem_free(start), actc_mem_free(key), actc_mem_free(cw);
    return ACTC_OK;
}

actc_status actc_csr_transpose(const actc_csr *a, actc_csr *out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_csr_transpose: out is NULL");
    memset(out, 0, sizeof *out);
    if (!actc__csr_ok("actc_csr_transpose", "a", a)) return ACTC_ERR_INVALID;
    const int n = a->n;
    const int64_t nnz = a->nnz;
    for (int i = 0; i < n; i++) {
        if (a->rowptr[i + 1] < a->rowptr[i])
            return actc_set_error(ACTC_ERR_INVALID, "actc_csr_transpose: rowptr decreases at row %d (%lld > %lld)", i,
                                  (long long)a->rowptr[i], (long long)a->rowptr[i + 1]);
        for (int64_t k = a->rowptr[i]; k < a->rowptr[i + 1]; k++)
            if (a->col[k] < 0 || a->col[k] >= n)
                return actc_set_error(ACTC_ERR_INVALID,
                                      "actc_csr_transpose: entry %lld (row %d) has column %d outside [0, %d)",
                                      (long long)k, i, (int)a->col[k], n);
    }
    out->n = n;
    out->nnz = nnz;
    out->rowptr = actc_mem_calloc(ACTC_MEM_SCRATCH, ((size_t)n + 1) * sizeof *out->rowptr);
    out->col = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)(nnz ? nnz : 1) * sizeof *out->col);
    out->perm = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)(nnz ? nnz : 1) * sizeof *out->perm);
    int64_t *fill = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)n * sizeof *fill);
    if (!out->rowptr || !out->col || !out->perm || !fill) {
        actc_mem_free(fill);
        actc_csr_free(out);
        return actc_set_error(ACTC_ERR_OOM, "actc_csr_transpose: out of memory for %lld entries", (long long)nnz);
    }
    for (int64_t k = 0; k < nnz; k++) out->rowptr[a->col[k] + 1]++;
    for (int i = 0; i < n; i++) out->rowptr[i + 1] += out->rowptr[i];
    memcpy(fill, out->rowptr, (size_t)n * sizeof *fill);
    /* Rows of a in order: each row of the transpose gets its columns
     * ascending. */
    for (int i = 0; i < n; i++)
        for (int64_t k = a->rowptr[i]; k < a->rowptr[i + 1]; k++) {
            const int64_t p = fill[a->col[k]]++;
            out->col[p] = i;
            out->perm[p] = k;
        }
    actc_mem_free(fill);
    return ACTC_OK;
}

actc_status actc_csr_gcn_norm(const actc_csr *a, float *w)
{
    if (!actc__csr_ok("actc_csr_gcn_norm", "a", a)) return ACTC_ERR_INVALID;
    if (!w && a->nnz > 0) return actc_set_error(ACTC_ERR_INVALID, "actc_csr_gcn_norm: w is NULL");
    const int n = a->n;
    double *d = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)n * sizeof *d);
    if (!d) return actc_set_error(ACTC_ERR_OOM, "actc_csr_gcn_norm: out of memory (n=%d)", n);
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int64_t k = a->rowptr[i]; k < a->rowptr[i + 1]; k++) s += a->val ? (double)a->val[k] : 1.0;
        d[i] = s;
    }
    for (int i = 0; i < n; i++)
        for (int64_t k = a->rowptr[i]; k < a->rowptr[i + 1]; k++) {
            const int j = a->col[k];
            if (j < 0 || j >= n) {
                actc_mem_free(d);
                return actc_set_error(ACTC_ERR_INVALID,
                                      "actc_csr_gcn_norm: entry %lld (row %d) has column %d outside [0, %d)",
                                      (long long)k, i, j, n);
            }
            if (!(d[i] > 0) || !(d[j] > 0)) {
                const double di = d[i], dj = d[j];
                actc_mem_free(d);
                return actc_set_error(ACTC_ERR_INVALID,
                                      "actc_csr_gcn_norm: entry %lld = (%d, %d) joins nodes of degree %g and %g "
                                      "(degrees must be positive)",
                                      (long long)k, i, j, di, dj);
            }
            w[k] = (float)((a->val ? (double)a->val[k] : 1.0) / sqrt(d[i] * d[j]));
        }
    actc_mem_free(d);
    return ACTC_OK;
}
