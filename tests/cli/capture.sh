# capture.sh - relibra capture from each input format and the synthetic
# generator: the trace appears whole (no .tmp), verifies, and inspects.
. "$RLB_TOP/tests/cli/lib.sh"

F="$FIXTURES/import"
tiny="$CONFIGS/tiny-2x2.yaml"
dense="$F/tiny-dense.yaml"

# check_trace PATH STEPS SEQUENCES TOKENS SOURCE: the last run made PATH.
check_trace() {
	expect_status 0
	steps="$2 steps" seqs="$3 sequences" toks="$4 tokens"
	[ "$2" = 1 ] && steps="1 step"
	[ "$3" = 1 ] && seqs="1 sequence"
	[ "$4" = 1 ] && toks="1 token"
	if [ -n "$3" ]; then
		expect_out "$1: $steps, $seqs, $toks, "
	else
		expect_out "$1: $steps, "
	fi
	[ "$(wc -l < out)" -eq 1 ] || { cat out; fail "stdout is more than the summary line"; }
	expect_empty err
	[ -s "$1" ] || fail "$1 is missing or empty"
	[ ! -e "$1.tmp" ] || fail "$1.tmp was left behind"
	bytes=$(wc -c < "$1")
	expect_out " tokens, $bytes bytes"
	if command -v zstd > /dev/null 2>&1; then
		zstd -q -t "$1" || fail "zstd -t $1 fails"
	fi
	"$RELIBRA" inspect "$1" > inspect.out 2>&1 || { cat inspect.out; fail "relibra inspect $1 fails"; }
	grep -q "^source: *$5\$" inspect.out || { cat inspect.out; fail "inspect does not show source $5"; }
	grep -q "^integrity: *ok" inspect.out || { cat inspect.out; fail "inspect does not find $1 intact"; }
}

# shows TEXT: the last inspected trace's report has TEXT.
shows() {
	grep -qF -- "$1" inspect.out || { cat inspect.out; fail "inspect lacks '$1'"; }
}

run capture -c "$tiny" -o sg.rrt --from sglang "$F/sglang.jsonl"
check_trace sg.rrt 2 4 21 sglang

# Options may come in any order; the DeepSeek-like config drops the dense layer.
run capture --from sglang "$F/sglang-dense.jsonl" -o sgd.rrt -c "$dense"
check_trace sgd.rrt 1 3 10 sglang
shows "4 MoE layers after 1 dense"
run capture -c "$tiny" -o vd.rrt --from vllm "$F/vllm-dense.npy"
expect_status 1
expect_err "relibra capture: $F/vllm-dense.npy: shape (3, 5, 2): 5 layers, the config has 4 MoE layers"

run capture -c "$tiny" -o chunks.rrt --from sglang "$F/sglang-chunks.jsonl"
check_trace chunks.rrt 1 2 7 sglang

run capture -c "$tiny" -o v.rrt --from vllm "$F/vllm"
check_trace v.rrt 2 3 13 vllm
run capture -c "$dense" -o vd.rrt --from vllm "$F/vllm-dense.npy" --step 4
check_trace vd.rrt 1 1 3 vllm

run capture -c "$tiny" -o m.rrt --from megatron "$F/megatron.jsonl"
check_trace m.rrt 2 4 10 megatron
run capture -c "$tiny" -o md.rrt --from megatron "$F/megatron"
check_trace md.rrt 2 4 10 megatron
# Both ways of reading the same records give the same trace.
cmp -s m.rrt md.rrt || fail "megatron file and directory traces differ"
# Activation recompute runs the router again in the backward pass: each
# step's records again, last layer first.  They are dropped, and said so.
for s in 0 1; do
	grep "\"step\": $s," "$F/megatron.jsonl"
	grep "\"step\": $s," "$F/megatron.jsonl" | grep '"decoder"' | sed -n '1!G;h;$p'
done > recompute.jsonl
run capture -c "$tiny" -o rc.rrt --from megatron recompute.jsonl
expect_status 0
expect_out "rc.rrt: 2 steps, 4 sequences, 10 tokens, "
expect_err "relibra capture: note: 16 records of 'recompute.jsonl' repeated the routing of a sequence already written in its step and were dropped as activation recompute (--keep-repeats keeps them)"
cmp -s m.rrt rc.rrt || fail "the trace with recompute differs from the one without"
run capture -c "$tiny" -o rck.rrt --from megatron recompute.jsonl --keep-repeats
check_trace rck.rrt 2 8 20 megatron
run capture -c "$tiny" -o x.rrt --from sglang "$F/sglang.jsonl" --keep-repeats
expect_status 2
expect_err "relibra capture: --keep-repeats applies to --from megatron only"
[ ! -e x.rrt ] || fail "a usage error left x.rrt"

# A streamed request cut off before its last chunk (which carries the
# routing) is skipped and counted.
{ cat "$F/sglang.jsonl"; printf '%s\n' '{"text": "x", "meta_info": {"id": "cut", "finish_reason": null}}'; } > sgcut.jsonl
run capture -c "$tiny" -o sgcut.rrt --from sglang sgcut.jsonl
expect_status 0
expect_err "relibra capture: note: 1 streamed request of 'sgcut.jsonl' never sent its last chunk, which carries the routing, and was skipped"
cmp -s sg.rrt sgcut.rrt || fail "the cut-off stream changed the trace"

run capture -c "$tiny" -o j.rrt --from jsonl "$F/routing.jsonl"
check_trace j.rrt 2 3 9 jsonl
shows "(engine order, no gates)"
# Gates kept, ids sorted, another level: still a valid trace, and a different one.
run capture -c "$tiny" -o jg.rrt --from jsonl "$F/routing.jsonl" --gates --sorted --level 19
check_trace jg.rrt 2 3 9 jsonl
shows "(sorted ids, gates)"
cmp -s j.rrt jg.rrt && fail "--gates --sorted made no difference"
# --step and --group-size renumber.
run capture -c "$tiny" -o js.rrt --from jsonl "$F/routing.jsonl" --step 7 --group-size 2
check_trace js.rrt 1 3 9 jsonl

# --set reaches the config: 8 experts cannot hold the fixtures' ids.
run capture -c "$tiny" --set model.experts=8 -o x.rrt --from jsonl "$F/routing.jsonl"
expect_status 1
expect_err "relibra capture: $F/routing.jsonl:1: experts[0][0][1]: value 11 is not an expert id in [0, 8)"
[ ! -e x.rrt ] && [ ! -e x.rrt.tmp ] || fail "a failed capture left output"

# Synthetic: deterministic per seed; --uniform is a different trace.
run capture -c "$tiny" --synthetic -o s1.rrt
check_trace s1.rrt 3 '' '' synthetic
grep -q "^seed: *1\$" inspect.out || { cat inspect.out; fail "the synthetic trace does not record seed 1"; }
run capture -c "$tiny" --synthetic --seed 1 -o s1b.rrt
expect_status 0
cmp -s s1.rrt s1b.rrt || fail "the default seed is not 1, or synthetic capture is not deterministic"
run capture -c "$tiny" --synthetic --seed 2 -o s2.rrt
expect_status 0
cmp -s s1.rrt s2.rrt && fail "seeds 1 and 2 gave the same trace"
run capture -c "$tiny" --synthetic --uniform -o su.rrt
check_trace su.rrt 3 '' '' synthetic
cmp -s s1.rrt su.rrt && fail "--uniform made no difference"
exit 0
