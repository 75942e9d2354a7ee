/* Checkpoints: model state, optional optimizer state and run metadata in one
 * self-checking file.
 *
 * Layout (version 3; every integer and float little-endian, fixed width, each
 * field written explicitly so the file does not depend on struct padding or
 * the host's byte order):
 *
 *   offset 0   "ACTCCKPT"                 8 bytes magic
 *          8   u32 version                (3)
 *         12   u64 file length            total bytes, CRC included
 *         20   metadata                   708 bytes:
 *                char model[32], char optim[16], char policy[64] (NUL-padded),
 *                u64 epoch, u64 step, u64 batch_in_epoch, u64 seed,
 *                i32 batch, f32 extra[8], i32 input[3], i32 num_classes,
 *                char settings[512] (NUL-padded)
 *        728   u32 number of model tensors, then per tensor:
 *                u32 name length, name bytes (no NUL), u32 ndim,
 *                u32 shape[ndim], f32 data[numel]
 *              u32 has_optimizer (0 or 1); if 1:
 *                u32 name length, name bytes, u64 steps,
 *                u32 number of state tensors, tensors as above
 *   length-4   u32 CRC-32 (zlib) of every byte before it
 *
 * Saving writes path.tmp, fflush + fsync, renames it over path and fsyncs the
 * directory, so a crash leaves either the old checkpoint or the new one, never
 * a half-written file under the real name.
 *
 * Version 2 files (settings[256], everything after it 256 bytes earlier) are
 * still read.
 *
 * Loading reads the whole file, then checks in this order: magic, version,
 * length against the header (shorter: "truncated"), CRC ("checksum
 * mismatch"), the structure, the model name, the count, name and shape of
 * every tensor, the optimizer's name, count and shapes.  Only when everything
 * matches is anything copied, so a failed load leaves the model and the
 * optimizer as they were.  The declared length is what tells a cut file
 * ("truncated") from a damaged one ("checksum mismatch"). */
#include "actc.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_MAGIC "ACTCCKPT"
#define CKPT_VERSION 3u /* 3: settings grew from 256 to 512 bytes */
#define META_FIXED (32 + 16 + 64 + 4 * 8 + 4 + 8 * 4 + 4 * 4) /* before settings */
#define SETTINGS_BYTES(v) ((v) == 2u ? 256 : 512)
#define HEADER_BYTES_V(v) (8 + 4 + 8 + META_FIXED + SETTINGS_BYTES(v))
#define HEADER_BYTES HEADER_BYTES_V(CKPT_VERSION) /* what this build writes */
#define CONV_CHUNK 1024 /* floats converted to little-endian per write */

/* ---- little-endian encoding --------------------------------------------- */

static void put_u32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static void put_f32(uint8_t *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(b, u);
}
static uint32_t get_u32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t get_u64(const uint8_t *b) { return get_u32(b) | (uint64_t)get_u32(b + 4) << 32; }
static float get_f32(const uint8_t *b)
{
    uint32_t u = get_u32(b);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uLong crc_update(uLong crc, const uint8_t *p, size_t n)
{
    /* zlib's crc32 takes a uInt length. */
    while (n > 0) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, p, k);
        p += k;
        n -= k;
    }
    return crc;
}

/* Fixed-width string field: NUL-padded, cut at cap (callers check lengths). */
static void put_str(uint8_t *b, const char *s, size_t cap)
{
    memset(b, 0, cap);
    if (s) memcpy(b, s, strnlen(s, cap));
}
static void get_str(char *dst, const uint8_t *b, size_t cap)
{
    memcpy(dst, b, cap);
    dst[cap - 1] = '\0'; /* a corrupt field must not run off the end */
}

