/* Checkpoints: a model's state, optionally its optimizer's, or a trainer's
 * whole training state, in one self-checking file.
 *
 * Layout of version 4 (every number little-endian, fixed width, written
 * field by field so the file does not depend on struct padding or the
 * host's byte order):
 *
 *   offset 0   "ACTCCKPT"          8 bytes magic
 *          8   u32 version         (4)
 *         12   u64 file length     total bytes, the final CRC included
 *         20   u32 R               length of the record
 *         24   record              R bytes of fields: u32 tag, u32 length, value
 *     24 + R   u32 CRC-32 (zlib) of bytes [0, 24 + R): the header's own
 *              sections, each: u32 tag, u64 length L, L bytes
 *  length - 4  u32 CRC-32 of every byte before it
 *
 * Record fields: the model's name, whether it is a user-defined one, its
 * options (family and shape), the number of trainable scalars and of state
 * bytes, the optimizer's name, the policy, the position (step, epoch, batch
 * in epoch), the trainer's recipe, the application's note, the run's own
 * recipe (actc_run_recipe, in its members' order: u32 epochs, batch, seq,
 * epoch_steps, u64 eval_tokens, u32 augment, limit_train, data, split, u32
 * deterministic, gemm, u32 grad_comm, u64 bucket; each string a u32 length
 * and its bytes, no NUL).  Unknown fields are skipped (a later minor version
 * may add some), and so are bytes after the run recipe's known members (a
 * later version may append some); an unknown section is refused (it would
 * be state this build cannot restore).  Files written before the run
 * recipe had its field (actc 0.9.0 and earlier) hold none: actc train kept
 * it as flags in the note.
 * Sections: MODEL (tensors by name: u32 count, then per tensor u32 name
 * length, name, u32 ndim, u32 shape[ndim], f32 data[numel]), OPTIM (name,
 * u64 steps, tensors), POLICY (spec, then the policy family's own state,
 * src/policy) and CONTROLLER (the controller's state) in files before
 * LEARNT, which holds both: the spec, then the policy's learnt state and its
 * controller's as actc__learnt_save frames them (src/policy/learnt.c);
 * RANKS (under data parallelism, for a policy that learns on each rank
 * from that rank's rows: u32 P, then for ranks 1 .. P-1 a u64 length and
 * that rank's learnt state, framed the same way; rank 0's is LEARNT);
 * STAGES (a pipeline's: the same for stages 1 .. P-1, each of which
 * learnt about its own tensors; stage 0's is LEARNT).  A pipeline's file
 * holds the whole model and optimizer (stage 0 gathers the stages' tensors
 * and writes it); a part of the model (actc_model_opts.n_blocks) loads the
 * tensors it holds by name.
 * A build older than LEARNT refuses such a file (an unknown section)
 * rather than resume without its adaptation.
 *
 * Checking.  actc_checkpoint_info reads only the header and checks its CRC
 * and the declared length against the file's, so a flipped bit in the
 * model's shape is caught before anything is sized from it.  Loading reads
 * the whole file and checks the final CRC before parsing the sections;
 * then every name and shape is matched and every state section parsed, and
 * only when all of it passed is anything copied: a failed load changes
 * nothing.  Building a model from a record (actc_checkpoint_model) is
 * bounded by the file's size, so a forged record cannot make it allocate
 * more than the file could hold.
 *
 * Saving writes PATH.tmp (the layout is computed in a counting pass first,
 * then streamed: no copy of the tensors in memory), fflush + fsync, renames
 * it over PATH and fsyncs the directory, so a crash or a full disk leaves
 * the old checkpoint or the new one, never a half-written file under the
 * real name.
 *
 * Versions 2 and 3 (actc 0.1: a fixed 728- or 472-byte header with the
 * model's shape as command-line settings text, then the tensors, one CRC)
 * are still read: their settings become the note, and the shape and the
 * trainer's options are parsed back from it (the run's own recipe, the
 * rest of those settings, is the application's to read from the note). */
#include "train.h"
#include "../core/core.h"
#include "../models/model.h"
#include "../policy/policy.h"
#include "../optim/optim.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_MAGIC "ACTCCKPT"
#define CKPT_VERSION 4u

enum {
    F_MODEL = 1, F_CUSTOM, F_MODEL_OPTS, F_N_PARAMS, F_STATE_BYTES, F_OPTIM, F_POLICY, F_POSITION, F_TRAINER, F_NOTE,
    F_RECIPE
};
/* POLICY and CONTROLLER: files of actc 0.2 before LEARNT, read only. */
enum { S_MODEL = 1, S_OPTIM, S_POLICY, S_CONTROLLER, S_RANKS, S_LEARNT, S_STAGES };

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

/* ---- the record ------------------------------------------------------------ */

static void field_begin(actc__wbuf *w, uint32_t tag, uint32_t len)
{
    actc__w_u32(w, tag);
    actc__w_u32(w, len);
}

static void field_str(actc__wbuf *w, uint32_t tag, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    field_begin(w, tag, (uint32_t)n);
    actc__w_bytes(w, s, n);
}

#define OPTS_BYTES (4 * 11 + 8)
static void put_opts(actc__wbuf *w, const actc_model_opts *o)
{
    field_begin(w, F_MODEL_OPTS, OPTS_BYTES);
    const int32_t v[5] = {o->in_channels, o->in_h, o->in_w, o->num_classes, o->width};
    for (int i = 0; i < 5; i++) actc__w_u32(w, (uint32_t)v[i]);
    actc__w_f32(w, o->dropout);
    actc__w_u64(w, o->seed);
    const int32_t u[5] = {o->n_layers, o->n_heads, o->context, o->vocab, o->attention};
    for (int i = 0; i < 5; i++) actc__w_u32(w, (uint32_t)u[i]);
}

static void get_opts(actc__rbuf *r, actc_model_opts *o)
{
    int32_t v[5], u[5];
    for (int i = 0; i < 5; i++) v[i] = (int32_t)actc__r_u32(r);
    o->in_channels = v[0];
    o->in_h = v[1];
    o->in_w = v[2];
    o->num_classes = v[3];
    o->width = v[4];
    o->dropout = actc__r_f32(r);
    o->seed = actc__r_u64(r);
    for (int i = 0; i < 5; i++) u[i] = (int32_t)actc__r_u32(r);
    o->n_layers = u[0];
    o->n_heads = u[1];
    o->context = u[2];
    o->vocab = u[3];
    o->attention = u[4];
}

#define TRAINER_BYTES (4 * 4 + 4 * 4 + 4 + 4 + 8 + 8 + 8 + 4 + 4 + 4 + 8 + 8 + 4 + 8)
static void put_trainer(actc__wbuf *w, const actc_trainer_opts *o)
{
    field_begin(w, F_TRAINER, TRAINER_BYTES);
    actc__w_f32(w, o->lr);
    actc__w_f32(w, o->momentum);
    actc__w_u32(w, (uint32_t)o->nesterov);
    actc__w_f32(w, o->weight_decay);
    actc__w_f32(w, o->beta1);
    actc__w_f32(w, o->beta2);
    actc__w_f32(w, o->eps);
    actc__w_u32(w, (uint32_t)o->schedule.kind);
    actc__w_f32(w, o->schedule.min_lr);
    actc__w_u32(w, (uint32_t)o->grad_bits); /* 0 in checkpoints before 0.5: fp32 */
    actc__w_u64(w, o->schedule.warmup_steps);
    actc__w_u64(w, o->schedule.total_steps);
    actc__w_u64(w, o->schedule.step_size);
    actc__w_f32(w, o->schedule.gamma);
    actc__w_f32(w, o->clip);
    actc__w_u32(w, (uint32_t)o->accum);
    actc__w_u64(w, o->seed);
    actc__w_u64(w, o->controller.adapt_interval);
    actc__w_u32(w, (uint32_t)o->controller.estimate_samples);
    actc__w_f64(w, o->controller.alert_fraction);
}

