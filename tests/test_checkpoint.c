/* Checkpoints: round trip of model state, buffers, optimizer state, the
 * model's record, the note and the run's recipe; every damaged file
 * (truncated anywhere, one flipped byte, wrong model, wrong optimizer,
 * wrong shapes, missing) refused with the right status and message, and a
 * refused load changes nothing; files of actc 0.1 (versions 2 and 3) still
 * load, their trainer's options read from their settings text. */
#include "testutil.h"
#include <errno.h>
#include <math.h>
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

#define NOTE "--epochs=3 --batch=128 the application's own text"

static void check_info(const actc_ckpt_info *got, const char *model, const char *optim, int width)
{
    assert_int_equal(got->version, 4);
    assert_string_equal(got->model, model);
    assert_string_equal(got->optim, optim);
    assert_string_equal(got->note, NOTE);
    assert_int_equal(got->custom, 0);
    assert_int_equal(got->has_trainer, 0);
    if (width) assert_int_equal(got->model_opts.width, width);
    assert_int_equal(got->model_opts.in_h, 28);
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
    assert_int_equal(actc_checkpoint_save(path, a, oa, NOTE), ACTC_OK);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(access(tmp, F_OK), -1); /* no .tmp left behind */
    assert_int_equal(errno, ENOENT);

    actc_ckpt_info peek;
    assert_int_equal(actc_checkpoint_info(path, &peek), ACTC_OK);
    check_info(&peek, model, adam ? "adamw" : "sgd", width);
    assert_int_equal(peek.n_params, actc_model_num_params(a));

    /* A fresh model with other weights and a fresh optimizer. */
    actc_model *b = make_model(model, width, 2);
    np = actc_model_params(b, &ps);
    actc_optim *ob = adam ? actc_adamw_new(ps, np, 0.9f, 0.999f, 1e-8f, 0.01f)
                          : actc_sgd_new(ps, np, 0.9f, 1, 5e-4f);
    snapshot sa = snap(a, oa), sb = snap(b, ob);
    assert_false(snap_equal(&sa, &sb));
    actc_ckpt_info got;
    if (actc_checkpoint_load(path, b, ob, &got) != ACTC_OK) fail_msg("load: %s", actc_last_error());
    check_info(&got, model, adam ? "adamw" : "sgd", width);
    snapshot sb2 = snap(b, ob);
    assert_true(snap_equal(&sa, &sb2));
    assert_int_equal(actc_optim_steps(ob), 2);

    /* Without an optimizer the model part still loads. */
    actc_model *c = make_model(model, width, 5);
    assert_int_equal(actc_checkpoint_load(path, c, NULL, NULL), ACTC_OK);
    snapshot sc = snap(c, NULL), sa_m = snap(a, NULL);
    assert_true(snap_equal(&sa_m, &sc));
    /* And the model can be built from the file's record alone. */
    actc_model *d = NULL;
    if (actc_checkpoint_model(path, &d) != ACTC_OK) fail_msg("checkpoint_model: %s", actc_last_error());
    snapshot sd = snap(d, NULL);
    assert_true(snap_equal(&sa_m, &sd));
    assert_int_equal(actc_model_get_opts(d)->width, actc_model_get_opts(a)->width);
    snap_free(&sd);
    actc_model_free(d);

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
    actc_ckpt_info md;
    memset(&md, 0x33, sizeof md);
    actc_ckpt_info md0 = md;
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
    assert_int_equal(actc_checkpoint_save(path, a, oa, NOTE), ACTC_OK);
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
        actc_ckpt_info pm;
        assert_int_equal(actc_checkpoint_info(bad, &pm), ACTC_ERR_FORMAT);
        assert_non_null(strstr(actc_last_error(), "truncated"));
    }

    /* One flipped byte anywhere past the fields checked before the CRCs:
     * the record (the header's own CRC: checked by info too, before
     * anything is sized from it), its CRC, tensor names, shapes, data, the
     * final CRC. */
    const size_t R = img[20] | (size_t)img[21] << 8;
    const size_t flips[] = {25, 40, 24 + R - 1, 24 + R + 1, 24 + R + 6, 24 + R + 30, n / 2, n - 20, n - 2};
    for (size_t i = 0; i < sizeof flips / sizeof *flips; i++) {
        img[flips[i]] ^= 0x10;
        spit(bad, img, n);
        expect_refused(bad, b, ob, ACTC_ERR_FORMAT, "checksum mismatch", bad);
        if (flips[i] < 24 + R + 4) {
            actc_ckpt_info pm;
            assert_int_equal(actc_checkpoint_info(bad, &pm), ACTC_ERR_FORMAT);
            assert_non_null(strstr(actc_last_error(), "checksum mismatch in the header"));
            actc_model *none = NULL;
            assert_int_equal(actc_checkpoint_model(bad, &none), ACTC_ERR_FORMAT);
            assert_null(none);
        }
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
    actc_ckpt_info pm;
    assert_int_equal(actc_checkpoint_info(missing, &pm), ACTC_ERR_IO);
    /* Saving into a directory that does not exist: I/O error, nothing left. */
    char nodir[256];
    tpath(nodir, "nodir/x.ckpt");
    assert_int_equal(actc_checkpoint_save(nodir, a, oa, NOTE), ACTC_ERR_IO);
    assert_non_null(strstr(actc_last_error(), "nodir"));
    assert_int_equal(actc_checkpoint_probe(nodir), ACTC_ERR_IO);
    assert_non_null(strstr(actc_last_error(), "nodir"));
    assert_int_equal(actc_checkpoint_probe(path), ACTC_OK);

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
    assert_int_equal(actc_checkpoint_save(path, a, NULL, "first"), ACTC_OK);
    assert_int_equal(actc_checkpoint_save(path, b, NULL, "second"), ACTC_OK);
    actc_model *c = make_model("mlp", 16, 3);
    actc_ckpt_info got;
    assert_int_equal(actc_checkpoint_load(path, c, NULL, &got), ACTC_OK);
    assert_string_equal(got.note, "second");
    assert_string_equal(got.optim, "");
    snapshot sb = snap(b, NULL), sc = snap(c, NULL);
    assert_true(snap_equal(&sb, &sc));
    snap_free(&sb);
    snap_free(&sc);
    actc_model_free(a);
    actc_model_free(b);
    actc_model_free(c);
}

