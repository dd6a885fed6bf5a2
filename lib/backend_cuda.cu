/*
 * backend_cuda.cu - the CUDA + NCCL backend of train-step (lib/backend.h):
 * bf16 weights and activations with fp32 accumulation, fp32 master weights
 * and Adam moments; expert GEMMs through cuBLAS, batched over the experts
 * of equal rows (lib/cuda_plan.h); own kernels for permute, combine,
 * SwiGLU, gradient accumulation and Adam; queues are CUDA streams and
 * events CUDA events.  Communication: grouped ncclSend / ncclRecv over an
 * EP and a node communicator (MPI ranks), or device copies between the
 * virtual ranks of one process.  Every CUDA, cuBLAS and NCCL call is
 * checked; waits poll for asynchronous NCCL errors and give up (aborting
 * the communicators) after a timeout, so no rank hangs.
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
/* Experts of one batched GEMM call, and rows of one call (bounds scratch). */
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
	decltype(&cublasSetMathMode) set_math_mode;
	gemm_ex_fn gemm;
	gemm_batched_ex_fn gemm_batched;
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
	*(void **)&blas.set_math_mode = dlsym(h, "cublasSetMathMode");
	*(void **)&blas.gemm = dlsym(h, "cublasGemmEx");
	*(void **)&blas.gemm_batched = dlsym(h, "cublasGemmBatchedEx");
	*(void **)&blas.status_string = dlsym(h, "cublasGetStatusString");
	if (!blas.create || !blas.destroy || !blas.set_stream || !blas.set_math_mode ||
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

/* Pointer arrays of a batched GEMM, passed by value so no host buffer must live on. */
struct ptr_args {
	const void *p[3 * 2 * BATCH_MAX];
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

/* Per-job pointers of a batched elementwise kernel (blockIdx.y is the job). */
struct job_args {
	const void *a[BATCH_MAX];
	const void *b[BATCH_MAX];
	void *c[BATCH_MAX];
	void *d[BATCH_MAX];
};

__device__ static float sigmoidf_(float g)
{
	return 1.0f / (1.0f + expf(-g));
}

/* h = silu(g) * u from act rows [g | u]. */
static __global__ void k_swiglu_fwd(struct job_args a, size_t rows, uint32_t ffn)
{
	const bf16 *act = (const bf16 *)a.a[blockIdx.y];
	bf16 *h = (bf16 *)a.c[blockIdx.y];
	size_t n = rows * ffn;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t r = i / ffn, j = i % ffn;
		float g = __bfloat162float(act[r * 2 * ffn + j]);
		float u = __bfloat162float(act[r * 2 * ffn + ffn + j]);

		h[i] = __float2bfloat16(g * sigmoidf_(g) * u);
	}
}

/* From act [g | u] and dh (fp32): dgu [dg | du] and h (for dw_down). */
static __global__ void k_swiglu_bwd(struct job_args a, size_t rows, uint32_t ffn)
{
	const bf16 *act = (const bf16 *)a.a[blockIdx.y];
	const float *dh = (const float *)a.b[blockIdx.y];
	bf16 *dgu = (bf16 *)a.c[blockIdx.y];
	bf16 *h = (bf16 *)a.d[blockIdx.y];
	size_t n = rows * ffn;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t r = i / ffn, j = i % ffn;
		float g = __bfloat162float(act[r * 2 * ffn + j]);
		float u = __bfloat162float(act[r * 2 * ffn + ffn + j]);
		float sg = sigmoidf_(g), silu = g * sg, d = dh[i];

		dgu[r * 2 * ffn + j] = __float2bfloat16(d * u * (sg * (1.0f + g * (1.0f - sg))));
		dgu[r * 2 * ffn + ffn + j] = __float2bfloat16(d * silu);
		h[i] = __float2bfloat16(silu * u);
	}
}

