/*
 * schedule_promises.h - the dynamic packing rule's own promises
 * (docs/schedule.md), checked by the unit tests (test_schedule.c) and the
 * fuzz target (fuzz/pack.c) alike.
 */
#ifndef RLB_TEST_SCHEDULE_PROMISES_H
#define RLB_TEST_SCHEDULE_PROMISES_H

#include <stdint.h>

#include "schedule.h"

/*
 * Given t[mb * ranks + rank], the tokens of each (micro-batch, rank) of a
 * dynamic schedule s: NULL when each rank's micro-batches come heaviest
 * first and the ranks' shares differ by at most the longest chunk (the
 * deal gives each chunk to the lightest rank), else which promise broke.
 */
static inline const char *rlb_dynamic_promise_broken(const struct rlb_schedule *s,
						     const uint64_t *t)
{
	uint64_t lo = UINT64_MAX, hi = 0;
	uint32_t longest = 0, mb, r;
	size_t c;

	for (c = 0; c < s->nchunks; c++)
		if (s->chunks[c].tokens > longest)
			longest = s->chunks[c].tokens;
	for (r = 0; r < s->ranks; r++) {
		uint64_t share = 0;

		for (mb = 0; mb < s->micro_batches; mb++) {
			share += t[(size_t)mb * s->ranks + r];
			if (mb && t[(size_t)mb * s->ranks + r] > t[(size_t)(mb - 1) * s->ranks + r])
				return "a rank's micro-batch is heavier than the one before";
		}
		lo = share < lo ? share : lo;
		hi = share > hi ? share : hi;
	}
	if (s->nchunks && hi - lo > longest)
		return "two ranks' shares differ by more than the longest chunk";
	return NULL;
}

#endif
