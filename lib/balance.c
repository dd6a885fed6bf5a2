/*
 * balance.c - the policies of `relibra plan`: static, eplb, eplb-oracle,
 * replicate, relibra and ideal behind one balancer that keeps the previous
 * placement and EPLB's load history from step to step, and fills one
 * struct rlb_step_plan per step.
 */
#include <stdlib.h>
#include <string.h>

#include "balance.h"
#include "cooc.h"
#include "eplb.h"
#include "pool.h"
#include "reorder.h"
#include "replicate.h"
#include "util.h"

struct rlb_balancer {
	struct rlb_balance_opts o;
	uint32_t ranks;			/* EP ranks (GPUs) */
	uint32_t gpn;			/* GPUs per node */
	uint32_t groups;		/* EPLB expert groups */
	double row_s;			/* reorder costs */
	double migration_s;		/* weighted */
	double migration_in_node_s;	/* weighted, over NVLink */

	/* shape, fixed by the first step */
	uint32_t layers;
	uint32_t experts;
	uint32_t last_step;		/* the last planned step's id (have_step) */
	int have_step;
	uint32_t *prev_home;		/* [layers][experts] previous step's homes */
	uint64_t *tot;			/* [layers][mbs][experts] rows over sources */
	size_t tot_cap;

	/* eplb */
	uint32_t window;
	uint32_t hist_n;		/* steps held (<= window) */
	uint32_t hist_pos;		/* next ring position */
	double *hist;			/* [window][layers][experts] step totals */
	double *weight;			/* [layers][experts] */
	uint32_t *lay_first;		/* [layers][experts + 1] GPU lists */
	uint32_t *lay_gpu;		/* [layers][slots] home, then replicas */
	uint32_t *lay_copies;		/* [layers][slots] EPLB copies on each */
	int64_t *diff;			/* [slots + 2] */
	uint64_t *copy_q;		/* [slots + 1] even share of each copy */

	/* replicate, relibra */
	struct rlb_replicate_planner rp;
	int rp_ready;
	struct rlb_reorder *ro;		/* relibra: a workspace per thread of pool */
	unsigned nro;			/* workspaces made (0: none) */
	int *layer_rc;			/* [layers] each layer's reordering status */
	struct rlb_pool *pool;		/* relibra's layers on its threads (not owned) */
	double colocate_rows;		/* reorder: rows per co-located sampled pair */
	uint32_t min_pay_rows;		/* rows that pay for a replica's gradient reduction */
	uint32_t instance_rows;		/* a replica's fixed GEMM cost in rows */
	const struct rlb_cooc *cooc;	/* colocate: the next step's counts (not owned) */
};

int rlb_group_limited(const struct rlb_config *cfg)
{
	return cfg->model.expert_groups > 1 && cfg->model.topk_groups > 0 &&
	       cfg->model.topk_groups < cfg->model.expert_groups;
}

void rlb_balance_opts_from_config(struct rlb_balance_opts *o,
				  const struct rlb_config *cfg)
{
	memset(o, 0, sizeof(*o));
	if (rlb_policy_from_name(cfg->balancer.policy, &o->policy, NULL) < 0)
		o->policy = RLB_POLICY_RELIBRA;
	o->replica_slots = cfg->balancer.replica_slots > 0 ?
		(uint32_t)cfg->balancer.replica_slots : 0;
	o->min_tokens_per_replica = cfg->balancer.min_tokens_per_replica > 0 ?
		(uint32_t)cfg->balancer.min_tokens_per_replica : 0;
	o->eplb_window = cfg->balancer.eplb_window > 0 ?
		(uint32_t)cfg->balancer.eplb_window : 1;
	o->reorder = cfg->balancer.reorder != 0;
	o->replicate = cfg->balancer.replicate != 0;
	o->colocate = cfg->balancer.colocate == RLB_CFG_AUTO ?
		      rlb_group_limited(cfg) : cfg->balancer.colocate != 0;
	o->data_control = cfg->balancer.data_control != 0;
	o->relay = cfg->balancer.relay != 0;
	o->migration_weight = cfg->balancer.migration_weight;
}

