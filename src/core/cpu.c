/* What the processor can do, read from cpuid once per process: the vendor,
 * family and model, the vector extensions the dense products care about
 * (AVX2/FMA, AVX-512, AMX) and whether the operating system saves their
 * registers, plus the kernel set OpenBLAS loaded.  gemm.c chooses the
 * backend of the dense products from this, never from a model name.
 *
 * Why read OpenBLAS's core: Debian 12's OpenBLAS 0.3.21 picks its kernels
 * by CPU model, and models it does not know (Intel family 6 from 0xB0 on,
 * Emerald and Sapphire Rapids among them) fall back to its generic Prescott
 * (SSE3) kernels, 3-7x slower than the AVX-512 ones on the same CPU; only
 * OPENBLAS_CORETYPE, read when the library loads, changes that.  Comparing
 * the core's instruction set with the CPU's tells when OpenBLAS wastes the
 * machine. */
#include "core.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#ifdef ACTC_HAVE_DNNL
#include <dnnl.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define ACTC_X86 1
#endif

char *openblas_get_corename(void);
char *openblas_get_config(void);

static actc_cpu_info g_cpu;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#ifdef ACTC_X86
/* XCR0: the register state the OS saves on a context switch.  An extension
 * whose state it does not save cannot be used even when cpuid lists it (a
 * VM may hide AVX-512 this way). */
static unsigned long long xgetbv0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static void add_feature(actc_cpu_info *c, const char *name)
{
    size_t n = strlen(c->features);
    snprintf(c->features + n, sizeof c->features - n, "%s%s", n ? " " : "", name);
}

static void read_x86(actc_cpu_info *c)
{
    unsigned a, b, cx, d;
    if (!__get_cpuid(0, &a, &b, &cx, &d)) return;
    const unsigned max_leaf = a;
    memcpy(c->vendor, &b, 4);
    memcpy(c->vendor + 4, &d, 4);
    memcpy(c->vendor + 8, &cx, 4);
    c->vendor[12] = 0;
    __get_cpuid(1, &a, &b, &cx, &d);
    const unsigned fam = (a >> 8) & 0xf, mod = (a >> 4) & 0xf;
    c->family = (int)(fam == 0xf ? fam + ((a >> 20) & 0xff) : fam);
    c->model = (int)(fam == 0x6 || fam == 0xf ? mod | (((a >> 16) & 0xf) << 4) : mod);
    c->stepping = (int)(a & 0xf);
    const int sse42 = (cx >> 20) & 1, fma = (cx >> 12) & 1, osxsave = (cx >> 27) & 1, avx_bit = (cx >> 28) & 1;
    const unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
    const int os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = (xcr0 & 0xe6) == 0xe6,
              os_amx = (xcr0 & 0x60000) == 0x60000;
    unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b7, c7, d7);
        if (a >= 1) { /* leaf 7's highest subleaf */
            unsigned bb, cc, dd;
            __cpuid_count(7, 1, a71, bb, cc, dd);
        }
    }
    const int avx = avx_bit && os_avx, avx2 = avx && ((b7 >> 5) & 1), has_fma = avx && fma;
    const int avx512f = os_avx512 && ((b7 >> 16) & 1), avx512bw = avx512f && ((b7 >> 30) & 1),
              avx512vl = avx512f && ((b7 >> 31) & 1), avx512vnni = avx512f && ((c7 >> 11) & 1),
              avx512bf16 = avx512f && ((a71 >> 5) & 1);
    const int amx_tile = os_amx && ((d7 >> 24) & 1), amx_bf16 = amx_tile && ((d7 >> 22) & 1),
              amx_int8 = amx_tile && ((d7 >> 25) & 1);
    static const char *const names[] = {"sse4.2",      "avx",      "avx2",     "fma",         "avx512f",
                                        "avx512bw",    "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile",
                                        "amx_bf16",    "amx_int8"};
    const int on[] = {sse42, avx, avx2, has_fma, avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16,
                      amx_tile, amx_bf16, amx_int8};
    for (size_t i = 0; i < sizeof on / sizeof *on; i++)
        if (on[i]) add_feature(c, names[i]);
    c->isa_level = avx512f && avx512bw && avx512vl && has_fma && avx2 ? ACTC_ISA_AVX512
                   : avx2 && has_fma                                   ? ACTC_ISA_AVX2
                   : avx                                               ? ACTC_ISA_AVX
                                                                       : ACTC_ISA_BASE;
    c->amx = amx_tile;
    if (__get_cpuid(0x80000000, &a, &b, &cx, &d) && a >= 0x80000004) {
        unsigned w[12];
        for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002 + i, &w[4 * i], &w[4 * i + 1], &w[4 * i + 2], &w[4 * i + 3]);
        char raw[49];
        memcpy(raw, w, 48);
        raw[48] = 0;
        const char *s = raw;
        while (*s == ' ') s++; /* Intel pads the brand on the left */
        snprintf(c->brand, sizeof c->brand, "%s", s);
    }
}
#endif

