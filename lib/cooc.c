/*
 * cooc.c - sampled tokens per layer for the colocate lever (cooc.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cooc.h"

int rlb_cooc_init(struct rlb_cooc *c, uint32_t layers, uint32_t experts,
		  uint32_t topk, struct rlb_err *err)
{
	memset(c, 0, sizeof(*c));
	if (topk < 1 || topk > UINT16_MAX)
		return rlb_err_set(err, RLB_EINVAL,
				   "co-occurrence: %u experts per token out of range 1..65535",
				   topk);
	c->layers = layers;
	c->experts = experts;
	c->topk = topk;
	return 0;
}

void rlb_cooc_release(struct rlb_cooc *c)
{
	if (!c)
		return;
	free(c->ids);
	memset(c, 0, sizeof(*c));
}

int rlb_cooc_reserve(struct rlb_cooc *c, uint32_t tokens, struct rlb_err *err)
{
	size_t per = (size_t)c->layers * c->topk;
	uint16_t *ids;

	c->tokens = 0;
	if (tokens <= c->cap)
		return 0;
	if (per && tokens > SIZE_MAX / sizeof(*ids) / per)
		return rlb_err_set(err, RLB_ERANGE,
				   "co-occurrence: %u sampled tokens of %u layers are too many",
				   tokens, c->layers);
	ids = realloc(c->ids, (per ? per : 1) * tokens * sizeof(*ids));
	if (!ids)
		return rlb_err_set(err, RLB_ENOMEM,
				   "co-occurrence: out of memory for %u sampled tokens",
				   tokens);
	c->ids = ids;
	c->cap = tokens;
	return 0;
}

int rlb_cooc_add_seq(struct rlb_cooc *c, const struct rlb_seq *seq,
		     struct rlb_err *err)
{
	uint32_t n = rlb_cooc_sampled(seq->tokens), layer, i;

	if (n > c->cap - c->tokens)
		return rlb_err_set(err, RLB_ERANGE,
				   "co-occurrence: no room for %u more sampled tokens (%u of %u held)",
				   n, c->tokens, c->cap);
	for (layer = 0; seq->ids && layer < c->layers; layer++) {
		uint16_t *out = c->ids + ((size_t)layer * c->cap + c->tokens) * c->topk;

		for (i = 0; i < n; i++)
			memcpy(out + (size_t)i * c->topk,
			       seq->ids + ((size_t)layer * seq->tokens +
					   (size_t)i * RLB_COOC_STRIDE) * c->topk,
			       c->topk * sizeof(uint16_t));
	}
	c->tokens += n;
	return 0;
}

/* rlb_step_stream's part: the whole sequence, by one thread. */
struct cooc_job {
	struct rlb_cooc *c;
	struct rlb_err err;
	int failed;
};

static void add_seq(void *ctx, const struct rlb_seq *seq, uint32_t seq_index,
		    size_t part, unsigned worker)
{
	struct cooc_job *j = ctx;

	(void)seq_index;
	(void)part;
	(void)worker;
	if (!j->failed && rlb_cooc_add_seq(j->c, seq, &j->err) < 0)
		j->failed = 1;
}

int rlb_step_cooc(struct rlb_trace_reader *r, const struct rlb_schedule *s,
		  struct rlb_cooc *c, struct rlb_pool *pool, struct rlb_err *err)
{
	const struct rlb_trace_header *h = rlb_trace_reader_header(r);
	struct cooc_job j;
	uint64_t sampled = 0;
	size_t i = 0;
	int ret;

	if (!h || h->moe_layers != c->layers || h->experts != c->experts ||
	    h->topk != c->topk)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "co-occurrence: a table of %u layers, %u experts and top-%u does not fit the trace",
				   c->layers, c->experts, c->topk);
	/* the step's sequences are the schedule's chunks, (seq, start) sorted */
	while (i < s->nchunks) {
		uint32_t seq = s->chunks[i].seq, len = 0;

		for (; i < s->nchunks && s->chunks[i].seq == seq; i++)
			len += s->chunks[i].tokens;
		sampled += rlb_cooc_sampled(len);
	}
	if (sampled > UINT32_MAX)
		return rlb_err_set(err, RLB_ERANGE,
				   "co-occurrence: %llu sampled tokens are too many",
				   (unsigned long long)sampled);
	ret = rlb_cooc_reserve(c, (uint32_t)sampled, err);
	if (ret < 0)
		return ret;
	memset(&j, 0, sizeof(j));
	j.c = c;
	ret = rlb_step_stream(r, s, pool, 1, add_seq, &j, err);
	if (ret == 0 && j.failed) {
		if (err)
			*err = j.err;
		ret = j.err.code;
	}
	return ret;
}
