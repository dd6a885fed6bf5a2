/*
 * backend_cpu.c - the CPU backend of train-step (lib/backend.h): host memory
 * as device memory, every op synchronous, fp32 math from lib/expert.h, the
 * weight gradient accumulated per row in double (so the order of rows and
 * replicas changes nothing beyond the final rounding), communication
 * through the transport (lib/comm.h).  The reference and test path.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "util.h"

struct cpu_priv {
	struct rlb_world *world;
	uint32_t local;
	float *scratch;		/* one expert's parameters (row gradient, Adam gradient) */
	size_t scratch_cap;	/* floats */
};

struct rlb_queue {
	int unused;
};

struct rlb_event {
	uint64_t wall_ns;
	uint64_t cpu_ns;
	int recorded;
};

static struct cpu_priv *priv(struct rlb_backend *be)
{
	return be->priv;
}

static float *scratch(struct rlb_backend *be, size_t n, struct rlb_err *err)
{
	struct cpu_priv *p = priv(be);

	if (n > p->scratch_cap) {
		float *s = realloc(p->scratch, n * sizeof(*s));

		if (!s) {
			rlb_err_set(err, RLB_ENOMEM, "out of memory");
			return NULL;
		}
		p->scratch = s;
		p->scratch_cap = n;
	}
	return p->scratch;
}

static void cpu_destroy(struct rlb_backend *be)
{
	free(priv(be)->scratch);
	free(be->priv);
	free(be);
}

/* ---- memory ---- */

static int cpu_alloc(struct rlb_backend *be, size_t bytes, void **dev,
		     struct rlb_err *err)
{
	(void)be;
	*dev = NULL;
	if (bytes == 0)
		return rlb_err_set(err, RLB_EINVAL, "zero-byte buffer");
	*dev = malloc(bytes);
	if (!*dev)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory (%zu bytes)", bytes);
	return 0;
}

static void cpu_free(struct rlb_backend *be, void *dev)
{
	(void)be;
	free(dev);
}

static int cpu_upload(struct rlb_backend *be, struct rlb_queue *q, void *dev,
		      const void *host, size_t bytes, struct rlb_err *err)
{
	(void)be;
	(void)q;
	(void)err;
	if (bytes)
		memmove(dev, host, bytes);
	return 0;
}

static int cpu_download(struct rlb_backend *be, struct rlb_queue *q,
			void *host, const void *dev, size_t bytes,
			struct rlb_err *err)
{
	return cpu_upload(be, q, host, dev, bytes, err);
}

static int cpu_copy(struct rlb_backend *be, struct rlb_queue *q, void *dst,
		    const void *src, size_t bytes, struct rlb_err *err)
{
	return cpu_upload(be, q, dst, src, bytes, err);
}

static int cpu_zero(struct rlb_backend *be, struct rlb_queue *q, void *dev,
		    size_t bytes, struct rlb_err *err)
{
	(void)be;
	(void)q;
	(void)err;
	if (bytes)
		memset(dev, 0, bytes);
	return 0;
}

static int cpu_upload_act(struct rlb_backend *be, struct rlb_queue *q,
			  void *dev, const float *host, size_t n,
			  struct rlb_err *err)
{
	return cpu_upload(be, q, dev, host, n * sizeof(float), err);
}

static int cpu_download_act(struct rlb_backend *be, struct rlb_queue *q,
			    float *host, const void *dev, size_t n,
			    struct rlb_err *err)
{
	return cpu_upload(be, q, host, dev, n * sizeof(float), err);
}

/* The optimizer state is m then v, rlb_expert_params() floats each. */
static int cpu_upload_weights(struct rlb_backend *be, struct rlb_queue *q,
			      const struct rlb_expert_shape *s,
			      const float *host, void *w, void *opt,
			      struct rlb_err *err)
{
	size_t n = rlb_expert_params(s);

	(void)be;
	(void)q;
	(void)err;
	memmove(w, host, n * sizeof(float));
	if (opt)
		memset(opt, 0, 2 * n * sizeof(float));
	return 0;
}

