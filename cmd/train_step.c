/*
 * train_step.c - relibra train-step: run MoE training steps that apply a
 * plan, on MPI ranks (under mpirun) or on virtual ranks in one process,
 * write the measurements, and with --verify compare with the static plan.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmd.h"
#include "exec.h"

#define NAME "train-step"
#define EXIT_VERIFY 4

static const char usage[] =
	"usage: relibra train-step [-h] -c CONFIG [--set KEY=VALUE]... --trace TRACE "
	"--plan PLAN [--backend cpu|cuda] [--steps A:B] [--seed S] [--verify] "
	"[--virtual-ranks N] [-o METRICS]\n"
	"\n"
	"  -c, --config CONFIG  configuration (relibra.yaml(5))\n"
	"  --set KEY=VALUE      override a configuration key (repeatable)\n"
	"  --trace TRACE        the routing trace (.rrt) the plan was made from\n"
	"  --plan PLAN          the plan (.rlp) to apply\n"
	"  --backend NAME       cpu (default) or cuda\n"
	"  --steps A:B          only steps A..B (A: and :B allowed)\n"
	"  --seed S             seed of weights, hidden states and gates (default 1)\n"
	"  --verify             also run the static plan; exit 4 when the final\n"
	"                       weights or losses differ by more than 1e-5 (cpu), 1e-2 (cuda)\n"
	"  --virtual-ranks N    run N ranks in this process (no MPI)\n"
	"  -o, --output METRICS write the measurements as JSON (relibra.result/1)\n"
	"  -h, --help           show this help\n"
	"\n"
	"Launch one rank per GPU: mpirun -np EP_SIZE relibra train-step ...\n";

enum {
	OPT_TRACE = CMD_OPT_SET + 1, OPT_PLAN, OPT_BACKEND, OPT_STEPS, OPT_SEED,
	OPT_VERIFY, OPT_VIRTUAL,
};

struct opts {
	struct cmd_config_opts cfg;
	const char *trace, *plan, *out, *backend;
	enum rlb_backend_kind backend_kind;
	uint32_t step_lo, step_hi;
	uint64_t seed;
	uint64_t virtual_ranks;		/* 0: not given */
	int verify;
};

/* The rank under a launcher (mpirun, srun), -1 when not launched so. */
static long launcher_rank(void)
{
	static const char *const vars[] = {
		"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", NULL,
	};
	const char *v;
	size_t i;

	for (i = 0; vars[i]; i++)
		if ((v = getenv(vars[i])) && *v)
			return strtol(v, NULL, 10);
	return -1;
}

/*
 * 0, -1 after -h (the usage printed unless DEFER), or the exit status of
 * an error: printed, or with DEFER kept in *DEFER.
 */
