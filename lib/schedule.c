/*
 * schedule.c - micro-batch packing (in-order windows, step-wide
 * first-fit-decreasing, per-rank dynamic batching) and the
 * per-(micro-batch, layer, source rank, expert) token counts that plan,
 * the simulator and train-step share.
 * The rules are documented in docs/schedule.md.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "schedule.h"
#include "util.h"

/* Cut every sequence into chunks of at most mb_tokens, in (seq, start) order. */
static int make_chunks(struct rlb_schedule *s, const uint32_t *seq_tokens,
		       size_t nseqs, uint32_t mb_tokens, struct rlb_err *err)
{
	size_t n = 0, i, c = 0;

	for (i = 0; i < nseqs; i++)
		n += seq_tokens[i] / mb_tokens + (seq_tokens[i] % mb_tokens != 0);
	s->nchunks = n;
	if (n == 0)
		return 0;
	s->chunks = calloc(n, sizeof(*s->chunks));
	if (!s->chunks)
		return rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory for %zu chunks", n);
	for (i = 0; i < nseqs; i++) {
		uint32_t start = 0;

		while (start < seq_tokens[i]) {
			uint32_t left = seq_tokens[i] - start;
			struct rlb_chunk *ch = &s->chunks[c++];

			ch->seq = (uint32_t)i;
			ch->start = start;
			ch->tokens = left < mb_tokens ? left : mb_tokens;
			start += ch->tokens;
		}
	}
	return 0;
}

/*
 * in-order: one window (micro-batch) at a time; best fit over the
 * window's ranks (least room that still fits, lowest rank on ties); a
 * chunk that fits no rank closes the window and opens the next one.
 */
static int pack_in_order(struct rlb_schedule *s, struct rlb_err *err)
{
	uint32_t *load, mb = 0, r;
	size_t c;

	if (s->nchunks == 0)
		return 0;
	load = calloc(s->ranks, sizeof(*load));
	if (!load)
		return rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory");
	for (c = 0; c < s->nchunks; c++) {
		struct rlb_chunk *ch = &s->chunks[c];
		uint32_t best = UINT32_MAX, best_room = UINT32_MAX;

		for (r = 0; r < s->ranks; r++) {
			uint32_t room = s->mb_tokens - load[r];

			if (room >= ch->tokens && room < best_room) {
				best = r;
				best_room = room;
			}
		}
		if (best == UINT32_MAX) {
			mb++;
			memset(load, 0, s->ranks * sizeof(*load));
			best = 0;
		}
		ch->mb = mb;
		ch->rank = best;
		load[best] += ch->tokens;
	}
	s->micro_batches = mb + 1;
	free(load);
	return 0;
}

/* Order of ffd placement: longer chunks first, then (seq, start) order. */
static int longer(const void *chunks, uint32_t a, uint32_t b)
{
	const struct rlb_chunk *ch = chunks;

	return ch[a].tokens > ch[b].tokens;
}

/*
 * A max-tree over the rooms of the (mb, rank) bins in (mb, rank) order,
 * so that "first bin with room >= len" is a descent from the root.
 * Leaves past the open bins have room 0.
 */
struct room_tree {
	size_t cap;		/* leaves, a power of two */
	size_t nbins;
	uint32_t *t;		/* [2 * cap], t[cap + b] = room of bin b */
};

static int tree_grow(struct room_tree *rt, size_t nbins)
{
	size_t cap = rt->cap ? rt->cap : 1, i;
	uint32_t *t;

	while (cap < nbins)
		cap *= 2;
	if (cap != rt->cap) {
		t = calloc(2 * cap, sizeof(*t));
		if (!t)
			return RLB_ENOMEM;
		if (rt->t)
			memcpy(t + cap, rt->t + rt->cap, rt->nbins * sizeof(*t));
		free(rt->t);
		rt->t = t;
		rt->cap = cap;
		for (i = cap - 1; i >= 1; i--)
			rt->t[i] = rt->t[2 * i] > rt->t[2 * i + 1] ? rt->t[2 * i] : rt->t[2 * i + 1];
	}
	return 0;
}

static void tree_set(struct room_tree *rt, size_t b, uint32_t room)
{
	size_t i = rt->cap + b;

	rt->t[i] = room;
	for (i /= 2; i >= 1; i /= 2)
		rt->t[i] = rt->t[2 * i] > rt->t[2 * i + 1] ? rt->t[2 * i] : rt->t[2 * i + 1];
}

