/*
 * inspect.c - `relibra inspect`: a trace's header, contents, size and
 * integrity; --dump decodes every sequence, --stats prints the load
 * statistics of lib/stats.h, --json gives all of it as one JSON object.
 */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

static const char usage[] =
	"usage: relibra inspect [-h] [--json] [--stats] [--dump] [--schedule] [--steps A:B] "
	"[-c CONFIG] [--set KEY=VALUE]... [--pack in-order|ffd|dynamic] [--threads N] TRACE|PLAN\n"
	"\n"
	"  --json               print everything as one JSON object (schema relibra.inspect/1)\n"
	"  --stats              load statistics under the config's schedule (needs -c)\n"
	"  --dump               every sequence and its expert ids per layer\n"
	"  --schedule           the micro-batch schedule as relibra.schedule/1 JSON: a\n"
	"                       plan's own, or a trace's under the config (needs -c)\n"
	"  --steps A:B          only steps A..B (A: and :B allowed) for --dump, --stats\n"
	"                       and --schedule; a trace's summary adds a line for them\n"
	"  -c, --config CONFIG  YAML config for --stats and --schedule; its model must\n"
	"                       match the trace\n"
	"      --set KEY=VALUE  override one config key\n"
	"      --pack RULE      micro-batch packing for --stats and --schedule (default:\n"
	"                       the config's)\n"
	"      --threads N      threads that read the trace ahead and count for --stats\n"
	"                       (default 0: one per CPU)\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 for a complete, valid trace; 1 when it is corrupt or\n"
	"truncated (after printing what was valid) or on other failures; 2 on\n"
	"usage errors.\n";

#define NAME "inspect"

struct opts {
	int json, stats, dump, schedule;
	uint32_t step_lo, step_hi;
	int have_steps;
	int have_pack;
	enum rlb_pack pack;
	uint64_t threads;
	struct cmd_config_opts cfg;
	const char *path;
};

