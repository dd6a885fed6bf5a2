/*
 * cooc.h - sampled tokens for relibra's colocate lever: every
 * RLB_COOC_STRIDE-th token of each sequence of a step, with its expert ids
 * at every MoE layer, so the reordering can count the nodes each token
 * reaches (a sample keeps the pass as cheap as counting loads).
 */
#ifndef RLB_COOC_H
#define RLB_COOC_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "reorder.h"
#include "schedule.h"
#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RLB_COOC_STRIDE 64	/* tokens 0, 64, 128, ... of each sequence */

struct rlb_cooc {
	uint32_t layers;
	uint32_t experts;
	uint32_t topk;
	uint32_t tokens;	/* sampled tokens held */
	uint32_t cap;		/* sampled tokens the table has room for */
	uint16_t *ids;		/* [layers][cap][topk] */
};

/*
 * An empty table of the given shape (c is initialised here; release it
 * also after a failure).  Errors: RLB_EINVAL (topk 0 or over 65535).
 */
int rlb_cooc_init(struct rlb_cooc *c, uint32_t layers, uint32_t experts,
		  uint32_t topk, struct rlb_err *err);
void rlb_cooc_release(struct rlb_cooc *c);

/*
 * Empty c and make room for `tokens` sampled tokens.  Errors: RLB_ERANGE
 * (table beyond the address space), RLB_ENOMEM.
 */
int rlb_cooc_reserve(struct rlb_cooc *c, uint32_t tokens, struct rlb_err *err);

/* The sampled tokens of one layer, as rlb_reorder_run takes them. */
static inline struct rlb_reorder_tokens rlb_cooc_layer(const struct rlb_cooc *c,
						       uint32_t layer)
{
	struct rlb_reorder_tokens t = {
		c->tokens, c->topk,
		c->ids + (size_t)layer * c->cap * c->topk,
	};

	return t;
}

/* Tokens 0, RLB_COOC_STRIDE, ... of a sequence of n tokens. */
static inline uint32_t rlb_cooc_sampled(uint32_t n)
{
	return n / RLB_COOC_STRIDE + (n % RLB_COOC_STRIDE != 0);
}

/*
 * Add the sampled tokens of one sequence (ids as the trace holds them,
 * [layers][tokens][topk]).  Errors: RLB_ERANGE (no room left).
 */
int rlb_cooc_add_seq(struct rlb_cooc *c, const struct rlb_seq *seq,
		     struct rlb_err *err);

/*
 * Empty c and add the step of schedule S, streaming its sequences
 * (rlb_step_stream, so the next is read while one is added when a pool
 * is given).  Errors: those of rlb_step_stream, RLB_EMISMATCH (c's shape
 * differs from the trace's), those of rlb_cooc_reserve.
 */
int rlb_step_cooc(struct rlb_trace_reader *r, const struct rlb_schedule *s,
		  struct rlb_cooc *c, struct rlb_pool *pool, struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
