/* The baseline loops of cpu_vmath.h: SSE2, which every x86-64 CPU has. */
#include <sleef.h>

#define VM_ISA "sse2"
#define VM_TABLE cpu_vmath_sse2

#define VM_VF __m128
#define VM_WF 4
#define VM_LOADF _mm_loadu_ps
#define VM_STOREF _mm_storeu_ps
#define VM_STREAMF _mm_stream_ps /* y aligned to the vector */
#define VM_SET1F _mm_set1_ps
#define VM_ADDF _mm_add_ps
#define VM_SUBF _mm_sub_ps
#define VM_DIVF _mm_div_ps
#define VM_SQRTF _mm_sqrt_ps
#define VM_MAXF _mm_max_ps
#define VM_MINF _mm_min_ps
#define VM_ORF _mm_or_ps
#define VM_UNORDF _mm_cmpunord_ps /* all ones (a NaN) where a or b is NaN, else 0 */
#define VM_EXPF Sleef_expf4_u10sse2
#define VM_LOGF Sleef_logf4_u10sse2
#define VM_TANHF Sleef_tanhf4_u10sse2
#define VM_ERFF Sleef_erff4_u10sse2
#define VM_POWF Sleef_powf4_u10sse2

/* SLEEF's f32 function fn of this width, 1.0 ULP (Sleef_sinf4_u10sse2) */
#define VM_SLEEFF(fn) Sleef_##fn##f4_u10sse2
#define VM_SLEEF_FMODF Sleef_fmodf4_sse2

#define VM_VD __m128d
#define VM_WD 2
#define VM_LOADD _mm_loadu_pd
#define VM_STORED _mm_storeu_pd
#define VM_STREAMD _mm_stream_pd
#define VM_SET1D _mm_set1_pd
#define VM_ADDD _mm_add_pd
#define VM_SUBD _mm_sub_pd
#define VM_DIVD _mm_div_pd
#define VM_SQRTD _mm_sqrt_pd
#define VM_MAXD _mm_max_pd
#define VM_MIND _mm_min_pd
#define VM_ORD _mm_or_pd
#define VM_UNORDD _mm_cmpunord_pd
#define VM_EXPD Sleef_expd2_u10sse2
#define VM_LOGD Sleef_logd2_u10sse2
#define VM_TANHD Sleef_tanhd2_u10sse2
#define VM_ERFD Sleef_erfd2_u10sse2
#define VM_POWD Sleef_powd2_u10sse2

#include "cpu_vmath_loops.h"
