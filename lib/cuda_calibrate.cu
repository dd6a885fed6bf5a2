/*
 * cuda_calibrate.cu - the measurements of relibra calibrate on the local
 * GPUs (rlb_calibrate_measure, calibrate.h): the expert GEMMs of one
 * configured shape run through the CUDA backend itself (one rank, so the
 * same batched cuBLAS calls as train-step) over a range of rows per
 * expert, and an NCCL all-to-all among the GPUs of this process.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "backend.h"
#include "calibrate.h"
#include "comm.h"
#include "stats.h"
#include "util.h"

#define WARMUP 2
/* All-to-all message sizes per GPU pair: 4 KiB, 16 KiB, ..., 64 MiB. */
#define A2A_MIN_BYTES 4096
#define A2A_MAX_BYTES (64u << 20)

static int cuda_fail(struct rlb_err *err, cudaError_t e, const char *what)
{
	cudaGetLastError();
	if (e == cudaErrorMemoryAllocation)
		return rlb_err_set(err, RLB_ENOMEM, "%s: out of GPU memory", what);
	return rlb_err_set(err, RLB_ECUDA, "%s: %s", what, cudaGetErrorString(e));
}

static int nccl_fail(struct rlb_err *err, ncclResult_t r, const char *what)
{
	return rlb_err_set(err, RLB_ENCCL, "%s: %s", what, ncclGetErrorString(r));
}

/* The median of V[0..n) (sorts it): p50 of lib/stats.h's distribution. */
static double median(double *v, size_t n)
{
	struct rlb_dist d;

	rlb_dist_compute(&d, v, n);
	return d.p50;
}

/* ------------------------------------------------------------------ */
/* Expert GEMMs through the backend.                                    */

struct gemm_bench {
	struct rlb_world *world;
	struct rlb_backend *be;
	struct rlb_queue *q;
	struct rlb_event *ev0, *ev1;
	void **w;			/* [experts] compute weights */
	void *x, *y, *act;
	struct rlb_expert_job *jobs;
	double *times;
	float *host;
};

static void gemm_bench_free(struct gemm_bench *b, uint32_t experts)
{
	struct rlb_backend *be = b->be;
	uint32_t e;

	if (be) {
		for (e = 0; b->w && e < experts; e++)
			be->ops->free(be, b->w[e]);
		be->ops->free(be, b->x);
		be->ops->free(be, b->y);
		be->ops->free(be, b->act);
		be->ops->event_free(be, b->ev0);
		be->ops->event_free(be, b->ev1);
		be->ops->queue_free(be, b->q);
		rlb_backend_free(be);
	}
	rlb_world_free(b->world);
	free(b->w);
	free(b->jobs);
	free(b->times);
	free(b->host);
}

/* Fill the bench: weights from lib/expert.c, inputs in [-1, 1). */
static int gemm_bench_init(struct gemm_bench *b, const struct rlb_calib_opts *o,
			   struct rlb_err *err)
{
	struct rlb_expert_shape s = { o->hidden, o->ffn, 0 };
	struct rlb_backend_init bi;
	size_t np = rlb_expert_params(&s), rows = o->rows_max * (size_t)o->experts;
	size_t chunk = 1024, i, done;
	struct rlb_backend *be;
	uint32_t e;
	int ret;

	ret = rlb_world_virtual_new(&b->world, 1, err);
	if (ret == 0)
		ret = rlb_world_set_node_size(b->world, 1, err);
	if (ret)
		return ret;
	memset(&bi, 0, sizeof(bi));
	bi.ranks = 1;
	bi.gpus_per_node = 1;
	bi.device = o->device;
	bi.world = b->world;
	bi.gemm = o->gemm;
	ret = rlb_backend_cuda_new(&bi, &b->be, err);
	if (ret)
		return ret;
	be = b->be;
	b->w = (void **)calloc(o->experts, sizeof(*b->w));
	b->jobs = (struct rlb_expert_job *)calloc(o->experts, sizeof(*b->jobs));
	b->times = (double *)calloc(o->repeats, sizeof(*b->times));
	b->host = (float *)malloc((np > chunk * o->hidden ? np : chunk * o->hidden) *
				  sizeof(float));
	if (!b->w || !b->jobs || !b->times || !b->host)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = be->ops->queue_new(be, &b->q, err);
	if (ret == 0)
		ret = be->ops->event_new(be, &b->ev0, err);
	if (ret == 0)
		ret = be->ops->event_new(be, &b->ev1, err);
	for (e = 0; ret == 0 && e < o->experts; e++) {
		rlb_expert_init(&s, 1, 0, e, b->host);
		ret = be->ops->alloc(be, np * be->weight_bytes, &b->w[e], err);
		if (ret == 0)
			ret = be->ops->upload_weights(be, b->q, &s, b->host, b->w[e], NULL, err);
		if (ret == 0)
			ret = be->ops->queue_sync(be, b->q, err);
	}
	if (ret == 0)
		ret = be->ops->alloc(be, rows * o->hidden * be->act_bytes, &b->x, err);
	if (ret == 0)
		ret = be->ops->alloc(be, rows * o->hidden * be->act_bytes, &b->y, err);
	if (ret == 0)
		ret = be->ops->alloc(be, rows * 2 * o->ffn * be->act_bytes, &b->act, err);
	/* Inputs: one block of rows uploaded, then tiled on the device. */
	for (i = 0; ret == 0 && i < chunk; i++)
		rlb_hidden_init(1, 0, 0, (uint32_t)i, o->hidden, b->host + i * o->hidden);
	if (ret == 0)
		ret = be->ops->upload_act(be, b->q, b->x, b->host,
					  (rows < chunk ? rows : chunk) * o->hidden, err);
	for (done = chunk; ret == 0 && done < rows; done += chunk) {
		size_t n = rows - done < chunk ? rows - done : chunk;

		ret = be->ops->copy(be, b->q, (char *)b->x + done * o->hidden * be->act_bytes,
				    b->x, n * o->hidden * be->act_bytes, err);
	}
	return ret ? ret : be->ops->queue_sync(be, b->q, err);
}

