/* Dtype conversion: to(self, dtype), a copy of self in the output's dtype, element by
 * element as C converts (floats to i64 and i32 truncate toward zero, anything to bool
 * is "!= 0"). A float that does not fit in the integer type (NaN, inf, |x| >= 2^63 for
 * i64, outside [-2^31, 2^31) for i32) is an error rather than C's undefined conversion;
 * i64 to i32 keeps the low 32 bits, as PyTorch's conversion does. f16 and bf16 read exactly (every half is a float) and
 * are written from a float rounded to nearest even: from f64 through float, as
 * PyTorch's c10::Half and BFloat16 convert. */
#include "cpu_common.h"
#include "cpu_kernels.h"

#include "../common/opc_scalar.h"

/* Element i of a view as a double, or exactly as an int64 when *exact (i64, i32, bool). */
static double load(const char *p, opr_dtype dt, int64_t *i64, bool *exact)
{
    *exact = false;
    switch (dt) {
    case OPR_F32: { float f; memcpy(&f, p, sizeof f); return f; }
    case OPR_F64: { double d; memcpy(&d, p, sizeof d); return d; }
    case OPR_I64: memcpy(i64, p, sizeof *i64); *exact = true; return (double)*i64;
    case OPR_BOOL: *i64 = *(const unsigned char *)p != 0; *exact = true; return (double)*i64;
    case OPR_I32: { int32_t i; memcpy(&i, p, sizeof i); *i64 = i; *exact = true; return i; }
    case OPR_F16: case OPR_BF16: return opu_load_f64(p, dt, 0);
    default: return 0;
    }
}

static int k_to(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    const size_t xs = opc_dtype_size(x->dtype), os = opc_dtype_size(out->dtype);
    cpu_walk w = {.ndim = x->ndim, .nops = 2, .shape = x->shape};
    for (int32_t d = 0; d < x->ndim; d++) {
        w.strides[0][d] = x->strides[d];
        w.strides[1][d] = out->strides[d];
    }
    cpu_walk_seek(&w, 0);
    for (int64_t i = 0; i < out->numel; i++, cpu_walk_next(&w)) {
        const char *src = (const char *)x->data + w.off[0] * (int64_t)xs;
        char *dst = (char *)out->data + w.off[1] * (int64_t)os;
        int64_t iv = 0;
        bool exact;
        double v = load(src, x->dtype, &iv, &exact);
        switch (out->dtype) {
        case OPR_F32: { float f = exact ? (float)iv : (float)v; memcpy(dst, &f, sizeof f); break; }
        case OPR_F64: memcpy(dst, &v, sizeof v); break;
        case OPR_I64:
            if (!exact) {
                if (!opc_fits_i64(v))
                    return CPU_FAIL(c, OPR_ERR_INVALID, "to: value %g cannot be represented as i64", v);
                iv = (int64_t)v;
            }
            memcpy(dst, &iv, sizeof iv);
            break;
        case OPR_I32: {
            if (!exact && !(v > -2147483649.0 && v < 2147483648.0))
                return CPU_FAIL(c, OPR_ERR_INVALID, "to: value %g cannot be represented as i32", v);
            const int32_t i = exact ? (int32_t)(uint32_t)(uint64_t)iv : (int32_t)v; /* low 32 bits */
            memcpy(dst, &i, sizeof i);
            break;
        }
        case OPR_BOOL: *(unsigned char *)dst = exact ? iv != 0 : v != 0; break;
        case OPR_F16: case OPR_BF16: opu_store_f64(dst, out->dtype, 0, exact ? (double)(float)iv : v); break;
        default: break;
        }
    }
    return OPR_OK;
}

int cpu_register_convert(opr_plugin *self)
{
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64) | OPR_DTYPE_BIT(OPR_I64) |
                            OPR_DTYPE_BIT(OPR_BOOL) | OPR_DTYPE_BIT(OPR_F16) | OPR_DTYPE_BIT(OPR_BF16) |
                            OPR_DTYPE_BIT(OPR_I32);
    return cpu_register(self, "to", dtypes, k_to);
}
