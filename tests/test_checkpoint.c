/* Checkpoints: round trip of model state, buffers, optimizer state and
 * metadata; every damaged file (truncated anywhere, one flipped byte, wrong
 * model, wrong optimizer, wrong shapes, missing) refused with the right
 * status and message, and a refused load changes nothing. */
#include "testutil.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char g_dir[64];

static int setup(void **state)
{
    (void)state;
    return tu_make_temp_dir(g_dir, sizeof g_dir, "actc_test_ckpt");
}

static int teardown(void **state)
{
    (void)state;
    return tu_remove_dir(g_dir);
}

static void tpath(char *buf, const char *name) { snprintf(buf, 256, "%s/%s", g_dir, name); }

static actc_model *make_model(const char *name, int width, uint64_t seed)
{
    actc_model_opts o = actc_model_default_opts();
    o.width = width;
    o.seed = seed;
    actc_model *m = NULL;
    if (actc_model_create(name, &o, &m) != ACTC_OK) fail_msg("model %s: %s", name, actc_last_error());
    return m;
}

/* Give every parameter a gradient and take two steps, and put distinctive
 * values in the buffers, so every kind of state differs from a fresh model. */
static void train_a_bit(actc_model *m, actc_optim *o, uint64_t seed)
{
    actc_tensor **ps;
    int np = actc_model_params(m, &ps);
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < np; i++) {
            actc_tensor_drop_grad(ps[i]);
            ps[i]->grad = actc_tensor_new(ACTC_MEM_GRAD, ps[i]->ndim, ps[i]->shape);
            tu_fill_uniform(ps[i]->grad, seed * 100 + (uint64_t)(s * 1000 + i), -1, 1);
        }
        assert_int_equal(actc_optim_step(o, 0.05f), ACTC_OK);
    }
    actc_model_zero_grad(m);
    actc_tensor **st;
    int ns = actc_model_state(m, &st);
    for (int i = np; i < ns; i++) tu_fill_uniform(st[i], seed + 7 + (uint64_t)i, 0.5f, 2.0f);
}

/* Copy of every state tensor's data (model, then optimizer if any). */
typedef struct {
    float **d;
    size_t *n;
    int cnt;
    uint64_t steps;
} snapshot;

static snapshot snap(actc_model *m, actc_optim *o)
{
    actc_tensor **ms, **os = NULL;
    int nm = actc_model_state(m, &ms), no = o ? actc_optim_state(o, &os) : 0;
    snapshot s = {malloc((size_t)(nm + no) * sizeof(float *)), malloc((size_t)(nm + no) * sizeof(size_t)),
                  nm + no, o ? actc_optim_steps(o) : 0};
    for (int i = 0; i < nm + no; i++) {
        actc_tensor *t = i < nm ? ms[i] : os[i - nm];
        s.n[i] = t->numel;
        s.d[i] = malloc(t->numel * sizeof(float));
        memcpy(s.d[i], t->data, t->numel * sizeof(float));
    }
    return s;
}

static void snap_free(snapshot *s)
{
    for (int i = 0; i < s->cnt; i++) free(s->d[i]);
    free(s->d);
    free(s->n);
}

/* Equal bit for bit?  (1 if so) */
static int snap_equal(const snapshot *a, const snapshot *b)
{
    if (a->cnt != b->cnt || a->steps != b->steps) return 0;
    for (int i = 0; i < a->cnt; i++)
        if (a->n[i] != b->n[i] || memcmp(a->d[i], b->d[i], a->n[i] * sizeof(float))) return 0;
    return 1;
}

static actc_ckpt_meta sample_meta(void)
{
    actc_ckpt_meta md;
    memset(&md, 0, sizeof md);
    snprintf(md.policy, sizeof md.policy, "actnn:2");
    md.epoch = 3;
    md.step = 0x123456789aULL;
    md.batch_in_epoch = 17;
    md.seed = 0xfeedfacecafebeefULL;
    md.batch = 128;
    for (int i = 0; i < 8; i++) md.extra[i] = 0.25f * (float)i - 1.0f;
    return md;
}

