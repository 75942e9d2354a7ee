/* Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011): output i
 * of stream `key` depends only on (key, i), so any thread can produce any
 * element and results are independent of the thread count. */
#include "core.h"
#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void actc_philox(uint64_t key, uint64_t counter, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

float actc_rand_uniform(uint64_t key, uint64_t i)
{
    /* One Philox call yields 4 words: element i uses word i%4 of block i/4. */
    uint32_t r[4];
    actc_philox(key, i >> 2, r);
    return actc__word_uniform(r[i & 3]);
}

float actc_rand_normal(uint64_t key, uint64_t i)
{
    uint32_t r[4];
    actc_philox(key ^ 0x6E6F726D616CULL, i, r);
    double u1 = ((double)r[0] + 1.0) / 4294967297.0;
    double u2 = (double)r[1] / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t actc_rng_key(uint64_t a, uint64_t b, uint64_t c) { return actc__rng_key(a, b, c); }

uint64_t actc_hash_bytes(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ULL;
    return h;
}
