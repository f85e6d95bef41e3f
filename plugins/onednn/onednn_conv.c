/* f32 convolution kernels on oneDNN: convolution, convolution_backward_weight, and
 * convolution_backward, which also serves as the fused backward
 * convolution_backward_fused. Their arguments are those of the CPU plugin's kernels
 * (plugins/cpu/cpu_conv.c), whose f32 kernels these replace (override_dtypes); the f64
 * ones stay the CPU plugin's, the reference `opreg check` compares these with.
 *
 * A transposed convolution is the same three primitives with the images' roles swapped
 * (plugins/common/opc_conv.h): its forward is oneDNN's backward data, its input's
 * gradient a forward convolution, and its weight's gradient a backward weights with the
 * big image its output's gradient. Strided (non-contiguous) operands are made dense
 * first; the bias of a convolution is fused into the forward primitive and its gradient
 * into the backward weights one when both are wanted. */
#include "onednn_common.h"
#include "../common/opc_shape.h"
#include "../common/opc_strided_copy.h"

#include <stdlib.h>
#include <string.h>

static const opr_tensor_view *arg_t(const opr_kernel_call *c, int i)
{
    return c->args[i]->kind == OPR_ARG_TENSOR ? c->args[i]->u.t : NULL;
}
static int64_t arg_i(const opr_kernel_call *c, int i) { return c->args[i]->kind == OPR_ARG_INT ? c->args[i]->u.i : 0; }
static bool arg_b(const opr_kernel_call *c, int i)
{
    return c->args[i]->kind == OPR_ARG_BOOL ? c->args[i]->u.b : arg_i(c, i) != 0;
}

/* v's data as a contiguous buffer: v's own when it is contiguous, else a copy in
 * *owned (free it); NULL for a NULL v or when out of memory. */
static float *dense(const opr_tensor_view *v, void **owned)
{
    *owned = NULL;
    if (!v) return NULL;
    int64_t st[OPR_MAX_DIMS];
    opc_contig_strides(v->ndim, v->shape, st);
    bool contiguous = true;
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] != 1 && v->strides[d] != st[d]) contiguous = false;
    if (contiguous) return v->data;
    if (!(*owned = malloc(v->numel ? (size_t)v->numel * sizeof(float) : 1))) return NULL;
    opc_copy_strided(sizeof(float), v->ndim, v->shape, *owned, st, v->data, v->strides);
    return *owned;
}

static int check_f32(const opr_kernel_call *c, const opr_tensor_view *v)
{
    if (!v || v->dtype == OPR_F32) return OPR_OK;
    return ONEDNN_FAIL(c, OPR_ERR_INVALID, "%s: an operand of dtype %d where f32 was expected", c->op, (int)v->dtype);
}

/* The geometry of a call (big, small, weight shapes; the per-dim args at ai). */
static int geometry(const opr_kernel_call *c, int32_t ndim, const int64_t *big, const int64_t *small, const int64_t *w, int ai,
                    int64_t groups, opc_conv *g)
{
    char why[OPC_WHY_SIZE];
    if (!opc_conv_geometry(c->op, ndim, big, small, w, c->args[ai], c->args[ai + 1], c->args[ai + 2], groups, g, why, sizeof why))
        return ONEDNN_FAIL(c, OPR_ERR_INVALID, "%s", why);
    return OPR_OK;
}

/* out[n, c, ...] += bias[c] (a transposed convolution's bias: oneDNN's backward data has
 * none). */
static void add_bias(const float *bias, opr_tensor_view *out)
{
    const int64_t n = out->shape[0], ch = out->shape[1], inner = n && ch ? out->numel / (n * ch) : 0;
    float *o = out->data;
    for (int64_t r = 0; r < n * ch; r++)
        for (int64_t i = 0; i < inner; i++) o[r * inner + i] += bias[r % ch];
}

/* db[c] = the sum of g[:, c, ...] (g contiguous), in double. */
static void bias_grad(const opr_tensor_view *gv, const float *g, float *db)
{
    const int64_t n = gv->shape[0], ch = gv->shape[1], inner = n && ch ? gv->numel / (n * ch) : 0;
    for (int64_t cc = 0; cc < ch; cc++) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < inner; j++) acc += g[(i * ch + cc) * inner + j];
        db[cc] = (float)acc;
    }
}

