# lib.sh - helpers for the CLI tests (sourced).  Each test runs in its own
# scratch directory ($TEST_TMP) with $RELIBRA the binary and $RLB_TOP the
# source tree.

set -u
CONFIGS="$RLB_TOP/configs"
FIXTURES="$RLB_TOP/tests/fixtures"

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

skip() {
	echo "$*"
	exit 77
}

# run CMD...: runs relibra, capturing stdout in ./out, stderr in ./err and the status in $status.
run() {
	"$RELIBRA" "$@" > out 2> err
	status=$?
}

# expect_status N: the last run exited with N.
expect_status() {
	[ "$status" -eq "$1" ] || {
		echo "stdout:"; cat out; echo "stderr:"; cat err
		fail "expected exit status $1, got $status"
	}
}

# expect_err TEXT: stderr of the last run contains TEXT (fixed string).
expect_err() {
	grep -qF -- "$1" err || { echo "stderr:"; cat err; fail "stderr lacks '$1'"; }
}

# expect_out TEXT: stdout of the last run contains TEXT (fixed string).
expect_out() {
	grep -qF -- "$1" out || { echo "stdout:"; cat out; fail "stdout lacks '$1'"; }
}

# expect_empty FILE
expect_empty() {
	[ ! -s "$1" ] || { cat "$1"; fail "$1 is not empty"; }
}

# set_opts ARGS...: the "--set KEY=VALUE" pairs among ARGS, on one line.
set_opts() {
	prev=
	for a in "$@"; do
		case $prev in
		--set) printf ' %s %s' "$prev" "$a" ;;
		esac
		prev=$a
	done
}
