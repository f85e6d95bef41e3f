#!/bin/sh
# Downloads the Debian packages a GPU machine without network needs to build opreg
# (libyaml, jansson, OpenBLAS, SLEEF, Check, dlpack) and to run its collectives (OpenMPI with
# PMIx, hwloc and libevent) into deps/ (git-ignored), to be carried there and unpacked
# by scripts/gpu-check.sh. libc is left out: the unpacked libraries go on
# LD_LIBRARY_PATH, and the machine's own C library must stay the one in use.
set -eu
cd "$(dirname "$0")/.."
mkdir -p deps
cd deps
apt-get download libyaml-0-2 libyaml-dev libopenblas0 libopenblas0-pthread libopenblas-dev \
    libopenblas-pthread-dev check libsubunit0 libsubunit-dev libdlpack-dev libgomp1 libsleef3 libsleef-dev \
    libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7 \
    libevent-pthreads-2.1-7 libmunge2 libudev1 zlib1g libjansson4 libjansson-dev >/dev/null
ls -1 *.deb
