/* Native fused backward kernels: mm_backward, bmm_backward, matmul_backward,
 * linear_backward and addmm_backward (f32 and f64, OpenBLAS GEMM).
 *
 * Calling convention (include/opreg/plugin.h, above opr_kernel_fn): args are the
 * gradient of each forward output, then the forward arguments in schema order (tensors
 * the plan did not save are OPR_ARG_NONE), then the forward outputs; outputs are the
 * gradients of the inputs the entry covers, in the order of its YAML key, contiguous,
 * with data NULL where grad_input_mask does not ask for them. An input that was not
 * saved is always one whose gradient is asked for (see `needs:` in core.yaml), so its
 * shape is that of the corresponding output.
 *
 * Every product is one "reducing batched GEMM" (planned by plugins/common/opc_rgemm.h,
 * run here on CBLAS): C[c] = alpha * sum over the batch positions b that map to c of
 * A[b] @ B[b]. Operands are strided matrices handed to
 * BLAS with the transpose flag (a transposed operand is never copied); only a matrix
 * without a unit stride is packed. Batch dims that are summed over fold into the inner
 * dimension of a single GEMM when the operands' strides allow it, and batch dims of a
 * product whose right operand is shared fold into its rows: the weight gradient of
 * linear on [..., in] input is one [out, N] @ [N, in] GEMM over all N leading rows,
 * and nothing of batch size is ever materialised and then summed. */
#include "cpu_common.h"
#include "cpu_blas.h"
#include "cpu_kernels.h"
#include "../common/opc_matmul_grad.h"

#include <stdlib.h>

/* ------------------------------------------------------------------ reducing batched GEMM */

/* Runs job j on A and B as planned by plugins/common/opc_rgemm.h: one CBLAS call per
 * step, packing an operand BLAS cannot read in place (once when it is the same matrix
 * at every step). */
static int rgemm_run(const opr_kernel_call *c, const opc_rgemm *j, opc_bmat a, opc_bmat b)
{
    const size_t es = cpu_dtype_size(j->dt);
    char why[OPC_WHY_SIZE];
    opc_rgemm_plan p;
    if (!opc_rgemm_plan_make(j, a, b, BLAS_INT_MAX, false, &p, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (p.c_numel == 0) return OPR_OK;
    if (p.empty_sum) { /* beta is 0 in every backward product */
        memset(j->c, 0, (size_t)p.c_numel * es);
        return OPR_OK;
    }
    const int64_t m = p.m, n = p.n, k = p.k;
    if (m > BLAS_INT_MAX || n > BLAS_INT_MAX || k > BLAS_INT_MAX)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: a matrix dimension exceeds what BLAS accepts", j->op);
    opc_blas_layout la = layout_of(m, k, p.a.rs, p.a.cs), lb = layout_of(k, n, p.b.rs, p.b.cs);
    const bool pack_a = !la.direct, pack_b = !lb.direct;
    char *sa, *sb;
    const int rc = cpu_pack_scratch(c, j->op, m, k, n, es, &la, &lb, &sa, &sb);
    if (rc) return rc;
    bool packed_a = false, packed_b = false;
    for (int64_t s = 0; s < p.nsteps; s++) {
        const opc_rgemm_step st = opc_rgemm_step_at(j, &p, s);
        const char *pa = p.a.data + st.a * (int64_t)es, *pb = p.b.data + st.b * (int64_t)es;
        if (pack_a && !(packed_a && p.a_shared)) { pack(es, pa, m, k, p.a.rs, p.a.cs, sa); packed_a = true; }
        if (pack_b && !(packed_b && p.b_shared)) { pack(es, pb, k, n, p.b.rs, p.b.cs, sb); packed_b = true; }
        blas_gemm(j->dt, la, lb, m, n, k, j->alpha, pack_a ? sa : pa, pack_b ? sb : pb, st.first ? j->beta : 1.0,
                  j->c + st.c * (int64_t)es);
    }
    free(sa);
    free(sb);
    return OPR_OK;
}

/* ------------------------------------------------------------------ operands */

/* Forward argument `arg` when saved, else the shape of gradient output `out`. */
static bool operand_of(const opr_kernel_call *c, int arg, int out, opc_matmul_operand *o)
{
    return opc_matmul_operand_of(c, cpu_arg_t(c, arg), out, o);
}

static bool wanted(const opr_kernel_call *c, int out) { return (c->grad_input_mask >> out) & 1 && c->outputs[out]->data; }

/* Checks that every wanted output and every given tensor is of the kernel's dtype. */
static int check_dtypes(const opr_kernel_call *c, opr_dtype *dt)
{
    const opr_tensor_view *g = cpu_arg_t(c, 0);
    if (!g) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: no gradient of the output was given", c->op);
    *dt = g->dtype;
    if (*dt != OPR_F32 && *dt != OPR_F64)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on cpu", c->op, cpu_dtype_name(*dt));
    for (int32_t i = 0; i < c->nargs; i++) {
        const opr_tensor_view *t = cpu_arg_t(c, i);
        if (t && t->dtype != *dt)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: argument %d is %s, expected %s", c->op, (int)i,
                            cpu_dtype_name(t->dtype), cpu_dtype_name(*dt));
    }
    for (int32_t p = 0; p < c->nout; p++)
        if (wanted(c, p) && (c->outputs[p]->dtype != *dt ||
                             (c->outputs[p]->numel > 0 && !cpu_is_contiguous(c->outputs[p]))))
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: gradient output %d must be a contiguous %s tensor", c->op, (int)p,
                            cpu_dtype_name(*dt));
    return OPR_OK;
}

