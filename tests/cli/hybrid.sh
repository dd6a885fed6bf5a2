# hybrid.sh - a model given layer by layer (model.layer_pattern, the
# Nemotron-H letters): capture keeps the rows of its 'E' layers wherever
# they are, in every numbering the Megatron dumps use; the trace records
# the pattern (format 1.2); plan refuses a config without it.
. "$RLB_TOP/tests/cli/lib.sh"

# tiny-2x2 as 9 layers M E M * E - E * E: the MoE ones at 1, 4, 6, 8.
cat > hy.yaml <<'EOF'
preset: tiny-2x2
model:
  layer_pattern: "MEM*E-E*E"
  dense_ffn: 96
  gated_ffn: false
  mamba_heads: 4
  mamba_head_dim: 16
  mamba_state: 8
  mamba_groups: 2
EOF
moe_at="1 4 6 8"

# One sequence of 3 tokens: MoE layer j of token t holds [t + j, 8 + j],
# the other layers -1 (an error if read as ids).
row() { # token
	printf '['
	l=0
	j=0
	while [ $l -lt 9 ]; do
		[ $l -gt 0 ] && printf ', '
		case " $moe_at " in
		*" $l "*)
			printf '[%d, %d]' $(($1 + j)) $((8 + j))
			j=$((j + 1)) ;;
		*)	printf '[-1, -1]' ;;
		esac
		l=$((l + 1))
	done
	printf ']'
}
printf '{"step": 0, "experts": [%s, %s, %s]}\n' "$(row 0)" "$(row 1)" "$(row 2)" > r.jsonl

run capture -c hy.yaml --from jsonl r.jsonl -o r.rrt
expect_status 0
expect_out "r.rrt: 1 step, 1 sequence, 3 tokens, "
run inspect r.rrt
expect_status 0
expect_out "version:        1.2"
expect_out "4 MoE layers of 9, layer by layer MEM*E-E*E"
run inspect --dump r.rrt
expect_status 0
expect_out "layer 0: 0,8 1,8 2,8"
expect_out "layer 3: 3,11 4,11 5,11"

run inspect --json r.rrt
expect_status 0
expect_out '"layer_pattern": "MEM*E-E*E"'

# The same rows with the layers read as a periodic layout: refused.
run capture -c hy.yaml --set model.layer_pattern= --set model.mamba_heads=0 \
	--set model.mamba_head_dim=0 --set model.mamba_state=0 --set model.mamba_groups=0 \
	--from jsonl r.jsonl -o bad.rrt
expect_status 1
expect_err "experts[0]: 9 layers, the config has 4 MoE layers"
[ ! -e bad.rrt ] || fail "a failed capture left bad.rrt"
# Rows of neither count: the pattern's other layers are not called dense.
printf '{"step": 0, "experts": [[[0, 1], [0, 1], [0, 1]]]}\n' > three.jsonl
run capture -c hy.yaml --from jsonl three.jsonl -o bad.rrt
expect_status 1
expect_err "experts[0]: 3 layers, the config has 9 (model.layer_pattern's letters, 4 of them MoE) or 4 MoE layers"

# Megatron router dumps number a hybrid's layers as the pattern does,
# from 0 or from 1, or number the MoE layers alone: the same trace.
megatron() { # numbering: the layer number of each MoE layer
	j=0
	for l in "$@"; do
		printf '{"step": 0, "stage": "pre_dispatch", "block": "decoder", "layer": %d, "rank": 0, "num_tokens": 3, "topk": 2, "top_indices": [[%d, %d], [%d, %d], [%d, %d]]}\n' \
			"$l" $j $((8 + j)) $((1 + j)) $((8 + j)) $((2 + j)) $((8 + j))
		j=$((j + 1))
	done
}
megatron 1 4 6 8 > m0.jsonl
megatron 2 5 7 9 > m1.jsonl
megatron 0 1 2 3 > mm.jsonl
for n in m0 m1 mm; do
	run capture -c hy.yaml --from megatron "$n.jsonl" -o "$n.rrt"
	expect_status 0
	run inspect --dump "$n.rrt"
	expect_status 0
	expect_out "layer 3: 3,11 4,11 5,11"
done
megatron 1 3 6 8 > bad.jsonl
run capture -c hy.yaml --from megatron bad.jsonl -o bad.rrt
expect_status 1
expect_err "layer: 3 is not a MoE layer ('E') of model.layer_pattern (numbered from 0)"
[ ! -e bad.rrt ] || fail "a failed capture left bad.rrt"

# A pattern that starts with its MoE layer: layer 0 is both numberings
# until the first layer where they differ.
megatron 0 2 3 5 > e0.jsonl
run capture -c hy.yaml --set 'model.layer_pattern=E*EE-E' --set model.mamba_heads=0 \
	--set model.mamba_head_dim=0 --set model.mamba_state=0 --set model.mamba_groups=0 \
	--from megatron e0.jsonl -o e0.rrt
expect_status 0
run inspect --dump e0.rrt
expect_status 0
expect_out "layer 3: 3,11 4,11 5,11"

# Plans: every policy on a synthetic trace of the pattern; a config
# without it, or with another, is refused, naming the key.
run capture -c hy.yaml --set workload.steps=2 --synthetic --seed 2 -o s.rrt
expect_status 0
for p in static eplb eplb-oracle replicate relibra ideal; do
	run plan -c hy.yaml --policy "$p" --no-timing -o "$p.rlp" s.rrt
	expect_status 0
done
# --stats numbers each MoE layer also as the model does.
run inspect --stats --json -c hy.yaml s.rrt
expect_status 0
tr -d ' \n' < out > flat
run inspect --stats -c hy.yaml s.rrt
expect_status 0
expect_out "layer  model  mb-p50"
j=0
for at in $moe_at; do
	grep -q "^    $j      $at  " out || fail "--stats gives MoE layer $j no model layer $at"
	grep -qF "\"layer\":$j,\"model_layer\":$at," flat ||
		fail "--stats --json gives MoE layer $j no model layer $at"
	j=$((j + 1))
done
run plan -c hy.yaml --set 'model.layer_pattern=EM*ME-E*E' s.rrt
expect_status 1
expect_err "'model.layer_pattern' is \"EM*ME-E*E\" in the config, \"MEM*E-E*E\" in the trace"
run plan -c tiny-2x2 s.rrt
expect_status 1
expect_err "'model.layer_pattern' is \"\" in the config, \"MEM*E-E*E\" in the trace"
