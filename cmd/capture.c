/*
 * capture.c - `relibra capture`: record routing into a trace (.rrt), from
 * the synthetic RL workload generator or from a rollout engine's dumps.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cmd.h"

static const char usage[] =
	"usage: relibra capture [-h] -c CONFIG [--set KEY=VALUE]... -o TRACE "
	"(--synthetic [--seed N] [--uniform] | --from FORMAT INPUT) [--sorted] "
	"[--gates] [--step N] [--group N] [--group-size N] [--keep-repeats] [--level N]\n"
	"\n"
	"  -c, --config CONFIG  YAML config: the model's shape (and the workload for --synthetic)\n"
	"      --set KEY=VALUE  override one key, e.g. workload.steps=2\n"
	"  -o, --output TRACE   the trace to write; nothing is left there on failure\n"
	"      --synthetic      generate the calibrated synthetic RL workload\n"
	"      --seed N         generator seed (default 1)\n"
	"      --uniform        draw every token's experts uniformly (a control trace)\n"
	"      --from FORMAT    import FORMAT: sglang, vllm, megatron or jsonl; INPUT is a\n"
	"                       file, a directory (vllm, megatron) or - for stdin\n"
	"                       (not vllm)\n"
	"      --sorted         store each token's ids sorted (usually smaller; drops the engine's order)\n"
	"      --gates          keep gate weights (sglang, jsonl: every record must have them)\n"
	"      --step N         step id of every record (default: the input's, else 0)\n"
	"      --group N        prompt group of every record (default: the input's)\n"
	"      --group-size N   number groups in order, N samples each, the first\n"
	"                       one --group's (default 0)\n"
	"      --keep-repeats   megatron: keep records that repeat a written sequence's\n"
	"                       routing (default: dropped as activation recompute)\n"
	"      --level N        zstd compression level, 1-22 (default 3)\n"
	"  -h, --help           show this help\n";

#define NAME "capture"

enum {
	OPT_SYNTH = CMD_OPT_SET + 1, OPT_SEED, OPT_UNIFORM, OPT_FROM, OPT_SORTED,
	OPT_GATES, OPT_STEP, OPT_GROUP, OPT_GROUP_SIZE, OPT_KEEP_REPEATS, OPT_LEVEL,
};

struct opts {
	struct cmd_config_opts cfg;
	const char *out, *from, *input;
	int synth, uniform, sorted, have_seed;
	uint64_t seed;
	struct rlb_import_opts io;
	int level;
};

static int parse_num(const char *opt, const char *s, int64_t min, int64_t max,
		     int64_t *out)
{
	struct rlb_err err = { 0, "" };

	if (rlb_parse_i64(s, min, max, out, opt, &err) != 0)
		return cmd_usage_error(NAME, usage, "%s", err.msg);
	return 0;
}

/* The options that go with one source only, checked against the source. */
static int check_source(const struct opts *o)
{
	const struct rlb_import_opts *io = &o->io;

	if (o->synth == !!o->from)
		return cmd_usage_error(NAME, usage, o->synth ?
				       "--synthetic and --from are exclusive" :
				       "give --synthetic or --from FORMAT INPUT");
	if (o->from && !o->input)
		return cmd_usage_error(NAME, usage,
				       "--from %s needs an INPUT (a path, or - for stdin)",
				       o->from);
	if (o->from && (o->have_seed || o->uniform))
		return cmd_usage_error(NAME, usage, "%s applies to --synthetic only",
				       o->have_seed ? "--seed" : "--uniform");
	if (o->synth && (io->step >= 0 || io->group >= 0 || io->group_size > 0 || io->gates))
		return cmd_usage_error(NAME, usage, "%s applies to --from only",
				       io->step >= 0 ? "--step" : io->group >= 0 ? "--group" :
				       io->group_size > 0 ? "--group-size" : "--gates");
	return 0;
}

