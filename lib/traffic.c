/*
 * traffic.c - the token-level pass of the cost model: which GPU serves
 * every (token, expert) under a plan, and the DeepEP-style dispatch copies
 * that follow, counted per (micro-batch, layer, GPU) for RDMA and NVLink.
 * The rule is in sim.h (struct rlb_traffic) and docs/cost-model.md.
 */
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "sim.h"

/*
 * Where a (cell, source)'s next row goes: GPU gpu takes `left` more rows,
 * then the instances from `next` on that get rows from this source, in
 * instance order; a row beyond the plan goes to the home copy.
 * Unreplicated cells share one entry per GPU with left 1, which the count
 * never decrements; each counting thread has its own (struct
 * rlb_traffic_ws), so threads on other layers never write to one cache
 * line.  8 bytes, as there is one per (replicated cell, source).
 */
struct rlb_traffic_state {
	uint32_t left;
	uint16_t gpu;
	uint16_t next;
};

/* A replicated cell: its instances' GPUs and the rows of each source. */
struct rlb_traffic_split {
	size_t rows_off;	/* split_rows[rows_off + s * n + i] */
	uint32_t gpu_off;	/* split_gpu[gpu_off + i] */
	uint32_t n;		/* instances */
};

static void *zalloc(size_t n, size_t size)
{
	return calloc(n ? n : 1, size);
}

static void ws_release(struct rlb_traffic_ws *ws)
{
	free(ws->gstate);
	free(ws->hist);
	free(ws->nhist);
	free(ws->seen);
	free(ws->nseen);
	memset(ws, 0, sizeof(*ws));
}

static int ws_init(struct rlb_traffic_ws *ws, uint32_t ranks, uint32_t nodes)
{
	uint32_t g;

	memset(ws, 0, sizeof(*ws));
	ws->gstate = zalloc(ranks, sizeof(*ws->gstate));
	ws->hist = zalloc(ranks, sizeof(uint64_t));
	ws->nhist = zalloc(nodes, sizeof(uint64_t));
	ws->seen = zalloc(ranks, sizeof(uint32_t));
	ws->nseen = zalloc(nodes, sizeof(uint32_t));
	if (!ws->gstate || !ws->hist || !ws->nhist || !ws->seen || !ws->nseen) {
		ws_release(ws);
		return -1;
	}
	for (g = 0; g < ranks; g++) {
		ws->gstate[g].gpu = (uint16_t)g;
		ws->gstate[g].left = 1;
	}
	return 0;
}

void rlb_traffic_release(struct rlb_traffic *t)
{
	if (!t)
		return;
	free(t->rdma_send);
	free(t->rdma_recv);
	free(t->nvlink_send);
	free(t->nvlink_recv);
	free(t->rdma_to_node);
	free(t->cell);
	free(t->state);
	free(t->split);
	free(t->split_gpu);
	free(t->split_rows);
	free(t->node_of);
	ws_release(&t->ws);
	memset(t, 0, sizeof(*t));
}

static int check_plan(const struct rlb_step_plan *p, const struct rlb_loads *l,
		      uint32_t gpn, struct rlb_err *err)
{
	uint32_t pgpn;

	if (p->micro_batches != l->micro_batches || p->layers != l->layers ||
	    p->experts != l->experts || p->ranks != l->ranks)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "traffic: plan of %u micro-batches x %u layers x %u experts on %u ranks, loads of %u x %u x %u on %u",
				   p->micro_batches, p->layers, p->experts, p->ranks,
				   l->micro_batches, l->layers, l->experts, l->ranks);
	pgpn = p->gpus_per_node < p->ranks ? p->gpus_per_node : p->ranks;
	if (pgpn != gpn)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "traffic: plan has %u GPUs per node, expected %u",
				   p->gpus_per_node, gpn);
	if (!p->home || !p->inst_first)
		return rlb_err_set(err, RLB_EINVAL, "traffic: plan has no placement");
	return 0;
}

/*
 * First pass over the plan's cells: count the replicated ones and their
 * instances, check every GPU.
 */
static int count_splits(const struct rlb_step_plan *p, size_t ncells,
			size_t *nsplit, size_t *ninst, uint32_t *maxn,
			struct rlb_err *err)
{
	size_t c, k;

