/*
 * report.c - the rows of `relibra report`: reading result objects
 * (relibra.result/1, kinds plan and train-step) tolerantly, grouping them
 * by configuration, trace and sweep value, and deriving the speedups and
 * the notes on missing baselines.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "clocale.h"
#include "report.h"
#include "sniff.h"
#include "trace_impl.h"		/* rlb_rrt_probe */
#include "util.h"

static const char *const part_keys[RLB_PART_COUNT] = {
	"total_s", "dense_s", "expert_s", "a2a_s", "a2a_rdma_s",
	"a2a_nvlink_s", "replication_s", "grad_reduce_s", "migration_s",
	"planning_s", "a2a_even_s", "a2a_senders_s",
};

static const char *const part_titles[RLB_PART_COUNT] = {
	"step", "dense", "expert compute", "all-to-all", "all-to-all RDMA",
	"all-to-all NVLink", "replication", "gradient reduction", "migration",
	"planning", "all-to-all, even copies", "all-to-all, busiest sender",
};

const char *rlb_report_part_key(enum rlb_report_part p)
{
	return (unsigned)p < RLB_PART_COUNT ? part_keys[p] : NULL;
}

const char *rlb_report_part_title(enum rlb_report_part p)
{
	return (unsigned)p < RLB_PART_COUNT ? part_titles[p] : NULL;
}

void rlb_report_init(struct rlb_report *r)
{
	memset(r, 0, sizeof(*r));
}

void rlb_report_series_free(struct rlb_report_series *s)
{
	if (!s)
		return;
	free(s->rows);
	free(s);
}

static void row_release(struct rlb_report_row *w)
{
	free(w->source);
	free(w->label);
	free(w->given_label);
	free(w->policy);
	free(w->sweep_value);
	free(w->per_step);
	rlb_report_series_free(w->series);
	memset(w, 0, sizeof(*w));
}

static void group_notes_release(struct rlb_report_group *g)
{
	size_t i;

	for (i = 0; i < g->nnotes; i++)
		free(g->notes[i]);
	free(g->notes);
	g->notes = NULL;
	g->nnotes = 0;
}

static void group_release(struct rlb_report_group *g)
{
	free(g->model);
	free(g->cluster);
	free(g->pack);
	free(g->trace_hash);
	free(g->trace_path);
	free(g->sweep_value);
	group_notes_release(g);
	memset(g, 0, sizeof(*g));
}

void rlb_report_release(struct rlb_report *r)
{
	size_t i;

	if (!r)
		return;
	for (i = 0; i < r->nrows; i++)
		row_release(&r->rows[i]);
	for (i = 0; i < r->ngroups; i++)
		group_release(&r->groups[i]);
	free(r->rows);
	free(r->groups);
	free(r->sweep_key);
	rlb_report_init(r);
}

void rlb_report_set_series(struct rlb_report *r, size_t i,
			   struct rlb_report_series *s)
{
	if (!s)
		return;
	if (i >= r->nrows) {
		rlb_report_series_free(s);
		return;
	}
	rlb_report_series_free(r->rows[i].series);
	r->rows[i].series = s;
}

/* ------------------------------------------------------------------ */
/* Reading one result object.                                           */

/* The value at a dotted PATH ("config.model"), or NULL. */
static json_t *at(const json_t *obj, const char *path)
{
	char key[64];
	const char *p = path, *dot;
	json_t *v = (json_t *)obj;

	while (v && *p) {
		size_t n;

		dot = strchr(p, '.');
		n = dot ? (size_t)(dot - p) : strlen(p);
		if (n >= sizeof(key) || !json_is_object(v))
			return NULL;
		memcpy(key, p, n);
		key[n] = '\0';
		v = json_object_get(v, key);
		p = dot ? dot + 1 : p + n;
	}
	return v;
}

