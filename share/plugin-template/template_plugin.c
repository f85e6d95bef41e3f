/* A minimal opreg plugin: it defines one op in YAML (template_ops.yaml, shipped next to
 * the plugin) and provides its kernel on the cpu. Rename "template" throughout, then
 * add ops to the YAML and kernels below; see README.md.
 *
 * A plugin includes <opreg/plugin.h> for types only and never links libopreg: every
 * service comes through the host table it is given. */
#include <opreg/plugin.h>

#include <stdio.h>

/* out = factor * self, for f32 or f64 views of any strides (a transposed or expanded
 * input arrives as it is; the output is contiguous). The host has checked the
 * argument kinds, the dtypes the YAML allows and the shapes before calling. */
static int k_template_scale(const opr_kernel_call *call)
{
    const opr_tensor_view *self = call->args[0]->u.t;
    const double factor = call->args[1]->u.d; /* a float argument is always a double */
    opr_tensor_view *out = call->outputs[0];
    int64_t idx[OPR_MAX_DIMS] = {0};
    for (int64_t k = 0; k < out->numel; k++) {
        int64_t in_at = 0, out_at = 0;
        for (int d = 0; d < out->ndim; d++) {
            in_at += idx[d] * self->strides[d];
            out_at += idx[d] * out->strides[d];
        }
        if (out->dtype == OPR_F64) ((double *)out->data)[out_at] = factor * ((const double *)self->data)[in_at];
        else ((float *)out->data)[out_at] = (float)(factor * ((const float *)self->data)[in_at]);
        for (int d = out->ndim - 1; d >= 0 && ++idx[d] == out->shape[d]; d--) idx[d] = 0;
    }
    return OPR_OK;
}

/* Optional: says whether the plugin can run on this machine, without side effects. A
 * plugin for a device would look for the device or its driver here. */
OPR_PLUGIN_EXPORT int opr_plugin_probe(char *why, size_t why_len)
{
    if (why && why_len) snprintf(why, why_len, "template: the cpu is always there");
    return 1;
}

OPR_PLUGIN_EXPORT int opr_plugin_init(const opr_host_api *host, opr_plugin *self)
{
    /* first of all, before anything that can fail */
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "template";
    self->version = "0.1.0";
    /* self->dir and a load_yaml that resolves relative paths against it are ABI 2.1 */
    if (host->abi_major != OPR_ABI_MAJOR || host->struct_size < OPR_HOST_API_STRUCT_SIZE_2_1 ||
        self->struct_size < OPR_PLUGIN_STRUCT_SIZE_2_1) {
        host->set_error(NULL, "template: needs opreg's plugin ABI %d.1 or newer (the host has %u.%u)", OPR_ABI_MAJOR,
                        host->abi_major, host->abi_minor);
        return OPR_ERR_ABI;
    }
    int rc = host->load_yaml(self, "template_ops.yaml");
    if (rc) return rc; /* the host's message names the file and the line */
    const opr_kernel_desc kernels[] = {
        {.struct_size = sizeof(opr_kernel_desc), .op = "template_scale", .device = "cpu",
         .dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64), .fn = k_template_scale},
    };
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if ((rc = host->register_kernel(self, &kernels[i]))) return rc;
    host->log(self, OPR_LOG_DEBUG, "ready: %zu kernel(s)", sizeof kernels / sizeof kernels[0]);
    return OPR_OK;
}
