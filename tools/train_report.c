/* What actc train prints and logs: the run's header (model, policy,
 * machine, data, where it resumes) and the log's start record, the
 * progress after every step with the log's step records, and after every
 * epoch the summary line, the memory table, where a step's time went and
 * the log's epoch record. */
#include "train_cmd.h"
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* The stages: each one's blocks and the micro-batches its schedule holds
 * at once, against the theory (1F1B: min(P - s, M); GPipe: M). */
static void print_pipeline(const train_opts *o, const run_state *r, const cli_dist *dist)
{
    const int P = o->pipeline, D = dist->size / P, M = o->accum;
    const actc_pipe_schedule ps = !strcmp(o->pipe_schedule, "gpipe") ? ACTC_PIPE_GPIPE : ACTC_PIPE_1F1B;
    printf("pipeline: %d stages x %d replica(s) (ranks s x %d + d), %s over %d micro-batches a step, %d thread(s) "
           "per rank; bubble (P - 1) / (M + P - 1) = %.1f%%%s\n",
           P, D, D, o->pipe_schedule, M, actc_get_threads(), 100.0 * actc_pipe_bubble(ps, P, M),
           D > 1 ? "; gradients all-reduced among each stage's replicas" : "");
    actc_pipe_op *ops = malloc(2 * (size_t)M * sizeof *ops);
    const int L = r->first_block[P - 1] + r->n_blocks[P - 1];
    int most = 0; /* the fullest stage's micro-batch blocks (actc_ctx_set_stage) */
    for (int s = 0; ops && s < P; s++) {
        int peak = 0;
        actc_pipe_ops(ps, s, P, M, ops, &peak);
        if (peak * r->n_blocks[s] > most) most = peak * r->n_blocks[s];
    }
    for (int s = 0; s < P; s++) {
        int peak = 0;
        if (ops) actc_pipe_ops(ps, s, P, M, ops, &peak);
        char blocks[32];
        if (r->n_blocks[s] == 1) snprintf(blocks, sizeof blocks, "block %d", r->first_block[s]);
        else snprintf(blocks, sizeof blocks, "blocks %d-%d", r->first_block[s], r->first_block[s] + r->n_blocks[s] - 1);
        char bits[48] = "";
        const int b = actc_ctx_stage_bits(actc_trainer_ctx(r->t), peak * r->n_blocks[s], most);
        if (b) snprintf(bits, sizeof bits, "; its compressed saves at %d bits", b);
        printf("  stage %d: %s%s%s; holds at most %d micro-batch(es)%s\n", s, s == 0 ? "embedding, " : "", blocks,
               r->first_block[s] + r->n_blocks[s] == L ? ", final norm and head" : "", peak, bits);
    }
    free(ops);
}

