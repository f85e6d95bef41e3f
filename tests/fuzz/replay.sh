#!/bin/sh
# Runs a libFuzzer harness once on every file of the given directories (no fuzzing):
# the regression check of a fuzz build. Usage: replay.sh HARNESS DIR...
# Exits non-zero when an input crashes, leaks or trips a sanitizer.
set -eu
bin=$1
shift
list=$(mktemp "${TMPDIR:-/tmp}/opreg-replay.XXXXXX")
trap 'rm -f "$list" "$list.log"' EXIT
for dir in "$@"; do
    if [ -d "$dir" ]; then find "$dir" -type f ! -name '.*' ! -name '*.md' ! -name '*.stamp' | sort >>"$list"; fi
done
count=$(wc -l <"$list")
if [ "$count" -eq 0 ]; then
    echo "replay.sh: no inputs in $*" >&2
    exit 1
fi
# libFuzzer runs each file named on its command line once; batches keep lines short.
if ! tr '\n' '\0' <"$list" | xargs -0 -n 64 "$bin" >"$list.log" 2>&1; then
    # each failing input: its name, then the start of its report (later batches
    # still run, so the end of the log is not where the failure is)
    awk '/^Running: / { input = $0; shown = 0 }
         /ERROR: |runtime error|SUMMARY: |deadly signal/ && !shown { print "--- " input; shown = 40 }
         shown > 0 { print; shown-- }' "$list.log"
    echo "replay.sh: $(basename "$bin") failed on the input(s) named above, of $count" >&2
    exit 1
fi
echo "replay.sh: $count input(s) through $(basename "$bin"), all passed"
