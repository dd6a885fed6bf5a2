# plan.sh - relibra plan: every policy, summaries, determinism, EPLB check
# mode, exit codes and bad inputs.
. "$RLB_TOP/tests/cli/lib.sh"

cfg="$CONFIGS/tiny-2x2.yaml"
run capture -c "$cfg" --synthetic --seed 3 -o t.rrt
expect_status 0

for p in static eplb eplb-oracle replicate relibra ideal; do
	run plan -c "$cfg" --policy "$p" --summary "$p.json" -o "$p.rlp" t.rrt
	expect_status 0
	expect_out "relibra plan: $p on tiny"
	expect_out "fraction of ideal"
	expect_empty err
	for key in '"schema": "relibra.result/1"' "\"policy\": \"$p\"" '"step_time_s"' \
		'"tokens_per_s"' '"fraction_of_ideal"' '"speedup_over_static"' '"baselines"'; do
		grep -qF "$key" "$p.json" || fail "$p.json lacks $key"
	done
	[ -s "$p.rlp" ] || fail "no plan file for $p"
	[ ! -e "$p.rlp.tmp" ] || fail "$p.rlp.tmp left behind"
done
grep -q '"speedup_over_static": 1\.0*,' static.json || fail "static is not 1.0x static"
# The summary's rank balance is the schedule's, as inspect --stats counts it.
run inspect --stats -c "$cfg" t.rrt
expect_status 0
want=$(sed -n 's/^rank tokens max\/mean per micro-batch: *mean \([0-9.]*\).* max \([0-9.]*\)$/\1 \2/p' out)
got=$(awk '/"rank_tokens"/ { on = 1 } on && /"mean"/ { m = $2 } on && /"max"/ { x = $2; exit }
	END { sub(",", "", m); printf "%.3f %.3f", m, x }' relibra.json)
[ -n "$want" ] && [ "$want" = "$got" ] ||
	fail "rank tokens max/mean: inspect --stats '$want', relibra.json '$got'"
run plan -c "$cfg" --policy relibra t.rrt
expect_out "rank tokens max/mean p50"
# The gap to the ideal is the sum of its parts (3 decimals each) ...
awk '/^gap to the ideal/ { gap = $NF; on = 1; next }
	on && /^  / { sub(/^  /, ""); n = split($0, w, "  +"); sum += w[2]; parts++ }
	END { d = gap - sum; if (d < 0) d = -d; exit !(parts == 7 && d < 0.004) }' out ||
	fail "the gap's parts do not add up to it: $(sed -n '/^gap/,$p' out)"
# ... also with data control, whose own schedule adds the dense part,
# however small (here 0.006 ms)
run plan -c "$cfg" --policy relibra --data-control --set cluster.peak_tflops=100 t.rrt
expect_out "  dense   "
awk '/^gap to the ideal/ { gap = $NF; on = 1; next }
	on && /^  / { sub(/^  /, ""); n = split($0, w, "  +"); sum += w[2]; parts++ }
	END { d = gap - sum; if (d < 0) d = -d; exit !(parts == 8 && d < 0.004) }' out ||
	fail "data control: the gap's parts do not add up to it: $(sed -n '/^gap/,$p' out)"
# ... whose all-to-all parts come from the summary's informational
# figures: ideal <> even <= senders <= a2a_s
awk -F'[:,]' '/"breakdown"/ { on = 1 } on && /"a2a_s"/ { a = $2 }
	on && /"a2a_even_s"/ { e = $2 } on && /"a2a_senders_s"/ { s = $2; exit }
	END { exit !(e > 0 && e <= s && s <= a) }' relibra.json ||
	fail "relibra.json: a2a_even_s <= a2a_senders_s <= a2a_s does not hold"
# With compute for free the senders' part leads, and the table says what
# evens it, unless the packing already does.
fast="--set cluster.peak_tflops=1e6 --set cluster.hbm_gbps=1e6"
# shellcheck disable=SC2086
run plan -c "$cfg" --policy static $fast t.rrt
expect_out "the senders' part is the largest; it follows the ranks' token counts"
expect_out "--data-control even out, and --relay inside each node"
# shellcheck disable=SC2086
run plan -c "$cfg" --policy static --relay $fast t.rrt
expect_out "the senders' part is the largest; with the relay it follows the nodes' token counts"
# static with the relay is not the static layout: both have a column
grep -qE '^ +static --relay +static +ideal$' out || fail "static --relay's table lacks the static column"
# one GPU per node, or one node: nothing to relay over, and a note says so
# shellcheck disable=SC2086
run plan -c "$cfg" --policy static --relay --set cluster.gpus_per_node=1 --set cluster.nodes=4 $fast t.rrt
expect_status 0
expect_err "relibra plan: note: the relay changes nothing here: the EP group has one GPU per node"
expect_out "the senders' part is the largest; it follows the ranks' token counts"
run plan -c "$cfg" --policy relibra --relay --set parallel.ep_size=2 t.rrt
expect_status 0
expect_err "relibra plan: note: the relay changes nothing here: the EP group lies within one node"
run plan -c "$cfg" --policy relibra --relay t.rrt
if grep -q "note: the relay" err; then fail "the relay's note on nodes of several GPUs"; fi
# shellcheck disable=SC2086
run plan -c "$cfg" --policy static --set cluster.gpus_per_node=1 --set cluster.nodes=4 $fast t.rrt
expect_out "the senders' part is the largest; it follows the ranks' token counts"
grep -q -- "--relay inside" out && fail "the relay hint with one GPU per node"
# shellcheck disable=SC2086
run plan -c "$cfg" --policy static --pack dynamic $fast t.rrt
grep -q "senders' part is the largest" out && fail "the senders' hint under --pack dynamic"
run plan -c "$cfg" --policy static t.rrt
grep -q "senders' part is the largest" out && fail "the senders' hint when compute leads"
# The title names an ablation as its summary's label does.
run plan -c "$cfg" --policy relibra --no-reorder t.rrt
expect_out "relibra plan: relibra --no-reorder on tiny"
# On one node every move is within the node: migration costs time, and
# moved_in_node (not migrated_experts, which counts other nodes) says why.
run plan -c "$cfg" --set cluster.nodes=1 --set cluster.gpus_per_node=4 --policy eplb \
	--summary one-node.json t.rrt
expect_status 0
expect_out "migrated experts 0 (to another node; "
grep -q '^  "migrated_experts": 0,$' one-node.json || fail "one node: migrated_experts is not 0"
grep -q '^  "moved_in_node": [1-9][0-9]*,$' one-node.json || fail "one node: no expert moved_in_node"
grep -m1 '"migration_s"' one-node.json | grep -q '"migration_s": 0\.0,' &&
	fail "one node: the moves took no time"

# Same inputs, byte-identical plan and summary (wall clock left out).
for i in 1 2; do
	run plan -c "$cfg" --policy relibra --no-timing -o r$i.rlp --summary r$i.json t.rrt
	expect_status 0
done
cmp -s r1.rlp r2.rlp || fail "plans differ between two runs"
cmp -s r1.json r2.json || fail "summaries differ between two runs"
# ... and whatever the number of threads that count the traffic and read
# the trace ahead
for n in 1 2 3; do
	run plan -c "$cfg" --policy relibra --no-timing --threads $n -o t$n.rlp --summary t$n.json t.rrt
	expect_status 0
	cmp -s r1.rlp t$n.rlp || fail "--threads $n changed the plan"
	cmp -s r1.json t$n.json || fail "--threads $n changed the summary"
done
grep -q '"timing"' r1.json && fail "--no-timing left the timing key"
grep -q '"timing"' relibra.json || fail "no timing key without --no-timing"
# ... also when the planner's time is charged to the step (overlap 0):
# not measured, it counts as 0, and the table says so
for i in 1 2; do
	run plan -c "$cfg" --policy relibra --no-timing --set balancer.planner_overlap=0 \
		--summary o$i.json t.rrt
	expect_status 0
	cp out o$i.out
done
cmp -s o1.json o2.json && cmp -s o1.out o2.out || fail "overlap 0: results differ between two runs"
grep -q '"planning_s"' o1.json && ! grep '"planning_s"' o1.json | grep -vq '"planning_s": 0.0$' ||
	fail "overlap 0: planning time not 0 under --no-timing"
expect_out "planner not timed"

# inspect reads plans.
run inspect r1.rlp
expect_status 0
expect_out "plan 1.0: policy relibra, split locality, pack in-order"
expect_out "integrity:      ok"
run inspect --dump --steps 1 replicate.rlp
expect_status 0
expect_out "homes layer 0:"
# --steps selects what is printed; every step is still decoded and checked
run inspect --steps 1 replicate.rlp
expect_status 0
[ "$(grep -c '^step ' out)" = 1 ] || fail "inspect --steps 1: $(grep -c '^step ' out) step lines"
expect_out "integrity:      ok (3 steps decoded, all checksums verified)"
# --json: the header, a line per step, the integrity; --dump adds the cells.
run inspect --json r1.rlp
expect_status 0
expect_out '{"schema": "relibra.inspect/1", "plan": "r1.rlp", "header": {"version":"1.0","policy":"relibra",'
[ "$(grep -c '^{"step":' out)" -eq 3 ] || fail "inspect --json: not a line per step"
expect_out '], "integrity": {"ok":true,"steps_decoded":3,"error":null}}'
grep -q '"homes"' out && fail "inspect --json without --dump printed the cells"
# as in the text, --steps selects what is printed and all steps count as decoded
run inspect --json --steps 1 r1.rlp
expect_status 0
[ "$(grep -c '^{"step":' out)" -eq 1 ] || fail "inspect --json --steps 1: not one step line"
expect_out '], "integrity": {"ok":true,"steps_decoded":3,"error":null}}'
run inspect --json --dump --steps 1 replicate.rlp
expect_status 0
[ "$(grep -c '^{"step":1,.*"homes":\[\[.*"instances":\[\[\[\[\[' out)" -eq 1 ] ||
	fail "inspect --json --dump --steps 1: $(head -c 300 out)"
# the same homes and instances as the text dump
cp out dump.json
run inspect --dump --steps 1 replicate.rlp
expect_status 0
if command -v python3 > /dev/null 2>&1; then
	python3 - out dump.json <<'PY' || fail "inspect --json --dump differs from the text dump"
import json, re, sys
text, step = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))["steps"][0]
homes = [list(map(int, m.group(2).split()))
         for m in re.finditer(r"homes layer (\d+): ([\d ]+)", text)]
