/*
 * test_report.c - unit tests of lib/report: number formatting, reading
 * result objects (every error with its message, tolerance of extra keys),
 * grouping, derived speedups and notes, row order, measured against
 * simulated, CSV quoting, step-plan series, the chart layer choice and
 * the series count of every chart.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <locale.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "relibra.h"
#include "plan.h"
#include "report.h"
#include "report_impl.h"
#include "suites.h"

/* A minimal plan result; the caller may edit it. */
static json_t *result(const char *kind, const char *policy, const char *hash,
		      double step_s)
{
	json_t *j = json_pack("{s:s, s:s, s:{s:s, s:s, s:i, s:i, s:i, s:i, s:s}, "
			      "s:{s:s, s:s}, s:s, s:f, s:f, s:f, s:f, "
			      "s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}}",
			      "schema", "relibra.result/1", "kind", kind,
			      "config", "model", "tiny", "cluster", "h100-2x2",
			      "nodes", 2, "gpus_per_node", 2, "ep_size", 4,
			      "micro_batch_tokens", 512, "pack", "in-order",
			      "trace", "hash", hash, "path", "t.rrt",
			      "policy", policy, "steps", 3.0,
			      "step_time_s", step_s, "tokens_per_s", 1000 / step_s,
			      "fraction_of_ideal", 0.5 / step_s,
			      "breakdown", "total_s", step_s, "dense_s", 0.1,
			      "expert_s", step_s - 0.3, "a2a_s", 0.1,
			      "replication_s", 0.05, "grad_reduce_s", 0.05,
			      "migration_s", 0.0, "planning_s", 0.0,
			      "a2a_rdma_s", 0.1);

	ck_assert_ptr_nonnull(j);
	return j;
}

static void add_ok(struct rlb_report *r, json_t *j, const char *src,
		   const char *sweep)
{
	struct rlb_err err = {0};

	ck_assert_msg(rlb_report_add_json(r, j, src, sweep, &err) == 0, "%s", err.msg);
	json_decref(j);
}

/* Add j (consumed) and expect code and message. */
static void add_bad(json_t *j, int code, const char *msg)
{
	struct rlb_report r;
	struct rlb_err err = {0};

	rlb_report_init(&r);
	ck_assert_int_eq(rlb_report_add_json(&r, j, "x.json", NULL, &err), code);
	ck_assert_str_eq(err.msg, msg);
	ck_assert_uint_eq(r.nrows, 0);
	ck_assert_uint_eq(r.ngroups, 0);
	json_decref(j);
	rlb_report_release(&r);
}

START_TEST(test_fmt3)
{
	char b[32], s[32];

	ck_assert_str_eq(rlb_report_fmt3(1883.8, b, sizeof(b)), "1880");
	ck_assert_str_eq(rlb_report_fmt3(1.0, b, sizeof(b)), "1.00");
	ck_assert_str_eq(rlb_report_fmt3(0.92852, b, sizeof(b)), "0.929");
	ck_assert_str_eq(rlb_report_fmt3(0.92539, b, sizeof(b)), "0.925");
	ck_assert_str_eq(rlb_report_fmt3(163000, b, sizeof(b)), "163000");
	ck_assert_str_eq(rlb_report_fmt3(2.5e6, b, sizeof(b)), "2.5e+06");
	ck_assert_str_eq(rlb_report_fmt3(1e308, b, sizeof(b)), "1e+308");
	ck_assert_str_eq(rlb_report_fmt3(163.4, b, sizeof(b)), "163");
	ck_assert_str_eq(rlb_report_fmt3(999.7, b, sizeof(b)), "1000");
	ck_assert_str_eq(rlb_report_fmt3(9.996, b, sizeof(b)), "10.0");
	ck_assert_str_eq(rlb_report_fmt3(-1.234, b, sizeof(b)), "-1.23");
	ck_assert_str_eq(rlb_report_fmt3(0.000123, b, sizeof(b)), "0.000123");
	ck_assert_str_eq(rlb_report_fmt3(0, b, sizeof(b)), "0");
	ck_assert_str_eq(rlb_report_fmt3(NAN, b, sizeof(b)), "-");
	ck_assert_str_eq(rlb_report_fmt3(INFINITY, b, sizeof(b)), "inf");
	ck_assert_str_eq(rlb_report_fmt3(-INFINITY, b, sizeof(b)), "-inf");
	ck_assert_str_eq(rlb_report_fmt3(5e-324, b, sizeof(b)), "4.94e-324");
	ck_assert_str_eq(rlb_report_fmt_si(INFINITY, b, sizeof(b)), "inf");
	(void)s;
}
END_TEST

