# fuzz_corpus.sh - every fuzz target replays its seeds and saved inputs
# (fuzz/seeds, fuzz/corpus/NAME/) without a crash: the inputs that once
# failed stay fixed, and the targets keep building and running.
. "$RLB_TOP/tests/cli/lib.sh"

bins="$RLB_BUILD/fuzz"
n=0
while read -r name globs; do
	case $name in ''|'#'*) continue ;; esac
	[ -x "$bins/$name" ] || fail "no fuzz target '$bins/$name'"
	files=
	for g in $globs; do
		# shellcheck disable=SC2086
		for f in "$RLB_TOP"/$g; do
			[ -f "$f" ] && files="$files $f"
		done
	done
	[ -d "$RLB_TOP/fuzz/corpus/$name" ] && files="$files $RLB_TOP/fuzz/corpus/$name"
	[ -n "$files" ] || fail "fuzz target '$name' has no inputs"
	# shellcheck disable=SC2086
	"$bins/$name" $files > "$name.log" 2>&1 ||
		{ tail -n 30 "$name.log"; fail "fuzz target '$name' failed on its corpus"; }
	n=$((n + 1))
done < "$RLB_TOP/fuzz/seeds"
[ $n -ge 10 ] || fail "only $n fuzz targets ran"
