/*
 * balance_bench.c - planner speed on one core, on random but skewed loads
 * built in memory: relibra's cross-node reordering per layer, the
 * replication planner per (micro-batch, layer) and relibra's whole step at
 * EP64 (8 nodes x 8 GPUs, 128 experts, 94 layers, 16 micro-batches), and
 * eplb and relibra's reordering for 58 layers x 256 experts on 64 GPUs
 * (DeepSeek-V3's shape), and there relibra's whole step without and with
 * colocate.
 * usage: balance_bench [STEPS]   (default 3)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balance.h"
#include "cooc.h"
#include "eplb.h"
#include "reorder.h"
#include "replicate.h"
#include "util.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static double unif(void)
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return ((rng >> 11) + 0.5) / 9007199254740992.0;
}

/*
 * Loads of one step: per layer a lognormal expert popularity (sigma 1),
 * per micro-batch a lognormal topic factor (sigma 0.8), per source rank a
 * milder one (sigma 0.4); each rank routes tokens * topk rows in
 * proportion.
 */
static int make_loads(struct rlb_loads *l, uint32_t M, uint32_t L, uint32_t S,
		      uint32_t E, uint32_t tokens, uint32_t topk)
{
	double *base = malloc((size_t)L * E * sizeof(double));
	double *w = malloc((size_t)E * sizeof(double));
	uint32_t mb, k, s, e;
	int rc = -1;

	if (!base || !w || rlb_loads_init(l, M, L, S, E, NULL) < 0)
		goto out;
	for (k = 0; k < L; k++)
		for (e = 0; e < E; e++)
			base[(size_t)k * E + e] = exp(1.0 * sqrt(-2 * log(unif())) *
						      cos(6.283185307 * unif()));
	for (mb = 0; mb < M; mb++)
		for (k = 0; k < L; k++) {
			double topic[1024];

			for (e = 0; e < E && e < 1024; e++)
				topic[e] = exp(0.8 * sqrt(-2 * log(unif())) *
					       cos(6.283185307 * unif()));
			for (s = 0; s < S; s++) {
				double sum = 0;
				uint32_t *c = l->count + rlb_loads_index(l, mb, k, s, 0);

				for (e = 0; e < E; e++) {
					w[e] = base[(size_t)k * E + e] * topic[e % 1024] *
					       exp(0.4 * (unif() - 0.5));
					sum += w[e];
				}
				for (e = 0; e < E; e++) {
					double v = (double)tokens * topk * w[e] / sum;

					c[e] = (uint32_t)fmin(v, tokens);
				}
			}
		}
	rc = 0;
out:
	free(base);
	free(w);
	return rc;
}

/* An index of w[0..n) drawn in proportion to w (total sum). */
static uint32_t draw(const double *w, uint32_t n, double sum)
{
	double u = unif() * sum;
	uint32_t i;

	for (i = 0; i + 1 < n && u >= w[i]; i++)
		u -= w[i];
	return i;
}

/*
 * Colocate's sampled tokens, one per RLB_COOC_STRIDE of the loads' tokens
 * (8192 per rank and micro-batch): like a group-limited router, each token
 * takes topk_groups of the groups in proportion to their step load, then
 * topk distinct experts of those groups in proportion to theirs.
 */
static int make_cooc(struct rlb_cooc *c, const struct rlb_loads *l,
		     uint32_t groups, uint32_t topk_groups, uint32_t topk,
		     struct rlb_err *err)
{
	const uint32_t E = l->experts, per = E / groups;
	uint32_t n = l->micro_batches * l->ranks * (8192 / RLB_COOC_STRIDE);
	double *w = calloc(E, sizeof(double)), *gw = calloc(groups, sizeof(double));
	uint32_t k, mb, s, e, t, i, g;
	int rc = -1;

