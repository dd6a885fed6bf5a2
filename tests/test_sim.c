/*
 * test_sim.c - unit tests of lib/sim and lib/traffic: the GEMM time at a
 * few row counts (with the HBM floor), DeepEP copy counting, a uniform
 * case where static equals the ideal, one hot expert replicated by hand,
 * the dense estimate, migration, planning overlap, the streaming pass on
 * a written trace, errors, and determinism.  Expected values are worked
 * out by hand in the comments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "relibra.h"
#include "reorder.h"
#include "sim.h"
#include "suites.h"

#define REL_EQ(a, b) ck_assert_msg(fabs((a) - (b)) <= 1e-9 * fabs(b) + 1e-18, \
				   "%s = %.12g, expected %.12g", #a, (double)(a), (double)(b))

/*
 * A toy model: hidden 64, expert_ffn 32, so an expert has 6144 params,
 * 12288 forward FLOPs per row and 12288 weight bytes; a token copy is 128
 * bytes.  Peak 1 TFLOP/s at gemm_eff_max 0.5 with 100 half rows:
 * compute time of m rows = 12288 * (m + 100) / 0.5e12 = 24.576 ns * (m + 100).
 * HBM 2 GB/s: the weight floor is 6.144 us.  NVLink 10 GB/s, 1 us; RDMA
 * 5 GB/s, 4 us.  No attention shape: the dense part is the router alone.
 */
static void toy_config(struct rlb_config *cfg, int nodes, int gpn, int experts,
		       int topk, int layers)
{
	rlb_config_defaults(cfg);
	cfg->model.experts = experts;
	cfg->model.topk = topk;
	cfg->model.hidden = 64;
	cfg->model.expert_ffn = 32;
	cfg->model.moe_layers = layers;
	cfg->cluster.nodes = nodes;
	cfg->cluster.gpus_per_node = gpn;
	cfg->cluster.peak_tflops = 1;
	cfg->cluster.gemm_eff_max = 0.5;
	cfg->cluster.gemm_eff_half_rows = 100;
	cfg->cluster.hbm_gbps = 2;
	cfg->cluster.nvlink_gbps = 10;
	cfg->cluster.nvlink_latency_us = 1;
	cfg->cluster.rdma_gbps = 5;
	cfg->cluster.rdma_latency_us = 4;
	cfg->parallel.ep_size = nodes * gpn;
	cfg->balancer.planner_overlap = 1;
}

/* Sequences held in memory: ids layer-major as struct rlb_seq. */
struct seqs {
	size_t n;
	uint32_t len[16];
	uint16_t *ids[16];
	uint32_t layers, topk;
};

static void seqs_init(struct seqs *q, size_t n, const uint32_t *len,
		      uint32_t layers, uint32_t topk)
{
	size_t i;

	memset(q, 0, sizeof(*q));
	q->n = n;
	q->layers = layers;
	q->topk = topk;
	for (i = 0; i < n; i++) {
		q->len[i] = len[i];
		q->ids[i] = calloc((size_t)layers * len[i] * topk + 1, sizeof(uint16_t));
		ck_assert_ptr_nonnull(q->ids[i]);
	}
}

static uint16_t *seq_id(struct seqs *q, size_t i, uint32_t layer, uint32_t t, uint32_t k)
{
	return &q->ids[i][((size_t)layer * q->len[i] + t) * q->topk + k];
}

static void seqs_free(struct seqs *q)
{
	size_t i;

	for (i = 0; i < q->n; i++)
		free(q->ids[i]);
}

static void seq_at(const struct seqs *q, size_t i, struct rlb_seq *seq)
{
	memset(seq, 0, sizeof(*seq));
	seq->tokens = q->len[i];
	seq->ids = q->ids[i];
}

/* Schedule and loads of the sequences (step 0, in-order). */
static void build(const struct rlb_config *cfg, const struct seqs *q,
		  struct rlb_schedule *s, struct rlb_loads *l)
{
	struct rlb_err err = {0};
	size_t i;

