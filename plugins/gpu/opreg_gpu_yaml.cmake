# Shared by plugins/cuda, plugins/rocm and tests/gpu_emu: checks, at configure time,
# that each fused backward kernel the plugins implement produces its gradients in the
# order of the key that the op YAML (every registry/ops/*.yaml, as the host loads them)
# gives its `kernel:` entry.
#
# Kernels are not filtered by what the YAML defines: a kernel for an op the registry
# does not know is skipped by the host at load time with a log line (registrations are
# optional). A fused kernel is compiled in (OPR_GK_<NAME>_BACKWARD=<outputs>) unless
# the YAML declares it with a key in another order, which would make it write the
# gradients into the wrong inputs: then it is left out, with a warning.
function(opreg_gpu_yaml_definitions target)
  # A fused entry's key (`self, mat2: {kernel: mm_backward, ...}`) must list the inputs
  # in the order the kernel produces their gradients (schema order).
  # Every op file, concatenated: kernel names are unique across them (the registry
  # refuses a second definition), so one search finds each entry's key.
  file(GLOB yaml_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/registry/ops/*.yaml)
  list(SORT yaml_files)
  set(yaml "")
  foreach(f IN LISTS yaml_files)
    file(READ ${f} text)
    string(APPEND yaml "\n${text}")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${f})
  endforeach()
  set(backward
    "mm_backward|MM|self, mat2"
    "bmm_backward|BMM|self, mat2"
    "matmul_backward|MATMUL|self, other"
    "linear_backward|LINEAR|input, weight, bias/input, weight"
    "addmm_backward|ADDMM|self, mat1, mat2"
    "layer_norm_backward|LAYER_NORM|input, weight, bias"
    "scaled_dot_product_attention_backward|SDPA|query, key, value"
    "convolution_backward_fused|CONVOLUTION|input, weight, bias"
    "native_batch_norm_backward_fused|BATCH_NORM|input, weight, bias"
    "grid_sampler_2d_backward_fused|GRID_SAMPLER_2D|input, grid"
    "grid_sampler_3d_backward_fused|GRID_SAMPLER_3D|input, grid")
  foreach(entry IN LISTS backward)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 kname)
    list(GET parts 1 macro)
    list(GET parts 2 accepted)
    string(REPLACE "/" ";" accepted "${accepted}")
    string(FIND "${yaml}" "kernel: ${kname}" at)
    if(at EQUAL -1)
      # not declared here: registered anyway (skipped at run time unless some YAML
      # loaded by then declares it); the first accepted key gives its outputs
      list(GET accepted 0 key)
      string(REPLACE "," ";" key_items "${key}")
      list(LENGTH key_items nout)
      target_compile_definitions(${target} PRIVATE OPR_GK_${macro}_BACKWARD=${nout})
      message(STATUS "${target}: native ${kname} (not in registry/ops: optional)")
      continue()
    endif()
    # The entry's key: on the line above `kernel: NAME` (or `- kernel: NAME`, the first
    # of a list of candidates), or before `{kernel: NAME`.
    set(key "")
    if(yaml MATCHES "\n[ ]+([A-Za-z0-9_, ]+):[ ]*\n[ ]+kernel:[ ]*${kname}[ \n,}]")
      set(key "${CMAKE_MATCH_1}")
    elseif(yaml MATCHES "\n[ ]+([A-Za-z0-9_, ]+):[ ]*\n[ ]+-[ ]*kernel:[ ]*${kname}[ \n,}]")
      set(key "${CMAKE_MATCH_1}")
    elseif(yaml MATCHES "\n[ ]+([A-Za-z0-9_, ]+):[ ]*{[ ]*kernel:[ ]*${kname}[ \n,}]")
      set(key "${CMAKE_MATCH_1}")
    endif()
    if(key IN_LIST accepted)
      string(REPLACE "," ";" key_items "${key}")
      list(LENGTH key_items nout)
      target_compile_definitions(${target} PRIVATE OPR_GK_${macro}_BACKWARD=${nout})
      message(STATUS "${target}: native ${kname} (${key})")
    else()
      message(WARNING "${target}: registry/ops declares ${kname} for '${key}', which this plugin does not "
                      "implement in that order; the kernel is not registered")
    endif()
  endforeach()
endfunction()