/* Sums over a model's state and its optimizer's, weighted so that a
 * tensor loaded into the wrong place or a float misread changes them. */
static void state_sums(actc_model *m, actc_optim *o, double *a, double *b, double *c)
{
    actc_tensor **s, **os;
    int ns = actc_model_state(m, &s), no = actc_optim_state(o, &os);
    *a = *b = *c = 0;
    for (int i = 0; i < ns; i++)
        for (size_t j = 0; j < s[i]->numel; j++) {
            *a += s[i]->data[j];
            *b += s[i]->data[j] * (double)s[i]->data[j] * (double)(j % 7 + 1);
        }
    for (int i = 0; i < no; i++)
        for (size_t j = 0; j < os[i]->numel; j++) *c += os[i]->data[j] * (double)(j % 5 + 1);
}

/* Files written by actc 0.1 (tests/data: `actc train --save` of that
 * version): the model's shape comes back from their settings text, the
 * state is the one the old reader loaded (its sums, printed by actc 0.1's
 * actc_checkpoint_load), and a trainer resumes their position. */
static void check_old_file(const char *path, const char *model, const char *optim, int width, double a0, double b0,
                           double c0, uint64_t steps)
{
    actc_ckpt_info info;
    if (actc_checkpoint_info(path, &info) != ACTC_OK) fail_msg("%s: %s", path, actc_last_error());
    assert_string_equal(info.model, model);
    assert_string_equal(info.optim, optim);
    assert_int_equal(info.model_opts.width, width);
    assert_int_equal(info.step, steps);
    assert_int_equal(info.has_trainer, 0);
    assert_non_null(strstr(info.note, "--epochs="));
    actc_model *m = NULL;
    if (actc_checkpoint_model(path, &m) != ACTC_OK) fail_msg("%s: %s", path, actc_last_error());
    actc_trainer_opts to = actc_trainer_default_opts();
    to.optim = optim;
    actc_trainer *t = NULL;
    assert_int_equal(actc_trainer_new(m, &to, &t), ACTC_OK);
    if (actc_trainer_load(t, path) != ACTC_OK) fail_msg("trainer_load %s: %s", path, actc_last_error());
    double a, b, c;
    state_sums(m, actc_trainer_optim(t), &a, &b, &c);
    assert_true(a == a0 && b == b0 && c == c0);
    assert_int_equal(actc_optim_steps(actc_trainer_optim(t)), steps);
    assert_int_equal(actc_trainer_steps(t), steps);
    actc_trainer_free(t);
    actc_model_free(m);
}