static void get_trainer(actc__rbuf *r, actc_trainer_opts *o)
{
    o->lr = actc__r_f32(r);
    o->momentum = actc__r_f32(r);
    o->nesterov = (int)actc__r_u32(r);
    o->weight_decay = actc__r_f32(r);
    o->beta1 = actc__r_f32(r);
    o->beta2 = actc__r_f32(r);
    o->eps = actc__r_f32(r);
    o->schedule.kind = (actc_lr_kind)actc__r_u32(r);
    o->schedule.min_lr = actc__r_f32(r);
    o->grad_bits = (int)actc__r_u32(r);
    o->schedule.warmup_steps = actc__r_u64(r);
    o->schedule.total_steps = actc__r_u64(r);
    o->schedule.step_size = actc__r_u64(r);
    o->schedule.gamma = actc__r_f32(r);
    o->clip = actc__r_f32(r);
    o->accum = (int)actc__r_u32(r);
    o->seed = actc__r_u64(r);
    o->controller.adapt_interval = actc__r_u64(r);
    o->controller.estimate_samples = (int)actc__r_u32(r);
    o->controller.alert_fraction = actc__r_f64(r);
    o->schedule.base_lr = o->lr;
}

static void put_recipe(actc__wbuf *w, const actc_run_recipe *r)
{
    const char *str[3] = {r->data, r->split, r->gemm};
    uint32_t len = 8 * 4 + 2 * 8; /* the numbers, then the strings */
    for (int i = 0; i < 3; i++) len += 4 + (uint32_t)strlen(str[i]);
    field_begin(w, F_RECIPE, len);
    actc__w_u32(w, (uint32_t)r->epochs);
    actc__w_u32(w, (uint32_t)r->batch);
    actc__w_u32(w, (uint32_t)r->seq);
    actc__w_u32(w, (uint32_t)r->epoch_steps);
    actc__w_u64(w, r->eval_tokens);
    actc__w_u32(w, (uint32_t)r->augment);
    actc__w_u32(w, (uint32_t)r->limit_train);
    actc__w_str(w, r->data);
    actc__w_str(w, r->split);
    actc__w_u32(w, (uint32_t)r->deterministic);
    actc__w_str(w, r->gemm);
    actc__w_u32(w, (uint32_t)r->grad_comm);
    actc__w_u64(w, r->bucket);
}

/* A string of the run recipe into its array: 1, or 0 when it does not fit
 * or holds a NUL. */
static int get_recipe_str(actc__rbuf *f, char *dst, size_t cap)
{
    const size_t at = f->pos;
    return actc__r_str(f, dst, cap) && strlen(dst) == f->pos - at - 4;
}

/* The run recipe's field into r: 1, or 0 when it is malformed.  Bytes
 * after the members this build knows are left unread. */
static int get_recipe(actc__rbuf *f, actc_run_recipe *r)
{
    r->epochs = (int32_t)actc__r_u32(f);
    r->batch = (int32_t)actc__r_u32(f);
    r->seq = (int32_t)actc__r_u32(f);
    r->epoch_steps = (int32_t)actc__r_u32(f);
    r->eval_tokens = actc__r_u64(f);
    r->augment = (int32_t)actc__r_u32(f);
    r->limit_train = (int32_t)actc__r_u32(f);
    if (!get_recipe_str(f, r->data, sizeof r->data) || !get_recipe_str(f, r->split, sizeof r->split)) return 0;
    r->deterministic = (int32_t)actc__r_u32(f);
    if (!get_recipe_str(f, r->gemm, sizeof r->gemm)) return 0;
    r->grad_comm = (int32_t)actc__r_u32(f);
    const uint64_t bucket = actc__r_u64(f);
    r->bucket = (size_t)bucket;
    return !f->bad && (uint64_t)r->bucket == bucket;
}

/* What a checkpoint's writer knows beyond the model and optimizer. */
typedef struct {
    const actc_trainer *t;     /* NULL: model (and optimizer) only         */
    const char *note;
    const actc_run_recipe *recipe; /* NULL: none                           */
    int ranks;                 /* > 1: a RANKS section with the states of
                                  ranks 1 .. ranks-1                         */
    const uint8_t *const *state;
    const size_t *state_len;
    int stages;                /* the states are a pipeline's stages': a
                                  STAGES section, state[0] is LEARNT's       */
} save_extra;

static void put_record(actc__wbuf *w, actc_model *m, actc_optim *o, const save_extra *x)
{
    field_str(w, F_MODEL, actc_model_name(m));
    field_begin(w, F_CUSTOM, 4);
    actc__w_u32(w, (uint32_t)actc_model_is_custom(m));
    put_opts(w, actc_model_get_opts(m));
    actc_tensor **st;
    const int ns = actc_model_state(m, &st);
    size_t bytes = 0;
    for (int i = 0; i < ns; i++) bytes += 4 * st[i]->numel;
    field_begin(w, F_N_PARAMS, 8);
    actc__w_u64(w, actc_model_num_params(m));
    field_begin(w, F_STATE_BYTES, 8);
    actc__w_u64(w, bytes);
    if (o) field_str(w, F_OPTIM, actc_optim_name(o));
    if (x->t) {
        field_str(w, F_POLICY, x->t->policy);
        field_begin(w, F_POSITION, 24);
        actc__w_u64(w, x->t->step);
        actc__w_u64(w, x->t->epoch);
        actc__w_u64(w, x->t->batch);
        put_trainer(w, &x->t->o);
    }
    if (x->note && x->note[0]) field_str(w, F_NOTE, x->note);
    if (x->recipe) put_recipe(w, x->recipe);
}

/* Parse a version-4 record into info (fields it lacks stay zero). */
static int parse_record(const uint8_t *p, size_t n, actc_ckpt_info *info)
{
    actc__rbuf r = {p, 0, n, 0};
    while (!r.bad && r.pos < r.end) {
        const uint32_t tag = actc__r_u32(&r), len = actc__r_u32(&r);
        const uint8_t *v = actc__r_take(&r, len);
        if (!v) break;
        actc__rbuf f = {v, 0, len, 0};
        char str[ACTC_CKPT_NOTE_MAX];
        int fixed = 0; /* expected length of a fixed-size field */
        switch (tag) {
        case F_MODEL:
        case F_OPTIM:
        case F_POLICY:
        case F_NOTE: {
            size_t cap = tag == F_MODEL ? sizeof info->model
                       : tag == F_OPTIM ? sizeof info->optim
                       : tag == F_POLICY ? sizeof info->policy : sizeof info->note;
            if (len >= cap) return 0;
            memcpy(str, v, len);
            str[len] = '\0';
            if (strlen(str) != len) return 0; /* no NUL inside */
            memcpy(tag == F_MODEL ? info->model : tag == F_OPTIM ? info->optim : tag == F_POLICY ? info->policy : info->note,
                   str, len + 1);
            break;
        }
        case F_CUSTOM: fixed = 4; info->custom = actc__r_u32(&f) != 0; break;
        case F_MODEL_OPTS: fixed = OPTS_BYTES; get_opts(&f, &info->model_opts); break;
        case F_N_PARAMS: fixed = 8; info->n_params = (size_t)actc__r_u64(&f); break;
        case F_STATE_BYTES: fixed = 8; (void)actc__r_u64(&f); break;
        case F_POSITION:
            fixed = 24;
            info->step = actc__r_u64(&f);
            info->epoch = actc__r_u64(&f);
            info->batch_in_epoch = actc__r_u64(&f);
            break;
        case F_TRAINER: fixed = TRAINER_BYTES; get_trainer(&f, &info->trainer); info->has_trainer = 1; break;
        case F_RECIPE:
            if (!get_recipe(&f, &info->recipe)) return 0;
            info->has_recipe = 1;
            break;
        default: break; /* a field of a later minor version: informative only */
        }
        if (fixed && (len != (uint32_t)fixed || f.bad)) return 0;
    }
    return !r.bad && info->model[0];
}

