# train_step_mpi.sh - relibra train-step under mpirun -np 4 on tiny-2x2
# (oversubscribed, allowed as root): every policy passes --verify, the
# metrics match the virtual-rank run, a wrong rank count is refused by
# rank 0 alone, arguments that differ between ranks are named by rank 0,
# and a failing rank ends the whole job in bounded time.
. "$RLB_TOP/tests/cli/lib.sh"

command -v mpirun >/dev/null 2>&1 || skip "mpirun not installed (openmpi-bin)"
if command -v ldd >/dev/null 2>&1 && ! ldd "$RELIBRA" | grep -q 'libmpi'; then
	skip "relibra built without MPI (libopenmpi-dev)"
fi
# Open MPI keeps allocations of its own at exit: under AddressSanitizer
# (VARIANT=san) leak checks are for the virtual-rank tests.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
flags=
if mpirun --version 2>&1 | grep -q 'Open MPI'; then
	flags="--oversubscribe --allow-run-as-root -x ASAN_OPTIONS"
fi
mpi() {	# NP ARGS...: mpirun with a time limit
	np=$1
	shift
	timeout 120 mpirun -np "$np" $flags "$@" > out 2> err
	status=$?
}

cfg="$CONFIGS/tiny-2x2.yaml"
run capture -c "$cfg" --set workload.steps=2 --set workload.prompts_per_step=4 --synthetic --seed 6 -o t.rrt
expect_status 0
for p in static eplb eplb-oracle replicate relibra; do
	run plan -c "$cfg" --policy "$p" -o "$p.rlp" t.rrt
	expect_status 0
	mpi 4 "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan "$p.rlp" --verify -o "$p.json"
	expect_status 0
	expect_out "4 ranks (mpi), cpu backend"
	expect_out "verify: agrees with the static plan"
	grep -qF '"transport": "mpi"' "$p.json" || fail "$p.json: transport is not mpi"
done

# The same training result as 4 virtual ranks.
mpi 4 "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan relibra.rlp
expect_status 0
sed -n 's/.*\(loss .*\)$/\1/p' out > mpi.loss
run train-step -c "$cfg" --trace t.rrt --plan relibra.rlp --virtual-ranks 4
expect_status 0
sed -n 's/.*\(loss .*\)$/\1/p' out > virtual.loss
[ -s mpi.loss ] && cmp -s mpi.loss virtual.loss || fail "losses differ: $(cat mpi.loss) vs $(cat virtual.loss)"

# A built-in config by name: every rank finds it (no file of that name).
mpi 4 "$RELIBRA" train-step -c tiny-2x2 --trace t.rrt --plan relibra.rlp
expect_status 0
sed -n 's/.*\(loss .*\)$/\1/p' out > builtin.loss
cmp -s mpi.loss builtin.loss || fail "-c tiny-2x2 under mpirun: $(cat err)"

# Wrong rank count: one message (from rank 0), every rank exits.
mpi 2 "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan relibra.rlp
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "mpirun -np 2: status $status"
n=$(grep -c 'relibra train-step: the job has 2 ranks, parallel.ep_size is 4' err)
[ "$n" -eq 1 ] || { cat err; fail "expected the message once, got $n"; }
mpi 3 "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan relibra.rlp
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "mpirun -np 3: status $status"
n=$(grep -c 'relibra train-step: the job has 3 ranks, parallel.ep_size is 4' err)
[ "$n" -eq 1 ] || { cat err; fail "expected the message once, got $n"; }

# One rank given another config (a model of another width) or another
# trace and plan: refused before any transfer, naming the rank.
sed 's/hidden: 64/hidden: 32/' "$cfg" > h32.yaml
cat > per-rank.sh <<EOF
#!/bin/sh
# rank 2 gets \$ALT_CFG, \$ALT_TRACE and \$ALT_PLAN where given
cfg=\$1 trace=\$2 plan=\$3
if [ "\$OMPI_COMM_WORLD_RANK" = 2 ]; then
	cfg=\${ALT_CFG:-\$cfg} trace=\${ALT_TRACE:-\$trace} plan=\${ALT_PLAN:-\$plan}
