#!/bin/sh
# gpu-check.sh - the CUDA backend's checks on one GPU (H100 or H200), in
# about 5 minutes: build for sm_90, the GPU unit tests and CLI test, cuda
# against cpu on configs/tiny-2x2.yaml, --virtual-ranks 8 on a
# qwen3-30b-a3b-shaped config under the static and relibra plans (measured
# expert critical path speedup next to the simulator's), calibrate; prints
# a table and appends a dated record to docs/gpu-results.md.
#
# usage: sh scripts/gpu-check.sh [-n] [BUILD_DIR]
#   -n          do not append to docs/gpu-results.md
#   BUILD_DIR   default build-gpu
# Environment: CUDA_HOME (default /usr/local/cuda), CUDA_ARCH (default
# -arch=sm_90), JOBS (make -j, default the CPU count).
set -u
record=1
if [ "${1:-}" = -n ]; then
	record=0
	shift
fi
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
build=${1:-build-gpu}
bin="$build/relibra"
arch=${CUDA_ARCH:--arch=sm_90}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
work=$(mktemp -d "${TMPDIR:-/tmp}/relibra-gpu.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
t_start=$(date +%s)

say() { printf '\n== %s\n' "$*"; }
die() { echo "gpu-check: $*" >&2; exit 1; }
# first FILE KEY: the first value of KEY in a result file relibra wrote
# (indented JSON; a summary's "breakdown" and a train-step result's
# top-level figures come before the baselines that repeat their keys).
first() { sed -n 's/^ *"'"$2"'": \([^,]*\),*$/\1/p' "$1" | head -n 1; }

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L | grep -q '^GPU ' ||
	die "no GPU found by 'nvidia-smi -L'"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
# The driver must run the toolkit's code: a CUDA 13 build needs a CUDA 13
# driver (otherwise the runtime finds no device and every GPU test skips).
nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
drv_cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -n 1)
tk_cuda=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p' | head -n 1)
[ -n "$tk_cuda" ] || die "no nvcc at $nvcc (set CUDA_HOME)"
if [ -n "$drv_cuda" ] && [ "${drv_cuda%%.*}" -lt "${tk_cuda%%.*}" ]; then
	die "the driver ($driver) runs CUDA $drv_cuda, the toolkit at ${CUDA_HOME:-/usr/local/cuda} is CUDA $tk_cuda: use a CUDA ${drv_cuda%%.*} toolkit (CUDA_HOME)"
fi

say "build ($arch) in $build"
make -j"$jobs" BUILD="$build" BIN="$bin" LIB="$build/librelibra.a" \
	CUDA_ARCH="$arch" all "$build/tests/check_relibra" > "$work/build.log" 2>&1 ||
	{ tail -n 30 "$work/build.log"; die "build failed"; }
grep -E 'warning|error' "$work/build.log" && die "the build has warnings"
"$bin" --version | grep -q '^backends:.* cuda' || die "CUDA backend not built (is nvcc and NCCL under ${CUDA_HOME:-/usr/local/cuda}?)"

say "GPU unit tests (suite cuda) and tests/cli/gpu.sh"
CK_RUN_SUITE=cuda RLB_TEST_ONLY=gpu sh tests/run.sh "$build/tests/check_relibra" "$bin" \
	> "$work/tests.log" 2>&1
tests_rc=$?
cat "$work/tests.log"
unit=$(sed -n 's/^unit: \(.*\)$/\1/p' "$work/tests.log" | tail -n 1)
cli=$(grep -E '^(PASS|FAIL|SKIP): gpu' "$work/tests.log" | head -n 1)
wdiff=$(sed -n 's/.*max relative weight difference \([^,]*\),.*/\1/p' "$work/tests.log" | head -n 1)

