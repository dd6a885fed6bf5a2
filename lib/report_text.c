/*
 * report_text.c - the report as text: numbers to 3 significant figures
 * with units chosen per column, the comparison, measured-against-
 * simulated and sweep tables as cells, drawn as aligned columns or
 * Markdown; and CSV and JSON for spreadsheets and CI (6 figures, SI).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "clocale.h"
#include "relibra.h"
#include "report.h"
#include "report_impl.h"

const char *const rlb_report_legend[] = {
	"x static, x eplb-oracle: the baseline's step time over the result's;",
	"of ideal: the ideal step time over the result's;",
	"GPU p50, p99: busiest GPU's expert rows over the mean, per (micro-batch, layer);",
	"replicas, migrated: totals over the steps (migrated: experts moved to another node);",
	"replication includes the replica gradient reduction.",
	NULL,
};

static const char *report_fmt3_c(double v, char *buf, size_t size)
{
	double r, mag;
	size_t n;

	if (isnan(v)) {
		snprintf(buf, size, "-");
		return buf;
	}
	if (v == 0) {
		snprintf(buf, size, "0");
		return buf;
	}
	if (!isfinite(v) || fabs(v) < 1e-300) {
		/* infinite (a ratio over a zero that is not quite one), or so
		 * small that the power of ten below underflows to 0 */
		snprintf(buf, size, "%.3g", v);
		return buf;
	}
	mag = floor(log10(fabs(v)));
	r = round(v / pow(10, mag - 2)) * pow(10, mag - 2);
	if (fabs(r) >= 1e6) {	/* not a 300-digit integer */
		snprintf(buf, size, "%.3g", r);
		return buf;
	}
	if (fabs(r) >= 1000) {
		snprintf(buf, size, "%.0f", r);
		return buf;
	}
	snprintf(buf, size, "%#.3g", r);
	n = strlen(buf);
	if (n > 0 && buf[n - 1] == '.')
		buf[n - 1] = '\0';
	return buf;
}

/* report_fmt3_c in the C locale (clocale.h) */
const char *rlb_report_fmt3(double v, char *buf, size_t size)
{
	locale_t before = rlb_clocale_begin();
	const char *ret = report_fmt3_c(v, buf, size);

	rlb_clocale_end(before);
	return ret;
}

/* A rate with an SI prefix: "163k", "1.11M". */
const char *rlb_report_fmt_si(double v, char *buf, size_t size)
{
	static const char pre[] = " kMGT";
	int i = 0;
	size_t n;

	if (!isfinite(v))
		return rlb_report_fmt3(v, buf, size);
	while (fabs(v) >= 999.5 && i < 4) {
		v /= 1000;
		i++;
	}
	rlb_report_fmt3(v, buf, size);
	n = strlen(buf);
	if (i > 0 && n + 1 < size) {
		buf[n] = pre[i];
		buf[n + 1] = '\0';
	}
	return buf;
}

/*
 * The unit of a time column: the smallest that keeps its largest value
 * below 1000 once rounded to 3 figures (0.9996 s is "1.00" s, not "1000"
 * ms); ms for a column of zeros.
 */
void rlb_report_time_unit(const double *v, size_t n, double *scale,
			  const char **unit)
{
	double m = 0;
	size_t i;

	for (i = 0; i < n; i++)
		if (!isnan(v[i]) && fabs(v[i]) > m)
			m = fabs(v[i]);
	if (m >= 0.9995) {
		*scale = 1;
		*unit = "s";
	} else if (m >= 0.9995e-3 || m == 0) {
		*scale = 1e3;
		*unit = "ms";
	} else {
		*scale = 1e6;
		*unit = "us";
	}
}

void rlb_cells_release(struct rlb_cells *t)
{
	size_t i;

	for (i = 0; i < t->rows * t->cols; i++)
		free(t->cell[i]);
	free(t->cell);
	free(t->title);
	memset(t, 0, sizeof(*t));
}

