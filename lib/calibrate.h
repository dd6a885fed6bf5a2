/*
 * calibrate.h - relibra calibrate: the cost model's hardware figures from
 * measurements on the local GPUs.  Fits the grouped-GEMM efficiency curve
 * eta(m) = gemm_eff_max * m / (m + gemm_eff_half_rows) and the NVLink
 * latency and bandwidth to measured times, and writes the result as the
 * `cluster` section of a config (a YAML fragment that plan and report
 * load).  The fit and the writer are plain C; the measurement needs the
 * CUDA backend (lib/cuda_calibrate.cu).
 */
#ifndef RLB_CALIBRATE_H
#define RLB_CALIBRATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "config.h"
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One measurement: x (rows per expert, or bytes) and its time in seconds. */
struct rlb_calib_point {
	double x;
	double seconds;
};

/*
 * The efficiency curve fitted to the forward expert GEMM times of one
 * expert (gate, up and down projections: flops_per_row = 6 * hidden *
 * ffn).  Under the cost model a GEMM of m rows takes
 *   t(m) = flops_per_row * m / (peak * eta(m))
 *        = flops_per_row * (m + half_rows) / (peak * eff_max),
 * a line in m, so the fit is a least-squares line through (m, t) with
 * relative weights (1 / t^2): eff_max from its slope, half_rows from its
 * intercept.
 */
struct rlb_gemm_fit {
	double eff_max;			/* gemm_eff_max, in (0, 1] */
	double half_rows;		/* gemm_eff_half_rows, >= 0 */
	double rms_rel;			/* rms relative error of the fit over the points used */
	size_t used;			/* points above the memory-bound floor */
};

/*
 * Fit the curve to N points (x: rows per expert > 0, seconds > 0), in
 * any order.  Points whose time is at most 1.15 floor_s (the expert's
 * weight bytes over the HBM bandwidth; not positive: no floor) are memory
 * bound, which the cost model covers with its floor, and are left out.
 * A negative intercept gives half_rows 0 (the line refitted through the
 * origin).  rms_rel is over (fitted - measured) / measured time.
 * Errors: RLB_EINVAL (flops_per_row or peak_flops not positive, more
 * than RLB_CALIB_MAX_POINTS points, a point not positive and finite,
 * fewer than 2 points left), RLB_ERANGE (times that do not grow with
 * rows, all points at one row count, an efficiency above 1: the
 * configured peak is too low, or half_rows above 1e6, the config's
 * limit).
 */
int rlb_calibrate_fit_gemm(const struct rlb_calib_point *pts, size_t n,
			   double flops_per_row, double peak_flops,
			   double floor_s, struct rlb_gemm_fit *out,
			   struct rlb_err *err);

/* Latency and bandwidth of a transfer: t(bytes) = latency_s + bytes / bytes_per_s. */
struct rlb_link_fit {
	double latency_s;		/* >= 0 */
	double bytes_per_s;		/* > 0 */
	double rms_rel;
	size_t used;
};

/*
 * Fit t = latency + bytes / bandwidth to N points (x: bytes > 0), with
 * relative weights.  A negative intercept gives latency 0 (the line
 * refitted through the origin).  Errors: RLB_EINVAL (a point not positive
 * and finite, fewer than 2 points or more than RLB_CALIB_MAX_POINTS),
 * RLB_ERANGE (times that do not grow with size, all points at one size).
 * The config's ranges are rlb_calibrate_write_yaml's to check.
 */
int rlb_calibrate_fit_link(const struct rlb_calib_point *pts, size_t n,
			   struct rlb_link_fit *out, struct rlb_err *err);

/* Sizes calibrate measures: rows per expert 64, 128, ..., 16384. */
#define RLB_CALIB_ROWS_MIN 64
#define RLB_CALIB_ROWS_MAX 16384
#define RLB_CALIB_MAX_POINTS 32