/* out = scale * g summed down to out's shape (right-aligned broadcasting), accumulated
 * in double. */
static int sum_to_scaled(const opr_kernel_call *c, const char *op, const opr_tensor_view *g, opr_tensor_view *out, double scale)
{
    int64_t contig[OPR_MAX_DIMS], ost[OPR_MAX_DIMS];
    opc_contig_strides(out->ndim, out->shape, contig);
    opr_tensor_view as = *out;
    as.strides = contig;
    if (!opc_bcast_strides(&as, g->ndim, g->shape, ost))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: the gradient does not reduce to a %d-d input of these sizes", op,
                        (int)out->ndim);
    if (cpu_sum_rows(g, out, ost, scale)) return OPR_OK; /* the usual bias case, in parallel */
    double *acc = calloc((size_t)(out->numel ? out->numel : 1), sizeof *acc);
    if (!acc) return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", op);
    cpu_walk w;
    memset(&w, 0, sizeof w);
    w.ndim = g->ndim;
    w.nops = 2;
    w.shape = g->shape;
    memcpy(w.strides[0], g->strides, (size_t)g->ndim * sizeof(int64_t));
    memcpy(w.strides[1], ost, (size_t)g->ndim * sizeof(int64_t));
    cpu_walk_seek(&w, 0);
    if (g->dtype == OPR_F32) {
        const float *in = g->data;
        for (int64_t i = 0; i < g->numel; i++, cpu_walk_next(&w)) acc[w.off[1]] += in[w.off[0]];
        float *o = out->data;
        for (int64_t i = 0; i < out->numel; i++) o[i] = (float)(scale * acc[i]);
    } else {
        const double *in = g->data;
        for (int64_t i = 0; i < g->numel; i++, cpu_walk_next(&w)) acc[w.off[1]] += in[w.off[0]];
        double *o = out->data;
        for (int64_t i = 0; i < out->numel; i++) o[i] = scale * acc[i];
    }
    free(acc);
    return OPR_OK;
}

/* ------------------------------------------------------------------ matmul family */

/* An opc_rgemm_run_fn: one product of a backward on CBLAS. */
static int run_product(void *call, const opc_rgemm_product *pr)
{
    return rgemm_run(call, &pr->job, pr->a, pr->b);
}

/* The backward of x @ y (plugins/common/opc_matmul_grad.h): gx and gy, either NULL
 * when not wanted. */
static int matmul_bwd(const opr_kernel_call *c, opr_dtype dt, const opr_tensor_view *g, const opc_matmul_problem *p,
                      opr_tensor_view *gx, opr_tensor_view *gy)
{
    char why[OPC_WHY_SIZE];
    const int rc = opc_matmul_grad_run(c->op, dt, g, p, gx, gy, run_product, (void *)c, why, sizeof why);
    return why[0] ? CPU_FAIL(c, rc, "%s", why) : rc;
}

/* mm_backward: args (grad, self, mat2, result); outputs (self, mat2). */
static int k_mm_backward(const opr_kernel_call *c)
{
    opr_dtype dt;
    int rc = check_dtypes(c, &dt);
    if (rc) return rc;
    opc_matmul_operand x, y;
    if (!operand_of(c, 1, 0, &x) || !operand_of(c, 2, 1, &y) || x.ndim != 2 || y.ndim != 2)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected 2-d self and mat2 (given or as gradient outputs)", c->op);
    opc_matmul_problem p = {x, y, false, 1.0};
    opr_tensor_view *gx = wanted(c, 0) ? c->outputs[0] : NULL, *gy = wanted(c, 1) ? c->outputs[1] : NULL;
    if ((gx && !opc_same_shape(2, x.shape, gx)) || (gy && !opc_same_shape(2, y.shape, gy)))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: gradient outputs must have the inputs' shapes", c->op);
    return matmul_bwd(c, dt, cpu_arg_t(c, 0), &p, gx, gy);
}

/* bmm_backward: args (grad, self, mat2, result); outputs (self, mat2). */
static int k_bmm_backward(const opr_kernel_call *c)
{
    opr_dtype dt;
    int rc = check_dtypes(c, &dt);
    if (rc) return rc;
    opc_matmul_operand x, y;
    if (!operand_of(c, 1, 0, &x) || !operand_of(c, 2, 1, &y) || x.ndim != 3 || y.ndim != 3 || x.shape[0] != y.shape[0])
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected 3-d self and mat2 with the same batch size", c->op);
    opc_matmul_problem p = {x, y, false, 1.0};
    opr_tensor_view *gx = wanted(c, 0) ? c->outputs[0] : NULL, *gy = wanted(c, 1) ? c->outputs[1] : NULL;
    if ((gx && !opc_same_shape(3, x.shape, gx)) || (gy && !opc_same_shape(3, y.shape, gy)))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: gradient outputs must have the inputs' shapes", c->op);
    return matmul_bwd(c, dt, cpu_arg_t(c, 0), &p, gx, gy);
}