int rlb_cells_add(struct rlb_cells *t, const char *const *cells)
{
	size_t i, base;

	if (rlb_grow(&t->cell, &t->cap, (t->rows + 1) * t->cols,
		     sizeof(*t->cell)))
		return -1;
	base = t->rows * t->cols;
	for (i = 0; i < t->cols; i++) {
		t->cell[base + i] = strdup(cells[i] ? cells[i] : "");
		if (!t->cell[base + i]) {
			while (i--)
				free(t->cell[base + i]);
			return -1;
		}
	}
	t->rows++;
	return 0;
}

/* Replication and gradient reduction: the cost of the replicas. */
static double replication_s(const struct rlb_report_row *w)
{
	double a = w->breakdown[RLB_PART_REPLICATION];
	double b = w->breakdown[RLB_PART_GRAD_REDUCE];

	if (isnan(a))
		return b;
	return isnan(b) ? a : a + b;
}

static const char *row_name(const struct rlb_report_row *w, char *buf,
			    size_t size)
{
	snprintf(buf, size, "%s%s", w->label,
		 w->kind == RLB_RESULT_TRAIN_STEP ? " (measured)" : "");
	return buf;
}

#define NCOL 13

int rlb_cells_group(const struct rlb_report *r, size_t g, struct rlb_cells *t)
{
	static const int over_part[3] = {
		-1, RLB_PART_MIGRATION, RLB_PART_PLANNING,
	};
	static const char *const over_name[3] = {
		"replication", "migration", "planning",
	};
	char hdr[NCOL][40], val[NCOL][64];
	const char *cells[NCOL];
	double *col = NULL, step_scale, over_scale[3];
	const char *step_unit, *over_unit[3];
	size_t i, n = 0, k;
	int c, ret = -1;

	memset(t, 0, sizeof(*t));
	t->cols = NCOL;
	col = malloc((r->nrows ? r->nrows : 1) * sizeof(*col));
	if (!col)
		return -1;
	for (i = 0; i < r->nrows; i++)
		if (r->rows[i].group == g)
			col[n++] = r->rows[i].step_time_s;
	rlb_report_time_unit(col, n, &step_scale, &step_unit);
	for (k = 0; k < 3; k++) {
		n = 0;
		for (i = 0; i < r->nrows; i++)
			if (r->rows[i].group == g)
				col[n++] = over_part[k] < 0 ?
					replication_s(&r->rows[i]) :
					r->rows[i].breakdown[over_part[k]];
		rlb_report_time_unit(col, n, &over_scale[k], &over_unit[k]);
	}
	snprintf(hdr[0], sizeof(hdr[0]), "result");
	snprintf(hdr[1], sizeof(hdr[1]), "step (%s)", step_unit);
	snprintf(hdr[2], sizeof(hdr[2]), "tokens/s");
	snprintf(hdr[3], sizeof(hdr[3]), "x static");
	snprintf(hdr[4], sizeof(hdr[4]), "x eplb-oracle");
	snprintf(hdr[5], sizeof(hdr[5]), "of ideal");
	snprintf(hdr[6], sizeof(hdr[6]), "GPU p50");
	snprintf(hdr[7], sizeof(hdr[7]), "GPU p99");
	snprintf(hdr[8], sizeof(hdr[8]), "replicas");
	snprintf(hdr[9], sizeof(hdr[9]), "migrated");
	for (k = 0; k < 3; k++)
		snprintf(hdr[10 + k], sizeof(hdr[10 + k]), "%s (%s)",
			 over_name[k], over_unit[k]);
	for (c = 0; c < NCOL; c++)
		cells[c] = hdr[c];
	if (rlb_cells_add(t, cells))
		goto out;
	for (i = 0; i < r->nrows; i++) {
		const struct rlb_report_row *w = &r->rows[i];

		if (w->group != g)
			continue;
		row_name(w, val[0], sizeof(val[0]));
		rlb_report_fmt3(w->step_time_s * step_scale, val[1], sizeof(val[1]));
		rlb_report_fmt_si(w->tokens_per_s, val[2], sizeof(val[2]));
		rlb_report_fmt3(w->x_static, val[3], sizeof(val[3]));
		rlb_report_fmt3(w->x_eplb_oracle, val[4], sizeof(val[4]));
		rlb_report_fmt3(w->fraction_of_ideal, val[5], sizeof(val[5]));
		rlb_report_fmt3(w->gpu_p50, val[6], sizeof(val[6]));
		rlb_report_fmt3(w->gpu_p99, val[7], sizeof(val[7]));
		if (isnan(w->replicas))
			snprintf(val[8], sizeof(val[8]), "-");
		else
			snprintf(val[8], sizeof(val[8]), "%.0f", w->replicas);
		if (isnan(w->migrated_experts))
			snprintf(val[9], sizeof(val[9]), "-");
		else
			snprintf(val[9], sizeof(val[9]), "%.0f", w->migrated_experts);
		for (k = 0; k < 3; k++)
			rlb_report_fmt3((over_part[k] < 0 ? replication_s(w) :
					 w->breakdown[over_part[k]]) * over_scale[k],
					val[10 + k], sizeof(val[10 + k]));
		for (c = 0; c < NCOL; c++)
			cells[c] = val[c];
		if (rlb_cells_add(t, cells))
			goto out;
	}
	ret = 0;
out:
	free(col);
	if (ret)
		rlb_cells_release(t);
	return ret;
}