say "train-step --virtual-ranks 8, qwen3-30b-a3b shape (4 MoE layers), static vs relibra"
cfg=configs/qwen3-30b-a3b-h100-1x8.yaml
set="--set model.moe_layers=4 --set workload.steps=1 --set workload.prompts_per_step=8 --set parallel.micro_batch_tokens=4096"
"$bin" capture -c $cfg $set --synthetic --seed 1 -o "$work/q.rrt" > /dev/null || die "capture"
for p in static relibra; do
	"$bin" plan -c $cfg $set --policy $p -o "$work/$p.rlp" --summary "$work/$p.sum.json" \
		"$work/q.rrt" > /dev/null || die "plan $p"
	"$bin" train-step -c $cfg $set --trace "$work/q.rrt" --plan "$work/$p.rlp" \
		--backend cuda --virtual-ranks 8 -o "$work/$p.train.json" || die "train-step $p"
done
sim_s=$(first "$work/static.sum.json" expert_s)
sim_r=$(first "$work/relibra.sum.json" expert_s)
meas_s=$(first "$work/static.train.json" critical_path_s)
meas_r=$(first "$work/relibra.train.json" critical_path_s)
speed=$(awk -v a="$sim_s" -v b="$sim_r" -v c="$meas_s" -v d="$meas_r" \
	'BEGIN { s = a / b; m = c / d; printf "%.3f %.3f %+.1f%%\n", s, m, 100 * (m / s - 1) }')
sim_x=${speed%% *}; rest=${speed#* }; meas_x=${rest%% *}; gap=${rest#* }

say "calibrate (one GPU)"
"$bin" calibrate -c $cfg --gpus 1 --name gpu-check -o "$work/cal.yaml" > "$work/cal.txt" 2>&1 ||
	{ cat "$work/cal.txt"; die "calibrate"; }
cat "$work/cal.txt"
eff_max=$(sed -n 's/^  gemm_eff_max: //p' "$work/cal.yaml")
half=$(sed -n 's/^  gemm_eff_half_rows: //p' "$work/cal.yaml")
eff2k=$(awk '$1 == 2048 { print $4 }' "$work/cal.txt")
eff16k=$(awk '$1 == 16384 { print $4 }' "$work/cal.txt")

t_total=$(( $(date +%s) - t_start ))
date=$(date -u +%Y-%m-%d)
say "summary"
{
	printf '| %-44s | %s |\n' "check" "result"
	printf '|%s|%s|\n' "----------------------------------------------" "------------------------------"
	printf '| %-44s | %s |\n' "GPU" "$gpu (driver $driver)"
	printf '| %-44s | %s |\n' "GPU unit tests (suite cuda)" "${unit:-none}"
	printf '| %-44s | %s |\n' "tests/cli/gpu.sh" "${cli:-none}"
	printf '| %-44s | %s |\n' "cuda vs cpu, tiny-2x2: max rel weight diff" "${wdiff:-n/a} (1e-2, or 1% of elements by Adam sign flips)"
	printf '| %-44s | %s |\n' "8 virtual ranks: critical path static" "$meas_s s (simulated $sim_s s)"
	printf '| %-44s | %s |\n' "8 virtual ranks: critical path relibra" "$meas_r s (simulated $sim_r s)"
	printf '| %-44s | %s |\n' "relibra speedup: simulated / measured" "$sim_x / $meas_x (gap $gap, target 10%)"
	printf '| %-44s | %s |\n' "GEMM efficiency at 2048 / 16384 rows" "${eff2k:-n/a} / ${eff16k:-n/a} (target 0.60)"
	printf '| %-44s | %s |\n' "fit: gemm_eff_max, gemm_eff_half_rows" "$eff_max, $half"
	printf '| %-44s | %s |\n' "wall time" "$t_total s"
} | tee "$work/table.md"

if [ $record = 1 ]; then
	{
		printf '\n## %s, %s\n\n' "$date" "$gpu"
		printf 'scripts/gpu-check.sh at commit %s (%s), CUDA_ARCH=%s.\n\n' \
			"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
			"$("$bin" --version | head -n 1)" "$arch"
		cat "$work/table.md"
		printf '\nCalibration (`relibra calibrate -c %s --gpus 1`):\n\n```\n' "$cfg"
		cat "$work/cal.txt"
		printf '```\n'
	} >> docs/gpu-results.md
	echo "recorded in docs/gpu-results.md"
fi
[ $tests_rc = 0 ] || die "GPU tests failed"
exit 0
