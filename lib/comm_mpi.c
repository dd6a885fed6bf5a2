/*
 * comm_mpi.c - the MPI transport of train-step (lib/comm.h): one rank per
 * process, grouped non-blocking point-to-point transfers on a duplicate of
 * MPI_COMM_WORLD (EP) and a split of it by node (NODE), collectives
 * through rank 0 with bounded waits, MPI_Abort.  The only file that
 * includes mpi.h; without MPI (RLB_HAVE_MPI 0) rlb_world_mpi_new reports
 * that it is not built in.
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
#define TAG_DATA 0		/* grouped transfers (star's tags follow) */
#define NAMED_MAX 8		/* ranks a timeout names */
/* How much longer than the timeout a rank waits for rank 0's verdict, so
 * that rank 0, which names the missing ranks, speaks first. */
#define VERDICT_GRACE_S 5.0

/* The transfers posted in one communicator's open group. */
struct group {
	MPI_Request *req;
	uint32_t *peer;			/* EP rank each request waits on */
	size_t n, cap, peer_cap;
	int open;
};

struct mworld {
	MPI_Comm comm[RLB_COMM_KINDS];
	struct group group[RLB_COMM_KINDS];
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

/*
 * A wait timed out: name the ranks whose transfers are still pending (in
 * rank order, at most NAMED_MAX).
 */
static int timed_out(struct rlb_world *w, MPI_Request *req, const uint32_t *peer,
		     int n, double limit_s, const char *what, struct rlb_err *err)
{
	char list[RLB_ERR_MSG_MAX / 2] = "";
	unsigned char *pending;
	size_t len = 0;
	uint32_t r, named = 0, more = 0;
	int i, flag;

	if (!(pending = calloc(w->size, 1)))
		return rlb_err_set(err, RLB_EMPI, "%s: timed out after %.0f s", what, limit_s);
	for (i = 0; i < n; i++)
		if (MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag)
			pending[peer[i]] = 1;
	for (r = 0; r < w->size; r++) {
		if (!pending[r])
			continue;
		if (named == NAMED_MAX) {
			more++;
			continue;
		}
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%u",
					named ? ", " : "", r);
		if (len >= sizeof(list))
			len = sizeof(list) - 1;
		named++;
	}
	free(pending);
	if (more)
		return rlb_err_set(err, RLB_EMPI, "%s: timed out after %.0f s waiting for ranks %s and %u more",
				   what, limit_s, list, more);
	return rlb_err_set(err, RLB_EMPI, "%s: timed out after %.0f s waiting for rank%s %s",
			   what, limit_s, named > 1 ? "s" : "", list);
}

/*
 * Wait for N requests, polling, for at most LIMIT_S seconds (0: no
 * limit).  PEER[i] is the rank request i waits on.
 */
static int wait_all(struct rlb_world *w, MPI_Request *req, const uint32_t *peer,
		    int n, double limit_s, const char *what, struct rlb_err *err)
{
	uint64_t start = rlb_now_ns(), limit_ns = (uint64_t)(limit_s * 1e9);
	struct timespec nap = { 0, 0 };
	int done = 0, rc;

	while (n > 0) {
		rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
		if (rc != MPI_SUCCESS)
			return mpi_fail(err, rc, what);
		if (done)
			return 0;
		if (limit_ns && rlb_now_ns() - start > limit_ns)
			return timed_out(w, req, peer, n, limit_s, what, err);
		/* Back off from busy polling to 1 ms naps. */
		if (nap.tv_nsec < 1000000)
			nap.tv_nsec = nap.tv_nsec ? nap.tv_nsec * 2 : 1000;
		nanosleep(&nap, NULL);
	}
	return 0;
}

/*
 * After a failed wait: withdraw what is still pending, so that no
 * transfer touches the buffers once the caller frees them.
 */
