# train_step_errors.sh - relibra train-step refuses mismatched inputs before
# any work, with one clear message, and a failing rank ends the run.
. "$RLB_TOP/tests/cli/lib.sh"

cfg="$CONFIGS/tiny-2x2.yaml"
run capture -c "$cfg" --set workload.steps=2 --synthetic --seed 4 -o t.rrt
expect_status 0
run capture -c "$cfg" --set workload.steps=2 --synthetic --seed 5 -o other.rrt
expect_status 0
run plan -c "$cfg" --policy relibra -o p.rlp t.rrt
expect_status 0

# Wrong number of ranks (EP size 4).
run train-step -c "$cfg" --trace t.rrt --plan p.rlp
expect_status 1
expect_err "relibra train-step: the job has 1 rank, parallel.ep_size is 4"
expect_err "hint: mpirun -np 4 relibra train-step"
run train-step -c "$cfg" --trace t.rrt --plan p.rlp --virtual-ranks 2
expect_status 1
expect_err "relibra train-step: the job has 2 ranks, parallel.ep_size is 4"
expect_empty out
# 3 ranks: the count is the error, not the 2 GPUs per node that do not divide it.
run train-step -c "$cfg" --trace t.rrt --plan p.rlp --virtual-ranks 3
expect_status 1
expect_err "relibra train-step: the job has 3 ranks, parallel.ep_size is 4"

# A seed that the metrics could not record (JSON int64): a usage error.
run train-step -c "$cfg" --trace t.rrt --plan p.rlp --virtual-ranks 4 --seed 9223372036854775808
expect_status 2
expect_err "relibra train-step: --seed: 9223372036854775808 is out of range [0, 9223372036854775807]"

# A plan of another trace, of another config, steps out of range.
run train-step -c "$cfg" --trace other.rrt --plan p.rlp --virtual-ranks 4
expect_status 1
expect_err "relibra train-step: plan does not match the trace: 'header hash' is 0x"
expect_err "in the trace (plan 'p.rlp', trace 'other.rrt')"
# A plan that carries its schedule (data control) and a trace of the same
# header and steps whose steps have more sequences: the schedule must cover
# every sequence of the step, not only the first ones.
run capture -c "$cfg" --set workload.steps=2 --set workload.prompts_per_step=9 \
	--synthetic --seed 4 -o more.rrt
expect_status 0
run plan -c "$cfg" --policy relibra --data-control -o dc.rlp t.rrt
expect_status 0
run train-step -c "$cfg" --trace more.rrt --plan dc.rlp --virtual-ranks 4
expect_status 1
expect_err "relibra train-step: the plan's schedule does not match the trace: step 0: sequence 32: tokens 0..482 are in no chunk (plan 'dc.rlp', trace 'more.rrt')"
run train-step -c "$cfg" --set parallel.micro_batch_tokens=256 --trace t.rrt --plan p.rlp \
	--virtual-ranks 4
expect_status 1
expect_err "relibra train-step: plan does not match the config: 'parallel.micro_batch_tokens' is 512 in the plan, 256 in the config (plan 'p.rlp', config '$cfg')"
# The dense layers ahead of the MoE layers are part of the trace's model
# shape, which the config must have, as for plan; the plan does not record
# them.
run train-step -c "$cfg" --set model.first_dense_layers=1 --set model.dense_ffn=64 \
	--trace t.rrt --plan p.rlp --virtual-ranks 4
expect_status 1
expect_err "relibra train-step: the config does not match the trace: 'model.first_dense_layers' is 1 in the config, 0 in the trace"
run train-step -c "$cfg" --trace t.rrt --plan p.rlp --virtual-ranks 4 --steps 7:9
expect_status 1
expect_err "relibra train-step: no step of the trace in 7:9 (trace 't.rrt' has steps 0..1)"
# A plan of some steps: the trace's other steps are named with the plan's.
run plan -c "$cfg" --policy relibra --steps 1:1 -o p1.rlp t.rrt
expect_status 0
run train-step -c "$cfg" --trace t.rrt --plan p1.rlp --virtual-ranks 4 -o m1.json
expect_status 1
expect_err "relibra train-step: step 0 of the trace is not in the plan 'p1.rlp' (it has 1 step, 1..1)"
[ ! -e m1.json ] && [ ! -e m1.json.tmp ] || fail "a failed train-step left m1.json"
run train-step -c "$cfg" --trace t.rrt --plan p1.rlp --virtual-ranks 4 --steps 1:1
expect_status 0
run train-step -c "$cfg" --trace missing.rrt --plan p.rlp --virtual-ranks 4
expect_status 1
expect_err "relibra train-step: "
if ! "$RELIBRA" --version | grep -q 'backends: .*cuda'; then
	run train-step -c "$cfg" --trace t.rrt --plan p.rlp --virtual-ranks 4 --backend cuda
	expect_status 1
	expect_err "relibra train-step: backend 'cuda' is not built in"
fi

# An injected fault: the rank's error, status 1, no metrics file.
RELIBRA_FAULT=rank:3:step:1 "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan p.rlp \
	--virtual-ranks 4 -o m.json > out 2> err