/* First bin with room >= need, or SIZE_MAX. */
static size_t tree_first(const struct room_tree *rt, uint32_t need)
{
	size_t i = 1;

	if (rt->t[1] < need)
		return SIZE_MAX;
	while (i < rt->cap)
		i = rt->t[2 * i] >= need ? 2 * i : 2 * i + 1;
	return i - rt->cap;
}

static int pack_ffd(struct rlb_schedule *s, struct rlb_err *err)
{
	struct room_tree rt = {0};
	uint32_t *idx = NULL, *tmp = NULL;
	size_t c, b, r;
	int ret = 0;

	if (s->nchunks == 0)
		return 0;
	if (s->nchunks > UINT32_MAX)
		return rlb_err_set(err, RLB_EINVAL, "schedule: step %u has too many chunks (%zu)",
				   s->step, s->nchunks);
	idx = malloc(s->nchunks * sizeof(*idx));
	tmp = malloc(s->nchunks * sizeof(*tmp));
	if (!idx || !tmp) {
		ret = rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory");
		goto out;
	}
	for (c = 0; c < s->nchunks; c++)
		idx[c] = (uint32_t)c;
	rlb_sort_stable(idx, tmp, s->nchunks, longer, s->chunks);
	for (c = 0; c < s->nchunks; c++) {
		struct rlb_chunk *ch = &s->chunks[idx[c]];

		b = rt.t ? tree_first(&rt, ch->tokens) : SIZE_MAX;
		if (b == SIZE_MAX) {
			b = rt.nbins;
			if (tree_grow(&rt, rt.nbins + s->ranks) < 0) {
				ret = rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory");
				goto out;
			}
			for (r = 0; r < s->ranks; r++)
				tree_set(&rt, rt.nbins + r, s->mb_tokens);
			rt.nbins += s->ranks;
		}
		ch->mb = (uint32_t)(b / s->ranks);
		ch->rank = (uint32_t)(b % s->ranks);
		tree_set(&rt, b, rt.t[rt.cap + b] - ch->tokens);
	}
	s->micro_batches = (uint32_t)(rt.nbins / s->ranks);
out:
	free(rt.t);
	free(idx);
	free(tmp);
	return ret;
}

/*
 * A binary min-heap of indices ordered by (key, index), for "the rank (or
 * micro-batch) with the fewest tokens, lowest on ties".  With every key
 * equal, the identity order is already a heap.
 */
static int lighter(const uint64_t *key, uint32_t a, uint32_t b)
{
	return key[a] < key[b] || (key[a] == key[b] && a < b);
}

static void heap_init(uint32_t *h, uint64_t *key, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		h[i] = i;
		key[i] = 0;
	}
}

/* Key of the top grew by ADD: sift it down. */
static void heap_add_top(uint32_t *h, uint64_t *key, uint32_t n, uint64_t add)
{
	uint32_t i = 0, top = h[0];

	key[top] += add;
	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && lighter(key, h[c + 1], h[c]))
			c++;
		if (!lighter(key, h[c], top))
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = top;
}

/*
 * One rank's chunks ord[0..n) (longest first) into m micro-batches: each
 * to the one with the fewest tokens, lowest on ties (it has the most
 * room, so when it cannot take the chunk none can).  Writes ch->mb and
 * the tokens of each micro-batch to key; 0 when a chunk fits none.
 */
static int split_rank(struct rlb_schedule *s, const uint32_t *ord, size_t n,
		      uint32_t m, uint32_t *h, uint64_t *key)
{
	size_t i;

	heap_init(h, key, m);
	for (i = 0; i < n; i++) {
		struct rlb_chunk *ch = &s->chunks[ord[i]];

		if (key[h[0]] + ch->tokens > s->mb_tokens)
			return 0;
		ch->mb = h[0];
		heap_add_top(h, key, m, ch->tokens);
	}
	return 1;
}

