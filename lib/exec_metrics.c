/*
 * exec_metrics.c - the executor's measurements: each step's per-(micro-
 * batch, layer, rank) and per-rank figures gathered to rank 0, the
 * measured critical path, and the result JSON ("relibra.result/1", kind
 * "train-step", documented in relibra(1), RESULT FILES).
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "exec_internal.h"
#include "planner.h"
#include "relibra.h"
#include "util.h"

void rlb_exec_records_free(struct rlb_exec *ex)
{
	size_t i;

	for (i = 0; i < ex->nrec; i++) {
		free(ex->rec[i].rank);
		free(ex->rec[i].cell);
	}
	free(ex->rec);
	ex->rec = NULL;
	ex->nrec = 0;
}

int rlb_exec_record_step(struct rlb_exec *ex, uint32_t step, struct rlb_err *err)
{
	uint32_t mbs = ex->sched.micro_batches, i, r;
	size_t ncell = (size_t)mbs * ex->layers, per = STEP_N + ncell * CELL_N, c;
	double *send = malloc(per * ex->nlocal * sizeof(*send));
	double *all = NULL;
	struct exec_step_record *rec;
	int ret;

	if (!send)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; i < ex->nlocal; i++) {
		memcpy(send + i * per, ex->rk[i].stepm, STEP_N * sizeof(double));
		memcpy(send + i * per + STEP_N, ex->rk[i].cell,
		       ncell * CELL_N * sizeof(double));
	}
	if (ex->first == 0) {
		all = malloc(per * ex->ranks * sizeof(*all));
		if (!all) {
			free(send);
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		}
	}
	ret = rlb_world_gather(ex->world, send, per * sizeof(double), all, err);
	free(send);
	if (ret || ex->first != 0) {
		free(all);
		return ret;
	}
	rec = realloc(ex->rec, (ex->nrec + 1) * sizeof(*rec));
	if (!rec) {
		free(all);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	ex->rec = rec;
	rec = &ex->rec[ex->nrec];
	memset(rec, 0, sizeof(*rec));
	rec->rank = malloc(ex->ranks * STEP_N * sizeof(double));
	rec->cell = malloc((ncell ? ncell : 1) * ex->ranks * CELL_N * sizeof(double));
	if (!rec->rank || !rec->cell) {
		free(rec->rank);
		free(rec->cell);
		free(all);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	ex->nrec++;
	rec->step = step;
	rec->micro_batches = mbs;
	rec->tokens = ex->step_tokens;
	for (r = 0; r < ex->ranks; r++) {
		const double *src = all + r * per;

		memcpy(rec->rank + r * STEP_N, src, STEP_N * sizeof(double));
		memcpy(rec->cell + r * ncell * CELL_N, src + STEP_N,
		       ncell * CELL_N * sizeof(double));
		if (src[STEP_WALL_S] > rec->wall_s)
			rec->wall_s = src[STEP_WALL_S];
	}
	for (c = 0; c < ncell; c++) {
		double worst = 0;

		for (r = 0; r < ex->ranks; r++) {
			const double *x = rec->cell + (r * ncell + c) * CELL_N;
			double t = x[CELL_FWD_CPU_S] + x[CELL_BWD_CPU_S];

			if (t > worst)
				worst = t;
		}
		rec->critical_path_s += worst;
	}
	free(all);
	return 0;
}

/* Sum over (mb, layer) of the slowest rank's value of field F. */
static double slowest_sum(const struct rlb_exec *ex,
			  const struct exec_step_record *rec, int f)
{
	size_t ncell = (size_t)rec->micro_batches * ex->layers, c;
	double sum = 0;
	uint32_t r;

	for (c = 0; c < ncell; c++) {
		double worst = 0;

		for (r = 0; r < ex->ranks; r++) {
			double x = rec->cell[(r * ncell + c) * CELL_N + f];

			if (x > worst)
				worst = x;
		}
		sum += worst;
	}
	return sum;
}

/* Sum over ranks and cells of field F. */
static double total(const struct rlb_exec *ex,
		    const struct exec_step_record *rec, int f)
{
	size_t n = (size_t)rec->micro_batches * ex->layers * ex->ranks, c;
	double sum = 0;

	for (c = 0; c < n; c++)
		sum += rec->cell[c * CELL_N + f];
	return sum;
}

