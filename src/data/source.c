/* Data sources: the batches of an epoch by index, for the trainer.  Each
 * kind wraps a reader of the data layer: the image loader (shuffle and
 * augmentation as a pure function of (seed, epoch, index)), random text
 * windows (a pure function of (seed, step)), the evenly spread validation
 * windows, a graph's nodes of one split (the whole graph, one batch per
 * epoch), or the caller's own function.  A source keeps the last batch it
 * handed out (an image tensor, token buffers) until the next get. */
#include "data.h"
#include <stdlib.h>
#include <string.h>

enum { SRC_IMAGES, SRC_TEXT, SRC_TEXT_EVAL, SRC_GRAPH, SRC_CUSTOM };

struct actc_source {
    int kind;
    int batches;
    /* images */
    actc_loader *loader;
    actc_tensor *x;           /* the last batch's images (SCRATCH)          */
    /* text */
    const actc_text_corpus *c;
    int B, T;
    uint64_t seed;
    int32_t *window;          /* B windows of T + 1 bytes                   */
    int32_t *ids, *targets;   /* B * T inputs and next bytes                */
    size_t n, span;           /* evaluation: windows, last window start     */
    int tiled;                /* evaluation: windows every T bytes          */
    /* graph: the nodes of one split (ascending) and their labels */
    const actc_graph *g;
    int32_t *nodes, *node_labels;
    int n_nodes;
    /* custom */
    actc_source_get_fn get;
    void *user;
};

static actc_status new_source(int kind, actc_source **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return actc_set_error(ACTC_ERR_OOM, "out of memory for a data source");
    (*out)->kind = kind;
    return ACTC_OK;
}

void actc_source_free(actc_source *s)
{
    if (!s) return;
    actc_tensor_release(s->x);
    actc_loader_free(s->loader);
    free(s->window);
    free(s->ids);
    free(s->targets);
    free(s->nodes);
    free(s->node_labels);
    free(s);
}

int actc_source_batches(const actc_source *s) { return s ? s->batches : 0; }

actc_status actc_source_images(const actc_image_dataset *d, int batch, int drop_last, const actc_loader_opts *o,
                               actc_source **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_source_images: out is NULL");
    *out = NULL;
    actc_source *s;
    actc_status st = new_source(SRC_IMAGES, &s);
    if (st != ACTC_OK) return st;
    if (!(s->loader = actc_loader_new(d, batch, drop_last, o))) {
        actc_source_free(s);
        return actc_last_status();
    }
    s->batches = actc_loader_num_batches(s->loader);
    if (s->batches < 1) {
        actc_source_free(s);
        return actc_set_error(ACTC_ERR_INVALID, "the data set (%d images) is smaller than one batch of %d", d->n,
                              batch);
    }
    *out = s;
    return ACTC_OK;
}

/* Token buffers for B windows of T tokens. */
static actc_status text_buffers(actc_source *s, int B, int T)
{
    size_t n = (size_t)B * (size_t)T;
    if (B < 1 || T < 1 || n / (size_t)B != (size_t)T || n > SIZE_MAX / sizeof(int32_t) / 2)
        return actc_set_error(ACTC_ERR_INVALID, "text batches of %d windows of %d tokens: both must be positive and "
                                                "their product representable", B, T);
    s->B = B;
    s->T = T;
    if (!(s->window = malloc((n + (size_t)B) * sizeof(int32_t))) || !(s->ids = malloc(n * sizeof(int32_t))) ||
        !(s->targets = malloc(n * sizeof(int32_t))))
        return actc_set_error(ACTC_ERR_OOM, "out of memory for a batch of %d x %d tokens", B, T);
    return ACTC_OK;
}

