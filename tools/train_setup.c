/* actc train's set-up: the data (images, text or a graph), the model
 * (built, or a checkpoint's), the sources of training and evaluation
 * batches, the trainer (resumed when asked), its place among the ranks
 * under mpirun, the recipe its checkpoints keep, and the log; and the one
 * place that frees all of it. */
#include "train_cmd.h"
#include <string.h>

void train_free(run_state *r)
{
    actc_source_free(r->src);
    actc_source_free(r->eval);
    actc_source_free(r->test_src);
    actc_source_free(r->graph_src);
    actc_graph_free(r->graph);
    actc_dist_detach(r->dist.d); /* the handle outlives the trainer */
    actc_pipe_free(r->pipe);     /* and the stage's replicas' handle, detached with it */
    r->pipe = NULL;
    actc_trainer_free(r->t);
    actc_model_free(r->model);
    if (r->have_corpus) actc_text_free(&r->corpus);
    if (r->have_train) actc_image_dataset_free(&r->train);
    if (r->have_test) actc_image_dataset_free(&r->test);
    if (r->log) fclose(r->log);
    actc_mem_set_budget(0);
}

/* The graph's training batch, every step of an epoch. */
static actc_status repeat_graph(void *user, uint64_t epoch, uint64_t index, uint64_t step, actc_batch *b)
{
    (void)epoch;
    (void)index;
    return actc_source_get(user, 0, 0, step, b);
}

