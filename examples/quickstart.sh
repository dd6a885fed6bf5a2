#!/bin/sh
# quickstart.sh - the relibra quickstart (`make demo`): capture a synthetic RL
# routing trace for Qwen3-30B-A3B on one 8-GPU H100 node, check it, print its
# load statistics under the in-order and ffd packing rules, plan it (also with
# data control and on dynamic batching), and compare every policy in a table
# and an HTML report with charts.
# usage: quickstart.sh [RELIBRA_BINARY]   (outputs in $RLB_DEMO_DIR, default out/demo;
# RELIBRA_TRAIN=1 also runs a small train-step at the end)
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

step "the same on the trainer's token-budget batching (slime, verl): --pack dynamic" \
	"relibra plan -c $cfg --policy relibra --pack dynamic $out/rl.rrt"
"$bin" plan -c "$cfg" --policy relibra --pack dynamic "$out/rl.rrt"

step "compare every policy on the cluster: one pass over the trace, a table and an HTML report" \
	"relibra report -c $cfg --trace $out/rl.rrt --html $out/report.html --svg $out/charts"
"$bin" report -c "$cfg" --trace "$out/rl.rrt" --html "$out/report.html" --svg "$out/charts"
echo
echo "HTML report with charts: $out/report.html"

# Optional (RELIBRA_TRAIN=1): run training steps that apply a plan, on the
# tiny config, 4 ranks inside this process, checked against the static plan.
if [ "${RELIBRA_TRAIN:-0}" = 1 ]; then
	tiny=configs/tiny-2x2.yaml
	step "train-step: capture and plan on the tiny config" \
		"relibra capture -c $tiny --synthetic --seed 1 -o $out/tiny.rrt; relibra plan -c $tiny --policy relibra -o $out/tiny.rlp $out/tiny.rrt"
	"$bin" capture -c "$tiny" --synthetic --seed 1 -o "$out/tiny.rrt"
	"$bin" plan -c "$tiny" --policy relibra -o "$out/tiny.rlp" "$out/tiny.rrt" > /dev/null
	step "train-step: apply the plan on 4 virtual ranks (mpirun -np 4 on a cluster), verify against static" \
		"relibra train-step -c $tiny --trace $out/tiny.rrt --plan $out/tiny.rlp --virtual-ranks 4 --verify -o $out/train.json"
	"$bin" train-step -c "$tiny" --trace "$out/tiny.rrt" --plan "$out/tiny.rlp" \
		--virtual-ranks 4 --verify -o "$out/train.json"
	echo "measurements: $out/train.json"
fi
