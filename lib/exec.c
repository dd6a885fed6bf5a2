/*
 * exec.c - the train-step executor's driver: checks the inputs before any
 * work (agreed over the transport), creates one backend per local rank,
 * runs the selected steps (loads, plan, tokens, migration, micro-batches,
 * Adam, loss), and for --verify reruns them under the static plan and
 * compares weights and losses.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec_internal.h"
#include "hostmem.h"
#include "util.h"

void rlb_exec_opts_defaults(struct rlb_exec_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->backend = RLB_BACKEND_CPU;
	o->seed = 1;
	o->first_step = 0;
	o->last_step = UINT32_MAX;
	o->verify_tol = 1e-5;
	o->adam.lr = 1e-3f;
	o->adam.beta1 = 0.9f;
	o->adam.beta2 = 0.999f;
	o->adam.eps = 1e-8f;
	o->init = RLB_EXEC_INIT_RANDOM;
}

/* ------------------------------------------------------------------ */
/* Set-up and its checks.                                               */

static int select_steps(struct rlb_exec *ex, struct rlb_err *err)
{
	const struct rlb_plan_step_info *info;
	const uint32_t *steps;
	size_t n, np, i, j;
	int ret;

	ret = rlb_trace_reader_steps(ex->tr, &steps, &n, err);
	if (ret < 0)
		return ret;
	np = rlb_plan_reader_steps(ex->pr, &info);
	ex->steps = malloc((n ? n : 1) * sizeof(*ex->steps));
	if (!ex->steps)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		if (steps[i] < ex->o.first_step || steps[i] > ex->o.last_step)
			continue;
		for (j = 0; j < np && info[j].step != steps[i]; j++)
			;
		if (j == np) {
			uint32_t lo = UINT32_MAX, hi = 0;

			for (j = 0; j < np; j++) {
				lo = info[j].step < lo ? info[j].step : lo;
				hi = info[j].step > hi ? info[j].step : hi;
			}
			if (np == 0)
				return rlb_err_set(err, RLB_ENOTFOUND,
						   "step %u of the trace is not in the plan '%s'",
						   steps[i], ex->plan_path);
			return rlb_err_set(err, RLB_ENOTFOUND,
					   "step %u of the trace is not in the plan '%s' (it has %zu step%s, %u..%u)",
					   steps[i], ex->plan_path, np, np == 1 ? "" : "s", lo, hi);
		}
		ex->steps[ex->nsteps++] = steps[i];
	}
	if (ex->nsteps == 0)
		return rlb_trace_no_step_err(ex->tr, steps, n, ex->o.first_step,
					     ex->o.last_step, err);
	for (i = 0; ex->o.fault && i < ex->nsteps &&
		    ex->steps[i] != ex->o.fault_step; i++)
		;
	if (ex->o.fault && i == ex->nsteps)
		return rlb_err_set(err, RLB_EINVAL,
				   "the injected fault's step %u is not among the steps run (%u to %u)",
				   ex->o.fault_step, ex->steps[0],
				   ex->steps[ex->nsteps - 1]);
	return 0;
}

/* Append the plan's and the trace's paths to a message of their mismatch. */
static void name_inputs(const struct rlb_exec *ex, struct rlb_err *err)
{
	size_t n;

	if (!err)
		return;
	n = strlen(err->msg);
	snprintf(err->msg + n, sizeof(err->msg) - n, " (plan '%s', trace '%s')",
		 ex->plan_path, ex->trace_path);
}

/*
 * Step STEP's plan (p, released first), schedule and loads (s and l,
 * initialised here): the schedule the plan carries (data control, a
 * trainer's file), else the one its packing rule builds from the trace.
 */
static int step_inputs(struct rlb_exec *ex, uint32_t step,
		       struct rlb_step_plan *p, struct rlb_schedule *s,
		       struct rlb_loads *l, struct rlb_err *err)
{
	uint32_t *lens = NULL;
	size_t n = 0;
	int ret;

	memset(s, 0, sizeof(*s));
	memset(l, 0, sizeof(*l));
	ret = rlb_plan_reader_read_step(ex->pr, step, p, err);
	if (ret < 0)
		return ret;
	if (!p->sched)
		return rlb_step_loads(ex->tr, step, &ex->cfg_run,
				      ex->cfg_run.parallel.pack, s, l, NULL, err);
	/*
	 * The carried schedule must tile the step's sequences as the trace's
	 * step index lists them, all of them: streaming checks only the
	 * sequences the schedule names, so a trace with more sequences in the
	 * step would otherwise pass with the extra ones left out.
	 */
	ret = rlb_step_seq_tokens(ex->tr, step, &lens, &n, err);
	if (ret == 0)
		ret = rlb_schedule_from_chunks(s, step, p->sched->pack,
					       p->sched->chunks,
					       p->sched->nchunks, lens, n,
					       p->sched->ranks,
					       p->sched->mb_tokens, err);
	free(lens);
	if (ret == 0) {
		s->micro_batches = p->sched->micro_batches;
		ret = rlb_step_count_loads(ex->tr, s, l, NULL, err);
	}
	if (ret < 0) {
		rlb_schedule_release(s);
		memset(s, 0, sizeof(*s));
		/* "...: step S: ...", not "...: schedule: step S: ..." */
		if (err && strncmp(err->msg, "schedule: ", 10) == 0)
			memmove(err->msg, err->msg + 10, strlen(err->msg + 10) + 1);
		rlb_err_prefix(err, "the plan's schedule does not match the trace");
		name_inputs(ex, err);
		if (err)
			err->code = RLB_EMISMATCH;
		return RLB_EMISMATCH;
	}
	return 0;
}

