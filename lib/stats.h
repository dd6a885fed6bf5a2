/*
 * stats.h - load-imbalance statistics of a trace under a micro-batch
 * schedule and the static layout: what `relibra inspect --stats` prints
 * and what the synthetic generator is calibrated against.
 */
#ifndef RLB_STATS_H
#define RLB_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "err.h"
#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rlb_dist {
	uint64_t n;
	double mean;
	double p50;
	double p90;
	double p99;
	double max;
};

/* Statistics of one MoE layer. */
struct rlb_layer_stats {
	struct rlb_dist mb_gpu;		/* per micro-batch GPU max/mean */
	struct rlb_dist step_gpu;	/* per step (micro-batches summed) GPU max/mean */
	double hot_churn_mb;		/* share of consecutive micro-batches whose hottest expert differs */
	double hot_churn_step;		/* same between consecutive steps */
	struct rlb_dist mb_node;	/* per micro-batch node max/mean */
};

struct rlb_trace_stats {
	enum rlb_pack pack;
	uint32_t ranks;			/* EP ranks (GPUs) */
	uint32_t nodes;			/* EP ranks / gpus_per_node */
	uint32_t mb_tokens;
	uint32_t layers;
	uint64_t steps;
	uint64_t micro_batches;		/* over all steps */
	struct rlb_dist prompts_per_mb;	/* distinct prompt groups per micro-batch */
	struct rlb_dist rank_tokens_mb;	/* per micro-batch busiest rank's tokens over the mean */
	struct rlb_dist mb_gpu;		/* per (micro-batch, layer) GPU max/mean */
	struct rlb_dist mb_node;	/* per (micro-batch, layer) node max/mean */
	struct rlb_dist step_gpu;	/* per (step, layer) whole-step GPU max/mean */
	double hot_churn_mb;		/* over all layers */
	double hot_churn_step;
	struct rlb_layer_stats *layer;	/* [layers] */
	uint32_t gpus_per_node;		/* EP ranks per node used for mb_node */
	uint64_t tokens;		/* over all steps */
	uint64_t mb_pairs;		/* (consecutive micro-batch pair, layer) cases behind hot_churn_mb */
	uint64_t step_pairs;		/* (consecutive step pair, layer) cases behind hot_churn_step */
};

/*
 * Definitions (static layout: expert e lives on rank e / (experts /
 * ranks); node = rank / gpus_per_node):
 *  - GPU max/mean of a (micro-batch, layer): the largest number of expert
 *    rows (token-expert selections) routed to one rank's experts divided
 *    by the mean over ranks; node max/mean likewise over nodes.
 *  - whole-step GPU max/mean of a (step, layer): the same with all
 *    micro-batches of the step summed.
 *  - hottest expert: the expert with most rows (lowest id on ties).
 *    hot_churn_mb: share of (consecutive micro-batch pair of a step,
 *    layer) cases whose hottest expert differs; hot_churn_step: the same
 *    for consecutive steps with whole-step loads.  0 when there is no pair.
 *  - prompts per micro-batch: distinct prompt groups with tokens in it.
 *  - rank tokens max/mean of a micro-batch: the most tokens on one rank
 *    over the mean over all ranks (what sets the all-to-all's busiest
 *    sender, whatever the placement).
 * A (micro-batch, layer) without rows is left out of the distributions.
 */

/*
 * Compute the statistics of the trace's steps in [step_lo, step_hi] with
 * the config's EP size, gpus_per_node, micro_batch_tokens and PACK, under
 * the static layout.  The shape (layers, experts, topk) comes from the
 * trace header.  Streams the trace step by step (rlb_step_stream; memory:
 * one step's per-(micro-batch, layer, expert) counts plus 16 bytes per
 * (micro-batch, layer)); with a pool (lib/pool.h; NULL: this thread
 * alone) its threads count each sequence in blocks of layers and as
 * many read the trace ahead (rlb_trace_reader_set_threads, off again on
 * return), with the same result for any number of threads.  No step in
 * the range gives
 * empty statistics.  st is initialised here; release it with
 * rlb_trace_stats_release.  Errors: those of the reader and of
 * rlb_step_stream, RLB_EINVAL (experts not divisible by the EP size, EP
 * size not a multiple of gpus_per_node), RLB_ENOMEM.
 */
struct rlb_pool;
int rlb_trace_stats_compute(struct rlb_trace_reader *r,
			    const struct rlb_config *cfg, enum rlb_pack pack,
			    uint32_t step_lo, uint32_t step_hi,
			    struct rlb_pool *pool, struct rlb_trace_stats *st,
			    struct rlb_err *err);
/* Free st's arrays and zero it.  NULL is a no-op. */
void rlb_trace_stats_release(struct rlb_trace_stats *st);

/*
 * Percentiles of an array (sorted in place); linear interpolation between
 * the closest ranks: p(q) = v[floor(h)] + (h - floor(h)) * (v[floor(h)+1] -
 * v[floor(h)]) with h = q * (n - 1).  n == 0 gives all zeros.
 */
void rlb_dist_compute(struct rlb_dist *d, double *v, size_t n);

/*
 * Streaming accumulator: the same statistics without a trace file (the
 * synthetic generator's calibration uses it).  Per step: begin_step with
 * the step's sequence lengths and prompt groups in file order, add_seq
 * once per sequence (any order), end_step.  finish fills a struct
 * rlb_trace_stats like rlb_trace_stats_compute.
 */
struct rlb_stats_params {
	uint32_t layers;	/* MoE layers stored per token */
	uint32_t experts;	/* routed experts per layer */
	uint32_t topk;
	uint32_t ranks;		/* EP ranks; must divide experts */
	uint32_t gpus_per_node;	/* ranks per node (capped at ranks); must divide ranks */
	uint32_t mb_tokens;	/* token budget per rank per micro-batch */
	enum rlb_pack pack;
};

struct rlb_stats_acc;

/* Errors: RLB_EINVAL (zero or inconsistent parameters), RLB_ENOMEM. */
int rlb_stats_acc_new(struct rlb_stats_acc **out,
		      const struct rlb_stats_params *p, struct rlb_err *err);

/*
 * Start a step: builds its schedule.  groups[i] is the prompt group of
 * sequence i.  Errors: RLB_EINVAL (a step already open), those of
 * rlb_schedule_build, RLB_ENOMEM.
 */
int rlb_stats_acc_begin_step(struct rlb_stats_acc *a, uint32_t step,
			     const uint32_t *seq_tokens, const uint32_t *groups,
			     size_t nseqs, struct rlb_err *err);

/* Count sequence SEQ_INDEX of the open step (ids layout of struct rlb_seq). */
void rlb_stats_acc_add_seq(struct rlb_stats_acc *a, uint32_t seq_index,
			   const struct rlb_seq *seq);

/* Close the step: its per-(micro-batch, layer) and whole-step values. */
int rlb_stats_acc_end_step(struct rlb_stats_acc *a, struct rlb_err *err);

/*
 * Fill st (initialised here; release with rlb_trace_stats_release) from
 * every closed step.  The accumulator stays valid (more steps may follow).
 */
int rlb_stats_acc_finish(struct rlb_stats_acc *a, struct rlb_trace_stats *st,
			 struct rlb_err *err);

/* NULL is a no-op. */
void rlb_stats_acc_free(struct rlb_stats_acc *a);

#ifdef __cplusplus
}
#endif

#endif
