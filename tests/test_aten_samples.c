/* PyTorch as the oracle of single ops, called by their ATen names on the samples of
 * their YAML entries: for each op named on the command line and each of its samples,
 * the arguments opreg builds for the sample (opr_op_sample_args, f64 on the CPU) are
 * written down, and oracle/aten_samples.py calls torch.ops.aten.NAME on the same
 * values. Compared: every output, and, for ops that are differentiable here, the
 * gradient of every floating tensor argument for fixed random output gradients
 * (opr_autograd_grad against torch.autograd.grad), and every tensor argument as the call
 * left it (an op may write some: batch norm's running statistics), within
 * 1e-9 * (1 + |reference|). Ops whose dtypes include i32 run each sample a second time
 * with i32 tensors (torch.int32 on PyTorch's side), where the dtypes of the outputs are
 * compared too (sum of int32 gives int64).
 *
 * An op returning Tensor[] (split_with_sizes) is compared piece by piece. Each case
 * names the op as the command line does (an overload name such as sum.dim_IntList is
 * called as that overload) and carries opreg's argument names, by which the oracle
 * passes ATen's keyword-only arguments (dtype, device, correction).
 *
 * All cases go to PyTorch in one run (one interpreter start). An op PyTorch does not
 * know or refuses the arguments of fails the test: the list names ATen ops only.
 * Without python3 or torch the suite is skipped (77), as test_oracle.c says. */
#include "oracle_files.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef OPREG_ORACLE_DIR
#error "OPREG_ORACLE_DIR must name tests/oracle"
#endif

#define TOL 1e-9
#define MAX_CASES 1024
#define MAX_OUT 8 /* outputs of an op, or pieces of one returning Tensor[] */
#define MAX_ARGS 12 /* arguments of an op (the registry's limit) */

static char **op_names;
static int n_ops;

typedef struct ocase {
    const opr_op *op;
    int sample;
    opr_dtype dtype; /* the dtype the sample ran in */
    opr_tensor *outs[MAX_OUT];
    int nout;
    opr_tensor *grads[MAX_ARGS]; /* opreg's gradient of argument a, NULL where none */
    opr_tensor *after[MAX_ARGS]; /* tensor argument a as the call left it */
    bool rg[MAX_ARGS];
} ocase;

static ocase cases[MAX_CASES];
static int n_cases, n_skipped;

static const char *dtype_word(opr_dtype dt)
{
    return dt == OPR_F64 ? "f64" : dt == OPR_F32 ? "f32" : dt == OPR_I64 ? "i64" : dt == OPR_BOOL ? "bool" : dt == OPR_I32 ? "i32" : "?";
}

static void write_values(FILE *f, const opr_tensor *t)
{
    double *v = tu_to_f64(t);
    for (int64_t i = 0; i < opr_tensor_numel(t); i++) fprintf(f, "%s%.17g", i ? " " : "", v[i]);
    fprintf(f, "\n");
    free(v);
}

static void write_shape(FILE *f, const opr_tensor *t)
{
    fprintf(f, "%d", opr_tensor_ndim(t));
    for (int d = 0; d < opr_tensor_ndim(t); d++) fprintf(f, " %lld", (long long)opr_tensor_size(t, d));
    fprintf(f, "\n");
}

/* Output gradients: fixed values in [-1, 1), so that a permuted or mis-scaled gradient
 * shows (a gradient of ones would hide them). */
static opr_tensor *grad_like(opr_ctx *ctx, const opr_tensor *t)
{
    int64_t shape[OPR_MAX_DIMS];
    for (int d = 0; d < opr_tensor_ndim(t); d++) shape[d] = opr_tensor_size(t, d);
    return tu_rand(ctx, OPR_F64, opr_tensor_ndim(t), shape, -1, 1);
}

/* Whether opreg takes sample s of op in dt. An i32 sample it refuses (true division of
 * integers with div.Tensor_mode: PyTorch gives floats, opreg's schema refuses it) is
 * skipped with a line saying so rather than compared; an f64 one always runs. */
