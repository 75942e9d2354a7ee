/* The sum of one float buffer over the ranks, started without blocking and
 * moved forward by tests, so that buckets overlap backward.
 *
 * fp32: MPI_Iallreduce in place.
 *
 * 8 bits (AGoQ section 5, "overflow-free" because nothing is summed in 8
 * bits): the buffer is cut into blocks of ACTC_DYN8_BLOCK (the buckets
 * start every parameter on a block, replica.c, so no block mixes two
 * parameters' scales, and a gradient held in 8 bits keeps its own blocks
 * and codes until the sum) and the blocks
 * into P shares of whole blocks, share r being blocks [nb r / P, nb (r+1)
 * / P) (the last block holds the rest of the buffer, its absmax covers only
 * it; with fewer blocks than ranks some shares are empty).
 *   spread: each rank encodes every other rank's share with the dynamic map
 *           (per block an fp32 absmax and one byte per value) and an
 *           all-to-all delivers to rank r every rank's codes of share r;
 *   sum:    r decodes them and adds them in fp32 to its own share's values,
 *           which it never quantized (one rounding fewer than the paper's,
 *           where a rank's own codes come back to it too; the reference
 *           implementation sums in bf16), and encodes the sum;
 *   gather: an all-gather gives every rank every encoded sum, which each
 *           rank decodes over its buffer, its own share included, so that
 *           all ranks hold the same bits.
 * The absmax of a block is taken in fp32 and values are scaled by it before
 * the lookup, so a block of 1e-8s next to one of 1e4s keeps both: the
 * relative error per block is the map's, whatever the range. */
#include "dist.h"
#include "../codec/codec.h"
#include "../core/core.h"
#include <limits.h>
#include <string.h>

/* Share r of n values: [*lo, *lo + *len). */
static void share(size_t n, int P, int r, size_t *lo, size_t *len)
{
    const size_t G = ACTC_DYN8_BLOCK, nb = (n + G - 1) / G;
    const size_t b0 = nb * (size_t)r / (size_t)P, b1 = nb * (size_t)(r + 1) / (size_t)P;
    const size_t hi = b1 * G < n ? b1 * G : n;
    *lo = b0 * G < n ? b0 * G : n;
    *len = hi - *lo;
}

static actc_status too_big(size_t bytes)
{
    return actc_set_error(ACTC_ERR_COMM, "an all-reduce exchanging over %zu bytes: MPI counts stop at %d; use "
                          "smaller buckets", bytes, INT_MAX);
}

/* x[lo, lo + len) (whole blocks but the buffer's last) as a dyn8 payload
 * into dst: the blocks that are codes already copied, the others encoded. */
static void encode_share(const actc__allreduce *a, size_t lo, size_t len, uint8_t *dst)
{
    const size_t G = ACTC_DYN8_BLOCK;
    if (!a->codes) {
        actc_dyn8_encode(a->x + lo, len, ACTC_DYN8_BLOCK, dst);
        return;
    }
    const size_t nb = (len + G - 1) / G;
#pragma omp parallel for schedule(static) if (len >= 32768)
    for (size_t j = 0; j < nb; j++) {
        uint8_t codes[ACTC_DYN8_BLOCK];
        const size_t b = lo / G + j, blen = len - j * G < G ? len - j * G : G;
        float absmax;
        if (!a->codes(a->codes_user, b, &absmax, codes)) absmax = actc_dyn8_encode_block(a->x + b * G, blen, codes);
        actc_dyn8_put_block(dst, len, j, absmax, codes);
    }
}

static actc_status start8(actc_dist *d, actc__allreduce *a)
{
    const int P = d->size, me = d->rank;
    int *sc = a->cnt, *sd = sc + P, *rc = sd + P, *rd = rc + P, *gc = rd + P, *gd = gc + P;
    size_t lo, len, mylo, mylen, sbytes = 0, rbytes = 0, gbytes = 0;
    share(a->n, P, me, &mylo, &mylen);
    const size_t mine = actc_dyn8_bytes(mylen, ACTC_DYN8_BLOCK);
    for (int r = 0; r < P; r++) {
        share(a->n, P, r, &lo, &len);
        const size_t b = actc_dyn8_bytes(len, ACTC_DYN8_BLOCK), in = r == me ? 0 : mine, out = r == me ? 0 : b;
        if (sbytes + out > INT_MAX || rbytes + in > INT_MAX || gbytes + b > INT_MAX)
            return too_big(sbytes + out > rbytes + in ? (sbytes + out > gbytes + b ? sbytes + out : gbytes + b)
                                                      : (rbytes + in > gbytes + b ? rbytes + in : gbytes + b));
        sc[r] = (int)out, sd[r] = (int)sbytes, sbytes += out;
        rc[r] = (int)in, rd[r] = (int)rbytes, rbytes += in;
        gc[r] = (int)b, gd[r] = (int)gbytes, gbytes += b;
    }
    if (!(a->sbuf = actc_mem_alloc(ACTC_MEM_COMM, sbytes ? sbytes : 1)) ||
        !(a->rbuf = actc_mem_alloc(ACTC_MEM_COMM, rbytes ? rbytes : 1)) ||
        !(a->gbuf = actc_mem_alloc(ACTC_MEM_COMM, gbytes ? gbytes : 1)))
        return actc_last_status();
    for (int r = 0; r < P; r++) {
        if (r == me || !sc[r]) continue;
        share(a->n, P, r, &lo, &len);
        encode_share(a, lo, len, a->sbuf + sd[r]);
    }
    /* What this rank contributes: its all-to-all sends, and its share to
     * each other rank in the all-gather (what MPI's algorithm forwards of
     * the others' shares on top is not counted). */
    a->sent = sbytes + mine * (size_t)(P - 1);
    int e = MPI_Ialltoallv(a->sbuf, sc, sd, MPI_BYTE, a->rbuf, rc, rd, MPI_BYTE, d->comm, &a->req);
    if (e != MPI_SUCCESS) return actc__mpi_error(e, "MPI_Ialltoallv of 8-bit gradients");
    a->phase = AR_SPREAD;
    return ACTC_OK;
}

