/* Policies on caller tensors (actc_planner_*): a planner answers each save
 * with the codec its policy chooses for the role (the same choice the store
 * makes), a plan that encodes and decodes through the codec API alone and
 * names its codec canonically; the keys are (seed, step, save)'s; ActNN's
 * mixed precision learns from gradient reports and GACT from measuring
 * passes driven through the planner; what it cannot carry out it refuses
 * by name. */
#include "testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static float *values(size_t n, uint64_t seed, float scale)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = scale * (actc_rand_uniform(seed, i) - 0.3f);
    return x;
}

static actc_save_query query(const char *scope, int index, actc_role role, int ndim, const int *shape,
                             const float *x, uint64_t step)
{
    actc_save_query q;
    memset(&q, 0, sizeof q);
    q.scope = scope;
    q.index = index;
    q.role.role = role;
    q.role.linear = 1;
    q.ndim = ndim;
    q.shape = shape;
    q.data = x;
    q.step = step;
    return q;
}

static actc_planner *planner(const char *spec)
{
    actc_planner *p = NULL;
    assert_int_equal(actc_planner_new(spec, 7, &p), ACTC_OK);
    assert_non_null(p);
    return p;
}

/* The codec each policy chooses for a role, spelled canonically. */
static void test_choices(void **state)
{
    (void)state;
    static const struct {
        const char *policy;
        actc_role role;
        const char *codec;
    } cases[] = {
        {"none", ACTC_ROLE_LINEAR_IN, "fp32"},
        {"bf16", ACTC_ROLE_UNKNOWN, "bf16"},
        {"quant:2", ACTC_ROLE_UNKNOWN, "quant:2"},
        {"quant:2", ACTC_ROLE_LOSS_IN, "fp32"},
        {"quant:3,group=64", ACTC_ROLE_CONV_IN, "quant:3,group=64"},
        {"quant:2,per-tensor", ACTC_ROLE_MATMUL_IN, "quant:2,per-tensor"},
        {"actnn:L1", ACTC_ROLE_CONV_IN, "quant:4"},
        {"actnn:L1", ACTC_ROLE_LINEAR_IN, "fp32"},
        {"actnn:L2", ACTC_ROLE_UNKNOWN, "quant:4"},
        {"division", ACTC_ROLE_CONV_IN, "division:b=8,q=2"},
        {"division:b=4,q=4", ACTC_ROLE_NORM_IN, "division:b=4,q=4"},
        {"gact:4", ACTC_ROLE_UNKNOWN, "quant:4"},
        {"gact:fix2", ACTC_ROLE_LOSS_IN, "quant:2"},
        {"agoq", ACTC_ROLE_UNKNOWN, "fp4-bnb,block=128"},
        {"agoq:fmt=nf4,block=64", ACTC_ROLE_LINEAR_IN, "nf4,block=64"},
        {"agoq", ACTC_ROLE_ATTN_PROBS, "fp32"},
        {"nf4", ACTC_ROLE_UNKNOWN, "nf4,block=64"},
        {"e2m1,block=128,round=stochastic", ACTC_ROLE_LINEAR_IN, "fp4-e2m1,block=128,round=stochastic"},
        {"fp4", ACTC_ROLE_LOSS_IN, "fp32"},
    };
    const int shape[4] = {4, 3, 8, 8};
    const size_t n = 4 * 3 * 8 * 8;
    float *x = values(n, 1, 2.0f), *y = malloc(n * sizeof *y);
    assert_non_null(y);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        actc_planner *p = planner(cases[i].policy);
        actc_save_query q = query("layer1.conv", 0, cases[i].role, 4, shape, x, 3);
        actc_codec_plan plan;
        assert_int_equal(actc_planner_plan(p, &q, &plan, NULL), ACTC_OK);
        if (strcmp(plan.codec, cases[i].codec)) fail_msg("%s: %s, not %s", cases[i].policy, plan.codec, cases[i].codec);
        /* The spelling is a spec: planning from it gives the same plan. */
        actc_codec_plan again;
        assert_int_equal(actc_codec_plan_make(plan.codec, 4, shape, plan.key, NULL, &again), ACTC_OK);
        assert_memory_equal(&again, &plan, sizeof plan);
        uint8_t *buf = malloc(plan.bytes);
        assert_non_null(buf);
        assert_int_equal(actc_codec_encode(&plan, x, NULL, buf, plan.bytes), ACTC_OK);
        assert_int_equal(actc_codec_decode(&plan, buf, plan.bytes, y), ACTC_OK);
        assert_true(tu_max_abs_diff(x, y, n) <= 2.0 * 0.5 + 1e-6); /* within the coarsest codec's bound */
        free(buf);
        actc_planner_free(p);
    }
    free(x);
    free(y);
}

