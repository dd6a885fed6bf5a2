/*
 * replicate.c - intra-node replication planner: per node, the lowest load
 * threshold that the spare slots reach (a search over a greedy), replicas
 * of the donors' hottest experts on the receivers, and the locality-first
 * split of every (source rank, expert) load.  The rule is in replicate.h.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "replicate.h"
#include "util.h"

/* Expert a before b: heavier, or equally heavy with a lower id. */
static int expert_before(const void *ctx, uint32_t a, uint32_t b)
{
	const struct rlb_replicate_planner *pl = ctx;
	uint64_t la = pl->expert_tokens[a], lb = pl->expert_tokens[b];

	return la > lb || (la == lb && a < b);
}

/*
 * Order a[0..n) (experts) by load descending, lower id first on ties.
 * The slices sorted are one GPU's home experts, usually a handful: an
 * insertion sort with the comparison inlined; merge sort beyond 32.
 */
static void sort_experts(const struct rlb_replicate_planner *pl, uint32_t *a,
			 size_t n, uint32_t *tmp)
{
	size_t i, j;

	if (n > 32) {
		rlb_sort_stable(a, tmp, n, expert_before, pl);
		return;
	}
	for (i = 1; i < n; i++) {
		uint32_t x = a[i];

		for (j = i; j > 0 && expert_before(pl, x, a[j - 1]); j--)
			a[j] = a[j - 1];
		a[j] = x;
	}
}

/* GPU a before b: heavier home load, or equal and a lower index. */
static int gpu_before(const void *ctx, uint32_t a, uint32_t b)
{
	const struct rlb_replicate_planner *pl = ctx;
	uint64_t la = pl->plan.gpu_home_tokens[a];
	uint64_t lb = pl->plan.gpu_home_tokens[b];

	return la > lb || (la == lb && a < b);
}

/* Replica a before b: lower expert, then lower GPU. */
static int replica_before(const void *ctx, uint32_t a, uint32_t b)
{
	const struct rlb_replicate_planner *pl = ctx;

	return pl->rep_expert[a] < pl->rep_expert[b] ||
	       (pl->rep_expert[a] == pl->rep_expert[b] &&
		pl->rep_gpu[a] < pl->rep_gpu[b]);
}

void rlb_replicate_planner_release(struct rlb_replicate_planner *pl)
{
	if (!pl)
		return;
	free(pl->plan.expert_first);
	free(pl->plan.instance);
	free(pl->plan.rows);
	free(pl->plan.gpu_home_tokens);
	free(pl->plan.gpu_tokens);
	free(pl->plan.gpu_replicas);
	free(pl->plan.node_threshold_tokens);
	free(pl->plan.node_floor_tokens);
	free(pl->home);
	free(pl->expert_tokens);
	free(pl->recv);
	free(pl->by_gpu);
	free(pl->gpu_first);
	free(pl->donors);
	free(pl->sort_tmp);
	free(pl->cap);
	free(pl->free_slots);
	free(pl->mark);
	free(pl->rep_expert);
	free(pl->rep_gpu);
	free(pl->rep_quota);
	free(pl->rep_order);
	free(pl->rep_count);
	free(pl->inst_gq);
	memset(pl, 0, sizeof(*pl));
}

int rlb_replicate_planner_init(struct rlb_replicate_planner *pl,
			       const struct rlb_replicate_params *p,
			       struct rlb_err *err)
{
	size_t G, E, nodes, reps, inst;

