/* The graph file (docs/graphs.md), little-endian:
 *
 *   offset  size        field
 *   0       8           magic "ACTCGRPH"
 *   8       4   u32     version (1)
 *   12      4   i32     n          nodes
 *   16      4   i32     n_features
 *   20      4   i32     n_classes
 *   24      8   i64     m          undirected edges, each stored once
 *   32      4*n*F f32   features, row-major
 *           4*n   i32   labels
 *           n     i8    split (-1 none, 0 train, 1 validation, 2 test)
 *           4*m   i32   src
 *           4*m   i32   dst
 *           4     u32   CRC-32 (zlib's) of every byte before it
 *
 * The reader checks the header's sizes against the file's size before it
 * allocates anything (so a corrupt header never costs more memory than the
 * file holds), then the CRC, then the content (the rules of
 * actc_graph_new).  Every refusal is ACTC_ERR_FORMAT (ACTC_ERR_IO when the
 * file cannot be opened or read) with a message naming the file. */
#include "../core/core.h"
#include "data.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define GRAPH_MAGIC "ACTCGRPH"
#define GRAPH_VERSION 1u
#define GRAPH_HEADER 32u
#define CHUNK (1u << 16)

/* Byte order of the arrays: the file's is little-endian. */
static void swap_words(void *p, size_t n, size_t width)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++, b += width)
        for (size_t k = 0; k < width / 2; k++) {
            uint8_t t = b[k];
            b[k] = b[width - 1 - k];
            b[width - 1 - k] = t;
        }
#else
    (void)p, (void)n, (void)width;
#endif
}

/* ---- writing -------------------------------------------------------------- */

typedef struct {
    FILE *f;
    const char *path;
    uLong crc;
    int failed;
    uint8_t buf[CHUNK];
    size_t len;
} writer;

static void w_flush(writer *w)
{
    if (!w->failed && w->len && fwrite(w->buf, 1, w->len, w->f) != w->len) w->failed = errno ? errno : EIO;
    w->crc = crc32(w->crc, w->buf, (uInt)w->len);
    w->len = 0;
}

/* n words of `width` bytes, host order, written little-endian. */
static void w_words(writer *w, const void *p, size_t n, size_t width)
{
    const uint8_t *s = p;
    while (n > 0) {
        if (w->len + width > CHUNK) w_flush(w);
        size_t k = (CHUNK - w->len) / width;
        if (k > n) k = n;
        memcpy(w->buf + w->len, s, k * width);
        swap_words(w->buf + w->len, k, width);
        w->len += k * width;
        s += k * width;
        n -= k;
    }
}

actc_status actc_graph_save(const actc_graph *g, const char *path)
{
    if (!g || !path || !g->x || !g->adj.rowptr)
        return actc_set_error(ACTC_ERR_INVALID, "actc_graph_save: %s", path ? "no graph" : "path is NULL");
    /* Each undirected edge once: the entries below the diagonal. */
    const int64_t m = g->n_edges;
    int32_t *src = malloc((size_t)(m ? m : 1) * sizeof *src), *dst = malloc((size_t)(m ? m : 1) * sizeof *dst);
    if (!src || !dst) {
        free(src), free(dst);
        return actc_set_error(ACTC_ERR_OOM, "out of memory for the %lld edges to save to %s", (long long)m, path);
    }
    int64_t e = 0;
    for (int i = 0; i < g->n; i++)
        for (int64_t k = g->adj.rowptr[i]; k < g->adj.rowptr[i + 1]; k++)
            if (g->adj.col[k] < i && e < m) {
                src[e] = g->adj.col[k];
                dst[e] = i;
                e++;
            }
    if (e != m) {
        free(src), free(dst);
        return actc_set_error(ACTC_ERR_INVALID, "actc_graph_save: the graph's adjacency holds %lld edges, not the "
                                                "%lld it claims", (long long)e, (long long)m);
    }
    writer *w = calloc(1, sizeof *w);
    if (!w) {
        free(src), free(dst);
        return actc_set_error(ACTC_ERR_OOM, "out of memory to write %s", path);
    }
    errno = 0;
    w->f = fopen(path, "wb");
    if (!w->f) {
        const int err = errno;
        free(src), free(dst), free(w);
        return actc_set_error(ACTC_ERR_IO, "cannot create the graph file %s: %s", path, strerror(err));
    }
    w->path = path;
    w->crc = crc32(0L, Z_NULL, 0);
    uint8_t hdr[GRAPH_HEADER];
    memcpy(hdr, GRAPH_MAGIC, 8);
    actc__put_u32(hdr + 8, GRAPH_VERSION);
    actc__put_u32(hdr + 12, (uint32_t)g->n);
    actc__put_u32(hdr + 16, (uint32_t)g->n_features);
    actc__put_u32(hdr + 20, (uint32_t)g->n_classes);
    actc__put_u64(hdr + 24, (uint64_t)m);
    w_words(w, hdr, GRAPH_HEADER, 1);
    w_words(w, g->x->data, g->x->numel, 4);
    w_words(w, g->y, (size_t)g->n, 4);
    w_words(w, g->split, (size_t)g->n, 1);
    w_words(w, src, (size_t)m, 4);
    w_words(w, dst, (size_t)m, 4);
    free(src), free(dst);
    w_flush(w);
    uint8_t tail[4];
    actc__put_u32(tail, (uint32_t)w->crc);
    if (!w->failed && fwrite(tail, 1, 4, w->f) != 4) w->failed = errno ? errno : EIO;
    if (fclose(w->f) != 0 && !w->failed) w->failed = errno ? errno : EIO;
    const int failed = w->failed;
    free(w);
    if (failed) {
        remove(path);
        return actc_set_error(ACTC_ERR_IO, "cannot write the graph file %s: %s", path, strerror(failed));
    }
    return ACTC_OK;
}

