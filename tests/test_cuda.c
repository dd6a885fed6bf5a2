/*
 * test_cuda.c - unit tests of the CUDA backend.  Without a GPU: its
 * plain-C decisions (lib/cuda_plan: device choice, node communicators, the
 * NCCL id as doubles, GEMM batching).  With a GPU and the backend built in
 * (tcase "gpu", added only then): every op against the fp32 CPU reference
 * at bf16 tolerance, batched and single GEMMs, transfers between virtual
 * ranks, and whole train-step runs on configs/tiny-2x2.yaml, cuda against
 * cpu: losses within 1e-2, final weights by rlb_exec_tensor_diff (within
 * 1e-2 but for at most 1% of a tensor's elements, which Adam's sign flips
 * under bf16 may move by 2 lr per step).  scripts/gpu-check.sh and
 * tests/cli/gpu.sh run the "gpu" case on a GPU machine.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "backend.h"
#include "balance.h"
#include "capture.h"
#include "comm.h"
#include "config.h"
#include "cuda_plan.h"
#include "exec.h"
#include "expert.h"
#include "planner.h"
#include "plan_io.h"
#include "suites.h"
#include "trace.h"

/* bf16 keeps 8 bits of mantissa: relative differences stay below this. */
#define BF16_TOL 1e-2

