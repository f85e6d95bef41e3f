#!/bin/sh
# The torch.export path of opreg-capture (issue 39): the models of models.py traced by
# torch.export, lowered to Core ATen by run_decompositions() and written by the same
# writer as the make_fx path (--tracer export), then replayed by `opreg run --compare
# --backward` on the CPU against PyTorch's values and gradients.
# Usage: export.sh OPREG OPREG_CAPTURE
# Skipped (77) where PyTorch is older than 2.1: there opreg-capture uses make_fx, which
# tests/capture/replay.sh covers.
set -u
opreg=$1 capture=$2
# One Python start for every check (importing torch takes seconds): the first python3
# with torch and torchvision says whether its torch.export is the one the path needs.
why="no python3 with torch and torchvision"
py=""
for p in "${OPREG_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$p" ] || continue
    got=$("$p" -c 'import torch, torchvision
v = [int("".join(c for c in p if c.isdigit()) or 0) for p in torch.__version__.split("+")[0].split(".")[:2]]
if v < [2, 1]:
    print("PyTorch >= 2.1 not installed (found %s)" % torch.__version__)
else:
    try:
        from torch.export import ExportedProgram
        from torch.export.graph_signature import InputKind, OutputKind
        ok = hasattr(ExportedProgram, "run_decompositions")
    except ImportError:
        ok = False
    print("ok" if ok else "PyTorch %s has no torch.export run_decompositions() or input_specs (2.2 has them)"
          % torch.__version__)' 2>/dev/null) || continue
    py=$p
    why=$got
    break
done
if [ "$why" != ok ]; then
    echo "SKIP: $why"
    exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/opreg-export.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail=0
models="mlp attention gpt resnet convbn_train"
specs=""
for m in $models; do specs="$specs $here/models.py:$m"; done
# shellcheck disable=SC2086
OPREG_PYTHON=$py "$capture" $specs -o "$dir" --train --tracer export || { echo "FAIL: opreg-capture --tracer export"; exit 1; }
for m in $models; do
    # the program says which tracer wrote it
    producer=$("$py" -c 'import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
print(json.loads(json.loads(f.read(n))["__metadata__"]["opreg.program"])["producer"])' "$dir/$m.opreg")
    case $producer in
    *torch.export*) ;;
    *) echo "FAIL: $m: written by \"$producer\", not the torch.export path"; fail=1 ;;
    esac
    if "$opreg" run "$dir/$m.opreg" --compare --backward >"$dir/out" 2>&1; then
        echo "ok: $m ($producer): $(grep '^compare:' "$dir/out")"
    else
        echo "FAIL: $m:"
        cat "$dir/out"
        fail=1
    fi
done
exit $fail
