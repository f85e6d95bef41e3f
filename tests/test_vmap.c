/* opr_vmap: every op of the registry, on every sample of its YAML entry, with every
 * non-empty set of its tensor arguments batched, against a loop of unbatched calls:
 * the outputs, and the per-sample gradients (opr_autograd_grad inside the callback)
 * of sum(first floating output) with respect to every floating argument. Then the
 * API's rules: nesting, chunks, gradients from outside, bad input, and (with the
 * emulated CUDA plugin, OPREG_TEST_EMU) the same on a device. */
#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NB = 3 }; /* samples per batch */

static opr_ctx *ctx;

/* ------------------------------------------------------------------ helpers */

/* NB tensors of one shape stacked on a new dim 0 (host copy; any dtype). */
static opr_tensor *stack_host(opr_tensor *const *ts)
{
    const opr_tensor *t = ts[0];
    const int nd = opr_tensor_ndim(t);
    const size_t bytes = (size_t)opr_tensor_numel(t) * opr_dtype_size(opr_tensor_dtype(t));
    char *buf = malloc(bytes * NB + 1);
    for (int s = 0; s < NB; s++) ck_assert_int_eq(opr_tensor_copy_to_host(ts[s], buf + bytes * s, bytes), OPR_OK);
    int64_t shape[OPR_MAX_DIMS];
    shape[0] = NB;
    for (int d = 0; d < nd; d++) shape[d + 1] = opr_tensor_size(t, d);
    opr_tensor *out = opr_tensor_from_data(ctx, opr_tensor_dtype(t), nd + 1, shape, buf, OPR_CPU);
    free(buf);
    return out;
}

/* Sample s of a physical batch [NB, ...] as f64 values. */
static double *slice_f64(const opr_tensor *batch, int s, int64_t *n)
{
    double *all = tu_to_f64(batch);
    *n = opr_tensor_numel(batch) / NB;
    double *out = malloc((size_t)(*n ? *n : 1) * sizeof *out);
    memcpy(out, all + s * *n, (size_t)*n * sizeof *out);
    free(all);
    return out;
}

static bool close_enough(const double *a, const double *b, int64_t n, double tol, int64_t *at)
{
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(b[i])) continue;
        if (!(fabs(a[i] - b[i]) <= tol * (1 + fabs(b[i])))) { *at = i; return false; }
    }
    return true;
}

/* ------------------------------------------------------------------ one op, one mask */

typedef struct opcall {
    const opr_op *op;
    opr_value args[12];
    int nargs;
    int tpos[12];      /* argument positions of the tensors */
    int nt;
    bool grads;        /* the callback returns gradients, not outputs */
    int nfloat;        /* floating tensor arguments (gradients returned) */
} opcall;

/* The op on per-sample tensors in[0..nt): its outputs, or its gradients. */
static opr_status per_sample(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    const opcall *c = ud;
    (void)nin;
    opr_value a[12];
    memcpy(a, c->args, sizeof a);
    for (int k = 0; k < c->nt; k++) a[c->tpos[k]] = opr_v_tensor(in[k]);
    opr_tensor *res[4] = {NULL};
    const int nres = opr_op_num_outputs(c->op);
    int rc = opr_call(c->op, a, c->nargs, res, nres);
    if (rc) return rc;
    if (!c->grads) {
        for (int k = 0; k < nout; k++) out[k] = res[k];
        return OPR_OK;
    }
    int f = -1;
    for (int k = 0; k < nres && f < 0; k++)
        if (opr_dtype_is_floating(opr_tensor_dtype(res[k]))) f = k;
    opr_tensor *loss = NULL;
    opr_value sa = opr_v_tensor(res[f]);
    rc = opr_call_by_name(opr_tensor_ctx(in[0]), "sum", &sa, 1, &loss, 1);
    opr_tensor *wrt[12], *g[12] = {NULL};
    int nw = 0;
    for (int k = 0; k < c->nt; k++)
        if (opr_dtype_is_floating(opr_tensor_dtype(in[k]))) wrt[nw++] = in[k];
    if (!rc) rc = opr_autograd_grad(&loss, NULL, 1, wrt, nw, g, NULL);
    for (int k = 0; !rc && k < nw; k++) { /* an input without influence: a zero of its shape */
        if (g[k]) { out[k] = g[k]; continue; }
        opr_value z[2] = {opr_v_tensor(wrt[k]), opr_v_ints(opr_tensor_shape(wrt[k]), opr_tensor_ndim(wrt[k]))};
        rc = opr_call_by_name(opr_tensor_ctx(in[0]), "new_zeros", z, 2, &out[k], 1);
    }
    for (int k = 0; k < nres; k++) opr_tensor_release(res[k]);
    opr_tensor_release(loss);
    return rc;
}

