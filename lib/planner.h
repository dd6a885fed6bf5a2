/*
 * planner.h - plan and simulate a trace under one or more policies in one
 * pass per step: the loop shared by `relibra plan` and `relibra report`.
 * Every run also simulates the static layout, so each result carries its
 * static and ideal baselines.
 */
#ifndef RLB_PLANNER_H
#define RLB_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "balance.h"
#include "capture.h"
#include "config.h"
#include "err.h"
#include "plan_io.h"
#include "sim.h"
#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One planned step of a policy, with the baselines' times for it. */
struct rlb_planner_step {
	struct rlb_sim_step sim;	/* the policy's (rlb_sim_add_step) */
	double static_s;		/* the static layout's step time */
	double ideal_s;			/* the uniform-traffic ideal's (configured schedule) */
};

/* One policy to plan: options in, summary out. */
struct rlb_planner_policy {
	struct rlb_balance_opts opts;
	struct rlb_plan_writer *writer;	/* optional: receives every step plan */
	/*
	 * Optional: called with every step plan before it is released
	 * (e.g. to export it); a negative return stops the run.
	 */
	int (*on_step)(void *ctx, const struct rlb_step_plan *p,
		       struct rlb_err *err);
	void *on_step_ctx;
	struct rlb_sim_summary summary;	/* filled by rlb_planner_run */
	/*
	 * Every planned step, in order: set by rlb_planner_run (malloc'd,
	 * NULL after a failure), freed by rlb_planner_policy_release.
	 */
	struct rlb_planner_step *steps;
	size_t nsteps;
};

/* Free what rlb_planner_run filled in p (the steps); p stays reusable. */
void rlb_planner_policy_release(struct rlb_planner_policy *p);

struct rlb_planner_opts {
	enum rlb_pack pack;		/* micro-batch packing */
	/* optional: the trainer's schedule, used instead of pack; plans carry it */
	const struct rlb_schedule_file *schedule_file;
	uint32_t first_step;		/* steps first_step..last_step, inclusive */
	uint32_t last_step;
	rlb_progress_fn progress;	/* optional */
	void *progress_ctx;
	/*
	 * Threads that count each step's traffic (lib/pool.h) and as many
	 * that read the trace ahead (rlb_trace_reader_set_threads, off
	 * again on return): 0 one per online CPU, 1 the caller alone.
	 * Results do not depend on it.
	 */
	unsigned threads;
	/*
	 * 1: the planners' wall time counts as 0 (each plan's planner_ns,
	 * so also the planning term of the step time), for the same plans
	 * and results on every run.
	 */
	int no_timing;
};

/*
 * Plan the selected steps of the trace with every policy of POL[0..n),
 * simulate each, and fill their summaries; STATIC_SUM (may be NULL)
 * receives the static layout's.  Each step's loads are counted once and
 * its token-level traffic of every plan is gathered in one more pass.
 * Errors: those of the reader, schedule, balancers and simulator;
 * RLB_ENOTFOUND when no step of the trace is in the range.
 */
int rlb_planner_run(struct rlb_trace_reader *r, const struct rlb_config *cfg,
		    const struct rlb_planner_opts *o,
		    struct rlb_planner_policy *pol, size_t n,
		    struct rlb_sim_summary *static_sum, struct rlb_err *err);

/* Where the result came from, for the summary JSON. */
struct rlb_result_source {
	const char *config_path;
	const char *trace_path;
	const struct rlb_trace_header *trace;
	int trace_truncated;		/* 1: the trace's writer did not finish */
	const char *label;		/* row name, e.g. "relibra --no-reorder" (NULL: the policy) */
	int no_timing;			/* 1: omit wall-clock fields */
	const char *schedule_path;	/* the trainer's schedule file, if any */
};

#define RLB_RESULT_SCHEMA "relibra.result/1"

/*
 * A result's row name from the options that shaped the plan: the policy,
 * then relibra's options in effect, as the plan options that ask for them:
 * --no-reorder, --no-replicate, --colocate (which needs the reordering)
 * and --data-control, e.g. "relibra --no-reorder".  Plans and train-step
 * results of one plan get the same label, so reports pair them.
 * Returns buf.
 */
const char *rlb_result_label(const struct rlb_balance_opts *o, char *buf,
			     size_t size);

/*
 * Set o's policy and relibra's options from SPEC, NAME[+OPTION]...: NAME
 * a policy (rlb_policy_from_name); OPTION no-reorder, no-replicate,
 * colocate, no-colocate or data-control, the relibra plan options of those names, for
 * relibra only (e.g. "relibra+no-reorder").  o comes from
 * rlb_balance_opts_from_config; the other fields stay.  Specs that give
 * the same plan give the same rlb_result_label.  Errors: RLB_EINVAL
 * naming the unknown part, or an option that repeats or contradicts an
 * earlier one (colocate+no-colocate).
 */
int rlb_policy_spec_apply(const char *spec, struct rlb_balance_opts *o,
			  struct rlb_err *err);

/*
 * The summary of one policy as a JSON object (schema RLB_RESULT_SCHEMA,
 * documented in relibra(1), RESULT FILES): what produced it, on which
 * config and trace, the policy's figures, its step-time breakdown, and its
 * static and ideal baselines.  Wall-clock fields live under "timing",
 * omitted when src->no_timing.  NULL on allocation failure.
 */
struct json_t *rlb_result_json(const struct rlb_config *cfg,
			       const struct rlb_planner_opts *o,
			       const struct rlb_planner_policy *p,
			       const struct rlb_sim_summary *static_sum,
			       const struct rlb_result_source *src);

#ifdef __cplusplus
}
#endif

#endif
