/* Pipeline stages without MPI: the schedules (every forward and backward
 * once, in an order whose messages can always be delivered, holding what
 * the formula says), the layout (contiguous, balanced), a model cut into
 * parts chained by hand equal to the whole model, and frames: several
 * micro-batches in flight on one context give the gradients, the saves and
 * the random streams of one micro-batch at a time. */
#include "testutil.h"
#include <stdlib.h>
#include <string.h>

/* ---- schedules ------------------------------------------------------------ */

/* Run P stages' op lists against each other as the transport would: an
 * op runs once what it receives was sent (forward k on s needs forward k
 * done on s - 1, backward k on s needs backward k done on s + 1).  Checks
 * each stage's list holds every op once, a forward before its backward,
 * backwards in order, and the peak of micro-batches held; returns 1 when
 * every stage got to its end. */
static int simulate(actc_pipe_schedule sch, int P, int M)
{
    actc_pipe_op *ops = calloc((size_t)P * 2 * M, sizeof *ops);
    int *at = calloc((size_t)P, sizeof *at);
    char *fdone = calloc((size_t)P * M, 1), *bdone = calloc((size_t)P * M, 1);
    assert_non_null(ops);
    for (int s = 0; s < P; s++) {
        int peak = -1;
        assert_int_equal(actc_pipe_ops(sch, s, P, M, ops + (size_t)s * 2 * M, &peak), ACTC_OK);
        const int expect = sch == ACTC_PIPE_GPIPE ? M : (P - s < M ? P - s : M);
        assert_int_equal(peak, expect);
        int held = 0, most = 0, next_b = 0;
        char *seen = calloc((size_t)2 * M, 1);
        for (int i = 0; i < 2 * M; i++) {
            const actc_pipe_op o = ops[(size_t)s * 2 * M + i];
            assert_true(o.micro >= 0 && o.micro < M);
            assert_false(seen[2 * o.micro + o.backward]);
            seen[2 * o.micro + o.backward] = 1;
            if (o.backward) {
                assert_true(seen[2 * o.micro]); /* its forward first */
                assert_int_equal(o.micro, next_b++);
                held--;
            } else if (++held > most) {
                most = held;
            }
        }
        assert_int_equal(most, expect);
        free(seen);
    }
    int moved = 1, done = 0;
    while (moved) {
        moved = 0;
        done = 1;
        for (int s = 0; s < P; s++) {
            if (at[s] == 2 * M) continue;
            done = 0;
            const actc_pipe_op o = ops[(size_t)s * 2 * M + at[s]];
            const int ready = o.backward ? (s == P - 1 || bdone[(s + 1) * M + o.micro])
                                         : (s == 0 || fdone[(s - 1) * M + o.micro]);
            if (!ready) continue;
            (o.backward ? bdone : fdone)[s * M + o.micro] = 1;
            at[s]++;
            moved = 1;
        }
    }
    free(ops);
    free(at);
    free(fdone);
    free(bdone);
    return done;
}

static void test_schedules(void **state)
{
    (void)state;
    for (int P = 1; P <= 6; P++)
        for (int M = 1; M <= 12; M++) {
            assert_true(simulate(ACTC_PIPE_1F1B, P, M));
            assert_true(simulate(ACTC_PIPE_GPIPE, P, M));
        }
    /* 1F1B's first operations on stage 0 of 4: three forwards ahead. */
    actc_pipe_op ops[16];
    assert_int_equal(actc_pipe_ops(ACTC_PIPE_1F1B, 0, 4, 8, ops, NULL), ACTC_OK);
    const int want[8][2] = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0}, {0, 4}, {1, 1}, {0, 5}};
    for (int i = 0; i < 8; i++) {
        assert_int_equal(ops[i].backward, want[i][0]);
        assert_int_equal(ops[i].micro, want[i][1]);
    }
    assert_true(actc_pipe_bubble(ACTC_PIPE_1F1B, 4, 8) > 3.0 / 11 - 1e-12 &&
                actc_pipe_bubble(ACTC_PIPE_1F1B, 4, 8) < 3.0 / 11 + 1e-12);
    assert_int_equal(actc_pipe_ops(ACTC_PIPE_1F1B, 4, 4, 8, ops, NULL), ACTC_ERR_INVALID);
    assert_int_equal(actc_pipe_ops((actc_pipe_schedule)7, 0, 4, 8, ops, NULL), ACTC_ERR_INVALID);
    actc_clear_error();
}