/* ---- writing ------------------------------------------------------------------ */

static void w_tensor(actc__wbuf *w, const actc_tensor *t)
{
    actc__w_str(w, t->name);
    actc__w_u32(w, (uint32_t)t->ndim);
    for (int i = 0; i < t->ndim; i++) actc__w_u32(w, (uint32_t)t->shape[i]);
    actc__w_floats(w, t->data, t->numel);
}

static void w_tensors(actc__wbuf *w, actc_tensor **ts, int n)
{
    actc__w_u32(w, (uint32_t)n);
    for (int i = 0; i < n; i++) w_tensor(w, ts[i]);
}

/* The sections, written twice: counting (lens[] receives each section's
 * length) and then for real (lens[] gives them). */
typedef struct {
    int counting;
    uint64_t lens[5];
    int k;
    size_t start;
} sections;

static void section_begin(actc__wbuf *w, sections *sc, uint32_t tag)
{
    actc__w_u32(w, tag);
    actc__w_u64(w, sc->counting ? 0 : sc->lens[sc->k]);
    sc->start = w->len;
}

static void section_end(actc__wbuf *w, sections *sc)
{
    if (sc->counting) sc->lens[sc->k] = w->len - sc->start;
    sc->k++;
}

static actc_status put_sections(actc__wbuf *w, sections *sc, actc_model *m, actc_optim *o, const save_extra *x)
{
    actc_tensor **ms = NULL, **os = NULL;
    const int nm = actc_model_state(m, &ms);
    sc->k = 0;
    section_begin(w, sc, S_MODEL);
    w_tensors(w, ms, nm);
    section_end(w, sc);
    if (o) {
        const int no = actc_optim_state(o, &os); /* creates any state not made yet */
        if (no < 0) return actc_last_status();
        section_begin(w, sc, S_OPTIM);
        actc__w_str(w, actc_optim_name(o));
        actc__w_u64(w, actc_optim_steps(o));
        w_tensors(w, os, no);
        section_end(w, sc);
    }
    if (x->t) {
        section_begin(w, sc, S_LEARNT);
        actc__w_str(w, x->t->policy);
        if (x->stages) {
            actc__w_bytes(w, x->state[0], x->state_len[0]);
        } else {
            actc_status s = actc__learnt_save(actc__ctx_policy_of(x->t->ctx), x->t->ctrl, w);
            if (s != ACTC_OK) return s;
        }
        section_end(w, sc);
        if (x->ranks > 1) {
            section_begin(w, sc, x->stages ? S_STAGES : S_RANKS);
            actc__w_u32(w, (uint32_t)x->ranks);
            for (int r = 1; r < x->ranks; r++) {
                actc__w_u64(w, x->state_len[r]);
                actc__w_bytes(w, x->state[r], x->state_len[r]);
            }
            section_end(w, sc);
        }
    }
    return ACTC_OK;
}

/* Every tensor to be written must have data (a released tensor would be a
 * caller bug, better reported than dereferenced). */
static actc_status check_tensors(const char *path, actc_tensor **ts, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        if (!ts[i] || !ts[i]->data)
            return actc_set_error(ACTC_ERR_STATE, "checkpoint %s: %s tensor %d has no data", path, what, i);
    return ACTC_OK;
}

typedef struct {
    FILE *f;
    uLong crc;
    int err;
} file_sink;

