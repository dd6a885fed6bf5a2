#!/bin/sh
# deps.sh - install the Debian packages relibra needs when they are missing.
# usage: deps.sh build|check|demo|fuzz
# Checks pkg-config modules and commands; installs with apt-get (sudo when
# not root); where apt-get does not exist, lists what is missing and fails.
set -eu
what=${1:-build}
missing=

need_pc() {	# pkg-config module, Debian package
	if ! pkg-config --exists "$1" 2>/dev/null; then
		missing="$missing $2"
	fi
}
need_cmd() {	# command, Debian package
	if ! command -v "$1" >/dev/null 2>&1; then
		missing="$missing $2"
	fi
}

need_cmd pkg-config pkg-config
need_cmd cc gcc
need_cmd make make
need_pc libzstd libzstd-dev
need_pc yaml-0.1 libyaml-dev
need_pc jansson libjansson-dev
need_pc ompi-c libopenmpi-dev
need_cmd mpirun openmpi-bin
case "$what" in
check)
	need_pc check check
	need_cmd zstd zstd
	need_cmd mandoc mandoc
	need_cmd xmllint libxml2-utils
	need_cmd python3 python3	# tests/*_ref.py, examples/plan_online.py
	# a comma-decimal locale made by tests/cli/api.sh
	[ -f /usr/share/i18n/locales/de_DE ] || missing="$missing locales"
	;;
demo)
	need_cmd zstd zstd
	;;
fuzz)
	need_cmd clang clang	# libFuzzer and the sanitizers come with it
	;;
esac

# pkg-config itself may be what is missing: then every module looked missing.
missing=$(printf '%s\n' $missing | sort -u | tr '\n' ' ')
[ -z "${missing% }" ] && exit 0

echo "relibra: missing packages: $missing" >&2
if ! command -v apt-get >/dev/null 2>&1; then
	echo "relibra: no apt-get here; install these (or their equivalents) and retry" >&2
	exit 1
fi
sudo=
if [ "$(id -u)" != 0 ]; then
	sudo=sudo
fi
echo "relibra: installing with apt-get: $missing" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >&2
