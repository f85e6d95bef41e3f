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
[ $fail -eq 0 ] && echo "opreg --yaml and OPREG_YAML_PATH: ok"
exit $fail
