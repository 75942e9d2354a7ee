/* Model registry and the state-tensor bookkeeping shared by all models. */
#include "model.h"
#include "../core/core.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_models =
    "  mlp        3-layer perceptron (hidden width --width, default 256)\n"
    "  resnet20   CIFAR-style ResNet-20 (He et al. 2016; 16/32/64 channels), 0.27M params\n"
    "  resnet32   CIFAR-style ResNet-32, 0.47M params\n"
    "  resnet56   CIFAR-style ResNet-56, 0.86M params\n"
    "  resnet18   ResNet-18, CIFAR-style stem (64-512 channels), 11.2M params\n"
    "  gpt-mini   GPT-2-style decoder: 6 layers, width 256, 8 heads, context 256, bytes; 4.9M params\n"
    "  llama-mini LLaMA-style decoder (RMSNorm, SwiGLU, RoPE): the gpt-mini shape; 5.2M params\n"
    "  gpt2-124m  the GPT-2 small shape: 12 layers, width 768, 12 heads, context 1024, vocab 50257\n"
    "  gpt, llama the same architectures with --layers/--width/--heads/--context/--vocab\n"
    "  gcn        graph convolutional network (Kipf & Welling 2017): 2 layers, width 64\n"
    "  gat        graph attention network (Velickovic et al. 2018): 2 layers, 8 heads x 8\n"
    "  gcnii      deep GCN with initial residual and identity mapping (Chen et al. 2020): 16 layers, width 64\n";

const char *actc_model_list(void) { return g_models; }

actc_model_opts actc_model_default_opts(void)
{
    actc_model_opts o;
    memset(&o, 0, sizeof o);
    o.in_channels = 1;
    o.in_h = 28;
    o.in_w = 28;
    o.num_classes = 10;
    return o;
}

static actc_status add_state(actc_model *m, actc_tensor *t)
{
    if (m->state_limit) {
        m->state_bytes += t->numel * sizeof(float);
        if (m->state_bytes > m->state_limit) {
            char a[32], b[32];
            return actc_set_error(ACTC_ERR_FORMAT,
                                  "%s describes a model %s larger than its own %s: the record is corrupt",
                                  m->limit_what, actc_format_bytes(m->state_bytes, a, sizeof a),
                                  actc_format_bytes(m->state_limit, b, sizeof b));
        }
    }
    if (m->n_state == m->cap_state) {
        int cap = m->cap_state ? 2 * m->cap_state : 64;
        actc_tensor **n = realloc(m->state, (size_t)cap * sizeof *n);
        if (!n) return actc_set_error(ACTC_ERR_OOM, "out of memory building model %s", m->name);
        m->state = n;
        m->cap_state = cap;
    }
    m->state[m->n_state++] = t;
    return ACTC_OK;
}

/* Check the size of a parameter before it is allocated (a limit set from a
 * file is checked before the memory is asked for, not after). */
static actc_status check_limit(actc_model *m, int ndim, const int *shape)
{
    if (!m->state_limit) return ACTC_OK;
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || !actc__mul_size(n, (size_t)shape[i], &n) || n > m->state_limit)
            return actc_set_error(ACTC_ERR_FORMAT, "%s describes a model larger than the file: the record is corrupt",
                                  m->limit_what);
    if (m->state_bytes + 4 * n > m->state_limit)
        return actc_set_error(ACTC_ERR_FORMAT, "%s describes a model larger than the file: the record is corrupt",
                              m->limit_what);
    return ACTC_OK;
}

actc_tensor *actc__model_param(actc_model *m, const char *name, int ndim, const int *shape, float std,
                         float fill)
{
    if (check_limit(m, ndim, shape) != ACTC_OK) return NULL;
    actc_tensor *t = actc_param_new(ndim, shape, name);
    if (!t) return NULL;
    uint64_t key = actc_rng_key(m->opts.seed, 0x494E4954ULL, m->init_counter++);
    for (size_t i = 0; i < t->numel; i++) {
        if (std > 0) t->data[i] = std * actc_rand_normal(key, i);
        else if (std < 0) t->data[i] = -std * (2.0f * actc_rand_uniform(key, i) - 1.0f);
        else t->data[i] = fill;
    }
    if (add_state(m, t) != ACTC_OK) {
        actc_tensor_release(t);
        return NULL;
    }
    return t;
}