assert homes == step["homes"], "homes"
for m in re.finditer(r"mb (\d+), layer (\d+): (.*)", text):
    mb, layer = int(m.group(1)), int(m.group(2))
    cells = re.findall(r"(\d+)\[([^\]]*)\]", m.group(3))
    want = [[[int(g), int(q), 1] for g, q in (i.split(":") for i in c.split())]
            for _, c in cells]
    assert want == step["instances"][mb][layer], (mb, layer)
PY
fi
head -c 200 r1.rlp > cut.rlp
run inspect cut.rlp
expect_status 1
expect_err "relibra inspect: "
# Cut inside its identifier ("RLBPLAN" after the frame's 8 bytes), a plan
# is still called one once the bytes present tell it from a trace's.
head -c 12 r1.rlp > cut.rlp
run inspect cut.rlp
expect_status 1
expect_err "relibra inspect: plan 'cut.rlp': header at offset 0: cut at end of file (12 of "
head -c 12 t.rrt > cut.rrt
run inspect cut.rrt
expect_status 1
expect_err "relibra inspect: trace 'cut.rrt': header at offset 0: cut at end of file (12 of "

# --json prints the summary on stdout.
run plan -c "$cfg" --policy replicate --json --no-timing t.rrt
expect_status 0
expect_out '"policy": "replicate"'

