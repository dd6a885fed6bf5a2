/*
 * backend_cuda.cu - the CUDA + NCCL backend of train-step (lib/backend.h):
 * bf16 weights and activations with fp32 accumulation, fp32 master weights
 * and Adam moments, gate and up interleaved by row (k_gu_layout).  Expert
 * GEMMs through cuBLAS, the experts of a call in batches (lib/cuda_plan.h):
 * per GEMM stage one grouped call where cuBLAS takes the types, else one
 * call per row count over the experts that share it (RLB_CUDA_GEMM).  Own
 * kernels for permute, combine, SwiGLU, gradient accumulation and Adam;
 * queues are CUDA streams and events CUDA events.  Communication: grouped
 * ncclSend / ncclRecv over an EP and a node communicator (MPI ranks), or
 * device copies between the virtual ranks of one process.  Every CUDA,
 * cuBLAS and NCCL call is checked; waits poll for asynchronous NCCL errors
 * and give up (aborting the communicators) after a timeout, so no rank
 * hangs.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "backend.h"
#include "comm.h"
#include "cuda_plan.h"
#include "util.h"

typedef __nv_bfloat16 bf16;

/* Longest wait for a queue, an event or a communicator, in seconds. */
#define WAIT_TIMEOUT_S 300.0
/* Experts of one GEMM call, and rows of one call (bounds scratch). */
#define BATCH_MAX 32
#define BATCH_ROWS 65536

/* ------------------------------------------------------------------ */
/* Error checking: the one place that wraps CUDA, cuBLAS and NCCL codes. */

static int cuda_fail(struct rlb_err *err, cudaError_t e, const char *what)
{
	cudaGetLastError();	/* clear a non-sticky error */
	if (e == cudaErrorMemoryAllocation)
		return rlb_err_set(err, RLB_ENOMEM, "%s: out of GPU memory", what);
	return rlb_err_set(err, RLB_ECUDA, "%s: %s", what, cudaGetErrorString(e));
}

#define CU(call, what) \
	do { cudaError_t e_ = (call); \
	     if (e_ != cudaSuccess) return cuda_fail(err, e_, what); } while (0)

/*
 * cuBLAS is loaded when the first CUDA backend is made, not linked: its
 * load-time initialisers would run in every relibra process, CPU runs too.
 */
typedef cublasStatus_t (*gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
				     int, int, int, const void *, const void *,
				     cudaDataType_t, int, const void *, cudaDataType_t, int,
				     const void *, void *, cudaDataType_t, int,
				     cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*gemm_grouped_ex_fn)(cublasHandle_t, const cublasOperation_t[],
					     const cublasOperation_t[], const int[], const int[],
					     const int[], const void *, const void *const[],
					     cudaDataType_t, const int[], const void *const[],
					     cudaDataType_t, const int[], const void *,
					     void *const[], cudaDataType_t, const int[], int,
					     const int[], cublasComputeType_t);
typedef cublasStatus_t (*gemm_batched_ex_fn)(cublasHandle_t, cublasOperation_t,
					     cublasOperation_t, int, int, int, const void *,
					     const void *const[], cudaDataType_t, int,
					     const void *const[], cudaDataType_t, int,
					     const void *, void *const[], cudaDataType_t, int,
					     int, cublasComputeType_t, cublasGemmAlgo_t);

static struct {
	decltype(&cublasCreate_v2) create;
	decltype(&cublasDestroy_v2) destroy;
	decltype(&cublasSetStream_v2) set_stream;
	decltype(&cublasSetWorkspace_v2) set_workspace;
	decltype(&cublasSetMathMode) set_math_mode;
	gemm_ex_fn gemm;
	gemm_batched_ex_fn gemm_batched;
	gemm_grouped_ex_fn gemm_grouped;	/* cuBLAS 12.5 and later, else NULL */
	decltype(&cublasGetStatusString) status_string;
	char error[256];
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

#define BLAS_STR2(x) #x
#define BLAS_STR(x) BLAS_STR2(x)

static void blas_load(void)
{
	static const char *const names[] = {
		"libcublas.so." BLAS_STR(CUBLAS_VER_MAJOR), "libcublas.so",
	};
	void *h = NULL;
	size_t i;

	for (i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();

		snprintf(blas.error, sizeof(blas.error), "cannot load cuBLAS (%s): %s",
			 names[0], e ? e : "not found");
		return;
	}
	*(void **)&blas.create = dlsym(h, "cublasCreate_v2");
	*(void **)&blas.destroy = dlsym(h, "cublasDestroy_v2");
	*(void **)&blas.set_stream = dlsym(h, "cublasSetStream_v2");
	*(void **)&blas.set_workspace = dlsym(h, "cublasSetWorkspace_v2");
	*(void **)&blas.set_math_mode = dlsym(h, "cublasSetMathMode");
	*(void **)&blas.gemm = dlsym(h, "cublasGemmEx");
	*(void **)&blas.gemm_batched = dlsym(h, "cublasGemmBatchedEx");
	*(void **)&blas.gemm_grouped = dlsym(h, "cublasGemmGroupedBatchedEx");
	*(void **)&blas.status_string = dlsym(h, "cublasGetStatusString");
	if (!blas.create || !blas.destroy || !blas.set_stream || !blas.set_workspace ||
	    !blas.set_math_mode ||
	    !blas.gemm || !blas.gemm_batched || !blas.status_string) {
		snprintf(blas.error, sizeof(blas.error),
			 "cannot load cuBLAS (%s): a function is missing", names[0]);
		blas.create = NULL;
	}
}

static int blas_fail(struct rlb_err *err, cublasStatus_t s, const char *what)
{
	return rlb_err_set(err, RLB_ECUDA, "%s: %s", what, blas.status_string ?
			   blas.status_string(s) : "cuBLAS error");
}

#define CB(call, what) \
	do { cublasStatus_t s_ = (call); \
	     if (s_ != CUBLAS_STATUS_SUCCESS) return blas_fail(err, s_, what); } while (0)

static int nccl_fail(struct rlb_err *err, ncclResult_t r, ncclComm_t c,
		     const char *what)
{
	const char *last = c ? ncclGetLastError(c) : NULL;

	return rlb_err_set(err, RLB_ENCCL, "%s: %s%s%s", what, ncclGetErrorString(r),
			   last && *last ? ": " : "", last && *last ? last : "");
}

/* ncclInProgress is not a failure: non-blocking communicators finish later. */
#define NC(call, comm, what) \
	do { ncclResult_t r_ = (call); \
	     if (r_ != ncclSuccess && r_ != ncclInProgress) \
		     return nccl_fail(err, r_, (comm), what); } while (0)

/* Kernel launches are checked right after they are queued. */
#define LAUNCHED(what) CU(cudaGetLastError(), what)

/* ------------------------------------------------------------------ */
/* State.                                                               */

struct rlb_queue {
	cudaStream_t s;
	void *scratch;			/* stream-ordered scratch (cudaMallocAsync) */
	size_t scratch_cap;
	unsigned *gate;			/* queue_hold's [release, lapse] (mapped host memory) */
	unsigned *d_gate;		/* the same as the device sees it */
	unsigned seq;			/* the last hold's number */
	int hold_off;			/* a hold lapsed: no more holds */
};

/*
 * A hold not released within this time lapses (the host was kept from
 * enqueueing, by a call that waits for the device), and the queue holds
 * no more.
 */
#define HOLD_LAPSE_NS 100000000ull
/*
 * cuBLAS's workspace, given once so that no call allocates one (an
 * allocation can wait for the device, and a bf16-output GEMM split along
 * k needs one): 32 MiB, cuBLAS's own default on Hopper.
 */
#define BLAS_WS_BYTES ((size_t)32 << 20)

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
	int gemm_grouped;		/* RLB_CUDA_GEMM: 1 grouped (default), 0 loop */
	cudaStream_t blas_stream;	/* the stream the handle was last given */
	void *blas_ws;			/* cuBLAS's workspace (BLAS_WS_BYTES), ours */
	int grouped_bad[2];		/* grouped GEMM refused bf16 / fp32 output */
};

static struct cuda_priv *priv(struct rlb_backend *be)
{
	return (struct cuda_priv *)be->priv;
}

static unsigned blocks_for(size_t n, unsigned threads)
{
	size_t b = (n + threads - 1) / threads;

	return b == 0 ? 1 : b > 8192 ? 8192 : (unsigned)b;
}

