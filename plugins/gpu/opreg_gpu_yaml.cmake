# Shared by plugins/cuda and plugins/rocm: compile definitions that say which optional
# registry entries exist, read from registry/ops/core.yaml at configure time.
#
# Registering a kernel for an op name the registry does not know makes the host refuse
# the whole plugin, so fused backward kernels (OPR_GK_<NAME>_BACKWARD=<outputs>) and
# the helper ops of derivative formulas (OPR_GK_HAVE_<OP>) are compiled in only when
# the YAML declares them. The YAML is a configure dependency.
function(opreg_gpu_yaml_definitions target)
  # A fused entry's key (`self, mat2: {kernel: mm_backward, ...}`) must list the inputs
  # in the order the kernel produces their gradients (schema order).
  file(READ ${CMAKE_SOURCE_DIR}/registry/ops/core.yaml yaml)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/registry/ops/core.yaml)
  set(backward
    "mm_backward|MM|self, mat2"
    "bmm_backward|BMM|self, mat2"
    "matmul_backward|MATMUL|self, other"
    "linear_backward|LINEAR|input, weight, bias/input, weight"
    "addmm_backward|ADDMM|self, mat1, mat2")
  foreach(entry IN LISTS backward)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 kname)
    list(GET parts 1 macro)
    list(GET parts 2 accepted)
    string(REPLACE "/" ";" accepted "${accepted}")
    string(FIND "${yaml}" "kernel: ${kname}" at)
    if(at EQUAL -1)
      continue()
    endif()
    # The entry's key: on the line above `kernel: NAME`, or before `{kernel: NAME`.
    set(key "")
    if(yaml MATCHES "\n[ ]+([A-Za-z0-9_, ]+):[ ]*\n[ ]+kernel:[ ]*${kname}[ \n,}]")
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
      message(WARNING "${target}: core.yaml declares ${kname} for '${key}', which this plugin does not "
                      "implement in that order; the kernel is not registered")
    endif()
  endforeach()

  # Helper ops that derivative formulas call, and ops newer than the plugin's first
  # release.
  # segment_sum stands for the six segment ops of jagged tensors, defined together.
  foreach(op new_zeros sign narrow_scatter diag_backward lerp addcmul segment_sum)
    string(FIND "${yaml}" "- name: ${op}(" at)
    if(NOT at EQUAL -1)
      string(TOUPPER "${op}" OP)
      target_compile_definitions(${target} PRIVATE OPR_GK_HAVE_${OP})
    endif()
  endforeach()
endfunction()
