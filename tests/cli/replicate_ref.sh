# replicate_ref.sh - relibra's replication plans against a second
# implementation of the planner written from its documentation alone
# (tests/replicate_ref.py): every (micro-batch, layer, expert)'s instances
# and quotas, for the replicate and relibra policies, on synthetic traces
# of several cluster shapes and on crafted cells that tell the search's
# roundings and the tie-breaks apart.
. "$RLB_TOP/tests/cli/lib.sh"

command -v python3 > /dev/null 2>&1 ||
	skip "python3 is not installed: the reference replication planner cannot run"

ref="$RLB_TOP/tests/replicate_ref.py"
cfg="$CONFIGS/tiny-2x2.yaml"
one4="--set cluster.nodes=1 --set cluster.gpus_per_node=4"
two4="--set cluster.nodes=2 --set cluster.gpus_per_node=4 --set parallel.ep_size=8"
four2="--set cluster.nodes=4 --set cluster.gpus_per_node=2 --set parallel.ep_size=8"

n=0
# check CONFIG TRACE PLAN-OPTIONS...: plan, then compare with the reference.
# --set options go to both.
check() {
	c=$1 t=$2
	shift 2
	n=$((n + 1))
	refopts=$(set_opts "$@")
	"$RELIBRA" plan -c "$c" "$@" --no-timing -o "p$n.rlp" "$t" \
		> /dev/null 2> err || { cat err; fail "plan $*"; }
	# shellcheck disable=SC2086
	python3 "$ref" --relibra "$RELIBRA" -c "$c" $refopts --trace "$t" \
		--plan "p$n.rlp" > out 2>&1 ||
		{ cat out; fail "the reference planner disagrees with plan $*"; }
}

run capture -c "$cfg" --set workload.steps=2 --synthetic --seed 1 -o t.rrt
expect_status 0
# shellcheck disable=SC2086
run capture -c "$cfg" $two4 --set workload.steps=1 --synthetic --seed 2 -o t8.rrt
expect_status 0

check "$cfg" t.rrt --policy replicate
# shellcheck disable=SC2086
check "$cfg" t.rrt --policy replicate --pack ffd $one4 \
	--set balancer.min_tokens_per_replica=0 --set cluster.gemm_eff_half_rows=0 \
	--set parallel.recompute=true
check "$cfg" t.rrt --policy relibra --pack dynamic \
	--set balancer.replica_slots=3 --set balancer.min_tokens_per_replica=1 \
	--set cluster.gemm_eff_half_rows=16
check "$cfg" t.rrt --policy relibra --no-replicate
# shellcheck disable=SC2086
check "$cfg" t8.rrt --policy relibra --no-reorder $four2 \
	--set balancer.min_tokens_per_replica=64 --set cluster.gemm_eff_half_rows=0
# shellcheck disable=SC2086
check "$cfg" t8.rrt --policy replicate $two4 --set balancer.replica_slots=1 \
	--set balancer.min_tokens_per_replica=0 --set parallel.micro_batch_tokens=2048 \
	--set cluster.gemm_eff_half_rows=16.7

# Crafted cells, one micro-batch each, on one node of 8 GPUs, experts 2x
# and 2x+1 at home on GPU x, all of an expert's rows from its home GPU:
# in the first four the greedy's success is not monotone in T, so that
# rounding up the bisection's midpoint (cells 1, 2) or d (cell 4), or
# stepping lo + d, lo + 2d, lo + 4d (cell 3), gives other plans; in the
# last four so does breaking the ties of experts, donors, coldest and
# best-fit receivers the other way.  m = 4 (the gradient term is 0 at this
# peak), o = 8, R = 2.
crafted="--set model.experts=16 --set model.topk=1 --set model.moe_layers=1
	--set cluster.nodes=1 --set cluster.gpus_per_node=8 --set parallel.ep_size=8
	--set cluster.peak_tflops=0.00001 --set balancer.replica_slots=2
	--set balancer.min_tokens_per_replica=4 --set cluster.gemm_eff_half_rows=8"
python3 - <<'EOF' || fail "cannot write the crafted trace"
import json
cells = [
    [2, 20, 40, 3, 30, 5, 100, 100, 200, 3000, 5, 1000, 30, 900, 80, 1000],
    [900, 300, 600, 5, 5, 3, 1, 30, 120, 0, 100, 1000, 40, 900, 30, 3000],
    [20, 300, 300, 120, 200, 120, 10, 5, 300, 100, 200, 2, 100, 0, 2, 600],
    [0, 30, 1000, 1, 120, 300, 100, 0, 10, 20, 120, 40, 40, 600, 600, 0],
    [40, 300, 80, 200, 300, 300, 100, 300, 40, 200, 300, 200, 20, 40, 200, 20],
    [20, 40, 80, 80, 80, 100, 300, 10, 80, 100, 600, 40, 40, 40, 300, 40],
    [10, 600, 20, 300, 40, 40, 200, 10, 300, 80, 20, 20, 80, 40, 100, 20],
    [40, 20, 300, 20, 10, 20, 300, 10, 20, 20, 10, 20, 20, 200, 300, 10],
]
seqs, mbs = [], []
with open("c.jsonl", "w") as fp:
    for load in cells:
        mb = []
        for x in range(8):
            ids = [e for e in (2 * x, 2 * x + 1) for _ in range(load[e])]
            # interleave the two experts: the order does not matter
            ids = ids[::2] + ids[1::2]
            mb.append([[len(seqs), 0, len(ids)]])
            seqs.append(ids)
            fp.write(json.dumps({"step": 0, "experts": [[[e]] for e in ids]}) + "\n")
        mbs.append(mb)
with open("c.json", "w") as fp:
    json.dump({"schema": "relibra.schedule/1",
               "steps": [{"step": 0, "micro_batches": mbs}]}, fp)
EOF
# shellcheck disable=SC2086
run capture -c "$cfg" $crafted --from jsonl c.jsonl -o c.rrt
expect_status 0
# shellcheck disable=SC2086
check "$cfg" c.rrt --policy replicate --schedule c.json $crafted

# The comparison fails on one quota moved from a home copy to its replica.
"$RELIBRA" inspect --json --dump p1.rlp > p1.json || fail "cannot dump p1.rlp"
python3 - p1.json > bad.json 2> cell <<'EOF' || fail "cannot edit the plan"
import json, sys
d = json.load(open(sys.argv[1]))
for st in d["steps"]:
    for m, mb in enumerate(st["instances"]):
        for l, lay in enumerate(mb):
            for e, cell in enumerate(lay):
                if len(cell) > 1:
                    cell[0][1] -= 1
                    cell[1][1] += 1
                    print("step %d mb %d layer %d expert %d" % (st["step"], m, l, e),
                          file=sys.stderr)
                    json.dump(d, sys.stdout)
                    sys.exit(0)
sys.exit("no replica in p1.rlp")
EOF
python3 "$ref" --relibra "$RELIBRA" -c "$cfg" --trace t.rrt --plan-json bad.json \
	> out 2>&1 && fail "the reference accepted a changed quota"
grep -q "^DIFF $(cat cell): " out ||
	{ cat out; fail "the reference did not name the changed cell"; }
grep -q '^1 of [0-9]* cells differ$' out ||
	{ cat out; fail "the reference found other differences"; }
exit 0
