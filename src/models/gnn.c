/* Graph networks for full-batch node classification: GCN (Kipf & Welling
 * 2017), GAT (Velickovic et al. 2018) and GCNII (Chen et al. 2020).
 *
 * The forward runs on the whole graph of the batch (x = its node features,
 * graph = its adjacency) and returns the logits of the batch's nodes only
 * (gather_rows by b->ids): the loss and the cross-entropy's saved
 * probabilities cover the labelled nodes, not all n.  Every layer is built
 * from operators that save through the store, so each policy compresses
 * node features, attention coefficients and masks unchanged; the adjacency
 * is the graph's, read in place (see actc_spmm).
 *
 * Where the bias goes: after propagation, A_hat (x W) + b for GCN and
 * sum_j alpha_ij (x W)_j + b for GAT, as Kipf's and Velickovic's code (and
 * PyG's layers) do; the attention scores see x W without it. */
#include "model.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { GNN_GCN = 0, GNN_GAT, GNN_GCNII };

/* The presets: the papers' usual settings for mid-size graphs. */
#define GCN_WIDTH 64
#define GCN_LAYERS 2
#define GAT_WIDTH 64 /* 8 heads x 8 features, concatenated */
#define GAT_HEADS 8
#define GAT_LAYERS 2
#define GAT_SLOPE 0.2f
#define GCNII_WIDTH 64
#define GCNII_LAYERS 16
#define GCNII_ALPHA 0.1f  /* initial residual (Chen et al.) */
#define GCNII_LAMBDA 0.5f /* beta_l = log(lambda / l + 1) */

typedef struct {
    int kind, layers, width, heads, in, classes;
    /* gcn / gat: layer l maps w[l]; gcnii: w[0] in, w[1..layers] the
     * propagation layers (no bias), w[layers + 1] out. */
    actc_tensor **w, **b;
    actc_tensor **att_src, **att_dst; /* gat: [heads_l, D_l] */
} gnn_impl;

static void gnn_free(void *p)
{
    gnn_impl *g = p;
    if (!g) return;
    free(g->w);
    free(g->b);
    free(g->att_src);
    free(g->att_dst);
    free(g);
}

/* Replace *cur by next (releasing the old one); NULL next propagates. */
static int step(actc_tensor **cur, actc_tensor *next)
{
    actc_tensor_release(*cur);
    *cur = next;
    return next != NULL;
}

static int drop(actc_ctx *ctx, actc_tensor **h, float p) { return p <= 0 || step(h, actc_dropout(ctx, *h, p)); }

/* One GCN layer: A_hat (x W) + b. */
static actc_tensor *gcn_layer(actc_ctx *ctx, const actc_graph *g, const actc_csr *an, actc_tensor *x, actc_tensor *w,
                              actc_tensor *b)
{
    actc_tensor *h = actc_linear(ctx, x, w, NULL);
    if (!h || !step(&h, actc_spmm(ctx, an, &g->adj_t, h))) return NULL;
    if (!step(&h, actc_bias_add(ctx, h, b))) return NULL;
    return h;
}

/* One GAT layer, `heads` heads of D = width / heads features each:
 * h = x W, alpha = softmax over each node's edges of
 * LeakyReLU(a_dst . h_i + a_src . h_j) (then attention dropout),
 * y_i = sum_j alpha_ij h_j + b. */
static actc_tensor *gat_layer(actc_ctx *ctx, const actc_graph *g, actc_tensor *x, actc_tensor *w, actc_tensor *b,
                              actc_tensor *as, actc_tensor *ad, float p)
{
    actc_tensor *h = actc_linear(ctx, x, w, NULL);
    if (!h) return NULL;
    actc_tensor *ss = actc_head_dot(ctx, h, as), *sd = ss ? actc_head_dot(ctx, h, ad) : NULL;
    actc_tensor *e = sd ? actc_gat_scores(ctx, &g->adj, &g->adj_t, sd, ss, GAT_SLOPE) : NULL;
    actc_tensor_release(ss);
    actc_tensor_release(sd);
    actc_tensor *alpha = e ? actc_edge_softmax(ctx, &g->adj, e) : NULL;
    actc_tensor_release(e);
    if (alpha && !drop(ctx, &alpha, p)) alpha = NULL;
    actc_tensor *y = alpha ? actc_edge_aggregate(ctx, &g->adj, &g->adj_t, alpha, h) : NULL;
    actc_tensor_release(alpha);
    actc_tensor_release(h);
    if (y) step(&y, actc_bias_add(ctx, y, b));
    return y;
}

