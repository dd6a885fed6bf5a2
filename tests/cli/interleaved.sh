# interleaved.sh - a model whose MoE layers alternate with dense ones
# (model.moe_layer_period): capture keeps the engine's MoE rows wherever
# they are, the trace records the layout, and plan refuses a config
# without it.
. "$RLB_TOP/tests/cli/lib.sh"

# tiny-2x2 with 1 dense layer, then 4 blocks [dense, MoE]: 9 layers, the
# MoE ones at 2, 4, 6, 8.
cat > inter.yaml <<'EOF'
preset: tiny-2x2
model:
  first_dense_layers: 1
  moe_layer_period: 2
  moe_layer_offset: 1
  dense_ffn: 96
EOF

# One sequence of 3 tokens: MoE layer j of token t holds [t + j, 8 + j],
# the dense layers -1 (an error if read as ids).
row() { # token
	printf '['
	l=0
	while [ $l -lt 9 ]; do
		[ $l -gt 0 ] && printf ', '
		if [ $l -ge 2 ] && [ $((l % 2)) -eq 0 ]; then
			j=$(((l - 2) / 2))
			printf '[%d, %d]' $(($1 + j)) $((8 + j))
		else
			printf '[-1, -1]'
		fi
		l=$((l + 1))
	done
	printf ']'
}
printf '{"step": 0, "experts": [%s, %s, %s]}\n' "$(row 0)" "$(row 1)" "$(row 2)" > r.jsonl

run capture -c inter.yaml --from jsonl r.jsonl -o r.rrt
expect_status 0
expect_out "r.rrt: 1 step, 1 sequence, 3 tokens, "
run inspect r.rrt
expect_status 0
expect_out "version:        1.1"
expect_out "4 MoE layers after 1 dense, in blocks of 2 layers, MoE at offset 1"
run inspect --dump r.rrt
expect_status 0
expect_out "layer 0: 0,8 1,8 2,8"
expect_out "layer 3: 3,11 4,11 5,11"

# The same rows with a config that has every layer after the first MoE.
run capture -c inter.yaml --set model.moe_layer_period=1 --set model.moe_layer_offset=0 \
	--from jsonl r.jsonl -o bad.rrt
expect_status 1
expect_err "experts[0]: 9 layers, the config has 5 (1 dense + 4 MoE) or 4 MoE layers"
[ ! -e bad.rrt ] || fail "a failed capture left bad.rrt"

# Plans: every policy on a synthetic trace of the layout; a config that
# does not match it is refused, naming the key.
run capture -c inter.yaml --set workload.steps=2 --synthetic --seed 2 -o s.rrt
expect_status 0
for p in static eplb eplb-oracle replicate relibra ideal; do
	run plan -c inter.yaml --policy "$p" --no-timing -o "$p.rlp" s.rrt
	expect_status 0
done
run plan -c inter.yaml --set model.moe_layer_offset=0 s.rrt
expect_status 1
expect_err "'model.moe_layer_offset' is 0 in the config, 1 in the trace"
run plan -c inter.yaml --set model.moe_layer_period=1 --set model.moe_layer_offset=0 s.rrt
expect_status 1
expect_err "'model.moe_layer_period' is 1 in the config, 2 in the trace"