/* Every selected step's plan against the trace's loads of that step. */
static int check_steps(struct rlb_exec *ex, struct rlb_err *err)
{
	struct rlb_schedule s;
	struct rlb_loads l;
	struct rlb_step_plan p;
	size_t i;
	int ret = 0;

	memset(&p, 0, sizeof(p));
	for (i = 0; ret == 0 && i < ex->nsteps; i++) {
		ret = step_inputs(ex, ex->steps[i], &p, &s, &l, err);
		if (ret < 0) {
			rlb_step_plan_release(&p);
			break;
		}
		if (ret == 0 && p.micro_batches != s.micro_batches) {
			ret = rlb_err_set(err, RLB_EMISMATCH,
					  "plan does not match the trace: step %u has %u micro-batches in the plan, %u in the schedule",
					  ex->steps[i], p.micro_batches, s.micro_batches);
			name_inputs(ex, err);
		}
		if (ret == 0) {
			ret = rlb_step_plan_check(&p, &l, err);
			if (ret < 0) {
				rlb_err_prefix(err, "plan does not match the trace: step %u",
					       ex->steps[i]);
				name_inputs(ex, err);
				ret = RLB_EMISMATCH;
				if (err)
					err->code = ret;
			}
		}
		rlb_step_plan_release(&p);
		rlb_loads_release(&l);
		rlb_schedule_release(&s);
	}
	return ret;
}

static int setup(struct rlb_exec *ex, struct rlb_err *err)
{
	const struct rlb_config *cfg = ex->cfg;
	const struct rlb_trace_header *th;
	const uint32_t *steps;
	size_t nsteps;
	int ret;

	if (cfg->model.hidden <= 0 || cfg->model.expert_ffn <= 0)
		return rlb_err_set(err, RLB_ECONFIG,
				   "model.hidden and model.expert_ffn must be positive");
	/*
	 * Before the backend's availability, so that the refusal reads the
	 * same in every build: the cuda kernels are SwiGLU's alone.
	 */
	if (ex->o.backend == RLB_BACKEND_CUDA && rlb_model_ffn_matrices(&cfg->model) != 3)
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "the cuda backend runs gated (SwiGLU) experts only; model.gated_ffn: false runs on --backend cpu");
	if (!rlb_backend_available(ex->o.backend))
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "backend '%s' is not built in",
				   rlb_backend_name(ex->o.backend));
	ret = rlb_trace_reader_open(&ex->tr, ex->trace_path, err);
	if (ret < 0)
		return ret;
	ret = rlb_plan_reader_open(&ex->pr, ex->plan_path, err);
	if (ret < 0)
		return ret;
	ex->ph = *rlb_plan_reader_header(ex->pr);
	if (ex->ph.policy == RLB_POLICY_IDEAL)
		return rlb_err_set(err, RLB_EINVAL,
				   "plan '%s' is of policy ideal, a bound the simulator computes, not a placement to run (plan static for the static layout)",
				   ex->plan_path);
	th = rlb_trace_reader_header(ex->tr);
	ex->cfg_run = *cfg;
	ex->cfg_run.parallel.pack = ex->ph.pack;
	ret = rlb_trace_reader_steps(ex->tr, &steps, &nsteps, err);
	if (ret == 0)
		ret = rlb_plan_check_inputs(&ex->ph, th, steps, nsteps, &ex->cfg_run, err);
	if (ret == RLB_EMISMATCH && err &&
	    strncmp(err->msg, "plan does not match the trace", 29) == 0)
		name_inputs(ex, err);
	/* the plan does not record the layer layout (the dense layers) */
	if (ret == 0)
		ret = rlb_trace_header_check(th, cfg, err);
	if (ret < 0)
		return ret;
	ex->layers = th->moe_layers;
	ex->experts = th->experts;
	ex->topk = th->topk;
	ex->ranks = (uint32_t)cfg->parallel.ep_size;
	ex->gpn = (uint32_t)rlb_config_ep_gpus_per_node(cfg);
	/*
	 * The width of the expert path: a latent MoE model dispatches, runs
	 * and combines its tokens in the latent (its projections are dense
	 * work, which train-step does not run).
	 */
	ex->hidden = (uint32_t)rlb_model_expert_width(&cfg->model);
	ex->ffn = (uint32_t)cfg->model.expert_ffn;
	ex->shape.hidden = ex->hidden;
	ex->shape.ffn = ex->ffn;
	/* the expert the cost model charges: two matrices without a gate */
	ex->shape.ungated = rlb_model_ffn_matrices(&cfg->model) == 2;
	ex->np = rlb_expert_params(&ex->shape);
	ret = select_steps(ex, err);
	if (ret == 0)
		ret = check_steps(ex, err);
	return ret;
}

