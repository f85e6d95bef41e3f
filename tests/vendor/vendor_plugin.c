/* A vendor's backend, built out of tree against the installed headers only
 * (tests/vendor_check.sh): its own device "vdev" (host memory), a few kernels there,
 * and its own ops: vfma(self, other) = self * other + self with YAML derivatives and a
 * fused backward kernel (vfma also gets a CPU kernel, so that the reference forward,
 * the CPU in f64, can run it), and swish(self, beta) = self * sigmoid(beta * self),
 * which only vdev runs (its derivative formula is checked on vdev, the ops it calls
 * falling back to the CPU).
 *
 * Compile definitions select deliberately broken variants (CMakeLists.txt: variant v
 * defines VENDOR_<V>), each of which `opreg check` must catch and blame on the right
 * culprit (tests/vendor_check.sh):
 *   VENDOR_WRONG_FORWARD  the mul kernel on vdev is wrong (ops whose formulas call mul
 *                         must say they depend on it, not fail themselves)
 *   VENDOR_WRONG_FUSED    the fused backward kernel vfma_backward is wrong
 *   VENDOR_WRONG_FORMULA  no code change: the variant ships vendor_ops_wrong_formula.yaml
 *   VENDOR_OVERRIDE_NO_FLAG  a wrong mul for the cpu device, registered without
 *                         override_dtypes: it must not run (the CPU plugin provides the
 *                         device), and check must name both plugins
 *   VENDOR_CRASH_FORWARD  the mul kernel on vdev dies of SIGSEGV (check must name mul's
 *                         forward and still print every row and its summary)
 *   VENDOR_CRASH_FUSED    the fused backward kernel vfma_backward dies of SIGSEGV
 *   VENDOR_HANG           the relu kernel on vdev never returns (check --timeout)
 *   VENDOR_OVERRUN        the relu kernel writes one element past its output (into the
 *                         canary), the exp kernel 100 elements past (into the guard page)
 *   VENDOR_STRIDED_ONLY   mul is off by one, only when an input is not contiguous
 *   VENDOR_SIZE_ONLY      mm is wrong from row 4 on (right on every sample as written)
 *   VENDOR_UNSUPPORTED    mul, registered for f32 and f64, refuses f64 at run time with
 *                         OPR_ERR_UNSUPPORTED and a message; mm's supports (ABI 2.2)
 *                         refuses a column-major self before the kernel runs
 *   VENDOR_SWISH_FORMULA  no code change: vendor_ops_swish_formula.yaml gives swish (an op
 *                         only vdev runs) a derivative formula without its factor beta
 *   VENDOR_SWISH_F32      swish on vdev in f32 only: its formula is checked against finite
 *                         differences in f32 there (and must pass)
 *   VENDOR_SWISH_F32_FORMULA  the same with the wrong formula of VENDOR_SWISH_FORMULA
 *   VENDOR_STRICT         kernels that a run without --strict never notices: relu also
 *                         registered under a misspelt op name (reluu, skipped at load),
 *                         vfma also for i64, which its schema does not list
 *   VENDOR_EXTENDS        the plugin adds a fused backward kernel to the built-in mul
 *                         from its own YAML (an `extends: mul` entry, loaded as a string):
 *                         vdev_mul_backward, which opreg check must check like mul's own
 *   VENDOR_EXTENDS_WRONG  the same kernel, wrong for other's gradient
 *   VENDOR_REMAINDER      relu's loop over a strided row misses the last element when the
 *                         row's length is not a multiple of 4 (relu's sample is [3, 4]:
 *                         only the odd-size variant on a strided input shows it)
 *   VENDOR_REFERENCE      vendor_ops_reference.yaml gives swish a reference: (what the CPU
 *                         runs for it), and the swish kernel is wrong in f64 only: its
 *                         forward is compared, the f64 one blamed on the kernel
 *   VENDOR_ORDINALS       vdev has two ordinals and mul is wrong on ordinal 0 only: checked
 *                         with --backend vdev:1, it must pass (the run is on ordinal 1)
 *   VENDOR_HOSTILE        kernels that attack the worker rather than compute wrong: relu
 *                         closes every fd the worker has and then never returns; exp
 *                         prints to stdout and stderr and starts a background process
 *                         that outlives it (check must time relu out, not wait for the
 *                         background process, and keep --format json parseable)
 *   VENDOR_YAML           the absolute path of the op definitions to load */
#include <opreg/plugin.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef VENDOR_YAML
#error "VENDOR_YAML: the absolute path of the op definitions this plugin ships"
#endif

