/* Batching, shuffling and augmentation of an in-memory image dataset.
 *
 * Reproducibility is the point: a resumed run must see exactly the batches the
 * interrupted run would have seen.  So nothing here carries state from one
 * call to the next except a cache:
 *  - the order of epoch e is a Fisher-Yates shuffle driven by the counter-based
 *    generator with key actc_rng_key(seed, e, PERM_TAG): a pure function of
 *    (seed, e).  It is cached for the last epoch asked for;
 *  - the augmentation of the sample at position p of epoch e (p = index*batch
 *    + b) is drawn from key actc_rng_key(seed, e, AUG_TAG) at counters 4p..4p+2:
 *    a pure function of (seed, e, p), whatever the thread count.
 *
 * Augmentation follows torchvision's RandomCrop(padding=pad) then
 * RandomHorizontalFlip: the image is padded with pixel value 0 (so a padded
 * pixel normalises to (0 - mean) / std, as in torchvision where Normalize runs
 * after the crop), a window of the original size is taken at an offset
 * (dy, dx) uniform in [-pad, pad]^2, and then mirrored with probability 1/2.
 *
 * The loader keeps a pointer to the dataset (no copy: Fashion-MNIST is 47 MB),
 * so the dataset must outlive the loader. */
#include "actc.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PERM_TAG 0x7065726dULL /* "perm" */
#define AUG_TAG 0x61756721ULL  /* "aug!" */
/* Pixels per batch above which the batch is split over threads.  The work is
 * ~1 ns per pixel: a Fashion-MNIST batch of 128 (100k pixels) takes 0.1 ms on
 * one core, less than what an OpenMP fork costs when the cores are busy
 * (measured: 2 threads on a loaded 2-core machine made an epoch 30x slower).
 * Only large batches of large images are worth it. */
#define LOADER_PAR_MIN (1u << 20)

struct actc_loader {
    const actc_image_dataset *d;
    int batch;
    int drop_last;
    actc_loader_opts o;
    int nbatches;
    int32_t *labels;   /* batch entries, returned by actc_loader_get        */
    int *perm;         /* order of epoch perm_epoch (NULL when !shuffle)     */
    int perm_epoch;    /* -1: perm not computed yet                          */
};

actc_loader *actc_loader_new(const actc_image_dataset *d, int batch, int drop_last,
                             const actc_loader_opts *o)
{
    if (!d || !d->pixels || !d->labels || d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0) {
        actc_set_error(ACTC_ERR_INVALID, "actc_loader_new: the dataset is empty or not loaded");
        return NULL;
    }
    if (batch <= 0) {
        actc_set_error(ACTC_ERR_INVALID, "actc_loader_new: batch size %d must be positive", batch);
        return NULL;
    }
    /* Defaults when o is NULL: no normalisation, no augmentation, in order. */
    actc_loader_opts opts = {.mean = 0.0f, .std = 1.0f};
    if (o) opts = *o;
    if (!isfinite(opts.mean) || !isfinite(opts.std) || !(opts.std > 0.0f)) {
        actc_set_error(ACTC_ERR_INVALID,
                       "actc_loader_new: normalisation mean %g / std %g (std must be finite and > 0)",
                       (double)opts.mean, (double)opts.std);
        return NULL;
    }
    if (opts.crop_pad < 0 || opts.crop_pad > d->h || opts.crop_pad > d->w) {
        actc_set_error(ACTC_ERR_INVALID,
                       "actc_loader_new: crop padding %d must be in [0, %d] for %d x %d images",
                       opts.crop_pad, d->h < d->w ? d->h : d->w, d->h, d->w);
        return NULL;
    }
    /* In 64 bits: n + batch - 1 overflows an int for a batch near INT_MAX. */
    const int nb = (int)(drop_last ? (int64_t)d->n / batch : ((int64_t)d->n + batch - 1) / batch);
    if (nb == 0) {
        /* drop_last with batch > n: every epoch would be empty, which is
         * never what the caller meant. */
        actc_set_error(ACTC_ERR_INVALID,
                       "actc_loader_new: batch size %d is larger than the dataset (%d images) "
                       "and drop_last is set: no batch at all",
                       batch, d->n);
        return NULL;
    }
    actc_loader *l = calloc(1, sizeof *l);
    if (!l) {
        actc_set_error(ACTC_ERR_OOM, "out of memory for a data loader");
        return NULL;
    }
    l->d = d;
    l->batch = batch;
    l->drop_last = drop_last != 0;
    l->o = opts;
    l->nbatches = nb;
    l->perm_epoch = -1;
    /* A batch never holds more than the data set. */
    l->labels = malloc((size_t)(batch < d->n ? batch : d->n) * sizeof *l->labels);
    if (opts.shuffle) l->perm = malloc((size_t)d->n * sizeof *l->perm);
    if (!l->labels || (opts.shuffle && !l->perm)) {
        actc_loader_free(l);
        actc_set_error(ACTC_ERR_OOM, "out of memory for a data loader over %d images", d->n);
        return NULL;
    }
    return l;
}

