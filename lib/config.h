/*
 * config.h - the relibra configuration: model, cluster, parallel layout,
 * balancer and synthetic workload, loaded from YAML (libyaml) into plain
 * structs with documented defaults (man/relibra.yaml.5).
 */
#ifndef RLB_CONFIG_H
#define RLB_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RLB_NAME_MAX 64
/* model.layer_pattern: a letter per layer, at most 1024 layers, and the NUL. */
#define RLB_LAYER_PATTERN_MAX 1025
#define RLB_PATH_MAX 4096

/*
 * Micro-batch packing rules (lib/schedule.h, docs/schedule.md).  The
 * values are the plan format's pack codes (trace_format/SPEC.md).
 */
enum rlb_pack {
	RLB_PACK_IN_ORDER = 0,	/* consecutive windows of the rollout order */
	RLB_PACK_FFD = 1,	/* first-fit-decreasing over the whole step */
	RLB_PACK_DYNAMIC = 4,	/* each rank's share cut into balanced micro-batches */
	/* Not rules of the config: schedules that no rule rebuilds, carried in the plan. */
	RLB_PACK_DATA_CONTROL = 2,	/* chosen by the plan (relibra --data-control) */
	RLB_PACK_FILE = 3,		/* the trainer's own (relibra plan --schedule FILE) */
};

struct rlb_model_config {
	char name[RLB_NAME_MAX];
	int experts;		/* routed experts per MoE layer */
	int topk;		/* experts per token */
	int hidden;		/* model width */
	int expert_ffn;		/* routed expert intermediate size */
	int moe_latent;		/* width the routed experts and the dispatch work in (0: hidden) */
	int moe_layers;		/* number of MoE layers */
	int first_dense_layers;	/* dense layers before the first MoE layer */
	int moe_layer_period;	/* after them, blocks of this many layers ... */
	int moe_layer_offset;	/* ... whose layer at this offset is MoE */
	/* or one letter per layer: E MoE, - dense FFN, * attention, M Mamba-2 ("": none) */
	char layer_pattern[RLB_LAYER_PATTERN_MAX];
	int dense_ffn;		/* intermediate size of the dense layers */
	int shared_experts;	/* always-active shared experts per MoE layer */
	int shared_expert_ffn;	/* intermediate size of a shared expert */
	int gated_ffn;		/* 1: FFNs have a gate projection (3 matrices); 0: up and down only */
	int expert_groups;	/* routing groups (0: none) */
	int topk_groups;	/* groups chosen per token (0: none) */
	int q_heads;		/* attention query heads */
	int kv_heads;		/* attention key/value heads */
	int head_dim;		/* attention head dimension (MLA: the query/key head, nope + rope) */
	int kv_lora_rank;	/* MLA: the compressed key/value width (0: no MLA) */
	int q_lora_rank;	/* MLA: the compressed query width (0: a full query projection) */
	int qk_rope_head_dim;	/* MLA: the rotary part of head_dim, shared by the heads */
	int v_head_dim;		/* MLA: value head dimension (0: head_dim) */
	int attention_output_gate; /* 1: the query projection also makes a gate per head (Qwen3-Next) */
	int attention_window;	/* tokens a windowed layer attends to (0: full attention) */
	int attention_chunk;	/* a chunked layer attends within aligned chunks of this many tokens (0: none) */
	int full_attention_period; /* with a window, chunks or linear heads: layer i is full when i + 1 is a multiple (0: none) */
	int linear_key_heads;	/* linear attention (Gated DeltaNet): key heads (0: none) */
	int linear_value_heads;	/* ... value heads */
	int linear_key_head_dim;
	int linear_value_head_dim;
	int mamba_heads;	/* Mamba-2 layers of a layer_pattern: heads (0: none) */
	int mamba_head_dim;
	int mamba_state;	/* state size per head */
	int mamba_groups;	/* groups sharing the input-dependent B and C (0: 1) */
	double dense_time_ms;	/* cost model: dense time per layer and micro-batch, forward + backward (0: estimate) */
};

struct rlb_cluster_config {
	char name[RLB_NAME_MAX];
	int nodes;
	int gpus_per_node;
	double peak_tflops;	/* BF16 dense peak per GPU, TFLOP/s */
	double hbm_gbps;	/* usable HBM bandwidth per GPU, GB/s */
	double gemm_eff_max;	/* eta(m) = gemm_eff_max * m / (m + gemm_eff_half_rows) */
	double gemm_eff_half_rows;
	double nvlink_gbps;	/* per GPU per direction, GB/s */
	double nvlink_latency_us;
	double rdma_gbps;	/* inter-node, per GPU per direction, GB/s */
	double rdma_latency_us;
};

struct rlb_parallel_config {
	int ep_size;		/* expert-parallel ranks (GPUs) */
	int micro_batch_tokens;	/* token budget per GPU per micro-batch */
	int recompute;		/* 1: activations recomputed in backward */
	enum rlb_pack pack;	/* micro-batch packing rule */
};

