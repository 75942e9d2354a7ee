/* Process-wide library state: the version and actc_shutdown.
 *
 * It lives in the top layer because it reaches every layer below that keeps
 * something across calls.  The library registers no exit handler of its own
 * (code run at the host program's exit, in an order the library does not
 * control, is not a library's to add): a program that wants leak checkers
 * to see a clean exit calls actc_shutdown itself. */
#include "actc.h"
#include "../core/core.h"
#include "../ops/ops.h"

void actc_shutdown(void)
{
    /* Both releases leave their layer usable: the oneDNN engine, stream and
     * primitives, and the allocator's cached blocks, are made again on
     * demand, so calling this twice, or using the library afterwards, is
     * fine. */
    actc__conv_release();
    actc__mem_release_cache();
}

const char *actc_version(void) { return ACTC_VERSION; }