int rlb_cells_measured(const struct rlb_report *r, size_t g,
		       struct rlb_cells *t)
{
	char a[64], b[64], q[64], h1[32], h2[32];
	const char *cells[5], *unit;
	double scale, v[1] = { 0 };
	size_t i, p, n = 0;
	long s;

	memset(t, 0, sizeof(*t));
	t->cols = 5;
	t->left = 2;
	/* one unit for the whole table: the largest step time */
	for (i = 0; i < r->nrows; i++) {
		if (r->rows[i].group != g || (s = rlb_report_simulated_of(r, i)) < 0)
			continue;
		v[0] = fmax(v[0], fmax(r->rows[i].step_time_s,
				       r->rows[s].step_time_s));
		n++;
	}
	if (n == 0)
		return 0;
	rlb_report_time_unit(v, 1, &scale, &unit);
	snprintf(h1, sizeof(h1), "measured (%s)", unit);
	snprintf(h2, sizeof(h2), "simulated (%s)", unit);
	cells[0] = "result";
	cells[1] = "part";
	cells[2] = h1;
	cells[3] = h2;
	cells[4] = "measured/simulated";
	if (rlb_cells_add(t, cells))
		goto fail;
	for (i = 0; i < r->nrows; i++) {
		const struct rlb_report_row *m = &r->rows[i], *sim;
		int first = 1;

		if (m->group != g || (s = rlb_report_simulated_of(r, i)) < 0)
			continue;
		sim = &r->rows[s];
		for (p = 0; p < RLB_PART_COUNT; p++) {
			double mv = p == RLB_PART_TOTAL ? m->step_time_s : m->breakdown[p];
			double sv = p == RLB_PART_TOTAL ? sim->step_time_s : sim->breakdown[p];

			if (isnan(mv))
				continue;
			cells[0] = first ? m->label : "";
			cells[1] = rlb_report_part_title((enum rlb_report_part)p);
			cells[2] = rlb_report_fmt3(mv * scale, a, sizeof(a));
			cells[3] = rlb_report_fmt3(sv * scale, b, sizeof(b));
			cells[4] = rlb_report_fmt3(sv > 0 ? mv / sv : NAN, q, sizeof(q));
			if (rlb_cells_add(t, cells))
				goto fail;
			first = 0;
		}
	}
	return 0;
fail:
	rlb_cells_release(t);
	return -1;
}

/* Index of S in LIST[0..n), appended when missing; -1 when full. */
static long intern(const char **list, size_t *n, size_t max, const char *s)
{
	size_t i;

	for (i = 0; i < *n; i++)
		if (strcmp(list[i], s) == 0)
			return (long)i;
	if (*n >= max)
		return -1;
	list[*n] = s;
	return (long)(*n)++;
}

int rlb_sweep_row(const struct rlb_report_row *w)
{
	return w->sweep_value && w->kind == RLB_RESULT_PLAN;
}