static void encode_meta(uint8_t *b, const actc_ckpt_meta *m)
{
    put_str(b, m->model, 32);
    put_str(b + 32, m->optim, 16);
    put_str(b + 48, m->policy, 64);
    put_u64(b + 112, m->epoch);
    put_u64(b + 120, m->step);
    put_u64(b + 128, m->batch_in_epoch);
    put_u64(b + 136, m->seed);
    put_u32(b + 144, (uint32_t)m->batch);
    for (int i = 0; i < 8; i++) put_f32(b + 148 + 4 * i, m->extra[i]);
    for (int i = 0; i < 3; i++) put_u32(b + 180 + 4 * i, (uint32_t)m->input[i]);
    put_u32(b + 192, (uint32_t)m->num_classes);
    put_str(b + 196, m->settings, 512);
}

static void decode_meta(actc_ckpt_meta *m, const uint8_t *b, size_t settings_cap)
{
    memset(m, 0, sizeof *m);
    get_str(m->model, b, 32);
    get_str(m->optim, b + 32, 16);
    get_str(m->policy, b + 48, 64);
    m->epoch = get_u64(b + 112);
    m->step = get_u64(b + 120);
    m->batch_in_epoch = get_u64(b + 128);
    m->seed = get_u64(b + 136);
    m->batch = (int32_t)get_u32(b + 144);
    for (int i = 0; i < 8; i++) m->extra[i] = get_f32(b + 148 + 4 * i);
    for (int i = 0; i < 3; i++) m->input[i] = (int32_t)get_u32(b + 180 + 4 * i);
    m->num_classes = (int32_t)get_u32(b + 192);
    get_str(m->settings, b + 196, settings_cap);
}

/* ---- writing -------------------------------------------------------------- */

typedef struct {
    FILE *f;
    uLong crc;
    int failed;
} writer;

static void w_bytes(writer *w, const void *p, size_t n)
{
    if (w->failed || n == 0) return;
    if (fwrite(p, 1, n, w->f) != n) {
        w->failed = errno ? errno : EIO;
        return;
    }
    w->crc = crc_update(w->crc, p, n);
}
static void w_u32(writer *w, uint32_t v)
{
    uint8_t b[4];
    put_u32(b, v);
    w_bytes(w, b, 4);
}
static void w_u64(writer *w, uint64_t v)
{
    uint8_t b[8];
    put_u64(b, v);
    w_bytes(w, b, 8);
}
static void w_name(writer *w, const char *s)
{
    size_t n = strnlen(s, sizeof ((actc_tensor *)0)->name);
    w_u32(w, (uint32_t)n);
    w_bytes(w, s, n);
}
static void w_tensor(writer *w, const actc_tensor *t)
{
    w_name(w, t->name);
    w_u32(w, (uint32_t)t->ndim);
    for (int i = 0; i < t->ndim; i++) w_u32(w, (uint32_t)t->shape[i]);
    uint8_t buf[CONV_CHUNK * 4];
    for (size_t i = 0; i < t->numel; i += CONV_CHUNK) {
        size_t k = t->numel - i < CONV_CHUNK ? t->numel - i : CONV_CHUNK;
        for (size_t j = 0; j < k; j++) put_f32(buf + 4 * j, t->data[i + j]);
        w_bytes(w, buf, 4 * k);
    }
}
static size_t tensor_bytes(const actc_tensor *t)
{
    return 4 + strnlen(t->name, sizeof t->name) + 4 + 4 * (size_t)t->ndim + 4 * t->numel;
}

/* Check that every tensor to be written has data (a released tensor would be
 * a caller bug, better reported than dereferenced). */
static actc_status check_tensors(const char *path, actc_tensor **ts, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        if (!ts[i] || !ts[i]->data)
            return actc_set_error(ACTC_ERR_STATE, "checkpoint %s: %s tensor %d has no data", path,
                                  what, i);
    return ACTC_OK;
}

