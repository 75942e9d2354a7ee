/* The saved-context store: the one place where tensors kept for backward are
 * encoded (by the codec the policy picks), accounted and decoded.
 *
 * Accounting.  stored_bytes is the payload held now (scales and headers of a
 * codec are part of its payload).  fp32_bytes is what a plain fp32 framework
 * would keep for the same backward pass: each distinct tensor once at 4 bytes
 * per element, whatever kinds it was saved as.  So a ReLU output saved as MASK
 * and again as the next convolution's ACT input counts once in fp32 (PyTorch
 * keeps that one tensor for both), under ACT.  A MASK save no ACT save shares
 * counts 4 bytes per element, and INDEX saves count 4 bytes per element (an
 * int32 index tensor).
 *
 * References.  A save whose codec is the plain fp32 copy (`none`, EXACT
 * saves, whatever a policy keeps exact) holds the tensor instead of a copy,
 * as PyTorch does: copying cost 7-8% of a gpt-mini step under `none`.  The
 * entry owns one reference to the tensor that owns the block (a view's
 * base), and while any entry holds it the block counts as CONTEXT, so the
 * allocator still shows what the store keeps, once; stored_bytes counts the
 * fp32 codec's size for each such entry, as it did for the copies.  A load
 * hands out a view (a new tensor sharing the data), so callers release what
 * they load as before and never see the saved tensor's own struct.  A write
 * into the tensor after the save would change what backward reads: the
 * entry keeps the tensor's version (actc_tensor_mark_changed) and a load
 * after a change fails rather than give a wrong gradient. */
#include "autograd.h"
#include "../core/core.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stable key of a save: (scope, op, k) plus how many times that triple was
 * already seen this step, so repeated unnamed layers stay distinct.  Looked
 * up once per save; the occurrence counts (count_key) only when the save
 * makes an entry (a repeat of a held save does not). */
typedef struct {
    uint64_t key;
    actc_key_count *slot; /* the triple's counter; NULL: occurrences ignored */
} save_key;

static save_key key_of(actc_ctx *ctx, const actc_node *node, int k)
{
    uint64_t h = actc_hash_bytes(ACTC_HASH_START, node->scope_, strlen(node->scope_));
    h = actc_hash_bytes(h ^ 0x2F, node->op, strlen(node->op));
    h = actc_rng_key(h, (uint64_t)k, 0);
    if (ctx->occ_used * 2 >= ctx->occ_cap) {
        size_t cap = ctx->occ_cap ? 2 * ctx->occ_cap : 1024;
        actc_key_count *n = calloc(cap, sizeof *n);
        if (!n) return (save_key){h, NULL}; /* degrade: occurrence ignored */
        for (size_t i = 0; i < ctx->occ_cap; i++)
            if (ctx->occ[i].key) {
                size_t j = ctx->occ[i].key & (cap - 1);
                while (n[j].key) j = (j + 1) & (cap - 1);
                n[j] = ctx->occ[i];
            }
        free(ctx->occ);
        ctx->occ = n;
        ctx->occ_cap = cap;
    }
    size_t j = (h | 1) & (ctx->occ_cap - 1);
    while (ctx->occ[j].key && ctx->occ[j].key != (h | 1)) j = (j + 1) & (ctx->occ_cap - 1);
    if (!ctx->occ[j].key) {
        ctx->occ[j].key = h | 1;
        ctx->occ_used++;
    }
    return (save_key){actc_rng_key(h, ctx->occ[j].count, 1), &ctx->occ[j]};
}

static void count_key(const save_key *k)
{
    if (k->slot) k->slot->count++;
}

static void note_peak(actc_ctx *ctx)
{
    actc_store_stats *st = &ctx->st;
    if (ctx->in_backward && st->stored_bytes > st->backward_peak) st->backward_peak = st->stored_bytes;
    if (ctx->in_backward && !ctx->sensitivity_pass && st->stored_bytes > st->context_backward_peak)
        st->context_backward_peak = st->stored_bytes;
    if (st->stored_bytes < st->stored_peak) return;
    st->stored_peak = st->stored_bytes;
    st->fp32_peak = st->fp32_bytes;
    memcpy(st->stored_by_kind, ctx->cur_by_kind, sizeof st->stored_by_kind);
    memcpy(st->fp32_by_kind, ctx->cur_fp32_by_kind, sizeof st->fp32_by_kind);
}

