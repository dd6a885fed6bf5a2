# plan_schedule.sh - the schedule a plan is made on: the trainer's own file
# (--schedule), relibra's data control (--data-control), plans that carry
# their schedule, and inspect --schedule that prints one.
. "$RLB_TOP/tests/cli/lib.sh"

cfg="$CONFIGS/tiny-2x2.yaml"
run capture -c "$cfg" --synthetic --seed 5 -o t.rrt
expect_status 0

# The config's rule as a schedule file gives the very same plan and figures.
run inspect --schedule -c "$cfg" t.rrt
expect_status 0
cp out rule.json
grep -q '^{"schema":"relibra.schedule/1","steps":\[{"step":0,"micro_batches":\[\[\[\[' rule.json ||
	fail "inspect --schedule printed $(head -c 200 rule.json)"
# Under data control a relibra plan chooses its own micro-batches: the
# rule's schedule comes with a warning that says so.
run inspect --schedule -c "$cfg" --set balancer.data_control=true t.rrt
expect_status 0
cmp -s out rule.json || fail "balancer.data_control changed inspect --schedule"
expect_err "relibra inspect: warning: balancer.data_control is on, so a relibra plan chooses its own micro-batches; these are the in-order packing's ('relibra inspect --schedule PLAN' prints a plan's)"
# A config of another model is refused, as by --stats.
run inspect --schedule -c "$CONFIGS/qwen3-30b-a3b-h100-1x8.yaml" t.rrt
expect_status 1
expect_err "relibra inspect: the config does not match the trace: 'model.experts' is 128 in the config, 16 in the trace (config '$CONFIGS/qwen3-30b-a3b-h100-1x8.yaml', trace 't.rrt')"
[ -s out ] && fail "inspect --schedule printed a schedule for another model"
run plan -c "$cfg" --policy relibra --no-timing -o a.rlp --json t.rrt
expect_status 0
sed -e '/"pack"/d' out > a.json
run plan -c "$cfg" --policy relibra --no-timing -o b.rlp --schedule rule.json --json t.rrt
expect_status 0
grep -q '"pack": "file"' out || fail "the summary does not name the schedule file's packing"
grep -q '"schedule": "rule.json"' out || fail "the summary does not name the schedule file"
sed -e '/"pack"/d' -e '/"schedule"/d' out > b.json
cmp -s a.json b.json || { diff a.json b.json; fail "the rule's own schedule as a file changed the result"; }
run inspect b.rlp
expect_status 0
expect_out "plan 1.1: policy relibra, split locality, pack file"
# The plan carries the file's schedule: inspect gives the same file back.
run inspect --schedule b.rlp
expect_status 0
cmp -s out rule.json || fail "the plan's schedule differs from the file it was made on"
run inspect --schedule a.rlp
expect_status 1
expect_err "relibra inspect: plan 'a.rlp' carries no schedule (pack in-order: the trace and config rebuild it)"
# An EPLB plan carries the schedule after its copies (format 1.2): the same
# result as on the rule, the file's schedule back.
run plan -c "$cfg" --policy eplb-oracle --no-timing -o e.rlp --json t.rrt
expect_status 0
sed -e '/"pack"/d' out > e.json
run plan -c "$cfg" --policy eplb-oracle --no-timing -o ef.rlp --schedule rule.json --json t.rrt
expect_status 0
sed -e '/"pack"/d' -e '/"schedule"/d' out > ef.json
cmp -s e.json ef.json || { diff e.json ef.json; fail "eplb-oracle: the schedule file changed the result"; }
run inspect ef.rlp
expect_status 0
expect_out "plan 1.2: policy eplb-oracle, split even, pack file"
run inspect --schedule ef.rlp
expect_status 0
cmp -s out rule.json || fail "the eplb plan's schedule differs from the file it was made on"