START_TEST(test_read_errors)
{
	json_t *j;

	add_bad(json_array(), RLB_EPARSE,
		"'x.json': not a relibra result (not a JSON object)");
	j = result("plan", "static", "h1", 1.0);
	json_object_del(j, "schema");
	add_bad(j, RLB_EPARSE, "'x.json': not a relibra result (no \"schema\")");
	j = result("plan", "static", "h1", 1.0);
	json_object_set_new(j, "schema", json_string("relibra.result/2"));
	add_bad(j, RLB_EVERSION,
		"'x.json': schema 'relibra.result/2' is not supported (this relibra reads relibra.result/1)");
	j = result("plan", "static", "h1", 1.0);
	json_object_set_new(j, "schema", json_string("relibra.eplb-export/1"));
	add_bad(j, RLB_EPARSE,
		"'x.json': schema 'relibra.eplb-export/1' is not a relibra result (relibra.result/1)");
	add_bad(result("rollout", "static", "h1", 1.0), RLB_EPARSE,
		"'x.json': unknown kind 'rollout' (plan or train-step)");
	j = result("plan", "static", "h1", 1.0);
	json_object_del(json_object_get(j, "config"), "pack");
	add_bad(j, RLB_EPARSE, "'x.json': missing 'config.pack'");
	j = result("plan", "static", "h1", 1.0);
	json_object_set_new(json_object_get(j, "config"), "nodes", json_string("2"));
	add_bad(j, RLB_EPARSE, "'x.json': 'config.nodes' is not a non-negative integer");
	j = result("plan", "static", "h1", 1.0);
	json_object_del(json_object_get(j, "trace"), "hash");
	add_bad(j, RLB_EPARSE, "'x.json': missing 'trace.hash'");
	j = result("plan", "static", "h1", 1.0);
	json_object_del(j, "tokens_per_s");
	add_bad(j, RLB_EPARSE, "'x.json': missing 'tokens_per_s'");
	j = result("plan", "static", "h1", 1.0);
	json_object_set_new(j, "tokens_per_s", json_null());
	add_bad(j, RLB_EPARSE, "'x.json': 'tokens_per_s' is null, expected a positive number");
	add_bad(result("plan", "static", "h1", -2.0), RLB_EPARSE,
		"'x.json': 'step_time_s' must be positive, not -2");
	j = result("plan", "static", "h1", 1.0);
	json_object_set_new(json_object_get(j, "breakdown"), "a2a_s", json_true());
	add_bad(j, RLB_EPARSE, "'x.json': 'breakdown.a2a_s' is not a number");
}
END_TEST

START_TEST(test_read_tolerant)
{
	struct rlb_report r;
	json_t *j;

	rlb_report_init(&r);
	j = result("train-step", "relibra", "h1", 2.0);
	/* extra keys anywhere, nulls for absent figures, no breakdown parts */
	json_object_set_new(j, "critical_path_s", json_real(0.4));
	json_object_set_new(j, "per_step", json_pack("[{s:i}]", "step", 0));
	json_object_set_new(j, "fraction_of_ideal", json_null());
	json_object_set_new(json_object_get(j, "breakdown"), "forward_s", json_real(1));
	json_object_del(json_object_get(j, "breakdown"), "dense_s");
	add_ok(&r, j, "m.json", NULL);
	ck_assert_uint_eq(r.nrows, 1);
	ck_assert_int_eq(r.rows[0].kind, RLB_RESULT_TRAIN_STEP);
	ck_assert_str_eq(r.rows[0].label, "relibra");
	ck_assert(isnan(r.rows[0].fraction_of_ideal));
	ck_assert(isnan(r.rows[0].breakdown[RLB_PART_DENSE]));
	ck_assert(isnan(r.rows[0].gpu_p50));
	ck_assert_double_eq(r.rows[0].breakdown[RLB_PART_A2A], 0.1);
	rlb_report_release(&r);
}
END_TEST

START_TEST(test_groups_and_speedups)
{
	struct rlb_report r;
	struct rlb_err err = {0};
	char title[512];
	json_t *j;

	rlb_report_init(&r);
	ck_assert_int_eq(rlb_report_finish(&r, &err), RLB_EINVAL);
	/* given out of order; a second trace; a measured pair */
	add_ok(&r, result("plan", "relibra", "h1", 1.0), "a.json", NULL);
	add_ok(&r, result("train-step", "relibra", "h1", 1.5), "m1.json", NULL);
	add_ok(&r, result("plan", "ideal", "h1", 0.8), "b.json", NULL);
	j = result("plan", "static", "h1", 1.25);
	json_object_set_new(j, "speedup_over_static", json_real(1.0));
	add_ok(&r, j, "c.json", NULL);
	add_ok(&r, result("plan", "eplb-oracle", "h1", 1.1), "d.json", NULL);
	add_ok(&r, result("train-step", "static", "h1", 3.0), "m2.json", NULL);
	add_ok(&r, result("plan", "relibra", "h2", 2.0), "e.json", NULL);
	ck_assert_uint_eq(r.ngroups, 2);
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	/* order: static, eplb-oracle, relibra (plan, measured), ideal */
	ck_assert_str_eq(r.rows[0].source, "c.json");
	ck_assert_int_eq(r.rows[1].kind, RLB_RESULT_TRAIN_STEP);
	ck_assert_str_eq(r.rows[1].policy, "static");
	ck_assert_str_eq(r.rows[2].source, "d.json");
	ck_assert_str_eq(r.rows[3].source, "a.json");
	ck_assert_str_eq(r.rows[4].source, "m1.json");
	ck_assert_str_eq(r.rows[5].source, "b.json");
	ck_assert_str_eq(r.rows[6].source, "e.json");
	/* plan rows without their own speedup fall back to the static row */
	ck_assert_double_eq_tol(r.rows[3].x_static, 1.25, 1e-12);
	ck_assert_double_eq_tol(r.rows[3].x_eplb_oracle, 1.1, 1e-12);
	ck_assert_double_eq_tol(r.rows[2].x_eplb_oracle, 1.0, 1e-12);
	/* measured rows against the measured static run; no measured oracle */
	ck_assert_double_eq_tol(r.rows[4].x_static, 2.0, 1e-12);
	ck_assert(isnan(r.rows[4].x_eplb_oracle));
	ck_assert_int_eq(rlb_report_simulated_of(&r, 4), 3);
	ck_assert_int_eq(rlb_report_simulated_of(&r, 3), -1);
	ck_assert_uint_eq(r.groups[0].nnotes, 1);
	ck_assert_str_eq(r.groups[0].notes[0],
			 "no measured eplb-oracle run: speedup over eplb-oracle of measured rows not shown");
	/* the second group: no baselines at all */
	ck_assert(isnan(r.rows[6].x_static));
	ck_assert_uint_eq(r.groups[1].nnotes, 1);
	ck_assert_str_eq(r.groups[1].notes[0],
			 "no eplb-oracle result: speedup over eplb-oracle not shown");
	ck_assert_str_eq(rlb_report_group_title(&r, 1, title, sizeof(title)),
			 "tiny on h100-2x2 (2 nodes x 2 GPUs, EP 4), in-order packing, 512 tokens per GPU per micro-batch, trace h2 (t.rrt), 3 steps");
	rlb_report_release(&r);
}
END_TEST