/* ------------------------------------------------------------------ */
/* Bounded waits.                                                       */

static void nap(unsigned *spins)
{
	struct timespec ts = { 0, 20000 };

	if (++*spins > 200)
		nanosleep(&ts, NULL);
}

static void abort_comms(struct cuda_priv *p)
{
	int c;

	for (c = 0; c < RLB_COMM_KINDS; c++)
		if (p->comm[c]) {
			ncclCommAbort(p->comm[c]);
			p->comm[c] = NULL;
		}
}

/* An asynchronous NCCL error on any communicator ends the wait. */
static int poll_comms(struct cuda_priv *p, struct rlb_err *err)
{
	int c;

	for (c = 0; c < RLB_COMM_KINDS; c++) {
		ncclResult_t r = ncclSuccess;

		if (!p->comm[c])
			continue;
		if (ncclCommGetAsyncError(p->comm[c], &r) != ncclSuccess)
			r = ncclSystemError;
		if (r != ncclSuccess && r != ncclInProgress) {
			int ret = nccl_fail(err, r, p->comm[c], c == RLB_COMM_EP ?
					    "NCCL (EP communicator)" : "NCCL (node communicator)");

			abort_comms(p);
			return ret;
		}
	}
	return 0;
}

static int timed_out(struct cuda_priv *p, uint64_t t0, const char *what,
		     struct rlb_err *err)
{
	if ((rlb_now_ns() - t0) / 1e9 < WAIT_TIMEOUT_S)
		return 0;
	abort_comms(p);
	return rlb_err_set(err, RLB_ENCCL,
			   "%s: timed out after %.0f s (a peer rank may have failed)",
			   what, WAIT_TIMEOUT_S);
}

/* Wait for a stream (ev NULL) or an event to complete. */
static int wait_for(struct cuda_priv *p, cudaStream_t s, cudaEvent_t ev,
		    const char *what, struct rlb_err *err)
{
	uint64_t t0 = rlb_now_ns();
	unsigned spins = 0;
	int ret;

	for (;;) {
		cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(s);

		if (e == cudaSuccess)
			return 0;
		if (e != cudaErrorNotReady)
			return cuda_fail(err, e, what);
		ret = poll_comms(p, err);
		if (ret == 0)
			ret = timed_out(p, t0, what, err);
		if (ret)
			return ret;
		nap(&spins);
	}
}

/*
 * Everything enqueued on q has completed.  With virtual ranks the
 * transfers run on the legacy default stream (ordered against every
 * queue), so it is waited for too.
 */
static int sync_queue(struct cuda_priv *p, struct rlb_queue *q,
		      struct rlb_err *err)
{
	int ret = wait_for(p, q->s, NULL, "waiting for a GPU queue", err);

	if (ret == 0 && p->virt)
		ret = wait_for(p, cudaStreamLegacy, NULL, "waiting for GPU copies", err);
	return ret;
}

/* Wait for a non-blocking communicator's pending operation. */
static int wait_comm(struct cuda_priv *p, ncclComm_t c, const char *what,
		     struct rlb_err *err)
{
	uint64_t t0 = rlb_now_ns();
	unsigned spins = 0;

	for (;;) {
		ncclResult_t r = ncclSuccess;

		NC(ncclCommGetAsyncError(c, &r), c, what);
		if (r == ncclSuccess)
			return 0;
		if (r != ncclInProgress) {
			int ret = nccl_fail(err, r, c, what);

			abort_comms(p);
			return ret;
		}
		if (timed_out(p, t0, what, err))
			return RLB_ENCCL;
		nap(&spins);
	}
}

/* Stream-ordered scratch of at least BYTES on q. */
static int scratch(struct rlb_queue *q, size_t bytes, void **out,
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

static size_t align_up(size_t n)
{
	return (n + 255) & ~(size_t)255;
}

/* ------------------------------------------------------------------ */
/* Kernels.                                                             */

static __global__ void k_f32_to_bf16(size_t n, const float *src, bf16 *dst)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __float2bfloat16(src[i]);
}

static __global__ void k_bf16_to_f32(size_t n, const bf16 *src, float *dst)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __bfloat162float(src[i]);
}

/*
 * The compute weights, optimizer state and gradient accumulator keep gate
 * and up interleaved by row, [H][gate row | up row], where lib/expert.h
 * has [gate [H][F] | up [H][F]] (down follows unchanged): gate and up are
 * then one GEMM of 2 ffn columns forward, for their gradients, and for dx.
 * Fused index i of the N parameters from (TO_FUSED) or to lib/expert.h's.
 */
static __global__ void k_gu_layout(size_t hidden, size_t ffn, size_t n, int to_fused,
				   const float *src, float *dst)
{
	size_t hf = hidden * ffn;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t j = i;

		if (i < 2 * hf) {
			size_t h = i / (2 * ffn), r = i % (2 * ffn);

			j = (r / ffn) * hf + h * ffn + r % ffn;
		}
		if (to_fused)
			dst[i] = src[j];
		else
			dst[j] = src[i];
	}
}

/* Pointer arrays of a batched GEMM, passed by value so no host buffer must live on. */
struct ptr_args {
	const void *p[3 * BATCH_MAX];
	unsigned n;
};

static __global__ void k_ptrs(struct ptr_args a, const void **dst)
{
	unsigned i = threadIdx.x;

	if (i < a.n)
		dst[i] = a.p[i];
}

static __global__ void k_gather(size_t n, uint32_t width, const uint32_t *idx,
			 const float *scale, const bf16 *src, bf16 *dst)
{
	for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
		const bf16 *from = src + (size_t)idx[i] * width;
		bf16 *to = dst + i * width;

		if (scale) {
			float s = scale[i];

			for (uint32_t j = threadIdx.x; j < width; j += blockDim.x)
				to[j] = __float2bfloat16(s * __bfloat162float(from[j]));
		} else {
			for (uint32_t j = threadIdx.x; j < width; j += blockDim.x)
				to[j] = from[j];
		}
	}
}

/* inout[t] += sum over k ascending of gate * y[idx], in fp32, rounded once. */
static __global__ void k_combine(size_t ntok, uint32_t topk, uint32_t hidden,
			  const uint32_t *idx, const float *gate, const bf16 *y,
			  bf16 *inout)
{
	for (size_t t = blockIdx.x; t < ntok; t += gridDim.x)
		for (uint32_t j = threadIdx.x; j < hidden; j += blockDim.x) {
			float acc = __bfloat162float(inout[t * hidden + j]);

			for (uint32_t k = 0; k < topk; k++) {
				size_t r = t * topk + k;
				size_t row = idx ? idx[r] : r;
				float g = gate ? gate[r] : 1.0f;

				acc += g * __bfloat162float(y[row * hidden + j]);
			}
			inout[t * hidden + j] = __float2bfloat16(acc);
		}
}

/* Per-job pointers and rows of a batched elementwise kernel (blockIdx.y is the job). */
struct job_args {
	const void *a[BATCH_MAX];
	const void *b[BATCH_MAX];
	void *c[BATCH_MAX];
	void *d[BATCH_MAX];
	size_t rows[BATCH_MAX];
};

__device__ static float sigmoidf_(float g)
{
	return 1.0f / (1.0f + expf(-g));
}

/*
 * The SwiGLU kernels take a row a block (blockIdx.x strides the rows) and
 * two columns a thread where ffn is even (the rows are then 4-byte
 * aligned: buffers and scratch start aligned, rows are whole pairs).
 */
static __device__ void swiglu_fwd_at(const bf16 *act, bf16 *h, uint32_t ffn, uint32_t j)
{
	float g = __bfloat162float(act[j]), u = __bfloat162float(act[ffn + j]);

	h[j] = __float2bfloat16(g * sigmoidf_(g) * u);
}

