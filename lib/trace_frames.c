/*
 * trace_frames.c - the trace reader's frame map: parses zstd frame and
 * block headers, lists the data frames from the seek table and step index,
 * or walks them from the header on when the file lacks those (a writer that
 * did not finish).  Corrupt input is an error naming its byte offset.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "trace_read_impl.h"
#include "util.h"

#define BLOCK_MAX (128u << 10)	/* zstd's largest block content */

int rlb_rrt_parse_fhdr(const uint8_t *p, size_t n, struct fhdr *fh,
		       const char **why)
{
	static const unsigned did_bytes[4] = { 0, 1, 2, 4 };
	static const unsigned fcs_bytes[4] = { 0, 2, 4, 8 };
	unsigned fhd, single, fcs_n, pos;

	if (n < 5)
		return 1;
	fhd = p[4];
	single = (fhd >> 5) & 1;
	fcs_n = fcs_bytes[fhd >> 6];
	if (fcs_n == 0 && single)
		fcs_n = 1;
	if (fhd & 0x08) {
		*why = "reserved bit set in the frame header";
		return -1;
	}
	if (!(fhd & 0x04)) {
		*why = "frame has no content checksum";
		return -1;
	}
	if (did_bytes[fhd & 3]) {
		*why = "frame needs a dictionary";
		return -1;
	}
	if (fcs_n == 0) {
		*why = "frame has no content size";
		return -1;
	}
	pos = 5 + !single;
	if (n < pos + fcs_n)
		return 1;
	switch (fcs_n) {
	case 1: fh->content = p[pos]; break;
	case 2: fh->content = (uint64_t)rlb_get_u16(p + pos) + 256; break;
	case 4: fh->content = rlb_get_u32(p + pos); break;
	default: fh->content = rlb_get_u64(p + pos); break;
	}
	fh->size = pos + fcs_n;
	return 0;
}

int rlb_rrt_block_info(const uint8_t *b, uint32_t *last, uint32_t *skip,
		       uint32_t *bound, const char **why)
{
	uint32_t bh = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16);
	uint32_t type = (bh >> 1) & 3, size = bh >> 3;

	*last = bh & 1;
	if (type == 3) {
		*why = "reserved block type";
		return -1;
	}
	if (size > BLOCK_MAX) {
		*why = "block larger than 128 KiB";
		return -1;
	}
	*skip = type == 1 ? 1 : size;
	*bound = type == 2 ? BLOCK_MAX : size;
	return 0;
}

/*
 * Walk the zstd frame at off through its block headers, reading only
 * those: its size in the file and a checked content size.  RLB_ETRUNC
 * when the file ends inside it.
 */
static int walk_frame(struct rlb_trace_reader *r, uint64_t off,
		      uint32_t *csize, uint32_t *rsize, struct rlb_err *err)
{
	uint8_t hb[18], b[3];
	struct fhdr fh;
	const char *why = NULL;
	uint64_t pos, bound = 0, avail = r->file_bytes - off;
	size_t n = avail < sizeof(hb) ? (size_t)avail : sizeof(hb);
	uint32_t last = 0, skip, bb;
	int ret;

	ret = rrt_read_at(r, off, hb, n, err);
	if (ret != 0)
		return ret;
	ret = rlb_rrt_parse_fhdr(hb, n, &fh, &why);
	if (ret > 0)
		return rlb_rrt_at_err(err, RLB_ETRUNC, "data frame", off,
			      "frame header cut at end of file");
	if (ret < 0)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", off, "%s", why);
	if (fh.content < RRT_SEQ_FIXED || fh.content > RRT_MAX_FRAME_RAW)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", off,
			      "content size %llu is out of range [%u, %u]",
			      (unsigned long long)fh.content, RRT_SEQ_FIXED,
			      RRT_MAX_FRAME_RAW);
	pos = off + fh.size;
	while (!last) {
		if (pos > r->file_bytes || r->file_bytes - pos < 3)
			return rlb_rrt_at_err(err, RLB_ETRUNC, "data frame", off,
				      "block header at offset %llu cut at end of file",
				      (unsigned long long)pos);
		ret = rrt_read_at(r, pos, b, 3, err);
		if (ret != 0)
			return ret;
		if (rlb_rrt_block_info(b, &last, &skip, &bb, &why) != 0)
			return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", off,
				      "%s at offset %llu", why,
				      (unsigned long long)pos);
		pos += 3 + (uint64_t)skip;
		bound += bb;
		if (pos - off > UINT32_MAX)
			return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", off,
				      "frame larger than 4 GiB");
	}
	pos += 4;
	if (pos > r->file_bytes)
		return rlb_rrt_at_err(err, RLB_ETRUNC, "data frame", off,
			      "frame cut at end of file (%llu of %llu bytes present)",
			      (unsigned long long)(r->file_bytes - off),
			      (unsigned long long)(pos - off));
	if (fh.content > bound)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", off,
			      "content size %llu exceeds what its blocks hold (%llu)",
			      (unsigned long long)fh.content,
			      (unsigned long long)bound);
	*csize = (uint32_t)(pos - off);
	*rsize = (uint32_t)fh.content;
	return 0;
}

