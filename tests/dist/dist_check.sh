#!/bin/sh
# The collectives across processes (test_dist) under mpirun, on one host.
#   dist_check.sh TEST_DIST NP          values, gradients, a sub-group: every rank must
#                                        say "all K checks passed"
#   dist_check.sh TEST_DIST NP --die    the last rank exits mid-step: every other rank
#                                        must report the dead peer within the time-out,
#                                        and its opr_ctx_free return, saying why it
#                                        skipped MPI_Finalize
#   dist_check.sh OPREG NP --demo       `opreg demo --model gpt` data-parallel: rank 0
#                                        alone reports, the loss goes down
#   dist_check.sh TEST_DIST_FAULTS NP --fault MODE
#                                        a fault (late, stall, limits, agree: see
#                                        test_dist_faults.c): every rank must say "all K
#                                        checks passed"; a rank whose group broke exits
#                                        without MPI_Finalize, which mpirun is told to allow
#   dist_check.sh TEST_DDP NP --torch SCRIPT
#                                        PyTorch DDP (SCRIPT, find_unused_parameters) at NP
#                                        processes, then test_ddp NP --torch with its
#                                        parameters; skipped (77) without a python3 with torch
#                                        (test_dist_ports with ports_torch.py: the same
#                                        with torch.distributed's collectives)
#   ... --device D                      (after the above) test_dist on device D's tensors
# As root, OpenMPI needs its allow-run-as-root settings; --oversubscribe lets more ranks
# than cores run.
set -u
bin=$1
np=$2
mode=${3:-}
device=
if [ "$mode" = --device ]; then mode=; device="--device ${4:-}"; fi
if [ "${4:-}" = --device ]; then device="--device ${5:-}"; fi
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun (scripts/setup.sh installs openmpi-bin)"; exit 77; }
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# no network interface but loopback in containers: keep OpenMPI on shared memory and
# TCP over lo, and quiet about what it does not find
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
if [ "$mode" = --demo ]; then
    "$bin" info | grep -q '^process groups: available' || { echo "FAIL: opreg info does not list process groups"; status=1; }
    timeout 300 mpirun --oversubscribe -np "$np" "$bin" demo --model gpt --steps 6 --sample 0 --log-every 3 \
        --batch 12 >"$out" 2>&1
    rc=$?
    cat "$out"
    [ "$rc" = 0 ] || { echo "FAIL: mpirun -np $np opreg demo exited $rc"; status=1; }
    grep -q "^  data parallel: $np ranks (MPI), $((12 / np)) of the 12 sequences each" "$out" ||
        { echo "FAIL: the demo did not run data-parallel"; status=1; }
    [ "$(grep -c '^trained: loss' "$out")" = 1 ] || { echo "FAIL: not exactly one rank reported"; status=1; }
    grep -q "^data parallel: the members' step check took [0-9]* us per step (median of 3 steps)" "$out" ||
        { echo "FAIL: the demo did not report its step check's cost"; status=1; }
elif [ "$mode" = --torch ]; then
    python=
    for p in "${OPREG_PYTHON:-}" python3 /usr/bin/python3; do
        [ -n "$p" ] && "$p" -c 'import torch' 2>/dev/null && { python=$p; break; }
    done
    [ -n "$python" ] || { echo "SKIP: no python3 with torch (scripts/setup.sh installs python3-torch)"; exit 77; }
    ref=$(mktemp)
    trap 'rm -f "$out" "$ref"' EXIT
    OMP_NUM_THREADS=1 timeout 120 "$python" "$4" "$np" "$ref" || { echo "FAIL: PyTorch DDP did not run"; exit 1; }
    timeout 120 mpirun --oversubscribe -np "$np" "$bin" "$np" --torch "$ref" >"$out" 2>&1
    rc=$?
    cat "$out"
    [ "$rc" = 0 ] || { echo "FAIL: mpirun -np $np exited $rc"; status=1; }
    r=0
    while [ "$r" -lt "$np" ]; do
        grep -Eq "^rank $r/$np: all [0-9]+ checks passed$" "$out" || { echo "FAIL: rank $r did not pass"; status=1; }
        grep -Eq "^rank $r/$np: (bucket_mib 0: the parameters are PyTorch DDP's|the collectives are PyTorch's \(gloo\)) within" "$out" ||
            { echo "FAIL: rank $r did not compare with PyTorch"; status=1; }
        r=$((r + 1))
    done
elif [ "$mode" = --fault ]; then
    start=$(date +%s.%N)
    timeout 60 mpirun --oversubscribe --mca orte_allowed_exit_without_sync 1 -np "$np" "$bin" "$np" "$4" >"$out" 2>&1
    rc=$?
    cat "$out"
    echo "wall time: $(awk "BEGIN { print $(date +%s.%N) - $start }") s"
    [ "$rc" = 0 ] || { echo "FAIL: mpirun -np $np exited $rc"; status=1; }
    r=0
    while [ "$r" -lt "$np" ]; do
        grep -Eq "^rank $r/$np: all [0-9]+ checks passed$" "$out" || { echo "FAIL: rank $r did not pass"; status=1; }
        r=$((r + 1))
    done
elif [ "$mode" = --die ]; then
    # a rank that exits with status 3 must not make mpirun kill the others at once:
    # they are to find out by themselves
    # the survivors exit without MPI_Finalize (it would wait for the dead rank)
    timeout 60 mpirun --oversubscribe --mca orte_abort_on_non_zero_status 0 --mca orte_allowed_exit_without_sync 1 \
        -np "$np" "$bin" "$np" --die $device >"$out" 2>&1
    cat "$out"
    last=$((np - 1))
    r=0
    while [ "$r" -lt "$last" ]; do
        grep -Eq "^rank $r/$np: a dead peer was reported after [0-9.]* s: .*all_reduce on group 0 \(rank $r of $np(, [a-z]+ device [0-9]+)?\): (all_gather_bytes on group 0: )?timed out after 2 s waiting for the other members" "$out" ||
            { echo "FAIL: rank $r did not report the dead peer"; status=1; }
        grep -Eq "^rank $r/$np: opr_ctx_free returned after [0-9.]* s, logging mpi: MPI_Finalize skipped" "$out" ||
            { echo "FAIL: rank $r's opr_ctx_free did not return, or did not say why it skipped MPI_Finalize"; status=1; }
        r=$((r + 1))
    done
    grep -q "FAIL" "$out" && status=1
else
    timeout 300 mpirun --oversubscribe -np "$np" "$bin" "$np" $device >"$out" 2>&1
    rc=$?
    cat "$out"
    [ "$rc" = 0 ] || { echo "FAIL: mpirun -np $np exited $rc"; status=1; }
    r=0
    while [ "$r" -lt "$np" ]; do
        grep -Eq "^rank $r/$np: all [0-9]+ checks passed$" "$out" || { echo "FAIL: rank $r did not pass"; status=1; }
        r=$((r + 1))
    done
fi
exit $status
