#!/usr/bin/env python3
"""plan_online.py - the trainer side of examples/plan_online.c, in Python.

usage: plan_online.py LIBRELIBRA_SO CONFIG [STEPS]

Loads librelibra.so with ctypes (no module to build), makes the same
stand-in routing as plan_online.c, and plans each step in process: packs
the step's sequences into micro-batches (rlb_schedule_build), counts the
loads (rlb_loads_add_seq), plans (rlb_balancer_plan_step), and prints what
the plan does to micro-batch 0, layer 0 and where rank 0's rows go
(rlb_step_plan_split, rlb_step_plan_route).  Its output is plan_online.c's
without the last line (tests/cli/api.sh checks it): the same plans.

The classes below mirror the C structures of relibra's headers
(relibra(3)); they must follow them field by field.
"""
import ctypes as C
import sys

u32 = C.c_uint32
SEQS_PER_STEP = 32
HOT_EXPERTS = 3
MASK64 = (1 << 64) - 1


class Err(C.Structure):  # struct rlb_err
    _fields_ = [("code", C.c_int), ("msg", C.c_char * 1024)]


class Seq(C.Structure):  # struct rlb_seq
    _fields_ = [("step", u32), ("group", u32), ("sample", u32), ("tokens", u32),
                ("ids", C.POINTER(C.c_uint16)), ("gates", C.POINTER(C.c_float))]


class Chunk(C.Structure):  # struct rlb_chunk
    _fields_ = [("seq", u32), ("start", u32), ("tokens", u32), ("mb", u32),
                ("rank", u32)]


class Schedule(C.Structure):  # struct rlb_schedule
    _fields_ = [("step", u32), ("pack", C.c_int), ("ranks", u32),
                ("mb_tokens", u32), ("micro_batches", u32),
                ("nseqs", C.c_size_t), ("nchunks", C.c_size_t),
                ("chunks", C.POINTER(Chunk))]


class Loads(C.Structure):  # struct rlb_loads
    _fields_ = [("micro_batches", u32), ("layers", u32), ("ranks", u32),
                ("experts", u32), ("count", C.POINTER(u32))]


class BalanceOpts(C.Structure):  # struct rlb_balance_opts
    _fields_ = [("policy", C.c_int), ("replica_slots", u32),
                ("min_tokens_per_replica", u32), ("eplb_window", u32),
                ("reorder", C.c_int), ("replicate", C.c_int),
                ("colocate", C.c_int), ("migration_weight", C.c_double),
                ("data_control", C.c_int)]


class Instance(C.Structure):  # struct rlb_plan_instance
    _fields_ = [("expert", u32), ("gpu", u32), ("quota", u32)]


class StepPlan(C.Structure):  # struct rlb_step_plan
    _fields_ = [("step", u32), ("micro_batches", u32), ("layers", u32),
                ("experts", u32), ("ranks", u32), ("gpus_per_node", u32),
                ("replica_slots", u32), ("split", C.c_int),
                ("home", C.POINTER(u32)), ("inst_first", C.POINTER(C.c_size_t)),
                ("inst", C.POINTER(Instance)), ("ninst", C.c_size_t),
                ("inst_cap", C.c_size_t), ("copies", C.POINTER(u32)),
                ("migrated_experts", u32), ("planner_ns", C.c_uint64),
                ("cur_cell", C.c_size_t), ("sched", C.c_void_p)]


class Relibra:
    """The few calls of librelibra that a trainer needs, checked."""

    def __init__(self, path):
        lib = C.CDLL(path)
        lib.rlb_config_new.restype = C.c_void_p
        lib.rlb_config_new.argtypes = [C.c_char_p, C.c_void_p, C.c_size_t,
                                       C.POINTER(Err)]
        lib.rlb_config_free.argtypes = [C.c_void_p]
        lib.rlb_config_ep_size.argtypes = [C.c_void_p]
        lib.rlb_balancer_free.argtypes = [C.c_void_p]
        lib.rlb_balancer_plan_step.argtypes = [C.c_void_p, C.POINTER(Schedule),
                                               C.POINTER(Loads), C.POINTER(StepPlan),
                                               C.POINTER(Err)]
        self.lib = lib
        self.err = Err()

    def check(self, ret):
        if ret < 0:
            sys.exit("plan_online.py: " + self.err.msg.decode(errors="replace"))
        return ret

    def config(self, path):
        cfg = self.lib.rlb_config_new(path.encode(), None, 0, C.byref(self.err))
        if not cfg:
            self.check(-1)
        return cfg

    def get(self, cfg, key):
        buf = C.create_string_buffer(256)
        self.check(self.lib.rlb_config_get(C.c_void_p(cfg), key.encode(), buf,
                                           C.c_size_t(len(buf)), C.byref(self.err)))
        return buf.value.decode()


def next_random(state):
    """splitmix64, as plan_online.c."""
    state[0] = (state[0] + 0x9E3779B97F4A7C15) & MASK64
    z = state[0]
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def routing_make(step, layers, experts, topk, rng):
    """The step's sequences: lengths and [layer][token][k] ids, as plan_online.c."""
    lens, ids = [], []
    for _ in range(SEQS_PER_STEP):
        n = 32 + next_random(rng) % 512
        seq = []
        for layer in range(layers):
            hot = step * 5 + layer * 3
            for _ in range(n):
                picks = []
                while len(picks) < topk:
                    x = next_random(rng)
                    r = (x >> 1) & 0xFFFFFFFF
                    e = (hot + r % HOT_EXPERTS * 7) % experts if x & 1 else r % experts
                    if e not in picks:
                        picks.append(e)
                seq.extend(picks)
        lens.append(n)
        ids.append((C.c_uint16 * len(seq))(*seq))
    return lens, ids


