/* The machine a run computes on, as the command shows it: the CPU and its
 * vector extensions, the kernels OpenBLAS loaded, the backend of the dense
 * products and why (actc_get_cpu_info, actc_gemm_backend_*).  Printed by
 * `actc info`, in the header of every training run and in its JSON log, so
 * a slow run on a CPU that OpenBLAS does not know says so. */
#include "cli.h"
#include <string.h>

/* The OPENBLAS_CORETYPE that loads OpenBLAS's best kernels for a level. */
static const char *coretype_for(int isa) { return isa >= ACTC_ISA_AVX512 ? "SkylakeX" : "Haswell"; }

int cli_set_gemm(const char *name, const char *what)
{
    if (actc_set_gemm_backend(name) == ACTC_OK) return 0;
    fprintf(stderr, "error: %s: %s\n", what, actc_last_error());
    return 2;
}

void cli_machine_line(FILE *f)
{
    actc_cpu_info c;
    actc_get_cpu_info(&c);
    fprintf(f, "cpu: %s (%s family %d model 0x%X): %s; OpenBLAS %s kernels (%s); dense products on %s: %s\n",
            c.brand[0] ? c.brand : "?", c.vendor[0] ? c.vendor : "?", c.family, (unsigned)c.model,
            c.features[0] ? c.features : "no vector extensions read", c.openblas_core,
            actc_isa_name(c.openblas_level), actc_gemm_backend_in_use(), actc_gemm_backend_reason());
}

int cli_machine_warn(FILE *f)
{
    actc_cpu_info c;
    actc_get_cpu_info(&c);
    if (!c.openblas_generic || strcmp(actc_gemm_backend_in_use(), "openblas")) return 0;
    fprintf(f, "warning: OpenBLAS runs its %s kernels (%s) on this %s CPU: dense products run several times slower "
               "than the CPU allows; %sset OPENBLAS_CORETYPE=%s before starting actc\n",
            c.openblas_core, actc_isa_name(c.openblas_level), actc_isa_name(c.isa_level),
            c.dnnl_version[0] ? "--gemm auto or dnnl (ACTC_GEMM=...) runs them on oneDNN, or " : "",
            coretype_for(c.isa_level));
    return 1;
}

void cli_machine_json(FILE *f)
{
    actc_cpu_info c;
    actc_get_cpu_info(&c);
    fputs("\"cpu\":{\"vendor\":", f);
    actc_json_string(f, c.vendor);
    fputs(",\"brand\":", f);
    actc_json_string(f, c.brand);
    fprintf(f, ",\"family\":%d,\"model\":%d,\"stepping\":%d,\"features\":", c.family, c.model, c.stepping);
    actc_json_string(f, c.features);
    fprintf(f, ",\"isa\":\"%s\",\"amx\":%d},\"openblas\":{\"core\":", actc_isa_name(c.isa_level), c.amx);
    actc_json_string(f, c.openblas_core);
    fprintf(f, ",\"isa\":\"%s\",\"generic\":%d},\"dnnl\":", actc_isa_name(c.openblas_level), c.openblas_generic);
    actc_json_string(f, c.dnnl_version);
    fprintf(f, ",\"gemm\":{\"setting\":\"%s\",\"backend\":\"%s\",\"reason\":", actc_get_gemm_backend(),
            actc_gemm_backend_in_use());
    actc_json_string(f, actc_gemm_backend_reason());
    fprintf(f, "},\"conv\":\"%s\",\"threads\":%d,\"deterministic\":%d", actc_get_conv_backend(), actc_get_threads(),
            actc_get_deterministic());
}
