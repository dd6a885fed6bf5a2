/*
 * sim.h - the cost model: the predicted time of a training step under a
 * plan (expert GEMMs on the efficiency curve, DeepEP-style dispatch and
 * combine over NVLink and RDMA, replica copies and gradient reduction,
 * migration, planning, dense layers), the uniform-traffic and same-traffic
 * ideals, and imbalance statistics.  Every formula: docs/cost-model.md.
 */
#ifndef RLB_SIM_H
#define RLB_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "err.h"
#include "plan.h"
#include "schedule.h"
#include "stats.h"
#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rlb_pool;

/* ------------------------------------------------------------------ */
/* Constants of the model, derived from a configuration (SI units).    */

struct rlb_sim_params {
	double peak_flops;		/* peak_tflops * 1e12, FLOP/s per GPU */
	double gemm_eff_max;
	double gemm_eff_half_rows;
	double hbm_bytes_per_s;		/* hbm_gbps * 1e9 */
	double nvlink_bytes_per_s;	/* nvlink_gbps * 1e9, per GPU per direction */
	double nvlink_latency_s;
	double rdma_bytes_per_s;	/* rdma_gbps * 1e9, per GPU per direction */
	double rdma_latency_s;
	double expert_params;		/* M * width * expert_ffn, M = rlb_model_ffn_matrices, width rlb_model_expert_width */
	double expert_flops_per_row;	/* 2 * expert_params (forward) */
	double expert_weight_bytes;	/* expert_params * 2 (bf16) */
	double expert_grad_bytes;	/* expert_params * 2 (bf16 gradient) */
	double migration_bytes;		/* expert_params * migration_bytes_per_param */
	double token_bytes;		/* width * 2: one token copy (bf16) */
	double planner_overlap;		/* share of planning hidden (0..1) */
	uint32_t passes;		/* compute passes: 3 (forward + 2x backward), 4 with recompute */
	uint32_t a2a_phases;		/* all-to-all phases: 4 (dispatch + combine, forward and backward), 6 with recompute */
	uint32_t gpus_per_node;
	/* the dense part */
	double dense_time_s;		/* model.dense_time_ms / 1e3 (0: estimate) */
	double hidden;
	double moe_latent;		/* 0, or the latent of the MoE layers' projections */
	double q_heads, kv_heads, head_dim;
	double experts;			/* routed experts (router GEMM width) */
	double shared_experts, shared_expert_ffn;
	double dense_ffn;
	/* the layer layout and attention window (rlb_model_* of config.h read it) */
	struct rlb_model_config layout;
};

/* Fill p from the configuration (no validation: rlb_config_validate). */
void rlb_sim_params_init(struct rlb_sim_params *p, const struct rlb_config *cfg);

/*
 * Forward time in seconds of one routed expert (three matrices with
 * gated_ffn, two without) computing ROWS token rows on one GPU: 0 for 0
 * rows, else
 * max(flops / (peak * eta(rows)), weight bytes / HBM bandwidth) with
 * flops = expert_flops_per_row * rows and
 * eta(m) = gemm_eff_max * m / (m + gemm_eff_half_rows).
 */
double rlb_sim_gemm_s(const struct rlb_sim_params *p, uint64_t rows);

/* ------------------------------------------------------------------ */
/* Traffic: token copies of the dispatch, from the token-level routing. */

/*
 * Token copies of one dispatch (the combine moves the same copies back),
 * per (micro-batch, layer, GPU); index (mb * layers + layer) * ranks + gpu.
 * Counting (DeepEP): a token on source GPU s (node S, local index
 * s mod gpus_per_node) whose selected instances lie on the set D of
 * GPUs (one copy per GPU, however many of its experts a GPU serves):
 *   - for each node N != S holding a GPU of D: one RDMA copy sent by s
 *     and received by the rail GPU r = N * gpus_per_node + (s mod
 *     gpus_per_node); then one NVLink copy from r to each GPU of D in N
 *     other than r;
 *   - for each GPU d of D in node S other than s: one NVLink copy s -> d.
 * The instance serving each (token, expert) follows the plan: the rows
 * that source s sends to an expert, in the source's token order (chunks
 * in (sequence, start) order), go to the expert's instances in instance
 * order, rows[s][i] of rlb_step_plan_split to instance i.
 * rdma_to_node, NULL unless rlb_traffic_count_nodes asked for it, splits
 * each GPU's RDMA copies by destination node: what the relayed dispatch
 * (struct rlb_sim_opts) spreads over a node's GPUs.
 * Fields below `rows` are private.
 */
