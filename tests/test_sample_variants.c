/* Layout and size variants of the ops' samples (opr_op_sample_variant_count/_args):
 * their labels, that a layout variant holds the plain sample's values in the layout
 * it names, that "large" is large, that every op's every variant runs on the CPU with
 * f32 agreeing with f64 (or is refused), and that a kernel wrong only for
 * non-contiguous inputs, or only for sizes > 4, is caught by comparing a variant with
 * the CPU. */
#include "test_util.h"

#include <opreg/plugin.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct built {
    opr_value args[16];
    int nargs;
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    int nowned;
    char label[64];
} built;

static int build(const opr_op *op, int i, int v, opr_dtype dt, built *b)
{
    return opr_op_sample_variant_args(op, i, v, dt, OPR_CPU, 7, b->args, &b->nargs, b->owned, &b->nowned, b->label,
                                      sizeof b->label);
}

static void build_ok(const opr_op *op, int i, int v, opr_dtype dt, built *b)
{
    int rc = build(op, i, v, dt, b);
    ck_assert_msg(rc == OPR_OK, "%s sample %d variant %d: %s", opr_op_name(op), i, v, opr_last_error());
}

static void unbuild(built *b)
{
    for (int k = 0; k < b->nowned; k++) opr_tensor_release(b->owned[k]);
    b->nowned = 0;
}

/* The tensor a layout label ("offset self", "transposed tensors[1]") names. */
static opr_tensor *named(const opr_op *op, const built *b, const char *label)
{
    const char *name = strrchr(label, ' ') + 1;
    char arg[32];
    int item = -1;
    snprintf(arg, sizeof arg, "%s", name);
    char *br = strchr(arg, '[');
    if (br) { item = atoi(br + 1); *br = 0; }
    int a = opr_op_arg_index(op, arg);
    ck_assert_msg(a >= 0 && a < b->nargs, "%s: no argument %s", label, arg);
    return item >= 0 ? b->args[a].u.tl.items[item] : b->args[a].u.t;
}

static bool starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

/* ------------------------------------------------------------------ labels */

static const char *const two_args_yaml =
    "- name: sv_pair(Tensor self, Tensor other, Tensor idx) -> Tensor\n"
    "  shape: sizes(self)\n"
    "  samples: [{self: [3, 4], other: [4], idx: {shape: [2], dtype: i64, values: [0, 2]}}, {self: [], other: [1]}]\n";