status=$?
expect_status 1
expect_err "relibra train-step: rank 3: injected fault at step 1"
[ ! -e m.json ] && [ ! -e m.json.tmp ] || fail "metrics written by a failed run"
RELIBRA_FAULT=rank3 "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan p.rlp \
	--virtual-ranks 4 > out 2> err
status=$?
expect_status 1
expect_err "relibra train-step: RELIBRA_FAULT: expected rank:R:step:S[:hang|:hang-end], not 'rank3'"
# A fault that cannot happen, a timeout that is no number: refused.
RELIBRA_FAULT=rank:9:step:0 "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan p.rlp \
	--virtual-ranks 4 > out 2> err
status=$?
expect_status 1
expect_err "relibra train-step: RELIBRA_FAULT: rank 9 is not below the 4 ranks"
RELIBRA_FAULT=rank:1:step:1 "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan p.rlp \
	--virtual-ranks 4 --steps 0:0 > out 2> err
status=$?
expect_status 1
expect_err "the injected fault's step 1 is not among the steps run (0 to 0)"
RELIBRA_TIMEOUT=soon "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan p.rlp \
	--virtual-ranks 4 > out 2> err
status=$?
expect_status 1
expect_err "relibra train-step: RELIBRA_TIMEOUT: expected a number, got 'soon' (seconds; 0: no limit)"
# -o that cannot be written: refused before any work.
mkdir m.json.tmp
run train-step -c "$cfg" --trace t.rrt --plan p.rlp --virtual-ranks 4 -o m.json
expect_status 1
expect_err "relibra train-step: cannot create 'm.json.tmp': Is a directory"
[ ! -s out ] || { cat out; fail "train-step ran before refusing -o"; }
rmdir m.json.tmp
# A model so deep that its synthetic hidden states overflow fp32: a
# warning without --verify (status 0: the times stand), and --verify
# says that nothing can be compared (status 1), not that the plans differ.
deep="--set model.moe_layers=256 --set model.experts=4 --set model.topk=1"
run capture -c "$cfg" $deep --set workload.steps=1 --set workload.prompts_per_step=2 \
	--set workload.samples_per_prompt=2 --set workload.len_median=32 --synthetic -o deep.rrt
expect_status 0
run plan -c "$cfg" $deep --policy relibra -o deep.rlp deep.rrt
expect_status 0
run train-step -c "$cfg" $deep --trace deep.rrt --plan deep.rlp --virtual-ranks 4
expect_status 0
expect_out "loss nan -> nan"
expect_err "relibra train-step: warning: the loss is not finite: the times stand, the training result does not (the hidden states overflow fp32 over the 256 MoE layers, "
run train-step -c "$cfg" $deep --trace deep.rrt --plan deep.rlp --virtual-ranks 4 --verify
expect_status 1
expect_out "verify: cannot compare: the static plan's own loss is not finite from step 0"
expect_err "relibra train-step: --verify cannot compare: the static plan's own loss is not finite from step 0 ("
! grep -q "differs" err || fail "a diverged run was said to differ: $(cat err)"

# A model larger than the machine: refused before anything is allocated.
run train-step -c "$cfg" --set model.hidden=1048576 --set model.expert_ffn=1048576 \
	--trace t.rrt --plan p.rlp --virtual-ranks 4 -o m.json
expect_status 1
expect_err "relibra train-step: 64 home experts of 3298534883328 parameters need 4222124.7 GB, more than the machine's "
[ ! -e m.json ] && [ ! -e m.json.tmp ] || fail "a refused model left m.json"
# -o that fails at the end (a full device): the error, status 1, and no
# summary on standard output, which would read as a complete run.
if [ -w /dev/full ]; then
	run train-step -c "$cfg" --trace t.rrt --plan p.rlp --virtual-ranks 4 -o /dev/full
	expect_status 1
	expect_err "relibra train-step: cannot write '/dev/full': No space left on device"
	[ ! -s out ] || { cat out; fail "a summary printed for a run whose metrics failed"; }
fi

# -o may not name an input: refused before any work.
cp p.rlp keep.rlp
run train-step -c "$cfg" --trace t.rrt --plan keep.rlp --virtual-ranks 4 -o keep.rlp
expect_status 2
expect_err "relibra train-step: -o 'keep.rlp' is also the plan: choose another path"
cmp -s p.rlp keep.rlp || fail "train-step -o PLAN wrote over the plan"
# A hang of a virtual rank would hang the one process: refused.
RELIBRA_FAULT=rank:1:step:0:hang "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan p.rlp \
	--virtual-ranks 4 > out 2> err
status=$?
expect_status 1
expect_err "relibra train-step: RELIBRA_FAULT: a hang needs ranks in processes of their own (mpirun)"
# The result JSON of plan --summary where the plan goes: named as such.
run plan -c "$cfg" --policy static --summary s.json t.rrt
expect_status 0
run train-step -c "$cfg" --trace t.rrt --plan s.json --virtual-ranks 4 -o wrong.json
expect_status 1
expect_err "relibra train-step: plan 's.json': header at offset 0: the file is a relibra result (the JSON of plan --summary or train-step -o), not a relibra plan"
[ ! -e wrong.json ] && [ ! -e wrong.json.tmp ] || fail "a refused plan left output"
exit 0