static bool takes_sample(const char *name, const opr_op *op, int s, opr_dtype dt)
{
    if (dt == OPR_F64) return true;
    opr_value args[MAX_ARGS];
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS], *outs[MAX_OUT] = {0};
    int nargs = 0, nowned = 0, nout = opr_op_num_outputs(op);
    int rc = opr_op_sample_args(op, s, dt, OPR_CPU, 1234 + (uint64_t)s, args, &nargs, owned, &nowned);
    while (!rc && nargs < opr_op_num_args(op) && opr_op_arg_default(op, nargs, &args[nargs])) nargs++;
    if (!rc && opr_op_returns_list(op)) rc = opr_op_result_count(op, args, nargs, &nout);
    if (!rc) rc = nout <= MAX_OUT ? opr_call(op, args, nargs, outs, nout) : OPR_ERR_INVALID;
    if (rc) {
        printf("SKIP (%s) %s sample %d: opreg refuses it: %s\n", dtype_word(dt), name, s, opr_last_error());
        n_skipped++;
    }
    for (int k = 0; k < MAX_OUT; k++) opr_tensor_release(outs[k]);
    for (int k = 0; k < nowned; k++) opr_tensor_release(owned[k]);
    return rc == OPR_OK;
}

/* Runs sample s of op in dtype dt through opreg (keeping its outputs and gradients in
 * cases[]) and writes the case for PyTorch. */
