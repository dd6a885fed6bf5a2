# costmodel_ref.sh - relibra plan's figures against a second implementation
# of the cost model written from docs/cost-model.md alone
# (tests/costmodel_ref.py): every breakdown, baseline, fraction, count and
# imbalance statistic of the summary, on small traces, for every policy,
# packing and relibra option, with and without recompute.
. "$RLB_TOP/tests/cli/lib.sh"

command -v python3 > /dev/null 2>&1 ||
	skip "python3 is not installed: the reference cost model cannot run"

ref="$RLB_TOP/tests/costmodel_ref.py"
cfg="$CONFIGS/tiny-2x2.yaml"
# tiny-2x2 with the terms it lacks: first dense layers, shared experts,
# group-limited routing (so colocate is on).
cat > dense.yaml <<'EOF'
preset: tiny-2x2
model:
  first_dense_layers: 2
  dense_ffn: 128
  shared_experts: 2
  shared_expert_ffn: 48
  expert_groups: 4
  topk_groups: 2
EOF

# MoE layers interleaved with dense ones: 1 dense layer, then blocks of 3
# whose middle layer is MoE.
cat > inter.yaml <<'EOF'
preset: tiny-2x2
model:
  first_dense_layers: 1
  moe_layer_period: 3
  moe_layer_offset: 1
  dense_ffn: 96
EOF

# A hybrid of one part per layer (Nemotron-H's letters): Mamba-2 mixers,
# attention layers, dense FFNs and the MoE layers, two layers before the
# first MoE layer and one after the last; FFNs of two matrices.
cat > hybrid.yaml <<'EOF'
preset: tiny-2x2
model:
  layer_pattern: "M*EM-E*MEME-"
  gated_ffn: false
  dense_ffn: 96
  shared_experts: 1
  shared_expert_ffn: 48
  mamba_heads: 4
  mamba_head_dim: 16
  mamba_state: 16
  mamba_groups: 2
EOF

# Four nodes of four GPUs, one expert each, and micro-batches of 128
# tokens: the relayed dispatch shares a few copies over four lanes, whose
# remainders and ties (the lower lane) set the busiest GPU.
cat > wide.yaml <<'EOF'
preset: tiny-2x2
cluster:
  nodes: 4
  gpus_per_node: 4
parallel:
  ep_size: 16
  micro_batch_tokens: 128
EOF

run capture -c "$cfg" --set workload.steps=3 --synthetic --seed 1 -o t.rrt
expect_status 0
run capture -c dense.yaml --set workload.steps=2 --synthetic --seed 3 -o d.rrt
expect_status 0
run capture -c inter.yaml --set workload.steps=2 --synthetic --seed 5 -o i.rrt
expect_status 0
run capture -c hybrid.yaml --set workload.steps=2 --synthetic --seed 7 -o h.rrt
expect_status 0
run capture -c wide.yaml --set workload.steps=2 --synthetic --seed 9 -o w.rrt
expect_status 0

n=0
# check CONFIG TRACE PLAN-OPTIONS...: plan, then compare with the reference.
# --set options go to both.
check() {
	c=$1 t=$2
	shift 2
	n=$((n + 1))
	refopts=$(set_opts "$@")
	"$RELIBRA" plan -c "$c" "$@" -o "p$n.rlp" --summary "s$n.json" "$t" \
		> /dev/null 2> err || { cat err; fail "plan $*"; }
	# shellcheck disable=SC2086
	python3 "$ref" --relibra "$RELIBRA" -c "$c" $refopts --trace "$t" \
		--plan "p$n.rlp" --summary "s$n.json" > out 2>&1 ||
		{ cat out; fail "the reference cost model disagrees with plan $*"; }
}

