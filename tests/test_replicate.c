/*
 * test_replicate.c - unit tests of lib/replicate: hand-computed plans (one
 * hot expert, min_tokens_per_replica, two nodes, custom homes), the static
 * layout when there are no spare slots, errors, and the plan invariants on
 * random inputs.
 */
#include <stdlib.h>
#include <string.h>

#include "replicate.h"
#include "suites.h"

static uint32_t rnd(uint64_t *state)
{
	*state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(*state >> 33);
}

/*
 * Every property a plan must have (replicate.h): one home instance per
 * expert on its home GPU, replicas on distinct other GPUs of the home
 * node in ascending order, at most R per GPU, quotas >= max(m, 1) summing
 * to the expert's load, rows conserving every (source, expert) load and
 * every quota, the own-GPU rows taken first, the per-GPU and per-node
 * figures consistent, and no GPU above its node's threshold.
 */
static void check_plan(const struct rlb_replicate_planner *pl,
		       const uint32_t *home_gpu, const uint32_t *load)
{
	const struct rlb_replicate_plan *p = &pl->plan;
	uint32_t G = pl->p.num_gpus, E = pl->p.num_experts;
	uint32_t g = pl->p.gpus_per_node, R = pl->p.replica_slots;
	uint64_t m = pl->p.min_tokens_per_replica, o = pl->p.instance_rows;
	uint64_t *gpu_q = calloc(G, sizeof(uint64_t));
	uint64_t *gpu_home = calloc(G, sizeof(uint64_t));
	uint32_t *gpu_reps = calloc(G, sizeof(uint32_t));
	uint64_t total_load = 0, total_q = 0;
	uint32_t e, s, k, n, j, i;

	ck_assert_ptr_nonnull(gpu_q);
	ck_assert_ptr_nonnull(gpu_home);
	ck_assert_ptr_nonnull(gpu_reps);
	ck_assert_uint_eq(p->expert_first[0], 0);
	ck_assert_uint_eq(p->expert_first[E], p->num_instances);
	ck_assert_uint_eq(p->num_instances, E + p->num_replicas);
	for (e = 0; e < E; e++) {
		uint32_t cnt, home = home_gpu ? home_gpu[e] : e / (E / G);
		const struct rlb_replicate_instance *in =
			rlb_replicate_instances(p, e, &cnt);
		uint32_t f = p->expert_first[e];
		uint64_t L = 0, qsum = 0;

		ck_assert_uint_ge(cnt, 1);
		for (s = 0; s < G; s++)
			L += load[(size_t)s * E + e];
		total_load += L;
		gpu_home[home] += L;
		ck_assert_uint_eq(in[0].gpu, home);
		for (k = 0; k < cnt; k++) {
			uint64_t rsum = 0;
			uint32_t own;

			ck_assert_uint_eq(in[k].expert, e);
			if (k > 0) {
				ck_assert_uint_eq(in[k].gpu / g, home / g);
				ck_assert_uint_ne(in[k].gpu, home);
				if (k > 1)
					ck_assert_uint_gt(in[k].gpu, in[k - 1].gpu);
				ck_assert_uint_ge(in[k].quota_tokens, m);
				ck_assert_uint_ge(in[k].quota_tokens, 1);
				gpu_reps[in[k].gpu]++;
			}
			qsum += in[k].quota_tokens;
			gpu_q[in[k].gpu] += in[k].quota_tokens;
			for (s = 0; s < G; s++)
				rsum += rlb_replicate_rows(p, f + k, s);
			ck_assert_uint_eq(rsum, in[k].quota_tokens);
			/* locality: the instance's own GPU's rows come first */
			own = load[(size_t)in[k].gpu * E + e];
			ck_assert_uint_eq(rlb_replicate_rows(p, f + k, in[k].gpu),
					  own < in[k].quota_tokens ? own :
					  in[k].quota_tokens);
		}
		ck_assert_uint_eq(qsum, L);
		for (s = 0; s < G; s++) {
			uint64_t rsum = 0;

			for (k = 0; k < cnt; k++)
				rsum += rlb_replicate_rows(p, f + k, s);
			ck_assert_uint_eq(rsum, load[(size_t)s * E + e]);
		}
	}
	for (j = 0; j < G; j++) {
		ck_assert_uint_eq(p->gpu_tokens[j], gpu_q[j]);
		ck_assert_uint_eq(p->gpu_home_tokens[j], gpu_home[j]);
		ck_assert_uint_eq(p->gpu_replicas[j], gpu_reps[j]);
		ck_assert_uint_le(p->gpu_replicas[j], R);
		total_q += gpu_q[j];
	}
	ck_assert_uint_eq(total_q, total_load);
	for (n = 0; n < p->num_nodes; n++) {
		uint64_t sum = 0, before = 0, after = 0;
		uint64_t T = p->node_threshold_tokens[n];

		for (i = 0; i < g; i++) {
			j = n * g + i;
			sum += gpu_home[j];
			if (gpu_home[j] > before)
				before = gpu_home[j];
			if (gpu_q[j] > after)
				after = gpu_q[j];
			/* each replica also costs its GEMM's fixed rows */
			ck_assert_uint_le(gpu_q[j] + o * gpu_reps[j], T);
		}
		ck_assert_uint_eq(p->node_floor_tokens[n], (sum + g - 1) / g);
		ck_assert_uint_ge(T, p->node_floor_tokens[n]);
		ck_assert_uint_le(T, before);
		ck_assert_uint_le(after, before);
		/* without the minimum no donor overshoots: the max is T */
		if (m == 0)
			ck_assert_uint_eq(after, T);
	}
	free(gpu_q);
	free(gpu_home);
	free(gpu_reps);
}