static void check_meta(const actc_ckpt_meta *got, const char *model, const char *optim)
{
    actc_ckpt_meta w = sample_meta();
    assert_string_equal(got->model, model);
    assert_string_equal(got->optim, optim);
    assert_string_equal(got->policy, w.policy);
    assert_int_equal(got->epoch, w.epoch);
    assert_int_equal(got->step, w.step);
    assert_int_equal(got->batch_in_epoch, w.batch_in_epoch);
    assert_int_equal(got->seed, w.seed);
    assert_int_equal(got->batch, w.batch);
    assert_memory_equal(got->extra, w.extra, sizeof w.extra);
}

static void roundtrip(const char *model, int width, int adam)
{
    char path[256], tmp[300];
    tpath(path, adam ? "rt-adam.ckpt" : "rt-sgd.ckpt");
    actc_model *a = make_model(model, width, 1);
    actc_tensor **ps;
    int np = actc_model_params(a, &ps);
    actc_optim *oa = adam ? actc_adamw_new(ps, np, 0.9f, 0.999f, 1e-8f, 0.01f)
                          : actc_sgd_new(ps, np, 0.9f, 1, 5e-4f);
    train_a_bit(a, oa, 3);
    actc_ckpt_meta md = sample_meta();
    snprintf(md.model, sizeof md.model, "ignored"); /* the file takes the model's own name */
    assert_int_equal(actc_checkpoint_save(path, a, oa, &md), ACTC_OK);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(access(tmp, F_OK), -1); /* no .tmp left behind */
    assert_int_equal(errno, ENOENT);

    actc_ckpt_meta peek;
    assert_int_equal(actc_checkpoint_peek(path, &peek), ACTC_OK);
    check_meta(&peek, model, adam ? "adamw" : "sgd");

    /* A fresh model with other weights and a fresh optimizer. */
    actc_model *b = make_model(model, width, 2);
    np = actc_model_params(b, &ps);
    actc_optim *ob = adam ? actc_adamw_new(ps, np, 0.9f, 0.999f, 1e-8f, 0.01f)
                          : actc_sgd_new(ps, np, 0.9f, 1, 5e-4f);
    snapshot sa = snap(a, oa), sb = snap(b, ob);
    assert_false(snap_equal(&sa, &sb));
    actc_ckpt_meta got;
    if (actc_checkpoint_load(path, b, ob, &got) != ACTC_OK) fail_msg("load: %s", actc_last_error());
    check_meta(&got, model, adam ? "adamw" : "sgd");
    snapshot sb2 = snap(b, ob);
    assert_true(snap_equal(&sa, &sb2));
    assert_int_equal(actc_optim_steps(ob), 2);

    /* Without an optimizer the model part still loads. */
    actc_model *c = make_model(model, width, 5);
    assert_int_equal(actc_checkpoint_load(path, c, NULL, NULL), ACTC_OK);
    snapshot sc = snap(c, NULL), sa_m = snap(a, NULL);
    assert_true(snap_equal(&sa_m, &sc));

    snap_free(&sa);
    snap_free(&sb);
    snap_free(&sb2);
    snap_free(&sc);
    snap_free(&sa_m);
    actc_optim_free(oa);
    actc_optim_free(ob);
    actc_model_free(a);
    actc_model_free(b);
    actc_model_free(c);
}

static void test_roundtrip_mlp_sgd(void **state)
{
    (void)state;
    roundtrip("mlp", 32, 0);
}

/* resnet20 has batch-norm buffers (running statistics) besides parameters. */
static void test_roundtrip_resnet_adamw(void **state)
{
    (void)state;
    actc_model *m = make_model("resnet20", 0, 1);
    actc_tensor **st, **ps;
    assert_true(actc_model_state(m, &st) > actc_model_params(m, &ps)); /* has buffers */
    actc_model_free(m);
    roundtrip("resnet20", 0, 1);
}