fi
exec "$RELIBRA" train-step -c "\$cfg" --trace "\$trace" --plan "\$plan" -o m.json
EOF
ALT_CFG=h32.yaml
export ALT_CFG
mpi 4 -x ALT_CFG sh per-rank.sh "$cfg" t.rrt relibra.rlp
unset ALT_CFG
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "per-rank config: status $status"
expect_err "relibra train-step: rank 2: the config differs from rank 0's (every rank must be given the same)"
run capture -c "$cfg" --set workload.steps=2 --set workload.prompts_per_step=4 --synthetic --seed 7 -o t7.rrt
expect_status 0
run plan -c "$cfg" --policy relibra -o r7.rlp t7.rrt
expect_status 0
ALT_TRACE=t7.rrt ALT_PLAN=r7.rlp
export ALT_TRACE ALT_PLAN
mpi 4 -x ALT_TRACE -x ALT_PLAN sh per-rank.sh "$cfg" t.rrt relibra.rlp
unset ALT_TRACE ALT_PLAN
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "per-rank trace: status $status"
expect_err "relibra train-step: rank 2: the trace differs from rank 0's"
[ ! -e m.json ] && [ ! -e m.json.tmp ] || fail "a refused job left m.json or m.json.tmp"
# Rank 2's trace alone another: its plan does not match it, and rank 0
# says so once, naming rank 2.
ALT_TRACE=t7.rrt
export ALT_TRACE
mpi 4 -x ALT_TRACE sh per-rank.sh "$cfg" t.rrt relibra.rlp
unset ALT_TRACE
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "per-rank trace alone: status $status"
n=$(grep -c "^relibra train-step: rank 2: plan does not match the trace: 'header hash'" err)
[ "$n" -eq 1 ] || { cat err; fail "expected one message naming rank 2, got $n"; }

# Other options on rank 2: named before any backend starts (the CUDA
# backend's set-up is collective: a rank of another backend, left out of
# it, would be waited for until the timeout).
cat > opts-rank2.sh <<EOF
#!/bin/sh
[ "\$OMPI_COMM_WORLD_RANK" = 2 ] || OPTS2=
exec "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan relibra.rlp \$OPTS2
EOF
opts="--steps=1:1"
"$RELIBRA" --version | grep -q 'backends: .*cuda' && opts="$opts --backend=cuda"
# Rank 2 alone given WHAT through VAR (run by SCRIPT): the job ends with
# status 1 and one message naming rank 2 that matches PATTERN.
rank2_fails() {	# VAR SCRIPT PATTERN WHAT
	mpi 4 -x "$1" sh "$2"
	[ "$status" -eq 1 ] || { cat err; fail "$4 on rank 2: status $status (124: hung)"; }
	n=$(grep -c "$3" err)
	[ "$n" -eq 1 ] || { cat err; fail "$4: expected one message naming rank 2, got $n"; }
}
for OPTS2 in $opts; do
	export OPTS2
	rank2_fails OPTS2 opts-rank2.sh \
		"^relibra train-step: rank 2: the train-step options differ from rank 0's" "$OPTS2"
done
# --virtual-ranks on rank 2 alone: it joins MPI all the same and rank 0
# names it (leaving alone, it ended the job without a word).
OPTS2=--virtual-ranks=4
export OPTS2
rank2_fails OPTS2 opts-rank2.sh \
	"^relibra train-step: rank 2: --virtual-ranks runs without mpirun" "$OPTS2"
unset OPTS2
# A usage error on rank 2 alone: rank 0 prints it, naming rank 2, and
# every rank exits with status 2.  -h on rank 2 alone: the usage, once,
# and every rank exits with status 0 (none is left waiting in MPI_Init).
OPTS2=--steps=x
export OPTS2
mpi 4 -x OPTS2 sh opts-rank2.sh
[ "$status" -eq 2 ] || { cat err; fail "--steps=x on rank 2: status $status (124: hung)"; }
n=$(grep -c "^relibra train-step: rank 2: --steps 'x': expected a non-negative integer, got 'x'" err)
[ "$n" -eq 1 ] || { cat err; fail "--steps=x: expected one message naming rank 2, got $n"; }
OPTS2=-h
mpi 4 -x OPTS2 sh opts-rank2.sh
[ "$status" -eq 0 ] || { cat err; fail "-h on rank 2: status $status (124: hung)"; }
n=$(grep -c '^usage: relibra train-step' out)
[ "$n" -eq 1 ] || { cat out err; fail "-h on rank 2: expected the usage once, got $n"; }
unset OPTS2