/*
 * One node of 4 GPUs, 2 experts each, R = 1.  Expert loads: e0 900, e1 100
 * (GPU 0: 1000), e2 50, e3 50 (GPU 1: 100), e4 100, e5 100 (GPU 2: 200),
 * e6 150, e7 150 (GPU 3: 300).  Node floor 1600 / 4 = 400.
 */
static const uint32_t hot_load[4][8] = {
	{ 100, 25, 10, 10, 25, 25, 30, 30 },
	{ 200, 25, 10, 10, 25, 25, 30, 30 },
	{ 300, 25, 15, 15, 25, 25, 45, 45 },
	{ 300, 25, 15, 15, 25, 25, 45, 45 },
};

/*
 * m = 0, T = 400: GPU 0 sheds 600 of e0.  No GPU has room for all 600, so
 * the coldest, GPU 1 (room 300), takes 300; then no room fits 300, so GPU
 * 2 (200) takes 200; then GPU 3's room 100 fits the last 100 exactly.
 * Split of e0 (sources 100 200 300 300): own GPUs first: home<-s0 100,
 * GPU1<-s1 200, GPU2<-s2 200, GPU3<-s3 100; then the node's sources in
 * order: s2's last 100 and s3's first 100 to the home (quota 300 full),
 * s3's last 100 to GPU 1.
 */
