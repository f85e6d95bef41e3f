#!/bin/sh
# Replay of captured models against PyTorch eager (issue 39's bench): the GPT reference
# model and a small torchvision ResNet (bench/replay_models.py) are captured once by
# opreg-capture, then `opreg run --repeat N` (forward, then forward + backward) is timed
# against PyTorch 1.13 eager on the same model and inputs (bench/replay_torch.py), one
# thread each. Prints ms per run and opreg's time as a ratio of PyTorch's (target <= 1.0),
# and the replay's per-node overhead: opreg's forward time per node minus the summed
# time of its kernels as --profile measures them, divided by the node count.
#   bench/replay.sh BUILD_DIR [REPEAT]
set -eu
build=$1
repeat=${2:-20}
src=$(cd "$(dirname "$0")/.." && pwd)
opreg=$build/tools/opreg
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
python=
for p in "${OPREG_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$p" ] && "$p" -c 'import torch, torchvision' 2>/dev/null && { python=$p; break; }
done
[ -n "$python" ] || { echo "bench/replay.sh: no python3 with torch and torchvision" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/opreg-bench-replay.XXXXXX")
trap 'rm -rf "$dir"' EXIT
OPREG_PYTHON=$python "$src/tools/capture/opreg-capture" "$src/bench/replay_models.py:gpt" \
    "$src/bench/replay_models.py:resnet" -o "$dir" --reference none >/dev/null
printf '%-8s %-18s %10s %10s %7s\n' model pass "opreg ms" "torch ms" ratio
for m in gpt resnet; do
    t=$("$python" "$src/bench/replay_torch.py" "$src/bench/replay_models.py:$m" "$repeat")
    tf=$(echo "$t" | sed -n 's/^forward \(.*\)$/\1/p')
    tb=$(echo "$t" | sed -n 's/^forward_backward \(.*\)$/\1/p')
    # forward alone without gradients (PyTorch's runs under no_grad), then both passes
    j=$("$opreg" run "$dir/$m.opreg" --repeat "$repeat" --format json)
    f=$(echo "$j" | sed -n 's/.*"forward_ms": \([0-9.]*\).*/\1/p')
    j=$("$opreg" run "$dir/$m.opreg" --repeat "$repeat" --backward --format json)
    fb=$(echo "$j" | sed -n 's/.*"forward_ms": \([0-9.]*\), "backward_ms": \([0-9.]*\).*/\1 \2/p' |
        awk '{ printf "%.4f", $1 + $2 }')
    printf '%-8s %-18s %10.3f %10.3f %6.2fx\n' "$m" forward "$f" "$tf" "$(echo "$f $tf" | awk '{ print $1 / $2 }')"
    printf '%-8s %-18s %10.3f %10.3f %6.2fx\n' "$m" "forward+backward" "$fb" "$tb" "$(echo "$fb $tb" | awk '{ print $1 / $2 }')"
    # the replay's own cost per node: the wall time of a forward less its nodes' time
    p=$("$opreg" run "$dir/$m.opreg" --repeat "$repeat" --profile --format json)
    echo "$p" | "$python" -c '
import json, sys
d = json.load(sys.stdin)
per_run = d["profile"]["total_ms"] / d["runs"]
print("%-8s replay overhead: %.2f us per node (%d nodes; forward %.3f ms, of which nodes %.3f ms)" % (
    sys.argv[1], 1e3 * (d["forward_ms"] - per_run) / d["nodes"], d["nodes"], d["forward_ms"], per_run))' "$m"
done
