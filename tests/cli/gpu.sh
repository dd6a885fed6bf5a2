# gpu.sh - the CUDA backend and `relibra calibrate`.  Without a GPU: the
# calibrate usage errors and its clear failure, then a skip (exit 77).
# With a GPU and CUDA built in: train-step --backend cuda against cpu on
# configs/tiny-2x2.yaml (losses within the bf16 tolerance 1e-2; final
# weights too, but for up to 1% of a tensor's elements that Adam's sign
# flips move by at most 2 lr per step: the unit runner's "cuda" suite; and
# the losses of the CLI runs), calibrate writing a loadable cluster
# section, and bench/cuda_gemm_bench's table (its usage errors, and its
# skip without a GPU, everywhere).
. "$RLB_TOP/tests/cli/lib.sh"

cfg="$CONFIGS/tiny-2x2.yaml"

# ---- everywhere ----
run calibrate -h
expect_status 0
expect_out "usage: relibra calibrate [-h] -c CONFIG"
run calibrate --set model.preset=qwen3-30b-a3b
expect_status 2
expect_err "relibra calibrate: -c CONFIG is required"
run calibrate -c "$cfg" --rows 100:200
expect_status 2
expect_err "relibra calibrate: --rows '100:200': powers of two, the first not above the second"
run calibrate -c "$cfg" --experts 0
expect_status 2
expect_err "relibra calibrate: --experts"
# a --rows that is not A:B says so, whichever part is missing
for r in :64 64: 1:2:4; do
	run calibrate -c "$cfg" --rows "$r"
	expect_status 2
	expect_err "relibra calibrate: --rows '$r': expected A:B"
done
# -o is checked before the (long) measurement: never the config itself
cp "$cfg" my.yaml
run calibrate -c my.yaml -o my.yaml
expect_status 2
expect_err "relibra calibrate: -o 'my.yaml' is also the config: choose another path"
cmp -s my.yaml "$cfg" || fail "calibrate -o replaced its config"
run calibrate -c "$cfg" -o nodir/cal.yaml
expect_status 1
expect_err "relibra calibrate: -o 'nodir/cal.yaml': no directory 'nodir'"
# so is the cluster name it would write
run calibrate -c "$cfg" --name 'my h200'
expect_status 2
expect_err "relibra calibrate: --name: cluster name 'my h200' must be letters, digits, '-', '_' or '.'"
# an empty --name is refused, not taken for the config's name
run calibrate -c "$cfg" --name '' -o cal.yaml
expect_status 2
expect_err "relibra calibrate: --name: an empty name"
[ ! -e cal.yaml ] || fail "cal.yaml written for an empty --name"
run calibrate -c "$cfg" --set 'cluster.name=my h200'
expect_status 1
expect_err "relibra calibrate: cluster name 'my h200' must be letters, digits, '-', '_' or '.'"
expect_err "hint: give the cluster a plain name with --name NAME"

# RLB_CUDA_GEMM is read by the commands (lib/ takes it as an option) and
# checked before any work: by calibrate, and by train-step for the cuda
# backend only, with or without CUDA built in.
run capture -c "$cfg" --set workload.steps=1 --set workload.prompts_per_step=2 \
	--synthetic --seed 1 -o env.rrt
expect_status 0
run plan -c "$cfg" --policy relibra -o env.rlp env.rrt
expect_status 0
export RLB_CUDA_GEMM=bogus
run calibrate -c "$cfg" -o cal.yaml
expect_status 1
expect_err "relibra calibrate: RLB_CUDA_GEMM: expected grouped or loop, got 'bogus'"
[ ! -e cal.yaml ] || fail "cal.yaml written with a bad RLB_CUDA_GEMM"
run train-step -c "$cfg" --backend cuda --virtual-ranks 4 --trace env.rrt --plan env.rlp
expect_status 1
expect_err "relibra train-step: RLB_CUDA_GEMM: expected grouped or loop, got 'bogus'"
run train-step -c "$cfg" --virtual-ranks 4 --trace env.rrt --plan env.rlp
expect_status 0
unset RLB_CUDA_GEMM

# bench/cuda_gemm_bench: its usage errors anywhere
gb="$RLB_BUILD/bench/cuda_gemm_bench"
[ -x "$gb" ] || fail "$gb was not built"
"$gb" -e 65 > out 2> err && fail "cuda_gemm_bench -e 65 succeeded"
grep -q "cuda_gemm_bench: -e '65': expected a positive integer of at most 64" err ||
	{ cat err; fail "cuda_gemm_bench -e 65: no clear error"; }
"$gb" -r 0 > out 2> err && fail "cuda_gemm_bench -r 0 succeeded"
grep -q "expected a positive integer" err || { cat err; fail "cuda_gemm_bench -r 0: no clear error"; }
"$gb" extra > out 2> err && fail "cuda_gemm_bench extra succeeded"
grep -q "^usage: cuda_gemm_bench" err || { cat err; fail "cuda_gemm_bench extra: no usage"; }