/* Micro-batches first-fit-decreasing needs for ord[0..n) (longest first). */
static int ffd_count(const struct rlb_schedule *s, const uint32_t *ord, size_t n,
		     uint32_t *count)
{
	struct room_tree rt = {0};
	size_t i, b;

	for (i = 0; i < n; i++) {
		uint32_t len = s->chunks[ord[i]].tokens;

		b = rt.t ? tree_first(&rt, len) : SIZE_MAX;
		if (b == SIZE_MAX) {
			b = rt.nbins;
			if (tree_grow(&rt, rt.nbins + 1) < 0) {
				free(rt.t);
				return RLB_ENOMEM;
			}
			tree_set(&rt, rt.nbins++, s->mb_tokens);
		}
		tree_set(&rt, b, rt.t[rt.cap + b] - len);
	}
	*count = (uint32_t)rt.nbins;
	free(rt.t);
	return 0;
}

/* Heavier micro-batches first, then lower index. */
static int heavier(const void *key, uint32_t a, uint32_t b)
{
	const uint64_t *k = key;

	return k[a] > k[b];
}

/*
 * dynamic: token-budget ("dynamic") batching as RL trainers do it.  The
 * step is dealt over the ranks balanced by tokens, each rank cuts its
 * share into the same number of micro-batches balanced by tokens, and
 * micro-batch m runs every rank's m-th heaviest.
 */
static int pack_dynamic(struct rlb_schedule *s, struct rlb_err *err)
{
	uint32_t R = s->ranks, m = 0, r, b, nb, *idx, *tmp, *ord, *h, *num;
	uint64_t *key;
	size_t c, n, *first;
	int ret = 0;

	if (s->nchunks == 0)
		return 0;
	if (s->nchunks >= UINT32_MAX)
		return rlb_err_set(err, RLB_EINVAL, "schedule: step %u has too many chunks (%zu)",
				   s->step, s->nchunks);
	n = s->nchunks > R ? s->nchunks : R;
	idx = malloc(n * sizeof(*idx));
	tmp = malloc(n * sizeof(*tmp));
	ord = malloc(n * sizeof(*ord));
	h = malloc(n * sizeof(*h));
	num = malloc(n * sizeof(*num));
	key = malloc(n * sizeof(*key));
	first = calloc((size_t)R + 1, sizeof(*first));
	if (!idx || !tmp || !ord || !h || !num || !key || !first) {
		ret = rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory");
		goto out;
	}
	for (c = 0; c < s->nchunks; c++)
		idx[c] = (uint32_t)c;
	rlb_sort_stable(idx, tmp, s->nchunks, longer, s->chunks);
	/* Deal: longest first, each chunk to the rank with the fewest tokens. */
	heap_init(h, key, R);
	for (c = 0; c < s->nchunks; c++) {
		struct rlb_chunk *ch = &s->chunks[idx[c]];

		ch->rank = h[0];
		first[h[0] + 1]++;
		heap_add_top(h, key, R, ch->tokens);
	}
	/* Each rank's chunks, still longest first, at ord[first[r] .. first[r + 1]). */
	for (r = 0; r < R; r++) {
		first[r + 1] += first[r];
		num[r] = (uint32_t)first[r];	/* where the rank's next chunk goes */
	}
	for (c = 0; c < s->nchunks; c++)
		ord[num[s->chunks[idx[c]].rank]++] = idx[c];
	for (r = 0; r < R; r++) {
		if (ffd_count(s, ord + first[r], first[r + 1] - first[r], &nb) < 0) {
			ret = rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory");
			goto out;
		}
		if (nb > m)
			m = nb;
	}
	/* Split every rank into m micro-batches; one more for all when one fails. */
	for (r = 0; r < R;) {
		if (split_rank(s, ord + first[r], first[r + 1] - first[r], m, h, key)) {
			r++;
			continue;
		}
		m++;
		r = 0;
	}
	/* Number each rank's micro-batches by descending tokens. */
	for (r = 0; r < R; r++) {
		memset(key, 0, m * sizeof(*key));
		for (c = first[r]; c < first[r + 1]; c++)
			key[s->chunks[ord[c]].mb] += s->chunks[ord[c]].tokens;
		for (b = 0; b < m; b++)
			idx[b] = b;
		rlb_sort_stable(idx, tmp, m, heavier, key);
		for (b = 0; b < m; b++)
			num[idx[b]] = b;
		for (c = first[r]; c < first[r + 1]; c++)
			s->chunks[ord[c]].mb = num[s->chunks[ord[c]].mb];
	}
	s->micro_batches = m;
out:
	free(idx);
	free(tmp);
	free(ord);
	free(h);
	free(num);
	free(key);
	free(first);
	return ret;
}

