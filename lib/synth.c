/*
 * synth.c - the synthetic RL routing workload behind `relibra capture
 * --synthetic`: GRPO groups of lognormal-length samples whose tokens pick
 * their top-k experts from per-(segment, layer) distributions built from
 * a per-layer base popularity, latent topics that drift across steps, and
 * token segments.  Deterministic from the seed; streams one sequence at a
 * time.  The model and its calibration: docs/workload.md.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture.h"
#include "hostmem.h"

/* ------------------------------------------------------------------ */
/* Random numbers: xoshiro256** seeded through splitmix64.             */

struct rng {
	uint64_t s[4];
	double spare;		/* second normal of the last Box-Muller pair */
	int has_spare;
};

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* An independent stream per (seed, purpose, a, b). */
static void rng_seed(struct rng *r, uint64_t seed, uint64_t purpose,
		     uint64_t a, uint64_t b)
{
	uint64_t x = seed;
	int i;

	x = splitmix64(&x) ^ (purpose * 0xd1b54a32d192ed03ull);
	x = splitmix64(&x) ^ (a * 0xabc98388fb8fac03ull);
	x = splitmix64(&x) ^ (b * 0x8cb92ba72f3d8dd7ull);
	for (i = 0; i < 4; i++)
		r->s[i] = splitmix64(&x);
	r->has_spare = 0;
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

/* Uniform in (0, 1). */
static inline double rng_unif(struct rng *r)
{
	return ((double)(rng_next(r) >> 11) + 0.5) * 0x1p-53;
}

/* Uniform in [0, n) (multiply-shift; bias below n / 2^32). */
static inline uint32_t rng_below(struct rng *r, uint32_t n)
{
	return (uint32_t)(((rng_next(r) >> 32) * n) >> 32);
}

/* Standard normal (Marsaglia's polar method, pairs). */
static double rng_normal(struct rng *r)
{
	double u, v, q, m;

	if (r->has_spare) {
		r->has_spare = 0;
		return r->spare;
	}
	do {
		u = 2.0 * rng_unif(r) - 1.0;
		v = 2.0 * rng_unif(r) - 1.0;
		q = u * u + v * v;
	} while (q >= 1.0 || q == 0.0);
	m = sqrt(-2.0 * log(q) / q);
	r->spare = v * m;
	r->has_spare = 1;
	return u * m;
}

/*
 * Cheap approximately normal numbers for the many segment preferences:
 * the sum of four 16-bit uniforms, centred and scaled to unit variance
 * (Irwin-Hall; tails end at +-3.46).
 */
static inline double rng_normal_fast(struct rng *r)
{
	uint64_t x = rng_next(r);
	double sum = (double)(x & 0xffff) + (double)((x >> 16) & 0xffff) +
		     (double)((x >> 32) & 0xffff) + (double)(x >> 48);

	return (sum - 2.0 * 65535.0) * (1.7320508075688772 / 65536.0);
}

/* ------------------------------------------------------------------ */
/* Alias tables (Vose): O(1) draws from a discrete distribution.       */

struct alias {
	uint32_t n;
	uint32_t *thr;		/* keep i when the low 32 bits are below thr[i] */
	uint32_t *alt;		/* else take alt[i] */
};

static int alias_init(struct alias *a, uint32_t n)
{
	a->n = n;
	a->thr = malloc(n * sizeof(*a->thr));
	a->alt = malloc(n * sizeof(*a->alt));
	return a->thr && a->alt ? 0 : RLB_ENOMEM;
}

static void alias_release(struct alias *a)
{
	free(a->thr);
	free(a->alt);
	memset(a, 0, sizeof(*a));
}

/*
 * Build from probabilities p[n] summing to 1 (scratch: n doubles and n
 * uint32s).  Deterministic.
 */
static void alias_build(struct alias *a, const double *p, double *q,
			uint32_t *work)
{
	uint32_t n = a->n, i, ns = 0, nl = n, s, l;

	for (i = 0; i < n; i++) {
		q[i] = p[i] * n;
		if (q[i] < 1.0)
			work[ns++] = i;		/* small from the front */
		else
			work[--nl] = i;		/* large from the back */
	}
	while (ns > 0 && nl < n) {
		s = work[--ns];
		l = work[nl];
		a->thr[s] = (uint32_t)(q[s] * 4294967296.0);
		a->alt[s] = l;
		q[l] -= 1.0 - q[s];
		if (q[l] < 1.0) {
			nl++;
			work[ns++] = l;
		}
	}
	while (ns > 0) {
		s = work[--ns];
		a->thr[s] = UINT32_MAX;
		a->alt[s] = s;
	}
	while (nl < n) {
		l = work[nl++];
		a->thr[l] = UINT32_MAX;
		a->alt[l] = l;
	}
}

static inline uint32_t alias_draw(const struct alias *a, struct rng *r)
{
	uint64_t x = rng_next(r);
	uint32_t i = (uint32_t)(((x >> 32) * a->n) >> 32);
	uint32_t keep = -(uint32_t)((uint32_t)x < a->thr[i]);	/* branchless */

	return (i & keep) | (a->alt[i] & ~keep);
}

/* ------------------------------------------------------------------ */
/* The generator.                                                      */

struct gen {
	const struct rlb_workload_config *w;
	int uniform;
	uint64_t seed;
	uint32_t L, E, K;
	uint32_t G, TG, epg;		/* expert groups, groups per token, experts per group */
	uint32_t T;			/* topics */
	double rho, rho_c;		/* layer correlation and sqrt(1 - rho^2) */
	double *base;			/* [L][E] base logits, expert space */
	double *base_p;			/* [L][E] softmax(base) */
	uint32_t *perm;			/* [L][E] latent index -> expert */
	float *topic;			/* [T][L][E] latent topic preferences */
	double *innov;			/* [L][E] scratch: a drift innovation */
	double *seg;			/* [E] latent segment preferences of the current layer */
	double *logit, *p, *q;		/* [E] scratch */
	double *gp;			/* [G] group probabilities */
	uint32_t *work;			/* [E] scratch */
	uint32_t *stamp;		/* [G] token stamp of the groups allowed */
	uint32_t *seen;			/* [E] token stamp of the experts drawn */
	uint32_t *group_of;		/* [E] expert group of each expert */
	uint32_t stamp_now;
	struct alias tab;		/* current (segment, layer) */
	struct alias gtab;		/* its groups */
	uint16_t *ids;
	size_t ids_cap;			/* uint16s */
	struct rlb_seq_meta *metas;	/* [prompts * samples] of the current step */
	uint32_t *seq_topic;		/* [prompts * samples] */
};

static void gen_release(struct gen *g)
{
	free(g->base);
	free(g->base_p);
	free(g->perm);
	free(g->topic);
	free(g->innov);
	free(g->seg);
	free(g->logit);
	free(g->p);
	free(g->q);
	free(g->gp);
	free(g->work);
	free(g->stamp);
	free(g->seen);
	free(g->group_of);
	alias_release(&g->tab);
	alias_release(&g->gtab);
	free(g->ids);
	free(g->metas);
	free(g->seq_topic);
}

/* p = softmax(x) over n entries. */
static void softmax(double *p, const double *x, uint32_t n)
{
	double mx = x[0], sum = 0;
	uint32_t i;

	for (i = 1; i < n; i++)
		if (x[i] > mx)
			mx = x[i];
	for (i = 0; i < n; i++) {
		p[i] = exp(x[i] - mx);
		sum += p[i];
	}
	for (i = 0; i < n; i++)
		p[i] /= sum;
}

/*
 * A latent vector per layer, correlated between adjacent layers:
 * v[0] ~ N(0, 1); v[l] = rho v[l-1] + sqrt(1 - rho^2) N(0, 1).
 */
static void latent_layers(struct gen *g, struct rng *r, double *v)
{
	uint32_t l, j, E = g->E;

	for (j = 0; j < E; j++)
		v[j] = rng_normal(r);
	for (l = 1; l < g->L; l++)
		for (j = 0; j < E; j++)
			v[(size_t)l * E + j] = g->rho * v[(size_t)(l - 1) * E + j] +
					       g->rho_c * rng_normal(r);
}

/* Purpose tags of the random streams. */
enum { RS_MODEL = 1, RS_STEP = 2, RS_SEQ = 3 };

/*
 * The persistent part: per layer a latent-to-expert permutation, the base
 * popularity (mild or heavy-tailed, plus one hot expert), and the topics.
 */
static int gen_model(struct gen *g, struct rlb_err *err)
{
	const struct rlb_workload_config *w = g->w;
	uint32_t L = g->L, E = g->E, l, e, i, nheavy;
	size_t le = (size_t)L * E;
	uint32_t *order = NULL;
	struct rng r;
	int ret = 0;

	rng_seed(&r, g->seed, RS_MODEL, 0, 0);
	{
		/* more than the machine has free would end in the OOM killer */
		double need = (double)le * (double)(sizeof(*g->base) + sizeof(*g->base_p) +
						     sizeof(*g->perm) + sizeof(*g->innov)) +
			      (double)g->T * (double)le * sizeof(*g->topic);
		const char *what = "available";
		double have = rlb_host_mem_available(&what);

		if (have > 0 && need > have)
			return rlb_err_set(err, RLB_ENOMEM,
					   "synthetic: the preference tables of %u topics x %u layers x %u experts need %.1f GB, more than the machine's %.1f GB %s (lower workload.topics)",
					   g->T, L, E, need / 1e9, have / 1e9, what);
	}
	g->base = calloc(le, sizeof(*g->base));
	g->base_p = calloc(le, sizeof(*g->base_p));
	g->perm = calloc(le, sizeof(*g->perm));
	g->topic = calloc((size_t)g->T * le, sizeof(*g->topic));
	g->innov = calloc(le, sizeof(*g->innov));
	order = calloc(L, sizeof(*order));
	if (!g->base || !g->base_p || !g->perm || !g->topic || !g->innov || !order) {
		ret = rlb_err_set(err, RLB_ENOMEM, "synthetic: out of memory for the %u x %u preference tables", L, E);
		goto out;
	}
	for (l = 0; l < L; l++) {
		uint32_t *pm = g->perm + (size_t)l * E;

		for (e = 0; e < E; e++)
			pm[e] = e;
		for (e = E - 1; e > 0; e--) {
			uint32_t k = rng_below(&r, e + 1), t = pm[e];

			pm[e] = pm[k];
			pm[k] = t;
		}
	}
	/* Exactly round(fraction * L) heavy layers at random positions. */
	for (l = 0; l < L; l++)
		order[l] = l;
	for (l = L - 1; l > 0; l--) {
		uint32_t k = rng_below(&r, l + 1), t = order[l];

		order[l] = order[k];
		order[k] = t;
	}
	nheavy = (uint32_t)floor(w->heavy_layer_fraction * L + 0.5);
	for (l = 0; l < L; l++) {
		double *b = g->base + (size_t)l * E;

		for (e = 0; e < E; e++)
			b[e] = w->base_skew * rng_normal(&r);
	}
	for (i = 0; i < nheavy && i < L; i++) {
		double *b = g->base + (size_t)order[i] * E;

		/* Zipf over a random ranking: the expert ranked k adds -s ln(k + 1) */
		for (e = 0; e < E; e++)
			g->work[e] = e;
		for (e = E - 1; e > 0; e--) {
			uint32_t k = rng_below(&r, e + 1), t = g->work[e];

			g->work[e] = g->work[k];
			g->work[k] = t;
		}
		for (e = 0; e < E; e++)
			b[g->work[e]] -= w->heavy_layer_skew * log((double)e + 1.0);
	}
	for (l = 0; l < L; l++) {
		uint32_t hot = rng_below(&r, E);

		g->base[(size_t)l * E + hot] += log(1.0 + w->hot_expert_boost);
		softmax(g->base_p + (size_t)l * E, g->base + (size_t)l * E, E);
	}
	for (i = 0; i < g->T; i++) {
		float *z = g->topic + (size_t)i * le;
		size_t k;

		latent_layers(g, &r, g->innov);
		for (k = 0; k < le; k++)
			z[k] = (float)g->innov[k];
	}
out:
	free(order);
	return ret;
}

/*
 * Slow drift: every topic keeps sqrt(1 - d) of itself and gains sqrt(d) of
 * a fresh one.  The fresh draws are made even when d is 0 (and for the
 * uniform control): they come from the step's stream, ahead of its
 * lengths, which must not depend on the drift or on --uniform.
 */
static void gen_drift(struct gen *g, struct rng *r)
{
	size_t le = (size_t)g->L * g->E, i;
	double d = g->w->topic_drift, keep = sqrt(1.0 - d), add = sqrt(d);
	uint32_t t;

	for (t = 0; t < g->T; t++) {
		float *z = g->topic + (size_t)t * le;

		latent_layers(g, r, g->innov);
		for (i = 0; i < le; i++)
			z[i] = (float)(keep * z[i] + add * g->innov[i]);
	}
}

/*
 * The sampling distribution of one (segment, layer): softmax of base +
 * topic + segment logits, mixed with the base popularity by token_noise.
 * z and sg are latent (indexed through the layer's permutation).
 */
static void build_tables(struct gen *g, uint32_t l, const float *z,
			 const double *sg)
{
	const struct rlb_workload_config *w = g->w;
	const double *b = g->base + (size_t)l * g->E;
	const double *bp = g->base_p + (size_t)l * g->E;
	const uint32_t *pm = g->perm + (size_t)l * g->E;
	double ct = w->topic_concentration, cs = w->segment_concentration;
	double eps = w->token_noise;
	uint32_t j, E = g->E;

	for (j = 0; j < E; j++)
		g->logit[pm[j]] = b[pm[j]] + ct * z[j] + cs * sg[j];
	softmax(g->p, g->logit, E);
	for (j = 0; j < E; j++)
		g->p[j] = (1.0 - eps) * g->p[j] + eps * bp[j];
	alias_build(&g->tab, g->p, g->q, g->work);
	if (g->G) {
		uint32_t gi;

		for (gi = 0; gi < g->G; gi++) {
			double sum = 0;

			for (j = gi * g->epg; j < (gi + 1) * g->epg; j++)
				sum += g->p[j];
			g->gp[gi] = sum;
		}
		alias_build(&g->gtab, g->gp, g->q, g->work);
	}
}

/* Exact draw among the allowed experts not yet drawn for this token. */
static uint32_t draw_exact(struct gen *g, struct rng *r)
{
	double sum = 0, u;
	uint32_t e, last = UINT32_MAX;

	for (e = 0; e < g->E; e++) {
		g->q[e] = 0;
		if (g->seen[e] == g->stamp_now ||
		    (g->G && g->stamp[g->group_of[e]] != g->stamp_now))
			continue;
		g->q[e] = g->p[e];
		sum += g->p[e];
		last = e;
	}
	u = rng_unif(r) * sum;
	for (e = 0; e < g->E; e++) {
		if (u < g->q[e])
			return e;
		u -= g->q[e];
	}
	return last;
}

/* Exact draw among the groups not yet allowed for this token. */
static uint32_t draw_group_exact(struct gen *g, struct rng *r)
{
	double sum = 0, u;
	uint32_t gi, last = 0;

	for (gi = 0; gi < g->G; gi++)
		if (g->stamp[gi] != g->stamp_now) {
			sum += g->gp[gi];
			last = gi;
		}
	u = rng_unif(r) * sum;
	for (gi = 0; gi < g->G; gi++) {
		if (g->stamp[gi] == g->stamp_now)
			continue;
		if (u < g->gp[gi])
			return gi;
		u -= g->gp[gi];
	}
	return last;
}

/* Draws per token before the rest of its experts come from exact scans. */
#define MAX_DRAWS(k) (8 * (k) + 64)

/*
 * The top-k of N tokens: for each, K distinct experts drawn one after the
 * other from the table without replacement (a repeat is drawn again; the
 * order of the draws is the column order), within topk_groups groups
 * drawn the same way first when the model has expert groups.  seen[] and
 * stamp[] hold the token's stamp for drawn experts and allowed groups.
 * The inner loop is branch-free on repeats (they are frequent and
 * unpredictable) and keeps the generator state in registers.
 */
static void draw_tokens(struct gen *g, struct rng *r, uint16_t *out, uint32_t n)
{
	struct rng lr = *r;
	const struct alias *tab = &g->tab;
	uint32_t *seen = g->seen, *stamp = g->stamp;
	const uint32_t *group_of = g->group_of;
	uint32_t K = g->K, t, k, e, draws, now;

	for (t = 0; t < n; t++, out += K) {
		if (++g->stamp_now == 0) {
			memset(seen, 0, g->E * sizeof(*seen));
			memset(stamp, 0, (g->G ? g->G : 1) * sizeof(*stamp));
			g->stamp_now = 1;
		}
		now = g->stamp_now;
		if (g->G) {
			for (k = 0, draws = 0; k < g->TG; draws++) {
				if (draws >= MAX_DRAWS(g->TG)) {
					*r = lr;
					e = draw_group_exact(g, r);
					lr = *r;
				} else {
					e = alias_draw(&g->gtab, &lr);
				}
				k += stamp[e] != now;
				stamp[e] = now;
			}
			for (k = 0, draws = 0; k < K; draws++) {
				uint32_t fresh;

				if (draws >= MAX_DRAWS(K)) {
					*r = lr;
					e = draw_exact(g, r);
					lr = *r;
				} else {
					e = alias_draw(tab, &lr);
				}
				fresh = (seen[e] != now) & (stamp[group_of[e]] == now);
				out[k] = (uint16_t)e;
				seen[e] = fresh ? now : seen[e];
				k += fresh;
			}
			continue;
		}
		for (k = 0, draws = 0; k < K; draws++) {
			if (draws >= MAX_DRAWS(K)) {
				*r = lr;
				e = draw_exact(g, r);
				lr = *r;
			} else {
				e = alias_draw(tab, &lr);
			}
			out[k] = (uint16_t)e;
			k += seen[e] != now;
			seen[e] = now;
		}
	}
	*r = lr;
}

/* The ids of one sequence, segment by segment, layer-major in g->ids. */
static void gen_seq(struct gen *g, struct rng *r, uint32_t topic, uint32_t tokens)
{
	const struct rlb_workload_config *w = g->w;
	uint32_t t = 0, l, j, E = g->E, K = g->K;
	size_t le = (size_t)g->L * E;

	if (g->uniform) {
		for (l = 0; l < g->L; l++)
			draw_tokens(g, r, g->ids + (size_t)l * tokens * K, tokens);
		return;
	}
	while (t < tokens) {
		uint32_t span = (uint32_t)(w->segment_max - w->segment_min) + 1;
		uint32_t len = (uint32_t)w->segment_min + rng_below(r, span);

		if (len > tokens - t)
			len = tokens - t;
		for (l = 0; l < g->L; l++) {
			const float *z = g->topic + (size_t)topic * le + (size_t)l * E;

			for (j = 0; j < E; j++)
				g->seg[j] = l == 0 ? rng_normal_fast(r) :
					    g->rho * g->seg[j] + g->rho_c * rng_normal_fast(r);
			build_tables(g, l, z, g->seg);
			draw_tokens(g, r, g->ids + ((size_t)l * tokens + t) * K, len);
		}
		t += len;
	}
}

static int check_config(const struct rlb_config *cfg, struct rlb_err *err)
{
	const struct rlb_model_config *m = &cfg->model;
	const struct rlb_workload_config *w = &cfg->workload;

	if (m->experts < 1 || m->experts > RLB_TRACE_MAX_EXPERTS)
		return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'model.experts' %d is outside 1..%d",
				   m->experts, RLB_TRACE_MAX_EXPERTS);
	if (m->topk < 1 || m->topk > m->experts || m->topk > RLB_TRACE_MAX_TOPK)
		return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'model.topk' %d is outside 1..%d",
				   m->topk, m->experts < RLB_TRACE_MAX_TOPK ? m->experts : RLB_TRACE_MAX_TOPK);
	if (m->moe_layers < 1 || m->moe_layers > RLB_TRACE_MAX_LAYERS)
		return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'model.moe_layers' %d is outside 1..%d",
				   m->moe_layers, RLB_TRACE_MAX_LAYERS);
	if (m->expert_groups > 0) {
		if (m->experts % m->expert_groups)
			return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'model.expert_groups' %d does not divide 'model.experts' %d",
					   m->expert_groups, m->experts);
		if (m->topk_groups < 1 || m->topk_groups > m->expert_groups)
			return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'model.topk_groups' %d is outside 1..%d",
					   m->topk_groups, m->expert_groups);
		if ((long)m->topk > (long)m->topk_groups * (m->experts / m->expert_groups))
			return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'model.topk' %d exceeds the experts of 'model.topk_groups' groups (%d x %d)",
					   m->topk, m->topk_groups, m->experts / m->expert_groups);
	}
	if (w->steps < 0 || w->first_step < 0 || w->prompts_per_step < 1 || w->samples_per_prompt < 1 ||
	    (uint64_t)w->prompts_per_step * (uint64_t)w->samples_per_prompt > UINT32_MAX)
		return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'workload' steps, prompts_per_step and samples_per_prompt must be positive");
	if (w->len_min < 1 || w->len_min > w->len_max || (uint32_t)w->len_max > RLB_TRACE_MAX_SEQ_TOKENS ||
	    !(w->len_median > 0) || !(w->len_sigma >= 0))
		return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'workload' lengths need 1 <= len_min <= len_max <= %u and len_median > 0",
				   RLB_TRACE_MAX_SEQ_TOKENS);
	if (w->segment_min < 1 || w->segment_min > w->segment_max)
		return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'workload' segments need 1 <= segment_min <= segment_max");
	if (w->topics < 1)
		return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'workload.topics' must be positive");
	if (!(w->token_noise >= 0 && w->token_noise <= 1) || !(w->topic_drift >= 0 && w->topic_drift <= 1) ||
	    !(w->layer_correlation >= 0 && w->layer_correlation <= 1) ||
	    !(w->heavy_layer_fraction >= 0 && w->heavy_layer_fraction <= 1))
		return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'workload' token_noise, topic_drift, layer_correlation and heavy_layer_fraction must lie in 0..1");
	if (!(w->hot_expert_boost >= 0) || !(w->base_skew >= 0) || !(w->heavy_layer_skew >= 0) ||
	    !(w->topic_concentration >= 0) || !(w->segment_concentration >= 0))
		return rlb_err_set(err, RLB_ECONFIG, "synthetic: 'workload' concentrations, skews and boosts must not be negative");
	return 0;
}

