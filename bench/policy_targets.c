/*
 * policy_targets.c - every policy and relibra's ablations and levers on one
 * trace in one pass (rlb_planner_run), printed next to the targets of
 * `relibra plan` for that cluster, with the peak memory of the run.
 * usage: policy_targets -c CONFIG TRACE [4x8|8x8|-] [THREADS]
 * The target set (default or "-": none, figures only) is that of `relibra
 * plan`'s qwen3-235b-a22b cases; each figure is marked "ok" or "MISSED".
 * THREADS counts the traffic (default 0: one per CPU, as relibra plan).  The row
 * "static --data-control" is relibra with neither reordering nor
 * replication: the static layout on the data-control schedule.  The
 * "--relay" rows simulate the relayed dispatch (docs/cost-model.md), the
 * static layout's too, so what the relay gives alone shows.  Unless the
 * config already packs `dynamic`, a second pass plans the static layout and
 * relibra on that packing, each against the first pass's static row.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "relibra.h"

/* The threads rlb_pool_new starts for THREADS. */
static unsigned threads_used(unsigned threads)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (threads == 0)
		threads = cpus > 0 ? (unsigned)cpus : 1;
	return threads < RLB_POOL_MAX ? threads : RLB_POOL_MAX;
}

struct row {
	const char *label;
	enum rlb_policy policy;
	int reorder, replicate, data_control, colocate, relay;
};

