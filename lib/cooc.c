/*
 * cooc.c - sampled expert co-occurrence counts per layer (cooc.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cooc.h"

int rlb_cooc_init(struct rlb_cooc *c, uint32_t layers, uint32_t experts,
		  struct rlb_err *err)
{
	size_t n;

	memset(c, 0, sizeof(*c));
	if (!layers || !experts)
		return 0;
	if ((size_t)experts > SIZE_MAX / experts ||
	    (size_t)experts * experts > SIZE_MAX / sizeof(uint64_t) / layers)
		return rlb_err_set(err, RLB_ERANGE,
				   "co-occurrence: %u layers of %u x %u counts are too large",
				   layers, experts, experts);
	n = (size_t)layers * experts * experts;
	c->pairs = calloc(n, sizeof(*c->pairs));
	if (!c->pairs)
		return rlb_err_set(err, RLB_ENOMEM,
				   "co-occurrence: out of memory for %zu counts", n);
	c->layers = layers;
	c->experts = experts;
	return 0;
}

void rlb_cooc_release(struct rlb_cooc *c)
{
	if (!c)
		return;
	free(c->pairs);
	memset(c, 0, sizeof(*c));
}

void rlb_cooc_add_seq(struct rlb_cooc *c, const struct rlb_seq *seq,
		      uint32_t topk)
{
	uint32_t E = c->experts, layer, t, i, j;

	if (!c->pairs || !seq->ids)
		return;
	for (layer = 0; layer < c->layers; layer++) {
		uint64_t *p = c->pairs + (size_t)layer * E * E;

		for (t = 0; t < seq->tokens; t += RLB_COOC_STRIDE) {
			const uint16_t *id = seq->ids +
				((size_t)layer * seq->tokens + t) * topk;

			for (i = 0; i < topk; i++) {
				if (id[i] >= E)
					continue;
				for (j = i + 1; j < topk; j++) {
					if (id[j] >= E || id[j] == id[i])
						continue;
					p[(size_t)id[i] * E + id[j]]++;
					p[(size_t)id[j] * E + id[i]]++;
				}
			}
		}
	}
}

/* rlb_step_stream's part: the whole sequence, by one thread. */
struct cooc_job {
	struct rlb_cooc *c;
	uint32_t topk;
};

static void count_seq(void *ctx, const struct rlb_seq *seq, uint32_t seq_index,
		      size_t part, unsigned worker)
{
	const struct cooc_job *j = ctx;

	(void)seq_index;
	(void)part;
	(void)worker;
	rlb_cooc_add_seq(j->c, seq, j->topk);
}

int rlb_step_cooc(struct rlb_trace_reader *r, const struct rlb_schedule *s,
		  struct rlb_cooc *c, struct rlb_pool *pool, struct rlb_err *err)
{
	const struct rlb_trace_header *h = rlb_trace_reader_header(r);
	struct cooc_job j = { c, 0 };

	if (!h || h->moe_layers != c->layers || h->experts != c->experts)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "co-occurrence: counts of %u layers and %u experts do not fit the trace",
				   c->layers, c->experts);
	if (c->pairs)
		memset(c->pairs, 0, (size_t)c->layers * c->experts * c->experts *
		       sizeof(*c->pairs));
	j.topk = h->topk;
	return rlb_step_stream(r, s, pool, 1, count_seq, &j, err);
}
