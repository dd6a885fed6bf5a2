# basics.sh - global options, help and unknown commands.
. "$RLB_TOP/tests/cli/lib.sh"

run --version
expect_status 0
expect_out "relibra "
expect_out "backends: cpu"
expect_out "trace format: 1.2"
expect_out "plan format: 1.3"

run
expect_status 2
expect_err "usage: relibra"

run -V extra
expect_status 2
expect_err "relibra: -V takes no argument (got 'extra')"
run --help capture
expect_status 2
expect_err "relibra: --help takes no argument (got 'capture')"

# help of help: the command list, as help alone gives it.
run help
cp out usage.txt
run help help
expect_status 0
cmp -s out usage.txt || fail "'relibra help help' differs from 'relibra help'"
expect_empty err

run help plan extra
expect_status 2
expect_err "relibra: help takes one command (got 'extra')"
expect_empty out

run frobnicate
expect_status 2
expect_err "unknown command 'frobnicate'"
expect_err "capture"

run --bogus
expect_status 2
expect_err "unknown option '--bogus'"

for c in capture inspect config; do
	run help "$c"
	expect_status 0
	cp out help.txt
	run "$c" -h
	expect_status 0
	cmp -s out help.txt || fail "'relibra help $c' differs from '$c -h'"
	grep -q "^usage: relibra $c" help.txt || fail "no usage line for $c"
done
exit 0
