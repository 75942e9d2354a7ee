/* GACT: level specs, the ladder allocation against an exhaustive search, the
 * controller's sensitivity measurement on networks whose most sensitive
 * tensor is known, stable tensor identities in a graph that changes, the
 * sub-batch estimate's ranking, the variance alert, and segment
 * checkpointing (exact recompute, one update of running statistics, the
 * context it saves). */
#include "testutil.h"
#include "autograd/autograd.h"
#include "policy/policy.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- specs ------------------------------------------------------------------ */

static void test_gact_specs(void **state)
{
    (void)state;
    actc_ctx *ctx = actc_ctx_new();
    /* measures: the controller runs sensitivity passes for it (fp32
     * levels have nothing to measure). */
    const struct {
        const char *in, *canon;
        int segments, attention, measures;
    } good[] = {{"gact:L0", "gact:L0", 0, -1, 0},
                /* GACT's L1 levels save the softmax's probabilities: the
                 * memory-efficient form recomputes them from rounded Q and K,
                 * which biases them (RESULTS.md, language model). */
                {"gact:L1", "gact:4", 0, ACTC_ATTN_NAIVE, 1},      {"gact:4", "gact:4", 0, ACTC_ATTN_NAIVE, 1},
                {"gact:3", "gact:3", 0, ACTC_ATTN_NAIVE, 1},       {"GACT:2", "gact:2", 0, ACTC_ATTN_NAIVE, 1},
                {"gact:2.5", "gact:2.5", 0, ACTC_ATTN_NAIVE, 1},   {"gact:fix4", "gact:fix4", 0, ACTC_ATTN_NAIVE, 1},
                {"gact:fix2", "gact:fix2", 0, ACTC_ATTN_NAIVE, 1}, {"gact:CB1", "gact:CB1", 1, ACTC_ATTN_NAIVE, 1},
                {"gact:cb2", "gact:CB2", 1, ACTC_ATTN_FLASH, 1},   {"gact:CKPT", "gact:CKPT", 1, ACTC_ATTN_NAIVE, 0}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        assert_int_equal(actc_ctx_set_policy(ctx, good[i].in), ACTC_OK);
        assert_string_equal(actc_ctx_policy(ctx), good[i].canon);
        assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_BLOCK) == ACTC_PLAN_RECOMPUTE, good[i].segments);
        const int attn_plan = good[i].attention < 0 ? ACTC_PLAN_ANY
                              : good[i].attention == ACTC_ATTN_NAIVE ? ACTC_PLAN_SAVE : ACTC_PLAN_RECOMPUTE;
        assert_int_equal(actc_ctx_plan_region(ctx, ACTC_REGION_ATTN), attn_plan);
        assert_int_equal(actc_ctx_policy_measures(ctx), good[i].measures);
    }
    /* Inside CompAct it still measures; other policies never do. */
    assert_int_equal(actc_ctx_set_policy(ctx, "compact:r=0.25+gact:4"), ACTC_OK);
    assert_int_equal(actc_ctx_policy_measures(ctx), 1);
    assert_int_equal(actc_ctx_set_policy(ctx, "actnn:L3"), ACTC_OK);
    assert_int_equal(actc_ctx_policy_measures(ctx), 0);
    assert_int_equal(actc_ctx_policy_measures(NULL), 0);
    /* Learning: measuring (GACT) or observing gradients (ActNN's adaptive
     * levels), alone or under compact; fixed policies learn nothing. */
    const struct {
        const char *spec;
        int learns;
    } learn[] = {{"none", 0},     {"quant:4", 0},   {"actnn:L2", 0},         {"actnn:L3", 1},
                 {"actnn:1.5", 1}, {"gact:4", 1},    {"gact:CKPT", 0},        {"agoq", 0},
                 {"division", 0}, {"bf16", 0},      {"compact:r=0.25+actnn:L3", 1}, {"compact:r=0.25", 0}};
    for (size_t i = 0; i < sizeof learn / sizeof *learn; i++) {
        assert_int_equal(actc_ctx_set_policy(ctx, learn[i].spec), ACTC_OK);
        if (actc_ctx_policy_learns(ctx) != learn[i].learns) fail_msg("%s: learns %d", learn[i].spec, !learn[i].learns);
    }
    assert_int_equal(actc_ctx_policy_learns(NULL), 0);
    const char *bad[] = {"gact:", "gact:0.5", "gact:9", "gact:fix", "gact:fix9", "gact:L2", "gact:CB3", "gact:4x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(actc_ctx_set_policy(ctx, bad[i]), ACTC_ERR_INVALID);
        assert_non_null(strstr(actc_last_error(), bad[i]));
        assert_non_null(strstr(actc_last_error(), "gact:CB2"));
    }
    actc_clear_error();
    actc_ctx_free(ctx);
}

/* ---- the ladder allocation ---------------------------------------------------- */

static const int k_ladder[5] = {32, 8, 4, 2, 1};

