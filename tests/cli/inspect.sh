# inspect.sh - relibra inspect on the shipped tiny example and on damaged
# copies: the summary, --dump (the shipped decoded dump), --json, --steps,
# --stats and its config checks, exit codes and messages.
. "$RLB_TOP/tests/cli/lib.sh"

EX="$RLB_TOP/trace_format/examples"
tiny="$EX/tiny.rrt"

run inspect -h
expect_status 0
head -n 1 out > first
echo "usage: relibra inspect [-h] [--json] [--stats] [--dump] [--schedule] [--steps A:B] [-c CONFIG] [--set KEY=VALUE]... [--pack in-order|ffd|dynamic] [--threads N] TRACE|PLAN" > want
cmp -s first want || { cat first; fail "usage line differs"; }

run inspect "$tiny"
expect_status 0
expect_empty err
expect_out "version:        1.0"
expect_out "flags:          0x00000000 (engine order, no gates)"
expect_out "model:          tiny: 16 experts, top-2, 4 MoE layers after 0 dense"
expect_out "ids:            u8, rank-coded"
expect_out "source:         api"
expect_out "steps:          2 (0..1)"
expect_out "sequences:      3"
expect_out "tokens:         12"
expect_out "frames:         2"
expect_out "file bytes:     $(wc -c < "$tiny")"
expect_out "raw id bytes:   96"
expect_out "seek table:     yes"
expect_out "integrity:      ok (all checksums verified, complete)"

# The decoded dump shipped with the example is what --dump prints.
run inspect --dump "$tiny"
expect_status 0
expect_empty err
cmp -s out "$EX/tiny.dump" || { diff out "$EX/tiny.dump"; fail "--dump differs from tiny.dump"; }

run inspect --dump --steps 1 "$tiny"
expect_status 0
[ "$(grep -c '^sequence' out)" -eq 1 ] || { cat out; fail "--steps 1 does not select one sequence"; }
expect_out "sequence 0: step 1, group 0, sample 0, 4 tokens"
expect_out "  layer 3: 11,2 11,2 12,3 12,3"

run inspect --steps :0 "$tiny"
expect_status 0
expect_out "selected:       1 step in 0..0: 2 sequences, 8 tokens"

run inspect --json "$tiny"
expect_status 0
expect_out '"schema": "relibra.inspect/1"'
expect_out '"sequences": 3'
expect_out '"id_coding": "rank"'
expect_out '"ok": true'
if command -v python3 > /dev/null 2>&1; then
	python3 -c 'import json, sys; d = json.load(open("out")); assert d["tokens"] == 12 and d["integrity"]["truncated"] is False' ||
		fail "--json is not the expected JSON"
fi

# --stats needs a config whose model is the trace's.
run inspect --stats "$tiny"
expect_status 2
expect_err "relibra inspect: --stats needs -c CONFIG"
run inspect -c "$CONFIGS/tiny-2x2.yaml" "$tiny"
expect_status 2
expect_err "relibra inspect: -c goes with --stats or --schedule"
run inspect --stats -c "$CONFIGS/qwen3-30b-a3b-h100-1x8.yaml" "$tiny"
expect_status 1
expect_err "relibra inspect: the config does not match the trace: 'model.experts' is 128 in the config, 16 in the trace (config '$CONFIGS/qwen3-30b-a3b-h100-1x8.yaml', trace '$tiny')"
expect_empty out
run inspect --stats -c "$CONFIGS/tiny-2x2.yaml" --set model.topk=4 "$tiny"
expect_status 1
expect_err "'model.topk' is 4 in the config, 2 in the trace"
run inspect --stats -c "$CONFIGS/tiny-2x2.yaml" --pack ffd "$tiny"
expect_status 0
expect_out "stats:          pack ffd, EP 4 (2 nodes), 512 tokens per GPU per micro-batch"
expect_out "GPU max/mean per (micro-batch, layer):"
expect_out "hot-expert churn:"
expect_out "layer  mb-p50"
# Every layer is MoE: no column of model layers.
grep -q "layer  model" out && fail "--stats of an all-MoE model printed model layers"
run inspect --json --stats -c "$CONFIGS/tiny-2x2.yaml" --steps 1: "$tiny"
expect_status 0
expect_out '"pack": "in-order"'
expect_out '"gpu_max_mean_per_micro_batch"'
# One step of one micro-batch: no pair to tell a churn, not 0%.
expect_out '"hot_churn_micro_batch": null'
expect_out '"hot_churn_step": null'
run inspect --stats -c "$CONFIGS/tiny-2x2.yaml" --steps 1 "$tiny"
expect_status 0
expect_out "hot-expert churn: n/a between micro-batches, n/a between steps"
expect_out "    0   2.000   2.000   2.000   2.000     2.000     2.000       n/a         n/a"
run inspect --stats -c "$CONFIGS/tiny-2x2.yaml" --set parallel.micro_batch_tokens=1 "$tiny"
expect_status 0
expect_out "stats:          pack in-order, EP 4 (2 nodes), 1 token per GPU per micro-batch"

