/*
 * calibrate.c - `relibra calibrate`: measure the expert GEMMs (and, with
 * several GPUs, the NCCL all-to-all) on the local GPUs, fit the cost
 * model's efficiency curve and link figures, and write them as a cluster
 * section that plan and report load.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calibrate.h"
#include "cmd.h"
#include "util.h"

#define NAME "calibrate"

static const char usage[] =
	"usage: relibra calibrate [-h] -c CONFIG [--set KEY=VALUE]... [--experts N] "
	"[--rows A:B] [--repeats N] [--device D] [--gpus N] [--name NAME] [-o FILE]\n"
	"\n"
	"  -c, --config CONFIG  YAML config: the expert shape and the cluster to update\n"
	"      --set KEY=VALUE  override one key\n"
	"      --experts N      experts per GPU in the grouped GEMM (default: the\n"
	"                       config's experts / ep_size, else 16)\n"
	"      --rows A:B       rows per expert, powers of two from A to B (64:16384)\n"
	"      --repeats N      timed runs per size; the median counts (10)\n"
	"      --device D       first GPU (0)\n"
	"      --gpus N         GPUs for the NVLink all-to-all (default: all from D;\n"
	"                       1: GEMMs only)\n"
	"      --name NAME      cluster name written (default: the config's)\n"
	"  -o, --output FILE    write the cluster section there (default: stdout)\n"
	"  -h, --help           show this help\n";

enum {
	OPT_EXPERTS = CMD_OPT_SET + 1, OPT_ROWS, OPT_REPEATS, OPT_DEVICE, OPT_GPUS,
	OPT_NAME,
};

struct opts {
	struct cmd_config_opts cfg;
	struct rlb_calib_opts m;
	int experts_given;
	const char *name, *out;
};

static int parse_u32(const char *s, uint64_t lo, uint64_t hi, uint32_t *out,
		     const char *what, struct rlb_err *err)
{
	uint64_t v;
	int ret = rlb_parse_u64(s, lo, hi, &v, what, err);

	if (ret == 0)
		*out = (uint32_t)v;
	return ret;
}

/* "A:B", both powers of two with 1 <= A <= B <= 1048576. */
static int parse_rows(const char *s, uint32_t *lo, uint32_t *hi,
		      struct rlb_err *err)
{
	const char *colon = strchr(s, ':');
	char a[32];
	int ret;

	if (!colon || colon == s || !colon[1] || strchr(colon + 1, ':') ||
	    (size_t)(colon - s) >= sizeof(a))
		return rlb_err_set(err, RLB_EPARSE, "--rows '%s': expected A:B", s);
	memcpy(a, s, (size_t)(colon - s));
	a[colon - s] = '\0';
	ret = parse_u32(a, 1, 1u << 20, lo, "--rows", err);
	if (ret == 0)
		ret = parse_u32(colon + 1, 1, 1u << 20, hi, "--rows", err);
	if (ret)
		return ret;
	if ((*lo & (*lo - 1)) || (*hi & (*hi - 1)) || *lo > *hi)
		return rlb_err_set(err, RLB_ERANGE,
				   "--rows '%s': powers of two, the first not above the second", s);
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		CMD_COMMON_LONGOPTS,
		{ "experts", required_argument, NULL, OPT_EXPERTS },
		{ "rows", required_argument, NULL, OPT_ROWS },
		{ "repeats", required_argument, NULL, OPT_REPEATS },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "gpus", required_argument, NULL, OPT_GPUS },
		{ "name", required_argument, NULL, OPT_NAME },
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	struct rlb_err err = { 0, "" };
	uint32_t dev = 0;
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hc:o:", longopts, NULL)) != -1) {
		int ret = 0;

		switch (c) {
		case OPT_EXPERTS:
			ret = parse_u32(optarg, 1, 4096, &o->m.experts, "--experts", &err);
			o->experts_given = 1;
			break;
		case OPT_ROWS:
			ret = parse_rows(optarg, &o->m.rows_min, &o->m.rows_max, &err);
			break;
		case OPT_REPEATS:
			ret = parse_u32(optarg, 1, 1000, &o->m.repeats, "--repeats", &err);
			break;
		case OPT_DEVICE:
			ret = parse_u32(optarg, 0, 1023, &dev, "--device", &err);
			o->m.device = (int)dev;
			break;
		case OPT_GPUS:
			ret = parse_u32(optarg, 1, 1024, &o->m.gpus, "--gpus", &err);
			break;
		case OPT_NAME:
			o->name = optarg;
			break;
		case 'o':
			o->out = optarg;
			break;
		default:
			ret = cmd_common_opt(NAME, usage, c, argv, &o->cfg, NULL);
			if (ret)
				return ret;
			break;
		}
		if (ret)
			return cmd_usage_error(NAME, usage, "%s", err.msg);
	}
	if (optind < argc)
		return cmd_usage_error(NAME, usage, "unexpected argument '%s'", argv[optind]);
	if (!o->cfg.path)
		return cmd_usage_error(NAME, usage, "-c CONFIG is required");
	if (o->name && !o->name[0])
		return cmd_usage_error(NAME, usage,
				       "--name: an empty name (leave --name out for the config's)");
	if (o->name && strlen(o->name) >= RLB_NAME_MAX)
		return cmd_usage_error(NAME, usage, "--name is longer than %d bytes",
				       RLB_NAME_MAX - 1);
	if (o->name && rlb_calibrate_check_name(NULL, o->name, &err))
		return cmd_usage_error(NAME, usage, "--name: %s", err.msg);
	return 0;
}

