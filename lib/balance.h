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

struct rlb_balance_opts {
	enum rlb_policy policy;
	uint32_t replica_slots;		/* R per GPU per layer */
	uint32_t min_tokens_per_replica;
	uint32_t eplb_window;		/* eplb: steps of history */
	int reorder;			/* relibra: cross-node reordering */
	int replicate;			/* relibra: intra-node replication */
	int colocate;			/* relibra: count inter-node copies in the reorder objective */
	double migration_weight;	/* relibra: weight of migration time */
};

/* Options from the config's balancer section. */
void rlb_balance_opts_from_config(struct rlb_balance_opts *o,
				  const struct rlb_config *cfg);

struct rlb_balancer;

int rlb_balancer_new(struct rlb_balancer **out, const struct rlb_config *cfg,
		     const struct rlb_balance_opts *opts, struct rlb_err *err);
void rlb_balancer_free(struct rlb_balancer *b);

/*
 * Plan one step (steps in increasing order).  out is initialised here
 * (release with rlb_step_plan_release, also after a failure); it passes
 * rlb_step_plan_check against l.  Sets out->planner_ns and
 * out->migrated_experts.  For RLB_POLICY_IDEAL the plan is the static
 * layout (the simulator computes the bound).
 */
int rlb_balancer_plan_step(struct rlb_balancer *b,
			   const struct rlb_schedule *s,
			   const struct rlb_loads *l,
			   struct rlb_step_plan *out, struct rlb_err *err);

#endif
