/*
 * test_eplb.c - unit tests of lib/eplb: the reference vector, hand-checked
 * global and edge cases, parameter and JSON errors, invariants on random
 * inputs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eplb.h"
#include "suites.h"

static const double ref_weight[2][12] = {
	{90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86},
	{20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27},
};

static const int32_t ref_phy2log[2][16] = {
	{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1},
	{7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1},
};

static const int32_t ref_logcnt[2][12] = {
	{1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1},
	{1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1},
};

/* Deterministic pseudo-random numbers (64-bit LCG, high bits). */
static uint32_t rnd(uint64_t *state)
{
	*state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(*state >> 33);
}

/*
 * Invariants every result satisfies: logcnt >= 1 summing to P, phy2log
 * agreeing with logcnt, log2phy listing each expert's slots in replica
 * order (rank k at position k), the per-GPU view, and for the
 * hierarchical policy every group's experts (with all their replicas) on
 * one node, G/N groups per node.  Also the replication rule's optimality
 * condition: an expert with c > 1 copies had the highest load per copy
 * when it got its last one, so w/(c-1) >= w'/c' for every expert of the
 * same node.
 */
static void check_invariants(const struct rlb_eplb_result *r,
			     const double *w, const struct rlb_eplb_params *p)
{
	size_t L = r->num_layers, E = r->num_experts, P = r->num_slots;
	size_t N = r->hierarchical ? p->num_nodes : 1;
	size_t G = r->hierarchical ? p->num_groups : 1;
	size_t ppn = P / N, gs = E / G, l, e, f, s, k, x;
	int32_t *seen = calloc(E, sizeof(int32_t));
	int32_t *node_of = calloc(E, sizeof(int32_t));

	ck_assert_ptr_nonnull(seen);
	ck_assert_ptr_nonnull(node_of);
	ck_assert_uint_eq(r->slots_per_gpu, P / p->num_gpus);
	ck_assert_int_eq(r->hierarchical, p->num_groups % p->num_nodes == 0);
	for (l = 0; l < L; l++) {
		const int32_t *phy = r->phy2log + l * P;
		const int32_t *cnt = r->logcnt + l * E;
		const int32_t *rank = r->phyrank + l * P;
		size_t sum = 0, max_seen = 0;

		memset(seen, 0, E * sizeof(int32_t));
		for (e = 0; e < E; e++) {
			ck_assert_int_ge(cnt[e], 1);
			ck_assert_uint_le((size_t)cnt[e], r->max_count);
			sum += (size_t)cnt[e];
			node_of[e] = -1;
		}
		ck_assert_uint_eq(sum, P);
		for (s = 0; s < P; s++) {
			ck_assert_int_ge(phy[s], 0);
			ck_assert_int_lt(phy[s], (int32_t)E);
			seen[phy[s]]++;
			/* all copies of an expert on one node (hierarchical) */
			if (node_of[phy[s]] < 0)
				node_of[phy[s]] = (int32_t)(s / ppn);
			ck_assert_int_eq(node_of[phy[s]], (int32_t)(s / ppn));
		}
		for (e = 0; e < E; e++) {
			const int32_t *row = r->log2phy + (l * E + e) * r->max_count;

			ck_assert_int_eq(seen[e], cnt[e]);
			if ((size_t)cnt[e] > max_seen)
				max_seen = (size_t)cnt[e];
			for (k = 0; k < r->max_count; k++) {
				if (k < (size_t)cnt[e]) {
					ck_assert_int_ge(row[k], 0);
					ck_assert_int_lt(row[k], (int32_t)P);
					ck_assert_int_eq(phy[row[k]], (int32_t)e);
					ck_assert_int_eq(rank[row[k]], (int32_t)k);
				} else {
					ck_assert_int_eq(row[k], -1);
				}
			}
			/* a group's experts share a node */
			ck_assert_int_eq(node_of[e], node_of[e / gs * gs]);
		}
		/* G/N groups per node */
		for (x = 0; x < N; x++) {
			size_t groups = 0;

			for (e = 0; e < E; e += gs)
				groups += node_of[e] == (int32_t)x;
			ck_assert_uint_eq(groups, G / N);
		}
		/* the replication rule's optimality condition */
		for (e = 0; e < E; e++) {
			if (cnt[e] < 2)
				continue;
			for (f = 0; f < E; f++)
				if (node_of[f] == node_of[e])
					ck_assert(w[l * E + e] / (cnt[e] - 1) >=
						  w[l * E + f] / cnt[f]);
		}
		/* per-GPU view: P/X slots per GPU, in slot order */
		for (x = 0; x < p->num_gpus; x++) {
			const int32_t *ge = rlb_eplb_gpu_experts(r, l, (uint32_t)x);

			ck_assert_ptr_eq(ge, phy + x * r->slots_per_gpu);
			for (k = 0; k < r->slots_per_gpu; k++)
				ck_assert_uint_eq(rlb_eplb_slot_gpu(r, x * r->slots_per_gpu + k), x);
		}
		ck_assert_ptr_null(rlb_eplb_gpu_experts(r, l, p->num_gpus));
	}
	ck_assert_ptr_null(rlb_eplb_gpu_experts(r, L, 0));
	free(seen);
	free(node_of);
}