/* The label text of the option that swept key KEY sets, or NULL. */
static const char *sweep_flag(const char *key)
{
	static const char *const map[][2] = {
		{ "balancer.relay", " --relay" },
		{ "balancer.colocate", " --colocate" },
		{ "balancer.data_control", " --data-control" },
		{ "balancer.reorder", " --no-reorder" },
		{ "balancer.replicate", " --no-replicate" },
	};
	size_t i;

	for (i = 0; key && i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(key, map[i][0]) == 0)
			return map[i][1];
	return NULL;
}

/* LABEL without FLAG where FLAG stands in it as a whole option, into BUF. */
static void strip_flag(const char *label, const char *flag, char *buf)
{
	size_t n = strlen(flag);
	const char *p = label;

	strcpy(buf, label);
	while ((p = strstr(p, flag)) != NULL) {
		if (p[n] == '\0' || p[n] == ' ') {
			memmove(buf + (p - label), buf + (p - label) + n,
				strlen(buf + (p - label) + n) + 1);
			return;
		}
		p += n;
	}
}

char **rlb_sweep_columns(const struct rlb_report *r)
{
	const char *flag = sweep_flag(r->sweep_key);
	size_t i, j, bytes = (r->nrows + 1) * sizeof(char *);
	char **col, *at;
	int strip = flag != NULL;

	for (i = 0; i < r->nrows; i++)
		bytes += strlen(r->rows[i].label) + 1;
	col = calloc(1, bytes);
	if (!col)
		return NULL;
	at = (char *)(col + r->nrows + 1);
	for (i = 0; i < r->nrows; i++) {
		if (!rlb_sweep_row(&r->rows[i]))
			continue;
		col[i] = at;
		if (strip)
			strip_flag(r->rows[i].label, flag, at);
		else
			strcpy(at, r->rows[i].label);
		at += strlen(r->rows[i].label) + 1;
	}
	/* two results of one value in one column: keep the labels */
	for (i = 0; strip && i < r->nrows; i++)
		for (j = i + 1; col[i] && j < r->nrows; j++)
			if (col[j] && strcmp(col[i], col[j]) == 0 &&
			    strcmp(r->rows[i].sweep_value, r->rows[j].sweep_value) == 0)
				strip = 0;
	for (i = 0; flag && !strip && i < r->nrows; i++)
		if (col[i])
			strcpy(col[i], r->rows[i].label);
	return col;
}

void rlb_sweep_step_unit(const struct rlb_report *r, double *scale,
			 const char **unit)
{
	double m = 0;
	size_t i;

	for (i = 0; i < r->nrows; i++)
		if (rlb_sweep_row(&r->rows[i]) && r->rows[i].step_time_s > m)
			m = r->rows[i].step_time_s;
	rlb_report_time_unit(&m, 1, scale, unit);
}

double rlb_sweep_value(const struct rlb_report_row *w, enum rlb_sweep_metric m,
		       double scale)
{
	return m == RLB_SWEEP_STEP ? w->step_time_s * scale :
	       m == RLB_SWEEP_SPEEDUP ? w->x_static : w->fraction_of_ideal;
}

const char *rlb_sweep_title(const struct rlb_report *r, enum rlb_sweep_metric m,
			    char *buf, size_t size)
{
	double scale;
	const char *unit;

	if (m == RLB_SWEEP_SPEEDUP)
		return "Speedup over static";
	if (m == RLB_SWEEP_IDEAL)
		return "Fraction of ideal";
	rlb_sweep_step_unit(r, &scale, &unit);
	snprintf(buf, size, "Step time (%s)", unit);
	return buf;
}

int rlb_cells_sweep(const struct rlb_report *r, enum rlb_sweep_metric m,
		    struct rlb_cells *t)
{
	const char **vals = NULL, **labels = NULL, **cells = NULL, *unit;
	char (*buf)[32] = NULL, **col = rlb_sweep_columns(r);
	size_t nv = 0, nl = 0, i, j, k;
	double scale;
	int ret = -1;

