# config_hf.sh - `relibra config --from-hf`: a model preset from a Hugging
# Face config.json, used by a config as model: {preset: NAME}; its errors.
. "$RLB_TOP/tests/cli/lib.sh"

hf="$FIXTURES/hf"

# the preset, written with -o beside a config that uses it, plans like the
# shipped preset of the same model
mkdir models
run config --from-hf "$hf/gpt-oss-20b.json" --name oss -o models/oss.yaml
expect_status 0
expect_empty out
expect_empty err
grep -qx '  attention_window: 128   # sliding_window' models/oss.yaml ||
	{ cat models/oss.yaml; fail "the window's line"; }
grep -q '^  full_attention_period: 2 # layer_types$' models/oss.yaml ||
	{ cat models/oss.yaml; fail "the period's line"; }
printf 'model: {preset: oss}\ncluster: {preset: h100-1x8}\n' > mine.yaml
printf 'model: {preset: gpt-oss-20b}\ncluster: {preset: h100-1x8}\n' > shipped.yaml
run config -c mine.yaml
expect_status 0
sed 's/^  name: "oss"$/  name: "gpt-oss-20b"/' out > mine.txt
run config -c shipped.yaml
expect_status 0
cmp -s out mine.txt || { diff out mine.txt; fail "the made preset differs from the shipped one"; }

# stdout, and standard input
run config --from-hf - < "$hf/kimi-k2.json"
expect_status 0
expect_out "  experts: 384            # n_routed_experts"
expect_out "  shared_expert_ffn: 2048 # moe_intermediate_size * n_shared_experts 1"
expect_out "  first_dense_layers: 1   # num_hidden_layers 61, first_k_dense_replace"
expect_out "  name: kimi_k2"

# errors: exit 1, nothing written
printf '{"num_experts": 8,\n "hidden_size": 64,,}\n' > bad.json
run config --from-hf bad.json -o models/bad.yaml
expect_status 1
expect_err "relibra config: bad.json:2:20: invalid JSON (byte 39): string or '}' expected near ','"
[ ! -e models/bad.yaml ] || fail "a preset was written for bad input"
ls models | grep -v '^oss.yaml$' && fail "a stray file in models/"
cat > next.json <<'JSON'
{"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 4,
 "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
 "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]}
JSON
run config --from-hf next.json
expect_status 1
expect_empty out
expect_err "relibra config: next.json: linear_attention layers but 'linear_num_key_heads' is not a positive integer"
run config --from-hf missing.json
expect_status 1
expect_err "relibra config: cannot open 'missing.json'"

# usage errors: exit 2
run config --from-hf "$hf/olmoe.json" --name '../x'
expect_status 1
expect_err "model name '../x' must be letters, digits"
run config --name x
expect_status 2
expect_err "--name needs --from-hf"
run config --from-hf "$hf/olmoe.json" -c "$CONFIGS/tiny-2x2.yaml"
expect_status 2
expect_err "--from-hf takes no -c"
run config --from-hf "$hf/olmoe.json" -o "$hf/olmoe.json"
expect_status 2
# A file of another kind: named as such.
run config --from-hf "$CONFIGS/tiny-2x2.yaml"
expect_status 1
expect_err "relibra config: '$CONFIGS/tiny-2x2.yaml' is a relibra YAML config, not a Hugging Face config.json: give it as -c"
run config --from-hf "$RLB_TOP/trace_format/examples/tiny.rrt"
expect_status 1
expect_err "tiny.rrt' is a relibra trace, not a Hugging Face config.json"
run plan --no-timing -c tiny-2x2 --json "$RLB_TOP/trace_format/examples/tiny.rrt"
expect_status 0
mv out result.json
run config --from-hf result.json
expect_status 1
expect_err "relibra config: 'result.json' is a relibra result (the JSON of plan --summary or train-step -o), not a Hugging Face config.json"
exit 0
