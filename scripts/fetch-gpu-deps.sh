#!/bin/sh
# Downloads the Debian packages a GPU machine without network needs to build opreg
# (libyaml, OpenBLAS, SLEEF, Check, dlpack) into deps/ (git-ignored), to be carried there
# and unpacked by scripts/gpu-check.sh.
set -eu
cd "$(dirname "$0")/.."
mkdir -p deps
cd deps
apt-get download libyaml-0-2 libyaml-dev libopenblas0 libopenblas0-pthread libopenblas-dev \
    libopenblas-pthread-dev check libsubunit0 libsubunit-dev libdlpack-dev libgomp1 libsleef3 libsleef-dev >/dev/null
ls -1 *.deb
