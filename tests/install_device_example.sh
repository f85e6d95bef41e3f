#!/bin/sh
# The device plugin example (share/opreg/device-example of an installation), copied out
# of a prefix that was installed and then moved elsewhere, builds against the moved
# package with find_package(opreg) warning-free (-Werror), links nothing of libopreg,
# loads with the moved prefix's CLI and passes `opreg check --backend exdev` with 0
# failures (its copy_, add, mul, mm and new_zeros on its own device, its own op ex_fma
# with YAML formulas and a fused backward kernel), and `opreg plan` heeds the fused
# kernel's supports and cost_ns; once installed with `cmake
# --install` the moved opreg finds it without any path given. No OPREG_* variable, no
# LD_LIBRARY_PATH.
#   install_device_example.sh BUILD_DIR
set -eu
build=$1
# shellcheck source=tests/install_example_lib.sh
. "$(dirname "$0")/install_example_lib.sh"

cmake --install "$build" --prefix "$tmp/a" >/dev/null
mv "$tmp/a" "$tmp/prefix"
p=$tmp/prefix
example="$p/share/opreg/device-example"
for f in CMakeLists.txt README.md exdev_plugin.c exdev_ops.yaml; do
    [ -f "$example/$f" ] || fail "$example/$f is not installed"
done
[ -f "$p/include/opreg/plugin_util.h" ] || fail "include/opreg/plugin_util.h is not installed"

# warning-free
example_build "$example" "$p" libopreg_exdev.so exdev_ops.yaml -DCMAKE_C_FLAGS=-Werror
opreg="$p/bin/opreg"
example_loaded "$opreg" device_example --plugin "$plugin"

# Conformance on its own device: every op with a kernel there must be checked (a row
# that passes, not n/i) and nothing may fail.
rc=0
bare "$opreg" check -v --backend exdev --plugin "$plugin" >"$tmp/check.out" 2>&1 || rc=$?
cat "$tmp/check.out"
[ "$rc" = 0 ] || fail "opreg check --backend exdev exited $rc"
grep -Eq '^[0-9]+ op\(s\) checked, 0 failure\(s\)$' "$tmp/check.out" || fail "the check summary does not say 0 failure(s)"
for op in copy_ new_zeros add mul mm ex_fma; do
    grep -Eq "^$op +pass" "$tmp/check.out" || fail "opreg check did not pass $op on exdev"
done

# The planner asks the fused kernel (ABI 2.2): its cost_ns prices it, and its supports
# refuses a gradient larger than the device's buffer, with the reason in the plan.
plan() { bare "$opreg" plan ex_fma --requires-grad self,other --shape "self=$1" --shape "other=$1" \
    --backend exdev --plugin "$plugin"; }
out=$(plan 8x8) || fail "opreg plan ex_fma --backend exdev failed"
printf '%s\n' "$out" | grep -q '^chosen: \[self, other (kernel ex_fma_backward)\]' &&
    printf '%s\n' "$out" | grep -q 'costed with the estimate of ex_fma_backward (plugin device_example)' ||
    fail "the plan did not use the kernel's cost_ns:
$out"
out=$(plan 2048x1024) || fail "opreg plan ex_fma (2048x1024) failed"
printf '%s\n' "$out" | grep -q 'not a candidate: \[self, other (kernel ex_fma_backward)\], kernel ex_fma_backward (plugin device_example) refuses these arguments (supports: exdev ex_fma_backward: 2097152 elements exceed the 1048576-element buffer)' &&
    printf '%s\n' "$out" | grep -q '^chosen: \[self\] + \[other\]' ||
    fail "the plan did not heed the kernel's supports:
$out"

# installed next to the package's own plugins: found without --plugin
example_installed "$opreg" device_example "$p" libopreg_exdev.so
echo "device example: built against the moved prefix $p, loaded, checked, installed"