/* 0; -1 after -h; or EXIT_USAGE after a usage error. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		CMD_COMMON_LONGOPTS,
		{ "output", required_argument, NULL, 'o' },
		{ "synthetic", no_argument, NULL, OPT_SYNTH },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "uniform", no_argument, NULL, OPT_UNIFORM },
		{ "from", required_argument, NULL, OPT_FROM },
		{ "sorted", no_argument, NULL, OPT_SORTED },
		{ "gates", no_argument, NULL, OPT_GATES },
		{ "step", required_argument, NULL, OPT_STEP },
		{ "group", required_argument, NULL, OPT_GROUP },
		{ "group-size", required_argument, NULL, OPT_GROUP_SIZE },
		{ "keep-repeats", no_argument, NULL, OPT_KEEP_REPEATS },
		{ "level", required_argument, NULL, OPT_LEVEL },
		{ NULL, 0, NULL, 0 },
	};
	struct rlb_import_opts *io = &o->io;
	struct rlb_err err = { 0, "" };
	int64_t v;
	int c, ret;

	memset(o, 0, sizeof(*o));
	o->seed = 1;
	o->level = 3;
	io->format = RLB_IMPORT_JSONL;
	io->step = -1;
	io->group = -1;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hc:o:", longopts, NULL)) != -1) {
		ret = 0;
		switch (c) {
		case 'o':
			o->out = optarg;
			break;
		case OPT_SYNTH:
			o->synth = 1;
			break;
		case OPT_SEED:
			if (rlb_parse_u64(optarg, 0, UINT64_MAX, &o->seed, "--seed", &err) != 0)
				return cmd_usage_error(NAME, usage, "%s", err.msg);
			o->have_seed = 1;
			break;
		case OPT_UNIFORM:
			o->uniform = 1;
			break;
		case OPT_FROM:
			o->from = optarg;
			break;
		case OPT_SORTED:
			o->sorted = 1;
			break;
		case OPT_GATES:
			io->gates = 1;
			break;
		case OPT_STEP:
			ret = parse_num("--step", optarg, 0, UINT32_MAX, &io->step);
			break;
		case OPT_GROUP:
			ret = parse_num("--group", optarg, 0, UINT32_MAX, &io->group);
			break;
		case OPT_GROUP_SIZE:
			ret = parse_num("--group-size", optarg, 1, UINT32_MAX, &v);
			io->group_size = (uint32_t)v;
			break;
		case OPT_KEEP_REPEATS:
			io->keep_repeats = 1;
			break;
		case OPT_LEVEL:
			ret = parse_num("--level", optarg, 1, 22, &v);
			o->level = (int)v;
			break;
		default:
			ret = cmd_common_opt(NAME, usage, c, argv, &o->cfg, NULL);
			break;
		}
		if (ret)
			return ret;
	}
	if (o->from && optind < argc)
		o->input = argv[optind++];
	if (optind < argc)
		return cmd_usage_error(NAME, usage, "unexpected argument '%s'", argv[optind]);
	if (!o->cfg.path)
		return cmd_usage_error(NAME, usage, "-c CONFIG is required");
	if (!o->out)
		return cmd_usage_error(NAME, usage, "missing -o TRACE");
	ret = check_source(o);
	if (ret)
		return ret;
	if (o->from && rlb_import_format_from_name(o->from, &io->format, &err) != 0)
		return cmd_usage_error(NAME, usage, "--from: %s", err.msg);
	if (o->from && io->format == RLB_IMPORT_VLLM && !strcmp(o->input, "-"))
		return cmd_usage_error(NAME, usage, "--from vllm reads a .npy file or a directory, "
				       "not standard input");
	if (io->keep_repeats && (o->synth || io->format != RLB_IMPORT_MEGATRON))
		return cmd_usage_error(NAME, usage, "--keep-repeats applies to --from megatron only");
	if (io->gates && (io->format == RLB_IMPORT_VLLM || io->format == RLB_IMPORT_MEGATRON))
		return cmd_usage_error(NAME, usage, "--gates: %s inputs carry no gate weights "
				       "(sglang and jsonl do)", o->from);
	return 0;
}

/*
 * An INPUT directory is read whole, every *.jsonl (megatron) or *.npy
 * (vllm) file in it: -o there under such a name would be written over an
 * input, or read as one by the next capture.  EXIT_USAGE if so.
 */
static int check_out_not_read(const struct opts *o)
{
	const char *suffix = o->io.format == RLB_IMPORT_MEGATRON ? ".jsonl" : ".npy";
	const char *base = strrchr(o->out, '/');
	size_t blen, slen = strlen(suffix), dlen;
	char dir[RLB_PATH_MAX + 1];
	struct stat si, sd;

	if (o->synth || (o->io.format != RLB_IMPORT_MEGATRON &&
			 o->io.format != RLB_IMPORT_VLLM) ||
	    stat(o->input, &si) != 0 || !S_ISDIR(si.st_mode))
		return 0;
	base = base ? base + 1 : o->out;
	blen = strlen(base);
	if (blen <= slen || strcmp(base + blen - slen, suffix) != 0 || base[0] == '.')
		return 0;
	dlen = (size_t)(base - o->out);
	if (dlen > RLB_PATH_MAX)
		return 0;	/* no such directory: opening -o will say so */
	if (dlen == 0) {
		strcpy(dir, ".");
	} else {
		if (dlen > 1)
			dlen--;		/* "/x" is in "/" */
		memcpy(dir, o->out, dlen);
		dir[dlen] = '\0';
	}
	if (stat(dir, &sd) != 0 || sd.st_dev != si.st_dev || sd.st_ino != si.st_ino)
		return 0;
	return cmd_usage_error(NAME, usage, "-o '%s' is in the input directory '%s', whose "
			       "*%s files are all read: choose another path",
			       o->out, o->input, suffix);
}