static int need_string(const json_t *obj, const char *path, const char *src,
		       const char **out, struct rlb_err *err)
{
	json_t *v = at(obj, path);

	if (!v || json_is_null(v))
		return rlb_err_set(err, RLB_EPARSE, "'%s': missing '%s'", src, path);
	if (!json_is_string(v))
		return rlb_err_set(err, RLB_EPARSE, "'%s': '%s' is not a string",
				   src, path);
	*out = json_string_value(v);
	return 0;
}

static int need_int(const json_t *obj, const char *path, const char *src,
		    int *out, struct rlb_err *err)
{
	json_t *v = at(obj, path);

	if (!v || json_is_null(v))
		return rlb_err_set(err, RLB_EPARSE, "'%s': missing '%s'", src, path);
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > 1 << 30)
		return rlb_err_set(err, RLB_EPARSE,
				   "'%s': '%s' is not a non-negative integer",
				   src, path);
	*out = (int)json_integer_value(v);
	return 0;
}

/* An optional number: NAN when absent or null. */
static int opt_number(const json_t *obj, const char *path, const char *src,
		      double *out, struct rlb_err *err)
{
	json_t *v = at(obj, path);

	*out = NAN;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return rlb_err_set(err, RLB_EPARSE, "'%s': '%s' is not a number",
				   src, path);
	*out = json_number_value(v);
	if (!isfinite(*out))
		*out = NAN;
	return 0;
}

static int need_positive(const json_t *obj, const char *path, const char *src,
			 double *out, struct rlb_err *err)
{
	int ret = opt_number(obj, path, src, out, err);

	if (ret)
		return ret;
	if (isnan(*out)) {
		if (!at(obj, path))
			return rlb_err_set(err, RLB_EPARSE, "'%s': missing '%s'",
					   src, path);
		if (json_is_null(at(obj, path)))
			return rlb_err_set(err, RLB_EPARSE, "'%s': '%s' is null, expected a positive number",
					   src, path);
		return rlb_err_set(err, RLB_EPARSE, "'%s': '%s' is not finite",
				   src, path);
	}
	if (!(*out > 0))
		return rlb_err_set(err, RLB_EPARSE,
				   "'%s': '%s' must be positive, not %g", src,
				   path, *out);
	return 0;
}

static int check_schema(const json_t *obj, const char *src,
			struct rlb_err *err)
{
	static const char family[] = "relibra.result/";
	json_t *v;
	const char *s;