static void *dev_alloc(void *data, int32_t ordinal, size_t n) { (void)data; (void)ordinal; return malloc(n ? n : 1); }
static void dev_free(void *data, int32_t ordinal, void *p, size_t n) { (void)data; (void)ordinal; (void)n; free(p); }
static int dev_copy(void *data, int32_t ordinal, void *dst, const void *src, size_t n)
{
    (void)data; (void)ordinal;
    if (n) memcpy(dst, src, n);
    return OPR_OK;
}
static int dev_sync(void *data, int32_t ordinal) { (void)data; (void)ordinal; return OPR_OK; }

/* Element idx (an index of the output's shape, ndim dims) of v, broadcast
 * right-aligned as the ops' `shape: broadcast(...)` says. */
static double load(const opr_tensor_view *v, const int64_t *idx, int ndim)
{
    int64_t off = 0;
    for (int d = 0; d < v->ndim; d++) {
        int od = ndim - v->ndim + d;
        if (v->shape[d] != 1) off += idx[od] * v->strides[d];
    }
    return v->dtype == OPR_F32 ? ((const float *)v->data)[off] : ((const double *)v->data)[off];
}

static void store(opr_tensor_view *o, const int64_t *idx, double x)
{
    int64_t off = 0;
    for (int d = 0; d < o->ndim; d++) off += idx[d] * o->strides[d];
    if (o->dtype == OPR_F32) ((float *)o->data)[off] = (float)x;
    else ((double *)o->data)[off] = x;
}

typedef double (*elem_fn)(double a, double b, double s);

/* out = fn(a, b, s) over the output's shape; b may be NULL. */
static int elementwise(const opr_kernel_call *call, const opr_tensor_view *a, const opr_tensor_view *b, double s,
                       opr_tensor_view *o, elem_fn fn)
{
    if (!a || !o || (a->dtype != OPR_F32 && a->dtype != OPR_F64)) {
        call->host->set_error(call, "vdev: %s: f32 or f64 tensors only", call->op);
        return OPR_ERR_UNSUPPORTED;
    }
    int64_t idx[OPR_MAX_DIMS] = {0};
    for (int64_t k = 0; k < o->numel; k++) {
        store(o, idx, fn(load(a, idx, o->ndim), b ? load(b, idx, o->ndim) : 0, s));
        for (int d = o->ndim - 1; d >= 0 && ++idx[d] == o->shape[d]; d--) idx[d] = 0;
    }
    return OPR_OK;
}

static const opr_tensor_view *tensor_arg(const opr_kernel_call *call, int i)
{
    return i < call->nargs && call->args[i]->kind == OPR_ARG_TENSOR ? call->args[i]->u.t : NULL;
}

static double f_add(double a, double b, double s) { return a + s * b; }
#ifdef VENDOR_WRONG_FORWARD
static double f_mul(double a, double b, double s) { (void)s; return a * b + 0.25; } /* wrong on purpose */
#else
static double f_mul(double a, double b, double s) { (void)s; return a * b; }
#endif
#ifdef VENDOR_OVERRIDE_NO_FLAG
static double f_mul_wrong(double a, double b, double s) { (void)s; return a * b + 0.5; } /* must never run */
#endif
static double f_exp(double a, double b, double s) { (void)b; (void)s; return exp(a); }
static double f_vfma(double a, double b, double s) { (void)s; return a * b + a; }
static double f_grad_self(double g, double other, double s) { (void)s; return g * other + g; }
#ifdef VENDOR_WRONG_FUSED
static double f_grad_other(double g, double self, double s) { (void)s; return 2 * g * self; } /* wrong on purpose */
#else
static double f_grad_other(double g, double self, double s) { (void)s; return g * self; }
#endif

static int k_add(const opr_kernel_call *call)
{
    double alpha = call->nargs > 2 && call->args[2]->kind == OPR_ARG_DOUBLE ? call->args[2]->u.d : 1;
    return elementwise(call, tensor_arg(call, 0), tensor_arg(call, 1), alpha, call->outputs[0], f_add);
}
#ifdef VENDOR_STRIDED_ONLY
/* True if v's elements lie in row-major order without gaps. */
static bool contiguous(const opr_tensor_view *v)
{
    int64_t expect = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->strides[d] != expect) return false;
        expect *= v->shape[d];
    }
    return true;
}
static double f_mul_off_by_one(double a, double b, double s) { (void)s; return a * b + 1; } /* wrong on purpose */
#endif