/* Workspace of one counting thread (private). */
struct rlb_traffic_ws {
	struct rlb_traffic_state *gstate; /* [ranks] the entries of unreplicated cells */
	uint64_t *hist;			/* [ranks] tokens per destination GPU */
	uint64_t *nhist;		/* [nodes] tokens per destination node */
	uint32_t *seen;			/* [ranks] stamp of the last token counted */
	uint32_t *nseen;		/* [nodes] */
	uint32_t stamp;
	uint64_t rows, unplanned_rows;	/* to add to the traffic's */
};

struct rlb_traffic {
	uint32_t micro_batches;
	uint32_t layers;
	uint32_t ranks;
	uint32_t experts;
	uint32_t gpus_per_node;
	uint64_t *rdma_send;		/* [mb][layer][gpu] */
	uint64_t *rdma_recv;
	uint64_t *nvlink_send;
	uint64_t *nvlink_recv;
	uint32_t *rdma_to_node;		/* [mb][layer][gpu][node]: the RDMA copies of rdma_send by destination node */
	uint64_t rows;			/* (token, expert) selections counted */
	uint64_t unplanned_rows;	/* rows past what the plan gives their source (plan and trace disagree); sent to the home copy */

	uint32_t *cell;			/* [mb][layer][expert]: the GPU, or RLB_TRAFFIC_SPLIT and the cell's first entry of state (one per source) */
	struct rlb_traffic_state *state; /* [ranks] per replicated cell (unreplicated: ws.gstate) */
	struct rlb_traffic_split *split; /* [nsplit] replicated cells */
	size_t nsplit;
	uint32_t *split_gpu;		/* their instances' GPUs */
	uint32_t *split_rows;		/* per replicated cell [ranks][instances] */
	uint32_t *node_of;		/* [ranks] */
	struct rlb_traffic_ws ws;	/* of rlb_traffic_add_seq */
};

#define RLB_TRAFFIC_SPLIT 0x80000000u

/*
 * Prepare t for the step of PLAN (NULL: the static layout, expert e on
 * GPU e / (experts / ranks), one instance each) with the dimensions of
 * the loads L (micro-batches, layers, ranks, experts), zero counts.
 * Replicated cells take rlb_step_plan_split of L.  gpus_per_node is capped
 * at the ranks and must divide them; with a plan it must equal the plan's.
 * t is initialised here; release it with rlb_traffic_release (also after
 * a failure).  Errors: RLB_EINVAL (dimensions), RLB_EMISMATCH (plan and
 * loads of different shapes), RLB_ERANGE (more than 65536 ranks),
 * RLB_ENOMEM.  Memory: 32 bytes per (mb, layer, GPU), 4 per (mb, layer,
 * expert), and for every replicated cell ranks * (8 + 4 * instances) + 20
 * bytes.
 */
int rlb_traffic_init(struct rlb_traffic *t, const struct rlb_step_plan *plan,
		     const struct rlb_loads *l, uint32_t gpus_per_node,
		     struct rlb_err *err);
/*
 * Also count rdma_to_node, which a simulator with opts.relay needs:
 * between rlb_traffic_init and the first count.  Memory: 4 * nodes bytes
 * per (mb, layer, GPU).  Errors: RLB_EINVAL (called too late), RLB_ENOMEM.
 */
int rlb_traffic_count_nodes(struct rlb_traffic *t, struct rlb_err *err);
void rlb_traffic_release(struct rlb_traffic *t);

/*
 * Count the dispatch copies of sequence SEQ_INDEX of the schedule's step
 * (seq as the trace reader yields it; topk from the trace header).  Call
 * it for the step's sequences in ascending index order: the instance
 * choice follows each source's token order.  Tokens past seq->tokens,
 * ids >= experts and chunks outside t's dimensions are skipped.  Never
 * allocates.
 */
void rlb_traffic_add_seq(struct rlb_traffic *t, const struct rlb_schedule *s,
			 uint32_t seq_index, const struct rlb_seq *seq,
			 uint32_t topk);

