/* One convolution direction as a oneDNN primitive, built once per geometry and kept in
 * a small process-wide cache: creating a primitive descriptor walks oneDNN's
 * implementation list and JIT-compiles the kernel (about a millisecond), which a
 * training step that calls every layer's three directions each step must not repeat.
 *
 * Layouts. The tensors stay in PyTorch's plain layout ([N, C, *spatial], contiguous);
 * each primitive is created with format "any" so that oneDNN picks its blocked layout
 * (nChw16c and friends, the ones its fast kernels use), and the cached entry holds the
 * reorders between the two. That is what PyTorch's own CPU convolutions do (through
 * ideep) on plain tensors, so the comparison in bench/conv.c is like for like.
 *
 * Geometry. oneDNN wants (B + pad_l + pad_r - span) / stride + 1 == S with a right
 * padding above -stride: a stride that leaves a remainder is a negative pad_r, as in
 * PyTorch. opreg's big image may be longer still (a transposed convolution's
 * output_padding when the dilation exceeds the stride); those trailing positions are
 * never read by a convolution and are zero in a transposed one's output, so the
 * primitive sees the big image cropped to what the windows reach (a strided memory
 * descriptor over the full buffer), with pad_r = 0.
 *
 * Threads. Primitives run on oneDNN's OpenMP runtime, libgomp, the pool OpenBLAS and the
 * CPU plugin share (top-level CMakeLists.txt). A cached primitive is shared by every
 * thread that calls its geometry: the scratchpad is the caller's (scratchpad mode
 * "user"), so concurrent calls of one primitive do not share memory; a stream is made
 * per call. */
#include "onednn_common.h"

#include <dnnl_debug.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { ROLE_BIG, ROLE_W, ROLE_SMALL, ROLE_BIAS, NROLES };

/* What a primitive depends on: the direction, the dims, the geometry. Zero-filled
 * before it is set, so that memcmp compares it. */
typedef struct conv_key {
    int32_t dir, ndim, bias, pad_;
    int64_t n, groups, cb, cs, sb[3], ss[3], k[3], st[3], pad[3], dil[3];
} conv_key;

typedef struct conv_prim {
    conv_key key;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t user[NROLES]; /* the caller's plain buffers (the big one cropped) */
    dnnl_memory_desc_t mine[NROLES]; /* the layouts the primitive chose */
    dnnl_primitive_t reorder[NROLES]; /* user -> mine for an input, mine -> user for an output; NULL: same layout */
    int arg[NROLES];                  /* DNNL_ARG_* of each role in the primitive; 0: not used */
    bool out[NROLES];
    bool cropped;                     /* the big image is longer than the windows reach */
    size_t scratch;                   /* bytes: the largest scratchpad of the primitive and its reorders */
    int refs;                         /* calls running it (under cache_lock) */
    uint64_t used;                    /* the cache's clock at its last use */
} conv_prim;

/* 64 geometries: ResNet-50's distinct convolutions times three directions is about 60. */
#define CACHE_SLOTS 64
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static conv_prim *cache[CACHE_SLOTS];
static uint64_t cache_clock;

/* Per-thread workspace for the blocked copies and the scratchpad of a call: one buffer
 * that grows to the largest call a thread makes and is kept for its next one. Fresh
 * memory for each call cost as much as the reorders themselves (the kernel zero-fills
 * every page on first touch: ~8 ms of a ResNet-18 layer's 40 ms primitive). A buffer
 * above WORKSPACE_KEEP bytes is freed after its call; the thread's buffer is freed when
 * the thread ends. Not counted in opreg's memory statistics (the host's allocator does
 * not see it). */
#define WORKSPACE_KEEP ((size_t)256 << 20)
typedef struct workspace {
    void *buf;
    size_t cap;
} workspace;
static pthread_key_t ws_key;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;
static int ws_key_status;

static void ws_free(void *p)
{
    workspace *w = p;
    if (w) free(w->buf);
    free(w);
}
static void ws_init(void) { ws_key_status = pthread_key_create(&ws_key, ws_free); }