check "$cfg" t.rrt --policy static --no-timing
check "$cfg" t.rrt --policy ideal --no-timing --pack ffd
check "$cfg" t.rrt --policy replicate --no-timing --pack ffd
check "$cfg" t.rrt --policy relibra --no-timing
check "$cfg" t.rrt --policy relibra --no-reorder --no-timing --pack dynamic
check "$cfg" t.rrt --policy relibra --no-replicate --no-timing
check "$cfg" t.rrt --policy relibra --data-control --no-timing --pack ffd
# EPLB's copies (several on one GPU) and even split; recompute's passes.
check "$cfg" t.rrt --policy eplb-oracle --no-timing --pack dynamic \
	--set parallel.recompute=true
# EPLB's history and the static start of a --steps range.
check "$cfg" t.rrt --policy eplb --no-timing --steps 1:2 \
	--set balancer.eplb_window=2
# Replica copies beyond relibra's window: a dense part of next to nothing.
check "$cfg" t.rrt --policy relibra --no-timing --set model.dense_time_ms=0.00001 \
	--set balancer.min_tokens_per_replica=0
# The planning term: the planner's recorded time, half of it hidden.
check "$cfg" t.rrt --policy relibra --set balancer.planner_overlap=0.5
check dense.yaml d.rrt --policy relibra --no-timing --pack dynamic \
	--set parallel.recompute=true
# Moves of no bytes take no time.
check dense.yaml d.rrt --policy eplb --no-timing \
	--set balancer.migration_bytes_per_param=0
check dense.yaml d.rrt --policy replicate --no-timing --set model.dense_time_ms=0.01
# Interleaved layers: their dense time, and relibra's window over them.
check inter.yaml i.rrt --policy relibra --no-timing
check inter.yaml i.rrt --policy relibra --no-timing --set model.dense_time_ms=0.0002 \
	--set balancer.min_tokens_per_replica=0
# Sliding-window attention: every layer windowed; and every second layer
# (the MoE layers at 1 and 7, the dense ones at 3 and 5 full), with
# relibra's window over the dense layers between.
check "$cfg" t.rrt --policy static --no-timing --set model.attention_window=64
check inter.yaml i.rrt --policy relibra --no-timing --set model.attention_window=100 \
	--set model.full_attention_period=2
# Chunked attention but on every second layer (Llama 4's, in small).
check inter.yaml i.rrt --policy relibra --no-timing --set model.attention_chunk=100 \
	--set model.full_attention_period=2
# Chunks longer than most sequences: ranges inside one chunk set the
# slowest rank's time, and the longer sequences are cut at 700.
check "$cfg" t.rrt --policy static --no-timing --set model.attention_chunk=700
# Multi-head latent attention, with and without a compressed query.
check dense.yaml d.rrt --policy relibra --no-timing --set model.kv_lora_rank=12 \
	--set model.q_lora_rank=10 --set model.qk_rope_head_dim=4 --set model.v_head_dim=6
check dense.yaml d.rrt --policy static --no-timing --set model.kv_lora_rank=12 \
	--set model.qk_rope_head_dim=4
# Linear attention on every layer but every third (Gated DeltaNet's shape).
check inter.yaml i.rrt --policy relibra --no-timing --set model.full_attention_period=3 \
	--set model.linear_key_heads=2 --set model.linear_value_heads=4 \
	--set model.linear_key_head_dim=16 --set model.linear_value_head_dim=8 \
	--set model.attention_output_gate=true
# The same layout with a dense part small enough and copies slow enough
# that relibra's window leaves copies on the critical path: the window
# before MoE layer 0 (layers 0 windowed, 1 full, and the MoE layer 2
# windowed) sets the replication term.
check inter.yaml i.rrt --policy relibra --no-timing --set model.attention_window=30 \
	--set model.full_attention_period=2 --set model.head_dim=1 --set model.dense_ffn=1 \
	--set cluster.nvlink_latency_us=1000 --set balancer.min_tokens_per_replica=0
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["breakdown"]["replication_s"] <= 0)' \
	"s$n.json" || fail "no replication beyond relibra's window: the check above tests nothing"
