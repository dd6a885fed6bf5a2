# examples_regen.sh - trace_format/examples/regen.sh and tiny-plan.sh, run
# in a copy of the tree with the build's test runner and binary, remake
# the shipped example files byte for byte; regen.sh's default binary is
# BUILD_DIR/relibra, else ./relibra (the default build's place).
. "$RLB_TOP/tests/cli/lib.sh"

command -v xxd > /dev/null 2>&1 || skip "xxd not installed"
command -v zstd > /dev/null 2>&1 || skip "zstd not installed"
runner="$RLB_BUILD/tests/check_relibra"
[ -x "$runner" ] || skip "no unit test runner at $runner"

EX="$RLB_TOP/trace_format/examples"
mkdir tree tree/tests
cp -R "$RLB_TOP/trace_format" tree/
(cd tree/trace_format/examples && rm tiny.rrt tiny.hex tiny.raw.hex tiny.dump \
	tiny-plan.rlp tiny-plan.hex tiny-plan.raw.hex tiny-plan.dump)
cd tree
sh trace_format/examples/regen.sh "$RLB_BUILD" "$RELIBRA" > ../log 2>&1 ||
	{ cat ../log; fail "regen.sh failed"; }
sh trace_format/examples/tiny-plan.sh "$RLB_BUILD" > ../log 2>&1 ||
	{ cat ../log; fail "tiny-plan.sh failed"; }
for f in tiny.rrt tiny.hex tiny.raw.hex tiny.dump \
	tiny-plan.rlp tiny-plan.hex tiny-plan.raw.hex tiny-plan.dump; do
	cmp -s "trace_format/examples/$f" "$EX/$f" ||
		fail "regenerated $f differs from the shipped one"
done

# Without RELIBRA: BUILD_DIR/relibra when there is one, else ./relibra.
mkdir bin
ln -s "$RLB_BUILD/tests" bin/tests
rm trace_format/examples/tiny.dump
ln -s "$RELIBRA" relibra
sh trace_format/examples/regen.sh bin > ../log 2>&1 ||
	{ cat ../log; fail "regen.sh without RELIBRA failed"; }
cmp -s trace_format/examples/tiny.dump "$EX/tiny.dump" ||
	fail "tiny.dump differs when regen.sh finds ./relibra"
