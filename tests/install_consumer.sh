#!/bin/sh
# Installs the build into a temporary prefix, builds examples/consumer against it with
# find_package(opreg) and pkg-config, and runs both with no OPREG_* variable and no
# LD_LIBRARY_PATH: the installed library finds its op definitions and plugins itself.
# The result must be [[19, 22], [43, 50]]. (install_moved.sh moves the prefix too.)
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/examples/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
out=$(env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH "$tmp/consumer/consumer")
echo "$out"
[ "$out" = "mm: [[19, 22], [43, 50]]" ]
# pkg-config sees the same installation; the consumer finds the library via its RUNPATH
libdir=$(dirname "$(find "$tmp/prefix" -name 'libopreg.so' | head -n 1)")
export PKG_CONFIG_PATH="$libdir/pkgconfig"
pkg-config --exists opreg
# shellcheck disable=SC2046 # word splitting of the flags is wanted
cc -o "$tmp/pc" "$src/examples/consumer/main.c" $(pkg-config --cflags --libs opreg) \
   -Wl,-rpath,"$(pkg-config --variable=libdir opreg)"
out=$(env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH "$tmp/pc")
[ "$out" = "mm: [[19, 22], [43, 50]]" ]