static int k_mul(const opr_kernel_call *call)
{
#ifdef VENDOR_CRASH_FORWARD
    raise(SIGSEGV); /* on purpose */
#endif
#ifdef VENDOR_UNSUPPORTED
    if (call->outputs[0]->dtype == OPR_F64) {
        call->host->set_error(call, "vdev mul: this firmware takes no f64 tensors");
        return OPR_ERR_UNSUPPORTED;
    }
#endif
#ifdef VENDOR_STRIDED_ONLY
    if (!contiguous(tensor_arg(call, 0)) || !contiguous(tensor_arg(call, 1)))
        return elementwise(call, tensor_arg(call, 0), tensor_arg(call, 1), 0, call->outputs[0], f_mul_off_by_one);
#endif
#ifdef VENDOR_ORDINALS
    if (call->outputs[0]->device.index == 0) /* wrong on ordinal 0, on purpose */
        return elementwise(call, tensor_arg(call, 0), tensor_arg(call, 1), 0, call->outputs[0], f_add);
#endif
    return elementwise(call, tensor_arg(call, 0), tensor_arg(call, 1), 0, call->outputs[0], f_mul);
}
#ifdef VENDOR_OVERRIDE_NO_FLAG
static int k_mul_wrong(const opr_kernel_call *call)
{
    return elementwise(call, tensor_arg(call, 0), tensor_arg(call, 1), 0, call->outputs[0], f_mul_wrong);
}
#endif
static double f_relu(double a, double b, double s) { (void)b; (void)s; return a > 0 ? a : 0; }
static int k_relu(const opr_kernel_call *call)
{
#ifdef VENDOR_HANG
    for (;;) sleep(1); /* on purpose */
#endif
#ifdef VENDOR_HOSTILE
    for (int fd = 0; fd < 1024; fd++) close(fd); /* the worker's pipes among them, on purpose */
    for (;;) sleep(1);
#endif
    int rc = elementwise(call, tensor_arg(call, 0), NULL, 0, call->outputs[0], f_relu);
#ifdef VENDOR_REMAINDER
    const opr_tensor_view *in = tensor_arg(call, 0);
    opr_tensor_view *out = call->outputs[0];
    int64_t row = in && in->ndim ? in->shape[in->ndim - 1] : 0;
    if (!rc && row % 4 && in->strides[in->ndim - 1] != 1) /* on purpose: the remainder's last element */
        for (int64_t k = row - 1; k < out->numel; k += row) {
            int64_t idx[OPR_MAX_DIMS] = {0}, rest = k;
            for (int d = out->ndim - 1; d >= 0; d--) { idx[d] = rest % out->shape[d]; rest /= out->shape[d]; }
            store(out, idx, -1);
        }
#endif
#ifdef VENDOR_OVERRUN
    opr_tensor_view *o = call->outputs[0];
    if (!rc && o->dtype == OPR_F32) ((float *)o->data)[o->numel] = 1; /* one element too many, on purpose */
    if (!rc && o->dtype == OPR_F64) ((double *)o->data)[o->numel] = 1;
#endif
    return rc;
}

/* swish(self, beta) = self * sigmoid(beta * self) */
static double f_swish(double a, double b, double beta) { (void)b; return a / (1 + exp(-beta * a)); }
static int k_swish(const opr_kernel_call *call)
{
    double beta = call->nargs > 1 && call->args[1]->kind == OPR_ARG_DOUBLE ? call->args[1]->u.d : 1;
#ifdef VENDOR_REFERENCE
    if (call->outputs[0]->dtype == OPR_F64) beta = 1; /* wrong on purpose: beta ignored in f64 */
#endif
    return elementwise(call, tensor_arg(call, 0), NULL, beta, call->outputs[0], f_swish);
}

/* mm over strided f32/f64 matrices, one dot product per element. */
static int k_mm(const opr_kernel_call *call)
{
    const opr_tensor_view *a = tensor_arg(call, 0), *b = tensor_arg(call, 1);
    opr_tensor_view *o = call->outputs[0];
    if (!a || !b || a->ndim != 2 || b->ndim != 2 || (a->dtype != OPR_F32 && a->dtype != OPR_F64)) {
        call->host->set_error(call, "vdev: mm: 2-d f32 or f64 tensors only");
        return OPR_ERR_UNSUPPORTED;
    }
    for (int64_t i = 0; i < o->shape[0]; i++)
        for (int64_t j = 0; j < o->shape[1]; j++) {
            double acc = 0;
            for (int64_t k = 0; k < a->shape[1]; k++) {
                int64_t ia[2] = {i, k}, ib[2] = {k, j};
                acc += load(a, ia, 2) * load(b, ib, 2);
            }
#ifdef VENDOR_SIZE_ONLY
            if (i >= 4) acc += 0.5; /* wrong on purpose, past the samples' sizes */
#endif
            int64_t io[2] = {i, j};
            store(o, io, acc);
        }
    return OPR_OK;
}

