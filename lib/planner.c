/*
 * planner.c - the plan-and-simulate loop over a trace's steps, and the
 * result JSON that `relibra plan --summary` writes and `relibra report`
 * reads.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "datacontrol.h"
#include "planner.h"
#include "pool.h"
#include "relibra.h"

/* Data control is an option of relibra; other policies ignore it. */
static int uses_data_control(const struct rlb_balance_opts *o)
{
	return o->data_control && o->policy == RLB_POLICY_RELIBRA;
}

/* So is colocate. */
static int uses_colocate(const struct rlb_balance_opts *o)
{
	return o->colocate && o->policy == RLB_POLICY_RELIBRA && o->reorder;
}

/* The relay is every policy's but the ideal's, whose traffic is the mean. */
static int uses_relay(const struct rlb_balance_opts *o)
{
	return o->relay && o->policy != RLB_POLICY_IDEAL;
}

/* Per-policy state of one run. */
struct run_policy {
	struct rlb_balancer *balancer;
	struct rlb_sim *sim;
	struct rlb_step_plan plan;
	struct rlb_traffic traffic;
};

/*
 * The data-control schedule of the step (datacontrol.h), shared by every
 * policy that uses it, and its loads.
 */
static int data_control_loads(struct rlb_trace_reader *r,
			      const struct rlb_schedule *dflt,
			      struct rlb_schedule *s, struct rlb_loads *l,
			      struct rlb_pool *pool, struct rlb_err *err)
{
	uint32_t *lens = NULL;
	size_t n = 0;
	int ret;

	ret = rlb_step_seq_tokens(r, dflt->step, &lens, &n, err);
	if (ret == 0)
		ret = rlb_dc_schedule(s, dflt->step, lens, n, dflt->ranks,
				      dflt->mb_tokens, err);
	if (ret == 0)
		ret = rlb_step_count_loads(r, s, l, pool, err);
	free(lens);
	return ret;
}

/*
 * The step's default schedule and loads: the trainer's file or the packing
 * rule.  *named is set when the error already names the step (the file's).
 */
static int default_loads(struct rlb_trace_reader *r, const struct rlb_config *cfg,
			 const struct rlb_planner_opts *o, uint32_t step,
			 struct rlb_schedule *s, struct rlb_loads *l,
			 struct rlb_pool *pool, int *named, struct rlb_err *err)
{
	uint32_t *lens = NULL;
	size_t n = 0;
	int ret;

	if (!o->schedule_file)
		return rlb_step_loads(r, step, cfg, o->pack, s, l, pool, err);
	memset(l, 0, sizeof(*l));
	ret = rlb_step_seq_tokens(r, step, &lens, &n, err);
	if (ret == 0) {
		ret = rlb_schedule_file_step(o->schedule_file, step, lens, n,
					     (uint32_t)rlb_config_ep_size(cfg),
					     (uint32_t)cfg->parallel.micro_batch_tokens,
					     s, err);
		*named = ret != 0;
	}
	if (ret == 0)
		ret = rlb_step_count_loads(r, s, l, pool, err);
	if (ret)
		rlb_schedule_release(s);
	free(lens);
	return ret;
}

/* A copy of schedule s for a plan to carry. */
static int carry_schedule(struct rlb_step_plan *p, const struct rlb_schedule *s,
			  struct rlb_err *err)
{
	p->sched = calloc(1, sizeof(*p->sched));
	if (!p->sched)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	*p->sched = *s;
	p->sched->chunks = NULL;
	if (s->nchunks) {
		p->sched->chunks = malloc(s->nchunks * sizeof(*s->chunks));
		if (!p->sched->chunks)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		memcpy(p->sched->chunks, s->chunks, s->nchunks * sizeof(*s->chunks));
	}
	return 0;
}

static int plan_one_step(struct rlb_trace_reader *r,
			 const struct rlb_config *cfg,
			 const struct rlb_planner_opts *o, uint32_t step,
			 struct rlb_planner_policy *pol, struct run_policy *run,
			 size_t n, struct rlb_sim *static_sim,
			 struct rlb_cooc *cooc, struct rlb_pool *pool,
			 struct rlb_err *err)
{
	/* [0]: the configured schedule; [1]: data control's, when a policy uses it */
	struct rlb_schedule sched[2];
	struct rlb_loads loads[2];
	struct rlb_traffic static_t;
	struct rlb_sim_step static_step;
	struct rlb_traffic **all[2] = { NULL, NULL };
	uint32_t gpn = (uint32_t)rlb_config_ep_gpus_per_node(cfg);
	size_t i, nall[2] = { 1, 0 };
	int ret, k, dc = 0, named = 0;