/*
 * Convenience: stream step s->step from the reader once and add every
 * sequence to each of the NT traffics (e.g. the policy's and the static
 * layout's).  Errors: those of the reader, RLB_ENOTFOUND (no such step),
 * RLB_EMISMATCH (a traffic's dimensions differ from the schedule's, or a
 * sequence's length from its chunks), RLB_ECORRUPT (the step ends early),
 * RLB_EMISMATCH when some rows were unplanned (the plan does not belong
 * to this trace), RLB_ENOMEM.  With a pool (lib/pool.h; NULL: this thread
 * alone) each sequence is counted by its threads, one part per traffic
 * and range of layers; the counts do not depend on the thread count.
 */
int rlb_traffic_step(struct rlb_trace_reader *r, const struct rlb_schedule *s,
		     struct rlb_traffic *const *t, size_t nt,
		     struct rlb_pool *pool, struct rlb_err *err);

/* ------------------------------------------------------------------ */
/* The simulator.                                                       */

/* Where the replica weight copies of a (micro-batch, layer) may hide. */
enum rlb_sim_window {
	RLB_SIM_WINDOW_NONE = 0,	/* on the critical path (plan made when the layer runs) */
	RLB_SIM_WINDOW_PREV_LAYER = 1,	/* behind the previous layer's expert compute and this layer's dense part (plan known ahead) */
};

struct rlb_sim_opts {
	enum rlb_policy policy;		/* RLB_POLICY_IDEAL: the result is the uniform-traffic ideal */
	enum rlb_sim_window window;
	/*
	 * The policy's dispatch relays: per (micro-batch, layer) and pair of
	 * nodes, the source node's GPUs share its RDMA copies evenly, handing
	 * them over NVLink, where that makes the phase shorter
	 * (docs/cost-model.md, "The relayed dispatch").  The ideal ignores it.
	 */
	int relay;
};

/*
 * Options for a policy: relibra prefetches replica copies
 * (RLB_SIM_WINDOW_PREV_LAYER); every other policy has no window; no
 * policy relays.
 */
void rlb_sim_opts_for_policy(struct rlb_sim_opts *o, enum rlb_policy policy);

/* Time of one step (or, in a summary, the sum over steps), seconds. */
struct rlb_sim_time {
	double total_s;			/* the sum of the terms below but the informational ones */
	double dense_s;			/* attention, projections, router, shared experts, dense layers */
	double expert_s;		/* routed experts, slowest GPU per (mb, layer) */
	double a2a_s;			/* dispatch + combine: per phase max(RDMA, NVLink) */
	double a2a_rdma_s;		/* the RDMA part alone (informational) */
	double a2a_nvlink_s;		/* the NVLink part alone (informational) */
	/*
	 * Informational, for the all-to-all's excess over the ideal: the same
	 * phases with this traffic's copies spread evenly over the GPUs
	 * (a2a_even_s), and with only the busiest sender setting each phase
	 * (a2a_senders_s); ideal a2a_s <> a2a_even_s (volume) <= a2a_senders_s
	 * (uneven senders: the schedule) <= a2a_s (uneven receivers: the
	 * placement).
	 */
	double a2a_even_s;
	double a2a_senders_s;
	double replication_s;		/* replica weight copies beyond the window */
	double grad_reduce_s;		/* replica gradients back to their home */
	double migration_s;		/* homes moved since the previous step */
	double planning_s;		/* planner wall time not hidden by rollout */
};

/* Bytes moved in one step (or summed over steps), per network. */
struct rlb_sim_bytes {
	double a2a_rdma;		/* every dispatch and combine phase */
	double a2a_nvlink;
	double replica_rdma;		/* replica weight copies */
	double replica_nvlink;
	double grad_rdma;		/* replica gradient reduction */
	double grad_nvlink;
	double migration_rdma;
	double migration_nvlink;
};

struct rlb_sim_step {
	uint32_t step;
	uint32_t micro_batches;
	uint64_t tokens;		/* the step's tokens */
	struct rlb_sim_time policy;	/* the plan (or the ideal for RLB_POLICY_IDEAL) */
	struct rlb_sim_time ideal;	/* uniform-traffic ideal */
	struct rlb_sim_time same_traffic_ideal;
	double tokens_per_s;		/* tokens / policy.total_s */
	double fraction_of_ideal;	/* ideal.total_s / policy.total_s */
	struct rlb_sim_bytes bytes;
	uint64_t replicas;		/* copies after each home copy over every (mb, layer); an instance standing for several EPLB copies counts each */
	uint64_t replica_slots;		/* spare slots: mbs * layers * ranks * R */
	uint64_t replica_copies;	/* weight copies made (a replica kept from the previous micro-batch is not copied again) */
	uint32_t migrated_experts;	/* (layer, expert) homes moved to another node */
	uint32_t moved_in_node;		/* homes moved to another GPU of the same node */
	uint64_t planner_ns;
};

