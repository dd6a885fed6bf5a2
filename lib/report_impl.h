/*
 * report_impl.h - what the report's renderers share inside librelibra:
 * tables of formatted cells (built once, drawn as text, Markdown or
 * HTML) and the series colours.  Not installed.
 */
#ifndef RLB_REPORT_IMPL_H
#define RLB_REPORT_IMPL_H

#include <stddef.h>
#include <stdio.h>

#include "report.h"

/* A table of strings: the first `left` columns left-aligned, the others right. */
struct rlb_cells {
	size_t cols;
	size_t rows;			/* header row included */
	size_t left;			/* leading left-aligned columns (0: 1) */
	size_t cap;
	char **cell;			/* [rows][cols], owned */
	char *title;			/* owned, may be NULL */
};

void rlb_cells_release(struct rlb_cells *t);
/* Append one row of t->cols cells (copied); -1 on allocation failure. */
int rlb_cells_add(struct rlb_cells *t, const char *const *cells);

/*
 * The comparison table of group G (header: result, step time, tokens/s,
 * speedups, fraction of ideal, GPU max/mean p50 and p99, replicas,
 * migrated experts, balancing overhead), one row per result.
 */
int rlb_cells_group(const struct rlb_report *r, size_t g,
		    struct rlb_cells *t);
/* Measured against simulated in group G; rows == 0 when it has no pair. */
int rlb_cells_measured(const struct rlb_report *r, size_t g,
		       struct rlb_cells *t);
/* What a sweep pivot shows of each (value, result), and its title. */
enum rlb_sweep_metric {
	RLB_SWEEP_STEP,		/* step time, in rlb_sweep_step_unit's unit */
	RLB_SWEEP_SPEEDUP,	/* speedup over the value's own static */
	RLB_SWEEP_IDEAL,	/* fraction of the value's own ideal */
	RLB_SWEEP_METRICS
};
/* 1 when row W is a planned result of a sweep value. */
int rlb_sweep_row(const struct rlb_report_row *w);
/* The step time pivot's unit: its largest value's ("s", "ms", "us"). */
void rlb_sweep_step_unit(const struct rlb_report *r, double *scale,
			 const char **unit);
/* Metric M of sweep row W, a step time multiplied by SCALE. */
double rlb_sweep_value(const struct rlb_report_row *w, enum rlb_sweep_metric m,
		       double scale);
/* The pivot's title ("Step time (ms)", ...) in BUF. */
const char *rlb_sweep_title(const struct rlb_report *r, enum rlb_sweep_metric m,
			    char *buf, size_t size);
/*
 * The sweep's column of each row [nrows] (NULL for rows outside it): the
 * row's label without the option that the swept key turns on or off
 * (balancer.relay: " --relay", ...), so that a column compares one
 * policy across the values; the labels themselves when that would put
 * two results of one value in a column.  Free with free() (the strings
 * live in the same block).  NULL when out of memory.
 */
char **rlb_sweep_columns(const struct rlb_report *r);
/* Sweep pivot: one row per value of the key, one column per result. */
int rlb_cells_sweep(const struct rlb_report *r, enum rlb_sweep_metric m,
		    struct rlb_cells *t);

/* A rate with an SI prefix ("163k", "1.11M"), 3 significant figures. */
const char *rlb_report_fmt_si(double v, char *buf, size_t size);

/*
 * The unit of a time axis or column holding V[0..n) seconds: s, ms or us,
 * whichever keeps the largest value below 1000; *scale converts seconds.
 */
void rlb_report_time_unit(const double *v, size_t n, double *scale,
			  const char **unit);

/* The column legend printed under the tables. */
extern const char *const rlb_report_legend[];

/* Colour of a row label ("#rrggbb"): fixed per policy, else a palette. */
const char *rlb_report_colour(const char *label, size_t index);

/* Write S with XML's five special characters escaped, bad UTF-8 bytes as U+FFFD. */
void rlb_xml_escape(FILE *fp, const char *s);

/* ------------------------------------------------------------------ */
/* SVG drawing (report_svg.c), shared by the charts (report_chart.c).  */

#define RLB_SVG_W 760.0		/* chart width, px */
#define RLB_SVG_FONT "DejaVu Sans, Helvetica, Arial, sans-serif"

struct rlb_svg_axis {
	double lo, hi, step;
	int log;			/* log10 scale (lo, hi > 0) */
};

typedef const char *(*rlb_svg_tick_fmt)(double v, char *buf, size_t size);

/* Round [lo, hi] out to about five ticks of 1, 2, 2.5 or 5 times 10^k. */
void rlb_svg_axis_nice(struct rlb_svg_axis *a, double lo, double hi);
/* Position of v on an axis drawn from p0 (at lo) to p1 (at hi). */
double rlb_svg_axis_pos(const struct rlb_svg_axis *a, double v, double p0,
			double p1);
/* The <svg> element, its title and a white background; H px high. */
void rlb_svg_open(FILE *fp, double h, const char *title);
/* A <text> at (x, y); EXTRA (may be NULL) holds more attributes. */
void rlb_svg_text(FILE *fp, double x, double y, const char *anchor,
		  const char *extra, const char *s);
/* Axis titles: X centred at height XT_Y, Y rotated left of the plot. */
void rlb_svg_axis_titles(FILE *fp, double x0, double y0, double x1, double y1,
			 double xt_y, const char *xt, const char *yt);
/* Grid lines and tick labels (values times SCALE) of a Y axis, the frame. */
void rlb_svg_y_axis(FILE *fp, const struct rlb_svg_axis *a, double x0,
		    double y0, double x1, double y1, double scale,
		    rlb_svg_tick_fmt fmt);
/*
 * Swatches in rows from (x, y), wrapping at the chart's width; LINE: line
 * swatches (2: the last dashed), else squares.  Returns the height.
 */
double rlb_svg_legend(FILE *fp, double x, double y, const char *const *labels,
		      const char *const *colours, size_t n, int line);
double rlb_svg_legend_height(double x, const char *const *labels, size_t n);
/* Tick labels: trailing zeros of the fraction dropped, in place. */
const char *rlb_svg_strip_zeros(char *buf);
const char *rlb_svg_fmt_plain(double v, char *buf, size_t size);
const char *rlb_svg_fmt_int(double v, char *buf, size_t size);
/* A row's label, " (measured)" appended for train-step results. */
const char *rlb_svg_display_name(const struct rlb_report_row *w, char *buf,
				 size_t size);
/* Charts (1) and (3) of group G; RLB_ENOTFOUND without data. */
int rlb_svg_chart_tokens(const struct rlb_report *r, size_t g, FILE *fp,
			 struct rlb_err *err);
int rlb_svg_chart_breakdown(const struct rlb_report *r, size_t g, FILE *fp,
			    struct rlb_err *err);

#endif