	ck_assert_msg(rlb_schedule_build(s, 0, q->len, q->n, (uint32_t)cfg->parallel.ep_size,
					 (uint32_t)cfg->parallel.micro_batch_tokens,
					 RLB_PACK_IN_ORDER, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_loads_init(l, s->micro_batches, q->layers, s->ranks,
				     (uint32_t)cfg->model.experts, &err) == 0, "%s", err.msg);
	for (i = 0; i < q->n; i++) {
		struct rlb_seq seq;

		seq_at(q, i, &seq);
		rlb_loads_add_seq(l, s, (uint32_t)i, &seq, q->topk);
	}
}

static void traffic_of(struct rlb_traffic *t, const struct rlb_config *cfg,
		       const struct rlb_step_plan *plan, const struct seqs *q,
		       const struct rlb_schedule *s, const struct rlb_loads *l)
{
	struct rlb_err err = {0};
	size_t i;

	ck_assert_msg(rlb_traffic_init(t, plan, l, (uint32_t)cfg->cluster.gpus_per_node, &err) == 0,
		      "%s", err.msg);
	for (i = 0; i < q->n; i++) {
		struct rlb_seq seq;

		seq_at(q, i, &seq);
		rlb_traffic_add_seq(t, s, (uint32_t)i, &seq, q->topk);
	}
	ck_assert_uint_eq(t->unplanned_rows, 0);
}

/* The sequences as trace PATH (step 0, source "api"). */
static void write_trace(const struct rlb_config *cfg, const struct seqs *q,
			const char *path)
{
	struct rlb_trace_header h;
	struct rlb_trace_writer *w = NULL;
	struct rlb_err err = {0};
	size_t i;

	rlb_trace_header_from_config(&h, cfg);
	strcpy(h.source, "api");
	ck_assert_msg(rlb_trace_writer_open(&w, path, &h, NULL, &err) == 0, "%s", err.msg);
	for (i = 0; i < q->n; i++) {
		struct rlb_seq seq;

		seq_at(q, i, &seq);
		seq.sample = (uint32_t)i;
		ck_assert_int_eq(rlb_trace_writer_append(w, &seq), 0);
	}
	ck_assert_msg(rlb_trace_writer_close(w, &err) == 0, "%s", err.msg);
}

/* ------------------------------------------------------------------ */

/*
 * gemm(m) = max(24.576 ns * (m + 100), 12288 B / HBM).  With HBM at
 * 1 GB/s the floor is 12.288 us: m = 1 gives 2.482 us -> 12.288 us; m =
 * 400 sits on it (12.288 us both ways); m = 900 gives 24.576 us; m = 2000
 * gives 51.6096 us.  0 rows cost nothing.
 */
START_TEST(test_gemm_time)
{
	struct rlb_config cfg;
	struct rlb_sim_params p;

	toy_config(&cfg, 1, 2, 2, 1, 1);
	cfg.cluster.hbm_gbps = 1;
	rlb_sim_params_init(&p, &cfg);
	REL_EQ(p.expert_params, 6144.0);
	REL_EQ(p.expert_flops_per_row, 12288.0);
	REL_EQ(p.expert_weight_bytes, 12288.0);
	REL_EQ(p.token_bytes, 128.0);
	ck_assert(rlb_sim_gemm_s(&p, 0) == 0);
	REL_EQ(rlb_sim_gemm_s(&p, 1), 12.288e-6);
	REL_EQ(rlb_sim_gemm_s(&p, 400), 12.288e-6);
	REL_EQ(rlb_sim_gemm_s(&p, 900), 24.576e-6);
	REL_EQ(rlb_sim_gemm_s(&p, 2000), 51.6096e-6);
	/* a faster HBM lowers the floor: m = 1 is then compute bound */
	cfg.cluster.hbm_gbps = 1000;
	rlb_sim_params_init(&p, &cfg);
	REL_EQ(rlb_sim_gemm_s(&p, 1), 2.482176e-6);
	ck_assert_uint_eq(p.passes, 3);
	ck_assert_uint_eq(p.a2a_phases, 4);
	cfg.parallel.recompute = 1;
	rlb_sim_params_init(&p, &cfg);
	ck_assert_uint_eq(p.passes, 4);
	ck_assert_uint_eq(p.a2a_phases, 6);
}
END_TEST

/*
 * Without gated_ffn an FFN has two matrices: the toy expert has 4096
 * params (2/3 of 6144), 8192 forward FLOPs per row and 8192 weight and
 * gradient bytes, 14 * 4096 to migrate.  Compute time of m rows =
 * 8192 * (m + 100) / 0.5e12 = 16.384 ns * (m + 100): 900 rows 16.384 us;
 * the HBM floor 8192 B / 2 GB/s = 4.096 us.  The planners' row time,
 * 6 * 2 * 64 * 32 FLOP at 0.5 TFLOP/s, and migration time fall to 2/3.
 */
START_TEST(test_ungated_ffn)
{
	struct rlb_config cfg;
	struct rlb_sim_params p;
	double row3, mig3, row2, mig2;

	toy_config(&cfg, 1, 2, 2, 1, 1);
	rlb_reorder_costs(&cfg, &row3, &mig3);
	cfg.model.gated_ffn = 0;
	rlb_sim_params_init(&p, &cfg);
	REL_EQ(p.expert_params, 4096.0);
	REL_EQ(p.expert_flops_per_row, 8192.0);
	REL_EQ(p.expert_weight_bytes, 8192.0);
	REL_EQ(p.expert_grad_bytes, 8192.0);
	REL_EQ(p.migration_bytes, 14 * 4096.0);
	REL_EQ(rlb_sim_gemm_s(&p, 900), 16.384e-6);
	REL_EQ(rlb_sim_gemm_s(&p, 1), 4.096e-6);
	rlb_reorder_costs(&cfg, &row2, &mig2);
	REL_EQ(row2, 6.0 * 2 * 64 * 32 / 0.5e12);
	REL_EQ(row2, row3 * 2 / 3);
	REL_EQ(mig2, mig3 * 2 / 3);
}
END_TEST

/*
 * 2 nodes x 4 GPUs, 16 experts (expert e on GPU e / 2), top-2; one token
 * on rank 0 (node 0, lane 0; its rail GPU in node 1 is GPU 4), one layer
 * per case:
 *   layer 0, experts {10, 12} on GPUs 5, 6: 1 RDMA 0 -> 4, NVLink 4 -> 5, 4 -> 6;
 *   layer 1, experts {8, 10} on GPUs 4, 5: 1 RDMA 0 -> 4, NVLink 4 -> 5;
 *   layer 2, experts {2, 12} on GPUs 1, 6: NVLink 0 -> 1, RDMA 0 -> 4, NVLink 4 -> 6;
 *   layer 3, experts {10, 11} both on GPU 5: 1 RDMA 0 -> 4, 1 NVLink 4 -> 5;
 *   layer 4, experts {0, 1} on GPU 0 itself: nothing.
 */
START_TEST(test_deepep_counting)
{
	static const uint16_t pairs[5][2] = { {10, 12}, {8, 10}, {2, 12}, {10, 11}, {0, 1} };
	static const uint32_t len[1] = { 1 };
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_traffic t;
	struct seqs q;
	uint32_t layer, g;

	toy_config(&cfg, 2, 4, 16, 2, 5);
	seqs_init(&q, 1, len, 5, 2);
	for (layer = 0; layer < 5; layer++) {
		*seq_id(&q, 0, layer, 0, 0) = pairs[layer][0];
		*seq_id(&q, 0, layer, 0, 1) = pairs[layer][1];
	}
	build(&cfg, &q, &s, &l);
	ck_assert_uint_eq(s.chunks[0].rank, 0);
	traffic_of(&t, &cfg, NULL, &q, &s, &l);
	ck_assert_uint_eq(t.rows, 10);
	{
		static const uint64_t want[5][4][8] = {
			/* rdma_send, rdma_recv, nvlink_send, nvlink_recv per GPU */
			{ {1}, {0, 0, 0, 0, 1}, {0, 0, 0, 0, 2}, {0, 0, 0, 0, 0, 1, 1} },
			{ {1}, {0, 0, 0, 0, 1}, {0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 1} },
			{ {1}, {0, 0, 0, 0, 1}, {1, 0, 0, 0, 1}, {0, 1, 0, 0, 0, 0, 1} },
			{ {1}, {0, 0, 0, 0, 1}, {0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 1} },
			{ {0}, {0}, {0}, {0} },
		};

		for (layer = 0; layer < 5; layer++)
			for (g = 0; g < 8; g++) {
				size_t i = (size_t)layer * 8 + g;

				ck_assert_msg(t.rdma_send[i] == want[layer][0][g] &&
					      t.rdma_recv[i] == want[layer][1][g] &&
					      t.nvlink_send[i] == want[layer][2][g] &&
					      t.nvlink_recv[i] == want[layer][3][g],
					      "layer %u gpu %u: %llu %llu %llu %llu", layer, g,
					      (unsigned long long)t.rdma_send[i],
					      (unsigned long long)t.rdma_recv[i],
					      (unsigned long long)t.nvlink_send[i],
					      (unsigned long long)t.nvlink_recv[i]);
			}
	}
	rlb_traffic_release(&t);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}
END_TEST

/*
 * 2 nodes x 2 GPUs, 4 experts (one per GPU), top-1, 2 layers, dense part
 * estimated (q_heads 2, kv_heads 1, head_dim 8).  Four sequences of 4
 * tokens, one per rank; token t goes to expert (t + layer) mod 4, so
 * every rank sends one token to every GPU: 2 RDMA copies out and in per
 * GPU (one token to each GPU of the other node, both through the rail
 * GPU), 2 NVLink copies out and in (to its node mate, and the forward of
 * a remote token to its node mate).  Every GPU computes 4 rows; the
 * static layout is the ideal.
 */
START_TEST(test_uniform_static_is_ideal)
{
	static const uint32_t len[4] = { 4, 4, 4, 4 };
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_traffic t;
	struct rlb_sim *sim = NULL, *isim = NULL;
	struct rlb_sim_opts o;
	struct rlb_sim_step st, ist;
	struct rlb_sim_summary sum;
	struct rlb_err err = {0};
	struct seqs q;
	uint32_t i, layer, tok;
	double disp, a2a, expert, dense, proj, attn, router;

	toy_config(&cfg, 2, 2, 4, 1, 2);
	cfg.parallel.micro_batch_tokens = 4;
	cfg.model.q_heads = 2;
	cfg.model.kv_heads = 1;
	cfg.model.head_dim = 8;
	seqs_init(&q, 4, len, 2, 1);
	for (i = 0; i < 4; i++)
		for (layer = 0; layer < 2; layer++)
			for (tok = 0; tok < 4; tok++)
				*seq_id(&q, i, layer, tok, 0) = (uint16_t)((tok + layer) % 4);
	build(&cfg, &q, &s, &l);
	for (i = 0; i < 4; i++)
		ck_assert_uint_eq(s.chunks[i].rank, i);
	traffic_of(&t, &cfg, NULL, &q, &s, &l);
	for (i = 0; i < 8; i++) {
		ck_assert_uint_eq(t.rdma_send[i], 2);
		ck_assert_uint_eq(t.rdma_recv[i], 2);
		ck_assert_uint_eq(t.nvlink_send[i], 2);
		ck_assert_uint_eq(t.nvlink_recv[i], 2);
	}
	rlb_sim_opts_for_policy(&o, RLB_POLICY_STATIC);
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, &o, &err), 0);
	ck_assert_msg(rlb_sim_add_step(sim, &s, &l, NULL, &t, &t, &st, &err) == 0, "%s", err.msg);
	REL_EQ(st.policy.total_s, st.ideal.total_s);
	REL_EQ(st.policy.total_s, st.same_traffic_ideal.total_s);
	REL_EQ(st.fraction_of_ideal, 1.0);
	/*
	 * Dispatch: RDMA 4 us + 256 B / 5 GB/s = 4.0512 us; NVLink 1 us +
	 * 256 B / 10 GB/s = 1.0256 us; the slower sets it; 4 phases x 2 layers.
	 */
	disp = 4.0512e-6;
	a2a = 8 * disp;
	REL_EQ(st.policy.a2a_s, a2a);
	REL_EQ(st.policy.a2a_rdma_s, a2a);
	REL_EQ(st.policy.a2a_nvlink_s, 8 * 1.0256e-6);
	/*
	 * experts: 3 passes x 2 layers x gemm(4); 4 rows compute in
	 * 24.576 ns * 104 = 2.556 us, below the HBM floor 12288 B / 2 GB/s
	 * = 6.144 us.
	 */
	expert = 6 * 6.144e-6;
	REL_EQ(st.policy.expert_s, expert);
	REL_EQ(st.ideal.expert_s, expert);
	/*
	 * Dense per rank and layer (4 tokens from 0): projections 2*4*64*
	 * (2*2 + 2*1)*8 = 24576, attention 4*2*8*(1+2+3+4) = 640, router
	 * 2*4*64*4 = 2048: 27264 FLOP at 0.5 TFLOP/s; 3 passes x 2 layers.
	 */
	proj = 24576;
	attn = 640;
	router = 2048;
	dense = 6 * (proj + attn + router) / 0.5e12;
	REL_EQ(st.policy.dense_s, dense);
	REL_EQ(st.policy.total_s, a2a + expert + dense);
	ck_assert(st.policy.replication_s == 0 && st.policy.migration_s == 0 &&
		  st.policy.planning_s == 0 && st.policy.grad_reduce_s == 0);
	ck_assert_uint_eq(st.tokens, 16);
	REL_EQ(st.tokens_per_s, 16 / st.policy.total_s);
	REL_EQ(st.bytes.a2a_rdma, 4.0 * 2 * 8 * 128);
	REL_EQ(st.bytes.a2a_nvlink, 4.0 * 2 * 8 * 128);
	ck_assert_int_eq(rlb_sim_summary(sim, &sum, &err), 0);
	REL_EQ(sum.gpu_before.max, 1.0);
	REL_EQ(sum.node_floor.max, 1.0);
	ck_assert_uint_eq(sum.gpu_after.n, 2);
	/* one micro-batch, 4 tokens on each rank */
	ck_assert_uint_eq(sum.rank_tokens.n, 1);
	REL_EQ(sum.rank_tokens.max, 1.0);

	/* the ideal policy gives the same number */
	rlb_sim_opts_for_policy(&o, RLB_POLICY_IDEAL);
	ck_assert_int_eq(rlb_sim_new(&isim, &cfg, &o, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(isim, &s, &l, NULL, &t, NULL, &ist, &err), 0);
	REL_EQ(ist.policy.total_s, st.policy.total_s);

	rlb_sim_free(sim);
	rlb_sim_free(isim);
	rlb_traffic_release(&t);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}
END_TEST

/*
 * One node of 2 GPUs, 2 experts (e on GPU e), top-1, one layer, one spare
 * slot.  Each rank holds one sequence of 800 tokens: 600 to expert 0,
 * then 200 to expert 1.  Expert 0 has 1200 rows, expert 1 400.
 *
 * Static: GPU 0 computes 1200 rows: 24.576 ns * 1300 = 31.9488 us, GPU 1
 * 400 rows: 12.288 us.  Dispatch: rank 1 sends 600 copies to GPU 0, rank
 * 0 200 to GPU 1: 1 us + 600 * 128 B / 10 GB/s = 8.68 us.
 *
 * Replicated by hand: expert 0 keeps 800 rows at home and a replica on
 * GPU 1 takes 400.  The locality split: the replica takes rank 1's own
 * rows first (400), the home rank 0's 600 and rank 1's other 200.  In
 * token order rank 1 sends its first 200 expert-0 rows to the home copy
 * (the first instance that receives from it), the next 400 stay.
 * GPU 0: gemm(800) = 22.1184 us; GPU 1: 2 x gemm(400) = 24.576 us (the
 * slowest).  Dispatch: 200 copies each way: 1 us + 2.56 us = 3.56 us.
 * Replica copy and gradient: 1 us + 12288 B / 10 GB/s = 2.2288 us each.
 * Dense: only the router, 2 * 800 * 64 * 2 = 204800 FLOP per rank at
 * 0.5 TFLOP/s = 0.4096 us forward, 1.2288 us in 3 passes.
 *
 * Step: static 3 * 31.9488 + 4 * 8.68 + 1.2288 = 131.7952 us; replicated
 * 3 * 24.576 + 4 * 3.56 + 2 * 2.2288 + 1.2288 = 93.6544 us: a gain of
 * 38.1408 us.
 */
static void hot_case_layers(struct rlb_config *cfg, struct seqs *q, struct rlb_schedule *s,
			    struct rlb_loads *l, struct rlb_step_plan *plan, uint32_t layers)
{
	static const uint32_t len[2] = { 800, 800 };
	struct rlb_err err = {0};
	uint32_t i, tok, layer;

	toy_config(cfg, 1, 2, 2, 1, (int)layers);
	cfg->parallel.micro_batch_tokens = 800;
	cfg->balancer.replica_slots = 1;
	seqs_init(q, 2, len, layers, 1);
	for (i = 0; i < 2; i++)
		for (layer = 0; layer < layers; layer++)
			for (tok = 0; tok < 800; tok++)
				*seq_id(q, i, layer, tok, 0) = tok < 600 ? 0 : 1;
	build(cfg, q, s, l);
	ck_assert_msg(rlb_step_plan_init(plan, 0, 1, layers, 2, 2, 2, 1, RLB_SPLIT_LOCALITY,
					 &err) == 0, "%s", err.msg);
	for (layer = 0; layer < layers; layer++) {
		ck_assert_int_eq(rlb_step_plan_add(plan, 0, layer, 0, 0, 800, &err), 0);
		ck_assert_int_eq(rlb_step_plan_add(plan, 0, layer, 0, 1, 400, &err), 0);
		ck_assert_int_eq(rlb_step_plan_add(plan, 0, layer, 1, 1, 400, &err), 0);
	}
	ck_assert_msg(rlb_step_plan_check(plan, l, &err) == 0, "%s", err.msg);
}

static void hot_case(struct rlb_config *cfg, struct seqs *q, struct rlb_schedule *s,
		     struct rlb_loads *l, struct rlb_step_plan *plan)
{
	hot_case_layers(cfg, q, s, l, plan, 1);
}