/* The label of the row read from SOURCE. */
static const char *label_of(const struct rlb_report *r, const char *source)
{
	size_t i;

	for (i = 0; i < r->nrows; i++)
		if (strcmp(r->rows[i].source, source) == 0)
			return r->rows[i].label;
	return "(no such row)";
}

START_TEST(test_duplicates_and_sweep)
{
	struct rlb_report r;
	struct rlb_err err = {0};
	char title[512];

	rlb_report_init(&r);
	add_ok(&r, result("plan", "relibra", "h1", 1.0), "dir/one.json", NULL);
	add_ok(&r, result("plan", "relibra", "h1", 1.2), "two.json", NULL);
	add_ok(&r, result("plan", "relibra", "h1", 0.9), "t.rrt", "4");
	ck_assert_uint_eq(r.ngroups, 2);
	r.sweep_key = strdup("balancer.replica_slots");
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	ck_assert_str_eq(r.rows[0].label, "relibra (one.json)");
	ck_assert_str_eq(r.rows[1].label, "relibra (two.json)");
	ck_assert_str_eq(r.rows[2].label, "relibra");
	ck_assert_str_eq(r.rows[2].sweep_value, "4");
	ck_assert_str_eq(rlb_report_group_title(&r, 1, title, 40),
			 "balancer.replica_slots=4: tiny on h100-");
	rlb_report_release(&r);
	/* one file name in several directories: as much of the path as tells them apart */
	rlb_report_init(&r);
	add_ok(&r, result("plan", "relibra", "h1", 1.0), "/runs/a/s.json", NULL);
	add_ok(&r, result("plan", "relibra", "h1", 1.1), "runs/b/s.json", NULL);
	add_ok(&r, result("plan", "relibra", "h1", 1.2), "c/a/s.json", NULL);
	add_ok(&r, result("plan", "relibra", "h1", 1.3), "a/s.json", NULL);
	add_ok(&r, result("plan", "static", "h1", 1.0), "a/t.json", NULL);
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	ck_assert_str_eq(label_of(&r, "/runs/a/s.json"), "relibra (runs/a/s.json)");
	ck_assert_str_eq(label_of(&r, "runs/b/s.json"), "relibra (b/s.json)");
	ck_assert_str_eq(label_of(&r, "c/a/s.json"), "relibra (c/a/s.json)");
	ck_assert_str_eq(label_of(&r, "a/s.json"), "relibra (a/s.json)");
	ck_assert_str_eq(label_of(&r, "a/t.json"), "static");
	rlb_report_release(&r);
}
END_TEST

/* The report rendered to a string. */
static char *render(const struct rlb_report *r, enum rlb_report_format f)
{
	struct rlb_err err = {0};
	char *buf = NULL;
	size_t n = 0;
	FILE *fp = open_memstream(&buf, &n);

	ck_assert_ptr_nonnull(fp);
	ck_assert_msg(rlb_report_write(r, f, fp, &err) == 0, "%s", err.msg);
	fclose(fp);
	return buf;
}

