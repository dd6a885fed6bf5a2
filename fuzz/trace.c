/*
 * trace.c - fuzz target: a routing trace (.rrt).  Every sequence the
 * reader yields must fit the header's shape, and reading ahead on three
 * threads must give the same sequences and end (the same error, message
 * and all) as reading on one; the step index, when there is one, is
 * walked too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fuzz.h"
#include "trace.h"

/* What one pass over the trace saw. */
struct pass {
	uint64_t seqs, tokens, sum;	/* sum: a hash of every id and field */
	int end;			/* the last rlb_trace_reader_next result */
	struct rlb_err err;
};

static void read_all(struct rlb_trace_reader *r, struct pass *p)
{
	const struct rlb_trace_header *h = rlb_trace_reader_header(r);
	struct rlb_seq seq;
	size_t i, k;

	memset(p, 0, sizeof(*p));
	while ((p->end = rlb_trace_reader_next(r, &seq, &p->err)) == 1) {
		k = (size_t)seq.tokens * h->moe_layers * h->topk;
		p->seqs++;
		p->tokens += seq.tokens;
		p->sum = p->sum * 31 + seq.step * 7 + seq.group * 5 + seq.sample;
		for (i = 0; i < k; i++) {
			if (seq.ids[i] >= h->experts)
				abort();
			p->sum = p->sum * 131 + seq.ids[i];
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rlb_trace_reader *r;
	struct pass one, three;
	struct rlb_seq seq;
	struct rlb_err err;
	const uint32_t *steps;
	size_t i, n;

	if (rlb_trace_reader_open(&r, fuzz_file(data, size, "in.rrt"), &err) != 0)
		return 0;
	read_all(r, &one);
	if (rlb_trace_reader_rewind(r, &err) == 0 &&
	    rlb_trace_reader_set_threads(r, 3, &err) == 0) {
		read_all(r, &three);
		if (one.seqs != three.seqs || one.tokens != three.tokens ||
		    one.sum != three.sum || one.end != three.end ||
		    (one.end < 0 && strcmp(one.err.msg, three.err.msg) != 0)) {
			fprintf(stderr, "3 threads read otherwise than 1: %llu/%llu sequences, end %d/%d: '%s' / '%s'\n",
				(unsigned long long)one.seqs, (unsigned long long)three.seqs,
				one.end, three.end, one.err.msg, three.err.msg);
			abort();
		}
		(void)rlb_trace_reader_set_threads(r, 1, &err);
	}
	if (rlb_trace_reader_steps(r, &steps, &n, &err) != 0)
		n = 0;
	for (i = 0; i < n; i++)
		if (rlb_trace_reader_seek_step(r, steps[i], &err) == 0)
			(void)rlb_trace_reader_next(r, &seq, &err);
	rlb_trace_reader_free(r);
	return 0;
}