void train_print_start(const train_opts *o, run_state *r, int lm, const cli_dist *dist, const actc_ckpt_info *info)
{
    const actc_trainer_opts *to = actc_trainer_get_opts(r->t);
    const int steps = actc_source_batches(r->src);
    char pbuf[32];
    actc_model *m = r->model;
    char bdesc[48];
    if (r->graph) snprintf(bdesc, sizeof bdesc, "full-graph steps");
    else snprintf(bdesc, sizeof bdesc, "steps at batch %d", o->batch);
    printf("actc %s: model %s (%zu parameters%s, %s), policy %s, %d epoch(s) of %d %s, %d thread(s)%s\n",
           actc_version(), o->model, actc_model_num_params(m), r->pipe ? " in stage 0" : "",
           actc_format_bytes(actc_model_num_params(m) * 4, pbuf, sizeof pbuf),
           to->policy, o->epochs, steps, bdesc, actc_get_threads(), o->deterministic ? ", deterministic" : "");
    cli_machine_line(stdout);
    cli_machine_warn(stderr);
    if (r->log) {
        fprintf(r->log, "{\"event\":\"start\",\"version\":\"%s\",\"model\":", actc_version());
        actc_json_string(r->log, o->model);
        fputs(",\"policy\":", r->log);
        actc_json_string(r->log, to->policy);
        fputc(',', r->log);
        cli_machine_json(r->log);
        fprintf(r->log, "}\n");
        fflush(r->log);
    }
    if (lm) {
        const actc_text_corpus *c = &r->corpus;
        const int T = r->T;
        printf("text %s: %zu bytes, %zu for training, %zu held out for validation (from byte %zu); windows of %d "
               "tokens; unigram baseline %.3f bits per byte on validation\n",
               c->source, c->n, c->train_end, c->n - c->train_end, c->train_end, T, actc_text_unigram_bpb(c));
    }
    if (r->pipe) {
        print_pipeline(o, r, dist);
    } else if (dist->size > 1)
        printf("data parallel: %d ranks, %d thread(s) each; each step rank r runs rows [r B / %d, (r + 1) B / %d) of "
               "the batch of B = %d; gradients all-reduced in %d bits\n",
               dist->size, actc_get_threads(), dist->size, dist->size, o->batch, o->grad_comm);
    if (o->resume_path)
        printf("resuming %s at epoch %llu, step %llu\n", o->resume_path, (unsigned long long)actc_trainer_epoch(r->t) + 1,
               (unsigned long long)actc_trainer_steps(r->t));
    /* Files of actc 0.1 (versions 2 and 3) hold no policy state. */
    if (o->resume_path && info->version < 4 && actc_ctx_policy_learns(actc_trainer_ctx(r->t)))
        printf("note: %s is a version %u checkpoint, which holds no policy state: %s learns its state afresh\n",
               o->resume_path, (unsigned)info->version, actc_ctx_policy(actc_trainer_ctx(r->t)));
    /* Each rank's policy learnt from its own rows: a checkpoint written by
     * as many ranks gave each its own state back; otherwise every rank
     * continues from rank 0's. */
    if (o->resume_path && dist->size > 1 && actc_ctx_policy_learns(actc_trainer_ctx(r->t)) && !r->rank_states)
        printf("note: %s learns its state on each rank from that rank's rows, and %s holds the states of another "
               "number of ranks (or of one process): every rank continues from rank 0's, so this run follows the "
               "uninterrupted one closely but not bit for bit (a resume on the ranks that saved it is)\n",
               actc_ctx_policy(actc_trainer_ctx(r->t)), o->resume_path);
    fflush(stdout);
}

/* A write to the log failed (a full disk): say so once and stop logging;
 * the training, and its checkpoints, go on. */
static void log_failed(run_state *r)
{
    fprintf(stderr, "warning: --log: %s; no more records are written, training goes on\n", actc_last_error());
    fclose(r->log);
    r->log = NULL;
}

int train_on_step(actc_trainer *t, const actc_progress *p, void *user)
{
    cb_state *c = user;
    const train_opts *o = c->o;
    report_adaptation(actc_trainer_controller(t), c->r->log, p->step - 1, c->pg.tty == 1);
    const double sps = p->seconds > 0 ? (double)p->rows / p->seconds : 0;
    progress_update(&c->pg, (int)p->epoch + 1, o->epochs, p->batch, p->batches, p->loss, p->accuracy, sps);
    if (c->r->log && p->step % (uint64_t)o->log_every == 0 && actc_log_step(c->r->log, p, c->pg.unit, sps) != ACTC_OK)
        log_failed(c->r);
    return o->max_steps && p->step >= o->max_steps;
}

/* Figures of one stage in the epoch's table (gathered by summing rows
 * each stage fills). */
enum { ST_HELD, ST_SCHED, ST_BITS, ST_CONTEXT, ST_MICRO, ST_IDLE, ST_MEM, ST_TOTAL = ST_MEM + ACTC_MEM_NCAT, ST_N };
static const actc_mem_cat stage_cats[] = {ACTC_MEM_PARAM, ACTC_MEM_GRAD, ACTC_MEM_OPTIM, ACTC_MEM_CONTEXT,
                                          ACTC_MEM_ACT, ACTC_MEM_COMM};

/* Every stage's peaks, micro-batches held and idle fraction against the
 * schedule's: one line per stage on rank 0 and a "stages" log record.
 * Collective over the replica's stages.  0, or prints why and returns 1. */
