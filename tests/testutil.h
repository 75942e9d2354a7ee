/* Shared helpers of the test programs (cmocka). */
#ifndef ACTC_TESTUTIL_H
#define ACTC_TESTUTIL_H
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "actc.h"
#include "codec/codec.h"

/* Builds an output from inputs with the operators under test. */
typedef actc_tensor *(*tu_forward_fn)(actc_ctx *ctx, actc_tensor **in, void *user);

/* Finite-difference gradient check in fp32 with the `none` policy.
 * The loss is sum(out * R) for a fixed random R.  Every input with
 * requires_grad set is checked: analytic gradient from actc_backward against
 * central differences with step eps.  Returns the worst norm-wise relative
 * error ||ga - gn|| / max(||ga||, ||gn||, 1e-6) over the inputs. */
double tu_gradcheck(tu_forward_fn f, actc_tensor **in, int n, void *user, float eps);
/* Largest tu_gradcheck error tu_check_grad accepts. */
#define TU_GRAD_TOL 1e-3
/* tu_gradcheck under a name: prints "gradcheck WHAT worst rel err E" (WHAT
 * padded to 40 columns), asserts E < TU_GRAD_TOL and keeps the worst E of the
 * program for tu_grad_report. */
void tu_check_grad(const char *what, tu_forward_fn f, actc_tensor **in, int n, void *user, float eps);
/* cmocka group teardown: prints the worst error tu_check_grad saw; 0. */
int tu_grad_report(void **state);
/* sum(x * R) as a scalar loss node, R[i] = actc_rand_uniform(rseed, i) - 0.5
 * (fixed, uniform in [-0.5, 0.5)), summed in double; its backward adds
 * dL * R to x's gradient.  For backward passes on tensors too big for finite
 * differences (tu_gradcheck uses it too). */
actc_tensor *tu_wsum(actc_ctx *ctx, actc_tensor *x, int rseed);

/* Assert the call failed (y == NULL) with ACTC_ERR_INVALID and a message
 * containing needle (if not NULL); clears the error. */
void tu_expect_invalid(actc_tensor *y, const char *needle);
/* Assert that policy spec is refused with ACTC_ERR_INVALID and a message
 * containing needle. */
void tu_expect_bad_policy(const char *spec, const char *needle);
/* Assert that policy spec is accepted with canonical spelling canon, which
 * parses back to itself (checkpoints rely on it); returns a context holding
 * the policy (the caller frees it). */
actc_ctx *tu_expect_policy(const char *spec, const char *canon);
/* A codec's plan and encode of x[0..n) into a fresh buffer, with a guard
 * zone after the planned size checked untouched; returns the payload (the
 * caller frees it), its size in *bytes. */
uint8_t *tu_encode(const actc_codec *c, actc_codec_args *a, const float *x, size_t n, size_t *bytes);
/* Assert that none of the n outputs was recorded (requires_grad 0), that the
 * tape is empty, that the store holds nothing and that its save count is
 * still saves_before (taken before the outputs were made); releases them. */
void tu_expect_nothing_recorded(actc_ctx *ctx, actc_tensor **outs, int n, size_t saves_before);
/* Fill with uniform values in [lo, hi) from a seed. */
void tu_fill_uniform(actc_tensor *t, uint64_t seed, float lo, float hi);
/* Fill with distinct values (a shuffled ramp scaled to [lo,hi]): no ties,
 * so max-pool and ReLU have no kinks within a finite-difference step. */
void tu_fill_distinct(actc_tensor *t, uint64_t seed, float lo, float hi, float min_abs);
/* A tensor created with actc_tensor_new (ACT) and filled uniformly. */
actc_tensor *tu_rand(int ndim, const int *shape, uint64_t seed, float lo, float hi, int requires_grad);
/* Max absolute difference of two same-shaped arrays. */
double tu_max_abs_diff(const float *a, const float *b, size_t n);
/* ||sum / count - exact|| / ||exact|| over n values: how far the mean of
 * count gradients (their sum given) is from the exact gradient. */
double tu_mean_rel_err(const double *sum, int count, const double *exact, size_t n);
/* A malloc'ed copy of n floats (free it). */
float *tu_dup_floats(const float *p, size_t n);
/* Bytes of every memory category live now (actc_mem_stats.current_total):
 * take it when a test starts and compare at its end. */
size_t tu_mem_now(void);
/* Store bytes held right after the forward call that made y; then releases
 * y and drops the tape (actc_ctx_reset). */
size_t tu_stored_after(actc_ctx *ctx, actc_tensor *y);
/* Create a fresh directory /tmp/PREFIX_XXXXXX into buf: 0, or -1 on failure
 * (usable as a cmocka group setup result). */
int tu_make_temp_dir(char *buf, size_t cap, const char *prefix);
/* Remove a directory tree made by tu_make_temp_dir: 0, or -1 on failure. */
int tu_remove_dir(const char *dir);
/* Directory holding the source tree (ACTC_SOURCE_DIR, set by ctest). */
const char *tu_source_dir(void);
#endif