/* Zero s, record what every schedule holds, and check what both builders take. */
static int schedule_begin(struct rlb_schedule *s, uint32_t step, enum rlb_pack pack,
			  uint32_t ranks, uint32_t mb_tokens, size_t nseqs,
			  struct rlb_err *err)
{
	memset(s, 0, sizeof(*s));
	s->step = step;
	s->pack = pack;
	s->ranks = ranks;
	s->mb_tokens = mb_tokens;
	s->nseqs = nseqs;
	if (ranks == 0)
		return rlb_err_set(err, RLB_EINVAL, "schedule: EP size is 0");
	if (mb_tokens == 0)
		return rlb_err_set(err, RLB_EINVAL, "schedule: micro-batch token budget is 0");
	if (nseqs > UINT32_MAX)
		return rlb_err_set(err, RLB_EINVAL, "schedule: step %u has too many sequences (%zu)",
				   step, nseqs);
	return 0;
}

int rlb_schedule_build(struct rlb_schedule *s, uint32_t step,
		       const uint32_t *seq_tokens, size_t nseqs,
		       uint32_t ranks, uint32_t mb_tokens, enum rlb_pack pack,
		       struct rlb_err *err)
{
	int ret;

	ret = schedule_begin(s, step, pack, ranks, mb_tokens, nseqs, err);
	if (ret < 0)
		return ret;
	if (nseqs && !seq_tokens)
		return rlb_err_set(err, RLB_EINVAL, "schedule: no sequence lengths");
	if (pack != RLB_PACK_IN_ORDER && pack != RLB_PACK_FFD && pack != RLB_PACK_DYNAMIC)
		return rlb_err_set(err, RLB_EINVAL,
				   "schedule: packing rule %d (%s) is not one that builds a schedule (in-order, ffd or dynamic)",
				   (int)pack, rlb_pack_name(pack));
	ret = make_chunks(s, seq_tokens, nseqs, mb_tokens, err);
	if (ret < 0)
		return ret;
	if (pack == RLB_PACK_IN_ORDER)
		return pack_in_order(s, err);
	if (pack == RLB_PACK_DYNAMIC)
		return pack_dynamic(s, err);
	return pack_ffd(s, err);
}

void rlb_schedule_release(struct rlb_schedule *s)
{
	if (!s)
		return;
	free(s->chunks);
	memset(s, 0, sizeof(*s));
}

size_t rlb_schedule_first_chunk(const struct rlb_schedule *s, uint32_t seq)
{
	size_t lo = 0, hi = s->nchunks;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->chunks[mid].seq < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nchunks && s->chunks[lo].seq == seq ? lo : s->nchunks;
}

int rlb_schedule_rank_balance(const struct rlb_schedule *s, double *out, size_t *n)
{
	size_t cells = (size_t)s->micro_batches * s->ranks, c;
	uint64_t *tok = calloc(cells ? cells : 1, sizeof(*tok));
	uint32_t mb, r;

	*n = 0;
	if (!tok)
		return RLB_ENOMEM;
	for (c = 0; c < s->nchunks; c++)
		if (s->chunks[c].mb < s->micro_batches && s->chunks[c].rank < s->ranks)
			tok[(size_t)s->chunks[c].mb * s->ranks + s->chunks[c].rank] +=
				s->chunks[c].tokens;
	for (mb = 0; mb < s->micro_batches; mb++) {
		const uint64_t *t = tok + (size_t)mb * s->ranks;
		uint64_t total = 0, max = 0;

		for (r = 0; r < s->ranks; r++) {
			total += t[r];
			if (t[r] > max)
				max = t[r];
		}
		if (total)
			out[(*n)++] = (double)max * s->ranks / (double)total;
	}
	free(tok);
	return 0;
}

int rlb_loads_init(struct rlb_loads *l, uint32_t micro_batches,
		   uint32_t layers, uint32_t ranks, uint32_t experts,
		   struct rlb_err *err)
{
	size_t n = 1;
	uint32_t dim[4] = { micro_batches, layers, ranks, experts };
	int i;

