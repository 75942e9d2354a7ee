/* Training-step benchmark: samples/s of a full step of the library's trainer
 * (forward + loss, backward, optimizer) and the time split between the three
 * (actc_step_result), for one model, batch and policy per process (so the
 * peak RSS printed belongs to that configuration).
 *
 * usage: bench_step MODEL BATCH [POLICY] [STEPS] [THREADS] [SEQ]
 * Inputs are synthetic (speed does not depend on pixel or token values). Three
 * warm-up steps are not timed.  Image models train with SGD (momentum,
 * Nesterov) and report samples/s; language models (gpt-mini, llama-mini,
 * gpt2-124m) train with AdamW on SEQ-token windows (default: the model's
 * context) and report tokens/s.  Output: one human line and one JSON line.
 * ACTC_BENCH_MALLOPT and ACTC_BENCH_CACHE in the environment choose the
 * malloc setup (bench/malloc_overhead.sh), ACTC_BENCH_DETERMINISTIC=1 the
 * deterministic mode, ACTC_GEMM the dense products' backend and
 * ACTC_BENCH_SHAPE="layers=12,width=768,heads=12,context=1024,vocab=256" (any
 * of the five) a language model's shape other than its preset's, and
 * ACTC_BENCH_PROFILE=1 the timed steps' operator profile (actc_ctx_profile_*),
 * a table on stderr.  The JSON
 * line names the backend and OpenBLAS's kernels (bench/cpu_speed.sh). */
#include "actc.h"
#include "malloc_conf.h"
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* Minor page faults of the process so far: what a malloc that hands memory
 * back to the kernel costs every step. */
static long minor_faults(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) ? 0 : ru.ru_minflt;
}

/* The operator profile of the timed steps on stderr (stdout's last line
 * stays the JSON record): milliseconds per step, forward and backward, and
 * each operator's share of the step. */
static void print_profile(const actc_ctx *ctx, const char *model, int steps, double total, double update_s)
{
    int n = actc_ctx_profile_get(ctx, NULL, 0);
    actc_op_time *ops = calloc((size_t)(n > 0 ? n : 1), sizeof *ops);
    if (!ops) return;
    n = actc_ctx_profile_get(ctx, ops, n);
    double fw = 0, bw = 0;
    fprintf(stderr, "profile of %s, %d threads, ms per step (step %.1f ms):\n%-18s %9s %9s %7s %7s\n", model,
            actc_get_threads(), 1e3 * total / steps, "operator", "forward", "backward", "calls", "share");
    for (int i = 0; i < n; i++) {
        fw += ops[i].forward_s;
        bw += ops[i].backward_s;
        fprintf(stderr, "%-18s %9.2f %9.2f %7ld %6.1f%%\n", ops[i].op, 1e3 * ops[i].forward_s / steps,
                1e3 * ops[i].backward_s / steps, ops[i].forward_calls / steps,
                100 * (ops[i].forward_s + ops[i].backward_s) / total);
    }
    fprintf(stderr, "%-18s %9.2f %9s %7s %6.1f%%\n", "(optimizer)", 1e3 * update_s / steps, "", "", 100 * update_s / total);
    const double rest = total - fw - bw - update_s;
    fprintf(stderr, "%-18s %9.2f %9s %7s %6.1f%%\n", "(outside ops)", 1e3 * rest / steps, "", "", 100 * rest / total);
    free(ops);
}