	memset(pl, 0, sizeof(*pl));
	if (p->num_gpus < 1 || p->num_gpus > RLB_REPLICATE_MAX_GPUS)
		return rlb_err_set(err, RLB_EINVAL,
				   "gpus (%u) must be between 1 and %u",
				   p->num_gpus, RLB_REPLICATE_MAX_GPUS);
	if (p->gpus_per_node < 1 || p->num_gpus % p->gpus_per_node)
		return rlb_err_set(err, RLB_EINVAL,
				   "gpus per node (%u) must divide gpus (%u)",
				   p->gpus_per_node, p->num_gpus);
	if (p->num_experts < 1 || p->num_experts > RLB_REPLICATE_MAX_EXPERTS ||
	    p->num_experts % p->num_gpus)
		return rlb_err_set(err, RLB_EINVAL,
				   "experts (%u) must be a positive multiple of gpus (%u), at most %u",
				   p->num_experts, p->num_gpus,
				   RLB_REPLICATE_MAX_EXPERTS);
	if (p->replica_slots > RLB_REPLICATE_MAX_SLOTS)
		return rlb_err_set(err, RLB_EINVAL,
				   "replica slots (%u) must be at most %u",
				   p->replica_slots, RLB_REPLICATE_MAX_SLOTS);

	pl->p = *p;
	G = p->num_gpus;
	E = p->num_experts;
	nodes = G / p->gpus_per_node;
	reps = G * p->replica_slots;
	inst = E + reps;
	if (inst > UINT32_MAX || inst > SIZE_MAX / sizeof(uint32_t) / G)
		return rlb_err_set(err, RLB_EINVAL,
				   "%zu experts and replicas on %zu gpus are too many",
				   inst, G);
	pl->plan.num_gpus = p->num_gpus;
	pl->plan.gpus_per_node = p->gpus_per_node;
	pl->plan.num_nodes = (uint32_t)nodes;
	pl->plan.num_experts = p->num_experts;
	pl->plan.expert_first = calloc(E + 1, sizeof(uint32_t));
	pl->plan.instance = calloc(inst, sizeof(struct rlb_replicate_instance));
	pl->plan.rows = calloc(inst * G, sizeof(uint32_t));
	pl->plan.gpu_home_tokens = calloc(G, sizeof(uint64_t));
	pl->plan.gpu_tokens = calloc(G, sizeof(uint64_t));
	pl->plan.gpu_replicas = calloc(G, sizeof(uint32_t));
	pl->plan.node_threshold_tokens = calloc(nodes, sizeof(uint64_t));
	pl->plan.node_floor_tokens = calloc(nodes, sizeof(uint64_t));
	pl->home = calloc(E, sizeof(uint32_t));
	pl->expert_tokens = calloc(E, sizeof(uint64_t));
	pl->recv = calloc(G, sizeof(uint32_t));
	pl->by_gpu = calloc(E, sizeof(uint32_t));
	pl->gpu_first = calloc(G + 1, sizeof(uint32_t));
	pl->donors = calloc(G, sizeof(uint32_t));
	pl->sort_tmp = calloc(E > reps ? (E > G ? E : G) : (reps > G ? reps : G),
			      sizeof(uint32_t));
	pl->cap = calloc(G, sizeof(int64_t));
	pl->free_slots = calloc(G, sizeof(uint32_t));
	pl->mark = calloc(G, sizeof(uint32_t));
	pl->rep_expert = calloc(reps + 1, sizeof(uint32_t));
	pl->rep_gpu = calloc(reps + 1, sizeof(uint32_t));
	pl->rep_quota = calloc(reps + 1, sizeof(uint64_t));
	pl->rep_order = calloc(reps + 1, sizeof(uint32_t));
	pl->rep_count = calloc(E, sizeof(uint32_t));
	pl->inst_gq = calloc(2 * (size_t)G, sizeof(uint32_t));
	if (!pl->plan.expert_first || !pl->plan.instance || !pl->plan.rows ||
	    !pl->plan.gpu_home_tokens || !pl->plan.gpu_tokens ||
	    !pl->plan.gpu_replicas || !pl->plan.node_threshold_tokens ||
	    !pl->plan.node_floor_tokens || !pl->home || !pl->expert_tokens ||
	    !pl->recv || !pl->by_gpu || !pl->gpu_first || !pl->donors ||
	    !pl->sort_tmp || !pl->cap || !pl->free_slots || !pl->mark ||
	    !pl->rep_expert || !pl->rep_gpu || !pl->rep_quota ||
	    !pl->rep_order || !pl->rep_count || !pl->inst_gq) {
		rlb_replicate_planner_release(pl);
		return rlb_err_set(err, RLB_ENOMEM,
				   "out of memory for the replication planner (%zu gpus, %zu experts)",
				   G, E);
	}
	return 0;
}

