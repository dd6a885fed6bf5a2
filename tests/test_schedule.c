/*
 * test_schedule.c - unit tests of lib/schedule: chunking, in-order windows,
 * first-fit-decreasing, dynamic batching, the budget and coverage invariants, and the
 * per-(micro-batch, layer, rank, expert) counts, alone and from a trace.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "relibra.h"
#include "schedule_promises.h"
#include "suites.h"

/* A small deterministic generator for test inputs (splitmix64). */
static uint64_t test_rand(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void expect_chunk(const struct rlb_chunk *c, uint32_t seq, uint32_t start,
			 uint32_t tokens, uint32_t mb, uint32_t rank)
{
	ck_assert_uint_eq(c->seq, seq);
	ck_assert_uint_eq(c->start, start);
	ck_assert_uint_eq(c->tokens, tokens);
	ck_assert_uint_eq(c->mb, mb);
	ck_assert_uint_eq(c->rank, rank);
}

START_TEST(test_chunking)
{
	struct rlb_schedule s;
	struct rlb_err err = {0};
	const uint32_t len[] = { 20000 };

	ck_assert_int_eq(rlb_schedule_build(&s, 7, len, 1, 4, 8192, RLB_PACK_IN_ORDER, &err), 0);
	ck_assert_uint_eq(s.step, 7);
	ck_assert_uint_eq(s.nchunks, 3);
	ck_assert_uint_eq(s.micro_batches, 1);
	expect_chunk(&s.chunks[0], 0, 0, 8192, 0, 0);
	expect_chunk(&s.chunks[1], 0, 8192, 8192, 0, 1);
	expect_chunk(&s.chunks[2], 0, 16384, 3616, 0, 2);
	rlb_schedule_release(&s);
	ck_assert_ptr_null(s.chunks);
}
END_TEST

/*
 * ranks 2, budget 10, lengths 6 5 4 7 3 10.  Window 0: 6 -> r0 (tie),
 * 5 -> r1 (only fit), 4 -> r0 (least room that fits: 4); 7 fits nowhere:
 * window 1: 7 -> r0, 3 -> r0 (room 3), 10 -> r1.
 */
START_TEST(test_in_order_hand)
{
	struct rlb_schedule s;
	struct rlb_err err = {0};
	const uint32_t len[] = { 6, 5, 4, 7, 3, 10 };

	ck_assert_int_eq(rlb_schedule_build(&s, 0, len, 6, 2, 10, RLB_PACK_IN_ORDER, &err), 0);
	ck_assert_uint_eq(s.micro_batches, 2);
	ck_assert_uint_eq(s.nchunks, 6);
	expect_chunk(&s.chunks[0], 0, 0, 6, 0, 0);
	expect_chunk(&s.chunks[1], 1, 0, 5, 0, 1);
	expect_chunk(&s.chunks[2], 2, 0, 4, 0, 0);
	expect_chunk(&s.chunks[3], 3, 0, 7, 1, 0);
	expect_chunk(&s.chunks[4], 4, 0, 3, 1, 0);
	expect_chunk(&s.chunks[5], 5, 0, 10, 1, 1);
	rlb_schedule_release(&s);
}
END_TEST

/*
 * Same input under ffd: 10 -> (0,0), 7 -> (0,1), 6 opens mb 1 -> (1,0),
 * 5 -> (1,1), 4 -> (1,0), 3 -> (0,1).
 */
START_TEST(test_ffd_hand)
{
	struct rlb_schedule s;
	struct rlb_err err = {0};
	const uint32_t len[] = { 6, 5, 4, 7, 3, 10 };

	ck_assert_int_eq(rlb_schedule_build(&s, 0, len, 6, 2, 10, RLB_PACK_FFD, &err), 0);
	ck_assert_uint_eq(s.micro_batches, 2);
	expect_chunk(&s.chunks[0], 0, 0, 6, 1, 0);
	expect_chunk(&s.chunks[1], 1, 0, 5, 1, 1);
	expect_chunk(&s.chunks[2], 2, 0, 4, 1, 0);
	expect_chunk(&s.chunks[3], 3, 0, 7, 0, 1);
	expect_chunk(&s.chunks[4], 4, 0, 3, 0, 1);
	expect_chunk(&s.chunks[5], 5, 0, 10, 0, 0);
	rlb_schedule_release(&s);
}
END_TEST

/*
 * Same input, dynamic.  Deal, longest first, to the rank with fewer
 * tokens: 10 -> r0, 7 -> r1, 6 -> r1, 5 -> r0, 4 -> r1, 3 -> r0 (r0 holds
 * 10 5 3, r1 7 6 4).  First-fit-decreasing needs 2 micro-batches on each.
 * r0: 10 -> a, 5 -> b, 3 -> b (a 10, b 8: a is mb 0).  r1: 7 -> a, 6 -> b,
 * 4 -> b (a 7, b 10: b is mb 0).
 */
START_TEST(test_dynamic_hand)
{
	struct rlb_schedule s;
	struct rlb_err err = {0};
	const uint32_t len[] = { 6, 5, 4, 7, 3, 10 };

	ck_assert_int_eq(rlb_schedule_build(&s, 0, len, 6, 2, 10, RLB_PACK_DYNAMIC, &err), 0);
	ck_assert_uint_eq(s.micro_batches, 2);
	expect_chunk(&s.chunks[0], 0, 0, 6, 0, 1);
	expect_chunk(&s.chunks[1], 1, 0, 5, 1, 0);
	expect_chunk(&s.chunks[2], 2, 0, 4, 0, 1);
	expect_chunk(&s.chunks[3], 3, 0, 7, 1, 1);
	expect_chunk(&s.chunks[4], 4, 0, 3, 1, 0);
	expect_chunk(&s.chunks[5], 5, 0, 10, 0, 0);
	rlb_schedule_release(&s);
}
END_TEST

/*
 * One rank, budget 10, lengths 5 5 4 3 3: first-fit-decreasing needs 2
 * micro-batches (5 5 | 4 3 3), but the balanced split into 2 leaves the
 * last 3 no room (5 4 | 5 3, then 8 + 3 > 10), so it takes 3: 5 -> a,
 * 5 -> b, 4 -> c, 3 -> c, 3 -> a (a 8, c 7, b 5).
 */
START_TEST(test_dynamic_grows)
{
	struct rlb_schedule s;
	struct rlb_err err = {0};
	const uint32_t len[] = { 5, 5, 4, 3, 3 };

	ck_assert_int_eq(rlb_schedule_build(&s, 0, len, 5, 1, 10, RLB_PACK_DYNAMIC, &err), 0);
	ck_assert_uint_eq(s.micro_batches, 3);
	expect_chunk(&s.chunks[0], 0, 0, 5, 0, 0);
	expect_chunk(&s.chunks[1], 1, 0, 5, 2, 0);
	expect_chunk(&s.chunks[2], 2, 0, 4, 1, 0);
	expect_chunk(&s.chunks[3], 3, 0, 3, 1, 0);
	expect_chunk(&s.chunks[4], 4, 0, 3, 0, 0);
	rlb_schedule_release(&s);
}
END_TEST

/*
 * Rank balance of the example: in-order gives (6+4 | 5) and (7+3 | 10),
 * 10 / 7.5 and 10 / 10; dynamic gives (10 | 6+4) and (5+3 | 7), 1 and
 * 8 / 7.5.  A micro-batch without tokens has no value.
 */
START_TEST(test_rank_balance)
{
	struct rlb_schedule s;
	struct rlb_err err = {0};
	const uint32_t len[] = { 6, 5, 4, 7, 3, 10 };
	const struct rlb_chunk gap[] = {
		{ .seq = 0, .start = 0, .tokens = 6, .mb = 0, .rank = 1 },
		{ .seq = 1, .start = 0, .tokens = 5, .mb = 2, .rank = 0 },
	};
	double v[3];
	size_t n;

	ck_assert_int_eq(rlb_schedule_build(&s, 0, len, 6, 2, 10, RLB_PACK_IN_ORDER, &err), 0);
	ck_assert_int_eq(rlb_schedule_rank_balance(&s, v, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_double_eq_tol(v[0], 10 / 7.5, 1e-12);
	ck_assert_double_eq_tol(v[1], 1.0, 1e-12);
	rlb_schedule_release(&s);
	ck_assert_int_eq(rlb_schedule_build(&s, 0, len, 6, 2, 10, RLB_PACK_DYNAMIC, &err), 0);
	ck_assert_int_eq(rlb_schedule_rank_balance(&s, v, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_double_eq_tol(v[0], 1.0, 1e-12);
	ck_assert_double_eq_tol(v[1], 8 / 7.5, 1e-12);
	rlb_schedule_release(&s);
	ck_assert_int_eq(rlb_schedule_from_chunks(&s, 0, RLB_PACK_FILE, gap, 2, len, 2, 2, 10,
						  &err), 0);
	ck_assert_uint_eq(s.micro_batches, 3);
	ck_assert_int_eq(rlb_schedule_rank_balance(&s, v, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_double_eq_tol(v[0], 2.0, 1e-12);
	ck_assert_double_eq_tol(v[1], 2.0, 1e-12);
	rlb_schedule_release(&s);
}
END_TEST

/* ffd ties keep (seq, start) order: equal chunks fill bins in file order. */
START_TEST(test_ffd_stable)
{
	struct rlb_schedule s;
	struct rlb_err err = {0};
	const uint32_t len[] = { 4, 4, 4, 4, 4 };
	uint32_t i;

	ck_assert_int_eq(rlb_schedule_build(&s, 0, len, 5, 2, 4, RLB_PACK_FFD, &err), 0);
	ck_assert_uint_eq(s.micro_batches, 3);
	for (i = 0; i < 5; i++) {
		ck_assert_uint_eq(s.chunks[i].mb, i / 2);
		ck_assert_uint_eq(s.chunks[i].rank, i % 2);
	}
	rlb_schedule_release(&s);
}
END_TEST

/*
 * Every invariant of a schedule of LEN[n].  Plain checks in the loops (a
 * Check assertion per chunk is slow under valgrind); the first violation
 * is reported.
 */
#define EXPECT(cond) do { if (!(cond) && !bad) bad = #cond; } while (0)

static void check_schedule(const struct rlb_schedule *s, const uint32_t *len,
			   size_t n)
{
	uint64_t *used = calloc((size_t)s->micro_batches * s->ranks + 1, sizeof(*used));
	const char *bad = NULL;
	size_t c = 0, i;
	uint32_t mb;

	ck_assert_ptr_nonnull(used);
	for (i = 0; i < n; i++) {
		uint32_t next = 0;

		EXPECT(rlb_schedule_first_chunk(s, (uint32_t)i) == (len[i] ? c : s->nchunks));
		for (; c < s->nchunks && s->chunks[c].seq == i; c++) {
			const struct rlb_chunk *ch = &s->chunks[c];

			EXPECT(ch->start == next);
			EXPECT(ch->tokens > 0);
			EXPECT(ch->tokens <= s->mb_tokens);
			/* only the last chunk of a sequence is shorter than the budget */
			EXPECT(ch->start + ch->tokens == len[i] || ch->tokens == s->mb_tokens);
			EXPECT(ch->mb < s->micro_batches);
			EXPECT(ch->rank < s->ranks);
			EXPECT(s->pack != RLB_PACK_IN_ORDER || c == 0 || ch->mb >= s->chunks[c - 1].mb);
			if (ch->mb < s->micro_batches && ch->rank < s->ranks)
				used[(size_t)ch->mb * s->ranks + ch->rank] += ch->tokens;
			next += ch->tokens;
		}
		EXPECT(next == len[i]);	/* every token exactly once */
	}
	EXPECT(c == s->nchunks);
	if (s->pack == RLB_PACK_DYNAMIC && !bad)
		bad = rlb_dynamic_promise_broken(s, used);
	for (mb = 0; mb < s->micro_batches; mb++) {
		uint64_t sum = 0;
		uint32_t r;

		for (r = 0; r < s->ranks; r++) {
			EXPECT(used[(size_t)mb * s->ranks + r] <= s->mb_tokens);	/* budget */
			sum += used[(size_t)mb * s->ranks + r];
		}
		EXPECT(sum > 0);	/* no empty micro-batch */
	}
	free(used);
	ck_assert_msg(bad == NULL, "schedule invariant violated: %s", bad);
}

START_TEST(test_random_invariants)
{
	uint64_t x = 42;
	int iter;

	for (iter = 0; iter < 200; iter++) {
		struct rlb_schedule a, b;
		struct rlb_err err = {0};
		size_t n = test_rand(&x) % 60, i;
		uint32_t *len = calloc(n + 1, sizeof(*len));
		uint32_t ranks = 1 + (uint32_t)(test_rand(&x) % 8);
		uint32_t budget = iter % 50 == 7 ? 1 : 1 + (uint32_t)(test_rand(&x) % 3000);
		enum rlb_pack pack = iter % 3 == 2 ? RLB_PACK_DYNAMIC :
				     iter % 3 ? RLB_PACK_FFD : RLB_PACK_IN_ORDER;

		for (i = 0; i < n; i++)
			len[i] = test_rand(&x) % 7 == 0 ? 0 : (uint32_t)(test_rand(&x) % (budget == 1 ? 50 : 9000));
		ck_assert_int_eq(rlb_schedule_build(&a, (uint32_t)iter, len, n, ranks, budget, pack, &err), 0);
		check_schedule(&a, len, n);
		/* deterministic */
		ck_assert_int_eq(rlb_schedule_build(&b, (uint32_t)iter, len, n, ranks, budget, pack, &err), 0);
		ck_assert_uint_eq(a.nchunks, b.nchunks);
		ck_assert_uint_eq(a.micro_batches, b.micro_batches);
		if (a.nchunks)
			ck_assert_int_eq(memcmp(a.chunks, b.chunks, a.nchunks * sizeof(*a.chunks)), 0);
		rlb_schedule_release(&a);
		rlb_schedule_release(&b);
		free(len);
	}
}
END_TEST

START_TEST(test_edge_cases)
{
	struct rlb_schedule s;
	struct rlb_err err = {0};
	const uint32_t huge[] = { 1000000 };
	const uint32_t some[] = { 0, 5, 0, 3 };
	uint32_t i;

	/* no sequences */
	ck_assert_int_eq(rlb_schedule_build(&s, 3, NULL, 0, 4, 100, RLB_PACK_IN_ORDER, &err), 0);
	ck_assert_uint_eq(s.nchunks, 0);
	ck_assert_uint_eq(s.micro_batches, 0);
	ck_assert_uint_eq(rlb_schedule_first_chunk(&s, 0), 0);
	rlb_schedule_release(&s);
	ck_assert_int_eq(rlb_schedule_build(&s, 3, NULL, 0, 4, 100, RLB_PACK_FFD, &err), 0);
	ck_assert_uint_eq(s.micro_batches, 0);
	rlb_schedule_release(&s);
	ck_assert_int_eq(rlb_schedule_build(&s, 3, NULL, 0, 4, 100, RLB_PACK_DYNAMIC, &err), 0);
	ck_assert_uint_eq(s.micro_batches, 0);
	rlb_schedule_release(&s);
	/* the packings that no rule builds: named, and not "unknown" */
	ck_assert_int_eq(rlb_schedule_build(&s, 3, some, 4, 4, 100, RLB_PACK_DATA_CONTROL, &err),
			 RLB_EINVAL);
	ck_assert_str_eq(err.msg, "schedule: packing rule 2 (data-control) is not one that builds a schedule (in-order, ffd or dynamic)");
	rlb_schedule_release(&s);

	/* one huge sequence on one rank: one chunk per micro-batch */
	ck_assert_int_eq(rlb_schedule_build(&s, 0, huge, 1, 1, 8192, RLB_PACK_IN_ORDER, &err), 0);
	ck_assert_uint_eq(s.nchunks, 123);
	ck_assert_uint_eq(s.micro_batches, 123);
	for (i = 0; i < 123; i++)
		expect_chunk(&s.chunks[i], 0, i * 8192, i < 122 ? 8192 : 1000000 - 122 * 8192, i, 0);
	check_schedule(&s, huge, 1);
	rlb_schedule_release(&s);

	/* ... and on 8 ranks: 16 micro-batches, ranks in order */
	ck_assert_int_eq(rlb_schedule_build(&s, 0, huge, 1, 8, 8192, RLB_PACK_IN_ORDER, &err), 0);
	ck_assert_uint_eq(s.micro_batches, 16);
	ck_assert_uint_eq(s.chunks[9].mb, 1);
	ck_assert_uint_eq(s.chunks[9].rank, 1);
	check_schedule(&s, huge, 1);
	rlb_schedule_release(&s);
	ck_assert_int_eq(rlb_schedule_build(&s, 0, huge, 1, 8, 8192, RLB_PACK_FFD, &err), 0);
	ck_assert_uint_eq(s.micro_batches, 16);
	check_schedule(&s, huge, 1);
	rlb_schedule_release(&s);
	/* dynamic deals the 123 chunks 16, 16, 16, 15, ... and cuts each share in 16 */
	ck_assert_int_eq(rlb_schedule_build(&s, 0, huge, 1, 8, 8192, RLB_PACK_DYNAMIC, &err), 0);
	ck_assert_uint_eq(s.micro_batches, 16);
	check_schedule(&s, huge, 1);
	rlb_schedule_release(&s);

	/* zero-length sequences get no chunk */
	ck_assert_int_eq(rlb_schedule_build(&s, 0, some, 4, 1, 4, RLB_PACK_IN_ORDER, &err), 0);
	ck_assert_uint_eq(s.nchunks, 3);
	ck_assert_uint_eq(rlb_schedule_first_chunk(&s, 0), s.nchunks);
	ck_assert_uint_eq(rlb_schedule_first_chunk(&s, 3), 2);
	expect_chunk(&s.chunks[0], 1, 0, 4, 0, 0);
	expect_chunk(&s.chunks[1], 1, 4, 1, 1, 0);
	expect_chunk(&s.chunks[2], 3, 0, 3, 1, 0);
	rlb_schedule_release(&s);

	/* errors */
	ck_assert_int_eq(rlb_schedule_build(&s, 0, some, 4, 0, 4, RLB_PACK_IN_ORDER, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "schedule: EP size is 0");
	rlb_schedule_release(&s);
	ck_assert_int_eq(rlb_schedule_build(&s, 0, some, 4, 2, 0, RLB_PACK_FFD, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "schedule: micro-batch token budget is 0");
	rlb_schedule_release(&s);
}
END_TEST

/*
 * Loads by hand: 2 layers, 4 experts, top-2, 2 ranks, budget 3.
 * seq 0 (4 tokens) -> chunks (0..3 on r0), (3..4 on r1); seq 1 (2 tokens)
 * -> r1.  One micro-batch.
 */
START_TEST(test_loads_hand)
{
	const uint32_t len[] = { 4, 2 };
	/* layer-major: ids[(layer * tokens + t) * 2 + k] */
	const uint16_t ids0[] = {
		0, 1, 1, 2, 2, 3, 3, 0,		/* layer 0 */
		1, 0, 1, 3, 1, 2, 0, 2,		/* layer 1 */
	};
	const uint16_t ids1[] = {
		3, 2, 3, 9,			/* layer 0 (9 is out of range: skipped) */
		0, 1, 0, 2,			/* layer 1 */
	};
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_err err = {0};
	struct rlb_seq q0 = { 0, 0, 0, 4, ids0, NULL }, q1 = { 0, 1, 0, 2, ids1, NULL };
	const uint32_t want[2][2][4] = {
		{ { 1, 2, 2, 1 }, { 1, 0, 1, 3 } },	/* layer 0: rank 0, rank 1 */
		{ { 1, 3, 1, 1 }, { 3, 1, 2, 0 } },	/* layer 1 */
	};
	uint32_t layer, r, e;

	ck_assert_int_eq(rlb_schedule_build(&s, 0, len, 2, 2, 3, RLB_PACK_IN_ORDER, &err), 0);
	ck_assert_uint_eq(s.micro_batches, 1);
	expect_chunk(&s.chunks[0], 0, 0, 3, 0, 0);
	expect_chunk(&s.chunks[1], 0, 3, 1, 0, 1);
	expect_chunk(&s.chunks[2], 1, 0, 2, 0, 1);
	ck_assert_int_eq(rlb_loads_init(&l, s.micro_batches, 2, 2, 4, &err), 0);
	rlb_loads_add_seq(&l, &s, 0, &q0, 2);
	rlb_loads_add_seq(&l, &s, 1, &q1, 2);
	for (layer = 0; layer < 2; layer++)
		for (r = 0; r < 2; r++)
			for (e = 0; e < 4; e++)
				ck_assert_msg(l.count[rlb_loads_index(&l, 0, layer, r, e)] == want[layer][r][e],
					      "layer %u rank %u expert %u: %u, want %u", layer, r, e,
					      l.count[rlb_loads_index(&l, 0, layer, r, e)], want[layer][r][e]);
	rlb_loads_release(&l);
	ck_assert_ptr_null(l.count);
	rlb_schedule_release(&s);

	/* an empty table is fine */
	ck_assert_int_eq(rlb_loads_init(&l, 0, 2, 2, 4, &err), 0);
	ck_assert_ptr_null(l.count);
	rlb_loads_release(&l);
}
END_TEST

/* Counts sum to tokens * topk per (micro-batch, layer), for random routing. */
START_TEST(test_loads_sum)
{
	enum { L = 3, E = 16, K = 4, R = 4, B = 64 };
	uint32_t len[12];
	uint16_t *ids[12];
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_err err = {0};
	uint64_t x = 7, *want;
	size_t i, t;
	int p;

	for (i = 0; i < 12; i++) {
		len[i] = 1 + (uint32_t)(test_rand(&x) % 200);
		ids[i] = malloc((size_t)L * len[i] * K * sizeof(uint16_t));
		for (t = 0; t < (size_t)L * len[i] * K; t++)
			ids[i][t] = (uint16_t)(test_rand(&x) % E);
	}
	for (p = 0; p < 2; p++) {
		uint32_t mb, layer, r, e;

		ck_assert_int_eq(rlb_schedule_build(&s, 0, len, 12, R, B, p ? RLB_PACK_FFD : RLB_PACK_IN_ORDER, &err), 0);
		ck_assert_int_eq(rlb_loads_init(&l, s.micro_batches, L, R, E, &err), 0);
		want = calloc(s.micro_batches, sizeof(*want));
		for (i = 0; i < s.nchunks; i++)
			want[s.chunks[i].mb] += (uint64_t)s.chunks[i].tokens * K;
		for (i = 0; i < 12; i++) {
			struct rlb_seq q = { 0, (uint32_t)i, 0, len[i], ids[i], NULL };

			rlb_loads_add_seq(&l, &s, (uint32_t)i, &q, K);
		}
		for (mb = 0; mb < s.micro_batches; mb++)
			for (layer = 0; layer < L; layer++) {
				uint64_t sum = 0;

				for (r = 0; r < R; r++)
					for (e = 0; e < E; e++)
						sum += l.count[rlb_loads_index(&l, mb, layer, r, e)];
				ck_assert_uint_eq(sum, want[mb]);
			}
		free(want);
		rlb_loads_release(&l);
		rlb_schedule_release(&s);
	}
	for (i = 0; i < 12; i++)
		free(ids[i]);
}
END_TEST

/* Collects the generator's routing per step to compare with the trace. */
struct collect {
	struct rlb_schedule s[8];
	struct rlb_loads l[8];
	int nsteps;
	uint32_t topk;
	struct rlb_config *cfg;
	enum rlb_pack pack;
};

static int col_begin(void *ctx, uint32_t step, const struct rlb_seq_meta *m,
		     size_t n, struct rlb_err *err)
{
	struct collect *c = ctx;
	uint32_t *len = malloc((n ? n : 1) * sizeof(*len));
	size_t i;
	int ret;

	for (i = 0; i < n; i++)
		len[i] = m[i].tokens;
	ret = rlb_schedule_build(&c->s[c->nsteps], step, len, n,
				 (uint32_t)c->cfg->parallel.ep_size,
				 (uint32_t)c->cfg->parallel.micro_batch_tokens, c->pack, err);
	free(len);
	if (ret == 0)
		ret = rlb_loads_init(&c->l[c->nsteps], c->s[c->nsteps].micro_batches,
				     (uint32_t)c->cfg->model.moe_layers,
				     (uint32_t)c->cfg->parallel.ep_size,
				     (uint32_t)c->cfg->model.experts, err);
	return ret;
}

static int col_seq(void *ctx, uint32_t index, const struct rlb_seq *seq,
		   struct rlb_err *err)
{
	struct collect *c = ctx;

	(void)err;
	rlb_loads_add_seq(&c->l[c->nsteps], &c->s[c->nsteps], index, seq, c->topk);
	return 0;
}

static int col_end(void *ctx, uint32_t step, struct rlb_err *err)
{
	struct collect *c = ctx;

	(void)step;
	(void)err;
	c->nsteps++;
	return 0;
}

static void small_config(struct rlb_config *cfg)
{
	rlb_config_defaults(cfg);
	strcpy(cfg->model.name, "tiny");
	cfg->model.experts = 16;
	cfg->model.topk = 2;
	cfg->model.moe_layers = 3;
	cfg->cluster.nodes = 2;
	cfg->cluster.gpus_per_node = 2;
	cfg->parallel.ep_size = 4;
	cfg->parallel.micro_batch_tokens = 512;
	cfg->workload.steps = 3;
	cfg->workload.first_step = 5;
	cfg->workload.prompts_per_step = 3;
	cfg->workload.samples_per_prompt = 4;
	cfg->workload.len_median = 300;
	cfg->workload.len_min = 16;
	cfg->workload.len_max = 1500;
	cfg->workload.segment_min = 8;
	cfg->workload.segment_max = 64;
}

/* rlb_step_loads on a written trace equals counting the generator's output. */
START_TEST(test_step_loads_trace)
{
	struct rlb_config cfg;
	struct rlb_trace_header h;
	struct rlb_trace_writer *w = NULL;
	struct rlb_trace_reader *r = NULL;
	struct rlb_pool *pool = NULL;
	struct rlb_err err = {0};
	struct collect c;
	struct rlb_synth_sink sink = { &c, col_begin, col_seq, col_end };
	char path[512];
	int p, k;

	ck_assert_int_eq(rlb_pool_new(&pool, 3, &err), 0);
	small_config(&cfg);
	snprintf(path, sizeof(path), "%s/schedule-%ld.rrt", rlb_test_tmpdir(), (long)getpid());
	rlb_trace_header_from_config(&h, &cfg);
	h.seed = 3;
	strcpy(h.source, "synthetic");
	ck_assert_msg(rlb_trace_writer_open(&w, path, &h, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_synth_generate(&cfg, 3, 0, w, NULL, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_writer_close(w, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_reader_open(&r, path, &err) == 0, "%s", err.msg);
	for (p = 0; p < 2; p++) {
		memset(&c, 0, sizeof(c));
		c.cfg = &cfg;
		c.topk = 2;
		c.pack = p ? RLB_PACK_FFD : RLB_PACK_IN_ORDER;
		ck_assert_int_eq(rlb_synth_generate_cb(&cfg, 3, 0, &sink, NULL, NULL, &err), 0);
		ck_assert_int_eq(c.nsteps, 3);
		for (k = 0; k < 3; k++) {
			struct rlb_schedule s;
			struct rlb_loads l;
			size_t n;

			/* ffd's loads are counted by three threads, a layer each */
			ck_assert_msg(rlb_step_loads(r, 5 + (uint32_t)k, &cfg, c.pack, &s, &l,
						     p ? pool : NULL, &err) == 0, "%s", err.msg);
			ck_assert_uint_eq(s.step, 5 + (uint32_t)k);
			ck_assert_uint_eq(s.micro_batches, c.s[k].micro_batches);
			ck_assert_uint_eq(s.nchunks, c.s[k].nchunks);
			ck_assert_int_eq(memcmp(s.chunks, c.s[k].chunks, s.nchunks * sizeof(*s.chunks)), 0);
			n = (size_t)l.micro_batches * l.layers * l.ranks * l.experts;
			ck_assert_uint_eq(l.layers, 3);
			ck_assert_uint_eq(l.experts, 16);
			ck_assert_int_eq(memcmp(l.count, c.l[k].count, n * sizeof(*l.count)), 0);
			rlb_loads_release(&l);
			rlb_schedule_release(&s);
			rlb_loads_release(&c.l[k]);
			rlb_schedule_release(&c.s[k]);
		}
	}
	/* an absent step */
	{
		struct rlb_schedule s;
		struct rlb_loads l;

		ck_assert_int_lt(rlb_step_loads(r, 99, &cfg, RLB_PACK_IN_ORDER, &s, &l, NULL, &err), 0);
		ck_assert_ptr_null(s.chunks);
		ck_assert_ptr_null(l.count);
	}
	rlb_pool_free(pool);
	rlb_trace_reader_free(r);
	unlink(path);
}
END_TEST

/* rlb_schedule_from_chunks: chunks in any order are sorted; bad tilings are refused. */
START_TEST(test_from_chunks)
{
	static const uint32_t len[3] = { 5, 0, 3 };
	struct rlb_chunk ok[3] = {
		{ 2, 0, 3, 1, 0 }, { 0, 2, 3, 0, 1 }, { 0, 0, 2, 0, 0 },
	};
	static const struct {
		struct rlb_chunk c[3];
		size_t n;
		const char *msg;
	} bad[] = {
		{ { { 0, 0, 5, 0, 0 } }, 1,
		  "schedule: step 7: sequence 2: tokens 0..2 are in no chunk" },
		{ { { 0, 0, 5, 0, 0 }, { 2, 0, 2, 0, 0 } }, 2,
		  "schedule: step 7: sequence 2: tokens 2..2 are in no chunk" },
		{ { { 0, 0, 3, 0, 0 }, { 0, 2, 3, 0, 1 }, { 2, 0, 3, 0, 0 } }, 3,
		  "schedule: step 7: sequence 0: token 2 is in two chunks" },
		{ { { 0, 0, 2, 0, 0 }, { 0, 3, 2, 0, 1 }, { 2, 0, 3, 0, 0 } }, 3,
		  "schedule: step 7: sequence 0: token 2 is in no chunk" },
		{ { { 0, 0, 6, 0, 0 }, { 2, 0, 3, 0, 0 } }, 2,
		  "schedule: step 7: sequence 0: chunk 0+6 (tokens 0..5) runs past the sequence's 5 tokens" },
		{ { { 0, 0, 5, 0, 0 }, { 2, 0, 3, 0, 0 }, { 2, 3, 0, 0, 1 } }, 3,
		  "schedule: step 7: sequence 2: chunk 3+0 holds no tokens" },
		{ { { 0, 0, 5, 0, 0 }, { 2, 0, 3, 0, 0 }, { 3, 0, 3, 0, 0 } }, 3,
		  "schedule: step 7: sequence 3 does not exist (the step has 3)" },
		/* further past the end (the lengths must not be read there) */
		{ { { 0, 0, 5, 0, 0 }, { 2, 0, 3, 0, 0 }, { 4, 0, 1, 0, 0 } }, 3,
		  "schedule: step 7: sequence 4 does not exist (the step has 3)" },
		{ { { 0, 0, 5, 0, 0 }, { 2, 0, 3, 0, 0 }, { 4000000000u, 0, 1, 0, 0 } }, 3,
		  "schedule: step 7: sequence 4000000000 does not exist (the step has 3)" },
		{ { { 0, 0, 5, 0, 2 }, { 2, 0, 3, 0, 0 } }, 2,
		  "schedule: step 7: sequence 0: rank 2, micro-batch 0 out of range (EP size 2)" },
	};
	struct rlb_schedule s;
	struct rlb_err err = {0};
	size_t i;

	ck_assert_int_eq(rlb_schedule_from_chunks(&s, 7, RLB_PACK_FILE, ok, 3, len, 3,
						  2, 4, &err), 0);
	ck_assert_uint_eq(s.nchunks, 3);
	ck_assert_uint_eq(s.micro_batches, 2);
	ck_assert_int_eq(s.pack, RLB_PACK_FILE);
	expect_chunk(&s.chunks[0], 0, 0, 2, 0, 0);
	expect_chunk(&s.chunks[1], 0, 2, 3, 0, 1);
	expect_chunk(&s.chunks[2], 2, 0, 3, 1, 0);
	ck_assert_uint_eq(rlb_schedule_first_chunk(&s, 2), 2);
	rlb_schedule_release(&s);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(rlb_schedule_from_chunks(&s, 7, RLB_PACK_FILE, bad[i].c,
							  bad[i].n, len, 3, 2, 4, &err),
				 RLB_EINVAL);
		ck_assert_str_eq(err.msg, bad[i].msg);
		ck_assert_ptr_null(s.chunks);
	}
}
END_TEST

/* The data-control schedule: tiling, budgets, the fewest micro-batches, balance. */
START_TEST(test_data_control)
{
	uint64_t x = 7;
	int iter;

	for (iter = 0; iter < 200; iter++) {
		struct rlb_schedule a, b;
		struct rlb_err err = {0};
		size_t n = test_rand(&x) % 80, i, nb;
		uint32_t *len = calloc(n + 1, sizeof(*len));
		uint32_t ranks = 1 + (uint32_t)(test_rand(&x) % 8);
		uint32_t budget = 64 + (uint32_t)(test_rand(&x) % 3000);
		uint64_t total = 0, *bin, lo = UINT64_MAX, hi = 0, longest = 0;

		for (i = 0; i < n; i++) {
			len[i] = test_rand(&x) % 7 == 0 ? 0 : (uint32_t)(test_rand(&x) % 5000);
			total += len[i];
		}
		ck_assert_int_eq(rlb_dc_schedule(&a, (uint32_t)iter, len, n, ranks, budget, &err), 0);
		ck_assert_int_eq(a.pack, RLB_PACK_DATA_CONTROL);
		check_schedule(&a, len, n);
		/* never fewer micro-batches than the tokens need */
		ck_assert_uint_ge((uint64_t)a.micro_batches * ranks * budget, total);
		if (total)
			ck_assert_uint_ge(a.micro_batches, 1);
		/* longest chunk first into the emptiest bin: bins differ by at most one chunk */
		nb = (size_t)a.micro_batches * ranks;
		bin = calloc(nb + 1, sizeof(*bin));
		for (i = 0; i < a.nchunks; i++) {
			bin[(size_t)a.chunks[i].mb * ranks + a.chunks[i].rank] += a.chunks[i].tokens;
			if (a.chunks[i].tokens > longest)
				longest = a.chunks[i].tokens;
		}
		for (i = 0; i < nb; i++) {
			lo = bin[i] < lo ? bin[i] : lo;
			hi = bin[i] > hi ? bin[i] : hi;
		}
		if (nb)
			ck_assert_msg(hi - lo <= longest, "iter %d: bins %llu..%llu, longest chunk %llu",
				      iter, (unsigned long long)lo, (unsigned long long)hi,
				      (unsigned long long)longest);
		free(bin);
		ck_assert_int_eq(rlb_dc_schedule(&b, (uint32_t)iter, len, n, ranks, budget, &err), 0);
		ck_assert_uint_eq(a.micro_batches, b.micro_batches);
		ck_assert_uint_eq(a.nchunks, b.nchunks);
		if (a.nchunks)
			ck_assert_int_eq(memcmp(a.chunks, b.chunks, a.nchunks * sizeof(*a.chunks)), 0);
		rlb_schedule_release(&a);
		rlb_schedule_release(&b);
		free(len);
	}
}
END_TEST

/* Hand case: 6 sequences of 3, 3, 2, 2, 1, 1 tokens on 2 ranks of budget 3. */
START_TEST(test_data_control_hand)
{
	static const uint32_t len[6] = { 3, 1, 2, 3, 1, 2 };
	struct rlb_schedule s;
	struct rlb_err err = {0};

	ck_assert_int_eq(rlb_dc_schedule(&s, 0, len, 6, 2, 3, &err), 0);
	/* 12 tokens, 6 per micro-batch: 2 micro-batches, every bin full */
	ck_assert_uint_eq(s.micro_batches, 2);
	/* order 0(3) 3(3) 2(2) 5(2) 1(1) 4(1); bins (mb, rank) 0..3 */
	expect_chunk(&s.chunks[0], 0, 0, 3, 0, 0);
	expect_chunk(&s.chunks[1], 1, 0, 1, 1, 0);
	expect_chunk(&s.chunks[2], 2, 0, 2, 1, 0);
	expect_chunk(&s.chunks[3], 3, 0, 3, 0, 1);
	expect_chunk(&s.chunks[4], 4, 0, 1, 1, 1);
	expect_chunk(&s.chunks[5], 5, 0, 2, 1, 1);
	rlb_schedule_release(&s);
}
END_TEST

static const char *write_tmp(const char *name, const char *text)
{
	static char path[4][512];
	static int k;
	char *p = path[k++ % 4];
	FILE *fp;

	snprintf(p, 512, "%s/%s", rlb_test_tmpdir(), name);
	fp = fopen(p, "w");
	ck_assert_ptr_nonnull(fp);
	fputs(text, fp);
	fclose(fp);
	return p;
}

START_TEST(test_schedule_file)
{
	static const uint32_t len[3] = { 5, 0, 3 };
	const char *ok = write_tmp("sched-ok.json",
		"{\"schema\": \"relibra.schedule/1\", \"steps\": [\n"
		" {\"step\": 4, \"micro_batches\": [[[[0, 0, 2]], [[0, 2, 5]]],\n"
		"                                  [[[2, 0, 3]], []]]},\n"
		" {\"step\": 5, \"micro_batches\": []}]}\n");
	static const struct {
		const char *text;
		const char *msg;	/* after "schedule 'PATH': " */
	} bad[] = {
		{ "{\"schema\": \"relibra.schedule/1\",\n \"steps\": [}",
		  "invalid JSON at line 2, column 12 (byte 45): unexpected token near '}'" },
		/* the byte jansson cannot decode, not the one before it */
		{ "{\"schema\": \"relibra.sch\xff\"}",
		  "invalid JSON at line 1, column 24 (byte 24): unable to decode byte 0xff near '\"relibra.sch'" },
		{ "{\"schema\": \"relibra.schedule/1\",\n \"steps\": [\"\xc3(\"]}",
		  "invalid JSON at line 2, column 13 (byte 46): unable to decode byte 0xc3 near '\"'" },
		/* cut short: the byte after the last, on the line it would be on */
		{ "{\"schema\": \"relibra.schedule/1\",\n",
		  "invalid JSON at line 2, column 1 (byte 34): string or '}' expected near end of file" },
		{ "{\"schema\": \"relibra.schedule/1\"",
		  "invalid JSON at line 1, column 32 (byte 32): '}' expected near end of file" },
		{ "{\"schema\": \"relibra.schedule/2\", \"steps\": []}",
		  "schema 'relibra.schedule/2' is not supported (expected 'relibra.schedule/1')" },
		{ "{\"schema\": \"relibra.schedule/1\"}",
		  "'steps': expected an array of steps" },
		{ "{\"schema\": \"relibra.schedule/1\", \"steps\": [5]}",
		  "'steps[0]': expected an object with step and micro_batches" },
		{ "{\"schema\": \"relibra.schedule/1\", \"steps\": [{\"step\": -1}]}",
		  "'steps[0].step': expected a step number from 0 to 4294967295" },
		{ "{\"schema\": \"relibra.schedule/1\", \"steps\": [{\"step\": 4294967296}]}",
		  "'steps[0].step': expected a step number from 0 to 4294967295" },
		{ "{\"schema\": \"relibra.schedule/1\", \"steps\": [{\"step\": 2, \"micro_batches\": []}, {\"step\": 2, \"micro_batches\": []}]}",
		  "'steps[1].step': steps must increase (2 after 2)" },
		{ "{\"schema\": \"relibra.schedule/1\", \"steps\": [{\"step\": 0, \"micro_batches\": [[[[0, 3, 3]]]]}]}",
		  "'steps[0].micro_batches[0][0][0]': expected [seq, start, end] with integers from 0 to 4294967295 and end > start" },
		{ "{\"schema\": \"relibra.schedule/1\", \"steps\": [{\"step\": 0, \"micro_batches\": [[[[4294967296, 0, 1]]]]}]}",
		  "'steps[0].micro_batches[0][0][0]': expected [seq, start, end] with integers from 0 to 4294967295 and end > start" },
	};
	struct rlb_schedule_file *f;
	struct rlb_schedule s;
	struct rlb_err err = {0};
	char want[1024];
	size_t i;

	ck_assert_msg(rlb_schedule_file_load(&f, ok, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(rlb_schedule_file_step(f, 4, len, 3, 2, 8, &s, &err), 0);
	ck_assert_int_eq(s.pack, RLB_PACK_FILE);
	ck_assert_uint_eq(s.micro_batches, 2);
	ck_assert_uint_eq(s.nchunks, 3);
	expect_chunk(&s.chunks[0], 0, 0, 2, 0, 0);
	expect_chunk(&s.chunks[1], 0, 2, 3, 0, 1);
	expect_chunk(&s.chunks[2], 2, 0, 3, 1, 0);
	rlb_schedule_release(&s);
	/* the EP size must match, the step must exist, every token be covered */
	ck_assert_int_eq(rlb_schedule_file_step(f, 4, len, 3, 4, 8, &s, &err), RLB_EMISMATCH);
	snprintf(want, sizeof(want), "schedule '%s': 'steps[0].micro_batches[0]' (step 4) lists 2 ranks, the EP size is 4", ok);
	ck_assert_str_eq(err.msg, want);
	ck_assert_int_eq(rlb_schedule_file_step(f, 6, len, 3, 2, 8, &s, &err), RLB_ENOTFOUND);
	ck_assert_int_eq(rlb_schedule_file_step(f, 5, len, 3, 2, 8, &s, &err), RLB_EINVAL);
	snprintf(want, sizeof(want),
		 "schedule '%s': step 5: sequence 0: tokens 0..4 are in no chunk", ok);
	ck_assert_str_eq(err.msg, want);
	rlb_schedule_file_free(f);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *p = write_tmp("sched-bad.json", bad[i].text);

		ck_assert_int_eq(rlb_schedule_file_load(&f, p, &err), RLB_EPARSE);
		ck_assert_ptr_null(f);
		snprintf(want, sizeof(want), "schedule '%s': %s", p, bad[i].msg);
		ck_assert_str_eq(err.msg, want);
	}
	ck_assert_int_eq(rlb_schedule_file_load(&f, "/nonexistent/s.json", &err), RLB_EIO);
	/* micro-batches that list different ranks: the first off the EP size */
	{
		const char *p = write_tmp("sched-ranks.json",
			"{\"schema\": \"relibra.schedule/1\", \"steps\": [{\"step\": 1, \"micro_batches\": []},\n"
			" {\"step\": 2, \"micro_batches\": [[[[0, 0, 5]], [], []], [[[2, 0, 3]], []]]}]}\n");

		ck_assert_msg(rlb_schedule_file_load(&f, p, &err) == 0, "%s", err.msg);
		ck_assert_int_eq(rlb_schedule_file_step(f, 2, len, 3, 2, 8, &s, &err), RLB_EMISMATCH);
		snprintf(want, sizeof(want), "schedule '%s': 'steps[1].micro_batches[0]' (step 2) lists 3 ranks, the EP size is 2", p);
		ck_assert_str_eq(err.msg, want);
		ck_assert_int_eq(rlb_schedule_file_step(f, 2, len, 3, 3, 8, &s, &err), RLB_EMISMATCH);
		snprintf(want, sizeof(want), "schedule '%s': 'steps[1].micro_batches[1]' (step 2) lists 2 ranks, the EP size is 3", p);
		ck_assert_str_eq(err.msg, want);
		rlb_schedule_file_free(f);
	}
}
END_TEST

Suite *rlb_suite_schedule(void)
{
	Suite *s = suite_create("schedule");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_chunking);
	tcase_add_test(tc, test_in_order_hand);
	tcase_add_test(tc, test_ffd_hand);
	tcase_add_test(tc, test_dynamic_hand);
	tcase_add_test(tc, test_dynamic_grows);
	tcase_add_test(tc, test_rank_balance);
	tcase_add_test(tc, test_ffd_stable);
	tcase_add_test(tc, test_random_invariants);
	tcase_add_test(tc, test_edge_cases);
	tcase_add_test(tc, test_loads_hand);
	tcase_add_test(tc, test_loads_sum);
	tcase_add_test(tc, test_step_loads_trace);
	tcase_add_test(tc, test_from_chunks);
	tcase_add_test(tc, test_data_control);
	tcase_add_test(tc, test_data_control_hand);
	tcase_add_test(tc, test_schedule_file);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	return s;
}
