# capture_errors.sh - relibra capture on bad inputs (exit 1, the record and
# field named, no output and no .tmp left, an old output untouched) and
# usage errors (exit 2 with the usage).
. "$RLB_TOP/tests/cli/lib.sh"

F="$FIXTURES/import"
tiny="$CONFIGS/tiny-2x2.yaml"

# fails FORMAT INPUT MESSAGE [CONFIG]: capture fails with MESSAGE, leaves t.rrt as it was.
# $opts: more options (split into words), e.g. --gates.
opts=
fails() {
	printf 'old' > t.rrt
	# shellcheck disable=SC2086
	run capture -c "${4:-$tiny}" -o t.rrt $opts --from "$1" "$2"
	expect_status 1
	expect_err "relibra capture: $3"
	[ "$(wc -l < err)" -eq 1 ] || { cat err; fail "more than one line on stderr"; }
	expect_empty out
	[ "$(cat t.rrt)" = old ] || fail "a failed capture changed the old output"
	[ ! -e t.rrt.tmp ] || fail "a failed capture left t.rrt.tmp"
}

# One bad record per format, after good ones.
{ cat "$F/sglang.jsonl"; printf '{"step": 1, "meta_info": {"routed_experts": "AAAA!AAA"}}\n'; } > bad-sg.jsonl
fails sglang bad-sg.jsonl "bad-sg.jsonl:6: meta_info.routed_experts: invalid base64 character '!' at byte 4"

# A Qwen3-30B-A3B-shaped record of 4800 int32 values: 12.5 rows of 48 layers x 8.
printf '{"meta_info": {"routed_experts": "%s"}}\n' "$(head -c 19200 /dev/zero | base64 | tr -d '\n')" > q.jsonl
fails sglang q.jsonl "q.jsonl:1: meta_info.routed_experts: 4800 values is not a multiple of 48 layers x 8 (topk)" \
	"$CONFIGS/qwen3-30b-a3b-h100-1x8.yaml"

