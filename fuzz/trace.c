/*
 * trace.c - fuzz target: a routing trace (.rrt).  Every sequence the
 * reader yields must fit the header's shape; the step index, when there
 * is one, is walked too.
 */
#include <stdlib.h>

#include "err.h"
#include "fuzz.h"
#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct rlb_trace_header *h;
	struct rlb_trace_reader *r;
	struct rlb_seq seq;
	struct rlb_err err;
	const uint32_t *steps;
	size_t i, k, n;

	if (rlb_trace_reader_open(&r, fuzz_file(data, size, "in.rrt"), &err) != 0)
		return 0;
	h = rlb_trace_reader_header(r);
	while (rlb_trace_reader_next(r, &seq, &err) == 1) {
		k = (size_t)seq.tokens * h->moe_layers * h->topk;
		for (i = 0; i < k; i++)
			if (seq.ids[i] >= h->experts)
				abort();
	}
	if (rlb_trace_reader_steps(r, &steps, &n, &err) != 0)
		n = 0;
	for (i = 0; i < n; i++)
		if (rlb_trace_reader_seek_step(r, steps[i], &err) == 0)
			(void)rlb_trace_reader_next(r, &seq, &err);
	rlb_trace_reader_free(r);
	return 0;
}