/* Read a whole file. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* Load must fail with st and a message holding both needles, leaving the
 * model and optimizer bit-for-bit as they were. */
static void expect_refused(const char *path, actc_model *m, actc_optim *o, actc_status st,
                           const char *n1, const char *n2)
{
    snapshot before = snap(m, o);
    actc_ckpt_meta md;
    memset(&md, 0x33, sizeof md);
    actc_ckpt_meta md0 = md;
    actc_status s = actc_checkpoint_load(path, m, o, &md);
    if (s != st || !strstr(actc_last_error(), n1) || (n2 && !strstr(actc_last_error(), n2)))
        fail_msg("%s: expected %s with '%s'/'%s', got %s: %s", path, actc_status_name(st), n1,
                 n2 ? n2 : "", actc_status_name(s), actc_last_error());
    snapshot after = snap(m, o);
    assert_true(snap_equal(&before, &after));
    assert_memory_equal(&md, &md0, sizeof md); /* meta untouched too */
    snap_free(&before);
    snap_free(&after);
}

static void test_damaged_files(void **state)
{
    (void)state;
    char path[256], bad[256];
    tpath(path, "good.ckpt");
    tpath(bad, "bad.ckpt");
    actc_model *a = make_model("mlp", 16, 1);
    actc_tensor **ps;
    int np = actc_model_params(a, &ps);
    actc_optim *oa = actc_adamw_new(ps, np, 0.9f, 0.999f, 1e-8f, 0.0f);
    train_a_bit(a, oa, 1);
    actc_ckpt_meta md = sample_meta();
    assert_int_equal(actc_checkpoint_save(path, a, oa, &md), ACTC_OK);
    size_t n;
    unsigned char *img = slurp(path, &n);

    actc_model *b = make_model("mlp", 16, 2);
    np = actc_model_params(b, &ps);
    actc_optim *ob = actc_adamw_new(ps, np, 0.9f, 0.999f, 1e-8f, 0.0f);
    actc_optim_init_state(ob);

    /* Cut at many places: header, metadata, tensor records, the CRC. */
    const size_t cuts[] = {0, 5, 8, 11, 19, 100, 199, 200, 203, 230, n / 3, n / 2, n - 5, n - 4, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        spit(bad, img, cuts[i]);
        expect_refused(bad, b, ob, ACTC_ERR_FORMAT, bad, "truncated");
        actc_ckpt_meta pm;
        assert_int_equal(actc_checkpoint_peek(bad, &pm), ACTC_ERR_FORMAT);
        assert_non_null(strstr(actc_last_error(), "truncated"));
    }

    /* One flipped byte anywhere past the header fields checked before the
     * CRC: metadata, tensor names, shapes, data, the CRC itself. */
    const size_t flips[] = {25, 150, 199, 200, 204, 212, n / 2, n - 20, n - 2};
    for (size_t i = 0; i < sizeof flips / sizeof *flips; i++) {
        img[flips[i]] ^= 0x10;
        spit(bad, img, n);
        expect_refused(bad, b, ob, ACTC_ERR_FORMAT, "checksum mismatch", bad);
        img[flips[i]] ^= 0x10;
    }
    /* Bad magic, future version, extra bytes. */
    img[0] = 'X';
    spit(bad, img, n);
    expect_refused(bad, b, ob, ACTC_ERR_FORMAT, bad, "magic");
    img[0] = 'A';
    const unsigned char version = img[8];
    img[8] = 9;
    spit(bad, img, n);
    expect_refused(bad, b, ob, ACTC_ERR_FORMAT, bad, "version 9");
    img[8] = version;
    unsigned char *longer = calloc(n + 3, 1);
    memcpy(longer, img, n);
    spit(bad, longer, n + 3);
    expect_refused(bad, b, ob, ACTC_ERR_FORMAT, bad, "corrupted");
    free(longer);
    /* The intact copy loads. */
    spit(bad, img, n);
    assert_int_equal(actc_checkpoint_load(bad, b, ob, NULL), ACTC_OK);

    /* Missing file: I/O error naming it, for load and peek. */
    char missing[256];
    tpath(missing, "no-such.ckpt");
    expect_refused(missing, b, ob, ACTC_ERR_IO, missing, NULL);
    actc_ckpt_meta pm;
    assert_int_equal(actc_checkpoint_peek(missing, &pm), ACTC_ERR_IO);
    /* Saving into a directory that does not exist: I/O error, nothing left. */
    char nodir[256];
    tpath(nodir, "nodir/x.ckpt");
    assert_int_equal(actc_checkpoint_save(nodir, a, oa, &md), ACTC_ERR_IO);
    assert_non_null(strstr(actc_last_error(), "nodir"));

    free(img);
    actc_optim_free(oa);
    actc_optim_free(ob);
    actc_model_free(a);
    actc_model_free(b);
}