# -o in a directory that only rank 0 has (a node-local one): rank 0
# alone writes the metrics, the other ranks do not check the path.
mkdir -p n0/out n2
cat > local-out.sh <<EOF
#!/bin/sh
d=n0
[ "\$OMPI_COMM_WORLD_RANK" = 2 ] && d=n2
cd "\$d" && exec "$RELIBRA" train-step -c "$cfg" --trace ../t.rrt --plan ../relibra.rlp -o out/m.json
EOF
mpi 4 sh local-out.sh
expect_status 0
[ -s n0/out/m.json ] || fail "no metrics from rank 0"

# A config that one rank cannot read: rank 0 names it, once, and every
# rank exits (status 1, not an abort).
ALT_CFG=missing.yaml
export ALT_CFG
mpi 4 -x ALT_CFG sh per-rank.sh "$cfg" t.rrt relibra.rlp
unset ALT_CFG
[ "$status" -eq 1 ] || { cat err; fail "unreadable config on rank 2: status $status"; }
n=$(grep -c '^relibra train-step: rank 2: .*missing.yaml' err)
[ "$n" -eq 1 ] || { cat err; fail "expected one message naming rank 2, got $n"; }

# RELIBRA_FAULT and RELIBRA_TIMEOUT that only rank 2 has wrong: rank 0
# names it, once, and every rank exits (rank 2 leaving alone would leave
# the others in the next collective).
cat > env-rank2.sh <<EOF
#!/bin/sh
[ "\$OMPI_COMM_WORLD_RANK" = 2 ] && export "\$ENV2"
exec "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan relibra.rlp
EOF
for e in RELIBRA_FAULT=rank:9:step:0 RELIBRA_TIMEOUT=soon; do
	ENV2=$e
	export ENV2
	rank2_fails ENV2 env-rank2.sh "^relibra train-step: rank 2: ${e%%=*}: " "$e"
done
unset ENV2

# A rank stuck before the ranks agree (its config a FIFO that nobody
# writes: open() blocks): rank 0 times out, names it and ends the job.
# A trace that is a FIFO is refused at once (traces are read at random).
mkfifo stuck.yaml stuck.rrt
RELIBRA_TIMEOUT=3
export RELIBRA_TIMEOUT
ALT_CFG=stuck.yaml
export ALT_CFG
mpi 4 -x ALT_CFG -x RELIBRA_TIMEOUT sh per-rank.sh "$cfg" t.rrt relibra.rlp
unset ALT_CFG
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "stuck rank: status $status (124: hung)"
expect_err "relibra train-step: rank 0: agreement: timed out after 3 s waiting for rank 2"
[ ! -e m.json.tmp ] || fail "the ended job left m.json.tmp"
ALT_TRACE=stuck.rrt
export ALT_TRACE
mpi 4 -x ALT_TRACE sh per-rank.sh "$cfg" t.rrt relibra.rlp
unset ALT_TRACE
[ "$status" -eq 1 ] || { cat err; fail "trace a FIFO on rank 2: status $status"; }
n=$(grep -c "^relibra train-step: rank 2: cannot read trace 'stuck.rrt': not a regular file" err)
[ "$n" -eq 1 ] || { cat err; fail "expected one message naming rank 2, got $n"; }

# A rank that stops in the middle of training: the ranks waiting for its
# transfers time out naming it.
RELIBRA_FAULT=rank:2:step:1:hang
export RELIBRA_FAULT
mpi 4 -x RELIBRA_FAULT -x RELIBRA_TIMEOUT "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan relibra.rlp
unset RELIBRA_FAULT RELIBRA_TIMEOUT
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "hung rank: status $status (124: hung)"
grep -Eq 'transfers: timed out after 3 s waiting for ranks? ([0-9]+, )*2($|,| and)' err ||
	{ cat err; fail "the timeout does not name rank 2"; }