/* h = silu(g) * u from act rows [g | u]. */
static __global__ void k_swiglu_fwd(struct job_args a, uint32_t ffn)
{
	size_t rows = a.rows[blockIdx.y];

	for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
		const bf16 *act = (const bf16 *)a.a[blockIdx.y] + r * 2 * ffn;
		bf16 *h = (bf16 *)a.c[blockIdx.y] + r * ffn;

		if (ffn % 2 == 0) {
			const __nv_bfloat162 *g2 = (const __nv_bfloat162 *)act;
			const __nv_bfloat162 *u2 = (const __nv_bfloat162 *)(act + ffn);
			__nv_bfloat162 *h2 = (__nv_bfloat162 *)h;

			for (uint32_t j = threadIdx.x; j < ffn / 2; j += blockDim.x) {
				float2 g = __bfloat1622float2(g2[j]), u = __bfloat1622float2(u2[j]);

				h2[j] = __floats2bfloat162_rn(g.x * sigmoidf_(g.x) * u.x,
							      g.y * sigmoidf_(g.y) * u.y);
			}
		} else {
			for (uint32_t j = threadIdx.x; j < ffn; j += blockDim.x)
				swiglu_fwd_at(act, h, ffn, j);
		}
	}
}

/* dg, du and h of one element from g, u and dh. */
static __device__ void swiglu_bwd_one(float g, float u, float d, float *dg, float *du,
				      float *h)
{
	float sg = sigmoidf_(g), silu = g * sg;

	*dg = d * u * (sg * (1.0f + g * (1.0f - sg)));
	*du = d * silu;
	*h = silu * u;
}

/* From act [g | u] and dh: dgu [dg | du] and h (for dw_down). */
static __global__ void k_swiglu_bwd(struct job_args a, uint32_t ffn)
{
	size_t rows = a.rows[blockIdx.y];

	for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
		const bf16 *act = (const bf16 *)a.a[blockIdx.y] + r * 2 * ffn;
		const bf16 *dh = (const bf16 *)a.b[blockIdx.y] + r * ffn;
		bf16 *dgu = (bf16 *)a.c[blockIdx.y] + r * 2 * ffn;
		bf16 *h = (bf16 *)a.d[blockIdx.y] + r * ffn;

		if (ffn % 2 == 0) {
			const __nv_bfloat162 *g2 = (const __nv_bfloat162 *)act;
			const __nv_bfloat162 *u2 = (const __nv_bfloat162 *)(act + ffn);
			const __nv_bfloat162 *d2 = (const __nv_bfloat162 *)dh;
			__nv_bfloat162 *dg2 = (__nv_bfloat162 *)dgu;
			__nv_bfloat162 *du2 = (__nv_bfloat162 *)(dgu + ffn);
			__nv_bfloat162 *h2 = (__nv_bfloat162 *)h;

			for (uint32_t j = threadIdx.x; j < ffn / 2; j += blockDim.x) {
				float2 g = __bfloat1622float2(g2[j]), u = __bfloat1622float2(u2[j]);
				float2 d = __bfloat1622float2(d2[j]);
				float dgx, dgy, dux, duy, hx, hy;

				swiglu_bwd_one(g.x, u.x, d.x, &dgx, &dux, &hx);
				swiglu_bwd_one(g.y, u.y, d.y, &dgy, &duy, &hy);
				dg2[j] = __floats2bfloat162_rn(dgx, dgy);
				du2[j] = __floats2bfloat162_rn(dux, duy);
				h2[j] = __floats2bfloat162_rn(hx, hy);
			}
		} else {
			for (uint32_t j = threadIdx.x; j < ffn; j += blockDim.x) {
				float dg, du, hv;

				swiglu_bwd_one(__bfloat162float(act[j]), __bfloat162float(act[ffn + j]),
					       __bfloat162float(dh[j]), &dg, &du, &hv);
				dgu[j] = __float2bfloat16(dg);
				dgu[ffn + j] = __float2bfloat16(du);
				h[j] = __float2bfloat16(hv);
			}
		}
	}
}

static __global__ void k_acc_add(size_t n, float *dst, const float *src)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] += src[i];
}

struct adam_args {
	float lr, b1, b2, eps, c1, c2, scale;
};

/* lib/expert.c's rlb_adam_update on the fp32 master, then the bf16 copy. */
static __global__ void k_adam(size_t n, struct adam_args a, const float *g,
		       float *master, float *m, float *v, bf16 *w)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float gi = a.scale * g[i];
		float mi = a.b1 * m[i] + (1.0f - a.b1) * gi;
		float vi = a.b2 * v[i] + (1.0f - a.b2) * gi * gi;
		float wi = master[i] - a.lr * (mi * a.c1) / (sqrtf(vi * a.c2) + a.eps);

		m[i] = mi;
		v[i] = vi;
		master[i] = wi;
		w[i] = __float2bfloat16(wi);
	}
}

/* ------------------------------------------------------------------ */
/* Memory.                                                              */

static void cu_destroy(struct rlb_backend *be);

static int cu_alloc(struct rlb_backend *be, size_t bytes, void **dev,
		    struct rlb_err *err)
{
	(void)be;
	*dev = NULL;
	if (bytes == 0)
		return rlb_err_set(err, RLB_EINVAL, "zero-byte buffer");
	cudaError_t e = cudaMalloc(dev, bytes);
	if (e != cudaSuccess) {
		*dev = NULL;
		cudaGetLastError();
		if (e == cudaErrorMemoryAllocation)
			return rlb_err_set(err, RLB_ENOMEM,
					   "out of GPU memory (%zu bytes)", bytes);
		return cuda_fail(err, e, "cudaMalloc");
	}
	return 0;
}

static void cu_free(struct rlb_backend *be, void *dev)
{
	(void)be;
	if (dev)
		cudaFree(dev);
}

/* Host memory is pageable: the copy is staged before the call returns. */
static int cu_upload(struct rlb_backend *be, struct rlb_queue *q, void *dev,
		     const void *host, size_t bytes, struct rlb_err *err)
{
	(void)be;
	if (bytes)
		CU(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, q->s),
		   "cudaMemcpyAsync (upload)");
	return 0;
}

/* A bounded wait first: a copy to pageable memory blocks the caller. */
static int cu_download(struct rlb_backend *be, struct rlb_queue *q, void *host,
		       const void *dev, size_t bytes, struct rlb_err *err)
{
	int ret;

	if (!bytes)
		return 0;
	ret = sync_queue(priv(be), q, err);
	if (ret)
		return ret;
	CU(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, q->s),
	   "cudaMemcpyAsync (download)");
	return wait_for(priv(be), q->s, NULL, "download", err);
}

static int cu_copy(struct rlb_backend *be, struct rlb_queue *q, void *dst,
		   const void *src, size_t bytes, struct rlb_err *err)
{
	(void)be;
	if (bytes)
		CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, q->s),
		   "cudaMemcpyAsync (copy)");
	return 0;
}

static int cu_zero(struct rlb_backend *be, struct rlb_queue *q, void *dev,
		   size_t bytes, struct rlb_err *err)
{
	(void)be;
	if (bytes)
		CU(cudaMemsetAsync(dev, 0, bytes, q->s), "cudaMemsetAsync");
	return 0;
}

static int to_bf16(struct rlb_queue *q, size_t n, const float *src, void *dst,
		   struct rlb_err *err)
{
	k_f32_to_bf16<<<blocks_for(n, 256), 256, 0, q->s>>>(n, src, (bf16 *)dst);
	LAUNCHED("f32 to bf16 kernel");
	return 0;
}

static int cu_upload_act(struct rlb_backend *be, struct rlb_queue *q,
			 void *dev, const float *host, size_t n,
			 struct rlb_err *err)
{
	void *s = NULL;
	int ret;

	if (!n)
		return 0;
	ret = scratch(q, n * sizeof(float), &s, err);
	if (ret == 0)
		ret = cu_upload(be, q, s, host, n * sizeof(float), err);
	return ret ? ret : to_bf16(q, n, (const float *)s, dev, err);
}

static int cu_download_act(struct rlb_backend *be, struct rlb_queue *q,
			   float *host, const void *dev, size_t n,
			   struct rlb_err *err)
{
	void *s = NULL;
	int ret;

	if (!n)
		return 0;
	ret = scratch(q, n * sizeof(float), &s, err);
	if (ret)
		return ret;
	k_bf16_to_f32<<<blocks_for(n, 256), 256, 0, q->s>>>(n, (const bf16 *)dev, (float *)s);
	LAUNCHED("bf16 to f32 kernel");
	return cu_download(be, q, host, s, n * sizeof(float), err);
}

static int gu_layout(struct rlb_queue *q, const struct rlb_expert_shape *s, size_t n,
		     int to_fused, const float *src, float *dst, struct rlb_err *err)
{
	k_gu_layout<<<blocks_for(n, 256), 256, 0, q->s>>>(s->hidden, s->ffn, n, to_fused, src, dst);
	LAUNCHED("weight layout kernel");
	return 0;
}