/* The measured figures as a table (stdout when the YAML goes to a file). */
static void print_table(const struct rlb_calib_result *r,
			const struct rlb_calibration *c, FILE *fp)
{
	double fpr = 6.0 * c->hidden * c->ffn;
	size_t i;

	fprintf(fp, "%s: expert %u x %u, bf16\n", r->device, c->hidden, c->ffn);
	fprintf(fp, "%12s %12s %10s %10s %10s\n", "rows/expert", "us/expert", "TFLOP/s",
		"efficiency", "fit");
	for (i = 0; i < r->ngemm; i++) {
		double m = r->gemm[i].x, t = r->gemm[i].seconds;
		double fit = c->gemm.eff_max * m / (m + c->gemm.half_rows);

		fprintf(fp, "%12.0f %12.2f %10.1f %10.3f %10.3f\n", m, t * 1e6,
			fpr * m / t / 1e12, fpr * m / (t * c->peak_flops), fit);
	}
	fprintf(fp, "gemm_eff_max %.4f, gemm_eff_half_rows %.1f (%zu points, rms %.1f%%)\n",
		c->gemm.eff_max, c->gemm.half_rows, c->gemm.used, 100 * c->gemm.rms_rel);
	if (!c->have_link) {
		fprintf(fp, "all-to-all: not measured (%u GPU)\n", r->gpus_used);
		return;
	}
	fprintf(fp, "%12s %12s %10s   (all-to-all, %u GPUs)\n", "bytes/GPU", "us", "GB/s",
		r->gpus_used);
	for (i = 0; i < r->na2a; i++)
		fprintf(fp, "%12.0f %12.1f %10.1f\n", r->a2a[i].x, r->a2a[i].seconds * 1e6,
			r->a2a[i].x / r->a2a[i].seconds / 1e9);
	fprintf(fp, "nvlink_gbps %.1f, nvlink_latency_us %.1f\n",
		c->link.bytes_per_s / 1e9, c->link.latency_s * 1e6);
}

