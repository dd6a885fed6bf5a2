#!/bin/sh
# run.sh - `make bench`: the benchmarks, each figure printed next to the
# command that produced it.  Timings are of this machine; see bench/README.md.
# usage: run.sh RELIBRA_BINARY BENCH_DIR
set -eu
bin=$1
dir=$2
out=${RLB_BENCH_DIR:-out/bench}
cfg=configs/qwen3-30b-a3b-h100-1x8.yaml
mkdir -p "$out"

say() {
	printf '\n== %s\n$ %s\n' "$1" "$2"
}

now_ns() {
	date +%s%N
}

# Capture throughput on the qwen3-30b-a3b synthetic trace, ordered and sorted.
for mode in ordered sorted; do
	flag=
	[ "$mode" = sorted ] && flag=--sorted
	say "capture, $mode ids" "relibra capture -c $cfg --synthetic --seed 1 $flag -o $out/$mode.rrt"
	t0=$(now_ns)
	"$bin" capture -c "$cfg" --synthetic --seed 1 $flag -o "$out/$mode.rrt"
	t1=$(now_ns)
	tokens=$("$bin" inspect --json "$out/$mode.rrt" | sed -n 's/.*"tokens": *\([0-9]*\).*/\1/p' | head -n 1)
	awk -v t="$tokens" -v ns=$((t1 - t0)) 'BEGIN {
		printf "capture: %d tokens in %.2f s = %.3g tokens/s (generation included)\n", t, ns / 1e9, t / (ns / 1e9) }'
	say "decode throughput and size, $mode ids" "$dir/trace_bench --read $out/$mode.rrt"
	"$dir/trace_bench" --read "$out/$mode.rrt"
done

say "trace format on segment-correlated routing (all modes)" "$dir/trace_bench"
"$dir/trace_bench"

say "planners: replication, reordering, EPLB speed" "$dir/balance_bench 3"
"$dir/balance_bench" 3

say "expert forward and backward on one core (train-step's CPU math)" "$dir/expert_bench 3"
"$dir/expert_bench" 3

# The policies against the targets of `relibra plan`, qwen3-235b-a22b, 2 steps.
q235=configs/qwen3-235b-a22b-h100-4x8.yaml
say "capture, qwen3-235b-a22b, 2 steps (about 1 minute)" \
	"relibra capture -c $q235 --set workload.steps=2 --synthetic --seed 1 -o $out/q235.rrt"
"$bin" capture -c "$q235" --set workload.steps=2 --synthetic --seed 1 -o "$out/q235.rrt"
for c in 4x8 8x8; do
	say "every policy and lever on h100-$c, against its targets (3-4 minutes)" \
		"$dir/policy_targets -c configs/qwen3-235b-a22b-h100-$c.yaml $out/q235.rrt $c"
	"$dir/policy_targets" -c "configs/qwen3-235b-a22b-h100-$c.yaml" "$out/q235.rrt" "$c"
done
rm -f "$out/q235.rrt"

# Group-limited routing: deepseek-v3, where the reordering splits expert
# groups unless colocate counts the copies (docs/cost-model.md); colocate
# is on there by default (balancer.colocate auto).
ds=configs/deepseek-v3-h100-8x8.yaml
say "capture, deepseek-v3, 2 steps (about 1 minute)" \
	"relibra capture -c $ds --set workload.steps=2 --synthetic --seed 1 -o $out/ds.rrt"
"$bin" capture -c "$ds" --set workload.steps=2 --synthetic --seed 1 -o "$out/ds.rrt"
say "deepseek-v3 on h100-8x8: relibra with and without reordering and colocate (about 1 minute)" \
	"relibra report -c $ds --trace $out/ds.rrt --policies static,eplb-oracle,replicate,relibra,relibra+no-colocate,relibra+no-reorder"
"$bin" report -c "$ds" --trace "$out/ds.rrt" \
	--policies static,eplb-oracle,replicate,relibra,relibra+no-colocate,relibra+no-reorder
rm -f "$out/ds.rrt"

say "synthetic workload calibration, qwen3-235b-a22b on h100-4x8 (about 1-2 minutes)" \
	"$dir/calibrate_workload -c configs/qwen3-235b-a22b-h100-4x8.yaml --seed 1"
"$dir/calibrate_workload" -c configs/qwen3-235b-a22b-h100-4x8.yaml --seed 1

say "train-step, cpu backend, 8 virtual ranks: measured expert critical path vs the simulator (about 2-3 minutes)" \
	"$dir/exec_bench -c configs/qwen3-30b-a3b-h100-1x8.yaml"
"$dir/exec_bench" -c configs/qwen3-30b-a3b-h100-1x8.yaml -d "$out"

say "cuda backend, expert GEMM strategies on the local GPU (skipped without one)" \
	"$dir/cuda_gemm_bench"
"$dir/cuda_gemm_bench"