# The dynamic rule: a 1.3 plan that carries no schedule; its schedule as a
# file plans the same; train-step rebuilds it from the trace and applies it.
run inspect --schedule -c "$cfg" --pack dynamic t.rrt
expect_status 0
cp out dyn-rule.json
cmp -s dyn-rule.json rule.json && fail "the dynamic rule gave the in-order schedule"
run plan -c "$cfg" --policy relibra --pack dynamic --no-timing -o dyn.rlp --json t.rrt
expect_status 0
grep -q '"pack": "dynamic"' out || fail "the summary does not name the dynamic packing"
sed -e '/"pack"/d' out > dyn.json
run plan -c "$cfg" --policy relibra --no-timing --schedule dyn-rule.json --json t.rrt
expect_status 0
sed -e '/"pack"/d' -e '/"schedule"/d' out > dynf.json
cmp -s dyn.json dynf.json || { diff dyn.json dynf.json; fail "the dynamic rule's schedule as a file changed the result"; }
run inspect dyn.rlp
expect_status 0
expect_out "plan 1.3: policy relibra, split locality, pack dynamic"
run inspect --schedule dyn.rlp
expect_status 1
expect_err "relibra inspect: plan 'dyn.rlp' carries no schedule (pack dynamic: the trace and config rebuild it)"
run train-step -c "$cfg" --trace t.rrt --plan dyn.rlp --steps 1:1 --virtual-ranks 4 --verify -o dyn-m.json
expect_status 0
expect_out "verify: agrees with the static plan"

# Data control: its own schedule, carried by the plan; the ideal stays the rule's.
run plan -c "$cfg" --policy relibra --data-control --no-timing -o dc.rlp --summary dc.json t.rrt
expect_status 0
expect_out "data-control packing"
grep -q '"pack": "data-control"' dc.json || fail "dc.json lacks its packing"
grep -q '"data_control": true' dc.json || fail "dc.json lacks the option"
grep -q '"label": "relibra --data-control"' dc.json || fail "dc.json lacks its label"
run inspect --dump --steps 0 dc.rlp
expect_status 0
expect_out "pack data-control"
expect_out "  schedule: "
expect_out "  mb 0, rank 0: "
run inspect --schedule dc.rlp
expect_status 0
cp out dc-sched.json
# inspect --json --dump carries the same schedule, step by step.
run inspect --json --dump dc.rlp
expect_status 0
expect_out '"pack":"data-control"'
step0=$(sed -e 's/^{"schema":"relibra.schedule\/1","steps":\[//' -e 's/,{"step":1,.*//' dc-sched.json)
case "$step0" in '{"step":0,'*'}') ;; *) fail "no step 0 in the schedule file: $(head -c 200 dc-sched.json)" ;; esac
grep -qF "\"schedule\":$step0}" out || fail "inspect --json --dump lacks the plan's schedule of step 0"
# The data-control schedule as a file plans to the same step time.
run plan -c "$cfg" --policy relibra --no-timing --schedule dc-sched.json --json t.rrt
expect_status 0
a=$(grep -o '"step_time_s": [0-9.e+-]*' dc.json | head -1)
b=$(grep -o '"step_time_s": [0-9.e+-]*' out | head -1)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "data control ($a) and its schedule as a file ($b) differ"
for i in 1 2; do
	run plan -c "$cfg" --policy relibra --data-control --no-timing -o dc$i.rlp t.rrt
	expect_status 0
done
cmp -s dc1.rlp dc2.rlp || fail "data-control plans differ between two runs"

