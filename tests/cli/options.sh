# options.sh - options that several commands share behave alike in each.
. "$RLB_TOP/tests/cli/lib.sh"

tiny="$CONFIGS/tiny-2x2.yaml"

# An unknown letter in a group of short options is named, not the
# argument before the group; a long option that takes no value refuses one.
for c in capture inspect plan train-step report calibrate config; do
	run "$c" --set a=b -Zh
	expect_status 2
	expect_err "relibra $c: unknown option '-Z'"
	expect_empty out
	run "$c" --help=1
	expect_status 2
	expect_err "relibra $c: option '--help' takes no value"
done
run inspect --json=yes x.rrt
expect_status 2
expect_err "relibra inspect: option '--json' takes no value"
run plan -c "$tiny" --no-timing=1 x.rrt
expect_status 2
expect_err "relibra plan: option '--no-timing' takes no value"
run plan --bogus
expect_status 2
expect_err "relibra plan: unknown option '--bogus'"

# --pack and --policy are usage errors before any work: the same for
# inspect, plan and report, before the config is read.
run inspect --stats -c nosuch.yaml --pack bogus x.rrt
expect_status 2
expect_err "relibra inspect: unknown packing rule 'bogus' (expected in-order, ffd or dynamic)"
run plan -c nosuch.yaml --pack bogus x.rrt
expect_status 2
expect_err "relibra plan: unknown packing rule 'bogus' (expected in-order, ffd or dynamic)"
run report -c nosuch.yaml --trace x.rrt --pack bogus
expect_status 2
expect_err "relibra report: unknown packing rule 'bogus' (expected in-order, ffd or dynamic)"
run plan -c nosuch.yaml --policy bogus x.rrt
expect_status 2
expect_err "relibra plan: unknown policy 'bogus'"
run report -c nosuch.yaml --trace x.rrt --policies bogus
expect_status 2
expect_err "relibra report: --policies: unknown policy 'bogus'"

# --steps: the same forms, the same selection and the same error for a
# range the trace (or plan) lacks, in every command.
run capture -c "$tiny" --set workload.steps=3 --synthetic -o t.rrt
expect_status 0
run plan -c "$tiny" --policy relibra --no-timing -o p.rlp t.rrt
expect_status 0
for s in 1 1: :1 0x1; do
	run inspect --steps "$s" t.rrt
	expect_status 0
	run plan -c "$tiny" --no-timing --steps "$s" t.rrt
	expect_status 0
	run report -c "$tiny" --trace t.rrt --policies static --steps "$s"
	expect_status 0
done
run inspect --steps 1: t.rrt
expect_out "selected:       2 steps in 1..:"
run plan -c "$tiny" --no-timing --steps 1: --json t.rrt
expect_out '"first_step": 1'
expect_out '"last_step": 2'
for s in 5 3:9 5: 4294967295; do
	# as given: A alone, A:B, or A: open-ended
	for c in inspect plan report train-step; do
		case $c in
		inspect) run inspect --steps "$s" t.rrt ;;
		plan) run plan -c "$tiny" --steps "$s" t.rrt ;;
		report) run report -c "$tiny" --trace t.rrt --steps "$s" ;;
		train-step) run train-step -c "$tiny" --trace t.rrt --plan p.rlp --virtual-ranks 4 --steps "$s" ;;
		esac
		expect_status 1
		expect_err "relibra $c: no step of the trace in $s (trace 't.rrt' has steps 0..2)"
		expect_empty out
	done
	run inspect --steps "$s" p.rlp
	expect_status 1
	expect_err "relibra inspect: no step of the plan in $s (plan 'p.rlp' has steps 0..2)"
done
for c in inspect plan report train-step; do
	for s in 2:1 : x; do
		run "$c" --steps "$s"
		expect_status 2
		expect_err "relibra $c: --steps '$s'"
	done
done

# A missing or extra operand is worded alike.
run inspect
expect_status 2
expect_err "relibra inspect: no trace given"
run plan -c "$tiny"
expect_status 2
expect_err "relibra plan: no trace given"
run inspect t.rrt extra
expect_status 2
expect_err "relibra inspect: unexpected argument 'extra'"
run plan -c "$tiny" t.rrt extra
expect_status 2
expect_err "relibra plan: unexpected argument 'extra'"
run config extra
expect_status 2
expect_err "relibra config: unexpected argument 'extra'"

# relibra(1): --set applies after the file wherever -c stands, the last
# of two for one key counts, and the value keeps its own '='; a long
# option may be a unique prefix, given as --opt=value; -- ends options.
run config --set parallel.micro_batch_tokens=2048 -c tiny-2x2 \
	--set parallel.micro_batch_tokens=1024 --set model.name=a=b
expect_status 0
expect_out "micro_batch_tokens: 1024"
expect_out 'name: "a=b"'
run plan --conf=tiny-2x2 --pol=static --no-t --steps=1 -- t.rrt
expect_status 0
expect_out "relibra plan: static on tiny"
run plan -c tiny-2x2 --s 1 t.rrt
expect_status 2
expect_err "relibra plan: unknown option '--s'"

# An option that needs another names itself, in inspect as in report.
run inspect --set parallel.pack=ffd t.rrt
expect_status 2
expect_err "relibra inspect: --set goes with --stats or --schedule"
run inspect --pack ffd t.rrt
expect_status 2
expect_err "relibra inspect: --pack goes with --stats or --schedule"
run report --set parallel.pack=ffd x.json
expect_status 2
expect_err "relibra report: --set goes with --trace"

# -c - is not standard input in any command; the message says what is.
for c in inspect plan config; do
	case $c in
	inspect) run inspect --stats -c - t.rrt ;;
	plan) run plan -c - t.rrt ;;
	config) run config -c - ;;
	esac
	expect_status 1
	expect_err "relibra $c: cannot open config '-': No such file or directory (standard input is -c /dev/stdin)"
done
run config -c /dev/stdin < "$tiny"
expect_status 0
expect_out "micro_batch_tokens"

exit 0
