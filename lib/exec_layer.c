/*
 * exec_layer.c - one micro-batch of the executor on the backend: replica
 * weight copies issued a layer ahead, dispatch, expert forward, combine,
 * loss, backward, replica gradient reduction.  Every phase runs over all
 * ranks this process drives in lockstep, so the same code serves MPI ranks
 * and virtual ranks.
 */
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "util.h"

/* ------------------------------------------------------------------ */
/* Replica slots.                                                       */

/* 1 when micro-batch mb has an instance of (layer, expert) on gpu. */
static int has_instance(const struct rlb_exec *ex, uint32_t mb, uint32_t L,
			uint32_t e, uint32_t gpu)
{
	const struct rlb_plan_instance *in;
	uint32_t n, i;

	in = rlb_step_plan_cell(&ex->plan, mb, L, e, &n);
	for (i = 0; i < n; i++)
		if (in[i].gpu == gpu)
			return 1;
	return 0;
}

/* 1 when micro-batch mb - 1 had an instance of (layer, expert) on gpu. */
static int kept_from_previous(const struct rlb_exec *ex, uint32_t mb,
			      uint32_t L, uint32_t e, uint32_t gpu)
{
	return mb > 0 && has_instance(ex, mb - 1, L, e, gpu);
}

/*
 * 1 when micro-batch mb + 1 of the step has an instance of (layer, expert)
 * on gpu: a replica there keeps its slot and accumulates its gradient on,
 * so it sends it home only after the last micro-batch of such a run.
 */
static int kept_into_next(const struct rlb_exec *ex, uint32_t mb, uint32_t L,
			  uint32_t e, uint32_t gpu)
{
	return mb + 1 < ex->plan.micro_batches &&
	       has_instance(ex, mb + 1, L, e, gpu);
}

static int slot_grow(struct rlb_exec *ex, struct exec_rank *rk, uint32_t L,
		     struct rlb_err *err)
{
	struct rlb_backend *be = rk->be;
	struct exec_slot *s = realloc(rk->slot[L], (rk->nslot[L] + 1) * sizeof(*s));
	int ret;

	if (!s)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	rk->slot[L] = s;
	s += rk->nslot[L];
	memset(s, 0, sizeof(*s));
	s->expert = EXEC_NONE;
	s->mb = EXEC_NONE;
	ret = be->ops->alloc(be, ex->np * be->weight_bytes, &s->w, err);
	if (ret == 0)
		ret = be->ops->alloc(be, ex->np * be->acc_bytes, &s->g, err);
	if (ret) {
		be->ops->free(be, s->w);
		return ret;
	}
	rk->nslot[L]++;
	return 0;
}

/*
 * Give every instance of the micro-batch its weights and gradient: the
 * home expert's, or a replica slot (the one that held the expert in the
 * previous micro-batch, when it did; the copy is then skipped, and the
 * slot's gradient, not yet sent home, accumulates on).  A fresh slot's
 * gradient starts at zero.
 */
static int assign_slots(struct rlb_exec *ex, struct exec_rank *rk, uint32_t mb,
			struct rlb_err *err)
{
	uint32_t L, i, j;
	int ret;

	for (L = 0; L < ex->layers; L++) {
		struct exec_route *r = &rk->route[L];

		for (i = 0; i < r->ninst; i++) {
			struct exec_inst *x = &r->inst[i];
			size_t c = (size_t)L * ex->experts + x->expert;

			if (!x->replica) {
				if (!rk->home[c])
					return rlb_err_set(err, RLB_EINVAL,
							   "rank %u does not hold its home expert %u of layer %u",
							   rk->rank, x->expert, L);
				x->w = rk->home[c]->w;
				x->g = rk->home[c]->g;
				continue;
			}
			x->copy = !kept_from_previous(ex, mb, L, x->expert, rk->rank);
			if (x->copy)
				continue;
			for (j = 0; j < rk->nslot[L]; j++)
				if (rk->slot[L][j].expert == x->expert &&
				    rk->slot[L][j].mb == mb - 1)
					break;
			if (j == rk->nslot[L])
				return rlb_err_set(err, RLB_EINVAL,
						   "rank %u lost its replica of expert %u, layer %u",
						   rk->rank, x->expert, L);
			rk->slot[L][j].mb = mb;
			x->w = rk->slot[L][j].w;
			x->g = rk->slot[L][j].g;
		}
		for (i = 0; i < r->ninst; i++) {
			struct exec_inst *x = &r->inst[i];

			if (!x->replica || !x->copy)
				continue;
			for (j = 0; j < rk->nslot[L]; j++)
				if (rk->slot[L][j].mb != mb)
					break;
			if (j == rk->nslot[L]) {
				ret = slot_grow(ex, rk, L, err);
				if (ret)
					return ret;
			}
			rk->slot[L][j].expert = x->expert;
			rk->slot[L][j].mb = mb;
			x->w = rk->slot[L][j].w;
			x->g = rk->slot[L][j].g;
		}
		for (i = 0; i < r->ninst; i++)
			if (r->inst[i].replica && r->inst[i].copy) {
				ret = rk->be->ops->zero(rk->be, rk->q, r->inst[i].g,
							ex->np * rk->be->acc_bytes, err);
				if (ret)
					return ret;
			}
	}
	return 0;
}

