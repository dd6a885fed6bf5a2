/*
 * test_plan.c - unit tests of lib/plan and lib/plan_io: building and
 * checking step plans (every violation class with its message), the
 * LOCALITY and EVEN splits on hand-computed cells and against the
 * replication planner, the plan file (round trip, u16/u32 ids, seek,
 * determinism, truncation at every offset, every flipped byte, version
 * and input mismatches), the shipped example, and the EPLB export.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <zstd.h>

#include "eplb.h"
#include "plan.h"
#include "plan_io.h"
#include "replicate.h"
#include "suites.h"
#include "trace_impl.h"
#include "util.h"

static uint32_t rnd(uint64_t *state)
{
	*state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(*state >> 33);
}

static char *tmp_path(const char *name)
{
	static char buf[4][512];
	static int i;
	char *p = buf[i++ % 4];

	snprintf(p, 512, "%s/plan-%ld-%s", rlb_test_tmpdir(), (long)getpid(),
		 name);
	return p;
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b;
	long len;

	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc(len ? (size_t)len : 1);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	*n = (size_t)len;
	return b;
}

static void spit(const char *path, const uint8_t *b, size_t n)
{
	FILE *f = fopen(path, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(b, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
}

static int exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* Set every (source) load of one cell. */
static void set_loads(struct rlb_loads *l, uint32_t mb, uint32_t layer,
		      uint32_t e, const uint32_t *per_source)
{
	uint32_t s;

	for (s = 0; s < l->ranks; s++)
		l->count[rlb_loads_index(l, mb, layer, s, e)] = per_source[s];
}

/*
 * The small LOCALITY plan most tests use: 1 micro-batch, 1 layer, 4
 * experts on 4 GPUs (2 nodes of 2), 1 replica slot.  Expert 0 (home 0)
 * has a replica on GPU 1; the others keep their whole load at home.
 */
static const uint32_t small_load[4][4] = {
	/* per expert: loads from sources 0..3 */
	{10, 4, 6, 2},
	{3, 2, 0, 0},
	{1, 1, 1, 1},
	{5, 5, 1, 3},
};

static void small_loads(struct rlb_loads *l)
{
	uint32_t e;

	ck_assert_int_eq(rlb_loads_init(l, 1, 1, 4, 4, NULL), 0);
	for (e = 0; e < 4; e++)
		set_loads(l, 0, 0, e, small_load[e]);
}

