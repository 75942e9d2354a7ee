/* A checkpoint of actc train rewritten as actc 0.9.0 wrote it: the same
 * training state, but no run recipe in the record and the recipe as flags
 * in the note instead (NOTE, as that version's train command made it), so
 * that the shell tests can check that such files still resume, evaluate
 * and generate as they did.
 *
 * usage: old_checkpoint IN OUT NOTE */
#include "actc.h"
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: old_checkpoint IN OUT NOTE\n");
        return 2;
    }
    actc_ckpt_info info;
    actc_model *m = NULL;
    actc_trainer *t = NULL;
    /* The trainer the file describes, with its state loaded. */
    const int ok = actc_checkpoint_info(argv[1], &info) == ACTC_OK && actc_checkpoint_model(argv[1], &m) == ACTC_OK &&
                   actc_trainer_new(m, &info.trainer, &t) == ACTC_OK && actc_trainer_load(t, argv[1]) == ACTC_OK &&
                   actc_trainer_set_recipe(t, NULL) == ACTC_OK && actc_trainer_set_note(t, argv[3]) == ACTC_OK &&
                   actc_trainer_save(t, argv[2]) == ACTC_OK;
    if (!ok) fprintf(stderr, "old_checkpoint: %s\n", actc_last_error());
    actc_trainer_free(t);
    actc_model_free(m);
    return ok ? 0 : 1;
}