/* One stream per (seed, step, save): the same save planned twice has the
 * same key; another index, layer, step or seed another. */
static void test_keys(void **state)
{
    (void)state;
    const int shape[2] = {4, 300};
    float *x = values(1200, 2, 1.0f);
    actc_planner *p = planner("quant:2"), *other_seed = NULL;
    assert_int_equal(actc_planner_new("quant:2", 8, &other_seed), ACTC_OK);
    actc_codec_plan a, b;
    actc_save_query q = query("blocks.0.mlp", 1, ACTC_ROLE_LINEAR_IN, 2, shape, x, 5);
    assert_int_equal(actc_planner_plan(p, &q, &a, NULL), ACTC_OK);
    assert_int_equal(actc_planner_plan(p, &q, &b, NULL), ACTC_OK);
    assert_true(a.key == b.key);
    actc_save_query moved[4] = {q, q, q, q};
    moved[0].index = 2;
    moved[1].scope = "blocks.1.mlp";
    moved[2].step = 6;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(actc_planner_plan(p, &moved[i], &b, NULL), ACTC_OK);
        assert_true(a.key != b.key);
    }
    assert_int_equal(actc_planner_plan(other_seed, &q, &b, NULL), ACTC_OK);
    assert_true(a.key != b.key);
    actc_planner_free(p);
    actc_planner_free(other_seed);
    free(x);
}

/* ActNN's mixed precision: per-sample widths through the caller's room,
 * averaging the budget, and a layer whose gradients are larger gets more
 * bits once the planner has re-planned from the reports. */
