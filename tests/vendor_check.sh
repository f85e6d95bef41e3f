#!/bin/sh
# The out-of-tree vendor test: installs the build into a temporary prefix, builds the
# plugin of tests/vendor against it (find_package(opreg), installed headers only) once
# per variant, and runs the installed `opreg check -v --backend vdev` on each. The correct
# build must pass; each deliberately broken one must fail, and the output must name the
# culprit: the lines below, one assertion each, say what each variant's output must
# (or, with a leading !, must not) contain, as grep -E patterns.
#
# A variant is added with one #ifdef VENDOR_<NAME> in vendor/vendor_plugin.c (or a
# vendor/vendor_ops_<name>.yaml) and its lines here.
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expectations='
ok              ^vfma +pass
ok              ^exp +pass
ok              op\(s\) checked, 0 failure\(s\)$
ok              n/i mul on vdev: dtypes i64, f16, bf16 candidates .*\[other\]
wrong_forward   ^mul +FAIL
wrong_forward   FAIL mul on vdev: mul sample 0 f32 forward
wrong_forward   exp on vdev: depends on failing mul$
wrong_forward   vfma on vdev: depends on failing mul$
wrong_forward   !FAIL (exp|vfma|add) on vdev
wrong_formula   ^vfma +FAIL
wrong_formula   FAIL vfma on vdev: .*culprit: derivative formula vfma: .*formula \[other\] is wrong .*on the CPU in f64 too
wrong_formula   !FAIL (mul|exp|add) on vdev
wrong_formula   !culprit: fused backward kernel
wrong_fused     ^vfma +FAIL
wrong_fused     FAIL vfma on vdev: .*culprit: fused backward kernel vfma_backward: .*kernel vfma_backward is wrong on vdev
wrong_fused     !culprit: derivative formula
wrong_fused     !FAIL (mul|exp|add) on vdev
override_no_flag  note  mul \(cpu, f32\): plugin cpu runs it; plugin vendor.s is not used
override_no_flag  op\(s\) checked, 0 failure\(s\)$
override_no_flag  !FAIL
'

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
opreg="$tmp/prefix/bin/opreg"
status=0
for variant in $(printf '%s\n' "$expectations" | awk 'NF { print $1 }' | uniq); do
    cmake -S "$src/tests/vendor" -B "$tmp/$variant" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
        -DVENDOR_VARIANT="$variant" >/dev/null
    cmake --build "$tmp/$variant" >/dev/null
    rc=0
    env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH \
        "$opreg" check -v --backend vdev --plugin "$tmp/$variant/libvendor.so" >"$tmp/$variant.out" 2>&1 || rc=$?
    echo "=== variant $variant: opreg check exited $rc"
    cat "$tmp/$variant.out"
    want=1
    case $variant in ok | override_no_flag) want=0 ;; esac
    if [ "$rc" != "$want" ]; then
        echo "FAIL variant $variant: opreg check exited $rc, expected $want"
        status=1
    fi
    printf '%s\n' "$expectations" | awk -v v="$variant" '$1 == v { sub(/^[^ ]+ +/, ""); print }' >"$tmp/patterns"
    while IFS= read -r pattern; do
        case $pattern in
        !*) if grep -Eq -- "${pattern#!}" "$tmp/$variant.out"; then
                echo "FAIL variant $variant: the output contains '${pattern#!}'"
                status=1
            fi ;;
        *) if ! grep -Eq -- "$pattern" "$tmp/$variant.out"; then
                echo "FAIL variant $variant: the output lacks '$pattern'"
                status=1
            fi ;;
        esac
    done <"$tmp/patterns"
done
exit $status
