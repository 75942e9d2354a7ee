/* k-nearest-neighbour graphs of images, and the default graph (Fashion-
 * MNIST's 70,000 images, k = 10) with its cache file.
 *
 * Similarity: cosine of the raw pixel vectors.  Node i's neighbours are the
 * k other nodes j with the largest dot(p_i, p_j) / |p_j| (the same order as
 * the cosine, whose factor 1 / |p_i| is common to the row), ties broken by
 * the lower index; an all-zero image has similarity 0 to everything.  The
 * dot products are one sgemm per block of rows against all rows, on the
 * pixels as floats (integers: exact while a dot stays below 2^24, so equal
 * images tie exactly), then each row of the block is scanned for its top k
 * (OpenMP over the rows).  Memory: the pixels as floats (n * d), one block
 * of at most 32M similarities (at least 16 rows), and the n * k neighbours,
 * never n x n.
 *
 * Split: by seed 0, min(1000, n / 3) training nodes (at least 1),
 * min(1000, n / 3) validation nodes, the rest test: 1,000 / 1,000 /
 * 68,000 for Fashion-MNIST.  A graph always has a training node (the rule of
 * actc_graph_new); actc_graph_resplit redraws it. */
#include "../core/core.h"
#include "data.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KNN_BLOCK_FLOATS ((size_t)32 << 20)

/* The top k of row i (scores s[0..n), itself excluded) into best_j/best_s,
 * best first. */
static void top_k(const float *s, int n, int i, int k, int32_t *best_j, float *best_s)
{
    int cnt = 0;
    for (int j = 0; j < n; j++) {
        if (j == i) continue;
        const float v = s[j];
        if (cnt == k && !(v > best_s[k - 1])) continue;
        int p = cnt < k ? cnt++ : k - 1;
        while (p > 0 && v > best_s[p - 1]) {
            best_s[p] = best_s[p - 1];
            best_j[p] = best_j[p - 1];
            p--;
        }
        best_s[p] = v;
        best_j[p] = j;
    }
}

