/* Writes the seed corpus of the fuzz targets into tests/fuzz/seeds (run by
 * hand after a format change: build/make_fuzz_seeds SOURCE_DIR; the seeds
 * are committed).  Checkpoints of the model the checkpoint target loads
 * into (mlp width 8) with and without an optimizer and with a trainer's
 * whole state (and with the run's recipe), small IDX files plain and gzip,
 * texts, specs and graph files (a hand graph with every split value, a
 * small SBM; the first byte is fuzz_graph's mode). */
#include "actc.h"
#include "../../src/train/train.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

static const char *g_root;

static void put(const char *dir, const char *name, const void *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/seeds/%s", g_root, dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/tests/fuzz/seeds/%s/%s", g_root, dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static void copy_file(const char *dir, const char *name, const char *from)
{
    FILE *f = fopen(from, "rb");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", from);
        exit(1);
    }
    static unsigned char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    put(dir, name, buf, n);
}

/* A file's bytes after one leading byte (a fuzz target's mode). */
static void copy_file_prefixed(const char *dir, const char *name, unsigned char first, const char *from)
{
    FILE *f = fopen(from, "rb");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", from);
        exit(1);
    }
    static unsigned char buf[1 << 20];
    buf[0] = first;
    size_t n = fread(buf + 1, 1, sizeof buf - 1, f);
    fclose(f);
    put(dir, name, buf, 1 + n);
}

static void gz_seed(const char *name, unsigned char first, const unsigned char *p, size_t n)
{
    unsigned char out[4096];
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    out[0] = first;
    z.next_in = (Bytef *)p;
    z.avail_in = (uInt)n;
    z.next_out = out + 1;
    z.avail_out = sizeof out - 1;
    deflate(&z, Z_FINISH);
    put("idx", name, out, 1 + z.total_out);
    deflateEnd(&z);
}

int main(int argc, char **argv)
{
    g_root = argc > 1 ? argv[1] : ".";
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/seeds", g_root);
    mkdir(path, 0755);
    /* specs */
    static const char *const specs[] = {"none", "bf16", "quant:2,group=64", "actnn:1.5", "division:b=4,q=3,seq=features",
                                        "gact:CB2", "512MiB", "1.5e3", "-42", "step:30:0.1", "cosine"};
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%02zu", i);
        put("spec", name, specs[i], strlen(specs[i]));
    }
    /* IDX: the first byte picks images (even) or labels (odd). */
    unsigned char img[1 + 16 + 3 * 16] = {0, 0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 4};
    for (int i = 0; i < 48; i++) img[17 + i] = (unsigned char)(i * 5);
    put("idx", "images", img, sizeof img);
    unsigned char lab[1 + 8 + 2] = {1, 0, 0, 8, 1, 0, 0, 0, 2, 1, 9};
    put("idx", "labels", lab, sizeof lab);
    gz_seed("images.gz", 0, img + 1, sizeof img - 1);
    gz_seed("labels.gz", 1, lab + 1, sizeof lab - 1);
    /* texts */
    static const char text[] = "In the beginning God created the heaven and the earth.\nAnd the earth was without form.\n";
    put("text", "kjv", text, sizeof text - 1);
    put("text", "short", "a\nb", 3);
    /* graph files */
    {
        const float gx[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
        const int32_t gy[5] = {0, 1, 2, 1, 0}, gs[4] = {0, 1, 2, 3}, gd[4] = {1, 2, 3, 0};
        const int8_t sp[5] = {0, 1, 2, -1, 0};
        actc_graph *g = NULL;
        snprintf(path, sizeof path, "%s/tests/fuzz/seeds/graph.tmp", g_root);
        if (actc_graph_new(5, 2, 3, gx, gy, sp, 4, gs, gd, &g) || actc_graph_save(g, path)) return 1;
        copy_file_prefixed("graph", "hand", 0, path);
        copy_file_prefixed("graph", "hand_fixcrc", 1, path);
        actc_graph_free(g);
        actc_sbm_opts so = actc_sbm_default_opts();
        so.n = 40, so.classes = 4, so.n_features = 4, so.degree = 3, so.n_train = 4, so.n_val = 4;
        if (actc_graph_sbm(&so, &g) || actc_graph_save(g, path)) return 1;
        copy_file_prefixed("graph", "sbm", 1, path);
        actc_graph_free(g);
        remove(path);
    }
    /* checkpoints of the checkpoint target's model (mlp, width 8) */
    actc_model_opts mo = actc_model_default_opts();
    mo.width = 8;
    actc_model *m = NULL;
    actc_trainer *t = NULL;
    actc_trainer_opts to = actc_trainer_default_opts();
    to.policy = "gact:4";
    to.optim = "adamw";
    to.controller.estimate_samples = 2;
    if (actc_model_create("mlp", &mo, &m) || actc_trainer_new(m, &to, &t)) {
        fprintf(stderr, "%s\n", actc_last_error());
        return 1;
    }
    int shp[4] = {4, 1, 28, 28};
    actc_tensor *x = actc_tensor_new(ACTC_MEM_SCRATCH, 4, shp);
    for (size_t i = 0; i < x->numel; i++) x->data[i] = actc_rand_normal(1, i);
    int32_t labels[4] = {1, 2, 3, 4};
    actc_batch b = {.x = x, .labels = labels};
    for (int s = 0; s < 2; s++)
        if (actc_trainer_step(t, &b, NULL)) return 1;
    actc_trainer_set_note(t, "--epochs=2 --batch=4");
    snprintf(path, sizeof path, "%s/tests/fuzz/seeds/trainer.tmp", g_root);
    if (actc_trainer_save(t, path)) return 1;
    copy_file("checkpoint", "trainer", path);
    {
        /* as actc_dist_save writes it on 2 ranks: rank 1's state beside */
        uint8_t *st = NULL;
        size_t len = 0;
        if (actc__trainer_learnt_state(t, &st, &len)) return 1;
        const uint8_t *states[2] = {NULL, st};
        const size_t lens[2] = {0, len};
        if (actc__trainer_save_ranks(t, path, 2, states, lens)) return 1;
        free(st);
        copy_file("checkpoint", "trainer_ranks", path);
    }
    {
        /* with the run's own recipe (a field of the record) */
        actc_run_recipe rec;
        memset(&rec, 0, sizeof rec);
        rec.epochs = 2;
        rec.batch = 4;
        rec.seq = 16;
        rec.epoch_steps = 3;
        rec.eval_tokens = 64;
        snprintf(rec.data, sizeof rec.data, "text:a b.txt");
        snprintf(rec.split, sizeof rec.split, "10:5");
        snprintf(rec.gemm, sizeof rec.gemm, "openblas");
        rec.grad_comm = 8;
        rec.bucket = 4096;
        if (actc_trainer_set_recipe(t, &rec) || actc_trainer_save(t, path)) return 1;
        copy_file("checkpoint", "trainer_recipe", path);
    }
    if (actc_checkpoint_save(path, m, actc_trainer_optim(t), "note")) return 1;
    copy_file("checkpoint", "model_optim", path);
    if (actc_checkpoint_save(path, m, NULL, NULL)) return 1;
    copy_file("checkpoint", "model", path);
    remove(path);
    snprintf(path, sizeof path, "%s/tests/data/mlp_v3.ckpt", g_root);
    copy_file("checkpoint", "v3", path);
    actc_tensor_release(x);
    actc_trainer_free(t);
    actc_model_free(m);
    actc_shutdown();
    return 0;
}
