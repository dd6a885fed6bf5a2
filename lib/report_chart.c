/*
 * report_chart.c - the report's charts that need per-micro-batch loads
 * (the busiest GPU per micro-batch of one layer, the per-(layer, GPU)
 * heatmap of static and relibra), the step time per planned step, the
 * sweep lines, and writing charts as SVG elements and files.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clocale.h"
#include "report.h"
#include "report_impl.h"
#include "util.h"

static const char *const chart_names[RLB_CHART_COUNT] = {
	"tokens", "microbatch", "breakdown", "heatmap", "steps",
	"sweep-speedup", "sweep-ideal", "sweep-step",
};

const char *rlb_report_chart_name(enum rlb_report_chart c)
{
	return (unsigned)c < RLB_CHART_COUNT ? chart_names[c] : NULL;
}

/* ------------------------------------------------------------------ */
/* (2) GPU max/mean per micro-batch of one layer.                       */

/* Max/mean of GPU rows of (mb, layer), NAN when the cell has no rows. */
static double max_mean(const struct rlb_report_series *s, uint32_t mb,
		       uint32_t layer)
{
	const uint64_t *row = s->rows + ((size_t)mb * s->layers + layer) * s->ranks;
	uint64_t sum = 0, max = 0;
	uint32_t k;

	for (k = 0; k < s->ranks; k++) {
		sum += row[k];
		if (row[k] > max)
			max = row[k];
	}
	return sum ? (double)max * s->ranks / (double)sum : NAN;
}

/* Mean over micro-batches of a layer's max/mean. */
static double layer_imbalance(const struct rlb_report_series *s, uint32_t l)
{
	double sum = 0, v;
	uint32_t mb, n = 0;

	for (mb = 0; mb < s->micro_batches; mb++) {
		v = max_mean(s, mb, l);
		if (!isnan(v)) {
			sum += v;
			n++;
		}
	}
	return n ? sum / n : NAN;
}

/* Static's series in group g, else the first; NULL when none. */
static const struct rlb_report_series *reference_series(const struct rlb_report *r,
							size_t g)
{
	const struct rlb_report_series *first = NULL;
	size_t i;

	for (i = 0; i < r->nrows; i++) {
		const struct rlb_report_row *w = &r->rows[i];

		if (w->group != g || !w->series)
			continue;
		if (strcmp(w->policy, "static") == 0)
			return w->series;
		if (!first)
			first = w->series;
	}
	return first;
}

long rlb_report_chart_layer(const struct rlb_report *r, size_t g,
			    const struct rlb_report_chart_opts *o)
{
	const struct rlb_report_series *s = reference_series(r, g);
	double best = -1, v;
	long layer = -1;
	uint32_t l;

	if (!s)
		return -1;
	if (o && o->layer >= 0 && o->layer < (long)s->layers)
		return o->layer;
	for (l = 0; l < s->layers; l++) {
		v = layer_imbalance(s, l);
		if (!isnan(v) && v > best) {
			best = v;
			layer = l;
		}
	}
	return layer < 0 ? 0 : layer;
}

/* ------------------------------------------------------------------ */
/* Line charts (2) and (5).                                             */

/* The plot area of a line chart: points sit 10 px inside x0..x1. */
struct plot {
	struct rlb_svg_axis xa, ya;
	double x0, x1, y0, y1;
};

/* Point k of a line: its y (NAN: none, the line breaks) and *x. */
typedef double (*point_fn)(const void *ctx, size_t k, double *x);

/* The d attribute of the line through points 0..n-1. */
static void line_path(FILE *fp, const struct plot *pl, point_fn at,
		      const void *ctx, size_t n)
{
	size_t k;
	int pen = 0;
	double x, y;

	for (k = 0; k < n; k++) {
		y = at(ctx, k, &x);
		if (isnan(y)) {
			pen = 0;
			continue;
		}
		fprintf(fp, "%s%.1f %.1f ", pen ? "L" : "M",
			rlb_svg_axis_pos(&pl->xa, x, pl->x0 + 10, pl->x1 - 10),
			rlb_svg_axis_pos(&pl->ya, y, pl->y1, pl->y0));
		pen = 1;
	}
}

