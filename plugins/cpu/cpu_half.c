/* f16 and bf16 on the CPU by upcasting: the half-precision tensors of a call are
 * copied to contiguous f32, the op's f32 kernel runs, and its half-precision outputs
 * are rounded back (nearest even). That is what PyTorch's CPU kernels do for these
 * dtypes (compute in float, store in half), and it gives every op the schema lists with
 * f16 / bf16 a CPU kernel to compare the GPU kernels against, without a second copy of
 * each loop. Outputs whose shape depends on the data (alloc_output) are not covered.
 * Arguments an op writes in place (batch norm's running statistics) are widened like
 * the others and rounded back after the call (cpu_register_upcast_ex).
 * The conversions are those of <opreg/plugin_util.h> (opu_f16_to_f32 and the others). */
#include "cpu_common.h"
#include "cpu_kernels.h"

#include <pthread.h>
#include <stdlib.h>

#define UPCAST_MAX 192 /* ops registered through cpu_register_upcast */
#define UPCAST_MAX_TENSORS 32
#define UPCAST_MAX_ARGS 24

/* The f32 kernel of an op and the arguments it writes in place (bit i: argument i). */
typedef struct upcast_entry {
    opr_kernel_fn fn;
    uint32_t written;
} upcast_entry;

static upcast_entry upcast_fns[UPCAST_MAX];
static int upcast_n;
static pthread_mutex_t upcast_lock = PTHREAD_MUTEX_INITIALIZER;

static bool is_half(opr_dtype t) { return t == OPR_F16 || t == OPR_BF16; }

/* A contiguous f32 copy of half-precision view v, in *to (buffer from malloc). */
static float *widen(const opr_tensor_view *v, opr_tensor_view *to, int64_t *strides)
{
    float *buf = malloc((size_t)(v->numel ? v->numel : 1) * sizeof *buf);
    if (!buf) return NULL;
    int64_t idx[OPR_MAX_DIMS] = {0};
    const uint16_t *src = v->data;
    for (int64_t i = 0; i < v->numel; i++) {
        int64_t off = 0;
        for (int32_t d = 0; d < v->ndim; d++) off += idx[d] * v->strides[d];
        buf[i] = v->dtype == OPR_F16 ? opu_f16_to_f32(src[off]) : opu_bf16_to_f32(src[off]);
        for (int32_t d = v->ndim - 1; d >= 0 && ++idx[d] == v->shape[d]; d--) idx[d] = 0;
    }
    opc_contig_strides(v->ndim, v->shape, strides);
    *to = *v;
    to->data = buf;
    to->dtype = OPR_F32;
    to->strides = strides;
    return buf;
}

/* The f32 results in `from` rounded into half-precision view v (an output, or an
 * argument written in place: the view is the host's, its data writable). */
static void narrow(const float *from, const opr_tensor_view *v)
{
    int64_t idx[OPR_MAX_DIMS] = {0};
    uint16_t *dst = v->data;
    for (int64_t i = 0; i < v->numel; i++) {
        int64_t off = 0;
        for (int32_t d = 0; d < v->ndim; d++) off += idx[d] * v->strides[d];
        dst[off] = v->dtype == OPR_F16 ? opu_f32_to_f16(from[i]) : opu_f32_to_bf16(from[i]);
        for (int32_t d = v->ndim - 1; d >= 0 && ++idx[d] == v->shape[d]; d--) idx[d] = 0;
    }
}

/* Everything one upcast call allocates. */
typedef struct upcast_call {
    opr_kernel_arg args[UPCAST_MAX_ARGS], *argp[UPCAST_MAX_ARGS];
    opr_tensor_view views[UPCAST_MAX_TENSORS], *outp[UPCAST_MAX_ARGS];
    const opr_tensor_view *lists[UPCAST_MAX_TENSORS];
    int64_t strides[UPCAST_MAX_TENSORS][OPR_MAX_DIMS];
    float *bufs[UPCAST_MAX_TENSORS];
    int nviews, nlists;
    int arg_view[UPCAST_MAX_ARGS]; /* the stand-in of tensor argument i (-1: itself) */
} upcast_call;

/* The f32 stand-in of view v (v itself unless half), or NULL without memory / room. */
static const opr_tensor_view *stand_in(upcast_call *u, const opr_tensor_view *v)
{
    if (!v || !is_half(v->dtype)) return v;
    if (u->nviews == UPCAST_MAX_TENSORS) return NULL;
    int k = u->nviews;
    if (!(u->bufs[k] = widen(v, &u->views[k], u->strides[k]))) return NULL;
    u->nviews++;
    return &u->views[k];
}

