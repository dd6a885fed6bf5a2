/*
 * datacontrol.c - the data-control schedule: the fewest micro-batches and
 * equal tokens on every (micro-batch, rank) of a step, by longest chunk
 * first into the emptiest bin (rules in datacontrol.h, docs/schedule.md).
 */
#include <stdlib.h>
#include <string.h>

#include "datacontrol.h"

/* Chunk order of step 3: longer first, then (seq, start). */
static int cmp_len(const void *a, const void *b, const struct rlb_chunk *ch)
{
	size_t i = *(const size_t *)a, j = *(const size_t *)b;

	if (ch[i].tokens != ch[j].tokens)
		return ch[i].tokens > ch[j].tokens ? -1 : 1;
	return (i > j) - (i < j);
}

static void sort_len(size_t *idx, size_t *tmp, size_t n, const struct rlb_chunk *ch)
{
	size_t mid = n / 2, i = 0, j = mid, k = 0;

	if (n < 2)
		return;
	sort_len(idx, tmp, mid, ch);
	sort_len(idx + mid, tmp, n - mid, ch);
	while (i < mid && j < n)
		tmp[k++] = cmp_len(&idx[j], &idx[i], ch) < 0 ? idx[j++] : idx[i++];
	while (i < mid)
		tmp[k++] = idx[i++];
	while (j < n)
		tmp[k++] = idx[j++];
	memcpy(idx, tmp, n * sizeof(*idx));
}

/* Step 3 with M micro-batches: 0, or 1 when some bin overflows. */
static int fill_bins(struct rlb_schedule *s, const size_t *idx, uint32_t M,
		     uint32_t *bin)
{
	size_t c, nb = (size_t)M * s->ranks, b;

	memset(bin, 0, nb * sizeof(*bin));
	for (c = 0; c < s->nchunks; c++) {
		struct rlb_chunk *ch = &s->chunks[idx[c]];
		size_t best = 0;

		for (b = 1; b < nb; b++)
			if (bin[b] < bin[best])
				best = b;
		if (bin[best] + ch->tokens > s->mb_tokens)
			return 1;
		bin[best] += ch->tokens;
		ch->mb = (uint32_t)(best / s->ranks);
		ch->rank = (uint32_t)(best % s->ranks);
	}
	return 0;
}

int rlb_dc_schedule(struct rlb_schedule *s, uint32_t step,
		    const uint32_t *seq_tokens, size_t nseqs, uint32_t ranks,
		    uint32_t mb_tokens, struct rlb_err *err)
{
	size_t *idx = NULL, *tmp = NULL, c;
	uint32_t *bin = NULL, M;
	uint64_t total = 0, per_mb;
	int ret;

	/* The chunks, in (seq, start) order, come from any rule; their bins are redone. */
	ret = rlb_schedule_build(s, step, seq_tokens, nseqs, ranks, mb_tokens,
				 RLB_PACK_FFD, err);
	if (ret < 0)
		return ret;
	s->pack = RLB_PACK_DATA_CONTROL;
	if (s->nchunks == 0) {
		s->micro_batches = 0;
		return 0;
	}
	idx = malloc(s->nchunks * sizeof(*idx));
	tmp = malloc(s->nchunks * sizeof(*tmp));
	if (!idx || !tmp) {
		ret = rlb_err_set(err, RLB_ENOMEM, "data control: out of memory");
		goto out;
	}
	for (c = 0; c < s->nchunks; c++) {
		idx[c] = c;
		total += s->chunks[c].tokens;
	}
	sort_len(idx, tmp, s->nchunks, s->chunks);
	per_mb = (uint64_t)ranks * mb_tokens;
	for (M = (uint32_t)((total + per_mb - 1) / per_mb);; M++) {
		uint32_t *nb = realloc(bin, (size_t)M * ranks * sizeof(*bin));

		if (!nb) {
			ret = rlb_err_set(err, RLB_ENOMEM, "data control: out of memory");
			goto out;
		}
		bin = nb;
		if (fill_bins(s, idx, M, bin) == 0)
			break;
	}
	s->micro_batches = M;
out:
	free(idx);
	free(tmp);
	free(bin);
	if (ret < 0)
		rlb_schedule_release(s);
	return ret;
}
