/* Text corpora for byte-level language models (vocabulary 256): loading, the
 * train/validation split and random windows.
 *
 * Loading.  A path naming a file is read whole (any kind of file that can be
 * read to its end).  A path naming a directory is walked recursively and every
 * regular file below it is read, in the byte order (strcmp) of the full paths,
 * and concatenated with nothing in between.  Symbolic links to regular files
 * are read; symbolic links to directories are not followed (no cycles).  The
 * bytes are taken as they are: no encoding check, no newline conversion.
 *
 * Split.  cut = floor(n * (1 - val_fraction)), then moved forward to the next
 * line start (the byte after the next '\n'; a cut that already is a line
 * start stays).  [0, cut) is the train part, [cut, n) the held-out validation
 * part, so validation is the last val_fraction of the text from the line after
 * the cut.  Both parts must hold at least 2 bytes (one input and its target),
 * otherwise the corpus is rejected with ACTC_ERR_FORMAT: in particular a
 * corpus with no line break after the cut has no validation part.
 *
 * The default corpus (tools/make_kjv_corpus.sh: the King James Bible, one
 * verse per line, 4,137,850 bytes) with val_fraction 0.1 cuts at byte
 * 3,724,065, inside Acts 21:40; the validation part starts at the next verse,
 * Acts 22:1 (byte 3,724,089), and runs to Revelation 22:21: 413,761 bytes
 * (10.0%), the last seven chapters of Acts, the Epistles and Revelation.  A
 * val_fraction of 0.09266 holds out exactly the books Romans to Revelation
 * (383,397 bytes from Romans 1:1; any f in [0.092656, 0.09269) does).
 *
 * Memory.  The corpus bytes are allocated with plain malloc, not with the
 * accounting allocator: like the image sets (src/data/idx.c) they are the
 * input, and the memory budget measures what a training step needs, not the
 * size of the data set.
 *
 * Windows.  actc_text_batch draws window b of step `step` from the Philox
 * stream key actc_rng_key(seed, step, TEXT_TAG + split) at counter b / 2,
 * words 2*(b % 2) and 2*(b % 2) + 1 joined into 64 random bits r; the offset
 * in the part is the high 64 bits of r * m, m = part length - T (the number of
 * windows of T+1 bytes that fit).  So an offset is a pure function of (seed,
 * split, step, b), independent of B and of the thread count, and its bias is
 * at most m / 2^64 (nothing that matters even for multi-gigabyte corpora; a
 * 32-bit word would bias a 4 MB corpus by up to 0.1%). */
#include "actc.h"
#include <math.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>

#define TEXT_TAG 0x74657874ULL /* "text" */
#define READ_CHUNK ((size_t)1 << 20)

/* ---- a growable byte buffer ------------------------------------------------ */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytebuf;

static int buf_reserve(bytebuf *b, size_t extra)
{
    if (extra <= b->cap - b->n) return 0;
    if (extra > SIZE_MAX - b->n) return -1;
    size_t want = b->n + extra;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < want) cap = cap > SIZE_MAX / 2 ? want : cap * 2;
    uint8_t *q = realloc(b->p, cap);
    if (!q) return -1;
    b->p = q;
    b->cap = cap;
    return 0;
}

/* Append the whole content of the file at path. */
static actc_status read_file(const char *path, bytebuf *b)
{
    /* A device or a socket may never end: refused, as the graph and
     * checkpoint readers refuse them.  A FIFO is a pipe (a shell's <(...)
     * is one): read, but opened without blocking, since opening a named one
     * with no writer would wait forever; with no writer it reads as empty
     * and says why. */
    struct stat pre;
    const int known = stat(path, &pre) == 0, fifo = known && S_ISFIFO(pre.st_mode);
    if (known && (S_ISCHR(pre.st_mode) || S_ISBLK(pre.st_mode) || S_ISSOCK(pre.st_mode)))
        return actc_set_error(ACTC_ERR_IO, "cannot read text file %s: not a regular file (a %s)", path,
                              S_ISSOCK(pre.st_mode) ? "socket" : "device");
    const int fd = open(path, O_RDONLY | O_CLOEXEC | (fifo ? O_NONBLOCK : 0));
    FILE *f = NULL;
    if (fd >= 0) {
        if (fifo) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); /* reads wait for the writer */
        if (!(f = fdopen(fd, "rb"))) close(fd);
    }
    if (!f) return actc_set_error(ACTC_ERR_IO, "cannot open text file %s: %s", path, strerror(errno));
    const size_t start = b->n;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        if (buf_reserve(b, (size_t)st.st_size + 1) != 0) {
            fclose(f);
            return actc_set_error(ACTC_ERR_OOM, "cannot hold %s (%lld bytes) in memory", path,
                                  (long long)st.st_size);
        }
    }
    for (;;) {
        if (b->cap == b->n && buf_reserve(b, READ_CHUNK) != 0) {
            fclose(f);
            return actc_set_error(ACTC_ERR_OOM, "out of memory reading %s (%zu bytes so far)", path,
                                  b->n);
        }
        size_t got = fread(b->p + b->n, 1, b->cap - b->n, f);
        b->n += got;
        if (got == 0) break;
    }
    int err = ferror(f) ? errno : 0;
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return actc_set_error(ACTC_ERR_IO, "cannot read text file %s: %s", path,
                              err ? strerror(err) : "read error");
    if (fifo && b->n == start)
        return actc_set_error(ACTC_ERR_IO, "text file %s is a FIFO that gave nothing: no writer had it open (start "
                                           "the writer first, or use a file)", path);
    return ACTC_OK;
}