static int report_stages(const train_opts *o, run_state *r)
{
    const int P = o->pipeline, s = actc_pipe_stage(r->pipe), M = o->accum;
    const actc_pipe_schedule ps = !strcmp(o->pipe_schedule, "gpipe") ? ACTC_PIPE_GPIPE : ACTC_PIPE_1F1B;
    double *v = calloc((size_t)P * ST_N, sizeof *v);
    actc_pipe_op *ops = malloc(2 * (size_t)M * sizeof *ops);
    int most = 0, sched = 0;
    for (int k = 0; ops && k < P; k++) {
        int peak = 0;
        actc_pipe_ops(ps, k, P, M, ops, &peak);
        if (peak * r->n_blocks[k] > most) most = peak * r->n_blocks[k];
        if (k == s) sched = peak;
    }
    free(ops);
    if (!v || !sched) {
        free(v);
        return fprintf(stderr, "error: out of memory for the stages' table\n"), 1;
    }
    double *mine = v + (size_t)s * ST_N;
    actc_pipe_stats pst;
    actc_trainer_pipe_stats(r->t, &pst);
    actc_mem_stats ms;
    actc_mem_get_stats(&ms);
    actc_store_stats ss;
    actc_store_get_stats(actc_trainer_ctx(r->t), &ss);
    mine[ST_HELD] = pst.held_peak;
    mine[ST_SCHED] = sched;
    mine[ST_BITS] = actc_ctx_stage_bits(actc_trainer_ctx(r->t), sched * r->n_blocks[s], most);
    mine[ST_CONTEXT] = (double)ss.context_bytes;
    mine[ST_MICRO] = (double)pst.micro_context;
    mine[ST_IDLE] = pst.pass_s > 0 ? 1.0 - pst.compute_s / pst.pass_s : 0;
    for (int c = 0; c < ACTC_MEM_NCAT; c++) mine[ST_MEM + c] = (double)ms.peak[c];
    mine[ST_TOTAL] = (double)ms.peak_total;
    if (actc_pipe_sum(r->pipe, v, P * ST_N) != ACTC_OK) {
        free(v);
        return fail("--pipeline");
    }
    const double theory = actc_pipe_bubble(ps, P, M);
    printf("pipeline stages (replica 0; peaks over the epoch; context: the store's before a backward, against the "
           "micro-batches held x one micro-batch's forward):\n");
    for (int k = 0; k < P; k++) {
        const double *x = v + (size_t)k * ST_N;
        char a[32], b[32], line[512];
        int n = snprintf(line, sizeof line, "  stage %d:", k);
        if (x[ST_BITS] > 0) n += snprintf(line + n, sizeof line - (size_t)n, " %d bits,", (int)x[ST_BITS]);
        n += snprintf(line + n, sizeof line - (size_t)n, " held %d (schedule %d), context %s = %.2f x %s;", (int)x[ST_HELD],
                      (int)x[ST_SCHED], actc_format_bytes((size_t)x[ST_CONTEXT], a, sizeof a),
                      x[ST_MICRO] > 0 ? x[ST_CONTEXT] / x[ST_MICRO] : 0.0,
                      actc_format_bytes((size_t)x[ST_MICRO], b, sizeof b));
        for (size_t c = 0; c < sizeof stage_cats / sizeof *stage_cats && n < (int)sizeof line; c++)
            n += snprintf(line + n, sizeof line - (size_t)n, " %s %s", actc_mem_cat_name(stage_cats[c]),
                          actc_format_bytes((size_t)x[ST_MEM + stage_cats[c]], a, sizeof a));
        if (n < (int)sizeof line)
            snprintf(line + n, sizeof line - (size_t)n, ", total %s; idle %.1f%% (schedule %.1f%%)",
                     actc_format_bytes((size_t)x[ST_TOTAL], a, sizeof a), 100 * x[ST_IDLE], 100 * theory);
        puts(line);
    }
    if (r->log) {
        fprintf(r->log, "{\"event\":\"stages\",\"epoch\":%llu,\"schedule\":\"%s\",\"micro_batches\":%d,\"stages\":[",
                (unsigned long long)actc_trainer_epoch(r->t), o->pipe_schedule, M);
        for (int k = 0; k < P; k++) {
            const double *x = v + (size_t)k * ST_N;
            fprintf(r->log, "%s{\"stage\":%d,\"first_block\":%d,\"blocks\":%d,\"bits\":%d,\"held\":%d,"
                            "\"held_schedule\":%d,\"context\":%.0f,\"micro_context\":%.0f,\"idle\":%.4f,"
                            "\"idle_schedule\":%.4f,\"peak\":{",
                    k ? "," : "", k, r->first_block[k], r->n_blocks[k], (int)x[ST_BITS], (int)x[ST_HELD],
                    (int)x[ST_SCHED], x[ST_CONTEXT], x[ST_MICRO], x[ST_IDLE], theory);
            for (size_t c = 0; c < sizeof stage_cats / sizeof *stage_cats; c++)
                fprintf(r->log, "\"%s\":%.0f,", actc_mem_cat_name(stage_cats[c]), x[ST_MEM + stage_cats[c]]);
            fprintf(r->log, "\"total\":%.0f}}", x[ST_TOTAL]);
        }
        fprintf(r->log, "]}\n");
        fflush(r->log);
    }
    free(v);
    return 0;
}