int cmd_calibrate(int argc, char **argv)
{
	struct opts o;
	struct rlb_config cfg;
	struct rlb_calib_result *res = NULL;
	struct rlb_calibration cal;
	struct rlb_atomic_file af = { .slot = -1 };
	struct rlb_err err = { 0, "" };
	struct tm tm;
	time_t now = time(NULL);
	double params;
	int rc = EXIT_FAIL, ret;

	memset(&o, 0, sizeof(o));
	rlb_calib_opts_defaults(&o.m);
	ret = parse_args(argc, argv, &o);
	if (ret) {
		rc = ret < 0 ? EXIT_OK : ret;
		goto out;
	}
	if (o.out && !strcmp(o.out, "-"))
		o.out = NULL;
	{
		const struct cmd_path in[] = { { "the config", o.cfg.path, 0 } };
		const struct cmd_path outp[] = { { "-o", o.out, 0 } };

		ret = cmd_check_outputs(NAME, usage, in, 1, outp, 1, 0);
		if (ret) {
			rc = ret;
			goto out;
		}
	}
	if (cmd_config_load(NAME, &o.cfg, &cfg) < 0)
		goto out;
	if (cmd_gemm_mode(&o.m.gemm, &err) < 0) {
		cmd_error(NAME, &err);
		goto out;
	}
	/* the name and the output before the measurement, so that they fail at once */
	if (rlb_calibrate_check_name(&cfg, o.name, &err) < 0) {
		cmd_error(NAME, &err);
		fprintf(stderr, "hint: give the cluster a plain name with --name NAME\n");
		goto out;
	}
	if (rlb_atomic_open(&af, o.out ? o.out : "-", &err) < 0) {
		cmd_error(NAME, &err);
		goto out;
	}
	o.m.hidden = (uint32_t)rlb_model_expert_width(&cfg.model);	/* the experts' GEMM shape */
	o.m.ffn = (uint32_t)cfg.model.expert_ffn;
	if (!o.experts_given && cfg.parallel.ep_size > 0 &&
	    rlb_config_experts_per_gpu(&cfg) > 0)
		o.m.experts = (uint32_t)rlb_config_experts_per_gpu(&cfg);
	res = calloc(1, sizeof(*res));
	if (!res) {
		cmd_errorf(NAME, "out of memory");
		goto out;
	}
	ret = rlb_calibrate_measure(&o.m, res, &err);
	if (ret < 0) {
		cmd_error(NAME, &err);
		if (ret == RLB_EUNSUPPORTED)
			fprintf(stderr, "hint: run on a machine with an NVIDIA GPU and a relibra "
					"built with CUDA (relibra --version lists the backends)\n");
		goto out;
	}
	memset(&cal, 0, sizeof(cal));
	snprintf(cal.name, sizeof(cal.name), "%s", o.name ? o.name : "");
	snprintf(cal.device, sizeof(cal.device), "%s", res->device);
	if (gmtime_r(&now, &tm))
		strftime(cal.date, sizeof(cal.date), "%Y-%m-%d", &tm);
	cal.hidden = o.m.hidden;
	cal.ffn = o.m.ffn;
	cal.peak_flops = cfg.cluster.peak_tflops * 1e12;
	params = 3.0 * o.m.hidden * o.m.ffn;
	ret = rlb_calibrate_fit_gemm(res->gemm, res->ngemm, 2 * params, cal.peak_flops,
				     2 * params / (cfg.cluster.hbm_gbps * 1e9), &cal.gemm, &err);
	if (ret < 0) {
		rlb_err_prefix(&err, "GEMM fit");
		cmd_error(NAME, &err);
		goto out;
	}
	cal.have_gemm = 1;
	cal.gemm_pts = res->gemm;
	cal.ngemm = res->ngemm;
	if (res->na2a >= 2) {
		ret = rlb_calibrate_fit_link(res->a2a, res->na2a, &cal.link, &err);
		if (ret < 0) {
			rlb_err_prefix(&err, "all-to-all fit");
			cmd_error(NAME, &err);
			goto out;
		}
		cal.have_link = 1;
	}
	if (o.out)
		print_table(res, &cal, stdout);
	ret = rlb_calibrate_write_yaml(&cfg, &cal, af.fp, &err);
	ret = rlb_atomic_sync_after(&af, ret, &err);
	if (ret == 0)
		ret = rlb_atomic_commit(&af, &err);
	if (ret < 0) {
		if (o.out)
			cmd_error(NAME, &err);
		else
			cmd_stdout_error(NAME, &err);	/* said once */
		goto out;
	}
	rc = EXIT_OK;
out:
	rlb_atomic_abort(&af);
	free(res);
	cmd_config_release(&o.cfg);
	return rc;
}