/*
 * colocate: node rows (reorder units: a node's rows over its GPUs take
 * row_s each) per node a sampled token reaches.  Each is one inter-node
 * token copy in each all-to-all phase, which with balanced senders
 * lengthens the busiest GPU's transfer by token_bytes / (rdma_bytes_per_s
 * * G); a sampled token stands for RLB_COOC_STRIDE of them.
 */
static double colocate_rows(const struct rlb_config *cfg, double row_s,
			    uint32_t G, uint32_t gpn)
{
	double copy_s = (cfg->parallel.recompute ? 6.0 : 4.0) * 2.0 *
			rlb_model_expert_width(&cfg->model) /
			(cfg->cluster.rdma_gbps * 1e9 * G);

	if (!(row_s > 0) || !(cfg->cluster.rdma_gbps > 0))
		return 0;
	return copy_s * gpn / row_s * RLB_COOC_STRIDE;
}

/*
 * The rows a replica must take off its home for the compute they save
 * (row_s each) to pay for sending its gradient home (the expert's bf16
 * gradient over NVLink plus one latency) and, unless the plan is known
 * ahead and the copy prefetched (relibra), for fetching its weights the
 * same way.  0 when the model or cluster gives no figure.
 */
static uint32_t min_pay_rows(const struct rlb_config *cfg, double row_s,
			     int prefetched)
{
	double one_s, rows;

	if (!(row_s > 0) || !(cfg->cluster.nvlink_gbps > 0))
		return 0;
	one_s = 2.0 * rlb_model_ffn_matrices(&cfg->model) * rlb_model_expert_width(&cfg->model) *
		cfg->model.expert_ffn / (cfg->cluster.nvlink_gbps * 1e9) +
		cfg->cluster.nvlink_latency_us * 1e-6;
	rows = (prefetched ? 1 : 2) * one_s / row_s;
	return rows < UINT32_MAX ? (uint32_t)rows : UINT32_MAX;
}

/*
 * The rows a GEMM costs on top of its own: eta(m) = max * m / (m + half)
 * makes m rows take the time of m + half at full efficiency, so a replica
 * adds `half` rows' worth to its GPU beyond its quota.
 */
static uint32_t instance_rows(const struct rlb_config *cfg)
{
	double h = cfg->cluster.gemm_eff_half_rows;

	return h > 0 && h < UINT32_MAX ? (uint32_t)h : 0;
}

int rlb_balancer_new(struct rlb_balancer **out, const struct rlb_config *cfg,
		     const struct rlb_balance_opts *opts, struct rlb_err *err)
{
	struct rlb_balancer *b;
	int ep = cfg->parallel.ep_size ? cfg->parallel.ep_size : rlb_config_gpus(cfg);
	int gpn = rlb_config_ep_gpus_per_node(cfg);
	double mig;

	*out = NULL;
	if ((unsigned)opts->policy >= RLB_POLICY_COUNT)
		return rlb_err_set(err, RLB_EINVAL, "unknown policy number %d",
				   (int)opts->policy);
	if (ep < 1 || gpn < 1 || ep % gpn)
		return rlb_err_set(err, RLB_EINVAL,
				   "EP size %d is not a positive multiple of the %d GPUs per node",
				   ep, gpn);
	if (!(opts->migration_weight >= 0) || opts->migration_weight > 1e12)
		return rlb_err_set(err, RLB_EINVAL,
				   "migration weight %g is not a non-negative number",
				   opts->migration_weight);
	b = calloc(1, sizeof(*b));
	if (!b)
		return rlb_err_set(err, RLB_ENOMEM, "balancer: out of memory");
	b->o = *opts;
	b->ranks = (uint32_t)ep;
	b->gpn = (uint32_t)gpn;
	b->groups = cfg->model.expert_groups > 0 ? (uint32_t)cfg->model.expert_groups : 1;
	b->window = opts->eplb_window ? opts->eplb_window : 1;
	rlb_reorder_costs(cfg, &b->row_s, &mig);
	b->migration_s = mig * opts->migration_weight;
	/* moves inside a node go over NVLink instead of RDMA */
	b->migration_in_node_s = cfg->cluster.nvlink_gbps > 0 ?
		b->migration_s * cfg->cluster.rdma_gbps / cfg->cluster.nvlink_gbps : 0;
	/*
	 * When replication follows, it evens out the GPUs of a node for free,
	 * so the in-node search (which sees the loads before replication)
	 * overrates its moves: they must gain far more than they cost.
	 */
	if (opts->replicate)
		b->migration_in_node_s *= RLB_IN_NODE_MOVE_FACTOR;
	b->colocate_rows = colocate_rows(cfg, b->row_s, b->ranks, b->gpn);
	b->min_pay_rows = min_pay_rows(cfg, b->row_s,
				       opts->policy == RLB_POLICY_RELIBRA);
	b->instance_rows = instance_rows(cfg);
	*out = b;
	return 0;
}

