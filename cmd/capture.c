/*
 * capture.c - `relibra capture`: record routing into a trace (.rrt), from
 * the synthetic RL workload generator or from a rollout engine's dumps.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

static int parse_num(const char *opt, const char *s, int64_t min, int64_t max,
		     int64_t *out)
{
	struct rlb_err err = { 0, "" };

	if (rlb_parse_i64(s, min, max, out, opt, &err) != 0) {
		cmd_usage_error("capture", usage, "%s", err.msg);
		return -1;
	}
	return 0;
}

int cmd_capture(int argc, char **argv)
{
	enum {
		OPT_SYNTH = CMD_OPT_SET + 1, OPT_SEED, OPT_UNIFORM, OPT_FROM, OPT_SORTED,
		OPT_GATES, OPT_STEP, OPT_GROUP, OPT_GROUP_SIZE, OPT_KEEP_REPEATS,
		OPT_LEVEL,
	};
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
	struct cmd_config_opts o = { NULL, NULL, 0 };
	struct rlb_import_stats stats = { 0, 0, 0, 0 };
	struct rlb_import_opts io = { RLB_IMPORT_JSONL, -1, -1, 0, 0, 0, &stats };
	struct rlb_trace_writer_opts wo;
	struct rlb_trace_writer *w = NULL;
	struct rlb_trace_header h;
	struct rlb_trace_info info;
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	const char *out = NULL, *from = NULL, *input = NULL;
	int c, ret, synth = 0, uniform = 0, sorted = 0, have_seed = 0, rc = EXIT_FAIL;
	int64_t v, seed = 1;

	memset(&wo, 0, sizeof(wo));
	wo.level = 3;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hc:o:", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case OPT_SYNTH:
			synth = 1;
			break;
		case OPT_SEED:
			/* Seeds are unsigned 64-bit; parse through the u64 helper. */
			{
				uint64_t u;

				if (rlb_parse_u64(optarg, 0, UINT64_MAX, &u, "--seed", &err) != 0) {
					rc = cmd_usage_error("capture", usage, "%s", err.msg);
					goto out;
				}
				seed = (int64_t)u;
			}
			have_seed = 1;
			break;
		case OPT_UNIFORM:
			uniform = 1;
			break;
		case OPT_FROM:
			from = optarg;
			break;
		case OPT_SORTED:
			sorted = 1;
			break;
		case OPT_GATES:
			io.gates = 1;
			break;
		case OPT_STEP:
			if (parse_num("--step", optarg, 0, UINT32_MAX, &io.step) < 0) {
				rc = EXIT_USAGE;
				goto out;
			}
			break;
		case OPT_GROUP:
			if (parse_num("--group", optarg, 0, UINT32_MAX, &io.group) < 0) {
				rc = EXIT_USAGE;
				goto out;
			}
			break;
		case OPT_GROUP_SIZE:
			if (parse_num("--group-size", optarg, 1, UINT32_MAX, &v) < 0) {
				rc = EXIT_USAGE;
				goto out;
			}
			io.group_size = (uint32_t)v;
			break;
		case OPT_KEEP_REPEATS:
			io.keep_repeats = 1;
			break;
		case OPT_LEVEL:
			if (parse_num("--level", optarg, 1, 22, &v) < 0) {
				rc = EXIT_USAGE;
				goto out;
			}
			wo.level = (int)v;
			break;
		default:
			ret = cmd_common_opt("capture", usage, c, argv, &o, NULL);
			if (ret) {
				rc = ret < 0 ? EXIT_OK : ret;
				goto out;
			}
			break;
		}
	}
	if (from && optind < argc)
		input = argv[optind++];
	if (optind < argc) {
		rc = cmd_usage_error("capture", usage, "unexpected argument '%s'",
				     argv[optind]);
		goto out;
	}
	if (!o.path) {
		rc = cmd_usage_error("capture", usage, "-c CONFIG is required");
		goto out;
	}
	if (!out) {
		rc = cmd_usage_error("capture", usage, "missing -o TRACE");
		goto out;
	}
	if (synth == !!from) {
		rc = cmd_usage_error("capture", usage, synth ?
				     "--synthetic and --from are exclusive" :
				     "give --synthetic or --from FORMAT INPUT");
		goto out;
	}
	if (from && !input) {
		rc = cmd_usage_error("capture", usage, "--from %s needs an INPUT (a path, or - for stdin)",
				     from);
		goto out;
	}
	if (from && (have_seed || uniform)) {
		rc = cmd_usage_error("capture", usage, "%s applies to --synthetic only",
				     have_seed ? "--seed" : "--uniform");
		goto out;
	}
	if (synth && (io.step >= 0 || io.group >= 0 || io.group_size > 0 || io.gates)) {
		rc = cmd_usage_error("capture", usage, "%s applies to --from only",
				     io.step >= 0 ? "--step" : io.group >= 0 ? "--group" :
				     io.group_size > 0 ? "--group-size" : "--gates");
		goto out;
	}
	if (from && rlb_import_format_from_name(from, &io.format, &err) != 0) {
		rc = cmd_usage_error("capture", usage, "--from: %s", err.msg);
		goto out;
	}
	if (io.keep_repeats && (synth || io.format != RLB_IMPORT_MEGATRON)) {
		rc = cmd_usage_error("capture", usage, "--keep-repeats applies to --from megatron only");
		goto out;
	}
	if (strlen(out) > RLB_PATH_MAX) {
		cmd_errorf("capture", "output path is too long");
		goto out;
	}
	{
		/* the trace is verified after writing: a file, not stdout */
		const struct cmd_path in[] = {
			{ "the input", input && strcmp(input, "-") ? input : NULL, 0 },
			{ "the config", o.path, 0 },
		};
		const struct cmd_path outp[] = { { "-o", out, CMD_OUT_REGULAR } };

		rc = cmd_check_outputs("capture", usage, in, 2, outp, 1, 0);
		if (rc)
			goto out;
		rc = EXIT_FAIL;
	}
	if (cmd_config_load("capture", &o, &cfg) < 0)
		goto out;

	rlb_trace_header_from_config(&h, &cfg);
	if (sorted)
		h.flags |= RLB_TRACE_F_SORTED;
	if (io.gates)
		h.flags |= RLB_TRACE_F_GATES;
	if (synth) {
		snprintf(h.source, sizeof(h.source), "synthetic");
		h.seed = (uint64_t)seed;
	} else {
		snprintf(h.source, sizeof(h.source), "%s", from);
		h.seed = 0;
	}
	if (rlb_trace_writer_open(&w, out, &h, &wo, &err) != 0) {
		cmd_error("capture", &err);
		goto out;
	}
	if (synth)
		c = rlb_synth_generate(&cfg, (uint64_t)seed, uniform, w, cmd_progress,
				       "capture", &err);
	else
		c = rlb_import(&io, input, &cfg, w, cmd_progress, "capture", &err);
	if (c != 0) {
		rlb_trace_writer_abort(w);
		w = NULL;
		cmd_error("capture", &err);
		goto out;
	}
	c = rlb_trace_writer_close(w, &err);
	w = NULL;
	if (c != 0) {
		cmd_error("capture", &err);
		goto out;
	}
	cmd_progress_done();
	if (rlb_trace_verify_threads(out, rlb_pool_threads_for(0), &info, &err) != 0) {
		unlink(out);
		rlb_err_prefix(&err, "the new trace '%s' does not verify", out);
		cmd_error("capture", &err);
		goto out;
	}
	printf("%s: %" PRIu64 " step%s, %" PRIu64 " sequence%s, %" PRIu64 " token%s, %"
	       PRIu64 " bytes\n", out, info.steps, cmd_s(info.steps), info.sequences,
	       cmd_s(info.sequences), info.tokens, cmd_s(info.tokens), info.file_bytes);
	if (stats.recomputed)
		cmd_errorf("capture", "note: %" PRIu64 " record%s of '%s' repeated the routing of "
			   "a sequence already written in its step and %s dropped as "
			   "activation recompute (--keep-repeats keeps them)",
			   stats.recomputed, cmd_s(stats.recomputed), input,
			   stats.recomputed == 1 ? "was" : "were");
	rc = EXIT_OK;
out:
	if (w)
		rlb_trace_writer_abort(w);
	cmd_progress_done();
	cmd_config_release(&o);
	return rc;
}