/* Release a hot case and its plan's and the static layout's traffic. */
static void hot_case_release(struct rlb_traffic *t, struct rlb_traffic *ts,
			     struct rlb_step_plan *plan, struct rlb_loads *l,
			     struct rlb_schedule *s, struct seqs *q)
{
	rlb_traffic_release(t);
	rlb_traffic_release(ts);
	rlb_step_plan_release(plan);
	rlb_loads_release(l);
	rlb_schedule_release(s);
	seqs_free(q);
}

START_TEST(test_hot_expert_replication)
{
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_step_plan plan;
	struct rlb_traffic t, ts;
	struct rlb_sim *ssim = NULL, *rsim = NULL, *wsim = NULL, *isim = NULL;
	struct rlb_sim_opts o;
	struct rlb_sim_step sst, rst, wst, ist;
	struct rlb_sim_summary sum;
	struct rlb_err err = {0};
	struct seqs q;
	uint32_t rows[4];

	hot_case(&cfg, &q, &s, &l, &plan);
	rlb_step_plan_split(&plan, &l, 0, 0, 0, rows);
	ck_assert_uint_eq(rows[0], 600);	/* rank 0 -> home */
	ck_assert_uint_eq(rows[1], 0);
	ck_assert_uint_eq(rows[2], 200);	/* rank 1 -> home */
	ck_assert_uint_eq(rows[3], 400);	/* rank 1 -> replica */
	traffic_of(&t, &cfg, &plan, &q, &s, &l);
	traffic_of(&ts, &cfg, NULL, &q, &s, &l);
	ck_assert_uint_eq(ts.nvlink_send[0], 200);
	ck_assert_uint_eq(ts.nvlink_send[1], 600);
	ck_assert_uint_eq(ts.nvlink_recv[0], 600);
	ck_assert_uint_eq(t.nvlink_send[0], 200);
	ck_assert_uint_eq(t.nvlink_send[1], 200);
	ck_assert_uint_eq(t.nvlink_recv[0], 200);
	ck_assert_uint_eq(t.nvlink_recv[1], 200);
	ck_assert_uint_eq(t.rdma_send[0] + t.rdma_send[1], 0);

	rlb_sim_opts_for_policy(&o, RLB_POLICY_STATIC);
	ck_assert_int_eq(rlb_sim_new(&ssim, &cfg, &o, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(ssim, &s, &l, NULL, &ts, NULL, &sst, &err), 0);
	REL_EQ(sst.policy.expert_s, 3 * 31.9488e-6);
	REL_EQ(sst.policy.a2a_s, 4 * 8.68e-6);
	REL_EQ(sst.policy.dense_s, 1.2288e-6);
	REL_EQ(sst.policy.total_s, 131.7952e-6);
	/*
	 * The same-traffic ideal takes the policy's own all-to-all time (the
	 * busiest GPU's 600 copies), not its copies at the mean volume
	 * (400 per GPU, 6.12 us): docs/cost-model.md, "Baselines".
	 */
	REL_EQ(sst.same_traffic_ideal.a2a_s, 4 * 8.68e-6);
	REL_EQ(sst.same_traffic_ideal.expert_s, 3 * 22.1184e-6);
	/* its excess over that mean is the busiest sender's (and receiver's) */
	REL_EQ(sst.policy.a2a_even_s, 4 * 6.12e-6);
	REL_EQ(sst.policy.a2a_senders_s, 4 * 8.68e-6);
	REL_EQ(sst.same_traffic_ideal.a2a_senders_s, 4 * 8.68e-6);
	REL_EQ(sst.ideal.a2a_even_s, sst.ideal.a2a_s);

	rlb_sim_opts_for_policy(&o, RLB_POLICY_REPLICATE);
	ck_assert_int_eq(rlb_sim_new(&rsim, &cfg, &o, &err), 0);
	ck_assert_msg(rlb_sim_add_step(rsim, &s, &l, &plan, &t, &ts, &rst, &err) == 0, "%s", err.msg);
	REL_EQ(rst.policy.expert_s, 3 * 24.576e-6);
	REL_EQ(rst.policy.a2a_s, 4 * 3.56e-6);
	REL_EQ(rst.policy.replication_s, 2.2288e-6);
	REL_EQ(rst.policy.grad_reduce_s, 2.2288e-6);
	REL_EQ(rst.policy.total_s, 93.6544e-6);
	REL_EQ(sst.policy.total_s - rst.policy.total_s, 38.1408e-6);
	ck_assert_uint_eq(rst.replicas, 1);
	ck_assert_uint_eq(rst.replica_copies, 1);
	ck_assert_uint_eq(rst.replica_slots, 2);
	REL_EQ(rst.bytes.replica_nvlink, 12288.0);
	REL_EQ(rst.bytes.grad_nvlink, 12288.0);
	ck_assert(rst.bytes.replica_rdma == 0 && rst.bytes.grad_rdma == 0);
	/*
	 * Ideal: (gemm(1200) + gemm(400)) / 2 = 24.576 ns * 1800 / 2 =
	 * 22.1184 us per pass; static mean traffic (800 copies / 2 GPUs):
	 * 1 us + 400 * 128 B / 10 GB/s = 6.12 us.
	 */
	REL_EQ(rst.ideal.expert_s, 3 * 22.1184e-6);
	REL_EQ(rst.ideal.a2a_s, 4 * 6.12e-6);
	REL_EQ(rst.same_traffic_ideal.a2a_s, 4 * 3.56e-6);
	/* half the static copies, evenly sent and received */
	REL_EQ(rst.policy.a2a_even_s, 4 * 3.56e-6);
	REL_EQ(rst.policy.a2a_senders_s, 4 * 3.56e-6);
	REL_EQ(rst.ideal.total_s, sst.ideal.total_s);
	REL_EQ(rst.fraction_of_ideal, (3 * 22.1184e-6 + 4 * 6.12e-6 + 1.2288e-6) / 93.6544e-6);
	ck_assert_int_eq(rlb_sim_summary(rsim, &sum, &err), 0);
	REL_EQ(sum.gpu_before.p50, 1.5);
	REL_EQ(sum.gpu_after.p50, 1.0);
	REL_EQ(sum.node_floor.max, 1.0);
	REL_EQ(sum.slot_use, 0.5);
	REL_EQ(sum.fraction_of_ideal, rst.fraction_of_ideal);

	/*
	 * relibra's window: a dense part of 9 us per layer (3 us forward)
	 * hides the 2.2288 us copy of layer 0; the gradient stays.
	 */
	cfg.model.dense_time_ms = 0.009;
	rlb_sim_opts_for_policy(&o, RLB_POLICY_RELIBRA);
	ck_assert_int_eq(o.window, RLB_SIM_WINDOW_PREV_LAYER);
	ck_assert_int_eq(rlb_sim_new(&wsim, &cfg, &o, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(wsim, &s, &l, &plan, &t, &ts, &wst, &err), 0);
	ck_assert(wst.policy.replication_s == 0);
	REL_EQ(wst.policy.grad_reduce_s, 2.2288e-6);
	REL_EQ(wst.policy.dense_s, 9e-6);
	REL_EQ(wst.policy.total_s, 93.6544e-6 - 1.2288e-6 - 2.2288e-6 + 9e-6);
	rlb_sim_free(wsim);
	wsim = NULL;

	/*
	 * A dense part of 1.5 us per layer (0.5 us forward) hides 0.5 us of
	 * the copy; interleaved behind 3 dense layers (period 4, offset 3),
	 * their forward hides 1.5 us more, and the step pays for 4 layers.
	 */
	cfg.model.dense_time_ms = 0.0015;
	ck_assert_int_eq(rlb_sim_new(&wsim, &cfg, &o, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(wsim, &s, &l, &plan, &t, &ts, &wst, &err), 0);
	REL_EQ(wst.policy.replication_s, 2.2288e-6 - 0.5e-6);
	REL_EQ(wst.policy.dense_s, 1.5e-6);
	rlb_sim_free(wsim);
	wsim = NULL;
	cfg.model.moe_layer_period = 4;
	cfg.model.moe_layer_offset = 3;
	ck_assert_int_eq(rlb_sim_new(&wsim, &cfg, &o, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(wsim, &s, &l, &plan, &t, &ts, &wst, &err), 0);
	REL_EQ(wst.policy.replication_s, 2.2288e-6 - 2e-6);
	REL_EQ(wst.policy.dense_s, 6e-6);
	REL_EQ(wst.ideal.dense_s, 6e-6);
	cfg.model.moe_layer_period = 1;
	cfg.model.moe_layer_offset = 0;

	/*
	 * The ideal policy on the static layout's uneven copies: its own
	 * all-to-all is those copies at the mean (6.12 us), so its
	 * same-traffic ideal is the ideal itself, not the static layout's
	 * busiest GPU (8.68 us).
	 */
	cfg.model.dense_time_ms = 0;
	rlb_sim_opts_for_policy(&o, RLB_POLICY_IDEAL);
	ck_assert_int_eq(rlb_sim_new(&isim, &cfg, &o, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(isim, &s, &l, NULL, &ts, &ts, &ist, &err), 0);
	REL_EQ(ist.policy.total_s, sst.ideal.total_s);
	REL_EQ(ist.policy.a2a_s, 4 * 6.12e-6);
	REL_EQ(ist.same_traffic_ideal.a2a_s, 4 * 6.12e-6);
	REL_EQ(ist.same_traffic_ideal.a2a_senders_s, 4 * 6.12e-6);
	REL_EQ(ist.same_traffic_ideal.total_s, ist.ideal.total_s);
	ck_assert_int_eq(rlb_sim_summary(isim, &sum, &err), 0);
	REL_EQ(sum.fraction_of_same_traffic_ideal, 1.0);
	REL_EQ(sum.gpu_after.max, 1.0);

	rlb_sim_free(ssim);
	rlb_sim_free(rsim);
	rlb_sim_free(wsim);
	rlb_sim_free(isim);
	hot_case_release(&t, &ts, &plan, &l, &s, &q);
}
END_TEST

/*
 * relibra's window over interleaved layers: the hot case on 2 MoE layers,
 * each replica's copy 40 us + 1.2288 us (NVLink latency 40 us), a dense
 * part of 0.5 us forward per layer, C_fwd 24.576 us.  Not interleaved:
 * layer 0 hides 0.5 us, layer 1 25.076 us.  Behind 3 dense layers each
 * (period 4, offset 3): layer 0 hides 2 us, layer 1 26.576 us.
 */
START_TEST(test_interleaved_window)
{
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_step_plan plan;
	struct rlb_traffic t, ts;
	struct rlb_sim *sim = NULL;
	struct rlb_sim_opts o;
	struct rlb_sim_step st;
	struct rlb_err err = {0};
	struct seqs q;
	int inter;

	hot_case_layers(&cfg, &q, &s, &l, &plan, 2);
	traffic_of(&t, &cfg, &plan, &q, &s, &l);
	traffic_of(&ts, &cfg, NULL, &q, &s, &l);
	rlb_sim_opts_for_policy(&o, RLB_POLICY_RELIBRA);
	cfg.cluster.nvlink_latency_us = 40;
	cfg.model.dense_time_ms = 0.0015;
	for (inter = 0; inter < 2; inter++) {
		cfg.model.moe_layer_period = inter ? 4 : 1;
		cfg.model.moe_layer_offset = inter ? 3 : 0;
		ck_assert_int_eq(rlb_sim_new(&sim, &cfg, &o, &err), 0);
		ck_assert_msg(rlb_sim_add_step(sim, &s, &l, &plan, &t, &ts, &st, &err) == 0,
			      "%s", err.msg);
		REL_EQ(st.policy.expert_s, 2 * 3 * 24.576e-6);
		if (inter)
			REL_EQ(st.policy.replication_s, (41.2288 - 2) * 1e-6 +
						       (41.2288 - 26.576) * 1e-6);
		else
			REL_EQ(st.policy.replication_s, (41.2288 - 0.5) * 1e-6 +
						       (41.2288 - 25.076) * 1e-6);
		REL_EQ(st.policy.dense_s, (inter ? 8 : 2) * 1.5e-6);
		rlb_sim_free(sim);
		sim = NULL;
	}
	hot_case_release(&t, &ts, &plan, &l, &s, &q);
}
END_TEST

/*
 * The all-to-all's excess split: one node of 4 GPUs, 4 experts (e on GPU
 * e), top-1, one layer; each rank holds 100 tokens, all for expert 0.
 * GPUs 1-3 each send 100 NVLink copies, GPU 0 receives 300: per phase
 * 1 us + 128 B * (75, 100, 300) / 10 GB/s = 1.96 us at the mean, 2.28 us
 * for the busiest sender, 4.84 us with the receiver; no RDMA.
 */
START_TEST(test_a2a_excess)
{
	static const uint32_t len[4] = { 100, 100, 100, 100 };
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_traffic t;
	struct rlb_sim *sim = NULL;
	struct rlb_sim_opts o;
	struct rlb_sim_step st;
	struct rlb_sim_summary sum;
	struct rlb_err err = {0};
	struct seqs q;
	uint32_t i;

	toy_config(&cfg, 1, 4, 4, 1, 1);
	cfg.parallel.micro_batch_tokens = 100;
	seqs_init(&q, 4, len, 1, 1);	/* calloc: every id is expert 0 */
	build(&cfg, &q, &s, &l);
	for (i = 0; i < 4; i++)
		ck_assert_uint_eq(s.chunks[i].rank, i);
	traffic_of(&t, &cfg, NULL, &q, &s, &l);
	ck_assert_uint_eq(t.nvlink_send[1], 100);
	ck_assert_uint_eq(t.nvlink_recv[0], 300);
	rlb_sim_opts_for_policy(&o, RLB_POLICY_STATIC);
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, &o, &err), 0);
	ck_assert_msg(rlb_sim_add_step(sim, &s, &l, NULL, &t, &t, &st, &err) == 0, "%s", err.msg);
	REL_EQ(st.ideal.a2a_s, 4 * 1.96e-6);
	REL_EQ(st.policy.a2a_even_s, 4 * 1.96e-6);
	REL_EQ(st.policy.a2a_senders_s, 4 * 2.28e-6);
	REL_EQ(st.policy.a2a_s, 4 * 4.84e-6);
	ck_assert(st.policy.a2a_rdma_s == 0);
	/* informational: the step's total leaves them out */
	REL_EQ(st.policy.total_s, st.policy.dense_s + st.policy.expert_s + st.policy.a2a_s);
	ck_assert_int_eq(rlb_sim_summary(sim, &sum, &err), 0);
	REL_EQ(sum.policy_time.a2a_senders_s, 4 * 2.28e-6);
	REL_EQ(sum.same_traffic_ideal.a2a_even_s, 4 * 1.96e-6);

	rlb_sim_free(sim);
	rlb_traffic_release(&t);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}
END_TEST

/*
 * The relayed dispatch: 2 nodes x 2 GPUs, 4 experts (one per GPU),
 * top-1, 2 layers, four sequences of 300 tokens, one per rank.  Layer 0:
 * rank 0 sends all 300 tokens to expert 2 (GPU 2, its rail GPU on node
 * 1); layer 1 the same, and rank 1 one token to expert 3; every other
 * token stays on its GPU.  Directly, GPU 0 sends 300 RDMA copies: 4 +
 * 300 * 128 / 5e3 = 11.68 us per phase in both layers.  Relayed, layer 0
 * splits C = 300 as 150 + 150: 7.84 us of RDMA, and 150 copies cross
 * NVLink at each end (1 + 150 * 128 / 1e4 = 2.92 us); layer 1 splits 301
 * as 151 (lane 0, which has more) + 150: 7.8656 us, and 149 copies cross
 * NVLink at each end (2.9072 us).  With NVLink at 0.5 GB/s the relay
 * would take 39.4 us (39.144 in layer 1) and both layers keep the direct
 * dispatch.
 */
static void relay_case(double nvlink_gbps, int relay, struct rlb_sim_step *st)
{
	static const uint32_t len[4] = { 300, 300, 300, 300 };
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_traffic t;
	struct rlb_sim *sim = NULL;
	struct rlb_sim_opts o;
	struct rlb_err err = {0};
	struct seqs q;
	uint32_t r, layer, tok;

	toy_config(&cfg, 2, 2, 4, 1, 2);
	cfg.cluster.nvlink_gbps = nvlink_gbps;
	cfg.parallel.micro_batch_tokens = 300;
	seqs_init(&q, 4, len, 2, 1);
	for (r = 0; r < 4; r++)
		for (layer = 0; layer < 2; layer++)
			for (tok = 0; tok < 300; tok++)
				*seq_id(&q, r, layer, tok, 0) = (uint16_t)(r == 0 ? 2 : r);
	*seq_id(&q, 1, 1, 0, 0) = 3;
	build(&cfg, &q, &s, &l);
	for (r = 0; r < 4; r++)
		ck_assert_uint_eq(s.chunks[r].rank, r);
	ck_assert_msg(rlb_traffic_init(&t, NULL, &l, 2, &err) == 0, "%s", err.msg);
	ck_assert_ptr_null(t.rdma_to_node);
	ck_assert_int_eq(rlb_traffic_count_nodes(&t, &err), 0);
	for (r = 0; r < 4; r++) {
		struct rlb_seq seq;

		seq_at(&q, r, &seq);
		rlb_traffic_add_seq(&t, &s, r, &seq, 1);
	}
	ck_assert_int_eq(rlb_traffic_count_nodes(&t, &err), 0);	/* already there */
	/* [layer][gpu][node] */
	ck_assert_uint_eq(t.rdma_to_node[0 * 2 + 1], 300);
	ck_assert_uint_eq(t.rdma_to_node[(2 * 2 + 0) * 2 + 1], 300);
	ck_assert_uint_eq(t.rdma_to_node[(2 * 2 + 1) * 2 + 1], 1);
	ck_assert_uint_eq(t.rdma_to_node[(2 * 2 + 1) * 2 + 0], 0);
	rlb_sim_opts_for_policy(&o, RLB_POLICY_STATIC);
	ck_assert_int_eq(o.relay, 0);
	o.relay = relay;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, &o, &err), 0);
	ck_assert_msg(rlb_sim_add_step(sim, &s, &l, NULL, &t, &t, st, &err) == 0, "%s", err.msg);
	rlb_sim_free(sim);
	if (relay) {
		/* without the per-node counts the relay cannot run; asked too late */
		struct rlb_traffic t2;
		struct rlb_seq seq;

		ck_assert_int_eq(rlb_traffic_init(&t2, NULL, &l, 2, &err), 0);
		seq_at(&q, 0, &seq);
		rlb_traffic_add_seq(&t2, &s, 0, &seq, 1);
		ck_assert_int_eq(rlb_traffic_count_nodes(&t2, &err), RLB_EINVAL);
		ck_assert_int_eq(rlb_sim_new(&sim, &cfg, &o, &err), 0);
		ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t2, &t2, NULL, &err),
				 RLB_EINVAL);
		ck_assert_msg(strstr(err.msg, "rlb_traffic_count_nodes") != NULL, "%s", err.msg);
		rlb_sim_free(sim);
		rlb_traffic_release(&t2);
	}
	rlb_traffic_release(&t);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}