static int add_frame(struct rlb_trace_reader *r, uint64_t off, uint32_t csize,
		     uint32_t rsize, struct rlb_err *err)
{
	struct rframe *f;

	if (rlb_grow(&r->frames, &r->frames_cap, r->nframes + 1, sizeof(*r->frames)) != 0)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	f = &r->frames[r->nframes++];
	memset(f, 0, sizeof(*f));
	f->off = off;
	f->csize = csize;
	f->rsize = rsize;
	return 0;
}

/*
 * Parse the step index content (len bytes of the skippable frame at off)
 * and attach it to the frames found.
 */
static int parse_index(struct rlb_trace_reader *r, uint64_t off,
		       const uint8_t *p, uint64_t len, struct rlb_err *err)
{
	uint64_t nf, ns, i, seq = 0;
	uint32_t stored, crc, prev = 0;
	const uint8_t *e;

	if (len < RRT_I_FIXED + 4 || memcmp(p, RRT_INDEX_ID, 8) != 0)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off + 8,
				      "bad magic");
	stored = rlb_get_u32(p + len - 4);
	crc = rlb_rrt_crc32c(p, (size_t)len - 4);
	if (!rrt_crc_ok(stored, crc))
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step index",
			      off + 8 + len - 4,
			      "checksum mismatch (stored 0x%08x, computed 0x%08x)",
			      stored, crc);
	nf = rlb_get_u32(p + 8);
	ns = rlb_get_u64(p + 16);
	if (rlb_get_u32(p + 12) != 0)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off + 8 + 12,
			      "reserved field is not zero");
	if (nf != r->nframes)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off + 8 + 8,
			      "lists %llu data frames, the file has %zu",
			      (unsigned long long)nf, r->nframes);
	if (ns > len / RRT_I_SEQ ||
	    len != RRT_I_FIXED + nf * RRT_I_FRAME + ns * RRT_I_SEQ + 4)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off,
			      "size %llu does not match %llu frames and %llu sequences",
			      (unsigned long long)len, (unsigned long long)nf,
			      (unsigned long long)ns);
	r->metas = malloc((size_t)(ns ? ns : 1) * sizeof(*r->metas));
	if (!r->metas)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	e = p + RRT_I_FIXED;
	for (i = 0; i < nf; i++, e += RRT_I_FRAME) {
		struct rframe *f = &r->frames[i];
		uint32_t step = rlb_get_u32(e), n = rlb_get_u32(e + 4), j;

		if ((i && step < prev) || n == 0 || n > ns - seq)
			return rlb_rrt_at_err(err, RLB_ECORRUPT, "step index",
				      off + 8 + (uint64_t)(e - p),
				      "bad entry for data frame %llu (step %u, %u sequences)",
				      (unsigned long long)i, step, n);
		f->step = step;
		f->step_known = 1;
		f->seqs = n;
		f->first_seq = seq;
		for (j = 0; j < n; j++) {
			const uint8_t *m = p + RRT_I_FIXED + nf * RRT_I_FRAME +
					   (seq + j) * RRT_I_SEQ;
			struct rlb_seq_meta *mt = &r->metas[seq + j];

			mt->step = step;
			mt->group = rlb_get_u32(m);
			mt->sample = rlb_get_u32(m + 4);
			mt->tokens = rlb_get_u32(m + 8);
			if (mt->tokens < 1 || mt->tokens > RLB_TRACE_MAX_SEQ_TOKENS)
				return rlb_rrt_at_err(err, RLB_ECORRUPT, "step index",
					      off + 8 + (uint64_t)(m - p),
					      "sequence %llu has %u tokens",
					      (unsigned long long)(seq + j), mt->tokens);
		}
		seq += n;
		prev = step;
	}
	if (seq != ns)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off + 8 + 16,
			      "frames hold %llu sequences, the index says %llu",
			      (unsigned long long)seq, (unsigned long long)ns);
	r->nmetas = ns;
	r->has_index = 1;
	return 0;
}

