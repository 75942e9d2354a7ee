/* IDX reader (the MNIST / Fashion-MNIST file format) for image and label files,
 * gzip-compressed or plain (a file starting with the gzip magic 1f 8b is
 * inflated with zlib as it is read).
 *
 * A gzip file is one or more complete members (concatenated members are a
 * legal gzip file: `gzip -c a >> f`, pigz): each member's CRC-32 and length
 * trailer are checked (inflate reports Z_STREAM_END only after verifying
 * them), and no byte that does not start another member may follow the
 * last.  zlib's gzread would accept a member cut before its trailer (the
 * CRC then never checked) and ignore trailing garbage.
 *
 * Format: a 4-byte magic {0, 0, type, ndims} with type 0x08 (unsigned byte),
 * then ndims big-endian u32 dimensions, then the bytes row-major.  Images are
 * 0x00000803 (n, h, w), labels 0x00000801 (n).
 *
 * Strictness: every deviation is an ACTC_ERR_FORMAT naming the file: a wrong
 * magic, a wrong number of dims, a zero dimension, fewer bytes than the header
 * promises (truncated), and also bytes *after* the promised data.  Trailing
 * bytes are rejected rather than tolerated because the usual way to get them
 * is a wrong or concatenated file, and reading the first n images of such a
 * file would silently train on something else.
 *
 * Memory: the pixels and labels are allocated with plain malloc, not with the
 * accounting allocator.  They are the input, like the file on disk: counting
 * the 47 MB of Fashion-MNIST against the training budget would make
 * `actc maxbatch --budget` depend on the dataset size rather than on what a
 * training step needs.  The batches the loader produces from them are SCRATCH
 * tensors and are accounted. */
#include "actc.h"
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_TYPE_UBYTE 0x08
#define DEFAULT_FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* Upper bound on one image's pixel count: far above any real IDX image set,
 * low enough that n*h*w cannot overflow size_t and that a corrupt header is
 * caught before we try to allocate gigabytes. */
#define IDX_MAX_PIXELS_PER_IMAGE (1u << 24)

#define IN_CHUNK (1u << 17) /* compressed bytes read at a time */

typedef struct {
    FILE *fp;
    const char *path;
    int gz;                 /* inflating a gzip member                    */
    int gz_done;            /* its end (and trailer) was reached          */
    z_stream z;
    unsigned char *in;      /* IN_CHUNK bytes of compressed input         */
} idx_file;

/* A zlib failure as the caller should see it. */
static actc_status gz_error(idx_file *f, int zr, const char *what)
{
    return actc_set_error(ACTC_ERR_FORMAT, "%s is not a valid gzip stream (%s) while reading %s", f->path,
                          f->z.msg ? f->z.msg : zr == Z_MEM_ERROR ? "out of memory" : "corrupt data", what);
}

/* After a member's end: does another member follow (its magic 1f 8b)?
 * Reads ahead as needed; what follows stays in the input either way. */
static int next_member(idx_file *f)
{
    if (f->z.avail_in < 2) {
        if (f->z.avail_in == 1) f->in[0] = f->z.next_in[0];
        const size_t have = f->z.avail_in;
        f->z.avail_in = (uInt)(have + fread(f->in + have, 1, IN_CHUNK - have, f->fp));
        f->z.next_in = f->in;
    }
    return f->z.avail_in >= 2 && f->z.next_in[0] == 0x1f && f->z.next_in[1] == 0x8b;
}

/* Read up to len bytes: *got receives how many (0 at the end of the data).
 * A gzip member's end is where its data ends; a damaged one is an error. */
static actc_status read_some(idx_file *f, unsigned char *p, size_t len, size_t *got, const char *what)
{
    *got = 0;
    if (!f->gz) {
        *got = fread(p, 1, len, f->fp);
        if (*got < len && ferror(f->fp)) return actc_set_error(ACTC_ERR_IO, "cannot read %s: %s", f->path, strerror(errno));
        return ACTC_OK;
    }
    if (f->gz_done) return ACTC_OK;
    f->z.next_out = p;
    f->z.avail_out = (uInt)(len > (1u << 30) ? (1u << 30) : len);
    const uInt want = f->z.avail_out;
    while (f->z.avail_out > 0) {
        if (f->z.avail_in == 0) {
            size_t n = fread(f->in, 1, IN_CHUNK, f->fp);
            if (n == 0) {
                if (ferror(f->fp)) return actc_set_error(ACTC_ERR_IO, "cannot read %s: %s", f->path, strerror(errno));
                return actc_set_error(ACTC_ERR_FORMAT, "%s is truncated: its gzip stream ends before its end marker "
                                                       "and checksum (while reading %s)",
                                      f->path, what);
            }
            f->z.next_in = f->in;
            f->z.avail_in = (uInt)n;
        }
        int zr = inflate(&f->z, Z_NO_FLUSH);
        if (zr == Z_STREAM_END) { /* the trailer's CRC-32 and length matched */
            if (next_member(f) && inflateReset(&f->z) == Z_OK) continue;
            f->gz_done = 1;
            break;
        }
        if (zr != Z_OK && zr != Z_BUF_ERROR) return gz_error(f, zr, what);
    }
    *got = want - f->z.avail_out;
    return ACTC_OK;
}