# Ablations are labelled.
run plan -c "$cfg" --policy relibra --no-reorder --json t.rrt
expect_out '"label": "relibra --no-reorder"'

# colocate: its own row and plan flag; the same from the config key.
run plan -c "$cfg" --policy relibra --colocate --no-timing -o col.rlp --json t.rrt
expect_status 0
expect_out '"label": "relibra --colocate"'
expect_out '"colocate": true'
cp out col.json
run inspect col.rlp
expect_out "reorder 1, replicate 1, colocate 1"
run plan -c "$cfg" --set balancer.colocate=true --policy relibra --no-timing --json t.rrt
cmp -s out col.json || fail "balancer.colocate=true differs from --colocate"
run plan -c "$cfg" --policy replicate --colocate t.rrt
expect_status 2
expect_err "relibra plan: --colocate is an option of the relibra policy"
# relay: the same plan with its own figures, label and header flag; on
# tiny-2x2 (2 nodes of 2 GPUs) it shortens the all-to-all, moves no RDMA
# byte and adds NVLink copies; the static baseline stays the direct one.
run plan -c "$cfg" --policy relibra --no-timing -o direct.rlp --json t.rrt
expect_status 0
cp out direct.json
run plan -c "$cfg" --policy relibra --relay --no-timing -o relay.rlp --json t.rrt
expect_status 0
expect_out '"label": "relibra --relay"'
expect_out '"relay": true'
cp out relay.json
run inspect relay.rlp
expect_out "colocate 0, relay 1"
run inspect direct.rlp
expect_out "colocate 0, relay 0"
# the plans differ only in the flag: header bytes 8 + 12 .. 8 + 15 and the CRC
cmp -l direct.rlp relay.rlp > diff.txt || true
[ "$(wc -l < diff.txt)" -ge 1 ] && [ "$(wc -l < diff.txt)" -le 5 ] ||
	fail "--relay changed more than the plan header's flag and checksum"
