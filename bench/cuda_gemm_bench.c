/*
 * cuda_gemm_bench.c - the CUDA backend's expert forward and backward on one
 * GPU: one call over EXPERTS experts of HIDDEN x FFN, each a different row
 * count around ROWS (ROWS + 23 i + i mod 3, as a plan's instances have) or
 * all ROWS ("equal": one batched call a stage), with either GEMM strategy
 * of RLB_CUDA_GEMM (loop, grouped).  Per case, medians of REPS runs:
 *   enqueue  host time to enqueue the call;
 *   unheld   GPU time from an event before the call to one after it, the
 *            call enqueued as the GPU runs it (the GPU waits on the host);
 *   held     the same with the queue held while the call is enqueued
 *            (queue_hold): the GPU's own time, what train-step measures
 *            for virtual ranks; and its TFLOP/s (6 rows hidden ffn
 *            forward, twice that backward).
 * Without a GPU (or without CUDA built in) it says so and exits 0.
 * usage: cuda_gemm_bench [-r ROWS] [-e EXPERTS] [-H HIDDEN] [-F FFN] [-n REPS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "comm.h"
#include "cuda_plan.h"
#include "stats.h"
#include "util.h"

#define MAX_EXPERTS 64

struct bench {
	struct rlb_world *w;
	struct rlb_backend *be;
	struct rlb_queue *q;
	struct rlb_event *e0, *e1;
	struct rlb_expert_shape s;
	struct rlb_expert_job jobs[MAX_EXPERTS];
	unsigned experts;
	size_t rows;			/* all jobs together */
	void *x, *y, *act, *dx, *w0[MAX_EXPERTS], *g0[MAX_EXPERTS];
};

/* The median of V[0..n) (sorts it): p50 of lib/stats.h's distribution. */
static double median(double *v, int n)
{
	struct rlb_dist d;

	rlb_dist_compute(&d, v, (size_t)n);
	return d.p50;
}

static void bench_free(struct bench *b)
{
	unsigned i;

	if (b->be) {
		for (i = 0; i < b->experts; i++) {
			b->be->ops->free(b->be, b->w0[i]);
			b->be->ops->free(b->be, b->g0[i]);
		}
		b->be->ops->free(b->be, b->x);
		b->be->ops->free(b->be, b->y);
		b->be->ops->free(b->be, b->act);
		b->be->ops->free(b->be, b->dx);
		b->be->ops->event_free(b->be, b->e0);
		b->be->ops->event_free(b->be, b->e1);
		b->be->ops->queue_free(b->be, b->q);
		rlb_backend_free(b->be);
	}
	rlb_world_free(b->w);
	memset(b, 0, sizeof(*b));
}

/* A backend with GEMM strategy MODE and the jobs of one case. */
static int bench_init(struct bench *b, const struct rlb_expert_shape *s,
		      unsigned experts, size_t rows, int equal,
		      enum rlb_gemm_mode mode, struct rlb_err *err)
{
	struct rlb_backend_init bi;
	struct rlb_backend *be;
	size_t np = rlb_expert_params(s), H = s->hidden, F = s->ffn, at = 0, i;
	float *host = NULL;
	int ret;