static int to_file(void *ctx, const void *p, size_t n)
{
    file_sink *fs = ctx;
    if (fwrite(p, 1, n, fs->f) != n) {
        fs->err = errno ? errno : EIO;
        return -1;
    }
    fs->crc = crc_update(fs->crc, p, n);
    return 0;
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

static char *tmp_name(const char *path)
{
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    if (tmp) {
        memcpy(tmp, path, n);
        memcpy(tmp + n, ".tmp", 5);
    }
    return tmp;
}

static actc_status save(const char *path, actc_model *m, actc_optim *o, const save_extra *x)
{
    if (!path || !m) return actc_set_error(ACTC_ERR_INVALID, "checkpoint: path or model is NULL");
    if (strlen(actc_model_name(m)) >= sizeof ((actc_ckpt_info *)0)->model)
        return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s: model name '%s' is too long", path, actc_model_name(m));
    if (x->note && strlen(x->note) >= ACTC_CKPT_NOTE_MAX)
        return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s: the note is over %d bytes", path, ACTC_CKPT_NOTE_MAX - 1);
    actc_tensor **ms;
    int nm = actc_model_state(m, &ms);
    actc_status s = check_tensors(path, ms, nm, "model");
    if (s != ACTC_OK) return s;
    if (o) {
        actc_tensor **os;
        int no = actc_optim_state(o, &os);
        if (no < 0) return actc_last_status();
        if ((s = check_tensors(path, os, no, "optimizer")) != ACTC_OK) return s;
    }

    /* The header (record included) in memory; the sections counted. */
    actc__wbuf rec = {0};
    put_record(&rec, m, o, x);
    sections sc = {.counting = 1};
    actc__wbuf count = {.count_only = 1};
    if (!rec.failed) s = put_sections(&count, &sc, m, o, x);
    if (rec.failed || count.failed) s = actc_set_error(ACTC_ERR_OOM, "out of memory writing checkpoint %s", path);
    if (s != ACTC_OK) {
        actc__wbuf_free(&rec);
        return s;
    }
    const uint64_t total = 24 + rec.len + 4 + count.len + 4;
    uint8_t head[24];
    memcpy(head, CKPT_MAGIC, 8);
    actc__put_u32(head + 8, CKPT_VERSION);
    actc__put_u64(head + 12, total);
    actc__put_u32(head + 20, (uint32_t)rec.len);

    char *tmp = tmp_name(path);
    if (!tmp) {
        actc__wbuf_free(&rec);
        return actc_set_error(ACTC_ERR_OOM, "out of memory for a file name");
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        s = actc_set_error(ACTC_ERR_IO, "cannot write checkpoint %s: %s", tmp, strerror(errno));
        actc__wbuf_free(&rec);
        free(tmp);
        return s;
    }
    errno = 0;
    file_sink fs = {f, crc32(0L, Z_NULL, 0), 0};
    actc__wbuf w = {.sink = to_file, .sink_ctx = &fs};
    actc__w_bytes(&w, head, sizeof head);
    actc__w_bytes(&w, rec.p, rec.len);
    actc__w_u32(&w, (uint32_t)fs.crc); /* the header's CRC */
    actc__wbuf_free(&rec);
    sc.counting = 0;
    if (!w.failed) s = put_sections(&w, &sc, m, o, x);
    actc__w_u32(&w, (uint32_t)fs.crc);
    int err = s != ACTC_OK ? 0 : w.failed ? (fs.err ? fs.err : ENOMEM) : 0;
    if (s == ACTC_OK && !err && w.len != total) err = EIO; /* the state changed between the passes */
    if (s == ACTC_OK && !err && fflush(f) != 0) err = errno;
    if (s == ACTC_OK && !err && fsync(fileno(f)) != 0) err = errno;
    if (fclose(f) != 0 && !err) err = errno;
    if (s == ACTC_OK && !err && rename(tmp, path) != 0) err = errno;
    if (s != ACTC_OK || err) {
        unlink(tmp);
        if (err) s = actc_set_error(ACTC_ERR_IO, "cannot write checkpoint %s: %s (the previous file, if any, is kept)",
                                    path, strerror(err));
        free(tmp);
        return s;
    }
    free(tmp);
    fsync_dir_of(path);
    return ACTC_OK;
}

actc_status actc_checkpoint_save(const char *path, actc_model *m, actc_optim *o, const char *note)
{
    save_extra x = {.note = note};
    return save(path, m, o, &x);
}

actc_status actc_trainer_save(actc_trainer *t, const char *path)
{
    if (!t) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_save: trainer is NULL");
    if (actc_model_get_opts(t->m)->n_blocks)
        return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s: this trainer holds a part of model %s (a pipeline "
                                                "stage): save the pipeline with actc_pipe_save, which writes the "
                                                "whole model", path ? path : "(null)", actc_model_name(t->m));
    save_extra x = {.t = t, .note = t->note, .recipe = actc_trainer_recipe(t)};
    return save(path, t->m, t->opt, &x);
}

actc_status actc__trainer_learnt_state(const actc_trainer *t, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    actc__wbuf w = {0};
    actc_status s = actc__learnt_save(actc__ctx_policy_of(t->ctx), t->ctrl, &w);
    if (s == ACTC_OK && w.failed) s = actc_set_error(ACTC_ERR_OOM, "out of memory for a rank's policy state");
    if (s != ACTC_OK) {
        actc__wbuf_free(&w);
        return s;
    }
    *out = w.p;
    *len = w.len;
    return ACTC_OK;
}

actc_status actc__trainer_save_ranks(actc_trainer *t, const char *path, int ranks, const uint8_t *const *state,
                                     const size_t *state_len)
{
    if (!t) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_save: trainer is NULL");
    save_extra x = {t, t->note, actc_trainer_recipe(t), ranks, state, state_len, 0};
    return save(path, t->m, t->opt, &x);
}

actc_status actc__trainer_save_whole(actc_trainer *t, const char *path, actc_model *m, actc_optim *o, int stages,
                                     const uint8_t *const *state, const size_t *state_len)
{
    if (!t || !m || !o) return actc_set_error(ACTC_ERR_INVALID, "a pipeline's checkpoint: NULL argument");
    save_extra x = {t, t->note, actc_trainer_recipe(t), stages, state, state_len, 1};
    return save(path, m, o, &x);
}

/* ---- reading: the file ------------------------------------------------------------ */

/* A tensor record as found in the file; data points into the file image. */
typedef struct {
    char name[48];
    int ndim;
    int shape[ACTC_MAX_DIMS];
    size_t numel;
    const uint8_t *data;
} rec;

/* A whole file, checked and parsed. */
typedef struct {
    const char *path;
    uint8_t *buf;              /* the file (SCRATCH)                          */
    size_t size;
    actc_ckpt_info info;
    rec *mrec, *orec;
    int nm, no;
    int has_optim;
    uint64_t osteps;
    const uint8_t *policy, *controller, *ranks, *stages; /* section payloads (NULL: absent) */
    size_t policy_len, controller_len, ranks_len, stages_len;
    int *mmap, *omap;          /* a part's tensors: the record of each (NULL:
                                  the file's order is the model's)           */
    char policy_spec[ACTC_POLICY_MAX];
    actc_tensor **fresh;       /* optimizer state in the file's subspace shapes,
                                  installed at commit (NULL entries: as is)    */
    int nfresh;
} ckpt;

static actc_status load_whole(const char *path, ckpt *c);

static void ckpt_free(ckpt *c)
{
    free(c->mmap);
    free(c->omap);
    free(c->mrec);
    free(c->orec);
    for (int i = 0; c->fresh && i < c->nfresh; i++) actc_tensor_release(c->fresh[i]);
    free(c->fresh);
    c->fresh = NULL;
    actc_mem_free(c->buf);
    c->buf = NULL;
    c->mrec = c->orec = NULL;
}

static FILE *open_for_read(const char *path, size_t *size, actc_status *s)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *s = actc_set_error(ACTC_ERR_IO, "cannot open checkpoint %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        *s = actc_set_error(ACTC_ERR_IO, "cannot read checkpoint %s: %s", path,
                            S_ISREG(st.st_mode) ? strerror(errno) : "not a regular file");
        fclose(f);
        return NULL;
    }
    *size = (size_t)st.st_size;
    *s = ACTC_OK;
    return f;
}

/* ---- versions 2 and 3 ---- */

#define V3_META_FIXED (32 + 16 + 64 + 4 * 8 + 4 + 8 * 4 + 4 * 4)
#define V3_SETTINGS(v) ((v) == 2u ? 256 : 512)
#define V3_HEADER(v) (8 + 4 + 8 + V3_META_FIXED + V3_SETTINGS(v))

/* V of --NAME=V in an old file's settings text, copied into buf: buf, or
 * NULL when absent or longer than buf. */
static const char *setting(const char *settings, const char *name, char *buf, size_t cap)
{
    char key[32];
    snprintf(key, sizeof key, "--%s=", name);
    for (const char *p = strstr(settings, key); p; p = strstr(p + 1, key))
        if (p == settings || p[-1] == ' ') {
            const char *v = p + strlen(key);
            const size_t n = strcspn(v, " ");
            if (n >= cap) return NULL;
            memcpy(buf, v, n);
            buf[n] = '\0';
            return buf;
        }
    return NULL;
}

/* --NAME=V of an old file's settings text: the int (-1 if absent). */
static int setting_int(const char *settings, const char *name)
{
    char buf[32];
    long long v;
    return setting(settings, name, buf, sizeof buf) && actc_parse_int(buf, 0, INT_MAX, &v) == ACTC_OK ? (int)v : -1;
}

/* --NAME=V of an old file's settings text into *x when present. */
static void setting_float(const char *settings, const char *name, float *x)
{
    char buf[48];
    double v;
    if (setting(settings, name, buf, sizeof buf) && actc_parse_number(buf, &v) == ACTC_OK && fabs(v) <= 3.4e38)
        *x = (float)v;
}

/* The trainer's options as actc 0.1's train command wrote them among its
 * settings (those it did not write keep t's values). */
static void legacy_trainer(const char *settings, actc_trainer_opts *t)
{
    setting_float(settings, "lr", &t->lr);
    setting_float(settings, "momentum", &t->momentum);
    setting_float(settings, "wd", &t->weight_decay);
    setting_float(settings, "beta1", &t->beta1);
    setting_float(settings, "beta2", &t->beta2);
    setting_float(settings, "clip", &t->clip);
    setting_float(settings, "min-lr", &t->schedule.min_lr);
    int x;
    if ((x = setting_int(settings, "nesterov")) >= 0) t->nesterov = x != 0;
    if ((x = setting_int(settings, "warmup")) >= 0) t->schedule.warmup_steps = (uint64_t)x;
    char spec[64];
    actc_lr_schedule s = t->schedule;
    if (setting(settings, "schedule", spec, sizeof spec) && actc_lr_parse(spec, &s) == ACTC_OK) t->schedule = s;
}