static void cancel_pending(MPI_Request *req, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (req[i] != MPI_REQUEST_NULL) {
			(void)MPI_Cancel(&req[i]);
			(void)MPI_Request_free(&req[i]);
		}
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
	rc = MPI_Comm_set_errhandler(m->comm[RLB_COMM_NODE], MPI_ERRORS_RETURN);
	if (rc != MPI_SUCCESS)
		return mpi_fail(err, rc, "MPI_Comm_set_errhandler");
	w->gpus_per_node = gpus_per_node;
	return 0;
}

static int m_group_start(struct rlb_world *w, uint32_t local,
			 enum rlb_comm_kind c, struct rlb_err *err)
{
	struct mworld *m = w->priv;

	(void)local;
	if (m->group[c].open)
		return rlb_err_set(err, RLB_EINVAL, "group already started");
	m->group[c].open = 1;
	return 0;
}

/* Post one transfer in chunks of at most MPI_CHUNK_BYTES. */
static int m_post(struct rlb_world *w, enum rlb_comm_kind c, uint32_t peer,
		  void *buf, size_t bytes, int is_send, struct rlb_err *err)
{
	struct mworld *m = w->priv;
	struct group *g = &m->group[c];
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

		if (rlb_grow(&g->req, &g->cap, g->n + 1, sizeof(*g->req)) ||
		    rlb_grow(&g->peer, &g->peer_cap, g->n + 1, sizeof(*g->peer)))
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		if (is_send)
			rc = MPI_Isend((char *)buf + off, (int)len, MPI_BYTE, dest, TAG_DATA,
				       comm, &g->req[g->n]);
		else
			rc = MPI_Irecv((char *)buf + off, (int)len, MPI_BYTE, dest, TAG_DATA,
				       comm, &g->req[g->n]);
		if (rc != MPI_SUCCESS)
			return mpi_fail(err, rc, is_send ? "MPI_Isend" : "MPI_Irecv");
		g->peer[g->n++] = peer;
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
	struct group *g = &((struct mworld *)w->priv)->group[c];
	int ret;

	(void)local;
	if (!g->open)
		return rlb_err_set(err, RLB_EINVAL, "group not started");
	g->open = 0;
	if (g->n > INT_MAX)
		return rlb_err_set(err, RLB_ERANGE, "too many transfers in one group");
	ret = wait_all(w, g->req, g->peer, (int)g->n, w->timeout_s,
		       c == RLB_COMM_EP ? "EP transfers" : "node transfers", err);
	if (ret)
		cancel_pending(g->req, (int)g->n);
	g->n = 0;
	return ret;
}

/*
 * The control operations (agreement, reductions, gathers, barriers) go
 * point to point through rank 0 rather than through MPI collectives, so
 * that a rank that never arrives is named.  Consecutive operations cannot
 * be confused: every rank calls them in the same order, MPI keeps the
 * order of messages per (source, tag, communicator), and a rank sends
 * its next contribution only once it has rank 0's reply to the last.
 * One tag would do; a tag per kind makes a rank out of step (a bug) time
 * out, named, rather than take another kind's bytes.
 */
enum star_kind { STAR_AGREE = 1, STAR_REDUCE, STAR_GATHER, STAR_BARRIER };

static const char *const star_name[] = {
	[STAR_AGREE] = "agreement",
	[STAR_REDUCE] = "allreduce",
	[STAR_GATHER] = "gather",
	[STAR_BARRIER] = "barrier",
};

/* On rank 0: make REPLY of the ROWS contributions of BYTES in ALL. */
typedef void (*star_fold_fn)(const void *all, uint32_t rows, size_t bytes,
			     void *reply, const void *arg);

/*
 * Every rank sends MINE (BYTES) to rank 0, which receives rank r's at
 * ALL + r * BYTES (its own copied to ALL), has FOLD (if any) make REPLY
 * from them and sends REPLY (REPLY_BYTES) back to every rank; the other
 * ranks receive it in REPLY, which must not overlap MINE.  ALL is used
 * on rank 0 only.  The other ranks wait VERDICT_GRACE_S longer than the
 * timeout, so that rank 0, waiting on each rank by name, reports a
 * missing rank first.
 */
