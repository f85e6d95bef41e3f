/* Comparisons with a bool (one byte, 0/1) output: eq, ne, gt, lt, ge, le. f32, f64,
 * i64, i32, f16, bf16 (in float); eq and ne also on bool, comparing truth values. IEEE
 * semantics: anything against NaN is false except ne. */
#include "gpu_ew.cuh"

namespace {

GK_BINARY_FN(f_eq, bool, x == y)
GK_BINARY_FN(f_ne, bool, x != y)
GK_BINARY_FN(f_gt, bool, x > y)
GK_BINARY_FN(f_lt, bool, x < y)
GK_BINARY_FN(f_ge, bool, x >= y)
GK_BINARY_FN(f_le, bool, x <= y)
GK_BINARY_FN(f_eq_b, bool, (x != 0) == (y != 0))
GK_BINARY_FN(f_ne_b, bool, (x != 0) != (y != 0))

const uint32_t ORDERED = GK_NUMERIC | GK_I32 | GK_HALVES;
const uint32_t EQUALITY = ORDERED | GK_BIT(OPR_BOOL);

template <template <class> class F, template <class> class FB>
int compare(const opr_kernel_call *c, const char *op, uint32_t dtypes)
{
    gk_ctx k;
    gk_ew e;
    int rc = gk_begin(c, op, &k);
    if (!rc) rc = gk_ew_prepare(c, op, 2, 0, 2, dtypes, true, &e);
    if (rc) return rc;
    if (e.in[0]->dtype == OPR_BOOL) {
        FB<uint8_t> f;
        f.a = f.b = 0;
        return gk_ew_binary<uint8_t, uint8_t>(&k, e, f);
    }
    return gk_ew_dispatch_int<F, true, 2>(&k, e, 0, 0);
}

int k_eq(const opr_kernel_call *c) { return compare<f_eq, f_eq_b>(c, "eq", EQUALITY); }
int k_ne(const opr_kernel_call *c) { return compare<f_ne, f_ne_b>(c, "ne", EQUALITY); }
int k_gt(const opr_kernel_call *c) { return compare<f_gt, f_eq_b>(c, "gt", ORDERED); }
int k_lt(const opr_kernel_call *c) { return compare<f_lt, f_eq_b>(c, "lt", ORDERED); }
int k_ge(const opr_kernel_call *c) { return compare<f_ge, f_eq_b>(c, "ge", ORDERED); }
int k_le(const opr_kernel_call *c) { return compare<f_le, f_eq_b>(c, "le", ORDERED); }

} // namespace

int gk_register_compare(opr_plugin *self)
{
    const struct {
        const char *op;
        uint32_t dtypes;
        opr_kernel_fn fn;
    } table[] = {
        {"eq", EQUALITY, k_eq}, {"ne", EQUALITY, k_ne}, {"gt", ORDERED, k_gt},
        {"lt", ORDERED, k_lt},  {"ge", ORDERED, k_ge},  {"le", ORDERED, k_le},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, table[i].dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
