# report.sh - relibra report on fixture results: every format against its
# golden file, -o written atomically, row order independent of the order
# of the files, mixed traces grouped with a warning, and every bad input
# (other schema version, another schema, missing or mistyped fields, empty
# or broken JSON, usage mistakes) refused with its message and status.
. "$RLB_TOP/tests/cli/lib.sh"

cp "$FIXTURES"/report/*.json .
IN="plan-static.json plan-eplb.json plan-eplb-oracle.json plan-replicate.json plan-relibra.json plan-ideal.json train-relibra.json"

# The producer's version changes with releases; the golden files hold 0.1.0.
unversion() {
	sed 's/"version": "[^"]*"/"version": "0.1.0"/'
}

for f in table markdown csv json; do
	ext=$f
	[ $f = markdown ] && ext=md
	# shellcheck disable=SC2086
	run report --format $f $IN
	expect_status 0
	expect_empty err
	unversion < out > got.$ext
	diff -u "$FIXTURES/report/expected.$ext" got.$ext || fail "report --format $f differs from expected.$ext"
done

# table is the default; the files' order does not matter
# shellcheck disable=SC2086
run report train-relibra.json plan-ideal.json plan-relibra.json plan-static.json \
	plan-replicate.json plan-eplb-oracle.json plan-eplb.json
expect_status 0
diff -u "$FIXTURES/report/expected.table" out || fail "row order depends on the file order"

# -o: written atomically, nothing on stdout
# shellcheck disable=SC2086
run report --format csv -o rep.csv $IN
expect_status 0
expect_empty out
cmp rep.csv "$FIXTURES/report/expected.csv" || fail "-o rep.csv differs"
[ ! -e rep.csv.tmp ] || fail "rep.csv.tmp left behind"
run report -o /nonexistent/dir/rep.csv plan-static.json
expect_status 1
expect_err "relibra report: -o '/nonexistent/dir/rep.csv': no directory '/nonexistent/dir'"

# speedup over eplb-oracle is stated missing, not guessed
run report plan-static.json plan-relibra.json
expect_status 0
expect_out "note: no eplb-oracle result: speedup over eplb-oracle not shown"
grep -E '^relibra ' out | awk '{ if ($5 != "-") exit 1 }' || fail "x eplb-oracle shown without eplb-oracle"

# mixed traces: grouped, with a warning
run report plan-relibra.json other-trace.json plan-static.json
expect_status 0
expect_err "relibra report: warning: the results come from 2 different configurations, traces, steps or packings; each group is compared on its own"
expect_out "trace b28db7b764fc3875 (tiny.rrt)"
expect_out "trace 0123456789abcdef (other.rrt)"
[ "$(grep -c '^relibra ' out)" = 2 ] || fail "expected one relibra row per group"
run report --format csv plan-relibra.json other-trace.json
[ "$(cut -d, -f1 out | sort -u | tr '\n' ' ')" = "1 2 group " ] || fail "CSV lacks the two groups"

# a baseline given twice is not guessed; two measured runs of one plan
# are each set against it
cp plan-eplb-oracle.json again-eplb-oracle.json
run report plan-static.json plan-eplb-oracle.json again-eplb-oracle.json plan-relibra.json
expect_status 0
expect_out "note: several eplb-oracle results: speedup over eplb-oracle not shown"
expect_out "eplb-oracle (again-eplb-oracle.json) "
grep -E '^relibra ' out | awk '{ if ($5 != "-") exit 1 }' || fail "x eplb-oracle from one of two eplb-oracle results"
cp train-relibra.json train2-relibra.json
run report plan-static.json plan-relibra.json train-relibra.json train2-relibra.json
expect_status 0
expect_out "relibra (train2-relibra.json) (measured)"
grep -q '^relibra (train-relibra.json)  *step ' out || fail "first measured run not set against the simulation"
grep -q '^relibra (train2-relibra.json)  *step ' out || fail "second measured run not set against the simulation"

# results over other steps of the trace are not compared
sed -e 's/"last_step": 4294967295/"last_step": 0/' -e 's/"steps": 3,/"steps": 1,/' \
	plan-eplb-oracle.json > step0-eplb-oracle.json
run report plan-static.json plan-relibra.json step0-eplb-oracle.json
expect_status 0
expect_err "relibra report: warning: the results come from 2 different configurations, traces, steps or packings"
expect_out "(tiny.rrt), 1 step (step 0)"
grep -E '^relibra ' out | awk '{ if ($5 != "-") exit 1 }' || fail "x eplb-oracle taken from another step range"
sed -e 's/"first_step": 0/"first_step": 1/' -e 's/"last_step": 2/"last_step": 3/' \
	train-relibra.json > steps13-relibra.json
run report plan-relibra.json train-relibra.json steps13-relibra.json
expect_status 0
expect_out "3 steps (0 to 2)"
expect_out "3 steps (1 to 3)"
[ "$(grep -c '^relibra (measured) ' out)" = 2 ] || fail "steps 0-2 and 1-3 in one group"
[ "$(grep -c '^relibra  *step ' out)" = 1 ] || fail "steps 1-3 measured against steps 0-2 simulated"

# two results of one label are named by their files, whatever bytes those hold
bad=$(printf 'static-\377.json')
cp plan-static.json "$bad"
run report --format json "$bad" plan-static.json
expect_status 0
[ "$(grep -c '"source"' out)" = 2 ] || fail "--format json dropped a result named by a non-UTF-8 file"
expect_out "\"label\": \"static (static-$(printf '\357\277\275').json)\""

# bad inputs: message names the file, exit 1
check_bad() {	# FILE MESSAGE
	run report plan-static.json "$1"
	expect_status 1
	expect_err "relibra report: $2"
	expect_empty out
}
check_bad bad-version.json "'bad-version.json': schema 'relibra.result/2' is not supported (this relibra reads relibra.result/1)"
check_bad bad-schema.json "'bad-schema.json': schema 'eplb.export/1' is not a relibra result (relibra.result/1)"
check_bad bad-missing.json "'bad-missing.json': missing 'tokens_per_s'"
check_bad bad-missing-cluster.json "'bad-missing-cluster.json': missing 'config.cluster'"
check_bad bad-type.json "'bad-type.json': 'step_time_s' is not a number"
check_bad bad-empty.json "'bad-empty.json': empty file"
check_bad bad-not-json.json "'bad-not-json.json': invalid JSON at line 2, column 14 (byte 45): invalid token near 'plan'"
# blank lines and spaces ahead of the object count in the position
{ printf '\n\n  '; cat "$FIXTURES/report/bad-not-json.json"; } > lead-not-json.json
check_bad lead-not-json.json "'lead-not-json.json': invalid JSON at line 4, column 14 (byte 49): invalid token near 'plan'"
check_bad missing.json "cannot open 'missing.json': No such file or directory"
# a trace or a plan where a result is expected: said so
cp "$RLB_TOP/trace_format/examples/tiny.rrt" "$RLB_TOP/trace_format/examples/tiny-plan.rlp" .
check_bad tiny.rrt "'tiny.rrt' is a relibra trace, not a result: give the JSON of plan --summary or train-step -o, or the trace as --trace"
check_bad tiny-plan.rlp "'tiny-plan.rlp' is a relibra plan, not a result: give the JSON of plan --summary or train-step -o"
# other kinds, compressed files and a byte order mark: said so too
cp "$FIXTURES/hf/olmoe.json" "$CONFIGS/tiny-2x2.yaml" .
check_bad olmoe.json "'olmoe.json' is a Hugging Face config.json, not a result (the JSON of plan --summary or train-step -o)"
check_bad tiny-2x2.yaml "'tiny-2x2.yaml' is a relibra YAML config, not a result (the JSON of plan --summary or train-step -o)"
printf '\037\213\010\000\000\000\000\000\000\003compressed' > static.json.gz	# a gzip header
check_bad static.json.gz "'static.json.gz' is gzip-compressed, not a result (the JSON of plan --summary or train-step -o): decompress it first"
{ printf '\357\273\277'; cat plan-static.json; } > bom.json
check_bad bom.json "'bom.json' starts with a UTF-8 byte order mark (bytes 0-2), which JSON does not allow: save it without one"
run report - < plan-relibra.json
expect_status 0
expect_out "relibra "
# '-' is the file on standard input: given again by its name, it is twice
run report plan-static.json - < plan-static.json
expect_status 2
expect_err "relibra report: 'plan-static.json' and '-' are the same result file"
expect_empty out

# usage errors: exit 2 with the usage
run report
expect_status 2
expect_err "relibra report: no results: give RESULT.json files or -c CONFIG --trace TRACE"
expect_err "usage: relibra report"
# a file given twice would be two rows no label tells apart
run report plan-static.json plan-relibra.json plan-static.json
expect_status 2
expect_empty out
expect_err "relibra report: result file 'plan-static.json' given twice"
run report plan-static.json ./plan-static.json
expect_status 2
expect_err "relibra report: 'plan-static.json' and './plan-static.json' are the same result file"
run report --format xml plan-static.json
expect_status 2
expect_err "relibra report: --format: unknown format 'xml' (table, markdown, csv or json)"
run report --trace x.rrt
expect_status 2
expect_err "relibra report: --trace needs -c CONFIG"
run report -c "$CONFIGS/tiny-2x2.yaml" plan-static.json
expect_status 2
expect_err "relibra report: -c goes with --trace"
run report --policies static plan-static.json
expect_status 2
expect_err "relibra report: --policies goes with --trace"
run report --threads 2 plan-static.json
expect_status 2
expect_err "relibra report: --threads goes with --trace"
run report --layer 1 --html x.html plan-static.json
expect_status 2
expect_err "relibra report: --layer goes with --trace"
[ ! -e x.html ] || fail "--layer without --trace left x.html"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --layer 1
expect_status 2
expect_err "relibra report: --layer goes with --html or --svg"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies static,fast
expect_status 2
expect_err "relibra report: --policies: unknown policy 'fast'"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies static,static
expect_status 2
expect_err "relibra report: --policies: 'static' and 'static' are the same plan, 'static'"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies relibra+no-reorder+colocate,relibra+colocate+no-reorder
expect_status 2
expect_err "relibra report: --policies: 'relibra+no-reorder+colocate' and 'relibra+colocate+no-reorder' are the same plan, 'relibra --no-reorder'"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies relibra,relibra+no-colocate
expect_status 2
expect_err "relibra report: --policies: 'relibra' and 'relibra+no-colocate' are the same plan, 'relibra'"
# which entries are the same plan depends on the config: balancer.colocate
# auto turns colocate on for group-limited routing
grp="--set model.expert_groups=4 --set model.topk_groups=2"
run report -c "$CONFIGS/tiny-2x2.yaml" $grp --trace x.rrt --policies relibra,relibra+colocate
expect_status 2
expect_err "relibra report: --policies: 'relibra' and 'relibra+colocate' are the same plan, 'relibra --colocate'"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies relibra,relibra+colocate \
	--sweep balancer.colocate=false,true
expect_status 2
expect_err "relibra report: --policies: 'relibra' and 'relibra+colocate' are the same plan, 'relibra --colocate' (with balancer.colocate=true)"
# A key that adds an option to the labels (the relay adds " --relay" to
# every policy but the ideal) is swept in one column per policy, so each
# column compares its policy with and without the option.
run report -c "$CONFIGS/tiny-2x2.yaml" --trace tiny.rrt --steps 0:0 --policies static,eplb-oracle,relibra \
	--sweep balancer.relay=true,false --svg sweep-relay
expect_status 0
expect_out "balancer.relay  static  eplb-oracle  relibra"
awk '/against balancer.relay/ { t = 1; next } t && /^(true|false) / { n++; if ($0 ~ / - | -$/) bad = 1 }
	/^$/ { t = 0 } END { exit !(n == 6 && !bad) }' out ||
	fail "the relay sweep's tables do not fill one column per policy"
grep -q 'data-label="static"' sweep-relay/sweep-step.svg &&
	! grep -q 'data-label="static --relay"' sweep-relay/sweep-step.svg ||
	fail "the relay sweep's chart does not draw one line per policy"
# with the relay everywhere, eplb-oracle --relay is the eplb-oracle baseline
run report -c "$CONFIGS/tiny-2x2.yaml" --trace tiny.rrt --steps 0:0 --set balancer.relay=true
expect_status 0
expect_out "note: x eplb-oracle: over eplb-oracle --relay (no eplb-oracle without the relay)"
awk '$1 == "relibra" && $2 == "--relay" { exit !($6 != "-") } ' out ||
	fail "relibra --relay has no speedup over eplb-oracle --relay"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --sweep cluster.rdma_gbps=25,45 \
	--sweep cluster.nvlink_gbps=1,2
expect_status 2
expect_err "relibra report: --sweep given twice: a report sweeps one key"
# lists that do not add up: refused, not the last one alone
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies static --policies relibra
expect_status 2
expect_err "relibra report: --policies given twice: give one comma-separated list"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --trace y.rrt
expect_status 2
expect_err "relibra report: --trace given twice: a report plans one trace"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --html x.rrt
expect_status 2
expect_err "relibra report: --html 'x.rrt' is also the trace: choose another path"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --svg -
expect_status 2
expect_err "relibra report: --svg '-': this output goes to a file"
# --svg DIR writes DIR/CHART.svg and DIR/CHART-gN.svg: an input or another
# output of that name is refused before anything is written over it.
mkdir charts
cp tiny.rrt charts/steps.svg
run report -c "$CONFIGS/tiny-2x2.yaml" --trace charts/steps.svg --svg charts
expect_status 2
expect_err "relibra report: --svg 'charts' would write a chart over the trace 'charts/steps.svg': choose another path"
cmp -s tiny.rrt charts/steps.svg || fail "report --svg wrote over its trace"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt -o charts/heatmap-g2.svg --svg ./charts/
expect_status 2
expect_err "relibra report: --svg './charts/' would write a chart over -o 'charts/heatmap-g2.svg': choose another path"
[ ! -e charts/heatmap-g2.svg ] || fail "report wrote -o where --svg writes a chart"
# a chart's name in DIR that is an input under another name (a link) too
ln -s ../plan-static.json charts/tokens-g3.svg
run report --svg charts plan-static.json plan-relibra.json
expect_status 2
expect_err "relibra report: --svg 'charts' would write a chart over a result file 'plan-static.json': choose another path"
[ -L charts/tokens-g3.svg ] || fail "report --svg replaced a link to its input"
rm charts/tokens-g3.svg
# --svg naming a file that is not a directory fails before the planning.
printf 'old' > notdir
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --svg notdir
expect_status 1
expect_err "relibra report: --svg 'notdir' is not a directory"
expect_empty out
[ "$(cat notdir)" = old ] || fail "report --svg changed the file in its way"
# A figure near the largest double still gets an axis of finite ticks.
sed '1,/"tokens_per_s"/s/"tokens_per_s": [^,]*/"tokens_per_s": 1.7976931348623157e308/' \
	plan-relibra.json > huge.json
