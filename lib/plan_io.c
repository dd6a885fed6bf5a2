/*
 * plan_io.c - the plan file (.rlp): header, per-step zstd frames, step
 * index and seek table, written atomically and read with every length and
 * checksum checked (corrupt input is an error naming its byte offset);
 * the plan/trace/config match.  The byte layout is
 * trace_format/SPEC.md (plan format); keep the two in step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "plan_io.h"
#include "trace_impl.h"		/* rlb_rrt_crc32c, the container's frame magics */
#include "util.h"

/* Content magics of the header and step index skippable frames. */
#define RLP_INDEX_ID "RLBPINDX"

/* Header content (version 1.0): offsets and size. */
enum {
	RLP_H_MAGIC = 0,
	RLP_H_MAJOR = 8,
	RLP_H_MINOR = 10,
	RLP_H_FLAGS = 12,
	RLP_H_POLICY = 16,
	RLP_H_SPLIT = 17,
	RLP_H_PACK = 18,
	RLP_H_RESERVED0 = 19,
	RLP_H_LAYERS = 20,
	RLP_H_EXPERTS = 24,
	RLP_H_TOPK = 28,
	RLP_H_RANKS = 32,
	RLP_H_GPN = 36,
	RLP_H_SLOTS = 40,
	RLP_H_MIN_TOKENS = 44,
	RLP_H_WINDOW = 48,
	RLP_H_MB_TOKENS = 52,
	RLP_H_MIGRATION = 56,
	RLP_H_TRACE_HASH = 64,
	RLP_H_FIRST_STEP = 72,
	RLP_H_LAST_STEP = 76,
	RLP_H_STEPS = 80,
	RLP_H_RESERVED1 = 84,
	RLP_H_MODEL = 88,
	RLP_H_END = 152,	/* CRC-32C follows */
	RLP_H_SIZE = 156,
	RLP_H_MAX = 65536,
};

/* Header flags. */
#define RLP_F_REORDER (1u << 0)
#define RLP_F_REPLICATE (1u << 1)
#define RLP_F_COLOCATE (1u << 2)
#define RLP_F_SCHEDULE (1u << 3)	/* 1.1: every step frame carries its schedule */
#define RLP_F_COPIES (1u << 4)		/* 1.2: every step frame carries the copies */
#define RLP_F_KNOWN (RLP_F_REORDER | RLP_F_REPLICATE | RLP_F_COLOCATE | \
		     RLP_F_SCHEDULE | RLP_F_COPIES)
#define RLP_F_REQUIRED 0x0000FFFFu
#define RLP_F_RELAY (1u << 16)		/* optional: the dispatch the plan was simulated with relays */

/* Step frame fixed part and step index (version 1.0; 1.1 with a schedule). */
enum {
	RLP_S_FIXED = 32,
	RLP_I_FIXED = 16,
	RLP_I_ENTRY = 16,
	RLP_I_ENTRY_SCHEDULE = 24,	/* + u32 chunks, u32 sequences */
};

/* Plans whose schedule no packing rule rebuilds carry it (flag SCHEDULE, 1.1). */
static int carries_schedule(const struct rlb_plan_header *h)
{
	return h->pack == RLB_PACK_DATA_CONTROL || h->pack == RLB_PACK_FILE;
}

static uint32_t index_entry_bytes(const struct rlb_plan_header *h)
{
	return carries_schedule(h) ? RLP_I_ENTRY_SCHEDULE : RLP_I_ENTRY;
}

/* ------------------------------------------------------------------ */
/* Trace identity, header fields                                        */

/* A name as a zero-padded field of size bytes. */
static void put_name(uint8_t *p, const char *s, size_t size)
{
	size_t n = strnlen(s, size - 1);

	memset(p, 0, size);
	memcpy(p, s, n);
}

uint64_t rlb_plan_trace_hash(const struct rlb_trace_header *th)
{
	uint8_t b[28 + 64 + 32 + 4];
	size_t len = strnlen(th->layer_pattern, sizeof(th->layer_pattern) - 1);

	rlb_put_u32(b, th->flags & 0xFFFFu);
	rlb_put_u32(b + 4, th->experts);
	rlb_put_u32(b + 8, th->topk);
	rlb_put_u32(b + 12, th->moe_layers);
	rlb_put_u32(b + 16, th->first_dense_layers);
	rlb_put_u64(b + 20, th->seed);
	put_name(b + 28, th->model, 64);
	put_name(b + 92, th->source, 32);
	if (len)	/* 1.2: the pattern's letters after the 1.0 fields */
		return rlb_fnv1a(rlb_fnv1a(RLB_FNV1A_INIT, b, 124), th->layer_pattern, len);
	if (th->moe_layer_period <= 1)	/* the 1.0 layout: its identity unchanged */
		return rlb_fnv1a(RLB_FNV1A_INIT, b, 124);
	rlb_put_u16(b + 124, (uint16_t)th->moe_layer_period);
	rlb_put_u16(b + 126, (uint16_t)th->moe_layer_offset);
	return rlb_fnv1a(RLB_FNV1A_INIT, b, sizeof(b));
}

void rlb_plan_header_init(struct rlb_plan_header *h,
			  const struct rlb_config *cfg,
			  const struct rlb_balance_opts *o, enum rlb_pack pack,
			  const struct rlb_trace_header *th,
			  const uint32_t *steps, size_t nsteps)
{
	int ep = cfg->parallel.ep_size ? cfg->parallel.ep_size :
		 rlb_config_gpus(cfg);

	memset(h, 0, sizeof(*h));
	h->version_major = RLB_PLAN_VERSION_MAJOR;
	h->version_minor = RLB_PLAN_VERSION_MINOR;
	h->policy = o->policy;
	h->split = o->policy == RLB_POLICY_EPLB ||
		   o->policy == RLB_POLICY_EPLB_ORACLE ?
		   RLB_SPLIT_EVEN : RLB_SPLIT_LOCALITY;
	h->pack = pack;
	h->copies = h->split == RLB_SPLIT_EVEN;
	h->reorder = o->reorder != 0;
	h->replicate = o->replicate != 0;
	/* colocate is part of relibra's reordering */
	h->colocate = o->colocate && o->reorder && o->policy == RLB_POLICY_RELIBRA;
	h->relay = o->relay && o->policy != RLB_POLICY_IDEAL;
	/* the slots the balancer's plans carry (lib/balance.h) */
	h->replica_slots = o->policy == RLB_POLICY_STATIC ||
			   o->policy == RLB_POLICY_IDEAL ||
			   (o->policy == RLB_POLICY_RELIBRA && !o->replicate) ?
			   0 : o->replica_slots;
	h->min_tokens_per_replica = o->min_tokens_per_replica;
	h->eplb_window = o->eplb_window;
	h->micro_batch_tokens = cfg->parallel.micro_batch_tokens > 0 ?
		(uint32_t)cfg->parallel.micro_batch_tokens : 0;
	h->migration_weight = o->migration_weight;
	h->layers = th->moe_layers;
	h->experts = th->experts;
	h->topk = th->topk;
	h->ranks = ep > 0 ? (uint32_t)ep : 0;
	h->gpus_per_node = cfg->cluster.gpus_per_node > 0 ?
		(uint32_t)rlb_config_ep_gpus_per_node(cfg) : 0;
	h->trace_hash = rlb_plan_trace_hash(th);
	if (steps && nsteps) {
		h->trace_first_step = steps[0];
		h->trace_last_step = steps[nsteps - 1];
		h->trace_steps = nsteps > UINT32_MAX ? UINT32_MAX : (uint32_t)nsteps;
	}
	put_name((uint8_t *)h->model, th->model, sizeof(h->model));
}

