/* The application's log callback (opr_log_set). Messages come from plugins (through
 * host->log) and from the library; without a callback, warnings and errors go to
 * stderr. The callback and its data change together, under a lock, so a message is
 * never delivered to one callback with the other's data. */
#include "core.h"

#include <stdio.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static opr_log_fn log_fn;
static void *log_user_data;

void opr_log_set(opr_log_fn fn, void *user_data)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_user_data = user_data;
    pthread_mutex_unlock(&log_lock);
}

void opr_log_vemit(opr_log_level level, const char *source, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    pthread_mutex_lock(&log_lock);
    opr_log_fn fn = log_fn;
    void *ud = log_user_data;
    pthread_mutex_unlock(&log_lock);
    if (fn) fn(level, source ? source : "opreg", msg, ud);
    else if (level >= OPR_LOG_WARN) fprintf(stderr, "opreg[%s]: %s\n", source ? source : "opreg", msg);
}

void opr_log_emit(opr_log_level level, const char *source, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    opr_log_vemit(level, source, fmt, ap);
    va_end(ap);
}