static double rank_max(const struct rlb_exec *ex,
		       const struct exec_step_record *rec, int f)
{
	double worst = 0;
	uint32_t r;

	for (r = 0; r < ex->ranks; r++)
		if (rec->rank[r * STEP_N + f] > worst)
			worst = rec->rank[r * STEP_N + f];
	return worst;
}

static double rank_sum(const struct rlb_exec *ex,
		       const struct exec_step_record *rec, int f)
{
	double sum = 0;
	uint32_t r;

	for (r = 0; r < ex->ranks; r++)
		sum += rec->rank[r * STEP_N + f];
	return sum;
}

void rlb_exec_summary(const struct rlb_exec *ex, struct rlb_exec_summary *s)
{
	double wall = 0, cp = 0;
	size_t i;

	memset(s, 0, sizeof(*s));
	s->ranks = ex->ranks;
	s->policy = rlb_policy_name(ex->ph.policy);
	s->plan_relay = ex->ph.relay;
	for (i = 0; i < ex->nrec; i++) {
		s->tokens += ex->rec[i].tokens;
		wall += ex->rec[i].wall_s;
		cp += ex->rec[i].critical_path_s;
	}
	s->steps = ex->nrec;
	if (ex->nrec) {
		s->step_time_s = wall / ex->nrec;
		s->critical_path_s = cp / ex->nrec;
	}
	s->tokens_per_s = wall > 0 ? s->tokens / wall : 0;
	if (ex->nsteps) {
		s->first_loss = ex->losses[0];
		s->last_loss = ex->losses[ex->nsteps - 1];
	}
}

uint64_t rlb_exec_unheld_spans(const struct rlb_exec *ex)
{
	return ex->unheld;
}

/* Whether this process's expert spans are held (virtual ranks on a backend that holds). */
static int holds(const struct rlb_exec *ex)
{
	return ex->virtual_ranks && ex->nlocal > 0 && ex->rk[0].be &&
	       ex->rk[0].be->ops->queue_hold;
}

static json_t *cells_json(const struct rlb_exec *ex,
			  const struct exec_step_record *rec)
{
	size_t ncell = (size_t)rec->micro_batches * ex->layers, c;
	json_t *a = json_array();
	uint32_t r;

	for (c = 0; a && c < ncell; c++)
		for (r = 0; r < ex->ranks; r++) {
			const double *x = rec->cell + (r * ncell + c) * CELL_N;
			json_t *o = json_pack(
				"{s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
				"step", (json_int_t)rec->step,
				"mb", (json_int_t)(c / ex->layers),
				"layer", (json_int_t)(c % ex->layers),
				"rank", (json_int_t)r,
				"rows", (json_int_t)x[CELL_ROWS],
				"compute_cpu_s", x[CELL_FWD_CPU_S] + x[CELL_BWD_CPU_S],
				"compute_wall_s", x[CELL_FWD_WALL_S] + x[CELL_BWD_WALL_S],
				"forward_cpu_s", x[CELL_FWD_CPU_S],
				"forward_wall_s", x[CELL_FWD_WALL_S],
				"backward_cpu_s", x[CELL_BWD_CPU_S],
				"backward_wall_s", x[CELL_BWD_WALL_S],
				"send_bytes", x[CELL_SEND_BYTES],
				"recv_bytes", x[CELL_RECV_BYTES],
				"a2a_s", x[CELL_A2A_S],
				"replica_bytes", x[CELL_REPLICA_BYTES],
				"replica_s", x[CELL_REPLICA_S],
				"grad_bytes", x[CELL_GRAD_BYTES],
				"grad_s", x[CELL_GRAD_S]);

			if (!o || json_array_append_new(a, o)) {
				json_decref(a);
				return NULL;
			}
		}
	return a;
}