void actc__store_backward_begins(actc_ctx *ctx)
{
    actc_store_stats *st = &ctx->st;
    st->forward_bytes = st->backward_peak = st->stored_bytes;
    if (ctx->sensitivity_pass) return; /* GACT's measuring passes are not the step's context */
    if (st->stored_bytes > st->context_backward_peak) st->context_backward_peak = st->stored_bytes;
    if (st->stored_bytes < st->context_bytes || !st->stored_bytes) return;
    st->context_bytes = st->stored_bytes;
    st->context_fp32 = st->fp32_bytes;
    memcpy(st->context_by_kind, ctx->cur_by_kind, sizeof st->context_by_kind);
    st->context_none = ctx->ref_bytes;
    memcpy(st->context_none_by_kind, ctx->ref_by_kind, sizeof st->context_none_by_kind);
}

void actc_store_set_reference(actc_ctx *ctx, size_t bytes, const size_t *by_kind)
{
    if (!ctx) return;
    ctx->ref_bytes = bytes;
    memset(ctx->ref_by_kind, 0, sizeof ctx->ref_by_kind);
    if (bytes && by_kind) memcpy(ctx->ref_by_kind, by_kind, sizeof ctx->ref_by_kind);
}

actc_status actc_ctx_set_counting(actc_ctx *ctx, int on)
{
    if (!ctx) return actc_set_error(ACTC_ERR_INVALID, "actc_ctx_set_counting: NULL context");
    if (ctx->n_nodes || ctx->n_entries)
        return actc_set_error(ACTC_ERR_STATE, "cannot make a context counting or keeping while a tape is recorded");
    ctx->counting = on != 0;
    return ACTC_OK;
}

/* The tensor that owns t's block: t, or the base of a view.  The store
 * takes references to it; a save does not write the data, so the const of
 * actc_save's argument is about the values, which stay untouched. */
static actc_tensor *data_owner(const actc_tensor *t) { return t->base_ ? t->base_ : (actc_tensor *)t; }

/* Keep t by reference.  The block moves to CONTEXT with the first entry that
 * holds it (de-duplicated saves share an entry; a tensor saved as ACT and as
 * EXACT has two entries and one block, counted once by the allocator). */
static void entry_hold(actc_store_entry *e, const actc_tensor *t)
{
    actc_tensor *o = actc_tensor_retain(data_owner(t));
    if (o->store_refs_++ == 0) actc__mem_move(o->data, ACTC_MEM_CONTEXT);
    e->held = o;
}

/* Drop the entry's reference.  With the last entry the block goes back to
 * the tensor's category if someone else still owns the tensor (a loaded view,
 * the model code); otherwise it is freed here, as CONTEXT. */
static void entry_unhold(actc_store_entry *e)
{
    actc_tensor *o = e->held;
    e->held = NULL;
    if (--o->store_refs_ == 0 && o->refs_ > 1) actc__mem_move(o->data, o->cat);
    actc_tensor_release(o);
}

/* ACTC_ERR_STATE when the tensor entry e holds was written in place after
 * the save (the k-th of node): backward would read the new values. */
static actc_status check_unchanged(const actc_store_entry *e, const actc_node *node, int k)
{
    if (!e->held || e->held->version_ == e->version) return ACTC_OK;
    char shp[64];
    return actc_set_error(ACTC_ERR_STATE,
                          "save %d of operator %s%s%s (a tensor of shape %s) was modified in place after it was "
                          "saved for backward (version %u at the save, %u now); an in-place write must come "
                          "after backward, or work on a copy",
                          k, node->op, node->scope_[0] ? " in " : "", node->scope_,
                          actc_shape_str(e->held, shp, sizeof shp), (unsigned)e->version,
                          (unsigned)e->held->version_);
}

static void entry_free(actc_ctx *ctx, actc_store_entry *e)
{
    if (e->pending <= 0 && !e->blob && !e->recompute && !e->held) return;
    actc_mem_free(e->blob);
    e->blob = NULL;
    e->recompute = NULL;
    if (e->held) entry_unhold(e);
    ctx->st.stored_bytes -= e->bytes;
    ctx->cur_by_kind[e->kind] -= e->bytes;
    if (e->fp32_bytes) {
        /* Hand this tensor's fp32 share to another live entry of the same
         * tensor, if any, so the reference does not drop early. */
        for (int i = 0; i < ctx->n_entries; i++) {
            actc_store_entry *o = &ctx->entries[i];
            if (o != e && o->pending > 0 && o->ref_id == e->ref_id) {
                o->fp32_bytes = e->fp32_bytes;
                ctx->cur_fp32_by_kind[e->kind] -= e->fp32_bytes;
                ctx->cur_fp32_by_kind[o->kind] += e->fp32_bytes;
                e->fp32_bytes = 0;
                break;
            }
        }
        ctx->st.fp32_bytes -= e->fp32_bytes;
        ctx->cur_fp32_by_kind[e->kind] -= e->fp32_bytes;
        e->fp32_bytes = 0;
    }
    e->pending = 0;
}