cuda_built=0
"$RELIBRA" --version | grep -q '^backends:.* cuda' && cuda_built=1
has_gpu=0
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && has_gpu=1

if [ $cuda_built = 0 ] || [ $has_gpu = 0 ]; then
	# The failure is clear and leaves no output file.
	run calibrate -c "$cfg" -o cal.yaml
	expect_status 1
	if [ $cuda_built = 0 ]; then
		expect_err "relibra calibrate: the CUDA backend is not built in (backends: cpu)"
	else
		expect_err "relibra calibrate: no CUDA device"
	fi
	expect_err "hint: run on a machine with an NVIDIA GPU"
	[ ! -e cal.yaml ] || fail "cal.yaml written without a measurement"
	"$gb" -n 1 > out 2> err || { cat out err; fail "cuda_gemm_bench failed without a GPU"; }
	grep -q "^cuda_gemm_bench: skipped: " out || { cat out; fail "cuda_gemm_bench did not say it skipped"; }
	[ $cuda_built = 0 ] && skip "GPU tests skipped: relibra is built without CUDA"
	skip "GPU tests skipped: no GPU found by 'nvidia-smi -L'"
fi

# ---- on a GPU ----
set4="--set workload.steps=2 --set workload.prompts_per_step=4"
run capture -c "$cfg" $set4 --synthetic --seed 3 -o t.rrt
expect_status 0
run plan -c "$cfg" $set4 --policy relibra -o p.rlp t.rrt
expect_status 0
for b in cpu cuda; do
	run train-step -c "$cfg" $set4 --trace t.rrt --plan p.rlp --backend $b \
		--virtual-ranks 4 -o $b.json
	expect_status 0
	expect_out "$b backend"
done
# Per-step losses of the two backends within 1e-2.
for b in cpu cuda; do
	tr ',{}' '\n\n\n' < $b.json | sed -n 's/^ *"loss": *\([-0-9.eE+][-0-9.eE+]*\) *$/\1/p' > $b.loss
	[ -s $b.loss ] || fail "no per-step losses in $b.json"
done
paste cpu.loss cuda.loss | awk '{ d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1;
	if (d > 1e-2 * a) { print "loss " $1 " (cpu) vs " $2 " (cuda)"; bad = 1 } }
	END { exit bad }' || fail "cuda losses differ from cpu by more than 1e-2"

# Final weights: the unit runner's GPU case (cuda against cpu on tiny-2x2).
runner=""
for r in "$(dirname "$RELIBRA")/tests/check_relibra" "$RLB_TOP/build/tests/check_relibra"; do
	[ -x "$r" ] && { runner=$r; break; }
done
[ -n "$runner" ] || fail "unit runner not found next to $RELIBRA or in build/"
CK_RUN_SUITE=cuda CK_RUN_CASE=gpu RLB_TEST_SRCDIR="$RLB_TOP/tests" \
	RLB_TEST_TMPDIR="$TEST_TMP" "$runner" > unit.log 2>&1 || { cat unit.log; fail "GPU unit tests"; }
grep -q "^unit: [1-9][0-9]* run, 0 failed" unit.log || { cat unit.log; fail "GPU unit tests did not run"; }
grep "cuda vs cpu" unit.log || true

# calibrate: a short sweep, one GPU, on a real expert shape and peak (tiny's
# 64 x 32 experts barely grow with the rows, and its 10 GFLOP/s peak would
# put the fitted efficiency out of range); the fragment loads as a cluster
# preset.
mkdir -p clusters
run calibrate -c "$CONFIGS/qwen3-30b-a3b-h100-1x8.yaml" --experts 4 --rows 256:2048 \
	--repeats 3 --gpus 1 --name measured -o clusters/measured.yaml
expect_status 0
expect_out "rows/expert"
expect_out "gemm_eff_max"
grep -q '^  gemm_eff_max: ' clusters/measured.yaml || fail "no gemm_eff_max in the fragment"
printf 'preset: tiny-2x2\ncluster:\n  preset: measured\n  nodes: 2\n  gpus_per_node: 2\n' > with.yaml
run config -c with.yaml
expect_status 0
expect_out '  name: "measured"'

# cuda_gemm_bench: a small case, every strategy, rows kind and pass
"$gb" -e 4 -r 256 -n 3 > out 2> err || { cat out err; fail "cuda_gemm_bench failed"; }
for g in loop grouped; do
	for r in varied equal; do
		for p in forward backward; do
			grep -q "^$g  *$r  *$p " out || { cat out; fail "cuda_gemm_bench: no $g $r $p line"; }
		done
	done
done
exit 0