#ifdef VENDOR_UNSUPPORTED
/* Asked before k_mm runs, on metadata: a transposed self is refused (the kernel is not
 * called, opreg check -v says why). */
static bool mm_supports(const opr_kernel_call *call, char *why, size_t why_len)
{
    const opr_tensor_view *a = tensor_arg(call, 0);
    if (!a || a->ndim != 2 || a->strides[1] == 1 || a->shape[1] < 2) return true;
    snprintf(why, why_len, "vdev mm: self must be row-major (its strides are %lld, %lld)", (long long)a->strides[0],
             (long long)a->strides[1]);
    return false;
}
#endif

static int k_exp(const opr_kernel_call *call)
{
#ifdef VENDOR_HOSTILE
    static bool started; /* once per worker process */
    if (!started) {
        started = true;
        printf("vdev exp: a kernel writing to stdout\n");
        fflush(stdout);
        fprintf(stderr, "vdev exp: a kernel writing to stderr\n");
        if (system("sleep 120 &")) return OPR_ERR_INVALID; /* a daemon holding whatever it inherited */
    }
#endif
    int rc = elementwise(call, tensor_arg(call, 0), NULL, 0, call->outputs[0], f_exp);
#ifdef VENDOR_OVERRUN
    opr_tensor_view *o = call->outputs[0];
    if (!rc && o->dtype == OPR_F32) ((float *)o->data)[o->numel + 100] = 1; /* far past, on purpose */
    if (!rc && o->dtype == OPR_F64) ((double *)o->data)[o->numel + 100] = 1;
#endif
    return rc;
}
static int k_vfma(const opr_kernel_call *call)
{
    return elementwise(call, tensor_arg(call, 0), tensor_arg(call, 1), 0, call->outputs[0], f_vfma);
}

/* args: grad, self, other, result (plugin.h: fused backward kernels); outputs: the
 * gradients of self and other, those whose grad_input_mask bit is set. */
static int k_vfma_backward(const opr_kernel_call *call)
{
    const opr_tensor_view *g = tensor_arg(call, 0), *self = tensor_arg(call, 1), *other = tensor_arg(call, 2);
    int rc = OPR_OK;
#ifdef VENDOR_CRASH_FUSED
    raise(SIGSEGV); /* on purpose */
#endif
    if (call->grad_input_mask & 1) {
        if (!other) { call->host->set_error(call, "vfma_backward: other was not saved"); return OPR_ERR_INVALID; }
        rc = elementwise(call, g, other, 0, call->outputs[0], f_grad_self);
    }
    if (!rc && (call->grad_input_mask & 2)) {
        if (!self) { call->host->set_error(call, "vfma_backward: self was not saved"); return OPR_ERR_INVALID; }
        rc = elementwise(call, g, self, 0, call->outputs[1], f_grad_other);
    }
    return rc;
}

#if defined(VENDOR_EXTENDS) || defined(VENDOR_EXTENDS_WRONG)
/* o += g * x over g's elements, o being x's or the other input's shape (mul
 * broadcasts): each gradient element sums what it was broadcast to. */
static void accumulate_product(const opr_tensor_view *g, const opr_tensor_view *x, opr_tensor_view *o, double scale)
{
    int64_t idx[OPR_MAX_DIMS] = {0};
    for (int64_t k = 0; k < o->numel; k++) { /* o is contiguous (an output) */
        if (o->dtype == OPR_F32) ((float *)o->data)[k] = 0;
        else ((double *)o->data)[k] = 0;
    }
    for (int64_t k = 0; k < g->numel; k++) {
        int64_t off = 0, stride = 1;
        for (int d = o->ndim - 1; d >= 0; d--) { /* o's element that g's element k came from */
            int gd = g->ndim - o->ndim + d;
            if (o->shape[d] != 1) off += idx[gd] * stride;
            stride *= o->shape[d];
        }
        double v = scale * load(g, idx, g->ndim) * load(x, idx, g->ndim);
        if (o->dtype == OPR_F32) ((float *)o->data)[off] += (float)v;
        else ((double *)o->data)[off] += v;
        for (int d = g->ndim - 1; d >= 0 && ++idx[d] == g->shape[d]; d--) idx[d] = 0;
    }
}

