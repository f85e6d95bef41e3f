/* A C allocator that fails on request, for the allocation-failure tests. Linked into a
 * test executable, it replaces malloc and friends for the whole process (glibc routes
 * its own and every library's calls here); only in plain builds, since the sanitizers
 * bring their own allocator. */
#ifndef OPREG_ALLOC_HOOK_H
#define OPREG_ALLOC_HOOK_H

#include <stdbool.h>

/* Makes allocation number n (0 = the next) made by this thread fail, once; the ones
 * after it succeed again, which is the recovery under test. OpenMP's runtime ends the
 * process when an allocation fails (by design), so its allocations are never failed:
 * when the nth is one of them, the next allocation of another library fails instead. */
void alloc_hook_arm(long n);
void alloc_hook_disarm(void);
/* Whether the armed failure happened since alloc_hook_arm, and whether it was one of
 * libyaml's allocations. */
bool alloc_hook_fired(void);
bool alloc_hook_fired_in_libyaml(void);
/* Recording: between alloc_hook_record_start and _stop, every allocation this thread
 * makes is noted, with whether libyaml made it. _stop returns how many there were and
 * gives the array (one flag per allocation, in order; free it with
 * alloc_hook_record_free). NULL and -1 when the record could not be kept. */
void alloc_hook_record_start(void);
long alloc_hook_record_stop(bool **from_libyaml);
void alloc_hook_record_free(bool *from_libyaml);
/* Blocks allocated and not yet freed, by every thread. */
long alloc_hook_live_blocks(void);

#endif