run inspect --stats -c "$CONFIGS/tiny-2x2.yaml" --steps 5:9 "$tiny"
expect_status 1
expect_err "relibra inspect: no step of the trace in 5:9 (trace '$tiny' has steps 0..1)"
expect_empty out
run inspect --json --dump --steps 3: "$tiny"
expect_status 1
expect_err "relibra inspect: no step of the trace in 3: (trace '$tiny' has steps 0..1)"

# The header's seed is a u64: --json gives one past 2^63-1 as a string,
# not as a wrapped negative number.
run capture -c "$CONFIGS/tiny-2x2.yaml" --set workload.steps=1 --synthetic --seed 18446744073709551615 -o seed.rrt
expect_status 0
run inspect seed.rrt
expect_status 0
expect_out "seed:           18446744073709551615"
run inspect --json seed.rrt
expect_status 0
expect_out '"seed": "18446744073709551615"'
run capture -c "$CONFIGS/tiny-2x2.yaml" --set workload.steps=1 --synthetic --seed 9223372036854775807 -o seed.rrt
expect_status 0
run inspect --json seed.rrt
expect_status 0
expect_out '"seed": 9223372036854775807'

# --threads counts in blocks of layers: the same statistics for any N.
run capture -c "$CONFIGS/tiny-2x2.yaml" --synthetic --seed 3 -o syn.rrt
expect_status 0
run inspect --json --stats -c "$CONFIGS/tiny-2x2.yaml" --threads 1 syn.rrt
expect_status 0
mv out stats1
run inspect --json --stats -c "$CONFIGS/tiny-2x2.yaml" --threads 3 syn.rrt
expect_status 0
cmp -s stats1 out || fail "--stats differs between 1 and 3 threads"
expect_out '"rank_tokens_max_mean_per_micro_batch"'
# Without --stats the threads read ahead for the integrity check alone:
# the same output for any number.
run inspect --threads 1 "$tiny"
expect_status 0
cp out check1
for n in 2 4; do
	run inspect --threads $n "$tiny"
	expect_status 0
	cmp -s check1 out || fail "inspect differs between 1 and $n threads"
done
run inspect --stats -c "$CONFIGS/tiny-2x2.yaml" --threads 65 "$tiny"
expect_status 2

# Usage errors exit 2.
run inspect --steps 5:2 "$tiny"
expect_status 2
expect_err "relibra inspect: --steps '5:2': the range is empty"
run inspect --steps x "$tiny"
expect_status 2
run inspect --pack zigzag --stats -c "$CONFIGS/tiny-2x2.yaml" "$tiny"
expect_status 2
run inspect
expect_status 2
expect_err "relibra inspect: no trace given"
run inspect "$tiny" "$tiny"
expect_status 2

run inspect missing.rrt
expect_status 1
expect_err "relibra inspect: cannot open 'missing.rrt': No such file or directory"
expect_empty out
# a missing plan is not called a trace
run inspect missing.rlp
expect_status 1
expect_err "relibra inspect: cannot open 'missing.rlp': No such file or directory"

# A header that cannot be read: --json still prints its object, with a
# null header and the error, and the status is 1.
head -c 100 "$tiny" > head.rrt
run inspect --json head.rrt
expect_status 1
expect_out '"header": null'
expect_out '"error": "trace '"'head.rrt'"': header at offset 0: cut at end of file (100 of 164 bytes present)"'
expect_err "relibra inspect: trace 'head.rrt': header at offset 0: cut at end of file"
if command -v python3 > /dev/null 2>&1; then
	python3 -c 'import json; d = json.load(open("out")); assert d["integrity"]["ok"] is False' ||
		fail "--json of an unreadable header is not the expected JSON"
fi
head -c 100 "$RLB_TOP/trace_format/examples/tiny-plan.rlp" > head.rlp
run inspect --json head.rlp
expect_status 1
expect_out '"plan":"head.rlp","header":null,"steps":[],"integrity":{"ok":false,"error":"plan '"'head.rlp'"': header at offset 0'
run inspect --json missing.rrt
expect_status 1
expect_empty out