/*
 * Replica weights of layer L for micro-batch mb, from each home to the
 * ranks that need a fresh copy, on the copy queue; ev_copy[L] marks their
 * arrival.  Issued one layer ahead of their use.
 */
static int fetch_replicas(struct rlb_exec *ex, uint32_t mb, uint32_t L,
			  struct rlb_err *err)
{
	uint32_t i, e, n, k;
	int ret = 0;

	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		struct rlb_backend *be = rk->be;
		struct exec_route *r = &rk->route[L];
		size_t wb = ex->np * be->weight_bytes;
		uint64_t t0 = rlb_now_ns();
		double *cell = rk->cell + ((size_t)mb * ex->layers + L) * CELL_N;

		ret = exec_groups_start(rk, err);
		for (e = 0; ret == 0 && e < ex->experts; e++) {
			size_t c = (size_t)L * ex->experts + e;
			const struct rlb_plan_instance *in;

			if (ex->cur_home[c] != rk->rank)
				continue;
			in = rlb_step_plan_cell(&ex->plan, mb, L, e, &n);
			for (k = 1; ret == 0 && k < n; k++)
				if (!kept_from_previous(ex, mb, L, e, in[k].gpu))
					ret = be->ops->send(be, exec_comm_of(ex, rk->rank, in[k].gpu),
							    in[k].gpu, rk->home[c]->w, wb, err);
		}
		for (k = 0; ret == 0 && k < r->ninst; k++) {
			struct exec_inst *x = &r->inst[k];

			if (!x->replica || !x->copy)
				continue;
			ret = be->ops->recv(be, exec_comm_of(ex, x->home_gpu, rk->rank),
					    x->home_gpu, x->w, wb, err);
			cell[CELL_REPLICA_BYTES] += wb;
		}
		if (ret == 0)
			ret = exec_groups_end(rk, rk->cq, err);
		if (ret == 0)
			ret = be->ops->event_record(be, rk->ev_copy[L], rk->cq, err);
		cell[CELL_REPLICA_S] += (rlb_now_ns() - t0) / 1e9;
		exec_failed(ex, rk, ret);
	}
	return ret;
}

/*
 * Replica gradients of layer L back to their homes, added there in the
 * order of the cell's instances (ascending GPU): those of replicas that
 * the next micro-batch of the step does not keep on their GPU (a kept one
 * sends its gradient, accumulated over the run, after the run's last
 * micro-batch, as docs/cost-model.md counts it).
 */
static int reduce_replicas(struct rlb_exec *ex, uint32_t mb, uint32_t L,
			   struct rlb_err *err)
{
	uint32_t i, e, n, k;
	size_t j;
	int ret = 0;

	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		struct rlb_backend *be = rk->be;
		struct exec_route *r = &rk->route[L];
		size_t gb = ex->np * be->acc_bytes;
		uint64_t t0 = rlb_now_ns();
		double *cell = rk->cell + ((size_t)mb * ex->layers + L) * CELL_N;

