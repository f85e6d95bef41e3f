/* Registration entry points of the CPU kernel families. Each family file registers
 * its kernels through the host table; cpu_plugin.c calls them from opr_plugin_init. */
#ifndef OPREG_CPU_KERNELS_H
#define OPREG_CPU_KERNELS_H

#include <opreg/plugin.h>

/* Registers one kernel for device "cpu". Returns the host's status. */
int cpu_register(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn);

/* out = scale * x summed over x's leading dims, when that is all that summing x to out
 * (broadcast strides ostr) does and x is contiguous; false otherwise (cpu_grad.c). */
bool cpu_sum_rows(const opr_tensor_view *x, opr_tensor_view *out, const int64_t *ostr, double scale);

int cpu_register_elementwise(opr_plugin *self); /* cpu_elementwise.c */
int cpu_register_reduce(opr_plugin *self);      /* cpu_reduce.c */
int cpu_register_linalg(opr_plugin *self);      /* cpu_linalg.c */
int cpu_register_index(opr_plugin *self);       /* cpu_index.c */
int cpu_register_sort(opr_plugin *self);        /* cpu_sort.c */
int cpu_register_factory(opr_plugin *self);     /* cpu_factory.c */
int cpu_register_grad(opr_plugin *self);        /* cpu_grad.c */
int cpu_register_backward(opr_plugin *self);    /* cpu_backward.c: fused backward kernels */
int cpu_register_segment(opr_plugin *self);     /* cpu_segment.c: segments of jagged tensors */

#endif