/* The graph of the batch, checked against the model. */
static const actc_graph *batch_graph(const actc_model *m, const gnn_impl *p, const actc_batch *b)
{
    const actc_graph *g = b->graph;
    if (!g) {
        actc_set_error(ACTC_ERR_INVALID, "model %s takes a graph: the batch has none (actc_source_graph)", m->name);
        return NULL;
    }
    if (!b->x || b->x->ndim != 2 || b->x->shape[0] != g->n || b->x->shape[1] != p->in) {
        char shp[64] = "(null)";
        if (b->x) actc_shape_str(b->x, shp, sizeof shp);
        actc_set_error(ACTC_ERR_INVALID, "model %s expects node features [%d, %d] for its graph of %d nodes, got %s",
                       m->name, g->n, p->in, g->n, shp);
        return NULL;
    }
    if (g->n_classes > p->classes) {
        actc_set_error(ACTC_ERR_INVALID, "model %s has %d classes, the graph %d", m->name, p->classes, g->n_classes);
        return NULL;
    }
    if (!b->ids || b->B < 1) {
        actc_set_error(ACTC_ERR_INVALID, "model %s: the batch names no node to classify", m->name);
        return NULL;
    }
    return g;
}

static actc_tensor *gnn_forward(actc_model *m, actc_ctx *ctx, const actc_batch *b)
{
    gnn_impl *p = m->impl;
    const actc_graph *g = batch_graph(m, p, b);
    if (!g) return NULL;
    const float pd = m->opts.dropout;
    actc_csr an = g->adj; /* A_hat: adj's structure with GCN's weights */
    an.val = g->norm;
    actc_tensor *h = actc_tensor_retain(b->x);
    if (!drop(ctx, &h, pd)) return NULL;
    if (p->kind == GNN_GCN) {
        for (int l = 0; l < p->layers; l++) {
            if (l > 0 && !drop(ctx, &h, pd)) return NULL;
            if (!step(&h, gcn_layer(ctx, g, &an, h, p->w[l], p->b[l]))) return NULL;
            if (l + 1 < p->layers && !step(&h, actc_relu(ctx, h))) return NULL;
        }
    } else if (p->kind == GNN_GAT) {
        for (int l = 0; l < p->layers; l++) {
            if (l > 0 && !drop(ctx, &h, pd)) return NULL;
            if (!step(&h, gat_layer(ctx, g, h, p->w[l], p->b[l], p->att_src[l], p->att_dst[l], pd))) return NULL;
            if (l + 1 < p->layers && !step(&h, actc_elu(ctx, h, 1.0f))) return NULL;
        }
    } else {
        /* h0 = ReLU(x W0 + b0); layer l: s = (1 - alpha) A_hat h + alpha h0,
         * h = ReLU((1 - beta_l) s + beta_l s W_l); logits = h W_out + b. */
        if (!step(&h, actc_linear(ctx, h, p->w[0], p->b[0])) || !step(&h, actc_relu(ctx, h))) return NULL;
        actc_tensor *h0 = actc_tensor_retain(h);
        for (int l = 1; l <= p->layers && h; l++) {
            const float beta = logf(GCNII_LAMBDA / (float)l + 1.0f);
            if (!drop(ctx, &h, pd) || !step(&h, actc_spmm(ctx, &an, &g->adj_t, h)) ||
                !step(&h, actc_scale_add(ctx, h, 1.0f - GCNII_ALPHA, h0, GCNII_ALPHA)))
                break;
            actc_tensor *hw = actc_linear(ctx, h, p->w[l], NULL);
            if (!hw || !step(&h, actc_scale_add(ctx, h, 1.0f - beta, hw, beta))) {
                actc_tensor_release(hw);
                step(&h, NULL); /* a failed layer fails the forward */
                break;
            }
            actc_tensor_release(hw);
            if (!step(&h, actc_relu(ctx, h))) break;
        }
        actc_tensor_release(h0);
        if (!h || !drop(ctx, &h, pd)) return NULL;
        if (!step(&h, actc_linear(ctx, h, p->w[p->layers + 1], p->b[p->layers + 1]))) return NULL;
    }
    step(&h, actc_gather_rows(ctx, h, b->ids, b->B));
    return h;
}