static int ranks_init(struct rlb_exec *ex, struct rlb_err *err)
{
	size_t ncell = (size_t)ex->layers * ex->experts;
	uint32_t i, L;
	int ret = 0;

	ex->rk = calloc(ex->nlocal, sizeof(*ex->rk));
	ex->cur_home = calloc(ncell, sizeof(*ex->cur_home));
	ex->split_first = calloc((size_t)ex->experts + 1, sizeof(*ex->split_first));
	ex->key_cnt = calloc((size_t)ex->ranks * ex->experts + 1, sizeof(*ex->key_cnt));
	ex->cursor = calloc(2 * (size_t)ex->experts, sizeof(*ex->cursor));
	ex->losses = calloc(ex->nsteps, sizeof(*ex->losses));
	if (!ex->rk || !ex->cur_home || !ex->split_first || !ex->key_cnt ||
	    !ex->cursor || !ex->losses)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		struct rlb_backend_init bi = {
			.rank = ex->first + i, .ranks = ex->ranks,
			.gpus_per_node = ex->gpn, .local_index = i, .device = -1,
			.world = ex->world, .gemm = ex->o.gemm,
		};
		struct rlb_backend *be;

		rk->rank = ex->first + i;
		rk->local = i;
		ret = rlb_backend_new(ex->o.backend, &bi, &rk->be, err);
		if (ret < 0)
			break;
		be = rk->be;
		rk->home = calloc(ncell, sizeof(*rk->home));
		rk->slot = calloc(ex->layers, sizeof(*rk->slot));
		rk->nslot = calloc(ex->layers, sizeof(*rk->nslot));
		rk->route = calloc(ex->layers, sizeof(*rk->route));
		rk->ev_copy = calloc(ex->layers, sizeof(*rk->ev_copy));
		if (!rk->home || !rk->slot || !rk->nslot || !rk->route || !rk->ev_copy)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		ret = be->ops->queue_new(be, &rk->q, err);
		if (ret == 0)
			ret = be->ops->queue_new(be, &rk->cq, err);
		if (ret == 0)
			ret = be->ops->event_new(be, &rk->ev0, err);
		if (ret == 0)
			ret = be->ops->event_new(be, &rk->ev1, err);
		for (L = 0; ret == 0 && L < ex->layers; L++)
			ret = be->ops->event_new(be, &rk->ev_copy[L], err);
	}
	return ret;
}

static void static_homes(const struct rlb_exec *ex, uint32_t *home)
{
	uint32_t per = ex->experts / ex->ranks, L, e;

	for (L = 0; L < ex->layers; L++)
		for (e = 0; e < ex->experts; e++)
			home[(size_t)L * ex->experts + e] = e / per;
}

/*
 * The home experts of the first run, allocated while the ranks can still
 * agree on the outcome: a model too large for a rank's memory is then
 * reported once, naming the rank, not by every rank as its first step
 * fails.
 */
static int first_homes(struct rlb_exec *ex, struct rlb_err *err)
{
	const struct rlb_backend *be = ex->rk[0].be;
	size_t c, n = 0, ncell = (size_t)ex->layers * ex->experts;
	uint32_t procs = rlb_world_host_procs(ex->world);
	const char *what = "available";
	double need, have;
	int ret;

	static_homes(ex, ex->cur_home);
	for (c = 0; c < ncell; c++)
		n += ex->cur_home[c] - ex->first < ex->nlocal;
	need = (double)n * (double)ex->np *
	       (double)(be->weight_bytes + be->opt_bytes + be->acc_bytes);
	/*
	 * The cpu backend's experts are host memory, which Linux promises
	 * beyond what it has: past it, the kernel kills a process of the
	 * machine instead of failing an allocation.
	 */
	if (be->kind == RLB_BACKEND_CPU && (have = rlb_host_mem_available(&what)) > 0 &&
	    need * procs > have) {
		if (procs == 1)
			return rlb_err_set(err, RLB_ENOMEM,
					   "%zu home experts of %zu parameters need %.1f GB, more than the machine's %.1f GB %s",
					   n, ex->np, need / 1e9, have / 1e9, what);
		return rlb_err_set(err, RLB_ENOMEM,
				   "%zu home experts of %zu parameters need %.1f GB, %.1f GB for the %u processes of the job on this machine, more than its %.1f GB %s",
				   n, ex->np, need / 1e9, need * procs / 1e9, procs,
				   have / 1e9, what);
	}
	ret = rlb_exec_homes_init(ex, err);
	if (ret == 0) {
		ex->homes_fresh = 1;
		return 0;
	}
	rlb_exec_homes_free(ex);
	if (err)
		rlb_err_prefix(err, "%zu home experts of %zu parameters need %.1f GB",
			       n, ex->np, need / 1e9);
	return ret;
}

/* ------------------------------------------------------------------ */
/* The same inputs on every rank.                                       */

enum { D_CONFIG, D_TRACE, D_PLAN, D_OPTIONS, D_COUNT };

/*
 * Digests of what must be the same on every rank: the effective config
 * (as YAML), the trace (header identity, and each selected step's
 * sequence lengths), the plan (its header and step index) and the run's
 * options.  Each rank checks them after opening its own files, so a rank
 * given another file or config is found here, before any transfer
 * assumes the same shapes everywhere.
 */