/* At least n bytes, 64-byte aligned, for this call of this thread; NULL when out of
 * memory. *owned: a buffer of the call's own (free it after). */
static void *ws_get(size_t n, void **owned)
{
    *owned = NULL;
    n = (n + 63) / 64 * 64;
    workspace *w = NULL;
    if (n <= WORKSPACE_KEEP && !pthread_once(&ws_once, ws_init) && !ws_key_status) {
        if (!(w = pthread_getspecific(ws_key)) && (w = calloc(1, sizeof *w)) && pthread_setspecific(ws_key, w)) {
            free(w);
            w = NULL;
        }
    }
    if (!w) return *owned = aligned_alloc(64, n ? n : 64);
    if (w->cap < n) {
        free(w->buf);
        w->cap = 0;
        if (!(w->buf = aligned_alloc(64, n))) return NULL;
        w->cap = n;
    }
    return w->buf;
}

/* Spatial dim i of the tensors (0 .. ndim - 3) is dim 3 - nd + i of the geometry. */
static int gdim(int32_t ndim, int i) { return 3 - (ndim - 2) + i; }

/* The part of the big image the primitive sees along geometry dim d, and the right
 * padding that makes oneDNN's size equation hold: (B + pad_l + pad_r - span) / stride
 * + 1 == S, rounding down, with pad_r > -stride. A big image longer than that allows
 * (a transposed convolution's output_padding past the stride, with a larger dilation)
 * is cropped to what the windows reach, with pad_r = 0. */
static void reach(const opc_conv *g, int d, int64_t *crop, int64_t *pad_r)
{
    const int64_t span = g->dil[d] * (g->k[d] - 1) + 1, full = (g->ss[d] - 1) * g->st[d] + span - g->pad[d];
    const bool whole = full - g->sb[d] > -g->st[d];
    *crop = whole ? g->sb[d] : full;
    *pad_r = whole ? full - g->sb[d] : 0;
}

/* Whether some window reads the image along every dim: where every window lies in the
 * left padding (a padding wider than the kernel's reach) oneDNN has no size equation to
 * satisfy, and the result is what run_empty gives. */
static bool reads_image(const opc_conv *g, int32_t ndim)
{
    for (int i = 0; i < ndim - 2; i++) {
        const int d = gdim(ndim, i);
        if ((g->ss[d] - 1) * g->st[d] + g->dil[d] * (g->k[d] - 1) + 1 - g->pad[d] < 1) return false;
    }
    return true;
}

static void prim_free(conv_prim *p)
{
    if (!p) return;
    if (p->prim) dnnl_primitive_destroy(p->prim);
    for (int r = 0; r < NROLES; r++)
        if (p->reorder[r]) dnnl_primitive_destroy(p->reorder[r]);
    free(p);
}

static int dnnl_fail(const opr_kernel_call *c, const char *what, dnnl_status_t st)
{
    return ONEDNN_FAIL(c, st == dnnl_out_of_memory ? OPR_ERR_NOMEM : OPR_ERR_BACKEND, "%s: oneDNN %s failed: %s", c->op,
                       what, dnnl_status2str(st));
}

/* Contiguous strides of dims (n of them). */
static void contig(int n, const dnnl_dims_t dims, dnnl_dims_t st)
{
    int64_t s = 1;
    for (int i = n - 1; i >= 0; i--) {
        st[i] = s;
        s *= dims[i] > 0 ? dims[i] : 1;
    }
}

