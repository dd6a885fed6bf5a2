#!/bin/sh
# gpu-check.sh - the CUDA backend's checks on one GPU (H100 or H200), in
# about 70 s on an H200 (at most about 8 minutes): build for sm_90, the GPU
# unit tests (with both GEMM strategies) and CLI test, cuda against cpu on
# configs/tiny-2x2.yaml, --virtual-ranks 8 on a qwen3-30b-a3b-shaped
# config under the static and relibra plans (measured expert critical path
# speedup next to the simulator's), calibrate, the expert GEMM strategies
# (bench/cuda_gemm_bench); prints a table and appends a dated record to
# docs/gpu-results.md.
#
# Every step runs even when an earlier one failed (but for the build, which
# the others need), under a time limit, with its output in a log; a failed
# step is recorded with the end of its log, so one run on a borrowed GPU
# always leaves a record.  The record is also printed last, so a caller that
# keeps only the output still has it.
#
# Without the libraries (zstd, libyaml, jansson, Check) and a network: the
# .deb files that scripts/gpu-deps.sh fetched into gpu-deps/, taken along.
#
# usage: sh scripts/gpu-check.sh [-n] [-B] [-k DIR] [BUILD_DIR]
#   -n          do not append to docs/gpu-results.md
#   -B          build nothing: check the relibra and tests/check_relibra
#               already in BUILD_DIR (built elsewhere with CUDA; their
#               libraries found through LD_LIBRARY_PATH)
#   -k DIR      also keep every step's log and the record in DIR
#   BUILD_DIR   default build-gpu (relative to the top directory)
# Environment: CUDA_HOME (default /usr/local/cuda), CUDA_ARCH (default
# -arch=sm_90), JOBS (make -j, default the CPU count), GPU_CHECK_BUDGET
# (seconds for the whole check, default 450).
set -u
record=1
prebuilt=0
keep=""
while [ $# -gt 0 ]; do
	case $1 in
	-n) record=0; shift ;;
	-B) prebuilt=1; shift ;;
	-k) keep=${2:?"-k needs a directory"}; shift 2 ;;
	*) break ;;
	esac
done
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
build=${1:-build-gpu}
case $build in /*) bdir=$build ;; *) bdir=$top/$build ;; esac
bin="$build/relibra"
arch=${CUDA_ARCH:--arch=sm_90}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
work=$(mktemp -d "${TMPDIR:-/tmp}/relibra-gpu.XXXXXX") || exit 1
t_start=$(date +%s)
# Each step's limit is cut to what is left of the budget, so that a hang
# (a GPU wait gives up only after 300 s) cannot take the whole session.
deadline=$((t_start + ${GPU_CHECK_BUDGET:-450}))
have_timeout=0
command -v timeout >/dev/null 2>&1 && have_timeout=1
failed=""
gpu=unknown driver=unknown
unit="" unit_loop="" cli="" wdiff="" ldiff="" sim_s="" sim_r="" meas_s="" meas_r=""
warm_s="" warm_r="" unheld="" loss_s="" loss_r="" sim_x="" meas_x="" gap="" eff2k="" eff16k="" eff_max="" half="" cal_ok=0 gemm_ok=0
: > "$work/notes.md"

say() { printf '\n== %s\n' "$*"; }

# fail STEP REASON [LOG]: note a failed step, with the end of its log.
fail() {
	failed="$failed${failed:+, }$1"
	echo "gpu-check: $1: $2" >&2
	{
		printf -- '- %s: %s\n' "$1" "$2"
		if [ -n "${3:-}" ] && [ -s "$3" ]; then
			printf '\n```\n'
			tail -n 20 "$3" | cut -c 1-240
			printf '```\n\n'
		fi
	} >> "$work/notes.md"
}

# step CAP LOG COMMAND...: run COMMAND, its output in LOG, for at most CAP
# seconds or what is left of the budget.  Returns its status (124: killed
# at the limit, 125: not run, no time left).
step() {
	s_cap=$1 s_log=$2
	shift 2
	s_left=$((deadline - $(date +%s)))
	if [ $s_left -lt 10 ]; then
		echo "not run: the check's time budget is spent" > "$s_log"
		s_rc=125
		return 125
	fi
	[ $s_left -lt "$s_cap" ] && s_cap=$s_left
	if [ $have_timeout = 1 ]; then
		timeout -k 10 "$s_cap" "$@" > "$s_log" 2>&1
	else
		"$@" > "$s_log" 2>&1
	fi
	s_rc=$?
	[ $s_rc = 124 ] || [ $s_rc = 137 ] &&
		echo "killed after $s_cap s (time limit)" >> "$s_log"
	return $s_rc
}

# why: the last step's status in words.
why() {
	case $s_rc in
	124|137) echo "killed at its time limit" ;;
	125) echo "not run: the time budget was spent" ;;
	*) echo "status $s_rc" ;;
	esac
}

# first FILE KEY: the first value of KEY in a result file relibra wrote
# (indented JSON; a summary's "breakdown" and a train-step result's
# top-level figures come before the baselines that repeat their keys).
first() { [ -f "$1" ] && sed -n 's/^ *"'"$2"'": \([^,]*\),*$/\1/p' "$1" | head -n 1; }

# at STEP KEY FILE: the first value of KEY after the per-step entry of STEP
# (a train-step result's or a plan summary's per_step list).
at() {
	[ -f "$3" ] && awk -v s="\"step\": $1," -v k="\"$2\":" '
		index($0, s) { f = 1 }
		f && index($0, k) { sub(/.*": */, ""); sub(/,$/, ""); print; exit }' "$3"
}