/* ---- directory walk ---------------------------------------------------------- */

typedef struct {
    char **v;
    size_t n, cap;
} pathlist;

static void paths_free(pathlist *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), c = strlen(name);
    int slash = a > 0 && dir[a - 1] == '/';
    char *s = malloc(a + c + 2);
    if (!s) return NULL;
    memcpy(s, dir, a);
    if (!slash) s[a++] = '/';
    memcpy(s + a, name, c + 1);
    return s;
}

/* Collect every regular file below dir (recursively) into l.  Takes
 * ownership of nothing; on failure l holds what was found so far. */
static actc_status walk(const char *dir, pathlist *l)
{
    DIR *d = opendir(dir);
    if (!d) return actc_set_error(ACTC_ERR_IO, "cannot open text directory %s: %s", dir, strerror(errno));
    actc_status s = ACTC_OK;
    struct dirent *e;
    for (;;) {
        errno = 0;
        e = readdir(d);
        if (!e) {
            if (errno)
                s = actc_set_error(ACTC_ERR_IO, "cannot list text directory %s: %s", dir,
                                   strerror(errno));
            break;
        }
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = join(dir, e->d_name);
        if (!p) {
            s = actc_set_error(ACTC_ERR_OOM, "out of memory listing %s", dir);
            break;
        }
        struct stat st;
        if (lstat(p, &st) != 0) {
            s = actc_set_error(ACTC_ERR_IO, "cannot stat %s: %s", p, strerror(errno));
            free(p);
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            s = walk(p, l);
            free(p);
            if (s != ACTC_OK) break;
            continue;
        }
        /* A symbolic link counts when it leads to a regular file (a dangling
         * link or one to a directory is skipped). */
        if (S_ISLNK(st.st_mode) && stat(p, &st) != 0) st.st_mode = 0;
        if (!S_ISREG(st.st_mode)) {
            free(p);
            continue;
        }
        if (l->n == l->cap) {
            size_t cap = l->cap ? l->cap * 2 : 16;
            char **v = realloc(l->v, cap * sizeof *v);
            if (!v) {
                free(p);
                s = actc_set_error(ACTC_ERR_OOM, "out of memory listing %s", dir);
                break;
            }
            l->v = v;
            l->cap = cap;
        }
        l->v[l->n++] = p;
    }
    closedir(d);
    return s;
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ---- load -------------------------------------------------------------------- */

actc_status actc_text_load(const char *path, double val_fraction, actc_text_corpus *out)
{
    if (out) memset(out, 0, sizeof *out);
    if (!path || !out) return actc_set_error(ACTC_ERR_INVALID, "actc_text_load: NULL argument");
    if (!(val_fraction > 0.0 && val_fraction < 1.0))
        return actc_set_error(ACTC_ERR_INVALID,
                              "text corpus %s: validation fraction %.9g must be in (0, 1)", path,
                              val_fraction);
    struct stat st;
    if (stat(path, &st) != 0)
        return actc_set_error(ACTC_ERR_IO, "cannot open text corpus %s: %s", path, strerror(errno));

    bytebuf b = {0};
    actc_status s = ACTC_OK;
    size_t nfiles = 1;
    if (S_ISDIR(st.st_mode)) {
        pathlist l = {0};
        s = walk(path, &l);
        if (s == ACTC_OK) {
            if (l.n > 1) qsort(l.v, l.n, sizeof *l.v, cmp_path);
            for (size_t i = 0; i < l.n && s == ACTC_OK; i++) s = read_file(l.v[i], &b);
        }
        nfiles = l.n;
        paths_free(&l);
    } else {
        s = read_file(path, &b);
    }
    if (s != ACTC_OK) goto fail;

    const size_t n = b.n;
    if (n == 0) {
        if (S_ISDIR(st.st_mode))
            s = actc_set_error(ACTC_ERR_FORMAT, "text corpus %s is empty: %s", path,
                               nfiles ? "its files hold no bytes" : "the directory holds no files");
        else
            s = actc_set_error(ACTC_ERR_FORMAT, "text corpus %s is empty", path);
        goto fail;
    }

    /* The split (see the file comment). */
    double keep = (double)n * (1.0 - val_fraction);
    size_t cut = keep <= 0.0 ? 0 : keep >= (double)n ? n : (size_t)keep;
    while (cut > 0 && cut < n && b.p[cut - 1] != '\n') cut++;
    if (cut < 2 || n - cut < 2) {
        s = actc_set_error(ACTC_ERR_FORMAT,
                           "text corpus %s (%zu bytes): the split for validation fraction %.9g "
                           "(byte %zu, moved to the line start %zu) leaves %zu train and %zu "
                           "validation bytes; each part needs at least 2 (is the text long "
                           "enough, with line breaks?)",
                           path, n, val_fraction, keep <= 0.0 ? (size_t)0 : (size_t)keep, cut, cut,
                           n - cut);
        goto fail;
    }

    /* Shrink to fit: the read buffer may be up to twice the corpus. */
    if (b.cap > n) {
        uint8_t *q = realloc(b.p, n);
        if (q) b.p = q;
    }
    out->data = b.p;
    out->n = n;
    out->train_end = cut;
    snprintf(out->source, sizeof out->source, "%s", path);
    return ACTC_OK;

fail:
    free(b.p);
    return s;
}

void actc_text_free(actc_text_corpus *c)
{
    if (!c) return;
    free(c->data);
    memset(c, 0, sizeof *c);
}

/* ---- batches ----------------------------------------------------------------- */

/* High 64 bits of the 128-bit product a * b (portable C11). */
static uint64_t mulhi64(uint64_t a, uint64_t b)
{
    uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

actc_status actc_text_batch(const actc_text_corpus *c, int split, int B, int T, uint64_t seed,
                            uint64_t step, int32_t *ids)
{
    if (!c || !c->data || c->n == 0 || c->train_end > c->n)
        return actc_set_error(ACTC_ERR_INVALID, "actc_text_batch: the corpus is not loaded");
    if (split != 0 && split != 1)
        return actc_set_error(ACTC_ERR_INVALID,
                              "actc_text_batch: split %d must be 0 (train) or 1 (validation)", split);
    if (B <= 0 || T <= 0)
        return actc_set_error(ACTC_ERR_INVALID,
                              "actc_text_batch: batch %d and context length %d must be positive", B,
                              T);
    if (!ids) return actc_set_error(ACTC_ERR_INVALID, "actc_text_batch: ids is NULL");

    const uint8_t *part = split ? c->data + c->train_end : c->data;
    const size_t len = split ? c->n - c->train_end : c->train_end;
    const size_t W = (size_t)T + 1;
    if (len < W)
        return actc_set_error(ACTC_ERR_INVALID,
                              "text corpus %s: the %s part is %zu bytes, shorter than one window "
                              "of context %d + 1 = %zu bytes",
                              c->source, split ? "validation" : "train", len, T, W);

    const uint64_t m = (uint64_t)(len - W + 1); /* window starts that fit */
    const uint64_t key = actc_rng_key(seed, step, TEXT_TAG + (uint64_t)split);
    for (int b = 0; b < B; b++) {
        uint32_t r[4];
        actc_philox(key, (uint64_t)b >> 1, r);
        const int w = (b & 1) * 2;
        const uint64_t x = ((uint64_t)r[w] << 32) | r[w + 1];
        const size_t off = (size_t)mulhi64(x, m);
        const uint8_t *src = part + off;
        int32_t *dst = ids + (size_t)b * W;
        for (size_t t = 0; t < W; t++) dst[t] = src[t];
    }
    return ACTC_OK;
}

double actc_text_unigram_bpb(const actc_text_corpus *c)
{
    /* Byte frequencies of the train part (add-one smoothed, so a byte only
     * the validation part has costs a finite amount), scored on validation. */
    if (!c || !c->data || c->train_end >= c->n) return 0;
    double cnt[256], h = 0;
    for (int i = 0; i < 256; i++) cnt[i] = 1;
    for (size_t i = 0; i < c->train_end; i++) cnt[c->data[i]] += 1;
    const double total = (double)c->train_end + 256;
    for (size_t i = c->train_end; i < c->n; i++) h -= log2(cnt[c->data[i]] / total);
    return h / (double)(c->n - c->train_end);
}