	if (!json_is_object(obj))
		return rlb_err_set(err, RLB_EPARSE,
				   "'%s': not a relibra result (not a JSON object)",
				   src);
	v = json_object_get(obj, "schema");
	if (!v)
		return rlb_err_set(err, RLB_EPARSE,
				   "'%s': not a relibra result (no \"schema\")", src);
	if (!json_is_string(v))
		return rlb_err_set(err, RLB_EPARSE, "'%s': 'schema' is not a string",
				   src);
	s = json_string_value(v);
	if (strcmp(s, RLB_RESULT_SCHEMA) == 0)
		return 0;
	if (strncmp(s, family, sizeof(family) - 1) == 0)
		return rlb_err_set(err, RLB_EVERSION,
				   "'%s': schema '%s' is not supported (this relibra reads %s)",
				   src, s, RLB_RESULT_SCHEMA);
	return rlb_err_set(err, RLB_EPARSE,
			   "'%s': schema '%s' is not a relibra result (%s)", src,
			   s, RLB_RESULT_SCHEMA);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static int same_str(const char *a, const char *b)
{
	if (!a || !b)
		return a == b;
	return strcmp(a, b) == 0;
}

/* Equal, or either NAN (a file that does not say matches any). */
static int same_or_unknown(double a, double b)
{
	return a == b || isnan(a) || isnan(b);
}

/* The group of a result's identity, added when new; -1 on allocation failure. */
static long find_group(struct rlb_report *r, const struct rlb_report_group *id)
{
	struct rlb_report_group *g;
	size_t i;

	for (i = 0; i < r->ngroups; i++) {
		g = &r->groups[i];
		if (same_str(g->model, id->model) &&
		    same_str(g->cluster, id->cluster) &&
		    g->nodes == id->nodes && g->gpus_per_node == id->gpus_per_node &&
		    g->ep_size == id->ep_size &&
		    g->micro_batch_tokens == id->micro_batch_tokens &&
		    same_str(g->pack, id->pack) &&
		    same_str(g->trace_hash, id->trace_hash) &&
		    same_or_unknown(g->steps, id->steps) &&
		    same_or_unknown(g->first_step, id->first_step) &&
		    same_or_unknown(g->last_step, id->last_step) &&
		    same_str(g->sweep_value, id->sweep_value)) {
			if (isnan(g->steps))
				g->steps = id->steps;
			if (isnan(g->first_step)) {
				g->first_step = id->first_step;
				g->last_step = id->last_step;
			}
			return (long)i;
		}
	}
	if (rlb_grow(&r->groups, &r->groups_cap, r->ngroups + 1,
		     sizeof(*r->groups)))
		return -1;
	g = &r->groups[r->ngroups];
	memset(g, 0, sizeof(*g));
	g->model = strdup(id->model);
	g->cluster = strdup(id->cluster);
	g->pack = strdup(id->pack);
	g->trace_hash = strdup(id->trace_hash);
	g->trace_path = strdup(id->trace_path ? id->trace_path : "");
	g->sweep_value = dup_or_null(id->sweep_value);
	g->nodes = id->nodes;
	g->gpus_per_node = id->gpus_per_node;
	g->ep_size = id->ep_size;
	g->micro_batch_tokens = id->micro_batch_tokens;
	g->first_step = id->first_step;
	g->last_step = id->last_step;
	g->steps = id->steps;
	if (!g->model || !g->cluster || !g->pack || !g->trace_hash ||
	    !g->trace_path || (id->sweep_value && !g->sweep_value)) {
		group_release(g);
		return -1;
	}
	return (long)r->ngroups++;
}

/* The figures of a result object into w (identity fields excepted). */
static int read_figures(const json_t *obj, const char *src,
			struct rlb_report_row *w, struct rlb_err *err)
{
	static const struct {
		const char *path;
		size_t off;
	} opt[] = {
		{ "steps", offsetof(struct rlb_report_row, steps) },
		{ "tokens", offsetof(struct rlb_report_row, tokens) },
		{ "fraction_of_ideal", offsetof(struct rlb_report_row, fraction_of_ideal) },
		{ "speedup_over_static", offsetof(struct rlb_report_row, speedup_over_static) },
		{ "imbalance.gpu_after.p50", offsetof(struct rlb_report_row, gpu_p50) },
		{ "imbalance.gpu_after.p99", offsetof(struct rlb_report_row, gpu_p99) },
		{ "replicas", offsetof(struct rlb_report_row, replicas) },
		{ "migrated_experts", offsetof(struct rlb_report_row, migrated_experts) },
		{ "baselines.static.step_time_s", offsetof(struct rlb_report_row, static_step_time_s) },
		{ "baselines.ideal.step_time_s", offsetof(struct rlb_report_row, ideal_step_time_s) },
		{ "baselines.ideal.tokens_per_s", offsetof(struct rlb_report_row, ideal_tokens_per_s) },
	};
	char path[64];
	size_t i;
	int ret;

	ret = need_positive(obj, "step_time_s", src, &w->step_time_s, err);
	if (ret == 0)
		ret = need_positive(obj, "tokens_per_s", src, &w->tokens_per_s, err);
	for (i = 0; ret == 0 && i < sizeof(opt) / sizeof(opt[0]); i++)
		ret = opt_number(obj, opt[i].path, src,
				 (double *)((char *)w + opt[i].off), err);
	for (i = 0; ret == 0 && i < RLB_PART_COUNT; i++) {
		snprintf(path, sizeof(path), "breakdown.%s", part_keys[i]);
		ret = opt_number(obj, path, src, &w->breakdown[i], err);
	}
	return ret;
}

/*
 * A plan result's "per_step" (optional): an array of objects, each with
 * its "step" (integers increasing), positive "step_time_s" and
 * "fraction_of_ideal".
 */
static int read_per_step(const json_t *obj, const char *src,
			 struct rlb_report_row *w, struct rlb_err *err)
{
	json_t *a = json_object_get(obj, "per_step"), *e, *v;
	size_t i, n;

