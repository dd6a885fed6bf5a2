/*
 * eplb.h - DeepSeek's expert-parallelism load balancer (EPLB): replicate hot
 * experts into redundant physical slots and place the slots on GPUs, from
 * per-layer expert loads.  Used by the eplb and eplb-oracle policies and by
 * the EPLB-compatible export (phy2log / log2phy / logcnt JSON).
 */
#ifndef RLB_EPLB_H
#define RLB_EPLB_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

struct json_t;			/* jansson's json_t */

/* Limits on the shape (indices are stored as int32). */
#define RLB_EPLB_MAX_EXPERTS (1u << 20)
#define RLB_EPLB_MAX_SLOTS (1u << 22)
#define RLB_EPLB_MAX_LAYERS (1u << 16)

struct rlb_eplb_params {
	uint32_t num_slots;	/* P: physical expert slots, all GPUs together */
	uint32_t num_groups;	/* G: expert groups (1 when the model has none) */
	uint32_t num_nodes;	/* N: nodes (fast intra-node network) */
	uint32_t num_gpus;	/* X: GPUs, all nodes together */
};

/*
 * The result, all arrays row-major and owned by the struct.  Physical slot s
 * lives on GPU s / slots_per_gpu; GPU x lies on node x / (num_gpus /
 * num_nodes).
 *
 * log2phy lists each expert's slots in REPLICA order (replica 0 first, as the
 * reference eplb.py does), padded with -1 up to max_count, the largest logcnt
 * over all layers.  Replica 0 is not necessarily the lowest slot.  vLLM's
 * export orders each expert's slots by ascending slot instead; sort a row to
 * convert.
 */
struct rlb_eplb_result {
	size_t num_layers;
	size_t num_experts;	/* logical experts */
	size_t num_slots;	/* P */
	uint32_t num_gpus;
	uint32_t num_nodes;
	uint32_t slots_per_gpu;	/* P / X */
	int hierarchical;	/* 1: hierarchical policy, 0: global */
	size_t max_count;	/* third dimension of log2phy */
	int32_t *phy2log;	/* [layers][slots]: logical expert of each slot */
	int32_t *phyrank;	/* [layers][slots]: replica rank of each slot */
	int32_t *log2phy;	/* [layers][experts][max_count], -1 padded */
	int32_t *logcnt;	/* [layers][experts]: replicas, >= 1, sums to P */
};

/*
 * Check a shape and parameters against EPLB's requirements:
 * layers >= 1, experts >= 1, G, N, X >= 1, X a multiple of N, P a multiple
 * of X, experts a multiple of G, P >= experts (and the limits above).  The
 * last three also hold for the global policy, where the reference does not
 * look at G and N: a layout that breaks them is a configuration mistake.
 * Returns 0 or RLB_EINVAL with a message naming the values.
 */
int rlb_eplb_check(size_t num_layers, size_t num_experts,
		   const struct rlb_eplb_params *p, struct rlb_err *err);

/*
 * Run EPLB on weight[num_layers][num_experts] (loads: finite, >= 0) and fill
 * res (initialised here; release with rlb_eplb_result_release, also after a
 * failure, where it is left empty).
 *
 * Policy, as the reference deepseek-ai/EPLB eplb.py rebalance_experts: when
 * G % N == 0 the hierarchical policy, else the global one (hierarchical with
 * one group and one node).  Per layer:
 *  1. pack the G groups (load = sum of their experts) onto the N nodes with
 *     balanced packing, G/N groups per node;
 *  2. within each node, replicate its E/N experts into P/N slots: P/N - E/N
 *     times, add a copy to the expert with the highest load per copy
 *     (load / copies; lowest index on ties, in the node's packed order);
 *  3. within each node, pack the P/N replicas (load = expert load / copies)
 *     onto its X/N GPUs with balanced packing, P/X per GPU.
 * Balanced packing: items by descending load, stable (equal loads keep their
 * index order); each item to the lightest pack that still has room, lowest
 * pack index on ties; when each pack holds exactly one item, item i goes to
 * pack i.  A slot's position inside its GPU is its rank in the pack.
 *
 * Arithmetic is in double; the reference computes in float32, so the two can
 * only differ where float32 rounding changes a comparison (non-integer
 * loads, or sums above 2^24).  Deterministic; O(layers * (P log P + E log E)).
 * Errors: RLB_EINVAL (parameters, negative or non-finite weight, naming the
 * layer and expert), RLB_ENOMEM.
 */
int rlb_eplb_rebalance(const double *weight, size_t num_layers,
		       size_t num_experts, const struct rlb_eplb_params *p,
		       struct rlb_eplb_result *res, struct rlb_err *err);

/* Free res's arrays and zero it.  Safe on a zeroed or released result. */
void rlb_eplb_result_release(struct rlb_eplb_result *res);

/* GPU holding physical slot `slot`. */
static inline uint32_t rlb_eplb_slot_gpu(const struct rlb_eplb_result *res,
					 size_t slot)
{
	return (uint32_t)(slot / res->slots_per_gpu);
}

/*
 * Per-GPU placement of one layer: the logical experts in GPU `gpu`'s
 * slots_per_gpu slots, in slot order (a pointer into res->phy2log, valid
 * while res is).  NULL when layer or gpu is out of range.
 */
const int32_t *rlb_eplb_gpu_experts(const struct rlb_eplb_result *res,
				    size_t layer, uint32_t gpu);

/*
 * Read a weight matrix [layers][experts] of non-negative numbers (a JSON
 * array of equally long arrays) from the JSON file at path ("-": stdin).
 * On success *weight (free() it), *num_layers and *num_experts are set.
 * Errors: RLB_EIO (cannot open or read), RLB_EPARSE (invalid JSON, with
 * line, column and byte offset; wrong shape or value, naming the 0-based
 * row and column), RLB_ENOMEM.  Messages start with "weights 'PATH': ".
 */
int rlb_eplb_weights_load(const char *path, double **weight,
			  size_t *num_layers, size_t *num_experts,
			  struct rlb_err *err);

/*
 * The same check and conversion on an already parsed JSON value; `name`
 * labels the messages ("weights 'NAME': ...").
 */
int rlb_eplb_weights_from_json(const struct json_t *root, const char *name,
			       double **weight, size_t *num_layers,
			       size_t *num_experts, struct rlb_err *err);

/*
 * The result as a new JSON object {"phy2log": [[...]], "log2phy": [[[...]]],
 * "logcnt": [[...]]} (keys in that order; log2phy in replica order).  The
 * caller owns the reference (json_decref).  NULL and RLB_ENOMEM on failure.
 */
struct json_t *rlb_eplb_result_to_json(const struct rlb_eplb_result *res,
				       struct rlb_err *err);

/*
 * The same object as compact JSON text without a trailing newline, ready
 * to print; the caller frees it with free().  NULL and RLB_ENOMEM on
 * failure.
 */
char *rlb_eplb_result_to_string(const struct rlb_eplb_result *res,
				struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
