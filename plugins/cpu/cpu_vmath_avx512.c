/* The AVX-512 loops of cpu_vmath.h (16 floats or 8 doubles a vector). This file alone
 * is compiled with -mavx512f (plugins/cpu/CMakeLists.txt); cpu_vmath_init installs its
 * table only where the CPU and the OS support AVX-512F, so nothing here runs anywhere
 * else. */
#include <sleef.h>

#define VM_ISA "avx512"
#define VM_TABLE cpu_vmath_avx512

#define VM_VF __m512
#define VM_WF 16
#define VM_LOADF _mm512_loadu_ps
#define VM_STOREF _mm512_storeu_ps
#define VM_STREAMF _mm512_stream_ps /* y aligned to the vector */
#define VM_SET1F _mm512_set1_ps
#define VM_ADDF _mm512_add_ps
#define VM_SUBF _mm512_sub_ps
#define VM_DIVF _mm512_div_ps
#define VM_SQRTF _mm512_sqrt_ps
#define VM_MAXF _mm512_max_ps
#define VM_MINF _mm512_min_ps
/* or of the bits (the float or is AVX512DQ's; the integer one AVX512F's) */
#define VM_ORF(a, b) _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
/* a NaN where a or b is NaN, else 0 */
#define VM_UNORDF(a, b) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), _mm512_set1_ps(NAN))
#define VM_EXPF Sleef_expf16_u10avx512f
#define VM_LOGF Sleef_logf16_u10avx512f
#define VM_TANHF Sleef_tanhf16_u10avx512f
#define VM_ERFF Sleef_erff16_u10avx512f
#define VM_POWF Sleef_powf16_u10avx512f

/* SLEEF's f32 function fn of this width, 1.0 ULP (Sleef_sinf16_u10avx512f) */
#define VM_SLEEFF(fn) Sleef_##fn##f16_u10avx512f
#define VM_SLEEF_FMODF Sleef_fmodf16_avx512f

#define VM_VD __m512d
#define VM_WD 8
#define VM_LOADD _mm512_loadu_pd
#define VM_STORED _mm512_storeu_pd
#define VM_STREAMD _mm512_stream_pd
#define VM_SET1D _mm512_set1_pd
#define VM_ADDD _mm512_add_pd
#define VM_SUBD _mm512_sub_pd
#define VM_DIVD _mm512_div_pd
#define VM_SQRTD _mm512_sqrt_pd
#define VM_MAXD _mm512_max_pd
#define VM_MIND _mm512_min_pd
#define VM_ORD(a, b) _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(a), _mm512_castpd_si512(b)))
#define VM_UNORDD(a, b) _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q), _mm512_set1_pd(NAN))
#define VM_EXPD Sleef_expd8_u10avx512f
#define VM_LOGD Sleef_logd8_u10avx512f
#define VM_TANHD Sleef_tanhd8_u10avx512f
#define VM_ERFD Sleef_erfd8_u10avx512f
#define VM_POWD Sleef_powd8_u10avx512f

#include "cpu_vmath_loops.h"