typedef struct tally {
    int masks, fwd, grad, refused;
} tally;

/* Compares opr_vmap of the op (outputs or gradients) with a loop over the samples. */
static void check_mask(opcall *c, opr_tensor *per[][12], uint32_t mask, tally *t, const char *what)
{
    opr_tensor *in[12], *batched[12] = {NULL};
    int in_dims[12];
    for (int k = 0; k < c->nt; k++) {
        if ((mask >> k) & 1) {
            opr_tensor *col[NB];
            for (int s = 0; s < NB; s++) col[s] = per[s][k];
            batched[k] = stack_host(col);
            in[k] = batched[k];
            in_dims[k] = 0;
        } else {
            in[k] = per[0][k];
            in_dims[k] = -1;
        }
    }
    /* gradients: the floating inputs are leaves that require grad */
    opr_tensor *leaves[12] = {NULL};
    if (c->grads)
        for (int k = 0; k < c->nt; k++)
            if (opr_dtype_is_floating(opr_tensor_dtype(in[k]))) {
                leaves[k] = opr_tensor_detach(in[k]);
                opr_set_requires_grad(leaves[k], true);
                in[k] = leaves[k];
            }
    const int nout = c->grads ? c->nfloat : opr_op_num_outputs(c->op);
    opr_tensor *out[12] = {NULL};
    int rc = opr_vmap(ctx, per_sample, c, in, in_dims, c->nt, out, NULL, nout, NULL);
    const char *name = opr_op_name(c->op);
    if (rc == OPR_ERR_UNSUPPORTED && (strstr(opr_last_error(), "output size") || /* data-dependent: documented */
                                      strstr(opr_last_error(), "is written in place and is not batched") ||
                                      strstr(opr_last_error(), "cannot be resized under opr_vmap"))) {
        t->refused++;
    } else {
        ck_assert_msg(rc == OPR_OK, "vmap %s (%s, mask %u): %s", name, what, mask, opr_last_error());
        for (int s = 0; s < NB; s++) {
            /* the loop: sample s of the batched arguments, the shared others */
            opr_tensor *ins[12], *ref[12] = {NULL};
            for (int k = 0; k < c->nt; k++) {
                ins[k] = ((mask >> k) & 1) ? per[s][k] : per[0][k];
                if (c->grads && opr_dtype_is_floating(opr_tensor_dtype(ins[k]))) {
                    ins[k] = opr_tensor_detach(ins[k]);
                    opr_set_requires_grad(ins[k], true);
                } else {
                    opr_tensor_retain(ins[k]);
                }
            }
            ck_assert_msg(per_sample(c, ins, c->nt, ref, nout) == OPR_OK, "loop %s: %s", name, opr_last_error());
            for (int k = 0; k < nout; k++) {
                int64_t n, at = 0, nref = opr_tensor_numel(ref[k]);
                double *got = slice_f64(out[k], s, &n), *want = tu_to_f64(ref[k]);
                ck_assert_msg(n == nref, "vmap %s (%s, mask %u) output %d: %lld elements per sample, the loop %lld", name,
                              what, mask, k, (long long)n, (long long)nref);
                ck_assert_msg(close_enough(got, want, n, 1e-11, &at), "vmap %s (%s, mask %u) output %d sample %d element "
                              "%lld: %.17g, the loop %.17g", name, what, mask, k, s, (long long)at, got[at], want[at]);
                free(got);
                free(want);
                opr_tensor_release(ref[k]);
            }
            for (int k = 0; k < c->nt; k++) opr_tensor_release(ins[k]);
        }
        if (c->grads) t->grad++; else t->fwd++;
    }
    for (int k = 0; k < nout; k++) opr_tensor_release(out[k]);
    for (int k = 0; k < c->nt; k++) { opr_tensor_release(batched[k]); opr_tensor_release(leaves[k]); }
}

