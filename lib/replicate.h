/*
 * replicate.h - the intra-node replication planner of the `replicate` and
 * `relibra` policies: for one (micro-batch, layer), copy hot experts into
 * the spare slots of other GPUs of their home node and split every
 * (source rank, expert) load between the expert's instances by quotas.
 * Pure and deterministic; one preallocated planner serves every call.
 */
#ifndef RLB_REPLICATE_H
#define RLB_REPLICATE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RLB_REPLICATE_MAX_GPUS 65536u
#define RLB_REPLICATE_MAX_EXPERTS (1u << 20)
#define RLB_REPLICATE_MAX_SLOTS 65536u

struct rlb_replicate_params {
	uint32_t num_gpus;		/* EP group size; GPUs are the source ranks */
	uint32_t gpus_per_node;		/* node n holds ranks [n*g, (n+1)*g) */
	uint32_t num_experts;		/* E, a multiple of num_gpus */
	uint32_t replica_slots;		/* R: spare expert slots per GPU */
	uint32_t min_tokens_per_replica; /* a replica carries at least this */
	uint32_t instance_rows;		/* o: a replica's fixed GEMM cost, in rows
					   (the balancer passes
					   gemm_eff_half_rows rounded down) */
};

/* One instance of an expert: its home copy or a replica. */
struct rlb_replicate_instance {
	uint32_t expert;
	uint32_t gpu;
	uint64_t quota_tokens;		/* token rows this instance computes */
};

/*
 * The plan of one (micro-batch, layer).  All arrays belong to the planner
 * and are overwritten by the next run.
 *
 * Instances are grouped by expert: expert e's instances are
 * instance[expert_first[e] .. expert_first[e + 1]), the home copy first
 * (possibly with quota 0), then its replicas by ascending GPU.  rows is
 * source-major: rows[s * num_instances + i] is the number of token rows
 * that source rank s sends to instance i (one contiguous row per source,
 * what its dispatcher reads).  For every expert e and source s the
 * rows over e's instances sum to load[s][e]; for every instance i the rows
 * over all sources sum to quota_tokens.  A source sends its rows of expert
 * e in its own token order: the first rows go to e's first instance that
 * receives from it, the next to the next, and so on.
 */
struct rlb_replicate_plan {
	uint32_t num_gpus;
	uint32_t gpus_per_node;
	uint32_t num_nodes;
	uint32_t num_experts;
	uint32_t num_instances;		/* num_experts + num_replicas */
	uint32_t num_replicas;
	uint32_t *expert_first;		/* [E + 1] */
	struct rlb_replicate_instance *instance; /* [num_instances] */
	uint32_t *rows;			/* [num_gpus][num_instances] */
	uint64_t *gpu_home_tokens;	/* [gpus] load under the home layout */
	uint64_t *gpu_tokens;		/* [gpus] load after replication (rows,
					   without o per replica) */
	uint32_t *gpu_replicas;		/* [gpus] spare slots used (<= R) */
	uint64_t *node_threshold_tokens; /* [nodes] threshold T reached */
	uint64_t *node_floor_tokens;	/* [nodes] ceil(node load / g) */
};

/*
 * The planner: parameters, the last plan, and workspace sized once by
 * rlb_replicate_planner_init so that a run allocates nothing.  Fields
 * below `plan` are private.  One planner per thread; planners share
 * nothing.
 */
struct rlb_replicate_planner {
	struct rlb_replicate_params p;
	struct rlb_replicate_plan plan;

	uint32_t *home;			/* [E] home GPU of each expert */
	uint64_t *expert_tokens;	/* [E] load over all sources */
	uint32_t *by_gpu;		/* [E] by home GPU (donors: load desc) */
	uint32_t *gpu_first;		/* [gpus + 1] slices of by_gpu */
	uint32_t *donors;		/* [gpus] GPUs by home load desc */
	uint32_t *sort_tmp;		/* [max(E, gpus)] */
	int64_t *cap;			/* [gpus] room below T (trial) */
	uint32_t *free_slots;		/* [gpus] (trial) */
	uint32_t *recv;			/* [gpus] GPUs with room (trial) */
	uint32_t nrecv;
	uint32_t *mark;			/* [gpus] stamp: hosts current expert */
	uint32_t stamp;
	uint32_t *rep_expert;		/* [gpus * R] replicas as created */
	uint32_t *rep_gpu;
	uint64_t *rep_quota;
	uint32_t *rep_order;		/* [gpus * R] by (expert, gpu) */
	uint32_t *rep_count;		/* [E] */
	uint32_t *inst_gq;		/* [2 * gpus] split: (gpu, quota) pairs */
};

/*
 * Check p and size the planner's workspace.  Requirements: num_gpus >= 1,
 * gpus_per_node >= 1 dividing num_gpus, num_experts a positive multiple of
 * num_gpus, and the limits above.  Errors: RLB_EINVAL, RLB_ENOMEM (pl is
 * then released).  Release with rlb_replicate_planner_release.
 */
int rlb_replicate_planner_init(struct rlb_replicate_planner *pl,
			       const struct rlb_replicate_params *p,
			       struct rlb_err *err);

/* Free the planner's arrays.  Safe on a zeroed or released planner. */
void rlb_replicate_planner_release(struct rlb_replicate_planner *pl);

