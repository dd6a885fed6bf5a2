/*
 * backend_cuda.cu - the CUDA + NCCL backend of train-step (lib/backend.h):
 * bf16 weights and activations with fp32 accumulation, fp32 master weights
 * and Adam moments, gate and up interleaved by row (k_gu_layout); the
 * expert GEMMs and compute kernels are in lib/cuda_expert.cu.  Queues are
 * CUDA streams and events CUDA events.  Communication: grouped
 * ncclSend / ncclRecv over an EP and a node communicator (MPI ranks), or
 * device copies between the virtual ranks of one process.  Every CUDA,
 * cuBLAS and NCCL call is checked; waits poll for asynchronous NCCL errors
 * and give up (aborting the communicators) after a timeout, so no rank
 * hangs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_cuda.h"

/* Longest wait for a queue, an event or a communicator, in seconds. */
#define WAIT_TIMEOUT_S 300.0
/*
 * A hold not released within this time lapses (the host was kept from
 * enqueueing, by a call that waits for the device), and the queue holds
 * no more.
 */
#define HOLD_LAPSE_NS 100000000ull

/* ------------------------------------------------------------------ */
/* Error checking: the one place that wraps CUDA and NCCL codes.        */

int rlb_cuda_fail(struct rlb_err *err, cudaError_t e, const char *what)
{
	cudaGetLastError();	/* clear a non-sticky error */
	if (e == cudaErrorMemoryAllocation)
		return rlb_err_set(err, RLB_ENOMEM, "%s: out of GPU memory", what);
	return rlb_err_set(err, RLB_ECUDA, "%s: %s", what, cudaGetErrorString(e));
}

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
			return rlb_cuda_fail(err, e, what);
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

/* ------------------------------------------------------------------ */
/* Conversion and layout kernels (the compute kernels: cuda_expert.cu). */

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
		return rlb_cuda_fail(err, e, "cudaMalloc");
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
	int ret = rlb_cuda_gated_only(s, err);

	if (ret == 0)
		ret = scratch(q, 2 * n * sizeof(float), (void **)&sc, err);

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
	int ret = rlb_cuda_gated_only(s, err);

	if (ret == 0)
		ret = scratch(q, 2 * n * sizeof(float), (void **)&sc, err);
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
		return rlb_cuda_fail(err, e, "cudaStreamCreate");
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
		return rlb_cuda_fail(err, e, "cudaEventCreate");
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
	rlb_cuda_gather,
	rlb_cuda_combine,
	rlb_cuda_expert_forward,
	rlb_cuda_expert_backward,
	rlb_cuda_acc_add,
	rlb_cuda_adam,
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
	rlb_cuda_blas_release(p);
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
		return rlb_cuda_fail(err, e, "cudaGetDeviceCount");
	ret = rlb_cuda_pick_device(init->rank, init->gpus_per_node, ndev, p->virt,
				   init->device, &p->device, err);
	if (ret)
		return ret;
	CU(cudaSetDevice(p->device), "cudaSetDevice");
	return rlb_cuda_blas_init(p, err);
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
	p->gemm_grouped = init->gemm != RLB_GEMM_LOOP;
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

