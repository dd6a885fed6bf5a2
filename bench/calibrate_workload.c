/*
 * calibrate_workload.c - measure the synthetic workload's load statistics
 * (static layout; in-order, ffd and dynamic packing) against the calibration
 * targets of docs/workload.md, without writing a trace.  Exits 1 when an
 * in-order target is missed, 2 on usage errors.
 *
 *   calibrate_workload [-c CONFIG] [--layers N] [--steps N] [--seed N]
 *                      [--uniform] [--set KEY=VALUE]...
 *
 * Without -c: qwen3-235b-a22b (94 MoE layers, 128 experts, top-8) on
 * h100-4x8 with EP 32 and 8192 tokens per GPU per micro-batch, the same as
 * configs/qwen3-235b-a22b-h100-4x8.yaml.  --set changes any configuration
 * key (model, cluster, parallel, workload); --layers and --steps last.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relibra.h"

/* The packings measured, a column each; the targets are in-order's. */
#define NPACK 3
static const enum rlb_pack packs[NPACK] = {
	RLB_PACK_IN_ORDER, RLB_PACK_FFD, RLB_PACK_DYNAMIC,
};

static const char usage[] =
	"usage: calibrate_workload [-c CONFIG] [--layers N] [--steps N] [--seed N]\n"
	"                          [--uniform] [--set KEY=VALUE]...\n";

struct sink_ctx {
	struct rlb_stats_acc *acc[NPACK];	/* one per packing of packs[] */
	uint32_t *lens, *groups;
	size_t cap;
	uint64_t ids;
};

static int on_begin(void *ctx, uint32_t step, const struct rlb_seq_meta *m,
		    size_t n, struct rlb_err *err)
{
	struct sink_ctx *c = ctx;
	size_t i;
	int k, ret;

	if (n > c->cap) {
		free(c->lens);
		free(c->groups);
		c->lens = malloc(n * sizeof(*c->lens));
		c->groups = malloc(n * sizeof(*c->groups));
		if (!c->lens || !c->groups)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		c->cap = n;
	}
	for (i = 0; i < n; i++) {
		c->lens[i] = m[i].tokens;
		c->groups[i] = m[i].group;
	}
	for (k = 0; k < NPACK; k++) {
		ret = rlb_stats_acc_begin_step(c->acc[k], step, c->lens, c->groups, n, err);
		if (ret < 0)
			return ret;
	}
	return 0;
}

static int on_seq(void *ctx, uint32_t index, const struct rlb_seq *seq,
		  struct rlb_err *err)
{
	struct sink_ctx *c = ctx;
	int k;

	(void)err;
	for (k = 0; k < NPACK; k++)
		rlb_stats_acc_add_seq(c->acc[k], index, seq);
	c->ids += seq->tokens;
	return 0;
}

static int on_end(void *ctx, uint32_t step, struct rlb_err *err)
{
	struct sink_ctx *c = ctx;
	int k, ret = 0;

	(void)step;
	for (k = 0; k < NPACK && ret == 0; k++)
		ret = rlb_stats_acc_end_step(c->acc[k], err);
	return ret;
}

/* One table row: a value per packing and the target range (in-order). */
static int row(const char *name, double lo, double hi, const double *v)
{
	int ok = v[0] >= lo && v[0] <= hi, k;
	char target[32];

	if (lo <= -1e300)
		snprintf(target, sizeof(target), "< %.2f", hi);
	else if (hi >= 1e300)
		snprintf(target, sizeof(target), "> %.2f", lo);
	else if (lo == hi)
		snprintf(target, sizeof(target), "-");
	else
		snprintf(target, sizeof(target), "%.2f .. %.2f", lo, hi);
	printf("%-36s %-14s", name, target);
	for (k = 0; k < NPACK; k++)
		printf(" %9.3f", v[k]);
	printf("  %s\n", lo == hi ? "" : ok ? "ok" : "MISSED");
	return lo == hi || ok;
}