static void test_mixed_precision(void **state)
{
    (void)state;
    actc_planner *p = planner("actnn:L3");
    assert_int_equal(actc_planner_observes(p), 1);
    assert_int_equal(actc_planner_measures(p), 0);
    const int shape[2] = {8, 512};
    float *x = values(8 * 512, 3, 1.0f);
    for (int s = 0; s < 8; s++) /* samples of growing range */
        for (int j = 0; j < 512; j++) x[s * 512 + j] *= (float)(s + 1);
    uint8_t bits[8];
    actc_codec_plan plan;
    actc_save_query a = query("fc1", 0, ACTC_ROLE_LINEAR_IN, 2, shape, x, 0);
    actc_save_query b = query("fc2", 0, ACTC_ROLE_LINEAR_IN, 2, shape, x, 0);
    assert_int_equal(actc_planner_plan(p, &a, &plan, NULL), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "sample_bits is NULL"));
    assert_int_equal(actc_planner_plan(p, &a, &plan, bits), ACTC_OK);
    assert_int_equal(plan.sample_widths, 1);
    assert_string_equal(plan.codec, "quant:mixed");
    int sum = 0;
    for (int s = 0; s < 8; s++) sum += bits[s];
    assert_true(sum <= 2 * 8);
    assert_true(bits[7] >= bits[0]); /* the widest sample gets the most bits */
    uint8_t *buf = malloc(plan.bytes);
    float *y = malloc(8 * 512 * sizeof *y);
    assert_int_equal(actc_codec_encode(&plan, x, bits, buf, plan.bytes), ACTC_OK);
    assert_int_equal(actc_codec_encode(&plan, x, NULL, buf, plan.bytes), ACTC_ERR_INVALID);
    assert_int_equal(actc_codec_decode(&plan, buf, plan.bytes, y), ACTC_OK);
    free(buf);
    /* Step 0: fc1's gradients 100 times fc2's. */
    assert_int_equal(actc_planner_plan(p, &b, &plan, bits), ACTC_OK);
    const int idx[1] = {0};
    assert_int_equal(actc_planner_observe(p, "fc1", idx, 1, 100.0), ACTC_OK);
    assert_int_equal(actc_planner_observe(p, "fc2", idx, 1, 1.0), ACTC_OK);
    assert_int_equal(actc_planner_observe(p, "fc2", idx, 1, NAN), ACTC_ERR_INVALID);
    assert_int_equal(actc_planner_replan(p), ACTC_OK);
    a.step = b.step = 1;
    uint8_t bits1[8], bits2[8];
    assert_int_equal(actc_planner_plan(p, &a, &plan, bits1), ACTC_OK);
    assert_int_equal(actc_planner_plan(p, &b, &plan, bits2), ACTC_OK);
    int s1 = 0, s2 = 0;
    for (int s = 0; s < 8; s++) {
        s1 += bits1[s];
        s2 += bits2[s];
    }
    assert_true(s1 > s2);
    /* Values the host cannot read (device memory): the per-sample ranges
     * instead give the same widths; neither is refused with a message. */
    double range_sq[8];
    actc_quant_range_sq(x, 8, 512, ACTC_QUANT_GROUP, range_sq);
    actc_save_query dev = a;
    dev.data = NULL;
    uint8_t bits3[8];
    assert_int_equal(actc_planner_plan(p, &dev, &plan, bits3), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "sample_range_sq"));
    dev.sample_range_sq = range_sq;
    assert_int_equal(actc_planner_plan(p, &dev, &plan, bits3), ACTC_OK);
    assert_memory_equal(bits3, bits1, sizeof bits1);
    assert_true(s1 + s2 <= 2 * 2 * 8);
    actc_planner_free(p);
    free(x);
    free(y);
}

/* One pass of the three layers' saves at `step` (their plans into out). */
static void gact_pass(actc_planner *p, const float *x, uint64_t step, actc_codec_plan out[3])
{
    static const char *const scopes[3] = {"a", "b", "c"};
    const int shape[2] = {4, 256};
    for (int l = 0; l < 3; l++) {
        actc_save_query q = query(scopes[l], 0, ACTC_ROLE_LINEAR_IN, 2, shape, x, step);
        assert_int_equal(actc_planner_plan(p, &q, &out[l], NULL), ACTC_OK);
    }
}

/* GACT through the planner: the reference pass's tensors counted, a
 * perturbed pass re-keys that tensor alone, and the commit gives the more
 * sensitive tensor more bits at the same average. */