static void test_reads_version_3(void **state)
{
    (void)state;
    char mlp[512], gpt[512];
    snprintf(mlp, sizeof mlp, "%s/tests/data/mlp_v3.ckpt", tu_source_dir());
    snprintf(gpt, sizeof gpt, "%s/tests/data/gpt_v3.ckpt", tu_source_dir());
    check_old_file(mlp, "mlp", "sgd", 8, 2.4724304197807214, 34.552632655487841, -11.988365571258782, 3);
    check_old_file(gpt, "gpt", "adamw", 16, 47.522511278760398, 188.00416075081159, -0.083376202363731222, 3);
    actc_ckpt_info info;
    assert_int_equal(actc_checkpoint_info(gpt, &info), ACTC_OK);
    assert_int_equal(info.model_opts.n_layers, 1);
    assert_int_equal(info.model_opts.n_heads, 2);
    assert_int_equal(info.model_opts.context, 16);
    assert_int_equal(info.model_opts.attention, ACTC_ATTN_NAIVE);
    /* The trainer's options come from the settings text too
     * ("--lr=0.00100000005 ... --clip=1 --schedule=cosine --warmup=50
     * --min-lr=0 --seed=1"); the run's own recipe stays in the note, the
     * application's to read. */
    const actc_trainer_opts *t = &info.trainer;
    assert_string_equal(t->optim, "adamw");
    assert_true(t->lr == 0.001f && t->beta1 == 0.9f && t->beta2 == 0.99f && t->weight_decay == 0.01f);
    assert_true(t->clip == 1.0f && t->momentum == 0.9f && t->nesterov == 1 && t->schedule.min_lr == 0.0f);
    assert_int_equal(t->schedule.kind, ACTC_LR_COSINE);
    assert_int_equal(t->schedule.warmup_steps, 50);
    assert_int_equal(t->seed, 1);
    assert_int_equal(info.has_recipe, 0);
    assert_non_null(strstr(info.note, "--epoch-steps=3 --eval-tokens=64 --data=text:small.txt"));
    assert_int_equal(actc_checkpoint_info(mlp, &info), ACTC_OK);
    t = &info.trainer;
    assert_string_equal(t->optim, "sgd");
    assert_true(t->lr == 0.1f && t->momentum == 0.9f && t->weight_decay == 5e-4f && t->clip == 0.0f);
    assert_int_equal(t->seed, 3);
}

/* A version 2 file (settings[256]) made from the version 3 one loads the
 * same state. */