int rlb_plan_header_check(const struct rlb_plan_header *h,
			  struct rlb_err *err)
{
	if ((unsigned)h->policy >= RLB_POLICY_COUNT)
		return rlb_err_set(err, RLB_EINVAL, "unknown policy %d",
				   (int)h->policy);
	if (h->split != RLB_SPLIT_LOCALITY && h->split != RLB_SPLIT_EVEN)
		return rlb_err_set(err, RLB_EINVAL, "unknown split rule %d",
				   (int)h->split);
	if (h->pack != RLB_PACK_IN_ORDER && h->pack != RLB_PACK_FFD &&
	    h->pack != RLB_PACK_DYNAMIC && !carries_schedule(h))
		return rlb_err_set(err, RLB_EINVAL, "unknown packing rule %d",
				   (int)h->pack);
	if (h->layers < 1 || h->layers > RLB_PLAN_MAX_LAYERS)
		return rlb_err_set(err, RLB_ERANGE,
				   "layers %u is out of range [1, %u]",
				   h->layers, RLB_PLAN_MAX_LAYERS);
	if (h->experts < 1 || h->experts > RLB_PLAN_MAX_EXPERTS)
		return rlb_err_set(err, RLB_ERANGE,
				   "experts %u is out of range [1, %u]",
				   h->experts, RLB_PLAN_MAX_EXPERTS);
	if (h->topk < 1 || h->topk > h->experts)
		return rlb_err_set(err, RLB_ERANGE,
				   "topk %u is out of range [1, %u]", h->topk,
				   h->experts);
	if (h->ranks < 1 || h->ranks > RLB_PLAN_MAX_RANKS ||
	    h->experts % h->ranks)
		return rlb_err_set(err, RLB_ERANGE,
				   "ranks %u must divide experts %u (at most %u)",
				   h->ranks, h->experts, RLB_PLAN_MAX_RANKS);
	if (h->gpus_per_node < 1 || h->ranks % h->gpus_per_node)
		return rlb_err_set(err, RLB_ERANGE,
				   "gpus_per_node %u must divide ranks %u",
				   h->gpus_per_node, h->ranks);
	if (h->replica_slots > RLB_PLAN_MAX_REPLICA_SLOTS)
		return rlb_err_set(err, RLB_ERANGE,
				   "replica_slots %u exceeds the limit %u",
				   h->replica_slots, RLB_PLAN_MAX_REPLICA_SLOTS);
	if (!isfinite(h->migration_weight))
		return rlb_err_set(err, RLB_ERANGE,
				   "migration_weight is not finite");
	if (h->trace_steps ?
	    h->trace_first_step > h->trace_last_step ||
	    h->trace_steps - 1 > h->trace_last_step - h->trace_first_step :
	    h->trace_first_step || h->trace_last_step)
		return rlb_err_set(err, RLB_ERANGE,
				   "trace steps %u..%u cannot hold %u steps",
				   h->trace_first_step, h->trace_last_step,
				   h->trace_steps);
	if (!memchr(h->model, '\0', sizeof(h->model)))
		return rlb_err_set(err, RLB_EINVAL, "model name is not NUL-terminated");
	if (!rlb_utf8_ok(h->model))
		return rlb_err_set(err, RLB_EINVAL, "model name is not UTF-8");
	return 0;
}

static void header_encode(const struct rlb_plan_header *h, uint8_t *out)
{
	uint8_t *p = out + 8;
	uint32_t flags = (h->reorder ? RLP_F_REORDER : 0) |
			 (h->replicate ? RLP_F_REPLICATE : 0) |
			 (h->colocate ? RLP_F_COLOCATE : 0) |
			 (carries_schedule(h) ? RLP_F_SCHEDULE : 0) |
			 (h->copies ? RLP_F_COPIES : 0) |
			 (h->relay ? RLP_F_RELAY : 0);
	uint64_t mw;

	memset(out, 0, 8 + RLP_H_SIZE);
	rlb_put_u32(out, RRT_HEADER_MAGIC);
	rlb_put_u32(out + 4, RLP_H_SIZE);
	memcpy(p + RLP_H_MAGIC, RLP_HEADER_ID, 8);
	rlb_put_u16(p + RLP_H_MAJOR, RLB_PLAN_VERSION_MAJOR);
	/* the lowest version that has what the plan uses: without a
	 * schedule, copies or the dynamic rule it is exactly a 1.0 file */
	rlb_put_u16(p + RLP_H_MINOR, h->pack == RLB_PACK_DYNAMIC ? 3 :
		    h->copies ? 2 : carries_schedule(h) ? 1 : 0);
	rlb_put_u32(p + RLP_H_FLAGS, flags);
	p[RLP_H_POLICY] = (uint8_t)h->policy;
	p[RLP_H_SPLIT] = (uint8_t)h->split;
	p[RLP_H_PACK] = (uint8_t)h->pack;
	rlb_put_u32(p + RLP_H_LAYERS, h->layers);
	rlb_put_u32(p + RLP_H_EXPERTS, h->experts);
	rlb_put_u32(p + RLP_H_TOPK, h->topk);
	rlb_put_u32(p + RLP_H_RANKS, h->ranks);
	rlb_put_u32(p + RLP_H_GPN, h->gpus_per_node);
	rlb_put_u32(p + RLP_H_SLOTS, h->replica_slots);
	rlb_put_u32(p + RLP_H_MIN_TOKENS, h->min_tokens_per_replica);
	rlb_put_u32(p + RLP_H_WINDOW, h->eplb_window);
	rlb_put_u32(p + RLP_H_MB_TOKENS, h->micro_batch_tokens);
	memcpy(&mw, &h->migration_weight, sizeof(mw));
	rlb_put_u64(p + RLP_H_MIGRATION, mw);
	rlb_put_u64(p + RLP_H_TRACE_HASH, h->trace_hash);
	rlb_put_u32(p + RLP_H_FIRST_STEP, h->trace_first_step);
	rlb_put_u32(p + RLP_H_LAST_STEP, h->trace_last_step);
	rlb_put_u32(p + RLP_H_STEPS, h->trace_steps);
	put_name(p + RLP_H_MODEL, h->model, 64);
	rlb_put_u32(p + RLP_H_END, rlb_rrt_crc32c(p, RLP_H_END));
}

/* Decode and check the header content p[0..len) (file offset 8). */
static int header_decode(const uint8_t *p, size_t len,
			 struct rlb_plan_header *h, struct rlb_err *err)
{
	unsigned major, minor;
	uint32_t flags, stored, crc;
	uint64_t mw;
	const uint8_t *nul;
	size_t i;
	int ret;