START_TEST(test_labels)
{
    opr_ctx *ctx = tu_ctx();
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, two_args_yaml, "sv.yaml", NULL), OPR_OK);
    const opr_op *op = opr_op_find(ctx, "sv_pair");
    static const char *const want[] = {
        "", "transposed self", "step-2 slice self", "offset self", "stride-0 self", "step-2 slice other", "offset other",
        "stride-0 other", "step-2 slice idx", "offset idx", "size-0", "size-1", "large", "odd size 13",
        "odd size 13, step-2 slice self",
    };
    const int n = (int)(sizeof want / sizeof want[0]);
    ck_assert_int_eq(opr_op_sample_variant_count(op, 0), n);
    for (int v = 0; v < n; v++) {
        built b;
        build_ok(op, 0, v, OPR_F32, &b);
        ck_assert_str_eq(b.label, want[v]);
        ck_assert_int_eq(b.nargs, 3);
        /* the `values:` tensor keeps its shape and values in every variant */
        double idx[2];
        ck_assert_int_eq(opr_tensor_numel(b.args[2].u.t), 2);
        ck_assert_int_eq(opr_tensor_copy_to_host_f64(b.args[2].u.t, idx, 2), OPR_OK);
        ck_assert(idx[0] == 0 && idx[1] == 2);
        if (!strcmp(want[v], "size-0")) { /* the largest free size, 4, is 0 everywhere */
            ck_assert_int_eq(opr_tensor_size(b.args[0].u.t, 0), 3);
            ck_assert_int_eq(opr_tensor_size(b.args[0].u.t, 1), 0);
            ck_assert_int_eq(opr_tensor_size(b.args[1].u.t, 0), 0);
        }
        if (!strcmp(want[v], "size-1")) {
            ck_assert_int_eq(opr_tensor_size(b.args[0].u.t, 1), 1);
            ck_assert_int_eq(opr_tensor_size(b.args[1].u.t, 0), 1);
        }
        if (!strcmp(want[v], "large")) { /* one factor: the shapes still broadcast */
            int64_t f = opr_tensor_size(b.args[1].u.t, 0) / 4;
            ck_assert_int_eq(opr_tensor_size(b.args[1].u.t, 0), 4 * f);
            ck_assert_int_eq(opr_tensor_size(b.args[0].u.t, 0), 3 * f);
            ck_assert_int_eq(opr_tensor_size(b.args[0].u.t, 1), 4 * f);
            ck_assert_int_ge(opr_tensor_numel(b.args[0].u.t), 65536);
            ck_assert_int_gt(3 * f, 64);
        }
        if (starts(want[v], "odd size")) { /* self's rows, 4, become 13, and so does every 4 */
            ck_assert_int_eq(opr_tensor_size(b.args[0].u.t, 0), 3);
            ck_assert_int_eq(opr_tensor_size(b.args[0].u.t, 1), 13);
            ck_assert_int_eq(opr_tensor_size(b.args[1].u.t, 0), 13);
            ck_assert_int_eq(opr_tensor_is_contiguous(b.args[0].u.t), !strcmp(want[v], "odd size 13"));
        }
        unbuild(&b);
    }
    /* a 0-d tensor and a [1] one: only offsets apply, and size-0 */
    ck_assert_int_eq(opr_op_sample_variant_count(op, 1), 4);
    built b;
    build_ok(op, 1, 3, OPR_F64, &b);
    ck_assert_str_eq(b.label, "size-0");
    ck_assert_int_eq(opr_tensor_numel(b.args[1].u.t), 0);
    unbuild(&b);
    /* out of range: refused, nothing to release */
    b.nowned = 99;
    ck_assert_int_eq(build(op, 0, n, OPR_F32, &b), OPR_ERR_INVALID);
    ck_assert_int_eq(b.nowned, 0);
    ck_assert_int_eq(build(op, 0, -1, OPR_F32, &b), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_op_sample_variant_count(op, 2), 0);
    ck_assert_int_eq(opr_op_sample_variant_count(NULL, 0), 0);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ values and layouts */

/* Index of element j of a tensor of this shape with dim d's index set to 0. */
static int64_t first_slice(const int64_t *shape, int ndim, int d, int64_t j)
{
    int64_t idx[OPR_MAX_DIMS], at = 0;
    for (int k = ndim - 1; k >= 0; k--) { idx[k] = j % shape[k]; j /= shape[k]; }
    idx[d] = 0;
    for (int k = 0; k < ndim; k++) at = at * shape[k] + idx[k];
    return at;
}

/* Every layout variant of every sample of every op, in f32 and f64: each tensor holds
 * the plain sample's logical values (stride-0: its first slice, repeated), and the one
 * the label names has the layout it names, the others none. */
