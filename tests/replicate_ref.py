#!/usr/bin/env python3
"""replicate_ref.py - a second implementation of relibra's replication planner.

Written from the documentation alone: the comment at
rlb_replicate_planner_run in lib/replicate.h ("Rule", steps 1-4), relibra(1)
(POLICIES, `replicate` and `relibra`), docs/cost-model.md ("Replicas",
"Planner constants") and trace_format/SPEC.md (P4, P7), not from
lib/replicate.c, so that the two can be checked against each other.

For every (step, micro-batch, layer) of a plan of policy `replicate` or
`relibra`, it computes the loads from the trace and the plan's schedule,
runs the documented planner on the plan's homes, and compares every
expert's instances (GPU and quota, in instance order) with the plan's.

Inputs are what relibra prints:
  relibra config -c CONFIG [--set ...]          the effective configuration
  relibra inspect --json --dump TRACE           every token's experts
  relibra inspect --schedule -c CONFIG TRACE    the micro-batches
  relibra inspect --json --dump PLAN            homes, instances, quotas

usage: replicate_ref.py --relibra BIN -c CONFIG [--set K=V]... \\
           --trace T.rrt (--plan P.rlp | --plan-json DUMP.json) [-v]

Exit status 0 when every cell agrees, 1 when one differs (each printed as
a DIFF line), 2 on bad usage or input.  Python 3 standard library only.
"""

import argparse
import json
import math
import os
import sys
from collections import Counter

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relibra_out import group_trace, read_config, run_json  # noqa: E402

# How often each documented branch was taken (printed with -v), so that a
# run shows which rules it has exercised.
HITS = Counter()


# ---------------------------------------------------------------------------
# Inputs


def min_rows(cfg, policy, option):
    """docs/cost-model.md, "Planner constants", "Rows that pay for a
    replica": a replica takes at least max(min_tokens_per_replica,
    floor(k * T / row_s)) rows, T = W_grad / B_nvl + lat_nvl, k 1 for
    relibra (which prefetches the weights) and 2 for replicate;
    row_s = 18 h f / (P eta_max); W_grad = 2 * 3 h f bytes."""
    m, c = cfg["model"], cfg["cluster"]
    h, f = m["hidden"], m["expert_ffn"]
    row_s = 18.0 * h * f / (c["peak_tflops"] * 1e12 * c["gemm_eff_max"])
    w_grad = 2.0 * 3 * h * f
    t = w_grad / (c["nvlink_gbps"] * 1e9) + c["nvlink_latency_us"] * 1e-6
    k = 1 if policy == "relibra" else 2
    return max(option, int(math.floor(k * t / row_s)))


def step_loads(seqs, sched, G, E, L):
    """load[m][l][s][e] (docs/schedule.md, "Counts"): each token of a chunk
    adds 1 to (chunk's micro-batch, layer, chunk's rank, id) for each of
    its top-k ids in every MoE layer."""
    M = len(sched)
    load = [[[[0] * E for _ in range(G)] for _ in range(L)] for _ in range(M)]
    for m in range(M):
        for s in range(G):
            for (q, a, b) in sched[m][s]:
                ids = seqs[q]
                for l in range(L):
                    row = load[m][l][s]
                    for tok in ids[l][a:b]:
                        for e in tok:
                            row[e] += 1
    return load


# ---------------------------------------------------------------------------
# The planner (lib/replicate.h, rlb_replicate_planner_run, "Rule")


