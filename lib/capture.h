/*
 * capture.h - producing traces: the calibrated synthetic RL workload and
 * importers for the rollout engines' routing dumps.  Both write through a
 * struct rlb_trace_writer, which is also the C API for engines.
 */
#ifndef RLB_CAPTURE_H
#define RLB_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "err.h"
#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Progress callback: units done of total (total 0 when unknown). */
typedef void (*rlb_progress_fn)(void *ctx, uint64_t done, uint64_t total,
				const char *unit);

/* Fill the workload section with its calibrated defaults (lib/synth.c). */
void rlb_workload_defaults(struct rlb_workload_config *w);

/*
 * Generate cfg->workload.steps steps of synthetic RL routing for cfg's
 * model into w, deterministically from seed.  uniform != 0 draws every
 * token's experts uniformly (a control trace).  w's header must have cfg's
 * model shape (rlb_trace_header_check: RLB_EMISMATCH).
 */
int rlb_synth_generate(const struct rlb_config *cfg, uint64_t seed,
		       int uniform, struct rlb_trace_writer *w,
		       rlb_progress_fn progress, void *progress_ctx,
		       struct rlb_err *err);

/*
 * Where rlb_synth_generate_cb delivers the workload, step by step:
 * begin_step (may be NULL) gets every sequence's metadata of the step in
 * file order before its first sequence; seq gets each sequence (index in
 * the step, arrays valid during the call only); end_step (may be NULL)
 * follows the step's last sequence.  A negative return stops generation
 * and is returned (the callback fills err).
 */
struct rlb_synth_sink {
	void *ctx;
	int (*begin_step)(void *ctx, uint32_t step, const struct rlb_seq_meta *seqs,
			  size_t n, struct rlb_err *err);
	int (*seq)(void *ctx, uint32_t index, const struct rlb_seq *seq,
		   struct rlb_err *err);
	int (*end_step)(void *ctx, uint32_t step, struct rlb_err *err);
};

/*
 * rlb_synth_generate into a sink instead of a trace writer (calibration,
 * tests).  Same sequences for the same (cfg, seed, uniform).  Memory: the
 * model's preference tables plus one sequence's ids.  Errors:
 * RLB_ECONFIG (shape or knobs the generator cannot use), RLB_ENOMEM, and
 * whatever the sink returns.
 */
int rlb_synth_generate_cb(const struct rlb_config *cfg, uint64_t seed,
			  int uniform, const struct rlb_synth_sink *sink,
			  rlb_progress_fn progress, void *progress_ctx,
			  struct rlb_err *err);

enum rlb_import_format {
	RLB_IMPORT_SGLANG,	/* JSON lines of generate responses */
	RLB_IMPORT_VLLM,	/* .npy files or a directory of them */
	RLB_IMPORT_MEGATRON,	/* router-trace JSON lines */
	RLB_IMPORT_JSONL,	/* relibra's simple JSON lines */
};

int rlb_import_format_from_name(const char *name, enum rlb_import_format *f,
				struct rlb_err *err);

/* What an import read and wrote. */
struct rlb_import_stats {
	uint64_t records;	/* input records read */
	uint64_t sequences;	/* sequences written */
	uint64_t tokens;	/* their tokens */
	uint64_t recomputed;	/* megatron records dropped as activation recompute */
	uint64_t unfinished;	/* sglang streamed requests whose last chunk never came */
};

struct rlb_import_opts {
	enum rlb_import_format format;
	int64_t step;		/* >= 0: step id for every record; -1: from the input */
	int64_t group;		/* >= 0: prompt group for every record; -1: from the input */
	uint32_t group_size;	/* samples per group when ids are assigned in order (0: 1) */
	int gates;		/* 1: keep gate weights; the writer's header must have RLB_TRACE_F_GATES */
	int keep_repeats;	/* megatron: 1 keeps what looks like a recompute's repeat */
	struct rlb_import_stats *stats;	/* when set, filled in on success */
};

/*
 * Import PATH ("-" = stdin, read incrementally) into w, dropping dense
 * layers per cfg's layer layout (rlb_model_moe_layer_index).  Errors name the record number and
 * field.  w's header must have cfg's model shape (rlb_trace_header_check:
 * RLB_EMISMATCH).
 */
int rlb_import(const struct rlb_import_opts *opts, const char *path,
	       const struct rlb_config *cfg, struct rlb_trace_writer *w,
	       rlb_progress_fn progress, void *progress_ctx,
	       struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
