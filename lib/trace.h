/*
 * trace.h - the routing-replay trace (.rrt): a zstd stream holding, per RL
 * sample, the top-k logical expert ids of every MoE layer and token.
 * Format: trace_format/SPEC.md.  Writer streams with bounded memory; reader
 * iterates and seeks by step.
 */
#ifndef RLB_TRACE_H
#define RLB_TRACE_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RLB_TRACE_VERSION_MAJOR 1
#define RLB_TRACE_VERSION_MINOR 2

/* Header flags. */
#define RLB_TRACE_F_GATES  (1u << 0)	/* every sequence carries gate weights */
#define RLB_TRACE_F_SORTED (1u << 1)	/* each token's ids sorted ascending (engine order dropped) */

#define RLB_TRACE_MAX_EXPERTS 65535
#define RLB_TRACE_MAX_TOPK 64
#define RLB_TRACE_MAX_LAYERS 1024
#define RLB_TRACE_MAX_SEQ_TOKENS (1u << 24)

struct rlb_trace_header {
	uint16_t version_major;		/* filled in by the writer / reader */
	uint16_t version_minor;
	uint32_t flags;			/* RLB_TRACE_F_* */
	uint32_t experts;		/* routed experts per MoE layer */
	uint32_t topk;
	uint32_t moe_layers;		/* layers stored per token */
	uint32_t first_dense_layers;	/* engine layers dropped before them */
	uint32_t moe_layer_period;	/* then blocks of this many layers, 1..64 ... */
	uint32_t moe_layer_offset;	/* ... whose layer at this offset is MoE */
	/* 1.2: or the layers one by one, "E" the MoE ones ("": none) */
	char layer_pattern[RLB_LAYER_PATTERN_MAX];
	uint64_t seed;			/* generator seed (synthetic), else 0 */
	char model[RLB_NAME_MAX];	/* model name, NUL-terminated */
	char source[32];		/* "synthetic", "sglang", "vllm", "megatron", "jsonl", "api" */
};

/* Fill a header's model shape from a configuration. */
void rlb_trace_header_from_config(struct rlb_trace_header *h,
				  const struct rlb_config *cfg);

/*
 * The config's model shape (experts, topk, moe_layers, first_dense_layers,
 * moe_layer_period, moe_layer_offset, layer_pattern) must be the header's:
 * RLB_EMISMATCH naming the first key that differs.
 */
int rlb_trace_header_check(const struct rlb_trace_header *h,
			   const struct rlb_config *cfg, struct rlb_err *err);

/* Bytes per stored id: 1 when experts <= 256, else 2. */
unsigned rlb_trace_id_bytes(const struct rlb_trace_header *h);

/*
 * One sequence (one RL sample).  ids holds moe_layers * tokens * topk
 * logical expert ids, layer-major: ids[(layer * tokens + t) * topk + k],
 * k in the engine's column order.  gates, when the trace has
 * RLB_TRACE_F_GATES, has the same shape, every weight finite and >= 0
 * (rlb_trace_gate_ok); else NULL.
 */
struct rlb_seq {
	uint32_t step;
	uint32_t group;		/* prompt group (GRPO) within the step */
	uint32_t sample;	/* sample id within the group */
	uint32_t tokens;
	const uint16_t *ids;
	const float *gates;
};

/*
 * Whether g may be stored as a gate weight: finite and not below zero
 * (-0 counts as zero).  The writer refuses, the reader reports as
 * corrupt, and the importers reject any other value.
 */
static inline int rlb_trace_gate_ok(float g)
{
	return g >= 0.0f && g <= FLT_MAX;	/* false for NaN and +-inf */
}

/* Per-sequence metadata without routing, as the step index lists it. */
struct rlb_seq_meta {
	uint32_t step;
	uint32_t group;
	uint32_t sample;
	uint32_t tokens;
};

struct rlb_trace_writer;

