/* plugins/common (prefix opc_, C11 and C++17, host code; see opc_blas_layout.h): copies
 * of a strided region between two host layouts, used by the core's host copy
 * (core/copy.c) and the CPU plugin's data movement. An element-by-element walk costs
 * several times the memory traffic; the region is first reduced to as few dimensions
 * as both layouts allow, and whatever the two have contiguous innermost is moved as one
 * memcpy per row (a transposed gradient copied back to [B, T, H * D] moves rows of D
 * elements, a cat moves whole rows of each part). */
#ifndef OPREG_OPC_STRIDED_COPY_H
#define OPREG_OPC_STRIDED_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define OPC_COPY_MAX_DIMS 16

/* A region reduced for copying: `ndim` dims (at least 1), outermost first; the last is
 * the row. Each row moves with one memcpy when `rows_contiguous`, else element by
 * element. */
typedef struct opc_copy_plan {
    int32_t ndim;
    int64_t shape[OPC_COPY_MAX_DIMS];
    int64_t dst_st[OPC_COPY_MAX_DIMS], src_st[OPC_COPY_MAX_DIMS]; /* in elements */
    size_t es;
    int rows_contiguous;
    int64_t rows; /* the product of every dim but the last */
    int64_t numel;
} opc_copy_plan;

/* Builds the plan of copying `shape` (ndim <= OPC_COPY_MAX_DIMS) between the two
 * layouts: size-1 dims dropped, neighbours merged where both layouts step through them
 * as one. */
static inline opc_copy_plan opc_copy_plan_new(size_t es, int32_t ndim, const int64_t *shape, const int64_t *dst_st,
                                              const int64_t *src_st)
{
    opc_copy_plan p;
    memset(&p, 0, sizeof p);
    p.es = es;
    p.numel = 1;
    for (int32_t d = 0; d < ndim; d++) p.numel *= shape[d];
    for (int32_t d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        const int32_t last = p.ndim - 1;
        if (p.ndim > 0 && p.dst_st[last] == dst_st[d] * shape[d] && p.src_st[last] == src_st[d] * shape[d]) {
            p.shape[last] *= shape[d];
            p.dst_st[last] = dst_st[d];
            p.src_st[last] = src_st[d];
            continue;
        }
        p.shape[p.ndim] = shape[d];
        p.dst_st[p.ndim] = dst_st[d];
        p.src_st[p.ndim] = src_st[d];
        p.ndim++;
    }
    if (p.ndim == 0) { /* one element (or none: numel says) */
        p.ndim = 1;
        p.shape[0] = 1;
        p.dst_st[0] = p.src_st[0] = 1;
    }
    const int32_t last = p.ndim - 1;
    p.rows_contiguous = p.dst_st[last] == 1 && p.src_st[last] == 1;
    p.rows = p.numel ? p.numel / p.shape[last] : 0;
    return p;
}

#define OPC_COPY_ROW_ELEMS(T)                                                                              \
    do {                                                                                                  \
        T *d_ = (T *)(void *)d;                                                                           \
        const T *s_ = (const T *)(const void *)s;                                                         \
        for (int64_t j = 0; j < n; j++) d_[j * ds] = s_[j * ss];                                          \
    } while (0)

/* Copies rows [lo, hi) of the plan (row r is the r-th index of all dims but the last, in
 * row-major order) from src to dst, which point at element 0 of each layout. */
static inline void opc_copy_rows(const opc_copy_plan *p, char *dst, const char *src, int64_t lo, int64_t hi)
{
    if (lo >= hi) return;
    const int32_t last = p->ndim - 1;
    const int64_t n = p->shape[last], ds = p->dst_st[last], ss = p->src_st[last];
    const size_t es = p->es;
    int64_t idx[OPC_COPY_MAX_DIMS] = {0}, doff = 0, soff = 0, rest = lo;
    for (int32_t d = last - 1; d >= 0; d--) {
        idx[d] = rest % p->shape[d];
        rest /= p->shape[d];
        doff += idx[d] * p->dst_st[d];
        soff += idx[d] * p->src_st[d];
    }
    for (int64_t r = lo; r < hi; r++) {
        char *d = dst + doff * (int64_t)es;
        const char *s = src + soff * (int64_t)es;
        if (p->rows_contiguous) memcpy(d, s, (size_t)n * es);
        else if (es == 4) OPC_COPY_ROW_ELEMS(uint32_t);
        else if (es == 8) OPC_COPY_ROW_ELEMS(uint64_t);
        else if (es == 2) OPC_COPY_ROW_ELEMS(uint16_t);
        else if (es == 1) OPC_COPY_ROW_ELEMS(uint8_t);
        else
            for (int64_t j = 0; j < n; j++) memcpy(d + j * ds * (int64_t)es, s + j * ss * (int64_t)es, es);
        for (int32_t d2 = last - 1; d2 >= 0; d2--) { /* the next row */
            doff += p->dst_st[d2];
            soff += p->src_st[d2];
            if (++idx[d2] < p->shape[d2]) break;
            doff -= p->shape[d2] * p->dst_st[d2];
            soff -= p->shape[d2] * p->src_st[d2];
            idx[d2] = 0;
        }
    }
}

#undef OPC_COPY_ROW_ELEMS

/* The whole copy, on the calling thread. */
static inline void opc_copy_strided(size_t es, int32_t ndim, const int64_t *shape, char *dst, const int64_t *dst_st,
                                    const char *src, const int64_t *src_st)
{
    const opc_copy_plan p = opc_copy_plan_new(es, ndim, shape, dst_st, src_st);
    opc_copy_rows(&p, dst, src, 0, p.rows);
}

#endif
