/*
 * reorder.c - cross-node expert reordering (relibra policy): a balanced
 * partition of the experts over nodes, then over each node's GPUs, by a
 * greedy start and improving swaps on the sum over micro-batches of the
 * most loaded bin.  See reorder.h for the rule.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reorder.h"

#define NONE UINT32_MAX

/*
 * One level of the search: n items (experts items[0..n)) into nbins bins
 * of cap items each.  Loads come from r->lt (expert-major).  prev (or NULL)
 * and stat give each item's previous and static bin; an item not in its
 * prev bin costs mig.
 */
struct level {
	uint32_t M;
	uint32_t n;
	const uint32_t *items;
	uint32_t nbins;
	uint32_t cap;
	double mig;
	const uint32_t *prev;
	const uint32_t *stat;
	int tok;		/* colocate: count r's sampled tokens (node level) */
	double coloc;		/* objective rows per node a sampled token reaches */
	uint32_t rounds;	/* perturbation rounds after the swaps */
};

/*
 * colocate (node level, where item e is expert e): each sampled token
 * costs lv->coloc for every node that holds one of its experts.  The
 * tokens are kept as their distinct experts (tids, tlen), and listed by
 * expert (tstart, tlist), once per run.  The swap search
 * keeps, per token, its experts per node (tcnt) and, per expert e and node
 * n, tfree[e][n], the tokens of e with no expert on n, and talone[e], the
 * tokens of e that reach e's node through e alone; moving e alone from p
 * to q then changes the copies by tfree[e][q] - talone[e].
 */
static void tok_compact(struct rlb_reorder *r,
			const struct rlb_reorder_tokens *tok)
{
	uint32_t E = r->p.num_experts, K = tok->topk, t, k, x, n;

	for (t = 0; t < tok->n; t++) {
		const uint16_t *id = tok->ids + (size_t)t * K;
		uint16_t *out = r->tids + (size_t)t * K;

		for (n = 0, k = 0; k < K; k++) {
			if (id[k] >= E)
				continue;
			for (x = 0; x < n && out[x] != id[k]; x++)
				;
			if (x == n)
				out[n++] = id[k];
		}
		r->tlen[t] = (uint16_t)n;
	}
	r->ntok = tok->n;
	r->ktok = K;
	memset(r->tstart, 0, (size_t)(E + 1) * sizeof(uint32_t));
	for (t = 0; t < r->ntok; t++)
		for (k = 0; k < r->tlen[t]; k++)
			r->tstart[r->tids[(size_t)t * K + k] + 1]++;
	for (n = 0; n < E; n++)
		r->tstart[n + 1] += r->tstart[n];
	memcpy(r->fill, r->tstart, (size_t)E * sizeof(uint32_t));
	for (t = 0; t < r->ntok; t++)
		for (k = 0; k < r->tlen[t]; k++)
			r->tlist[r->fill[r->tids[(size_t)t * K + k]]++] = t;
}

static const uint16_t *tok_ids(const struct rlb_reorder *r, uint32_t t)
{
	return r->tids + (size_t)t * r->ktok;
}

/* The nodes all sampled tokens reach under a. */
static double tok_copies(struct rlb_reorder *r, const uint32_t *a)
{
	uint32_t N = r->p.num_gpus / r->p.gpus_per_node, t, k;
	uint64_t c = 0;

	if (N <= 64) {		/* a token's nodes as a bit mask */
		for (t = 0; t < r->ntok; t++) {
			const uint16_t *id = tok_ids(r, t);
			uint64_t m = 0;

			for (k = 0; k < r->tlen[t]; k++)
				m |= 1ull << a[id[k]];
			c += (uint64_t)__builtin_popcountll(m);
		}
		return (double)c;
	}
	memset(r->tstamp, 0, (size_t)N * sizeof(uint32_t));
	for (t = 0; t < r->ntok; t++) {
		const uint16_t *id = tok_ids(r, t);

		for (k = 0; k < r->tlen[t]; k++)
			if (r->tstamp[a[id[k]]] != t + 1) {
				r->tstamp[a[id[k]]] = t + 1;
				c++;
			}
	}
	return (double)c;
}

/* The swap search's colocate state for a: tcnt, tfree, talone, tcopies. */
static void tok_build(struct rlb_reorder *r, uint32_t B, const uint32_t *a)
{
	uint32_t E = r->p.num_experts, t, k, e, n;

	memset(r->talone, 0, (size_t)E * sizeof(int32_t));
	r->tcopies = 0;
	for (e = 0; e < E; e++)		/* every token of e lacks every node ... */
		for (n = 0; n < B; n++)
			r->tfree[(size_t)e * B + n] =
				(int32_t)(r->tstart[e + 1] - r->tstart[e]);
	for (t = 0; t < r->ntok; t++) {
		const uint16_t *id = tok_ids(r, t);
		uint16_t *c = r->tcnt + (size_t)t * B;

		memset(c, 0, B * sizeof(*c));
		for (k = 0; k < r->tlen[t]; k++)
			c[a[id[k]]]++;
		for (n = 0; n < B; n++)
			r->tcopies += c[n] != 0;
		for (k = 0; k < r->tlen[t]; k++) {
			e = id[k];
			r->talone[e] += c[a[e]] == 1;
			for (n = 0; n < B; n++)	/* ... but the nodes t reaches */
				r->tfree[(size_t)e * B + n] -= c[n] != 0;
		}
	}
}

/*
 * Mark the tokens of j with g and return g; those of i that j shares are
 * then marked g + 1 by the callers.
 */