/* The ranges of balancer.replica_slots and balancer.eplb_window. */
#define RLB_REPLICA_SLOTS_MAX 64
#define RLB_EPLB_WINDOW_MAX 1000

/* The range of model.moe_layer_period. */
#define RLB_MAX_MOE_LAYER_PERIOD 64

/* A boolean key set to "auto": the planner decides (balancer.colocate). */
#define RLB_CFG_AUTO (-1)

struct rlb_balancer_config {
	char policy[RLB_NAME_MAX];	/* static, eplb, eplb-oracle, replicate, relibra, ideal */
	int replica_slots;		/* spare expert slots per GPU per layer */
	int min_tokens_per_replica;	/* a replica must carry at least this many */
	int eplb_window;		/* steps of history fed to eplb */
	int reorder;			/* relibra: cross-node reordering on/off */
	int replicate;			/* relibra: intra-node replication on/off */
	int data_control;		/* relibra: the plan chooses the micro-batches */
	int colocate;			/* relibra: experts that share tokens share nodes (0, 1, RLB_CFG_AUTO) */
	int relay;			/* every policy but ideal: the dispatch evens a node's RDMA senders */
	double migration_weight;	/* weight of migration time in the reorder objective */
	double migration_bytes_per_param; /* bytes moved per expert parameter */
	double planner_overlap;		/* fraction of planning hidden by rollout (0..1) */
};

/*
 * Synthetic RL workload knobs (relibra capture --synthetic).  Calibrated
 * defaults and what each knob does: man/relibra.yaml.5 and docs/workload.md.
 */
struct rlb_workload_config {
	int steps;			/* training steps to generate */
	int first_step;			/* id of the first step */
	int prompts_per_step;		/* GRPO prompts per step */
	int samples_per_prompt;		/* GRPO group size */
	double len_median;		/* lognormal median of sequence length, tokens */
	double len_sigma;		/* lognormal sigma */
	int len_min;			/* length floor, tokens */
	int len_max;			/* length cap, tokens */
	int topics;			/* latent topics */
	double topic_concentration;	/* strength of topic preferences */
	double topic_drift;		/* per-step drift of topic preferences (0..1) */
	double base_skew;		/* spread of per-layer base popularity */
	double hot_expert_boost;	/* weight of the persistent hot expert per layer */
	double heavy_layer_fraction;	/* share of layers with heavy-tailed popularity */
	double heavy_layer_skew;	/* tail exponent on heavy layers */
	int segment_min;		/* token run length sharing preferences, min */
	int segment_max;		/* ... max */
	double layer_correlation;	/* correlation of preferences between adjacent layers */
	double token_noise;		/* share of selections drawn from the base popularity only */
	double segment_concentration;	/* strength of a token segment's own preferences */
};

struct rlb_config {
	char path[RLB_PATH_MAX];	/* file it was loaded from ("" for defaults) */
	struct rlb_model_config model;
	struct rlb_cluster_config cluster;
	struct rlb_parallel_config parallel;
	struct rlb_balancer_config balancer;
	struct rlb_workload_config workload;
};

/* Fill every key with its documented default. */
void rlb_config_defaults(struct rlb_config *cfg);

/*
 * Load PATH over the defaults, then apply each "key.path=value" override in
 * SETS (the --set options), then validate.  Presets named by `preset:` keys
 * are looked up among the presets built into the library (configs/) and
 * then next to PATH.  A PATH that names no file but a built-in full config
 * (relibra config --presets) loads that.  Errors: RLB_ECONFIG with
 * "file:line:col: " message, YAML path, and the offending line with a
 * caret; RLB_EIO on unreadable files.  PATH may be NULL (defaults plus
 * overrides; the model's required keys have no default, so the
 * overrides must give them, e.g. "model.preset=olmoe").
 */
int rlb_config_load(struct rlb_config *cfg, const char *path,
		    const char *const *sets, size_t nsets, struct rlb_err *err);

/*
 * The same, for callers that cannot hold a struct rlb_config (a foreign
 * function interface such as Python's ctypes): a loaded configuration on
 * the heap, NULL on failure (err says why); free it with rlb_config_free
 * (NULL is a no-op).
 */
struct rlb_config *rlb_config_new(const char *path, const char *const *sets,
				  size_t nsets, struct rlb_err *err);
void rlb_config_free(struct rlb_config *cfg);

/*
 * The effective value of KEY ("section.key", as --set names it) as text
 * into buf (size bytes, NUL included), as `relibra config` prints it:
 * integers in decimal, numbers in their shortest exact form, true or
 * false, strings and names as they are (an unset string is "").
 * Errors: RLB_ENOTFOUND (no such key; the message suggests one; or a
 * section's preset, which sets keys and has no value), RLB_ERANGE (buf
 * too small).
 */
int rlb_config_get(const struct rlb_config *cfg, const char *key, char *buf,
		   size_t size, struct rlb_err *err);

/*
 * Apply one "key.path=value" override, checked as a key alone (type and
 * range, as in a file); on failure cfg is unchanged.  The checks across
 * keys are rlb_config_validate's: call it once the overrides are made.
 */
