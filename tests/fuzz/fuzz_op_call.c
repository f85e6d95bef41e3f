/* libFuzzer harness: calls of the built-in ops (CPU plugin loaded) with arguments
 * decoded from the input: which op, how many arguments, of which kinds (mostly the
 * schema's, sometimes any other), tensors of any dtype, rank and size (huge, zero and
 * negative sizes included; strided and offset views; bool bytes other than 0 and 1;
 * shapes taken from a size of an earlier argument, right or off by one, as optional
 * weights need), ints and floats including the extremes (int64's edges for the numbers
 * that meet integer dtypes), int lists, strings; jagged tensors with offsets from the
 * input). Then the gradient plan (opr_plan_explain,
 * opr_plan_saved_bytes) and, when the result requires grad, backward; sometimes the
 * call first runs under opr_vmap, its tensors batched along dims from the input. The
 * context is made once: calls do not change the registry. */
#include "fuzz_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

/* Past the end of the input every byte reads as 0: the schema's kinds, small sizes. */
static uint8_t byte(input *in)
{
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

static uint64_t raw64(input *in)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | byte(in);
    return v;
}

/* Mostly small values (sizes, dims, indices); sometimes the ones that break arithmetic. */
static int64_t any_int(input *in)
{
    static const int64_t special[] = {INT64_MAX, INT64_MIN, INT64_MIN + 1, INT32_MAX, INT32_MIN, (int64_t)1 << 31,
                                      (int64_t)1 << 32, (int64_t)1 << 40, (int64_t)1 << 62, INT64_MAX / 8,
                                      INT64_MAX / 8 + 1, -((int64_t)1 << 62), 1000, -1000, 9, -9, 8, -8};
    uint8_t b = byte(in);
    if (b < 0xc0) return (int64_t)(b % 8) - 3; /* -3 .. 4 */
    if (b < 0xf8) return special[b % (sizeof special / sizeof special[0])];
    return (int64_t)raw64(in);
}