/* The fused backward of the built-in mul on vdev (args: grad, self, other, result). */
static int k_mul_backward(const opr_kernel_call *call)
{
    const opr_tensor_view *g = tensor_arg(call, 0), *self = tensor_arg(call, 1), *other = tensor_arg(call, 2);
#ifdef VENDOR_EXTENDS_WRONG
    const double other_scale = 2; /* wrong on purpose */
#else
    const double other_scale = 1;
#endif
    if (!g || ((call->grad_input_mask & 1) && !other) || ((call->grad_input_mask & 2) && !self)) {
        call->host->set_error(call, "vdev_mul_backward: an input it needs was not saved");
        return OPR_ERR_INVALID;
    }
    if (call->grad_input_mask & 1) accumulate_product(g, other, call->outputs[0], 1);
    if (call->grad_input_mask & 2) accumulate_product(g, self, call->outputs[1], other_scale);
    return OPR_OK;
}

/* Shipped inside the plugin: a candidate for the built-in mul, not a new op. */
static const char *const extends_yaml =
    "- extends: mul\n"
    "  self, other:\n"
    "    kernel: vdev_mul_backward\n"
    "    needs: {self: [other], other: [self]}\n"
    "    flops: 2 * numel(result)\n";
#endif

OPR_PLUGIN_EXPORT int opr_plugin_init(const opr_host_api *host, opr_plugin *self)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "vendor";
    self->version = "1.0.0";
    opr_device_desc dev = {
        .struct_size = sizeof dev, .name = "vdev", .count = 1,
        .flops_per_s = 1e9, .bytes_per_s = 1e9, .launch_ns = 1000,
        .alloc = dev_alloc, .free = dev_free, .copy_to_host = dev_copy,
        .copy_from_host = dev_copy, .copy_device = dev_copy, .sync = dev_sync,
        .flags = OPR_DEVICE_HOST_MEMORY,
    };
#ifdef VENDOR_ORDINALS
    dev.count = 2;
#endif
    int rc = host->register_device(self, &dev);
    if (!rc) rc = host->load_yaml(self, VENDOR_YAML);
#if defined(VENDOR_EXTENDS) || defined(VENDOR_EXTENDS_WRONG)
    if (!rc) rc = host->load_yaml_string(self, extends_yaml, "vendor: extends mul");
#endif
    static const struct { const char *op, *device; opr_kernel_fn fn; } kernels[] = {
        {"add", "vdev", k_add}, {"mul", "vdev", k_mul}, {"exp", "vdev", k_exp},
        {"relu", "vdev", k_relu}, {"mm", "vdev", k_mm}, {"swish", "vdev", k_swish},
        {"vfma", "vdev", k_vfma}, {"vfma_backward", "vdev", k_vfma_backward},
        {"vfma", "cpu", k_vfma},
#ifdef VENDOR_OVERRIDE_NO_FLAG
        {"mul", "cpu", k_mul_wrong},
#endif
#ifdef VENDOR_STRICT
        {"reluu", "vdev", k_relu}, /* misspelt on purpose */
#endif
#if defined(VENDOR_EXTENDS) || defined(VENDOR_EXTENDS_WRONG)
        {"vdev_mul_backward", "vdev", k_mul_backward},
#endif
    };
    for (size_t i = 0; !rc && i < sizeof kernels / sizeof kernels[0]; i++) {
        uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
#if defined(VENDOR_SWISH_F32) || defined(VENDOR_SWISH_F32_FORMULA)
        if (!strcmp(kernels[i].op, "swish")) dtypes = OPR_DTYPE_BIT(OPR_F32);
#endif
#ifdef VENDOR_STRICT
        if (kernels[i].fn == k_vfma && !strcmp(kernels[i].device, "vdev")) dtypes |= OPR_DTYPE_BIT(OPR_I64);
#endif
        opr_kernel_desc k = {.struct_size = sizeof k, .op = kernels[i].op, .device = kernels[i].device,
                             .dtypes = dtypes, .fn = kernels[i].fn};
#ifdef VENDOR_UNSUPPORTED
        if (kernels[i].fn == k_mm) k.supports = mm_supports;
#endif
        rc = host->register_kernel(self, &k);
    }
    return rc;
}