/* Read exactly len bytes.  Returns ACTC_OK, or an error naming the file:
 * ACTC_ERR_FORMAT "truncated" when the data ends early, ACTC_ERR_IO or
 * ACTC_ERR_FORMAT (corrupt gzip stream) when reading fails. */
static actc_status read_exact(idx_file *f, void *buf, size_t len, const char *what)
{
    unsigned char *p = buf;
    size_t done = 0;
    while (done < len) {
        size_t got;
        actc_status s = read_some(f, p + done, len - done, &got, what);
        if (s != ACTC_OK) return s;
        if (got == 0)
            return actc_set_error(ACTC_ERR_FORMAT, "%s is truncated: %zu of the %zu bytes of %s are missing", f->path,
                                  len - done, len, what);
        done += got;
    }
    return ACTC_OK;
}

/* Read exactly len bytes into a new malloc'd buffer (*out) that grows with
 * what actually arrives: a header that declares more than the file holds
 * costs at most twice what is there, never the declared size. */
static actc_status read_alloc(idx_file *f, size_t len, const char *what, uint8_t **out)
{
    size_t cap = len < (1u << 20) ? len : (1u << 20), done = 0;
    uint8_t *b = malloc(cap ? cap : 1);
    *out = NULL;
    if (!b) return actc_set_error(ACTC_ERR_OOM, "out of memory reading %s from %s", what, f->path);
    while (done < len) {
        if (done == cap) {
            cap = len - cap < cap ? len : 2 * cap;
            uint8_t *nb = realloc(b, cap);
            if (!nb) {
                free(b);
                return actc_set_error(ACTC_ERR_OOM, "out of memory for the %zu bytes of %s in %s", len, what, f->path);
            }
            b = nb;
        }
        size_t got;
        actc_status s = read_some(f, b + done, cap - done, &got, what);
        if (s == ACTC_OK && got == 0)
            s = actc_set_error(ACTC_ERR_FORMAT, "%s is truncated: %zu of the %zu bytes of %s are missing", f->path,
                               len - done, len, what);
        if (s != ACTC_OK) {
            free(b);
            return s;
        }
        done += got;
    }
    *out = b;
    return ACTC_OK;
}

static uint32_t be32(const unsigned char *b)
{
    return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | (uint32_t)b[3];
}

/* Open path and read its header: check the magic against {0,0,0x08,want_ndim}
 * and return the dims. */
