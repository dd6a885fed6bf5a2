/*
 * reorder.h - the cross-node expert reordering of the `relibra` policy:
 * once per step and layer, a permutation of the experts over the GPUs
 * (E/G homes per GPU) chosen from the step's per-micro-batch loads so that
 * every node gets its share of the work in every micro-batch, with a
 * penalty for experts that change node.  Pure and deterministic.
 */
#ifndef RLB_REORDER_H
#define RLB_REORDER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RLB_REORDER_MAX_GPUS 65536u
#define RLB_REORDER_MAX_EXPERTS (1u << 20)
#define RLB_REORDER_DEFAULT_PASSES 64u
/* Perturbation rounds the relibra policy runs (rounds below) */
#define RLB_REORDER_ROUNDS 4u
/* Pairs swapped at random to start a perturbation round, and the seed */
#define RLB_REORDER_KICK 3u
#define RLB_REORDER_SEED 0x9e3779b97f4a7c15ull

struct rlb_reorder_params {
	uint32_t num_gpus;	/* G: EP ranks */
	uint32_t gpus_per_node;	/* g: divides G; node n holds GPUs [n*g, (n+1)*g) */
	uint32_t num_experts;	/* E: a positive multiple of G */
	double row_s;		/* seconds per token row of one expert (fwd+bwd), >= 0 */
	double migration_s;	/* weighted seconds to move one expert between nodes, >= 0 */
	uint32_t max_passes;	/* bound on improvement passes per level (0: default) */
	double migration_in_node_s; /* weighted seconds to move one expert between GPUs of a node, >= 0 */
	/*
	 * colocate: node-level objective rows per node that a sampled token
	 * reaches (one all-to-all copy), >= 0; used when rlb_reorder_run is
	 * given sampled tokens.
	 */
	double colocate_rows;
	uint32_t rounds;	/* node-level perturbation rounds (0: none) */
};

/*
 * The colocate lever's input for one layer: sampled tokens, each with its
 * topk expert ids (ids >= E are skipped, a repeated id counts once).
 */
struct rlb_reorder_tokens {
	uint32_t n;		/* tokens */
	uint32_t topk;		/* ids per token, 1..65535 */
	const uint16_t *ids;	/* [n][topk] */
};

/* Which start the node-level search began from. */
enum rlb_reorder_start {
	RLB_REORDER_START_PREV = 0,	/* the previous placement */
	RLB_REORDER_START_STATIC = 1,	/* the Megatron contiguous layout */
	RLB_REORDER_START_LPT = 2,	/* the greedy (LPT) placement */
};

/*
 * The result of the last run.  Objectives are in node rows: the sum over
 * micro-batches of the most loaded node's rows, plus migration_rows per
 * expert whose node differs from the previous placement.  Seconds are
 * node rows / gpus_per_node * row_s.
 */
struct rlb_reorder_result {
	uint32_t *home;			/* [E]: home GPU of each expert */
	double objective_rows;		/* final node-level objective */
	double start_rows[3];		/* the starts' objectives, by enum rlb_reorder_start */
	enum rlb_reorder_start start;	/* the start kept (lowest objective) */
	uint32_t swaps;			/* improving swaps applied (both levels) */
	uint32_t passes;		/* node-level passes run */
	uint32_t moved;			/* experts whose node changed */
	uint32_t kept;			/* perturbation rounds kept */
};

/*
 * The planner: parameters, last result, and workspace.  Fields below `res`
 * are private.  One planner per thread.
 */
struct rlb_reorder {
	struct rlb_reorder_params p;
	struct rlb_reorder_result res;
	double migration_rows;		/* migration_s in node rows (0 when row_s is 0) */
	double migration_gpu_rows;	/* migration_in_node_s in GPU rows */