static void small_plan(struct rlb_step_plan *p)
{
	ck_assert_int_eq(rlb_step_plan_init(p, 3, 1, 1, 4, 4, 2, 1,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(p, 0, 0, 0, 0, 12, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(p, 0, 0, 0, 1, 10, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(p, 0, 0, 1, 1, 5, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(p, 0, 0, 2, 2, 4, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(p, 0, 0, 3, 3, 14, NULL), 0);
}

/* ------------------------------------------------------------------ */

START_TEST(test_policy_names)
{
	struct rlb_err err;
	enum rlb_policy p;
	int i;

	for (i = 0; i < RLB_POLICY_COUNT; i++) {
		ck_assert_int_eq(rlb_policy_from_name(rlb_policy_name(i), &p, NULL), 0);
		ck_assert_int_eq(p, i);
	}
	ck_assert_str_eq(rlb_policy_name(RLB_POLICY_EPLB_ORACLE), "eplb-oracle");
	ck_assert_str_eq(rlb_policy_name((enum rlb_policy)17), "?");
	ck_assert_int_eq(rlb_policy_from_name("eplb2", &p, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "unknown policy 'eplb2' (static, eplb, eplb-oracle, replicate, relibra, ideal)");
}
END_TEST

START_TEST(test_init_static_homes)
{
	struct rlb_step_plan p;
	struct rlb_err err;
	uint32_t l, e;

	ck_assert_int_eq(rlb_step_plan_init(&p, 9, 2, 3, 8, 4, 2, 1,
					    RLB_SPLIT_LOCALITY, &err), 0);
	ck_assert_uint_eq(p.step, 9);
	for (l = 0; l < 3; l++)
		for (e = 0; e < 8; e++)
			ck_assert_uint_eq(p.home[l * 8 + e], e / 2);
	ck_assert_uint_eq(p.ninst, 0);
	rlb_step_plan_release(&p);
	ck_assert_ptr_null(p.home);

	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 1, 6, 4, 2, 0,
					    RLB_SPLIT_LOCALITY, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "experts (6) must be a positive multiple of ranks (4)");
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 1, 8, 4, 3, 0,
					    RLB_SPLIT_LOCALITY, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "gpus per node (3) must divide ranks (4)");
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 0, 8, 4, 2, 0,
					    RLB_SPLIT_LOCALITY, &err), RLB_EINVAL);
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 1, 8, 4, 2, 0,
					    (enum rlb_split)2, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "unknown split rule 2");
	ck_assert_ptr_null(p.home);
	rlb_step_plan_release(&p);
}
END_TEST

START_TEST(test_add_cells_and_growth)
{
	struct rlb_step_plan p;
	struct rlb_err err;
	const struct rlb_plan_instance *in;
	uint32_t mb, l, e, n;

	/* 40 x 8 x 16 cells, every cell two instances: the array grows */
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 40, 8, 16, 8, 4, 2,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	for (mb = 0; mb < 40; mb++)
		for (l = 0; l < 8; l++)
			for (e = 0; e < 16; e++) {
				uint32_t h = e / 2;

				ck_assert_int_eq(rlb_step_plan_add(&p, mb, l, e, h, mb + e, NULL), 0);
				ck_assert_int_eq(rlb_step_plan_add(&p, mb, l, e, (h + 1) % 4 + h / 4 * 4,
								   l, NULL), 0);
			}
	ck_assert_uint_eq(p.ninst, 40 * 8 * 16 * 2);
	ck_assert_uint_ge(p.inst_cap, p.ninst);
	ck_assert_uint_lt(p.inst_cap, 2 * p.ninst);	/* doubled, not per add */
	in = rlb_step_plan_cell(&p, 33, 5, 11, &n);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(in[0].expert, 11);
	ck_assert_uint_eq(in[0].gpu, 5);
	ck_assert_uint_eq(in[0].quota, 44);
	ck_assert_uint_eq(in[1].quota, 5);
	ck_assert_int_eq(rlb_step_plan_check(&p, NULL, &err), 0);

	/* order and range */
	ck_assert_int_eq(rlb_step_plan_add(&p, 39, 7, 14, 7, 1, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "mb 39, layer 7, expert 14: cells must be filled in (mb, layer, expert) order");
	ck_assert_int_eq(rlb_step_plan_add(&p, 40, 0, 0, 0, 1, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "mb 40, layer 0, expert 0: cell outside the plan (40 micro-batches, 8 layers, 16 experts)");

	/* clearing keeps homes and memory, forgets instances */
	p.home[3] = 2;
	rlb_step_plan_clear_instances(&p);
	ck_assert_uint_eq(p.ninst, 0);
	ck_assert_uint_eq(p.home[3], 2);
	ck_assert_uint_gt(p.inst_cap, 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 0, 1, NULL), 0);
	in = rlb_step_plan_cell(&p, 0, 0, 0, &n);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(rlb_step_plan_check(&p, NULL, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 1: no instance");
	rlb_step_plan_release(&p);
}
END_TEST

START_TEST(test_check_valid_plan)
{
	struct rlb_step_plan p;
	struct rlb_loads l;
	struct rlb_err err;

	small_loads(&l);
	small_plan(&p);
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), 0);
	ck_assert_int_eq(rlb_step_plan_check(&p, NULL, &err), 0);
	rlb_step_plan_release(&p);
	rlb_loads_release(&l);
}
END_TEST

/* Each violation class, with the message naming it. */
START_TEST(test_check_violations)
{
	struct rlb_step_plan p;
	struct rlb_loads l, l2;
	struct rlb_err err;

	small_loads(&l);

	/* home out of range */
	small_plan(&p);
	p.home[3] = 9;
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "layer 0, expert 3: home gpu 9 is beyond the 4 gpus");
	rlb_step_plan_release(&p);

	/* a skipped cell */
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 1, 4, 4, 2, 1,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 0, 22, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 2, 2, 4, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 3, 3, 14, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 1: no instance");
	rlb_step_plan_release(&p);

	/* an instance naming another expert */
	small_plan(&p);
	p.inst[2].expert = 3;
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 1: instance 0 names expert 3");
	rlb_step_plan_release(&p);

	/* a GPU beyond the EP group */
	small_plan(&p);
	p.inst[1].gpu = 7;
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 0: instance 1 is on gpu 7, beyond the 4 gpus");
	rlb_step_plan_release(&p);

	/* first instance not on the home GPU */
	small_plan(&p);
	p.home[0] = 1;
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 0: first instance is on gpu 0, not on the home gpu 1");
	rlb_step_plan_release(&p);

	/* a replica on the home GPU */
	small_plan(&p);
	p.inst[1].gpu = 0;
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 0: two instances on gpu 0");
	rlb_step_plan_release(&p);

	/* two replicas on one GPU, replicas out of order */
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 1, 4, 4, 2, 2,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 0, 12, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 3, 5, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 3, 5, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_check(&p, NULL, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 0: two instances on gpu 3");
	p.inst[2].gpu = 1;
	ck_assert_int_eq(rlb_step_plan_check(&p, NULL, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 0: replicas are not in ascending gpu order (gpu 1 after gpu 3)");
	rlb_step_plan_release(&p);

	/* more instances on a GPU than its slots */
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 1, 4, 4, 2, 0,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 0, 12, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 1, 10, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 1, 1, 5, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 2, 2, 4, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 3, 3, 14, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0: gpu 1 holds 2 copies, more than its 1 slots (1 experts per gpu + 0 replica slots)");
	rlb_step_plan_release(&p);

	/* quotas that do not sum to the load */
	small_plan(&p);
	p.inst[4].quota = 13;
	ck_assert_int_eq(rlb_step_plan_check(&p, NULL, &err), 0);
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 3: quotas sum to 13, the load is 14");
	rlb_step_plan_release(&p);

	/* instances stored beyond the last cell */
	small_plan(&p);
	p.ninst = 4;
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 3: instances up to 5 listed, 4 stored");
	p.ninst = 6;
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "6 instances stored, the cells list 5");
	p.ninst = 5;
	rlb_step_plan_release(&p);

	/* loads of another shape */
	small_plan(&p);
	ck_assert_int_eq(rlb_loads_init(&l2, 2, 1, 4, 4, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_check(&p, &l2, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "loads are 2 x 1 x 4 x 4 (micro-batches x layers x ranks x experts), the plan is 1 x 1 x 4 x 4");
	rlb_loads_release(&l2);
	rlb_step_plan_release(&p);
	rlb_loads_release(&l);
}
END_TEST

/* Rows conserve every source's load and every instance's quota. */
static void check_rows(const struct rlb_step_plan *p, const struct rlb_loads *l,
		       uint32_t mb, uint32_t layer, uint32_t e,
		       const uint32_t *rows)
{
	const struct rlb_plan_instance *in;
	uint32_t n, s, i;

	in = rlb_step_plan_cell(p, mb, layer, e, &n);
	for (s = 0; s < p->ranks; s++) {
		uint32_t sum = 0;

		for (i = 0; i < n; i++)
			sum += rows[s * n + i];
		ck_assert_uint_eq(sum, l->count[rlb_loads_index(l, mb, layer, s, e)]);
	}
	for (i = 0; i < n; i++) {
		uint32_t sum = 0;

		for (s = 0; s < p->ranks; s++)
			sum += rows[s * n + i];
		ck_assert_uint_eq(sum, in[i].quota);
	}
}

START_TEST(test_split_locality_hand)
{
	struct rlb_step_plan p;
	struct rlb_loads l;
	uint32_t rows[4 * 2];
	static const uint32_t want0[8] = { 10, 0, 0, 4, 2, 4, 0, 2 };
	static const uint32_t want3[8] = { 4, 1, 0, 5, 0, 1, 3, 0 };
	static const uint32_t want1[8] = { 0, 3, 0, 2, 0, 0, 0, 0 };
	static const uint32_t l3[4] = { 5, 5, 1, 3 };

	small_loads(&l);
	/*
	 * Expert 0 (home 0, node 0; replica on 1), quotas 12 + 10, loads
	 * 10, 4, 6, 2: own GPUs first (10 -> home, 4 -> replica), then the
	 * home node (nothing left), then source 2 fills the home's 2 and
	 * gives 4 to the replica, source 3 its 2 to the replica.
	 */
	small_plan(&p);
	rlb_step_plan_split(&p, &l, 0, 0, 0, rows);
	ck_assert_mem_eq(rows, want0, sizeof(want0));
	check_rows(&p, &l, 0, 0, 0, rows);
	rlb_step_plan_release(&p);

	/*
	 * Expert 3 (home 3, node 1; replica on 2), quotas 7 + 7, loads
	 * 5, 5, 1, 3: own GPUs 3 -> home, 1 -> replica; home node sources
	 * 2, 3 have nothing left; then source 0: 4 to the home, 1 to the
	 * replica; source 1: 5 to the replica.
	 */
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 1, 4, 4, 2, 1,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	set_loads(&l, 0, 0, 3, l3);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 0, 22, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 1, 1, 0, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 1, 0, 5, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 2, 2, 4, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 3, 3, 7, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 3, 2, 7, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, NULL), 0);
	rlb_step_plan_split(&p, &l, 0, 0, 3, rows);
	ck_assert_mem_eq(rows, want3, sizeof(want3));
	check_rows(&p, &l, 0, 0, 3, rows);
	/*
	 * Expert 1 (home 1 with quota 0; replica on 0 takes all 5): the
	 * replica takes its own source's 3, then source 1's 2.
	 */
	rlb_step_plan_split(&p, &l, 0, 0, 1, rows);
	ck_assert_mem_eq(rows, want1, sizeof(want1));
	check_rows(&p, &l, 0, 0, 1, rows);
	rlb_step_plan_release(&p);
	rlb_loads_release(&l);
}
END_TEST

START_TEST(test_split_even_hand)
{
	struct rlb_step_plan p;
	struct rlb_loads l;
	struct rlb_err err;
	uint32_t rows[4 * 3];
	static const uint32_t load0[4] = { 7, 5, 0, 4 };
	static const uint32_t want[12] = { 3, 2, 2, 1, 2, 2, 0, 0, 0, 2, 1, 1 };

	/*
	 * Expert 0 with 3 instances (GPUs 0, 1, 3), loads 7, 5, 0, 4:
	 * source 0: 2 each, remainder 1 to instance 0; source 1: 1 each,
	 * remainder 2 to instances 1, 2; source 3: 1 each, remainder 1 to
	 * instance (3 + 0) mod 3 = 0.  Quotas 6, 5, 5.
	 */
	ck_assert_int_eq(rlb_loads_init(&l, 1, 1, 4, 4, NULL), 0);
	set_loads(&l, 0, 0, 0, load0);
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 1, 4, 4, 2, 1,
					    RLB_SPLIT_EVEN, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 0, 6, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 1, 5, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 3, 5, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 1, 1, 0, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 2, 2, 0, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 3, 3, 0, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), 0);
	rlb_step_plan_split(&p, &l, 0, 0, 0, rows);
	ck_assert_mem_eq(rows, want, sizeof(want));
	check_rows(&p, &l, 0, 0, 0, rows);
	/* quotas summing right but not the even shares */
	p.inst[0].quota = 5;
	p.inst[1].quota = 6;
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 0: instance 0 (gpu 0) has quota 5, the even split gives 6");
	rlb_step_plan_release(&p);
	rlb_loads_release(&l);
}
END_TEST

/*
 * EVEN over copies: expert 0 on GPU 0 standing for 2 copies (0 and 1) and
 * on GPU 3 for copy 2, loads 7, 5, 0, 4 over C = 3 copies.  Source 0:
 * 7 = 2 x 3 + 1, one more to copy 0: copies 3 2 2, GPU 0 takes 5, GPU 3
 * 2.  Source 1: 5 = 1 x 3 + 2, one more to copies 1 and 2: 1 2 2, so 3
 * and 2.  Source 3: 4 = 1 x 3 + 1, one more to copy (3 + 0) mod 3 = 0:
 * 2 1 1, so 3 and 1.  Quotas 11 and 5.
 */
START_TEST(test_split_even_copies)
{
	struct rlb_step_plan p;
	struct rlb_loads l;
	struct rlb_err err;
	uint32_t rows[4 * 2];
	static const uint32_t load0[4] = { 7, 5, 0, 4 };
	static const uint32_t want[8] = { 5, 2, 3, 2, 0, 0, 3, 1 };

	ck_assert_int_eq(rlb_loads_init(&l, 1, 1, 4, 4, NULL), 0);
	set_loads(&l, 0, 0, 0, load0);
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 1, 4, 4, 2, 1,
					    RLB_SPLIT_EVEN, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add_copies(&p, 0, 0, 0, 0, 11, 2, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 3, 5, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 1, 1, 0, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 2, 2, 0, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 3, 3, 0, NULL), 0);
	ck_assert_uint_eq(rlb_step_plan_copies(&p, 0), 2);
	ck_assert_uint_eq(rlb_step_plan_copies(&p, 1), 1);
	ck_assert_msg(rlb_step_plan_check(&p, &l, &err) == 0, "%s", err.msg);
	rlb_step_plan_split(&p, &l, 0, 0, 0, rows);
	ck_assert_mem_eq(rows, want, sizeof(want));
	check_rows(&p, &l, 0, 0, 0, rows);
	/* the split of one copy per instance (6, 5, 5 over three) is refused */
	p.inst[0].quota = 10;
	p.inst[1].quota = 6;
	ck_assert_int_eq(rlb_step_plan_check(&p, &l, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 0: instance 0 (gpu 0) has quota 10, the even split gives 11");
	p.inst[0].quota = 11;
	p.inst[1].quota = 5;
	/* copies use slots: GPU 0 (2 copies of expert 0) is full, GPU 3 too */
	p.copies[1] = 2;
	ck_assert_int_eq(rlb_step_plan_check(&p, NULL, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0: gpu 3 holds 3 copies, more than its 2 slots (1 experts per gpu + 1 replica slots)");
	p.copies[1] = 0;
	ck_assert_int_eq(rlb_step_plan_check(&p, NULL, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 0: instance 1 stands for 0 copies (at least 1)");
	rlb_step_plan_release(&p);
	/* only an even split has instances of several copies */
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 1, 4, 4, 2, 1,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add_copies(&p, 0, 0, 0, 0, 11, 2, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 0: 2 copies on gpu 0 (only an even split has more than one)");
	ck_assert_int_eq(rlb_step_plan_add_copies(&p, 0, 0, 0, 0, 11, 0, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "mb 0, layer 0, expert 0: 0 copies on gpu 0 (an instance is at least one)");
	ck_assert_ptr_null(p.copies);
	rlb_step_plan_release(&p);
	rlb_loads_release(&l);
}
END_TEST

/*
 * A random replication plan of one (micro-batch, layer): 1 to 3 nodes of
 * 1 to 4 GPUs, 1 to 3 experts per GPU, 1 to 3 replica slots, loads mostly
 * small with a hot quarter; *pl keeps the planner's own rows.
 */
static void random_replicate_plan(uint64_t *st, struct rlb_replicate_planner *pl,
				  struct rlb_step_plan *p, struct rlb_loads *l)
{
	uint32_t gpn = 1 + rnd(st) % 4, nodes = 1 + rnd(st) % 3;
	uint32_t G = gpn * nodes, E = G * (1 + rnd(st) % 3), s, e, k, n;
	struct rlb_replicate_params rp = { G, gpn, E, 1 + rnd(st) % 3, rnd(st) % 8, 0 };

	ck_assert_int_eq(rlb_replicate_planner_init(pl, &rp, NULL), 0);
	ck_assert_int_eq(rlb_loads_init(l, 1, 1, G, E, NULL), 0);
	for (s = 0; s < G; s++)
		for (e = 0; e < E; e++)
			l->count[rlb_loads_index(l, 0, 0, s, e)] =
				rnd(st) % 4 == 0 ? rnd(st) % 300 : rnd(st) % 10;
	ck_assert_int_eq(rlb_replicate_planner_run(pl, NULL, l->count, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_init(p, 0, 1, 1, E, G, gpn, rp.replica_slots,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	for (e = 0; e < E; e++) {
		const struct rlb_replicate_instance *in =
			rlb_replicate_instances(&pl->plan, e, &n);

		for (k = 0; k < n; k++)
			ck_assert_int_eq(rlb_step_plan_add(p, 0, 0, e, in[k].gpu,
							   (uint32_t)in[k].quota_tokens,
							   NULL), 0);
	}
}

/*
 * rlb_step_plan_route on the small plan: rank 2 sends 6 rows of expert 0,
 * 2 to the home (GPU 0) and 4 to the replica (GPU 1) by the split, in its
 * token order; instances are e0: 0 (home), 1 (replica), e1: 2, e2: 3,
 * e3: 4.
 */
START_TEST(test_route_hand)
{
	static const uint16_t ids[8] = { 0, 2, 0, 0, 3, 0, 0, 0 };
	static const size_t want[8] = { 0, 3, 0, 1, 4, 1, 1, 1 };
	uint16_t more[9], bad[8];
	struct rlb_step_plan p;
	struct rlb_loads l;
	struct rlb_err err;
	size_t inst[9];

	small_loads(&l);
	small_plan(&p);
	ck_assert_int_eq(rlb_step_plan_route(&p, &l, 0, 0, 2, ids, 8, 1, inst, &err), 0);
	ck_assert_mem_eq(inst, want, sizeof(want));
	/* The same rows as 4 tokens of top-2. */
	ck_assert_int_eq(rlb_step_plan_route(&p, &l, 0, 0, 2, ids, 4, 2, inst, &err), 0);
	ck_assert_mem_eq(inst, want, sizeof(want));
	/* A row more, a row fewer, an id beyond the experts, a rank beyond. */
	memcpy(more, ids, sizeof(ids));
	more[8] = 0;
	ck_assert_int_eq(rlb_step_plan_route(&p, &l, 0, 0, 2, more, 9, 1, inst, &err),
			 RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "step 3 mb 0 layer 0: rank 2 has more rows of expert 0 than its loads");
	ck_assert_int_eq(rlb_step_plan_route(&p, &l, 0, 0, 2, ids, 7, 1, inst, &err),
			 RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "step 3 mb 0 layer 0: rank 2 has fewer rows of expert 0 than its loads");
	memcpy(bad, ids, sizeof(ids));
	bad[5] = 4;
	ck_assert_int_eq(rlb_step_plan_route(&p, &l, 0, 0, 2, bad, 8, 1, inst, &err),
			 RLB_EINVAL);
	ck_assert_str_eq(err.msg, "token 5: expert id 4, the plan has 4 experts");
	ck_assert_int_eq(rlb_step_plan_route(&p, &l, 0, 0, 4, ids, 8, 1, inst, &err),
			 RLB_EINVAL);
	ck_assert_int_eq(rlb_step_plan_route(&p, &l, 1, 0, 2, ids, 8, 1, inst, &err),
			 RLB_EINVAL);
	ck_assert_str_eq(err.msg, "mb 1, layer 0, rank 2: outside the plan's 1 x 1 x 4");
	ck_assert_int_eq(rlb_step_plan_route(&p, &l, 0, 0, 2, ids, 8, 0, inst, &err),
			 RLB_EINVAL);
	ck_assert_str_eq(err.msg, "topk 0: a token routes to at least one expert");
	rlb_step_plan_release(&p);
	/* a plan filled up to expert 1: expert 2 has no instance to route to */
	ck_assert_int_eq(rlb_step_plan_init(&p, 3, 1, 1, 4, 4, 2, 1,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 0, 12, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 1, 10, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 1, 1, 5, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_route(&p, &l, 0, 0, 2, ids, 8, 1, inst, &err),
			 RLB_EINVAL);
	ck_assert_str_eq(err.msg, "step 3 mb 0 layer 0: expert 2 has no instance in the plan");
	rlb_step_plan_release(&p);
	rlb_loads_release(&l);
}
END_TEST

/*
 * On random replication plans, every rank's routed rows per instance are
 * rlb_step_plan_split's, and an expert's rows fill its instances in order.
 */
START_TEST(test_route_matches_split)
{
	uint64_t st = 7;
	size_t routed = 0;
	int it;

	for (it = 0; it < 100; it++) {
		struct rlb_replicate_planner pl;
		struct rlb_step_plan p;
		struct rlb_loads l;
		uint32_t G, E, e, s, k, n, *rows, *got, *last;
		uint16_t *ids;
		size_t *inst, nrows, i;

		random_replicate_plan(&st, &pl, &p, &l);
		G = p.ranks;
		E = p.experts;
		rows = malloc((size_t)G * G * sizeof(*rows));
		got = calloc(p.ninst, sizeof(*got));
		last = calloc(E, sizeof(*last));
		s = rnd(&st) % G;
		/* The rank's rows in a random order. */
		for (e = 0, nrows = 0; e < E; e++)
			nrows += l.count[rlb_loads_index(&l, 0, 0, s, e)];
		ids = malloc((nrows ? nrows : 1) * sizeof(*ids));
		inst = malloc((nrows ? nrows : 1) * sizeof(*inst));
		for (e = 0, i = 0; e < E; e++)
			for (k = 0; k < l.count[rlb_loads_index(&l, 0, 0, s, e)]; k++)
				ids[i++] = (uint16_t)e;
		for (i = nrows; i > 1; i--) {
			size_t j = rnd(&st) % i;
			uint16_t x = ids[i - 1];

			ids[i - 1] = ids[j];
			ids[j] = x;
		}
		ck_assert_int_eq(rlb_step_plan_route(&p, &l, 0, 0, s, ids, nrows, 1, inst, NULL), 0);
		for (i = 0; i < nrows; i++) {
			ck_assert_uint_eq(p.inst[inst[i]].expert, ids[i]);
			ck_assert_uint_ge(inst[i], last[ids[i]]);
			last[ids[i]] = (uint32_t)inst[i];
			got[inst[i]]++;
		}
		for (e = 0; e < E; e++) {
			const struct rlb_plan_instance *in = rlb_step_plan_cell(&p, 0, 0, e, &n);

			rlb_step_plan_split(&p, &l, 0, 0, e, rows);
			for (k = 0; k < n; k++)
				ck_assert_uint_eq(got[(size_t)(in - p.inst) + k],
						  rows[(size_t)s * n + k]);
		}
		routed += nrows;
		free(ids);
		free(inst);
		free(rows);
		free(got);
		free(last);
		rlb_step_plan_release(&p);
		rlb_loads_release(&l);
		rlb_replicate_planner_release(&pl);
	}
	ck_assert_uint_gt(routed, 10000);
}
END_TEST

/*
 * The plan module's LOCALITY split equals the replication planner's rows
 * on random loads: one rule, two users.
 */
START_TEST(test_split_matches_replicate)
{
	uint64_t st = 99, diff = 0, replicated = 0;
	int it;

	for (it = 0; it < 200; it++) {
		struct rlb_replicate_planner pl;
		struct rlb_step_plan p;
		struct rlb_loads l;
		uint32_t G, E, e, s, k, n, *rows;

		random_replicate_plan(&st, &pl, &p, &l);
		G = p.ranks;
		E = p.experts;
		ck_assert_int_eq(rlb_step_plan_check(&p, &l, NULL), 0);
		rows = malloc((size_t)G * G * sizeof(*rows));
		for (e = 0; e < E; e++) {
			uint32_t f = pl.plan.expert_first[e];

			rlb_step_plan_cell(&p, 0, 0, e, &n);
			rlb_step_plan_split(&p, &l, 0, 0, e, rows);
			for (s = 0; s < G; s++)
				for (k = 0; k < n; k++)
					diff += rows[s * n + k] !=
						rlb_replicate_rows(&pl.plan, f + k, s);
			replicated += n > 1;
		}
		free(rows);
		rlb_step_plan_release(&p);
		rlb_loads_release(&l);
		rlb_replicate_planner_release(&pl);
	}
	ck_assert_uint_eq(diff, 0);
	ck_assert_uint_gt(replicated, 100);	/* the split was exercised */
}
END_TEST

/* ------------------------------------------------------------------ */
/* Plan files                                                          */

static void tiny_trace_header(struct rlb_trace_header *th)
{
	memset(th, 0, sizeof(*th));
	th->experts = 4;
	th->topk = 2;
	th->moe_layers = 2;
	th->seed = 7;
	strcpy(th->model, "tiny");
	strcpy(th->source, "synthetic");
}

static void tiny_header(struct rlb_plan_header *h)
{
	struct rlb_trace_header th;
	static const uint32_t steps[] = { 0, 1 };
	struct rlb_config cfg;
	struct rlb_balance_opts o;

	tiny_trace_header(&th);
	rlb_config_defaults(&cfg);
	cfg.cluster.nodes = 1;
	cfg.cluster.gpus_per_node = 2;
	cfg.parallel.ep_size = 2;
	cfg.parallel.micro_batch_tokens = 16;
	memset(&o, 0, sizeof(o));
	o.policy = RLB_POLICY_REPLICATE;
	o.replica_slots = 1;
	o.min_tokens_per_replica = 2;
	o.migration_weight = 1.0;
	rlb_plan_header_init(h, &cfg, &o, RLB_PACK_IN_ORDER, &th, steps, 2);
}

/*
 * The tiny example (trace_format/examples/tiny-plan.rlp): 2 layers, 4
 * experts, 2 GPUs on one node, 1 replica slot; step 0 with 2
 * micro-batches and one replica, step 1 with 1 micro-batch, its layer 1
 * reordered (experts 1 and 2 swapped homes) and one replica.
 */
static void tiny_steps(struct rlb_step_plan p[2])
{
	static const uint32_t q0[2][2][4] = {
		{ { 5, 2, 1, 0 }, { 2, 2, 2, 2 } },
		{ { 1, 1, 4, 2 }, { 0, 3, 3, 2 } },
	};
	uint32_t mb, l, e;

	ck_assert_int_eq(rlb_step_plan_init(&p[0], 0, 2, 2, 4, 2, 2, 1,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	for (mb = 0; mb < 2; mb++)
		for (l = 0; l < 2; l++)
			for (e = 0; e < 4; e++) {
				ck_assert_int_eq(rlb_step_plan_add(&p[0], mb, l, e, e / 2,
								   q0[mb][l][e], NULL), 0);
				if (mb == 0 && l == 0 && e == 0)
					ck_assert_int_eq(rlb_step_plan_add(&p[0], 0, 0, 0, 1,
									   3, NULL), 0);
			}
	p[0].planner_ns = 41000;
	ck_assert_int_eq(rlb_step_plan_init(&p[1], 1, 1, 2, 4, 2, 2, 1,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	p[1].home[4 + 1] = 1;
	p[1].home[4 + 2] = 0;
	for (l = 0; l < 2; l++)
		for (e = 0; e < 4; e++) {
			ck_assert_int_eq(rlb_step_plan_add(&p[1], 0, l, e,
							   p[1].home[l * 4 + e],
							   l * 4 + e, NULL), 0);
			if (l == 1 && e == 3)
				ck_assert_int_eq(rlb_step_plan_add(&p[1], 0, 1, 3, 0, 2,
								   NULL), 0);
		}
	p[1].migrated_experts = 0;
	p[1].planner_ns = 17000;
}

/*
 * Assert that two plans are equal (one assertion per array: Check records
 * every passing assertion, and these arrays can be large).
 */
static void plans_equal(const struct rlb_step_plan *a,
			const struct rlb_step_plan *b)
{
	size_t cells = (size_t)a->micro_batches * a->layers * a->experts, i;
	size_t bad = SIZE_MAX;

	ck_assert_uint_eq(a->step, b->step);
	ck_assert_uint_eq(a->micro_batches, b->micro_batches);
	ck_assert_uint_eq(a->layers, b->layers);
	ck_assert_uint_eq(a->experts, b->experts);
	ck_assert_uint_eq(a->ranks, b->ranks);
	ck_assert_uint_eq(a->gpus_per_node, b->gpus_per_node);
	ck_assert_uint_eq(a->replica_slots, b->replica_slots);
	ck_assert_int_eq(a->split, b->split);
	ck_assert_uint_eq(a->migrated_experts, b->migrated_experts);
	ck_assert_uint_eq(a->planner_ns, b->planner_ns);
	ck_assert_uint_eq(a->ninst, b->ninst);
	ck_assert_mem_eq(a->home, b->home,
			 (size_t)a->layers * a->experts * sizeof(*a->home));
	for (i = 0; i <= cells && bad == SIZE_MAX; i++)
		if (a->inst_first[i] != b->inst_first[i])
			bad = i;
	ck_assert_msg(bad == SIZE_MAX, "inst_first[%zu] differs", bad);
	for (i = 0; i < a->ninst && bad == SIZE_MAX; i++)
		if (a->inst[i].expert != b->inst[i].expert ||
		    a->inst[i].gpu != b->inst[i].gpu ||
		    a->inst[i].quota != b->inst[i].quota)
			bad = i;
	ck_assert_msg(bad == SIZE_MAX, "instance %zu differs", bad);
	for (i = 0; i < a->ninst && bad == SIZE_MAX; i++)
		if (rlb_step_plan_copies(a, i) != rlb_step_plan_copies(b, i))
			bad = i;
	ck_assert_msg(bad == SIZE_MAX, "copies of instance %zu differ", bad);
}

static void write_plans(const char *path, const struct rlb_plan_header *h,
			const struct rlb_step_plan *p, size_t n,
			const struct rlb_plan_writer_opts *o)
{
	struct rlb_plan_writer *w;
	struct rlb_err err;
	size_t i;

	ck_assert_int_eq(rlb_plan_writer_open(&w, path, h, o, &err), 0);
	for (i = 0; i < n; i++)
		ck_assert_msg(rlb_plan_writer_append(w, &p[i]) == 0, "%s",
			      (rlb_plan_writer_error(w, &err), err.msg));
	ck_assert_msg(rlb_plan_writer_close(w, &err) == 0, "%s", err.msg);
}

/* finish writes the whole file as PATH.tmp; close renames it, abort removes it. */
START_TEST(test_writer_finish)
{
	struct rlb_plan_header h;
	struct rlb_step_plan p[2];
	struct rlb_plan_writer *w;
	struct rlb_plan_reader *r;
	const struct rlb_plan_step_info *info;
	struct rlb_err err;
	const char *path = tmp_path("fin.rlp"), *tmp = tmp_path("fin.rlp.tmp");
	int i;

	tiny_header(&h);
	tiny_steps(p);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(rlb_plan_writer_open(&w, path, &h, NULL, &err), 0);
		ck_assert_int_eq(rlb_plan_writer_append(w, &p[0]), 0);
		ck_assert_int_eq(rlb_plan_writer_append(w, &p[1]), 0);
		ck_assert_msg(rlb_plan_writer_finish(w, &err) == 0, "%s", err.msg);
		ck_assert(exists(tmp));
		ck_assert(!exists(path));
		if (i == 0) {
			ck_assert_msg(rlb_plan_writer_close(w, &err) == 0, "%s", err.msg);
			ck_assert(exists(path));
			ck_assert_int_eq(rlb_plan_reader_open(&r, path, &err), 0);
			ck_assert_uint_eq(rlb_plan_reader_steps(r, &info), 2);
			rlb_plan_reader_free(r);
			unlink(path);
		} else if (i == 1) {
			rlb_plan_writer_abort(w);
		} else {
			ck_assert_int_eq(rlb_plan_writer_append(w, &p[1]), RLB_EINVAL);
			ck_assert_int_eq(rlb_plan_writer_close(w, &err), RLB_EINVAL);
			ck_assert_str_eq(err.msg, "plan: a step appended after the plan was finished");
		}
		ck_assert(!exists(tmp));
		ck_assert(!exists(path));
	}
	for (i = 0; i < 2; i++)
		rlb_step_plan_release(&p[i]);
}
END_TEST

START_TEST(test_file_round_trip)
{
	struct rlb_plan_header h;
	struct rlb_step_plan p[3], q;
	struct rlb_plan_reader *r;
	const struct rlb_plan_step_info *info;
	const struct rlb_plan_header *rh;
	struct rlb_err err;
	const char *path = tmp_path("rt.rlp");
	size_t i;
	int ret;

	tiny_header(&h);
	tiny_steps(p);
	/* a third step without micro-batches (no tokens) */
	ck_assert_int_eq(rlb_step_plan_init(&p[2], 5, 0, 2, 4, 2, 2, 1,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	p[2].migrated_experts = 2;
	p[2].home[0] = 1;
	p[2].home[2] = 0;
	write_plans(path, &h, p, 3, NULL);
	ck_assert(!exists(tmp_path("rt.rlp.tmp")));

	ck_assert_int_eq(rlb_plan_reader_open(&r, path, &err), 0);
	rh = rlb_plan_reader_header(r);
	ck_assert_uint_eq(rh->version_major, 1);
	ck_assert_uint_eq(rh->version_minor, 0);
	ck_assert_int_eq(rh->policy, RLB_POLICY_REPLICATE);
	ck_assert_int_eq(rh->split, RLB_SPLIT_LOCALITY);
	ck_assert_int_eq(rh->pack, RLB_PACK_IN_ORDER);
	ck_assert_uint_eq(rh->replica_slots, 1);
	ck_assert_uint_eq(rh->min_tokens_per_replica, 2);
	ck_assert_uint_eq(rh->micro_batch_tokens, 16);
	ck_assert(rh->migration_weight == 1.0);
	ck_assert_uint_eq(rh->layers, 2);
	ck_assert_uint_eq(rh->experts, 4);
	ck_assert_uint_eq(rh->topk, 2);
	ck_assert_uint_eq(rh->ranks, 2);
	ck_assert_uint_eq(rh->gpus_per_node, 2);
	ck_assert_uint_eq(rh->trace_hash, h.trace_hash);
	ck_assert_uint_eq(rh->trace_first_step, 0);
	ck_assert_uint_eq(rh->trace_last_step, 1);
	ck_assert_uint_eq(rh->trace_steps, 2);
	ck_assert_str_eq(rh->model, "tiny");
	ck_assert_uint_eq(rlb_plan_reader_steps(r, &info), 3);
	ck_assert_uint_eq(info[0].step, 0);
	ck_assert_uint_eq(info[0].micro_batches, 2);
	ck_assert_uint_eq(info[0].replicas, 1);
	ck_assert_uint_eq(info[2].step, 5);
	ck_assert_uint_eq(info[2].micro_batches, 0);
	memset(&q, 0, sizeof(q));
	for (i = 0; i < 3; i++) {
		ret = rlb_plan_reader_next(r, &q, &err);
		ck_assert_msg(ret == 1, "%s", err.msg);
		plans_equal(&q, &p[i]);
	}
	ck_assert_int_eq(rlb_plan_reader_next(r, &q, &err), 0);
	ck_assert_ptr_null(q.inst_first);

	/* seek */
	ck_assert_int_eq(rlb_plan_reader_seek_step(r, 1, &err), 0);
	ck_assert_int_eq(rlb_plan_reader_next(r, &q, &err), 1);
	plans_equal(&q, &p[1]);
	ck_assert_int_eq(rlb_plan_reader_next(r, &q, &err), 1);
	plans_equal(&q, &p[2]);
	ck_assert_int_eq(rlb_plan_reader_seek_step(r, 2, &err), RLB_ENOTFOUND);
	ck_assert_ptr_nonnull(strstr(err.msg, "rt.rlp' has no step 2"));
	ck_assert_uint_eq(strncmp(err.msg, "plan '", 6), 0);
	ck_assert_int_eq(rlb_plan_reader_read_step(r, 0, &q, &err), 0);
	plans_equal(&q, &p[0]);
	ck_assert_int_eq(rlb_plan_reader_read_step(r, 6, &q, &err), RLB_ENOTFOUND);
	ck_assert_ptr_null(q.home);
	rlb_plan_reader_rewind(r);
	ck_assert_int_eq(rlb_plan_reader_next(r, &q, &err), 1);
	ck_assert_uint_eq(q.step, 0);
	rlb_plan_reader_free(r);

	/* The dynamic rule is a 1.3 plan (older readers refuse pack 4), the same steps. */
	h.pack = RLB_PACK_DYNAMIC;
	write_plans(path, &h, p, 3, NULL);
	ck_assert_int_eq(rlb_plan_reader_open(&r, path, &err), 0);
	rh = rlb_plan_reader_header(r);
	ck_assert_uint_eq(rh->version_minor, 3);
	ck_assert_int_eq(rh->pack, RLB_PACK_DYNAMIC);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(rlb_plan_reader_next(r, &q, &err), 1);
		plans_equal(&q, &p[i]);
	}
	rlb_step_plan_release(&q);
	rlb_plan_reader_free(r);
	for (i = 0; i < 3; i++)
		rlb_step_plan_release(&p[i]);
	unlink(path);
}
END_TEST

/* The decompressed size of step frame i, from the seek table. */
static uint32_t step_dsize(const char *path, size_t i)
{
	size_t n;
	uint8_t *b = slurp(path, &n);
	uint32_t nent = rlb_get_u32(b + n - 9);
	const uint8_t *ent = b + n - 9 - 8 * (size_t)nent;
	uint32_t d = rlb_get_u32(ent + 8 * (i + 1) + 4);

	free(b);
	return d;
}

/* GPU and expert ids widen to u32 past 65536 (trace_format/SPEC.md (plan format)). */
static void wide_case(uint32_t experts, uint32_t ranks, unsigned we,
		      unsigned wg)
{
	struct rlb_plan_header h;
	struct rlb_step_plan p, q;
	struct rlb_plan_reader *r;
	struct rlb_err err;
	const char *path = tmp_path("wide.rlp");
	uint32_t e, per = experts / ranks;

	memset(&h, 0, sizeof(h));
	h.policy = RLB_POLICY_RELIBRA;
	h.split = RLB_SPLIT_LOCALITY;
	h.layers = 1;
	h.experts = experts;
	h.topk = 1;
	h.ranks = ranks;
	h.gpus_per_node = ranks;
	h.replica_slots = 1;
	ck_assert_int_eq(rlb_step_plan_init(&p, 4, 1, 1, experts, ranks, ranks,
					    1, RLB_SPLIT_LOCALITY, NULL), 0);
	/* a reordered layer: expert e's home is the last GPU's neighbour */
	for (e = 0; e < experts; e++)
		p.home[e] = ranks - 1 - e / per;
	for (e = 0; e < experts; e++) {
		ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, e, p.home[e], e % 7, NULL), 0);
		if (e == 1 || e == experts - 1)
			ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, e,
							   (p.home[e] + 1) % ranks,
							   9, NULL), 0);
	}
	write_plans(path, &h, &p, 1, NULL);
	ck_assert_uint_eq(step_dsize(path, 0),
			  32 + experts * wg + 4 + 2 * (we + wg) + (experts + 2) * 4);
	ck_assert_int_eq(rlb_plan_reader_open(&r, path, &err), 0);
	memset(&q, 0, sizeof(q));
	ck_assert_msg(rlb_plan_reader_next(r, &q, &err) == 1, "%s", err.msg);
	plans_equal(&q, &p);
	rlb_step_plan_release(&q);
	rlb_plan_reader_free(r);
	rlb_step_plan_release(&p);
	unlink(path);
}

START_TEST(test_file_wide_ids)
{
	wide_case(8, 4, 2, 2);			/* u16 experts, u16 GPUs */
	wide_case(131072, 2, 4, 2);		/* u32 experts, u16 GPUs */
	wide_case(70000, 70000, 4, 4);		/* u32 experts, u32 GPUs */
}
END_TEST

START_TEST(test_file_determinism)
{
	struct rlb_plan_header h;
	struct rlb_step_plan p[2], q;
	struct rlb_plan_writer_opts o = { 0, 1 };
	struct rlb_plan_reader *r;
	struct rlb_err err;
	const char *a = tmp_path("det-a.rlp"), *b = tmp_path("det-b.rlp");
	uint8_t *ba, *bb;
	size_t na, nb;

	tiny_header(&h);
	tiny_steps(p);
	write_plans(a, &h, p, 2, NULL);
	write_plans(b, &h, p, 2, NULL);
	ba = slurp(a, &na);
	bb = slurp(b, &nb);
	ck_assert_uint_eq(na, nb);
	ck_assert_mem_eq(ba, bb, na);
	free(bb);
	/* no_timing: planner_ns stored as 0, everything else the same */
	write_plans(b, &h, p, 2, &o);
	ck_assert_int_eq(rlb_plan_reader_open(&r, b, &err), 0);
	memset(&q, 0, sizeof(q));
	ck_assert_int_eq(rlb_plan_reader_next(r, &q, &err), 1);
	ck_assert_uint_eq(q.planner_ns, 0);
	q.planner_ns = p[0].planner_ns;
	plans_equal(&q, &p[0]);
	rlb_step_plan_release(&q);
	rlb_plan_reader_free(r);
	/* the whole file is a valid zstd stream */
	{
		ZSTD_DCtx *d = ZSTD_createDCtx();
		uint8_t out[4096];
		ZSTD_inBuffer in = { ba, na, 0 };
		size_t ret = 1;

		while (in.pos < in.size) {
			ZSTD_outBuffer ob = { out, sizeof(out), 0 };

			ret = ZSTD_decompressStream(d, &ob, &in);
			ck_assert(!ZSTD_isError(ret));
		}
		ck_assert_uint_eq(ret, 0);
		ZSTD_freeDCtx(d);
	}
	free(ba);
	rlb_step_plan_release(&p[0]);
	rlb_step_plan_release(&p[1]);
	unlink(a);
	unlink(b);
}
END_TEST

START_TEST(test_writer_errors)
{
	struct rlb_plan_header h;
	struct rlb_step_plan p[2], bad;
	struct rlb_plan_writer *w;
	struct rlb_err err;
	const char *path = tmp_path("werr.rlp");

	tiny_header(&h);
	tiny_steps(p);
	h.gpus_per_node = 3;
	ck_assert_int_eq(rlb_plan_writer_open(&w, path, &h, NULL, &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "plan header: gpus_per_node 3 must divide ranks 2");
	tiny_header(&h);
	memcpy(h.model, "m\xe2\x82", 4);
	ck_assert_int_eq(rlb_plan_writer_open(&w, path, &h, NULL, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "plan header: model name is not UTF-8");
	/* err is optional: the code alone, and no writer */
	w = (struct rlb_plan_writer *)&h;
	ck_assert_int_eq(rlb_plan_writer_open(&w, path, &h, NULL, NULL), RLB_EINVAL);
	ck_assert_ptr_null(w);
	tiny_header(&h);
	ck_assert_int_eq(rlb_plan_writer_open(&w, "", &h, NULL, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "an empty output path");

	/* steps must increase; the error is sticky and nothing is left */
	ck_assert_int_eq(rlb_plan_writer_open(&w, path, &h, NULL, &err), 0);
	ck_assert_int_eq(rlb_plan_writer_append(w, &p[1]), 0);
	ck_assert_int_eq(rlb_plan_writer_append(w, &p[0]), RLB_EINVAL);
	ck_assert_int_eq(rlb_plan_writer_append(w, &p[1]), RLB_EINVAL);
	ck_assert_int_eq(rlb_plan_writer_error(w, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "step 0 after step 1 (steps must increase)");
	ck_assert_int_eq(rlb_plan_writer_close(w, &err), RLB_EINVAL);
	ck_assert(!exists(path));
	ck_assert(!exists(tmp_path("werr.rlp.tmp")));

	/* a plan breaking an invariant */
	ck_assert_int_eq(rlb_plan_writer_open(&w, path, &h, NULL, &err), 0);
	p[0].inst[1].gpu = 0;
	ck_assert_int_eq(rlb_plan_writer_append(w, &p[0]), RLB_ECORRUPT);
	rlb_plan_writer_error(w, &err);
	ck_assert_str_eq(err.msg, "step 0: mb 0, layer 0, expert 0: two instances on gpu 0");
	rlb_plan_writer_abort(w);
	ck_assert(!exists(tmp_path("werr.rlp.tmp")));

	/* a plan of another shape */
	ck_assert_int_eq(rlb_plan_writer_open(&w, path, &h, NULL, &err), 0);
	ck_assert_int_eq(rlb_step_plan_init(&bad, 0, 1, 2, 4, 2, 2, 2,
					    RLB_SPLIT_LOCALITY, NULL), 0);
	ck_assert_int_eq(rlb_plan_writer_append(w, &bad), RLB_EINVAL);
	ck_assert_int_eq(rlb_plan_writer_close(w, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "step 0: plan of 2 layers, 4 experts, 2 ranks, 2 gpus per node, 2 replica slots, split 0 does not match the header (2, 4, 2, 2, 1, 0)");
	rlb_step_plan_release(&bad);
	rlb_step_plan_release(&p[0]);
	rlb_step_plan_release(&p[1]);
}
END_TEST

/* Open and read every step; 0 or the first error. */
static int read_all(const char *path, struct rlb_err *err,
		    struct rlb_step_plan *out, size_t nout, size_t *nread)
{
	struct rlb_plan_reader *r;
	struct rlb_step_plan q;
	int ret;

	*nread = 0;
	ret = rlb_plan_reader_open(&r, path, err);
	if (ret)
		return ret;
	memset(&q, 0, sizeof(q));
	while ((ret = rlb_plan_reader_next(r, &q, err)) == 1) {
		if (*nread < nout) {
			out[*nread] = q;
			memset(&q, 0, sizeof(q));
		}
		(*nread)++;
	}
	rlb_step_plan_release(&q);
	rlb_plan_reader_free(r);
	return ret;
}

static int err_has_offset(const struct rlb_err *err)
{
	return strstr(err->msg, "offset") != NULL;
}

START_TEST(test_file_truncation)
{
	struct rlb_plan_header h;
	struct rlb_step_plan p[2], got[2];
	struct rlb_err err;
	const char *path = tmp_path("trunc.rlp"), *cut = tmp_path("cut.rlp");
	uint8_t *b;
	size_t n, len, k, i;
	int ret;

	tiny_header(&h);
	tiny_steps(p);
	write_plans(path, &h, p, 2, NULL);
	b = slurp(path, &n);
	for (len = 0; len < n; len++) {
		spit(cut, b, len);
		ret = read_all(cut, &err, got, 2, &k);
		ck_assert_msg(ret < 0, "cut at %zu bytes was accepted", len);
		ck_assert_msg(err_has_offset(&err), "cut at %zu: %s", len, err.msg);
		for (i = 0; i < k && i < 2; i++)
			rlb_step_plan_release(&got[i]);
	}
	ret = read_all(path, &err, got, 2, &k);
	ck_assert_int_eq(ret, 0);
	ck_assert_uint_eq(k, 2);
	for (i = 0; i < 2; i++) {
		plans_equal(&got[i], &p[i]);
		rlb_step_plan_release(&got[i]);
		rlb_step_plan_release(&p[i]);
	}
	free(b);
	unlink(cut);
	unlink(path);
}
END_TEST

START_TEST(test_file_flipped_bytes)
{
	struct rlb_plan_header h;
	struct rlb_step_plan p[2], got[2];
	struct rlb_err err;
	const char *path = tmp_path("flip.rlp"), *bad = tmp_path("flipped.rlp");
	static const uint8_t masks[] = { 0x01, 0x80, 0xFF };
	uint8_t *b;
	size_t n, pos, k, i, m, same = 0;
	int ret;

	tiny_header(&h);
	tiny_steps(p);
	write_plans(path, &h, p, 2, NULL);
	b = slurp(path, &n);
	for (pos = 0; pos < n; pos++) {
		for (m = 0; m < sizeof(masks); m++) {
			b[pos] ^= masks[m];
			spit(bad, b, n);
			b[pos] ^= masks[m];
			ret = read_all(bad, &err, got, 2, &k);
			if (ret == 0) {
				/*
				 * Only a change inside a compressed block that
				 * decodes to the very same content (which the
				 * checksum covers) can pass.
				 */
				ck_assert_msg(pos >= 8 + 156 && k == 2,
					      "byte %zu ^ 0x%02x was accepted",
					      pos, masks[m]);
				plans_equal(&got[0], &p[0]);
				plans_equal(&got[1], &p[1]);
				same++;
			} else {
				ck_assert_msg(err_has_offset(&err), "byte %zu: %s",
					      pos, err.msg);
			}
			for (i = 0; i < k && i < 2; i++)
				rlb_step_plan_release(&got[i]);
		}
	}
	ck_assert_uint_lt(same, n / 20);	/* rare: equivalent zstd encodings */
	free(b);
	rlb_step_plan_release(&p[0]);
	rlb_step_plan_release(&p[1]);
	unlink(bad);
	unlink(path);
}
END_TEST

/* Attach a schedule of chunks c[0..n) (sequence lengths implied) to plan p. */
static void attach_schedule(struct rlb_step_plan *p, const struct rlb_chunk *c,
			    size_t n, size_t nseqs)
{
	uint32_t len[8] = {0};
	size_t i;

	for (i = 0; i < n; i++)
		len[c[i].seq] += c[i].tokens;
	p->sched = calloc(1, sizeof(*p->sched));
	ck_assert_ptr_nonnull(p->sched);
	ck_assert_int_eq(rlb_schedule_from_chunks(p->sched, p->step,
						  RLB_PACK_DATA_CONTROL, c, n,
						  len, nseqs, 2, 16, NULL), 0);
	p->sched->micro_batches = p->micro_batches;
}

/* Plans that carry their schedule (format 1.1): round trip, refusals, corruption. */
START_TEST(test_file_schedule)
{
	static const struct rlb_chunk c0[] = {
		{ 0, 0, 4, 0, 0 }, { 1, 0, 3, 0, 1 }, { 2, 0, 2, 1, 0 },
	};
	static const struct rlb_chunk c1[] = { { 0, 0, 3, 0, 0 }, { 0, 3, 2, 0, 1 } };
	struct rlb_plan_header h;
	struct rlb_step_plan p[2], got[2];
	struct rlb_plan_writer *w;
	struct rlb_err err;
	const char *path = tmp_path("sched.rlp"), *cut = tmp_path("sched-cut.rlp");
	uint8_t *b;
	size_t n, len, k, i, pos;
	int ret;

	tiny_header(&h);
	h.pack = RLB_PACK_DATA_CONTROL;
	tiny_steps(p);
	/* a plan packed data-control must carry its schedule */
	ck_assert_int_eq(rlb_plan_writer_open(&w, path, &h, NULL, &err), 0);
	ck_assert_int_eq(rlb_plan_writer_append(w, &p[0]), RLB_EINVAL);
	rlb_plan_writer_error(w, &err);
	ck_assert_str_eq(err.msg, "step 0: a plan packed 'data-control' must carry its schedule of 2 micro-batches on 2 ranks");
	rlb_plan_writer_abort(w);
	attach_schedule(&p[0], c0, 3, 3);
	/* a sequence without tokens (no chunk) is refused: Q <= C */
	attach_schedule(&p[1], c1, 2, 2);
	ck_assert_int_eq(rlb_plan_writer_open(&w, path, &h, NULL, &err), 0);
	ck_assert_int_eq(rlb_plan_writer_append(w, &p[1]), RLB_EINVAL);
	rlb_plan_writer_error(w, &err);
	ck_assert_str_eq(err.msg, "step 1: schedule: sequence 1 has no chunk (a trace's sequences have tokens)");
	rlb_plan_writer_abort(w);
	rlb_schedule_release(p[1].sched);
	free(p[1].sched);
	attach_schedule(&p[1], c1, 2, 1);
	write_plans(path, &h, p, 2, NULL);
	ck_assert_int_eq(read_all(path, &err, got, 2, &k), 0);
	ck_assert_uint_eq(k, 2);
	for (i = 0; i < 2; i++) {
		plans_equal(&got[i], &p[i]);
		ck_assert_ptr_nonnull(got[i].sched);
		ck_assert_int_eq(got[i].sched->pack, RLB_PACK_DATA_CONTROL);
		ck_assert_uint_eq(got[i].sched->micro_batches, p[i].micro_batches);
		ck_assert_uint_eq(got[i].sched->nseqs, p[i].sched->nseqs);
		ck_assert_uint_eq(got[i].sched->nchunks, p[i].sched->nchunks);
		ck_assert_mem_eq(got[i].sched->chunks, p[i].sched->chunks,
				 p[i].sched->nchunks * sizeof(struct rlb_chunk));
		rlb_step_plan_release(&got[i]);
	}
	{
		struct rlb_plan_reader *r;

		ck_assert_int_eq(rlb_plan_reader_open(&r, path, &err), 0);
		ck_assert_uint_eq(rlb_plan_reader_header(r)->version_minor, 1);
		ck_assert_int_eq(rlb_plan_reader_header(r)->pack, RLB_PACK_DATA_CONTROL);
		rlb_plan_reader_free(r);
	}
	b = slurp(path, &n);
	/* an index entry of more sequences than chunks, its CRC right: refused at open */
	{
		struct rlb_plan_reader *r;
		uint8_t *ix = b;
		char want[160];

		while (ix + 8 <= b + n && memcmp(ix, "RLBPINDX", 8) != 0)
			ix++;
		ck_assert(ix + 8 <= b + n);
		ck_assert_uint_eq(rlb_get_u32(ix + 12), 24);
		rlb_put_u32(ix + 16 + 24 + 20, 3);
		rlb_put_u32(ix + 16 + 2 * 24, rlb_rrt_crc32c(ix, 16 + 2 * 24));
		spit(cut, b, n);
		ck_assert_int_eq(rlb_plan_reader_open(&r, cut, &err), RLB_ECORRUPT);
		snprintf(want, sizeof(want),
			 "step index at offset %zu: entry 1 (step 1): 3 sequences in 2 chunks (each sequence has one at least)",
			 (size_t)(ix - b) + 16 + 24);
		ck_assert_str_eq(strstr(err.msg, "step index"), want);
		free(b);
		b = slurp(path, &n);
	}
	/* every cut and every flipped byte is refused with its offset (or decodes the same) */
	for (len = 0; len < n; len++) {
		spit(cut, b, len);
		ret = read_all(cut, &err, got, 2, &k);
		ck_assert_msg(ret < 0, "cut at %zu bytes was accepted", len);
		ck_assert_msg(err_has_offset(&err), "cut at %zu: %s", len, err.msg);
		for (i = 0; i < k && i < 2; i++)
			rlb_step_plan_release(&got[i]);
	}
	for (pos = 0; pos < n; pos++) {
		b[pos] ^= 0x01;
		spit(cut, b, n);
		b[pos] ^= 0x01;
		ret = read_all(cut, &err, got, 2, &k);
		if (ret == 0) {
			ck_assert_msg(pos >= 8 + 156 && k == 2, "byte %zu was accepted", pos);
			plans_equal(&got[0], &p[0]);
			plans_equal(&got[1], &p[1]);
		} else {
			ck_assert_msg(err_has_offset(&err), "byte %zu: %s", pos, err.msg);
		}
		for (i = 0; i < k && i < 2; i++)
			rlb_step_plan_release(&got[i]);
	}
	free(b);
	rlb_step_plan_release(&p[0]);
	rlb_step_plan_release(&p[1]);
	unlink(cut);
	unlink(path);
}
END_TEST

/* Rewrite a header field and its CRC in a file image. */
static void patch_header(uint8_t *b, size_t off, const void *v, size_t n)
{
	memcpy(b + 8 + off, v, n);
	rlb_put_u32(b + 8 + 152, rlb_rrt_crc32c(b + 8, 152));
}

START_TEST(test_file_versions)
{
	struct rlb_plan_header h;
	struct rlb_step_plan p[2];
	struct rlb_plan_reader *r;
	struct rlb_err err;
	const char *path = tmp_path("ver.rlp"), *bad = tmp_path("ver2.rlp");
	uint8_t *b, v[4];
	size_t n;

	tiny_header(&h);
	tiny_steps(p);
	write_plans(path, &h, p, 2, NULL);
	b = slurp(path, &n);

	rlb_put_u16(v, 2);
	patch_header(b, 8, v, 2);
	spit(bad, b, n);
	ck_assert_int_eq(rlb_plan_reader_open(&r, bad, &err), RLB_EVERSION);
	ck_assert_ptr_nonnull(strstr(err.msg, "header at offset 16: unsupported plan version 2.0 (this reader supports 1.x)"));
	rlb_put_u16(v, 1);
	patch_header(b, 8, v, 2);

	/* unknown required flag: refused; optional flag (bit 16): ignored */
	rlb_put_u32(v, 1u << 5);
	patch_header(b, 12, v, 4);
	spit(bad, b, n);
	ck_assert_int_eq(rlb_plan_reader_open(&r, bad, &err), RLB_EUNSUPPORTED);
	ck_assert_ptr_nonnull(strstr(err.msg, "header at offset 20: unknown flags 0x00000020"));
	rlb_put_u32(v, 1u << 16);
	patch_header(b, 12, v, 4);
	spit(bad, b, n);
	ck_assert_int_eq(rlb_plan_reader_open(&r, bad, &err), 0);
	rlb_plan_reader_free(r);

	/* a model name that is not UTF-8 */
	patch_header(b, 88, "\xff", 1);
	spit(bad, b, n);
	ck_assert_int_eq(rlb_plan_reader_open(&r, bad, &err), RLB_ECORRUPT);
	ck_assert_ptr_nonnull(strstr(err.msg, "header at offset 96: model name is not UTF-8"));

	/* a trace is not a plan */
	memcpy(b + 8, "RLBTRACE", 8);
	spit(bad, b, n);
	ck_assert_int_eq(rlb_plan_reader_open(&r, bad, &err), RLB_ECORRUPT);
	ck_assert_ptr_nonnull(strstr(err.msg, "header at offset 8: bad magic (a relibra trace, not a plan)"));
	memcpy(b + 8, "RLBTRACX", 8);
	spit(bad, b, n);
	ck_assert_int_eq(rlb_plan_reader_open(&r, bad, &err), RLB_ECORRUPT);
	ck_assert_ptr_nonnull(strstr(err.msg, "header at offset 8: bad magic (not a relibra plan)"));
	ck_assert_int_eq(rlb_plan_reader_open(&r, tmp_path("missing.rlp"), &err), RLB_EIO);
	free(b);
	rlb_step_plan_release(&p[0]);
	rlb_step_plan_release(&p[1]);
	unlink(bad);
	unlink(path);
}
END_TEST

/*
 * Copies (1.2): an EVEN plan records each instance's copies, and reads
 * back with them; a plan without the flag cannot record them; the flag
 * on a LOCALITY plan is corruption.
 */
START_TEST(test_file_copies)
{
	static const uint32_t q[4] = { 9, 4, 6, 1 };
	struct rlb_plan_header h;
	struct rlb_step_plan p, got, two[2];
	struct rlb_plan_writer *w;
	struct rlb_plan_reader *r;
	struct rlb_err err;
	const char *path = tmp_path("copies.rlp"), *bad = tmp_path("copies2.rlp");
	uint32_t l, e;
	uint8_t *b, v[4];
	size_t n;

	tiny_header(&h);
	h.policy = RLB_POLICY_EPLB_ORACLE;
	h.split = RLB_SPLIT_EVEN;
	h.copies = 1;
	/* 2 GPUs of 2 + 1 slots: expert 0 twice on GPU 0 in layer 0 */
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 1, 2, 4, 2, 2, 1,
					    RLB_SPLIT_EVEN, NULL), 0);
	for (l = 0; l < 2; l++)
		for (e = 0; e < 4; e++)
			ck_assert_int_eq(rlb_step_plan_add_copies(&p, 0, l, e, e / 2, q[e],
								  l == 0 && e == 0 ? 2 : 1,
								  NULL), 0);
	write_plans(path, &h, &p, 1, NULL);
	memset(&got, 0, sizeof(got));
	ck_assert_int_eq(rlb_plan_reader_open(&r, path, &err), 0);
	ck_assert_uint_eq(rlb_plan_reader_header(r)->version_minor, 2);
	ck_assert_int_eq(rlb_plan_reader_header(r)->copies, 1);
	ck_assert_msg(rlb_plan_reader_next(r, &got, &err) == 1, "%s", err.msg);
	plans_equal(&got, &p);
	ck_assert_uint_eq(rlb_step_plan_copies(&got, 0), 2);
	ck_assert_uint_eq(rlb_step_plan_copies(&got, 1), 1);
	rlb_step_plan_release(&got);
	rlb_plan_reader_free(r);
	/* without the flag the writer refuses the copies */
	h.copies = 0;
	ck_assert_int_eq(rlb_plan_writer_open(&w, bad, &h, NULL, &err), 0);
	ck_assert_int_eq(rlb_plan_writer_append(w, &p), RLB_EINVAL);
	rlb_plan_writer_error(w, &err);
	ck_assert_str_eq(err.msg, "step 0: instance 0 stands for 2 copies; a plan without the copies flag cannot record them");
	rlb_plan_writer_abort(w);
	rlb_step_plan_release(&p);
	/* the copies flag on a LOCALITY plan */
	tiny_header(&h);
	tiny_steps(two);
	write_plans(bad, &h, two, 2, NULL);
	b = slurp(bad, &n);
	rlb_put_u32(v, 1u << 4 | 1u << 1);
	patch_header(b, 12, v, 4);
	spit(bad, b, n);
	ck_assert_int_eq(rlb_plan_reader_open(&r, bad, &err), RLB_ECORRUPT);
	ck_assert_ptr_nonnull(strstr(err.msg, "the copies flag is set, the split rule is locality"));
	free(b);
	rlb_step_plan_release(&two[0]);
	rlb_step_plan_release(&two[1]);
	unlink(bad);
	unlink(path);
}
END_TEST

START_TEST(test_check_inputs)
{
	struct rlb_plan_header h;
	struct rlb_trace_header th;
	struct rlb_config cfg;
	struct rlb_err err;
	uint32_t steps[] = { 0, 1 }, other[] = { 0, 1, 2 };

	tiny_header(&h);
	tiny_trace_header(&th);
	rlb_config_defaults(&cfg);
	cfg.cluster.nodes = 1;
	cfg.cluster.gpus_per_node = 2;
	cfg.parallel.ep_size = 2;
	cfg.parallel.micro_batch_tokens = 16;
	cfg.parallel.pack = RLB_PACK_IN_ORDER;
	cfg.model.experts = 4;
	cfg.model.topk = 2;
	cfg.model.moe_layers = 2;
	ck_assert_int_eq(rlb_plan_check_inputs(&h, &th, steps, 2, &cfg, &err), 0);
	ck_assert_int_eq(rlb_plan_check_inputs(&h, &th, NULL, 0, NULL, &err), 0);

	th.experts = 8;
	ck_assert_int_eq(rlb_plan_check_inputs(&h, &th, steps, 2, &cfg, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "plan does not match the trace: 'experts' is 4 in the plan, 8 in the trace");
	tiny_trace_header(&th);
	th.seed = 8;
	ck_assert_int_eq(rlb_plan_check_inputs(&h, &th, steps, 2, &cfg, &err), RLB_EMISMATCH);
	ck_assert_ptr_nonnull(strstr(err.msg, "plan does not match the trace: 'header hash' is 0x"));
	tiny_trace_header(&th);
	th.version_minor = 3;	/* not part of the identity */
	ck_assert_int_eq(rlb_plan_check_inputs(&h, &th, steps, 2, &cfg, &err), 0);
	ck_assert_int_eq(rlb_plan_check_inputs(&h, &th, other, 3, &cfg, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "plan does not match the trace: 'last step' is 1 in the plan, 2 in the trace");
	ck_assert_int_eq(rlb_plan_check_inputs(&h, &th, other + 1, 2, &cfg, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "plan does not match the trace: 'first step' is 0 in the plan, 1 in the trace");

	cfg.parallel.ep_size = 0;	/* the whole cluster: 1 x 2 */
	ck_assert_int_eq(rlb_plan_check_inputs(&h, &th, steps, 2, &cfg, &err), 0);
	cfg.parallel.ep_size = 4;
	ck_assert_int_eq(rlb_plan_check_inputs(&h, &th, steps, 2, &cfg, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "plan does not match the config: 'parallel.ep_size' is 2 in the plan, 4 in the config");
	cfg.parallel.ep_size = 2;
	cfg.parallel.micro_batch_tokens = 32;
	ck_assert_int_eq(rlb_plan_check_inputs(&h, &th, steps, 2, &cfg, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "plan does not match the config: 'parallel.micro_batch_tokens' is 16 in the plan, 32 in the config");
	cfg.parallel.micro_batch_tokens = 16;
	cfg.parallel.pack = RLB_PACK_FFD;
	ck_assert_int_eq(rlb_plan_check_inputs(&h, &th, steps, 2, &cfg, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "plan does not match the config: 'parallel.pack' is in-order in the plan, ffd in the config");

	/* the hash is FNV-1a 64 over the documented bytes */
	tiny_trace_header(&th);
	ck_assert_uint_eq(rlb_plan_trace_hash(&th), h.trace_hash);
	{
		uint8_t b[124];
		uint64_t x = 0xcbf29ce484222325ULL;
		size_t i;

		memset(b, 0, sizeof(b));
		b[4] = 4;		/* experts */
		b[8] = 2;		/* topk */
		b[12] = 2;		/* moe_layers */
		b[20] = 7;		/* seed */
		memcpy(b + 28, "tiny", 4);
		memcpy(b + 92, "synthetic", 9);
		for (i = 0; i < sizeof(b); i++)
			x = (x ^ b[i]) * 0x100000001b3ULL;
		ck_assert_uint_eq(h.trace_hash, x);
		th.flags = 1u << 20;	/* optional bits are not identity */
		ck_assert_uint_eq(rlb_plan_trace_hash(&th), x);
		th.flags = RLB_TRACE_F_GATES;
		ck_assert_uint_ne(rlb_plan_trace_hash(&th), x);
		/* interleaved layers: 4 more bytes, u16 period and offset */
		th.flags = 0;
		th.moe_layer_period = 3;
		th.moe_layer_offset = 2;
		for (i = 0; i < 4; i++)
			x = (x ^ (uint8_t)(i == 0 ? 3 : i == 2 ? 2 : 0)) * 0x100000001b3ULL;
		ck_assert_uint_eq(rlb_plan_trace_hash(&th), x);
	}
}
END_TEST

/*
 * The tiny example of trace_format/examples/ (tiny-plan.rlp and its text
 * dump tiny-plan.dump): regenerated here and compared with the shipped
 * files.  RLB_PLAN_EXAMPLE_OUT=PATH writes the plan to PATH and its dump
 * to PATH with .rlp replaced by .dump instead (tiny-plan.sh uses it).
 */
START_TEST(test_example_file)
{
	const char *out = getenv("RLB_PLAN_EXAMPLE_OUT");
	struct rlb_step_plan p[2], got[2];
	struct rlb_plan_header h;
	struct rlb_plan_reader *r;
	struct rlb_err err;
	char shipped[1024], dump[1024], *text = NULL;
	const char *mine = tmp_path("tiny-plan.rlp");
	uint8_t *a, *b;
	size_t k, i, na, nb, ntext = 0;
	FILE *fp;

	tiny_header(&h);
	tiny_steps(p);
	if (out && *out) {
		snprintf(shipped, sizeof(shipped), "%s", out);
		snprintf(dump, sizeof(dump), "%.*s.dump",
			 (int)(strlen(out) > 4 ? strlen(out) - 4 : strlen(out)), out);
		write_plans(shipped, &h, p, 2, NULL);
	} else {
		snprintf(shipped, sizeof(shipped),
			 "%s/../trace_format/examples/tiny-plan.rlp",
			 rlb_test_srcdir());
		snprintf(dump, sizeof(dump),
			 "%s/../trace_format/examples/tiny-plan.dump",
			 rlb_test_srcdir());
	}
	/* the shipped file decodes to the tiny plans ... */
	ck_assert_msg(read_all(shipped, &err, got, 2, &k) == 0, "%s", err.msg);
	ck_assert_uint_eq(k, 2);
	ck_assert_int_eq(rlb_plan_reader_open(&r, shipped, &err), 0);
	ck_assert_uint_eq(rlb_plan_reader_header(r)->trace_hash, h.trace_hash);
	fp = open_memstream(&text, &ntext);
	ck_assert_ptr_nonnull(fp);
	ck_assert_int_eq(rlb_plan_write_text(fp, rlb_plan_reader_header(r), NULL, NULL), 0);
	for (i = 0; i < 2; i++) {
		plans_equal(&got[i], &p[i]);
		ck_assert_int_eq(rlb_plan_write_text(fp, NULL, &got[i], NULL), 0);
		rlb_step_plan_release(&got[i]);
	}
	fclose(fp);
	rlb_plan_reader_free(r);
	if (out && *out) {
		spit(dump, (const uint8_t *)text, ntext);
	} else {
		/* ... its dump is the shipped one ... */
		a = slurp(dump, &na);
		ck_assert_uint_eq(na, ntext);
		ck_assert(memcmp(a, text, na) == 0);
		free(a);
		/* ... and, with the same zstd, it is what the writer makes */
		write_plans(mine, &h, p, 2, NULL);
		a = slurp(mine, &na);
		b = slurp(shipped, &nb);
		if (ZSTD_versionNumber() == 10504) {
			ck_assert_uint_eq(na, nb);
			ck_assert(memcmp(a, b, na) == 0);
		}
		free(a);
		free(b);
		unlink(mine);
	}
	free(text);
	rlb_step_plan_release(&p[0]);
	rlb_step_plan_release(&p[1]);
}
END_TEST

/* ------------------------------------------------------------------ */
/* JSON dump                                                            */

/* The dump of p (rlb_step_plan_json with its cells) holds exactly p. */
static void json_matches(const struct rlb_step_plan *p)
{
	json_t *j = rlb_step_plan_json(p, 1), *homes, *mbs, *row, *in;
	uint32_t mb, l, e, k, n;

	ck_assert_ptr_nonnull(j);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "step")), p->step);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "micro_batches")),
			 p->micro_batches);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "replicas")),
			 p->ninst - (size_t)p->micro_batches * p->layers * p->experts);
	homes = json_object_get(j, "homes");
	ck_assert_uint_eq(json_array_size(homes), p->layers);
	for (l = 0; l < p->layers; l++) {
		row = json_array_get(homes, l);
		ck_assert_uint_eq(json_array_size(row), p->experts);
		for (e = 0; e < p->experts; e++)
			ck_assert_int_eq(json_integer_value(json_array_get(row, e)),
					 p->home[l * p->experts + e]);
	}
	mbs = json_object_get(j, "instances");
	ck_assert_uint_eq(json_array_size(mbs), p->micro_batches);
	for (mb = 0; mb < p->micro_batches; mb++) {
		ck_assert_uint_eq(json_array_size(json_array_get(mbs, mb)), p->layers);
		for (l = 0; l < p->layers; l++) {
			row = json_array_get(json_array_get(mbs, mb), l);
			ck_assert_uint_eq(json_array_size(row), p->experts);
			for (e = 0; e < p->experts; e++) {
				const struct rlb_plan_instance *x = rlb_step_plan_cell(p, mb, l, e, &n);

				ck_assert_uint_eq(json_array_size(json_array_get(row, e)), n);
				for (k = 0; k < n; k++) {
					in = json_array_get(json_array_get(row, e), k);
					ck_assert_uint_eq(json_array_size(in), 3);
					ck_assert_int_eq(json_integer_value(json_array_get(in, 0)), x[k].gpu);
					ck_assert_int_eq(json_integer_value(json_array_get(in, 1)), x[k].quota);
					ck_assert_int_eq(json_integer_value(json_array_get(in, 2)),
							 rlb_step_plan_copies(p, (size_t)(x - p->inst) + k));
				}
			}
		}
	}
	if (p->sched) {
		json_t *want = rlb_schedule_step_json(p->sched);

		ck_assert(json_equal(json_object_get(j, "schedule"), want));
		json_decref(want);
	} else {
		ck_assert_ptr_null(json_object_get(j, "schedule"));
	}
	json_decref(j);
	/* without the cells: the step line alone */
	j = rlb_step_plan_json(p, 0);
	ck_assert_uint_eq(json_object_size(j), 5);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "planner_ns")), p->planner_ns);
	json_decref(j);
}

START_TEST(test_json_dump)
{
	static const struct rlb_chunk c0[] = {
		{ 0, 0, 4, 0, 0 }, { 1, 0, 3, 0, 1 }, { 2, 0, 2, 1, 0 },
	};
	struct rlb_plan_header h;
	struct rlb_step_plan p[2], c;
	json_t *j;
	char hash[17];
	uint32_t l, e;

	tiny_header(&h);
	j = rlb_plan_header_json(&h);
	ck_assert_ptr_nonnull(j);
	snprintf(hash, sizeof(hash), "%u.%u", h.version_major, h.version_minor);
	ck_assert_str_eq(json_string_value(json_object_get(j, "version")), hash);
	ck_assert_str_eq(json_string_value(json_object_get(j, "policy")), "replicate");
	ck_assert_str_eq(json_string_value(json_object_get(j, "pack")), "in-order");
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "options"),
							    "micro_batch_tokens")), 16);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "shape"),
							    "experts")), 4);
	snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)h.trace_hash);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "trace"),
							   "hash")), hash);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "trace"),
							    "steps")), 2);
	json_decref(j);

	tiny_steps(p);
	json_matches(&p[1]);
	attach_schedule(&p[0], c0, 3, 3);
	json_matches(&p[0]);
	/* an instance standing for 2 copies (EVEN split) */
	ck_assert_int_eq(rlb_step_plan_init(&c, 0, 1, 2, 4, 2, 2, 1,
					    RLB_SPLIT_EVEN, NULL), 0);
	for (l = 0; l < 2; l++)
		for (e = 0; e < 4; e++)
			ck_assert_int_eq(rlb_step_plan_add_copies(&c, 0, l, e, e / 2, 3,
								  l == 0 && e == 0 ? 2 : 1,
								  NULL), 0);
	json_matches(&c);
	rlb_step_plan_release(&c);
	rlb_step_plan_release(&p[0]);
	rlb_step_plan_release(&p[1]);
}
END_TEST

