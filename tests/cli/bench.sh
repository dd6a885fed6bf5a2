# bench.sh - build/bench/policy_targets on the tiny config: every row, the
# second pass on dynamic batching against the first pass's static row (the
# same figures as relibra plan), and no second pass when the config already
# packs dynamic.  The benchmark programs are built by make check, so an API
# change that breaks them fails here.
. "$RLB_TOP/tests/cli/lib.sh"

pt="$RLB_BUILD/bench/policy_targets"
[ -x "$pt" ] || fail "$pt was not built"
cfg="$CONFIGS/tiny-2x2.yaml"
run capture -c "$cfg" --synthetic --seed 5 -o t.rrt
expect_status 0

"$pt" -c "$cfg" t.rrt - 1 > out 2> err || { cat out err; fail "policy_targets failed"; }
for row in 'static ' 'eplb-oracle ' 'relibra ' 'relibra --data-control ' \
	'relibra --colocate --data-control ' 'static --pack dynamic ' 'relibra --pack dynamic '; do
	grep -q "^$row" out || { cat out; fail "no row '$row'"; }
done
awk '$1 == "static" && NF == 8 && $3 != "1.000" { exit 1 }' out ||
	fail "the static row is not 1.000x static"
grep -q '^[0-9]* target' out && fail "'-' printed targets"

# The dynamic rows are relibra plan's figures: step time per step, and the
# in-order static layout's time over relibra's on dynamic batching.
row() {
	awk -v r="$1" -v f="$2" 'index($0, r) == 1 { n = split(substr($0, 35), v, " "); print v[f]; exit }' out
}
dyn_step=$(row 'relibra --pack dynamic ' 1)
dyn_x=$(row 'relibra --pack dynamic ' 2)
stat_dyn=$(row 'static --pack dynamic ' 1)
cp out pt.out
run plan -c "$cfg" --policy relibra --pack dynamic --no-timing --json t.rrt
expect_status 0
rel=$(sed -n 's/^  "step_time_s": \([0-9.e+-]*\),$/\1/p' out)
run plan -c "$cfg" --policy static --no-timing --json t.rrt
expect_status 0
st=$(sed -n 's/^  "step_time_s": \([0-9.e+-]*\),$/\1/p' out)
run plan -c "$cfg" --policy static --pack dynamic --no-timing --json t.rrt
expect_status 0
st_dyn=$(sed -n 's/^  "step_time_s": \([0-9.e+-]*\),$/\1/p' out)
[ -n "$rel" ] && [ -n "$st" ] && [ -n "$st_dyn" ] || fail "no step_time_s in relibra plan --json"
awk -v a="$dyn_step" -v b="$rel" -v x="$dyn_x" -v s="$st" -v c="$stat_dyn" -v d="$st_dyn" 'BEGIN {
	if (sprintf("%.3f", b) != a || sprintf("%.3f", d) != c || sprintf("%.3f", s / b) != x)
		exit 1 }' || {
	cat pt.out
	fail "dynamic rows $dyn_step s, $dyn_x x, static $stat_dyn s; relibra plan: $rel s, static $st s and $st_dyn s"
}

# A config that packs dynamic already: one pass, whose rows are on it.
sed 's/^  micro_batch_tokens: 512$/&\n  pack: dynamic/' "$cfg" > dyn.yaml
grep -q '^  pack: dynamic$' dyn.yaml || fail "could not write dyn.yaml"
"$pt" -c dyn.yaml t.rrt - 1 > out 2> err || { cat out err; fail "policy_targets failed on dyn.yaml"; }
expect_out "dynamic packing"
grep -q -- '--pack dynamic' out && { cat out; fail "a second pass on a dynamic config"; }

# Usage and bad input.
"$pt" > out 2> err
[ $? -eq 2 ] || fail "policy_targets without arguments did not exit 2"
expect_err "usage: policy_targets -c CONFIG TRACE"
"$pt" -c "$cfg" missing.rrt - > out 2> err
[ $? -eq 1 ] || fail "policy_targets on a missing trace did not exit 1"
expect_err "missing.rrt"
exit 0