	memset(sched, 0, sizeof(sched));
	memset(loads, 0, sizeof(loads));
	memset(&static_t, 0, sizeof(static_t));
	for (i = 0; i < n; i++) {
		memset(&run[i].plan, 0, sizeof(run[i].plan));
		memset(&run[i].traffic, 0, sizeof(run[i].traffic));
		dc |= uses_data_control(&pol[i].opts);
	}
	ret = default_loads(r, cfg, o, step, &sched[0], &loads[0], pool, &named, err);
	if (ret == 0 && dc)
		ret = data_control_loads(r, &sched[0], &sched[1], &loads[1], pool, err);
	if (ret == 0 && cooc)
		ret = rlb_step_cooc(r, &sched[0], cooc, pool, err);
	if (ret)
		goto out;
	all[0] = calloc(n + 1, sizeof(*all[0]));
	all[1] = calloc(n + 1, sizeof(*all[1]));
	if (!all[0] || !all[1]) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	ret = rlb_traffic_init(&static_t, NULL, &loads[0], gpn, err);
	if (ret)
		goto out;
	all[0][0] = &static_t;
	for (i = 0; i < n; i++) {
		k = uses_data_control(&pol[i].opts);
		ret = rlb_balancer_plan_step(run[i].balancer, &sched[k],
					     &loads[k], &run[i].plan, err);
		if (o->no_timing)
			run[i].plan.planner_ns = 0;
		/* a schedule that no rule rebuilds travels with the plan */
		if (ret == 0 && (k || o->schedule_file))
			ret = carry_schedule(&run[i].plan, &sched[k], err);
		if (ret)
			goto out;
		if (pol[i].writer) {
			ret = rlb_plan_writer_append(pol[i].writer, &run[i].plan);
			if (ret) {
				rlb_plan_writer_error(pol[i].writer, err);
				goto out;
			}
		}
		if (pol[i].on_step) {
			ret = pol[i].on_step(pol[i].on_step_ctx, &run[i].plan, err);
			if (ret)
				goto out;
		}
		ret = rlb_traffic_init(&run[i].traffic, &run[i].plan, &loads[k],
				       gpn, err);
		if (ret == 0 && uses_relay(&pol[i].opts))
			ret = rlb_traffic_count_nodes(&run[i].traffic, err);
		if (ret)
			goto out;
		all[k][nall[k]++] = &run[i].traffic;
	}
	/* one pass over the step per schedule counts the traffic of its plans */
	for (k = 0; ret == 0 && k < 2; k++)
		if (nall[k])
			ret = rlb_traffic_step(r, &sched[k], all[k], nall[k], pool, err);
	if (ret == 0)
		ret = rlb_sim_add_step(static_sim, &sched[0], &loads[0], NULL,
				       &static_t, &static_t, &static_step, err);
	for (i = 0; ret == 0 && i < n; i++) {
		struct rlb_planner_step *ps = &pol[i].steps[pol[i].nsteps];

		k = uses_data_control(&pol[i].opts);
		/*
		 * Data control's uniform-traffic ideal is the configured
		 * schedule's (rlb_planner_run puts it into the summary).
		 */
		ret = rlb_sim_add_step(run[i].sim, &sched[k], &loads[k],
				       &run[i].plan, &run[i].traffic,
				       k ? NULL : &static_t, &ps->sim, err);
		ps->static_s = static_step.policy.total_s;
		ps->ideal_s = static_step.ideal.total_s;
		pol[i].nsteps += ret == 0;
	}
out:
	for (i = 0; i < n; i++) {
		rlb_traffic_release(&run[i].traffic);
		rlb_step_plan_release(&run[i].plan);
	}
	rlb_traffic_release(&static_t);
	for (k = 0; k < 2; k++) {
		free(all[k]);
		rlb_loads_release(&loads[k]);
		rlb_schedule_release(&sched[k]);
	}
	if (ret && !named)
		rlb_err_prefix(err, "step %u", step);
	return ret;
}