num() {	# num FILE SECTION KEY: the first KEY after SECTION
	awk -v sec="\"$2\"" -v key="\"$3\"" -F'[:,]' \
		'index($0, sec) { on = 1 } on && index($1, key) { print $2 + 0; exit }' "$1"
}
for f in direct relay; do
	eval "${f}_a2a=\$(num $f.json breakdown a2a_s)"
	eval "${f}_nvl=\$(num $f.json bytes_per_step a2a_nvlink)"
	eval "${f}_rdma=\$(num $f.json bytes_per_step a2a_rdma)"
	eval "${f}_static=\$(num $f.json baselines step_time_s)"
done
awk -v d="$direct_a2a" -v r="$relay_a2a" 'BEGIN { exit !(r < d) }' ||
	fail "relay all-to-all $relay_a2a s is not below the direct $direct_a2a s"
awk -v d="$direct_nvl" -v r="$relay_nvl" 'BEGIN { exit !(r > d) }' ||
	fail "relay NVLink bytes $relay_nvl are not above the direct $direct_nvl"
[ "$direct_rdma" = "$relay_rdma" ] || fail "relay RDMA bytes $relay_rdma, direct $direct_rdma"
[ "$direct_static" = "$relay_static" ] || fail "the static baseline changed with --relay"
run plan -c "$cfg" --set balancer.relay=true --policy relibra --no-timing --json t.rrt
cmp -s out relay.json || fail "balancer.relay=true differs from --relay"
run plan -c "$cfg" --set balancer.relay=true --policy relibra --no-relay --no-timing --json t.rrt
cmp -s out direct.json || fail "--no-relay does not override balancer.relay=true"
run plan -c "$cfg" --policy static --relay --no-timing --json t.rrt
expect_status 0
expect_out '"label": "static --relay"'
run plan -c "$cfg" --policy ideal --relay t.rrt
expect_status 2
expect_err "relibra plan: --relay has no effect on the ideal, whose all-to-all is already even"
run plan -c "$cfg" --policy ideal --set balancer.relay=true --no-timing --json t.rrt
expect_status 0
expect_out '"relay": false'
run plan -c "$cfg" --relay --no-relay t.rrt
expect_status 2
expect_err "relibra plan: --relay excludes --no-relay"
for opt in no-reorder no-replicate no-colocate; do
	run plan -c "$cfg" --policy static --$opt t.rrt
	expect_status 2
	expect_err "relibra plan: --$opt is an option of the relibra policy"