START_TEST(test_reference_vector)
{
	struct rlb_eplb_params p = { 16, 4, 2, 8 };
	struct rlb_eplb_result r;
	struct rlb_err err = {0};
	size_t l, s, e;

	ck_assert_int_eq(rlb_eplb_rebalance(&ref_weight[0][0], 2, 12, &p, &r,
					    &err), 0);
	ck_assert_int_eq(r.hierarchical, 1);
	ck_assert_uint_eq(r.num_layers, 2);
	ck_assert_uint_eq(r.num_experts, 12);
	ck_assert_uint_eq(r.num_slots, 16);
	ck_assert_uint_eq(r.slots_per_gpu, 2);
	ck_assert_uint_eq(r.max_count, 2);
	for (l = 0; l < 2; l++) {
		for (s = 0; s < 16; s++)
			ck_assert_int_eq(r.phy2log[l * 16 + s], ref_phy2log[l][s]);
		for (e = 0; e < 12; e++)
			ck_assert_int_eq(r.logcnt[l * 12 + e], ref_logcnt[l][e]);
	}
	check_invariants(&r, &ref_weight[0][0], &p);
	/*
	 * Replica order, not slot order: layer 0 expert 4's replica 0 (the
	 * expert's own copy) sits in slot 7, the redundant copy in slot 5.
	 */
	ck_assert_int_eq(r.log2phy[(0 * 12 + 4) * 2 + 0], 7);
	ck_assert_int_eq(r.log2phy[(0 * 12 + 4) * 2 + 1], 5);
	ck_assert_int_eq(r.log2phy[(0 * 12 + 0) * 2 + 1], -1);
	/* GPU 2 of layer 1 holds slots 4 and 5: experts 6 and 11 */
	ck_assert_int_eq(rlb_eplb_gpu_experts(&r, 1, 2)[0], 6);
	ck_assert_int_eq(rlb_eplb_gpu_experts(&r, 1, 2)[1], 11);
	rlb_eplb_result_release(&r);
	rlb_eplb_result_release(&r);	/* idempotent */
}
END_TEST

/*
 * Global policy (1 group, 2 nodes: groups do not divide nodes).
 * w = [10, 40, 20, 30], 6 slots, 2 GPUs.  Replication: expert 1 (40) gets
 * the first extra copy, then expert 3 (30 > 20 = 40/2 = 20).  Copies
 * [0 1 2 3 1 3] carry [10 20 20 15 20 15]; sorted stable: 1 2 4 3 5 0.
 * Packing: 1->gpu0 (20), 2->gpu1 (20), 4->gpu0 (tie, 40), 3->gpu1 (35),
 * 5->gpu1 (50, full), 0->gpu0 (50).  GPU 0: copies 1 4 0, GPU 1: 2 3 5.
 */
START_TEST(test_global_policy)
{
	static const double w[4] = { 10, 40, 20, 30 };
	static const int32_t phy2log[6] = { 1, 1, 0, 2, 3, 3 };
	static const int32_t logcnt[4] = { 1, 2, 1, 2 };
	static const int32_t log2phy[8] = { 2, -1, 0, 1, 3, -1, 4, 5 };
	struct rlb_eplb_params p = { 6, 1, 2, 2 };
	struct rlb_eplb_result r;
	struct rlb_err err = {0};
	size_t i;

	ck_assert_int_eq(rlb_eplb_rebalance(w, 1, 4, &p, &r, &err), 0);
	ck_assert_int_eq(r.hierarchical, 0);
	ck_assert_uint_eq(r.max_count, 2);
	for (i = 0; i < 6; i++)
		ck_assert_int_eq(r.phy2log[i], phy2log[i]);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(r.logcnt[i], logcnt[i]);
	for (i = 0; i < 8; i++)
		ck_assert_int_eq(r.log2phy[i], log2phy[i]);
	check_invariants(&r, w, &p);
	rlb_eplb_result_release(&r);
}
END_TEST