	memset(h, 0, sizeof(*h));
	if (len < 12 || memcmp(p + RLP_H_MAGIC, RLP_HEADER_ID, 8) != 0)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "header", 8, "bad magic (%s)",
			      len >= 8 && !memcmp(p, RRT_HEADER_ID, 8) ?
			      "a relibra trace, not a plan" : "not a relibra plan");
	major = rlb_get_u16(p + RLP_H_MAJOR);
	minor = rlb_get_u16(p + RLP_H_MINOR);
	if (major != RLB_PLAN_VERSION_MAJOR)
		return rlb_rrt_at_err(err, RLB_EVERSION, "header", 8 + RLP_H_MAJOR,
			      "unsupported plan version %u.%u (this reader supports %d.x)",
			      major, minor, RLB_PLAN_VERSION_MAJOR);
	if (len < RLP_H_SIZE ||
	    (minor <= RLB_PLAN_VERSION_MINOR && len != RLP_H_SIZE))
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "header", 4,
			      "content size %zu, expected %s%d for version %u.%u",
			      len, minor > RLB_PLAN_VERSION_MINOR ? "at least " : "",
			      RLP_H_SIZE, major, minor);
	stored = rlb_get_u32(p + len - 4);
	crc = rlb_rrt_crc32c(p, len - 4);
	if (!rrt_crc_ok(stored, crc))
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "header", 8 + len - 4,
			      "checksum mismatch (stored 0x%08x, computed 0x%08x)",
			      stored, crc);
	flags = rlb_get_u32(p + RLP_H_FLAGS);
	if (flags & RLP_F_REQUIRED & ~RLP_F_KNOWN)
		return rlb_rrt_at_err(err, RLB_EUNSUPPORTED, "header", 8 + RLP_H_FLAGS,
			      "unknown flags 0x%08x",
			      flags & RLP_F_REQUIRED & ~RLP_F_KNOWN);
	if (p[RLP_H_RESERVED0] || rlb_get_u32(p + RLP_H_RESERVED1))
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "header",
			      8 + (p[RLP_H_RESERVED0] ? RLP_H_RESERVED0 : RLP_H_RESERVED1),
			      "reserved bytes are not zero");
	nul = memchr(p + RLP_H_MODEL, '\0', 64);
	for (i = nul ? (size_t)(nul - (p + RLP_H_MODEL)) : 0; nul && i < 64; i++)
		if (p[RLP_H_MODEL + i])
			nul = NULL;
	if (!nul)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "header", 8 + RLP_H_MODEL,
			      "bad model name field");
	if (!rlb_utf8_ok((const char *)p + RLP_H_MODEL))
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "header", 8 + RLP_H_MODEL,
			      "model name is not UTF-8");
	h->version_major = (uint16_t)major;
	h->version_minor = (uint16_t)minor;
	h->reorder = (flags & RLP_F_REORDER) != 0;
	h->replicate = (flags & RLP_F_REPLICATE) != 0;
	h->colocate = (flags & RLP_F_COLOCATE) != 0;
	h->copies = (flags & RLP_F_COPIES) != 0;
	h->relay = (flags & RLP_F_RELAY) != 0;
	h->policy = (enum rlb_policy)p[RLP_H_POLICY];
	h->split = (enum rlb_split)p[RLP_H_SPLIT];
	h->pack = (enum rlb_pack)p[RLP_H_PACK];
	h->layers = rlb_get_u32(p + RLP_H_LAYERS);
	h->experts = rlb_get_u32(p + RLP_H_EXPERTS);
	h->topk = rlb_get_u32(p + RLP_H_TOPK);
	h->ranks = rlb_get_u32(p + RLP_H_RANKS);
	h->gpus_per_node = rlb_get_u32(p + RLP_H_GPN);
	h->replica_slots = rlb_get_u32(p + RLP_H_SLOTS);
	h->min_tokens_per_replica = rlb_get_u32(p + RLP_H_MIN_TOKENS);
	h->eplb_window = rlb_get_u32(p + RLP_H_WINDOW);
	h->micro_batch_tokens = rlb_get_u32(p + RLP_H_MB_TOKENS);
	mw = rlb_get_u64(p + RLP_H_MIGRATION);
	memcpy(&h->migration_weight, &mw, sizeof(mw));
	h->trace_hash = rlb_get_u64(p + RLP_H_TRACE_HASH);
	h->trace_first_step = rlb_get_u32(p + RLP_H_FIRST_STEP);
	h->trace_last_step = rlb_get_u32(p + RLP_H_LAST_STEP);
	h->trace_steps = rlb_get_u32(p + RLP_H_STEPS);
	memcpy(h->model, p + RLP_H_MODEL, 64);
	if (!(flags & RLP_F_SCHEDULE) != !carries_schedule(h))
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "header", 8 + RLP_H_FLAGS,
			      "the schedule flag %s, the packing rule is '%s'",
			      flags & RLP_F_SCHEDULE ? "is set" : "is clear",
			      rlb_pack_name(h->pack));
	if (h->copies && h->split != RLB_SPLIT_EVEN)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "header", 8 + RLP_H_FLAGS,
			      "the copies flag is set, the split rule is locality");
	ret = rlb_plan_header_check(h, err);
	if (ret) {
		rlb_err_prefix(err, "header at offset 8");
		return RLB_ECORRUPT;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Inputs match                                                         */

#define MISMATCH(what, field, fmt, a, b) \
	rlb_err_set(err, RLB_EMISMATCH, \
		    "plan does not match the " what ": '%s' is " fmt \
		    " in the plan, " fmt " in the " what, field, a, b)

int rlb_plan_check_inputs(const struct rlb_plan_header *h,
			  const struct rlb_trace_header *th,
			  const uint32_t *steps, size_t nsteps,
			  const struct rlb_config *cfg, struct rlb_err *err)
{
	if (th) {
		uint64_t hash = rlb_plan_trace_hash(th);

		if (h->experts != th->experts)
			return MISMATCH("trace", "experts", "%u", h->experts,
					th->experts);
		if (h->topk != th->topk)
			return MISMATCH("trace", "topk", "%u", h->topk, th->topk);
		if (h->layers != th->moe_layers)
			return MISMATCH("trace", "moe_layers", "%u", h->layers,
					th->moe_layers);
		if (h->trace_hash != hash)
			return MISMATCH("trace", "header hash", "0x%016llx",
					(unsigned long long)h->trace_hash,
					(unsigned long long)hash);
	}
	if (steps) {
		uint32_t first = nsteps ? steps[0] : 0;
		uint32_t last = nsteps ? steps[nsteps - 1] : 0;

		if (h->trace_first_step != first)
			return MISMATCH("trace", "first step", "%u",
					h->trace_first_step, first);
		if (h->trace_last_step != last)
			return MISMATCH("trace", "last step", "%u",
					h->trace_last_step, last);
		if (h->trace_steps != nsteps)
			return MISMATCH("trace", "steps", "%llu",
					(unsigned long long)h->trace_steps,
					(unsigned long long)nsteps);
	}
	if (cfg) {
		long ep = cfg->parallel.ep_size ? cfg->parallel.ep_size :
			  rlb_config_gpus(cfg);

		if (h->ranks != ep)
			return MISMATCH("config", "parallel.ep_size", "%ld",
					(long)h->ranks, ep);
		/* the EP group's: the EP size when it fits in a node */
		if (h->gpus_per_node != (long)rlb_config_ep_gpus_per_node(cfg))
			return MISMATCH("config", "cluster.gpus_per_node", "%ld",
					(long)h->gpus_per_node,
					(long)rlb_config_ep_gpus_per_node(cfg));
		if (h->experts != (long)cfg->model.experts)
			return MISMATCH("config", "model.experts", "%ld",
					(long)h->experts, (long)cfg->model.experts);
		if (h->topk != (long)cfg->model.topk)
			return MISMATCH("config", "model.topk", "%ld",
					(long)h->topk, (long)cfg->model.topk);
		if (h->layers != (long)cfg->model.moe_layers)
			return MISMATCH("config", "model.moe_layers", "%ld",
					(long)h->layers, (long)cfg->model.moe_layers);
		if (h->micro_batch_tokens != (long)cfg->parallel.micro_batch_tokens)
			return MISMATCH("config", "parallel.micro_batch_tokens",
					"%ld", (long)h->micro_batch_tokens,
					(long)cfg->parallel.micro_batch_tokens);
		if (!carries_schedule(h) && h->pack != cfg->parallel.pack)
			return MISMATCH("config", "parallel.pack", "%s",
					rlb_pack_name(h->pack),
					rlb_pack_name(cfg->parallel.pack));
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Step frame content                                                   */

/* Bytes per GPU id and per expert id in a step frame. */
static unsigned gpu_width(uint32_t ranks)
{
	return ranks <= 65536 ? 2 : 4;
}

static unsigned expert_width(uint32_t experts)
{
	return experts <= 65536 ? 2 : 4;
}

static void put_id(uint8_t *p, unsigned w, uint32_t v)
{
	if (w == 2)
		rlb_put_u16(p, (uint16_t)v);
	else
		rlb_put_u32(p, v);
}

static uint32_t get_id(const uint8_t *p, unsigned w)
{
	return w == 2 ? rlb_get_u16(p) : rlb_get_u32(p);
}

/*
 * Byte size of a step's content for the given counts, or 0 when it would
 * exceed RLB_PLAN_MAX_STEP_BYTES.
 */
static uint64_t step_bytes(const struct rlb_plan_header *h, uint64_t mbs,
			   uint64_t replicas, uint64_t chunks, uint64_t fixed)
{
	uint64_t le = (uint64_t)h->layers * h->experts;
	uint64_t wg = gpu_width(h->ranks), we = expert_width(h->experts);
	uint64_t lim = RLB_PLAN_MAX_STEP_BYTES, n;

	if (mbs > RLB_PLAN_MAX_MICRO_BATCHES || replicas > lim || chunks > lim)
		return 0;
	n = fixed + le * wg + mbs * h->layers * 4 + replicas * (we + wg) +
	    (mbs * le + replicas) * (h->copies ? 8 : 4);
	if (carries_schedule(h))
		n += 8 + chunks * (16 + wg);
	return n > lim ? 0 : n;
}

/* Encode p (checked) into buf (step_bytes long). */
static void step_encode(const struct rlb_plan_header *h,
			const struct rlb_step_plan *p, uint64_t replicas,
			int no_timing, uint8_t *buf)
{
	unsigned wg = gpu_width(h->ranks), we = expert_width(h->experts);
	size_t le = (size_t)h->layers * h->experts, ml, i, c;
	size_t nml = (size_t)p->micro_batches * p->layers;
	uint8_t *o = buf, *oe, *og;

	rlb_put_u32(o, p->step);
	rlb_put_u32(o + 4, p->micro_batches);
	rlb_put_u32(o + 8, p->migrated_experts);
	rlb_put_u32(o + 12, RLP_S_FIXED);
	rlb_put_u64(o + 16, no_timing ? 0 : p->planner_ns);
	rlb_put_u64(o + 24, replicas);
	o += RLP_S_FIXED;
	for (i = 0; i < le; i++, o += wg)
		put_id(o, wg, p->home[i]);
	/* replica counts per (mb, layer), then their experts and GPUs */
	oe = o + nml * 4;
	og = oe + replicas * we;
	c = 0;
	for (ml = 0; ml < nml; ml++) {
		uint32_t n = 0;
		size_t e;

		for (e = 0; e < p->experts; e++, c++) {
			size_t k;

			for (k = p->inst_first[c] + 1; k < p->inst_first[c + 1]; k++) {
				put_id(oe, we, (uint32_t)e);
				put_id(og, wg, p->inst[k].gpu);
				oe += we;
				og += wg;
				n++;
			}
		}
		rlb_put_u32(o + ml * 4, n);
	}
	o = og;
	for (i = 0; i < p->ninst; i++, o += 4)
		rlb_put_u32(o, p->inst[i].quota);
	for (i = 0; h->copies && i < p->ninst; i++, o += 4)
		rlb_put_u32(o, rlb_step_plan_copies(p, i));
	if (carries_schedule(h)) {
		const struct rlb_schedule *sc = p->sched;
		size_t C = sc->nchunks;

		rlb_put_u32(o, (uint32_t)sc->nseqs);
		rlb_put_u32(o + 4, (uint32_t)C);
		o += 8;
		for (i = 0; i < C; i++) {
			const struct rlb_chunk *ch = &sc->chunks[i];

			rlb_put_u32(o + 4 * i, ch->seq);
			rlb_put_u32(o + 4 * (C + i), ch->start);
			rlb_put_u32(o + 4 * (2 * C + i), ch->tokens);
			rlb_put_u32(o + 4 * (3 * C + i), ch->mb);
			put_id(o + 16 * C + wg * i, wg, ch->rank);
		}
	}
}

/*
 * The first of the NSEQS sequences that the chunks (in (seq, start)
 * order) do not cover, or NSEQS: every sequence of a trace has tokens,
 * so a schedule has a chunk for each (SPEC.md section P4.4).
 */
static size_t schedule_bare_seq(const struct rlb_chunk *c, size_t n, size_t nseqs)
{
	size_t i, next = 0;

	for (i = 0; i < n && next < nseqs; i++)
		if (c[i].seq == next)
			next++;
	return next;
}

/*
 * Decode the schedule section at buf[off..len) of step `step` (M
 * micro-batches) into p->sched: the chunks must be in (seq, start) order
 * and tile each sequence from token 0 (rlb_schedule_from_chunks, with the
 * lengths they imply; the trace's lengths are compared when the schedule
 * is used).
 */
static int schedule_decode(const struct rlb_plan_header *h,
			   const struct rlb_plan_step_info *info,
			   const char *what, const uint8_t *buf, size_t off,
			   struct rlb_step_plan *p, struct rlb_err *err)
{
	unsigned wg = gpu_width(h->ranks);
	const uint8_t *o = buf + off + 8;
	uint32_t nseqs = rlb_get_u32(buf + off), C = rlb_get_u32(buf + off + 4);
	struct rlb_chunk *ch = NULL;
	uint32_t *lens = NULL;
	size_t i;
	int ret = 0;

	if (nseqs != info->seqs || C != info->chunks)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "%s: content offset %zu: schedule of %u sequences in %u chunks; the step index says %u, %u",
				   what, off, nseqs, C, info->seqs, info->chunks);
	ch = malloc((C ? C : 1) * sizeof(*ch));
	lens = calloc(nseqs ? nseqs : 1, sizeof(*lens));
	p->sched = calloc(1, sizeof(*p->sched));
	if (!ch || !lens || !p->sched) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory for step %u",
				  info->step);
		goto out;
	}
	for (i = 0; i < C; i++) {
		ch[i].seq = rlb_get_u32(o + 4 * i);
		ch[i].start = rlb_get_u32(o + 4 * (C + i));
		ch[i].tokens = rlb_get_u32(o + 4 * (2 * (size_t)C + i));
		ch[i].mb = rlb_get_u32(o + 4 * (3 * (size_t)C + i));
		ch[i].rank = get_id(o + 16 * (size_t)C + wg * i, wg);
		if (ch[i].seq >= nseqs || ch[i].mb >= info->micro_batches ||
		    (i && (ch[i].seq < ch[i - 1].seq ||
			   (ch[i].seq == ch[i - 1].seq &&
			    ch[i].start <= ch[i - 1].start))) ||
		    ch[i].tokens > UINT32_MAX - lens[ch[i].seq]) {
			ret = rlb_err_set(err, RLB_ECORRUPT,
					  "%s: content offset %zu: chunk %zu (sequence %u, start %u, micro-batch %u) is out of order or range",
					  what, off + 8 + 4 * i, i, ch[i].seq,
					  ch[i].start, ch[i].mb);
			goto out;
		}
		lens[ch[i].seq] += ch[i].tokens;
	}
	i = schedule_bare_seq(ch, C, nseqs);
	if (i < nseqs) {
		ret = rlb_err_set(err, RLB_ECORRUPT,
				  "%s: content offset %zu: sequence %zu has no chunk",
				  what, off, i);
		goto out;
	}
	ret = rlb_schedule_from_chunks(p->sched, p->step, h->pack, ch, C, lens,
				       nseqs, h->ranks, h->micro_batch_tokens,
				       err);
	if (ret) {
		rlb_err_prefix(err, "%s", what);
		ret = RLB_ECORRUPT;
		goto out;
	}
	p->sched->micro_batches = info->micro_batches;
out:
	free(ch);
	free(lens);
	if (ret && p->sched) {
		rlb_schedule_release(p->sched);
		free(p->sched);
		p->sched = NULL;
	}
	return ret;
}

