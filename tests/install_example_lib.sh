# shellcheck shell=sh
# Sourced by install_plugin_template.sh and install_device_example.sh: a scratch
# directory ($tmp, removed on exit), fail, bare (a run with no OPREG_* variable and no
# LD_LIBRARY_PATH), and the steps both take with an installed example plugin.
tmp=$(cd "$(mktemp -d)" && pwd -P)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
bare() { env -u OPREG_PLUGIN_PATH -u OPREG_YAML_DIR -u LD_LIBRARY_PATH "$@"; }

# example_build SRC PREFIX LIBNAME YAML [CMAKE_ARG...]: builds a copy of the installed
# example SRC (as a user would) in $tmp/build against PREFIX; sets $plugin. It must not
# link libopreg.
example_build() {
    src=$1 prefix=$2 lib=$3 yaml=$4
    shift 4
    cp -R "$src" "$tmp/src"
    cmake -S "$tmp/src" -B "$tmp/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" "$@" >/dev/null ||
        fail "$src does not configure against the package in $prefix"
    cmake --build "$tmp/build" >"$tmp/build.out" 2>&1 || { cat "$tmp/build.out"; fail "$src does not build"; }
    plugin="$tmp/build/plugin/$lib"
    [ -f "$plugin" ] && [ -f "$tmp/build/plugin/$yaml" ] || fail "no $lib or $yaml in $tmp/build/plugin"
    if command -v readelf >/dev/null 2>&1; then
        readelf -d -W "$plugin" | grep -q 'NEEDED.*libopreg' && fail "$lib links libopreg"
    fi
    return 0
}

# example_loaded OPREG NAME [opreg info ARG...]: opreg info lists plugin NAME as loaded.
example_loaded() {
    opreg=$1 name=$2
    shift 2
    info=$(bare "$opreg" info "$@") || fail "opreg info $* failed"
    printf '%s\n' "$info" | grep -Eq "^  $name +0\\.1\\.0 +ABI 2\\.[0-9]+ +score 1 +loaded\$" ||
        fail "$name did not load (opreg info $*):
$info"
}

# example_installed OPREG NAME PREFIX LIBNAME: after `cmake --install` of the example's
# build, the installed opreg finds it next to the package's own plugins, no path given.
example_installed() {
    opreg=$1 name=$2 prefix=$3 lib=$4
    cmake --install "$tmp/build" >/dev/null || fail "$name does not install"
    example_loaded "$opreg" "$name"
    libdir=$(dirname "$(find "$prefix" -name 'libopreg.so' | head -n 1)")
    printf '%s\n' "$info" | grep -q "$libdir/opreg/plugins/$lib" ||
        fail "$name was not installed into $libdir/opreg/plugins:
$info"
}