static uint32_t tok_mark(struct rlb_reorder *r, uint32_t j)
{
	uint32_t x;

	if (r->tgen > UINT32_MAX - 4) {
		memset(r->tmark, 0, (size_t)r->ntok * sizeof(uint32_t));
		r->tgen = 0;
	}
	r->tgen += 2;
	for (x = r->tstart[j]; x < r->tstart[j + 1]; x++)
		r->tmark[r->tlist[x]] = r->tgen;
	return r->tgen;
}

/* The exact change of the copies when i (node p) and j (node q) swap. */
static int64_t tok_delta(struct rlb_reorder *r, uint32_t B, uint32_t i,
			 uint32_t j, uint32_t p, uint32_t q)
{
	uint32_t g = tok_mark(r, j), x;
	int64_t d = 0;

	for (x = r->tstart[i]; x < r->tstart[i + 1]; x++) {
		uint32_t t = r->tlist[x];
		const uint16_t *c = r->tcnt + (size_t)t * B;

		if (r->tmark[t] == g)
			r->tmark[t] = g + 1;	/* both move: its nodes stay */
		else
			d += (c[q] == 0) - (c[p] == 1);
	}
	for (x = r->tstart[j]; x < r->tstart[j + 1]; x++) {
		uint32_t t = r->tlist[x];
		const uint16_t *c = r->tcnt + (size_t)t * B;

		if (r->tmark[t] != g + 1)
			d += (c[p] == 0) - (c[q] == 1);
	}
	return d;
}

/*
 * Token t's part of the colocate state when its expert e moves from node
 * p to node q (a already says q) and no other expert of t moves: t lacks
 * p once e was its only expert there and reaches q once it had none; of
 * t's other experts, the one left on p becomes alone and the one on q no
 * longer is.
 */
static void tok_move(struct rlb_reorder *r, uint32_t B, const uint32_t *a,
		     uint32_t t, uint32_t e, uint32_t p, uint32_t q)
{
	const uint16_t *id = tok_ids(r, t);
	uint16_t *c = r->tcnt + (size_t)t * B;
	uint32_t cp = c[p], cq = c[q], k, n = r->tlen[t];

	if (cp == 1)
		for (k = 0; k < n; k++)
			r->tfree[(size_t)id[k] * B + p]++;
	if (cq == 0)
		for (k = 0; k < n; k++)
			r->tfree[(size_t)id[k] * B + q]--;
	if (cp == 2 || cq == 1)
		for (k = 0; k < n; k++) {
			uint32_t f = id[k];

			if (f == e)
				continue;
			if (cp == 2 && a[f] == p)
				r->talone[f]++;
			else if (cq == 1 && a[f] == q)
				r->talone[f]--;
		}
	r->talone[e] += (int32_t)(cq == 0) - (int32_t)(cp == 1);
	r->tcopies += (uint64_t)(cq == 0) - (uint64_t)(cp == 1);
	c[p]--;
	c[q]++;
}

/*
 * Bring the colocate state to a, in which i (from p) and j (from q)
 * swapped.  A token that holds both keeps its nodes; only whether i and
 * j are alone changes.
 */
static void tok_swap(struct rlb_reorder *r, uint32_t B, const uint32_t *a,
		     uint32_t i, uint32_t j, uint32_t p, uint32_t q)
{
	uint32_t g = tok_mark(r, j), x;

	for (x = r->tstart[i]; x < r->tstart[i + 1]; x++) {
		uint32_t t = r->tlist[x];
		const uint16_t *c = r->tcnt + (size_t)t * B;

		if (r->tmark[t] == g) {
			r->tmark[t] = g + 1;
			r->talone[i] += (int32_t)(c[q] == 1) - (int32_t)(c[p] == 1);
			r->talone[j] += (int32_t)(c[p] == 1) - (int32_t)(c[q] == 1);
		} else {
			tok_move(r, B, a, t, i, p, q);
		}
	}
	for (x = r->tstart[j]; x < r->tstart[j + 1]; x++) {
		uint32_t t = r->tlist[x];

		if (r->tmark[t] != g + 1)
			tok_move(r, B, a, t, j, q, p);
	}
}

/*
 * Keep (restore 0) or bring back (restore 1) the colocate state, so that a
 * perturbation round that does not pay is undone without a rebuild.
 */
static void tok_save(struct rlb_reorder *r, uint32_t B, int restore)
{
	size_t nc = (size_t)r->ntok * B * sizeof(*r->tcnt);
	size_t nf = (size_t)r->p.num_experts * B * sizeof(*r->tfree);
	size_t na = (size_t)r->p.num_experts * sizeof(*r->talone);

	if (restore) {
		r->tcopies = r->tcopies_save;
		memcpy(r->tcnt, r->tcnt_save, nc);
		memcpy(r->tfree, r->tfree_save, nf);
		memcpy(r->talone, r->talone_save, na);
	} else {
		r->tcopies_save = r->tcopies;
		memcpy(r->tcnt_save, r->tcnt, nc);
		memcpy(r->tfree_save, r->tfree, nf);
		memcpy(r->talone_save, r->talone, na);
	}
}

#ifdef RLB_SELF_CHECK
/*
 * The sanitizer and fuzz builds check the colocate state the swaps keep
 * against one built from scratch, and the exact change of a swap against
 * a count.
 */