/* dst[job] = bf16(src[job]) over n elements per job. */
static __global__ void k_cvt_jobs(struct job_args a, size_t n)
{
	const float *src = (const float *)a.a[blockIdx.y];
	bf16 *dst = (bf16 *)a.c[blockIdx.y];

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __float2bfloat16(src[i]);
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

/* The optimizer state: master copy, then m, then v (fp32 each). */
static int cu_upload_weights(struct rlb_backend *be, struct rlb_queue *q,
			     const struct rlb_expert_shape *s,
			     const float *host, void *w, void *opt,
			     struct rlb_err *err)
{
	size_t n = rlb_expert_params(s);
	void *src = opt;
	int ret = 0;

	if (!opt)
		ret = scratch(q, n * sizeof(float), &src, err);
	if (ret == 0)
		ret = cu_upload(be, q, src, host, n * sizeof(float), err);
	if (ret == 0 && opt)
		ret = cu_zero(be, q, (float *)opt + n, 2 * n * sizeof(float), err);
	return ret ? ret : to_bf16(q, n, (const float *)src, w, err);
}

static int cu_download_weights(struct rlb_backend *be, struct rlb_queue *q,
			       const struct rlb_expert_shape *s,
			       const void *w, const void *opt, float *host,
			       struct rlb_err *err)
{
	size_t n = rlb_expert_params(s);

	/* the fp32 master copy when there is one, else the bf16 weights */
	if (opt)
		return cu_download(be, q, host, opt, n * sizeof(float), err);
	return cu_download_act(be, q, host, w, n, err);
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
	if (q->scratch)
		cudaFreeAsync(q->scratch, q->s);
	cudaStreamSynchronize(q->s);
	cudaStreamDestroy(q->s);
	free(q);
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
 * One GEMM shape over COUNT operand sets (column-major, cuBLAS terms):
 * C_i = alpha op(A_i) op(B_i) + beta C_i, A and B bf16, C bf16 or fp32,
 * fp32 accumulation.  One set: cublasGemmEx; more: cublasGemmBatchedEx
 * with the pointer arrays written on the device by k_ptrs.
 */
struct gemm_shape {
	cublasOperation_t ta, tb;
	int m, n, k, lda, ldb, ldc;
	cudaDataType_t ctype;
	float beta;
};

static int gemm(struct rlb_backend *be, struct rlb_queue *q, void **ptrs,
		const struct gemm_shape *g, const void *const *A,
		const void *const *B, void *const *C, unsigned count,
		struct rlb_err *err)
{
	struct cuda_priv *p = priv(be);
	const float alpha = 1.0f, beta = g->beta;
	struct ptr_args a;
	unsigned i;

	if (count == 1) {
		CB(blas.gemm(p->blas, g->ta, g->tb, g->m, g->n, g->k, &alpha,
				A[0], CUDA_R_16BF, g->lda, B[0], CUDA_R_16BF, g->ldb, &beta,
				C[0], g->ctype, g->ldc, CUBLAS_COMPUTE_32F,
				CUBLAS_GEMM_DEFAULT), "cublasGemmEx");
		return 0;
	}
	if (count > 2 * BATCH_MAX)
		return rlb_err_set(err, RLB_EINVAL, "GEMM batch of %u", count);
	memset(&a, 0, sizeof(a));
	for (i = 0; i < count; i++) {
		a.p[i] = A[i];
		a.p[count + i] = B[i];
		a.p[2 * count + i] = C[i];
	}
	a.n = 3 * count;
	k_ptrs<<<1, 3 * 2 * BATCH_MAX, 0, q->s>>>(a, (const void **)ptrs);
	LAUNCHED("pointer kernel");
	CB(blas.gemm_batched(p->blas, g->ta, g->tb, g->m, g->n, g->k, &alpha,
			       (const void *const *)ptrs, CUDA_R_16BF, g->lda,
			       (const void *const *)(ptrs + count), CUDA_R_16BF, g->ldb,
			       &beta, (void *const *)(ptrs + 2 * count), g->ctype, g->ldc,
			       (int)count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
	   "cublasGemmBatchedEx");
	return 0;
}

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

static const char *off(const void *p, size_t elems, size_t bytes)
{
	return (const char *)p + elems * bytes;
}

/*
 * Forward of jobs sel[0..count) that all have ROWS rows:
 *   act[:, 0:ffn] = x w_gate, act[:, ffn:2ffn] = x w_up   (one batch of 2 count)
 *   h = silu(g) * u                                        (scratch)
 *   y = h w_down
 */
static int forward_batch(struct rlb_backend *be, struct rlb_queue *q,
			 const struct rlb_expert_shape *s,
			 const struct rlb_expert_job *jobs, const size_t *sel,
			 unsigned count, size_t rows, struct rlb_err *err)
{
	size_t H = s->hidden, F = s->ffn, hf = H * F;
	const void *A[2 * BATCH_MAX], *B[2 * BATCH_MAX];
	void *C[2 * BATCH_MAX];
	struct job_args ja;
	struct gemm_shape g;
	void *sc = NULL, **ptrs;
	char *hbuf;
	unsigned i, t;
	int ret;

	ret = scratch(q, align_up(3 * 2 * BATCH_MAX * sizeof(void *)) +
		      count * rows * F * sizeof(bf16), &sc, err);
	if (ret)
		return ret;
	ptrs = (void **)sc;
	hbuf = (char *)sc + align_up(3 * 2 * BATCH_MAX * sizeof(void *));
	for (i = 0; i < count; i++)
		for (t = 0; t < 2; t++) {
			const struct rlb_expert_job *j = &jobs[sel[i]];

			A[2 * i + t] = off(j->w, t * hf, sizeof(bf16));
			B[2 * i + t] = j->x;
			C[2 * i + t] = (void *)off(j->act, t * F, sizeof(bf16));
		}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_N, F, rows, H,
				 F, H, 2 * F, CUDA_R_16BF, 0.0f);
	ret = gemm(be, q, ptrs, &g, A, B, C, 2 * count, err);
	if (ret)
		return ret;
	memset(&ja, 0, sizeof(ja));
	for (i = 0; i < count; i++) {
		ja.a[i] = jobs[sel[i]].act;
		ja.c[i] = hbuf + i * rows * F * sizeof(bf16);
	}
	k_swiglu_fwd<<<dim3(blocks_for(rows * F, 256), count), 256, 0, q->s>>>(ja, rows,
									    (uint32_t)F);
	LAUNCHED("SwiGLU kernel");
	for (i = 0; i < count; i++) {
		A[i] = off(jobs[sel[i]].w, 2 * hf, sizeof(bf16));
		B[i] = ja.c[i];
		C[i] = jobs[sel[i]].y;
	}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_N, H, rows, F,
				 H, F, H, CUDA_R_16BF, 0.0f);
	return gemm(be, q, ptrs, &g, A, B, C, count, err);
}

/*
 * Backward of jobs sel[0..count) of ROWS rows each:
 *   dh = dy w_down^T (fp32)      dgu = [dg | du], h from act and dh
 *   g_down += h^T dy             g_gate += x^T dg, g_up += x^T du
 *   dx = dg w_gate^T + du w_up^T (fp32, then bf16)
 */
static int backward_batch(struct rlb_backend *be, struct rlb_queue *q,
			  const struct rlb_expert_shape *s,
			  const struct rlb_expert_job *jobs, const size_t *sel,
			  unsigned count, size_t rows, struct rlb_err *err)
{
	size_t H = s->hidden, F = s->ffn, hf = H * F, n = count * rows;
	size_t o_ptr = 0, o_dh = align_up(3 * 2 * BATCH_MAX * sizeof(void *));
	size_t o_dgu = o_dh + align_up(n * F * sizeof(float));
	size_t o_h = o_dgu + align_up(n * 2 * F * sizeof(bf16));
	size_t o_dx = o_h + align_up(n * F * sizeof(bf16));
	size_t total = o_dx + n * H * sizeof(float);
	const void *A[2 * BATCH_MAX], *B[2 * BATCH_MAX];
	void *C[2 * BATCH_MAX];
	struct job_args ja;
	struct gemm_shape g;
	void **ptrs;
	char *sc = NULL;
	unsigned i, t;
	int ret;

	ret = scratch(q, total, (void **)&sc, err);
	if (ret)
		return ret;
	ptrs = (void **)(sc + o_ptr);
#define DH(i) (sc + o_dh + (i) * rows * F * sizeof(float))
#define DGU(i) (sc + o_dgu + (i) * rows * 2 * F * sizeof(bf16))
#define HB(i) (sc + o_h + (i) * rows * F * sizeof(bf16))
#define DXF(i) (sc + o_dx + (i) * rows * H * sizeof(float))
	/* dh^T (F x rows) = w_down (row-major F x H, seen as H x F), transposed, times dy^T */
	for (i = 0; i < count; i++) {
		A[i] = off(jobs[sel[i]].w, 2 * hf, sizeof(bf16));
		B[i] = jobs[sel[i]].dy;
		C[i] = DH(i);
	}
	g = shape(CUBLAS_OP_T, CUBLAS_OP_N, F, rows, H,
				 H, H, F, CUDA_R_32F, 0.0f);
	ret = gemm(be, q, ptrs, &g, A, B, C, count, err);
	if (ret)
		return ret;
	memset(&ja, 0, sizeof(ja));
	for (i = 0; i < count; i++) {
		ja.a[i] = jobs[sel[i]].act;
		ja.b[i] = DH(i);
		ja.c[i] = DGU(i);
		ja.d[i] = HB(i);
	}
	k_swiglu_bwd<<<dim3(blocks_for(rows * F, 256), count), 256, 0, q->s>>>(ja, rows,
									    (uint32_t)F);
	LAUNCHED("SwiGLU backward kernel");
	/* g_down (H x F column-major) += dy^T h */
	for (i = 0; i < count; i++) {
		A[i] = jobs[sel[i]].dy;
		B[i] = HB(i);
		C[i] = (void *)off(jobs[sel[i]].g, 2 * hf, sizeof(float));
	}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_T, H, F, rows,
				 H, F, H, CUDA_R_32F, 1.0f);
	ret = gemm(be, q, ptrs, &g, A, B, C, count, err);
	if (ret)
		return ret;
	/* g_gate, g_up (F x H column-major) += dg^T x, du^T x */
	for (i = 0; i < count; i++)
		for (t = 0; t < 2; t++) {
			A[2 * i + t] = DGU(i) + t * F * sizeof(bf16);
			B[2 * i + t] = jobs[sel[i]].x;
			C[2 * i + t] = (void *)off(jobs[sel[i]].g, t * hf, sizeof(float));
		}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_T, F, H, rows,
				 2 * F, H, F, CUDA_R_32F, 1.0f);
	ret = gemm(be, q, ptrs, &g, A, B, C, 2 * count, err);
	if (ret)
		return ret;
	/* dx^T (H x rows) = w_gate dg^T + w_up du^T */
	for (t = 0; t < 2; t++) {
		for (i = 0; i < count; i++) {
			A[i] = off(jobs[sel[i]].w, t * hf, sizeof(bf16));
			B[i] = DGU(i) + t * F * sizeof(bf16);
			C[i] = DXF(i);
		}
		g = shape(CUBLAS_OP_T, CUBLAS_OP_N, H, rows, F,
					 F, 2 * F, H, CUDA_R_32F,
					 t ? 1.0f : 0.0f);
		ret = gemm(be, q, ptrs, &g, A, B, C, count, err);
		if (ret)
			return ret;
	}
	memset(&ja, 0, sizeof(ja));
	for (i = 0; i < count; i++) {
		ja.a[i] = DXF(i);
		ja.c[i] = jobs[sel[i]].dx;
	}
