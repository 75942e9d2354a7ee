/* A checkpoint's run recipe (epochs, batch, data, windows, the bits
 * settings) for train --resume, eval and generate: the record's own field
 * (actc_ckpt_info.recipe), or in a file written before it had one, the
 * flags actc train wrote in the note.  Those files must resume, evaluate
 * and generate as they did, so this is the one place that still reads a
 * note: actc 0.9.0 wrote "--epochs=2 --batch=8 ... --data=text:PATH" there
 * (" --deterministic" without a value), and the settings text of actc 0.1,
 * which the library returns as the note, has the same flags among the
 * trainer's and the model's (the library reads those itself). */
#include "cli.h"
#include <stddef.h>
#include <string.h>
#include <strings.h>

/* The recipe's flags as actc train named them, and where each goes. */
#define AT(member) offsetof(actc_run_recipe, member), sizeof ((actc_run_recipe *)0)->member
static const struct {
    const char *name;
    flag_type type;
    size_t at, size;
} FLAGS[] = {
    {"--epochs", F_INT, AT(epochs)},       {"--batch", F_INT, AT(batch)},
    {"--seq", F_INT, AT(seq)},             {"--epoch-steps", F_INT, AT(epoch_steps)},
    {"--eval-tokens", F_U64, AT(eval_tokens)}, {"--augment", F_BOOL, AT(augment)},
    {"--limit-train", F_INT, AT(limit_train)}, {"--data", F_STR, AT(data)},
    {"--split", F_STR, AT(split)},         {"--deterministic", F_BOOL, AT(deterministic)},
    {"--gemm", F_STR, AT(gemm)},           {"--grad-comm", F_INT, AT(grad_comm)},
    {"--bucket", F_BYTES, AT(bucket)},
};

/* 1 or 0 as the flag parser reads a boolean; -1 for another word. */
static int read_bool(const char *v)
{
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) return 1;
        if (!strcasecmp(v, no[i])) return 0;
    }
    return -1;
}

/* One word of a note, "--NAME=V" (a boolean's "--NAME" alone), into r: 0,
 * or -1 for a word that is no flag or a value that does not read.  Flags
 * that are not the recipe's are skipped. */
static int read_word(char *w, actc_run_recipe *r)
{
    if (strncmp(w, "--", 2)) return -1;
    char *v = strchr(w, '=');
    if (v) *v++ = '\0';
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++) {
        if (strcmp(w, FLAGS[i].name)) continue;
        char *at = (char *)r + FLAGS[i].at;
        long long x;
        int b;
        if (FLAGS[i].type == F_BOOL) {
            if ((b = read_bool(v ? v : "1")) < 0) return -1;
            *(int *)at = b;
            return 0;
        }
        if (!v) return -1;
        switch (FLAGS[i].type) {
        case F_INT:
            if (actc_parse_int(v, -2147483647LL, 2147483647LL, &x) != ACTC_OK) return -1;
            *(int *)at = (int)x;
            return 0;
        case F_U64:
            if (actc_parse_int(v, 0, 4611686018427387904LL, &x) != ACTC_OK) return -1;
            *(uint64_t *)at = (uint64_t)x;
            return 0;
        case F_BYTES: return actc_parse_bytes(v, (size_t *)at) == ACTC_OK ? 0 : -1;
        default: /* F_STR */
            if (strlen(v) >= FLAGS[i].size) return -1;
            strcpy(at, v);
            return 0;
        }
    }
    return 0;
}

int cli_recipe_from_checkpoint(const actc_ckpt_info *info, actc_run_recipe *r)
{
    if (info->has_recipe) {
        *r = info->recipe;
        return 0;
    }
    char note[ACTC_CKPT_NOTE_MAX];
    snprintf(note, sizeof note, "%s", info->note);
    int rc = 0;
    for (char *w = strtok(note, " "); w; w = strtok(NULL, " "))
        if (read_word(w, r)) rc = -1;
    return rc;
}