/* matmul_backward: args (grad, self, other, result); outputs (self, other). Handles
 * 1-d operands and broadcast batch dims (gradients summed over them). */
static int k_matmul_backward(const opr_kernel_call *c)
{
    opr_dtype dt;
    int rc = check_dtypes(c, &dt);
    if (rc) return rc;
    opc_matmul_operand x, y;
    if (!operand_of(c, 1, 0, &x) || !operand_of(c, 2, 1, &y))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: an operand is neither saved nor a wanted gradient", c->op);
    opc_matmul_problem p = {x, y, false, 1.0};
    opr_tensor_view *gx = wanted(c, 0) ? c->outputs[0] : NULL, *gy = wanted(c, 1) ? c->outputs[1] : NULL;
    if ((gx && !opc_same_shape(x.ndim, x.shape, gx)) || (gy && !opc_same_shape(y.ndim, y.shape, gy)))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: gradient outputs must have the inputs' shapes", c->op);
    return matmul_bwd(c, dt, cpu_arg_t(c, 0), &p, gx, gy);
}

/* linear_backward: args (grad, input, weight, bias, result); outputs (input, weight,
 * bias). input [..., in] @ W^T + bias with W [out, in]: W^T is read through W's strides
 * and W's gradient g^T @ input is written straight into W's layout; input's leading
 * dims fold into the rows of single GEMMs where the strides allow (always for
 * contiguous tensors). */
static int k_linear_backward(const opr_kernel_call *c)
{
    opr_dtype dt;
    int rc = check_dtypes(c, &dt);
    if (rc) return rc;
    const opr_tensor_view *g = cpu_arg_t(c, 0);
    opr_tensor_view *gx = wanted(c, 0) ? c->outputs[0] : NULL, *gw = wanted(c, 1) ? c->outputs[1] : NULL;
    opr_tensor_view *gb = c->nout > 2 && wanted(c, 2) ? c->outputs[2] : NULL;
    /* GEMMs first, the bias sum after: an OpenMP region right before an OpenBLAS call
     * leaves spinning threads that slow the GEMM down on a machine with few cores */
    if (gx || gw) {
        opc_matmul_operand x, w;
        if (!operand_of(c, 1, 0, &x) || !operand_of(c, 2, 1, &w) || x.ndim < 1 || w.ndim != 2)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected input with at least 1 dim and a 2-d weight", c->op);
        if ((gx && !opc_same_shape(x.ndim, x.shape, gx)) || (gw && !opc_same_shape(2, w.shape, gw)))
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: gradient outputs must have the inputs' shapes", c->op);
        opc_matmul_problem p = {x, w, true, 1.0};
        if ((rc = matmul_bwd(c, dt, g, &p, gx, gw))) return rc;
    }
    return gb ? sum_to_scaled(c, c->op, g, gb, 1.0) : OPR_OK;
}

/* addmm_backward: args (grad, self, mat1, mat2, beta, alpha, result); outputs (self,
 * mat1, mat2). beta * self (broadcast) + alpha * mat1 @ mat2. */
static int k_addmm_backward(const opr_kernel_call *c)
{
    opr_dtype dt;
    int rc = check_dtypes(c, &dt);
    if (rc) return rc;
    const opr_tensor_view *g = cpu_arg_t(c, 0);
    const double beta = cpu_arg_d(c, 4), alpha = cpu_arg_d(c, 5);
    opr_tensor_view *gs = wanted(c, 0) ? c->outputs[0] : NULL;
    opr_tensor_view *g1 = wanted(c, 1) ? c->outputs[1] : NULL, *g2 = wanted(c, 2) ? c->outputs[2] : NULL;
    if (g1 || g2) { /* GEMMs before the OpenMP reduction, as in linear_backward */
        opc_matmul_operand x, y;
        if (!operand_of(c, 2, 1, &x) || !operand_of(c, 3, 2, &y) || x.ndim != 2 || y.ndim != 2)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected 2-d mat1 and mat2", c->op);
        if ((g1 && !opc_same_shape(2, x.shape, g1)) || (g2 && !opc_same_shape(2, y.shape, g2)))
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: gradient outputs must have the inputs' shapes", c->op);
        opc_matmul_problem p = {x, y, false, alpha};
        if ((rc = matmul_bwd(c, dt, g, &p, g1, g2))) return rc;
    }
    return gs ? sum_to_scaled(c, c->op, g, gs, beta) : OPR_OK;
}

int cpu_register_backward(opr_plugin *self)
{
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    const struct { const char *op; opr_kernel_fn fn; } table[] = {
        {"mm_backward", k_mm_backward},         {"bmm_backward", k_bmm_backward},
        {"matmul_backward", k_matmul_backward}, {"linear_backward", k_linear_backward},
        {"addmm_backward", k_addmm_backward},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = cpu_register(self, table[i].op, dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
