/*
 * test_exec.c - unit tests of the train-step executor: the virtual
 * transport (matching, errors, collectives), the CPU backend's row
 * movement and its split-invariant gradient accumulation, and whole runs
 * on virtual ranks: every policy's plan agrees with the static plan, an
 * identity-coded model survives replication and migration exactly, a
 * latent MoE moves and trains its experts at the latent, an ungated FFN
 * runs and moves two matrices, mismatched inputs and an injected fault
 * fail with their messages, a trace cut during the run fails on every
 * rank at once.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "comm.h"
#include "exec.h"
#include "relibra.h"
#include "suites.h"

/* ------------------------------------------------------------------ */
/* Virtual transport.                                                   */

/*
 * The agreement rule of --verify and the GPU check: exact copies agree;
 * bf16-like noise within the tolerance agrees; a few Adam sign flips
 * (2 lr per step) agree only where outliers are allowed; a larger change,
 * many flips, or a NaN never do.
 */
START_TEST(test_tensor_diff)
{
	enum { N = 1000 };
	static float a[N], b[N];
	struct rlb_tensor_diff d;
	const double tol = 1e-2, slack = 2 * 2 * 1e-3;
	size_t i;

	for (i = 0; i < N; i++)
		b[i] = a[i] = 0.125f * (float)((int)(i % 17) - 8) / 8;
	rlb_exec_tensor_diff(a, b, N, tol, slack, 0.01, &d);
	ck_assert(d.ok && d.max_rel == 0 && d.outliers == 0);
	/* noise of 0.5% of max |b| everywhere: within 1e-2 */
	for (i = 0; i < N; i++)
		a[i] = b[i] + (i % 2 ? 1 : -1) * 0.005f * 0.125f;
	rlb_exec_tensor_diff(a, b, N, tol, 0, 0, &d);
	ck_assert(d.ok && d.outliers == 0);
	ck_assert_double_lt(fabs(d.max_rel - 0.005), 1e-6);
	/* 5 sign flips of 4e-3 (0.5% of the elements, 3.2% of max |b|) */
	for (i = 0; i < 5; i++)
		a[i * 100] = b[i * 100] + 4e-3f;
	rlb_exec_tensor_diff(a, b, N, tol, slack, 0.01, &d);
	ck_assert(d.ok);
	ck_assert_double_eq_tol(d.outliers, 0.005, 1e-12);
	ck_assert_double_gt(d.max_rel, tol);
	rlb_exec_tensor_diff(a, b, N, tol, slack, 0, &d);	/* the CPU's rule */
	ck_assert(!d.ok);
	/* one of them past the tolerance plus the slack */
	a[0] = b[0] + 6e-3f;
	rlb_exec_tensor_diff(a, b, N, tol, slack, 0.01, &d);
	ck_assert(!d.ok);
	a[0] = b[0];
	/* 20 flips: 2% of the elements, more than a bf16 run flips */
	for (i = 0; i < 20; i++)
		a[i * 50 + 1] = b[i * 50 + 1] - 4e-3f;
	rlb_exec_tensor_diff(a, b, N, tol, slack, 0.01, &d);
	ck_assert(!d.ok);
	memcpy(a, b, sizeof(a));
	a[7] = NAN;
	rlb_exec_tensor_diff(a, b, N, tol, slack, 0.01, &d);
	ck_assert(!d.ok && isinf(d.max_rel));
}
END_TEST

START_TEST(test_virtual_matching)
{
	struct rlb_world *w;
	struct rlb_err err = {0};
	int a[2] = { 11, 12 }, b[2] = { 21, 22 }, self = 33;
	int ra[2] = { 0, 0 }, rb[2] = { 0, 0 }, rself = 0, none = 0;
	uint32_t i;

	ck_assert_int_eq(rlb_world_virtual_new(&w, 3, &err), 0);
	ck_assert_str_eq(rlb_world_name(w), "virtual");
	ck_assert_uint_eq(rlb_world_size(w), 3);
	ck_assert_uint_eq(rlb_world_local(w), 3);
	ck_assert_int_eq(rlb_world_set_node_size(w, 3, &err), 0);
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(rlb_world_group_start(w, i, RLB_COMM_EP, &err), 0);
	/* Rank 1 receives before rank 0 sends: matched in posting order. */
	ck_assert_int_eq(rlb_world_recv(w, 1, RLB_COMM_EP, 0, &ra[0], sizeof(int), &err), 0);
	ck_assert_int_eq(rlb_world_send(w, 0, RLB_COMM_EP, 1, &a[0], sizeof(int), &err), 0);
	ck_assert_int_eq(rlb_world_send(w, 0, RLB_COMM_EP, 1, &a[1], sizeof(int), &err), 0);
	ck_assert_int_eq(rlb_world_recv(w, 1, RLB_COMM_EP, 0, &ra[1], sizeof(int), &err), 0);
	/* Two senders to one receiver, and a local copy. */
	ck_assert_int_eq(rlb_world_send(w, 2, RLB_COMM_EP, 1, b, sizeof(b), &err), 0);
	ck_assert_int_eq(rlb_world_recv(w, 1, RLB_COMM_EP, 2, rb, sizeof(rb), &err), 0);
	ck_assert_int_eq(rlb_world_send(w, 2, RLB_COMM_EP, 2, &self, sizeof(int), &err), 0);
	ck_assert_int_eq(rlb_world_recv(w, 2, RLB_COMM_EP, 2, &rself, sizeof(int), &err), 0);
	/* Zero bytes are skipped on either side. */
	ck_assert_int_eq(rlb_world_send(w, 0, RLB_COMM_EP, 2, &none, 0, &err), 0);
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(rlb_world_group_end(w, i, RLB_COMM_EP, &err), 0);
	ck_assert_int_eq(ra[0], 11);
	ck_assert_int_eq(ra[1], 12);
	ck_assert_int_eq(rb[0], 21);
	ck_assert_int_eq(rb[1], 22);
	ck_assert_int_eq(rself, 33);
	rlb_world_free(w);
}
END_TEST

