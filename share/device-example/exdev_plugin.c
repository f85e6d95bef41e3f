/* A complete device plugin for opreg: it registers its own device type "exdev" and the
 * kernels that make a device usable there, and defines an op of its own in YAML:
 *
 *   device exdev   one ordinal; its memory is ordinary host memory, allocated and
 *                  copied by the plugin's own functions (a real device would call its
 *                  driver there);
 *   copy_          strided (and broadcast) copies: the host runs it for every
 *                  contiguous(), for reading a view back, for moving a view to another
 *                  device, so the device contract in <opreg/plugin.h> requires it;
 *   new_zeros      gradients of outputs that got none, during backward;
 *   add, mul       elementwise over strided and broadcast inputs (add also
 *                  accumulates gradients);
 *   mm             a plain triple loop over strided matrices;
 *   ex_fma         self * other + self, an op this plugin defines (exdev_ops.yaml),
 *                  on exdev and on the cpu (the reference `opreg check` compares with
 *                  is the CPU in f64, so an op of one's own needs a CPU kernel too);
 *   ex_fma_backward  the fused backward kernel of ex_fma that the YAML names, with
 *                  the two questions the planner may ask a kernel before it picks it
 *                  (ABI 2.2): supports (does it take these arguments?) and cost_ns
 *                  (what would it cost?).
 *
 * Arithmetic is in f32 and f64; copy_ and new_zeros move bytes and take every dtype.
 * The kernels read and write elements through opu_load_f64 / opu_store_f64, so one
 * loop serves both dtypes: clear rather than fast (a float product computed in double
 * and rounded once is exactly the float product, so nothing is lost). A real backend
 * would dispatch on the dtype once per call into typed loops.
 *
 * Only <opreg/plugin.h> (types) and <opreg/plugin_util.h> (static inline helpers) are
 * included, and libopreg is never linked: everything the host offers comes through
 * the opr_host_api table init is given. Rename "exdev" / "ex_" throughout to start your
 * own; README.md says how to build, load and check it. */
#include <opreg/plugin.h>
#include <opreg/plugin_util.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the device */

/* The memory functions get the descriptor's `data` (unused here) and the ordinal.
 * alloc must return a unique non-NULL pointer for 0 bytes too. */
static void *exdev_alloc(void *data, int32_t ordinal, size_t nbytes)
{
    (void)data; (void)ordinal;
    return malloc(nbytes ? nbytes : 1);
}

/* The host frees with the size it allocated; malloc's free does not need it. */
static void exdev_free(void *data, int32_t ordinal, void *ptr, size_t nbytes)
{
    (void)data; (void)ordinal; (void)nbytes;
    free(ptr);
}

/* Contiguous bytes to the host, from the host and within the device. They must be
 * complete when they return: the host reads or frees its buffer right after. */
static int exdev_copy(void *data, int32_t ordinal, void *dst, const void *src, size_t n)
{
    (void)data; (void)ordinal;
    if (n) memcpy(dst, src, n);
    return OPR_OK;
}

/* Kernels run synchronously here, so there is never queued work to wait for. */
static int exdev_sync(void *data, int32_t ordinal)
{
    (void)data; (void)ordinal;
    return OPR_OK;
}

/* ------------------------------------------------------------------ arguments */

/* Argument i as a tensor, or NULL: an optional tensor not given, or (in a fused
 * backward call) a tensor the plan did not save, arrives as OPR_ARG_NONE. */
static const opr_tensor_view *tensor_arg(const opr_kernel_call *call, int32_t i)
{
    return i < call->nargs && call->args[i]->kind == OPR_ARG_TENSOR ? call->args[i]->u.t : NULL;
}

/* Argument i as a double: a float argument always arrives as OPR_ARG_DOUBLE. */
static double double_arg(const opr_kernel_call *call, int32_t i, double fallback)
{
    return i < call->nargs && call->args[i]->kind == OPR_ARG_DOUBLE ? call->args[i]->u.d : fallback;
}