static double objective(int n, const double *w, const uint8_t *b)
{
    double v = 0;
    for (int i = 0; i < n; i++) v += w[i] * actc__quant_var_factor(b[i]);
    return v;
}

/* Best objective over every ladder assignment of n items within budget. */
static double exhaustive(int n, const double *w, const double *c, double budget)
{
    double best = INFINITY;
    int combos = 1;
    for (int i = 0; i < n; i++) combos *= 5;
    uint8_t b[8];
    for (int code = 0; code < combos; code++) {
        double cost = 0;
        for (int i = 0, k = code; i < n; i++, k /= 5) {
            b[i] = (uint8_t)k_ladder[k % 5];
            cost += c[i] * b[i];
        }
        if (cost <= budget * (1 + 1e-12)) {
            double v = objective(n, w, b);
            if (v < best) best = v;
        }
    }
    return best;
}

/* GACT's allocation: the ladder greedy then the local refinement. */
static double allocate(int n, const double *w, const double *c, double budget, uint8_t *b)
{
    assert_int_equal(actc__alloc_bits_ladder(n, w, c, k_ladder, 5, budget, b), ACTC_OK);
    actc__alloc_refine(n, w, c, k_ladder, 5, budget, b);
    double used = 0;
    for (int i = 0; i < n; i++) {
        assert_true(b[i] == 32 || b[i] == 8 || b[i] == 4 || b[i] == 2 || b[i] == 1);
        used += c[i] * b[i];
    }
    return used;
}

static void test_ladder_matches_exhaustive(void **state)
{
    (void)state;
    /* Random sensitivities over 4 decades, sizes over 1..16, average
     * budgets from 1 to 8 bits: the budget always holds.  With 3 tensors
     * every case matches the exhaustive optimum; with 5, a case that needs
     * three tensors to move at once can escape the local search (3 of 300
     * measured), and the result stays near the optimum. */
    int misses = 0;
    double worst = 1;
    for (int n = 3; n <= 5; n += 2) {
        for (int t = 0; t < 300; t++) {
            double w[5], c[5], total = 0;
            for (int i = 0; i < n; i++) {
                w[i] = pow(10.0, 4.0 * actc_rand_uniform(21, (uint64_t)(t * 8 + i)));
                c[i] = t % 2 ? 1 + 15 * actc_rand_uniform(22, (uint64_t)(t * 8 + i)) : 1;
                total += c[i];
            }
            const double budget = total * (1 + 7 * actc_rand_uniform(23, (uint64_t)t));
            uint8_t b[5];
            assert_true(allocate(n, w, c, budget, b) <= budget * (1 + 1e-12));
            const double best = exhaustive(n, w, c, budget), got = objective(n, w, b);
            if (n == 3) {
                assert_true(got <= best * (1 + 1e-9));
            } else if (got > best * (1 + 1e-9)) {
                misses++;
                if (got / best > worst) worst = got / best;
            }
        }
    }
    printf("ladder allocation, 5 tensors: %d of 300 cases off the optimum, worst %.3fx\n", misses, worst);
    assert_true(misses <= 6);
    assert_true(worst < 2.5);
    /* A budget at or above 32 bits keeps everything fp32; one below all-1
     * leaves everything at 1 bit. */
    double w[3] = {1, 2, 3}, c[3] = {1, 1, 1};
    uint8_t b[3];
    allocate(3, w, c, 96, b);
    for (int i = 0; i < 3; i++) assert_int_equal(b[i], 32);
    allocate(3, w, c, 1, b);
    for (int i = 0; i < 3; i++) assert_int_equal(b[i], 1);
}

/* ---- a small scoped network ------------------------------------------------------ */

#define NET_MAX 4
typedef struct {
    int n_layers, width, in, classes;
    actc_tensor *w[NET_MAX + 1], *b[NET_MAX + 1];
    int skip;          /* hidden layer to leave out (-1: none)            */
    actc_tensor *x;    /* batch                                            */
    int32_t labels[256];
    double loss;
} net;

/* Bound of the head's weights times sqrt(fan-in): 1.5 as the other layers
 * gives the flat softmax of an untrained classifier; larger gives the
 * confident logits of a trained one. */
static float n_head_scale = 1.5f;
static void net_init(net *n, int layers, int width, int in, int classes, int batch, uint64_t seed)
{
    memset(n, 0, sizeof *n);
    n->n_layers = layers;
    n->width = width;
    n->in = in;
    n->classes = classes;
    n->skip = -1;
    for (int l = 0; l <= layers; l++) {
        const int rows = l == layers ? classes : width, cols = l == 0 ? in : width;
        int ws[2] = {rows, cols};
        n->w[l] = actc_param_new(2, ws, "w");
        n->b[l] = actc_param_new(1, &rows, "b");
        const float bound = (l == layers ? n_head_scale : 1.5f) / sqrtf((float)cols);
        tu_fill_uniform(n->w[l], seed + (uint64_t)l, -bound, bound);
        tu_fill_uniform(n->b[l], seed + 100 + (uint64_t)l, -0.1f, 0.1f);
    }
    int xs[2] = {batch, in};
    n->x = tu_rand(2, xs, seed + 7, -1, 1, 0);
    for (int i = 0; i < batch; i++) n->labels[i] = (int32_t)((i * 7 + 3) % classes);
}