START_TEST(test_layout_values)
{
    opr_ctx *ctx = tu_ctx();
    static const opr_dtype dts[] = {OPR_F32, OPR_F64};
    int seen[5] = {0};
    for (int o = 0; o < opr_op_count(ctx); o++) {
        const opr_op *op = opr_op_at(ctx, o);
        for (int i = 0; i < opr_op_sample_count(op); i++)
            for (int di = 0; di < 2; di++) {
                built plain;
                if (build(op, i, 0, dts[di], &plain)) { unbuild(&plain); continue; } /* dtype not made */
                for (int v = 1; v < opr_op_sample_variant_count(op, i); v++) {
                    built b;
                    build_ok(op, i, v, dts[di], &b);
                    if (starts(b.label, "size-") || !strcmp(b.label, "large") || starts(b.label, "odd size")) {
                        unbuild(&b); /* other sizes: other values */
                        continue;
                    }
                    ck_assert_int_eq(b.nowned, plain.nowned);
                    opr_tensor *target = named(op, &b, b.label);
                    for (int k = 0; k < b.nowned; k++) {
                        opr_tensor *t = b.owned[k], *p = plain.owned[k];
                        ck_assert(!t == !p);
                        if (!t) continue; /* a None item of a Tensor?[] (index's indices), in both */
                        int nd = opr_tensor_ndim(t);
                        ck_assert_int_eq(nd, opr_tensor_ndim(p));
                        ck_assert_int_eq(opr_tensor_dtype(t), opr_tensor_dtype(p));
                        for (int d = 0; d < nd; d++) ck_assert_int_eq(opr_tensor_size(t, d), opr_tensor_size(p, d));
                        int zero_dim = -1;
                        for (int d = 0; d < nd; d++)
                            if (opr_tensor_stride(t, d) == 0 && opr_tensor_size(t, d) > 1) zero_dim = d;
                        if (t != target && opr_tensor_numel(t) == 0) {
                            /* (an empty tensor does not count as contiguous) */
                        } else if (t != target) {
                            ck_assert_msg(opr_tensor_is_contiguous(t) && opr_tensor_offset(t) == 0 && zero_dim < 0,
                                          "%s sample %d %s: tensor %d has a layout too", opr_op_name(op), i, b.label, k);
                        } else if (starts(b.label, "transposed ")) {
                            ck_assert_msg(!opr_tensor_is_contiguous(t), "%s sample %d %s: contiguous", opr_op_name(op), i, b.label);
                            ck_assert_int_eq(opr_tensor_stride(t, nd - 2), 1); /* memory is [..., n, m] */
                            ck_assert_int_eq(opr_tensor_stride(t, nd - 1), opr_tensor_size(t, nd - 2));
                            seen[0]++;
                        } else if (starts(b.label, "step-2 slice ")) {
                            ck_assert(!opr_tensor_is_contiguous(t));
                            ck_assert_int_eq(opr_tensor_stride(t, nd - 1), 2);
                            seen[1]++;
                        } else if (starts(b.label, "offset ")) {
                            ck_assert(opr_tensor_is_contiguous(t));
                            ck_assert_int_gt(opr_tensor_offset(t), 0);
                            seen[2]++;
                        } else if (starts(b.label, "stride-0 ")) {
                            ck_assert_int_ge(zero_dim, 0);
                            seen[3]++;
                        } else {
                            ck_abort_msg("%s: unknown label '%s'", opr_op_name(op), b.label);
                        }
                        int64_t n = opr_tensor_numel(t);
                        double *got = tu_to_f64(t), *want = tu_to_f64(p);
                        for (int64_t j = 0; j < n; j++) {
                            int64_t from = zero_dim >= 0 && t == target ? first_slice(opr_tensor_shape(t), nd, zero_dim, j) : j;
                            ck_assert_msg(got[j] == want[from] || (isnan(got[j]) && isnan(want[from])),
                                          "%s sample %d %s: tensor %d element %lld: %g, plain %g", opr_op_name(op), i,
                                          b.label, k, (long long)j, got[j], want[from]);
                        }
                        free(got);
                        free(want);
                    }
                    unbuild(&b);
                }
                unbuild(&plain);
            }
    }
    for (int k = 0; k < 4; k++) ck_assert_int_gt(seen[k], 10);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_large_is_large)
{
    opr_ctx *ctx = tu_ctx();
    int large = 0;
    for (int o = 0; o < opr_op_count(ctx); o++) {
        const opr_op *op = opr_op_at(ctx, o);
        for (int i = 0; i < opr_op_sample_count(op); i++) {
            int n = opr_op_sample_variant_count(op, i);
            built b;
            build_ok(op, i, n - 1, OPR_F32, &b);
            if (starts(b.label, "odd size")) { /* the two odd-size variants come after "large" */
                unbuild(&b);
                build_ok(op, i, n - 3, OPR_F32, &b);
            }
            if (!strcmp(b.label, "large")) {
                /* its largest tensor: an input, or a result (broadcast) */
                int64_t most = 0;
                for (int k = 0; k < b.nowned; k++)
                    if (opr_tensor_numel(b.owned[k]) > most) most = opr_tensor_numel(b.owned[k]);
                int count = 0;
                opr_tensor *res[64] = {NULL};
                if (!opr_op_result_count(op, b.args, b.nargs, &count) && count && count <= 64 &&
                    !opr_call(op, b.args, b.nargs, res, count))
                    for (int r = 0; r < count; r++)
                        if (opr_tensor_numel(res[r]) > most) most = opr_tensor_numel(res[r]);
                for (int r = 0; r < 64; r++) opr_tensor_release(res[r]);
                /* below 65536 only where the op's estimated work stops it (a convolution):
                 * still larger than the sample as written */
                built plain;
                build_ok(op, i, 0, OPR_F32, &plain);
                int64_t plain_most = 0;
                for (int k = 0; k < plain.nowned; k++)
                    if (opr_tensor_numel(plain.owned[k]) > plain_most) plain_most = opr_tensor_numel(plain.owned[k]);
                unbuild(&plain);
                ck_assert_msg((most >= 65536 || most > 4 * plain_most) && most <= (1 << 24),
                              "%s sample %d: largest tensor %lld elements (the sample's: %lld)", opr_op_name(op), i,
                              (long long)most, (long long)plain_most);
                large++;
            }
            unbuild(&b);
        }
    }
    ck_assert_int_gt(large, 50);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ running them */

/* Runs variant v of sample i in dtype dt on the CPU: its first result as f64 (NULL
 * when the call is refused), *n elements. */
static double *run_variant(opr_ctx *ctx, const opr_op *op, int i, int v, opr_dtype dt, int64_t *n, char *label)
{
    built b;
    if (build(op, i, v, dt, &b)) { unbuild(&b); return NULL; }
    if (label) strcpy(label, b.label);
    int count = 0;
    double *out = NULL;
    opr_tensor *res[64] = {NULL};
    opr_manual_seed(ctx, 3);
    if (!opr_op_result_count(op, b.args, b.nargs, &count) && count <= 64 &&
        !opr_call(op, b.args, b.nargs, res, count ? count : 1) && count) {
        /* every result, one after the other */
        int64_t total = 0;
        for (int r = 0; r < count; r++) total += opr_tensor_numel(res[r]);
        out = malloc((size_t)(total ? total : 1) * sizeof *out);
        *n = 0;
        for (int r = 0; r < count; r++) {
            ck_assert_int_eq(opr_tensor_copy_to_host_f64(res[r], out + *n, total - *n), OPR_OK);
            *n += opr_tensor_numel(res[r]);
        }
    }
    for (int r = 0; r < 64; r++) opr_tensor_release(res[r]);
    unbuild(&b);
    return out;
}

static bool close_to(double got, double want, double scale)
{
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= 1e-3 * scale + 1e-3 * fabs(want);
}

START_TEST(test_cpu_f32_agrees_with_f64)
{
    opr_ctx *ctx = tu_ctx();
    int ran = 0, refused = 0;
    for (int o = 0; o < opr_op_count(ctx); o++) {
        const opr_op *op = opr_op_at(ctx, o);
        for (int i = 0; i < opr_op_sample_count(op); i++)
            for (int v = 0; v < opr_op_sample_variant_count(op, i); v++) {
                int64_t n64 = 0, n32 = 0;
                char label[64] = "";
                double *ref = run_variant(ctx, op, i, v, OPR_F64, &n64, label);
                if (!ref) { refused++; continue; }
                double *got = run_variant(ctx, op, i, v, OPR_F32, &n32, NULL);
                if (got) {
                    ck_assert_int_eq(n32, n64);
                    double scale = 1;
                    for (int64_t j = 0; j < n64; j++)
                        if (isfinite(ref[j]) && fabs(ref[j]) > scale) scale = fabs(ref[j]);
                    /* in a large variant, a few inputs that differ in f64 round to equal
                     * f32 values: a comparison (gt) or a pick (max) flips there */
                    int64_t off = 0, first = -1;
                    for (int64_t j = 0; j < n64; j++)
                        if (!close_to(got[j], ref[j], scale) && !off++) first = j;
                    ck_assert_msg(off <= n64 / 100000, "%s sample %d '%s': %lld of %lld elements differ, first %lld: f32 "
                                  "%.9g, f64 %.9g", opr_op_name(op), i, label, (long long)off, (long long)n64,
                                  (long long)first, first >= 0 ? got[first] : 0, first >= 0 ? ref[first] : 0);
                    ran++;
                }
                free(got);
                free(ref);
            }
    }
    ck_assert_int_gt(ran, 500);
    ck_assert_int_lt(refused, ran);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ broken kernels */

/* neg on cpu in f32, overriding the CPU plugin's: in "contig_only" mode wrong for a
 * non-contiguous input (reads it as if contiguous; within the memory the view spans,
 * so that the test itself reads nothing out of bounds), in "size_limited" mode wrong
 * when a size passes 4 (the last element is left as it is), in "strided_remainder"
 * mode wrong, for a non-contiguous input, on the last element of each row whose length
 * is not a multiple of 4 (the remainder of a 4-wide strided loop). */
enum bad_mode { CONTIG_ONLY, SIZE_LIMITED, STRIDED_REMAINDER };

static int k_bad_neg(const opr_kernel_call *call)
{
    const enum bad_mode mode = *(const enum bad_mode *)call->kernel_data;
    const bool contig_only = mode == CONTIG_ONLY;
    const opr_tensor_view *a = call->args[0]->u.t;
    opr_tensor_view *o = call->outputs[0];
    bool big = false;
    int64_t span = 1;
    for (int d = 0; d < a->ndim; d++) {
        big |= a->shape[d] > 4;
        span += (a->shape[d] - 1) * a->strides[d];
    }
    int64_t idx[OPR_MAX_DIMS] = {0};
    for (int64_t k = 0; k < o->numel; k++) {
        int64_t ia = 0;
        for (int d = 0; d < a->ndim; d++) ia += idx[d] * a->strides[d];
        if (contig_only) ia = k % span;
        float x = ((const float *)a->data)[ia];
        bool strided = a->ndim && a->strides[a->ndim - 1] != 1;
        int64_t row = a->ndim ? a->shape[a->ndim - 1] : 1, col = a->ndim ? idx[a->ndim - 1] : 0;
        bool wrong = mode == SIZE_LIMITED ? big && k == o->numel - 1
                   : mode == STRIDED_REMAINDER ? strided && row % 4 && col == row - 1 : false;
        ((float *)o->data)[k] = wrong ? x : -x;
        for (int d = a->ndim - 1; d >= 0 && ++idx[d] == a->shape[d]; d--) idx[d] = 0;
    }
    return OPR_OK;
}

static const enum bad_mode contig_only = CONTIG_ONLY, size_limited = SIZE_LIMITED, strided_remainder = STRIDED_REMAINDER;
static const enum bad_mode *bad_mode;

static int init_bad_neg(const opr_host_api *host, opr_plugin *self)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "sv_bad_neg";
    self->version = "0.0.1";
    opr_kernel_desc k = {
        .struct_size = sizeof k, .op = "neg", .device = "cpu", .dtypes = OPR_DTYPE_BIT(OPR_F32), .fn = k_bad_neg,
        .data = (void *)bad_mode, .override_dtypes = OPR_DTYPE_BIT(OPR_F32),
    };
    return host->register_kernel(self, &k);
}

/* Which variants of neg's first sample disagree between the kernel in f32 and the
 * CPU's f64, as " label" items. */
static void disagreeing(opr_ctx *ctx, char *out, size_t len)
{
    const opr_op *op = opr_op_find(ctx, "neg");
    out[0] = 0;
    for (int v = 0; v < opr_op_sample_variant_count(op, 0); v++) {
        int64_t n64 = 0, n32 = 0;
        char label[64];
        double *ref = run_variant(ctx, op, 0, v, OPR_F64, &n64, label);
        double *got = run_variant(ctx, op, 0, v, OPR_F32, &n32, NULL);
        ck_assert_ptr_nonnull(ref);
        ck_assert_ptr_nonnull(got);
        bool same = n32 == n64;
        for (int64_t j = 0; same && j < n64; j++) same = close_to(got[j], ref[j], 1);
        if (!same) snprintf(out + strlen(out), len - strlen(out), "[%s]", label);
        free(ref);
        free(got);
    }
}

START_TEST(test_broken_kernels_caught)
{
    char found[512];
    opr_ctx *ctx = tu_ctx();
    disagreeing(ctx, found, sizeof found);
    ck_assert_str_eq(found, ""); /* the CPU plugin's own neg passes every variant */
    tu_ctx_free(ctx);

    ctx = tu_ctx();
    bad_mode = &contig_only;
    ck_assert_int_eq(opr_plugin_register(ctx, init_bad_neg, NULL), OPR_OK);
    disagreeing(ctx, found, sizeof found);
    /* the plain sample passes: only the non-contiguous layouts show it (an offset one
     * is contiguous from its first element) */
    ck_assert_str_eq(found, "[transposed self][step-2 slice self][stride-0 self][odd size 13, step-2 slice self]");
    tu_ctx_free(ctx);

    ctx = tu_ctx();
    bad_mode = &size_limited;
    ck_assert_int_eq(opr_plugin_register(ctx, init_bad_neg, NULL), OPR_OK);
    disagreeing(ctx, found, sizeof found);
    /* neg's sample is [3, 4]: rows of 13 pass 4 too */
    ck_assert_str_eq(found, "[large][odd size 13][odd size 13, step-2 slice self]");
    tu_ctx_free(ctx);

    /* the bug of a remainder loop over strided rows: no layout of [3, 4] has a strided
     * row whose length is not a multiple of 4 */
    ctx = tu_ctx();
    bad_mode = &strided_remainder;
    ck_assert_int_eq(opr_plugin_register(ctx, init_bad_neg, NULL), OPR_OK);
    disagreeing(ctx, found, sizeof found);
    ck_assert_str_eq(found, "[odd size 13, step-2 slice self]");
    tu_ctx_free(ctx);
}
END_TEST

/* On every other device the context has (the emulated CUDA plugin, where the build
 * has it): every layout variant holds the same values as on the CPU, its memory
 * reached only through the device's copy functions. */
START_TEST(test_layouts_on_devices)
{
    opr_ctx *ctx = tu_ctx();
    int compared = 0;
    for (int type = 1; type < opr_device_type_count(ctx); type++) {
        opr_device dev = {type, 0};
        static const char *const ops[] = {"mul", "mm", "sum", "cat", "embedding", "where"};
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            const opr_op *op = opr_op_find(ctx, ops[o]);
            for (int i = 0; op && i < opr_op_sample_count(op); i++)
                for (int v = 1; v < opr_op_sample_variant_count(op, i); v++) {
                    built h, d;
                    build_ok(op, i, v, OPR_F32, &h);
                    if (starts(h.label, "size-") || !strcmp(h.label, "large")) { unbuild(&h); continue; }
                    int rc = opr_op_sample_variant_args(op, i, v, OPR_F32, dev, 7, d.args, &d.nargs, d.owned, &d.nowned,
                                                        d.label, sizeof d.label);
                    ck_assert_msg(rc == OPR_OK, "%s on %s: %s", h.label, opr_device_type_name(ctx, type), opr_last_error());
                    ck_assert_str_eq(d.label, h.label);
                    for (int k = 0; k < h.nowned; k++) {
                        ck_assert(opr_tensor_device(d.owned[k]).type == type);
                        ck_assert_int_eq(opr_tensor_offset(d.owned[k]), opr_tensor_offset(h.owned[k]));
                        for (int dd = 0; dd < opr_tensor_ndim(h.owned[k]); dd++)
                            ck_assert_int_eq(opr_tensor_stride(d.owned[k], dd), opr_tensor_stride(h.owned[k], dd));
                        double *a = tu_to_f64(h.owned[k]), *b = tu_to_f64(d.owned[k]);
                        for (int64_t j = 0; j < opr_tensor_numel(h.owned[k]); j++)
                            ck_assert_msg(a[j] == b[j], "%s %s: element %lld", ops[o], h.label, (long long)j);
                        free(a);
                        free(b);
                    }
                    compared++;
                    unbuild(&h);
                    unbuild(&d);
                }
        }
    }
    if (opr_device_type_count(ctx) > 1) ck_assert_int_gt(compared, 10);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sample_variants");
    TCase *tc = tcase_create("variants");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_labels);
    tcase_add_test(tc, test_layout_values);
    tcase_add_test(tc, test_large_is_large);
    tcase_add_test(tc, test_cpu_f32_agrees_with_f64);
    tcase_add_test(tc, test_broken_kernels_caught);
    tcase_add_test(tc, test_layouts_on_devices);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