	memset(b, 0, sizeof(*b));
	b->s = *s;
	b->experts = experts;
	for (i = 0; i < experts; i++)
		b->rows += equal ? rows : rows + 23 * i + i % 3;
	ret = rlb_world_virtual_new(&b->w, 1, err);
	if (ret == 0)
		ret = rlb_world_set_node_size(b->w, 1, err);
	memset(&bi, 0, sizeof(bi));
	bi.ranks = 1;
	bi.gpus_per_node = 1;
	bi.device = -1;
	bi.world = b->w;
	bi.gemm = mode;
	if (ret == 0)
		ret = rlb_backend_new(RLB_BACKEND_CUDA, &bi, &b->be, err);
	if (ret)
		return ret;
	be = b->be;
	ret = be->ops->queue_new(be, &b->q, err);
	if (ret == 0)
		ret = be->ops->event_new(be, &b->e0, err);
	if (ret == 0)
		ret = be->ops->event_new(be, &b->e1, err);
	if (ret == 0)
		ret = be->ops->alloc(be, b->rows * H * 2, &b->x, err);
	if (ret == 0)
		ret = be->ops->alloc(be, b->rows * H * 2, &b->y, err);
	if (ret == 0)
		ret = be->ops->alloc(be, b->rows * H * 2, &b->dx, err);
	if (ret == 0)
		ret = be->ops->alloc(be, b->rows * 2 * F * 2, &b->act, err);
	host = malloc((np > b->rows * H ? np : b->rows * H) * sizeof(float));
	if (ret == 0 && !host)
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
	/* random-looking values: GEMMs on zeros run faster than on data */
	for (i = 0; ret == 0 && i < b->rows * H; i++)
		host[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
	if (ret == 0)
		ret = be->ops->upload_act(be, b->q, b->x, host, b->rows * H, err);
	if (ret == 0)
		ret = be->ops->upload_act(be, b->q, b->y, host, b->rows * H, err);
	for (i = 0; ret == 0 && i < np; i++)
		host[i] *= 0.02f;
	for (i = 0; ret == 0 && i < experts; i++) {
		struct rlb_expert_job *j = &b->jobs[i];

		ret = be->ops->alloc(be, np * be->weight_bytes, &b->w0[i], err);
		if (ret == 0)
			ret = be->ops->upload_weights(be, b->q, s, host, b->w0[i], NULL, err);
		if (ret == 0)
			ret = be->ops->alloc(be, np * be->acc_bytes, &b->g0[i], err);
		if (ret == 0)
			ret = be->ops->zero(be, b->q, b->g0[i], np * be->acc_bytes, err);
		j->w = b->w0[i];
		j->g = b->g0[i];
		j->rows = equal ? rows : rows + 23 * i + i % 3;
		j->x = (char *)b->x + at * H * 2;
		j->act = (char *)b->act + at * 2 * F * 2;
		j->y = (char *)b->dx + at * H * 2;
		j->dy = (char *)b->y + at * H * 2;
		j->dx = (char *)b->dx + at * H * 2;
		at += j->rows;
	}
	if (ret == 0)
		ret = be->ops->queue_sync(be, b->q, err);
	free(host);
	return ret;
}

static int call(struct bench *b, int backward, struct rlb_err *err)
{
	struct rlb_backend *be = b->be;

	return backward ?
	       be->ops->expert_backward(be, b->q, &b->s, b->jobs, b->experts, err) :
	       be->ops->expert_forward(be, b->q, &b->s, b->jobs, b->experts, err);
}

/* Medians of REPS runs (after 3 warm-ups): enqueue, unheld and held, us. */
static int measure(struct bench *b, int backward, int reps, double out[3],
		   struct rlb_err *err)
{
	struct rlb_backend *be = b->be;
	double *t = calloc(3 * (size_t)reps, sizeof(double));
	struct rlb_elapsed el;
	int r, held, ret = t ? 0 : rlb_err_set(err, RLB_ENOMEM, "out of memory");

