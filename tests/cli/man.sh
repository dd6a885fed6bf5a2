# man.sh - man pages lint clean, each command's usage names the same
# options, in the same order, as its SYNOPSIS in relibra(1), and the
# EXAMPLES of relibra(1) on the tiny configuration run as written.
. "$RLB_TOP/tests/cli/lib.sh"

command -v mandoc >/dev/null 2>&1 || skip "mandoc not installed"
for m in relibra.1 relibra.3 relibra.yaml.5 relibra-trace.5; do
	mandoc -Tlint -W warning "$RLB_TOP/man/$m" || fail "mandoc -Tlint $m"
done

# Option names (words starting with -) of a usage or synopsis text.
opts() {
	tr ' |[]()' '\n\n\n\n\n\n' | grep -E '^--?[a-zA-Z]' | sed 's/[],.]*$//'
}

MANWIDTH=400 mandoc -Tascii -O width=400 "$RLB_TOP/man/relibra.1" | col -b > page.txt
for c in $("$RELIBRA" -h | sed -n 's/^  \([a-z-]*\) .*/\1/p'); do
	"$RELIBRA" "$c" -h | head -n 1 | sed "s/^usage: relibra $c//" | opts > usage.opts
	grep -E "^ +relibra $c( |$)" page.txt | head -n 1 | sed "s/^ *relibra $c//" | opts > synopsis.opts
	[ -s synopsis.opts ] || fail "no SYNOPSIS line for '$c' in relibra.1"
	diff -u synopsis.opts usage.opts || fail "usage of '$c' differs from its SYNOPSIS"
done

# The examples that need no GPU and no large trace: the tiny config's.
ln -s "$RLB_TOP/configs" configs
sed -n '/^EXAMPLES/,/^SEE ALSO/p' page.txt | sed 's/^[[:space:]]*//' |
	awk '/\\$/ { sub(/\\$/, ""); line = line $0; next }
	     { print line $0; line = "" }' |
	grep '^relibra .*configs/tiny-2x2.yaml' > tiny.examples
[ "$(wc -l < tiny.examples)" -ge 3 ] || { cat tiny.examples; fail "no tiny-2x2 examples in relibra(1)"; }
while read -r cmd; do
	set -- $cmd
	shift
	run "$@"
	[ "$status" -eq 0 ] || { cat err; fail "relibra(1) example failed: $cmd"; }
done < tiny.examples
[ -s train.json ] || fail "the train-step example wrote no train.json"

# relibra-trace(5) summarises the format versions this build writes, and
# its examples that make their own files (not run.rrt) run as written.
MANWIDTH=400 mandoc -Tascii -O width=400 "$RLB_TOP/man/relibra-trace.5" | col -b > trace5.txt
for f in trace plan; do
	v=$("$RELIBRA" -V | sed -n "s/^$f format: //p")
	[ -n "$v" ] || fail "relibra -V prints no $f format version"
	grep -q "summarises $f format version $v[:;]" trace5.txt ||
		fail "relibra-trace(5) does not summarise $f format $v"
done
grep -q '^PLAN FILES' trace5.txt || fail "relibra-trace(5) has no PLAN FILES section"
sed -n '/^EXAMPLES/,/^SEE ALSO/p' trace5.txt | sed 's/^[[:space:]]*//' |
	awk '/\\$/ { sub(/\\$/, ""); line = line $0; next }
	     { print line $0; line = "" }' |
	grep '^\$ relibra ' | grep -v 'run\.rrt' | sed 's/^\$ //' > trace5.examples
grep -q ' plan .*-o p\.rlp' trace5.examples || { cat trace5.examples; fail "no plan example in relibra-trace(5)"; }
while read -r cmd; do
	set -- $cmd
	shift
	run "$@"
	[ "$status" -eq 0 ] || { cat err; fail "relibra-trace(5) example failed: $cmd"; }
done < trace5.examples
if command -v zstd >/dev/null 2>&1; then
	zstd -q -t p.rlp || fail "the plan of relibra-trace(5)'s example is not a valid zstd stream"
fi
exit 0
