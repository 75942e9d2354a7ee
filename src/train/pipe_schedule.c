/* Pipeline schedules as data: the order of one stage's forwards and
 * backwards over a step's micro-batches.  The pass (pipe_pass.c) runs the
 * list; nothing else knows which schedule it is. */
#include "actc.h"

actc_status actc_pipe_ops(actc_pipe_schedule schedule, int stage, int stages, int micro, actc_pipe_op *ops, int *peak)
{
    if (!ops) return actc_set_error(ACTC_ERR_INVALID, "actc_pipe_ops: ops is NULL");
    if (stages < 1 || stage < 0 || stage >= stages || micro < 1)
        return actc_set_error(ACTC_ERR_INVALID, "actc_pipe_ops: stage %d of %d stages, %d micro-batches", stage, stages,
                              micro);
    /* GPipe holds every micro-batch; 1F1B runs as many forwards ahead as
     * there are stages after this one, so that the last stage's first
     * backward finds every stage's forward of micro-batch 0 done, then
     * alternates: a forward, the oldest backward. */
    int ahead;
    switch (schedule) {
    case ACTC_PIPE_GPIPE: ahead = micro; break;
    case ACTC_PIPE_1F1B: ahead = stages - 1 - stage < micro ? stages - 1 - stage : micro; break;
    default: return actc_set_error(ACTC_ERR_INVALID, "actc_pipe_ops: unknown schedule %d", (int)schedule);
    }
    int n = 0, f = 0, b = 0;
    while (f < ahead) ops[n++] = (actc_pipe_op){0, f++};
    while (f < micro) {
        ops[n++] = (actc_pipe_op){0, f++};
        ops[n++] = (actc_pipe_op){1, b++};
    }
    while (b < micro) ops[n++] = (actc_pipe_op){1, b++};
    if (peak) *peak = ahead < micro ? ahead + 1 : micro;
    return ACTC_OK;
}

double actc_pipe_bubble(actc_pipe_schedule schedule, int stages, int micro)
{
    (void)schedule; /* the same for both: P - 1 slots of fill and of drain */
    if (stages < 1 || micro < 1) return 0.0;
    return (double)(stages - 1) / (double)(micro + stages - 1);
}