		ret = exec_groups_start(rk, err);
		for (k = 0; ret == 0 && k < r->ninst; k++) {
			struct exec_inst *x = &r->inst[k];

			if (!x->replica ||
			    kept_into_next(ex, mb, L, x->expert, rk->rank))
				continue;
			ret = be->ops->send(be, exec_comm_of(ex, rk->rank, x->home_gpu),
					    x->home_gpu, x->g, gb, err);
			cell[CELL_GRAD_BYTES] += gb;
		}
		for (e = 0, j = 0; ret == 0 && e < ex->experts; e++) {
			const struct rlb_plan_instance *in;

			if (ex->cur_home[(size_t)L * ex->experts + e] != rk->rank)
				continue;
			in = rlb_step_plan_cell(&ex->plan, mb, L, e, &n);
			for (k = 1; ret == 0 && k < n; k++) {
				if (kept_into_next(ex, mb, L, e, in[k].gpu))
					continue;
				if (j >= rk->ngtmp) {
					struct dbuf *g = realloc(rk->gtmp, (j + 1) * sizeof(*g));

					if (!g) {
						ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
						break;
					}
					rk->gtmp = g;
					memset(&g[j], 0, sizeof(*g));
					rk->ngtmp = j + 1;
				}
				ret = rlb_exec_dbuf(be, &rk->gtmp[j], gb, err);
				if (ret == 0)
					ret = be->ops->recv(be, exec_comm_of(ex, in[k].gpu, rk->rank),
							    in[k].gpu, rk->gtmp[j].p, gb, err);
				j++;
			}
		}
		if (ret == 0)
			ret = exec_groups_end(rk, rk->q, err);
		cell[CELL_GRAD_S] += (rlb_now_ns() - t0) / 1e9;
		exec_failed(ex, rk, ret);
	}
	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		struct rlb_backend *be = rk->be;
		uint64_t t0 = rlb_now_ns();

		ret = be->ops->queue_sync(be, rk->q, err);
		for (e = 0, j = 0; ret == 0 && e < ex->experts; e++) {
			size_t c = (size_t)L * ex->experts + e;
			const struct rlb_plan_instance *in;

			if (ex->cur_home[c] != rk->rank)
				continue;
			in = rlb_step_plan_cell(&ex->plan, mb, L, e, &n);
			for (k = 1; ret == 0 && k < n; k++)
				if (!kept_into_next(ex, mb, L, e, in[k].gpu))
					ret = be->ops->acc_add(be, rk->q, ex->np, rk->home[c]->g,
							       rk->gtmp[j++].p, err);
		}
		rk->cell[((size_t)mb * ex->layers + L) * CELL_N + CELL_GRAD_S] +=
			(rlb_now_ns() - t0) / 1e9;
		exec_failed(ex, rk, ret);
	}
	return ret;
}

/* ------------------------------------------------------------------ */
/* All-to-all.                                                          */

enum a2a_dir {
	A2A_DISPATCH = 0,	/* sendbuf (by destination) -> recvbuf (by source) */
	A2A_RETURN = 1,		/* backbuf (by source) -> retbuf (by destination) */
};

static int a2a(struct rlb_exec *ex, uint32_t mb, uint32_t L,
	       enum a2a_dir dir, struct rlb_err *err)
{
	uint32_t i, p;
	int ret = 0;

	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		struct rlb_backend *be = rk->be;
		struct exec_route *r = &rk->route[L];
		size_t row = (size_t)ex->hidden * be->act_bytes, so = 0, ro = 0;
		const size_t *scnt = dir == A2A_DISPATCH ? r->send_cnt : r->recv_cnt;
		const size_t *rcnt = dir == A2A_DISPATCH ? r->recv_cnt : r->send_cnt;
		char *sbuf = dir == A2A_DISPATCH ? rk->sendbuf.p : rk->backbuf.p;
		char *rbuf = dir == A2A_DISPATCH ? rk->recvbuf.p : rk->retbuf.p;
		double *cell = rk->cell + ((size_t)mb * ex->layers + L) * CELL_N;
		uint64_t t0 = rlb_now_ns();

		ret = be->ops->group_start(be, RLB_COMM_EP, err);
		for (p = 0; ret == 0 && p < ex->ranks; p++) {
			ret = be->ops->send(be, RLB_COMM_EP, p, sbuf + so * row,
					    scnt[p] * row, err);
			if (ret == 0)
				ret = be->ops->recv(be, RLB_COMM_EP, p, rbuf + ro * row,
						    rcnt[p] * row, err);
			if (p != rk->rank) {
				cell[CELL_SEND_BYTES] += (double)scnt[p] * row;
				cell[CELL_RECV_BYTES] += (double)rcnt[p] * row;
			}
			so += scnt[p];
			ro += rcnt[p];
		}
		if (ret == 0)
			ret = be->ops->group_end(be, RLB_COMM_EP, rk->q, err);
		cell[CELL_A2A_S] += (rlb_now_ns() - t0) / 1e9;
		exec_failed(ex, rk, ret);
	}
	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		uint64_t t0 = rlb_now_ns();

		ret = exec_failed(ex, rk, rk->be->ops->queue_sync(rk->be, rk->q, err));
		rk->cell[((size_t)mb * ex->layers + L) * CELL_N + CELL_A2A_S] +=
			(rlb_now_ns() - t0) / 1e9;
	}
	return ret;
}

