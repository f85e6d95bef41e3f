#!/bin/sh
# Capture then replay (issue 39): opreg-capture traces the models of models.py (an MLP,
# a block of attention, the GPT reference model at a tiny size, a small torchvision
# ResNet, a convolution with batch norm in training mode and a loss) with PyTorch, and
# `opreg run --compare --backward` replays each on every
# BACKEND, checking every node's value, the outputs and the parameters' gradients
# against PyTorch's. Then a planted wrong kernel (fixtures/fx_wrong_tanh: tanh 1% too
# large) must be named by --compare, with its inputs said to match, and exit 1; and
# --format json must be JSON.
# Usage: replay.sh OPREG OPREG_CAPTURE WRONG_TANH_PLUGIN BACKEND...
# Skipped (77) without a Python that has torch and torchvision.
set -u
opreg=$1 capture=$2 wrong=$3
shift 3
py=""
for p in "${OPREG_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$p" ] || continue
    if "$p" -c 'import torch, torchvision' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
    echo "SKIP: no python3 with torch and torchvision"
    exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/opreg-replay.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail=0
models="mlp attention gpt resnet convbn_train"
set -- "$@"
backends="$*"

specs=""
for m in $models; do specs="$specs $here/models.py:$m"; done
# shellcheck disable=SC2086
OPREG_PYTHON=$py "$capture" $specs -o "$dir" --train || { echo "FAIL: opreg-capture"; exit 1; }

for b in $backends; do
    for m in $models; do
        if "$opreg" run "$dir/$m.opreg" --backend "$b" --compare --backward >"$dir/out" 2>&1; then
            echo "ok: $m on $b: $(grep '^compare:' "$dir/out")"
        else
            echo "FAIL: $m on $b:"
            cat "$dir/out"
            fail=1
        fi
    done
done

# In f64, from the f32 capture (references keep their f32 tolerance).
if ! "$opreg" run "$dir/gpt.opreg" --dtype f64 --compare --backward >"$dir/out" 2>&1; then
    echo "FAIL: gpt with --dtype f64:"; cat "$dir/out"; fail=1
fi

# The planted bug: tanh is wrong, so its node must be named, and its inputs matched.
"$opreg" run "$dir/mlp.opreg" --plugin "$wrong" --compare >"$dir/out" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -Eq '^node [0-9]+ tanh on cpu: output 0: max abs error .*; its inputs match the reference$' "$dir/out"; then
    echo "FAIL: the planted wrong tanh was not named (exit $rc):"; cat "$dir/out"; fail=1
else
    echo "ok: planted bug named: $(grep '^node ' "$dir/out")"
fi

# --format json (with --profile) is one JSON object, saying ok
"$opreg" run "$dir/attention.opreg" --compare --profile --format json >"$dir/out.json" 2>"$dir/err" &&
    "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] and d["profile"]["ops"], d' "$dir/out.json" ||
    { echo "FAIL: --format json:"; cat "$dir/out.json" "$dir/err"; fail=1; }
# --repeat and --profile in text
"$opreg" run "$dir/resnet.opreg" --repeat 2 --profile --backward >"$dir/out" 2>&1 &&
    grep -q '^  convolution ' "$dir/out" ||
    { echo "FAIL: --profile:"; cat "$dir/out"; fail=1; }
exit $fail
