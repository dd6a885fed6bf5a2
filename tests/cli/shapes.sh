# shapes.sh - unusual but valid shapes through capture, plan (every policy),
# inspect and train-step --verify: one GPU, one GPU per node, a prime GPU
# and expert count with top-k = experts, a GPU count that is not a power of
# two with group-limited routing, one MoE layer after dense layers, a
# one-token micro-batch budget; and a shape that config must refuse.
. "$RLB_TOP/tests/cli/lib.sh"

cfg="$CONFIGS/tiny-2x2.yaml"
wl="--set workload.steps=2 --set workload.prompts_per_step=2 --set workload.samples_per_prompt=2
    --set workload.len_median=24 --set workload.len_min=1 --set workload.len_max=64
    --set workload.segment_min=2 --set workload.segment_max=16 --set workload.topics=8"

# shape NAME RANKS SETS...
shape() {
	name=$1 ranks=$2
	shift 2
	run capture -c "$cfg" $wl "$@" --synthetic -o "$name.rrt"
	expect_status 0
	for p in static eplb eplb-oracle replicate relibra dc ideal; do
		if [ "$p" = dc ]; then
			run plan -c "$cfg" "$@" --policy relibra --data-control --replica-slots 1 \
				--no-timing -o "$name-$p.rlp" "$name.rrt"
		else
			run plan -c "$cfg" "$@" --policy "$p" --no-timing -o "$name-$p.rlp" "$name.rrt"
		fi
		[ "$status" -eq 0 ] || { cat err; fail "$name: plan $p exited with $status"; }
		grep -qiE '(^|[^a-z])(-?nan|inf)([^a-z]|$)' out && { cat out; fail "$name: plan $p printed a NaN"; }
		run inspect --dump "$name-$p.rlp"
		[ "$status" -eq 0 ] || { cat err; fail "$name: inspect of the $p plan exited with $status"; }
		[ "$p" = ideal ] && continue
		run train-step -c "$cfg" "$@" --trace "$name.rrt" --plan "$name-$p.rlp" \
			--virtual-ranks "$ranks" --verify
		[ "$status" -eq 0 ] || { cat err; fail "$name: train-step of the $p plan exited with $status"; }
		expect_out "verify: agrees with the static plan"
	done
}

shape one 1 --set cluster.nodes=1 --set cluster.gpus_per_node=1 --set parallel.ep_size=1 \
	--set model.experts=1 --set model.topk=1
shape prime 5 --set cluster.nodes=5 --set cluster.gpus_per_node=1 --set parallel.ep_size=5 \
	--set model.experts=5 --set model.topk=5
shape groups 6 --set cluster.nodes=3 --set cluster.gpus_per_node=2 --set parallel.ep_size=6 \
	--set model.experts=12 --set model.expert_groups=4 --set model.topk_groups=1
shape layer 4 --set model.moe_layers=1 --set model.first_dense_layers=2 --set model.dense_ffn=16 \
	--set parallel.micro_batch_tokens=1 --set balancer.replica_slots=0

# topk above the experts of the groups a token may use: refused by config
run config -c "$cfg" --set model.expert_groups=16 --set model.topk_groups=1
expect_status 1
expect_err "relibra config: $cfg:11:3: 'model.topk' 2 exceeds 'model.topk_groups' 1 x 1 experts per group ('model.experts' 16 / 'model.expert_groups' 16)"
exit 0
