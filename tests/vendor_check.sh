#!/bin/sh
# The out-of-tree vendor test: installs the build into a temporary prefix, builds the
# plugin of tests/vendor against it (find_package(opreg), installed headers only) once
# per variant, and runs the installed `opreg check -v --backend vdev` on each. The correct
# build must pass; each deliberately broken one must fail, the run must still end with
# its summary, and the output must name the culprit: the lines below, one assertion each,
# say what each variant's output must (or, with a leading !, must not) contain, as grep
# -E patterns, matched against stdout and stderr together. The JUnit file of every run
# must parse as JUnit XML (tests/junit_check.py).
#
# Every run reads opreg's output through a pipe, as a CI does, and must end within
# the time limit below: a process a kernel left behind must neither keep the pipe open
# nor the run alive. The hostile variant runs with --format json, whose stdout must
# parse as JSON whatever its kernels print.
#
# VENDOR_CHECK_ONLY="v1 v2" runs those variants alone (while working on one).
#
# A variant is added with one #ifdef VENDOR_<NAME> in vendor/vendor_plugin.c (or a
# vendor/vendor_ops_<name>.yaml) and its lines here.
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expectations='
ok              ^vfma +pass
ok              ^exp +pass
ok              ^mm +pass
ok              ^relu +pass
ok              ^swish +pass
ok              op\(s\) checked, 0 failure\(s\)(,|$)
ok              n/i mul on vdev: dtypes i64, f16, bf16, i32 candidates .*\[other\]
ok              !^  (FAIL|CRASHED|TIMED OUT|UNSUPPORTED|STRICT)
ok              NOT CHECKED swish on vdev: swish sample 0 f32 forward: the CPU reference could not run the sample: swish: no kernel for device cpu: no loaded plugin registers swish there \(register a kernel for .cpu. too, or give the op a reference: expression, and its forward is compared\)$
ok              !is its plugin loaded
ok              , 2 not checked \(allowed\)$
wrong_forward   ^mul +FAIL
wrong_forward   FAIL mul on vdev: mul sample 0 f32 forward: culprit: forward kernel mul: output 0 element
wrong_forward   ^mul\.Scalar +dep mul
wrong_forward   mul\.Scalar on vdev: depends on failing mul$
wrong_forward   exp on vdev: depends on failing mul$
wrong_forward   vfma on vdev: depends on failing mul$
wrong_forward   swish on vdev: depends on failing mul$
wrong_forward   !FAIL (exp|vfma|add|swish) on vdev
wrong_forward   ^  \.\.\. [0-9]+ more for mul on vdev \(every record: --format json\)$
wrong_formula   ^vfma +FAIL
wrong_formula   FAIL vfma on vdev: .*culprit: derivative formula vfma: .*formula \[other\] is wrong .*on the CPU in f64 too
wrong_formula   !FAIL (mul|exp|add) on vdev
wrong_formula   !culprit: fused backward kernel
wrong_fused     ^vfma +FAIL
wrong_fused     FAIL vfma on vdev: .*culprit: fused backward kernel vfma_backward: .*kernel vfma_backward is wrong on vdev
wrong_fused     !culprit: derivative formula
wrong_fused     FAIL vfma sample 0 f32 backward \[plan chosen by cost\]: fused backward kernel vfma_backward: .*\[plan chosen by cost, which ran \[self, other \(kernel vfma_backward\)\]\]
wrong_fused     !FAIL (mul|exp|add) on vdev
override_no_flag  note  mul \(cpu, f32\): plugin cpu runs it; plugin vendor.s is not used
override_no_flag  op\(s\) checked, 0 failure\(s\)(,|$)
override_no_flag  !^  FAIL|FAIL [0-9]
crash_forward   ^mul +CRASHED
crash_forward   CRASHED add on vdev: crashed \(SIGSEGV\) in kernel mul on vdev \(plugin vendor\), during add backward
crash_forward   CRASHED mul on vdev: crashed \(SIGSEGV\) in mul forward, sample 0, f32
crash_forward   ^vfma +
crash_forward   ^swish +
crash_forward   op\(s\) checked, [1-9][0-9]* failure\(s\)
crash_fused     ^vfma +CRASHED
crash_fused     CRASHED vfma on vdev: crashed \(SIGSEGV\) in kernel vfma_backward on vdev \(plugin vendor\), during vfma backward \[self, other \(kernel vfma_backward\)\], sample 0, f32
crash_fused     ^mul +pass
crash_fused     op\(s\) checked, 1 failure\(s\)
hang            ^relu +TIMED OUT
hang            TIMED OUT relu on vdev: timed out after 3 s in relu forward, sample 0, f32
hang            ^mm +pass
hang            op\(s\) checked, 1 failure\(s\)
overrun         ^relu +FAIL
overrun         FAIL relu on vdev: .*relu on vdev.* wrote 1 element past its output
overrun         ^mul +pass
overrun         ^exp +CRASHED
overrun         CRASHED exp on vdev: crashed \(SIGSEGV\) writing 400 bytes past the end of an output \(guard page\) in exp forward, sample 0, f32
strided_only    ^mul +FAIL
strided_only    FAIL mul on vdev: mul sample 0 \[(transposed|step-2 slice|offset|stride-0) (self|other)\] f32 forward
strided_only    !FAIL mul on vdev: mul sample [0-9]+ f(32|64) forward
strided_only    FAIL mul on vdev: mul sample 0 \[transposed self\] f32 forward: .* \(arguments: self \[3, 4\] f32 vdev:0 strides \[1, 3\] offset 0; other \[3, 4\] f32 vdev:0 strides \[4, 1\] offset 0\)$
strided_only    ^  rerun it alone: opreg check --backend vdev --ops .mul. --sample 0 --variant .transposed self. --dtype f32 --no-backward$
size_only       ^mm +FAIL
size_only       FAIL mm on vdev: mm sample [0-9]+ \[large\] f32 forward: culprit: forward kernel mm: output 0 element
size_only       !FAIL mm on vdev: mm sample [0-9]+ f(32|64) forward
unsupported     ^mul +pass [0-9]+ .*\+unsup
unsupported     UNSUPPORTED mul on vdev: mul sample 0 f64 forward: unsupported at run time: .*vdev mul: this firmware takes no f64 tensors
unsupported     [0-9]+ unsupported at run time(,|$)
unsupported     ^mm +pass [0-9]+ .*\+declined
unsupported     declined mm on vdev: [0-9]+ call\(s\) its kernels. supports declined, the first: mm sample 0 \[transposed self\] f32 forward: mm \(vdev, plugin vendor\) supports: vdev mm: self must be row-major \(its strides are 1, [0-9]+\)
unsupported     declined mm sample 0 f32 backward \[mat2\]: .*supports: vdev mm: self must be row-major
unsupported     [0-9]+ declined by supports(,|$)
unsupported     !UNSUPPORTED mm|unsupported mm
strict          ^vfma +pass
strict          STRICT plugin vendor skipped 1 kernel\(s\) for ops the registry does not define: reluu
strict          STRICT kernel vfma on vdev \(plugin vendor\) in i64: no comparison ran it \(the op.s schema does not list the dtype\)
strict          NOT CHECKED swish on vdev
strict          , 2 not checked, 2 --strict finding\(s\)$
swish_formula   ^swish +FAIL
swish_formula   FAIL swish on vdev: .*culprit: derivative formula swish
swish_formula   !FAIL (mul|exp|add|vfma) on vdev
swish_f32       ^swish +pass
swish_f32       note swish on vdev: gradients against finite differences in f32 on the backend .*atol 1e-3, rtol 1e-2
swish_f32       op\(s\) checked, 0 failure\(s\)(,|$)
swish_f32_formula  ^swish +FAIL
swish_f32_formula  FAIL swish on vdev: .*culprit: derivative formula swish
remainder       ^relu +FAIL
remainder       FAIL relu on vdev: relu sample 0 \[odd size 13, step-2 slice self\] f32 forward: culprit: forward kernel relu
remainder       !FAIL relu sample 0 (\[(transposed|step-2 slice|offset|stride-0) self\] )?f(32|64) forward
reference       FAIL swish on vdev: swish sample 0 f64 forward: culprit: forward kernel swish: output 0 element
reference       !FAIL swish sample 0 f32 forward
reference       !culprit: derivative formula|NOT CHECKED swish
reference       FAIL swish sample 0 \[transposed self\] f64 forward
ordinals        ^op +vdev:1 *$
ordinals        ^mul +pass
ordinals        op\(s\) checked, 0 failure\(s\)(,|$)
extends         ^mul +pass
extends         op\(s\) checked, 0 failure\(s\)(,|$)
extends         !^  (FAIL|CRASHED|TIMED OUT|UNSUPPORTED|STRICT)
extends_wrong   ^mul +FAIL
extends_wrong   FAIL mul on vdev: .*culprit: fused backward kernel vdev_mul_backward
extends_wrong   !culprit: derivative formula
hostile         "op": "relu", "backend": "vdev", .*"verdict": "timed out".*timed out after 3 s in relu forward, sample 0, f32
hostile         "op": "exp", "backend": "vdev", .*"verdict": "pass"
hostile         "op": "mm", "backend": "vdev", .*"verdict": "pass"
hostile         ^vdev exp: a kernel writing to stdout$
hostile         ^vdev exp: a kernel writing to stderr$
'

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
opreg="$tmp/prefix/bin/opreg"
status=0
for variant in $(printf '%s\n' "$expectations" | awk 'NF { print $1 }' | uniq); do
    case " ${VENDOR_CHECK_ONLY:-$variant} " in *" $variant "*) ;; *) continue ;; esac
    cmake -S "$src/tests/vendor" -B "$tmp/$variant" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
        -DVENDOR_VARIANT="$variant" >/dev/null
    cmake --build "$tmp/$variant" >/dev/null
    # swish has no CPU kernel: its forward is NOT CHECKED (that fails the run unless
    # allowed); every variant but strict allows it and is --strict, the strict one is not
    # allowed it
    extra="--strict --allow-unchecked"
    case $variant in
    hang) extra="$extra --timeout 3" ;;
    hostile) extra="$extra --timeout 3 --format json" ;;
    strict) extra="--strict" ;;
    ordinals) extra="$extra --backend vdev:1" ;; # the last --backend counts
    esac
    started=$(date +%s)
    # shellcheck disable=SC2086 # $extra is a list of options
    { rc=0; env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH timeout 240 \
        "$opreg" check -v --backend vdev --plugin "$tmp/$variant/libvendor.so" --junit "$tmp/$variant.xml" $extra \
        2>"$tmp/$variant.err" || rc=$?; echo $rc >"$tmp/$variant.rc"; } | cat >"$tmp/$variant.stdout"
    took=$(($(date +%s) - started))
    rc=$(cat "$tmp/$variant.rc")
    cat "$tmp/$variant.stdout" "$tmp/$variant.err" >"$tmp/$variant.out"
    echo "=== variant $variant: opreg check exited $rc after ${took} s"
    cat "$tmp/$variant.out"
    if [ "$took" -ge 100 ]; then
        echo "FAIL variant $variant: the run took $took s (a kernel's background process kept it alive?)"
        status=1
    fi
    want=1
    case $variant in ok | override_no_flag | swish_f32 | ordinals | extends) want=0 ;; esac
    if [ "$rc" != "$want" ]; then
        echo "FAIL variant $variant: opreg check exited $rc, expected $want"
        status=1
    fi
    if [ "$variant" = hostile ]; then
        if ! python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/$variant.stdout"; then
            echo "FAIL variant $variant: stdout is not one JSON document"
            status=1
        fi
    elif ! grep -Eq "^[0-9]+ op\(s\) checked" "$tmp/$variant.out"; then
        echo "FAIL variant $variant: the run did not end with its summary"
        status=1
    fi
    if ! python3 "$src/tests/junit_check.py" "$tmp/$variant.xml" "$want"; then
        echo "FAIL variant $variant: $tmp/$variant.xml is not the JUnit XML expected"
        status=1
    fi
    if [ "$variant" = ok ]; then # --perf times every backward candidate too
        env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH "$opreg" check --backend vdev --ops vfma --perf \
            --format json --plugin "$tmp/$variant/libvendor.so" >"$tmp/perf.json" 2>/dev/null || true
        if ! python3 -c '
