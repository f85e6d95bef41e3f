/* Registration entry points of the CPU kernel families, and the few helpers the
 * families share. Each family file registers its kernels through the host table;
 * cpu_plugin.c calls them from opr_plugin_init. */
#ifndef OPREG_CPU_KERNELS_H
#define OPREG_CPU_KERNELS_H

#include <opreg/plugin.h>

/* Registers one kernel for device "cpu". Returns the host's status. */
int cpu_register(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn);
/* The same with kernel_data (opr_kernel_desc.data). */
int cpu_register_data(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn, void *data);
/* cpu_register with a `supports` callback (opr_kernel_desc.supports): the calls the
 * kernel takes, asked before it runs. */
int cpu_register_supports(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn,
                          bool (*supports)(const opr_kernel_call *call, char *why, size_t why_len));
/* Both: kernel_data and a `supports` callback (either may be NULL). */
int cpu_register_full(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn, void *data,
                      bool (*supports)(const opr_kernel_call *call, char *why, size_t why_len));
/* Reports msg as the error of the plugin's init (there is no call yet); returns
 * OPR_ERR_INVALID. */
int cpu_init_error(const char *msg);
/* cpu_register for an f32 kernel (among dtypes) that also serves f16 and bf16: their
 * tensors are widened to f32 around the call and the outputs rounded back
 * (cpu_half.c). */
int cpu_register_upcast(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn);
/* The same, with the arguments the op writes in place (bit i: argument i; their widened
 * copies are rounded back into them after the call) and a `supports` callback (NULL:
 * none), which sees the call as the host made it (half-precision tensors). */
int cpu_register_upcast_ex(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn, uint32_t written,
                           bool (*supports)(const opr_kernel_call *call, char *why, size_t why_len));

/* out = scale * x summed over x's leading dims, when that is all that summing x to out
 * (broadcast strides ostr) does and x is contiguous; false otherwise (cpu_grad.c). */
bool cpu_sum_rows(const opr_tensor_view *x, opr_tensor_view *out, const int64_t *ostr, double scale);

/* cdist (p = 2) of one batch, P x M against R x M rows (unit column stride, row strides
 * rs1, rs2) into the contiguous P x R out, through a GEMM (cpu_cdist_gemm.c), and when
 * that path is the one to take. OPR_OK or OPR_ERR_NOMEM. */
bool cpu_cdist_use_gemm(int64_t P, int64_t R, int64_t M, int64_t rs1, int64_t rs2);
int cpu_cdist_gemm(opr_dtype dt, int64_t P, int64_t R, int64_t M, const void *x1, int64_t rs1,
                   const void *x2, int64_t rs2, void *out);

/* Copies a strided region of `shape` (es-byte elements, strides in elements) from src
 * to dst, both of any layout: rows of the reduced region (opc_strided_copy.h) split
 * between the threads (cpu_copy.c). */
void cpu_copy_strided(size_t es, int32_t ndim, const int64_t *shape, char *dst, const int64_t *dst_st, const char *src,
                      const int64_t *src_st);
/* v copied into a fresh contiguous buffer (the caller frees it), its row-major strides
 * in strides[v->ndim]; NULL when out of memory. */
char *cpu_contiguous_copy(const opr_tensor_view *v, int64_t *strides);
/* v's elements in row-major order: v's own data when it is contiguous, else a copy in
 * *owned (the caller frees it). NULL for an absent v, or when out of memory (then
 * *owned is NULL too). */
const void *cpu_dense(const opr_tensor_view *v, void **owned);

int cpu_register_elementwise(opr_plugin *self); /* cpu_elementwise.c */
int cpu_register_reduce(opr_plugin *self);      /* cpu_reduce.c: sum, mean, prod, norm */
int cpu_register_reduce_extreme(opr_plugin *self); /* cpu_reduce_extreme.c: max, min, amax, amin */
int cpu_register_softmax(opr_plugin *self);     /* cpu_softmax.c: softmax, log_softmax */
int cpu_register_linalg(opr_plugin *self);      /* cpu_linalg.c */
int cpu_register_index(opr_plugin *self);       /* cpu_index.c */
int cpu_register_scatter(opr_plugin *self);     /* cpu_scatter.c: slice_scatter, scatter, scatter_reduce, nonzero */
int cpu_register_adv_index(opr_plugin *self);   /* cpu_adv_index.c: index.Tensor, index_put(_) */
int cpu_register_sort(opr_plugin *self);        /* cpu_sort.c */
int cpu_register_factory(opr_plugin *self);     /* cpu_factory.c */
int cpu_register_grad(opr_plugin *self);        /* cpu_grad.c */
int cpu_register_backward(opr_plugin *self);    /* cpu_backward.c: fused backward kernels */
int cpu_register_segment(opr_plugin *self);     /* cpu_segment.c: segments of jagged tensors */
int cpu_register_convert(opr_plugin *self);     /* cpu_convert.c: to(self, dtype) */
int cpu_register_nn(opr_plugin *self);          /* cpu_nn.c: embedding, dropout, triu/tril, argmax/argmin */
int cpu_register_norm(opr_plugin *self);        /* cpu_norm.c: layer_norm, gelu */
int cpu_register_loss(opr_plugin *self);        /* cpu_loss.c: nll_loss, cross_entropy */
int cpu_register_attention(opr_plugin *self);   /* cpu_attention.c: scaled dot-product attention */
int cpu_register_conv(opr_plugin *self);        /* cpu_conv.c: convolution and its backward */
int cpu_register_pool(opr_plugin *self);        /* cpu_pool.c: max, average and adaptive pooling */
int cpu_register_batch_norm(opr_plugin *self);  /* cpu_batch_norm.c: batch and group norm */
int cpu_register_pointwise(opr_plugin *self);   /* cpu_pointwise.c: ATen's other pointwise, bitwise, logical ops */
int cpu_register_optim(opr_plugin *self);       /* cpu_optim.c: sgd_step_, adamw_step_ */
int cpu_register_shape(opr_plugin *self);       /* cpu_shape.c: flip, as_strided_scatter */
int cpu_register_scan(opr_plugin *self);        /* cpu_scan.c: cumsum */
int cpu_register_random(opr_plugin *self);      /* cpu_random.c: rand, randn, randperm */
int cpu_register_embedding_bag(opr_plugin *self); /* cpu_embedding_bag.c: _embedding_bag and its gradients */
int cpu_register_grid_sample(opr_plugin *self); /* cpu_grid_sample.c: grid_sampler_2d and its backward */

#endif
