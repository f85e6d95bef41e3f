/* The registry's log of load errors. Loaders append while other threads may read it,
 * and appending moves the log (realloc): opr_registry_errors therefore hands out a
 * copy, made under the log's lock into a buffer of the calling thread, never the log
 * itself. The buffer is freed when its thread exits. */
#include "registry.h"

#include <stdlib.h>
#include <string.h>

void registry_note_error(opr_ctx *ctx, const char *msg)
{
    opr_registry *r = ctx->reg;
    size_t n = strlen(msg);
    pthread_mutex_lock(&r->errors_lock);
    char *e = realloc(r->errors, r->errors_len + n + 2);
    if (e) {
        memcpy(e + r->errors_len, msg, n);
        e[r->errors_len + n] = '\n';
        e[r->errors_len + n + 1] = '\0';
        r->errors = e;
        r->errors_len += n + 1;
    }
    pthread_mutex_unlock(&r->errors_lock);
}

static pthread_key_t copy_key;
static pthread_once_t copy_key_once = PTHREAD_ONCE_INIT;
static bool copy_key_ok;
static _Thread_local struct { char *text; size_t cap; } copy;

static void make_copy_key(void) { copy_key_ok = !pthread_key_create(&copy_key, free); }

/* Room for n bytes in this thread's copy; false when out of memory. */
static bool reserve(size_t n)
{
    if (n <= copy.cap) return true;
    char *grown = realloc(copy.text, n);
    if (!grown) return false;
    copy.text = grown;
    copy.cap = n;
    pthread_once(&copy_key_once, make_copy_key);
    if (copy_key_ok) pthread_setspecific(copy_key, grown); /* its destructor frees it at thread exit */
    return true;
}

const char *opr_registry_errors(const opr_ctx *ctx)
{
    if (!ctx || !ctx->reg) return "";
    opr_registry *r = ctx->reg;
    const char *out = "";
    pthread_mutex_lock(&r->errors_lock);
    if (r->errors_len && reserve(r->errors_len + 1)) {
        memcpy(copy.text, r->errors, r->errors_len + 1);
        out = copy.text;
    } else if (r->errors_len) {
        opr_fail(OPR_ERR_NOMEM, "opr_registry_errors: out of memory copying %zu bytes", r->errors_len);
    }
    pthread_mutex_unlock(&r->errors_lock);
    return out;
}