struct rlb_sim_summary {
	enum rlb_policy policy;
	uint64_t steps;
	uint32_t first_step;		/* the first and last step added (0 without) */
	uint32_t last_step;
	uint64_t micro_batches;
	uint64_t tokens;
	struct rlb_sim_time policy_time;	/* summed over steps */
	struct rlb_sim_time ideal;
	struct rlb_sim_time same_traffic_ideal;
	double step_time_s;		/* mean policy step time */
	double tokens_per_s;		/* tokens / policy_time.total_s */
	double fraction_of_ideal;	/* ideal.total_s / policy_time.total_s */
	double fraction_of_same_traffic_ideal;
	/*
	 * Per (mb, layer) with rows: max/mean of expert rows per GPU and per
	 * node, before (static layout) and after the plan; node_floor is the
	 * node max/mean of the plan's home layout (every expert's rows on its
	 * home node), which replication inside nodes cannot beat.
	 */
	struct rlb_dist gpu_before;
	struct rlb_dist gpu_after;
	struct rlb_dist node_before;
	struct rlb_dist node_after;
	struct rlb_dist node_floor;
	/*
	 * Per micro-batch with tokens: the most tokens on one rank over the
	 * mean (rlb_schedule_rank_balance), which sets the all-to-all's
	 * busiest sender whatever the placement.
	 */
	struct rlb_dist rank_tokens;
	struct rlb_sim_bytes bytes;
	uint64_t replicas;
	uint64_t replica_slots;
	uint64_t replica_copies;
	double slot_use;		/* replicas / replica_slots (0 without slots) */
	uint64_t migrated_experts;
	uint64_t moved_in_node;
	uint64_t planner_ns;
};

struct rlb_sim;

/*
 * A simulator for one policy over consecutive steps; it keeps the
 * previous step's homes (the static layout before the first step) for
 * the migration term, and every (mb, layer) imbalance value for the
 * summary.  opts NULL: rlb_sim_opts_for_policy of cfg's balancer.policy.
 * Errors: RLB_EINVAL, RLB_ENOMEM.
 */
int rlb_sim_new(struct rlb_sim **out, const struct rlb_config *cfg,
		const struct rlb_sim_opts *opts, struct rlb_err *err);
/* NULL is a no-op. */
void rlb_sim_free(struct rlb_sim *sim);

/* The constants the simulator uses. */
const struct rlb_sim_params *rlb_sim_params(const struct rlb_sim *sim);

/*
 * Simulate one step: schedule S, loads L, PLAN (NULL: the static layout,
 * one instance per expert at its home) and the traffic T of that plan
 * (rlb_traffic_init with the same plan, filled by rlb_traffic_step or
 * rlb_traffic_add_seq); STATIC_T is the traffic of the static layout for
 * the uniform-traffic ideal (NULL: T, right when PLAN is NULL).  out
 * (may be NULL) receives the step's result; the simulator keeps the
 * plan's homes and the imbalance values.  Same inputs, same output.
 * Errors: RLB_EMISMATCH (dimensions of S, L, PLAN, T, STATIC_T or the
 * simulator's first step differ, or gpus_per_node differs), RLB_EINVAL,
 * RLB_ENOMEM; the simulator is unchanged on error.
 */
int rlb_sim_add_step(struct rlb_sim *sim, const struct rlb_schedule *s,
		     const struct rlb_loads *l,
		     const struct rlb_step_plan *plan,
		     const struct rlb_traffic *t,
		     const struct rlb_traffic *static_t,
		     struct rlb_sim_step *out, struct rlb_err *err);

/*
 * Sums, ratios and distributions over the steps added so far (zeros
 * before the first).  Errors: RLB_ENOMEM.
 */
int rlb_sim_summary(const struct rlb_sim *sim, struct rlb_sim_summary *sum,
		    struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