/*
 * 3 groups on 2 nodes (3 % 2 != 0) use the global policy: the answer is
 * that of the hierarchical policy with one group and one node.
 */
START_TEST(test_global_ignores_groups)
{
	static const double w[6] = { 10, 40, 20, 30, 5, 5 };
	struct rlb_eplb_params pg = { 8, 3, 2, 2 }, p1 = { 8, 1, 1, 2 };
	struct rlb_eplb_result a, b;
	struct rlb_err err = {0};

	ck_assert_int_eq(rlb_eplb_rebalance(w, 1, 6, &pg, &a, &err), 0);
	ck_assert_int_eq(rlb_eplb_rebalance(w, 1, 6, &p1, &b, &err), 0);
	ck_assert_int_eq(a.hierarchical, 0);
	ck_assert_int_eq(b.hierarchical, 1);
	ck_assert_mem_eq(a.phy2log, b.phy2log, 8 * sizeof(int32_t));
	ck_assert_mem_eq(a.logcnt, b.logcnt, 6 * sizeof(int32_t));
	check_invariants(&a, w, &pg);
	rlb_eplb_result_release(&a);
	rlb_eplb_result_release(&b);
}
END_TEST

/*
 * P == E: no replication, only packing.  w = [5 1 2 3], 2 groups, 1 node,
 * 2 GPUs: sorted 0 3 2 1; 0->gpu0 (5), 3->gpu1 (3), 2->gpu1 (5, full),
 * 1->gpu0.
 */
START_TEST(test_no_replication)
{
	static const double w[4] = { 5, 1, 2, 3 };
	static const int32_t phy2log[4] = { 0, 1, 3, 2 };
	static const int32_t log2phy[4] = { 0, 1, 3, 2 };
	struct rlb_eplb_params p = { 4, 2, 1, 2 };
	struct rlb_eplb_result r;
	struct rlb_err err = {0};
	size_t i;

	ck_assert_int_eq(rlb_eplb_rebalance(w, 1, 4, &p, &r, &err), 0);
	ck_assert_uint_eq(r.max_count, 1);
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(r.phy2log[i], phy2log[i]);
		ck_assert_int_eq(r.logcnt[i], 1);
		ck_assert_int_eq(r.log2phy[i], log2phy[i]);
	}
	check_invariants(&r, w, &p);
	rlb_eplb_result_release(&r);
}
END_TEST

/*
 * One GPU: every copy on GPU 0, ordered by load per copy descending.
 * w = [1 5 3], 4 slots: expert 1 gets the copy; copies [0 1 2 1] carry
 * [1 2.5 3 2.5]; slot order 2, 1, 3, 0 -> experts 2 1 1 0.
 */
START_TEST(test_one_gpu)
{
	static const double w[3] = { 1, 5, 3 };
	static const int32_t phy2log[4] = { 2, 1, 1, 0 };
	static const int32_t log2phy[6] = { 3, -1, 1, 2, 0, -1 };
	struct rlb_eplb_params p = { 4, 1, 1, 1 };
	struct rlb_eplb_result r;
	struct rlb_err err = {0};
	size_t i;

	ck_assert_int_eq(rlb_eplb_rebalance(w, 1, 3, &p, &r, &err), 0);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(r.phy2log[i], phy2log[i]);
	for (i = 0; i < 6; i++)
		ck_assert_int_eq(r.log2phy[i], log2phy[i]);
	ck_assert_int_eq(r.logcnt[1], 2);
	check_invariants(&r, w, &p);
	rlb_eplb_result_release(&r);
}
END_TEST

/*
 * Ties everywhere: all-zero loads.  Every extra copy goes to expert 0
 * (first index); packing keeps index order and fills the lowest GPU first.
 */
