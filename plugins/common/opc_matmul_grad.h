/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the fused
 * backward of a matrix product x @ y with torch.matmul semantics (mm, bmm, matmul,
 * linear, addmm) as reducing batched GEMMs (opc_rgemm.h):
 *
 *     gx = alpha * g @ y^T,  gy = alpha * x^T @ g,
 *
 * each summed over the batch dims its operand was broadcast along. A 1-d x is a row and
 * a 1-d y a column (the dims that adds are absent from g). This file checks the shapes
 * and sets up the products; the plugin runs each one (opc_matmul_grad_run). */
#ifndef OPREG_OPC_MATMUL_GRAD_H
#define OPREG_OPC_MATMUL_GRAD_H

#include "opc_rgemm.h"

#include <stdio.h>


/* A forward operand, or only its shape (data and strides NULL) when the plan did not
 * save it: then only the other operand's gradient can be computed. */
typedef struct {
    const void *data;
    int32_t ndim;
    const int64_t *shape, *strides;
} opc_matmul_operand;

/* The saved forward argument t, else the shape of gradient output `out` of c when that
 * is asked for (an input the plan did not save is always one whose gradient is asked
 * for, so its shape is the output's). False when neither. */
static inline bool opc_matmul_operand_of(const opr_kernel_call *c, const opr_tensor_view *t, int out,
                                         opc_matmul_operand *o)
{
    memset(o, 0, sizeof *o);
    if (t) {
        o->data = t->data;
        o->ndim = t->ndim;
        o->shape = t->shape;
        o->strides = t->strides;
        return true;
    }
    if (out >= c->nout || !((c->grad_input_mask >> out) & 1)) return false;
    o->ndim = c->outputs[out]->ndim;
    o->shape = c->outputs[out]->shape;
    return true;
}

/* y_t: y is given transposed (linear's weight [out, in] is y^T), and must be 2-d. */
typedef struct {
    opc_matmul_operand x, y;
    bool y_t;
    double alpha;
} opc_matmul_problem;

/* One product to run: C of job = A @ B, summed as the job says. */
typedef struct {
    opc_rgemm job;
    opc_bmat a, b;
} opc_rgemm_product;

/* Runs one product on the plugin's GEMM; ctx is the plugin's. Returns an opreg status
 * (after host->set_error when it is an error). */
typedef int (*opc_rgemm_run_fn)(void *ctx, const opc_rgemm_product *pr);

/* What both gradients share. */
typedef struct {
    opc_rgemm base;                /* the product's batch shape; no C yet */
    opc_bmat g;                    /* the output gradient as [batch..., n, m] matrices */
    int32_t vb[2];                 /* batch dims of x and of y */
} opc_matmul_grad;

/* Checks that x and y multiply (batch dims broadcast, inner dims agree) and that g has
 * the product's shape, and fills mg. Returns false with the message in why. */