	*nsplit = 0;
	*ninst = 0;
	*maxn = 1;
	for (c = 0; c < ncells; c++) {
		size_t a = p->inst_first[c], b = p->inst_first[c + 1];

		if (b < a || b > p->ninst || b - a > p->ranks)
			return rlb_err_set(err, RLB_EINVAL, "traffic: plan cell %zu has bad instance bounds", c);
		for (k = a; k < b; k++)
			if (p->inst[k].gpu >= p->ranks)
				return rlb_err_set(err, RLB_EINVAL,
						   "traffic: instance of expert %u on GPU %u, plan has %u",
						   p->inst[k].expert, p->inst[k].gpu, p->ranks);
		if (b - a > 1) {
			(*nsplit)++;
			*ninst += b - a;
			if (b - a > *maxn)
				*maxn = (uint32_t)(b - a);
		}
	}
	return 0;
}

/*
 * Second pass: unreplicated cells point at their GPU's shared entry,
 * replicated ones at one entry per source, with the rows of each
 * (source, instance) from the plan's split.
 */
static void fill_cells(struct rlb_traffic *t, const struct rlb_step_plan *p,
		       const struct rlb_loads *l)
{
	uint32_t mb, layer, e, s, i, R = t->ranks;
	size_t c = 0, sp = 0, goff = 0, roff = 0;

	for (mb = 0; mb < t->micro_batches; mb++)
		for (layer = 0; layer < t->layers; layer++)
			for (e = 0; e < t->experts; e++, c++) {
				size_t a = p->inst_first[c], n = p->inst_first[c + 1] - a;
				uint32_t home = p->home[(size_t)layer * t->experts + e];
				struct rlb_traffic_split *x;

				if (n <= 1) {
					t->cell[c] = n ? p->inst[a].gpu : home;
					continue;
				}
				x = &t->split[sp];
				x->rows_off = roff;
				x->gpu_off = (uint32_t)goff;
				x->n = (uint32_t)n;
				for (i = 0; i < n; i++)
					t->split_gpu[goff + i] = p->inst[a + i].gpu;
				rlb_step_plan_split(p, l, mb, layer, e, t->split_rows + roff);
				for (s = 0; s < R; s++) {
					struct rlb_traffic_state *st = &t->state[sp * R + s];

					st->left = 0;
					st->gpu = (uint16_t)p->inst[a].gpu;
					st->next = 0;
				}
				t->cell[c] = RLB_TRAFFIC_SPLIT | (uint32_t)(sp * R);
				sp++;
				goff += n;
				roff += (size_t)R * n;
			}
}

int rlb_traffic_init(struct rlb_traffic *t, const struct rlb_step_plan *plan,
		     const struct rlb_loads *l, uint32_t gpus_per_node,
		     struct rlb_err *err)
{
	size_t ncells, nml, nsplit = 0, ninst = 0, nstate, c;
	uint32_t g, epr, maxn = 1;
	int ret;

	memset(t, 0, sizeof(*t));
	if (l->ranks == 0 || l->experts == 0 || gpus_per_node == 0)
		return rlb_err_set(err, RLB_EINVAL, "traffic: ranks, experts and GPUs per node must be positive");
	if (l->ranks > 65536)
		return rlb_err_set(err, RLB_ERANGE, "traffic: %u ranks, at most 65536", l->ranks);
	if (gpus_per_node > l->ranks)
		gpus_per_node = l->ranks;
	if (l->ranks % gpus_per_node)
		return rlb_err_set(err, RLB_EINVAL, "traffic: %u GPUs per node do not divide %u ranks",
				   gpus_per_node, l->ranks);
	if (!plan && l->experts % l->ranks)
		return rlb_err_set(err, RLB_EINVAL, "traffic: %u experts are not divisible by %u ranks",
				   l->experts, l->ranks);
	if (plan) {
		ret = check_plan(plan, l, gpus_per_node, err);
		if (ret < 0)
			return ret;
	}
	t->micro_batches = l->micro_batches;
	t->layers = l->layers;
	t->ranks = l->ranks;
	t->experts = l->experts;
	t->gpus_per_node = gpus_per_node;
	nml = (size_t)l->micro_batches * l->layers;
	ncells = nml * l->experts;
	if (plan) {
		ret = count_splits(plan, ncells, &nsplit, &ninst, &maxn, err);
		if (ret < 0)
			goto out;
	}
	nstate = nsplit * t->ranks;
	if (nstate >= RLB_TRAFFIC_SPLIT || ninst > UINT32_MAX || maxn > UINT16_MAX) {
		ret = rlb_err_set(err, RLB_ERANGE, "traffic: %zu replicated cells is too many", nsplit);
		goto out;
	}
	t->rdma_send = zalloc(nml * t->ranks, sizeof(uint64_t));
	t->rdma_recv = zalloc(nml * t->ranks, sizeof(uint64_t));
	t->nvlink_send = zalloc(nml * t->ranks, sizeof(uint64_t));
	t->nvlink_recv = zalloc(nml * t->ranks, sizeof(uint64_t));
	t->cell = zalloc(ncells, sizeof(uint32_t));
	t->state = zalloc(nstate, sizeof(*t->state));
	t->split = zalloc(nsplit, sizeof(*t->split));
	t->split_gpu = zalloc(ninst, sizeof(uint32_t));
	t->split_rows = zalloc(ninst * t->ranks, sizeof(uint32_t));
	t->node_of = zalloc(t->ranks, sizeof(uint32_t));
	if (!t->rdma_send || !t->rdma_recv || !t->nvlink_send || !t->nvlink_recv ||
	    !t->cell || !t->state || !t->split || !t->split_gpu || !t->split_rows ||
	    !t->node_of || ws_init(&t->ws, t->ranks, t->ranks / gpus_per_node) < 0) {
		ret = rlb_err_set(err, RLB_ENOMEM, "traffic: out of memory");
		goto out;
	}
	t->nsplit = nsplit;
	for (g = 0; g < t->ranks; g++)
		t->node_of[g] = g / gpus_per_node;
	if (plan) {
		fill_cells(t, plan, l);
	} else {
		epr = t->experts / t->ranks;
		for (c = 0; c < ncells; c++)
			t->cell[c] = (uint32_t)(c % t->experts) / epr;
	}
	ret = 0;
out:
	if (ret < 0)
		rlb_traffic_release(t);
	return ret;
}