/*
 * Decode one step's content (len bytes; the frame is at file offset off)
 * into p, checked against the header, the index entry and the plan
 * invariants that need no loads.
 */
static int step_decode(const struct rlb_plan_header *h,
		       const struct rlb_plan_step_info *info, uint64_t off,
		       const uint8_t *buf, size_t len, struct rlb_step_plan *p,
		       struct rlb_err *err)
{
	unsigned wg = gpu_width(h->ranks), we = expert_width(h->experts);
	uint32_t step, mbs, fixed, e;
	uint64_t replicas, need, le = (uint64_t)h->layers * h->experts;
	size_t ml, nml, c, k, r, q;
	const uint8_t *hp, *cp, *ep, *gp, *qp;
	char what[64];
	int ret;

	snprintf(what, sizeof(what), "step frame");
	if (len < RLP_S_FIXED)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, what, off,
			      "content of %zu bytes is shorter than its fixed part",
			      len);
	step = rlb_get_u32(buf);
	mbs = rlb_get_u32(buf + 4);
	fixed = rlb_get_u32(buf + 12);
	replicas = rlb_get_u64(buf + 24);
	snprintf(what, sizeof(what), "step %u (frame at offset %llu)", step,
		 (unsigned long long)off);
	if (step != info->step || mbs != info->micro_batches ||
	    replicas != info->replicas)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "%s: step %u, %u micro-batches, %llu replicas; the step index says step %u, %u, %llu",
				   what, step, mbs, (unsigned long long)replicas,
				   info->step, info->micro_batches,
				   (unsigned long long)info->replicas);
	if (fixed < RLP_S_FIXED || fixed > len ||
	    (h->version_minor <= RLB_PLAN_VERSION_MINOR && fixed != RLP_S_FIXED))
		return rlb_err_set(err, RLB_ECORRUPT,
				   "%s: content offset 12: fixed part of %u bytes is invalid",
				   what, fixed);
	need = step_bytes(h, mbs, replicas, info->chunks, fixed);
	if (need == 0 || need > len ||
	    (h->version_minor <= RLB_PLAN_VERSION_MINOR && need != len))
		return rlb_err_set(err, RLB_ECORRUPT,
				   "%s: content of %zu bytes does not hold %u micro-batches with %llu replicas",
				   what, len, mbs, (unsigned long long)replicas);
	ret = rlb_step_plan_init(p, step, mbs, h->layers, h->experts, h->ranks,
				 h->gpus_per_node, h->replica_slots, h->split,
				 err);
	if (ret)
		return ret;
	p->migrated_experts = rlb_get_u32(buf + 8);
	p->planner_ns = rlb_get_u64(buf + 16);
	nml = (size_t)mbs * h->layers;
	p->ninst = (size_t)(nml * h->experts + replicas);
	p->inst_cap = p->ninst ? p->ninst : 1;
	p->inst = malloc(p->inst_cap * sizeof(*p->inst));
	if (!p->inst) {
		rlb_step_plan_release(p);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory for step %u",
				   step);
	}
	hp = buf + fixed;
	cp = hp + le * wg;
	ep = cp + nml * 4;
	gp = ep + replicas * we;
	qp = gp + replicas * wg;
	for (c = 0; c < le; c++)
		p->home[c] = get_id(hp + c * wg, wg);
	c = 0;
	k = 0;
	r = 0;
	q = 0;
	for (ml = 0; ml < nml; ml++) {
		uint32_t n = rlb_get_u32(cp + ml * 4);
		size_t end = r + n;

		if (n > replicas - r) {
			ret = rlb_err_set(err, RLB_ECORRUPT,
					  "%s: content offset %zu: mb %zu, layer %zu lists %u replicas, %llu left of %llu",
					  what, (size_t)(cp - buf) + ml * 4,
					  ml / h->layers, ml % h->layers, n,
					  (unsigned long long)(replicas - r),
					  (unsigned long long)replicas);
			goto fail;
		}
		for (e = 0; e < h->experts; e++, c++) {
			p->inst_first[c] = k;
			p->inst[k].expert = e;
			p->inst[k].gpu = p->home[(ml % h->layers) * h->experts + e];
			p->inst[k].quota = rlb_get_u32(qp + 4 * q++);
			k++;
			while (r < end && get_id(ep + r * we, we) == e) {
				p->inst[k].expert = e;
				p->inst[k].gpu = get_id(gp + r * wg, wg);
				p->inst[k].quota = rlb_get_u32(qp + 4 * q++);
				k++;
				r++;
			}
		}
		if (r != end) {
			ret = rlb_err_set(err, RLB_ECORRUPT,
					  "%s: content offset %zu: replica %zu of mb %zu, layer %zu names expert %u out of order or beyond %u",
					  what, (size_t)(ep - buf) + r * we, r,
					  ml / h->layers, ml % h->layers,
					  get_id(ep + r * we, we), h->experts);
			goto fail;
		}
	}
	p->inst_first[c] = k;
	p->cur_cell = c ? c - 1 : 0;
	if (h->copies) {
		const uint8_t *wp = qp + 4 * (size_t)p->ninst;

		for (k = 0; k < p->ninst && rlb_get_u32(wp + 4 * k) == 1; k++)
			;
		if (k < p->ninst) {	/* all 1: no array */
			p->copies = malloc(p->inst_cap * sizeof(*p->copies));
			if (!p->copies) {
				ret = rlb_err_set(err, RLB_ENOMEM,
						  "out of memory for step %u", step);
				goto fail;
			}
			for (k = 0; k < p->ninst; k++)
				p->copies[k] = rlb_get_u32(wp + 4 * k);
		}
	}
	if (r != replicas) {
		ret = rlb_err_set(err, RLB_ECORRUPT,
				  "%s: the cells list %zu replicas, the step %llu",
				  what, r, (unsigned long long)replicas);
		goto fail;
	}
	ret = rlb_step_plan_check(p, NULL, err);
	if (ret) {
		rlb_err_prefix(err, "%s", what);
		ret = RLB_ECORRUPT;
		goto fail;
	}
	if (carries_schedule(h)) {
		ret = schedule_decode(h, info, what, buf,
				      (size_t)(qp - buf) + (h->copies ? 8 : 4) * p->ninst,
				      p, err);
		if (ret)
			goto fail;
	}
	return 0;