static int input_digests(const struct rlb_exec *ex, uint64_t *d,
			 struct rlb_err *err)
{
	const struct rlb_plan_step_info *info;
	struct rlb_seq_meta *m = NULL;
	const struct rlb_exec_opts *o = &ex->o;
	char *yaml = NULL;
	size_t len = 0, n, i, k;
	uint64_t th;
	FILE *fp;
	int ret = 0;

	fp = open_memstream(&yaml, &len);
	if (!fp)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = rlb_config_write_yaml(ex->cfg, fp, err);
	if (fclose(fp) != 0 && ret == 0)
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
	d[D_CONFIG] = rlb_fnv1a(RLB_FNV1A_INIT, yaml, ret == 0 ? len : 0);
	free(yaml);
	th = rlb_plan_trace_hash(rlb_trace_reader_header(ex->tr));
	d[D_TRACE] = rlb_fnv1a(RLB_FNV1A_INIT, &th, sizeof(th));
	for (k = 0; ret == 0 && k < ex->nsteps; k++) {
		ret = rlb_trace_reader_step_seqs(ex->tr, ex->steps[k], &m, &n, err);
		for (i = 0; ret == 0 && i < n; i++)
			d[D_TRACE] = rlb_fnv1a(d[D_TRACE], &m[i].tokens, sizeof(m[i].tokens));
		free(m);
		m = NULL;
	}
	d[D_PLAN] = rlb_fnv1a(RLB_FNV1A_INIT, &ex->ph.policy, sizeof(ex->ph.policy));
	d[D_PLAN] = rlb_fnv1a(d[D_PLAN], &ex->ph.trace_hash, sizeof(ex->ph.trace_hash));
	d[D_PLAN] = rlb_fnv1a(d[D_PLAN], &ex->ph.copies, sizeof(ex->ph.copies));
	n = rlb_plan_reader_steps(ex->pr, &info);
	for (i = 0; i < n; i++)
		d[D_PLAN] = rlb_fnv1a(d[D_PLAN], &info[i], sizeof(info[i]));
	d[D_OPTIONS] = rlb_fnv1a(RLB_FNV1A_INIT, &o->backend, sizeof(o->backend));
	d[D_OPTIONS] = rlb_fnv1a(d[D_OPTIONS], &o->seed, sizeof(o->seed));
	d[D_OPTIONS] = rlb_fnv1a(d[D_OPTIONS], &o->verify, sizeof(o->verify));
	d[D_OPTIONS] = rlb_fnv1a(d[D_OPTIONS], &o->init, sizeof(o->init));
	d[D_OPTIONS] = rlb_fnv1a(d[D_OPTIONS], &o->adam, sizeof(o->adam));
	d[D_OPTIONS] = rlb_fnv1a(d[D_OPTIONS], ex->steps, ex->nsteps * sizeof(*ex->steps));
	return ret;
}

/*
 * Compare this process's digests with rank 0's (2 x 32 bits each, exact
 * as doubles; every other rank adds -1 to a MAX reduction).  RLB_EMISMATCH
 * naming the first input that differs; transport errors as themselves.
 */
static int same_inputs(struct rlb_exec *ex, struct rlb_err *mine,
		       struct rlb_err *err)
{
	/* in the order checked: other --steps make another trace digest too */
	static const int order[D_COUNT] = { D_CONFIG, D_OPTIONS, D_TRACE, D_PLAN };
	static const char *const what[D_COUNT] = {
		[D_CONFIG] = "the config differs", [D_TRACE] = "the trace differs",
		[D_PLAN] = "the plan differs", [D_OPTIONS] = "the train-step options differ",
	};
	uint64_t d[D_COUNT] = { 0 };
	double *v;
	uint32_t i, k;
	int ret, rc;

	v = malloc((size_t)ex->nlocal * 2 * D_COUNT * sizeof(*v));
	if (!v)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = input_digests(ex, d, mine);
	for (i = 0; i < ex->nlocal; i++)
		for (k = 0; k < D_COUNT; k++) {
			int zero = ex->first + i == 0;

			v[(i * D_COUNT + k) * 2] = zero ? (double)(d[k] >> 32) : -1;
			v[(i * D_COUNT + k) * 2 + 1] = zero ? (double)(d[k] & 0xffffffffu) : -1;
		}
	rc = rlb_world_allreduce(ex->world, v, 2 * D_COUNT, RLB_REDUCE_MAX, err);
	if (rc) {
		free(v);
		return rc;
	}
	for (i = 0; ret == 0 && i < D_COUNT; i++) {
		k = (uint32_t)order[i];
		if ((uint64_t)v[2 * k] != d[k] >> 32 ||
		    (uint64_t)v[2 * k + 1] != (d[k] & 0xffffffffu))
			ret = rlb_err_set(mine, RLB_EMISMATCH,
					  "%s from rank 0's (every rank must be given the same)",
					  what[k]);
	}
	free(v);
	return 0;
}

/*
 * Every rank reports MINE (copied into ERRS, one per local rank); when
 * one failed, MINE becomes the lowest failing rank's report, naming the
 * rank when it is not rank 0 (rank 0 reports another rank's file or
 * config).
 */
