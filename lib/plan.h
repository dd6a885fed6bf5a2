/*
 * plan.h - placement and replication plans: per step and layer the home
 * GPU of every expert, per micro-batch and layer the instances (home copy
 * and replicas) of every expert with their quotas.  The per-source split
 * of each load over an expert's instances follows a documented rule, so
 * readers recompute it from the quotas (rlb_step_plan_split).
 */
#ifndef RLB_PLAN_H
#define RLB_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "err.h"
#include "schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

enum rlb_policy {
	RLB_POLICY_STATIC = 0,	/* Megatron-LM contiguous layout, no replicas */
	RLB_POLICY_EPLB,	/* DeepSeek EPLB fed earlier steps' loads */
	RLB_POLICY_EPLB_ORACLE,	/* DeepSeek EPLB fed this step's loads */
	RLB_POLICY_REPLICATE,	/* static homes + per-micro-batch intra-node replicas */
	RLB_POLICY_RELIBRA,	/* per-step cross-node reordering + replication */
	RLB_POLICY_IDEAL,	/* perfectly balanced bound (the simulator's) */
};
#define RLB_POLICY_COUNT 6

const char *rlb_policy_name(enum rlb_policy p);
int rlb_policy_from_name(const char *name, enum rlb_policy *p,
			 struct rlb_err *err);

/*
 * How a (source rank, expert) load is split over the expert's instances.
 *   LOCALITY: per expert, each instance first takes the rows of the source
 *     on its own GPU (up to its quota); then the sources of the expert's
 *     home node by ascending rank, then all other sources by ascending
 *     rank, fill the instances in instance order, each up to its quota.
 *   EVEN: every source splits its rows evenly over the expert's C
 *     copies: each gets floor(rows / C), and the remainder r goes one row
 *     each to copies (s + j) mod C for j < r, s the source rank.  Copies
 *     are numbered in instance order: instance i stands for its
 *     `copies` (rlb_step_plan_copies) consecutive copies, 1 but where
 *     EPLB packs several copies of an expert onto one GPU, and receives
 *     their rows.  Quotas are then the sums over sources.
 * A source sends its rows of an expert in its own token order (chunks in
 * (sequence, start) order): the first rows to the first instance that
 * receives from it, and so on.
 */
enum rlb_split {
	RLB_SPLIT_LOCALITY = 0,
	RLB_SPLIT_EVEN = 1,
};

/* One instance of an expert in one (micro-batch, layer). */
struct rlb_plan_instance {
	uint32_t expert;
	uint32_t gpu;
	uint32_t quota;		/* token rows it computes */
};

/*
 * One step's plan.  Instances of (mb, layer, expert) are
 * inst[inst_first[c] .. inst_first[c + 1]) with
 * c = (mb * layers + layer) * experts + expert: the home copy first
 * (quota may be 0), then replicas by ascending GPU.
 */
struct rlb_step_plan {
	uint32_t step;
	uint32_t micro_batches;
	uint32_t layers;
	uint32_t experts;
	uint32_t ranks;
	uint32_t gpus_per_node;
	uint32_t replica_slots;		/* per GPU per layer */
	enum rlb_split split;
	uint32_t *home;			/* [layers][experts]: home GPU */
	size_t *inst_first;		/* [micro_batches * layers * experts + 1] */
	struct rlb_plan_instance *inst;
	size_t ninst;
	size_t inst_cap;
	/*
	 * copies[k]: the physical copies that instance k stands for (>= 1;
	 * more than 1 only under RLB_SPLIT_EVEN, where they share out the
	 * expert's rows and slots, plan.h EVEN).  NULL: every instance is
	 * one copy.  Same capacity as inst.
	 */
	uint32_t *copies;
	uint32_t migrated_experts;	/* homes that changed node since the previous step */
	uint64_t planner_ns;		/* wall time spent planning this step */
	size_t cur_cell;		/* cell of the last instance added (private) */
	/*
	 * The step's schedule when the plan carries it (pack data-control or
	 * file: no rule rebuilds it), owned, released with the plan; NULL
	 * when the header's packing rule rebuilds it from the trace.
	 */
	struct rlb_schedule *sched;
};

/*
 * Allocate a plan with the static home layout (expert e on GPU
 * e / (experts / ranks)) and no instances yet.  Requirements: ranks >= 1,
 * experts a positive multiple of ranks, gpus_per_node >= 1 dividing
 * ranks, layers >= 1 (micro_batches may be 0: a step without tokens).
 * Errors: RLB_EINVAL, RLB_ERANGE (tables beyond the address space),
 * RLB_ENOMEM; p is then zeroed.  Release with rlb_step_plan_release.
 */
int rlb_step_plan_init(struct rlb_step_plan *p, uint32_t step,
		       uint32_t micro_batches, uint32_t layers,
		       uint32_t experts, uint32_t ranks,
		       uint32_t gpus_per_node, uint32_t replica_slots,
		       enum rlb_split split, struct rlb_err *err);