	memset(t, 0, sizeof(*t));
	rlb_sweep_step_unit(r, &scale, &unit);
	vals = calloc(r->nrows + 1, sizeof(*vals));
	labels = calloc(r->nrows + 1, sizeof(*labels));
	if (!vals || !labels || !col)
		goto out;
	for (i = 0; i < r->nrows; i++) {
		if (!rlb_sweep_row(&r->rows[i]))
			continue;
		intern(vals, &nv, r->nrows, r->rows[i].sweep_value);
		intern(labels, &nl, r->nrows, col[i]);
	}
	t->cols = nl + 1;
	cells = calloc(nl + 1, sizeof(*cells));
	buf = calloc(nl + 1, sizeof(*buf));
	if (!cells || !buf)
		goto out;
	cells[0] = r->sweep_key ? r->sweep_key : "value";
	for (j = 0; j < nl; j++)
		cells[j + 1] = labels[j];
	if (nv == 0 || rlb_cells_add(t, cells))
		goto out;
	for (k = 0; k < nv; k++) {
		cells[0] = vals[k];
		for (j = 0; j < nl; j++) {
			double v = NAN;

			for (i = 0; i < r->nrows; i++) {
				const struct rlb_report_row *w = &r->rows[i];

				if (rlb_sweep_row(w) && strcmp(w->sweep_value, vals[k]) == 0 &&
				    strcmp(col[i], labels[j]) == 0) {
					v = rlb_sweep_value(w, m, scale);
					break;
				}
			}
			cells[j + 1] = rlb_report_fmt3(v, buf[j], sizeof(buf[j]));
		}
		if (rlb_cells_add(t, cells))
			goto out;
	}
	ret = 0;
out:
	free(vals);
	free(labels);
	free(cells);
	free(buf);
	free(col);
	if (ret)
		rlb_cells_release(t);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Drawing cells.                                                       */

static size_t utf8_width(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

/*
 * Text of a table cell or a title line: a control character (a newline or
 * a tab in a label or a file name) as a space, so that a row stays one
 * line and its columns line up; in Markdown '|' escaped, as it ends a cell.
 */
static void put_plain(FILE *fp, const char *s, int md)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c < 0x20 || c == 0x7f)
			c = ' ';
		else if (md && c == '|')
			fputc('\\', fp);
		fputc(c, fp);
	}
}

static void draw_text(const struct rlb_cells *t, FILE *fp)
{
	size_t *w, i, j, left = t->left ? t->left : 1;

	if (t->rows == 0)
		return;
	w = calloc(t->cols, sizeof(*w));
	if (!w)
		return;
	for (i = 0; i < t->rows; i++)
		for (j = 0; j < t->cols; j++) {
			size_t n = utf8_width(t->cell[i * t->cols + j]);

			if (n > w[j])
				w[j] = n;
		}
	for (i = 0; i < t->rows; i++) {
		for (j = 0; j < t->cols; j++) {
			const char *c = t->cell[i * t->cols + j];
			size_t pad = w[j] - utf8_width(c);

			if (j < left) {
				fputs(j ? "  " : "", fp);
				put_plain(fp, c, 0);
				fprintf(fp, "%*s", (int)(j + 1 < t->cols ? pad : 0), "");
			} else {
				fprintf(fp, "  %*s", (int)pad, "");
				put_plain(fp, c, 0);
			}
		}
		fputc('\n', fp);
	}
	free(w);
}

static void draw_markdown(const struct rlb_cells *t, FILE *fp)
{
	size_t i, j, left = t->left ? t->left : 1;

	for (i = 0; i < t->rows; i++) {
		fputs("|", fp);
		for (j = 0; j < t->cols; j++) {
			const char *c = t->cell[i * t->cols + j];

			fputc(' ', fp);
			put_plain(fp, c, 1);
			fputs(" |", fp);
		}
		fputc('\n', fp);
		if (i == 0) {
			fputs("|", fp);
			for (j = 0; j < t->cols; j++)
				fputs(j < left ? " --- |" : " ---: |", fp);
			fputc('\n', fp);
		}
	}
}

