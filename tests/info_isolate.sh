#!/bin/sh
# `opreg info` probes every plugin in a child process first (tools/plugin_probe.c): a
# plugin whose init crashes or hangs is listed as such and not loaded, the others load
# as before, and info exits 0. With --no-isolate the crash takes info down with it.
# opreg check and opreg gradcheck probe the same way: they run to their summary.
# Arguments: the opreg binary, the crashing and the hanging fixture plugin.
set -u
opreg=$1
crash=$2
hang=$3
fail() { echo "FAIL: $*"; printf '%s\n' "$out"; exit 1; }

out=$("$opreg" info --plugin "$crash" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "opreg info --plugin $crash exited $rc"
printf '%s\n' "$out" | grep -A2 'libfx_init_crash\.so$' | grep -q '^ *init crashed (SIGSEGV)' ||
    fail "no 'init crashed (SIGSEGV)' under $crash"
printf '%s\n' "$out" | grep -Eq '^  cpu +[^ ]+ +ABI [0-9.]+ +score [0-9]+ +loaded$' || fail "the cpu plugin is not loaded"
printf '%s\n' "$out" | grep -Eq '^  cpu +[0-9]+ ordinal' || fail "no cpu device"

out=$("$opreg" info --probe-timeout 1 --plugin "$hang" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "opreg info --probe-timeout 1 --plugin $hang exited $rc"
printf '%s\n' "$out" | grep -A2 'libfx_init_hang\.so$' | grep -q '^ *init timed out after 1 s' ||
    fail "no 'init timed out after 1 s' under $hang"
printf '%s\n' "$out" | grep -Eq '^  cpu +[^ ]+ +ABI [0-9.]+ +score [0-9]+ +loaded$' || fail "the cpu plugin is not loaded"

out=$("$opreg" info --probe-timeout x 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "a bad --probe-timeout exited $rc, not 2"

out=$("$opreg" check --backend cpu --ops add --plugin "$crash" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "opreg check --plugin $crash exited $rc"
printf '%s\n' "$out" | grep -q '^1 op(s) checked, 0 failure(s)$' || fail "opreg check did not run to its summary"
out=$("$opreg" gradcheck mm --plugin "$crash" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "opreg gradcheck --plugin $crash exited $rc"

out=$("$opreg" info --no-isolate --plugin "$crash" 2>&1)
rc=$?
[ "$rc" -ne 0 ] || fail "--no-isolate survived a crashing init"
echo "ok: crash and hang listed, cpu loaded; --no-isolate dies with the plugin (exit $rc)"
