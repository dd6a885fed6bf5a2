/*
 * stats.c - load-imbalance statistics of routing under a micro-batch
 * schedule and the static layout (GPU and node max/mean per micro-batch
 * and per step, hot-expert churn, prompts per micro-batch), computed by a
 * streaming accumulator that reads one sequence at a time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "schedule.h"
#include "stats.h"

/* A growable array of doubles. */
struct dvec {
	double *v;
	size_t n, cap;
};

static int dvec_push(struct dvec *d, double x)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 256;
		double *v = realloc(d->v, cap * sizeof(*v));

		if (!v)
			return RLB_ENOMEM;
		d->v = v;
		d->cap = cap;
	}
	d->v[d->n++] = x;
	return 0;
}

struct rlb_stats_acc {
	struct rlb_stats_params p;
	uint32_t experts_per_rank;
	uint32_t gpn;			/* ranks per node */
	uint32_t nodes;
	int in_step;
	struct rlb_schedule sched;
	uint32_t *cnt;			/* [mb][layer][expert] of the open step */
	size_t cnt_mbs;			/* micro-batches cnt has room for */
	uint64_t *sum;			/* [layer][expert] whole-step counts */
	uint64_t *rank_load;		/* [ranks] */
	uint64_t *node_load;		/* [nodes] */
	uint32_t *hot;			/* [layer] hottest expert of the previous micro-batch */
	uint32_t *prev_step_hot;	/* [layer] hottest expert of the previous step */
	int have_prev_step;
	uint64_t *mb_diff, *mb_pairs;	/* [layer] */
	uint64_t *step_diff, *step_pairs; /* [layer] */
	struct dvec mb_gpu;		/* per (mb, layer), layer fastest; NAN when empty */
	struct dvec mb_node;
	struct dvec step_gpu;		/* per (step, layer) */
	struct dvec prompts;		/* per micro-batch */
	struct dvec rank_tokens;	/* per micro-batch: busiest rank's tokens over the mean */
	uint64_t steps;
	uint64_t micro_batches;
	uint64_t tokens;
	double *scratch;		/* for percentile extraction */
};

int rlb_stats_acc_new(struct rlb_stats_acc **out,
		      const struct rlb_stats_params *p, struct rlb_err *err)
{
	struct rlb_stats_acc *a = NULL;
	size_t le;
	int ret = 0;

	*out = NULL;
	if (!p->layers || !p->experts || !p->topk || !p->ranks || !p->mb_tokens)
		return rlb_err_set(err, RLB_EINVAL, "stats: layers, experts, topk, EP size and micro-batch budget must be positive");
	if (p->experts % p->ranks)
		return rlb_err_set(err, RLB_EINVAL, "stats: %u experts cannot be spread evenly over %u EP ranks",
				   p->experts, p->ranks);
	a = calloc(1, sizeof(*a));
	if (!a)
		return rlb_err_set(err, RLB_ENOMEM, "stats: out of memory");
	a->p = *p;
	a->experts_per_rank = p->experts / p->ranks;
	a->gpn = p->gpus_per_node && p->gpus_per_node < p->ranks ? p->gpus_per_node : p->ranks;
	if (p->ranks % a->gpn) {
		ret = rlb_err_set(err, RLB_EINVAL, "stats: EP size %u is not a multiple of %u GPUs per node",
				  p->ranks, a->gpn);
		goto out;
	}
	a->nodes = p->ranks / a->gpn;
	le = (size_t)p->layers * p->experts;
	a->sum = calloc(le, sizeof(*a->sum));
	a->rank_load = calloc(p->ranks, sizeof(*a->rank_load));
	a->node_load = calloc(a->nodes, sizeof(*a->node_load));
	a->hot = calloc(p->layers, sizeof(*a->hot));
	a->prev_step_hot = calloc(p->layers, sizeof(*a->prev_step_hot));
	a->mb_diff = calloc(p->layers, sizeof(*a->mb_diff));
	a->mb_pairs = calloc(p->layers, sizeof(*a->mb_pairs));
	a->step_diff = calloc(p->layers, sizeof(*a->step_diff));
	a->step_pairs = calloc(p->layers, sizeof(*a->step_pairs));
	if (!a->sum || !a->rank_load || !a->node_load || !a->hot || !a->prev_step_hot ||
	    !a->mb_diff || !a->mb_pairs || !a->step_diff || !a->step_pairs)
		ret = rlb_err_set(err, RLB_ENOMEM, "stats: out of memory");
out:
	if (ret < 0) {
		rlb_stats_acc_free(a);
		return ret;
	}
	*out = a;
	return 0;
}