/* Checks an INDEX save and returns in *width the codec width that holds its
 * largest value (the codec plans from the shape and the width alone). */
static actc_status check_index(const actc_tensor *t, const actc_node *node, int *width)
{
    float mx = 0.0f;
    for (size_t i = 0; i < t->numel; i++) {
        float v = t->data[i];
        mx = v > mx ? v : mx;
        if (!(v >= 0.0f) || v != floorf(v) || v >= 4294967296.0f)
            return actc_set_error(ACTC_ERR_INVALID,
                                  "operator %s saved an INDEX tensor with value %g at %zu "
                                  "(INDEX holds non-negative integers)",
                                  node->op, (double)v, i);
    }
    *width = actc_index_width(mx);
    return ACTC_OK;
}

const char *actc_role_name(actc_role r)
{
    static const char *const names[ACTC_ROLE_NROLES] = {
        "unknown",  "linear_in",  "matmul_in",  "conv_in",    "norm_in",     "act_in",      "act_deriv",
        "mul_in",   "attn_q",     "attn_k",     "attn_v",     "attn_out",    "attn_probs",  "attn_stats",
        "softmax_out", "loss_in", "segment_in", "stats",      "weight",      "mask",        "index",
        "projected"};
    return (unsigned)r < ACTC_ROLE_NROLES ? names[r] : "?";
}

int actc_role_is_attention(actc_role r) { return r >= ACTC_ROLE_ATTN_Q && r <= ACTC_ROLE_ATTN_STATS; }

actc_status actc_save(actc_ctx *ctx, actc_node *node, const actc_tensor *t, actc_save_kind kind)
{
    return actc_save_as(ctx, node, t, kind, NULL);
}

static actc_status save_entry(actc_ctx *ctx, actc_node *node, const actc_tensor *t, actc_save_kind kind,
                              const actc_save_role *role, actc_transform *done);

actc_status actc_save_as(actc_ctx *ctx, actc_node *node, const actc_tensor *t, actc_save_kind kind,
                         const actc_save_role *role)
{
    return save_entry(ctx, node, t, kind, role, NULL);
}

actc_status actc_save_offer(actc_ctx *ctx, actc_node *node, const actc_tensor *t, const actc_save_role *role,
                            actc_transform *done)
{
    if (!done) return actc_set_error(ACTC_ERR_INVALID, "actc_save_offer: NULL done");
    memset(done, 0, sizeof *done);
    return save_entry(ctx, node, t, ACTC_SAVE_ACT, role, done);
}

/* Checks a save's arguments before anything is planned. */
static actc_status check_save(const actc_node *node, const actc_tensor *t, actc_save_kind kind,
                              const actc_save_role *role)
{
    if ((unsigned)role->role >= ACTC_ROLE_NROLES)
        return actc_set_error(ACTC_ERR_INVALID, "operator %s: unknown save role %d", node ? node->op : "?",
                              (int)role->role);
    if (!node) return actc_set_error(ACTC_ERR_STATE, "actc_save without a tape node");
    if (!t || !t->data)
        return actc_set_error(ACTC_ERR_INVALID, "operator %s saved a tensor without data", node->op);
    if ((unsigned)kind >= ACTC_SAVE_NKINDS)
        return actc_set_error(ACTC_ERR_INVALID, "operator %s: unknown save kind %d", node->op, (int)kind);
    if (node->n_slots_ >= ACTC_NODE_MAX_SAVES)
        return actc_set_error(ACTC_ERR_INVALID, "operator %s saves more than %d tensors", node->op,
                              ACTC_NODE_MAX_SAVES);
    return ACTC_OK;
}

/* De-duplication: the same tensor saved again with the same kind, and not
 * written in place since (then the values differ), becomes one more use of
 * the entry that holds it.  1 if it did. */
static int reuse_entry(actc_ctx *ctx, actc_node *node, const actc_tensor *t, actc_save_kind kind, uint32_t version)
{
    for (int i = ctx->n_entries - 1; i >= 0; i--) {
        actc_store_entry *e = &ctx->entries[i];
        if (e->pending > 0 && e->tensor_id == t->id && e->kind == kind && e->version == version) {
            e->pending++;
            node->slots_[node->n_slots_++] = i;
            ctx->st.n_dedup++;
            return 1;
        }
    }
    return 0;
}