int rlb_planner_run(struct rlb_trace_reader *r, const struct rlb_config *cfg,
		    const struct rlb_planner_opts *o,
		    struct rlb_planner_policy *pol, size_t n,
		    struct rlb_sim_summary *static_sum, struct rlb_err *err)
{
	struct run_policy *run = NULL;
	struct rlb_sim *static_sim = NULL;
	struct rlb_pool *pool = NULL;
	struct rlb_sim_summary ssum;
	struct rlb_cooc cooc;
	int want_cooc = 0;
	struct rlb_sim_opts so;
	const uint32_t *steps;
	size_t nsteps, i, done = 0, todo = 0;
	int ret;

	for (i = 0; i < n; i++) {
		pol[i].steps = NULL;
		pol[i].nsteps = 0;
	}
	ret = rlb_trace_header_check(rlb_trace_reader_header(r), cfg, err);
	if (ret)
		return ret;
	ret = rlb_trace_reader_steps(r, &steps, &nsteps, err);
	if (ret)
		return ret;
	for (i = 0; i < nsteps; i++)
		todo += steps[i] >= o->first_step && steps[i] <= o->last_step;
	if (todo == 0)
		return rlb_trace_no_step_err(r, steps, nsteps, o->first_step, o->last_step,
					     err);
	memset(&cooc, 0, sizeof(cooc));
	run = calloc(n ? n : 1, sizeof(*run));
	if (!run)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	rlb_sim_opts_for_policy(&so, RLB_POLICY_STATIC);
	ret = rlb_sim_new(&static_sim, cfg, &so, err);
	if (ret == 0 && o->threads != 1)
		ret = rlb_pool_new(&pool, o->threads, err);
	/* as many read ahead as count: the load passes wait on the reading */
	if (ret == 0)
		ret = rlb_trace_reader_set_threads(r, rlb_pool_threads(pool), err);
	for (i = 0; ret == 0 && i < n; i++) {
		pol[i].steps = calloc(todo, sizeof(*pol[i].steps));
		if (!pol[i].steps) {
			ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
			break;
		}
		ret = rlb_balancer_new(&run[i].balancer, cfg, &pol[i].opts, err);
		if (ret == 0)
			rlb_balancer_set_pool(run[i].balancer, pool);
		if (ret == 0) {
			rlb_sim_opts_for_policy(&so, pol[i].opts.policy);
			so.relay = uses_relay(&pol[i].opts);
			ret = rlb_sim_new(&run[i].sim, cfg, &so, err);
		}
		if (ret)
			rlb_err_prefix(err, "policy '%s'",
				       rlb_policy_name(pol[i].opts.policy));
		if (ret == 0 && uses_colocate(&pol[i].opts)) {
			want_cooc = 1;
			rlb_balancer_set_cooc(run[i].balancer, &cooc);
		}
	}
	if (ret == 0 && want_cooc) {
		const struct rlb_trace_header *h = rlb_trace_reader_header(r);

		ret = rlb_cooc_init(&cooc, h->moe_layers, h->experts, h->topk,
				    err);
	}
	for (i = 0; ret == 0 && i < nsteps; i++) {
		if (steps[i] < o->first_step || steps[i] > o->last_step)
			continue;
		ret = plan_one_step(r, cfg, o, steps[i], pol, run, n,
				    static_sim, want_cooc ? &cooc : NULL, pool, err);
		if (o->progress)
			o->progress(o->progress_ctx, ++done, todo, "steps");
	}
	if (ret == 0)
		ret = rlb_sim_summary(static_sim, &ssum, err);
	if (ret == 0 && static_sum)
		*static_sum = ssum;
	for (i = 0; ret == 0 && i < n; i++) {
		struct rlb_sim_summary *sum = &pol[i].summary;

		ret = rlb_sim_summary(run[i].sim, sum, err);
		if (ret == 0 && uses_data_control(&pol[i].opts)) {
			/*
			 * The bound stays the default schedule's perfectly
			 * balanced run, not one on the plan's own schedule.
			 */
			sum->ideal = ssum.ideal;
			sum->fraction_of_ideal = sum->policy_time.total_s > 0 ?
				ssum.ideal.total_s / sum->policy_time.total_s : 0;
		}
	}
	for (i = 0; i < n; i++) {
		rlb_balancer_free(run[i].balancer);
		rlb_sim_free(run[i].sim);
		if (ret)
			rlb_planner_policy_release(&pol[i]);
	}
	rlb_sim_free(static_sim);
	rlb_trace_reader_set_threads(r, 0, NULL);
	rlb_pool_free(pool);
	rlb_cooc_release(&cooc);
	free(run);
	return ret;
}

