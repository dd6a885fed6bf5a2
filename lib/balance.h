/*
 * balance.h - the policies of `relibra plan` behind one interface: a
 * balancer keeps what a policy carries from step to step (the previous
 * placement, EPLB's load history) and turns each step's schedule and
 * loads into a struct rlb_step_plan.
 */
#ifndef RLB_BALANCE_H
#define RLB_BALANCE_H

#include <stdint.h>

#include "config.h"
#include "err.h"
#include "plan.h"
#include "schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The policies (DESIGN.md "Policies"; G EP ranks, g GPUs per node, E
 * experts, R = replica_slots):
 *   static, ideal: expert e homed on GPU e / (E/G); every (micro-batch,
 *     layer, expert) one instance on its home holding the whole load; split
 *     LOCALITY; plan replica_slots 0.
 *   eplb, eplb-oracle: rlb_eplb_rebalance with P = E + G*R slots, groups =
 *     model.expert_groups (0: 1), nodes = G / g, G GPUs, fed per layer the
 *     expert loads summed over micro-batches and sources: eplb-oracle this
 *     step's, eplb the sum of the previous eplb_window planned steps' (the
 *     first step gets the static layout and no replicas).  The layout holds
 *     for the whole step: each cell lists the expert's replicas, the home
 *     (GPU of the replica with phyrank 0) first, then the other GPUs
 *     ascending.  EPLB's last packing step can put two copies of one
 *     expert on one GPU (e.g. loads [34, 95, 30, 2], 8 slots, 2 GPUs);
 *     those become one instance, so the EVEN split gives that GPU one
 *     share, not two.  Split EVEN; quotas are the sums of the even split.
 *   replicate: static homes; per (micro-batch, layer) the intra-node
 *     replication planner (lib/replicate.h) with min_tokens_per_replica
 *     and R; split LOCALITY.
 *   relibra: per layer the cross-node reordering of lib/reorder.h (row and
 *     migration times from rlb_reorder_costs, the migration time times
 *     migration_weight; the previous step's homes as the previous
 *     placement), then the replication planner per micro-batch on those
 *     homes.  reorder 0 keeps the static homes; replicate 0 plans no
 *     replicas (plan replica_slots 0).  replicate and relibra make a
 *     replica only where it takes at least max(min_tokens_per_replica,
 *     the rows whose compute pays for its gradient's trip home over
 *     NVLink, and for replicate its weight copy too) rows.  colocate adds
 *     the tokens term of lib/reorder.h with the tokens given by
 *     rlb_balancer_set_cooc (each node a sampled token reaches worth
 *     RLB_COOC_STRIDE token copies in each all-to-all phase over the EP
 *     group's RDMA links).  When replication
 *     follows, in-node moves cost RLB_IN_NODE_MOVE_FACTOR times their
 *     NVLink time (replicas even out a node's GPUs for free).
 * Every balancer starts from the static layout: the first step's
 * migrated_experts counts the homes whose node differs from it, later
 * steps' those whose node differs from the previous planned step's.
 */
/*
 * Weight of an in-node move when replication follows, measured on the
 * calibrated workload (docs/cost-model.md, "Planner constants"): 16 keeps
 * qwen3-235b-a22b on h100-4x8 where it was and gains 2% on qwen3-30b-a3b
 * on one node, where unweighted moves cost more than they won.
 */
#define RLB_IN_NODE_MOVE_FACTOR 16.0

struct rlb_balance_opts {
	enum rlb_policy policy;
	uint32_t replica_slots;		/* R per GPU per layer */
	uint32_t min_tokens_per_replica;
	uint32_t eplb_window;		/* eplb: steps of history */
	int reorder;			/* relibra: cross-node reordering */
	int replicate;			/* relibra: intra-node replication */
	int colocate;			/* relibra: count inter-node copies in the reorder objective (needs rlb_balancer_set_cooc) */
	double migration_weight;	/* relibra: weight of migration time */
	/*
	 * relibra: the plan chooses the schedule (datacontrol.h): rlb_planner_run
	 * does; the balancer plans the schedule it is given
	 */
	int data_control;
	/*
	 * Every policy but ideal: the plan's dispatch relays RDMA copies over
	 * the source node's GPUs (struct rlb_sim_opts); it changes no plan
	 */
	int relay;
};

/*
 * Options from the config's balancer section (an unknown
 * policy name, which config validation rules out, gives relibra).
 * balancer.colocate auto turns colocate on where the model's routing is
 * group-limited (rlb_group_limited): there the reordering alone splits
 * the groups that the router keeps together and adds RDMA copies
 * (docs/cost-model.md, "Group-limited routing").
 */
void rlb_balance_opts_from_config(struct rlb_balance_opts *o,
				  const struct rlb_config *cfg);

/* Whether cfg's router picks a token's experts from some of its groups. */
int rlb_group_limited(const struct rlb_config *cfg);

struct rlb_balancer;

/*
 * A balancer for cfg's EP size (parallel.ep_size, 0: all GPUs), GPUs per
 * node, expert groups and cost constants, with the options o (copied).
 * The expert and layer counts come from the first step's loads; later
 * steps must match.  *out is NULL on failure.  Errors: RLB_EINVAL (EP size
 * not a multiple of gpus_per_node, bad policy or migration weight),
 * RLB_ENOMEM.  Free with rlb_balancer_free
 * (NULL is a no-op).
 */
int rlb_balancer_new(struct rlb_balancer **out, const struct rlb_config *cfg,
		     const struct rlb_balance_opts *opts, struct rlb_err *err);
void rlb_balancer_free(struct rlb_balancer *b);

/*
 * Plan one step (steps in increasing order: a step of s not above the
 * last planned one is refused).  out is initialised here
 * (release with rlb_step_plan_release, also after a failure); it passes
 * rlb_step_plan_check against l.  Sets out->planner_ns and
 * out->migrated_experts.  For RLB_POLICY_IDEAL the plan is the static
 * layout (the simulator computes the bound).  out->step is s->step (s may
 * be NULL: one above the last planned step's, 0 for the first); only the
 * loads are read.  A step without tokens (loads of 0 micro-batches) gets
 * a plan of no cells, relibra keeping the previous step's homes.
 * Deterministic: the same options and the same sequence of loads give the
 * same plans (planner_ns aside).  Errors: RLB_EMISMATCH (l's ranks differ
 * from the EP size, or its layers or experts from earlier steps' or from
 * the sampled tokens' of rlb_balancer_set_cooc),
 * RLB_EINVAL (s->step not above the last planned step's, experts not a
 * positive multiple of the EP size, EPLB's parameter checks), RLB_ERANGE
 * (a quota above 2^32 - 1), RLB_ENOMEM.
 * After a failure the balancer's history is unchanged.
 */
int rlb_balancer_plan_step(struct rlb_balancer *b,
			   const struct rlb_schedule *s,
			   const struct rlb_loads *l,
			   struct rlb_step_plan *out, struct rlb_err *err);

struct rlb_cooc;

/*
 * colocate: the sampled tokens (cooc.h) of the step planned next, used by
 * relibra's reordering when its colocate option is on (NULL: the
 * objective without them).  c is not owned and must outlive the
 * rlb_balancer_plan_step call; its shape must be the loads'.
 */
void rlb_balancer_set_cooc(struct rlb_balancer *b, const struct rlb_cooc *c);

struct rlb_pool;

/*
 * Run relibra's reordering on the threads of pool, a layer each at a
 * time: the layers are independent, so the plans are the same for any
 * pool (NULL: on the caller's thread).  Takes effect when set before the
 * first step; pool is not owned, must outlive b's steps, and must be idle
 * while rlb_balancer_plan_step runs.
 */
void rlb_balancer_set_pool(struct rlb_balancer *b, struct rlb_pool *pool);

#ifdef __cplusplus
}
#endif

#endif
