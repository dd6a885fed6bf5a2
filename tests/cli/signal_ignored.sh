# signal_ignored.sh - a signal ignored when relibra starts (nohup, or
# SIGINT of a script's background job) stays ignored: the run goes on and
# renames its output; one that is not ignored still stops it and removes
# the unfinished PATH.tmp.
. "$RLB_TOP/tests/cli/lib.sh"

# start NAME: capture into NAME.rrt in the background with SIGHUP ignored,
# $pid its id once NAME.rrt.tmp exists.
start() {
	( trap '' HUP; exec "$RELIBRA" capture -c "$CONFIGS/tiny-2x2.yaml" --synthetic \
		--set workload.steps=200 -o "$1.rrt" > "$1.out" 2> "$1.err" ) &
	pid=$!
	i=0
	while [ ! -f "$1.rrt.tmp" ] && [ ! -f "$1.rrt" ] && [ $i -lt 200 ]; do
		sleep 0.02
		i=$((i + 1))
	done
	[ -f "$1.rrt" ] && skip "capture finished before the signal"
	[ -f "$1.rrt.tmp" ] || fail "no $1.rrt.tmp"
}

start hup
kill -HUP $pid
wait $pid
status=$?
[ $status -eq 0 ] || { cat hup.err; fail "SIGHUP under nohup ended capture (status $status)"; }
[ -f hup.rrt ] || fail "no hup.rrt"
[ ! -e hup.rrt.tmp ] || fail "hup.rrt.tmp left behind"

start term
kill -TERM $pid
wait $pid
status=$?
[ -f term.rrt ] && skip "capture finished before SIGTERM"
[ $status -eq 143 ] || { cat term.err; fail "SIGTERM: status $status, not 143"; }
[ ! -e term.rrt.tmp ] || fail "term.rrt.tmp left behind"
exit 0