struct rlb_trace_writer_opts {
	int level;		/* zstd level (default 3) */
	size_t frame_bytes;	/* raw bytes per data frame before it is cut (default 8 MiB) */
	int coding;		/* RLB_TRACE_CODING_* (0: the default for the shape) */
};

/*
 * Id codings (SPEC.md "Id coding").  The default is RANK for ordered u8
 * ids, DELTA for sorted traces and RAW otherwise; the others exist for
 * measurements and tools.  RANK needs experts <= 256, DELTA the sorted flag.
 */
#define RLB_TRACE_CODING_DEFAULT 0
#define RLB_TRACE_CODING_RAW 1
#define RLB_TRACE_CODING_RANK 2
#define RLB_TRACE_CODING_DELTA 3

/*
 * Start a trace at PATH ("PATH.tmp" until close renames it).  h gives the
 * shape and flags; version fields are ignored.  opts may be NULL.  *out
 * is NULL on failure.  Errors: RLB_ERANGE (a shape field outside the
 * limits above, topk above experts, a zstd level or frame size out of
 * range), RLB_EUNSUPPORTED (unknown required flags), RLB_EINVAL (model or
 * source not NUL-terminated UTF-8, an id coding the shape cannot use),
 * RLB_EIO, RLB_ENOMEM.
 */
int rlb_trace_writer_open(struct rlb_trace_writer **out, const char *path,
			  const struct rlb_trace_header *h,
			  const struct rlb_trace_writer_opts *opts,
			  struct rlb_err *err);

/*
 * Append one sequence.  Steps must not decrease.  Every sequence has
 * 1 to RLB_TRACE_MAX_SEQ_TOKENS tokens: an engine skips a sample with
 * none.  Errors: RLB_EINVAL (no tokens, no ids, a step below the last
 * one, gates missing or given against the header's flag, a gate that
 * fails rlb_trace_gate_ok), RLB_ERANGE (too many tokens, an id not below
 * experts), RLB_EIO, RLB_EZSTD, RLB_ENOMEM.  Errors are sticky: after
 * the first failure every call returns that code and close reports it.
 */
int rlb_trace_writer_append(struct rlb_trace_writer *w, const struct rlb_seq *seq);

/* The sticky error, if any (0 otherwise). */
int rlb_trace_writer_error(const struct rlb_trace_writer *w, struct rlb_err *err);

/* The header the trace is written with (version fields filled in). */
const struct rlb_trace_header *rlb_trace_writer_header(const struct rlb_trace_writer *w);

/*
 * Flush the last frame, write the step index and seek table, fsync, rename
 * into place, free w.  On any error (sticky or now) the output is removed
 * and the error returned.  NULL is a no-op.
 */
int rlb_trace_writer_close(struct rlb_trace_writer *w, struct rlb_err *err);

/* Free w and remove its output.  NULL is a no-op. */
void rlb_trace_writer_abort(struct rlb_trace_writer *w);

struct rlb_trace_reader;

/* Open and check the header; reads the seek table and step index if present. */
int rlb_trace_reader_open(struct rlb_trace_reader **out, const char *path,
			  struct rlb_err *err);
void rlb_trace_reader_free(struct rlb_trace_reader *r);

const struct rlb_trace_header *rlb_trace_reader_header(const struct rlb_trace_reader *r);

/* How the ids are coded in the file: "raw", "rank" or "delta" (SPEC.md). */
const char *rlb_trace_reader_id_coding(const struct rlb_trace_reader *r);

/* 1 when the file has no valid seek table (writer killed or file cut). */
int rlb_trace_reader_truncated(const struct rlb_trace_reader *r);

/*
 * The error for a step range lo:hi (hi UINT32_MAX: open-ended) that
 * selects none of the trace's steps[0..nsteps): RLB_ENOTFOUND, naming the
 * steps the trace has, or saying that it has none (and if it is truncated).
 */
