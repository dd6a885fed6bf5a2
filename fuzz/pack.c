/*
 * pack.c - fuzz target: the packing rules.  The input gives the EP size
 * (byte 0), the token budget (bytes 1-2) and the step's sequence lengths
 * (u16 each, little-endian).  Every rule's schedule must be what
 * rlb_schedule_from_chunks accepts for these lengths (every token in one
 * chunk), keep every (micro-batch, rank) within the budget, leave no
 * micro-batch empty, come out the same twice, and keep its rule's own
 * promises (docs/schedule.md): in-order windows follow the rollout
 * order; dynamic shares differ by at most one chunk and each rank's
 * micro-batches come heaviest first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fuzz.h"
#include "schedule.h"
#include "../tests/schedule_promises.h"

#define MAX_SEQS 128

static void fail(const char *rule, const char *what)
{
	fprintf(stderr, "%s: %s\n", rule, what);
	abort();
}

/* Tokens of each (micro-batch, rank), [mb * ranks + rank]. */
static uint64_t *bin_tokens(const struct rlb_schedule *s)
{
	uint64_t *t = calloc((size_t)s->micro_batches * s->ranks + 1, sizeof(*t));
	size_t c;

	if (!t)
		abort();
	for (c = 0; c < s->nchunks; c++)
		t[(size_t)s->chunks[c].mb * s->ranks + s->chunks[c].rank] += s->chunks[c].tokens;
	return t;
}

static void check(const struct rlb_schedule *s, const uint32_t *len, size_t n)
{
	const char *rule = rlb_pack_name(s->pack), *broken;
	struct rlb_schedule again;
	struct rlb_err err;
	uint64_t *t;
	uint32_t mb, r;
	size_t c;

	/* The library's own check of a schedule: every token exactly once. */
	if (rlb_schedule_from_chunks(&again, s->step, s->pack, s->chunks, s->nchunks, len, n,
				     s->ranks, s->mb_tokens, &err) != 0) {
		fprintf(stderr, "%s: %s\n", rule, err.msg);
		abort();
	}
	if (s->nchunks && again.micro_batches != s->micro_batches)
		fail(rule, "micro-batches beyond the last one used");
	rlb_schedule_release(&again);
	t = bin_tokens(s);
	for (mb = 0; mb < s->micro_batches; mb++) {
		uint64_t sum = 0;

		for (r = 0; r < s->ranks; r++) {
			if (t[(size_t)mb * s->ranks + r] > s->mb_tokens)
				fail(rule, "a rank's micro-batch is over the budget");
			sum += t[(size_t)mb * s->ranks + r];
		}
		if (sum == 0)
			fail(rule, "an empty micro-batch");
	}
	if (s->pack == RLB_PACK_IN_ORDER)
		for (c = 1; c < s->nchunks; c++)
			if (s->chunks[c].mb < s->chunks[c - 1].mb)
				fail(rule, "a window goes back in the rollout order");
	if (s->pack == RLB_PACK_DYNAMIC && (broken = rlb_dynamic_promise_broken(s, t)))
		fail(rule, broken);
	free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum rlb_pack rules[] = {
		RLB_PACK_IN_ORDER, RLB_PACK_FFD, RLB_PACK_DYNAMIC,
	};
	uint32_t len[MAX_SEQS], ranks, budget;
	struct rlb_schedule a, b;
	struct rlb_err err;
	size_t n = 0, k;

	if (size < 3)
		return 0;
	ranks = 1 + data[0] % 64;
	budget = 1 + (uint32_t)(data[1] | data[2] << 8) % 16384;
	for (k = 3; k + 1 < size && n < MAX_SEQS; k += 2)
		len[n++] = (uint32_t)(data[k] | data[k + 1] << 8);
	/* a budget far below the lengths makes too many chunks to be useful */
	for (k = 0; k < n; k++)
		if (len[k] / budget > 64)
			return 0;
	for (k = 0; k < sizeof(rules) / sizeof(rules[0]); k++) {
		if (rlb_schedule_build(&a, 3, len, n, ranks, budget, rules[k], &err) != 0 ||
		    rlb_schedule_build(&b, 3, len, n, ranks, budget, rules[k], &err) != 0) {
			fprintf(stderr, "%s: %s\n", rlb_pack_name(rules[k]), err.msg);
			abort();
		}
		check(&a, len, n);
		if (a.micro_batches != b.micro_batches || a.nchunks != b.nchunks ||
		    (a.nchunks && memcmp(a.chunks, b.chunks, a.nchunks * sizeof(*a.chunks))))
			fail(rlb_pack_name(rules[k]), "two builds differ");
		rlb_schedule_release(&a);
		rlb_schedule_release(&b);
	}
	return 0;
}
