/*
 * backend.h - the compute and communication backend of train-step: device
 * memory, queues and events, row movement (permute / unpermute), the expert
 * math over batches of rows, combine, Adam, timing, and grouped
 * point-to-point communication over the EP group and inside a node, behind
 * one ops table.  lib/backend_cpu.c is the reference (fp32, lib/expert.h,
 * communication through lib/comm.h); a CUDA + NCCL backend fills the same
 * table.  The executor (lib/exec*.c) sees only this interface.
 */
#ifndef RLB_BACKEND_H
#define RLB_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "expert.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rlb_world;	/* lib/comm.h: the ranks of the job and their transport */

enum rlb_backend_kind {
	RLB_BACKEND_CPU = 0,	/* fp32, lib/expert.h, lib/comm.h transport */
	RLB_BACKEND_CUDA = 1,	/* bf16 compute, fp32 masters, cuBLAS, NCCL */
};

/* "cpu" or "cuda"; NULL for an unknown kind. */
const char *rlb_backend_name(enum rlb_backend_kind kind);
/* RLB_EINVAL naming the backend when NAME is not one. */
int rlb_backend_from_name(const char *name, enum rlb_backend_kind *kind,
			  struct rlb_err *err);
/* 1 when the kind is built into this library. */
int rlb_backend_available(enum rlb_backend_kind kind);

/*
 * How the cuda backend runs a GEMM stage over experts of different row
 * counts (RLB_CUDA_GEMM in relibra(1)).  GROUPED: one
 * cublasGemmGroupedBatchedEx call where cuBLAS takes the types (cuBLAS
 * 13.0 does for bf16 outputs, not for the fp32 weight gradients), else the
 * loop; LOOP: one call per row count, batched over the experts that share
 * it.  On an H200 grouped spends a tenth of the loop's host time and more
 * GPU time (bench/cuda_gemm_bench.c, docs/gpu-results.md).  The choice
 * changes speed, not results; the cpu backend ignores it.
 */
enum rlb_gemm_mode {
	RLB_GEMM_GROUPED = 0,
	RLB_GEMM_LOOP = 1,
};

/* "grouped" or "loop"; RLB_EINVAL naming both when NAME is neither. */
int rlb_gemm_mode_from_name(const char *name, enum rlb_gemm_mode *mode,
			    struct rlb_err *err);

/*
 * Communicators.  Peers are always named by their EP rank (0..ranks-1);
 * the communicator says which network carries the transfer.
 *   EP:   every rank of the EP group (token all-to-all, migration, and
 *         replica copies whose home is on another node).
 *   NODE: the ranks of one node, rank / gpus_per_node (replica weight
 *         copies, replica gradient reduction); a peer outside the caller's
 *         node is RLB_EINVAL.
 * Transfers of different communicators never match each other.
 */
enum rlb_comm_kind {
	RLB_COMM_EP = 0,
	RLB_COMM_NODE = 1,
};
#define RLB_COMM_KINDS 2

struct rlb_queue;	/* an in-order stream of work (CUDA stream) */
struct rlb_event;	/* a point in a queue (CUDA event) */

/*
 * The time between two recorded events.  wall_ns: elapsed wall (device)
 * time.  cpu_ns: on the CPU backend the calling thread's CPU time between
 * the records (meaningful when ranks share cores); on a GPU backend equal
 * to wall_ns (device time between the events).  The executor's critical
 * path uses cpu_ns.
 */
struct rlb_elapsed {
	uint64_t wall_ns;
	uint64_t cpu_ns;
};

/*
 * One expert instance's share of a forward or backward call: ROWS rows of
 * width hidden.  Pointers are device pointers (see "Memory" below).
 *   forward:  w, x in; y, act out (y [rows][hidden], act
 *             [rows][rlb_expert_act_per_row()] saved for the backward
 *             pass).
 *   backward: w, x, act, dy in; dx out [rows][hidden]; the parameter
 *             gradient of the rows is ADDED into g (accumulator format).
 * Jobs of one call must not share y, act, dx or g.
 */
struct rlb_expert_job {
	const void *w;		/* compute weights (weight format) */
	size_t rows;
	const void *x;		/* activations (activation format) */
	void *y;
	void *act;
	const void *dy;
	void *dx;
	void *g;		/* gradient accumulator */
};