static void add_case(opr_ctx *ctx, FILE *f, const char *name, const opr_op *op, int s, opr_dtype dt)
{
    ck_assert_msg(n_cases < MAX_CASES, "too many cases");
    ocase *c = &cases[n_cases];
    memset(c, 0, sizeof *c);
    c->op = op;
    c->sample = s;
    c->dtype = dt;
    opr_value args[MAX_ARGS];
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    int nargs = 0, nowned = 0;
    ck_assert_msg(!opr_op_sample_args(op, s, dt, OPR_CPU, 1234 + (uint64_t)s, args, &nargs, owned, &nowned),
                  "%s sample %d (%s): %s", opr_op_name(op), s, dtype_word(dt), opr_last_error());
    /* the omitted trailing arguments as their defaults: ATen's overload may require
     * what opreg's schema defaults (sum.dim_IntList's dim) */
    while (nargs < opr_op_num_args(op) && opr_op_arg_default(op, nargs, &args[nargs])) nargs++;
    opr_tensor *inputs[MAX_ARGS];
    int ninputs = 0, input_arg[MAX_ARGS];
    for (int a = 0; a < nargs; a++)
        if (args[a].kind == OPR_V_TENSOR && opr_tensor_dtype(args[a].u.t) == OPR_F64 && tu_arg_differentiable(op, a) &&
            opr_op_output_differentiable(op, 0)) { /* not for `differentiable: false` (out= overloads, .item()) */
            ck_assert(!opr_set_requires_grad(args[a].u.t, true));
            c->rg[a] = true;
            input_arg[ninputs] = a;
            inputs[ninputs++] = args[a].u.t;
        }
    /* the name as the command line gives it: an overload name opreg's op carries with
     * `overload:` (sum.dim_IntList) is called as that overload */
    fprintf(f, "case %d %s\nargnames", n_cases, name);
    for (int a = 0; a < nargs; a++) fprintf(f, " %s", opr_op_arg_name(op, a));
    fprintf(f, "\n");
    for (int a = 0; a < nargs; a++) {
        const opr_value *v = &args[a];
        switch (v->kind) {
        case OPR_V_TENSOR:
            fprintf(f, "arg tensor %d %s ", c->rg[a], dtype_word(opr_tensor_dtype(v->u.t)));
            write_shape(f, v->u.t);
            write_values(f, v->u.t);
            break;
        case OPR_V_INT: fprintf(f, "arg int %lld\n", (long long)v->u.i); break;
        case OPR_V_DOUBLE: fprintf(f, "arg float %.17g\n", v->u.d); break;
        case OPR_V_BOOL: fprintf(f, "arg bool %d\n", v->u.b); break;
        case OPR_V_INT_LIST:
            fprintf(f, "arg %s %d", strncmp(opr_op_arg_type(op, a), "bool[", 5) ? "ints" : "bools", v->u.il.n);
            for (int k = 0; k < v->u.il.n; k++) fprintf(f, " %lld", (long long)v->u.il.items[k]);
            fprintf(f, "\n");
            break;
        case OPR_V_DOUBLE_LIST:
            fprintf(f, "arg floats %d", v->u.dl.n);
            for (int k = 0; k < v->u.dl.n; k++) fprintf(f, " %.17g", v->u.dl.items[k]);
            fprintf(f, "\n");
            break;
        case OPR_V_STRING: fprintf(f, "arg str %s\n", v->u.s); break;
        case OPR_V_TENSOR_LIST: /* Tensor[] or Tensor?[] (index's indices, None items included) */
            fprintf(f, "arg tensors %d\n", v->u.tl.n);
            for (int k = 0; k < v->u.tl.n; k++) {
                const opr_tensor *t = v->u.tl.items[k];
                if (!t) {
                    fprintf(f, "item none\n");
                    continue;
                }
                fprintf(f, "item %s ", dtype_word(opr_tensor_dtype(t)));
                write_shape(f, t);
                write_values(f, t);
            }
            break;
        default: fprintf(f, "arg none\n"); break;
        }
    }
    /* after the arguments are written: an op may write some of them (running statistics) */
    c->nout = opr_op_num_outputs(op);
    if (opr_op_returns_list(op)) /* Tensor[]: as many results as the call gives pieces */
        ck_assert_msg(!opr_op_result_count(op, args, nargs, &c->nout), "%s sample %d: %s", name, s, opr_last_error());
    ck_assert_msg(c->nout <= MAX_OUT, "%s sample %d: %d outputs", name, s, c->nout);
    ck_assert_msg(!opr_call(op, args, nargs, c->outs, c->nout), "%s sample %d: %s", opr_op_name(op), s, opr_last_error());
    opr_tensor *gouts[MAX_OUT], *gfor[MAX_OUT];
    int ng = 0;
    for (int k = 0; k < c->nout; k++) {
        if (!opr_requires_grad(c->outs[k])) {
            fprintf(f, "gradout none\n");
            continue;
        }
        gouts[ng] = grad_like(ctx, c->outs[k]);
        gfor[ng] = c->outs[k];
        fprintf(f, "gradout ");
        write_shape(f, gouts[ng]);
        write_values(f, gouts[ng]);
        ng++;
    }
    fprintf(f, "end\n");
    if (ninputs && ng) {
        opr_tensor *grads[MAX_ARGS] = {0};
        ck_assert_msg(!opr_autograd_grad(gfor, gouts, ng, inputs, ninputs, grads, NULL), "%s sample %d backward: %s",
                      opr_op_name(op), s, opr_last_error());
        for (int i = 0; i < ninputs; i++) c->grads[input_arg[i]] = grads[i];
    }
    for (int k = 0; k < ng; k++) opr_tensor_release(gouts[k]);
    for (int a = 0; a < nargs; a++)
        if (args[a].kind == OPR_V_TENSOR) c->after[a] = opr_tensor_retain(args[a].u.t);
    for (int k = 0; k < nowned; k++) opr_tensor_release(owned[k]);
    n_cases++;
}

/* Reads "NDIM D..", then the values line, into *vals (malloc'd); false for "none". */
static bool read_tensor(FILE *f, int *ndim, int64_t *shape, int64_t *numel, double **vals)
{
    char word[32];
    ck_assert_int_eq(fscanf(f, "%31s", word), 1);
    if (!strcmp(word, "none")) return false;
    *ndim = atoi(word);
    *numel = 1;
    for (int d = 0; d < *ndim; d++) {
        long long s;
        ck_assert_int_eq(fscanf(f, "%lld", &s), 1);
        shape[d] = s;
        *numel *= s;
    }
    *vals = malloc((size_t)(*numel ? *numel : 1) * sizeof **vals);
    ck_assert_ptr_nonnull(*vals);
    for (int64_t i = 0; i < *numel; i++) ck_assert_int_eq(fscanf(f, "%lf", &(*vals)[i]), 1);
    return true;
}

/* Compares opreg's t (NULL: none) with the reference read from f; 1 with a message in
 * bad (unless bad already holds one) when they differ, else 0. */