START_TEST(test_csv_and_formats)
{
	struct rlb_report r;
	struct rlb_err err = {0};
	enum rlb_report_format f;
	char *s;
	json_t *j, *doc;

	rlb_report_init(&r);
	j = result("plan", "relibra", "h1", 0.5);
	json_object_set_new(j, "label", json_string("relibra, \"tuned\""));
	add_ok(&r, j, "a.json", NULL);
	ck_assert_int_eq(rlb_report_write(&r, RLB_REPORT_CSV, stdout, &err), RLB_EINVAL);
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	s = render(&r, RLB_REPORT_CSV);
	ck_assert_ptr_nonnull(strstr(s, ",plan,relibra,\"relibra, \"\"tuned\"\"\",3,,0.5,2000,,,1,"));
	free(s);
	s = render(&r, RLB_REPORT_MARKDOWN);
	ck_assert_ptr_nonnull(strstr(s, "| relibra, \"tuned\" | 500 | 2.00k | - | - | 1.00 |"));
	free(s);
	s = render(&r, RLB_REPORT_JSON);
	doc = json_loads(s, 0, NULL);
	ck_assert_ptr_nonnull(doc);
	ck_assert_str_eq(json_string_value(json_object_get(doc, "schema")), RLB_REPORT_SCHEMA);
	ck_assert(json_is_null(json_object_get(json_array_get(json_object_get(doc, "results"), 0),
					       "speedup_over_static")));
	json_decref(doc);
	free(s);
	ck_assert_int_eq(rlb_report_format_from_name("markdown", &f, NULL), 0);
	ck_assert_int_eq(f, RLB_REPORT_MARKDOWN);
	ck_assert_int_eq(rlb_report_format_from_name("xml", &f, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "unknown format 'xml' (table, markdown, csv or json)");
	rlb_report_release(&r);
}
END_TEST

/*
 * A newline or a tab in a label or in the trace's file name keeps a table
 * row on one line and a title on one line, in the table and in Markdown.
 */
START_TEST(test_control_chars_in_tables)
{
	struct rlb_report r;
	struct rlb_err err = {0};
	json_t *j;
	char *s;

	rlb_report_init(&r);
	j = result("plan", "relibra", "h1", 0.5);
	json_object_set_new(j, "label", json_string("tuned\nrun\t2|b"));
	json_object_set_new(json_object_get(j, "trace"), "path", json_string("a\nb.rrt"));
	add_ok(&r, j, "a.json", NULL);
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	s = render(&r, RLB_REPORT_TABLE);
	ck_assert_msg(strstr(s, "trace h1 (a b.rrt), 3 steps\n") != NULL, "%s", s);
	ck_assert_msg(strstr(s, "\ntuned run 2|b  ") != NULL, "%s", s);
	free(s);
	s = render(&r, RLB_REPORT_MARKDOWN);
	ck_assert_msg(strstr(s, "trace h1 (a b.rrt), 3 steps\n\n") != NULL, "%s", s);
	ck_assert_msg(strstr(s, "\n| tuned run 2\\|b | 500 |") != NULL, "%s", s);
	free(s);
	rlb_report_release(&r);
}
END_TEST

/*
 * err may be NULL (relibra(3)): a chart's failure inside the HTML page or
 * the SVG files is returned, not stored through it.
 */
START_TEST(test_write_null_err)
{
	struct rlb_report r;
	struct rlb_atomic_file *files = NULL;
	char dir[4096];
	size_t n = 1;
	FILE *fp;

	rlb_report_init(&r);
	add_ok(&r, result("plan", "static", "h1", 1.0), "a.json", NULL);
	add_ok(&r, result("plan", "relibra", "h1", 0.8), "b.json", NULL);
	snprintf(dir, sizeof(dir), "%s/report-null-err", rlb_test_tmpdir());
	/* not finished: the first chart fails */
	ck_assert_int_eq(rlb_report_write_svgs(&r, NULL, dir, &files, &n, NULL), RLB_EINVAL);
	ck_assert_ptr_null(files);
	ck_assert_uint_eq(n, 0);
	/* nor does the folder it made stay */
	ck_assert_int_eq(access(dir, F_OK), -1);
	ck_assert_int_eq(rlb_report_finish(&r, NULL), 0);
	/* a chart written after the page's first bytes failed */
	fp = fopen("/dev/full", "w");
	if (fp) {
		ck_assert_int_eq(rlb_report_write_html(&r, NULL, fp, NULL), RLB_EIO);
		fclose(fp);
	}
	rlb_report_release(&r);
}
END_TEST

/* A time column's unit keeps its values below 1000 once rounded. */
START_TEST(test_time_unit_rounding)
{
	struct rlb_report r;
	struct rlb_err err = {0};
	json_t *j;
	char *s;

	rlb_report_init(&r);
	j = result("plan", "static", "h1", 0.9997);
	json_object_set_new(json_object_get(j, "breakdown"), "migration_s",
			    json_real(0.0009996));
	add_ok(&r, j, "a.json", NULL);
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	s = render(&r, RLB_REPORT_MARKDOWN);
	ck_assert_ptr_nonnull(strstr(s, "| step (s) |"));
	ck_assert_ptr_nonnull(strstr(s, "| migration (ms) |"));
	ck_assert_ptr_nonnull(strstr(s, "| static | 1.00 |"));
	ck_assert_ptr_null(strstr(s, "1000"));
	free(s);
	rlb_report_release(&r);
}
END_TEST

/* The thread's locale at each progress call, against the host's. */
struct locale_seen {
	locale_t host;
	unsigned calls, other;
};

static void progress_locale(void *ctx, uint64_t done, uint64_t total,
			    const char *unit)
{
	struct locale_seen *s = ctx;

	(void)done;
	(void)total;
	(void)unit;
	s->calls++;
	s->other += uselocale((locale_t)0) != s->host;
}

/*
 * rlb_report_run calls the host's progress function in the host's
 * locale, not in the C locale the library reads its numbers in, and
 * gives the thread its locale back.
 */
START_TEST(test_run_progress_locale)
{
	static const char *const sets[] = {
		"model.name=run-test", "model.experts=8", "model.topk=2",
		"model.hidden=16", "model.expert_ffn=8", "model.moe_layers=2",
		"cluster.nodes=2", "cluster.gpus_per_node=2", "parallel.ep_size=4",
		"parallel.micro_batch_tokens=48", "workload.steps=2",
		"workload.prompts_per_step=4", "workload.samples_per_prompt=2",
		"workload.len_median=40", "workload.len_min=8", "workload.len_max=100",
		"workload.segment_min=4", "workload.segment_max=32",
	};
	const char *const policies[] = { "static", "relibra" };
	struct rlb_report_run_opts o;
	struct locale_seen seen = { 0, 0, 0 };
	struct rlb_trace_header h;
	struct rlb_trace_writer *w;
	struct rlb_trace_reader *rd;
	struct rlb_config cfg;
	struct rlb_report r;
	struct rlb_err err = {0};
	locale_t before;
	char path[4096];

	snprintf(path, sizeof(path), "%s/report-run-%ld.rrt", rlb_test_tmpdir(), (long)getpid());
	ck_assert_msg(rlb_config_load(&cfg, NULL, sets, sizeof(sets) / sizeof(sets[0]),
				      &err) == 0, "%s", err.msg);
	memset(&h, 0, sizeof(h));
	rlb_trace_header_from_config(&h, &cfg);
	ck_assert_msg(rlb_trace_writer_open(&w, path, &h, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_synth_generate(&cfg, 3, 0, w, NULL, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_writer_close(w, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(rlb_trace_reader_open(&rd, path, &err), 0);

	/* a locale object of the host's own, told apart from the library's */
	seen.host = duplocale(LC_GLOBAL_LOCALE);
	ck_assert_ptr_nonnull(seen.host);
	before = uselocale(seen.host);
	memset(&o, 0, sizeof(o));
	o.policies = policies;
	o.npolicies = 2;
	o.planner.pack = cfg.parallel.pack;
	o.planner.last_step = UINT32_MAX;
	o.planner.threads = 1;
	o.planner.no_timing = 1;
	o.planner.progress = progress_locale;
	o.planner.progress_ctx = &seen;
	rlb_report_init(&r);
	ck_assert_msg(rlb_report_run(&r, rd, &cfg, &o, &err) == 0, "%s", err.msg);
	ck_assert_ptr_eq(uselocale((locale_t)0), seen.host);
	uselocale(before);
	freelocale(seen.host);
	ck_assert_uint_eq(r.nrows, 2);
	ck_assert_uint_eq(seen.calls, 2);
	ck_assert_uint_eq(seen.other, 0);
	rlb_report_release(&r);
	rlb_trace_reader_free(rd);
	unlink(path);
}
END_TEST

START_TEST(test_series_from_plan)
{
	struct rlb_step_plan p;
	struct rlb_report_series *s;
	struct rlb_err err = {0};
	uint32_t e;

	/* 1 mb, 1 layer, 4 experts on 2 GPUs; expert 0 replicated on GPU 1 */
	ck_assert_int_eq(rlb_step_plan_init(&p, 7, 1, 1, 4, 2, 2, 1, RLB_SPLIT_LOCALITY,
					    &err), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 0, 30, NULL), 0);
	ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, 0, 1, 20, NULL), 0);
	for (e = 1; e < 4; e++)
		ck_assert_int_eq(rlb_step_plan_add(&p, 0, 0, e, e / 2, 10 * e, NULL), 0);
	ck_assert_int_eq(rlb_report_series_from_plan(&p, &s, &err), 0);
	ck_assert_uint_eq(s->step, 7);
	ck_assert_uint_eq(s->ranks, 2);
	ck_assert_uint_eq(s->rows[0], 30 + 10);
	ck_assert_uint_eq(s->rows[1], 20 + 20 + 30);
	rlb_report_series_free(s);
	rlb_step_plan_release(&p);
}
END_TEST

static struct rlb_report_series *series(uint32_t mbs, uint32_t layers,
					uint32_t ranks, uint32_t hot_layer,
					uint64_t hot)
{
	struct rlb_report_series *s = calloc(1, sizeof(*s));
	size_t i;

	ck_assert_ptr_nonnull(s);
	s->step = 2;
	s->micro_batches = mbs;
	s->layers = layers;
	s->ranks = ranks;
	s->rows = calloc((size_t)mbs * layers * ranks, sizeof(*s->rows));
	ck_assert_ptr_nonnull(s->rows);
	for (i = 0; i < (size_t)mbs * layers * ranks; i++)
		s->rows[i] = 10;
	for (i = 0; i < mbs; i++)
		s->rows[(i * layers + hot_layer) * ranks] = hot;
	return s;
}

/* Occurrences of NEEDLE in a chart's SVG; -1 when it has no data. */
static int count_in_chart(const struct rlb_report *r, enum rlb_report_chart c,
			  const struct rlb_report_chart_opts *o,
			  const char *needle)
{
	struct rlb_err err = {0};
	char *buf = NULL, *p;
	size_t n = 0;
	FILE *fp = open_memstream(&buf, &n);
	int ret, count = 0;

	ck_assert_ptr_nonnull(fp);
	ret = rlb_report_chart_svg(r, c, 0, o, fp, &err);
	fclose(fp);
	if (ret == RLB_ENOTFOUND) {
		ck_assert_uint_eq(n, 0);
		free(buf);
		return -1;
	}
	ck_assert_msg(ret == 0, "%s", err.msg);
	ck_assert_ptr_nonnull(strstr(buf, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
	for (p = buf; (p = strstr(p, needle)); p++)
		count++;
	free(buf);
	return count;
}

/*
 * The tokens chart's texts as y coordinates: the ideal label's and the
 * lowest (largest y) of the plot's top border and every bar value.
 */
static void tokens_chart_ys(const struct rlb_report *r, double *ideal_y,
			    double *value_y_min)
{
	struct rlb_report_chart_opts o = { .layer = -1 };
	struct rlb_err err = {0};
	char *buf = NULL, *p;
	size_t n = 0;
	FILE *fp = open_memstream(&buf, &n);

	ck_assert_ptr_nonnull(fp);
	ck_assert_int_eq(rlb_report_chart_svg(r, RLB_CHART_TOKENS, 0, &o, fp, &err), 0);
	fclose(fp);
	*ideal_y = -1;
	*value_y_min = 1e9;
	for (p = buf; (p = strstr(p, "<text ")); p++) {
		const char *y = strstr(p, " y=\""), *end = strstr(p, "</text>");
		const char *gt = strchr(p, '>');

		ck_assert_ptr_nonnull(y);
		ck_assert_ptr_nonnull(end);
		if (strncmp(gt + 1, "ideal ", 6) == 0)
			*ideal_y = strtod(y + 4, NULL);
		else if (strstr(p, "paint-order") && strstr(p, "paint-order") < gt)
			*value_y_min = fmin(*value_y_min, strtod(y + 4, NULL));
	}
	free(buf);
}

START_TEST(test_charts)
{
	static const char *const policies[] = { "static", "eplb", "relibra", "ideal" };
	struct rlb_report_chart_opts o = { .layer = -1 };
	struct rlb_report r;
	struct rlb_err err = {0};
	size_t i;

	rlb_report_init(&r);
	for (i = 0; i < 4; i++)
		add_ok(&r, result("plan", policies[i], "h1", 1.0 + 0.1 * i), "a.json", NULL);
	add_ok(&r, result("train-step", "relibra", "h1", 2.0), "m.json", NULL);
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	/* bars: every result but the ideal (a reference line) */
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_TOKENS, &o, "class=\"series\""), 4);
	{
		/* the ideal's label sits above every bar value, out of their way */
		double iy, vy;

		tokens_chart_ys(&r, &iy, &vy);
		ck_assert(iy > 0);
		ck_assert(vy < 1e9);
		ck_assert_msg(iy + 12 < vy, "ideal label at y %g, a bar value at %g", iy, vy);
	}
	/* five parts, stacked */
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_BREAKDOWN, &o, "class=\"series\""), 5);
	/* no series: no micro-batch chart, no heatmap, no sweep */
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_MICROBATCH, &o, "class"), -1);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_HEATMAP, &o, "class"), -1);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_SWEEP_SPEEDUP, &o, "class"), -1);
	ck_assert_int_eq(rlb_report_chart_layer(&r, 0, &o), -1);

	/* static hot in layer 2, eplb in layer 1: static decides */
	rlb_report_set_series(&r, 0, series(3, 4, 4, 2, 40));
	rlb_report_set_series(&r, 1, series(3, 4, 4, 1, 80));
	rlb_report_set_series(&r, 2, series(3, 4, 4, 0, 10));
	ck_assert_int_eq(rlb_report_chart_layer(&r, 0, &o), 2);
	o.layer = 3;
	ck_assert_int_eq(rlb_report_chart_layer(&r, 0, &o), 3);
	o.layer = 9;	/* out of range: the default */
	ck_assert_int_eq(rlb_report_chart_layer(&r, 0, &o), 2);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_MICROBATCH, &o, "class=\"series\""), 3);
	/* one point per micro-batch and line */
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_MICROBATCH, &o, "<circle"), 9);
	/* the ideal at 1: a dashed line, and so in the legend */
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_MICROBATCH, &o, "stroke-dasharray"), 2);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_HEATMAP, &o, "class=\"series\""), 2);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_HEATMAP, &o, "<rect x"), 2 * 16 + 2 + 1);
	rlb_report_release(&r);
}
END_TEST