/* Glorot-uniform weight [out, in] (the GCN/GAT papers' initialisation). */
static actc_tensor *glorot(actc_model *m, const char *name, int out, int in)
{
    const int shape[2] = {out, in};
    return actc__model_param(m, name, 2, shape, -sqrtf(6.0f / (float)(in + out)), 0);
}

static actc_tensor *zeros(actc_model *m, const char *name, int n) { return actc__model_param(m, name, 1, &n, 0, 0); }

actc_status actc__gnn_build(actc_model *m, const char *name)
{
    actc_model_opts *o = &m->opts;
    gnn_impl *p = calloc(1, sizeof *p);
    if (!p) return actc_set_error(ACTC_ERR_OOM, "out of memory building %s", name);
    m->impl = p;
    m->impl_free = gnn_free;
    m->forward_graph = gnn_forward;
    p->kind = !strcmp(name, "gcn") ? GNN_GCN : !strcmp(name, "gat") ? GNN_GAT : GNN_GCNII;
    const int dw[] = {GCN_WIDTH, GAT_WIDTH, GCNII_WIDTH}, dl[] = {GCN_LAYERS, GAT_LAYERS, GCNII_LAYERS};
    if (o->width == 0) o->width = dw[p->kind];
    if (o->n_layers == 0) o->n_layers = dl[p->kind];
    if (p->kind == GNN_GAT && o->n_heads == 0) o->n_heads = GAT_HEADS;
    if (p->kind != GNN_GAT) o->n_heads = 1;
    p->layers = o->n_layers;
    p->width = o->width;
    p->heads = o->n_heads;
    p->in = o->in_channels * o->in_h * o->in_w;
    p->classes = o->num_classes;
    if (p->layers < 1 || p->layers > 4096)
        return actc_set_error(ACTC_ERR_INVALID, "model %s: %d layers (1 to 4096)", name, p->layers);
    if (p->heads < 1 || p->width % p->heads)
        return actc_set_error(ACTC_ERR_INVALID, "model %s: width %d is not a multiple of %d heads", name, p->width,
                              p->heads);
    const int nw = p->kind == GNN_GCNII ? p->layers + 2 : p->layers;
    p->w = calloc((size_t)nw, sizeof *p->w);
    p->b = calloc((size_t)nw, sizeof *p->b);
    p->att_src = calloc((size_t)nw, sizeof *p->att_src);
    p->att_dst = calloc((size_t)nw, sizeof *p->att_dst);
    if (!p->w || !p->b || !p->att_src || !p->att_dst) return actc_set_error(ACTC_ERR_OOM, "out of memory building %s", name);
    char nm[48];
    for (int l = 0; l < nw; l++) {
        int in, out;
        if (p->kind == GNN_GCNII) {
            in = l == 0 ? p->in : p->width;
            out = l == nw - 1 ? p->classes : p->width;
        } else {
            in = l == 0 ? p->in : p->width;
            out = l == p->layers - 1 ? p->classes : p->width;
        }
        snprintf(nm, sizeof nm, "layer%d.weight", l);
        if (!(p->w[l] = glorot(m, nm, out, in))) return actc_last_status();
        const int inner = p->kind == GNN_GCNII && l > 0 && l < nw - 1; /* (1-beta) I + beta W: no bias */
        if (!inner) {
            snprintf(nm, sizeof nm, "layer%d.bias", l);
            if (!(p->b[l] = zeros(m, nm, out))) return actc_last_status();
        }
        if (p->kind == GNN_GAT) {
            /* The last layer has one head over the classes (GAT's
             * transductive setting); the others `heads` concatenated. */
            const int h = l == p->layers - 1 ? 1 : p->heads, d = out / h;
            snprintf(nm, sizeof nm, "layer%d.att_src", l);
            if (!(p->att_src[l] = glorot(m, nm, h, d))) return actc_last_status();
            snprintf(nm, sizeof nm, "layer%d.att_dst", l);
            if (!(p->att_dst[l] = glorot(m, nm, h, d))) return actc_last_status();
        }
    }
    return ACTC_OK;
}