/* A fresh stamp: no GPU is marked as hosting the expert now considered. */
static uint32_t next_stamp(struct rlb_replicate_planner *pl)
{
	if (++pl->stamp == 0) {
		memset(pl->mark, 0, pl->p.num_gpus * sizeof(uint32_t));
		pl->stamp = 1;
	}
	return pl->stamp;
}

/*
 * The receiving GPU for `want` tokens, or -1: among the trial's receivers
 * with a free slot, room > o (a replica's fixed cost) and no instance of
 * the current expert (stamp), the smallest room >= want + o, else the
 * largest room; lower GPU on ties (recv is in ascending GPU order).
 */
static int64_t pick_receiver(const struct rlb_replicate_planner *pl,
			     int64_t want, int64_t o, uint32_t stamp)
{
	int64_t fit = -1, cold = -1;
	uint32_t i;

	want += o;
	for (i = 0; i < pl->nrecv; i++) {
		uint32_t j = pl->recv[i];
		int64_t c = pl->cap[j];

		if (c <= o || !pl->free_slots[j] || pl->mark[j] == stamp)
			continue;
		if (c >= want && (fit < 0 || c < pl->cap[fit]))
			fit = j;
		if (cold < 0 || c > pl->cap[cold])
			cold = j;
	}
	return fit >= 0 ? fit : cold;
}

/*
 * The greedy of replicate.h step 2 on node `node` for threshold T, its
 * replicas recorded in rep_* from START on (an earlier trial's replaced).
 * Returns 1 when every donor sheds its excess.
 */
static int greedy(struct rlb_replicate_planner *pl, uint32_t node, uint64_t T,
		  uint32_t start)
{
	const struct rlb_replicate_plan *plan = &pl->plan;
	uint32_t g = pl->p.gpus_per_node, first = node * g, i, j, n;
	int64_t m = pl->p.min_tokens_per_replica, o = pl->p.instance_rows;

	pl->plan.num_replicas = start;
	pl->nrecv = 0;
	for (j = first; j < first + g; j++) {
		pl->cap[j] = (int64_t)T - (int64_t)plan->gpu_home_tokens[j];
		pl->free_slots[j] = pl->p.replica_slots;
		if (pl->cap[j] > 0)
			pl->recv[pl->nrecv++] = j;
	}
	for (i = 0; i < g; i++) {
		uint32_t d = pl->donors[first + i], k;
		int64_t excess = (int64_t)plan->gpu_home_tokens[d] - (int64_t)T;

		if (excess <= 0)
			break;	/* donors are sorted: no more excess */
		for (k = pl->gpu_first[d];
		     k < pl->gpu_first[d + 1] && excess > 0; k++) {
			uint32_t e = pl->by_gpu[k], stamp = next_stamp(pl);
			int64_t left = (int64_t)pl->expert_tokens[e];
			int fresh = 1;

			while (excess > 0 && left > 0) {
				int64_t want = excess < left ? excess : left;
				int64_t r, q;

				if (want < m) {
					if (left < m)
						break;
					want = m;
				}
				r = pick_receiver(pl, want, o, stamp);
				q = r < 0 ? 0 : want < pl->cap[r] - o ? want : pl->cap[r] - o;
				if (r < 0 || q < m) {
					/*
					 * Before e's first replica every receiver
					 * was eligible: none can take m tokens now
					 * or for a later expert, so T fails.
					 */
					if (fresh)
						return 0;
					break;
				}
				fresh = 0;
				n = pl->plan.num_replicas++;
				pl->rep_expert[n] = e;
				pl->rep_gpu[n] = (uint32_t)r;
				pl->rep_quota[n] = (uint64_t)q;
				pl->cap[r] -= q + o;
				pl->free_slots[r]--;
				pl->mark[r] = stamp;
				excess -= q;
				left -= q;
			}
		}
		if (excess > 0)
			return 0;
	}
	return 1;
}