	memset(l, 0, sizeof(*l));
	l->micro_batches = micro_batches;
	l->layers = layers;
	l->ranks = ranks;
	l->experts = experts;
	for (i = 0; i < 4; i++) {
		if (dim[i] == 0)
			return 0;
		if (n > SIZE_MAX / sizeof(uint32_t) / dim[i])
			return rlb_err_set(err, RLB_ERANGE, "loads: table of %u x %u x %u x %u counts is too large",
					   micro_batches, layers, ranks, experts);
		n *= dim[i];
	}
	l->count = calloc(n, sizeof(*l->count));
	if (!l->count)
		return rlb_err_set(err, RLB_ENOMEM, "loads: out of memory for %zu counts", n);
	return 0;
}

void rlb_loads_release(struct rlb_loads *l)
{
	if (!l)
		return;
	free(l->count);
	memset(l, 0, sizeof(*l));
}

/* Sequence SEQ_INDEX's tokens on layers [lo, hi) into l. */
static void add_seq_layers(struct rlb_loads *l, const struct rlb_schedule *s,
			   uint32_t seq_index, const struct rlb_seq *seq,
			   uint32_t topk, uint32_t lo, uint32_t hi)
{
	size_t c;
	uint32_t layer;

	if (!l->count || !seq->ids)
		return;
	for (c = rlb_schedule_first_chunk(s, seq_index);
	     c < s->nchunks && s->chunks[c].seq == seq_index; c++) {
		const struct rlb_chunk *ch = &s->chunks[c];
		uint32_t end = ch->start + ch->tokens;

		if (ch->mb >= l->micro_batches || ch->rank >= l->ranks ||
		    ch->start >= seq->tokens)
			continue;
		if (end > seq->tokens)
			end = seq->tokens;
		for (layer = lo; layer < hi && layer < l->layers; layer++) {
			uint32_t *row = l->count + rlb_loads_index(l, ch->mb, layer, ch->rank, 0);
			const uint16_t *id = seq->ids +
				((size_t)layer * seq->tokens + ch->start) * topk;
			size_t i, n = (size_t)(end - ch->start) * topk;

			for (i = 0; i < n; i++)
				if (id[i] < l->experts)
					row[id[i]]++;
		}
	}
}

void rlb_loads_add_seq(struct rlb_loads *l, const struct rlb_schedule *s,
		       uint32_t seq_index, const struct rlb_seq *seq,
		       uint32_t topk)
{
	add_seq_layers(l, s, seq_index, seq, topk, 0, l->layers);
}

/* One sequence's count in layer blocks, one per pool thread. */
struct loads_job {
	struct rlb_loads *l;
	const struct rlb_schedule *s;
	uint32_t topk;
	uint32_t blocks;
};

static void count_block(void *ctx, const struct rlb_seq *seq, uint32_t seq_index,
			size_t b, unsigned worker)
{
	const struct loads_job *j = ctx;
	uint32_t L = j->l->layers;

	(void)worker;
	add_seq_layers(j->l, j->s, seq_index, seq, j->topk,
		       (uint32_t)((uint64_t)L * b / j->blocks),
		       (uint32_t)((uint64_t)L * (b + 1) / j->blocks));
}

/* Order of a schedule's chunks: by (seq, start). */
static int cmp_chunk(const void *a, const void *b)
{
	const struct rlb_chunk *x = a, *y = b;

	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return (x->start > y->start) - (x->start < y->start);
}

int rlb_schedule_from_chunks(struct rlb_schedule *s, uint32_t step,
			     enum rlb_pack pack, const struct rlb_chunk *chunks,
			     size_t nchunks, const uint32_t *seq_tokens,
			     size_t nseqs, uint32_t ranks, uint32_t mb_tokens,
			     struct rlb_err *err)
{
	uint32_t seq = 0, next = 0, top = 0;
	size_t c;
	int ret;

