/* Scaled dot-product attention (registry/ops/nn_loss_attention.yaml):
 * _scaled_dot_product_attention, the forward that writes the output, the per-row
 * log-sum-exp and the probabilities, and scaled_dot_product_attention_backward, the
 * fused backward that reads only the inputs and the log-sum-exp and recomputes the
 * probabilities by blocks of rows (flash-attention style: O(rows * S) scratch, never
 * the whole L x S matrix). Both run batch by batch on OpenBLAS GEMMs, the batches split
 * between the threads (each batch's matrices are small: a GEMM of a transformer head
 * gains nothing from threads of its own); the leading dims of query, key and value
 * are the batch, the mask broadcasts over them. */
#include "cpu_blas.h"
#include "cpu_kernels.h"
#include "cpu_vmath.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Query rows per block of the backward: a block's scores (ATT_ROWS x S) stay in cache
 * for the sequence lengths of a small transformer. */
#define ATT_ROWS 64
/* The most threads a call splits its batches between (each has its own scratch). */
#define ATT_MAX_THREADS 64

typedef struct att_dims {
    int64_t L, S, E, Ev;
    double scale;       /* 1 / sqrt(E) */
    bool causal;
    int64_t ldq, ldk, ldv, ldo; /* row strides of one batch's query, key, value, output gradient */
} att_dims;

/* A mask (or any [..., L, S] operand) broadcast to one batch's L x S: element strides. */
typedef struct att_mask {
    int64_t rs, cs;
} att_mask;

/* The gradients of the attention probabilities and of the log-sum-exp of one batch. */
typedef struct att_rowgrad {
    int64_t rs, cs, lse_stride;
} att_rowgrad;

#define AT float
#define AT_SFX f32
#define AT_GEMM cblas_sgemm
#define AT_EXP cpu_vm.exp_f32
#include "cpu_attention_body.h"
#undef AT
#undef AT_SFX
#undef AT_GEMM
#undef AT_EXP
#define AT double
#define AT_SFX f64
#define AT_GEMM cblas_dgemm
#define AT_EXP cpu_vm.exp_f64
#include "cpu_attention_body.h"
#undef AT
#undef AT_SFX
#undef AT_GEMM
#undef AT_EXP

/* Element offsets of each batch's trailing `tail` dims in v, whose leading dims
 * broadcast (right-aligned) against the nb batch dims bshape; off has B entries. */
static void batch_offsets(const opr_tensor_view *v, int32_t tail, const int64_t *bshape, int32_t nb, int64_t B,
                          int64_t *off)
{
    const int32_t vb = v->ndim - tail;
    for (int64_t b = 0; b < B; b++) {
        int64_t rem = b, o = 0;
        for (int32_t dd = nb - 1; dd >= 0; dd--) {
            int64_t idx = rem % bshape[dd];
            rem /= bshape[dd];
            int32_t vd = dd - (nb - vb);
            if (vd >= 0 && v->shape[vd] != 1) o += idx * v->strides[vd];
        }
        off[b] = o;
    }
}

/* The stride of dimension `from_end` (1 = last) of v as broadcast to a larger shape:
 * 0 where v lacks that dim or has size 1 there. */
static int64_t bstride(const opr_tensor_view *v, int32_t from_end)
{
    if (v->ndim < from_end) return 0;
    int32_t dd = v->ndim - from_end;
    return v->shape[dd] == 1 ? 0 : v->strides[dd];
}

/* One batch's rows x cols matrix of v at element offset off, in a layout a GEMM reads
 * (unit column stride, row stride *ld >= cols): v's own memory where it already is,
 * else packed into scratch. */
static const char *att_matrix(const opr_tensor_view *v, int64_t off, int64_t rows, int64_t cols, char *scratch,
                              int64_t *ld)
{
    const size_t es = cpu_dtype_size(v->dtype);
    const char *base = (const char *)v->data + off * (int64_t)es;
    const int64_t rs = bstride(v, 2), cs = bstride(v, 1), min_ld = cols > 1 ? cols : 1;
    if ((cs == 1 || cols <= 1) && (rows <= 1 || rs >= min_ld)) {
        *ld = rows <= 1 ? min_ld : rs;
        return base;
    }
    pack(es, base, rows, cols, rs, cs, scratch);
    *ld = min_ld;
    return scratch;
}

/* How many threads split a call's B batches: 1 where the work is too small to share. */
static int att_threads(int64_t B, const att_dims *d)
{
    const int t = omp_get_max_threads() < ATT_MAX_THREADS ? omp_get_max_threads() : ATT_MAX_THREADS;
    return B > 1 && t > 1 && B * d->L * (d->S + d->E) >= CPU_PAR_THRESHOLD ? (B < t ? (int)B : t) : 1;
}

/* Batch shape of the call (query's leading dims) and its size. */
static int64_t batch_of(const opr_tensor_view *q, int32_t *nb)
{
    *nb = q->ndim - 2;
    int64_t B = 1;
    for (int32_t d = 0; d < *nb; d++) B *= q->shape[d];
    return B;
}