/* A row of field F of every packing's statistics. */
#define ROW(name, lo, hi, f) \
	row(name, lo, hi, (const double[NPACK]){ st[0].f, st[1].f, st[2].f })

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "layers", required_argument, NULL, 'l' },
		{ "steps", required_argument, NULL, 's' },
		{ "seed", required_argument, NULL, 'S' },
		{ "uniform", no_argument, NULL, 'u' },
		{ "set", required_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct rlb_config cfg;
	struct rlb_err err = {0};
	struct sink_ctx ctx = {0};
	struct rlb_synth_sink sink = { &ctx, on_begin, on_seq, on_end };
	struct rlb_trace_stats st[NPACK] = {{0}};
	struct rlb_stats_params p;
	const char *config = NULL, **sets = NULL;
	size_t nsets = 0, i;
	uint64_t seed = 1, t0, t1;
	int64_t layers = 0, steps = 0;
	int c, k, uniform = 0, ok = 1, ret = 1;
	const double inf = 1e308;

	rlb_config_defaults(&cfg);
	cfg.model.experts = 128;
	cfg.model.topk = 8;
	cfg.model.moe_layers = 94;
	cfg.model.hidden = 4096;
	cfg.model.expert_ffn = 1536;
	cfg.cluster.nodes = 4;
	cfg.cluster.gpus_per_node = 8;
	cfg.parallel.ep_size = 32;
	cfg.parallel.micro_batch_tokens = 8192;
	sets = calloc((size_t)argc, sizeof(*sets));
	if (!sets)
		return 1;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case 'l':
			if (rlb_parse_i64(optarg, 1, RLB_TRACE_MAX_LAYERS, &layers, "--layers", &err) < 0)
				goto usage_err;
			break;
		case 's':
			if (rlb_parse_i64(optarg, 1, 100000, &steps, "--steps", &err) < 0)
				goto usage_err;
			break;
		case 'S':
			if (rlb_parse_u64(optarg, 0, UINT64_MAX, &seed, "--seed", &err) < 0)
				goto usage_err;
			break;
		case 'u':
			uniform = 1;
			break;
		case 'e':
			sets[nsets++] = optarg;
			break;
		case 'h':
			fputs(usage, stdout);
			ret = 0;
			goto out;
		default:
			fputs(usage, stderr);
			ret = 2;
			goto out;
		}
	}
	if (optind != argc) {
		fputs(usage, stderr);
		ret = 2;
		goto out;
	}
	if (config) {
		if (rlb_config_load(&cfg, config, sets, nsets, &err) < 0)
			goto fail;
	} else {
		for (i = 0; i < nsets; i++)
			if (rlb_config_set(&cfg, sets[i], &err) < 0)
				goto usage_err;
	}
	if (layers)
		cfg.model.moe_layers = (int)layers;
	if (steps)
		cfg.workload.steps = (int)steps;
	if (rlb_config_validate(&cfg, &err) < 0)
		goto usage_err;
	p.layers = (uint32_t)cfg.model.moe_layers;
	p.experts = (uint32_t)cfg.model.experts;
	p.topk = (uint32_t)cfg.model.topk;
	p.ranks = (uint32_t)cfg.parallel.ep_size;
	p.gpus_per_node = (uint32_t)cfg.cluster.gpus_per_node;
	p.mb_tokens = (uint32_t)cfg.parallel.micro_batch_tokens;
	for (k = 0; k < NPACK; k++) {
		p.pack = packs[k];
		if (rlb_stats_acc_new(&ctx.acc[k], &p, &err) < 0)
			goto fail;
	}
	t0 = rlb_now_ns();
	if (rlb_synth_generate_cb(&cfg, seed, uniform, &sink, NULL, NULL, &err) < 0)
		goto fail;
	t1 = rlb_now_ns();
	for (k = 0; k < NPACK; k++)
		if (rlb_stats_acc_finish(ctx.acc[k], &st[k], &err) < 0)
			goto fail;

	printf("calibrate_workload: %u MoE layers, %u experts, top-%u; EP %u on %u nodes; "
	       "%u tokens per GPU per micro-batch; static layout; seed %llu%s\n",
	       p.layers, p.experts, p.topk, p.ranks, st[0].nodes, p.mb_tokens,
	       (unsigned long long)seed, uniform ? "; uniform" : "");
	printf("workload: steps %d, prompts_per_step %d, samples_per_prompt %d, len_median %g, "
	       "len_sigma %g, len %d..%d, topics %d, topic_concentration %g, topic_drift %g, "
	       "base_skew %g, hot_expert_boost %g, heavy_layer_fraction %g, heavy_layer_skew %g, "
	       "segment %d..%d, layer_correlation %g, token_noise %g, segment_concentration %g\n",
	       cfg.workload.steps, cfg.workload.prompts_per_step, cfg.workload.samples_per_prompt,
	       cfg.workload.len_median, cfg.workload.len_sigma, cfg.workload.len_min,
	       cfg.workload.len_max, cfg.workload.topics, cfg.workload.topic_concentration,
	       cfg.workload.topic_drift, cfg.workload.base_skew, cfg.workload.hot_expert_boost,
	       cfg.workload.heavy_layer_fraction, cfg.workload.heavy_layer_skew,
	       cfg.workload.segment_min, cfg.workload.segment_max,
	       cfg.workload.layer_correlation, cfg.workload.token_noise,
	       cfg.workload.segment_concentration);
	printf("%-36s %-14s", "statistic", "target");
	for (k = 0; k < NPACK; k++)
		printf(" %9s", rlb_pack_name(packs[k]));
	printf("\n");
	ok &= ROW("mb GPU max/mean, median", 1.5, 2.1, mb_gpu.p50);
	ok &= ROW("mb GPU max/mean, p99", 2.5, 4.5, mb_gpu.p99);
	ok &= ROW("mb node max/mean, median", 1.08, 1.20, mb_node.p50);
	ok &= ROW("step GPU max/mean, median", 1.15, 1.40, step_gpu.p50);
	ok &= ROW("hot expert churn, micro-batches", 0.60, inf, hot_churn_mb);
	ok &= ROW("hot expert churn, steps", -inf, 0.30, hot_churn_step);
	ok &= ROW("prompts per micro-batch, median", 4, 10, prompts_per_mb.p50);
	ROW("mb GPU max/mean, mean", 0, 0, mb_gpu.mean);
	ROW("mb GPU max/mean, p90", 0, 0, mb_gpu.p90);
	ROW("mb GPU max/mean, max", 0, 0, mb_gpu.max);
	ROW("mb node max/mean, p99", 0, 0, mb_node.p99);
	ROW("step GPU max/mean, p90", 0, 0, step_gpu.p90);
	ROW("step GPU max/mean, max", 0, 0, step_gpu.max);
	ROW("prompts per micro-batch, mean", 0, 0, prompts_per_mb.mean);
	ROW("rank tokens max/mean, median", 0, 0, rank_tokens_mb.p50);
	ROW("rank tokens max/mean, max", 0, 0, rank_tokens_mb.max);
	ROW("micro-batches per step", 0, 0, micro_batches / (double)st[0].steps);
	printf("tokens %llu over %llu steps; generation and counting %.1f s (%.2f ns per id)\n",
	       (unsigned long long)st[0].tokens, (unsigned long long)st[0].steps, (t1 - t0) / 1e9,
	       (double)(t1 - t0) / ((double)ctx.ids * p.layers * p.topk));
	printf("in-order targets: %s\n", ok ? "all met" : "MISSED");
	ret = ok ? 0 : 1;
	goto out;
usage_err:
	fprintf(stderr, "calibrate_workload: %s\n%s", err.msg, usage);
	ret = 2;
	goto out;
fail:
	fprintf(stderr, "calibrate_workload: %s\n", err.msg);
	ret = 1;
out:
	for (k = 0; k < NPACK; k++) {
		rlb_trace_stats_release(&st[k]);
		rlb_stats_acc_free(ctx.acc[k]);
	}
	free(ctx.lens);
	free(ctx.groups);
	free(sets);
	return ret;
}
