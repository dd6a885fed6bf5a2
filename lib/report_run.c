/*
 * report_run.c - `relibra report -c CONFIG --trace TRACE`: plan and
 * simulate a trace under several policies in one pass of the planner,
 * turn each policy's summary into a report row, and keep each policy's
 * expert rows per (micro-batch, layer, GPU) of the last step for the
 * charts.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "relibra.h"
#include "report.h"

int rlb_report_series_from_plan(const struct rlb_step_plan *p,
				struct rlb_report_series **out,
				struct rlb_err *err)
{
	struct rlb_report_series *s;
	size_t cells = (size_t)p->micro_batches * p->layers;
	uint32_t mb, layer, e, k, n;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	s->step = p->step;
	s->micro_batches = p->micro_batches;
	s->layers = p->layers;
	s->ranks = p->ranks;
	s->rows = calloc(cells * p->ranks + 1, sizeof(*s->rows));
	if (!s->rows) {
		free(s);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	for (mb = 0; mb < p->micro_batches; mb++)
		for (layer = 0; layer < p->layers; layer++) {
			uint64_t *row = s->rows +
				((size_t)mb * p->layers + layer) * p->ranks;

			for (e = 0; e < p->experts; e++) {
				const struct rlb_plan_instance *in =
					rlb_step_plan_cell(p, mb, layer, e, &n);

				for (k = 0; k < n; k++)
					if (in[k].gpu < p->ranks)
						row[in[k].gpu] += in[k].quota;
			}
		}
	*out = s;
	return 0;
}

/* on_step context: the series of the latest step planned. */
struct keep_last {
	struct rlb_report_series *series;
};

static int keep_step(void *ctx, const struct rlb_step_plan *p,
		     struct rlb_err *err)
{
	struct keep_last *k = ctx;
	struct rlb_report_series *s;
	int ret;

	ret = rlb_report_series_from_plan(p, &s, err);
	if (ret)
		return ret;
	rlb_report_series_free(k->series);
	k->series = s;
	return 0;
}

/*
 * Not in the C locale as a whole: the numbers it reads, rlb_report_add_json
 * reads in it, and the host's progress callback runs in the host's locale.
 */
int rlb_report_run(struct rlb_report *r, struct rlb_trace_reader *reader,
		   const struct rlb_config *cfg,
		   const struct rlb_report_run_opts *o, struct rlb_err *err)
{
	struct rlb_planner_policy *pol = NULL;
	struct keep_last *keep = NULL;
	struct rlb_sim_summary st;
	struct rlb_result_source src;
	size_t i, n = o->npolicies;
	json_t *j;
	int ret = 0;

	if (n == 0)
		return rlb_err_set(err, RLB_EINVAL, "no policy to plan");
	pol = calloc(n, sizeof(*pol));
	keep = calloc(n, sizeof(*keep));
	if (!pol || !keep) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		rlb_balance_opts_from_config(&pol[i].opts, cfg);
		ret = rlb_policy_spec_apply(o->policies[i], &pol[i].opts, err);
		if (ret)
			goto out;
		if (o->series) {
			pol[i].on_step = keep_step;
			pol[i].on_step_ctx = &keep[i];
		}
	}
	ret = rlb_planner_run(reader, cfg, &o->planner, pol, n, &st, err);
	if (ret)
		goto out;
	memset(&src, 0, sizeof(src));
	src.config_path = o->config_path;
	src.trace_path = o->trace_path;
	src.trace = rlb_trace_reader_header(reader);
	src.trace_truncated = rlb_trace_reader_truncated(reader);
	src.no_timing = 1;
	for (i = 0; i < n; i++) {
		j = rlb_result_json(cfg, &o->planner, &pol[i], &st, &src);
		if (!j) {
			ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
			goto out;
		}
		ret = rlb_report_add_json(r, j, o->trace_path ? o->trace_path : "trace",
					  o->sweep_value, err);
		json_decref(j);
		if (ret)
			goto out;
		rlb_report_set_series(r, r->nrows - 1, keep[i].series);
		keep[i].series = NULL;
	}
out:
	for (i = 0; keep && i < n; i++)
		rlb_report_series_free(keep[i].series);
	for (i = 0; pol && i < n; i++)
		rlb_planner_policy_release(&pol[i]);
	free(keep);
	free(pol);
	return ret;
}

