#!/usr/bin/env python3
"""costmodel_ref.py - a second implementation of relibra's cost model.

Written from the documentation alone (docs/cost-model.md, docs/schedule.md,
trace_format/SPEC.md part II, relibra(1) and relibra.yaml(5)), not from
lib/sim.c, so that the two can be checked against each other.  Every
section cited below is a section of docs/cost-model.md unless it names
another file.

Inputs are what relibra prints:
  relibra config -c CONFIG [--set ...]          the effective configuration
  relibra inspect --json --dump TRACE           every token's experts
  relibra inspect --schedule -c CONFIG TRACE    the configured micro-batches
  relibra inspect --json --dump PLAN            homes, instances, quotas
and the result file of `relibra plan --summary S.json --no-timing`, whose
figures it recomputes and compares (relative tolerance 1e-9).

usage: costmodel_ref.py --relibra BIN -c CONFIG [--set K=V]... \\
           --trace T.rrt --plan P.rlp --summary S.json [--tol 1e-9] [-v]

Exit status 0 when every figure agrees, 1 when one differs (each printed),
2 on bad usage or input.  Python 3 standard library only.
"""

import argparse
import json
import math
import os
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relibra_out import group_trace, read_config, run_json  # noqa: E402


# ---------------------------------------------------------------------------
# Inputs


class Model:
    """The constants of section "Constants"."""

    def __init__(self, cfg):
        m, c, p, b = cfg["model"], cfg["cluster"], cfg["parallel"], cfg["balancer"]
        self.E = m["experts"]
        self.topk = m["topk"]
        self.h = m["hidden"]
        self.f = m["expert_ffn"]
        # latent MoE: the token goes down to l before the dispatch and the
        # routed experts work in it; w, the experts' and a token copy's width
        self.l = m["moe_latent"]
        self.w = self.l or self.h
        self.L = m["moe_layers"]
        # the layer layout (relibra.yaml(5)): first_dense_layers, then
        # moe_layers blocks of moe_layer_period layers, one of them MoE;
        # with linear-attention heads, attention chunks or an attention
        # window, every layer is linear, chunked or windowed but those whose
        # index + 1 is a multiple of full_attention_period.
        # self.layers: (MoE?, "full" | "window" | "linear") per hidden layer.
        period = m["moe_layer_period"]
        first = m["first_dense_layers"]
        self.window = m["attention_window"]
        self.chunk = m["attention_chunk"]
        self.lin = (m["linear_key_heads"], m["linear_value_heads"],
                    m["linear_key_head_dim"], m["linear_value_head_dim"])
        full_period = m["full_attention_period"]
        self.layers = []
        # or model.layer_pattern, a letter per layer: E a MoE layer (its
        # dense part the router and shared experts), - a dense FFN, * an
        # attention layer (full), M a Mamba-2 mixer
        letters = {"E": (True, "router"), "-": (False, "mlp"),
                   "*": (False, "attention"), "M": (False, "mamba")}
        self.pattern = m["layer_pattern"]
        self.layers = [letters[c] for c in self.pattern]
        self.mamba = (m["mamba_heads"], m["mamba_head_dim"], m["mamba_state"],
                      m["mamba_groups"] or 1)
        for i in range(0 if self.pattern else first + self.L * period):
            moe = i >= first and (i - first) % period == m["moe_layer_offset"]
            if full_period > 0 and (i + 1) % full_period == 0:
                kind = "full"
            elif self.lin[1] > 0:
                kind = "linear"
            elif self.chunk > 0:
                kind = "chunk"
            elif self.window > 0:
                kind = "window"
            else:
                kind = "full"
            self.layers.append((moe, kind))
        self.dense_layers = sum(1 for (moe, _) in self.layers if not moe)
        self.dense_ffn = m["dense_ffn"]
        self.shared = m["shared_experts"]
        self.shared_ffn = m["shared_expert_ffn"]
        self.q = m["q_heads"]
        self.kv = m["kv_heads"]
        self.d = m["head_dim"]
        self.gate = 1 if m["attention_output_gate"] else 0
        # multi-head latent attention: compressed widths, rotary part, value head
        self.mla = (m["kv_lora_rank"], m["q_lora_rank"], m["qk_rope_head_dim"],
                    m["v_head_dim"] or m["head_dim"])
        self.dense_time_s = m["dense_time_ms"] * 1e-3
        self.G = p["ep_size"]
        self.g = min(c["gpus_per_node"], self.G)  # "capped at G"
        self.P = c["peak_tflops"] * 1e12
        self.eta_max = c["gemm_eff_max"]
        self.m0 = c["gemm_eff_half_rows"]
        self.B_hbm = c["hbm_gbps"] * 1e9
        self.B_nvl = c["nvlink_gbps"] * 1e9
        self.lat_nvl = c["nvlink_latency_us"] * 1e-6
        self.B_rdma = c["rdma_gbps"] * 1e9
        self.lat_rdma = c["rdma_latency_us"] * 1e-6
        # an FFN's matrices: gate, up and down (SwiGLU), or up and down
        # without gated_ffn
        self.mats = 3 if m["gated_ffn"] else 2
        self.params = self.mats * self.w * self.f
        self.W = 2 * self.params
        self.W_grad = 2 * self.params
        self.W_mig = self.params * b["migration_bytes_per_param"]
        self.b_tok = 2 * self.w
        rec = p["recompute"]
        self.passes = 4 if rec else 3
        self.phases = 6 if rec else 4
        self.per_gpu = self.E // self.G
        self.overlap = b["planner_overlap"]

    def node(self, gpu):
        return gpu // self.g

    def gemm(self, m, f=None):
        """Section "Expert compute": one instance of m rows, forward.
        f is the FFN width (a shared expert's in the dense part, which
        works on the hidden width, not the routed experts' w)."""
        if m == 0:
            return 0.0
        width = self.w if f is None else self.h
        f = self.f if f is None else f
        flops = 2.0 * m * width * f * self.mats
        eta = self.eta_max * m / (m + self.m0)
        weights = 2.0 * self.mats * width * f  # W of that FFN: BF16 weights
        return max(flops / (self.P * eta), weights / self.B_hbm)

    def net_time(self, lat, bw, sent, recv, unit):
        """Busiest sender or receiver (section "Dispatch and combine"):
        0 without a copy, else lat + max(sent, received) * unit / B."""
        if not any(sent) and not any(recv):
            return 0.0
        busiest = max(max(s, r) for s, r in zip(sent, recv))
        return lat + busiest * unit / bw

    def even_time(self, lat, bw, total, unit):
        """The copies spread evenly: lat + (sum / G) * unit / B; 0 without."""
        if total == 0:
            return 0.0
        return lat + (total / self.G) * unit / bw


