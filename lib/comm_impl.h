/*
 * comm_impl.h - inside the transport (lib/comm.h): the world object and the
 * ops table that comm_virtual.c and comm_mpi.c fill.  Private to them.
 */
#ifndef RLB_COMM_IMPL_H
#define RLB_COMM_IMPL_H

#include "comm.h"

struct rlb_world_ops {
	const char *name;
	void (*destroy)(struct rlb_world *w);
	int (*set_node_size)(struct rlb_world *w, uint32_t gpus_per_node,
			     struct rlb_err *err);
	int (*group_start)(struct rlb_world *w, uint32_t local,
			   enum rlb_comm_kind c, struct rlb_err *err);
	int (*send)(struct rlb_world *w, uint32_t local, enum rlb_comm_kind c,
		    uint32_t peer, const void *buf, size_t bytes,
		    struct rlb_err *err);
	int (*recv)(struct rlb_world *w, uint32_t local, enum rlb_comm_kind c,
		    uint32_t peer, void *buf, size_t bytes,
		    struct rlb_err *err);
	int (*group_end)(struct rlb_world *w, uint32_t local,
			 enum rlb_comm_kind c, struct rlb_err *err);
	int (*allreduce)(struct rlb_world *w, double *v, size_t n,
			 enum rlb_reduce op, struct rlb_err *err);
	int (*gather)(struct rlb_world *w, const void *send, size_t bytes,
		      void *recv, struct rlb_err *err);
	int (*agree)(struct rlb_world *w, const struct rlb_err *errs,
		     struct rlb_err *out, uint32_t *rank, struct rlb_err *err);
	int (*barrier)(struct rlb_world *w, struct rlb_err *err);
	void (*abort)(struct rlb_world *w, int status);
};

struct rlb_world {
	const struct rlb_world_ops *ops;
	uint32_t size;
	uint32_t local;			/* ranks driven by this process */
	uint32_t first;			/* EP rank of local index 0 */
	uint32_t host_procs;		/* processes of the job on this machine */
	uint32_t gpus_per_node;		/* 0 until set: one node */
	double timeout_s;
	rlb_world_copy_fn copy;
	void *copy_ctx;
	void *priv;
};

/* Reduce the rows v[nrows][n] into out[n] in row order; out may be v. */
void rlb_world_reduce_rows(const double *v, size_t nrows, size_t n,
			   enum rlb_reduce op, double *out);

#endif