/* One series: its line in COLOUR, with a dot per point when at most 64. */
static void line_series(FILE *fp, const struct plot *pl, const char *label,
			const char *colour, point_fn at, const void *ctx, size_t n)
{
	size_t k;
	double x, y;

	fputs("<g class=\"series\" data-label=\"", fp);
	rlb_xml_escape(fp, label);
	fprintf(fp, "\">\n<path fill=\"none\" stroke=\"%s\" stroke-width=\"2\" d=\"", colour);
	line_path(fp, pl, at, ctx, n);
	fputs("\"/>\n", fp);
	for (k = 0; n <= 64 && k < n; k++) {
		y = at(ctx, k, &x);
		if (!isnan(y))
			fprintf(fp, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
				rlb_svg_axis_pos(&pl->xa, x, pl->x0 + 10, pl->x1 - 10),
				rlb_svg_axis_pos(&pl->ya, y, pl->y1, pl->y0), colour);
	}
	fputs("</g>\n", fp);
}

/* A micro-batch chart line: one layer of a row's loads. */
struct mb_line {
	const struct rlb_report_series *s;
	uint32_t layer;
};

static double mb_point(const void *ctx, size_t k, double *x)
{
	const struct mb_line *ml = ctx;

	*x = (double)k;
	return max_mean(ml->s, (uint32_t)k, ml->layer);
}

static int chart_microbatch(const struct rlb_report *r, size_t g,
			    const struct rlb_report_chart_opts *o, FILE *fp,
			    struct rlb_err *err)
{
	const struct rlb_report_series *ref = reference_series(r, g);
	const char **labels = NULL, **colours = NULL;
	char title[160], xt[96], name[256];
	double x0 = 80, x1 = RLB_SVG_W - 20, y0, y1, h, top = 1.0, lh;
	struct rlb_svg_axis xa, ya;
	struct plot pl;
	size_t i, nl = 0;
	uint32_t mb, m;
	long layer = rlb_report_chart_layer(r, g, o);
	int ret = 0;

	if (!ref || layer < 0)
		return rlb_err_set(err, RLB_ENOTFOUND,
				   "no per-micro-batch loads (result files carry none: plan in process with -c CONFIG --trace TRACE)");
	m = ref->micro_batches;
	labels = calloc(r->nrows + 1, sizeof(*labels));
	colours = calloc(r->nrows + 1, sizeof(*colours));
	if (!labels || !colours) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < r->nrows; i++) {
		const struct rlb_report_row *w = &r->rows[i];

		if (w->group != g || !w->series || strcmp(w->policy, "ideal") == 0 ||
		    w->series->micro_batches != m || (uint32_t)layer >= w->series->layers)
			continue;
		labels[nl] = w->label;
		colours[nl++] = rlb_report_colour(w->label, i);
		for (mb = 0; mb < m; mb++) {
			double v = max_mean(w->series, mb, (uint32_t)layer);

			if (!isnan(v))
				top = fmax(top, v);
		}
	}
	labels[nl] = "ideal";
	colours[nl] = rlb_report_colour("ideal", 0);
	snprintf(title, sizeof(title),
		 "Busiest GPU over the mean per micro-batch, layer %ld, step %u",
		 layer, ref->step);
	lh = rlb_svg_legend_height(x0, labels, nl + 1);
	y0 = 44 + lh;
	y1 = y0 + 260;
	h = y1 + 50;
	rlb_svg_open(fp, h, title);
	rlb_svg_legend(fp, x0, 44, labels, colours, nl + 1, 2);
	rlb_svg_axis_nice(&ya, 1.0, top * 1.02);
	rlb_svg_axis_nice(&xa, 0, m > 1 ? m - 1 : 1);
	if (m <= 16) {
		xa.lo = 0;
		xa.hi = m > 1 ? m - 1 : 1;
		xa.step = 1;
	}
	rlb_svg_y_axis(fp, &ya, x0, y0, x1, y1, 1, rlb_svg_fmt_plain);
	fputs("<g class=\"axis\" font-size=\"11\" fill=\"#333333\">\n", fp);
	for (i = 0; xa.lo + i * xa.step <= xa.hi + 1e-9 && i < 60; i++) {
		double v = xa.lo + i * xa.step, x = rlb_svg_axis_pos(&xa, v, x0 + 10, x1 - 10);
		char buf[32];

		rlb_svg_text(fp, x, y1 + 16, "middle", NULL, rlb_svg_fmt_int(v, buf, sizeof(buf)));
	}
	fputs("</g>\n", fp);
	snprintf(xt, sizeof(xt), "micro-batch of step %u", ref->step);
	rlb_svg_axis_titles(fp, x0, y0, x1, y1, h - 10, xt, "GPU max/mean expert rows");
	{
		double y = rlb_svg_axis_pos(&ya, 1.0, y1, y0);

		fprintf(fp, "<g class=\"reference\">\n<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
			"y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\n</g>\n",
			x0, y, x1, y, rlb_report_colour("ideal", 0));
	}
	pl = (struct plot){ xa, ya, x0, x1, y0, y1 };
	for (i = 0; i < r->nrows; i++) {
		const struct rlb_report_row *w = &r->rows[i];
		struct mb_line ml = { w->series, (uint32_t)layer };

		if (w->group != g || !w->series || strcmp(w->policy, "ideal") == 0 ||
		    w->series->micro_batches != m || (uint32_t)layer >= w->series->layers)
			continue;
		line_series(fp, &pl, rlb_svg_display_name(w, name, sizeof(name)),
			    rlb_report_colour(w->label, i), mb_point, &ml, m);
	}
	fputs("</svg>\n", fp);
