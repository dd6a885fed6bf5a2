#!/bin/sh
# regen.sh - rebuild the tiny example trace and its dumps.
# usage: sh trace_format/examples/regen.sh [BUILD_DIR [RELIBRA]]   (from the source tree's top)
# BUILD_DIR (default build) holds tests/check_relibra (`make check-run` or
# `make build/tests/check_relibra` builds it); RELIBRA defaults to
# BUILD_DIR/relibra where that exists (VARIANT builds), else ./relibra.
# tiny.rrt is written by the trace unit tests' example (tests/test_trace.c,
# test_example_file), so the shipped file is what the writer makes; tiny.hex
# is its hexdump and tiny.dump its decoded content.
set -eu
build=${1:-build}
bin=${2:-$build/relibra}
[ $# -ge 2 ] || [ -x "$bin" ] || bin=./relibra
dir=trace_format/examples
RLB_TRACE_EXAMPLE_OUT="$PWD/$dir/tiny.rrt" RLB_TEST_TMPDIR="${TMPDIR:-/tmp}" \
	RLB_TEST_SRCDIR=tests CK_RUN_SUITE=trace CK_RUN_CASE=format \
	"$build/tests/check_relibra" > /dev/null
xxd -g 1 "$dir/tiny.rrt" > "$dir/tiny.hex"
zstd -dc "$dir/tiny.rrt" | xxd -g 1 > "$dir/tiny.raw.hex"
"$bin" inspect --dump "$dir/tiny.rrt" > "$dir/tiny.dump.tmp"
mv "$dir/tiny.dump.tmp" "$dir/tiny.dump"
