#!/bin/sh
# tiny-plan.sh - rebuild the tiny example plan and its dumps.
# usage: sh trace_format/examples/tiny-plan.sh [BUILD_DIR]   (from the source tree's top)
# BUILD_DIR (default build) holds tests/check_relibra (`make check-run` or
# `make build/tests/check_relibra` builds it).
# tiny-plan.rlp is written by the plan unit tests' example (tests/test_plan.c,
# test_example_file), so the shipped file is what the writer makes;
# tiny-plan.hex is its hexdump, tiny-plan.raw.hex the decompressed step
# frames and tiny-plan.dump its decoded content (rlb_plan_write_text).
set -eu
build=${1:-build}
dir=trace_format/examples
RLB_PLAN_EXAMPLE_OUT="$PWD/$dir/tiny-plan.rlp" RLB_TEST_TMPDIR="${TMPDIR:-/tmp}" \
	RLB_TEST_SRCDIR=tests CK_RUN_SUITE=plan CK_RUN_CASE=example \
	"$build/tests/check_relibra" > /dev/null
xxd -g 1 "$dir/tiny-plan.rlp" > "$dir/tiny-plan.hex"
zstd -dc "$dir/tiny-plan.rlp" | xxd -g 1 > "$dir/tiny-plan.raw.hex"