static void tok_check_state(struct rlb_reorder *r, uint32_t B, const uint32_t *a)
{
	uint32_t E = r->p.num_experts;
	size_t nf = (size_t)E * B, nc = (size_t)r->ntok * B;
	int32_t *f = malloc(nf * sizeof(*f)), *al = malloc(E * sizeof(*al));
	uint16_t *c = malloc((nc ? nc : 1) * sizeof(*c));
	uint64_t copies;

	if (!f || !al || !c)
		abort();
	memcpy(f, r->tfree, nf * sizeof(*f));
	memcpy(al, r->talone, E * sizeof(*al));
	memcpy(c, r->tcnt, nc * sizeof(*c));
	copies = r->tcopies;
	tok_build(r, B, a);
	if (copies != r->tcopies || (double)copies != tok_copies(r, a) ||
	    memcmp(f, r->tfree, nf * sizeof(*f)) ||
	    memcmp(al, r->talone, E * sizeof(*al)) ||
	    memcmp(c, r->tcnt, nc * sizeof(*c))) {
		fprintf(stderr, "reorder: colocate state differs from a rebuild\n");
		abort();
	}
	free(f);
	free(al);
	free(c);
}

static void tok_check_delta(struct rlb_reorder *r, uint32_t *a, uint32_t i,
			    uint32_t j, int64_t d)
{
	double before = tok_copies(r, a), after;
	uint32_t p = a[i];

	a[i] = a[j];
	a[j] = p;
	after = tok_copies(r, a);
	a[j] = a[i];
	a[i] = p;
	if (after - before != (double)d) {
		fprintf(stderr, "reorder: swap changes copies by %g, not %lld\n",
			after - before, (long long)d);
		abort();
	}
}
#endif

static const int64_t *item_loads(const struct rlb_reorder *r,
				 const struct level *lv, uint32_t i)
{
	return r->lt + (size_t)lv->items[i] * lv->M;
}

static double moved_cost(const struct level *lv, uint32_t i, uint32_t b)
{
	if (!lv->prev || lv->mig == 0)
		return 0;
	return lv->prev[i] != b ? lv->mig : 0;
}

/* The change in migration cost when items i and j of a swap bins. */
static double swap_moves(const struct level *lv, const uint32_t *a,
			 uint32_t i, uint32_t j)
{
	uint32_t p = a[i], q = a[j];

	if (!lv->prev || lv->mig == 0)
		return 0;
	return moved_cost(lv, i, q) + moved_cost(lv, j, p) -
	       moved_cost(lv, i, p) - moved_cost(lv, j, q);
}

/* Bin loads r->bl[M][nbins] of assignment a. */
static void bin_loads(struct rlb_reorder *r, const struct level *lv,
		      const uint32_t *a)
{
	uint32_t i, m, B = lv->nbins;

	memset(r->bl, 0, (size_t)lv->M * B * sizeof(int64_t));
	for (i = 0; i < lv->n; i++) {
		const int64_t *L = item_loads(r, lv, i);

		for (m = 0; m < lv->M; m++)
			r->bl[(size_t)m * B + a[i]] += L[m];
	}
}

/* The three largest bin loads of micro-batch m and the bins of two. */
static void top_one(struct rlb_reorder *r, const struct level *lv, uint32_t m)
{
	const int64_t *b = r->bl + (size_t)m * lv->nbins;
	int64_t t1 = 0, t2 = 0, t3 = 0;
	uint32_t i1 = NONE, i2 = NONE, k;

	for (k = 0; k < lv->nbins; k++) {
		int64_t v = b[k];

		if (i1 == NONE || v > t1) {
			t3 = t2;
			t2 = t1;
			i2 = i1;
			t1 = v;
			i1 = k;
		} else if (i2 == NONE || v > t2) {
			t3 = t2;
			t2 = v;
			i2 = k;
		} else if (v > t3) {
			t3 = v;
		}
	}
	r->top[(size_t)m * 3] = t1;
	r->top[(size_t)m * 3 + 1] = t2;
	r->top[(size_t)m * 3 + 2] = t3;
	r->topi[(size_t)m * 2] = i1;
	r->topi[(size_t)m * 2 + 1] = i2;
}

static void top_all(struct rlb_reorder *r, const struct level *lv)
{
	uint32_t m;

	for (m = 0; m < lv->M; m++)
		top_one(r, lv, m);
}

/*
 * Objective of assignment a: sum of the largest bin loads plus moves, and
 * with colocate the nodes the sampled tokens reach: counted, or taken from
 * the swap search's state when `kept` (the state is that of a).
 */
static double score(struct rlb_reorder *r, const struct level *lv,
		    const uint32_t *a, int kept)
{
	int64_t s = 0;
	double mig = 0;
	uint32_t m, i, k;

	bin_loads(r, lv, a);
	for (m = 0; m < lv->M; m++) {
		const int64_t *b = r->bl + (size_t)m * lv->nbins;
		int64_t mx = 0;

		for (k = 0; k < lv->nbins; k++)
			if (b[k] > mx)
				mx = b[k];
		s += mx;
	}
	for (i = 0; i < lv->n; i++)
		mig += moved_cost(lv, i, a[i]);
	if (lv->tok)
		mig += lv->coloc * (kept ? (double)r->tcopies : tok_copies(r, a));
	return (double)s + mig;
}

