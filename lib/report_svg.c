/*
 * report_svg.c - drawing the report's SVG charts: axes with nice ticks,
 * titles, legends, series colours, and the two charts every result has
 * (tokens/s against the ideal, the step time stacked by part).  Every
 * data series is one <g class="series">, so tests can count them.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "report_impl.h"
#include "util.h"

const char *rlb_report_colour(const char *label, size_t index)
{
	static const struct {
		const char *label, *colour;
	} fixed[] = {
		{ "static", "#7f7f7f" }, { "eplb", "#4e79a7" },
		{ "eplb-oracle", "#76b7b2" }, { "replicate", "#f28e2b" },
		{ "relibra", "#e15759" }, { "ideal", "#59a14f" },
	};
	static const char *const palette[] = {
		"#b07aa1", "#9c755f", "#edc948", "#ff9da7", "#8cd17d",
		"#499894", "#d37295", "#79706e",
	};
	size_t i;

	for (i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (label && strcmp(label, fixed[i].label) == 0)
			return fixed[i].colour;
	return palette[index % (sizeof(palette) / sizeof(palette[0]))];
}

void rlb_xml_escape(FILE *fp, const char *s)
{
	size_t n;

	for (; s && *s; s += n) {
		n = rlb_utf8_len(s);
		if (n == 0) {
			fputs("\xef\xbf\xbd", fp);	/* U+FFFD for a bad byte */
			n = 1;
			continue;
		}
		if (n > 1) {
			fwrite(s, 1, n, fp);
			continue;
		}
		switch (*s) {
		case '&': fputs("&amp;", fp); break;
		case '<': fputs("&lt;", fp); break;
		case '>': fputs("&gt;", fp); break;
		case '"': fputs("&quot;", fp); break;
		case '\'': fputs("&apos;", fp); break;
		default:
			if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n')
				fputc(*s, fp);
		}
	}
}

/* ------------------------------------------------------------------ */
/* Drawing helpers.                                                     */

/* Round [lo, hi] out to about five ticks of 1, 2, 2.5 or 5 times 10^k. */
void rlb_svg_axis_nice(struct rlb_svg_axis *a, double lo, double hi)
{
	static const double mult[] = { 1, 2, 2.5, 5, 10 };
	double span, raw, mag;
	size_t i;

	memset(a, 0, sizeof(*a));
	/* a figure near DBL_MAX, times the callers' headroom, is inf */
	lo = fmax(lo, -DBL_MAX);
	hi = fmin(hi, DBL_MAX);
	if (!(hi > lo)) {
		double d = fabs(hi) > 0 ? fabs(hi) * 0.1 : 1;

		lo -= d;
		hi += d;
	}
	span = hi - lo;
	raw = span / 5;
	mag = pow(10, floor(log10(raw)));
	for (i = 0; i < sizeof(mult) / sizeof(mult[0]); i++)
		if (mult[i] * mag >= raw * 0.999)
			break;
	a->step = mult[i < 5 ? i : 4] * mag;
	a->lo = fmax(floor(lo / a->step + 1e-9) * a->step, -DBL_MAX);
	a->hi = fmin(ceil(hi / a->step - 1e-9) * a->step, DBL_MAX);
}