	uint32_t cap_mbs;		/* micro-batches the buffers hold */
	int64_t *lt;			/* [E][M] expert loads, expert-major */
	int64_t *tot;			/* [E] expert loads over the step */
	int64_t *bl;			/* [M][bins] bin loads */
	int64_t *top;			/* [M][3] largest bin loads */
	uint32_t *topi;			/* [M][2] their bins */
	uint32_t *items;		/* [E] items of the current level */
	uint32_t *order;		/* [E] LPT order */
	uint32_t *bin;			/* [E] current bin of each item */
	uint32_t *best;			/* [E] best placement so far */
	uint32_t *prev_bin;		/* [E] previous bin (or none) */
	uint32_t *static_bin;		/* [E] static bin */
	uint32_t *fill;			/* [bins] items per bin */
	uint32_t *node;			/* [E] chosen node of each expert */
	uint32_t *prev_node;		/* [E] */
	uint32_t *members;		/* [E] experts by node */
	/* colocate (see reorder.c) */
	uint32_t ntok, ktok;		/* sampled tokens, ids per token */
	uint16_t *tids;			/* [tokens][ktok] each token's distinct experts */
	uint16_t *tlen;			/* [tokens] how many */
	uint16_t *tcnt;			/* [tokens][nodes] a token's experts per node */
	int32_t *tfree;			/* [E][nodes] tokens of e with none on the node */
	int32_t *talone;		/* [E] tokens of e alone on e's node */
	uint32_t *tstart;		/* [E + 1] each expert's tokens in tlist */
	uint32_t *tlist;		/* token indices by expert */
	uint32_t *tmark;		/* [tokens] marks of the swap search */
	uint32_t tgen;			/* the last mark */
	uint32_t *tstamp;		/* [nodes] node marks while counting */
	uint64_t tcopies;		/* the nodes the sampled tokens reach */
	uint64_t tcopies_save;		/* these, tcnt, tfree, talone before a perturbation */
	uint16_t *tcnt_save;
	int32_t *tfree_save;
	int32_t *talone_save;
	size_t tcap_ids, tcap_len, tcap_cnt, tcap_list, tcap_mark, tcap_cnt_save;
	int64_t *sx;			/* [bins][M] swap search: largest load besides two bins */
	int64_t *sq;			/* [bins][M] swap search: a bin's load plus the item's */
	int64_t *sp;			/* [M] swap search: the item's bin without it */
	int64_t *dm;			/* [E] swap search: each swap's summed largest loads */
};

/*
 * Check p and size the workspace.  Requirements: num_gpus >= 1,
 * gpus_per_node >= 1 dividing num_gpus, num_experts a positive multiple of
 * num_gpus, the limits above, row_s and migration_s finite and >= 0.
 * Errors: RLB_EINVAL, RLB_ENOMEM (r is then released).  Release with
 * rlb_reorder_release.
 */
int rlb_reorder_init(struct rlb_reorder *r, const struct rlb_reorder_params *p,
		     struct rlb_err *err);

/* Free the planner's arrays.  Safe on a zeroed or released planner. */
void rlb_reorder_release(struct rlb_reorder *r);