static int write_human(const struct rlb_report *r, int md, FILE *fp)
{
	struct rlb_cells t;
	char title[1024];
	size_t g, i;
	int m;

	if (r->sweep_key) {
		for (m = 0; m < RLB_SWEEP_METRICS; m++) {
			if (rlb_cells_sweep(r, (enum rlb_sweep_metric)m, &t))
				return -1;
			fprintf(fp, md ? "### %s against %s\n\n" : "%s against %s\n",
				rlb_sweep_title(r, (enum rlb_sweep_metric)m, title,
						sizeof(title)), r->sweep_key);
			(md ? draw_markdown : draw_text)(&t, fp);
			fputc('\n', fp);
			rlb_cells_release(&t);
		}
	}
	for (g = 0; g < r->ngroups; g++) {
		const struct rlb_report_group *gr = &r->groups[g];

		rlb_report_group_title(r, g, title, sizeof(title));
		fputs(md ? "### " : "", fp);
		put_plain(fp, title, 0);
		fputs(md ? "\n\n" : "\n", fp);
		if (rlb_cells_group(r, g, &t))
			return -1;
		if (!md)
			fputc('\n', fp);
		(md ? draw_markdown : draw_text)(&t, fp);
		rlb_cells_release(&t);
		if (gr->nnotes)
			fputc('\n', fp);
		for (i = 0; i < gr->nnotes; i++)
			fprintf(fp, md ? "- %s\n" : "note: %s\n", gr->notes[i]);
		if (rlb_cells_measured(r, g, &t))
			return -1;
		if (t.rows) {
			fprintf(fp, md ? "\nMeasured against simulated, per step:\n\n" :
				"\nmeasured against simulated, per step:\n");
			(md ? draw_markdown : draw_text)(&t, fp);
		}
		rlb_cells_release(&t);
		fputc('\n', fp);
	}
	for (i = 0; rlb_report_legend[i]; i++)
		fprintf(fp, "%s\n", rlb_report_legend[i]);
	return 0;
}

/* ------------------------------------------------------------------ */
/* CSV and JSON.                                                        */

static void csv_str(FILE *fp, const char *s)
{
	if (!s)
		return;
	if (strpbrk(s, ",\"\n\r") == NULL) {
		fputs(s, fp);
		return;
	}
	fputc('"', fp);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', fp);
		fputc(*s, fp);
	}
	fputc('"', fp);
}

static void csv_num(FILE *fp, double v)
{
	if (!isnan(v))
		fprintf(fp, "%.6g", v);
}

/*
 * A step id in full: it names the group, and 6 significant figures would
 * make steps 1000000 and 1000001 (or a trace's first and last step) one.
 */
static void csv_step(FILE *fp, double v)
{
	if (!isnan(v) && v == floor(v) && fabs(v) < 9e15)
		fprintf(fp, "%.0f", v);
	else
		csv_num(fp, v);
}

static const char *kind_name(enum rlb_result_kind k)
{
	return k == RLB_RESULT_TRAIN_STEP ? "train-step" : "plan";
}