/* Check that part `split` of c holds one window of T + 1 bytes. */
static actc_status check_part(const actc_text_corpus *c, int split, int T)
{
    if (!c || !c->data || c->train_end > c->n)
        return actc_set_error(ACTC_ERR_INVALID, "text source: the corpus is not loaded");
    size_t len = split ? c->n - c->train_end : c->train_end;
    if (len < (size_t)T + 1)
        return actc_set_error(ACTC_ERR_INVALID,
                              "the corpus %s is too short for windows of %d tokens: its %s part has %zu bytes (needs at "
                              "least %d); use a longer text or shorter windows",
                              c->source, T, split ? "validation" : "train", len, T + 1);
    return ACTC_OK;
}

actc_status actc_source_text(const actc_text_corpus *c, int B, int T, uint64_t seed, int batches, actc_source **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_source_text: out is NULL");
    *out = NULL;
    if (batches < 1) return actc_set_error(ACTC_ERR_INVALID, "a text source needs at least 1 batch per epoch");
    if (T < 1) return actc_set_error(ACTC_ERR_INVALID, "text windows of %d tokens: must be positive", T);
    actc_status st = check_part(c, 0, T);
    if (st != ACTC_OK) return st;
    actc_source *s;
    if ((st = new_source(SRC_TEXT, &s)) != ACTC_OK) return st;
    if ((st = text_buffers(s, B, T)) != ACTC_OK) {
        actc_source_free(s);
        return st;
    }
    s->c = c;
    s->seed = seed;
    s->batches = batches;
    *out = s;
    return ACTC_OK;
}

actc_status actc_source_text_eval(const actc_text_corpus *c, int T, uint64_t tokens, int B, actc_source **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_source_text_eval: out is NULL");
    *out = NULL;
    if (T < 1 || B < 1)
        return actc_set_error(ACTC_ERR_INVALID, "validation windows of %d tokens in batches of %d: both must be "
                                                "positive", T, B);
    actc_status st = check_part(c, 1, T);
    if (st != ACTC_OK) return st;
    const size_t len = c->n - c->train_end, span = len - (size_t)T - 1; /* last window start */
    size_t n = tokens > 0 ? (size_t)(tokens / (uint64_t)T) : (len - 1) / (size_t)T;
    if (n < 1) n = 1;
    if (n > span + 1) n = span + 1;
    if (n / (size_t)B >= (size_t)INT32_MAX)
        return actc_set_error(ACTC_ERR_INVALID, "%zu validation windows are too many", n);
    actc_source *s;
    if ((st = new_source(SRC_TEXT_EVAL, &s)) != ACTC_OK) return st;
    if ((st = text_buffers(s, (size_t)B < n ? B : (int)n, T)) != ACTC_OK) {
        actc_source_free(s);
        return st;
    }
    s->c = c;
    s->n = n;
    s->span = span;
    s->tiled = tokens == 0;
    s->batches = (int)((n + (size_t)s->B - 1) / (size_t)s->B);
    *out = s;
    return ACTC_OK;
}

actc_status actc_source_graph(const actc_graph *g, int split, actc_source **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_source_graph: out is NULL");
    *out = NULL;
    if (!g || !g->x || !g->y || !g->split) return actc_set_error(ACTC_ERR_INVALID, "actc_source_graph: no graph");
    static const char *const names[] = {"train", "validation", "test"};
    if (split < ACTC_SPLIT_TRAIN || split > ACTC_SPLIT_TEST)
        return actc_set_error(ACTC_ERR_INVALID, "graph source: split %d is not 0 (train), 1 (validation) or 2 (test)",
                              split);
    int count = 0;
    for (int i = 0; i < g->n; i++) count += g->split[i] == split;
    if (count == 0)
        return actc_set_error(ACTC_ERR_INVALID, "graph source: split %s selects no node of the graph %s (%d nodes)",
                              names[split], g->source, g->n);
    actc_source *s;
    actc_status st = new_source(SRC_GRAPH, &s);
    if (st != ACTC_OK) return st;
    if (!(s->nodes = malloc((size_t)count * sizeof *s->nodes)) ||
        !(s->node_labels = malloc((size_t)count * sizeof *s->node_labels))) {
        actc_source_free(s);
        return actc_set_error(ACTC_ERR_OOM, "out of memory for the %d %s nodes of a graph source", count,
                              names[split]);
    }
    for (int i = 0, k = 0; i < g->n; i++)
        if (g->split[i] == split) {
            s->nodes[k] = i;
            s->node_labels[k++] = g->y[i];
        }
    s->g = g;
    s->n_nodes = count;
    s->batches = 1;
    *out = s;
    return ACTC_OK;
}