static int agree(struct rlb_exec *ex, struct rlb_err *errs, struct rlb_err *mine,
		 struct rlb_err *err)
{
	uint32_t i, bad = 0;
	int ret;

	for (i = 0; i < ex->nlocal; i++)
		errs[i] = *mine;
	ret = rlb_world_agree(ex->world, errs, mine, &bad, err);
	if (ret && mine->code && bad != 0)
		rlb_err_prefix(mine, "rank %u", bad);
	return ret;
}

int rlb_exec_new(struct rlb_exec **out, struct rlb_world *w,
		 const struct rlb_config *cfg, const char *trace_path,
		 const char *plan_path, const struct rlb_exec_opts *o,
		 struct rlb_err *err)
{
	struct rlb_exec *ex = calloc(1, sizeof(*ex));
	struct rlb_err mine = { 0, "" }, *errs = NULL;
	uint32_t gpn;
	int ret;

	*out = NULL;
	if (!ex)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ex->cfg = cfg;
	ex->o = *o;
	ex->world = w;
	ex->trace_path = trace_path;
	ex->plan_path = plan_path;
	ex->nlocal = rlb_world_local(w);
	ex->first = rlb_world_first(w);
	ex->virtual_ranks = !strcmp(rlb_world_name(w), "virtual");
	ex->failed_rank = ex->first;
	/* Collective on every process whatever happens next. */
	gpn = cfg->cluster.gpus_per_node > 0 ? (uint32_t)cfg->cluster.gpus_per_node : 1;
	if (gpn > rlb_world_size(w))
		gpn = rlb_world_size(w);
	ret = rlb_world_set_node_size(w, gpn, &mine);
	/* before what it explains ("2 ranks per node do not divide 3 ranks") */
	if ((int)rlb_world_size(w) != cfg->parallel.ep_size)
		ret = rlb_err_set(&mine, RLB_EMISMATCH,
				  "the job has %u rank%s, parallel.ep_size is %d",
				  rlb_world_size(w), rlb_world_size(w) == 1 ? "" : "s",
				  cfg->parallel.ep_size);
	if (ret == 0)
		ret = setup(ex, &mine);
	errs = calloc(ex->nlocal, sizeof(*errs));
	if (!errs) {
		rlb_exec_free(ex);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	ret = agree(ex, errs, &mine, err);
	if (ret == 0) {
		ret = same_inputs(ex, &mine, err);
		if (ret == 0)
			ret = agree(ex, errs, &mine, err);
	}
	/*
	 * The backends once the ranks agree on the options: the CUDA
	 * backend's set-up is collective, and a rank given another backend,
	 * or whose files failed, would not take part in it.  Then the home
	 * experts (first_homes).  Their errors are in mine.
	 */
	if (ret == 0) {
		if (ranks_init(ex, &mine) == 0)
			(void)first_homes(ex, &mine);
		ret = agree(ex, errs, &mine, err);
	}
	free(errs);
	if (ret) {
		if (err && mine.code)
			*err = mine;
		rlb_exec_free(ex);
		return ret;
	}
	*out = ex;
	return 0;
}

struct rlb_trace_reader *rlb_exec_trace(struct rlb_exec *ex)
{
	return ex->tr;
}

void rlb_exec_free(struct rlb_exec *ex)
{
	uint32_t i;

	if (!ex)
		return;
	for (i = 0; ex->rk && i < ex->nlocal; i++) {
		rlb_exec_rank_release(ex, &ex->rk[i]);
		rlb_backend_free(ex->rk[i].be);
	}
	free(ex->rk);
	rlb_step_plan_release(&ex->plan);
	rlb_loads_release(&ex->loads);
	rlb_schedule_release(&ex->sched);
	rlb_trace_reader_free(ex->tr);
	rlb_plan_reader_free(ex->pr);
	rlb_exec_records_free(ex);
	free(ex->steps);
	free(ex->cur_home);
	free(ex->split);
	free(ex->split_first);
	free(ex->key_cnt);
	free(ex->cursor);
	free(ex->chunk_off);
	free(ex->losses);
	free(ex);
}

/* ------------------------------------------------------------------ */
/* Steps.                                                               */

/* The static plan of the current step: every expert's rows at its home. */
static int static_plan(struct rlb_exec *ex, uint32_t step, struct rlb_err *err)
{
	const struct rlb_loads *l = &ex->loads;
	uint32_t mb, L, e, s;
	int ret;

	rlb_step_plan_release(&ex->plan);
	ret = rlb_step_plan_init(&ex->plan, step, l->micro_batches, ex->layers,
				 ex->experts, ex->ranks, ex->gpn, 0,
				 RLB_SPLIT_LOCALITY, err);
	for (mb = 0; ret == 0 && mb < l->micro_batches; mb++)
		for (L = 0; ret == 0 && L < ex->layers; L++)
			for (e = 0; ret == 0 && e < ex->experts; e++) {
				uint64_t n = 0;

				for (s = 0; s < ex->ranks; s++)
					n += l->count[rlb_loads_index(l, mb, L, s, e)];
				ret = rlb_step_plan_add(&ex->plan, mb, L, e,
							ex->plan.home[(size_t)L * ex->experts + e],
							(uint32_t)n, err);
			}
	return ret;
}

static int step_begin(struct rlb_exec *ex, uint32_t step, struct rlb_err *err)
{
	size_t c, ncell;
	uint32_t i, L, j;
	int ret;

	rlb_loads_release(&ex->loads);
	rlb_schedule_release(&ex->sched);
	ret = step_inputs(ex, step, &ex->plan, &ex->sched, &ex->loads, err);
	if (ret < 0)
		return ret;
	/* The static run keeps the plan's schedule: only the placement differs. */
	if (ex->static_run)
		ret = static_plan(ex, step, err);
	if (ret == 0)
		ret = rlb_step_plan_check(&ex->plan, &ex->loads, err);
	if (ret < 0)
		return ret;
	ex->step_tokens = 0;
	for (c = 0; c < ex->sched.nchunks; c++)
		ex->step_tokens += ex->sched.chunks[c].tokens;
	ret = rlb_exec_load_tokens(ex, step, err);
	if (ret < 0)
		return ret;
	ncell = (size_t)ex->sched.micro_batches * ex->layers * CELL_N;
	for (i = 0; i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];

		if (ncell > rk->cell_cap) {
			free(rk->cell);
			rk->cell = malloc(ncell * sizeof(*rk->cell));
			rk->cell_cap = rk->cell ? ncell : 0;
			if (!rk->cell)
				return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		}
		memset(rk->cell, 0, ncell * sizeof(*rk->cell));
		memset(rk->stepm, 0, sizeof(rk->stepm));
		rk->loss = 0;
		rk->stepm[STEP_TOKENS] = rk->ntok;
		/* Weights change with every step: no replica survives it. */
		for (L = 0; L < ex->layers; L++)
			for (j = 0; j < rk->nslot[L]; j++) {
				rk->slot[L][j].expert = EXEC_NONE;
				rk->slot[L][j].mb = EXEC_NONE;
			}
	}
	return 0;
}