static int cpu_download_weights(struct rlb_backend *be, struct rlb_queue *q,
				const struct rlb_expert_shape *s,
				const void *w, const void *opt, float *host,
				struct rlb_err *err)
{
	(void)be;
	(void)q;
	(void)opt;
	(void)err;
	memmove(host, w, rlb_expert_params(s) * sizeof(float));
	return 0;
}

/* ---- queues and events: everything has completed when an op returns ---- */

static int cpu_queue_new(struct rlb_backend *be, struct rlb_queue **q,
			 struct rlb_err *err)
{
	(void)be;
	*q = calloc(1, sizeof(**q));
	return *q ? 0 : rlb_err_set(err, RLB_ENOMEM, "out of memory");
}

static void cpu_queue_free(struct rlb_backend *be, struct rlb_queue *q)
{
	(void)be;
	free(q);
}

static int cpu_queue_sync(struct rlb_backend *be, struct rlb_queue *q,
			  struct rlb_err *err)
{
	(void)be;
	(void)q;
	(void)err;
	return 0;
}

static int cpu_event_new(struct rlb_backend *be, struct rlb_event **ev,
			 struct rlb_err *err)
{
	(void)be;
	*ev = calloc(1, sizeof(**ev));
	return *ev ? 0 : rlb_err_set(err, RLB_ENOMEM, "out of memory");
}

static void cpu_event_free(struct rlb_backend *be, struct rlb_event *ev)
{
	(void)be;
	free(ev);
}

static int cpu_event_record(struct rlb_backend *be, struct rlb_event *ev,
			    struct rlb_queue *q, struct rlb_err *err)
{
	(void)be;
	(void)q;
	(void)err;
	ev->wall_ns = rlb_now_ns();
	ev->cpu_ns = rlb_thread_cpu_ns();
	ev->recorded = 1;
	return 0;
}

static int cpu_queue_wait(struct rlb_backend *be, struct rlb_queue *q,
			  struct rlb_event *ev, struct rlb_err *err)
{
	(void)be;
	(void)q;
	(void)ev;
	(void)err;
	return 0;
}

static int cpu_elapsed(struct rlb_backend *be, struct rlb_event *start,
		       struct rlb_event *end, struct rlb_elapsed *out,
		       struct rlb_err *err)
{
	(void)be;
	if (!start->recorded || !end->recorded)
		return rlb_err_set(err, RLB_EINVAL, "event not recorded");
	out->wall_ns = end->wall_ns > start->wall_ns ? end->wall_ns - start->wall_ns : 0;
	out->cpu_ns = end->cpu_ns > start->cpu_ns ? end->cpu_ns - start->cpu_ns : 0;
	return 0;
}

/* ---- row movement ---- */

static int cpu_gather(struct rlb_backend *be, struct rlb_queue *q, size_t n,
		      uint32_t width, const uint32_t *idx, const float *scale,
		      const void *src, void *dst, struct rlb_err *err)
{
	const float *s = src;
	float *d = dst;
	size_t i, j;

	(void)be;
	(void)q;
	(void)err;
	for (i = 0; i < n; i++) {
		const float *from = s + (size_t)idx[i] * width;
		float *to = d + i * width;

		if (scale)
			for (j = 0; j < width; j++)
				to[j] = scale[i] * from[j];
		else
			memcpy(to, from, width * sizeof(float));
	}
	return 0;
}

static int cpu_combine(struct rlb_backend *be, struct rlb_queue *q,
		       size_t ntok, uint32_t topk, uint32_t hidden,
		       const uint32_t *idx, const float *gate, const void *y,
		       void *inout, struct rlb_err *err)
{
	const float one = 1.0f;
	const float *yr = y;
	float *out = inout;
	size_t t, k, r;

	(void)be;
	(void)q;
	(void)err;
	for (t = 0; t < ntok; t++)
		for (k = 0; k < topk; k++) {
			r = t * topk + k;
			rlb_combine_rows(1, hidden, gate ? gate + r : &one,
					 yr + (size_t)(idx ? idx[r] : r) * hidden,
					 out + t * hidden);
		}
	return 0;
}

/* ---- expert math ---- */

static int cpu_expert_forward(struct rlb_backend *be, struct rlb_queue *q,
			      const struct rlb_expert_shape *s,
			      const struct rlb_expert_job *jobs, size_t njobs,
			      struct rlb_err *err)
{
	size_t j;

