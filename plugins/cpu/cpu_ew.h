/* The elementwise machinery of the CPU plugin, shared by the families built on it
 * (cpu_elementwise.c: arithmetic, comparisons, unary math; cpu_pointwise.c: the rest of
 * ATen's pointwise, bitwise and logical ops):
 *  - the loop templates (EW_*_LOOP): an op is an expression over `x` (and `y`) plus the
 *    scalar arguments A and B, stamped out per dtype;
 *  - the driver (ew_apply / ew_run, cpu_elementwise.c), which turns n-d broadcast
 *    operands of any layout into calls of one loop, in parallel for large outputs.
 * A family writes its loops with the templates, groups them in per-dtype tables and
 * registers each table's kernel; it never walks tensors itself. */
#ifndef OPREG_CPU_EW_H
#define OPREG_CPU_EW_H

#include "cpu_common.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* Outputs at or above CPU_PAR_THRESHOLD elements are cut into blocks of this many
 * elements; each block seeks its own walker, so blocks can run on any thread. */
#define EW_BLOCK 8192

/* Scalar arguments of an op (alpha; clamp bounds; pow exponent), as the host gave them.
 * Each loop converts them once to its element type. */
typedef struct ew_params {
    double a, b;
} ew_params;

/* Applies an op to n elements. ptr[0] is the output, ptr[1..] the inputs; st[k] is the
 * step of operand k in elements (0 for a broadcast operand). */
typedef void (*ew_loop_fn)(int64_t n, char *const *ptr, const int64_t *st, const ew_params *p);

/* ------------------------------------------------------------------ dtype helpers */

/* double -> int64 without the undefined behaviour of an out-of-range cast. */
static inline int64_t ew_sat_i64(double v)
{
    if (isnan(v)) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

/* double -> int32 the same way (a clamp bound of +-inf becomes INT32_MAX/MIN). */
static inline int32_t ew_sat_i32(double v)
{
    if (isnan(v)) return 0;
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)v;
}

/* Conversions of the double scalar arguments to each element type. */
#define EW_CONV_f32(v) ((float)(v))
#define EW_CONV_f64(v) ((double)(v))
#define EW_CONV_i64(v) ew_sat_i64(v)
#define EW_CONV_i32(v) ew_sat_i32(v)
#define EW_CONV_b8(v) ((void)(v), (uint8_t)0) /* bool ops take no scalars */

/* i64 arithmetic wraps around like PyTorch's instead of overflowing (which is undefined
 * in C): compute in uint64_t, convert back (implementation-defined, modular in GCC and
 * Clang). */
#define WADD(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))
#define WSUB(x, y) ((int64_t)((uint64_t)(x) - (uint64_t)(y)))
#define WMUL(x, y) ((int64_t)((uint64_t)(x) * (uint64_t)(y)))
#define WNEG(x) ((int64_t)(0u - (uint64_t)(x)))
/* The same for i32, in uint32_t. */
#define WADD32(x, y) ((int32_t)((uint32_t)(x) + (uint32_t)(y)))
#define WSUB32(x, y) ((int32_t)((uint32_t)(x) - (uint32_t)(y)))
#define WMUL32(x, y) ((int32_t)((uint32_t)(x) * (uint32_t)(y)))
#define WNEG32(x) ((int32_t)(0u - (uint32_t)(x)))

/* ------------------------------------------------------------------ loop templates */

/* The contiguous branch of each loop is a plain indexed loop so the compiler can
 * vectorize it; the "scalar operand" branch covers x op 0-d tensor, the other common
 * broadcast; everything else takes the general strided branch. Scalars A and B are
 * copied to locals first so that writes through `o` cannot alias them. */