/* ---- layout ------------------------------------------------------------------ */

/* Parameters of a part of `name` (as its model holds them). */
static size_t part_params(const char *name, const actc_model_opts *base, int first, int n)
{
    actc_model_opts o = *base;
    o.first_block = first;
    o.n_blocks = n;
    actc_model *m;
    assert_int_equal(actc_model_create(name, &o, &m), ACTC_OK);
    const size_t k = actc_model_num_params(m);
    actc_model_free(m);
    return k;
}

static void test_layout(void **state)
{
    (void)state;
    const char *names[] = {"gpt", "llama"};
    actc_model_opts o = actc_model_default_opts();
    o.n_layers = 5;
    o.width = 32;
    o.n_heads = 2;
    o.context = 16;
    o.vocab = 1024; /* an embedding worth about three blocks */
    for (int k = 0; k < 2; k++) {
        /* Every contiguous split of 5 blocks into 2 or 3 stages: the layout's
         * largest stage is the least of them. */
        size_t part[6][6] = {{0}};
        for (int a = 0; a < 5; a++)
            for (int b = a + 1; b <= 5; b++) part[a][b] = part_params(names[k], &o, a, b - a);
        for (int P = 1; P <= 5; P++) {
            int first[5], n[5];
            assert_int_equal(actc_pipe_layout(names[k], &o, P, first, n), ACTC_OK);
            size_t worst = 0;
            for (int s = 0, at = 0; s < P; s++) {
                assert_int_equal(first[s], at);
                assert_true(n[s] >= 1);
                at += n[s];
                if (s == P - 1) assert_int_equal(at, 5);
                if (part[first[s]][at] > worst) worst = part[first[s]][at];
            }
            size_t best = (size_t)-1;
            if (P == 2)
                for (int c = 1; c < 5; c++) {
                    const size_t w = part[0][c] > part[c][5] ? part[0][c] : part[c][5];
                    if (w < best) best = w;
                }
            if (P == 3)
                for (int c = 1; c < 4; c++)
                    for (int d = c + 1; d < 5; d++) {
                        size_t w = part[0][c] > part[c][d] ? part[0][c] : part[c][d];
                        if (part[d][5] > w) w = part[d][5];
                        if (w < best) best = w;
                    }
            if (P == 2 || P == 3) assert_true(worst == best);
        }
        int first[6], n[6];
        assert_int_equal(actc_pipe_layout(names[k], &o, 6, first, n), ACTC_ERR_INVALID);
        assert_non_null(strstr(actc_last_error(), "at least one block"));
    }
    int first[2], n[2];
    assert_int_equal(actc_pipe_layout("resnet20", NULL, 2, first, n), ACTC_ERR_INVALID);
    actc_model_opts bad = o;
    bad.first_block = 4;
    bad.n_blocks = 2;
    actc_model *m;
    assert_int_equal(actc_model_create("gpt", &bad, &m), ACTC_ERR_INVALID);
    bad = actc_model_default_opts();
    bad.n_blocks = 1;
    assert_int_equal(actc_model_create("mlp", &bad, &m), ACTC_ERR_INVALID);
    actc_clear_error();
}

/* ---- parts chained by hand ---------------------------------------------------------- */

#define PB 3
#define PT 8

static actc_model *make(const char *name, int first, int n)
{
    actc_model_opts o = actc_model_default_opts();
    o.n_layers = 4;
    o.width = 32;
    o.n_heads = 2;
    o.context = PT;
    o.vocab = 64;
    o.seed = 5;
    o.first_block = first;
    o.n_blocks = n;
    actc_model *m;
    assert_int_equal(actc_model_create(name, &o, &m), ACTC_OK);
    return m;
}

/* A parameter's gradient by name (NULL when m has no such one). */
static actc_tensor *param_named(actc_model *m, const char *name)
{
    actc_tensor **p;
    const int n = actc_model_params(m, &p);
    for (int i = 0; i < n; i++)
        if (!strcmp(p[i]->name, name)) return p[i];
    return NULL;
}