done
# With --policy the usage error comes before the config is read.
run plan -c nosuch.yaml --policy static --no-reorder t.rrt
expect_status 2
expect_err "relibra plan: --no-reorder is an option of the relibra policy"
# --eplb-window is eplb's alone, and --replica-slots goes with the
# policies that have spare slots: elsewhere each is a usage error, not
# silently ignored, before any output is made.
for p in static eplb-oracle replicate relibra ideal; do
	run plan -c "$cfg" --policy "$p" --eplb-window 3 -o w.rlp t.rrt
	expect_status 2
	expect_err "relibra plan: --eplb-window is an option of the eplb policy, not $p"
	expect_empty out
	[ ! -e w.rlp ] && [ ! -e w.rlp.tmp ] || fail "a refused --eplb-window left w.rlp"
done
run plan -c "$cfg" --set balancer.policy=static --eplb-window 3 t.rrt
expect_status 2
expect_err "relibra plan: --eplb-window is an option of the eplb policy, not static"
run plan -c "$cfg" --set balancer.policy=eplb --eplb-window 3 --no-timing --json t.rrt
expect_status 0
expect_out '"eplb_window": 3'
for p in static ideal; do
	run plan -c "$cfg" --policy "$p" --replica-slots 2 t.rrt
	expect_status 2
	expect_err "relibra plan: --replica-slots is not an option of the $p policy"
done
run plan -c "$cfg" --policy relibra --no-replicate --replica-slots 2 t.rrt
expect_status 2
expect_err "relibra plan: --replica-slots excludes --no-replicate"
run plan -c "$cfg" --set balancer.replicate=false --replica-slots 2 t.rrt
expect_status 2
expect_err "relibra plan: --replica-slots needs replication: balancer.replicate is false in the config"
for p in eplb eplb-oracle replicate relibra; do
	run plan -c "$cfg" --policy "$p" --replica-slots 2 --no-timing t.rrt
	expect_status 0
done
# balancer.colocate auto (the default) turns it on for group-limited
# routing only: tiny-2x2 with 4 groups of 4 experts, 2 of them per token.
run capture -c "$cfg" --set model.expert_groups=4 --set model.topk_groups=2 \
	--synthetic --seed 3 -o g.rrt
expect_status 0
grp="--set model.expert_groups=4 --set model.topk_groups=2"
run plan -c "$cfg" $grp --policy relibra --no-timing --json g.rrt
expect_status 0
expect_out '"label": "relibra --colocate"'
cp out gauto.json
run plan -c "$cfg" $grp --policy relibra --colocate --no-timing --json g.rrt
cmp -s out gauto.json || fail "auto on group-limited routing differs from --colocate"
run plan -c "$cfg" $grp --policy relibra --no-colocate --no-timing --json g.rrt
expect_out '"label": "relibra"'
expect_out '"colocate": false'
cp out goff.json
run plan -c "$cfg" $grp --set balancer.colocate=false --policy relibra --no-timing --json g.rrt
cmp -s out goff.json || fail "balancer.colocate=false differs from --no-colocate"
# without reordering colocate has nothing to act on: one plan, one label
run plan -c "$cfg" $grp --policy relibra --no-reorder --no-timing --json g.rrt
expect_out '"label": "relibra --no-reorder"'
expect_out '"colocate": false'
run plan -c "$cfg" $grp --policy static --json g.rrt
expect_status 0
expect_out '"label": "static"'
# and leaves it off where every group is open to every token
run plan -c "$cfg" --policy relibra --no-timing --json t.rrt
expect_out '"label": "relibra"'
expect_out '"colocate": false'

# Outputs: a failed run leaves every output as it was; no output may be an
# input or another output, nor stdout; --steps needs a range.
echo old > keep.rlp
run plan -c "$cfg" -o keep.rlp --summary nodir/s.json t.rrt
expect_status 1
expect_err "relibra plan: --summary 'nodir/s.json': no directory 'nodir'"
[ "$(cat keep.rlp)" = old ] || fail "a failed plan replaced -o"
[ ! -e keep.rlp.tmp ] || fail "keep.rlp.tmp left behind"
run plan -c "$cfg" --policy eplb -o keep.rlp --eplb-export nodir/e.json t.rrt
expect_status 1
[ "$(cat keep.rlp)" = old ] || fail "a failed plan (--eplb-export) replaced -o"
# A FIFO or the file stdout goes to is written in place, not replaced.
mkfifo fifo
cat fifo > from-fifo &
reader=$!
run plan -c "$cfg" --no-timing --summary fifo t.rrt
expect_status 0
if [ ! -p fifo ]; then
	kill $reader
	fail "--summary FIFO replaced the FIFO"
