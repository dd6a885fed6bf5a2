/*
 * plan.c - relibra plan: plan placement and replication for a trace under
 * one policy, simulate its step time next to the static and ideal
 * baselines, and write the plan, its summary and an EPLB export.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cmd.h"

#define NAME "plan"

static const char usage[] =
	"usage: relibra plan [-h] -c CONFIG [--set KEY=VALUE]... [--policy NAME] [-o PLAN] "
	"[--summary FILE] [--json] [--no-timing] [--replica-slots R] [--no-reorder] "
	"[--no-replicate] [--colocate | --no-colocate] [--data-control] [--relay | --no-relay] [--eplb-window W] [--steps A:B] "
	"[--pack in-order|ffd|dynamic | --schedule FILE] [--eplb-export FILE] [--fail-below F] "
	"[--threads N] TRACE\n"
	"       relibra plan --eplb-weights FILE --slots P --groups G --nodes N --gpus X\n"
	"\n"
	"  -c, --config CONFIG  configuration (relibra.yaml(5))\n"
	"  --set KEY=VALUE      override a configuration key (repeatable)\n"
	"  --policy NAME        static, eplb, eplb-oracle, replicate, relibra, ideal\n"
	"                       (default: balancer.policy)\n"
	"  -o, --output PLAN    write the plan (.rlp)\n"
	"  --summary FILE       write the result as JSON (schema relibra.result/1)\n"
	"  --json               print the result JSON on stdout instead of the table\n"
	"  --no-timing          leave wall-clock fields out (byte-identical reruns)\n"
	"  --replica-slots R    spare expert slots per GPU per layer\n"
	"  --no-reorder         relibra without cross-node reordering\n"
	"  --no-replicate       relibra without intra-node replication\n"
	"  --colocate           relibra also puts experts that share tokens on one node\n"
	"                       (default: balancer.colocate; auto: with group-limited\n"
	"                       routing)\n"
	"  --no-colocate        relibra without it\n"
	"  --data-control       relibra chooses the micro-batches and source ranks;\n"
	"                       the plan carries its schedule\n"
	"  --relay              the dispatch spreads each node's RDMA sends over its\n"
	"                       GPUs (any policy but ideal; default: balancer.relay)\n"
	"  --no-relay           the dispatch without it\n"
	"  --eplb-window W      steps of load history for eplb\n"
	"  --steps A:B          only steps A..B (A: and :B allowed)\n"
	"  --pack RULE          micro-batch packing (default: parallel.pack)\n"
	"  --schedule FILE      the trainer's own micro-batches (relibra.schedule/1 JSON)\n"
	"  --eplb-export FILE   the step placements as EPLB phy2log/log2phy/logcnt JSON\n"
	"  --fail-below F       exit 3 when the fraction of ideal is below F\n"
	"  --threads N          threads that simulate the plans and reorder the layers\n"
	"                       (default 0: one per CPU)\n"
	"  --eplb-weights FILE  run DeepSeek EPLB on a [layers][experts] JSON weight\n"
	"                       matrix and print phy2log/log2phy/logcnt\n"
	"  --slots P, --groups G, --nodes N, --gpus X\n"
	"                       its physical slots, expert groups, nodes and GPUs\n"
	"  -h, --help           show this help\n";

enum {
	OPT_POLICY = CMD_OPT_SET + 1, OPT_SUMMARY, OPT_JSON, OPT_NO_TIMING,
	OPT_SLOTS_R, OPT_NO_REORDER, OPT_NO_REPLICATE, OPT_EPLB_WINDOW,
	OPT_STEPS, OPT_PACK, OPT_EPLB_EXPORT, OPT_FAIL_BELOW, OPT_EPLB_WEIGHTS,
	OPT_SLOTS, OPT_GROUPS, OPT_NODES, OPT_GPUS, OPT_DATA_CONTROL, OPT_SCHEDULE, OPT_COLOCATE,
	OPT_NO_COLOCATE, OPT_RELAY, OPT_NO_RELAY,
	OPT_THREADS,
};

#define EXIT_BELOW 3

struct opts {
	struct cmd_config_opts cfg;
	const char *policy;
	const char *out;
	const char *summary;
	const char *eplb_export;
	const char *eplb_weights;
	const char *pack;
	const char *schedule;
	const char *trace;
	enum rlb_policy policy_kind;		/* with policy */
	enum rlb_pack pack_rule;		/* with pack */
	int json, no_timing, no_reorder, no_replicate, data_control, colocate, no_colocate;
	int relay, no_relay;
	int64_t replica_slots, eplb_window;	/* -1: from the config */
	uint32_t step_lo, step_hi;
	double fail_below;			/* < 0: off */
	uint64_t slots, groups, nodes, gpus, threads;
	int have_slots, have_groups, have_nodes, have_gpus;
};

