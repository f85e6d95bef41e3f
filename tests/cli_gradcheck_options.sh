#!/bin/sh
# `opreg gradcheck` option values: what is not a number (or is negative, NaN or
# infinite) is bad usage, exit 2 with a message naming the option, never read as 0 (the
# default) the way atof did; a number still runs the check.
set -u
opreg=$1
fail=0
for opt in --eps --atol --rtol; do
    for v in abc 1e-3x "" nan inf -1e-6; do
        err=$("$opreg" gradcheck exp "$opt" "$v" 2>&1 >/dev/null)
        rc=$?
        if [ "$rc" -ne 2 ] || ! printf '%s' "$err" | grep -q -- "$opt"; then
            echo "FAIL: opreg gradcheck exp $opt '$v': exit $rc, stderr: $err"
            fail=1
        fi
    done
done
"$opreg" gradcheck exp --eps 1e-6 --atol 0 --rtol 1e-5 >/dev/null || { echo "FAIL: valid numbers refused"; fail=1; }
[ $fail -eq 0 ] && echo "opreg gradcheck option values: ok"
exit $fail