/* What the store does with one save: a codec with its arguments, or a
 * reference to the recompute region that produced the tensor. */
typedef struct {
    const actc_codec *codec; /* NULL for a region reference */
    actc_codec_args args;
    actc_node *region;
    uint64_t stable_key;
} save_plan;

static actc_status plan_save(actc_ctx *ctx, actc_node *node, const actc_tensor *t, actc_save_kind kind,
                             const actc_save_role *role, const actc_tensor *ref, uint64_t key, save_plan *p)
{
    memset(p, 0, sizeof *p);
    actc_codec_args *args = &p->args;
    if (kind == ACTC_SAVE_INDEX) {
        actc_status s = check_index(t, node, &args->width);
        if (s != ACTC_OK) return s;
    }
    args->ndim = t->ndim;
    memcpy(args->shape, t->shape, sizeof args->shape);
    const int k = node->n_slots_;
    actc_save_desc d = {node->op, node->scope_, k, node->index_, key, kind, role, t, ctx->step, node, 0, ctx->seed,
                        ctx->blocks > 0, NULL, ctx->stage_held, ctx->stage_held_max};
    p->stable_key = d.stable_key;
    args->key = actc_rng_key(ctx->seed ^ 0x53544F5245ULL, actc__stream_step(ctx), d.stable_key);
    /* The output of a recompute region is kept as a reference to it: a load
     * reruns the region from its own saves (its node's rerun_). */
    actc_node *producer = kind == ACTC_SAVE_ACT && ref == t ? t->producer_ : NULL;
    const int here = producer && producer->index_ < ctx->n_nodes && ctx->nodes[producer->index_] == producer;
    p->region = here && producer->rerun_ ? producer : NULL; /* a node of this context's tape */
    switch (kind) {
    case ACTC_SAVE_MASK: p->codec = &actc_codec_mask1; return ACTC_OK;
    case ACTC_SAVE_INDEX: p->codec = &actc_codec_index; return ACTC_OK;
    case ACTC_SAVE_EXACT: p->codec = &actc_codec_fp32; return ACTC_OK;
    default:
        if (p->region) return ACTC_OK;
        if (!ctx->policy || ctx->exact_saves) {
            p->codec = &actc_codec_fp32;
            return ACTC_OK;
        }
        return ctx->policy->choose(ctx->policy, &d, &p->codec, args);
    }
}

/* Carries out the plan into e: a region reference, a count (a counting
 * context), a reference to t (an fp32 save of a non-parameter), or an
 * encoded payload. */
static actc_status entry_fill(actc_ctx *ctx, actc_store_entry *e, const actc_node *node, const actc_tensor *t,
                              save_plan *p)
{
    /* A parameter is copied: its bytes are PARAM's for the whole run (moving
     * them to CONTEXT while saved would misreport both), the optimizer
     * writes it in place every step, and what operators save of one (a
     * norm's gamma that is not read in place) is a vector, cheap to copy. */
    const int by_ref = p->codec == &actc_codec_fp32 && !t->is_param && !ctx->fp32_copies;
    if (p->region) {
        e->recompute = p->region;
        return ACTC_OK;
    }
    e->bytes = p->codec->plan(&p->args, t->numel);
    if (ctx->counting) return ACTC_OK; /* measured, neither encoded nor held */
    if (by_ref) {
        entry_hold(e, t); /* the copy's size: the same stored_bytes */
        return ACTC_OK;
    }
    e->blob = actc_mem_alloc(ACTC_MEM_CONTEXT, e->bytes);
    if (!e->blob) {
        char shp[64], why[512];
        snprintf(why, sizeof why, "%s", actc_last_error()); /* not the buffer being written */
        return actc_set_error(ACTC_ERR_OOM, "%s (saving %s %s for backward)", why, node->op,
                              actc_shape_str(t, shp, sizeof shp));
    }
    const double t0 = actc__now();
    p->codec->encode(&p->args, t->data, t->numel, e->blob);
    ctx->st.encode_s += actc__now() - t0;
    return ACTC_OK;
}

/* The fp32 reference counts each tensor once.  If another kind of save of
 * this tensor already holds its share, an ACT save takes the share over,
 * so the per-kind table shows real activations under ACT (a ReLU output
 * saved as MASK and then as the next convolution's input is an ACT). */