static int gen_init(struct gen *g, const struct rlb_config *cfg, uint64_t seed,
		    int uniform, struct rlb_err *err)
{
	const struct rlb_model_config *m = &cfg->model;
	uint32_t n, e;
	int ret;

	memset(g, 0, sizeof(*g));
	ret = check_config(cfg, err);
	if (ret < 0)
		return ret;
	g->w = &cfg->workload;
	g->uniform = uniform;
	g->seed = seed;
	g->L = (uint32_t)m->moe_layers;
	g->E = (uint32_t)m->experts;
	g->K = (uint32_t)m->topk;
	if (m->expert_groups > 0 && m->topk_groups < m->expert_groups) {
		g->G = (uint32_t)m->expert_groups;
		g->TG = (uint32_t)m->topk_groups;
		g->epg = g->E / g->G;
	}
	g->T = (uint32_t)g->w->topics;
	g->rho = g->w->layer_correlation;
	g->rho_c = sqrt(1.0 - g->rho * g->rho);
	n = (uint32_t)g->w->prompts_per_step * (uint32_t)g->w->samples_per_prompt;
	g->seg = calloc(g->E, sizeof(*g->seg));
	g->logit = calloc(g->E, sizeof(*g->logit));
	g->p = calloc(g->E, sizeof(*g->p));
	g->q = calloc(g->E, sizeof(*g->q));
	g->work = calloc(g->E, sizeof(*g->work));
	g->gp = calloc(g->G ? g->G : 1, sizeof(*g->gp));
	g->stamp = calloc(g->G ? g->G : 1, sizeof(*g->stamp));
	g->seen = calloc(g->E, sizeof(*g->seen));
	g->group_of = calloc(g->E, sizeof(*g->group_of));
	g->metas = calloc(n, sizeof(*g->metas));
	g->seq_topic = calloc(n, sizeof(*g->seq_topic));
	if (!g->seg || !g->logit || !g->p || !g->q || !g->work || !g->gp || !g->stamp ||
	    !g->seen || !g->group_of ||
	    !g->metas || !g->seq_topic || alias_init(&g->tab, g->E) < 0 ||
	    alias_init(&g->gtab, g->G ? g->G : 1) < 0)
		return rlb_err_set(err, RLB_ENOMEM, "synthetic: out of memory");
	for (e = 0; g->G && e < g->E; e++)
		g->group_of[e] = e / g->epg;
	/* the uniform control builds the model too, to draw what it draws */
	ret = gen_model(g, err);
	if (ret < 0 || !uniform)
		return ret;
	for (e = 0; e < g->E; e++)
		g->p[e] = 1.0 / g->E;
	alias_build(&g->tab, g->p, g->q, g->work);
	for (e = 0; e < g->G; e++)
		g->gp[e] = 1.0 / g->G;
	if (g->G)
		alias_build(&g->gtab, g->gp, g->q, g->work);
	return 0;
}