fail:
	rlb_step_plan_release(p);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Writer                                                               */

struct wstep {
	struct rlb_plan_step_info info;
	uint32_t csize;
	uint32_t dsize;
};

struct rlb_plan_writer {
	struct rlb_atomic_file af;
	struct rlb_plan_header h;
	ZSTD_CCtx *cctx;
	int no_timing;
	uint8_t *raw, *cbuf;
	size_t raw_cap, cbuf_cap;
	struct wstep *steps;
	size_t nsteps, steps_cap;
	int error;
	struct rlb_err err;
	int finished;		/* rlb_plan_writer_finish done */
};

static int write_all(struct rlb_plan_writer *w, const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, w->af.fp) != n)
		return rlb_err_errno(&w->err, RLB_EIO, "cannot write '%s'",
				     rlb_atomic_name(&w->af));
	return 0;
}

static int wfail(struct rlb_plan_writer *w, int code)
{
	if (!w->error)
		w->error = code;
	return w->error;
}

static void writer_free(struct rlb_plan_writer *w)
{
	ZSTD_freeCCtx(w->cctx);
	free(w->raw);
	free(w->cbuf);
	free(w->steps);
	free(w);
}

int rlb_plan_writer_open(struct rlb_plan_writer **out, const char *path,
			 const struct rlb_plan_header *h,
			 const struct rlb_plan_writer_opts *opts,
			 struct rlb_err *err)
{
	struct rlb_plan_writer *w;
	uint8_t hdr[8 + RLP_H_SIZE];
	int level = opts && opts->level ? opts->level : 3;
	int ret;

