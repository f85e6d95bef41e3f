#!/bin/sh
# Extra op definitions on the command line: `--yaml FILE` on the commands that take
# --plugin, and OPREG_YAML_PATH, both added after the built-in ops (a composite op
# calling the built-in mul and sigmoid, with its own formulas, loads, is listed,
# planned, checked and gradchecked); a file
# that cannot be loaded is an error naming it.
set -u
opreg=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
cat >"$tmp/swiglu.yaml" <<'YAML'
- name: swiglu_c(Tensor self, Tensor gate) -> Tensor
  shape: broadcast(sizes(self), sizes(gate))
  forward: mul(self, sigmoid(gate))
  self, gate:
    let:
      s: sigmoid(gate)
    self: mul(grad, s)
    gate: mul(mul(grad, self), sub(s, mul(s, s)))
  samples: [{self: [3, 4], gate: [3, 4]}, {self: [2, 3], gate: [2, 3]}]
YAML
expect() { # expect DESCRIPTION PATTERN COMMAND...: the command succeeds and prints PATTERN
    what=$1 pattern=$2
    shift 2
    out=$("$@" 2>&1) || { echo "FAIL: $what: exit $?: $out"; fail=1; return; }
    printf '%s\n' "$out" | grep -Eq -- "$pattern" || { echo "FAIL: $what: no '$pattern' in: $out"; fail=1; }
}
expect "ops --yaml" '^swiglu_c\(Tensor self, Tensor gate\)' "$opreg" ops --yaml "$tmp/swiglu.yaml"
expect "ops with OPREG_YAML_PATH" '^swiglu_c\(' env OPREG_YAML_PATH="$tmp/swiglu.yaml" "$opreg" ops
expect "ops still lists the built-ins" '^mul\(' "$opreg" ops --yaml "$tmp/swiglu.yaml"
expect "gradcheck --yaml" 'passed' "$opreg" gradcheck swiglu_c --yaml "$tmp/swiglu.yaml"
expect "check --yaml" '^1 op\(s\) checked, 0 failure\(s\)' "$opreg" check --ops swiglu_c --yaml "$tmp/swiglu.yaml"
expect "plan --yaml" 'swiglu_c' "$opreg" plan swiglu_c --yaml "$tmp/swiglu.yaml" --requires-grad self --shape self=3x4 --shape gate=3x4

out=$("$opreg" ops --yaml "$tmp/missing.yaml" 2>&1)
rc=$?
if [ $rc -eq 0 ] || ! printf '%s' "$out" | grep -q "yaml_paths entry '$tmp/missing.yaml'"; then
    echo "FAIL: a missing --yaml file: exit $rc: $out"
    fail=1
fi
# `extends:` gives a built-in op more derivative candidates and other tolerances from
# an extra file, without editing the op files: plan and check see the candidate, check
# checks it (a wrong one fails, blamed on its formula), a tolerance changes a verdict,
# and what an extension may not do is refused, naming why.
cat >"$tmp/ext_mm.yaml" <<'YAML'
- extends: mm
  self, mat2:
    self: mm(grad, t(mat2))
    mat2: mm(t(self), grad)
YAML
sed 's/mat2: mm(t(self), grad)/mat2: mul(mm(t(self), grad), 2)/' "$tmp/ext_mm.yaml" >"$tmp/ext_mm_wrong.yaml"
printf -- '- extends: exp\n  tolerance: {f32: {rtol: 0, atol: 0}}\n' >"$tmp/ext_exp_tol.yaml"
expect "plan sees an extension's candidate" '\[self, mat2\]' \
    "$opreg" plan mm --yaml "$tmp/ext_mm.yaml" --requires-grad self,mat2 --shape self=3x4 --shape mat2=4x5
expect "check checks an extension's candidate" '"candidate": "self, mat2", "verdict": "pass"' \
    "$opreg" check --ops mm --no-variants --yaml "$tmp/ext_mm.yaml" --format json
out=$("$opreg" check --ops mm --no-variants --yaml "$tmp/ext_mm_wrong.yaml" 2>&1)
rc=$?
if [ $rc -ne 1 ] || ! printf '%s\n' "$out" | grep -q 'culprit: derivative formula mm'; then
    echo "FAIL: a wrong candidate added by extends: exit $rc: $out"
    fail=1
fi
expect "exp passes with its own tolerance" '^1 op\(s\) checked, 0 failure\(s\)' "$opreg" check --ops exp --no-backward --no-variants
out=$("$opreg" check --ops exp --no-backward --no-variants --yaml "$tmp/ext_exp_tol.yaml" 2>&1)
rc=$?
if [ $rc -ne 1 ] || ! printf '%s\n' "$out" | grep -q '^exp  *FAIL'; then
    echo "FAIL: a zero tolerance given by extends did not fail exp's f32 forward: exit $rc: $out"
    fail=1
fi
refused() { # refused DESCRIPTION PATTERN YAML: loading YAML fails, naming PATTERN
    printf '%s\n' "$3" >"$tmp/refused.yaml"
    out=$("$opreg" ops --yaml "$tmp/refused.yaml" 2>&1) && { echo "FAIL: $1: loaded"; fail=1; return; }
    printf '%s\n' "$out" | grep -q -- "$2" || { echo "FAIL: $1: no '$2' in: $out"; fail=1; }
}
refused "an unknown op" "extends: no op 'no_such_op' is defined" '- extends: no_such_op
  self: grad'
refused "a forward" "'forward' would redefine the op" '- extends: mm
  forward: mm(self, mat2)'
refused "name and extends" "'name' (a new op) or 'extends'" '- extends: mm
  name: mm2(Tensor self) -> Tensor'
refused "a candidate label taken" "already has a candidate 'self'" '- extends: mm
  self: mm(grad, t(mat2))'
refused "a kernel name taken" "kernel name 'mm_backward' is already used" '- extends: mm
  self, mat2: {kernel: mm_backward}'
[ $fail -eq 0 ] && echo "opreg --yaml and OPREG_YAML_PATH: ok"
exit $fail
