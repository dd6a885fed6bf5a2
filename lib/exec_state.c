/*
 * exec_state.c - what the executor's ranks hold across micro-batches:
 * device buffers, home experts with their initial weights and optimizer
 * state, migration between steps, Adam, and releasing a rank.
 */
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "util.h"

/* ------------------------------------------------------------------ */
/* Buffers.                                                             */

int rlb_exec_dbuf(struct rlb_backend *be, struct dbuf *b, size_t bytes,
		  struct rlb_err *err)
{
	int ret;

	if (bytes <= b->cap)
		return 0;
	be->ops->free(be, b->p);
	b->p = NULL;
	b->cap = 0;
	ret = be->ops->alloc(be, bytes, &b->p, err);
	if (ret == 0)
		b->cap = bytes;
	return ret;
}

void rlb_exec_dbuf_free(struct rlb_backend *be, struct dbuf *b)
{
	if (be)
		be->ops->free(be, b->p);
	b->p = NULL;
	b->cap = 0;
}

/* ------------------------------------------------------------------ */
/* Home experts.                                                        */

static int home_alloc(struct rlb_exec *ex, struct exec_rank *rk,
		      struct exec_home **out, struct rlb_err *err)
{
	struct rlb_backend *be = rk->be;
	struct exec_home *h = calloc(1, sizeof(*h));
	int ret;

	*out = NULL;
	if (!h)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = be->ops->alloc(be, ex->np * be->weight_bytes, &h->w, err);
	if (ret == 0)
		ret = be->ops->alloc(be, ex->np * be->opt_bytes, &h->opt, err);
	if (ret == 0)
		ret = be->ops->alloc(be, ex->np * be->acc_bytes, &h->g, err);
	if (ret == 0)
		ret = be->ops->zero(be, rk->q, h->g, ex->np * be->acc_bytes, err);
	if (ret) {
		be->ops->free(be, h->w);
		be->ops->free(be, h->opt);
		be->ops->free(be, h->g);
		free(h);
		return ret;
	}
	*out = h;
	return 0;
}

static void home_free(struct exec_rank *rk, struct exec_home *h)
{
	if (!h)
		return;
	rk->be->ops->free(rk->be, h->w);
	rk->be->ops->free(rk->be, h->opt);
	rk->be->ops->free(rk->be, h->g);
	free(h);
}

/* The initial parameters of (layer, expert). */
static void initial_weights(const struct rlb_exec *ex, uint32_t L, uint32_t e,
			    float *w)
{
	size_t i;

	rlb_expert_init(&ex->shape, ex->o.seed, L, e, w);
	if (ex->o.init == RLB_EXEC_INIT_ID) {
		float id = (float)((size_t)L * ex->experts + e + 1) / 1024.0f;

		for (i = 0; i < ex->np; i++)
			w[i] += id;
	}
}

int rlb_exec_homes_init(struct rlb_exec *ex, struct rlb_err *err)
{
	float *w = malloc(ex->np * sizeof(*w));
	uint32_t i, L, e;
	int ret = w ? 0 : rlb_err_set(err, RLB_ENOMEM, "out of memory");

	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];

		for (L = 0; ret == 0 && L < ex->layers; L++)
			for (e = 0; ret == 0 && e < ex->experts; e++) {
				size_t c = (size_t)L * ex->experts + e;

				if (ex->cur_home[c] != rk->rank)
					continue;
				initial_weights(ex, L, e, w);
				ret = home_alloc(ex, rk, &rk->home[c], err);
				if (ret == 0)
					ret = rk->be->ops->upload_weights(rk->be, rk->q, &ex->shape, w,
									  rk->home[c]->w,
									  rk->home[c]->opt, err);
				if (ret == 0)
					ret = rk->be->ops->queue_sync(rk->be, rk->q, err);
				exec_failed(ex, rk, ret);
			}
	}
	free(w);
	return ret;
}

void rlb_exec_homes_free(struct rlb_exec *ex)
{
	size_t c, n = (size_t)ex->layers * ex->experts;
	uint32_t i;

	for (i = 0; i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];

		for (c = 0; rk->home && c < n; c++) {
			home_free(rk, rk->home[c]);
			rk->home[c] = NULL;
		}
	}
}

/*
 * Move every (layer, expert) whose home changes to its new home: weights
 * and optimizer state over point-to-point (inside the node when both
 * homes share one).  The gradient is zero between steps and not moved.
 */
int rlb_exec_migrate(struct rlb_exec *ex, const uint32_t *new_home, int measure,
		     struct rlb_err *err)
{
	size_t c, n = (size_t)ex->layers * ex->experts;
	struct exec_home **out = NULL;
	uint32_t i;
	int ret = 0;

	out = calloc(n * ex->nlocal, sizeof(*out));
	if (!out)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		struct rlb_backend *be = rk->be;
		size_t wb = ex->np * be->weight_bytes, ob = ex->np * be->opt_bytes;
		uint64_t t0 = rlb_now_ns();
		double bytes = 0;