/* Read and parse the skippable index frame at off (frame size fsize). */
static int load_index(struct rlb_trace_reader *r, uint64_t off, uint64_t fsize,
		      struct rlb_err *err)
{
	uint8_t *b;
	int ret;

	if (fsize < 8 || fsize - 8 > UINT32_MAX)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off, "bad size");
	b = malloc((size_t)fsize);
	if (!b)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = rrt_read_at(r, off, b, (size_t)fsize, err);
	if (ret == 0 && (rlb_get_u32(b) != RRT_INDEX_MAGIC ||
			 rlb_get_u32(b + 4) != fsize - 8))
		ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off,
			     "bad frame header");
	if (ret == 0)
		ret = parse_index(r, off, b + 8, fsize - 8, err);
	free(b);
	return ret;
}

static int seek_frame(void *ctx, uint64_t off, uint32_t csize, uint32_t rsize,
		      struct rlb_err *err)
{
	return add_frame(ctx, off, csize, rsize, err);
}

/* The seek table at the end of the file: check it and list the frames. */
static int load_seek_table(struct rlb_trace_reader *r, struct rlb_err *err)
{
	static const struct rrt_seek_limits lim = {
		.max_frames = RRT_SEEK_MAX_FRAMES - 2,
		.min_raw = RRT_SEQ_FIXED,
		.max_raw = RRT_MAX_FRAME_RAW,
		.min_index_bytes = 8 + RRT_I_FIXED + 4,
	};
	uint8_t foot[RRT_SEEK_FOOTER];
	uint64_t index_off, index_bytes;
	int ret;

	ret = rrt_read_at(r, r->file_bytes - RRT_SEEK_FOOTER, foot, sizeof(foot), err);
	if (ret != 0)
		return ret;
	if (foot[4] & 0x80)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "seek table",
				      r->file_bytes - RRT_SEEK_FOOTER + 4,
				      "checksum flag is not used by this format");
	if (foot[4] & 0x7C)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "seek table",
				      r->file_bytes - RRT_SEEK_FOOTER + 4,
				      "reserved bits set in the descriptor");
	ret = rlb_rrt_seek_table_read(r->fd, r->path, r->file_bytes, r->data_start,
				      rlb_get_u32(foot), &lim, seek_frame, r,
				      &index_off, &index_bytes, err);
	if (ret != 0)
		return ret;
	ret = load_index(r, index_off, index_bytes, err);
	if (ret != 0)
		return ret;
	r->has_seek = 1;
	r->valid_bytes = r->file_bytes;
	return 0;
}

/*
 * Whether the n < 8 bytes at the end of the file can begin a frame
 * (a frame header cut by the end of the file): a prefix of the zstd
 * magic or of a skippable frame's.
 */