/* Threshold and replicas of one node (replicate.h steps 1-3). */
static void plan_node(struct rlb_replicate_planner *pl, uint32_t node)
{
	struct rlb_replicate_plan *plan = &pl->plan;
	uint32_t g = pl->p.gpus_per_node, first = node * g, j;
	uint32_t start = plan->num_replicas;
	uint64_t total = 0, lo, hi = 0, bad, good, step;
	int kept;

	for (j = first; j < first + g; j++) {
		total += plan->gpu_home_tokens[j];
		if (plan->gpu_home_tokens[j] > hi)
			hi = plan->gpu_home_tokens[j];
		pl->donors[j] = j;
	}
	lo = total / g + (total % g != 0);
	plan->node_floor_tokens[node] = lo;
	if (pl->p.replica_slots == 0 || g == 1 || lo >= hi) {
		plan->node_threshold_tokens[node] = hi;
		return;
	}
	rlb_sort_stable(pl->donors + first, pl->sort_tmp, g, gpu_before, pl);
	/* only GPUs above the floor can ever be donors */
	for (j = first; j < first + g; j++)
		if (plan->gpu_home_tokens[j] > lo)
			sort_experts(pl, pl->by_gpu + pl->gpu_first[j],
				     pl->gpu_first[j + 1] - pl->gpu_first[j],
				     pl->sort_tmp);

	/*
	 * The lowest T in [lo, hi] for which the greedy succeeds: the floor
	 * first (often reachable), then steps of (hi - lo) / 64 doubling
	 * until one succeeds, then bisection between the last failure and
	 * that success.  hi always succeeds (no donors).
	 */
	good = hi;
	kept = greedy(pl, node, lo, start);
	if (kept) {
		good = lo;
	} else {
		bad = lo;
		step = (hi - lo) / 64 ? (hi - lo) / 64 : 1;
		while (bad + step < hi) {
			kept = greedy(pl, node, bad + step, start);
			if (kept) {
				good = bad + step;
				break;
			}
			bad += step;
			step *= 2;
		}
		while (bad + 1 < good) {
			uint64_t mid = bad + (good - bad) / 2;

			kept = greedy(pl, node, mid, start);
			if (kept)
				good = mid;
			else
				bad = mid;
		}
	}
	plan->node_threshold_tokens[node] = good;
	if (!kept)	/* the replicas recorded last are not good's */
		greedy(pl, node, good, start);
}

/*
 * The rows instance k takes from the source on its own GPU in the
 * own-GPU pass: up to its quota, after the instances before it on that
 * GPU (a valid plan has none).
 */
static uint64_t own_take(uint32_t num_gpus, const uint32_t *gpu,
			 const uint32_t *quota, size_t stride,
			 const uint32_t *load, size_t load_stride, uint32_t k)
{
	uint32_t src = gpu[k * stride], j;
	uint64_t left, t;

	if (src >= num_gpus)
		return 0;
	left = load[(size_t)src * load_stride];
	for (j = 0;; j++) {
		if (gpu[j * stride] != src)
			continue;
		t = left < quota[j * stride] ? left : quota[j * stride];
		if (j == k)
			return t;
		left -= t;
	}
}

