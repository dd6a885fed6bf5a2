/*
 * comm_mpi.c - the MPI transport of train-step (lib/comm.h): one rank per
 * process, grouped non-blocking point-to-point transfers on a duplicate of
 * MPI_COMM_WORLD (EP) and a split of it by node (NODE), collectives with
 * bounded waits, MPI_Abort.  The only file that includes mpi.h; without
 * MPI (RLB_HAVE_MPI 0) rlb_world_mpi_new reports that it is not built in.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"
#include "util.h"

#ifndef RLB_HAVE_MPI
#define RLB_HAVE_MPI 0
#endif

#if RLB_HAVE_MPI

#include <mpi.h>

#define MPI_CHUNK_BYTES ((size_t)1 << 30)	/* largest single message */

struct mworld {
	MPI_Comm comm[RLB_COMM_KINDS];
	MPI_Request *req;
	size_t nreq, cap;
	int in_group[RLB_COMM_KINDS];
};

static int mpi_fail(struct rlb_err *err, int rc, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
		snprintf(msg, sizeof(msg), "error %d", rc);
	msg[len < (int)sizeof(msg) ? len : (int)sizeof(msg) - 1] = '\0';
	return rlb_err_set(err, RLB_EMPI, "%s: %s", what, msg);
}

/* Wait for N requests, polling, for at most the world's timeout. */
static int wait_all(struct rlb_world *w, MPI_Request *req, int n,
		    const char *what, struct rlb_err *err)
{
	uint64_t start = rlb_now_ns(), limit_ns = (uint64_t)(w->timeout_s * 1e9);
	struct timespec nap = { 0, 0 };
	int done = 0, rc;

	while (n > 0) {
		rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
		if (rc != MPI_SUCCESS)
			return mpi_fail(err, rc, what);
		if (done)
			return 0;
		if (limit_ns && rlb_now_ns() - start > limit_ns)
			return rlb_err_set(err, RLB_EMPI, "%s: timed out after %.0f s",
					   what, w->timeout_s);
		/* Back off from busy polling to 1 ms naps. */
		if (nap.tv_nsec < 1000000)
			nap.tv_nsec = nap.tv_nsec ? nap.tv_nsec * 2 : 1000;
		nanosleep(&nap, NULL);
	}
	return 0;
}

static int m_set_node_size(struct rlb_world *w, uint32_t gpus_per_node,
			   struct rlb_err *err)
{
	struct mworld *m = w->priv;
	int rc;

	if (m->comm[RLB_COMM_NODE] != MPI_COMM_NULL)
		MPI_Comm_free(&m->comm[RLB_COMM_NODE]);
	rc = MPI_Comm_split(m->comm[RLB_COMM_EP], (int)(w->first / gpus_per_node),
			    (int)w->first, &m->comm[RLB_COMM_NODE]);
	if (rc != MPI_SUCCESS)
		return mpi_fail(err, rc, "MPI_Comm_split");
	MPI_Comm_set_errhandler(m->comm[RLB_COMM_NODE], MPI_ERRORS_RETURN);
	w->gpus_per_node = gpus_per_node;
	return 0;
}

static int m_group_start(struct rlb_world *w, uint32_t local,
			 enum rlb_comm_kind c, struct rlb_err *err)
{
	struct mworld *m = w->priv;

	(void)local;
	if (m->in_group[c])
		return rlb_err_set(err, RLB_EINVAL, "group already started");
	m->in_group[c] = 1;
	return 0;
}