/* The reordering's workspaces and per-layer status. */
static void release_reorders(struct rlb_balancer *b)
{
	while (b->nro)
		rlb_reorder_release(&b->ro[--b->nro]);
	free(b->ro);
	free(b->layer_rc);
	b->ro = NULL;
	b->layer_rc = NULL;
}

void rlb_balancer_free(struct rlb_balancer *b)
{
	if (!b)
		return;
	free(b->prev_home);
	free(b->tot);
	free(b->hist);
	free(b->weight);
	free(b->lay_first);
	free(b->lay_gpu);
	free(b->lay_copies);
	free(b->diff);
	free(b->copy_q);
	if (b->rp_ready)
		rlb_replicate_planner_release(&b->rp);
	release_reorders(b);
	free(b);
}

/* Forget a half-made shape (a failed first step). */
static void unshape(struct rlb_balancer *b)
{
	free(b->prev_home);
	free(b->hist);
	free(b->weight);
	free(b->lay_first);
	free(b->lay_gpu);
	free(b->lay_copies);
	free(b->diff);
	free(b->copy_q);
	b->prev_home = NULL;
	b->hist = b->weight = NULL;
	b->lay_first = b->lay_gpu = b->lay_copies = NULL;
	b->diff = NULL;
	b->copy_q = NULL;
	if (b->rp_ready)
		rlb_replicate_planner_release(&b->rp);
	release_reorders(b);
	b->rp_ready = 0;
}

static uint32_t static_home(uint32_t E, uint32_t G, uint32_t e)
{
	return e / (E / G);
}

/* Fix the shape at the first step and allocate what it sizes. */
static int shape(struct rlb_balancer *b, const struct rlb_loads *l,
		 struct rlb_err *err)
{
	uint32_t L = l->layers, E = l->experts, G = b->ranks, e, k;
	enum rlb_policy pol = b->o.policy;
	size_t P = (size_t)E + (size_t)G * b->o.replica_slots;
	int rc = 0;

