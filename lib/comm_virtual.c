/*
 * comm_virtual.c - the transport's entry points (lib/comm.h) and the
 * virtual transport: N ranks driven by one process, point-to-point
 * transfers matched per (communicator, sender, receiver) in posting order
 * and done as memory copies the moment both sides are posted.
 */
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "util.h"

#define VIRTUAL_MAX_RANKS 1024u

/* One posted, not yet matched transfer. */
struct vpost {
	int is_send;
	void *buf;		/* const for sends */
	size_t bytes;
};

/* The FIFO of unmatched transfers of one (communicator, sender, receiver). */
struct vqueue {
	struct vpost *post;
	size_t head, n, cap;	/* entries post[head .. n) */
};

struct vworld {
	struct vqueue **q;	/* [kind][sender][receiver], allocated lazily */
	size_t pending;		/* unmatched transfers over all queues */
	uint32_t ended[RLB_COMM_KINDS];	/* local ranks whose group ended */
	uint8_t *in_group;	/* [kind][local] */
};

/* ------------------------------------------------------------------ */
/* Entry points.                                                        */

const char *rlb_world_name(const struct rlb_world *w)
{
	return w->ops->name;
}

uint32_t rlb_world_size(const struct rlb_world *w)
{
	return w->size;
}

uint32_t rlb_world_local(const struct rlb_world *w)
{
	return w->local;
}

uint32_t rlb_world_first(const struct rlb_world *w)
{
	return w->first;
}

uint32_t rlb_world_host_procs(const struct rlb_world *w)
{
	return w->host_procs ? w->host_procs : 1;
}

void rlb_world_free(struct rlb_world *w)
{
	if (w)
		w->ops->destroy(w);
}

int rlb_world_set_node_size(struct rlb_world *w, uint32_t gpus_per_node,
			    struct rlb_err *err)
{
	if (gpus_per_node == 0 || w->size % gpus_per_node)
		return rlb_err_set(err, RLB_EINVAL,
				   "%u ranks per node do not divide %u ranks",
				   gpus_per_node, w->size);
	return w->ops->set_node_size(w, gpus_per_node, err);
}

void rlb_world_set_timeout(struct rlb_world *w, double seconds)
{
	w->timeout_s = seconds > 0 ? seconds : 0;
}

void rlb_world_set_copy(struct rlb_world *w, rlb_world_copy_fn fn, void *ctx)
{
	w->copy = fn;
	w->copy_ctx = ctx;
}

static int check_peer(const struct rlb_world *w, uint32_t local,
		      enum rlb_comm_kind c, uint32_t peer, struct rlb_err *err)
{
	uint32_t me = w->first + local;

	if (local >= w->local)
		return rlb_err_set(err, RLB_EINVAL, "local rank %u out of range",
				   local);
	if (peer >= w->size)
		return rlb_err_set(err, RLB_EINVAL, "peer rank %u out of range (%u ranks)",
				   peer, w->size);
	if (c == RLB_COMM_NODE && w->gpus_per_node &&
	    peer / w->gpus_per_node != me / w->gpus_per_node)
		return rlb_err_set(err, RLB_EINVAL,
				   "rank %u is not in the node of rank %u", peer, me);
	if ((unsigned)c >= RLB_COMM_KINDS)
		return rlb_err_set(err, RLB_EINVAL, "no communicator %d", (int)c);
	return 0;
}

int rlb_world_group_start(struct rlb_world *w, uint32_t local,
			  enum rlb_comm_kind c, struct rlb_err *err)
{
	if (local >= w->local || (unsigned)c >= RLB_COMM_KINDS)
		return rlb_err_set(err, RLB_EINVAL, "bad group start");
	return w->ops->group_start(w, local, c, err);
}

int rlb_world_send(struct rlb_world *w, uint32_t local, enum rlb_comm_kind c,
		   uint32_t peer, const void *buf, size_t bytes,
		   struct rlb_err *err)
{
	int ret = check_peer(w, local, c, peer, err);

	if (ret || bytes == 0)
		return ret;
	return w->ops->send(w, local, c, peer, buf, bytes, err);
}

int rlb_world_recv(struct rlb_world *w, uint32_t local, enum rlb_comm_kind c,
		   uint32_t peer, void *buf, size_t bytes, struct rlb_err *err)
{
	int ret = check_peer(w, local, c, peer, err);

	if (ret || bytes == 0)
		return ret;
	return w->ops->recv(w, local, c, peer, buf, bytes, err);
}