/* Position of v on an axis drawn from p0 (at lo) to p1 (at hi). */
double rlb_svg_axis_pos(const struct rlb_svg_axis *a, double v, double p0, double p1)
{
	double t;

	if (a->log)
		t = (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
	else
		t = (v - a->lo) / (a->hi - a->lo);
	return p0 + t * (p1 - p0);
}

void rlb_svg_open(FILE *fp, double h, const char *title)
{
	fprintf(fp, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
		"height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"%s\" "
		"font-size=\"12\" role=\"img\">\n<title>", RLB_SVG_W, h, RLB_SVG_W, h, RLB_SVG_FONT);
	rlb_xml_escape(fp, title);
	fprintf(fp, "</title>\n<rect width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n"
		"<text x=\"%.1f\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" "
		"font-weight=\"bold\">", RLB_SVG_W, h, RLB_SVG_W / 2);
	rlb_xml_escape(fp, title);
	fputs("</text>\n", fp);
}

void rlb_svg_text(FILE *fp, double x, double y, const char *anchor,
		 const char *extra, const char *s)
{
	fprintf(fp, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s%s>", x, y,
		anchor, extra ? " " : "", extra ? extra : "");
	rlb_xml_escape(fp, s);
	fputs("</text>\n", fp);
}

/* Axis titles: X centred under the plot, Y rotated left of it. */
void rlb_svg_axis_titles(FILE *fp, double x0, double y0, double x1, double y1,
			double xt_y, const char *xt, const char *yt)
{
	char rot[96];

	if (xt)
		rlb_svg_text(fp, (x0 + x1) / 2, xt_y, "middle", "font-size=\"13\"", xt);
	if (yt) {
		snprintf(rot, sizeof(rot), "font-size=\"13\" transform=\"rotate(-90 %.1f %.1f)\"",
			 x0 - 58, (y0 + y1) / 2);
		rlb_svg_text(fp, x0 - 58, (y0 + y1) / 2, "middle", rot, yt);
	}
}

/*
 * The label of tick V on an axis of ticks STEP apart: FMT's, unless its 3
 * significant figures lose what tells V from its neighbours (1.025 as
 * "1.02" on a 0.025 step, 1.005 as "1" next to 1): then V with as many
 * decimals as the step has.
 */
static const char *tick_label(rlb_svg_tick_fmt fmt, double v, double step,
			      char *buf, size_t size)
{
	static const char prefix[] = "kMGT";
	const char *p;
	char *end;
	double back;
	int d;

	fmt(v, buf, size);
	back = strtod(buf, &end);
	if (end != buf && *end && !end[1] && (p = strchr(prefix, *end)))
		back *= pow(1000, (double)(p - prefix + 1));
	else if (end == buf || *end)
		return buf;
	if (fabs(back - v) <= step * 1e-3)
		return buf;
	for (d = 0; d < 15; d++) {
		double s = step * pow(10, d);

		if (fabs(s - round(s)) <= s * 1e-6)
			break;
	}
	snprintf(buf, size, "%.*f", d, v);
	return rlb_svg_strip_zeros(buf);
}

/* Horizontal grid lines and labels of a Y axis, the plot frame. */
void rlb_svg_y_axis(FILE *fp, const struct rlb_svg_axis *a, double x0, double y0,
		   double x1, double y1, double scale, rlb_svg_tick_fmt fmt)
{
	char buf[48];
	double v;
	int i;

	fputs("<g class=\"axis\" font-size=\"11\" fill=\"#333333\">\n", fp);
	for (i = 0, v = a->lo; isfinite(v) && v <= a->hi + a->step * 1e-6 && i < 40;
	     v = a->lo + ++i * a->step) {
		double y = rlb_svg_axis_pos(a, v, y1, y0);

		fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
			"stroke=\"#dddddd\"/>\n", x0, y, x1, y);
		rlb_svg_text(fp, x0 - 6, y + 4, "end", NULL,
		     tick_label(fmt, fabs(v) < a->step * 1e-6 ? 0 : v * scale,
				a->step * scale, buf, sizeof(buf)));
	}
	fprintf(fp, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
		"fill=\"none\" stroke=\"#888888\"/>\n</g>\n", x0, y0, x1 - x0, y1 - y0);
}

/*
 * A legend of N swatches in rows from (x, y), wrapping at the chart's
 * width; LINE draws line swatches (2: the last one dashed, for the
 * reference line a chart draws dashed), else squares.  Returns the height.
 */
/* Height of rlb_svg_legend() for these labels, without drawing. */
double rlb_svg_legend_height(double x, const char *const *labels, size_t n)
{
	double cx = x, h = 18;
	size_t i;

	for (i = 0; i < n; i++) {
		double w = 28 + 7.0 * strlen(labels[i]);

		if (cx + w > RLB_SVG_W - 10 && cx > x) {
			cx = x;
			h += 18;
		}
		cx += w + 10;
	}
	return h;
}