int train_setup(run_state *r, train_opts *o, int lm)
{
    actc_model_opts mo = actc_model_default_opts();
    const int gr = graph_spec(o->data_spec);
    if (gr) {
        if (graph_open(o->data_spec, o->split, &r->graph)) return 1;
        const actc_graph *g = r->graph;
        int c[3];
        actc_graph_split_counts(g, c);
        printf("graph %s: %d nodes, %lld edges (mean degree %.1f), %d features, %d classes; split %d train, %d "
               "validation, %d test\n",
               g->source, g->n, (long long)g->n_edges, 2.0 * (double)g->n_edges / g->n, g->n_features, g->n_classes,
               c[0], c[1], c[2]);
        mo.in_channels = g->n_features;
        mo.in_h = mo.in_w = 1;
        mo.num_classes = g->n_classes;
        mo.n_layers = o->layers;
        mo.n_heads = o->heads;
    } else if (lm) {
        if (text_open(o->data_spec, &r->corpus)) return 1;
        r->have_corpus = 1;
        mo.n_layers = o->layers;
        mo.n_heads = o->heads;
        mo.context = o->context;
        mo.vocab = o->vocab;
        mo.attention = !strcmp(o->attention, "naive") ? ACTC_ATTN_NAIVE : ACTC_ATTN_FLASH;
    } else {
        if (data_load(&o->data, &r->train, &r->test)) return 1;
        r->have_train = r->have_test = 1;
        if (r->test.c != r->train.c || r->test.h != r->train.h || r->test.w != r->train.w) {
            fprintf(stderr, "error: test images are %dx%dx%d but training images %dx%dx%d\n", r->test.c, r->test.h,
                    r->test.w, r->train.c, r->train.h, r->train.w);
            return 1;
        }
        mo.in_channels = r->train.c;
        mo.in_h = r->train.h;
        mo.in_w = r->train.w;
        mo.num_classes = r->train.num_classes > r->test.num_classes ? r->train.num_classes : r->test.num_classes;
    }
    mo.width = o->width;
    mo.dropout = o->dropout;
    mo.seed = o->seed;
    if (o->pipeline > 1) {
        /* This stage's part of the model: the checkpoint's shape when one
         * is given (its tensors load by name, below and in the trainer). */
        const char *ck = o->resume_path ? o->resume_path : o->init_path;
        actc_ckpt_info info;
        if (ck && actc_checkpoint_info(ck, &info) != ACTC_OK) return fail(o->resume_path ? "--resume" : "--init");
        if (ck) mo = info.model_opts;
        actc_dist_set_timeout(r->dist.d, o->comm_timeout); /* the stages' handles take it */
        if (actc_pipe_new(r->dist.d, o->pipeline, &r->pipe) != ACTC_OK) return fail("--pipeline");
        if (actc_pipe_layout(o->model, &mo, o->pipeline, r->first_block, r->n_blocks) != ACTC_OK)
            return fail("--pipeline");
        const int stage = actc_pipe_stage(r->pipe);
        mo.first_block = r->first_block[stage];
        mo.n_blocks = r->n_blocks[stage];
        if (actc_model_create(o->model, &mo, &r->model) != ACTC_OK) return fail("--model");
        if (o->init_path && actc_checkpoint_load(o->init_path, r->model, NULL, NULL) != ACTC_OK) return fail("--init");
    } else if (o->resume_path || o->init_path) {
        const char *path = o->resume_path ? o->resume_path : o->init_path;
        const char *flag = o->resume_path ? "--resume" : "--init";
        if (actc_checkpoint_model(path, &r->model) != ACTC_OK) return fail(flag);
        const actc_model_opts *c = actc_model_get_opts(r->model);
        if (!lm && (c->in_channels * c->in_h * c->in_w != mo.in_channels * mo.in_h * mo.in_w || c->in_h != mo.in_h || c->in_w != mo.in_w ||
                    c->num_classes < mo.num_classes)) {
            if (gr) /* a graph model's input is a node's feature vector (held as C x 1 x 1) */
                fprintf(stderr, "error: %s %s: its model takes %d features per node in %d classes; the graph has %d "
                                "features in %d\n", flag, path, c->in_channels, c->num_classes, mo.in_channels,
                        mo.num_classes);
            else
                fprintf(stderr, "error: %s %s: its model takes %dx%dx%d images in %d classes; the data has %dx%dx%d "
                                "images in %d\n", flag, path, c->in_channels, c->in_h, c->in_w, c->num_classes,
                        mo.in_channels, mo.in_h, mo.in_w, mo.num_classes);
            return 1;
        }
    } else if (actc_model_create(o->model, &mo, &r->model) != ACTC_OK) {
        return fail("--model");
    }
    int steps;
    actc_status s;
    if (gr) {
        /* An epoch is --epoch-steps passes over the whole graph. */
        s = actc_source_graph(r->graph, ACTC_SPLIT_TRAIN, &r->graph_src);
        if (s == ACTC_OK) s = actc_source_custom(repeat_graph, r->graph_src, o->epoch_steps, &r->src);
        /* A split without validation or test nodes is reported as such. */
        int c[3];
        actc_graph_split_counts(r->graph, c);
        if (s == ACTC_OK && c[1]) s = actc_source_graph(r->graph, ACTC_SPLIT_VAL, &r->eval);
        if (s == ACTC_OK && c[2]) s = actc_source_graph(r->graph, ACTC_SPLIT_TEST, &r->test_src);
        if (s != ACTC_OK) return fail("--data");
        r->graph_run = 1;
        steps = o->epoch_steps;
    } else if (lm) {
        const int context = actc_model_get_opts(r->model)->context, T = r->T = o->seq ? o->seq : context;
        if (T > context) {
            fprintf(stderr, "error: --seq %d is over the context of model %s (%d positions); pass --context to build a "
                            "longer one\n", T, o->model, context);
            return 1;
        }
        s = actc_source_text(&r->corpus, o->batch, T, o->seed, o->epoch_steps, &r->src);
        if (s == ACTC_OK) s = actc_source_text_eval(&r->corpus, T, o->eval_tokens, o->eval_batch, &r->eval);
        if (s != ACTC_OK) return fail("--data");
        steps = o->epoch_steps;
    } else {
        actc_loader_opts lo = {FMNIST_MEAN, FMNIST_STD, o->augment ? 2 : 0, o->augment, 1, o->seed};
        actc_loader_opts te = {FMNIST_MEAN, FMNIST_STD, 0, 0, 0, 0};
        if (actc_source_images(&r->train, o->batch, 1, &lo, &r->src) != ACTC_OK) return fail("--batch");
        if (actc_source_images(&r->test, o->eval_batch, 0, &te, &r->eval) != ACTC_OK) return fail("--eval-batch");
        steps = actc_source_batches(r->src);
    }
    actc_trainer_opts to;
    train_trainer_opts(o, steps, &to); /* checked already */
    if (actc_trainer_new(r->model, &to, &r->t) != ACTC_OK) return fail("trainer");
    if (o->resume_path && actc_trainer_load(r->t, o->resume_path) != ACTC_OK) return fail("--resume");
    if (r->dist.d) {
        /* Every host's copy of the checkpoint must be the same file. */
        const char *ck = o->resume_path ? o->resume_path : o->init_path;
        if (ck && cli_dist_same_file(&r->dist, ck, o->resume_path ? "--resume" : "--init")) return 1;
        actc_dist_opts dop = {o->grad_comm, o->bucket};
        actc_dist_set_timeout(r->dist.d, o->comm_timeout);
        /* Data parallelism among the ranks, or among this stage's replicas. */
        actc_dist *dp = r->pipe ? actc_pipe_replicas(r->pipe) : r->dist.d;
        if (dp) actc_dist_set_timeout(dp, o->comm_timeout);
        if (dp && actc_dist_attach(dp, r->t, &dop) != ACTC_OK) return fail("data parallel");
        const actc_pipe_schedule ps = !strcmp(o->pipe_schedule, "gpipe") ? ACTC_PIPE_GPIPE : ACTC_PIPE_1F1B;
        if (r->pipe && actc_pipe_attach(r->pipe, r->t, ps) != ACTC_OK) return fail("--pipeline");
        /* Each rank's own learnt policy state, if the file holds them. */
        if (o->resume_path && (r->pipe ? actc_pipe_resume(r->pipe, o->resume_path, &r->rank_states)
                                       : actc_dist_resume(r->dist.d, o->resume_path, &r->rank_states)) != ACTC_OK)
            return fail("--resume");
    }
    /* Rank 0 writes the checkpoints (the others send it their policy
     * states: actc_dist_save) and the log. */
    if (r->dist.rank > 0) o->log_path = NULL;
    if (o->save_path && r->dist.rank == 0) {
        /* The run's own recipe goes with the trainer into its checkpoints
         * (it fits: train_check_flags).  The note of an older checkpoint,
         * that recipe as flags, is not carried on.  Find out now, not after
         * the first epoch, if the run cannot be saved. */
        actc_run_recipe rec;
        train_run_recipe(o, &rec);
        if (actc_trainer_set_recipe(r->t, &rec) != ACTC_OK || actc_trainer_set_note(r->t, NULL) != ACTC_OK ||
            actc_checkpoint_probe(o->save_path) != ACTC_OK)
            return fail("--save");
    }
    if (o->log_path && !(r->log = fopen(o->log_path, "a"))) {
        fprintf(stderr, "error: --log: cannot open %s for appending\n", o->log_path);
        return 1;
    }
    return 0;
}