/* The caller's descriptors of p->key (md: user) and the same dims in format "any". */
static dnnl_status_t user_descs(conv_prim *p, const opc_conv *g, dnnl_memory_desc_t any[NROLES])
{
    const conv_key *k = &p->key;
    const int nd = k->ndim - 2;
    dnnl_dims_t dims, full, st;
    dnnl_status_t s;
    /* big: dims cropped, strides of the full buffer */
    dims[0] = full[0] = g->n;
    dims[1] = full[1] = g->cb;
    for (int i = 0; i < nd; i++) {
        int64_t crop, pr;
        reach(g, gdim(k->ndim, i), &crop, &pr);
        dims[2 + i] = crop;
        full[2 + i] = g->sb[gdim(k->ndim, i)];
        if (crop != full[2 + i]) p->cropped = true;
    }
    contig(k->ndim, full, st);
    if ((s = dnnl_memory_desc_init_by_strides(&p->user[ROLE_BIG], k->ndim, dims, dnnl_f32, st))) return s;
    if ((s = dnnl_memory_desc_init_by_tag(&any[ROLE_BIG], k->ndim, dims, dnnl_f32, dnnl_format_tag_any))) return s;
    /* small */
    dims[1] = g->cs;
    for (int i = 0; i < nd; i++) dims[2 + i] = g->ss[gdim(k->ndim, i)];
    contig(k->ndim, dims, st);
    if ((s = dnnl_memory_desc_init_by_strides(&p->user[ROLE_SMALL], k->ndim, dims, dnnl_f32, st))) return s;
    if ((s = dnnl_memory_desc_init_by_tag(&any[ROLE_SMALL], k->ndim, dims, dnnl_f32, dnnl_format_tag_any))) return s;
    /* weight: [C_s, C_b / groups, *k], as [groups, C_s / groups, C_b / groups, *k] when grouped */
    int wn = 0;
    if (g->groups > 1) dims[wn++] = g->groups;
    dims[wn++] = g->cs / g->groups;
    dims[wn++] = g->cb / g->groups;
    for (int i = 0; i < nd; i++) dims[wn++] = g->k[gdim(k->ndim, i)];
    contig(wn, dims, st);
    if ((s = dnnl_memory_desc_init_by_strides(&p->user[ROLE_W], wn, dims, dnnl_f32, st))) return s;
    if ((s = dnnl_memory_desc_init_by_tag(&any[ROLE_W], wn, dims, dnnl_f32, dnnl_format_tag_any))) return s;
    dims[0] = g->cs;
    if ((s = dnnl_memory_desc_init_by_tag(&p->user[ROLE_BIAS], 1, dims, dnnl_f32, dnnl_x))) return s;
    return dnnl_memory_desc_init_by_tag(&any[ROLE_BIAS], 1, dims, dnnl_f32, dnnl_format_tag_any);
}

/* Adds the scratchpad of pd to p->scratch (the largest one). */
static void note_scratch(conv_prim *p, const_dnnl_primitive_desc_t pd)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    const size_t n = md ? dnnl_memory_desc_get_size(md) : 0;
    if (n > p->scratch) p->scratch = n;
}

