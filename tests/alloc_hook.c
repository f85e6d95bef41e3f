/* The failing allocator of alloc_hook.h. */
#define _GNU_SOURCE /* dladdr */
#include "alloc_hook.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

/* The build hides symbols by default; these must be seen by every library. */
#define INTERPOSED __attribute__((visibility("default")))

static _Thread_local long countdown = -1; /* allocations left before the failing one; -1: off */
static _Thread_local bool fired;
static _Thread_local bool fired_in_libyaml;
static atomic_long live_blocks;
static _Thread_local bool recording;
static _Thread_local bool *record; /* __libc_realloc'd: never counted, never failed */
static _Thread_local long record_n, record_cap;
static _Thread_local bool record_lost;

void alloc_hook_arm(long n) { fired = fired_in_libyaml = false; countdown = n; }
void alloc_hook_disarm(void) { countdown = -1; }
bool alloc_hook_fired(void) { return fired; }
bool alloc_hook_fired_in_libyaml(void) { return fired_in_libyaml; }
long alloc_hook_live_blocks(void) { return atomic_load(&live_blocks); }

static bool called_from(void *caller, const char *library)
{
    Dl_info info;
    return dladdr(caller, &info) && info.dli_fname && strstr(info.dli_fname, library);
}

void alloc_hook_record_start(void)
{
    record_n = 0;
    record_lost = false;
    recording = true;
}

long alloc_hook_record_stop(bool **from_libyaml)
{
    recording = false;
    if (record_lost) {
        __libc_free(record);
        record = NULL;
        record_cap = 0;
        *from_libyaml = NULL;
        return -1;
    }
    *from_libyaml = record;
    record = NULL;
    record_cap = 0;
    return record_n;
}

void alloc_hook_record_free(bool *from_libyaml) { __libc_free(from_libyaml); }

static void note(void *caller)
{
    recording = false; /* in case dladdr allocates */
    if (record_n == record_cap) {
        long cap = record_cap ? 2 * record_cap : 4096;
        bool *r = __libc_realloc(record, (size_t)cap * sizeof *r);
        if (!r) { record_lost = true; recording = true; return; }
        record = r;
        record_cap = cap;
    }
    record[record_n++] = called_from(caller, "libyaml");
    recording = true;
}

/* OpenMP's allocations count towards n but are never the one failed: the next
 * allocation of any other library is (every point is still reached; dladdr, slow, runs
 * only for the allocation about to fail). */
static bool fail_now_from(void *caller)
{
    if (recording && !record_lost) note(caller);
    if (countdown < 0) return false;
    if (countdown > 0) { countdown--; return false; }
    if (called_from(caller, "libgomp")) return false;
    countdown = -1;
    fired = true;
    fired_in_libyaml = called_from(caller, "libyaml");
    errno = ENOMEM; /* as the C allocator does; opendir and others pass it on */
    return true;
}

#define fail_now() fail_now_from(__builtin_return_address(0))

static void *counted(void *p)
{
    if (p) atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    return p;
}

INTERPOSED void *malloc(size_t n) { return fail_now() ? NULL : counted(__libc_malloc(n)); }
INTERPOSED void *calloc(size_t a, size_t b) { return fail_now() ? NULL : counted(__libc_calloc(a, b)); }
INTERPOSED void *realloc(void *p, size_t n)
{
    if (!p) return malloc(n);
    if (fail_now()) return NULL;
    return __libc_realloc(p, n); /* the block count is unchanged either way */
}
INTERPOSED void *aligned_alloc(size_t align, size_t n) { return fail_now() ? NULL : counted(__libc_memalign(align, n)); }
INTERPOSED void *memalign(size_t align, size_t n) { return fail_now() ? NULL : counted(__libc_memalign(align, n)); }
INTERPOSED int posix_memalign(void **out, size_t align, size_t n)
{
    if (fail_now()) return ENOMEM;
    void *p = counted(__libc_memalign(align, n));
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
/* glibc's own strdup and strndup allocate without passing through malloc above; the
 * allocation is their caller's (libyaml's yaml_strdup calls strdup) */
static void *malloc_from(size_t n, void *caller) { return fail_now_from(caller) ? NULL : counted(__libc_malloc(n)); }
INTERPOSED char *strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc_from(n, __builtin_return_address(0));
    return d ? memcpy(d, s, n) : NULL;
}
INTERPOSED char *strndup(const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    char *d = malloc_from(n + 1, __builtin_return_address(0));
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}
INTERPOSED void free(void *p)
{
    if (p) atomic_fetch_sub_explicit(&live_blocks, 1, memory_order_relaxed);
    __libc_free(p);
}
