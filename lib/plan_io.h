/*
 * plan_io.h - the plan file (.rlp): a zstd stream holding a header (the
 * policy, the options and shape that made the plan, and the identity of
 * the trace it was planned from) and one checksummed frame per step with
 * the home placement and every (micro-batch, layer)'s replicas and quotas.
 * Format: trace_format/SPEC.md (plan format).  Also the text dump and the
 * EPLB-compatible export (phy2log / log2phy / logcnt) of a step's
 * placement (implemented in plan.c).
 */
#ifndef RLB_PLAN_IO_H
#define RLB_PLAN_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "balance.h"
#include "config.h"
#include "eplb.h"
#include "err.h"
#include "plan.h"
#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RLB_PLAN_VERSION_MAJOR 1
#define RLB_PLAN_VERSION_MINOR 3

/* Limits of the format (SPEC.md (plan format) "Limits"). */
#define RLB_PLAN_MAX_LAYERS 65536u
#define RLB_PLAN_MAX_EXPERTS (1u << 20)
#define RLB_PLAN_MAX_RANKS (1u << 20)
#define RLB_PLAN_MAX_MICRO_BATCHES (1u << 20)
#define RLB_PLAN_MAX_REPLICA_SLOTS 65536u
#define RLB_PLAN_MAX_STEPS (1u << 24)
#define RLB_PLAN_MAX_STEP_BYTES (1u << 30)	/* decompressed step frame */

/*
 * What a plan was made with and from.  Written once at the start of the
 * file; the writer fills the version fields.
 */
struct rlb_plan_header {
	uint16_t version_major;
	uint16_t version_minor;
	enum rlb_policy policy;
	enum rlb_split split;
	enum rlb_pack pack;		/* micro-batch packing of the schedule */
	/* options that shaped the plan */
	int reorder;			/* relibra: cross-node reordering (0/1) */
	int replicate;			/* relibra: intra-node replication (0/1) */
	int colocate;			/* relibra: co-location objective (0/1) */
	int copies;			/* 1.2: steps carry each instance's copies (EVEN split) */
	int relay;			/* optional flag: simulated with the relayed dispatch (0/1) */
	uint32_t replica_slots;		/* per GPU per layer */
	uint32_t min_tokens_per_replica;
	uint32_t eplb_window;
	uint32_t micro_batch_tokens;	/* budget per rank per micro-batch */
	double migration_weight;
	/* shape */
	uint32_t layers;		/* MoE layers */
	uint32_t experts;
	uint32_t topk;
	uint32_t ranks;			/* EP size */
	uint32_t gpus_per_node;
	/* identity of the trace (rlb_plan_trace_hash and its step range) */
	uint64_t trace_hash;
	uint32_t trace_first_step;	/* 0 when the trace has no steps */
	uint32_t trace_last_step;
	uint32_t trace_steps;		/* number of steps in the trace */
	char model[RLB_NAME_MAX];	/* the trace's model name */
};

/*
 * 64-bit FNV-1a of a trace header's identity: flags (the bits a 1.x
 * reader keeps, & 0xFFFF), experts, topk, moe_layers, first_dense_layers
 * (u32 each), seed (u64), all little-endian, then model (64 bytes) and
 * source (32 bytes), each the name's bytes up to its NUL and zeros after;
 * when moe_layer_period is above 1, then it and moe_layer_offset (u16
 * each); with a layer pattern (1.2), instead its letters.  The version
 * fields are not part of it (SPEC.md (plan format) "Trace identity").
 */
uint64_t rlb_plan_trace_hash(const struct rlb_trace_header *th);

/*
 * Fill h for a plan of the trace th (steps[0..nsteps), ascending, as
 * rlb_trace_reader_steps lists them) under cfg and the balancer options
 * o, with packing rule pack: policy and options from o (split EVEN for
 * eplb and eplb-oracle, else LOCALITY), shape from th (layers, experts,
 * topk) and cfg (EP size, GPUs per node, micro-batch budget).
 */
void rlb_plan_header_init(struct rlb_plan_header *h,
			  const struct rlb_config *cfg,
			  const struct rlb_balance_opts *o, enum rlb_pack pack,
			  const struct rlb_trace_header *th,
			  const uint32_t *steps, size_t nsteps);

/*
 * Check that a plan belongs with a trace and a config, before using them
 * together.  th: the trace's header; steps/nsteps: its steps (NULL skips
 * the step-range check); cfg: the config (NULL skips those checks).
 * Compared: experts, topk, moe_layers and the header hash against the
 * trace; its first step, last step and number of steps; the config's
 * parallel.ep_size, cluster.gpus_per_node, model.experts, model.topk,
 * model.moe_layers, parallel.micro_batch_tokens and parallel.pack
 * (callers that take the packing from the plan set it in cfg first).
 * RLB_EMISMATCH naming the first field that differs, e.g.
 * "plan does not match the trace: 'experts' is 128 in the plan, 64 in
 * the trace".
 */