double rlb_svg_legend(FILE *fp, double x, double y, const char *const *labels,
		     const char *const *colours, size_t n, int line)
{
	double cx = x, cy = y;
	size_t i;

	fputs("<g class=\"legend\">\n", fp);
	for (i = 0; i < n; i++) {
		double w = 28 + 7.0 * strlen(labels[i]);

		if (cx + w > RLB_SVG_W - 10 && cx > x) {
			cx = x;
			cy += 18;
		}
		if (line)
			fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
				"stroke=\"%s\" stroke-width=\"3\"%s/>\n", cx, cy - 4,
				cx + 16, cy - 4, colours[i],
				line == 2 && i + 1 == n ? " stroke-dasharray=\"6 4\"" : "");
		else
			fprintf(fp, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" "
				"fill=\"%s\"/>\n", cx + 2, cy - 10, colours[i]);
		rlb_svg_text(fp, cx + 20, cy, "start", NULL, labels[i]);
		cx += w + 10;
	}
	fputs("</g>\n", fp);
	return cy - y + 18;
}

/* Tick labels: trailing zeros of the fraction dropped ("1.5", "50k"). */
const char *rlb_svg_strip_zeros(char *buf)
{
	char *dot = strchr(buf, '.'), *end, *cut;

	if (!dot)
		return buf;
	for (end = dot + 1; *end >= '0' && *end <= '9'; end++)
		;
	for (cut = end; cut > dot + 1 && cut[-1] == '0'; cut--)
		;
	if (cut == dot + 1)
		cut = dot;
	memmove(cut, end, strlen(end) + 1);
	return buf;
}

const char *rlb_svg_fmt_plain(double v, char *buf, size_t size)
{
	return rlb_svg_strip_zeros((char *)rlb_report_fmt3(v, buf, size));
}

static const char *fmt_si_tick(double v, char *buf, size_t size)
{
	return rlb_svg_strip_zeros((char *)rlb_report_fmt_si(v, buf, size));
}

const char *rlb_svg_fmt_int(double v, char *buf, size_t size)
{
	snprintf(buf, size, "%.0f", v);
	return buf;
}

/* Visible (charted) rows of group g: every row but the ideal's, in order. */
static size_t group_rows(const struct rlb_report *r, size_t g, size_t *idx,
			 int with_ideal)
{
	size_t i, n = 0;

	for (i = 0; i < r->nrows; i++)
		if (r->rows[i].group == g &&
		    (with_ideal || strcmp(r->rows[i].policy, "ideal") != 0 ||
		     r->rows[i].kind != RLB_RESULT_PLAN))
			idx[n++] = i;
	return n;
}

const char *rlb_svg_display_name(const struct rlb_report_row *w, char *buf,
				size_t size)
{
	snprintf(buf, size, "%s%s", w->label,
		 w->kind == RLB_RESULT_TRAIN_STEP ? " (measured)" : "");
	return buf;
}

/*
 * Labels under bars: straight when they fit the slot, else slanted, and
 * then cut to the characters that fit left of the bar (the whole label in
 * a tooltip).  Characters are about 6.5 px wide, slanted 35 degrees (cos
 * 0.819, sin 0.574); bar i is centred at x0 + (i + 0.5) slot.
 */
static size_t label_chars(const char *s)
{
	size_t n = 0, len;

	for (; *s; s += len ? len : 1, n++)
		len = rlb_utf8_len(s);
	return n;
}

static size_t slant_room(double cx)
{
	return cx > 16 ? (size_t)((cx - 8) / (6.5 * 0.819)) : 1;
}

static double bar_labels_height(const struct rlb_report *r, const size_t *idx,
				size_t n, double x0, double slot, int *slant)
{
	char name[256];
	size_t i, longest = 0, shown = 0;

	for (i = 0; i < n; i++) {
		size_t l = label_chars(rlb_svg_display_name(&r->rows[idx[i]], name, sizeof(name)));
		size_t room = slant_room(x0 + slot * (i + 0.5));

		longest = l > longest ? l : longest;
		l = l < room ? l : room;
		shown = l > shown ? l : shown;
	}
	*slant = longest * 6.5 > slot - 4;
	return *slant ? 10 + shown * 6.5 * 0.574 : 22;
}

