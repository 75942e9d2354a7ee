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
#include <stdlib.h>

typedef struct {
    double prio;
    int item;
} heap_ent;

static double inv_levels_sq(int b)
{
    double L = (double)((1u << b) - 1u);
    return 1.0 / (L * L);
}

/* Variance added per unit of cost by moving item i from b to b-1 bits. */
static double move_cost(const double *w, const double *c, int i, int b)
{
    return w[i] * (inv_levels_sq(b - 1) - inv_levels_sq(b)) / (c ? c[i] : 1.0);
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

actc_status actc__alloc_bits_greedy(int n, const double *w, const double *c, int lo, int hi, double budget,
                                    uint8_t *bits)
{
    if (lo < 1 || hi > 8 || lo > hi)
        return actc_set_error(ACTC_ERR_INVALID, "bit allocation between %d and %d bits (1 <= lo <= hi <= 8)", lo, hi);
    double used = 0;
    for (int i = 0; i < n; i++) {
        bits[i] = (uint8_t)hi;
        used += (c ? c[i] : 1.0) * hi;
    }
    if (used <= budget || lo == hi || n == 0) return ACTC_OK;
    heap_ent *h = malloc((size_t)n * sizeof *h);
    if (!h) return actc_set_error(ACTC_ERR_OOM, "out of memory allocating bits for %d items", n);
    for (int i = 0; i < n; i++) h[i] = (heap_ent){move_cost(w, c, i, hi), i};
    for (int i = n / 2 - 1; i >= 0; i--) sift_down(h, n, i);
    int live = n;
    /* The small tolerance keeps a budget that is met exactly (e.g. 2.0 bits
     * times n) from costing one more move through rounding. */
    while (live > 0 && used > budget * (1 + 1e-12)) {
        int i = h[0].item;
        bits[i]--;
        used -= c ? c[i] : 1.0;
        if (bits[i] > lo) {
            h[0].prio = move_cost(w, c, i, bits[i]);
        } else {
            h[0] = h[--live];
        }
        sift_down(h, live, 0);
    }
    free(h);
    return ACTC_OK;
}