static void copy_field(char *dst, const uint8_t *b, size_t cap)
{
    memcpy(dst, b, cap);
    dst[cap - 1] = '\0'; /* a corrupt field must not run off the end */
}

/* The header of a version 2 or 3 file into info. */
static void legacy_info(const uint8_t *b, uint32_t v, actc_ckpt_info *info)
{
    const uint8_t *m = b + 20;
    info->version = v;
    copy_field(info->model, m, 32);
    copy_field(info->optim, m + 32, 16);
    copy_field(info->policy, m + 48, 64);
    info->epoch = actc__get_u64(m + 112);
    info->step = actc__get_u64(m + 120);
    info->batch_in_epoch = actc__get_u64(m + 128);
    const size_t cap = V3_SETTINGS(v) < sizeof info->note ? V3_SETTINGS(v) : sizeof info->note;
    copy_field(info->note, m + 196, cap);
    /* The shape: input and classes from the header, the rest from the
     * settings the command wrote ("--width=64 --layers=6 ..."). */
    actc_model_opts *o = &info->model_opts;
    *o = actc_model_default_opts();
    const int32_t in[3] = {(int32_t)actc__get_u32(m + 180), (int32_t)actc__get_u32(m + 184),
                           (int32_t)actc__get_u32(m + 188)};
    const int32_t classes = (int32_t)actc__get_u32(m + 192);
    if (in[0] > 0 && in[1] > 0 && in[2] > 0) {
        o->in_channels = in[0];
        o->in_h = in[1];
        o->in_w = in[2];
    }
    if (classes > 0) o->num_classes = classes;
    int x;
    if ((x = setting_int(info->note, "width")) > 0) o->width = x;
    if ((x = setting_int(info->note, "layers")) > 0) o->n_layers = x;
    if ((x = setting_int(info->note, "heads")) > 0) o->n_heads = x;
    if ((x = setting_int(info->note, "context")) > 0) o->context = x;
    if ((x = setting_int(info->note, "vocab")) > 0) o->vocab = x;
    const char *a = strstr(info->note, "--attention=");
    if (a && !strncmp(a + 12, "naive", 5)) o->attention = ACTC_ATTN_NAIVE;
    const uint64_t seed = actc__get_u64(m + 136);
    o->seed = seed;
    info->trainer = actc_trainer_default_opts();
    info->trainer.seed = seed;
    legacy_trainer(info->note, &info->trainer);
}

/* ---- the header ---- */

/* Check the first `have` bytes of a file of `size` bytes: magic, version,
 * declared length (and a version-4 header's own CRC when it is all there:
 * *hdr_len receives how many bytes the header takes). */
static actc_status check_header(const char *path, const uint8_t *b, size_t have, size_t size, uint32_t *version,
                                size_t *hdr_len)
{
    if (memcmp(b, CKPT_MAGIC, have < 8 ? have : 8) != 0)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is not an actc checkpoint (bad magic)", path);
    if (have < 24) return actc_set_error(ACTC_ERR_FORMAT, "%s is truncated (%zu bytes, not even a header)", path, size);
    const uint32_t v = actc__get_u32(b + 8);
    if (v != CKPT_VERSION && v != 3u && v != 2u)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is a version %u checkpoint; this build reads versions 2 to %u", path,
                              (unsigned)v, CKPT_VERSION);
    *version = v;
    const uint64_t declared = actc__get_u64(b + 12);
    const uint64_t least = v == CKPT_VERSION ? 24 + 4 + 4 : (uint64_t)V3_HEADER(v) + 12;
    if (declared < least)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is corrupted: impossible length %llu in its header", path,
                              (unsigned long long)declared);
    if (size < declared)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is truncated: %zu of %llu bytes", path, size,
                              (unsigned long long)declared);
    if (size > declared)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is corrupted: %zu bytes where its header declares %llu", path, size,
                              (unsigned long long)declared);
    if (v != CKPT_VERSION) {
        *hdr_len = V3_HEADER(v);
        return ACTC_OK;
    }
    const uint32_t R = actc__get_u32(b + 20);
    if ((uint64_t)R + 24 + 4 + 4 > declared)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is corrupted: its record (%u bytes) is longer than the file", path,
                              (unsigned)R);
    *hdr_len = 24 + (size_t)R + 4;
    if (have < *hdr_len) return ACTC_OK; /* the caller reads the rest */
    if ((uint32_t)crc_update(crc32(0L, Z_NULL, 0), b, 24 + R) != actc__get_u32(b + 24 + R))
        return actc_set_error(ACTC_ERR_FORMAT, "checksum mismatch in the header: %s is corrupted", path);
    return ACTC_OK;
}

static actc_status info_from_header(const char *path, const uint8_t *b, uint32_t v, actc_ckpt_info *info)
{
    memset(info, 0, sizeof *info);
    if (v != CKPT_VERSION) {
        legacy_info(b, v, info);
        return ACTC_OK;
    }
    info->version = v;
    info->model_opts = actc_model_default_opts();
    info->trainer = actc_trainer_default_opts();
    if (!parse_record(b + 24, actc__get_u32(b + 20), info))
        return actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: its record cannot be read", path);
    return ACTC_OK;
}

/* Point the trainer options' strings at the info's own arrays. */
static void fix_strings(actc_ckpt_info *info)
{
    info->trainer.policy = info->policy[0] ? info->policy : "none";
    info->trainer.optim = info->optim[0] ? info->optim : "sgd";
}

actc_status actc_checkpoint_info(const char *path, actc_ckpt_info *info)
{
    if (!path || !info) return actc_set_error(ACTC_ERR_INVALID, "actc_checkpoint_info: NULL argument");
    size_t size;
    actc_status s;
    FILE *f = open_for_read(path, &size, &s);
    if (!f) return s;
    uint8_t head[24];
    size_t have = fread(head, 1, sizeof head, f);
    uint32_t v = 0;
    size_t hlen = 0;
    uint8_t *hdr = NULL;
    if ((s = check_header(path, head, have, size, &v, &hlen)) != ACTC_OK) goto out;
    if (v != CKPT_VERSION) {
        /* Old files have no header checksum: check the whole file's. */
        fclose(f);
        f = NULL;
        ckpt c;
        if ((s = load_whole(path, &c)) != ACTC_OK) return s;
        *info = c.info;
        ckpt_free(&c);
        fix_strings(info);
        return ACTC_OK;
    }
    if (!(hdr = malloc(hlen))) {
        s = actc_set_error(ACTC_ERR_OOM, "out of memory reading checkpoint %s", path);
        goto out;
    }
    memcpy(hdr, head, sizeof head);
    if (fread(hdr + sizeof head, 1, hlen - sizeof head, f) != hlen - sizeof head) {
        s = actc_set_error(ACTC_ERR_IO, "cannot read checkpoint %s", path);
        goto out;
    }
    if ((s = check_header(path, hdr, hlen, size, &v, &hlen)) != ACTC_OK) goto out;
    if ((s = info_from_header(path, hdr, v, info)) == ACTC_OK) fix_strings(info);
out:
    free(hdr);
    if (f) fclose(f);
    return s;
}

/* ---- the sections ---- */

