/* Reading the structs a plugin hands the host (docs/plugin-abi.md, rule 3): each one
 * starts with struct_size, and the host reads only the bytes that struct_size covers.
 * A plugin built against an older minor gives a shorter struct (the fields it lacks
 * read as zero); a newer one gives a longer struct (the fields this host does not know
 * are ignored). Below the ABI 2.0 size a struct is refused. */
#include "registry.h"

#include <stdio.h>
#include <string.h>

/* The 2.0 sizes never exceed the structs this host was built with. */
_Static_assert(OPR_TENSOR_VIEW_STRUCT_SIZE_2_0 <= sizeof(opr_tensor_view), "opr_tensor_view");
_Static_assert(OPR_KERNEL_ARG_STRUCT_SIZE_2_0 <= sizeof(opr_kernel_arg), "opr_kernel_arg");
_Static_assert(OPR_KERNEL_CALL_STRUCT_SIZE_2_0 <= sizeof(opr_kernel_call), "opr_kernel_call");
_Static_assert(OPR_KERNEL_DESC_STRUCT_SIZE_2_0 <= sizeof(opr_kernel_desc), "opr_kernel_desc");
_Static_assert(OPR_DEVICE_DESC_STRUCT_SIZE_2_0 <= sizeof(opr_device_desc), "opr_device_desc");
_Static_assert(OPR_PLUGIN_STRUCT_SIZE_2_0 <= sizeof(opr_plugin), "opr_plugin");
_Static_assert(OPR_HOST_API_STRUCT_SIZE_2_0 <= sizeof(opr_host_api), "opr_host_api");
/* Nor do the 2.1 ones. */
_Static_assert(OPR_KERNEL_DESC_STRUCT_SIZE_2_1 <= sizeof(opr_kernel_desc), "opr_kernel_desc 2.1");
_Static_assert(OPR_PLUGIN_STRUCT_SIZE_2_1 <= sizeof(opr_plugin), "opr_plugin 2.1");
_Static_assert(OPR_HOST_API_STRUCT_SIZE_2_1 <= sizeof(opr_host_api), "opr_host_api 2.1");
/* And the 2.2 ones (this host is 2.2). */
_Static_assert(OPR_DEVICE_DESC_STRUCT_SIZE_2_2 <= sizeof(opr_device_desc), "opr_device_desc 2.2");
_Static_assert(OPR_KERNEL_DESC_STRUCT_SIZE_2_2 <= sizeof(opr_kernel_desc), "opr_kernel_desc 2.2");
_Static_assert(OPR_HOST_API_STRUCT_SIZE_2_2 <= sizeof(opr_host_api), "opr_host_api 2.2");
_Static_assert(OPR_GROUP_PROVIDER_STRUCT_SIZE_2_2 <= sizeof(opr_group_provider), "opr_group_provider 2.2");

int abi_struct_in(void *dst, size_t dst_size, const void *src, size_t min_size, const char *name, char *why,
                  size_t why_len)
{
    if (!src) {
        memset(dst, 0, dst_size);
        snprintf(why, why_len, "%s is NULL", name);
        return OPR_ERR_INVALID;
    }
    size_t n;
    if (!opr_struct_read(dst, dst_size, src, min_size, &n)) {
        snprintf(why, why_len, "%s has struct_size %zu, below the ABI %d.0 minimum of %zu bytes (this host's %s "
                 "has %zu)", name, n, OPR_ABI_MAJOR, min_size, name, dst_size);
        return OPR_ERR_INVALID;
    }
    return OPR_OK;
}
