# report_plan.sh - relibra report planning in process: the same rows as
# `relibra plan --summary` per policy and with relibra's plan options
# (relibra+no-reorder...), --sweep equal to plan with --set,
# measured train-step metrics next to their simulation, and the charts:
# well-formed SVG and XHTML (xmllint) with the expected series counts.
. "$RLB_TOP/tests/cli/lib.sh"

cfg="$CONFIGS/tiny-2x2.yaml"
run capture -c "$cfg" --synthetic --seed 1 -o tiny.rrt
expect_status 0

# every policy in one pass == one plan run per policy (source column aside)
for p in static eplb eplb-oracle replicate relibra ideal; do
	run plan -c "$cfg" --policy $p --summary $p.json tiny.rrt
	expect_status 0
done
run report --format csv static.json eplb.json eplb-oracle.json replicate.json relibra.json ideal.json
expect_status 0
cut -d, -f1-13,15- out > files.csv
run report -c "$cfg" --trace tiny.rrt --format csv
expect_status 0
expect_empty err
cut -d, -f1-13,15- out > inproc.csv
[ "$(wc -l < inproc.csv)" -eq 7 ] || fail "expected a header and 6 rows"
diff -u files.csv inproc.csv || fail "in-process rows differ from plan --summary"
# the all-to-all's informational parts come through, ideal's equal to its a2a_s
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	$c["a2a_even_s"] == "" || $c["a2a_senders_s"] == "" { exit 1 }
	$c["policy"] == "ideal" && $c["a2a_senders_s"] != $c["a2a_s"] { exit 1 }' inproc.csv ||
	fail "a2a_even_s, a2a_senders_s: $(sed -n 1p inproc.csv)"
run report -c "$cfg" --trace tiny.rrt --format csv --threads 4
expect_status 0
cut -d, -f1-13,15- out > threads.csv
diff -u inproc.csv threads.csv || fail "--threads 4 changed the rows"

# --policies and --steps
run report -c "$cfg" --trace tiny.rrt --policies relibra,static --steps 1:2 --format csv
expect_status 0
[ "$(cut -d, -f16 out | tr '\n' ' ')" = "policy static relibra " ] || fail "--policies: $(cut -d, -f16 out)"
[ "$(cut -d, -f18 out | sed -n 2p)" = 2 ] || fail "--steps 1:2 did not plan 2 steps"
[ "$(cut -d, -f12,13 out | sed -n 1p)" = first_step,last_step ] || fail "CSV header: $(sed -n 1p out)"
[ "$(cut -d, -f12,13 out | sed -n 2p)" = 1,2 ] || fail "--steps 1:2: the CSV's step range is $(cut -d, -f12,13 out | sed -n 2p)"

# a truncated trace: planned, with plan's warning about its last step
head -c $(($(wc -c < tiny.rrt) - 100)) tiny.rrt > cut.rrt
run report -c "$cfg" --trace cut.rrt --policies static
expect_status 0
expect_err "relibra report: warning: trace 'cut.rrt' is truncated (its writer did not finish): step 2, the last it holds, may lack sequences"
run report -c "$cfg" --trace cut.rrt --policies static --steps 0:1
expect_status 0
expect_empty err

# relibra's plan options in --policies: the same rows as plan with them
run plan -c "$cfg" --policy relibra --no-replicate --colocate --summary nrc.json tiny.rrt
expect_status 0
run plan -c "$cfg" --policy relibra --no-reorder --summary nrp.json tiny.rrt
expect_status 0
run report --format csv static.json nrc.json nrp.json
expect_status 0
cut -d, -f1-13,15- out > opt-files.csv
run report -c "$cfg" --trace tiny.rrt --format csv \
	--policies static,relibra+colocate+no-replicate,relibra+no-reorder+colocate