static json_t *steps_json(const struct rlb_exec *ex)
{
	json_t *a = json_array();
	size_t i;
	uint32_t r;

	for (i = 0; a && i < ex->nrec; i++) {
		const struct exec_step_record *rec = &ex->rec[i];
		json_t *ranks = json_array(), *o;

		for (r = 0; ranks && r < ex->ranks; r++) {
			const double *x = rec->rank + r * STEP_N;

			json_array_append_new(ranks, json_pack(
				"{s:I, s:f, s:I, s:f, s:f, s:f}",
				"rank", (json_int_t)r, "wall_s", x[STEP_WALL_S],
				"tokens", (json_int_t)x[STEP_TOKENS],
				"migration_bytes", x[STEP_MIGRATION_BYTES],
				"migration_s", x[STEP_MIGRATION_S],
				"adam_s", x[STEP_ADAM_S]));
		}
		o = json_pack("{s:I, s:I, s:I, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:o, s:o}",
			      "step", (json_int_t)rec->step,
			      "micro_batches", (json_int_t)rec->micro_batches,
			      "tokens", (json_int_t)rec->tokens,
			      "loss", rlb_json_real_or_null(ex->losses[i]),
			      "wall_s", rec->wall_s,
			      "tokens_per_s", rec->wall_s > 0 ? rec->tokens / rec->wall_s : 0,
			      "critical_path_s", rec->critical_path_s,
			      "a2a_s", slowest_sum(ex, rec, CELL_A2A_S),
			      "replication_s", slowest_sum(ex, rec, CELL_REPLICA_S),
			      "grad_reduce_s", slowest_sum(ex, rec, CELL_GRAD_S),
			      "migration_s", rank_max(ex, rec, STEP_MIGRATION_S),
			      "migration_bytes", rank_sum(ex, rec, STEP_MIGRATION_BYTES) / 2,
			      "ranks", ranks ? ranks : json_null(),
			      "cells", cells_json(ex, rec));
		if (!o || json_array_append_new(a, o)) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

json_t *rlb_exec_metrics_json(const struct rlb_exec *ex,
			      const struct rlb_exec_source *src)
{
	const struct rlb_config *cfg = ex->cfg;
	const struct rlb_trace_header *th = rlb_trace_reader_header(ex->tr);
	double wall = 0, cp = 0, a2a = 0, rep = 0, grad = 0, mig = 0, adam = 0;
	double b_send = 0, b_rep = 0, b_grad = 0, b_mig = 0, rows = 0;
	double n;
	char hash[17];
	size_t i;
	json_t *j;

	if (!ex->ran || ex->first != 0)
		return NULL;
	snprintf(hash, sizeof(hash), "%016llx",
		 (unsigned long long)rlb_plan_trace_hash(th));
	for (i = 0; i < ex->nrec; i++) {
		const struct exec_step_record *rec = &ex->rec[i];

		wall += rec->wall_s;
		cp += rec->critical_path_s;
		a2a += slowest_sum(ex, rec, CELL_A2A_S);
		rep += slowest_sum(ex, rec, CELL_REPLICA_S);
		grad += slowest_sum(ex, rec, CELL_GRAD_S);
		mig += rank_max(ex, rec, STEP_MIGRATION_S);
		adam += rank_max(ex, rec, STEP_ADAM_S);
		b_send += total(ex, rec, CELL_SEND_BYTES);
		b_rep += total(ex, rec, CELL_REPLICA_BYTES);
		b_grad += total(ex, rec, CELL_GRAD_BYTES);
		b_mig += rank_sum(ex, rec, STEP_MIGRATION_BYTES) / 2;
		rows += total(ex, rec, CELL_ROWS);
	}
	n = ex->nrec ? (double)ex->nrec : 1;
	{
		struct rlb_exec_summary s;
		struct rlb_balance_opts bo;
		char label[128];

		rlb_exec_summary(ex, &s);
		/*
		 * The label of the plan's own summary, so reports pair the two;
		 * without the relay, which the rank-to-rank exchanges do not run
		 * (a report then pairs the run with the direct dispatch's figures).
		 */
		memset(&bo, 0, sizeof(bo));
		bo.policy = ex->ph.policy;
		bo.reorder = ex->ph.reorder;
		bo.replicate = ex->ph.replicate;
		bo.colocate = ex->ph.colocate;
		bo.data_control = ex->ph.pack == RLB_PACK_DATA_CONTROL;
		j = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:o, s:s, s:s, s:i, s:i, s:i, s:i, s:s}, s:{s:o, s:s, s:s, s:b, s:I, s:I}, s:o, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:f, s:f, s:f}",
			      "schema", RLB_RESULT_SCHEMA,
			      "kind", "train-step",
			      "producer", "tool", "relibra", "version", RLB_VERSION,
			      "config",
			      "path", rlb_json_text(src && src->config_path ? src->config_path : ""),
			      "model", cfg->model.name,
			      "cluster", cfg->cluster.name,
			      "nodes", cfg->cluster.nodes,
			      "gpus_per_node", cfg->cluster.gpus_per_node,
			      "ep_size", cfg->parallel.ep_size,
			      "micro_batch_tokens", cfg->parallel.micro_batch_tokens,
			      "pack", rlb_pack_name(ex->cfg_run.parallel.pack),
			      "trace",
			      "path", rlb_json_text(src && src->trace_path ? src->trace_path : ""),
			      "model", th->model,
			      "hash", hash,
			      "truncated", rlb_trace_reader_truncated(ex->tr),
			      "first_step", (json_int_t)ex->steps[0],
			      "last_step", (json_int_t)ex->steps[ex->nsteps - 1],
			      "plan", rlb_json_text(src && src->plan_path ? src->plan_path : ""),
			      "policy", rlb_policy_name(ex->ph.policy),
			      "label", rlb_result_label(&bo, label, sizeof(label)),
			      "backend", rlb_backend_name(ex->o.backend),
			      "transport", rlb_world_name(ex->world),
			      "ranks", (json_int_t)ex->ranks,
			      "seed", (json_int_t)ex->o.seed,
			      "steps", (json_int_t)s.steps,
			      "tokens", (json_int_t)s.tokens,
			      "step_time_s", s.step_time_s,
			      "tokens_per_s", s.tokens_per_s,
			      "critical_path_s", s.critical_path_s);
	}
	if (!j)
		return NULL;
	json_object_set_new(j, "breakdown",
			    json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
				      "total_s", wall / n, "expert_s", cp / n,
				      "a2a_s", a2a / n, "replication_s", rep / n,
				      "grad_reduce_s", grad / n, "migration_s", mig / n,
				      "adam_s", adam / n));
	json_object_set_new(j, "bytes_per_step",
			    json_pack("{s:f, s:f, s:f, s:f}",
				      "a2a", b_send / n, "replica", b_rep / n,
				      "grad", b_grad / n, "migration", b_mig / n));
	json_object_set_new(j, "expert_rows_per_step", json_real(rows / n));
	if (holds(ex))
		json_object_set_new(j, "unheld_spans", json_integer((json_int_t)ex->unheld));
	json_object_set_new(j, "loss",
			    json_pack("{s:o, s:o}",
				      "first", rlb_json_real_or_null(ex->nsteps ? ex->losses[0] : 0),
				      "last", rlb_json_real_or_null(ex->nsteps ? ex->losses[ex->nsteps - 1] : 0)));
	if (ex->verify.done)
		json_object_set_new(j, "verify",
				    json_pack("{s:b, s:f, s:o, s:f, s:o, s:o, s:o, s:o}",
					      "ok", ex->verify.ok,
					      "tolerance", ex->o.verify_tol,
					      "max_rel_weight", rlb_json_real_or_null(ex->verify.max_rel_weight),
					      "weight_outliers", ex->verify.weight_outliers,
					      "worst_tensor", ex->verify.worst[0] ?
					      json_string(ex->verify.worst) : json_null(),
					      "max_rel_loss", rlb_json_real_or_null(ex->verify.max_rel_loss),
					      "worst_loss_step", ex->verify.max_rel_loss > 0 ?
					      json_integer(ex->verify.worst_loss_step) : json_null(),
					      "diverged_step", ex->verify.diverged ?
					      json_integer(ex->verify.diverged_step) : json_null()));
	json_object_set_new(j, "per_step", steps_json(ex));
	return j;
}