static int r_tensor(actc__rbuf *r, rec *t)
{
    memset(t, 0, sizeof *t);
    if (!actc__r_str(r, t->name, sizeof t->name)) return 0;
    const uint32_t nd = actc__r_u32(r);
    if (r->bad || nd > ACTC_MAX_DIMS) return 0;
    t->ndim = (int)nd;
    t->numel = 1;
    for (uint32_t i = 0; i < nd; i++) {
        const uint32_t d = actc__r_u32(r);
        if (d > 0x7fffffffu) return 0;
        t->shape[i] = (int)d;
        /* No overflow: the data must fit in the file anyway. */
        if (!actc__mul_size(t->numel, d, &t->numel) || t->numel > r->end) return 0;
    }
    t->data = actc__r_take(r, 4 * t->numel);
    return t->data != NULL;
}

/* A count and that many tensor records into a new array. */
static actc_status r_tensors(actc__rbuf *r, const char *path, rec **out, int *n)
{
    const uint32_t cnt = actc__r_u32(r);
    *out = NULL;
    /* Each record takes at least 8 bytes: bounds the allocation. */
    if (r->bad || cnt > (r->end - r->pos) / 8)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: bad tensor count", path);
    rec *recs = calloc((size_t)cnt + 1, sizeof *recs);
    if (!recs) return actc_set_error(ACTC_ERR_OOM, "out of memory reading checkpoint %s", path);
    for (uint32_t i = 0; i < cnt; i++)
        if (!r_tensor(r, &recs[i])) {
            free(recs);
            return actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: tensor record %u is invalid", path, (unsigned)i);
        }
    *out = recs;
    *n = (int)cnt;
    return ACTC_OK;
}

static actc_status r_optim(actc__rbuf *r, ckpt *c)
{
    if (!actc__r_str(r, c->info.optim, sizeof c->info.optim))
        return actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: bad optimizer name", c->path);
    c->osteps = actc__r_u64(r);
    c->has_optim = 1;
    return r_tensors(r, c->path, &c->orec, &c->no);
}

static actc_status parse_legacy(ckpt *c, uint32_t v)
{
    actc__rbuf r = {c->buf, V3_HEADER(v), c->size - 4, 0};
    actc_status s = r_tensors(&r, c->path, &c->mrec, &c->nm);
    if (s != ACTC_OK) return s;
    const uint32_t has_opt = actc__r_u32(&r);
    if (has_opt == 1 && (s = r_optim(&r, c)) != ACTC_OK) return s;
    if (r.bad || has_opt > 1 || r.pos != r.end)
        return actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: unexpected layout after the tensors", c->path);
    return ACTC_OK;
}

static actc_status parse_sections(ckpt *c, size_t from)
{
    actc__rbuf r = {c->buf, from, c->size - 4, 0};
    int seen = 0;
    while (!r.bad && r.pos < r.end) {
        const uint32_t tag = actc__r_u32(&r);
        const uint64_t len = actc__r_u64(&r);
        if (r.bad || len > r.end - r.pos) break;
        if (tag < S_MODEL || tag > S_STAGES || (seen & (1 << tag)))
            return actc_set_error(ACTC_ERR_FORMAT, "%s has a section (%u) this build does not know or twice: written "
                                                   "by a later actc?",
                                  c->path, (unsigned)tag);
        seen |= 1 << tag;
        actc__rbuf s = {c->buf, r.pos, r.pos + (size_t)len, 0};
        actc__r_take(&r, (size_t)len);
        actc_status st = ACTC_OK;
        switch (tag) {
        case S_MODEL: st = r_tensors(&s, c->path, &c->mrec, &c->nm); break;
        case S_OPTIM: st = r_optim(&s, c); break;
        case S_POLICY:
        case S_LEARNT:
            if (!actc__r_str(&s, c->policy_spec, sizeof c->policy_spec)) s.bad = 1;
            c->policy = c->buf + s.pos;
            c->policy_len = s.end - s.pos;
            if (tag == S_LEARNT && !s.bad &&
                !actc__learnt_split(c->buf + s.pos, s.end - s.pos, &c->policy, &c->policy_len, &c->controller,
                                    &c->controller_len))
                s.bad = 1;
            s.pos = s.end;
            break;
        case S_RANKS:
        case S_STAGES: { /* P >= 2, then P - 1 states that fill the section */
            *(tag == S_RANKS ? &c->ranks : &c->stages) = c->buf + s.pos;
            *(tag == S_RANKS ? &c->ranks_len : &c->stages_len) = s.end - s.pos;
            const uint32_t P = actc__r_u32(&s);
            if (P < 2 || P - 1 > (s.end - s.pos) / 8) s.bad = 1;
            for (uint32_t r = 1; !s.bad && r < P; r++) {
                const uint64_t n = actc__r_u64(&s);
                if (n > s.end - s.pos || !actc__r_take(&s, (size_t)n)) s.bad = 1;
            }
            break;
        }
        default: /* S_CONTROLLER */
            c->controller = c->buf + s.pos;
            c->controller_len = s.end - s.pos;
            s.pos = s.end;
        }
        if (st != ACTC_OK) return st;
        if (s.bad || s.pos != s.end)
            return actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: section %u", c->path, (unsigned)tag);
    }
    const int old_learnt = (1 << S_POLICY) | (1 << S_CONTROLLER);
    if (r.bad || r.pos != r.end || !(seen & (1 << S_MODEL)) || ((seen & (1 << S_LEARNT)) && (seen & old_learnt)))
        return actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: bad section layout", c->path);
    return ACTC_OK;
}

/* Read the whole file, check it, parse it. */
static actc_status load_whole(const char *path, ckpt *c)
{
    memset(c, 0, sizeof *c);
    c->path = path;
    actc_status s;
    FILE *f = open_for_read(path, &c->size, &s);
    if (!f) return s;
    /* The file image is as large as the model: accounted as SCRATCH so that
     * a budget gives a clean OOM instead of an unaccounted spike. */
    if (!(c->buf = actc_mem_alloc(ACTC_MEM_SCRATCH, c->size))) {
        fclose(f);
        return actc_last_status();
    }
    size_t got = c->size ? fread(c->buf, 1, c->size, f) : 0;
    int rerr = ferror(f);
    fclose(f);
    uint32_t v = 0;
    size_t hlen = 0;
    if (rerr || got != c->size) s = actc_set_error(ACTC_ERR_IO, "cannot read checkpoint %s", path);
    else s = check_header(path, c->buf, c->size, c->size, &v, &hlen);
    if (s == ACTC_OK && (uint32_t)crc_update(crc32(0L, Z_NULL, 0), c->buf, c->size - 4) !=
                            actc__get_u32(c->buf + c->size - 4))
        s = actc_set_error(ACTC_ERR_FORMAT, "checksum mismatch: %s is corrupted", path);
    if (s == ACTC_OK) s = info_from_header(path, c->buf, v, &c->info);
    if (s == ACTC_OK) s = v == CKPT_VERSION ? parse_sections(c, hlen) : parse_legacy(c, v);
    if (s != ACTC_OK) ckpt_free(c);
    return s;
}

/* ---- matching and copying ---- */

static void rec_shape_str(const rec *t, char *buf, size_t cap)
{
    actc_tensor tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.ndim = t->ndim;
    memcpy(tmp.shape, t->shape, sizeof tmp.shape);
    actc_shape_str(&tmp, buf, cap);
}

