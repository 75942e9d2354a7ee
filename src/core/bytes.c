/* Little-endian serialisation: a growable byte buffer to write into and a
 * bounds-checked cursor to read from.  Checkpoints and the state sections of
 * policies and controllers use them, so the files do not depend on struct
 * padding or the host's byte order, and a malformed file is a flag to test,
 * never a read past the end. */
#include "core.h"
#include <stdlib.h>
#include <string.h>

void actc__wbuf_free(actc__wbuf *w)
{
    free(w->p);
    memset(w, 0, sizeof *w);
}

void actc__w_bytes(actc__wbuf *w, const void *p, size_t n)
{
    if (w->failed || n == 0) return;
    if (w->count_only || w->sink) {
        if (w->sink && w->sink(w->sink_ctx, p, n) != 0) w->failed = 1;
        else w->len += n;
        return;
    }
    if (n > w->cap - w->len) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap - w->len < n) {
            if (cap > SIZE_MAX / 2) {
                w->failed = 1;
                return;
            }
            cap *= 2;
        }
        uint8_t *q = realloc(w->p, cap);
        if (!q) {
            w->failed = 1;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    memcpy(w->p + w->len, p, n);
    w->len += n;
}

void actc__put_u32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
void actc__put_u64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
uint32_t actc__get_u32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
uint64_t actc__get_u64(const uint8_t *b) { return actc__get_u32(b) | (uint64_t)actc__get_u32(b + 4) << 32; }

void actc__w_u32(actc__wbuf *w, uint32_t v)
{
    uint8_t b[4];
    actc__put_u32(b, v);
    actc__w_bytes(w, b, 4);
}
void actc__w_u64(actc__wbuf *w, uint64_t v)
{
    uint8_t b[8];
    actc__put_u64(b, v);
    actc__w_bytes(w, b, 8);
}
void actc__w_f32(actc__wbuf *w, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    actc__w_u32(w, u);
}
void actc__w_f64(actc__wbuf *w, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    actc__w_u64(w, u);
}
void actc__w_str(actc__wbuf *w, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    actc__w_u32(w, (uint32_t)n);
    actc__w_bytes(w, s, n);
}
void actc__w_floats(actc__wbuf *w, const float *p, size_t n)
{
    if (w->count_only) {
        if (!w->failed) w->len += 4 * n;
        return;
    }
    /* Converted a chunk at a time: no second copy of a large tensor. */
    uint8_t buf[4096];
    for (size_t i = 0; i < n && !w->failed;) {
        size_t k = n - i < sizeof buf / 4 ? n - i : sizeof buf / 4;
        for (size_t j = 0; j < k; j++) {
            uint32_t u;
            memcpy(&u, &p[i + j], 4);
            actc__put_u32(buf + 4 * j, u);
        }
        actc__w_bytes(w, buf, 4 * k);
        i += k;
    }
}

const uint8_t *actc__r_take(actc__rbuf *r, size_t n)
{
    if (r->bad || n > r->end - r->pos) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}
uint32_t actc__r_u32(actc__rbuf *r)
{
    const uint8_t *p = actc__r_take(r, 4);
    return p ? actc__get_u32(p) : 0;
}
uint64_t actc__r_u64(actc__rbuf *r)
{
    const uint8_t *p = actc__r_take(r, 8);
    return p ? actc__get_u64(p) : 0;
}
float actc__r_f32(actc__rbuf *r)
{
    uint32_t u = actc__r_u32(r);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
double actc__r_f64(actc__rbuf *r)
{
    uint64_t u = actc__r_u64(r);
    double d;
    memcpy(&d, &u, 8);
    return d;
}
int actc__r_str(actc__rbuf *r, char *dst, size_t cap)
{
    uint32_t n = actc__r_u32(r);
    if (r->bad || n >= cap) {
        r->bad = 1;
        if (cap) dst[0] = '\0';
        return 0;
    }
    const uint8_t *p = actc__r_take(r, n);
    if (!p) {
        dst[0] = '\0';
        return 0;
    }
    memcpy(dst, p, n);
    dst[n] = '\0';
    return 1;
}
void actc__get_floats(float *dst, const uint8_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = actc__get_u32(src + 4 * i);
        memcpy(&dst[i], &u, 4);
    }
}

int actc__mul_size(size_t a, size_t b, size_t *out)
{
    if (a && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}