static void entry_account(actc_ctx *ctx, actc_store_entry *e, const actc_tensor *ref)
{
    actc_store_entry *holder = NULL;
    for (int i = 0; i < ctx->n_entries; i++) {
        actc_store_entry *o = &ctx->entries[i];
        if (o->pending > 0 && o->ref_id == ref->id && o->fp32_bytes) holder = o;
    }
    e->fp32_bytes = holder ? 0 : ref->numel * sizeof(float);
    if (holder && e->kind == ACTC_SAVE_ACT) {
        ctx->cur_fp32_by_kind[holder->kind] -= holder->fp32_bytes;
        e->fp32_bytes = holder->fp32_bytes;
        ctx->st.fp32_bytes -= holder->fp32_bytes;
        holder->fp32_bytes = 0;
    }
    ctx->st.stored_bytes += e->bytes;
    ctx->st.fp32_bytes += e->fp32_bytes;
    ctx->cur_by_kind[e->kind] += e->bytes;
    ctx->cur_fp32_by_kind[e->kind] += e->fp32_bytes;
    note_peak(ctx);
}

/* A new entry for t (the save's stable key: key), its share of the fp32
 * reference ref's (t itself, or the tensor t is a transform of), counted
 * once per ref.  The policy answers once (plan_save), the store carries
 * the answer out (entry_fill). */
static actc_status add_entry(actc_ctx *ctx, actc_node *node, const actc_tensor *t, actc_save_kind kind,
                             const actc_save_role *role, const actc_tensor *ref, uint64_t key)
{
    save_plan p;
    actc_status s = plan_save(ctx, node, t, kind, role, ref, key, &p);
    if (s != ACTC_OK) return s;
    if (ctx->n_entries == ctx->cap_entries) {
        int cap = ctx->cap_entries ? 2 * ctx->cap_entries : 256;
        actc_store_entry *n = realloc(ctx->entries, (size_t)cap * sizeof *n);
        if (!n) return actc_set_error(ACTC_ERR_OOM, "out of memory growing the context store");
        ctx->entries = n;
        ctx->cap_entries = cap;
    }
    actc_store_entry *e = &ctx->entries[ctx->n_entries];
    memset(e, 0, sizeof *e);
    if ((s = entry_fill(ctx, e, node, t, &p)) != ACTC_OK) return s;
    e->version = data_owner(t)->version_;
    e->tensor_id = t->id;
    e->ref_id = ref->id;
    e->saver = node;
    e->role = role->role;
    e->stable_key = p.stable_key;
    e->kind = kind;
    e->codec = p.codec;
    e->args = p.args;
    e->numel = t->numel;
    e->ndim = t->ndim;
    memcpy(e->shape, t->shape, sizeof e->shape);
    e->pending = 1;
    entry_account(ctx, e, ref);
    node->slots_[node->n_slots_++] = ctx->n_entries++;
    return ACTC_OK;
}

/* 1 if a save still pending holds tensor t. */
static int held_elsewhere(const actc_ctx *ctx, const actc_tensor *t)
{
    for (int i = 0; i < ctx->n_entries; i++)
        if (ctx->entries[i].pending > 0 && ctx->entries[i].tensor_id == t->id) return 1;
    return 0;
}

/* The policy's transform for an ACT save of t that offers role->transforms
 * (the save's stable key: key), checked against what was offered:
 * out->kind ACTC_XFORM_NONE when t is to be saved itself. */
static actc_status plan_transform(actc_ctx *ctx, actc_node *node, const actc_tensor *t, const actc_save_role *role,
                                  uint64_t key, actc_transform *out)
{
    memset(out, 0, sizeof *out);
    actc_save_desc d = {node->op, node->scope_, node->n_slots_, node->index_, key, ACTC_SAVE_ACT, role,
                        t, ctx->step, node, held_elsewhere(ctx, t), ctx->seed, ctx->blocks > 0, NULL,
                        ctx->stage_held, ctx->stage_held_max};
    actc_status s = ctx->policy->transform(ctx->policy, &d, out);
    if (s != ACTC_OK) return s;
    if (out->kind & ~role->transforms)
        return actc_set_error(ACTC_ERR_INVALID, "policy %s planned transform %u for a save of %s, which offers %u",
                              ctx->policy->spec, out->kind, node->op, role->transforms);
    const int width = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
    if (out->kind == ACTC_XFORM_PROJECT) {
        if (t->ndim < 1 || out->proj.n != width || out->proj.rank < 1)
            return actc_set_error(ACTC_ERR_INVALID, "policy %s planned a projection %d -> %d for a save of %s of width %d",
                                  ctx->policy->spec, out->proj.n, out->proj.rank, node->op, width);
        return actc__projection_check(ctx->policy->spec, &out->proj);
    }
    return ACTC_OK;
}