	if (!w || !gw) {
		rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	if (rlb_cooc_init(c, l->layers, E, topk, err) < 0 ||
	    rlb_cooc_reserve(c, n, err) < 0)
		goto out;
	for (k = 0; k < l->layers; k++) {
		uint16_t *ids = c->ids + (size_t)k * c->cap * topk;
		double gsum = 0;

		memset(w, 0, E * sizeof(double));
		memset(gw, 0, groups * sizeof(double));
		for (mb = 0; mb < l->micro_batches; mb++)
			for (s = 0; s < l->ranks; s++)
				for (e = 0; e < E; e++)
					w[e] += l->count[rlb_loads_index(l, mb, k, s, e)];
		for (e = 0; e < E; e++)
			gw[e / per] += w[e];
		for (g = 0; g < groups; g++)
			gsum += gw[g];
		for (t = 0; t < n; t++, ids += topk) {
			double pw[64], psum = 0;
			uint32_t pick[64], np = 0;

			while (np < topk_groups) {	/* groups, without repeats */
				g = draw(gw, groups, gsum);
				for (i = 0; i < np && pick[i] != g; i++)
					;
				if (i == np) {
					pw[np] = gw[g];
					psum += gw[g];
					pick[np++] = g;
				}
			}
			for (i = 0; i < topk;) {	/* experts, without repeats */
				uint32_t j;

				g = pick[draw(pw, np, psum)];
				e = g * per + draw(w + g * per, per, gw[g]);
				for (j = 0; j < i && ids[j] != e; j++)
					;
				if (j == i)
					ids[i++] = (uint16_t)e;
			}
		}
	}
	c->tokens = n;
	rc = 0;
out:
	free(w);
	free(gw);
	return rc;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void setup(struct rlb_config *cfg, int experts, int groups)
{
	rlb_config_defaults(cfg);
	strcpy(cfg->model.name, "bench");
	cfg->model.experts = experts;
	cfg->model.topk = 8;
	cfg->model.hidden = 4096;
	cfg->model.expert_ffn = 1536;
	cfg->model.expert_groups = groups;
	cfg->cluster.nodes = 8;
	cfg->cluster.gpus_per_node = 8;
	cfg->parallel.ep_size = 64;
}

/*
 * relibra's cross-node reordering alone, per layer, from the static layout:
 * CPU time per layer and the objective against the static layout's.
 */
static int bench_reorder(const struct rlb_config *cfg, const struct rlb_loads *l,
			 struct rlb_err *err)
{
	const uint32_t M = l->micro_batches, L = l->layers, S = l->ranks,
		       E = l->experts;
	struct rlb_reorder ro;
	struct rlb_reorder_params rp;
	uint64_t *tot, *ns, sum = 0;
	double row_s, mig_s, gain = 0;
	uint32_t k, mb, s, e, swaps = 0, max_passes = 0;
	int rc = -1;

	memset(&ro, 0, sizeof(ro));
	rlb_reorder_costs(cfg, &row_s, &mig_s);
	rp = (struct rlb_reorder_params){ .num_gpus = S,
		.gpus_per_node = (uint32_t)cfg->cluster.gpus_per_node,
		.num_experts = E, .row_s = row_s,
		.migration_s = mig_s * cfg->balancer.migration_weight,
		.rounds = RLB_REORDER_ROUNDS };
	tot = calloc((size_t)M * E, sizeof(uint64_t));
	ns = calloc(L, sizeof(uint64_t));
	if (!tot || !ns) {
		rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	if (rlb_reorder_init(&ro, &rp, err) < 0)
		goto out;
	for (k = 0; k < L; k++) {
		uint64_t t0;

		memset(tot, 0, (size_t)M * E * sizeof(uint64_t));
		for (mb = 0; mb < M; mb++)
			for (s = 0; s < S; s++)
				for (e = 0; e < E; e++)
					tot[(size_t)mb * E + e] +=
						l->count[rlb_loads_index(l, mb, k, s, e)];
		t0 = rlb_thread_cpu_ns();
		if (rlb_reorder_run(&ro, tot, M, NULL, NULL, err) < 0)
			goto out;
		ns[k] = rlb_thread_cpu_ns() - t0;
		sum += ns[k];
		swaps += ro.res.swaps;
		if (ro.res.passes > max_passes)
			max_passes = ro.res.passes;
		gain += ro.res.objective_rows /
			ro.res.start_rows[RLB_REORDER_START_STATIC];
	}
	qsort(ns, L, sizeof(uint64_t), cmp_u64);
	printf("reorder EP%u (%ux%u GPUs, %u experts, %u layers, %u micro-batches), CPU time per layer: median %.2f ms, max %.2f ms, sum %.2f s; objective %.3f of static; %.1f swaps per layer, at most %u passes\n",
	       S, S / rp.gpus_per_node, rp.gpus_per_node, E, L, M, ns[L / 2] / 1e6,
	       ns[L - 1] / 1e6, sum / 1e9, gain / L, (double)swaps / L,
	       max_passes);
	rc = 0;
out:
	rlb_reorder_release(&ro);
	free(tot);
	free(ns);
	return rc;
}

static int bench_relibra(int steps)
{
	const uint32_t M = 16, L = 94, S = 64, E = 128;
	struct rlb_config cfg;
	struct rlb_balance_opts o;
	struct rlb_balancer *b = NULL;
	struct rlb_loads l;
	struct rlb_err err;
	uint32_t k, mb;
	int st, rc = 1;

	memset(&l, 0, sizeof(l));
	rlb_err_clear(&err);
	setup(&cfg, (int)E, 0);
	if (make_loads(&l, M, L, S, E, 8192, 8) < 0 ||
	    bench_reorder(&cfg, &l, &err) < 0)
		goto out;

	/* the replication planner alone, per (micro-batch, layer), static homes */
	{
		struct rlb_replicate_planner pl;
		struct rlb_replicate_params pp = {
			.num_gpus = S, .gpus_per_node = 8, .num_experts = E,
			.replica_slots = (uint32_t)cfg.balancer.replica_slots,
			.min_tokens_per_replica = (uint32_t)cfg.balancer.min_tokens_per_replica,
		};
		uint64_t *cell_ns = calloc((size_t)M * L, sizeof(uint64_t));
		size_t n = 0, reps = 0;

		memset(&pl, 0, sizeof(pl));
		if (!cell_ns || rlb_replicate_planner_init(&pl, &pp, &err) < 0) {
			free(cell_ns);
			goto out;
		}
		for (mb = 0; mb < M; mb++)
			for (k = 0; k < L; k++) {
				uint64_t t0 = rlb_thread_cpu_ns();

				if (rlb_replicate_planner_run(&pl, NULL,
							      l.count + rlb_loads_index(&l, mb, k, 0, 0),
							      &err) < 0) {
					rlb_replicate_planner_release(&pl);
					free(cell_ns);
					goto out;
				}
				cell_ns[n++] = rlb_thread_cpu_ns() - t0;
				reps += pl.plan.num_replicas;
			}
		qsort(cell_ns, n, sizeof(uint64_t), cmp_u64);
		printf("replication planner EP64 (8x8 GPUs, %u experts, %u slots), CPU time per (micro-batch, layer): median %.1f us, p99 %.1f us; %.1f replicas per call\n",
		       E, pp.replica_slots, cell_ns[n / 2] / 1e3, cell_ns[n * 99 / 100] / 1e3,
		       (double)reps / n);
		rlb_replicate_planner_release(&pl);
		free(cell_ns);
	}

	/* whole relibra steps (the loads change a little from step to step) */
	rlb_balance_opts_from_config(&o, &cfg);
	o.policy = RLB_POLICY_RELIBRA;
	if (rlb_balancer_new(&b, &cfg, &o, &err) < 0)
		goto out;
	for (st = 0; st < steps; st++) {
		struct rlb_step_plan p;
		size_t i, n = (size_t)M * L * S * E;
		uint64_t cpu;

		if (st)
			for (i = 0; i < n; i++)
				l.count[i] = (uint32_t)(l.count[i] * (0.8 + 0.4 * unif()));
		cpu = rlb_thread_cpu_ns();
		if (rlb_balancer_plan_step(b, NULL, &l, &p, &err) < 0) {
			rlb_step_plan_release(&p);
			goto out;
		}
		cpu = rlb_thread_cpu_ns() - cpu;
		printf("relibra step %d (%u layers, %u GPUs, %u micro-batches, %u experts): %.3f s CPU, %.3f s wall, %zu instances, %u migrated\n",
		       st, L, S, M, E, cpu / 1e9, p.planner_ns / 1e9, p.ninst,
		       p.migrated_experts);
		rlb_step_plan_release(&p);
	}
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "balance_bench: %s\n", err.msg);
	rlb_balancer_free(b);
	rlb_loads_release(&l);
	return rc;
}

/* DeepSeek-V3's shape: eplb, eplb-oracle's whole step, relibra's reordering */
static int bench_eplb(void)
{
	const uint32_t M = 16, L = 58, S = 64, E = 256;
	struct rlb_config cfg;
	struct rlb_balance_opts o;
	struct rlb_balancer *b = NULL;
	struct rlb_eplb_params ep = { .num_slots = E + S * 2, .num_groups = 8,
				      .num_nodes = 8, .num_gpus = S };
	struct rlb_eplb_result res;
	struct rlb_step_plan p;
	struct rlb_cooc cooc;
	struct rlb_loads l;
	struct rlb_err err;
	double *w = NULL;
	uint64_t best = UINT64_MAX;
	uint32_t k, mb, s, e;
	int i, rc = 1;

	memset(&l, 0, sizeof(l));
	memset(&res, 0, sizeof(res));
	memset(&cooc, 0, sizeof(cooc));
	rlb_err_clear(&err);
	setup(&cfg, (int)E, 8);
	if (make_loads(&l, M, L, S, E, 8192, 8) < 0)
		goto out;
	w = calloc((size_t)L * E, sizeof(double));
	if (!w)
		goto out;
	for (mb = 0; mb < M; mb++)
		for (k = 0; k < L; k++)
			for (s = 0; s < S; s++)
				for (e = 0; e < E; e++)
					w[(size_t)k * E + e] +=
						l.count[rlb_loads_index(&l, mb, k, s, e)];
	for (i = 0; i < 5; i++) {
		uint64_t t0 = rlb_thread_cpu_ns(), t;

		if (rlb_eplb_rebalance(w, L, E, &ep, &res, &err) < 0)
			goto out;
		t = rlb_thread_cpu_ns() - t0;
		if (t < best)
			best = t;
		rlb_eplb_result_release(&res);
	}
	printf("eplb (%u layers x %u experts, 64 GPUs, 2 redundant slots per GPU): %.2f ms CPU (best of 5)\n",
	       L, E, best / 1e6);
	rlb_balance_opts_from_config(&o, &cfg);
	o.policy = RLB_POLICY_EPLB_ORACLE;
	if (rlb_balancer_new(&b, &cfg, &o, &err) < 0)
		goto out;
	best = rlb_thread_cpu_ns();
	if (rlb_balancer_plan_step(b, NULL, &l, &p, &err) < 0) {
		rlb_step_plan_release(&p);
		goto out;
	}
	best = rlb_thread_cpu_ns() - best;
	printf("eplb-oracle whole step (the above plus load sums and %u micro-batches of even quotas): %.1f ms CPU, %.1f ms wall\n",
	       M, best / 1e6, p.planner_ns / 1e6);
	rlb_step_plan_release(&p);
	/* relibra's reordering on the same shape (DeepSeek-V3's) */
	if (bench_reorder(&cfg, &l, &err) < 0)
		goto out;
	/* relibra's whole first step there, without and with colocate */
	cfg.model.topk_groups = 4;
	if (make_cooc(&cooc, &l, 8, 4, 8, &err) < 0)
		goto out;
	for (i = 0; i < 2; i++) {
		rlb_balancer_free(b);
		b = NULL;
		rlb_balance_opts_from_config(&o, &cfg);
		o.policy = RLB_POLICY_RELIBRA;
		o.colocate = i;
		if (rlb_balancer_new(&b, &cfg, &o, &err) < 0)
			goto out;
		rlb_balancer_set_cooc(b, &cooc);
		best = rlb_thread_cpu_ns();
		if (rlb_balancer_plan_step(b, NULL, &l, &p, &err) < 0) {
			rlb_step_plan_release(&p);
			goto out;
		}
		best = rlb_thread_cpu_ns() - best;
		printf("relibra first step (%u layers, %u GPUs, %u micro-batches, %u experts), colocate %s (%u sampled tokens per layer): %.3f s CPU\n",
		       L, S, M, E, i ? "on" : "off", cooc.tokens, best / 1e9);
		rlb_step_plan_release(&p);
	}
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "balance_bench: %s\n", err.msg);
	rlb_balancer_free(b);
	rlb_loads_release(&l);
	rlb_cooc_release(&cooc);
	free(w);
	return rc;
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 3;

	if (steps < 1)
		steps = 1;
	if (bench_relibra(steps) || bench_eplb())
		return 1;
	return 0;
}