/*
 * The optimizer state: master copy, then m, then v (fp32 each), like the
 * compute weights in the fused layout (k_gu_layout).
 */
static int cu_upload_weights(struct rlb_backend *be, struct rlb_queue *q,
			     const struct rlb_expert_shape *s,
			     const float *host, void *w, void *opt,
			     struct rlb_err *err)
{
	size_t n = rlb_expert_params(s);
	float *sc = NULL, *fused;
	int ret = scratch(q, 2 * n * sizeof(float), (void **)&sc, err);

	if (ret == 0)
		ret = cu_upload(be, q, sc, host, n * sizeof(float), err);
	fused = opt ? (float *)opt : sc + n;
	if (ret == 0)
		ret = gu_layout(q, s, n, 1, sc, fused, err);
	if (ret == 0 && opt)
		ret = cu_zero(be, q, (float *)opt + n, 2 * n * sizeof(float), err);
	return ret ? ret : to_bf16(q, n, fused, w, err);
}

static int cu_download_weights(struct rlb_backend *be, struct rlb_queue *q,
			       const struct rlb_expert_shape *s,
			       const void *w, const void *opt, float *host,
			       struct rlb_err *err)
{
	size_t n = rlb_expert_params(s);
	float *sc = NULL;
	const float *fused;
	int ret = scratch(q, 2 * n * sizeof(float), (void **)&sc, err);

	if (ret)
		return ret;
	/* the fp32 master copy when there is one, else the bf16 weights */
	if (opt) {
		fused = (const float *)opt;
	} else {
		k_bf16_to_f32<<<blocks_for(n, 256), 256, 0, q->s>>>(n, (const bf16 *)w, sc + n);
		LAUNCHED("bf16 to f32 kernel");
		fused = sc + n;
	}
	ret = gu_layout(q, s, n, 0, fused, sc, err);
	return ret ? ret : cu_download(be, q, host, sc, n * sizeof(float), err);
}

/* ------------------------------------------------------------------ */
/* Queues and events.                                                   */

static int cu_queue_new(struct rlb_backend *be, struct rlb_queue **out,
			struct rlb_err *err)
{
	struct rlb_queue *q = (struct rlb_queue *)calloc(1, sizeof(*q));

	(void)be;
	*out = NULL;
	if (!q)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	/* Blocking streams: ordered against the legacy stream of virtual copies. */
	cudaError_t e = cudaStreamCreate(&q->s);
	if (e != cudaSuccess) {
		free(q);
		return cuda_fail(err, e, "cudaStreamCreate");
	}
	*out = q;
	return 0;
}

static void cu_queue_free(struct rlb_backend *be, struct rlb_queue *q)
{
	(void)be;
	if (!q)
		return;
	if (q->gate)	/* a hold still waiting lets go */
		__atomic_store_n(&q->gate[0], q->seq, __ATOMIC_RELEASE);
	if (q->scratch)
		cudaFreeAsync(q->scratch, q->s);
	cudaStreamSynchronize(q->s);
	cudaStreamDestroy(q->s);
	if (q->gate)
		cudaFreeHost(q->gate);
	free(q);
}

/*
 * Spin until the host sets gate[0] to seq (wrapping compare), or the hold
 * lapses: then gate[1] = seq tells the host.
 */
static __global__ void k_hold(volatile unsigned *gate, unsigned seq)
{
	unsigned long long t0, t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	while ((int)(gate[0] - seq) < 0) {
		__nanosleep(2000);
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
		if (t - t0 > HOLD_LAPSE_NS) {
			gate[1] = seq;
			__threadfence_system();
			break;
		}
	}
}

static int cu_queue_hold(struct rlb_backend *be, struct rlb_queue *q,
			 struct rlb_err *err)
{
	(void)be;
	if (q->gate && !q->hold_off)
		q->hold_off = __atomic_load_n(&q->gate[1], __ATOMIC_ACQUIRE) != 0;
	if (q->hold_off)
		return 1;
	if (!q->gate) {
		CU(cudaHostAlloc((void **)&q->gate, 2 * sizeof(*q->gate), cudaHostAllocMapped),
		   "cudaHostAlloc");
		q->gate[0] = q->seq;
		q->gate[1] = 0;
		CU(cudaHostGetDevicePointer((void **)&q->d_gate, q->gate, 0),
		   "cudaHostGetDevicePointer");
	}
	if (++q->seq == 0)	/* 0 means "no lapse" */
		q->seq = 1;
	k_hold<<<1, 1, 0, q->s>>>(q->d_gate, q->seq);
	LAUNCHED("hold kernel");
	return 0;
}

static int cu_queue_release(struct rlb_backend *be, struct rlb_queue *q,
			    struct rlb_err *err)
{
	(void)be;
	(void)err;
	if (q->gate)
		__atomic_store_n(&q->gate[0], q->seq, __ATOMIC_RELEASE);
	return 0;
}

static int cu_queue_sync(struct rlb_backend *be, struct rlb_queue *q,
			 struct rlb_err *err)
{
	return sync_queue(priv(be), q, err);
}

static int cu_event_new(struct rlb_backend *be, struct rlb_event **out,
			struct rlb_err *err)
{
	struct rlb_event *ev = (struct rlb_event *)calloc(1, sizeof(*ev));

	(void)be;
	*out = NULL;
	if (!ev)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	cudaError_t e = cudaEventCreate(&ev->e);
	if (e != cudaSuccess) {
		free(ev);
		return cuda_fail(err, e, "cudaEventCreate");
	}
	*out = ev;
	return 0;
}

static void cu_event_free(struct rlb_backend *be, struct rlb_event *ev)
{
	(void)be;
	if (!ev)
		return;
	cudaEventDestroy(ev->e);
	free(ev);
}

static int cu_event_record(struct rlb_backend *be, struct rlb_event *ev,
			   struct rlb_queue *q, struct rlb_err *err)
{
	(void)be;
	CU(cudaEventRecord(ev->e, q->s), "cudaEventRecord");
	ev->recorded = 1;
	return 0;
}

static int cu_queue_wait(struct rlb_backend *be, struct rlb_queue *q,
			 struct rlb_event *ev, struct rlb_err *err)
{
	(void)be;
	if (ev->recorded)
		CU(cudaStreamWaitEvent(q->s, ev->e, 0), "cudaStreamWaitEvent");
	return 0;
}

static int cu_elapsed(struct rlb_backend *be, struct rlb_event *start,
		      struct rlb_event *end, struct rlb_elapsed *out,
		      struct rlb_err *err)
{
	float ms = 0;
	int ret;

	if (!start->recorded || !end->recorded)
		return rlb_err_set(err, RLB_EINVAL, "event not recorded");
	ret = wait_for(priv(be), NULL, end->e, "waiting for a GPU event", err);
	if (ret)
		return ret;
	CU(cudaEventElapsedTime(&ms, start->e, end->e), "cudaEventElapsedTime");
	out->wall_ns = ms > 0 ? (uint64_t)(ms * 1e6) : 0;
	out->cpu_ns = out->wall_ns;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Row movement.                                                        */

static int cu_gather(struct rlb_backend *be, struct rlb_queue *q, size_t n,
		     uint32_t width, const uint32_t *idx, const float *scale,
		     const void *src, void *dst, struct rlb_err *err)
{
	(void)be;
	if (!n || !width)
		return 0;
	k_gather<<<blocks_for(n, 1), 128, 0, q->s>>>(n, width, idx, scale,
						     (const bf16 *)src, (bf16 *)dst);
	LAUNCHED("gather kernel");
	return 0;
}

static int cu_combine(struct rlb_backend *be, struct rlb_queue *q,
		      size_t ntok, uint32_t topk, uint32_t hidden,
		      const uint32_t *idx, const float *gate, const void *y,
		      void *inout, struct rlb_err *err)
{
	(void)be;
	if (!ntok || !hidden || !topk)
		return 0;
	k_combine<<<blocks_for(ntok, 1), 128, 0, q->s>>>(ntok, topk, hidden, idx, gate,
							 (const bf16 *)y, (bf16 *)inout);
	LAUNCHED("combine kernel");
	return 0;
}

/* ------------------------------------------------------------------ */
/* Expert math.                                                         */

/*
 * A GEMM in cuBLAS terms (column-major): C = alpha op(A) op(B) + beta C,
 * A and B bf16, C bf16 or fp32, fp32 accumulation, alpha 1.
 */
struct gemm_shape {
	cublasOperation_t ta, tb;
	int m, n, k, lda, ldb, ldc;
	cudaDataType_t ctype;
	float beta;
};

static struct gemm_shape shape(cublasOperation_t ta, cublasOperation_t tb,
			       size_t m, size_t n, size_t k, size_t lda, size_t ldb,
			       size_t ldc, cudaDataType_t ctype, float beta)
{
	struct gemm_shape g;

	g.ta = ta;
	g.tb = tb;
	g.m = (int)m;
	g.n = (int)n;
	g.k = (int)k;
	g.lda = (int)lda;
	g.ldb = (int)ldb;
	g.ldc = (int)ldc;
	g.ctype = ctype;
	g.beta = beta;
	return g;
}

/* Which dimension of a stage's GEMMs is the job's rows. */
enum { VARY_N, VARY_K };

static struct gemm_shape with_rows(const struct gemm_shape *g, int vary, size_t rows)
{
	struct gemm_shape s = *g;