expect_status 0
expect_empty err
cut -d, -f1-13,15- out > opt-inproc.csv
grep -q ',relibra --no-replicate --colocate,' opt-inproc.csv ||
	fail "--policies relibra+colocate+no-replicate: no row labelled 'relibra --no-replicate --colocate'"
# colocate acts through the reordering: without it the row is --no-reorder's
grep -q ',relibra --no-reorder,' opt-inproc.csv ||
	fail "--policies relibra+no-reorder+colocate: no row labelled 'relibra --no-reorder'"
diff -u opt-files.csv opt-inproc.csv || fail "in-process option rows differ from plan --summary"
# --sweep: each value equals plan with --set
run report -c "$cfg" --trace tiny.rrt --policies static,relibra \
	--sweep balancer.replica_slots=0,2 --format csv
expect_status 0
[ "$(wc -l < out)" -eq 5 ] || fail "sweep: expected 4 rows"
grep '^[0-9]*,balancer.replica_slots,2,' out | grep ',plan,relibra,' | cut -d, -f15- > sweep2.csv
run plan -c "$cfg" --set balancer.replica_slots=2 --policy relibra --summary r2.json tiny.rrt
run report --format csv r2.json
sed -n 2p out | cut -d, -f15- > plan2.csv
diff -u plan2.csv sweep2.csv || fail "sweep value 2 differs from plan --set balancer.replica_slots=2"
# a result file joins no value of a sweep: its group is said to stand apart
run report -c "$cfg" --trace tiny.rrt --policies static,relibra \
	--sweep balancer.replica_slots=0,2 r2.json
expect_status 0
expect_err "relibra report: warning: the result files are outside the sweep of balancer.replica_slots: 1 more group, each compared on its own"
run report -c "$cfg" --trace tiny.rrt --policies static,relibra \
	--sweep balancer.replica_slots=0,2
expect_status 0
expect_empty err
run report -c "$cfg" --trace tiny.rrt --policies static,relibra \
	--sweep parallel.micro_batch_tokens=256,512
expect_status 0
expect_out "Speedup over static against parallel.micro_batch_tokens"
expect_out "Fraction of ideal against parallel.micro_batch_tokens"
expect_out "parallel.micro_batch_tokens=256: tiny on toy-2x2"
# The step time pivot shows each value's own step time (packings compare).
run report -c "$cfg" --trace tiny.rrt --policies static,relibra \
	--sweep parallel.pack=in-order,dynamic
