/*
 * plan_internal.h - what rlb_step_plan_route shares with the executor,
 * which routes every (micro-batch, layer) of each of its ranks and so
 * splits each cell once for all of them.
 */
#ifndef RLB_PLAN_INTERNAL_H
#define RLB_PLAN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "plan.h"

/*
 * Every expert's rlb_step_plan_split of (mb, layer) in one table: expert
 * e's rows[ranks][instances of e] at *split + first[e] (first holds
 * experts + 1 offsets).  *split grows as needed (*cap items).  The
 * caller checks l's shape and the cell against the plan's.  Errors:
 * RLB_ENOMEM.
 */
int rlb_step_plan_split_cells(const struct rlb_step_plan *p,
			      const struct rlb_loads *l, uint32_t mb,
			      uint32_t layer, uint32_t **split, size_t *cap,
			      size_t *first, struct rlb_err *err);

/*
 * rlb_step_plan_route by a table of rlb_step_plan_split_cells: which[t *
 * topk + k] receives the index, among the instances of its expert in the
 * cell (p->inst + p->inst_first[cell]), of the instance that computes
 * row (t, k) of RANK.  cursor is scratch of 2 * experts.  Errors as
 * rlb_step_plan_route's, but for the shape checks.
 */
int rlb_step_plan_route_split(const struct rlb_step_plan *p, uint32_t mb,
			      uint32_t layer, uint32_t rank,
			      const uint32_t *split, const size_t *first,
			      const uint16_t *ids, size_t ntok, uint32_t topk,
			      uint32_t *cursor, uint32_t *which,
			      struct rlb_err *err);

#endif