void rlb_stats_acc_free(struct rlb_stats_acc *a)
{
	if (!a)
		return;
	rlb_schedule_release(&a->sched);
	free(a->cnt);
	free(a->sum);
	free(a->rank_load);
	free(a->node_load);
	free(a->hot);
	free(a->prev_step_hot);
	free(a->mb_diff);
	free(a->mb_pairs);
	free(a->step_diff);
	free(a->step_pairs);
	free(a->mb_gpu.v);
	free(a->mb_node.v);
	free(a->step_gpu.v);
	free(a->prompts.v);
	free(a->rank_tokens.v);
	free(a->scratch);
	free(a);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* The rank balance of every micro-batch of the schedule just built. */
static int count_rank_tokens(struct rlb_stats_acc *a)
{
	const struct rlb_schedule *s = &a->sched;
	double *v = malloc((s->micro_batches ? s->micro_batches : 1) * sizeof(*v));
	size_t n = 0, i;
	int ret;

	if (!v)
		return RLB_ENOMEM;
	ret = rlb_schedule_rank_balance(s, v, &n);
	for (i = 0; i < n && ret == 0; i++)
		ret = dvec_push(&a->rank_tokens, v[i]);
	free(v);
	return ret;
}

/* Distinct prompt groups per micro-batch of the schedule just built. */
static int count_prompts(struct rlb_stats_acc *a, const uint32_t *groups)
{
	const struct rlb_schedule *s = &a->sched;
	uint64_t *key;
	size_t c, n = 0;
	uint32_t mb;
	int ret = 0;

	if (s->nchunks == 0)
		return 0;
	key = malloc(s->nchunks * sizeof(*key));
	if (!key)
		return RLB_ENOMEM;
	for (c = 0; c < s->nchunks; c++)
		key[c] = (uint64_t)s->chunks[c].mb << 32 | groups[s->chunks[c].seq];
	qsort(key, s->nchunks, sizeof(*key), cmp_u64);
	c = 0;
	for (mb = 0; mb < s->micro_batches && ret == 0; mb++) {
		n = 0;
		for (; c < s->nchunks && key[c] >> 32 == mb; c++)
			if (c == 0 || key[c] != key[c - 1] || n == 0)
				n++;
		ret = dvec_push(&a->prompts, (double)n);
	}
	free(key);
	return ret;
}

int rlb_stats_acc_begin_step(struct rlb_stats_acc *a, uint32_t step,
			     const uint32_t *seq_tokens, const uint32_t *groups,
			     size_t nseqs, struct rlb_err *err)
{
	size_t per_mb = (size_t)a->p.layers * a->p.experts, i;
	int ret;

	if (a->in_step)
		return rlb_err_set(err, RLB_EINVAL, "stats: step %u begun before step %u ended",
				   step, a->sched.step);
	if (nseqs && (!seq_tokens || !groups))
		return rlb_err_set(err, RLB_EINVAL, "stats: step %u has no sequence lengths or groups", step);
	rlb_schedule_release(&a->sched);
	ret = rlb_schedule_build(&a->sched, step, seq_tokens, nseqs, a->p.ranks,
				 a->p.mb_tokens, a->p.pack, err);
	if (ret < 0)
		return ret;
	if (a->sched.micro_batches > a->cnt_mbs) {
		uint32_t *c;

		if (a->sched.micro_batches > SIZE_MAX / sizeof(*c) / per_mb)
			return rlb_err_set(err, RLB_ENOMEM, "stats: step %u has too many micro-batches", step);
		c = realloc(a->cnt, a->sched.micro_batches * per_mb * sizeof(*c));
		if (!c)
			return rlb_err_set(err, RLB_ENOMEM, "stats: out of memory for step %u", step);
		a->cnt = c;
		a->cnt_mbs = a->sched.micro_batches;
	}
	if (a->sched.micro_batches)
		memset(a->cnt, 0, a->sched.micro_batches * per_mb * sizeof(*a->cnt));
	if (count_prompts(a, groups) < 0 || count_rank_tokens(a) < 0)
		return rlb_err_set(err, RLB_ENOMEM, "stats: out of memory");
	for (i = 0; i < nseqs; i++)
		a->tokens += seq_tokens[i];
	a->in_step = 1;
	return 0;
}

/* Layers [lo, hi) of sequence SEQ_INDEX of the open step. */
static void add_layers(struct rlb_stats_acc *a, uint32_t seq_index,
		       const struct rlb_seq *seq, uint32_t lo, uint32_t hi)
{
	const struct rlb_schedule *s = &a->sched;
	uint32_t E = a->p.experts, K = a->p.topk, layer;
	size_t c;

	if (!a->in_step || !seq->ids)
		return;
	for (c = rlb_schedule_first_chunk(s, seq_index);
	     c < s->nchunks && s->chunks[c].seq == seq_index; c++) {
		const struct rlb_chunk *ch = &s->chunks[c];
		uint32_t end = ch->start + ch->tokens;

		if (ch->start >= seq->tokens)
			continue;
		if (end > seq->tokens)
			end = seq->tokens;
		for (layer = lo; layer < hi; layer++) {
			uint32_t *row = a->cnt + ((size_t)ch->mb * a->p.layers + layer) * E;
			const uint16_t *id = seq->ids + ((size_t)layer * seq->tokens + ch->start) * K;
			size_t i, n = (size_t)(end - ch->start) * K;

			for (i = 0; i < n; i++)
				if (id[i] < E)
					row[id[i]]++;
		}
	}
}

void rlb_stats_acc_add_seq(struct rlb_stats_acc *a, uint32_t seq_index,
			   const struct rlb_seq *seq)
{
	add_layers(a, seq_index, seq, 0, a->p.layers);
}

/* GPU and node max/mean of one layer's expert counts; NAN when empty. */
static void imbalance(struct rlb_stats_acc *a, const uint32_t *c32,
		      const uint64_t *c64, double *gpu, double *node)
{
	uint32_t r, e, epr = a->experts_per_rank;
	uint64_t total = 0, gmax = 0, nmax = 0;

	memset(a->node_load, 0, a->nodes * sizeof(*a->node_load));
	for (r = 0; r < a->p.ranks; r++) {
		uint64_t sum = 0;

		for (e = r * epr; e < (r + 1) * epr; e++)
			sum += c32 ? c32[e] : c64[e];
		a->rank_load[r] = sum;
		a->node_load[r / a->gpn] += sum;
		total += sum;
		if (sum > gmax)
			gmax = sum;
	}
	for (r = 0; r < a->nodes; r++)
		if (a->node_load[r] > nmax)
			nmax = a->node_load[r];
	if (total == 0) {
		*gpu = NAN;
		*node = NAN;
		return;
	}
	*gpu = (double)gmax * a->p.ranks / (double)total;
	*node = (double)nmax * a->nodes / (double)total;
}

static uint32_t hottest32(const uint32_t *c, uint32_t n)
{
	uint32_t best = 0, e;

	for (e = 1; e < n; e++)
		if (c[e] > c[best])
			best = e;
	return best;
}

static uint32_t hottest64(const uint64_t *c, uint32_t n)
{
	uint32_t best = 0, e;

	for (e = 1; e < n; e++)
		if (c[e] > c[best])
			best = e;
	return best;
}

int rlb_stats_acc_end_step(struct rlb_stats_acc *a, struct rlb_err *err)
{
	uint32_t L = a->p.layers, E = a->p.experts, mb, layer, e;
	int ret = 0;

	if (!a->in_step)
		return rlb_err_set(err, RLB_EINVAL, "stats: no step to end");
	a->in_step = 0;
	a->steps++;
	if (a->sched.micro_batches == 0)
		return 0;
	memset(a->sum, 0, (size_t)L * E * sizeof(*a->sum));
	for (mb = 0; mb < a->sched.micro_batches; mb++) {
		for (layer = 0; layer < L; layer++) {
			const uint32_t *c = a->cnt + ((size_t)mb * L + layer) * E;
			uint64_t *sum = a->sum + (size_t)layer * E;
			double gpu, node;
			uint32_t h;

			imbalance(a, c, NULL, &gpu, &node);
			ret |= dvec_push(&a->mb_gpu, gpu);
			ret |= dvec_push(&a->mb_node, node);
			for (e = 0; e < E; e++)
				sum[e] += c[e];
			h = hottest32(c, E);
			if (mb > 0) {
				a->mb_pairs[layer]++;
				a->mb_diff[layer] += h != a->hot[layer];
			}
			a->hot[layer] = h;
		}
		a->micro_batches++;
	}
	for (layer = 0; layer < L; layer++) {
		const uint64_t *sum = a->sum + (size_t)layer * E;
		double gpu, node;
		uint32_t h = hottest64(sum, E);

		imbalance(a, NULL, sum, &gpu, &node);
		ret |= dvec_push(&a->step_gpu, gpu);
		if (a->have_prev_step) {
			a->step_pairs[layer]++;
			a->step_diff[layer] += h != a->prev_step_hot[layer];
		}
		a->prev_step_hot[layer] = h;
	}
	a->have_prev_step = 1;
	if (ret)
		return rlb_err_set(err, RLB_ENOMEM, "stats: out of memory");
	return 0;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

void rlb_dist_compute(struct rlb_dist *d, double *v, size_t n)
{
	static const double q[3] = { 0.50, 0.90, 0.99 };
	double *out[3] = { &d->p50, &d->p90, &d->p99 };
	double sum = 0;
	size_t i;

	memset(d, 0, sizeof(*d));
	d->n = n;
	if (n == 0)
		return;
	qsort(v, n, sizeof(*v), cmp_double);
	for (i = 0; i < n; i++)
		sum += v[i];
	d->mean = sum / (double)n;
	d->max = v[n - 1];
	for (i = 0; i < 3; i++) {
		double h = q[i] * (double)(n - 1);
		size_t lo = (size_t)h;

		*out[i] = lo + 1 < n ? v[lo] + (h - (double)lo) * (v[lo + 1] - v[lo]) : v[lo];
	}
}

/*
 * Distribution of every STRIDE-th value of src from OFF (all when STRIDE
 * is 1), NANs (empty micro-batches) left out.
 */
static void dist_of(struct rlb_dist *d, double *scratch, const struct dvec *src,
		    size_t off, size_t stride)
{
	size_t i, n = 0;

	for (i = off; i < src->n; i += stride)
		if (!isnan(src->v[i]))
			scratch[n++] = src->v[i];
	rlb_dist_compute(d, scratch, n);
}

static double ratio(uint64_t num, uint64_t den)
{
	return den ? (double)num / (double)den : 0.0;
}

int rlb_stats_acc_finish(struct rlb_stats_acc *a, struct rlb_trace_stats *st,
			 struct rlb_err *err)
{
	uint32_t L = a->p.layers, layer;
	uint64_t md = 0, mp = 0, sd = 0, sp = 0;
	size_t need = a->mb_gpu.n;
	double *scratch;

	memset(st, 0, sizeof(*st));
	if (a->step_gpu.n > need)
		need = a->step_gpu.n;
	if (a->prompts.n > need)
		need = a->prompts.n;
	if (a->rank_tokens.n > need)
		need = a->rank_tokens.n;
	scratch = realloc(a->scratch, (need ? need : 1) * sizeof(*scratch));
	if (!scratch)
		return rlb_err_set(err, RLB_ENOMEM, "stats: out of memory");
	a->scratch = scratch;
	st->layer = calloc(L, sizeof(*st->layer));
	if (!st->layer)
		return rlb_err_set(err, RLB_ENOMEM, "stats: out of memory");
	st->pack = a->p.pack;
	st->ranks = a->p.ranks;
	st->nodes = a->nodes;
	st->gpus_per_node = a->gpn;
	st->mb_tokens = a->p.mb_tokens;
	st->layers = L;
	st->steps = a->steps;
	st->micro_batches = a->micro_batches;
	st->tokens = a->tokens;
	dist_of(&st->prompts_per_mb, scratch, &a->prompts, 0, 1);
	dist_of(&st->rank_tokens_mb, scratch, &a->rank_tokens, 0, 1);
	dist_of(&st->mb_gpu, scratch, &a->mb_gpu, 0, 1);
	dist_of(&st->mb_node, scratch, &a->mb_node, 0, 1);
	dist_of(&st->step_gpu, scratch, &a->step_gpu, 0, 1);
	for (layer = 0; layer < L; layer++) {
		struct rlb_layer_stats *ls = &st->layer[layer];

		dist_of(&ls->mb_gpu, scratch, &a->mb_gpu, layer, L);
		dist_of(&ls->mb_node, scratch, &a->mb_node, layer, L);
		dist_of(&ls->step_gpu, scratch, &a->step_gpu, layer, L);
		ls->hot_churn_mb = ratio(a->mb_diff[layer], a->mb_pairs[layer]);
		ls->hot_churn_step = ratio(a->step_diff[layer], a->step_pairs[layer]);
		md += a->mb_diff[layer];
		mp += a->mb_pairs[layer];
		sd += a->step_diff[layer];
		sp += a->step_pairs[layer];
	}
	st->hot_churn_mb = ratio(md, mp);
	st->hot_churn_step = ratio(sd, sp);
	st->mb_pairs = mp;
	st->step_pairs = sp;
	return 0;
}

void rlb_trace_stats_release(struct rlb_trace_stats *st)
{
	if (!st)
		return;
	free(st->layer);
	memset(st, 0, sizeof(*st));
}

/* One block of layers of a sequence, on a thread of the pool. */
struct stats_job {
	struct rlb_stats_acc *a;
	size_t blocks;
};

static void stats_block(void *ctx, const struct rlb_seq *seq,
			uint32_t seq_index, size_t part, unsigned worker)
{
	const struct stats_job *j = ctx;
	uint32_t L = j->a->p.layers;

	(void)worker;
	add_layers(j->a, seq_index, seq, (uint32_t)(part * L / j->blocks),
		   (uint32_t)((part + 1) * L / j->blocks));
}

/* Step STEP into the accumulator: its schedule, then its sequences. */
static int stats_step(struct rlb_stats_acc *a, struct rlb_trace_reader *r,
		      uint32_t step, struct rlb_pool *pool, struct rlb_err *err)
{
	struct rlb_seq_meta *metas = NULL;
	uint32_t *lens = NULL, *groups = NULL;
	unsigned threads = rlb_pool_threads(pool);
	struct stats_job j = { a, threads < a->p.layers ? threads : a->p.layers };
	size_t i, n = 0;
	int ret;

	ret = rlb_trace_reader_step_seqs(r, step, &metas, &n, err);
	if (ret < 0)
		return ret;
	lens = malloc((n ? n : 1) * sizeof(*lens));
	groups = malloc((n ? n : 1) * sizeof(*groups));
	if (!lens || !groups) {
		ret = rlb_err_set(err, RLB_ENOMEM, "stats: out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		lens[i] = metas[i].tokens;
		groups[i] = metas[i].group;
	}
	ret = rlb_stats_acc_begin_step(a, step, lens, groups, n, err);
	if (ret == 0)
		ret = rlb_step_stream(r, &a->sched, pool, j.blocks,
				      stats_block, &j, err);
	if (ret == 0)
		ret = rlb_stats_acc_end_step(a, err);
out:
	free(metas);
	free(lens);
	free(groups);
	return ret;
}

int rlb_trace_stats_compute(struct rlb_trace_reader *r,
			    const struct rlb_config *cfg, enum rlb_pack pack,
			    uint32_t step_lo, uint32_t step_hi,
			    struct rlb_pool *pool, struct rlb_trace_stats *st,
			    struct rlb_err *err)
{
	const struct rlb_trace_header *h = rlb_trace_reader_header(r);
	struct rlb_stats_params p = {0};
	struct rlb_stats_acc *a = NULL;
	const uint32_t *steps;
	size_t nsteps = 0, k;
	int ep, ret;

	memset(st, 0, sizeof(*st));
	if (!h)
		return rlb_err_set(err, RLB_EINVAL, "stats: trace has no header");
	ep = rlb_config_ep_size(cfg);
	if (ep <= 0 || cfg->parallel.micro_batch_tokens <= 0)
		return rlb_err_set(err, RLB_EINVAL, "stats: EP size and micro_batch_tokens must be positive");
	p.layers = h->moe_layers;
	p.experts = h->experts;
	p.topk = h->topk;
	p.ranks = (uint32_t)ep;
	p.gpus_per_node = cfg->cluster.gpus_per_node > 0 ? (uint32_t)rlb_config_ep_gpus_per_node(cfg) : 0;
	p.mb_tokens = (uint32_t)cfg->parallel.micro_batch_tokens;
	p.pack = pack;
	ret = rlb_stats_acc_new(&a, &p, err);
	if (ret == 0)
		ret = rlb_trace_reader_steps(r, &steps, &nsteps, err);
	if (ret == 0)
		ret = rlb_trace_reader_set_threads(r, rlb_pool_threads(pool), err);
	for (k = 0; ret == 0 && k < nsteps; k++)
		if (steps[k] >= step_lo && steps[k] <= step_hi)
			ret = stats_step(a, r, steps[k], pool, err);
	if (ret == 0)
		ret = rlb_stats_acc_finish(a, st, err);
	rlb_trace_reader_set_threads(r, 0, NULL);
	rlb_stats_acc_free(a);
	if (ret < 0)
		rlb_trace_stats_release(st);
	return ret < 0 ? ret : 0;
}