	*out = NULL;
	ret = rlb_plan_header_check(h, err);
	if (ret) {
		rlb_err_prefix(err, "plan header");
		return ret;
	}
	if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
		return rlb_err_set(err, RLB_ERANGE,
				   "zstd level %d is out of range [%d, %d]", level,
				   ZSTD_minCLevel(), ZSTD_maxCLevel());
	w = calloc(1, sizeof(*w));
	if (!w)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	w->h = *h;
	w->h.version_major = RLB_PLAN_VERSION_MAJOR;
	w->h.version_minor = RLB_PLAN_VERSION_MINOR;
	w->no_timing = opts ? opts->no_timing : 0;
	w->cctx = ZSTD_createCCtx();
	if (!w->cctx) {
		writer_free(w);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	if (ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, level)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_contentSizeFlag, 1))) {
		writer_free(w);
		return rlb_err_set(err, RLB_EZSTD, "cannot set zstd parameters");
	}
	ret = rlb_atomic_open(&w->af, path, err);
	if (ret) {
		writer_free(w);
		return ret;
	}
	header_encode(&w->h, hdr);
	ret = write_all(w, hdr, sizeof(hdr));
	if (ret) {
		rlb_err_set(err, ret, "%s", w->err.msg);
		rlb_plan_writer_abort(w);
		return ret;
	}
	*out = w;
	return 0;
}

int rlb_plan_writer_append(struct rlb_plan_writer *w,
			   const struct rlb_step_plan *p)
{
	const struct rlb_plan_header *h = &w->h;
	uint64_t cells, replicas, bytes, chunks;
	size_t c;
	struct wstep *s;
	int ret;

	if (w->error)
		return w->error;
	if (w->finished)
		return wfail(w, rlb_err_set(&w->err, RLB_EINVAL,
					    "plan: a step appended after the plan was finished"));
	if (p->layers != h->layers || p->experts != h->experts ||
	    p->ranks != h->ranks || p->gpus_per_node != h->gpus_per_node ||
	    p->replica_slots != h->replica_slots || p->split != h->split)
		return wfail(w, rlb_err_set(&w->err, RLB_EINVAL,
					    "step %u: plan of %u layers, %u experts, %u ranks, %u gpus per node, %u replica slots, split %d does not match the header (%u, %u, %u, %u, %u, %d)",
					    p->step, p->layers, p->experts,
					    p->ranks, p->gpus_per_node,
					    p->replica_slots, (int)p->split,
					    h->layers, h->experts, h->ranks,
					    h->gpus_per_node, h->replica_slots,
					    (int)h->split));
	if (w->nsteps && p->step <= w->steps[w->nsteps - 1].info.step)
		return wfail(w, rlb_err_set(&w->err, RLB_EINVAL,
					    "step %u after step %u (steps must increase)",
					    p->step, w->steps[w->nsteps - 1].info.step));
	if (w->nsteps >= RLB_PLAN_MAX_STEPS)
		return wfail(w, rlb_err_set(&w->err, RLB_ERANGE,
					    "plan has more than %u steps",
					    RLB_PLAN_MAX_STEPS));
	ret = rlb_step_plan_check(p, NULL, &w->err);
	if (ret)
		return wfail(w, rlb_err_prefix(&w->err, "step %u", p->step));
	if (carries_schedule(h) &&
	    (!p->sched || p->sched->micro_batches != p->micro_batches ||
	     p->sched->ranks != h->ranks || p->sched->nseqs > UINT32_MAX))
		return wfail(w, rlb_err_set(&w->err, RLB_EINVAL,
					    "step %u: a plan packed '%s' must carry its schedule of %u micro-batches on %u ranks",
					    p->step, rlb_pack_name(h->pack),
					    p->micro_batches, h->ranks));
	if (carries_schedule(h)) {
		size_t q = schedule_bare_seq(p->sched->chunks, p->sched->nchunks,
					     p->sched->nseqs);

		if (q < p->sched->nseqs)
			return wfail(w, rlb_err_set(&w->err, RLB_EINVAL,
						    "step %u: schedule: sequence %zu has no chunk (a trace's sequences have tokens)",
						    p->step, q));
	}
	for (c = 0; !h->copies && p->copies && c < p->ninst; c++)
		if (p->copies[c] > 1)
			return wfail(w, rlb_err_set(&w->err, RLB_EINVAL,
						    "step %u: instance %zu stands for %u copies; a plan without the copies flag cannot record them",
						    p->step, c, p->copies[c]));
	cells = (uint64_t)p->micro_batches * p->layers * p->experts;
	replicas = p->ninst - cells;
	chunks = carries_schedule(h) ? p->sched->nchunks : 0;
	bytes = step_bytes(h, p->micro_batches, replicas, chunks, RLP_S_FIXED);
	for (c = 0; bytes && c < (size_t)p->micro_batches * p->layers; c++)
		if (p->inst_first[(c + 1) * p->experts] -
		    p->inst_first[c * p->experts] - p->experts > UINT32_MAX)
			bytes = 0;
	if (bytes == 0)
		return wfail(w, rlb_err_set(&w->err, RLB_ERANGE,
					    "step %u: %u micro-batches with %llu replicas exceed the step frame limit of %u bytes",
					    p->step, p->micro_batches,
					    (unsigned long long)replicas,
					    RLB_PLAN_MAX_STEP_BYTES));
	if (rlb_grow(&w->raw, &w->raw_cap, (size_t)bytes, 1) ||
	    rlb_grow(&w->cbuf, &w->cbuf_cap, ZSTD_compressBound((size_t)bytes), 1) ||
	    rlb_grow(&w->steps, &w->steps_cap, w->nsteps + 1, sizeof(*w->steps)))
		return wfail(w, rlb_err_set(&w->err, RLB_ENOMEM, "out of memory"));
	step_encode(h, p, replicas, w->no_timing, w->raw);
	c = ZSTD_compress2(w->cctx, w->cbuf, w->cbuf_cap, w->raw, (size_t)bytes);
	if (ZSTD_isError(c))
		return wfail(w, rlb_err_set(&w->err, RLB_EZSTD, "zstd: %s",
					    ZSTD_getErrorName(c)));
	if (c > UINT32_MAX)
		return wfail(w, rlb_err_set(&w->err, RLB_ERANGE,
					    "step %u: frame larger than 4 GiB",
					    p->step));
	ret = write_all(w, w->cbuf, c);
	if (ret)
		return wfail(w, ret);
	s = &w->steps[w->nsteps++];
	s->info.step = p->step;
	s->info.micro_batches = p->micro_batches;
	s->info.replicas = replicas;
	s->info.chunks = (uint32_t)chunks;
	s->info.seqs = carries_schedule(h) ? (uint32_t)p->sched->nseqs : 0;
	s->csize = (uint32_t)c;
	s->dsize = (uint32_t)bytes;
	return 0;
}

int rlb_plan_writer_error(const struct rlb_plan_writer *w, struct rlb_err *err)
{
	if (!w || !w->error)
		return 0;
	if (err)
		*err = w->err;
	return w->error;
}