/* ------------------------------------------------------------------ */
/* One micro-batch.                                                     */

/* Size the micro-batch's buffers of one rank. */
static int mb_buffers(struct rlb_exec *ex, struct exec_rank *rk, uint32_t mb,
		      struct rlb_err *err)
{
	struct rlb_backend *be = rk->be;
	size_t ntok = rk->mb_first[mb + 1] - rk->mb_first[mb];
	size_t row = (size_t)ex->hidden * be->act_bytes, maxrecv = 0;
	uint32_t L;
	int ret;

	for (L = 0; L < ex->layers; L++) {
		struct exec_route *r = &rk->route[L];

		if (r->nrecv > maxrecv)
			maxrecv = r->nrecv;
		ret = rlb_exec_dbuf(be, &r->x, r->nrecv * row, err);
		if (ret == 0)
			ret = rlb_exec_dbuf(be, &r->act, r->nrecv *
					    rlb_expert_act_per_row(&ex->shape) *
					    be->act_bytes, err);
		if (ret)
			return ret;
	}
	ret = rlb_exec_dbuf(be, &rk->h, (ex->layers + 1) * ntok * row, err);
	if (ret == 0)
		ret = rlb_exec_dbuf(be, &rk->dh[0], ntok * row, err);
	if (ret == 0)
		ret = rlb_exec_dbuf(be, &rk->dh[1], ntok * row, err);
	if (ret == 0)
		ret = rlb_exec_dbuf(be, &rk->sendbuf, ntok * ex->topk * row, err);
	if (ret == 0)
		ret = rlb_exec_dbuf(be, &rk->retbuf, ntok * ex->topk * row, err);
	if (ret == 0)
		ret = rlb_exec_dbuf(be, &rk->recvbuf, maxrecv * row, err);
	if (ret == 0)
		ret = rlb_exec_dbuf(be, &rk->ebuf, maxrecv * row, err);
	if (ret == 0)
		ret = rlb_exec_dbuf(be, &rk->ebuf2, maxrecv * row, err);
	if (ret == 0)
		ret = rlb_exec_dbuf(be, &rk->backbuf, maxrecv * row, err);
	if (ret == 0 && ntok * ex->hidden > rk->host_h_cap) {
		free(rk->host_h);
		rk->host_h = malloc(ntok * ex->hidden * sizeof(float));
		rk->host_h_cap = rk->host_h ? ntok * ex->hidden : 0;
		if (!rk->host_h)
			ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	return ret;
}

/* The first layer's input of the rank's tokens in micro-batch mb. */
static int input_states(struct rlb_exec *ex, struct exec_rank *rk, uint32_t mb,
			uint32_t step, struct rlb_err *err)
{
	uint32_t t0 = rk->mb_first[mb], ntok = rk->mb_first[mb + 1] - t0, t;

	for (t = 0; t < ntok; t++)
		rlb_hidden_init(ex->o.seed, step, rk->tok_seq[t0 + t],
				rk->tok_pos[t0 + t], ex->hidden,
				rk->host_h + (size_t)t * ex->hidden);
	return rk->be->ops->upload_act(rk->be, rk->q, rk->h.p, rk->host_h,
				       (size_t)ntok * ex->hidden, err);
}

static int run_jobs(struct rlb_exec *ex, struct exec_rank *rk, uint32_t mb,
		    uint32_t L, int backward, struct rlb_err *err)
{
	struct rlb_backend *be = rk->be;
	struct exec_route *r = &rk->route[L];
	size_t row = (size_t)ex->hidden * be->act_bytes;
	size_t arow = rlb_expert_act_per_row(&ex->shape) * be->act_bytes;
	struct rlb_expert_job *jobs = calloc(r->ninst ? r->ninst : 1, sizeof(*jobs));
	double *cell = rk->cell + ((size_t)mb * ex->layers + L) * CELL_N;
	struct rlb_elapsed el = { 0, 0 };
	uint32_t i;
	int ret, hold;

	if (!jobs)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; i < r->ninst; i++) {
		struct exec_inst *x = &r->inst[i];

		jobs[i].w = x->w;
		jobs[i].rows = x->rows;
		jobs[i].x = exec_at(r->x.p, x->first * row);
		jobs[i].act = exec_at(r->act.p, x->first * arow);
		if (backward) {
			jobs[i].dy = exec_at(rk->ebuf.p, x->first * row);
			jobs[i].dx = exec_at(rk->ebuf2.p, x->first * row);
			jobs[i].g = x->g;
		} else {
			jobs[i].y = exec_at(rk->ebuf.p, x->first * row);
		}
	}
	/* virtual ranks share a device: time the work alone, enqueued ahead */
	hold = ex->virtual_ranks && be->ops->queue_hold;
	ret = hold ? be->ops->queue_hold(be, rk->q, err) : 0;
	if (ret > 0) {	/* a hold lapsed on this queue: no more holds */
		ex->unheld++;
		hold = 0;
		ret = 0;
	}
	if (ret == 0)
		ret = be->ops->event_record(be, rk->ev0, rk->q, err);
	if (ret == 0)
		ret = backward ?
		      be->ops->expert_backward(be, rk->q, &ex->shape, jobs, r->ninst, err) :
		      be->ops->expert_forward(be, rk->q, &ex->shape, jobs, r->ninst, err);
	if (ret == 0)
		ret = be->ops->event_record(be, rk->ev1, rk->q, err);
	if (hold) {
		struct rlb_err e2;
		int r2 = be->ops->queue_release(be, rk->q, ret ? &e2 : err);

		if (ret == 0)
			ret = r2;
	}
	if (ret == 0)
		ret = be->ops->elapsed(be, rk->ev0, rk->ev1, &el, err);
	if (ret == 0) {
		cell[backward ? CELL_BWD_CPU_S : CELL_FWD_CPU_S] += el.cpu_ns / 1e9;
		cell[backward ? CELL_BWD_WALL_S : CELL_FWD_WALL_S] += el.wall_ns / 1e9;
		if (!backward)
			cell[CELL_ROWS] += r->nrecv;
	}
	free(jobs);
	return ret;
}

