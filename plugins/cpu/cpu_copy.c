/* Strided copies shared by the CPU kernels (cpu_kernels.h). */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_strided_copy.h"

#include <stdlib.h>

void cpu_copy_strided(size_t es, int32_t ndim, const int64_t *shape, char *dst, const int64_t *dst_st, const char *src,
                      const int64_t *src_st)
{
    const opc_copy_plan p = opc_copy_plan_new(es, ndim, shape, dst_st, src_st);
    if (p.numel == 0) return;
#pragma omp parallel if (p.numel >= CPU_PAR_THRESHOLD && p.rows > 1)
    {
        int64_t lo, hi;
        cpu_thread_range(p.rows, &lo, &hi);
        opc_copy_rows(&p, dst, src, lo, hi);
    }
}

const void *cpu_dense(const opr_tensor_view *v, void **owned)
{
    *owned = NULL;
    if (!v || cpu_is_contiguous(v)) return v ? v->data : NULL;
    int64_t st[OPR_MAX_DIMS];
    return *owned = cpu_contiguous_copy(v, st);
}

char *cpu_contiguous_copy(const opr_tensor_view *v, int64_t *strides)
{
    const size_t es = cpu_dtype_size(v->dtype);
    char *buf = malloc(v->numel ? (size_t)v->numel * es : 1);
    if (!buf) return NULL;
    opc_contig_strides(v->ndim, v->shape, strides);
    cpu_copy_strided(es, v->ndim, v->shape, buf, strides, v->data, v->strides);
    return buf;
}