/* Scratch of one allocation, in pieces; NULL pieces for zero sizes. */
static char *att_alloc(const opr_kernel_call *c, const char *op, size_t es, int n, const int64_t *elems, char **piece)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)elems[i] * es;
    char *mem = malloc(total ? total : 1);
    if (!mem) {
        (void)CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for %zu bytes of scratch", op, total);
        return NULL;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        piece[i] = mem + at;
        at += (size_t)elems[i] * es;
    }
    return mem;
}

/* _scaled_dot_product_attention(query, key, value, attn_mask, is_causal)
 *   -> (output, logsumexp, attn) */
static int k_sdpa(const opr_kernel_call *c)
{
    const opr_tensor_view *q = cpu_arg_t(c, 0), *k = cpu_arg_t(c, 1), *v = cpu_arg_t(c, 2), *mask = cpu_arg_t(c, 3);
    opr_tensor_view *out = c->outputs[0], *lse = c->outputs[1], *attn = c->outputs[2];
    int32_t nb;
    const int64_t B = batch_of(q, &nb);
    att_dims d = {.L = q->shape[nb], .S = k->shape[nb], .E = q->shape[nb + 1], .Ev = v->shape[nb + 1],
                  .causal = cpu_arg_b(c, 4)};
    d.scale = d.E ? 1.0 / sqrt((double)d.E) : 1.0;
    const size_t es = cpu_dtype_size(q->dtype);
    const int nt = att_threads(B, &d);
    char *piece[3 * ATT_MAX_THREADS];
    int64_t *offs = malloc((size_t)(4 * (B ? B : 1)) * sizeof *offs);
    int64_t sizes[3 * ATT_MAX_THREADS];
    for (int t = 0; t < nt; t++) {
        sizes[3 * t] = d.L * d.E;
        sizes[3 * t + 1] = d.S * d.E;
        sizes[3 * t + 2] = d.S * d.Ev;
    }
    char *mem = offs ? att_alloc(c, "_scaled_dot_product_attention", es, 3 * nt, sizes, piece) : NULL;
    if (!mem) {
        free(offs);
        return offs ? OPR_ERR_NOMEM : CPU_FAIL(c, OPR_ERR_NOMEM, "_scaled_dot_product_attention: out of memory");
    }
    batch_offsets(q, 2, q->shape, nb, B, offs);
    batch_offsets(k, 2, q->shape, nb, B, offs + B);
    batch_offsets(v, 2, q->shape, nb, B, offs + 2 * B);
    if (mask) batch_offsets(mask, mask->ndim < 2 ? mask->ndim : 2, q->shape, nb, B, offs + 3 * B);
    const att_mask m = {mask ? bstride(mask, 2) : 0, mask ? bstride(mask, 1) : 0};
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t b = 0; b < B; b++) {
        char **my = piece + 3 * omp_get_thread_num();
        att_dims db = d;
        const char *qb = att_matrix(q, offs[b], d.L, d.E, my[0], &db.ldq);
        const char *kb = att_matrix(k, offs[B + b], d.S, d.E, my[1], &db.ldk);
        const char *vb = att_matrix(v, offs[2 * B + b], d.S, d.Ev, my[2], &db.ldv);
        const char *mb = mask ? (const char *)mask->data + offs[3 * B + b] * (int64_t)es : NULL;
        if (q->dtype == OPR_F32)
            att_forward_f32(&db, (const float *)qb, (const float *)kb, (const float *)vb, &m, mb,
                            (float *)attn->data + b * d.L * d.S, (float *)lse->data + b * d.L, 1,
                            (float *)out->data + b * d.L * d.Ev);
        else
            att_forward_f64(&db, (const double *)qb, (const double *)kb, (const double *)vb, &m, mb,
                            (double *)attn->data + b * d.L * d.S, (double *)lse->data + b * d.L, 1,
                            (double *)out->data + b * d.L * d.Ev);
    }
    free(mem);
    free(offs);
    return OPR_OK;
}

/* scaled_dot_product_attention_backward: args (grad output, grad logsumexp, grad attn,
 * query, key, value, attn_mask, is_causal, output, logsumexp, attn); outputs the
 * gradients of query, key, value (NULL data where not wanted). */
enum { BW_GOUT, BW_GLSE, BW_GATTN, BW_Q, BW_K, BW_V, BW_MASK, BW_CAUSAL, BW_OUT, BW_LSE, BW_ATTN };

