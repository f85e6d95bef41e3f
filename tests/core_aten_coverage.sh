#!/bin/sh
# `opreg ops --core-aten --all`: every Core ATen overload is defined, runs on the CPU,
# takes ATen's arguments in ATen's order and has derivative formulas where it is
# differentiable (exit 0); and the report does catch an overload that lacks them: an op
# directory holding only a file with _pdist_forward (ATen's schema, no kernel, no
# formula) and _cdist_forward with the arguments in another order (the real op files
# define both properly) makes it exit 1 naming each problem, and with --all also
# for the overloads that directory lacks.
# Usage: core_aten_coverage.sh OPREG
set -u
opreg=$1
status=0
out=$("$opreg" ops --core-aten --all 2>&1)
rc=$?
if [ $rc != 0 ]; then
    echo "FAIL: opreg ops --core-aten --all exited $rc:"
    echo "$out" | awk 'NR == 1 || (NF > 3 && $2 == "yes" && /(no CPU kernel|no derivative formula|arguments differ)/) || (NF >= 2 && $2 == "no")'
    status=1
fi
echo "$out" | tail -1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/planted.yaml" <<'YAML'
- name: _pdist_forward(Tensor self, float p=2) -> Tensor
  shape: "[0]"
- name: _cdist_forward(Tensor x2, Tensor x1, float p, int? compute_mode) -> Tensor
  shape: "[0]"
YAML
out=$(OPREG_YAML_DIR="$dir" "$opreg" ops --core-aten 2>&1)
rc=$?
[ $rc = 1 ] || { echo "FAIL: a planted incomplete overload: exit $rc, expected 1"; status=1; }
echo "$out" | grep -q '^_pdist_forward .*no CPU kernel; no derivative formula' ||
    { echo "FAIL: the planted _pdist_forward is not reported"; status=1; }
echo "$out" | grep -q '^_cdist_forward .*arguments differ: ATen (x1, x2, p, compute_mode), opreg (x2, x1, p, compute_mode)' ||
    { echo "FAIL: the planted argument order of _cdist_forward is not reported"; status=1; }
# --all fails on a missing overload (here every one but the two planted), naming it
out=$(OPREG_YAML_DIR="$dir" "$opreg" ops --core-aten --all 2>&1)
rc=$?
[ $rc = 1 ] || { echo "FAIL: --all with missing overloads: exit $rc, expected 1"; status=1; }
echo "$out" | grep -q '^as_strided  *no ' || { echo "FAIL: --all does not list the missing as_strided"; status=1; }
exit $status
