/*
 * trace_records.c - fuzz target: the sequence records of a trace's data
 * frame (SPEC.md section 4.1), past the zstd layer that a mutated .rrt
 * rarely gets through.  The first byte picks the header: 4 MoE layers,
 * top-2, and bit 0: 300 experts (u16 ids), else 16; bit 1: gates; bit 2:
 * sorted ids; bits 3-4: the id coding.  The rest, compressed into one
 * valid zstd frame after that header, makes a trace whose writer died
 * before the seek table, read as the trace target reads (fuzz_trace).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>		/* ZSTD_compressBound */

#include "err.h"
#include "fuzz.h"
#include "trace.h"

/* The header frame of an empty trace of this shape (0: none). */
static size_t header_frame(uint8_t pick, uint8_t *out)
{
	struct rlb_trace_writer_opts o = { 0, 0, (pick >> 3) & 3 };
	struct rlb_trace_header h;
	struct rlb_trace_writer *w;
	struct rlb_err err;
	const char *path;

	memset(&h, 0, sizeof(h));
	h.experts = pick & 1 ? 300 : 16;
	h.topk = 2;
	h.moe_layers = 4;
	h.flags = (pick & 2 ? RLB_TRACE_F_GATES : 0) | (pick & 4 ? RLB_TRACE_F_SORTED : 0);
	snprintf(h.model, sizeof(h.model), "fuzz");
	snprintf(h.source, sizeof(h.source), "api");
	path = fuzz_file(NULL, 0, "empty.rrt");
	if (rlb_trace_writer_open(&w, path, &h, &o, &err) != 0)
		return 0;
	if (rlb_trace_writer_close(w, &err) != 0)
		abort();
	fuzz_file_head(path, out, FUZZ_HEADER_FRAME_BYTES);
	return FUZZ_HEADER_FRAME_BYTES;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t heads[32][FUZZ_HEADER_FRAME_BYTES];
	static int state[32];	/* 0: not made yet, 1: made, -1: no such header */
	uint8_t pick, *file;
	size_t cap, n;

	if (size < 1)
		return 0;
	pick = data[0] & 31;
	if (state[pick] == 0)
		state[pick] = header_frame(pick, heads[pick]) ? 1 : -1;
	if (state[pick] < 0)
		return 0;
	data++;
	size--;
	cap = FUZZ_HEADER_FRAME_BYTES + ZSTD_compressBound(size);
	file = malloc(cap);
	if (!file)
		abort();
	memcpy(file, heads[pick], FUZZ_HEADER_FRAME_BYTES);
	n = fuzz_zstd_frame(data, size, file + FUZZ_HEADER_FRAME_BYTES,
			    cap - FUZZ_HEADER_FRAME_BYTES);
	fuzz_trace(fuzz_file(file, FUZZ_HEADER_FRAME_BYTES + n, "in.rrt"));
	free(file);
	return 0;
}