fi
wait $reader
grep -q '"schema": "relibra.result/1"' from-fifo || fail "--summary FIFO: no summary read"
"$RELIBRA" plan -c "$cfg" --no-timing --summary both.txt t.rrt > both.txt 2> err ||
	fail "--summary FILE > FILE: exit $?: $(cat err)"
grep -q '"schema": "relibra.result/1"' both.txt || fail "--summary FILE > FILE: no summary"
grep -q '^relibra plan: ' both.txt || fail "--summary FILE > FILE: no table"
# A plan given as the trace, or a trace as the plan, is named as such.
run plan -c "$cfg" static.rlp
expect_status 1
expect_err "relibra plan: trace 'static.rlp': header at offset 8: bad magic (a relibra plan, not a trace)"
run train-step -c "$cfg" --virtual-ranks 4 --trace t.rrt --plan t.rrt
expect_status 1
expect_err "plan 't.rrt': header at offset 8: bad magic (a relibra trace, not a plan)"
# A FIFO as the trace or the plan is refused at once, not waited on.
timeout 20 "$RELIBRA" plan -c "$cfg" fifo > out 2> err
status=$?
expect_status 1
expect_err "relibra plan: cannot read trace 'fifo': not a regular file"
timeout 20 "$RELIBRA" inspect fifo > out 2> err
status=$?
expect_status 1
expect_err "relibra inspect: cannot read trace 'fifo': not a regular file"
"$RELIBRA" plan -c "$cfg" -o p.rlp t.rrt > out 2> err || fail "plan: $(cat err)"
timeout 20 "$RELIBRA" train-step -c "$cfg" --virtual-ranks 4 --plan fifo --trace t.rrt > out 2> err
status=$?
expect_status 1
expect_err "cannot read plan 'fifo': not a regular file"
cp t.rrt same.rrt
run plan -c "$cfg" -o same.rrt same.rrt
expect_status 2
expect_err "relibra plan: -o 'same.rrt' is also the trace: choose another path"
cmp -s t.rrt same.rrt || fail "plan -o TRACE wrote over the trace"
run plan -c "$cfg" -o both.out --summary both.out t.rrt
expect_status 2
expect_err "relibra plan: --summary 'both.out' is also -o: choose another path"
# the same new file under two spellings, and a directory's own spellings
mkdir -p sub
run plan -c "$cfg" -o new.rlp --summary ./sub/../new.rlp t.rrt
expect_status 2
expect_err "relibra plan: --summary './sub/../new.rlp' is also -o: choose another path"
[ ! -e new.rlp ] || fail "plan wrote new.rlp though its outputs clash"
run plan -c "$cfg" -o sub/ t.rrt
expect_status 1
expect_err "relibra plan: -o 'sub/' names a directory"
run plan -c "$cfg" -o t.rrt/ t.rrt
expect_status 1
expect_err "relibra plan: -o 't.rrt/' names a directory"
# an input that is no file (a built-in config) is nothing to write over
run plan -c tiny-2x2 --summary ./tiny-2x2 t.rrt
expect_status 0
[ -s tiny-2x2 ] || fail "--summary ./tiny-2x2 not written"
rm -f tiny-2x2
run plan -c "$cfg" --colocate --no-colocate t.rrt
expect_status 2
expect_err "relibra plan: --colocate excludes --no-colocate"
# an empty path: refused before any work, and no '.tmp' touched
echo keep > .tmp
for opt in -o --summary --eplb-export; do
	run plan -c "$cfg" $opt '' t.rrt
	expect_status 2
	expect_err "relibra plan: $opt: an empty path"
done
[ "$(cat .tmp)" = keep ] || fail "an empty output path replaced ./.tmp"
run plan -c "$cfg" --summary - t.rrt
expect_status 2
expect_err "relibra plan: --summary '-': this output goes to a file"
run plan -c "$cfg" --steps "" t.rrt
expect_status 2
expect_err "relibra plan: --steps '': expected A:B, A:, :B or A"
run plan -c "$cfg" --replica-slots 65 t.rrt
expect_status 2
expect_err "relibra plan: --replica-slots: 65 is out of range [0, 64]"

