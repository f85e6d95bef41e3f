/* f16 and bf16 for kernels written for f32 (gk_register_upcast), the device's twin of
 * the CPU plugin's plugins/cpu/cpu_half.c: the call's half-precision tensors are
 * widened into contiguous f32 scratch on the device (gk_convert_strided), the f32 kernel
 * runs on them, and its half-precision outputs are rounded back (nearest even). What
 * PyTorch's kernels do for these dtypes (compute in float, store in half), without a
 * half copy of each kernel; for the kernels whose arithmetic is shared with the CPU in a
 * header of f32 and f64 functions (grid sampling). Outputs whose shape depends on the
 * data are not covered. */
#include "gpu_common.cuh"

#include <pthread.h>
#include <string.h>

namespace {

const int UPCAST_MAX = 32;    /* ops registered through gk_register_upcast */
const int UPCAST_TENSORS = 16; /* half tensors one call may widen */
const int UPCAST_ARGS = 24;

opr_kernel_fn upcast_fns[UPCAST_MAX];
int upcast_n;
pthread_mutex_t upcast_lock = PTHREAD_MUTEX_INITIALIZER;

bool is_half(opr_dtype t) { return t == OPR_F16 || t == OPR_BF16; }

/* Everything one call widens; the scratch goes back to the cache with it. */
struct upcast_call {
    opr_kernel_arg args[UPCAST_ARGS];
    const opr_kernel_arg *argp[UPCAST_ARGS];
    opr_tensor_view views[UPCAST_TENSORS];
    opr_tensor_view *outp[UPCAST_ARGS];
    int64_t strides[UPCAST_TENSORS][GK_MAXD];
    gk_buf bufs[UPCAST_TENSORS];
    int nviews = 0;
};

/* A contiguous f32 copy of half view v in u's next slot; NULL with *rc set (and k's
 * error) on failure. */
opr_tensor_view *widen(const gk_ctx *k, upcast_call *u, const opr_tensor_view *v, int *rc)
{
    if (u->nviews == UPCAST_TENSORS) {
        *rc = GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: more than %d f16/bf16 tensors", k->op, UPCAST_TENSORS);
        return nullptr;
    }
    const int i = u->nviews++;
    opr_tensor_view *w = &u->views[i];
    *w = *v;
    opc_contig_strides(v->ndim, v->shape, u->strides[i]);
    w->strides = u->strides[i];
    w->dtype = OPR_F32;
    if ((*rc = u->bufs[i].alloc(k, (size_t)v->numel * sizeof(float)))) return nullptr;
    w->data = u->bufs[i].p;
    if ((*rc = gk_convert_strided(k, OPR_F32, v->ndim, v->shape, w->data, w->strides, v->dtype, v->data, v->strides)))
        return nullptr;
    return w;
}

int k_upcast(const opr_kernel_call *c)
{
    const opr_kernel_fn f32 = *(const opr_kernel_fn *)c->kernel_data;
    bool half = false;
    for (int i = 0; i < c->nout; i++) half |= c->outputs[i] && is_half(c->outputs[i]->dtype);
    for (int i = 0; i < c->nargs; i++) half |= c->args[i]->kind == OPR_ARG_TENSOR && is_half(c->args[i]->u.t->dtype);
    if (!half) return f32(c);
    gk_ctx k;
    int rc = gk_begin(c, c->op, &k);
    if (rc) return rc;
    if (c->nargs > UPCAST_ARGS || c->nout > UPCAST_ARGS)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: too many arguments for the f16/bf16 path", c->op);
    upcast_call *u = new upcast_call;
    for (int i = 0; i < c->nargs && !rc; i++) {
        u->args[i] = *c->args[i];
        u->argp[i] = &u->args[i];
        if (u->args[i].kind == OPR_ARG_TENSOR && is_half(u->args[i].u.t->dtype)) u->args[i].u.t = widen(&k, u, c->args[i]->u.t, &rc);
    }
    int first_out = u->nviews;
    for (int i = 0; i < c->nout && !rc; i++) {
        u->outp[i] = c->outputs[i];
        if (!c->outputs[i] || !is_half(c->outputs[i]->dtype)) continue;
        if (!c->outputs[i]->data) rc = GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: f16/bf16 output of a data-dependent shape", c->op);
        /* widened too: an in-place op or one that reads its output starts from its values */
        else u->outp[i] = widen(&k, u, c->outputs[i], &rc);
    }
    if (!rc) {
        opr_kernel_call wide = *c;
        wide.args = u->argp;
        wide.outputs = u->outp;
        rc = f32(&wide);
    }
    for (int i = 0, v = first_out; !rc && i < c->nout; i++) {
        opr_tensor_view *o = c->outputs[i];
        if (u->outp[i] == o) continue;
        rc = gk_convert_strided(&k, o->dtype, o->ndim, o->shape, o->data, o->strides, OPR_F32, u->views[v].data,
                                u->views[v].strides);
        v++;
    }
    delete u;
    return rc;
}

} // namespace

int gk_register_upcast(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn)
{
    /* the same for every context; contexts may be initialised on several threads */
    pthread_mutex_lock(&upcast_lock);
    int k;
    for (k = 0; k < upcast_n && upcast_fns[k] != fn; k++) {}
    if (k == upcast_n && upcast_n < UPCAST_MAX) upcast_fns[upcast_n++] = fn;
    pthread_mutex_unlock(&upcast_lock);
    if (k == UPCAST_MAX) return GK_FAIL(nullptr, OPR_ERR_INVALID, "%s: more ops through gk_register_upcast than %d", GPU_NAME, UPCAST_MAX);
    opr_kernel_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.op = op;
    d.device = GPU_NAME;
    d.dtypes = dtypes | GK_HALVES;
    d.fn = k_upcast;
    d.data = &upcast_fns[k];
    return gk_host->register_kernel(self, &d);
}