/* ------------------------------------------------------------------ */
/* EPLB export                                                          */

START_TEST(test_eplb_export_known)
{
	struct rlb_step_plan p[2];
	struct rlb_plan_eplb_opts o = { RLB_PLAN_EPLB_STEP, 0 };
	struct rlb_err err;
	json_t *j;
	char *s;

	tiny_steps(p);
	/*
	 * Step 0, step-level: mb 0's replica of expert 0 on GPU 1 is not in
	 * mb 1, so homes only: GPU 0 = [0, 1, filler 0], GPU 1 = [2, 3,
	 * filler 2].
	 */
	j = rlb_plan_eplb_export_json(&p[0], &o, &err);
	ck_assert_ptr_nonnull(j);
	s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	ck_assert_str_eq(s, "{\"step\":0,\"micro_batch\":null,\"num_gpus\":2,\"slots_per_gpu\":3,\"log2phy_order\":\"replica\","
			 "\"phy2log\":[[0,1,0,2,3,2],[0,1,0,2,3,2]],"
			 "\"log2phy\":[[[0,2],[1,-1],[3,5],[4,-1]],[[0,2],[1,-1],[3,5],[4,-1]]],"
			 "\"logcnt\":[[2,1,2,1],[2,1,2,1]]}");
	free(s);
	json_decref(j);
	/* micro-batch 0: layer 0 has expert 0's replica on GPU 1 */
	o.micro_batch = 0;
	j = rlb_plan_eplb_export_json(&p[0], &o, &err);
	s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	ck_assert_str_eq(s, "{\"step\":0,\"micro_batch\":0,\"num_gpus\":2,\"slots_per_gpu\":3,\"log2phy_order\":\"replica\","
			 "\"phy2log\":[[0,1,0,2,3,0],[0,1,0,2,3,2]],"
			 "\"log2phy\":[[[0,5,2],[1,-1,-1],[3,-1,-1],[4,-1,-1]],[[0,2,-1],[1,-1,-1],[3,5,-1],[4,-1,-1]]],"
			 "\"logcnt\":[[3,1,1,1],[2,1,2,1]]}");
	free(s);
	json_decref(j);
	/*
	 * Step 1, layer 1 reordered (GPU 0 homes 0, 2; GPU 1 homes 1, 3)
	 * with expert 3's replica on GPU 0 in its only micro-batch; slot
	 * order for vLLM.  Expert 3: home slot 4, replica slot 2, so
	 * replica order [4, 2] and slot order [2, 4].
	 */
	o.micro_batch = RLB_PLAN_EPLB_STEP;
	o.slot_order = 1;
	j = rlb_plan_eplb_export_json(&p[1], &o, &err);
	s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	ck_assert_str_eq(s, "{\"step\":1,\"micro_batch\":null,\"num_gpus\":2,\"slots_per_gpu\":3,\"log2phy_order\":\"slot\","
			 "\"phy2log\":[[0,1,0,2,3,2],[0,2,3,1,3,1]],"
			 "\"log2phy\":[[[0,2],[1,-1],[3,5],[4,-1]],[[0,-1],[3,5],[1,-1],[2,4]]],"
			 "\"logcnt\":[[2,1,2,1],[1,2,1,2]]}");
	free(s);
	json_decref(j);
	o.slot_order = 0;
	j = rlb_plan_eplb_export_json(&p[1], &o, &err);
	s = json_dumps(json_object_get(j, "log2phy"), JSON_COMPACT);
	ck_assert_str_eq(s, "[[[0,2],[1,-1],[3,5],[4,-1]],[[0,-1],[3,5],[1,-1],[4,2]]]");
	free(s);
	json_decref(j);

	o.micro_batch = 2;
	ck_assert_ptr_null(rlb_plan_eplb_export_json(&p[0], &o, &err));
	ck_assert_str_eq(err.msg, "micro-batch 2 is out of range (the step has 2)");
	rlb_step_plan_release(&p[0]);
	rlb_step_plan_release(&p[1]);

	/* a released plan (zeroed) is refused, not divided by its 0 ranks */
	{
		struct rlb_eplb_result res;

		ck_assert_int_eq(rlb_plan_eplb_export(&p[0], NULL, &res, NULL), RLB_EINVAL);
		ck_assert_ptr_null(res.phy2log);
		rlb_eplb_result_release(&res);
	}
	ck_assert_ptr_null(rlb_plan_eplb_export_json(&p[0], NULL, &err));
	ck_assert_int_eq(err.code, RLB_EINVAL);
	ck_assert_str_eq(err.msg, "bad shape: 0 experts, 0 ranks, 0 gpus per node, 0 layers");
}
END_TEST

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

