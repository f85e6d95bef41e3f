/* Contexts and op exercising for the harnesses (fuzz_common.h). */
#include "fuzz_common.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sanitizer settings every harness wants, whatever the caller's environment:
 * an allocation past 256 MiB fails (returns NULL) instead of ending the run, so that
 * huge sizes reach the library's out-of-memory paths rather than the fuzzer's
 * malloc limit. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1:max_allocation_size_mb=256:detect_leaks=1";
}

const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "print_stacktrace=1:halt_on_error=1"; }

opr_ctx *fz_ctx_new(bool with_cpu)
{
    /* Kernels on one thread, as run.sh runs them, also when an input is replayed
     * without its environment: reproducible, and LeakSanitizer's check at exit has
     * crashed ("Tracer caught signal 11") with OpenMP's workers alive. Read by OpenMP
     * and OpenBLAS when the CPU plugin loads them, below. */
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    const char *plugin = OPREG_FUZZ_PLUGIN_DIR "/libopreg_cpu.so";
    opr_ctx_opts o = {.struct_size = sizeof o, .skip_plugin_discovery = true, .yaml_dir = OPREG_FUZZ_YAML_DIR,
                      .plugin_paths = with_cpu ? &plugin : NULL, .n_plugin_paths = with_cpu ? 1 : 0};
    opr_ctx *ctx = opr_ctx_new(&o);
    if (!ctx || opr_registry_errors(ctx)[0] || (with_cpu && !opr_op_has_kernel(opr_op_find(ctx, "add"), 0))) {
        fprintf(stderr, "fuzz: cannot set up a context: %s\n%s\n", opr_last_error(),
                ctx ? opr_registry_errors(ctx) : "");
        for (int i = 0; ctx && i < opr_plugin_candidate_count(ctx); i++) { /* why the plugin did not load */
            opr_plugin_candidate c = {.struct_size = sizeof c};
            if (opr_plugin_candidate_get(ctx, i, &c) == OPR_OK)
                fprintf(stderr, "fuzz: plugin %s: %s\n", c.path, c.loaded ? "loaded" : c.why ? c.why : "not loaded");
        }
        abort();
    }
    /* held once more, so that contexts made after this one find the plugin loaded
     * rather than map it again each time */
    static void *pinned;
    if (with_cpu && !pinned) pinned = dlopen(plugin, RTLD_NOW | RTLD_NOLOAD);
    return ctx;
}

void fz_ctx_free(opr_ctx *ctx)
{
    int live = opr_ctx_free(ctx);
    if (live) {
        fprintf(stderr, "fuzz: %d tensor(s) outlived their context\n", live);
        abort();
    }
}

static opr_ctx *yaml_ctx;

opr_ctx *fz_yaml_ctx(void)
{
    if (!yaml_ctx) yaml_ctx = fz_ctx_new(true);
    return yaml_ctx;
}

void fz_yaml_done(opr_ctx *ctx, int first, int n_loaded)
{
    int added = opr_op_count(ctx) - first;
    if (added > 0 && n_loaded == 0) {
        fprintf(stderr, "fuzz: %d op(s) registered by a load that reported none\n", added);
        abort();
    }
    /* the error log grows with every refused entry: bounded by starting afresh too */
    if (added > 0 || strlen(opr_registry_errors(ctx)) > 1 << 16) {
        fz_ctx_free(ctx);
        yaml_ctx = NULL;
    }
}

/* The call again with every floating tensor input requiring grad (fresh leaves over
 * the same data), then backward: the op's formulas run, calling kernels. */
static void run_backward(opr_ctx *ctx, const opr_op *op, const opr_value *args, int nargs)
{
    opr_value a[16];
    opr_tensor *leaves[16], *res[8] = {0};
    int nleaves = 0, nout = opr_op_num_outputs(op);
    for (int i = 0; i < nargs && i < 16; i++) {
        a[i] = args[i];
        if (args[i].kind != OPR_V_TENSOR || !args[i].u.t || !opr_dtype_is_floating(opr_tensor_dtype(args[i].u.t))) continue;
        opr_tensor *leaf = opr_tensor_detach(args[i].u.t);
        if (leaf && opr_set_requires_grad(leaf, true) == OPR_OK) {
            a[i] = opr_v_tensor(leaf);
            leaves[nleaves++] = leaf;
        } else {
            opr_tensor_release(leaf);
        }
    }
    if (nleaves && nout > 0 && nout <= 8 && opr_call(op, a, nargs, res, nout) == OPR_OK) {
        if (opr_requires_grad(res[0])) {
            /* ones, where small enough to fill */
            opr_dtype dt = opr_tensor_dtype(res[0]);
            int64_t n = opr_tensor_numel(res[0]);
            opr_tensor *grad = opr_tensor_new(ctx, dt, opr_tensor_ndim(res[0]), opr_tensor_shape(res[0]), OPR_CPU);
            if (grad && n > 0 && n <= 4096 && (dt == OPR_F32 || dt == OPR_F64)) {
                static double ones[4096];
                static float onesf[4096];
                for (int64_t i = 0; i < n; i++) ones[i] = onesf[i] = 1;
                if (dt == OPR_F64) opr_tensor_copy_from_host(grad, ones, (size_t)n * sizeof *ones);
                else opr_tensor_copy_from_host(grad, onesf, (size_t)n * sizeof *onesf);
            }
            if (grad) opr_backward(res[0], grad, NULL);
            opr_tensor_release(grad);
        }
        for (int i = 0; i < nout; i++) opr_tensor_release(res[i]);
    }
    for (int i = 0; i < nleaves; i++) opr_tensor_release(leaves[i]);
}

