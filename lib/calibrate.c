/*
 * calibrate.c - the plain-C half of relibra calibrate (calibrate.h): the
 * weighted least-squares fits of the GEMM efficiency curve and of the
 * link latency and bandwidth, the cluster YAML fragment, and the stand-in
 * for the measurement when the CUDA backend is not built in.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "calibrate.h"
#include "config_impl.h"

/* A memory-bound point: its time is within this factor of the HBM floor. */
#define FLOOR_MARGIN 1.15

void rlb_calib_opts_defaults(struct rlb_calib_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->experts = 16;
	o->rows_min = RLB_CALIB_ROWS_MIN;
	o->rows_max = RLB_CALIB_ROWS_MAX;
	o->repeats = 10;
	o->device = 0;
	o->gpus = 0;
}

static int point_ok(const struct rlb_calib_point *p)
{
	return isfinite(p->x) && isfinite(p->seconds) && p->x > 0 && p->seconds > 0;
}

/*
 * Least-squares line t = b0 + b1 x through the points with keep[i] set,
 * weights 1 / t^2 (each point's relative error counts the same).  With a
 * negative intercept the line is refitted through the origin (b0 = 0).
 * Returns the rms relative error; *ok 0 when the system is singular.
 */
static double fit_line(const struct rlb_calib_point *pts, const int *keep,
		       size_t n, double *b0, double *b1, int *ok)
{
	double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, det, e2 = 0;
	size_t i, m = 0;

	*ok = 0;
	*b0 = *b1 = 0;
	for (i = 0; i < n; i++) {
		double w, x, y;

		if (!keep[i])
			continue;
		x = pts[i].x;
		y = pts[i].seconds;
		w = 1.0 / (y * y);
		sw += w;
		sx += w * x;
		sy += w * y;
		sxx += w * x * x;
		sxy += w * x * y;
		m++;
	}
	det = sw * sxx - sx * sx;
	if (m < 2 || !(det > 1e-12 * sw * sxx))
		return 0;
	*b1 = (sw * sxy - sx * sy) / det;
	*b0 = (sy - *b1 * sx) / sw;
	if (*b0 < 0) {
		*b0 = 0;
		*b1 = sxy / sxx;
	}
	for (i = 0; i < n; i++) {
		double r;

		if (!keep[i])
			continue;
		r = (*b0 + *b1 * pts[i].x - pts[i].seconds) / pts[i].seconds;
		e2 += r * r;
	}
	*ok = 1;
	return sqrt(e2 / (double)m);
}

static int check_points(const struct rlb_calib_point *pts, size_t n,
			struct rlb_err *err)
{
	size_t i;

	if (n > RLB_CALIB_MAX_POINTS)
		return rlb_err_set(err, RLB_EINVAL, "too many points (%zu, at most %d)",
				   n, RLB_CALIB_MAX_POINTS);
	for (i = 0; i < n; i++)
		if (!point_ok(&pts[i]))
			return rlb_err_set(err, RLB_EINVAL,
					   "point %zu (%g, %g s) is not positive and finite",
					   i, pts[i].x, pts[i].seconds);
	return 0;
}

int rlb_calibrate_fit_gemm(const struct rlb_calib_point *pts, size_t n,
			   double flops_per_row, double peak_flops,
			   double floor_s, struct rlb_gemm_fit *out,
			   struct rlb_err *err)
{
	int keep[RLB_CALIB_MAX_POINTS], ok, ret;
	double b0, b1, rms;
	size_t i, used = 0;

	memset(out, 0, sizeof(*out));
	if (!(flops_per_row > 0) || !(peak_flops > 0) || !isfinite(flops_per_row) ||
	    !isfinite(peak_flops))
		return rlb_err_set(err, RLB_EINVAL,
				   "flops per row and peak must be positive");
	ret = check_points(pts, n, err);
	if (ret < 0)
		return ret;
	for (i = 0; i < n; i++) {
		keep[i] = !(floor_s > 0) || pts[i].seconds > FLOOR_MARGIN * floor_s;
		used += (size_t)keep[i];
	}
	if (used < 2)
		return rlb_err_set(err, RLB_EINVAL,
				   "%zu of %zu points above the memory-bound floor; the fit needs 2",
				   used, n);
	rms = fit_line(pts, keep, n, &b0, &b1, &ok);
	if (!ok || !(b1 > 0))
		return rlb_err_set(err, RLB_ERANGE,
				   "measured GEMM times do not grow with the rows");
	out->eff_max = flops_per_row / (peak_flops * b1);
	out->half_rows = b0 / b1;
	out->rms_rel = rms;
	out->used = used;
	if (out->eff_max > 1)
		return rlb_err_set(err, RLB_ERANGE,
				   "measured GEMM efficiency %.3f exceeds 1 at the configured peak %.4g TFLOP/s: is cluster.peak_tflops right",
				   out->eff_max, peak_flops / 1e12);
	if (out->half_rows > 1e6)
		return rlb_err_set(err, RLB_ERANGE,
				   "fitted half-efficiency rows %.4g out of range (at most 1e6)",
				   out->half_rows);
	return 0;
}