/* Compare the records with the live tensors: same count, names, shapes. */
static actc_status match_tensors(const char *path, const char *what, const rec *recs, int nrec, actc_tensor **ts,
                                 int nt)
{
    if (nrec != nt)
        return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s holds %d %s tensors, expected %d", path, nrec, what, nt);
    for (int i = 0; i < nt; i++) {
        const rec *r = &recs[i];
        const actc_tensor *t = ts[i];
        if (!t || !t->data)
            return actc_set_error(ACTC_ERR_STATE, "checkpoint %s: %s tensor %d has no data", path, what, i);
        if (r->name[0] && t->name[0] && strcmp(r->name, t->name) != 0)
            return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s: %s tensor %d is '%s' in the file but '%s' here",
                                  path, what, i, r->name, t->name);
        int same = r->ndim == t->ndim;
        for (int k = 0; same && k < r->ndim; k++) same = r->shape[k] == t->shape[k];
        if (!same) {
            char a[64], b[64];
            rec_shape_str(r, a, sizeof a);
            actc_shape_str(t, b, sizeof b);
            return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s: %s tensor %d (%s) has shape %s in the file, %s here",
                                  path, what, i, t->name[0] ? t->name : r->name, a, b);
        }
    }
    return ACTC_OK;
}

/* A part of a model (a pipeline stage's) against the records: each of its
 * tensors by name, with its shape; *map gets the record of each. */
static actc_status match_by_name(const char *path, const char *what, const rec *recs, int nrec, actc_tensor **ts,
                                 int nt, int **map)
{
    if (!(*map = malloc(((size_t)nt + 1) * sizeof **map)))
        return actc_set_error(ACTC_ERR_OOM, "out of memory loading %s", path);
    for (int i = 0; i < nt; i++) {
        int j = 0;
        while (j < nrec && strcmp(recs[j].name, ts[i]->name)) j++;
        if (j == nrec)
            return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s holds no %s tensor '%s'", path, what, ts[i]->name);
        int same = recs[j].ndim == ts[i]->ndim;
        for (int k = 0; same && k < recs[j].ndim; k++) same = recs[j].shape[k] == ts[i]->shape[k];
        if (!same) {
            char a[64], b[64];
            rec_shape_str(&recs[j], a, sizeof a);
            actc_shape_str(ts[i], b, sizeof b);
            return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s: %s tensor '%s' has shape %s in the file, %s here",
                                  path, what, ts[i]->name, a, b);
        }
        (*map)[i] = j;
    }
    return ACTC_OK;
}

/* Check that c holds m's state (and o's when o is not NULL): nothing is
 * changed.  A part of a model takes its tensors by name. */
static actc_status match(ckpt *c, actc_model *m, actc_optim *o, actc_tensor ***os, int *no)
{
    const char *path = c->path;
    if (strcmp(c->info.model, actc_model_name(m)) != 0)
        return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s holds model %s, not %s", path, c->info.model,
                              actc_model_name(m));
    actc_tensor **ms;
    int nm = actc_model_state(m, &ms);
    const int part = actc_model_get_opts(m)->n_blocks > 0;
    actc_status s = part ? match_by_name(path, "model", c->mrec, c->nm, ms, nm, &c->mmap)
                         : match_tensors(path, "model", c->mrec, c->nm, ms, nm);
    if (s != ACTC_OK || !o) return s;
    if (!c->has_optim) return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s holds no optimizer state", path);
    if (strcmp(c->info.optim, actc_optim_name(o)) != 0)
        return actc_set_error(ACTC_ERR_INVALID, "checkpoint %s holds %s optimizer state, not %s", path, c->info.optim,
                              actc_optim_name(o));
    /* Allocating zero state is not a visible change (zero momentum and
     * moments are the initial state), so it may precede the checks. */
    *no = actc_optim_state(o, os);
    if (*no < 0) return actc_last_status();
    if (part) return match_by_name(path, "optimizer", c->orec, c->no, *os, *no, &c->omap);
    /* A low-rank gradient's state (CompAct's r x m moments) has the shape
     * the optimizer learns from the gradient: a fresh optimizer takes the
     * file's, made here and installed by commit. */
    if (c->no == *no && *no > 0) {
        if (!(c->fresh = calloc((size_t)*no, sizeof *c->fresh)))
            return actc_set_error(ACTC_ERR_OOM, "out of memory loading %s", path);
        c->nfresh = *no;
    }
    actc_tensor **view = c->fresh ? calloc((size_t)*no, sizeof *view) : NULL;
    if (c->fresh && !view) return actc_set_error(ACTC_ERR_OOM, "out of memory loading %s", path);
    actc_status s2 = ACTC_OK;
    for (int i = 0; c->fresh && i < *no && s2 == ACTC_OK; i++) {
        const rec *r = &c->orec[i];
        int same = r->ndim == (*os)[i]->ndim;
        for (int k = 0; same && k < r->ndim; k++) same = r->shape[k] == (*os)[i]->shape[k];
        if (!same && actc_optim_steps(o) == 0 &&
            actc__optim_state_like(o, i, r->ndim, r->shape, &c->fresh[i]) != ACTC_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", actc_last_error()); /* not the buffer being written */
            s2 = actc_set_error(ACTC_ERR_INVALID, "checkpoint %s: optimizer tensor %d: %s", path, i, why);
        }
        view[i] = c->fresh[i] ? c->fresh[i] : (*os)[i];
    }
    if (s2 == ACTC_OK) s2 = match_tensors(path, "optimizer", c->orec, c->no, view ? view : *os, *no);
    free(view);
    return s2;
}

static void copy_in(actc_tensor *t, const rec *r)
{
    actc__get_floats(t->data, r->data, t->numel);
    actc_tensor_mark_changed(t); /* in place: a save of it is stale now */
}

static void commit(ckpt *c, actc_model *m, actc_optim *o, actc_tensor **os, int no)
{
    actc_tensor **ms;
    const int nm = actc_model_state(m, &ms);
    for (int i = 0; i < nm; i++) copy_in(ms[i], &c->mrec[c->mmap ? c->mmap[i] : i]);
    if (o) {
        for (int i = 0; c->fresh && i < no; i++)
            if (c->fresh[i]) {
                actc__optim_state_install(o, i, c->fresh[i]);
                c->fresh[i] = NULL;
            }
        for (int i = 0; i < no; i++) copy_in(os[i], &c->orec[c->omap ? c->omap[i] : i]);
        actc_optim_set_steps(o, c->osteps);
    }
}

actc_status actc_checkpoint_load(const char *path, actc_model *m, actc_optim *o, actc_ckpt_info *info)
{
    if (!path || !m) return actc_set_error(ACTC_ERR_INVALID, "actc_checkpoint_load: path or model is NULL");
    ckpt c;
    actc_status s = load_whole(path, &c);
    if (s != ACTC_OK) return s;
    actc_tensor **os = NULL;
    int no = 0;
    if ((s = match(&c, m, o, &os, &no)) == ACTC_OK) {
        commit(&c, m, o, os, no);
        if (info) {
            *info = c.info;
            fix_strings(info);
        }
    }
    ckpt_free(&c);
    return s;
}

actc_status actc_checkpoint_model(const char *path, actc_model **out)
{
    if (!path || !out) return actc_set_error(ACTC_ERR_INVALID, "actc_checkpoint_model: NULL argument");
    *out = NULL;
    actc_ckpt_info info;
    actc_status s = actc_checkpoint_info(path, &info);
    if (s != ACTC_OK) return s;
    if (info.custom)
        return actc_set_error(ACTC_ERR_INVALID, "%s holds the user-defined model %s: build it with actc_model_custom "
                                                "and load it with actc_checkpoint_load",
                              path, info.model);
    struct stat st;
    size_t limit = stat(path, &st) == 0 ? (size_t)st.st_size : 0;
    actc_model *m = NULL;
    /* The record was checked (its CRC), and the model it describes must fit
     * in the file: a corrupt or forged shape cannot make this allocate more
     * than the file holds. */
    if ((s = actc__model_create_limited(info.model, &info.model_opts, limit ? limit : 1, path, &m)) != ACTC_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", actc_last_error());
        return actc_set_error(s, "%s: %s", path, why);
    }
    if ((s = actc_checkpoint_load(path, m, NULL, NULL)) != ACTC_OK) {
        actc_model_free(m);
        return s;
    }
    *out = m;
    return ACTC_OK;
}