/*
 * Plan one (micro-batch, layer) into pl->plan.
 *
 * home_gpu[E] gives each expert's home GPU; NULL means the static layout,
 * expert e on GPU e / (E / num_gpus).  load[num_gpus][E] is the token rows
 * that each source rank routes to each expert (the schedule's counts for
 * this micro-batch and layer).
 *
 * Rule, for every node independently (g = gpus_per_node, R = replica_slots,
 * m = min_tokens_per_replica; L(e) the expert's load over all sources; B(x)
 * the sum of L over GPU x's home experts):
 *  1. Threshold.  lo = ceil(sum of the node's B / g) (the node floor),
 *     hi = max B.  When R = 0, g = 1 or lo >= hi, T = hi and nothing is
 *     replicated.  Else T is the lowest value in [lo, hi] for which the
 *     greedy below succeeds (hi always does), searched for as: lo; then
 *     lo + d, lo + 3d, lo + 7d, ... with d = max(1, (hi - lo) / 64) (the
 *     quotient rounded down) until one succeeds (or hi is reached); then
 *     bisection between the last failure f and that success s: the
 *     midpoint (f + s) / 2, rounded down, replaces f if it fails, s if it
 *     succeeds, until s = f + 1; T = s.  (The greedy's success is
 *     monotone in T in practice but not provably, so "lowest" means
 *     lowest found, and the roundings can change T.)
 *  2. Greedy for a given T.  Donors are the GPUs with B > T, taken by B
 *     descending (lower GPU first on ties); each must shed B - T.  Other
 *     GPUs of the node have room T - B and R free slots.  A donor's home
 *     experts are taken by L descending (lower expert first on ties); for
 *     each, while the donor still has excess and the expert has load left
 *     at home, the amount wanted is min(excess, load left); when that is
 *     below m it is raised to m if the load left allows (the donor then
 *     ends below T), else the next expert is taken.  A replica takes o
 *     (instance_rows) of its GPU's room beyond its quota: a GEMM of q rows
 *     costs what q + o rows would at full efficiency.  The receiving GPU
 *     is, among GPUs with a free slot, room > o and no instance of the
 *     expert yet: the one with the smallest room that still fits the whole
 *     amount plus o (room >= amount + o: best fit), else the one with the
 *     largest room (the coldest); lower GPU first on ties.  The
 *     replica's quota is min(amount, room - o); when that is below m the
 *     next expert is taken.  Where no GPU qualifies, T fails: the GPUs
 *     that took the expert's earlier replicas were filled (only the
 *     coldest leaves load to place), and rooms and slots only shrink, so
 *     no later expert or donor finds a GPU either.  T succeeds when every
 *     donor has shed its excess.
 *  3. The home copy keeps L(e) minus its replicas' quotas.  Replicas never
 *     leave the home node, a GPU never holds two instances of an expert,
 *     no GPU uses more than R spare slots, every replica's quota is >= m,
 *     and every GPU of the node ends at or below T, counting o per replica.
 *  4. Split, per expert, locality-first: first each instance takes the
 *     rows of the source on its own GPU (up to its quota); then the
 *     sources of the home node by ascending rank, then all other sources
 *     by ascending rank, fill the instances in instance order (home, then
 *     replicas by GPU), each instance up to its quota.  All quantities are
 *     integers, so every row is assigned exactly once.
 *
 * Cost: O(num_gpus * E) to read the loads and write the rows, at most
 * O(E log E) to order the donors' experts, and per node
 * O((E/nodes + g * g * R) * log(hi - lo)) for the search; no allocation.
 * Errors: RLB_EINVAL (home_gpu[e] out of range), RLB_ERANGE (an expert
 * with 2^32 token rows or more); pl->plan is then empty.
 */
int rlb_replicate_planner_run(struct rlb_replicate_planner *pl,
			      const uint32_t *home_gpu, const uint32_t *load,
			      struct rlb_err *err);

/*
 * Step 4 of the rule above for one expert, on its own: split the expert's
 * per-source loads over its `count` instances locality-first.  The plan
 * module (rlb_step_plan_split) uses it too, so the rule lives in one place.
 *
 * Instance i has GPU gpu[i * stride] and quota quota[i * stride] (stride
 * in uint32_t elements, so an array of structs of uint32_t fields can be
 * passed as it is), instances in instance order with the home copy first
 * (its node is the home node).  load[s * load_stride] is the rows source
 * rank s routes to the expert, for s < num_gpus.  rows[s * rows_stride +
 * i] receives the rows that source s sends to instance i; every such
 * entry is written.  An instance on a GPU >= num_gpus takes no own-GPU
 * rows; gpus_per_node 0 places nothing.  Returns the rows that found no
 * quota left (0 when the quotas sum to at least the load).
 * O(num_gpus * count); allocates nothing.
 */
uint64_t rlb_replicate_split(uint32_t num_gpus, uint32_t gpus_per_node,
			     const uint32_t *gpu, const uint32_t *quota,
			     size_t stride, uint32_t count,
			     const uint32_t *load, size_t load_stride,
			     uint32_t *rows, size_t rows_stride);

/* Rows that source rank `source` sends to instance `inst`. */
static inline uint32_t rlb_replicate_rows(const struct rlb_replicate_plan *pl,
					  uint32_t inst, uint32_t source)
{
	return pl->rows[(size_t)source * pl->num_instances + inst];
}

/* Expert e's instances (home first); *count receives their number. */
static inline const struct rlb_replicate_instance *
rlb_replicate_instances(const struct rlb_replicate_plan *pl, uint32_t e,
			uint32_t *count)
{
	*count = pl->expert_first[e + 1] - pl->expert_first[e];
	return pl->instance + pl->expert_first[e];
}

#ifdef __cplusplus
}
#endif

#endif
