/* Implicit dtype promotion of a call, PyTorch's rules for the two cases where they do
 * not mix dimensioned tensors of different dtypes (that stays an error: no implicit
 * casts): a 0-d tensor and a number (a Scalar argument) take part in the common dtype
 * only by category (bool < integer < floating). A 0-d tensor of the same category as
 * the dimensioned tensors takes their dtype; one of a higher category makes the result
 * its dtype. A number of a higher category makes it the default dtype of that category
 * (f32, i64), except in an op marked `scalar_promotion: false` (fill, a pad or scatter
 * value: PyTorch converts the number to self's dtype). An op marked `int_to_float`
 * (true division) computes an integer or bool result in f32, as PyTorch's div does.
 * The tensors that differ from the result are converted with the `to` op, which
 * autograd records like any other. */
#include "composite.h"

#include <stdlib.h>

static int category(opr_dtype dt) { return dt == OPR_BOOL ? 0 : opr_dtype_is_floating(dt) ? 2 : 1; }

/* Two dtypes of one category: the wider (f16 and bf16 meet in f32). */
static opr_dtype wider(opr_dtype a, opr_dtype b)
{
    if (a == b) return a;
    if (category(a) != category(b)) return category(a) > category(b) ? a : b;
    if ((a == OPR_F16 && b == OPR_BF16) || (a == OPR_BF16 && b == OPR_F16)) return OPR_F32;
    return opr_dtype_size(a) >= opr_dtype_size(b) ? a : b;
}

/* The tensors of a call that take part in the common dtype T. */
#define FOR_EACH_T_TENSOR(op, args, nargs, BODY)                                                         \
    for (int i_ = 0; i_ < (nargs); i_++) {                                                              \
        const op_arg *a_ = &(op)->args[i_];                                                             \
        const opr_value *v_ = &(args)[i_];                                                              \
        if (a_->fixed_dtype >= 0) continue;                                                             \
        int n_ = a_->type == ARG_TENSOR && v_->kind == OPR_V_TENSOR ? 1                                 \
                 : a_->type == ARG_TENSOR_LIST && v_->kind == OPR_V_TENSOR_LIST && v_->u.tl.items ? v_->u.tl.n \
                 : 0;                                                                                   \
        for (int k_ = 0; k_ < n_; k_++) {                                                               \
            const opr_tensor *t = n_ == 1 && v_->kind == OPR_V_TENSOR ? v_->u.t : v_->u.tl.items[k_];  \
            if (t) { BODY }                                                                             \
        }                                                                                               \
    }

bool promote_target(const opr_op *op, const opr_value *args, int nargs, opr_dtype *target)
{
    int dimensioned = -1, zero_dim = -1, number = -1;
    bool mixed = false;
    FOR_EACH_T_TENSOR(op, args, nargs, {
        opr_dtype dt = t->m.dtype;
        if (t->m.ndim > 0) {
            if (dimensioned < 0) dimensioned = (int)dt;
            else mixed |= dimensioned != (int)dt;
        } else {
            zero_dim = zero_dim < 0 ? (int)dt : (int)wider((opr_dtype)zero_dim, dt);
        }
    })
    if (mixed) return false; /* dispatch refuses it, naming both */
    for (int i = 0; op->has_scalars && !op->no_scalar_promotion && i < nargs; i++) {
        if (op->args[i].type != ARG_SCALAR) continue;
        int c = args[i].kind == OPR_V_DOUBLE ? 2 : args[i].kind == OPR_V_INT ? 1 : args[i].kind == OPR_V_BOOL ? 0 : -1;
        if (c > number) number = c;
    }
    if (zero_dim < 0 && number < 0 && !op->int_to_float) return false; /* the common case: dimensioned tensors that agree */
    int r = dimensioned >= 0 ? dimensioned : zero_dim;
    if (r < 0) return false;
    if (zero_dim >= 0 && category((opr_dtype)zero_dim) > category((opr_dtype)r)) r = zero_dim;
    if (number > category((opr_dtype)r)) r = number == 2 ? OPR_F32 : OPR_I64;
    if (op->int_to_float && category((opr_dtype)r) < 2) r = OPR_F32;
    bool differs = false;
    FOR_EACH_T_TENSOR(op, args, nargs, { differs |= (int)t->m.dtype != r; })
    *target = (opr_dtype)r;
    return differs;
}

/* t converted to dtype by the `to` op (a new reference), or t retained. */
static opr_tensor *converted(const opr_op *to, opr_tensor *t, opr_dtype dtype)
{
    if (t->m.dtype == dtype) return opr_tensor_retain(t);
    opr_value a[2] = {opr_v_tensor(t), opr_v_string(opr_dtype_name(dtype))};
    opr_tensor *out = NULL;
    return opr_call(to, a, 2, &out, 1) ? NULL : out;
}

int promote_call(const opr_op *op, const opr_value *args, int nargs, opr_dtype target, opr_tensor **results, int nres)
{
    for (int i = 0; results && i < nres; i++) results[i] = NULL;
    const opr_op *to = registry_find(op->ctx, "to");
    if (!to)
        return opr_fail(OPR_ERR_NOT_FOUND, "%s: promoting the arguments to %s needs the 'to' op", op->name,
                        opr_dtype_name(target));
    opr_value vals[OPR_MAX_ARGS];
    opr_tensor *owned[OPR_MAX_ARGS] = {NULL};
    opr_tensor **lists[OPR_MAX_ARGS] = {NULL};
    int rc = OPR_OK;
    for (int i = 0; i < nargs && !rc; i++) {
        const op_arg *a = &op->args[i];
        vals[i] = args[i];
        if (a->fixed_dtype >= 0) continue;
        if (a->type == ARG_TENSOR && args[i].kind == OPR_V_TENSOR && args[i].u.t) {
            if (!(owned[i] = converted(to, args[i].u.t, target))) rc = opr_fail_wrap(opr_error_status(), "%s: argument '%s'", op->name, a->name);
            vals[i].u.t = owned[i];
        } else if (a->type == ARG_TENSOR_LIST && args[i].kind == OPR_V_TENSOR_LIST && args[i].u.tl.items) {
            int n = args[i].u.tl.n;
            if (!(lists[i] = calloc((size_t)(n ? n : 1), sizeof *lists[i]))) { rc = opr_fail(OPR_ERR_NOMEM, "out of memory"); break; }
            for (int k = 0; k < n && !rc; k++)
                if (args[i].u.tl.items[k] && !(lists[i][k] = converted(to, args[i].u.tl.items[k], target)))
                    rc = opr_fail_wrap(opr_error_status(), "%s: argument '%s[%d]'", op->name, a->name, k);
            vals[i].u.tl.items = lists[i];
        }
    }
    if (!rc) rc = opr_call(op, vals, nargs, results, nres);
    for (int i = 0; i < nargs; i++) {
        opr_tensor_release(owned[i]);
        for (int k = 0; lists[i] && k < args[i].u.tl.n; k++) opr_tensor_release(lists[i][k]);
        free(lists[i]);
    }
    return rc;
}