# The same with chunked and with linear attention on the layers but every
# second: relibra's window sums each layer's own kind.
check inter.yaml i.rrt --policy relibra --no-timing --set model.attention_chunk=40 \
	--set model.full_attention_period=2 --set model.head_dim=1 --set model.dense_ffn=1 \
	--set cluster.nvlink_latency_us=1000 --set balancer.min_tokens_per_replica=0
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["breakdown"]["replication_s"] <= 0)' \
	"s$n.json" || fail "no replication beyond relibra's window with chunked attention"
check inter.yaml i.rrt --policy relibra --no-timing --set model.full_attention_period=2 \
	--set model.linear_key_heads=1 --set model.linear_value_heads=1 \
	--set model.linear_key_head_dim=1 --set model.linear_value_head_dim=1 \
	--set model.head_dim=1 --set model.dense_ffn=1 \
	--set cluster.nvlink_latency_us=1000 --set balancer.min_tokens_per_replica=0
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["breakdown"]["replication_s"] <= 0)' \
	"s$n.json" || fail "no replication beyond relibra's window with linear attention"
# The hybrid: each layer's part, recompute, dense_time_ms on every layer,
# and relibra's window over the layers between two MoE layers, made too
# short for the copies.
check hybrid.yaml h.rrt --policy relibra --no-timing
check hybrid.yaml h.rrt --policy replicate --no-timing --pack dynamic \
	--set parallel.recompute=true
check hybrid.yaml h.rrt --policy eplb --no-timing --set model.dense_time_ms=0.0002
check hybrid.yaml h.rrt --policy relibra --no-timing --set model.head_dim=1 \
	--set model.dense_ffn=1 --set model.shared_experts=0 --set model.mamba_head_dim=1 \
	--set model.mamba_state=1 --set cluster.nvlink_latency_us=1000 \
	--set balancer.min_tokens_per_replica=0
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["breakdown"]["replication_s"] <= 0)' \
	"s$n.json" || fail "no replication beyond relibra's window in the hybrid"
# Latent MoE (Nemotron 3 Super's shape, in small): the experts and the
# token copies in a latent of 16 of the 64, the projections in the MoE
# layers' dense part; with and without relibra's window, and recompute.
check hybrid.yaml h.rrt --policy relibra --no-timing --set model.moe_latent=16
check hybrid.yaml h.rrt --policy eplb-oracle --no-timing --pack dynamic \
	--set model.moe_latent=16 --set parallel.recompute=true
check dense.yaml d.rrt --policy replicate --no-timing --set model.moe_latent=24
# The static layout's copies are the same at either width: a latent of a
# quarter of hidden moves a quarter of the bytes.
"$RELIBRA" plan -c hybrid.yaml --policy static --no-timing --json h.rrt > full.json ||
	fail "plan static"
"$RELIBRA" plan -c hybrid.yaml --policy static --no-timing --json \
	--set model.moe_latent=16 h.rrt > latent.json || fail "plan static, latent"
python3 - full.json latent.json <<'PY' || fail "the latent does not move a quarter of the bytes"
import json, sys
f, l = (json.load(open(p))["bytes_per_step"] for p in sys.argv[1:3])
for k in ("a2a_nvlink", "a2a_rdma"):
    assert l[k] * 4 == f[k], (k, l[k], f[k])
assert f["a2a_nvlink"] + f["a2a_rdma"] > 0
PY
# A trainer's schedule file: an odd cut of a sequence, an empty micro-batch.
run inspect --schedule -c "$cfg" --steps 0:0 t.rrt
expect_status 0
python3 - out > file.json <<'PY' || fail "cannot edit the schedule"
import json, sys
d = json.load(open(sys.argv[1]))
mbs = d["steps"][0]["micro_batches"]
# Cut the longest range of micro-batch 0 after its 100th token and move
# its rest to the last rank of micro-batch 1.
r, i = max(((r, i) for r in range(len(mbs[0])) for i in range(len(mbs[0][r]))),
           key=lambda x: mbs[0][x[0]][x[1]][2] - mbs[0][x[0]][x[1]][1])