void actc_loader_free(actc_loader *l)
{
    if (!l) return;
    free(l->labels);
    free(l->perm);
    free(l);
}

int actc_loader_num_batches(const actc_loader *l) { return l ? l->nbatches : 0; }

/* Fisher-Yates from the last element down.  The index j is drawn with
 * Lemire's multiply-shift on a full 32-bit Philox word rather than from
 * actc_rand_uniform: the float has only 24 random bits, which would bias the
 * draw by up to n / 2^24 (0.4% for 60000 images) and leave indices unreachable
 * for n > 2^24.  Same generator, same purity in (seed, epoch). */
static void compute_perm(int *perm, int n, uint64_t seed, int epoch)
{
    uint64_t key = actc_rng_key(seed, (uint64_t)epoch, PERM_TAG);
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        uint32_t r[4];
        actc_philox(key, (uint64_t)i, r);
        int j = (int)(((uint64_t)r[0] * (uint64_t)(i + 1)) >> 32);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* Offset in [-pad, pad] from a uniform float. */
static int draw_shift(float u, int pad)
{
    int k = (int)(u * (float)(2 * pad + 1));
    if (k > 2 * pad) k = 2 * pad; /* u < 1, but guard the float product */
    return k - pad;
}

actc_status actc_loader_get(actc_loader *l, int epoch, int index, actc_tensor **x,
                            const int32_t **labels, int *batch_size)
{
    if (!l || !x) return actc_set_error(ACTC_ERR_INVALID, "actc_loader_get: loader or x is NULL");
    *x = NULL;
    if (epoch < 0) return actc_set_error(ACTC_ERR_INVALID, "actc_loader_get: epoch %d is negative", epoch);
    if (index < 0 || index >= l->nbatches)
        return actc_set_error(ACTC_ERR_INVALID,
                              "actc_loader_get: batch index %d out of range [0, %d)", index,
                              l->nbatches);
    const actc_image_dataset *d = l->d;
    int start = index * l->batch;
    int bs = d->n - start < l->batch ? d->n - start : l->batch;
    int shape[4] = {bs, d->c, d->h, d->w};
    actc_tensor *t = actc_tensor_new(ACTC_MEM_SCRATCH, 4, shape);
    if (!t) return actc_last_status();

    if (l->perm && l->perm_epoch != epoch) {
        compute_perm(l->perm, d->n, l->o.seed, epoch);
        l->perm_epoch = epoch;
    }
    const int *perm = l->perm;
    const int C = d->c, H = d->h, W = d->w, pad = l->o.crop_pad, flip = l->o.hflip;
    const size_t img = (size_t)C * H * W;
    /* One multiply-add per pixel: x = p * (1/(255 std)) - mean/std. */
    const float scale = 1.0f / (255.0f * l->o.std);
    const float shift = -l->o.mean / l->o.std;
    const uint64_t akey = actc_rng_key(l->o.seed, (uint64_t)epoch, AUG_TAG);
    int32_t *lab = l->labels;
    float *out = t->data;

#pragma omp parallel for schedule(static) if (bs * img >= LOADER_PAR_MIN)
    for (int b = 0; b < bs; b++) {
        int pos = start + b;
        int src = perm ? perm[pos] : pos;
        lab[b] = d->labels[src];
        int dy = 0, dx = 0, mirror = 0;
        uint64_t c0 = 4 * (uint64_t)pos;
        if (pad > 0) {
            dy = draw_shift(actc_rand_uniform(akey, c0), pad);
            dx = draw_shift(actc_rand_uniform(akey, c0 + 1), pad);
        }
        if (flip) mirror = actc_rand_uniform(akey, c0 + 2) < 0.5f;
        const uint8_t *in = d->pixels + (size_t)src * img;
        float *o = out + (size_t)b * img;
        if (!dy && !dx && !mirror) {
            for (size_t i = 0; i < img; i++) o[i] = (float)in[i] * scale + shift;
            continue;
        }
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++) {
                int sy = y + dy;
                float *orow = o + ((size_t)c * H + y) * W;
                if (sy < 0 || sy >= H) {
                    for (int xx = 0; xx < W; xx++) orow[xx] = shift; /* padded pixel 0 */
                    continue;
                }
                const uint8_t *irow = in + ((size_t)c * H + sy) * W;
                for (int xx = 0; xx < W; xx++) {
                    int sx = (mirror ? W - 1 - xx : xx) + dx;
                    orow[xx] = (sx < 0 || sx >= W) ? shift : (float)irow[sx] * scale + shift;
                }
            }
    }
    *x = t;
    if (labels) *labels = lab;
    if (batch_size) *batch_size = bs;
    return ACTC_OK;
}