	if (!a || json_is_null(a))
		return 0;
	if (!json_is_array(a))
		return rlb_err_set(err, RLB_EPARSE, "'%s': 'per_step' is not an array", src);
	n = json_array_size(a);
	w->per_step = calloc(n ? n : 1, sizeof(*w->per_step));
	if (!w->per_step)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	w->nper_step = n;
	json_array_foreach(a, i, e) {
		struct rlb_report_step *s = &w->per_step[i];
		double f;

		v = json_object_get(e, "step");
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return rlb_err_set(err, RLB_EPARSE,
					   "'%s': 'per_step[%zu].step' is not a non-negative integer",
					   src, i);
		s->step = (double)json_integer_value(v);
		if (i && !(s->step > s[-1].step))
			return rlb_err_set(err, RLB_EPARSE,
					   "'%s': 'per_step[%zu].step' %.0f does not follow step %.0f",
					   src, i, s->step, s[-1].step);
		v = json_object_get(e, "step_time_s");
		if (!json_is_number(v) || !(json_number_value(v) > 0) ||
		    !isfinite(json_number_value(v)))
			return rlb_err_set(err, RLB_EPARSE,
					   "'%s': 'per_step[%zu].step_time_s' is not a positive number",
					   src, i);
		s->step_time_s = json_number_value(v);
		v = json_object_get(e, "fraction_of_ideal");
		f = json_is_number(v) ? json_number_value(v) : NAN;
		s->ideal_s = isfinite(f) && f > 0 ? f * s->step_time_s : NAN;
	}
	return 0;
}

/*
 * The trace's steps a result covers, into id: a plan's per_step gives
 * them, else trace.first_step and trace.last_step.  relibra 0.1.0 wrote
 * those as the range asked for (4294967295: no bound), which says
 * nothing: NAN then, as when they are missing.
 */
static int read_step_range(const json_t *obj, const char *src,
			   const struct rlb_report_row *w,
			   struct rlb_report_group *id, struct rlb_err *err)
{
	int ret;

	id->first_step = id->last_step = NAN;
	if (w->nper_step) {
		id->first_step = w->per_step[0].step;
		id->last_step = w->per_step[w->nper_step - 1].step;
		return 0;
	}
	ret = opt_number(obj, "trace.first_step", src, &id->first_step, err);
	if (ret == 0)
		ret = opt_number(obj, "trace.last_step", src, &id->last_step, err);
	if (ret == 0 && (isnan(id->first_step) || isnan(id->last_step) ||
			 id->last_step >= UINT32_MAX))
		id->first_step = id->last_step = NAN;
	return ret;
}

static int report_add_json_c(struct rlb_report *r, const json_t *obj,
			     const char *src, const char *sweep_value,
			     struct rlb_err *err)
{
	struct rlb_report_group id;
	struct rlb_report_row w;
	const char *kind, *policy, *label = NULL, *trace_path = NULL;
	json_t *v;
	long g;
	int ret;

