/* ActNN's greedy bit allocation (paper section 4.3).
 *
 * Minimise sum_i w_i / (2^b_i - 1)^2 subject to sum_i c_i b_i <= budget.
 * Every item starts at `hi` bits; each move lowers one item by one bit,
 * choosing the move with the smallest variance increase per unit of cost
 * saved, until the budget holds (or everything is at `lo`).  A binary
 * min-heap keyed by that ratio makes it O(M log n) for M moves.  (The
 * paper's text picks the smallest variance increase; dividing by the cost,
 * D^(l) bits per move in the per-layer problem, is what ActNN's code does
 * and what the budget in bits calls for.) */
#include "policy.h"
#include <math.h>
#include <stdlib.h>

typedef struct {
    double prio;
    int item;
} heap_ent;

/* S(b) = (2^b - 1)^-2, the variance factor of b-bit stochastic rounding. */
double actc__quant_var_factor(int b)
{
    double L = ldexp(1.0, b) - 1.0;
    return 1.0 / (L * L);
}

/* Variance added per unit of cost by moving item i from ladder level k to k+1. */
static double move_cost(const double *w, const double *c, const int *ladder, int i, int k)
{
    return w[i] * (actc__quant_var_factor(ladder[k + 1]) - actc__quant_var_factor(ladder[k])) /
           ((c ? c[i] : 1.0) * (double)(ladder[k] - ladder[k + 1]));
}

static void sift_down(heap_ent *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l].prio < h[m].prio) m = l;
        if (r < n && h[r].prio < h[m].prio) m = r;
        if (m == i) return;
        heap_ent t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

actc_status actc__alloc_bits_ladder(int n, const double *w, const double *c, const int *ladder, int levels,
                                    double budget, uint8_t *bits)
{
    for (int k = 0; k < levels; k++)
        if (ladder[k] < 1 || ladder[k] > 32 || (k && ladder[k] >= ladder[k - 1]))
            return actc_set_error(ACTC_ERR_INVALID, "bit ladder must fall strictly, within 1..32 bits");
    if (levels < 1) return actc_set_error(ACTC_ERR_INVALID, "empty bit ladder");
    double used = 0;
    for (int i = 0; i < n; i++) {
        bits[i] = (uint8_t)ladder[0];
        used += (c ? c[i] : 1.0) * ladder[0];
    }
    if (used <= budget || levels == 1 || n == 0) return ACTC_OK;
    heap_ent *h = malloc((size_t)n * sizeof *h);
    int *level = calloc((size_t)n, sizeof *level);
    if (!h || !level) {
        free(h);
        free(level);
        return actc_set_error(ACTC_ERR_OOM, "out of memory allocating bits for %d items", n);
    }
    for (int i = 0; i < n; i++) h[i] = (heap_ent){move_cost(w, c, ladder, i, 0), i};
    for (int i = n / 2 - 1; i >= 0; i--) sift_down(h, n, i);
    int live = n;
    /* The small tolerance keeps a budget that is met exactly (e.g. 2.0 bits
     * times n) from costing one more move through rounding. */
    while (live > 0 && used > budget * (1 + 1e-12)) {
        int i = h[0].item, k = level[i]++;
        bits[i] = (uint8_t)ladder[k + 1];
        used -= (c ? c[i] : 1.0) * (ladder[k] - ladder[k + 1]);
        if (k + 2 < levels) {
            h[0].prio = move_cost(w, c, ladder, i, k + 1);
        } else {
            h[0] = h[--live];
        }
        sift_down(h, live, 0);
    }
    free(h);
    free(level);
    return ACTC_OK;
}

actc_status actc__alloc_bits_greedy(int n, const double *w, const double *c, int lo, int hi, double budget,
                                    uint8_t *bits)
{
    if (lo < 1 || hi > 8 || lo > hi)
        return actc_set_error(ACTC_ERR_INVALID, "bit allocation between %d and %d bits (1 <= lo <= hi <= 8)", lo, hi);
    int ladder[8];
    for (int k = 0; k <= hi - lo; k++) ladder[k] = hi - k;
    return actc__alloc_bits_ladder(n, w, c, ladder, hi - lo + 1, budget, bits);
}

/* Local search after the ladder greedy.  The greedy stops at the first
 * allocation within budget, and a move of 24 or 4 bits can overshoot: the
 * slack it leaves, or a better trade between two items, is then found by
 * trying every change of one item's rung and every change of two items'
 * rungs that keeps the budget, taking the best improvement until none is
 * left.  O(n^2 levels^2) per round; a few rounds for GACT's tens to hundreds
 * of tensors. */
void actc__alloc_refine(int n, const double *w, const double *c, const int *ladder, int levels, double budget,
                        uint8_t *bits)
{
    double used = 0;
    for (int i = 0; i < n; i++) used += (c ? c[i] : 1.0) * bits[i];
    const double limit = budget * (1 + 1e-12);
    for (int round = 0; round < 4 * n + 8; round++) {
        double best_gain = 0, best_used = used;
        int bi = -1, bj = -1, bki = 0, bkj = 0;
        for (int i = 0; i < n; i++) {
            const double ci = c ? c[i] : 1.0, vi = w[i] * actc__quant_var_factor(bits[i]);
            for (int ki = 0; ki < levels; ki++) {
                if (ladder[ki] == bits[i]) continue;
                const double ui = used + ci * (ladder[ki] - bits[i]);
                const double gi = vi - w[i] * actc__quant_var_factor(ladder[ki]);
                if (ui <= limit && gi > best_gain * (1 + 1e-12)) {
                    best_gain = gi, best_used = ui, bi = i, bki = ki, bj = -1;
                }
                for (int j = i + 1; j < n; j++) {
                    const double cj = c ? c[j] : 1.0, vj = w[j] * actc__quant_var_factor(bits[j]);
                    for (int kj = 0; kj < levels; kj++) {
                        if (ladder[kj] == bits[j]) continue;
                        const double u = ui + cj * (ladder[kj] - bits[j]);
                        const double g = gi + vj - w[j] * actc__quant_var_factor(ladder[kj]);
                        if (u <= limit && g > best_gain * (1 + 1e-12)) {
                            best_gain = g, best_used = u, bi = i, bki = ki, bj = j, bkj = kj;
                        }
                    }
                }
            }
        }
        if (bi < 0) return;
        bits[bi] = (uint8_t)ladder[bki];
        if (bj >= 0) bits[bj] = (uint8_t)ladder[bkj];
        used = best_used;
    }
}