/* The host checked the argument kinds, the dtypes and the YAML's `check:` before the
 * call; what is left to a kernel is what its own loops assume. This reports a refusal
 * the host's way: the detail through set_error, bound to this call, and a status. */
static int fail(const opr_kernel_call *call, int status, const char *what)
{
    call->host->set_error(call, "exdev: %s: %s", call->op, what);
    return status;
}

/* ------------------------------------------------------------------ elementwise */

/* The elementwise functions, on doubles: a and b are the inputs' elements (b is 0 for
 * a unary one), s a scalar argument (add's alpha). */
typedef double (*ew_fn)(double a, double b, double s);

static double ew_add(double a, double b, double alpha) { return a + alpha * b; }
static double ew_mul(double a, double b, double s) { (void)s; return a * b; }
static double ew_fma(double a, double b, double s) { (void)s; return a * b + a; }
/* grad_self of ex_fma = grad * other + grad; grad_other = grad * self */
static double ew_grad_self(double g, double other, double s) { (void)s; return g * other + g; }
static double ew_grad_other(double g, double self, double s) { (void)s; return g * self; }

/* out = fn(a, b, s) over out's shape. Inputs keep their own shapes and strides
 * (transposed, sliced, stride 0 for an expanded dim) and are broadcast right-aligned to
 * out's shape, as the ops' `shape: broadcast(self, other)` says: opu_iter_init gives
 * each input the strides that read it in out's shape (0 on the dims it is broadcast
 * along) and keeps the three element offsets in step, so the loop body needs no index
 * arithmetic. out is usually contiguous (the host allocated it) but may be any view. */
static int elementwise(const opr_kernel_call *call, opr_tensor_view *out, const opr_tensor_view *a,
                       const opr_tensor_view *b, double s, ew_fn fn)
{
    if (!a || !b) return fail(call, OPR_ERR_INVALID, "an input tensor is missing");
    const opr_tensor_view *in[2] = {a, b};
    opu_iter it;
    if (!opu_iter_init(&it, out, 2, in)) return fail(call, OPR_ERR_INVALID, "the inputs do not broadcast to the output");
    for (int64_t i = 0; i < out->numel; i++, opu_iter_next(&it)) {
        const double x = opu_load_f64(a->data, a->dtype, it.off[1]), y = opu_load_f64(b->data, b->dtype, it.off[2]);
        opu_store_f64(out->data, out->dtype, it.off[0], fn(x, y, s));
    }
    return OPR_OK;
}

/* add(self, other, alpha=1) = self + alpha * other */
static int k_add(const opr_kernel_call *call)
{
    return elementwise(call, call->outputs[0], tensor_arg(call, 0), tensor_arg(call, 1), double_arg(call, 2, 1), ew_add);
}

/* mul(self, other) = self * other */
static int k_mul(const opr_kernel_call *call)
{
    return elementwise(call, call->outputs[0], tensor_arg(call, 0), tensor_arg(call, 1), 0, ew_mul);
}

/* ex_fma(self, other) = self * other + self; the YAML's check makes the shapes equal. */
static int k_ex_fma(const opr_kernel_call *call)
{
    return elementwise(call, call->outputs[0], tensor_arg(call, 0), tensor_arg(call, 1), 0, ew_fma);
}

/* ------------------------------------------------------------------ fused backward */

/* ex_fma_backward, the `kernel:` of ex_fma's fused derivative entry. The arguments of
 * a fused backward call (plugin.h above opr_kernel_fn): the gradient of each forward
 * output (grad), every forward argument (self, other: OPR_ARG_NONE unless saved; the
 * YAML's `needs:` says which each gradient reads), every forward output (result,
 * unsaved here). Outputs: one per input of the entry's key "self, other", in that
 * order, contiguous; grad_input_mask bit p set = output p wanted (the others have data
 * NULL and must not be written). Both gradients come out of one pass over grad. */
