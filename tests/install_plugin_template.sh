#!/bin/sh
# The plugin template (share/opreg/plugin-template of an installation) builds against
# the installed package with find_package(opreg), links nothing of libopreg, loads
# with the installed CLI, computes its op forward and backward from a program built
# with pkg-config, and once installed with `cmake --install` is found by the installed
# opreg without any path given. No OPREG_* variable, no LD_LIBRARY_PATH.
#   install_plugin_template.sh BUILD_DIR
set -eu
build=$1
# shellcheck source=tests/install_example_lib.sh
. "$(dirname "$0")/install_example_lib.sh"

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
template="$tmp/prefix/share/opreg/plugin-template"
for f in CMakeLists.txt README.md template_plugin.c template_ops.yaml; do
    [ -f "$template/$f" ] || fail "$template/$f is not installed"
done
example_build "$template" "$tmp/prefix" libopreg_template.so template_ops.yaml
opreg="$tmp/prefix/bin/opreg"
example_loaded "$opreg" template --plugin "$plugin"

# forward and backward from C, through the plugin file
libdir=$(dirname "$(find "$tmp/prefix" -name 'libopreg.so' | head -n 1)")
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cat > "$tmp/use.c" <<'C'
#include <opreg/opreg.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    opr_ctx *ctx = opr_ctx_new(NULL);
    if (!ctx || argc < 2 || opr_plugin_load(ctx, argv[1])) { printf("load: %s\n", opr_last_error()); return 1; }
    double v[3] = {1, -2, 4}, y[3], g[3];
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){3}, v, OPR_CPU), *out = NULL;
    opr_set_requires_grad(x, true);
    opr_value args[2] = {opr_v_tensor(x), opr_v_double(3)};
    if (opr_call(opr_op_find(ctx, "template_scale"), args, 2, &out, 1)) { printf("call: %s\n", opr_last_error()); return 1; }
    opr_value sargs[1] = {opr_v_tensor(out)};
    opr_tensor *s = NULL;
    if (opr_call_by_name(ctx, "sum", sargs, 1, &s, 1) || opr_backward(s, NULL, NULL)) { printf("backward: %s\n", opr_last_error()); return 1; }
    opr_tensor_copy_to_host(out, y, sizeof y);
    opr_tensor_copy_to_host(opr_grad(x), g, sizeof g);
    printf("y: %g %g %g; grad: %g %g %g\n", y[0], y[1], y[2], g[0], g[1], g[2]);
    opr_tensor_release(s);
    opr_tensor_release(out);
    opr_tensor_release(x);
    return opr_ctx_free(ctx);
}
C
# shellcheck disable=SC2046 # word splitting of the flags is wanted
cc -o "$tmp/use" "$tmp/use.c" $(pkg-config --cflags --libs opreg) -Wl,-rpath,"$(pkg-config --variable=libdir opreg)"
out=$(bare "$tmp/use" "$plugin") || fail "the program using the template failed: $out"
echo "$out"
[ "$out" = "y: 3 -6 12; grad: 3 3 3" ] || fail "unexpected result: $out"

# installed next to the package's own plugins: found without --plugin
example_installed "$opreg" template "$tmp/prefix" libopreg_template.so