/* Whether the injected fault is due on this process at step STEP. */
static int fault_due(const struct rlb_exec *ex, uint32_t step)
{
	return ex->o.fault && !ex->static_run && step == ex->o.fault_step &&
	       ex->o.fault_rank >= ex->first && ex->o.fault_rank - ex->first < ex->nlocal;
}

/*
 * The ranks agree on RET, this process's outcome of step_begin (its
 * error in *ERR), before the step's first transfer: inputs that fail on
 * every rank (a trace cut while the job runs) are then reported once,
 * and a rank that fails alone does not leave the others waiting.  0, the
 * lowest failing rank's error (failed_rank RLB_EXEC_AGREED), or the
 * transport's.
 */
static int step_agree(struct rlb_exec *ex, int ret, struct rlb_err *err)
{
	struct rlb_err *errs, mine = { ret, "" }, first = { 0, "" }, terr = { 0, "" };
	uint32_t i, bad = UINT32_MAX;
	int rc;

	if (ret && err)
		mine = *err;
	mine.code = ret;
	errs = malloc(ex->nlocal * sizeof(*errs));
	if (!errs)
		return ret ? ret : rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; i < ex->nlocal; i++)
		errs[i] = mine;
	rc = rlb_world_agree(ex->world, errs, &first, &bad, &terr);
	free(errs);
	if (rc == 0)
		return 0;
	if (bad == UINT32_MAX) {
		if (err)
			*err = terr;
		return rc;
	}
	if (bad != 0)
		rlb_err_prefix(&first, "rank %u", bad);
	if (err)
		*err = first;
	ex->failed_rank = RLB_EXEC_AGREED;
	return rc;
}

static int run_step(struct rlb_exec *ex, size_t idx, struct rlb_err *err)
{
	uint32_t step = ex->steps[idx], mb, i;
	uint64_t t0 = rlb_now_ns();
	double *v = NULL;
	int ret;

	if (fault_due(ex, step) && ex->o.fault == RLB_FAULT_FAIL) {
		ex->failed_rank = ex->o.fault_rank;
		return rlb_err_set(err, RLB_EINVAL, "injected fault at step %u", step);
	}
	ex->failed_rank = ex->first;
	ret = step_agree(ex, step_begin(ex, step, err), err);
	if (ret)
		return ret;
	/* The others wait for its transfers. */
	if (fault_due(ex, step) && ex->o.fault == RLB_FAULT_HANG) {
		ex->failed_rank = ex->o.fault_rank;
		for (;;)
			pause();
	}
	ret = rlb_exec_migrate(ex, ex->plan.home, 1, err);
	for (mb = 0; ret == 0 && mb < ex->sched.micro_batches; mb++)
		ret = rlb_exec_micro_batch(ex, mb, err);
	if (ret == 0)
		ret = rlb_exec_adam(ex, (uint32_t)idx + 1, err);
	if (ret < 0)
		return ret;
	/* Transfers done: the other ranks wait for it in the reduction below. */
	while (fault_due(ex, step) && ex->o.fault == RLB_FAULT_HANG_END)
		pause();
	v = malloc(ex->nlocal * sizeof(*v));
	if (!v)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; i < ex->nlocal; i++) {
		ex->rk[i].stepm[STEP_WALL_S] = (rlb_now_ns() - t0) / 1e9;
		v[i] = ex->rk[i].loss;
	}
	ret = rlb_world_allreduce(ex->world, v, 1, RLB_REDUCE_SUM, err);
	if (ret == 0)
		ex->losses[idx] = v[0];
	free(v);
	if (ret == 0 && !ex->static_run)
		ret = rlb_exec_record_step(ex, step, err);
	return ret;
}