/*
 * An EPLB layout turned into a plan (replica 0 as the home, the other
 * copies as replicas in every micro-batch) exports back to the same
 * per-GPU expert sets and the same logcnt.
 */
START_TEST(test_eplb_export_round_trip)
{
	struct rlb_eplb_params ep = { 24, 1, 1, 4 };
	struct rlb_eplb_result res, out;
	struct rlb_step_plan p;
	struct rlb_plan_eplb_opts o = { RLB_PLAN_EPLB_STEP, 0 };
	double w[3 * 16];
	uint64_t st = 5;
	uint32_t l, e, g, mb, k;
	int tries = 0, usable = 0;

	while (!usable) {
		ck_assert_int_lt(tries++, 100);
		for (k = 0; k < 3 * 16; k++)
			w[k] = 100 + rnd(&st) % 100;
		ck_assert_int_eq(rlb_eplb_rebalance(w, 3, 16, &ep, &res, NULL), 0);
		/* a plan cannot hold two copies of an expert on one GPU */
		usable = 1;
		for (l = 0; l < 3 && usable; l++)
			for (g = 0; g < 4 && usable; g++) {
				int32_t v[6];

				memcpy(v, res.phy2log + l * 24 + g * 6, sizeof(v));
				qsort(v, 6, sizeof(v[0]), cmp_i32);
				for (k = 1; k < 6; k++)
					if (v[k] == v[k - 1])
						usable = 0;
			}
		if (!usable)
			rlb_eplb_result_release(&res);
	}
	ck_assert_int_eq(rlb_step_plan_init(&p, 0, 2, 3, 16, 4, 4, 2,
					    RLB_SPLIT_EVEN, NULL), 0);
	for (l = 0; l < 3; l++)
		for (e = 0; e < 16; e++)
			p.home[l * 16 + e] = (uint32_t)res.log2phy[(l * 16 + e) * res.max_count] / 6;
	for (mb = 0; mb < 2; mb++)
		for (l = 0; l < 3; l++)
			for (e = 0; e < 16; e++) {
				uint32_t gpus[8], n = 0, i, j;

				for (k = 1; k < (uint32_t)res.logcnt[l * 16 + e]; k++)
					gpus[n++] = (uint32_t)res.log2phy[(l * 16 + e) * res.max_count + k] / 6;
				for (i = 1; i < n; i++)
					for (j = i; j > 0 && gpus[j] < gpus[j - 1]; j--) {
						uint32_t t = gpus[j];

						gpus[j] = gpus[j - 1];
						gpus[j - 1] = t;
					}
				ck_assert_int_eq(rlb_step_plan_add(&p, mb, l, e, p.home[l * 16 + e], 0, NULL), 0);
				for (i = 0; i < n; i++)
					ck_assert_int_eq(rlb_step_plan_add(&p, mb, l, e, gpus[i], 0, NULL), 0);
			}
	ck_assert_int_eq(rlb_step_plan_check(&p, NULL, NULL), 0);
	ck_assert_int_eq(rlb_plan_eplb_export(&p, &o, &out, NULL), 0);
	ck_assert_uint_eq(out.num_slots, 24);
	ck_assert_uint_eq(out.slots_per_gpu, 6);
	ck_assert_uint_eq(out.max_count, res.max_count);
	ck_assert_mem_eq(out.logcnt, res.logcnt, 3 * 16 * sizeof(int32_t));
	for (l = 0; l < 3; l++)
		for (g = 0; g < 4; g++) {
			int32_t a[6], b[6];

			memcpy(a, res.phy2log + l * 24 + g * 6, sizeof(a));
			memcpy(b, out.phy2log + l * 24 + g * 6, sizeof(b));
			qsort(a, 6, sizeof(a[0]), cmp_i32);
			qsort(b, 6, sizeof(b[0]), cmp_i32);
			ck_assert_mem_eq(a, b, sizeof(a));
		}
	/* log2phy agrees with phy2log in both orders */
	for (k = 0; k < 2; k++) {
		struct rlb_eplb_result x;

		o.slot_order = (int)k;
		ck_assert_int_eq(rlb_plan_eplb_export(&p, &o, &x, NULL), 0);
		for (l = 0; l < 3; l++)
			for (e = 0; e < 16; e++) {
				const int32_t *row = x.log2phy + (l * 16 + e) * x.max_count;
				uint32_t i;

				for (i = 0; i < x.max_count; i++) {
					if (i >= (uint32_t)x.logcnt[l * 16 + e]) {
						ck_assert_int_eq(row[i], -1);
						continue;
					}
					ck_assert_int_eq(x.phy2log[l * 24 + row[i]], (int32_t)e);
					if (k == 1 && i > 0)
						ck_assert_int_gt(row[i], row[i - 1]);
					if (k == 0)
						ck_assert_int_eq(x.phyrank[l * 24 + row[i]], (int32_t)i);
				}
			}
		rlb_eplb_result_release(&x);
	}
	rlb_eplb_result_release(&out);
	rlb_eplb_result_release(&res);
	rlb_step_plan_release(&p);
}
END_TEST

