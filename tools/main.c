/* actc: the command-line front end. */
#include "cli.h"
#include "malloc_conf.h"
#include <string.h>

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_maxbatch(int argc, char **argv);
int cmd_variance(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_inspect(int argc, char **argv);

static void usage(FILE *f)
{
    fprintf(f,
            "actc %s - neural-network training with compressed activations\n\n"
            "usage: actc COMMAND [flags]   (actc COMMAND --help for its flags)\n\n"
            "commands:\n"
            "  train      train a model (progress, memory table, --log, --save/--resume)\n"
            "  eval       evaluate a checkpoint on the test set (or held-out text)\n"
            "  generate   continue a prompt with a language model's checkpoint\n"
            "  maxbatch   largest batch whose training step fits a memory budget\n"
            "  inspect    per saved tensor: GACT's measured sensitivity, bits and bytes\n"
            "  variance   gradient variance from compression vs minibatch sampling, per layer\n\n"
            "models (--model):\n%s\n"
            "compression policies (--compress):\n%s\n"
            "examples:\n"
            "  actc train --model resnet20 --compress none --epochs 1 --batch 128\n"
            "  actc train --model resnet20 --epochs 3 --save r20.ckpt --log r20.jsonl\n"
            "  actc eval --checkpoint r20.ckpt\n"
            "  actc train --model gpt-mini --data text --epochs 6 --epoch-steps 100 --save g.ckpt\n"
            "  actc generate --checkpoint g.ckpt --prompt \"And God said\" --tokens 200 --top-k 20\n"
            "  actc maxbatch --budget 2GiB --model resnet18 --compress bf16\n"
            "  actc inspect --model resnet20 --compress gact:4\n"
            "  actc variance --model resnet20 --compress bf16 --batch 64 --repeats 4\n",
            ACTC_VERSION, actc_model_list(), actc_policy_list());
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
        printf("actc %s\n", ACTC_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "train")) return cmd_train(argc, argv);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc, argv);
    if (!strcmp(cmd, "maxbatch")) return cmd_maxbatch(argc, argv);
    if (!strcmp(cmd, "variance")) return cmd_variance(argc, argv);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc, argv);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc, argv);
    fprintf(stderr, "error: unknown command '%s' (train, eval, generate, maxbatch, variance; see actc --help)\n", cmd);
    return 2;
}
