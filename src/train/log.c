/* A run's log: the JSON-lines records `actc train --log` appends (steps,
 * epochs, the controller's adaptations and alerts), written by the library
 * so that every program built on the trainer logs the same fields.  Each
 * record is one line, flushed at once: a run that dies keeps every record
 * before it.  The memory report's own JSON is report.c's. */
#include "train.h"
#include <math.h>
#include <stdio.h>

/* End a record; ACTC_ERR_IO if anything in it failed to write. */
static actc_status finish(FILE *f, const char *what)
{
    fputs("}\n", f);
    if (fflush(f) == EOF || ferror(f)) return actc_set_error(ACTC_ERR_IO, "cannot write the %s record of the log", what);
    return ACTC_OK;
}

void actc_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", (unsigned char)*s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

actc_status actc_log_step(FILE *f, const actc_progress *p, const char *unit, double rate)
{
    if (!f || !p || !p->last || !unit) return actc_set_error(ACTC_ERR_INVALID, "actc_log_step: NULL argument");
    fprintf(f, "{\"event\":\"step\",\"epoch\":%d,\"step\":%llu,\"loss\":%.9g,\"lr\":%.6g,\"%s_per_s\":%.2f",
            (int)p->epoch + 1, (unsigned long long)p->step, p->last->loss, p->last->lr, unit, rate);
    return finish(f, "step");
}

/* The communication of data parallelism, per step of this rank. */
static void comm(FILE *f, const actc_dist_stats *ds)
{
    fprintf(f, "\"comm\":{\"ranks\":%d,\"bits\":%d,\"buckets\":%d,\"floats\":%zu,\"fp32_floats\":%zu,"
               "\"bytes_sent\":%zu,\"exposed_s\":%.6f,\"comm_s\":%.6f},",
            ds->ranks, ds->grad_comm, ds->buckets, ds->floats, ds->fp32_floats, ds->bytes_sent,
            ds->steps ? ds->total_exposed_s / (double)ds->steps : 0, ds->steps ? ds->total_comm_s / (double)ds->steps : 0);
}

actc_status actc_log_epoch(FILE *f, const actc_trainer *t, const actc_epoch_result *er, const actc_log_epoch_info *in)
{
    if (!f || !t || !er || !in || !in->model || (in->eval && !in->eval_name))
        return actc_set_error(ACTC_ERR_INVALID, "actc_log_epoch: NULL argument (or an evaluation without its name)");
    fprintf(f, "{\"event\":\"epoch\",\"epoch\":%d,\"step\":%llu,\"model\":", (int)t->epoch,
            (unsigned long long)t->step);
    actc_json_string(f, in->model);
    fputs(",\"policy\":", f);
    actc_json_string(f, actc_ctx_policy(t->ctx));
    fprintf(f, ",\"batch\":%d,\"train_loss\":%.6f,\"train_acc\":%.6f,", in->batch, er->loss, er->accuracy);
    if (in->eval)
        fprintf(f, "\"%s_acc\":%.6f,\"%s_loss\":%.6f,", in->eval_name, in->eval->accuracy, in->eval_name,
                in->eval->loss);
    if (in->seq > 0) fprintf(f, "\"val_bpb\":%.6f,\"seq\":%d,", in->eval ? in->eval->loss / M_LN2 : 0.0, in->seq);
    if (in->test) fprintf(f, "\"test_acc\":%.6f,\"test_loss\":%.6f,", in->test->accuracy, in->test->loss);
    if (in->comm) comm(f, in->comm);
    const double per = er->steps ? 1e3 / er->steps : 0;
    fprintf(f, "\"time_ms\":{\"steps\":%d,\"forward\":%.4f,\"codec_forward\":%.4f,\"backward\":%.4f,"
               "\"codec_backward\":%.4f,\"update\":%.4f,\"controller\":%.4f},",
            er->steps, per * er->forward_s, per * er->codec_forward_s, per * er->backward_s,
            per * er->codec_backward_s, per * er->update_s, per * er->measure_s);
    fprintf(f, "\"%s_per_s\":%.2f,\"seconds\":%.2f,\"memory\":", in->seq > 0 ? "tokens" : "samples",
            er->rows ? (double)er->rows / er->seconds : 0, er->seconds);
    actc_status s = actc_trainer_report_file(t, ACTC_REPORT_JSON, f);
    actc_status e = finish(f, "epoch");
    return s != ACTC_OK ? s : e;
}

actc_status actc_log_adapt(FILE *f, const actc_controller *c, uint64_t step)
{
    if (!f || !c) return actc_set_error(ACTC_ERR_INVALID, "actc_log_adapt: NULL file or controller");
    fprintf(f, "{\"event\":\"adapt\",\"step\":%llu,\"tensors\":", (unsigned long long)step);
    actc_status s = actc_controller_report_file(c, ACTC_REPORT_JSON, f);
    actc_status e = finish(f, "adapt");
    return s != ACTC_OK ? s : e;
}

actc_status actc_log_alert(FILE *f, const actc_controller *c, uint64_t step)
{
    if (!f || !c) return actc_set_error(ACTC_ERR_INVALID, "actc_log_alert: NULL file or controller");
    double comp, overall;
    actc_controller_variances(c, &comp, &overall);
    fprintf(f, "{\"event\":\"variance_alert\",\"step\":%llu,\"compression_variance\":%.6g,\"gradient_variance\":%.6g",
            (unsigned long long)step, comp, overall);
    return finish(f, "variance alert");
}