# --fail-below: exit 3 with a message when below.
run plan -c "$cfg" --policy static --fail-below 1 t.rrt
expect_status 3
expect_err "relibra plan: fraction of ideal"
run plan -c "$cfg" --policy ideal --fail-below 0.5 t.rrt
expect_status 0

# The table's columns: the policy, then static and ideal unless it is one.
for p in static ideal relibra; do
	run plan -c "$cfg" --policy $p t.rrt
	expect_status 0
	set -- $(sed -n 3p out)
	case $p in
	static) want="static ideal" ;;
	ideal) want="ideal static" ;;
	*) want="relibra static ideal" ;;
	esac
	[ "$*" = "$want" ] || fail "--policy $p: columns '$*', expected '$want'"
done

# EPLB export.
run plan -c "$cfg" --policy eplb-oracle --eplb-export x.json t.rrt
expect_status 0
grep -q '"phy2log"' x.json || fail "export lacks phy2log"
grep -q '"log2phy_order": "replica"' x.json || fail "export does not say its log2phy order"

# The EPLB check mode reproduces the reference vector.
run plan --eplb-weights "$FIXTURES/eplb/reference.json" --slots 16 --groups 4 --nodes 2 --gpus 8
expect_status 0
cmp -s out "$FIXTURES/eplb/reference.expected.json" || { cat out; fail "EPLB reference differs"; }
run plan --eplb-weights "$FIXTURES/eplb/ragged.json" --slots 16 --groups 4 --nodes 2 --gpus 8
expect_status 1
expect_err "relibra plan: "
run plan --eplb-weights "$FIXTURES/eplb/reference.json" --slots 16
expect_status 2
# Nothing else goes with it: -o would not be written.
run plan --eplb-weights "$FIXTURES/eplb/reference.json" --slots 16 --groups 4 --nodes 2 --gpus 8 -o w.json
expect_status 2
expect_err "relibra plan: --eplb-weights takes only --slots, --groups, --nodes and --gpus, not -o"
[ ! -e w.json ] || fail "--eplb-weights wrote -o"
run plan -c "$cfg" --eplb-weights "$FIXTURES/eplb/reference.json" --slots 16 --groups 4 --nodes 2 --gpus 8
expect_status 2
expect_err "relibra plan: --eplb-weights takes only --slots, --groups, --nodes and --gpus, not -c"
# Options that cannot fit the file's 12 experts are a usage error.
run plan --eplb-weights "$FIXTURES/eplb/reference.json" --slots 16 --groups 5 --nodes 2 --gpus 8
expect_status 2
expect_err "relibra plan: --slots, --groups, --nodes, --gpus for the 12 experts of '$FIXTURES/eplb/reference.json': experts (12) must be a multiple of groups (5)"
run plan --eplb-weights "$FIXTURES/eplb/reference.json" --slots 12 --groups 4 --nodes 2 --gpus 8
expect_status 2
expect_err "slots (12) must be a positive multiple of gpus (8)"
# A file of another kind as the weights: named as such.
run plan --eplb-weights t.rrt --slots 16 --groups 4 --nodes 2 --gpus 8
expect_status 1
expect_err "relibra plan: 't.rrt' is a relibra trace, not a weight matrix ([layers][experts] JSON)"
run plan --eplb-weights static.json --slots 16 --groups 4 --nodes 2 --gpus 8
expect_status 1
expect_err "relibra plan: 'static.json' is a relibra result (the JSON of plan --summary or train-step -o), not a weight matrix ([layers][experts] JSON)"
{ printf '\357\273\277'; cat "$FIXTURES/eplb/reference.json"; } > bom.json
run plan --eplb-weights bom.json --slots 16 --groups 4 --nodes 2 --gpus 8
expect_status 1
expect_err "relibra plan: 'bom.json' starts with a UTF-8 byte order mark (bytes 0-2), which JSON does not allow: save it without one"