START_TEST(test_one_hot_expert)
{
	struct rlb_replicate_params prm = { 4, 4, 8, 1, 0, 0 };
	static const uint32_t gpus[4] = { 0, 1, 2, 3 };
	static const uint64_t quota[4] = { 300, 300, 200, 100 };
	static const uint32_t rows[4][4] = {	/* [instance][source] */
		{ 100, 0, 100, 100 },
		{ 0, 200, 0, 100 },
		{ 0, 0, 200, 0 },
		{ 0, 0, 0, 100 },
	};
	struct rlb_replicate_planner pl;
	struct rlb_err err = {0};
	const struct rlb_replicate_instance *in;
	uint32_t cnt, k, s, e;

	ck_assert_int_eq(rlb_replicate_planner_init(&pl, &prm, &err), 0);
	ck_assert_int_eq(rlb_replicate_planner_run(&pl, NULL, &hot_load[0][0],
						   &err), 0);
	check_plan(&pl, NULL, &hot_load[0][0]);
	ck_assert_uint_eq(pl.plan.num_replicas, 3);
	ck_assert_uint_eq(pl.plan.node_floor_tokens[0], 400);
	ck_assert_uint_eq(pl.plan.node_threshold_tokens[0], 400);
	in = rlb_replicate_instances(&pl.plan, 0, &cnt);
	ck_assert_uint_eq(cnt, 4);
	for (k = 0; k < 4; k++) {
		ck_assert_uint_eq(in[k].gpu, gpus[k]);
		ck_assert_uint_eq(in[k].quota_tokens, quota[k]);
		for (s = 0; s < 4; s++)
			ck_assert_uint_eq(rlb_replicate_rows(&pl.plan, k, s),
					  rows[k][s]);
	}
	for (e = 1; e < 8; e++) {
		rlb_replicate_instances(&pl.plan, e, &cnt);
		ck_assert_uint_eq(cnt, 1);
	}
	for (k = 0; k < 4; k++) {
		ck_assert_uint_eq(pl.plan.gpu_tokens[k], 400);
		ck_assert_uint_eq(pl.plan.gpu_replicas[k], k == 0 ? 0 : 1);
	}
	ck_assert_uint_eq(pl.plan.gpu_home_tokens[0], 1000);
	rlb_replicate_planner_release(&pl);
	rlb_replicate_planner_release(&pl);	/* idempotent */
}
END_TEST

/*
 * The same loads with m = 0 and a fixed cost of 50 rows per replica: at T
 * the receivers hold T - 150, T - 250 and T - 350 rows of e0 against the
 * donor's excess 1000 - T, so T >= 437.5.  T = 437 fails (GPU 3's room 137
 * takes 87 of the last 89), T = 438 succeeds: GPU 1 (room 338) takes 288,
 * GPU 2 (238) 188, then GPU 3's room 138 fits the last 86 plus 50.
 */
START_TEST(test_instance_rows)
{
	struct rlb_replicate_params prm = { 4, 4, 8, 1, 0, 50 };
	static const uint64_t quota[4] = { 338, 288, 188, 86 };
	struct rlb_replicate_planner pl;
	struct rlb_err err = {0};
	const struct rlb_replicate_instance *in;
	uint32_t cnt, k;

	ck_assert_int_eq(rlb_replicate_planner_init(&pl, &prm, &err), 0);
	ck_assert_int_eq(rlb_replicate_planner_run(&pl, NULL, &hot_load[0][0],
						   &err), 0);
	check_plan(&pl, NULL, &hot_load[0][0]);
	ck_assert_uint_eq(pl.plan.node_threshold_tokens[0], 438);
	in = rlb_replicate_instances(&pl.plan, 0, &cnt);
	ck_assert_uint_eq(cnt, 4);
	for (k = 0; k < 4; k++) {
		ck_assert_uint_eq(in[k].gpu, k);
		ck_assert_uint_eq(in[k].quota_tokens, quota[k]);
	}
	ck_assert_uint_eq(pl.plan.gpu_tokens[0], 438);
	ck_assert_uint_eq(pl.plan.gpu_tokens[3], 386);
	rlb_replicate_planner_release(&pl);
}
END_TEST

/*
 * The same loads with m = 150.  T = 400..433 fail: GPU 1 takes T - 100,
 * GPU 2 takes T - 200, and the last 1300 - 3T (< 150) would need GPU 3,
 * whose room T - 300 < 150; e1 (100) is below m.  T = 434 succeeds: GPU 1
 * takes 334, and GPU 2's room 234 fits the remaining 232.  GPU 3 gets
 * nothing.  Split: home <- s0 100 + s2 68 + s3 166, GPU 1 <- s1 200 + s3
 * 134, GPU 2 <- s2 232.
 */