/* Stable merge sort of idx[0..n) by key descending (index order on ties). */
static void sort_desc(uint32_t *idx, uint32_t *tmp, uint32_t n,
		      const int64_t *key)
{
	uint32_t w, lo, i;

	for (w = 1; w < n; w *= 2) {
		for (lo = 0; lo < n; lo += 2 * w) {
			uint32_t mid = lo + w < n ? lo + w : n;
			uint32_t hi = lo + 2 * w < n ? lo + 2 * w : n;
			uint32_t a = lo, b = mid, o = lo;

			while (a < mid && b < hi)
				tmp[o++] = key[idx[b]] > key[idx[a]] ? idx[b++] : idx[a++];
			while (a < mid)
				tmp[o++] = idx[a++];
			while (b < hi)
				tmp[o++] = idx[b++];
		}
		for (i = 0; i < n; i++)
			idx[i] = tmp[i];
	}
}

/*
 * Greedy start into a: items by step load descending, each to the bin with
 * room that raises the sum of the largest bin loads least; smaller bin
 * load, then lower bin on ties.  It ignores migration on purpose: a start
 * that does not depend on the previous placement keeps a plan stable when
 * the loads repeat (see rlb_reorder_run in reorder.h).
 */
static void greedy(struct rlb_reorder *r, const struct level *lv, uint32_t *a)
{
	uint32_t B = lv->nbins, M = lv->M, i, m, k;
	int64_t *curmax = r->top;	/* [M] running largest bin load */
	int64_t *bintot = r->tot + lv->n; /* [B] after the item totals */

	for (i = 0; i < lv->n; i++) {
		const int64_t *L = item_loads(r, lv, i);
		int64_t t = 0;

		for (m = 0; m < M; m++)
			t += L[m];
		r->tot[i] = t;
		r->order[i] = i;
	}
	sort_desc(r->order, r->best, lv->n, r->tot);
	memset(r->bl, 0, (size_t)M * B * sizeof(int64_t));
	memset(curmax, 0, (size_t)M * sizeof(int64_t));
	memset(bintot, 0, (size_t)B * sizeof(int64_t));
	memset(r->fill, 0, (size_t)B * sizeof(uint32_t));
	for (k = 0; k < lv->n; k++) {
		uint32_t it = r->order[k], bestb = NONE;
		const int64_t *L = item_loads(r, lv, it);
		double bestd = 0;

		for (uint32_t b = 0; b < B; b++) {
			int64_t inc = 0;
			double d;

			if (r->fill[b] >= lv->cap)
				continue;
			for (m = 0; m < M; m++) {
				int64_t v = r->bl[(size_t)m * B + b] + L[m];

				if (v > curmax[m])
					inc += v - curmax[m];
			}
			d = (double)inc;
			if (bestb == NONE || d < bestd ||
			    (d == bestd && bintot[b] < bintot[bestb])) {
				bestb = b;
				bestd = d;
			}
		}
		a[it] = bestb;
		r->fill[bestb]++;
		bintot[bestb] += r->tot[it];
		for (m = 0; m < M; m++) {
			int64_t *v = &r->bl[(size_t)m * B + bestb];

			*v += L[m];
			if (*v > curmax[m])
				curmax[m] = *v;
		}
	}
}

/*
 * The swap search's inner loop: for item i of bin p (r->sp, r->sx, r->sq
 * set up for it, see improve), r->dm[j] = the sum over micro-batches of the
 * largest bin load once i and j swap, for every item j of another bin.
 * SWAP_LOADS(SFX, ROWS, ATTR) defines swap_loads_SFX around ROWS(X, P, Q,
 * Lj, M), the sum over m of max(X[m], P[m] + Lj[m], Q[m] - Lj[m]).
 */
static inline int64_t rows_base(const int64_t *X, const int64_t *P,
				const int64_t *Q, const int64_t *Lj, uint32_t M)
{
	int64_t dm = 0;
	uint32_t m;

	for (m = 0; m < M; m++) {
		int64_t v = X[m], vp = P[m] + Lj[m], vq = Q[m] - Lj[m];

		v = vp > v ? vp : v;
		dm += vq > v ? vq : v;
	}
	return dm;
}

#define SWAP_LOADS(SFX, ROWS, ATTR)						\
ATTR static void swap_loads_##SFX(struct rlb_reorder *r,			\
				  const struct level *lv, const uint32_t *a,	\
				  uint32_t p)					\
{										\
	uint32_t M = lv->M, j;							\
										\
	for (j = 0; j < lv->n; j++)						\
		if (a[j] != p)							\
			r->dm[j] = ROWS(r->sx + (size_t)a[j] * M, r->sp,	\
					r->sq + (size_t)a[j] * M,		\
					item_loads(r, lv, j), M);		\
}

SWAP_LOADS(base, rows_base, )

#if defined(__x86_64__) && defined(__GNUC__)
typedef int64_t rlb_i64x4 __attribute__((vector_size(32)));

/* rows_base four micro-batches at a time (AVX2 compares 64-bit lanes). */
__attribute__((target("avx2")))
static inline int64_t rows_avx2(const int64_t *X, const int64_t *P,
				const int64_t *Q, const int64_t *Lj, uint32_t M)
{
	rlb_i64x4 acc = { 0, 0, 0, 0 };
	uint32_t m;

	for (m = 0; m + 4 <= M; m += 4) {
		rlb_i64x4 x, vp, vq, l, gt;

		memcpy(&x, X + m, sizeof(x));
		memcpy(&vp, P + m, sizeof(vp));
		memcpy(&vq, Q + m, sizeof(vq));
		memcpy(&l, Lj + m, sizeof(l));
		vp += l;
		vq -= l;
		gt = vp > x;
		x = (vp & gt) | (x & ~gt);
		gt = vq > x;
		acc += (vq & gt) | (x & ~gt);
	}
	return acc[0] + acc[1] + acc[2] + acc[3] +
	       rows_base(X + m, P + m, Q + m, Lj + m, M - m);
}