actc_tensor *actc__model_buffer(actc_model *m, const char *name, int ndim, const int *shape, float fill)
{
    if (check_limit(m, ndim, shape) != ACTC_OK) return NULL;
    actc_tensor *t = actc_tensor_new(ACTC_MEM_PARAM, ndim, shape);
    if (!t) return NULL;
    snprintf(t->name, sizeof t->name, "%s", name);
    for (size_t i = 0; i < t->numel; i++) t->data[i] = fill;
    if (add_state(m, t) != ACTC_OK) {
        actc_tensor_release(t);
        return NULL;
    }
    m->n_buffers++;
    return t;
}

/* Parameters first, buffers after, each group in creation order. */
actc_status actc__model_finish(actc_model *m)
{
    int n = m->n_state, np = 0;
    actc_tensor **sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
    m->params = malloc((size_t)(n ? n : 1) * sizeof *m->params);
    if (!sorted || !m->params) {
        free(sorted);
        return actc_set_error(ACTC_ERR_OOM, "out of memory building model %s", m->name);
    }
    for (int i = 0; i < n; i++)
        if (m->state[i]->is_param) sorted[np++] = m->state[i];
    int k = np;
    for (int i = 0; i < n; i++)
        if (!m->state[i]->is_param) sorted[k++] = m->state[i];
    if (n) { /* a build that only counts holds none (state NULL) */
        memcpy(m->state, sorted, (size_t)n * sizeof *sorted);
        memcpy(m->params, sorted, (size_t)np * sizeof *sorted);
    }
    m->n_params = np;
    free(sorted);
    return ACTC_OK;
}

/* Sizes a model's options may hold: large enough for every real model,
 * small enough that no product of two of them overflows an int index. */
#define OPT_MAX (1 << 20)

static actc_status check_opts(const char *name, const actc_model_opts *o)
{
    const struct {
        const char *what;
        int v;
    } f[] = {{"in_channels", o->in_channels}, {"in_h", o->in_h},       {"in_w", o->in_w},
             {"num_classes", o->num_classes}, {"width", o->width},     {"n_layers", o->n_layers},
             {"n_heads", o->n_heads},         {"context", o->context}, {"vocab", o->vocab}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v > OPT_MAX)
            return actc_set_error(ACTC_ERR_INVALID, "model %s: %s = %d is over the limit of %d", name, f[i].what,
                                  f[i].v, OPT_MAX);
    if ((int64_t)o->in_channels * o->in_h * o->in_w > INT_MAX)
        return actc_set_error(ACTC_ERR_INVALID, "model %s: input %d x %d x %d is too large", name, o->in_channels,
                              o->in_h, o->in_w);
    if (!(o->dropout >= 0 && o->dropout < 1))
        return actc_set_error(ACTC_ERR_INVALID, "model %s: dropout %g must be in [0, 1)", name, (double)o->dropout);
    if (o->attention != ACTC_ATTN_FLASH && o->attention != ACTC_ATTN_NAIVE)
        return actc_set_error(ACTC_ERR_INVALID, "model %s: unknown attention form %d", name, o->attention);
    return ACTC_OK;
}

static actc_status create(const char *name, const actc_model_opts *o, size_t limit, const char *what, int count_only,
                          actc_model **out)
{
    *out = NULL;
    actc_model *m = calloc(1, sizeof *m);
    if (!m) return actc_set_error(ACTC_ERR_OOM, "out of memory for a model");
    m->count_only = count_only;
    m->state_limit = limit;
    snprintf(m->limit_what, sizeof m->limit_what, "%s", what ? what : "");
    m->opts = o ? *o : actc_model_default_opts();
    actc_model_opts d = actc_model_default_opts();
    if (m->opts.in_channels <= 0) m->opts.in_channels = d.in_channels;
    if (m->opts.in_h <= 0) m->opts.in_h = d.in_h;
    if (m->opts.in_w <= 0) m->opts.in_w = d.in_w;
    if (m->opts.num_classes <= 0) m->opts.num_classes = d.num_classes;
    if (m->opts.width < 0) m->opts.width = 0; /* the builder picks */
    snprintf(m->name, sizeof m->name, "%s", name ? name : "");
    actc_status s;
    if (!name) s = actc_set_error(ACTC_ERR_INVALID, "no model name given");
    else if ((s = check_opts(name, &m->opts)) != ACTC_OK) {}
    else if ((m->opts.n_blocks || count_only) && !actc_model_name_takes_tokens(name))
        s = actc_set_error(ACTC_ERR_INVALID, "model %s: only the transformers (gpt, llama and their presets) are built "
                                             "in parts (n_blocks %d)", name, m->opts.n_blocks);
    else if (!strcmp(name, "mlp")) s = actc__mlp_build(m);
    else if (!strncmp(name, "resnet", 6)) s = actc__resnet_build(m, name);
    else if (actc_model_name_takes_tokens(name)) s = actc__transformer_build(m, name);
    else if (actc_model_name_takes_graph(name)) s = actc__gnn_build(m, name);
    else s = actc_set_error(ACTC_ERR_INVALID, "unknown model '%s'; valid models:\n%s", name, g_models);
    if (s == ACTC_OK) s = actc__model_finish(m);
    if (s != ACTC_OK) {
        actc_model_free(m);
        return s;
    }
    m->state_limit = 0; /* the limit guards the build only */
    *out = m;
    return ACTC_OK;
}