START_TEST(test_relay)
{
	struct rlb_sim_step direct, relayed, slow;

	relay_case(10, 0, &direct);
	relay_case(10, 1, &relayed);
	relay_case(0.5, 1, &slow);
	REL_EQ(direct.policy.a2a_s, 4 * (11.68e-6 + 11.68e-6));
	ck_assert(direct.policy.a2a_nvlink_s == 0);
	ck_assert(direct.bytes.a2a_nvlink == 0);

	REL_EQ(relayed.policy.a2a_s, 4 * (7.84e-6 + 7.8656e-6));
	REL_EQ(relayed.policy.a2a_rdma_s, 4 * (7.84e-6 + 7.8656e-6));
	REL_EQ(relayed.policy.a2a_nvlink_s, 4 * (2.92e-6 + 2.9072e-6));
	/* the busiest sender is the busiest GPU of either network */
	REL_EQ(relayed.policy.a2a_senders_s, 4 * (7.84e-6 + 7.8656e-6));
	/* the mean: 300 and 301 RDMA copies, 300 and 298 NVLink copies over 4 GPUs */
	REL_EQ(relayed.policy.a2a_even_s, 4 * (4e-6 + 75 * 0.0256e-6 + 4e-6 + 75.25 * 0.0256e-6));
	REL_EQ(relayed.bytes.a2a_rdma, direct.bytes.a2a_rdma);
	REL_EQ(relayed.bytes.a2a_rdma, 4.0 * 128 * 601);
	REL_EQ(relayed.bytes.a2a_nvlink, 4.0 * 128 * (300 + 298));
	/* the same-traffic ideal has the policy's dispatch, the ideal its own */
	REL_EQ(relayed.same_traffic_ideal.a2a_s, relayed.policy.a2a_s);
	REL_EQ(relayed.ideal.a2a_s, direct.ideal.a2a_s);
	REL_EQ(relayed.policy.total_s - relayed.policy.a2a_s,
	       direct.policy.total_s - direct.policy.a2a_s);

	/* slow NVLink: both layers keep the direct dispatch */
	REL_EQ(slow.policy.a2a_s, 4 * (11.68e-6 + 11.68e-6));
	ck_assert(slow.bytes.a2a_nvlink == 0);
}
END_TEST

/* Planning: 2 ms of planner wall time with 25% hidden costs 1.5 ms. */
START_TEST(test_planning_overlap)
{
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_step_plan plan;
	struct rlb_traffic t;
	struct rlb_sim *sim = NULL;
	struct rlb_sim_step st;
	struct rlb_err err = {0};
	struct seqs q;

	hot_case(&cfg, &q, &s, &l, &plan);
	cfg.balancer.planner_overlap = 0.25;
	plan.planner_ns = 2000000;
	traffic_of(&t, &cfg, &plan, &q, &s, &l);
	strcpy(cfg.balancer.policy, "replicate");
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, &plan, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.planning_s, 1.5e-3);
	REL_EQ(st.policy.total_s, 93.6544e-6 + 1.5e-3);
	ck_assert_uint_eq(st.planner_ns, 2000000);
	rlb_sim_free(sim);
	rlb_traffic_release(&t);
	rlb_step_plan_release(&plan);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}
