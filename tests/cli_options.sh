#!/bin/sh
# Bad usage of the CLI is refused with exit status 2 rather than ignored (a typo in a
# CI script must not turn into a run of something else), and `opreg info --require`
# fails when a plugin is not loaded. Usage: cli_options.sh OPREG
set -u
opreg=$1
status=0
expect() { # expect STATUS ARGS...: opreg ARGS must exit STATUS
    want=$1
    shift
    rc=0
    "$opreg" "$@" >/dev/null 2>&1 </dev/null || rc=$?
    if [ "$rc" != "$want" ]; then
        echo "FAIL: opreg $* exited $rc, expected $want"
        status=1
    fi
}
expect 2 info --nosuch
expect 2 info --plugin
expect 2 plan --bogus 1
expect 2 plan mm --requires-grad self --shape self=2x3 --shape mat2=3x2 --bogus 1
expect 0 plan mm --requires-grad self --shape self=2x3 --shape mat2=3x2
expect 2 check --ops ''
expect 2 check --ops ','
expect 2 check --timeout inf
expect 2 check --timeout nan
expect 2 check --backend cpu:1 --ops relu
expect 2 check --ops relu --sample x
expect 2 check --ops relu --sample 99
expect 2 check --ops relu --variant 'no such variant'
expect 0 check --ops relu --sample 0 --variant 'odd size 13' --no-backward
expect 0 run --help
expect 2 run
expect 2 run model.opreg --bogus
expect 2 run model.opreg --repeat 0
expect 2 run model.opreg --warmup -1
expect 2 run model.opreg --dtype f16
expect 2 run model.opreg --format xml
expect 2 run model.opreg --backend
expect 2 run /nonexistent/model.opreg
expect 2 run /nonexistent/model.opreg --backend nosuch
# --rerun-failed takes a report of `opreg check --format json` naming loaded ops and backends
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rec() { # rec OP BACKEND VERDICT: one record of a report
    printf '{"op": "%s", "backend": "%s", "dtype": "f32", "sample": 0, "variant": "", "phase": "forward", ' "$1" "$2"
    printf '"candidate": null, "verdict": "%s", "count": 1}' "$3"
}
report() { printf '{"schema": "opreg-check", "version": 2, "backends": ["cpu"], "records": [%s]}\n' "$1"; }
echo 'not json' >"$tmp/text"
echo '{"records": []}' >"$tmp/other.json"
report "$(rec no_such_op cpu fail)" >"$tmp/unknown_op.json"
report "$(rec relu no_such_backend fail)" >"$tmp/unknown_backend.json"
report "$(rec relu cpu fail), $(rec exp cpu pass)" >"$tmp/relu.json"
report "$(rec relu cpu pass)" >"$tmp/passed.json"
# a version 3 record names its ordinal: one the cpu does not have is refused
printf '{"schema": "opreg-check", "version": 3, "backends": ["cpu"], "records": [%s]}\n' \
    "$(rec relu cpu fail | sed 's/"dtype"/"ordinal": 7, "dtype"/')" >"$tmp/bad_ordinal.json"
expect 2 check --rerun-failed "$tmp/no_such_file"
expect 2 check --rerun-failed "$tmp/text"
expect 2 check --rerun-failed "$tmp/other.json"
expect 2 check --rerun-failed "$tmp/unknown_op.json"
expect 2 check --rerun-failed "$tmp/unknown_backend.json"
expect 2 check --rerun-failed "$tmp/bad_ordinal.json"
expect 2 check --rerun-failed "$tmp/relu.json" --ordinals all
expect 2 check --ordinals some
expect 2 check --rerun-failed "$tmp/relu.json" --ops relu
expect 0 check --rerun-failed "$tmp/passed.json"
expect 0 check --rerun-failed "$tmp/relu.json"
# the rerun runs the one record the report names (relu's forward, sample 0, f32) and no other
"$opreg" check --rerun-failed "$tmp/relu.json" --format json >"$tmp/rerun.json" 2>/dev/null
got=$(grep -c '"op": ' "$tmp/rerun.json")
if [ "$got" != 1 ] || ! grep -q '"op": "relu", "backend": "cpu", "ordinal": 0, "dtype": "f32", "sample": 0, "variant": "", "phase": "forward", "candidate": null, "verdict": "pass"' "$tmp/rerun.json"; then
    echo "FAIL: opreg check --rerun-failed $tmp/relu.json did not rerun relu sample 0 f32 forward alone:"
    cat "$tmp/rerun.json"
    status=1
fi
expect 0 info --require cpu
expect 2 ops --bogus
expect 2 ops --all
expect 2 ops --yaml
expect 0 ops --kernels
expect 1 info --require no_such_plugin
exit $status
