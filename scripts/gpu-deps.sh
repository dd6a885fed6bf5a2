#!/bin/sh
# gpu-deps.sh - fetch, on a machine with Debian's package registry, the
# packages that scripts/gpu-check.sh needs to build relibra on a GPU
# machine that has the CUDA toolkit but neither these libraries nor a
# network: pkg-config, zstd, libyaml, jansson and Check (with their
# runtime libraries), about 1 MB of .deb files.  gpu-check.sh unpacks them
# under its build directory (never into /) only when the machine lacks one
# of the libraries, and links with a run path to them.
#
# usage: sh scripts/gpu-deps.sh [DIR]     DIR default gpu-deps (git-ignored)
# Copy DIR to the GPU machine along with the working tree (a clone or
# git archive of the tree leaves it out).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$top/gpu-deps}
pkgs="pkgconf pkgconf-bin libpkgconf3 libzstd-dev libzstd1 libyaml-dev libyaml-0-2
libjansson-dev libjansson4 check libsubunit-dev libsubunit0"

if ! command -v apt-get >/dev/null 2>&1; then
	echo "gpu-deps: no apt-get here: fetch the Debian packages $pkgs by hand" >&2
	exit 1
fi
mkdir -p "$dir"
cd "$dir"
rm -f ./*.deb
# shellcheck disable=SC2086
apt-get download $pkgs
ls -l ./*.deb
echo "gpu-deps: $(ls ./*.deb | wc -l) packages in $dir"