/* The step index and the seek table that end the file. */
static int write_tail(struct rlb_plan_writer *w)
{
	size_t n = w->nsteps, i;
	size_t eb = index_entry_bytes(&w->h);
	size_t ilen = RLP_I_FIXED + n * eb + 4;
	size_t slen = rlb_rrt_seek_table_bytes(n);
	uint8_t *b = malloc(8 + (ilen > slen ? ilen : slen)), *p;
	int ret;

	if (!b)
		return rlb_err_set(&w->err, RLB_ENOMEM, "out of memory");
	rlb_put_u32(b, RRT_INDEX_MAGIC);
	rlb_put_u32(b + 4, (uint32_t)ilen);
	p = b + 8;
	memcpy(p, RLP_INDEX_ID, 8);
	rlb_put_u32(p + 8, (uint32_t)n);
	rlb_put_u32(p + 12, (uint32_t)eb);
	p += RLP_I_FIXED;
	for (i = 0; i < n; i++, p += eb) {
		rlb_put_u32(p, w->steps[i].info.step);
		rlb_put_u32(p + 4, w->steps[i].info.micro_batches);
		rlb_put_u64(p + 8, w->steps[i].info.replicas);
		if (eb == RLP_I_ENTRY_SCHEDULE) {
			rlb_put_u32(p + 16, w->steps[i].info.chunks);
			rlb_put_u32(p + 20, w->steps[i].info.seqs);
		}
	}
	rlb_put_u32(p, rlb_rrt_crc32c(b + 8, ilen - 4));
	ret = write_all(w, b, 8 + ilen);
	if (ret)
		goto out;
	p = rlb_rrt_seek_table_begin(b, n, 8 + RLP_H_SIZE);
	for (i = 0; i < n; i++)
		p = rlb_rrt_seek_entry_put(p, w->steps[i].csize, w->steps[i].dsize);
	rlb_rrt_seek_table_end(p, n, (uint32_t)(8 + ilen));
	ret = write_all(w, b, slen);
out:
	free(b);
	return ret;
}

int rlb_plan_writer_finish(struct rlb_plan_writer *w, struct rlb_err *err)
{
	int ret = w->error;

	if (!ret && !w->finished) {
		ret = write_tail(w);
		if (!ret)
			ret = rlb_atomic_sync(&w->af, &w->err);	/* removes it on failure */
		if (ret)
			wfail(w, ret);
	}
	if (ret) {
		rlb_atomic_abort(&w->af);
		if (err)
			*err = w->err;
		return ret;
	}
	w->finished = 1;
	return 0;
}

int rlb_plan_writer_close(struct rlb_plan_writer *w, struct rlb_err *err)
{
	int ret;

	if (!w)
		return 0;
	ret = rlb_plan_writer_finish(w, err);
	if (!ret)
		ret = rlb_atomic_commit(&w->af, err);
	writer_free(w);
	return ret;
}

void rlb_plan_writer_abort(struct rlb_plan_writer *w)
{
	if (!w)
		return;
	rlb_atomic_abort(&w->af);
	writer_free(w);
}

/* ------------------------------------------------------------------ */
/* Reader                                                               */

struct rstep {
	uint64_t off;
	uint32_t csize;
	uint32_t dsize;
};

struct rlb_plan_reader {
	int fd;
	char *path;
	uint64_t file_bytes;
	struct rlb_plan_header h;
	struct rlb_plan_step_info *info;
	struct rstep *frames;
	size_t nsteps;
	size_t cur;
	ZSTD_DCtx *dctx;
	uint8_t *cbuf, *raw;
	size_t ccap, rcap;
};

static int read_at(struct rlb_plan_reader *r, uint64_t off, void *buf,
		   size_t n, struct rlb_err *err)
{
	return rlb_rrt_read_at(r->fd, r->path, r->file_bytes, off, buf, n, err);
}

/* Collects the step frames the seek table lists. */
struct seek_ctx {
	struct rlb_plan_reader *r;
	size_t cap;
};

static int seek_frame(void *ctx, uint64_t off, uint32_t csize, uint32_t dsize,
		      struct rlb_err *err)
{
	struct seek_ctx *sc = ctx;
	struct rlb_plan_reader *r = sc->r;

	if (rlb_grow(&r->frames, &sc->cap, r->nsteps + 1, sizeof(*r->frames)))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	r->frames[r->nsteps].off = off;
	r->frames[r->nsteps].csize = csize;
	r->frames[r->nsteps].dsize = dsize;
	r->nsteps++;
	return 0;
}

/* The seek table: the frame list, checked against the file size. */
static int load_seek_table(struct rlb_plan_reader *r, uint64_t data_start,
			   uint64_t *index_off, uint32_t *index_size,
			   struct rlb_err *err)
{
	static const struct rrt_seek_limits lim = {
		.max_frames = RLB_PLAN_MAX_STEPS,
		.min_raw = RLP_S_FIXED,
		.max_raw = RLB_PLAN_MAX_STEP_BYTES,
		.min_index_bytes = 8 + RLP_I_FIXED + 4,
	};
	struct seek_ctx sc = { r, 0 };
	uint8_t foot[RRT_SEEK_FOOTER];
	uint64_t foff = r->file_bytes - RRT_SEEK_FOOTER, bytes;
	int ret;

	ret = read_at(r, foff, foot, sizeof(foot), err);
	if (ret)
		return ret;
	if (rlb_get_u32(foot + 5) != RRT_SEEKABLE_MAGIC)
		return rlb_rrt_at_err(err, RLB_ETRUNC, "seek table", foff + 5,
				      "no seekable footer at the end of the file (cut or not a complete plan)");
	if (foot[4] != 0)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "seek table", foff + 4,
				      "descriptor 0x%02x (checksums and reserved bits are not used)",
				      foot[4]);
	ret = rlb_rrt_seek_table_read(r->fd, r->path, r->file_bytes, data_start,
				      rlb_get_u32(foot), &lim, seek_frame, &sc,
				      index_off, &bytes, err);
	if (ret == 0)
		*index_size = (uint32_t)bytes;
	return ret;
}

static int load_index(struct rlb_plan_reader *r, uint64_t off, uint32_t fsize,
		      struct rlb_err *err)
{
	uint8_t *b = malloc(fsize), *p;
	uint64_t len = fsize - 8, n, eb, i;
	uint32_t stored, crc;
	int ret;

	if (!b)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = read_at(r, off, b, fsize, err);
	if (ret)
		goto out;
	p = b + 8;
	if (rlb_get_u32(b) != RRT_INDEX_MAGIC || rlb_get_u32(b + 4) != len) {
		ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off,
			     "bad frame header");
		goto out;
	}
	if (memcmp(p, RLP_INDEX_ID, 8) != 0) {
		ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off + 8,
			     "bad magic");
		goto out;
	}
	stored = rlb_get_u32(p + len - 4);
	crc = rlb_rrt_crc32c(p, (size_t)len - 4);
	if (!rrt_crc_ok(stored, crc)) {
		ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off + 8 + len - 4,
			     "checksum mismatch (stored 0x%08x, computed 0x%08x)",
			     stored, crc);
		goto out;
	}
	n = rlb_get_u32(p + 8);
	eb = rlb_get_u32(p + 12);
	if (n != r->nsteps || eb < index_entry_bytes(&r->h) ||
	    (r->h.version_minor <= RLB_PLAN_VERSION_MINOR &&
	     eb != index_entry_bytes(&r->h)) ||
	    len != RLP_I_FIXED + n * eb + 4) {
		ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off + 8 + 8,
			     "%llu entries of %llu bytes in %llu bytes, the seek table has %zu steps",
			     (unsigned long long)n, (unsigned long long)eb,
			     (unsigned long long)len, r->nsteps);
		goto out;
	}
	r->info = calloc(n ? (size_t)n : 1, sizeof(*r->info));
	if (!r->info) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		const uint8_t *e = p + RLP_I_FIXED + i * eb;
		struct rlb_plan_step_info *s = &r->info[i];

		s->step = rlb_get_u32(e);
		s->micro_batches = rlb_get_u32(e + 4);
		s->replicas = rlb_get_u64(e + 8);
		if (carries_schedule(&r->h)) {
			s->chunks = rlb_get_u32(e + 16);
			s->seqs = rlb_get_u32(e + 20);
		}
		if ((i && s->step <= r->info[i - 1].step) ||
		    s->micro_batches > RLB_PLAN_MAX_MICRO_BATCHES ||
		    !step_bytes(&r->h, s->micro_batches, s->replicas,
				s->chunks, RLP_S_FIXED) ||
		    (r->h.version_minor <= RLB_PLAN_VERSION_MINOR &&
		     r->frames[i].dsize != step_bytes(&r->h, s->micro_batches,
						      s->replicas, s->chunks,
						      RLP_S_FIXED))) {
			ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "step index",
				     off + 8 + (uint64_t)(e - p),
				     "bad entry %llu (step %u, %u micro-batches, %llu replicas)",
				     (unsigned long long)i, s->step,
				     s->micro_batches,
				     (unsigned long long)s->replicas);
			goto out;
		}
		/* Bounds what schedule_decode allocates by the content. */
		if (s->seqs > s->chunks) {
			ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "step index",
				     off + 8 + (uint64_t)(e - p),
				     "entry %llu (step %u): %u sequences in %u chunks (each sequence has one at least)",
				     (unsigned long long)i, s->step, s->seqs, s->chunks);
			goto out;
		}
	}