END_TEST

/* A plan with the given homes (layer 0) and one instance per expert. */
static void homes_plan(struct rlb_step_plan *p, const struct rlb_loads *l,
		       const uint32_t *home)
{
	struct rlb_err err = {0};
	uint32_t e, r;

	ck_assert_int_eq(rlb_step_plan_init(p, 0, l->micro_batches, 1, 4, 4, 2, 0,
					    RLB_SPLIT_LOCALITY, &err), 0);
	memcpy(p->home, home, 4 * sizeof(*home));
	for (e = 0; e < 4; e++) {
		uint32_t load = 0;

		for (r = 0; r < 4; r++)
			load += l->count[rlb_loads_index(l, 0, 0, r, e)];
		ck_assert_int_eq(rlb_step_plan_add(p, 0, 0, e, home[e], load, &err), 0);
	}
	ck_assert_msg(rlb_step_plan_check(p, l, &err) == 0, "%s", err.msg);
}

/*
 * 2 nodes x 2 GPUs, 4 experts; migration_bytes_per_param 14: an expert
 * moves 6144 * 14 = 86016 bytes.  Step A swaps experts 0 and 2 across
 * the nodes (from the static layout): GPUs 0 and 2 each send and receive
 * one expert over RDMA: 4 us + 86016 B / 5 GB/s = 21.2032 us.  Step B
 * keeps the homes: nothing.  Step C swaps experts 1 and 2 inside node 0
 * (GPUs 0 and 1): NVLink, 1 us + 86016 B / 10 GB/s = 9.6016 us.
 */
START_TEST(test_migration)
{
	static const uint32_t len[1] = { 4 };
	static const uint32_t ha[4] = { 2, 1, 0, 3 }, hc[4] = { 2, 0, 1, 3 };
	const uint32_t *homes[3] = { ha, ha, hc };
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_sim *sim = NULL;
	struct rlb_sim_step st[3];
	struct rlb_sim_summary sum;
	struct rlb_err err = {0};
	struct seqs q;
	uint32_t tok;
	int k;

	toy_config(&cfg, 2, 2, 4, 1, 1);
	seqs_init(&q, 1, len, 1, 1);
	for (tok = 0; tok < 4; tok++)
		*seq_id(&q, 0, 0, tok, 0) = (uint16_t)tok;
	build(&cfg, &q, &s, &l);
	strcpy(cfg.balancer.policy, "relibra");
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	for (k = 0; k < 3; k++) {
		struct rlb_step_plan plan;
		struct rlb_traffic t;

		homes_plan(&plan, &l, homes[k]);
		traffic_of(&t, &cfg, &plan, &q, &s, &l);
		ck_assert_msg(rlb_sim_add_step(sim, &s, &l, &plan, &t, NULL, &st[k], &err) == 0,
			      "%s", err.msg);
		rlb_traffic_release(&t);
		rlb_step_plan_release(&plan);
	}
	ck_assert_uint_eq(st[0].migrated_experts, 2);
	ck_assert_uint_eq(st[0].moved_in_node, 0);
	REL_EQ(st[0].policy.migration_s, 21.2032e-6);
	REL_EQ(st[0].bytes.migration_rdma, 2 * 86016.0);
	ck_assert(st[0].bytes.migration_nvlink == 0);
	ck_assert(st[1].policy.migration_s == 0);
	ck_assert_uint_eq(st[1].migrated_experts, 0);
	ck_assert_uint_eq(st[2].migrated_experts, 0);
	ck_assert_uint_eq(st[2].moved_in_node, 2);
	REL_EQ(st[2].policy.migration_s, 9.6016e-6);
	REL_EQ(st[2].bytes.migration_nvlink, 2 * 86016.0);
	/* migration is the only difference between steps A and B */
	REL_EQ(st[0].policy.total_s - st[1].policy.total_s, 21.2032e-6);
	ck_assert_int_eq(rlb_sim_summary(sim, &sum, &err), 0);
	ck_assert_uint_eq(sum.steps, 3);
	ck_assert_uint_eq(sum.migrated_experts, 2);
	ck_assert_uint_eq(sum.moved_in_node, 2);
	REL_EQ(sum.policy_time.migration_s, 21.2032e-6 + 9.6016e-6);
	REL_EQ(sum.step_time_s, sum.policy_time.total_s / 3);
	rlb_sim_free(sim);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}
END_TEST

/*
 * Dense estimate: one rank, budget 4, one sequence of 8 tokens cut into
 * chunks [0, 4) (micro-batch 0) and [4, 8) (micro-batch 1).  Per layer:
 * projections 24576 FLOP and router 2048 each; attention 4*2*8*ctx with
 * ctx 1+2+3+4 = 10 and 5+6+7+8 = 26.  The slower micro-batch does not
 * set the other's time.  With first_dense_layers 1 (dense_ffn 16) each
 * micro-batch adds projections + attention + 6*4*64*16 = 24576 FLOP per
 * dense layer.
 * A window of 3 tokens caps the context at 1+2+3+3 = 9 and 3*4 = 12; of
 * 6, the second micro-batch's at 5+6+6+6 = 23, and with
 * full_attention_period 2 the MoE layer (layer 1) attends in full.
 * Linear attention (1 key head of 4, 2 value heads of 8): per token
 * 2*64*(8 + 32 + 4) + 2*2*8*64 + 2*(6*4*8 + 2*64*(12 + 16)) = 15232 FLOP,
 * whatever the context; with full_attention_period 2 layer 0 is linear.
 * An output gate adds 2*4*64*2*8 = 8192 FLOP of projection per layer.
 * Chunks of 3 positions: contexts 1+2+3+1 = 7 and 2+3+1+2 = 8.
 * One linear value head: 2*64*(8 + 16 + 2) + 2*8*64 + 6*4*8 +
 * 2*64*(12 + 16) = 8128 FLOP per token.
 * MLA (kv_lora_rank 4, q_lora_rank 2, rotary 2, value head 6), per token:
 * 2*(64*2 + 2*2*8 + 64*(4 + 2) + 4*2*(8 - 2 + 6) + 2*6*64) = 2816 FLOP of
 * projections; attention 2*ctx*2*(8 + 6) = 56 ctx.
 * With recompute: 4 passes.  dense_time_ms replaces the estimate.
 */
START_TEST(test_dense_estimate)
{
	static const uint32_t len[1] = { 8 };
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_traffic t;
	struct rlb_sim *sim = NULL;
	struct rlb_sim_step st;
	struct rlb_err err = {0};
	struct seqs q;
	double moe0, moe1, first0, first1, rate = 0.5e12;
	double moe1w, first0w, first1w;

	toy_config(&cfg, 1, 1, 4, 1, 1);
	cfg.parallel.micro_batch_tokens = 4;
	cfg.model.q_heads = 2;
	cfg.model.kv_heads = 1;
	cfg.model.head_dim = 8;
	cfg.model.first_dense_layers = 1;
	cfg.model.dense_ffn = 16;
	seqs_init(&q, 1, len, 1, 1);
	build(&cfg, &q, &s, &l);
	ck_assert_uint_eq(s.micro_batches, 2);
	traffic_of(&t, &cfg, NULL, &q, &s, &l);
	moe0 = (24576 + 2048 + 640) / rate;
	moe1 = (24576 + 2048 + 4 * 2 * 8 * 26) / rate;
	first0 = (24576 + 640 + 24576) / rate;
	first1 = (24576 + 4 * 2 * 8 * 26 + 24576) / rate;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * (moe0 + moe1 + first0 + first1));
	rlb_sim_free(sim);
	sim = NULL;
	/* interleaved (period 3): the first dense layer and 2 more per MoE layer */
	cfg.model.moe_layer_period = 3;
	cfg.model.moe_layer_offset = 1;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * (moe0 + moe1 + 3 * (first0 + first1)));
	rlb_sim_free(sim);
	sim = NULL;
	cfg.model.moe_layer_period = 1;
	cfg.model.moe_layer_offset = 0;

	/* sliding-window attention */
	cfg.model.attention_window = 3;
	moe1w = (24576 + 2048 + 4 * 2 * 8 * 12) / rate;
	first0w = (24576 + 4 * 2 * 8 * 9 + 24576) / rate;
	first1w = (24576 + 4 * 2 * 8 * 12 + 24576) / rate;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * ((24576 + 2048 + 4 * 2 * 8 * 9) / rate + moe1w +
				       first0w + first1w));
	REL_EQ(st.ideal.dense_s, st.policy.dense_s);
	rlb_sim_free(sim);
	sim = NULL;
	cfg.model.attention_window = 6;
	cfg.model.full_attention_period = 2;
	first1w = (24576 + 4 * 2 * 8 * 23 + 24576) / rate;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * (moe0 + moe1 + first0 + first1w));
	rlb_sim_free(sim);
	sim = NULL;
	/* linear attention */
	cfg.model.attention_window = 0;
	cfg.model.linear_key_heads = 1;
	cfg.model.linear_value_heads = 2;
	cfg.model.linear_key_head_dim = 4;
	cfg.model.linear_value_head_dim = 8;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * (moe0 + moe1 + 2 * (4 * 15232 + 24576) / rate));
	rlb_sim_free(sim);
	sim = NULL;
	cfg.model.full_attention_period = 0;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * 2 * ((4 * 15232 + 2048) + (4 * 15232 + 24576)) / rate);
	rlb_sim_free(sim);
	sim = NULL;
	/* one value head is linear attention too: 8128 FLOP per token */
	cfg.model.linear_value_heads = 1;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * 2 * ((4 * 8128 + 2048) + (4 * 8128 + 24576)) / rate);
	rlb_sim_free(sim);
	sim = NULL;
	cfg.model.linear_key_heads = cfg.model.linear_value_heads = 0;
	cfg.model.linear_key_head_dim = cfg.model.linear_value_head_dim = 0;
	/* a window no sequence reaches changes nothing */
	cfg.model.attention_window = 8;
	cfg.model.full_attention_period = 0;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * (moe0 + moe1 + first0 + first1));
	rlb_sim_free(sim);
	sim = NULL;
	cfg.model.attention_window = 0;
	/* chunked attention on every layer */
	cfg.model.attention_chunk = 3;
	cfg.model.full_attention_period = 0;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * ((24576 + 2048 + 64 * 7) + (24576 + 2048 + 64 * 8) +
				       (24576 + 64 * 7 + 24576) + (24576 + 64 * 8 + 24576)) / rate);
	rlb_sim_free(sim);
	sim = NULL;
	/* chunks of 5: [0, 4) inside the first (10), [4, 8) across (5+1+2+3) */
	cfg.model.attention_chunk = 5;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * ((24576 + 2048 + 64 * 10) + (24576 + 2048 + 64 * 11) +
				       (24576 + 64 * 10 + 24576) + (24576 + 64 * 11 + 24576)) / rate);
	rlb_sim_free(sim);
	sim = NULL;
	/* of 9: both inside the first, [4, 8) from its middle: full attention */
	cfg.model.attention_chunk = 9;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * (moe0 + moe1 + first0 + first1));
	rlb_sim_free(sim);
	sim = NULL;
	cfg.model.attention_chunk = 0;
	/* multi-head latent attention */
	cfg.model.kv_lora_rank = 4;
	cfg.model.q_lora_rank = 2;
	cfg.model.qk_rope_head_dim = 2;
	cfg.model.v_head_dim = 6;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * ((11264 + 560 + 2048) + (11264 + 1456 + 2048) +
				       (11264 + 560 + 24576) + (11264 + 1456 + 24576)) / rate);
	rlb_sim_free(sim);
	sim = NULL;
	cfg.model.kv_lora_rank = cfg.model.q_lora_rank = 0;
	cfg.model.qk_rope_head_dim = cfg.model.v_head_dim = 0;
	/* an output gate: one more projection of the query's width, 2*4*64*2*8 FLOP */
	cfg.model.attention_output_gate = 1;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 3 * (moe0 + moe1 + first0 + first1 + 4 * 8192 / rate));
	rlb_sim_free(sim);
	sim = NULL;
	cfg.model.attention_output_gate = 0;

	cfg.parallel.recompute = 1;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	REL_EQ(st.policy.dense_s, 4 * (moe0 + moe1 + first0 + first1));
	/* 4 rows of expert 0 per micro-batch: the HBM floor, 6.144 us */
	REL_EQ(st.policy.expert_s, 2 * 4 * 6.144e-6);
	rlb_sim_free(sim);
	sim = NULL;

	cfg.model.dense_time_ms = 0.5;
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, NULL, &t, NULL, &st, &err), 0);
	/* 2 micro-batches x (1 MoE + 1 dense layer) x 0.5 ms */
	REL_EQ(st.policy.dense_s, 2e-3);
	rlb_sim_free(sim);
	rlb_traffic_release(&t);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}