static void net_free(net *n)
{
    for (int l = 0; l <= n->n_layers; l++) {
        actc_tensor_release(n->w[l]);
        actc_tensor_release(n->b[l]);
    }
    actc_tensor_release(n->x);
}

static int net_params(net *n, actc_tensor **p)
{
    int k = 0;
    for (int l = 0; l <= n->n_layers; l++) {
        p[k++] = n->w[l];
        p[k++] = n->b[l];
    }
    return k;
}

/* Scoped layers "l0".."lN": linear -> relu, the last linear -> cross
 * entropy; hidden layer `skip` left out (square hidden layers make any of
 * them skippable). */
static actc_status net_fwdbwd(actc_ctx *ctx, void *user, int max_samples, int *samples)
{
    net *n = user;
    actc_tensor *x = n->x;
    const int B = x->shape[0], k = max_samples > 0 && max_samples < B ? max_samples : B;
    int xs[2] = {k, n->in};
    actc_tensor *h = actc_tensor_new(ACTC_MEM_ACT, 2, xs);
    memcpy(h->data, x->data, h->numel * sizeof(float));
    *samples = k;
    for (int l = 0; l <= n->n_layers && h; l++) {
        if (l == n->skip) continue;
        char scope[16];
        snprintf(scope, sizeof scope, "l%d", l);
        actc_scope_push(ctx, scope);
        actc_tensor *y = actc_linear(ctx, h, n->w[l], n->b[l]);
        actc_tensor_release(h);
        h = y;
        if (h && l < n->n_layers) {
            y = actc_relu(ctx, h);
            actc_tensor_release(h);
            h = y;
        }
        actc_scope_pop(ctx);
    }
    if (!h) return actc_last_status();
    actc_tensor *loss = actc_cross_entropy(ctx, h, n->labels, -1, NULL);
    actc_tensor_release(h);
    if (!loss) return actc_last_status();
    n->loss = loss->data[0];
    actc_status s = actc_backward(ctx, loss);
    actc_tensor_release(loss);
    return s;
}

/* Sensitivities the controller measured, by tensor (first-save order). */
static int measured(actc_controller *c, actc_saved_info *t, int cap)
{
    int n = actc_controller_tensors(c, t, cap);
    assert_true(n > 0 && n <= cap);
    return n;
}

/* A controller over net n's parameters under policy with options o; *ctx
 * receives its context (the caller frees both). */
static actc_controller *net_controller(net *n, const char *policy, const actc_controller_opts *o, actc_ctx **ctx)
{
    actc_tensor *p[2 * NET_MAX + 2];
    const int np = net_params(n, p);
    *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(*ctx, policy), ACTC_OK);
    actc_controller *c = actc_controller_new(*ctx, p, np, o);
    assert_non_null(c);
    return c;
}

/* ---- the sensitive tensor gets the most bits ------------------------------------- */

static void test_loss_input_is_most_sensitive(void **state)
{
    (void)state;
    /* With the large logits of a trained classifier (the head's weights 16
     * / sqrt(fan-in)), a little noise in what the loss saves (its softmax
     * probabilities) moves every layer's gradient: per element that
     * tensor is the most sensitive (GACT Fig. 3a).  (With the flat softmax
     * of an untrained head it is the least: its bound of 1.5 measured a
     * per-element c_l 8x below the others.) */
    net n;
    n_head_scale = 16.0f;
    net_init(&n, 2, 64, 48, 10, 64, 5);
    n_head_scale = 1.5f;
    actc_controller_opts o = actc_controller_default_opts();
    o.estimate_samples = 0;
    actc_ctx *ctx;
    actc_controller *c = net_controller(&n, "gact:2", &o, &ctx);
    assert_int_equal(actc_ctx_step(ctx), 0);
    assert_int_equal(actc_controller_iterate(c, net_fwdbwd, &n), ACTC_OK);
    assert_true(actc_controller_adapted(c));
    assert_int_equal(actc_ctx_step(ctx), 1); /* the extra passes do not count */
    actc_saved_info t[16];
    const int nt = measured(c, t, 16);
    /* The input of l0, of l1, of l2, and the probabilities the loss saved. */
    assert_int_equal(nt, 4);
    assert_string_equal(t[3].op, "cross_entropy");
    double used = 0, elems = 0;
    for (int i = 0; i < nt; i++)
        printf("  %-4s %-14s c_l %10.4g  per element %10.4g  bits %d\n", t[i].scope, t[i].op, t[i].sensitivity,
               t[i].sensitivity / (double)(t[i].fp32_bytes / 4), t[i].bits);
    for (int i = 0; i < nt; i++) {
        assert_true(t[i].sensitivity > 0);
        used += (double)t[i].bits * (double)(t[i].fp32_bytes / 4);
        elems += (double)(t[i].fp32_bytes / 4);
        /* The loss's save is the most sensitive per element and gets the most bits. */
        if (i < 3) {
            assert_true(t[3].sensitivity / (double)t[3].fp32_bytes > t[i].sensitivity / (double)t[i].fp32_bytes);
            assert_true(t[3].bits > t[i].bits);
        }
    }
    assert_true(used <= 2.0 * elems * (1 + 1e-12)); /* the budget holds */
    actc_controller_free(c);
    actc_ctx_free(ctx);
    net_free(&n);
}

