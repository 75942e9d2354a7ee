/* The largest batch that trains within a memory budget, for one model
 * under several policies, from the API (the experiment behind ActNN's and
 * GACT's "N x larger batch"): what `actc maxbatch` prints, in a program.
 *
 * usage: maxbatch [MODEL] [BUDGET] [POLICY...]
 *        (defaults: resnet20, 64MiB, none bf16 actnn:L3) */
#include <actc.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *model = argc > 1 ? argv[1] : "resnet20", *budget = argc > 2 ? argv[2] : "64MiB";
    const char *defaults[] = {"none", "bf16", "actnn:L3"};
    const char *const *policies = argc > 3 ? (const char *const *)argv + 3 : defaults;
    const int n = argc > 3 ? argc - 3 : 3;
    actc_maxbatch_opts o = actc_maxbatch_default_opts();
    o.model = model;
    o.resolution = 4; /* close enough, and quicker */
    if (actc_parse_bytes(budget, &o.budget) != ACTC_OK) {
        fprintf(stderr, "error: %s\n", actc_last_error());
        return 2;
    }
    int base = 0;
    for (int i = 0; i < n; i++) {
        o.trainer.policy = policies[i];
        actc_maxbatch_result r;
        char peak[32];
        if (actc_maxbatch(&o, NULL, NULL, &r) != ACTC_OK) {
            fprintf(stderr, "error: %s: %s\n", policies[i], actc_last_error());
            return 1;
        }
        if (i == 0) base = r.batch;
        printf("%-10s largest batch %6d in %s (peak %s), %.2fx the first policy's\n", policies[i], r.batch, budget,
               actc_format_bytes(r.peak, peak, sizeof peak), base ? (double)r.batch / base : 0.0);
    }
    actc_shutdown();
    return 0;
}