/* Save z = x P in x's place: an ACT save of role PROJECTED (which the
 * policy may compress again with any codec), whose share of the fp32
 * reference is x's, so the context ratio compares with saving x itself. */
static actc_status save_projected(actc_ctx *ctx, actc_node *node, const actc_tensor *x, uint64_t key,
                                  const actc_projection *proj)
{
    int zshape[ACTC_MAX_DIMS];
    memcpy(zshape, x->shape, sizeof zshape);
    zshape[x->ndim - 1] = proj->rank;
    actc_tensor *z = actc_tensor_new(ACTC_MEM_SCRATCH, x->ndim, zshape);
    if (!z) return actc_last_status();
    actc_status s = actc_project(proj, x->data, (int)(x->numel / (size_t)proj->n), z->data);
    const actc_save_role zr = {.role = ACTC_ROLE_PROJECTED, .linear = 1, .fan_in = proj->rank}; /* F = dy^T z */
    if (s == ACTC_OK) s = add_entry(ctx, node, z, ACTC_SAVE_ACT, &zr, x, key);
    actc_tensor_release(z);
    return s;
}

/* One save: the arguments checked, the policy asked once and its answer
 * carried out.  A save that offers transforms (done not NULL) asks for the
 * transform first (done says which was applied); a save kept as itself
 * that repeats one the store holds is one more use of it; else its codec
 * or region.  The stable key is looked up once and counted by the entry
 * made. */
static actc_status save_entry(actc_ctx *ctx, actc_node *node, const actc_tensor *t, actc_save_kind kind,
                              const actc_save_role *role, actc_transform *done)
{
    static const actc_save_role undeclared = {.role = ACTC_ROLE_UNKNOWN};
    if (!role) role = &undeclared;
    actc_status s = check_save(node, t, kind, role);
    if (s != ACTC_OK) return s;
    ctx->st.n_saves++;
    const int offers = done && role->transforms && ctx->policy && ctx->policy->transform;
    save_key key = {0, NULL};
    if (offers) {
        key = key_of(ctx, node, node->n_slots_);
        actc_transform xf;
        if ((s = plan_transform(ctx, node, t, role, key.key, &xf)) != ACTC_OK) return s;
        if (xf.kind == ACTC_XFORM_PROJECT) {
            count_key(&key);
            if ((s = save_projected(ctx, node, t, key.key, &xf.proj)) == ACTC_OK) *done = xf;
            return s;
        }
    }
    if (reuse_entry(ctx, node, t, kind, data_owner(t)->version_)) return ACTC_OK;
    if (!offers) key = key_of(ctx, node, node->n_slots_);
    count_key(&key);
    return add_entry(ctx, node, t, kind, role, t, key.key);
}

int actc_saved_lossless(const actc_ctx *ctx, const actc_node *node, int k)
{
    if (!ctx || !node || k < 0 || k >= node->n_slots_ || node->slots_[k] < 0) return 0;
    const actc_store_entry *e = &ctx->entries[node->slots_[k]];
    return e->codec == &actc_codec_fp32 || e->codec == &actc_codec_index;
}

/* A new tensor holding entry e's values (the k-th save of node): a view of
 * the tensor it holds, decoded, or for a reference to a recompute region,
 * rerun.  The caller releases it either way. */
static actc_tensor *decode_entry(actc_ctx *ctx, actc_store_entry *e, const actc_node *node, int k)
{
    if (ctx->counting) {
        actc_set_error(ACTC_ERR_STATE, "save %d of operator %s was only counted (a counting context keeps "
                                       "nothing to load)", k, node->op);
        return NULL;
    }
    if (e->pending <= 0 || (!e->blob && !e->recompute && !e->held)) {
        actc_set_error(ACTC_ERR_STATE, "save %d of operator %s is no longer in the store", k, node->op);
        return NULL;
    }
    if (e->held) /* no copy, so no codec time */
        return check_unchanged(e, node, k) == ACTC_OK ? actc__tensor_view(e->held) : NULL;
    if (e->recompute) {
        actc_tensor *y = e->recompute->rerun_(ctx, e->recompute);
        if (y && (y->numel != e->numel || y->ndim != e->ndim ||
              memcmp(y->shape, e->shape, (size_t)e->ndim * sizeof *y->shape))) {
            actc_tensor_release(y);
            actc_set_error(ACTC_ERR_STATE, "the recompute region saved by operator %s changed its output's shape "
                                           "on a rerun", node->op);
            return NULL;
        }
        return y;
    }
    actc_tensor *t = actc_tensor_new(ACTC_MEM_SCRATCH, e->ndim, e->shape);
    if (t) {
        const double t0 = actc__now();
        e->codec->decode(&e->args, e->blob, e->numel, t->data);
        ctx->st.decode_s += actc__now() - t0;
    }
    return t;
}

