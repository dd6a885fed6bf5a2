/*
 * report_html.c - the report as one self-contained page: XHTML that is
 * also HTML5 (well-formed XML, so xmllint checks it), the tables and
 * notes of every group, measured against simulated, and the charts as
 * inline SVG.  No scripts and no external resources.
 */
#include <stdio.h>
#include <string.h>

#include "clocale.h"
#include "relibra.h"
#include "report.h"
#include "report_impl.h"

static const char style[] =
	"body { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; "
	"color: #222; margin: 24px auto; max-width: 1100px; padding: 0 16px; }\n"
	"h1 { font-size: 24px; margin-bottom: 4px; }\n"
	"h2 { font-size: 18px; margin-top: 36px; border-bottom: 1px solid #ccc; "
	"padding-bottom: 4px; }\n"
	"h3 { font-size: 15px; margin-top: 24px; }\n"
	"table { border-collapse: collapse; margin: 8px 0 12px; font-size: 13px; }\n"
	"th, td { padding: 4px 8px; border-bottom: 1px solid #e4e4e4; }\n"
	"th { background: #f4f4f4; text-align: right; vertical-align: bottom; }\n"
	"th.name, td.name { text-align: left; white-space: nowrap; }\n"
	"td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }\n"
	"figure { margin: 18px 0; }\n"
	"figcaption { font-size: 13px; color: #555; max-width: 760px; }\n"
	"p.note, ul.notes { font-size: 13px; color: #8a4b00; }\n"
	"p.missing { font-size: 13px; color: #777; font-style: italic; }\n"
	"p.legend, footer { font-size: 12px; color: #555; }\n"
	"svg { max-width: 100%; height: auto; }\n";

static void html_table(const struct rlb_cells *t, FILE *fp)
{
	size_t i, j, left = t->left ? t->left : 1;

	fputs("<table>\n", fp);
	for (i = 0; i < t->rows; i++) {
		fputs("<tr>", fp);
		for (j = 0; j < t->cols; j++) {
			const char *tag = i == 0 ? "th" : "td";

			fprintf(fp, "<%s class=\"%s\">", tag,
				j < left ? "name" : "num");
			rlb_xml_escape(fp, t->cell[i * t->cols + j]);
			fprintf(fp, "</%s>", tag);
		}
		fputs("</tr>\n", fp);
	}
	fputs("</table>\n", fp);
}

static void caption(FILE *fp, const char *s)
{
	fputs("<figcaption>", fp);
	rlb_xml_escape(fp, s);
	fputs("</figcaption>\n", fp);
}

/* One chart as a figure, or a line saying why it is missing. */
static int figure(const struct rlb_report *r, enum rlb_report_chart c,
		  size_t g, const struct rlb_report_chart_opts *o,
		  const char *text, FILE *fp, struct rlb_err *err)
{
	struct rlb_err e2 = {0};
	int ret;

	fprintf(fp, "<figure class=\"chart\" id=\"%s-%zu\">\n",
		rlb_report_chart_name(c), g + 1);
	ret = rlb_report_chart_svg(r, c, g, o, fp, &e2);
	if (ret == RLB_ENOTFOUND) {
		fputs("<p class=\"missing\">", fp);
		rlb_xml_escape(fp, rlb_report_chart_name(c));
		fputs(" chart not drawn: ", fp);
		rlb_xml_escape(fp, e2.msg);
		fputs(".</p>\n</figure>\n", fp);
		return 0;
	}
	if (ret) {
		if (err)
			*err = e2;
		return ret;
	}
	caption(fp, text);
	fputs("</figure>\n", fp);
	return 0;
}

static int group_section(const struct rlb_report *r, size_t g,
			 const struct rlb_report_chart_opts *o, FILE *fp,
			 struct rlb_err *err)
{
	const struct rlb_report_group *gr = &r->groups[g];
	struct rlb_cells t;
	char title[1024], cap[512];
	long layer;
	size_t i;
	int ret;

	rlb_report_group_title(r, g, title, sizeof(title));
	fprintf(fp, "<section id=\"group-%zu\">\n<h2>", g + 1);
	rlb_xml_escape(fp, title);
	fputs("</h2>\n", fp);
	if (rlb_cells_group(r, g, &t))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	html_table(&t, fp);
	rlb_cells_release(&t);
	if (gr->nnotes) {
		fputs("<ul class=\"notes\">\n", fp);
		for (i = 0; i < gr->nnotes; i++) {
			fputs("<li>", fp);
			rlb_xml_escape(fp, gr->notes[i]);
			fputs("</li>\n", fp);
		}
		fputs("</ul>\n", fp);
	}
	if (rlb_cells_measured(r, g, &t))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	if (t.rows) {
		fputs("<h3>Measured against simulated, per step</h3>\n", fp);
		html_table(&t, fp);
	}
	rlb_cells_release(&t);

