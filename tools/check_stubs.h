int opr_op_sample_variant_count(const opr_op *op, int i);
opr_status opr_op_sample_variant_args(const opr_op *op, int i, int variant, opr_dtype dtype, opr_device dev, uint64_t seed,
                                      opr_value *args, int *nargs, opr_tensor **owned, int *nowned, char *label, size_t label_len);
bool opr_kernel_guards_set(opr_ctx *ctx, bool on);