	memset(&w, 0, sizeof(w));
	memset(&id, 0, sizeof(id));
	ret = check_schema(obj, src, err);
	if (ret)
		return ret;
	ret = need_string(obj, "kind", src, &kind, err);
	if (ret)
		return ret;
	if (strcmp(kind, "plan") == 0)
		w.kind = RLB_RESULT_PLAN;
	else if (strcmp(kind, "train-step") == 0)
		w.kind = RLB_RESULT_TRAIN_STEP;
	else
		return rlb_err_set(err, RLB_EPARSE,
				   "'%s': unknown kind '%s' (plan or train-step)",
				   src, kind);
	if ((ret = need_string(obj, "config.model", src,
			       (const char **)&id.model, err)) ||
	    (ret = need_string(obj, "config.cluster", src,
			       (const char **)&id.cluster, err)) ||
	    (ret = need_int(obj, "config.nodes", src, &id.nodes, err)) ||
	    (ret = need_int(obj, "config.gpus_per_node", src,
			    &id.gpus_per_node, err)) ||
	    (ret = need_int(obj, "config.ep_size", src, &id.ep_size, err)) ||
	    (ret = need_int(obj, "config.micro_batch_tokens", src,
			    &id.micro_batch_tokens, err)) ||
	    (ret = need_string(obj, "config.pack", src,
			       (const char **)&id.pack, err)) ||
	    (ret = need_string(obj, "trace.hash", src,
			       (const char **)&id.trace_hash, err)) ||
	    (ret = need_string(obj, "policy", src, &policy, err)))
		return ret;
	v = at(obj, "label");
	if (v && json_is_string(v) && json_string_length(v) > 0)
		label = json_string_value(v);
	v = at(obj, "trace.path");
	if (v && json_is_string(v))
		trace_path = json_string_value(v);
	ret = read_figures(obj, src, &w, err);
	if (ret == 0 && w.kind == RLB_RESULT_PLAN)
		ret = read_per_step(obj, src, &w, err);
	if (ret == 0)
		ret = read_step_range(obj, src, &w, &id, err);
	if (ret) {
		row_release(&w);
		return ret;
	}