static void fsync_dir_of(const char *path)
{
    /* Make the rename itself durable.  Best effort: some file systems refuse
     * fsync on a directory, and the data is already safe in the file. */
    char *dir = strdup(path);
    if (!dir) return;
    char *slash = strrchr(dir, '/');
    const char *d = ".";
    if (slash) {
        if (slash == dir) slash[1] = '\0';
        else *slash = '\0';
        d = dir;
    }
    int fd = open(d, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

actc_status actc_checkpoint_save(const char *path, actc_model *m, actc_optim *o,
                                 const actc_ckpt_meta *meta)
{
    if (!path || !m) return actc_set_error(ACTC_ERR_INVALID, "actc_checkpoint_save: path or model is NULL");
    actc_ckpt_meta md;
    if (meta) md = *meta;
    else memset(&md, 0, sizeof md);
    /* The names in the file are the objects' own, whatever meta says: peek
     * must tell the truth about what the file holds. */
    const char *mname = actc_model_name(m);
    if (strlen(mname) >= sizeof md.model)
        return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s: model name '%s' is too long", path, mname);
    snprintf(md.model, sizeof md.model, "%s", mname);
    snprintf(md.optim, sizeof md.optim, "%s", o ? actc_optim_name(o) : "");

    actc_tensor **ms = NULL, **os = NULL;
    int nm = actc_model_state(m, &ms), no = 0;
    actc_status s = check_tensors(path, ms, nm, "model");
    if (s != ACTC_OK) return s;
    if (o) {
        no = actc_optim_state(o, &os); /* creates any state not made yet */
        if (no < 0) return actc_last_status();
        s = check_tensors(path, os, no, "optimizer");
        if (s != ACTC_OK) return s;
    }

    size_t total = HEADER_BYTES + 4;
    for (int i = 0; i < nm; i++) total += tensor_bytes(ms[i]);
    total += 4;
    if (o) {
        total += 4 + strlen(actc_optim_name(o)) + 8 + 4;
        for (int i = 0; i < no; i++) total += tensor_bytes(os[i]);
    }
    total += 4;

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return actc_set_error(ACTC_ERR_OOM, "out of memory for a file name");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        s = actc_set_error(ACTC_ERR_IO, "cannot write checkpoint %s: %s", tmp, strerror(errno));
        free(tmp);
        return s;
    }
    writer w = {f, crc32(0L, Z_NULL, 0), 0};
    errno = 0;
    uint8_t hdr[HEADER_BYTES];
    memcpy(hdr, CKPT_MAGIC, 8);
    put_u32(hdr + 8, CKPT_VERSION);
    put_u64(hdr + 12, (uint64_t)total);
    encode_meta(hdr + 20, &md);
    w_bytes(&w, hdr, sizeof hdr);
    w_u32(&w, (uint32_t)nm);
    for (int i = 0; i < nm; i++) w_tensor(&w, ms[i]);
    w_u32(&w, o ? 1u : 0u);
    if (o) {
        w_name(&w, actc_optim_name(o));
        w_u64(&w, actc_optim_steps(o));
        w_u32(&w, (uint32_t)no);
        for (int i = 0; i < no; i++) w_tensor(&w, os[i]);
    }
    uint8_t crcb[4];
    put_u32(crcb, (uint32_t)w.crc);
    w_bytes(&w, crcb, 4);

    int err = w.failed;
    if (!err && fflush(f) != 0) err = errno;
    if (!err && fsync(fileno(f)) != 0) err = errno;
    if (fclose(f) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) {
        unlink(tmp);
        s = actc_set_error(ACTC_ERR_IO, "cannot write checkpoint %s: %s", path, strerror(err));
        free(tmp);
        return s;
    }
    free(tmp);
    fsync_dir_of(path);
    return ACTC_OK;
}

/* ---- reading -------------------------------------------------------------- */

/* Check magic, version and declared length of the first `have` bytes of a
 * file of `size` bytes; *declared receives the length, *version the format
 * version (2 or 3). */
static actc_status check_header(const char *path, const uint8_t *b, size_t have, size_t size,
                                uint64_t *declared, uint32_t *version)
{
    size_t mlen = have < 8 ? have : 8;
    if (memcmp(b, CKPT_MAGIC, mlen) != 0)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is not an actc checkpoint (bad magic)", path);
    if (have < 12)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is truncated (%zu bytes, not even a header)", path,
                              size);
    uint32_t v = get_u32(b + 8);
    if (v != CKPT_VERSION && v != 2u)
        return actc_set_error(ACTC_ERR_FORMAT,
                              "%s is a version %u checkpoint; this build reads versions 2 and %u", path,
                              (unsigned)v, CKPT_VERSION);
    *version = v;
    if (have < (size_t)HEADER_BYTES_V(v))
        return actc_set_error(ACTC_ERR_FORMAT, "%s is truncated (%zu bytes, not even a header)", path,
                              size);
    *declared = get_u64(b + 12);
    if (*declared < (uint64_t)HEADER_BYTES_V(v) + 12)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is corrupted: impossible length %llu in its header",
                              path, (unsigned long long)*declared);
    if (size < *declared)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is truncated: %zu of %llu bytes", path, size,
                              (unsigned long long)*declared);
    if (size > *declared)
        return actc_set_error(ACTC_ERR_FORMAT,
                              "%s is corrupted: %zu bytes where its header declares %llu", path, size,
                              (unsigned long long)*declared);
    return ACTC_OK;
}