# A rank that stops once its transfers are done, before the reduction
# that ends the step: rank 0 names it there too.
RELIBRA_FAULT=rank:2:step:1:hang-end RELIBRA_TIMEOUT=3
export RELIBRA_FAULT RELIBRA_TIMEOUT
mpi 4 -x RELIBRA_FAULT -x RELIBRA_TIMEOUT "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan relibra.rlp
unset RELIBRA_FAULT RELIBRA_TIMEOUT
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "rank hung before the reduction: status $status (124: hung)"
expect_err "relibra train-step: rank 0: allreduce: timed out after 3 s waiting for rank 2"

# A model larger than the machine (the first expert alone takes 13 TB):
# refused before anything is allocated, since Linux would promise the
# memory and then kill a process; reported once, every rank exits 1.
mpi 4 "$RELIBRA" train-step -c "$cfg" --set model.hidden=1048576 \
	--set model.expert_ffn=1048576 --trace t.rrt --plan relibra.rlp -o m.json
[ "$status" -eq 1 ] || { cat err; fail "model too large: status $status (124: hung)"; }
n=$(grep -c '^relibra train-step: ' err)
[ "$n" -eq 1 ] || { cat err; fail "model too large: expected one message, got $n"; }
expect_err "relibra train-step: 16 home experts of 3298534883328 parameters need 1055531.2 GB, 4222124.7 GB for the 4 processes of the job on this machine, more than its "
[ ! -e m.json ] && [ ! -e m.json.tmp ] || fail "model too large: m.json or m.json.tmp left"

# A model that the machine holds but the ranks' address space (2 GB
# each) does not, 3.1 GB per rank: the allocation fails, reported once
# (or, on a machine with less than 12.3 GB left, refused as above).
# AddressSanitizer does not start in so little address space.
cat > small-as.sh <<EOF
#!/bin/sh
ulimit -v 2000000 || exit 3
exec "$RELIBRA" train-step -c "$cfg" --set model.hidden=1792 \\
	--set model.expert_ffn=1792 --trace t.rrt --plan relibra.rlp -o m.json
EOF
if (ulimit -v 2000000 && "$RELIBRA" --version) > /dev/null 2>&1; then
	rm -f m.json
	mpi 4 sh small-as.sh
	[ "$status" -eq 1 ] || { cat err; fail "model too large: status $status (124: hung)"; }
	n=$(grep -c '^relibra train-step: ' err)
	[ "$n" -eq 1 ] || { cat err; fail "model too large: expected one message, got $n"; }
	expect_err "relibra train-step: 16 home experts of 9633792 parameters need 3.1 GB"
	[ ! -e m.json ] && [ ! -e m.json.tmp ] || fail "model too large: m.json or m.json.tmp left"
fi

# A rank that fails at step 1 ends the job.
RELIBRA_FAULT=rank:2:step:1
export RELIBRA_FAULT
mpi 4 -x RELIBRA_FAULT "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan relibra.rlp
unset RELIBRA_FAULT
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "fault: status $status (124: hung)"
expect_err "relibra train-step: rank 2: injected fault at step 1"

# When a rank fails, Open MPI may end rank 0 with SIGKILL rather than
# SIGTERM, which no handler sees: rank 0 started with SIGTERM ignored
# (it stays so) makes that certain.  No METRICS.tmp is left, and the
# METRICS there before is untouched.
cat > kill-rank0.sh <<EOF
#!/bin/sh
[ "\$OMPI_COMM_WORLD_RANK" = 0 ] && trap '' TERM
exec "$RELIBRA" train-step -c "$cfg" --trace t.rrt --plan relibra.rlp -o m.json
EOF
echo before > m.json
RELIBRA_FAULT=rank:2:step:1
export RELIBRA_FAULT
mpi 4 -x RELIBRA_FAULT sh kill-rank0.sh
unset RELIBRA_FAULT
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "rank 0 killed: status $status (124: hung)"
[ ! -e m.json.tmp ] || fail "rank 0 killed left m.json.tmp"
[ "$(cat m.json)" = before ] || fail "rank 0 killed changed m.json"
exit 0