static const struct row rows[] = {
	{ "eplb", RLB_POLICY_EPLB, 1, 1, 0, 0, 0 },
	{ "eplb-oracle", RLB_POLICY_EPLB_ORACLE, 1, 1, 0, 0, 0 },
	{ "replicate", RLB_POLICY_REPLICATE, 1, 1, 0, 0, 0 },
	{ "relibra", RLB_POLICY_RELIBRA, 1, 1, 0, 0, 0 },
	{ "relibra --no-reorder", RLB_POLICY_RELIBRA, 0, 1, 0, 0, 0 },
	{ "relibra --no-replicate", RLB_POLICY_RELIBRA, 1, 0, 0, 0, 0 },
	{ "relibra --data-control", RLB_POLICY_RELIBRA, 1, 1, 1, 0, 0 },
	{ "static --data-control", RLB_POLICY_RELIBRA, 0, 0, 1, 0, 0 },
	{ "relibra --colocate", RLB_POLICY_RELIBRA, 1, 1, 0, 1, 0 },
	{ "relibra --colocate --data-control", RLB_POLICY_RELIBRA, 1, 1, 1, 1, 0 },
	{ "static --relay", RLB_POLICY_STATIC, 1, 1, 0, 0, 1 },
	{ "eplb-oracle --relay", RLB_POLICY_EPLB_ORACLE, 1, 1, 0, 0, 1 },
	{ "relibra --relay", RLB_POLICY_RELIBRA, 1, 1, 0, 0, 1 },
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

enum { R_EPLB_ORACLE = 1, R_REPLICATE = 2, R_RELIBRA = 3, R_NO_REORDER = 4,
       R_NO_REPLICATE = 5, R_DC = 6, R_COLOCATE_DC = 9, R_ORACLE_RELAY = 11,
       R_RELAY = 12 };

struct targets {
	const char *name;
	double ideal, same_traffic, over_static, over_oracle, gpu_p50;
	double dc_ideal;	/* relibra with the data levers (0: none) */
};

static const struct targets sets[] = {
	{ "4x8", 0.90, 0.97, 1.20, 1.12, 1.12, 0.95 },
	{ "8x8", 0.86, 0, 1.24, 1.09, 0, 0 },
};

static int missed;

static void check(const char *what, double have, double want, int at_most)
{
	int ok = at_most ? have <= want : have >= want;

	printf("  %-58s %8.3f  %s %.2f  %s\n", what, have, at_most ? "<=" : ">=",
	       want, ok ? "ok" : "MISSED");
	missed += !ok;
}

static void print_row(const char *label, const struct rlb_sim_summary *s,
		      double static_s)
{
	printf("%-34s %10.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", label,
	       s->step_time_s, static_s / s->policy_time.total_s,
	       s->fraction_of_ideal, s->fraction_of_same_traffic_ideal,
	       s->gpu_after.p50, s->node_after.p50, s->node_floor.p50);
}

/*
 * A second pass on the trainers' token-budget batching (docs/schedule.md,
 * "dynamic"): the static layout and relibra there, each against the static
 * layout of the first pass (static_s, the whole run's seconds).
 */
static int dynamic_rows(const char *trace, const struct rlb_config *cfg,
			const struct rlb_planner_opts *first, double static_s)
{
	struct rlb_planner_opts po = *first;
	struct rlb_planner_policy rel;
	struct rlb_sim_summary st;
	struct rlb_trace_reader *r = NULL;
	struct rlb_err err = {0};
	uint64_t t0 = rlb_now_ns();

	memset(&rel, 0, sizeof(rel));
	rlb_balance_opts_from_config(&rel.opts, cfg);
	rel.opts.policy = RLB_POLICY_RELIBRA;
	po.pack = RLB_PACK_DYNAMIC;
	if (rlb_trace_reader_open(&r, trace, &err) ||
	    rlb_planner_run(r, cfg, &po, &rel, 1, &st, &err)) {
		fprintf(stderr, "policy_targets: %s\n", err.msg);
		rlb_planner_policy_release(&rel);
		rlb_trace_reader_free(r);
		return -1;
	}
	printf("on the trainers' token-budget batching (--pack dynamic); x static: over the first static row,\n"
	       "f ideal, f same: of this packing's own ideals (ideal step %.3f s); %.1f s wall\n",
	       st.ideal.total_s / (st.steps ? st.steps : 1),
	       (rlb_now_ns() - t0) / 1e9);
	print_row("static --pack dynamic", &st, static_s);
	print_row("relibra --pack dynamic", &rel.summary, static_s);
	rlb_planner_policy_release(&rel);
	rlb_trace_reader_free(r);
	return 0;
}

int main(int argc, char **argv)
{
	struct rlb_planner_policy pol[NROWS];
	struct rlb_planner_opts po;
	struct rlb_sim_summary st;
	struct rlb_trace_reader *r = NULL;
	struct rlb_config cfg;
	struct rlb_err err = {0};
	const struct targets *t = NULL;
	struct rusage ru;
	uint64_t t0;
	double wall, st_time;
	size_t i;

	if (argc < 4 || strcmp(argv[1], "-c") != 0) {
		fprintf(stderr, "usage: policy_targets -c CONFIG TRACE [4x8|8x8|-] [THREADS]\n");
		return 2;
	}
	for (i = 0; argc > 4 && i < sizeof(sets) / sizeof(sets[0]); i++)
		if (strcmp(argv[4], sets[i].name) == 0)
			t = &sets[i];
	if (rlb_config_load(&cfg, argv[2], NULL, 0, &err) ||
	    rlb_trace_reader_open(&r, argv[3], &err)) {
		fprintf(stderr, "policy_targets: %s\n", err.msg);
		return 1;
	}
	memset(pol, 0, sizeof(pol));
	for (i = 0; i < NROWS; i++) {
		rlb_balance_opts_from_config(&pol[i].opts, &cfg);
		pol[i].opts.policy = rows[i].policy;
		pol[i].opts.reorder = rows[i].reorder;
		pol[i].opts.replicate = rows[i].replicate;
		pol[i].opts.data_control = rows[i].data_control;
		pol[i].opts.colocate = rows[i].colocate;
		pol[i].opts.relay = rows[i].relay;
	}
	memset(&po, 0, sizeof(po));
	po.pack = cfg.parallel.pack;
	po.first_step = 0;
	po.last_step = UINT32_MAX;
	po.threads = argc > 5 ? (unsigned)strtoul(argv[5], NULL, 10) : 0;
	t0 = rlb_now_ns();
	if (rlb_planner_run(r, &cfg, &po, pol, NROWS, &st, &err)) {
		fprintf(stderr, "policy_targets: %s\n", err.msg);
		rlb_trace_reader_free(r);
		return 1;
	}
	wall = (rlb_now_ns() - t0) / 1e9;
	getrusage(RUSAGE_SELF, &ru);
	st_time = st.policy_time.total_s;
	printf("%s on %s (EP %d), %llu steps, %s packing, %d tokens per GPU per micro-batch\n",
	       cfg.model.name, cfg.cluster.name, cfg.parallel.ep_size,
	       (unsigned long long)st.steps, rlb_pack_name(po.pack),
	       cfg.parallel.micro_batch_tokens);
	printf("%-34s %10s %9s %9s %9s %9s %9s %9s\n", "policy", "step (s)",
	       "x static", "f ideal", "f same", "GPU p50", "node p50", "floor");
	print_row("static", &st, st_time);
	for (i = 0; i < NROWS; i++)
		print_row(rows[i].label, &pol[i].summary, st_time);
	printf("ideal step %.3f s; one pass for every row: %.1f s wall on %u thread(s), peak memory %.0f MB\n",
	       st.ideal.total_s / (st.steps ? st.steps : 1), wall,
	       threads_used(po.threads), ru.ru_maxrss / 1024.0);
	if (po.pack != RLB_PACK_DYNAMIC && dynamic_rows(argv[3], &cfg, &po, st_time) < 0) {
		for (i = 0; i < NROWS; i++)
			rlb_planner_policy_release(&pol[i]);
		rlb_trace_reader_free(r);
		return 1;
	}
	if (t) {
		const struct rlb_sim_summary *rl = &pol[R_RELIBRA].summary;
		double rt = rl->policy_time.total_s;

		printf("targets (%s):\n", t->name);
		check("relibra fraction of the uniform-traffic ideal", rl->fraction_of_ideal, t->ideal, 0);
		if (t->same_traffic)
			check("relibra fraction of the same-traffic ideal",
			      rl->fraction_of_same_traffic_ideal, t->same_traffic, 0);
		check("relibra speedup over static", st_time / rt, t->over_static, 0);
		check("relibra speedup over eplb-oracle",
		      pol[R_EPLB_ORACLE].summary.policy_time.total_s / rt, t->over_oracle, 0);
		if (t->gpu_p50)
			check("relibra GPU max/mean p50", rl->gpu_after.p50, t->gpu_p50, 1);
		check("relibra over relibra --no-reorder (beats it: > 1)",
		      pol[R_NO_REORDER].summary.policy_time.total_s / rt, 1.0 + 1e-9, 0);
		check("relibra over relibra --no-replicate (beats it: > 1)",
		      pol[R_NO_REPLICATE].summary.policy_time.total_s / rt, 1.0 + 1e-9, 0);
		check("replicate GPU max/mean p50 over its node floor (>= 1)",
		      pol[R_REPLICATE].summary.gpu_after.p50 /
		      pol[R_REPLICATE].summary.node_floor.p50, 1.0, 0);
		if (t->dc_ideal) {
			check("relibra --data-control fraction of the uniform-traffic ideal",
			      pol[R_DC].summary.fraction_of_ideal, t->dc_ideal, 0);
			check("relibra --colocate --data-control, the same",
			      pol[R_COLOCATE_DC].summary.fraction_of_ideal, t->dc_ideal, 0);
		}
		printf("%d target(s) missed\n", missed);
		/* the relay as its own row: against the plain static layout and eplb-oracle */
		printf("relibra --relay: %.3fx static, %.3f of the ideal, %.3fx eplb-oracle, %.3fx eplb-oracle --relay\n",
		       st_time / pol[R_RELAY].summary.policy_time.total_s,
		       pol[R_RELAY].summary.fraction_of_ideal,
		       pol[R_EPLB_ORACLE].summary.policy_time.total_s /
		       pol[R_RELAY].summary.policy_time.total_s,
		       pol[R_ORACLE_RELAY].summary.policy_time.total_s /
		       pol[R_RELAY].summary.policy_time.total_s);
		/*
		 * What the static-speedup target is up against: a plan that
		 * keeps the static layout's all-to-all can at best balance the
		 * compute perfectly, for free.
		 */
		printf("bound: a plan with the static layout's traffic and perfectly balanced, free compute runs %.3fx static (1 / the static row's f same)\n",
		       st.fraction_of_same_traffic_ideal > 0 ? 1 / st.fraction_of_same_traffic_ideal : 0);
		{
			/* ... and what sets it: `relibra plan`'s gap to the ideal */
			const struct rlb_sim_time *p = &rl->policy_time;
			double n = rl->steps ? (double)rl->steps : 1;
			double gap = (p->total_s - rl->ideal.total_s) / n;
			double send = (p->a2a_senders_s - p->a2a_even_s) / n;

			printf("relibra's gap to the ideal: %.3f s per step, %.3f s of it (%.0f%%) the all-to-all's uneven senders\n",
			       gap, send, gap > 0 ? 100 * send / gap : 0);
		}
	}
	for (i = 0; i < NROWS; i++)
		rlb_planner_policy_release(&pol[i]);
	rlb_trace_reader_free(r);
	return 0;
}