import json, sys
perf = json.load(open(sys.argv[1]))["perf"]
got = {p["candidate"] for p in perf if p["ns"] and p["cpu_ns"]}
want = {None, "self", "other", "self, other (kernel vfma_backward)", "plan chosen by cost"}
sys.exit(0 if want <= got else "perf candidates: %s" % sorted(map(str, got)))' "$tmp/perf.json"; then
            echo "FAIL variant $variant: --perf does not time every backward candidate of vfma"
            status=1
        fi
    fi
    if [ "$variant" = strided_only ]; then # the note's rerun options run that record alone
        rerun=$(sed -n "s/^  rerun it alone: opreg check //p" "$tmp/$variant.out" | head -n 1)
        out=$(eval "env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH \"\$opreg\" check $rerun \
            --plugin \"\$tmp/\$variant/libvendor.so\"" 2>&1) || true
        if ! printf '%s\n' "$out" | grep -Eq "^mul +FAIL 1/1 *$"; then
            echo "FAIL variant $variant: 'opreg check $rerun' did not rerun the one failure:"
            printf '%s\n' "$out"
            status=1
        fi
    fi
    if [ "$variant" = ordinals ]; then # --ordinals all: a column per ordinal, and a rerun keeps each record's
        env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH "$opreg" check --backend vdev --ordinals all \
            --ops mul --format json --plugin "$tmp/$variant/libvendor.so" >"$tmp/ordinals.json" 2>/dev/null || true
        env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH "$opreg" check --rerun-failed "$tmp/ordinals.json" \
            --format json --plugin "$tmp/$variant/libvendor.so" >"$tmp/ordinals_rerun.json" 2>/dev/null || true
        if ! python3 -c '