/* What to measure (rlb_calibrate_measure). */
struct rlb_calib_opts {
	uint32_t hidden;		/* expert shape */
	uint32_t ffn;
	uint32_t experts;		/* experts per GPU in the grouped GEMM (>= 1) */
	uint32_t rows_min, rows_max;	/* powers of two between them */
	uint32_t repeats;		/* timed repetitions per size (>= 1) */
	int device;			/* first GPU */
	uint32_t gpus;			/* GPUs for the all-to-all from device on (0: all; 1: no all-to-all) */
	enum rlb_gemm_mode gemm;	/* how the GEMMs run (lib/backend.h; 0: grouped) */
};

/* Defaults: the caller sets the shape; 16 experts, 64..16384, 10 repeats, device 0, every GPU. */
void rlb_calib_opts_defaults(struct rlb_calib_opts *o);

/* What was measured. */
struct rlb_calib_result {
	char device[128];		/* e.g. "NVIDIA H200" */
	uint32_t gpus_found;		/* CUDA devices visible */
	uint32_t gpus_used;		/* in the all-to-all (1: none measured) */
	struct rlb_calib_point gemm[RLB_CALIB_MAX_POINTS];	/* rows per expert, s per expert */
	size_t ngemm;
	struct rlb_calib_point a2a[RLB_CALIB_MAX_POINTS];	/* bytes per GPU pair, s */
	size_t na2a;
};

/*
 * Measure on the local GPUs: for each rows-per-expert size, the forward
 * GEMMs of o->experts experts of the given shape (bf16, fp32 accumulate,
 * batched as the CUDA backend runs them), timed with CUDA events, time per
 * expert; with more than one GPU also an NCCL all-to-all among them (in
 * this process) over message sizes 4 KiB..64 MiB per GPU pair, x being the
 * bytes each GPU sends.  Errors: RLB_EUNSUPPORTED (built
 * without CUDA, or no GPU: "no CUDA device"), RLB_EINVAL, RLB_ECUDA,
 * RLB_ENCCL, RLB_ENOMEM.
 */
int rlb_calibrate_measure(const struct rlb_calib_opts *o,
			  struct rlb_calib_result *res, struct rlb_err *err);

/* The fitted figures and where they came from. */
struct rlb_calibration {
	char name[RLB_NAME_MAX];	/* cluster name written ("": the config's, else "calibrated") */
	char device[128];
	char date[32];			/* e.g. "2025-01-31" */
	uint32_t hidden, ffn;
	int have_gemm;
	struct rlb_gemm_fit gemm;
	const struct rlb_calib_point *gemm_pts;	/* for the comment block (may be NULL) */
	size_t ngemm;
	double peak_flops;		/* the peak the efficiencies are relative to */
	int have_link;
	struct rlb_link_fit link;
};

/*
 * The cluster name rlb_calibrate_write_yaml writes: NAME when not empty,
 * else the config's, else "calibrated".  RLB_EINVAL when it is not a
 * name a cluster preset can have: letters, digits, '-', '_' and '.', not
 * starting with '.', at most RLB_NAME_MAX - 1 bytes.
 */
int rlb_calibrate_check_name(const struct rlb_config *cfg, const char *name,
			     struct rlb_err *err);

/*
 * Write the config's whole `cluster` section with the measured keys
 * replaced (gemm_eff_max and gemm_eff_half_rows, and nvlink_gbps and
 * nvlink_latency_us when have_link), preceded by comments saying what was
 * measured, to FP.  The fitted values are written to 4 significant
 * digits (gemm_eff_max) or 5 (the others), far finer than the fit's
 * error, and load back as those; every other key, and one not measured,
 * keeps the config's value exactly.  The output loads with
 * rlb_config_load as a config or as a cluster preset (`cluster: {preset:
 * NAME}` with the file at clusters/NAME.yaml next to the config).
 * Errors: RLB_EINVAL (a fitted value outside the config's allowed range),
 * RLB_EIO.
 */
int rlb_calibrate_write_yaml(const struct rlb_config *cfg,
			     const struct rlb_calibration *c, FILE *fp,
			     struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
