/* IDX reader (the MNIST / Fashion-MNIST file format) for image and label files,
 * gzip-compressed or plain: zlib's gzopen/gzread read both transparently.
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

typedef struct {
    gzFile f;
    const char *path;
} idx_file;

/* Read exactly len bytes.  Returns ACTC_OK, or an error naming the file:
 * ACTC_ERR_FORMAT "truncated" when the stream ends early, ACTC_ERR_IO or
 * ACTC_ERR_FORMAT (corrupt gzip stream) when zlib reports a failure. */
static actc_status read_exact(idx_file *f, void *buf, size_t len, const char *what)
{
    unsigned char *p = buf;
    size_t done = 0;
    while (done < len) {
        /* gzread takes an unsigned count: read in chunks well below UINT_MAX. */
        size_t want = len - done;
        if (want > (1u << 30)) want = 1u << 30;
        int got = gzread(f->f, p + done, (unsigned)want);
        if (got < 0) {
            int zerr = 0;
            const char *msg = gzerror(f->f, &zerr);
            if (zerr == Z_ERRNO)
                return actc_set_error(ACTC_ERR_IO, "cannot read %s: %s", f->path, strerror(errno));
            return actc_set_error(ACTC_ERR_FORMAT, "%s is not a valid gzip stream (%s) while reading %s",
                                  f->path, msg, what);
        }
        if (got == 0) {
            /* zlib reports a gzip stream cut short as Z_BUF_ERROR: also a
             * truncation from the caller's point of view. */
            return actc_set_error(ACTC_ERR_FORMAT,
                                  "%s is truncated: %zu of the %zu bytes of %s are missing", f->path,
                                  len - done, len, what);
        }
        done += (size_t)got;
    }
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
    f->path = path;
    f->f = NULL;
    /* gzopen on a directory succeeds and only fails at the first read with a
     * confusing message: say what is wrong up front. */
    struct stat st;
    if (stat(path, &st) != 0)
        return actc_set_error(ACTC_ERR_IO, "cannot open %s file %s: %s", kind, path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return actc_set_error(ACTC_ERR_IO, "cannot open %s file %s: it is a directory", kind, path);
    errno = 0;
    f->f = gzopen(path, "rb");
    if (!f->f)
        return actc_set_error(ACTC_ERR_IO, "cannot open %s file %s: %s", kind, path,
                              errno ? strerror(errno) : "out of memory");
    gzbuffer(f->f, 1u << 17); /* fewer syscalls for the 47 MB train images */

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

/* After the promised data the stream must end (see the file comment). */
static actc_status expect_eof(idx_file *f, size_t declared)
{
    unsigned char extra[256];
    int got = gzread(f->f, extra, sizeof extra);
    if (got < 0) return read_exact(f, extra, 1, "the end of the file"); /* reports the error */
    if (got > 0) {
        size_t more = (size_t)got;
        while ((got = gzread(f->f, extra, sizeof extra)) > 0) more += (size_t)got;
        return actc_set_error(ACTC_ERR_FORMAT,
                              "%s has %zu%s bytes of trailing data after the %zu bytes its header "
                              "declares",
                              f->path, more, got < 0 ? "+" : "", declared);
    }
    return ACTC_OK;
}

static void idx_close(idx_file *f)
{
    if (f->f) gzclose(f->f);
    f->f = NULL;
}

static actc_status load_images(const char *path, actc_image_dataset *out)
{
    idx_file f;
    uint32_t d[3];
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
    out->pixels = malloc(bytes);
    if (!out->pixels) {
        s = actc_set_error(ACTC_ERR_OOM, "out of memory for the %zu bytes of images in %s", bytes,
                           path);
        goto done;
    }
    char what[96];
    snprintf(what, sizeof what, "%u images of %u x %u", (unsigned)d[0], (unsigned)d[1],
             (unsigned)d[2]);
    s = read_exact(&f, out->pixels, bytes, what);
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
    uint32_t d[3];
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
    raw = malloc(d[0]);
    out->labels = malloc((size_t)d[0] * sizeof(int32_t));
    if (!raw || !out->labels) {
        s = actc_set_error(ACTC_ERR_OOM, "out of memory for the %u labels in %s", (unsigned)d[0],
                           path);
        goto done;
    }
    char what[64];
    snprintf(what, sizeof what, "%u labels", (unsigned)d[0]);
    s = read_exact(&f, raw, d[0], what);
    if (s == ACTC_OK) s = expect_eof(&f, d[0]);
    if (s != ACTC_OK) goto done;
    int maxl = 0;
    for (uint32_t i = 0; i < d[0]; i++) {
        out->labels[i] = raw[i];
        if (raw[i] > maxl) maxl = raw[i];
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
    return actc_idx_load(ipath, lpath, out);
}