	if (l->ranks != G)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "loads have %u source ranks, the EP size is %u",
				   l->ranks, G);
	if (b->layers) {
		if (L != b->layers || E != b->experts)
			return rlb_err_set(err, RLB_EMISMATCH,
					   "loads have %u layers and %u experts, earlier steps %u and %u",
					   L, E, b->layers, b->experts);
		return 0;
	}
	if (!L || !E || E % G)
		return rlb_err_set(err, RLB_EINVAL,
				   "%u experts in %u layers cannot be placed on %u GPUs (experts must be a positive multiple of the EP size)",
				   E, L, G);
	b->prev_home = malloc((size_t)L * E * sizeof(uint32_t));
	if (!b->prev_home)
		return rlb_err_set(err, RLB_ENOMEM, "balancer: out of memory");
	for (k = 0; k < L; k++)
		for (e = 0; e < E; e++)
			b->prev_home[(size_t)k * E + e] = static_home(E, G, e);
	if (pol == RLB_POLICY_EPLB || pol == RLB_POLICY_EPLB_ORACLE) {
		struct rlb_eplb_params ep = {
			.num_slots = (uint32_t)P, .num_groups = b->groups,
			.num_nodes = G / b->gpn, .num_gpus = G,
		};

		if (P > RLB_EPLB_MAX_SLOTS) {
			rc = rlb_err_set(err, RLB_EINVAL,
					 "eplb: %zu physical slots exceed the limit %u",
					 P, RLB_EPLB_MAX_SLOTS);
			goto out;
		}
		rc = rlb_eplb_check(L, E, &ep, err);
		if (rc < 0)
			goto out;
		b->hist = calloc((size_t)b->window * L * E, sizeof(double));
		b->weight = calloc((size_t)L * E, sizeof(double));
		b->lay_first = calloc((size_t)L * (E + 1), sizeof(uint32_t));
		b->lay_gpu = calloc((size_t)L * P, sizeof(uint32_t));
		b->lay_copies = calloc((size_t)L * P, sizeof(uint32_t));
		b->diff = calloc(P + 2, sizeof(int64_t));
		b->copy_q = calloc(P + 1, sizeof(uint64_t));
		if (!b->hist || !b->weight || !b->lay_first || !b->lay_gpu ||
		    !b->lay_copies || !b->diff || !b->copy_q) {
			rc = rlb_err_set(err, RLB_ENOMEM, "balancer: out of memory");
			goto out;
		}
	}
	if ((pol == RLB_POLICY_REPLICATE ||
	     (pol == RLB_POLICY_RELIBRA && b->o.replicate))) {
		struct rlb_replicate_params rp = {
			.num_gpus = G, .gpus_per_node = b->gpn, .num_experts = E,
			.replica_slots = b->o.replica_slots,
			.min_tokens_per_replica = b->min_pay_rows > b->o.min_tokens_per_replica ?
				b->min_pay_rows : b->o.min_tokens_per_replica,
			.instance_rows = b->instance_rows,
		};

		rc = rlb_replicate_planner_init(&b->rp, &rp, err);
		if (rc < 0)
			goto out;
		b->rp_ready = 1;
	}
	if (pol == RLB_POLICY_RELIBRA && b->o.reorder) {
		struct rlb_reorder_params rop = {
			.num_gpus = G, .gpus_per_node = b->gpn, .num_experts = E,
			.row_s = b->row_s, .migration_s = b->migration_s,
			.migration_in_node_s = b->migration_in_node_s,
			.colocate_rows = b->colocate_rows,
			.rounds = RLB_REORDER_ROUNDS,
		};

		unsigned n = rlb_pool_threads(b->pool);

		b->ro = calloc(n, sizeof(*b->ro));
		b->layer_rc = calloc(L, sizeof(*b->layer_rc));
		if (!b->ro || !b->layer_rc) {
			rc = rlb_err_set(err, RLB_ENOMEM, "out of memory");
			goto out;
		}
		for (; b->nro < n; b->nro++) {
			rc = rlb_reorder_init(&b->ro[b->nro], &rop, err);
			if (rc < 0)
				goto out;
		}
	}
	b->layers = L;
	b->experts = E;
out:
	if (rc < 0)
		unshape(b);
	return rc;
}

/* tot[layer][mb][expert]: the rows of each expert over all sources. */
static int sum_loads(struct rlb_balancer *b, const struct rlb_loads *l,
		     struct rlb_err *err)
{
	uint32_t M = l->micro_batches, L = l->layers, E = l->experts, S = l->ranks;
	size_t n = (size_t)L * M * E, mb, k, s, e;