out:
	free(b);
	return ret;
}

int rlb_plan_reader_open(struct rlb_plan_reader **out, const char *path,
			 struct rlb_err *err)
{
	struct rlb_plan_reader *r;
	struct rlb_err tmp;
	uint8_t *hc = NULL;
	uint64_t index_off = 0;
	uint32_t hsize, index_size = 0;
	int ret;

	if (!err)
		err = &tmp;
	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	r->fd = -1;
	r->path = strdup(path);
	r->dctx = rlb_rrt_dctx_new();
	if (!r->path || !r->dctx) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	ret = rlb_rrt_open(path, "plan", &r->fd, &r->file_bytes, err);
	if (ret)
		goto out;
	ret = rlb_rrt_read_header_frame(r->fd, r->path, r->file_bytes, "plan", RLP_H_MAX,
					&hc, &hsize, err);
	if (ret == 0)
		ret = header_decode(hc, hsize, &r->h, err);
	if (ret)
		goto out;
	if (r->file_bytes < 8 + (uint64_t)hsize + 8 + 8 * 2 + 9) {
		ret = rlb_rrt_at_err(err, RLB_ETRUNC, "seek table", r->file_bytes,
			     "file ends after %llu bytes, before its seek table",
			     (unsigned long long)r->file_bytes);
		goto out;
	}
	ret = load_seek_table(r, 8 + (uint64_t)hsize, &index_off, &index_size,
			      err);
	if (ret == 0)
		ret = load_index(r, index_off, index_size, err);
out:
	free(hc);
	if (ret) {
		int format = ret == RLB_ECORRUPT || ret == RLB_ETRUNC ||
			     ret == RLB_EVERSION || ret == RLB_EUNSUPPORTED;

		if (format)
			rlb_err_prefix(err, "plan '%s'", path);
		rlb_plan_reader_free(r);
		return ret;
	}
	*out = r;
	return 0;
}

void rlb_plan_reader_free(struct rlb_plan_reader *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	ZSTD_freeDCtx(r->dctx);
	free(r->path);
	free(r->info);
	free(r->frames);
	free(r->cbuf);
	free(r->raw);
	free(r);
}

const struct rlb_plan_header *rlb_plan_reader_header(const struct rlb_plan_reader *r)
{
	return &r->h;
}

size_t rlb_plan_reader_steps(const struct rlb_plan_reader *r,
			     const struct rlb_plan_step_info **info)
{
	*info = r->info;
	return r->nsteps;
}

int rlb_plan_reader_seek_step(struct rlb_plan_reader *r, uint32_t step,
			      struct rlb_err *err)
{
	size_t lo = 0, hi = r->nsteps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r->info[mid].step < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == r->nsteps || r->info[lo].step != step)
		return rlb_err_set(err, RLB_ENOTFOUND,
				   "plan '%s' has no step %u", r->path, step);
	r->cur = lo;
	return 0;
}

void rlb_plan_reader_rewind(struct rlb_plan_reader *r)
{
	r->cur = 0;
}

/* Read, check and decompress step frame i into r->raw. */
static int load_frame(struct rlb_plan_reader *r, size_t i, struct rlb_err *err)
{
	const struct rstep *f = &r->frames[i];
	unsigned long long fcs;
	size_t got;
	int ret;

	if (rlb_grow(&r->cbuf, &r->ccap, f->csize, 1) ||
	    rlb_grow(&r->raw, &r->rcap, f->dsize, 1))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = read_at(r, f->off, r->cbuf, f->csize, err);
	if (ret)
		return ret;
	if (rlb_get_u32(r->cbuf) != RRT_ZSTD_MAGIC)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step frame", f->off,
			      "not a zstd frame (magic 0x%08x)",
			      rlb_get_u32(r->cbuf));
	/* Frame_Header_Descriptor: content checksum, no dictionary, reserved bit clear */
	if (!(r->cbuf[4] & 0x04) || (r->cbuf[4] & 0x0B))
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step frame", f->off + 4,
			      "frame descriptor 0x%02x (a content checksum, no dictionary and a clear reserved bit are required)",
			      r->cbuf[4]);
	fcs = ZSTD_getFrameContentSize(r->cbuf, f->csize);
	if (fcs != f->dsize)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step frame", f->off,
			      "content size %lld, the seek table says %u",
			      fcs == ZSTD_CONTENTSIZE_UNKNOWN ||
			      fcs == ZSTD_CONTENTSIZE_ERROR ? -1LL : (long long)fcs,
			      f->dsize);
	got = ZSTD_findFrameCompressedSize(r->cbuf, f->csize);
	if (ZSTD_isError(got))
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step frame", f->off,
			      "its blocks do not end in the %u bytes the seek table gives (zstd: %s)",
			      f->csize, ZSTD_getErrorName(got));
	if (got != f->csize)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step frame", f->off,
			      "frame of %zu bytes, the seek table says %u",
			      got, f->csize);
	got = ZSTD_decompressDCtx(r->dctx, r->raw, f->dsize, r->cbuf, f->csize);
	if (ZSTD_isError(got))
		return rlb_rrt_at_err(err, RLB_EZSTD, "step frame", f->off, "zstd: %s",
			      ZSTD_getErrorName(got));
	if (got != f->dsize)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step frame", f->off,
			      "%zu bytes decoded, %u expected", got, f->dsize);
	return 0;
}

int rlb_plan_reader_next(struct rlb_plan_reader *r, struct rlb_step_plan *p,
			 struct rlb_err *err)
{
	size_t i = r->cur;
	int ret;

	rlb_step_plan_release(p);
	if (i >= r->nsteps)
		return 0;
	ret = load_frame(r, i, err);
	if (ret == 0)
		ret = step_decode(&r->h, &r->info[i], r->frames[i].off, r->raw,
				  r->frames[i].dsize, p, err);
	if (ret) {
		rlb_err_prefix(err, "plan '%s'", r->path);
		return ret;
	}
	r->cur = i + 1;
	return 1;
}

int rlb_plan_reader_read_step(struct rlb_plan_reader *r, uint32_t step,
			      struct rlb_step_plan *p, struct rlb_err *err)
{
	int ret = rlb_plan_reader_seek_step(r, step, err);

	if (ret) {
		rlb_step_plan_release(p);
		return ret;
	}
	ret = rlb_plan_reader_next(r, p, err);
	return ret < 0 ? ret : 0;
}

int rlb_plan_probe(const char *path, struct rlb_err *err)
{
	const char *kind;

	if (access(path, R_OK) != 0)
		return rlb_err_errno(err, RLB_EIO, "cannot open '%s'", path);
	kind = rlb_rrt_probe(path);
	return kind && !strcmp(kind, "plan");
}
