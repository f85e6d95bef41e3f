/* A malloc counter preloaded (LD_PRELOAD) into the PyTorch side of a benchmark, so that
 * PyTorch's peak host memory can be compared with opreg's opr_memory_stats on the CPU,
 * where torch has no allocator statistics. Every allocation function of the C library
 * is wrapped; the bytes counted are malloc_usable_size's (what the block really holds).
 * Python reads the figures through ctypes:
 *
 *   hook = ctypes.CDLL(None); hook.memhook_reset_peak(); ...; hook.memhook_peak()
 *
 * The wrappers call glibc's own entry points (__libc_malloc, ...), not dlsym's
 * RTLD_NEXT lookup, which itself allocates. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The project builds with hidden visibility: what the process must see is exported. */
#define EXPORT __attribute__((visibility("default")))

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static _Atomic int64_t current, peak;

static void counted(void *p)
{
    if (!p) return;
    int64_t now = atomic_fetch_add_explicit(&current, (int64_t)malloc_usable_size(p), memory_order_relaxed) +
                  (int64_t)malloc_usable_size(p);
    int64_t seen = atomic_load_explicit(&peak, memory_order_relaxed);
    while (now > seen && !atomic_compare_exchange_weak_explicit(&peak, &seen, now, memory_order_relaxed,
                                                                memory_order_relaxed)) {
    }
}

static void uncounted(void *p)
{
    if (p) atomic_fetch_sub_explicit(&current, (int64_t)malloc_usable_size(p), memory_order_relaxed);
}

EXPORT void *malloc(size_t n)
{
    void *p = __libc_malloc(n);
    counted(p);
    return p;
}

EXPORT void *calloc(size_t n, size_t size)
{
    void *p = __libc_calloc(n, size);
    counted(p);
    return p;
}

EXPORT void *realloc(void *old, size_t n)
{
    size_t was = old ? malloc_usable_size(old) : 0;
    void *p = __libc_realloc(old, n);
    if (!p && n) return NULL; /* old is untouched */
    atomic_fetch_sub_explicit(&current, (int64_t)was, memory_order_relaxed);
    counted(p);
    return p;
}

EXPORT void free(void *p)
{
    uncounted(p);
    __libc_free(p);
}

EXPORT void *memalign(size_t align, size_t n)
{
    void *p = __libc_memalign(align, n);
    counted(p);
    return p;
}

EXPORT void *aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = memalign(align, n);
    if (!p && n) return ENOMEM;
    *out = p;
    return 0;
}

/* The figures, for ctypes. */
EXPORT int64_t memhook_current(void) { return atomic_load(&current); }
EXPORT int64_t memhook_peak(void) { return atomic_load(&peak); }
EXPORT void memhook_reset_peak(void) { atomic_store(&peak, atomic_load(&current)); }