int rlb_traffic_count_nodes(struct rlb_traffic *t, struct rlb_err *err)
{
	size_t n = (size_t)t->micro_batches * t->layers * t->ranks;

	if (t->rdma_to_node)
		return 0;
	if (!t->cell || t->rows)
		return rlb_err_set(err, RLB_EINVAL,
				   "traffic: per-node copies are asked for after counting, or before rlb_traffic_init");
	t->rdma_to_node = zalloc(n * (t->ranks / t->gpus_per_node), sizeof(uint32_t));
	if (!t->rdma_to_node)
		return rlb_err_set(err, RLB_ENOMEM, "traffic: out of memory");
	return 0;
}

/*
 * A (replicated cell, source) entry ran out of rows: the next instance
 * that gets rows from this source, or (past the plan) the home copy.
 */
static void advance(const struct rlb_traffic *t, struct rlb_traffic_ws *ws,
		    struct rlb_traffic_state *x)
{
	size_t k = (size_t)(x - t->state);
	const struct rlb_traffic_split *c = &t->split[k / t->ranks];
	const uint32_t *rows = t->split_rows + c->rows_off + (k % t->ranks) * c->n;

	while (x->next < c->n) {
		uint32_t i = x->next++;

		if (rows[i]) {
			x->gpu = (uint16_t)t->split_gpu[c->gpu_off + i];
			x->left = rows[i];
			return;
		}
	}
	x->gpu = (uint16_t)t->split_gpu[c->gpu_off];
	x->left = 1;
	ws->unplanned_rows++;
}

/*
 * Count tokens [0, ntok) of one chunk and layer from source SRC: per GPU
 * d the tokens with d among their destinations (t->hist, each token once
 * however many of its experts d serves) and per node the tokens with a
 * destination there (t->nhist).  A token stamp marks what the current
 * token already counted, so the loop has no branch but the replicated
 * cells' instance choice.
 */