static int compare(const ocase *c, const char *what, int k, const opr_tensor *t, FILE *f, char *bad, size_t bad_len)
{
    int ndim;
    int64_t shape[OPR_MAX_DIMS], numel;
    double *ref = NULL;
    char msg[512];
    const size_t len = sizeof msg;
    const bool have = read_tensor(f, &ndim, shape, &numel, &ref);
    const char *op = opr_op_name(c->op);
    if (!have) { /* PyTorch gives none: an unused input, or an output the mask left out */
        if (t && opr_tensor_numel(t) != 0) {
            double *v = tu_to_f64(t);
            bool zero = true;
            for (int64_t i = 0; i < opr_tensor_numel(t); i++) zero = zero && v[i] == 0;
            free(v);
            if (!zero && !bad[0]) snprintf(bad, bad_len, "%s sample %d: %s %d: PyTorch gives none, opreg a nonzero tensor", op, c->sample, what, k);
            return !zero;
        }
        return 0;
    }
    int fails = 0;
    if (!t) { /* opreg has no gradient where PyTorch's is zeros (an argument read for its shape) */
        for (int64_t i = 0; i < numel && !fails; i++)
            if (ref[i] != 0)
                fails = snprintf(msg, len, "%s sample %d: %s %d: opreg gives none, PyTorch a nonzero tensor", op, c->sample, what,
                                 k) > 0;
    } else if (opr_tensor_ndim(t) != ndim || opr_tensor_numel(t) != numel) {
        fails = snprintf(msg, len, "%s sample %d: %s %d: shape differs (%d dims, %lld elements; PyTorch %d dims, %lld elements)", op,
                         c->sample, what, k, opr_tensor_ndim(t), (long long)opr_tensor_numel(t), ndim, (long long)numel) > 0;
    } else {
        double *v = tu_to_f64(t);
        for (int64_t i = 0; i < numel && !fails; i++) {
            /* NaN matches NaN, an infinity the same infinity (their difference is NaN) */
            const bool same = (isnan(v[i]) && isnan(ref[i])) || v[i] == ref[i];
            if (!same && !(fabs(v[i] - ref[i]) <= TOL * (1 + fabs(ref[i]))))
                fails = snprintf(msg, len, "%s sample %d: %s %d element %lld: opreg %.17g, PyTorch %.17g", op, c->sample, what, k,
                                 (long long)i, v[i], ref[i]) > 0;
        }
        free(v);
    }
    free(ref);
    if (fails && !bad[0]) snprintf(bad, bad_len, "%s", msg);
    return fails;
}

