/*
 * test_synth.c - unit tests of lib/synth (the synthetic RL workload) and
 * lib/stats (load statistics): hand-computed statistics, generator
 * determinism and structure, the uniform control, expert groups, and a
 * reduced-scale check of the calibration targets.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "relibra.h"
#include "suites.h"

#define EPS 1e-12

/* Under valgrind the calibration runs at a token scale (set by LD_PRELOAD or run.sh). */
static int under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD"), *v = getenv("RLB_VALGRIND");

	return (p && strstr(p, "vgpreload")) || (v && strcmp(v, "1") == 0);
}

START_TEST(test_dist)
{
	double v[] = { 3, 1, 2, 4 }, one[] = { 5 };
	struct rlb_dist d;

	rlb_dist_compute(&d, v, 4);
	ck_assert_uint_eq(d.n, 4);
	ck_assert_double_eq_tol(d.mean, 2.5, EPS);
	ck_assert_double_eq_tol(d.p50, 2.5, EPS);
	ck_assert_double_eq_tol(d.p90, 3.7, EPS);
	ck_assert_double_eq_tol(d.p99, 3.97, EPS);
	ck_assert_double_eq_tol(d.max, 4, EPS);
	ck_assert_double_eq(v[0], 1);		/* sorted in place */
	rlb_dist_compute(&d, one, 1);
	ck_assert_double_eq(d.p50, 5);
	ck_assert_double_eq(d.p99, 5);
	rlb_dist_compute(&d, NULL, 0);
	ck_assert_uint_eq(d.n, 0);
	ck_assert_double_eq(d.max, 0);
}
END_TEST

/* Feed one step of top-1 routing given per sequence as expert lists. */
static void feed_step(struct rlb_stats_acc *a, uint32_t step, const uint32_t *len,
		      const uint32_t *groups, size_t n, const uint16_t *const *ids)
{
	struct rlb_err err = {0};
	size_t i;

	ck_assert_msg(rlb_stats_acc_begin_step(a, step, len, groups, n, &err) == 0, "%s", err.msg);
	for (i = 0; i < n; i++) {
		struct rlb_seq q = { step, groups[i], 0, len[i], ids[i], NULL };

		rlb_stats_acc_add_seq(a, (uint32_t)i, &q);
	}
	ck_assert_msg(rlb_stats_acc_end_step(a, &err) == 0, "%s", err.msg);
}

/*
 * The busiest rank's tokens over the mean: step 0, sequences of 4 and 1
 * tokens on 2 ranks with budget 4 -> one micro-batch, ranks 4 and 1: 1.6;
 * step 1, one sequence of 3 -> ranks 3 and 0: 2.0.
 */
START_TEST(test_stats_rank_tokens)
{
	static const uint16_t a4[] = { 0, 1, 2, 3 }, a1[] = { 2 }, a3[] = { 1, 1, 3 };
	const uint16_t *step0[] = { a4, a1 }, *step1[] = { a3 };
	const uint32_t len0[] = { 4, 1 }, grp0[] = { 0, 1 }, len1[] = { 3 }, grp1[] = { 0 };
	struct rlb_stats_params p = { 1, 4, 1, 2, 1, 4, RLB_PACK_IN_ORDER };
	struct rlb_stats_acc *a = NULL;
	struct rlb_trace_stats st;
	struct rlb_err err = {0};

	ck_assert_int_eq(rlb_stats_acc_new(&a, &p, &err), 0);
	feed_step(a, 0, len0, grp0, 2, step0);
	feed_step(a, 1, len1, grp1, 1, step1);
	ck_assert_int_eq(rlb_stats_acc_finish(a, &st, &err), 0);
	ck_assert_uint_eq(st.micro_batches, 2);
	ck_assert_uint_eq(st.rank_tokens_mb.n, 2);
	ck_assert_double_eq_tol(st.rank_tokens_mb.mean, 1.8, EPS);
	ck_assert_double_eq_tol(st.rank_tokens_mb.max, 2.0, EPS);
	rlb_trace_stats_release(&st);
	rlb_stats_acc_free(a);
}
END_TEST