#define EW_UNARY_LOOP(name, TO, TI, SUF, EXPR)                                             \
    static void name(int64_t n, char *const *ptr, const int64_t *st, const ew_params *p)   \
    {                                                                                      \
        TO *o = (TO *)ptr[0];                                                              \
        const TI *a = (const TI *)ptr[1];                                                  \
        const TI A = EW_CONV_##SUF(p->a), B = EW_CONV_##SUF(p->b);                         \
        const int64_t so = st[0], sa = st[1];                                              \
        (void)A; (void)B;                                                                  \
        if (so == 1 && sa == 1)                                                            \
            for (int64_t i = 0; i < n; i++) { const TI x = a[i]; o[i] = (TO)(EXPR); }      \
        else                                                                               \
            for (int64_t i = 0; i < n; i++) {                                              \
                const TI x = a[i * sa];                                                    \
                o[i * so] = (TO)(EXPR);                                                    \
            }                                                                              \
    }

#define EW_BINARY_LOOP(name, TO, TI, SUF, EXPR)                                            \
    static void name(int64_t n, char *const *ptr, const int64_t *st, const ew_params *p)   \
    {                                                                                      \
        TO *o = (TO *)ptr[0];                                                              \
        const TI *a = (const TI *)ptr[1], *b = (const TI *)ptr[2];                         \
        const TI A = EW_CONV_##SUF(p->a), B = EW_CONV_##SUF(p->b);                         \
        const int64_t so = st[0], sa = st[1], sb = st[2];                                  \
        (void)A; (void)B;                                                                  \
        if (so == 1 && sa == 1 && sb == 1) {                                               \
            for (int64_t i = 0; i < n; i++) {                                              \
                const TI x = a[i], y = b[i];                                               \
                o[i] = (TO)(EXPR);                                                         \
            }                                                                              \
        } else if (so == 1 && sa == 1 && sb == 0) {                                        \
            const TI y = b[0];                                                             \
            for (int64_t i = 0; i < n; i++) { const TI x = a[i]; o[i] = (TO)(EXPR); }      \
        } else if (so == 1 && sa == 0 && sb == 1) { /* e.g. an expanded gradient */       \
            const TI x = a[0];                                                             \
            for (int64_t i = 0; i < n; i++) { const TI y = b[i]; o[i] = (TO)(EXPR); }      \
        } else {                                                                           \
            for (int64_t i = 0; i < n; i++) {                                              \
                const TI x = a[i * sa], y = b[i * sb];                                     \
                o[i * so] = (TO)(EXPR);                                                    \
            }                                                                              \
        }                                                                                  \
    }

/* where: operand 1 is the bool condition, operands 2 and 3 the values. */
#define EW_WHERE_LOOP(name, T)                                                             \
    static void name(int64_t n, char *const *ptr, const int64_t *st, const ew_params *p)   \
    {                                                                                      \
        T *o = (T *)ptr[0];                                                                \
        const uint8_t *c = (const uint8_t *)ptr[1];                                        \
        const T *a = (const T *)ptr[2], *b = (const T *)ptr[3];                            \
        const int64_t so = st[0], sc = st[1], sa = st[2], sb = st[3];                      \
        (void)p;                                                                           \
        if (so == 1 && sc == 1 && sa == 1 && sb == 1)                                      \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? a[i] : b[i];                     \
        else                                                                               \
            for (int64_t i = 0; i < n; i++) o[i * so] = c[i * sc] ? a[i * sa] : b[i * sb]; \
    }

/* Three value operands (lerp, addcmul): x, y, z, with A the scalar argument. */
#define EW_TERNARY_LOOP(name, T, EXPR)                                                     \
    static void name(int64_t n, char *const *ptr, const int64_t *st, const ew_params *p)   \
    {                                                                                      \
        T *o = (T *)ptr[0];                                                                \
        const T *a = (const T *)ptr[1], *b = (const T *)ptr[2], *c = (const T *)ptr[3];    \
        const int64_t so = st[0], sa = st[1], sb = st[2], sc = st[3];                      \
        const T A = (T)p->a;                                                               \
        (void)A;                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                  \
            const T x = a[i * sa], y = b[i * sb], z = c[i * sc];                           \
            o[i * so] = (T)(EXPR);                                                         \
        }                                                                                  \
    }