/* j with "per_step": steps first.., times t[i], the ideal at half of each. */
static json_t *with_steps(json_t *j, int first, const double *t, size_t n)
{
	json_t *a = json_array();
	size_t i;

	for (i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:i, s:f, s:f}", "step", first + (int)i,
						   "step_time_s", t[i],
						   "fraction_of_ideal", 0.5));
	json_object_set_new(j, "per_step", a);
	return j;
}

START_TEST(test_steps_chart)
{
	static const double ts[3] = { 1.5, 1.0, 1.0 }, tr[3] = { 0.9, 0.8, 0.85 };
	struct rlb_report r;
	struct rlb_err err = {0};
	json_t *j;

	/* one step: no chart; results without per_step: none either */
	rlb_report_init(&r);
	add_ok(&r, with_steps(result("plan", "static", "h1", 1.5), 4, ts, 1), "s.json", NULL);
	add_ok(&r, result("plan", "eplb", "h1", 1.2), "e.json", NULL);
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_STEPS, NULL, "class"), -1);
	rlb_report_release(&r);

	/* a line per plan (the ideal policy and train-step results aside) */
	rlb_report_init(&r);
	add_ok(&r, with_steps(result("plan", "static", "h1", 1.17), 4, ts, 3), "s.json", NULL);
	add_ok(&r, with_steps(result("plan", "relibra", "h1", 0.85), 4, tr, 3), "r.json", NULL);
	add_ok(&r, with_steps(result("plan", "ideal", "h1", 0.5), 4, tr, 3), "i.json", NULL);
	add_ok(&r, with_steps(result("train-step", "relibra", "h1", 2.0), 4, tr, 3), "m.json", NULL);
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	ck_assert_uint_eq(r.rows[0].nper_step, 3);
	ck_assert(r.rows[0].per_step[2].step == 6 && r.rows[0].per_step[0].ideal_s == 0.75);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_STEPS, NULL, "class=\"series\""), 2);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_STEPS, NULL, "<circle"), 6);
	/* the ideal: one dashed line of 3 points */
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_STEPS, NULL, "class=\"reference\""), 1);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_STEPS, NULL, " L"), 2 + 2 * 2);
	/* dashed in the legend too */
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_STEPS, NULL, "stroke-dasharray"), 2);
	rlb_report_release(&r);

	/* malformed per_step */
	j = result("plan", "static", "h1", 1.0);
	json_object_set_new(j, "per_step", json_object());
	add_bad(j, RLB_EPARSE, "'x.json': 'per_step' is not an array");
	j = with_steps(result("plan", "static", "h1", 1.0), 0, ts, 2);
	json_object_del(json_array_get(json_object_get(j, "per_step"), 1), "step_time_s");
	add_bad(j, RLB_EPARSE, "'x.json': 'per_step[1].step_time_s' is not a positive number");
	j = with_steps(result("plan", "static", "h1", 1.0), 0, ts, 2);
	json_object_set_new(json_array_get(json_object_get(j, "per_step"), 0), "step",
			    json_integer(-2));
	add_bad(j, RLB_EPARSE, "'x.json': 'per_step[0].step' is not a non-negative integer");
	j = with_steps(result("plan", "static", "h1", 1.0), 3, ts, 2);
	json_object_set_new(json_array_get(json_object_get(j, "per_step"), 1), "step",
			    json_integer(3));
	add_bad(j, RLB_EPARSE, "'x.json': 'per_step[1].step' 3 does not follow step 3");
}
END_TEST