END_TEST

/* The step of one sim of cfg over (s, l, t) into st. */
static void step_of(const struct rlb_config *cfg, const struct rlb_schedule *s,
		    const struct rlb_loads *l, const struct rlb_traffic *t,
		    struct rlb_sim_step *st)
{
	struct rlb_sim *sim = NULL;
	struct rlb_err err = {0};

	ck_assert_int_eq(rlb_sim_new(&sim, cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, s, l, NULL, t, NULL, st, &err), 0);
	rlb_sim_free(sim);
}

/*
 * A layer pattern, on the case of test_dense_estimate (one rank, two
 * micro-batches of 4 tokens, contexts 10 and 26; projections 24576 FLOP,
 * router 2048, a dense FFN of 16 24576).  A decoder layer is "*E" and a
 * dense one "*-": the same dense time, shared experts included.
 * A Mamba-2 mixer of 2 heads of 4 (d 8), state 8, 1 group, per token:
 * in_proj 2*64*(16 + 16 + 2) = 4352, conv1d 2*4*(8 + 16) = 192, C B^T
 * 2*128*8 = 2048, its product with x 2*128*8 = 2048, the chunk state
 * and the state's output 2*8*8 each, out_proj 2*8*64 = 1024: 9920 FLOP
 * whatever the context; with 2 groups in_proj 2*64*(16 + 32 + 2) = 6400,
 * conv1d 2*4*(8 + 32) = 320, C B^T 4096: 14144.  Without gated_ffn the
 * dense FFN is 2/3 of it, 16384 FLOP.  dense_time_ms: every layer of the
 * pattern costs it.
 */
START_TEST(test_pattern_dense)
{
	static const uint32_t len[1] = { 8 };
	struct rlb_config cfg, dec;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_traffic t;
	struct rlb_sim_step st, ds;
	struct seqs q;
	double rate = 0.5e12;

	toy_config(&dec, 1, 1, 4, 1, 1);
	dec.parallel.micro_batch_tokens = 4;
	dec.model.q_heads = 2;
	dec.model.kv_heads = 1;
	dec.model.head_dim = 8;
	dec.model.dense_ffn = 16;
	dec.model.shared_experts = 1;
	dec.model.shared_expert_ffn = 16;
	seqs_init(&q, 1, len, 1, 1);
	build(&dec, &q, &s, &l);
	ck_assert_uint_eq(s.micro_batches, 2);
	traffic_of(&t, &dec, NULL, &q, &s, &l);

	/* "*E" is a decoder MoE layer, "*-*E" a dense one before it */
	cfg = dec;
	strcpy(cfg.model.layer_pattern, "*E");
	step_of(&dec, &s, &l, &t, &ds);
	step_of(&cfg, &s, &l, &t, &st);
	REL_EQ(st.policy.dense_s, ds.policy.dense_s);
	REL_EQ(st.policy.total_s, ds.policy.total_s);
	ck_assert(ds.policy.dense_s > 0);
	dec.model.first_dense_layers = 1;
	strcpy(cfg.model.layer_pattern, "*-*E");
	step_of(&dec, &s, &l, &t, &ds);
	step_of(&cfg, &s, &l, &t, &st);
	REL_EQ(st.policy.dense_s, ds.policy.dense_s);
	REL_EQ(st.ideal.total_s, ds.ideal.total_s);
	REL_EQ(st.policy.dense_s, 3 * ((24576 + 640 + 24576) + (24576 + 4 * 2 * 8 * 26 + 24576) +
				       (24576 + 640 + 2048) + (24576 + 4 * 2 * 8 * 26 + 2048)) / rate +
				  3 * 2 * 3.072e-6);	/* the shared expert: 6144 bytes at 2 GB/s */
	cfg.model.shared_experts = 0;

	/* Mamba-2 */
	strcpy(cfg.model.layer_pattern, "ME");
	cfg.model.mamba_heads = 2;
	cfg.model.mamba_head_dim = 4;
	cfg.model.mamba_state = 8;
	step_of(&cfg, &s, &l, &t, &st);
	REL_EQ(st.policy.dense_s, 3 * 2 * (4 * 9920 + 2048) / rate);
	cfg.model.mamba_groups = 2;
	step_of(&cfg, &s, &l, &t, &st);
	REL_EQ(st.policy.dense_s, 3 * 2 * (4 * 14144 + 2048) / rate);

	/* no gate: the dense FFN's two matrices */
	strcpy(cfg.model.layer_pattern, "-E");
	step_of(&cfg, &s, &l, &t, &st);
	REL_EQ(st.policy.dense_s, 3 * 2 * (24576 + 2048) / rate);
	cfg.model.gated_ffn = 0;
	step_of(&cfg, &s, &l, &t, &st);
	REL_EQ(st.policy.dense_s, 3 * 2 * (16384 + 2048) / rate);

	/* 2 micro-batches x 4 layers x 0.5 ms */
	strcpy(cfg.model.layer_pattern, "M*-E");
	cfg.model.dense_time_ms = 0.5;
	step_of(&cfg, &s, &l, &t, &st);
	REL_EQ(st.policy.dense_s, 4e-3);
	rlb_traffic_release(&t);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}
END_TEST

/*
 * Latent MoE: the hot case with moe_latent 16, a quarter of hidden 64.
 * The experts work in the latent: 3 * 16 * 32 = 1536 params, 3072 FLOP
 * per row and weight bytes, 6.144 ns * (m + 100) for m rows, the same as
 * a model of hidden 16; a token copy is 32 bytes, a quarter of 128.  The
 * MoE layer's dense part adds the projections 64 -> 16 -> 64, 4 * 64 * 16
 * = 4096 FLOP per token beside the router's 2 * 64 * 2 = 256.
 * Static: GPU 0's 1200 rows 6.144 ns * 1300 = 7.9872 us; rank 1's 600
 * copies 1 + 600 * 32 / 10^4 = 2.92 us; dense, 800 tokens per rank,
 * 3 * 800 * (256 + 4096) / 0.5e12 = 20.8896 us.  Step 3 * 7.9872 +
 * 4 * 2.92 + 20.8896 = 56.5312 us.  The replica: GPU 1's 2 * gemm(400)
 * = 6.144 us, 200 copies each way 1.64 us, weights and gradient 1 +
 * 3072 / 10^4 = 1.3072 us each: 3 * 6.144 + 4 * 1.64 + 2 * 1.3072 +
 * 20.8896 = 48.496 us.
 */
START_TEST(test_latent_moe)
{
	struct rlb_config cfg, narrow;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_step_plan plan;
	struct rlb_traffic t, ts;
	struct rlb_sim_params p, pn;
	struct rlb_sim_step full, st, rst, ns;
	struct rlb_sim *sim = NULL;
	struct rlb_sim_opts o;
	struct rlb_err err = {0};
	struct seqs q;
	double row, mig, row_n, mig_n;
	uint64_t m;

	hot_case(&cfg, &q, &s, &l, &plan);
	traffic_of(&t, &cfg, &plan, &q, &s, &l);
	traffic_of(&ts, &cfg, NULL, &q, &s, &l);
	step_of(&cfg, &s, &l, &ts, &full);
	cfg.model.moe_latent = 16;
	narrow = cfg;
	narrow.model.moe_latent = 0;
	narrow.model.hidden = 16;

	rlb_sim_params_init(&p, &cfg);
	rlb_sim_params_init(&pn, &narrow);
	REL_EQ(p.expert_params, 1536.0);
	REL_EQ(p.expert_flops_per_row, 3072.0);
	REL_EQ(p.expert_weight_bytes, 3072.0);
	REL_EQ(p.expert_grad_bytes, 3072.0);
	REL_EQ(p.migration_bytes, 14 * 1536.0);
	REL_EQ(p.token_bytes, 32.0);
	for (m = 0; m <= 2000; m += 250)
		ck_assert(rlb_sim_gemm_s(&p, m) == rlb_sim_gemm_s(&pn, m));
	rlb_reorder_costs(&cfg, &row, &mig);
	rlb_reorder_costs(&narrow, &row_n, &mig_n);
	REL_EQ(row, 6.0 * 3 * 16 * 32 / 0.5e12);
	ck_assert(row == row_n && mig == mig_n);

	step_of(&cfg, &s, &l, &ts, &st);
	REL_EQ(st.policy.expert_s, 3 * 7.9872e-6);
	REL_EQ(st.policy.a2a_s, 4 * 2.92e-6);
	REL_EQ(st.policy.dense_s, 20.8896e-6);
	REL_EQ(st.policy.total_s, 56.5312e-6);
	/* the all-to-all's bytes scale by l / h */
	REL_EQ(st.bytes.a2a_nvlink, 4 * 800 * 32.0);
	REL_EQ(st.bytes.a2a_nvlink, full.bytes.a2a_nvlink / 4);
	/* the expert GEMMs and the all-to-all are those of a model of hidden l */
	step_of(&narrow, &s, &l, &ts, &ns);
	REL_EQ(st.policy.expert_s, ns.policy.expert_s);
	REL_EQ(st.policy.a2a_s, ns.policy.a2a_s);
	REL_EQ(st.ideal.expert_s, ns.ideal.expert_s);
	/* and the projections are the dense part's difference from the full-width model */
	REL_EQ(st.policy.dense_s - full.policy.dense_s, 3 * 800 * 4096 / 0.5e12);

	rlb_sim_opts_for_policy(&o, RLB_POLICY_REPLICATE);
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, &o, &err), 0);
	ck_assert_msg(rlb_sim_add_step(sim, &s, &l, &plan, &t, &ts, &rst, &err) == 0, "%s", err.msg);
	REL_EQ(rst.policy.expert_s, 3 * 6.144e-6);
	REL_EQ(rst.policy.a2a_s, 4 * 1.64e-6);
	REL_EQ(rst.policy.replication_s, 1.3072e-6);
	REL_EQ(rst.policy.grad_reduce_s, 1.3072e-6);
	REL_EQ(rst.policy.total_s, 48.496e-6);
	REL_EQ(rst.bytes.replica_nvlink, 3072.0);
	REL_EQ(rst.bytes.grad_nvlink, 3072.0);
	rlb_sim_free(sim);
	hot_case_release(&t, &ts, &plan, &l, &s, &q);
}
END_TEST