#undef DH
#undef DGU
#undef HB
#undef DXF
	k_cvt_jobs<<<dim3(blocks_for(rows * H, 256), count), 256, 0, q->s>>>(ja, rows * H);
	LAUNCHED("dx conversion kernel");
	return 0;
}

typedef int (*batch_fn)(struct rlb_backend *be, struct rlb_queue *q,
			const struct rlb_expert_shape *s,
			const struct rlb_expert_job *jobs, const size_t *sel,
			unsigned count, size_t rows, struct rlb_err *err);

/* Group the jobs by rows (rlb_gemm_groups) and run each group in batches. */
static int run_grouped(struct rlb_backend *be, struct rlb_queue *q,
		       const struct rlb_expert_shape *s,
		       const struct rlb_expert_job *jobs, size_t njobs,
		       batch_fn fn, struct rlb_err *err)
{
	size_t *rows = NULL, *order = NULL, ng = 0, i, k;
	struct rlb_gemm_group *groups = NULL;
	int ret = 0;

	if (njobs == 0)
		return 0;
	if (s->hidden == 0 || s->ffn == 0)
		return rlb_err_set(err, RLB_EINVAL, "empty expert shape");
	rows = (size_t *)malloc(njobs * sizeof(*rows));
	order = (size_t *)malloc(njobs * sizeof(*order));
	groups = (struct rlb_gemm_group *)malloc(njobs * sizeof(*groups));
	if (!rows || !order || !groups) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < njobs; i++)
		rows[i] = jobs[i].rows;
	ret = rlb_gemm_groups(rows, njobs, BATCH_MAX, order, groups, &ng, err);
	if (ret == 0)
		ret = blas.set_stream(priv(be)->blas, q->s) == CUBLAS_STATUS_SUCCESS ? 0 :
		      rlb_err_set(err, RLB_ECUDA, "cublasSetStream failed");
	for (i = 0; ret == 0 && i < ng; i++) {
		size_t per = BATCH_ROWS / groups[i].rows;

		if (per == 0)
			per = 1;
		for (k = 0; ret == 0 && k < groups[i].count; k += per) {
			size_t c = groups[i].count - k < per ? groups[i].count - k : per;

			ret = fn(be, q, s, jobs, order + groups[i].first + k, (unsigned)c,
				 groups[i].rows, err);
		}
	}
out:
	free(rows);
	free(order);
	free(groups);
	return ret;
}

static int cu_expert_forward(struct rlb_backend *be, struct rlb_queue *q,
			     const struct rlb_expert_shape *s,
			     const struct rlb_expert_job *jobs, size_t njobs,
			     struct rlb_err *err)
{
	return run_grouped(be, q, s, jobs, njobs, forward_batch, err);
}

/* fp32 accumulation: the order of rows and replicas changes the last bits. */
static int cu_expert_backward(struct rlb_backend *be, struct rlb_queue *q,
			      const struct rlb_expert_shape *s,
			      const struct rlb_expert_job *jobs, size_t njobs,
			      struct rlb_err *err)
{
	return run_grouped(be, q, s, jobs, njobs, backward_batch, err);
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