# A cut file: what was complete is printed, then "truncated"; exit 1.
# Data frame 0 follows the 164-byte header; entry 1 of the 4-entry seek
# table (9 + 3 * 8 bytes before the end) has its size.
size=$(wc -c < "$tiny")
f0=$(od -An -tu4 --endian=little -j $((size - 9 - 3 * 8)) -N 4 "$tiny" | tr -d ' ')
head -c 300 "$tiny" > cut.rrt
run inspect cut.rrt
expect_status 1
expect_out "sequences:      2"
expect_out "seek table:     no"
expect_out "integrity:      truncated: complete frames end at byte $((164 + f0)) of 300"
expect_err "relibra inspect: trace 'cut.rrt' is truncated (its writer did not finish)"
run inspect --dump cut.rrt
expect_status 1
[ "$(grep -c '^sequence' out)" -eq 2 ] || { cat out; fail "the cut file's two sequences are not dumped"; }
expect_out "integrity:      truncated"
# ... and after the complete frames not a frame but garbage: still the
# complete frames' sequences, then the error at the garbage
head -c $((164 + f0)) "$tiny" > garbage.rrt
printf 'GARBAGE, NOT A FRAME' >> garbage.rrt
run inspect --dump garbage.rrt
expect_status 1
[ "$(grep -c '^sequence' out)" -eq 2 ] || { cat out; fail "the sequences before the garbage are not dumped"; }
expect_out "integrity:      corrupt: trace 'garbage.rrt': frame at offset $((164 + f0)): unknown magic"
run inspect --json --dump garbage.rrt
expect_status 1
python3 -c 'import json; d = json.load(open("out")); assert len(d["dump"]) == 2 and not d["integrity"]["ok"]' ||
	{ cat out; fail "--json --dump of the garbage file"; }
# ... also when the garbage is shorter than a frame header: 4 bytes are
# a whole magic, and fewer that begin no frame's magic are no cut frame.
head -c $((164 + f0)) "$tiny" > garbage.rrt
printf 'GARB' >> garbage.rrt
run inspect garbage.rrt
expect_status 1
expect_out "integrity:      corrupt: trace 'garbage.rrt': frame at offset $((164 + f0)): unknown magic 0x42524147"
head -c $((164 + f0)) "$tiny" > garbage.rrt
printf '\050\265\000' >> garbage.rrt
run inspect garbage.rrt
expect_status 1
expect_out "integrity:      corrupt: trace 'garbage.rrt': frame at offset $((164 + f0)): the last 3 bytes start no frame"
# A zstd or skippable magic cut short is a cut frame.
for tail in '\050\265\057' '\123\052\115\030\000\000'; do
	head -c $((164 + f0)) "$tiny" > cut.rrt
	printf "$tail" >> cut.rrt
	run inspect cut.rrt
	expect_status 1
	expect_out "integrity:      truncated: complete frames end at byte $((164 + f0))"
done

# A flipped byte inside the first data frame: an error naming its offset.
cp "$tiny" bad.rrt
printf '\377' | dd of=bad.rrt bs=1 seek=200 conv=notrunc 2> /dev/null
run inspect bad.rrt
expect_status 1
expect_out "version:        1.0"
expect_out "integrity:      corrupt: "
expect_err "relibra inspect: trace 'bad.rrt': data frame at offset 164: "

# --schedule checks the trace as well: a corrupt one is an error without
# a schedule, a cut one prints the schedule of its complete frames, then
# says it is truncated; both exit 1, as without --schedule.
run inspect --schedule -c "$CONFIGS/tiny-2x2.yaml" bad.rrt
expect_status 1
expect_err "relibra inspect: trace 'bad.rrt': data frame at offset 164: "
expect_empty out
head -c 300 "$tiny" > cut.rrt
run inspect --schedule -c "$CONFIGS/tiny-2x2.yaml" cut.rrt
expect_status 1
expect_out '"schema":"relibra.schedule/1"'
expect_err "relibra inspect: trace 'cut.rrt' is truncated (its writer did not finish)"
run inspect --schedule -c "$CONFIGS/tiny-2x2.yaml" "$tiny"
expect_status 0
expect_empty err

# A flipped byte in the header: its checksum.
cp "$tiny" badh.rrt
printf 'X' | dd of=badh.rrt bs=1 seek=70 conv=notrunc 2> /dev/null
run inspect badh.rrt
expect_status 1
expect_err "relibra inspect: trace 'badh.rrt': header at offset 160: checksum mismatch"
expect_empty out
# A file of another kind as the trace: named as such, not by its magic.
printf '\050\265\057\375\044\000\000compressed' > tiny.rrt.zst	# a zstd frame header
run inspect tiny.rrt.zst
expect_status 1
expect_err "relibra inspect: trace 'tiny.rrt.zst': header at offset 0: the file is zstd-compressed, not a relibra trace: decompress it first"
expect_empty out
run inspect "$CONFIGS/tiny-2x2.yaml"
expect_status 1
expect_err "header at offset 0: the file is a relibra YAML config, not a relibra trace"
exit 0