	if (vary == VARY_N)
		s.n = (int)rows;
	else
		s.k = (int)rows;
	return s;
}

static int gemm_one(struct cuda_priv *p, const struct gemm_shape *g, const void *A,
		    const void *B, void *C, struct rlb_err *err)
{
	const float alpha = 1.0f;

	CB(blas.gemm(p->blas, g->ta, g->tb, g->m, g->n, g->k, &alpha, A, CUDA_R_16BF,
		     g->lda, B, CUDA_R_16BF, g->ldb, &g->beta, C, g->ctype, g->ldc,
		     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "cublasGemmEx");
	return 0;
}

/* cuBLAS's grouped GEMM over a stage's runs of equal rows: 1 done, 0 not taken. */
static int gemm_grouped(struct cuda_priv *p, void **ptrs, const struct gemm_shape *g,
			int vary, const size_t *rows, unsigned count,
			const unsigned *first, const unsigned *len, unsigned nrun,
			struct rlb_err *err)
{
	cublasOperation_t ta[BATCH_MAX], tb[BATCH_MAX];
	int m[BATCH_MAX], n[BATCH_MAX], k[BATCH_MAX], size[BATCH_MAX];
	int lda[BATCH_MAX], ldb[BATCH_MAX], ldc[BATCH_MAX];
	float alpha[BATCH_MAX], beta[BATCH_MAX];
	int fp32 = g->ctype == CUDA_R_32F;
	cublasStatus_t st;
	unsigned i;

	if (!blas.gemm_grouped || !p->gemm_grouped || p->grouped_bad[fp32])
		return 0;
	for (i = 0; i < nrun; i++) {
		struct gemm_shape s = with_rows(g, vary, rows[first[i]]);

		ta[i] = s.ta;
		tb[i] = s.tb;
		m[i] = s.m;
		n[i] = s.n;
		k[i] = s.k;
		lda[i] = s.lda;
		ldb[i] = s.ldb;
		ldc[i] = s.ldc;
		alpha[i] = 1.0f;
		beta[i] = s.beta;
		size[i] = (int)len[i];
	}
	st = blas.gemm_grouped(p->blas, ta, tb, m, n, k, alpha, (const void *const *)ptrs,
			       CUDA_R_16BF, lda, (const void *const *)(ptrs + count),
			       CUDA_R_16BF, ldb, beta, (void *const *)(ptrs + 2 * count),
			       g->ctype, ldc, (int)nrun, size, CUBLAS_COMPUTE_32F);
	if (st == CUBLAS_STATUS_SUCCESS)
		return 1;
	if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE)
		return blas_fail(err, st, "cublasGemmGroupedBatchedEx");
	p->grouped_bad[fp32] = 1;	/* these types: one call per row count from now on */
	return 0;
}

/*
 * One GEMM stage over the COUNT jobs of a batch, job i's GEMM of shape G
 * but for its rows (rows[i], ascending), which are its n (VARY_N) or its k
 * (VARY_K), on A[i], B[i], C[i].  One job: cublasGemmEx; more: the
 * pointer arrays written on the device (k_ptrs, into PTRS), then one
 * grouped GEMM, or one call per run of equal rows.
 */
static int gemm_stage(struct rlb_backend *be, struct rlb_queue *q, void **ptrs,
		      const struct gemm_shape *g, int vary, const size_t *rows,
		      unsigned count, const void *const *A, const void *const *B,
		      void *const *C, struct rlb_err *err)
{
	struct cuda_priv *p = priv(be);
	unsigned first[BATCH_MAX], len[BATCH_MAX], nrun = 0, i, j;
	const float alpha = 1.0f;
	struct ptr_args a;
	int ret;

	if (count == 0)
		return 0;
	if (count > BATCH_MAX)
		return rlb_err_set(err, RLB_EINVAL, "GEMM stage of %u jobs", count);
	if (count == 1) {
		struct gemm_shape s = with_rows(g, vary, rows[0]);

		return gemm_one(p, &s, A[0], B[0], C[0], err);
	}
	for (i = 0; i < count; i = j) {
		for (j = i + 1; j < count && rows[j] == rows[i]; j++)
			;
		first[nrun] = i;
		len[nrun++] = j - i;
	}
	memset(&a, 0, sizeof(a));
	for (i = 0; i < count; i++) {
		a.p[i] = A[i];
		a.p[count + i] = B[i];
		a.p[2 * count + i] = C[i];
	}
	a.n = 3 * count;
	k_ptrs<<<1, 3 * BATCH_MAX, 0, q->s>>>(a, (const void **)ptrs);
	LAUNCHED("pointer kernel");
	if (nrun > 1) {
		ret = gemm_grouped(p, ptrs, g, vary, rows, count, first, len, nrun, err);
		if (ret)
			return ret < 0 ? ret : 0;
	}
	for (i = 0; i < nrun; i++) {
		struct gemm_shape s = with_rows(g, vary, rows[first[i]]);
		unsigned o = first[i];

		if (len[i] == 1) {
			ret = gemm_one(p, &s, A[o], B[o], C[o], err);
			if (ret)
				return ret;
			continue;
		}
		CB(blas.gemm_batched(p->blas, s.ta, s.tb, s.m, s.n, s.k, &alpha,
				     (const void *const *)(ptrs + o), CUDA_R_16BF, s.lda,
				     (const void *const *)(ptrs + count + o), CUDA_R_16BF, s.ldb,
				     &s.beta, (void *const *)(ptrs + 2 * count + o), s.ctype,
				     s.ldc, (int)len[i], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		   "cublasGemmBatchedEx");
	}
	return 0;
}

static const char *off(const void *p, size_t elems, size_t bytes)
{
	return (const char *)p + elems * bytes;
}

/* Grid of a per-row kernel over jobs of at most ROWS rows. */
static dim3 row_grid(size_t rows, unsigned count)
{
	return dim3(rows == 0 ? 1 : rows > 8192 ? 8192 : (unsigned)rows, count);
}

/*
 * A batch: COUNT jobs (jobs[sel[i]]), rows[i] rows each, ascending, and
 * at[i] the first row of job i among the batch's N rows (for scratch).
 */
struct batch {
	const struct rlb_expert_job *jobs;
	const size_t *sel;
	unsigned count;
	size_t rows[BATCH_MAX], at[BATCH_MAX], n;
};

#define PTRS_BYTES align_up(3 * BATCH_MAX * sizeof(void *))

/*
 * Forward of a batch (weights [H][gate | up] then down, k_gu_layout):
 *   act = x w_gu      ([rows][2 ffn]: [g | u], saved for backward)
 *   h = silu(g) * u   (scratch)
 *   y = h w_down
 */
static int forward_batch(struct rlb_backend *be, struct rlb_queue *q,
			 const struct rlb_expert_shape *s, const struct batch *b,
			 struct rlb_err *err)
{
	size_t H = s->hidden, F = s->ffn, hf = H * F;
	const void *A[BATCH_MAX], *B[BATCH_MAX];
	void *C[BATCH_MAX];
	struct job_args ja;
	struct gemm_shape g;
	void *sc = NULL, **ptrs;
	char *hbuf;
	unsigned i;
	int ret;

	ret = scratch(q, PTRS_BYTES + b->n * F * sizeof(bf16), &sc, err);
	if (ret)
		return ret;
	ptrs = (void **)sc;
	hbuf = (char *)sc + PTRS_BYTES;
	for (i = 0; i < b->count; i++) {
		A[i] = b->jobs[b->sel[i]].w;
		B[i] = b->jobs[b->sel[i]].x;
		C[i] = b->jobs[b->sel[i]].act;
	}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_N, 2 * F, 0, H, 2 * F, H, 2 * F, CUDA_R_16BF, 0.0f);
	ret = gemm_stage(be, q, ptrs, &g, VARY_N, b->rows, b->count, A, B, C, err);
	if (ret)
		return ret;
	memset(&ja, 0, sizeof(ja));
	for (i = 0; i < b->count; i++) {
		ja.a[i] = b->jobs[b->sel[i]].act;
		ja.c[i] = hbuf + b->at[i] * F * sizeof(bf16);
		ja.rows[i] = b->rows[i];
	}
	k_swiglu_fwd<<<row_grid(b->rows[b->count - 1], b->count), 128, 0, q->s>>>(ja, (uint32_t)F);
	LAUNCHED("SwiGLU kernel");
	for (i = 0; i < b->count; i++) {
		A[i] = off(b->jobs[b->sel[i]].w, 2 * hf, sizeof(bf16));
		B[i] = ja.c[i];
		C[i] = b->jobs[b->sel[i]].y;
	}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_N, H, 0, F, H, F, H, CUDA_R_16BF, 0.0f);
	return gemm_stage(be, q, ptrs, &g, VARY_N, b->rows, b->count, A, B, C, err);
}

