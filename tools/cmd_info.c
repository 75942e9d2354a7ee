/* actc info: what this machine gives actc, before any training: the CPU and
 * its vector extensions, the kernels OpenBLAS loaded, oneDNN, the backend
 * the dense products and convolutions run on (and why), the threads.  The
 * first thing to run when a machine trains slower than it should. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    int json, threads;
    const char *gemm;
} info_opts;

static const char *const USAGE = "usage: actc info [--json] [--gemm auto|dnnl|openblas] [--threads N]";
static const char *const ABOUT =
    "Print the CPU (vendor, family and model, the vector extensions the operating system enables: AVX2, FMA, "
    "AVX-512, AMX), the kernel set OpenBLAS loaded for it, oneDNN's version, the backend of the dense products "
    "(auto: oneDNN when OpenBLAS runs kernels below the CPU's level, as Debian 12's OpenBLAS does on Intel models "
    "from 0xB0 on, else OpenBLAS) with the reason, the convolution backend and the threads; a warning when the "
    "dense products would run on generic kernels.  --json prints one JSON object, the fields of a training log's "
    "start record.";

static void build_flags(flag_def *f, void *opts)
{
    info_opts *o = opts;
    flag_def defs[] = {
        {"--json", F_BOOL, &o->json, "", "one JSON object instead of text", 0},
        {"--gemm", F_STR, &o->gemm, "NAME", "the dense products' backend to report: auto, dnnl or openblas (auto; ACTC_GEMM)", 0},
        {"--threads", F_INT, &o->threads, "N", "threads (default: all cores)", 0},
        {NULL, F_INT, NULL, NULL, NULL, 0}};
    memcpy(f, defs, sizeof defs);
}

static int cmd_info(int argc, char **argv)
{
    info_opts o = {0, 0, NULL};
    flag_def flags[MAX_FLAGS];
    build_flags(flags, &o);
    int help, rc = flags_parse(flags, argc, argv, 2, &help);
    if (help) {
        flags_help(stdout, USAGE, ABOUT, flags);
        return 0;
    }
    if (rc) return 2;
    if (o.threads < 0) {
        fprintf(stderr, "error: --threads %d: need N >= 0\n", o.threads);
        return 2;
    }
    if (o.gemm && (rc = cli_set_gemm(o.gemm, "--gemm"))) return rc;
    actc_set_threads(o.threads);
    if (o.json) {
        printf("{\"version\":\"%s\",", actc_version());
        cli_machine_json(stdout);
        printf("}\n");
        return 0;
    }
    actc_cpu_info c;
    actc_get_cpu_info(&c);
    printf("actc %s\n", actc_version());
    printf("cpu:            %s (%s, family %d, model 0x%X, stepping %d)\n", c.brand[0] ? c.brand : "?",
           c.vendor[0] ? c.vendor : "?", c.family, (unsigned)c.model, c.stepping);
    printf("extensions:     %s (vector level %s%s)\n", c.features[0] ? c.features : "-", actc_isa_name(c.isa_level),
           c.amx ? ", AMX tiles" : "");
    printf("OpenBLAS:       %s kernels (%s)%s; %s\n", c.openblas_core, actc_isa_name(c.openblas_level),
           c.openblas_generic ? ", generic on this CPU" : "", c.openblas_config);
    printf("oneDNN:         %s\n", c.dnnl_version[0] ? c.dnnl_version : "not built in");
    printf("dense products: %s (setting %s: %s)\n", actc_gemm_backend_in_use(), actc_get_gemm_backend(),
           actc_gemm_backend_reason());
    printf("convolutions:   %s\n", actc_get_conv_backend());
    printf("threads:        %d%s\n", actc_get_threads(), actc_get_deterministic() ? ", deterministic" : "");
    cli_machine_warn(stdout);
    return 0;
}

const command cmd_info_def = {"info", "the CPU, its vector extensions and the backends the products run on", USAGE,
                              ABOUT, build_flags, sizeof(info_opts), cmd_info};
