/* Chooses the loops of cpu_vmath.h for the CPU the plugin runs on. */
#include "cpu_vmath.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

cpu_vmath cpu_vm;

void cpu_vmath_init(void)
{
    /* __builtin_cpu_supports also checks that the OS saves the AVX registers.
     * OPREG_CPU_ISA=sse2 keeps the baseline loops on an AVX2 machine, so that they can
     * be tested there. */
    const char *isa = getenv("OPREG_CPU_ISA");
    const bool want_sse2 = isa && strcmp(isa, "sse2") == 0;
    __builtin_cpu_init();
    if (!want_sse2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        cpu_vm = cpu_vmath_avx2;
    else
        cpu_vm = cpu_vmath_sse2;
}