/* Chart C of group 0 as SVG text, to free. */
static char *chart_text(const struct rlb_report *r, enum rlb_report_chart c,
			const struct rlb_report_chart_opts *o)
{
	struct rlb_err err = {0};
	char *buf = NULL;
	size_t n = 0;
	FILE *fp = open_memstream(&buf, &n);

	ck_assert_ptr_nonnull(fp);
	ck_assert_msg(rlb_report_chart_svg(r, c, 0, o, fp, &err) == 0, "%s", err.msg);
	fclose(fp);
	return buf;
}

/*
 * The Y axis labels of an SVG chart (the first axis group's end-anchored
 * texts) read back: as many ticks as labels, each its own value, evenly
 * spaced upwards.
 */
static void check_y_ticks(const char *svg)
{
	const char *p = strstr(svg, "<g class=\"axis\""), *end;
	double v[64];
	size_t n = 0, i;

	ck_assert_ptr_nonnull(p);
	end = strstr(p, "</g>");
	while ((p = strstr(p, "text-anchor=\"end\">")) && p < end && n < 64) {
		char *e;

		p += strlen("text-anchor=\"end\">");
		v[n] = strtod(p, &e);
		if (*e && strchr("kMGT", *e))	/* an SI prefix */
			v[n] *= pow(1000, (double)(strchr("kMGT", *e++) - "kMGT" + 1));
		ck_assert_msg(*e == '<', "tick label '%.12s'", p);
		n++;
	}
	ck_assert_uint_ge(n, 2);
	for (i = 1; i < n; i++)
		ck_assert_msg(fabs((v[i] - v[i - 1]) - (v[1] - v[0])) <= 1e-9 * fabs(v[n - 1]) &&
			      v[i] > v[i - 1], "ticks %g, %g after %g, %g: %s",
			      v[i - 1], v[i], v[0], v[1], svg);
}