START_TEST(pick_device)
{
	struct rlb_err err;
	int d;

	ck_assert_int_eq(rlb_cuda_pick_device(3, 8, 0, 0, -1, &d, &err), RLB_EUNSUPPORTED);
	ck_assert_str_eq(err.msg, "no CUDA device");
	ck_assert_int_eq(d, -1);
	ck_assert_int_eq(rlb_cuda_pick_device(3, 8, 8, 0, -1, &d, &err), 0);
	ck_assert_int_eq(d, 3);
	ck_assert_int_eq(rlb_cuda_pick_device(11, 8, 8, 0, -1, &d, &err), 0);
	ck_assert_int_eq(d, 3);
	/* Fewer devices than ranks per node: never shared (NCCL refuses it). */
	ck_assert_int_eq(rlb_cuda_pick_device(3, 4, 2, 0, -1, &d, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "rank 3 is GPU 3 of its node, but 2 CUDA devices are "
			 "visible (NCCL takes one rank per GPU)");
	ck_assert_int_eq(d, -1);
	ck_assert_int_eq(rlb_cuda_pick_device(1, 4, 2, 0, -1, &d, &err), 0);
	ck_assert_int_eq(d, 1);
	/* One device seen: the launcher's choice (CUDA_VISIBLE_DEVICES per rank). */
	ck_assert_int_eq(rlb_cuda_pick_device(7, 8, 1, 0, -1, &d, &err), 0);
	ck_assert_int_eq(d, 0);
	/* Virtual ranks share device 0. */
	ck_assert_int_eq(rlb_cuda_pick_device(7, 8, 8, 1, -1, &d, &err), 0);
	ck_assert_int_eq(d, 0);
	ck_assert_int_eq(rlb_cuda_pick_device(7, 8, 8, 1, 5, &d, &err), 0);
	ck_assert_int_eq(d, 5);
	ck_assert_int_eq(rlb_cuda_pick_device(0, 8, 2, 0, 2, &d, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "CUDA device 2 does not exist (2 found)");
	ck_assert_int_eq(rlb_cuda_pick_device(0, 0, 2, 0, -1, &d, &err), RLB_EINVAL);
}
END_TEST

START_TEST(node_of)
{
	struct rlb_cuda_node n;
	struct rlb_err err;

	ck_assert_int_eq(rlb_cuda_node_of(5, 8, 4, &n, &err), 0);
	ck_assert_int_eq(n.node, 1);
	ck_assert_int_eq(n.index, 1);
	ck_assert_int_eq(n.size, 4);
	ck_assert_int_eq(rlb_cuda_node_of(0, 1, 1, &n, &err), 0);
	ck_assert_int_eq(n.node, 0);
	ck_assert_int_eq(rlb_cuda_node_of(5, 8, 3, &n, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "rank 5 of 8 in nodes of 3 GPUs");
	ck_assert_int_eq(rlb_cuda_node_of(8, 8, 4, &n, &err), RLB_EINVAL);
	ck_assert_int_eq(rlb_cuda_node_of(0, 8, 0, &n, &err), RLB_EINVAL);
}
END_TEST

START_TEST(id_doubles)
{
	unsigned char id[128], back[128];
	double v[128], sum[128];
	struct rlb_err err;
	size_t i;

	for (i = 0; i < sizeof(id); i++)
		id[i] = (unsigned char)(i * 37 + 11);
	id[0] = 0;
	id[1] = 255;
	rlb_cuda_bytes_to_doubles(id, sizeof(id), v);
	/* An allreduce sum where the other ranks contribute zeros. */
	for (i = 0; i < 128; i++)
		sum[i] = 0.0 + v[i] + 0.0;
	ck_assert_int_eq(rlb_cuda_doubles_to_bytes(sum, 128, back, &err), 0);
	ck_assert_mem_eq(id, back, sizeof(id));
	/* Two ranks contributed: a sum above 255 is caught. */
	for (i = 0; i < 128; i++)
		sum[i] = 2 * v[i];
	ck_assert_int_eq(rlb_cuda_doubles_to_bytes(sum, 128, back, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "NCCL id byte 1 is 510, not 0..255");
	sum[0] = 0.5;
	ck_assert_int_eq(rlb_cuda_doubles_to_bytes(sum, 1, back, &err), RLB_ECORRUPT);
	sum[0] = NAN;
	ck_assert_int_eq(rlb_cuda_doubles_to_bytes(sum, 1, back, &err), RLB_ECORRUPT);
}
END_TEST

START_TEST(gemm_batches)
{
	const size_t rows[] = { 40, 0, 16, 40, 40, 16, 7, 40, 0 };
	size_t order[9], nb, i;
	struct rlb_gemm_batch b[9];
	struct rlb_err err;

	/* At most 3 jobs: 7 16 16 | 40 40 40 | 40, ascending, ties by index. */
	ck_assert_int_eq(rlb_gemm_batches(rows, 9, 3, 1000, order, b, &nb, &err), 0);
	ck_assert_int_eq(nb, 3);
	{
		const size_t want[] = { 6, 2, 5, 0, 3, 4, 7 };

		for (i = 0; i < 7; i++)
			ck_assert_int_eq(order[i], want[i]);
	}
	ck_assert_int_eq(b[0].first, 0);
	ck_assert_int_eq(b[0].count, 3);
	ck_assert_int_eq(b[0].rows, 39);
	ck_assert_int_eq(b[1].first, 3);
	ck_assert_int_eq(b[1].count, 3);
	ck_assert_int_eq(b[1].rows, 120);
	ck_assert_int_eq(b[2].first, 6);
	ck_assert_int_eq(b[2].count, 1);
	ck_assert_int_eq(b[2].rows, 40);

	/* At most 80 rows: 7 16 16 40 | 40 40 | 40 */
	ck_assert_int_eq(rlb_gemm_batches(rows, 9, 64, 80, order, b, &nb, &err), 0);
	ck_assert_int_eq(nb, 3);
	ck_assert_int_eq(b[0].count, 4);
	ck_assert_int_eq(b[0].rows, 79);
	ck_assert_int_eq(b[1].count, 2);
	ck_assert_int_eq(b[1].rows, 80);
	ck_assert_int_eq(b[2].count, 1);
	/* At most 30 rows: 7 16 | 16 | 40 | 40 | 40 | 40 (a lone job may pass the bound) */
	ck_assert_int_eq(rlb_gemm_batches(rows, 9, 64, 30, order, b, &nb, &err), 0);
	ck_assert_int_eq(nb, 6);
	ck_assert_int_eq(b[0].rows, 23);
	ck_assert_int_eq(b[2].rows, 40);
	/* Every non-empty job appears once, batches back to back. */
	for (i = 1; i < nb; i++)
		ck_assert_int_eq(b[i].first, b[i - 1].first + b[i - 1].count);
	ck_assert_int_eq(b[nb - 1].first + b[nb - 1].count, 7);

	ck_assert_int_eq(rlb_gemm_batches(rows, 0, 4, 10, order, b, &nb, &err), 0);
	ck_assert_int_eq(nb, 0);
	ck_assert_int_eq(rlb_gemm_batches(rows, 9, 0, 10, order, b, &nb, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "batch of jobs 0");
	ck_assert_int_eq(rlb_gemm_batches(rows, 9, 4, 0, order, b, &nb, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "batch of rows 0");
}
END_TEST


/* ---- on a GPU ---- */

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const float *b, size_t n)
{
	double d = 0, m = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		double x = fabs((double)a[i] - b[i]);

		if (!(x <= d))
			d = isnan(x) ? INFINITY : x;
		if (fabs(b[i]) > m)
			m = fabs(b[i]);
	}
	return m > 0 ? d / m : d;
}

static float *rnd(size_t n, uint64_t seed, float scale)
{
	float *p = malloc((n ? n : 1) * sizeof(float));
	size_t i;

	ck_assert_ptr_nonnull(p);
	for (i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		p[i] = scale * ((float)(seed >> 40) * 0x1p-24f * 2.0f - 1.0f);
	}
	return p;
}

/*
 * RLB_CUDA_GEMM as train-step reads it, so that scripts/gpu-check.sh runs
 * the backends made here with either GEMM strategy.
 */
static enum rlb_gemm_mode test_gemm(void)
{
	const char *v = getenv("RLB_CUDA_GEMM");
	enum rlb_gemm_mode m = RLB_GEMM_GROUPED;
	struct rlb_err err = { 0, "" };

	if (v && *v)
		ck_assert_msg(rlb_gemm_mode_from_name(v, &m, &err) == 0, "RLB_CUDA_GEMM: %s",
			      err.msg);
	return m;
}

struct gpu {
	struct rlb_world *w;
	struct rlb_backend *be;
	struct rlb_queue *q;
};

static void gpu_open(struct gpu *g, uint32_t ranks)
{
	struct rlb_backend_init bi;
	struct rlb_err err = { 0, "" };

	memset(g, 0, sizeof(*g));
	ck_assert_int_eq(rlb_world_virtual_new(&g->w, ranks, &err), 0);
	ck_assert_int_eq(rlb_world_set_node_size(g->w, ranks, &err), 0);
	memset(&bi, 0, sizeof(bi));
	bi.ranks = ranks;
	bi.gpus_per_node = ranks;
	bi.device = -1;
	bi.world = g->w;
	bi.gemm = test_gemm();
	ck_assert_msg(rlb_backend_new(RLB_BACKEND_CUDA, &bi, &g->be, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(g->be->act_bytes, 2);
	ck_assert_int_eq(g->be->acc_bytes, 4);
	ck_assert_int_eq(g->be->opt_bytes, 12);
	ck_assert_int_eq(g->be->ops->queue_new(g->be, &g->q, &err), 0);
}

static void gpu_close(struct gpu *g)
{
	g->be->ops->queue_free(g->be, g->q);
	rlb_backend_free(g->be);
	rlb_world_free(g->w);
}

static void *dev_acts(struct gpu *g, const float *host, size_t n)
{
	struct rlb_err err = { 0, "" };
	void *d;

	ck_assert_int_eq(g->be->ops->alloc(g->be, (n ? n : 1) * 2, &d, &err), 0);
	if (n && host)	/* NULL: an output buffer, nothing to upload */
		ck_assert_int_eq(g->be->ops->upload_act(g->be, g->q, d, host, n, &err), 0);
	return d;
}

static void *dev_bytes(struct gpu *g, const void *host, size_t bytes)
{
	struct rlb_err err = { 0, "" };
	void *d;

	ck_assert_int_eq(g->be->ops->alloc(g->be, bytes ? bytes : 1, &d, &err), 0);
	if (bytes)
		ck_assert_int_eq(g->be->ops->upload(g->be, g->q, d, host, bytes, &err), 0);
	return d;
}

static void get_acts(struct gpu *g, float *host, const void *d, size_t n)
{
	struct rlb_err err = { 0, "" };

	ck_assert_msg(g->be->ops->download_act(g->be, g->q, host, d, n, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(g->be->ops->queue_sync(g->be, g->q, &err), 0);
}

/* Round through bf16 on the device, so references start from the same inputs. */
static void through_bf16(struct gpu *g, float *v, size_t n)
{
	void *d = dev_acts(g, v, n);

	get_acts(g, v, d, n);
	g->be->ops->free(g->be, d);
}

START_TEST(gpu_expert)
{
	/*
	 * 0: one job of 7 rows and three of 16 (one batch of two row counts), an
	 * empty one; 1: an odd ffn (the SwiGLU kernels' unpaired columns) and
	 * four row counts.
	 */
	static const struct rlb_expert_shape shapes[2] = { { 64, 32, 0 }, { 40, 21, 0 } };
	static const size_t rows_of[2][5] = { { 7, 16, 16, 16, 0 }, { 12, 5, 9, 3, 9 } };
	const struct rlb_expert_shape s = shapes[_i];
	const size_t *rows = rows_of[_i];
	size_t np = rlb_expert_params(&s), H = s.hidden, F = s.ffn, j, i;
	struct rlb_expert_job jobs[5];
	struct rlb_err err = { 0, "" };
	struct gpu g;

	gpu_open(&g, 1);
	memset(jobs, 0, sizeof(jobs));
	for (j = 0; j < 5; j++) {
		size_t n = rows[j];
		float *w = rnd(np, 11 + j, 0.2f), *x = rnd(n * H, 21 + j, 1.0f);
		float *dy = rnd(n * H, 31 + j, 1.0f), *zero = calloc(np, sizeof(float));

		through_bf16(&g, w, np);
		through_bf16(&g, x, n * H);
		through_bf16(&g, dy, n * H);
		ck_assert_int_eq(g.be->ops->alloc(g.be, np * 2, (void **)&jobs[j].w, &err), 0);
		ck_assert_int_eq(g.be->ops->upload_weights(g.be, g.q, &s, w, (void *)jobs[j].w,
							   NULL, &err), 0);
		jobs[j].rows = n;
		jobs[j].x = dev_acts(&g, x, n * H);
		jobs[j].y = dev_acts(&g, NULL, n * H);
		jobs[j].act = dev_acts(&g, NULL, n * 2 * F);
		jobs[j].dy = dev_acts(&g, dy, n * H);
		jobs[j].dx = dev_acts(&g, NULL, n * H);
		jobs[j].g = dev_bytes(&g, zero, np * sizeof(float));
		free(w);
		free(x);
		free(dy);
		free(zero);
	}
	ck_assert_msg(g.be->ops->expert_forward(g.be, g.q, &s, jobs, 5, &err) == 0, "%s", err.msg);
	ck_assert_msg(g.be->ops->expert_backward(g.be, g.q, &s, jobs, 5, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(g.be->ops->queue_sync(g.be, g.q, &err), 0);
	for (j = 0; j < 5; j++) {
		size_t n = rows[j];
		float *w = rnd(np, 11 + j, 0.2f), *x = rnd(n * H, 21 + j, 1.0f);
		float *dy = rnd(n * H, 31 + j, 1.0f);
		float *y = calloc(n * H + 1, sizeof(float)), *act = calloc(n * 2 * F + 1, sizeof(float));
		float *dx = calloc(n * H + 1, sizeof(float)), *dw = calloc(np, sizeof(float));
		float *gy = calloc(n * H + 1, sizeof(float)), *gdx = calloc(n * H + 1, sizeof(float));
		float *gw = calloc(np, sizeof(float)), *dw_back = calloc(np, sizeof(float));

		through_bf16(&g, w, np);
		through_bf16(&g, x, n * H);
		through_bf16(&g, dy, n * H);
		rlb_expert_forward(&s, w, n, x, y, act);
		rlb_expert_backward(&s, w, n, x, act, dy, dx, dw);
		if (n) {
			get_acts(&g, gy, jobs[j].y, n * H);
			get_acts(&g, gdx, jobs[j].dx, n * H);
			ck_assert_msg(rel_diff(gy, y, n * H) < BF16_TOL, "job %zu y %g", j,
				      rel_diff(gy, y, n * H));
			ck_assert_msg(rel_diff(gdx, dx, n * H) < BF16_TOL, "job %zu dx %g", j,
				      rel_diff(gdx, dx, n * H));
		}
		/*
		 * The accumulator is arranged as the master copy, which
		 * download_weights puts back in lib/expert.h's layout; the
		 * compute weights come back as they went in (bf16 values).
		 */
		ck_assert_int_eq(g.be->ops->download_weights(g.be, g.q, &s, NULL, jobs[j].g, gw,
							      &err), 0);
		ck_assert_int_eq(g.be->ops->download_weights(g.be, g.q, &s, jobs[j].w, NULL, dw_back,
							      &err), 0);
		ck_assert_int_eq(g.be->ops->queue_sync(g.be, g.q, &err), 0);
		for (i = 0; i < np; i++)
			ck_assert_msg(dw_back[i] == w[i], "job %zu weight %zu: %g, uploaded %g", j, i,
				      dw_back[i], w[i]);
		for (i = 0; i < 3; i++)
			ck_assert_msg(rel_diff(gw + i * H * F, dw + i * H * F, H * F) < BF16_TOL,
				      "job %zu tensor %zu dw %g", j, i,
				      rel_diff(gw + i * H * F, dw + i * H * F, H * F));
		g.be->ops->free(g.be, (void *)jobs[j].w);
		g.be->ops->free(g.be, (void *)jobs[j].x);
		g.be->ops->free(g.be, jobs[j].y);
		g.be->ops->free(g.be, jobs[j].act);
		g.be->ops->free(g.be, (void *)jobs[j].dy);
		g.be->ops->free(g.be, jobs[j].dx);
		g.be->ops->free(g.be, jobs[j].g);
		free(w);
		free(x);
		free(dy);
		free(y);
		free(act);
		free(dx);
		free(dw);
		free(gy);
		free(gdx);
		free(gw);
		free(dw_back);
	}
	gpu_close(&g);
}
END_TEST

/*
 * queue_hold keeps later work from starting until queue_release (50 ms of
 * host sleep show between an event before the hold and one after it); a
 * hold never released lapses (about 0.1 s) instead of hanging, and the
 * queue then holds no more.
 */
START_TEST(gpu_hold)
{
	struct rlb_err err = { 0, "" };
	struct rlb_event *before, *after;
	struct rlb_elapsed el;
	struct gpu g;
	int i;

	gpu_open(&g, 1);
	ck_assert_ptr_nonnull(g.be->ops->queue_hold);
	ck_assert_int_eq(g.be->ops->event_new(g.be, &before, &err), 0);
	ck_assert_int_eq(g.be->ops->event_new(g.be, &after, &err), 0);
	for (i = 0; i < 2; i++) {	/* twice: a released hold leaves holds on */
		ck_assert_int_eq(g.be->ops->event_record(g.be, before, g.q, &err), 0);
		ck_assert_int_eq(g.be->ops->queue_hold(g.be, g.q, &err), 0);
		ck_assert_int_eq(g.be->ops->event_record(g.be, after, g.q, &err), 0);
		usleep(50000);
		ck_assert_int_eq(g.be->ops->queue_release(g.be, g.q, &err), 0);
		ck_assert_int_eq(g.be->ops->elapsed(g.be, before, after, &el, &err), 0);
		ck_assert_msg(el.wall_ns >= 40000000u && el.wall_ns < 90000000u,
			      "held %.1f ms, slept 50", el.wall_ns / 1e6);
	}
	/* not released: lapses */
	ck_assert_int_eq(g.be->ops->event_record(g.be, before, g.q, &err), 0);
	ck_assert_int_eq(g.be->ops->queue_hold(g.be, g.q, &err), 0);
	ck_assert_int_eq(g.be->ops->event_record(g.be, after, g.q, &err), 0);
	ck_assert_int_eq(g.be->ops->elapsed(g.be, before, after, &el, &err), 0);
	ck_assert_msg(el.wall_ns >= 90000000u && el.wall_ns < 2000000000u,
		      "lapsed after %.1f ms", el.wall_ns / 1e6);
	ck_assert_int_eq(g.be->ops->queue_release(g.be, g.q, &err), 0);
	/* and the queue holds no more: queue_hold says so (backend.h) */
	ck_assert_int_eq(g.be->ops->event_record(g.be, before, g.q, &err), 0);
	ck_assert_int_eq(g.be->ops->queue_hold(g.be, g.q, &err), 1);
	ck_assert_int_eq(g.be->ops->event_record(g.be, after, g.q, &err), 0);
	usleep(50000);
	ck_assert_int_eq(g.be->ops->queue_release(g.be, g.q, &err), 0);
	ck_assert_int_eq(g.be->ops->elapsed(g.be, before, after, &el, &err), 0);
	ck_assert_msg(el.wall_ns < 10000000u, "held %.1f ms after a lapse", el.wall_ns / 1e6);
	g.be->ops->event_free(g.be, before);
	g.be->ops->event_free(g.be, after);
	gpu_close(&g);
}
END_TEST

START_TEST(gpu_rows_and_adam)
{
	static const uint32_t idx[4] = { 2, 0, 2, 1 };
	static const float scale[4] = { 0.5f, 1.0f, -2.0f, 0.25f };
	static const float gate[4] = { 0.75f, 0.25f, 0.5f, 0.5f };
	static const uint32_t cidx[4] = { 3, 1, 0, 2 };
	const uint32_t W = 40;
	float *src = rnd(3 * W, 5, 1.0f), *ycomb = rnd(4 * W, 6, 1.0f), *io = rnd(2 * W, 7, 1.0f);
	float got[4 * 40], want[4 * 40];
	struct rlb_err err = { 0, "" };
	struct rlb_adam a = { 1e-2f, 0.9f, 0.999f, 1e-8f, 3 };
	size_t n = 1000, i, k;
	float *mw = rnd(n, 8, 1.0f), *gr = rnd(n, 9, 1.0f), *m = calloc(n, sizeof(float));
	float *v = calloc(n, sizeof(float)), *back = calloc(n, sizeof(float));
	struct gpu g;
	void *dsrc, *ddst, *didx, *dscale, *dgate, *dcidx, *dy, *dio, *w, *opt, *dg, *dg2;

	gpu_open(&g, 1);
	through_bf16(&g, src, 3 * W);
	through_bf16(&g, ycomb, 4 * W);
	through_bf16(&g, io, 2 * W);
	/* gather with scale */
	dsrc = dev_acts(&g, src, 3 * W);
	ddst = dev_acts(&g, NULL, 4 * W);
	didx = dev_bytes(&g, idx, sizeof(idx));
	dscale = dev_bytes(&g, scale, sizeof(scale));
	ck_assert_int_eq(g.be->ops->gather(g.be, g.q, 4, W, didx, dscale, dsrc, ddst, &err), 0);
	get_acts(&g, got, ddst, 4 * W);
	for (i = 0; i < 4; i++)
		for (k = 0; k < W; k++)
			want[i * W + k] = scale[i] * src[idx[i] * W + k];
	ck_assert_double_lt(rel_diff(got, want, 4 * W), BF16_TOL);
	/* combine: 2 tokens, top-2, fixed k order */
	dy = dev_acts(&g, ycomb, 4 * W);
	dio = dev_acts(&g, io, 2 * W);
	dgate = dev_bytes(&g, gate, sizeof(gate));
	dcidx = dev_bytes(&g, cidx, sizeof(cidx));
	ck_assert_int_eq(g.be->ops->combine(g.be, g.q, 2, 2, W, dcidx, dgate, dy, dio, &err), 0);
	get_acts(&g, got, dio, 2 * W);
	for (i = 0; i < 2; i++)
		for (k = 0; k < W; k++)
			want[i * W + k] = io[i * W + k] + gate[2 * i] * ycomb[cidx[2 * i] * W + k] +
					  gate[2 * i + 1] * ycomb[cidx[2 * i + 1] * W + k];
	ck_assert_double_lt(rel_diff(got, want, 2 * W), BF16_TOL);
	/* acc_add, then Adam on the master copy */
	ck_assert_int_eq(g.be->ops->alloc(g.be, n * 2, &w, &err), 0);
	ck_assert_int_eq(g.be->ops->alloc(g.be, n * 12, &opt, &err), 0);
	{
		struct rlb_expert_shape s1 = { 1, (uint32_t)n / 3, 0 };
		float *half = malloc(n * sizeof(float));

		ck_assert_int_eq(rlb_expert_params(&s1), 999);
		n = 999;
		for (i = 0; i < n; i++)
			half[i] = 0.5f * gr[i];
		ck_assert_int_eq(g.be->ops->upload_weights(g.be, g.q, &s1, mw, w, opt, &err), 0);
		dg = dev_bytes(&g, half, n * sizeof(float));
		dg2 = dev_bytes(&g, half, n * sizeof(float));
		ck_assert_int_eq(g.be->ops->acc_add(g.be, g.q, n, dg, dg2, &err), 0);
		ck_assert_int_eq(g.be->ops->adam(g.be, g.q, &a, n, 1.0f, w, dg, opt, &err), 0);
		ck_assert_int_eq(g.be->ops->download_weights(g.be, g.q, &s1, w, opt, back, &err), 0);
		ck_assert_int_eq(g.be->ops->queue_sync(g.be, g.q, &err), 0);
		for (i = 0; i < n; i++)
			gr[i] = half[i] + half[i];
		rlb_adam_update(&a, n, mw, gr, m, v);
		ck_assert_double_lt(rel_diff(back, mw, n), 1e-6);
		/* the compute weights are the master rounded to bf16 */
		ck_assert_int_eq(g.be->ops->download_weights(g.be, g.q, &s1, w, NULL, back, &err), 0);
		ck_assert_double_lt(rel_diff(back, mw, n), 1.0 / 128);
		free(half);
	}
	g.be->ops->free(g.be, dsrc);
	g.be->ops->free(g.be, ddst);
	g.be->ops->free(g.be, didx);
	g.be->ops->free(g.be, dscale);
	g.be->ops->free(g.be, dy);
	g.be->ops->free(g.be, dio);
	g.be->ops->free(g.be, dgate);
	g.be->ops->free(g.be, dcidx);
	g.be->ops->free(g.be, w);
	g.be->ops->free(g.be, opt);
	g.be->ops->free(g.be, dg);
	g.be->ops->free(g.be, dg2);
	gpu_close(&g);
	free(src);
	free(ycomb);
	free(io);
	free(mw);
	free(gr);
	free(m);
	free(v);
	free(back);
}
END_TEST

/* Two virtual ranks on one GPU: grouped transfers are device copies. */
START_TEST(gpu_virtual_transfers)
{
	struct rlb_backend *be[2];
	struct rlb_queue *q[2];
	struct rlb_world *w;
	struct rlb_err err = { 0, "" };
	int host[2][64], back[64];
	void *buf[2], *in[2];
	uint32_t r, i;

	ck_assert_int_eq(rlb_world_virtual_new(&w, 2, &err), 0);
	ck_assert_int_eq(rlb_world_set_node_size(w, 2, &err), 0);
	for (r = 0; r < 2; r++) {
		struct rlb_backend_init bi = { r, 2, 2, r, -1, w, test_gemm() };

		ck_assert_msg(rlb_backend_new(RLB_BACKEND_CUDA, &bi, &be[r], &err) == 0, "%s", err.msg);
		ck_assert_int_eq(be[r]->ops->queue_new(be[r], &q[r], &err), 0);
		for (i = 0; i < 64; i++)
			host[r][i] = (int)(r * 1000 + i);
		ck_assert_int_eq(be[r]->ops->alloc(be[r], sizeof(host[r]), &buf[r], &err), 0);
		ck_assert_int_eq(be[r]->ops->alloc(be[r], sizeof(host[r]), &in[r], &err), 0);
		ck_assert_int_eq(be[r]->ops->upload(be[r], q[r], buf[r], host[r], sizeof(host[r]),
						    &err), 0);
	}
	/* rank 0 <-> rank 1 over the node communicator, every rank posts before any syncs */
	for (r = 0; r < 2; r++) {
		ck_assert_int_eq(be[r]->ops->group_start(be[r], RLB_COMM_NODE, &err), 0);
		ck_assert_int_eq(be[r]->ops->send(be[r], RLB_COMM_NODE, !r, buf[r], sizeof(host[r]),
						  &err), 0);
		ck_assert_int_eq(be[r]->ops->recv(be[r], RLB_COMM_NODE, !r, in[r], sizeof(host[r]),
						  &err), 0);
		ck_assert_int_eq(be[r]->ops->group_end(be[r], RLB_COMM_NODE, q[r], &err), 0);
	}
	for (r = 0; r < 2; r++) {
		ck_assert_int_eq(be[r]->ops->queue_sync(be[r], q[r], &err), 0);
		ck_assert_int_eq(be[r]->ops->download(be[r], q[r], back, in[r], sizeof(back), &err), 0);
		ck_assert_mem_eq(back, host[!r], sizeof(back));
	}
	for (r = 0; r < 2; r++) {
		be[r]->ops->free(be[r], buf[r]);
		be[r]->ops->free(be[r], in[r]);
		be[r]->ops->queue_free(be[r], q[r]);
		rlb_backend_free(be[r]);
	}
	rlb_world_free(w);
}
END_TEST

/* configs/tiny-2x2.yaml with a short workload. */
static void tiny_config(struct rlb_config *cfg)
{
	static const char *const sets[] = {
		"workload.steps=2", "workload.prompts_per_step=4",
		"balancer.min_tokens_per_replica=1",
	};
	char path[1024];
	struct rlb_err err = { 0, "" };

	snprintf(path, sizeof(path), "%s/../configs/tiny-2x2.yaml", rlb_test_srcdir());
	ck_assert_msg(rlb_config_load(cfg, path, sets, 3, &err) == 0, "%s", err.msg);
}

static void tiny_inputs(const struct rlb_config *cfg, const char *trace, const char *plan,
			enum rlb_policy policy)
{
	struct rlb_trace_header h;
	struct rlb_trace_writer *tw;
	struct rlb_trace_reader *r;
	struct rlb_planner_policy pol;
	struct rlb_planner_opts po;
	struct rlb_plan_header ph;
	struct rlb_err err = { 0, "" };
	const uint32_t *steps;
	size_t n;

	memset(&h, 0, sizeof(h));
	rlb_trace_header_from_config(&h, cfg);
	ck_assert_msg(rlb_trace_writer_open(&tw, trace, &h, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_synth_generate(cfg, 3, 0, tw, NULL, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_writer_close(tw, &err) == 0, "%s", err.msg);
	memset(&pol, 0, sizeof(pol));
	memset(&po, 0, sizeof(po));
	ck_assert_int_eq(rlb_trace_reader_open(&r, trace, &err), 0);
	ck_assert_int_eq(rlb_trace_reader_steps(r, &steps, &n, &err), 0);
	rlb_balance_opts_from_config(&pol.opts, cfg);
	pol.opts.policy = policy;
	po.pack = cfg->parallel.pack;
	po.last_step = UINT32_MAX;
	rlb_plan_header_init(&ph, cfg, &pol.opts, po.pack, rlb_trace_reader_header(r), steps, n);
	ck_assert_msg(rlb_plan_writer_open(&pol.writer, plan, &ph, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_planner_run(r, cfg, &po, &pol, 1, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_plan_writer_close(pol.writer, &err) == 0, "%s", err.msg);
	rlb_planner_policy_release(&pol);
	rlb_trace_reader_free(r);
}

/*
 * Replicas that a GPU keeps from one micro-batch to the next (the same
 * expert's replica on the same GPU in micro-batches m and m + 1), over
 * every step and layer of PLAN: their gradients go home once per run.
 */
static size_t kept_replicas(const char *plan)
{
	struct rlb_plan_reader *r;
	struct rlb_step_plan p;
	struct rlb_err err = { 0, "" };
	uint32_t m, L, e, a, b, na, nb;
	size_t kept = 0;
	int ret;

	memset(&p, 0, sizeof(p));
	if (rlb_plan_reader_open(&r, plan, &err) != 0)
		return 0;
	while ((ret = rlb_plan_reader_next(r, &p, &err)) > 0) {
		for (m = 0; m + 1 < p.micro_batches; m++)
			for (L = 0; L < p.layers; L++)
				for (e = 0; e < p.experts; e++) {
					const struct rlb_plan_instance *x = rlb_step_plan_cell(&p, m, L, e, &na);
					const struct rlb_plan_instance *y = rlb_step_plan_cell(&p, m + 1, L, e, &nb);

					for (a = 1; a < na; a++)
						for (b = 1; b < nb; b++)
							kept += x[a].gpu == y[b].gpu;
				}
	}
	rlb_step_plan_release(&p);
	rlb_plan_reader_free(r);
	return kept;
}

/* Final weights of every expert and the losses of one run. */
static void tiny_run(const struct rlb_config *cfg, const char *trace, const char *plan,
		     enum rlb_backend_kind kind, float *weights, double *loss)
{
	struct rlb_exec_opts o;
	struct rlb_exec_summary s;
	struct rlb_world *w;
	struct rlb_exec *ex;
	struct rlb_err err = { 0, "" };
	size_t np = 3 * (size_t)cfg->model.hidden * cfg->model.expert_ffn;
	uint32_t L, e, failed;

	rlb_exec_opts_defaults(&o);
	o.backend = kind;
	o.gemm = test_gemm();
	ck_assert_int_eq(rlb_world_virtual_new(&w, (uint32_t)cfg->parallel.ep_size, &err), 0);
	ck_assert_msg(rlb_exec_new(&ex, w, cfg, trace, plan, &o, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_exec_run(ex, NULL, &failed, &err) == 0, "%s", err.msg);
	for (L = 0; L < (uint32_t)cfg->model.moe_layers; L++)
		for (e = 0; e < (uint32_t)cfg->model.experts; e++)
			ck_assert_msg(rlb_exec_weights(ex, L, e, weights +
				((size_t)L * cfg->model.experts + e) * np, &err) == 0, "%s", err.msg);
	rlb_exec_summary(ex, &s);
	loss[0] = s.first_loss;
	loss[1] = s.last_loss;
	if (kind == RLB_BACKEND_CUDA) {	/* every virtual rank's expert span held */
		json_t *j = rlb_exec_metrics_json(ex, NULL);

		ck_assert_ptr_nonnull(j);
		ck_assert_int_eq(json_integer_value(json_object_get(j, "unheld_spans")), 0);
		ck_assert_ptr_nonnull(json_object_get(j, "unheld_spans"));
		json_decref(j);
	}
	rlb_exec_free(ex);
	rlb_world_free(w);
}

/*
 * The same training on the cuda backend as on the cpu one: relibra's plan,
 * and EPLB's, whose replicas stay on their GPUs from one micro-batch to
 * the next (their gradients accumulate there and go home once per run).
 */
START_TEST(gpu_train_step_vs_cpu)
{
	static const enum rlb_policy policies[] = { RLB_POLICY_RELIBRA, RLB_POLICY_EPLB };
	enum rlb_policy policy = policies[_i];
	struct rlb_config cfg;
	char trace[512], plan[512];
	size_t np, n, c;
	float *wc, *wg;
	double lc[2], lg[2], worst = 0, outliers = 0;
	struct rlb_exec_opts o;
	size_t bad = 0;

	rlb_exec_opts_defaults(&o);	/* tiny_run's */

	tiny_config(&cfg);
	snprintf(trace, sizeof(trace), "%s/cuda-%ld.rrt", rlb_test_tmpdir(), (long)getpid());
	snprintf(plan, sizeof(plan), "%s/cuda-%ld.rlp", rlb_test_tmpdir(), (long)getpid());
	tiny_inputs(&cfg, trace, plan, policy);
	if (policy == RLB_POLICY_EPLB)
		ck_assert_uint_gt(kept_replicas(plan), 0);
	np = 3 * (size_t)cfg.model.hidden * cfg.model.expert_ffn;
	n = (size_t)cfg.model.moe_layers * cfg.model.experts;
	wc = malloc(n * np * sizeof(float));
	wg = malloc(n * np * sizeof(float));
	ck_assert_ptr_nonnull(wc);
	ck_assert_ptr_nonnull(wg);
	tiny_run(&cfg, trace, plan, RLB_BACKEND_CPU, wc, lc);
	tiny_run(&cfg, trace, plan, RLB_BACKEND_CUDA, wg, lg);
	for (c = 0; c < 3 * n; c++) {
		struct rlb_tensor_diff td;

		/* tiny_run's 2 steps: a sign flip moves 2 lr per step */
		rlb_exec_tensor_diff(wg + c * (np / 3), wc + c * (np / 3), np / 3,
				     BF16_TOL, 2 * 2 * (double)o.adam.lr, 0.01, &td);
		if (td.max_rel > worst)
			worst = td.max_rel;
		if (td.outliers > outliers)
			outliers = td.outliers;
		bad += !td.ok;
	}
	printf("cuda vs cpu on tiny-2x2, %s plan: max relative weight difference %.3g, "
	       "%.3g%% of a tensor's elements beyond 1e-2, loss %.6g vs %.6g\n",
	       rlb_policy_name(policy), worst, 100 * outliers, lg[1], lc[1]);
	fflush(stdout);	/* the figures reach the log even when an assertion fails */
	ck_assert_msg(bad == 0, "%zu tensors differ (max relative difference %g, %g of the elements beyond 1e-2)",
		      bad, worst, outliers);
	ck_assert_double_le(fabs(lg[0] - lc[0]) / fabs(lc[0]), BF16_TOL);
	ck_assert_double_le(fabs(lg[1] - lc[1]) / fabs(lc[1]), BF16_TOL);
	free(wc);
	free(wg);
	unlink(trace);
	unlink(plan);
}
END_TEST

/*
 * A usable GPU, asked in a child process: Check forks a child per test,
 * and a CUDA context started in the parent before fork() is unusable in
 * the children.
 */
static int gpu_present(void)
{
	int st = 0;
	pid_t pid;

	if (!rlb_backend_available(RLB_BACKEND_CUDA))
		return 0;
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(rlb_cuda_device_count() > 0 ? 0 : 1);
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
	       WEXITSTATUS(st) == 0;
}

Suite *rlb_suite_cuda(void)
{
	Suite *s = suite_create("cuda");
	TCase *plan = tcase_create("plan");

	tcase_add_test(plan, pick_device);
	tcase_add_test(plan, node_of);
	tcase_add_test(plan, id_doubles);
	tcase_add_test(plan, gemm_batches);
	suite_add_tcase(s, plan);
	if (gpu_present()) {
		TCase *gpu = tcase_create("gpu");

		tcase_set_timeout(gpu, 120);
		tcase_add_loop_test(gpu, gpu_expert, 0, 2);
		tcase_add_test(gpu, gpu_hold);
		tcase_add_test(gpu, gpu_rows_and_adam);
		tcase_add_test(gpu, gpu_virtual_transfers);
		tcase_add_loop_test(gpu, gpu_train_step_vs_cpu, 0, 2);
		suite_add_tcase(s, gpu);
	}
	return s;
}