START_TEST(test_min_tokens)
{
	struct rlb_replicate_params prm = { 4, 4, 8, 1, 150, 0 };
	static const uint64_t after[4] = { 434, 434, 432, 300 };
	static const uint32_t rows[3][4] = {
		{ 100, 0, 68, 166 },
		{ 0, 200, 0, 134 },
		{ 0, 0, 232, 0 },
	};
	struct rlb_replicate_planner pl;
	struct rlb_err err = {0};
	const struct rlb_replicate_instance *in;
	uint32_t cnt, k, s;

	ck_assert_int_eq(rlb_replicate_planner_init(&pl, &prm, &err), 0);
	ck_assert_int_eq(rlb_replicate_planner_run(&pl, NULL, &hot_load[0][0],
						   &err), 0);
	check_plan(&pl, NULL, &hot_load[0][0]);
	ck_assert_uint_eq(pl.plan.node_threshold_tokens[0], 434);
	ck_assert_uint_eq(pl.plan.num_replicas, 2);
	in = rlb_replicate_instances(&pl.plan, 0, &cnt);
	ck_assert_uint_eq(cnt, 3);
	ck_assert_uint_eq(in[1].gpu, 1);
	ck_assert_uint_eq(in[1].quota_tokens, 334);
	ck_assert_uint_eq(in[2].gpu, 2);
	ck_assert_uint_eq(in[2].quota_tokens, 232);
	for (k = 0; k < 3; k++)
		for (s = 0; s < 4; s++)
			ck_assert_uint_eq(rlb_replicate_rows(&pl.plan, k, s),
					  rows[k][s]);
	for (k = 0; k < 4; k++)
		ck_assert_uint_eq(pl.plan.gpu_tokens[k], after[k]);
	rlb_replicate_planner_release(&pl);

	/*
	 * Overshoot: 3 GPUs, one expert each, loads 100, 20, 60, m = 50;
	 * floor 60.  A donor excess below m is raised to m: at T = 70 the
	 * excess 30 becomes 50, which GPU 1's room 50 fits, and GPU 0 ends at
	 * 50, below T.  Lower T fail: GPU 1's room T - 20 is below 50.
	 */
	{
		struct rlb_replicate_params p3 = { 3, 3, 3, 1, 50, 0 };
		static const uint32_t load3[3][3] = {
			{ 100, 0, 0 }, { 0, 20, 0 }, { 0, 0, 60 },
		};
		static const uint64_t after3[3] = { 50, 70, 60 };

		ck_assert_int_eq(rlb_replicate_planner_init(&pl, &p3, &err), 0);
		ck_assert_int_eq(rlb_replicate_planner_run(&pl, NULL, &load3[0][0],
							   &err), 0);
		check_plan(&pl, NULL, &load3[0][0]);
		ck_assert_uint_eq(pl.plan.node_threshold_tokens[0], 70);
		ck_assert_uint_eq(pl.plan.num_replicas, 1);
		ck_assert_uint_eq(pl.plan.instance[1].gpu, 1);
		ck_assert_uint_eq(pl.plan.instance[1].quota_tokens, 50);
		for (k = 0; k < 3; k++)
			ck_assert_uint_eq(pl.plan.gpu_tokens[k], after3[k]);
		rlb_replicate_planner_release(&pl);
	}

	/* a minimum no receiver can ever host: the static layout */
	prm.min_tokens_per_replica = 10000;
	ck_assert_int_eq(rlb_replicate_planner_init(&pl, &prm, &err), 0);
	ck_assert_int_eq(rlb_replicate_planner_run(&pl, NULL, &hot_load[0][0],
						   &err), 0);
	check_plan(&pl, NULL, &hot_load[0][0]);
	ck_assert_uint_eq(pl.plan.num_replicas, 0);
	ck_assert_uint_eq(pl.plan.node_threshold_tokens[0], 1000);
	rlb_replicate_planner_release(&pl);
}
END_TEST

/*
 * Two nodes of 2 GPUs, one expert per GPU, R = 1; only expert 0 is loaded
 * (sources 10 20 30 40).  Node 0: floor 50, so GPU 1 gets a replica of
 * quota 50; the idle node 1 gets nothing (replicas never leave the home
 * node).  Split: own GPUs first (home <- s0 10, GPU 1 <- s1 20), the home
 * node has nothing left, then the other sources in order: s2's 30 to the
 * home (10 left), s3's 40 as 10 to the home and 30 to GPU 1.
 */