START_TEST(test_every_op_against_the_loop)
{
    ctx = tu_ctx();
    int nops = 0, total_masks = 0;
    for (int i = 0; i < opr_op_count(ctx); i++) {
        const opr_op *op = opr_op_at(ctx, i);
        const char *name = opr_op_name(op);
        if (name[strlen(name) - 1] == '_') continue; /* in place: refused under vmap, tested below */
        tally t = {0};
        for (int smp = 0; smp < opr_op_sample_count(op); smp++) {
            opcall c = {.op = op};
            opr_tensor *per[NB][12], *owned[NB][OPR_SAMPLE_MAX_TENSORS];
            int nowned[NB];
            bool lists = false;
            for (int s = 0; s < NB; s++) {
                int rc = opr_op_sample_args(op, smp, OPR_F64, OPR_CPU, 100 + (uint64_t)s, c.args, &c.nargs, owned[s], &nowned[s]);
                ck_assert_msg(rc == OPR_OK, "%s sample %d: %s", name, smp, opr_last_error());
                c.nt = 0;
                for (int a = 0; a < c.nargs; a++) {
                    if (c.args[a].kind == OPR_V_TENSOR_LIST) lists = true;
                    if (c.args[a].kind != OPR_V_TENSOR) continue;
                    c.tpos[c.nt] = a;
                    per[s][c.nt++] = c.args[a].u.t;
                }
            }
            /* the call's template: sample 0's tensors (the scalars are the same in all) */
            for (int k = 0; k < c.nt; k++) c.args[c.tpos[k]] = opr_v_tensor(per[0][k]);
            c.nfloat = 0;
            for (int k = 0; k < c.nt; k++) c.nfloat += opr_dtype_is_floating(opr_tensor_dtype(per[0][k]));
            bool floating_out = false;
            /* Tensor[] ops (cat) run by the loop; ops returning a Tensor[] (split) are refused
             * by opr_vmap for now: see test_tensor_lists */
            if (opr_op_returns_list(op)) printf("vmap %-22s returns Tensor[]: not supported, skipped\n", opr_op_name(op));
            if (c.nt > 0 && !lists && !opr_op_returns_list(op)) {
                for (uint32_t mask = 1; mask < (1u << c.nt); mask++) {
                    c.grads = false;
                    check_mask(&c, per, mask, &t, "outputs");
                    t.masks++;
                }
                /* gradients where the op has formulas and a floating output */
                opr_tensor *probe[4] = {NULL};
                /* (gradients with respect to every floating argument: not for an op that writes
                 * one, as batch norm its running statistics) */
                bool writes = false;
                for (int a = 0; a < c.nargs; a++)
                    writes |= opr_op_arg_written(op, a) || (c.args[a].kind == OPR_V_TENSOR && !tu_arg_differentiable(op, a) &&
                                                            opr_dtype_is_floating(opr_tensor_dtype(c.args[a].u.t)));
                if (opr_op_grad_candidate_count(op) > 0 && c.nfloat > 0 && !writes &&
                    opr_call(op, c.args, c.nargs, probe, opr_op_num_outputs(op)) == OPR_OK) {
                    for (int k = 0; k < opr_op_num_outputs(op); k++) {
                        floating_out |= opr_dtype_is_floating(opr_tensor_dtype(probe[k]));
                        opr_tensor_release(probe[k]);
                    }
                    for (uint32_t mask = 1; floating_out && mask < (1u << c.nt); mask++) {
                        c.grads = true;
                        check_mask(&c, per, mask, &t, "gradients");
                    }
                }
            }
            for (int s = 0; s < NB; s++)
                for (int k = 0; k < nowned[s]; k++) opr_tensor_release(owned[s][k]);
        }
        if (t.masks) {
            nops++;
            total_masks += t.masks;
            printf("vmap %-20s rule %-14s %2d mask(s): outputs %d, gradients %d, refused (data-dependent) %d\n", name,
                   opr_op_batching_rule(op), t.masks, t.fwd, t.grad, t.refused);
        }
    }
    printf("vmap: %d ops, %d sample x mask cases\n", nops, total_masks);
    ck_assert_int_gt(nops, 50);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ the API */

/* f(x, w) = sum(tanh(x * w)) of one row x [D] and a shared w [D]; out: f and df/dw */
static opr_status row_loss(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)ud; (void)nin; (void)nout;
    opr_tensor *m = NULL, *t = NULL, *l = NULL, *g = NULL;
    int rc = opr_call_by_name(ctx, "mul", (opr_value[]){opr_v_tensor(in[0]), opr_v_tensor(in[1])}, 2, &m, 1);
    if (!rc) rc = opr_call_by_name(ctx, "tanh", (opr_value[]){opr_v_tensor(m)}, 1, &t, 1);
    if (!rc) rc = opr_call_by_name(ctx, "sum", (opr_value[]){opr_v_tensor(t)}, 1, &l, 1);
    opr_tensor *w = in[1];
    if (!rc) rc = opr_autograd_grad(&l, NULL, 1, &w, 1, &g, NULL);
    opr_tensor_release(m);
    opr_tensor_release(t);
    if (rc) { opr_tensor_release(l); return rc; }
    out[0] = l;
    out[1] = g;
    return OPR_OK;
}