/*
 * The layer's input (OUT 0) or output (OUT 1) on rank RK: the hidden
 * states h[L] and h[L + 1] forward, the gradients dh[cur] and dh[!cur]
 * backward.
 */
static void *layer_io(const struct rlb_exec *ex, const struct exec_rank *rk,
		      uint32_t mb, uint32_t L, int backward, uint32_t cur, int out)
{
	size_t ntok = rk->mb_first[mb + 1] - rk->mb_first[mb];
	size_t hb = ntok * ex->hidden * rk->be->act_bytes;

	if (backward)
		return rk->dh[out ? !cur : cur].p;
	return exec_at(rk->h.p, (L + out) * hb);
}

/*
 * One MoE layer of a micro-batch, forward or backward; the gradient takes
 * the tokens' way: gather the rows each instance gets, dispatch, run the
 * experts, send the results back, combine them onto the residual.
 * Forward gates on the way back and fetches the next layer's replicas
 * first; backward gates on the way out (d gate * dy) and then reduces the
 * replicas' gradients to their homes.  Rows land in r->x forward (kept
 * for backward) and in ebuf backward.
 */
static int moe_layer(struct rlb_exec *ex, uint32_t mb, uint32_t L, int backward,
		     uint32_t cur, struct rlb_err *err)
{
	uint32_t i;
	int ret = 0;

	if (!backward && L + 1 < ex->layers)
		ret = fetch_replicas(ex, mb, L + 1, err);
	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		struct exec_route *r = &rk->route[L];

		ret = exec_failed(ex, rk, rk->be->ops->gather(rk->be, rk->q, r->nrows, ex->hidden,
						       r->d_send_idx.p,
						       backward ? r->d_send_gate.p : NULL,
						       layer_io(ex, rk, mb, L, backward, cur, 0),
						       rk->sendbuf.p, err));
	}
	if (ret == 0)
		ret = a2a(ex, mb, L, A2A_DISPATCH, err);
	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		struct rlb_backend *be = rk->be;
		struct exec_route *r = &rk->route[L];

		if (!backward)	/* this layer's replica weights */
			ret = be->ops->queue_wait(be, rk->q, rk->ev_copy[L], err);
		if (ret == 0)
			ret = be->ops->gather(be, rk->q, r->nrecv, ex->hidden, r->d_perm.p,
					      NULL, rk->recvbuf.p,
					      backward ? rk->ebuf.p : r->x.p, err);
		if (ret == 0)
			ret = run_jobs(ex, rk, mb, L, backward, err);
		if (ret == 0)
			ret = be->ops->gather(be, rk->q, r->nrecv, ex->hidden, r->d_unperm.p,
					      NULL, backward ? rk->ebuf2.p : rk->ebuf.p,
					      rk->backbuf.p, err);
		exec_failed(ex, rk, ret);
	}
	if (ret == 0)
		ret = a2a(ex, mb, L, A2A_RETURN, err);
	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		struct rlb_backend *be = rk->be;
		struct exec_route *r = &rk->route[L];
		size_t ntok = rk->mb_first[mb + 1] - rk->mb_first[mb];
		void *in = layer_io(ex, rk, mb, L, backward, cur, 0);
		void *out = layer_io(ex, rk, mb, L, backward, cur, 1);

		ret = be->ops->copy(be, rk->q, out, in, ntok * ex->hidden * be->act_bytes, err);
		if (ret == 0)
			ret = be->ops->combine(be, rk->q, ntok, ex->topk, ex->hidden,
					       r->d_tk_pos.p, backward ? NULL : r->d_tk_gate.p,
					       rk->retbuf.p, out, err);
		exec_failed(ex, rk, ret);
	}
	if (ret == 0 && backward)
		ret = reduce_replicas(ex, mb, L, err);
	return ret;
}