	/* a step without tokens (no micro-batches) still gets a table */
	if (n > b->tot_cap || !b->tot) {
		uint64_t *t = realloc(b->tot, (n ? n : 1) * sizeof(uint64_t));

		if (!t)
			return rlb_err_set(err, RLB_ENOMEM, "balancer: out of memory");
		b->tot = t;
		b->tot_cap = n;
	}
	memset(b->tot, 0, n * sizeof(uint64_t));
	for (mb = 0; mb < M; mb++)
		for (k = 0; k < L; k++) {
			uint64_t *t = b->tot + (k * M + mb) * E;

			for (s = 0; s < S; s++) {
				const uint32_t *c = l->count +
					rlb_loads_index(l, (uint32_t)mb, (uint32_t)k,
							(uint32_t)s, 0);

				for (e = 0; e < E; e++)
					t[e] += c[e];
			}
		}
	return 0;
}

static uint64_t cell_rows(const struct rlb_balancer *b, uint32_t M,
			  uint32_t mb, uint32_t layer, uint32_t e)
{
	return b->tot[((size_t)layer * M + mb) * b->experts + e];
}

static int add_checked(struct rlb_step_plan *out, uint32_t mb, uint32_t layer,
		       uint32_t e, uint32_t gpu, uint64_t q, uint32_t copies,
		       struct rlb_err *err)
{
	if (q > UINT32_MAX)
		return rlb_err_set(err, RLB_ERANGE,
				   "micro-batch %u layer %u expert %u: %llu rows exceed a quota's range",
				   mb, layer, e, (unsigned long long)q);
	return rlb_step_plan_add_copies(out, mb, layer, e, gpu, (uint32_t)q,
					copies, err);
}

/* Every (mb, layer, expert) on its home alone, holding the whole load. */
static int plan_homes_only(struct rlb_balancer *b, const struct rlb_loads *l,
			   struct rlb_step_plan *out, struct rlb_err *err)
{
	uint32_t M = l->micro_batches, L = b->layers, E = b->experts, mb, k, e;
	int rc;

	for (mb = 0; mb < M; mb++)
		for (k = 0; k < L; k++)
			for (e = 0; e < E; e++) {
				rc = add_checked(out, mb, k, e,
						 out->home[(size_t)k * E + e],
						 cell_rows(b, M, mb, k, e), 1, err);
				if (rc < 0)
					return rc;
			}
	return 0;
}

/* The replicate planner per (mb, layer) on the plan's homes. */
static int plan_replicated(struct rlb_balancer *b, const struct rlb_loads *l,
			   struct rlb_step_plan *out, struct rlb_err *err)
{
	uint32_t M = l->micro_batches, L = b->layers, E = b->experts, mb, k, e, i;
	const struct rlb_replicate_plan *rp = &b->rp.plan;
	int rc;

	for (mb = 0; mb < M; mb++)
		for (k = 0; k < L; k++) {
			rc = rlb_replicate_planner_run(&b->rp, out->home + (size_t)k * E,
						       l->count + rlb_loads_index(l, mb, k, 0, 0),
						       err);
			if (rc < 0)
				return rc;
			for (e = 0; e < E; e++) {
				uint32_t cnt;
				const struct rlb_replicate_instance *in =
					rlb_replicate_instances(rp, e, &cnt);

				for (i = 0; i < cnt; i++) {
					rc = add_checked(out, mb, k, e, in[i].gpu,
							 in[i].quota_tokens, 1, err);
					if (rc < 0)
						return rc;
				}
			}
		}
	return 0;
}

/*
 * EPLB's layout of every layer as per-expert GPU lists: the GPU of the
 * replica with phyrank 0 (the home) first, then the other replicas' GPUs
 * ascending, each with the number of the expert's copies it holds (EPLB's
 * last packing step can put two copies on one GPU: one instance standing
 * for both, which takes both even shares, plan.h EVEN).
 */
static void eplb_layout(struct rlb_balancer *b, const struct rlb_eplb_result *res,
			struct rlb_step_plan *out)
{
	uint32_t L = b->layers, E = b->experts, k, e, j, i;
	size_t P = res->num_slots, mc = res->max_count;