static void count_tokens(const struct rlb_traffic *t, struct rlb_traffic_ws *ws,
			 const uint32_t *cell, const uint16_t *id, uint32_t ntok,
			 uint32_t topk, uint32_t src)
{
	const uint32_t E = t->experts;
	struct rlb_traffic_state *state = t->state, *gstate = ws->gstate;
	uint64_t *hist = ws->hist, *nhist = ws->nhist, rows = 0;
	uint32_t *seen = ws->seen, *nseen = ws->nseen;
	const uint32_t *node_of = t->node_of;
	uint32_t tok, k;

	for (tok = 0; tok < ntok; tok++, id += topk) {
		uint32_t stamp = ++ws->stamp;

		if (stamp == 0) {	/* wrapped: forget every mark */
			memset(seen, 0, t->ranks * sizeof(*seen));
			memset(nseen, 0, (t->ranks / t->gpus_per_node) * sizeof(*nseen));
			stamp = ws->stamp = 1;
		}
		for (k = 0; k < topk; k++) {
			uint32_t e = id[k], ref, sp, g, n;
			struct rlb_traffic_state *x;

			if (e >= E)
				continue;
			/* one entry per GPU, or one per source when replicated */
			ref = cell[e];
			sp = ref >> 31;
			x = (sp ? state : gstate) + (ref & ~RLB_TRAFFIC_SPLIT) +
				    (src & (0u - sp));
			rows++;
			if (__builtin_expect(x->left == 0, 0))
				advance(t, ws, x);
			x->left -= sp;
			g = x->gpu;
			hist[g] += seen[g] != stamp;
			seen[g] = stamp;
			n = node_of[g];
			nhist[n] += nseen[n] != stamp;
			nseen[n] = stamp;
		}
	}
	ws->rows += rows;
}

/*
 * byte_lanes[b] has bit i of b in the low bit of byte i: adding it to a
 * word adds b's bits to eight byte-wide counters at once.
 */
#define LANES(b) ((uint64_t)((b) & 1) | (uint64_t)((b) >> 1 & 1) << 8 | \
		  (uint64_t)((b) >> 2 & 1) << 16 | (uint64_t)((b) >> 3 & 1) << 24 | \
		  (uint64_t)((b) >> 4 & 1) << 32 | (uint64_t)((b) >> 5 & 1) << 40 | \
		  (uint64_t)((b) >> 6 & 1) << 48 | (uint64_t)((b) >> 7 & 1) << 56)
#define LANES4(b) LANES(b), LANES((b) + 1), LANES((b) + 2), LANES((b) + 3)
#define LANES16(b) LANES4(b), LANES4((b) + 4), LANES4((b) + 8), LANES4((b) + 12)
#define LANES64(b) LANES16(b), LANES16((b) + 16), LANES16((b) + 32), LANES16((b) + 48)
static const uint64_t byte_lanes[256] = {
	LANES64(0), LANES64(64), LANES64(128), LANES64(192),
};

/* Add the byte counters of N bits (N / 8 rounded up words) to hist, clear them. */
static void spill_lanes(uint64_t *acc, uint32_t n, uint64_t *hist)
{
	uint32_t d;

	for (d = 0; d < n; d++)
		hist[d] += acc[d / 8] >> (d % 8 * 8) & 0xff;
	memset(acc, 0, (n + 7) / 8 * sizeof(*acc));
}

/* With 8 GPUs per node: bit n set when byte n of the GPU mask is not 0. */
static inline uint64_t nodes_of_8(uint64_t gm)
{
	uint64_t b = gm | gm >> 4;

	b |= b >> 2;
	b |= b >> 1;
	return (b & 0x0101010101010101ull) * 0x0102040810204080ull >> 56;
}

/*
 * The same for up to 64 GPUs: each token's GPUs and nodes as bit masks in
 * registers, added to byte-wide counters (8 to a word) that are spilled
 * into the histograms every 255 tokens, before a byte can overflow.
 */
static void count_tokens_mask(const struct rlb_traffic *t, struct rlb_traffic_ws *ws,
			      const uint32_t *cell, const uint16_t *id,
			      uint32_t ntok, uint32_t topk, uint32_t src)
{
	const uint32_t E = t->experts, R = t->ranks;
	const uint32_t nodes = R / t->gpus_per_node;
	const uint32_t gw = (R + 7) / 8, nw = (nodes + 7) / 8;
	const int direct = t->nsplit == 0;	/* every cell names its GPU */
	const int gpn8 = t->gpus_per_node == 8;	/* nodes from the GPU mask */
	struct rlb_traffic_state *state = t->state, *gstate = ws->gstate;
	const uint32_t *node_of = t->node_of;
	uint64_t gacc[8] = { 0 }, nacc[8] = { 0 }, rows = 0;
	uint32_t tok, k, w, since = 0;

	for (tok = 0; tok < ntok; tok++, id += topk) {
		uint64_t gm = 0, nm = 0;

		for (k = 0; k < topk; k++) {
			uint32_t e = id[k], ref, sp, g;
			struct rlb_traffic_state *x;

			if (e >= E)
				continue;
			ref = cell[e];
			rows++;
			if (direct) {
				g = ref;
			} else {
				sp = ref >> 31;
				x = (sp ? state : gstate) + (ref & ~RLB_TRAFFIC_SPLIT) +
				    (src & (0u - sp));
				if (__builtin_expect(x->left == 0, 0))
					advance(t, ws, x);
				x->left -= sp;
				g = x->gpu;
			}
			gm |= 1ull << g;
			if (!gpn8)
				nm |= 1ull << node_of[g];
		}
		if (gpn8)
			nm = nodes_of_8(gm);
		for (w = 0; w < gw; w++)
			gacc[w] += byte_lanes[gm >> (w * 8) & 0xff];
		for (w = 0; w < nw; w++)
			nacc[w] += byte_lanes[nm >> (w * 8) & 0xff];
		if (++since == 255) {
			spill_lanes(gacc, R, ws->hist);
			spill_lanes(nacc, nodes, ws->nhist);
			since = 0;
		}
	}
	spill_lanes(gacc, R, ws->hist);
	spill_lanes(nacc, nodes, ws->nhist);
	ws->rows += rows;
}

