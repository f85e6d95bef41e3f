/* Chooses the loops of cpu_vmath.h for the CPU the plugin runs on. */
#include "cpu_vmath.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

cpu_vmath cpu_vm;

void cpu_vmath_init(void)
{
    /* __builtin_cpu_supports also checks that the OS saves the AVX and AVX-512
     * registers. OPREG_CPU_ISA=sse2 or =avx2 caps the choice, so that the lower loops
     * can be tested on a machine that has more. */
    const char *isa = getenv("OPREG_CPU_ISA");
    const bool cap_sse2 = isa && strcmp(isa, "sse2") == 0, cap_avx2 = cap_sse2 || (isa && strcmp(isa, "avx2") == 0);
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!cap_avx2 && avx2 && __builtin_cpu_supports("avx512f")) {
        cpu_vm = cpu_vmath_avx512;
        /* amax/amin stream their input from memory, and did so faster with 256-bit loads
         * than with 512-bit ones (AMD EPYC, family 1Ah: 1.6 against 2.2 ms over 4096 rows
         * of 4096 floats, the same loop at either width) */
        cpu_vm.amax_f32 = cpu_vmath_avx2.amax_f32;
        cpu_vm.amax_f64 = cpu_vmath_avx2.amax_f64;
        cpu_vm.amin_f32 = cpu_vmath_avx2.amin_f32;
        cpu_vm.amin_f64 = cpu_vmath_avx2.amin_f64;
    } else if (!cap_sse2 && avx2)
        cpu_vm = cpu_vmath_avx2;
    else
        cpu_vm = cpu_vmath_sse2;
}