	for (k = 0; k < L; k++) {
		uint32_t *first = b->lay_first + (size_t)k * (E + 1);
		uint32_t *gpu = b->lay_gpu + (size_t)k * P, n = 0;
		uint32_t *copies = b->lay_copies + (size_t)k * P;

		for (e = 0; e < E; e++) {
			const int32_t *slots = res->log2phy + ((size_t)k * E + e) * mc;
			uint32_t cnt = (uint32_t)res->logcnt[(size_t)k * E + e];
			uint32_t home = rlb_eplb_slot_gpu(res, (size_t)slots[0]);
			uint32_t base = n;

			first[e] = n;
			out->home[(size_t)k * E + e] = home;
			gpu[n] = home;
			copies[n++] = 1;
			for (j = 1; j < cnt; j++) {
				uint32_t x = rlb_eplb_slot_gpu(res, (size_t)slots[j]);

				for (i = base; i < n && gpu[i] != x; i++)
					;
				if (i < n) {
					copies[i]++;
					continue;
				}
				/* insertion into the ascending tail */
				for (i = n; i > base + 1 && gpu[i - 1] > x; i--) {
					gpu[i] = gpu[i - 1];
					copies[i] = copies[i - 1];
				}
				gpu[i] = x;
				copies[i] = 1;
				n++;
			}
		}
		first[E] = n;
	}
}

/*
 * Shares of one cell's C copies under the EVEN rule (plan.h): source s
 * gives floor(x / C) rows to each copy and one more to copies
 * (s + j) mod C for j < x mod C.
 */
static void even_quotas(struct rlb_balancer *b, const struct rlb_loads *l,
			uint32_t mb, uint32_t layer, uint32_t e, uint32_t c,
			uint64_t *q)
{
	uint32_t S = l->ranks, s, i;
	uint64_t base = 0;
	int64_t run = 0, *d = b->diff;

	for (i = 0; i <= c; i++)
		d[i] = 0;
	for (s = 0; s < S; s++) {
		uint32_t x = l->count[rlb_loads_index(l, mb, layer, s, e)];
		uint32_t r = x % c, st = s % c, end = st + r;

		base += x / c;
		if (!r)
			continue;
		d[st]++;
		if (end <= c) {
			d[end]--;
		} else {
			d[c]--;
			d[0]++;
			d[end - c]--;
		}
	}
	for (i = 0; i < c; i++) {
		run += d[i];
		q[i] = base + (uint64_t)run;
	}
}

static int plan_eplb(struct rlb_balancer *b, const struct rlb_loads *l,
		     struct rlb_step_plan *out, struct rlb_err *err)
{
	uint32_t M = l->micro_batches, L = b->layers, E = b->experts, G = b->ranks;
	size_t P = (size_t)E + (size_t)G * b->o.replica_slots, n = (size_t)L * E, i;
	struct rlb_eplb_result res;
	uint32_t mb, k, e, j, w;
	int rc = 0;