START_TEST(test_aten_samples)
{
    char why[256];
    if (!of_find_python(why, sizeof why)) {
        printf("SKIP: no python3 with torch (tried %s)\n", why);
        return;
    }
    opr_ctx *ctx = tu_ctx();
    tu_seed(7);
    char dir[] = "/tmp/opreg_aten_XXXXXX", in[64], out[64], err[64], cmd[1024];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(in, sizeof in, "%s/in.txt", dir);
    snprintf(out, sizeof out, "%s/out.txt", dir);
    snprintf(err, sizeof err, "%s/err.txt", dir);
    FILE *f = fopen(in, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < n_ops; i++) {
        const opr_op *op = opr_op_find(ctx, op_names[i]);
        ck_assert_msg(op != NULL, "no op %s", op_names[i]);
        ck_assert_msg(opr_op_sample_count(op) > 0, "%s has no samples", op_names[i]);
        for (int s = 0; s < opr_op_sample_count(op); s++) {
            add_case(ctx, f, op_names[i], op, s, OPR_F64);
            if (opr_op_supports_dtype(op, OPR_I32) && takes_sample(op_names[i], op, s, OPR_I32))
                add_case(ctx, f, op_names[i], op, s, OPR_I32);
        }
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' -B '%s/aten_samples.py' '%s' '%s' 2>'%s'", of_python(), OPREG_ORACLE_DIR, in, out, err);
    ck_assert_msg(system(cmd) == 0, "aten_samples.py failed; see %s", err);
    f = fopen(out, "r");
    ck_assert_ptr_nonnull(f);
    int failures = 0;
    char first[512] = "";
    for (int i = 0; i < n_cases; i++) {
        ocase *c = &cases[i];
        char word[16], status[16], bad[512] = "";
        int id, nout;
        ck_assert_int_eq(fscanf(f, "%15s %d %15s", word, &id, status), 3);
        ck_assert_int_eq(id, i);
        if (strcmp(status, "ok")) {
            char msg[400] = "";
            if (!fgets(msg, sizeof msg, f)) msg[0] = '\0';
            msg[strcspn(msg, "\n")] = '\0';
            snprintf(bad, sizeof bad, "%s sample %d: PyTorch: %s%s", opr_op_name(c->op), c->sample,
                     strcmp(status, "missing") ? "" : "no such ATen op", msg);
            failures++;
        } else {
            ck_assert_int_eq(fscanf(f, "%d", &nout), 1);
            if (nout != c->nout) {
                snprintf(bad, sizeof bad, "%s: PyTorch gives %d outputs, opreg %d", opr_op_name(c->op), nout, c->nout);
                failures++;
                nout = 0;
            }
            for (int k = 0; k < nout; k++) {
                int kk;
                ck_assert_int_eq(fscanf(f, "%15s %d", word, &kk), 2);
                /* "out:DTYPE": in an i32 case the dtypes must agree too (PyTorch's f64
                 * results of f64 cases may differ from opreg's, a Scalar's above all) */
                if (c->dtype == OPR_I32 && c->outs[k] && strncmp(word, "out:", 4) == 0 &&
                    strcmp(word + 4, dtype_word(opr_tensor_dtype(c->outs[k])))) {
                    if (!bad[0])
                        snprintf(bad, sizeof bad, "%s sample %d (i32): output %d is %s, PyTorch's %s", opr_op_name(c->op),
                                 c->sample, k, dtype_word(opr_tensor_dtype(c->outs[k])), word + 4);
                    failures++;
                }
                failures += compare(c, "output", k, c->outs[k], f, bad, sizeof bad);
            }
            for (int a = 0; a < MAX_ARGS; a++) {
                if (!c->rg[a]) continue;
                int aa;
                ck_assert_int_eq(fscanf(f, "%15s %d", word, &aa), 2);
                ck_assert_int_eq(aa, a);
                failures += compare(c, "gradient of argument", a, c->grads[a], f, bad, sizeof bad);
            }
            for (int a = 0; a < MAX_ARGS; a++) { /* what the call left in its arguments */
                if (!c->after[a]) continue;
                int aa;
                ck_assert_int_eq(fscanf(f, "%15s %d", word, &aa), 2);
                ck_assert_int_eq(aa, a);
                failures += compare(c, "argument after the call", a, c->after[a], f, bad, sizeof bad);
            }
        }
        if (bad[0]) {
            printf("FAIL (%s) %s\n", dtype_word(c->dtype), bad);
            if (!first[0]) snprintf(first, sizeof first, "(%s) %s", dtype_word(c->dtype), bad);
        }
    }
    fclose(f);
    unlink(in);
    unlink(out);
    unlink(err);
    rmdir(dir);
    for (int i = 0; i < n_cases; i++) {
        for (int k = 0; k < cases[i].nout; k++) opr_tensor_release(cases[i].outs[k]);
        for (int a = 0; a < MAX_ARGS; a++) opr_tensor_release(cases[i].grads[a]);
        for (int a = 0; a < MAX_ARGS; a++) opr_tensor_release(cases[i].after[a]);
    }
    printf("%d op(s), %d case(s) against PyTorch (%s): %d failure(s), %d i32 sample(s) skipped\n", n_ops, n_cases,
           of_python(), failures, n_skipped);
    tu_ctx_free(ctx);
    ck_assert_msg(failures == 0, "%d failure(s); the first: %s", failures, first);
}
END_TEST

int main(int argc, char **argv)
{
    op_names = argv + 1;
    n_ops = argc - 1;
    char why[256];
    if (!of_find_python(why, sizeof why)) {
        printf("SKIP: no python3 with torch (tried %s)\n", why);
        return 77;
    }
    Suite *s = suite_create("aten_samples");
    TCase *tc = tcase_create("aten_samples");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_aten_samples);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