out:
	free(labels);
	free(colours);
	return ret;
}

/* ------------------------------------------------------------------ */
/* (4) load per (layer, GPU), static and relibra.                       */

/*
 * Blue below 1, white at 1, red above, on a log scale saturated at
 * 2^-d and 2^d (0 rows: the darkest blue).
 */
static void heat_colour(double v, double d, char *buf, size_t size)
{
	double t;
	int rr, gg, bb;

	if (isnan(v)) {
		snprintf(buf, size, "#eeeeee");
		return;
	}
	t = v > 0 ? log2(v) / d : -1;
	t = t > 1 ? 1 : t < -1 ? -1 : t;
	if (t >= 0) {		/* white -> #b2182b */
		rr = (int)lround(255 + t * (0xb2 - 255));
		gg = (int)lround(255 + t * (0x18 - 255));
		bb = (int)lround(255 + t * (0x2b - 255));
	} else {		/* white -> #2166ac */
		rr = (int)lround(255 - t * (0x21 - 255));
		gg = (int)lround(255 - t * (0x66 - 255));
		bb = (int)lround(255 - t * (0xac - 255));
	}
	snprintf(buf, size, "#%02x%02x%02x", rr, gg, bb);
}

/* Step load of (layer, GPU) over the layer's mean per GPU. */
static double heat_value(const struct rlb_report_series *s, uint32_t l,
			 uint32_t gpu)
{
	uint64_t sum = 0, v = 0;
	uint32_t mb, k;

	for (mb = 0; mb < s->micro_batches; mb++) {
		const uint64_t *row = s->rows + ((size_t)mb * s->layers + l) * s->ranks;

		for (k = 0; k < s->ranks; k++)
			sum += row[k];
		v += row[gpu];
	}
	return sum ? (double)v * s->ranks / (double)sum : NAN;
}

static int chart_heatmap(const struct rlb_report *r, size_t g, FILE *fp,
			 struct rlb_err *err)
{
	static const char *const want[2] = { "static", "relibra" };
	const struct rlb_report_row *panel[2] = { NULL, NULL };
	char c[16], buf[32], title[128];
	double d = 0.07, cw, ch, px, y0 = 70, pw, h, v;	/* log2 range, 2^0.07 = 1.05 */
	uint32_t layers = 0, ranks = 0, l, k, step = 0, tick;
	size_t i, p, np = 0;
	int gpn = r->groups[g].gpus_per_node > 0 ? r->groups[g].gpus_per_node : 1;

