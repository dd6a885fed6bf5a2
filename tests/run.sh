#!/bin/sh
# run.sh - run every test: the Check unit runner, then each CLI test script.
# usage: run.sh UNIT_RUNNER RELIBRA_BINARY
# A CLI test is tests/cli/NAME.sh: exit 0 passes, 77 skips (with a message),
# anything else fails.  RLB_VALGRIND=1 runs the unit runner under valgrind.
# Ends with "N passed, N failed, N skipped".
set -u
runner=$1
bin=$2
top=$(pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/relibra-tests.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
export RLB_TEST_SRCDIR="$top/tests" RLB_TEST_TMPDIR="$tmp"
export RELIBRA="$top/${bin#./}" RLB_TOP="$top"
# The build directory (the fuzz targets are there).
RLB_BUILD="$top/$(dirname "$(dirname "$runner")")"
export RLB_BUILD
# MPI tests run as root in CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

passed=0 failed=0 skipped=0

echo "== unit tests"
if [ "${RLB_VALGRIND:-0}" = 1 ]; then
	CK_FORK=no valgrind -q --error-exitcode=99 --leak-check=full \
		--errors-for-leak-kinds=definite "$runner" > "$tmp/unit.log" 2>&1
else
	"$runner" > "$tmp/unit.log" 2>&1
fi
rc=$?
cat "$tmp/unit.log"
line=$(grep '^unit: ' "$tmp/unit.log" | tail -n 1)
if [ -n "$line" ]; then
	run=$(echo "$line" | sed 's/unit: \([0-9]*\) run, \([0-9]*\) failed/\1/')
	bad=$(echo "$line" | sed 's/unit: \([0-9]*\) run, \([0-9]*\) failed/\2/')
	passed=$((passed + run - bad))
	failed=$((failed + bad))
fi
if [ $rc -ne 0 ] && { [ -z "$line" ] || [ "$bad" = 0 ]; }; then
	echo "unit runner exited with status $rc"
	failed=$((failed + 1))
fi

echo "== CLI tests"
for t in "$top"/tests/cli/*.sh; do
	[ -f "$t" ] || continue
	name=$(basename "$t" .sh)
	[ "$name" = lib ] && continue
	if [ -n "${RLB_TEST_ONLY:-}" ] && [ "$name" != "$RLB_TEST_ONLY" ]; then
		continue
	fi
	mkdir -p "$tmp/cli-$name"
	( cd "$tmp/cli-$name" && TEST_TMP="$tmp/cli-$name" sh "$t" ) > "$tmp/cli-$name.log" 2>&1
	rc=$?
	case $rc in
	0) passed=$((passed + 1)); echo "PASS: $name" ;;
	77) skipped=$((skipped + 1)); echo "SKIP: $name: $(tail -n 1 "$tmp/cli-$name.log")" ;;
	*) failed=$((failed + 1)); echo "FAIL: $name (status $rc)"; sed 's/^/    /' "$tmp/cli-$name.log" | tail -n 40 ;;
	esac
done

echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