/* ---- reading -------------------------------------------------------------- */

/* Read n words of `width` bytes into p, adding them to *crc. */
static actc_status r_words(FILE *f, const char *path, void *p, size_t n, size_t width, uLong *crc, const char *what)
{
    uint8_t *b = p;
    size_t left = n * width;
    while (left > 0) {
        const size_t want = left < (1u << 30) ? left : (1u << 30);
        const size_t got = fread(b, 1, want, f);
        *crc = crc32(*crc, b, (uInt)got);
        if (got < want) {
            if (ferror(f)) return actc_set_error(ACTC_ERR_IO, "cannot read the graph file %s: %s", path, strerror(errno));
            return actc_set_error(ACTC_ERR_FORMAT, "%s is truncated while reading %s", path, what);
        }
        b += got;
        left -= got;
    }
    swap_words(p, n, width);
    return ACTC_OK;
}

/* a + b into *s, 0 on overflow of uint64. */
static int add_u64(uint64_t a, uint64_t b, uint64_t *s)
{
    *s = a + b;
    return *s >= a;
}

static int mul_u64(uint64_t a, uint64_t b, uint64_t *p)
{
    if (a && b > UINT64_MAX / a) return 0;
    *p = a * b;
    return 1;
}

/* The header's fields. */
typedef struct {
    int32_t n, nf, nc;
    int64_t m;
} graph_header;

/* Reads and checks the header of f (size bytes in all), adding it to *crc. */
static actc_status read_header(FILE *f, const char *path, uint64_t size, graph_header *h, uLong *crc)
{
    uint8_t hdr[GRAPH_HEADER] = {0};
    const size_t got = fread(hdr, 1, GRAPH_HEADER, f);
    if (got < 8 || memcmp(hdr, GRAPH_MAGIC, 8) != 0)
        return got < 8 && memcmp(hdr, GRAPH_MAGIC, got) == 0
                   ? actc_set_error(ACTC_ERR_FORMAT, "%s is truncated: %zu bytes, too short for a graph file's magic",
                                    path, got)
                   : actc_set_error(ACTC_ERR_FORMAT, "%s is not a graph file: bad magic (expected \"ACTCGRPH\")", path);
    if (got < GRAPH_HEADER)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is truncated: %zu bytes, shorter than the %u-byte header", path, got,
                              GRAPH_HEADER);
    *crc = crc32(*crc, hdr, GRAPH_HEADER);
    const uint32_t version = actc__get_u32(hdr + 8);
    const int32_t n = (int32_t)actc__get_u32(hdr + 12), nf = (int32_t)actc__get_u32(hdr + 16),
                  nc = (int32_t)actc__get_u32(hdr + 20);
    const int64_t m = (int64_t)actc__get_u64(hdr + 24);
    *h = (graph_header){n, nf, nc, m};
    if (version != GRAPH_VERSION)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is a graph file of unknown version %u (this library reads version %u)",
                              path, (unsigned)version, GRAPH_VERSION);
    if (n < 1 || nf < 1 || nc < 1 || nc > n || m < 0)
        return actc_set_error(ACTC_ERR_FORMAT,
                              "%s: bad header: %d nodes, %d features, %d classes, %lld edges (%s)", path, (int)n,
                              (int)nf, (int)nc, (long long)m,
                              n == 0 ? "an empty graph: need at least 1 node" : n < 0 ? "negative node count"
                              : nf < 1 ? "need at least 1 feature" : nc < 1 ? "need at least 1 class"
                              : nc > n ? "more classes than nodes" : "negative edge count");
    /* The size the header declares, overflow-safe, against the file's. */
    uint64_t need = GRAPH_HEADER + 4, t;
    int ok = mul_u64((uint64_t)n, (uint64_t)nf, &t) && mul_u64(t, 4, &t) && add_u64(need, t, &need) &&
             add_u64(need, 5 * (uint64_t)n, &need) && mul_u64((uint64_t)m, 8, &t) && add_u64(need, t, &need);
    if (ok && need > size)
        return actc_set_error(ACTC_ERR_FORMAT,
                              "%s is truncated or its arrays do not match its header: the header (%d nodes, %d "
                              "features, %lld edges) declares %llu bytes but the file holds %llu (label count "
                              "mismatch?)",
                              path, (int)n, (int)nf, (long long)m, (unsigned long long)need, (unsigned long long)size);
    if (ok && need < size)
        return actc_set_error(ACTC_ERR_FORMAT,
                              "%s has %llu trailing bytes after the %llu its header declares (%d nodes, %d features, "
                              "%lld edges): a wrong or concatenated file, or a label count mismatch",
                              path, (unsigned long long)(size - need), (unsigned long long)need, (int)n, (int)nf,
                              (long long)m);
    if (!ok)
        return actc_set_error(ACTC_ERR_FORMAT,
                              "%s: its header (%d nodes, %d features, %lld edges) declares more bytes than any file "
                              "holds (this one has %llu): truncated or corrupt",
                              path, (int)n, (int)nf, (long long)m, (unsigned long long)size);
    if ((uint64_t)m > SIZE_MAX / 8)
        return actc_set_error(ACTC_ERR_FORMAT, "%s: %lld edges are too many for this machine", path, (long long)m);
    return ACTC_OK;
}

