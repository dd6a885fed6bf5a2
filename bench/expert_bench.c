/*
 * expert_bench.c - speed of train-step's CPU expert math on one core: the
 * SwiGLU expert forward and backward (lib/expert.c) in GFLOP/s, counting
 * 6 n hidden ffn flops forward and 12 n hidden ffn backward (dh, dx and
 * the three weight gradients), best of REPS runs, thread CPU time.
 * usage: expert_bench [REPS]   (default 3)
 */
#include <stdio.h>
#include <stdlib.h>

#include "expert.h"
#include "util.h"

struct shape {
	size_t rows;
	uint32_t hidden;
	uint32_t ffn;
};

static const struct shape shapes[] = {
	{ 2048, 2048, 768 },	/* qwen3-30b-a3b's expert, a full row batch */
	{ 256, 512, 256 },	/* a small batch of a small expert */
	{ 64, 64, 32 },		/* configs/tiny-2x2.yaml's expert */
};

static double best_s(uint64_t ns, double best)
{
	double s = (double)ns / 1e9;

	return best < 0 || s < best ? s : best;
}

static int run(const struct shape *sh, int reps)
{
	struct rlb_expert_shape s = { sh->hidden, sh->ffn, 0 };
	size_t np = rlb_expert_params(&s), nx = sh->rows * sh->hidden;
	size_t na = sh->rows * rlb_expert_act_per_row(&s), i;
	float *w = malloc(np * sizeof(float)), *dw = calloc(np, sizeof(float));
	float *x = malloc(nx * sizeof(float)), *y = malloc(nx * sizeof(float));
	float *dy = malloc(nx * sizeof(float)), *dx = malloc(nx * sizeof(float));
	float *act = malloc(na * sizeof(float));
	double fwd = -1, bwd = -1, flops = (double)sh->rows * sh->hidden * sh->ffn;
	int r, rc = -1;

	if (!w || !dw || !x || !y || !dy || !dx || !act)
		goto out;
	rlb_expert_init(&s, 1, 0, 0, w);
	for (i = 0; i < sh->rows; i++) {
		rlb_hidden_init(1, 0, 0, (uint32_t)i, sh->hidden, x + i * sh->hidden);
		rlb_hidden_init(2, 0, 0, (uint32_t)i, sh->hidden, dy + i * sh->hidden);
	}
	for (r = 0; r < reps; r++) {
		uint64_t t0 = rlb_thread_cpu_ns(), t1, t2;

		rlb_expert_forward(&s, w, sh->rows, x, y, act);
		t1 = rlb_thread_cpu_ns();
		rlb_expert_backward(&s, w, sh->rows, x, act, dy, dx, dw);
		t2 = rlb_thread_cpu_ns();
		fwd = best_s(t1 - t0, fwd);
		bwd = best_s(t2 - t1, bwd);
	}
	printf("%6zu %6u %5u  %9.2f %9.2f  %8.2f %8.2f %8.2f\n",
	       sh->rows, sh->hidden, sh->ffn, fwd * 1e3, bwd * 1e3,
	       6 * flops / fwd / 1e9, 12 * flops / bwd / 1e9,
	       18 * flops / (fwd + bwd) / 1e9);
	rc = 0;
out:
	free(w);
	free(dw);
	free(x);
	free(y);
	free(dy);
	free(dx);
	free(act);
	return rc;
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 3;
	size_t i;

	if (reps < 1) {
		fprintf(stderr, "usage: expert_bench [REPS]\n");
		return 2;
	}
	printf("expert forward+backward, one core, fp32, best of %d\n", reps);
	printf("%6s %6s %5s  %9s %9s  %8s %8s %8s\n", "rows", "hidden", "ffn",
	       "fwd_ms", "bwd_ms", "fwd_GF/s", "bwd_GF/s", "all_GF/s");
	for (i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		if (run(&shapes[i], reps) < 0) {
			fprintf(stderr, "expert_bench: out of memory\n");
			return 1;
		}
	return 0;
}
