# trace_kill.sh - relibra capture killed with SIGKILL mid-way leaves
# NAME.tmp whose complete frames read back; inspect says "truncated".
. "$RLB_TOP/tests/cli/lib.sh"

"$RELIBRA" capture -c "$CONFIGS/tiny-2x2.yaml" --synthetic \
	--set workload.steps=400 --set workload.prompts_per_step=32 \
	-o big.rrt > cap.out 2> cap.err &
pid=$!
# Wait until a few frames are on disk (one step is one frame here).
i=0
while [ $i -lt 600 ]; do
	if [ -f big.rrt.tmp ] && [ "$(wc -c < big.rrt.tmp)" -gt 200000 ]; then
		break
	fi
	sleep 0.05
	i=$((i + 1))
done
kill -9 $pid 2> /dev/null
wait $pid 2> /dev/null
[ -f big.rrt ] && skip "capture finished before it could be killed"
[ -f big.rrt.tmp ] || fail "no big.rrt.tmp after the kill"

run inspect big.rrt.tmp
expect_status 1
expect_out "seek table:     no"
expect_out "integrity:      truncated: complete frames end at byte "
expect_err "is truncated"
grep -q "^sequences:      [1-9]" out || { cat out; fail "no complete sequence read back"; }
# Every complete sequence decodes.
run inspect --dump big.rrt.tmp
expect_status 1
expect_err "is truncated"
grep -q "^sequence 0: step 0" out || fail "--dump shows no sequence"
exit 0
