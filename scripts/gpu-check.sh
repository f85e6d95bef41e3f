#!/bin/sh
# One prepared run on a GPU machine without network access. Carry deps/ (made by
# scripts/fetch-gpu-deps.sh) with the working tree, then:
#     sh scripts/gpu-check.sh
# It unpacks the .deb files into /tmp/deps (scripts/gpu-deps-env.sh), builds with
# the CUDA plugin, runs `opreg info`, the test suites, `opreg check --backend cuda`, the
# GPU benchmark, the NCCL collectives and data-parallel training on them (where MPI was
# found), the tiled GEMM and compute-sanitizer's race and memory checks, and writes
# everything to $OUT/gpu-check.log.
set -u
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp}
log="$out/gpu-check.log"
: > "$log"
say() { echo "== $*" | tee -a "$log"; }
run() { say "$*"; "$@" >> "$log" 2>&1; rc=$?; echo "   exit $rc" | tee -a "$log"; return $rc; }

deps=/tmp/deps
# shellcheck source=scripts/gpu-deps-env.sh
. scripts/gpu-deps-env.sh || { say "no deps/*.deb: run scripts/fetch-gpu-deps.sh on a machine with network first"; exit 1; }
export PATH="$PATH:/usr/local/cuda/bin" # compute-sanitizer ships with the toolkit
nvidia-smi >> "$log" 2>&1

build=build-gpu
# shellcheck disable=SC2086 # $deps_cmake_args is a list of options
run cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPREG_BUILD_CUDA=ON \
    $deps_cmake_args -DCMAKE_CUDA_ARCHITECTURES=90 || exit 1
run cmake --build "$build" -j "$(nproc)" || exit 1
run "./$build/tools/opreg" info
(cd "$build" && run ctest --output-on-failure -j 8)
run "./$build/tools/opreg" check --backend cuda
if [ -x "./$build/bench/opreg_bench_gpu" ]; then run "./$build/bench/opreg_bench_gpu"; fi
# The collectives on NCCL: one process on the one device (NCCL wants a device per
# rank); MPI starts as a singleton. Built only where CMake found MPI.
if [ -x "./$build/tests/test_dist" ]; then
    run env OPREG_PLUGIN_PATH="$PWD/$build/plugins" OMPI_MCA_btl=self,vader timeout 120 "./$build/tests/test_dist" 1 --device cuda
    run env OPREG_PLUGIN_PATH="$PWD/$build/plugins" OMPI_MCA_btl=self,vader timeout 120 "./$build/tests/test_ddp" 1 --device cuda
else
    say "no MPI in this build (test_dist not built): the NCCL collectives were not run"
fi
# What the CPU emulation cannot show: the tiled GEMM (the ROCm path) on real hardware,
# and races and memory errors under compute-sanitizer (plugins/cuda/VALIDATION.md).
export OPREG_PLUGIN_PATH="$PWD/$build/plugins"
run env OPREG_CUDA_TILED_GEMM=1 "./$build/tests/opreg_cuda_check" --no-grad
if command -v compute-sanitizer > /dev/null; then
    for op in sort masked_select sum index_select; do
        run timeout 120 compute-sanitizer --tool racecheck --error-exitcode 1 "./$build/tests/opreg_cuda_check" --op "$op" --no-grad
    done
    run env OPREG_CUDA_NO_CACHE=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 1 "./$build/tests/opreg_cuda_check" --no-grad
else
    say "compute-sanitizer not found: race and memory checks not run"
fi
say "done; log in $log"