static int star(struct rlb_world *w, enum star_kind kind, const void *mine,
		size_t bytes, void *all, void *reply, size_t reply_bytes,
		star_fold_fn fold, const void *arg, struct rlb_err *err)
{
	MPI_Comm comm = ((struct mworld *)w->priv)->comm[RLB_COMM_EP];
	const char *what = star_name[kind];
	uint32_t r, n = w->first == 0 ? w->size - 1 : 2;
	MPI_Request *req;
	uint32_t *peer;
	double limit = w->timeout_s;
	int rc = MPI_SUCCESS, ret = 0;

	if (bytes > INT_MAX || reply_bytes > INT_MAX)
		return rlb_err_set(err, RLB_ERANGE, "%s of %zu bytes too large", what,
				   bytes > reply_bytes ? bytes : reply_bytes);
	req = calloc(n ? n : 1, sizeof(*req));
	peer = calloc(n ? n : 1, sizeof(*peer));
	if (!req || !peer) {
		free(req);
		free(peer);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	for (r = 0; r < n; r++)
		req[r] = MPI_REQUEST_NULL;
	if (w->first == 0) {
		if (bytes)
			memcpy(all, mine, bytes);
		for (r = 1; r < w->size && rc == MPI_SUCCESS; r++) {
			peer[r - 1] = r;
			rc = MPI_Irecv((char *)all + r * bytes, (int)bytes, MPI_BYTE,
				       (int)r, kind, comm, &req[r - 1]);
		}
		ret = rc != MPI_SUCCESS ? mpi_fail(err, rc, what) :
		      wait_all(w, req, peer, (int)n, limit, what, err);
		if (ret == 0 && fold)
			fold(all, w->size, bytes, reply, arg);
		for (r = 1; ret == 0 && r < w->size && rc == MPI_SUCCESS; r++)
			rc = MPI_Isend(reply, (int)reply_bytes, MPI_BYTE, (int)r, kind,
				       comm, &req[r - 1]);
	} else {
		peer[0] = peer[1] = 0;
		if (limit > 0)
			limit += VERDICT_GRACE_S;
		rc = MPI_Isend(mine, (int)bytes, MPI_BYTE, 0, kind, comm, &req[0]);
		if (rc == MPI_SUCCESS)
			rc = MPI_Irecv(reply, (int)reply_bytes, MPI_BYTE, 0, kind, comm,
				       &req[1]);
	}
	if (ret == 0)
		ret = rc != MPI_SUCCESS ? mpi_fail(err, rc, what) :
		      wait_all(w, req, peer, (int)n, limit, what, err);
	if (ret)
		cancel_pending(req, (int)n);
	free(req);
	free(peer);
	return ret;
}

/* ARG: the operation.  Sums in rank order, so the same everywhere. */
static void reduce_fold(const void *all, uint32_t rows, size_t bytes,
			void *reply, const void *arg)
{
	rlb_world_reduce_rows(all, rows, bytes / sizeof(double),
			      *(const enum rlb_reduce *)arg, reply);
}

static int m_allreduce(struct rlb_world *w, double *v, size_t n,
		       enum rlb_reduce op, struct rlb_err *err)
{
	double *all;
	int ret;

	if (n == 0)
		return 0;
	if (n > INT_MAX / sizeof(*v) / w->size)
		return rlb_err_set(err, RLB_ERANGE, "reduction too large");
	/* Rank 0 reduces every row into its own (row 0), the reply. */
	all = malloc(n * (w->first == 0 ? w->size : 1) * sizeof(*all));
	if (!all)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = star(w, STAR_REDUCE, v, n * sizeof(*v), all, all, n * sizeof(*v),
		   reduce_fold, &op, err);
	if (ret == 0)
		memcpy(v, all, n * sizeof(*v));
	free(all);
	return ret;
}

static int m_gather(struct rlb_world *w, const void *send, size_t bytes,
		    void *recv, struct rlb_err *err)
{
	return star(w, STAR_GATHER, send, bytes, recv, NULL, 0, NULL, NULL, err);
}

/* What rank 0 sends back from an agreement. */
struct verdict {
	uint32_t bad;			/* lowest failing rank; size: none */
	struct rlb_err first;		/* its report */
};

static void agree_fold(const void *all, uint32_t rows, size_t bytes,
		       void *reply, const void *arg)
{
	const struct rlb_err *e = all;
	struct verdict *v = reply;
	uint32_t r;

	(void)bytes;
	(void)arg;
	for (r = 0; r < rows; r++)
		if (e[r].code) {
			v->bad = r;
			v->first = e[r];
			return;
		}
}

/* Every rank's report to rank 0, which answers with the lowest failing one's. */
static int m_agree(struct rlb_world *w, const struct rlb_err *errs,
		   struct rlb_err *out, uint32_t *rank, struct rlb_err *err)
{
	struct verdict v = { w->size, { 0, "" } };
	struct rlb_err *all = NULL;
	int ret;

	if (w->first == 0 && !(all = calloc(w->size, sizeof(*all))))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = star(w, STAR_AGREE, &errs[0], sizeof(errs[0]), all, &v, sizeof(v),
		   agree_fold, NULL, err);
	free(all);
	if (ret || v.bad >= w->size)
		return ret;
	v.first.msg[sizeof(v.first.msg) - 1] = '\0';
	if (out)
		*out = v.first;
	if (rank)
		*rank = v.bad;
	return v.first.code ? v.first.code : RLB_EMPI;
}

static int m_barrier(struct rlb_world *w, struct rlb_err *err)
{
	char none = 0;		/* zero-byte messages, but no NULL + 0 */

	return star(w, STAR_BARRIER, &none, 0, &none, &none, 0, NULL, NULL, err);
}

static void m_abort(struct rlb_world *w, int status)
{
	(void)w;
	rlb_atomic_remove_all();	/* MPI_Abort does not return */
	MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
}

static void m_destroy(struct rlb_world *w)
{
	struct mworld *m = w->priv;
	int c;

	if (m) {
		for (c = 0; c < RLB_COMM_KINDS; c++) {
			if (m->comm[c] != MPI_COMM_NULL)
				(void)MPI_Comm_free(&m->comm[c]);
			free(m->group[c].req);
			free(m->group[c].peer);
		}
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

/* The processes of COMM on this machine (sharing its memory) into *n. */
static int host_procs(MPI_Comm comm, uint32_t *n)
{
	MPI_Comm shared;
	int rc, size = 1;

	rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
	if (rc != MPI_SUCCESS)
		return rc;
	rc = MPI_Comm_size(shared, &size);
	MPI_Comm_free(&shared);
	*n = size > 0 ? (uint32_t)size : 1;
	return rc;
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
	rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (rc == MPI_SUCCESS)
		rc = MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (rc == MPI_SUCCESS)
		rc = MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (rc != MPI_SUCCESS) {
		mpi_fail(err, rc, "MPI_Init");
		MPI_Finalize();
		return RLB_EMPI;
	}
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
	w->size = (uint32_t)size;
	w->local = 1;
	w->first = (uint32_t)rank;
	rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm[RLB_COMM_EP]);
	if (rc != MPI_SUCCESS) {
		m->comm[RLB_COMM_EP] = MPI_COMM_NULL;
		m_destroy(w);
		return mpi_fail(err, rc, "MPI_Comm_dup");
	}
	rc = MPI_Comm_set_errhandler(m->comm[RLB_COMM_EP], MPI_ERRORS_RETURN);
	if (rc != MPI_SUCCESS) {
		m_destroy(w);
		return mpi_fail(err, rc, "MPI_Comm_set_errhandler");
	}
	rc = host_procs(m->comm[RLB_COMM_EP], &w->host_procs);
	if (rc != MPI_SUCCESS) {
		m_destroy(w);
		return mpi_fail(err, rc, "MPI_Comm_split_type");
	}
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
