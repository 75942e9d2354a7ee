/* Tensors: float32, contiguous, reference-counted.  Two counts: owners of the
 * data (refs_) and tape nodes routing gradients through the tensor
 * (tape_refs_).  Data dies with its last owner, so a forward intermediate is
 * freed as soon as the model code releases it after its consumers ran, while
 * the struct survives for backward.
 *
 * A view (actc__tensor_view) is a tensor of its own (id, gradient, tape
 * references) whose data is another's: it holds one reference to that base
 * tensor instead of a block, so the store can hand out a save it keeps by
 * reference without a copy, and the loader's struct can be used as any
 * fresh tensor.  A view's data is never moved (actc__tensor_give_data) or
 * freed through it. */
#include "core.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t g_next_id = 1;

size_t actc__numel(int ndim, const int *shape)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    return n;
}

/* Element count of a shape, or 0 with *overflow set when the byte size of
 * a float tensor of that shape does not fit in size_t. */
static size_t checked_numel(int ndim, const int *shape, int *overflow)
{
    size_t n = 1, limit = SIZE_MAX / sizeof(float);
    *overflow = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] && n > limit / (size_t)shape[i]) {
            *overflow = 1;
            return 0;
        }
        n *= (size_t)shape[i];
    }
    return n;
}

actc_tensor *actc__tensor_header(actc_mem_cat cat, int ndim, const int *shape)
{
    if (ndim < 0 || ndim > ACTC_MAX_DIMS) {
        actc_set_error(ACTC_ERR_INVALID, "tensor with %d dims (at most %d)", ndim, ACTC_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            actc_set_error(ACTC_ERR_INVALID, "tensor with negative dimension %d", shape[i]);
            return NULL;
        }
    int overflow;
    size_t numel = checked_numel(ndim, shape, &overflow);
    if (overflow) {
        actc_set_error(ACTC_ERR_INVALID, "tensor shape too large: its byte size overflows");
        return NULL;
    }
    actc_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        actc_set_error(ACTC_ERR_OOM, "out of system memory for a tensor header");
        return NULL;
    }
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof(int));
    t->numel = numel;
    t->cat = cat;
    t->id = atomic_fetch_add(&g_next_id, 1);
    t->refs_ = 1;
    return t;
}

actc_tensor *actc_tensor_new(actc_mem_cat cat, int ndim, const int *shape)
{
    actc_tensor *t = actc__tensor_header(cat, ndim, shape);
    if (!t) return NULL;
    t->data = actc_mem_alloc(cat, t->numel * sizeof(float));
    if (!t->data) {
        free(t);
        return NULL;
    }
    return t;
}

actc_tensor *actc__tensor_view(actc_tensor *t)
{
    actc_tensor *base = t->base_ ? t->base_ : t; /* views of views share the root */
    actc_tensor *v = actc__tensor_header(base->cat, t->ndim, t->shape);
    if (!v) return NULL;
    v->data = base->data;
    v->base_ = actc_tensor_retain(base);
    return v;
}

int actc__tensor_sole_owner(const actc_tensor *t)
{
    /* The store's references and a view's base count in refs_. */
    return t->refs_ == 1 && !t->base_;
}

/* Moving a buffer is safe only from its sole owner: a tensor the store holds
 * by reference has refs_ > 1, and a view's buffer is its base's. */
actc_status actc__tensor_give_data(actc_tensor *to, actc_tensor *from)
{
    if (from && actc__tensor_sole_owner(from) && from->data && from->cat == to->cat && from->numel == to->numel &&
        !from->is_param) {
        to->data = from->data;
        from->data = NULL;
        return ACTC_OK;
    }
    to->data = actc_mem_alloc(to->cat, to->numel * sizeof(float));
    return to->data ? ACTC_OK : actc_last_status();
}

actc_tensor *actc_tensor_zeros(actc_mem_cat cat, int ndim, const int *shape)
{
    actc_tensor *t = actc_tensor_new(cat, ndim, shape);
    if (t) actc__zero_floats(t->data, t->numel); /* gradients: large, once a step */
    return t;
}

actc_tensor *actc_tensor_copy(actc_mem_cat cat, const actc_tensor *src)
{
    if (!src || !src->data) {
        actc_set_error(ACTC_ERR_INVALID, "copy of a tensor without data");
        return NULL;
    }
    actc_tensor *t = actc_tensor_new(cat, src->ndim, src->shape);
    if (t) memcpy(t->data, src->data, t->numel * sizeof(float));
    return t;
}

actc_tensor *actc_param_new(int ndim, const int *shape, const char *name)
{
    actc_tensor *t = actc_tensor_zeros(ACTC_MEM_PARAM, ndim, shape);
    if (!t) return NULL;
    t->requires_grad = 1;
    t->is_param = 1;
    if (name) snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

actc_tensor *actc_tensor_retain(actc_tensor *t)
{
    if (t) t->refs_++;
    return t;
}

void actc_tensor_mark_changed(actc_tensor *t)
{
    if (!t) return;
    t->version_++;
    if (t->base_) t->base_->version_++; /* a view's data is its base's */
}

static void destroy(actc_tensor *t)
{
    if (t->gstate_) t->gstate_->release(t, 1);
    if (t->grad) {
        actc_tensor *g = t->grad;
        t->grad = NULL;
        actc_tensor_release(g);
    }
    free(t);
}

void actc_tensor_release(actc_tensor *t)
{
    if (!t) return;
    if (t->refs_ <= 0) abort(); /* double release: a bug in the caller */
    if (--t->refs_ > 0) return;
    if (t->base_) {
        actc_tensor *base = t->base_;
        t->base_ = NULL;
        actc_tensor_release(base);
    } else {
        actc_mem_free(t->data);
    }
    t->data = NULL;
    if (t->tape_refs_ == 0) destroy(t);
}

void actc__tensor_tape_ref(actc_tensor *t) { t->tape_refs_++; }

void actc__tensor_tape_unref(actc_tensor *t)
{
    if (--t->tape_refs_ == 0 && t->refs_ == 0) destroy(t);
}

void actc_tensor_drop_grad(actc_tensor *t)
{
    if (t && t->gstate_) t->gstate_->release(t, 0);
    if (t && t->grad) {
        actc_tensor *g = t->grad;
        t->grad = NULL;
        actc_tensor_release(g);
    }
}

int actc_same_shape(const actc_tensor *a, const actc_tensor *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

char *actc_shape_str(const actc_tensor *t, char *buf, size_t cap)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < t->ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? ", %d" : "%d", t->shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}