/* Lengths, groups and topics of one step's sequences (file order). */
static void gen_step_seqs(struct gen *g, struct rng *r, uint32_t step)
{
	const struct rlb_workload_config *w = g->w;
	uint32_t p, s, i = 0;

	for (p = 0; p < (uint32_t)w->prompts_per_step; p++) {
		uint32_t topic = rng_below(r, g->T);

		for (s = 0; s < (uint32_t)w->samples_per_prompt; s++, i++) {
			double len = w->len_median * exp(w->len_sigma * rng_normal(r));

			if (len < w->len_min)
				len = w->len_min;
			if (len > w->len_max)
				len = w->len_max;
			g->metas[i].step = step;
			g->metas[i].group = p;
			g->metas[i].sample = s;
			g->metas[i].tokens = (uint32_t)floor(len + 0.5);
			g->seq_topic[i] = topic;
		}
	}
}

int rlb_synth_generate_cb(const struct rlb_config *cfg, uint64_t seed,
			  int uniform, const struct rlb_synth_sink *sink,
			  rlb_progress_fn progress, void *progress_ctx,
			  struct rlb_err *err)
{
	struct gen g;
	struct rng r, sr;
	uint32_t n, i, k, step;
	uint64_t done = 0, total;
	int ret;

	ret = gen_init(&g, cfg, seed, uniform, err);
	if (ret < 0)
		goto out;
	n = (uint32_t)g.w->prompts_per_step * (uint32_t)g.w->samples_per_prompt;
	total = (uint64_t)n * (uint64_t)g.w->steps;
	for (k = 0; k < (uint32_t)g.w->steps; k++) {
		step = (uint32_t)g.w->first_step + k;
		rng_seed(&r, seed, RS_STEP, step, 0);
		if (k > 0)
			gen_drift(&g, &r);
		gen_step_seqs(&g, &r, step);
		if (sink->begin_step) {
			ret = sink->begin_step(sink->ctx, step, g.metas, n, err);
			if (ret < 0)
				goto out;
		}
		for (i = 0; i < n; i++) {
			struct rlb_seq seq = {0};
			size_t need = (size_t)g.L * g.metas[i].tokens * g.K;

			if (need > g.ids_cap) {
				uint16_t *ids = realloc(g.ids, need * sizeof(*ids));

				if (!ids) {
					ret = rlb_err_set(err, RLB_ENOMEM, "synthetic: out of memory for a sequence of %u tokens",
							  g.metas[i].tokens);
					goto out;
				}
				g.ids = ids;
				g.ids_cap = need;
			}
			rng_seed(&sr, seed, RS_SEQ, step, i);
			gen_seq(&g, &sr, g.seq_topic[i], g.metas[i].tokens);
			seq.step = step;
			seq.group = g.metas[i].group;
			seq.sample = g.metas[i].sample;
			seq.tokens = g.metas[i].tokens;
			seq.ids = g.ids;
			ret = sink->seq(sink->ctx, i, &seq, err);
			if (ret < 0)
				goto out;
			if (progress)
				progress(progress_ctx, ++done, total, "sequences");
		}
		if (sink->end_step) {
			ret = sink->end_step(sink->ctx, step, err);
			if (ret < 0)
				goto out;
		}
	}
	ret = 0;
out:
	gen_release(&g);
	return ret;
}

