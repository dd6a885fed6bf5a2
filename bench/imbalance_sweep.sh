#!/bin/sh
# imbalance_sweep.sh - the plan targets of qwen3-235b-a22b across workload
# settings: for each setting, the calibration statistics of the synthetic
# workload (calibrate_workload, 4 steps) and every policy against its
# targets on h100-4x8 and h100-8x8 (policy_targets, 2 steps).  About 5
# minutes per setting on 2 cores; not part of `make bench`.
#
# usage: bench/imbalance_sweep.sh [SETTING...]
#   SETTING: comma-separated workload overrides, e.g.
#   topic_concentration=2.2,hot_expert_boost=2.5; "default" for none.
#   Without settings: the earlier defaults (topic_concentration 1.3,
#   hot_expert_boost 1.5), topic_concentration 1.6, 1.9, 2.0 and 2.2 with
#   hot_expert_boost 2.5, and the defaults (2.4 and 2.5; docs/cost-model.md's
#   table).
# Environment: RELIBRA (default ./relibra), BENCH_DIR (build/bench),
# RLB_BENCH_DIR (where the trace goes, default out/bench).
set -eu
bin=${RELIBRA:-./relibra}
dir=${BENCH_DIR:-build/bench}
out=${RLB_BENCH_DIR:-out/bench}
cfg=configs/qwen3-235b-a22b-h100-4x8.yaml
mkdir -p "$out"
trace=$out/imbalance-sweep.rrt
trap 'rm -f "$trace" "$trace.tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ $# -gt 0 ] || set -- topic_concentration=1.3,hot_expert_boost=1.5 \
	topic_concentration=1.6,hot_expert_boost=2.5 \
	topic_concentration=1.9,hot_expert_boost=2.5 \
	topic_concentration=2.0,hot_expert_boost=2.5 \
	topic_concentration=2.2,hot_expert_boost=2.5 \
	default

# The --set options of a setting, one word each.
overrides() {
	[ "$1" = default ] && return 0
	for kv in $(printf '%s' "$1" | tr ',' ' '); do
		printf ' --set workload.%s' "$kv"
	done
}

# Every setting must load before the first one runs for minutes.
for setting in "$@"; do
	# shellcheck disable=SC2046
	"$bin" config -c "$cfg" $(overrides "$setting") >/dev/null || {
		echo "imbalance_sweep: bad setting '$setting'" >&2
		exit 2
	}
done

for setting in "$@"; do
	sets=$(overrides "$setting")
	printf '\n== workload: %s\n' "$setting"
	printf '$ %s\n' "$dir/calibrate_workload -c $cfg --seed 1$sets"
	# Exit status 1 means a calibration target was missed: reported, not
	# fatal.  $sets is split into words on purpose.
	# shellcheck disable=SC2086
	"$dir/calibrate_workload" -c "$cfg" --seed 1 $sets |
		grep -E '^(mb GPU max/mean, (median|p99)|mb node max/mean, median|step GPU max/mean, median|hot expert churn|in-order targets)' || :
	printf '$ %s\n' "relibra capture -c $cfg --set workload.steps=2$sets --synthetic --seed 1 -o $trace"
	# shellcheck disable=SC2086
	"$bin" capture -c "$cfg" --set workload.steps=2 $sets --synthetic --seed 1 -o "$trace" >/dev/null
	for c in 4x8 8x8; do
		printf '$ %s\n' "$dir/policy_targets -c configs/qwen3-235b-a22b-h100-$c.yaml $trace $c"
		"$dir/policy_targets" -c "configs/qwen3-235b-a22b-h100-$c.yaml" "$trace" "$c" |
			grep -E '^(policy |static  |eplb-oracle |relibra  |  |[0-9]+ target|bound)'
	done
	rm -f "$trace"
done
