/*
 * comm.h - the transport of train-step: the ranks of one job as seen by one
 * process, grouped point-to-point transfers of host memory per communicator
 * (EP group, node), the control collectives the executor needs (agreeing on
 * an error, reductions, gathering measurements to rank 0) and abort.  Two
 * transports: virtual (N ranks in one process, transfers are memory copies;
 * lib/comm_virtual.c) and MPI (one rank per process; lib/comm_mpi.c, the
 * only file that includes mpi.h).
 */
#ifndef RLB_COMM_H
#define RLB_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rlb_world;

/* 1 when the MPI transport is built in. */
int rlb_world_mpi_available(void);

/*
 * N ranks driven by this process (N >= 1, at most 65536).  Errors:
 * RLB_EINVAL, RLB_ENOMEM.  Free with rlb_world_free.
 */
int rlb_world_virtual_new(struct rlb_world **out, uint32_t ranks,
			  struct rlb_err *err);

/*
 * Initialise MPI (MPI_Init) and wrap MPI_COMM_WORLD: one rank in this
 * process.  MPI errors are returned, not fatal (MPI_ERRORS_RETURN).
 * Errors: RLB_EUNSUPPORTED (built without MPI), RLB_EMPI, RLB_ENOMEM.
 * rlb_world_free finalises MPI.
 */
int rlb_world_mpi_new(struct rlb_world **out, int *argc, char ***argv,
		      struct rlb_err *err);

/* Finalise and free; NULL is a no-op. */
void rlb_world_free(struct rlb_world *w);

/* "virtual" or "mpi". */
const char *rlb_world_name(const struct rlb_world *w);
/* Ranks in the job. */
uint32_t rlb_world_size(const struct rlb_world *w);
/* Ranks driven by this process; they are consecutive from rlb_world_first. */
uint32_t rlb_world_local(const struct rlb_world *w);
uint32_t rlb_world_first(const struct rlb_world *w);
/*
 * Processes of the job on this machine, sharing its memory: 1 for the
 * virtual transport, MPI_COMM_TYPE_SHARED's size for MPI.
 */
uint32_t rlb_world_host_procs(const struct rlb_world *w);

/*
 * Split the job into nodes of GPUS_PER_NODE consecutive ranks (the
 * communicator RLB_COMM_NODE).  Collective: every process calls it with
 * the same value.  RLB_EINVAL when it does not divide the size.
 */
int rlb_world_set_node_size(struct rlb_world *w, uint32_t gpus_per_node,
			    struct rlb_err *err);

/*
 * Longest wait, in seconds, for a transfer or collective before it fails
 * with RLB_EMPI ("timed out"); 0 waits forever.  Default 300.  A timed
 * out transfer names the ranks it was waiting for; so does a timed out
 * collective on rank 0 (the other ranks wait a few seconds longer for rank
 * 0's answer).
 */
void rlb_world_set_timeout(struct rlb_world *w, double seconds);

/*
 * Grouped point-to-point transfers for local rank LOCAL (index among the
 * process's ranks) on communicator C, with the semantics of backend.h:
 * matched per (communicator, sender, receiver) in posting order; zero
 * bytes are skipped; a send and its receive must have the same size
 * (RLB_EINVAL otherwise).  The virtual transport copies a transfer as soon
 * as both sides are posted, and checks, when the last local rank ends its
 * group, that nothing is left unmatched (RLB_EINVAL naming the pair).  The
 * MPI transport waits in group_end (bounded by the timeout).
 */
int rlb_world_group_start(struct rlb_world *w, uint32_t local,
			  enum rlb_comm_kind c, struct rlb_err *err);
int rlb_world_send(struct rlb_world *w, uint32_t local, enum rlb_comm_kind c,
		   uint32_t peer, const void *buf, size_t bytes,
		   struct rlb_err *err);
int rlb_world_recv(struct rlb_world *w, uint32_t local, enum rlb_comm_kind c,
		   uint32_t peer, void *buf, size_t bytes,
		   struct rlb_err *err);
int rlb_world_group_end(struct rlb_world *w, uint32_t local,
			enum rlb_comm_kind c, struct rlb_err *err);

/*
 * The virtual transport's copy function (default memcpy), so that a GPU
 * backend driving virtual ranks on one device can move device memory.
 * Ignored by the MPI transport.
 */
typedef int (*rlb_world_copy_fn)(void *ctx, void *dst, const void *src,
				 size_t bytes, struct rlb_err *err);
void rlb_world_set_copy(struct rlb_world *w, rlb_world_copy_fn fn, void *ctx);

enum rlb_reduce {
	RLB_REDUCE_SUM = 0,
	RLB_REDUCE_MAX = 1,
	RLB_REDUCE_MIN = 2,
};

/*
 * Collectives.  Every process calls them in the same order; the arrays
 * hold one entry per local rank (local-major).
 *
 * allreduce: v[local][n] in; out, every local rank's row holds the
 * reduction over all ranks (sums in rank order, so results are the same
 * for every transport).
 */
int rlb_world_allreduce(struct rlb_world *w, double *v, size_t n,
			enum rlb_reduce op, struct rlb_err *err);

/*
 * gather: send[local][bytes] in; on the process that drives rank 0,
 * recv[rank][bytes] out for every rank of the job (recv is ignored
 * elsewhere and may be NULL there).
 */
int rlb_world_gather(struct rlb_world *w, const void *send, size_t bytes,
		     void *recv, struct rlb_err *err);

/*
 * Agree on failure: errs[local] in (code 0: that rank is fine).  Returns 0
 * when no rank of the job failed; else, on every process, the code of the
 * lowest failing rank, with its message in *out and its rank in *rank
 * (either may be NULL).  A transport failure is returned as itself.
 */
int rlb_world_agree(struct rlb_world *w, const struct rlb_err *errs,
		    struct rlb_err *out, uint32_t *rank, struct rlb_err *err);

/* Wait until every rank arrives. */
int rlb_world_barrier(struct rlb_world *w, struct rlb_err *err);

/*
 * End the whole job after a failure that the other ranks cannot learn of
 * (MPI_Abort with STATUS: every process exits, this one once it has
 * removed its open PATH.tmp files, rlb_atomic_remove_all).  The virtual
 * transport returns (the caller returns the error).
 */
void rlb_world_abort(struct rlb_world *w, int status);

#ifdef __cplusplus
}
#endif

#endif
