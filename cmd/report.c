/*
 * report.c - relibra report: compare results (plan summaries, train-step
 * metrics) or plan a trace under several policies in process, optionally
 * over a swept config key, and print the comparison as a table, Markdown,
 * CSV or JSON, with SVG charts and an HTML page.
 */
#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "report.h"

#define NAME "report"

static const char usage[] =
	"usage: relibra report [-h] [-c CONFIG] [--set KEY=VALUE]... [--trace TRACE] "
	"[--policies LIST] [--sweep KEY=V1,V2,...] [--steps A:B] [--pack in-order|ffd|dynamic] "
	"[--format table|markdown|csv|json] [-o FILE] [--html FILE] [--svg DIR] "
	"[--layer L] [--threads N] [RESULT.json]...\n"
	"\n"
	"  RESULT.json          plan summaries (plan --summary) and train-step metrics\n"
	"  -c, --config CONFIG  configuration for --trace (relibra.yaml(5))\n"
	"  --set KEY=VALUE      override a configuration key (repeatable)\n"
	"  --trace TRACE        plan and simulate this trace in process\n"
	"  --policies LIST      comma-separated policies for --trace (default: static,\n"
	"                       eplb,eplb-oracle,replicate,relibra,ideal); relibra's\n"
	"                       plan options as relibra+no-reorder, relibra+colocate,\n"
	"                       relibra+no-colocate, relibra+no-replicate,\n"
	"                       relibra+data-control; any policy but ideal's\n"
	"                       +relay or +no-relay, as static+relay\n"
	"  --sweep KEY=V1,...   repeat --trace for each value of one config key\n"
	"  --steps A:B          only steps A..B of the trace\n"
	"  --pack RULE          micro-batch packing (default: parallel.pack)\n"
	"  --format FORMAT      table (default), markdown, csv or json\n"
	"  -o, --output FILE    write the report to FILE instead of stdout\n"
	"  --html FILE          write one self-contained HTML page with the charts\n"
	"  --svg DIR            write the charts as SVG files into DIR\n"
	"  --layer L            MoE layer of the micro-batch chart (default: the most\n"
	"                       imbalanced under static)\n"
	"  --threads N          threads that simulate the plans and reorder the layers\n"
	"                       (default 0: one per CPU)\n"
	"  -h, --help           show this help\n";

enum {
	OPT_TRACE = CMD_OPT_SET + 1, OPT_POLICIES, OPT_SWEEP, OPT_STEPS, OPT_PACK,
	OPT_FORMAT, OPT_HTML, OPT_SVG, OPT_LAYER, OPT_THREADS,
};

struct opts {
	struct cmd_config_opts cfg;
	const char *trace, *policies, *sweep, *pack, *out, *html, *svg;
	enum rlb_report_format format;
	enum rlb_pack pack_rule;	/* with pack */
	char polbuf[256];		/* --policies, split at the commas */
	const char *pol[32];
	size_t npol;
	uint32_t step_lo, step_hi;
	int have_steps, have_threads;
	long layer;			/* -1: not given */
	uint64_t threads;
	char **files;
	int nfiles;
};

/*
 * "a,b,c" into o->pol, each a policy spec (rlb_policy_spec_apply); a usage
 * error on an unknown one.  Two that name the same plan are found once the
 * configuration is known (same_plans).
 */
