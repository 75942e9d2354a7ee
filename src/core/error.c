/* Error reporting: one message per thread, set by actc_set_error. */
#include "actc.h"
#include <stdarg.h>
#include <stdio.h>

static _Thread_local char g_msg[4096]; /* room for the policy list in a bad-spec message */
static _Thread_local actc_status g_status = ACTC_OK;

const char *actc_last_error(void) { return g_msg; }
actc_status actc_last_status(void) { return g_status; }

void actc_clear_error(void)
{
    g_msg[0] = '\0';
    g_status = ACTC_OK;
}

actc_status actc_set_error(actc_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    g_status = s;
    return s;
}

const char *actc_status_name(actc_status s)
{
    switch (s) {
    case ACTC_OK: return "ACTC_OK";
    case ACTC_ERR_INVALID: return "ACTC_ERR_INVALID";
    case ACTC_ERR_OOM: return "ACTC_ERR_OOM";
    case ACTC_ERR_IO: return "ACTC_ERR_IO";
    case ACTC_ERR_FORMAT: return "ACTC_ERR_FORMAT";
    case ACTC_ERR_NUMERIC: return "ACTC_ERR_NUMERIC";
    case ACTC_ERR_STATE: return "ACTC_ERR_STATE";
    case ACTC_ERR_COMM: return "ACTC_ERR_COMM";
    case ACTC_ERR_DEVICE: return "ACTC_ERR_DEVICE";
    }
    return "ACTC_ERR_UNKNOWN";
}