	for (i = 0; i < r->nrows; i++) {
		const struct rlb_report_row *w = &r->rows[i];

		for (p = 0; p < 2; p++)
			if (w->group == g && w->series && !panel[p] &&
			    w->kind == RLB_RESULT_PLAN && strcmp(w->label, want[p]) == 0)
				panel[p] = w;
	}
	for (p = 0; p < 2; p++)
		if (panel[p]) {
			if (np && (panel[p]->series->layers != layers ||
				   panel[p]->series->ranks != ranks)) {
				panel[p] = NULL;
				continue;
			}
			layers = panel[p]->series->layers;
			ranks = panel[p]->series->ranks;
			step = panel[p]->series->step;
			np++;
		}
	if (np == 0) {
		/* planned in process, only without those policies: no hint */
		for (i = 0; i < r->nrows; i++)
			if (r->rows[i].group == g && r->rows[i].series)
				return rlb_err_set(err, RLB_ENOTFOUND,
						   "no static or relibra result among the plans");
		return rlb_err_set(err, RLB_ENOTFOUND,
				   "no static or relibra result with per-micro-batch loads (plan in process with -c CONFIG --trace TRACE)");
	}
	for (p = 0; p < 2; p++)
		for (l = 0; panel[p] && l < layers; l++)
			for (k = 0; k < ranks; k++) {
				v = heat_value(panel[p]->series, l, k);
				if (!isnan(v) && v > 0)
					d = fmax(d, fabs(log2(v)));
			}
	d = fmin(d, 1);		/* saturate beyond half and twice the mean */
	cw = fmin(32, 260.0 / ranks);	/* two panels fit the width */
	ch = fmax(3, fmin(14, 380.0 / layers));
	pw = cw * ranks;
	h = y0 + ch * layers + 90;
	snprintf(title, sizeof(title),
		 "Expert rows per GPU over the layer's mean, step %u", step);
	rlb_svg_open(fp, h, title);
	px = 90;
	for (p = 0; p < 2; p++) {
		const struct rlb_report_row *w = panel[p];

		if (!w)
			continue;
		rlb_svg_text(fp, px + pw / 2, y0 - 10, "middle", "font-size=\"13\" font-weight=\"bold\"",
		     w->label);
		fputs("<g class=\"series\" data-label=\"", fp);
		rlb_xml_escape(fp, w->label);
		fputs("\">\n", fp);
		for (l = 0; l < layers; l++)
			for (k = 0; k < ranks; k++) {
				v = heat_value(w->series, l, k);
				heat_colour(v, d, c, sizeof(c));
				fprintf(fp, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>layer %u, GPU %u: %s</title></rect>\n",
					px + k * cw, y0 + l * ch, cw, ch, c, l, k,
					rlb_report_fmt3(v, buf, sizeof(buf)));
			}
		fputs("</g>\n<g class=\"axis\" font-size=\"10\" fill=\"#333333\">\n", fp);
		/* node boundaries */
		for (k = gpn; k < ranks; k += gpn)
			fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333333\"/>\n",
				px + k * cw, y0, px + k * cw, y0 + layers * ch);
		fprintf(fp, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333333\"/>\n",
			px, y0, pw, layers * ch);
		tick = 1;
		while (tick * cw < 18)
			tick *= 2;
		for (k = 0; k < ranks; k += tick)
			rlb_svg_text(fp, px + (k + 0.5) * cw, y0 + layers * ch + 13, "middle", NULL,
			     rlb_svg_fmt_int(k, buf, sizeof(buf)));
		tick = 1;
		while (tick * ch < 12)
			tick *= 2;
		for (l = 0; l < layers; l += tick)
			rlb_svg_text(fp, px - 4, y0 + (l + 0.5) * ch + 3.5, "end", NULL,
			     rlb_svg_fmt_int(l, buf, sizeof(buf)));
		fputs("</g>\n", fp);
		rlb_svg_text(fp, px + pw / 2, y0 + layers * ch + 32, "middle", "font-size=\"13\"", "GPU");
		{
			char rot[96];

			snprintf(rot, sizeof(rot), "font-size=\"13\" transform=\"rotate(-90 %.1f %.1f)\"",
				 px - 36, y0 + layers * ch / 2);
			rlb_svg_text(fp, px - 36, y0 + layers * ch / 2, "middle", rot, "MoE layer");
		}
		px += pw + 110;
	}
	/* colour scale */
	{
		double lx = 90, ly = h - 34, lw = 240;

		/* an id of its own: a page holds a heatmap per group */
		fprintf(fp, "<defs><linearGradient id=\"heat-scale-%zu\">"
			"<stop offset=\"0\" stop-color=\"#2166ac\"/>"
			"<stop offset=\"0.5\" stop-color=\"#ffffff\"/>"
			"<stop offset=\"1\" stop-color=\"#b2182b\"/></linearGradient></defs>\n"
			"<g class=\"legend\" font-size=\"11\">\n"
			"<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"10\" fill=\"url(#heat-scale-%zu)\" stroke=\"#888888\"/>\n",
			g + 1, lx, ly, lw, g + 1);
		rlb_svg_text(fp, lx, ly + 23, "middle", NULL,
		     rlb_svg_strip_zeros((char *)rlb_report_fmt3(exp2(-d), buf, sizeof(buf))));
		rlb_svg_text(fp, lx + lw / 2, ly + 23, "middle", NULL, "1");
		rlb_svg_text(fp, lx + lw, ly + 23, "middle", NULL,
		     rlb_svg_strip_zeros((char *)rlb_report_fmt3(exp2(d), buf, sizeof(buf))));
		rlb_svg_text(fp, lx + lw + 12, ly + 9, "start", NULL,
		     "load over the layer's mean (log scale); dark lines: node boundaries");
		fputs("</g>\n", fp);
	}
	fputs("</svg>\n", fp);
	return 0;
}

/* ------------------------------------------------------------------ */
/* (5) step time per planned step.                                      */