expect_status 0
pivot=$(awk '/^Step time \(ms\) against parallel.pack$/ { on = 1; next }
	on && /^$/ { exit } on && $1 == "dynamic" { print $3 }' out)
group=$(awk '/^parallel.pack=dynamic: / { on = 1; next }
	on && $1 == "relibra" { print $2; exit }' out)
[ -n "$pivot" ] && [ "$pivot" = "$group" ] ||
	fail "step time pivot: relibra on dynamic '$pivot', its own table '$group'"
expect_out "parallel.pack=dynamic: tiny on toy-2x2 (2 nodes x 2 GPUs, EP 4), dynamic packing"
run report -c "$cfg" --trace tiny.rrt --sweep parallel.micro_batch_tokens=256,abc
expect_status 1
expect_err "parallel.micro_batch_tokens"
run report -c "$cfg" --trace missing.rrt
expect_status 1
expect_err "missing.rrt"

# measured next to simulated: a train-step result of the same config and trace
sed -e 's/"hash": "[0-9a-f]*"/"hash": "'"$(sed -n 's/.*"hash": "\([0-9a-f]*\)".*/\1/p' relibra.json)"'"/' \
	-e 's/"h100-2x2"/"toy-2x2"/' \
	"$FIXTURES/report/train-relibra.json" > measured.json
run report -c "$cfg" --trace tiny.rrt --policies static,relibra measured.json
expect_status 0
expect_out "relibra (measured)"
expect_out "measured against simulated, per step:"
grep -q '^relibra  *step  ' out || fail "no measured/simulated step row"

# charts
command -v xmllint >/dev/null 2>&1 || skip "xmllint not installed (libxml2-utils)"
series() {	# FILE: number of data series
	xmllint --xpath 'count(//*[local-name()="g"][@class="series"])' "$1"
}
run report -c "$cfg" --trace tiny.rrt --html rep.html --svg charts --layer 2
expect_status 0
expect_err "relibra report: 5 charts written to charts/"
expect_err "relibra report: HTML report written to rep.html"
for f in rep.html charts/*.svg; do
	xmllint --noout "$f" || fail "$f is not well-formed"
done
[ "$(series charts/tokens.svg)" = 5 ] || fail "tokens.svg: $(series charts/tokens.svg) series, expected 5"
[ "$(series charts/microbatch.svg)" = 5 ] || fail "microbatch.svg: expected 5 series"
[ "$(series charts/breakdown.svg)" = 7 ] || fail "breakdown.svg: expected 7 series"
grep -q 'data-label="all-to-all: uneven senders"' charts/breakdown.svg ||
	fail "breakdown.svg: the all-to-all is not split"
[ "$(series charts/heatmap.svg)" = 2 ] || fail "heatmap.svg: expected 2 series"
[ "$(series charts/steps.svg)" = 5 ] || fail "steps.svg: expected 5 series"
[ "$(series rep.html)" = 24 ] || fail "rep.html: $(series rep.html) series, expected 24"
grep -q 'layer 2, step 2' charts/microbatch.svg || fail "--layer 2 not charted"
# a measured step's bar reaches its step time: what its parts (11.32 ms
# in the fixture) leave of a 20 ms step is a segment of its own
sed '0,/"step_time_s": 0.0112,/s//"step_time_s": 0.02,/' measured.json > measured20.json
run report --svg mcharts static.json relibra.json measured20.json
expect_status 0
[ "$(series mcharts/breakdown.svg)" = 8 ] || fail "breakdown.svg with a measured row: expected 8 series"
grep -q 'data-label="rest of the measured step (not broken down)"' mcharts/breakdown.svg ||
	fail "no rest segment for the measured row"
grep -q '>20.0<' mcharts/breakdown.svg || fail "the measured bar does not reach its 20 ms step"
# summaries without the all-to-all's split (older ones) chart it whole
run report --svg ocharts "$FIXTURES/report/plan-static.json" "$FIXTURES/report/plan-relibra.json"
expect_status 0
[ "$(series ocharts/breakdown.svg)" = 5 ] || fail "breakdown.svg without the split: expected 5 series"
grep -qi '<script' rep.html && fail "rep.html has a script"
grep -o 'https\?://[^"]*' rep.html | sort -u | grep -v '^http://www.w3.org/' && fail "rep.html refers outside itself"
# from result files: no per-micro-batch loads, said so
run report --html files.html --svg fcharts static.json relibra.json
expect_status 0
xmllint --noout files.html || fail "files.html is not well-formed"
grep -q 'microbatch chart not drawn: no per-micro-batch loads' files.html || fail "missing chart not explained"
[ ! -e fcharts/heatmap.svg ] || fail "heatmap.svg written without data"
# planned in process without static or relibra: no hint to do just that
run report -c "$cfg" --trace tiny.rrt --policies eplb,replicate --html nohm.html
expect_status 0
grep -q 'heatmap chart not drawn: no static or relibra result among the plans\.' nohm.html ||
	fail "nohm.html: $(grep -o 'heatmap chart not drawn[^<]*' nohm.html)"
# plan summaries carry their steps
[ "$(series fcharts/steps.svg)" = 2 ] || fail "steps.svg from summaries: expected 2 series"
# a chart's name taken by a directory: no chart, page or report written
mkdir -p taken/breakdown.svg
run report --html taken.html -o taken.txt --svg taken static.json relibra.json
expect_status 1
expect_err "relibra report: cannot write chart 'taken/breakdown.svg': it is a directory"
[ "$(ls taken)" = breakdown.svg ] || fail "charts left in taken/: $(ls taken)"
[ ! -e taken.html ] && [ ! -e taken.txt ] || fail "a failed --svg left the other outputs"
run report -c "$cfg" --trace tiny.rrt --policies static,eplb,relibra \
	--sweep balancer.replica_slots=0,1,2 --svg scharts --html sweep.html
expect_status 0
xmllint --noout sweep.html scharts/*.svg || fail "sweep charts are not well-formed"
[ "$(series scharts/sweep-speedup.svg)" = 3 ] || fail "sweep-speedup.svg: expected 3 series"
[ "$(series scharts/sweep-ideal.svg)" = 3 ] || fail "sweep-ideal.svg: expected 3 series"
[ "$(series scharts/sweep-step.svg)" = 3 ] || fail "sweep-step.svg: expected 3 series"
[ -e scharts/tokens-g3.svg ] || fail "per-group charts of a sweep are numbered"
# one page, a heatmap per group: every id in it is its own
dup=$(xmllint --xpath '//@id' sweep.html | tr ' ' '\n' | grep '^id=' | sort | uniq -d)
[ -z "$dup" ] || fail "sweep.html repeats ids: $dup"
# swept values are the user's text: escaped in the charts' tooltips
run report -c "$cfg" --trace tiny.rrt --policies static \
	--sweep 'cluster.name=a<b,c&"d' --svg xcharts --html xsweep.html
expect_status 0
xmllint --noout xsweep.html xcharts/*.svg || fail "sweep charts of values with <&\" are not well-formed"

# A failed run leaves -o as it was, and stdout gets the report only once
# every file is written; a bad --sweep value says it comes from --sweep.
echo old > keep.txt
run report -c "$cfg" --trace tiny.rrt --policies static -o keep.txt --html nodir/r.html
expect_status 1
expect_err "relibra report: --html 'nodir/r.html': no directory 'nodir'"
[ "$(cat keep.txt)" = old ] || fail "a failed report replaced -o"
run report -c "$cfg" --trace tiny.rrt --policies static --svg nodir/charts
expect_status 1
expect_empty out
# a trailing slash names the directory, created in "." (README: --svg charts/)
run report -c "$cfg" --trace tiny.rrt --policies static --svg slashcharts/
expect_status 0
expect_err "relibra report: 5 charts written to slashcharts/"
[ -e slashcharts/tokens.svg ] || fail "--svg slashcharts/ wrote no tokens.svg"
# A chart that cannot be written leaves none of them, nor -o.
mkdir -p part part/heatmap.svg.tmp
run report -c "$cfg" --trace tiny.rrt --policies static,relibra -o part.txt --svg part
expect_status 1
expect_err "heatmap.svg.tmp"
[ "$(ls part)" = heatmap.svg.tmp ] || fail "a failed --svg left charts: $(ls part)"
[ ! -e part.txt ] || fail "a failed --svg left -o"
run report -c "$cfg" --trace tiny.rrt --policies static --sweep balancer.replica_slots=1,999
expect_status 1
expect_err "relibra report: --set 'balancer.replica_slots=999': value 999 for 'balancer.replica_slots' is out of range [0, 64]"
expect_err "hint: 'balancer.replica_slots=999' is a value of --sweep"
expect_empty out

# Charts in --svg DIR that this report did not write are named.
run report -c "$cfg" --trace tiny.rrt --policies static,relibra --svg stale
expect_status 0
run report --svg stale static.json relibra.json
expect_status 0
expect_err "relibra report: warning: stale/heatmap.svg is left from an earlier report (this one did not write it)"
expect_err "relibra report: warning: stale/microbatch.svg is left from an earlier report (this one did not write it)"
! grep -q "tokens.svg is left" err || fail "a chart written again was called stale"
exit 0