static int parse_policies(struct opts *o)
{
	char *tok, *save = NULL;
	struct rlb_err err = {0};
	struct rlb_balance_opts bo;

	if (strlen(o->policies) >= sizeof(o->polbuf))
		return cmd_usage_error(NAME, usage, "--policies: list too long");
	if (*o->policies == ',' || strstr(o->policies, ",,") ||
	    (*o->policies && o->policies[strlen(o->policies) - 1] == ','))
		return cmd_usage_error(NAME, usage, "--policies '%s': an empty entry",
				       o->policies);
	strcpy(o->polbuf, o->policies);
	o->npol = 0;
	for (tok = strtok_r(o->polbuf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (o->npol == sizeof(o->pol) / sizeof(o->pol[0]))
			return cmd_usage_error(NAME, usage, "--policies: more than %zu",
					       sizeof(o->pol) / sizeof(o->pol[0]));
		memset(&bo, 0, sizeof(bo));
		bo.reorder = bo.replicate = 1;
		if (rlb_policy_spec_apply(tok, &bo, &err))
			return cmd_usage_error(NAME, usage, "--policies: %s", err.msg);
		o->pol[o->npol++] = tok;
	}
	if (o->npol == 0)
		return cmd_usage_error(NAME, usage, "--policies: no policy");
	return 0;
}

/* The values of --sweep: none empty, none twice. */
static int check_sweep_values(const char *vals)
{
	const char *v, *w, *end;
	size_t n;

	for (v = vals;; v = end + 1) {
		end = strchr(v, ',');
		n = end ? (size_t)(end - v) : strlen(v);
		if (n == 0)
			return cmd_usage_error(NAME, usage, "--sweep: an empty value in '%s'", vals);
		for (w = vals; w < v; w = strchr(w, ',') + 1)
			if (strncmp(w, v, n) == 0 && (w[n] == ',' || w[n] == '\0'))
				return cmd_usage_error(NAME, usage, "--sweep: value '%.*s' given twice",
						       (int)n, v);
		if (!end)
			return 0;
	}
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		CMD_COMMON_LONGOPTS,
		{ "trace", required_argument, NULL, OPT_TRACE },
		{ "policies", required_argument, NULL, OPT_POLICIES },
		{ "sweep", required_argument, NULL, OPT_SWEEP },
		{ "steps", required_argument, NULL, OPT_STEPS },
		{ "pack", required_argument, NULL, OPT_PACK },
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "output", required_argument, NULL, 'o' },
		{ "html", required_argument, NULL, OPT_HTML },
		{ "svg", required_argument, NULL, OPT_SVG },
		{ "layer", required_argument, NULL, OPT_LAYER },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const all[] = {
		"static", "eplb", "eplb-oracle", "replicate", "relibra", "ideal",
	};
	struct rlb_err err = {0};
	uint64_t u;
	int c, ret, i, j;

	memset(o, 0, sizeof(*o));
	o->layer = -1;
	o->step_hi = UINT32_MAX;
	memcpy(o->pol, all, sizeof(all));
	o->npol = sizeof(all) / sizeof(all[0]);
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hc:o:", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_TRACE:
			if (o->trace)
				return cmd_usage_error(NAME, usage,
						       "--trace given twice: a report plans one trace");
			o->trace = optarg;
			break;
		case OPT_POLICIES:
			if (o->policies)
				return cmd_usage_error(NAME, usage,
						       "--policies given twice: give one comma-separated list");
			o->policies = optarg;
			break;
		case OPT_SWEEP:
			if (o->sweep)
				return cmd_usage_error(NAME, usage,
						       "--sweep given twice: a report sweeps one key");
			o->sweep = optarg;
			break;
		case OPT_STEPS:
			if (cmd_parse_steps(optarg, &o->step_lo, &o->step_hi, &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			o->have_steps = 1;
			break;
		case OPT_PACK:
			if (rlb_pack_from_name(optarg, &o->pack_rule, &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			o->pack = optarg;
			break;
		case OPT_FORMAT:
			if (rlb_report_format_from_name(optarg, &o->format, &err))
				return cmd_usage_error(NAME, usage, "--format: %s", err.msg);
			break;
		case 'o':
			o->out = optarg;
			break;
		case OPT_HTML:
			o->html = optarg;
			break;
		case OPT_SVG:
			o->svg = optarg;
			break;
		case OPT_LAYER:
			if (rlb_parse_u64(optarg, 0, 1u << 20, &u, "--layer", &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			o->layer = (long)u;
			break;
		case OPT_THREADS:
			if (rlb_parse_u64(optarg, 0, RLB_POOL_MAX, &o->threads, "--threads", &err))
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			o->have_threads = 1;
			break;
		default:
			ret = cmd_common_opt(NAME, usage, c, argv, &o->cfg, NULL);
			if (ret)
				return ret;
			break;
		}
	}
	o->files = argv + optind;
	o->nfiles = argc - optind;
	if (o->trace && !o->cfg.path)
		return cmd_usage_error(NAME, usage, "--trace needs -c CONFIG");
	if (!o->trace) {
		const char *need = o->cfg.path ? "-c" : o->cfg.nsets ? "--set" :
			o->policies ? "--policies" : o->sweep ? "--sweep" :
			o->have_steps ? "--steps" : o->pack ? "--pack" :
			o->have_threads ? "--threads" : o->layer >= 0 ? "--layer" : NULL;

		if (need)
			return cmd_usage_error(NAME, usage, "%s goes with --trace", need);
	}
	/* the micro-batch chart is its only use */
	if (o->layer >= 0 && !o->html && !o->svg)
		return cmd_usage_error(NAME, usage, "--layer goes with --html or --svg");
	if (!o->trace && o->nfiles == 0)
		return cmd_usage_error(NAME, usage,
				       "no results: give RESULT.json files or -c CONFIG --trace TRACE");
	/*
	 * a file given twice would be two rows that no label tells apart;
	 * '-' is the file standard input reads, as /dev/stdin is
	 */
	for (i = 1; i < o->nfiles; i++)
		for (j = 0; j < i; j++)
			if (cmd_same_input(cmd_input_path(o->files[j]), cmd_input_path(o->files[i])))
				return strcmp(o->files[j], o->files[i]) ?
					cmd_usage_error(NAME, usage, "'%s' and '%s' are the same result file",
							o->files[j], o->files[i]) :
					cmd_usage_error(NAME, usage, "result file '%s' given twice",
							o->files[i]);
	if (o->policies && parse_policies(o))
		return EXIT_USAGE;
	if (o->sweep) {
		const char *eq = strchr(o->sweep, '=');
		int klen = eq ? (int)(eq - o->sweep) : 0;

		if (!eq || eq == o->sweep || !eq[1])
			return cmd_usage_error(NAME, usage,
					       "--sweep '%s': expected KEY=V1,V2,...", o->sweep);
		/* keys the sweep would not change: refused, not silently flat */
		if (klen == 15 && !strncmp(o->sweep, "balancer.policy", 15))
			return cmd_usage_error(NAME, usage,
					       "--sweep balancer.policy: the policies are chosen with --policies");
		if (klen == 13 && !strncmp(o->sweep, "parallel.pack", 13) && o->pack)
			return cmd_usage_error(NAME, usage,
					       "--pack and --sweep parallel.pack both choose the packing");
		if (!strncmp(o->sweep, "workload.", 9))
			return cmd_usage_error(NAME, usage,
					       "--sweep %.*s: the workload keys drive relibra capture --synthetic, not planning",
					       klen, o->sweep);
		/* a --set of the swept key would be overridden by every value */
		for (size_t k = 0; k < o->cfg.nsets; k++)
			if (!strncmp(o->cfg.sets[k], o->sweep, (size_t)klen) &&
			    o->cfg.sets[k][klen] == '=')
				return cmd_usage_error(NAME, usage,
						       "--set '%s' and --sweep %.*s both set %.*s",
						       o->cfg.sets[k], klen, o->sweep, klen, o->sweep);
		if (check_sweep_values(eq + 1))
			return EXIT_USAGE;
	}
	return 0;
}

/*
 * The config with one more override (key NULL: none) into cfg; co and
 * *set to release.  EXIT_OK or EXIT_FAIL (reported).
 */
static int load_config(const struct opts *o, const char *key, const char *value,
		       struct cmd_config_opts *co, char **set, struct rlb_config *cfg)
{
	*co = o->cfg;
	co->sets = NULL;
	co->nsets = 0;
	*set = NULL;
	for (size_t i = 0; i < o->cfg.nsets; i++)
		if (cmd_config_add_set(co, o->cfg.sets[i]))
			goto oom;
	if (key) {
		*set = malloc(strlen(key) + strlen(value) + 2);
		if (!*set)
			goto oom;
		sprintf(*set, "%s=%s", key, value);
		if (cmd_config_add_set(co, *set))
			goto oom;
	}
	if (cmd_config_load(NAME, co, cfg) != 0) {
		if (key)
			fprintf(stderr, "hint: '%s=%s' is a value of --sweep\n", key, value);
		return EXIT_FAIL;
	}
	return EXIT_OK;
oom:
	cmd_errorf(NAME, "out of memory");
	return EXIT_FAIL;
}

/*
 * Two entries of --policies that name the same plan under the config with
 * one more override (key NULL: none): a usage error.  The options come
 * from the config (balancer.colocate auto, for one, depends on the
 * model), so this waits for it.
 */
static int same_plans(const struct opts *o, const char *key, const char *value)
{
	struct cmd_config_opts co;
	struct rlb_config cfg;
	struct rlb_balance_opts bo;
	char *set, label[sizeof(o->pol) / sizeof(o->pol[0])][128];
	size_t i, j;
	int ret = load_config(o, key, value, &co, &set, &cfg);

	for (i = 0; ret == EXIT_OK && i < o->npol; i++) {
		rlb_balance_opts_from_config(&bo, &cfg);
		rlb_policy_spec_apply(o->pol[i], &bo, NULL);	/* checked in parse_policies */
		rlb_result_label(&bo, label[i], sizeof(label[0]));
		for (j = 0; j < i; j++)
			if (strcmp(label[j], label[i]) == 0) {
				ret = cmd_usage_error(NAME, usage,
						      "--policies: '%s' and '%s' are the same plan, '%s'%s%s%s%s%s",
						      o->pol[j], o->pol[i], label[i],
						      key ? " (with " : "", key ? key : "",
						      key ? "=" : "", key ? value : "",
						      key ? ")" : "");
				break;
			}
	}
	free(set);
	cmd_config_release(&co);
	return ret;
}

/* Plan the trace under the config with one more override (may be NULL). */
static int plan_in_process(const struct opts *o, struct rlb_trace_reader *tr,
			   const char *key, const char *value,
			   struct rlb_report *rep)
{
	struct cmd_config_opts co;
	struct rlb_report_run_opts ro;
	struct rlb_config cfg;
	struct rlb_err err = {0};
	char *set = NULL;
	int ret = load_config(o, key, value, &co, &set, &cfg);

	if (ret != EXIT_OK)
		goto out;
	ret = EXIT_FAIL;
	memset(&ro, 0, sizeof(ro));
	ro.config_path = o->cfg.path;
	ro.trace_path = o->trace;
	ro.policies = o->pol;
	ro.npolicies = o->npol;
	ro.planner.pack = o->pack ? o->pack_rule : cfg.parallel.pack;
	ro.planner.first_step = o->step_lo;
	ro.planner.last_step = o->step_hi;
	ro.planner.progress = cmd_progress;
	ro.planner.progress_ctx = NAME;
	ro.planner.threads = (unsigned)o->threads;
	ro.sweep_value = value;
	ro.series = o->html || o->svg;
	if (rlb_report_run(rep, tr, &cfg, &ro, &err) != 0) {
		if (key)
			rlb_err_prefix(&err, "%s=%s", key, value);
		cmd_error(NAME, &err);
		goto out;
	}
	cmd_progress_done();
	ret = EXIT_OK;
out:
	free(set);
	cmd_config_release(&co);
	return ret;
}

/*
 * Each value of --sweep (or the config alone, without it) through fn, in
 * order, until one fails.
 */
static int each_config(const struct opts *o,
		       int (*fn)(const struct opts *, const char *, const char *, void *),
		       void *ctx)
{
	char *key, *vals, *tok, *save = NULL;
	int ret = EXIT_OK;

	if (!o->sweep)
		return fn(o, NULL, NULL, ctx);
	key = strdup(o->sweep);
	if (!key) {
		cmd_errorf(NAME, "out of memory");
		return EXIT_FAIL;
	}
	vals = strchr(key, '=');
	*vals++ = '\0';
	for (tok = strtok_r(vals, ",", &save); tok && ret == EXIT_OK;
	     tok = strtok_r(NULL, ",", &save))
		ret = fn(o, key, tok, ctx);
	free(key);
	return ret;
}

/* The values of --sweep checked so far, each with its config as YAML. */
struct sweep_seen {
	const char **value;
	char **yaml;
	size_t n;
};

/*
 * The config of --sweep's VALUE as YAML into *yaml (to free), to tell two
 * spellings of one value apart from two values ("2" and "02" are one).
 */
static int config_yaml(const struct opts *o, const char *key, const char *value,
		       char **yaml)
{
	struct cmd_config_opts co;
	struct rlb_config cfg;
	struct rlb_err err = {0};
	char *set;
	size_t len;
	FILE *fp = NULL;
	int ret = load_config(o, key, value, &co, &set, &cfg);

	*yaml = NULL;
	if (ret == EXIT_OK) {
		fp = open_memstream(yaml, &len);
		if (!fp || rlb_config_write_yaml(&cfg, fp, &err) != 0 || fclose(fp) != 0) {
			if (!fp)
				free(*yaml);	/* nothing the stream owns */
			cmd_errorf(NAME, "cannot write the config of %s=%s: %s", key, value,
				   err.msg[0] ? err.msg : "out of memory");
			ret = EXIT_FAIL;
		}
	}
	free(set);
	cmd_config_release(&co);
	return ret;
}

static int check_config(const struct opts *o, const char *key, const char *value,
			void *ctx)
{
	struct sweep_seen *seen = ctx;
	const char **v;
	char **y, *yaml;
	size_t i;
	int ret = same_plans(o, key, value);

	if (ret != EXIT_OK || !key)
		return ret;
	ret = config_yaml(o, key, value, &yaml);
	if (ret != EXIT_OK)
		return ret;
	for (i = 0; i < seen->n; i++)
		if (strcmp(seen->yaml[i], yaml) == 0) {
			free(yaml);
			return cmd_usage_error(NAME, usage,
					       "--sweep: '%s' and '%s' are one value of %s",
					       seen->value[i], value, key);
		}
	v = realloc(seen->value, (seen->n + 1) * sizeof(*v));
	if (v)
		seen->value = v;
	y = realloc(seen->yaml, (seen->n + 1) * sizeof(*y));
	if (y)
		seen->yaml = y;
	if (!v || !y) {
		free(yaml);
		cmd_errorf(NAME, "out of memory");
		return EXIT_FAIL;
	}
	seen->value[seen->n] = value;
	seen->yaml[seen->n++] = yaml;
	return EXIT_OK;
}

struct plan_ctx {
	struct rlb_trace_reader *tr;
	struct rlb_report *rep;
};

static int plan_config(const struct opts *o, const char *key, const char *value,
		       void *ctx)
{
	struct plan_ctx *c = ctx;

	if (key && !c->rep->sweep_key) {
		c->rep->sweep_key = strdup(key);
		if (!c->rep->sweep_key) {
			cmd_errorf(NAME, "out of memory");
			return EXIT_FAIL;
		}
	}
	return plan_in_process(o, c->tr, key, value, c->rep);
}

static int run_trace(const struct opts *o, struct rlb_report *rep)
{
	struct plan_ctx c = { NULL, rep };
	struct sweep_seen seen = { NULL, NULL, 0 };
	struct rlb_err err = {0};
	size_t i;
	int ret;

	/* every configuration's usage errors before any planning */
	ret = each_config(o, check_config, &seen);
	for (i = 0; i < seen.n; i++)
		free(seen.yaml[i]);
	free(seen.yaml);
	free(seen.value);
	if (ret != EXIT_OK)
		return ret;
	if (rlb_trace_reader_open(&c.tr, o->trace, &err) != 0) {
		cmd_error(NAME, &err);
		return EXIT_FAIL;
	}
	cmd_warn_truncated(NAME, c.tr, o->trace, o->step_lo, o->step_hi);
	ret = each_config(o, plan_config, &c);
	rlb_trace_reader_free(c.tr);
	return ret;
}

/*
 * Whether P is a file that --svg DIR writes: DIR/NAME.svg or
 * DIR/NAME-gN.svg for a chart NAME (rlb_report_write_svgs).
 */
static int chart_name(const char *base)
{
	int c;

	for (c = 0; c < RLB_CHART_COUNT; c++) {
		const char *name = rlb_report_chart_name(c), *q;
		size_t len = strlen(name);

		if (strncmp(base, name, len))
			continue;
		q = base + len;
		if (q[0] == '-' && q[1] == 'g' && q[2] >= '0' && q[2] <= '9')
			for (q += 2; *q >= '0' && *q <= '9'; q++)
				;
		if (!strcmp(q, ".svg"))
			return 1;
	}
	return 0;
}

/*
 * Whether --svg DIR would write over P: P is DIR/NAME for a chart's NAME,
 * or a file of DIR under a chart's name is P under another name (a link).
 */
static int is_chart(const char *dir, const char *p)
{
	const char *base = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
	char path[4096];
	struct dirent *e;
	DIR *d;
	int hit = 0;

	if (chart_name(base) &&
	    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, base) < sizeof(path) &&
	    cmd_same_output(path, p))
		return 1;
	d = opendir(dir);
	if (!d)
		return 0;
	while (!hit && (e = readdir(d)) != NULL)
		hit = chart_name(e->d_name) &&
		      (size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < sizeof(path) &&
		      cmd_same_input(path, p);
	closedir(d);
	return hit;
}

/* Usage errors of the output paths: none is an input or another output. */
static int check_outputs(const struct opts *o)
{
	struct cmd_path *in = calloc((size_t)o->nfiles + 2, sizeof(*in));
	const struct cmd_path out[] = {
		{ "-o", o->out && strcmp(o->out, "-") ? o->out : NULL, 0 },
		{ "--html", o->html, 0 }, { "--svg", o->svg, CMD_OUT_DIR },
	};
	int i, ret;

	if (!in) {
		cmd_errorf(NAME, "out of memory");
		return EXIT_FAIL;
	}
	in[0] = (struct cmd_path){ "the trace", o->trace, 0 };
	in[1] = (struct cmd_path){ "the config", o->cfg.path, 0 };
	for (i = 0; i < o->nfiles; i++)
		in[i + 2] = (struct cmd_path){ "a result file", o->files[i], 0 };
	ret = cmd_check_outputs(NAME, usage, in, (size_t)o->nfiles + 2, out, 3, 0);
	/* a chart of --svg DIR in place of an input or of -o, --html */
	for (i = 0; ret == 0 && o->svg && i < o->nfiles + 4; i++) {
		const struct cmd_path *p = i < o->nfiles + 2 ? &in[i] : &out[i - o->nfiles - 2];

		if (p->path && is_chart(o->svg, p->path))
			ret = cmd_usage_error(NAME, usage,
					      "--svg '%s' would write a chart over %s '%s': choose another path",
					      o->svg, p->what, p->path);
	}
	free(in);
	return ret;
}

/*
 * Warn of the charts in DIR that this report did not write (WROTE, its N
 * files): an earlier report's, for charts this one has no data for.
 */
static void warn_stale_charts(const char *dir, const struct rlb_atomic_file *wrote,
			      size_t n)
{
	struct dirent *e;
	DIR *d = opendir(dir);
	size_t i, len = strlen(dir);
	int sep = len && dir[len - 1] != '/';

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (!chart_name(e->d_name))
			continue;
		for (i = 0; i < n; i++) {
			const char *b = strrchr(wrote[i].path, '/');

			if (!strcmp(b ? b + 1 : wrote[i].path, e->d_name))
				break;
		}
		if (i == n)
			fprintf(stderr, "relibra report: warning: %s%s%s is left from an earlier report (this one did not write it)\n",
				dir, sep ? "/" : "", e->d_name);
	}
	closedir(d);
}

/*
 * The report in its format to -o FILE or stdout, the charts to --svg DIR
 * and --html FILE.  The files were opened before the work (out, html);
 * they are renamed into place only once every one is complete, and
 * stdout gets the report last.
 */
static int write_outputs(const struct opts *o, const struct rlb_report *rep,
			 struct rlb_atomic_file *out, struct rlb_atomic_file *html)
{
	struct rlb_report_chart_opts co = { .layer = o->layer };
	struct rlb_atomic_file *svg = NULL;
	struct rlb_err err = {0};
	int to_file = o->out && strcmp(o->out, "-");
	size_t n = 0, i;
	int ret = 0;

	if (to_file)
		ret = rlb_atomic_sync_after(out, rlb_report_write(rep, o->format, out->fp, &err),
					    &err);
	if (ret == 0 && o->html)
		ret = rlb_atomic_sync_after(html, rlb_report_write_html(rep, &co, html->fp, &err),
					    &err);
	if (ret == 0 && o->svg)
		ret = rlb_report_write_svgs(rep, &co, o->svg, &svg, &n, &err);
	if (ret == 0 && o->svg)
		warn_stale_charts(o->svg, svg, n);
	if (ret == 0 && to_file)
		ret = rlb_atomic_commit(out, &err);
	if (ret == 0 && o->html)
		ret = rlb_atomic_commit(html, &err);
	for (i = 0; i < n; i++)
		if (ret == 0)
			ret = rlb_atomic_commit(&svg[i], &err);
		else
			rlb_atomic_abort(&svg[i]);
	free(svg);
	if (ret)
		goto fail;
	if (!to_file) {
		ret = rlb_report_write(rep, o->format, stdout, &err);
		if (ret != 0 && ret != RLB_EIO)
			goto fail;
		if (cmd_flush_stdout(NAME) != 0)
			return EXIT_FAIL;
	}
	if (o->svg)
		fprintf(stderr, "relibra report: %zu chart%s written to %s%s\n", n,
			n == 1 ? "" : "s", o->svg,
			*o->svg && o->svg[strlen(o->svg) - 1] == '/' ? "" : "/");
	if (o->html)
		fprintf(stderr, "relibra report: HTML report written to %s\n", o->html);
	return EXIT_OK;
fail:
	cmd_error(NAME, &err);
	return EXIT_FAIL;
}

int cmd_report(int argc, char **argv)
{
	struct rlb_report rep;
	struct rlb_err err = {0};
	struct rlb_atomic_file out = { .slot = -1 }, html = { .slot = -1 };
	struct opts o;
	size_t g, unswept = 0;
	int i, ret;

	rlb_report_init(&rep);
	ret = parse_args(argc, argv, &o);
	if (ret)
		goto done;
	ret = check_outputs(&o);
	if (ret)
		goto done;
	ret = EXIT_FAIL;
	/* the output files before the work, so that a bad path fails at once */
	if ((o.out && strcmp(o.out, "-") && rlb_atomic_open(&out, o.out, &err) != 0) ||
	    (o.html && rlb_atomic_open(&html, o.html, &err) != 0)) {
		cmd_error(NAME, &err);
		goto done;
	}
	if (o.trace && (ret = run_trace(&o, &rep)) != EXIT_OK)
		goto done;
	for (i = 0; i < o.nfiles; i++)
		if (rlb_report_add_file(&rep, o.files[i], &err) != 0) {
			cmd_error(NAME, &err);
			ret = EXIT_FAIL;
			goto done;
		}
	if (rlb_report_finish(&rep, &err) != 0) {
		cmd_error(NAME, &err);
		ret = EXIT_FAIL;
		goto done;
	}
	/* a sweep's groups are its values; result files join none of them */
	for (g = 0; g < rep.ngroups; g++)
		unswept += !rep.groups[g].sweep_value;
	if (rep.ngroups > 1 && !rep.sweep_key)
		cmd_errorf(NAME, "warning: the results come from %zu different configurations, traces, steps or packings; each group is compared on its own",
			   rep.ngroups);
	else if (rep.sweep_key && unswept)
		cmd_errorf(NAME, "warning: the result files are outside the sweep of %s: %zu more group%s, each compared on its own",
			   rep.sweep_key, unswept, cmd_s(unswept));
	ret = write_outputs(&o, &rep, &out, &html);
done:
	if (ret < 0)
		ret = EXIT_OK;	/* -h */
	rlb_atomic_abort(&out);
	rlb_atomic_abort(&html);
	rlb_report_release(&rep);
	cmd_config_release(&o.cfg);
	return ret;
}
