/*
 * cuda_plan.c - the CUDA backend's decisions that need no GPU
 * (cuda_plan.h): device choice, node communicators, the NCCL id as
 * doubles, and the batching of expert GEMMs.  Plain C, always built.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_plan.h"

int rlb_cuda_pick_device(uint32_t rank, uint32_t gpus_per_node, int ndev,
			 int virtual_ranks, int requested, int *device,
			 struct rlb_err *err)
{
	*device = -1;
	if (ndev <= 0)
		return rlb_err_set(err, RLB_EUNSUPPORTED, "no CUDA device");
	if (requested >= 0) {
		if (requested >= ndev)
			return rlb_err_set(err, RLB_EINVAL,
					   "CUDA device %d does not exist (%d found)",
					   requested, ndev);
		*device = requested;
		return 0;
	}
	if (virtual_ranks) {
		*device = 0;
		return 0;
	}
	if (gpus_per_node == 0)
		return rlb_err_set(err, RLB_EINVAL, "zero GPUs per node");
	/* One device seen: the launcher gave this process its own GPU. */
	if (ndev == 1) {
		*device = 0;
		return 0;
	}
	/* NCCL takes one rank per GPU: two ranks never share a device. */
	if (rank % gpus_per_node >= (uint32_t)ndev)
		return rlb_err_set(err, RLB_EINVAL,
				   "rank %u is GPU %u of its node, but %d CUDA devices are visible "
				   "(NCCL takes one rank per GPU)", rank,
				   rank % gpus_per_node, ndev);
	*device = (int)(rank % gpus_per_node);
	return 0;
}

int rlb_cuda_node_of(uint32_t rank, uint32_t ranks, uint32_t gpus_per_node,
		     struct rlb_cuda_node *out, struct rlb_err *err)
{
	memset(out, 0, sizeof(*out));
	if (gpus_per_node == 0 || ranks % gpus_per_node || rank >= ranks)
		return rlb_err_set(err, RLB_EINVAL,
				   "rank %u of %u in nodes of %u GPUs", rank, ranks,
				   gpus_per_node);
	out->node = rank / gpus_per_node;
	out->index = rank % gpus_per_node;
	out->size = gpus_per_node;
	return 0;
}

void rlb_cuda_bytes_to_doubles(const void *bytes, size_t n, double *out)
{
	const unsigned char *b = bytes;
	size_t i;

	for (i = 0; i < n; i++)
		out[i] = b[i];
}

int rlb_cuda_doubles_to_bytes(const double *v, size_t n, void *bytes,
			      struct rlb_err *err)
{
	unsigned char *b = bytes;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!(v[i] >= 0 && v[i] <= 255) || v[i] != floor(v[i]))
			return rlb_err_set(err, RLB_ECORRUPT,
					   "NCCL id byte %zu is %g, not 0..255", i, v[i]);
		b[i] = (unsigned char)v[i];
	}
	return 0;
}

struct keyed {
	size_t rows;
	size_t index;
};

static int by_rows(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;

	if (x->rows != y->rows)
		return x->rows < y->rows ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

int rlb_gemm_batches(const size_t *rows, size_t n, size_t max_batch,
		     size_t max_rows, size_t *order, struct rlb_gemm_batch *batches,
		     size_t *nbatches, struct rlb_err *err)
{
	struct keyed *k;
	size_t i, m = 0, nb = 0;

	*nbatches = 0;
	if (max_batch == 0 || max_rows == 0)
		return rlb_err_set(err, RLB_EINVAL, "batch of %s 0",
				   max_batch == 0 ? "jobs" : "rows");
	k = malloc((n ? n : 1) * sizeof(*k));
	if (!k)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; i < n; i++)
		if (rows[i]) {
			k[m].rows = rows[i];
			k[m].index = i;
			m++;
		}
	qsort(k, m, sizeof(*k), by_rows);
	for (i = 0; i < m; i++) {
		struct rlb_gemm_batch *b = nb ? &batches[nb - 1] : NULL;

		order[i] = k[i].index;
		if (!b || b->count == max_batch || b->rows + k[i].rows > max_rows ||
		    b->rows + k[i].rows < b->rows) {
			b = &batches[nb++];
			b->first = i;
			b->count = 0;
			b->rows = 0;
		}
		b->count++;
		b->rows += k[i].rows;
	}
	free(k);
	*nbatches = nb;
	return 0;
}

#if !RLB_BUILD_CUDA
int rlb_cuda_device_count(void)
{
	return 0;
}
#endif