static void check_parts(const char *name, const char *policy)
{
    int32_t ids[PB * PT], labels[PB * PT];
    for (int i = 0; i < PB * PT; i++) {
        ids[i] = (i * 7 + 3) % 64;
        labels[i] = (i * 11 + 5) % 64;
    }
    actc_batch b = {.ids = ids, .B = PB, .T = PT, .labels = labels};
    /* The whole model. */
    actc_model *whole = make(name, 0, 0);
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, policy), ACTC_OK);
    actc_ctx_set_step(ctx, 3);
    actc_tensor *logits = actc_model_forward_batch(whole, ctx, &b);
    actc_tensor *loss = actc_cross_entropy(ctx, logits, labels, -1, NULL);
    actc_tensor_release(logits);
    const float l_whole = loss->data[0];
    assert_int_equal(actc_backward(ctx, loss), ACTC_OK);
    actc_tensor_release(loss);
    /* Blocks 0-1 with the embedding, 2-3 with the head, on contexts of
     * their own (as two processes), the hidden states and their gradient
     * handed over. */
    actc_model *m0 = make(name, 0, 2), *m1 = make(name, 2, 2);
    actc_ctx *c0 = actc_ctx_new(), *c1 = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(c0, policy), ACTC_OK);
    assert_int_equal(actc_ctx_set_policy(c1, policy), ACTC_OK);
    actc_ctx_set_step(c0, 3);
    actc_ctx_set_step(c1, 3);
    actc_batch b0 = {.ids = ids, .B = PB, .T = PT};
    actc_tensor *h = actc_model_forward_batch(m0, c0, &b0);
    assert_non_null(h);
    assert_int_equal(h->ndim, 3);
    actc_tensor *x = actc_tensor_new(ACTC_MEM_ACT, 3, h->shape);
    memcpy(x->data, h->data, h->numel * sizeof(float));
    x->requires_grad = 1;
    actc_batch b1 = {.x = x, .B = PB, .T = PT, .labels = labels};
    assert_null(actc_model_forward_tokens(m1, c1, ids, PB, PT)); /* the part after the embedding takes x */
    actc_clear_error();
    logits = actc_model_forward_batch(m1, c1, &b1);
    loss = actc_cross_entropy(c1, logits, labels, -1, NULL);
    actc_tensor_release(logits);
    assert_true(loss->data[0] == l_whole);
    assert_int_equal(actc_backward(c1, loss), ACTC_OK);
    actc_tensor_release(loss);
    assert_non_null(x->grad);
    assert_int_equal(actc_backward_from(c0, h, x->grad), ACTC_OK);
    /* Every gradient as the whole model's (the tied embedding: the sum of
     * the two copies'). */
    actc_tensor **wp;
    const int nw = actc_model_params(whole, &wp);
    assert_int_equal(actc_model_num_params(m0) + actc_model_num_params(m1),
                     actc_model_num_params(whole) + (strcmp(name, "gpt") ? 0 : wp[0]->numel));
    for (int i = 0; i < nw; i++) {
        actc_tensor *a = param_named(m0, wp[i]->name), *c = param_named(m1, wp[i]->name);
        assert_true(a || c);
        for (size_t j = 0; j < wp[i]->numel; j++) {
            const float g = (a && a->grad ? a->grad->data[j] : 0) + (c && c->grad ? c->grad->data[j] : 0);
            const float w = wp[i]->grad ? wp[i]->grad->data[j] : 0;
            if (a && c) assert_true(fabsf(g - w) <= 1e-6f * (1 + fabsf(w)));
            else assert_true(g == w);
        }
    }
    actc_tensor_release(x);
    actc_tensor_release(h);
    actc_ctx_free(ctx);
    actc_ctx_free(c0);
    actc_ctx_free(c1);
    actc_model_free(whole);
    actc_model_free(m0);
    actc_model_free(m1);
}

static void test_parts_equal_whole(void **state)
{
    (void)state;
    check_parts("gpt", "none");
    check_parts("llama", "none");
    check_parts("llama", "quant:2"); /* the same keys, so the same rounding */
    check_parts("gpt", "agoq");
}

/* ---- frames ----------------------------------------------------------------------------- */

/* Gradients of micro-batches 0 and 1 of step 4 under policy, run one after
 * the other (interleave 0) or both forwards first, parked, then both
 * backwards (interleave 1); copied into g (the model's parameter floats). */