struct rlb_backend;

/*
 * The ops table.  Conventions for every op:
 *   - Return 0 or a negative RLB_E* code with err filled (RLB_ENOMEM,
 *     RLB_ECUDA, RLB_ENCCL, RLB_EMPI, RLB_EINVAL for contract violations
 *     the backend can see).  After a failure the backend may only be
 *     aborted or freed.
 *   - Work taking a queue is enqueued in order on that queue and may run
 *     asynchronously; host memory passed to upload/download must stay
 *     valid until the queue is synchronised.  The CPU backend runs every
 *     op synchronously.
 *   - Device pointers: buffers come from alloc; pointer arithmetic inside
 *     a buffer is allowed (a device pointer plus a byte offset).  The
 *     executor never dereferences them.
 *   - Formats: activations (hidden states, expert inputs and outputs,
 *     saved activations) have elements of act_bytes; compute weights
 *     hold rlb_expert_params() elements of weight_bytes; the gradient
 *     accumulator rlb_expert_params() elements of acc_bytes; the optimizer
 *     state opt_bytes per parameter (what Adam keeps besides the compute
 *     weights: moments, and a master copy where the compute weights are
 *     lower precision).  The parameters are lib/expert.h's, in an order
 *     of the backend's own, the same for weights, accumulator and state
 *     (so Adam, accumulation and copies go element by element):
 *     upload_weights and download_weights convert from and to
 *     lib/expert.h's layout (the CPU backend keeps it).  Gates and
 *     scales are fp32, indices uint32.
 */
struct rlb_backend_ops {
	void (*destroy)(struct rlb_backend *be);

	/* ---- memory ---- */
	/* Device buffer of BYTES (> 0), contents undefined. */
	int (*alloc)(struct rlb_backend *be, size_t bytes, void **dev,
		     struct rlb_err *err);
	/* Free a buffer from alloc; NULL is a no-op.  No queue may use it. */
	void (*free)(struct rlb_backend *be, void *dev);
	/* Host to device, device to host, device to device: BYTES bytes. */
	int (*upload)(struct rlb_backend *be, struct rlb_queue *q, void *dev,
		      const void *host, size_t bytes, struct rlb_err *err);
	int (*download)(struct rlb_backend *be, struct rlb_queue *q,
			void *host, const void *dev, size_t bytes,
			struct rlb_err *err);
	int (*copy)(struct rlb_backend *be, struct rlb_queue *q, void *dst,
		    const void *src, size_t bytes, struct rlb_err *err);
	int (*zero)(struct rlb_backend *be, struct rlb_queue *q, void *dev,
		    size_t bytes, struct rlb_err *err);
	/* N fp32 host values to / from N activation elements (converting). */
	int (*upload_act)(struct rlb_backend *be, struct rlb_queue *q,
			  void *dev, const float *host, size_t n,
			  struct rlb_err *err);
	int (*download_act)(struct rlb_backend *be, struct rlb_queue *q,
			    float *host, const void *dev, size_t n,
			    struct rlb_err *err);
	/*
	 * One expert's parameters from fp32 host values (lib/expert.h
	 * layout) into compute weights w and, when opt is non-NULL, a fresh
	 * optimizer state (master copy, zero moments).  download_weights
	 * gives back the fp32 parameters (the master copy when opt is
	 * non-NULL and the backend keeps one, else w).
	 */
	int (*upload_weights)(struct rlb_backend *be, struct rlb_queue *q,
			      const struct rlb_expert_shape *s,
			      const float *host, void *w, void *opt,
			      struct rlb_err *err);
	int (*download_weights)(struct rlb_backend *be, struct rlb_queue *q,
				const struct rlb_expert_shape *s,
				const void *w, const void *opt, float *host,
				struct rlb_err *err);