q, a, b = mbs[0][r][i]
assert b - a > 100
mbs[0][r][i] = [q, a, a + 100]
mbs[1][-1].append([q, a + 100, b])
mbs.insert(len(mbs) - 1, [[] for _ in mbs[0]])
json.dump(d, sys.stdout)
PY
check "$cfg" t.rrt --policy relibra --no-timing --steps 0:0 --schedule file.json
# The slowest rank sets the MoE layers' dense part and the first dense
# layers' apart: here rank 0 (a sequence of about 400 tokens) has the
# slower first dense layers (their FFN follows the tokens) and rank 1 (the
# last 250 tokens of the longest sequence) the slower MoE layers (their
# attention follows the context).
run inspect --schedule -c dense.yaml --steps 0:0 d.rrt
expect_status 0
python3 - out > ranks.json <<'PY' || fail "cannot edit the schedule"
import json, sys
d = json.load(open(sys.argv[1]))
st = d["steps"][0]
ranges = [r for mb in st["micro_batches"] for rk in mb for r in rk]
lens = {}
for q, a, b in ranges:
    lens[q] = max(lens.get(q, 0), b)
long_ = max(lens, key=lambda q: lens[q])
short = min((q for q in lens if q != long_), key=lambda q: abs(lens[q] - 400))
G = len(st["micro_batches"][0])
n = lens[long_]
assert n > 500
mbs = [[[] for _ in range(G)]]
mbs[0][0].append([short, 0, lens[short]])
mbs[0][1].append([long_, n - 250, n])
rest = [[long_, 0, n - 250]] + [[q, 0, lens[q]] for q in sorted(lens)
                                if q not in (long_, short)]
for j, r in enumerate(rest):
    if j % G == 0:
        mbs.append([[] for _ in range(G)])
    mbs[-1][j % G].append(r)
st["micro_batches"] = mbs
json.dump(d, sys.stdout)
PY
check dense.yaml d.rrt --policy relibra --no-timing --steps 0:0 --schedule ranks.json \
	--set model.dense_ffn=1024
# A window that a micro-batch's only chunk starts beyond: micro-batch 0
# holds the last 200 tokens of the longest sequence, on rank 1 alone, so
# its windowed context is 200 times the window.
run inspect --schedule -c dense.yaml --steps 0:0 d.rrt
expect_status 0
python3 - out > beyond.json <<'PY' || fail "cannot edit the schedule"
import json, sys
d = json.load(open(sys.argv[1]))
st = d["steps"][0]
ranges = [r for mb in st["micro_batches"] for rk in mb for r in rk]
lens = {}
for q, a, b in ranges:
    lens[q] = max(lens.get(q, 0), b)
long_ = max(lens, key=lambda q: lens[q])
G = len(st["micro_batches"][0])
n = lens[long_]
assert n > 300
mbs = [[[] for _ in range(G)]]
mbs[0][1].append([long_, n - 200, n])
rest = [[long_, 0, n - 200]] + [[q, 0, lens[q]] for q in sorted(lens) if q != long_]
for j, r in enumerate(rest):
    if j % G == 0:
        mbs.append([[] for _ in range(G)])
    mbs[-1][j % G].append(r)
st["micro_batches"] = mbs
json.dump(d, sys.stdout)
PY
check dense.yaml d.rrt --policy relibra --no-timing --steps 0:0 --schedule beyond.json \
	--set model.attention_window=64 --set model.full_attention_period=3