/*
 * Turn the histograms of one chunk and layer into copies (struct
 * rlb_traffic) and clear them.
 */
static void flush_tokens(struct rlb_traffic *t, struct rlb_traffic_ws *ws,
			 size_t ml, uint32_t src)
{
	const uint32_t R = t->ranks, gpn = t->gpus_per_node, nodes = R / gpn;
	const uint32_t snode = t->node_of[src], lane = src - snode * gpn;
	uint64_t *rr = t->rdma_recv + ml * R, *ns = t->nvlink_send + ml * R;
	uint64_t *nr = t->nvlink_recv + ml * R, rsend = 0, nsend = 0;
	uint32_t *to_node = t->rdma_to_node ? t->rdma_to_node + (ml * R + src) * nodes : NULL;
	uint32_t d, n;

	for (d = 0; d < R; d++) {
		uint64_t h = ws->hist[d];
		uint32_t dn, rail;

		if (!h)
			continue;
		ws->hist[d] = 0;
		dn = t->node_of[d];
		rail = dn * gpn + lane;
		if (d == rail)		/* the source itself, or reached by RDMA */
			continue;
		if (dn == snode)
			nsend += h;
		else
			ns[rail] += h;
		nr[d] += h;
	}
	for (n = 0; n < nodes; n++) {
		uint64_t h = ws->nhist[n];

		ws->nhist[n] = 0;
		if (n == snode || !h)
			continue;
		rsend += h;
		rr[n * gpn + lane] += h;
		if (to_node)
			to_node[n] += (uint32_t)h;
	}
	t->rdma_send[ml * R + src] += rsend;
	ns[src] += nsend;
}

/* Sequence SEQ_INDEX's tokens on layers [lo, hi) into t, with workspace ws. */
static void add_seq_layers(struct rlb_traffic *t, struct rlb_traffic_ws *ws,
			   const struct rlb_schedule *s, uint32_t seq_index,
			   const struct rlb_seq *seq, uint32_t topk,
			   uint32_t lo, uint32_t hi)
{
	size_t c;

	if (!t->cell || !seq->ids || topk == 0 || topk > RLB_TRACE_MAX_TOPK)
		return;
	for (c = rlb_schedule_first_chunk(s, seq_index);
	     c < s->nchunks && s->chunks[c].seq == seq_index; c++) {
		const struct rlb_chunk *ch = &s->chunks[c];
		uint32_t end = ch->start + ch->tokens, layer;

		if (ch->mb >= t->micro_batches || ch->rank >= t->ranks ||
		    ch->start >= seq->tokens)
			continue;
		if (end > seq->tokens || end < ch->start)
			end = seq->tokens;
		for (layer = lo; layer < hi && layer < t->layers; layer++) {
			size_t ml = (size_t)ch->mb * t->layers + layer;
			const uint16_t *id = seq->ids +
				((size_t)layer * seq->tokens + ch->start) * topk;

			if (t->ranks <= 64)
				count_tokens_mask(t, ws, t->cell + ml * t->experts, id,
						  end - ch->start, topk, ch->rank);
			else
				count_tokens(t, ws, t->cell + ml * t->experts, id,
					     end - ch->start, topk, ch->rank);
			flush_tokens(t, ws, ml, ch->rank);
		}
	}
}

/* Move a workspace's row counts into the traffic. */
static void ws_flush(struct rlb_traffic *t, struct rlb_traffic_ws *ws)
{
	t->rows += ws->rows;
	t->unplanned_rows += ws->unplanned_rows;
	ws->rows = 0;
	ws->unplanned_rows = 0;
}