# Usage errors and bad files.
run plan -c "$cfg" --policy eplb --data-control t.rrt
expect_status 2
expect_err "relibra plan: --data-control is an option of the relibra policy"
run plan -c "$cfg" --pack ffd --schedule rule.json t.rrt
expect_status 2
expect_err "relibra plan: --schedule excludes --pack"
run plan -c "$cfg" --set balancer.data_control=true --schedule rule.json t.rrt
expect_status 2
expect_err "relibra plan: --schedule excludes data control (balancer.data_control in the config; --set balancer.data_control=false turns it off)"
printf '{"schema": "relibra.schedule/1", "steps": [\n  {"step": 0 "micro_batches": []}]}\n' > bad.json
run plan -c "$cfg" --schedule bad.json t.rrt
expect_status 1
expect_err "relibra plan: schedule 'bad.json': invalid JSON at line 2, column 28 (byte 72): '}' expected near '\"micro_batches\"'"
printf '{"schema": "relibra.schedule/1", "steps": [{"step": 0, "micro_batches": [[[[0, 0, 1]], [], [], []]]}]}\n' > short.json
run plan -c "$cfg" --schedule short.json --steps 0 t.rrt
expect_status 1
expect_err "relibra plan: schedule 'short.json': step 0: sequence 0: tokens 1.."
printf '{"schema": "relibra.schedule/1", "steps": [{"step": 0, "micro_batches": [[[], []]]}]}\n' > ranks.json
run plan -c "$cfg" --schedule ranks.json --steps 0 t.rrt
expect_status 1
expect_err "relibra plan: schedule 'ranks.json': 'steps[0].micro_batches[0]' (step 0) lists 2 ranks, the EP size is 4"
run plan -c "$cfg" --schedule rule.json --steps 1 -o x.rlp t.rrt
expect_status 0
expect_out "relibra plan: relibra on tiny, toy-2x2 (EP 4), 1 step, 6 micro-batches, the schedule of 'rule.json'"
# Steps the trace lacks are not used, and a warning counts them; those
# outside --steps are not counted.
sed 's/]}$/,{"step":90,"micro_batches":[]},{"step":91,"micro_batches":[]}]}/' rule.json > extra.json
run plan -c "$cfg" --policy relibra --no-timing --schedule extra.json --json t.rrt
expect_status 0
expect_err "relibra plan: warning: schedule 'extra.json' lists 2 steps that trace 't.rrt' lacks (step 90 first): is it this run's schedule?"
sed -e '/"pack"/d' -e '/"schedule"/d' out > extra-out.json
cmp -s b.json extra-out.json || { diff b.json extra-out.json; fail "steps the trace lacks changed the result"; }
run plan -c "$cfg" --no-timing --schedule extra.json --steps 0:89 t.rrt
expect_status 0
expect_empty err
# A pipe on standard input can feed one of the config and the schedule.
cat rule.json | "$RELIBRA" plan -c /dev/stdin --schedule - t.rrt > out 2> err
status=$?
expect_status 2
expect_err "relibra plan: -c '/dev/stdin' and --schedule '-' are both standard input: one of them can read it"
run plan -c "$cfg" --schedule missing.json t.rrt
expect_status 1
expect_err "relibra plan: cannot open schedule 'missing.json': No such file or directory"
[ ! -e x.rlp.tmp ] || fail "x.rlp.tmp left behind"
# A file of another kind as the schedule: named as such.
run plan -c "$cfg" --schedule t.rrt -o wrong.rlp t.rrt
expect_status 1
expect_err "relibra plan: 't.rrt' is a relibra trace, not a schedule (relibra.schedule/1 JSON)"
run plan -c "$cfg" --schedule "$cfg" -o wrong.rlp t.rrt
expect_status 1
expect_err "is a relibra YAML config, not a schedule (relibra.schedule/1 JSON)"
printf '\037\213\010\000\000\000\000\000\000\003compressed' > rule.json.gz	# a gzip header
run plan -c "$cfg" --schedule rule.json.gz -o wrong.rlp t.rrt
expect_status 1
expect_err "relibra plan: 'rule.json.gz' is gzip-compressed, not a schedule (relibra.schedule/1 JSON): decompress it first"
[ ! -e wrong.rlp ] && [ ! -e wrong.rlp.tmp ] || fail "a refused schedule left output"
exit 0