	ret = figure(r, RLB_CHART_TOKENS, g, o,
		     "Simulated (and measured) training throughput of each result; the dashed line is the perfectly balanced ideal.",
		     fp, err);
	if (ret)
		return ret;
	layer = rlb_report_chart_layer(r, g, o);
	snprintf(cap, sizeof(cap),
		 "For each micro-batch of the last planned step, the expert rows of the busiest GPU over the mean in MoE layer %ld (%s); 1 is perfect balance.",
		 layer, o && o->layer >= 0 && o->layer == layer ? "chosen with --layer" :
		 "the layer most imbalanced under static");
	ret = figure(r, RLB_CHART_MICROBATCH, g, o, cap, fp, err);
	if (ret)
		return ret;
	ret = figure(r, RLB_CHART_BREAKDOWN, g, o,
		     "Where each step's time goes: compute (dense layers and routed experts on the slowest GPU), the dispatch and combine all-to-all, and the balancing overhead (replica copies and their gradient reduction, expert migration, planning).",
		     fp, err);
	if (ret)
		return ret;
	ret = figure(r, RLB_CHART_HEATMAP, g, o,
		     "Expert rows each GPU computes in each MoE layer over the last planned step, over the layer's mean: red GPUs are overloaded, blue ones wait.",
		     fp, err);
	if (ret)
		return ret;
	ret = figure(r, RLB_CHART_STEPS, g, o,
		     "Simulated time of each planned step; the dashed line is the perfectly balanced ideal on that step. Expert migration shows on the steps that pay for it.",
		     fp, err);
	if (ret)
		return ret;
	fputs("</section>\n", fp);
	return 0;
}

static int report_write_html_c(const struct rlb_report *r,
			       const struct rlb_report_chart_opts *o, FILE *fp,
			       struct rlb_err *err)
{
	struct rlb_cells t;
	char title[32];
	size_t g, i;
	int ret, m;

	if (!r->finished)
		return rlb_err_set(err, RLB_EINVAL, "the report is not finished");
	fprintf(fp, "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n"
		"<head>\n<meta charset=\"utf-8\"/>\n<title>relibra report</title>\n"
		"<style>\n%s</style>\n</head>\n<body>\n<h1>relibra report</h1>\n", style);
	fprintf(fp, "<p>%zu result%s in %zu group%s of one configuration and trace%s. "
		"Speedups are ratios of step times; figures are rounded to 3 significant figures.</p>\n",
		r->nrows, r->nrows == 1 ? "" : "s", r->ngroups,
		r->ngroups == 1 ? "" : "s", r->sweep_key ? " (one per value of the swept key)" : "");
	if (r->sweep_key) {
		fputs("<section id=\"sweep\">\n<h2>Sweep over ", fp);
		rlb_xml_escape(fp, r->sweep_key);
		fputs("</h2>\n", fp);
		for (m = 0; m < RLB_SWEEP_METRICS; m++) {
			if (rlb_cells_sweep(r, (enum rlb_sweep_metric)m, &t))
				return rlb_err_set(err, RLB_ENOMEM, "out of memory");
			fprintf(fp, "<h3>%s</h3>\n", rlb_sweep_title(r, (enum rlb_sweep_metric)m,
								      title, sizeof(title)));
			html_table(&t, fp);
			rlb_cells_release(&t);
		}
		ret = figure(r, RLB_CHART_SWEEP_STEP, 0, o,
			     "Step time of each result for each value of the swept key.",
			     fp, err);
		if (ret == 0)
			ret = figure(r, RLB_CHART_SWEEP_SPEEDUP, 0, o,
				     "Speedup over the static layout for each value of the swept key.",
				     fp, err);
		if (ret == 0)
			ret = figure(r, RLB_CHART_SWEEP_IDEAL, 0, o,
				     "Fraction of the perfectly balanced ideal for each value of the swept key.",
				     fp, err);
		if (ret)
			return ret;
		fputs("</section>\n", fp);
	}
	for (g = 0; g < r->ngroups; g++) {
		ret = group_section(r, g, o, fp, err);
		if (ret)
			return ret;
	}
	fputs("<footer>\n<p class=\"legend\">", fp);
	for (i = 0; rlb_report_legend[i]; i++) {
		rlb_xml_escape(fp, rlb_report_legend[i]);
		fputs(rlb_report_legend[i + 1] ? "<br/>\n" : "", fp);
	}
	fprintf(fp, "</p>\n<p>relibra %s, schema %s.</p>\n</footer>\n</body>\n</html>\n",
		RLB_VERSION, RLB_REPORT_SCHEMA);
	if (ferror(fp))
		return rlb_err_set(err, RLB_EIO, "write error");
	return 0;
}

/* report_write_html_c in the C locale (clocale.h) */
int rlb_report_write_html(const struct rlb_report *r,
			  const struct rlb_report_chart_opts *o, FILE *fp,
			  struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = report_write_html_c(r, o, fp, err);

	rlb_clocale_end(before);
	return ret;
}