/* convolution: args (input, weight, bias, stride, padding, dilation, transposed,
 * output_padding, groups). */
static int k_convolution(const opr_kernel_call *c)
{
    const opr_tensor_view *x = arg_t(c, 0), *w = arg_t(c, 1), *bias = arg_t(c, 2);
    opr_tensor_view *y = c->outputs[0];
    const bool tr = arg_b(c, 6);
    if (!x || !w) return ONEDNN_FAIL(c, OPR_ERR_INVALID, "convolution: expected input and weight tensors");
    int rc = check_f32(c, x);
    if (!rc) rc = check_f32(c, w);
    if (!rc) rc = check_f32(c, bias);
    if (!rc) rc = check_f32(c, y);
    opc_conv g;
    if (!rc) rc = geometry(c, x->ndim, tr ? y->shape : x->shape, tr ? x->shape : y->shape, w->shape, 3, arg_i(c, 8), &g);
    if (rc || y->numel == 0) return rc;
    void *ox, *ow, *ob;
    float *px = dense(x, &ox), *pw = dense(w, &ow), *pb = dense(bias, &ob);
    if ((x->numel && !px) || (w->numel && !pw) || (bias && !pb))
        rc = ONEDNN_FAIL(c, OPR_ERR_NOMEM, "convolution: out of memory for a contiguous copy");
    else if (!tr)
        rc = onednn_conv_run(c, &g, x->ndim, ONEDNN_TO_SMALL, px, pw, y->data, pb);
    else if (!(rc = onednn_conv_run(c, &g, x->ndim, ONEDNN_TO_BIG, y->data, pw, px, NULL)) && pb)
        add_bias(pb, y);
    free(ox);
    free(ow);
    free(ob);
    return rc;
}

/* convolution_backward_weight: args (grad_output, input, weight_size, stride, padding,
 * dilation, transposed, groups). */
static int k_convolution_backward_weight(const opr_kernel_call *c)
{
    const opr_tensor_view *gy = arg_t(c, 0), *x = arg_t(c, 1);
    opr_tensor_view *dw = c->outputs[0];
    const bool tr = arg_b(c, 6);
    if (!gy || !x) return ONEDNN_FAIL(c, OPR_ERR_INVALID, "convolution_backward_weight: expected grad_output and input tensors");
    int rc = check_f32(c, gy);
    if (!rc) rc = check_f32(c, x);
    if (!rc) rc = check_f32(c, dw);
    opc_conv g;
    if (!rc) rc = geometry(c, x->ndim, tr ? gy->shape : x->shape, tr ? x->shape : gy->shape, dw->shape, 3, arg_i(c, 7), &g);
    if (rc || dw->numel == 0) return rc;
    void *og, *ox;
    float *pg = dense(gy, &og), *px = dense(x, &ox);
    if ((gy->numel && !pg) || (x->numel && !px))
        rc = ONEDNN_FAIL(c, OPR_ERR_NOMEM, "convolution_backward_weight: out of memory for a contiguous copy");
    else
        rc = onednn_conv_run(c, &g, x->ndim, ONEDNN_WEIGHT_GRAD, tr ? pg : px, dw->data, tr ? px : pg, NULL);
    free(og);
    free(ox);
    return rc;
}

/* convolution_backward (ATen's: args (grad_output, input, weight, bias_sizes, stride,
 * padding, dilation, transposed, output_padding, groups, output_mask)) and
 * convolution_backward_fused (the mask in grad_input_mask, tensors the plan did not save
 * NONE, unwanted outputs with NULL data), as the CPU plugin reads them. */
