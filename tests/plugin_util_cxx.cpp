// <opreg/plugin_util.h> is valid C++17 (plugins written in C++, and the host code of
// CUDA and HIP plugins, include it): this file only has to compile, warning-free with
// -Wall -Wextra -Werror -pedantic (tests/CMakeLists.txt).
#include <opreg/plugin_util.h>

// One use of the walk, so that a call from C++ is compiled too.
size_t opreg_plugin_util_cxx_walk(const opr_tensor_view *out, const opr_tensor_view *a);
size_t opreg_plugin_util_cxx_walk(const opr_tensor_view *out, const opr_tensor_view *a)
{
    const opr_tensor_view *in[1] = {a};
    opu_iter it;
    if (!opu_iter_init(&it, out, 1, in) || !opu_is_dense(a)) return 0;
    for (int64_t i = 0; i < out->numel; i++, opu_iter_next(&it))
        opu_store_f64(out->data, out->dtype, it.off[0], opu_load_f64(a->data, a->dtype, it.off[1]));
    return opu_dtype_size(out->dtype) + opu_f32_to_f16(opu_bf16_to_f32(1));
}