static void test_mismatches(void **state)
{
    (void)state;
    char rpath[256], mpath[256], spath[256], npath[256];
    tpath(rpath, "resnet20.ckpt");
    tpath(mpath, "mlp16.ckpt");
    tpath(spath, "mlp16-sgd.ckpt");
    tpath(npath, "mlp16-noopt.ckpt");
    actc_model *r = make_model("resnet20", 0, 1);
    assert_int_equal(actc_checkpoint_save(rpath, r, NULL, NULL), ACTC_OK);
    actc_model *m16 = make_model("mlp", 16, 1);
    actc_tensor **ps;
    int np = actc_model_params(m16, &ps);
    actc_optim *adam = actc_adamw_new(ps, np, 0.9f, 0.999f, 1e-8f, 0.0f);
    actc_optim *sgd = actc_sgd_new(ps, np, 0.9f, 0, 0.0f);
    actc_optim *plain = actc_sgd_new(ps, np, 0.0f, 0, 0.0f);
    train_a_bit(m16, adam, 4);
    assert_int_equal(actc_checkpoint_save(mpath, m16, adam, NULL), ACTC_OK);
    assert_int_equal(actc_checkpoint_save(spath, m16, sgd, NULL), ACTC_OK);
    assert_int_equal(actc_checkpoint_save(npath, m16, NULL, NULL), ACTC_OK);

    actc_model *m = make_model("mlp", 32, 2);
    np = actc_model_params(m, &ps);
    actc_optim *o = actc_adamw_new(ps, np, 0.9f, 0.999f, 1e-8f, 0.0f);
    train_a_bit(m, o, 9); /* non-trivial state, so "untouched" means something */
    /* Another model: both names in the message. */
    expect_refused(rpath, m, o, ACTC_ERR_INVALID, "holds model resnet20, not mlp", rpath);
    /* Same model, other width: the first differing shape is named. */
    expect_refused(mpath, m, o, ACTC_ERR_INVALID, "shape", "fc1.weight");

    /* Matching model, wrong optimizer: the model is not loaded either. */
    actc_model *m2 = make_model("mlp", 16, 3);
    np = actc_model_params(m2, &ps);
    actc_optim *o2 = actc_adamw_new(ps, np, 0.9f, 0.999f, 1e-8f, 0.0f);
    actc_optim *s2 = actc_sgd_new(ps, np, 0.9f, 0, 0.0f);
    actc_optim *p2 = actc_sgd_new(ps, np, 0.0f, 0, 0.0f);
    expect_refused(spath, m2, o2, ACTC_ERR_INVALID, "sgd", "adamw");
    expect_refused(mpath, m2, s2, ACTC_ERR_INVALID, "adamw", "sgd");
    expect_refused(npath, m2, o2, ACTC_ERR_INVALID, "no optimizer", npath);
    /* sgd with momentum (one buffer per parameter) vs plain sgd (none). */
    expect_refused(spath, m2, p2, ACTC_ERR_INVALID, "optimizer tensors", spath);
    assert_int_equal(actc_checkpoint_load(mpath, m2, o2, NULL), ACTC_OK);

    actc_optim_free(adam);
    actc_optim_free(sgd);
    actc_optim_free(plain);
    actc_optim_free(o);
    actc_optim_free(o2);
    actc_optim_free(s2);
    actc_optim_free(p2);
    actc_model_free(r);
    actc_model_free(m16);
    actc_model_free(m);
    actc_model_free(m2);
}