int rlb_world_group_end(struct rlb_world *w, uint32_t local,
			enum rlb_comm_kind c, struct rlb_err *err)
{
	if (local >= w->local || (unsigned)c >= RLB_COMM_KINDS)
		return rlb_err_set(err, RLB_EINVAL, "bad group end");
	return w->ops->group_end(w, local, c, err);
}

void rlb_world_reduce_rows(const double *v, size_t nrows, size_t n,
			   enum rlb_reduce op, double *out)
{
	size_t r, i;

	for (i = 0; i < n; i++)
		out[i] = nrows ? v[i] : 0;
	for (r = 1; r < nrows; r++)
		for (i = 0; i < n; i++) {
			double x = v[r * n + i];

			if (op == RLB_REDUCE_SUM)
				out[i] += x;
			else if (op == RLB_REDUCE_MAX ? x > out[i] : x < out[i])
				out[i] = x;
		}
}

int rlb_world_allreduce(struct rlb_world *w, double *v, size_t n,
			enum rlb_reduce op, struct rlb_err *err)
{
	return w->ops->allreduce(w, v, n, op, err);
}

int rlb_world_gather(struct rlb_world *w, const void *send, size_t bytes,
		     void *recv, struct rlb_err *err)
{
	return w->ops->gather(w, send, bytes, recv, err);
}

int rlb_world_agree(struct rlb_world *w, const struct rlb_err *errs,
		    struct rlb_err *out, uint32_t *rank, struct rlb_err *err)
{
	return w->ops->agree(w, errs, out, rank, err);
}

int rlb_world_barrier(struct rlb_world *w, struct rlb_err *err)
{
	return w->ops->barrier(w, err);
}

void rlb_world_abort(struct rlb_world *w, int status)
{
	if (w)
		w->ops->abort(w, status);
}

/* ------------------------------------------------------------------ */
/* The virtual transport.                                               */

static struct vqueue **vq_slot(struct rlb_world *w, enum rlb_comm_kind c,
			       uint32_t from, uint32_t to)
{
	struct vworld *v = w->priv;

	return &v->q[((size_t)c * w->size + from) * w->size + to];
}

static int vcopy(struct rlb_world *w, void *dst, const void *src, size_t bytes,
		 struct rlb_err *err)
{
	if (w->copy)
		return w->copy(w->copy_ctx, dst, src, bytes, err);
	memcpy(dst, src, bytes);
	return 0;
}

/* Match a new post against the queue of (c, from, to), or enqueue it. */
static int vpost(struct rlb_world *w, enum rlb_comm_kind c, uint32_t from,
		 uint32_t to, int is_send, void *buf, size_t bytes,
		 struct rlb_err *err)
{
	struct vworld *v = w->priv;
	struct vqueue **slot = vq_slot(w, c, from, to), *q = *slot;
	struct vpost *p;

	if (!q) {
		q = calloc(1, sizeof(*q));
		if (!q)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		*slot = q;
	}
	if (q->head < q->n && q->post[q->head].is_send != is_send) {
		p = &q->post[q->head];
		if (p->bytes != bytes)
			return rlb_err_set(err, RLB_EINVAL,
					   "rank %u sends %zu bytes to rank %u, which receives %zu",
					   from, is_send ? bytes : p->bytes, to,
					   is_send ? p->bytes : bytes);
		if (++q->head == q->n)
			q->head = q->n = 0;
		v->pending--;
		return is_send ? vcopy(w, p->buf, buf, bytes, err) :
				 vcopy(w, buf, p->buf, bytes, err);
	}
	if (rlb_grow(&q->post, &q->cap, q->n + 1, sizeof(*q->post)))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	q->post[q->n++] = (struct vpost){ is_send, buf, bytes };
	v->pending++;
	return 0;
}

static int v_group_start(struct rlb_world *w, uint32_t local,
			 enum rlb_comm_kind c, struct rlb_err *err)
{
	struct vworld *v = w->priv;

	if (v->in_group[c * w->local + local])
		return rlb_err_set(err, RLB_EINVAL, "rank %u: group already started",
				   w->first + local);
	v->in_group[c * w->local + local] = 1;
	return 0;
}

static int v_send(struct rlb_world *w, uint32_t local, enum rlb_comm_kind c,
		  uint32_t peer, const void *buf, size_t bytes,
		  struct rlb_err *err)
{
	return vpost(w, c, w->first + local, peer, 1, (void *)buf, bytes, err);
}

static int v_recv(struct rlb_world *w, uint32_t local, enum rlb_comm_kind c,
		  uint32_t peer, void *buf, size_t bytes, struct rlb_err *err)
{
	return vpost(w, c, peer, w->first + local, 0, buf, bytes, err);
}