SWAP_LOADS(avx2, rows_avx2, __attribute__((target("avx2"))))
#endif

int rlb_reorder_simd = 1;

static void swap_loads(struct rlb_reorder *r, const struct level *lv,
		       const uint32_t *a, uint32_t p)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (rlb_reorder_simd && __builtin_cpu_supports("avx2")) {
		swap_loads_avx2(r, lv, a, p);
		return;
	}
#endif
	swap_loads_base(r, lv, a, p);
}

/*
 * Improving swaps on a (see reorder.h): for each item in order, the best
 * swap with an item of another bin, applied when it lowers the objective.
 * With colocate the state (tok_build) must be that of a; the swaps keep it.
 * Returns the swaps applied; *passes receives the passes run.
 */
static uint32_t improve(struct rlb_reorder *r, const struct level *lv,
			uint32_t *a, uint32_t *passes)
{
	uint32_t B = lv->nbins, M = lv->M, maxp = r->p.max_passes;
	uint32_t swaps = 0, np = 0, i, j, m;

	if (B < 2 || lv->n < 2) {
		*passes = 0;
		return 0;
	}
	bin_loads(r, lv, a);
	top_all(r, lv);
	for (;;) {
		int improved = 0;

		for (i = 0; i < lv->n; i++) {
			uint32_t p = a[i], bestj = NONE, q;
			const int64_t *Li = item_loads(r, lv, i);
			int64_t base = 0;
			double bestd = 0;

			/*
			 * With i in q and some j of q in p, micro-batch m's
			 * largest load is the largest of sx[q][m] (bins other
			 * than p and q), sp[m] + Lj[m] and sq[q][m] - Lj[m].
			 */
			for (m = 0; m < M; m++) {
				const int64_t *t = r->top + (size_t)m * 3;
				const uint32_t *ti = r->topi + (size_t)m * 2;

				base += t[0];
				r->sp[m] = r->bl[(size_t)m * B + p] - Li[m];
				for (q = 0; q < B; q++) {
					size_t x = (size_t)q * M + m;

					if (ti[0] != p && ti[0] != q)
						r->sx[x] = t[0];
					else if (ti[1] != p && ti[1] != q)
						r->sx[x] = t[1];
					else
						r->sx[x] = t[2];
					r->sq[x] = r->bl[(size_t)m * B + q] + Li[m];
				}
			}
			swap_loads(r, lv, a, p);
			for (j = 0; j < lv->n; j++) {
				double d;

				q = a[j];
				if (q == p)
					continue;
				d = (double)(r->dm[j] - base) + swap_moves(lv, a, i, j);
				if (lv->tok)	/* as if no token held both */
					d += lv->coloc * (double)
						(r->tfree[(size_t)i * B + q] - r->talone[i] +
						 r->tfree[(size_t)j * B + p] - r->talone[j]);
				if (d < bestd) {
					bestd = d;
					bestj = j;
				}
			}
			if (bestj != NONE && lv->tok) {
				/* the best by that estimate, kept if it truly gains */
				int64_t dc = tok_delta(r, B, i, bestj, p, a[bestj]);
				double d = (double)(r->dm[bestj] - base) +
					   swap_moves(lv, a, i, bestj) +
					   lv->coloc * (double)dc;

#ifdef RLB_SELF_CHECK
				tok_check_delta(r, a, i, bestj, dc);
#endif
				if (!(d < 0))
					bestj = NONE;
			}
			if (bestj != NONE) {
				const int64_t *Lj = item_loads(r, lv, bestj);

				q = a[bestj];
				for (m = 0; m < M; m++) {
					int64_t dl = Lj[m] - Li[m];

					r->bl[(size_t)m * B + p] += dl;
					r->bl[(size_t)m * B + q] -= dl;
					top_one(r, lv, m);
				}
				a[i] = q;
				a[bestj] = p;
				if (lv->tok)
					tok_swap(r, B, a, i, bestj, p, q);
#ifdef RLB_SELF_CHECK
				if (lv->tok)
					tok_check_state(r, B, a);
#endif
				swaps++;
				improved = 1;
			}
		}
		np++;
		if (!improved || np >= maxp)
			break;
	}
	*passes = np;
	return swaps;
}