/* ---- stable identities in a graph that changes ----------------------------------- */

/* The bits the store used for the ACT save of the linear layer in `scope`
 * during the forward just run (the tape still holds it). */
static int bits_of_save(actc_ctx *ctx, const char *scope)
{
    for (int i = 0; i < ctx->n_nodes; i++) {
        const actc_node *nd = ctx->nodes[i];
        if (strcmp(nd->op, "linear") || strcmp(nd->scope_, scope)) continue;
        const actc_store_entry *e = &ctx->entries[nd->slots_[0]];
        return e->codec == &actc_codec_fp32 ? 32 : e->args.bits;
    }
    return -1;
}

static void test_dynamic_graph_keeps_bits(void **state)
{
    (void)state;
    net n;
    net_init(&n, 3, 32, 32, 10, 16, 9);
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, "gact:3"), ACTC_OK);
    actc_policy *p = ctx->policy;
    /* One measured pass over the whole graph registers its tensors; then
     * sensitivities are set by hand so l1 and l2 get different widths. */
    assert_non_null(p->measure);
    p->measure->mode(p, 1, 0, 0);
    int k;
    assert_int_equal(net_fwdbwd(ctx, &n, 0, &k), ACTC_OK);
    p->measure->mode(p, 0, 0, 0);
    uint64_t keys[8];
    assert_int_equal(p->measure->keys(p, keys, 8), 5);
    const double c[5] = {1.0, 1e-6, 1e4, 1.0, 1.0}; /* inputs of l0, l1, l2, l3; logits */
    assert_int_equal(p->measure->commit(p, keys, c, 5), ACTC_OK);
    actc_saved_info t[8];
    assert_int_equal(p->tensors(p, t, 8), 5);
    assert_string_equal(t[1].scope, "l1");
    assert_string_equal(t[2].scope, "l2");
    assert_true(t[2].bits > t[1].bits);

    /* Without l1, l2's input is the 2nd ACT save of the step, where l1's
     * was: identified by scope and operator, it keeps l2's bits. */
    n.skip = 1;
    int xs[2] = {16, 32};
    actc_tensor *h = actc_tensor_new(ACTC_MEM_ACT, 2, xs);
    memcpy(h->data, n.x->data, h->numel * sizeof(float));
    for (int l = 0; l <= 3; l++) {
        if (l == 1) continue;
        char scope[16];
        snprintf(scope, sizeof scope, "l%d", l);
        actc_scope_push(ctx, scope);
        actc_tensor *y = actc_linear(ctx, h, n.w[l], n.b[l]);
        actc_tensor_release(h);
        h = y;
        actc_scope_pop(ctx);
    }
    assert_int_equal(bits_of_save(ctx, "l2"), t[2].bits);
    assert_int_equal(bits_of_save(ctx, "l0"), t[0].bits);
    assert_int_equal(bits_of_save(ctx, "l3"), t[3].bits);
    actc_tensor_release(h);
    actc_ctx_reset(ctx);
    actc_ctx_free(ctx);
    net_free(&n);
}

/* ---- the sub-batch estimate ranks like the full batch ----------------------------- */

static double spearman(int n, const double *a, const double *b)
{
    double ra[16], rb[16];
    for (int i = 0; i < n; i++) {
        ra[i] = rb[i] = 0;
        for (int j = 0; j < n; j++) {
            ra[i] += a[j] < a[i];
            rb[i] += b[j] < b[i];
        }
    }
    double d2 = 0;
    for (int i = 0; i < n; i++) d2 += (ra[i] - rb[i]) * (ra[i] - rb[i]);
    return 1 - 6 * d2 / ((double)n * ((double)n * n - 1));
}