	(void)be;
	(void)q;
	(void)err;
	for (j = 0; j < njobs; j++)
		if (jobs[j].rows)
			rlb_expert_forward(s, jobs[j].w, jobs[j].rows, jobs[j].x,
					   jobs[j].y, jobs[j].act);
	return 0;
}

/*
 * Row by row: each row's parameter gradient is computed alone in fp32 (a
 * single product per element, whatever the batch) and added in double, so
 * the sum does not depend on how the rows were split over instances.
 */
static int cpu_expert_backward(struct rlb_backend *be, struct rlb_queue *q,
			       const struct rlb_expert_shape *s,
			       const struct rlb_expert_job *jobs, size_t njobs,
			       struct rlb_err *err)
{
	size_t np = rlb_expert_params(s), nact = rlb_expert_act_per_row(s);
	size_t j, i, k;
	float *dw = scratch(be, np, err);

	(void)q;
	if (!dw)
		return err ? err->code : RLB_ENOMEM;
	for (j = 0; j < njobs; j++) {
		const struct rlb_expert_job *b = &jobs[j];
		const float *x = b->x, *act = b->act, *dy = b->dy;
		float *dx = b->dx;
		double *g = b->g;

		for (i = 0; i < b->rows; i++) {
			memset(dw, 0, np * sizeof(*dw));
			rlb_expert_backward(s, b->w, 1, x + i * s->hidden,
					    act + i * nact, dy + i * s->hidden,
					    dx + i * s->hidden, dw);
			for (k = 0; k < np; k++)
				g[k] += dw[k];
		}
	}
	return 0;
}

static int cpu_acc_add(struct rlb_backend *be, struct rlb_queue *q, size_t n,
		       void *dst, const void *src, struct rlb_err *err)
{
	double *d = dst;
	const double *s = src;
	size_t i;

	(void)be;
	(void)q;
	(void)err;
	for (i = 0; i < n; i++)
		d[i] += s[i];
	return 0;
}

static int cpu_adam(struct rlb_backend *be, struct rlb_queue *q,
		    const struct rlb_adam *a, size_t n, float scale, void *w,
		    const void *g, void *opt, struct rlb_err *err)
{
	const double *gd = g;
	float *gf = scratch(be, n, err), *m = opt;
	size_t i;

	(void)q;
	if (!gf)
		return err ? err->code : RLB_ENOMEM;
	for (i = 0; i < n; i++)
		gf[i] = (float)(scale * gd[i]);
	rlb_adam_update(a, n, w, gf, m, m + n);
	return 0;
}

/* ---- communication through the transport ---- */

static int cpu_group_start(struct rlb_backend *be, enum rlb_comm_kind c,
			   struct rlb_err *err)
{
	return rlb_world_group_start(priv(be)->world, priv(be)->local, c, err);
}

static int cpu_send(struct rlb_backend *be, enum rlb_comm_kind c,
		    uint32_t peer, const void *dev, size_t bytes,
		    struct rlb_err *err)
{
	return rlb_world_send(priv(be)->world, priv(be)->local, c, peer, dev,
			      bytes, err);
}

static int cpu_recv(struct rlb_backend *be, enum rlb_comm_kind c,
		    uint32_t peer, void *dev, size_t bytes, struct rlb_err *err)
{
	return rlb_world_recv(priv(be)->world, priv(be)->local, c, peer, dev,
			      bytes, err);
}

static int cpu_group_end(struct rlb_backend *be, enum rlb_comm_kind c,
			 struct rlb_queue *q, struct rlb_err *err)
{
	(void)q;
	return rlb_world_group_end(priv(be)->world, priv(be)->local, c, err);
}

static void cpu_abort(struct rlb_backend *be)
{
	(void)be;
}