static inline bool opc_matmul_grad_plan(const char *op, opr_dtype dt, const opr_tensor_view *g,
                                        const opc_matmul_problem *p, opc_matmul_grad *mg, char *why, size_t why_size)
{
    const opc_matmul_operand *x = &p->x, *y = &p->y;
    const int32_t xd = x->ndim, yd = y->ndim;
    if (xd < 1 || yd < 1) {
        snprintf(why, why_size, "%s: operands need at least 1 dim", op);
        return false;
    }
    opc_rgemm *base = &mg->base;
    *base = opc_rgemm_job(op, dt, p->alpha, 0);
    const int32_t xb = xd > 2 ? xd - 2 : 0, yb = yd > 2 ? yd - 2 : 0;
    mg->vb[0] = xb;
    mg->vb[1] = yb;
    base->nb = xb > yb ? xb : yb;
    if (base->nb > OPR_MAX_DIMS) {
        snprintf(why, why_size, "%s: too many batch dims", op);
        return false;
    }
    for (int32_t d = 0; d < base->nb; d++) {
        const int32_t dx = d - (base->nb - xb), dy = d - (base->nb - yb);
        const int64_t sx = dx >= 0 ? x->shape[dx] : 1, sy = dy >= 0 ? y->shape[dy] : 1;
        if (sx != sy && sx != 1 && sy != 1) {
            snprintf(why, why_size, "%s: batch dims do not broadcast", op);
            return false;
        }
        base->bshape[d] = sx == 1 ? sy : sx;
    }
    /* x as [n, K], y as [K, m] */
    const int64_t n = xd == 1 ? 1 : x->shape[xd - 2], K = x->shape[xd - 1];
    int64_t yk = yd == 1 ? y->shape[0] : y->shape[yd - 2], m = yd == 1 ? 1 : y->shape[yd - 1];
    if (p->y_t) { /* y given as y^T [m, K] */
        if (yd != 2) {
            snprintf(why, why_size, "%s: a transposed operand must be 2-d", op);
            return false;
        }
        yk = y->shape[1];
        m = y->shape[0];
    }
    if (yk != K) {
        snprintf(why, why_size, "%s: inner dimensions differ (%lld vs %lld)", op, (long long)K, (long long)yk);
        return false;
    }
    /* g is [batch..., n (if x is not 1-d), m (if y is not 1-d)] */
    const int32_t gd = base->nb + (xd >= 2) + (yd >= 2);
    bool gok = g->ndim == gd;
    for (int32_t d = 0; gok && d < base->nb; d++) gok = g->shape[d] == base->bshape[d];
    if (gok && xd >= 2) gok = g->shape[base->nb] == n;
    if (gok && yd >= 2) gok = g->shape[gd - 1] == m;
    if (!gok) {
        snprintf(why, why_size, "%s: the output gradient has the wrong shape", op);
        return false;
    }
    memset(&mg->g, 0, sizeof mg->g);
    mg->g.data = (const char *)g->data;
    mg->g.rows = n;
    mg->g.cols = m;
    mg->g.rs = xd >= 2 ? g->strides[base->nb] : 0;
    mg->g.cs = yd >= 2 ? g->strides[gd - 1] : 0;
    opc_bmat_set_batch_strides(&mg->g, base->nb, base->nb, g->shape, g->strides);
    return true;
}

/* The product that computes the gradient of operand `which` (0: x, 1: y) into the
 * contiguous grad: gx = g @ y^T, gy = x^T @ g. Returns false when the other operand was
 * not saved. */
static inline bool opc_matmul_grad_product(const opc_matmul_grad *mg, const opc_matmul_problem *p, int which,
                                           const opr_tensor_view *grad, opc_rgemm_product *pr)
{
    const opc_matmul_operand *other = which == 0 ? &p->y : &p->x;
    if (!other->data) return false;
    /* x is the left operand (a 1-d x is a row), y the right one (a 1-d y a column) */
    opc_bmat o = opc_bmat_of(other->data, other->ndim, other->shape, other->strides, which == 1);
    opc_bmat_set_batch_strides(&o, mg->base.nb, mg->vb[1 - which], other->shape, other->strides);
    pr->job = mg->base;
    opc_rgemm_set_c(&pr->job, grad, mg->vb[which]);
    if (which == 0) { /* g @ y^T, where a y given as y^T is read as it is */
        pr->a = mg->g;
        pr->b = p->y_t ? o : opc_bmat_transpose(o);
    } else if (p->y_t) { /* y's gradient in y's layout: (x^T @ g)^T = g^T @ x */
        pr->a = opc_bmat_transpose(mg->g);
        pr->b = o;
    } else {
        pr->a = opc_bmat_transpose(o);
        pr->b = mg->g;
    }
    return true;
}

/* The backward of op: gx then gy (either NULL when not wanted), each through run.
 * Returns OPR_OK or run's status with why "", or OPR_ERR_INVALID with the message for
 * host->set_error in why (the shapes do not fit, or an operand a gradient needs was not
 * saved). */
static inline int opc_matmul_grad_run(const char *op, opr_dtype dt, const opr_tensor_view *g,
                                      const opc_matmul_problem *p, opr_tensor_view *gx, opr_tensor_view *gy,
                                      opc_rgemm_run_fn run, void *ctx, char *why, size_t why_size)
{
    why[0] = '\0';
    opc_matmul_grad mg;
    if (!opc_matmul_grad_plan(op, dt, g, p, &mg, why, why_size)) return OPR_ERR_INVALID;
    const opr_tensor_view *grads[2] = {gx, gy};
    for (int which = 0; which < 2; which++) {
        if (!grads[which]) continue;
        opc_rgemm_product pr;
        if (!opc_matmul_grad_product(&mg, p, which, grads[which], &pr)) {
            snprintf(why, why_size, "%s: the other operand was not saved", op);
            return OPR_ERR_INVALID;
        }
        const int rc = run(ctx, &pr);
        if (rc) return rc;
    }
    return OPR_OK;
}

#endif
