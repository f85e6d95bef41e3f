/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): a batched
 * strided matrix, the operand of the reducing batched GEMM (opc_rgemm.h), and how it
 * is read off a tensor's shape and strides. */
#ifndef OPREG_OPC_BMAT_H
#define OPREG_OPC_BMAT_H

#include <opreg/opreg.h>

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Element (i, j) at batch position b lies at
 * data + (sum_d b_d * bst[d] + i * rs + j * cs) * element size. Strides are in
 * elements; a batch stride of 0 means the same matrix at every index of that dim. */
typedef struct {
    const char *data;
    int64_t rows, cols, rs, cs;
    int64_t bst[OPR_MAX_DIMS];
} opc_bmat;

/* The transpose, as swapped extents and strides (nothing is copied). */
static inline opc_bmat opc_bmat_transpose(opc_bmat m)
{
    opc_bmat t = m;
    t.rows = m.cols;
    t.cols = m.rows;
    t.rs = m.cs;
    t.cs = m.rs;
    return t;
}

/* The last two dims of a tensor as a matrix, or a 1-d tensor as a row (the left
 * operand of a product, vec_as_row) or a column (the right operand), as torch.matmul
 * reads them. strides may be NULL when only the shape is known (all strides 0); batch
 * strides are left 0 (opc_bmat_set_batch_strides). */
static inline opc_bmat opc_bmat_of(const void *data, int32_t ndim, const int64_t *shape, const int64_t *strides,
                                   bool vec_as_row)
{
    opc_bmat m;
    memset(&m, 0, sizeof m);
    m.data = (const char *)data;
    if (ndim == 1) {
        const int64_t s = strides ? strides[0] : 0;
        m.rows = vec_as_row ? 1 : shape[0];
        m.cols = vec_as_row ? shape[0] : 1;
        m.rs = vec_as_row ? 0 : s;
        m.cs = vec_as_row ? s : 0;
    } else {
        m.rows = shape[ndim - 2];
        m.cols = shape[ndim - 1];
        m.rs = strides ? strides[ndim - 2] : 0;
        m.cs = strides ? strides[ndim - 1] : 0;
    }
    return m;
}

/* Batch strides of a tensor whose first vb dims are batch dims, right-aligned to a
 * product with nb batch dims (broadcasting): 0 where the tensor has no such dim, where
 * its size is 1, or where its strides are not known. */
static inline void opc_bmat_set_batch_strides(opc_bmat *m, int32_t nb, int32_t vb, const int64_t *shape,
                                              const int64_t *strides)
{
    for (int32_t d = 0; d < nb; d++) {
        const int32_t vd = d - (nb - vb);
        m->bst[d] = vd < 0 || !strides || shape[vd] == 1 ? 0 : strides[vd];
    }
}

#endif
