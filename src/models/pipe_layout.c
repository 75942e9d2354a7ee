/* The split of a transformer into pipeline stages: contiguous runs of
 * blocks, the embedding on the first, the final norm and head on the last,
 * balanced so that the largest stage holds as few parameters as it can. */
#include "model.h"
#include <stdlib.h>
#include <string.h>

/* The parameters of a stage holding blocks [a, b) of L (w as
 * actc__model_count gives them). */
static double stage_params(const size_t *w, int L, int a, int b)
{
    double c = a == 0 ? (double)w[0] : 0.0;
    for (int l = a; l < b; l++) c += (double)w[1 + l];
    return b == L ? c + (double)w[L + 1] : c;
}

actc_status actc_pipe_layout(const char *name, const actc_model_opts *o, int stages, int *first_block, int *n_blocks)
{
    if (!name || !first_block || !n_blocks || stages < 1)
        return actc_set_error(ACTC_ERR_INVALID, "actc_pipe_layout: NULL argument or %d stages", stages);
    if (!actc_model_name_takes_tokens(name))
        return actc_set_error(ACTC_ERR_INVALID, "pipeline stages split a transformer (gpt, llama and their presets), "
                                                "not model %s", name);
    actc_model_opts whole = o ? *o : actc_model_default_opts();
    whole.first_block = whole.n_blocks = 0;
    actc_model *m; /* the shape only: no parameter is allocated */
    actc_status s = actc__model_count(name, &whole, &m);
    if (s != ACTC_OK) return s;
    const int L = m->opts.n_layers;
    if (stages > L) {
        actc_model_free(m);
        return actc_set_error(ACTC_ERR_INVALID, "%d pipeline stages for the %d blocks of %s: a stage holds at least "
                                                "one block", stages, L, name);
    }
    /* cost[j][b]: the least largest stage over j + 1 stages holding blocks
     * [0, b); from[j][b] where the last of them starts. */
    size_t *w = m->unit_sizes;
    m->unit_sizes = NULL;
    double *cost = malloc((size_t)stages * ((size_t)L + 1) * sizeof *cost);
    int *from = malloc((size_t)stages * ((size_t)L + 1) * sizeof *from);
    if (!w || !cost || !from) {
        free(w);
        free(cost);
        free(from);
        actc_model_free(m);
        return actc_set_error(ACTC_ERR_OOM, "out of memory laying out %d stages", stages);
    }
    actc_model_free(m);
#define AT(j, b) ((size_t)(j) * ((size_t)L + 1) + (size_t)(b))
    for (int j = 0; j < stages; j++)
        for (int b = 0; b <= L; b++) {
            cost[AT(j, b)] = -1.0;
            from[AT(j, b)] = -1;
            if (b < j + 1) continue; /* a block per stage at least */
            if (j == 0) {
                cost[AT(0, b)] = stage_params(w, L, 0, b);
                from[AT(0, b)] = 0;
                continue;
            }
            for (int a = j; a < b; a++) {
                const double prev = cost[AT(j - 1, a)], here = stage_params(w, L, a, b);
                const double c = prev > here ? prev : here;
                if (prev >= 0 && (from[AT(j, b)] < 0 || c < cost[AT(j, b)])) {
                    cost[AT(j, b)] = c;
                    from[AT(j, b)] = a;
                }
            }
        }
    for (int j = stages - 1, b = L; j >= 0; j--) {
        first_block[j] = from[AT(j, b)];
        n_blocks[j] = b - first_block[j];
        b = first_block[j];
    }
#undef AT
    free(w);
    free(cost);
    free(from);
    return ACTC_OK;
}