mkdir vllm
cp "$F"/vllm/*.npy vllm/
head -c 150 "$F/vllm/rollout_step0_group0_sample1.npy" > vllm/rollout_step0_group0_sample1.npy
fails vllm vllm "vllm/rollout_step0_group0_sample1.npy: truncated: the array needs 48 bytes from byte 128, the file ends at byte 150"
printf 'not numpy at all' > vllm/rollout_step0_group0_sample1.npy
fails vllm vllm "vllm/rollout_step0_group0_sample1.npy: not a .npy file: bad magic at byte 0"
# A *.npy entry that cannot be read is an error, not skipped.
mkdir vllm2
cp "$F"/vllm/*.npy vllm2/
ln -s gone.npy vllm2/rollout_step2_group0_sample0.npy
fails vllm vllm2 "cannot open 'vllm2/rollout_step2_group0_sample0.npy': No such file or directory"
rm vllm2/rollout_step2_group0_sample0.npy
mkdir vllm2/sub.npy
fails vllm vllm2 "'vllm2/sub.npy' is not a regular file"
mkdir mg
cp "$F"/megatron/*.jsonl mg/
ln -s loop.jsonl mg/loop.jsonl
fails megatron mg "cannot open 'mg/loop.jsonl': Too many levels of symbolic links"

head -n 3 "$F/megatron.jsonl" > bad-m.jsonl
sed -n 5p "$F/megatron.jsonl" >> bad-m.jsonl
fails megatron bad-m.jsonl 'bad-m.jsonl: sequence of step 0, rank 0 (stage "pre_dispatch", block "decoder") lacks MoE layer 3 at the end of the input'
sed 's/"topk": 2/"topk": 3/' "$F/megatron.jsonl" > bad-m.jsonl
fails megatron bad-m.jsonl "bad-m.jsonl:1: topk: 3, the config has 2"

{ cat "$F/routing.jsonl"; printf '{"step": 2, "experts": [[[1, 2], [3, 4], [5, -1], [7, 8]]]}\n'; } > bad-j.jsonl
fails jsonl bad-j.jsonl "bad-j.jsonl:4: experts[0][2][1]: value -1 is not an expert id in [0, 16)"
printf '{"step": 0, "experts": [\n' > bad-j.jsonl
fails jsonl bad-j.jsonl "bad-j.jsonl:1:25: invalid JSON: ']' expected near end of file"
# 2M junk tokens after a first token of 1024 layers: the shape is refused
# before buffers of tokens x layers x topk are allocated (256 GiB here).
opts="--set model.experts=256 --set model.topk=64 --set model.moe_layers=1024"
{
	printf '{"experts": [[0'
	i=1
	while [ $i -lt 1024 ]; do printf ',0'; i=$((i + 1)); done
	printf ']'
	yes ',0' | head -n 2000000 | tr -d '\n'
	printf ']}\n'
} > junk.jsonl
fails jsonl junk.jsonl "junk.jsonl:1: experts[0][0]: expected an array"
# The same for a Megatron record: its rows are checked before the
# sequence is sized for every layer.
{
	printf '{"step": 0, "layer": 0, "num_tokens": 2000000, "topk": 64, "top_indices": [0'
	yes ',0' | head -n 1999999 | tr -d '\n'
	printf ']}\n'
} > junk.jsonl
fails megatron junk.jsonl "junk.jsonl:1: top_indices[0]: expected an array of topk 64 ids"
opts=
fails jsonl missing.jsonl "cannot open 'missing.jsonl': No such file or directory"
fails jsonl "$F" "'$F' is a directory"
printf '\n\n' > empty.jsonl
fails jsonl empty.jsonl "'empty.jsonl' holds no records"
printf '{"step": 0, "layer": 0, "num_tokens": 1, "topk": 2, "top_indices": [[0, 1]], "mtp_idx": 0}\n' > mtp.jsonl
fails megatron mtp.jsonl "'mtp.jsonl' holds no routing of the model's layers (1 record read)"
mkfifo fifo.npy
fails vllm fifo.npy "vllm input 'fifo.npy' is not a regular file nor a directory (a pipe cannot be read: save the .npy file first)"
# vllm cannot read stdin: a usage error, before the output is touched.
printf 'old' > t.rrt
run capture -c "$tiny" -o t.rrt --from vllm - < "$F/vllm-dense.npy"
expect_status 2
expect_err "relibra capture: --from vllm reads a .npy file or a directory, not standard input"
[ "$(cat t.rrt)" = old ] && [ ! -e t.rrt.tmp ] || fail "a usage error touched t.rrt"
for f in vllm megatron; do
	run capture -c "$tiny" -o t.rrt --from $f "$F/$f" --gates
	expect_status 2
	expect_err "relibra capture: --gates: $f inputs carry no gate weights (sglang and jsonl do)"
done

# Gate weights must be finite and not negative: 1e39 overflows float32.
opts=--gates
printf '{"experts": [[[1,2],[3,4],[5,6],[7,8]]], "gates": [[[0.5,0.5],[0.5,0.5],[0.5,0.5],[0.5,1e39]]]}\n' > g.jsonl
fails jsonl g.jsonl "g.jsonl:1: gates[0][3][1]: value 1e+39 is not a finite non-negative float32"
printf '{"experts": [[[1,2],[3,4],[5,6],[7,8]]], "gates": [[[0.5,0.5],[0.5,-3],[0.5,0.5],[0.5,0.5]]]}\n' > g.jsonl
fails jsonl g.jsonl "g.jsonl:1: gates[0][1][1]: value -3 is not a finite non-negative float32"
# SGLang: one row of int32 ids 1..8, float32 gates 0.5 with a NaN last.
ids=$(printf '\001\000\000\000\002\000\000\000\003\000\000\000\004\000\000\000\005\000\000\000\006\000\000\000\007\000\000\000\010\000\000\000' | base64 | tr -d '\n')
half='\000\000\000\077'
gates=$(printf "$half$half$half$half$half$half$half"'\000\000\300\177' | base64 | tr -d '\n')
printf '{"meta_info": {"routed_experts": "%s", "routed_experts_gates": "%s"}}\n' "$ids" "$gates" > nan.jsonl
fails sglang nan.jsonl "nan.jsonl:1: meta_info.routed_experts_gates: value nan at row 0, layer 3, column 1 is not a finite non-negative float32"
# ... and the same record with every weight 0.5 imports.
gates=$(printf "$half$half$half$half$half$half$half$half" | base64 | tr -d '\n')
printf '{"meta_info": {"routed_experts": "%s", "routed_experts_gates": "%s"}}\n' "$ids" "$gates" > ok.jsonl
run capture -c "$tiny" -o ok.rrt --gates --from sglang ok.jsonl
expect_status 0

# Group ids past 4294967295 are refused, not wrapped to 0: with --group
# 4294967295 --group-size 4 a step has room for 4 sequences.
opts="--group 4294967295 --group-size 4"
for i in 0 1 2 3 4 5; do
	printf '{"experts": [[[1,2],[3,4],[5,6],[7,8]]]}\n'
done > six.jsonl
fails jsonl six.jsonl "six.jsonl:5: group: sequence 4 of step 0 gets group 4294967296 (--group 4294967295 --group-size 4), above 4294967295"
run capture -c "$tiny" -o six.rrt --group 4294967294 --group-size 4 --from jsonl six.jsonl
expect_status 0
expect_out "six.rrt: 1 step, 6 sequences, 6 tokens"
# The same for incremental SGLang returns, written at the end of the input.
opts="--group 4294967295 --group-size 1"
for id in a b; do
	printf '{"meta_info": {"id": "%s", "routed_experts": "%s", "routed_experts_start_len": 0}}\n' $id "$ids"
done > chunks.jsonl
fails sglang chunks.jsonl "chunks.jsonl: group: sequence 1 of step 0 gets group 4294967296 (--group 4294967295 --group-size 1), above 4294967295"
fails vllm "$F/vllm" "$F/vllm/rollout_step0_group0_sample1.npy: group: sequence 1 of step 0 gets group 4294967296 (--group 4294967295 --group-size 1), above 4294967295"
printf '{"group": 7, "sample": 4294967295, "experts": [[[1,2],[3,4],[5,6],[7,8]]]}\n{"group": 7, "experts": [[[1,2],[3,4],[5,6],[7,8]]]}\n' > s.jsonl
opts=
fails jsonl s.jsonl "s.jsonl:2: sample: the sequence after sample 4294967295 of group 7 gets sample 4294967296, above 4294967295"

# A model shape a trace cannot hold fails at the config, before any work.
for set in "model.experts=65536:[1, 65535]" "model.topk=65:[1, 64]" "model.moe_layers=1025:[1, 1024]"; do
	kv=${set%%:*}
	run capture -c "$tiny" --set "$kv" -o t.rrt --synthetic
	expect_status 1
	expect_err "relibra capture: --set '$kv': value ${kv#*=} for '${kv%%=*}' is out of range ${set#*:}"
	[ ! -e t.rrt.tmp ] || fail "a config error left t.rrt.tmp"
done

# A bad config is a failure, not a usage error.
printf 'model:\n  experts: many\n' > bad.yaml
run capture -c bad.yaml -o t.rrt --from jsonl "$F/routing.jsonl"
expect_status 1
expect_err "relibra capture: bad.yaml:2:"

# Usage errors: exit 2, the reason, then the usage.
usage_fails() {
	expect_status 2
	expect_err "relibra capture: $1"
	expect_err "usage: relibra capture [-h] -c CONFIG"
	expect_empty out
	[ ! -e u.rrt ] && [ ! -e u.rrt.tmp ] || fail "a usage error left output"
}
run capture -c "$tiny" --from jsonl "$F/routing.jsonl"
usage_fails "missing -o TRACE"
run capture -o u.rrt --from jsonl "$F/routing.jsonl"
usage_fails "-c CONFIG is required"
run capture -c "$tiny" -o u.rrt --synthetic --from jsonl "$F/routing.jsonl"
usage_fails "--synthetic and --from are exclusive"
run capture -c "$tiny" -o u.rrt
usage_fails "give --synthetic or --from FORMAT INPUT"
run capture -c "$tiny" -o u.rrt --from jsonl
usage_fails "--from jsonl needs an INPUT (a path, or - for stdin)"
run capture -c "$tiny" -o u.rrt --from parquet x
usage_fails "--from: unknown format 'parquet' (expected sglang, vllm, megatron or jsonl)"
run capture -c "$tiny" -o u.rrt --from jsonl x y
usage_fails "unexpected argument 'y'"
run capture -c "$tiny" -o u.rrt --synthetic extra
usage_fails "unexpected argument 'extra'"
run capture -c "$tiny" -o u.rrt --from jsonl x --seed 3
usage_fails "--seed applies to --synthetic only"
run capture -c "$tiny" -o u.rrt --from jsonl x --uniform
usage_fails "--uniform applies to --synthetic only"
run capture -c "$tiny" -o u.rrt --synthetic --step 1
usage_fails "--step applies to --from only"
run capture -c "$tiny" -o u.rrt --synthetic --group-size 4
usage_fails "--group-size applies to --from only"
run capture -c "$tiny" -o u.rrt --synthetic --gates
usage_fails "--gates applies to --from only"
run capture -c "$tiny" -o u.rrt --from jsonl x --level 0
usage_fails "--level"
run capture -c "$tiny" -o u.rrt --from jsonl x --group-size 0
usage_fails "--group-size"
run capture -c "$tiny" -o u.rrt --from jsonl x --step -1
usage_fails "--step"
run capture -c "$tiny" -o u.rrt --synthetic --seed x
usage_fails "--seed"
run capture -c "$tiny" -o u.rrt --synthetic --bogus
usage_fails "unknown option '--bogus'"
run capture -c "$tiny" -o
usage_fails "option '-o' needs a value"

# -h: the usage on stdout, exit 0.
run capture -h
expect_status 0
expect_empty err
head -n 1 out | grep -qxF 'usage: relibra capture [-h] -c CONFIG [--set KEY=VALUE]... -o TRACE (--synthetic [--seed N] [--uniform] | --from FORMAT INPUT) [--sorted] [--gates] [--step N] [--group N] [--group-size N] [--keep-repeats] [--level N]' ||
	{ cat out; fail "wrong usage line"; }
# The output is checked before the work: not stdout, not the input, not a
# directory, in a directory that exists.
run capture -c "$CONFIGS/tiny-2x2.yaml" --synthetic -o -
expect_status 2
expect_err "relibra capture: -o '-': this output goes to a file"
printf '{"experts": [[[1,2]]]}\n' > in.jsonl
cp in.jsonl in.orig
run capture -c "$CONFIGS/tiny-2x2.yaml" --from jsonl in.jsonl -o in.jsonl
expect_status 2
expect_err "relibra capture: -o 'in.jsonl' is also the input: choose another path"
cmp -s in.jsonl in.orig || fail "capture -o INPUT wrote over the input"
# ... nor the file standard input reads
run capture -c "$CONFIGS/tiny-2x2.yaml" --from jsonl - -o in.jsonl < in.jsonl
expect_status 2
expect_err "relibra capture: -o 'in.jsonl' is also standard input: choose another path"
cmp -s in.jsonl in.orig || fail "capture -o STDIN-FILE wrote over the input"
# The config and the dump cannot share a pipe (or a file): the config's
# reader would leave the import nothing.
cat "$CONFIGS/tiny-2x2.yaml" | run capture -c /dev/stdin --from jsonl - -o u.rrt
usage_fails "the config '/dev/stdin' is also standard input: give each its own file"
run capture -c "$CONFIGS/tiny-2x2.yaml" --from jsonl "$CONFIGS/tiny-2x2.yaml" -o u.rrt
usage_fails "the config '$CONFIGS/tiny-2x2.yaml' is also the input: give each its own file"
# ... nor a file of an input directory that the importer reads (an input,
# or the next capture's input): elsewhere there is fine
mkdir -p mgdir vdir
cp "$F"/megatron/*.jsonl mgdir/
cp "$F"/vllm/*.npy vdir/
cp mgdir/router_trace_rank0.jsonl rank0.orig
for o in mgdir/router_trace_rank0.jsonl mgdir/new.jsonl ./mgdir/new.jsonl; do
	run capture -c "$CONFIGS/tiny-2x2.yaml" --from megatron mgdir -o "$o"
	expect_status 2
	expect_err "relibra capture: -o '$o' is in the input directory 'mgdir', whose *.jsonl files are all read: choose another path"
done
cmp -s mgdir/router_trace_rank0.jsonl rank0.orig || fail "capture -o wrote over an input in the directory"
[ ! -e mgdir/new.jsonl ] || fail "a usage error left mgdir/new.jsonl"
run capture -c "$CONFIGS/tiny-2x2.yaml" --from vllm vdir -o vdir/t.npy
expect_status 2
expect_err "relibra capture: -o 'vdir/t.npy' is in the input directory 'vdir', whose *.npy files are all read: choose another path"
run capture -c "$CONFIGS/tiny-2x2.yaml" --from megatron mgdir -o mgdir/t.rrt
expect_status 0
mkdir -p adir
run capture -c "$CONFIGS/tiny-2x2.yaml" --synthetic -o adir
expect_status 1
expect_err "relibra capture: -o 'adir' is a directory"
run capture -c "$CONFIGS/tiny-2x2.yaml" --synthetic -o nodir/x.rrt
expect_status 1
expect_err "relibra capture: -o 'nodir/x.rrt': no directory 'nodir'"
# a workload whose tables exceed the machine's memory fails at once
run capture -c "$CONFIGS/tiny-2x2.yaml" --set model.experts=65532 --set model.moe_layers=1024 \
	--set workload.topics=4096 --synthetic -o huge.rrt
expect_status 1
expect_err "relibra capture: synthetic: the preference tables of 4096 topics x 1024 layers x 65532 experts need 1101.3 GB, more than the machine's"
[ ! -e huge.rrt ] && [ ! -e huge.rrt.tmp ] || fail "a failed capture left huge.rrt"
# the trace is read back once written: a FIFO or a device will not do
mkfifo fifo
run capture -c "$CONFIGS/tiny-2x2.yaml" --synthetic -o fifo
expect_status 1
expect_err "relibra capture: -o 'fifo' is not a regular file (it is read back once written)"
[ -p fifo ] || fail "capture -o FIFO replaced the FIFO"
# A trace, a .npy array or a compressed file given to a JSON-lines
# importer: named as such after the NUL byte.
cp "$RLB_TOP/trace_format/examples/tiny.rrt" .
fails jsonl tiny.rrt "tiny.rrt:1:6: a NUL byte at byte offset 5, expected JSON text (a relibra trace: capture writes traces, inspect and plan read them)"
fails sglang "$F/vllm-dense.npy" "$F/vllm-dense.npy:1:8: a NUL byte at byte offset 7, expected JSON text (a .npy array: --from vllm reads them)"
# A UTF-8 byte order mark, first or on a later line (files concatenated):
# named, not quoted invisible in a JSON parser's message.
{ printf '\357\273\277'; cat "$F/routing.jsonl"; } > bom.jsonl
fails jsonl bom.jsonl "bom.jsonl:1:1: a UTF-8 byte order mark at byte offset 0, which JSON does not allow: save it without one"
{ head -n 1 "$F/sglang.jsonl"; printf '\357\273\277'; tail -n +2 "$F/sglang.jsonl"; } > bom.jsonl
fails sglang bom.jsonl "bom.jsonl:2:1: a UTF-8 byte order mark at byte offset $(head -n 1 "$F/sglang.jsonl" | wc -c | tr -d ' '), which JSON does not allow: save it without one"
printf '\037\213\010\000\000\000\000\000\000\003compressed' > r.jsonl.gz	# a gzip header
fails jsonl r.jsonl.gz "r.jsonl.gz:1:4: a NUL byte at byte offset 3, expected JSON text (gzip-compressed: decompress it first)"
fails vllm tiny.rrt "tiny.rrt: not a .npy file: bad magic at byte 0 (a relibra trace: capture writes traces, inspect and plan read them)" \
	"$F/tiny-dense.yaml"
exit 0