Suite *rlb_suite_plan(void)
{
	Suite *s = suite_create("plan");
	TCase *tc = tcase_create("plan");
	TCase *ex = tcase_create("example");

	tcase_set_timeout(tc, 120);
	tcase_add_test(ex, test_example_file);
	suite_add_tcase(s, ex);
	tcase_add_test(tc, test_policy_names);
	tcase_add_test(tc, test_init_static_homes);
	tcase_add_test(tc, test_add_cells_and_growth);
	tcase_add_test(tc, test_check_valid_plan);
	tcase_add_test(tc, test_check_violations);
	tcase_add_test(tc, test_split_locality_hand);
	tcase_add_test(tc, test_route_hand);
	tcase_add_test(tc, test_route_matches_split);
	tcase_add_test(tc, test_split_even_hand);
	tcase_add_test(tc, test_split_even_copies);
	tcase_add_test(tc, test_split_matches_replicate);
	tcase_add_test(tc, test_writer_finish);
	tcase_add_test(tc, test_file_round_trip);
	tcase_add_test(tc, test_file_wide_ids);
	tcase_add_test(tc, test_file_determinism);
	tcase_add_test(tc, test_writer_errors);
	tcase_add_test(tc, test_file_truncation);
	tcase_add_test(tc, test_file_flipped_bytes);
	tcase_add_test(tc, test_file_schedule);
	tcase_add_test(tc, test_file_versions);
	tcase_add_test(tc, test_file_copies);
	tcase_add_test(tc, test_check_inputs);
	tcase_add_test(tc, test_json_dump);
	tcase_add_test(tc, test_eplb_export_known);
	tcase_add_test(tc, test_eplb_export_round_trip);
	suite_add_tcase(s, tc);
	return s;
}