void rlb_step_plan_release(struct rlb_step_plan *p);

/* Forget the instances (keeps the homes and the allocation). */
void rlb_step_plan_clear_instances(struct rlb_step_plan *p);

/*
 * Append one instance.  Cells must be filled in (mb, layer, expert)
 * order, each expert's home copy first; skipped cells get no instance
 * (rlb_step_plan_check reports them).  The instance array grows
 * geometrically.  Errors: RLB_EINVAL (mb, layer or expert out of range,
 * or a cell before the last one filled), RLB_ENOMEM.  rlb_step_plan_cell
 * is valid for the cells up to the last one filled.
 */
int rlb_step_plan_add(struct rlb_step_plan *p, uint32_t mb, uint32_t layer,
		      uint32_t expert, uint32_t gpu, uint32_t quota,
		      struct rlb_err *err);

/*
 * The same with the physical copies that the instance stands for (>= 1;
 * EVEN plans only, see copies in struct rlb_step_plan): the instance
 * takes that many even shares and slots.  Errors: those of
 * rlb_step_plan_add, RLB_EINVAL (copies 0, or above 1 in a LOCALITY
 * plan).
 */
int rlb_step_plan_add_copies(struct rlb_step_plan *p, uint32_t mb,
			     uint32_t layer, uint32_t expert, uint32_t gpu,
			     uint32_t quota, uint32_t copies,
			     struct rlb_err *err);

/* Copies of instance K (p->inst index): 1 unless the plan records more. */
static inline uint32_t rlb_step_plan_copies(const struct rlb_step_plan *p,
					    size_t k)
{
	return p->copies ? p->copies[k] : 1;
}

/* The instances of one cell; *count receives their number. */
static inline const struct rlb_plan_instance *
rlb_step_plan_cell(const struct rlb_step_plan *p, uint32_t mb, uint32_t layer,
		   uint32_t expert, uint32_t *count)
{
	size_t c = ((size_t)mb * p->layers + layer) * p->experts + expert;

	*count = (uint32_t)(p->inst_first[c + 1] - p->inst_first[c]);
	return p->inst + p->inst_first[c];
}

/*
 * Check every invariant against the loads it was planned from: each
 * expert has one home GPU; every cell's first instance is on the home
 * GPU; no GPU holds two instances of an expert; copies per GPU per
 * (mb, layer) <= experts / ranks + replica_slots (EPLB mixes homes and
 * replicas in a GPU's slots; the other policies keep experts / ranks homes
 * per GPU and use at most replica_slots spare slots); quotas are
 * non-negative and sum to the cell's load.  RLB_ECORRUPT naming the first
 * violation.
 *
 * Also checked: every instance names its cell's expert and a GPU below
 * ranks, replicas follow in ascending GPU order, every cell has an
 * instance, every instance is at least one copy and only EVEN plans
 * have more, and under RLB_SPLIT_EVEN each quota is the instance's
 * share of the even split.  l may be NULL: everything but the loads (the
 * structure that a plan file reader checks).  Messages name the cell as
 * "mb M, layer L, expert E" (trace_format/SPEC.md (plan format) lists them).
 * RLB_EINVAL when l's shape differs from the plan's; RLB_ENOMEM.
 */
int rlb_step_plan_check(const struct rlb_step_plan *p,
			const struct rlb_loads *l, struct rlb_err *err);

/*
 * Split one cell's load over its instances by the plan's rule:
 * rows[s * n + i] receives the rows source rank s sends to instance i of
 * the cell (n its instance count, s over all ranks).  LOCALITY is
 * rlb_replicate_split (lib/replicate.h) over the cell's instances and
 * quotas.  Nothing is written when l's shape differs from the plan's or
 * the cell is out of range.
 */
void rlb_step_plan_split(const struct rlb_step_plan *p,
			 const struct rlb_loads *l, uint32_t mb,
			 uint32_t layer, uint32_t expert, uint32_t *rows);

/*
 * Where each of one source rank's rows of (mb, layer) goes, row by row:
 * ids[t * topk + k] are the expert ids of the rank's tokens of the
 * micro-batch in its own token order (chunks in (sequence, start) order,
 * as rlb_loads_add_seq counts them); inst[t * topk + k] receives the
 * index in p->inst of the instance that computes the row (its gpu and
 * expert).  The rows of an expert go to its instances in order, each
 * taking as many as rlb_step_plan_split gives it from this rank: what
 * train-step does.  Errors: RLB_EINVAL (l's shape differs from the
 * plan's, mb, layer or rank out of range, topk 0, an id not below
 * experts), RLB_EMISMATCH (the ids hold more or fewer rows of an expert
 * than l counts for the rank), RLB_ENOMEM.
 */
int rlb_step_plan_route(const struct rlb_step_plan *p,
			const struct rlb_loads *l, uint32_t mb, uint32_t layer,
			uint32_t rank, const uint16_t *ids, size_t ntok,
			uint32_t topk, size_t *inst, struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
