/* actc: the command-line front end.  One table of commands feeds the
 * dispatch, `actc --help` and the man page (`actc --man`, installed as
 * actc(1)). */
#include "cli.h"
#include "malloc_conf.h"
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static const command *const commands[] = {&cmd_train_def,   &cmd_eval_def,    &cmd_generate_def,
                                          &cmd_maxbatch_def, &cmd_inspect_def, &cmd_variance_def,
                                          &cmd_graph_def,   &cmd_bench_def,   &cmd_info_def};
#define N_COMMANDS (sizeof commands / sizeof *commands)

static const char *const EXAMPLES =
    "  actc train --model resnet20 --compress none --epochs 1 --batch 128\n"
    "  actc train --model resnet20 --epochs 3 --save r20.ckpt --log r20.jsonl\n"
    "  actc eval --checkpoint r20.ckpt\n"
    "  actc train --model gpt-mini --data text --epochs 6 --epoch-steps 100 --save g.ckpt\n"
    "  actc generate --checkpoint g.ckpt --prompt \"And God said\" --tokens 200 --top-k 20\n"
    "  actc maxbatch --budget 2GiB --model resnet18 --compress bf16\n"
    "  actc inspect --model resnet20 --compress gact:4\n"
    "  actc variance --model resnet20 --compress bf16 --batch 64 --repeats 4\n"
    "  actc graph sbm --nodes 100000 --out sbm.graph && actc graph info sbm.graph\n"
    "  actc bench --suite quick --out bench-out/quick\n"
    "  actc info\n";
static const char *const ENVIRONMENT =
    "  ACTC_CONV=auto|dnnl|im2col   convolution backend (auto: oneDNN when built in, else im2col)\n"
    "  ACTC_GEMM=auto|dnnl|openblas dense-product backend of every command (as train's --gemm; actc info)\n"
    "  ACTC_TEXT=PATH               the default text corpus of --data text\n"
    "  ACTC_GNUPLOT=PATH            the gnuplot that actc bench draws with (gnuplot)\n"
    "  ACTC_PYTHON=PATH             the python3 of actc bench's PyTorch peer (python3)\n";

static void usage(FILE *f)
{
    fprintf(f,
            "actc %s - neural-network training with compressed activations\n\n"
            "usage: actc COMMAND [flags]   (actc COMMAND --help for its flags)\n\n"
            "commands:\n",
            actc_version());
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(f, "\nmodels (--model):\n%s\ncompression policies (--compress):\n%s\nenvironment:\n%s\nexamples:\n%s",
            actc_model_list(), actc_policy_list(), ENVIRONMENT, EXAMPLES);
}

/* Text for troff: a leading dot or quote would be a request, a backslash an
 * escape, and a hyphen in a flag should print as a minus. */
static void roff(FILE *f, const char *s)
{
    int bol = 1;
    for (; *s; s++) {
        if (bol && (*s == '.' || *s == '\'')) fputs("\\&", f);
        if (*s == '\\') fputs("\\e", f);
        else if (*s == '-') fputs("\\-", f);
        else fputc(*s, f);
        bol = *s == '\n';
    }
}

/* The man page, from the same tables as --help. */
static void man(FILE *f)
{
    fprintf(f, ".TH ACTC 1 \"\" \"actc %s\" \"User Commands\"\n.SH NAME\nactc \\- neural\\-network training with "
               "compressed activations\n.SH SYNOPSIS\n.B actc\n.I COMMAND\n[flags]\n.SH DESCRIPTION\n",
            actc_version());
    fputs("Every tensor an operator keeps for its backward pass is stored compressed by a policy\n"
          "(\\fB\\-\\-compress\\fR) and decompressed when backward needs it.  Each command prints its\n"
          "flags with \\fB\\-\\-help\\fR.\n",
          f);
    for (size_t i = 0; i < N_COMMANDS; i++) {
        const command *c = commands[i];
        void *opts = calloc(1, c->opts_size);
        flag_def flags[MAX_FLAGS];
        if (!opts) continue;
        c->flags(flags, opts);
        fprintf(f, ".SH \"%s\"\n", c->name);
        roff(f, c->usage);
        fputs("\n.PP\n", f);
        roff(f, c->about);
        fputs("\n", f);
        for (const flag_def *d = flags; d->name; d++) {
            fputs(".TP\n\\fB", f);
            roff(f, d->name);
            fputs("\\fR", f);
            if (d->type != F_BOOL) {
                fputs(" \\fI", f);
                roff(f, d->meta);
                fputs("\\fR", f);
            }
            fputs("\n", f);
            roff(f, d->help);
            fputs("\n", f);
        }
        free(opts);
    }
    fputs(".SH MODELS\n.nf\n", f);
    roff(f, actc_model_list());
    fputs(".fi\n.SH COMPRESSION POLICIES\n.nf\n", f);
    roff(f, actc_policy_list());
    fputs(".fi\n.SH ENVIRONMENT\n.nf\n", f);
    roff(f, ENVIRONMENT);
    fputs(".fi\n.SH EXAMPLES\n.nf\n", f);
    roff(f, EXAMPLES);
    fputs(".fi\n.SH SEE ALSO\nThe library's header \\fIactc.h\\fR documents every function of libactc.\n", f);
}

int main(int argc, char **argv)
{
    actc_setup_malloc();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("actc %s\n", actc_version());
        return 0;
    }
    if (!strcmp(cmd, "--man")) {
        man(stdout);
        return 0;
    }
    const command *c = NULL;
    for (size_t i = 0; i < N_COMMANDS && !c; i++)
        if (!strcmp(cmd, commands[i]->name)) c = commands[i];
    if (!c) {
        fprintf(stderr, "error: unknown command '%s' (train, eval, generate, maxbatch, inspect, variance, graph, bench, info; see actc "
                        "--help)\n", cmd);
        return 2;
    }
    /* ACTC_CONV=auto|dnnl|im2col picks the convolution backend.  The
     * command reads the variable, not the library (which takes no
     * configuration from the environment). */
    const char *conv = getenv("ACTC_CONV");
    if (conv && actc_set_conv_backend(conv) != ACTC_OK) {
        fprintf(stderr, "error: ACTC_CONV: %s\n", actc_last_error());
        return 2;
    }
    /* ACTC_GEMM=auto|dnnl|openblas picks the dense products' backend for
     * every command (train's --gemm overrides it). */
    const char *gemm = getenv("ACTC_GEMM");
    if (gemm && cli_set_gemm(gemm, "ACTC_GEMM")) return 2;
    /* Over a file-size limit (ulimit -f) a write should fail with EFBIG and
     * the command say which file, not die of SIGXFSZ half-way through a
     * checkpoint (the library does not touch signals; the program may). */
    signal(SIGXFSZ, SIG_IGN);
    int rc = c->run(argc, argv);
    /* Free the library's process-wide resources (oneDNN's engine and
     * primitives, cached blocks) so valgrind and LeakSanitizer see a clean
     * exit. */
    actc_shutdown();
    return rc;
}