static void bar_label(FILE *fp, double x, double y, int slant, const char *s)
{
	char head[256];
	size_t room = slant_room(x), k, len, cut = 0;

	if (!slant) {
		rlb_svg_text(fp, x, y + 16, "middle", NULL, s);
		return;
	}
	fprintf(fp, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
		"transform=\"rotate(-35 %.1f %.1f)\">", x, y + 12, x, y + 12);
	if (label_chars(s) <= room) {
		rlb_xml_escape(fp, s);
		fputs("</text>\n", fp);
		return;
	}
	/* ROOM - 1 characters and an ellipsis */
	for (k = 0; k + 1 < room && cut + 4 < sizeof(head); k++, cut += len ? len : 1)
		len = rlb_utf8_len(s + cut);
	memcpy(head, s, cut);
	head[cut] = '\0';
	rlb_xml_escape(fp, head);
	fputs("\xe2\x80\xa6<title>", fp);
	rlb_xml_escape(fp, s);
	fputs("</title></text>\n", fp);
}

/* ------------------------------------------------------------------ */
/* (1) tokens/s per result, the ideal as a reference line.              */

int rlb_svg_chart_tokens(const struct rlb_report *r, size_t g, FILE *fp,
			struct rlb_err *err)
{
	char buf[64], name[256];
	size_t *idx, n, i;
	double ideal = NAN, top = 0, x0 = 80, x1 = RLB_SVG_W - 20, y0, y1, slot, lab, h;
	struct rlb_svg_axis a;
	int slant;

	idx = calloc(r->nrows, sizeof(*idx));
	if (!idx)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	n = group_rows(r, g, idx, 0);
	for (i = 0; i < r->nrows; i++) {
		const struct rlb_report_row *w = &r->rows[i];

		if (w->group != g || w->kind != RLB_RESULT_PLAN)
			continue;
		if (isnan(ideal) && !isnan(w->ideal_tokens_per_s))
			ideal = w->ideal_tokens_per_s;
		if (strcmp(w->policy, "ideal") == 0)
			ideal = w->tokens_per_s;
	}
	if (n == 0) {
		free(idx);
		return rlb_err_set(err, RLB_ENOTFOUND, "no result to chart");
	}
	for (i = 0; i < n; i++)
		top = fmax(top, r->rows[idx[i]].tokens_per_s);
	if (!isnan(ideal))
		top = fmax(top, ideal);
	rlb_svg_axis_nice(&a, 0, top * 1.08);
	slot = (x1 - x0) / n;
	lab = bar_labels_height(r, idx, n, x0, slot, &slant);
	y0 = 44;
	y1 = y0 + 260;
	h = y1 + lab + 30;
	rlb_svg_open(fp, h, "Throughput per result (tokens/s)");
	rlb_svg_y_axis(fp, &a, x0, y0, x1, y1, 1, fmt_si_tick);
	rlb_svg_axis_titles(fp, x0, y0, x1, y1, h - 8, NULL, "tokens/s");
	for (i = 0; i < n; i++) {
		const struct rlb_report_row *w = &r->rows[idx[i]];
		double cx = x0 + slot * (i + 0.5), bw = fmin(slot * 0.6, 90);
		double y = rlb_svg_axis_pos(&a, w->tokens_per_s, y1, y0);

		rlb_svg_display_name(w, name, sizeof(name));
		fputs("<g class=\"series\" data-label=\"", fp);
		rlb_xml_escape(fp, name);
		fprintf(fp, "\">\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
			"fill=\"%s\"%s/>\n", cx - bw / 2, y, bw, y1 - y,
			rlb_report_colour(w->label, idx[i]),
			w->kind == RLB_RESULT_TRAIN_STEP ? " fill-opacity=\"0.55\" stroke=\"#333333\" stroke-dasharray=\"4 2\"" : "");
		/* a white halo keeps the value legible across the ideal line */
		rlb_svg_text(fp, cx, y - 5, "middle",
			     "font-size=\"11\" stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\"",
			     rlb_report_fmt_si(w->tokens_per_s, buf, sizeof(buf)));
		bar_label(fp, cx, y1, slant, name);
		fputs("</g>\n", fp);
	}
	if (!isnan(ideal)) {
		double y = rlb_svg_axis_pos(&a, ideal, y1, y0);
		char lbl[96];

		snprintf(lbl, sizeof(lbl), "ideal %s tokens/s",
			 rlb_report_fmt_si(ideal, buf, sizeof(buf)));
		/*
		 * The line's label is a key above the plot, where no bar or
		 * bar value can reach it: a dash sample, then the text.
		 */
		fprintf(fp, "<g class=\"reference\">\n<line x1=\"%.1f\" y1=\"%.1f\" "
			"x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\" "
			"stroke-dasharray=\"6 4\"/>\n", x0, y, x1, y,
			rlb_report_colour("ideal", 0));
		fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
			"stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\n",
			x1 - 6 - 5.8 * (double)strlen(lbl) - 24, y0 - 10,
			x1 - 6 - 5.8 * (double)strlen(lbl), y0 - 10,
			rlb_report_colour("ideal", 0));
		rlb_svg_text(fp, x1, y0 - 6, "end", "font-size=\"11\" fill=\"#2e7d32\"", lbl);
		fputs("</g>\n", fp);
	}
	fputs("</svg>\n", fp);
	free(idx);
	return 0;
}