/*
 * Backward of a batch (bf16 activations and their gradients, the weight
 * gradients added in fp32):
 *   dh = dy w_down^T              dgu = [dg | du], h from act and dh
 *   g_down += h^T dy              g_gu += x^T dgu
 *   dx = dgu w_gu^T
 */
static int backward_batch(struct rlb_backend *be, struct rlb_queue *q,
			  const struct rlb_expert_shape *s, const struct batch *b,
			  struct rlb_err *err)
{
	size_t H = s->hidden, F = s->ffn, hf = H * F, n = b->n;
	size_t o_dh = PTRS_BYTES;
	size_t o_dgu = o_dh + align_up(n * F * sizeof(bf16));
	size_t o_h = o_dgu + align_up(n * 2 * F * sizeof(bf16));
	size_t total = o_h + n * F * sizeof(bf16);
	const void *A[BATCH_MAX], *B[BATCH_MAX];
	void *C[BATCH_MAX];
	struct job_args ja;
	struct gemm_shape g;
	void **ptrs;
	char *sc = NULL;
	unsigned i;
	int ret;

	ret = scratch(q, total, (void **)&sc, err);
	if (ret)
		return ret;
	ptrs = (void **)sc;
#define JOB(i) (&b->jobs[b->sel[i]])
#define DH(i) (sc + o_dh + b->at[i] * F * sizeof(bf16))
#define DGU(i) (sc + o_dgu + b->at[i] * 2 * F * sizeof(bf16))
#define HB(i) (sc + o_h + b->at[i] * F * sizeof(bf16))
	/* dh^T (F x rows) = w_down (row-major F x H, seen as H x F), transposed, times dy^T */
	for (i = 0; i < b->count; i++) {
		A[i] = off(JOB(i)->w, 2 * hf, sizeof(bf16));
		B[i] = JOB(i)->dy;
		C[i] = DH(i);
	}
	g = shape(CUBLAS_OP_T, CUBLAS_OP_N, F, 0, H, H, H, F, CUDA_R_16BF, 0.0f);
	ret = gemm_stage(be, q, ptrs, &g, VARY_N, b->rows, b->count, A, B, C, err);
	if (ret)
		return ret;
	memset(&ja, 0, sizeof(ja));
	for (i = 0; i < b->count; i++) {
		ja.a[i] = JOB(i)->act;
		ja.b[i] = DH(i);
		ja.c[i] = DGU(i);
		ja.d[i] = HB(i);
		ja.rows[i] = b->rows[i];
	}
	k_swiglu_bwd<<<row_grid(b->rows[b->count - 1], b->count), 128, 0, q->s>>>(ja, (uint32_t)F);
	LAUNCHED("SwiGLU backward kernel");
	/* g_down (H x F column-major) += dy^T h */
	for (i = 0; i < b->count; i++) {
		A[i] = JOB(i)->dy;
		B[i] = HB(i);
		C[i] = (void *)off(JOB(i)->g, 2 * hf, sizeof(float));
	}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_T, H, F, 0, H, F, H, CUDA_R_32F, 1.0f);
	ret = gemm_stage(be, q, ptrs, &g, VARY_K, b->rows, b->count, A, B, C, err);
	if (ret)
		return ret;
	/* g_gu (2F x H column-major: [H][g | u]) += dgu^T x */
	for (i = 0; i < b->count; i++) {
		A[i] = DGU(i);
		B[i] = JOB(i)->x;
		C[i] = JOB(i)->g;
	}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_T, 2 * F, H, 0, 2 * F, H, 2 * F, CUDA_R_32F, 1.0f);
	ret = gemm_stage(be, q, ptrs, &g, VARY_K, b->rows, b->count, A, B, C, err);
	if (ret)
		return ret;
	/* dx^T (H x rows) = w_gu^T (H x 2F) dgu^T */
	for (i = 0; i < b->count; i++) {
		A[i] = JOB(i)->w;
		B[i] = DGU(i);
		C[i] = JOB(i)->dx;
	}
#undef JOB
#undef DH
#undef DGU
#undef HB
	g = shape(CUBLAS_OP_T, CUBLAS_OP_N, H, 0, 2 * F, 2 * F, 2 * F, H, CUDA_R_16BF, 0.0f);
	return gemm_stage(be, q, ptrs, &g, VARY_N, b->rows, b->count, A, B, C, err);
}

/*
 * The handle on q's stream, with our workspace: cublasSetStream puts
 * cuBLAS's own pool back, so both go together, and only on a change.
 */
static int blas_on(struct cuda_priv *p, struct rlb_queue *q, struct rlb_err *err)
{
	if (p->blas_stream == q->s)
		return 0;
	CB(blas.set_stream(p->blas, q->s), "cublasSetStream");
	CB(blas.set_workspace(p->blas, p->blas_ws, BLAS_WS_BYTES), "cublasSetWorkspace");
	p->blas_stream = q->s;
	return 0;
}

typedef int (*batch_fn)(struct rlb_backend *be, struct rlb_queue *q,
			const struct rlb_expert_shape *s, const struct batch *b,
			struct rlb_err *err);

/* The jobs in batches (rlb_gemm_batches), each run by FN. */
static int run_batches(struct rlb_backend *be, struct rlb_queue *q,
		       const struct rlb_expert_shape *s,
		       const struct rlb_expert_job *jobs, size_t njobs,
		       batch_fn fn, struct rlb_err *err)
{
	size_t *rows = NULL, *order = NULL, nb = 0, i, k;
	struct rlb_gemm_batch *batches = NULL;
	int ret = 0;

	if (njobs == 0)
		return 0;
	if (s->hidden == 0 || s->ffn == 0)
		return rlb_err_set(err, RLB_EINVAL, "empty expert shape");
	rows = (size_t *)malloc(njobs * sizeof(*rows));
	order = (size_t *)malloc(njobs * sizeof(*order));
	batches = (struct rlb_gemm_batch *)malloc(njobs * sizeof(*batches));
	if (!rows || !order || !batches) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < njobs; i++)
		rows[i] = jobs[i].rows;
	ret = rlb_gemm_batches(rows, njobs, BATCH_MAX, BATCH_ROWS, order, batches, &nb, err);
	if (ret == 0)
		ret = blas_on(priv(be), q, err);
	for (i = 0; ret == 0 && i < nb; i++) {
		struct batch b;

		b.jobs = jobs;
		b.sel = order + batches[i].first;
		b.count = (unsigned)batches[i].count;
		b.n = 0;
		for (k = 0; k < b.count; k++) {
			b.rows[k] = jobs[b.sel[k]].rows;
			b.at[k] = b.n;
			b.n += b.rows[k];
		}
		ret = fn(be, q, s, &b, err);
	}
