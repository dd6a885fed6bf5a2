/*
 * backend_cuda.h - what the two files of the CUDA backend share: its state
 * and the helpers both use.  lib/backend_cuda.cu has memory, queues,
 * communication and creation; lib/cuda_expert.cu cuBLAS, the expert GEMMs
 * and the compute kernels.  Only those two include it (CUDA, cuBLAS and
 * NCCL headers stay in the backend's files).
 */
#ifndef RLB_BACKEND_CUDA_H
#define RLB_BACKEND_CUDA_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "backend.h"
#include "comm.h"
#include "cuda_plan.h"
#include "util.h"

typedef __nv_bfloat16 bf16;

struct rlb_queue {
	cudaStream_t s;
	void *scratch;			/* stream-ordered scratch (cudaMallocAsync) */
	size_t scratch_cap;
	unsigned *gate;			/* queue_hold's [release, lapse] (mapped host memory) */
	unsigned *d_gate;		/* the same as the device sees it */
	unsigned seq;			/* the last hold's number */
	int hold_off;			/* a hold lapsed: no more holds */
};

struct rlb_event {
	cudaEvent_t e;
	int recorded;
};

struct xfer {
	int send;
	uint32_t peer;			/* rank in the communicator */
	void *buf;
	size_t bytes;
};

struct cuda_priv {
	int device;
	int virt;			/* virtual ranks: device copies, no NCCL */
	struct rlb_world *world;
	uint32_t local;
	struct rlb_cuda_node node;
	cublasHandle_t blas;
	ncclComm_t comm[RLB_COMM_KINDS];
	int in_group[RLB_COMM_KINDS];
	struct xfer *x[RLB_COMM_KINDS];
	size_t nx[RLB_COMM_KINDS], capx[RLB_COMM_KINDS];
	int owns_copy;			/* set the world's copy function */
	int gemm_grouped;		/* rlb_backend_init's gemm: 1 grouped, 0 loop */
	cudaStream_t blas_stream;	/* the stream the handle was last given */
	void *blas_ws;			/* cuBLAS's workspace (BLAS_WS_BYTES), ours */
	int grouped_bad[2];		/* grouped GEMM refused bf16 / fp32 output */
};

extern "C" {
/* The error of CUDA call WHAT (the one place that wraps CUDA's codes). */
int rlb_cuda_fail(struct rlb_err *err, cudaError_t e, const char *what);

/* lib/cuda_expert.cu: cuBLAS (loaded once) with its handle and workspace. */
int rlb_cuda_blas_init(struct cuda_priv *p, struct rlb_err *err);
void rlb_cuda_blas_release(struct cuda_priv *p);

/* lib/cuda_expert.cu: the backend operations of lib/backend.h they name. */
int rlb_cuda_gather(struct rlb_backend *be, struct rlb_queue *q, size_t n,
		    uint32_t width, const uint32_t *idx, const float *scale,
		    const void *src, void *dst, struct rlb_err *err);
int rlb_cuda_combine(struct rlb_backend *be, struct rlb_queue *q,
		     size_t ntok, uint32_t topk, uint32_t hidden,
		     const uint32_t *idx, const float *gate, const void *y,
		     void *inout, struct rlb_err *err);
int rlb_cuda_expert_forward(struct rlb_backend *be, struct rlb_queue *q,
			    const struct rlb_expert_shape *s,
			    const struct rlb_expert_job *jobs, size_t njobs,
			    struct rlb_err *err);
int rlb_cuda_expert_backward(struct rlb_backend *be, struct rlb_queue *q,
			     const struct rlb_expert_shape *s,
			     const struct rlb_expert_job *jobs, size_t njobs,
			     struct rlb_err *err);
int rlb_cuda_acc_add(struct rlb_backend *be, struct rlb_queue *q, size_t n,
		     void *dst, const void *src, struct rlb_err *err);
int rlb_cuda_adam(struct rlb_backend *be, struct rlb_queue *q,
		  const struct rlb_adam *a, size_t n, float scale, void *w,
		  const void *g, void *opt, struct rlb_err *err);
}

/*
 * The kernels are SwiGLU's alone (k_gu_layout, the fused gate-up GEMM):
 * an ungated shape is refused, not run as a gated one.  The executor
 * refuses such a model before the backend sees it; this keeps any other
 * caller from getting wrong math.
 */
static inline int rlb_cuda_gated_only(const struct rlb_expert_shape *s,
				      struct rlb_err *err)
{
	if (!s->ungated)
		return 0;
	return rlb_err_set(err, RLB_EUNSUPPORTED,
			   "the cuda backend runs gated (SwiGLU) experts only");
}

#define CU(call, what) \
	do { cudaError_t e_ = (call); \
	     if (e_ != cudaSuccess) return rlb_cuda_fail(err, e_, what); } while (0)

/* Kernel launches are checked right after they are queued. */
#define LAUNCHED(what) CU(cudaGetLastError(), what)

static inline struct cuda_priv *priv(struct rlb_backend *be)
{
	return (struct cuda_priv *)be->priv;
}

static inline unsigned blocks_for(size_t n, unsigned threads)
{
	size_t b = (n + threads - 1) / threads;

	return b == 0 ? 1 : b > 8192 ? 8192 : (unsigned)b;
}

/* Stream-ordered scratch of at least BYTES on q. */
static inline int scratch(struct rlb_queue *q, size_t bytes, void **out,
		   struct rlb_err *err)
{
	if (bytes > q->scratch_cap) {
		size_t cap = bytes + bytes / 4;

		if (q->scratch)
			CU(cudaFreeAsync(q->scratch, q->s), "cudaFreeAsync");
		q->scratch = NULL;
		q->scratch_cap = 0;
		CU(cudaMallocAsync(&q->scratch, cap, q->s), "cudaMallocAsync");
		q->scratch_cap = cap;
	}
	*out = q->scratch;
	return 0;
}

static inline size_t align_up(size_t n)
{
	return (n + 255) & ~(size_t)255;
}

#endif