static int gemm_points(const struct rlb_calib_opts *o, struct rlb_calib_result *res,
		       struct rlb_err *err)
{
	struct rlb_expert_shape s = { o->hidden, o->ffn, 0 };
	struct gemm_bench b;
	struct rlb_elapsed el;
	size_t m, r;
	uint32_t e;
	int ret;

	memset(&b, 0, sizeof(b));
	ret = gemm_bench_init(&b, o, err);
	for (m = o->rows_min; ret == 0 && m <= o->rows_max && res->ngemm < RLB_CALIB_MAX_POINTS;
	     m *= 2) {
		struct rlb_backend *be = b.be;

		for (e = 0; e < o->experts; e++) {
			size_t first = e * m;

			b.jobs[e].w = b.w[e];
			b.jobs[e].rows = m;
			b.jobs[e].x = (char *)b.x + first * o->hidden * be->act_bytes;
			b.jobs[e].y = (char *)b.y + first * o->hidden * be->act_bytes;
			b.jobs[e].act = (char *)b.act + first * 2 * o->ffn * be->act_bytes;
		}
		for (r = 0; ret == 0 && r < WARMUP + o->repeats; r++) {
			ret = be->ops->event_record(be, b.ev0, b.q, err);
			if (ret == 0)
				ret = be->ops->expert_forward(be, b.q, &s, b.jobs, o->experts, err);
			if (ret == 0)
				ret = be->ops->event_record(be, b.ev1, b.q, err);
			if (ret == 0)
				ret = be->ops->elapsed(be, b.ev0, b.ev1, &el, err);
			if (ret == 0 && r >= WARMUP)
				b.times[r - WARMUP] = el.wall_ns / 1e9;
		}
		if (ret == 0) {
			res->gemm[res->ngemm].x = (double)m;
			res->gemm[res->ngemm].seconds = median(b.times, o->repeats) / o->experts;
			res->ngemm++;
		}
	}
	gemm_bench_free(&b, o->experts);
	return ret;
}

/* ------------------------------------------------------------------ */
/* NCCL all-to-all among the GPUs of this process.                      */

struct a2a_gpu {
	ncclComm_t comm;
	cudaStream_t s;
	cudaEvent_t ev0, ev1;
	void *send, *recv;
};

#define CU(call, what) \
	do { cudaError_t e_ = (call); \
	     if (e_ != cudaSuccess) { ret = cuda_fail(err, e_, what); goto out; } } while (0)
#define NC(call, what) \
	do { ncclResult_t r_ = (call); \
	     if (r_ != ncclSuccess) { ret = nccl_fail(err, r_, what); goto out; } } while (0)

static int a2a_points(const struct rlb_calib_opts *o, uint32_t gpus,
		      struct rlb_calib_result *res, struct rlb_err *err)
{
	struct a2a_gpu *g = (struct a2a_gpu *)calloc(gpus, sizeof(*g));
	ncclComm_t *comms = (ncclComm_t *)calloc(gpus, sizeof(*comms));
	int *devs = (int *)calloc(gpus, sizeof(*devs));
	double *times = (double *)calloc(o->repeats, sizeof(*times));
	size_t bytes, r, per = (size_t)A2A_MAX_BYTES * gpus;
	uint32_t i, j;
	int ret = 0, comms_made = 0, grouped = 0;

