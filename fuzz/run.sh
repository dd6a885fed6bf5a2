#!/bin/sh
# run.sh - fuzz each named target for SECONDS with libFuzzer, from its
# seeds (fuzz/seeds) and fuzz/corpus/NAME/.  New inputs go to
# build-fuzz/corpus/NAME/ (kept between runs); a failing input is saved as
# build-fuzz/crashes/NAME-* and ends the run with status 1.
# usage: run.sh FUZZ_BIN_DIR SECONDS NAME...
set -u
bindir=$1
seconds=$2
shift 2
work=$(dirname "$bindir")
# The targets write their inputs (and traces and plans written again) to
# files, each committed with fsync: on tmpfs that costs nothing.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
	TMPDIR=/dev/shm
	export TMPDIR
fi
status=0
for name in "$@"; do
	seeds=$(sed -n "s/^$name[[:space:]]*//p" fuzz/seeds)
	mkdir -p "$work/corpus/$name" "$work/crashes" "fuzz/corpus/$name"
	# shellcheck disable=SC2086
	for f in $seeds; do
		[ -f "$f" ] && cp "$f" "$work/corpus/$name/"
	done
	echo "== fuzz $name: $seconds s"
	"$bindir/$name" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
		-rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$work/crashes/$name-" \
		"$work/corpus/$name" "fuzz/corpus/$name" 2> "$work/$name.log"
	rc=$?
	grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::new_units_added)' "$work/$name.log"
	if [ $rc -ne 0 ]; then
		status=1
		echo "FAIL: $name (status $rc); the input: $(ls -t "$work/crashes/$name-"* 2>/dev/null | head -n 1)"
		grep -A 30 -m 1 -E 'ERROR|runtime error|==[0-9]+==' "$work/$name.log" | head -n 40
	fi
done
exit $status