START_TEST(test_ties)
{
	static const double w[4] = { 0, 0, 0, 0 };
	static const int32_t phy2log[6] = { 0, 1, 2, 3, 0, 0 };
	struct rlb_eplb_params p = { 6, 1, 1, 2 };
	struct rlb_eplb_result r;
	struct rlb_err err = {0};
	size_t i;

	/*
	 * Copies [0 1 2 3 0 0] all weigh 0, so the stable order is 0..5 and
	 * both GPUs stay tied at 0: the lowest GPU with room wins, copies
	 * 0 1 2 fill GPU 0 and copies 3 4 5 GPU 1.
	 */
	ck_assert_int_eq(rlb_eplb_rebalance(w, 1, 4, &p, &r, &err), 0);
	ck_assert_int_eq(r.logcnt[0], 3);
	ck_assert_int_eq(r.logcnt[3], 1);
	for (i = 0; i < 6; i++)
		ck_assert_int_eq(r.phy2log[i], phy2log[i]);
	check_invariants(&r, w, &p);
	rlb_eplb_result_release(&r);
}
END_TEST

/*
 * One item per pack: item i goes to pack i, unsorted (the reference's
 * rule), both for groups onto nodes and for copies onto GPUs.
 * w = [1 2 5 3], 2 groups on 2 nodes: group 0 (3) stays on node 0 although
 * group 1 (8) is heavier.  With 8 slots on 8 GPUs each node's 2 experts get
 * 4 copies: node 0: expert 1 (2 > 1), then experts 0 and 1 tie at 1 and
 * expert 0 wins; node 1: expert 2 (5), then expert 3 (3 > 2.5).  The
 * copies keep their order on the GPUs: [0 1 1 0 | 2 3 2 3].
 */
START_TEST(test_one_per_pack)
{
	static const double w[4] = { 1, 2, 5, 3 };
	static const int32_t phy4[4] = { 0, 1, 2, 3 };
	static const int32_t phy8[8] = { 0, 1, 1, 0, 2, 3, 2, 3 };
	static const int32_t log2phy8[8] = { 0, 3, 1, 2, 4, 6, 5, 7 };
	struct rlb_eplb_params p4 = { 4, 2, 2, 4 }, p8 = { 8, 2, 2, 8 };
	struct rlb_eplb_result r;
	struct rlb_err err = {0};
	size_t i;

	ck_assert_int_eq(rlb_eplb_rebalance(w, 1, 4, &p4, &r, &err), 0);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(r.phy2log[i], phy4[i]);
	check_invariants(&r, w, &p4);
	rlb_eplb_result_release(&r);
	ck_assert_int_eq(rlb_eplb_rebalance(w, 1, 4, &p8, &r, &err), 0);
	for (i = 0; i < 8; i++) {
		ck_assert_int_eq(r.phy2log[i], phy8[i]);
		ck_assert_int_eq(r.log2phy[i], log2phy8[i]);
	}
	check_invariants(&r, w, &p8);
	rlb_eplb_result_release(&r);
}
END_TEST

