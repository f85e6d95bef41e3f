/* Dtype sizes and names. */
#include "core.h"

#include <string.h>

static const struct { const char *name; size_t size; } dtype_info[OPR_DTYPE_COUNT] = {
    [OPR_F32] = {"f32", 4}, [OPR_F64] = {"f64", 8}, [OPR_I64] = {"i64", 8},
    [OPR_BOOL] = {"bool", 1}, [OPR_F16] = {"f16", 2}, [OPR_BF16] = {"bf16", 2},
};

static bool dtype_valid(opr_dtype dt) { return (unsigned)dt < OPR_DTYPE_COUNT; }

size_t opr_dtype_size(opr_dtype dt) { return dtype_valid(dt) ? dtype_info[dt].size : 0; }

const char *opr_dtype_name(opr_dtype dt) { return dtype_valid(dt) ? dtype_info[dt].name : "?"; }

int opr_dtype_parse(const char *name, opr_dtype *out)
{
    static const struct { const char *alias; opr_dtype dt; } aliases[] = {
        {"float32", OPR_F32}, {"float", OPR_F32}, {"float64", OPR_F64}, {"double", OPR_F64},
        {"int64", OPR_I64}, {"long", OPR_I64}, {"float16", OPR_F16}, {"half", OPR_F16},
        {"bfloat16", OPR_BF16},
    };
    if (!name || !out) return opr_fail(OPR_ERR_INVALID, "opr_dtype_parse: NULL argument");
    for (int i = 0; i < OPR_DTYPE_COUNT; i++)
        if (!strcmp(name, dtype_info[i].name)) { *out = (opr_dtype)i; return OPR_OK; }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(name, aliases[i].alias)) { *out = aliases[i].dt; return OPR_OK; }
    return opr_fail(OPR_ERR_INVALID, "unknown dtype '%s' (expected f32, f64, i64, bool, f16 or bf16)", name);
}