static void test_subbatch_ranks_like_full_batch(void **state)
{
    (void)state;
    double cl[2][16];
    int nt = 0;
    for (int run = 0; run < 2; run++) {
        net n;
        net_init(&n, 4, 48, 64, 10, 128, 31);
        actc_controller_opts o = actc_controller_default_opts();
        o.estimate_samples = run ? 8 : 0; /* GACT's default sub-batch vs the whole batch of 128 */
        actc_ctx *ctx;
        actc_controller *c = net_controller(&n, "gact:4", &o, &ctx);
        assert_int_equal(actc_controller_iterate(c, net_fwdbwd, &n), ACTC_OK);
        actc_saved_info t[16];
        nt = measured(c, t, 16);
        for (int i = 0; i < nt; i++) cl[run][i] = t[i].sensitivity / (double)t[i].fp32_bytes;
        actc_controller_free(c);
        actc_ctx_free(ctx);
        net_free(&n);
    }
    const double rho = spearman(nt, cl[0], cl[1]);
    printf("sensitivity per element, batch 128 vs sub-batch 8, %d tensors: Spearman %.3f\n", nt, rho);
    for (int i = 0; i < nt; i++) printf("  tensor %d: %10.4g  %10.4g\n", i, cl[0][i], cl[1][i]);
    assert_true(rho >= 0.9);
    int top0 = 0, top1 = 0;
    for (int i = 1; i < nt; i++) {
        if (cl[0][i] > cl[0][top0]) top0 = i;
        if (cl[1][i] > cl[1][top1]) top1 = i;
    }
    assert_int_equal(top0, top1);
}

/* ---- the variance alert --------------------------------------------------------- */

/* Iterations of the network under policy; returns whether an alert came and
 * the two variances at the end. */
static int alert_after(const char *policy, double fraction, double *comp, double *overall)
{
    net n;
    net_init(&n, 2, 32, 32, 10, 32, 17);
    actc_controller_opts o = actc_controller_default_opts();
    o.alert_fraction = fraction;
    o.estimate_samples = 0;
    actc_ctx *ctx;
    actc_controller *c = net_controller(&n, policy, &o, &ctx);
    int alerts = 0;
    for (int it = 0; it < 20; it++) {
        /* A new batch each iteration, so the gradient has sampling variance. */
        tu_fill_uniform(n.x, 1000 + (uint64_t)it, -1, 1);
        assert_int_equal(actc_controller_iterate(c, net_fwdbwd, &n), ACTC_OK);
        const char *a = actc_controller_take_alert(c); /* counted: said once per adaptation */
        if (a) {
            alerts++;
            printf("alert under %s: %s\n", policy, a);
            assert_non_null(strstr(a, "raise the bit budget"));
        }
    }
    actc_controller_variances(c, comp, overall);
    actc_controller_free(c);
    actc_ctx_free(ctx);
    net_free(&n);
    return alerts;
}

static void test_variance_alert(void **state)
{
    (void)state;
    double comp1, all1, comp8, all8, c, o;
    /* 1 bit per element: V(b) is about half the gradient's variance here;
     * the alert follows the threshold. */
    assert_int_equal(alert_after("gact:fix1", 0.3, &comp1, &all1), 1);
    assert_int_equal(alert_after("gact:fix1", 0.7, &c, &o), 0);
    assert_true(c == comp1 && o == all1); /* the same run, only the threshold differs */
    assert_true(comp1 > 0.3 * all1 && comp1 < 0.7 * all1);
    /* 8 bits: negligible next to the sampling variance. */
    assert_int_equal(alert_after("gact:fix8", 0.5, &comp8, &all8), 0);
    printf("compression vs overall gradient variance: 1 bit %.4g vs %.4g, 8 bits %.4g vs %.4g\n", comp1, all1, comp8,
           all8);
    assert_true(comp8 < 1e-3 * all8);
    /* The estimate accounts for what the measured variance gained going
     * from 8 bits to 1 bit. */
    assert_true(fabs((all1 - all8) - comp1) < 0.5 * comp1);
}

/* ---- when the controller measures ------------------------------------------------ */

static void test_measure_schedule(void **state)
{
    (void)state;
    /* GACT's interval, and the first interval's halvings of >= 16 steps. */
    const uint64_t due1000[] = {0, 62, 125, 250, 500, 1000, 2000, 3000};
    int n = 0;
    for (uint64_t it = 0; it <= 3000; it++)
        if (actc_controller_measure_due(it, 1000)) {
            assert_true(n < 8);
            assert_int_equal(it, due1000[n++]);
        }
    assert_int_equal(n, 8);
    /* 20: a tenth would be 1 step; no halving reaches 16, only multiples. */
    for (uint64_t it = 0; it < 100; it++) assert_int_equal(actc_controller_measure_due(it, 20), it % 20 == 0);
    assert_int_equal(actc_controller_measure_due(5, 1), 1);
    assert_int_equal(actc_controller_measure_due(0, 0), 0);

    /* The controller follows it: interval 64 measures at 0, 16, 32, 64. */
    net nt;
    net_init(&nt, 2, 16, 16, 10, 8, 23);
    actc_controller_opts o = actc_controller_default_opts();
    o.adapt_interval = 64;
    actc_ctx *ctx;
    actc_controller *c = net_controller(&nt, "gact:4", &o, &ctx);
    const int want[] = {0, 16, 32, 64};
    n = 0;
    for (int it = 0; it <= 70; it++) {
        assert_int_equal(actc_controller_iterate(c, net_fwdbwd, &nt), ACTC_OK);
        if (actc_controller_adapted(c)) {
            assert_true(n < 4);
            assert_int_equal(it, want[n++]);
        }
    }
    assert_int_equal(n, 4);
    actc_controller_free(c);
    actc_ctx_free(ctx);
    net_free(&nt);
}