	ret = schedule_begin(s, step, pack, ranks, mb_tokens, nseqs, err);
	if (ret < 0)
		return ret;
	if (nchunks) {
		s->chunks = malloc(nchunks * sizeof(*s->chunks));
		if (!s->chunks)
			return rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory for %zu chunks",
					   nchunks);
		memcpy(s->chunks, chunks, nchunks * sizeof(*s->chunks));
		qsort(s->chunks, nchunks, sizeof(*s->chunks), cmp_chunk);
	}
	s->nchunks = nchunks;
	/* Walk the sequences and the sorted chunks together: next is the first token not yet covered. */
	for (c = 0; c <= nchunks; c++) {
		const struct rlb_chunk *ch = c < nchunks ? &s->chunks[c] : NULL;
		uint32_t want = ch && ch->seq < nseqs ? ch->seq : (uint32_t)nseqs;

		/* the sequences before this chunk's (all, past the last one) */
		while (seq < want) {
			if (next < seq_tokens[seq]) {
				ret = rlb_err_set(err, RLB_EINVAL,
						  "schedule: step %u: sequence %u: tokens %u..%u are in no chunk",
						  step, seq, next, seq_tokens[seq] - 1);
				goto out;
			}
			seq++;
			next = 0;
		}
		if (!ch)
			break;
		if (ch->seq >= nseqs) {
			ret = rlb_err_set(err, RLB_EINVAL,
					  "schedule: step %u: sequence %u does not exist (the step has %zu)",
					  step, ch->seq, nseqs);
			goto out;
		}
		if (ch->tokens == 0) {
			ret = rlb_err_set(err, RLB_EINVAL,
					  "schedule: step %u: sequence %u: chunk %u+0 holds no tokens",
					  step, seq, ch->start);
			goto out;
		}
		if (ch->start > seq_tokens[seq] ||
		    ch->tokens > seq_tokens[seq] - ch->start) {
			ret = rlb_err_set(err, RLB_EINVAL,
					  "schedule: step %u: sequence %u: chunk %u+%u (tokens %u..%" PRIu64 ") runs past the sequence's %u tokens",
					  step, seq, ch->start, ch->tokens, ch->start,
					  (uint64_t)ch->start + ch->tokens - 1, seq_tokens[seq]);
			goto out;
		}
		if (ch->start != next) {
			ret = rlb_err_set(err, RLB_EINVAL,
					  ch->start < next ?
					  "schedule: step %u: sequence %u: token %u is in two chunks" :
					  "schedule: step %u: sequence %u: token %u is in no chunk",
					  step, seq, ch->start < next ? ch->start : next);
			goto out;
		}
		if (ch->rank >= ranks || ch->mb >= RLB_SCHEDULE_MAX_MICRO_BATCHES) {
			ret = rlb_err_set(err, RLB_EINVAL,
					  "schedule: step %u: sequence %u: rank %u, micro-batch %u out of range (EP size %u)",
					  step, seq, ch->rank, ch->mb, ranks);
			goto out;
		}
		next = ch->start + ch->tokens;
		if (ch->mb + 1 > top)
			top = ch->mb + 1;
	}
	s->micro_batches = top;
out:
	if (ret < 0)
		rlb_schedule_release(s);
	return ret;
}

int rlb_step_seq_tokens(struct rlb_trace_reader *r, uint32_t step,
			uint32_t **lens, size_t *n, struct rlb_err *err)
{
	struct rlb_seq_meta *metas = NULL;
	size_t i;
	int ret;

	*lens = NULL;
	*n = 0;
	ret = rlb_trace_reader_step_seqs(r, step, &metas, n, err);
	if (ret < 0)
		return ret;
	*lens = malloc((*n ? *n : 1) * sizeof(**lens));
	if (!*lens) {
		free(metas);
		*n = 0;
		return rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory");
	}
	for (i = 0; i < *n; i++)
		(*lens)[i] = metas[i].tokens;
	free(metas);
	return 0;
}

/* Tokens of sequence SEQ by its chunks (they tile it; 0 when it has none). */
static uint64_t seq_chunk_tokens(const struct rlb_schedule *s, uint32_t seq)
{
	size_t c = rlb_schedule_first_chunk(s, seq);
	uint64_t n = 0;

	for (; c < s->nchunks && s->chunks[c].seq == seq; c++)
		n += s->chunks[c].tokens;
	return n;
}

/* Read the next sequence and check that it is sequence i of s's step. */
static int read_seq(struct rlb_trace_reader *r, const struct rlb_schedule *s,
		    size_t i, struct rlb_seq *seq, struct rlb_err *err)
{
	int ret = rlb_trace_reader_next(r, seq, err);

	if (ret < 0)
		return ret;
	if (ret == 0 || seq->step != s->step)
		return rlb_err_set(err, RLB_ECORRUPT, "step %u ends after %zu of %zu sequences",
				   s->step, i, s->nseqs);
	if (seq->tokens != seq_chunk_tokens(s, (uint32_t)i))
		return rlb_err_set(err, RLB_EMISMATCH,
				   "step %u: sequence %zu has %u tokens, the schedule %llu",
				   s->step, i, seq->tokens,
				   (unsigned long long)seq_chunk_tokens(s, (uint32_t)i));
	return 0;
}