/* ------------------------------------------------------------------ */
/* (3) step time stacked by part.                                       */

enum {
	SEG_COMPUTE, SEG_A2A, SEG_SENDERS, SEG_RECEIVERS, SEG_COPIES,
	SEG_MIGRATION, SEG_PLANNING,
	SEG_REST,		/* what a measured step holds beyond its parts */
	NSEG
};

/* Has the row the all-to-all's informational split (a plan's breakdown)? */
static int a2a_split(const struct rlb_report_row *w)
{
	return !isnan(w->breakdown[RLB_PART_A2A_EVEN]) &&
	       !isnan(w->breakdown[RLB_PART_A2A_SENDERS]) &&
	       !isnan(w->breakdown[RLB_PART_A2A]);
}

/*
 * Segment s of a row's bar.  With the split, the all-to-all is stacked as
 * its time at even copies, then what the busiest sender and the busiest
 * receiver add (docs/cost-model.md); without it, as one segment.
 */
static double segment(const struct rlb_report_row *w, int s)
{
	static const int parts[NSEG][2] = {
		[SEG_COMPUTE] = { RLB_PART_DENSE, RLB_PART_EXPERT },
		[SEG_A2A] = { RLB_PART_A2A, 0 },
		[SEG_COPIES] = { RLB_PART_REPLICATION, RLB_PART_GRAD_REDUCE },
		[SEG_MIGRATION] = { RLB_PART_MIGRATION, 0 },
		[SEG_PLANNING] = { RLB_PART_PLANNING, 0 },
	};	/* 0 (the total) marks no part */
	const double *bd = w->breakdown;
	double v = 0;
	int k;

	switch (s) {
	case SEG_A2A:
		if (a2a_split(w))
			return bd[RLB_PART_A2A_EVEN];
		break;
	case SEG_SENDERS:
		return a2a_split(w) ?
			fmax(bd[RLB_PART_A2A_SENDERS] - bd[RLB_PART_A2A_EVEN], 0) : 0;
	case SEG_RECEIVERS:
		return a2a_split(w) ?
			fmax(bd[RLB_PART_A2A] - bd[RLB_PART_A2A_SENDERS], 0) : 0;
	case SEG_REST:
		if (w->kind != RLB_RESULT_TRAIN_STEP || !(w->step_time_s > 0))
			return 0;
		for (k = 0; k < SEG_REST; k++)
			v += segment(w, k);
		return fmax(w->step_time_s - v, 0);
	}
	for (k = 0; k < 2; k++)
		if (parts[s][k] > 0 && !isnan(bd[parts[s][k]]))
			v += bd[parts[s][k]];
	return v;
}

int rlb_svg_chart_breakdown(const struct rlb_report *r, size_t g, FILE *fp,
			   struct rlb_err *err)
{
	static const char *const seg_name[NSEG] = {
		"compute (dense + experts)", "all-to-all",
		"all-to-all: uneven senders", "all-to-all: uneven receivers",
		"replication + gradient reduction", "migration", "planning",
		"rest of the measured step (not broken down)",
	};
	static const char *const seg_colour[NSEG] = {
		"#4e79a7", "#f28e2b", "#ffbe7d", "#f1ce63", "#59a14f", "#e15759",
		"#b07aa1", "#bab0ac",
	};
	/* the split and the rest only where some row has them */
	int shown[NSEG] = { 1, 1, 0, 0, 1, 1, 1, 0 }, seg[NSEG], nseg = 0;
	const char *name_of[NSEG], *colour_of[NSEG];
	char buf[64], name[256], yt[64];
	size_t *idx, n, i;
	double top = 0, *tot, scale, x0 = 80, x1 = RLB_SVG_W - 20, y0, y1, slot, lab, h;
	const char *unit;
	struct rlb_svg_axis a;
	int s, k, slant;

