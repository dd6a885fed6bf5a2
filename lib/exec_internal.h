/*
 * exec_internal.h - inside the train-step executor (lib/exec*.c): the
 * per-rank state (home experts, replica slots, the step's tokens, routes,
 * activations), the per-process state, and the functions the exec files
 * share.  Private to lib/exec*.c.
 */
#ifndef RLB_EXEC_INTERNAL_H
#define RLB_EXEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "exec.h"
#include "plan_io.h"
#include "schedule.h"
#include "trace.h"

#define EXEC_NONE UINT32_MAX

/* A growable device buffer. */
struct dbuf {
	void *p;
	size_t cap;		/* bytes */
};

/* A home expert held by a rank: compute weights, optimizer state, gradient. */
struct exec_home {
	void *w;
	void *opt;
	void *g;
};

/* A replica slot of one (rank, layer). */
struct exec_slot {
	uint32_t expert;	/* expert held, EXEC_NONE when empty */
	uint32_t mb;		/* last micro-batch it served */
	void *w;
	void *g;
};

/* An instance computed on a rank in one (micro-batch, layer). */
struct exec_inst {
	uint32_t expert;
	uint32_t cell_index;	/* its index among the cell's instances */
	uint32_t home_gpu;
	uint32_t rows;
	size_t first;		/* first row in the expert-major layout */
	int replica;
	int copy;		/* replica weights must be copied in this mb */
	void *w;
	void *g;
};

/* Per-(micro-batch, layer, rank) measurements, doubles in this order. */
enum {
	CELL_ROWS, CELL_FWD_CPU_S, CELL_FWD_WALL_S, CELL_BWD_CPU_S,
	CELL_BWD_WALL_S, CELL_SEND_BYTES, CELL_RECV_BYTES, CELL_A2A_S,
	CELL_REPLICA_BYTES, CELL_REPLICA_S, CELL_GRAD_BYTES, CELL_GRAD_S,
	CELL_N
};

/* Per-(step, rank) measurements. */
enum {
	STEP_WALL_S, STEP_TOKENS, STEP_MIGRATION_BYTES, STEP_MIGRATION_S,
	STEP_ADAM_S, STEP_N
};

/*
 * One rank's route through one (micro-batch, layer): which of its rows go
 * where (source side) and which rows it computes (destination side).
 * Source side: send rows ordered by (destination, expert, token, k).
 * Destination side: receive blocks by source, each ordered by expert;
 * expert-major rows by (instance, source).
 */
struct exec_route {
	uint32_t nrows;			/* ntok * topk */
	uint32_t nrecv;
	size_t *send_cnt;		/* [ranks] rows */
	size_t *recv_cnt;		/* [ranks] rows */
	uint32_t ninst;
	struct exec_inst *inst;
	size_t inst_cap;
	uint32_t *send_idx;		/* [nrows] token of each send row */
	float *send_gate;		/* [nrows] its gate */
	uint32_t *tk_pos;		/* [nrows] (t, k) -> send row */
	float *tk_gate;			/* [nrows] gate of (t, k) */
	uint32_t *perm;			/* [nrecv] expert-major row -> receive row */
	uint32_t *unperm;		/* [nrecv] receive row -> expert-major row */
	size_t host_cap_rows, host_cap_recv;
	/* device copies of the index arrays, and activations kept for backward */
	struct dbuf d_send_idx, d_send_gate, d_tk_pos, d_tk_gate, d_perm, d_unperm;
	struct dbuf x;			/* [nrecv][hidden] expert inputs */
	struct dbuf act;		/* [nrecv][rlb_expert_act_per_row] saved activations */
};

struct exec_rank {
	uint32_t rank;
	uint32_t local;
	struct rlb_backend *be;
	struct rlb_queue *q;		/* compute */
	struct rlb_queue *cq;		/* replica copies */
	struct rlb_event *ev0, *ev1;
	struct rlb_event **ev_copy;	/* [layers] replica copies of the layer done */
	struct exec_home **home;	/* [layers * experts], NULL where not home here */
	struct exec_slot **slot;	/* [layers] replica slots */
	uint32_t *nslot;		/* [layers] */
	/* the step's tokens, by micro-batch then chunk order */
	uint32_t ntok;
	uint32_t *mb_first;		/* [micro_batches + 1] */
	uint32_t *tok_seq, *tok_pos;	/* [ntok] */
	uint16_t *ids;			/* [layers][ntok][topk] */
	float *gates;			/* [layers][ntok][topk] */
	size_t tok_cap;
	/* the current micro-batch */
	struct exec_route *route;	/* [layers] */
	struct dbuf h;			/* [layers + 1][ntok][hidden] */
	struct dbuf dh[2];
	struct dbuf sendbuf, recvbuf, ebuf, ebuf2, backbuf, retbuf;
	struct dbuf *gtmp;		/* replica gradients received */
	size_t ngtmp;
	float *host_h;
	size_t host_h_cap;
	/* measurements of the step */
	double *cell;			/* [micro_batches * layers][CELL_N] */
	size_t cell_cap;
	double stepm[STEP_N];
	double loss;			/* this rank's part of the step's loss */
};