static void expect_param_error(size_t layers, size_t experts, uint32_t P,
			       uint32_t G, uint32_t N, uint32_t X,
			       const char *msg)
{
	struct rlb_eplb_params p = { P, G, N, X };
	struct rlb_eplb_result r;
	struct rlb_err err = {0};
	double *w = calloc(layers * experts + 1, sizeof(double));

	ck_assert_ptr_nonnull(w);
	ck_assert_int_eq(rlb_eplb_check(layers, experts, &p, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, msg);
	rlb_err_clear(&err);
	ck_assert_int_eq(rlb_eplb_rebalance(w, layers, experts, &p, &r, &err),
			 RLB_EINVAL);
	ck_assert_str_eq(err.msg, msg);
	ck_assert_ptr_null(r.phy2log);
	ck_assert_ptr_null(r.log2phy);
	rlb_eplb_result_release(&r);
	free(w);
}

START_TEST(test_invalid_params)
{
	expect_param_error(0, 4, 4, 1, 1, 1, "weights have no layers");
	expect_param_error(1, 0, 4, 1, 1, 1, "weights have no experts");
	expect_param_error(1, 4, 4, 0, 1, 1, "groups must be at least 1");
	expect_param_error(1, 4, 4, 1, 0, 1, "nodes must be at least 1");
	expect_param_error(1, 4, 4, 1, 1, 0, "gpus must be at least 1");
	expect_param_error(1, 4, 12, 1, 4, 6,
			   "gpus (6) must be a multiple of nodes (4)");
	expect_param_error(1, 4, 10, 1, 2, 4,
			   "slots (10) must be a positive multiple of gpus (4)");
	expect_param_error(1, 4, 0, 1, 1, 4,
			   "slots (0) must be a positive multiple of gpus (4)");
	expect_param_error(1, 12, 16, 5, 1, 8,
			   "experts (12) must be a multiple of groups (5)");
	expect_param_error(1, 12, 8, 4, 2, 8,
			   "slots (8) must be at least the number of experts (12)");
	expect_param_error(1, 4, RLB_EPLB_MAX_SLOTS + 1, 1, 1, 1,
			   "too many slots (4194305, at most 4194304)");
	expect_param_error(RLB_EPLB_MAX_LAYERS + 1, 1, 1, 1, 1, 1,
			   "too many layers (65537, at most 65536)");
}
END_TEST

START_TEST(test_invalid_weights)
{
	double w[2][3] = { { 1, 2, 3 }, { 4, -5, 6 } };
	struct rlb_eplb_params p = { 3, 1, 1, 1 };
	struct rlb_eplb_result r;
	struct rlb_err err = {0};

	ck_assert_int_eq(rlb_eplb_rebalance(&w[0][0], 2, 3, &p, &r, &err),
			 RLB_EINVAL);
	ck_assert_str_eq(err.msg, "weight of layer 1, expert 1 is negative (-5)");
	w[1][1] = NAN;
	ck_assert_int_eq(rlb_eplb_rebalance(&w[0][0], 2, 3, &p, &r, &err),
			 RLB_EINVAL);
	ck_assert_str_eq(err.msg, "weight of layer 1, expert 1 is not finite");
	w[1][1] = 0;
	w[0][2] = INFINITY;
	ck_assert_int_eq(rlb_eplb_rebalance(&w[0][0], 2, 3, &p, &r, &err),
			 RLB_EINVAL);
	ck_assert_str_eq(err.msg, "weight of layer 0, expert 2 is not finite");
	rlb_eplb_result_release(&r);
}
END_TEST

static void fixture(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/fixtures/eplb/%s", rlb_test_srcdir(), name);
}

static void expect_load_error(const char *name, int code, const char *tail)
{
	char path[4096], want[8192];
	struct rlb_err err = {0};
	double *w = (double *)1;
	size_t L = 7, E = 7;

	fixture(path, sizeof(path), name);
	snprintf(want, sizeof(want), "weights '%s': %s", path, tail);
	ck_assert_int_eq(rlb_eplb_weights_load(path, &w, &L, &E, &err), code);
	ck_assert_str_eq(err.msg, want);
	ck_assert_ptr_null(w);
	ck_assert_uint_eq(L, 0);
	ck_assert_uint_eq(E, 0);
}

START_TEST(test_json_errors)
{
	char path[4096], want[8192];
	struct rlb_err err = {0};
	double *w;
	size_t L, E;

	expect_load_error("bad-syntax.json", RLB_EPARSE,
			  "invalid JSON at line 2, column 8 (byte 17): unexpected token near ']'");
	/* the byte that is no UTF-8 itself, not the one before */
	expect_load_error("bad-utf8.json", RLB_EPARSE,
			  "invalid JSON at line 1, column 7 (byte 7): unable to decode byte 0xff near '\"'");
	expect_load_error("zero-bytes.json", RLB_EPARSE,
			  "invalid JSON at line 1, column 1 (byte 1): '[' or '{' expected near end of file");
	expect_load_error("object.json", RLB_EPARSE,
			  "expected an array of rows (layers), got an object");
	expect_load_error("empty.json", RLB_EPARSE,
			  "expected an array of rows (layers), got an empty array");
	expect_load_error("empty-row.json", RLB_EPARSE, "row 0 is empty");
	expect_load_error("row-scalar.json", RLB_EPARSE,
			  "row 1: expected an array of numbers (one per expert), got a number");
	expect_load_error("ragged.json", RLB_EPARSE,
			  "row 1 has 2 columns, row 0 has 3");
	expect_load_error("string.json", RLB_EPARSE,
			  "row 1, column 1: expected a number, got a string");
	expect_load_error("negative.json", RLB_EPARSE,
			  "row 0, column 1: weight -2.5 is negative");

	fixture(path, sizeof(path), "no-such-file.json");
	snprintf(want, sizeof(want),
		 "cannot open weights '%s': No such file or directory", path);
	ck_assert_int_eq(rlb_eplb_weights_load(path, &w, &L, &E, &err), RLB_EIO);
	ck_assert_str_eq(err.msg, want);
}
END_TEST

START_TEST(test_json_from_value)
{
	json_t *v = json_loads("[[1, 2.5], [3, true]]", 0, NULL);
	struct rlb_err err = {0};
	double *w;
	size_t L, E;

	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(rlb_eplb_weights_from_json(v, "inline", &w, &L, &E,
						    &err), RLB_EPARSE);
	ck_assert_str_eq(err.msg,
			 "weights 'inline': row 1, column 1: expected a number, got true");
	json_array_set_new(json_array_get(v, 1), 1, json_real(0.25));
	ck_assert_int_eq(rlb_eplb_weights_from_json(v, "inline", &w, &L, &E,
						    &err), 0);
	ck_assert_uint_eq(L, 2);
	ck_assert_uint_eq(E, 2);
	ck_assert_double_eq(w[1], 2.5);
	ck_assert_double_eq(w[3], 0.25);
	free(w);
	json_decref(v);
}
END_TEST

/*
 * A small input that names a huge shape (row 0 of 2^20 columns, then 65535
 * empty rows: 512 GiB of weights) is refused for its ragged rows before
 * anything is allocated.
 */
START_TEST(test_json_shape_before_alloc)
{
	json_t *v = json_array(), *row0 = json_array(), *zero = json_integer(0);
	json_t *empty = json_array();
	struct rlb_err err = {0};
	double *w = (double *)1;
	size_t L = 7, E = 7, i;

	ck_assert_ptr_nonnull(v);
	for (i = 0; i < RLB_EPLB_MAX_EXPERTS; i++)
		ck_assert_int_eq(json_array_append(row0, zero), 0);
	ck_assert_int_eq(json_array_append_new(v, row0), 0);
	for (i = 1; i < RLB_EPLB_MAX_LAYERS; i++)
		ck_assert_int_eq(json_array_append(v, empty), 0);
	ck_assert_int_eq(rlb_eplb_weights_from_json(v, "inline", &w, &L, &E,
						    &err), RLB_EPARSE);
	ck_assert_str_eq(err.msg,
			 "weights 'inline': row 1 has 0 columns, row 0 has 1048576");
	ck_assert_ptr_null(w);
	ck_assert_uint_eq(L, 0);
	ck_assert_uint_eq(E, 0);
	json_decref(zero);
	json_decref(empty);
	json_decref(v);
}
END_TEST

/* Reference file -> result -> JSON text, compared with the reference output. */
START_TEST(test_json_roundtrip)
{
	static const char *want =
		"{\"phy2log\":[[5,6,5,7,8,4,3,4,10,9,10,2,0,1,11,1],"
		"[7,10,6,8,6,11,8,9,2,4,5,1,5,0,3,1]],"
		"\"log2phy\":[[[12,-1],[15,13],[11,-1],[6,-1],[7,5],[0,2],"
		"[1,-1],[3,-1],[4,-1],[9,-1],[8,10],[14,-1]],"
		"[[13,-1],[15,11],[8,-1],[14,-1],[9,-1],[10,12],[2,4],[0,-1],"
		"[6,3],[7,-1],[1,-1],[5,-1]]],"
		"\"logcnt\":[[1,2,1,1,2,2,1,1,1,1,2,1],"
		"[1,2,1,1,1,2,2,1,2,1,1,1]]}";
	struct rlb_eplb_params p = { 16, 4, 2, 8 };
	struct rlb_eplb_result r;
	struct rlb_err err = {0};
	char path[4096], line[2048], *s;
	json_t *obj;
	double *w;
	size_t L, E;
	FILE *fp;

	fixture(path, sizeof(path), "reference.json");
	ck_assert_int_eq(rlb_eplb_weights_load(path, &w, &L, &E, &err), 0);
	ck_assert_uint_eq(L, 2);
	ck_assert_uint_eq(E, 12);
	ck_assert_mem_eq(w, ref_weight, sizeof(ref_weight));
	ck_assert_int_eq(rlb_eplb_rebalance(w, L, E, &p, &r, &err), 0);
	s = rlb_eplb_result_to_string(&r, &err);
	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(s, want);
	/* the expected-output fixture (for CLI tests) holds the same line */
	fixture(path, sizeof(path), "reference.expected.json");
	fp = fopen(path, "r");
	ck_assert_ptr_nonnull(fp);
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), fp));
	fclose(fp);
	ck_assert_uint_eq(strlen(line), strlen(want) + 1);
	ck_assert_int_eq(strncmp(line, want, strlen(want)), 0);
	ck_assert_int_eq(line[strlen(want)], '\n');
	obj = rlb_eplb_result_to_json(&r, &err);
	ck_assert_ptr_nonnull(obj);
	ck_assert_int_eq(json_integer_value(json_array_get(json_array_get(
		json_array_get(json_object_get(obj, "log2phy"), 1), 6), 1)), 4);
	json_decref(obj);
	free(s);
	free(w);
	rlb_eplb_result_release(&r);
}
END_TEST

