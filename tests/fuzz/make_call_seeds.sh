#!/bin/sh
# Writes seed inputs for fuzz_op_call: for op index i (0 .. COUNT-1), the op alone
# (0-d tensors, the schema's kinds) and the op on small 2-d f32 and 1-d f64 tensors
# that require grad, with the plan explained and backward run (see the decoder in
# fuzz_op_call.c). Usage: make_call_seeds.sh OUTDIR COUNT
set -eu
out=$1
count=$2
rm -rf "$out"
mkdir -p "$out"
oct() { printf '\\%03o' "$1"; }
i=0
while [ "$i" -lt "$count" ]; do
    op="$(oct $((i % 256)))$(oct $((i / 256)))"
    # op, nargs (0: all), mode (explain + backward), then per argument: kind (0: the
    # schema's), tensor flags (4: requires grad), dtype, ndim, sizes, fill seed
    a2="\\000\\004\\000\\002\\002\\003\\007"
    a1="\\000\\004\\001\\001\\003\\011"
    # shellcheck disable=SC2059
    printf "$op" >"$out/op_${i}_plain"
    # shellcheck disable=SC2059
    printf "$op\\000\\012$a2$a2$a2$a2$a2$a2\\000" >"$out/op_${i}_2d"
    # shellcheck disable=SC2059
    printf "$op\\000\\012$a1$a1$a1$a1$a1$a1\\000" >"$out/op_${i}_1d"
    i=$((i + 1))
done