void rlb_traffic_add_seq(struct rlb_traffic *t, const struct rlb_schedule *s,
			 uint32_t seq_index, const struct rlb_seq *seq,
			 uint32_t topk)
{
	add_seq_layers(t, &t->ws, s, seq_index, seq, topk, 0, t->layers);
	ws_flush(t, &t->ws);
}

/*
 * One sequence's count split into parts: part i is traffic i / blocks on
 * its layer block i % blocks; worker w counts with ws[w] and keeps the
 * rows it saw per traffic in acc[w * nt + k].
 */
struct step_job {
	struct rlb_traffic *const *t;
	size_t nt;
	const struct rlb_schedule *s;
	uint32_t topk;
	uint32_t blocks;
	struct rlb_traffic_ws *ws;
	struct rlb_traffic_ws *acc;
};

static void count_part(void *ctx, const struct rlb_seq *seq, uint32_t seq_index,
		       size_t part, unsigned worker)
{
	const struct step_job *j = ctx;
	size_t k = part / j->blocks, b = part % j->blocks;
	struct rlb_traffic *t = j->t[k];
	struct rlb_traffic_ws *ws = &j->ws[worker], *acc = &j->acc[worker * j->nt + k];
	uint32_t lo = (uint32_t)(t->layers * b / j->blocks);
	uint32_t hi = (uint32_t)(t->layers * (b + 1) / j->blocks);

	add_seq_layers(t, ws, j->s, seq_index, seq, j->topk, lo, hi);
	acc->rows += ws->rows;
	acc->unplanned_rows += ws->unplanned_rows;
	ws->rows = 0;
	ws->unplanned_rows = 0;
}

int rlb_traffic_step(struct rlb_trace_reader *r, const struct rlb_schedule *s,
		     struct rlb_traffic *const *t, size_t nt,
		     struct rlb_pool *pool, struct rlb_err *err)
{
	const struct rlb_trace_header *h = rlb_trace_reader_header(r);
	unsigned threads = rlb_pool_threads(pool), w;
	struct step_job j;
	size_t k;
	int ret;

	if (!h)
		return rlb_err_set(err, RLB_EINVAL, "traffic: trace has no header");
	for (k = 0; k < nt; k++)
		if (t[k]->micro_batches != s->micro_batches || t[k]->ranks != s->ranks ||
		    t[k]->layers != h->moe_layers || t[k]->experts != h->experts)
			return rlb_err_set(err, RLB_EMISMATCH,
					   "traffic: %u micro-batches x %u layers x %u experts on %u ranks, step %u has %u x %u x %u on %u",
					   t[k]->micro_batches, t[k]->layers, t[k]->experts, t[k]->ranks,
					   s->step, s->micro_batches, h->moe_layers, h->experts, s->ranks);
	if (s->nseqs == 0 || nt == 0)
		return 0;
	memset(&j, 0, sizeof(j));
	j.t = t;
	j.nt = nt;
	j.s = s;
	j.topk = h->topk;
	/* a thread per layer block and traffic; one block does when alone */
	j.blocks = threads < h->moe_layers ? threads : h->moe_layers;
	if (j.blocks == 0)
		j.blocks = 1;
	j.ws = calloc(threads, sizeof(*j.ws));
	j.acc = calloc((size_t)threads * nt, sizeof(*j.acc));
	ret = j.ws && j.acc ? 0 : -1;
	for (w = 0; ret == 0 && w < threads; w++)
		ret = ws_init(&j.ws[w], s->ranks, s->ranks);
	if (ret < 0) {
		ret = rlb_err_set(err, RLB_ENOMEM, "traffic: out of memory");
		goto out;
	}
	ret = rlb_step_stream(r, s, pool, nt * j.blocks, count_part, &j, err);
	for (w = 0; w < threads; w++)
		for (k = 0; k < nt; k++)
			ws_flush(t[k], &j.acc[(size_t)w * nt + k]);
	for (k = 0; ret == 0 && k < nt; k++)
		if (t[k]->unplanned_rows)
			ret = rlb_err_set(err, RLB_EMISMATCH,
					  "step %u: %llu expert rows are not in the plan (the plan does not belong to this trace)",
					  s->step, (unsigned long long)t[k]->unplanned_rows);
out:
	for (w = 0; j.ws && w < threads; w++)
		ws_release(&j.ws[w]);
	free(j.ws);
	free(j.acc);
	return ret;
}