	memset(&res, 0, sizeof(res));
	if (b->o.policy == RLB_POLICY_EPLB && b->hist_n == 0)
		return plan_homes_only(b, l, out, err);	/* static first step */
	if (b->o.policy == RLB_POLICY_EPLB_ORACLE) {
		memset(b->weight, 0, n * sizeof(double));
		for (k = 0; k < L; k++)
			for (mb = 0; mb < M; mb++)
				for (e = 0; e < E; e++)
					b->weight[(size_t)k * E + e] +=
						(double)cell_rows(b, M, mb, k, e);
	} else {
		memset(b->weight, 0, n * sizeof(double));
		for (w = 0; w < b->hist_n; w++)
			for (i = 0; i < n; i++)
				b->weight[i] += b->hist[(size_t)w * n + i];
	}
	{
		struct rlb_eplb_params ep = {
			.num_slots = (uint32_t)P, .num_groups = b->groups,
			.num_nodes = G / b->gpn, .num_gpus = G,
		};

		rc = rlb_eplb_rebalance(b->weight, L, E, &ep, &res, err);
		if (rc < 0)
			goto out;
	}
	eplb_layout(b, &res, out);
	for (mb = 0; mb < M; mb++)
		for (k = 0; k < L; k++) {
			const uint32_t *first = b->lay_first + (size_t)k * (E + 1);
			const uint32_t *gpu = b->lay_gpu + (size_t)k * P;
			const uint32_t *copies = b->lay_copies + (size_t)k * P;

			for (e = 0; e < E; e++) {
				uint32_t c = first[e + 1] - first[e], C = 0;
				const uint64_t *q = b->copy_q;

				for (j = 0; j < c; j++)
					C += copies[first[e] + j];
				if (C == 1)
					b->copy_q[0] = cell_rows(b, M, mb, k, e);
				else
					even_quotas(b, l, mb, k, e, C, b->copy_q);
				/* an instance takes the shares of its copies */
				for (j = 0; j < c; j++) {
					uint32_t x = copies[first[e] + j], y;
					uint64_t sum = 0;

					for (y = 0; y < x; y++)
						sum += *q++;
					rc = add_checked(out, mb, k, e, gpu[first[e] + j],
							 sum, x, err);
					if (rc < 0)
						goto out;
				}
			}
		}
out:
	rlb_eplb_result_release(&res);
	return rc;
}

/* Remember this step's expert totals for eplb's window. */
static void eplb_push(struct rlb_balancer *b, uint32_t M)
{
	uint32_t L = b->layers, E = b->experts, k, mb, e;
	double *h = b->hist + (size_t)b->hist_pos * L * E;

	memset(h, 0, (size_t)L * E * sizeof(double));
	for (k = 0; k < L; k++)
		for (mb = 0; mb < M; mb++)
			for (e = 0; e < E; e++)
				h[(size_t)k * E + e] += (double)cell_rows(b, M, mb, k, e);
	b->hist_pos = (b->hist_pos + 1) % b->window;
	if (b->hist_n < b->window)
		b->hist_n++;
}

/* One layer's reordering into out's homes, with workspace r. */
static int reorder_layer(struct rlb_balancer *b, struct rlb_reorder *r,
			 uint32_t M, uint32_t k, struct rlb_step_plan *out,
			 struct rlb_err *err)
{
	uint32_t E = b->experts;
	struct rlb_reorder_tokens tok;
	int use = b->o.colocate && b->cooc, rc;

	if (M == 0) {	/* a step without tokens: nothing to move for */
		memcpy(out->home + (size_t)k * E, b->prev_home + (size_t)k * E,
		       (size_t)E * sizeof(uint32_t));
		return 0;
	}
	if (use)
		tok = rlb_cooc_layer(b->cooc, k);
	rc = rlb_reorder_run(r, b->tot + (size_t)k * M * E, M,
			     b->prev_home + (size_t)k * E, use ? &tok : NULL, err);
	if (rc == 0)
		memcpy(out->home + (size_t)k * E, r->res.home,
		       (size_t)E * sizeof(uint32_t));
	return rc;
}

struct reorder_job {
	struct rlb_balancer *b;
	struct rlb_step_plan *out;
	uint32_t M;
};

static void reorder_item(void *ctx, size_t k, unsigned worker)
{
	struct reorder_job *j = ctx;

	j->b->layer_rc[k] = reorder_layer(j->b, &j->b->ro[worker], j->M,
					  (uint32_t)k, j->out, NULL);
}

static int plan_relibra(struct rlb_balancer *b, const struct rlb_loads *l,
			struct rlb_step_plan *out, struct rlb_err *err)
{
	struct reorder_job j = { b, out, l->micro_batches };
	uint32_t k;

	if (b->o.reorder) {
		/* layers are independent: the same homes on any number of threads */
		rlb_pool_run(b->nro > 1 ? b->pool : NULL, b->layers, reorder_item, &j);
		for (k = 0; k < b->layers; k++)
			if (b->layer_rc[k] < 0)	/* again, for its message */
				return reorder_layer(b, &b->ro[0], j.M, k, out, err);
	}
	if (b->o.replicate)
		return plan_replicated(b, l, out, err);
	return plan_homes_only(b, l, out, err);
}