actc_tensor *actc_load(actc_ctx *ctx, actc_node *node, int k)
{
    if (!node || k < 0 || k >= node->n_slots_) {
        actc_set_error(ACTC_ERR_INVALID, "actc_load of save %d of operator %s, which saved %d", k,
                       node ? node->op : "?", node ? node->n_slots_ : 0);
        return NULL;
    }
    int slot = node->slots_[k];
    if (slot < 0) {
        actc_set_error(ACTC_ERR_STATE, "save %d of operator %s was already loaded", k, node->op);
        return NULL;
    }
    actc_tensor *t = decode_entry(ctx, &ctx->entries[slot], node, k);
    if (!t) return NULL;
    /* entries may have moved if a region's rerun saved anything */
    actc_store_entry *e = &ctx->entries[slot];
    node->slots_[k] = -1;
    if (--e->pending == 0) entry_free(ctx, e);
    return t;
}

actc_tensor *actc__store_peek(actc_ctx *ctx, actc_node *node, int k)
{
    const int slot = k >= 0 && k < node->n_slots_ ? node->slots_[k] : -1;
    if (slot < 0) {
        actc_set_error(ACTC_ERR_STATE, "save %d of operator %s is no longer in the store", k, node->op);
        return NULL;
    }
    return decode_entry(ctx, &ctx->entries[slot], node, k);
}

actc_status actc_load_rows(actc_ctx *ctx, actc_node *node, int k, int row0, int nrows, float *dst)
{
    if (!node || k < 0 || k >= node->n_slots_)
        return actc_set_error(ACTC_ERR_INVALID, "actc_load_rows of save %d of operator %s, which saved %d", k,
                              node ? node->op : "?", node ? node->n_slots_ : 0);
    int slot = node->slots_[k];
    actc_store_entry *e = slot >= 0 ? &ctx->entries[slot] : NULL;
    if (ctx->counting)
        return actc_set_error(ACTC_ERR_STATE, "save %d of operator %s was only counted (a counting context keeps "
                                              "nothing to load)", k, node->op);
    if (!e || e->pending <= 0 || (!e->blob && !e->recompute && !e->held))
        return actc_set_error(ACTC_ERR_STATE, "save %d of operator %s is no longer in the store", k, node->op);
    if (e->recompute) {
        /* rerun the region whole (chunked readers of a region's output pay
         * one rerun per chunk: none of the operators that read in chunks
         * consumes one today) */
        actc_tensor *all = decode_entry(ctx, e, node, k);
        if (!all) return actc_last_status();
        const size_t d = all->numel / (size_t)(all->ndim > 0 ? all->shape[0] : 1);
        if (row0 < 0 || nrows < 0 || (all->ndim > 0 && row0 + nrows > all->shape[0])) {
            actc_tensor_release(all);
            return actc_set_error(ACTC_ERR_INVALID, "actc_load_rows: rows %d..%d of a save of operator %s", row0,
                                  row0 + nrows, node->op);
        }
        memcpy(dst, all->data + (size_t)row0 * d, (size_t)nrows * d * sizeof(float));
        actc_tensor_release(all);
        return ACTC_OK;
    }
    const int rows = e->ndim > 0 ? e->shape[0] : 1;
    if (row0 < 0 || nrows < 0 || row0 + nrows > rows)
        return actc_set_error(ACTC_ERR_INVALID, "actc_load_rows: rows %d..%d of a save with %d (operator %s)", row0,
                              row0 + nrows, rows, node->op);
    if (nrows == 0) return ACTC_OK;
    const size_t d = e->numel / (size_t)rows;
    if (e->held) { /* the rows themselves: a copy into dst, no codec */
        actc_status s = check_unchanged(e, node, k);
        if (s == ACTC_OK) actc__copy_floats(dst, e->held->data + (size_t)row0 * d, (size_t)nrows * d);
        return s;
    }
    const double t0 = actc__now();
    /* A scalar's one row is the whole tensor. */
    if (e->ndim > 0)
        e->codec->decode_rows(&e->args, e->blob, e->numel, (size_t)row0, (size_t)nrows, dst);
    else
        e->codec->decode(&e->args, e->blob, e->numel, dst);
    ctx->st.decode_s += actc__now() - t0;
    return ACTC_OK;
}

