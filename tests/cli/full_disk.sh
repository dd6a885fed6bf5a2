# full_disk.sh - outputs on a full file system (ENOSPC): exit status 1, a
# message naming the file and the reason, no PATH.tmp left and an existing
# PATH untouched; stdout redirected to a full disk is a failure too, not a
# success.  Needs root to mount a small tmpfs; skips without it.
. "$RLB_TOP/tests/cli/lib.sh"

[ "$(id -u)" = 0 ] || skip "needs root to mount a tmpfs"
mkdir full
mount -t tmpfs -o size=64k tmpfs full 2> mount.err ||
	skip "cannot mount a tmpfs: $(cat mount.err)"
trap 'umount full' EXIT
trap 'exit 1' INT TERM HUP

"$RELIBRA" capture -c "$CONFIGS/tiny-2x2.yaml" --synthetic -o t.rrt > cap.out 2>&1 ||
	{ cat cap.out; fail "capture"; }
"$RELIBRA" plan -c "$CONFIGS/tiny-2x2.yaml" -o p.rlp t.rrt > plan.out 2>&1 ||
	{ cat plan.out; fail "plan"; }
echo old > full/t.rrt
echo old > full/r.html
mkdir full/svg
# Fill it up: what is left is less than a page.
dd if=/dev/zero of=full/fill bs=4096 count=64 2> dd.err
[ "$(df -k full | awk 'NR == 2 { print $4 }')" = 0 ] || { df -k full; fail "full/ is not full"; }

# untouched FILE: FILE still holds "old" and FILE.tmp is gone.
untouched() {
	[ "$(cat "$1")" = old ] || fail "$1 was changed"
	[ ! -e "$1.tmp" ] || fail "$1.tmp was left behind"
}

run capture -c "$CONFIGS/tiny-2x2.yaml" --synthetic -o full/t.rrt
expect_status 1
expect_err "cannot write 'full/t.rrt.tmp': No space left on device"
untouched full/t.rrt

# The report's writers only see a FILE: the message still names the file.
run report -c "$CONFIGS/tiny-2x2.yaml" --trace t.rrt --html full/r.html
expect_status 1
expect_err "cannot write 'full/r.html.tmp': No space left on device"
untouched full/r.html
run report -c "$CONFIGS/tiny-2x2.yaml" --trace t.rrt --svg full/svg
expect_status 1
expect_err ".svg.tmp': No space left on device"
[ -z "$(ls full/svg)" ] || { ls full/svg; fail "--svg left files behind"; }
# Charts that do not fit: the report and the HTML page, complete on
# another disk, are not renamed into place either.
run report -c "$CONFIGS/tiny-2x2.yaml" --trace t.rrt -o r.txt --html r.html --svg full/svg
expect_status 1
expect_err ".svg.tmp': No space left on device"
[ -z "$(ls full/svg)" ] || { ls full/svg; fail "--svg left files behind"; }
for f in r.txt r.html r.txt.tmp r.html.tmp; do
	[ ! -e $f ] || fail "$f written though the charts failed"
done

# stdout to a full disk: every command says so and fails.
# tofull NAME ARGS...: relibra ARGS with stdout on the full disk.
tofull() {
	name=$1
	shift
	"$RELIBRA" "$@" > full/out 2> err
	status=$?
	rm -f full/out
	expect_status 1
	expect_err "relibra$name: cannot write to stdout: No space left on device"
	[ "$(grep -c . err)" = 1 ] || { cat err; fail "$* says it more than once"; }
}
tofull " inspect" inspect t.rrt
tofull " inspect" inspect --json t.rrt
tofull " inspect" inspect --json --dump p.rlp
tofull " inspect" inspect --dump p.rlp
tofull " report" report -c "$CONFIGS/tiny-2x2.yaml" --trace t.rrt
tofull " config" config --presets
tofull " config" config --from-hf "$FIXTURES/hf/olmoe.json"
tofull " plan" help plan
tofull "" --help
"$RELIBRA" config -c "$CONFIGS/tiny-2x2.yaml" > full/out 2> err
status=$?
rm -f full/out
expect_status 1
expect_err "relibra config: cannot write the configuration: No space left on device"
[ "$(grep -c . err)" = 1 ] || { cat err; fail "config says it more than once"; }
exit 0