/* One of --slots, --groups, --nodes, --gpus: a count of at least 1. */
static int eplb_count(const char *arg, const char *name, uint64_t *v, int *have)
{
	struct rlb_err err = {0};

	if (rlb_parse_u64(arg, 1, 1u << 24, v, name, &err))
		return cmd_usage_error(NAME, usage, "%s", err.msg);
	*have = 1;
	return 0;
}

/*
 * Options that POLICY does not take: EXIT_USAGE for an option of
 * relibra's given to another policy, --relay to the ideal, --eplb-window
 * to one but eplb, or --replica-slots to one without spare slots; else 0.
 */
static int policy_usage(const struct opts *o, enum rlb_policy policy)
{
	if (policy != RLB_POLICY_RELIBRA &&
	    (o->no_reorder || o->no_replicate || o->colocate || o->no_colocate ||
	     o->data_control))
		return cmd_usage_error(NAME, usage, "--%s is an option of the relibra policy",
				       o->no_reorder ? "no-reorder" :
				       o->no_replicate ? "no-replicate" :
				       o->colocate ? "colocate" :
				       o->no_colocate ? "no-colocate" : "data-control");
	if (policy == RLB_POLICY_IDEAL && (o->relay || o->no_relay))
		return cmd_usage_error(NAME, usage,
				       "--%s has no effect on the ideal, whose all-to-all is already even",
				       o->relay ? "relay" : "no-relay");
	/* eplb-oracle takes each step's own loads: only eplb has a history */
	if (o->eplb_window >= 0 && policy != RLB_POLICY_EPLB)
		return cmd_usage_error(NAME, usage, "--eplb-window is an option of the eplb policy, not %s",
				       rlb_policy_name(policy));
	/* static, ideal and relibra without replication have no spare slots */
	if (o->replica_slots >= 0 && (policy == RLB_POLICY_STATIC || policy == RLB_POLICY_IDEAL))
		return cmd_usage_error(NAME, usage, "--replica-slots is not an option of the %s policy",
				       rlb_policy_name(policy));
	if (o->replica_slots >= 0 && o->no_replicate)
		return cmd_usage_error(NAME, usage, "--replica-slots excludes --no-replicate");
	return 0;
}

/*
 * PATH is standard input ('-', or a name of it such as /dev/stdin) and
 * that is a pipe or terminal, which only one reader can read to its end
 * (a regular file opens again from its start).
 */