static int k_sdpa_backward(const opr_kernel_call *c)
{
    static const char *op = "scaled_dot_product_attention_backward";
    const opr_tensor_view *gout = cpu_arg_t(c, BW_GOUT), *glse = cpu_arg_t(c, BW_GLSE),
                          *gattn = cpu_arg_t(c, BW_GATTN), *q = cpu_arg_t(c, BW_Q), *k = cpu_arg_t(c, BW_K),
                          *v = cpu_arg_t(c, BW_V), *mask = cpu_arg_t(c, BW_MASK), *lse = cpu_arg_t(c, BW_LSE);
    opr_tensor_view *dq = c->outputs[0], *dk = c->outputs[1], *dv = c->outputs[2];
    const bool want_qk = dq->data || dk->data;
    if (!q || !k || !lse || !gout || (want_qk && !v))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: query, key, logsumexp (and value for the query or key gradient) must be saved", op);
    int32_t nb;
    const int64_t B = batch_of(q, &nb);
    att_dims d = {.L = q->shape[nb], .S = k->shape[nb], .E = q->shape[nb + 1], .Ev = gout->shape[nb + 1],
                  .causal = cpu_arg_b(c, BW_CAUSAL)};
    d.scale = d.E ? 1.0 / sqrt((double)d.E) : 1.0;
    const size_t es = cpu_dtype_size(q->dtype);
    const int64_t rows = d.L < ATT_ROWS ? d.L : ATT_ROWS;
    const int nt = att_threads(B, &d);
    int64_t sizes[6 * ATT_MAX_THREADS];
    for (int t = 0; t < nt; t++) {
        const int64_t one[6] = {d.L * d.E, d.S * d.E, want_qk ? d.S * d.Ev : 0, d.L * d.Ev, rows * d.S, rows * d.S};
        memcpy(sizes + 6 * t, one, sizeof one);
    }
    char *piece[6 * ATT_MAX_THREADS];
    int64_t *offs = malloc((size_t)(8 * (B ? B : 1)) * sizeof *offs);
    char *mem = offs ? att_alloc(c, op, es, 6 * nt, sizes, piece) : NULL;
    if (!mem) {
        free(offs);
        return offs ? OPR_ERR_NOMEM : CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", op);
    }
    batch_offsets(q, 2, q->shape, nb, B, offs);
    batch_offsets(k, 2, q->shape, nb, B, offs + B);
    if (want_qk) batch_offsets(v, 2, q->shape, nb, B, offs + 2 * B);
    if (mask) batch_offsets(mask, mask->ndim < 2 ? mask->ndim : 2, q->shape, nb, B, offs + 3 * B);
    batch_offsets(gout, 2, q->shape, nb, B, offs + 4 * B);
    batch_offsets(lse, 1, q->shape, nb, B, offs + 5 * B);
    if (gattn) batch_offsets(gattn, 2, q->shape, nb, B, offs + 6 * B);
    if (glse) batch_offsets(glse, 1, q->shape, nb, B, offs + 7 * B);
    const att_mask m = {mask ? bstride(mask, 2) : 0, mask ? bstride(mask, 1) : 0};
    const att_rowgrad ga = {gattn ? bstride(gattn, 2) : 0, gattn ? bstride(gattn, 1) : 0, glse ? bstride(glse, 1) : 0};
    const int64_t lse_stride = bstride(lse, 1);
    if (dk->data) memset(dk->data, 0, (size_t)dk->numel * es);
    if (dv->data) memset(dv->data, 0, (size_t)dv->numel * es);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t b = 0; b < B; b++) {
        char **my = piece + 6 * omp_get_thread_num();
        att_dims db = d;
        const char *qb = att_matrix(q, offs[b], d.L, d.E, my[0], &db.ldq);
        const char *kb = att_matrix(k, offs[B + b], d.S, d.E, my[1], &db.ldk);
        const char *vb = want_qk ? att_matrix(v, offs[2 * B + b], d.S, d.Ev, my[2], &db.ldv) : NULL;
        const char *ob = att_matrix(gout, offs[4 * B + b], d.L, d.Ev, my[3], &db.ldo);
        const char *mb = mask ? (const char *)mask->data + offs[3 * B + b] * (int64_t)es : NULL;
        const char *lb = (const char *)lse->data + offs[5 * B + b] * (int64_t)es;
        const char *gab = gattn ? (const char *)gattn->data + offs[6 * B + b] * (int64_t)es : NULL;
        const char *glb = glse ? (const char *)glse->data + offs[7 * B + b] * (int64_t)es : NULL;
        char *dqb = dq->data ? (char *)dq->data + b * d.L * d.E * (int64_t)es : NULL;
        char *dkb = dk->data ? (char *)dk->data + b * d.S * d.E * (int64_t)es : NULL;
        char *dvb = dv->data ? (char *)dv->data + b * d.S * d.Ev * (int64_t)es : NULL;
        if (q->dtype == OPR_F32)
            att_backward_f32(&db, (const float *)qb, (const float *)kb, (const float *)vb, &m, mb, (const float *)lb,
                             lse_stride, (const float *)ob, &ga, gab, glb, (float *)dqb, (float *)dkb, (float *)dvb,
                             (float *)my[4], (float *)my[5]);
        else
            att_backward_f64(&db, (const double *)qb, (const double *)kb, (const double *)vb, &m, mb,
                             (const double *)lb, lse_stride, (const double *)ob, &ga, gab, glb, (double *)dqb,
                             (double *)dkb, (double *)dvb, (double *)my[4], (double *)my[5]);
    }
    free(mem);
    free(offs);
    return OPR_OK;
}

int cpu_register_attention(opr_plugin *self)
{
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    int rc = cpu_register(self, "_scaled_dot_product_attention", dtypes, k_sdpa);
    if (rc == OPR_OK) rc = cpu_register(self, "scaled_dot_product_attention_backward", dtypes, k_sdpa_backward);
    return rc;
}