	idx = calloc(r->nrows, sizeof(*idx));
	tot = calloc(r->nrows + 1, sizeof(*tot));
	if (!idx || !tot) {
		free(idx);
		free(tot);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	n = group_rows(r, g, idx, 1);
	for (i = 0; i < n; i++) {
		const struct rlb_report_row *w = &r->rows[idx[i]];

		if (a2a_split(w))
			shown[SEG_SENDERS] = shown[SEG_RECEIVERS] = 1;
		if (segment(w, SEG_REST) > 0)
			shown[SEG_REST] = 1;
		for (s = 0; s < NSEG; s++)
			tot[i] += segment(w, s);
		top = fmax(top, tot[i]);
	}
	if (n == 0 || top <= 0) {
		free(idx);
		free(tot);
		return rlb_err_set(err, RLB_ENOTFOUND, "no step-time breakdown");
	}
	for (s = 0; s < NSEG; s++)
		if (shown[s]) {
			seg[nseg] = s;
			name_of[nseg] = seg_name[s];
			colour_of[nseg++] = seg_colour[s];
		}
	rlb_report_time_unit(&top, 1, &scale, &unit);
	rlb_svg_axis_nice(&a, 0, top * scale * 1.08);
	a.lo /= scale;
	a.hi /= scale;
	a.step /= scale;
	slot = (x1 - x0) / n;
	lab = bar_labels_height(r, idx, n, x0, slot, &slant);
	y0 = 44 + rlb_svg_legend_height(x0, name_of, nseg);
	y1 = y0 + 260;
	h = y1 + lab + 30;
	rlb_svg_open(fp, h, "Step time by part");
	rlb_svg_legend(fp, x0, 44, name_of, colour_of, nseg, 0);
	rlb_svg_y_axis(fp, &a, x0, y0, x1, y1, scale, rlb_svg_fmt_plain);
	snprintf(yt, sizeof(yt), "time per step (%s)", unit);
	rlb_svg_axis_titles(fp, x0, y0, x1, y1, h - 8, NULL, yt);
	for (k = 0; k < nseg; k++) {
		s = seg[k];
		fprintf(fp, "<g class=\"series\" data-label=\"%s\" fill=\"%s\">\n",
			seg_name[s], seg_colour[s]);
		for (i = 0; i < n; i++) {
			const struct rlb_report_row *w = &r->rows[idx[i]];
			double base = 0, v = segment(w, s), cx, bw, ya, yb;
			int b;

			for (b = 0; b < s; b++)
				base += segment(w, b);
			if (v <= 0)
				continue;
			cx = x0 + slot * (i + 0.5);
			bw = fmin(slot * 0.6, 90);
			ya = rlb_svg_axis_pos(&a, base + v, y1, y0);
			yb = rlb_svg_axis_pos(&a, base, y1, y0);
			fprintf(fp, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.2f\"%s/>\n",
				cx - bw / 2, ya, bw, yb - ya,
				w->kind == RLB_RESULT_TRAIN_STEP ? " fill-opacity=\"0.6\"" : "");
		}
		fputs("</g>\n", fp);
	}
	fputs("<g class=\"labels\">\n", fp);
	for (i = 0; i < n; i++) {
		const struct rlb_report_row *w = &r->rows[idx[i]];
		double cx = x0 + slot * (i + 0.5);

		rlb_svg_text(fp, cx, rlb_svg_axis_pos(&a, tot[i], y1, y0) - 5, "middle",
		     "font-size=\"11\"", rlb_report_fmt3(tot[i] * scale, buf, sizeof(buf)));
		bar_label(fp, cx, y1, slant, rlb_svg_display_name(w, name, sizeof(name)));
	}
	fputs("</g>\n</svg>\n", fp);
	free(idx);
	free(tot);
	return 0;
}

