/* opr_vmap: every op of the registry, on every sample of its YAML entry, with every
 * non-empty set of its tensor arguments batched, against a loop of unbatched calls:
 * the outputs, and the per-sample gradients (opr_autograd_grad inside the callback)
 * of sum(first floating output) with respect to every floating argument. Then the
 * API's rules: nesting, chunks, gradients from outside, and bad input. */
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
    if (rc == OPR_ERR_UNSUPPORTED && strstr(opr_last_error(), "output size")) { /* data-dependent: documented */
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
            if (c.nt > 0 && !lists) { /* Tensor[] ops (cat) run by the loop: see test_tensor_list */
                for (uint32_t mask = 1; mask < (1u << c.nt); mask++) {
                    c.grads = false;
                    check_mask(&c, per, mask, &t, "outputs");
                    t.masks++;
                }
                /* gradients where the op has formulas and a floating output */
                opr_tensor *probe[4] = {NULL};
                if (opr_op_grad_candidate_count(op) > 0 && c.nfloat > 0 &&
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

int main(void)
{
    Suite *s = suite_create("vmap");
    TCase *tc = tcase_create("vmap");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_every_op_against_the_loop);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