actc_status actc_source_custom(actc_source_get_fn get, void *user, int batches, actc_source **out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_source_custom: out is NULL");
    *out = NULL;
    if (!get || batches < 1)
        return actc_set_error(ACTC_ERR_INVALID, "actc_source_custom: need a function and at least 1 batch per epoch");
    actc_source *s;
    actc_status st = new_source(SRC_CUSTOM, &s);
    if (st != ACTC_OK) return st;
    s->get = get;
    s->user = user;
    s->batches = batches;
    *out = s;
    return ACTC_OK;
}

/* Split B windows of T + 1 bytes into inputs and next-byte targets. */
static void split_windows(actc_source *s, int B)
{
    const int T = s->T;
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
            s->ids[(size_t)r * T + t] = s->window[(size_t)r * (T + 1) + t];
            s->targets[(size_t)r * T + t] = s->window[(size_t)r * (T + 1) + t + 1];
        }
}

actc_status actc_source_get(actc_source *s, uint64_t epoch, uint64_t index, uint64_t step, actc_batch *b)
{
    if (!s || !b) return actc_set_error(ACTC_ERR_INVALID, "actc_source_get: NULL source or batch");
    if (index >= (uint64_t)s->batches)
        return actc_set_error(ACTC_ERR_INVALID, "batch %llu of a source with %d per epoch",
                              (unsigned long long)index, s->batches);
    memset(b, 0, sizeof *b);
    switch (s->kind) {
    case SRC_IMAGES: {
        actc_tensor_release(s->x); /* the last batch goes before the next is made */
        s->x = NULL;
        if (epoch > INT32_MAX)
            return actc_set_error(ACTC_ERR_INVALID, "epoch %llu is past the loader's range", (unsigned long long)epoch);
        int bs;
        actc_status st = actc_loader_get(s->loader, (int)epoch, (int)index, &s->x, &b->labels, &bs);
        if (st != ACTC_OK) return st;
        b->x = s->x;
        return ACTC_OK;
    }
    case SRC_TEXT: {
        actc_status st = actc_text_batch(s->c, 0, s->B, s->T, s->seed, step, s->window);
        if (st != ACTC_OK) return st;
        split_windows(s, s->B);
        break;
    }
    case SRC_TEXT_EVAL: {
        const uint8_t *val = s->c->data + s->c->train_end;
        const size_t w0 = (size_t)index * (size_t)s->B;
        const int nb = (int)(s->n - w0 < (size_t)s->B ? s->n - w0 : (size_t)s->B);
        for (int r = 0; r < nb; r++) {
            const size_t w = w0 + (size_t)r;
            const size_t off = s->tiled ? w * (size_t)s->T : (s->n > 1 ? w * s->span / (s->n - 1) : 0);
            for (int t = 0; t <= s->T; t++) s->window[(size_t)r * (s->T + 1) + t] = val[off + (size_t)t];
        }
        split_windows(s, nb);
        b->ids = s->ids;
        b->B = nb;
        b->T = s->T;
        b->labels = s->targets;
        return ACTC_OK;
    }
    case SRC_GRAPH:
        b->x = s->g->x;
        b->graph = s->g;
        b->ids = s->nodes;
        b->B = s->n_nodes;
        b->T = 1;
        b->labels = s->node_labels;
        return ACTC_OK;
    default: return s->get(s->user, epoch, index, step, b);
    }
    b->ids = s->ids;
    b->B = s->B;
    b->T = s->T;
    b->labels = s->targets;
    return ACTC_OK;
}

void actc__source_drop(actc_source *s)
{
    if (!s) return;
    actc_tensor_release(s->x);
    s->x = NULL;
}