mkdir huge
run report --svg huge plan-static.json huge.json
expect_status 0
! grep -il 'nan\|inf' huge/*.svg || fail "report --svg wrote a position that is not a number"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies relibra+fast
expect_status 2
expect_err "relibra report: --policies: 'relibra+fast': unknown option 'fast' (no-reorder, no-replicate, colocate, no-colocate, data-control, relay, no-relay)"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies static,ideal+relay
expect_status 2
expect_err "relibra report: --policies: 'ideal+relay': option 'relay' has no effect on the ideal, whose all-to-all is already even"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies static,eplb+colocate
expect_status 2
expect_err "relibra report: --policies: 'eplb+colocate': option 'colocate' is relibra's"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies relibra+colocate+no-colocate
expect_status 2
expect_err "relibra report: --policies: 'relibra+colocate+no-colocate': option 'no-colocate' contradicts 'colocate'"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies relibra+no-reorder+no-reorder
expect_status 2
expect_err "relibra report: --policies: 'relibra+no-reorder+no-reorder': option 'no-reorder' repeats 'no-reorder'"
for list in static, ,static static,,relibra; do
	run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --policies "$list"
	expect_status 2
	expect_err "relibra report: --policies '$list': an empty entry"
done
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --sweep balancer.replica_slots
expect_status 2
expect_err "relibra report: --sweep 'balancer.replica_slots': expected KEY=V1,V2,..."
# keys a sweep would not change are refused, not charted flat
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --sweep balancer.policy=static,relibra
expect_status 2
expect_err "relibra report: --sweep balancer.policy: the policies are chosen with --policies"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --pack ffd --sweep parallel.pack=in-order,dynamic
expect_status 2
expect_err "relibra report: --pack and --sweep parallel.pack both choose the packing"
# a --set of the swept key, overridden by every value; another key's is fine
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --set balancer.replica_slots=3 \
	--sweep balancer.replica_slots=0,1
expect_status 2
expect_err "relibra report: --set 'balancer.replica_slots=3' and --sweep balancer.replica_slots both set balancer.replica_slots"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --set balancer.replica_slots_x=3 \
	--sweep balancer.replica_slots=0,1
expect_status 1
expect_err "unknown key 'balancer.replica_slots_x'"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --sweep workload.steps=1,2
expect_status 2
expect_err "relibra report: --sweep workload.steps: the workload keys drive relibra capture --synthetic, not planning"
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --sweep balancer.replica_slots=1,10,1
expect_status 2
expect_err "relibra report: --sweep: value '1' given twice"
# or under another spelling of one value
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --sweep cluster.rdma_gbps=25,45,25.0
expect_status 2
expect_err "relibra report: --sweep: '25' and '25.0' are one value of cluster.rdma_gbps"
expect_empty out
run report -c "$CONFIGS/tiny-2x2.yaml" --trace x.rrt --sweep balancer.replica_slots=1,,2
expect_status 2
expect_err "relibra report: --sweep: an empty value in '1,,2'"
# CSV step ids are whole: steps 1000000..1000002 and 1000002 alone are
# two groups whose first_step and last_step differ, not all 1e+06
run capture -c "$CONFIGS/tiny-2x2.yaml" --set workload.first_step=1000000 \
	--set workload.prompts_per_step=1 --set workload.samples_per_prompt=2 \
	--set workload.len_median=16 --synthetic -o late.rrt
expect_status 0
run plan -c "$CONFIGS/tiny-2x2.yaml" --policy static --no-timing --summary late-all.json late.rrt
expect_status 0
run plan -c "$CONFIGS/tiny-2x2.yaml" --policy static --no-timing --steps 1000002 \
	--summary late-last.json late.rrt
expect_status 0
run report --format csv late-all.json late-last.json
expect_status 0
[ "$(cut -d, -f1,12,13 out | tail -n +2 | tr '\n' ' ')" = "1,1000000,1000002 2,1000002,1000002 " ] ||
	{ cat out; fail "CSV first_step and last_step are not the whole step ids"; }

run report --bogus
expect_status 2
expect_err "relibra report: unknown option '--bogus'"
run report -h
expect_status 0
expect_out "usage: relibra report"
exit 0