static void write_csv(const struct rlb_report *r, FILE *fp)
{
	size_t i, p;

	fputs("group,sweep_key,sweep_value,model,cluster,nodes,gpus_per_node,"
	      "ep_size,micro_batch_tokens,pack,trace_hash,first_step,last_step,"
	      "source,kind,policy,"
	      "label,steps,tokens,step_time_s,tokens_per_s,speedup_over_static,"
	      "speedup_over_eplb_oracle,fraction_of_ideal,gpu_max_mean_p50,"
	      "gpu_max_mean_p99,replicas,migrated_experts", fp);
	for (p = 1; p < RLB_PART_COUNT; p++)
		fprintf(fp, ",%s", rlb_report_part_key((enum rlb_report_part)p));
	fputs(",ideal_step_time_s\n", fp);
	for (i = 0; i < r->nrows; i++) {
		const struct rlb_report_row *w = &r->rows[i];
		const struct rlb_report_group *g = &r->groups[w->group];

		fprintf(fp, "%zu,", w->group + 1);
		csv_str(fp, w->sweep_value ? r->sweep_key : NULL);
		fputc(',', fp);
		csv_str(fp, w->sweep_value);
		fputc(',', fp);
		csv_str(fp, g->model);
		fputc(',', fp);
		csv_str(fp, g->cluster);
		fprintf(fp, ",%d,%d,%d,%d,", g->nodes, g->gpus_per_node,
			g->ep_size, g->micro_batch_tokens);
		csv_str(fp, g->pack);
		fputc(',', fp);
		csv_str(fp, g->trace_hash);
		fputc(',', fp);
		csv_step(fp, g->first_step);
		fputc(',', fp);
		csv_step(fp, g->last_step);
		fputc(',', fp);
		csv_str(fp, w->source);
		fprintf(fp, ",%s,", kind_name(w->kind));
		csv_str(fp, w->policy);
		fputc(',', fp);
		csv_str(fp, w->label);
		{
			const double v[] = {
				w->steps, w->tokens, w->step_time_s,
				w->tokens_per_s, w->x_static, w->x_eplb_oracle,
				w->fraction_of_ideal, w->gpu_p50, w->gpu_p99,
				w->replicas, w->migrated_experts,
			};
			size_t k;

			for (k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
				fputc(',', fp);
				csv_num(fp, v[k]);
			}
		}
		for (p = 1; p < RLB_PART_COUNT; p++) {
			fputc(',', fp);
			csv_num(fp, w->breakdown[p]);
		}
		fputc(',', fp);
		csv_num(fp, w->ideal_step_time_s);
		fputc('\n', fp);
	}
}

/* Counts as integers when they are whole (they are read as numbers). */
static json_t *jcount(double v)
{
	if (!isnan(v) && v == floor(v) && fabs(v) < 9e15)
		return json_integer((json_int_t)v);
	return rlb_json_real_or_null(v);
}

static json_t *jstr(const char *s)
{
	return s ? rlb_json_text(s) : json_null();
}

static json_t *group_json(const struct rlb_report *r, size_t gi)
{
	const struct rlb_report_group *g = &r->groups[gi];
	json_t *notes = json_array();
	size_t i;

	for (i = 0; notes && i < g->nnotes; i++)
		json_array_append_new(notes, rlb_json_text(g->notes[i]));
	return json_pack("{s:I, s:o, s:s, s:s, s:i, s:i, s:i, s:i, s:s, s:s, s:o, s:o, s:o, s:o, s:o}",
			 "id", (json_int_t)gi + 1,
			 "sweep_value", jstr(g->sweep_value),
			 "model", g->model, "cluster", g->cluster,
			 "nodes", g->nodes, "gpus_per_node", g->gpus_per_node,
			 "ep_size", g->ep_size,
			 "micro_batch_tokens", g->micro_batch_tokens,
			 "pack", g->pack, "trace_hash", g->trace_hash,
			 "trace_path", jstr(g->trace_path),
			 "first_step", jcount(g->first_step),
			 "last_step", jcount(g->last_step), "steps", jcount(g->steps),
			 "notes", notes);
}