static double any_double(input *in)
{
    static const double special[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e300, -1e300, 1e-310, INFINITY, -INFINITY, NAN,
                                     9.2233720368547758e18, -9.2233720368547758e18, 3.0, 1e20};
    /* where a number meets an integer dtype (a Scalar, masked_fill's value): the edges
     * of int64 and just past them, and what has no integer value at all */
    static const double int_edges[] = {1e19, -1e19, 0x1p63, -0x1p63, 0x1.fffffffffffffp62, -0x1.0000000000001p63,
                                       0x1p64, NAN, INFINITY, -INFINITY, 0x1p53 + 1, 2.5};
    uint8_t b = byte(in);
    if (b >= 0xe0 && b < 0xf0) return int_edges[(b - 0xe0) % (sizeof int_edges / sizeof int_edges[0])];
    if (b < 0xf0) return special[b % (sizeof special / sizeof special[0])];
    uint64_t bits = raw64(in);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* A dimension: mostly 0..4, sometimes huge or negative. */
static int64_t any_dim(input *in)
{
    static const int64_t special[] = {-1, 1 << 20, (int64_t)1 << 31, (int64_t)1 << 40, INT64_MAX, INT64_MAX / 8, 7, 64,
                                      1000, -5};
    uint8_t b = byte(in);
    if (b < 0xe8) return b % 5;
    return special[b % (sizeof special / sizeof special[0])];
}

typedef struct call_state {
    opr_ctx *ctx;
    opr_tensor *owned[64];   /* everything to release at the end */
    int nowned;
    opr_tensor *leaves[64];  /* tensors marked as requiring grad */
    int nleaves;
    opr_tensor *lists[16][4];
    int64_t ints[16][OPR_MAX_DIMS + 2];
    /* the shapes (and int lists) of the last arguments, so that a later tensor can take
     * a size from one: a weight with one entry per class of the input, or one too
     * many, none, or an extra dim (the optional weights of the losses) */
    int64_t recent[4][OPR_MAX_DIMS];
    int nrecent_dims[4], nrecent;
} call_state;

static void remember(call_state *st, const int64_t *shape, int n)
{
    if (n < 0 || n > OPR_MAX_DIMS) return;
    const int at = st->nrecent++ % 4;
    memcpy(st->recent[at], shape, (size_t)n * sizeof *shape);
    st->nrecent_dims[at] = n;
}

/* A shape made from a size of a recent argument (flags 0x10 of any_tensor): [c],
 * [0], [c, 1], [c + 1], [c - 1], or the argument's whole shape. */
static int related_shape(call_state *st, input *in, int64_t *shape)
{
    const int from = byte(in) % (st->nrecent < 4 ? st->nrecent : 4), nd = st->nrecent_dims[from];
    const int64_t *src = st->recent[from], c = nd ? src[byte(in) % nd] : 1;
    switch (byte(in) % 6) {
    case 0: shape[0] = c; return 1;
    case 1: shape[0] = 0; return 1;
    case 2: shape[0] = c; shape[1] = 1; return 2;
    case 3: shape[0] = (int64_t)((uint64_t)c + 1); return 1; /* wrapping: INT64_MAX + 1 is just a bad size */
    case 4: shape[0] = (int64_t)((uint64_t)c - 1); return 1;
    default: memcpy(shape, src, (size_t)nd * sizeof *shape); return nd;
    }
}

static opr_tensor *keep(call_state *st, opr_tensor *t)
{
    if (t && st->nowned < 64) st->owned[st->nowned++] = t;
    else if (t) { opr_tensor_release(t); t = NULL; }
    return t;
}

/* Fills a host buffer for a tensor of n elements: small numbers (valid indices for
 * i64), raw bytes for bool (values other than 0/1 too). */
static void fill(input *in, opr_dtype dt, int64_t n, void *buf)
{
    uint8_t seed = byte(in);
    for (int64_t i = 0; i < n; i++) {
        uint8_t r = (uint8_t)(seed + 37 * i);
        switch (dt) {
        case OPR_F32: ((float *)buf)[i] = (float)(r % 17) / 4 - 2; break;
        case OPR_F64: ((double *)buf)[i] = (double)(r % 17) / 4 - 2; break;
        case OPR_I64: ((int64_t *)buf)[i] = r % 5 == 4 ? -1 : r % 4; break;
        case OPR_BOOL: ((uint8_t *)buf)[i] = i < 4 ? byte(in) : r & 1; break;
        case OPR_F16: ((uint16_t *)buf)[i] = opr_f16_from_float((float)(r % 9) - 4); break;
        case OPR_BF16: ((uint16_t *)buf)[i] = opr_bf16_from_float((float)(r % 9) - 4); break;
        default: break;
        }
    }
}

static opr_tensor *any_tensor(call_state *st, input *in)
{
    uint8_t flags = byte(in);
    uint8_t dtb = byte(in);
    /* mostly a valid dtype; 0xff: an invalid one, which must be refused */
    opr_dtype dt = dtb == 0xff ? (opr_dtype)OPR_DTYPE_COUNT : (opr_dtype)(dtb % OPR_DTYPE_COUNT);
    int64_t shape[10];
    const bool related = (flags & 0x10) && st->nrecent;
    int ndim = related ? related_shape(st, in, shape) : byte(in) % 10; /* 9: one past OPR_MAX_DIMS */
    int64_t numel = 1;
    bool huge = false;
    for (int d = 0; d < ndim; d++) {
        if (!related) shape[d] = any_dim(in);
        if (shape[d] < 0 || (shape[d] && numel > ((int64_t)1 << 40) / shape[d])) huge = true;
        else numel *= shape[d];
    }
    remember(st, shape, ndim);
    opr_tensor *t;
    if (huge || numel > 4096) {
        /* no data to fill: an expanded view of one element while kernels can still go
         * through it quickly (they read it with stride 0); past that, only sizes too
         * large for any allocation, which must fail cleanly (a size in between would
         * only make the run slow) */
        int64_t ones[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
        opr_tensor *one = opr_tensor_new(st->ctx, dt, ndim, ones, OPR_CPU);
        if (!huge && numel <= (1 << 20)) t = one ? opr_tensor_expand(one, shape, ndim) : NULL;
        else if (huge) t = opr_tensor_new(st->ctx, dt, ndim, shape, OPR_CPU);
        else t = NULL;
        opr_tensor_release(one);
    } else {
        size_t es = opr_dtype_size(dt) ? opr_dtype_size(dt) : 1;
        void *buf = calloc((size_t)(numel ? numel : 1), es);
        if (!buf) return NULL;
        fill(in, dt, numel, buf);
        /* bool data goes in with bytes other than 0 and 1 too: opr_tensor_from_data
         * takes any byte as true (writing such bytes straight into a bool tensor's
         * storage breaks its documented 0/1 contract, so the harness does not) */
        t = opr_tensor_from_data(st->ctx, dt, ndim, shape, buf, OPR_CPU);
        free(buf);
    }
    if (!t) return NULL;
    keep(st, t);
    /* strided and offset views of it */
    opr_tensor *v = NULL;
    switch (flags & 3) {
    case 1: if (ndim >= 2) v = opr_tensor_transpose(t, 0, ndim - 1); break;
    case 2: if (ndim >= 1 && shape[0] >= 2) v = opr_tensor_narrow(t, 0, 1, shape[0] - 1); break;
    case 3: if (ndim >= 2) v = opr_tensor_diagonal(t, 0, 0, 1); break;
    }
    if (v) t = keep(st, v);
    if ((flags & 8) && ndim >= 1) { /* jagged over dim 0, with offsets from the input (often invalid) */
        int64_t offs[5];
        const int nb = byte(in) % 4;
        offs[0] = byte(in) < 0xf0 ? 0 : any_int(in);
        for (int b = 1; b <= nb; b++) /* wrapping: past INT64_MAX is just another bad offset */
            offs[b] = byte(in) < 0xf0 ? (int64_t)((uint64_t)offs[b - 1] + byte(in) % 3) : any_int(in);
        if (byte(in) < 0xc0) offs[nb] = shape[0];
        int64_t n = nb + 1;
        opr_tensor *o = keep(st, opr_tensor_from_data(st->ctx, OPR_I64, 1, &n, offs, OPR_CPU));
        opr_tensor *j = o ? opr_jagged_from_values(t, o) : NULL;
        if (j) t = keep(st, j);
    }
    if ((flags & 4) && opr_dtype_is_floating(dt) && opr_set_requires_grad(t, true) == OPR_OK && st->nleaves < 64)
        st->leaves[st->nleaves++] = t;
    return t;
}

static const char *any_string(input *in)
{
    static const char *const strings[] = {"f32", "f64", "i64", "bool", "f16", "bf16", "cpu", "cpu:0", "cpu:1",
                                          "cuda", "cuda:0", "", "float", "long", "nope", "cpu:-1", "cpu:99999999999",
                                          "mean", "sum", "none"}; /* the losses' reductions */
    return strings[byte(in) % (sizeof strings / sizeof strings[0])];
}

static opr_value any_value(call_state *st, input *in, int kind, int slot)
{
    switch (kind) {
    case OPR_V_TENSOR: return opr_v_tensor(any_tensor(st, in));
    case OPR_V_TENSOR_LIST: {
        uint8_t b = byte(in);
        int n = b == 0xff ? -1 : b % 5; /* -1: a negative count, to be refused */
        for (int i = 0; i < n; i++) st->lists[slot][i] = any_tensor(st, in);
        return opr_v_tensors(st->lists[slot], n);
    }
    case OPR_V_INT: return opr_v_int(any_int(in));
    case OPR_V_DOUBLE: return opr_v_double(any_double(in));
    case OPR_V_BOOL: return opr_v_bool(byte(in) & 1);
    case OPR_V_INT_LIST: {
        uint8_t b = byte(in);
        int n = b == 0xff ? -1 : b % (OPR_MAX_DIMS + 2); /* up to one past OPR_MAX_DIMS */
        for (int i = 0; i < n; i++) st->ints[slot][i] = any_int(in);
        remember(st, st->ints[slot], n);
        return opr_v_ints(st->ints[slot], n);
    }
    case OPR_V_STRING: return opr_v_string(any_string(in));
    default: return opr_v_none();
    }
}

static opr_ctx *ctx;

/* The call under opr_vmap: the tensor arguments become the vmap's inputs, batched or
 * not as the input says, and the callback makes the same call on what it gets. */
typedef struct mapped_call {
    const opr_op *op;
    opr_value *args;
    int nargs, nres;
    int pos[16];          /* the argument of each vmap input */
} mapped_call;

static opr_status call_mapped(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    mapped_call *m = ud;
    opr_value a[16];
    memcpy(a, m->args, (size_t)m->nargs * sizeof *a);
    for (int i = 0; i < nin; i++) a[m->pos[i]] = opr_v_tensor(in[i]);
    (void)nout;
    return opr_call(m->op, a, m->nargs, out, m->nres);
}

static void run_mapped(input *in, const opr_op *op, opr_value *args, int nargs, int nres)
{
    mapped_call m = {op, args, nargs < 16 ? nargs : 16, nres, {0}};
    opr_tensor *ins[16];
    int dims[16], n = 0;
    for (int a = 0; a < m.nargs; a++) {
        if (args[a].kind != OPR_V_TENSOR || !args[a].u.t) continue;
        m.pos[n] = a;
        ins[n] = args[a].u.t;
        uint8_t d = byte(in);
        dims[n++] = d < 0x80 ? 0 : d < 0xc0 ? -1 : d < 0xf0 ? opr_tensor_ndim(args[a].u.t) - 1 : (int)(int8_t)d;
    }
    if (!n || nres < 1 || nres > 8) return;
    opr_tensor *out[8] = {0};
    opr_vmap_opts o = {.struct_size = sizeof o, .chunk_size = byte(in) % 3};
    int out_dims[8] = {0};
    if (opr_vmap(ctx, call_mapped, &m, ins, dims, n, out, out_dims, nres, &o) == OPR_OK)
        for (int k = 0; k < nres; k++) opr_tensor_release(out[k]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx) ctx = fz_ctx_new(true); /* freed at exit by the OS: the ops never change */
    input in = {data, size};
    call_state *st = calloc(1, sizeof *st);
    if (!st) return 0;
    st->ctx = ctx;
    int count = opr_op_count(ctx);
    const opr_op *op = opr_op_at(ctx, (byte(&in) | byte(&in) << 8) % count);
    int nparams = opr_op_num_args(op);
    uint8_t b = byte(&in);
    int nargs = b < 0xf0 ? nparams : b % (nparams + 2); /* sometimes fewer, or one too many */
    uint8_t mode = byte(&in);
    opr_value args[16];
    for (int a = 0; a < nargs && a < 16; a++) {
        uint8_t k = byte(&in);
        int kind = k < 0xe0 && a < nparams ? opr_op_arg_kind(op, a) : k % 8;
        args[a] = any_value(st, &in, kind, a);
    }
    int nout = opr_op_num_outputs(op);
    uint8_t r = byte(&in);
    int nres = r < 0xfc ? nout : r == 0xfc ? nout + 1 : r == 0xfd ? nout - 1 : r == 0xfe ? 0 : -1;

    bool prev_mode = opr_grad_mode_set(!(mode & 1));
    /* the plan for the floating tensor inputs (a subset chosen by the input) */
    if (mode & 2) {
        const char *names[16];
        int n = 0;
        uint8_t pick = byte(&in);
        for (int a = 0; a < nargs && a < nparams; a++)
            if (args[a].kind == OPR_V_TENSOR && args[a].u.t && (pick >> (a % 8) & 1))
                names[n++] = opr_op_arg_name(op, a);
        if (mode & 4) names[n++] = byte(&in) & 1 ? "no_such_input" : "result";
        char buf[4096];
        uint64_t bytes;
        opr_plan_explain(op, args, nargs, names, n, buf, sizeof buf);
        opr_plan_saved_bytes(op, args, nargs, names, n, &bytes);
    }
    if (mode & 128) { /* the same call mapped over a batch, then plainly below */
        run_mapped(&in, op, args, nargs, nres);
        if (byte(&in) & 1) {
            opr_grad_mode_set(prev_mode);
            for (int i = 0; i < st->nowned; i++) opr_tensor_release(st->owned[i]);
            free(st);
            return 0;
        }
    }
    opr_tensor *res[8] = {0};
    int rc = opr_call(op, args, nargs, res, nres);
    if (rc == OPR_OK && (mode & 8) && nout > 0 && res[0] && opr_requires_grad(res[0])) {
        opr_backward_opts o = {.struct_size = sizeof o, .retain_graph = mode & 16, .create_graph = mode & 32};
        opr_tensor *grad = NULL;
        if (opr_tensor_numel(res[0]) != 1 || (mode & 64)) {
            /* ones when small enough to fill, zeros otherwise */
            opr_dtype dt = opr_tensor_dtype(res[0]);
            grad = opr_tensor_new(ctx, dt, opr_tensor_ndim(res[0]), opr_tensor_shape(res[0]), OPR_CPU);
            int64_t n = opr_tensor_numel(res[0]);
            if (grad && (dt == OPR_F32 || dt == OPR_F64) && n > 0 && n <= 4096) {
                double ones[4096];
                float onesf[4096];
                for (int64_t i = 0; i < n; i++) ones[i] = onesf[i] = 1;
                if (dt == OPR_F64) opr_tensor_copy_from_host(grad, ones, (size_t)n * sizeof *ones);
                else opr_tensor_copy_from_host(grad, onesf, (size_t)n * sizeof *onesf);
            }
        }
        if (opr_backward(res[0], grad, &o) == OPR_OK && (mode & 16)) {
            opr_tensor *grads[64] = {0};
            if (opr_autograd_grad(&res[0], &grad, 1, st->leaves, st->nleaves, grads, NULL) == OPR_OK)
                for (int i = 0; i < st->nleaves; i++) opr_tensor_release(grads[i]);
        }
        opr_tensor_release(grad);
    }
    opr_grad_mode_set(prev_mode);
    for (int i = 0; i < 8; i++) opr_tensor_release(rc == OPR_OK ? res[i] : NULL);
    for (int i = 0; i < st->nowned; i++) opr_tensor_release(st->owned[i]);
    free(st);
    return 0;
}
