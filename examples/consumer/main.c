/* Multiplies two matrices with whatever backend opreg finds. */
#include <opreg/opreg.h>
#include <stdio.h>

int main(void)
{
    opr_ctx *ctx = opr_ctx_new(NULL);
    if (!ctx) { fprintf(stderr, "opreg: %s\n", opr_last_error()); return 1; }
    const int64_t shape[2] = {2, 2};
    const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_F32, 2, shape, a, OPR_CPU);
    opr_tensor *y = opr_tensor_from_data(ctx, OPR_F32, 2, shape, b, OPR_CPU);
    const opr_op *mm = opr_op_find(ctx, "mm");
    opr_value args[2] = {opr_v_tensor(x), opr_v_tensor(y)};
    opr_tensor *z = NULL;
    float out[4] = {0};
    int rc = mm ? opr_call(mm, args, 2, &z, 1) : OPR_ERR_NOT_FOUND;
    if (!rc) rc = opr_tensor_copy_to_host(z, out, sizeof out);
    if (rc) fprintf(stderr, "opreg: %s\n", opr_last_error());
    else printf("mm: [[%g, %g], [%g, %g]]\n", out[0], out[1], out[2], out[3]);
    opr_tensor_release(x);
    opr_tensor_release(y);
    opr_tensor_release(z);
    opr_ctx_free(ctx);
    return rc ? 1 : 0;
}