static void test_reads_version_2(void **state)
{
    (void)state;
    char p3[512], p2[256];
    snprintf(p3, sizeof p3, "%s/tests/data/mlp_v3.ckpt", tu_source_dir());
    tpath(p2, "v2.ckpt");
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
    check_old_file(p2, "mlp", "sgd", 8, 2.4724304197807214, 34.552632655487841, -11.988365571258782, 3);
    v2[8] = 1; /* an unknown version names what this build reads */
    spit(p2, v2, n2);
    actc_ckpt_info got;
    assert_int_equal(actc_checkpoint_info(p2, &got), ACTC_ERR_FORMAT);
    assert_non_null(strstr(actc_last_error(), "versions 2 to 4"));
    /* An old file's one checksum guards its header too. */
    v2[8] = 2;
    v2[216] ^= 1;
    spit(p2, v2, n2);
    assert_int_equal(actc_checkpoint_info(p2, &got), ACTC_ERR_FORMAT);
    assert_non_null(strstr(actc_last_error(), "checksum mismatch"));
    free(v2);
    free(v3);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The value of record field `tag` in a version 4 file (NULL: absent). */
static unsigned char *record_field(unsigned char *b, uint32_t tag)
{
    const size_t R = b[20] | (size_t)b[21] << 8 | (size_t)b[22] << 16;
    for (size_t pos = 24; pos + 8 <= 24 + R;) {
        const uint32_t t = b[pos] | (uint32_t)b[pos + 1] << 8, len = b[pos + 4] | (uint32_t)b[pos + 5] << 8;
        if (t == tag) return b + pos + 8;
        pos += 8 + len;
    }
    return NULL;
}

/* Both checksums made right again after an edit: only the reader's own
 * checks can refuse the file now. */
static void fix_checksums(unsigned char *b, size_t n)
{
    const size_t R = b[20] | (size_t)b[21] << 8 | (size_t)b[22] << 16;
    put32(b + 24 + R, (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, (uInt)(24 + R)));
    put32(b + n - 4, (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, (uInt)(n - 4)));
}

/* A record forged with valid checksums cannot make actc_checkpoint_model
 * allocate more than the file holds: a shape too large for the file is
 * refused before the parameters are allocated; a shape within bounds but
 * different from the tensors is refused when they are matched. */
static void test_forged_record(void **state)
{
    (void)state;
    char path[256], bad[256];
    tpath(path, "forge.ckpt");
    tpath(bad, "forged.ckpt");
    actc_model *a = make_model("mlp", 16, 1);
    assert_int_equal(actc_checkpoint_save(path, a, NULL, NULL), ACTC_OK);
    actc_model_free(a);
    size_t n;
    unsigned char *img = slurp(path, &n);
    unsigned char *opts = record_field(img, 3); /* the model's options */
    assert_non_null(opts);
    const int32_t widths[] = {1 << 20, 1 << 16, 1 << 12, 17, -5};
    const int32_t classes[] = {10, 10, 10, 10, 1 << 20};
    for (int i = 0; i < 5; i++) {
        unsigned char *copy = malloc(n);
        memcpy(copy, img, n);
        unsigned char *o = record_field(copy, 3);
        put32(o + 16, (uint32_t)widths[i]);
        put32(o + 12, (uint32_t)classes[i]);
        fix_checksums(copy, n);
        spit(bad, copy, n);
        actc_mem_stats before, after;
        actc_mem_reset_peak();
        actc_mem_get_stats(&before);
        actc_model *m = NULL;
        actc_status s = actc_checkpoint_model(bad, &m);
        actc_mem_get_stats(&after);
        if (s == ACTC_OK) fail_msg("forged width %d loaded", widths[i]);
        assert_null(m);
        /* Never more than the file's own bytes beyond what was live. */
        assert_true(after.peak_total - before.current_total <= n);
        printf("  forged width %d, classes %d: %s\n", widths[i], classes[i], actc_last_error());
        free(copy);
    }
    free(img);
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void put_f64(unsigned char *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Section `tag` of a version 4 file: its header's offset (-1: absent) and
 * its payload's length. */
static long section_of(const unsigned char *b, size_t n, uint32_t tag, size_t *len)
{
    const size_t R = b[20] | (size_t)b[21] << 8 | (size_t)b[22] << 16;
    for (size_t pos = 24 + R + 4; pos + 12 <= n - 4;) {
        const uint32_t t = b[pos] | (uint32_t)b[pos + 1] << 8;
        *len = (size_t)get64(b + pos + 4);
        if (t == tag) return (long)pos;
        pos += 12 + *len;
    }
    return -1;
}

/* A trainer's checkpoint whose learnt policy state was edited and its
 * checksums made right again: a section removed, or NaN, infinite or
 * negative values where the state holds variances and means, is refused,
 * and the trainer keeps what it had. */
static void test_forged_policy_state(void **state)
{
    (void)state;
    char path[256], bad[256];
    tpath(path, "learnt.ckpt");
    tpath(bad, "learnt_bad.ckpt");
    actc_model *m = make_model("mlp", 16, 3);
    actc_trainer_opts o = actc_trainer_default_opts();
    o.policy = "actnn:L3";
    actc_trainer *t = NULL;
    assert_int_equal(actc_trainer_new(m, &o, &t), ACTC_OK);
    int shp[4] = {8, 1, 28, 28};
    actc_tensor *x = actc_tensor_new(ACTC_MEM_SCRATCH, 4, shp);
    int32_t labels[8];
    for (size_t i = 0; i < x->numel; i++) x->data[i] = actc_rand_normal(7, i);
    for (int i = 0; i < 8; i++) labels[i] = i % 10;
    const actc_batch b = {.x = x, .labels = labels};
    actc_step_result r;
    for (int i = 0; i < 3; i++) assert_int_equal(actc_trainer_step(t, &b, &r), ACTC_OK);
    assert_int_equal(actc_trainer_save(t, path), ACTC_OK);
    assert_int_equal(actc_trainer_load(t, path), ACTC_OK); /* as written: fine */
    size_t n, len = 0;
    unsigned char *img = slurp(path, &n);
    const long sec = section_of(img, n, 6, &len); /* LEARNT */
    assert_true(sec > 0);
    /* The section removed. */
    {
        const size_t cut = 12 + len;
        unsigned char *c = malloc(n);
        memcpy(c, img, (size_t)sec);
        memcpy(c + sec, img + sec + cut, n - (size_t)sec - cut);
        const size_t m2 = n - cut;
        for (int i = 0; i < 8; i++) c[12 + i] = (unsigned char)((uint64_t)m2 >> (8 * i));
        fix_checksums(c, m2);
        spit(bad, c, m2);
        assert_int_equal(actc_trainer_load(t, bad), ACTC_ERR_FORMAT);
        assert_non_null(strstr(actc_last_error(), "without the policy's learnt state"));
        free(c);
    }
    /* After the spec (u32 length + bytes): the policy's state behind its
     * u64 length, then the controller's.  ActNN's first layer: after its
     * budget, step and count, each layer is key, step, bits, g^(l), the
     * step's sum. */
    const size_t spec = 4 + (size_t)(img[sec + 12] | img[sec + 13] << 8);
    const size_t pol = (size_t)sec + 12 + spec + 8, plen = (size_t)get64(img + pol - 8);
    const size_t ctl = pol + plen + 8; /* the controller's state */
    assert_true(ctl + (size_t)get64(img + ctl - 8) == (size_t)sec + 12 + len); /* it ends the section */
    const size_t layer0 = pol + 8 + 8 + 4;
    const struct {
        size_t at;
        double v;
    } edits[] = {{layer0 + 24, NAN}, {layer0 + 24, -5.0}, {layer0 + 32, INFINITY}, {layer0 + 32, -1.0},
                 {layer0 + 16, 0.0}, {ctl + 8 + 8 + 4, NAN}, {ctl + 8 + 8 + 4, -3.0}};
    for (size_t e = 0; e < sizeof edits / sizeof *edits; e++) {
        unsigned char *c = malloc(n);
        memcpy(c, img, n);
        put_f64(c + edits[e].at, edits[e].v);
        fix_checksums(c, n);
        spit(bad, c, n);
        const actc_status st = actc_trainer_load(t, bad);
        if (st == ACTC_OK) fail_msg("edit %zu (%g) loaded", e, edits[e].v);
        printf("  edit %zu (%g): %s\n", e, edits[e].v, actc_last_error());
        free(c);
    }
    assert_int_equal(actc_trainer_step(t, &b, &r), ACTC_OK); /* still training on what it had */
    free(img);
    actc_tensor_release(x);
    actc_trainer_free(t);
    actc_model_free(m);
}

/* Every member of a run recipe equal. */
static void assert_recipe_equal(const actc_run_recipe *a, const actc_run_recipe *b)
{
    assert_int_equal(a->epochs, b->epochs);
    assert_int_equal(a->batch, b->batch);
    assert_int_equal(a->seq, b->seq);
    assert_int_equal(a->epoch_steps, b->epoch_steps);
    assert_int_equal(a->eval_tokens, b->eval_tokens);
    assert_int_equal(a->augment, b->augment);
    assert_int_equal(a->limit_train, b->limit_train);
    assert_string_equal(a->data, b->data);
    assert_string_equal(a->split, b->split);
    assert_int_equal(a->deterministic, b->deterministic);
    assert_string_equal(a->gemm, b->gemm);
    assert_int_equal(a->grad_comm, b->grad_comm);
    assert_int_equal(a->bucket, b->bucket);
}

/* The run's recipe kept by a trainer travels in its checkpoint's record:
 * every member, numbers past 32 bits, negative ones and a data string of
 * the largest length with spaces in it, beside the note; a trainer that
 * loads the file gets both back, and loading a file without them clears
 * both. */
static void test_run_recipe(void **state)
{
    (void)state;
    char path[256], plain[256];
    tpath(path, "recipe.ckpt");
    tpath(plain, "no_recipe.ckpt");
    actc_model *m = make_model("mlp", 16, 3);
    actc_trainer *t = NULL, *t2 = NULL;
    assert_int_equal(actc_trainer_new(m, NULL, &t), ACTC_OK);
    assert_null(actc_trainer_recipe(t));
    assert_int_equal(actc_trainer_save(t, plain), ACTC_OK);
    actc_ckpt_info info;
    assert_int_equal(actc_checkpoint_info(plain, &info), ACTC_OK);
    assert_int_equal(info.has_recipe, 0);
    assert_int_equal(info.recipe.epochs, 0);
    assert_string_equal(info.recipe.data, "");

    actc_run_recipe r;
    memset(&r, 0, sizeof r);
    r.epochs = 7;
    r.batch = 24;
    r.seq = -1;
    r.epoch_steps = 33;
    r.eval_tokens = 5000000000ULL;
    r.augment = 1;
    r.limit_train = 1234;
    memset(r.data, 'd', sizeof r.data - 1);
    memcpy(r.data, "text:my texts/a b.txt ", 22);
    snprintf(r.split, sizeof r.split, "600:300");
    r.deterministic = 1;
    snprintf(r.gemm, sizeof r.gemm, "openblas");
    r.grad_comm = 8;
    r.bucket = (size_t)3 << 33;
    assert_int_equal(actc_trainer_set_recipe(t, &r), ACTC_OK);
    assert_recipe_equal(actc_trainer_recipe(t), &r);
    assert_int_equal(actc_trainer_set_note(t, NOTE), ACTC_OK);
    assert_int_equal(actc_trainer_save(t, path), ACTC_OK);
    if (actc_checkpoint_info(path, &info) != ACTC_OK) fail_msg("%s", actc_last_error());
    assert_int_equal(info.has_recipe, 1);
    assert_recipe_equal(&info.recipe, &r);
    assert_string_equal(info.note, NOTE);
    assert_int_equal(strlen(info.recipe.data), ACTC_RECIPE_DATA_MAX - 1);

    /* A trainer that loads the file keeps its recipe and note... */
    actc_model *m2 = make_model("mlp", 16, 4);
    assert_int_equal(actc_trainer_new(m2, NULL, &t2), ACTC_OK);
    assert_int_equal(actc_trainer_load(t2, path), ACTC_OK);
    assert_non_null(actc_trainer_recipe(t2));
    assert_recipe_equal(actc_trainer_recipe(t2), &r);
    assert_string_equal(actc_trainer_note(t2), NOTE);
    /* ...and one without them clears both. */
    assert_int_equal(actc_trainer_load(t2, plain), ACTC_OK);
    assert_null(actc_trainer_recipe(t2));
    assert_string_equal(actc_trainer_note(t2), "");

    /* A recipe field whose split claims more bytes than its array holds,
     * or whose data holds a NUL, is refused (checksums made right). */
    size_t n;
    unsigned char *img = slurp(path, &n);
    for (int k = 0; k < 2; k++) {
        unsigned char *c = malloc(n);
        memcpy(c, img, n);
        unsigned char *f = record_field(c, 11); /* F_RECIPE */
        assert_non_null(f);
        const size_t data_at = 4 * 4 + 8 + 4 * 2; /* after the numbers before it */
        if (k == 0) put32(f + data_at + 4 + (ACTC_RECIPE_DATA_MAX - 1), sizeof r.split);
        else f[data_at + 4 + 10] = '\0';
        fix_checksums(c, n);
        spit(path, c, n);
        assert_int_equal(actc_checkpoint_info(path, &info), ACTC_ERR_FORMAT);
        assert_non_null(strstr(actc_last_error(), "its record cannot be read"));
        free(c);
    }
    free(img);

    /* A string without its NUL is refused, and the recipe kept. */
    actc_run_recipe bad = r;
    memset(bad.split, 'x', sizeof bad.split);
    assert_int_equal(actc_trainer_set_recipe(t, &bad), ACTC_ERR_INVALID);
    assert_non_null(strstr(actc_last_error(), "does not end inside its array"));
    assert_recipe_equal(actc_trainer_recipe(t), &r);
    assert_int_equal(actc_trainer_set_recipe(t, NULL), ACTC_OK);
    assert_null(actc_trainer_recipe(t));
    actc_trainer_free(t);
    actc_trainer_free(t2);
    actc_model_free(m);
    actc_model_free(m2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_mlp_sgd), cmocka_unit_test(test_roundtrip_resnet_adamw),
        cmocka_unit_test(test_damaged_files),     cmocka_unit_test(test_mismatches),
        cmocka_unit_test(test_overwrite),         cmocka_unit_test(test_reads_version_3),
        cmocka_unit_test(test_reads_version_2),   cmocka_unit_test(test_forged_record),
        cmocka_unit_test(test_forged_policy_state), cmocka_unit_test(test_run_recipe),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