import json, sys
report, rerun = (json.load(open(p)) for p in sys.argv[1:3])
if report["backends"] != ["vdev", "vdev:1"]: sys.exit("backends %s" % report["backends"])
verdicts = {o: {r["verdict"] for r in report["records"] if r["ordinal"] == o and r["phase"] == "forward"} for o in (0, 1)}
# mul is wrong on ordinal 0 only (vendor_plugin.c)
if "fail" not in verdicts[0] or "fail" in verdicts[1] or "pass" not in verdicts[1]: sys.exit("verdicts %s" % verdicts)
if report["summary"]["exit_status"] != 1: sys.exit("exit status %s" % report["summary"]["exit_status"])
if rerun["backends"] != ["vdev"] or {r["ordinal"] for r in rerun["records"]} != {0}:
    sys.exit("rerun: backends %s, ordinals %s" % (rerun["backends"], {r["ordinal"] for r in rerun["records"]}))
' "$tmp/ordinals.json" "$tmp/ordinals_rerun.json"; then
            echo "FAIL variant $variant: --ordinals all did not check (and rerun) each ordinal of vdev"
            status=1
        fi
        rc=0
        env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH "$opreg" check --backend vdev:1 --ordinals all \
            --plugin "$tmp/$variant/libvendor.so" >/dev/null 2>&1 || rc=$?
        if [ "$rc" != 2 ]; then
            echo "FAIL variant $variant: --backend vdev:1 --ordinals all exited $rc, expected 2 (bad usage)"
            status=1
        fi
    fi
    if [ "$variant" = extends ]; then # the candidate the plugin's extension adds to the built-in mul is checked
        env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH "$opreg" check --backend vdev --ops mul \
            --format json --plugin "$tmp/$variant/libvendor.so" >"$tmp/extends.json" 2>/dev/null || true
        if ! python3 -c '