static void micro_batches(const char *policy, int interleave, float *g, size_t *stored_both)
{
    actc_model *m = make("llama", 0, 0);
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, policy), ACTC_OK);
    int32_t ids[2][PB * PT], labels[2][PB * PT];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < PB * PT; i++) {
            ids[k][i] = (i * 7 + 3 + 13 * k) % 64;
            labels[k][i] = (i * 11 + 5 + k) % 64;
        }
    actc_tensor *loss[2];
    actc_frame *f[2];
    for (int k = 0; k < 2; k++) {
        actc_ctx_set_step(ctx, 4);
        actc_ctx_set_substep(ctx, (uint32_t)k);
        actc_batch b = {.ids = ids[k], .B = PB, .T = PT};
        actc_tensor *logits = actc_model_forward_batch(m, ctx, &b);
        loss[k] = actc_cross_entropy(ctx, logits, labels[k], -1, NULL);
        actc_tensor_release(logits);
        if (!interleave) {
            assert_int_equal(actc_backward_scaled(ctx, loss[k], 0.5f), ACTC_OK);
            continue;
        }
        assert_int_equal(actc_ctx_park(ctx, &f[k]), ACTC_OK);
        assert_int_equal(actc_tape_size(ctx), 0);
    }
    if (interleave) {
        actc_store_stats ss;
        actc_store_get_stats(ctx, &ss);
        *stored_both = ss.stored_bytes;
        for (int k = 0; k < 2; k++) {
            assert_int_equal(actc_ctx_resume(ctx, f[k]), ACTC_OK);
            assert_int_equal(actc_backward_scaled(ctx, loss[k], 0.5f), ACTC_OK);
        }
        actc_store_get_stats(ctx, &ss);
        assert_int_equal(ss.stored_bytes, 0);
    }
    actc_tensor **p;
    const int np = actc_model_params(m, &p);
    for (int i = 0; i < np; i++) {
        memcpy(g, p[i]->grad->data, p[i]->numel * sizeof *g);
        g += p[i]->numel;
    }
    for (int k = 0; k < 2; k++) actc_tensor_release(loss[k]);
    actc_ctx_free(ctx);
    actc_model_free(m);
}

static void test_frames(void **state)
{
    (void)state;
    actc_model *m = make("llama", 0, 0);
    const size_t n = actc_model_num_params(m);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    /* Policies whose plan does not move between micro-batches (ActNN's
     * levels follow each backward's gradients, which a pipeline sees after
     * later micro-batches' forwards). */
    const char *policies[] = {"none", "quant:2", "agoq", "division"};
    for (int k = 0; k < 4; k++) {
        size_t both = 0, ignored;
        micro_batches(policies[k], 0, a, &ignored);
        micro_batches(policies[k], 1, b, &both);
        assert_memory_equal(a, b, n * sizeof *a);
        assert_true(both > 0);
    }
    /* A context with a tape of its own takes no frame back; a dropped
     * frame frees its saves. */
    actc_ctx *ctx = actc_ctx_new();
    int32_t ids[PB * PT] = {0};
    actc_batch bt = {.ids = ids, .B = PB, .T = PT};
    actc_tensor *y0 = actc_model_forward_batch(m, ctx, &bt);
    actc_frame *f;
    assert_int_equal(actc_ctx_park(ctx, &f), ACTC_OK);
    actc_tensor *y1 = actc_model_forward_batch(m, ctx, &bt);
    assert_int_equal(actc_ctx_resume(ctx, f), ACTC_ERR_STATE);
    assert_int_equal(actc_scope_push(ctx, "x"), ACTC_OK);
    actc_frame *g;
    assert_int_equal(actc_ctx_park(ctx, &g), ACTC_ERR_STATE);
    actc_scope_pop(ctx);
    actc_ctx_reset(ctx); /* the tape recorded now goes; the frame's saves stay */
    actc_store_stats ss;
    actc_store_get_stats(ctx, &ss);
    assert_true(ss.stored_bytes > 0);
    actc_frame_drop(ctx, f);
    actc_store_get_stats(ctx, &ss);
    assert_int_equal(ss.stored_bytes, 0);
    actc_tensor_release(y0);
    actc_tensor_release(y1);
    actc_ctx_free(ctx);
    actc_model_free(m);
    free(a);
    free(b);
    actc_clear_error();
    actc_mem_stats ms;
    actc_mem_get_stats(&ms);
    assert_int_equal(ms.current[ACTC_MEM_CONTEXT], 0);
}