actc_status actc_graph_knn_images(const actc_image_dataset *const *parts, int n_parts, int k, actc_graph **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_graph_knn_images: out is NULL");
    *out = NULL;
    if (!parts || n_parts < 1) return actc_set_error(ACTC_ERR_INVALID, "knn graph: no image sets given");
    int64_t total = 0;
    int c = 0, h = 0, w = 0, max_label = -1;
    for (int p = 0; p < n_parts; p++) {
        const actc_image_dataset *d = parts[p];
        if (!d || d->n < 1 || !d->pixels || !d->labels)
            return actc_set_error(ACTC_ERR_INVALID, "knn graph: image set %d is empty or not loaded", p);
        if (d->c < 1 || d->h < 1 || d->w < 1)
            return actc_set_error(ACTC_ERR_INVALID, "knn graph: image set %d has images of %d x %d x %d", p, d->c,
                                  d->h, d->w);
        if (p == 0) {
            c = d->c, h = d->h, w = d->w;
        } else if (d->c != c || d->h != h || d->w != w) {
            return actc_set_error(ACTC_ERR_INVALID,
                                  "knn graph: image set %d has images of %d x %d x %d, set 0 of %d x %d x %d: all "
                                  "must have the same shape",
                                  p, d->c, d->h, d->w, c, h, w);
        }
        for (int i = 0; i < d->n; i++) {
            if (d->labels[i] < 0)
                return actc_set_error(ACTC_ERR_INVALID, "knn graph: image %d of set %d has label %d", i, p,
                                      (int)d->labels[i]);
            if (d->labels[i] > max_label) max_label = d->labels[i];
        }
        total += d->n;
    }
    const int64_t dim64 = (int64_t)c * h * w;
    if (total > INT_MAX || dim64 > INT_MAX)
        return actc_set_error(ACTC_ERR_INVALID, "knn graph: %lld images of %lld pixels are too many", (long long)total,
                              (long long)dim64);
    const int n = (int)total, d = (int)dim64;
    if (k < 1 || k > n - 1)
        return actc_set_error(ACTC_ERR_INVALID, "knn graph: k = %d neighbours for %d images (need 1 <= k <= %d)", k,
                              n, n - 1);
    if ((int64_t)n * k > INT64_MAX / 2)
        return actc_set_error(ACTC_ERR_INVALID, "knn graph: %d x %d neighbours are too many", n, k);
    actc_graph *g;
    actc_status st = actc__graph_alloc(n, d, max_label + 1, &g);
    if (st != ACTC_OK) return st;
    const size_t nd = (size_t)n * (size_t)d, nk = (size_t)n * (size_t)k;
    int rows = (int)(KNN_BLOCK_FLOATS / (size_t)n);
    if (rows < 16) rows = 16;
    if (rows > n) rows = n;
    float *P = actc_mem_alloc(ACTC_MEM_SCRATCH, nd * sizeof *P), *inv = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)n * sizeof *inv), *sc = actc_mem_alloc(ACTC_MEM_SCRATCH, nk * sizeof *sc);
    float *blk = actc_mem_alloc(ACTC_MEM_SCRATCH, (size_t)rows * (size_t)n * sizeof *blk);
    int32_t *src = actc_mem_alloc(ACTC_MEM_SCRATCH, nk * sizeof *src), *dst = actc_mem_alloc(ACTC_MEM_SCRATCH, nk * sizeof *dst);
    if (!P || !inv || !sc || !blk || !src || !dst) {
        st = actc_set_error(ACTC_ERR_OOM, "knn graph: out of memory for %d images of %d pixels", n, d);
        goto done;
    }
    /* Pixels as floats, features in [0, 1], labels. */
    {
        size_t off = 0;
        int node = 0;
        for (int p = 0; p < n_parts; p++) {
            const size_t cnt = (size_t)parts[p]->n * (size_t)d;
            const uint8_t *px = parts[p]->pixels;
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < cnt; i++) {
                P[off + i] = (float)px[i];
                g->x->data[off + i] = (float)px[i] * (1.0f / 255.0f);
            }
            memcpy(g->y + node, parts[p]->labels, (size_t)parts[p]->n * sizeof *g->y);
            off += cnt;
            node += parts[p]->n;
        }
    }
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        uint64_t ss = 0;
        for (int j = 0; j < d; j++) {
            const uint64_t v = (uint64_t)P[(size_t)i * d + j];
            ss += v * v;
        }
        inv[i] = ss ? (float)(1.0 / sqrt((double)ss)) : 0.0f;
    }
    for (int i0 = 0; i0 < n; i0 += rows) {
        const int r = n - i0 < rows ? n - i0 : rows;
        actc__sgemm(0, 1, r, n, d, 1.0f, P + (size_t)i0 * d, d, P, d, 0.0f, blk, n);
#pragma omp parallel for schedule(dynamic, 8)
        for (int q = 0; q < r; q++) {
            float *row = blk + (size_t)q * n;
            for (int j = 0; j < n; j++) row[j] *= inv[j];
            const int i = i0 + q;
            top_k(row, n, i, k, dst + (size_t)i * k, sc + (size_t)i * k);
            for (int t = 0; t < k; t++) src[(size_t)i * k + t] = i;
        }
    }
    actc_mem_free(P), actc_mem_free(blk), actc_mem_free(sc);
    P = blk = sc = NULL;
    {
        const int part = n / 3 < 1000 ? n / 3 : 1000;
        st = actc__graph_split_fill(g->split, n, part > 0 ? part : 1, n >= 3 ? part : 0, 0);
    }
    if (st == ACTC_OK) st = actc__graph_finish(g, (int64_t)nk, src, dst);
    if (st == ACTC_OK)
        snprintf(g->source, sizeof g->source, "knn:k=%d of %d images of %d x %d x %d", k, n, c, h, w);