static FILE *open_for_read(const char *path, size_t *size, actc_status *s)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *s = actc_set_error(ACTC_ERR_IO, "cannot open checkpoint %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        *s = actc_set_error(ACTC_ERR_IO, "cannot read checkpoint %s: %s", path, strerror(errno));
        fclose(f);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        *s = actc_set_error(ACTC_ERR_IO, "cannot read checkpoint %s: not a regular file", path);
        fclose(f);
        return NULL;
    }
    *size = (size_t)st.st_size;
    *s = ACTC_OK;
    return f;
}

actc_status actc_checkpoint_peek(const char *path, actc_ckpt_meta *meta)
{
    if (!path || !meta) return actc_set_error(ACTC_ERR_INVALID, "actc_checkpoint_peek: NULL argument");
    size_t size;
    actc_status s;
    FILE *f = open_for_read(path, &size, &s);
    if (!f) return s;
    uint8_t hdr[HEADER_BYTES];
    size_t have = fread(hdr, 1, sizeof hdr, f);
    int rerr = ferror(f);
    fclose(f);
    if (rerr) return actc_set_error(ACTC_ERR_IO, "cannot read checkpoint %s", path);
    uint64_t declared;
    uint32_t version;
    /* Also compares the file size with the declared length: a cut file is
     * reported here already, before the caller builds a model for it. */
    s = check_header(path, hdr, have, size, &declared, &version);
    if (s != ACTC_OK) return s;
    decode_meta(meta, hdr + 20, SETTINGS_BYTES(version));
    return ACTC_OK;
}

/* Bounds-checked cursor over the file image.  After the CRC passed, running
 * off the end means the writer and reader disagree (or a forged CRC): a
 * format error, not a truncation. */
typedef struct {
    const uint8_t *b;
    size_t pos, end;
    int bad;
} reader;

static const uint8_t *r_take(reader *r, size_t n)
{
    if (r->bad || n > r->end - r->pos) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *p = r->b + r->pos;
    r->pos += n;
    return p;
}
static uint32_t r_u32(reader *r)
{
    const uint8_t *p = r_take(r, 4);
    return p ? get_u32(p) : 0;
}
static uint64_t r_u64(reader *r)
{
    const uint8_t *p = r_take(r, 8);
    return p ? get_u64(p) : 0;
}

/* A tensor record as found in the file; data points into the file image. */
typedef struct {
    char name[48];
    int ndim;
    int shape[ACTC_MAX_DIMS];
    size_t numel;
    const uint8_t *data;
} rec;

static int r_name(reader *r, char *dst, size_t cap)
{
    uint32_t n = r_u32(r);
    if (n >= cap) {
        r->bad = 1;
        return 0;
    }
    const uint8_t *p = r_take(r, n);
    if (!p) return 0;
    memcpy(dst, p, n);
    dst[n] = '\0';
    return 1;
}

