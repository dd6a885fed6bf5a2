/*
 * test_calibrate.c - unit tests of lib/calibrate: the GEMM efficiency and
 * link fits on synthetic measurements with known answers, the cluster
 * YAML fragment loaded back as a config and as a cluster preset, bad
 * inputs, and the measurement's error without CUDA.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calibrate.h"
#include "config.h"
#include "suites.h"

#define HIDDEN 2048
#define FFN 768
#define PEAK 989e12

static double fpr(void)
{
	return 6.0 * HIDDEN * FFN;
}

/* The cost model's time of m rows under eta(m) = a m / (m + h), times (1 + noise). */
static double model_s(double m, double a, double h, double noise)
{
	return fpr() * (m + h) / (PEAK * a) * (1 + noise);
}

/* Rows 64..16384 with a deterministic +-1% ripple; *n out. */
static void synth(struct rlb_calib_point *p, size_t *n, double a, double h,
		  double ripple)
{
	double m;
	size_t i = 0;

	for (m = 64; m <= 16384; m *= 2, i++) {
		p[i].x = m;
		p[i].seconds = model_s(m, a, h, (i % 2 ? ripple : -ripple));
	}
	*n = i;
}

START_TEST(fit_recovers_curve)
{
	struct rlb_calib_point p[RLB_CALIB_MAX_POINTS];
	struct rlb_gemm_fit f;
	struct rlb_err err;
	size_t n;

	synth(p, &n, 0.70, 256, 0);
	ck_assert_int_eq(n, 9);
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, n, fpr(), PEAK, 0, &f, &err), 0);
	ck_assert_double_eq_tol(f.eff_max, 0.70, 1e-9);
	ck_assert_double_eq_tol(f.half_rows, 256, 1e-6);
	ck_assert_double_lt(f.rms_rel, 1e-9);
	ck_assert_int_eq(f.used, 9);

	/* Measurement noise of 1%: the figures stay within a few percent. */
	synth(p, &n, 0.62, 180, 0.01);
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, n, fpr(), PEAK, 0, &f, &err), 0);
	ck_assert_double_eq_tol(f.eff_max, 0.62, 0.62 * 0.02);
	ck_assert_double_eq_tol(f.half_rows, 180, 180 * 0.05);
	ck_assert_double_gt(f.rms_rel, 0.005);
	ck_assert_double_lt(f.rms_rel, 0.02);
}
END_TEST

START_TEST(fit_skips_memory_bound)
{
	struct rlb_calib_point p[RLB_CALIB_MAX_POINTS];
	struct rlb_gemm_fit f;
	struct rlb_err err;
	double floor_s = model_s(512, 0.70, 256, 0);
	size_t n, i;

	/* Below 512 rows the weights' streaming time bounds the GEMM. */
	synth(p, &n, 0.70, 256, 0);
	for (i = 0; i < n; i++)
		if (p[i].seconds < floor_s)
			p[i].seconds = floor_s;
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, n, fpr(), PEAK, floor_s, &f, &err), 0);
	ck_assert_int_eq(f.used, 5);	/* 1024 .. 16384 */
	ck_assert_double_eq_tol(f.eff_max, 0.70, 1e-9);
	ck_assert_double_eq_tol(f.half_rows, 256, 1e-6);
	/* Without the floor the flat points bend the line. */
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, n, fpr(), PEAK, 0, &f, &err), 0);
	ck_assert_int_eq(f.used, 9);
	ck_assert_double_gt(fabs(f.half_rows - 256), 10);
}
END_TEST

START_TEST(fit_origin)
{
	struct rlb_calib_point p[3] = { { 100, 0 }, { 1000, 0 }, { 10000, 0 } };
	struct rlb_gemm_fit f;
	struct rlb_err err;
	size_t i;

	/* Time exactly proportional to rows, minus a little: negative intercept. */
	for (i = 0; i < 3; i++)
		p[i].seconds = fpr() * p[i].x / (PEAK * 0.5) - 2e-8;
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, 3, fpr(), PEAK, 0, &f, &err), 0);
	ck_assert_double_eq(f.half_rows, 0);
	ck_assert_double_eq_tol(f.eff_max, 0.5, 0.01);
}
END_TEST