/*
 * 1 layer, 4 experts, top-1, 2 ranks (experts 0-1 on rank 0, 2-3 on rank
 * 1), one rank per node, budget 4.
 * Step 0: four 4-token sequences (groups 0 0 1 2) -> two micro-batches.
 *   mb 0: experts 0:6 1:1 2:1 3:0 -> ranks 7 1 -> GPU 7/4 = 1.75, hottest 0
 *   mb 1: experts 0:1 1:1 2:1 3:5 -> ranks 2 6 -> 1.5, hottest 3 (churn)
 *   step: 7 2 2 5 -> ranks 9 7 -> 1.125, hottest 0
 * Step 1: two sequences of group 0 -> one micro-batch:
 *   experts 2:3 3:5 -> ranks 0 8 -> 2.0; step 2.0, hottest 3 (churn)
 */
START_TEST(test_stats_hand)
{
	static const uint16_t s0[] = { 0, 0, 0, 1 }, s1[] = { 2, 0, 0, 0 },
		s2[] = { 3, 3, 2, 1 }, s3[] = { 3, 3, 3, 0 },
		t0[] = { 3, 3, 3, 3 }, t1[] = { 3, 2, 2, 2 };
	const uint16_t *step0[] = { s0, s1, s2, s3 }, *step1[] = { t0, t1 };
	const uint32_t len0[] = { 4, 4, 4, 4 }, grp0[] = { 0, 0, 1, 2 };
	const uint32_t len1[] = { 4, 4 }, grp1[] = { 0, 0 };
	struct rlb_stats_params p = { 1, 4, 1, 2, 1, 4, RLB_PACK_IN_ORDER };
	struct rlb_stats_acc *a = NULL;
	struct rlb_trace_stats st;
	struct rlb_err err = {0};

	ck_assert_int_eq(rlb_stats_acc_new(&a, &p, &err), 0);
	feed_step(a, 0, len0, grp0, 4, step0);
	feed_step(a, 1, len1, grp1, 2, step1);
	ck_assert_int_eq(rlb_stats_acc_finish(a, &st, &err), 0);
	ck_assert_uint_eq(st.steps, 2);
	ck_assert_uint_eq(st.micro_batches, 3);
	ck_assert_uint_eq(st.tokens, 24);
	ck_assert_uint_eq(st.ranks, 2);
	ck_assert_uint_eq(st.nodes, 2);
	ck_assert_uint_eq(st.layers, 1);
	ck_assert_uint_eq(st.mb_gpu.n, 3);
	ck_assert_double_eq_tol(st.mb_gpu.mean, 1.75, EPS);
	ck_assert_double_eq_tol(st.mb_gpu.p50, 1.75, EPS);
	ck_assert_double_eq_tol(st.mb_gpu.p90, 1.95, EPS);
	ck_assert_double_eq_tol(st.mb_gpu.max, 2.0, EPS);
	ck_assert_double_eq_tol(st.mb_node.p50, 1.75, EPS);	/* one rank per node */
	ck_assert_uint_eq(st.step_gpu.n, 2);
	ck_assert_double_eq_tol(st.step_gpu.p50, (1.125 + 2.0) / 2, EPS);
	ck_assert_double_eq_tol(st.step_gpu.max, 2.0, EPS);
	ck_assert_double_eq_tol(st.hot_churn_mb, 1.0, EPS);
	ck_assert_uint_eq(st.mb_pairs, 1);
	ck_assert_double_eq_tol(st.hot_churn_step, 1.0, EPS);
	ck_assert_uint_eq(st.step_pairs, 1);
	ck_assert_uint_eq(st.prompts_per_mb.n, 3);
	ck_assert_double_eq_tol(st.prompts_per_mb.mean, 4.0 / 3, EPS);
	ck_assert_double_eq_tol(st.prompts_per_mb.max, 2, EPS);
	/* every rank holds 4 tokens in every micro-batch */
	ck_assert_uint_eq(st.rank_tokens_mb.n, 3);
	ck_assert_double_eq_tol(st.rank_tokens_mb.max, 1.0, EPS);
	ck_assert_double_eq_tol(st.layer[0].mb_gpu.max, 2.0, EPS);
	ck_assert_double_eq_tol(st.layer[0].step_gpu.p50, 1.5625, EPS);
	ck_assert_double_eq_tol(st.layer[0].hot_churn_mb, 1.0, EPS);
	rlb_trace_stats_release(&st);
	ck_assert_ptr_null(st.layer);
	rlb_stats_acc_free(a);

	/* the same routing on one node of two ranks: nodes balanced by definition */
	p.gpus_per_node = 8;
	ck_assert_int_eq(rlb_stats_acc_new(&a, &p, &err), 0);
	feed_step(a, 0, len0, grp0, 4, step0);
	ck_assert_int_eq(rlb_stats_acc_finish(a, &st, &err), 0);
	ck_assert_uint_eq(st.nodes, 1);
	ck_assert_double_eq_tol(st.mb_node.max, 1.0, EPS);
	ck_assert_double_eq_tol(st.hot_churn_step, 0.0, EPS);	/* one step: no pair */
	ck_assert_uint_eq(st.step_pairs, 0);
	rlb_trace_stats_release(&st);
	rlb_stats_acc_free(a);
}
END_TEST