uint64_t rlb_replicate_split(uint32_t num_gpus, uint32_t gpus_per_node,
			     const uint32_t *gpu, const uint32_t *quota,
			     size_t stride, uint32_t count,
			     const uint32_t *load, size_t load_stride,
			     uint32_t *rows, size_t rows_stride)
{
	uint32_t G = num_gpus, g = gpus_per_node, nfirst, s, k, j, pass;
	uint64_t unplaced = 0, ql;

	if (count == 0 || g == 0) {
		for (s = 0; s < G; s++) {
			for (j = 0; j < count; j++)
				rows[(size_t)s * rows_stride + j] = 0;
			unplaced += load[(size_t)s * load_stride];
		}
		return unplaced;
	}
	/*
	 * Each instance first takes the rows of the source on its own GPU
	 * (own_take); then the home node's sources by ascending rank, then
	 * the others, fill the instances in instance order.  Every source is
	 * visited once: its row gets its own-GPU rows, then what is left of
	 * it goes to the instances from the cursor on.  Instance k has given
	 * nothing but its own-GPU rows before the cursor reaches it.
	 */
	nfirst = gpu[0] / g * g;
	k = 0;
	ql = quota[0] - own_take(G, gpu, quota, stride, load, load_stride, 0);
	for (pass = 0; pass < 3; pass++) {
		uint32_t lo = pass == 0 ? nfirst : pass == 1 ? 0 : nfirst + g;
		uint32_t hi = pass == 0 ? nfirst + g : pass == 1 ? nfirst : G;

		if (lo > G)
			lo = G;
		if (hi > G)
			hi = G;
		for (s = lo; s < hi; s++) {
			uint32_t *row = rows + (size_t)s * rows_stride;
			uint64_t left = load[(size_t)s * load_stride], x;

			for (j = 0; j < count; j++) {
				row[j] = 0;
				if (gpu[j * stride] == s) {
					x = own_take(G, gpu, quota, stride, load,
						     load_stride, j);
					row[j] = (uint32_t)x;
					left -= x;
				}
			}
			while (left > 0 && k < count) {
				if (ql == 0) {
					if (++k < count)
						ql = quota[k * stride] -
						     own_take(G, gpu, quota, stride,
							      load, load_stride, k);
					continue;
				}
				x = left < ql ? left : ql;
				row[k] += (uint32_t)x;
				left -= x;
				ql -= x;
			}
			unplaced += left;
		}
	}
	return unplaced;
}

/*
 * sum[e] = the sum over the n rows of load[n][e], in blocks of 8 columns
 * that the compiler vectorizes (at -O2 it vectorizes fixed-length loops
 * only), the rest one by one.
 */
static void sum_rows(uint64_t *restrict sum, const uint32_t *restrict load,
		     uint32_t n, uint32_t E)
{
	uint32_t s, e, k, E8 = E / 8 * 8;

	for (e = 0; e < E; e++)
		sum[e] = 0;
	for (s = 0; s < n; s++) {
		const uint32_t *restrict row = load + (size_t)s * E;

		for (e = 0; e < E8; e += 8)
			for (k = 0; k < 8; k++)
				sum[e + k] += row[e + k];
		for (; e < E; e++)
			sum[e] += row[e];
	}
}

/*
 * Split the loads of expert e, which has cnt > 1 instances from f on,
 * locality-first (replicate.h step 4).  Quotas are at most the expert's
 * load, which run() keeps below 2^32.
 */
static void split_expert(struct rlb_replicate_planner *pl, const uint32_t *load,
			 uint32_t e, uint32_t f, uint32_t cnt)
{
	const struct rlb_replicate_plan *plan = &pl->plan;
	uint32_t k;

	for (k = 0; k < cnt; k++) {
		pl->inst_gq[2 * k] = plan->instance[f + k].gpu;
		pl->inst_gq[2 * k + 1] = (uint32_t)plan->instance[f + k].quota_tokens;
	}
	rlb_replicate_split(pl->p.num_gpus, pl->p.gpus_per_node, pl->inst_gq,
			    pl->inst_gq + 1, 2, cnt, load + e, pl->p.num_experts,
			    plan->rows + f, plan->num_instances);
}

int rlb_replicate_planner_run(struct rlb_replicate_planner *pl,
			      const uint32_t *home_gpu, const uint32_t *load,
			      struct rlb_err *err)
{
	struct rlb_replicate_plan *plan = &pl->plan;
	uint32_t G = pl->p.num_gpus, E = pl->p.num_experts;
	uint32_t per_gpu = E / G, e, s, j, n, r, f;

