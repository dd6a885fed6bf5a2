/*
 * exec_route.c - the executor's routing: each local rank's tokens of a step
 * (from the shared schedule and the trace, gates from the trace or
 * rlb_default_gates), and per (micro-batch, layer) which of a rank's
 * (token, expert) rows go to which instance, as rlb_step_plan_route
 * assigns them (the plan's quotas and split rule, rlb_step_plan_split, as
 * the simulator counts them), and which rows each rank computes, in what
 * order.
 */
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "plan_internal.h"
#include "util.h"

/* Grow a host array to n items of size bytes (contents kept). */
static int host_grow(void *pp, size_t *cap, size_t n, size_t size,
		     struct rlb_err *err)
{
	if (n <= *cap)
		return 0;
	if (rlb_grow(pp, cap, n, size))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	return 0;
}

/* ------------------------------------------------------------------ */
/* The step's tokens.                                                   */

static int rank_tokens_alloc(struct rlb_exec *ex, struct exec_rank *rk,
			     uint32_t ntok, struct rlb_err *err)
{
	size_t n = (size_t)ex->layers * ntok * ex->topk;

	rk->ntok = ntok;
	if (ntok <= rk->tok_cap && rk->tok_seq)
		return 0;
	free(rk->tok_seq);
	free(rk->tok_pos);
	free(rk->ids);
	free(rk->gates);
	rk->tok_seq = malloc((ntok ? ntok : 1) * sizeof(uint32_t));
	rk->tok_pos = malloc((ntok ? ntok : 1) * sizeof(uint32_t));
	rk->ids = malloc((n ? n : 1) * sizeof(uint16_t));
	rk->gates = malloc((n ? n : 1) * sizeof(float));
	rk->tok_cap = ntok;
	if (!rk->tok_seq || !rk->tok_pos || !rk->ids || !rk->gates) {
		rk->tok_cap = 0;
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	return 0;
}

/* Copy one chunk's routing into its rank's arrays. */
static void copy_chunk(struct rlb_exec *ex, struct exec_rank *rk,
		       const struct rlb_chunk *c, uint32_t first_tok,
		       uint32_t seq_index, const struct rlb_seq *seq)
{
	uint32_t K = ex->topk, t, L, k;

	for (t = 0; t < c->tokens; t++) {
		uint32_t pos = c->start + t, tok = first_tok + t;

		rk->tok_seq[tok] = seq_index;
		rk->tok_pos[tok] = pos;
		for (L = 0; L < ex->layers; L++) {
			size_t src = ((size_t)L * seq->tokens + pos) * K;
			size_t dst = ((size_t)L * rk->ntok + tok) * K;

			for (k = 0; k < K; k++)
				rk->ids[dst + k] = seq->ids[src + k];
			if (seq->gates)
				memcpy(rk->gates + dst, seq->gates + src,
				       K * sizeof(float));
			else
				rlb_default_gates(ex->o.seed, seq_index, pos, L, K,
						  rk->gates + dst);
		}
	}
}

int rlb_exec_load_tokens(struct rlb_exec *ex, uint32_t step, struct rlb_err *err)
{
	const struct rlb_schedule *s = &ex->sched;
	uint32_t mbs = s->micro_batches, i, m;
	struct rlb_seq seq;
	size_t c;
	int ret;

	ret = host_grow(&ex->chunk_off, &ex->chunk_cap, s->nchunks ? s->nchunks : 1,
			sizeof(*ex->chunk_off), err);
	for (i = 0; ret == 0 && i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];

		free(rk->mb_first);
		rk->mb_first = calloc((size_t)mbs + 1, sizeof(*rk->mb_first));
		if (!rk->mb_first)
			ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	if (ret)
		return ret;
	/* Tokens per (local rank, micro-batch), then each chunk's first token. */
	for (c = 0; c < s->nchunks; c++) {
		const struct rlb_chunk *ch = &s->chunks[c];

		if (ch->rank >= ex->first && ch->rank - ex->first < ex->nlocal)
			ex->rk[ch->rank - ex->first].mb_first[ch->mb + 1] += ch->tokens;
	}
	for (i = 0; i < ex->nlocal; i++) {
		struct exec_rank *rk = &ex->rk[i];

		for (m = 0; m < mbs; m++)
			rk->mb_first[m + 1] += rk->mb_first[m];
		ret = rank_tokens_alloc(ex, rk, rk->mb_first[mbs], err);
		if (ret)
			return ret;
	}
	{
		/* Chunks are in (seq, start) order: fill each (rank, mb) in turn. */
		uint32_t *next = calloc((size_t)ex->nlocal * (mbs ? mbs : 1), sizeof(*next));

		if (!next)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		for (c = 0; c < s->nchunks; c++) {
			const struct rlb_chunk *ch = &s->chunks[c];
			uint32_t li = ch->rank - ex->first;

			if (ch->rank < ex->first || li >= ex->nlocal)
				continue;
			ex->chunk_off[c] = ex->rk[li].mb_first[ch->mb] +
					   next[(size_t)li * mbs + ch->mb];
			next[(size_t)li * mbs + ch->mb] += ch->tokens;
		}
		free(next);
	}
	ret = rlb_trace_reader_seek_step(ex->tr, step, err);
	for (i = 0; ret == 0 && i < s->nseqs; i++) {
		ret = rlb_trace_reader_next(ex->tr, &seq, err);
		if (ret == 0 || (ret == 1 && seq.step != step))
			return rlb_err_set(err, RLB_ECORRUPT,
					   "step %u of the trace ends after %u of its %zu sequences",
					   step, i, s->nseqs);
		if (ret < 0)
			return ret;
		ret = 0;
		for (c = rlb_schedule_first_chunk(s, i);
		     c < s->nchunks && s->chunks[c].seq == i; c++) {
			const struct rlb_chunk *ch = &s->chunks[c];
			uint32_t li = ch->rank - ex->first;

			if (ch->rank < ex->first || li >= ex->nlocal)
				continue;
			if ((uint64_t)ch->start + ch->tokens > seq.tokens)
				return rlb_err_set(err, RLB_ECORRUPT,
						   "step %u sequence %u: %u tokens, schedule wants %u",
						   step, i, seq.tokens, ch->start + ch->tokens);
			copy_chunk(ex, &ex->rk[li], ch, ex->chunk_off[c], i, &seq);
		}
	}
	return ret;
}

/* ------------------------------------------------------------------ */
/* Routes.                                                              */

/* Zero the counts and grow the source-side arrays to NROWS rows. */
static int route_alloc(struct exec_route *r, uint32_t ranks, size_t nrows,
		       struct rlb_err *err)
{
	if (!r->send_cnt) {
		r->send_cnt = calloc(ranks, sizeof(*r->send_cnt));
		r->recv_cnt = calloc(ranks, sizeof(*r->recv_cnt));
		if (!r->send_cnt || !r->recv_cnt)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	memset(r->send_cnt, 0, ranks * sizeof(*r->send_cnt));
	memset(r->recv_cnt, 0, ranks * sizeof(*r->recv_cnt));
	if (nrows > r->host_cap_rows) {
		size_t cap = r->host_cap_rows;

		if (host_grow(&r->send_idx, &cap, nrows, sizeof(uint32_t), err))
			return RLB_ENOMEM;
		cap = r->host_cap_rows;
		if (host_grow(&r->send_gate, &cap, nrows, sizeof(float), err))
			return RLB_ENOMEM;
		cap = r->host_cap_rows;
		if (host_grow(&r->tk_pos, &cap, nrows, sizeof(uint32_t), err))
			return RLB_ENOMEM;
		cap = r->host_cap_rows;
		if (host_grow(&r->tk_gate, &cap, nrows, sizeof(float), err))
			return RLB_ENOMEM;
		r->host_cap_rows = cap;
	}
	return 0;
}

/* Grow the destination-side arrays to NRECV rows. */
static int route_alloc_recv(struct exec_route *r, size_t nrecv,
			    struct rlb_err *err)
{
	if (nrecv > r->host_cap_recv) {
		size_t cap = r->host_cap_recv;

		if (host_grow(&r->perm, &cap, nrecv, sizeof(uint32_t), err))
			return RLB_ENOMEM;
		cap = r->host_cap_recv;
		if (host_grow(&r->unperm, &cap, nrecv, sizeof(uint32_t), err))
			return RLB_ENOMEM;
		r->host_cap_recv = cap;
	}
	return 0;
}

/*
 * Source side: where each of the rank's rows of (mb, layer) goes
 * (rlb_step_plan_route's rule), sorted by destination (GPU, expert).
 */
static int route_source(struct rlb_exec *ex, struct exec_rank *rk,
			struct exec_route *r, uint32_t mb, uint32_t L,
			struct rlb_err *err)
{
	uint32_t K = ex->topk, E = ex->experts;
	uint32_t tok0 = rk->mb_first[mb], ntok = rk->mb_first[mb + 1] - tok0;
	const uint16_t *ids = rk->ids + ((size_t)L * rk->ntok + tok0) * K;
	const float *gates = rk->gates + ((size_t)L * rk->ntok + tok0) * K;
	size_t nkeys = (size_t)ex->ranks * E, j;
	int ret;

	/* tk_pos first holds each row's instance among its expert's */
	ret = rlb_step_plan_route_split(&ex->plan, mb, L, rk->rank, ex->split,
					ex->split_first, ids, ntok, K,
					ex->cursor, r->tk_pos, err);
	if (ret)
		return ret;
	memset(ex->key_cnt, 0, (nkeys + 1) * sizeof(*ex->key_cnt));
	for (j = 0; j < (size_t)ntok * K; j++) {
		uint32_t n, gpu = rlb_step_plan_cell(&ex->plan, mb, L, ids[j],
						     &n)[r->tk_pos[j]].gpu;

		r->tk_pos[j] = gpu * E + ids[j];
		r->tk_gate[j] = gates[j];
		ex->key_cnt[r->tk_pos[j] + 1]++;
		r->send_cnt[gpu]++;
	}
	for (j = 0; j < nkeys; j++)
		ex->key_cnt[j + 1] += ex->key_cnt[j];
	for (j = 0; j < (size_t)ntok * K; j++) {
		uint32_t pos = ex->key_cnt[r->tk_pos[j]]++;

		r->tk_pos[j] = pos;
		r->send_idx[pos] = (uint32_t)(j / K);
		r->send_gate[pos] = r->tk_gate[j];
	}
	return 0;
}

/* Destination side: the instances the rank computes and their rows. */
static int route_dest(struct rlb_exec *ex, struct exec_rank *rk,
		      struct exec_route *r, uint32_t mb, uint32_t L,
		      size_t *blk, struct rlb_err *err)
{
	uint32_t E = ex->experts, me = rk->rank, e, i, n, s;
	size_t jm = 0, off = 0, q;
	int ret;

	r->ninst = 0;
	for (e = 0; e < E; e++) {
		const struct rlb_plan_instance *in = rlb_step_plan_cell(&ex->plan, mb, L, e, &n);

		for (i = 0; i < n; i++) {
			struct exec_inst *x;

			if (in[i].gpu != me)
				continue;
			ret = host_grow(&r->inst, &r->inst_cap, r->ninst + 1,
					sizeof(*r->inst), err);
			if (ret)
				return ret;
			x = &r->inst[r->ninst++];
			memset(x, 0, sizeof(*x));
			x->expert = e;
			x->cell_index = i;
			x->home_gpu = in[0].gpu;
			x->rows = in[i].quota;
			x->replica = i > 0;
			for (s = 0; s < ex->ranks; s++)
				r->recv_cnt[s] += ex->split[ex->split_first[e] + (size_t)s * n + i];
		}
	}
	for (s = 0; s < ex->ranks; s++) {
		blk[s] = off;
		off += r->recv_cnt[s];
	}
	r->nrecv = (uint32_t)off;
	ret = route_alloc_recv(r, off, err);
	if (ret)
		return ret;
	for (i = 0; i < r->ninst; i++) {
		struct exec_inst *x = &r->inst[i];
		size_t base = ex->split_first[x->expert];

		rlb_step_plan_cell(&ex->plan, mb, L, x->expert, &n);
		x->first = jm;
		for (s = 0; s < ex->ranks; s++) {
			size_t c = ex->split[base + (size_t)s * n + x->cell_index];

			for (q = 0; q < c; q++) {
				r->perm[jm] = (uint32_t)(blk[s] + q);
				r->unperm[blk[s] + q] = (uint32_t)jm;
				jm++;
			}
			blk[s] += c;
		}
		if (jm - x->first != x->rows)
			return rlb_err_set(err, RLB_EMISMATCH,
					   "step %u mb %u layer %u expert %u: quota %u, split gives %zu rows",
					   ex->plan.step, mb, L, x->expert, x->rows,
					   jm - x->first);
	}
	return 0;
}

static int upload_idx(struct rlb_backend *be, struct rlb_queue *q,
		      struct dbuf *d, const void *host, size_t bytes,
		      struct rlb_err *err)
{
	int ret;

	if (bytes == 0)
		return 0;
	ret = rlb_exec_dbuf(be, d, bytes, err);
	return ret ? ret : be->ops->upload(be, q, d->p, host, bytes, err);
}

int rlb_exec_route_mb(struct rlb_exec *ex, struct exec_rank *rk, uint32_t mb,
		      struct rlb_err *err)
{
	struct rlb_backend *be = rk->be;
	uint32_t L, ntok = rk->mb_first[mb + 1] - rk->mb_first[mb];
	size_t nrows = (size_t)ntok * ex->topk;
	size_t *blk = malloc(ex->ranks * sizeof(*blk));
	int ret = blk ? 0 : rlb_err_set(err, RLB_ENOMEM, "out of memory");

	for (L = 0; ret == 0 && L < ex->layers; L++) {
		struct exec_route *r = &rk->route[L];

		ret = rlb_step_plan_split_cells(&ex->plan, &ex->loads, mb, L,
						&ex->split, &ex->split_cap,
						ex->split_first, err);
		if (ret == 0)
			ret = route_alloc(r, ex->ranks, nrows, err);
		if (ret == 0) {
			r->nrows = (uint32_t)nrows;
			ret = route_source(ex, rk, r, mb, L, err);
		}
		if (ret == 0)
			ret = route_dest(ex, rk, r, mb, L, blk, err);
		if (ret == 0)
			ret = upload_idx(be, rk->q, &r->d_send_idx, r->send_idx,
					 nrows * sizeof(uint32_t), err);
		if (ret == 0)
			ret = upload_idx(be, rk->q, &r->d_send_gate, r->send_gate,
					 nrows * sizeof(float), err);
		if (ret == 0)
			ret = upload_idx(be, rk->q, &r->d_tk_pos, r->tk_pos,
					 nrows * sizeof(uint32_t), err);
		if (ret == 0)
			ret = upload_idx(be, rk->q, &r->d_tk_gate, r->tk_gate,
					 nrows * sizeof(float), err);
		if (ret == 0)
			ret = upload_idx(be, rk->q, &r->d_perm, r->perm,
					 r->nrecv * sizeof(uint32_t), err);
		if (ret == 0)
			ret = upload_idx(be, rk->q, &r->d_unperm, r->unperm,
					 r->nrecv * sizeof(uint32_t), err);
	}
	free(blk);
	return ret;
}

void rlb_exec_route_release(struct rlb_backend *be, struct exec_route *r)
{
	free(r->send_cnt);
	free(r->recv_cnt);
	free(r->inst);
	free(r->send_idx);
	free(r->send_gate);
	free(r->tk_pos);
	free(r->tk_gate);
	free(r->perm);
	free(r->unperm);
	rlb_exec_dbuf_free(be, &r->d_send_idx);
	rlb_exec_dbuf_free(be, &r->d_send_gate);
	rlb_exec_dbuf_free(be, &r->d_tk_pos);
	rlb_exec_dbuf_free(be, &r->d_tk_gate);
	rlb_exec_dbuf_free(be, &r->d_perm);
	rlb_exec_dbuf_free(be, &r->d_unperm);
	rlb_exec_dbuf_free(be, &r->x);
	rlb_exec_dbuf_free(be, &r->act);
	memset(r, 0, sizeof(*r));
}
