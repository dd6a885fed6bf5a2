# train_step.sh - relibra train-step on 8 virtual ranks (tiny-2x2 as 2 nodes
# of 4 GPUs): every policy's plan, data control included, gives the static
# plan's training result (--verify); metrics JSON; an ungated FFN's two
# matrices; step selection; usage.
. "$RLB_TOP/tests/cli/lib.sh"

cfg="$CONFIGS/tiny-2x2.yaml"
set8="--set cluster.gpus_per_node=4 --set parallel.ep_size=8"
run capture -c "$cfg" $set8 --set workload.steps=2 --set workload.prompts_per_step=4 --synthetic --seed 2 -o t.rrt
expect_status 0

for p in static eplb eplb-oracle replicate relibra dc; do
	if [ "$p" = dc ]; then
		run plan -c "$cfg" $set8 --policy relibra --data-control -o "$p.rlp" t.rrt
	else
		run plan -c "$cfg" $set8 --policy "$p" -o "$p.rlp" t.rrt
	fi
	expect_status 0
	run train-step -c "$cfg" $set8 --trace t.rrt --plan "$p.rlp" --virtual-ranks 8 \
		--verify -o "$p.json"
	expect_status 0
	expect_out "on tiny, 8 ranks (virtual), cpu backend"
	expect_out "verify: agrees with the static plan"
	[ ! -e "$p.json.tmp" ] || fail "$p.json.tmp left behind"
	for key in '"schema": "relibra.result/1"' '"kind": "train-step"' '"step_time_s"' \
		'"tokens_per_s"' '"critical_path_s"' '"breakdown"' '"expert_s"' \
		'"per_step"' '"cells"' '"compute_cpu_s"' '"replica_bytes"' \
		'"migration_bytes"' '"verify"' '"ok": true'; do
		grep -qF "$key" "$p.json" || fail "$p.json lacks $key"
	done
done
grep -qF '"policy": "eplb-oracle"' eplb-oracle.json || fail "policy not in the metrics"
# the CPU backend's plans agree exactly: no tensor differs
grep -qF '"worst_tensor": null' relibra.json || fail "worst_tensor is not null when nothing differs"
grep -qF '"worst_loss_step": null' relibra.json || fail "worst_loss_step is not null when no loss differs"
# An ideal plan is a bound, not a placement: refused before any work.
run plan -c "$cfg" $set8 --policy ideal -o ideal.rlp t.rrt
expect_status 0
run train-step -c "$cfg" $set8 --trace t.rrt --plan ideal.rlp --virtual-ranks 8 -o ideal.json
expect_status 1
expect_err "relibra train-step: plan 'ideal.rlp' is of policy ideal, a bound the simulator computes, not a placement to run (plan static for the static layout)"
[ ! -e ideal.json ] && [ ! -e ideal.json.tmp ] || fail "metrics written for an ideal plan"
# A plan made with --relay runs rank to rank: its measurement is labelled
# without the relay, with a note, so report pairs it with the direct
# dispatch's simulation.
run plan -c "$cfg" $set8 --policy relibra --relay -o relay.rlp --summary relay-sim.json t.rrt
expect_status 0
run train-step -c "$cfg" $set8 --trace t.rrt --plan relay.rlp --virtual-ranks 8 -o relay.json
expect_status 0
expect_err "note: the plan was made with --relay; train-step exchanges rank to rank, so it ran, and is labelled, without the relayed dispatch"
grep -qF '"label": "relibra"' relay.json || fail "the relay plan's measurement is labelled with the relay"
run train-step -c "$cfg" $set8 --trace t.rrt --plan relibra.rlp --virtual-ranks 8
expect_status 0
if grep -q "relay" err; then fail "a plan without the relay got the relay's note"; fi
# The EPLB plans put several copies of an expert on one GPU ("GPUxN:quota"
# in the dump), so --verify above covered their split over copies.
run inspect --dump eplb-oracle.rlp
expect_status 0
grep -qE ' [0-9]+x[0-9]+:[0-9]+' out || fail "the eplb-oracle plan has no GPU with several copies of an expert"
# 8 ranks, 4 layers: every (micro-batch, layer) has 8 cells.
n=$(grep -c '"compute_cpu_s"' relibra.json)
[ $((n % 32)) -eq 0 ] && [ "$n" -gt 0 ] || fail "$n cells is not a multiple of 8 ranks x 4 layers"

