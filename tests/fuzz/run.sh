#!/bin/sh
# Fuzzes each libFuzzer harness of a fuzz build (make fuzz builds it; this script
# builds nothing) for SECONDS, one after another. Each starts from a scratch copy of
# its seeds and regression inputs, so the committed corpus does not grow.
# Usage: tests/fuzz/run.sh SECONDS    (FUZZ_BUILD: the build dir, default build-fuzz;
#        FUZZ_SEED: libFuzzer's -seed, default a fresh random one. CI fixes it so that a
#        commit's result is reproducible: the same seed replays the same mutations.)
# Exits non-zero on a finding; the input that triggered it is kept under
# $FUZZ_BUILD/fuzz-findings/HARNESS/ and its report is printed.
set -eu
seconds=${1:?usage: tests/fuzz/run.sh SECONDS}
src=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${FUZZ_BUILD:-$src/../../build-fuzz}" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/opreg-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
# kernels on one thread: reproducible, and the machine is shared
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

status=0
for h in fuzz_yaml_string fuzz_yaml_file fuzz_op_call fuzz_program; do
    bin=$build/tests/fuzz/$h
    if [ ! -x "$bin" ]; then
        echo "run.sh: $bin is not built (make fuzz builds it)" >&2
        exit 2
    fi
    case $h in
    fuzz_op_call)
        seeds="$src/regress/op_call $build/tests/fuzz/corpus/op_call"
        set -- -max_len=4096 ;;
    fuzz_program)
        seeds="$src/regress/program $src/corpus/program"
        set -- -max_len=65536 -dict="$src/program.dict" ;;
    *)
        seeds="$src/regress/yaml $src/corpus/yaml $build/tests/fuzz/corpus/yaml"
        set -- -max_len=65536 -dict="$src/yaml.dict" ;;
    esac
    work=$scratch/$h
    mkdir -p "$work/corpus" "$work/artifacts"
    for d in $seeds; do
        if [ -d "$d" ]; then find "$d" -type f ! -name '.*' ! -name '*.md' ! -name '*.stamp' -exec cp {} "$work/corpus/" \; ; fi
    done
    echo "run.sh: $h for ${seconds}s from $(find "$work/corpus" -type f | wc -l) seed(s)"
    if [ -n "${FUZZ_SEED:-}" ]; then set -- "$@" -seed="$FUZZ_SEED"; fi
    if "$bin" "$@" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1; then
        grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/log" || true
    else
        status=1
        mkdir -p "$build/fuzz-findings/$h"
        cp "$work/artifacts/"* "$build/fuzz-findings/$h/" 2>/dev/null || true
        tail -n 80 "$work/log"
        echo "run.sh: $h found a problem; input(s) kept in $build/fuzz-findings/$h/" >&2
    fi
done
exit $status
