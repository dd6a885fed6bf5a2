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

exit 0