/* One run over the selected steps from freshly initialised weights. */
static int run_all(struct rlb_exec *ex, int static_run, struct rlb_err *err)
{
	size_t i;
	int ret;

	ex->static_run = static_run;
	ret = 0;
	if (!ex->homes_fresh) {
		rlb_exec_homes_free(ex);
		static_homes(ex, ex->cur_home);
		ret = rlb_exec_homes_init(ex, err);
	}
	ex->homes_fresh = 0;
	for (i = 0; ret == 0 && i < ex->nsteps; i++) {
		ret = run_step(ex, i, err);
		if (ex->o.progress && ex->first == 0)
			ex->o.progress(ex->o.progress_ctx,
				       (uint64_t)i + 1 + (static_run ? ex->nsteps : 0),
				       ex->nsteps * (ex->o.verify ? 2 : 1), "steps");
	}
	return ret;
}

/* ------------------------------------------------------------------ */
/* Verification against the static plan.                                */

/* The tensors of an expert; an ungated one's are the last two. */
static const char *const tensor_name[3] = { "w_gate", "w_up", "w_down" };

/* max |a - b| / max |b| over one tensor (max |a - b| when b is all zero). */
void rlb_exec_tensor_diff(const float *a, const float *b, size_t n, double tol,
			  double slack, double max_outliers,
			  struct rlb_tensor_diff *out)
{
	double d = 0, m = 0, lim;
	size_t i, over = 0;

	for (i = 0; i < n; i++) {
		double x = fabs((double)a[i] - b[i]);

		if (!(x <= d))	/* NaN counts as the worst */
			d = isnan(x) ? INFINITY : x;
		if (fabs(b[i]) > m)
			m = fabs(b[i]);
	}
	lim = tol * m;
	for (i = 0; i < n; i++)
		over += !(fabs((double)a[i] - b[i]) <= lim);
	out->max_rel = m > 0 ? d / m : d;
	out->outliers = n ? (double)over / (double)n : 0;
	out->ok = over == 0 ||
		  (out->outliers <= max_outliers && d <= lim + slack);
}

/* Download every local home expert (the static layout) into saved. */
static int save_weights(struct rlb_exec *ex, float **saved, struct rlb_err *err)
{
	size_t c, n = (size_t)ex->layers * ex->experts;
	uint32_t i;
	int ret = 0;

	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];

		for (c = 0; ret == 0 && c < n; c++) {
			if (!rk->home[c])
				continue;
			saved[c] = malloc(ex->np * sizeof(float));
			if (!saved[c])
				return rlb_err_set(err, RLB_ENOMEM, "out of memory");
			ret = rk->be->ops->download_weights(rk->be, rk->q, &ex->shape,
							    rk->home[c]->w, rk->home[c]->opt,
							    saved[c], err);
			if (ret == 0)
				ret = rk->be->ops->queue_sync(rk->be, rk->q, err);
		}
	}
	return ret;
}

static int compare(struct rlb_exec *ex, float **saved, struct rlb_err *err)
{
	struct rlb_exec_verify *v = &ex->verify;
	size_t c, n = (size_t)ex->layers * ex->experts, part = (size_t)ex->hidden * ex->ffn;
	uint32_t mats = rlb_expert_matrices(&ex->shape);
	double worst = 0, outliers = 0, bad = 0, *red = NULL;
	double where = INFINITY;
	double slack = 2.0 * ex->o.adam.lr * (double)ex->nsteps;
	float *cur = malloc(ex->np * sizeof(*cur));
	uint32_t i, k;
	int ret = cur ? 0 : rlb_err_set(err, RLB_ENOMEM, "out of memory");

	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];

		for (c = 0; ret == 0 && c < n; c++) {
			if (!rk->home[c] || !saved[c])
				continue;
			ret = rk->be->ops->download_weights(rk->be, rk->q, &ex->shape,
							    rk->home[c]->w, rk->home[c]->opt,
							    cur, err);
			if (ret == 0)
				ret = rk->be->ops->queue_sync(rk->be, rk->q, err);
			for (k = 0; ret == 0 && k < mats; k++) {
				struct rlb_tensor_diff td;

				rlb_exec_tensor_diff(cur + k * part, saved[c] + k * part,
						     part, ex->o.verify_tol, slack,
						     ex->o.verify_outliers, &td);
				if (!(td.max_rel <= worst)) {
					worst = td.max_rel;
					where = (double)(c * mats + k);
				}
				if (td.outliers > outliers)
					outliers = td.outliers;
				if (!td.ok)
					bad = 1;
			}
		}
	}
	free(cur);
	if (ret)
		return ret;
	red = malloc(ex->nlocal * sizeof(*red));
	if (!red)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; i < ex->nlocal; i++)
		red[i] = worst;
	ret = rlb_world_allreduce(ex->world, red, 1, RLB_REDUCE_MAX, err);
	if (ret == 0) {
		v->max_rel_weight = red[0];
		for (i = 0; i < ex->nlocal; i++)
			red[i] = worst == v->max_rel_weight ? where : INFINITY;
		ret = rlb_world_allreduce(ex->world, red, 1, RLB_REDUCE_MIN, err);
	}
	if (ret == 0) {
		where = red[0];
		for (i = 0; i < ex->nlocal; i++)
			red[i] = outliers;
		ret = rlb_world_allreduce(ex->world, red, 1, RLB_REDUCE_MAX, err);
		v->weight_outliers = red[0];
	}
	if (ret == 0) {
		for (i = 0; i < ex->nlocal; i++)
			red[i] = bad;
		ret = rlb_world_allreduce(ex->world, red, 1, RLB_REDUCE_MAX, err);
		v->weights_ok = red[0] == 0;
		red[0] = where;
	}
	if (ret == 0 && isfinite(red[0])) {
		size_t t = (size_t)red[0];

		snprintf(v->worst, sizeof(v->worst), "layer %zu expert %zu %s",
			 t / mats / ex->experts, t / mats % ex->experts,
			 tensor_name[3 - mats + t % mats]);
	}
	free(red);
	return ret;
}