static const struct rlb_backend_ops cpu_ops = {
	.destroy = cpu_destroy,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.upload = cpu_upload,
	.download = cpu_download,
	.copy = cpu_copy,
	.zero = cpu_zero,
	.upload_act = cpu_upload_act,
	.download_act = cpu_download_act,
	.upload_weights = cpu_upload_weights,
	.download_weights = cpu_download_weights,
	.queue_new = cpu_queue_new,
	.queue_free = cpu_queue_free,
	.queue_sync = cpu_queue_sync,
	.event_new = cpu_event_new,
	.event_free = cpu_event_free,
	.event_record = cpu_event_record,
	.queue_wait = cpu_queue_wait,
	.elapsed = cpu_elapsed,
	.gather = cpu_gather,
	.combine = cpu_combine,
	.expert_forward = cpu_expert_forward,
	.expert_backward = cpu_expert_backward,
	.acc_add = cpu_acc_add,
	.adam = cpu_adam,
	.group_start = cpu_group_start,
	.send = cpu_send,
	.recv = cpu_recv,
	.group_end = cpu_group_end,
	.abort = cpu_abort,
};

int rlb_backend_cpu_new(const struct rlb_backend_init *init,
			struct rlb_backend **out, struct rlb_err *err)
{
	struct rlb_backend *be;
	struct cpu_priv *p;

	*out = NULL;
	if (!init->world || init->ranks == 0 || init->rank >= init->ranks ||
	    init->gpus_per_node == 0 || init->ranks % init->gpus_per_node ||
	    init->local_index >= rlb_world_local(init->world))
		return rlb_err_set(err, RLB_EINVAL, "bad backend parameters");
	be = calloc(1, sizeof(*be));
	p = calloc(1, sizeof(*p));
	if (!be || !p) {
		free(be);
		free(p);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	p->world = init->world;
	p->local = init->local_index;
	be->ops = &cpu_ops;
	be->kind = RLB_BACKEND_CPU;
	be->rank = init->rank;
	be->ranks = init->ranks;
	be->gpus_per_node = init->gpus_per_node;
	be->act_bytes = sizeof(float);
	be->weight_bytes = sizeof(float);
	be->acc_bytes = sizeof(double);
	be->opt_bytes = 2 * sizeof(float);
	be->priv = p;
	*out = be;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Backend selection.                                                   */

const char *rlb_backend_name(enum rlb_backend_kind kind)
{
	switch (kind) {
	case RLB_BACKEND_CPU:
		return "cpu";
	case RLB_BACKEND_CUDA:
		return "cuda";
	}
	return NULL;
}

int rlb_backend_from_name(const char *name, enum rlb_backend_kind *kind,
			  struct rlb_err *err)
{
	if (!strcmp(name, "cpu"))
		*kind = RLB_BACKEND_CPU;
	else if (!strcmp(name, "cuda"))
		*kind = RLB_BACKEND_CUDA;
	else
		return rlb_err_set(err, RLB_EINVAL,
				   "unknown backend '%s' (cpu or cuda)", name);
	return 0;
}

int rlb_gemm_mode_from_name(const char *name, enum rlb_gemm_mode *mode,
			    struct rlb_err *err)
{
	if (!strcmp(name, "grouped"))
		*mode = RLB_GEMM_GROUPED;
	else if (!strcmp(name, "loop"))
		*mode = RLB_GEMM_LOOP;
	else
		return rlb_err_set(err, RLB_EINVAL,
				   "expected grouped or loop, got '%s'", name);
	return 0;
}

int rlb_backend_available(enum rlb_backend_kind kind)
{
	return kind == RLB_BACKEND_CPU || (kind == RLB_BACKEND_CUDA && RLB_BUILD_CUDA);
}

int rlb_backend_new(enum rlb_backend_kind kind,
		    const struct rlb_backend_init *init,
		    struct rlb_backend **out, struct rlb_err *err)
{
	*out = NULL;
	if (kind == RLB_BACKEND_CPU)
		return rlb_backend_cpu_new(init, out, err);
#if RLB_BUILD_CUDA
	if (kind == RLB_BACKEND_CUDA)
		return rlb_backend_cuda_new(init, out, err);
#endif
	return rlb_err_set(err, RLB_EUNSUPPORTED,
			   "backend '%s' is not built in (backends: cpu%s)",
			   rlb_backend_name(kind) ? rlb_backend_name(kind) : "?",
			   RLB_BUILD_CUDA ? " cuda" : "");
}

void rlb_backend_free(struct rlb_backend *be)
{
	if (be)
		be->ops->destroy(be);
}
