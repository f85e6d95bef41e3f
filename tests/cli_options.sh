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
expect 0 info --require cpu
expect 2 ops --bogus
expect 2 ops --all
expect 2 ops --yaml
expect 0 ops --kernels
expect 1 info --require no_such_plugin
exit $status