# after0 KEY FILE: KEY summed over steps 1-3 (step 0 pays the warm-up).
after0() {
	a1=$(at 1 "$1" "$2") a2=$(at 2 "$1" "$2") a3=$(at 3 "$1" "$2")
	[ -n "$a1" ] && [ -n "$a2" ] && [ -n "$a3" ] &&
		awk -v a="$a1" -v b="$a2" -v c="$a3" 'BEGIN { printf "%.6g\n", a + b + c }'
}

# losses FILE: the per-step losses of a train-step result, one a line.
losses() { tr ',{}' '\n\n\n' < "$1" | sed -n 's/^ *"loss": *\([-0-9.eE+][-0-9.eE+]*\) *$/\1/p'; }

or_na() { if [ -n "$1" ]; then printf '%s' "$1"; else printf 'n/a'; fi; }

# g4 X: a number to 4 significant digits ("" stays "").
g4() { [ -n "$1" ] && awk -v x="$1" 'BEGIN { printf "%.4g", x }'; }

# finish STATUS: print the table, append the record, exit.
finish() {
	trap - INT TERM
	t_total=$(( $(date +%s) - t_start ))
	{
		printf '| %-44s | %s |\n' "check" "result"
		printf '|%s|%s|\n' "----------------------------------------------" "------------------------------"
		printf '| %-44s | %s |\n' "GPU" "$gpu (driver $driver)"
		printf '| %-44s | %s |\n' "GPU unit tests (suite cuda)" "$(or_na "$unit")"
		printf '| %-44s | %s |\n' "GPU unit tests, RLB_CUDA_GEMM=loop" "$(or_na "$unit_loop")"
		printf '| %-44s | %s |\n' "tests/cli/gpu.sh" "$(or_na "$cli")"
		printf '| %-44s | %s |\n' "cuda vs cpu, tiny-2x2: max rel weight diff" "$(or_na "$wdiff") (1e-2, or 1% of elements by Adam sign flips)"
		printf '| %-44s | %s |\n' "cuda vs cpu, tiny-2x2: max rel loss diff" "$(or_na "$ldiff") (1e-2)"
		printf '| %-44s | %s |\n' "8 ranks: critical path static, steps 1-3" "$(or_na "$(g4 "$meas_s")") s (simulated $(or_na "$(g4 "$sim_s")") s; step 0, with warm-up: $(or_na "$(g4 "$warm_s")") s)"
		printf '| %-44s | %s |\n' "8 ranks: critical path relibra, steps 1-3" "$(or_na "$(g4 "$meas_r")") s (simulated $(or_na "$(g4 "$sim_r")") s; step 0, with warm-up: $(or_na "$(g4 "$warm_r")") s)"
		printf '| %-44s | %s |\n' "8 ranks: spans timed without a hold" "$(or_na "$unheld") (static / relibra; 0: every span held)"
		printf '| %-44s | %s |\n' "8 ranks: final loss static / relibra" "$(or_na "$(g4 "$loss_s")") / $(or_na "$(g4 "$loss_r")") (equal to 1e-2)"
		printf '| %-44s | %s |\n' "relibra speedup (steps 1-3): sim / measured" "$(or_na "$sim_x") / $(or_na "$meas_x") (gap $(or_na "$gap"), target 10%)"
		printf '| %-44s | %s |\n' "GEMM efficiency at 2048 / 16384 rows" "$(or_na "$eff2k") / $(or_na "$eff16k") (target 0.60)"
		printf '| %-44s | %s |\n' "fit: gemm_eff_max, gemm_eff_half_rows" "$(or_na "$eff_max"), $(or_na "$half")"
		printf '| %-44s | %s |\n' "failed steps" "${failed:-none}"
		printf '| %-44s | %s |\n' "wall time" "$t_total s"
	} > "$work/table.md"
	{
		printf '\n## %s, %s\n\n' "$(date -u +%Y-%m-%d)" "$gpu"
		commit=$(git rev-parse --short HEAD 2>/dev/null)
		if [ -z "$commit" ]; then
			commit=unknown
		elif ! git diff --quiet HEAD -- 2>/dev/null; then
			commit="$commit with local changes"
		fi
		printf 'scripts/gpu-check.sh at commit %s (%s), CUDA_ARCH=%s.\n\n' "$commit" \
			"$( [ -x "$bin" ] && "$bin" --version 2>/dev/null | head -n 1 || echo 'not built')" "$arch"
		cat "$work/table.md"
		if [ -s "$work/notes.md" ]; then
			printf '\nFailures:\n\n'
			cat "$work/notes.md"
		fi
		if [ $cal_ok = 1 ]; then
			printf '\nCalibration (`relibra calibrate -c %s --gpus 1`):\n\n```\n' "$cfg"
			cat "$work/cal.txt"
			printf '```\n'
		fi
		if [ $gemm_ok = 1 ]; then
			printf '\nExpert GEMM strategies (`build/bench/cuda_gemm_bench`, RLB_CUDA_GEMM):\n\n```\n'
			cat "$work/gemm.txt"
			printf '```\n'
		fi
	} > "$work/record.md"
	if [ $record = 1 ]; then
		cat "$work/record.md" >> docs/gpu-results.md && echo "recorded in docs/gpu-results.md"
	fi
	if [ -n "$keep" ]; then
		mkdir -p "$keep" && cp "$work"/*.log "$work"/*.md "$work"/*.json "$work"/*.txt "$keep"/ 2>/dev/null
		echo "logs kept in $keep"
	fi
	say "summary"
	cat "$work/record.md"
	rm -rf "$work"
	exit "$1"
}
trap 'fail interrupted "the check was stopped by a signal"; finish 130' INT TERM

cfg=configs/qwen3-30b-a3b-h100-1x8.yaml

if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
	fail "GPU" "no GPU found by 'nvidia-smi -L'"
	finish 1
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
# The driver must run the toolkit's code: a CUDA 13 build needs a CUDA 13
# driver (otherwise the runtime finds no device and every GPU test skips).
nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
drv_cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -n 1)
tk_cuda=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p' | head -n 1)
if [ -z "$tk_cuda" ] && [ $prebuilt = 0 ]; then
	fail "toolkit" "no nvcc at $nvcc (set CUDA_HOME)"
	finish 1
fi
if [ -n "$drv_cuda" ] && [ "${drv_cuda%%.*}" -lt "${tk_cuda%%.*}" ]; then
	fail "toolkit" "the driver ($driver) runs CUDA $drv_cuda, the toolkit at ${CUDA_HOME:-/usr/local/cuda} is CUDA $tk_cuda: use a CUDA ${drv_cuda%%.*} toolkit (CUDA_HOME)"
	finish 1
fi

# A GPU machine with the CUDA toolkit alone: the libraries from the Debian
# packages that scripts/gpu-deps.sh fetched into gpu-deps/, unpacked under
# the build directory (never into /), linked with a run path to them.
cuda_home=${CUDA_HOME:-/usr/local/cuda}
mods="libzstd yaml-0.1 jansson check"
ldflags=""
# shellcheck disable=SC2086
if ! pkg-config --exists $mods 2>/dev/null; then
	if ! ls gpu-deps/*.deb >/dev/null 2>&1; then
		fail "libraries" "pkg-config finds not all of $mods, and there is no gpu-deps/ (run 'sh scripts/gpu-deps.sh' where Debian's registry is reachable and take gpu-deps/ along)"
		finish 1
	fi
	deps="$bdir/deps"
	dlib="$deps/usr/lib/x86_64-linux-gnu"
	rm -rf "$deps"
	mkdir -p "$deps/bin" "$work/deb"
	for f in gpu-deps/*.deb; do
		if command -v dpkg-deb >/dev/null 2>&1; then
			dpkg-deb -x "$f" "$deps"
		else
			rm -rf "$work/deb"/* &&
			(cd "$work/deb" && ar x "$top/$f" && tar -xf data.tar.* -C "$deps")
		fi || { fail "libraries" "cannot unpack $f"; finish 1; }
	done
	if ! command -v pkg-config >/dev/null 2>&1; then
		printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$dlib" \
			"$deps/usr/bin/pkgconf" > "$deps/bin/pkg-config"
		chmod +x "$deps/bin/pkg-config"
		PATH="$deps/bin:$PATH"
	fi
	PKG_CONFIG_PATH="$dlib/pkgconfig:$deps/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
	CPATH="$deps/usr/include${CPATH:+:$CPATH}"
	LIBRARY_PATH="$dlib${LIBRARY_PATH:+:$LIBRARY_PATH}"
	export PATH PKG_CONFIG_PATH CPATH LIBRARY_PATH
	ldflags="-Wl,-rpath,$dlib"
	LD_LIBRARY_PATH="$dlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export LD_LIBRARY_PATH
	# shellcheck disable=SC2086
	if ! pkg-config --exists $mods; then
		fail "libraries" "pkg-config finds not all of $mods, even with gpu-deps/"
		finish 1
	fi
	echo "gpu-check: libraries from gpu-deps/, unpacked in $deps"
fi
# NCCL and cuBLAS from PyTorch's NVIDIA wheels where the toolkit has none:
# NCCL through a folder of links the Makefile's NCCL_HOME takes (and the
# run-time search path), cuBLAS (loaded at run time) through
# LD_LIBRARY_PATH.  CUDA 13's wheels keep cuBLAS in nvidia/cu13/lib, NCCL
# still in nvidia/nccl/lib.
wheel_lib() {
	for d in $(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null); do
		find "$d" -maxdepth 3 -name "$1" 2>/dev/null
	done | head -n 1
}
nccl_home=${NCCL_HOME:-}
if [ -z "$nccl_home" ] && [ ! -f "$cuda_home/include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
	f=$(wheel_lib libnccl.so.2)
	w=${f%/lib/libnccl.so.2}
	if [ -n "$f" ] && [ -f "$w/include/nccl.h" ]; then
		nccl_home="$bdir/nccl"
		rm -rf "$nccl_home"
		mkdir -p "$nccl_home/lib"
		ln -s "$w/include" "$nccl_home/include"
		ln -s "$f" "$nccl_home/lib/libnccl.so.2"
		ln -s libnccl.so.2 "$nccl_home/lib/libnccl.so"
		LD_LIBRARY_PATH="$w/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		export LD_LIBRARY_PATH
		echo "gpu-check: NCCL from $w"
	fi
fi
if ! ls "$cuda_home"/lib64/libcublas.so.* >/dev/null 2>&1; then
	f=$(wheel_lib 'libcublas.so.*')
	if [ -n "$f" ]; then
		LD_LIBRARY_PATH="${f%/*}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		export LD_LIBRARY_PATH
		echo "gpu-check: cuBLAS from ${f%/*}"
	fi
fi

if [ $prebuilt = 1 ]; then
	say "prebuilt: $bin and $build/tests/check_relibra"
	arch="(prebuilt)"
	if [ ! -x "$bin" ] || [ ! -x "$build/tests/check_relibra" ]; then
		fail "build" "-B: no $bin or $build/tests/check_relibra"
		finish 1
	fi
	"$bin" --version
elif say "build ($arch) in $build"; ! step 300 "$work/build.log" make -j"$jobs" BUILD="$build" BIN="$bin" \
	LIB="$build/librelibra.a" CUDA_ARCH="$arch" ${ldflags:+LDFLAGS="$ldflags"} \
	${nccl_home:+NCCL_HOME="$nccl_home"} all "$build/tests/check_relibra" \
	"$build/bench/cuda_gemm_bench"; then
	tail -n 30 "$work/build.log"
	fail "build" "make failed" "$work/build.log"
	finish 1
fi
# Compiler and linker warnings; make's own (a clock skew on a copied tree) are not the code's.
grep -E 'warning|error' "$work/build.log" 2>/dev/null | grep -vE '^make(\[[0-9]+\])?: ' > "$work/warnings.log"
if [ -s "$work/warnings.log" ]; then
	cat "$work/warnings.log"
	fail "build warnings" "the build has warnings" "$work/warnings.log"
fi
if ! "$bin" --version | grep -q '^backends:.* cuda'; then
	fail "build" "CUDA backend not built (is nvcc and NCCL under ${CUDA_HOME:-/usr/local/cuda}?)" "$work/build.log"
	finish 1
fi

say "GPU unit tests (suite cuda) and tests/cli/gpu.sh"
step 240 "$work/tests.log" env CK_RUN_SUITE=cuda RLB_TEST_ONLY=gpu \
	sh tests/run.sh "$build/tests/check_relibra" "$bin"
tests_rc=$?
cat "$work/tests.log"
unit=$(sed -n 's/^unit: \(.*\)$/\1/p' "$work/tests.log" | tail -n 1)
cli=$(grep -E '^(PASS|FAIL|SKIP): gpu' "$work/tests.log" | head -n 1)
wdiff=$(sed -n 's/.*max relative weight difference \([^,]*\),.*/\1/p' "$work/tests.log" | head -n 1)
# The suite has 4 plain tests and 7 GPU test runs, added only where the runtime sees a device.
gpu_runs=11
nrun=$(echo "$unit" | sed -n 's/^\([0-9]*\) run.*/\1/p')
if [ "${nrun:-0}" -lt $gpu_runs ]; then
	unit="${unit:-no result}: the GPU case did not run"
	# the log goes with the failure of tests/run.sh when there is one
	[ $tests_rc = 0 ] && t_log="$work/tests.log" || t_log=""
	fail "GPU unit tests" "the GPU case did not run (does the CUDA runtime see the GPU?)" "$t_log"
fi
if [ $tests_rc != 0 ]; then
	fail "GPU tests" "tests/run.sh: $(why)" "$work/tests.log"
fi
# The GEMM stages once more one call per row count (RLB_CUDA_GEMM=loop), the
# path of a cuBLAS without grouped GEMM; the run above took the default.
if step 120 "$work/loop.log" env CK_RUN_SUITE=cuda RLB_CUDA_GEMM=loop \
	RLB_TEST_SRCDIR="$top/tests" RLB_TEST_TMPDIR="$work" "$build/tests/check_relibra"; then
	unit_loop=$(sed -n 's/^unit: \(.*\)$/\1/p' "$work/loop.log" | tail -n 1)
	nrun=$(echo "$unit_loop" | sed -n 's/^\([0-9]*\) run.*/\1/p')
	if [ "${nrun:-0}" -lt $gpu_runs ]; then
		unit_loop="${unit_loop:-no result}: the GPU case did not run"
		fail "GPU unit tests (RLB_CUDA_GEMM=loop)" "the GPU case did not run" "$work/loop.log"
	fi
else
	unit_loop="failed"
	fail "GPU unit tests (RLB_CUDA_GEMM=loop)" "$(why)" "$work/loop.log"
fi

# An EPLB plan: its replicas stay on their GPUs from one micro-batch to the
# next, so their gradients accumulate there and go home once per run;
# --verify compares the final weights with the static plan's (bf16
# tolerance), which the losses alone would not tell.
say "cuda against cpu on tiny-2x2 (train-step, 4 virtual ranks, eplb plan)"
tcfg=configs/tiny-2x2.yaml
tset="--set workload.steps=2 --set workload.prompts_per_step=4"
if step 60 "$work/tiny.log" "$bin" capture -c $tcfg $tset --synthetic --seed 3 -o "$work/t.rrt" &&
   step 60 "$work/tiny.log" "$bin" plan -c $tcfg $tset --policy eplb -o "$work/t.rlp" "$work/t.rrt"; then
	for b in cpu cuda; do
		if step 90 "$work/tiny.$b.log" "$bin" train-step -c $tcfg $tset --trace "$work/t.rrt" \
			--plan "$work/t.rlp" --backend $b --virtual-ranks 4 --verify -o "$work/tiny.$b.json"; then
			cat "$work/tiny.$b.log"
			losses "$work/tiny.$b.json" > "$work/tiny.$b.loss"
		else
			fail "tiny-2x2 train-step ($b, --verify)" "$(why)" "$work/tiny.$b.log"
		fi
	done
	if ! step 90 "$work/tiny.loop.log" env RLB_CUDA_GEMM=loop "$bin" train-step -c $tcfg $tset \
		--trace "$work/t.rrt" --plan "$work/t.rlp" --backend cuda --virtual-ranks 4 --verify; then
		fail "tiny-2x2 train-step (cuda, RLB_CUDA_GEMM=loop, --verify)" "$(why)" "$work/tiny.loop.log"
	fi
	if [ -s "$work/tiny.cpu.loss" ] && [ -s "$work/tiny.cuda.loss" ]; then
		ldiff=$(paste "$work/tiny.cpu.loss" "$work/tiny.cuda.loss" | awk '
			{ d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1;
			  r = a > 0 ? d / a : d; if (r > m) m = r }
			END { printf "%.3g\n", m }')
		awk -v r="$ldiff" 'BEGIN { exit !(r <= 1e-2) }' ||
			fail "cuda vs cpu" "tiny-2x2 losses differ by $ldiff (more than 1e-2)"
	fi
else
	fail "tiny-2x2 capture and plan" "$(why)" "$work/tiny.log"
fi

# Four steps: the first pays the process's one-time costs inside its timed
# expert work (lazy loading of the kernels, cuBLAS's first calls, the
# scratch's growth), so the comparison sums the other three.
say "train-step --virtual-ranks 8, qwen3-30b-a3b shape (4 MoE layers), static vs relibra"
set="--set model.moe_layers=4 --set workload.steps=4 --set workload.prompts_per_step=8 --set parallel.micro_batch_tokens=4096"
if step 60 "$work/q.log" "$bin" capture -c $cfg $set --synthetic --seed 1 -o "$work/q.rrt"; then
	for p in static relibra; do
		if ! step 60 "$work/$p.plan.log" "$bin" plan -c $cfg $set --policy $p -o "$work/$p.rlp" \
			--summary "$work/$p.sum.json" "$work/q.rrt"; then
			fail "plan $p" "$(why)" "$work/$p.plan.log"
			continue
		fi
		if step 150 "$work/$p.train.log" "$bin" train-step -c $cfg $set --trace "$work/q.rrt" \
			--plan "$work/$p.rlp" --backend cuda --virtual-ranks 8 -o "$work/$p.train.json"; then
			cat "$work/$p.train.log"
		else
			fail "train-step $p" "$(why)" "$work/$p.train.log"
		fi
	done
else
	fail "capture" "$(why)" "$work/q.log"
fi
sim_s=$(after0 expert_s "$work/static.sum.json")
sim_r=$(after0 expert_s "$work/relibra.sum.json")
meas_s=$(after0 critical_path_s "$work/static.train.json")
meas_r=$(after0 critical_path_s "$work/relibra.train.json")
warm_s=$(at 0 critical_path_s "$work/static.train.json")
warm_r=$(at 0 critical_path_s "$work/relibra.train.json")
unheld=$(printf '%s / %s' "$(or_na "$(first "$work/static.train.json" unheld_spans)")" \
	"$(or_na "$(first "$work/relibra.train.json" unheld_spans)")")
loss_s=$(first "$work/static.train.json" last)
loss_r=$(first "$work/relibra.train.json" last)
# The plan moves work, not results: both runs end at the same loss (to bf16).
if [ -n "$loss_s" ] && [ -n "$loss_r" ] && ! awk -v a="$loss_s" -v b="$loss_r" \
	'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; exit !(d <= 1e-2 * m) }'; then
	fail "static vs relibra" "the runs end at different losses ($loss_s, $loss_r)"
fi
speed=$(awk -v a="$sim_s" -v b="$sim_r" -v c="$meas_s" -v d="$meas_r" \
	'BEGIN { if (a > 0 && b > 0 && c > 0 && d > 0) { s = a / b; m = c / d;
		 printf "%.3f %.3f %+.1f%%\n", s, m, 100 * (m / s - 1) } }')
if [ -n "$speed" ]; then
	sim_x=${speed%% *}; rest=${speed#* }; meas_x=${rest%% *}; gap=${rest#* }
fi

say "calibrate (one GPU)"
if step 120 "$work/cal.txt" "$bin" calibrate -c $cfg --gpus 1 --name gpu-check -o "$work/cal.yaml"; then
	cat "$work/cal.txt"
	cal_ok=1
	eff_max=$(sed -n 's/^  gemm_eff_max: //p' "$work/cal.yaml")
	half=$(sed -n 's/^  gemm_eff_half_rows: //p' "$work/cal.yaml")
	eff2k=$(awk '$1 == 2048 { print $4 }' "$work/cal.txt")
	eff16k=$(awk '$1 == 16384 { print $4 }' "$work/cal.txt")
else
	cat "$work/cal.txt"
	fail "calibrate" "$(why)" "$work/cal.txt"
fi

say "expert GEMM strategies (bench/cuda_gemm_bench)"
if [ ! -x "$build/bench/cuda_gemm_bench" ]; then
	fail "cuda_gemm_bench" "not built ($build/bench/cuda_gemm_bench)"
elif step 90 "$work/gemm.txt" "$build/bench/cuda_gemm_bench"; then
	cat "$work/gemm.txt"
	gemm_ok=1
else
	cat "$work/gemm.txt"
	fail "cuda_gemm_bench" "$(why)" "$work/gemm.txt"
fi

if [ -n "$failed" ]; then
	finish 1
fi
finish 0