static actc_status idx_open(idx_file *f, const char *path, int want_ndim, const char *kind,
                            uint32_t dims[3])
{
    memset(f, 0, sizeof *f);
    f->path = path;
    /* gzopen on a directory succeeds and only fails at the first read with a
     * confusing message: say what is wrong up front. */
    struct stat st;
    if (stat(path, &st) != 0)
        return actc_set_error(ACTC_ERR_IO, "cannot open %s file %s: %s", kind, path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return actc_set_error(ACTC_ERR_IO, "cannot open %s file %s: it is a directory", kind, path);
    errno = 0;
    f->fp = fopen(path, "rb");
    if (!f->fp) return actc_set_error(ACTC_ERR_IO, "cannot open %s file %s: %s", kind, path, strerror(errno));
    const int c0 = getc(f->fp), c1 = getc(f->fp);
    rewind(f->fp);
    if (c0 == 0x1f && c1 == 0x8b) {
        f->in = malloc(IN_CHUNK);
        /* 16 + MAX_WBITS: a gzip wrapper, whose trailer inflate verifies. */
        if (!f->in || inflateInit2(&f->z, 16 + MAX_WBITS) != Z_OK)
            return actc_set_error(ACTC_ERR_OOM, "out of memory to inflate %s", path);
        f->gz = 1;
    }
    unsigned char hdr[4];
    actc_status s = read_exact(f, hdr, 4, "the IDX magic");
    if (s != ACTC_OK) return s;
    uint32_t magic = be32(hdr);
    if (hdr[0] != 0 || hdr[1] != 0 || hdr[2] != IDX_TYPE_UBYTE || hdr[3] == 0)
        return actc_set_error(ACTC_ERR_FORMAT,
                              "%s is not an IDX %s file: magic 0x%08x, expected 0x%08x", path, kind,
                              (unsigned)magic, (unsigned)(0x800u | (unsigned)want_ndim));
    if (hdr[3] != want_ndim)
        return actc_set_error(ACTC_ERR_FORMAT,
                              "%s has %d dimensions (magic 0x%08x), an IDX %s file has %d", path,
                              hdr[3], (unsigned)magic, kind, want_ndim);
    unsigned char db[12];
    s = read_exact(f, db, 4 * (size_t)want_ndim, "the IDX dimensions");
    if (s != ACTC_OK) return s;
    for (int i = 0; i < want_ndim; i++) dims[i] = be32(db + 4 * i);
    return ACTC_OK;
}

/* After the promised data the file must end (see the file comment): a
 * gzip member's data, its trailer (checked), and nothing after it. */
static actc_status expect_eof(idx_file *f, size_t declared)
{
    unsigned char extra[256];
    size_t more = 0, got;
    do {
        actc_status s = read_some(f, extra, sizeof extra, &got, "the end of the file");
        if (s != ACTC_OK) return s;
        more += got;
    } while (got > 0 && more < (1u << 20));
    if (more)
        return actc_set_error(ACTC_ERR_FORMAT, "%s has %zu%s bytes of trailing data after the %zu bytes its header declares",
                              f->path, more, got > 0 ? "+" : "", declared);
    if (f->gz) {
        size_t rest = f->z.avail_in;
        while (rest == 0 && (got = fread(extra, 1, sizeof extra, f->fp)) > 0) rest += got;
        if (rest)
            return actc_set_error(ACTC_ERR_FORMAT, "%s has bytes after its last gzip member that do not start "
                                                   "another (trailing data)", f->path);
    }
    return ACTC_OK;
}

static void idx_close(idx_file *f)
{
    if (f->gz) inflateEnd(&f->z);
    free(f->in);
    if (f->fp) fclose(f->fp);
    memset(f, 0, sizeof *f);
}

static actc_status load_images(const char *path, actc_image_dataset *out)
{
    idx_file f;
    uint32_t d[3] = {0, 0, 0};
    actc_status s = idx_open(&f, path, 3, "image", d);
    if (s != ACTC_OK) goto done;
    if (d[0] == 0) {
        s = actc_set_error(ACTC_ERR_FORMAT, "%s holds zero images", path);
        goto done;
    }
    if (d[1] == 0 || d[2] == 0 || (uint64_t)d[1] * d[2] > IDX_MAX_PIXELS_PER_IMAGE ||
        d[0] > INT_MAX) {
        s = actc_set_error(ACTC_ERR_FORMAT, "%s declares an implausible image set %u x %u x %u",
                           path, (unsigned)d[0], (unsigned)d[1], (unsigned)d[2]);
        goto done;
    }
    size_t bytes = (size_t)d[0] * d[1] * d[2];
    char what[96];
    snprintf(what, sizeof what, "%u images of %u x %u", (unsigned)d[0], (unsigned)d[1],
             (unsigned)d[2]);
    s = read_alloc(&f, bytes, what, &out->pixels);
    if (s == ACTC_OK) s = expect_eof(&f, bytes);
    if (s == ACTC_OK) {
        out->n = (int)d[0];
        out->c = 1;
        out->h = (int)d[1];
        out->w = (int)d[2];
    }
done:
    idx_close(&f);
    return s;
}

static actc_status load_labels(const char *path, actc_image_dataset *out, uint32_t *n_out)
{
    idx_file f;
    uint32_t d[3] = {0, 0, 0};
    uint8_t *raw = NULL;
    actc_status s = idx_open(&f, path, 1, "label", d);
    if (s != ACTC_OK) goto done;
    if (d[0] == 0) {
        s = actc_set_error(ACTC_ERR_FORMAT, "%s holds zero labels", path);
        goto done;
    }
    if (d[0] > INT_MAX) {
        s = actc_set_error(ACTC_ERR_FORMAT, "%s declares an implausible %u labels", path,
                           (unsigned)d[0]);
        goto done;
    }
    char what[64];
    snprintf(what, sizeof what, "%u labels", (unsigned)d[0]);
    s = read_alloc(&f, d[0], what, &raw);
    if (s == ACTC_OK && !(out->labels = malloc((size_t)d[0] * sizeof(int32_t))))
        s = actc_set_error(ACTC_ERR_OOM, "out of memory for the %u labels in %s", (unsigned)d[0], path);
    if (s == ACTC_OK) s = expect_eof(&f, d[0]);
    if (s != ACTC_OK) goto done;
    int maxl = 0;
    uint32_t count[256] = {0};
    for (uint32_t i = 0; i < d[0]; i++) {
        out->labels[i] = raw[i];
        count[raw[i]]++;
        if (raw[i] > maxl) maxl = raw[i];
    }
    /* The classes are 0 .. max label, and the model gets one output per
     * class: a class in between that no label names is a damaged label
     * (one byte of 7 made 77 would add 68 classes), not data to learn. */
    int missing = 0, first = -1;
    for (int c = 0; c <= maxl; c++)
        if (!count[c]) {
            missing++;
            if (first < 0) first = c;
        }
    if (missing) {
        uint32_t above = 0;
        for (int c = first + 1; c <= maxl; c++) above += count[c];
        s = actc_set_error(ACTC_ERR_FORMAT,
                           "%s: the labels name classes 0 to %d, but %d of them never occur (the first: %d): "
                           "%u label(s) lie above the gap, the largest %d; classes must be numbered from 0 without "
                           "gaps (a damaged label file?)",
                           path, maxl, missing, first, (unsigned)above, maxl);
        goto done;
    }
    out->num_classes = maxl + 1;
    *n_out = d[0];
done:
    free(raw);
    idx_close(&f);
    return s;
}

actc_status actc_idx_load(const char *images_path, const char *labels_path,
                          actc_image_dataset *out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_idx_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!images_path || !labels_path)
        return actc_set_error(ACTC_ERR_INVALID, "actc_idx_load: %s path is NULL",
                              images_path ? "label" : "image");
    actc_image_dataset d = {0};
    uint32_t nl = 0;
    actc_status s = load_images(images_path, &d);
    if (s == ACTC_OK) s = load_labels(labels_path, &d, &nl);
    if (s == ACTC_OK && (uint32_t)d.n != nl)
        s = actc_set_error(ACTC_ERR_FORMAT, "%s holds %d images but %s holds %u labels",
                           images_path, d.n, labels_path, (unsigned)nl);
    if (s != ACTC_OK) {
        actc_image_dataset_free(&d);
        return s;
    }
    *out = d;
    return ACTC_OK;
}