int rlb_balancer_plan_step(struct rlb_balancer *b,
			   const struct rlb_schedule *s,
			   const struct rlb_loads *l,
			   struct rlb_step_plan *out, struct rlb_err *err)
{
	uint64_t t0 = rlb_now_ns();
	enum rlb_policy pol = b->o.policy;
	enum rlb_split split = RLB_SPLIT_LOCALITY;
	uint32_t R = b->o.replica_slots, moved = 0, k, e, step;
	int rc;

	memset(out, 0, sizeof(*out));
	if (s && b->have_step && s->step <= b->last_step)
		return rlb_err_set(err, RLB_EINVAL,
				   "step %u after step %u (steps must increase)",
				   s->step, b->last_step);
	if (!s && b->have_step && b->last_step == UINT32_MAX)
		return rlb_err_set(err, RLB_EINVAL, "no step after step %u", b->last_step);
	step = s ? s->step : b->have_step ? b->last_step + 1 : 0;
	if (b->cooc && (b->cooc->layers != l->layers || b->cooc->experts != l->experts))
		return rlb_err_set(err, RLB_EMISMATCH,
				   "the sampled tokens (rlb_balancer_set_cooc) have %u layers and %u experts, the loads %u and %u",
				   b->cooc->layers, b->cooc->experts, l->layers, l->experts);
	rc = shape(b, l, err);
	if (rc < 0)
		return rc;
	rc = sum_loads(b, l, err);
	if (rc < 0)
		return rc;
	if (pol == RLB_POLICY_EPLB || pol == RLB_POLICY_EPLB_ORACLE)
		split = RLB_SPLIT_EVEN;
	if (pol == RLB_POLICY_STATIC || pol == RLB_POLICY_IDEAL ||
	    (pol == RLB_POLICY_RELIBRA && !b->o.replicate))
		R = 0;
	rc = rlb_step_plan_init(out, step,
				l->micro_batches, b->layers, b->experts, b->ranks,
				b->gpn, R, split, err);
	if (rc < 0)
		return rc;
	for (k = 0; k < b->layers; k++)
		for (e = 0; e < b->experts; e++)
			out->home[(size_t)k * b->experts + e] =
				static_home(b->experts, b->ranks, e);
	switch (pol) {
	case RLB_POLICY_EPLB:
	case RLB_POLICY_EPLB_ORACLE:
		rc = plan_eplb(b, l, out, err);
		if (rc == 0)
			eplb_push(b, l->micro_batches);
		break;
	case RLB_POLICY_REPLICATE:
		rc = plan_replicated(b, l, out, err);
		break;
	case RLB_POLICY_RELIBRA:
		rc = plan_relibra(b, l, out, err);
		break;
	default:
		rc = plan_homes_only(b, l, out, err);
		break;
	}
	if (rc < 0)
		return rc;
	for (k = 0; k < b->layers; k++)
		for (e = 0; e < b->experts; e++) {
			size_t i = (size_t)k * b->experts + e;

			moved += out->home[i] / b->gpn != b->prev_home[i] / b->gpn;
			b->prev_home[i] = out->home[i];
		}
	out->migrated_experts = moved;
	b->last_step = step;
	b->have_step = 1;
	/* the ideal is a bound, not a plan: no planning to charge or record */
	out->planner_ns = pol == RLB_POLICY_IDEAL ? 0 : rlb_now_ns() - t0;
	return 0;
}

void rlb_balancer_set_cooc(struct rlb_balancer *b, const struct rlb_cooc *c)
{
	b->cooc = c;
}

void rlb_balancer_set_pool(struct rlb_balancer *b, struct rlb_pool *pool)
{
	if (!b->nro)		/* the workspaces are made at the first step */
		b->pool = pool;
}