static int r_tensor(reader *r, rec *t)
{
    memset(t, 0, sizeof *t);
    if (!r_name(r, t->name, sizeof t->name)) return 0;
    uint32_t nd = r_u32(r);
    if (r->bad || nd > ACTC_MAX_DIMS) {
        r->bad = 1;
        return 0;
    }
    t->ndim = (int)nd;
    t->numel = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint32_t d = r_u32(r);
        if (d > 0x7fffffffu) r->bad = 1;
        t->shape[i] = (int)d;
        t->numel *= d;
        /* No overflow: the data must fit in the file anyway. */
        if (t->numel > r->end) r->bad = 1;
    }
    if (r->bad) return 0;
    t->data = r_take(r, 4 * t->numel);
    return t->data != NULL;
}

static void rec_shape_str(const rec *t, char *buf, size_t cap)
{
    actc_tensor tmp;
    tmp.ndim = t->ndim;
    memcpy(tmp.shape, t->shape, sizeof tmp.shape);
    actc_shape_str(&tmp, buf, cap);
}

/* Compare the records with the live tensors: same count, names, shapes. */
static actc_status match_tensors(const char *path, const char *what, const rec *recs, int nrec,
                                 actc_tensor **ts, int nt)
{
    if (nrec != nt)
        return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s holds %d %s tensors, expected %d", path,
                              nrec, what, nt);
    for (int i = 0; i < nt; i++) {
        const rec *r = &recs[i];
        const actc_tensor *t = ts[i];
        if (!t || !t->data)
            return actc_set_error(ACTC_ERR_STATE, "checkpoint %s: %s tensor %d has no data", path,
                                  what, i);
        if (r->name[0] && t->name[0] && strcmp(r->name, t->name) != 0)
            return actc_set_error(ACTC_ERR_INVALID,
                                  "checkpoint %s: %s tensor %d is '%s' in the file but '%s' here",
                                  path, what, i, r->name, t->name);
        int same = r->ndim == t->ndim;
        for (int k = 0; same && k < r->ndim; k++) same = r->shape[k] == t->shape[k];
        if (!same) {
            char a[64], b[64];
            rec_shape_str(r, a, sizeof a);
            actc_shape_str(t, b, sizeof b);
            return actc_set_error(ACTC_ERR_INVALID,
                                  "checkpoint %s: %s tensor %d (%s) has shape %s in the file, %s here", path,
                                  what, i, t->name[0] ? t->name : r->name, a, b);
        }
    }
    return ACTC_OK;
}

static void copy_in(actc_tensor *t, const rec *r)
{
    for (size_t i = 0; i < t->numel; i++) t->data[i] = get_f32(r->data + 4 * i);
}

/* Parse a count and that many tensor records into a new array (*out). */
static actc_status read_records(reader *r, const char *path, rec **out, int *n)
{
    uint32_t cnt = r_u32(r);
    /* Each record takes at least 12 bytes: bounds the allocation. */
    if (r->bad || cnt > (r->end - r->pos) / 12) {
        *out = NULL;
        return actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: bad tensor count", path);
    }
    rec *recs = calloc((size_t)cnt + 1, sizeof *recs);
    if (!recs) return actc_set_error(ACTC_ERR_OOM, "out of memory reading checkpoint %s", path);
    for (uint32_t i = 0; i < cnt; i++)
        if (!r_tensor(r, &recs[i])) {
            free(recs);
            *out = NULL;
            return actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: tensor record %u is invalid",
                                  path, (unsigned)i);
        }
    *out = recs;
    *n = (int)cnt;
    return ACTC_OK;
}