# The losses do not depend on the plan.
l1=$(sed -n 's/.*expert critical path.*loss \(.*\)$/\1/p' out)
run train-step -c "$cfg" $set8 --trace t.rrt --plan static.rlp --virtual-ranks 8
expect_status 0
expect_out "loss $l1"
# Virtual ranks in a job of one rank (mpirun -np 1 sets these): the same
# run, the ranks agreeing in process (the agreement of MPI ranks read and
# wrote past one rank's entry).
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 PMIX_RANK=0 \
	"$RELIBRA" train-step -c "$cfg" $set8 --trace t.rrt --plan static.rlp --virtual-ranks 8 \
	> out 2> err
status=$?
expect_status 0
expect_out "8 ranks (virtual)"
expect_out "loss $l1"

# An ungated FFN (model.gated_ffn: false, squared ReLU) runs two matrices
# where the gated runs three: under the same plan (so the same placement)
# the replica weights, gradients and migrations move exactly 2/3 of the
# gated run's bytes, the all-to-all the same; the run agrees with the static
# plan, and a second run writes the same metrics but for the timings.
ung="--set model.gated_ffn=false"
for r in 1 2; do
	run train-step -c "$cfg" $set8 $ung --trace t.rrt --plan relibra.rlp --virtual-ranks 8 \
		--verify -o ung$r.json
	expect_status 0
	expect_out "verify: agrees with the static plan"
	sed -n 's/.*expert critical path.*loss \(.*\)$/\1/p' out > ung$r.loss
done
# bytes_per_step KEY FILE
bps() {
	sed -n '/"bytes_per_step"/,/}/s/^ *"'"$1"'": *\([0-9.e+]*\),\{0,1\}$/\1/p' "$2"
}
for k in a2a replica grad migration; do
	g=$(bps $k relibra.json)
	u=$(bps $k ung1.json)
	[ "$k" = a2a ] && want=1 || want="2/3"
	awk -v g="$g" -v u="$u" -v k="$k" 'BEGIN { exit !(g > 0 && (k == "a2a" ? u == g : 3 * u == 2 * g)) }' ||
		fail "bytes_per_step.$k: $u ungated, $g gated, not $want of it"
done
grep -v '_s": ' ung1.json > ung1.fixed
grep -v '_s": ' ung2.json | sed 's/ung2\.json/ung1.json/' > ung2.fixed
cmp -s ung1.fixed ung2.fixed || { diff ung1.fixed ung2.fixed | head; fail "two ungated runs differ"; }
cmp -s ung1.loss ung2.loss || fail "two ungated runs have other losses"
[ "$(cat ung1.loss)" != "$l1" ] || fail "the ungated run has the gated run's losses"
# The cuda backend runs SwiGLU experts only: refused before any work or
# output, with or without CUDA built in.
run train-step -c "$cfg" $set8 $ung --trace t.rrt --plan relibra.rlp --virtual-ranks 8 \
	--backend cuda -o cuda-ung.json
expect_status 1
expect_err "relibra train-step: the cuda backend runs gated (SwiGLU) experts only; model.gated_ffn: false runs on --backend cpu"
[ ! -e cuda-ung.json ] && [ ! -e cuda-ung.json.tmp ] || fail "metrics written for a refused run"

# One step.
run train-step -c "$cfg" $set8 --trace t.rrt --plan relibra.rlp --virtual-ranks 8 --steps 1
expect_status 0
expect_out "  1 step,"

# A truncated trace (its index and seek table cut off) with a plan made from
# it: trained, with a warning that its last step may lack sequences.
head -c $(($(wc -c < t.rrt) - 100)) t.rrt > cut.rrt
run plan -c "$cfg" $set8 --policy relibra -o cut.rlp cut.rrt
expect_status 0
run train-step -c "$cfg" $set8 --trace cut.rrt --plan cut.rlp --virtual-ranks 8 -o cut.json
expect_status 0
expect_err "relibra train-step: warning: trace 'cut.rrt' is truncated (its writer did not finish): step 1, the last it holds, may lack sequences"
expect_err "hint: --steps 0:0 leaves it out"
grep -q '"truncated": true' cut.json || fail "the metrics of a truncated trace do not say so"
grep -q '"truncated": false' relibra.json || fail "the metrics of a whole trace lack truncated: false"

# Help and usage errors.
run train-step -h
expect_status 0
expect_out "usage: relibra train-step"
run help train-step
expect_status 0
run train-step -c "$cfg" --trace t.rrt
expect_status 2
expect_err "relibra train-step: --trace and --plan are required"
run train-step -c "$cfg" --trace t.rrt --plan relibra.rlp --backend tpu
expect_status 2
expect_err "relibra train-step: unknown backend 'tpu' (cpu or cuda)"
run train-step -c "$cfg" --trace t.rrt --plan relibra.rlp --virtual-ranks 0
expect_status 2
run train-step -c "$cfg" --trace t.rrt --plan relibra.rlp --bogus
expect_status 2
expect_err "unknown option '--bogus'"
exit 0