static int k_upcast(const opr_kernel_call *c)
{
    const upcast_entry *e = c->kernel_data;
    const opr_kernel_fn f32 = e->fn;
    bool half = false;
    for (int i = 0; i < c->nout; i++) half |= c->outputs[i] && is_half(c->outputs[i]->dtype);
    for (int i = 0; i < c->nargs; i++) {
        const opr_kernel_arg *a = c->args[i];
        if (a->kind == OPR_ARG_TENSOR) half |= is_half(a->u.t->dtype);
        for (int j = 0; a->kind == OPR_ARG_TENSOR_LIST && j < a->u.tl.n; j++) half |= is_half(a->u.tl.items[j]->dtype);
    }
    if (!half) return f32(c);
    if (c->nargs > UPCAST_MAX_ARGS || c->nout > UPCAST_MAX_ARGS)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: too many arguments for the f16/bf16 path", c->op);
    upcast_call *u = calloc(1, sizeof *u);
    if (!u) return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory widening f16/bf16 to f32", c->op);
    int rc = OPR_OK;
    for (int i = 0; i < c->nargs && !rc; i++) {
        u->args[i] = *c->args[i];
        u->argp[i] = &u->args[i];
        u->arg_view[i] = -1;
        if (u->args[i].kind == OPR_ARG_TENSOR) {
            const int before = u->nviews;
            if (!(u->args[i].u.t = stand_in(u, c->args[i]->u.t))) rc = OPR_ERR_NOMEM;
            else if (u->nviews > before) u->arg_view[i] = before;
        }
        if (u->args[i].kind != OPR_ARG_TENSOR_LIST) continue;
        int n = u->args[i].u.tl.n;
        if (u->nlists + n > UPCAST_MAX_TENSORS) { rc = OPR_ERR_NOMEM; break; }
        for (int j = 0; j < n && !rc; j++)
            if (!(u->lists[u->nlists + j] = stand_in(u, c->args[i]->u.tl.items[j]))) rc = OPR_ERR_NOMEM;
        u->args[i].u.tl.items = &u->lists[u->nlists];
        u->nlists += n;
    }
    int first_out = u->nviews;
    for (int i = 0; i < c->nout && !rc; i++) {
        opr_tensor_view *o = c->outputs[i];
        u->outp[i] = o;
        if (!o || !is_half(o->dtype)) continue;
        if (!o->data) { rc = OPR_ERR_UNSUPPORTED; break; }
        if (u->nviews == UPCAST_MAX_TENSORS) { rc = OPR_ERR_NOMEM; break; }
        int k = u->nviews;
        /* widened too: an in-place op or one that reads its output starts from its values */
        if (!(u->bufs[k] = widen(o, &u->views[k], u->strides[k]))) { rc = OPR_ERR_NOMEM; break; }
        u->outp[i] = &u->views[k];
        u->nviews++;
    }
    if (rc == OPR_ERR_UNSUPPORTED) c->host->set_error(c, "%s: f16/bf16 output of a data-dependent shape", c->op);
    else if (rc) c->host->set_error(c, "%s: out of memory widening f16/bf16 to f32 (or too many tensors)", c->op);
    if (!rc) {
        opr_kernel_call wide = *c;
        wide.args = (const opr_kernel_arg *const *)u->argp;
        wide.outputs = u->outp;
        rc = f32(&wide);
    }
    for (int i = 0, k = first_out; !rc && i < c->nout; i++)
        if (u->outp[i] != c->outputs[i]) narrow(u->bufs[k++], c->outputs[i]);
    for (int i = 0; !rc && i < c->nargs && i < 32; i++)
        if ((e->written >> i & 1) && u->arg_view[i] >= 0)
            narrow(u->bufs[u->arg_view[i]], c->args[i]->u.t);
    for (int k = 0; k < u->nviews; k++) free(u->bufs[k]);
    free(u);
    return rc;
}

int cpu_register_upcast_ex(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn, uint32_t written,
                           bool (*supports)(const opr_kernel_call *call, char *why, size_t why_len))
{
    if (!(dtypes & OPR_DTYPE_BIT(OPR_F32))) return cpu_register_full(self, op, dtypes, fn, NULL, supports);
    /* the table is the same for every context (init registers the same kernels each
     * time), and contexts may be initialised on several threads at once */
    pthread_mutex_lock(&upcast_lock);
    int k;
    for (k = 0; k < upcast_n && (upcast_fns[k].fn != fn || upcast_fns[k].written != written); k++) {}
    if (k == upcast_n && upcast_n < UPCAST_MAX) upcast_fns[upcast_n++] = (upcast_entry){fn, written};
    pthread_mutex_unlock(&upcast_lock);
    if (k == UPCAST_MAX) return cpu_init_error("cpu: more ops through cpu_register_upcast than UPCAST_MAX");
    return cpu_register_full(self, op, dtypes | OPR_DTYPE_BIT(OPR_F16) | OPR_DTYPE_BIT(OPR_BF16), k_upcast,
                             &upcast_fns[k], supports);
}

int cpu_register_upcast(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn)
{
    return cpu_register_upcast_ex(self, op, dtypes, fn, 0, NULL);
}
