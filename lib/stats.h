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
	struct rlb_dist mb_gpu;		/* per (micro-batch, layer) GPU max/mean */
	struct rlb_dist mb_node;	/* per (micro-batch, layer) node max/mean */
	struct rlb_dist step_gpu;	/* per (step, layer) whole-step GPU max/mean */
	double hot_churn_mb;		/* over all layers */
	double hot_churn_step;
	struct rlb_layer_stats *layer;	/* [layers] */
};

/*
 * Compute the statistics of every step of the trace with the config's EP
 * size, gpus_per_node, micro_batch_tokens and PACK, under the static
 * layout.  Streams the trace step by step.
 */
int rlb_trace_stats_compute(struct rlb_trace_reader *r,
			    const struct rlb_config *cfg, enum rlb_pack pack,
			    struct rlb_trace_stats *st, struct rlb_err *err);
void rlb_trace_stats_release(struct rlb_trace_stats *st);

/* Percentiles of an array (sorted in place); linear interpolation. */
void rlb_dist_compute(struct rlb_dist *d, double *v, size_t n);

#endif