static int k_ex_fma_backward(const opr_kernel_call *call)
{
    const opr_tensor_view *grad = tensor_arg(call, 0), *self = tensor_arg(call, 1), *other = tensor_arg(call, 2);
    if (call->grad_input_mask & 1) {
        if (!other) return fail(call, OPR_ERR_INVALID, "other was not saved");
        int rc = elementwise(call, call->outputs[0], grad, other, 0, ew_grad_self);
        if (rc) return rc;
    }
    if (call->grad_input_mask & 2) {
        if (!self) return fail(call, OPR_ERR_INVALID, "self was not saved");
        return elementwise(call, call->outputs[1], grad, self, 0, ew_grad_other);
    }
    return OPR_OK;
}

/* Asked by the planner, on metadata alone (no data), before it picks the fused kernel:
 * a device limit (here made up: a 1 Mi-element working buffer) is said up front, and
 * the formulas compute those gradients instead. `opreg plan --backend exdev` prints the
 * reason. */
#define EXDEV_BUFFER_ELEMENTS (INT64_C(1) << 20)
static bool ex_fma_backward_supports(const opr_kernel_call *call, char *why, size_t why_len)
{
    const opr_tensor_view *grad = tensor_arg(call, 0);
    if (!grad || grad->numel <= EXDEV_BUFFER_ELEMENTS) return true;
    snprintf(why, why_len, "exdev ex_fma_backward: %lld elements exceed the %lld-element buffer",
             (long long)grad->numel, (long long)EXDEV_BUFFER_ELEMENTS);
    return false;
}

/* The plugin's own estimate of the kernel, in ns, replacing the registry's (flops and
 * bytes at the device's rates): one pass reading grad and the saved inputs and writing
 * each wanted gradient, at the device's 5 GB/s, plus its 100 ns launch. It may use
 * only the call's metadata. */
static double ex_fma_backward_cost_ns(const opr_kernel_call *call)
{
    const opr_tensor_view *grad = tensor_arg(call, 0);
    if (!grad) return -1; /* no estimate: the registry's is used */
    int wanted = (call->grad_input_mask & 1) + ((call->grad_input_mask >> 1) & 1);
    double bytes = (double)grad->numel * (double)opu_dtype_size(grad->dtype) * (3 + wanted);
    return bytes / 5e9 * 1e9 + 100;
}

/* ------------------------------------------------------------------ mm */

/* mm(self, mat2): [n, k] x [k, m] -> [n, m]. The host checked both are 2-d with
 * matching inner sizes (the YAML's check:). Either input may be strided: autograd's
 * formulas call mm with t(mat2), a transposed view, so the strides are used as given.
 * Accumulates in double; k = 0 gives zeros. */
static int k_mm(const opr_kernel_call *call)
{
    const opr_tensor_view *a = tensor_arg(call, 0), *b = tensor_arg(call, 1);
    opr_tensor_view *out = call->outputs[0];
    if (!a || !b || a->ndim != 2 || b->ndim != 2 || out->ndim != 2) return fail(call, OPR_ERR_INVALID, "2-d tensors only");
    const int64_t n = out->shape[0], m = out->shape[1], k = a->shape[1];
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            double acc = 0;
            for (int64_t p = 0; p < k; p++)
                acc += opu_load_f64(a->data, a->dtype, i * a->strides[0] + p * a->strides[1]) *
                       opu_load_f64(b->data, b->dtype, p * b->strides[0] + j * b->strides[1]);
            opu_store_f64(out->data, out->dtype, i * out->strides[0] + j * out->strides[1], acc);
        }
    return OPR_OK;
}

/* ------------------------------------------------------------------ copy_, new_zeros */

/* Element by element, src broadcast to dst's shape (the caller checked that it
 * broadcasts), each element moved as its bytes: a copy needs no arithmetic, so it
 * serves every dtype (both views have the same one: the host checked). */