/* ---- segment checkpointing --------------------------------------------------------- */

/* One batch of a model: images (x) or tokens (ids, B windows of T). */
typedef struct {
    actc_model *m;
    actc_tensor *x;
    int32_t ids[64], labels[64];
    int B, T;
} model_pass;

static actc_status model_fwdbwd(actc_ctx *ctx, void *user, int max_samples, int *samples)
{
    model_pass *u = user;
    actc_tensor *logits;
    if (u->x) {
        actc_tensor *x = u->x;
        int shp[4] = {x->shape[0], x->shape[1], x->shape[2], x->shape[3]};
        if (max_samples > 0 && max_samples < shp[0]) shp[0] = max_samples;
        actc_tensor *in = actc_tensor_new(ACTC_MEM_ACT, 4, shp);
        memcpy(in->data, x->data, in->numel * sizeof(float));
        *samples = shp[0];
        logits = actc_model_forward(u->m, ctx, in);
        actc_tensor_release(in);
    } else {
        *samples = max_samples > 0 && max_samples < u->B ? max_samples : u->B;
        logits = actc_model_forward_tokens(u->m, ctx, u->ids, *samples, u->T);
    }
    if (!logits) return actc_last_status();
    actc_tensor *loss = actc_cross_entropy(ctx, logits, u->labels, -1, NULL);
    actc_tensor_release(logits);
    if (!loss) return actc_last_status();
    actc_store_reset_peak(ctx); /* the last pass's statistics */
    actc_status s = actc_backward(ctx, loss);
    actc_tensor_release(loss);
    return s;
}

typedef struct {
    float *grads;      /* all parameter gradients, concatenated                 */
    size_t n;
    float *state;      /* all state (running statistics too) after the step     */
    size_t ns;
    actc_store_stats ss;
    int adapted;
} step_record;

/* One step of `model` (no optimizer) through a controller, as the actc
 * command runs it: 6 images, or 4 windows of 16 tokens of a 2-layer
 * transformer of width 32.  Records gradients, state and store statistics. */
static void model_step(const char *model, const char *policy, step_record *r)
{
    actc_model_opts mo = actc_model_default_opts();
    mo.seed = 4;
    model_pass u = {0};
    if (actc_model_name_takes_tokens(model)) {
        mo.n_layers = 2;
        mo.width = 32;
        mo.n_heads = 4;
        mo.context = 16;
        u.B = 4;
        u.T = 16;
        for (int i = 0; i < 64; i++) {
            u.ids[i] = (int32_t)((i * 37 + 11) % 256);
            u.labels[i] = (int32_t)((i * 13 + 5) % 256);
        }
    } else {
        int shp[4] = {6, 1, 28, 28};
        u.x = tu_rand(4, shp, 12, -1, 1, 0);
        for (int i = 0; i < 6; i++) u.labels[i] = i % 10;
    }
    assert_int_equal(actc_model_create(model, &mo, &u.m), ACTC_OK);
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, policy), ACTC_OK);
    actc_ctx_set_seed(ctx, 3);
    actc_tensor **params, **st;
    const int np = actc_model_params(u.m, &params), ns = actc_model_state(u.m, &st);
    actc_controller_opts o = actc_controller_default_opts();
    o.estimate_samples = 2;
    actc_controller *c = actc_controller_new(ctx, params, np, &o);
    assert_int_equal(actc_controller_iterate(c, model_fwdbwd, &u), ACTC_OK);
    assert_int_equal(actc_ctx_step(ctx), 1);
    r->adapted = actc_controller_adapted(c);
    actc_store_get_stats(ctx, &r->ss);
    r->n = r->ns = 0;
    for (int i = 0; i < np; i++) r->n += params[i]->numel;
    for (int i = 0; i < ns; i++) r->ns += st[i]->numel;
    r->grads = calloc(r->n, sizeof(float));
    r->state = malloc(r->ns * sizeof(float));
    for (size_t i = 0, off = 0; i < (size_t)np; off += params[i]->numel, i++)
        if (params[i]->grad) memcpy(r->grads + off, params[i]->grad->data, params[i]->numel * sizeof(float));
    for (size_t i = 0, off = 0; i < (size_t)ns; off += st[i]->numel, i++)
        memcpy(r->state + off, st[i]->data, st[i]->numel * sizeof(float));
    actc_tensor_release(u.x);
    actc_model_zero_grad(u.m);
    actc_controller_free(c);
    actc_ctx_free(ctx);
    actc_model_free(u.m);
}

static void record_free(step_record *r)
{
    free(r->grads);
    free(r->state);
}