static int frame_start_ok(const uint8_t *b, size_t n)
{
	uint8_t z[4], s[4];
	size_t i, k = n < 4 ? n : 4;

	rlb_put_u32(z, RRT_ZSTD_MAGIC);
	rlb_put_u32(s, RRT_SKIP_MAGIC_BASE);
	if (memcmp(b, z, k) == 0)
		return 1;
	for (i = 0; i < k; i++)
		if ((i == 0 ? (uint8_t)(b[0] & 0xF0) : b[i]) != s[i])
			return 0;
	return 1;
}

/*
 * No seek table: walk the frames from the header on.  Stops at the end
 * of the file or where it was cut (truncated), or at a structural error,
 * which is kept and reported once the frames before it have been read.
 */
static void scan(struct rlb_trace_reader *r)
{
	uint64_t off = r->data_start;
	struct rlb_err *err = &r->scan_err;
	int seen_index = 0;
	int ret = 0;

	r->truncated = 1;
	r->valid_bytes = off;
	while (off < r->file_bytes) {
		uint8_t b[8];
		uint32_t magic, csize = 0, rsize = 0;
		uint64_t size;

		if (r->file_bytes - off < 8) {
			size_t n = (size_t)(r->file_bytes - off);

			ret = rrt_read_at(r, off, b, n, err);
			if (ret == 0 && !frame_start_ok(b, n))
				ret = n >= 4 ?
				      rlb_rrt_at_err(err, RLB_ECORRUPT, "frame", off,
						     "unknown magic 0x%08x", rlb_get_u32(b)) :
				      rlb_rrt_at_err(err, RLB_ECORRUPT, "frame", off,
						     "the last %zu bytes start no frame", n);
			break;
		}
		ret = rrt_read_at(r, off, b, 8, err);
		if (ret != 0)
			break;
		magic = rlb_get_u32(b);
		if (magic == RRT_ZSTD_MAGIC) {
			if (seen_index) {
				ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", off,
					     "data after the step index");
				break;
			}
			ret = walk_frame(r, off, &csize, &rsize, err);
			if (ret == 0)
				ret = add_frame(r, off, csize, rsize, err);
			if (ret != 0)
				break;
			off += csize;
			r->valid_bytes = off;
			continue;
		}
		if ((magic & RRT_SKIP_MAGIC_MASK) != RRT_SKIP_MAGIC_BASE) {
			ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "frame", off,
				     "unknown magic 0x%08x", magic);
			break;
		}
		size = 8 + (uint64_t)rlb_get_u32(b + 4);
		if (size > r->file_bytes - off)
			break;	/* cut inside a skippable frame */
		if (magic == RRT_INDEX_MAGIC) {
			if (seen_index) {
				ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "step index", off,
					     "second step index");
				break;
			}
			ret = load_index(r, off, size, err);
			if (ret != 0)
				break;
			seen_index = 1;
		} else if (magic == RRT_SEEK_MAGIC) {
			/* A complete seek table here would have been found. */
			if (off + size == r->file_bytes)
				ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "seek table", off,
					     "bad footer");
			else
				ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "seek table", off,
					     "%" PRIu64 " bytes of data after it, from offset %" PRIu64,
					     r->file_bytes - (off + size), off + size);
			break;
		} else if (magic == RRT_HEADER_MAGIC) {
			ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "frame", off,
				     "second header");
			break;
		}
		off += size;
		r->valid_bytes = off;
	}
	if (ret == RLB_ETRUNC)
		ret = 0;	/* cut inside a frame: truncation, not corruption */
	r->scan_code = ret;
	if (ret == 0)
		rlb_err_clear(err);
}

int rlb_rrt_find_frames(struct rlb_trace_reader *r, struct rlb_err *err)
{
	uint8_t tail[4];
	int ret = 0;

	if (r->file_bytes >= r->data_start + 8 + RRT_SEEK_FOOTER) {
		ret = rrt_read_at(r, r->file_bytes - 4, tail, 4, err);
		if (ret == 0 && rlb_get_u32(tail) == RRT_SEEKABLE_MAGIC)
			ret = load_seek_table(r, err);
		else if (ret == 0)
			scan(r);
	} else {
		scan(r);
	}
	return ret;
}