		ret = exec_groups_start(rk, err);
		for (c = 0; ret == 0 && c < n; c++) {
			uint32_t from = ex->cur_home[c], to = new_home[c];
			enum rlb_comm_kind k = exec_comm_of(ex, from, to);

			if (from == to)
				continue;
			if (from == rk->rank) {
				ret = be->ops->send(be, k, to, rk->home[c]->w, wb, err);
				if (ret == 0)
					ret = be->ops->send(be, k, to, rk->home[c]->opt, ob, err);
				bytes += wb + ob;
			}
			if (ret == 0 && to == rk->rank) {
				ret = home_alloc(ex, rk, &out[i * n + c], err);
				if (ret == 0)
					ret = be->ops->recv(be, k, from, out[i * n + c]->w, wb, err);
				if (ret == 0)
					ret = be->ops->recv(be, k, from, out[i * n + c]->opt, ob, err);
				bytes += wb + ob;
			}
		}
		if (ret == 0)
			ret = exec_groups_end(rk, rk->q, err);
		if (measure) {
			rk->stepm[STEP_MIGRATION_BYTES] += bytes;
			rk->stepm[STEP_MIGRATION_S] += (rlb_now_ns() - t0) / 1e9;
		}
		exec_failed(ex, rk, ret);
	}
	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		uint64_t t0 = rlb_now_ns();

		ret = exec_failed(ex, rk, rk->be->ops->queue_sync(rk->be, rk->q, err));
		if (measure)
			rk->stepm[STEP_MIGRATION_S] += (rlb_now_ns() - t0) / 1e9;
	}
	/* Swap in the moved experts (also on failure, so that nothing leaks). */
	for (i = 0; i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];

		for (c = 0; c < n; c++) {
			if (ex->cur_home[c] == new_home[c])
				continue;
			if (ex->cur_home[c] == rk->rank && ret == 0) {
				home_free(rk, rk->home[c]);
				rk->home[c] = NULL;
			}
			if (out[i * n + c]) {
				if (ret == 0) {
					home_free(rk, rk->home[c]);
					rk->home[c] = out[i * n + c];
				} else {
					home_free(rk, out[i * n + c]);
				}
			}
		}
	}
	if (ret == 0)
		memcpy(ex->cur_home, new_home, n * sizeof(*new_home));
	free(out);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Adam.                                                                */

int rlb_exec_adam(struct rlb_exec *ex, uint32_t t, struct rlb_err *err)
{
	struct rlb_adam a = ex->o.adam;
	size_t c, n = (size_t)ex->layers * ex->experts;
	uint32_t i;
	int ret = 0;

	a.t = t;
	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];
		struct rlb_backend *be = rk->be;
		uint64_t t0 = rlb_now_ns();

		/*
		 * The homes' weights went out to their replicas on the copy
		 * queue: backend.h lets a send buffer change only once its
		 * queue is synchronised.
		 */
		ret = be->ops->queue_sync(be, rk->cq, err);
		for (c = 0; ret == 0 && c < n; c++) {
			struct exec_home *h = rk->home[c];

			if (!h)
				continue;
			ret = be->ops->adam(be, rk->q, &a, ex->np, 1.0f, h->w, h->g,
					    h->opt, err);
			if (ret == 0)
				ret = be->ops->zero(be, rk->q, h->g, ex->np * be->acc_bytes, err);
		}
		if (ret == 0)
			ret = be->ops->queue_sync(be, rk->q, err);
		rk->stepm[STEP_ADAM_S] += (rlb_now_ns() - t0) / 1e9;
		exec_failed(ex, rk, ret);
	}
	return ret;
}

/* Release everything a rank holds but its backend. */
void rlb_exec_rank_release(struct rlb_exec *ex, struct exec_rank *rk)
{
	struct rlb_backend *be = rk->be;
	uint32_t L, j;
	size_t c;

	if (!be)
		return;
	for (c = 0; rk->home && c < (size_t)ex->layers * ex->experts; c++)
		home_free(rk, rk->home[c]);
	free(rk->home);
	rk->home = NULL;
	for (L = 0; rk->slot && L < ex->layers; L++) {
		for (j = 0; j < rk->nslot[L]; j++) {
			be->ops->free(be, rk->slot[L][j].w);
			be->ops->free(be, rk->slot[L][j].g);
		}
		free(rk->slot[L]);
	}
	free(rk->slot);
	free(rk->nslot);
	rk->slot = NULL;
	rk->nslot = NULL;
	for (L = 0; rk->route && L < ex->layers; L++)
		rlb_exec_route_release(be, &rk->route[L]);
	free(rk->route);
	rk->route = NULL;
	for (j = 0; j < rk->ngtmp; j++)
		rlb_exec_dbuf_free(be, &rk->gtmp[j]);
	free(rk->gtmp);
	rk->gtmp = NULL;
	rk->ngtmp = 0;
	rlb_exec_dbuf_free(be, &rk->h);
	rlb_exec_dbuf_free(be, &rk->dh[0]);
	rlb_exec_dbuf_free(be, &rk->dh[1]);
	rlb_exec_dbuf_free(be, &rk->sendbuf);
	rlb_exec_dbuf_free(be, &rk->recvbuf);
	rlb_exec_dbuf_free(be, &rk->ebuf);
	rlb_exec_dbuf_free(be, &rk->ebuf2);
	rlb_exec_dbuf_free(be, &rk->backbuf);
	rlb_exec_dbuf_free(be, &rk->retbuf);
	for (L = 0; rk->ev_copy && L < ex->layers; L++)
		be->ops->event_free(be, rk->ev_copy[L]);
	free(rk->ev_copy);
	rk->ev_copy = NULL;
	be->ops->event_free(be, rk->ev0);
	be->ops->event_free(be, rk->ev1);
	be->ops->queue_free(be, rk->q);
	be->ops->queue_free(be, rk->cq);
	rk->ev0 = rk->ev1 = NULL;
	rk->q = rk->cq = NULL;
	free(rk->host_h);
	free(rk->mb_first);
	free(rk->tok_seq);
	free(rk->tok_pos);
	free(rk->ids);
	free(rk->gates);
	free(rk->cell);
	rk->host_h = NULL;
	rk->mb_first = rk->tok_seq = rk->tok_pos = NULL;
	rk->ids = NULL;
	rk->gates = NULL;
	rk->cell = NULL;
}