int rlb_calibrate_fit_link(const struct rlb_calib_point *pts, size_t n,
			   struct rlb_link_fit *out, struct rlb_err *err)
{
	int keep[RLB_CALIB_MAX_POINTS], ok, ret;
	double b0, b1, rms;
	size_t i;

	memset(out, 0, sizeof(*out));
	ret = check_points(pts, n, err);
	if (ret < 0)
		return ret;
	if (n < 2)
		return rlb_err_set(err, RLB_EINVAL, "%zu points; the fit needs 2", n);
	for (i = 0; i < n; i++)
		keep[i] = 1;
	rms = fit_line(pts, keep, n, &b0, &b1, &ok);
	if (!ok || !(b1 > 0))
		return rlb_err_set(err, RLB_ERANGE,
				   "measured transfer times do not grow with the size");
	out->latency_s = b0;
	out->bytes_per_s = 1.0 / b1;
	out->rms_rel = rms;
	out->used = n;
	return 0;
}

/* ------------------------------------------------------------------ */
/* The YAML fragment.                                                   */

/* A YAML plain scalar is safe for names of letters, digits and "-_." only. */
static int plain_name(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
			return 0;
	return 1;
}

int rlb_calibrate_check_name(const struct rlb_config *cfg, const char *name,
			     struct rlb_err *err)
{
	if (!name || !name[0])
		name = cfg && cfg->cluster.name[0] ? cfg->cluster.name : "calibrated";
	if (!plain_name(name))
		return rlb_err_set(err, RLB_EINVAL,
				   "cluster name '%s' must be letters, digits, '-', '_' or '.'",
				   name);
	/* what the preset loader takes: clusters/NAME.yaml, not hidden */
	if (name[0] == '.')
		return rlb_err_set(err, RLB_EINVAL,
				   "cluster name '%s' must not start with '.'", name);
	if (strlen(name) >= RLB_NAME_MAX)
		return rlb_err_set(err, RLB_EINVAL,
				   "cluster name is longer than %d bytes", RLB_NAME_MAX - 1);
	return 0;
}

/* Printable ASCII for a comment: anything else becomes '?'. */
static void comment_text(const char *in, char *out, size_t cap)
{
	size_t i;

	for (i = 0; in[i] && i + 1 < cap; i++)
		out[i] = (unsigned char)in[i] < 0x20 || (unsigned char)in[i] >= 0x7f ? '?' : in[i];
	out[i] = '\0';
}

/*
 * One number key: DIGITS significant digits, 0: the shortest form that
 * reads back as V (as relibra config prints it).
 */
static void put_num(FILE *fp, const char *key, double v, int digits)
{
	char num[40];

	if (digits)
		snprintf(num, sizeof(num), "%.*g", digits, v);
	else
		rlb_cfg_fmt_double(v, num, sizeof(num));
	fprintf(fp, "  %s: %s\n", key, num);
}

int rlb_calibrate_write_yaml(const struct rlb_config *cfg,
			     const struct rlb_calibration *c, FILE *fp,
			     struct rlb_err *err)
{
	struct rlb_cluster_config cl = cfg->cluster;
	char dev[128], date[32];
	const char *name;
	size_t i;

