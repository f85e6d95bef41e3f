/* The oneDNN plugin (plugins/onednn): f32 convolutions on the CPU through oneDNN's C
 * API, registered over the CPU plugin's kernels with override_dtypes (README.md says
 * why it is a plugin of its own). This header joins its three files:
 *   onednn_plugin.c  entry points, the engine, registration
 *   onednn_prim.c    one convolution direction as a oneDNN primitive, cached per geometry
 *   onednn_conv.c    the kernels: convolution, convolution_backward_weight,
 *                    convolution_backward (and its fused form) */
#ifndef OPREG_ONEDNN_COMMON_H
#define OPREG_ONEDNN_COMMON_H

#include "../common/opc_conv.h"

#include <opreg/plugin.h>

#include <dnnl.h>

#include <stdbool.h>
#include <stdint.h>

#define ONEDNN_FAIL(call, status, ...) ((call)->host->set_error((call), __VA_ARGS__), (status))

/* The CPU engine every primitive of the process is created on (one per process: the
 * engine is thread-safe and the primitives cached for one context serve every other). */
dnnl_engine_t onednn_engine(void);

/* The three directions of a convolution (plugins/common/opc_conv.h names the images):
 * the small image from the big one (oneDNN's forward convolution), the big one from the
 * small one (its backward data), and the weight's gradient (its backward weights). */
typedef enum onednn_dir { ONEDNN_TO_SMALL, ONEDNN_TO_BIG, ONEDNN_WEIGHT_GRAD } onednn_dir;

/* Runs direction dir of geometry g (ndim: the tensors' dims, 3 to 5) on contiguous f32
 * buffers: big [N, C_b, *sb], w [C_s, C_b / groups, *k], small [N, C_s, *ss], bias [C_s]
 * (NULL: none). TO_SMALL reads big, w and adds bias into small; TO_BIG reads small and w
 * into big; WEIGHT_GRAD reads big and small into w, and the bias gradient (the sum of
 * small over all but the channels) into bias when it is not NULL. The primitive of a
 * geometry is built once and cached. OPR_OK, or an error status after call's set_error. */
int onednn_conv_run(const opr_kernel_call *call, const opc_conv *g, int32_t ndim, onednn_dir dir, float *big, float *w,
                    float *small, float *bias);

/* Registers the convolution kernels (onednn_conv.c). */
int onednn_register_conv(opr_plugin *self, const opr_host_api *host);

#endif