/* the rows of one matrix, mapped again: a nested vmap */
static opr_status matrix_loss(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)nin;
    return opr_vmap(ctx, row_loss, ud, in, (int[]){0, -1}, 2, out, NULL, nout, NULL);
}

START_TEST(test_nested_and_chunks)
{
    ctx = tu_ctx();
    tu_seed(11);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 3, (int64_t[]){2, 3, 4}, -1, 1), *w = tu_rand(ctx, OPR_F64, 1, (int64_t[]){4}, -1, 1);
    ck_assert_int_eq(opr_set_requires_grad(w, true), OPR_OK);
    double *xd = tu_to_f64(x), *wd = tu_to_f64(w);
    opr_tensor *out[2];
    ck_assert_msg(opr_vmap(ctx, matrix_loss, NULL, (opr_tensor *[]){x, w}, (int[]){0, -1}, 2, out, NULL, 2, NULL) == OPR_OK,
                  "%s", opr_last_error());
    ck_assert_int_eq(opr_tensor_ndim(out[0]), 2);
    ck_assert_int_eq(opr_tensor_ndim(out[1]), 3);
    double *l = tu_to_f64(out[0]), *g = tu_to_f64(out[1]);
    for (int r = 0; r < 6; r++) {
        double want = 0;
        for (int d = 0; d < 4; d++) {
            double t = tanh(xd[r * 4 + d] * wd[d]);
            want += t;
            ck_assert(fabs(g[r * 4 + d] - (1 - t * t) * xd[r * 4 + d]) < 1e-13);
        }
        ck_assert(fabs(l[r] - want) < 1e-13);
    }
    /* chunks of 2 of 6 rows (out_dims 1: the batch in the middle): the same numbers */
    opr_tensor *rows = tu_call1(ctx, "reshape", (opr_value[]){opr_v_tensor(x), opr_v_ints((int64_t[]){6, 4}, 2)}, 2);
    opr_vmap_opts o = {.struct_size = sizeof o, .chunk_size = 4};
    opr_tensor *c[2];
    ck_assert_msg(opr_vmap(ctx, row_loss, NULL, (opr_tensor *[]){rows, w}, (int[]){0, -1}, 2, c, (int[]){0, 1}, 2, &o) == OPR_OK,
                  "%s", opr_last_error());
    ck_assert_int_eq(opr_tensor_size(c[1], 0), 4);
    ck_assert_int_eq(opr_tensor_size(c[1], 1), 6);
    double *cl = tu_to_f64(c[0]), *cg = tu_to_f64(c[1]);
    for (int r = 0; r < 6; r++) {
        ck_assert(fabs(cl[r] - l[r]) < 1e-15);
        for (int d = 0; d < 4; d++) ck_assert(fabs(cg[d * 6 + r] - g[r * 4 + d]) < 1e-15);
    }
    free(xd); free(wd); free(l); free(g); free(cl); free(cg);
    opr_tensor *rel[] = {x, w, out[0], out[1], rows, c[0], c[1]};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) opr_tensor_release(rel[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* y = exp(x) * w per sample; gradients of sum(y) from outside, through opr_vmap */
static opr_status scaled_exp(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)ud; (void)nin; (void)nout;
    opr_tensor *e = NULL;
    int rc = opr_call_by_name(ctx, "exp", (opr_value[]){opr_v_tensor(in[0])}, 1, &e, 1);
    if (!rc) rc = opr_call_by_name(ctx, "mul", (opr_value[]){opr_v_tensor(e), opr_v_tensor(in[1])}, 2, &out[0], 1);
    opr_tensor_release(e);
    return rc;
}

START_TEST(test_gradients_from_outside)
{
    ctx = tu_ctx();
    tu_seed(12);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){5, 3}, -1, 1), *w = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1);
    opr_set_requires_grad(x, true);
    opr_set_requires_grad(w, true);
    for (int chunk = 0; chunk <= 2; chunk += 2) {
        opr_vmap_opts o = {.struct_size = sizeof o, .chunk_size = chunk};
        opr_tensor *y;
        ck_assert_msg(opr_vmap(ctx, scaled_exp, NULL, (opr_tensor *[]){x, w}, (int[]){0, -1}, 2, &y, NULL, 1, &o) == OPR_OK,
                      "%s", opr_last_error());
        ck_assert(opr_requires_grad(y));
        opr_tensor *l = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(y)}, 1), *g[2] = {NULL, NULL};
        ck_assert_msg(opr_autograd_grad(&l, NULL, 1, (opr_tensor *[]){x, w}, 2, g, NULL) == OPR_OK, "%s", opr_last_error());
        double *xd = tu_to_f64(x), *wd = tu_to_f64(w), *gx = tu_to_f64(g[0]), *gw = tu_to_f64(g[1]);
        for (int d = 0; d < 3; d++) {
            double sw = 0;
            for (int r = 0; r < 5; r++) {
                ck_assert(fabs(gx[r * 3 + d] - exp(xd[r * 3 + d]) * wd[d]) < 1e-14);
                sw += exp(xd[r * 3 + d]);
            }
            ck_assert(fabs(gw[d] - sw) < 1e-13);
        }
        free(xd); free(wd); free(gx); free(gw);
        opr_tensor_release(y); opr_tensor_release(l); opr_tensor_release(g[0]); opr_tensor_release(g[1]);
    }
    opr_tensor_release(x);
    opr_tensor_release(w);
    tu_ctx_free(ctx);
}
END_TEST