/* Tick labels say their ticks, however close the ticks are. */
START_TEST(test_tick_labels)
{
	struct rlb_report_chart_opts o = { .layer = -1 };
	struct rlb_report_series *s;
	struct rlb_report r;
	struct rlb_err err = {0};
	char *svg;
	size_t i;

	/* fractions of ideal 0.885 to 1: ticks 0.875 to 1.025 */
	rlb_report_init(&r);
	add_ok(&r, result("plan", "static", "h1", 0.5 / 0.885), "t", "a");
	add_ok(&r, result("plan", "relibra", "h1", 0.5), "t", "a");
	r.sweep_key = strdup("cluster.name");
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	svg = chart_text(&r, RLB_CHART_SWEEP_IDEAL, &o);
	ck_assert_ptr_nonnull(strstr(svg, ">1.025</text>"));
	check_y_ticks(svg);
	free(svg);
	rlb_report_release(&r);

	/* a busiest GPU 1.002 times the mean: ticks 1, 1.005, ... */
	rlb_report_init(&r);
	add_ok(&r, result("plan", "static", "h1", 1.0), "s.json", NULL);
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	s = series(2, 1, 4, 0, 10);
	for (i = 0; i < 8; i++)
		s->rows[i] = i % 4 == 0 ? 1002 : i % 4 == 1 ? 1000 : 999;
	rlb_report_set_series(&r, 0, s);
	svg = chart_text(&r, RLB_CHART_MICROBATCH, &o);
	ck_assert_ptr_nonnull(strstr(svg, ">1.005</text>"));
	check_y_ticks(svg);
	free(svg);
	/* the other charts' axes too */
	for (i = 0; i < 3; i++) {
		static const enum rlb_report_chart c[3] = {
			RLB_CHART_TOKENS, RLB_CHART_BREAKDOWN, RLB_CHART_MICROBATCH
		};

		svg = chart_text(&r, c[i], &o);
		check_y_ticks(svg);
		free(svg);
	}
	rlb_report_release(&r);
}
END_TEST

/* Every rect and text of an SVG chart ends within its 760 px width. */
static void check_within_width(const char *svg)
{
	const char *p;

	for (p = svg; (p = strstr(p, " x=\"")); p++) {
		double x = strtod(p + 4, NULL), w = 0;
		const char *wp = strstr(p, " width=\""), *gt = strchr(p, '>');

		if (wp && wp < gt)
			w = strtod(wp + 8, NULL);
		ck_assert_msg(x >= 0 && x + w <= 760, "x %g, width %g: %.80s", x, w, p);
	}
}