out:
	free(rows);
	free(order);
	free(batches);
	return ret;
}

static int cu_expert_forward(struct rlb_backend *be, struct rlb_queue *q,
			     const struct rlb_expert_shape *s,
			     const struct rlb_expert_job *jobs, size_t njobs,
			     struct rlb_err *err)
{
	return run_batches(be, q, s, jobs, njobs, forward_batch, err);
}

/* fp32 accumulation: the order of rows and replicas changes the last bits. */
static int cu_expert_backward(struct rlb_backend *be, struct rlb_queue *q,
			      const struct rlb_expert_shape *s,
			      const struct rlb_expert_job *jobs, size_t njobs,
			      struct rlb_err *err)
{
	return run_batches(be, q, s, jobs, njobs, backward_batch, err);
}

static int cu_acc_add(struct rlb_backend *be, struct rlb_queue *q, size_t n,
		      void *dst, const void *src, struct rlb_err *err)
{
	(void)be;
	if (!n)
		return 0;
	k_acc_add<<<blocks_for(n, 256), 256, 0, q->s>>>(n, (float *)dst, (const float *)src);
	LAUNCHED("accumulate kernel");
	return 0;
}

static int cu_adam(struct rlb_backend *be, struct rlb_queue *q,
		   const struct rlb_adam *a, size_t n, float scale, void *w,
		   const void *g, void *opt, struct rlb_err *err)
{
	uint32_t t = a->t ? a->t : 1;
	struct adam_args x;
	float *o = (float *)opt;

	(void)be;
	if (!n)
		return 0;
	x.lr = a->lr;
	x.b1 = a->beta1;
	x.b2 = a->beta2;
	x.eps = a->eps;
	x.c1 = (float)(1.0 / (1.0 - pow(a->beta1, t)));
	x.c2 = (float)(1.0 / (1.0 - pow(a->beta2, t)));
	x.scale = scale;
	k_adam<<<blocks_for(n, 256), 256, 0, q->s>>>(n, x, (const float *)g, o, o + n,
						     o + 2 * n, (bf16 *)w);
	LAUNCHED("Adam kernel");
	return 0;
}

/* ------------------------------------------------------------------ */
/* Communication.                                                       */

/* Virtual ranks: a matched transfer is a copy on the legacy stream. */
static int virt_copy(void *ctx, void *dst, const void *src, size_t bytes,
		     struct rlb_err *err)
{
	(void)ctx;
	if (bytes)
		CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
				   cudaStreamLegacy), "cudaMemcpyAsync (virtual rank transfer)");
	return 0;
}

static int cu_group_start(struct rlb_backend *be, enum rlb_comm_kind c,
			  struct rlb_err *err)
{
	struct cuda_priv *p = priv(be);

	if ((unsigned)c >= RLB_COMM_KINDS)
		return rlb_err_set(err, RLB_EINVAL, "no communicator %d", (int)c);
	if (p->virt)
		return rlb_world_group_start(p->world, p->local, c, err);
	if (p->in_group[c])
		return rlb_err_set(err, RLB_EINVAL, "rank %u: group already started",
				   be->rank);
	p->in_group[c] = 1;
	p->nx[c] = 0;
	return 0;
}

static int post(struct rlb_backend *be, enum rlb_comm_kind c, int send,
		uint32_t peer, void *buf, size_t bytes, struct rlb_err *err)
{
	struct cuda_priv *p = priv(be);
	struct xfer *x;
	uint32_t in = peer;

	if ((unsigned)c >= RLB_COMM_KINDS)
		return rlb_err_set(err, RLB_EINVAL, "no communicator %d", (int)c);
	if (peer >= be->ranks)
		return rlb_err_set(err, RLB_EINVAL, "peer rank %u out of range (%u ranks)",
				   peer, be->ranks);
	if (c == RLB_COMM_NODE) {
		if (peer / be->gpus_per_node != p->node.node)
			return rlb_err_set(err, RLB_EINVAL,
					   "rank %u is not in the node of rank %u", peer,
					   be->rank);
		in = peer % be->gpus_per_node;
	}
	if (!p->in_group[c])
		return rlb_err_set(err, RLB_EINVAL, "rank %u: group not started", be->rank);
	if (!bytes)
		return 0;
	if (rlb_grow(&p->x[c], &p->capx[c], p->nx[c] + 1, sizeof(*p->x[c])))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	x = &p->x[c][p->nx[c]++];
	x->send = send;
	x->peer = in;
	x->buf = buf;
	x->bytes = bytes;
	return 0;
}

static int cu_send(struct rlb_backend *be, enum rlb_comm_kind c, uint32_t peer,
		   const void *dev, size_t bytes, struct rlb_err *err)
{
	struct cuda_priv *p = priv(be);

	if (p->virt)
		return rlb_world_send(p->world, p->local, c, peer, dev, bytes, err);
	return post(be, c, 1, peer, (void *)dev, bytes, err);
}

static int cu_recv(struct rlb_backend *be, enum rlb_comm_kind c, uint32_t peer,
		   void *dev, size_t bytes, struct rlb_err *err)
{
	struct cuda_priv *p = priv(be);

	if (p->virt)
		return rlb_world_recv(p->world, p->local, c, peer, dev, bytes, err);
	return post(be, c, 0, peer, dev, bytes, err);
}

/*
 * The group's transfers as one NCCL group on q.  ncclGroupEnd of a
 * non-blocking communicator may still be in progress: waited for (bounded)
 * before the stream is used again.
 */
static int cu_group_end(struct rlb_backend *be, enum rlb_comm_kind c,
			struct rlb_queue *q, struct rlb_err *err)
{
	struct cuda_priv *p = priv(be);
	ncclComm_t comm;
	size_t i;

	if ((unsigned)c >= RLB_COMM_KINDS)
		return rlb_err_set(err, RLB_EINVAL, "no communicator %d", (int)c);
	if (p->virt)
		return rlb_world_group_end(p->world, p->local, c, err);
	if (!p->in_group[c])
		return rlb_err_set(err, RLB_EINVAL, "rank %u: group not started", be->rank);
	p->in_group[c] = 0;
	comm = p->comm[c];
	if (p->nx[c] == 0)
		return 0;
	if (!comm)
		return rlb_err_set(err, RLB_ENCCL, "NCCL communicator aborted");
	NC(ncclGroupStart(), comm, "ncclGroupStart");
	for (i = 0; i < p->nx[c]; i++) {
		const struct xfer *x = &p->x[c][i];
		ncclResult_t r = x->send ?
			ncclSend(x->buf, x->bytes, ncclUint8, (int)x->peer, comm, q->s) :
			ncclRecv(x->buf, x->bytes, ncclUint8, (int)x->peer, comm, q->s);

		if (r != ncclSuccess && r != ncclInProgress) {
			ncclGroupEnd();
			return nccl_fail(err, r, comm, x->send ? "ncclSend" : "ncclRecv");
		}
	}
	NC(ncclGroupEnd(), comm, "ncclGroupEnd");
	p->nx[c] = 0;
	return wait_comm(p, comm, "ncclGroupEnd", err);
}

static void cu_abort(struct rlb_backend *be)
{
	abort_comms(priv(be));
}

static const struct rlb_backend_ops cuda_ops = {
	cu_destroy,
	cu_alloc,
	cu_free,
	cu_upload,
	cu_download,
	cu_copy,
	cu_zero,
	cu_upload_act,
	cu_download_act,
	cu_upload_weights,
	cu_download_weights,
	cu_queue_new,
	cu_queue_free,
	cu_queue_sync,
	cu_event_new,
	cu_event_free,
	cu_event_record,
	cu_queue_wait,
	cu_elapsed,
	cu_gather,
	cu_combine,
	cu_expert_forward,
	cu_expert_backward,
	cu_acc_add,
	cu_adam,
	cu_group_start,
	cu_send,
	cu_recv,
	cu_group_end,
	cu_abort,
	cu_queue_hold,
	cu_queue_release,
};

/* ------------------------------------------------------------------ */
/* Creation.                                                            */