int rlb_plan_check_inputs(const struct rlb_plan_header *h,
			  const struct rlb_trace_header *th,
			  const uint32_t *steps, size_t nsteps,
			  const struct rlb_config *cfg, struct rlb_err *err);

/* Check a header's fields against the format's rules and limits. */
int rlb_plan_header_check(const struct rlb_plan_header *h,
			  struct rlb_err *err);

struct rlb_plan_writer;

struct rlb_plan_writer_opts {
	int level;		/* zstd level (0: the default, 3) */
	int no_timing;		/* 1: store planner_ns as 0 (byte-identical reruns) */
};

/*
 * Start a plan file at PATH (written as PATH.tmp, renamed by close).  h
 * gives everything but the version, which the writer sets.  opts may be
 * NULL.  Errors: RLB_EINVAL / RLB_ERANGE (header), RLB_EIO, RLB_ENOMEM.
 */
int rlb_plan_writer_open(struct rlb_plan_writer **out, const char *path,
			 const struct rlb_plan_header *h,
			 const struct rlb_plan_writer_opts *opts,
			 struct rlb_err *err);

/*
 * Append one step's plan: its shape must match the header (layers,
 * experts, ranks, gpus_per_node, replica_slots, split), steps must
 * increase, and the plan must pass rlb_step_plan_check without loads.
 * Errors are sticky: after the first failure every call returns that
 * code and close reports it (rlb_plan_writer_error gives the message).
 */
int rlb_plan_writer_append(struct rlb_plan_writer *w,
			   const struct rlb_step_plan *p);

/* The sticky error, if any (0 otherwise); copies it into err. */
int rlb_plan_writer_error(const struct rlb_plan_writer *w, struct rlb_err *err);

/*
 * Write the step index and the seek table and fsync, without renaming,
 * so that a command with several outputs renames them only once every one
 * is complete (close renames).  On any error (sticky or now) the output
 * is removed and the error returned; close then returns it again.
 */
int rlb_plan_writer_finish(struct rlb_plan_writer *w, struct rlb_err *err);

/*
 * rlb_plan_writer_finish unless done, rename into place and free w.  On
 * any error the output is removed and the error returned.  NULL is a
 * no-op.
 */
int rlb_plan_writer_close(struct rlb_plan_writer *w, struct rlb_err *err);

/* Free w and remove its output.  NULL is a no-op. */
void rlb_plan_writer_abort(struct rlb_plan_writer *w);

struct rlb_plan_reader;

/* 1 when PATH starts with a plan header, 0 when not, RLB_EIO when unreadable. */
int rlb_plan_probe(const char *path, struct rlb_err *err);

/* One step as the step index lists it (no decompression needed). */
struct rlb_plan_step_info {
	uint32_t step;
	uint32_t micro_batches;
	uint64_t replicas;	/* replica instances over all cells */
	uint32_t chunks;	/* chunks of the carried schedule (0 without) */
	uint32_t seqs;		/* sequences of the carried schedule (0 without) */
};

/*
 * Open a plan: check the seek table, the header and the step index (every
 * length and checksum; errors name the byte offset).  Step frames are
 * checked when read.  Errors: RLB_EIO, RLB_ETRUNC (file cut: no seek
 * table at its end), RLB_ECORRUPT, RLB_EVERSION (newer major version),
 * RLB_EUNSUPPORTED (unknown required flags), RLB_ENOMEM.
 */
int rlb_plan_reader_open(struct rlb_plan_reader **out, const char *path,
			 struct rlb_err *err);
void rlb_plan_reader_free(struct rlb_plan_reader *r);

const struct rlb_plan_header *rlb_plan_reader_header(const struct rlb_plan_reader *r);

/* The steps, ascending; *info points into the reader.  Returns the count. */
size_t rlb_plan_reader_steps(const struct rlb_plan_reader *r,
			     const struct rlb_plan_step_info **info);

/* Position so that the next rlb_plan_reader_next yields STEP (RLB_ENOTFOUND). */
int rlb_plan_reader_seek_step(struct rlb_plan_reader *r, uint32_t step,
			      struct rlb_err *err);

/* Back to the first step. */
void rlb_plan_reader_rewind(struct rlb_plan_reader *r);

/*
 * Decode the next step into p: returns 1, 0 at the end, or a negative
 * error naming the frame's byte offset (RLB_ECORRUPT, RLB_EZSTD on a
 * checksum or decoding failure, RLB_EIO, RLB_ENOMEM).  p must be zeroed
 * or hold a plan: it is released first, and on 1 holds the step (release
 * it with rlb_step_plan_release); on 0 or an error it is left released.
 * The plan passes rlb_step_plan_check without loads.
 */