# ---------------------------------------------------------------------------
# Schedule and loads


class StepData:
    """One step: its sequences (ids[layer][token][k]) and a schedule."""

    def __init__(self, model, seqs, sched):
        self.model = model
        self.seqs = seqs
        # sched: micro_batches[m][rank] = [[seq, start, end], ...]
        self.M = len(sched)
        G = model.G
        # Chunks of each (m, rank), in (sequence, start) order: a source
        # sends its rows in that order (section "Dispatch and combine").
        self.chunks = [[sorted((c[0], c[1], c[2]) for c in sched[m][r])
                        for r in range(G)] for m in range(self.M)]
        self.tokens = sum(c[2] - c[1] for mb in self.chunks for r in mb for c in r)
        E, L = model.E, model.L
        # load[m][l][s][e] (docs/schedule.md, "Counts")
        self.load = [[[[0] * E for _ in range(G)] for _ in range(L)]
                     for _ in range(self.M)]
        for m in range(self.M):
            for s in range(G):
                for (q, a, b) in self.chunks[m][s]:
                    ids = seqs[q]
                    for l in range(L):
                        row = self.load[m][l][s]
                        for tok in ids[l][a:b]:
                            for e in tok:
                                row[e] += 1

    def rank_tokens(self, m, r):
        return sum(c[2] - c[1] for c in self.chunks[m][r])


# ---------------------------------------------------------------------------
# Plans


class StepPlan:
    """homes[l][e]; inst[m][l][e] = [(gpu, quota, copies), ...], the home
    copy first (trace_format/SPEC.md P4.3)."""

    def __init__(self, homes, inst, split):
        self.homes = homes
        self.inst = inst
        self.split = split  # "locality" or "even"


