# open_files.sh - outputs that wait to be renamed together each hold a
# file descriptor (their PATH.tmp's lock): relibra raises its soft limit
# of open files to the hard one, so a report of many groups writes its
# charts under a low soft limit, and fails cleanly under a low hard one.
. "$RLB_TOP/tests/cli/lib.sh"

cfg="$CONFIGS/tiny-2x2.yaml"
for s in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do
	run capture -c "$cfg" --synthetic --seed $s --set workload.steps=1 \
		--set workload.prompts_per_step=2 -o t$s.rrt
	expect_status 0
	run plan -c "$cfg" --summary s$s.json t$s.rrt
	expect_status 0
done
if ! (ulimit -Sn 24) 2> /dev/null; then
	echo "skip: cannot lower the soft limit of open files" >&2
	exit 77
fi
(ulimit -Sn 24 && exec "$RELIBRA" report --svg charts s*.json) > out 2> err
status=$?
expect_status 0
expect_err "relibra report: 32 charts written to charts/"
[ "$(ls charts | wc -l)" -eq 32 ] || fail "expected 32 charts: $(ls charts)"

# a hard limit too low for them: the error, and no chart
if (ulimit -Sn 16 && ulimit -Hn 16) 2> /dev/null; then
	(ulimit -Sn 16 && ulimit -Hn 16 && exec "$RELIBRA" report --svg few s*.json) > out 2> err
	status=$?
	expect_status 1
	expect_err "Too many open files"
	[ ! -e few ] || [ -z "$(ls few)" ] || fail "a failed --svg left charts: $(ls few)"
fi
exit 0