# The relayed dispatch (--relay): the policy's copies, relayed in each
# (micro-batch, layer) where that is faster; the baselines direct.
# relayed any|some: the last check's summary records the relay, and the
# reference relayed a (micro-batch, layer) cell, or some but not all.
relayed() {
	python3 - "s$n.json" out "$1" <<'PY' || { cat out; fail "relayed $1: check $n"; }
import json, re, sys
s, out, which = sys.argv[1:4]
assert json.load(open(s))["options"]["relay"] is True
m = re.search(r"relayed (\d+) of (\d+) cells", open(out).read())
k, t = int(m.group(1)), int(m.group(2))
assert 0 < k and (which == "any" or k < t), (which, k, t)
PY
}
# Here a cell whose relayed phase is no shorter (a tie) keeps the direct
# dispatch, and its bytes.
check "$cfg" t.rrt --policy relibra --relay --no-timing
relayed any
check "$cfg" t.rrt --policy static --relay --no-timing
relayed any
check "$cfg" t.rrt --policy replicate --no-timing --pack ffd --set balancer.relay=true
relayed any
check "$cfg" t.rrt --policy eplb-oracle --relay --no-timing --pack dynamic \
	--set parallel.recompute=true
relayed any
check "$cfg" t.rrt --policy relibra --relay --data-control --no-timing --pack ffd
relayed any
check "$cfg" t.rrt --policy eplb --relay --no-timing --steps 1:2
relayed any
# NVLink as slow to start as RDMA and little faster: relaying, which adds
# NVLink copies, shortens some cells' phases and would lengthen others'
# (which keep the direct dispatch).
check "$cfg" t.rrt --policy relibra --relay --no-timing \
	--set cluster.nvlink_latency_us=80 --set cluster.nvlink_gbps=60
relayed some
# Four lanes: the shares' remainders go to the lanes with the most copies,
# ties to the lower lane (the higher one changes figures of each of these).
check wide.yaml w.rrt --policy relibra --relay --no-timing
relayed any
check wide.yaml w.rrt --policy eplb-oracle --relay --no-timing
relayed any
check wide.yaml w.rrt --policy static --relay --no-timing \
	--set cluster.nvlink_latency_us=80 --set cluster.nvlink_gbps=80
relayed some
check dense.yaml d.rrt --policy relibra --relay --no-timing --set model.moe_latent=24
relayed any
# The relay changes no plan.
"$RELIBRA" plan -c "$cfg" --policy relibra --no-timing -o direct.rlp t.rrt > /dev/null ||
	fail "plan without --relay"
"$RELIBRA" plan -c "$cfg" --policy relibra --relay --no-timing -o relay.rlp t.rrt \
	> /dev/null || fail "plan with --relay"
"$RELIBRA" inspect --json --dump direct.rlp > direct.json || fail "inspect direct.rlp"
"$RELIBRA" inspect --json --dump relay.rlp > relay.json || fail "inspect relay.rlp"
python3 - direct.json relay.json <<'PY' || fail "--relay changed the plan"
import json, sys
a, b = (json.load(open(p))["steps"] for p in sys.argv[1:3])
assert [(s["homes"], s["instances"]) for s in a] == [(s["homes"], s["instances"]) for s in b]
PY
# The ideal keeps the direct dispatch: --relay is a usage error there.
run plan -c "$cfg" --policy ideal --relay --no-timing t.rrt
expect_status 2

# The comparison fails on one figure changed: the RDMA part of the
# all-to-all of the first step.
python3 - s4.json > bad.json <<'PY' || fail "cannot edit the summary"
import json, sys
d = json.load(open(sys.argv[1]))
d["per_step"][0]["breakdown"]["a2a_rdma_s"] *= 1.000001
json.dump(d, sys.stdout)
PY
python3 "$ref" --relibra "$RELIBRA" -c "$cfg" --trace t.rrt --plan p4.rlp \
	--summary bad.json > out 2>&1 && fail "the reference accepted a changed figure"
grep -q '^DIFF per_step\[0\]\.breakdown\.a2a_rdma_s: ' out ||
	{ cat out; fail "the reference did not name the changed figure"; }
grep -q '^1 of [0-9]* figures differ$' out ||
	{ cat out; fail "the reference found other differences"; }
exit 0