/*
 * GPU imbalance without node imbalance: 8 experts on 4 ranks, 2 ranks per
 * node.  Counts 4 0 2 2 1 1 0 6 -> ranks 4 4 2 6 (GPU 6/4 = 1.5), nodes
 * 8 8 (1.0).  A tie for the hottest expert goes to the lowest id.
 */
START_TEST(test_stats_nodes)
{
	static const uint16_t ids[] = { 0, 0, 0, 0, 2, 2, 3, 3, 4, 5, 7, 7, 7, 7, 7, 7 };
	static const uint16_t tie1[] = { 5, 5, 1, 1 }, tie2[] = { 1, 1, 5, 5 };
	const uint16_t *seqs[] = { ids }, *t1[] = { tie1 }, *t2[] = { tie2 };
	const uint32_t len[] = { 16 }, grp[] = { 0 }, len4[] = { 4 };
	struct rlb_stats_params p = { 1, 8, 1, 4, 2, 16, RLB_PACK_FFD };
	struct rlb_stats_acc *a = NULL;
	struct rlb_trace_stats st;
	struct rlb_err err = {0};

	ck_assert_int_eq(rlb_stats_acc_new(&a, &p, &err), 0);
	feed_step(a, 0, len, grp, 1, seqs);
	feed_step(a, 1, len4, grp, 1, t1);
	feed_step(a, 2, len4, grp, 1, t2);
	ck_assert_int_eq(rlb_stats_acc_finish(a, &st, &err), 0);
	ck_assert_uint_eq(st.nodes, 2);
	ck_assert_double_eq_tol(st.mb_gpu.max, 2.0, EPS);	/* steps 1 and 2: ranks 2 0 2 0 */
	ck_assert_double_eq_tol(st.mb_gpu.p50, 2.0, EPS);
	ck_assert_double_eq_tol(st.mb_gpu.mean, (1.5 + 2.0 + 2.0) / 3, EPS);
	ck_assert_double_eq_tol(st.mb_node.mean, 1.0, EPS);
	/* hottest: 7, then 1 (tie 1/5), then 1 again: one change in two pairs */
	ck_assert_double_eq_tol(st.hot_churn_step, 0.5, EPS);
	rlb_trace_stats_release(&st);
	rlb_stats_acc_free(a);
}
END_TEST