/* The all-to-all is done: sum the share and encode it. */
static void sum8(actc_dist *d, actc__allreduce *a)
{
    const int P = d->size, me = d->rank;
    const int *rd = a->cnt + 3 * P, *gd = a->cnt + 5 * P;
    size_t lo, len;
    share(a->n, P, me, &lo, &len);
    for (int r = 0; r < P; r++)
        if (r != me && len) actc_dyn8_decode_add(a->rbuf + rd[r], len, ACTC_DYN8_BLOCK, a->x + lo);
    if (len) actc_dyn8_encode(a->x + lo, len, ACTC_DYN8_BLOCK, a->gbuf + gd[me]);
    a->phase = AR_SUMMED;
}

static actc_status gather8(actc_dist *d, actc__allreduce *a)
{
    const int P = d->size;
    const int *gc = a->cnt + 4 * P, *gd = a->cnt + 5 * P;
    int e = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, a->gbuf, gc, gd, MPI_BYTE, d->gather, &a->req);
    if (e != MPI_SUCCESS) return actc__mpi_error(e, "MPI_Iallgatherv of 8-bit gradients");
    a->phase = AR_GATHER;
    return ACTC_OK;
}

static void finish8(actc_dist *d, actc__allreduce *a)
{
    const int P = d->size;
    const int *gd = a->cnt + 5 * P;
    for (int r = 0; r < P; r++) {
        size_t lo, len;
        share(a->n, P, r, &lo, &len);
        if (len) actc_dyn8_decode(a->gbuf + gd[r], len, ACTC_DYN8_BLOCK, a->x + lo);
    }
}

actc_status actc__allreduce_start(actc_dist *d, actc__allreduce *a, int bits, float *x, size_t n,
                                  actc__codes_fn codes, void *user)
{
    memset(a, 0, sizeof *a);
    a->req = MPI_REQUEST_NULL;
    a->bits = bits;
    a->x = x;
    a->n = n;
    a->codes = codes;
    a->codes_user = user;
    if (bits != 32 && bits != 8)
        return actc_set_error(ACTC_ERR_INVALID, "an all-reduce in %d bits: 32 (fp32) or 8 (AGoQ's)", bits);
    if (d->size == 1 || n == 0) { /* nothing to exchange */
        a->phase = AR_DONE;
        return ACTC_OK;
    }
    if (bits == 32) {
        if (n > INT_MAX) return too_big(n * sizeof *x);
        int e = MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, d->comm, &a->req);
        if (e != MPI_SUCCESS) return actc__mpi_error(e, "MPI_Iallreduce of gradients");
        a->sent = 2 * (size_t)(d->size - 1) * n * sizeof *x / (size_t)d->size;
        a->phase = AR_SPREAD;
        return ACTC_OK;
    }
    if (!(a->cnt = actc_mem_alloc(ACTC_MEM_COMM, 6 * (size_t)d->size * sizeof *a->cnt))) return actc_last_status();
    return start8(d, a);
}

actc_status actc__allreduce_progress(actc_dist *d, actc__allreduce *a, int wait, int may_gather)
{
    while (a->phase == AR_SPREAD || a->phase == AR_SUMMED || a->phase == AR_GATHER) {
        if (a->phase == AR_SUMMED) {
            if (!wait && !may_gather) return ACTC_OK;
            actc_status s = gather8(d, a);
            if (s != ACTC_OK) return s;
            continue;
        }
        int done = 0, e = MPI_SUCCESS;
        if (wait) {
            actc_status s = actc__dist_wait(d, &a->req, "a gradient all-reduce");
            if (s != ACTC_OK) return s;
            done = 1;
        } else {
            e = MPI_Test(&a->req, &done, MPI_STATUS_IGNORE);
        }
        if (e != MPI_SUCCESS) return actc__mpi_error(e, "waiting for a gradient all-reduce");
        if (!done) return ACTC_OK;
        if (a->bits == 32 || a->phase == AR_GATHER) {
            if (a->bits == 8) finish8(d, a);
            a->phase = AR_DONE;
        } else {
            sum8(d, a);
        }
    }
    return ACTC_OK;
}

float actc__allreduce_block(const actc_dist *d, const actc__allreduce *a, size_t b, const uint8_t **codes,
                            size_t *len)
{
    const int P = d->size;
    const int *gd = a->cnt + 5 * P;
    const size_t G = ACTC_DYN8_BLOCK, nb = (a->n + G - 1) / G;
    int r = 0; /* the share holding block b: blocks [nb r / P, nb (r + 1) / P) */
    while (r + 1 < P && nb * (size_t)(r + 1) / (size_t)P <= b) r++;
    size_t lo, slen;
    share(a->n, P, r, &lo, &slen);
    return actc_dyn8_get_block(a->gbuf + gd[r], slen, b - lo / G, codes, len);
}

void actc__allreduce_release(actc__allreduce *a)
{
    actc_mem_free(a->cnt);
    actc_mem_free(a->sbuf);
    actc_mem_free(a->rbuf);
    actc_mem_free(a->gbuf);
    a->cnt = NULL;
    a->sbuf = a->rbuf = a->gbuf = NULL;
}