static int parse_args(int argc, char **argv, struct opts *o, struct rlb_err *defer)
{
	static const struct option longopts[] = {
		CMD_COMMON_LONGOPTS,
		{ "trace", required_argument, NULL, OPT_TRACE },
		{ "plan", required_argument, NULL, OPT_PLAN },
		{ "backend", required_argument, NULL, OPT_BACKEND },
		{ "steps", required_argument, NULL, OPT_STEPS },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "verify", no_argument, NULL, OPT_VERIFY },
		{ "virtual-ranks", required_argument, NULL, OPT_VIRTUAL },
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	struct rlb_err err = {0};
	int c, ret = 0;

	memset(o, 0, sizeof(*o));
	o->step_hi = UINT32_MAX;
	o->seed = 1;
	o->backend = "cpu";
	optind = 1;
	opterr = 0;
	while (ret == 0 && (c = getopt_long(argc, argv, ":hc:o:", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_TRACE:
			o->trace = optarg;
			break;
		case OPT_PLAN:
			o->plan = optarg;
			break;
		case OPT_BACKEND:
			o->backend = optarg;
			break;
		case OPT_STEPS:
			if (cmd_parse_steps(optarg, &o->step_lo, &o->step_hi, &err))
				ret = 1;
			break;
		case OPT_SEED:
			/* the metrics record it as a JSON integer (int64) */
			if (rlb_parse_u64(optarg, 0, INT64_MAX, &o->seed, "--seed", &err))
				ret = 1;
			break;
		case OPT_VERIFY:
			o->verify = 1;
			break;
		case OPT_VIRTUAL:
			if (rlb_parse_u64(optarg, 1, 1024, &o->virtual_ranks,
					  "--virtual-ranks", &err))
				ret = 1;
			break;
		case 'o':
			o->out = optarg;
			break;
		default:
			ret = cmd_common_opt(NAME, usage, c, argv, &o->cfg, defer);
			if (ret)
				return ret;
			break;
		}
	}
	if (ret == 0 && !o->cfg.path)
		ret = rlb_err_set(&err, RLB_EINVAL, "-c CONFIG is required") != 0;
	if (ret == 0 && (!o->trace || !o->plan))
		ret = rlb_err_set(&err, RLB_EINVAL, "--trace and --plan are required") != 0;
	if (ret == 0 && optind != argc)
		ret = rlb_err_set(&err, RLB_EINVAL, "unexpected argument '%s'",
				  argv[optind]) != 0;
	if (ret == 0 && rlb_backend_from_name(o->backend, &o->backend_kind, &err))
		ret = 1;
	if (ret == 0)
		return 0;
	if (defer)
		*defer = err;
	else
		cmd_usage_error(NAME, usage, "%s", err.msg);
	return EXIT_USAGE;
}

/* RELIBRA_FAULT=rank:R:step:S[:hang|:hang-end] */
static int parse_fault(const char *s, struct rlb_exec_opts *eo)
{
	unsigned long r, st;
	char *end;

	if (strncmp(s, "rank:", 5))
		return -1;
	r = strtoul(s + 5, &end, 10);
	if (end == s + 5 || strncmp(end, ":step:", 6))
		return -1;
	s = end + 6;
	st = strtoul(s, &end, 10);
	if (end == s || r > UINT32_MAX || st > UINT32_MAX)
		return -1;
	if (!*end)
		eo->fault = RLB_FAULT_FAIL;
	else if (!strcmp(end, ":hang"))
		eo->fault = RLB_FAULT_HANG;
	else if (!strcmp(end, ":hang-end"))
		eo->fault = RLB_FAULT_HANG_END;
	else
		return -1;
	eo->fault_rank = (uint32_t)r;
	eo->fault_step = (uint32_t)st;
	return 0;
}

/* --verify's tolerance: fp32 on the CPU, bf16 on the GPU (the GPU check's 1e-2). */
static double verify_tol(const char *backend)
{
	return strcmp(backend, "cuda") == 0 ? 1e-2 : 1e-5;
}

/*
 * --verify's share of elements that may pass the tolerance by an Adam
 * sign flip at most (rlb_exec_tensor_diff): none on the CPU, 1% in bf16.
 */
static double verify_outliers(const char *backend)
{
	return strcmp(backend, "cuda") == 0 ? 0.01 : 0;
}

/* A loss as the summary prints it: 6 significant figures, or nan, inf. */
static const char *loss_text(double loss, char buf[32])
{
	if (isnan(loss))
		return "nan";
	snprintf(buf, 32, "%.6g", loss);
	return buf;
}

/* Why a loss is not finite: the synthetic model's residual stream. */
static const char *diverged_why(const struct rlb_config *cfg)
{
	static char why[160];

	snprintf(why, sizeof(why),
		 "the hidden states overflow fp32 over the %u MoE layers, whose experts add to the residual without normalisation",
		 cfg->model.moe_layers);
	return why;
}

/*
 * Rank 0: the metrics file (OUT: a device or a FIFO opened before the
 * work, else closed), the summary and the verdict of --verify.
 */
static int report(const struct opts *o, const struct rlb_config *cfg,
		  struct rlb_world *w, struct rlb_exec *ex,
		  const struct rlb_exec_verify *v, struct rlb_atomic_file *out)
{
	struct rlb_exec_source src = { o->cfg.path, o->trace, o->plan };
	struct rlb_exec_summary s;
	struct rlb_err err = {0};
	char l0[32], l1[32];
	json_t *j;
	int ret;

	rlb_exec_summary(ex, &s);
	/* the file first: a summary on stdout says the run is complete */
	if (o->out) {
		j = rlb_exec_metrics_json(ex, &src);
		if (!j) {
			cmd_errorf(NAME, "out of memory");
			return EXIT_FAIL;
		}
		/* a device or a FIFO stays open from the start */
		ret = out->fp ? 0 : rlb_atomic_open(out, o->out, &err);
		if (ret == 0)
			ret = cmd_json_sync(out, j, &err);
		json_decref(j);
		if (ret == 0)
			ret = rlb_atomic_commit(out, &err);
		if (ret) {
			cmd_error(NAME, &err);
			return EXIT_FAIL;
		}
	}
	printf("relibra train-step: %s on %s, %u ranks (%s), %s backend\n",
	       s.policy, cfg->model.name, s.ranks, rlb_world_name(w), o->backend);
	printf("  %" PRIu64 " step%s, %" PRIu64 " tokens, %.4g s per step, %.4g tokens/s\n",
	       s.steps, cmd_s(s.steps), s.tokens, s.step_time_s, s.tokens_per_s);
	printf("  expert critical path %.4g s per step, loss %s -> %s\n",
	       s.critical_path_s, loss_text(s.first_loss, l0), loss_text(s.last_loss, l1));
	if (s.plan_relay)
		cmd_errorf(NAME, "note: the plan was made with --relay; train-step exchanges rank to rank, so it ran, and is labelled, without the relayed dispatch");
	if (rlb_exec_unheld_spans(ex) > 0)
		cmd_errorf(NAME, "warning: %" PRIu64 " expert span%s timed without a hold (a hold lapsed): they include the host's enqueueing",
			   rlb_exec_unheld_spans(ex), cmd_s(rlb_exec_unheld_spans(ex)));
	if (!isfinite(s.first_loss) || !isfinite(s.last_loss))
		cmd_errorf(NAME, "warning: the loss is not finite: the times stand, the training result does not (%s)",
			   diverged_why(cfg));
	if (v->done && v->diverged) {
		printf("  verify: cannot compare: the static plan's own loss is not finite from step %u\n",
		       v->diverged_step);
	} else if (v->done) {
		printf("  verify: %s the static plan (max relative difference %.3g in weights%s%s%s, %.3g in losses",
		       v->ok ? "agrees with" : "DIFFERS from", v->max_rel_weight,
		       v->worst[0] ? " (" : "", v->worst, v->worst[0] ? ")" : "",
		       v->max_rel_loss);
		if (v->weight_outliers > 0)	/* bf16: Adam's sign flips */
			printf("; %.3g%% of a tensor's elements beyond %.0e",
			       100 * v->weight_outliers, verify_tol(o->backend));
		printf(")\n");
	}
	if (cmd_flush_stdout(NAME) != 0)
		return EXIT_FAIL;
	if (v->done && v->diverged) {
		cmd_errorf(NAME, "--verify cannot compare: the static plan's own loss is not finite from step %u (%s)",
			   v->diverged_step, diverged_why(cfg));
		return EXIT_FAIL;
	}
	if (v->done && !v->ok) {
		cmd_errorf(NAME, "the plan's result differs from the static plan's: max relative difference %.3g in %s, %.3g in the loss of step %u (tolerance %.0e)",
			   v->max_rel_weight, v->worst[0] ? v->worst : "the weights",
			   v->max_rel_loss, v->worst_loss_step, verify_tol(o->backend));
		return EXIT_VERIFY;
	}
	return EXIT_OK;
}

/*
 * Every rank loads the config once MPI is up (so that RELIBRA_TIMEOUT
 * bounds a rank stuck reading it), checks its RELIBRA_FAULT against it
 * and the ranks agree on the outcome, with ENV (an error in this rank's
 * RELIBRA_FAULT or RELIBRA_TIMEOUT, code 0: none) in place of the
 * config's: a rank that left alone would leave the others waiting in the
 * next collective.  Rank 0 reports its own error or names the lowest
 * failing rank with its.  0, or -1 once reported (a transport failure
 * ends the job).
 */
static int load_config(const struct opts *o, const struct rlb_exec_opts *eo,
		       const struct rlb_err *env, struct rlb_world *w,
		       struct rlb_config *cfg)
{
	struct rlb_err *errs, err = {0}, first = {0};
	uint32_t i, bad = UINT32_MAX, local = rlb_world_local(w), me = rlb_world_first(w);
	int ret;

	errs = calloc(local, sizeof(*errs));
	if (!errs) {
		cmd_errorf(NAME, "rank %u: out of memory", me);
		rlb_world_abort(w, EXIT_FAIL);
		return -1;
	}
	if (env->code)
		errs[0] = *env;
	else if (rlb_config_load(cfg, o->cfg.path, o->cfg.sets, o->cfg.nsets, &errs[0]) == 0)
		memset(&errs[0], 0, sizeof(errs[0]));
	if (errs[0].code == 0 && eo->fault && eo->fault_rank >= (uint32_t)cfg->parallel.ep_size)
		rlb_err_set(&errs[0], RLB_EINVAL, "RELIBRA_FAULT: rank %u is not below the %d ranks",
			    eo->fault_rank, cfg->parallel.ep_size);
	if (me == 0 && errs[0].code)
		cmd_error(NAME, &errs[0]);
	for (i = 1; i < local; i++)
		errs[i] = errs[0];
	ret = rlb_world_agree(w, errs, &first, &bad, &err);
	free(errs);
	if (ret == 0)
		return 0;
	if (bad == UINT32_MAX) {
		/* The transport failed: a rank may be stuck; end the job. */
		cmd_errorf(NAME, "rank %u: %s", me, err.msg);
		fflush(stderr);
		rlb_world_abort(w, EXIT_FAIL);
	} else if (me == 0 && bad != 0) {
		cmd_errorf(NAME, "rank %u: %s", bad,
			   first.msg[0] ? first.msg : rlb_strerror(first.code));
	}
	return -1;
}

/*
 * Under a launcher the ranks' arguments may differ (mpirun's MPMD form),
 * so every rank joins MPI before it acts on its own: a rank that returned
 * at once after -h would leave the others waiting in MPI_Init, and a usage
 * error on a rank but the first would be printed nowhere.  PARSED is this
 * rank's outcome (0, -1 after -h, or an exit status with its message in
 * *MSG; an empty message was printed already).  The first failing rank's
 * error ends every rank; else -h on any rank does, rank 0 printing the
 * usage.  0 to go on, or the exit status.
 */
static int agree_args(struct rlb_world *w, int parsed, const struct rlb_err *msg)
{
	struct rlb_err mine = {0}, first = {0}, err = {0};
	uint32_t bad = UINT32_MAX, me = rlb_world_first(w);
	double help = parsed < 0;
	int ret;

	if (parsed > 0) {
		mine = *msg;
		mine.code = parsed == EXIT_USAGE ? RLB_EINVAL : RLB_EIO;
	}
	ret = rlb_world_agree(w, &mine, &first, &bad, &err);
	if (ret == 0)
		ret = rlb_world_allreduce(w, &help, 1, RLB_REDUCE_MAX, &err);
	if (ret && bad == UINT32_MAX) {
		cmd_errorf(NAME, "rank %u: %s", me, err.msg);
		fflush(stderr);
		rlb_world_abort(w, EXIT_FAIL);
		return EXIT_FAIL;
	}
	if (ret) {
		char where[32] = "";

		if (bad)
			snprintf(where, sizeof(where), "rank %u: ", bad);
		if (me == 0 && first.msg[0] && first.code == RLB_EINVAL)
			cmd_usage_error(NAME, usage, "%s%s", where, first.msg);
		else if (me == 0 && first.msg[0])
			cmd_errorf(NAME, "%s%s", where, first.msg);
		return first.code == RLB_EINVAL ? EXIT_USAGE : EXIT_FAIL;
	}
	if (help) {
		if (me == 0)
			fputs(usage, stdout);
		return -1;
	}
	return 0;
}

int cmd_train_step(int argc, char **argv)
{
	struct rlb_world *w = NULL;
	struct rlb_exec *ex = NULL;
	struct rlb_exec_opts eo;
	struct rlb_exec_verify v;
	struct rlb_config cfg;
	struct rlb_err err = {0}, env_err = {0}, arg_err = {0};
	struct rlb_atomic_file out_file = { .slot = -1 };
	struct opts o;
	long lrank = launcher_rank();
	int launched = lrank >= 0 && rlb_world_mpi_available();
	const char *env, *np = getenv("OMPI_COMM_WORLD_SIZE");
	/* one of several ranks under a launcher */
	int in_job = lrank > 0 || (lrank == 0 && np && strcmp(np, "1"));
	uint32_t failed = 0;
	int ret, parsed, use_mpi, status = EXIT_FAIL;

	parsed = parse_args(argc, argv, &o, launched ? &arg_err : NULL);
	/*
	 * --virtual-ranks in a job of several ranks, were it on one rank
	 * alone: that rank joins MPI all the same, so that rank 0 reports it
	 * and no rank is left waiting for it in MPI_Init.
	 */
	if (parsed == 0 && launched && in_job && o.virtual_ranks) {
		rlb_err_set(&arg_err, RLB_EUNSUPPORTED, "--virtual-ranks runs without mpirun");
		parsed = EXIT_FAIL;
	}
	/* only rank 0 writes -o: another node may lack its directory */
	if (parsed == 0 && lrank <= 0) {
		const struct cmd_path in[] = {
			{ "the trace", o.trace, 0 }, { "the plan", o.plan, 0 },
			{ "the config", o.cfg.path, 0 },
		};
		const struct cmd_path out[] = { { "-o", o.out, 0 } };

		parsed = cmd_check_outputs(NAME, usage, in, 3, out, 1, 0);
	}
	if (parsed && !launched) {
		cmd_config_release(&o.cfg);
		return parsed < 0 ? EXIT_OK : parsed;
	}
	rlb_exec_opts_defaults(&eo);
	eo.seed = o.seed;
	eo.first_step = o.step_lo;
	eo.last_step = o.step_hi;
	eo.verify = o.verify;
	eo.backend = o.backend_kind;
	/*
	 * Open -o now, so that a path that cannot be written fails at once,
	 * but remove METRICS.tmp until the steps are done (report opens it
	 * again): when another rank fails, Open MPI may end this one with
	 * SIGKILL, after which nothing would remove it.
	 */
	if (parsed == 0 && lrank <= 0 && o.out) {
		if (rlb_atomic_open(&out_file, o.out, &err) != 0) {
			cmd_error(NAME, &err);
			if (!launched) {
				cmd_config_release(&o.cfg);
				return EXIT_FAIL;
			}
			parsed = EXIT_FAIL;
		}
		if (out_file.tmp_path)
			rlb_atomic_abort(&out_file);
	}
	eo.verify_tol = verify_tol(o.backend);
	eo.verify_outliers = verify_outliers(o.backend);
	/*
	 * The environment may differ from rank to rank: its errors wait for
	 * the ranks' first agreement (load_config), so that every rank hears
	 * of them.
	 */
	env = getenv("RELIBRA_FAULT");
	if (env && *env && parse_fault(env, &eo))
		rlb_err_set(&env_err, RLB_EINVAL,
			    "RELIBRA_FAULT: expected rank:R:step:S[:hang|:hang-end], not '%s'", env);
	if (eo.backend == RLB_BACKEND_CUDA && !env_err.code)
		cmd_gemm_mode(&eo.gemm, &env_err);
	/*
	 * --virtual-ranks in a job of one rank: the ranks are virtual, and
	 * there are no others whose arguments to agree on (agree_args is for
	 * an MPI world of one rank per process)
	 */
	use_mpi = launched && (parsed || !o.virtual_ranks);
	if (use_mpi)
		ret = rlb_world_mpi_new(&w, &argc, &argv, &err);
	else if (in_job)
		ret = rlb_err_set(&err, RLB_EUNSUPPORTED,
				  "relibra was built without MPI (libopenmpi-dev)");
	else
		ret = rlb_world_virtual_new(&w, o.virtual_ranks ? (uint32_t)o.virtual_ranks : 1,
					    &err);
	if (ret) {
		if (lrank <= 0)
			cmd_error(NAME, &err);
		goto out;
	}
	if (use_mpi && (ret = agree_args(w, parsed, &arg_err)) != 0) {
		status = ret < 0 ? EXIT_OK : ret;
		goto out;
	}
	/* a hang in the one process of virtual ranks would leave none to time out */
	if ((eo.fault == RLB_FAULT_HANG || eo.fault == RLB_FAULT_HANG_END) &&
	    !strcmp(rlb_world_name(w), "virtual")) {
		cmd_errorf(NAME, "RELIBRA_FAULT: a hang needs ranks in processes of their own (mpirun): with virtual ranks it would stop the whole job");
		goto out;
	}
	env = getenv("RELIBRA_TIMEOUT");
	if (env && *env) {
		double t;

		if (rlb_parse_double(env, 0, 1e9, &t, "RELIBRA_TIMEOUT", &err) == 0)
			rlb_world_set_timeout(w, t);
		else if (!env_err.code)
			rlb_err_set(&env_err, err.code, "%s (seconds; 0: no limit)", err.msg);
	}
	if (load_config(&o, &eo, &env_err, w, &cfg) != 0)
		goto out;
	if (rlb_world_first(w) == 0) {
		eo.progress = cmd_progress;
		eo.progress_ctx = NAME;
	}
	ret = rlb_exec_new(&ex, w, &cfg, o.trace, o.plan, &eo, &err);
	if (ret == RLB_EMPI) {
		/*
		 * The transport failed or timed out before the ranks agreed:
		 * one may be stuck (in I/O, say), so MPI_Finalize would wait
		 * for it.  End the job.
		 */
		cmd_errorf(NAME, "rank %u: %s", rlb_world_first(w), err.msg);
		fflush(stderr);
		rlb_world_abort(w, EXIT_FAIL);
		goto out;
	}
	if (ret) {
		if (ret == RLB_EMISMATCH && !strncmp(err.msg, "plan does not match the config", 30)) {
			size_t n = strlen(err.msg);

			snprintf(err.msg + n, sizeof(err.msg) - n, " (plan '%s', config '%s')",
				 o.plan, o.cfg.path);
		}
		if (rlb_world_first(w) == 0) {
			cmd_error(NAME, &err);
			if (rlb_world_size(w) != (uint32_t)cfg.parallel.ep_size)
				fprintf(stderr, "hint: mpirun -np %d relibra train-step ... (one rank per GPU), or --virtual-ranks %d\n",
					cfg.parallel.ep_size, cfg.parallel.ep_size);
		}
		goto out;
	}
	if (rlb_world_first(w) == 0)
		cmd_warn_truncated(NAME, rlb_exec_trace(ex), o.trace, o.step_lo, o.step_hi);
	ret = rlb_exec_run(ex, &v, &failed, &err);
	cmd_progress_done();
	if (ret && failed == RLB_EXEC_AGREED) {
		/* every rank has the error: rank 0 reports it */
		if (rlb_world_first(w) == 0)
			cmd_error(NAME, &err);
		goto out;
	}
	if (ret) {
		cmd_errorf(NAME, "rank %u: %s", failed,
			   err.msg[0] ? err.msg : rlb_strerror(ret));
		fflush(stderr);
		/* The other ranks cannot know: end the job (MPI_Abort). */
		rlb_world_abort(w, EXIT_FAIL);
		goto out;
	}
	status = rlb_world_first(w) == 0 ? report(&o, &cfg, w, ex, &v, &out_file) : EXIT_OK;
	if (status == EXIT_OK && v.done && !v.ok)
		status = v.diverged ? EXIT_FAIL : EXIT_VERIFY;
out:
	rlb_atomic_abort(&out_file);
	rlb_exec_free(ex);
	rlb_world_free(w);
	cmd_config_release(&o.cfg);
	return status;
}