static int writer_seq(void *ctx, uint32_t index, const struct rlb_seq *seq,
		      struct rlb_err *err)
{
	struct rlb_trace_writer *w = ctx;

	(void)index;
	if (rlb_trace_writer_append(w, seq) < 0)
		return rlb_trace_writer_error(w, err);
	return 0;
}

int rlb_synth_generate(const struct rlb_config *cfg, uint64_t seed,
		       int uniform, struct rlb_trace_writer *w,
		       rlb_progress_fn progress, void *progress_ctx,
		       struct rlb_err *err)
{
	struct rlb_synth_sink sink = { w, NULL, writer_seq, NULL };

	if (rlb_trace_header_check(rlb_trace_writer_header(w), cfg, err) != 0)
		return RLB_EMISMATCH;
	return rlb_synth_generate_cb(cfg, seed, uniform, &sink, progress,
				     progress_ctx, err);
}

void rlb_workload_defaults(struct rlb_workload_config *w)
{
	memset(w, 0, sizeof(*w));
	w->steps = 4;
	w->first_step = 0;
	w->prompts_per_step = 40;
	w->samples_per_prompt = 16;
	w->len_median = 4096;
	w->len_sigma = 0.5;
	w->len_min = 256;
	w->len_max = 16384;
	w->topics = 256;
	w->topic_concentration = 2.4;
	w->topic_drift = 0.05;
	w->base_skew = 0.1;
	w->hot_expert_boost = 2.5;
	w->heavy_layer_fraction = 0.125;
	w->heavy_layer_skew = 0.7;
	w->segment_min = 32;
	w->segment_max = 512;
	w->layer_correlation = 0.5;
	w->token_noise = 0.1;
	w->segment_concentration = 2.0;
}
