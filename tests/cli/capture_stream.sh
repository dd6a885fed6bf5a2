# capture_stream.sh - relibra capture reading standard input as a rollout
# writes it: records arrive slowly, are handled as they come, and closing
# stdin (also tail -f --pid when the rollout ends) completes the trace.
. "$RLB_TOP/tests/cli/lib.sh"

F="$FIXTURES/import"
tiny="$CONFIGS/tiny-2x2.yaml"

# slowly FILE: FILE's lines with pauses between them.
slowly() {
	while IFS= read -r line; do
		printf '%s\n' "$line"
		sleep 0.2
	done < "$1"
}

slowly "$F/sglang.jsonl" | "$RELIBRA" capture -c "$tiny" -o sg.rrt --from sglang - > out 2> err
status=$?
expect_status 0
expect_out "sg.rrt: 2 steps, 4 sequences, 21 tokens, "
expect_empty err
[ ! -e sg.rrt.tmp ] || fail "sg.rrt.tmp was left behind"
# Same trace as from the file.
"$RELIBRA" capture -c "$tiny" -o sg-file.rrt --from sglang "$F/sglang.jsonl" > /dev/null ||
	fail "capture from the file fails"
cmp -s sg.rrt sg-file.rrt || fail "stdin and file captures differ"

slowly "$F/megatron.jsonl" | "$RELIBRA" capture -c "$tiny" -o m.rrt --from megatron - > out 2> err
status=$?
expect_status 0
expect_out "m.rrt: 2 steps, 4 sequences, 10 tokens, "

"$RELIBRA" capture -c "$tiny" -o j.rrt --from jsonl - < "$F/routing.jsonl" > out 2> err
status=$?
expect_status 0
expect_out "j.rrt: 2 steps, 3 sequences, 9 tokens, "

# Records are handled as they arrive: a bad second record ends the capture
# while the producer still holds stdin open (it waits for capture to exit,
# giving up after 30 s, which would mean capture waited for the end).
head -n 1 "$F/sglang.jsonl" > good.jsonl
{
	cat good.jsonl
	printf '{"meta_info": {"routed_experts": "AAAA!AAA"}}\n'
	i=0
	while [ ! -e done ] && [ $i -lt 300 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	[ -e done ] || touch gave-up
} | {
	"$RELIBRA" capture -c "$tiny" -o bad.rrt --from sglang - > out 2> err
	echo $? > status
	touch done
}
status=$(cat status)
expect_status 1
[ ! -e gave-up ] || fail "capture did not act on the bad record before stdin closed"
expect_err "relibra capture: <stdin>:2: meta_info.routed_experts: invalid base64 character '!' at byte 4"
[ ! -e bad.rrt ] && [ ! -e bad.rrt.tmp ] || fail "a failed capture left output"

# started FILE: wait up to 10 s for a streaming capture to create FILE.
started() {
	i=0
	while [ ! -e "$1" ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	[ -e "$1" ] || fail "capture did not start its output $1"
}

# An interrupted capture leaves nothing behind.
mkfifo in.fifo
"$RELIBRA" capture -c "$tiny" -o int.rrt --from sglang - < in.fifo > out 2> err &
pid=$!
exec 3> in.fifo
cat good.jsonl >&3
started int.rrt.tmp
kill -TERM $pid
wait $pid
status=$?
exec 3>&-
expect_status 143
[ ! -e int.rrt ] && [ ! -e int.rrt.tmp ] || fail "an interrupted capture left output"

# A second run writing the same output while the first still streams
# stops at once and leaves the first one's output alone.
mkfifo two.fifo
"$RELIBRA" capture -c "$tiny" -o two.rrt --from sglang - < two.fifo > out1 2> err1 &
pid=$!
exec 3> two.fifo
cat good.jsonl >&3
started two.rrt.tmp
"$RELIBRA" capture -c "$tiny" -o two.rrt --synthetic --seed 1 > out 2> err
status=$?
expect_status 1
expect_err "relibra capture: another run is writing 'two.rrt' (its 'two.rrt.tmp' is locked)"
[ -e two.rrt.tmp ] && [ ! -e two.rrt ] || fail "the second run touched the first one's output"
exec 3>&-
wait $pid || fail "the first capture failed: $(cat err1)"
grep -q "^two.rrt: 1 step, 1 sequence, 5 tokens, " out1 || fail "first capture: $(cat out1 err1)"
[ ! -e two.rrt.tmp ] || fail "two.rrt.tmp left behind"
"$RELIBRA" inspect two.rrt > out 2> err || fail "two.rrt: $(cat err)"

# The documented feed (README, relibra(1)): tail -f --pid ends when the
# rollout's process does, and the trace is complete.
if tail --help 2>&1 | grep -q -- --pid; then
	sleep 2 &
	rollout=$!
	tail -f --pid=$rollout "$F/sglang.jsonl" |
		"$RELIBRA" capture -c "$tiny" -o tail.rrt --from sglang - > out 2> err
	status=$?
	expect_status 0
	expect_out "tail.rrt: 2 steps, 4 sequences, 21 tokens, "
	cmp -s tail.rrt sg-file.rrt || fail "the tail -f --pid capture differs from the file's"
fi
exit 0