static void test_segments_recompute_exactly(void **state)
{
    (void)state;
    const size_t mem0 = tu_mem_now();
    const char *models[] = {"resnet20", "gpt", "llama"};
    for (int k = 0; k < 3; k++) {
        step_record plain, ckpt;
        model_step(models[k], "none", &plain);
        model_step(models[k], "gact:CKPT", &ckpt);
        assert_int_equal(plain.n, ckpt.n);
        const double gd = tu_max_abs_diff(plain.grads, ckpt.grads, plain.n);
        const double sd = tu_max_abs_diff(plain.state, ckpt.state, plain.ns);
        printf("%-9s checkpointed vs plain: gradients differ by %.3g, state (running statistics) by %.3g; "
               "context before backward %zu vs %zu bytes\n",
               models[k], gd, sd, ckpt.ss.forward_bytes, plain.ss.forward_bytes);
        /* Same operators on the same inputs: the recompute is exact, up to
         * the attention form for the transformers (gact:CKPT asks for the
         * textbook one, the models default to the memory-efficient one). */
        assert_true(gd <= (k ? 1e-6 : 0.0));
        assert_true(sd == 0.0); /* batch norm's statistics moved once */
        assert_true(ckpt.ss.forward_bytes * 3 < plain.ss.forward_bytes);
        /* A recomputed segment's saves come on top of the inputs still held. */
        assert_true(ckpt.ss.backward_peak > ckpt.ss.forward_bytes);
        record_free(&plain);
        record_free(&ckpt);
    }
    assert_int_equal(tu_mem_now(), mem0);
}

static void test_cb1_context_vs_fp32_checkpointing(void **state)
{
    (void)state;
    step_record ckpt, cb1, cb2;
    model_step("gpt", "gact:CKPT", &ckpt);
    model_step("gpt", "gact:CB1", &cb1);
    model_step("gpt", "gact:CB2", &cb2);
    assert_false(ckpt.adapted); /* nothing to measure without compression */
    assert_true(cb1.adapted && cb2.adapted);
    printf("gpt (2 layers, width 32) before backward: CKPT %zu, CB1 %zu (%.2fx), CB2 %zu bytes; peak in backward "
           "%zu, %zu, %zu\n",
           ckpt.ss.forward_bytes, cb1.ss.forward_bytes, (double)ckpt.ss.forward_bytes / cb1.ss.forward_bytes,
           cb2.ss.forward_bytes, ckpt.ss.backward_peak, cb1.ss.backward_peak, cb2.ss.backward_peak);
    assert_true(cb1.ss.forward_bytes * 4 < ckpt.ss.forward_bytes);
    assert_true(cb1.ss.backward_peak * 4 < ckpt.ss.backward_peak);
    /* Memory-efficient attention saves no score matrix. */
    assert_true(cb2.ss.backward_peak < cb1.ss.backward_peak);
    record_free(&ckpt);
    record_free(&cb1);
    record_free(&cb2);
}

/* ---- segments: dropout, nesting, identity, failure ---------------------------------- */

typedef struct {
    actc_tensor *w, *b;
    int fail_on_replay;
    void *inner;       /* another seg_user: run it as a nested segment first */
} seg_user;

/* linear -> dropout -> relu (through a nested segment first if asked). */
static actc_tensor *seg_fn(actc_ctx *ctx, actc_tensor *x, void *user)
{
    const seg_user *u = user;
    if (u->fail_on_replay && actc_ctx_replaying(ctx)) {
        actc_set_error(ACTC_ERR_INVALID, "injected failure in the recompute");
        return NULL;
    }
    actc_tensor *in = u->inner ? actc_segment(ctx, seg_fn, u->inner, x) : actc_tensor_retain(x);
    if (!in) return NULL;
    actc_tensor *h = actc_linear(ctx, in, u->w, u->b);
    actc_tensor_release(in);
    actc_tensor *d = h ? actc_dropout(ctx, h, 0.3f) : NULL;
    actc_tensor_release(h);
    actc_tensor *r = d ? actc_relu(ctx, d) : NULL;
    actc_tensor_release(d);
    return r;
}

static actc_tensor *identity_fn(actc_ctx *ctx, actc_tensor *x, void *user)
{
    (void)ctx;
    (void)user;
    return actc_tensor_retain(x);
}