int rlb_trace_no_step_err(const struct rlb_trace_reader *r, const uint32_t *steps,
			  size_t nsteps, uint32_t lo, uint32_t hi, struct rlb_err *err);

/*
 * Steps present, ascending.  Without a seek table this scans the file once
 * (and, when the step index is missing too, decodes the first block of
 * each frame, whose first record names the step; frames are checked in
 * full when they are read).
 * *steps points into the reader (valid until it is freed).
 */
int rlb_trace_reader_steps(struct rlb_trace_reader *r, const uint32_t **steps,
			   size_t *nsteps, struct rlb_err *err);

/*
 * The sequences of one step, in file order, without their routing.
 * *metas is malloc'd; the caller frees it.  RLB_ENOTFOUND if absent.
 */
int rlb_trace_reader_step_seqs(struct rlb_trace_reader *r, uint32_t step,
			       struct rlb_seq_meta **metas, size_t *n,
			       struct rlb_err *err);

/* Position so that the next rlb_trace_reader_next yields the step's first sequence. */
int rlb_trace_reader_seek_step(struct rlb_trace_reader *r, uint32_t step,
			       struct rlb_err *err);

/* Back to the first sequence of the trace. */
int rlb_trace_reader_rewind(struct rlb_trace_reader *r, struct rlb_err *err);

/*
 * Read ahead on N threads: with N >= 2 (at most RLB_TRACE_MAX_THREADS),
 * up to 2N data frames after the one rlb_trace_reader_next is in are read
 * and decompressed in the background, each thread with its own buffers,
 * so that decompression overlaps the work on the sequences.  Memory: the
 * frames read ahead stay within 256 MiB (fewer frames and threads when
 * the largest frame needs it; none when two do not fit), plus a
 * compressed frame per thread.  Sequences, errors
 * and the point where an error is returned stay those of N = 1.  A seek
 * or rewind elsewhere than the next frame drops what was read ahead.
 * N 0 or 1 stops the threads and reads on the caller's thread, as
 * without a call.  The reader stays for one thread at a time.  Errors:
 * RLB_ENOMEM (read-ahead is then off); threads that cannot be started
 * are done without.
 */
#define RLB_TRACE_MAX_THREADS 64
int rlb_trace_reader_set_threads(struct rlb_trace_reader *r, unsigned n,
				 struct rlb_err *err);

/*
 * Next sequence: returns 1 and fills *seq (arrays owned by the reader,
 * valid until the call after the next: the reader decodes into two sets
 * in turn, so one sequence can be worked on while the next is read), 0
 * at the end, or a negative error (with the byte offset in the message).
 * At the end of a truncated file it returns 0; check
 * rlb_trace_reader_truncated.
 */
int rlb_trace_reader_next(struct rlb_trace_reader *r, struct rlb_seq *seq,
			  struct rlb_err *err);

struct rlb_trace_info {
	uint64_t file_bytes;
	uint64_t raw_id_bytes;		/* ids at their stored width, uncompressed */
	uint64_t raw_bytes;		/* decompressed data frames */
	uint64_t frames;
	uint64_t steps;
	uint64_t sequences;
	uint64_t tokens;
	int has_seek_table;
	int has_step_index;
	int truncated;			/* complete frames readable, the end missing */
	uint64_t valid_bytes;		/* bytes up to the end of the last good frame */
	uint32_t first_step;		/* smallest and largest step read (0 when none) */
	uint32_t last_step;
};

/*
 * Read the whole file, verifying every frame's checksum and every record.
 * Fills info (may be NULL) even when it fails part-way (what was valid up
 * to there).
 * A truncated file whose complete frames are valid is not an error: it
 * returns 0 with info->truncated set.
 */
int rlb_trace_verify(const char *path, struct rlb_trace_info *info,
		     struct rlb_err *err);
/* The same, reading ahead on THREADS threads (rlb_trace_reader_set_threads). */
int rlb_trace_verify_threads(const char *path, unsigned threads,
			     struct rlb_trace_info *info, struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