/* Invariants and determinism on random inputs of many shapes. */
START_TEST(test_random_invariants)
{
	static const uint32_t shapes[][5] = {
		/* E, G, N, X, extra slots per GPU */
		{ 12, 4, 2, 8, 1 },
		{ 16, 4, 2, 4, 2 },
		{ 16, 8, 4, 8, 1 },
		{ 32, 8, 2, 8, 3 },
		{ 12, 3, 2, 4, 1 },	/* global: 3 % 2 */
		{ 64, 1, 8, 64, 2 },	/* global */
		{ 8, 8, 8, 8, 0 },
		{ 6, 2, 1, 3, 1 },
		{ 20, 5, 5, 10, 2 },
		{ 256, 8, 8, 64, 2 },
	};
	uint64_t state = 12345;
	size_t i, trial;

	for (i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		for (trial = 0; trial < 8; trial++) {
			uint32_t E = shapes[i][0], X = shapes[i][3];
			uint32_t P = ((E + X - 1) / X + shapes[i][4]) * X;
			struct rlb_eplb_params p = { P, shapes[i][1],
						     shapes[i][2], X };
			struct rlb_eplb_result a, b;
			struct rlb_err err = {0};
			size_t L = 1 + trial % 3, k;
			double *w = malloc(L * E * sizeof(double));

			ck_assert_ptr_nonnull(w);
			for (k = 0; k < L * E; k++) {
				uint32_t v = rnd(&state);

				/* small integers (many ties), skewed, fractional */
				w[k] = trial % 3 == 0 ? (double)(v % 4) :
				       trial % 3 == 1 ? (double)(v % 1000) *
							(v % 7 == 0 ? 20 : 1) :
				       (double)(v % 100000) / 97.0;
			}
			ck_assert_int_eq(rlb_eplb_rebalance(w, L, E, &p, &a,
							    &err), 0);
			check_invariants(&a, w, &p);
			ck_assert_int_eq(rlb_eplb_rebalance(w, L, E, &p, &b,
							    &err), 0);
			ck_assert_mem_eq(a.phy2log, b.phy2log,
					 L * P * sizeof(int32_t));
			ck_assert_uint_eq(a.max_count, b.max_count);
			ck_assert_mem_eq(a.log2phy, b.log2phy,
					 L * E * a.max_count * sizeof(int32_t));
			rlb_eplb_result_release(&a);
			rlb_eplb_result_release(&b);
			free(w);
		}
	}
}
END_TEST

Suite *rlb_suite_eplb(void)
{
	Suite *s = suite_create("eplb");
	TCase *tc = tcase_create("eplb");

	tcase_add_test(tc, test_reference_vector);
	tcase_add_test(tc, test_global_policy);
	tcase_add_test(tc, test_global_ignores_groups);
	tcase_add_test(tc, test_no_replication);
	tcase_add_test(tc, test_one_gpu);
	tcase_add_test(tc, test_ties);
	tcase_add_test(tc, test_one_per_pack);
	tcase_add_test(tc, test_invalid_params);
	tcase_add_test(tc, test_invalid_weights);
	tcase_add_test(tc, test_json_errors);
	tcase_add_test(tc, test_json_from_value);
	tcase_add_test(tc, test_json_shape_before_alloc);
	tcase_add_test(tc, test_json_roundtrip);
	tcase_add_test(tc, test_random_invariants);
	suite_add_tcase(s, tc);
	return s;
}