/* Reads the arrays after the header into g (edges into src, dst) and checks
 * the CRC-32 that ends the file. */
static actc_status read_body(FILE *f, const char *path, const graph_header *h, actc_graph *g, int32_t *src,
                             int32_t *dst, uLong crc)
{
    actc_status s;
    if ((s = r_words(f, path, g->x->data, g->x->numel, 4, &crc, "the features")) != ACTC_OK ||
        (s = r_words(f, path, g->y, (size_t)h->n, 4, &crc, "the labels")) != ACTC_OK ||
        (s = r_words(f, path, g->split, (size_t)h->n, 1, &crc, "the split")) != ACTC_OK ||
        (s = r_words(f, path, src, (size_t)h->m, 4, &crc, "the edge sources")) != ACTC_OK ||
        (s = r_words(f, path, dst, (size_t)h->m, 4, &crc, "the edge targets")) != ACTC_OK)
        return s;
    uint8_t tail[5];
    const size_t tn = fread(tail, 1, sizeof tail, f);
    if (tn != 4)
        return ferror(f) ? actc_set_error(ACTC_ERR_IO, "cannot read the graph file %s: %s", path, strerror(errno))
               : tn < 4  ? actc_set_error(ACTC_ERR_FORMAT, "%s is truncated: its CRC-32 is missing", path)
                         : actc_set_error(ACTC_ERR_FORMAT, "%s has trailing bytes after its CRC-32 (it grew while read)",
                                          path);
    if (actc__get_u32(tail) != (uint32_t)crc)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is corrupt: CRC-32 mismatch (stored %08x, computed %08x)", path,
                              (unsigned)actc__get_u32(tail), (unsigned)crc);
    return ACTC_OK;
}

actc_status actc_graph_load(const char *path, actc_graph **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_graph_load: out is NULL");
    *out = NULL;
    if (!path) return actc_set_error(ACTC_ERR_INVALID, "actc_graph_load: path is NULL");
    struct stat st;
    if (stat(path, &st) != 0)
        return actc_set_error(ACTC_ERR_IO, "cannot open the graph file %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return actc_set_error(ACTC_ERR_IO, "cannot open the graph file %s: it is a directory", path);
    if (!S_ISREG(st.st_mode))
        return actc_set_error(ACTC_ERR_IO, "cannot read the graph file %s: not a regular file", path);
    errno = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return actc_set_error(ACTC_ERR_IO, "cannot open the graph file %s: %s", path, strerror(errno));
    actc_graph *g = NULL;
    int32_t *src = NULL, *dst = NULL;
    graph_header h = {0, 0, 0, 0};
    uLong crc = crc32(0L, Z_NULL, 0);
    actc_status s = read_header(f, path, (uint64_t)st.st_size, &h, &crc);
    if (s == ACTC_OK) s = actc__graph_alloc(h.n, h.nf, h.nc, &g);
    if (s == ACTC_OK) {
        src = malloc((size_t)(h.m ? h.m : 1) * sizeof *src);
        dst = malloc((size_t)(h.m ? h.m : 1) * sizeof *dst);
        if (!src || !dst) s = actc_set_error(ACTC_ERR_OOM, "out of memory for the %lld edges of %s", (long long)h.m, path);
    }
    if (s == ACTC_OK) s = read_body(f, path, &h, g, src, dst, crc);
    if (s == ACTC_OK && (s = actc__graph_finish(g, h.m, src, dst)) == ACTC_ERR_INVALID) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", actc_last_error());
        s = actc_set_error(ACTC_ERR_FORMAT, "%s: %s", path, msg);
    }
    if (s == ACTC_OK) snprintf(g->source, sizeof g->source, "%s", path);
    fclose(f);
    free(src);
    free(dst);
    if (s != ACTC_OK) {
        actc_graph_free(g);
        return s;
    }
    *out = g;
    return ACTC_OK;
}