static void cu_destroy(struct rlb_backend *be)
{
	struct cuda_priv *p = priv(be);
	struct rlb_err err;
	int c;

	for (c = 0; c < RLB_COMM_KINDS; c++) {
		/* Flush, bounded; a failed or timed-out wait aborts the communicators. */
		if (p->comm[c]) {
			ncclResult_t r = ncclCommFinalize(p->comm[c]);

			if ((r == ncclSuccess || r == ncclInProgress) &&
			    wait_comm(p, p->comm[c], "ncclCommFinalize", &err) == 0 && p->comm[c]) {
				ncclCommDestroy(p->comm[c]);
				p->comm[c] = NULL;
			}
		}
		if (p->comm[c])
			ncclCommAbort(p->comm[c]);
		p->comm[c] = NULL;
		free(p->x[c]);
	}
	if (p->blas)
		blas.destroy(p->blas);
	if (p->blas_ws)
		cudaFree(p->blas_ws);
	if (p->owns_copy)
		rlb_world_set_copy(p->world, NULL, NULL);
	free(p);
	free(be);
}

/* One NCCL communicator from a unique id, waited for (bounded). */
static int comm_init(struct cuda_priv *p, ncclComm_t *out, int nranks,
		     const ncclUniqueId *id, int rank, struct rlb_err *err)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;

	cfg.blocking = 0;
	*out = NULL;
	NC(ncclCommInitRankConfig(out, nranks, *id, rank, &cfg), *out,
	   "ncclCommInitRankConfig");
	return wait_comm(p, *out, "ncclCommInitRankConfig", err);
}

/*
 * MPI ranks: rank 0 makes the EP communicator's id and each node's first
 * rank its node's; they reach every rank through the transport's
 * allreduce (rlb_cuda_bytes_to_doubles).  Every rank takes part even after
 * its own set-up failed (SETUP_FAILED), so that none waits for it.
 */
static int nccl_setup(struct rlb_backend *be, int setup_failed,
		      struct rlb_err *err)
{
	struct cuda_priv *p = priv(be);
	size_t idb = sizeof(ncclUniqueId), nodes = be->ranks / be->gpus_per_node;
	size_t n = 1 + idb * (1 + nodes);
	double *v = (double *)calloc(n, sizeof(double));
	ncclUniqueId ep_id, node_id;
	struct rlb_err mine = { 0, "" };
	int ret = 0;

	if (!v)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	if (!setup_failed && be->rank == 0) {
		ncclResult_t r = ncclGetUniqueId(&ep_id);

		if (r == ncclSuccess)
			rlb_cuda_bytes_to_doubles(&ep_id, idb, v + 1);
		else
			setup_failed = nccl_fail(&mine, r, NULL, "ncclGetUniqueId");
	}
	if (!setup_failed && p->node.index == 0) {
		ncclResult_t r = ncclGetUniqueId(&node_id);

		if (r == ncclSuccess)
			rlb_cuda_bytes_to_doubles(&node_id, idb, v + 1 + idb * (1 + p->node.node));
		else
			setup_failed = nccl_fail(&mine, r, NULL, "ncclGetUniqueId");
	}
	v[0] = setup_failed ? 1 : 0;
	ret = rlb_world_allreduce(p->world, v, n, RLB_REDUCE_SUM, err);
	if (ret == 0 && v[0] > 0) {
		if (setup_failed && mine.code && err)
			*err = mine;
		ret = setup_failed ? (mine.code ? mine.code : RLB_ECUDA) :
		      rlb_err_set(err, RLB_ECUDA, "CUDA set-up failed on %.0f rank(s)", v[0]);
	}
	if (ret == 0)
		ret = rlb_cuda_doubles_to_bytes(v + 1, idb, &ep_id, err);
	if (ret == 0)
		ret = rlb_cuda_doubles_to_bytes(v + 1 + idb * (1 + p->node.node), idb,
						&node_id, err);
	free(v);
	if (ret == 0)
		ret = comm_init(p, &p->comm[RLB_COMM_EP], (int)be->ranks, &ep_id,
				(int)be->rank, err);
	if (ret == 0)
		ret = comm_init(p, &p->comm[RLB_COMM_NODE], (int)p->node.size, &node_id,
				(int)p->node.index, err);
	return ret;
}

extern "C" int rlb_cuda_device_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n;
}

/* Device, cuBLAS; records the first failure in err. */
static int device_setup(struct rlb_backend *be, const struct rlb_backend_init *init,
			struct rlb_err *err)
{
	struct cuda_priv *p = priv(be);
	int ndev = 0, ret;
	cudaError_t e = cudaGetDeviceCount(&ndev);

	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
		ndev = 0;
	else if (e != cudaSuccess)
		return cuda_fail(err, e, "cudaGetDeviceCount");
	ret = rlb_cuda_pick_device(init->rank, init->gpus_per_node, ndev, p->virt,
				   init->device, &p->device, err);
	if (ret)
		return ret;
	CU(cudaSetDevice(p->device), "cudaSetDevice");
	if (pthread_once(&blas_once, blas_load) != 0 || !blas.create)
		return rlb_err_set(err, RLB_EUNSUPPORTED, "%s",
				   blas.error[0] ? blas.error : "cannot load cuBLAS");
	CB(blas.create(&p->blas), "cublasCreate");
	CB(blas.set_math_mode(p->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
	CU(cudaMalloc(&p->blas_ws, BLAS_WS_BYTES), "cudaMalloc (cuBLAS workspace)");
	return 0;
}

/*
 * RLB_CUDA_GEMM: how a GEMM stage over experts of different rows runs.
 * grouped (the default, or unset): one cublasGemmGroupedBatchedEx call
 * where cuBLAS takes the types (cuBLAS 13.0 does for bf16 outputs, not
 * for the fp32 weight gradients), else the loop; loop: one call per row
 * count, batched over the experts that share it.  On an H200 grouped
 * spends a tenth of the loop's host time and more GPU time
 * (bench/cuda_gemm_bench.c, docs/gpu-results.md).  The choice changes
 * speed, not results.
 */
static int gemm_mode_from_env(int *grouped, struct rlb_err *err)
{
	const char *v = getenv("RLB_CUDA_GEMM");

	*grouped = 1;
	if (!v || !*v || !strcmp(v, "grouped"))
		return 0;
	if (strcmp(v, "loop"))
		return rlb_err_set(err, RLB_EINVAL,
				   "RLB_CUDA_GEMM: expected grouped or loop, got '%s'", v);
	*grouped = 0;
	return 0;
}

extern "C" int rlb_backend_cuda_new(const struct rlb_backend_init *init,
				    struct rlb_backend **out, struct rlb_err *err)
{
	struct rlb_backend *be;
	struct cuda_priv *p;
	struct rlb_err mine = { 0, "" };
	int ret, failed;

	*out = NULL;
	if (!init->world || init->ranks == 0 || init->rank >= init->ranks ||
	    init->gpus_per_node == 0 || init->ranks % init->gpus_per_node ||
	    init->local_index >= rlb_world_local(init->world))
		return rlb_err_set(err, RLB_EINVAL, "bad backend parameters");
	be = (struct rlb_backend *)calloc(1, sizeof(*be));
	p = (struct cuda_priv *)calloc(1, sizeof(*p));
	if (!be || !p) {
		free(be);
		free(p);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	be->ops = &cuda_ops;
	be->kind = RLB_BACKEND_CUDA;
	be->rank = init->rank;
	be->ranks = init->ranks;
	be->gpus_per_node = init->gpus_per_node;
	be->act_bytes = sizeof(bf16);
	be->weight_bytes = sizeof(bf16);
	be->acc_bytes = sizeof(float);
	be->opt_bytes = 3 * sizeof(float);
	be->priv = p;
	p->world = init->world;
	p->local = init->local_index;
	p->device = -1;
	p->virt = !strcmp(rlb_world_name(init->world), "virtual");
	ret = gemm_mode_from_env(&p->gemm_grouped, err);
	if (ret) {
		cu_destroy(be);
		return ret;
	}
	ret = rlb_cuda_node_of(init->rank, init->ranks, init->gpus_per_node, &p->node, err);
	if (ret) {
		cu_destroy(be);
		return ret;
	}
	failed = device_setup(be, init, &mine);
	if (p->virt) {
		ret = failed;
		if (ret == 0 && init->local_index == 0) {
			rlb_world_set_copy(p->world, virt_copy, NULL);
			p->owns_copy = 1;
		}
	} else {
		ret = nccl_setup(be, failed, err);
		if (failed)
			ret = failed;
	}
	if (ret) {
		if (failed && err)
			*err = mine;
		cu_destroy(be);
		return ret;
	}
	*out = be;
	return 0;
}