int rlb_plan_reader_next(struct rlb_plan_reader *r, struct rlb_step_plan *p,
			 struct rlb_err *err);

/* Seek to STEP and decode it (RLB_ENOTFOUND when absent). */
int rlb_plan_reader_read_step(struct rlb_plan_reader *r, uint32_t step,
			      struct rlb_step_plan *p, struct rlb_err *err);

/*
 * A plan as text, for people and tests (`relibra inspect`): the header
 * when h is non-NULL, the step when p is non-NULL.  Format (trace_format/SPEC.md (plan format)
 * "Text dump"):
 *   plan 1.0: policy replicate, split locality, pack in-order
 *   options: replica_slots 1, min_tokens_per_replica 2, ...
 *   shape: layers 2, experts 4, topk 2, ranks 2, gpus_per_node 2
 *   trace: model 'tiny', hash 0x2dd8c0463857e149, steps 0..1 (2)
 *   step 0: 2 micro-batches, 1 replicas, 0 migrated experts, planner 41000 ns
 *     homes layer 0: 0 0 1 1
 *     mb 0, layer 0: 0[0:5 1:3] 1[0:2] 2[1:1] 3[1:0]
 * (per expert: its instances as gpu:quota, the home copy first;
 * gpuxN:quota for an instance standing for N > 1 copies).
 * RLB_EIO when writing fails.
 */
int rlb_plan_write_text(FILE *fp, const struct rlb_plan_header *h,
			const struct rlb_step_plan *p, struct rlb_err *err);

/*
 * The same as JSON (the caller owns the reference; NULL when out of
 * memory).  The header: {"version", "policy", "split", "pack", "options",
 * "shape", "trace"}, the text's fields by name, the trace hash as 16 hex
 * digits.  A step: {"step", "micro_batches", "replicas",
 * "migrated_experts", "planner_ns"}, and with DUMP also "homes"
 * ([layer][expert] home GPU), "instances" ([mb][layer][expert], each
 * instance [gpu, quota, copies], the home copy first) and, when the plan
 * carries its schedule, "schedule" (a relibra.schedule/1 step).
 */
struct json_t *rlb_plan_header_json(const struct rlb_plan_header *h);
struct json_t *rlb_step_plan_json(const struct rlb_step_plan *p, int dump);

/*
 * EPLB-compatible export of one step's placement (SPEC.md (plan format) "EPLB
 * export").  Every GPU has experts / ranks + replica_slots physical slots;
 * slot s lives on GPU s / slots_per_gpu.  GPU g's slots hold, in order,
 * the experts whose home is g (ascending id), then the further copies on
 * g by ascending expert id (a home's copies beyond its first, each
 * replica's copies), then, in slots left over, filler copies of g's own
 * experts in its slot order, cyclically (so every slot names a logical
 * expert, logcnt sums to the slot count, and no GPU's work changes:
 * copies on one GPU share that GPU's tokens).  Replica rank 0 is the home
 * slot, then the further copies in instance order (ascending GPU), then
 * the filler copies in ascending slot order.
 */
#define RLB_PLAN_EPLB_STEP (-1)

struct rlb_plan_eplb_opts {
	/*
	 * RLB_PLAN_EPLB_STEP: the step-level placement, the homes plus the
	 * replicas present in every micro-batch of the layer (all of an
	 * eplb plan's replicas; none of a per-micro-batch planner's, in
	 * general).  m >= 0: the homes plus micro-batch m's replicas.
	 */
	int64_t micro_batch;
	/* 0: log2phy in replica order (DeepSeek EPLB); 1: ascending slot (vLLM) */
	int slot_order;
};

/*
 * Fill res (initialised here; release with rlb_eplb_result_release, also
 * after a failure) with p's placement.  o may be NULL (step-level, replica
 * order).  res->hierarchical is 0 and res->num_nodes is ranks /
 * gpus_per_node.  Errors: RLB_EINVAL (a plan without a shape, such as a
 * zeroed or released one; micro-batch out of range, a GPU with no expert
 * in a layer, or more instances than slots: a plan that fails
 * rlb_step_plan_check), RLB_ERANGE (beyond EPLB's limits), RLB_ENOMEM.
 */
int rlb_plan_eplb_export(const struct rlb_step_plan *p,
			 const struct rlb_plan_eplb_opts *o,
			 struct rlb_eplb_result *res, struct rlb_err *err);

/*
 * The same as a new JSON object: {"step", "micro_batch" (null for the
 * step-level placement), "num_gpus", "slots_per_gpu", "log2phy_order"
 * ("replica" or "slot"), "phy2log", "log2phy", "logcnt"}, keys in that
 * order.  The caller owns the reference (json_decref).  NULL on failure.
 */
struct json_t *rlb_plan_eplb_export_json(const struct rlb_step_plan *p,
					 const struct rlb_plan_eplb_opts *o,
					 struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