/* Builds the primitive of key k, and the reorders its layouts need. */
static int prim_build(const opr_kernel_call *c, const opc_conv *g, const conv_key *k, conv_prim **out)
{
    conv_prim *p = calloc(1, sizeof *p);
    if (!p) return ONEDNN_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", c->op);
    p->key = *k;
    dnnl_engine_t eng = onednn_engine();
    dnnl_memory_desc_t any[NROLES];
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    const char *what = "describing the tensors";
    dnnl_status_t s = user_descs(p, g, any);
    const int nd = k->ndim - 2;
    dnnl_dims_t st, dil, pl, pr;
    for (int i = 0; i < nd; i++) {
        const int d = gdim(k->ndim, i);
        int64_t crop;
        st[i] = g->st[d];
        dil[i] = g->dil[d] - 1; /* oneDNN counts the gaps */
        pl[i] = g->pad[d];
        reach(g, d, &crop, &pr[i]);
    }
    if (!s) {
        what = "setting the scratchpad mode";
        s = dnnl_primitive_attr_create(&attr);
        if (!s) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    }
    const bool bias = k->bias != 0;
    if (!s) { /* the forward descriptor: the primitive itself, or the hint of a backward one */
        what = "creating the forward convolution";
        dnnl_convolution_desc_t fd;
        s = dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &any[ROLE_BIG],
                                                       &any[ROLE_W], bias && k->dir != ONEDNN_TO_BIG ? &any[ROLE_BIAS] : NULL,
                                                       &any[ROLE_SMALL], st, dil, pl, pr);
        if (!s) s = dnnl_primitive_desc_create(k->dir == ONEDNN_TO_SMALL ? &pd : &hint, &fd,
                                               k->dir == ONEDNN_TO_SMALL ? attr : NULL, eng, NULL);
    }
    if (!s && k->dir == ONEDNN_TO_BIG) {
        what = "creating the backward-data convolution";
        dnnl_convolution_desc_t bd;
        s = dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &any[ROLE_BIG], &any[ROLE_W],
                                                             &any[ROLE_SMALL], st, dil, pl, pr);
        if (!s) s = dnnl_primitive_desc_create(&pd, &bd, attr, eng, hint);
    } else if (!s && k->dir == ONEDNN_WEIGHT_GRAD) {
        what = "creating the backward-weights convolution";
        dnnl_convolution_desc_t bd;
        s = dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &any[ROLE_BIG], &any[ROLE_W],
                                                                bias ? &any[ROLE_BIAS] : NULL, &any[ROLE_SMALL], st, dil, pl, pr);
        if (!s) s = dnnl_primitive_desc_create(&pd, &bd, attr, eng, hint);
    }
    if (!s) {
        static const struct { dnnl_query_t q[NROLES]; int arg[NROLES]; int out; } roles[] = {
            [ONEDNN_TO_SMALL] = {{dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md, dnnl_query_weights_md},
                                 {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS}, ROLE_SMALL},
            [ONEDNN_TO_BIG] = {{dnnl_query_diff_src_md, dnnl_query_weights_md, dnnl_query_diff_dst_md, dnnl_query_undef},
                               {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST, 0}, ROLE_BIG},
            [ONEDNN_WEIGHT_GRAD] = {{dnnl_query_src_md, dnnl_query_diff_weights_md, dnnl_query_diff_dst_md,
                                     dnnl_query_diff_weights_md},
                                    {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_BIAS}, ROLE_W},
        };
        note_scratch(p, pd);
        what = "creating a reorder";
        for (int r = 0; r < NROLES && !s; r++) {
            if (!roles[k->dir].arg[r] || (r == ROLE_BIAS && !bias)) continue;
            p->arg[r] = roles[k->dir].arg[r];
            p->out[r] = r == roles[k->dir].out || (r == ROLE_BIAS && k->dir == ONEDNN_WEIGHT_GRAD);
            p->mine[r] = *dnnl_primitive_desc_query_md(pd, roles[k->dir].q[r], r == ROLE_BIAS ? 1 : 0);
            if (dnnl_memory_desc_equal(&p->mine[r], &p->user[r])) continue;
            dnnl_primitive_desc_t rpd = NULL;
            s = p->out[r] ? dnnl_reorder_primitive_desc_create(&rpd, &p->mine[r], eng, &p->user[r], eng, attr)
                          : dnnl_reorder_primitive_desc_create(&rpd, &p->user[r], eng, &p->mine[r], eng, attr);
            if (!s) {
                note_scratch(p, rpd);
                s = dnnl_primitive_create(&p->reorder[r], rpd);
            }
            if (rpd) dnnl_primitive_desc_destroy(rpd);
        }
        if (!s) {
            what = "creating the primitive";
            s = dnnl_primitive_create(&p->prim, pd);
        }
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (hint) dnnl_primitive_desc_destroy(hint);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (s) {
        prim_free(p);
        return dnnl_fail(c, what, s);
    }
    *out = p;
    return OPR_OK;
}

/* The cached primitive of k (built on a miss), with a reference the caller drops with
 * prim_put. Where every slot is busy (a call is running each cached primitive) the new
 * one is not cached: its count starts far below zero, so that prim_put frees it. */