/* A plan row of group G drawn in the steps chart. */
static int steps_row(const struct rlb_report_row *w, size_t g)
{
	return w->group == g && w->kind == RLB_RESULT_PLAN && w->nper_step > 0 &&
	       strcmp(w->policy, "ideal") != 0;
}

/* A steps chart line: a row's step times, or the ideal's. */
static double step_point(const void *ctx, size_t k, double *x)
{
	const struct rlb_report_step *s = &((const struct rlb_report_row *)ctx)->per_step[k];

	*x = s->step;
	return s->step_time_s;
}

static double ideal_point(const void *ctx, size_t k, double *x)
{
	const struct rlb_report_step *s = &((const struct rlb_report_row *)ctx)->per_step[k];

	*x = s->step;
	return s->ideal_s;
}

static int chart_steps(const struct rlb_report *r, size_t g, FILE *fp,
		       struct rlb_err *err)
{
	const struct rlb_report_row *ref = NULL;
	const char **labels = NULL, **colours = NULL;
	double x0 = 80, x1 = RLB_SVG_W - 20, y0, y1, h, lo = INFINITY, hi = 0;
	double slo = INFINITY, shi = -INFINITY, scale, tick;
	struct rlb_svg_axis xa, ya;
	struct plot pl;
	const char *unit;
	char name[256], yt[64], buf[32];
	size_t i, k, nl = 0, most = 0;
	int ret = 0;

	for (i = 0; i < r->nrows; i++) {
		const struct rlb_report_row *w = &r->rows[i];

		if (!steps_row(w, g))
			continue;
		if (!ref)
			ref = w;
		most = w->nper_step > most ? w->nper_step : most;
		for (k = 0; k < w->nper_step; k++) {
			const struct rlb_report_step *s = &w->per_step[k];

			lo = fmin(lo, fmin(s->step_time_s, isnan(s->ideal_s) ? INFINITY : s->ideal_s));
			hi = fmax(hi, s->step_time_s);
			slo = fmin(slo, s->step);
			shi = fmax(shi, s->step);
		}
	}
	if (most < 2)
		return rlb_err_set(err, RLB_ENOTFOUND, ref ? "one planned step" :
				   "no per-step results (plan summaries of older versions carry none)");
	labels = calloc(r->nrows + 1, sizeof(*labels));
	colours = calloc(r->nrows + 1, sizeof(*colours));
	if (!labels || !colours) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < r->nrows; i++)
		if (steps_row(&r->rows[i], g)) {
			labels[nl] = r->rows[i].label;
			colours[nl++] = rlb_report_colour(r->rows[i].label, i);
		}
	labels[nl] = "ideal";
	colours[nl] = rlb_report_colour("ideal", 0);
	rlb_report_time_unit(&hi, 1, &scale, &unit);
	rlb_svg_axis_nice(&ya, lo * scale * 0.95, hi * scale * 1.04);
	ya.lo /= scale;
	ya.hi /= scale;
	ya.step /= scale;
	rlb_svg_axis_nice(&xa, slo, shi);
	if (shi - slo <= 16) {
		xa.lo = slo;
		xa.hi = shi;
		xa.step = 1;
	}
	y0 = 44 + rlb_svg_legend_height(x0, labels, nl + 1);
	y1 = y0 + 260;
	h = y1 + 50;
	rlb_svg_open(fp, h, "Step time per planned step");
	rlb_svg_legend(fp, x0, 44, labels, colours, nl + 1, 2);
	rlb_svg_y_axis(fp, &ya, x0, y0, x1, y1, scale, rlb_svg_fmt_plain);
	fputs("<g class=\"axis\" font-size=\"11\" fill=\"#333333\">\n", fp);
	for (k = 0, tick = xa.lo; tick <= xa.hi + 1e-9 && k < 60; tick = xa.lo + ++k * xa.step)
		if (tick >= slo - 1e-9 && tick <= shi + 1e-9)
			rlb_svg_text(fp, rlb_svg_axis_pos(&xa, tick, x0 + 10, x1 - 10), y1 + 16,
				     "middle", NULL, rlb_svg_fmt_int(tick, buf, sizeof(buf)));
	fputs("</g>\n", fp);
	snprintf(yt, sizeof(yt), "step time (%s)", unit);
	rlb_svg_axis_titles(fp, x0, y0, x1, y1, h - 10, "step", yt);
	pl = (struct plot){ xa, ya, x0, x1, y0, y1 };
	fprintf(fp, "<g class=\"reference\">\n<path fill=\"none\" stroke=\"%s\" "
		"stroke-width=\"2\" stroke-dasharray=\"6 4\" d=\"", colours[nl]);
	line_path(fp, &pl, ideal_point, ref, ref->nper_step);
	fputs("\"/>\n</g>\n", fp);
	for (i = 0; i < r->nrows; i++) {
		const struct rlb_report_row *w = &r->rows[i];

		if (steps_row(w, g))
			line_series(fp, &pl, rlb_svg_display_name(w, name, sizeof(name)),
				    rlb_report_colour(w->label, i), step_point, w,
				    w->nper_step);
	}
	fputs("</svg>\n", fp);
