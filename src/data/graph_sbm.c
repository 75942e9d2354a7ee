/* Planted-partition graphs (a stochastic block model) for tests and scale
 * runs.  Node i is in block i % classes (its label).  Edge e of
 * m = round(n * degree / 2) is a pure function of (seed, e): a source node
 * drawn uniformly, then with probability p_in a partner drawn uniformly from
 * the other nodes of its block, otherwise one from another block (a block
 * drawn uniformly among the others, then a node of it).  Duplicates are
 * merged by the adjacency, so the graph holds slightly fewer than m edges
 * (a fraction about degree * classes / n of them for p_in = 1).  Features:
 * the one-hot of the block in the first `classes` columns plus Gaussian
 * noise of std `noise` on every column.  The split is actc_graph_resplit's
 * by seed.  With one class every edge is inside it, whatever p_in.  Every value is a function of (seed, index), so the graph is
 * the same at any thread count. */
#include "data.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

actc_sbm_opts actc_sbm_default_opts(void)
{
    actc_sbm_opts o;
    memset(&o, 0, sizeof o);
    o.n = 10000;
    o.classes = 10;
    o.n_features = 32;
    o.degree = 10.0;
    o.p_in = 0.8;
    o.noise = 1.0;
    o.n_train = 1000;
    o.n_val = 1000;
    o.seed = 1;
    return o;
}

static actc_status check_opts(const actc_sbm_opts *o)
{
    if (o->n < 1) return actc_set_error(ACTC_ERR_INVALID, "sbm: %d nodes (need at least 1)", o->n);
    if (o->classes < 1 || o->classes > o->n)
        return actc_set_error(ACTC_ERR_INVALID, "sbm: %d classes for %d nodes (need 1 <= classes <= nodes)",
                              o->classes, o->n);
    if (o->n_features < o->classes)
        return actc_set_error(ACTC_ERR_INVALID, "sbm: %d features for %d classes (the features hold the one-hot of "
                                                "the class: need features >= classes)",
                              o->n_features, o->classes);
    if (!(o->degree >= 0) || !isfinite(o->degree) || o->degree > (double)o->n - 1 + 1e-9)
        return actc_set_error(ACTC_ERR_INVALID, "sbm: mean degree %g must be finite and in [0, nodes - 1 = %d]",
                              o->degree, o->n - 1);
    if (!(o->p_in >= 0 && o->p_in <= 1))
        return actc_set_error(ACTC_ERR_INVALID, "sbm: p_in %g must be in [0, 1]", o->p_in);
    if (!(o->noise >= 0) || !isfinite(o->noise))
        return actc_set_error(ACTC_ERR_INVALID, "sbm: noise std %g must be finite and >= 0", o->noise);
    if (o->n_train < 1 || o->n_val < 0 || (int64_t)o->n_train + o->n_val > o->n)
        return actc_set_error(ACTC_ERR_INVALID,
                              "sbm: %d training and %d validation nodes do not fit %d nodes (need train >= 1, val >= "
                              "0, train + val <= nodes)",
                              o->n_train, o->n_val, o->n);
    return ACTC_OK;
}

/* 64 random bits, word pair `half` of block `ctr` of stream key. */
static uint64_t bits64(const uint32_t r[4], int half)
{
    return ((uint64_t)r[2 * half] << 32) | r[2 * half + 1];
}

actc_status actc_graph_sbm(const actc_sbm_opts *o, actc_graph **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_graph_sbm: out is NULL");
    *out = NULL;
    actc_sbm_opts def = actc_sbm_default_opts();
    if (!o) o = &def;
    actc_status st = check_opts(o);
    if (st != ACTC_OK) return st;
    const int n = o->n, C = o->classes, F = o->n_features;
    const int64_t m = (int64_t)llround((double)n * o->degree / 2.0);
    actc_graph *g;
    if ((st = actc__graph_alloc(n, F, C, &g)) != ACTC_OK) return st;
    int32_t *src = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)(m ? m : 1) * sizeof *src),
            *dst = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)(m ? m : 1) * sizeof *dst);
    if (!src || !dst) {
        actc_mem_free(src), actc_mem_free(dst);
        actc_graph_free(g);
        return actc_set_error(ACTC_ERR_OOM, "sbm: out of memory for %lld edges", (long long)m);
    }
    const uint64_t ekey = actc_rng_key(o->seed, 0x65646765ULL /* "edge" */, 0);
    const uint64_t fkey = actc_rng_key(o->seed, 0x66656174ULL /* "feat" */, 0);
    const uint64_t pin = (uint64_t)ldexp(o->p_in, 32); /* intra-block when a 32-bit draw is below */
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < m; e++) {
        uint32_t r[4], q[4];
        actc_philox(ekey, 2 * (uint64_t)e, r);
        actc_philox(ekey, 2 * (uint64_t)e + 1, q);
        const int a = (int)(bits64(r, 0) % (uint64_t)n), b = a % C;
        int t;
        if (C == 1 || o->p_in >= 1.0 || (uint64_t)r[2] < pin) {
            /* another node of block b: members b, b + C, ...; count_b of them */
            const int64_t cnt = (n - b + C - 1) / C, self = a / C;
            if (cnt < 2) {
                t = a; /* a block of one node: a self-loop, merged away */
            } else {
                int64_t k = (int64_t)(bits64(q, 0) % (uint64_t)(cnt - 1));
                if (k >= self) k++;
                t = (int)(b + k * C);
            }
        } else {
            const int b2 = (int)((b + 1 + (int64_t)(q[0] % (uint32_t)(C - 1))) % C);
            const int64_t cnt = (n - b2 + C - 1) / C;
            t = (int)(b2 + (int64_t)(bits64(q, 1) % (uint64_t)cnt) * C);
        }
        src[e] = a;
        dst[e] = t;
    }
    /* Features: 4 normals per Philox block (Box-Muller on two pairs). */
    float *x = g->x->data;
    const size_t total = g->x->numel;
    const float noise = (float)o->noise;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < (int64_t)((total + 3) / 4); blk++) {
        uint32_t r[4];
        actc_philox(fkey, (uint64_t)blk, r);
        float z[4];
        for (int h = 0; h < 2; h++) {
            const double u1 = ((double)r[2 * h] + 1.0) / 4294967297.0, u2 = (double)r[2 * h + 1] / 4294967296.0;
            const double rad = sqrt(-2.0 * log(u1));
            z[2 * h] = (float)(rad * cos(6.283185307179586 * u2));
            z[2 * h + 1] = (float)(rad * sin(6.283185307179586 * u2));
        }
        for (int k = 0; k < 4; k++) {
            const size_t idx = (size_t)blk * 4 + (size_t)k;
            if (idx >= total) break;
            const int node = (int)(idx / (size_t)F), f = (int)(idx % (size_t)F);
            x[idx] = (f == node % C ? 1.0f : 0.0f) + noise * z[k];
        }
    }
    for (int i = 0; i < n; i++) g->y[i] = i % C;
    if ((st = actc__graph_split_fill(g->split, n, o->n_train, o->n_val, o->seed)) == ACTC_OK)
        st = actc__graph_finish(g, m, src, dst);
    actc_mem_free(src), actc_mem_free(dst);
    if (st != ACTC_OK) {
        actc_graph_free(g);
        return st;
    }
    snprintf(g->source, sizeof g->source, "sbm:n=%d,classes=%d,features=%d,degree=%g,p_in=%g,noise=%g,seed=%llu", n,
             C, F, o->degree, o->p_in, o->noise, (unsigned long long)o->seed);
    *out = g;
    return ACTC_OK;
}
