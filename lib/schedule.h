/*
 * schedule.h - micro-batch schedule: how a step's sequences are cut into
 * chunks and packed onto (micro-batch, EP rank) bins, and the resulting
 * per-(micro-batch, layer, source rank, expert) token counts.  plan, the
 * simulator and train-step all use this, so they see the same loads.
 */
#ifndef RLB_SCHEDULE_H
#define RLB_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "err.h"
#include "trace.h"

/* A contiguous token range of one sequence, placed on one bin. */
struct rlb_chunk {
	uint32_t seq;		/* index in the step's sequence list (file order) */
	uint32_t start;		/* first token */
	uint32_t tokens;
	uint32_t mb;		/* micro-batch */
	uint32_t rank;		/* EP rank (source rank of its tokens) */
};

struct rlb_schedule {
	uint32_t step;
	enum rlb_pack pack;
	uint32_t ranks;
	uint32_t mb_tokens;	/* budget per rank per micro-batch */
	uint32_t micro_batches;
	size_t nseqs;
	size_t nchunks;
	struct rlb_chunk *chunks;	/* sorted by (seq, start) */
};

/*
 * Build the schedule of one step from its sequence lengths (file order).
 * Deterministic; documented in man/relibra.1 (SCHEDULE).
 */
int rlb_schedule_build(struct rlb_schedule *s, uint32_t step,
		       const uint32_t *seq_tokens, size_t nseqs,
		       uint32_t ranks, uint32_t mb_tokens, enum rlb_pack pack,
		       struct rlb_err *err);
void rlb_schedule_release(struct rlb_schedule *s);

/* Token counts per (micro-batch, layer, source rank, expert). */
struct rlb_loads {
	uint32_t micro_batches;
	uint32_t layers;
	uint32_t ranks;
	uint32_t experts;
	uint32_t *count;	/* [mb][layer][rank][expert] */
};

static inline size_t rlb_loads_index(const struct rlb_loads *l, uint32_t mb,
				     uint32_t layer, uint32_t rank,
				     uint32_t expert)
{
	return (((size_t)mb * l->layers + layer) * l->ranks + rank) *
	       l->experts + expert;
}

int rlb_loads_init(struct rlb_loads *l, uint32_t micro_batches,
		   uint32_t layers, uint32_t ranks, uint32_t experts,
		   struct rlb_err *err);
void rlb_loads_release(struct rlb_loads *l);

/*
 * Add the routing of sequence number seq_index of the schedule's step
 * (seq from the trace reader) to the counts, chunk by chunk.
 */
void rlb_loads_add_seq(struct rlb_loads *l, const struct rlb_schedule *s,
		       uint32_t seq_index, const struct rlb_seq *seq,
		       uint32_t topk);

/*
 * Convenience: read step STEP of the trace, build its schedule with the
 * config's EP size, micro_batch_tokens and PACK, and count its loads.
 * Streams the step (bounded memory).  s and l are initialised here.
 */
int rlb_step_loads(struct rlb_trace_reader *r, uint32_t step,
		   const struct rlb_config *cfg, enum rlb_pack pack,
		   struct rlb_schedule *s, struct rlb_loads *l,
		   struct rlb_err *err);

#endif