void rlb_planner_policy_release(struct rlb_planner_policy *p)
{
	if (!p)
		return;
	free(p->steps);
	p->steps = NULL;
	p->nsteps = 0;
}

/* ------------------------------------------------------------------ */
/* Result JSON.                                                         */

static json_t *dist_json(const struct rlb_dist *d)
{
	return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f}",
			 "n", (json_int_t)d->n, "mean", d->mean, "p50", d->p50,
			 "p90", d->p90, "p99", d->p99, "max", d->max);
}

static json_t *time_json(const struct rlb_sim_time *t, double steps)
{
	double k = steps > 0 ? 1.0 / steps : 0;

	return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			 "total_s", t->total_s * k, "dense_s", t->dense_s * k,
			 "expert_s", t->expert_s * k, "a2a_s", t->a2a_s * k,
			 "a2a_rdma_s", t->a2a_rdma_s * k,
			 "a2a_nvlink_s", t->a2a_nvlink_s * k,
			 "a2a_even_s", t->a2a_even_s * k,
			 "a2a_senders_s", t->a2a_senders_s * k,
			 "replication_s", t->replication_s * k,
			 "grad_reduce_s", t->grad_reduce_s * k,
			 "migration_s", t->migration_s * k,
			 "planning_s", t->planning_s * k);
}

static json_t *bytes_json(const struct rlb_sim_bytes *b, double steps)
{
	double k = steps > 0 ? 1.0 / steps : 0;

	return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			 "a2a_rdma", b->a2a_rdma * k,
			 "a2a_nvlink", b->a2a_nvlink * k,
			 "replica_rdma", b->replica_rdma * k,
			 "replica_nvlink", b->replica_nvlink * k,
			 "grad_rdma", b->grad_rdma * k,
			 "grad_nvlink", b->grad_nvlink * k,
			 "migration_rdma", b->migration_rdma * k,
			 "migration_nvlink", b->migration_nvlink * k);
}

/* The figures of one simulated policy (also used for the baselines). */
static json_t *figures_json(const struct rlb_sim_summary *s,
			    const struct rlb_sim_summary *static_sum)
{
	double steps = (double)s->steps;
	double speedup = s->policy_time.total_s > 0 ?
		static_sum->policy_time.total_s / s->policy_time.total_s : 0;

	return json_pack("{s:f, s:f, s:f, s:f, s:f, s:o, s:o, s:o, s:{s:o, s:o, s:o, s:o, s:o, s:o}, s:I, s:I, s:f, s:I, s:I, s:I, s:o}",
			 "step_time_s", s->step_time_s,
			 "tokens_per_s", s->tokens_per_s,
			 "fraction_of_ideal", s->fraction_of_ideal,
			 "fraction_of_same_traffic_ideal", s->fraction_of_same_traffic_ideal,
			 "speedup_over_static", speedup,
			 "breakdown", time_json(&s->policy_time, steps),
			 "ideal", time_json(&s->ideal, steps),
			 "same_traffic_ideal", time_json(&s->same_traffic_ideal, steps),
			 "imbalance",
			 "gpu_before", dist_json(&s->gpu_before),
			 "gpu_after", dist_json(&s->gpu_after),
			 "node_before", dist_json(&s->node_before),
			 "node_after", dist_json(&s->node_after),
			 "node_floor", dist_json(&s->node_floor),
			 "rank_tokens", dist_json(&s->rank_tokens),
			 "replicas", (json_int_t)s->replicas,
			 "replica_slots", (json_int_t)s->replica_slots,
			 "slot_use", s->slot_use,
			 "replica_copies", (json_int_t)s->replica_copies,
			 "migrated_experts", (json_int_t)s->migrated_experts,
			 "moved_in_node", (json_int_t)s->moved_in_node,
			 "bytes_per_step", bytes_json(&s->bytes, steps));
}

