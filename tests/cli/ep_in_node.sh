# ep_in_node.sh - an EP group smaller than a node (EP 2 on one node of 4
# GPUs): it is one node of 2 GPUs to the planners, the cost model and
# train-step, and its plans fit any cluster with that EP topology.
. "$RLB_TOP/tests/cli/lib.sh"

cfg="$CONFIGS/tiny-2x2.yaml"
one="--set cluster.nodes=1 --set cluster.gpus_per_node=4 --set parallel.ep_size=2"
# shellcheck disable=SC2086
run capture -c "$cfg" $one --set workload.steps=2 --synthetic --seed 4 -o t.rrt
expect_status 0
for p in static eplb eplb-oracle replicate relibra ideal; do
	# shellcheck disable=SC2086
	run plan -c "$cfg" $one --policy $p --no-timing --json -o $p.rlp t.rrt
	expect_status 0
	python3 - out $p <<'PY' || fail "plan $p"
import json, sys
d = json.load(open(sys.argv[1]))
# one node: no RDMA, and relibra moves no expert between nodes
assert d["breakdown"]["a2a_rdma_s"] == 0, d["breakdown"]
assert d["migrated_experts"] == 0, d["migrated_experts"]
PY
done
# the same as the cluster of exactly one node of 2
run plan -c "$cfg" --set cluster.nodes=1 --set cluster.gpus_per_node=2 \
	--set parallel.ep_size=2 --policy relibra --no-timing --json -o same.rlp t.rrt
expect_status 0
cmp -s same.rlp relibra.rlp || fail "EP 2 of a node of 4 plans unlike a node of 2"
# the reference cost model agrees (its g is capped at the EP size)
if command -v python3 > /dev/null 2>&1; then
	# shellcheck disable=SC2086
	"$RELIBRA" plan -c "$cfg" $one --policy relibra --no-timing -o r.rlp --summary r.json t.rrt \
		> /dev/null || fail "plan for the reference"
	# shellcheck disable=SC2086
	python3 "$RLB_TOP/tests/costmodel_ref.py" --relibra "$RELIBRA" -c "$cfg" $one \
		--trace t.rrt --plan r.rlp --summary r.json > ref.out 2>&1 ||
		{ cat ref.out; fail "the reference cost model disagrees"; }
fi
# train-step runs the plan on 2 ranks and agrees with the static plan
# shellcheck disable=SC2086
run train-step -c "$cfg" $one --trace t.rrt --plan relibra.rlp --steps 0 --virtual-ranks 2 --verify
expect_status 0
expect_out "verify: agrees with the static plan"
# a cluster whose nodes split the EP group refuses the plan
run plan -c "$cfg" --set cluster.nodes=2 --set cluster.gpus_per_node=1 \
	--set parallel.ep_size=2 --policy relibra t.rrt
expect_status 0
run train-step -c "$cfg" --set cluster.nodes=2 --set cluster.gpus_per_node=1 \
	--set parallel.ep_size=2 --trace t.rrt --plan relibra.rlp --virtual-ranks 2
expect_status 1
expect_err "cluster.gpus_per_node"
exit 0