	id.trace_path = (char *)trace_path;
	id.sweep_value = (char *)sweep_value;
	id.steps = w.steps;
	w.source = strdup(src);
	w.policy = strdup(policy);
	w.label = strdup(label ? label : policy);
	w.given_label = strdup(label ? label : policy);
	w.sweep_value = dup_or_null(sweep_value);
	w.x_static = NAN;
	w.x_eplb_oracle = NAN;
	if (!w.source || !w.policy || !w.label || !w.given_label ||
	    (sweep_value && !w.sweep_value) ||
	    rlb_grow(&r->rows, &r->rows_cap, r->nrows + 1, sizeof(*r->rows))) {
		row_release(&w);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	g = find_group(r, &id);
	if (g < 0) {
		row_release(&w);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	w.group = (size_t)g;
	r->rows[r->nrows++] = w;
	r->finished = 0;
	return 0;
}

/* report_add_json_c in the C locale (clocale.h) */
int rlb_report_add_json(struct rlb_report *r, const json_t *obj,
			const char *src, const char *sweep_value,
			struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = report_add_json_c(r, obj, src, sweep_value, err);

	rlb_clocale_end(before);
	return ret;
}

static int report_add_file_c(struct rlb_report *r, const char *path,
			     struct rlb_err *err)
{
	json_error_t je;
	json_t *j;
	FILE *fp;
	int c, ret, lines = 0, column = 0, skipped = 0;

	fp = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!fp)
		return rlb_err_errno(err, RLB_EIO, "cannot open '%s'", path);
	/* the white space skipped here counts in the parser's position */
	c = getc(fp);
	while (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
		skipped++;
		column = c == '\n' ? 0 : column + 1;
		lines += c == '\n';
		c = getc(fp);
	}
	if (c == EOF) {
		ret = ferror(fp) ?
			rlb_err_errno(err, RLB_EIO, "cannot read '%s'", path) :
			rlb_err_set(err, RLB_EPARSE, "'%s': empty file", path);
		goto out;
	}
	ungetc(c, fp);
	j = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
	if (!j) {
		const char *kind = fp != stdin ? rlb_rrt_probe(path) : NULL;

		if (kind)
			ret = rlb_err_set(err, RLB_EPARSE,
					  "'%s' is a relibra %s, not a result: give the JSON of plan --summary or train-step -o%s",
					  path, kind, !strcmp(kind, "trace") ?
					  ", or the trace as --trace" : "");
		else if ((ret = rlb_kind_err_fd(err, RLB_EPARSE, fileno(fp), 1, RLB_KIND_RESULT,
						path, "a result (the JSON of plan --summary or "
						"train-step -o)", NULL)))
			;
		else {
			int line, col, byte;

			rlb_json_error_where(&je, &line, &col, &byte);
			ret = rlb_err_set(err, RLB_EPARSE,
					  "'%s': invalid JSON at line %d, column %d (byte %d): %s",
					  path, line + lines, line == 1 ? col + column : col,
					  byte + skipped, je.text);
		}
		goto out;
	}
	/* a config.json, say: named, not "no schema" */
	if (!json_is_object(j) || json_object_get(j, "schema") ||
	    !(ret = rlb_kind_err_fd(err, RLB_EPARSE, fileno(fp), 0, RLB_KIND_RESULT, path,
				    "a result (the JSON of plan --summary or train-step -o)",
				    NULL)))
		ret = rlb_report_add_json(r, j, path, NULL, err);
	json_decref(j);
out:
	if (fp != stdin)
		fclose(fp);
	return ret;
}

/* report_add_file_c in the C locale (clocale.h) */
int rlb_report_add_file(struct rlb_report *r, const char *path,
			struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = report_add_file_c(r, path, err);

	rlb_clocale_end(before);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Comparisons.                                                          */

static int add_note(struct rlb_report_group *g, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int add_note(struct rlb_report_group *g, const char *fmt, ...)
{
	char buf[512], **n;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	n = realloc(g->notes, (g->nnotes + 1) * sizeof(*n));
	if (!n)
		return -1;
	g->notes = n;
	n[g->nnotes] = strdup(buf);
	if (!n[g->nnotes])
		return -1;
	g->nnotes++;
	return 0;
}

/*
 * The row of group g and kind k that the result labels LABEL: -1 when
 * there is none, -2 when there are several (no baseline is guessed).
 */
static long find_row(const struct rlb_report *r, size_t g,
		     enum rlb_result_kind k, const char *label)
{
	long found = -1;
	size_t i;

	for (i = 0; i < r->nrows; i++)
		if (r->rows[i].group == g && r->rows[i].kind == k &&
		    strcmp(r->rows[i].given_label, label) == 0) {
			if (found >= 0)
				return -2;
			found = (long)i;
		}
	return found;
}

/*
 * The eplb-oracle baseline of group g and kind k: the eplb-oracle row, or,
 * without one, the eplb-oracle --relay row (as find_row).
 */
static long eplb_oracle_row(const struct rlb_report *r, size_t g,
			    enum rlb_result_kind k)
{
	long f = find_row(r, g, k, "eplb-oracle");

	return f == -1 ? find_row(r, g, k, "eplb-oracle --relay") : f;
}

long rlb_report_simulated_of(const struct rlb_report *r, size_t i)
{
	long s;

	if (i >= r->nrows || r->rows[i].kind != RLB_RESULT_TRAIN_STEP)
		return -1;
	s = find_row(r, r->rows[i].group, RLB_RESULT_PLAN, r->rows[i].given_label);
	return s >= 0 ? s : -1;
}

/* The last K names of PATH ("b/s.json" for K 2 of "a/b/s.json"). */
static const char *path_tail(const char *path, unsigned k)
{
	const char *s = path + strlen(path);

	while (s > path) {
		if (s[-1] == '/' && s[0] && --k == 0)
			break;
		s--;
	}
	return s;
}

static const char *base_name(const char *path)
{
	return path_tail(path, 1);
}

static int same_label(const struct rlb_report_row *a, const struct rlb_report_row *b)
{
	return a->group == b->group && a->kind == b->kind &&
	       strcmp(a->given_label, b->given_label) == 0;
}

/*
 * Two results of one kind and label in a group: name each by its file,
 * with as many of the path's last names as tell it from the others
 * ("relibra (a/s.json)" and "relibra (b/s.json)").
 */
static int disambiguate(struct rlb_report *r)
{
	size_t i, j;
	unsigned k;

	for (i = 0; i < r->nrows; i++) {
		struct rlb_report_row *a = &r->rows[i];
		const char *tail;
		char *l;

		for (j = 0; j < r->nrows; j++)
			if (j != i && same_label(a, &r->rows[j]))
				break;
		if (j == r->nrows)
			continue;	/* no other of its label */
		for (k = 1;; k++) {
			tail = path_tail(a->source, k);
			if (tail == a->source)
				break;	/* the whole path */
			for (j = 0; j < r->nrows; j++)
				if (j != i && same_label(a, &r->rows[j]) &&
				    strcmp(tail, path_tail(r->rows[j].source, k)) == 0)
					break;
			if (j == r->nrows)
				break;
		}
		l = malloc(strlen(a->given_label) + strlen(tail) + 4);
		if (!l)
			return -1;
		sprintf(l, "%s (%s)", a->given_label, tail);
		free(a->label);
		a->label = l;
	}
	return 0;
}

static int group_notes(struct rlb_report *r, size_t g)
{
	struct rlb_report_group *gr = &r->groups[g];
	int have[2] = { 0, 0 }, nofrac = 0;
	size_t i;
	long f;

	for (i = 0; i < r->nrows; i++)
		if (r->rows[i].group == g) {
			have[r->rows[i].kind] = 1;
			if (r->rows[i].kind == RLB_RESULT_TRAIN_STEP &&
			    isnan(r->rows[i].fraction_of_ideal))
				nofrac = 1;
		}
	if (have[RLB_RESULT_PLAN] &&
	    (f = eplb_oracle_row(r, g, RLB_RESULT_PLAN)) < 0 &&
	    add_note(gr, "%s eplb-oracle result%s: speedup over eplb-oracle not shown",
		     f == -1 ? "no" : "several", f == -1 ? "" : "s"))
		return -1;
	if (have[RLB_RESULT_PLAN] && f >= 0 &&
	    strcmp(r->rows[f].given_label, "eplb-oracle") != 0 &&
	    add_note(gr, "x eplb-oracle: over eplb-oracle --relay (no eplb-oracle without the relay)"))
		return -1;
	if (have[RLB_RESULT_TRAIN_STEP]) {
		if ((f = find_row(r, g, RLB_RESULT_TRAIN_STEP, "static")) < 0 &&
		    add_note(gr, "%s measured static run%s: speedup over static of measured rows not shown",
			     f == -1 ? "no" : "several", f == -1 ? "" : "s"))
			return -1;
		if ((f = find_row(r, g, RLB_RESULT_TRAIN_STEP, "eplb-oracle")) < 0 &&
		    add_note(gr, "%s measured eplb-oracle run%s: speedup over eplb-oracle of measured rows not shown",
			     f == -1 ? "no" : "several", f == -1 ? "" : "s"))
			return -1;
		if (nofrac &&
		    add_note(gr, "measured rows give no fraction of ideal: not shown"))
			return -1;
	}
	return 0;
}

/* Order of rows in a group: the baselines, the balancers, then the ideal. */
static int policy_rank(const char *policy)
{
	static const char *const order[] = {
		"static", "eplb", "eplb-oracle", "replicate", "relibra",
	};
	size_t i;

	for (i = 0; i < sizeof(order) / sizeof(order[0]); i++)
		if (strcmp(policy, order[i]) == 0)
			return (int)i;
	return strcmp(policy, "ideal") == 0 ? 7 : 6;
}

/* Stable insertion sort by (group, policy, kind): results arrive in any order. */
static void sort_rows(struct rlb_report *r)
{
	size_t i, j;

	for (i = 1; i < r->nrows; i++) {
		struct rlb_report_row w = r->rows[i];
		int wr = policy_rank(w.policy);

		for (j = i; j > 0; j--) {
			const struct rlb_report_row *p = &r->rows[j - 1];
			int pr = policy_rank(p->policy);

			if (p->group < w.group ||
			    (p->group == w.group &&
			     (pr < wr || (pr == wr && p->kind <= w.kind))))
				break;
			r->rows[j] = r->rows[j - 1];
		}
		r->rows[j] = w;
	}
}

static int report_finish_c(struct rlb_report *r, struct rlb_err *err)
{
	size_t i;
	long s, o;

	if (r->nrows == 0)
		return rlb_err_set(err, RLB_EINVAL, "no results");
	if (r->finished)
		return 0;
	sort_rows(r);
	if (disambiguate(r))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; i < r->nrows; i++) {
		struct rlb_report_row *w = &r->rows[i];

		w->x_static = NAN;
		s = find_row(r, w->group, w->kind, "static");
		if (w->kind == RLB_RESULT_PLAN && !isnan(w->speedup_over_static))
			w->x_static = w->speedup_over_static;
		else if (s >= 0)
			w->x_static = r->rows[s].step_time_s / w->step_time_s;
		else if (w->kind == RLB_RESULT_PLAN && !isnan(w->static_step_time_s))
			w->x_static = w->static_step_time_s / w->step_time_s;
		o = eplb_oracle_row(r, w->group, w->kind);
		w->x_eplb_oracle = o >= 0 ?
			r->rows[o].step_time_s / w->step_time_s : NAN;
	}
	for (i = 0; i < r->ngroups; i++) {
		group_notes_release(&r->groups[i]);
		if (group_notes(r, i))
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	r->finished = 1;
	return 0;
}

/* report_finish_c in the C locale (clocale.h) */
int rlb_report_finish(struct rlb_report *r, struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = report_finish_c(r, err);

	rlb_clocale_end(before);
	return ret;
}

const char *rlb_report_group_title(const struct rlb_report *r, size_t gi,
				   char *buf, size_t size)
{
	const struct rlb_report_group *g = &r->groups[gi];
	size_t n = 0;

#define PUT(...) do { \
		if (n < size) { \
			int k_ = snprintf(buf + n, size - n, __VA_ARGS__); \
			n += k_ > 0 ? (size_t)k_ : 0; \
		} \
	} while (0)
	if (size == 0)
		return buf;
	buf[0] = '\0';
	if (g->sweep_value)
		PUT("%s=%s: ", r->sweep_key ? r->sweep_key : "sweep",
		    g->sweep_value);
	/* a cluster made of keys alone has no name */
	PUT("%s on %s%s(%d node%s x %d GPU%s, EP %d), %s packing, %d token%s per GPU per micro-batch, trace %s",
	    g->model, g->cluster, g->cluster[0] ? " " : "", g->nodes, g->nodes == 1 ? "" : "s",
	    g->gpus_per_node, g->gpus_per_node == 1 ? "" : "s", g->ep_size, g->pack,
	    g->micro_batch_tokens, g->micro_batch_tokens == 1 ? "" : "s",
	    g->trace_hash[0] ? g->trace_hash : "(no hash)");
	if (g->trace_path && g->trace_path[0])
		PUT(" (%s)", base_name(g->trace_path));
	if (!isnan(g->steps))
		PUT(", %.0f step%s", g->steps, g->steps == 1 ? "" : "s");
	if (!isnan(g->first_step) && !isnan(g->last_step)) {
		if (g->first_step == g->last_step)
			PUT(isnan(g->steps) ? ", step %.0f" : " (step %.0f)", g->first_step);
		else
			PUT(isnan(g->steps) ? ", steps %.0f to %.0f" : " (%.0f to %.0f)",
			    g->first_step, g->last_step);
	}
#undef PUT
	return buf;
}