import json, sys
recs = json.load(open(sys.argv[1]))["records"]
mine = [r for r in recs if r["candidate"] == "self, other (kernel vdev_mul_backward)" and r["phase"] == "backward"]
# n/i: the dtypes vdev has no kernel for (f16, bf16)
if not any(r["verdict"] == "pass" for r in mine) or any(r["verdict"] not in ("pass", "n/i") for r in mine):
    sys.exit("vdev_mul_backward: %s" % [(r["sample"], r["dtype"], r["variant"], r["verdict"]) for r in mine])
' "$tmp/extends.json"; then
            echo "FAIL variant $variant: opreg check did not check (and pass) the fused kernel the plugin added to mul"
            status=1
        fi
    fi
    if [ "$variant" = strided_only ]; then # --rerun-failed reruns exactly the failed records of a JSON report
        env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH "$opreg" check --backend vdev --ops 'mul,exp' \
            --format json --plugin "$tmp/$variant/libvendor.so" >"$tmp/report.json" 2>/dev/null || true
        rc=0
        env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH "$opreg" check --rerun-failed "$tmp/report.json" \
            --format json --plugin "$tmp/$variant/libvendor.so" >"$tmp/rerun.json" 2>/dev/null || rc=$?
        if ! python3 -c '
import json, sys
key = lambda r: (r["op"], r["backend"], r["dtype"], r["sample"], r["variant"], r["phase"], r["candidate"])
report, rerun = (json.load(open(p))["records"] for p in sys.argv[1:3])
failed = [key(r) for r in report if r["verdict"] in ("fail", "unsupported", "crashed", "timed out")]
got = [key(r) for r in rerun]
if not failed or any(r["op"] != "mul" for r in report if key(r) in failed):
    sys.exit("the report should fail on mul alone: %s" % failed)
if sorted(got) != sorted(failed):
    sys.exit("the rerun ran %s, the report failed %s" % (got, failed))
if any(r["verdict"] != "fail" for r in rerun):
    sys.exit("the rerun did not reproduce every failure: %s" % [(key(r), r["verdict"]) for r in rerun])
' "$tmp/report.json" "$tmp/rerun.json" || [ "$rc" != 1 ]; then
            echo "FAIL variant $variant: opreg check --rerun-failed did not rerun exactly the failed records (exit $rc)"
            status=1
        fi
    fi
    printf '%s\n' "$expectations" | awk -v v="$variant" '$1 == v { sub(/^[^ ]+ +/, ""); print }' >"$tmp/patterns"
    while IFS= read -r pattern; do
        case $pattern in
        !*) if grep -Eq -- "${pattern#!}" "$tmp/$variant.out"; then
                echo "FAIL variant $variant: the output contains '${pattern#!}'"
                status=1
            fi ;;
        *) if ! grep -Eq -- "$pattern" "$tmp/$variant.out"; then
                echo "FAIL variant $variant: the output lacks '$pattern'"
                status=1
            fi ;;
        esac
    done <"$tmp/patterns"
done
exit $status