	/* ---- queues and events ---- */
	int (*queue_new)(struct rlb_backend *be, struct rlb_queue **q,
			 struct rlb_err *err);
	void (*queue_free)(struct rlb_backend *be, struct rlb_queue *q);
	/* Wait until everything enqueued on q has completed. */
	int (*queue_sync)(struct rlb_backend *be, struct rlb_queue *q,
			  struct rlb_err *err);
	int (*event_new)(struct rlb_backend *be, struct rlb_event **ev,
			 struct rlb_err *err);
	void (*event_free)(struct rlb_backend *be, struct rlb_event *ev);
	/* Mark the current end of q. */
	int (*event_record)(struct rlb_backend *be, struct rlb_event *ev,
			    struct rlb_queue *q, struct rlb_err *err);
	/* Work enqueued on q after this waits for ev (cross-queue order). */
	int (*queue_wait)(struct rlb_backend *be, struct rlb_queue *q,
			  struct rlb_event *ev, struct rlb_err *err);
	/* Time from start to end, both recorded and completed (syncs them). */
	int (*elapsed)(struct rlb_backend *be, struct rlb_event *start,
		       struct rlb_event *end, struct rlb_elapsed *out,
		       struct rlb_err *err);

	/* ---- row movement ---- */
	/*
	 * Permute: dst[i] = src[idx[i]] (times scale[i] when scale is
	 * non-NULL) for i < n, rows of WIDTH activation elements.  idx and
	 * scale are device arrays; dst and src must not overlap.
	 */
	int (*gather)(struct rlb_backend *be, struct rlb_queue *q, size_t n,
		      uint32_t width, const uint32_t *idx, const float *scale,
		      const void *src, void *dst, struct rlb_err *err);
	/*
	 * Combine (unpermute + weighted sum): for every token t < ntok,
	 *   inout[t] += sum over k < topk, k ascending, of
	 *               gate[t * topk + k] * y[idx[t * topk + k]]
	 * (gate NULL: weights 1; idx NULL: identity), rows of width hidden.
	 * The fixed k order makes a token's sum independent of where its
	 * rows were computed.
	 */
	int (*combine)(struct rlb_backend *be, struct rlb_queue *q,
		       size_t ntok, uint32_t topk, uint32_t hidden,
		       const uint32_t *idx, const float *gate, const void *y,
		       void *inout, struct rlb_err *err);

	/* ---- expert math (lib/expert.h semantics) ---- */
	/*
	 * NJOBS jobs of one expert shape; a backend may group them.  The
	 * cuda backend runs gated shapes only: an ungated one is
	 * RLB_EUNSUPPORTED here and in upload_weights / download_weights.
	 */
	int (*expert_forward)(struct rlb_backend *be, struct rlb_queue *q,
			      const struct rlb_expert_shape *s,
			      const struct rlb_expert_job *jobs, size_t njobs,
			      struct rlb_err *err);
	/*
	 * The weight gradient of each row is added into job->g.  A backend
	 * whose accumulator is exact enough that the order of rows and of
	 * acc_add calls changes nothing beyond the final rounding (the CPU
	 * backend accumulates every row's product in double) makes every
	 * plan give the static plan's result.
	 */
	int (*expert_backward)(struct rlb_backend *be, struct rlb_queue *q,
			       const struct rlb_expert_shape *s,
			       const struct rlb_expert_job *jobs, size_t njobs,
			       struct rlb_err *err);
	/* dst += src over N accumulator elements (replica gradient reduction). */
	int (*acc_add)(struct rlb_backend *be, struct rlb_queue *q, size_t n,
		       void *dst, const void *src, struct rlb_err *err);
	/*
	 * One Adam step over N parameters: gradient = scale * g (accumulator),
	 * updating opt and the compute weights w.  g is left unchanged.
	 */
	int (*adam)(struct rlb_backend *be, struct rlb_queue *q,
		    const struct rlb_adam *a, size_t n, float scale, void *w,
		    const void *g, void *opt, struct rlb_err *err);

