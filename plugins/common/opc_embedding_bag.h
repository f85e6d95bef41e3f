/* plugins/common (prefix opc_, C11 and C++17, host and device code; see
 * opc_blas_layout.h): how _embedding_bag and its gradients find bags, shared by the CPU
 * and CUDA/HIP kernels (registry/ops/embedding_bag.yaml) so that both check the same
 * things and number the bags alike. */
#ifndef OPREG_OPC_EMBEDDING_BAG_H
#define OPREG_OPC_EMBEDDING_BAG_H

#include <stdint.h>
#include <stdio.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define OPC_EBAG_FN __host__ __device__
#else
#define OPC_EBAG_FN
#endif

/* The bag of entry i: the last b with offsets[b] <= i (binary search over the
 * non-decreasing offsets), or nbags for an entry past the last bag (include_last_offset). */
OPC_EBAG_FN static inline int64_t opc_ebag_bag_of(const int64_t *offsets, int64_t noff, int64_t nbags, int64_t i)
{
    int64_t lo = 0, hi = noff; /* the count of offsets <= i lies in [lo, hi] */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (offsets[mid] <= i) lo = mid + 1;
        else hi = mid;
    }
    const int64_t b = lo - 1;
    return b < 0 || b >= nbags ? nbags : b;
}

/* The end (exclusive) of bag b of nbags: the next offset, or n for the last bag of a
 * call without include_last_offset. */
OPC_EBAG_FN static inline int64_t opc_ebag_end(const int64_t *offsets, int64_t noff, int64_t b, int64_t n)
{
    return b + 1 < noff ? offsets[b + 1] : n;
}

/* Host-side check of offsets (contiguous, on the host) and indices for n entries and
 * num_weights rows: writes a message into msg (size cap) and returns 0 when they are
 * unusable, else 1. */
static inline int opc_ebag_check(const int64_t *offsets, int64_t noff, const int64_t *indices, int64_t n,
                                 int64_t num_weights, char *msg, size_t cap)
{
    if (noff > 0 && offsets[0] != 0) {
        snprintf(msg, cap, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                 "position 0. However, got %lld", (long long)offsets[0]);
        return 0;
    }
    for (int64_t b = 1; b < noff; b++)
        if (offsets[b] < offsets[b - 1]) {
            snprintf(msg, cap, "offsets must be non-decreasing, got offsets[%lld] = %lld after %lld", (long long)b,
                     (long long)offsets[b], (long long)offsets[b - 1]);
            return 0;
        }
    if (noff > 0 && offsets[noff - 1] > n) {
        snprintf(msg, cap, "offsets[-1] can not be greater than input's length %lld but got offsets[-1] of %lld",
                 (long long)n, (long long)offsets[noff - 1]);
        return 0;
    }
    for (int64_t i = 0; indices && i < n; i++)
        if (indices[i] < 0 || indices[i] >= num_weights) {
            snprintf(msg, cap, "index %lld is out of range [0, %lld) at position %lld", (long long)indices[i],
                     (long long)num_weights, (long long)i);
            return 0;
        }
    return 1;
}

#endif /* OPREG_OPC_EMBEDDING_BAG_H */