/* ---- DBCA-PP ------------------------------------------------------------------------------ */

/* The codec of the compressed ACT saves a forward of a small llama leaves
 * on a context that is a stage holding held of held_max micro-batches
 * (every one the same: *codec) and their bits per element. */
static double saves_at(const char *policy, int held, int held_max, char *codec)
{
    actc_model *m = make("llama", 0, 0);
    actc_ctx *ctx = actc_ctx_new();
    assert_int_equal(actc_ctx_set_policy(ctx, policy), ACTC_OK);
    assert_int_equal(actc_ctx_set_stage(ctx, held, held_max), ACTC_OK);
    int32_t ids[PB * PT] = {0};
    actc_batch b = {.ids = ids, .B = PB, .T = PT};
    actc_tensor *y = actc_model_forward_batch(m, ctx, &b);
    assert_non_null(y);
    actc_store_item it[256];
    const int k = actc_store_list(ctx, it, 256);
    size_t bytes = 0, elems = 0;
    codec[0] = '\0';
    for (int i = 0; i < k && i < 256; i++) {
        if (it[i].kind != ACTC_SAVE_ACT || !strcmp(it[i].codec, "fp32") || !strcmp(it[i].codec, "recompute")) continue;
        if (!codec[0]) snprintf(codec, 32, "%s", it[i].codec);
        assert_string_equal(it[i].codec, codec);
        bytes += it[i].stored_bytes;
        size_t n = 1;
        for (int d = 0; d < it[i].ndim; d++) n *= (size_t)it[i].shape[d];
        elems += n;
    }
    assert_true(elems > 0);
    actc_tensor_release(y);
    actc_ctx_free(ctx);
    actc_model_free(m);
    return 8.0 * (double)bytes / (double)elems;
}

static void test_dbca(void **state)
{
    (void)state;
    actc_ctx *ctx = tu_expect_policy("agoq:dbca", "agoq:block=128,fmt=fp4-bnb,dbca");
    /* 4.25 bits an element at 4 (blocks of 128, an fp32 scale each), B + 0.25
     * at 5-7 (a bf16 zero point and range per 128), 8.125 at 8 (an fp32
     * absmax per 256): the most that fit held x bytes(B) <= held_max x
     * bytes(4). */
    const int held_max[] = {4, 4, 4, 4, 3, 3, 11, 11, 11, 11};
    const int held[] = {4, 3, 2, 1, 2, 1, 11, 9, 7, 5};
    const int want[] = {4, 5, 8, 8, 6, 8, 4, 4, 6, 8};
    for (int i = 0; i < 10; i++) assert_int_equal(actc_ctx_stage_bits(ctx, held[i], held_max[i]), want[i]);
    actc_ctx_free(ctx);
    ctx = tu_expect_policy("agoq:block=64,dbca", "agoq:block=64,fmt=fp4-bnb,dbca");
    actc_ctx_free(ctx);
    ctx = tu_expect_policy("agoq", "agoq:block=128,fmt=fp4-bnb");
    assert_int_equal(actc_ctx_stage_bits(ctx, 1, 4), 0); /* uniform agoq does not compensate */
    assert_int_equal(actc_ctx_set_stage(ctx, 5, 4), ACTC_ERR_INVALID);
    actc_ctx_free(ctx);
    tu_expect_bad_policy("agoq:dbca=2", "dbca");
    /* The saves follow the stage: 4-bit blocks on the fullest stage, the
     * 5-bit quantizer on one holding 3 of 4, the 8-bit map on one holding
     * 1; outside a pipeline agoq:dbca is agoq. */
    char c[32];
    double bits = saves_at("agoq:dbca", 4, 4, c);
    assert_string_equal(c, "block4");
    assert_true(bits > 4.0 && bits < 4.5);
    bits = saves_at("agoq:dbca", 3, 4, c);
    assert_string_equal(c, "quant");
    assert_true(bits > 5.0 && bits < 5.5);
    bits = saves_at("agoq:dbca", 1, 4, c);
    assert_string_equal(c, "dyn8");
    assert_true(bits > 8.0 && bits < 8.5);
    bits = saves_at("agoq:dbca", 0, 0, c);
    assert_string_equal(c, "block4");
    actc_clear_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_parts_equal_whole),
        cmocka_unit_test(test_frames),
        cmocka_unit_test(test_dbca),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