/* Generate or import into the writer's trace at o->out; closes w. */
static int fill_trace(const struct opts *o, const struct rlb_config *cfg,
		      struct rlb_trace_writer *w, struct rlb_err *err)
{
	int ret;

	if (o->synth)
		ret = rlb_synth_generate(cfg, o->seed, o->uniform, w, cmd_progress, NAME, err);
	else
		ret = rlb_import(&o->io, o->input, cfg, w, cmd_progress, NAME, err);
	if (ret != 0) {
		rlb_trace_writer_abort(w);
		return ret;
	}
	return rlb_trace_writer_close(w, err);
}

int cmd_capture(int argc, char **argv)
{
	struct rlb_import_stats stats = { .records = 0 };
	struct rlb_trace_writer_opts wo;
	struct rlb_trace_writer *w = NULL;
	struct rlb_trace_header h;
	struct rlb_trace_info info;
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	struct opts o;
	int rc;

	rc = parse_args(argc, argv, &o);
	if (rc) {
		rc = rc < 0 ? EXIT_OK : rc;
		goto done;
	}
	o.io.stats = &stats;
	rc = EXIT_FAIL;
	if (strlen(o.out) > RLB_PATH_MAX) {
		cmd_errorf(NAME, "output path is too long");
		goto done;
	}
	{
		/* the trace is verified after writing: a file, not stdout */
		const int is_stdin = o.input && !strcmp(o.input, "-");
		const struct cmd_path in[] = {
			{ is_stdin ? "standard input" : "the input",
			  o.input ? cmd_input_path(o.input) : NULL, 0 },
			{ "the config", o.cfg.path, 0 },
		};
		const struct cmd_path outp[] = { { "-o", o.out, CMD_OUT_REGULAR } };

		rc = cmd_check_outputs(NAME, usage, in, 2, outp, 1, 0);
		if (!rc)
			rc = check_out_not_read(&o);
		/* a pipe read for the config has nothing left for the import */
		if (!rc && in[0].path && o.cfg.path && cmd_same_input(in[0].path, o.cfg.path))
			rc = cmd_usage_error(NAME, usage, "the config '%s' is also %s: "
					     "give each its own file", o.cfg.path,
					     is_stdin ? "standard input" : "the input");
		if (rc)
			goto done;
		rc = EXIT_FAIL;
	}
	if (cmd_config_load(NAME, &o.cfg, &cfg) < 0)
		goto done;

	rlb_trace_header_from_config(&h, &cfg);
	if (o.sorted)
		h.flags |= RLB_TRACE_F_SORTED;
	if (o.io.gates)
		h.flags |= RLB_TRACE_F_GATES;
	snprintf(h.source, sizeof(h.source), "%s", o.synth ? "synthetic" : o.from);
	h.seed = o.synth ? o.seed : 0;
	memset(&wo, 0, sizeof(wo));
	wo.level = o.level;
	if (rlb_trace_writer_open(&w, o.out, &h, &wo, &err) != 0 ||
	    fill_trace(&o, &cfg, w, &err) != 0) {
		cmd_error(NAME, &err);
		goto done;
	}
	cmd_progress_done();
	if (rlb_trace_verify_threads(o.out, rlb_pool_threads_for(0), &info, &err) != 0) {
		unlink(o.out);
		rlb_err_prefix(&err, "the new trace '%s' does not verify", o.out);
		cmd_error(NAME, &err);
		goto done;
	}
	printf("%s: %" PRIu64 " step%s, %" PRIu64 " sequence%s, %" PRIu64 " token%s, %"
	       PRIu64 " bytes\n", o.out, info.steps, cmd_s(info.steps), info.sequences,
	       cmd_s(info.sequences), info.tokens, cmd_s(info.tokens), info.file_bytes);
	if (stats.recomputed)
		cmd_errorf(NAME, "note: %" PRIu64 " record%s of '%s' repeated the routing of "
			   "a sequence already written in its step and %s dropped as "
			   "activation recompute (--keep-repeats keeps them)",
			   stats.recomputed, cmd_s(stats.recomputed),
			   strcmp(o.input, "-") ? o.input : "<stdin>",
			   stats.recomputed == 1 ? "was" : "were");
	if (stats.unfinished)
		cmd_errorf(NAME, "note: %" PRIu64 " streamed request%s of '%s' never sent %s "
			   "last chunk, which carries the routing, and %s skipped",
			   stats.unfinished, cmd_s(stats.unfinished),
			   strcmp(o.input, "-") ? o.input : "<stdin>",
			   stats.unfinished == 1 ? "its" : "their",
			   stats.unfinished == 1 ? "was" : "were");
	rc = EXIT_OK;
done:
	cmd_progress_done();
	cmd_config_release(&o.cfg);
	return rc;
}
