#!/bin/sh
# An installation is self-contained: installed into one prefix and then moved to
# another, it finds its library, op definitions and plugins in the new place, with no
# OPREG_* variable and no LD_LIBRARY_PATH, and never reads from the build or source
# tree it was built from (even though that tree is still there); consumers built
# against the moved prefix with find_package(opreg) and with pkg-config run. The build
# tree's own CLI, for its part, still finds the build's plugins and the source YAML.
#   install_moved.sh BUILD_DIR SOURCE_DIR BUILD_TREE_CLI
set -eu
build=$1
src=$2
cli=$3
real_build=$(cd "$build" && pwd -P)
real_src=$(cd "$src" && pwd -P)
tmp=$(cd "$(mktemp -d)" && pwd -P) # resolved: the library reports resolved paths
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# Without anything that could point opreg or the dynamic loader elsewhere.
bare() { env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH "$@"; }
# The plugin files `opreg info` lists (each on its own line under the plugin's name).
plugin_files() { printf '%s\n' "$1" | grep -E '^ {11}/.*\.so$' | sed 's/^ *//'; }

# From the build tree: the build's plugin directory, and the source YAML.
info=$(bare "$cli" info) || fail "the build tree's opreg info failed"
plugin_files "$info" | grep -qx "$build/plugins/libopreg_cpu.so" ||
    fail "the build tree's CLI did not find $build/plugins/libopreg_cpu.so:
$info"

cmake --install "$build" --prefix "$tmp/a" >/dev/null
mv "$tmp/a" "$tmp/b"
p=$tmp/b
lib=$(find "$p" -name libopreg.so | head -n 1)
[ -n "$lib" ] || fail "no libopreg.so installed under $p"
libdir=$(dirname "$lib")
if grep -rlF "$tmp/a" "$p"; then fail "the files above hold the prefix they were installed to, $tmp/a"; fi

# opreg info: every plugin file from the moved prefix, the CPU plugin loaded.
info=$(bare "$p/bin/opreg" info) || fail "opreg info from the moved prefix failed"
echo "$info"
files=$(plugin_files "$info")
[ -n "$files" ] || fail "opreg info from the moved prefix found no plugin"
for f in $files; do
    case $f in "$libdir"/opreg/plugins/*) ;; *) fail "plugin $f is not the moved prefix's ($libdir/opreg/plugins)" ;; esac
done
printf '%s\n' "$info" | grep -Eq '^  cpu .* loaded$' || fail "the CPU plugin of the moved prefix did not load"
bare "$p/bin/opreg" check --backend cpu >"$tmp/check.out" || { cat "$tmp/check.out"; fail "opreg check failed"; }

# Without the moved prefix's op definitions it fails, naming where it looked, rather
# than reading the source tree's.
mv "$p/share/opreg/ops" "$tmp/ops.away"
if err=$(bare "$p/bin/opreg" info 2>&1); then fail "opreg info ran without the prefix's op definitions"; fi
echo "$err"
case $err in *"'$p/share/opreg/ops'"*) ;; *) fail "the error does not name $p/share/opreg/ops" ;; esac
case $err in *"$build"* | *"$real_build"* | *"$src"* | *"$real_src"*) fail "the error names the build or source tree" ;; esac
mv "$tmp/ops.away" "$p/share/opreg/ops"

# Without its plugins, none is found: the build's are not taken instead.
mv "$libdir/opreg/plugins" "$tmp/plugins.away"
info=$(bare "$p/bin/opreg" info) || fail "opreg info without plugins failed"
files=$(plugin_files "$info")
[ -z "$files" ] || fail "plugins found although the moved prefix has none: $files"
mv "$tmp/plugins.away" "$libdir/opreg/plugins"

# Consumers built against the moved prefix.
expect="mm: [[19, 22], [43, 50]]"
cmake -S "$src/examples/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$p" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
out=$(bare "$tmp/consumer/consumer") || fail "the find_package consumer failed: $out"
[ "$out" = "$expect" ] || fail "the find_package consumer printed '$out'"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
plugindir=$(pkg-config --variable=plugindir opreg)
[ "$(cd "$plugindir" && pwd -P)" = "$libdir/opreg/plugins" ] || fail "pkg-config plugindir is $plugindir"
pc_libdir=$(pkg-config --variable=libdir opreg)
# shellcheck disable=SC2046 # word splitting of the flags is wanted
cc -o "$tmp/pc" "$src/examples/consumer/main.c" $(pkg-config --cflags --libs opreg) -Wl,-rpath,"$pc_libdir"
out=$(bare "$tmp/pc") || fail "the pkg-config consumer failed: $out"
[ "$out" = "$expect" ] || fail "the pkg-config consumer printed '$out'"
find "$p" -type f \( -name 'lib*.so*' -o -path '*/bin/*' \) | while read -r f; do
    rpath=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
    case $rpath in *"$build"* | *"$real_build"*) fail "$f has a RUNPATH into the build tree: $rpath" ;; esac
done
echo "moved prefix $p: self-contained"
