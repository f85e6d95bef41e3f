#!/bin/sh
# The oneDNN plugin (plugins/onednn) loaded next to the CPU plugin: `opreg info` must
# show its f32 kernels replacing the CPU plugin's for every op it registers (and the
# plugin must load, not be refused), and `opreg check --backend cpu` must pass on the
# convolution ops with them: f32 (oneDNN) against the CPU plugin's f64, forward and
# every backward candidate, on the samples and their layout and size variants.
# Usage: check_onednn.sh OPREG_CLI PLUGIN_FILE
set -u
opreg=$1
plugin=$2
info=$("$opreg" info --plugin "$plugin" --require onednn) || { printf '%s\n' "$info"; echo "FAIL: the oneDNN plugin did not load"; exit 1; }
status=0
for op in convolution convolution_backward convolution_backward_weight convolution_backward_fused; do
    if ! printf '%s\n' "$info" | grep -q "^  $op (cpu, f32): plugin onednn overrides plugin cpu"; then
        echo "FAIL: opreg info does not show onednn's $op overriding the cpu plugin's for f32"
        status=1
    fi
    # f64 stays the CPU plugin's: the reference
    if printf '%s\n' "$info" | grep -q "^  $op (cpu, f64): plugin onednn"; then
        echo "FAIL: onednn took over $op for f64, the reference dtype"
        status=1
    fi
done
[ $status -eq 0 ] || { printf '%s\n' "$info"; exit 1; }
exec "$opreg" check --backend cpu --plugin "$plugin" --dtype f32 \
    --ops 'convolution,convolution_backward,convolution_backward_weight,conv1d,conv2d,conv3d,conv_transpose*'