actc_status actc_checkpoint_load(const char *path, actc_model *m, actc_optim *o,
                                 actc_ckpt_meta *meta)
{
    if (!path || !m) return actc_set_error(ACTC_ERR_INVALID, "actc_checkpoint_load: path or model is NULL");
    size_t size;
    actc_status s;
    FILE *f = open_for_read(path, &size, &s);
    if (!f) return s;
    /* The file image is as large as the model: accounted as SCRATCH so that
     * a budget gives a clean OOM instead of an unaccounted spike. */
    uint8_t *buf = actc_mem_alloc(ACTC_MEM_SCRATCH, size);
    if (!buf) {
        fclose(f);
        return actc_last_status();
    }
    size_t got = size ? fread(buf, 1, size, f) : 0;
    int rerr = ferror(f);
    fclose(f);
    rec *mrec = NULL, *orec = NULL;
    if (rerr || got != size) {
        s = actc_set_error(ACTC_ERR_IO, "cannot read checkpoint %s", path);
        goto done;
    }
    uint64_t declared;
    uint32_t version;
    s = check_header(path, buf, size, size, &declared, &version);
    if (s != ACTC_OK) goto done;
    uint32_t stored_crc = get_u32(buf + size - 4);
    if ((uint32_t)crc_update(crc32(0L, Z_NULL, 0), buf, size - 4) != stored_crc) {
        s = actc_set_error(ACTC_ERR_FORMAT, "checksum mismatch: %s is corrupted", path);
        goto done;
    }

    actc_ckpt_meta md;
    decode_meta(&md, buf + 20, SETTINGS_BYTES(version));
    const char *mname = actc_model_name(m);
    if (strcmp(md.model, mname) != 0) {
        s = actc_set_error(ACTC_ERR_INVALID, "checkpoint %s holds model %s, not %s", path, md.model,
                           mname);
        goto done;
    }

    reader r = {buf, HEADER_BYTES_V(version), size - 4, 0};
    int nmrec = 0, norec = 0;
    s = read_records(&r, path, &mrec, &nmrec);
    if (s != ACTC_OK) goto done;
    uint32_t has_opt = r_u32(&r);
    char oname[48] = "";
    uint64_t osteps = 0;
    if (has_opt == 1) {
        if (!r_name(&r, oname, sizeof oname)) {
            s = actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: bad optimizer name", path);
            goto done;
        }
        osteps = r_u64(&r);
        s = read_records(&r, path, &orec, &norec);
        if (s != ACTC_OK) goto done;
    }
    if (r.bad || has_opt > 1 || r.pos != r.end) {
        s = actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: unexpected layout after the tensors",
                           path);
        goto done;
    }

    actc_tensor **ms = NULL;
    int nm = actc_model_state(m, &ms);
    s = match_tensors(path, "model", mrec, nmrec, ms, nm);
    if (s != ACTC_OK) goto done;
    actc_tensor **os = NULL;
    int no = 0;
    if (o) {
        if (!has_opt) {
            s = actc_set_error(ACTC_ERR_INVALID, "checkpoint %s holds no optimizer state", path);
            goto done;
        }
        if (strcmp(oname, actc_optim_name(o)) != 0) {
            s = actc_set_error(ACTC_ERR_INVALID, "checkpoint %s holds %s optimizer state, not %s",
                               path, oname, actc_optim_name(o));
            goto done;
        }
        /* Allocating zero state is not a visible change (zero momentum and
         * moments are the initial state), so it may precede the checks. */
        no = actc_optim_state(o, &os);
        if (no < 0) {
            s = actc_last_status();
            goto done;
        }
        s = match_tensors(path, "optimizer", orec, norec, os, no);
        if (s != ACTC_OK) goto done;
    }

    /* Every check passed: now, and only now, modify the caller's objects. */
    for (int i = 0; i < nm; i++) copy_in(ms[i], &mrec[i]);
    if (o) {
        for (int i = 0; i < no; i++) copy_in(os[i], &orec[i]);
        actc_optim_set_steps(o, osteps);
    }
    if (meta) *meta = md;
    s = ACTC_OK;
done:
    free(mrec);
    free(orec);
    actc_mem_free(buf);
    return s;
}