START_TEST(test_stays_in_node)
{
	struct rlb_replicate_params prm = { 4, 2, 4, 1, 0, 0 };
	static const uint32_t load[4][4] = {
		{ 10, 0, 0, 0 }, { 20, 0, 0, 0 }, { 30, 0, 0, 0 }, { 40, 0, 0, 0 },
	};
	static const uint32_t rows[2][4] = { { 10, 0, 30, 10 }, { 0, 20, 0, 30 } };
	static const uint64_t after[4] = { 50, 50, 0, 0 };
	struct rlb_replicate_planner pl;
	struct rlb_err err = {0};
	uint32_t k, s;

	ck_assert_int_eq(rlb_replicate_planner_init(&pl, &prm, &err), 0);
	ck_assert_uint_eq(pl.plan.num_nodes, 2);
	ck_assert_int_eq(rlb_replicate_planner_run(&pl, NULL, &load[0][0], &err),
			 0);
	check_plan(&pl, NULL, &load[0][0]);
	ck_assert_uint_eq(pl.plan.num_replicas, 1);
	ck_assert_uint_eq(pl.plan.instance[1].gpu, 1);
	ck_assert_uint_eq(pl.plan.node_threshold_tokens[0], 50);
	ck_assert_uint_eq(pl.plan.node_threshold_tokens[1], 0);
	for (k = 0; k < 2; k++)
		for (s = 0; s < 4; s++)
			ck_assert_uint_eq(rlb_replicate_rows(&pl.plan, k, s),
					  rows[k][s]);
	for (k = 0; k < 4; k++)
		ck_assert_uint_eq(pl.plan.gpu_tokens[k], after[k]);
	rlb_replicate_planner_release(&pl);
}
END_TEST

/*
 * A custom home layout: expert 0 lives on GPU 3 (node 1), so its replica
 * goes to GPU 2, the other GPU of node 1; the source on GPU 3 keeps its
 * rows local.
 */
