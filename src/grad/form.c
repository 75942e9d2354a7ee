/* Gradient forms: a parameter's gradient held dense (t->grad, the default
 * and the fast path: dense.c), low-rank (a factor F for F P^T: lowrank.c)
 * or encoded with a codec between backward passes (encoded.c).  Each is one
 * implementation of the form interface (form.h: accumulate, to_dense,
 * sum_sq, scale, the wire's get and set); this file keeps the state core
 * holds for a parameter, picks the form its gradient is in and calls
 * through it.  The engine, the optimizers, clipping, data parallelism, the
 * GACT controller and the memory report reach the forms through grad.h.
 * This layer sits on core and codec only: the random streams it rounds
 * with come from its callers as (seed, stream). */
#include "form.h"
#include <stdlib.h>
#include <string.h>

actc__grad_fstate *actc__grad_fs(const actc_tensor *t) { return (actc__grad_fstate *)t->gstate_; }

/* core's release: drop the gradient held (the chosen codec stays), and with
 * destroy the state too. */
static void release(actc_tensor *t, int destroy)
{
    actc__grad_fstate *g = actc__grad_fs(t);
    actc_mem_free(g->blob);
    g->blob = NULL;
    g->bytes = 0;
    g->scale = 1.0f;
    actc_tensor_release(g->factor);
    g->factor = NULL;
    if (destroy) {
        free(g);
        t->gstate_ = NULL;
    }
}

actc__grad_fstate *actc__grad_fs_make(actc_tensor *t)
{
    if (!t->gstate_) {
        actc__grad_fstate *g = calloc(1, sizeof *g);
        if (!g) {
            actc_set_error(ACTC_ERR_OOM, "out of memory for the gradient form of '%s'", t->name);
            return NULL;
        }
        g->head.release = release;
        g->scale = 1.0f;
        t->gstate_ = &g->head;
    }
    return actc__grad_fs(t);
}

const char *actc__grad_pname(const actc_tensor *t) { return t->name[0] ? t->name : "unnamed parameter"; }

void actc__grad_scale_array(float *x, size_t n, float c)
{
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t j = 0; j < n; j++) x[j] *= c;
}

/* The form t's gradient is held in now. */
static const actc__grad_form_vt *held(const actc_tensor *t)
{
    const actc__grad_fstate *g = actc__grad_fs(t);
    if (g && g->factor) return &actc__grad_form_lowrank;
    if (g && g->blob) return &actc__grad_form_encoded;
    return &actc__grad_form_dense;
}

int actc__grad_present(const actc_tensor *t)
{
    const actc__grad_fstate *g = actc__grad_fs(t);
    return t->grad || (g && (g->blob || g->factor));
}

actc_grad_form actc__grad_form(const actc_tensor *t) { return held(t)->form; }

actc_status actc__grad_complete(actc_tensor *t, uint64_t seed, uint64_t stream)
{
    const actc__grad_fstate *g = actc__grad_fs(t);
    if (!g || !t->grad) return ACTC_OK;
    /* The form chosen for t, which a first pass's gradient is not in yet. */
    const actc__grad_form_vt *f = g->factor  ? &actc__grad_form_lowrank
                                : g->codec ? &actc__grad_form_encoded
                                           : &actc__grad_form_dense;
    return f->accumulate(t, seed, stream);
}

actc_status actc_grad_to_dense(const actc_tensor *t, float *out)
{
    if (!t || !out) return actc_set_error(ACTC_ERR_INVALID, "actc_grad_to_dense: NULL tensor or output");
    return held(t)->to_dense(t, out);
}

actc_status actc__grad_sum_sq(const actc_tensor *t, double *sq) { return held(t)->sum_sq(t, sq); }

void actc__grad_scale(actc_tensor *t, float c) { held(t)->scale(t, c); }

size_t actc__grad_wire_len(const actc_tensor *t) { return held(t)->wire_len(t); }

actc_status actc__grad_wire_get(const actc_tensor *t, float *out) { return held(t)->wire_get(t, out); }

actc_status actc__grad_wire_set(actc_tensor *t, uint64_t seed, uint64_t step, const float *in)
{
    return held(t)->wire_set(t, seed, step, in);
}

void actc_grad_get_info(const actc_tensor *t, actc_grad_info *out)
{
    memset(out, 0, sizeof *out);
    if (!t) return;
    const actc__grad_form_vt *f = held(t);
    out->form = f->form;
    out->present = actc__grad_present(t);
    out->bytes = f->bytes(t);
    const actc__grad_fstate *g = actc__grad_fs(t);
    if (f->form == ACTC_GRAD_LOWRANK) out->proj = g->proj;
    if (f->form == ACTC_GRAD_QUANT) snprintf(out->codec, sizeof out->codec, "%s", g->codec_name);
}