/* Saving over an existing checkpoint replaces it whole. */
static void test_overwrite(void **state)
{
    (void)state;
    char path[256];
    tpath(path, "over.ckpt");
    actc_model *a = make_model("mlp", 16, 1), *b = make_model("mlp", 16, 2);
    actc_ckpt_meta md = sample_meta();
    assert_int_equal(actc_checkpoint_save(path, a, NULL, &md), ACTC_OK);
    md.epoch = 99;
    assert_int_equal(actc_checkpoint_save(path, b, NULL, &md), ACTC_OK);
    actc_model *c = make_model("mlp", 16, 3);
    actc_ckpt_meta got;
    assert_int_equal(actc_checkpoint_load(path, c, NULL, &got), ACTC_OK);
    assert_int_equal(got.epoch, 99);
    assert_string_equal(got.optim, "");
    snapshot sb = snap(b, NULL), sc = snap(c, NULL);
    assert_true(snap_equal(&sb, &sc));
    snap_free(&sb);
    snap_free(&sc);
    actc_model_free(a);
    actc_model_free(b);
    actc_model_free(c);
}

/* A version 2 file (settings[256]) made from a version 3 one loads the same
 * state and settings. */
static void test_reads_version_2(void **state)
{
    (void)state;
    char p3[256], p2[256];
    tpath(p3, "v3.ckpt");
    tpath(p2, "v2.ckpt");
    actc_model *a = make_model("mlp", 16, 4), *b = make_model("mlp", 16, 5);
    actc_ckpt_meta md = sample_meta();
    snprintf(md.settings, sizeof md.settings, "--epochs=3 --width=16");
    assert_int_equal(actc_checkpoint_save(p3, a, NULL, &md), ACTC_OK);
    size_t n;
    unsigned char *v3 = slurp(p3, &n);
    const size_t settings_at = 20 + 196; /* magic, version, length, fixed metadata */
    unsigned char *v2 = malloc(n - 256);
    memcpy(v2, v3, settings_at + 256);                          /* header, first 256 bytes of settings */
    memcpy(v2 + settings_at + 256, v3 + settings_at + 512, n - settings_at - 512);
    const size_t n2 = n - 256;
    v2[8] = 2;                                                   /* version, little-endian */
    for (int i = 0; i < 8; i++) v2[12 + i] = (unsigned char)((uint64_t)n2 >> (8 * i));
    uLong crc = crc32(crc32(0L, Z_NULL, 0), v2, (uInt)(n2 - 4));
    for (int i = 0; i < 4; i++) v2[n2 - 4 + i] = (unsigned char)(crc >> (8 * i));
    spit(p2, v2, n2);
    actc_ckpt_meta got;
    assert_int_equal(actc_checkpoint_peek(p2, &got), ACTC_OK);
    assert_string_equal(got.settings, "--epochs=3 --width=16");
    assert_int_equal(actc_checkpoint_load(p2, b, NULL, &got), ACTC_OK);
    snapshot sa = snap(a, NULL), sb = snap(b, NULL);
    assert_true(snap_equal(&sa, &sb));
    snap_free(&sa);
    snap_free(&sb);
    v2[8] = 1; /* an unknown version names what this build reads */
    spit(p2, v2, n2);
    assert_int_equal(actc_checkpoint_peek(p2, &got), ACTC_ERR_FORMAT);
    assert_non_null(strstr(actc_last_error(), "versions 2 and 3"));
    free(v2);
    free(v3);
    actc_model_free(a);
    actc_model_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_mlp_sgd), cmocka_unit_test(test_roundtrip_resnet_adamw),
        cmocka_unit_test(test_damaged_files),     cmocka_unit_test(test_mismatches),
        cmocka_unit_test(test_overwrite),         cmocka_unit_test(test_reads_version_2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