START_TEST(test_virtual_errors)
{
	struct rlb_world *w;
	struct rlb_err err = {0};
	int x = 1;
	double big = 0;

	ck_assert_int_eq(rlb_world_virtual_new(&w, 0, &err), RLB_EINVAL);
	ck_assert_int_eq(rlb_world_virtual_new(&w, 4, &err), 0);
	ck_assert_int_eq(rlb_world_set_node_size(w, 3, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "3 ranks per node do not divide 4 ranks");
	ck_assert_int_eq(rlb_world_set_node_size(w, 2, &err), 0);
	ck_assert_int_eq(rlb_world_send(w, 0, RLB_COMM_NODE, 2, &x, sizeof(x), &err),
			 RLB_EINVAL);
	ck_assert_str_eq(err.msg, "rank 2 is not in the node of rank 0");
	/* Sizes that differ. */
	ck_assert_int_eq(rlb_world_send(w, 0, RLB_COMM_EP, 1, &big, sizeof(big), &err), 0);
	ck_assert_int_eq(rlb_world_recv(w, 1, RLB_COMM_EP, 0, &x, sizeof(x), &err),
			 RLB_EINVAL);
	ck_assert_str_eq(err.msg, "rank 0 sends 8 bytes to rank 1, which receives 4");
	rlb_world_free(w);

	/* A send nobody receives is reported when the last group ends. */
	ck_assert_int_eq(rlb_world_virtual_new(&w, 2, &err), 0);
	ck_assert_int_eq(rlb_world_group_start(w, 0, RLB_COMM_EP, &err), 0);
	ck_assert_int_eq(rlb_world_group_start(w, 1, RLB_COMM_EP, &err), 0);
	ck_assert_int_eq(rlb_world_send(w, 1, RLB_COMM_EP, 0, &x, sizeof(x), &err), 0);
	ck_assert_int_eq(rlb_world_group_end(w, 0, RLB_COMM_EP, &err), 0);
	ck_assert_int_eq(rlb_world_group_end(w, 1, RLB_COMM_EP, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "unmatched send from rank 1 to rank 0");
	rlb_world_free(w);
}
END_TEST

START_TEST(test_virtual_collectives)
{
	struct rlb_world *w;
	struct rlb_err err = {0}, errs[3], got;
	double v[3 * 2] = { 1, 5, 2, -1, 4, 3 };
	int send[3] = { 7, 8, 9 }, recv[3] = { 0, 0, 0 };
	uint32_t rank = 99;

	ck_assert_int_eq(rlb_world_virtual_new(&w, 3, &err), 0);
	ck_assert_int_eq(rlb_world_allreduce(w, v, 2, RLB_REDUCE_SUM, &err), 0);
	ck_assert(v[0] == 7 && v[1] == 7 && v[4] == 7 && v[5] == 7);
	v[0] = 1; v[1] = 4; v[2] = 2;
	ck_assert_int_eq(rlb_world_allreduce(w, v, 1, RLB_REDUCE_MAX, &err), 0);
	ck_assert(v[0] == 4 && v[1] == 4 && v[2] == 4);
	v[0] = 1; v[1] = -3; v[2] = 2;
	ck_assert_int_eq(rlb_world_allreduce(w, v, 1, RLB_REDUCE_MIN, &err), 0);
	ck_assert(v[0] == -3 && v[1] == -3 && v[2] == -3);
	ck_assert_int_eq(rlb_world_gather(w, send, sizeof(int), recv, &err), 0);
	ck_assert(recv[0] == 7 && recv[1] == 8 && recv[2] == 9);
	memset(errs, 0, sizeof(errs));
	ck_assert_int_eq(rlb_world_agree(w, errs, &got, &rank, &err), 0);
	rlb_err_set(&errs[2], RLB_EIO, "two");
	rlb_err_set(&errs[1], RLB_EMISMATCH, "one");
	ck_assert_int_eq(rlb_world_agree(w, errs, &got, &rank, &err), RLB_EMISMATCH);
	ck_assert_uint_eq(rank, 1);
	ck_assert_str_eq(got.msg, "one");
	ck_assert_int_eq(rlb_world_barrier(w, &err), 0);
	rlb_world_free(w);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Backend names.                                                       */

START_TEST(test_backend_names)
{
	struct rlb_err err = {0};
	enum rlb_backend_kind k = RLB_BACKEND_CPU;
	enum rlb_gemm_mode m = RLB_GEMM_GROUPED;

	ck_assert_int_eq(rlb_backend_from_name("cuda", &k, &err), 0);
	ck_assert_int_eq(k, RLB_BACKEND_CUDA);
	ck_assert_str_eq(rlb_backend_name(k), "cuda");
	ck_assert_int_eq(rlb_backend_from_name("gpu", &k, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "unknown backend 'gpu' (cpu or cuda)");
	ck_assert_int_eq(rlb_gemm_mode_from_name("loop", &m, &err), 0);
	ck_assert_int_eq(m, RLB_GEMM_LOOP);
	ck_assert_int_eq(rlb_gemm_mode_from_name("grouped", &m, &err), 0);
	ck_assert_int_eq(m, RLB_GEMM_GROUPED);
	ck_assert_int_eq(rlb_gemm_mode_from_name("Loop", &m, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "expected grouped or loop, got 'Loop'");
	ck_assert_int_eq(m, RLB_GEMM_GROUPED);
}
END_TEST

/* ------------------------------------------------------------------ */
/* CPU backend.                                                         */

static struct rlb_backend *cpu_backend(struct rlb_world **w)
{
	struct rlb_err err = {0};
	struct rlb_backend *be;
	struct rlb_backend_init bi = { 0, 1, 1, 0, -1, NULL, RLB_GEMM_GROUPED };

	ck_assert_int_eq(rlb_world_virtual_new(w, 1, &err), 0);
	bi.world = *w;
	ck_assert_int_eq(rlb_backend_new(RLB_BACKEND_CPU, &bi, &be, &err), 0);
	ck_assert_int_eq(be->acc_bytes, sizeof(double));
	return be;
}

START_TEST(test_cpu_rows)
{
	struct rlb_world *w;
	struct rlb_backend *be = cpu_backend(&w);
	struct rlb_err err = {0};
	struct rlb_queue *q;
	float src[3 * 2] = { 1, 2, 3, 4, 5, 6 }, dst[4 * 2];
	uint32_t idx[4] = { 2, 0, 2, 1 };
	float scale[4] = { 1, 2, -1, 0.5f };
	float gate[4] = { 0.5f, 0.25f, 2, 1 };
	float out[2 * 2] = { 10, 20, 30, 40 };

	ck_assert_int_eq(be->ops->queue_new(be, &q, &err), 0);
	ck_assert_int_eq(be->ops->gather(be, q, 4, 2, idx, NULL, src, dst, &err), 0);
	ck_assert(dst[0] == 5 && dst[1] == 6 && dst[2] == 1 && dst[7] == 4);
	ck_assert_int_eq(be->ops->gather(be, q, 4, 2, idx, scale, src, dst, &err), 0);
	ck_assert(dst[2] == 2 && dst[3] == 4 && dst[4] == -5 && dst[6] == 1.5f);
	/* out[t] += sum_k gate * y[idx]: token 0 rows 2, 0; token 1 rows 2, 1. */
	ck_assert_int_eq(be->ops->combine(be, q, 2, 2, 2, idx, gate, src, out, &err), 0);
	ck_assert(out[0] == 10 + 0.5f * 5 + 0.25f * 1);
	ck_assert(out[3] == 40 + 2 * 6 + 1 * 4);
	ck_assert_int_eq(be->ops->combine(be, q, 1, 3, 2, NULL, NULL, src, out, &err), 0);
	ck_assert(out[0] == 10 + 0.5f * 5 + 0.25f * 1 + 1 + 3 + 5);
	be->ops->queue_free(be, q);
	rlb_backend_free(be);
	rlb_world_free(w);
}
END_TEST

/*
 * The property --verify relies on: rows split over two instances (two
 * accumulators, then reduced) give the weight gradient of one instance
 * over all rows, bit for bit, and dx rows do not depend on the split.
 */
START_TEST(test_cpu_backward_split)
{
	struct rlb_expert_shape s = { 16, 8, 0 };
	size_t np = rlb_expert_params(&s), n = 7, cut = 3, i;
	struct rlb_world *w;
	struct rlb_backend *be = cpu_backend(&w);
	struct rlb_err err = {0};
	float *wt = malloc(np * sizeof(float)), *x = malloc(n * 16 * sizeof(float));
	float *dy = malloc(n * 16 * sizeof(float)), *y = malloc(n * 16 * sizeof(float));
	float *act = malloc(n * 16 * sizeof(float)), *dx1 = malloc(n * 16 * sizeof(float));
	float *dx2 = malloc(n * 16 * sizeof(float)), *ref = calloc(np, sizeof(float));
	double *g1 = calloc(np, sizeof(double)), *ga = calloc(np, sizeof(double));
	double *gb = calloc(np, sizeof(double));
	struct rlb_expert_job one = { 0 }, two[2];
	float *dxr = malloc(n * 16 * sizeof(float));

	rlb_expert_init(&s, 3, 0, 0, wt);
	for (i = 0; i < n; i++) {
		rlb_hidden_init(5, 0, 0, (uint32_t)i, 16, x + i * 16);
		rlb_hidden_init(6, 0, 0, (uint32_t)i, 16, dy + i * 16);
	}
	one.w = wt;
	one.rows = n;
	one.x = x;
	one.y = y;
	one.act = act;
	ck_assert_int_eq(be->ops->expert_forward(be, NULL, &s, &one, 1, &err), 0);
	one.dy = dy;
	one.dx = dx1;
	one.g = g1;
	ck_assert_int_eq(be->ops->expert_backward(be, NULL, &s, &one, 1, &err), 0);
	two[0] = one;
	two[0].rows = cut;
	two[0].dx = dx2;
	two[0].g = ga;
	two[1] = one;
	two[1].rows = n - cut;
	two[1].x = x + cut * 16;
	two[1].act = act + cut * 16;
	two[1].dy = dy + cut * 16;
	two[1].dx = dx2 + cut * 16;
	two[1].g = gb;
	ck_assert_int_eq(be->ops->expert_backward(be, NULL, &s, two, 2, &err), 0);
	ck_assert_int_eq(be->ops->acc_add(be, NULL, np, ga, gb, &err), 0);
	ck_assert(memcmp(g1, ga, np * sizeof(double)) == 0);
	ck_assert(memcmp(dx1, dx2, n * 16 * sizeof(float)) == 0);
	/* And it is the gradient of lib/expert.h. */
	rlb_expert_backward(&s, wt, n, x, act, dy, dxr, ref);
	for (i = 0; i < np; i++)
		ck_assert_msg(fabs(g1[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])),
			      "dw[%zu] = %g, expected %g", i, g1[i], (double)ref[i]);
	free(wt); free(x); free(dy); free(y); free(act); free(dx1); free(dx2);
	free(ref); free(g1); free(ga); free(gb); free(dxr);
	rlb_backend_free(be);
	rlb_world_free(w);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Whole runs.                                                          */

/* A small model on 2 nodes x 2 GPUs with a short synthetic workload. */
static void small_config(struct rlb_config *cfg)
{
	static const char *const sets[] = {
		"model.name=exec-test", "model.experts=8", "model.topk=2",
		"model.hidden=16", "model.expert_ffn=8", "model.moe_layers=2",
		"cluster.nodes=2", "cluster.gpus_per_node=2", "parallel.ep_size=4",
		"parallel.micro_batch_tokens=48", "workload.steps=2",
		"workload.prompts_per_step=4", "workload.samples_per_prompt=2",
		"workload.len_median=40", "workload.len_min=8", "workload.len_max=100",
		"workload.segment_min=4", "workload.segment_max=32",
		"balancer.replica_slots=2", "balancer.min_tokens_per_replica=1",
		/*
		 * slow compute, no link latency, no fixed GEMM cost: replicas
		 * of these tiny experts pay
		 */
		"cluster.peak_tflops=0.01", "cluster.nvlink_latency_us=0",
		"cluster.gemm_eff_half_rows=0",
	};
	struct rlb_err err = {0};

	ck_assert_msg(rlb_config_load(cfg, NULL, sets, sizeof(sets) / sizeof(sets[0]),
				      &err) == 0, "%s", err.msg);
}

static void write_trace(const struct rlb_config *cfg, uint64_t seed, const char *path)
{
	struct rlb_trace_header h;
	struct rlb_trace_writer *w;
	struct rlb_err err = {0};

	memset(&h, 0, sizeof(h));
	rlb_trace_header_from_config(&h, cfg);
	ck_assert_msg(rlb_trace_writer_open(&w, path, &h, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_synth_generate(cfg, seed, 0, w, NULL, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_writer_close(w, &err) == 0, "%s", err.msg);
}

static void write_plan(const struct rlb_config *cfg, const char *trace,
		       enum rlb_policy policy, const char *path)
{
	struct rlb_trace_reader *r;
	struct rlb_planner_policy pol;
	struct rlb_planner_opts po;
	struct rlb_plan_header ph;
	struct rlb_err err = {0};
	const uint32_t *steps;
	size_t n;

	memset(&pol, 0, sizeof(pol));
	memset(&po, 0, sizeof(po));
	ck_assert_int_eq(rlb_trace_reader_open(&r, trace, &err), 0);
	ck_assert_int_eq(rlb_trace_reader_steps(r, &steps, &n, &err), 0);
	rlb_balance_opts_from_config(&pol.opts, cfg);
	pol.opts.policy = policy;
	po.pack = cfg->parallel.pack;
	po.last_step = UINT32_MAX;
	rlb_plan_header_init(&ph, cfg, &pol.opts, po.pack, rlb_trace_reader_header(r),
			     steps, n);
	ck_assert_msg(rlb_plan_writer_open(&pol.writer, path, &ph, NULL, &err) == 0,
		      "%s", err.msg);
	ck_assert_msg(rlb_planner_run(r, cfg, &po, &pol, 1, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_plan_writer_close(pol.writer, &err) == 0, "%s", err.msg);
	rlb_planner_policy_release(&pol);
	rlb_trace_reader_free(r);
}

static void paths(char *trace, char *plan, size_t size, const char *tag)
{
	snprintf(trace, size, "%s/exec-%ld.rrt", rlb_test_tmpdir(), (long)getpid());
	snprintf(plan, size, "%s/exec-%ld-%s.rlp", rlb_test_tmpdir(), (long)getpid(), tag);
}

/*
 * The small config into CFG, its trace (seed 7) and POLICY's plan under
 * TAG, and an executor with options O over 4 virtual ranks.
 */
static void start4(struct rlb_config *cfg, const char *tag, enum rlb_policy policy,
		   const struct rlb_exec_opts *o, char *trace, char *plan, size_t size,
		   struct rlb_world **w, struct rlb_exec **ex)
{
	struct rlb_err err = {0};

	small_config(cfg);
	paths(trace, plan, size, tag);
	write_trace(cfg, 7, trace);
	write_plan(cfg, trace, policy, plan);
	ck_assert_int_eq(rlb_world_virtual_new(w, 4, &err), 0);
	ck_assert_msg(rlb_exec_new(ex, *w, cfg, trace, plan, o, &err) == 0, "%s", err.msg);
}

START_TEST(test_exec_every_policy)
{
	static const enum rlb_policy pols[] = {
		RLB_POLICY_STATIC, RLB_POLICY_EPLB, RLB_POLICY_EPLB_ORACLE,
		RLB_POLICY_REPLICATE, RLB_POLICY_RELIBRA,
	};
	struct rlb_config cfg;
	struct rlb_exec_opts o;
	char trace[512], plan[512];
	size_t i;

	small_config(&cfg);
	paths(trace, plan, sizeof(trace), "any");
	write_trace(&cfg, 7, trace);
	rlb_exec_opts_defaults(&o);
	o.verify = 1;
	for (i = 0; i < sizeof(pols) / sizeof(pols[0]); i++) {
		struct rlb_world *w;
		struct rlb_exec *ex;
		struct rlb_exec_verify v;
		struct rlb_exec_summary s;
		struct rlb_err err = {0};
		uint32_t failed = 99;
		json_t *j;

		paths(trace, plan, sizeof(plan), rlb_policy_name(pols[i]));
		write_plan(&cfg, trace, pols[i], plan);
		ck_assert_int_eq(rlb_world_virtual_new(&w, 4, &err), 0);
		ck_assert_msg(rlb_exec_new(&ex, w, &cfg, trace, plan, &o, &err) == 0,
			      "%s", err.msg);
		ck_assert_msg(rlb_exec_run(ex, &v, &failed, &err) == 0, "%s: %s",
			      rlb_policy_name(pols[i]), err.msg);
		ck_assert(v.done);
		ck_assert_msg(v.ok && v.max_rel_weight <= 1e-5 && v.max_rel_loss <= 1e-5,
			      "%s: %g in %s, %g in losses", rlb_policy_name(pols[i]),
			      v.max_rel_weight, v.worst, v.max_rel_loss);
		rlb_exec_summary(ex, &s);
		ck_assert_uint_eq(s.steps, 2);
		ck_assert(s.tokens > 0 && s.critical_path_s > 0 && s.first_loss > 0);
		ck_assert_str_eq(s.policy, rlb_policy_name(pols[i]));
		j = rlb_exec_metrics_json(ex, NULL);
		ck_assert_ptr_nonnull(j);
		ck_assert_str_eq(json_string_value(json_object_get(j, "kind")), "train-step");
		ck_assert_str_eq(json_string_value(json_object_get(j, "schema")),
				 RLB_RESULT_SCHEMA);
		ck_assert_int_eq(json_array_size(json_object_get(j, "per_step")), 2);
		ck_assert_ptr_nonnull(json_object_get(json_object_get(j, "breakdown"), "expert_s"));
		/* the CPU backend does not hold: no unheld spans, no such field */
		ck_assert_uint_eq(rlb_exec_unheld_spans(ex), 0);
		ck_assert_ptr_null(json_object_get(j, "unheld_spans"));
		/* Replicating policies did copy weights and reduce gradients. */
		if (pols[i] == RLB_POLICY_REPLICATE || pols[i] == RLB_POLICY_RELIBRA) {
			json_t *b = json_object_get(j, "bytes_per_step");

			ck_assert(json_real_value(json_object_get(b, "replica")) > 0);
			ck_assert(json_real_value(json_object_get(b, "grad")) > 0);
		}
		json_decref(j);
		rlb_exec_free(ex);
		rlb_world_free(w);
		unlink(plan);
	}
	unlink(trace);
}
END_TEST

/*
 * A replica's weight gradient goes home once per run of consecutive
 * micro-batches in which its GPU holds the expert (docs/cost-model.md,
 * Replicas), not once per micro-batch: every step's grad_bytes are the
 * plan's runs times one double gradient, fewer than its replicas where
 * a replica stays (every eplb-oracle replica stays the whole step), and
 * the result still agrees with the static plan.
 */
START_TEST(test_exec_replica_gradient_runs)
{
	static const enum rlb_policy pols[] = {
		RLB_POLICY_EPLB_ORACLE, RLB_POLICY_REPLICATE,
	};
	struct rlb_config cfg;
	struct rlb_exec_opts o;
	struct rlb_expert_shape shape;
	char trace[512], plan[512];
	size_t i;

	small_config(&cfg);
	shape.hidden = cfg.model.hidden;
	shape.ffn = cfg.model.expert_ffn;
	paths(trace, plan, sizeof(trace), "grad");
	write_trace(&cfg, 7, trace);
	rlb_exec_opts_defaults(&o);
	o.verify = 1;
	for (i = 0; i < sizeof(pols) / sizeof(pols[0]); i++) {
		struct rlb_world *w;
		struct rlb_exec *ex;
		struct rlb_exec_verify v;
		struct rlb_plan_reader *pr;
		struct rlb_step_plan p;
		struct rlb_err err = {0};
		uint64_t replicas = 0, runs = 0;
		size_t st = 0;
		json_t *j, *steps;

		paths(trace, plan, sizeof(plan), rlb_policy_name(pols[i]));
		write_plan(&cfg, trace, pols[i], plan);
		ck_assert_int_eq(rlb_world_virtual_new(&w, 4, &err), 0);
		ck_assert_msg(rlb_exec_new(&ex, w, &cfg, trace, plan, &o, &err) == 0,
			      "%s", err.msg);
		ck_assert_msg(rlb_exec_run(ex, &v, NULL, &err) == 0, "%s", err.msg);
		ck_assert_msg(v.ok, "%s: %g in %s", rlb_policy_name(pols[i]),
			      v.max_rel_weight, v.worst);
		j = rlb_exec_metrics_json(ex, NULL);
		ck_assert_ptr_nonnull(j);
		steps = json_object_get(j, "per_step");
		ck_assert_int_eq(rlb_plan_reader_open(&pr, plan, &err), 0);
		memset(&p, 0, sizeof(p));
		while (rlb_plan_reader_next(pr, &p, &err) == 1) {
			json_t *cells = json_object_get(json_array_get(steps, st++), "cells");
			uint64_t step_runs = 0;
			double bytes = 0;
			uint32_t m, l, e, n, n2, k, k2;
			size_t c;

			for (m = 0; m < p.micro_batches; m++)
				for (l = 0; l < p.layers; l++)
					for (e = 0; e < p.experts; e++) {
						const struct rlb_plan_instance *in =
							rlb_step_plan_cell(&p, m, l, e, &n);

						for (k = 1; k < n; k++) {
							int stays = 0;

							if (m + 1 < p.micro_batches) {
								const struct rlb_plan_instance *nx =
									rlb_step_plan_cell(&p, m + 1, l, e, &n2);

								for (k2 = 0; k2 < n2; k2++)
									stays |= nx[k2].gpu == in[k].gpu;
							}
							replicas++;
							step_runs += !stays;
						}
					}
			for (c = 0; c < json_array_size(cells); c++)
				bytes += json_real_value(json_object_get(json_array_get(cells, c),
									 "grad_bytes"));
			ck_assert_msg(bytes == (double)step_runs * rlb_expert_params(&shape) * sizeof(double),
				      "%s step %u: %g gradient bytes, %llu runs",
				      rlb_policy_name(pols[i]), p.step, bytes,
				      (unsigned long long)step_runs);
			runs += step_runs;
		}
		rlb_step_plan_release(&p);
		rlb_plan_reader_free(pr);
		ck_assert_uint_eq(st, json_array_size(steps));
		ck_assert_msg(runs > 0 && (pols[i] != RLB_POLICY_EPLB_ORACLE || runs < replicas),
			      "%s: %llu runs of %llu replicas", rlb_policy_name(pols[i]),
			      (unsigned long long)runs, (unsigned long long)replicas);
		json_decref(j);
		rlb_exec_free(ex);
		rlb_world_free(w);
		unlink(plan);
	}
	unlink(trace);
}
END_TEST

/*
 * A run that diverges (lr 1e30 makes the weights overflow) still writes
 * every step's record: a loss or a check that is not a number is null.
 */
START_TEST(test_exec_diverged_metrics)
{
	struct rlb_config cfg;
	struct rlb_exec_opts o;
	struct rlb_exec_verify v;
	struct rlb_world *w;
	struct rlb_exec *ex;
	struct rlb_err err = {0};
	char trace[512], plan[512];
	uint32_t failed = 99;
	json_t *j, *ver, *step;

	rlb_exec_opts_defaults(&o);
	o.verify = 1;
	o.adam.lr = 1e30f;
	start4(&cfg, "diverged", RLB_POLICY_RELIBRA, &o, trace, plan, sizeof(trace), &w, &ex);
	ck_assert_msg(rlb_exec_run(ex, &v, &failed, &err) == 0, "%s", err.msg);
	ck_assert(v.done && !v.ok);
	j = rlb_exec_metrics_json(ex, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert_int_eq(json_array_size(json_object_get(j, "per_step")), 2);
	step = json_array_get(json_object_get(j, "per_step"), 1);
	ck_assert(json_is_null(json_object_get(step, "loss")));
	ck_assert(json_is_null(json_object_get(json_object_get(j, "loss"), "last")));
	ver = json_object_get(j, "verify");
	ck_assert_ptr_nonnull(ver);
	ck_assert(json_is_false(json_object_get(ver, "ok")));
	ck_assert(json_is_null(json_object_get(ver, "max_rel_loss")));
	json_decref(j);
	rlb_exec_free(ex);
	rlb_world_free(w);
	unlink(plan);
	unlink(trace);
}
END_TEST

/*
 * Weights that say which expert they are, and no learning (lr 0): after
 * replication and migration every expert must still hold exactly its own
 * weights, wherever it lives, and the plan's losses must be static's.
 */
START_TEST(test_exec_identity_preserved)
{
	static const enum rlb_policy pols[] = { RLB_POLICY_EPLB_ORACLE, RLB_POLICY_RELIBRA };
	struct rlb_config cfg;
	struct rlb_exec_opts o;
	struct rlb_expert_shape shape = { 16, 8, 0 };
	size_t np = rlb_expert_params(&shape), i, k;
	float *got = malloc(np * sizeof(float)), *want = malloc(np * sizeof(float));
	char trace[512], plan[512];
	uint32_t L, e;

	small_config(&cfg);
	paths(trace, plan, sizeof(trace), "id");
	write_trace(&cfg, 9, trace);
	rlb_exec_opts_defaults(&o);
	o.init = RLB_EXEC_INIT_ID;
	o.adam.lr = 0;
	o.verify = 1;
	for (i = 0; i < sizeof(pols) / sizeof(pols[0]); i++) {
		struct rlb_world *w;
		struct rlb_exec *ex;
		struct rlb_exec_verify v;
		struct rlb_err err = {0};
		int moved = 0;

		write_plan(&cfg, trace, pols[i], plan);
		ck_assert_int_eq(rlb_world_virtual_new(&w, 4, &err), 0);
		o.verify = 0;
		ck_assert_int_eq(rlb_exec_new(&ex, w, &cfg, trace, plan, &o, &err), 0);
		ck_assert_msg(rlb_exec_run(ex, &v, NULL, &err) == 0, "%s", err.msg);
		for (L = 0; L < 2; L++)
			for (e = 0; e < 8; e++) {
				moved += rlb_exec_home(ex, L, e) != (int)(e / 2);
				ck_assert_int_eq(rlb_exec_weights(ex, L, e, got, &err), 0);
				rlb_expert_init(&shape, o.seed, L, e, want);
				for (k = 0; k < np; k++)
					want[k] += (float)(L * 8 + e + 1) / 1024.0f;
				ck_assert_msg(memcmp(got, want, np * sizeof(float)) == 0,
					      "%s: layer %u expert %u holds other weights",
					      rlb_policy_name(pols[i]), L, e);
			}
		/* eplb-oracle moves homes: migration was exercised. */
		if (pols[i] == RLB_POLICY_EPLB_ORACLE)
			ck_assert_int_gt(moved, 0);
		rlb_exec_free(ex);
		o.verify = 1;
		ck_assert_int_eq(rlb_exec_new(&ex, w, &cfg, trace, plan, &o, &err), 0);
		ck_assert_msg(rlb_exec_run(ex, &v, NULL, &err) == 0, "%s", err.msg);
		ck_assert(v.done && v.ok);
		ck_assert(v.max_rel_weight == 0 && v.max_rel_loss <= 1e-6);
		rlb_exec_free(ex);
		rlb_world_free(w);
		unlink(plan);
	}
	unlink(trace);
	free(got);
	free(want);
}
END_TEST

/*
 * A latent MoE (model.moe_latent) runs its experts, hidden states and
 * token copies in the latent: on one eplb-oracle plan, with a latent of 4
 * of the 16 every byte moved (all-to-all, replica weights, gradients,
 * migrations) is a quarter of the full width's, the result still agrees
 * with the static plan, and each expert holds a latent-wide parameter
 * block, the one its seed gives at that shape.
 */
START_TEST(test_exec_latent_moe)
{
	static const char *const keys[] = { "a2a", "replica", "grad", "migration" };
	struct rlb_config full, latent;
	struct rlb_exec_opts o;
	struct rlb_expert_shape shape = { 4, 8, 0 };
	size_t np = rlb_expert_params(&shape), k;
	float *got = malloc(np * sizeof(float)), *want = malloc(np * sizeof(float));
	double bytes[2][4];
	char trace[512], plan[512];
	struct rlb_err err = {0};
	int pass;

	small_config(&full);
	small_config(&latent);
	ck_assert_int_eq(rlb_config_set(&latent, "model.moe_latent=4", &err), 0);
	ck_assert_msg(rlb_config_validate(&latent, &err) == 0, "%s", err.msg);
	paths(trace, plan, sizeof(trace), "latent");
	write_trace(&latent, 7, trace);
	write_plan(&latent, trace, RLB_POLICY_EPLB_ORACLE, plan);
	rlb_exec_opts_defaults(&o);
	for (pass = 0; pass < 2; pass++) {
		struct rlb_world *w;
		struct rlb_exec *ex;
		struct rlb_exec_verify v;
		json_t *j, *b;

		o.verify = pass == 0;
		ck_assert_int_eq(rlb_world_virtual_new(&w, 4, &err), 0);
		ck_assert_msg(rlb_exec_new(&ex, w, pass ? &full : &latent, trace, plan, &o,
					   &err) == 0, "%s", err.msg);
		ck_assert_msg(rlb_exec_run(ex, &v, NULL, &err) == 0, "%s", err.msg);
		if (pass == 0) {
			ck_assert_msg(v.done && v.ok, "%g in %s, %g in losses",
				      v.max_rel_weight, v.worst, v.max_rel_loss);
			ck_assert_int_eq(rlb_exec_weights(ex, 1, 5, got, &err), 0);
			rlb_expert_init(&shape, o.seed, 1, 5, want);
			/* trained: Adam moved each weight by about lr (1e-3) a step */
			ck_assert(memcmp(got, want, np * sizeof(float)) != 0);
			for (k = 0; k < np; k++)
				ck_assert_msg(fabsf(got[k] - want[k]) <= 0.01f,
					      "weight %zu: %g, initially %g", k, got[k], want[k]);
		}
		j = rlb_exec_metrics_json(ex, NULL);
		ck_assert_ptr_nonnull(j);
		b = json_object_get(j, "bytes_per_step");
		for (k = 0; k < 4; k++)
			bytes[pass][k] = json_real_value(json_object_get(b, keys[k]));
		json_decref(j);
		rlb_exec_free(ex);
		rlb_world_free(w);
	}
	for (k = 0; k < 4; k++)
		ck_assert_msg(bytes[1][k] > 0 && bytes[0][k] * 4 == bytes[1][k],
			      "%s: %g bytes in the latent, %g at full width", keys[k],
			      bytes[0][k], bytes[1][k]);
	unlink(plan);
	unlink(trace);
	free(got);
	free(want);
}
END_TEST

/*
 * An ungated FFN (model.gated_ffn: false) runs two-matrix experts: on
 * one eplb-oracle plan the replica weights, gradients and migrations
 * move 2/3 of the gated run's bytes and the all-to-all the same, the
 * result agrees with the static plan, each expert holds the two-matrix
 * block its seed gives, and a second run gives the same bits.  The cuda
 * backend refuses such a model before anything is opened, in every build.
 */
START_TEST(test_exec_ungated_ffn)
{
	static const char *const keys[] = { "a2a", "replica", "grad", "migration" };
	struct rlb_config gated, ungated;
	struct rlb_exec_opts o;
	struct rlb_expert_shape shape = { 16, 8, 1 };
	size_t np = rlb_expert_params(&shape), k;
	float *got = malloc(np * sizeof(float)), *want = malloc(np * sizeof(float));
	float *again = malloc(np * sizeof(float));
	double bytes[3][4], loss[3];
	char trace[512], plan[512];
	struct rlb_err err = {0};
	struct rlb_world *w;
	struct rlb_exec *ex;
	int pass;

	ck_assert(got && want && again);
	ck_assert_uint_eq(np, 2 * 16 * 8);
	small_config(&gated);
	small_config(&ungated);
	ck_assert_int_eq(rlb_config_set(&ungated, "model.gated_ffn=false", &err), 0);
	ck_assert_msg(rlb_config_validate(&ungated, &err) == 0, "%s", err.msg);
	paths(trace, plan, sizeof(trace), "ungated");
	write_trace(&ungated, 7, trace);
	write_plan(&ungated, trace, RLB_POLICY_EPLB_ORACLE, plan);
	rlb_exec_opts_defaults(&o);
	/* passes 0 and 1 ungated (the first verified), pass 2 gated */
	for (pass = 0; pass < 3; pass++) {
		struct rlb_exec_verify v;
		struct rlb_exec_summary s;
		json_t *j, *b;

		o.verify = pass == 0;
		ck_assert_int_eq(rlb_world_virtual_new(&w, 4, &err), 0);
		ck_assert_msg(rlb_exec_new(&ex, w, pass == 2 ? &gated : &ungated, trace, plan,
					   &o, &err) == 0, "%s", err.msg);
		ck_assert_msg(rlb_exec_run(ex, &v, NULL, &err) == 0, "%s", err.msg);
		if (pass == 0)
			ck_assert_msg(v.done && v.ok, "%g in %s, %g in losses",
				      v.max_rel_weight, v.worst, v.max_rel_loss);
		if (pass < 2) {
			ck_assert_int_eq(rlb_exec_weights(ex, 1, 5, pass ? again : got, &err), 0);
			if (pass == 0) {
				rlb_expert_init(&shape, o.seed, 1, 5, want);
				/* trained: Adam moved each weight by about lr (1e-3) a step */
				ck_assert(memcmp(got, want, np * sizeof(float)) != 0);
				for (k = 0; k < np; k++)
					ck_assert_msg(fabsf(got[k] - want[k]) <= 0.01f,
						      "weight %zu: %g, initially %g", k,
						      got[k], want[k]);
			} else {
				ck_assert_mem_eq(again, got, np * sizeof(float));
			}
		}
		rlb_exec_summary(ex, &s);
		loss[pass] = s.last_loss;
		j = rlb_exec_metrics_json(ex, NULL);
		ck_assert_ptr_nonnull(j);
		b = json_object_get(j, "bytes_per_step");
		for (k = 0; k < 4; k++)
			bytes[pass][k] = json_real_value(json_object_get(b, keys[k]));
		json_decref(j);
		rlb_exec_free(ex);
		rlb_world_free(w);
	}
	for (k = 0; k < 4; k++) {
		ck_assert_msg(bytes[2][k] > 0 && bytes[0][k] * (k ? 3 : 1) == bytes[2][k] * (k ? 2 : 1),
			      "%s: %g bytes ungated, %g gated", keys[k], bytes[0][k], bytes[2][k]);
		ck_assert(bytes[1][k] == bytes[0][k]);
	}
	/* the same bits twice; another function than the gated expert's */
	ck_assert(memcmp(&loss[0], &loss[1], sizeof(loss[0])) == 0);
	ck_assert(loss[0] != loss[2]);

	/* The cuda backend: refused whether or not it is built in. */
	o.backend = RLB_BACKEND_CUDA;
	o.verify = 0;
	ck_assert_int_eq(rlb_world_virtual_new(&w, 4, &err), 0);
	ck_assert_int_eq(rlb_exec_new(&ex, w, &ungated, trace, plan, &o, &err),
			 RLB_EUNSUPPORTED);
	ck_assert_ptr_null(ex);
	ck_assert_str_eq(err.msg, "the cuda backend runs gated (SwiGLU) experts only; model.gated_ffn: false runs on --backend cpu");
	rlb_world_free(w);
	unlink(plan);
	unlink(trace);
	free(got);
	free(want);
	free(again);
}
END_TEST

START_TEST(test_exec_mismatch)
{
	struct rlb_config cfg;
	struct rlb_exec_opts o;
	struct rlb_world *w;
	struct rlb_exec *ex;
	struct rlb_err err = {0};
	char trace[512], plan[512], other[512], want[1100];

	small_config(&cfg);
	paths(trace, plan, sizeof(trace), "mm");
	write_trace(&cfg, 7, trace);
	write_plan(&cfg, trace, RLB_POLICY_RELIBRA, plan);
	rlb_exec_opts_defaults(&o);

	/* Wrong number of ranks. */
	ck_assert_int_eq(rlb_world_virtual_new(&w, 2, &err), 0);
	ck_assert_int_eq(rlb_exec_new(&ex, w, &cfg, trace, plan, &o, &err), RLB_EMISMATCH);
	ck_assert_ptr_null(ex);
	ck_assert_str_eq(err.msg, "the job has 2 ranks, parallel.ep_size is 4");
	rlb_world_free(w);

	ck_assert_int_eq(rlb_world_virtual_new(&w, 4, &err), 0);
	/* Steps out of range. */
	o.first_step = 5;
	ck_assert_int_eq(rlb_exec_new(&ex, w, &cfg, trace, plan, &o, &err), RLB_ENOTFOUND);
	snprintf(want, sizeof(want), "no step of the trace in 5: (trace '%s' has steps 0..1)",
		 trace);
	ck_assert_str_eq(err.msg, want);
	o.first_step = 0;
	/* A plan of another trace. */
	snprintf(other, sizeof(other), "%s/exec-%ld-other.rrt", rlb_test_tmpdir(), (long)getpid());
	write_trace(&cfg, 8, other);
	ck_assert_int_eq(rlb_exec_new(&ex, w, &cfg, other, plan, &o, &err), RLB_EMISMATCH);
	ck_assert_msg(strstr(err.msg, "plan does not match the trace") != NULL, "%s", err.msg);
	/* A config of another shape. */
	cfg.parallel.micro_batch_tokens = 64;
	ck_assert_int_eq(rlb_exec_new(&ex, w, &cfg, trace, plan, &o, &err), RLB_EMISMATCH);
	ck_assert_msg(strstr(err.msg, "micro_batch_tokens") != NULL, "%s", err.msg);
	rlb_world_free(w);
	unlink(trace);
	unlink(other);
	unlink(plan);
}
END_TEST

START_TEST(test_exec_fault)
{
	struct rlb_config cfg;
	struct rlb_exec_opts o;
	struct rlb_world *w;
	struct rlb_exec *ex;
	struct rlb_err err = {0};
	char trace[512], plan[512];
	uint32_t failed = 99;

	rlb_exec_opts_defaults(&o);
	o.fault = 1;
	o.fault_rank = 3;
	o.fault_step = 1;
	start4(&cfg, "fault", RLB_POLICY_REPLICATE, &o, trace, plan, sizeof(trace), &w, &ex);
	ck_assert_int_eq(rlb_exec_run(ex, NULL, &failed, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "injected fault at step 1");
	ck_assert_uint_eq(failed, 3);
	ck_assert_ptr_null(rlb_exec_metrics_json(ex, NULL));
	rlb_exec_free(ex);
	rlb_world_free(w);
	unlink(trace);
	unlink(plan);
}
END_TEST

/*
 * A trace cut once the ranks agreed on it (a file rewritten while the job
 * runs): the step's inputs fail to read on every rank, and the ranks
 * agree on it before any transfer, so that the caller reports it once
 * and needs no abort.
 */
START_TEST(test_exec_input_cut)
{
	struct rlb_config cfg;
	struct rlb_exec_opts o;
	struct rlb_world *w;
	struct rlb_exec *ex;
	struct rlb_err err = {0};
	char trace[512], plan[512];
	uint32_t failed = 99;

	rlb_exec_opts_defaults(&o);
	start4(&cfg, "cut", RLB_POLICY_RELIBRA, &o, trace, plan, sizeof(trace), &w, &ex);
	ck_assert_int_eq(truncate(trace, 0), 0);
	ck_assert_int_lt(rlb_exec_run(ex, NULL, &failed, &err), 0);
	ck_assert_uint_eq(failed, RLB_EXEC_AGREED);
	ck_assert_msg(strstr(err.msg, trace) != NULL, "%s", err.msg);
	ck_assert_msg(strncmp(err.msg, "rank ", 5) != 0, "%s", err.msg);
	rlb_exec_free(ex);
	rlb_world_free(w);
	unlink(trace);
	unlink(plan);
}
END_TEST

/*
 * The planner's per-step results add up to its summaries, exactly (the
 * same sums in the same order), for placement and data control alike,
 * and the result JSON lists them with their ratios to the baselines.
 */
START_TEST(test_planner_per_step)
{
	struct rlb_config cfg;
	struct rlb_planner_policy pol[3];
	struct rlb_planner_opts po;
	struct rlb_sim_summary st;
	struct rlb_result_source src;
	struct rlb_trace_reader *r;
	struct rlb_err err = {0};
	char trace[512], plan[512];
	const uint32_t *steps;
	size_t nsteps, i, k;

	small_config(&cfg);
	paths(trace, plan, sizeof(trace), "ps");
	write_trace(&cfg, 11, trace);
	ck_assert_int_eq(rlb_trace_reader_open(&r, trace, &err), 0);
	ck_assert_int_eq(rlb_trace_reader_steps(r, &steps, &nsteps, &err), 0);
	ck_assert_uint_eq(nsteps, 2);
	memset(pol, 0, sizeof(pol));
	for (i = 0; i < 3; i++) {
		rlb_balance_opts_from_config(&pol[i].opts, &cfg);
		pol[i].opts.policy = i == 1 ? RLB_POLICY_EPLB_ORACLE : RLB_POLICY_RELIBRA;
	}
	pol[2].opts.data_control = 1;
	memset(&po, 0, sizeof(po));
	po.pack = cfg.parallel.pack;
	po.last_step = UINT32_MAX;
	po.threads = 1;
	ck_assert_msg(rlb_planner_run(r, &cfg, &po, pol, 3, &st, &err) == 0, "%s", err.msg);
	memset(&src, 0, sizeof(src));
	src.trace = rlb_trace_reader_header(r);
	src.no_timing = 1;
	for (i = 0; i < 3; i++) {
		const struct rlb_sim_summary *sum = &pol[i].summary;
		double t = 0, ts = 0, ti = 0;
		uint64_t tokens = 0, replicas = 0;
		json_t *j, *a;

		ck_assert_uint_eq(pol[i].nsteps, 2);
		for (k = 0; k < pol[i].nsteps; k++) {
			const struct rlb_planner_step *ps = &pol[i].steps[k];

			ck_assert_uint_eq(ps->sim.step, steps[k]);
			t += ps->sim.policy.total_s;
			ts += ps->static_s;
			ti += ps->ideal_s;
			tokens += ps->sim.tokens;
			replicas += ps->sim.replicas;
		}
		ck_assert(t == sum->policy_time.total_s);
		ck_assert(ts == st.policy_time.total_s);
		ck_assert(ti == sum->ideal.total_s);
		ck_assert_uint_eq(tokens, sum->tokens);
		ck_assert_uint_eq(replicas, sum->replicas);
		j = rlb_result_json(&cfg, &po, &pol[i], &st, &src);
		ck_assert_ptr_nonnull(j);
		a = json_object_get(j, "per_step");
		ck_assert_uint_eq(json_array_size(a), 2);
		for (k = 0; k < 2; k++) {
			json_t *e = json_array_get(a, k);
			const struct rlb_planner_step *ps = &pol[i].steps[k];

			ck_assert_int_eq(json_integer_value(json_object_get(e, "step")), steps[k]);
			ck_assert(json_real_value(json_object_get(e, "step_time_s")) ==
				  ps->sim.policy.total_s);
			ck_assert(json_real_value(json_object_get(e, "speedup_over_static")) ==
				  ps->static_s / ps->sim.policy.total_s);
			ck_assert(json_real_value(json_object_get(
					  json_object_get(e, "breakdown"), "a2a_s")) ==
				  ps->sim.policy.a2a_s);
		}
		json_decref(j);
		rlb_planner_policy_release(&pol[i]);
		ck_assert_ptr_null(pol[i].steps);
	}
	/* a run that fails leaves no steps behind */
	po.first_step = 5;
	ck_assert_int_eq(rlb_planner_run(r, &cfg, &po, pol, 1, NULL, &err), RLB_ENOTFOUND);
	ck_assert_ptr_null(pol[0].steps);
	ck_assert_uint_eq(pol[0].nsteps, 0);
	rlb_trace_reader_free(r);
	unlink(trace);
}
END_TEST

Suite *rlb_suite_exec(void)
{
	Suite *s = suite_create("exec");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_tensor_diff);
	tcase_add_test(tc, test_virtual_matching);
	tcase_add_test(tc, test_virtual_errors);
	tcase_add_test(tc, test_virtual_collectives);
	tcase_add_test(tc, test_backend_names);
	tcase_add_test(tc, test_cpu_rows);
	tcase_add_test(tc, test_cpu_backward_split);
	tcase_add_test(tc, test_exec_every_policy);
	tcase_add_test(tc, test_exec_replica_gradient_runs);
	tcase_add_test(tc, test_exec_identity_preserved);
	tcase_add_test(tc, test_exec_latent_moe);
	tcase_add_test(tc, test_exec_ungated_ffn);
	tcase_add_test(tc, test_exec_diverged_metrics);
	tcase_add_test(tc, test_exec_mismatch);
	tcase_add_test(tc, test_exec_fault);
	tcase_add_test(tc, test_exec_input_cut);
	tcase_add_test(tc, test_planner_per_step);
	suite_add_tcase(s, tc);
	return s;
}