/*
 * Place one layer into r->res.
 *
 * load[M][E] is the token rows of each expert in each micro-batch (all
 * sources together); prev_home[E] the previous step's home GPUs, NULL for
 * the static layout (expert e on GPU e / (E / G)); it must hold E/G
 * experts per GPU.  tok (or NULL) holds sampled tokens of the layer:
 * with it the node-level objective also adds colocate_rows for every
 * node that a sampled token reaches (the `colocate` lever: a token
 * crosses the network once per node that holds one of its experts, so
 * experts that the same tokens use gain by sharing a node).  The swap
 * search then ranks candidates as if no token held both experts of a
 * swap, and applies the best only when its exact change, tokens held by
 * both included, is a gain.
 *
 * 1. Nodes (N = G / g, E / N experts each).  Objective: sum over
 *    micro-batches of the largest node load, plus migration_rows for every
 *    expert whose node differs from prev_home's.  Three starts are scored:
 *    the previous placement, the static layout, and a greedy placement
 *    (experts by step load descending, lower expert first on ties; each to
 *    the node with room whose placement raises the sum of the largest
 *    node loads least; smaller node load, then lower node on ties).  The
 *    lowest objective is kept (ties in that order), so the result is never
 *    worse than the previous placement or the static layout.  Then
 *    improving swaps: passes over the experts in id order; for each, the
 *    swap with an expert of another node that lowers the objective most
 *    (first such expert on ties) is applied when it lowers it; until a
 *    pass applies none, at most max_passes passes.  Then `rounds`
 *    perturbation rounds (iterated local search): each swaps
 *    RLB_REORDER_KICK pairs of experts drawn at random (xorshift64 from
 *    RLB_REORDER_SEED, restarted for every layer; a pair may fall in one
 *    node, a no-op), runs the improving swaps again and keeps the result
 *    when its objective is lower than the best so far, else restores it.
 *    The swaps alone stop at a placement that no single swap improves;
 *    three at once reach past it (4 rounds lower the objective by 1% on
 *    the EP64 planner benchmark; docs/cost-model.md, "Planner constants").
 *    Stability: the greedy start ignores migration, so it does not depend
 *    on prev_home.  Hence when the loads repeat, the previous result (if
 *    its search converged) scores at least as well as every start and
 *    admits no improving swap (any swap now costs 2 * migration_rows,
 *    more than it could gain last time); an expert then changes node only
 *    when a perturbation round finds a placement whose lower load pays
 *    for its moves.
 * 2. GPUs, per node (E / G experts each).  The same search on the node's
 *    experts and GPUs, objective the sum over micro-batches of the largest
 *    GPU load plus migration_in_node_s (in GPU rows) for every expert not
 *    on its kept GPU.  The kept placement (also the first start): experts
 *    that stay in the node keep their previous GPU, experts that arrive
 *    fill the freed slots in expert order (lowest GPU first); without
 *    prev_home the static layout.  The other starts are the node's
 *    experts in id order E/G per GPU and the greedy placement.  So
 *    experts move inside a node only when that pays for the copy.
 *
 * Cost: O(passes * E * E * M) for the node level (E * (E - E/N) pairs per
 * pass, each O(M), four micro-batches at a time where the CPU has AVX2),
 * times 1 + rounds; much less for the GPU level; with tokens, O(T * topk
 * * (topk + N)) per pass and round to set up and, per swap applied, the
 * same for the tokens of its two experts.  Allocates only when M or the
 * tokens grow.
 * Errors: RLB_EINVAL (prev_home out of range or not E/G per GPU),
 * RLB_ERANGE (too many tokens), RLB_ENOMEM.
 */
int rlb_reorder_run(struct rlb_reorder *r, const uint64_t *load, uint32_t M,
		    const uint32_t *prev_home, const struct rlb_reorder_tokens *tok,
		    struct rlb_err *err);

/*
 * 0 makes the swap search use its plain C loop on every CPU (the AVX2 one
 * gives the same sums; the tests compare them).  Default 1.
 */
extern int rlb_reorder_simd;

/*
 * The node-level objective (node rows, see above) of placement home[E]
 * against prev_home[E] (NULL: the static layout) for load[M][E].
 */
double rlb_reorder_objective_rows(const struct rlb_reorder *r,
				  const uint64_t *load, uint32_t M,
				  const uint32_t *home, const uint32_t *prev_home);

/*
 * Cost constants from the config, documented in man/relibra.1:
 *   row_s: one token row through one expert, forward and backward.
 *     Forward is M GEMMs of width x expert_ffn (M = 3 for SwiGLU, 2
 *     without gated_ffn; width moe_latent for latent MoE, else hidden),
 *     2 * M * width * expert_ffn flops; backward twice that; at
 *     peak_tflops * gemm_eff_max:
 *     6 * M * width * expert_ffn / (peak_tflops * 1e12 * gemm_eff_max).
 *   migration_s: one expert's M * width * expert_ffn parameters times
 *     migration_bytes_per_param over the EP group's aggregate inter-node
 *     bandwidth, ep_size * rdma_gbps * 1e9 bytes/s: a step's moves run
 *     concurrently over every GPU's RDMA link, so one more move costs its
 *     share of that (unweighted; the balancer multiplies by
 *     migration_weight).
 * Both are 0 when a factor they need is 0 (no model shape).
 */
void rlb_reorder_costs(const struct rlb_config *cfg, double *row_s,
		       double *migration_s);

#ifdef __cplusplus
}
#endif

#endif