/* Measurements gathered on rank 0's process, per step. */
struct exec_step_record {
	uint32_t step;
	uint32_t micro_batches;
	uint64_t tokens;
	double wall_s;			/* slowest rank */
	double critical_path_s;
	double *rank;			/* [ranks][STEP_N] */
	double *cell;			/* [ranks][micro_batches * layers][CELL_N] */
};

struct rlb_exec {
	const struct rlb_config *cfg;
	struct rlb_config cfg_run;	/* cfg with the plan's packing */
	struct rlb_exec_opts o;
	struct rlb_world *world;
	const char *trace_path, *plan_path;
	struct rlb_trace_reader *tr;
	struct rlb_plan_reader *pr;
	struct rlb_plan_header ph;
	uint32_t *steps;		/* selected steps */
	size_t nsteps;
	struct rlb_expert_shape shape;	/* ungated when model.gated_ffn is false */
	size_t np;			/* parameters per expert */
	uint32_t layers, experts, topk, ranks, gpn, hidden, ffn;
	uint32_t nlocal, first;
	int virtual_ranks;		/* the ranks of this process share one device */
	uint64_t unheld;		/* expert spans timed without a hold (rlb_exec_unheld_spans) */
	struct exec_rank *rk;		/* [nlocal] */
	/* the current step */
	int static_run;			/* 1: the static plan instead of the file's */
	struct rlb_schedule sched;
	struct rlb_loads loads;
	struct rlb_step_plan plan;
	uint64_t step_tokens;
	uint32_t *cur_home;		/* [layers * experts] homes held now */
	int homes_fresh;		/* the homes hold the initial weights (first_homes) */
	uint32_t *split;		/* rlb_step_plan_split scratch */
	size_t *split_first;		/* [experts + 1] offsets into split */
	size_t split_cap;
	uint32_t *key_cnt;		/* [ranks * experts + 1] counting sort */
	uint32_t *cursor;		/* [experts * 2] per-expert instance cursor */
	uint32_t *chunk_off;		/* per schedule chunk: first token in its rank */
	size_t chunk_cap;
	/* results on rank 0's process */
	struct exec_step_record *rec;
	size_t nrec;
	double *losses;			/* [nsteps] of the current run */
	int ran;
	uint32_t failed_rank;		/* EP rank of the last failure */
	struct rlb_exec_verify verify;
};

/* ---- exec_state.c ---- */
int rlb_exec_dbuf(struct rlb_backend *be, struct dbuf *b, size_t bytes,
		  struct rlb_err *err);
void rlb_exec_dbuf_free(struct rlb_backend *be, struct dbuf *b);

/* ---- exec_route.c ---- */
/* Read the step's tokens of the local ranks (ids, gates, positions). */
int rlb_exec_load_tokens(struct rlb_exec *ex, uint32_t step, struct rlb_err *err);
/* Routes of every layer of micro-batch MB for local rank RK (host and device). */
int rlb_exec_route_mb(struct rlb_exec *ex, struct exec_rank *rk, uint32_t mb,
		      struct rlb_err *err);
void rlb_exec_route_release(struct rlb_backend *be, struct exec_route *r);

/* ---- exec_state.c ---- */
int rlb_exec_homes_init(struct rlb_exec *ex, struct rlb_err *err);
void rlb_exec_homes_free(struct rlb_exec *ex);
int rlb_exec_migrate(struct rlb_exec *ex, const uint32_t *new_home, int measure,
		     struct rlb_err *err);
int rlb_exec_adam(struct rlb_exec *ex, uint32_t t, struct rlb_err *err);
void rlb_exec_rank_release(struct rlb_exec *ex, struct exec_rank *rk);

/* ---- exec_layer.c ---- */
int rlb_exec_micro_batch(struct rlb_exec *ex, uint32_t mb, struct rlb_err *err);

/* ---- exec_metrics.c ---- */
int rlb_exec_record_step(struct rlb_exec *ex, uint32_t step, struct rlb_err *err);
void rlb_exec_records_free(struct rlb_exec *ex);

/* ---- small helpers shared by the exec files ---- */

static inline char *exec_at(void *p, size_t bytes)
{
	return (char *)p + bytes;
}

/* The communicator between two ranks: inside a node NODE, else EP. */
static inline enum rlb_comm_kind exec_comm_of(const struct rlb_exec *ex,
						 uint32_t a, uint32_t b)
{
	return a / ex->gpn == b / ex->gpn ? RLB_COMM_NODE : RLB_COMM_EP;
}

static inline int exec_failed(struct rlb_exec *ex, struct exec_rank *rk, int ret)
{
	if (ret)
		ex->failed_rank = rk->rank;
	return ret;
}

/* Start / end a group on both communicators (every local rank takes part). */
static inline int exec_groups_start(struct exec_rank *rk, struct rlb_err *err)
{
	struct rlb_backend *be = rk->be;
	int ret = be->ops->group_start(be, RLB_COMM_EP, err);

	return ret ? ret : be->ops->group_start(be, RLB_COMM_NODE, err);
}

static inline int exec_groups_end(struct exec_rank *rk, struct rlb_queue *q,
				  struct rlb_err *err)
{
	struct rlb_backend *be = rk->be;
	int ret = be->ops->group_end(be, RLB_COMM_NODE, q, err);

	return ret ? ret : be->ops->group_end(be, RLB_COMM_EP, q, err);
}

#endif
