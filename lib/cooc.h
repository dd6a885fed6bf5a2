/*
 * cooc.h - expert co-occurrence for relibra's colocate lever: per MoE
 * layer, how many tokens were routed to both of two experts, counted on
 * every RLB_COOC_STRIDE-th token of each sequence (a sample keeps the pass
 * as cheap as counting loads).
 */
#ifndef RLB_COOC_H
#define RLB_COOC_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "schedule.h"
#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RLB_COOC_STRIDE 8	/* tokens 0, 8, 16, ... of each sequence */

struct rlb_cooc {
	uint32_t layers;
	uint32_t experts;
	uint64_t *pairs;	/* [layers][experts][experts], symmetric, zero diagonal */
};

/*
 * Zeroed counts (c is initialised here; release it also after a
 * failure).  Errors: RLB_ERANGE (table beyond the address space),
 * RLB_ENOMEM.
 */
int rlb_cooc_init(struct rlb_cooc *c, uint32_t layers, uint32_t experts,
		  struct rlb_err *err);
void rlb_cooc_release(struct rlb_cooc *c);

/* The [experts][experts] counts of one layer. */
static inline const uint64_t *rlb_cooc_layer(const struct rlb_cooc *c,
					     uint32_t layer)
{
	return c->pairs + (size_t)layer * c->experts * c->experts;
}

/*
 * Add the sampled tokens of one sequence: for each pair of distinct ids
 * among a token's topk at a layer, both orders count one.  Ids >= experts
 * are skipped.
 */
void rlb_cooc_add_seq(struct rlb_cooc *c, const struct rlb_seq *seq,
		      uint32_t topk);

/*
 * Clear c and count the step of schedule S into it, streaming its
 * sequences (rlb_step_stream, so the next is read while one is counted
 * when a pool is given).  Errors: those of rlb_step_stream, RLB_EMISMATCH
 * (c's shape differs from the trace's).
 */
int rlb_step_cooc(struct rlb_trace_reader *r, const struct rlb_schedule *s,
		  struct rlb_cooc *c, struct rlb_pool *pool, struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