static int parse_steps(const char *s, struct opts *o)
{
	struct rlb_err err = {0};

	if (cmd_parse_steps(s, &o->step_lo, &o->step_hi, &err) != 0)
		return cmd_usage_error(NAME, usage, "%s", err.msg);
	o->have_steps = 1;
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		CMD_COMMON_LONGOPTS,
		{ "json", no_argument, NULL, 'j' },
		{ "stats", no_argument, NULL, 's' },
		{ "dump", no_argument, NULL, 'd' },
		{ "steps", required_argument, NULL, 'S' },
		{ "pack", required_argument, NULL, 'p' },
		{ "schedule", no_argument, NULL, 'k' },
		{ "threads", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	struct rlb_err err = {0};
	int c, ret;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":hc:", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': o->json = 1; break;
		case 's': o->stats = 1; break;
		case 'd': o->dump = 1; break;
		case 'k': o->schedule = 1; break;
		case 'S':
			ret = parse_steps(optarg, o);
			if (ret)
				return ret;
			break;
		case 'p':
			if (rlb_pack_from_name(optarg, &o->pack, &err) != 0)
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			o->have_pack = 1;
			break;
		case 't':
			if (rlb_parse_u64(optarg, 0, RLB_POOL_MAX, &o->threads, "--threads", &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			break;
		default:
			ret = cmd_common_opt(NAME, usage, c, argv, &o->cfg, NULL);
			if (ret)
				return ret;
			break;
		}
	}
	if (optind != argc - 1)
		return optind >= argc ? cmd_usage_error(NAME, usage, "no trace given") :
			cmd_usage_error(NAME, usage, "unexpected argument '%s'", argv[optind + 1]);
	o->path = argv[optind];
	if (o->schedule && (o->stats || o->json || o->dump))
		return cmd_usage_error(NAME, usage, "--schedule excludes --stats, --json and --dump");
	if (o->stats && !o->cfg.path)
		return cmd_usage_error(NAME, usage, "--stats needs -c CONFIG");
	if (!o->stats && !o->schedule && (o->cfg.path || o->cfg.nsets || o->have_pack))
		return cmd_usage_error(NAME, usage, "%s goes with --stats or --schedule",
				       o->cfg.path ? "-c" : o->cfg.nsets ? "--set" : "--pack");
	return 0;
}

static const char *flag_text(uint32_t f)
{
	if ((f & RLB_TRACE_F_SORTED) && (f & RLB_TRACE_F_GATES))
		return "sorted ids, gates";
	if (f & RLB_TRACE_F_SORTED)
		return "sorted ids, no gates";
	if (f & RLB_TRACE_F_GATES)
		return "engine order, gates";
	return "engine order, no gates";
}

/*
 * The error of a --steps range that selects nothing from the steps
 * first..last of a plan, worded as the other commands word it for a
 * trace (rlb_trace_no_step_err).
 */
static void no_plan_step(const struct opts *o, uint32_t first, uint32_t last, size_t n)
{
	char hi[16] = "";

	/* A:B, A: open-ended, or A alone for --steps A */
	if (o->step_lo != o->step_hi)
		snprintf(hi, sizeof(hi), o->step_hi == UINT32_MAX ? ":" : ":%" PRIu32, o->step_hi);
	if (n == 0)
		cmd_errorf(NAME, "plan '%s' holds no step", o->path);
	else
		cmd_errorf(NAME, "no step of the plan in %" PRIu32 "%s (plan '%s' has steps %" PRIu32 "..%" PRIu32 ")",
			   o->step_lo, hi, o->path, first, last);
}

/* Whether --steps selects a step of the trace; reports why not. */
static int trace_selects(const struct opts *o, struct rlb_trace_reader *r)
{
	struct rlb_err err = {0};
	const uint32_t *steps;
	size_t n, i;

	if (rlb_trace_reader_steps(r, &steps, &n, &err) != 0) {
		cmd_error(NAME, &err);
		return 0;
	}
	for (i = 0; i < n; i++)
		if (steps[i] >= o->step_lo && steps[i] <= o->step_hi)
			return 1;
	rlb_trace_no_step_err(r, steps, n, o->step_lo, o->step_hi, &err);
	cmd_error(NAME, &err);
	return 0;
}

/* Steps of the trace inside the --steps range: [*first, *end) of steps[]. */
static int step_range(struct rlb_trace_reader *r, const struct opts *o,
		      const uint32_t **steps, size_t *first, size_t *end)
{
	struct rlb_err err = {0};
	size_t n, i;

	if (rlb_trace_reader_steps(r, steps, &n, &err) != 0) {
		cmd_error(NAME, &err);
		return -1;
	}
	for (i = 0; i < n && (*steps)[i] < o->step_lo; i++)
		;
	*first = i;
	for (; i < n && (*steps)[i] <= o->step_hi; i++)
		;
	*end = i;
	return 0;
}

static void print_summary(const struct opts *o, struct rlb_trace_reader *r,
			  const struct rlb_trace_info *info)
{
	const struct rlb_trace_header *h = rlb_trace_reader_header(r);
	unsigned idb = rlb_trace_id_bytes(h);

	printf("trace:          %s\n", o->path);
	printf("version:        %u.%u\n", h->version_major, h->version_minor);
	printf("flags:          0x%08" PRIx32 " (%s)\n", h->flags, flag_text(h->flags));
	printf("model:          %s: %" PRIu32 " experts, top-%" PRIu32 ", %" PRIu32,
	       h->model[0] ? h->model : "(unnamed)", h->experts, h->topk, h->moe_layers);
	if (h->layer_pattern[0])
		printf(" MoE layers of %zu, layer by layer %s", strlen(h->layer_pattern),
		       h->layer_pattern);
	else
		printf(" MoE layers after %" PRIu32 " dense", h->first_dense_layers);
	if (h->moe_layer_period > 1)
		printf(", in blocks of %" PRIu32 " layers, MoE at offset %" PRIu32,
		       h->moe_layer_period, h->moe_layer_offset);
	printf("\n");
	printf("ids:            u%u, %s-coded\n", 8 * idb, rlb_trace_reader_id_coding(r));
	printf("source:         %s\n", h->source[0] ? h->source : "(unknown)");
	printf("seed:           %" PRIu64 "\n", h->seed);
	if (info->steps)
		printf("steps:          %" PRIu64 " (%" PRIu32 "..%" PRIu32 ")\n",
		       info->steps, info->first_step, info->last_step);
	else
		printf("steps:          0\n");
	printf("sequences:      %" PRIu64 "\n", info->sequences);
	printf("tokens:         %" PRIu64 "\n", info->tokens);
	printf("frames:         %" PRIu64 "\n", info->frames);
	printf("file bytes:     %" PRIu64 "\n", info->file_bytes);
	printf("raw id bytes:   %" PRIu64 "\n", info->raw_id_bytes);
	if (info->file_bytes && info->raw_id_bytes)
		printf("compression:    %.3fx (raw id bytes / file bytes)\n",
		       (double)info->raw_id_bytes / info->file_bytes);
	if (info->tokens)
		printf("bytes per (token, layer): %.3f\n",
		       (double)info->file_bytes / ((double)info->tokens * h->moe_layers));
	printf("seek table:     %s\n", info->has_seek_table ? "yes" : "no");
	printf("step index:     %s\n", info->has_step_index ? "yes" : "no");
}

static void print_integrity(const struct rlb_trace_info *info, int verr,
			    const struct rlb_err *err)
{
	if (verr)
		printf("integrity:      corrupt: %s\n", err->msg);
	else if (info->truncated)
		printf("integrity:      truncated: complete frames end at byte %" PRIu64
		       " of %" PRIu64 "\n", info->valid_bytes, info->file_bytes);
	else
		printf("integrity:      ok (all checksums verified, complete)\n");
}

static json_t *json_summary(const struct opts *o, struct rlb_trace_reader *r,
			    const struct rlb_trace_info *info, int verr,
			    const struct rlb_err *err)
{
	const struct rlb_trace_header *h = rlb_trace_reader_header(r);
	json_t *j = json_object(), *hd = json_object(), *in = json_object();
	char ver[32];

	snprintf(ver, sizeof(ver), "%u.%u", h->version_major, h->version_minor);
	json_object_set_new(j, "schema", json_string("relibra.inspect/1"));
	json_object_set_new(j, "trace", rlb_json_text(o->path));
	json_object_set_new(hd, "version", json_string(ver));
	json_object_set_new(hd, "flags", json_integer(h->flags));
	json_object_set_new(hd, "sorted", json_boolean(h->flags & RLB_TRACE_F_SORTED));
	json_object_set_new(hd, "gates", json_boolean(h->flags & RLB_TRACE_F_GATES));
	json_object_set_new(hd, "model", json_string(h->model));
	json_object_set_new(hd, "experts", json_integer(h->experts));
	json_object_set_new(hd, "topk", json_integer(h->topk));
	json_object_set_new(hd, "moe_layers", json_integer(h->moe_layers));
	json_object_set_new(hd, "first_dense_layers", json_integer(h->first_dense_layers));
	json_object_set_new(hd, "moe_layer_period", json_integer(h->moe_layer_period));
	json_object_set_new(hd, "moe_layer_offset", json_integer(h->moe_layer_offset));
	json_object_set_new(hd, "layer_pattern", json_string(h->layer_pattern));
	json_object_set_new(hd, "id_bytes", json_integer(rlb_trace_id_bytes(h)));
	json_object_set_new(hd, "id_coding", json_string(rlb_trace_reader_id_coding(r)));
	json_object_set_new(hd, "source", json_string(h->source));
	if (h->seed <= INT64_MAX) {
		json_object_set_new(hd, "seed", json_integer((json_int_t)h->seed));
	} else {
		/* past json_int_t: the exact value as a string, not a wrapped one */
		char seed[24];

		snprintf(seed, sizeof(seed), "%" PRIu64, h->seed);
		json_object_set_new(hd, "seed", json_string(seed));
	}
	json_object_set_new(j, "header", hd);
	json_object_set_new(j, "steps", json_integer((json_int_t)info->steps));
	json_object_set_new(j, "first_step", info->steps ? json_integer(info->first_step) : json_null());
	json_object_set_new(j, "last_step", info->steps ? json_integer(info->last_step) : json_null());
	json_object_set_new(j, "sequences", json_integer((json_int_t)info->sequences));
	json_object_set_new(j, "tokens", json_integer((json_int_t)info->tokens));
	json_object_set_new(j, "frames", json_integer((json_int_t)info->frames));
	json_object_set_new(j, "file_bytes", json_integer((json_int_t)info->file_bytes));
	json_object_set_new(j, "raw_id_bytes", json_integer((json_int_t)info->raw_id_bytes));
	json_object_set_new(j, "raw_bytes", json_integer((json_int_t)info->raw_bytes));
	json_object_set_new(j, "compression_ratio", info->file_bytes ?
			    json_real((double)info->raw_id_bytes / info->file_bytes) : json_null());
	json_object_set_new(j, "bytes_per_token_layer", info->tokens ?
			    json_real((double)info->file_bytes /
				      ((double)info->tokens * h->moe_layers)) : json_null());
	json_object_set_new(in, "ok", json_boolean(!verr && !info->truncated));
	json_object_set_new(in, "seek_table", json_boolean(info->has_seek_table));
	json_object_set_new(in, "step_index", json_boolean(info->has_step_index));
	json_object_set_new(in, "truncated", json_boolean(info->truncated));
	json_object_set_new(in, "valid_bytes", json_integer((json_int_t)info->valid_bytes));
	json_object_set_new(in, "error", verr ? rlb_json_text(err->msg) : json_null());
	json_object_set_new(j, "integrity", in);
	return j;
}

/* The --steps selection in summary mode: steps, sequences, tokens. */
static int selection(const struct opts *o, struct rlb_trace_reader *r, json_t *j)
{
	const uint32_t *steps;
	struct rlb_seq_meta *m;
	struct rlb_err err = {0};
	size_t first, end, k, i, n;
	uint64_t seqs = 0, tokens = 0;

	if (step_range(r, o, &steps, &first, &end) != 0)
		return -1;
	for (k = first; k < end; k++) {
		if (rlb_trace_reader_step_seqs(r, steps[k], &m, &n, &err) != 0) {
			cmd_error(NAME, &err);
			return -1;
		}
		for (i = 0; i < n; i++)
			tokens += m[i].tokens;
		seqs += n;
		free(m);
	}
	if (j) {
		json_object_set_new(j, "selection", json_pack("{sI sI sI sI sI}",
			"from", (json_int_t)o->step_lo, "to", (json_int_t)o->step_hi,
			"steps", (json_int_t)(end - first), "sequences", (json_int_t)seqs,
			"tokens", (json_int_t)tokens));
		return 0;
	}
	printf("selected:       %zu step%s in %" PRIu32 "..", end - first, cmd_s(end - first),
	       o->step_lo);
	if (o->step_hi != UINT32_MAX)
		printf("%" PRIu32, o->step_hi);
	printf(": %" PRIu64 " sequences, %" PRIu64 " tokens\n", seqs, tokens);
	return 0;
}

/* Print (or collect into arr) the sequences of the selected steps. */
static int dump(const struct opts *o, struct rlb_trace_reader *r, json_t *arr)
{
	const struct rlb_trace_header *h = rlb_trace_reader_header(r);
	const uint32_t *steps;
	struct rlb_err err = {0};
	struct rlb_seq s;
	size_t first, end, n = 0, nsteps;
	int rc;

	if (rlb_trace_reader_steps(r, &steps, &nsteps, &err) != 0) {
		/*
		 * A corrupt spot keeps the steps from being listed: the
		 * sequences of the complete frames before it, read in order,
		 * then its error.
		 */
		if (rlb_trace_reader_rewind(r, &err) != 0) {
			cmd_error(NAME, &err);
			return -1;
		}
	} else {
		if (step_range(r, o, &steps, &first, &end) != 0)
			return -1;
		if (first == end)
			return 0;
		if (rlb_trace_reader_seek_step(r, steps[first], &err) != 0) {
			cmd_error(NAME, &err);
			return -1;
		}
	}
	while ((rc = rlb_trace_reader_next(r, &s, &err)) == 1 && s.step <= o->step_hi) {
		uint32_t l, t, k, K = h->topk;

		if (s.step < o->step_lo)
			continue;

		if (arr) {
			json_t *q = json_object(), *layers = json_array();

			json_object_set_new(q, "step", json_integer(s.step));
			json_object_set_new(q, "group", json_integer(s.group));
			json_object_set_new(q, "sample", json_integer(s.sample));
			json_object_set_new(q, "tokens", json_integer(s.tokens));
			for (l = 0; l < h->moe_layers; l++) {
				json_t *toks = json_array();

				for (t = 0; t < s.tokens; t++) {
					json_t *ids = json_array();
					size_t off = ((size_t)l * s.tokens + t) * K;

					for (k = 0; k < K; k++)
						json_array_append_new(ids, json_integer(s.ids[off + k]));
					json_array_append_new(toks, ids);
				}
				json_array_append_new(layers, toks);
			}
			json_object_set_new(q, "ids", layers);
			if (s.gates) {
				json_t *gl = json_array();

				for (l = 0; l < h->moe_layers; l++) {
					json_t *toks = json_array();

					for (t = 0; t < s.tokens; t++) {
						json_t *g = json_array();
						size_t off = ((size_t)l * s.tokens + t) * K;

						for (k = 0; k < K; k++)
							json_array_append_new(g, json_real(s.gates[off + k]));
						json_array_append_new(toks, g);
					}
					json_array_append_new(gl, toks);
				}
				json_object_set_new(q, "gates", gl);
			}
			json_array_append_new(arr, q);
			n++;
			continue;
		}
		printf("sequence %zu: step %" PRIu32 ", group %" PRIu32 ", sample %" PRIu32
		       ", %" PRIu32 " tokens\n", n++, s.step, s.group, s.sample, s.tokens);
		for (l = 0; l < h->moe_layers; l++) {
			printf("  layer %" PRIu32 ":", l);
			for (t = 0; t < s.tokens; t++) {
				size_t off = ((size_t)l * s.tokens + t) * K;

				for (k = 0; k < K; k++) {
					printf("%c%u", k ? ',' : ' ', s.ids[off + k]);
					if (s.gates)
						printf(":%.6g", s.gates[off + k]);
				}
			}
			putchar('\n');
		}
	}
	if (rc < 0) {
		cmd_error(NAME, &err);
		return -1;
	}
	return 0;
}

/*
 * --stats and --schedule of a trace show the packing rule's micro-batches;
 * under data control a relibra plan chooses its own: say so.
 */
static void warn_data_control(const struct opts *o, const struct rlb_config *cfg)
{
	if (!cfg->balancer.data_control || strcmp(cfg->balancer.policy, "relibra"))
		return;
	cmd_errorf(NAME, "warning: balancer.data_control is on, so a relibra plan chooses "
		   "its own micro-batches; these are the %s packing's ('relibra inspect "
		   "--schedule PLAN' prints a plan's)",
		   rlb_pack_name(o->have_pack ? o->pack : cfg->parallel.pack));
}

/* The config's model must be the trace's, as plan checks it. */
static int check_shape(const struct opts *o, const struct rlb_config *cfg,
		       const struct rlb_trace_header *h)
{
	struct rlb_err err = {0};

	if (rlb_trace_header_check(h, cfg, &err) == 0) {
		warn_data_control(o, cfg);
		return 0;
	}
	cmd_errorf(NAME, "%s (config '%s', trace '%s')", err.msg, o->cfg.path,
		   o->path);
	return -1;
}

static void print_dist(const char *what, const struct rlb_dist *d)
{
	printf("%-42s mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", what,
	       d->mean, d->p50, d->p90, d->p99, d->max);
}

/* A churn as text: "n/a" when there was no pair to compare. */
static const char *churn_text(char *buf, size_t size, double churn, uint64_t pairs)
{
	if (!pairs)
		return "n/a";
	snprintf(buf, size, "%.1f%%", 100.0 * churn);
	return buf;
}

/* A churn in JSON: null when there was no pair to compare. */
static json_t *churn_json(double churn, uint64_t pairs)
{
	return pairs ? json_real(churn) : json_null();
}

static void print_stats(const struct rlb_trace_stats *st, const struct rlb_model_config *m)
{
	/* a model with other layers also numbers each MoE layer as it does */
	int other = rlb_model_hidden_layers(m) != m->moe_layers;
	char mb[16], step[16];
	uint32_t l;

	printf("stats:          pack %s, EP %" PRIu32 " (%" PRIu32 " node%s), %" PRIu32
	       " token%s per GPU per micro-batch\n", rlb_pack_name(st->pack), st->ranks,
	       st->nodes, cmd_s(st->nodes), st->mb_tokens, cmd_s(st->mb_tokens));
	printf("micro-batches:  %" PRIu64 " over %" PRIu64 " step%s\n", st->micro_batches,
	       st->steps, cmd_s(st->steps));
	print_dist("prompts per micro-batch:", &st->prompts_per_mb);
	print_dist("rank tokens max/mean per micro-batch:", &st->rank_tokens_mb);
	print_dist("GPU max/mean per (micro-batch, layer):", &st->mb_gpu);
	print_dist("node max/mean per (micro-batch, layer):", &st->mb_node);
	print_dist("step GPU max/mean per (step, layer):", &st->step_gpu);
	printf("hot-expert churn: %s between micro-batches, %s between steps\n",
	       churn_text(mb, sizeof(mb), st->hot_churn_mb, st->mb_pairs),
	       churn_text(step, sizeof(step), st->hot_churn_step, st->step_pairs));
	printf("\nlayer%s  mb-p50  mb-p90  mb-p99  mb-max  step-p50  step-max  churn-mb  churn-step\n",
	       other ? "  model" : "");
	for (l = 0; l < st->layers; l++) {
		const struct rlb_layer_stats *s = &st->layer[l];

		printf("%5" PRIu32, l);
		if (other)
			printf("  %5ld", rlb_model_moe_layer_index(m, l));
		/* every layer has the same pairs */
		printf("  %6.3f  %6.3f  %6.3f  %6.3f  %8.3f  %8.3f  %8s  %10s\n",
		       s->mb_gpu.p50, s->mb_gpu.p90, s->mb_gpu.p99, s->mb_gpu.max,
		       s->step_gpu.p50, s->step_gpu.max,
		       churn_text(mb, sizeof(mb), s->hot_churn_mb, st->mb_pairs),
		       churn_text(step, sizeof(step), s->hot_churn_step, st->step_pairs));
	}
}

static json_t *json_dist(const struct rlb_dist *d)
{
	return json_pack("{sI sf sf sf sf sf}", "n", (json_int_t)d->n, "mean", d->mean,
			 "p50", d->p50, "p90", d->p90, "p99", d->p99, "max", d->max);
}

static json_t *json_stats(const struct rlb_trace_stats *st, const struct rlb_model_config *m)
{
	json_t *j = json_object(), *layers = json_array();
	uint32_t l;

	json_object_set_new(j, "pack", json_string(rlb_pack_name(st->pack)));
	json_object_set_new(j, "ranks", json_integer(st->ranks));
	json_object_set_new(j, "nodes", json_integer(st->nodes));
	json_object_set_new(j, "micro_batch_tokens", json_integer(st->mb_tokens));
	json_object_set_new(j, "steps", json_integer((json_int_t)st->steps));
	json_object_set_new(j, "micro_batches", json_integer((json_int_t)st->micro_batches));
	json_object_set_new(j, "prompts_per_micro_batch", json_dist(&st->prompts_per_mb));
	json_object_set_new(j, "rank_tokens_max_mean_per_micro_batch",
			    json_dist(&st->rank_tokens_mb));
	json_object_set_new(j, "gpu_max_mean_per_micro_batch", json_dist(&st->mb_gpu));
	json_object_set_new(j, "node_max_mean_per_micro_batch", json_dist(&st->mb_node));
	json_object_set_new(j, "gpu_max_mean_per_step", json_dist(&st->step_gpu));
	json_object_set_new(j, "hot_churn_micro_batch", churn_json(st->hot_churn_mb, st->mb_pairs));
	json_object_set_new(j, "hot_churn_step", churn_json(st->hot_churn_step, st->step_pairs));
	for (l = 0; l < st->layers; l++) {
		const struct rlb_layer_stats *s = &st->layer[l];

		json_array_append_new(layers, json_pack("{sI sI so so so so}", "layer", (json_int_t)l,
							"model_layer",
							(json_int_t)rlb_model_moe_layer_index(m, l),
							"gpu_max_mean_per_micro_batch", json_dist(&s->mb_gpu),
							"gpu_max_mean_per_step", json_dist(&s->step_gpu),
							"hot_churn_micro_batch",
							churn_json(s->hot_churn_mb, st->mb_pairs),
							"hot_churn_step",
							churn_json(s->hot_churn_step, st->step_pairs)));
	}
	json_object_set_new(j, "layers", layers);
	return j;
}

/* --stats: the statistics under cfg, counted on pool; printed or added to j. */
static int run_stats(const struct opts *o, struct rlb_trace_reader *r,
		     const struct rlb_config *cfg, struct rlb_pool *pool,
		     json_t *j)
{
	struct rlb_trace_stats st;
	struct rlb_err err = {0};
	enum rlb_pack pack = o->have_pack ? o->pack : cfg->parallel.pack;
	int ret;

	memset(&st, 0, sizeof(st));
	ret = rlb_trace_stats_compute(r, cfg, pack, o->step_lo, o->step_hi,
				      pool, &st, &err);
	if (ret != 0) {
		cmd_error(NAME, &err);
		rlb_trace_stats_release(&st);
		return -1;
	}
	if (j)
		json_object_set_new(j, "stats", json_stats(&st, &cfg->model));
	else
		print_stats(&st, &cfg->model);
	rlb_trace_stats_release(&st);
	return 0;
}

/*
 * --schedule: every selected step's schedule, from the plan (PR) when it
 * carries one, else rebuilt from the trace (R) under the config, as one
 * relibra.schedule/1 document on stdout.
 */
static int print_schedule(const struct opts *o, struct rlb_plan_reader *pr,
			  struct rlb_trace_reader *r, const struct rlb_config *cfg)
{
	struct rlb_err err = {0};
	struct rlb_step_plan p;
	json_t *steps = json_array(), *doc = NULL;
	const uint32_t *ids;
	size_t n = 0, i;
	int rc = 0, ret = EXIT_FAIL;

	memset(&p, 0, sizeof(p));
	if (!steps)
		goto oom;
	if (r && rlb_trace_reader_steps(r, &ids, &n, &err) != 0)
		goto out;
	for (i = 0; pr ? (rc = rlb_plan_reader_next(pr, &p, &err)) == 1 : i < n; i++) {
		struct rlb_schedule s;
		uint32_t *lens = NULL;
		size_t nseqs;
		json_t *j;

		if (pr) {
			if (p.step < o->step_lo || p.step > o->step_hi)
				continue;
			if (!p.sched) {
				cmd_errorf(NAME, "plan '%s' carries no schedule (pack %s: the trace and config rebuild it)",
					   o->path, rlb_pack_name(rlb_plan_reader_header(pr)->pack));
				goto done;
			}
			j = rlb_schedule_step_json(p.sched);
		} else {
			if (ids[i] < o->step_lo || ids[i] > o->step_hi)
				continue;
			if (rlb_step_seq_tokens(r, ids[i], &lens, &nseqs, &err) != 0)
				goto out;
			rc = rlb_schedule_build(&s, ids[i], lens, nseqs,
						(uint32_t)rlb_config_ep_size(cfg),
						(uint32_t)cfg->parallel.micro_batch_tokens,
						o->have_pack ? o->pack : cfg->parallel.pack, &err);
			free(lens);
			if (rc != 0)
				goto out;
			j = rlb_schedule_step_json(&s);
			rlb_schedule_release(&s);
		}
		if (!j || json_array_append_new(steps, j))
			goto oom;
	}
	if (rc < 0)
		goto out;
	doc = json_pack("{s:s, s:O}", "schema", RLB_SCHEDULE_SCHEMA, "steps", steps);
	if (!doc)
		goto oom;
	json_dumpf(doc, stdout, JSON_COMPACT);
	putchar('\n');
	ret = cmd_flush_stdout(NAME) == 0 ? EXIT_OK : EXIT_FAIL;
	goto done;
oom:
	rlb_err_set(&err, RLB_ENOMEM, "out of memory");
out:
	cmd_error(NAME, &err);
done:
	json_decref(doc);
	json_decref(steps);
	rlb_step_plan_release(&p);
	return ret;
}

/* Print j compactly and drop it: 0, or -1 when it is NULL (out of memory). */
static int put_json(json_t *j)
{
	int ret = j ? json_dumpf(j, stdout, JSON_COMPACT | JSON_ENCODE_ANY) : -1;

	json_decref(j);
	return ret;
}

/*
 * --json of a plan: one relibra.inspect/1 object, written as it is read:
 * the header on the first line, then a line per selected step, then the
 * integrity (what was valid is printed before a damaged step frame).
 */
static int inspect_plan_json(const struct opts *o, struct rlb_plan_reader *pr)
{
	struct rlb_step_plan p;
	struct rlb_err err = {0};
	uint64_t steps = 0;	/* decoded and checked: all of them */
	uint64_t printed = 0;	/* those in the --steps range */
	int rc, ret = 0;

	memset(&p, 0, sizeof(p));
	printf("{\"schema\": \"relibra.inspect/1\", \"plan\": ");
	ret |= put_json(rlb_json_text(o->path));
	printf(", \"header\": ");
	ret |= put_json(rlb_plan_header_json(rlb_plan_reader_header(pr)));
	printf(", \"steps\": [");
	while (ret == 0 && (rc = rlb_plan_reader_next(pr, &p, &err)) == 1) {
		steps++;
		if (p.step < o->step_lo || p.step > o->step_hi)
			continue;
		printf(printed++ ? ",\n" : "\n");
		ret |= put_json(rlb_step_plan_json(&p, o->dump));
	}
	rlb_step_plan_release(&p);
	/* put_json fails out of memory, or on a write error: the flush says why */
	if (ret && !ferror(stdout)) {
		cmd_errorf(NAME, "out of memory");
		return EXIT_FAIL;
	}
	printf("\n], \"integrity\": ");
	ret = put_json(json_pack("{s:b, s:I, s:o}", "ok", rc == 0,
				 "steps_decoded", (json_int_t)steps,
				 "error", rc < 0 ? rlb_json_text(err.msg) : json_null()));
	printf("}\n");
	if (cmd_flush_stdout(NAME) != 0)
		return EXIT_FAIL;
	if (ret) {
		cmd_errorf(NAME, "out of memory");
		return EXIT_FAIL;
	}
	if (rc < 0) {
		cmd_error(NAME, &err);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/*
 * --json of a file whose header cannot be read: the object still comes,
 * with a null header and the error in its integrity, so that a program
 * reading it learns why from stdout as from a damaged step.
 */
static void json_unreadable(const struct opts *o, const char *kind,
			    const struct rlb_err *err)
{
	json_t *j = json_pack("{s:s, s:o, s:n}", "schema", "relibra.inspect/1",
			      kind, rlb_json_text(o->path), "header");

	if (j && !strcmp(kind, "plan"))
		json_object_set_new(j, "steps", json_array());
	if (j)
		json_object_set_new(j, "integrity",
				    json_pack("{s:b, s:o}", "ok", 0, "error",
					      rlb_json_text(err->msg)));
	/* indented as a trace's summary is, compact as a plan's lines are */
	if (j && json_dumpf(j, stdout, strcmp(kind, "plan") ? JSON_INDENT(2) : JSON_COMPACT) == 0)
		putchar('\n');
	json_decref(j);
	cmd_flush_stdout(NAME);
}

/*
 * A plan file (.rlp): its header, then a line per step, or with --dump
 * every step's homes and instances (trace_format/SPEC.md, plan format,
 * "Text dump").  Every step frame is decoded and checked.
 */
static int inspect_plan(const struct opts *o)
{
	struct rlb_plan_reader *pr = NULL;
	struct rlb_step_plan p;
	struct rlb_err err = {0};
	uint64_t steps = 0;	/* decoded and checked: all of them */
	int rc, ret = EXIT_FAIL;

	memset(&p, 0, sizeof(p));
	if (rlb_plan_reader_open(&pr, o->path, &err) != 0) {
		if (o->json && !o->schedule)
			json_unreadable(o, "plan", &err);
		cmd_error(NAME, &err);
		return EXIT_FAIL;
	}
	if (o->have_steps) {
		const struct rlb_plan_step_info *info;
		size_t n = rlb_plan_reader_steps(pr, &info), i;

		for (i = 0; i < n && (info[i].step < o->step_lo || info[i].step > o->step_hi); i++)
			;
		if (i == n) {
			no_plan_step(o, n ? info[0].step : 0, n ? info[n - 1].step : 0, n);
			rlb_plan_reader_free(pr);
			return EXIT_FAIL;
		}
	}
	if (o->schedule || o->json) {
		ret = o->schedule ? print_schedule(o, pr, NULL, NULL) : inspect_plan_json(o, pr);
		rlb_plan_reader_free(pr);
		return ret;
	}
	printf("plan:           %s\n", o->path);
	if (rlb_plan_write_text(stdout, rlb_plan_reader_header(pr), NULL, &err) != 0)
		goto write_error;
	while ((rc = rlb_plan_reader_next(pr, &p, &err)) == 1) {
		steps++;
		if (p.step < o->step_lo || p.step > o->step_hi)
			continue;
		if (o->dump) {
			if (rlb_plan_write_text(stdout, NULL, &p, &err) != 0)
				goto write_error;
		} else {
			printf("step %u: %u micro-batches, %zu instances, %u migrated experts\n",
			       p.step, p.micro_batches, p.ninst, p.migrated_experts);
		}
	}
	if (rc < 0)
		goto out;
	printf("integrity:      ok (%" PRIu64 " step%s decoded, all checksums verified)\n",
	       steps, cmd_s(steps));
	ret = EXIT_OK;
out:
	if (ret != EXIT_OK)
		cmd_error(NAME, &err);
done:
	rlb_step_plan_release(&p);
	rlb_plan_reader_free(pr);
	return ret;
write_error:
	/* stdout failed: the flush says why, once, as for the other outputs */
	cmd_flush_stdout(NAME);
	goto done;
}

int cmd_inspect(int argc, char **argv)
{
	struct opts o;
	struct rlb_trace_reader *r = NULL;
	struct rlb_pool *pool = NULL;
	struct rlb_trace_info info;
	struct rlb_config cfg;
	struct rlb_err err = {0}, verr_msg = {0};
	json_t *j = NULL, *arr = NULL;
	int ret, verr, status = EXIT_OK, stats_ok = 0;

	memset(&o, 0, sizeof(o));
	o.step_hi = UINT32_MAX;
	ret = parse_args(argc, argv, &o);
	if (ret) {
		cmd_config_release(&o.cfg);
		return ret < 0 ? EXIT_OK : ret;
	}
	ret = rlb_plan_probe(o.path, &err);
	if (ret < 0) {
		/* neither a trace nor a plan: the file cannot be read */
		cmd_error(NAME, &err);
		cmd_config_release(&o.cfg);
		return EXIT_FAIL;
	}
	if (ret == 1) {
		if (o.stats || o.cfg.path || o.cfg.nsets || o.have_pack) {
			cmd_config_release(&o.cfg);
			return cmd_usage_error(NAME, usage, "--stats, -c, --set and --pack are for traces, '%s' is a plan", o.path);
		}
		cmd_config_release(&o.cfg);
		return inspect_plan(&o);
	}
	if (rlb_trace_reader_open(&r, o.path, &err) != 0) {
		if (o.json && !o.schedule)
			json_unreadable(&o, "trace", &err);
		cmd_error(NAME, &err);
		cmd_config_release(&o.cfg);
		return EXIT_FAIL;
	}
	if (o.have_steps && !trace_selects(&o, r)) {
		rlb_trace_reader_free(r);
		cmd_config_release(&o.cfg);
		return EXIT_FAIL;
	}
	if (o.stats && (cmd_config_load(NAME, &o.cfg, &cfg) != 0 ||
			check_shape(&o, &cfg, rlb_trace_reader_header(r)) != 0)) {
		rlb_trace_reader_free(r);
		cmd_config_release(&o.cfg);
		return EXIT_FAIL;
	}
	if (o.schedule) {
		if (!o.cfg.path) {
			ret = cmd_usage_error(NAME, usage, "--schedule of a trace needs -c CONFIG");
		} else if (cmd_config_load(NAME, &o.cfg, &cfg) != 0 ||
			   check_shape(&o, &cfg, rlb_trace_reader_header(r)) != 0) {
			ret = EXIT_FAIL;
		} else if (rlb_trace_verify_threads(o.path,
						    rlb_pool_threads_for((unsigned)o.threads),
						    &info, &verr_msg) != 0) {
			/* the step index alone would give a corrupt trace a schedule */
			cmd_error(NAME, &verr_msg);
			ret = EXIT_FAIL;
		} else {
			ret = print_schedule(&o, NULL, r, &cfg);
			if (ret == EXIT_OK && info.truncated) {
				cmd_errorf(NAME, "trace '%s' is truncated (its writer did not finish)",
					   o.path);
				ret = EXIT_FAIL;
			}
		}
		rlb_trace_reader_free(r);
		cmd_config_release(&o.cfg);
		return ret;
	}
	/* --stats counts on the pool; as many threads read ahead for the check */
	if (o.stats && rlb_pool_new(&pool, (unsigned)o.threads, &err) != 0) {
		cmd_error(NAME, &err);
		rlb_trace_reader_free(r);
		cmd_config_release(&o.cfg);
		return EXIT_FAIL;
	}
	verr = rlb_trace_verify_threads(o.path, rlb_pool_threads_for((unsigned)o.threads), &info,
					&verr_msg) != 0;
	if (o.json)
		j = json_summary(&o, r, &info, verr, &verr_msg);
	else if (!o.dump)
		print_summary(&o, r, &info);
	if (o.have_steps && !verr && (o.json || !o.dump) && selection(&o, r, j) != 0)
		status = EXIT_FAIL;
	if (o.dump) {
		if (j) {
			arr = json_array();
			json_object_set_new(j, "dump", arr);
		}
		if (dump(&o, r, arr) != 0)
			status = EXIT_FAIL;
	}
	if (o.stats && status == EXIT_OK && !verr) {
		if (run_stats(&o, r, &cfg, pool, j) == 0)
			stats_ok = 1;
		else
			status = EXIT_FAIL;
	}
	if (j) {
		json_dumpf(j, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(j);
	} else if (!o.dump || verr || info.truncated) {
		if (stats_ok)
			putchar('\n');
		print_integrity(&info, verr, &verr_msg);
	}
	if (verr) {
		if (!o.dump)	/* --dump already said what failed */
			cmd_error(NAME, &verr_msg);
		status = EXIT_FAIL;
	} else if (info.truncated) {
		cmd_errorf(NAME, "trace '%s' is truncated (its writer did not finish)", o.path);
		status = EXIT_FAIL;
	}
	rlb_pool_free(pool);
	rlb_trace_reader_free(r);
	cmd_config_release(&o.cfg);
	return status;
}
