/* Thread-local last-error message and status names. */
#include "core.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char err_buf[1024];
static _Thread_local int err_status;
static _Thread_local bool err_declined; /* opr_last_error_declined */

const char *opr_last_error(void) { return err_buf; }

int opr_error_status(void) { return err_status ? err_status : OPR_ERR_NOMEM; }

void opr_error_clear(void) { err_buf[0] = '\0'; err_status = OPR_OK; err_declined = false; }

bool opr_last_error_declined(void) { return err_declined; }

void opr_error_mark_declined(void) { err_declined = true; }

void opr_error_vset(const char *fmt, va_list ap)
{
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
}

int opr_fail(int status, const char *fmt, ...)
{
    err_status = status;
    err_declined = false; /* a new failure; opr_fail_wrap keeps the flag of the one it wraps */
    va_list ap;
    va_start(ap, fmt);
    opr_error_vset(fmt, ap);
    va_end(ap);
    return status;
}

int opr_fail_wrap(int status, const char *fmt, ...)
{
    err_status = status;
    char prev[sizeof err_buf];
    memcpy(prev, err_buf, sizeof prev);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n + 2 < sizeof err_buf && prev[0]) {
        /* append ": <previous>", cut to what fits */
        size_t room = sizeof err_buf - (size_t)n - 2;
        err_buf[n] = ':';
        err_buf[n + 1] = ' ';
        size_t len = strnlen(prev, room - 1);
        memcpy(err_buf + n + 2, prev, len);
        err_buf[(size_t)n + 2 + len] = '\0';
    }
    return status;
}

const char *opr_status_name(int status)
{
    switch (status) {
    case OPR_OK: return "OPR_OK";
    case OPR_ERR_INVALID: return "OPR_ERR_INVALID";
    case OPR_ERR_NOT_FOUND: return "OPR_ERR_NOT_FOUND";
    case OPR_ERR_NOMEM: return "OPR_ERR_NOMEM";
    case OPR_ERR_BACKEND: return "OPR_ERR_BACKEND";
    case OPR_ERR_PARSE: return "OPR_ERR_PARSE";
    case OPR_ERR_ABI: return "OPR_ERR_ABI";
    case OPR_ERR_UNSUPPORTED: return "OPR_ERR_UNSUPPORTED";
    case OPR_ERR_IO: return "OPR_ERR_IO";
    case OPR_ERR_REFUSED: return "OPR_ERR_REFUSED";
    case OPR_ERR_MISMATCH: return "OPR_ERR_MISMATCH";
    default: return "OPR_ERR_UNKNOWN";
    }
}
