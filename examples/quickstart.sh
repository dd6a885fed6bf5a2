#!/bin/sh
# quickstart.sh - the relibra quickstart (`make demo`): capture a synthetic RL
# routing trace for Qwen3-30B-A3B on one 8-GPU H100 node, check it, and print
# its load statistics under both packing rules.
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

step "plan every policy and simulate it on the cluster" \
	"relibra plan -c $cfg --policy POLICY --summary $out/POLICY.json -o $out/POLICY.rlp $out/rl.rrt"
field() {	# field NAME FILE: the first (top-level) value of NAME in a result file
	sed -n "s/^  \"$1\": \([^,]*\),*$/\1/p" "$2" | head -n 1
}
printf '%-22s %12s %12s %10s %10s %10s\n' policy "step (ms)" "tokens/s" "x static" "of ideal" "GPU p50"
for policy in static eplb eplb-oracle replicate relibra ideal; do
	"$bin" plan -c "$cfg" --policy "$policy" --summary "$out/$policy.json" \
		-o "$out/$policy.rlp" "$out/rl.rrt" > "$out/$policy.txt"
	f="$out/$policy.json"
	gpu=$(sed -n '/"gpu_after"/,/}/s/^ *"p50": \([^,]*\),*$/\1/p' "$f" | head -n 1)
	awk -v p="$policy" -v t="$(field step_time_s "$f")" -v r="$(field tokens_per_s "$f")" \
		-v s="$(field speedup_over_static "$f")" -v i="$(field fraction_of_ideal "$f")" -v g="$gpu" \
		'BEGIN { printf "%-22s %12.1f %12.4g %10.3f %10.3f %10.3f\n", p, t * 1e3, r, s, i, g }'
done
echo
echo "plans, summaries and tables: $out/"