/* One sequence's job on the pool, and the read of the next one beside it. */
struct stream_job {
	rlb_seq_part_fn *fn;
	void *ctx;
	const struct rlb_seq *seq;
	uint32_t seq_index;
	/* the read */
	struct rlb_trace_reader *r;
	const struct rlb_schedule *s;
	struct rlb_seq *next;
	struct rlb_err *err;
	int ret;
};

static void stream_part(void *ctx, size_t part, unsigned worker)
{
	const struct stream_job *j = ctx;

	j->fn(j->ctx, j->seq, j->seq_index, part, worker);
}

static void stream_read(void *ctx)
{
	struct stream_job *j = ctx;

	j->ret = read_seq(j->r, j->s, (size_t)j->seq_index + 1, j->next, j->err);
}

int rlb_step_stream(struct rlb_trace_reader *r, const struct rlb_schedule *s,
		    struct rlb_pool *pool, size_t parts, rlb_seq_part_fn *fn,
		    void *ctx, struct rlb_err *err)
{
	struct rlb_seq seq[2];
	struct stream_job j = { fn, ctx, NULL, 0, r, s, NULL, err, 0 };
	size_t i;
	int ret;

	if (s->nseqs == 0)
		return 0;
	ret = rlb_trace_reader_seek_step(r, s->step, err);
	if (ret == 0)
		ret = read_seq(r, s, 0, &seq[0], err);
	for (i = 0; ret == 0 && i < s->nseqs; i++) {
		j.seq = &seq[i % 2];
		j.seq_index = (uint32_t)i;
		j.next = &seq[(i + 1) % 2];
		rlb_pool_run_beside(pool, parts, stream_part, &j,
				    i + 1 < s->nseqs ? stream_read : NULL, &j);
		ret = j.ret;
	}
	return ret < 0 ? ret : 0;
}

int rlb_step_count_loads(struct rlb_trace_reader *r,
			 const struct rlb_schedule *s, struct rlb_loads *l,
			 struct rlb_pool *pool, struct rlb_err *err)
{
	const struct rlb_trace_header *h = rlb_trace_reader_header(r);
	unsigned threads = rlb_pool_threads(pool);
	struct loads_job j;
	int ret;

	memset(l, 0, sizeof(*l));
	if (!h)
		return rlb_err_set(err, RLB_EINVAL, "schedule: trace has no header");
	ret = rlb_loads_init(l, s->micro_batches, h->moe_layers, s->ranks,
			     h->experts, err);
	if (ret < 0)
		return ret;
	j.l = l;
	j.s = s;
	j.topk = h->topk;
	j.blocks = threads < h->moe_layers ? threads : h->moe_layers;
	ret = rlb_step_stream(r, s, pool, j.blocks, count_block, &j, err);
	if (ret < 0)
		rlb_loads_release(l);
	return ret;
}

int rlb_step_loads(struct rlb_trace_reader *r, uint32_t step,
		   const struct rlb_config *cfg, enum rlb_pack pack,
		   struct rlb_schedule *s, struct rlb_loads *l,
		   struct rlb_pool *pool, struct rlb_err *err)
{
	uint32_t *lens = NULL;
	size_t n = 0;
	int ep, ret;

	memset(s, 0, sizeof(*s));
	memset(l, 0, sizeof(*l));
	if (!rlb_trace_reader_header(r))
		return rlb_err_set(err, RLB_EINVAL, "schedule: trace has no header");
	ep = rlb_config_ep_size(cfg);
	if (ep <= 0 || cfg->parallel.micro_batch_tokens <= 0)
		return rlb_err_set(err, RLB_EINVAL, "schedule: EP size and micro_batch_tokens must be positive");
	ret = rlb_step_seq_tokens(r, step, &lens, &n, err);
	if (ret < 0)
		goto out;
	ret = rlb_schedule_build(s, step, lens, n, (uint32_t)ep,
				 (uint32_t)cfg->parallel.micro_batch_tokens, pack, err);
	if (ret < 0)
		goto out;
	ret = rlb_step_count_loads(r, s, l, pool, err);
out:
	free(lens);
	if (ret < 0)
		rlb_schedule_release(s);
	return ret;
}