static int prim_get(const opr_kernel_call *c, const opc_conv *g, const conv_key *k, conv_prim **out)
{
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache[i] && !memcmp(&cache[i]->key, k, sizeof *k)) {
            cache[i]->refs++;
            cache[i]->used = ++cache_clock;
            *out = cache[i];
            pthread_mutex_unlock(&cache_lock);
            return OPR_OK;
        }
    pthread_mutex_unlock(&cache_lock);
    conv_prim *p;
    int rc = prim_build(c, g, k, &p); /* outside the lock: building takes a while */
    if (rc) return rc;
    pthread_mutex_lock(&cache_lock);
    int slot = -1;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        if (cache[i] && !memcmp(&cache[i]->key, k, sizeof *k)) { /* another thread built it meanwhile */
            prim_free(p);
            p = cache[i];
            slot = -2;
            break;
        }
        if (!cache[i]) {
            if (slot < 0 || cache[slot]) slot = i; /* an empty slot first */
        } else if (!cache[i]->refs && (slot < 0 || (cache[slot] && cache[i]->used < cache[slot]->used))) {
            slot = i; /* the least recently used entry no call is running */
        }
    }
    if (slot >= 0) {
        prim_free(cache[slot]);
        cache[slot] = p;
    }
    p->refs++;
    p->used = slot == -1 ? 0 : ++cache_clock;
    if (slot == -1) p->refs = -1000000; /* not cached: freed by prim_put */
    pthread_mutex_unlock(&cache_lock);
    *out = p;
    return OPR_OK;
}

static void prim_put(conv_prim *p)
{
    pthread_mutex_lock(&cache_lock);
    const bool uncached = --p->refs < 0;
    pthread_mutex_unlock(&cache_lock);
    if (uncached) prim_free(p);
}

/* A zero-sized dim, or no window that reads the image: the result is zeros (and the
 * bias), with nothing for oneDNN to do. */
static void run_empty(const opc_conv *g, onednn_dir dir, float *big, float *w, float *small, float *bias)
{
    const int64_t kdim = g->groups ? g->cb / g->groups * g->kvol : 0;
    if (dir == ONEDNN_TO_BIG) memset(big, 0, (size_t)(g->n * g->cb * g->bvol) * sizeof *big);
    if (dir == ONEDNN_WEIGHT_GRAD) {
        memset(w, 0, (size_t)(g->cs * kdim) * sizeof *w);
        for (int64_t ch = 0; bias && ch < g->cs; ch++) { /* the bias still gets the sum of small */
            double acc = 0;
            for (int64_t n = 0; n < g->n; n++)
                for (int64_t i = 0; i < g->svol; i++) acc += small[(n * g->cs + ch) * g->svol + i];
            bias[ch] = (float)acc;
        }
    }
    if (dir == ONEDNN_TO_SMALL)
        for (int64_t r = 0; r < g->n * g->cs; r++)
            for (int64_t i = 0; i < g->svol; i++) small[r * g->svol + i] = bias ? bias[r % g->cs] : 0.0f;
}

