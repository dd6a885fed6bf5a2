# trace_zstd.sh - a trace is one valid zstd stream: `zstd -t` passes and
# `zstd -dc` yields exactly the data frames' raw bytes, whose sizes the
# seek table at the end lists (its layout: trace_format/SPEC.md).
. "$RLB_TOP/tests/cli/lib.sh"

command -v zstd > /dev/null 2>&1 || skip "zstd is not installed"
command -v od > /dev/null 2>&1 || skip "od is not installed"

# u32 at byte offset $2 of file $1 (little-endian).
u32() {
	od -An -tu4 --endian=little -j "$2" -N 4 "$1" | tr -d ' '
}

# check TRACE: zstd -t, and zstd -dc length against the seek table.
check() {
	zstd -q -t "$1" || fail "zstd -t $1 fails"
	size=$(wc -c < "$1")
	[ "$(u32 "$1" $((size - 4)))" -eq 2408770225 ] || fail "$1 does not end with the seekable magic"
	n=$(u32 "$1" $((size - 9)))
	start=$((size - 9 - 8 * n))
	sum=0 i=0 comp=0
	while [ $i -lt "$n" ]; do
		comp=$((comp + $(u32 "$1" $((start + 8 * i)))))
		sum=$((sum + $(u32 "$1" $((start + 8 * i + 4)))))
		i=$((i + 1))
	done
	# The entries cover every frame before the seek table.
	[ "$comp" -eq $((start - 8)) ] || fail "$1: seek table covers $comp bytes, expected $((start - 8))"
	got=$(zstd -dc "$1" | wc -c)
	[ "$got" -eq "$sum" ] || fail "$1: zstd -dc gives $got bytes, the seek table says $sum"
	[ "$sum" -gt 0 ] || fail "$1: no raw bytes"
}

check "$RLB_TOP/trace_format/examples/tiny.rrt"

# Traces written by relibra capture, ordered and sorted.
run capture -c "$CONFIGS/tiny-2x2.yaml" --synthetic --set workload.steps=2 -o syn.rrt
expect_status 0
check syn.rrt
run capture -c "$CONFIGS/tiny-2x2.yaml" --synthetic --set workload.steps=2 --sorted -o sorted.rrt
expect_status 0
check sorted.rrt
run inspect sorted.rrt
expect_status 0
expect_out "flags:          0x00000002 (sorted ids, no gates)"
expect_out "ids:            u8, delta-coded"
exit 0