	if (rlb_calibrate_check_name(cfg, c->name, err))
		return RLB_EINVAL;
	if (c->name[0])
		snprintf(cl.name, sizeof(cl.name), "%s", c->name);
	else if (!cl.name[0])
		snprintf(cl.name, sizeof(cl.name), "calibrated");
	name = cl.name;
	if (c->have_gemm) {
		/* the ranges of relibra.yaml(5), so that the output loads */
		if (!(c->gemm.eff_max >= 1e-6 && c->gemm.eff_max <= 1) ||
		    !(c->gemm.half_rows >= 0 && c->gemm.half_rows <= 1e6))
			return rlb_err_set(err, RLB_EINVAL,
					   "fitted GEMM curve (%g, %g) out of range",
					   c->gemm.eff_max, c->gemm.half_rows);
		cl.gemm_eff_max = c->gemm.eff_max;
		cl.gemm_eff_half_rows = c->gemm.half_rows;
	}
	if (c->have_link) {
		double gbps = c->link.bytes_per_s / 1e9, us = c->link.latency_s * 1e6;

		if (!(gbps >= 1e-6 && gbps <= 1e6) || !(us >= 0 && us <= 1e6))
			return rlb_err_set(err, RLB_EINVAL,
					   "fitted link (%g GB/s, %g us) out of range", gbps, us);
		cl.nvlink_gbps = gbps;
		cl.nvlink_latency_us = us;
	}
	comment_text(c->device[0] ? c->device : "unknown device", dev, sizeof(dev));
	comment_text(c->date[0] ? c->date : "unknown date", date, sizeof(date));
	fprintf(fp, "# relibra calibrate: %s, %s.\n", dev, date);
	if (c->have_gemm) {
		fprintf(fp, "# Expert GEMMs (forward gate, up, down; bf16, fp32 accumulate) of shape\n"
			    "# width %u x ffn %u; efficiency relative to %.4g TFLOP/s per GPU:\n",
			c->hidden, c->ffn, c->peak_flops / 1e12);
		if (rlb_model_ffn_matrices(&cfg->model) == 2)
			fprintf(fp, "# The model's experts are ungated (up, down): GEMMs of the same shapes,\n"
				    "# so the curve is theirs too.\n");
		for (i = 0; c->gemm_pts && i < c->ngemm; i++) {
			double fpr = 6.0 * c->hidden * c->ffn;
			double eff = c->peak_flops > 0 ?
				     fpr * c->gemm_pts[i].x / (c->gemm_pts[i].seconds * c->peak_flops) : 0;

			fprintf(fp, "#   %6.0f rows/expert  %10.2f us/expert  efficiency %.3f\n",
				c->gemm_pts[i].x, c->gemm_pts[i].seconds * 1e6, eff);
		}
		fprintf(fp, "# Fit eta(m) = %.4f * m / (m + %.1f) over %zu points, rms error %.1f%%.\n",
			c->gemm.eff_max, c->gemm.half_rows, c->gemm.used, 100 * c->gemm.rms_rel);
	} else {
		fprintf(fp, "# GEMM curve not measured: the config's values.\n");
	}
	if (c->have_link)
		fprintf(fp, "# NCCL all-to-all inside the node: %.1f GB/s per GPU, %.1f us latency\n"
			    "# (fit over %zu sizes, rms error %.1f%%).\n",
			cl.nvlink_gbps, cl.nvlink_latency_us, c->link.used,
			100 * c->link.rms_rel);
	else
		fprintf(fp, "# NVLink not measured (one GPU): the config's values.\n");
	fprintf(fp, "# Use: save as clusters/%s.yaml next to a config and write\n"
		    "# 'cluster: {preset: %s}' there, or paste the keys into its cluster section.\n",
		name, name);
	/* the measured keys rounded to what the fit can tell, the others exact */
	fprintf(fp, "cluster:\n");
	fprintf(fp, "  name: %s\n", name);
	fprintf(fp, "  nodes: %d\n", cl.nodes);
	fprintf(fp, "  gpus_per_node: %d\n", cl.gpus_per_node);
	put_num(fp, "peak_tflops", cl.peak_tflops, 0);
	put_num(fp, "hbm_gbps", cl.hbm_gbps, 0);
	put_num(fp, "gemm_eff_max", cl.gemm_eff_max, c->have_gemm ? 4 : 0);
	put_num(fp, "gemm_eff_half_rows", cl.gemm_eff_half_rows, c->have_gemm ? 5 : 0);
	put_num(fp, "nvlink_gbps", cl.nvlink_gbps, c->have_link ? 5 : 0);
	put_num(fp, "nvlink_latency_us", cl.nvlink_latency_us, c->have_link ? 5 : 0);
	put_num(fp, "rdma_gbps", cl.rdma_gbps, 0);
	put_num(fp, "rdma_latency_us", cl.rdma_latency_us, 0);
	if (ferror(fp))
		return rlb_err_set(err, RLB_EIO, "cannot write the calibration");
	return 0;
}

#if !RLB_BUILD_CUDA
int rlb_calibrate_measure(const struct rlb_calib_opts *o,
			  struct rlb_calib_result *res, struct rlb_err *err)
{
	(void)o;
	memset(res, 0, sizeof(*res));
	return rlb_err_set(err, RLB_EUNSUPPORTED,
			   "the CUDA backend is not built in (backends: cpu)");
}
#endif
