# spec_ref.sh - relibra's traces and plans against a second reader written
# from trace_format/SPEC.md alone (tests/spec_ref.py): every header field,
# id, gate weight, home, instance, quota, copy count and carried schedule,
# byte for byte against inspect's dumps, with every checksum and rule of
# the format verified, the plan's trace identity recomputed and each
# step's per-source split redone from the trace.  Traces of every id
# coding and header version, written by relibra and rewritten by the
# reference in the codings and layouts relibra's writer does not choose;
# plans of every policy and packing.
. "$RLB_TOP/tests/cli/lib.sh"

command -v python3 > /dev/null 2>&1 ||
	skip "python3 is not installed: the reference reader cannot run"
command -v zstd > /dev/null 2>&1 ||
	skip "zstd is not installed: the reference reader cannot decompress"

ref="$RLB_TOP/tests/spec_ref.py"
ex="$RLB_TOP/trace_format/examples"
cfg="$CONFIGS/tiny-2x2.yaml"
small="--set workload.steps=2 --set workload.prompts_per_step=4"

# First dense layers; MoE layers interleaved with dense ones (header 1.1);
# a hybrid given layer by layer (header 1.2).
cat > dense.yaml <<'EOF'
preset: tiny-2x2
model:
  first_dense_layers: 2
  dense_ffn: 128
EOF
cat > inter.yaml <<'EOF'
preset: tiny-2x2
model:
  first_dense_layers: 1
  moe_layer_period: 3
  moe_layer_offset: 1
  dense_ffn: 96
EOF
cat > hybrid.yaml <<'EOF'
preset: tiny-2x2
model:
  layer_pattern: "M*EM-E*MEME-"
  gated_ffn: false
  dense_ffn: 96
  mamba_heads: 4
  mamba_head_dim: 16
  mamba_state: 16
  mamba_groups: 2
EOF

# trace FILE: the reference reader agrees with inspect on FILE.
trace() {
	python3 "$ref" --relibra "$RELIBRA" trace "$1" > out 2>&1 ||
		{ cat out; fail "the reference reader disagrees on trace $1"; }
}

# capture NAME ARGS...: capture NAME.rrt, then check it.
capture() {
	name=$1
	shift
	"$RELIBRA" capture "$@" -o "$name.rrt" > /dev/null 2> err ||
		{ cat err; fail "capture $*"; }
	trace "$name.rrt"
}

trace "$ex/tiny.rrt"
python3 "$ref" --relibra "$RELIBRA" plan "$ex/tiny-plan.rlp" > out 2>&1 ||
	{ cat out; fail "the reference reader disagrees on tiny-plan.rlp"; }

# shellcheck disable=SC2086
{
# RANK (ordered u8 ids), DELTA (sorted), RAW (ordered u16 ids), DELTA of
# u16 ids; headers 1.0, 1.1 and 1.2.
capture t -c "$cfg" --synthetic --seed 1 $small
capture ts -c "$cfg" --synthetic --seed 2 $small --sorted
capture w -c "$cfg" --synthetic --seed 3 $small --set model.experts=512
capture ws -c "$cfg" --synthetic --seed 3 $small --set model.experts=512 --sorted
capture d -c dense.yaml --synthetic --seed 4 $small
capture i -c inter.yaml --synthetic --seed 5 $small
capture h -c hybrid.yaml --synthetic --seed 6 $small
capture hs -c hybrid.yaml --synthetic --seed 6 $small --sorted
# The same steps, groups and lengths routed uniformly: the same header.
capture u -c "$cfg" --synthetic --seed 1 $small --uniform
}

# Gate weights (F32 planes) of every kind a weight may be: -0, a
# subnormal, the largest float, values that %g rounds; steps with a gap;
# a token that picks one expert twice (sorted: a DELTA of 0).
python3 - > g.jsonl <<'EOF'
import json
vals = [0.5, 0.1, 1 / 3, 1e-7, 3.4028234663852886e38, 0.0, -0.0, 1.0,
        123456.789, 2.5e-40]
n = 0
for step, T in ((0, 3), (0, 7), (2, 5)):
    ex, g = [], []
    for t in range(T):
        ex.append([[(t + 3 * l + 5 * k + step) % 16 for k in range(2)] for l in range(4)])
        g.append([[vals[(n + 2 * l + k) % len(vals)] for k in range(2)] for l in range(4)])
        n += 1
    print(json.dumps({"step": step, "group": 1, "sample": T, "experts": ex, "gates": g}))
print(json.dumps({"step": 3, "experts": [[[5, 5], [1, 0], [2, 2], [15, 3]]],
                  "gates": [[[0.5, 0.5], [1, 2], [0, 0], [1, 1]]]}))