static void copy_elements(opr_tensor_view *dst, const opr_tensor_view *src)
{
    const size_t es = opu_dtype_size(dst->dtype);
    opu_iter it;
    opu_iter_init(&it, dst, 1, &src);
    for (int64_t i = 0; i < dst->numel; i++, opu_iter_next(&it))
        memcpy((char *)dst->data + it.off[0] * (int64_t)es, (const char *)src->data + it.off[1] * (int64_t)es, es);
}

/* Whether the bytes two views with elements can reach intersect. */
static bool may_overlap(const opr_tensor_view *a, const opr_tensor_view *b)
{
    uintptr_t lo[2], hi[2];
    const opr_tensor_view *v[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        int64_t first = 0, last = 0; /* element offsets of the extreme elements */
        for (int32_t d = 0; d < v[k]->ndim; d++) {
            const int64_t span = (v[k]->shape[d] - 1) * v[k]->strides[d];
            if (span < 0) first += span;
            else last += span;
        }
        const int64_t es = (int64_t)opu_dtype_size(v[k]->dtype);
        lo[k] = (uintptr_t)v[k]->data + (uintptr_t)(first * es);
        hi[k] = (uintptr_t)v[k]->data + (uintptr_t)((last + 1) * es);
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

/* copy_(self, src): self = src, broadcast to self's shape; output 0 is the view of
 * self itself (an in-place op: its strides are self's, any view). The host runs this
 * for every strided copy on the device, hence the device contract's requirement. A
 * failed call must leave self untouched, so every check comes before the first write. */
static int k_copy_(const opr_kernel_call *call)
{
    opr_tensor_view *self = call->outputs[0];
    const opr_tensor_view *src = tensor_arg(call, 1);
    int64_t scratch[OPR_MAX_DIMS];
    if (!src || !opu_broadcast_strides(src, self->ndim, self->shape, scratch))
        return fail(call, OPR_ERR_INVALID, "src does not broadcast to self");
    /* Writing through an expanded dim would store several elements into one address;
     * the CPU refuses that too (as PyTorch does), so both devices agree. */
    for (int32_t d = 0; d < self->ndim; d++)
        if (self->shape[d] > 1 && self->strides[d] == 0)
            return fail(call, OPR_ERR_INVALID, "more than one element of self refers to the same memory location");
    if (self->numel == 0) return OPR_OK;
    if (!may_overlap(self, src)) {
        copy_elements(self, src);
        return OPR_OK;
    }
    /* self and src share memory (x.copy_(x.t())): an element could be read after it
     * was overwritten, so src goes through a contiguous copy first. */
    int64_t strides[OPR_MAX_DIMS];
    opr_tensor_view tmp = *src;
    if (!(tmp.data = malloc((size_t)src->numel * opu_dtype_size(src->dtype))))
        return fail(call, OPR_ERR_NOMEM, "out of memory");
    opu_contiguous_strides(src->ndim, src->shape, strides);
    tmp.strides = strides;
    copy_elements(&tmp, src);
    copy_elements(self, &tmp);
    free(tmp.data);
    return OPR_OK;
}

/* new_zeros(self, size): a zero tensor of shape `size` (self gives only the dtype and
 * the device). The output is fresh and contiguous; all-zero bytes are 0 in every
 * dtype. */
static int k_new_zeros(const opr_kernel_call *call)
{
    opr_tensor_view *out = call->outputs[0];
    if (out->numel) memset(out->data, 0, (size_t)out->numel * opu_dtype_size(out->dtype));
    return OPR_OK;
}

/* ------------------------------------------------------------------ entry points */

/* Optional: says whether the plugin can run on this machine, without side effects (no
 * device context, no allocation, no printing). A real device plugin would look for its
 * driver here and write the reason into `why` when it returns 0. */
OPR_PLUGIN_EXPORT int opr_plugin_probe(char *why, size_t why_len)
{
    if (why && why_len) snprintf(why, why_len, "exdev: host memory, always there");
    return 1;
}

OPR_PLUGIN_EXPORT int opr_plugin_init(const opr_host_api *host, opr_plugin *self)
{
    /* first of all, before anything that can fail: the host checks the ABI after init */
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "device_example";
    self->version = "0.1.0";
    /* load_yaml relative to the plugin's directory (self->dir) is ABI 2.1; a 2.1 host
     * ignores the 2.2 `flags` below (it reads only what its struct_size covers) */
    if (host->abi_major != OPR_ABI_MAJOR || host->struct_size < OPR_HOST_API_STRUCT_SIZE_2_1 ||
        self->struct_size < OPR_PLUGIN_STRUCT_SIZE_2_1) {
        host->set_error(NULL, "device_example: needs opreg's plugin ABI %d.1 or newer (the host has %u.%u)",
                        OPR_ABI_MAJOR, host->abi_major, host->abi_minor);
        return OPR_ERR_ABI;
    }

    /* The speeds feed the autograd cost model (which of a formula and a fused kernel
     * is cheaper); these are a single host core's, roughly. flags (ABI 2.2): the
     * kernels take any host pointer, so guard mode (`opreg check`) may put an
     * inaccessible page after each output: a kernel writing far past one faults at
     * once, and is named, instead of corrupting the heap. */
    const opr_device_desc dev = {
        .struct_size = sizeof dev, .name = "exdev", .count = 1,
        .flops_per_s = 1e9, .bytes_per_s = 5e9, .launch_ns = 100,
        .alloc = exdev_alloc, .free = exdev_free, .copy_to_host = exdev_copy,
        .copy_from_host = exdev_copy, .copy_device = exdev_copy, .sync = exdev_sync,
        .flags = OPR_DEVICE_HOST_MEMORY,
    };
    int rc = host->register_device(self, &dev);
    /* the op definitions come before the kernels for them: a kernel for an op the
     * registry does not define is skipped */
    if (!rc) rc = host->load_yaml(self, "exdev_ops.yaml");
    if (rc) return rc; /* the host's message names the file and the line */

    const uint32_t floats = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    uint32_t all = 0;
    for (int t = 0; t < OPR_DTYPE_COUNT; t++) all |= OPR_DTYPE_BIT(t);
    static const struct { const char *op, *device; opr_kernel_fn fn; bool any_dtype; } kernels[] = {
        {"copy_", "exdev", k_copy_, true},
        {"new_zeros", "exdev", k_new_zeros, true},
        {"add", "exdev", k_add, false},
        {"mul", "exdev", k_mul, false},
        {"mm", "exdev", k_mm, false},
        {"ex_fma", "exdev", k_ex_fma, false},
        {"ex_fma_backward", "exdev", k_ex_fma_backward, false},
        /* ex_fma on the cpu too: `opreg check` compares exdev with the CPU in f64, and
         * no other plugin has this op; the cpu's memory is host memory, so the same
         * kernel serves */
        {"ex_fma", "cpu", k_ex_fma, false},
    };
    for (size_t i = 0; !rc && i < sizeof kernels / sizeof kernels[0]; i++) {
        opr_kernel_desc k = {.struct_size = sizeof k, .op = kernels[i].op, .device = kernels[i].device,
                             .dtypes = kernels[i].any_dtype ? all : floats, .fn = kernels[i].fn};
        if (kernels[i].fn == k_ex_fma_backward) { /* ABI 2.2 fields: a 2.1 host reads no further than override_dtypes */
            k.supports = ex_fma_backward_supports;
            k.cost_ns = ex_fma_backward_cost_ns;
        }
        rc = host->register_kernel(self, &k);
    }
    if (!rc) host->log(self, OPR_LOG_DEBUG, "device exdev ready: %zu kernel(s)", sizeof kernels / sizeof kernels[0]);
    return rc;
}