/* dropout -> [segment] -> dropout -> sum: gradients of x, w and b. */
static actc_status seg_run(seg_user *u, int segmented, actc_tensor *x, float *gx, float *gw)
{
    actc_ctx *ctx = actc_ctx_new();
    actc_ctx_set_seed(ctx, 77);
    actc_scope_push(ctx, "outer");
    actc_tensor *a = actc_dropout(ctx, x, 0.2f); /* draws a key before the segment */
    actc_tensor *y = segmented ? actc_segment(ctx, seg_fn, u, a) : seg_fn(ctx, a, u);
    actc_tensor_release(a);
    assert_non_null(y);
    actc_tensor *z = actc_dropout(ctx, y, 0.2f); /* and one after it */
    actc_tensor_release(y);
    actc_tensor *loss = tu_wsum(ctx, z, 5);
    actc_tensor_release(z);
    actc_scope_pop(ctx);
    actc_status s = actc_backward(ctx, loss);
    actc_tensor_release(loss);
    /* Whatever happened, the context is clean for the next step. */
    assert_int_equal(actc_tape_size(ctx), 0);
    assert_int_equal(ctx->scope[0], '\0');
    assert_int_equal(ctx->replaying + ctx->no_record + ctx->sensitivity_pass, 0);
    if (s == ACTC_OK) {
        memcpy(gx, x->grad->data, x->numel * sizeof(float));
        memcpy(gw, u->w->grad->data, u->w->numel * sizeof(float));
    }
    actc_tensor_drop_grad(x);
    actc_tensor_drop_grad(u->w);
    actc_tensor_drop_grad(u->b);
    actc_ctx_free(ctx);
    return s;
}

static void test_segment_edge_cases(void **state)
{
    (void)state;
    const size_t mem0 = tu_mem_now();
    int xs[2] = {8, 16}, ws[2] = {16, 16}, bs = 16;
    actc_tensor *x = tu_rand(2, xs, 3, -1, 1, 1);
    seg_user inner = {actc_param_new(2, ws, "wi"), actc_param_new(1, &bs, "bi"), 0, NULL};
    seg_user u = {actc_param_new(2, ws, "w"), actc_param_new(1, &bs, "b"), 0, NULL};
    tu_fill_uniform(u.w, 1, -0.5f, 0.5f);
    tu_fill_uniform(u.b, 2, -0.1f, 0.1f);
    tu_fill_uniform(inner.w, 3, -0.5f, 0.5f);
    tu_fill_uniform(inner.b, 4, -0.1f, 0.1f);
    float gx[2][128], gw[2][256];
    for (int nested = 0; nested < 2; nested++) {
        u.inner = nested ? &inner : NULL;
        /* Dropout before, inside and after the segment: the recompute draws
         * the masks the first forward drew, so gradients match exactly. */
        assert_int_equal(seg_run(&u, 0, x, gx[0], gw[0]), ACTC_OK);
        assert_int_equal(seg_run(&u, 1, x, gx[1], gw[1]), ACTC_OK);
        assert_true(tu_max_abs_diff(gx[0], gx[1], 128) == 0.0);
        assert_true(tu_max_abs_diff(gw[0], gw[1], 256) == 0.0);
        double norm = 0;
        for (int i = 0; i < 256; i++) norm += fabs(gw[0][i]);
        assert_true(norm > 0);
    }
    /* A failure inside the recompute surfaces from actc_backward with its
     * message, and leaves nothing behind (checked in seg_run and below). */
    u.inner = NULL;
    u.fail_on_replay = 1;
    assert_int_equal(seg_run(&u, 1, x, gx[1], gw[1]), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "injected failure"));
    actc_clear_error();
    /* A segment that returns its input adds no node. */
    actc_ctx *ctx = actc_ctx_new();
    actc_tensor *y = actc_segment(ctx, identity_fn, NULL, x);
    assert_ptr_equal(y, x);
    assert_int_equal(actc_tape_size(ctx), 0);
    actc_tensor_release(y);
    actc_ctx_free(ctx);
    actc_tensor *t[] = {x, u.w, u.b, inner.w, inner.b};
    for (int i = 0; i < 5; i++) actc_tensor_release(t[i]);
    assert_int_equal(tu_mem_now(), mem0);
}

/* The sensitivity passes leave the model as one plain step would: batch
 * norm's running statistics moved once, from the full batch (the forward
 * pass is exact under any policy: compression only touches what backward
 * reads). */
static void test_sensitivity_passes_leave_state(void **state)
{
    (void)state;
    step_record plain, gact;
    model_step("resnet20", "none", &plain);
    model_step("resnet20", "gact:4", &gact);
    assert_false(plain.adapted);
    assert_true(gact.adapted);
    assert_true(tu_max_abs_diff(plain.state, gact.state, plain.ns) == 0.0);
    record_free(&plain);
    record_free(&gact);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gact_specs),
        cmocka_unit_test(test_ladder_matches_exhaustive),
        cmocka_unit_test(test_loss_input_is_most_sensitive),
        cmocka_unit_test(test_dynamic_graph_keeps_bits),
        cmocka_unit_test(test_subbatch_ranks_like_full_batch),
        cmocka_unit_test(test_variance_alert),
        cmocka_unit_test(test_measure_schedule),
        cmocka_unit_test(test_segments_recompute_exactly),
        cmocka_unit_test(test_cb1_context_vs_fp32_checkpointing),
        cmocka_unit_test(test_segment_edge_cases),
        cmocka_unit_test(test_sensitivity_passes_leave_state),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    actc_shutdown(); /* convolutions ran on oneDNN: free its engine and primitives */
    return failed;
}