/* What the callbacks of the bad-input test do. */
typedef struct misuse {
    int what;
    opr_tensor *kept; /* a batched tensor kept past the call */
    opr_tensor *outer;
} misuse;

static opr_status misbehave(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    misuse *m = ud;
    (void)nin; (void)nout;
    switch (m->what) {
    case 0: m->kept = opr_tensor_retain(in[0]); out[0] = opr_tensor_retain(in[0]); return OPR_OK;
    case 1: /* an op that fails: its status and message come back from opr_vmap */
        return opr_call_by_name(ctx, "mm", (opr_value[]){opr_v_tensor(in[0]), opr_v_tensor(in[0])}, 2, out, 1);
    case 2: return OPR_OK; /* leaves out[0] NULL */
    case 3: { /* backward into a tensor from outside, which would keep a batched .grad */
        opr_tensor *p = NULL, *l = NULL;
        int rc = opr_call_by_name(ctx, "mul", (opr_value[]){opr_v_tensor(in[0]), opr_v_tensor(m->outer)}, 2, &p, 1);
        if (!rc) rc = opr_call_by_name(ctx, "sum", (opr_value[]){opr_v_tensor(p)}, 1, &l, 1);
        if (!rc) rc = opr_backward(l, NULL, NULL);
        opr_tensor_release(p);
        if (!rc) out[0] = l; else opr_tensor_release(l);
        return rc;
    }
    case 4: { /* in place, and views of the host, on a batched tensor */
        opr_tensor *r = NULL;
        int rc = opr_call_by_name(ctx, "fill_", (opr_value[]){opr_v_tensor(in[0]), opr_v_double(1)}, 2, &r, 1);
        if (rc != OPR_ERR_UNSUPPORTED || !strstr(opr_last_error(), "in-place ops on batched tensors")) return OPR_ERR_BACKEND;
        if (opr_tensor_transpose(in[0], 0, 0) || !strstr(opr_last_error(), "batched tensor")) return OPR_ERR_BACKEND;
        double buf[8];
        if (opr_tensor_copy_to_host(in[0], buf, sizeof buf) != OPR_ERR_UNSUPPORTED) return OPR_ERR_BACKEND;
        out[0] = opr_tensor_retain(in[0]);
        return OPR_OK;
    }
    default: out[0] = opr_tensor_retain(in[0]); return OPR_OK;
    }
}

