/*
 * plan_online.c - relibra from C, the way a trainer uses it: record each
 * step's routing as the rollout replays it, plan the step in process, and
 * look up where every expert's tokens go.
 *
 * usage: plan_online CONFIG TRACE PLAN [STEPS]
 *
 * For each of STEPS steps (default 3, at most 64) it makes a step of routing, a
 * stand-in for the rollout engine's (each layer favours a few experts,
 * which change from step to step), then:
 *   1. appends it to TRACE (struct rlb_trace_writer, what an engine's
 *      capture hook does);
 *   2. packs the step's sequences into micro-batches under the config's
 *      EP size, token budget and packing rule (rlb_schedule_build), counts
 *      the tokens per (micro-batch, layer, source rank, expert)
 *      (rlb_loads_add_seq) and plans the step with the config's policy
 *      (rlb_balancer_plan_step);
 *   3. prints what the plan does to micro-batch 0, layer 0: each GPU's
 *      expert rows before (the static layout) and after; for the first
 *      replicated expert, its instances and the rows each source rank
 *      sends to each (rlb_step_plan_cell, rlb_step_plan_split); and where
 *      rank 0's (token, expert) rows go, row by row (rlb_step_plan_route);
 *   4. appends the plan to PLAN (struct rlb_plan_writer).
 *
 * `relibra plan -c CONFIG --no-timing -o X TRACE` plans TRACE into the same
 * file byte for byte: the library and the command share one planner.
 *
 * Build against an installed relibra:
 *   cc -std=c11 -o plan_online plan_online.c \
 *       $(pkg-config --cflags --libs relibra)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <relibra/relibra.h>

#define SEQS_PER_STEP 32
#define HOT_EXPERTS 3
#define MAX_STEPS 64

/* splitmix64: a small deterministic generator for the stand-in routing. */
static uint64_t next_random(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* One step's sequences as the engine hands them over. */
struct step_routing {
	uint32_t lens[SEQS_PER_STEP];
	uint16_t *ids[SEQS_PER_STEP];	/* [layer][token][k], as struct rlb_seq */
};

static void routing_free(struct step_routing *r)
{
	for (int i = 0; i < SEQS_PER_STEP; i++)
		free(r->ids[i]);
}

/*
 * One token's top-k ids: each pick is, at even odds, one of the layer's
 * HOT_EXPERTS hot experts of the step (hot, hot + 7, hot + 14) or any
 * expert; a token never picks an expert twice.
 */
static void pick_experts(uint16_t *pick, uint32_t topk, uint32_t experts,
			 uint32_t hot, uint64_t *rng)
{
	for (uint32_t k = 0; k < topk; k++) {
		uint32_t e, j;

		do {
			uint64_t x = next_random(rng);

			if (x & 1)
				e = (hot + (uint32_t)(x >> 1) % HOT_EXPERTS * 7) % experts;
			else
				e = (uint32_t)(x >> 1) % experts;
			for (j = 0; j < k && pick[j] != e; j++)
				;
		} while (j < k);
		pick[k] = (uint16_t)e;
	}
}

/* The step's sequences: 32 to 543 tokens each. */
static int routing_make(struct step_routing *r, uint32_t step,
			const struct rlb_trace_header *h, uint64_t *rng)
{
	uint32_t experts = h->experts, topk = h->topk, layers = h->moe_layers;

	memset(r, 0, sizeof(*r));
	for (int i = 0; i < SEQS_PER_STEP; i++) {
		uint32_t n = 32 + (uint32_t)(next_random(rng) % 512);

		r->lens[i] = n;
		r->ids[i] = malloc((size_t)layers * n * topk * sizeof(uint16_t));
		if (!r->ids[i])
			return -1;
		for (uint32_t l = 0; l < layers; l++)
			for (uint32_t t = 0; t < n; t++)
				pick_experts(r->ids[i] + ((size_t)l * n + t) * topk,
					     topk, experts, step * 5 + l * 3, rng);
	}
	return 0;
}

static struct rlb_seq seq_of(const struct step_routing *r, uint32_t step,
			     uint32_t i)
{
	struct rlb_seq s = {
		.step = step,
		.group = i / 4,		/* GRPO groups of 4 samples */
		.sample = i % 4,
		.tokens = r->lens[i],
		.ids = r->ids[i],
		.gates = NULL,
	};

	return s;
}

/* GPU max/mean of the expert rows of (mb, layer): before = static homes. */
static double gpu_max_over_mean(const struct rlb_step_plan *p,
				const struct rlb_loads *l, uint32_t mb,
				uint32_t layer, int before, double *rows)
{
	uint32_t per_gpu = p->experts / p->ranks;
	double max = 0, sum = 0;

	memset(rows, 0, p->ranks * sizeof(*rows));
	for (uint32_t e = 0; e < p->experts; e++) {
		uint32_t n;
		const struct rlb_plan_instance *in = rlb_step_plan_cell(p, mb, layer, e, &n);

		if (before) {
			for (uint32_t s = 0; s < l->ranks; s++)
				rows[e / per_gpu] += l->count[rlb_loads_index(l, mb, layer, s, e)];
			continue;
		}
		for (uint32_t k = 0; k < n; k++)
			rows[in[k].gpu] += in[k].quota;
	}
	for (uint32_t g = 0; g < p->ranks; g++) {
		sum += rows[g];
		if (rows[g] > max)
			max = rows[g];
	}
	return sum > 0 ? max * p->ranks / sum : 1;
}

/* Micro-batch 0, layer 0: the imbalance, and the first replicated expert. */
static int show_cell(const struct rlb_step_plan *p, const struct rlb_loads *l,
		     struct rlb_err *err)
{
	double *rows = malloc(p->ranks * sizeof(*rows));

	if (!rows)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	printf("  mb 0, layer 0: GPU max/mean %.3f before, %.3f after\n",
	       gpu_max_over_mean(p, l, 0, 0, 1, rows),
	       gpu_max_over_mean(p, l, 0, 0, 0, rows));
	free(rows);
	for (uint32_t e = 0; e < p->experts; e++) {
		uint32_t n, *split;
		const struct rlb_plan_instance *in = rlb_step_plan_cell(p, 0, 0, e, &n);

		if (n < 2)
			continue;
		split = malloc((size_t)l->ranks * n * sizeof(*split));
		if (!split)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		rlb_step_plan_split(p, l, 0, 0, e, split);
		printf("  expert %u: home GPU %u;", e, p->home[e]);
		for (uint32_t k = 0; k < n; k++)
			printf(" GPU %u computes %u rows%s", in[k].gpu, in[k].quota,
			       k + 1 < n ? "," : "\n");
		for (uint32_t s = 0; s < l->ranks; s++) {
			printf("    rank %u sends", s);
			for (uint32_t k = 0; k < n; k++)
				printf(" %u", split[(size_t)s * n + k]);
			printf(" rows\n");
		}
		free(split);
		return 0;
	}
	printf("  no replica in this cell\n");
	return 0;
}

/*
 * What rank 0 does with its tokens of micro-batch 0, layer 0: their
 * expert ids in its token order (its chunks in (sequence, start) order),
 * and for each (token, k) row the instance, hence the GPU, that computes
 * it (rlb_step_plan_route).
 */
static int show_route(const struct rlb_step_plan *p, const struct rlb_loads *l,
		      const struct rlb_schedule *sched,
		      const struct step_routing *r, uint32_t topk,
		      struct rlb_err *err)
{
	size_t ntok = 0, t = 0, *inst = NULL;
	uint32_t *per_gpu = calloc(p->ranks, sizeof(*per_gpu));
	uint16_t *ids = NULL;
	int ret;

	for (size_t c = 0; c < sched->nchunks; c++)
		if (sched->chunks[c].mb == 0 && sched->chunks[c].rank == 0)
			ntok += sched->chunks[c].tokens;
	ids = malloc((ntok ? ntok : 1) * topk * sizeof(*ids));
	inst = malloc((ntok ? ntok : 1) * topk * sizeof(*inst));
	if (!per_gpu || !ids || !inst) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t c = 0; c < sched->nchunks; c++) {
		const struct rlb_chunk *ch = &sched->chunks[c];

		if (ch->mb != 0 || ch->rank != 0)
			continue;
		/* Layer 0 of the sequence is its first tokens * topk ids. */
		memcpy(ids + t * topk, r->ids[ch->seq] + (size_t)ch->start * topk,
		       (size_t)ch->tokens * topk * sizeof(*ids));
		t += ch->tokens;
	}
	ret = rlb_step_plan_route(p, l, 0, 0, 0, ids, ntok, topk, inst, err);
	if (ret)
		goto out;
	for (t = 0; t < ntok * topk; t++)
		per_gpu[p->inst[inst[t]].gpu]++;
	printf("  rank 0 sends its %zu rows of mb 0, layer 0 to GPUs", ntok * topk);
	for (uint32_t g = 0; g < p->ranks; g++)
		printf(" %u: %u%s", g, per_gpu[g], g + 1 < p->ranks ? "," : "\n");
out:
	free(per_gpu);
	free(ids);
	free(inst);
	return ret;
}