/*
 * A replica kept on the same GPU over consecutive micro-batches is
 * copied once and reduced once: two micro-batches of the hot case.
 */
START_TEST(test_replica_reuse)
{
	static const uint32_t len[4] = { 800, 800, 800, 800 };
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_step_plan plan;
	struct rlb_traffic t;
	struct rlb_sim *sim = NULL;
	struct rlb_sim_step st;
	struct rlb_err err = {0};
	struct seqs q;
	uint32_t i, tok, mb;

	toy_config(&cfg, 1, 2, 2, 1, 1);
	cfg.parallel.micro_batch_tokens = 800;
	seqs_init(&q, 4, len, 1, 1);
	for (i = 0; i < 4; i++)
		for (tok = 0; tok < 800; tok++)
			*seq_id(&q, i, 0, tok, 0) = tok < 600 ? 0 : 1;
	build(&cfg, &q, &s, &l);
	ck_assert_uint_eq(s.micro_batches, 2);
	ck_assert_int_eq(rlb_step_plan_init(&plan, 0, 2, 1, 2, 2, 2, 1, RLB_SPLIT_LOCALITY, &err), 0);
	for (mb = 0; mb < 2; mb++) {
		ck_assert_int_eq(rlb_step_plan_add(&plan, mb, 0, 0, 0, 800, &err), 0);
		ck_assert_int_eq(rlb_step_plan_add(&plan, mb, 0, 0, 1, 400, &err), 0);
		ck_assert_int_eq(rlb_step_plan_add(&plan, mb, 0, 1, 1, 400, &err), 0);
	}
	ck_assert_msg(rlb_step_plan_check(&plan, &l, &err) == 0, "%s", err.msg);
	traffic_of(&t, &cfg, &plan, &q, &s, &l);
	strcpy(cfg.balancer.policy, "replicate");
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, &plan, &t, NULL, &st, &err), 0);
	ck_assert_uint_eq(st.replicas, 2);
	ck_assert_uint_eq(st.replica_copies, 1);
	REL_EQ(st.policy.replication_s, 2.2288e-6);
	REL_EQ(st.policy.grad_reduce_s, 2.2288e-6);
	REL_EQ(st.policy.total_s, 2 * (93.6544e-6 - 2 * 2.2288e-6) + 2 * 2.2288e-6);
	rlb_sim_free(sim);
	rlb_traffic_release(&t);
	rlb_step_plan_release(&plan);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}
END_TEST

/* Same inputs, same bytes: two simulators of the hot case. */
START_TEST(test_determinism)
{
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_step_plan plan;
	struct rlb_traffic t[2], ts;
	struct rlb_sim *sim[2] = { NULL, NULL };
	struct rlb_sim_step st[2];
	struct rlb_sim_summary sum[2];
	struct rlb_err err = {0};
	struct seqs q;
	int k;

	hot_case(&cfg, &q, &s, &l, &plan);
	traffic_of(&ts, &cfg, NULL, &q, &s, &l);
	memset(st, 0, sizeof(st));
	memset(sum, 0, sizeof(sum));
	for (k = 0; k < 2; k++) {
		traffic_of(&t[k], &cfg, &plan, &q, &s, &l);
		ck_assert_int_eq(rlb_sim_new(&sim[k], &cfg, NULL, &err), 0);
		ck_assert_int_eq(rlb_sim_add_step(sim[k], &s, &l, &plan, &t[k], &ts, &st[k], &err), 0);
		ck_assert_int_eq(rlb_sim_summary(sim[k], &sum[k], &err), 0);
	}
	ck_assert_int_eq(memcmp(t[0].rdma_send, t[1].rdma_send, 2 * sizeof(uint64_t)), 0);
	ck_assert_int_eq(memcmp(t[0].nvlink_send, t[1].nvlink_send, 2 * sizeof(uint64_t)), 0);
	ck_assert_int_eq(memcmp(&st[0], &st[1], sizeof(st[0])), 0);
	ck_assert_int_eq(memcmp(&sum[0].policy_time, &sum[1].policy_time, sizeof(sum[0].policy_time)), 0);
	ck_assert_int_eq(memcmp(&sum[0].ideal, &sum[1].ideal, sizeof(sum[0].ideal)), 0);
	ck_assert_int_eq(memcmp(&sum[0].gpu_after, &sum[1].gpu_after, sizeof(sum[0].gpu_after)), 0);
	ck_assert_int_eq(memcmp(&sum[0].bytes, &sum[1].bytes, sizeof(sum[0].bytes)), 0);
	ck_assert(sum[0].fraction_of_ideal == sum[1].fraction_of_ideal);
	ck_assert(sum[0].tokens_per_s > 0);
	for (k = 0; k < 2; k++) {
		rlb_sim_free(sim[k]);
		rlb_traffic_release(&t[k]);
	}
	rlb_traffic_release(&ts);
	rlb_step_plan_release(&plan);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}
END_TEST

/*
 * The streaming pass on a written trace equals feeding the sequences by
 * hand; a plan of another trace is refused.
 */