int train_epoch_report(const train_opts *o, run_state *r, int lm, const actc_epoch_result *er)
{
    actc_eval_result ev = {0}, te = {0};
    double t_eval = now_seconds();
    /* A graph's split may hold no validation or no test node. */
    if (r->eval && actc_trainer_evaluate(r->t, r->eval, &ev) != ACTC_OK) return fail("evaluation");
    if (r->test_src && actc_trainer_evaluate(r->t, r->test_src, &te) != ACTC_OK) return fail("evaluation");
    t_eval = now_seconds() - t_eval;
    const int epoch = (int)actc_trainer_epoch(r->t); /* completed, 1-based */
    const double sps = er->rows ? (double)er->rows / er->seconds : 0;
    if (r->graph_run) {
        char va[64] = "no validation nodes", ta[64] = "no test nodes";
        if (r->eval) snprintf(va, sizeof va, "validation acc %.2f%% (loss %.4f)", 100 * ev.accuracy, ev.loss);
        if (r->test_src) snprintf(ta, sizeof ta, "test acc %.2f%% (loss %.4f)", 100 * te.accuracy, te.loss);
        printf("epoch %d/%d (step %llu): train loss %.4f (acc %.2f%%), %s, %s, %.2f steps/s, %.1f s\n", epoch,
               o->epochs, (unsigned long long)actc_trainer_steps(r->t), er->loss, 100 * er->accuracy, va, ta,
               er->seconds > 0 ? er->steps / er->seconds : 0, er->seconds);
    } else if (lm)
        printf("epoch %d/%d: train loss %.4f (%.3f bpb), validation loss %.4f = %.3f bits per byte (next-byte acc "
               "%.1f%%, %.1f s), %.0f tokens/s, %.1f s\n",
               epoch, o->epochs, er->loss, er->loss / M_LN2, ev.loss, ev.loss / M_LN2, 100 * ev.accuracy, t_eval, sps,
               er->seconds);
    else
        printf("epoch %d/%d: train loss %.4f (acc %.2f%%), test acc %.2f%% (loss %.4f), %.1f samples/s, %.1f s\n", epoch,
               o->epochs, er->loss, 100 * er->accuracy, 100 * ev.accuracy, ev.loss, sps, er->seconds);
    actc_trainer_report_file(r->t, ACTC_REPORT_TEXT, stdout);
    /* Where a step's time went: the trainer times forward, backward and
     * update, the store its codecs (inside forward and backward). */
    const double per = er->steps ? 1e3 / er->steps : 0;
    printf("time per step: forward %.2f ms (codecs %.2f ms of it), backward %.2f ms (codecs %.2f ms of it), update "
           "%.2f ms", per * er->forward_s, per * er->codec_forward_s, per * er->backward_s, per * er->codec_backward_s,
           per * er->update_s);
    /* The controller: GACT's sensitivity passes and bookkeeping (next to
     * nothing under other policies). */
    printf(", controller %.2f ms\n", per * er->measure_s);
    actc_dist_stats ds;
    actc_dist *dp = r->pipe ? actc_pipe_replicas(r->pipe) : r->dist.d; /* whose gradients are all-reduced */
    actc_dist_get_stats(dp, &ds);
    char a[32], b[32], c[32];
    if (dp && ds.steps)
        printf("communication (rank %d of %d, figures per rank; COMM above is its buffers): %s of gradients a step "
               "(dense fp32 %s) in %d bucket(s), %s sent a step in %d bits; waiting after backward %.1f ms a step, "
               "%.1f ms from the first bucket to the last done\n",
               ds.rank, ds.ranks, actc_format_bytes(ds.floats * 4, a, sizeof a),
               actc_format_bytes(ds.fp32_floats * 4, b, sizeof b), ds.buckets,
               actc_format_bytes(ds.bytes_sent, c, sizeof c), ds.grad_comm, 1e3 * ds.total_exposed_s / (double)ds.steps,
               1e3 * ds.total_comm_s / (double)ds.steps);
    fflush(stdout);
    /* Graph runs: validation and test nodes, each when the split has them. */
    const actc_log_epoch_info li = {o->model, o->batch, lm ? r->T : 0, lm || r->graph_run ? "val" : "test",
                                    r->eval ? &ev : NULL, r->test_src ? &te : NULL, dp ? &ds : NULL};
    if (r->log && actc_log_epoch(r->log, r->t, er, &li) != ACTC_OK) log_failed(r);
    return r->pipe ? report_stages(o, r) : 0;
}