START_TEST(test_bad_input)
{
    ctx = tu_ctx();
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){4, 2}, -1, 1), *y = tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 2}, -1, 1);
    opr_tensor *out[2] = {NULL, NULL};
    misuse m = {.what = 9};
    struct { opr_tensor *in[2]; int in_dims[2]; int nin; int out_dims; const char *needle; } cases[] = {
        {{x}, {2}, 1, 0, "in_dims[0] = 2 is out of range for a 2-d input"},
        {{x, y}, {0, 0}, 2, 0, "batch sizes disagree: input 0 has 4 at dim 0, input 1 has 3 at dim 0"},
        {{x}, {-1}, 1, 0, "no input is batched"},
        {{x}, {0}, 1, -1, "output 0 differs by sample but out_dims[0] is -1"},
        {{x}, {0}, 1, 2, "out_dims[0] = 2 is out of range for output 0, which has 1 dims per sample"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(opr_vmap(ctx, misbehave, &m, cases[i].in, cases[i].in_dims, cases[i].nin, out,
                                  &cases[i].out_dims, 1, NULL), OPR_ERR_INVALID);
        ck_assert_msg(strstr(opr_last_error(), cases[i].needle), "case %zu: %s", i, opr_last_error());
        ck_assert_ptr_null(out[0]);
    }
    /* NULLs and counts out of range */
    ck_assert_int_eq(opr_vmap(NULL, misbehave, &m, &x, NULL, 1, out, NULL, 1, NULL), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_vmap(ctx, NULL, &m, &x, NULL, 1, out, NULL, 1, NULL), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_vmap(ctx, misbehave, &m, NULL, NULL, 1, out, NULL, 1, NULL), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_vmap(ctx, misbehave, &m, &x, NULL, 1, NULL, NULL, 1, NULL), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_vmap(ctx, misbehave, &m, &x, NULL, 0, out, NULL, 1, NULL), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_vmap(ctx, misbehave, &m, &x, NULL, 1, out, NULL, 0, NULL), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_vmap(ctx, misbehave, &m, (opr_tensor *[]){NULL}, NULL, 1, out, NULL, 1, NULL), OPR_ERR_INVALID);
    opr_vmap_opts neg = {.struct_size = sizeof neg, .chunk_size = -1};
    ck_assert_int_eq(opr_vmap(ctx, misbehave, &m, &x, NULL, 1, out, NULL, 1, &neg), OPR_ERR_INVALID);
    ck_assert(!opr_tensor_is_batched(x) && !opr_tensor_is_batched(NULL));
    ck_assert_ptr_null(opr_op_batching_rule(NULL));
    /* a batched tensor kept past its call is refused */
    m.what = 0;
    ck_assert_int_eq(opr_vmap(ctx, misbehave, &m, &x, NULL, 1, out, NULL, 1, NULL), OPR_OK);
    opr_tensor_release(out[0]);
    ck_assert(opr_tensor_is_batched(m.kept));
    tu_expect_fail(ctx, "exp", (opr_value[]){opr_v_tensor(m.kept)}, 1, 1, OPR_ERR_INVALID, "of an opr_vmap that has returned");
    opr_tensor_release(m.kept);
    /* the callback's own error and message come back; a NULL output is named */
    m.what = 1;
    ck_assert_int_eq(opr_vmap(ctx, misbehave, &m, &x, NULL, 1, out, NULL, 1, NULL), OPR_ERR_INVALID);
    ck_assert_msg(strstr(opr_last_error(), "mm"), "%s", opr_last_error());
    m.what = 2;
    ck_assert_int_eq(opr_vmap(ctx, misbehave, &m, &x, NULL, 1, out, NULL, 1, NULL), OPR_ERR_INVALID);
    ck_assert(strstr(opr_last_error(), "left output 0 NULL"));
    m.what = 3;
    m.outer = tu_rand(ctx, OPR_F64, 1, (int64_t[]){2}, -1, 1);
    opr_set_requires_grad(m.outer, true);
    ck_assert_int_eq(opr_vmap(ctx, misbehave, &m, &x, NULL, 1, out, NULL, 1, NULL), OPR_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(opr_last_error(), "use opr_autograd_grad for per-sample gradients"), "%s", opr_last_error());
    ck_assert_ptr_null(opr_grad(m.outer));
    m.what = 4;
    ck_assert_msg(opr_vmap(ctx, misbehave, &m, &x, NULL, 1, out, NULL, 1, NULL) == OPR_OK, "%s", opr_last_error());
    opr_tensor_release(out[0]);
    opr_tensor_release(m.outer);
    opr_tensor_release(x);
    opr_tensor_release(y);
    tu_ctx_free(ctx);
}
END_TEST