class Node:
    """One node's greedy for a threshold T (step 2)."""

    def __init__(self, gpus, home_experts, L, B, R, m, o):
        self.gpus = gpus            # the node's GPUs, ascending
        self.home_experts = home_experts  # gpu -> its home experts
        self.L = L                  # expert -> load over all sources
        self.B = B                  # gpu -> home load
        self.R, self.m, self.o = R, m, o

    def greedy(self, T):
        """Step 2.  Returns (success, replicas [(expert, gpu, quota)])."""
        L, B, R, m, o = self.L, self.B, self.R, self.m, self.o
        # "Donors are the GPUs with B > T, taken by B descending (lower GPU
        # first on ties); each must shed B - T."
        donors = sorted((x for x in self.gpus if B[x] > T),
                        key=lambda x: (-B[x], x))
        # "Other GPUs of the node have room T - B and R free slots."
        room = {x: T - B[x] for x in self.gpus if B[x] <= T}
        slots = {x: R for x in room}
        hosts = {}                  # expert -> GPUs holding an instance
        reps = []
        ok = True
        for d in donors:
            excess = B[d] - T
            # "A donor's home experts are taken by L descending (lower
            # expert first on ties)"
            for e in sorted(self.home_experts[d], key=lambda e: (-L[e], e)):
                left = L[e]
                have = hosts.setdefault(e, {d})
                # "while the donor still has excess and the expert has load
                # left at home"
                while excess > 0 and left > 0:
                    # "the amount wanted is min(excess, load left); when
                    # that is below m it is raised to m if the load left
                    # allows ..., else the next expert is taken."
                    want = min(excess, left)
                    if want < m:
                        if left >= m:
                            want = m
                            HITS["greedy: amount raised to m"] += 1
                        else:
                            HITS["greedy: load left below m"] += 1
                            break
                    # "among GPUs with a free slot, room > o and no
                    # instance of the expert yet: the one with the smallest
                    # room that still fits the whole amount plus o (best
                    # fit), else the one with the largest room (the
                    # coldest); lower GPU first on ties."
                    cand = [x for x in sorted(room)
                            if slots[x] > 0 and room[x] > o and x not in have]
                    if not cand:
                        # Then no GPU qualifies for a later expert either:
                        # rooms and slots only shrink, and a GPU that took
                        # a replica of e while e has load left and the
                        # donor excess has no room left (q = room - o).  So
                        # T fails, whether the next expert is tried or not.
                        HITS["greedy: no receiver"] += 1
                        break
                    fit = [x for x in cand if room[x] >= want + o]  # "fits"
                    if fit:
                        r = min(fit, key=lambda x: (room[x], x))
                        HITS["greedy: best fit"] += 1
                    else:
                        r = min(cand, key=lambda x: (-room[x], x))
                        HITS["greedy: coldest"] += 1
                    # "The replica's quota is min(amount, room - o); when
                    # that is below m the next expert is taken."
                    q = min(want, room[r] - o)
                    if q < m:
                        HITS["greedy: quota below m"] += 1
                        break
                    # "A replica takes o (instance_rows) of its GPU's room
                    # beyond its quota"
                    room[r] -= q + o
                    slots[r] -= 1
                    have.add(r)
                    reps.append((e, r, q))
                    left -= q
                    excess -= q
                if excess <= 0:
                    break
            # "T succeeds when every donor has shed its excess."
            if excess > 0:
                ok = False
        return ok, reps

    def plan(self):
        """Step 1: the threshold search; returns (T, replicas)."""
        g = len(self.gpus)
        tot = sum(self.B[x] for x in self.gpus)
        lo = -(-tot // g)           # "lo = ceil(sum of the node's B / g)"
        hi = max(self.B[x] for x in self.gpus)
        # "When R = 0, g = 1 or lo >= hi, T = hi and nothing is replicated."
        if self.R == 0 or g == 1 or lo >= hi:
            return hi, []
        tried = {}

        def ok(T):
            if T not in tried:
                tried[T] = self.greedy(T)
            return tried[T][0]

        # "searched for as: lo; then lo + d, lo + 3d, lo + 7d, ... with
        # d = max(1, (hi - lo) / 64) until one succeeds (or hi is reached);
        # then bisection between the last failure and that success."
        # "d = max(1, (hi - lo) / 64) (the quotient rounded down)";
        # "the midpoint (f + s) / 2, rounded down, replaces f if it fails,
        # s if it succeeds, until s = f + 1; T = s."
        HITS["search"] += 1
        if ok(lo):
            HITS["search: lo succeeds"] += 1
            return lo, tried[lo][1]
        d = max(1, (hi - lo) // 64)
        fail = lo
        k = 1
        while True:
            t = min(hi, lo + ((1 << k) - 1) * d)
            if ok(t):
                succ = t
                break
            fail = t
            k += 1
            HITS["search: doubling step failed"] += 1
        if succ == hi:
            HITS["search: hi reached"] += 1
        while succ - fail > 1:
            mid = fail + (succ - fail) // 2
            HITS["search: bisection step"] += 1
            if ok(mid):
                succ = mid
            else:
                fail = mid
        return succ, tried[succ][1]


def plan_cell(load, home, G, g, E, R, m, o):
    """Plan one (micro-batch, layer): for each expert its instances
    [(gpu, quota)], home first, then replicas by ascending GPU (the
    layout of struct rlb_replicate_plan)."""
    L = [sum(load[s][e] for s in range(G)) for e in range(E)]
    B = [0] * G
    home_experts = [[] for _ in range(G)]
    for e in range(E):
        B[home[e]] += L[e]
        home_experts[home[e]].append(e)
    reps = []
    Ts = []
    for n in range(G // g):
        gpus = list(range(n * g, (n + 1) * g))
        T, r = Node(gpus, home_experts, L, B, R, m, o).plan()
        Ts.append(T)
        reps += r
    inst = [[(home[e], L[e])] for e in range(E)]
    # "3. The home copy keeps L(e) minus its replicas' quotas."
    for (e, x, q) in sorted(reps, key=lambda r: (r[0], r[1])):
        inst[e].append((x, q))
        inst[e][0] = (home[e], inst[e][0][1] - q)
    check_cell(inst, L, B, home, G, g, R, m, o, Ts)
    return inst


def check_cell(inst, L, B, home, G, g, R, m, o, Ts):
    """Step 3's promises, on the reference's own plan."""
    used = [0] * G
    tokens = list(B)
    for e, cell in enumerate(inst):
        gpus = [x for (x, _) in cell]
        assert len(set(gpus)) == len(gpus), "two instances on one gpu"
        assert sum(q for (_, q) in cell) == L[e]
        for (x, q) in cell[1:]:
            assert x // g == home[e] // g, "replica off its home node"
            assert q >= m, "replica below m"
            used[x] += 1
            tokens[x] += q + o
            tokens[home[e]] -= q
    for x in range(G):
        assert used[x] <= R, "more than R replicas on a gpu"
        assert tokens[x] <= Ts[x // g], "gpu above T"


def split(load_e, insts, G, g):
    """Step 4 / SPEC.md P7 (LOCALITY) for one expert: rows[s][i]; returns
    (rows, rows without quota).  The plan file stores quotas only and
    readers recompute the split, so here it only checks that the quotas
    place every row; tests/cli/costmodel_ref.sh checks the traffic that
    follows from the split."""
    n = len(insts)
    left = [q for (_, q) in insts]
    rest = list(load_e)
    rows = [[0] * n for _ in range(G)]
    # "first each instance takes the rows of the source on its own GPU (up
    # to its quota)"
    for i, (x, _) in enumerate(insts):
        if x < G:
            t = min(rest[x], left[i])
            rows[x][i] += t
            rest[x] -= t
            left[i] -= t
    # "then the sources of the home node by ascending rank, then all other
    # sources by ascending rank, fill the instances in instance order"
    hn = insts[0][0] // g
    order = [s for s in range(G) if s // g == hn] + \
            [s for s in range(G) if s // g != hn]
    for s in order:
        for i in range(n):
            t = min(rest[s], left[i])
            rows[s][i] += t
            rest[s] -= t
            left[i] -= t
    return rows, sum(rest)


# ---------------------------------------------------------------------------
# Comparison


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--relibra", required=True)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--plan")
    ap.add_argument("--plan-json", help="a plan's `inspect --json --dump`")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if (args.plan is None) == (args.plan_json is None):
        ap.error("give one of --plan and --plan-json")

    sets = []
    for s in args.set:
        sets += ["--set", s]
    rb = args.relibra
    cfg = read_config(rb, args.config, sets)
    if args.plan is not None:
        pdump = run_json([rb, "inspect", "--json", "--dump", args.plan])
    else:
        with open(args.plan_json) as fp:
            pdump = json.load(fp)
    hdr = pdump["header"]
    policy = hdr["policy"]
    if policy not in ("replicate", "relibra") or hdr["split"] != "locality":
        print("reference: a plan of policy %s, not replicate or relibra"
              % policy)
        return 2
    opt, shape = hdr["options"], hdr["shape"]
    E, G, g, Lyr = shape["experts"], shape["ranks"], shape["gpus_per_node"], \
        shape["layers"]
    # The header's replica_slots is R, 0 for relibra without REPLICATE
    # (SPEC.md P3), which then plans no replica (step 1, R = 0).
    R = opt["replica_slots"]
    m = min_rows(cfg, policy, opt["min_tokens_per_replica"])
    # cost-model.md, "A replica's fixed GEMM cost": the planner charges
    # "h = gemm_eff_half_rows ..., rounded down to a whole row".
    o = int(math.floor(cfg["cluster"]["gemm_eff_half_rows"]))
    if args.verbose:
        print("G %d g %d E %d R %d m %d o %d" % (G, g, E, R, m, o))

    # relibra(1), POLICIES: replicate keeps the static homes, expert e on
    # GPU e / (E / G), and so does relibra without the reordering
    # (--no-reorder); relibra's own homes are the plan's.
    static = [e // (E // G) for e in range(E)]
    if policy == "replicate" or not opt["reorder"]:
        for st in pdump["steps"]:
            for l, h in enumerate(st["homes"]):
                if h != static:
                    print("DIFF step %d layer %d: homes %s, not the static "
                          "layout" % (st["step"], l, h))
                    return 1

    trace = group_trace(run_json([rb, "inspect", "--json", "--dump",
                                  args.trace]))
    steps = pdump["steps"]
    if not steps:
        print("reference: the plan has no step")
        return 2
    sched = {}
    if any("schedule" not in st for st in steps):
        first, last = steps[0]["step"], steps[-1]["step"]
        s = run_json([rb, "inspect", "--schedule", "-c", args.config] + sets +
                     ["--pack", hdr["pack"], "--steps", "%d:%d" % (first, last),
                      args.trace])
        sched = {x["step"]: x["micro_batches"] for x in s["steps"]}

    cells = bad = reps = 0
    for st in steps:
        step = st["step"]
        # SPEC.md P7: the schedule the plan carries, else the packing
        # rule's.
        if "schedule" in st:
            mbs = st["schedule"]["micro_batches"]
        else:
            mbs = sched[step]
        if len(mbs) != st["micro_batches"]:
            print("DIFF step %d: %d micro-batches, the plan has %d" %
                  (step, len(mbs), st["micro_batches"]))
            bad += 1
            continue
        load = step_loads(trace[step], mbs, G, E, Lyr)
        for mb in range(len(mbs)):
            for l in range(Lyr):
                home = st["homes"][l]
                ref = plan_cell(load[mb][l], home, G, g, E, R, m, o)
                got = [[(x[0], x[1]) for x in cell]
                       for cell in st["instances"][mb][l]]
                for e in range(E):
                    cells += 1
                    reps += len(ref[e]) - 1
                    _, lost = split([load[mb][l][s][e] for s in range(G)],
                                    ref[e], G, g)
                    assert lost == 0
                    if ref[e] != got[e]:
                        bad += 1
                        print("DIFF step %d mb %d layer %d expert %d: "
                              "reference %s, plan %s" %
                              (step, mb, l, e, ref[e], got[e]))
    if bad:
        print("%d of %d cells differ" % (bad, cells))
        return 1
    if args.verbose:
        for k in sorted(HITS):
            print("%-32s %d" % (k, HITS[k]))
    print("%d cells agree (%s, %d steps, %d replicas)" %
          (cells, policy, len(steps), reps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