EOF
capture g -c "$cfg" --from jsonl g.jsonl --gates
capture gs -c "$cfg" --from jsonl g.jsonl --gates --sorted

# recode IN OUT ARGS...: IN written again by the reference writer in a
# coding or layout relibra's writer does not choose, then checked.
recode() {
	python3 "$ref" --relibra "$RELIBRA" recode "$@" > out 2>&1 ||
		{ cat out; fail "the reference reader disagrees on recoded $*"; }
}
recode t.rrt raw8.rrt --coding raw
recode ts.rrt rank-sorted.rrt --coding rank --chunk 3 --frame-records 5
recode g.rrt rank-empty.rrt --coding rank --chunk 1 --lists empty --frame-records 1
recode g.rrt delta.rrt --coding delta --frame-records 2
recode gs.rrt raw-gates.rrt --coding raw
recode h.rrt raw-pattern.rrt --coding raw --frame-records 3
recode i.rrt delta-inter.rrt --coding delta --frame-records 7
recode w.rrt delta16.rrt --coding delta --frame-records 7
recode t.rrt rank-long.rrt --coding rank --chunk 1000000

n=0
# plan CONFIG TRACE OPTIONS...: plan, then check the plan with its trace.
plan() {
	c=$1 t=$2
	shift 2
	n=$((n + 1))
	"$RELIBRA" plan -c "$c" "$@" -o "p$n.rlp" --no-timing "$t" > /dev/null 2> err ||
		{ cat err; fail "plan $*"; }
	python3 "$ref" --relibra "$RELIBRA" plan "p$n.rlp" --trace "$t" > out 2>&1 ||
		{ cat out; fail "the reference reader disagrees on plan $*"; }
}

for p in static eplb eplb-oracle replicate relibra ideal; do
	plan "$cfg" t.rrt --policy "$p"
done
plan "$cfg" t.rrt --policy relibra --data-control
plan "$cfg" t.rrt --policy relibra --colocate
plan "$cfg" t.rrt --policy relibra --colocate --no-reorder
plan "$cfg" t.rrt --policy eplb --relay
plan "$cfg" t.rrt --policy relibra --no-replicate --pack ffd
plan "$cfg" t.rrt --policy eplb-oracle --pack dynamic
plan "$cfg" t.rrt --policy eplb --steps 1:1 --set balancer.eplb_window=2
plan "$cfg" ts.rrt --policy relibra --data-control --pack dynamic
plan "$cfg" g.rrt --policy replicate
plan "$cfg" w.rrt --policy eplb-oracle --set model.experts=512
plan dense.yaml d.rrt --policy relibra --colocate
plan inter.yaml i.rrt --policy eplb
plan hybrid.yaml h.rrt --policy relibra --data-control
plan hybrid.yaml hs.rrt --policy replicate --pack dynamic
"$RELIBRA" inspect --schedule -c "$cfg" t.rrt > sched.json || fail "inspect --schedule"
plan "$cfg" t.rrt --policy relibra --schedule sched.json
# A trace's identity does not depend on its coding or frames.
python3 "$ref" --relibra "$RELIBRA" plan p5.rlp --trace raw8.rrt > out 2>&1 ||
	{ cat out; fail "the reference reader disagrees on a plan with its recoded trace"; }

# The checks can fail.  A flipped byte of the model name: a CRC mismatch.
cp t.rrt bad.rrt
printf 'X' | dd of=bad.rrt bs=1 seek=70 conv=notrunc 2> /dev/null
python3 "$ref" --relibra "$RELIBRA" trace bad.rrt > out 2>&1 &&
	fail "the reference reader accepted a corrupt header"
grep -q "header at offset 160: checksum mismatch" out ||
	{ cat out; fail "the reference reader did not name the corruption"; }
# An id changed in inspect's dump.
cat > fake.sh <<EOF
#!/bin/sh
if [ "\$1 \$2" = "inspect --dump" ]; then
	"$RELIBRA" "\$@" | sed '2s/: \([0-9]*\),/: 1\1,/'
else
	exec "$RELIBRA" "\$@"
fi
EOF
chmod +x fake.sh
python3 "$ref" --relibra ./fake.sh trace t.rrt > out 2>&1 &&
	fail "the reference reader accepted a changed dump"
grep -q "^DIFF inspect --dump line 2: " out ||
	{ cat out; fail "the reference reader did not name the changed line"; }
# A plan checked against other routing of the same header, steps and
# lengths: the quotas no longer add up to the loads.
python3 "$ref" --relibra "$RELIBRA" plan p1.rlp --trace u.rrt > out 2>&1 &&
	fail "the reference reader accepted a plan of other loads"
grep -q "^DIFF step 0, mb 0, layer 0, expert [0-9]*: quotas sum" out ||
	{ cat out; fail "the reference reader did not name the loads"; }
exit 0
