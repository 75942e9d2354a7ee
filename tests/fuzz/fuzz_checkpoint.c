/* Fuzz target: checkpoint files.  Before the file is written, its declared
 * length and its checksums (a version 4 file's header CRC and final CRC, an
 * old file's final CRC) are made right, so the fuzzer reaches the parsers
 * behind them: the record, the sections, the policy and controller state.
 * Every file must be refused with a message or load; building the model a
 * record describes must never allocate more than the file's own bytes plus
 * that model (bounded by the file), and a refused load changes nothing. */
#include "fuzz_util.h"
#include "../../src/train/train.h"
#include <zlib.h>

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void fix_checksums(uint8_t *b, size_t n)
{
    if (n < 32 || memcmp(b, "ACTCCKPT", 8)) return;
    put64(b + 12, n);
    if (b[8] == 4) {
        const uint32_t R = b[20] | (uint32_t)b[21] << 8 | (uint32_t)b[22] << 16 | (uint32_t)b[23] << 24;
        if ((uint64_t)R + 32 <= n) put32(b + 24 + R, (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, (uInt)(24 + R)));
    }
    put32(b + n - 4, (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, (uInt)(n - 4)));
}

static actc_model *g_model;      /* a small model to load into        */
static actc_trainer *g_trainer;  /* its trainer (gact:4, adamw)        */

static void init(void)
{
    if (g_model) return;
    actc_set_threads(1);
    actc_model_opts mo = actc_model_default_opts();
    mo.width = 8;
    actc_trainer_opts to = actc_trainer_default_opts();
    to.policy = "gact:4";
    to.optim = "adamw";
    if (actc_model_create("mlp", &mo, &g_model) != ACTC_OK || actc_trainer_new(g_model, &to, &g_trainer) != ACTC_OK)
        abort();
}

/* The model's state, bit for bit (NaN weights compare equal to themselves). */
static uLong weight_crc(void)
{
    actc_tensor **st;
    int n = actc_model_state(g_model, &st);
    uLong c = crc32(0L, Z_NULL, 0);
    for (int i = 0; i < n; i++) c = crc32(c, (const Bytef *)st[i]->data, (uInt)(st[i]->numel * sizeof(float)));
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    init();
    if (n > (1u << 20)) return 0;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) abort();
    memcpy(b, data, n);
    fix_checksums(b, n);
    const char *path = fuzz_path(".ckpt");
    fuzz_write(path, b, n);
    free(b);

    const size_t live = fuzz_live();
    actc_ckpt_info info;
    if (actc_checkpoint_info(path, &info) != ACTC_OK && !actc_last_error()[0]) abort();
    fuzz_check_balanced(live);

    actc_mem_reset_peak();
    actc_model *m = NULL;
    if (actc_checkpoint_model(path, &m) == ACTC_OK) {
        actc_model_free(m);
    } else if (!actc_last_error()[0]) {
        abort();
    }
    actc_mem_stats st;
    actc_mem_get_stats(&st);
    /* The file image, and a model no larger than the file. */
    if (st.peak_total - live > 2 * n + 4096) {
        fprintf(stderr, "checkpoint_model took %zu bytes for a file of %zu\n", st.peak_total - live, n);
        abort();
    }
    fuzz_check_balanced(live);

    const uLong before = weight_crc();
    const uint64_t steps = actc_trainer_steps(g_trainer);
    if (actc_trainer_load(g_trainer, path) != ACTC_OK) {
        if (!actc_last_error()[0]) abort();
        if (weight_crc() != before || actc_trainer_steps(g_trainer) != steps) abort(); /* changed half-way */
    }
    /* A data-parallel run's per-rank states (RANKS): rank 1 of 2 takes its
     * own, or the file is refused with a message and nothing changes. */
    int applied = 0;
    const uLong mid = weight_crc();
    if (actc__trainer_load_rank(g_trainer, path, 1, 2, &applied) != ACTC_OK && !actc_last_error()[0]) abort();
    if (weight_crc() != mid) abort(); /* policy state only, never weights */
    if (actc_checkpoint_load(path, g_model, NULL, NULL) != ACTC_OK && !actc_last_error()[0]) abort();
    unlink(path);
    return 0;
}