/* Steps 1 to 4 of the header for one step. */
static int run_step(uint32_t step, const struct rlb_config *cfg,
		    const struct rlb_trace_header *th, uint64_t *rng,
		    struct rlb_trace_writer *tw, struct rlb_balancer *b,
		    struct rlb_plan_writer *pw, struct rlb_err *err)
{
	struct step_routing r;
	struct rlb_schedule sched = { 0 };
	struct rlb_loads loads = { 0 };
	struct rlb_step_plan plan = { 0 };
	int ret;

	if (routing_make(&r, step, th, rng)) {
		routing_free(&r);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	/* 1. Record the step (errors are sticky: check once at the end). */
	for (uint32_t i = 0; i < SEQS_PER_STEP; i++) {
		struct rlb_seq s = seq_of(&r, step, i);

		rlb_trace_writer_append(tw, &s);
	}
	ret = rlb_trace_writer_error(tw, err);
	/* 2. Pack it, count its loads, plan it. */
	if (ret == 0)
		ret = rlb_schedule_build(&sched, step, r.lens, SEQS_PER_STEP,
					 (uint32_t)rlb_config_ep_size(cfg),
					 (uint32_t)cfg->parallel.micro_batch_tokens,
					 cfg->parallel.pack, err);
	if (ret == 0)
		ret = rlb_loads_init(&loads, sched.micro_batches, th->moe_layers,
				     sched.ranks, th->experts, err);
	if (ret == 0) {
		for (uint32_t i = 0; i < SEQS_PER_STEP; i++) {
			struct rlb_seq s = seq_of(&r, step, i);

			rlb_loads_add_seq(&loads, &sched, i, &s, th->topk);
		}
		ret = rlb_balancer_plan_step(b, &sched, &loads, &plan, err);
	}
	/* 3. What the plan does; 4. keep it. */
	if (ret == 0) {
		printf("step %u: %u micro-batches, %u experts changed node\n",
		       step, plan.micro_batches, plan.migrated_experts);
		ret = show_cell(&plan, &loads, err);
		if (ret == 0)
			ret = show_route(&plan, &loads, &sched, &r, th->topk, err);
	}
	if (ret == 0 && rlb_plan_writer_append(pw, &plan))
		ret = rlb_plan_writer_error(pw, err);
	rlb_step_plan_release(&plan);
	rlb_loads_release(&loads);
	rlb_schedule_release(&sched);
	routing_free(&r);
	return ret;
}

static int fail(const struct rlb_err *err)
{
	fprintf(stderr, "plan_online: %s\n", err->msg);
	return 1;
}

int main(int argc, char **argv)
{
	struct rlb_config cfg;
	struct rlb_err err = { 0 };
	struct rlb_trace_header th;
	struct rlb_balance_opts opts;
	struct rlb_plan_header ph;
	struct rlb_plan_writer_opts po = { .no_timing = 1 };
	struct rlb_trace_writer *tw = NULL;
	struct rlb_plan_writer *pw = NULL;
	struct rlb_balancer *b = NULL;
	uint32_t steps = 3, step_ids[MAX_STEPS];
	uint64_t rng = 1;
	int ret;

	if (argc < 4 || argc > 5) {
		fprintf(stderr, "usage: plan_online CONFIG TRACE PLAN [STEPS]\n");
		return 2;
	}
	if (argc == 5) {
		char *end;
		unsigned long v = strtoul(argv[4], &end, 10);

		steps = *argv[4] && !*end && v <= MAX_STEPS ? (uint32_t)v : 0;
	}
	if (steps < 1 || steps > MAX_STEPS) {
		fprintf(stderr, "plan_online: STEPS must be 1 to %d\n", MAX_STEPS);
		return 2;
	}
	if (rlb_config_load(&cfg, argv[1], NULL, 0, &err))
		return fail(&err);

	/* The engine side: a trace of the model's shape, source "api". */
	rlb_trace_header_from_config(&th, &cfg);
	snprintf(th.source, sizeof(th.source), "api");
	if (rlb_trace_writer_open(&tw, argv[2], &th, NULL, &err))
		return fail(&err);

	/*
	 * The trainer side: the config's policy and options, and a plan file
	 * that names the trace (its header and steps 0..steps-1).
	 */
	rlb_balance_opts_from_config(&opts, &cfg);
	for (uint32_t s = 0; s < steps; s++)
		step_ids[s] = s;
	rlb_plan_header_init(&ph, &cfg, &opts, cfg.parallel.pack, &th, step_ids, steps);
	ret = rlb_plan_writer_open(&pw, argv[3], &ph, &po, &err);
	if (ret == 0)
		ret = rlb_balancer_new(&b, &cfg, &opts, &err);
	for (uint32_t step = 0; ret == 0 && step < steps; step++)
		ret = run_step(step, &cfg, &th, &rng, tw, b, pw, &err);

	/*
	 * Both files appear complete, or not at all: the plan is written out
	 * before the trace is renamed into place, so only a rename can fail
	 * after it.
	 */
	if (ret == 0)
		ret = rlb_plan_writer_finish(pw, &err);
	if (ret == 0) {
		ret = rlb_trace_writer_close(tw, &err);
		tw = NULL;
	}
	if (ret == 0) {
		ret = rlb_plan_writer_close(pw, &err);
		pw = NULL;
	}
	rlb_balancer_free(b);
	rlb_plan_writer_abort(pw);
	rlb_trace_writer_abort(tw);
	if (ret)
		return fail(&err);
	printf("wrote %s and %s\n", argv[2], argv[3]);
	return 0;
}