	if (!g || !comms || !devs || !times) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < gpus; i++)
		devs[i] = o->device + (int)i;
	NC(ncclCommInitAll(comms, (int)gpus, devs), "ncclCommInitAll");
	comms_made = 1;
	for (i = 0; i < gpus; i++) {
		g[i].comm = comms[i];
		CU(cudaSetDevice(devs[i]), "cudaSetDevice");
		CU(cudaStreamCreateWithFlags(&g[i].s, cudaStreamNonBlocking), "cudaStreamCreate");
		CU(cudaEventCreate(&g[i].ev0), "cudaEventCreate");
		CU(cudaEventCreate(&g[i].ev1), "cudaEventCreate");
		CU(cudaMalloc(&g[i].send, per), "cudaMalloc");
		CU(cudaMalloc(&g[i].recv, per), "cudaMalloc");
		/* on the stream itself: a non-blocking stream does not wait for the legacy one */
		CU(cudaMemsetAsync(g[i].send, 1, per, g[i].s), "cudaMemsetAsync");
	}
	for (bytes = A2A_MIN_BYTES; bytes <= A2A_MAX_BYTES && res->na2a < RLB_CALIB_MAX_POINTS;
	     bytes *= 4) {
		for (r = 0; r < WARMUP + o->repeats; r++) {
			double worst = 0;

			for (i = 0; i < gpus; i++) {
				CU(cudaSetDevice(devs[i]), "cudaSetDevice");
				CU(cudaEventRecord(g[i].ev0, g[i].s), "cudaEventRecord");
			}
			NC(ncclGroupStart(), "ncclGroupStart");
			grouped = 1;
			for (i = 0; i < gpus; i++)
				for (j = 0; j < gpus; j++) {
					if (j == i)
						continue;
					NC(ncclSend((char *)g[i].send + j * bytes, bytes, ncclUint8,
						    (int)j, g[i].comm, g[i].s), "ncclSend");
					NC(ncclRecv((char *)g[i].recv + j * bytes, bytes, ncclUint8,
						    (int)j, g[i].comm, g[i].s), "ncclRecv");
				}
			grouped = 0;
			NC(ncclGroupEnd(), "ncclGroupEnd");
			for (i = 0; i < gpus; i++) {
				float ms = 0;

				CU(cudaSetDevice(devs[i]), "cudaSetDevice");
				CU(cudaEventRecord(g[i].ev1, g[i].s), "cudaEventRecord");
				CU(cudaEventSynchronize(g[i].ev1), "cudaEventSynchronize");
				CU(cudaEventElapsedTime(&ms, g[i].ev0, g[i].ev1), "cudaEventElapsedTime");
				if (ms / 1e3 > worst)
					worst = ms / 1e3;
			}
			if (r >= WARMUP)
				times[r - WARMUP] = worst;
		}
		res->a2a[res->na2a].x = (double)bytes * (gpus - 1);
		res->a2a[res->na2a].seconds = median(times, o->repeats);
		res->na2a++;
	}
	res->gpus_used = gpus;
out:
	/* A failed send or receive leaves the group open: close it, then abort. */
	if (grouped)
		ncclGroupEnd();
	for (i = 0; ret && comms_made && i < gpus; i++)
		ncclCommAbort(comms[i]);
	for (i = 0; g && i < gpus; i++) {
		cudaSetDevice(devs[i]);
		if (g[i].s)
			cudaStreamSynchronize(g[i].s);
		cudaFree(g[i].send);
		cudaFree(g[i].recv);
		if (g[i].ev0)
			cudaEventDestroy(g[i].ev0);
		if (g[i].ev1)
			cudaEventDestroy(g[i].ev1);
		if (g[i].s)
			cudaStreamDestroy(g[i].s);
	}
	for (i = 0; !ret && comms_made && i < gpus; i++)
		ncclCommDestroy(comms[i]);
	free(g);
	free(comms);
	free(devs);
	free(times);
	return ret;
}

#undef CU
#undef NC

extern "C" int rlb_calibrate_measure(const struct rlb_calib_opts *o,
				     struct rlb_calib_result *res,
				     struct rlb_err *err)
{
	struct cudaDeviceProp prop;
	uint32_t gpus;
	int ndev = 0, ret;
	cudaError_t e;

	memset(res, 0, sizeof(*res));
	if (o->hidden == 0 || o->ffn == 0 || o->experts == 0 || o->experts > 4096 ||
	    o->repeats == 0 || o->repeats > 1000 || o->rows_min == 0 ||
	    o->rows_min > o->rows_max || o->rows_max > (1u << 20) || o->device < 0)
		return rlb_err_set(err, RLB_EINVAL, "bad calibration parameters");
	e = cudaGetDeviceCount(&ndev);
	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || ndev == 0) {
		cudaGetLastError();
		return rlb_err_set(err, RLB_EUNSUPPORTED, "no CUDA device");
	}
	if (e != cudaSuccess)
		return cuda_fail(err, e, "cudaGetDeviceCount");
	res->gpus_found = (uint32_t)ndev;
	if (o->device >= ndev)
		return rlb_err_set(err, RLB_EINVAL, "CUDA device %d does not exist (%d found)",
				   o->device, ndev);
	gpus = o->gpus ? o->gpus : (uint32_t)(ndev - o->device);
	if (gpus > (uint32_t)(ndev - o->device))
		return rlb_err_set(err, RLB_EINVAL,
				   "%u GPUs from device %d asked, %d found", gpus, o->device, ndev);
	e = cudaGetDeviceProperties(&prop, o->device);
	if (e != cudaSuccess)
		return cuda_fail(err, e, "cudaGetDeviceProperties");
	snprintf(res->device, sizeof(res->device), "%.*s", (int)sizeof(res->device) - 1,
		 prop.name);
	res->gpus_used = 1;
	ret = gemm_points(o, res, err);
	if (ret == 0 && gpus > 1)
		ret = a2a_points(o, gpus, res, err);
	return ret;
}