START_TEST(fit_errors)
{
	struct rlb_calib_point p[RLB_CALIB_MAX_POINTS];
	struct rlb_gemm_fit f;
	struct rlb_link_fit lf;
	struct rlb_err err;
	size_t n;

	synth(p, &n, 0.70, 256, 0);
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, 1, fpr(), PEAK, 0, &f, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "1 of 1 points above the memory-bound floor; the fit needs 2");
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, n, fpr(), PEAK, 1.0, &f, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "0 of 9 points above the memory-bound floor; the fit needs 2");
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, n, 0, PEAK, 0, &f, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "flops per row and peak must be positive");
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, n, fpr(), NAN, 0, &f, &err), RLB_EINVAL);
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, RLB_CALIB_MAX_POINTS + 1, fpr(), PEAK, 0,
						&f, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "too many points (33, at most 32)");

	p[3].seconds = -1;
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, n, fpr(), PEAK, 0, &f, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "point 3 (512, -1 s) is not positive and finite");
	p[3].seconds = INFINITY;
	ck_assert_int_eq(rlb_calibrate_fit_link(p, n, &lf, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "point 3 (512, inf s) is not positive and finite");

	/* Faster than the configured peak allows. */
	synth(p, &n, 0.70, 256, 0);
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, n, fpr(), PEAK / 2, 0, &f, &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "measured GEMM efficiency 1.400 exceeds 1 at the configured peak 494.5 TFLOP/s: is cluster.peak_tflops right");

	/* Times that shrink as the rows grow. */
	p[0].x = 100;
	p[0].seconds = 2e-3;
	p[1].x = 200;
	p[1].seconds = 1e-3;
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, 2, fpr(), PEAK, 0, &f, &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "measured GEMM times do not grow with the rows");
	ck_assert_int_eq(rlb_calibrate_fit_link(p, 2, &lf, &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "measured transfer times do not grow with the size");
	ck_assert_int_eq(rlb_calibrate_fit_link(p, 1, &lf, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "1 points; the fit needs 2");
	/* All at one size: no slope to fit. */
	p[1].x = 100;
	ck_assert_int_eq(rlb_calibrate_fit_gemm(p, 2, fpr(), PEAK, 0, &f, &err), RLB_ERANGE);
}
END_TEST

START_TEST(fit_link)
{
	struct rlb_calib_point p[RLB_CALIB_MAX_POINTS];
	struct rlb_link_fit f;
	struct rlb_err err;
	double b;
	size_t n = 0;

	for (b = 4096; b <= 256.0 * 1024 * 1024; b *= 4, n++) {
		p[n].x = b;
		p[n].seconds = 20e-6 + b / 340e9;
	}
	ck_assert_int_eq(rlb_calibrate_fit_link(p, n, &f, &err), 0);
	ck_assert_double_eq_tol(f.latency_s, 20e-6, 1e-12);
	ck_assert_double_eq_tol(f.bytes_per_s, 340e9, 1e3);
	ck_assert_int_eq(f.used, n);
}
END_TEST

/* ---- the YAML fragment ---- */

static char *tmp_path(const char *name)
{
	size_t len = strlen(rlb_test_tmpdir()) + strlen(name) + 2;
	char *p = malloc(len);

	ck_assert_ptr_nonnull(p);
	snprintf(p, len, "%s/%s", rlb_test_tmpdir(), name);
	return p;
}

static void write_fragment(const char *path, const struct rlb_config *cfg,
			   const struct rlb_calibration *c)
{
	struct rlb_err err;
	FILE *fp = fopen(path, "w");

	ck_assert_ptr_nonnull(fp);
	ck_assert_int_eq(rlb_calibrate_write_yaml(cfg, c, fp, &err), 0);
	ck_assert_int_eq(fclose(fp), 0);
}

static void calibration(struct rlb_calibration *c, struct rlb_calib_point *p,
			size_t *n)
{
	memset(c, 0, sizeof(*c));
	synth(p, n, 0.66, 200, 0);
	snprintf(c->name, sizeof(c->name), "h200-measured");
	snprintf(c->device, sizeof(c->device), "NVIDIA H200\n\xc3\xa9");
	snprintf(c->date, sizeof(c->date), "2025-01-31");
	c->hidden = HIDDEN;
	c->ffn = FFN;
	c->have_gemm = 1;
	c->gemm.eff_max = 0.6612;
	c->gemm.half_rows = 201.25;
	c->gemm.used = *n;
	c->gemm_pts = p;
	c->ngemm = *n;
	c->peak_flops = PEAK;
	c->have_link = 1;
	c->link.latency_s = 18.5e-6;
	c->link.bytes_per_s = 352.25e9;
	c->link.used = 6;
}

/* The fragment holds a cluster section only: a model comes from --set. */
static const char *const model_sets[] = {
	"model.experts=128", "model.topk=8", "model.hidden=2048",
	"model.expert_ffn=768", "model.moe_layers=48",
};

START_TEST(yaml_loads_back)
{
	struct rlb_config cfg, back;
	struct rlb_calibration c;
	struct rlb_calib_point p[RLB_CALIB_MAX_POINTS];
	struct rlb_err err;
	char *path = tmp_path("calib.yaml");
	size_t n;

	rlb_config_defaults(&cfg);
	cfg.cluster.rdma_gbps = 50;
	cfg.cluster.hbm_gbps = 3352.123456789012;	/* more than 10 digits */
	calibration(&c, p, &n);
	write_fragment(path, &cfg, &c);
	ck_assert_msg(rlb_config_load(&back, path, model_sets, 5, &err) == 0, "%s", err.msg);
	ck_assert_str_eq(back.cluster.name, "h200-measured");
	ck_assert_double_eq_tol(back.cluster.gemm_eff_max, 0.6612, 1e-12);
	ck_assert_double_eq_tol(back.cluster.gemm_eff_half_rows, 201.25, 1e-9);
	ck_assert_double_eq_tol(back.cluster.nvlink_gbps, 352.25, 1e-9);
	ck_assert_double_eq_tol(back.cluster.nvlink_latency_us, 18.5, 1e-9);
	/* Keys not measured keep the config's values. */
	ck_assert_double_eq(back.cluster.rdma_gbps, 50);
	ck_assert_double_eq(back.cluster.hbm_gbps, cfg.cluster.hbm_gbps);
	ck_assert_double_eq(back.cluster.peak_tflops, cfg.cluster.peak_tflops);
	ck_assert_int_eq(back.cluster.nodes, cfg.cluster.nodes);
	ck_assert_int_eq(back.cluster.gpus_per_node, cfg.cluster.gpus_per_node);

	/* Not measured: the config's curve and link are written unchanged. */
	c.have_gemm = 0;
	c.have_link = 0;
	c.name[0] = '\0';
	write_fragment(path, &cfg, &c);
	ck_assert_msg(rlb_config_load(&back, path, model_sets, 5, &err) == 0, "%s", err.msg);
	ck_assert_str_eq(back.cluster.name, "calibrated");	/* the defaults have none */
	ck_assert_double_eq(back.cluster.gemm_eff_max, cfg.cluster.gemm_eff_max);
	ck_assert_double_eq(back.cluster.gemm_eff_half_rows, cfg.cluster.gemm_eff_half_rows);
	ck_assert_double_eq(back.cluster.nvlink_gbps, cfg.cluster.nvlink_gbps);
	/* exactly, not rounded as a fitted value is */
	cfg.cluster.gemm_eff_max = 0.712439;
	cfg.cluster.nvlink_latency_us = 20.123456;
	write_fragment(path, &cfg, &c);
	ck_assert_msg(rlb_config_load(&back, path, model_sets, 5, &err) == 0, "%s", err.msg);
	ck_assert_double_eq(back.cluster.gemm_eff_max, cfg.cluster.gemm_eff_max);
	ck_assert_double_eq(back.cluster.nvlink_latency_us, cfg.cluster.nvlink_latency_us);
	free(path);
}
END_TEST

/*
 * The curve is timed on the SwiGLU expert; for an ungated model, whose
 * two matrices have the same shapes, the fragment says the curve holds.
 */
START_TEST(yaml_ungated_model)
{
	const char *line = "# The model's experts are ungated (up, down): GEMMs of the same shapes,\n";
	struct rlb_config cfg;
	struct rlb_calibration c;
	struct rlb_calib_point p[RLB_CALIB_MAX_POINTS];
	struct rlb_err err;
	char *text = NULL;
	size_t len = 0, n;
	FILE *fp;
	int gated;

	calibration(&c, p, &n);
	for (gated = 0; gated <= 1; gated++) {
		rlb_config_defaults(&cfg);
		cfg.model.gated_ffn = gated;
		fp = open_memstream(&text, &len);
		ck_assert_ptr_nonnull(fp);
		ck_assert_int_eq(rlb_calibrate_write_yaml(&cfg, &c, fp, &err), 0);
		ck_assert_int_eq(fclose(fp), 0);
		ck_assert_msg((strstr(text, line) != NULL) == !gated, "gated %d:\n%s", gated, text);
		free(text);
		text = NULL;
	}
}
END_TEST

START_TEST(yaml_as_preset)
{
	struct rlb_config cfg, back;
	struct rlb_calibration c;
	struct rlb_calib_point p[RLB_CALIB_MAX_POINTS];
	struct rlb_err err;
	char *dir = tmp_path("clusters"), *preset = tmp_path("clusters/h200-measured.yaml");
	char *conf = tmp_path("with-preset.yaml");
	FILE *fp;
	size_t n;

	rlb_config_defaults(&cfg);
	calibration(&c, p, &n);
	ck_assert(mkdir(dir, 0777) == 0 || access(dir, F_OK) == 0);
	write_fragment(preset, &cfg, &c);
	fp = fopen(conf, "w");
	ck_assert_ptr_nonnull(fp);
	fprintf(fp, "model:\n  preset: qwen3-30b-a3b\ncluster:\n  preset: h200-measured\n"
		    "  nodes: 1\nparallel:\n  ep_size: 8\n");
	ck_assert_int_eq(fclose(fp), 0);
	ck_assert_msg(rlb_config_load(&back, conf, NULL, 0, &err) == 0, "%s", err.msg);
	ck_assert_str_eq(back.cluster.name, "h200-measured");
	ck_assert_double_eq_tol(back.cluster.gemm_eff_max, 0.6612, 1e-12);
	ck_assert_double_eq_tol(back.cluster.nvlink_latency_us, 18.5, 1e-9);
	free(dir);
	free(preset);
	free(conf);
}
END_TEST

START_TEST(yaml_errors)
{
	struct rlb_config cfg;
	struct rlb_calibration c;
	struct rlb_calib_point p[RLB_CALIB_MAX_POINTS];
	struct rlb_err err;
	char longname[RLB_NAME_MAX + 1];
	FILE *fp = tmpfile();
	size_t n;

	ck_assert_ptr_nonnull(fp);
	rlb_config_defaults(&cfg);
	calibration(&c, p, &n);
	snprintf(c.name, sizeof(c.name), "a b");
	ck_assert_int_eq(rlb_calibrate_write_yaml(&cfg, &c, fp, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "cluster name 'a b' must be letters, digits, '-', '_' or '.'");
	/* the same check before any measurement: the name given, else the config's */
	ck_assert_int_eq(rlb_calibrate_check_name(&cfg, "a b", &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "cluster name 'a b' must be letters, digits, '-', '_' or '.'");
	ck_assert_int_eq(rlb_calibrate_check_name(&cfg, "", &err), 0);
	ck_assert_int_eq(rlb_calibrate_check_name(NULL, "h200.m_1-x", &err), 0);
	snprintf(cfg.cluster.name, sizeof(cfg.cluster.name), "my h200");
	ck_assert_int_eq(rlb_calibrate_check_name(&cfg, NULL, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "cluster name 'my h200' must be letters, digits, '-', '_' or '.'");
	ck_assert_int_eq(rlb_calibrate_check_name(&cfg, "ok", &err), 0);
	/* names the preset loader refuses: `cluster: {preset: .x}` fails */
	ck_assert_int_eq(rlb_calibrate_check_name(&cfg, ".x", &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "cluster name '.x' must not start with '.'");
	ck_assert_int_eq(rlb_calibrate_check_name(&cfg, "..", &err), RLB_EINVAL);
	memset(longname, 'a', RLB_NAME_MAX);
	longname[RLB_NAME_MAX] = '\0';
	ck_assert_int_eq(rlb_calibrate_check_name(&cfg, longname, &err), RLB_EINVAL);
	longname[RLB_NAME_MAX - 1] = '\0';
	ck_assert_int_eq(rlb_calibrate_check_name(&cfg, longname, &err), 0);
	snprintf(c.name, sizeof(c.name), "ok");
	c.gemm.eff_max = 1.5;
	ck_assert_int_eq(rlb_calibrate_write_yaml(&cfg, &c, fp, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "fitted GEMM curve (1.5, 201.25) out of range");
	/* below the config's least gemm_eff_max (1e-6): the output would not load */
	c.gemm.eff_max = 1e-7;
	ck_assert_int_eq(rlb_calibrate_write_yaml(&cfg, &c, fp, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "fitted GEMM curve (1e-07, 201.25) out of range");
	c.gemm.eff_max = 0.5;
	c.link.bytes_per_s = 0;
	ck_assert_int_eq(rlb_calibrate_write_yaml(&cfg, &c, fp, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "fitted link (0 GB/s, 18.5 us) out of range");
	/* 100 bytes/s is 1e-7 GB/s, below nvlink_gbps's least value */
	c.link.bytes_per_s = 100;
	ck_assert_int_eq(rlb_calibrate_write_yaml(&cfg, &c, fp, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "fitted link (1e-07 GB/s, 18.5 us) out of range");
	fclose(fp);
}
END_TEST

START_TEST(measure_without_cuda)
{
	struct rlb_calib_opts o;
	struct rlb_calib_result *r = calloc(1, sizeof(*r));
	struct rlb_err err;

	ck_assert_ptr_nonnull(r);
	rlb_calib_opts_defaults(&o);
	ck_assert_int_eq(o.experts, 16);
	ck_assert_int_eq(o.rows_min, 64);
	ck_assert_int_eq(o.rows_max, 16384);
	o.hidden = 64;
	o.ffn = 32;
	ck_assert_int_eq(rlb_calibrate_measure(&o, r, &err), RLB_EUNSUPPORTED);
	ck_assert_str_eq(err.msg, "the CUDA backend is not built in (backends: cpu)");
	free(r);
}
END_TEST

Suite *rlb_suite_calibrate(void)
{
	Suite *s = suite_create("calibrate");
	TCase *fit = tcase_create("fit");
	TCase *yaml = tcase_create("yaml");

	tcase_add_test(fit, fit_recovers_curve);
	tcase_add_test(fit, fit_skips_memory_bound);
	tcase_add_test(fit, fit_origin);
	tcase_add_test(fit, fit_errors);
	tcase_add_test(fit, fit_link);
	suite_add_tcase(s, fit);
	tcase_add_test(yaml, yaml_loads_back);
	tcase_add_test(yaml, yaml_ungated_model);
	tcase_add_test(yaml, yaml_as_preset);
	tcase_add_test(yaml, yaml_errors);
	if (!RLB_BUILD_CUDA)
		tcase_add_test(yaml, measure_without_cuda);
	suite_add_tcase(s, yaml);
	return s;
}
