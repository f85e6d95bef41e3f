#!/bin/sh
# Runs `opreg check` for one backend (with the options that follow), or records a skip
# (exit 77) with the reason the backend is not available, as `opreg info` gives it.
set -u
opreg=$1
backend=$2
shift 2
info=$("$opreg" info)
if printf '%s\n' "$info" | sed -n '/^devices:/,$p' | grep -q "^  $backend "; then
    exec "$opreg" check --backend "$backend" "$@"
fi
reason=$(printf '%s\n' "$info" | sed -n '/^plugins:/,/^devices:/p' | grep -A2 "^  $backend " | grep -E "skipped|refused" | head -n 1 | sed 's/^ *//')
echo "SKIP $backend: ${reason:-no $backend plugin was found (not built on this machine)}"
exit 77