/* A policy's learnt state (pol, what save_state wrote; NULL: none kept) and
 * the controller's (ctl; NULL: none) into t: the policy's into a fresh
 * policy first, so that on any failure the trainer keeps the one it has. */
static actc_status install_learnt(actc_trainer *t, const char *path, const uint8_t *pol, size_t plen,
                                  const uint8_t *ctl, size_t clen)
{
    actc_policy *fresh = NULL;
    actc_status s = ACTC_OK;
    if (pol) {
        if ((s = actc__policy_create(t->policy, &fresh)) != ACTC_OK) return s;
        actc__rbuf r = {pol, 0, plen, 0};
        if (fresh->load_state && (s = fresh->load_state(fresh, &r)) != ACTC_OK) {
            char why[1024];
            snprintf(why, sizeof why, "%s", actc_last_error());
            s = actc_set_error(s, "checkpoint %s: %s", path, why);
            goto out;
        }
        if (r.pos != r.end) {
            s = actc_set_error(ACTC_ERR_FORMAT, "checkpoint %s: the %s policy state has %zu bytes this policy does not "
                                                "read",
                               path, t->policy, r.end - r.pos);
            goto out;
        }
    }
    if (ctl) {
        actc__rbuf r = {ctl, 0, clen, 0};
        if ((s = actc__controller_load(t->ctrl, &r)) != ACTC_OK || r.pos != r.end) {
            char why[1024];
            snprintf(why, sizeof why, "%s", s != ACTC_OK ? actc_last_error() : "trailing bytes");
            s = actc_set_error(s != ACTC_OK ? s : ACTC_ERR_FORMAT, "checkpoint %s: controller state: %s", path, why);
            goto out;
        }
    }
    if (fresh) {
        const actc_policy *old = actc__ctx_policy_of(t->ctx);
        fresh->frozen = old ? old->frozen : 0;
        s = actc__ctx_install_policy(t->ctx, fresh);
        fresh = NULL; /* installed, or freed by install on failure */
    }
out:
    actc__policy_free(fresh);
    return s;
}

actc_status actc_trainer_load(actc_trainer *t, const char *path)
{
    if (!t || !path) return actc_set_error(ACTC_ERR_INVALID, "actc_trainer_load: NULL argument");
    ckpt c;
    actc_status s = load_whole(path, &c);
    if (s != ACTC_OK) return s;
    actc_tensor **os = NULL;
    int no = 0;
    if ((s = match(&c, t->m, c.has_optim ? t->opt : NULL, &os, &no)) != ACTC_OK) goto out;
    if (c.policy && strcmp(c.policy_spec, t->policy) != 0) {
        s = actc_set_error(ACTC_ERR_INVALID,
                           "checkpoint %s was trained with policy %s, this trainer uses %s: resume with the same "
                           "policy (or load only the weights and optimizer with actc_checkpoint_load)",
                           path, c.policy_spec, t->policy);
        goto out;
    }
    /* A trainer's checkpoint (its record names the policy) has the learnt
     * state (LEARNT, or both POLICY and CONTROLLER); without it the run
     * would go on from a fresh state with no word (a model's checkpoint
     * has none, and loads as weights). */
    if (c.info.version == CKPT_VERSION && c.info.policy[0] && (!c.policy || !c.controller)) {
        s = actc_set_error(ACTC_ERR_FORMAT, "%s is a trainer's checkpoint without the %s state: damaged or edited",
                           path, !c.policy ? "policy's learnt" : "controller's");
        goto out;
    }
    /* A pipeline's file holds each stage's learnt state, about that
     * stage's tensors: only the same stage of as many takes it
     * (actc__trainer_load_state); anyone else learns afresh, and so does a
     * part of a model (a stage) loading any other file. */
    const int part = actc_model_get_opts(t->m)->n_blocks > 0;
    if (!c.stages && !part &&
        (s = install_learnt(t, path, c.policy, c.policy_len, c.controller, c.controller_len)) != ACTC_OK)
        goto out;
    commit(&c, t->m, c.has_optim ? t->opt : NULL, os, no);
    t->step = c.info.step;
    t->epoch = c.info.epoch;
    t->batch = c.info.batch_in_epoch;
    s = actc_trainer_set_note(t, c.info.note[0] ? c.info.note : NULL);
    if (s == ACTC_OK) s = actc_trainer_set_recipe(t, c.info.has_recipe ? &c.info.recipe : NULL);
out:
    ckpt_free(&c);
    return s;
}

actc_status actc__trainer_load_rank(actc_trainer *t, const char *path, int rank, int size, int *applied)
{
    return actc__trainer_load_state(t, path, 0, rank, size, applied);
}

actc_status actc__trainer_load_state(actc_trainer *t, const char *path, int stages, int rank, int size, int *applied)
{
    *applied = 0;
    ckpt c;
    actc_status s = load_whole(path, &c);
    if (s != ACTC_OK) return s;
    actc__rbuf r = {stages ? c.stages : c.ranks, 0, stages ? c.stages_len : c.ranks_len, 0};
    if (!r.p || actc__r_u32(&r) != (uint32_t)size) goto out; /* none, or another number of ranks */
    if (c.policy && strcmp(c.policy_spec, t->policy) != 0) {
        s = actc_set_error(ACTC_ERR_INVALID, "checkpoint %s was trained with policy %s, this trainer uses %s", path,
                           c.policy_spec, t->policy);
        goto out;
    }
    if (stages && rank == 0) { /* stage 0's is LEARNT, which actc_trainer_load left */
        if ((s = install_learnt(t, path, c.policy, c.policy_len, c.controller, c.controller_len)) != ACTC_OK) goto out;
    } else if (rank > 0) {
        const uint8_t *blob = NULL;
        uint64_t n = 0;
        for (int k = 1; k <= rank; k++) { /* parse_sections checked the layout */
            n = actc__r_u64(&r);
            blob = actc__r_take(&r, (size_t)n);
        }
        const uint8_t *pol, *ctl;
        size_t plen, clen;
        if (!actc__learnt_split(blob, (size_t)n, &pol, &plen, &ctl, &clen)) {
            s = actc_set_error(ACTC_ERR_FORMAT, "%s is malformed: the policy state of %s %d", path,
                               stages ? "stage" : "rank", rank);
            goto out;
        }
        /* Policies that keep no state wrote none: nothing to install. */
        if ((s = install_learnt(t, path, plen ? pol : NULL, plen, clen ? ctl : NULL, clen)) != ACTC_OK)
            goto out;
    }
    *applied = 1;
out:
    ckpt_free(&c);
    return s;
}

actc_status actc_checkpoint_probe(const char *path)
{
    if (!path || !path[0]) return actc_set_error(ACTC_ERR_INVALID, "checkpoint path is empty");
    char *tmp = tmp_name(path);
    if (!tmp) return actc_set_error(ACTC_ERR_OOM, "out of memory for a file name");
    FILE *f = fopen(tmp, "wb");
    actc_status s = ACTC_OK;
    if (!f) s = actc_set_error(ACTC_ERR_IO, "cannot write checkpoint %s: %s", tmp, strerror(errno));
    else {
        fclose(f);
        unlink(tmp);
    }
    free(tmp);
    return s;
}