void actc_image_dataset_free(actc_image_dataset *d)
{
    if (!d) return;
    free(d->pixels);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

/* dir/name, or dir/name.gz when only that exists.  Returns 0 when neither
 * exists (buf then holds the plain name, for the message). */
static int find_variant(const char *dir, const char *name, char *buf, size_t cap)
{
    struct stat st;
    snprintf(buf, cap, "%s/%s", dir, name);
    if (stat(buf, &st) == 0) return 1;
    snprintf(buf, cap, "%s/%s.gz", dir, name);
    if (stat(buf, &st) == 0) return 1;
    snprintf(buf, cap, "%s/%s", dir, name);
    return 0;
}

#define FASHION_CLASSES 10

actc_status actc_fashion_mnist_load(const char *dir, int train, actc_image_dataset *out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_fashion_mnist_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!dir) dir = DEFAULT_FASHION_DIR;
    const char *split = train ? "train" : "t10k";
    char iname[64], lname[64];
    snprintf(iname, sizeof iname, "%s-images-idx3-ubyte", split);
    snprintf(lname, sizeof lname, "%s-labels-idx1-ubyte", split);
    char ipath[4096], lpath[4096];
    int have_i = find_variant(dir, iname, ipath, sizeof ipath);
    int have_l = find_variant(dir, lname, lpath, sizeof lpath);
    if (!have_i || !have_l)
        return actc_set_error(ACTC_ERR_IO,
                              "Fashion-MNIST not found: %s(.gz) does not exist; install Debian's "
                              "dataset-fashion-mnist package (apt-get install dataset-fashion-mnist, "
                              "it fills %s) or pass the directory holding the IDX files",
                              have_i ? lpath : ipath, DEFAULT_FASHION_DIR);
    actc_status s = actc_idx_load(ipath, lpath, out);
    if (s == ACTC_OK && out->num_classes > FASHION_CLASSES) {
        /* Its classes are 0-9 (a subset may hold fewer): a larger label is
         * a damaged one, never an eleventh class. */
        uint32_t bad = 0;
        for (int i = 0; i < out->n; i++) bad += out->labels[i] >= FASHION_CLASSES;
        const int worst = out->num_classes - 1;
        actc_image_dataset_free(out);
        return actc_set_error(ACTC_ERR_FORMAT, "%s: %u label(s) outside Fashion-MNIST's %d classes (the largest %d)",
                              lpath, (unsigned)bad, FASHION_CLASSES, worst);
    }
    return s;
}
