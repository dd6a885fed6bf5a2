/*
 * exec.h - the train-step executor: runs MoE training steps that apply a
 * plan (.rlp) on EP ranks through a backend (lib/backend.h) and a transport
 * (lib/comm.h): home experts with Adam state and replica slots per rank,
 * micro-batches from the shared schedule, routing replayed from the trace,
 * dispatch by the plan's quotas and split rule, forward, loss, backward,
 * replica gradient reduction, Adam, migration between steps, measurements,
 * and the comparison with the static plan (--verify).
 */
#ifndef RLB_EXEC_H
#define RLB_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "capture.h"
#include "comm.h"
#include "config.h"
#include "err.h"
#include "expert.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the experts' initial weights are made. */
enum rlb_exec_init {
	RLB_EXEC_INIT_RANDOM = 0,	/* rlb_expert_init(seed, layer, expert) */
	/*
	 * rlb_expert_init plus (layer * experts + expert + 1) / 1024 on every
	 * parameter: each expert's weights say which expert they are, so a
	 * copy that lands in the wrong slot changes the result.
	 */
	RLB_EXEC_INIT_ID = 1,
};

struct rlb_exec_opts {
	enum rlb_backend_kind backend;
	uint64_t seed;			/* hidden states, default gates, weights */
	uint32_t first_step;		/* the trace's steps in [first, last] */
	uint32_t last_step;
	int verify;			/* also run the static plan and compare */
	double verify_tol;		/* max relative difference allowed (1e-5) */
	/*
	 * Fraction of a tensor's elements that may exceed verify_tol, each by
	 * at most Adam's sign flip (rlb_exec_tensor_diff); 0 (the default):
	 * none.  For bf16 backends, where rounding can flip the sign of a
	 * near-zero gradient.
	 */
	double verify_outliers;
	struct rlb_adam adam;		/* t is set per step */
	enum rlb_exec_init init;
	enum rlb_gemm_mode gemm;	/* the cuda backend's GEMMs (0: grouped) */
	/*
	 * injected fault at the start of step fault_step on rank fault_rank:
	 * RLB_FAULT_FAIL fails there, RLB_FAULT_HANG stops there for good
	 * (for the other ranks' timeout); RLB_FAULT_HANG_END stops at the end
	 * of that step instead, its transfers done, so that the other ranks
	 * time out in the reduction of the step's loss
	 */
	enum {
		RLB_FAULT_NONE, RLB_FAULT_FAIL, RLB_FAULT_HANG, RLB_FAULT_HANG_END
	} fault;
	uint32_t fault_rank;
	uint32_t fault_step;
	rlb_progress_fn progress;	/* optional, called on the process of rank 0 */
	void *progress_ctx;
};

/*
 * Defaults: cpu backend, seed 1, every step, no verify, tolerance 1e-5,
 * Adam lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-8, random init, no fault.
 */
void rlb_exec_opts_defaults(struct rlb_exec_opts *o);

struct rlb_exec;

/*
 * Set up the executor for the ranks this process drives in world W (its
 * size must equal cfg's parallel.ep_size): open the trace and the plan,
 * check that they belong together and with the config (rlb_plan_check_inputs,
 * the packing taken from the plan; rlb_trace_header_check for the dense
 * layers, which the plan does not record), that the selected steps exist in
 * both, that a schedule the plan carries covers every sequence of its
 * step in the trace, and that every step's plan matches the trace's loads
 * (rlb_step_plan_check), then create one backend per local rank.  Every
 * process of the job calls it; the checks are agreed over the transport,
 * so every process returns the same error (the lowest failing rank's
 * message) and no work starts.  Errors: RLB_EMISMATCH, RLB_ENOTFOUND (no
 * step selected, a step missing from the plan), the readers' errors,
 * RLB_EUNSUPPORTED (backend not built in), RLB_ENOMEM.
 * cfg, the paths and o must outlive the executor.
 */
int rlb_exec_new(struct rlb_exec **out, struct rlb_world *w,
		 const struct rlb_config *cfg, const char *trace_path,
		 const char *plan_path, const struct rlb_exec_opts *o,
		 struct rlb_err *err);
/* NULL is a no-op. */
void rlb_exec_free(struct rlb_exec *ex);

/* The executor's trace reader (for its steps and truncation). */
struct rlb_trace_reader *rlb_exec_trace(struct rlb_exec *ex);

/*
 * Agreement of two weight tensors a and b (b the reference) of n elements:
 * max_rel = max |a - b| / max |b| (NaN counts as infinite); outliers = the
 * fraction of elements with |a - b| > tol * max |b|; ok when outliers is 0,
 * or at most max_outliers and no element differs by more than tol * max |b|
 * + slack.  Adam moves an element by about lr per step whatever the size
 * of its gradient, so a gradient whose sign bf16 rounding flips moves it
 * up to 2 lr per step the other way: slack = 2 lr steps admits exactly
 * that, and a wrong gradient, which flips about half the signs, still
 * fails.
 */
