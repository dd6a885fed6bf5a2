/*
 * cuda_plan.h - the decisions of the CUDA backend that need no GPU, in
 * plain C so that the CPU tests cover them: which GPU a rank uses, the
 * NCCL communicators' shapes, the NCCL unique id carried through the
 * transport's allreduce as doubles, and the grouping of expert GEMMs into
 * batched calls.  Used by lib/backend_cuda.cu, lib/cuda_expert.cu and
 * lib/cuda_calibrate.cu.
 */
#ifndef RLB_CUDA_PLAN_H
#define RLB_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * CUDA devices this process sees: 0 when the CUDA backend is not built in,
 * no driver or no device is present (lib/backend_cuda.cu when built).
 */
int rlb_cuda_device_count(void);

/*
 * The GPU of a rank: REQUESTED when >= 0 (it must be < ndev); else, with
 * virtual ranks (all ranks in one process), device 0; else, when the
 * process sees one device, that one (the launcher gave each rank its own
 * GPU); else the rank's index inside its node (rank % gpus_per_node:
 * consecutive ranks fill a node, as mpirun places them by default), which
 * must be a device the process sees: NCCL refuses two ranks on one GPU.
 * Errors: RLB_EUNSUPPORTED (ndev 0: "no CUDA device"), RLB_EINVAL.
 */
int rlb_cuda_pick_device(uint32_t rank, uint32_t gpus_per_node, int ndev,
			 int virtual_ranks, int requested, int *device,
			 struct rlb_err *err);

/* The NCCL communicator of a node: its index, the rank's index in it, its size. */
struct rlb_cuda_node {
	uint32_t node;
	uint32_t index;
	uint32_t size;
};
/* RLB_EINVAL when gpus_per_node is 0 or does not divide ranks, or rank >= ranks. */
int rlb_cuda_node_of(uint32_t rank, uint32_t ranks, uint32_t gpus_per_node,
		     struct rlb_cuda_node *out, struct rlb_err *err);

/*
 * Opaque bytes (an NCCL unique id) as doubles 0..255, one per byte, so
 * that an allreduce sum in which only one rank contributes carries them
 * exactly.  rlb_cuda_doubles_to_bytes checks every value: RLB_ECORRUPT
 * when one is not an integer in 0..255 (two ranks contributed).
 */
void rlb_cuda_bytes_to_doubles(const void *bytes, size_t n, double *out);
int rlb_cuda_doubles_to_bytes(const double *v, size_t n, void *bytes,
			      struct rlb_err *err);

/*
 * Expert GEMMs in batches: the jobs sorted by rows (ascending, then index;
 * jobs of zero rows left out) into order[n], then cut into runs of at
 * most max_batch jobs and at most max_rows rows together (a job of more
 * rows goes alone), so one call per GEMM stage covers a batch and its
 * scratch stays bounded.  Inside a batch, the jobs of equal rows (adjacent
 * in order[]) share one shape.  batches[] out (at most n), *nbatches out.
 * Errors: RLB_EINVAL (max_batch or max_rows 0), RLB_ENOMEM.
 */
struct rlb_gemm_batch {
	size_t first;		/* first entry in order[] */
	size_t count;		/* jobs, 1..max_batch */
	size_t rows;		/* rows of the batch's jobs together */
};
int rlb_gemm_batches(const size_t *rows, size_t n, size_t max_batch,
		     size_t max_rows, size_t *order, struct rlb_gemm_batch *batches,
		     size_t *nbatches, struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
