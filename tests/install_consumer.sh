#!/bin/sh
# Installs the build into a temporary prefix, builds examples/consumer against it with
# find_package(opreg) and pkg-config, and runs it: the result must be [[19, 22], [43, 50]].
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The library bakes its install paths in at configure time, so install into a
# staging root (DESTDIR) and point the consumer at the plugin and YAML dirs there.
DESTDIR="$tmp/root" cmake --install "$build" >/dev/null
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
root="$tmp/root$prefix"
cmake -S "$src/examples/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$root" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
libdir=$(dirname "$(find "$root" -name 'libopreg.so' | head -n 1)")
out=$(env -u OPREG_PLUGIN_PATH LD_LIBRARY_PATH="$libdir" OPREG_PLUGIN_PATH="$libdir/opreg/plugins" \
      OPREG_YAML_DIR="$root/share/opreg/ops" "$tmp/consumer/consumer")
echo "$out"
[ "$out" = "mm: [[19, 22], [43, 50]]" ]
# pkg-config sees the same installation
PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --exists opreg
cc -o "$tmp/pc" "$src/examples/consumer/main.c" $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs opreg | sed "s#$prefix#$root#g")
LD_LIBRARY_PATH="$libdir" OPREG_PLUGIN_PATH="$libdir/opreg/plugins" OPREG_YAML_DIR="$root/share/opreg/ops" "$tmp/pc" >/dev/null