	plan->num_instances = 0;
	plan->num_replicas = 0;
	for (e = 0; e < E; e++) {
		uint32_t h = home_gpu ? home_gpu[e] : e / per_gpu;

		if (h >= G)
			return rlb_err_set(err, RLB_EINVAL,
					   "home gpu of expert %u is %u, beyond the %u gpus",
					   e, h, G);
		pl->home[e] = h;
		pl->rep_count[e] = 0;
	}
	sum_rows(pl->expert_tokens, load, G, E);
	for (e = 0; e < E; e++)
		if (pl->expert_tokens[e] > UINT32_MAX)
			return rlb_err_set(err, RLB_ERANGE,
					   "expert %u has %llu token rows, more than %u",
					   e, (unsigned long long)pl->expert_tokens[e],
					   UINT32_MAX);

	/* experts grouped by home GPU, ids ascending (sorted by load later) */
	memset(pl->gpu_first, 0, (G + 1) * sizeof(uint32_t));
	for (j = 0; j < G; j++) {
		plan->gpu_home_tokens[j] = 0;
		plan->gpu_replicas[j] = 0;
	}
	for (e = 0; e < E; e++) {
		pl->gpu_first[pl->home[e] + 1]++;
		plan->gpu_home_tokens[pl->home[e]] += pl->expert_tokens[e];
	}
	for (j = 0; j < G; j++)
		pl->gpu_first[j + 1] += pl->gpu_first[j];
	for (j = 0; j < G; j++)
		pl->free_slots[j] = pl->gpu_first[j];	/* cursor */
	for (e = 0; e < E; e++)
		pl->by_gpu[pl->free_slots[pl->home[e]]++] = e;

	for (n = 0; n < plan->num_nodes; n++)
		plan_node(pl, n);

	/* instances: per expert the home copy, then replicas by GPU */
	for (r = 0; r < plan->num_replicas; r++) {
		pl->rep_order[r] = r;
		pl->rep_count[pl->rep_expert[r]]++;
	}
	rlb_sort_stable(pl->rep_order, pl->sort_tmp, plan->num_replicas,
			replica_before, pl);
	plan->expert_first[0] = 0;
	for (e = 0; e < E; e++)
		plan->expert_first[e + 1] = plan->expert_first[e] + 1 +
					    pl->rep_count[e];
	plan->num_instances = plan->expert_first[E];
	r = 0;
	for (e = 0; e < E; e++) {
		uint64_t home_q = pl->expert_tokens[e];

		f = plan->expert_first[e];
		for (j = f + 1; j < plan->expert_first[e + 1]; j++, r++) {
			uint32_t x = pl->rep_order[r];

			plan->instance[j].expert = e;
			plan->instance[j].gpu = pl->rep_gpu[x];
			plan->instance[j].quota_tokens = pl->rep_quota[x];
			home_q -= pl->rep_quota[x];
			plan->gpu_replicas[pl->rep_gpu[x]]++;
		}
		plan->instance[f].expert = e;
		plan->instance[f].gpu = pl->home[e];
		plan->instance[f].quota_tokens = home_q;
	}
	for (j = 0; j < G; j++)
		plan->gpu_tokens[j] = 0;
	for (j = 0; j < plan->num_instances; j++)
		plan->gpu_tokens[plan->instance[j].gpu] +=
			plan->instance[j].quota_tokens;

	/*
	 * rows: the loads in the columns of the experts with one instance
	 * (runs of them copied at once), then the split of the others.
	 */
	for (e = 0; e < E; e = n) {
		for (; e < E && pl->rep_count[e]; e++)
			;
		for (n = e; n < E && !pl->rep_count[n]; n++)
			;
		if (n == e)
			break;
		f = plan->expert_first[e];
		for (s = 0; s < G; s++)
			memcpy(plan->rows + (size_t)s * plan->num_instances + f,
			       load + (size_t)s * E + e, (n - e) * sizeof(uint32_t));
	}
	for (e = 0; e < E; e++) {
		f = plan->expert_first[e];
		if (plan->expert_first[e + 1] - f > 1)
			split_expert(pl, load, e, f, plan->expert_first[e + 1] - f);
	}
	return 0;
}