START_TEST(test_custom_home)
{
	struct rlb_replicate_params prm = { 4, 2, 4, 1, 0, 0 };
	static const uint32_t home[4] = { 3, 1, 0, 2 };
	static const uint32_t load[4][4] = {
		{ 10, 0, 0, 0 }, { 20, 0, 0, 0 }, { 30, 0, 0, 0 }, { 40, 0, 0, 0 },
	};
	static const uint32_t bad_home[4] = { 0, 1, 4, 2 };
	struct rlb_replicate_planner pl;
	struct rlb_err err = {0};
	const struct rlb_replicate_instance *in;
	uint32_t cnt;

	ck_assert_int_eq(rlb_replicate_planner_init(&pl, &prm, &err), 0);
	ck_assert_int_eq(rlb_replicate_planner_run(&pl, home, &load[0][0], &err),
			 0);
	check_plan(&pl, home, &load[0][0]);
	in = rlb_replicate_instances(&pl.plan, 0, &cnt);
	ck_assert_uint_eq(cnt, 2);
	ck_assert_uint_eq(in[0].gpu, 3);
	ck_assert_uint_eq(in[1].gpu, 2);
	ck_assert_uint_eq(in[0].quota_tokens, 50);
	ck_assert_uint_eq(rlb_replicate_rows(&pl.plan, 0, 3), 40);
	ck_assert_uint_eq(rlb_replicate_rows(&pl.plan, 1, 2), 30);
	ck_assert_uint_eq(pl.plan.node_threshold_tokens[0], 0);
	ck_assert_uint_eq(pl.plan.node_threshold_tokens[1], 50);

	ck_assert_int_eq(rlb_replicate_planner_run(&pl, bad_home, &load[0][0],
						   &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "home gpu of expert 2 is 4, beyond the 4 gpus");
	ck_assert_uint_eq(pl.plan.num_instances, 0);
	rlb_replicate_planner_release(&pl);
}
END_TEST

/*
 * Best fit.  One node of 4 GPUs, 3 experts each, R = 1; every GPU's tokens
 * come from its own source.  GPU 0: e1 10, e2 30 (40); GPU 1: e3 50, e4
 * 30, e5 30 (110); GPU 2: nothing; GPU 3: e9 10, e11 20 (30).  Floor
 * 180 / 4 = 45.  At T = 45 GPU 1 sheds 65; rooms: GPU 0 5, GPU 2 45,
 * GPU 3 15.  e3 wants 50: no room fits, the coldest GPU 2 takes 45; e3's
 * last 5 fit GPU 0's room exactly (best fit; the coldest, GPU 3, would
 * waste its only slot on 5 and leave 10 of e4 nowhere to go); e4 wants
 * 15 and fits GPU 3 exactly.  e3 keeps nothing at home.
 */
START_TEST(test_best_fit)
{
	struct rlb_replicate_params prm = { 4, 4, 12, 1, 0, 0 };
	static const uint32_t L[12] = { 0, 10, 30, 50, 30, 30, 0, 0, 0, 10, 0, 20 };
	uint32_t load[4 * 12] = {0};
	struct rlb_replicate_planner pl;
	struct rlb_err err = {0};
	const struct rlb_replicate_instance *in;
	uint32_t cnt, e, j;

	for (e = 0; e < 12; e++)
		load[(e / 3) * 12 + e] = L[e];
	ck_assert_int_eq(rlb_replicate_planner_init(&pl, &prm, &err), 0);
	ck_assert_int_eq(rlb_replicate_planner_run(&pl, NULL, load, &err), 0);
	check_plan(&pl, NULL, load);
	ck_assert_uint_eq(pl.plan.node_threshold_tokens[0], 45);
	ck_assert_uint_eq(pl.plan.num_replicas, 3);
	in = rlb_replicate_instances(&pl.plan, 3, &cnt);
	ck_assert_uint_eq(cnt, 3);
	ck_assert_uint_eq(in[0].gpu, 1);
	ck_assert_uint_eq(in[0].quota_tokens, 0);
	ck_assert_uint_eq(in[1].gpu, 0);
	ck_assert_uint_eq(in[1].quota_tokens, 5);
	ck_assert_uint_eq(in[2].gpu, 2);
	ck_assert_uint_eq(in[2].quota_tokens, 45);
	/* source 1's 50 rows of e3: none home, 5 to GPU 0, 45 to GPU 2 */
	ck_assert_uint_eq(rlb_replicate_rows(&pl.plan, pl.plan.expert_first[3], 1), 0);
	ck_assert_uint_eq(rlb_replicate_rows(&pl.plan, pl.plan.expert_first[3] + 1, 1), 5);
	ck_assert_uint_eq(rlb_replicate_rows(&pl.plan, pl.plan.expert_first[3] + 2, 1), 45);
	in = rlb_replicate_instances(&pl.plan, 4, &cnt);
	ck_assert_uint_eq(cnt, 2);
	ck_assert_uint_eq(in[1].gpu, 3);
	ck_assert_uint_eq(in[1].quota_tokens, 15);
	for (j = 0; j < 4; j++)
		ck_assert_uint_eq(pl.plan.gpu_tokens[j], 45);
	rlb_replicate_planner_release(&pl);
}
END_TEST

/* R = 0 and g = 1: the static layout, rows equal to the loads. */
START_TEST(test_static_layout)
{
	struct rlb_replicate_params cases[2] = {
		{ 8, 4, 16, 0, 0, 0 },	/* no spare slots */
		{ 4, 1, 8, 2, 0, 0 },	/* one GPU per node */
	};
	uint64_t state = 7;
	uint32_t c, e, s, j;

	for (c = 0; c < 2; c++) {
		struct rlb_replicate_planner pl;
		struct rlb_err err = {0};
		uint32_t G = cases[c].num_gpus, E = cases[c].num_experts;
		uint32_t *load = malloc((size_t)G * E * sizeof(uint32_t));

		ck_assert_ptr_nonnull(load);
		for (j = 0; j < G * E; j++)
			load[j] = rnd(&state) % 1000 * (j % 5 == 0 ? 30 : 1);
		ck_assert_int_eq(rlb_replicate_planner_init(&pl, &cases[c], &err), 0);
		ck_assert_int_eq(rlb_replicate_planner_run(&pl, NULL, load, &err), 0);
		check_plan(&pl, NULL, load);
		ck_assert_uint_eq(pl.plan.num_replicas, 0);
		ck_assert_uint_eq(pl.plan.num_instances, E);
		for (e = 0; e < E; e++) {
			ck_assert_uint_eq(pl.plan.instance[e].gpu, e / (E / G));
			for (s = 0; s < G; s++)
				ck_assert_uint_eq(rlb_replicate_rows(&pl.plan, e, s),
						  load[s * E + e]);
		}
		for (j = 0; j < G; j++)
			ck_assert_uint_eq(pl.plan.gpu_tokens[j],
					  pl.plan.gpu_home_tokens[j]);
		rlb_replicate_planner_release(&pl);
		free(load);
	}
}
END_TEST

START_TEST(test_init_errors)
{
	static const struct {
		struct rlb_replicate_params p;
		const char *msg;
	} cases[] = {
		{ { 0, 1, 8, 1, 0, 0 }, "gpus (0) must be between 1 and 65536" },
		{ { 8, 3, 8, 1, 0, 0 }, "gpus per node (3) must divide gpus (8)" },
		{ { 8, 0, 8, 1, 0, 0 }, "gpus per node (0) must divide gpus (8)" },
		{ { 8, 4, 12, 1, 0, 0 },
		  "experts (12) must be a positive multiple of gpus (8), at most 1048576" },
		{ { 8, 4, 0, 1, 0, 0 },
		  "experts (0) must be a positive multiple of gpus (8), at most 1048576" },
		{ { 8, 4, 8, 70000, 0, 0 },
		  "replica slots (70000) must be at most 65536" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rlb_replicate_planner pl;
		struct rlb_err err = {0};

		ck_assert_int_eq(rlb_replicate_planner_init(&pl, &cases[i].p, &err),
				 RLB_EINVAL);
		ck_assert_str_eq(err.msg, cases[i].msg);
		rlb_replicate_planner_release(&pl);
	}
}
END_TEST

/* Two plans compare equal (everything a consumer reads). */
static void assert_same_plan(const struct rlb_replicate_plan *a,
			     const struct rlb_replicate_plan *b)
{
	uint32_t G = a->num_gpus, i;

	ck_assert_uint_eq(a->num_instances, b->num_instances);
	ck_assert_mem_eq(a->expert_first, b->expert_first,
			 (a->num_experts + 1) * sizeof(uint32_t));
	for (i = 0; i < a->num_instances; i++) {
		ck_assert_uint_eq(a->instance[i].expert, b->instance[i].expert);
		ck_assert_uint_eq(a->instance[i].gpu, b->instance[i].gpu);
		ck_assert_uint_eq(a->instance[i].quota_tokens,
				  b->instance[i].quota_tokens);
	}
	ck_assert_mem_eq(a->rows, b->rows,
			 (size_t)G * a->num_instances * sizeof(uint32_t));
	ck_assert_mem_eq(a->gpu_tokens, b->gpu_tokens, G * sizeof(uint64_t));
	ck_assert_mem_eq(a->node_threshold_tokens, b->node_threshold_tokens,
			 a->num_nodes * sizeof(uint64_t));
}

/* Invariants, determinism and workspace reuse on random inputs. */
START_TEST(test_random_invariants)
{
	static const struct rlb_replicate_params shapes[] = {
		{ 8, 8, 16, 2, 0, 0 },
		{ 8, 4, 32, 1, 16, 32 },
		{ 16, 8, 64, 2, 64, 0 },
		{ 16, 8, 64, 2, 0, 100 },
		{ 16, 4, 16, 3, 0, 0 },
		{ 6, 3, 12, 2, 5, 7 },
		{ 64, 8, 128, 2, 64, 0 },
		{ 8, 8, 8, 8, 0, 0 },
		{ 4, 2, 256, 1, 0, 0 },	/* 64 experts per GPU: merge-sorted */
		{ 2, 2, 2, 1, 1, 0 },
	};
	uint64_t state = 99;
	size_t i, trial;

	for (i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		struct rlb_replicate_planner a, b;
		struct rlb_err err = {0};
		uint32_t G = shapes[i].num_gpus, E = shapes[i].num_experts;
		size_t n = (size_t)G * E, j;
		uint32_t *load1 = malloc(n * sizeof(uint32_t));
		uint32_t *load2 = malloc(n * sizeof(uint32_t));
		uint32_t *home = malloc(E * sizeof(uint32_t));

		ck_assert_ptr_nonnull(load1);
		ck_assert_ptr_nonnull(load2);
		ck_assert_ptr_nonnull(home);
		ck_assert_int_eq(rlb_replicate_planner_init(&a, &shapes[i], &err), 0);
		ck_assert_int_eq(rlb_replicate_planner_init(&b, &shapes[i], &err), 0);
		for (trial = 0; trial < 12; trial++) {
			const uint32_t *h = trial % 2 ? home : NULL;

			/* a random permutation of the static homes */
			for (j = 0; j < E; j++)
				home[j] = (uint32_t)(j / (E / G));
			for (j = E; j > 1; j--) {
				size_t x = rnd(&state) % j;
				uint32_t t = home[j - 1];

				home[j - 1] = home[x];
				home[x] = t;
			}
			for (j = 0; j < n; j++) {
				uint32_t v = rnd(&state);

				/* zeros, a few hot experts, ties */
				load1[j] = trial % 3 == 0 ? v % 3 :
					   (j % E) % 7 == trial % 7 ? v % 5000 :
					   v % 4 == 0 ? 0 : v % 200;
				load2[j] = rnd(&state) % 300;
			}
			ck_assert_int_eq(rlb_replicate_planner_run(&a, h, load1, &err), 0);
			check_plan(&a, h, load1);
			/* b plans something else first: its workspace is reused */
			ck_assert_int_eq(rlb_replicate_planner_run(&b, NULL, load2, &err), 0);
			check_plan(&b, NULL, load2);
			ck_assert_int_eq(rlb_replicate_planner_run(&b, h, load1, &err), 0);
			assert_same_plan(&a.plan, &b.plan);
		}
		rlb_replicate_planner_release(&a);
		rlb_replicate_planner_release(&b);
		free(load1);
		free(load2);
		free(home);
	}
}
END_TEST

/* Perfectly balanced nodes need no replica. */
START_TEST(test_balanced_input)
{
	struct rlb_replicate_params prm = { 8, 4, 16, 2, 0, 0 };
	struct rlb_replicate_planner pl;
	struct rlb_err err = {0};
	uint32_t load[8 * 16];
	size_t j;

	for (j = 0; j < 8 * 16; j++)
		load[j] = 10;
	ck_assert_int_eq(rlb_replicate_planner_init(&pl, &prm, &err), 0);
	ck_assert_int_eq(rlb_replicate_planner_run(&pl, NULL, load, &err), 0);
	check_plan(&pl, NULL, load);
	ck_assert_uint_eq(pl.plan.num_replicas, 0);
	ck_assert_uint_eq(pl.plan.node_threshold_tokens[0], 160);
	ck_assert_uint_eq(pl.plan.node_threshold_tokens[1], 160);
	rlb_replicate_planner_release(&pl);
}
END_TEST

Suite *rlb_suite_replicate(void)
{
	Suite *s = suite_create("replicate");
	TCase *tc = tcase_create("replicate");

	tcase_add_test(tc, test_one_hot_expert);
	tcase_add_test(tc, test_instance_rows);
	tcase_add_test(tc, test_min_tokens);
	tcase_add_test(tc, test_stays_in_node);
	tcase_add_test(tc, test_custom_home);
	tcase_add_test(tc, test_best_fit);
	tcase_add_test(tc, test_static_layout);
	tcase_add_test(tc, test_init_errors);
	tcase_add_test(tc, test_random_invariants);
	tcase_add_test(tc, test_balanced_input);
	suite_add_tcase(s, tc);
	return s;
}