static int die(const char *what)
{
    fprintf(stderr, "bench_step: %s: %s\n", what, actc_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_step MODEL BATCH [POLICY] [STEPS] [THREADS] [SEQ]\n");
        return 2;
    }
    /* Bench-only switches for bench/malloc_overhead.sh (the library reads no
     * environment): ACTC_BENCH_MALLOPT=0 leaves glibc's malloc at its defaults
     * (tools/malloc_conf.h would raise its thresholds), ACTC_BENCH_CACHE sets
     * the allocator's cache limit ("0": off, "auto", or bytes). */
    const char *mallopt_env = getenv("ACTC_BENCH_MALLOPT"), *cache_env = getenv("ACTC_BENCH_CACHE");
    if (!mallopt_env || strcmp(mallopt_env, "0")) actc_setup_malloc(); /* as the actc command does */
    if (cache_env && strcmp(cache_env, "auto")) {
        size_t limit;
        if (actc_parse_bytes(cache_env, &limit) != ACTC_OK) return die("ACTC_BENCH_CACHE");
        actc_mem_set_cache_limit(limit);
    }
    /* ACTC_CONV=auto|dnnl|im2col chooses the convolution backend, as for
     * the actc command (the library reads no environment). */
    const char *conv_env = getenv("ACTC_CONV");
    if (conv_env && actc_set_conv_backend(conv_env) != ACTC_OK) return die("ACTC_CONV");
    /* ACTC_GEMM=auto|dnnl|openblas the dense products' backend, as the
     * actc command's --gemm. */
    const char *gemm_env = getenv("ACTC_GEMM");
    if (gemm_env && actc_set_gemm_backend(gemm_env) != ACTC_OK) return die("ACTC_GEMM");
    /* ACTC_BENCH_DETERMINISTIC=1: actc_set_deterministic, as --deterministic
     * (bench/deterministic_cost.sh). */
    const char *det_env = getenv("ACTC_BENCH_DETERMINISTIC");
    if (det_env && strcmp(det_env, "0") && actc_set_deterministic(1) != ACTC_OK) return die("deterministic");
    const char *model = argv[1], *policy = argc > 3 ? argv[3] : "none";
    int batch = atoi(argv[2]), steps = argc > 4 ? atoi(argv[4]) : 10;
    if (argc > 5) actc_set_threads(atoi(argv[5]));
    actc_model_opts mo = actc_model_default_opts();
    mo.seed = 1;
    const char *shape_env = getenv("ACTC_BENCH_SHAPE");
    if (shape_env) {
        /* key=value pairs separated by commas; any key left out keeps the
         * preset's value (0 in mo means "the preset's"). */
        char buf[256];
        snprintf(buf, sizeof buf, "%s", shape_env);
        for (char *kv = strtok(buf, ","); kv; kv = strtok(NULL, ",")) {
            int v, used = 0;
            char key[16];
            if (sscanf(kv, "%15[a-z]=%d%n", key, &v, &used) != 2 || kv[used] || v < 1) {
                fprintf(stderr, "bench_step: ACTC_BENCH_SHAPE: bad '%s' (layers=N,width=N,heads=N,context=N,vocab=N)\n", kv);
                return 2;
            }
            if (!strcmp(key, "layers")) mo.n_layers = v;
            else if (!strcmp(key, "width")) mo.width = v;
            else if (!strcmp(key, "heads")) mo.n_heads = v;
            else if (!strcmp(key, "context")) mo.context = v;
            else if (!strcmp(key, "vocab")) mo.vocab = v;
            else {
                fprintf(stderr, "bench_step: ACTC_BENCH_SHAPE: unknown key '%s'\n", key);
                return 2;
            }
        }
    }
    actc_model *m;
    if (actc_model_create(model, &mo, &m) != ACTC_OK) return die("model");
    const int lm = actc_model_takes_tokens(m);
    const int T = lm ? (argc > 6 ? atoi(argv[6]) : actc_model_get_opts(m)->context) : 1;
    const int V = actc_model_get_opts(m)->vocab;
    /* The library's trainer, as the command trains: SGD (momentum,
     * Nesterov) for images, AdamW for language models, a constant rate, no
     * clipping.  Its controller measures a gact policy's sensitivities once,
     * at the first (untimed) step, so the timed steps run with the bits
     * (bench/gact_overhead.sh times the measurement itself). */
    actc_trainer_opts to = actc_trainer_default_opts();
    to.policy = policy;
    to.optim = lm ? "adamw" : "sgd";
    to.lr = 0.01f;
    to.controller.adapt_interval = UINT64_MAX;
    actc_trainer *t = NULL;
    if (actc_trainer_new(m, &to, &t) != ACTC_OK) return die("trainer");
    actc_ctx *ctx = actc_trainer_ctx(t);
    int shp[4] = {batch, 1, 28, 28};
    actc_tensor *x = lm ? NULL : actc_tensor_new(ACTC_MEM_SCRATCH, 4, shp);
    const size_t rows = (size_t)batch * T;
    int32_t *labels = malloc(rows * sizeof *labels), *ids = malloc(rows * sizeof *ids);
    if ((!lm && !x) || !labels || !ids || T < 1) return die("setup");
    if (x)
        for (size_t i = 0; i < x->numel; i++) x->data[i] = actc_rand_normal(3, i);
    for (size_t i = 0; i < rows; i++) {
        labels[i] = lm ? (int32_t)(actc_rand_uniform(4, i) * (V < 256 ? V : 256)) : (int32_t)(i % 10);
        ids[i] = lm ? (int32_t)(actc_rand_uniform(5, i) * (V < 256 ? V : 256)) : 0;
    }
    const actc_batch b = lm ? (actc_batch){.ids = ids, .B = batch, .T = T, .labels = labels}
                            : (actc_batch){.x = x, .labels = labels};

    double tf = 0, tb = 0, to_s = 0, tc = 0;
    actc_store_stats ss;
    actc_mem_stats ms0 = {0};
    long flt0 = 0;
    const char *prof_env = getenv("ACTC_BENCH_PROFILE");
    const int profile = prof_env && strcmp(prof_env, "0");
    for (int s = -3; s < steps; s++) {
        if (s == 0) {
            if (profile && actc_ctx_profile_start(ctx) != ACTC_OK) return die("profile");
            actc_mem_reset_peak();
            actc_store_reset_peak(ctx);
            actc_mem_get_stats(&ms0);
            flt0 = minor_faults();
        }
        actc_step_result r;
        if (actc_trainer_step(t, &b, &r) != ACTC_OK) return die("step");
        if (s >= 0) {
            tf += r.forward_s;
            tb += r.backward_s;
            to_s += r.update_s;
            tc += r.codec_forward_s + r.codec_backward_s;
        }
    }
    const double flt_per_step = (double)(minor_faults() - flt0) / steps;
    actc_cpu_info cpu;
    actc_get_cpu_info(&cpu);
    actc_store_get_stats(ctx, &ss);
    actc_mem_stats ms;
    actc_mem_get_stats(&ms);
    double total = tf + tb + to_s, sps = (double)rows * steps / total;
    printf("%-9s batch %4d %-8s %8.1f %s/s  forward %4.1f%%  backward %4.1f%%  optimizer %4.1f%%  "
           "context %.1f MiB (%.2fx)  peak %.1f MiB  RSS %.1f MiB\n",
           model, batch, policy, sps, lm ? "tokens" : "samples", 100 * tf / total, 100 * tb / total, 100 * to_s / total,
           ss.context_bytes / 1048576.0, actc_context_ratio(&ss),
           ms.peak_total / 1048576.0, actc_process_peak_rss() / 1048576.0);
    printf("{\"model\":\"%s\",\"batch\":%d,\"seq\":%d,\"policy\":\"%s\",\"threads\":%d,\"steps\":%d,\"%s_per_s\":%.2f,"
           "\"forward_s\":%.4f,\"backward_s\":%.4f,\"optimizer_s\":%.4f,\"context_bytes\":%zu,\"context_none\":%zu,\"context_fp32\":%zu,"
           "\"peak_total\":%zu,\"peak_rss\":%zu,\"deterministic\":%d,\"cached\":%zu,\"allocs_per_step\":%.1f,\"sys_allocs_per_step\":%.1f,\"minflt_per_step\":%.1f,"
           "\"codec_s\":%.4f,\"params\":%zu,\"gemm\":\"%s\",\"openblas_core\":\"%s\",\"isa\":\"%s\"}\n",
           model, batch, T, policy, actc_get_threads(), steps, lm ? "tokens" : "samples", sps, tf / steps, tb / steps, to_s / steps, ss.context_bytes,
           ss.context_none, ss.context_fp32, ms.peak_total, actc_process_peak_rss(), actc_get_deterministic(), ms.cached,
           (double)(ms.n_allocs - ms0.n_allocs) / steps, (double)(ms.n_sys_allocs - ms0.n_sys_allocs) / steps, flt_per_step,
           tc / steps, actc_model_num_params(m), actc_gemm_backend_in_use(), cpu.openblas_core, actc_isa_name(cpu.isa_level));
    if (profile) print_profile(ctx, model, steps, total, to_s);
    actc_tensor_release(x);
    free(labels);
    free(ids);
    actc_trainer_free(t);
    actc_model_free(m);
    actc_shutdown();
    return 0;
}
