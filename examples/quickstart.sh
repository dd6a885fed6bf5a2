#!/bin/sh
# quickstart.sh - the relibra quickstart (`make demo`): capture a synthetic RL
# routing trace for Qwen3-30B-A3B on one 8-GPU H100 node, check it, print its
# load statistics under both packing rules, plan it, and compare every policy
# in a table and an HTML report with charts.
# usage: quickstart.sh [RELIBRA_BINARY]   (outputs in $RLB_DEMO_DIR, default out/demo)
set -eu
bin=${1:-relibra}
out=${RLB_DEMO_DIR:-out/demo}
cfg=configs/qwen3-30b-a3b-h100-1x8.yaml
mkdir -p "$out"

step() {
	printf '\n== %s\n$ %s\n' "$1" "$2"
}

step "capture a synthetic RL trace" "relibra capture -c $cfg --synthetic --seed 1 -o $out/rl.rrt"
"$bin" capture -c "$cfg" --synthetic --seed 1 -o "$out/rl.rrt"

step "check it with zstd" "zstd -t $out/rl.rrt"
if command -v zstd >/dev/null 2>&1; then
	zstd -q -t "$out/rl.rrt" && echo "$out/rl.rrt: a valid zstd stream"
else
	echo "zstd not installed; skipped"
fi

step "inspect the trace" "relibra inspect $out/rl.rrt"
"$bin" inspect "$out/rl.rrt"

for pack in in-order ffd; do
	step "load statistics, $pack packing, static layout" \
		"relibra inspect --stats -c $cfg --pack $pack $out/rl.rrt"
	"$bin" inspect --stats -c "$cfg" --pack "$pack" "$out/rl.rrt"
done

step "plan it with relibra's policy: the plan file and its simulated step time" \
	"relibra plan -c $cfg --policy relibra -o $out/relibra.rlp --summary $out/relibra.json $out/rl.rrt"
"$bin" plan -c "$cfg" --policy relibra -o "$out/relibra.rlp" --summary "$out/relibra.json" "$out/rl.rrt"

step "beyond placement: relibra chooses the micro-batches too (data control; the plan carries its schedule)" \
	"relibra plan -c $cfg --policy relibra --data-control -o $out/relibra-dc.rlp $out/rl.rrt"
"$bin" plan -c "$cfg" --policy relibra --data-control -o "$out/relibra-dc.rlp" "$out/rl.rrt"

step "compare every policy on the cluster: one pass over the trace, a table and an HTML report" \
	"relibra report -c $cfg --trace $out/rl.rrt --html $out/report.html --svg $out/charts"
"$bin" report -c "$cfg" --trace "$out/rl.rrt" --html "$out/report.html" --svg "$out/charts"
echo
echo "HTML report with charts: $out/report.html"

