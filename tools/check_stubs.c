/* TEMPORARY until the registry's variants and guards land */
#include <opreg/opreg.h>
#include <stdio.h>
int opr_op_sample_variant_count(const opr_op *op, int i) { (void)op; (void)i; return 1; }
opr_status opr_op_sample_variant_args(const opr_op *op, int i, int variant, opr_dtype dtype, opr_device dev, uint64_t seed,
                                      opr_value *args, int *nargs, opr_tensor **owned, int *nowned, char *label, size_t label_len)
{ (void)variant; if (label_len) label[0] = 0; return opr_op_sample_args(op, i, dtype, dev, seed, args, nargs, owned, nowned); }
bool opr_kernel_guards_set(opr_ctx *ctx, bool on) { (void)ctx; (void)on; return false; }