/* Float ops are written once and stamped out for f32 and f64. */
#define EW_UNARY_FLOAT(op, EXPR)                     \
    EW_UNARY_LOOP(op##_f32, float, float, f32, EXPR) \
    EW_UNARY_LOOP(op##_f64, double, double, f64, EXPR)
#define EW_BINARY_FLOAT(op, EXPR)                     \
    EW_BINARY_LOOP(op##_f32, float, float, f32, EXPR) \
    EW_BINARY_LOOP(op##_f64, double, double, f64, EXPR)
/* Comparisons: bool (one byte, 0/1) out. */
#define EW_COMPARE(op, EXPR)                               \
    EW_BINARY_LOOP(op##_f32, uint8_t, float, f32, EXPR)    \
    EW_BINARY_LOOP(op##_f64, uint8_t, double, f64, EXPR)   \
    EW_BINARY_LOOP(op##_i64, uint8_t, int64_t, i64, EXPR)   \
    EW_BINARY_LOOP(op##_i32, uint8_t, int32_t, i32, EXPR)

/* Unary loops over the vector functions of cpu_vmath.h (SLEEF; the accuracy is stated
 * there). CALL computes Y[0..N) from X[0..N) (A: the scalar argument). A strided or
 * broadcast operand is gathered into a buffer and scattered back, so every element goes
 * through the same vector code whatever the layout. */
#define EW_VMATH_CHUNK 256
#define EW_VMATH_LOOP(name, T, SUF, CALL)                                                  \
    static void name(int64_t n, char *const *ptr, const int64_t *st, const ew_params *p)   \
    {                                                                                      \
        T *o = (T *)ptr[0];                                                                \
        const T *a = (const T *)ptr[1];                                                    \
        const T A = EW_CONV_##SUF(p->a);                                                   \
        (void)A;                                                                           \
        if (st[0] == 1 && st[1] == 1) {                                                    \
            const int64_t N = n;                                                           \
            const T *X = a;                                                                \
            T *Y = o;                                                                      \
            CALL;                                                                          \
            return;                                                                        \
        }                                                                                  \
        T buf[EW_VMATH_CHUNK];                                                             \
        for (int64_t i0 = 0; i0 < n; i0 += EW_VMATH_CHUNK) {                               \
            const int64_t N = n - i0 < EW_VMATH_CHUNK ? n - i0 : EW_VMATH_CHUNK;           \
            for (int64_t k = 0; k < N; k++) buf[k] = a[(i0 + k) * st[1]];                  \
            const T *X = buf;                                                              \
            T *Y = buf;                                                                    \
            CALL;                                                                          \
            for (int64_t k = 0; k < N; k++) o[(i0 + k) * st[0]] = buf[k];                  \
        }                                                                                  \
    }
/* Per-op tables indexed by dtype (the common dtype T of the op's inputs). A table is
 * also the single source of the dtype mask the op registers with. */
typedef ew_loop_fn ew_table[OPR_DTYPE_COUNT];

#define EW_TABLE_F(op) {[OPR_F32] = op##_f32, [OPR_F64] = op##_f64}
#define EW_TABLE_FI(op) {[OPR_F32] = op##_f32, [OPR_F64] = op##_f64, [OPR_I64] = op##_i64, [OPR_I32] = op##_i32}

/* Runs fn over out = op(in[0], ..., in[nin-1]) with broadcasting (the inputs are of the
 * loop's dtype; an input must broadcast to out). */
int ew_apply(const opr_kernel_call *c, const char *op, const opr_tensor_view *out, int nin,
             const opr_tensor_view *const *in, ew_loop_fn fn, const ew_params *p);
/* Checks the call (nargs arguments, the first nin tensors of one dtype T with a loop in
 * table, the output T or bool when bool_out), then runs the loop with the scalars p. */
int ew_run(const opr_kernel_call *c, const char *op, int nargs, int nin, const ew_table table, bool bool_out,
           const ew_params *p);
/* The dtype mask of the dtypes a table has loops for (what its kernel registers). */
uint32_t ew_mask(const ew_table t);
/* No scalar arguments. */
extern const ew_params ew_none;

#endif /* OPREG_CPU_EW_H */
