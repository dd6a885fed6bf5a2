/*
 * plan_steps.c - fuzz target: the content of a plan's step frame
 * (SPEC.md section P4), inside a valid plan file built around it, which
 * mutating a whole .rlp rarely gets: a header (2 layers, 4 experts, 2
 * ranks), a step index entry and a seek table that agree with the
 * content.  The first byte picks the version: bit 0 a schedule section
 * (1.1, pack file), bit 1 copies (1.2, eplb-oracle, split even).
 * The content is cut or zero-padded to the size that its own counts
 * (micro-batches, replicas, chunks) give.  Then as the plan target
 * (fuzz_plan).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>		/* ZSTD_compressBound */

#include "err.h"
#include "fuzz.h"
#include "plan.h"
#include "plan_io.h"
#include "trace_impl.h"
#include "util.h"

/* A shape with u16 ids. */
#define L 2
#define E 4
#define W 2
#define MAX_MBS 64
#define MAX_ITEMS 4096

/* The header frame of an empty plan of the version that PICK asks for. */
static void header_frame(uint8_t pick, uint8_t *out)
{
	struct rlb_plan_writer *w;
	struct rlb_plan_header h;
	struct rlb_err err;
	const char *path;

	memset(&h, 0, sizeof(h));
	h.policy = pick & 2 ? RLB_POLICY_EPLB_ORACLE : RLB_POLICY_REPLICATE;
	h.split = pick & 2 ? RLB_SPLIT_EVEN : RLB_SPLIT_LOCALITY;
	h.copies = (pick & 2) != 0;
	h.pack = pick & 1 ? RLB_PACK_FILE : RLB_PACK_IN_ORDER;
	h.replica_slots = 1;
	h.micro_batch_tokens = 16;
	h.migration_weight = 1;
	h.layers = L;
	h.experts = E;
	h.topk = 2;
	h.ranks = 2;
	h.gpus_per_node = 2;
	snprintf(h.model, sizeof(h.model), "fuzz");
	path = fuzz_file(NULL, 0, "empty.rlp");
	if (rlb_plan_writer_open(&w, path, &h, NULL, &err) != 0 ||
	    rlb_plan_writer_close(w, &err) != 0) {
		fprintf(stderr, "plan header %u: %s\n", pick, err.msg);
		abort();
	}
	fuzz_file_head(path, out, FUZZ_HEADER_FRAME_BYTES);
}

static void put_frame_head(uint8_t *p, uint32_t magic, uint32_t size)
{
	rlb_put_u32(p, magic);
	rlb_put_u32(p + 4, size);
}

static uint32_t get_u32_or_0(const uint8_t *p, size_t n, size_t off)
{
	return off + 4 <= n ? rlb_get_u32(p + off) : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t heads[4][FUZZ_HEADER_FRAME_BYTES];
	static int made[4];
	uint8_t pick, *content, *file, *q;
	uint32_t mbs, chunks = 0, seqs = 0, entry = 16;
	uint64_t reps, cells, len;
	size_t zlen, cap, off;
	int sched, copies;

	if (size < 1)
		return 0;
	pick = data[0] & 3;
	if (!made[pick]) {
		header_frame(pick, heads[pick]);
		made[pick] = 1;
	}
	sched = pick & 1;
	copies = (pick >> 1) & 1;
	data++;
	size--;
	mbs = get_u32_or_0(data, size, 4);
	reps = size >= 32 ? rlb_get_u64(data + 24) : 0;
	if (mbs > MAX_MBS || reps > MAX_ITEMS)
		return 0;
	cells = (uint64_t)mbs * L * E;
	len = 32 + L * E * W + 4ull * mbs * L + reps * (W + W) + 4 * (cells + reps);
	if (copies)
		len += 4 * (cells + reps);
	if (sched) {
		seqs = get_u32_or_0(data, size, len);
		chunks = get_u32_or_0(data, size, len + 4);
		if (chunks > MAX_ITEMS)
			return 0;
		len += 8 + (uint64_t)chunks * (16 + W);
		entry = 24;
	}
	cap = FUZZ_HEADER_FRAME_BYTES + ZSTD_compressBound(len) + 8 + 20 + entry + 8 + 3 * 8 + 9;
	content = calloc(1, len);
	file = calloc(1, cap);
	if (!content || !file)
		abort();
	memcpy(content, data, size < len ? size : len);
	memcpy(file, heads[pick], FUZZ_HEADER_FRAME_BYTES);
	off = FUZZ_HEADER_FRAME_BYTES;
	/* The step frame. */
	zlen = fuzz_zstd_frame(content, len, file + off, cap - off);
	off += zlen;
	/* The step index: one entry, from the content's own fixed part. */
	put_frame_head(file + off, RRT_INDEX_MAGIC, 20 + entry);
	q = file + off + 8;
	memcpy(q, "RLBPINDX", 8);
	rlb_put_u32(q + 8, 1);
	rlb_put_u32(q + 12, entry);
	rlb_put_u32(q + 16, get_u32_or_0(content, len, 0));
	rlb_put_u32(q + 20, mbs);
	rlb_put_u64(q + 24, reps);
	if (sched) {
		rlb_put_u32(q + 32, chunks);
		rlb_put_u32(q + 36, seqs);
	}
	rlb_put_u32(q + 16 + entry, rlb_rrt_crc32c(q, 16 + entry));
	off += 8 + 20 + entry;
	/* The seek table: header, step frame, index. */
	put_frame_head(file + off, RRT_SEEK_MAGIC, 3 * 8 + 9);
	q = file + off + 8;
	rlb_put_u32(q, FUZZ_HEADER_FRAME_BYTES);
	rlb_put_u32(q + 4, 0);
	rlb_put_u32(q + 8, (uint32_t)zlen);
	rlb_put_u32(q + 12, (uint32_t)len);
	rlb_put_u32(q + 16, 8 + 20 + entry);
	rlb_put_u32(q + 20, 0);
	rlb_put_u32(q + 24, 3);
	q[28] = 0;
	rlb_put_u32(q + 29, RRT_SEEKABLE_MAGIC);
	off += 8 + 3 * 8 + 9;

	fuzz_plan(fuzz_file(file, off, "in.rlp"));
	free(content);
	free(file);
	return 0;
}
