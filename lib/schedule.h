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

#ifdef __cplusplus
extern "C" {
#endif

struct rlb_pool;

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
 * Deterministic; documented in man/relibra.1 (SCHEDULE) and
 * docs/schedule.md.  Sequences longer than mb_tokens are cut into
 * contiguous chunks of mb_tokens (the last one shorter); zero-length
 * sequences get no chunk.
 *   in-order: chunks in (seq, start) order fill one window (micro-batch)
 *     at a time; each goes to the rank with the least room that still
 *     fits it (lowest rank on ties); when no rank of the window has room
 *     the window is closed and the chunk opens the next one.
 *   ffd: chunks by descending length (ties in (seq, start) order) go to
 *     the first (micro-batch, rank) bin in (mb, rank) order with room; a
 *     new micro-batch is opened when no bin has room.
 *   dynamic: chunks by descending length (ties in (seq, start) order) are
 *     dealt to the rank with the fewest tokens (lowest rank on ties); M is
 *     the most micro-batches first-fit-decreasing needs for one rank's
 *     share; each rank's chunks, longest first, go to its micro-batch with
 *     the fewest tokens that still fits them (lowest on ties), M growing
 *     by one for every rank when a chunk fits none; each rank's
 *     micro-batches are then numbered by descending tokens.
 * s is initialised here (release it with rlb_schedule_release, also after
 * a failure).  Errors: RLB_EINVAL (ranks or mb_tokens 0, too many
 * sequences), RLB_ENOMEM.
 */
int rlb_schedule_build(struct rlb_schedule *s, uint32_t step,
		       const uint32_t *seq_tokens, size_t nseqs,
		       uint32_t ranks, uint32_t mb_tokens, enum rlb_pack pack,
		       struct rlb_err *err);
void rlb_schedule_release(struct rlb_schedule *s);

/*
 * Index in s->chunks of the first chunk of sequence SEQ, or s->nchunks
 * when it has none (zero tokens or out of range).  Its chunks follow
 * contiguously in start order.
 */
size_t rlb_schedule_first_chunk(const struct rlb_schedule *s, uint32_t seq);

/*
 * The rank balance of each micro-batch with tokens, in micro-batch order:
 * the most tokens on one rank over the mean over all ranks, which sets
 * the all-to-all's busiest sender (docs/schedule.md).  out has room for
 * s->micro_batches values; *n receives how many were written.  Errors:
 * RLB_ENOMEM.
 */
int rlb_schedule_rank_balance(const struct rlb_schedule *s, double *out, size_t *n);

/*
 * A schedule from explicit chunks (a plan's own schedule, a trainer's
 * schedule file): the chunks are copied and sorted by (seq, start) and
 * must tile every sequence of seq_tokens[0..nseqs) exactly: each token in
 * one chunk, no chunk past its sequence or of zero tokens, every rank
 * below RANKS.  Budgets are not enforced (a trainer may pack differently);
 * micro_batches is the highest micro-batch used plus one, at most
 * RLB_SCHEDULE_MAX_MICRO_BATCHES.  s is initialised here (release it also
 * after a failure).  Errors: RLB_EINVAL naming the step, sequence and
 * token range at fault, RLB_ENOMEM.
 */
#define RLB_SCHEDULE_MAX_MICRO_BATCHES (1u << 20)
int rlb_schedule_from_chunks(struct rlb_schedule *s, uint32_t step,
			     enum rlb_pack pack, const struct rlb_chunk *chunks,
			     size_t nchunks, const uint32_t *seq_tokens,
			     size_t nseqs, uint32_t ranks, uint32_t mb_tokens,
			     struct rlb_err *err);

/*
 * A trainer's own micro-batch assignment (relibra plan --schedule FILE):
 * JSON of schema "relibra.schedule/1" (docs/schedule.md, "Schedule
 * files"): {"schema": ..., "steps": [{"step": S, "micro_batches":
 * [[[[seq, start, end], ...] per rank] per micro-batch]}]}, seq the
 * sequence's index in the step (trace order), [start, end) its tokens.
 */
struct rlb_schedule_file;

/*
 * Load and check the file's structure (PATH "-": stdin).  Errors: RLB_EIO;
 * RLB_EPARSE with "schedule 'PATH': ..." and the line, column and byte of
 * a JSON syntax error, or the JSON path of the value at fault and what
 * was expected; RLB_ENOMEM.  Free with rlb_schedule_file_free (NULL is a
 * no-op).
 */
int rlb_schedule_file_load(struct rlb_schedule_file **out, const char *path,
			   struct rlb_err *err);
void rlb_schedule_file_free(struct rlb_schedule_file *f);

/*
 * The steps of the file in [lo, hi] that are not among STEPS (n of them,
 * ascending: a trace's, rlb_trace_reader_steps): how many, and the first
 * in *first (unchanged when none).  A schedule that lists steps its trace
 * lacks is likely another run's.
 */
size_t rlb_schedule_file_extra_steps(const struct rlb_schedule_file *f,
				     const uint32_t *steps, size_t n,
				     uint32_t lo, uint32_t hi, uint32_t *first);

/*
 * Step STEP of the file as a schedule (pack RLB_PACK_FILE), checked like
 * rlb_schedule_from_chunks against the step's sequence lengths and the EP
 * size (every micro-batch must list exactly RANKS ranks).  Errors:
 * RLB_ENOTFOUND (the file has no such step), RLB_EMISMATCH (a
 * micro-batch lists other than RANKS ranks), those of
 * rlb_schedule_from_chunks, prefixed with the file's name.
 */
int rlb_schedule_file_step(const struct rlb_schedule_file *f, uint32_t step,
			   const uint32_t *seq_tokens, size_t nseqs,
			   uint32_t ranks, uint32_t mb_tokens,
			   struct rlb_schedule *s, struct rlb_err *err);

/*
 * One step of a schedule as the schedule file writes it:
 * {"step": S, "micro_batches": [[[[seq, start, end], ...] per rank] per
 * micro-batch]}, ranges in (seq, start) order within each rank.  NULL on
 * allocation failure.
 */
struct json_t *rlb_schedule_step_json(const struct rlb_schedule *s);

#define RLB_SCHEDULE_SCHEMA "relibra.schedule/1"

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

/*
 * Allocate zeroed counts (l is initialised here; release it also after a
 * failure).  4 bytes per (micro-batch, layer, rank, expert); a zero
 * dimension gives an empty table.  Errors: RLB_ERANGE (table larger than
 * the address space), RLB_ENOMEM.
 */
int rlb_loads_init(struct rlb_loads *l, uint32_t micro_batches,
		   uint32_t layers, uint32_t ranks, uint32_t experts,
		   struct rlb_err *err);
void rlb_loads_release(struct rlb_loads *l);

/*
 * Add the routing of sequence number seq_index of the schedule's step
 * (seq from the trace reader) to the counts, chunk by chunk: every token
 * of a chunk adds 1 to (chunk mb, layer, chunk rank, id) for each of its
 * topk ids.  Tokens past seq->tokens, ids >= l->experts and chunks
 * outside l's dimensions are skipped (the trace reader has checked them).
 */
void rlb_loads_add_seq(struct rlb_loads *l, const struct rlb_schedule *s,
		       uint32_t seq_index, const struct rlb_seq *seq,
		       uint32_t topk);

/*
 * The sequence lengths of step STEP in file order, as the trace's step
 * index lists them: *lens (malloc'd, free it; non-NULL also for an empty
 * step) and *n.  Errors: those of the reader, RLB_ENOTFOUND, RLB_ENOMEM.
 */
int rlb_step_seq_tokens(struct rlb_trace_reader *r, uint32_t step,
			uint32_t **lens, size_t *n, struct rlb_err *err);

/*
 * Run part `part` of sequence SEQ_INDEX of a step (seq as the reader
 * yields it) on thread WORKER of a pool (lib/pool.h).
 */
typedef void rlb_seq_part_fn(void *ctx, const struct rlb_seq *seq,
			     uint32_t seq_index, size_t part, unsigned worker);

/*
 * Stream the sequences of S's step in order and run fn on each, PARTS
 * parts per sequence, on the pool's threads (NULL: this thread alone);
 * the next sequence is read while the threads work on the current one
 * (the reader keeps both).  Each sequence is checked against S: its step,
 * and its tokens against its chunks.  Errors: those of the reader,
 * RLB_ENOTFOUND (no such step), RLB_ECORRUPT (the step ends early),
 * RLB_EMISMATCH (a sequence's length differs from its chunks').
 */
int rlb_step_stream(struct rlb_trace_reader *r, const struct rlb_schedule *s,
		    struct rlb_pool *pool, size_t parts, rlb_seq_part_fn *fn,
		    void *ctx, struct rlb_err *err);

/*
 * Count the loads of S's step under S, streaming the step's sequences
 * (bounded memory); the shape comes from the trace header.  With a pool
 * (lib/pool.h; NULL: this thread alone) its threads count each sequence
 * in blocks of layers (rlb_step_stream).  l is initialised here and
 * released on failure.  Errors: those of rlb_step_stream, RLB_ENOMEM.
 */
int rlb_step_count_loads(struct rlb_trace_reader *r,
			 const struct rlb_schedule *s, struct rlb_loads *l,
			 struct rlb_pool *pool, struct rlb_err *err);

/*
 * Convenience: read step STEP of the trace, build its schedule with the
 * config's EP size, micro_batch_tokens and PACK, and count its loads.
 * The shape (layers, experts, topk) comes from the trace header.
 * Streams the step (bounded memory: one sequence at a time).  s and l are
 * initialised here and released on failure.  Errors: those of the reader,
 * RLB_ENOTFOUND (no such step), RLB_ECORRUPT (the step's sequences do not
 * match its index), RLB_EINVAL (EP size or budget 0), RLB_ENOMEM.
 * pool as for rlb_step_count_loads.
 */
int rlb_step_loads(struct rlb_trace_reader *r, uint32_t step,
		   const struct rlb_config *cfg, enum rlb_pack pack,
		   struct rlb_schedule *s, struct rlb_loads *l,
		   struct rlb_pool *pool, struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