/* Post one transfer in chunks of at most MPI_CHUNK_BYTES. */
static int m_post(struct rlb_world *w, enum rlb_comm_kind c, uint32_t peer,
		  void *buf, size_t bytes, int is_send, struct rlb_err *err)
{
	struct mworld *m = w->priv;
	MPI_Comm comm = m->comm[c];
	int dest = (int)peer, rc;
	size_t off;

	if (c == RLB_COMM_NODE) {
		if (comm == MPI_COMM_NULL)
			return rlb_err_set(err, RLB_EINVAL, "node communicator not set");
		dest = (int)(peer % w->gpus_per_node);
	}
	for (off = 0; off < bytes; off += MPI_CHUNK_BYTES) {
		size_t len = bytes - off < MPI_CHUNK_BYTES ? bytes - off : MPI_CHUNK_BYTES;

		if (rlb_grow(&m->req, &m->cap, m->nreq + 1, sizeof(*m->req)))
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		if (is_send)
			rc = MPI_Isend((char *)buf + off, (int)len, MPI_BYTE, dest, 0,
				       comm, &m->req[m->nreq]);
		else
			rc = MPI_Irecv((char *)buf + off, (int)len, MPI_BYTE, dest, 0,
				       comm, &m->req[m->nreq]);
		if (rc != MPI_SUCCESS)
			return mpi_fail(err, rc, is_send ? "MPI_Isend" : "MPI_Irecv");
		m->nreq++;
	}
	return 0;
}

static int m_send(struct rlb_world *w, uint32_t local, enum rlb_comm_kind c,
		  uint32_t peer, const void *buf, size_t bytes,
		  struct rlb_err *err)
{
	(void)local;
	return m_post(w, c, peer, (void *)buf, bytes, 1, err);
}

static int m_recv(struct rlb_world *w, uint32_t local, enum rlb_comm_kind c,
		  uint32_t peer, void *buf, size_t bytes, struct rlb_err *err)
{
	(void)local;
	return m_post(w, c, peer, buf, bytes, 0, err);
}

static int m_group_end(struct rlb_world *w, uint32_t local,
		       enum rlb_comm_kind c, struct rlb_err *err)
{
	struct mworld *m = w->priv;
	int ret;

	(void)local;
	if (!m->in_group[c])
		return rlb_err_set(err, RLB_EINVAL, "group not started");
	m->in_group[c] = 0;
	if (m->nreq > INT_MAX)
		return rlb_err_set(err, RLB_ERANGE, "too many transfers in one group");
	ret = wait_all(w, m->req, (int)m->nreq,
		       c == RLB_COMM_EP ? "EP transfers" : "node transfers", err);
	m->nreq = 0;
	return ret;
}

static int m_allreduce(struct rlb_world *w, double *v, size_t n,
		       enum rlb_reduce op, struct rlb_err *err)
{
	struct mworld *m = w->priv;
	MPI_Request req;
	double *all;
	int rc, ret;

	if (n == 0)
		return 0;
	if (n > INT_MAX / w->size)
		return rlb_err_set(err, RLB_ERANGE, "reduction too large");
	all = malloc(n * w->size * sizeof(*all));
	if (!all)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	/* Gather every row and reduce in rank order: the same sums everywhere. */
	rc = MPI_Iallgather(v, (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE,
			    m->comm[RLB_COMM_EP], &req);
	ret = rc != MPI_SUCCESS ? mpi_fail(err, rc, "MPI_Iallgather") :
	      wait_all(w, &req, 1, "allreduce", err);
	if (ret == 0)
		rlb_world_reduce_rows(all, w->size, n, op, v);
	free(all);
	return ret;
}

static int m_gather(struct rlb_world *w, const void *send, size_t bytes,
		    void *recv, struct rlb_err *err)
{
	struct mworld *m = w->priv;
	MPI_Request req;
	int rc;

	if (bytes > INT_MAX)
		return rlb_err_set(err, RLB_ERANGE, "gather of %zu bytes too large", bytes);
	rc = MPI_Igather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, 0,
			 m->comm[RLB_COMM_EP], &req);
	if (rc != MPI_SUCCESS)
		return mpi_fail(err, rc, "MPI_Igather");
	return wait_all(w, &req, 1, "gather", err);
}

static int m_agree(struct rlb_world *w, const struct rlb_err *errs,
		   struct rlb_err *out, uint32_t *rank, struct rlb_err *err)
{
	struct mworld *m = w->priv;
	struct rlb_err first;
	MPI_Request req;
	int *codes, rc, ret, code = errs[0].code;
	uint32_t i, bad = w->size;