actc_status actc__model_create_limited(const char *name, const actc_model_opts *o, size_t limit, const char *what,
                                       actc_model **out)
{
    return create(name, o, limit, what, 0, out);
}

actc_status actc__model_count(const char *name, const actc_model_opts *o, actc_model **out)
{
    return create(name, o, 0, NULL, 1, out);
}

actc_status actc_model_create(const char *name, const actc_model_opts *o, actc_model **out)
{
    return actc__model_create_limited(name, o, 0, NULL, out);
}

actc_status actc_model_custom(const char *name, actc_tensor *const *params, int n_params, actc_tensor *const *buffers,
                              int n_buffers, actc_forward_fn forward, void *user, actc_model **out)
{
    if (out) *out = NULL;
    if (!out || !forward || !name || !name[0] || n_params < 0 || n_buffers < 0 || (n_params && !params) ||
        (n_buffers && !buffers))
        return actc_set_error(ACTC_ERR_INVALID, "actc_model_custom: need a name, a forward function and the arrays "
                                                "of the counts given");
    if (strlen(name) >= sizeof ((actc_model *)0)->name)
        return actc_set_error(ACTC_ERR_INVALID, "actc_model_custom: name '%s' is longer than %zu bytes", name,
                              sizeof ((actc_model *)0)->name - 1);
    /* Checkpoints find tensors by name: each needs one, and a different one. */
    const int n = n_params + n_buffers;
    for (int i = 0; i < n; i++) {
        const actc_tensor *t = i < n_params ? params[i] : buffers[i - n_params];
        const char *what = i < n_params ? "parameter" : "buffer";
        const int k = i < n_params ? i : i - n_params;
        if (!t || !t->data) return actc_set_error(ACTC_ERR_INVALID, "model %s: %s %d is NULL or has no data", name, what, k);
        if (i < n_params && !t->is_param)
            return actc_set_error(ACTC_ERR_INVALID, "model %s: parameter %d (%s) was not made with actc_param_new", name,
                                  k, t->name);
        if (!t->name[0])
            return actc_set_error(ACTC_ERR_INVALID, "model %s: %s %d has no name (checkpoints store tensors by name)",
                                  name, what, k);
        for (int j = 0; j < i; j++) {
            const actc_tensor *u = j < n_params ? params[j] : buffers[j - n_params];
            if (!strcmp(u->name, t->name))
                return actc_set_error(ACTC_ERR_INVALID, "model %s: two tensors are named '%s'", name, t->name);
        }
    }
    actc_model *m = calloc(1, sizeof *m);
    if (!m) return actc_set_error(ACTC_ERR_OOM, "out of memory for a model");
    snprintf(m->name, sizeof m->name, "%s", name);
    m->opts = actc_model_default_opts();
    m->custom = 1;
    m->user_forward = forward;
    m->user = user;
    m->cap_state = n;
    m->state = malloc(((size_t)n + 1) * sizeof *m->state);
    m->params = malloc(((size_t)n_params + 1) * sizeof *m->params);
    if (!m->state || !m->params) {
        actc_model_free(m);
        return actc_set_error(ACTC_ERR_OOM, "out of memory for model %s", name);
    }
    for (int i = 0; i < n; i++) {
        actc_tensor *t = i < n_params ? params[i] : buffers[i - n_params];
        m->state[m->n_state++] = actc_tensor_retain(t);
        if (i < n_params) m->params[m->n_params++] = t;
    }
    m->n_buffers = n_buffers;
    *out = m;
    return ACTC_OK;
}

int actc_model_is_custom(const actc_model *m) { return m && m->custom; }

void actc_model_free(actc_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_state; i++) actc_tensor_release(m->state[i]);
    if (m->impl_free) m->impl_free(m->impl);
    free(m->unit_sizes);
    free(m->state);
    free(m->params);
    free(m);
}

