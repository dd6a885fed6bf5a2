# train_step_valgrind.sh - a whole train-step run (4 virtual ranks in one
# process, replicas, migration, --verify, metrics) is valgrind-clean.
. "$RLB_TOP/tests/cli/lib.sh"

command -v valgrind >/dev/null 2>&1 || skip "valgrind not installed"
if command -v ldd >/dev/null 2>&1 && ldd "$RELIBRA" | grep -Eq "lib[at]san"; then
	skip "sanitizer build: valgrind does not apply"
fi
cfg="$CONFIGS/tiny-2x2.yaml"
small="--set workload.steps=2 --set workload.prompts_per_step=2 --set workload.len_median=64 --set workload.len_max=128"
run capture -c "$cfg" $small --synthetic --seed 8 -o t.rrt
expect_status 0
run plan -c "$cfg" --policy relibra -o p.rlp t.rrt
expect_status 0
valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
	"$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan p.rlp --virtual-ranks 4 \
	--verify -o m.json > out 2> err
status=$?
expect_status 0
expect_out "verify: agrees with the static plan"
[ -s m.json ] || fail "no metrics"
exit 0
