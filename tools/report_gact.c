/* GACT's adaptation notices during a training run (the per-tensor table
 * itself is the library's: actc_controller_report_file). */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

void report_adaptation(actc_controller *c, FILE *log, uint64_t step, int bar)
{
    if (actc_controller_adapted(c)) {
        int n = actc_controller_tensors(c, NULL, 0);
        printf("%sstep %llu: measured the sensitivity of %d saved tensors and re-allocated their bits\n",
               bar ? "\n" : "", (unsigned long long)step, n);
        fflush(stdout);
        if (log) actc_log_adapt(log, c, step);
    }
    const char *alert = actc_controller_take_alert(c);
    if (alert) {
        fprintf(stderr, "%swarning: step %llu: %s\n", bar ? "\n" : "", (unsigned long long)step, alert);
        if (log) actc_log_alert(log, c, step);
    }
}