START_TEST(test_stats_errors)
{
	struct rlb_stats_params p = { 1, 6, 1, 4, 1, 16, RLB_PACK_IN_ORDER };
	struct rlb_stats_acc *a = NULL;
	struct rlb_err err = {0};
	const uint32_t len[] = { 4 }, grp[] = { 0 };

	ck_assert_int_eq(rlb_stats_acc_new(&a, &p, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "stats: 6 experts cannot be spread evenly over 4 EP ranks");
	ck_assert_ptr_null(a);
	p.experts = 8;
	p.gpus_per_node = 3;
	ck_assert_int_eq(rlb_stats_acc_new(&a, &p, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "stats: EP size 4 is not a multiple of 3 GPUs per node");
	p.gpus_per_node = 2;
	ck_assert_int_eq(rlb_stats_acc_new(&a, &p, &err), 0);
	ck_assert_int_eq(rlb_stats_acc_end_step(a, &err), RLB_EINVAL);
	ck_assert_int_eq(rlb_stats_acc_begin_step(a, 0, len, grp, 1, &err), 0);
	ck_assert_int_eq(rlb_stats_acc_begin_step(a, 1, len, grp, 1, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "stats: step 1 begun before step 0 ended");
	rlb_stats_acc_free(a);
	rlb_stats_acc_free(NULL);
}
END_TEST

/* ---- generator ---------------------------------------------------- */

static void tiny_config(struct rlb_config *cfg)
{
	rlb_config_defaults(cfg);
	strcpy(cfg->model.name, "tiny");
	cfg->model.experts = 16;
	cfg->model.topk = 4;
	cfg->model.moe_layers = 4;
	cfg->cluster.nodes = 2;
	cfg->cluster.gpus_per_node = 2;
	cfg->parallel.ep_size = 4;
	cfg->parallel.micro_batch_tokens = 512;
	cfg->workload.steps = 3;
	cfg->workload.first_step = 10;
	cfg->workload.prompts_per_step = 3;
	cfg->workload.samples_per_prompt = 5;
	cfg->workload.len_median = 200;
	cfg->workload.len_sigma = 1.0;
	cfg->workload.len_min = 50;
	cfg->workload.len_max = 400;
	cfg->workload.segment_min = 4;
	cfg->workload.segment_max = 32;
}

/* Checks every sequence's structure and hashes the whole output. */
struct check {
	const struct rlb_config *cfg;
	uint64_t hash;
	uint64_t len_hash;		/* of the steps' sequence lengths alone */
	uint32_t step;
	int steps_begun, steps_ended;
	size_t nseqs;
	struct rlb_seq_meta metas[64];
	uint64_t tokens;
	uint64_t group_spans;		/* tokens whose experts span > topk_groups groups */
	uint64_t bad_ids;		/* ids >= experts */
	uint64_t repeats;		/* an expert twice in one token */
};

static void mix(uint64_t *h, uint64_t v)
{
	*h = (*h ^ v) * 0x100000001b3ull;
}

static int chk_begin(void *ctx, uint32_t step, const struct rlb_seq_meta *m,
		     size_t n, struct rlb_err *err)
{
	struct check *c = ctx;
	const struct rlb_workload_config *w = &c->cfg->workload;
	size_t i;

	(void)err;
	ck_assert_uint_eq(step, (uint32_t)(w->first_step + c->steps_begun));
	ck_assert_uint_eq(n, (size_t)w->prompts_per_step * w->samples_per_prompt);
	ck_assert_uint_le(n, 64);
	for (i = 0; i < n; i++) {
		ck_assert_uint_eq(m[i].step, step);
		ck_assert_uint_eq(m[i].group, i / (size_t)w->samples_per_prompt);
		ck_assert_uint_eq(m[i].sample, i % (size_t)w->samples_per_prompt);
		ck_assert_uint_ge(m[i].tokens, (uint32_t)w->len_min);
		ck_assert_uint_le(m[i].tokens, (uint32_t)w->len_max);
		c->metas[i] = m[i];
		mix(&c->len_hash, m[i].tokens);
	}
	c->nseqs = n;
	c->step = step;
	c->steps_begun++;
	return 0;
}

static int chk_seq(void *ctx, uint32_t index, const struct rlb_seq *q,
		   struct rlb_err *err)
{
	struct check *c = ctx;
	const struct rlb_model_config *m = &c->cfg->model;
	uint32_t K = (uint32_t)m->topk;
	size_t t, k, j, n;

	(void)err;
	ck_assert_uint_lt(index, c->nseqs);
	ck_assert_uint_eq(q->step, c->step);
	ck_assert_uint_eq(q->group, c->metas[index].group);
	ck_assert_uint_eq(q->sample, c->metas[index].sample);
	ck_assert_uint_eq(q->tokens, c->metas[index].tokens);
	ck_assert_ptr_null(q->gates);
	/* plain checks per id (a Check assertion per id would be slow), counted */
	n = (size_t)m->moe_layers * q->tokens;
	for (t = 0; t < n; t++) {
		const uint16_t *id = q->ids + t * K;
		uint32_t groups = 0;

		for (k = 0; k < K; k++) {
			c->bad_ids += id[k] >= (uint32_t)m->experts;
			for (j = 0; j < k; j++)
				c->repeats += id[j] == id[k];
			mix(&c->hash, id[k]);
			if (m->expert_groups) {
				uint32_t gbit = 1u << (id[k] / (m->experts / m->expert_groups));

				groups |= gbit;
			}
		}
		if (m->expert_groups && (uint32_t)__builtin_popcount(groups) > (uint32_t)m->topk_groups)
			c->group_spans++;
	}
	mix(&c->hash, q->tokens);
	c->tokens += q->tokens;
	return 0;
}

static int chk_end(void *ctx, uint32_t step, struct rlb_err *err)
{
	struct check *c = ctx;

	(void)err;
	ck_assert_uint_eq(step, c->step);
	c->steps_ended++;
	return 0;
}

static uint64_t run_check(const struct rlb_config *cfg, uint64_t seed, int uniform,
			  struct check *c)
{
	struct rlb_synth_sink sink = { c, chk_begin, chk_seq, chk_end };
	struct rlb_err err = {0};

	memset(c, 0, sizeof(*c));
	c->cfg = cfg;
	c->hash = 0xcbf29ce484222325ull;
	c->len_hash = c->hash;
	ck_assert_msg(rlb_synth_generate_cb(cfg, seed, uniform, &sink, NULL, NULL, &err) == 0,
		      "%s", err.msg);
	ck_assert_int_eq(c->steps_begun, cfg->workload.steps);
	ck_assert_int_eq(c->steps_ended, cfg->workload.steps);
	ck_assert_uint_eq(c->bad_ids, 0);
	ck_assert_uint_eq(c->repeats, 0);
	return c->hash;
}

START_TEST(test_generator_structure_and_determinism)
{
	struct rlb_config cfg;
	struct check c;
	uint64_t h1, h2, h3, h4;

	tiny_config(&cfg);
	h1 = run_check(&cfg, 1, 0, &c);
	ck_assert_uint_gt(c.tokens, 0);
	h2 = run_check(&cfg, 1, 0, &c);
	h3 = run_check(&cfg, 2, 0, &c);
	h4 = run_check(&cfg, 1, 1, &c);
	ck_assert_uint_eq(h1, h2);
	ck_assert_uint_ne(h1, h3);
	ck_assert_uint_ne(h1, h4);
	/* the uniform control is deterministic too */
	ck_assert_uint_eq(h4, run_check(&cfg, 1, 1, &c));
	/* topk == experts: every token lists all experts */
	cfg.model.topk = 16;
	run_check(&cfg, 5, 0, &c);
}
END_TEST

/*
 * The uniform control has the skewed trace's steps, groups and lengths
 * (docs/workload.md), in every step; so does any topic_drift.
 */
START_TEST(test_generator_same_lengths)
{
	struct rlb_config cfg;
	struct check c;
	uint64_t skewed;

	tiny_config(&cfg);
	ck_assert_int_ge(cfg.workload.steps, 2);
	run_check(&cfg, 3, 0, &c);
	skewed = c.len_hash;
	run_check(&cfg, 3, 1, &c);
	ck_assert_uint_eq(c.len_hash, skewed);
	cfg.workload.topic_drift = 0;
	run_check(&cfg, 3, 0, &c);
	ck_assert_uint_eq(c.len_hash, skewed);
	cfg.workload.topic_drift = 1;
	run_check(&cfg, 3, 1, &c);
	ck_assert_uint_eq(c.len_hash, skewed);
}
END_TEST

/* Lengths are clamped: a huge sigma still stays within [len_min, len_max]. */
START_TEST(test_generator_lengths)
{
	struct rlb_config cfg;
	struct check c;

	tiny_config(&cfg);
	cfg.workload.len_sigma = 4;
	cfg.workload.len_min = 60;
	cfg.workload.len_max = 70;
	cfg.workload.steps = 2;
	run_check(&cfg, 9, 0, &c);	/* chk_begin asserts the range */
	cfg.workload.len_min = cfg.workload.len_max = 33;
	run_check(&cfg, 9, 0, &c);
	ck_assert_uint_eq(c.tokens, 33u * 15 * 2);
}
END_TEST

START_TEST(test_generator_groups)
{
	struct rlb_config cfg;
	struct check c;

	tiny_config(&cfg);
	cfg.model.experts = 32;
	cfg.model.topk = 6;
	cfg.model.expert_groups = 8;
	cfg.model.topk_groups = 2;
	cfg.workload.steps = 1;
	run_check(&cfg, 4, 0, &c);
	ck_assert_uint_eq(c.group_spans, 0);
	run_check(&cfg, 4, 1, &c);
	ck_assert_uint_eq(c.group_spans, 0);
	/* topk == all experts of the chosen groups */
	cfg.model.topk = 8;
	run_check(&cfg, 4, 0, &c);
	ck_assert_uint_eq(c.group_spans, 0);
}
END_TEST

START_TEST(test_generator_config_errors)
{
	struct rlb_config cfg;
	struct rlb_err err = {0};
	struct check c;
	struct rlb_synth_sink sink = { &c, chk_begin, chk_seq, chk_end };

	tiny_config(&cfg);
	cfg.model.expert_groups = 8;
	cfg.model.topk_groups = 1;
	memset(&c, 0, sizeof(c));
	c.cfg = &cfg;
	ck_assert_int_eq(rlb_synth_generate_cb(&cfg, 1, 0, &sink, NULL, NULL, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "synthetic: 'model.topk' 4 exceeds the experts of 'model.topk_groups' groups (1 x 2)");
	tiny_config(&cfg);
	cfg.workload.segment_min = 10;
	cfg.workload.segment_max = 5;
	ck_assert_int_eq(rlb_synth_generate_cb(&cfg, 1, 0, &sink, NULL, NULL, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "synthetic: 'workload' segments need 1 <= segment_min <= segment_max");
}
END_TEST

/* Statistics of the generator's output through an accumulator. */
struct acc_sink {
	struct rlb_stats_acc *acc;
	uint32_t lens[4096], groups[4096];
};

static int acc_begin(void *ctx, uint32_t step, const struct rlb_seq_meta *m,
		     size_t n, struct rlb_err *err)
{
	struct acc_sink *a = ctx;
	size_t i;

	ck_assert_uint_le(n, 4096);
	for (i = 0; i < n; i++) {
		a->lens[i] = m[i].tokens;
		a->groups[i] = m[i].group;
	}
	return rlb_stats_acc_begin_step(a->acc, step, a->lens, a->groups, n, err);
}

static int acc_seq(void *ctx, uint32_t index, const struct rlb_seq *q,
		   struct rlb_err *err)
{
	struct acc_sink *a = ctx;

	(void)err;
	rlb_stats_acc_add_seq(a->acc, index, q);
	return 0;
}

static int acc_end(void *ctx, uint32_t step, struct rlb_err *err)
{
	struct acc_sink *a = ctx;

	(void)step;
	return rlb_stats_acc_end_step(a->acc, err);
}

static void synth_stats(const struct rlb_config *cfg, uint64_t seed, int uniform,
			enum rlb_pack pack, struct rlb_trace_stats *st)
{
	struct acc_sink *a = calloc(1, sizeof(*a));
	struct rlb_synth_sink sink = { a, acc_begin, acc_seq, acc_end };
	struct rlb_stats_params p;
	struct rlb_err err = {0};

	ck_assert_ptr_nonnull(a);
	p.layers = (uint32_t)cfg->model.moe_layers;
	p.experts = (uint32_t)cfg->model.experts;
	p.topk = (uint32_t)cfg->model.topk;
	p.ranks = (uint32_t)cfg->parallel.ep_size;
	p.gpus_per_node = (uint32_t)cfg->cluster.gpus_per_node;
	p.mb_tokens = (uint32_t)cfg->parallel.micro_batch_tokens;
	p.pack = pack;
	ck_assert_msg(rlb_stats_acc_new(&a->acc, &p, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_synth_generate_cb(cfg, seed, uniform, &sink, NULL, NULL, &err) == 0,
		      "%s", err.msg);
	ck_assert_msg(rlb_stats_acc_finish(a->acc, st, &err) == 0, "%s", err.msg);
	rlb_stats_acc_free(a->acc);
	free(a);
}

/* The calibration shape: qwen3-235b-a22b's experts on h100-4x8, EP 32. */
static void calib_config(struct rlb_config *cfg, int layers, int steps)
{
	rlb_config_defaults(cfg);
	strcpy(cfg->model.name, "qwen3-235b-a22b");
	cfg->model.experts = 128;
	cfg->model.topk = 8;
	cfg->model.moe_layers = layers;
	cfg->cluster.nodes = 4;
	cfg->cluster.gpus_per_node = 8;
	cfg->parallel.ep_size = 32;
	cfg->parallel.micro_batch_tokens = 8192;
	cfg->workload.steps = steps;
}

/* A uniform control trace is balanced at large token counts. */
START_TEST(test_uniform_balanced)
{
	struct rlb_config cfg;
	struct rlb_trace_stats st;

	calib_config(&cfg, 1, 1);
	cfg.workload.prompts_per_step = under_valgrind() ? 1 : 8;
	synth_stats(&cfg, 7, 1, RLB_PACK_IN_ORDER, &st);
	ck_assert_uint_ge(st.micro_batches, 1);
	/* ~65k rows per GPU per micro-batch: max/mean within a few percent */
	ck_assert_double_lt(st.mb_gpu.max, under_valgrind() ? 1.2 : 1.05);
	ck_assert_double_lt(st.step_gpu.max, under_valgrind() ? 1.2 : 1.03);
	ck_assert_double_lt(st.mb_node.max, under_valgrind() ? 1.1 : 1.02);
	rlb_trace_stats_release(&st);
}
END_TEST

/*
 * The calibration targets (docs/workload.md) at reduced scale: 16 MoE
 * layers and 3 steps instead of 94 and 4.  The full scale is
 * bench/calibrate_workload.
 */
START_TEST(test_calibration_reduced)
{
	struct rlb_config cfg;
	struct rlb_trace_stats st;

	if (under_valgrind()) {
		/* a token-scale run: the accumulator and generator paths only */
		calib_config(&cfg, 1, 2);
		cfg.workload.prompts_per_step = 2;
		synth_stats(&cfg, 1, 0, RLB_PACK_IN_ORDER, &st);
		ck_assert_uint_eq(st.steps, 2);
		ck_assert_uint_ge(st.mb_gpu.n, 2);
		rlb_trace_stats_release(&st);
		return;
	}
	calib_config(&cfg, 16, 3);
	synth_stats(&cfg, 1, 0, RLB_PACK_IN_ORDER, &st);
	ck_assert_double_ge(st.mb_gpu.p50, 1.5);
	ck_assert_double_le(st.mb_gpu.p50, 2.1);
	ck_assert_double_ge(st.mb_gpu.p99, 2.5);
	ck_assert_double_le(st.mb_gpu.p99, 4.5);
	ck_assert_double_ge(st.mb_node.p50, 1.08);
	ck_assert_double_le(st.mb_node.p50, 1.20);
	ck_assert_double_ge(st.step_gpu.p50, 1.15);
	ck_assert_double_le(st.step_gpu.p50, 1.40);
	ck_assert_double_gt(st.hot_churn_mb, 0.60);
	ck_assert_double_lt(st.hot_churn_step, 0.30);
	ck_assert_double_ge(st.prompts_per_mb.p50, 4);
	ck_assert_double_le(st.prompts_per_mb.p50, 10);
	/* several micro-batches per step */
	ck_assert_uint_ge(st.micro_batches, 8 * st.steps);
	ck_assert_uint_le(st.micro_batches, 16 * st.steps);
	rlb_trace_stats_release(&st);
}
END_TEST

/* rlb_trace_stats_compute on a written trace equals the accumulator. */
START_TEST(test_trace_stats_matches_acc)
{
	struct rlb_config cfg;
	struct rlb_trace_header h;
	struct rlb_trace_writer *w = NULL;
	struct rlb_trace_reader *r = NULL;
	struct rlb_trace_stats a, b;
	struct rlb_pool *pool = NULL;
	struct rlb_err err = {0};
	char path[512];
	uint64_t a_tokens = 0;
	uint32_t l;
	int p;

	tiny_config(&cfg);
	snprintf(path, sizeof(path), "%s/synth-%ld.rrt", rlb_test_tmpdir(), (long)getpid());
	rlb_trace_header_from_config(&h, &cfg);
	strcpy(h.source, "synthetic");
	ck_assert_msg(rlb_trace_writer_open(&w, path, &h, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_synth_generate(&cfg, 11, 0, w, NULL, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_writer_close(w, &err) == 0, "%s", err.msg);
	/* a writer of another shape than the config's is refused */
	h.moe_layers++;
	ck_assert_msg(rlb_trace_writer_open(&w, path, &h, NULL, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(rlb_synth_generate(&cfg, 11, 0, w, NULL, NULL, &err), RLB_EMISMATCH);
	ck_assert_ptr_nonnull(strstr(err.msg, "'model.moe_layers'"));
	rlb_trace_writer_abort(w);
	h.moe_layers--;
	ck_assert_msg(rlb_trace_reader_open(&r, path, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_pool_new(&pool, 3, &err) == 0, "%s", err.msg);
	/* both packing rules, counted on this thread and on three */
	for (p = 0; p < 4; p++) {
		enum rlb_pack pack = p & 1 ? RLB_PACK_FFD : RLB_PACK_IN_ORDER;

		synth_stats(&cfg, 11, 0, pack, &a);
		ck_assert_msg(rlb_trace_stats_compute(r, &cfg, pack, 0, UINT32_MAX,
						      p & 2 ? pool : NULL, &b, &err) == 0,
			      "%s", err.msg);
		ck_assert_int_eq(b.pack, pack);
		ck_assert_uint_eq(a.steps, 3);
		ck_assert_uint_eq(b.steps, a.steps);
		ck_assert_uint_eq(b.micro_batches, a.micro_batches);
		ck_assert_uint_eq(b.tokens, a.tokens);
		a_tokens = a.tokens;
		ck_assert_uint_eq(b.nodes, 2);
		ck_assert_double_eq(b.mb_gpu.p50, a.mb_gpu.p50);
		ck_assert_double_eq(b.mb_gpu.p99, a.mb_gpu.p99);
		ck_assert_double_eq(b.mb_node.mean, a.mb_node.mean);
		ck_assert_double_eq(b.step_gpu.max, a.step_gpu.max);
		ck_assert_double_eq(b.prompts_per_mb.mean, a.prompts_per_mb.mean);
		ck_assert_double_eq(b.hot_churn_mb, a.hot_churn_mb);
		ck_assert_double_eq(b.hot_churn_step, a.hot_churn_step);
		for (l = 0; l < b.layers; l++)
			ck_assert_double_eq(b.layer[l].mb_gpu.mean, a.layer[l].mb_gpu.mean);
		rlb_trace_stats_release(&a);
		rlb_trace_stats_release(&b);
	}
	/* a range of steps: step 11 alone (the steps are 10..12), and none */
	ck_assert_msg(rlb_trace_stats_compute(r, &cfg, RLB_PACK_IN_ORDER, 11, 11, pool, &b, &err) == 0,
		      "%s", err.msg);
	ck_assert_uint_eq(b.steps, 1);
	ck_assert_uint_lt(b.tokens, a_tokens);
	ck_assert_uint_gt(b.tokens, 0);
	rlb_trace_stats_release(&b);
	ck_assert_msg(rlb_trace_stats_compute(r, &cfg, RLB_PACK_IN_ORDER, 13, 99, pool, &b, &err) == 0,
		      "%s", err.msg);
	ck_assert_uint_eq(b.steps, 0);
	ck_assert_uint_eq(b.tokens, 0);
	rlb_trace_stats_release(&b);
	rlb_pool_free(pool);
	rlb_trace_reader_free(r);
	unlink(path);
}
END_TEST

Suite *rlb_suite_synth(void)
{
	Suite *s = suite_create("synth");
	TCase *stats = tcase_create("stats");
	TCase *gen = tcase_create("generator");

	tcase_add_test(stats, test_dist);
	tcase_add_test(stats, test_stats_hand);
	tcase_add_test(stats, test_stats_rank_tokens);
	tcase_add_test(stats, test_stats_nodes);
	tcase_add_test(stats, test_stats_errors);
	suite_add_tcase(s, stats);
	tcase_add_test(gen, test_generator_structure_and_determinism);
	tcase_add_test(gen, test_generator_same_lengths);
	tcase_add_test(gen, test_generator_lengths);
	tcase_add_test(gen, test_generator_groups);
	tcase_add_test(gen, test_generator_config_errors);
	tcase_add_test(gen, test_uniform_balanced);
	tcase_add_test(gen, test_calibration_reduced);
	tcase_add_test(gen, test_trace_stats_matches_acc);
	tcase_set_timeout(gen, 300);
	suite_add_tcase(s, gen);
	return s;
}