/* cat of a batched and an unbatched tensor: the loop, with the Tensor[] sliced */
static opr_status cat_rows(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)ud; (void)nin; (void)nout;
    opr_tensor *items[2] = {in[0], in[1]};
    return opr_call_by_name(ctx, "cat", (opr_value[]){opr_v_tensors(items, 2), opr_v_int(0)}, 2, out, 1);
}

START_TEST(test_tensor_list)
{
    ctx = tu_ctx();
    tu_seed(13);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 2}, -1, 1), *y = tu_rand(ctx, OPR_F64, 1, (int64_t[]){4}, -1, 1);
    opr_tensor *out;
    ck_assert_msg(opr_vmap(ctx, cat_rows, NULL, (opr_tensor *[]){x, y}, (int[]){0, -1}, 2, &out, NULL, 1, NULL) == OPR_OK,
                  "%s", opr_last_error());
    ck_assert_int_eq(opr_tensor_size(out, 1), 6);
    double *o = tu_to_f64(out), *xd = tu_to_f64(x), *yd = tu_to_f64(y);
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 6; k++) ck_assert(o[s * 6 + k] == (k < 2 ? xd[s * 2 + k] : yd[k - 2]));
    free(o); free(xd); free(yd);
    opr_tensor_release(out);
    opr_tensor_release(x);
    opr_tensor_release(y);
    tu_ctx_free(ctx);
}
END_TEST

/* A rule is data: an op loaded at run time batches by its own `batch:` key; bad keys
 * are load errors with their position; a misapplied rule falls back to the loop. */
static opr_status call_custom(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)nin; (void)nout;
    return opr_call_by_name(ctx, ud, (opr_value[]){opr_v_tensor(in[0]), opr_v_double(2)}, 2, out, 1);
}