START_TEST(test_traffic_step_trace)
{
	struct rlb_config cfg;
	struct rlb_trace_reader *r = NULL;
	struct rlb_pool *pool = NULL;
	struct rlb_schedule s, s2;
	struct rlb_loads l, l2;
	struct rlb_step_plan plan;
	struct rlb_traffic t, tr, ts;
	struct rlb_traffic *tv[2];
	struct rlb_err err = {0};
	struct seqs q;
	char path[512];
	size_t n;
	int ret;

	hot_case(&cfg, &q, &s, &l, &plan);
	traffic_of(&t, &cfg, &plan, &q, &s, &l);
	snprintf(path, sizeof(path), "%s/sim-%ld.rrt", rlb_test_tmpdir(), (long)getpid());
	write_trace(&cfg, &q, path);
	ck_assert_msg(rlb_trace_reader_open(&r, path, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_step_loads(r, 0, &cfg, RLB_PACK_IN_ORDER, &s2, &l2, NULL, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(rlb_traffic_init(&tr, &plan, &l2, 2, &err), 0);
	ck_assert_int_eq(rlb_traffic_init(&ts, NULL, &l2, 2, &err), 0);
	tv[0] = &tr;
	tv[1] = &ts;
	ck_assert_msg(rlb_traffic_step(r, &s2, tv, 2, NULL, &err) == 0, "%s", err.msg);
	n = (size_t)t.micro_batches * t.layers * t.ranks;
	ck_assert_int_eq(memcmp(t.nvlink_send, tr.nvlink_send, n * sizeof(uint64_t)), 0);
	ck_assert_int_eq(memcmp(t.nvlink_recv, tr.nvlink_recv, n * sizeof(uint64_t)), 0);
	ck_assert_uint_eq(ts.nvlink_send[1], 600);
	rlb_traffic_release(&tr);
	rlb_traffic_release(&ts);

	/* a plan whose quotas do not match the trace: rank 0 sends 800 rows of expert 0 */
	l2.count[rlb_loads_index(&l2, 0, 0, 0, 0)] = 100;
	ck_assert_int_eq(rlb_traffic_init(&tr, &plan, &l2, 2, &err), 0);
	tv[0] = &tr;
	ret = rlb_traffic_step(r, &s2, tv, 1, NULL, &err);
	ck_assert_int_eq(ret, RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "step 0: 500 expert rows are not in the plan (the plan does not belong to this trace)");
	rlb_traffic_release(&tr);
	/* the same with the rows counted by two threads */
	ck_assert_int_eq(rlb_pool_new(&pool, 2, &err), 0);
	ck_assert_int_eq(rlb_traffic_init(&tr, &plan, &l2, 2, &err), 0);
	ck_assert_int_eq(rlb_traffic_step(r, &s2, tv, 1, pool, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "step 0: 500 expert rows are not in the plan (the plan does not belong to this trace)");
	rlb_traffic_release(&tr);
	rlb_pool_free(pool);

	/* dimensions that do not match the step */
	ck_assert_int_eq(rlb_traffic_init(&tr, NULL, &l2, 1, &err), 0);
	tr.micro_batches = 3;
	ck_assert_int_eq(rlb_traffic_step(r, &s2, tv, 1, NULL, &err), RLB_EMISMATCH);
	tr.micro_batches = 1;
	rlb_traffic_release(&tr);

	rlb_trace_reader_free(r);
	unlink(path);
	rlb_traffic_release(&t);
	rlb_step_plan_release(&plan);
	rlb_loads_release(&l);
	rlb_loads_release(&l2);
	rlb_schedule_release(&s);
	rlb_schedule_release(&s2);
	seqs_free(&q);
}
END_TEST

/* Inputs that do not belong together are refused; the simulator is unchanged. */
START_TEST(test_errors)
{
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l, l3;
	struct rlb_step_plan plan;
	struct rlb_traffic t;
	struct rlb_sim *sim = NULL;
	struct rlb_sim_summary sum;
	struct rlb_err err = {0};
	struct seqs q;

	hot_case(&cfg, &q, &s, &l, &plan);
	traffic_of(&t, &cfg, &plan, &q, &s, &l);
	ck_assert_int_eq(rlb_sim_new(&sim, &cfg, NULL, &err), 0);
	/* loads of another shape */
	ck_assert_int_eq(rlb_loads_init(&l3, 1, 1, 2, 3, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l3, &plan, &t, NULL, NULL, &err), RLB_EINVAL);
	rlb_loads_release(&l3);
	ck_assert_int_eq(rlb_loads_init(&l3, 1, 2, 2, 2, &err), 0);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l3, &plan, &t, NULL, NULL, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "sim: plan of 1 micro-batches x 1 layers x 2 experts on 2 ranks (2 per node), loads of 1 x 2 x 2 on 2 (2 per node)");
	rlb_loads_release(&l3);
	ck_assert_int_eq(rlb_sim_add_step(sim, &s, &l, &plan, NULL, NULL, NULL, &err), RLB_EINVAL);
	ck_assert_int_eq(rlb_sim_summary(sim, &sum, &err), 0);
	ck_assert_uint_eq(sum.steps, 0);
	ck_assert(sum.policy_time.total_s == 0);
	/* a plan with another number of GPUs per node */
	rlb_traffic_release(&t);
	ck_assert_int_eq(rlb_traffic_init(&t, &plan, &l, 1, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "traffic: plan has 2 GPUs per node, expected 1");
	rlb_sim_free(sim);
	rlb_traffic_release(&t);
	rlb_step_plan_release(&plan);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}
END_TEST

/* A small deterministic generator (splitmix64). */
static uint64_t test_rand(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * The copies of one token, counted the plain way: its set of GPUs, then
 * per remote node one RDMA copy to the rail GPU and NVLink copies from
 * there, and NVLink copies to the GPUs of its own node.
 */
static void ref_token(uint64_t *rs, uint64_t *rr, uint64_t *ns, uint64_t *nr,
		      const uint32_t *gpus, uint32_t n, uint32_t src, uint32_t R,
		      uint32_t gpn)
{
	uint8_t dest[128] = { 0 };
	uint32_t i, d, node, lane = src % gpn;

	for (i = 0; i < n; i++)
		dest[gpus[i]] = 1;
	for (node = 0; node < R / gpn; node++) {
		uint32_t rail = node * gpn + lane, any = 0;

		for (d = node * gpn; d < (node + 1) * gpn; d++)
			any |= dest[d];
		if (!any)
			continue;
		if (node == src / gpn) {
			for (d = node * gpn; d < (node + 1) * gpn; d++)
				if (dest[d] && d != src) {
					ns[src]++;
					nr[d]++;
				}
			continue;
		}
		rs[src]++;
		rr[rail]++;
		for (d = node * gpn; d < (node + 1) * gpn; d++)
			if (dest[d] && d != rail) {
				ns[rail]++;
				nr[d]++;
			}
	}
}

/*
 * Random routing on 2 nodes of gpn GPUs (8 ranks: the bit-mask path; 80
 * ranks: the general one; 16 ranks of 8 GPUs per node: the bit-mask path
 * with the nodes taken from the GPU mask), a plan replicating every third expert on the
 * next GPU of its node with half its rows, both split rules: the traffic
 * equals a plain recount that walks every source's rows through
 * rlb_step_plan_split's counts, fed by hand or streamed from a trace by
 * 1, 3 or 8 threads (layer blocks of one or two layers, and more threads
 * than layers).
 */
START_TEST(test_traffic_reference)
{
	const uint32_t gpn = _i == 1 ? 40 : _i == 2 ? 8 : 4, R = 2 * gpn, E = 2 * R, L = 5,
		topk = 4;
	static const unsigned threads[] = { 1, 3, 8 };
	const enum rlb_split split = _i == 1 ? RLB_SPLIT_EVEN : RLB_SPLIT_LOCALITY;
	struct rlb_config cfg;
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_step_plan plan;
	struct rlb_traffic t, ts, *tv[1];
	struct rlb_trace_reader *r = NULL;
	struct rlb_schedule s2;
	struct rlb_loads l2;
	struct rlb_err err = {0};
	struct seqs q;
	char path[512];
	uint32_t len[16], i, mb, layer, e, k, tok, src;
	uint64_t x = 7 + (uint64_t)_i;
	uint64_t *ref[4], *used;
	uint32_t *rows;
	size_t nml, c;

	for (i = 0; i < 16; i++)
		len[i] = 1 + (uint32_t)(test_rand(&x) % 60);
	toy_config(&cfg, 2, (int)gpn, (int)E, (int)topk, (int)L);
	cfg.parallel.micro_batch_tokens = _i ? 4 : 24;
	seqs_init(&q, 16, len, L, topk);
	for (i = 0; i < 16; i++)
		for (layer = 0; layer < L; layer++)
			for (tok = 0; tok < len[i]; tok++)
				for (k = 0; k < topk; k++) {
					uint16_t v;
					uint32_t j;

					do {	/* distinct experts, skewed toward a few */
						uint64_t u = test_rand(&x);

						v = (uint16_t)(u % 3 == 0 ? (u >> 8) % 6 : (u >> 8) % E);
						for (j = 0; j < k && *seq_id(&q, i, layer, tok, j) != v; j++)
							;
					} while (j < k);
					*seq_id(&q, i, layer, tok, k) = v;
				}
	build(&cfg, &q, &s, &l);
	ck_assert_uint_gt(s.micro_batches, 1);
	ck_assert_int_eq(rlb_step_plan_init(&plan, 0, s.micro_batches, L, E, R, gpn, 8, split, &err), 0);
	for (mb = 0; mb < s.micro_batches; mb++)
		for (layer = 0; layer < L; layer++)
			for (e = 0; e < E; e++) {
				uint32_t home = e / 2, load = 0, rep = home / gpn * gpn + (home % gpn + 1) % gpn;

				for (src = 0; src < R; src++)
					load += l.count[rlb_loads_index(&l, mb, layer, src, e)];
				if (e % 3) {
					ck_assert_int_eq(rlb_step_plan_add(&plan, mb, layer, e, home, load, &err), 0);
					continue;
				}
				if (split == RLB_SPLIT_EVEN) {
					/* EVEN: quotas are the even split's sums */
					uint32_t q0 = 0, q1 = 0;

					for (src = 0; src < R; src++) {
						uint32_t v = l.count[rlb_loads_index(&l, mb, layer, src, e)];

						q0 += v / 2 + (v % 2 && src % 2 == 0);
						q1 += v / 2 + (v % 2 && src % 2 == 1);
					}
					ck_assert_int_eq(rlb_step_plan_add(&plan, mb, layer, e, home, q0, &err), 0);
					ck_assert_int_eq(rlb_step_plan_add(&plan, mb, layer, e, rep, q1, &err), 0);
				} else {
					ck_assert_int_eq(rlb_step_plan_add(&plan, mb, layer, e, home, load - load / 2, &err), 0);
					ck_assert_int_eq(rlb_step_plan_add(&plan, mb, layer, e, rep, load / 2, &err), 0);
				}
			}
	ck_assert_msg(rlb_step_plan_check(&plan, &l, &err) == 0, "%s", err.msg);
	traffic_of(&t, &cfg, &plan, &q, &s, &l);

	/* the plain recount */
	nml = (size_t)s.micro_batches * L;
	for (k = 0; k < 4; k++) {
		ref[k] = calloc(nml * R, sizeof(uint64_t));
		ck_assert_ptr_nonnull(ref[k]);
	}
	used = calloc(nml * R * E, sizeof(uint64_t));
	rows = calloc((size_t)R * R, sizeof(uint32_t));
	ck_assert_ptr_nonnull(used);
	ck_assert_ptr_nonnull(rows);
	for (c = 0; c < s.nchunks; c++) {
		const struct rlb_chunk *ch = &s.chunks[c];

		for (layer = 0; layer < L; layer++) {
			size_t ml = (size_t)ch->mb * L + layer;

			for (tok = ch->start; tok < ch->start + ch->tokens; tok++) {
				uint32_t gpus[4];

				for (k = 0; k < topk; k++) {
					uint32_t n, inst;
					const struct rlb_plan_instance *in;
					uint64_t j, acc = 0;

					e = *seq_id(&q, ch->seq, layer, tok, k);
					in = rlb_step_plan_cell(&plan, ch->mb, layer, e, &n);
					rlb_step_plan_split(&plan, &l, ch->mb, layer, e, rows);
					j = used[ml * R * E + (size_t)ch->rank * E + e]++;
					for (inst = 0; inst < n; inst++) {
						acc += rows[(size_t)ch->rank * n + inst];
						if (j < acc)
							break;
					}
					ck_assert_uint_lt(inst, n);
					gpus[k] = in[inst].gpu;
				}
				ref_token(ref[0] + ml * R, ref[1] + ml * R, ref[2] + ml * R,
					  ref[3] + ml * R, gpus, topk, ch->rank, R, gpn);
			}
		}
	}
	ck_assert_int_eq(memcmp(ref[0], t.rdma_send, nml * R * sizeof(uint64_t)), 0);
	ck_assert_int_eq(memcmp(ref[1], t.rdma_recv, nml * R * sizeof(uint64_t)), 0);
	ck_assert_int_eq(memcmp(ref[2], t.nvlink_send, nml * R * sizeof(uint64_t)), 0);
	ck_assert_int_eq(memcmp(ref[3], t.nvlink_recv, nml * R * sizeof(uint64_t)), 0);
	ck_assert_uint_gt(t.nsplit, 0);

	snprintf(path, sizeof(path), "%s/sim-ref-%ld.rrt", rlb_test_tmpdir(), (long)getpid());
	write_trace(&cfg, &q, path);
	ck_assert_msg(rlb_trace_reader_open(&r, path, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_step_loads(r, 0, &cfg, RLB_PACK_IN_ORDER, &s2, &l2, NULL, &err) == 0, "%s", err.msg);
	for (i = 0; i < 3; i++) {
		struct rlb_pool *pool = NULL;

		ck_assert_int_eq(rlb_pool_new(&pool, threads[i], &err), 0);
		ck_assert_uint_eq(rlb_pool_threads(pool), threads[i]);
		ck_assert_int_eq(rlb_traffic_init(&ts, &plan, &l2, gpn, &err), 0);
		tv[0] = &ts;
		ck_assert_msg(rlb_traffic_step(r, &s2, tv, 1, pool, &err) == 0, "%s", err.msg);
		ck_assert_int_eq(memcmp(ref[0], ts.rdma_send, nml * R * sizeof(uint64_t)), 0);
		ck_assert_int_eq(memcmp(ref[1], ts.rdma_recv, nml * R * sizeof(uint64_t)), 0);
		ck_assert_int_eq(memcmp(ref[2], ts.nvlink_send, nml * R * sizeof(uint64_t)), 0);
		ck_assert_int_eq(memcmp(ref[3], ts.nvlink_recv, nml * R * sizeof(uint64_t)), 0);
		ck_assert_uint_eq(ts.rows, t.rows);
		ck_assert_uint_eq(ts.unplanned_rows, 0);
		rlb_traffic_release(&ts);
		rlb_pool_free(pool);
	}
	rlb_trace_reader_free(r);
	unlink(path);
	rlb_loads_release(&l2);
	rlb_schedule_release(&s2);
	for (k = 0; k < 4; k++)
		free(ref[k]);
	free(used);
	free(rows);
	rlb_traffic_release(&t);
	rlb_step_plan_release(&plan);
	rlb_loads_release(&l);
	rlb_schedule_release(&s);
	seqs_free(&q);
}
END_TEST

Suite *rlb_suite_sim(void)
{
	Suite *s = suite_create("sim");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_gemm_time);
	tcase_add_test(tc, test_ungated_ffn);
	tcase_add_test(tc, test_deepep_counting);
	tcase_add_loop_test(tc, test_traffic_reference, 0, 3);
	tcase_add_test(tc, test_uniform_static_is_ideal);
	tcase_add_test(tc, test_hot_expert_replication);
	tcase_add_test(tc, test_a2a_excess);
	tcase_add_test(tc, test_relay);
	tcase_add_test(tc, test_planning_overlap);
	tcase_add_test(tc, test_migration);
	tcase_add_test(tc, test_dense_estimate);
	tcase_add_test(tc, test_pattern_dense);
	tcase_add_test(tc, test_latent_moe);
	tcase_add_test(tc, test_interleaved_window);
	tcase_add_test(tc, test_replica_reuse);
	tcase_add_test(tc, test_determinism);
	tcase_add_test(tc, test_traffic_step_trace);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	return s;
}