/* The heatmap's two panels fit the chart however many GPUs there are. */
START_TEST(test_heatmap_many_gpus)
{
	struct rlb_report_chart_opts o = { .layer = -1 };
	static const uint32_t ranks[] = { 4, 64, 128, 1024 };
	struct rlb_report r;
	struct rlb_err err = {0};
	char *svg;
	size_t i;

	for (i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++) {
		rlb_report_init(&r);
		add_ok(&r, result("plan", "static", "h1", 1.0), "s.json", NULL);
		add_ok(&r, result("plan", "relibra", "h1", 0.9), "r.json", NULL);
		ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
		rlb_report_set_series(&r, 0, series(2, 3, ranks[i], 1, 40));
		rlb_report_set_series(&r, 1, series(2, 3, ranks[i], 1, 20));
		svg = chart_text(&r, RLB_CHART_HEATMAP, &o);
		ck_assert_ptr_nonnull(strstr(svg, "data-label=\"relibra\""));
		check_within_width(svg);
		free(svg);
		rlb_report_release(&r);
	}
}
END_TEST

/*
 * Slanted bar labels that would run past the chart's left edge are cut,
 * with an ellipsis, and the whole label goes in a tooltip.
 */
START_TEST(test_long_bar_labels)
{
	static const enum rlb_report_chart c[] = { RLB_CHART_TOKENS, RLB_CHART_BREAKDOWN };
	struct rlb_report_chart_opts o = { .layer = -1 };
	struct rlb_report r;
	struct rlb_err err = {0};
	char src[128], *svg;
	const char *p;
	size_t i, cut;

	rlb_report_init(&r);
	add_ok(&r, result("plan", "static", "h1", 1.0), "static.json", NULL);
	for (i = 0; i < 7; i++) {
		snprintf(src, sizeof(src), "runs/relibra-with-a-long-name-for-the-sweep-point-%zu/summary.json", i);
		add_ok(&r, result("plan", "relibra", "h1", 0.9 - 0.01 * i), src, NULL);
	}
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	for (i = 0; i < 2; i++) {
		svg = chart_text(&r, c[i], &o);
		cut = 0;
		for (p = svg; (p = strstr(p, "transform=\"rotate(-35 ")); p++) {
			const char *x = strstr(p - 80, "<text x=\""), *gt = strchr(p, '>');
			const char *end = strstr(gt, "</text>"), *title = strstr(gt, "<title>");
			size_t chars = 0;
			const char *q;

			ck_assert_ptr_nonnull(x);
			if (title && title < end) {
				end = title;
				cut++;
			}
			for (q = gt + 1; q < end; q++)
				chars += ((unsigned char)*q & 0xc0) != 0x80;
			ck_assert_msg(strtod(x + 9, NULL) - chars * 6.5 * 0.819 >= 0,
				      "label runs past the left edge: %.*s", (int)(end - x), x);
		}
		ck_assert_uint_gt(cut, 0);
		ck_assert_ptr_nonnull(strstr(svg, "\xe2\x80\xa6<title>"));
		check_within_width(svg);
		free(svg);
	}
	rlb_report_release(&r);
}
END_TEST

START_TEST(test_sweep_chart)
{
	static const char *const vals[] = { "0", "1", "2", "4" };
	struct rlb_report r;
	struct rlb_err err = {0};
	size_t i;

	rlb_report_init(&r);
	for (i = 0; i < 4; i++) {
		add_ok(&r, result("plan", "static", "h1", 1.0), "t", vals[i]);
		add_ok(&r, result("plan", "relibra", "h1", 1.0 - 0.1 * i), "t", vals[i]);
	}
	r.sweep_key = strdup("balancer.replica_slots");
	ck_assert_int_eq(rlb_report_finish(&r, &err), 0);
	ck_assert_uint_eq(r.ngroups, 4);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_SWEEP_SPEEDUP, NULL, "class=\"series\""), 2);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_SWEEP_IDEAL, NULL, "<circle"), 8);
	/* step times in the table's unit, from 0, without the ratios' line at 1 */
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_SWEEP_STEP, NULL, "<circle"), 8);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_SWEEP_STEP, NULL,
					"<title>relibra at 4: 0.700</title>"), 1);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_SWEEP_STEP, NULL, "step time (s)"), 1);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_SWEEP_STEP, NULL, "class=\"reference\""), 0);
	ck_assert_int_eq(count_in_chart(&r, RLB_CHART_SWEEP_SPEEDUP, NULL, "class=\"reference\""), 1);
	rlb_report_release(&r);
}
END_TEST

Suite *rlb_suite_report(void)
{
	Suite *s = suite_create("report");
	TCase *tc = tcase_create("report");

	tcase_add_test(tc, test_fmt3);
	tcase_add_test(tc, test_read_errors);
	tcase_add_test(tc, test_steps_chart);
	tcase_add_test(tc, test_read_tolerant);
	tcase_add_test(tc, test_groups_and_speedups);
	tcase_add_test(tc, test_duplicates_and_sweep);
	tcase_add_test(tc, test_csv_and_formats);
	tcase_add_test(tc, test_write_null_err);
	tcase_add_test(tc, test_time_unit_rounding);
	tcase_add_test(tc, test_run_progress_locale);
	tcase_add_test(tc, test_series_from_plan);
	tcase_add_test(tc, test_charts);
	tcase_add_test(tc, test_sweep_chart);
	tcase_add_test(tc, test_tick_labels);
	tcase_add_test(tc, test_control_chars_in_tables);
	tcase_add_test(tc, test_heatmap_many_gpus);
	tcase_add_test(tc, test_long_bar_labels);
	suite_add_tcase(s, tc);
	return s;
}