/* The instruction set of an OpenBLAS kernel set (its corename): what its
 * sgemm kernel is written in.  Names from OpenBLAS 0.3.21's
 * driver/others/dynamic.c; an unknown name counts as baseline, so a newer
 * OpenBLAS that names a new core is at worst reported as generic. */
static int openblas_core_level(const char *core)
{
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *const avx2[] = {"Haswell", "Zen"};
    static const char *const avx[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (!strcasecmp(core, avx512[i])) return ACTC_ISA_AVX512;
    for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
        if (!strcasecmp(core, avx2[i])) return ACTC_ISA_AVX2;
    for (size_t i = 0; i < sizeof avx / sizeof *avx; i++)
        if (!strcasecmp(core, avx[i])) return ACTC_ISA_AVX;
    return ACTC_ISA_BASE;
}

static void detect(void)
{
    actc_cpu_info *c = &g_cpu;
    memset(c, 0, sizeof *c);
#ifdef ACTC_X86
    read_x86(c);
#endif
    const char *core = openblas_get_corename();
    snprintf(c->openblas_core, sizeof c->openblas_core, "%s", core ? core : "?");
    c->openblas_level = openblas_core_level(c->openblas_core);
    const char *config = openblas_get_config();
    snprintf(c->openblas_config, sizeof c->openblas_config, "%s", config ? config : "");
    /* Generic: kernels without AVX2 on a CPU that has it, what OpenBLAS
     * 0.3.21 loads for a model it does not know (3-7x slower).  AVX2
     * kernels on an AVX-512 CPU (OpenBLAS's Zen kernels on a Zen 4, or
     * OPENBLAS_CORETYPE=Haswell) are not: that case is not measured to be
     * slower than oneDNN, so it keeps OpenBLAS and its results. */
    c->openblas_generic = c->isa_level >= ACTC_ISA_AVX2 && c->openblas_level < ACTC_ISA_AVX2;
#ifdef ACTC_HAVE_DNNL
    const dnnl_version_t *v = dnnl_version();
    snprintf(c->dnnl_version, sizeof c->dnnl_version, "%d.%d.%d", v->major, v->minor, v->patch);
#endif
}

const actc_cpu_info *actc__cpu(void)
{
    pthread_once(&g_once, detect);
    return &g_cpu;
}

actc_status actc_get_cpu_info(actc_cpu_info *out)
{
    if (!out) return actc_set_error(ACTC_ERR_INVALID, "actc_get_cpu_info: NULL out");
    *out = *actc__cpu();
    return ACTC_OK;
}

const char *actc_isa_name(int level)
{
    switch (level) {
    case ACTC_ISA_AVX512: return "avx512";
    case ACTC_ISA_AVX2: return "avx2";
    case ACTC_ISA_AVX: return "avx";
    case ACTC_ISA_BASE: return "sse";
    default: return "?";
    }
}