int onednn_conv_run(const opr_kernel_call *c, const opc_conv *g, int32_t ndim, onednn_dir dir, float *big, float *w,
                    float *small, float *bias)
{
    if (!g->n || !g->cb || !g->cs || !reads_image(g, ndim)) {
        run_empty(g, dir, big, w, small, bias);
        return OPR_OK;
    }
    conv_key k;
    memset(&k, 0, sizeof k);
    k.dir = dir;
    k.ndim = ndim;
    k.bias = bias != NULL && dir != ONEDNN_TO_BIG;
    k.n = g->n;
    k.groups = g->groups;
    k.cb = g->cb;
    k.cs = g->cs;
    for (int d = 0; d < 3; d++) {
        k.sb[d] = g->sb[d];
        k.ss[d] = g->ss[d];
        k.k[d] = g->k[d];
        k.st[d] = g->st[d];
        k.pad[d] = g->pad[d];
        k.dil[d] = g->dil[d];
    }
    conv_prim *p;
    int rc = prim_get(c, g, &k, &p);
    if (rc) return rc;
    void *data[NROLES] = {big, w, small, bias}, *owned = NULL;
    dnnl_memory_t user[NROLES] = {0}, mine[NROLES] = {0}, pad = NULL;
    dnnl_stream_t stream = NULL;
    /* the workspace: the scratchpad, then each blocked copy, 64-byte aligned */
    size_t off[NROLES + 1], total = (p->scratch + 63) / 64 * 64;
    for (int r = 0; r < NROLES; r++) {
        off[r] = total;
        if (p->arg[r] && p->reorder[r]) total += (dnnl_memory_desc_get_size(&p->mine[r]) + 63) / 64 * 64;
    }
    char *ws = ws_get(total, &owned);
    const char *what = "allocating the workspace";
    dnnl_status_t s = ws ? dnnl_success : dnnl_out_of_memory;
    if (!s) {
        what = "creating a stream";
        s = dnnl_stream_create(&stream, onednn_engine(), dnnl_stream_default_flags);
    }
    if (!s && p->scratch) {
        what = "wrapping the scratchpad";
        dnnl_memory_desc_t md;
        const dnnl_dims_t n = {(int64_t)p->scratch};
        s = dnnl_memory_desc_init_by_tag(&md, 1, n, dnnl_u8, dnnl_x);
        if (!s) s = dnnl_memory_create(&pad, &md, onednn_engine(), ws);
    }
    /* the caller's buffers, and the primitive's own layouts where they differ */
    for (int r = 0; r < NROLES && !s; r++) {
        if (!p->arg[r]) continue;
        what = "wrapping a buffer";
        s = dnnl_memory_create(&user[r], &p->user[r], onednn_engine(), data[r]);
        if (s || !p->reorder[r]) continue;
        s = dnnl_memory_create(&mine[r], &p->mine[r], onednn_engine(), ws + off[r]);
        if (!s && !p->out[r]) {
            what = "reordering an input";
            const dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, user[r]}, {DNNL_ARG_TO, mine[r]}, {DNNL_ARG_SCRATCHPAD, pad}};
            s = dnnl_primitive_execute(p->reorder[r], stream, pad ? 3 : 2, a);
        }
    }
    if (!s) {
        what = "running the convolution";
        dnnl_exec_arg_t a[NROLES + 1];
        int na = 0;
        for (int r = 0; r < NROLES; r++)
            if (p->arg[r]) a[na++] = (dnnl_exec_arg_t){p->arg[r], mine[r] ? mine[r] : user[r]};
        if (pad) a[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pad};
        /* a cropped output leaves the positions no window reaches: zeros */
        if (dir == ONEDNN_TO_BIG && p->cropped) memset(big, 0, (size_t)(g->n * g->cb * g->bvol) * sizeof *big);
        s = dnnl_primitive_execute(p->prim, stream, na, a);
    }
    for (int r = 0; r < NROLES && !s; r++)
        if (p->arg[r] && p->out[r] && p->reorder[r]) {
            what = "reordering an output";
            const dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, mine[r]}, {DNNL_ARG_TO, user[r]}, {DNNL_ARG_SCRATCHPAD, pad}};
            s = dnnl_primitive_execute(p->reorder[r], stream, pad ? 3 : 2, a);
        }
    if (!s) {
        what = "waiting for the stream";
        s = dnnl_stream_wait(stream);
    }
    for (int r = 0; r < NROLES; r++) {
        if (user[r]) dnnl_memory_destroy(user[r]);
        if (mine[r]) dnnl_memory_destroy(mine[r]);
    }
    if (pad) dnnl_memory_destroy(pad);
    free(owned);
    if (stream) dnnl_stream_destroy(stream);
    prim_put(p);
    return s ? dnnl_fail(c, what, s) : OPR_OK;
}
