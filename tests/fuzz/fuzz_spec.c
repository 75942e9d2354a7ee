/* Fuzz target: the string parsers every command and embedder feeds with
 * user input: compression policy specs, byte sizes, strict numbers and
 * learning-rate schedules.  Each must accept or refuse with a message, and
 * an accepted value must satisfy the parser's own contract. */
#include "fuzz_util.h"
#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    char s[256];
    if (n >= sizeof s) return 0;
    memcpy(s, data, n);
    s[n] = '\0';
    const size_t live = fuzz_live();
    actc_ctx *ctx = actc_ctx_new();
    if (!ctx) abort();
    if (actc_ctx_set_policy(ctx, s) == ACTC_OK) {
        /* The canonical spelling is a spec of the same policy. */
        char canon[ACTC_POLICY_MAX];
        snprintf(canon, sizeof canon, "%s", actc_ctx_policy(ctx));
        if (actc_ctx_set_policy(ctx, canon) != ACTC_OK || strcmp(actc_ctx_policy(ctx), canon)) abort();
    } else if (!actc_last_error()[0]) {
        abort(); /* refused without saying why */
    }
    actc_ctx_free(ctx);
    size_t bytes;
    if (actc_parse_bytes(s, &bytes) != ACTC_OK && !actc_last_error()[0]) abort();
    long long iv;
    if (actc_parse_int(s, -1000, 1000, &iv) == ACTC_OK && (iv < -1000 || iv > 1000)) abort();
    double dv;
    if (actc_parse_number(s, &dv) == ACTC_OK && !isfinite(dv)) abort();
    actc_lr_schedule sched;
    memset(&sched, 0, sizeof sched);
    if (actc_lr_parse(s, &sched) == ACTC_OK) {
        sched.base_lr = 0.1f;
        sched.total_steps = 100;
        if (actc_lr_check(&sched) == ACTC_OK)
            for (uint64_t step = 0; step < 200; step += 7)
                if (!(actc_lr_at(&sched, step) <= 0.1f + 1e-6f)) abort(); /* a checked schedule never rises */
    }
    fuzz_check_balanced(live);
    return 0;
}
