/* The AVX2 + FMA loops of cpu_vmath.h. This file alone is compiled with -mavx2 -mfma
 * (plugins/cpu/CMakeLists.txt); cpu_vmath_init installs its table only on a CPU that has
 * both, so nothing here runs anywhere else. */
#include <sleef.h>

#define VM_ISA "avx2"
#define VM_TABLE cpu_vmath_avx2

#define VM_VF __m256
#define VM_WF 8
#define VM_LOADF _mm256_loadu_ps
#define VM_STOREF _mm256_storeu_ps
#define VM_STREAMF _mm256_stream_ps /* y aligned to the vector */
#define VM_SET1F _mm256_set1_ps
#define VM_ADDF _mm256_add_ps
#define VM_SUBF _mm256_sub_ps
#define VM_DIVF _mm256_div_ps
#define VM_SQRTF _mm256_sqrt_ps
#define VM_MAXF _mm256_max_ps
#define VM_MINF _mm256_min_ps
#define VM_ORF _mm256_or_ps
#define VM_UNORDF(a, b) _mm256_cmp_ps(a, b, _CMP_UNORD_Q) /* all ones (a NaN) where a or b is NaN */
#define VM_EXPF Sleef_expf8_u10avx2
#define VM_LOGF Sleef_logf8_u10avx2
#define VM_TANHF Sleef_tanhf8_u10avx2
#define VM_ERFF Sleef_erff8_u10avx2
#define VM_POWF Sleef_powf8_u10avx2

/* SLEEF's f32 function fn of this width, 1.0 ULP (Sleef_sinf8_u10avx2) */
#define VM_SLEEFF(fn) Sleef_##fn##f8_u10avx2
#define VM_SLEEF_FMODF Sleef_fmodf8_avx2

#define VM_VD __m256d
#define VM_WD 4
#define VM_LOADD _mm256_loadu_pd
#define VM_STORED _mm256_storeu_pd
#define VM_STREAMD _mm256_stream_pd
#define VM_SET1D _mm256_set1_pd
#define VM_ADDD _mm256_add_pd
#define VM_SUBD _mm256_sub_pd
#define VM_DIVD _mm256_div_pd
#define VM_SQRTD _mm256_sqrt_pd
#define VM_MAXD _mm256_max_pd
#define VM_MIND _mm256_min_pd
#define VM_ORD _mm256_or_pd
#define VM_UNORDD(a, b) _mm256_cmp_pd(a, b, _CMP_UNORD_Q)
#define VM_EXPD Sleef_expd4_u10avx2
#define VM_LOGD Sleef_logd4_u10avx2
#define VM_TANHD Sleef_tanhd4_u10avx2
#define VM_ERFD Sleef_erfd4_u10avx2
#define VM_POWD Sleef_powd4_u10avx2

#include "cpu_vmath_loops.h"