static int stdin_input(const char *path)
{
	struct stat st;

	return cmd_same_input(cmd_input_path(path), "/dev/stdin") &&
	       !(fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode));
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		CMD_COMMON_LONGOPTS,
		{ "policy", required_argument, NULL, OPT_POLICY },
		{ "output", required_argument, NULL, 'o' },
		{ "summary", required_argument, NULL, OPT_SUMMARY },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "no-timing", no_argument, NULL, OPT_NO_TIMING },
		{ "replica-slots", required_argument, NULL, OPT_SLOTS_R },
		{ "no-reorder", no_argument, NULL, OPT_NO_REORDER },
		{ "no-replicate", no_argument, NULL, OPT_NO_REPLICATE },
		{ "eplb-window", required_argument, NULL, OPT_EPLB_WINDOW },
		{ "steps", required_argument, NULL, OPT_STEPS },
		{ "pack", required_argument, NULL, OPT_PACK },
		{ "eplb-export", required_argument, NULL, OPT_EPLB_EXPORT },
		{ "fail-below", required_argument, NULL, OPT_FAIL_BELOW },
		{ "eplb-weights", required_argument, NULL, OPT_EPLB_WEIGHTS },
		{ "slots", required_argument, NULL, OPT_SLOTS },
		{ "groups", required_argument, NULL, OPT_GROUPS },
		{ "nodes", required_argument, NULL, OPT_NODES },
		{ "gpus", required_argument, NULL, OPT_GPUS },
		{ "data-control", no_argument, NULL, OPT_DATA_CONTROL },
		{ "colocate", no_argument, NULL, OPT_COLOCATE },
		{ "no-colocate", no_argument, NULL, OPT_NO_COLOCATE },
		{ "relay", no_argument, NULL, OPT_RELAY },
		{ "no-relay", no_argument, NULL, OPT_NO_RELAY },
		{ "schedule", required_argument, NULL, OPT_SCHEDULE },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ NULL, 0, NULL, 0 },
	};
	struct rlb_err err = {0};
	char other[48] = "";	/* the first option that is not --eplb-weights' */
	uint64_t u;
	int c, li, ret;

	memset(o, 0, sizeof(*o));
	o->replica_slots = -1;
	o->eplb_window = -1;
	o->step_hi = UINT32_MAX;
	o->fail_below = -1;
	optind = 1;
	opterr = 0;
	while ((li = -1, c = getopt_long(argc, argv, ":hc:o:", longopts, &li)) != -1) {
		if (!*other && c != OPT_EPLB_WEIGHTS && c != OPT_SLOTS &&
		    c != OPT_GROUPS && c != OPT_NODES && c != OPT_GPUS &&
		    c != 'h' && c != '?' && c != ':') {
			if (li >= 0)
				snprintf(other, sizeof(other), "--%s", longopts[li].name);
			else
				snprintf(other, sizeof(other), "-%c", c);
		}
		switch (c) {
		case OPT_POLICY:
			if (rlb_policy_from_name(optarg, &o->policy_kind, &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			o->policy = optarg;
			break;
		case 'o':
			o->out = optarg;
			break;
		case OPT_SUMMARY:
			o->summary = optarg;
			break;
		case OPT_JSON:
			o->json = 1;
			break;
		case OPT_NO_TIMING:
			o->no_timing = 1;
			break;
		case OPT_SLOTS_R:
			if (rlb_parse_u64(optarg, 0, RLB_REPLICA_SLOTS_MAX, &u, "--replica-slots", &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			o->replica_slots = (int64_t)u;
			break;
		case OPT_NO_REORDER:
			o->no_reorder = 1;
			break;
		case OPT_NO_REPLICATE:
			o->no_replicate = 1;
			break;
		case OPT_EPLB_WINDOW:
			if (rlb_parse_u64(optarg, 1, RLB_EPLB_WINDOW_MAX, &u, "--eplb-window", &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			o->eplb_window = (int64_t)u;
			break;
		case OPT_STEPS:
			if (cmd_parse_steps(optarg, &o->step_lo, &o->step_hi, &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			break;
		case OPT_PACK:
			if (rlb_pack_from_name(optarg, &o->pack_rule, &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			o->pack = optarg;
			break;
		case OPT_SCHEDULE:
			o->schedule = optarg;
			break;
		case OPT_DATA_CONTROL:
			o->data_control = 1;
			break;
		case OPT_COLOCATE:
			o->colocate = 1;
			break;
		case OPT_NO_COLOCATE:
			o->no_colocate = 1;
			break;
		case OPT_RELAY:
			o->relay = 1;
			break;
		case OPT_NO_RELAY:
			o->no_relay = 1;
			break;
		case OPT_EPLB_EXPORT:
			o->eplb_export = optarg;
			break;
		case OPT_FAIL_BELOW:
			if (rlb_parse_double(optarg, 0, 1, &o->fail_below, "--fail-below", &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			break;
		case OPT_EPLB_WEIGHTS:
			o->eplb_weights = optarg;
			break;
		case OPT_THREADS:
			if (rlb_parse_u64(optarg, 0, RLB_POOL_MAX, &o->threads, "--threads", &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			break;
		case OPT_SLOTS:
			if (eplb_count(optarg, "--slots", &o->slots, &o->have_slots))
				return EXIT_USAGE;
			break;
		case OPT_GROUPS:
			if (eplb_count(optarg, "--groups", &o->groups, &o->have_groups))
				return EXIT_USAGE;
			break;
		case OPT_NODES:
			if (eplb_count(optarg, "--nodes", &o->nodes, &o->have_nodes))
				return EXIT_USAGE;
			break;
		case OPT_GPUS:
			if (eplb_count(optarg, "--gpus", &o->gpus, &o->have_gpus))
				return EXIT_USAGE;
			break;
		default:
			ret = cmd_common_opt(NAME, usage, c, argv, &o->cfg, NULL);
			if (ret)
				return ret;
			break;
		}
	}
	if (o->eplb_weights) {
		if (!o->have_slots || !o->have_groups || !o->have_nodes || !o->have_gpus)
			return cmd_usage_error(NAME, usage,
					       "--eplb-weights needs --slots, --groups, --nodes and --gpus");
		if (optind != argc)
			return cmd_usage_error(NAME, usage, "--eplb-weights takes no trace");
		if (*other)
			return cmd_usage_error(NAME, usage,
					       "--eplb-weights takes only --slots, --groups, --nodes and --gpus, not %s",
					       other);
		return 0;
	}
	if (o->colocate && o->no_colocate)
		return cmd_usage_error(NAME, usage, "--colocate excludes --no-colocate");
	if (o->relay && o->no_relay)
		return cmd_usage_error(NAME, usage, "--relay excludes --no-relay");
	if (o->have_slots || o->have_groups || o->have_nodes || o->have_gpus)
		return cmd_usage_error(NAME, usage,
				       "--slots, --groups, --nodes and --gpus go with --eplb-weights");
	if (!o->cfg.path)
		return cmd_usage_error(NAME, usage, "-c CONFIG is required");
	if (optind == argc)
		return cmd_usage_error(NAME, usage, "no trace given");
	if (optind + 1 != argc)
		return cmd_usage_error(NAME, usage, "unexpected argument '%s'", argv[optind + 1]);
	o->trace = argv[optind];
	/* with --policy, before the config is read */
	if (o->policy && policy_usage(o, o->policy_kind))
		return EXIT_USAGE;
	/* one of them would read it to its end, the other nothing */
	if (o->schedule && stdin_input(o->cfg.path) && stdin_input(o->schedule))
		return cmd_usage_error(NAME, usage, "-c '%s' and --schedule '%s' are both "
				       "standard input: one of them can read it", o->cfg.path,
				       o->schedule);
	return 0;
}

/* --eplb-weights: DeepSeek EPLB on a weight matrix, JSON on stdout. */
static int run_eplb_weights(const struct opts *o)
{
	struct rlb_eplb_params p = {
		.num_slots = (uint32_t)o->slots, .num_groups = (uint32_t)o->groups,
		.num_nodes = (uint32_t)o->nodes, .num_gpus = (uint32_t)o->gpus,
	};
	struct rlb_eplb_result res;
	struct rlb_err err = {0};
	double *w = NULL;
	size_t layers, experts;
	char *text = NULL;
	int ret = EXIT_FAIL;

	memset(&res, 0, sizeof(res));
	if (rlb_eplb_weights_load(o->eplb_weights, &w, &layers, &experts, &err)) {
		cmd_error(NAME, &err);
		goto out;
	}
	/* options that do not fit the file's shape: a usage error */
	if (rlb_eplb_check(layers, experts, &p, &err)) {
		ret = cmd_usage_error(NAME, usage, "--slots, --groups, --nodes, --gpus for the %zu experts of '%s': %s",
				      experts, o->eplb_weights, err.msg);
		goto out;
	}
	if (rlb_eplb_rebalance(w, layers, experts, &p, &res, &err) ||
	    !(text = rlb_eplb_result_to_string(&res, &err))) {
		cmd_error(NAME, &err);
		goto out;
	}
	printf("%s\n", text);
	ret = cmd_flush_stdout(NAME) == 0 ? EXIT_OK : EXIT_FAIL;
out:
	free(text);
	free(w);
	rlb_eplb_result_release(&res);
	return ret;
}

/* Collects the step placements for --eplb-export. */
static int export_step(void *ctx, const struct rlb_step_plan *p,
		       struct rlb_err *err)
{
	json_t *steps = ctx, *j;

	j = rlb_plan_eplb_export_json(p, NULL, err);
	if (!j)
		return err && err->code ? err->code : RLB_ENOMEM;
	json_array_append_new(steps, j);
	return 0;
}

/* The EP group spans nodes of several GPUs, where a dispatch can relay. */
static int relay_can_act(const struct rlb_config *cfg)
{
	return cfg->cluster.gpus_per_node > 1 &&
	       cfg->parallel.ep_size > cfg->cluster.gpus_per_node;
}

/* The policy is the static baseline itself (static with --relay is not). */
static int is_static_baseline(const struct rlb_balance_opts *bo)
{
	return bo->policy == RLB_POLICY_STATIC && !bo->relay;
}

/*
 * One row of the table: the policy, then static and ideal unless the
 * policy is one of them (its own column says the same); c < 0 leaves the
 * ideal's cell empty.
 */
static void print_row(const struct rlb_balance_opts *bo, const char *what,
		      const char *fmt, double a, double b, double c)
{
	printf("%-28s", what);
	printf(fmt, a);
	if (!is_static_baseline(bo))
		printf(fmt, b);
	if (c >= 0 && bo->policy != RLB_POLICY_IDEAL)
		printf(fmt, c);
	putchar('\n');
}

/* The packing a plan records: the rule, or where its own schedule came from. */
static enum rlb_pack plan_pack(const struct rlb_planner_opts *po,
			       const struct rlb_planner_policy *p)
{
	if (p->opts.data_control && p->opts.policy == RLB_POLICY_RELIBRA)
		return RLB_PACK_DATA_CONTROL;
	return po->schedule_file ? RLB_PACK_FILE : po->pack;
}

/*
 * Where the policy's step goes beyond the uniform-traffic ideal: the
 * all-to-all's excess split by rlb_sim_time's informational figures
 * (volume, then uneven senders, then uneven receivers), then every other
 * term's excess.  A row per term, per-step milliseconds; then, when the
 * senders' part is the largest, what evens it out (RELAY: the policy's
 * dispatch relays already; MULTI_GPU_NODES: the EP group spans nodes of
 * several GPUs, where relaying could).
 */
static void print_gap(const struct rlb_sim_summary *s, enum rlb_pack pack,
		      int relay, int multi_gpu_nodes, double ms)
{
	const struct rlb_sim_time *p = &s->policy_time, *i = &s->ideal;
	double volume = p->a2a_even_s - i->a2a_s;
	double senders = p->a2a_senders_s - p->a2a_even_s;
	double receivers = p->a2a_s - p->a2a_senders_s;
	double expert = p->expert_s - i->expert_s, dense = p->dense_s - i->dense_s;
	double copies = p->replication_s + p->grad_reduce_s;
	double other[] = { volume, receivers, expert, copies, p->migration_s,
			   p->planning_s, dense };
	int largest = senders > 0;
	size_t k;

	printf("\n%-36s%12.3f\n", "gap to the ideal (ms per step)",
	       (p->total_s - i->total_s) * ms);
	printf("  %-34s%12.3f  %s\n", "all-to-all: copy volume", volume * ms,
	       "copies beyond the static layout's");
	printf("  %-34s%12.3f  %s\n", "all-to-all: uneven senders", senders * ms,
	       "the busiest sending GPU");
	printf("  %-34s%12.3f  %s\n", "all-to-all: uneven receivers",
	       receivers * ms, "the busiest receiving GPU");
	printf("  %-34s%12.3f  %s\n", "expert compute", expert * ms,
	       "the slowest GPU over the mean");
	printf("  %-34s%12.3f\n", "replication and gradients", copies * ms);
	printf("  %-34s%12.3f\n", "migration", p->migration_s * ms);
	printf("  %-34s%12.3f\n", "planning", p->planning_s * ms);
	/* only data control's own schedule makes the dense part differ */
	if (pack == RLB_PACK_DATA_CONTROL)
		printf("  %-34s%12.3f  %s\n", "dense", dense * ms,
		       "the plan's own schedule");
	for (k = 0; k < sizeof(other) / sizeof(other[0]); k++)
		largest &= senders >= other[k];
	if (!largest || pack == RLB_PACK_DYNAMIC || pack == RLB_PACK_DATA_CONTROL)
		return;
	if (relay)
		printf("the senders' part is the largest; with the relay it follows the "
		       "nodes' token counts, which --pack dynamic and --data-control "
		       "even out\n");
	else
		printf("the senders' part is the largest; it follows the ranks' token "
		       "counts (rank tokens max/mean), which --pack dynamic and "
		       "--data-control even out%s\n",
		       multi_gpu_nodes ? ", and --relay inside each node" : "");
}

static void print_table(const struct rlb_config *cfg,
			const struct rlb_planner_opts *po,
			const struct rlb_planner_policy *p,
			const struct rlb_sim_summary *st, const char *schedule)
{
	const struct rlb_sim_summary *s = &p->summary;
	const struct rlb_balance_opts *bo = &p->opts;
	double ideal_step = s->steps ? s->ideal.total_s / s->steps : 0;
	double speedup = s->policy_time.total_s > 0 ?
		st->policy_time.total_s / s->policy_time.total_s : 0;
	double ms = 1e3 / (s->steps ? s->steps : 1);	/* per-step milliseconds */
	char planner[32] = "not timed", label[128], cluster[RLB_NAME_MAX + 32];

	if (!po->no_timing)
		snprintf(planner, sizeof(planner), "%.3f s", s->planner_ns / 1e9);
	/* a cluster made of keys alone has no name */
	if (cfg->cluster.name[0])
		snprintf(cluster, sizeof(cluster), "%s", cfg->cluster.name);
	else
		snprintf(cluster, sizeof(cluster), "%d x %d GPUs", cfg->cluster.nodes,
			 cfg->cluster.gpus_per_node);

	printf("relibra plan: %s on %s, %s (EP %d), %" PRIu64 " step%s, %" PRIu64 " micro-batch%s, ",
	       rlb_result_label(bo, label, sizeof(label)), cfg->model.name, cluster,
	       cfg->parallel.ep_size, s->steps, cmd_s(s->steps),
	       s->micro_batches, s->micro_batches == 1 ? "" : "es");
	/* a trainer's schedule has micro-batches of its own, whatever the budget */
	if (schedule)
		printf("the schedule of '%s'\n\n", schedule);
	else
		printf("%s packing, %d token%s per GPU per micro-batch\n\n",
		       rlb_pack_name(plan_pack(po, p)), cfg->parallel.micro_batch_tokens,
		       cmd_s((uint64_t)cfg->parallel.micro_batch_tokens));
	printf("%-28s%14s", "", bo->policy == RLB_POLICY_STATIC && bo->relay ?
	       "static --relay" : rlb_policy_name(bo->policy));
	if (!is_static_baseline(bo))
		printf("%14s", "static");
	if (bo->policy != RLB_POLICY_IDEAL)
		printf("%14s", "ideal");
	putchar('\n');
	print_row(bo, "step time (ms)", "%14.1f", s->step_time_s * 1e3,
		  st->step_time_s * 1e3, ideal_step * 1e3);
	print_row(bo, "tokens/s", "%14.4g", s->tokens_per_s, st->tokens_per_s,
		  ideal_step > 0 ? s->tokens / s->ideal.total_s : 0);
	print_row(bo, "fraction of ideal", "%14.3f", s->fraction_of_ideal,
		  st->fraction_of_ideal, 1.0);
	print_row(bo, "speedup over static", "%14.3f", speedup, 1.0, -1);
	print_row(bo, "GPU max/mean p50", "%14.3f", s->gpu_after.p50,
		  st->gpu_after.p50, -1);
	print_row(bo, "GPU max/mean p99", "%14.3f", s->gpu_after.p99,
		  st->gpu_after.p99, -1);
	print_row(bo, "node max/mean p50", "%14.3f", s->node_after.p50,
		  st->node_after.p50, -1);
	print_row(bo, "node floor p50", "%14.3f", s->node_floor.p50,
		  st->node_floor.p50, -1);
	print_row(bo, "rank tokens max/mean p50", "%14.3f", s->rank_tokens.p50,
		  st->rank_tokens.p50, -1);
	print_row(bo, "rank tokens max/mean max", "%14.3f", s->rank_tokens.max,
		  st->rank_tokens.max, -1);
	printf("\nstep time breakdown (ms): expert %.1f, all-to-all %.1f "
	       "(RDMA %.1f, NVLink %.1f), dense %.1f, replication %.2f, "
	       "gradient reduction %.2f, migration %.2f, planning %.2f\n",
	       s->policy_time.expert_s * ms, s->policy_time.a2a_s * ms,
	       s->policy_time.a2a_rdma_s * ms, s->policy_time.a2a_nvlink_s * ms,
	       s->policy_time.dense_s * ms, s->policy_time.replication_s * ms,
	       s->policy_time.grad_reduce_s * ms, s->policy_time.migration_s * ms,
	       s->policy_time.planning_s * ms);
	printf("replicas %" PRIu64 " (slot use %.1f%%), migrated experts %" PRIu64
	       " (to another node; %" PRIu64 " to another GPU of their node), "
	       "planner %s, fraction of same-traffic ideal %.3f\n",
	       s->replicas, 100 * s->slot_use, s->migrated_experts,
	       s->moved_in_node, planner, s->fraction_of_same_traffic_ideal);
	if (bo->policy != RLB_POLICY_IDEAL)
		print_gap(s, plan_pack(po, p), bo->relay && relay_can_act(cfg),
			  relay_can_act(cfg), ms);
}

/* --eplb-export: the steps' placements in their document, into af. */
static int write_export(struct rlb_atomic_file *af, json_t *steps)
{
	struct rlb_err err = {0};
	json_t *doc = json_pack("{s:s, s:s, s:O}", "schema", "relibra.eplb-export/1",
				"log2phy_order", "replica", "steps", steps);
	int ret;

	if (!doc) {
		cmd_errorf(NAME, "out of memory");
		return -1;
	}
	ret = cmd_json_sync(af, doc, &err);
	if (ret != 0)
		cmd_error(NAME, &err);
	json_decref(doc);
	return ret;
}

/*
 * The policy and its options: the config's balancer section, overridden by
 * the command line.  0, or EXIT_USAGE (policy_usage, or --replica-slots
 * with replication off in the config).
 */
static int policy_opts(const struct opts *o, const struct rlb_config *cfg,
		       struct rlb_balance_opts *b)
{
	int ret;

	rlb_balance_opts_from_config(b, cfg);
	if (o->policy)
		b->policy = o->policy_kind;
	if ((ret = policy_usage(o, b->policy)) != 0)
		return ret;
	if (o->no_reorder)
		b->reorder = 0;
	if (o->no_replicate)
		b->replicate = 0;
	if (o->replica_slots >= 0 && b->policy == RLB_POLICY_RELIBRA && !b->replicate)
		return cmd_usage_error(NAME, usage, "--replica-slots needs replication: "
				       "balancer.replicate is false in the config "
				       "(--set balancer.replicate=true turns it on)");
	if (o->replica_slots >= 0)
		b->replica_slots = (uint32_t)o->replica_slots;
	if (o->eplb_window >= 0)
		b->eplb_window = (uint32_t)o->eplb_window;
	if (o->data_control)
		b->data_control = 1;
	if (o->colocate)
		b->colocate = 1;
	if (o->no_colocate)
		b->colocate = 0;
	if (o->relay || o->no_relay)
		b->relay = o->relay;
	if (b->policy != RLB_POLICY_RELIBRA) {
		/* balancer.data_control and balancer.colocate are relibra's */
		b->data_control = 0;
		b->colocate = 0;
	}
	return 0;
}

int cmd_plan(int argc, char **argv)
{
	struct opts o;
	struct rlb_config cfg;
	struct rlb_err err = {0};
	struct rlb_trace_reader *r = NULL;
	struct rlb_planner_opts po;
	struct rlb_planner_policy pol;
	struct rlb_sim_summary st;
	struct rlb_plan_header ph;
	struct rlb_result_source src;
	json_t *result = NULL, *exported = NULL;
	struct rlb_schedule_file *sfile = NULL;
	struct rlb_atomic_file export_af = { .slot = -1 }, summary_af = { .slot = -1 };
	const uint32_t *steps;
	size_t nsteps;
	int ret;

	memset(&pol, 0, sizeof(pol));
	ret = parse_args(argc, argv, &o);
	if (ret)
		goto done;
	if (o.eplb_weights) {
		ret = run_eplb_weights(&o);
		goto done;
	}
	{
		const struct cmd_path in[] = {
			{ "the trace", o.trace, 0 }, { "the config", o.cfg.path, 0 },
			{ "the schedule", o.schedule, 0 },
		};
		const struct cmd_path out[] = {
			{ "-o", o.out, 0 }, { "--summary", o.summary, 0 },
			{ "--eplb-export", o.eplb_export, 0 },
		};

		ret = cmd_check_outputs(NAME, usage, in, 3, out, 3, 0);
		if (ret)
			goto done;
	}
	ret = EXIT_FAIL;
	memset(&po, 0, sizeof(po));
	if (cmd_config_load(NAME, &o.cfg, &cfg) != 0)
		goto done;
	ret = policy_opts(&o, &cfg, &pol.opts);
	if (ret)
		goto done;
	if (pol.opts.relay && !relay_can_act(&cfg))
		cmd_errorf(NAME, "note: the relay changes nothing here: the EP group %s",
			   cfg.cluster.gpus_per_node > 1 ? "lies within one node" :
			   "has one GPU per node");
	ret = EXIT_FAIL;
	po.pack = o.pack ? o.pack_rule : cfg.parallel.pack;
	if (o.schedule && (o.pack || pol.opts.data_control)) {
		ret = cmd_usage_error(NAME, usage, "--schedule excludes %s",
				      o.pack ? "--pack" : o.data_control ? "--data-control" :
				      "data control (balancer.data_control in the config; "
				      "--set balancer.data_control=false turns it off)");
		goto done;
	}
	if (o.schedule) {
		if (rlb_schedule_file_load(&sfile, o.schedule, &err) != 0) {
			cmd_error(NAME, &err);
			goto done;
		}
		po.schedule_file = sfile;
	}
	po.first_step = o.step_lo;
	po.last_step = o.step_hi;
	po.progress = cmd_progress;
	po.progress_ctx = NAME;
	po.threads = (unsigned)o.threads;
	po.no_timing = o.no_timing;

	if (rlb_trace_reader_open(&r, o.trace, &err) != 0 ||
	    rlb_trace_reader_steps(r, &steps, &nsteps, &err) != 0) {
		cmd_error(NAME, &err);
		goto done;
	}
	/* before a plan header is made of them */
	if (rlb_trace_header_check(rlb_trace_reader_header(r), &cfg, &err) != 0) {
		cmd_errorf(NAME, "%s (config '%s', trace '%s')", err.msg,
			   o.cfg.path, o.trace);
		goto done;
	}
	cmd_warn_truncated(NAME, r, o.trace, o.step_lo, o.step_hi);
	if (sfile) {
		uint32_t first = 0;
		size_t extra = rlb_schedule_file_extra_steps(sfile, steps, nsteps, o.step_lo,
							     o.step_hi, &first);

		if (extra)
			cmd_errorf(NAME, "warning: schedule '%s' lists %zu step%s that trace '%s' "
				   "lacks (step %u%s): is it this run's schedule?", o.schedule,
				   extra, cmd_s(extra), o.trace, first, extra > 1 ? " first" : "");
	}
	if (o.out) {
		struct rlb_plan_writer_opts wo = { .no_timing = o.no_timing };

		rlb_plan_header_init(&ph, &cfg, &pol.opts, plan_pack(&po, &pol),
				     rlb_trace_reader_header(r), steps, nsteps);
		if (rlb_plan_writer_open(&pol.writer, o.out, &ph, &wo, &err) != 0) {
			cmd_error(NAME, &err);
			goto done;
		}
	}
	/* every output opened before the work, all renamed after it (below) */
	if ((o.eplb_export && rlb_atomic_open(&export_af, o.eplb_export, &err) != 0) ||
	    (o.summary && rlb_atomic_open(&summary_af, o.summary, &err) != 0)) {
		cmd_error(NAME, &err);
		goto done;
	}
	if (o.eplb_export) {
		exported = json_array();
		if (!exported) {
			cmd_errorf(NAME, "out of memory");
			goto done;
		}
		pol.on_step = export_step;
		pol.on_step_ctx = exported;
	}
	if (rlb_planner_run(r, &cfg, &po, &pol, 1, &st, &err) != 0) {
		cmd_error(NAME, &err);
		goto done;
	}
	cmd_progress_done();
	if (pol.writer && rlb_plan_writer_finish(pol.writer, &err) != 0) {
		cmd_error(NAME, &err);
		goto done;
	}
	if (exported && write_export(&export_af, exported) != 0)
		goto done;
	memset(&src, 0, sizeof(src));
	src.config_path = o.cfg.path;
	src.trace_path = o.trace;
	src.trace = rlb_trace_reader_header(r);
	src.trace_truncated = rlb_trace_reader_truncated(r);
	src.no_timing = o.no_timing;
	src.schedule_path = o.schedule;
	result = rlb_result_json(&cfg, &po, &pol, &st, &src);
	if (!result) {
		cmd_errorf(NAME, "out of memory");
		goto done;
	}
	if (o.summary && cmd_json_sync(&summary_af, result, &err) != 0) {
		cmd_error(NAME, &err);
		goto done;
	}
	/* every output complete: into place */
	if (pol.writer) {
		struct rlb_plan_writer *w = pol.writer;

		pol.writer = NULL;
		if (rlb_plan_writer_close(w, &err) != 0) {
			cmd_error(NAME, &err);
			goto done;
		}
	}
	if ((o.eplb_export && rlb_atomic_commit(&export_af, &err) != 0) ||
	    (o.summary && rlb_atomic_commit(&summary_af, &err) != 0)) {
		cmd_error(NAME, &err);
		goto done;
	}
	if (o.json) {
		json_dumpf(result, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
	} else {
		print_table(&cfg, &po, &pol, &st, o.schedule);
	}
	if (cmd_flush_stdout(NAME) != 0)
		goto done;
	ret = EXIT_OK;
	if (o.fail_below >= 0 && pol.summary.fraction_of_ideal < o.fail_below) {
		cmd_errorf(NAME, "fraction of ideal %.3f is below %.3f",
			   pol.summary.fraction_of_ideal, o.fail_below);
		ret = EXIT_BELOW;
	}
done:
	if (ret < 0)
		ret = EXIT_OK;	/* -h */
	rlb_plan_writer_abort(pol.writer);
	rlb_atomic_abort(&export_af);
	rlb_atomic_abort(&summary_af);
	rlb_planner_policy_release(&pol);
	json_decref(result);
	json_decref(exported);
	rlb_trace_reader_free(r);
	rlb_schedule_file_free(sfile);
	cmd_config_release(&o.cfg);
	return ret;
}
