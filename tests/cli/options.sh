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

exit 0