def cell(plan, mb, layer, expert):
    c = (mb * plan.layers + layer) * plan.experts + expert
    return plan.inst_first[c], plan.inst_first[c + 1]


def gpu_max_over_mean(plan, loads, before):
    rows = [0.0] * plan.ranks
    per_gpu = plan.experts // plan.ranks
    for e in range(plan.experts):
        lo, hi = cell(plan, 0, 0, e)
        if before:
            for s in range(loads.ranks):
                rows[e // per_gpu] += loads.count[s * loads.experts + e]
            continue
        for k in range(lo, hi):
            rows[plan.inst[k].gpu] += plan.inst[k].quota
    total = 0.0
    for r in rows:
        total += r
    return max(rows) * plan.ranks / total if total > 0 else 1.0


def show_cell(rl, plan, loads):
    print("  mb 0, layer 0: GPU max/mean %.3f before, %.3f after"
          % (gpu_max_over_mean(plan, loads, True), gpu_max_over_mean(plan, loads, False)))
    for e in range(plan.experts):
        lo, hi = cell(plan, 0, 0, e)
        n = hi - lo
        if n < 2:
            continue
        split = (u32 * (loads.ranks * n))()
        rl.lib.rlb_step_plan_split(C.byref(plan), C.byref(loads), u32(0), u32(0),
                                   u32(e), split)
        line = "  expert %u: home GPU %u;" % (e, plan.home[e])
        line += ",".join(" GPU %u computes %u rows" % (plan.inst[k].gpu, plan.inst[k].quota)
                         for k in range(lo, hi))
        print(line)
        for s in range(loads.ranks):
            print("    rank %u sends %s rows"
                  % (s, " ".join(str(split[s * n + k]) for k in range(n))))
        return
    print("  no replica in this cell")


def show_route(rl, plan, loads, sched, lens, ids, topk):
    rank_ids = []
    for c in range(sched.nchunks):
        ch = sched.chunks[c]
        if ch.mb == 0 and ch.rank == 0:
            rank_ids.extend(ids[ch.seq][ch.start * topk:(ch.start + ch.tokens) * topk])
    ntok = len(rank_ids) // topk
    arr = (C.c_uint16 * max(len(rank_ids), 1))(*rank_ids)
    inst = (C.c_size_t * max(len(rank_ids), 1))()
    rl.check(rl.lib.rlb_step_plan_route(C.byref(plan), C.byref(loads), u32(0), u32(0),
                                        u32(0), arr, C.c_size_t(ntok), u32(topk), inst,
                                        C.byref(rl.err)))
    per_gpu = [0] * plan.ranks
    for t in range(len(rank_ids)):
        per_gpu[plan.inst[inst[t]].gpu] += 1
    print("  rank 0 sends its %u rows of mb 0, layer 0 to GPUs %s"
          % (len(rank_ids), ", ".join("%u: %u" % (g, n) for g, n in enumerate(per_gpu))))


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: plan_online.py LIBRELIBRA_SO CONFIG [STEPS]")
    rl = Relibra(sys.argv[1])
    lib = rl.lib
    steps = int(sys.argv[3]) if len(sys.argv) == 4 else 3
    cfg = rl.config(sys.argv[2])
    ranks = lib.rlb_config_ep_size(C.c_void_p(cfg))
    budget = int(rl.get(cfg, "parallel.micro_batch_tokens"))
    experts = int(rl.get(cfg, "model.experts"))
    topk = int(rl.get(cfg, "model.topk"))
    layers = int(rl.get(cfg, "model.moe_layers"))
    pack = C.c_int()
    rl.check(lib.rlb_pack_from_name(rl.get(cfg, "parallel.pack").encode(), C.byref(pack),
                                    C.byref(rl.err)))
    opts = BalanceOpts()
    lib.rlb_balance_opts_from_config(C.byref(opts), C.c_void_p(cfg))
    balancer = C.c_void_p()
    rl.check(lib.rlb_balancer_new(C.byref(balancer), C.c_void_p(cfg), C.byref(opts),
                                  C.byref(rl.err)))
    rng = [1]
    for step in range(steps):
        lens, ids = routing_make(step, layers, experts, topk, rng)
        sched, loads, plan = Schedule(), Loads(), StepPlan()
        c_lens = (u32 * len(lens))(*lens)
        rl.check(lib.rlb_schedule_build(C.byref(sched), u32(step), c_lens,
                                        C.c_size_t(len(lens)), u32(ranks), u32(budget),
                                        pack, C.byref(rl.err)))
        rl.check(lib.rlb_loads_init(C.byref(loads), u32(sched.micro_batches), u32(layers),
                                    u32(sched.ranks), u32(experts), C.byref(rl.err)))
        for i, n in enumerate(lens):
            seq = Seq(step, i // 4, i % 4, n, ids[i], None)
            lib.rlb_loads_add_seq(C.byref(loads), C.byref(sched), u32(i), C.byref(seq),
                                  u32(topk))
        rl.check(lib.rlb_balancer_plan_step(balancer, C.byref(sched), C.byref(loads),
                                            C.byref(plan), C.byref(rl.err)))
        print("step %u: %u micro-batches, %u experts changed node"
              % (step, plan.micro_batches, plan.migrated_experts))
        show_cell(rl, plan, loads)
        show_route(rl, plan, loads, sched, lens, ids, topk)
        lib.rlb_step_plan_release(C.byref(plan))
        lib.rlb_loads_release(C.byref(loads))
        lib.rlb_schedule_release(C.byref(sched))
    lib.rlb_balancer_free(balancer)
    lib.rlb_config_free(C.c_void_p(cfg))


if __name__ == "__main__":
    main()