	/* ---- grouped point-to-point communication ---- */
	/*
	 * group_start, any number of send / recv, group_end(q): the transfers
	 * of a group are matched per (communicator, peer pair) in posting
	 * order, like NCCL's ncclGroupStart / ncclSend / ncclRecv /
	 * ncclGroupEnd.  group_end enqueues them on q; the data is in place
	 * once q is synchronised (queue_sync, or an event recorded on q after
	 * group_end).  Send buffers must not change before then.  With
	 * several ranks driven by one process (virtual ranks), every rank
	 * posts its group before any rank synchronises.  Zero-byte transfers
	 * are skipped (not matched).  A peer equal to the caller is allowed
	 * (a local copy).
	 */
	int (*group_start)(struct rlb_backend *be, enum rlb_comm_kind c,
			   struct rlb_err *err);
	int (*send)(struct rlb_backend *be, enum rlb_comm_kind c,
		    uint32_t peer, const void *dev, size_t bytes,
		    struct rlb_err *err);
	int (*recv)(struct rlb_backend *be, enum rlb_comm_kind c,
		    uint32_t peer, void *dev, size_t bytes,
		    struct rlb_err *err);
	int (*group_end)(struct rlb_backend *be, enum rlb_comm_kind c,
			 struct rlb_queue *q, struct rlb_err *err);

	/*
	 * Stop in-flight communication so that no call of this rank can
	 * block any more (ncclCommAbort); the job is then ended through the
	 * transport (rlb_world_abort).  Safe after any failure.
	 */
	void (*abort)(struct rlb_backend *be);

	/*
	 * Optional (NULL: work starts as it is enqueued).  queue_hold: work
	 * enqueued on q from now on starts only at queue_release, so that
	 * events around it time the work, not its enqueueing.  The executor
	 * holds each virtual rank's expert work: the ranks share one device
	 * and run one at a time, and the GPU would otherwise wait on the host
	 * inside the timed span.  A hold not released within 0.1 s lapses
	 * (no hang; the host was kept from enqueueing, by a call that waited
	 * for the device), and the queue holds no more: queue_hold then
	 * returns 1, and events time the enqueueing too.
	 */
	int (*queue_hold)(struct rlb_backend *be, struct rlb_queue *q,
			  struct rlb_err *err);
	int (*queue_release)(struct rlb_backend *be, struct rlb_queue *q,
			     struct rlb_err *err);
};

/*
 * One rank's backend.  Created per EP rank (a process driving virtual
 * ranks creates one per rank, all sharing one device).
 */
struct rlb_backend {
	const struct rlb_backend_ops *ops;
	enum rlb_backend_kind kind;
	uint32_t rank;			/* EP rank */
	uint32_t ranks;			/* EP size */
	uint32_t gpus_per_node;		/* ranks per node (communicator NODE) */
	size_t act_bytes;		/* activation element: 4 cpu, 2 cuda (bf16) */
	size_t weight_bytes;		/* compute weight element: 4 cpu, 2 cuda */
	size_t acc_bytes;		/* gradient accumulator element: 8 cpu (double), 4 cuda */
	size_t opt_bytes;		/* optimizer state per parameter: 8 cpu (m, v), 12 cuda (master, m, v) */
	void *priv;
};

/* What a backend is created for. */
struct rlb_backend_init {
	uint32_t rank;			/* EP rank */
	uint32_t ranks;			/* EP size */
	uint32_t gpus_per_node;
	uint32_t local_index;		/* index among the ranks of this process */
	int device;			/* GPU ordinal (GPU backends); -1: by local rank */
	struct rlb_world *world;	/* transport of the job (not owned) */
	enum rlb_gemm_mode gemm;	/* cuda: the GEMM strategy (0: grouped) */
};

/*
 * Create rank init->rank's backend of KIND.  Errors: RLB_EUNSUPPORTED
 * (kind not built in), RLB_EINVAL, RLB_ENOMEM, backend-specific codes.
 * Free with rlb_backend_free (NULL is a no-op).
 */
int rlb_backend_new(enum rlb_backend_kind kind,
		    const struct rlb_backend_init *init,
		    struct rlb_backend **out, struct rlb_err *err);
void rlb_backend_free(struct rlb_backend *be);

/* The CPU backend (lib/backend_cpu.c). */
int rlb_backend_cpu_new(const struct rlb_backend_init *init,
			struct rlb_backend **out, struct rlb_err *err);

/*
 * The CUDA backend, present when RLB_BUILD_CUDA (lib/backend_cuda.cu and
 * lib/cuda_expert.cu).
 */
int rlb_backend_cuda_new(const struct rlb_backend_init *init,
			 struct rlb_backend **out, struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