/* A call and every gradient plan: each tensor input alone, then all of them; then
 * backward. */
static void run_args(opr_ctx *ctx, const opr_op *op, const opr_value *args, int nargs)
{
    opr_tensor *res[8] = {0};
    int nout = opr_op_num_outputs(op);
    if (nout >= 0 && nout <= 8 && opr_call(op, args, nargs, res, nout) == OPR_OK)
        for (int i = 0; i < nout; i++) opr_tensor_release(res[i]);
    const char *names[16];
    int n = 0;
    for (int a = 0; a < nargs && n < 16; a++)
        if (args[a].kind == OPR_V_TENSOR) names[n++] = opr_op_arg_name(op, a);
    char buf[2048];
    uint64_t bytes;
    for (int k = 0; k < n; k++) opr_plan_explain(op, args, nargs, &names[k], 1, buf, sizeof buf);
    if (n > 1) {
        opr_plan_explain(op, args, nargs, names, n, buf, sizeof buf);
        opr_plan_saved_bytes(op, args, nargs, names, n, &bytes);
    }
    run_backward(ctx, op, args, nargs);
}

/* Arguments from the schema alone, for ops without samples: small tensors, ones and
 * the defaults. */
static void run_made_up(opr_ctx *ctx, const opr_op *op)
{
    static const int64_t shape[2] = {2, 3}, ints[2] = {1, 0};
    opr_value args[16];
    opr_tensor *owned[32];
    int nowned = 0, nargs = opr_op_num_args(op);
    if (nargs < 0 || nargs > 16) return;
    for (int a = 0; a < nargs; a++) {
        switch (opr_op_arg_kind(op, a)) {
        case OPR_V_TENSOR:
            owned[nowned] = opr_tensor_new(ctx, OPR_F32, 2, shape, OPR_CPU);
            args[a] = opr_v_tensor(owned[nowned++]);
            break;
        case OPR_V_TENSOR_LIST:
            owned[nowned] = opr_tensor_new(ctx, OPR_F32, 2, shape, OPR_CPU);
            owned[nowned + 1] = opr_tensor_new(ctx, OPR_F32, 2, shape, OPR_CPU);
            args[a] = opr_v_tensors(&owned[nowned], 2);
            nowned += 2;
            break;
        case OPR_V_INT: args[a] = opr_v_int(1); break;
        case OPR_V_DOUBLE: args[a] = opr_v_double(0.5); break;
        case OPR_V_BOOL: args[a] = opr_v_bool(true); break;
        case OPR_V_INT_LIST: args[a] = opr_v_ints(ints, 2); break;
        case OPR_V_STRING: args[a] = opr_v_string("f32"); break;
        default: args[a] = opr_v_none(); break;
        }
    }
    run_args(ctx, op, args, nargs);
    for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);
}

void fz_exercise_ops(opr_ctx *ctx, int first)
{
    int count = opr_op_count(ctx);
    for (int i = first; i < count; i++) {
        const opr_op *op = opr_op_at(ctx, i);
        int nsamples = opr_op_sample_count(op);
        if (!nsamples) run_made_up(ctx, op);
        for (int s = 0; s < nsamples && s < 8; s++) {
            opr_value args[16];
            opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
            int nargs = 0, nowned = 0;
            if (opr_op_num_args(op) > 16) break;
            /* odd samples in f64: both floating kernels and the dtype-named factories */
            opr_dtype dt = s % 2 ? OPR_F64 : OPR_F32;
            if (opr_op_sample_args(op, s, dt, OPR_CPU, (uint64_t)s, args, &nargs, owned, &nowned) == OPR_OK)
                run_args(ctx, op, args, nargs);
            for (int k = 0; k < nowned; k++) opr_tensor_release(owned[k]);
        }
    }
}
