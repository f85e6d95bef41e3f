#!/bin/sh
# Replay of captured models against PyTorch eager (issue 39's bench): the GPT reference
# model and a small torchvision ResNet (bench/replay_models.py) are captured once by
# opreg-capture, then `opreg run` (forward, then forward + backward) is timed against
# PyTorch 1.13 eager on the same model and inputs (bench/replay_torch.py).
#
# How the figures are made stable on a shared machine:
#  - one thread each side (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS
#    are 1; PyTorch also torch.set_num_threads(1));
#  - the C allocator keeps freed memory on both sides (bench_malloc.h's policy, through
#    GLIBC_TUNABLES): with glibc's defaults PyTorch maps its large temporaries afresh in
#    every run and its time varied 3x from run to run on page faults;
#  - a figure is the median of REPEAT runs after WARMUP untimed ones, in the process's
#    CPU time (which other processes' load does not inflate: one thread is never running
#    while descheduled) and, for reference, in wall time;
#  - the two sides take turns for ROUNDS rounds and the median of the rounds is shown.
# Convolutions: PyTorch runs them on oneDNN (mkldnn); opreg too where the oneDNN plugin
# is built (BUILD_DIR/plugins-onednn), which `opreg run` then loads over the CPU plugin.
#
# Then the replay's cost per node, two ways:
#  - against the hand-written example: (forward of the captured GPT - forward of
#    examples/gpt's gpt_model_forward on the same config, timed by
#    opreg_bench_gpt_forward in the same round) / the program's node count, the median
#    over the rounds; the same for forward + backward;
#  - inside the replay: (wall time of a forward - the summed time of its nodes as
#    --profile measures them) / the node count: the loop of opr_program_run itself.
#   bench/replay.sh BUILD_DIR [REPEAT] [ROUNDS] [WARMUP]
set -eu
build=$1
repeat=${2:-30}
rounds=${3:-3}
warmup=${4:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
opreg=$build/tools/opreg
example=$build/bench/opreg_bench_gpt_forward
onednn=$build/plugins-onednn/libopreg_onednn.so
set --
[ -f "$onednn" ] && set -- --plugin "$onednn"
convs=$([ -f "$onednn" ] && echo "oneDNN both sides" || echo "opreg's without oneDNN (plugin not built)")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
export GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456
python=
for p in "${OPREG_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$p" ] && "$p" -c 'import torch, torchvision' 2>/dev/null && { python=$p; break; }
done
[ -n "$python" ] || { echo "bench/replay.sh: no python3 with torch and torchvision" >&2; exit 1; }
[ -x "$example" ] || { echo "bench/replay.sh: $example not built (ninja opreg_bench_gpt_forward)" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/opreg-bench-replay.XXXXXX")
trap 'rm -rf "$dir"' EXIT
OPREG_PYTHON=$python "$src/tools/capture/opreg-capture" "$src/bench/replay_models.py:gpt" \
    "$src/bench/replay_models.py:resnet" -o "$dir" --reference none >/dev/null
# fields of the JSON object on stdin, on one line
fields() { "$python" -c 'import json, sys; d = json.load(sys.stdin); print(*(d[k] for k in sys.argv[1:]))' "$@"; }
# the median of column $1 of the lines on stdin
median() { awk -v c="$1" '{ print $c }' | sort -g |
    awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# the rounds' figures of column $1 of file $2, on one line
rounds_of() { awk -v c="$1" '{ printf "%s%.2f", (NR > 1 ? " " : ""), $c }' "$2"; }

echo "one thread each side, freed memory kept, convolutions: $convs; median of $repeat runs after $warmup" \
    "warm-up, median over $rounds alternating rounds; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-7s %-17s %9s %9s %6s   %9s %9s %6s\n' model pass "opreg cpu" "torch cpu" ratio "opreg wall" "torch" ratio
: >"$dir/ef"; : >"$dir/eb"
for m in gpt resnet; do
    : >"$dir/$m.f"; : >"$dir/$m.b"
    r=0
    while [ $r -lt "$rounds" ]; do
        if [ $m = gpt ]; then # the hand-written example in the same round: wall, cpu
            e=$("$example" --layers 2 --heads 4 --embd 128 --context 64 --vocab 65 --batch 8 --repeat "$repeat" \
                --warmup "$warmup")
            echo "$e" | sed -n 's/^forward \(.*\)$/\1/p' >>"$dir/ef"
            echo "$e" | sed -n 's/^forward_backward \(.*\)$/\1/p' >>"$dir/eb"
            enodes=$(echo "$e" | sed -n 's/^nodes \(.*\)$/\1/p')
        fi
        # each line: opreg wall, opreg cpu, torch wall, torch cpu (ms)
        t=$("$python" "$src/bench/replay_torch.py" "$src/bench/replay_models.py:$m" "$repeat" "$warmup")
        # forward alone without gradients (PyTorch's runs under no_grad), then both passes
        o=$("$opreg" run "$dir/$m.opreg" "$@" --warmup "$warmup" --repeat "$repeat" --format json |
            fields forward_median_ms forward_cpu_median_ms)
        echo "$o $(echo "$t" | sed -n 's/^forward \(.*\)$/\1/p')" >>"$dir/$m.f"
        o=$("$opreg" run "$dir/$m.opreg" "$@" --warmup "$warmup" --repeat "$repeat" --backward --format json |
            fields run_median_ms run_cpu_median_ms)
        echo "$o $(echo "$t" | sed -n 's/^forward_backward \(.*\)$/\1/p')" >>"$dir/$m.b"
        r=$((r + 1))
    done
    for pass in f b; do
        ow=$(median 1 <"$dir/$m.$pass") oc=$(median 2 <"$dir/$m.$pass")
        tw=$(median 3 <"$dir/$m.$pass") tc=$(median 4 <"$dir/$m.$pass")
        printf '%-7s %-17s %9.3f %9.3f %5.2fx   %9.3f %9.3f %5.2fx\n' "$m" \
            "$([ $pass = f ] && echo forward || echo forward+backward)" "$oc" "$tc" "$(echo "$oc $tc" | awk '{ print $1 / $2 }')" \
            "$ow" "$tw" "$(echo "$ow $tw" | awk '{ print $1 / $2 }')"
        echo "        rounds, cpu ms: opreg $(rounds_of 2 "$dir/$m.$pass"); torch $(rounds_of 4 "$dir/$m.$pass")"
    done
done

# the replay against the hand-written example, per node (CPU time), round by round
nodes=$("$opreg" run "$dir/gpt.opreg" --format json | fields nodes)
for pass in f b; do
    per=$(paste -d' ' "$dir/gpt.$pass" "$dir/e$pass" | awk -v n="$nodes" '{ print 1e3 * ($2 - $6) / n }' | median 1)
    printf 'gpt     %-17s replay %.3f ms (%d nodes) - example %.3f ms (%d recorded ops): %.2f us per node (cpu;' \
        "$([ $pass = f ] && echo forward || echo forward+backward)" "$(median 2 <"$dir/gpt.$pass")" "$nodes" \
        "$(median 2 <"$dir/e$pass")" "$enodes" "$per"
    echo " rounds $(paste -d' ' "$dir/gpt.$pass" "$dir/e$pass" |
        awk -v n="$nodes" '{ printf "%s%.2f", (NR > 1 ? " " : ""), 1e3 * ($2 - $6) / n }'))"
done

# the replay's own loop: a forward's wall time less its nodes' time
for m in gpt resnet; do
    "$opreg" run "$dir/$m.opreg" "$@" --warmup "$warmup" --repeat "$repeat" --profile --format json | "$python" -c '
import json, sys
d = json.load(sys.stdin)
per_run = d["profile"]["total_ms"] / d["runs"]
print("%-7s replay loop: %.2f us per node (%d nodes; forward %.3f ms (mean, profiled), of which nodes %.3f ms)" % (
    sys.argv[1], 1e3 * (d["forward_ms"] - per_run) / d["nodes"], d["nodes"], d["forward_ms"], per_run))' "$m"
done