int rlb_config_set(struct rlb_config *cfg, const char *assignment,
		   struct rlb_err *err);

/* Check cross-key consistency (EP size vs cluster, experts vs EP, ...). */
int rlb_config_validate(const struct rlb_config *cfg, struct rlb_err *err);

/* Derived quantities. */
int rlb_config_gpus(const struct rlb_config *cfg);		/* nodes * gpus_per_node */
int rlb_config_ep_size(const struct rlb_config *cfg);		/* parallel.ep_size, 0: every GPU */
int rlb_config_experts_per_gpu(const struct rlb_config *cfg);	/* experts / ep_size */
/*
 * The EP group's GPUs per node: gpus_per_node, or the EP size when the
 * group fits in one node (an NVLink domain); and its nodes.
 */
int rlb_config_ep_gpus_per_node(const struct rlb_config *cfg);
int rlb_config_ep_nodes(const struct rlb_config *cfg);		/* ep_size / the above */

/*
 * The model's layer layout: first_dense_layers dense layers, then
 * moe_layers blocks of moe_layer_period layers, each block's layer
 * moe_layer_offset MoE and the others dense (a period of 0 counts as 1);
 * or, when layer_pattern is set, its letters, one per layer, the MoE
 * layers those that are 'E'.  Hidden layers, the layers that are not
 * MoE, the hidden-layer index (from 0) of MoE layer J, the MoE layer of
 * hidden layer I (-1 when it is not MoE or out of range), and the
 * layers that are not MoE between MoE layer J - 1 and J (before the
 * first one for J = 0; after the last for J = moe_layers).
 */
long rlb_model_hidden_layers(const struct rlb_model_config *m);
long rlb_model_dense_layers(const struct rlb_model_config *m);
long rlb_model_moe_layer_index(const struct rlb_model_config *m, long j);
long rlb_model_moe_layer_of(const struct rlb_model_config *m, long i);
long rlb_model_dense_before(const struct rlb_model_config *m, long j);

/*
 * What hidden layer I holds.  Without a layer_pattern every layer is a
 * decoder layer: attention, then an FFN (MoE or dense, as the layout
 * says).  A pattern's layers hold one part each, as its letter says.
 */
enum rlb_block {
	RLB_BLOCK_DECODER,	/* attention and an FFN */
	RLB_BLOCK_MOE,		/* 'E': router, routed and shared experts */
	RLB_BLOCK_MLP,		/* '-': a dense FFN of dense_ffn */
	RLB_BLOCK_ATTENTION,	/* '*': attention and its projections */
	RLB_BLOCK_MAMBA,	/* 'M': a Mamba-2 mixer */
};
enum rlb_block rlb_model_layer_block(const struct rlb_model_config *m, long i);

/*
 * Check the LEN bytes of a layer pattern: the index of the first that is
 * not a layer letter (E, M, * or -), or -1 when all are; *moe counts the
 * MoE layers ('E') before it.
 */
long rlb_layer_pattern_scan(const char *p, size_t len, long *moe);

/* Matrices of an FFN (expert, shared expert, dense): 3 when gated_ffn, else 2. */
int rlb_model_ffn_matrices(const struct rlb_model_config *m);

/*
 * The width of a routed expert's input and output, and so of a token
 * copy in the dispatch and combine: moe_latent when set (latent MoE
 * projects the token down before the dispatch), else hidden.
 */
int rlb_model_expert_width(const struct rlb_model_config *m);

/*
 * How hidden layer I (from 0) attends.  With attention_window,
 * attention_chunk or linear heads (one of them), every layer but those
 * where I + 1 is a multiple of full_attention_period (none when it is 0)
 * is windowed, chunked or linear; without any, every layer is full.
 */
enum rlb_attention {
	RLB_ATT_FULL,		/* causal attention over the sequence so far */
	RLB_ATT_WINDOW,		/* within attention_window positions */
	RLB_ATT_LINEAR,		/* linear attention: a recurrent state, no context */
	RLB_ATT_CHUNK,		/* within its aligned chunk of attention_chunk positions */
	RLB_ATT_KINDS
};
enum rlb_attention rlb_model_layer_attention(const struct rlb_model_config *m, long i);

/*
 * Name of a packing rule ("data-control" and "file" too, where a
 * schedule came from; "unknown" for another value), and the inverse for
 * the three rules a schedule is built by: in-order, ffd, dynamic
 * (RLB_EINVAL on any other name).
 */
const char *rlb_pack_name(enum rlb_pack pack);
int rlb_pack_from_name(const char *name, enum rlb_pack *pack, struct rlb_err *err);

/*
 * Write the effective configuration as YAML (every key, defaults included)
 * to a caller-provided stream.  Returns RLB_EIO on write failure.
 */
int rlb_config_write_yaml(const struct rlb_config *cfg, FILE *fp,
			  struct rlb_err *err);

/* Names of the built-in presets, NULL-terminated (kind: "models", "clusters", or NULL for full configs). */
const char *const *rlb_config_preset_names(const char *kind);

#ifdef __cplusplus
}
#endif

#endif