# Usage errors and bad inputs.
run plan -c "$cfg"
expect_status 2
expect_err "relibra plan: no trace given"
run plan -c "$cfg" --policy fastest t.rrt
expect_status 2
expect_err "unknown policy 'fastest'"
run plan -c "$cfg" --steps 7:3 t.rrt
expect_status 2
run plan -c "$cfg" --threads 65 t.rrt
expect_status 2
expect_err "--threads"
run plan -c "$cfg" --steps 100:200 t.rrt
expect_status 1
expect_err "relibra plan: no step of the trace in 100:200 (trace 't.rrt' has steps 0..2)"
run plan -c "$cfg" missing.rrt
expect_status 1
expect_err "missing.rrt"
run plan -c "$cfg" --set model.experts=32 --set model.topk=2 t.rrt
expect_status 1
expect_err "'model.experts' is 32 in the config, 16 in the trace"
# The same with -o: the shapes are compared before a plan header is made.
run plan -c "$cfg" --set model.experts=32 --set model.topk=2 -o mm.rlp t.rrt
expect_status 1
expect_err "relibra plan: the config does not match the trace: 'model.experts' is 32 in the config, 16 in the trace (config '$cfg', trace 't.rrt')"
[ ! -e mm.rlp ] && [ ! -e mm.rlp.tmp ] || fail "a refused plan left output"
# The dense layers ahead of the MoE ones are the model's too (they cost
# dense time): a config that differs from the trace is refused, as by inspect.
run plan -c "$cfg" --set model.first_dense_layers=2 --set model.dense_ffn=128 t.rrt
expect_status 1
expect_err "relibra plan: the config does not match the trace: 'model.first_dense_layers' is 2 in the config, 0 in the trace"
# A truncated trace (its step index and seek table cut off): planned, with
# a warning that its last step may lack sequences, and marked in the summary.
head -c $(($(wc -c < t.rrt) - 200)) t.rrt > cut.rrt
run plan -c "$cfg" --summary cut.json cut.rrt
expect_status 0
expect_err "relibra plan: warning: trace 'cut.rrt' is truncated (its writer did not finish): step 2, the last it holds, may lack sequences"
expect_err "hint: --steps 0:1 leaves it out"
grep -q '"truncated": true' cut.json || fail "the summary of a truncated trace does not say so"
grep -q '"last_step": 2' cut.json || fail "the summary does not give the last step planned"
run plan -c "$cfg" --steps 1: cut.rrt
expect_status 0
expect_err "hint: --steps 1:1 leaves it out"
run plan -c "$cfg" --steps 1:1 --summary s1.json cut.rrt
expect_status 0
[ ! -s err ] || { cat err; fail "a warning for a step that is not planned"; }
grep -q '"first_step": 1' s1.json && grep -q '"last_step": 1' s1.json ||
	fail "the summary does not give the steps planned"
grep -q '"truncated": false' relibra.json ||
	fail "the summary of a whole trace lacks truncated: false"
head -c 300 t.rrt > empty.rrt
run plan -c "$cfg" empty.rrt
expect_status 1
expect_err "relibra plan: trace 'empty.rrt' holds no step (it is truncated: its writer did not finish)"
# A file name that is not UTF-8 reaches JSON and XHTML as U+FFFD.
odd=$(printf 'odd\377.rrt')
fffd=$(printf 'odd\357\277\275.rrt')
cp t.rrt "$odd"
run plan -c "$cfg" --json --no-timing "$odd"
expect_status 0
expect_out "\"path\": \"$fffd\""
run inspect --json "$odd"
expect_status 0
expect_out "\"trace\": \"$fffd\""
run report -c "$cfg" --trace "$odd" --policies static --format json --html odd.html
expect_status 0
expect_out "\"trace_path\": \"$fffd\""
if command -v xmllint > /dev/null 2>&1; then
	xmllint --noout odd.html || fail "a report on an odd file name is not well-formed"
fi
printf 'not a trace' > junk.rrt
run plan -c "$cfg" -o junk.rlp junk.rrt
expect_status 1
[ ! -e junk.rlp ] && [ ! -e junk.rlp.tmp ] || fail "a failed plan left output behind"
exit 0
