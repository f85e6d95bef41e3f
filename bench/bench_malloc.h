/* The C allocator policy of the benchmarks that compare with PyTorch on the CPU: keep
 * freed memory (mmap threshold 32 MiB, glibc's largest; no trimming), in this process
 * (mallopt) and in the Python processes it starts (GLIBC_TUNABLES, inherited). With
 * glibc's defaults each PyTorch step maps its large temporaries afresh and pays a page
 * fault per page, so PyTorch's figures depended on what its start-up happened to free;
 * opreg's CPU allocator keeps its blocks either way. Blocks above 32 MiB are mapped
 * afresh under either policy. Header-only (static inline), for the C drivers. */
#ifndef OPREG_BENCH_MALLOC_H
#define OPREG_BENCH_MALLOC_H

#include <malloc.h>
#include <stdlib.h>

#define BENCH_MALLOC_POLICY "keeps freed memory (mmap threshold 32 MiB, no trimming)"

/* Sets the policy; 0 or -1. */
static inline int bench_keep_freed_memory(void)
{
    if (!mallopt(M_MMAP_THRESHOLD, 32 << 20) || !mallopt(M_TRIM_THRESHOLD, 256 << 20)) return -1;
    return setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456", 1);
}

#endif
