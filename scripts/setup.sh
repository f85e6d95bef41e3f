#!/bin/sh
# Installs the Debian packages opreg needs to build and test. Quick and silent when
# everything is present. Usage: scripts/setup.sh [bench|rocm|fuzz]
#   bench   also installs libtorch-dev (side-by-side benchmarks in C++)
#   rocm    also installs hipcc (Debian's HIP 5.2), so the ROCm plugin is compiled
#   fuzz    also installs clang and its OpenMP runtime (make fuzz: libFuzzer harnesses)
set -eu

# python3-torch is the outside oracle of the autograd tests (tests/oracle), and
# python3-torchvision of the ResNet example's (tests/test_resnet.c); OpenMPI
# carries the MPI plugin (process groups, collectives) and its tests under mpirun.
packages="gcc g++ make cmake ninja-build pkg-config libyaml-dev libopenblas-dev libopenblas0-openmp libsleef-dev check libsubunit-dev libdlpack-dev binutils valgrind python3 python3-torch python3-torchvision libopenmpi-dev openmpi-bin libdnnl-dev libjansson-dev"
case "${1:-}" in
bench) packages="$packages libtorch-dev" ;;
rocm) packages="$packages hipcc" ;;
fuzz) packages="$packages clang libomp-dev" ;;
esac

missing=""
for p in $packages; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$status" = installed ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "setup: installing${missing}" >&2
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "setup: need root (or sudo) to install:${missing}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only when an install fails on stale ones.
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1 ||
    { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q --no-install-recommends $missing >/dev/null; }