struct rlb_tensor_diff {
	double max_rel;
	double outliers;
	int ok;
};

void rlb_exec_tensor_diff(const float *a, const float *b, size_t n, double tol,
			  double slack, double max_outliers,
			  struct rlb_tensor_diff *out);

/* The outcome of --verify. */
struct rlb_exec_verify {
	int done;			/* 1 when the comparison ran */
	int ok;				/* every difference within the tolerance */
	double max_rel_weight;		/* worst tensor's max |a - b| / max |b| */
	double weight_outliers;		/* worst tensor's fraction beyond the tolerance */
	int weights_ok;			/* every tensor agrees (rlb_exec_tensor_diff) */
	char worst[96];			/* e.g. "layer 2 expert 5 w_down" */
	double max_rel_loss;		/* worst step's |a - b| / |b| */
	uint32_t worst_loss_step;
	/*
	 * 1 when the static run's own loss is not finite (from step
	 * diverged_step): no comparison can be made, ok is 0
	 */
	int diverged;
	uint32_t diverged_step;
};

/* rlb_exec_run's *failed_rank when every process has the error */
#define RLB_EXEC_AGREED UINT32_MAX

/*
 * Run the selected steps under the plan (and, with opts.verify, under the
 * static plan, then compare).  A failure on a rank is returned on the
 * process that drives it; the other processes may then block in the
 * transport until its timeout: the caller ends the job with
 * rlb_world_abort after reporting.  *failed_rank (may be NULL) receives
 * the failing EP rank, or RLB_EXEC_AGREED for a step's inputs that
 * failed to read (the readers' errors, RLB_ENOMEM): the ranks agree on
 * those before the step's first transfer, so every process returns the
 * lowest failing rank's error (prefixed "rank R: " but for rank 0) and
 * the job needs no abort.  Errors: RLB_EINVAL for the injected fault
 * ("injected fault at step S"), the backend's and transport's errors,
 * the readers' errors.
 */
int rlb_exec_run(struct rlb_exec *ex, struct rlb_exec_verify *v,
		 uint32_t *failed_rank, struct rlb_err *err);

/*
 * The fp32 parameters (lib/expert.h layout) of (layer, expert) as its
 * current home holds them (after a run: the last step's homes, or the
 * static layout after --verify), into w[rlb_expert_params()].  Errors:
 * RLB_EINVAL (no such expert), RLB_ENOTFOUND (its home is a rank of
 * another process), the backend's.
 */
int rlb_exec_weights(struct rlb_exec *ex, uint32_t layer, uint32_t expert,
		     float *w, struct rlb_err *err);

/* The EP rank that holds (layer, expert) now, -1 when out of range. */
int rlb_exec_home(const struct rlb_exec *ex, uint32_t layer, uint32_t expert);

/* Where the metrics came from (the result JSON's config and trace). */
struct rlb_exec_source {
	const char *config_path;
	const char *trace_path;
	const char *plan_path;
};

/*
 * The measurements of the plan run as a JSON object of schema
 * "relibra.result/1", "kind": "train-step" (relibra(1), RESULT FILES).
 * Available on the process that drives rank 0 after rlb_exec_run
 * succeeded (NULL elsewhere and on allocation failure).  The caller owns
 * the reference.
 */
struct json_t *rlb_exec_metrics_json(const struct rlb_exec *ex,
				     const struct rlb_exec_source *src);

/* Short figures for the command's summary line (rank 0's process). */
struct rlb_exec_summary {
	uint32_t ranks;
	uint64_t steps;
	uint64_t tokens;
	double step_time_s;		/* mean measured wall time per step */
	double tokens_per_s;
	double critical_path_s;		/* per step: sum over (mb, layer) of the slowest rank's expert compute */
	double first_loss, last_loss;
	const char *policy;
	int plan_relay;			/* the plan was made with --relay, which the run does not do */
};
void rlb_exec_summary(const struct rlb_exec *ex, struct rlb_exec_summary *s);

/*
 * Virtual ranks on a backend that holds their expert work while it is
 * enqueued (the cuda backend; lib/backend.h, queue_hold): how many expert
 * spans of this process were timed without a hold, because a hold had
 * lapsed; their time includes the host's enqueueing.  0 otherwise.
 */
uint64_t rlb_exec_unheld_spans(const struct rlb_exec *ex);

#ifdef __cplusplus
}
#endif

#endif