static int k_convolution_backward(const opr_kernel_call *c)
{
    const bool fused = c->grad_input_mask != 0;
    unsigned mask = (unsigned)c->grad_input_mask;
    if (!fused && c->args[10]->kind == OPR_ARG_INT_LIST)
        for (int i = 0; i < c->args[10]->u.il.n && i < 3; i++) mask |= (c->args[10]->u.il.items[i] ? 1u : 0u) << i;
    if (c->nout < 3) return ONEDNN_FAIL(c, OPR_ERR_INVALID, "%s: expected 3 outputs", c->op);
    opr_tensor_view *dx = mask & 1 ? c->outputs[0] : NULL, *dw = mask & 2 ? c->outputs[1] : NULL,
                    *db = mask & 4 ? c->outputs[2] : NULL;
    const opr_tensor_view *gy = arg_t(c, 0), *x = arg_t(c, 1), *w = arg_t(c, 2);
    const bool tr = arg_b(c, 7);
    if (!gy) return ONEDNN_FAIL(c, OPR_ERR_INVALID, "%s: expected grad_output", c->op);
    if ((dx && !w) || (dw && !x))
        return ONEDNN_FAIL(c, OPR_ERR_INVALID, "%s: %s was not given", c->op, dx && !w ? "weight" : "input");
    const int64_t *xs = x ? x->shape : dx ? dx->shape : NULL, *ws = w ? w->shape : dw ? dw->shape : NULL;
    int rc = check_f32(c, gy);
    if (!rc) rc = check_f32(c, x);
    if (!rc) rc = check_f32(c, w);
    opc_conv g;
    if (!rc && (dx || dw)) {
        if (!xs || !ws) return ONEDNN_FAIL(c, OPR_ERR_INVALID, "%s: the shapes of input and weight are unknown", c->op);
        rc = geometry(c, gy->ndim, tr ? gy->shape : xs, tr ? xs : gy->shape, ws, 4, arg_i(c, 9), &g);
    }
    if (rc) return rc;
    if (db && db->numel && db->numel != gy->shape[1])
        return ONEDNN_FAIL(c, OPR_ERR_INVALID, "%s: the bias gradient has %lld elements for %lld channels", c->op,
                           (long long)db->numel, (long long)gy->shape[1]);
    void *og = NULL, *ox = NULL, *ow = NULL;
    float *pg = dense(gy, &og), *px = dw ? dense(x, &ox) : NULL, *pw = dx ? dense(w, &ow) : NULL;
    if ((gy->numel && !pg) || (dw && x->numel && !px) || (dx && w->numel && !pw))
        rc = ONEDNN_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", c->op);
    if (!rc && dx && dx->numel)
        rc = tr ? onednn_conv_run(c, &g, gy->ndim, ONEDNN_TO_SMALL, pg, pw, dx->data, NULL)
                : onednn_conv_run(c, &g, gy->ndim, ONEDNN_TO_BIG, dx->data, pw, pg, NULL);
    /* a convolution's bias gradient comes with its weight's from one primitive */
    const bool db_fused = dw && dw->numel && db && db->numel && !tr;
    if (!rc && dw && dw->numel)
        rc = onednn_conv_run(c, &g, gy->ndim, ONEDNN_WEIGHT_GRAD, tr ? pg : px, dw->data, tr ? px : pg,
                             db_fused ? db->data : NULL);
    if (!rc && db && db->numel && !db_fused) bias_grad(gy, pg, db->data);
    free(og);
    free(ox);
    free(ow);
    return rc;
}

/* Declines calls with an operand that is not f32 (the registry's common dtype is, but a
 * mixed call reaches the kernel to be refused there) so that the message says so up
 * front. Every geometry the CPU kernel takes, this one takes. */
static bool f32_only(const opr_kernel_call *c, char *why, size_t why_len)
{
    for (int i = 0; i < c->nargs; i++)
        if (c->args[i]->kind == OPR_ARG_TENSOR && c->args[i]->u.t->dtype != OPR_F32) {
            snprintf(why, why_len, "oneDNN kernels take f32 operands only (argument %d is not)", i);
            return false;
        }
    return true;
}

int onednn_register_conv(opr_plugin *self, const opr_host_api *host)
{
    static const struct { const char *op; opr_kernel_fn fn; } table[] = {
        {"convolution", k_convolution},
        {"convolution_backward_weight", k_convolution_backward_weight},
        {"convolution_backward", k_convolution_backward},
        {"convolution_backward_fused", k_convolution_backward},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const opr_kernel_desc d = {
            .struct_size = sizeof d, .op = table[i].op, .device = "cpu", .dtypes = OPR_DTYPE_BIT(OPR_F32),
            .fn = table[i].fn, .override_dtypes = OPR_DTYPE_BIT(OPR_F32), .supports = f32_only,
        };
        int rc = host->register_kernel(self, &d);
        if (rc) return rc;
    }
    return OPR_OK;
}