static void test_measuring(void **state)
{
    (void)state;
    actc_planner *p = planner("gact:4");
    assert_int_equal(actc_planner_measures(p), 1);
    assert_int_equal(actc_planner_observes(p), 0);
    assert_int_equal(actc_planner_measure_commit(p, NULL, 0), ACTC_ERR_STATE);
    float *x = values(1024, 4, 1.0f);
    actc_codec_plan ref[3], pl[3];
    assert_int_equal(actc_planner_measure_begin(p), ACTC_OK);
    gact_pass(p, x, 10, ref);
    for (int l = 0; l < 3; l++) assert_string_equal(ref[l].codec, "quant:4");
    assert_int_equal(actc_planner_measure_count(p), 3);
    assert_int_equal(actc_planner_measure_perturb(p, 3), ACTC_ERR_INVALID);
    assert_int_equal(actc_planner_measure_perturb(p, 1), ACTC_OK);
    gact_pass(p, x, 10, pl);
    for (int l = 0; l < 3; l++) assert_int_equal(pl[l].key != ref[l].key, l == 1);
    const double bad[3] = {1, NAN, 1}, diff[3] = {1e-6, 1.0, 1e-6};
    assert_int_equal(actc_planner_measure_commit(p, diff, 2), ACTC_ERR_INVALID);
    assert_int_equal(actc_planner_measure_begin(p), ACTC_OK);
    gact_pass(p, x, 10, pl);
    assert_int_equal(actc_planner_measure_commit(p, bad, 3), ACTC_ERR_NUMERIC);
    assert_int_equal(actc_planner_measure_begin(p), ACTC_OK);
    gact_pass(p, x, 10, pl);
    assert_int_equal(actc_planner_measure_commit(p, diff, 3), ACTC_OK);
    gact_pass(p, x, 11, pl);
    int bits[3], total = 0;
    for (int l = 0; l < 3; l++) {
        bits[l] = strcmp(pl[l].codec, "fp32") ? atoi(pl[l].codec + strlen("quant:")) : 32;
        total += bits[l];
    }
    assert_true(bits[1] > bits[0] && bits[1] > bits[2]);
    assert_true(total <= 3 * 4);
    actc_planner_free(p);
    free(x);
}

static void expect_refused(const char *spec, const char *needle)
{
    actc_planner *p = (actc_planner *)1;
    assert_int_equal(actc_planner_new(spec, 0, &p), ACTC_ERR_INVALID);
    assert_null(p);
    if (!strstr(actc_last_error(), needle)) fail_msg("%s: '%s' lacks '%s'", spec, actc_last_error(), needle);
}

static void test_refusals(void **state)
{
    (void)state;
    expect_refused("compact", "actc.torch.compact");
    expect_refused("compact:r=0.25+gact:4", "actc.torch.compact");
    expect_refused("gact:CB1", "torch.utils.checkpoint");
    expect_refused("gact:CKPT", "torch.utils.checkpoint");
    expect_refused("quant:9", "quant");
    expect_refused("nosuch", "nosuch");
    actc_planner *p = planner("quant:2");
    assert_int_equal(actc_planner_measure_begin(p), ACTC_ERR_STATE);
    assert_int_equal(actc_planner_measure_count(p), -1);
    const int bad_shape[2] = {4, 0};
    float x[4] = {0};
    actc_save_query q = query("x", 0, ACTC_ROLE_UNKNOWN, 2, bad_shape, x, 0);
    actc_codec_plan plan;
    assert_int_equal(actc_planner_plan(p, &q, &plan, NULL), ACTC_ERR_INVALID);
    q.ndim = 9;
    assert_int_equal(actc_planner_plan(p, &q, &plan, NULL), ACTC_ERR_INVALID);
    const int shape[1] = {4};
    q = query("x", 0, ACTC_ROLE_NROLES, 1, shape, x, 0);
    assert_int_equal(actc_planner_plan(p, &q, &plan, NULL), ACTC_ERR_INVALID);
    q = query("x", 0, ACTC_ROLE_UNKNOWN, 1, shape, NULL, 0); /* device memory: quant:2 reads no values */
    assert_int_equal(actc_planner_plan(p, &q, &plan, NULL), ACTC_OK);
    q = query(NULL, 0, ACTC_ROLE_UNKNOWN, 0, NULL, x, 0); /* a scalar, no scope */
    assert_int_equal(actc_planner_plan(p, &q, &plan, NULL), ACTC_OK);
    assert_int_equal((int)plan.numel, 1);
    assert_string_equal(actc_planner_policy(p), "quant:2");
    actc_planner_free(p);
    actc_planner_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choices),         cmocka_unit_test(test_keys),     cmocka_unit_test(test_mixed_precision),
        cmocka_unit_test(test_measuring),       cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