START_TEST(test_rules_from_yaml)
{
    ctx = tu_ctx();
    const char *yaml =
        "- name: scaled_tanh(Tensor self, float k) -> Tensor\n"
        "  shape: sizes(self)\n"
        "  batch: elementwise\n"
        "  forward: mul(tanh(self), k)\n"
        "- name: odd_rule(Tensor self, float k) -> Tensor\n"
        "  shape: sizes(self)\n"
        "  batch: matmul\n"
        "  forward: mul(self, k)\n";
    ck_assert_msg(opr_registry_load_yaml_string(ctx, yaml, "batch_rules", NULL) == OPR_OK, "%s", opr_last_error());
    ck_assert_str_eq(opr_op_batching_rule(opr_op_find(ctx, "scaled_tanh")), "elementwise");
    tu_seed(15);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 2}, -1, 1), *out;
    double *xd = tu_to_f64(x);
    const char *ops[2] = {"scaled_tanh", "odd_rule"};
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(opr_vmap(ctx, call_custom, (void *)ops[k], &x, NULL, 1, &out, NULL, 1, NULL) == OPR_OK, "%s: %s",
                      ops[k], opr_last_error());
        double *o = tu_to_f64(out);
        for (int i = 0; i < 6; i++) ck_assert(fabs(o[i] - (k ? 2 * xd[i] : 2 * tanh(xd[i]))) < 1e-15);
        free(o);
        opr_tensor_release(out);
    }
    static const struct { const char *yaml; const char *needle; } bad[] = {
        {"- name: b1(Tensor self) -> Tensor\n  shape: sizes(self)\n  batch: sideways\n", "batch: expected elementwise"},
        {"- name: b2(Tensor self, float p) -> Tensor\n  shape: sizes(self)\n  batch: {dims: [p]}\n",
         "batch: dims: 'p' is not an int or int[] argument"},
        {"- name: b3(Tensor self, int d) -> Tensor\n  shape: sizes(self)\n  batch: {dims: [d], expand: [d]}\n",
         "batch: expand: 'd' is not a Tensor argument"},
        {"- name: b4(Tensor self, int d) -> Tensor\n  shape: sizes(self)\n  batch: {size: d}\n",
         "batch: size: 'd' is not an int[] argument"},
        {"- name: b5(Tensor self, int d) -> Tensor\n  shape: sizes(self)\n  batch: {dimz: [d]}\n", "batch: unknown key 'dimz'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(opr_registry_load_yaml_string(ctx, bad[i].yaml, "bad_rules", NULL), OPR_ERR_PARSE);
        ck_assert_msg(strstr(opr_last_error(), bad[i].needle) && strstr(opr_last_error(), "bad_rules:"), "case %zu: %s", i,
                      opr_last_error());
    }
    free(xd);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* Per-sample gradients on the emulated CUDA device equal the CPU's. */
START_TEST(test_on_emulated_cuda)
{
#ifndef OPREG_TEST_EMU
    printf("test_on_emulated_cuda: skipped (no emulated CUDA plugin in this build)\n");
    return;
#endif
    ctx = tu_ctx();
    opr_device dev;
    ck_assert_msg(opr_device_parse(ctx, "cuda:0", &dev) == OPR_OK, "%s", opr_last_error());
    tu_seed(14);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){4, 3}, -1, 1), *w = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1);
    opr_tensor *xd = opr_tensor_to(x, dev), *wd = opr_tensor_to(w, dev);
    opr_set_requires_grad(w, true);
    opr_set_requires_grad(wd, true);
    double *res[2][2];
    opr_tensor *xs[2] = {x, xd}, *ws[2] = {w, wd};
    for (int k = 0; k < 2; k++) {
        opr_tensor *out[2];
        ck_assert_msg(opr_vmap(ctx, row_loss, NULL, (opr_tensor *[]){xs[k], ws[k]}, (int[]){0, -1}, 2, out, NULL, 2, NULL) == OPR_OK,
                      "%s", opr_last_error());
        ck_assert_int_eq(opr_tensor_device(out[1]).type, k ? dev.type : 0);
        for (int o = 0; o < 2; o++) {
            opr_tensor *h = opr_tensor_to(out[o], OPR_CPU);
            res[k][o] = tu_to_f64(h);
            opr_tensor_release(h);
            opr_tensor_release(out[o]);
        }
    }
    for (int i = 0; i < 4; i++) ck_assert(fabs(res[0][0][i] - res[1][0][i]) < 1e-13);
    for (int i = 0; i < 12; i++) ck_assert(fabs(res[0][1][i] - res[1][1][i]) < 1e-13);
    for (int k = 0; k < 2; k++) { free(res[k][0]); free(res[k][1]); }
    opr_tensor *rel[] = {x, w, xd, wd};
    for (size_t i = 0; i < 4; i++) opr_tensor_release(rel[i]);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vmap");
    TCase *tc = tcase_create("vmap");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_every_op_against_the_loop);
    tcase_add_test(tc, test_nested_and_chunks);
    tcase_add_test(tc, test_gradients_from_outside);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_tensor_list);
    tcase_add_test(tc, test_rules_from_yaml);
    tcase_add_test(tc, test_on_emulated_cuda);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
