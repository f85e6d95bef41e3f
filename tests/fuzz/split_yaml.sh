#!/bin/sh
# Splits op definition files into one file per entry (fuzz seeds).
# Usage: split_yaml.sh OUTDIR FILE.yaml...
set -eu
out=$1
shift
rm -rf "$out"
mkdir -p "$out"
for f in "$@"; do
    base=$(basename "$f" .yaml)
    # an entry runs from its "- name:" line to the next one; comments between are dropped
    awk -v out="$out" -v base="$base" '
        /^- name:/ { n++; file = sprintf("%s/%s_%03d.yaml", out, base, n) }
        n && !/^#/ { print > file }
    ' "$f"
done