	for (r = -3; ret == 0 && r < reps; r++)
		for (held = 0; ret == 0 && held < 2; held++) {
			uint64_t t0, t1;

			if (held)
				ret = be->ops->queue_hold(be, b->q, err);
			if (ret > 0)	/* backend.h: a hold lapsed, the queue holds no more */
				ret = rlb_err_set(err, RLB_ECUDA,
						  "%s: a hold lapsed (a call waited for the GPU while the queue was held)",
						  backward ? "backward" : "forward");
			if (ret == 0)
				ret = be->ops->event_record(be, b->e0, b->q, err);
			t0 = rlb_now_ns();
			if (ret == 0)
				ret = call(b, backward, err);
			t1 = rlb_now_ns();
			if (ret == 0)
				ret = be->ops->event_record(be, b->e1, b->q, err);
			if (held && ret == 0)
				ret = be->ops->queue_release(be, b->q, err);
			if (ret == 0)
				ret = be->ops->elapsed(be, b->e0, b->e1, &el, err);
			if (ret == 0 && r >= 0) {
				if (!held)
					t[r] = (double)(t1 - t0) / 1e3;
				t[(1 + held) * reps + r] = el.wall_ns / 1e3;
			}
		}
	for (r = 0; ret == 0 && r < 3; r++)
		out[r] = median(t + r * reps, reps);
	free(t);
	return ret;
}

static void usage(FILE *fp)
{
	fprintf(fp, "usage: cuda_gemm_bench [-r ROWS] [-e EXPERTS] [-H HIDDEN] [-F FFN] [-n REPS]\n");
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		enum rlb_gemm_mode mode;
	} modes[] = { { "loop", RLB_GEMM_LOOP }, { "grouped", RLB_GEMM_GROUPED } };
	struct rlb_expert_shape s = { 2048, 768, 0 };	/* qwen3-30b-a3b's expert */
	unsigned long experts = 16, rows = 1536, reps = 9, v;
	struct rlb_err err = { 0, "" };
	struct bench b;
	int c, m, equal, dir, ret;

	while ((c = getopt(argc, argv, "r:e:H:F:n:h")) != -1) {
		char *end;

		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c == '?') {
			usage(stderr);
			return 2;
		}
		v = strtoul(optarg, &end, 10);
		if (*end || v == 0 || v > 1000000 || (c == 'e' && v > MAX_EXPERTS)) {
			fprintf(stderr, "cuda_gemm_bench: -%c '%s': expected a positive integer%s\n",
				c, optarg, c == 'e' ? " of at most 64" : "");
			return 2;
		}
		if (c == 'r')
			rows = v;
		else if (c == 'e')
			experts = v;
		else if (c == 'H')
			s.hidden = (uint32_t)v;
		else if (c == 'F')
			s.ffn = (uint32_t)v;
		else
			reps = v;
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (!rlb_backend_available(RLB_BACKEND_CUDA)) {
		printf("cuda_gemm_bench: skipped: relibra is built without CUDA\n");
		return 0;
	}
	if (rlb_cuda_device_count() == 0) {
		printf("cuda_gemm_bench: skipped: no CUDA device\n");
		return 0;
	}
	printf("%lu experts of %u x %u, rows %lu + 23 i + i mod 3 (varied) or %lu (equal); "
	       "medians of %lu\n", experts, s.hidden, s.ffn, rows, rows, reps);
	printf("%-7s %-6s %-8s %7s %10s %10s %10s %8s\n", "GEMM", "rows", "pass", "rows",
	       "enqueue_us", "unheld_us", "held_us", "TFLOP/s");
	for (m = 0; m < 2; m++)
		for (equal = 0; equal < 2; equal++) {
			ret = bench_init(&b, &s, (unsigned)experts, rows, equal, modes[m].mode,
					 &err);
			for (dir = 0; ret == 0 && dir < 2; dir++) {
				double t[3], flops = (dir ? 12.0 : 6.0) * s.hidden * s.ffn * b.rows;

				ret = measure(&b, dir, (int)reps, t, &err);
				if (ret == 0)
					printf("%-7s %-6s %-8s %7zu %10.1f %10.1f %10.1f %8.0f\n",
					       modes[m].name, equal ? "equal" : "varied",
					       dir ? "backward" : "forward", b.rows, t[0], t[1],
					       t[2], flops / (t[2] * 1e-6) / 1e12);
			}
			bench_free(&b);
			if (ret) {
				fprintf(stderr, "cuda_gemm_bench: %s\n", err.msg);
				return 1;
			}
		}
	return 0;
}