out:
	free(labels);
	free(colours);
	return ret;
}

/* ------------------------------------------------------------------ */
/* (6) the sweep lines.                                                 */

/*
 * One line per result of metric M against the swept key's values.  The
 * ratios keep 1 in view with a reference line there; step times start at
 * 0, in the pivot table's unit.
 */
static int chart_sweep(const struct rlb_report *r, enum rlb_sweep_metric m,
		       FILE *fp, struct rlb_err *err)
{
	const char **vals = NULL, **labels = NULL, **colours = NULL, *unit;
	char **col = NULL;
	double *num = NULL, x0 = 80, x1 = RLB_SVG_W - 20, y0, y1, h, lo, hi, lh, scale;
	size_t nv = 0, nl = 0, i, j, k;
	int numeric = 1, ret = 0;
	struct rlb_svg_axis xa, ya;
	char buf[64], title[256], ytitle[64];

	if (!r->sweep_key)
		return rlb_err_set(err, RLB_ENOTFOUND, "no sweep");
	rlb_sweep_step_unit(r, &scale, &unit);
	lo = m == RLB_SWEEP_STEP ? 0 : 1;
	hi = lo;
	vals = calloc(r->nrows + 1, sizeof(*vals));
	labels = calloc(r->nrows + 1, sizeof(*labels));
	colours = calloc(r->nrows + 1, sizeof(*colours));
	num = calloc(r->nrows + 1, sizeof(*num));
	col = rlb_sweep_columns(r);
	if (!vals || !labels || !colours || !num || !col) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < r->nrows; i++) {
		const struct rlb_report_row *w = &r->rows[i];
		double v = rlb_sweep_value(w, m, scale);

		if (!rlb_sweep_row(w))
			continue;
		for (j = 0; j < nv && strcmp(vals[j], w->sweep_value); j++)
			;
		if (j == nv)
			vals[nv++] = w->sweep_value;
		for (j = 0; j < nl && strcmp(labels[j], col[i]); j++)
			;
		if (j == nl) {
			colours[nl] = rlb_report_colour(col[i], i);
			labels[nl++] = col[i];
		}
		if (!isnan(v)) {
			lo = fmin(lo, v);
			hi = fmax(hi, v);
		}
	}
	if (nv == 0) {
		ret = rlb_err_set(err, RLB_ENOTFOUND, "no sweep results");
		goto out;
	}
	for (j = 0; j < nv; j++) {
		char *end;

		errno = 0;
		num[j] = strtod(vals[j], &end);
		if (end == vals[j] || *end || errno)
			numeric = 0;
	}
	xa.log = 0;
	if (numeric) {
		double mn = num[0], mx = num[0];

		for (j = 1; j < nv; j++) {
			mn = fmin(mn, num[j]);
			mx = fmax(mx, num[j]);
		}
		if (mn > 0 && mx / mn >= 8) {
			xa.lo = mn / 1.15;
			xa.hi = mx * 1.15;
			xa.log = 1;
		} else {
			double pad = mx > mn ? (mx - mn) * 0.06 : 1;

			xa.lo = mn - pad;
			xa.hi = mx + pad;
		}
	} else {
		for (j = 0; j < nv; j++)
			num[j] = (double)j;
		xa.lo = -0.5;
		xa.hi = nv - 0.5;
	}
	snprintf(title, sizeof(title), "%s against %s",
		 rlb_sweep_title(r, m, ytitle, sizeof(ytitle)), r->sweep_key);
	if (m == RLB_SWEEP_STEP)
		snprintf(ytitle, sizeof(ytitle), "step time (%s)", unit);
	else
		snprintf(ytitle, sizeof(ytitle), "%s", m == RLB_SWEEP_IDEAL ?
			 "fraction of ideal" : "speedup over static (x)");
	lh = rlb_svg_legend_height(x0, labels, nl);
	y0 = 44 + lh;
	y1 = y0 + 260;
	h = y1 + 50;
	rlb_svg_open(fp, h, title);
	rlb_svg_legend(fp, x0, 44, labels, colours, nl, 1);
	rlb_svg_axis_nice(&ya, m == RLB_SWEEP_STEP ? 0 : lo - 0.02 * (hi - lo),
			  hi + 0.04 * (hi - lo));
	rlb_svg_y_axis(fp, &ya, x0, y0, x1, y1, 1, rlb_svg_fmt_plain);
	fputs("<g class=\"axis\" font-size=\"11\" fill=\"#333333\">\n", fp);
	for (j = 0; j < nv; j++)
		rlb_svg_text(fp, rlb_svg_axis_pos(&xa, num[j], x0, x1), y1 + 16, "middle", NULL, vals[j]);
	fputs("</g>\n", fp);
	rlb_svg_axis_titles(fp, x0, y0, x1, y1, h - 10, r->sweep_key, ytitle);
	if (m != RLB_SWEEP_STEP) {
		double y = rlb_svg_axis_pos(&ya, 1.0, y1, y0);

		fprintf(fp, "<g class=\"reference\">\n<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
			"y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n</g>\n",
			x0, y, x1, y,
			m == RLB_SWEEP_IDEAL ? rlb_report_colour("ideal", 0) : "#555555");
	}
	for (k = 0; k < nl; k++) {
		int pen = 0;

		fputs("<g class=\"series\" data-label=\"", fp);
		rlb_xml_escape(fp, labels[k]);
		fprintf(fp, "\">\n<path fill=\"none\" stroke=\"%s\" stroke-width=\"2\" d=\"",
			colours[k]);
		for (j = 0; j < nv; j++)
			for (i = 0; i < r->nrows; i++) {
				const struct rlb_report_row *w = &r->rows[i];
				double v = rlb_sweep_value(w, m, scale);

				if (!rlb_sweep_row(w) || strcmp(w->sweep_value, vals[j]) ||
				    strcmp(col[i], labels[k]) || isnan(v))
					continue;
				fprintf(fp, "%s%.1f %.1f ", pen ? "L" : "M",
					rlb_svg_axis_pos(&xa, num[j], x0, x1),
					rlb_svg_axis_pos(&ya, v, y1, y0));
				pen = 1;
				break;
			}
		fputs("\"/>\n", fp);
		for (j = 0; j < nv; j++)
			for (i = 0; i < r->nrows; i++) {
				const struct rlb_report_row *w = &r->rows[i];
				double v = rlb_sweep_value(w, m, scale);

				if (!rlb_sweep_row(w) || strcmp(w->sweep_value, vals[j]) ||
				    strcmp(col[i], labels[k]) || isnan(v))
					continue;
				fprintf(fp, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>",
					rlb_svg_axis_pos(&xa, num[j], x0, x1),
					rlb_svg_axis_pos(&ya, v, y1, y0), colours[k]);
				rlb_xml_escape(fp, labels[k]);
				fputs(" at ", fp);
				rlb_xml_escape(fp, vals[j]);
				fprintf(fp, ": %s</title></circle>\n",
					rlb_report_fmt3(v, buf, sizeof(buf)));
				break;
			}
		fputs("</g>\n", fp);
	}
	fputs("</svg>\n", fp);