/*
 * The loss of a micro-batch: 0.5 * sum over its tokens of |h|^2 over the
 * step's token count T (summed in token order in double); its gradient
 * h / T seeds the backward pass.
 */
static int loss(struct rlb_exec *ex, uint32_t mb, struct rlb_err *err)
{
	float inv = 1.0f / (float)(ex->step_tokens ? ex->step_tokens : 1);
	uint32_t i;
	int ret = 0;

	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		struct rlb_backend *be = rk->be;
		size_t ntok = rk->mb_first[mb + 1] - rk->mb_first[mb];
		size_t n = ntok * ex->hidden, j;
		size_t hb = n * be->act_bytes;
		double sum = 0;

		ret = be->ops->download_act(be, rk->q, rk->host_h,
					    exec_at(rk->h.p, ex->layers * hb), n, err);
		if (ret == 0)
			ret = be->ops->queue_sync(be, rk->q, err);
		for (j = 0; ret == 0 && j < n; j++) {
			sum += (double)rk->host_h[j] * rk->host_h[j];
			rk->host_h[j] *= inv;
		}
		rk->loss += 0.5 * sum / (double)(ex->step_tokens ? ex->step_tokens : 1);
		if (ret == 0)
			ret = be->ops->upload_act(be, rk->q, rk->dh[0].p, rk->host_h, n, err);
		if (ret == 0)
			ret = be->ops->queue_sync(be, rk->q, err);
		exec_failed(ex, rk, ret);
	}
	return ret;
}

int rlb_exec_micro_batch(struct rlb_exec *ex, uint32_t mb, struct rlb_err *err)
{
	uint32_t i, L, cur = 0;
	int ret = 0;

	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];

		ret = rlb_exec_route_mb(ex, rk, mb, err);
		if (ret == 0)
			ret = mb_buffers(ex, rk, mb, err);
		if (ret == 0)
			ret = assign_slots(ex, rk, mb, err);
		if (ret == 0)
			ret = input_states(ex, rk, mb, ex->plan.step, err);
		exec_failed(ex, rk, ret);
	}
	if (ret == 0)
		ret = fetch_replicas(ex, mb, 0, err);
	for (L = 0; ret == 0 && L < ex->layers; L++)
		ret = moe_layer(ex, mb, L, 0, 0, err);
	if (ret == 0)
		ret = loss(ex, mb, err);
	for (L = ex->layers; ret == 0 && L-- > 0; cur = !cur)
		ret = moe_layer(ex, mb, L, 1, cur, err);
	return ret;
}