/* xorshift64: the perturbation's deterministic random numbers */
static uint64_t next_random(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/*
 * Perturbation rounds on a, a local optimum of objective *best (see
 * reorder.h): each round swaps RLB_REORDER_KICK random pairs, improves,
 * and keeps the result when its objective is lower, else restores a.
 * Returns the rounds kept.
 */
static uint32_t perturb(struct rlb_reorder *r, const struct level *lv,
			uint32_t *a, double *best, uint32_t *swaps)
{
	uint64_t x = RLB_REORDER_SEED;
	uint32_t *save = r->best, t, k, kept = 0, passes;
	size_t bytes = (size_t)lv->n * sizeof(uint32_t);

	if (lv->nbins < 2 || lv->n < 2)
		return 0;
	for (t = 0; t < lv->rounds; t++) {
		uint32_t sw;
		double sc;

		memcpy(save, a, bytes);
		if (lv->tok)
			tok_save(r, lv->nbins, 0);
		for (k = 0; k < RLB_REORDER_KICK; k++) {
			uint32_t u = (uint32_t)(next_random(&x) % lv->n);
			uint32_t v = (uint32_t)(next_random(&x) % lv->n);
			uint32_t p = a[u], q = a[v];

			if (p == q)
				continue;
			a[u] = q;
			a[v] = p;
			if (lv->tok)
				tok_swap(r, lv->nbins, a, u, v, p, q);
		}
#ifdef RLB_SELF_CHECK
		if (lv->tok)
			tok_check_state(r, lv->nbins, a);
#endif
		sw = improve(r, lv, a, &passes);
		sc = score(r, lv, a, 1);
		if (sc < *best) {
			*best = sc;
			*swaps += sw;
			kept++;
		} else {
			memcpy(a, save, bytes);
			if (lv->tok)
				tok_save(r, lv->nbins, 1);
		}
	}
	return kept;
}

/*
 * Search one level into a: score the starts (prev when given, static,
 * greedy), keep the lowest (ties in that order), improve by swaps.
 * start_rows (or NULL) receives the starts' objectives.
 */
static double solve_level(struct rlb_reorder *r, const struct level *lv,
			  uint32_t *a, double *start_rows,
			  enum rlb_reorder_start *start, uint32_t *passes,
			  uint32_t *swaps)
{
	uint32_t *cand = r->bin;	/* greedy result */
	double sp = INFINITY, ss, sg, best;
	enum rlb_reorder_start st;
	uint32_t i, sw;

	if (lv->prev)
		sp = score(r, lv, lv->prev, 0);
	ss = score(r, lv, lv->stat, 0);
	greedy(r, lv, cand);
	sg = score(r, lv, cand, 0);
	if (start_rows) {
		start_rows[RLB_REORDER_START_PREV] = lv->prev ? sp : ss;
		start_rows[RLB_REORDER_START_STATIC] = ss;
		start_rows[RLB_REORDER_START_LPT] = sg;
	}
	if (lv->prev && sp <= ss && sp <= sg) {
		st = RLB_REORDER_START_PREV;
		best = sp;
		for (i = 0; i < lv->n; i++)
			a[i] = lv->prev[i];
	} else if (ss <= sg) {
		st = RLB_REORDER_START_STATIC;
		best = ss;
		for (i = 0; i < lv->n; i++)
			a[i] = lv->stat[i];
	} else {
		st = RLB_REORDER_START_LPT;
		best = sg;
		for (i = 0; i < lv->n; i++)
			a[i] = cand[i];
	}
	if (start)
		*start = st;
	if (lv->tok)
		tok_build(r, lv->nbins, a);
	sw = improve(r, lv, a, passes);
	*swaps += sw;
	if (sw)
		best = score(r, lv, a, 1);
	if (lv->rounds)
		r->res.kept = perturb(r, lv, a, &best, swaps);
	return best;
}

void rlb_reorder_release(struct rlb_reorder *r)
{
	if (!r)
		return;
	free(r->res.home);
	free(r->lt);
	free(r->tot);
	free(r->bl);
	free(r->top);
	free(r->topi);
	free(r->items);
	free(r->order);
	free(r->bin);
	free(r->best);
	free(r->prev_bin);
	free(r->static_bin);
	free(r->fill);
	free(r->node);
	free(r->prev_node);
	free(r->members);
	free(r->tids);
	free(r->tlen);
	free(r->tcnt);
	free(r->tcnt_save);
	free(r->tfree);
	free(r->tfree_save);
	free(r->talone);
	free(r->talone_save);
	free(r->tstart);
	free(r->tlist);
	free(r->tmark);
	free(r->tstamp);
	free(r->sx);
	free(r->sq);
	free(r->sp);
	free(r->dm);
	memset(r, 0, sizeof(*r));
}

int rlb_reorder_init(struct rlb_reorder *r, const struct rlb_reorder_params *p,
		     struct rlb_err *err)
{
	uint32_t E = p->num_experts, G = p->num_gpus, g = p->gpus_per_node;

	memset(r, 0, sizeof(*r));
	if (G < 1 || G > RLB_REORDER_MAX_GPUS)
		return rlb_err_set(err, RLB_EINVAL,
				   "reorder: GPU count %u out of range 1..%u", G,
				   RLB_REORDER_MAX_GPUS);
	if (g < 1 || G % g)
		return rlb_err_set(err, RLB_EINVAL,
				   "reorder: gpus per node %u does not divide the GPU count %u",
				   g, G);
	if (E < 1 || E > RLB_REORDER_MAX_EXPERTS || E % G)
		return rlb_err_set(err, RLB_EINVAL,
				   "reorder: expert count %u is not a positive multiple of the GPU count %u",
				   E, G);
	if (!isfinite(p->row_s) || p->row_s < 0 || !isfinite(p->migration_s) ||
	    p->migration_s < 0 || !isfinite(p->colocate_rows) || p->colocate_rows < 0)
		return rlb_err_set(err, RLB_EINVAL,
				   "reorder: row time %g s or migration time %g s is not a finite non-negative number",
				   p->row_s, p->migration_s);
	r->p = *p;
	if (!r->p.max_passes)
		r->p.max_passes = RLB_REORDER_DEFAULT_PASSES;
	r->migration_rows = p->row_s > 0 ? p->migration_s / p->row_s * g : 0;
	r->migration_gpu_rows = p->row_s > 0 ? p->migration_in_node_s / p->row_s : 0;
	r->res.home = calloc(E, sizeof(uint32_t));
	r->items = calloc(E, sizeof(uint32_t));
	r->order = calloc(E, sizeof(uint32_t));
	r->bin = calloc(E, sizeof(uint32_t));
	r->best = calloc(E, sizeof(uint32_t));
	r->prev_bin = calloc(E, sizeof(uint32_t));
	r->static_bin = calloc(E, sizeof(uint32_t));
	r->fill = calloc(E > G ? E : G, sizeof(uint32_t));
	r->node = calloc(E, sizeof(uint32_t));
	r->prev_node = calloc(E, sizeof(uint32_t));
	r->members = calloc(E, sizeof(uint32_t));
	r->tfree = calloc((size_t)E * (G / g), sizeof(int32_t));
	r->tfree_save = calloc((size_t)E * (G / g), sizeof(int32_t));
	r->talone = calloc(E, sizeof(int32_t));
	r->talone_save = calloc(E, sizeof(int32_t));
	r->tstart = calloc((size_t)E + 1, sizeof(uint32_t));
	r->tstamp = calloc(G / g, sizeof(uint32_t));
	r->dm = calloc(E, sizeof(int64_t));
	if (!r->tfree || !r->tfree_save || !r->talone || !r->talone_save || !r->tstart || !r->tstamp || !r->dm || !r->res.home || !r->items || !r->order ||
	    !r->bin || !r->best || !r->prev_bin || !r->static_bin || !r->fill ||
	    !r->node || !r->prev_node || !r->members) {
		rlb_reorder_release(r);
		return rlb_err_set(err, RLB_ENOMEM, "reorder: out of memory");
	}
	return 0;
}

/* Size the micro-batch dependent buffers for M. */
static int reserve(struct rlb_reorder *r, uint32_t M, struct rlb_err *err)
{
	uint32_t E = r->p.num_experts, G = r->p.num_gpus;
	size_t m = M ? M : 1, big = (E > G ? E : G) + G;
	int64_t *lt, *tot, *bl, *top, *sx, *sq, *sp;
	uint32_t *topi;

	if (M <= r->cap_mbs)
		return 0;
	lt = realloc(r->lt, (size_t)E * m * sizeof(int64_t));
	if (lt)
		r->lt = lt;
	tot = realloc(r->tot, big * sizeof(int64_t));
	if (tot)
		r->tot = tot;
	bl = realloc(r->bl, m * G * sizeof(int64_t));
	if (bl)
		r->bl = bl;
	top = realloc(r->top, m * 3 * sizeof(int64_t));
	if (top)
		r->top = top;
	topi = realloc(r->topi, m * 2 * sizeof(uint32_t));
	if (topi)
		r->topi = topi;
	sx = realloc(r->sx, m * G * sizeof(int64_t));
	if (sx)
		r->sx = sx;
	sq = realloc(r->sq, m * G * sizeof(int64_t));
	if (sq)
		r->sq = sq;
	sp = realloc(r->sp, m * sizeof(int64_t));
	if (sp)
		r->sp = sp;
	if (!lt || !tot || !bl || !top || !topi || !sx || !sq || !sp)
		return rlb_err_set(err, RLB_ENOMEM, "reorder: out of memory");
	r->cap_mbs = M;
	return 0;
}

/* Grow *buf to n elements of size sz when it holds fewer (*cap). */
static int grow(void *buf, size_t *cap, size_t n, size_t sz)
{
	void *p;

	if (n <= *cap)
		return 0;
	p = realloc(*(void **)buf, n * sz);
	if (!p)
		return -1;
	*(void **)buf = p;
	*cap = n;
	return 0;
}

/* Size the colocate buffers for tok's tokens over N nodes. */
static int reserve_tokens(struct rlb_reorder *r,
			  const struct rlb_reorder_tokens *tok, uint32_t N,
			  struct rlb_err *err)
{
	size_t T = tok->n, K = tok->topk;

	if (K > UINT16_MAX)
		return rlb_err_set(err, RLB_EINVAL,
				   "reorder: %zu experts per token are too many", K);
	if (T * K > UINT32_MAX || T > SIZE_MAX / sizeof(uint32_t) / (N + K))
		return rlb_err_set(err, RLB_ERANGE,
				   "reorder: %zu sampled tokens of %zu experts are too many",
				   T, K);
	if (grow(&r->tids, &r->tcap_ids, T * K, sizeof(*r->tids)) ||
	    grow(&r->tlist, &r->tcap_list, T * K, sizeof(*r->tlist)) ||
	    grow(&r->tcnt, &r->tcap_cnt, T * N, sizeof(*r->tcnt)) ||
	    grow(&r->tcnt_save, &r->tcap_cnt_save, T * N, sizeof(*r->tcnt_save)) ||
	    grow(&r->tlen, &r->tcap_len, T, sizeof(*r->tlen)) ||
	    grow(&r->tmark, &r->tcap_mark, T, sizeof(*r->tmark)))
		return rlb_err_set(err, RLB_ENOMEM, "reorder: out of memory");
	memset(r->tmark, 0, T * sizeof(*r->tmark));
	r->tgen = 0;
	return 0;
}

int rlb_reorder_run(struct rlb_reorder *r, const uint64_t *load, uint32_t M,
		    const uint32_t *prev_home, const struct rlb_reorder_tokens *tok,
		    struct rlb_err *err)
{
	uint32_t E = r->p.num_experts, G = r->p.num_gpus, g = r->p.gpus_per_node;
	uint32_t N = G / g, k = E / N, epg = E / G, e, m, n, i;
	struct level lv;
	int rc;

	r->res.swaps = 0;
	r->res.passes = 0;
	r->res.moved = 0;
	r->res.kept = 0;
	if (prev_home) {
		memset(r->fill, 0, (size_t)G * sizeof(uint32_t));
		for (e = 0; e < E; e++) {
			if (prev_home[e] >= G)
				return rlb_err_set(err, RLB_EINVAL,
						   "reorder: previous home %u of expert %u is not a GPU (%u GPUs)",
						   prev_home[e], e, G);
			if (++r->fill[prev_home[e]] > epg)
				return rlb_err_set(err, RLB_EINVAL,
						   "reorder: previous placement puts more than %u experts on GPU %u",
						   epg, prev_home[e]);
		}
	}
	rc = reserve(r, M, err);
	if (rc == 0 && tok && tok->n && tok->topk)
		rc = reserve_tokens(r, tok, N, err);
	if (rc < 0)
		return rc;
	if (tok && (!tok->n || !tok->topk || !(r->p.colocate_rows > 0)))
		tok = NULL;	/* nothing to count */
	if (tok)
		tok_compact(r, tok);
	for (m = 0; m < M; m++)
		for (e = 0; e < E; e++)
			r->lt[(size_t)e * M + m] = (int64_t)load[(size_t)m * E + e];
	for (e = 0; e < E; e++) {
		r->items[e] = e;
		r->static_bin[e] = e / k;
		r->prev_node[e] = prev_home ? prev_home[e] / g : e / k;
	}

	/* 1. nodes */
	lv.M = M;
	lv.n = E;
	lv.items = r->items;
	lv.nbins = N;
	lv.cap = k;
	lv.mig = r->migration_rows;
	lv.prev = r->prev_node;
	lv.stat = r->static_bin;
	lv.tok = tok != NULL;
	lv.coloc = tok ? r->p.colocate_rows : 0;
	lv.rounds = r->p.rounds;
	r->res.objective_rows = solve_level(r, &lv, r->node, r->res.start_rows,
					    &r->res.start, &r->res.passes,
					    &r->res.swaps);
	for (e = 0; e < E; e++)
		r->res.moved += r->node[e] != r->prev_node[e];

	/* 2. GPUs of each node: members in expert order */
	memset(r->fill, 0, (size_t)N * sizeof(uint32_t));
	for (e = 0; e < E; e++) {
		n = r->node[e];
		r->members[n * k + r->fill[n]++] = e;
	}
	for (n = 0; n < N; n++) {
		const uint32_t *mem = r->members + (size_t)n * k;
		uint32_t *a = r->node;	/* scratch: node[] is rebuilt below */
		uint32_t passes = 0, free_gpu = 0;

		/* kept placement: stayers keep their GPU, arrivals fill the gaps */
		memset(r->fill, 0, (size_t)g * sizeof(uint32_t));
		for (i = 0; i < k; i++) {
			e = mem[i];
			r->static_bin[i] = i / epg;
			r->prev_bin[i] = UINT32_MAX;
			if (prev_home && prev_home[e] / g == n) {
				r->prev_bin[i] = prev_home[e] - n * g;
				r->fill[r->prev_bin[i]]++;
			}
		}
		for (i = 0; prev_home && i < k; i++) {
			if (r->prev_bin[i] != UINT32_MAX)
				continue;
			while (r->fill[free_gpu] >= epg)
				free_gpu++;
			r->prev_bin[i] = free_gpu;
			r->fill[free_gpu]++;
		}
		lv.n = k;
		lv.items = mem;
		lv.nbins = g;
		lv.cap = epg;
		lv.mig = prev_home ? r->migration_gpu_rows : 0;
		lv.prev = prev_home ? r->prev_bin : NULL;
		lv.stat = r->static_bin;
		lv.tok = 0;	/* inside a node no copy crosses the network */
		lv.coloc = 0;
		lv.rounds = 0;
		solve_level(r, &lv, a, NULL, NULL, &passes, &r->res.swaps);
		for (i = 0; i < k; i++)
			r->res.home[mem[i]] = n * g + a[i];
	}
	for (e = 0; e < E; e++)
		r->node[e] = r->res.home[e] / g;
	return 0;
}

double rlb_reorder_objective_rows(const struct rlb_reorder *r,
				  const uint64_t *load, uint32_t M,
				  const uint32_t *home, const uint32_t *prev_home)
{
	uint32_t E = r->p.num_experts, G = r->p.num_gpus, g = r->p.gpus_per_node;
	uint32_t N = G / g, k = E / N, m, n, e, moved = 0;
	double s = 0;

	for (m = 0; m < M; m++) {
		uint64_t mx = 0;

		for (n = 0; n < N; n++) {
			uint64_t v = 0;

			for (e = 0; e < E; e++)
				if (home[e] / g == n)
					v += load[(size_t)m * E + e];
			if (v > mx)
				mx = v;
		}
		s += (double)mx;
	}
	for (e = 0; e < E; e++)
		moved += home[e] / g != (prev_home ? prev_home[e] / g : e / k);
	return s + r->migration_rows * moved;
}

void rlb_reorder_costs(const struct rlb_config *cfg, double *row_s,
		       double *migration_s)
{
	double hf = (double)rlb_model_expert_width(&cfg->model) * cfg->model.expert_ffn;
	double mats = rlb_model_ffn_matrices(&cfg->model);
	double flops_s = cfg->cluster.peak_tflops * 1e12 * cfg->cluster.gemm_eff_max;
	double bytes_s = cfg->cluster.rdma_gbps * 1e9 *
			 (cfg->parallel.ep_size > 0 ? cfg->parallel.ep_size : 1);

	*row_s = hf > 0 && flops_s > 0 ? 6.0 * mats * hf / flops_s : 0;
	*migration_s = hf > 0 && bytes_s > 0 ?
		mats * hf * cfg->balancer.migration_bytes_per_param / bytes_s : 0;
}