out:
	free(vals);
	free(labels);
	free(colours);
	free(num);
	free(col);
	return ret;
}

static int report_chart_svg_c(const struct rlb_report *r, enum rlb_report_chart c,
			      size_t g, const struct rlb_report_chart_opts *o,
			      FILE *fp, struct rlb_err *err)
{
	int ret;

	if (!r->finished)
		return rlb_err_set(err, RLB_EINVAL, "the report is not finished");
	if (g >= r->ngroups && c < RLB_CHART_SWEEP_SPEEDUP)
		return rlb_err_set(err, RLB_EINVAL, "no group %zu", g + 1);
	switch (c) {
	case RLB_CHART_TOKENS:
		ret = rlb_svg_chart_tokens(r, g, fp, err);
		break;
	case RLB_CHART_MICROBATCH:
		ret = chart_microbatch(r, g, o, fp, err);
		break;
	case RLB_CHART_BREAKDOWN:
		ret = rlb_svg_chart_breakdown(r, g, fp, err);
		break;
	case RLB_CHART_HEATMAP:
		ret = chart_heatmap(r, g, fp, err);
		break;
	case RLB_CHART_STEPS:
		ret = chart_steps(r, g, fp, err);
		break;
	case RLB_CHART_SWEEP_SPEEDUP:
		ret = chart_sweep(r, RLB_SWEEP_SPEEDUP, fp, err);
		break;
	case RLB_CHART_SWEEP_IDEAL:
		ret = chart_sweep(r, RLB_SWEEP_IDEAL, fp, err);
		break;
	case RLB_CHART_SWEEP_STEP:
		ret = chart_sweep(r, RLB_SWEEP_STEP, fp, err);
		break;
	default:
		return rlb_err_set(err, RLB_EINVAL, "unknown chart");
	}
	if (ret == 0 && ferror(fp))
		return rlb_err_set(err, RLB_EIO, "write error");
	return ret;
}

