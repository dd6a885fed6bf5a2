/*
 * report.h - `relibra report`: read result files (plan summaries and
 * train-step metrics, schema relibra.result/1), group them by
 * configuration and trace, derive the comparisons (speedups, measured
 * against simulated), and render them as a text table, Markdown, CSV,
 * JSON, SVG charts and one self-contained HTML page.
 */
#ifndef RLB_REPORT_H
#define RLB_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "err.h"
#include "planner.h"
#include "trace.h"

struct rlb_atomic_file;	/* util.h */

#ifdef __cplusplus
extern "C" {
#endif

#define RLB_REPORT_SCHEMA "relibra.report/1"

/* What produced a result. */
enum rlb_result_kind {
	RLB_RESULT_PLAN = 0,		/* "plan": simulated by the cost model */
	RLB_RESULT_TRAIN_STEP = 1,	/* "train-step": measured */
};

/*
 * Parts of the step time, seconds per step; the names are the keys of a
 * result's "breakdown" object (rlb_report_part_key).
 */
enum rlb_report_part {
	RLB_PART_TOTAL = 0,
	RLB_PART_DENSE,
	RLB_PART_EXPERT,
	RLB_PART_A2A,
	RLB_PART_A2A_RDMA,
	RLB_PART_A2A_NVLINK,
	RLB_PART_REPLICATION,
	RLB_PART_GRAD_REDUCE,
	RLB_PART_MIGRATION,
	RLB_PART_PLANNING,
	RLB_PART_A2A_EVEN,		/* informational: the copies spread evenly */
	RLB_PART_A2A_SENDERS,		/* informational: the busiest sender alone */
	RLB_PART_COUNT
};

/* "total_s", "dense_s", ...; NULL out of range. */
const char *rlb_report_part_key(enum rlb_report_part p);
/* "step", "dense", "expert compute", ...: for tables and legends. */
const char *rlb_report_part_title(enum rlb_report_part p);

/*
 * Expert rows per (micro-batch, layer, GPU) of one step under a row's
 * plan, for the micro-batch and heatmap charts; rows[(mb * layers +
 * layer) * ranks + gpu].
 */
struct rlb_report_series {
	uint32_t step;
	uint32_t micro_batches;
	uint32_t layers;
	uint32_t ranks;
	uint64_t *rows;
};

/*
 * One result: a policy's simulated plan or a measured train-step run.
 * Every figure is NAN when the file does not give it.
 */
/* One planned step of a result. */
struct rlb_report_step {
	double step;
	double step_time_s;
	double ideal_s;			/* the ideal's time on that step (NAN: unknown) */
};

struct rlb_report_row {
	char *source;			/* file name, or the in-process description */
	char *label;			/* row name: the result's "label", else its policy,
					   with its file when two share it */
	char *given_label;		/* that label as the result gives it */
	char *policy;
	enum rlb_result_kind kind;
	char *sweep_value;		/* the swept key's value (NULL outside a sweep) */
	size_t group;			/* index in rlb_report.groups */
	double steps;
	double tokens;
	double step_time_s;
	double tokens_per_s;
	double fraction_of_ideal;
	double speedup_over_static;	/* the result's own (against its static baseline) */
	double gpu_p50;			/* GPU max/mean after balancing, p50 and p99 */
	double gpu_p99;
	double replicas;
	double migrated_experts;
	double breakdown[RLB_PART_COUNT];
	double static_step_time_s;	/* the result's baselines */
	double ideal_step_time_s;
	double ideal_tokens_per_s;
	/* a plan result's steps (its "per_step"; NULL in older files), owned */
	struct rlb_report_step *per_step;
	size_t nper_step;
	/* derived by rlb_report_finish */
	double x_static;		/* speedup over static (NAN: no baseline) */
	double x_eplb_oracle;		/* speedup over eplb-oracle (NAN: no baseline) */
	struct rlb_report_series *series;	/* optional, owned */
};

/*
 * Results that may be compared: same configuration, trace, steps of the
 * trace and sweep value.
 */
struct rlb_report_group {
	char *model;
	char *cluster;
	int nodes;
	int gpus_per_node;
	int ep_size;
	int micro_batch_tokens;
	char *pack;
	char *trace_hash;
	char *trace_path;
	char *sweep_value;		/* NULL outside a sweep */
	double first_step;		/* the trace's steps planned or run */
	double last_step;		/* (NAN: the file does not say) */
	double steps;			/* of its first result */
	char **notes;			/* stated missing baselines, set by finish */
	size_t nnotes;
};

struct rlb_report {
	struct rlb_report_row *rows;
	size_t nrows;
	size_t rows_cap;
	struct rlb_report_group *groups;
	size_t ngroups;
	size_t groups_cap;
	char *sweep_key;		/* NULL: no sweep */
	int finished;
};

void rlb_report_init(struct rlb_report *r);
/* Free everything r holds; r is then empty (init state). */
void rlb_report_release(struct rlb_report *r);

/*
 * Add one result object (a parsed relibra.result/1 JSON object, not
 * kept).  SOURCE names it in messages and in the row; SWEEP_VALUE (may
 * be NULL) is copied.  Required: "schema" equal to RLB_RESULT_SCHEMA
 * (another relibra.result/N: RLB_EVERSION; another or no schema:
 * RLB_EPARSE), "kind" ("plan" or "train-step"), "config" with "model",
 * "cluster", "nodes", "gpus_per_node", "ep_size", "micro_batch_tokens",
 * "pack", "trace" with "hash", "policy", "step_time_s" and
 * "tokens_per_s" (positive numbers).  Optional (NAN when absent): the
 * other figures, the breakdown, the imbalance and baselines; unknown
 * keys are ignored.  Messages start with "'SOURCE': " and name the key
 * path ("config.model").  Errors: RLB_EPARSE, RLB_EVERSION, RLB_ENOMEM;
 * r is unchanged on error.
 */
int rlb_report_add_json(struct rlb_report *r, const struct json_t *obj,
			const char *source, const char *sweep_value,
			struct rlb_err *err);

/*
 * Read PATH ("-": stdin) and add its result.  Errors as
 * rlb_report_add_json, plus RLB_EIO (unreadable) and RLB_EPARSE (empty,
 * not JSON, with line and column).
 */
int rlb_report_add_file(struct rlb_report *r, const char *path,
			struct rlb_err *err);

/* Attach S (ownership passes to the report) to row I; NULL is a no-op. */
void rlb_report_set_series(struct rlb_report *r, size_t i,
			   struct rlb_report_series *s);
void rlb_report_series_free(struct rlb_report_series *s);

/*
 * Derive the comparisons once every result is in: per group, speedup
 * over static (a plan's own baseline; for measured rows a measured static
 * run of the group) and over eplb-oracle (a result of the same kind and
 * group labelled eplb-oracle), and a note for each missing baseline.
 * Errors: RLB_EINVAL (no result), RLB_ENOMEM.
 */
int rlb_report_finish(struct rlb_report *r, struct rlb_err *err);

/*
 * Group G in words, into BUF: "tiny on h100-2x2 (2 nodes x 2 GPUs, EP 4),
 * in-order packing, 512 tokens per GPU per micro-batch, trace
 * b28db7b764fc3875 (tiny.rrt), 3 steps (0 to 2)", the sweep value first in a
 * sweep.  Returns BUF (truncated to SIZE).
 */
const char *rlb_report_group_title(const struct rlb_report *r, size_t g,
				   char *buf, size_t size);

/*
 * The plan row of the same group and label as the train-step row I, or
 * -1 when there is none or several (the pair shown as measured against
 * simulated).
 */
long rlb_report_simulated_of(const struct rlb_report *r, size_t i);

/* ------------------------------------------------------------------ */
/* Text renderers (report_text.c).                                      */

enum rlb_report_format {
	RLB_REPORT_TABLE = 0,	/* aligned columns, 3 significant figures */
	RLB_REPORT_MARKDOWN,	/* GitHub pipe tables, 3 significant figures */
	RLB_REPORT_CSV,		/* RFC 4180, SI units, 6 significant figures */
	RLB_REPORT_JSON,	/* schema RLB_REPORT_SCHEMA, 6 significant figures */
};

/* Name <-> format ("table", "markdown", "csv", "json"); RLB_EINVAL. */
int rlb_report_format_from_name(const char *name, enum rlb_report_format *f,
				struct rlb_err *err);

/*
 * Render a finished report to FP.  Table and Markdown: per group a title,
 * the comparison (one row per result), its notes, and the measured
 * against simulated components when there are such pairs; with a sweep,
 * speedup over static and fraction of ideal against the swept key.  CSV:
 * one line per result, every group field repeated.  Errors: RLB_EINVAL
 * (not finished), RLB_EIO (write failure), RLB_ENOMEM.
 *
 * This writer and the SVG and HTML ones below do not flush FP: RLB_EIO
 * covers the writes stdio has made, and a failure of what it still
 * buffers (a short output on a full disk) shows at the caller's fflush
 * or fclose, whose errno says why (rlb_atomic_sync_after does both).
 */
int rlb_report_write(const struct rlb_report *r, enum rlb_report_format f,
		     FILE *fp, struct rlb_err *err);

/*
 * V rounded to 3 significant figures ("1.04", "0.925", "163", "1810"),
 * with an exponent below 1e-4 and from 1e6 up ("2.5e+06"), "inf" for an
 * infinity, "-" for NAN; into BUF (at least 32 bytes).
 */
const char *rlb_report_fmt3(double v, char *buf, size_t size);

/* ------------------------------------------------------------------ */
/* Charts (report_svg.c) and the HTML page (report_html.c).            */

enum rlb_report_chart {
	RLB_CHART_TOKENS = 0,	/* tokens/s per result, the ideal as a line */
	RLB_CHART_MICROBATCH,	/* GPU max/mean per micro-batch of one layer */
	RLB_CHART_BREAKDOWN,	/* stacked step-time parts per result */
	RLB_CHART_HEATMAP,	/* load per (layer, GPU), static and relibra */
	RLB_CHART_STEPS,	/* step time per planned step, the ideal dashed */
	RLB_CHART_SWEEP_SPEEDUP,	/* speedup over static against the swept key */
	RLB_CHART_SWEEP_IDEAL,	/* fraction of ideal against the swept key */
	RLB_CHART_SWEEP_STEP,	/* step time against the swept key */
	RLB_CHART_COUNT
};

/* File stem of a chart: "tokens", "microbatch", ... */
const char *rlb_report_chart_name(enum rlb_report_chart c);

struct rlb_report_chart_opts {
	long layer;		/* micro-batch chart's layer; < 0: the most imbalanced */
};

/*
 * The layer the micro-batch chart of group G shows: o->layer when set
 * and in range, else the layer whose mean GPU max/mean over the step's
 * micro-batches is highest under static (else the first row with a
 * series).  -1 when no row of the group has a series.
 */
long rlb_report_chart_layer(const struct rlb_report *r, size_t g,
			    const struct rlb_report_chart_opts *o);

/*
 * Write chart C of group G (the sweep charts ignore G) as one standalone
 * SVG element to FP; every data series is a <g class="series">.
 * RLB_ENOTFOUND (with the reason) when the report has no data for it,
 * RLB_EIO on write failure.
 */
int rlb_report_chart_svg(const struct rlb_report *r, enum rlb_report_chart c,
			 size_t g, const struct rlb_report_chart_opts *o,
			 FILE *fp, struct rlb_err *err);

/*
 * Write every chart that has data into DIR (created if missing) as
 * NAME.svg, or NAME-gN.svg (N from 1) when there are several groups,
 * each to its PATH.tmp, synced: *files receives the *n files (an array
 * to free) for the caller to rename into place with rlb_atomic_commit
 * (or drop with rlb_atomic_abort) together with its other outputs.  On
 * failure none is left.  Errors: RLB_EINVAL (not finished), RLB_EIO,
 * RLB_ENOMEM.
 */
int rlb_report_write_svgs(const struct rlb_report *r,
			  const struct rlb_report_chart_opts *o,
			  const char *dir, struct rlb_atomic_file **files,
			  size_t *n, struct rlb_err *err);

/*
 * The report as one self-contained XHTML page (well-formed XML, no
 * scripts, no external resources): per group the comparison table, its
 * notes, measured against simulated, and charts; the sweep first.
 * Errors: RLB_EINVAL (not finished), RLB_EIO.
 */
int rlb_report_write_html(const struct rlb_report *r,
			  const struct rlb_report_chart_opts *o, FILE *fp,
			  struct rlb_err *err);

/* ------------------------------------------------------------------ */
/* Planning in process (report_run.c).                                 */

struct rlb_report_run_opts {
	const char *config_path;	/* for the results' "config.path" */
	const char *trace_path;
	/* each planned with cfg's balancer options and rlb_policy_spec_apply */
	const char *const *policies;
	size_t npolicies;
	struct rlb_planner_opts planner;	/* packing, steps, progress */
	const char *sweep_value;	/* NULL outside a sweep */
	int series;			/* 1: keep the last step's rows per (mb, layer, GPU) */
};

/*
 * Plan and simulate the trace under every policy of o in one
 * rlb_planner_run, and add one row per policy (the result JSON of
 * rlb_result_json without timing, read back with rlb_report_add_json),
 * with its series when o->series.  Errors: those of the planner,
 * RLB_ENOMEM.
 */
int rlb_report_run(struct rlb_report *r, struct rlb_trace_reader *reader,
		   const struct rlb_config *cfg,
		   const struct rlb_report_run_opts *o, struct rlb_err *err);

/*
 * Expert rows per (micro-batch, layer, GPU) of a step plan: the sum of
 * the quotas of the instances on each GPU.  *out is NULL on failure.
 * Errors: RLB_ENOMEM.
 */
int rlb_report_series_from_plan(const struct rlb_step_plan *p,
				struct rlb_report_series **out,
				struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
