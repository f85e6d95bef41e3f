# shellcheck shell=sh
# Sourced by scripts/gpu-check.sh: unpacks deps/*.deb (made by scripts/fetch-gpu-deps.sh)
# into $deps (a prefix of its own, never /) and points the build and the run at it:
# pkg-config, the loader, CMake's prefix and, where OpenMPI was fetched, its wrapper
# compiler and mpirun, relocated to $deps. Returns 1 when there is nothing to unpack.
deps=${deps:-/tmp/deps}
mkdir -p "$deps"
for deb in deps/*.deb; do
    [ -e "$deb" ] || return 1
    dpkg -x "$deb" "$deps"
done
lib="$deps/usr/lib/x86_64-linux-gnu"
# Debian reaches OpenBLAS and OpenMPI's commands through alternatives symlinks, which
# dpkg -x does not make.
ln -sf openblas-pthread/libopenblas.so.0 "$lib/libopenblas.so.0"
export PKG_CONFIG_SYSROOT_DIR="$deps"
export PKG_CONFIG_PATH="$lib/pkgconfig:$deps/usr/share/pkgconfig"
export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}"
deps_cmake_args="-DCMAKE_PREFIX_PATH=$deps/usr"
if [ -x "$deps/usr/bin/mpicc.openmpi" ]; then
    ln -sf mpirun.openmpi "$deps/usr/bin/mpirun"
    # OpenMPI finds its components, help texts and orted under OPAL_PREFIX; PMIx (a
    # library of its own) takes its component path separately.
    export OPAL_PREFIX="$deps/usr"
    export PMIX_MCA_mca_base_component_path="$lib/pmix2/lib/pmix"
    export PATH="$PATH:$deps/usr/bin"
    deps_cmake_args="$deps_cmake_args -DMPI_C_COMPILER=$deps/usr/bin/mpicc.openmpi"
fi
return 0