static json_t *row_json(const struct rlb_report *r, size_t i)
{
	const struct rlb_report_row *w = &r->rows[i];
	json_t *bd = json_object(), *j, *mvs;
	size_t p;
	long s;

	for (p = 1; bd && p < RLB_PART_COUNT; p++)
		json_object_set_new(bd, rlb_report_part_key((enum rlb_report_part)p),
				    rlb_json_real_or_null(w->breakdown[p]));
	j = json_pack("{s:I, s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
		      "group", (json_int_t)w->group + 1,
		      "sweep_value", jstr(w->sweep_value),
		      "source", jstr(w->source), "kind", kind_name(w->kind),
		      "policy", jstr(w->policy), "label", jstr(w->label),
		      "steps", jcount(w->steps), "tokens", jcount(w->tokens),
		      "step_time_s", rlb_json_real_or_null(w->step_time_s),
		      "tokens_per_s", rlb_json_real_or_null(w->tokens_per_s),
		      "speedup_over_static", rlb_json_real_or_null(w->x_static),
		      "speedup_over_eplb_oracle", rlb_json_real_or_null(w->x_eplb_oracle),
		      "fraction_of_ideal", rlb_json_real_or_null(w->fraction_of_ideal),
		      "gpu_max_mean_p50", rlb_json_real_or_null(w->gpu_p50),
		      "gpu_max_mean_p99", rlb_json_real_or_null(w->gpu_p99),
		      "replicas", jcount(w->replicas),
		      "migrated_experts", jcount(w->migrated_experts),
		      "breakdown", bd,
		      "ideal_step_time_s", rlb_json_real_or_null(w->ideal_step_time_s));
	s = rlb_report_simulated_of(r, i);
	if (j && s >= 0) {
		const struct rlb_report_row *sim = &r->rows[s];

		mvs = json_object();
		for (p = 0; mvs && p < RLB_PART_COUNT; p++) {
			double mv = p == RLB_PART_TOTAL ? w->step_time_s : w->breakdown[p];
			double sv = p == RLB_PART_TOTAL ? sim->step_time_s : sim->breakdown[p];

			if (isnan(mv))
				continue;
			json_object_set_new(mvs, rlb_report_part_key((enum rlb_report_part)p),
					    json_pack("{s:o, s:o, s:o}",
						      "measured", rlb_json_real_or_null(mv),
						      "simulated", rlb_json_real_or_null(sv),
						      "ratio", rlb_json_real_or_null(sv > 0 ? mv / sv : NAN)));
		}
		json_object_set_new(j, "measured_vs_simulated", mvs);
	}
	return j;
}

static int write_json(const struct rlb_report *r, FILE *fp)
{
	json_t *doc, *groups = json_array(), *rows = json_array();
	size_t i;
	int ret;

	for (i = 0; groups && i < r->ngroups; i++)
		if (json_array_append_new(groups, group_json(r, i)))
			goto fail;
	for (i = 0; rows && i < r->nrows; i++)
		if (json_array_append_new(rows, row_json(r, i)))
			goto fail;
	doc = json_pack("{s:s, s:{s:s, s:s}, s:o, s:o, s:o}",
			"schema", RLB_REPORT_SCHEMA,
			"producer", "tool", "relibra", "version", RLB_VERSION,
			"sweep", r->sweep_key ? json_pack("{s:s}", "key", r->sweep_key) :
				json_null(),
			"groups", groups, "results", rows);
	if (!doc)
		return -1;
	ret = json_dumpf(doc, fp, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
			 JSON_REAL_PRECISION(6));
	fputc('\n', fp);
	json_decref(doc);
	return ret;
fail:
	json_decref(groups);
	json_decref(rows);
	return -1;
}

int rlb_report_format_from_name(const char *name, enum rlb_report_format *f,
				struct rlb_err *err)
{
	static const char *const names[] = { "table", "markdown", "csv", "json" };
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(name, names[i]) == 0) {
			*f = (enum rlb_report_format)i;
			return 0;
		}
	return rlb_err_set(err, RLB_EINVAL,
			   "unknown format '%s' (table, markdown, csv or json)",
			   name);
}

static int report_write_c(const struct rlb_report *r, enum rlb_report_format f,
			  FILE *fp, struct rlb_err *err)
{
	int ret = 0;

	if (!r->finished)
		return rlb_err_set(err, RLB_EINVAL, "the report is not finished");
	switch (f) {
	case RLB_REPORT_TABLE:
	case RLB_REPORT_MARKDOWN:
		ret = write_human(r, f == RLB_REPORT_MARKDOWN, fp);
		break;
	case RLB_REPORT_CSV:
		write_csv(r, fp);
		break;
	case RLB_REPORT_JSON:
		ret = write_json(r, fp);
		break;
	default:
		return rlb_err_set(err, RLB_EINVAL, "unknown report format");
	}
	if (ret)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	if (ferror(fp))
		return rlb_err_set(err, RLB_EIO, "write error");
	return 0;
}

/* report_write_c in the C locale (clocale.h) */
int rlb_report_write(const struct rlb_report *r, enum rlb_report_format f,
		     FILE *fp, struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = report_write_c(r, f, fp, err);

	rlb_clocale_end(before);
	return ret;
}
