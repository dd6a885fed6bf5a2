/*
 * capture.h - producing traces: the calibrated synthetic RL workload and
 * importers for the rollout engines' routing dumps.  Both write through a
 * struct rlb_trace_writer, which is also the C API for engines.
 */
#ifndef RLB_CAPTURE_H
#define RLB_CAPTURE_H

#include <stdint.h>

#include "config.h"
#include "err.h"
#include "trace.h"

/* Progress callback: units done of total (total 0 when unknown). */
typedef void (*rlb_progress_fn)(void *ctx, uint64_t done, uint64_t total,
				const char *unit);

/* Fill the workload section with its calibrated defaults (lib/synth.c). */
void rlb_workload_defaults(struct rlb_workload_config *w);

/*
 * Generate cfg->workload.steps steps of synthetic RL routing for cfg's
 * model into w, deterministically from seed.  uniform != 0 draws every
 * token's experts uniformly (a control trace).
 */
int rlb_synth_generate(const struct rlb_config *cfg, uint64_t seed,
		       int uniform, struct rlb_trace_writer *w,
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

struct rlb_import_opts {
	enum rlb_import_format format;
	int64_t step;		/* >= 0: step id for every record; -1: from the input */
	int64_t group;		/* >= 0: prompt group for every record; -1: from the input */
	uint32_t group_size;	/* samples per group when ids are assigned in order (0: 1) */
};

/*
 * Import PATH ("-" = stdin, read incrementally) into w, dropping dense
 * layers per cfg's first_dense_layers.  Errors name the record number and
 * field.
 */
int rlb_import(const struct rlb_import_opts *opts, const char *path,
	       const struct rlb_config *cfg, struct rlb_trace_writer *w,
	       rlb_progress_fn progress, void *progress_ctx,
	       struct rlb_err *err);

#endif
