#!/bin/sh
# Data-parallel training of the demo GPT (f32) on this host: opreg's `opreg demo --model
# gpt` at 1 rank and under `mpirun -np 2` (opr_ddp_backward on MPI), against PyTorch
# 1.13's DistributedDataParallel (gloo) at 1 and 2 processes (bench/ddp_torch.py), one
# thread per rank, the same model, batch and steps. Prints tokens/s (the whole batch),
# the 2-rank scaling efficiency (tokens/s at 2 ranks / (2 x at 1 rank)), the share of
# opreg's last-step reduction that ran during the backward, opreg's 2-rank step time
# as a ratio of PyTorch's, and what the members' step agreement (the all-gather of
# every rank's step number and status after the last bucket) costs per step: the demo
# times it in every step from the helper's events (opr_ddp_events: the last bucket in,
# then OPR_DDP_STEP_CHECKED) and prints the median over the second half of the steps
# against the median step, so the figure is the agreement itself, measured in the run
# whose efficiency is reported.
#   bench/ddp.sh BUILD_DIR [STEPS]
set -eu
build=$1
steps=${2:-40}
src=$(cd "$(dirname "$0")/.." && pwd)
opreg=$build/tools/opreg
text=$src/examples/data/sonnets.txt
model="--layers 2 --heads 4 --embd 128 --context 64 --batch 16"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
# the first python3 that imports torch: $OPREG_PYTHON, python3 on PATH, Debian's
python=
for p in "${OPREG_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$p" ] && "$p" -c 'import torch' 2>/dev/null && { python=$p; break; }
done
[ -n "$python" ] || { echo "bench/ddp.sh: no python3 with torch (scripts/setup.sh installs python3-torch)" >&2; exit 1; }
# the rate of the last logged window (steps after the first half): no warm-up in it
rate() { sed -n 's/^  step  *[0-9]*\/[0-9]*  loss [0-9.]*  *\([0-9]*\) tokens\/s$/\1/p' | tail -n 1; }
half=$((steps / 2))
load=$(cut -d' ' -f1-3 /proc/loadavg) # other processes share these cores: their load is part of the figures
# shellcheck disable=SC2086 # $model is a list of options
o1=$("$opreg" demo --model gpt $model --steps "$steps" --sample 0 --log-every "$half" --text "$text" | rate)
# shellcheck disable=SC2086
out2=$(mpirun --oversubscribe -np 2 "$opreg" demo --model gpt $model --steps "$steps" --sample 0 \
    --log-every "$half" --text "$text")
o2=$(printf '%s\n' "$out2" | rate)
overlap=$(printf '%s\n' "$out2" | sed -n 's/.*, \([0-9]*\)% of it while the backward ran/\1/p')
check=$(printf '%s\n' "$out2" | sed -n "s/.*the members' step check took \([0-9]*\) us per step.*, \([0-9.]*\)% of a step.*/\1 us, \2%/p")
t1=$("$python" "$src/bench/ddp_torch.py" "$text" 1 "$half" "$half" 2 4 128 64 16 | sed -n 's/^torch_ddp_tokens_per_s //p')
t2=$("$python" "$src/bench/ddp_torch.py" "$text" 2 "$half" "$half" 2 4 128 64 16 | sed -n 's/^torch_ddp_tokens_per_s //p')
awk -v o1="$o1" -v o2="$o2" -v t1="$t1" -v t2="$t2" -v ov="$overlap" -v ck="$check" -v load="$load" 'BEGIN {
    printf "demo GPT (2 layers, width 128, context 64, batch 16, f32), one thread per rank; load average at start %s\n", load
    printf "%-22s %12s %12s %12s\n", "", "1 rank", "2 ranks", "efficiency"
    printf "%-22s %12.0f %12.0f %12.2f\n", "opreg tokens/s", o1, o2, o2 / (2 * o1)
    printf "%-22s %12.0f %12.0f %12.2f\n", "PyTorch DDP tokens/s", t1, t2, t2 / (2 * t1)
    printf "opreg 2-rank step time / PyTorch DDP: %.2fx; reduction during the backward: %s%%\n", t2 / o2, ov
    printf "step agreement per step (median, 2 ranks): %s of a step\n", ck
}'