/* Every planned step: its time, parts and ratios to the baselines. */
static json_t *steps_json(const struct rlb_planner_policy *p)
{
	json_t *a = json_array();
	size_t i;

	for (i = 0; a && i < p->nsteps; i++) {
		const struct rlb_planner_step *ps = &p->steps[i];
		double t = ps->sim.policy.total_s;

		if (json_array_append_new(a, json_pack(
			"{s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:o, s:I, s:I, s:I}",
			"step", (json_int_t)ps->sim.step,
			"micro_batches", (json_int_t)ps->sim.micro_batches,
			"tokens", (json_int_t)ps->sim.tokens,
			"step_time_s", t,
			"tokens_per_s", ps->sim.tokens_per_s,
			"fraction_of_ideal", t > 0 ? ps->ideal_s / t : 0,
			"speedup_over_static", t > 0 ? ps->static_s / t : 0,
			"breakdown", time_json(&ps->sim.policy, 1),
			"replicas", (json_int_t)ps->sim.replicas,
			"migrated_experts", (json_int_t)ps->sim.migrated_experts,
			"moved_in_node", (json_int_t)ps->sim.moved_in_node))) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

const char *rlb_result_label(const struct rlb_balance_opts *o, char *buf,
			     size_t size)
{
	int rel = o->policy == RLB_POLICY_RELIBRA;

	snprintf(buf, size, "%s%s%s%s%s%s", rlb_policy_name(o->policy),
		 rel && !o->reorder ? " --no-reorder" : "",
		 rel && !o->replicate ? " --no-replicate" : "",
		 rel && o->reorder && o->colocate ? " --colocate" : "",
		 rel && o->data_control ? " --data-control" : "",
		 uses_relay(o) ? " --relay" : "");
	return buf;
}

int rlb_policy_spec_apply(const char *spec, struct rlb_balance_opts *o,
			  struct rlb_err *err)
{
	/* each option sets one switch: relibra's, or (relay) any but the ideal's */
	static const struct {
		const char *name;
		size_t field;		/* an int of struct rlb_balance_opts */
		int value;
	} opts[] = {
		{ "no-reorder", offsetof(struct rlb_balance_opts, reorder), 0 },
		{ "no-replicate", offsetof(struct rlb_balance_opts, replicate), 0 },
		{ "colocate", offsetof(struct rlb_balance_opts, colocate), 1 },
		{ "no-colocate", offsetof(struct rlb_balance_opts, colocate), 0 },
		{ "data-control", offsetof(struct rlb_balance_opts, data_control), 1 },
		{ "relay", offsetof(struct rlb_balance_opts, relay), 1 },
		{ "no-relay", offsetof(struct rlb_balance_opts, relay), 0 },
	};
	const size_t nopts = sizeof(opts) / sizeof(opts[0]);
	const char *plus = strchr(spec, '+'), *opt, *end;
	const char *set[sizeof(opts) / sizeof(opts[0])] = { NULL };	/* by field */
	char name[256];
	size_t n = plus ? (size_t)(plus - spec) : strlen(spec), i, j;
	int relay;

	if (n >= sizeof(name))
		n = sizeof(name) - 1;
	memcpy(name, spec, n);
	name[n] = '\0';
	if (rlb_policy_from_name(name, &o->policy, err))
		return RLB_EINVAL;
	for (opt = plus; opt; opt = end) {
		opt++;
		end = strchr(opt, '+');
		n = end ? (size_t)(end - opt) : strlen(opt);
		for (i = 0; i < nopts; i++)
			if (strlen(opts[i].name) == n && strncmp(opt, opts[i].name, n) == 0)
				break;
		if (i == nopts)
			return rlb_err_set(err, RLB_EINVAL,
					   "'%s': unknown option '%.*s' (no-reorder, no-replicate, colocate, no-colocate, data-control, relay, no-relay)",
					   spec, (int)n, opt);
		relay = opts[i].field == offsetof(struct rlb_balance_opts, relay);
		if (relay && o->policy == RLB_POLICY_IDEAL)
			return rlb_err_set(err, RLB_EINVAL,
					   "'%s': option '%s' has no effect on the ideal, whose all-to-all is already even",
					   spec, opts[i].name);
		if (!relay && o->policy != RLB_POLICY_RELIBRA)
			return rlb_err_set(err, RLB_EINVAL,
					   "'%s': option '%s' is relibra's", spec,
					   opts[i].name);
		for (j = 0; j < nopts && opts[j].field != opts[i].field; j++)
			;
		if (set[j])
			return rlb_err_set(err, RLB_EINVAL,
					   "'%s': option '%s' %s '%s'", spec, opts[i].name,
					   set[j] == opts[i].name ? "repeats" : "contradicts",
					   set[j]);
		set[j] = opts[i].name;
		*(int *)((char *)o + opts[i].field) = opts[i].value;
	}
	return 0;
}

json_t *rlb_result_json(const struct rlb_config *cfg,
			const struct rlb_planner_opts *o,
			const struct rlb_planner_policy *p,
			const struct rlb_sim_summary *static_sum,
			const struct rlb_result_source *src)
{
	const struct rlb_sim_summary *s = &p->summary;
	const struct rlb_balance_opts *bo = &p->opts;
	char label[128], hash[17] = "";
	json_t *j, *fig, *ideal;

	if (src->trace)
		snprintf(hash, sizeof(hash), "%016llx",
			 (unsigned long long)rlb_plan_trace_hash(src->trace));

	fig = figures_json(s, static_sum);
	if (!fig)
		return NULL;
	j = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:o, s:s, s:s, s:i, s:i, s:i, s:i, s:s}, s:{s:o, s:s, s:s, s:b, s:I, s:I}, s:s, s:s, s:{s:i, s:i, s:i, s:b, s:b, s:b, s:f}, s:I, s:I}",
		      "schema", RLB_RESULT_SCHEMA,
		      "kind", "plan",
		      "producer", "tool", "relibra", "version", RLB_VERSION,
		      "config",
		      "path", rlb_json_text(src->config_path ? src->config_path : ""),
		      "model", cfg->model.name,
		      "cluster", cfg->cluster.name,
		      "nodes", cfg->cluster.nodes,
		      "gpus_per_node", cfg->cluster.gpus_per_node,
		      "ep_size", cfg->parallel.ep_size,
		      "micro_batch_tokens", cfg->parallel.micro_batch_tokens,
		      "pack", rlb_pack_name(uses_data_control(bo) ? RLB_PACK_DATA_CONTROL :
					    o->schedule_file ? RLB_PACK_FILE : o->pack),
		      "trace",
		      "path", rlb_json_text(src->trace_path ? src->trace_path : ""),
		      "model", src->trace ? src->trace->model : "",
		      "hash", hash,
		      "truncated", src->trace_truncated,
		      "first_step", (json_int_t)s->first_step,
		      "last_step", (json_int_t)s->last_step,
		      "policy", rlb_policy_name(bo->policy),
		      "label", src->label ? src->label : rlb_result_label(bo, label, sizeof(label)),
		      "options",
		      "replica_slots", (int)bo->replica_slots,
		      "min_tokens_per_replica", (int)bo->min_tokens_per_replica,
		      "eplb_window", (int)bo->eplb_window,
		      "reorder", bo->reorder, "replicate", bo->replicate,
		      "colocate", uses_colocate(bo),
		      "migration_weight", bo->migration_weight,
		      "steps", (json_int_t)s->steps,
		      "tokens", (json_int_t)s->tokens);
	if (!j) {
		json_decref(fig);
		return NULL;
	}
	json_object_update(j, fig);
	json_decref(fig);
	json_object_set_new(json_object_get(j, "options"), "data_control",
			    json_boolean(uses_data_control(bo)));
	json_object_set_new(json_object_get(j, "options"), "relay",
			    json_boolean(uses_relay(bo)));
	/* the static and ideal baselines keep the packing data control replaced */
	if (uses_data_control(bo))
		json_object_set_new(json_object_get(j, "config"), "baseline_pack",
				    json_string(rlb_pack_name(o->pack)));
	if (src->schedule_path)
		json_object_set_new(json_object_get(j, "config"), "schedule",
				    rlb_json_text(src->schedule_path));
	ideal = json_pack("{s:f, s:f}",
			  "step_time_s", s->steps ? s->ideal.total_s / s->steps : 0,
			  "tokens_per_s", s->ideal.total_s > 0 ? s->tokens / s->ideal.total_s : 0);
	json_object_set_new(j, "baselines",
			    json_pack("{s:o, s:o}", "static",
				      figures_json(static_sum, static_sum),
				      "ideal", ideal));
	json_object_set_new(j, "per_step", steps_json(p));
	if (!src->no_timing)
		json_object_set_new(j, "timing",
				    json_pack("{s:f, s:f}",
					      "planner_s", s->planner_ns / 1e9,
					      "planner_s_per_step",
					      s->steps ? s->planner_ns / 1e9 / s->steps : 0));
	return j;
}