void actc__store_release_node(actc_ctx *ctx, actc_node *node)
{
    for (int k = 0; k < node->n_slots_; k++) {
        int slot = node->slots_[k];
        if (slot < 0) continue;
        actc_store_entry *e = &ctx->entries[slot];
        node->slots_[k] = -1;
        if (e->pending > 0 && --e->pending == 0) entry_free(ctx, e);
    }
}

void actc__store_observe_grad(actc_ctx *ctx, actc_node *node)
{
    actc_policy *learner = actc__policy_learner(ctx->policy);
    if (!learner || !learner->measure->observe_grad || ctx->policy->frozen || !node->output->grad) return;
    uint64_t keys[ACTC_NODE_MAX_SAVES];
    int n = 0;
    for (int k = 0; k < node->n_slots_; k++) {
        int slot = node->slots_[k];
        if (slot >= 0 && ctx->entries[slot].kind == ACTC_SAVE_ACT && ctx->entries[slot].pending > 0 &&
            ctx->entries[slot].codec)
            keys[n++] = ctx->entries[slot].stable_key;
    }
    if (!n) return;
    const actc_tensor *g = node->output->grad;
    const double sq = actc__sum_sq_diff(g->data, NULL, g->numel);
    int samples = g->ndim > 0 && g->shape[0] > 0 ? g->shape[0] : 1;
    learner->measure->observe_grad(learner, keys, n, sq / samples);
}

void actc__store_clear(actc_ctx *ctx)
{
    /* Entries of a tape that is gone were freed with its nodes; live ones
     * belong to the tape recorded now or to parked frames (frame.c). */
    if (ctx->parked > 0 || ctx->n_nodes > 0) return;
    for (int i = 0; i < ctx->n_entries; i++) {
        actc_store_entry *e = &ctx->entries[i];
        if (e->pending > 0) {
            e->pending = 0;
            actc_mem_free(e->blob);
            e->blob = NULL;
            if (e->held) entry_unhold(e);
        }
    }
    ctx->n_entries = 0;
    ctx->st.stored_bytes = 0;
    ctx->st.fp32_bytes = 0;
    memset(ctx->cur_by_kind, 0, sizeof ctx->cur_by_kind);
    memset(ctx->cur_fp32_by_kind, 0, sizeof ctx->cur_fp32_by_kind);
}

void actc__store_free(actc_ctx *ctx)
{
    ctx->parked = 0; /* frames never resumed: their saves go with the context */
    actc__store_clear(ctx);
    free(ctx->entries);
    ctx->entries = NULL;
    ctx->cap_entries = 0;
}

void actc_store_get_stats(const actc_ctx *ctx, actc_store_stats *out) { *out = ctx->st; }

int actc_store_list(const actc_ctx *ctx, actc_store_item *out, int cap)
{
    int n = 0;
    for (int i = 0; ctx && i < ctx->n_entries; i++) {
        const actc_store_entry *e = &ctx->entries[i];
        if (e->pending <= 0) continue;
        if (out && n < cap) {
            actc_store_item *it = &out[n];
            memset(it, 0, sizeof *it);
            snprintf(it->op, sizeof it->op, "%s", e->saver->op);
            snprintf(it->scope, sizeof it->scope, "%s", e->saver->scope_);
            snprintf(it->codec, sizeof it->codec, "%s", e->recompute ? "recompute" : e->codec->name);
            it->role = e->role;
            it->kind = e->kind;
            it->ndim = e->ndim;
            memcpy(it->shape, e->shape, sizeof it->shape);
            it->stored_bytes = e->bytes;
            it->fp32_bytes = e->fp32_bytes;
            it->loads = e->pending;
        }
        n++;
    }
    return n;
}

void actc_store_reset_peak(actc_ctx *ctx)
{
    ctx->st.stored_peak = 0;
    ctx->st.fp32_peak = 0;
    ctx->st.n_saves = 0;
    ctx->st.n_dedup = 0;
    ctx->st.forward_bytes = ctx->st.backward_peak = 0;
    ctx->st.encode_s = ctx->st.decode_s = 0;
    ctx->st.context_bytes = ctx->st.context_fp32 = ctx->st.context_none = ctx->st.context_backward_peak = 0;
    memset(ctx->st.context_by_kind, 0, sizeof ctx->st.context_by_kind);
    memset(ctx->st.context_none_by_kind, 0, sizeof ctx->st.context_none_by_kind);
    note_peak(ctx);
}