/* report_chart_svg_c in the C locale (clocale.h) */
int rlb_report_chart_svg(const struct rlb_report *r, enum rlb_report_chart c,
			 size_t g, const struct rlb_report_chart_opts *o,
			 FILE *fp, struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = report_chart_svg_c(r, c, g, o, fp, err);

	rlb_clocale_end(before);
	return ret;
}

/*
 * Write chart C of group G to its PATH.tmp in DIR and sync it; *have is
 * 0 (and af released) when the report has no data for the chart.
 */
static int write_one(const struct rlb_report *r, enum rlb_report_chart c,
		     size_t g, const struct rlb_report_chart_opts *o,
		     const char *dir, struct rlb_atomic_file *af, int *have,
		     struct rlb_err *err)
{
	struct rlb_err e2 = {0};
	char path[4096];
	struct stat st;
	int ret;

	*have = 0;
	if (r->ngroups > 1 && c < RLB_CHART_SWEEP_SPEEDUP)
		snprintf(path, sizeof(path), "%s/%s-g%zu.svg", dir,
			 rlb_report_chart_name(c), g + 1);
	else
		snprintf(path, sizeof(path), "%s/%s.svg", dir,
			 rlb_report_chart_name(c));
	ret = rlb_atomic_open(af, path, err);
	if (ret)
		return ret;
	fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", af->fp);
	ret = rlb_report_chart_svg(r, c, g, o, af->fp, &e2);
	if (ret == RLB_ENOTFOUND) {
		rlb_atomic_abort(af);
		return 0;
	}
	/* what would fail the rename once other charts are in place */
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		rlb_atomic_abort(af);
		return rlb_err_set(err, RLB_EIO, "cannot write chart '%s': it is a directory",
				   path);
	}
	if (ret && ret != RLB_EIO) {
		rlb_atomic_abort(af);
		if (err)
			*err = e2;
		return ret;
	}
	ret = rlb_atomic_sync_after(af, ret, err);
	*have = ret == 0;
	return ret;
}

static int report_write_svgs_c(const struct rlb_report *r,
			       const struct rlb_report_chart_opts *o,
			       const char *dir, struct rlb_atomic_file **files,
			       size_t *n, struct rlb_err *err)
{
	size_t per_group = RLB_CHART_SWEEP_SPEEDUP - RLB_CHART_TOKENS;
	size_t max = r->ngroups * per_group + RLB_CHART_COUNT - RLB_CHART_SWEEP_SPEEDUP;
	struct rlb_atomic_file *af;
	size_t g, i;
	int c, ret = 0, have, made;

	*files = NULL;
	*n = 0;
	made = mkdir(dir, 0777) == 0;
	if (!made && errno != EEXIST)
		return rlb_err_errno(err, RLB_EIO, "cannot create '%s'", dir);
	af = calloc(max ? max : 1, sizeof(*af));
	if (!af)
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (g = 0; g < r->ngroups && !ret; g++)
		for (c = RLB_CHART_TOKENS; c < RLB_CHART_SWEEP_SPEEDUP && !ret; c++) {
			ret = write_one(r, (enum rlb_report_chart)c, g, o, dir,
					&af[*n], &have, err);
			*n += (size_t)have;
		}
	for (c = RLB_CHART_SWEEP_SPEEDUP; r->sweep_key && c < RLB_CHART_COUNT && !ret; c++) {
		ret = write_one(r, (enum rlb_report_chart)c, 0, o, dir, &af[*n],
				&have, err);
		*n += (size_t)have;
	}
	if (ret) {
		for (i = 0; i < *n; i++)
			rlb_atomic_abort(&af[i]);
		free(af);
		*n = 0;
		if (made)	/* no folder left behind by a failure */
			rmdir(dir);
		return ret;
	}
	*files = af;
	return 0;
}

/* report_write_svgs_c in the C locale (clocale.h) */
int rlb_report_write_svgs(const struct rlb_report *r,
			  const struct rlb_report_chart_opts *o,
			  const char *dir, struct rlb_atomic_file **files,
			  size_t *n, struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = report_write_svgs_c(r, o, dir, files, n, err);

	rlb_clocale_end(before);
	return ret;
}