	codes = malloc(w->size * sizeof(*codes));
	if (!codes)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	rc = MPI_Iallgather(&code, 1, MPI_INT, codes, 1, MPI_INT,
			    m->comm[RLB_COMM_EP], &req);
	ret = rc != MPI_SUCCESS ? mpi_fail(err, rc, "MPI_Iallgather") :
	      wait_all(w, &req, 1, "agreement", err);
	for (i = 0; ret == 0 && i < w->size && bad == w->size; i++)
		if (codes[i])
			bad = i;
	free(codes);
	if (ret || bad == w->size)
		return ret;
	first = errs[0];
	rc = MPI_Ibcast(&first, (int)sizeof(first), MPI_BYTE, (int)bad,
			m->comm[RLB_COMM_EP], &req);
	ret = rc != MPI_SUCCESS ? mpi_fail(err, rc, "MPI_Ibcast") :
	      wait_all(w, &req, 1, "agreement", err);
	if (ret)
		return ret;
	first.msg[sizeof(first.msg) - 1] = '\0';
	if (out)
		*out = first;
	if (rank)
		*rank = bad;
	return first.code ? first.code : RLB_EMPI;
}

static int m_barrier(struct rlb_world *w, struct rlb_err *err)
{
	struct mworld *m = w->priv;
	MPI_Request req;
	int rc = MPI_Ibarrier(m->comm[RLB_COMM_EP], &req);

	if (rc != MPI_SUCCESS)
		return mpi_fail(err, rc, "MPI_Ibarrier");
	return wait_all(w, &req, 1, "barrier", err);
}

static void m_abort(struct rlb_world *w, int status)
{
	(void)w;
	MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
}

static void m_destroy(struct rlb_world *w)
{
	struct mworld *m = w->priv;
	int c;

	if (m) {
		for (c = 0; c < RLB_COMM_KINDS; c++)
			if (m->comm[c] != MPI_COMM_NULL)
				MPI_Comm_free(&m->comm[c]);
		free(m->req);
		free(m);
	}
	free(w);
	MPI_Finalize();
}

static const struct rlb_world_ops mpi_ops = {
	.name = "mpi",
	.destroy = m_destroy,
	.set_node_size = m_set_node_size,
	.group_start = m_group_start,
	.send = m_send,
	.recv = m_recv,
	.group_end = m_group_end,
	.allreduce = m_allreduce,
	.gather = m_gather,
	.agree = m_agree,
	.barrier = m_barrier,
	.abort = m_abort,
};

int rlb_world_mpi_available(void)
{
	return 1;
}

int rlb_world_mpi_new(struct rlb_world **out, int *argc, char ***argv,
		      struct rlb_err *err)
{
	struct rlb_world *w = NULL;
	struct mworld *m = NULL;
	int rc, rank = 0, size = 0, c;

	*out = NULL;
	rc = MPI_Init(argc, argv);
	if (rc != MPI_SUCCESS)
		return rlb_err_set(err, RLB_EMPI, "MPI_Init failed (error %d)", rc);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	w = calloc(1, sizeof(*w));
	m = calloc(1, sizeof(*m));
	if (!w || !m) {
		free(w);
		free(m);
		MPI_Finalize();
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	for (c = 0; c < RLB_COMM_KINDS; c++)
		m->comm[c] = MPI_COMM_NULL;
	w->ops = &mpi_ops;
	w->priv = m;
	w->timeout_s = 300;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	w->size = (uint32_t)size;
	w->local = 1;
	w->first = (uint32_t)rank;
	rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm[RLB_COMM_EP]);
	if (rc != MPI_SUCCESS) {
		m->comm[RLB_COMM_EP] = MPI_COMM_NULL;
		m_destroy(w);
		return mpi_fail(err, rc, "MPI_Comm_dup");
	}
	MPI_Comm_set_errhandler(m->comm[RLB_COMM_EP], MPI_ERRORS_RETURN);
	*out = w;
	return 0;
}

#else /* !RLB_HAVE_MPI */

int rlb_world_mpi_available(void)
{
	return 0;
}

int rlb_world_mpi_new(struct rlb_world **out, int *argc, char ***argv,
		      struct rlb_err *err)
{
	(void)argc;
	(void)argv;
	*out = NULL;
	return rlb_err_set(err, RLB_EUNSUPPORTED,
			   "relibra was built without MPI (libopenmpi-dev)");
}

#endif