static int v_group_end(struct rlb_world *w, uint32_t local,
		       enum rlb_comm_kind c, struct rlb_err *err)
{
	struct vworld *v = w->priv;
	uint32_t from, to;

	if (!v->in_group[c * w->local + local])
		return rlb_err_set(err, RLB_EINVAL, "rank %u: group not started",
				   w->first + local);
	v->in_group[c * w->local + local] = 0;
	if (++v->ended[c] < w->local)
		return 0;
	v->ended[c] = 0;
	if (v->pending == 0)
		return 0;
	for (from = 0; from < w->size; from++)
		for (to = 0; to < w->size; to++) {
			struct vqueue *q = *vq_slot(w, c, from, to);

			if (q && q->head < q->n)
				return rlb_err_set(err, RLB_EINVAL,
						   "unmatched %s from rank %u to rank %u",
						   q->post[q->head].is_send ? "send" : "receive",
						   from, to);
		}
	return 0;
}

static int v_set_node_size(struct rlb_world *w, uint32_t gpus_per_node,
			   struct rlb_err *err)
{
	(void)err;
	w->gpus_per_node = gpus_per_node;
	return 0;
}

static int v_allreduce(struct rlb_world *w, double *v, size_t n,
		       enum rlb_reduce op, struct rlb_err *err)
{
	uint32_t i;

	(void)err;
	rlb_world_reduce_rows(v, w->local, n, op, v);
	for (i = 1; i < w->local; i++)
		memcpy(v + (size_t)i * n, v, n * sizeof(*v));
	return 0;
}

static int v_gather(struct rlb_world *w, const void *send, size_t bytes,
		    void *recv, struct rlb_err *err)
{
	(void)err;
	if (recv && bytes)
		memcpy(recv, send, bytes * w->local);
	return 0;
}

static int v_agree(struct rlb_world *w, const struct rlb_err *errs,
		   struct rlb_err *out, uint32_t *rank, struct rlb_err *err)
{
	uint32_t i;

	(void)err;
	for (i = 0; i < w->local; i++)
		if (errs[i].code) {
			if (out)
				*out = errs[i];
			if (rank)
				*rank = w->first + i;
			return errs[i].code;
		}
	return 0;
}

static int v_barrier(struct rlb_world *w, struct rlb_err *err)
{
	(void)w;
	(void)err;
	return 0;
}

static void v_abort(struct rlb_world *w, int status)
{
	(void)w;
	(void)status;
}

static void v_destroy(struct rlb_world *w)
{
	struct vworld *v = w->priv;
	size_t i, n = (size_t)RLB_COMM_KINDS * w->size * w->size;

	if (v) {
		for (i = 0; v->q && i < n; i++) {
			if (v->q[i])
				free(v->q[i]->post);
			free(v->q[i]);
		}
		free(v->q);
		free(v->in_group);
		free(v);
	}
	free(w);
}

static const struct rlb_world_ops virtual_ops = {
	.name = "virtual",
	.destroy = v_destroy,
	.set_node_size = v_set_node_size,
	.group_start = v_group_start,
	.send = v_send,
	.recv = v_recv,
	.group_end = v_group_end,
	.allreduce = v_allreduce,
	.gather = v_gather,
	.agree = v_agree,
	.barrier = v_barrier,
	.abort = v_abort,
};

int rlb_world_virtual_new(struct rlb_world **out, uint32_t ranks,
			  struct rlb_err *err)
{
	struct rlb_world *w;
	struct vworld *v;

	*out = NULL;
	if (ranks == 0 || ranks > VIRTUAL_MAX_RANKS)
		return rlb_err_set(err, RLB_EINVAL,
				   "virtual ranks must be 1 to %u, not %u",
				   VIRTUAL_MAX_RANKS, ranks);
	w = calloc(1, sizeof(*w));
	v = calloc(1, sizeof(*v));
	if (w)
		w->priv = v;
	if (!w || !v)
		goto nomem;
	w->ops = &virtual_ops;
	w->size = w->local = ranks;
	w->timeout_s = 300;
	v->q = calloc((size_t)RLB_COMM_KINDS * ranks * ranks, sizeof(*v->q));
	v->in_group = calloc((size_t)RLB_COMM_KINDS * ranks, 1);
	if (!v->q || !v->in_group)
		goto nomem;
	*out = w;
	return 0;
nomem:
	if (w)
		v_destroy(w);
	else
		free(v);
	return rlb_err_set(err, RLB_ENOMEM, "out of memory");
}