static int verify(struct rlb_exec *ex, struct rlb_err *err)
{
	struct rlb_exec_verify *v = &ex->verify;
	size_t c, n = (size_t)ex->layers * ex->experts, i;
	uint32_t *home = malloc(n * sizeof(*home));
	float **saved = calloc(n, sizeof(*saved));
	double *plan_loss = malloc(ex->nsteps * sizeof(*plan_loss));
	int ret = 0;

	if (!home || !saved || !plan_loss)
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
	if (ret == 0) {
		memcpy(plan_loss, ex->losses, ex->nsteps * sizeof(*plan_loss));
		static_homes(ex, home);
		ret = rlb_exec_migrate(ex, home, 0, err);
	}
	if (ret == 0)
		ret = save_weights(ex, saved, err);
	if (ret == 0)
		ret = run_all(ex, 1, err);
	if (ret == 0)
		ret = compare(ex, saved, err);
	for (i = 0; ret == 0 && i < ex->nsteps; i++) {
		double b = fabs(ex->losses[i]), d = fabs(plan_loss[i] - ex->losses[i]);
		double r = b > 0 ? d / b : d;

		if (!isfinite(ex->losses[i]) && !v->diverged) {
			v->diverged = 1;
			v->diverged_step = ex->steps[i];
		}
		if (isnan(r))
			r = INFINITY;
		if (r > v->max_rel_loss || i == 0) {
			v->max_rel_loss = r;
			v->worst_loss_step = ex->steps[i];
		}
	}
	if (ret == 0) {
		v->done = 1;
		v->ok = v->weights_ok && v->max_rel_loss <= ex->o.verify_tol && !v->diverged;
		/* The plan run's losses are the ones reported. */
		memcpy(ex->losses, plan_loss, ex->nsteps * sizeof(*plan_loss));
	}
	for (c = 0; saved && c < n; c++)
		free(saved[c]);
	free(saved);
	free(home);
	free(plan_loss);
	return ret;
}

int rlb_exec_run(struct rlb_exec *ex, struct rlb_exec_verify *v,
		 uint32_t *failed_rank, struct rlb_err *err)
{
	int ret;

	memset(&ex->verify, 0, sizeof(ex->verify));
	rlb_exec_records_free(ex);
	ret = run_all(ex, 0, err);
	if (ret == 0 && ex->o.verify)
		ret = verify(ex, err);
	if (ret == 0)
		ex->ran = 1;
	if (v)
		*v = ex->verify;
	if (failed_rank)
		*failed_rank = ex->failed_rank;
	return ret;
}

int rlb_exec_weights(struct rlb_exec *ex, uint32_t layer, uint32_t expert,
		     float *w, struct rlb_err *err)
{
	size_t c = (size_t)layer * ex->experts + expert;
	struct exec_rank *rk;
	int ret;

	if (layer >= ex->layers || expert >= ex->experts)
		return rlb_err_set(err, RLB_EINVAL, "no expert %u in layer %u",
				   expert, layer);
	if (ex->cur_home[c] < ex->first || ex->cur_home[c] - ex->first >= ex->nlocal)
		return rlb_err_set(err, RLB_ENOTFOUND,
				   "expert %u of layer %u is on rank %u, not here",
				   expert, layer, ex->cur_home[c]);
	rk = &ex->rk[ex->cur_home[c] - ex->first];
	if (!rk->home[c])
		return rlb_err_set(err, RLB_ENOTFOUND, "expert %u of layer %u not held",
				   expert, layer);
	ret = rk->be->ops->download_weights(rk->be, rk->q, &ex->shape, rk->home[c]->w,
					    rk->home[c]->opt, w, err);
	return ret ? ret : rk->be->ops->queue_sync(rk->be, rk->q, err);
}

int rlb_exec_home(const struct rlb_exec *ex, uint32_t layer, uint32_t expert)
{
	if (layer >= ex->layers || expert >= ex->experts)
		return -1;
	return (int)ex->cur_home[(size_t)layer * ex->experts + expert];
}