def static_plan(model, data):
    """No plan: expert e on GPU e / (E/G), one instance with all its rows
    (section "Inputs")."""
    homes = [[e // model.per_gpu for e in range(model.E)] for _ in range(model.L)]
    inst = []
    for m in range(data.M):
        lay = []
        for l in range(model.L):
            cells = []
            for e in range(model.E):
                rows = sum(data.load[m][l][s][e] for s in range(model.G))
                cells.append([(homes[l][e], rows, 1)])
            lay.append(cells)
        inst.append(lay)
    return StepPlan(homes, inst, "locality")


def split_cell(model, plan, loads, cell, home):
    """trace_format/SPEC.md P7: rows[s][i], the rows source s sends to
    instance i of one cell.  loads[s] are the cell's rows per source."""
    G = model.G
    n = len(cell)
    rows = [[0] * n for _ in range(G)]
    if plan.split == "even":
        # Every source splits evenly over the C copies; the remainder r goes
        # one row each to copies (s + j) mod C, j < r.  Instance i stands
        # for its copies' consecutive numbers.
        owner = []
        for i, (_, _, cp) in enumerate(cell):
            owner += [i] * cp
        C = len(owner)
        for s in range(G):
            base, r = divmod(loads[s], C)
            for c in range(C):
                rows[s][owner[c]] += base
            for j in range(r):
                rows[s][owner[(s + j) % C]] += 1
        return rows
    # LOCALITY: own GPU first, then the home node's sources by ascending
    # rank, then the others by ascending rank, filling instances in order.
    left = [q for (_, q, _) in cell]
    rest = list(loads)
    for i, (gpu, _, _) in enumerate(cell):
        t = min(rest[gpu], left[i])
        rows[gpu][i] += t
        rest[gpu] -= t
        left[i] -= t
    hn = model.node(home)
    order = [s for s in range(G) if model.node(s) == hn] + \
            [s for s in range(G) if model.node(s) != hn]
    for s in order:
        for i in range(n):
            if rest[s] == 0:
                break
            t = min(rest[s], left[i])
            rows[s][i] += t
            rest[s] -= t
            left[i] -= t
    return rows


# ---------------------------------------------------------------------------
# The traffic pass (section "Dispatch and combine")


class Traffic:
    """Copies per (m, l) and GPU: sent and received over RDMA and NVLink."""

    def __init__(self, model, data, plan):
        G, g, L, E = model.G, model.g, model.L, model.E
        self.rs = [[[0] * G for _ in range(L)] for _ in range(data.M)]
        self.rr = [[[0] * G for _ in range(L)] for _ in range(data.M)]
        self.ns = [[[0] * G for _ in range(L)] for _ in range(data.M)]
        self.nr = [[[0] * G for _ in range(L)] for _ in range(data.M)]
        # rc[m][l][s][N]: the RDMA copies source s sends to node N, which
        # the relayed dispatch spreads over s's node
        nodes = G // g
        self.rc = [[[[0] * nodes for _ in range(G)] for _ in range(L)]
                   for _ in range(data.M)]
        self.unplanned = 0
        for m in range(data.M):
            for l in range(L):
                # Per source and expert: the sequence of (gpu, rows) that its
                # rows go to, in instance order (P7, last paragraph).
                route = [[None] * E for _ in range(G)]
                for e in range(E):
                    cell = plan.inst[m][l][e]
                    loads = [data.load[m][l][s][e] for s in range(G)]
                    if len(cell) == 1:
                        # one instance: every row goes to its GPU
                        for s in range(G):
                            route[s][e] = cell[0][0]
                        continue
                    rows = split_cell(model, plan, loads, cell, plan.homes[l][e])
                    for s in range(G):
                        route[s][e] = [(cell[i][0], rows[s][i]) for i in range(len(cell))
                                       if rows[s][i] > 0]
                rs, rr, ns, nr = self.rs[m][l], self.rr[m][l], self.ns[m][l], self.nr[m][l]
                rc = self.rc[m][l]
                for s in range(G):
                    S = model.node(s)
                    lane = s % g
                    used = [0] * E  # rows of e that s sent to its current instance
                    pos = [0] * E   # its current instance in route[s][e]
                    for (q, a, b) in data.chunks[m][s]:
                        for tok in data.seqs[q][l][a:b]:
                            D = set()
                            for e in tok:
                                rt = route[s][e]
                                if isinstance(rt, int):  # one instance
                                    D.add(rt)
                                    continue
                                # Move to the next instance once this one's
                                # rows from s are used up.
                                while pos[e] < len(rt) and used[e] >= rt[pos[e]][1]:
                                    used[e] -= rt[pos[e]][1]
                                    pos[e] += 1
                                if pos[e] >= len(rt):
                                    # beyond the plan: the home copy
                                    self.unplanned += 1
                                    D.add(plan.inst[m][l][e][0][0])
                                    continue
                                D.add(rt[pos[e]][0])
                                used[e] += 1
                            self._count(model, s, S, lane, D, rs, rr, ns, nr, rc[s])

    @staticmethod
    def _count(model, s, S, lane, D, rs, rr, ns, nr, rc):
        g = model.g
        by_node = {}
        for d in D:
            n = d // g
            if n == S:
                if d != s:  # NVLink s -> d inside the source's node
                    ns[s] += 1
                    nr[d] += 1
            else:
                by_node.setdefault(n, []).append(d)
        for n, ds in by_node.items():
            r = n * g + lane  # the rail GPU receives the one RDMA copy
            rs[s] += 1
            rr[r] += 1
            rc[n] += 1
            for d in ds:
                if d != r:  # forwarded over NVLink
                    ns[r] += 1
                    nr[d] += 1


# ---------------------------------------------------------------------------
# Dense part (section "Dense part")


def dense_fwd(model, data, m):
    """Forward dense time of micro-batch m per layer kind: {(MoE?,
    attention kind or pattern part): the slowest rank's time of one such
    layer}."""
    kinds = [(moe, w) for moe in (True, False) for w in ("full", "window", "linear", "chunk")]
    kinds += [(True, "router"), (False, "mlp"), (False, "attention"), (False, "mamba")]
    if model.dense_time_s > 0:
        # model.dense_time_ms: every layer and micro-batch costs it; its
        # forward share is dense_time_ms / passes.
        share = model.dense_time_s / model.passes
        return {k: share for k in kinds}
    fwd = {k: 0.0 for k in kinds}
    h, q, kv, d = model.h, model.q, model.kv, model.d
    pe = model.P * model.eta_max
    for r in range(model.G):
        tokens = 0
        ctx = {"full": 0, "window": 0, "chunk": 0}
        for (_, a, b) in data.chunks[m][r]:
            tokens += b - a
            # the token at position p attends to p + 1 positions, at most
            # the window in a windowed layer
            for pos in range(a, b):
                ctx["full"] += pos + 1
                if model.window > 0:
                    ctx["window"] += min(pos + 1, model.window)
                # and in a chunked layer to those of its aligned chunk
                if model.chunk > 0:
                    ctx["chunk"] += pos % model.chunk + 1
        # Q and O, K and V, and an output gate as wide as Q when the model has one
        proj = 2.0 * tokens * h * ((2 + model.gate) * q + 2 * kv) * d
        r_kv, l_q, p_rope, v = model.mla
        if r_kv > 0:
            q_in = h * l_q + l_q * q * d if l_q > 0 else h * q * d
            proj = 2.0 * tokens * (q_in + h * (r_kv + p_rope) +
                                   r_kv * q * (d - p_rope + v) + q * v * h)
        # the router reads the full width; a latent MoE projects h -> l and back
        router = 2.0 * tokens * h * model.E + 4.0 * tokens * h * model.l
        ffn = 2.0 * tokens * h * model.dense_ffn * model.mats
        # a linear-attention layer: its projections (q, k, v, output gate,
        # decay and beta in, one out) and the chunked recurrence
        hk, hv, dk, dv = model.lin
        lin = 2.0 * tokens * h * (2 * hk * dk + 2 * hv * dv + 2 * hv) + \
            2.0 * tokens * hv * dv * h + \
            tokens * hv * (6.0 * dk * dv + 2 * 64 * (3 * dk + 2 * dv))
        # a Mamba-2 mixer: in_proj to z, x, B, C and dt; the conv1d of 4
        # over x, B and C; in chunks of 128, C B^T per group, its product
        # with x, the chunk state and the output of the state before it;
        # out_proj
        H, P, N, G = model.mamba
        dm = H * P
        mamba = tokens * (2.0 * h * (2 * dm + 2 * G * N + H) + 2 * 4 * (dm + 2 * G * N) +
                          2 * 128 * G * N + 2 * 128 * dm + 2 * dm * N + 2 * dm * N +
                          2 * dm * h)
        for (moe, w) in kinds:
            # a pattern's attention layer attends in full
            c = ctx["full" if w == "attention" else w] if w in ctx or w == "attention" else 0
            if w == "linear":
                mix = lin
            elif r_kv > 0:
                mix = proj + 2.0 * c * q * (d + v)
            else:
                mix = proj + 4.0 * c * q * d
            if w == "router":
                x = router / pe
            elif w == "mlp":
                x = ffn / pe
            elif w == "attention":
                x = mix / pe
            elif w == "mamba":
                x = mamba / pe
            elif moe:
                x = (mix + router) / pe
            else:
                x = (mix + ffn) / pe
            if moe:
                for _ in range(model.shared):
                    x += model.gemm(tokens, model.shared_ffn)
            fwd[(moe, w)] = max(fwd[(moe, w)], x)
    return fwd


def dense_charge(model, fwd):
    """The dense part of one micro-batch in the step: passes times the
    forward of every dense layer and of every MoE layer's dense part,
    which with model.dense_time_ms is dense_time_ms per layer."""
    if model.dense_time_s > 0:
        return (model.dense_layers + model.L) * model.dense_time_s
    return model.passes * sum(fwd[k] for k in model.layers)


# ---------------------------------------------------------------------------
# Simulation of one step


FIELDS = ("total_s", "dense_s", "expert_s", "a2a_s", "a2a_rdma_s",
          "a2a_nvlink_s", "a2a_even_s", "a2a_senders_s", "replication_s",
          "grad_reduce_s", "migration_s", "planning_s")
BYTES = ("a2a_rdma", "a2a_nvlink", "replica_rdma", "replica_nvlink",
         "grad_rdma", "grad_nvlink", "migration_rdma", "migration_nvlink")


def zero():
    return {k: 0.0 for k in FIELDS}


def exchange(model, moves, unit):
    """One exchange of `unit` bytes per move (src, dst): NVLink inside a
    node, RDMA across; max(T_nvl, T_rdma) with the busiest-GPU rule.
    Returns (time, rdma bytes, nvlink bytes).  Moves of no bytes
    (migration_bytes_per_param 0) are no copy: they take no time, not even
    the latency (section "Per step", Migration)."""
    G = model.G
    if unit == 0:
        return 0.0, 0.0, 0.0
    rs, rr, ns, nr = [0] * G, [0] * G, [0] * G, [0] * G
    nb = rb = 0
    for (a, b) in moves:
        if model.node(a) == model.node(b):
            ns[a] += 1
            nr[b] += 1
            nb += unit
        else:
            rs[a] += 1
            rr[b] += 1
            rb += unit
    t = max(model.net_time(model.lat_nvl, model.B_nvl, ns, nr, unit),
            model.net_time(model.lat_rdma, model.B_rdma, rs, rr, unit))
    return t, rb, nb


def relayed(model, tr, m, l):
    """Section "The relayed dispatch": the copies (rs, rr, ns, nr) of one
    phase of (m, l) when a node's GPUs share its RDMA sends.  Per ordered
    pair of nodes S != N, lane j of S sends share_j of the C copies its
    node's lanes send to N: floor(C / g), plus one for the C mod g lanes
    with the most copies (ties: the lower lane); the extra copies go over
    NVLink to the lanes below their share at S, and back to their own rail
    GPU at N."""
    G, g = model.G, model.g
    nodes = G // g
    rc = tr.rc[m][l]
    rs, rr = [0] * G, [0] * G
    ns, nr = list(tr.ns[m][l]), list(tr.nr[m][l])
    for S in range(nodes):
        for N in range(nodes):
            if N == S:
                continue
            c = [rc[S * g + j][N] for j in range(g)]
            base, extra = divmod(sum(c), g)
            top = sorted(range(g), key=lambda j: (-c[j], j))[:extra]
            for j in range(g):
                share = base + (1 if j in top else 0)
                out, inn = max(0, c[j] - share), max(0, share - c[j])
                a, b = S * g + j, N * g + j
                rs[a] += share
                rr[b] += share
                ns[a] += out  # lane j of S hands its extra copies over
                nr[a] += inn  # and takes those of the lanes above their share
                ns[b] += inn  # its rail GPU in N passes them on
                nr[b] += out  # and gets its own back
    assert sum(rs) == sum(tr.rs[m][l]) and sum(rr) == sum(tr.rr[m][l])
    return rs, rr, ns, nr


def direct(tr, m, l):
    """The copies (rs, rr, ns, nr) of one phase of (m, l), as counted."""
    return tr.rs[m][l], tr.rr[m][l], tr.ns[m][l], tr.nr[m][l]


def a2a_times(model, counts):
    """(T_rdma, T_nvl, even, senders) of one phase of the copies
    counts = (rs, rr, ns, nr)."""
    rs, rr, ns, nr = counts
    t_r = model.net_time(model.lat_rdma, model.B_rdma, rs, rr, model.b_tok)
    t_n = model.net_time(model.lat_nvl, model.B_nvl, ns, nr, model.b_tok)
    zeros = [0] * model.G
    s_r = model.net_time(model.lat_rdma, model.B_rdma, rs, zeros, model.b_tok)
    s_n = model.net_time(model.lat_nvl, model.B_nvl, ns, zeros, model.b_tok)
    e_r = model.even_time(model.lat_rdma, model.B_rdma, sum(rs), model.b_tok)
    e_n = model.even_time(model.lat_nvl, model.B_nvl, sum(ns), model.b_tok)
    return t_r, t_n, max(e_r, e_n), max(s_r, s_n)


class StepResult:
    pass


def dispatch(model, tr, m, l, relay):
    """The copies of one phase of (m, l) and their times: the direct
    dispatch's, or with relay the relayed one's where its phase,
    max(T_rdma, T_nvl), is strictly shorter (a tie keeps the direct).
    Returns (counts, times, relayed?)."""
    counts = direct(tr, m, l)
    times = a2a_times(model, counts)
    if relay:
        rcounts = relayed(model, tr, m, l)
        rtimes = a2a_times(model, rcounts)
        if max(rtimes[0], rtimes[1]) < max(times[0], times[1]):
            return rcounts, rtimes, True
    return counts, times, False


def simulate(model, data, plan, tr, prev_homes, window, planner_s=0.0, relay=False):
    """A plan simulated like any plan (sections "Expert compute" to "Per
    step").  window: True for RLB_SIM_WINDOW_PREV_LAYER (relibra); relay:
    the relayed dispatch where it is faster (--relay)."""
    res = StepResult()
    bd = zero()
    by = {k: 0.0 for k in BYTES}
    G, L, E = model.G, model.L, model.E
    replicas = 0
    copies_made = 0
    res.relayed = 0  # (micro-batch, layer) cells that use the relay
    for m in range(data.M):
        fwd = dense_fwd(model, data, m)
        bd["dense_s"] += dense_charge(model, fwd)
        moe_at = [i for (i, (moe, _)) in enumerate(model.layers) if moe]
        c_prev = None
        for l in range(L):
            # expert compute: the slowest GPU's sum of gemm(quota)
            per_gpu = [0.0] * G
            for e in range(E):
                for (gpu, quota, _) in plan.inst[m][l][e]:
                    per_gpu[gpu] += model.gemm(quota)
            c_fwd = max(per_gpu)
            bd["expert_s"] += model.passes * c_fwd
            # all-to-all: the dispatch this (m, l) uses sets its times and
            # bytes
            counts, (t_r, t_n, even, senders), used = dispatch(model, tr, m, l, relay)
            res.relayed += used
            bd["a2a_s"] += model.phases * max(t_r, t_n)
            bd["a2a_rdma_s"] += model.phases * t_r
            bd["a2a_nvlink_s"] += model.phases * t_n
            bd["a2a_even_s"] += model.phases * even
            bd["a2a_senders_s"] += model.phases * senders
            by["a2a_rdma"] += model.phases * sum(counts[0]) * model.b_tok
            by["a2a_nvlink"] += model.phases * sum(counts[2]) * model.b_tok
            # replicas: weight copies and gradients (section "Replicas")
            wmoves = []
            gmoves = []
            for e in range(E):
                cell = plan.inst[m][l][e]
                home = cell[0][0]
                # the home instance's extra copies count as replicas too
                # ("Imbalance statistics", last paragraph)
                replicas += sum(c for (_, _, c) in cell) - 1
                # One weight copy per replica instance unless its GPU held
                # the expert in the previous micro-batch of the step; one
                # gradient home after the last micro-batch of a run that
                # holds it; neither for a home instance's extra copies.
                for (gpu, _, _) in cell[1:]:
                    held = m > 0 and any(x[0] == gpu for x in plan.inst[m - 1][l][e])
                    if not held:
                        wmoves.append((home, gpu))
                    keeps = m + 1 < data.M and \
                        any(x[0] == gpu for x in plan.inst[m + 1][l][e])
                    if not keeps:
                        gmoves.append((gpu, home))
            copies_made += len(wmoves)
            t_copy, rb, nb = exchange(model, wmoves, model.W)
            by["replica_rdma"] += rb
            by["replica_nvlink"] += nb
            # The overlap window (relibra only): C_fwd of the previous
            # MoE layer, the dense layers between them, and this layer's
            # dense forward; for layer 0 the dense layers before it instead.
            if window:
                start = moe_at[l - 1] + 1 if l else 0
                win = (c_prev if l else 0.0) + \
                    sum(fwd[k] for k in model.layers[start:moe_at[l]]) + \
                    fwd[model.layers[moe_at[l]]]
            else:
                win = 0.0
            bd["replication_s"] += max(0.0, t_copy - win)
            t_grad, rb, nb = exchange(model, gmoves, model.W_grad)
            by["grad_rdma"] += rb
            by["grad_nvlink"] += nb
            bd["grad_reduce_s"] += t_grad
            c_prev = c_fwd
    # migration (section "Per step")
    moves = []
    migrated = in_node = 0
    for l in range(L):
        for e in range(E):
            a, b = prev_homes[l][e], plan.homes[l][e]
            if a != b:
                moves.append((a, b))
                if model.node(a) != model.node(b):
                    migrated += 1
                else:
                    in_node += 1
    t_mig, rb, nb = exchange(model, moves, model.W_mig)
    bd["migration_s"] = t_mig
    by["migration_rdma"] = rb
    by["migration_nvlink"] = nb
    # Planning: planner wall time * (1 - planner_overlap), the time the plan
    # records (0 under --no-timing).
    bd["planning_s"] = planner_s * (1 - model.overlap)
    bd["total_s"] = bd["dense_s"] + bd["expert_s"] + bd["a2a_s"] + \
        bd["replication_s"] + bd["grad_reduce_s"] + bd["migration_s"] + \
        bd["planning_s"]
    res.bd = bd
    res.bytes = by
    res.replicas = replicas
    res.replica_copies = copies_made
    res.migrated = migrated
    res.in_node = in_node
    res.M = data.M
    res.tokens = data.tokens
    return res


def ideal_compute(model, data, m, l):
    """Section "Baselines": every expert's rows of (m, l) spread evenly
    over the GPUs, each at its own GEMM efficiency."""
    c = 0.0
    for e in range(model.E):
        c += model.gemm(sum(data.load[m][l][s][e] for s in range(model.G)))
    return c / model.G


def dense_and_ideal_compute(model, data, m, bd):
    """Add micro-batch m's dense part and perfectly balanced expert compute
    to bd, the parts every ideal shares."""
    bd["dense_s"] += dense_charge(model, dense_fwd(model, data, m))
    for l in range(model.L):
        bd["expert_s"] += model.passes * ideal_compute(model, data, m, l)


def ideal_breakdown(model, data, static_tr):
    """Section "Baselines": the uniform-traffic ideal."""
    bd = zero()
    for m in range(data.M):
        dense_and_ideal_compute(model, data, m, bd)
        for l in range(model.L):
            t_r = model.even_time(model.lat_rdma, model.B_rdma,
                                  sum(static_tr.rs[m][l]), model.b_tok)
            t_n = model.even_time(model.lat_nvl, model.B_nvl,
                                  sum(static_tr.ns[m][l]), model.b_tok)
            a = model.phases * max(t_r, t_n)
            bd["a2a_s"] += a
            bd["a2a_even_s"] += a
            bd["a2a_senders_s"] += a
            bd["a2a_rdma_s"] += model.phases * t_r
            bd["a2a_nvlink_s"] += model.phases * t_n
    bd["total_s"] = bd["dense_s"] + bd["expert_s"] + bd["a2a_s"]
    return bd


def same_traffic(model, data, pol_bd):
    """Same-traffic ideal: perfect compute and the same dense part, the
    policy's own all-to-all."""
    bd = zero()
    for m in range(data.M):
        dense_and_ideal_compute(model, data, m, bd)
    for k in ("a2a_s", "a2a_rdma_s", "a2a_nvlink_s", "a2a_even_s", "a2a_senders_s"):
        bd[k] = pol_bd[k]
    bd["total_s"] = bd["dense_s"] + bd["expert_s"] + bd["a2a_s"]
    return bd


# ---------------------------------------------------------------------------
# Imbalance statistics (section "Imbalance statistics")


def dist(values):
    """n, mean, p50, p90, p99, max; percentiles interpolate linearly
    between closest ranks, h = q (n - 1)."""
    v = sorted(values)
    n = len(v)
    out = {"n": n}
    if n == 0:
        return out
    out["mean"] = sum(v) / n

    def pct(q):
        hh = q * (n - 1)
        lo = math.floor(hh)
        hi = min(lo + 1, n - 1)
        return v[lo] + (hh - lo) * (v[hi] - v[lo])
    out["p50"] = pct(0.5)
    out["p90"] = pct(0.9)
    out["p99"] = pct(0.99)
    out["max"] = v[-1]
    return out


def imbalance(model, data, plan, ideal=False):
    G, g, L, E = model.G, model.g, model.L, model.E
    nodes = G // g
    gb, ga, nb, na, nf, rt = [], [], [], [], [], []
    for m in range(data.M):
        for l in range(L):
            rows = [sum(data.load[m][l][s][e] for s in range(G)) for e in range(E)]
            tot = sum(rows)
            if tot == 0:
                continue
            before = [0] * G
            for e in range(E):
                before[e // model.per_gpu] += rows[e]
            after = [0] * G
            floor_ = [0] * nodes
            for e in range(E):
                for (gpu, quota, _) in plan.inst[m][l][e]:
                    after[gpu] += quota
                floor_[model.node(plan.homes[l][e])] += rows[e]
            nbef = [sum(before[n * g:(n + 1) * g]) for n in range(nodes)]
            naft = [sum(after[n * g:(n + 1) * g]) for n in range(nodes)]
            gb.append(max(before) / (tot / G))
            nb.append(max(nbef) / (tot / nodes))
            if ideal:
                ga.append(1.0)
                na.append(1.0)
                nf.append(1.0)
            else:
                ga.append(max(after) / (tot / G))
                na.append(max(naft) / (tot / nodes))
                nf.append(max(floor_) / (tot / nodes))
    for m in range(data.M):
        toks = [data.rank_tokens(m, r) for r in range(G)]
        if sum(toks):
            rt.append(max(toks) / (sum(toks) / G))
    return {"gpu_before": gb, "gpu_after": ga, "node_before": nb,
            "node_after": na, "node_floor": nf, "rank_tokens": rt}


# ---------------------------------------------------------------------------
# Comparison


class Checker:
    def __init__(self, tol, verbose):
        self.tol = tol
        self.verbose = verbose
        self.bad = 0
        self.n = 0

    def cmp(self, name, ref, got):
        self.n += 1
        if got is None:
            print("MISSING %s: reference %r" % (name, ref))
            self.bad += 1
            return
        a, b = float(ref), float(got)
        ok = a == b or abs(a - b) <= self.tol * max(abs(a), abs(b))
        if not ok:
            self.bad += 1
            print("DIFF %s: reference %.17g, relibra %.17g (rel %.3g)" %
                  (name, a, b, abs(a - b) / max(abs(a), abs(b))))
        elif self.verbose:
            print("ok   %s: %.17g" % (name, a))

    def cmp_bd(self, name, ref, got):
        for k in FIELDS:
            self.cmp("%s.%s" % (name, k), ref[k], got.get(k))

    def cmp_dist(self, name, values, got):
        ref = dist(values)
        for k in ("n", "mean", "p50", "p90", "p99", "max"):
            if k in ref:
                self.cmp("%s.%s" % (name, k), ref[k], got.get(k))


def mean_bd(bds):
    return {k: sum(b[k] for b in bds) / len(bds) for k in FIELDS}


def plan_steps(model, pdump):
    hdr = pdump["header"]
    split = hdr["split"]
    out = []
    for st in pdump["steps"]:
        inst = [[[[tuple(x) for x in cell] for cell in lay] for lay in mb]
                for mb in st["instances"]]
        out.append((st, StepPlan(st["homes"], inst, split)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--relibra", required=True)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--summary", required=True)
    ap.add_argument("--tol", type=float, default=1e-9)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    sets = []
    for s in args.set:
        sets += ["--set", s]
    rb = args.relibra
    cfg = read_config(rb, args.config, sets)
    model = Model(cfg)
    with open(args.summary) as fp:
        summ = json.load(fp)
    pdump = run_json([rb, "inspect", "--json", "--dump", args.plan])
    hdr = pdump["header"]
    policy = hdr["policy"]
    pack = hdr["pack"]
    trace = group_trace(run_json([rb, "inspect", "--json", "--dump", args.trace]))
    psteps = plan_steps(model, pdump)
    first, last = psteps[0][0]["step"], psteps[-1][0]["step"]
    # The configured schedule (the baselines' one; section "Baselines", last
    # paragraph): the packing rule's, or, for a plan of a schedule file,
    # the file it carries.
    cfg_sched = None
    if pack in ("in-order", "ffd", "dynamic", "data-control"):
        # A data-control plan's baselines keep the packing its summary
        # gives as config.baseline_pack (relibra(1), RESULT FILES).
        rule = pack if pack != "data-control" else \
            summ["config"]["baseline_pack"]
        cfg_sched = run_json([rb, "inspect", "--schedule", "-c", args.config] +
                             sets + ["--pack", rule, "--steps",
                                     "%d:%d" % (first, last), args.trace])
        cfg_sched = {s["step"]: s["micro_batches"] for s in cfg_sched["steps"]}

    ck = Checker(args.tol, args.verbose)
    G = model.G
    prev_homes = [[e // model.per_gpu for e in range(model.E)] for _ in range(model.L)]
    pol_bds, ideal_bds, same_bds, stat_bds, stat_same = [], [], [], [], []
    tot = {"tokens": 0, "replicas": 0, "copies": 0, "migrated": 0,
           "in_node": 0, "mbs": 0, "pol_time": 0.0}
    by_sum = {k: 0.0 for k in BYTES}
    st_by_sum = {k: 0.0 for k in BYTES}
    imb = None
    st_imb = None
    window = policy == "relibra"
    # The policy's dispatch is relayed where that is faster under --relay
    # (section "The relayed dispatch"); the static baseline and the ideal
    # keep the direct one.
    relay = bool(summ["options"].get("relay", False))
    relayed_cells = 0
    for (st, plan) in psteps:
        step = st["step"]
        seqs = trace[step]
        own = st.get("schedule")
        if own is not None:
            own = own["micro_batches"]
        base_sched = cfg_sched[step] if cfg_sched is not None else own
        pol_sched = own if own is not None else base_sched
        base = StepData(model, seqs, base_sched)
        data = StepData(model, seqs, pol_sched) if pol_sched is not base_sched else base

        static = static_plan(model, base)
        static_tr = Traffic(model, base, static)
        ideal = ideal_breakdown(model, base, static_tr)
        sres = simulate(model, base, static, static_tr,
                        [[e // model.per_gpu for e in range(model.E)]
                         for _ in range(model.L)], False)
        if policy == "ideal":
            # The ideal policy reports the uniform-traffic ideal; its bytes
            # are the static layout's copies (section "Baselines").
            res = simulate(model, base, plan, static_tr, prev_homes, False)
            pol_bd = dict(ideal)
            same = dict(ideal)
            res.bytes = {k: 0.0 for k in BYTES}
            res.bytes["a2a_rdma"] = sres.bytes["a2a_rdma"]
            res.bytes["a2a_nvlink"] = sres.bytes["a2a_nvlink"]
        else:
            tr = Traffic(model, data, plan)
            if tr.unplanned:
                print("reference: %d rows beyond the plan" % tr.unplanned)
                sys.exit(2)
            res = simulate(model, data, plan, tr, prev_homes, window,
                           st["planner_ns"] * 1e-9, relay)
            relayed_cells += res.relayed
            pol_bd = res.bd
            same = same_traffic(model, data, pol_bd)
        prev_homes = plan.homes
        pol_bds.append(pol_bd)
        ideal_bds.append(ideal)
        same_bds.append(same)
        stat_bds.append(sres.bd)
        stat_same.append(same_traffic(model, base, sres.bd))
        im = imbalance(model, data, plan, policy == "ideal")
        sim_ = imbalance(model, base, static)
        if imb is None:
            imb, st_imb = im, sim_
        else:
            for k in imb:
                imb[k] += im[k]
                st_imb[k] += sim_[k]
        for k in BYTES:
            by_sum[k] += res.bytes[k]
            st_by_sum[k] += sres.bytes[k]
        tot["tokens"] += data.tokens
        tot["replicas"] += res.replicas
        tot["copies"] += res.replica_copies
        tot["migrated"] += res.migrated
        tot["in_node"] += res.in_node
        tot["mbs"] += data.M

        # per-step figures
        ps = [x for x in summ["per_step"] if x["step"] == step]
        if not ps:
            ck.cmp("per_step[%d]" % step, 0, None)
            continue
        ps = ps[0]
        name = "per_step[%d]" % step
        ck.cmp(name + ".micro_batches", data.M, ps["micro_batches"])
        ck.cmp(name + ".tokens", data.tokens, ps["tokens"])
        ck.cmp(name + ".step_time_s", pol_bd["total_s"], ps["step_time_s"])
        ck.cmp(name + ".tokens_per_s", data.tokens / pol_bd["total_s"], ps["tokens_per_s"])
        ck.cmp(name + ".fraction_of_ideal", ideal["total_s"] / pol_bd["total_s"],
               ps["fraction_of_ideal"])
        ck.cmp(name + ".speedup_over_static", sres.bd["total_s"] / pol_bd["total_s"],
               ps["speedup_over_static"])
        ck.cmp_bd(name + ".breakdown", pol_bd, ps["breakdown"])
        ck.cmp(name + ".replicas", res.replicas, ps["replicas"])
        ck.cmp(name + ".migrated_experts", res.migrated, ps["migrated_experts"])
        ck.cmp(name + ".moved_in_node", res.in_node, ps["moved_in_node"])

    n = len(psteps)
    pol_sum = sum(b["total_s"] for b in pol_bds)
    ideal_sum = sum(b["total_s"] for b in ideal_bds)
    same_sum = sum(b["total_s"] for b in same_bds)
    stat_sum = sum(b["total_s"] for b in stat_bds)
    ck.cmp("steps", n, summ["steps"])
    ck.cmp("tokens", tot["tokens"], summ["tokens"])
    ck.cmp("step_time_s", pol_sum / n, summ["step_time_s"])
    ck.cmp("tokens_per_s", tot["tokens"] / pol_sum, summ["tokens_per_s"])
    ck.cmp("fraction_of_ideal", ideal_sum / pol_sum, summ["fraction_of_ideal"])
    ck.cmp("fraction_of_same_traffic_ideal", same_sum / pol_sum,
           summ["fraction_of_same_traffic_ideal"])
    ck.cmp("speedup_over_static", stat_sum / pol_sum, summ["speedup_over_static"])
    ck.cmp_bd("breakdown", mean_bd(pol_bds), summ["breakdown"])
    ck.cmp_bd("ideal", mean_bd(ideal_bds), summ["ideal"])
    ck.cmp_bd("same_traffic_ideal", mean_bd(same_bds), summ["same_traffic_ideal"])
    for k, v in imb.items():
        ck.cmp_dist("imbalance." + k, v, summ["imbalance"][k])
    slots = hdr["options"]["replica_slots"] * G * model.L * tot["mbs"]
    ck.cmp("replicas", tot["replicas"], summ["replicas"])
    ck.cmp("replica_slots", slots, summ["replica_slots"])
    ck.cmp("slot_use", tot["replicas"] / slots if slots else 0.0, summ["slot_use"])
    ck.cmp("replica_copies", tot["copies"], summ["replica_copies"])
    ck.cmp("migrated_experts", tot["migrated"], summ["migrated_experts"])
    ck.cmp("moved_in_node", tot["in_node"], summ["moved_in_node"])
    for k in BYTES:
        ck.cmp("bytes_per_step." + k, by_sum[k] / n, summ["bytes_per_step"][k])

    # baselines: the static layout (on the configured schedule) and the ideal
    bs = summ["baselines"]["static"]
    ck.cmp("baselines.static.step_time_s", stat_sum / n, bs["step_time_s"])
    base_tokens = tot["tokens"]
    ck.cmp("baselines.static.tokens_per_s", base_tokens / stat_sum, bs["tokens_per_s"])
    ck.cmp("baselines.static.fraction_of_ideal", ideal_sum / stat_sum,
           bs["fraction_of_ideal"])
    ck.cmp("baselines.static.fraction_of_same_traffic_ideal",
           sum(b["total_s"] for b in stat_same) / stat_sum,
           bs["fraction_of_same_traffic_ideal"])
    ck.cmp("baselines.static.speedup_over_static", 1.0, bs["speedup_over_static"])
    ck.cmp_bd("baselines.static.breakdown", mean_bd(stat_bds), bs["breakdown"])
    ck.cmp_bd("baselines.static.ideal", mean_bd(ideal_bds), bs["ideal"])
    ck.cmp_bd("baselines.static.same_traffic_ideal", mean_bd(stat_same),
              bs["same_traffic_ideal"])
    for k in ("replicas", "replica_slots", "slot_use", "replica_copies",
              "migrated_experts", "moved_in_node"):
        ck.cmp("baselines.static." + k, 0, bs[k])
    for k, v in st_imb.items():
        ck.cmp_dist("baselines.static.imbalance." + k, v, bs["imbalance"][k])
    for k in BYTES:
        ck.cmp("baselines.static.bytes_per_step." + k, st_by_sum[k] / n,
               bs["bytes_per_step"][k])
    if "timing" in summ:
        # wall-clock fields (absent under --no-timing): the planner's time
        # (the ideal has no planning: 0, whatever its plan file records)
        ns = 0 if policy == "ideal" else \
            sum(st["planner_ns"] for (st, _) in psteps)
        ck.cmp("timing.planner_s", ns * 1e-9, summ["timing"]["planner_s"])
        ck.cmp("timing.planner_s_per_step", ns * 1e-9 / n,
               summ["timing"]["planner_s_per_step"])
    bi = summ["baselines"]["ideal"]
    ck.cmp("baselines.ideal.step_time_s", ideal_sum / n, bi["step_time_s"])
    ck.cmp("baselines.ideal.tokens_per_s", base_tokens / ideal_sum, bi["tokens_per_s"])

    if ck.bad:
        print("%d of %d figures differ" % (ck.bad, ck.n))
        return 1
    if relay:
        print("%d figures agree (%s, %d steps, relayed %d of %d cells)" %
              (ck.n, policy, n, relayed_cells, tot["mbs"] * model.L))
    else:
        print("%d figures agree (%s, %d steps)" % (ck.n, policy, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