const char *actc_model_name(const actc_model *m) { return m->name; }
const actc_model_opts *actc_model_get_opts(const actc_model *m) { return &m->opts; }

actc_tensor *actc_model_forward(actc_model *m, actc_ctx *ctx, actc_tensor *x)
{
    const actc_model_opts *o = &m->opts;
    if (m->custom) {
        actc_batch b = {.x = x};
        return m->user_forward(ctx, &b, m->user);
    }
    if (!m->forward) {
        actc_set_error(ACTC_ERR_INVALID, "model %s takes %s", m->name,
                       m->forward_graph ? "a graph: use actc_model_forward_batch with a graph batch"
                                        : "token ids: use actc_model_forward_tokens");
        return NULL;
    }
    if (!x || x->ndim != 4 || x->shape[1] != o->in_channels || x->shape[2] != o->in_h ||
        x->shape[3] != o->in_w) {
        char shp[64] = "(null)";
        if (x) actc_shape_str(x, shp, sizeof shp);
        actc_set_error(ACTC_ERR_INVALID, "model %s expects input [N, %d, %d, %d], got %s", m->name,
                       o->in_channels, o->in_h, o->in_w, shp);
        return NULL;
    }
    return m->forward(m, ctx, x);
}

int actc_model_takes_tokens(const actc_model *m) { return m->forward_tokens != NULL; }

int actc_model_takes_graph(const actc_model *m) { return m && m->forward_graph != NULL; }

int actc_model_name_takes_graph(const char *name)
{
    return name && (!strcmp(name, "gcn") || !strcmp(name, "gat") || !strcmp(name, "gcnii"));
}

int actc_model_name_takes_tokens(const char *name)
{
    static const char *const lms[] = {"gpt", "llama", "gpt-mini", "llama-mini", "gpt2-124m"};
    for (size_t i = 0; name && i < sizeof lms / sizeof *lms; i++)
        if (!strcmp(name, lms[i])) return 1;
    return 0;
}

actc_tensor *actc_model_forward_tokens(actc_model *m, actc_ctx *ctx, const int32_t *ids, int B, int T)
{
    const actc_model_opts *o = &m->opts;
    if (m->custom) {
        actc_batch b = {.ids = ids, .B = B, .T = T};
        return m->user_forward(ctx, &b, m->user);
    }
    if (!m->forward_tokens) {
        actc_set_error(ACTC_ERR_INVALID, "model %s takes %s, not token ids", m->name,
                       m->forward_graph ? "a graph (actc_model_forward_batch)" : "images (actc_model_forward)");
        return NULL;
    }
    if (B < 1 || T < 1 || !ids) {
        actc_set_error(ACTC_ERR_INVALID, "model %s: need B >= 1 sequences of T >= 1 token ids, got B=%d T=%d%s",
                       m->name, B, T, ids ? "" : " (ids NULL)");
        return NULL;
    }
    if (T > o->context) {
        actc_set_error(ACTC_ERR_INVALID, "model %s: sequence length %d is over its context of %d positions", m->name,
                       T, o->context);
        return NULL;
    }
    return m->forward_tokens(m, ctx, ids, B, T);
}

int actc_batch_samples(const actc_batch *b)
{
    if (!b) return 0;
    if (b->graph) return 1;
    if (b->x) return b->x->ndim > 0 ? b->x->shape[0] : 1;
    return b->B;
}

actc_tensor *actc_model_forward_batch(actc_model *m, actc_ctx *ctx, const actc_batch *b)
{
    if (!m || !ctx || !b) {
        actc_set_error(ACTC_ERR_INVALID, "actc_model_forward_batch: NULL model, context or batch");
        return NULL;
    }
    if (m->custom) return m->user_forward(ctx, b, m->user);
    if (m->forward_hidden && b->x) return m->forward_hidden(m, ctx, b->x);
    if (m->forward_tokens) return actc_model_forward_tokens(m, ctx, b->ids, b->B, b->T);
    if (m->forward_graph) return m->forward_graph(m, ctx, b);
    return actc_model_forward(m, ctx, b->x);
}

int actc_model_params(actc_model *m, actc_tensor ***out)
{
    *out = m->params;
    return m->n_params;
}

int actc_model_state(actc_model *m, actc_tensor ***out)
{
    *out = m->state;
    return m->n_state;
}

size_t actc_model_num_params(actc_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) n += m->params[i]->numel;
    return n;
}

void actc_model_zero_grad(actc_model *m)
{
    for (int i = 0; i < m->n_params; i++) actc_tensor_drop_grad(m->params[i]);
}