done:
    actc_mem_free(P), actc_mem_free(inv), actc_mem_free(sc), actc_mem_free(blk), actc_mem_free(src), actc_mem_free(dst);
    if (st != ACTC_OK) {
        actc_graph_free(g);
        return st;
    }
    *out = g;
    return ACTC_OK;
}

/* ---- the default graph ------------------------------------------------------ */

#define FMNIST_N 70000
#define FMNIST_K 10

/* mkdir -p of the directory part of path. */
static actc_status make_parent(const char *path)
{
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return actc_set_error(ACTC_ERR_INVALID, "the cache path %s is too long", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return ACTC_OK;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return actc_set_error(ACTC_ERR_IO, "cannot create the directory %s for the graph cache %s: %s", dir, path,
                                  strerror(errno));
        *p = '/';
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return actc_set_error(ACTC_ERR_IO, "cannot create the directory %s for the graph cache %s: %s", dir, path,
                              strerror(errno));
    return ACTC_OK;
}

/* Save g to path through a temporary file in the same directory, renamed
 * into place: a killed build leaves no half-written cache. */
static actc_status save_atomic(const actc_graph *g, const char *path)
{
    actc_status st = make_parent(path);
    if (st != ACTC_OK) return st;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if ((st = actc_graph_save(g, tmp)) != ACTC_OK) {
        remove(tmp);
        return st;
    }
    if (rename(tmp, path) != 0) {
        const int err = errno;
        remove(tmp);
        return actc_set_error(ACTC_ERR_IO, "cannot move the graph cache into place as %s: %s", path, strerror(err));
    }
    return ACTC_OK;
}

actc_status actc_graph_fashion_mnist(const char *dir, const char *cache, actc_graph **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_graph_fashion_mnist: out is NULL");
    *out = NULL;
    actc_graph *g = NULL;
    actc_status st;
    struct stat sb;
    if (cache && stat(cache, &sb) == 0) {
        if ((st = actc_graph_load(cache, &g)) != ACTC_OK) return st;
        int counts[3];
        actc_graph_split_counts(g, counts);
        if (g->n != FMNIST_N || g->n_features != 784 || g->n_classes != 10 || counts[0] != 1000 ||
            counts[1] != 1000 || counts[2] != FMNIST_N - 2000) {
            st = actc_set_error(ACTC_ERR_FORMAT,
                                "the graph cache %s is not the Fashion-MNIST kNN graph: %d nodes, %d features, %d "
                                "classes, split %d/%d/%d (expected 70000, 784, 10, 1000/1000/68000); delete it to "
                                "rebuild",
                                cache, g->n, g->n_features, g->n_classes, counts[0], counts[1], counts[2]);
            actc_graph_free(g);
            return st;
        }
        *out = g;
        return ACTC_OK;
    }
    actc_image_dataset train, test;
    if ((st = actc_fashion_mnist_load(dir, 1, &train)) != ACTC_OK) return st;
    if ((st = actc_fashion_mnist_load(dir, 0, &test)) != ACTC_OK) {
        actc_image_dataset_free(&train);
        return st;
    }
    const actc_image_dataset *parts[2] = {&train, &test};
    if (train.n + test.n != FMNIST_N)
        st = actc_set_error(ACTC_ERR_FORMAT, "Fashion-MNIST in %s holds %d + %d images, not 60000 + 10000",
                            dir ? dir : "the default directory", train.n, test.n);
    else
        st = actc_graph_knn_images(parts, 2, FMNIST_K, &g);
    actc_image_dataset_free(&train);
    actc_image_dataset_free(&test);
    if (st == ACTC_OK) st = actc_graph_resplit(g, 1000, 1000, 0);
    if (st == ACTC_OK) {
        snprintf(g->source, sizeof g->source, "fashion-mnist knn k=%d", FMNIST_K);
        if (cache) st = save_atomic(g, cache);
    }
    if (st != ACTC_OK) {
        actc_graph_free(g);
        return st;
    }
    *out = g;
    return ACTC_OK;
}
