/*
 * trace_read.c - the trace reader: finds the frames (from the seek table
 * and step index, or by walking frame and block headers when the file
 * was cut), decodes data frames one at a time, or on read-ahead threads,
 * and yields sequences.  Every length is checked against the limits and
 * the bytes present; corrupt input is an error naming its byte offset.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "trace_impl.h"
#include "util.h"

#define BLOCK_MAX (128u << 10)	/* zstd's largest block content */

struct rframe {
	uint64_t off;		/* file offset of the zstd frame */
	uint32_t csize;		/* frame bytes in the file */
	uint32_t rsize;		/* raw content bytes */
	uint32_t step;
	uint32_t seqs;		/* from the index; 0 when unknown */
	uint64_t first_seq;	/* its first entry in metas (index only) */
	int step_known;
};

/* A position in the sequence stream and the frame it has decoded. */
struct cursor {
	size_t cur;		/* frame loaded, or next to load */
	int loaded;
	uint8_t *raw;
	size_t rcap, rlen, rpos;
	uint32_t rec;		/* sequences read from the loaded frame */
	int code;		/* sticky iteration error */
	struct rlb_err err;
};

/*
 * Read-ahead of the main cursor (rlb_trace_reader_set_threads): workers
 * decompress the frames after the cursor's into a ring of slots, frame i
 * in slots[i % nslots], while the cursor works on its own.  Frames
 * [head, next) are handed out; the cursor takes head by swapping buffers
 * with its slot.  Workers only read what open set (decode_frame); all
 * reader and cursor state is changed by the consumer.
 */
struct ra_slot {
	uint8_t *raw;
	size_t rcap, rlen;
	int done;		/* raw (or code and err) hold its frame */
	int code;
	struct rlb_err err;
};

struct ra_worker {
	struct rlb_trace_reader *r;
	pthread_t thread;
	ZSTD_DCtx *dctx;
	uint8_t *cbuf;
	size_t ccap;
};

struct readahead {
	pthread_mutex_t mutex;
	pthread_cond_t work;	/* a frame to hand out, or stop */
	pthread_cond_t done;	/* a frame decoded, or a worker idle */
	size_t head;		/* the frame the cursor takes next */
	size_t next;		/* the next to hand out */
	size_t end;		/* none is handed out from here on */
	unsigned busy;		/* workers decoding */
	int stop;
	uint64_t taken;		/* frames the cursor took from workers */
	unsigned nslots, nworkers;
	struct ra_slot *slots;
	struct ra_worker *w;
};

static void ra_free(struct readahead *ra);

struct rlb_trace_reader {
	int fd;
	char *path;
	uint64_t file_bytes;
	struct rrt_shape s;
	uint64_t data_start;

	struct rframe *frames;
	size_t nframes, frames_cap;
	struct rlb_seq_meta *metas;	/* from the step index */
	uint64_t nmetas;
	uint32_t *steps;
	size_t nsteps;
	int steps_ready;
	int has_seek, has_index, truncated;
	uint64_t valid_bytes;		/* end of the last complete frame found */
	int scan_code;			/* structural error after the last frame */
	struct rlb_err scan_err;

	ZSTD_DCtx *dctx;
	uint8_t *cbuf;
	size_t ccap;
	struct cursor main, scratch;
	/* two sets, used in turn, so a sequence stays valid over one more next */
	uint16_t *ids[2];
	size_t ids_cap[2];
	float *gates[2];
	size_t gates_cap[2];
	int buf;			/* the set of the last decoded sequence */
	struct readahead *ra;		/* NULL: the main cursor decodes itself */
};

/* Read n bytes at off; RLB_ETRUNC when the file ends first. */
static int read_at(const struct rlb_trace_reader *r, uint64_t off, void *buf,
		   size_t n, struct rlb_err *err)
{
	return rlb_rrt_read_at(r->fd, r->path, r->file_bytes, off, buf, n, err);
}

/*
 * A zstd frame header (zstd_compression_format.md, "Frame_Header"),
 * parsed here rather than with zstd's experimental API.
 */
struct fhdr {
	size_t size;		/* header bytes, magic included */
	uint64_t content;	/* Frame_Content_Size */
};

/* 0, 1 when more than n bytes are needed, or -1 with *why set. */
static int parse_fhdr(const uint8_t *p, size_t n, struct fhdr *fh,
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

/* Block header: size of its bytes after the header and its content bound. */
static int block_info(const uint8_t *b, uint32_t *last, uint32_t *skip,
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

	ret = read_at(r, off, hb, n, err);
	if (ret != 0)
		return ret;
	ret = parse_fhdr(hb, n, &fh, &why);
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
		ret = read_at(r, pos, b, 3, err);
		if (ret != 0)
			return ret;
		if (block_info(b, &last, &skip, &bb, &why) != 0)
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
	ret = read_at(r, off, b, (size_t)fsize, err);
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

	ret = read_at(r, r->file_bytes - RRT_SEEK_FOOTER, foot, sizeof(foot), err);
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

			ret = read_at(r, off, b, n, err);
			if (ret == 0 && !frame_start_ok(b, n))
				ret = n >= 4 ?
				      rlb_rrt_at_err(err, RLB_ECORRUPT, "frame", off,
						     "unknown magic 0x%08x", rlb_get_u32(b)) :
				      rlb_rrt_at_err(err, RLB_ECORRUPT, "frame", off,
						     "the last %zu bytes start no frame", n);
			break;
		}
		ret = read_at(r, off, b, 8, err);
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

/* Prefix a reader error with the trace's path; returns the code. */
static int path_err(struct rlb_trace_reader *r, struct rlb_err *err, int code)
{
	int format = code == RLB_ECORRUPT || code == RLB_ETRUNC ||
		     code == RLB_EVERSION || code == RLB_EUNSUPPORTED;

	if (err && format && err->code == code && strncmp(err->msg, "trace '", 7) != 0)
		rlb_err_prefix(err, "trace '%s'", r->path);
	return code;
}

int rlb_trace_reader_open(struct rlb_trace_reader **out, const char *path,
			  struct rlb_err *err)
{
	struct rlb_trace_reader *r;
	struct rlb_err tmp;
	uint8_t *hc = NULL, tail[4];
	uint32_t hsize;
	int ret;

	if (!err)
		err = &tmp;
	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	r->fd = -1;
	r->path = strdup(path);
	r->dctx = rlb_rrt_dctx_new();
	if (!r->path || !r->dctx) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	ret = rlb_rrt_open(path, "trace", &r->fd, &r->file_bytes, err);
	if (ret)
		goto out;
	ret = rlb_rrt_read_header_frame(r->fd, r->path, r->file_bytes, "trace", RRT_H_MAX,
					&hc, &hsize, err);
	if (ret == 0)
		ret = rlb_rrt_header_decode(hc, hsize, &r->s, err);
	if (ret != 0)
		goto out;
	r->data_start = 8 + (uint64_t)hsize;
	ret = 0;
	if (r->file_bytes >= r->data_start + 8 + RRT_SEEK_FOOTER) {
		ret = read_at(r, r->file_bytes - 4, tail, 4, err);
		if (ret == 0 && rlb_get_u32(tail) == RRT_SEEKABLE_MAGIC)
			ret = load_seek_table(r, err);
		else if (ret == 0)
			scan(r);
	} else {
		scan(r);
	}
out:
	free(hc);
	if (ret != 0) {
		path_err(r, err, ret);
		rlb_trace_reader_free(r);
		return ret;
	}
	*out = r;
	return 0;
}

void rlb_trace_reader_free(struct rlb_trace_reader *r)
{
	if (!r)
		return;
	ra_free(r->ra);		/* its workers read the file: before close */
	if (r->fd >= 0)
		close(r->fd);
	ZSTD_freeDCtx(r->dctx);
	free(r->path);
	free(r->frames);
	free(r->metas);
	free(r->steps);
	free(r->cbuf);
	free(r->main.raw);
	free(r->scratch.raw);
	free(r->ids[0]);
	free(r->ids[1]);
	free(r->gates[0]);
	free(r->gates[1]);
	free(r);
}

const struct rlb_trace_header *rlb_trace_reader_header(const struct rlb_trace_reader *r)
{
	return &r->s.h;
}

const char *rlb_trace_reader_id_coding(const struct rlb_trace_reader *r)
{
	static const char *const names[] = { "raw", "rank", "delta" };

	return r->s.id_coding < 3 ? names[r->s.id_coding] : "unknown";
}

int rlb_trace_reader_truncated(const struct rlb_trace_reader *r)
{
	return r->truncated;
}

int rlb_trace_no_step_err(const struct rlb_trace_reader *r, const uint32_t *steps,
			  size_t nsteps, uint32_t lo, uint32_t hi, struct rlb_err *err)
{
	char range[32];

	if (nsteps == 0)
		return rlb_err_set(err, RLB_ENOTFOUND, "trace '%s' holds no step%s", r->path,
				   r->truncated ? " (it is truncated: its writer did not finish)" : "");
	if (hi == UINT32_MAX)
		snprintf(range, sizeof(range), "%u:", lo);
	else
		snprintf(range, sizeof(range), "%u:%u", lo, hi);
	return rlb_err_set(err, RLB_ENOTFOUND,
			   "no step of the trace in %s (trace '%s' has steps %u..%u)",
			   range, r->path, steps[0], steps[nsteps - 1]);
}

/*
 * Read frame i, check it against the seek table and decompress it with
 * dctx into *raw (grown to fit, as is *cbuf for the compressed bytes):
 * *rlen, or an error.  Reads nothing open did not set, so read-ahead
 * workers run it beside the consumer.
 */
static int decode_frame(const struct rlb_trace_reader *r, size_t i,
			ZSTD_DCtx *dctx, uint8_t **cbuf, size_t *ccap,
			uint8_t **raw, size_t *rcap, size_t *rlen,
			struct rlb_err *err)
{
	const struct rframe *f = &r->frames[i];
	struct fhdr fh;
	const char *why = NULL;
	uint8_t *cb;
	size_t got;
	int ret;

	if (rlb_grow(cbuf, ccap, f->csize, 1) != 0 ||
	    rlb_grow(raw, rcap, f->rsize, 1) != 0)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	cb = *cbuf;
	ret = read_at(r, f->off, cb, f->csize, err);
	if (ret != 0)
		return ret;
	if (rlb_get_u32(cb) != RRT_ZSTD_MAGIC)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
			      "not a zstd frame (magic 0x%08x)", rlb_get_u32(cb));
	ret = parse_fhdr(cb, f->csize, &fh, &why);
	if (ret != 0)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off, "%s",
			      ret > 0 ? "frame header cut" : why);
	if (fh.content != f->rsize)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
			      "content size %llu, the seek table says %u",
			      (unsigned long long)fh.content, f->rsize);
	if (r->has_seek) {
		/* Bound the content by its blocks, as walk_frame does. */
		uint64_t pos = fh.size, bound = 0;
		uint32_t last = 0, skip, bb;

		while (!last) {
			if (pos + 3 > f->csize)
				return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
					      "blocks run past the frame's end");
			if (block_info(cb + pos, &last, &skip, &bb, &why) != 0)
				return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
					      "%s at offset %llu", why,
					      (unsigned long long)(f->off + pos));
			pos += 3 + (uint64_t)skip;
			bound += bb;
		}
		if (pos + 4 != f->csize || fh.content > bound)
			return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
				      "frame size does not match the seek table");
	}
	got = ZSTD_decompressDCtx(dctx, *raw, f->rsize, cb, f->csize);
	if (ZSTD_isError(got)) {
		if (ZSTD_getErrorCode(got) == ZSTD_error_checksum_wrong)
			return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
				      "checksum mismatch");
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
			      "corrupt zstd data (%s)", ZSTD_getErrorName(got));
	}
	if (got != f->rsize)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
			      "content is %zu bytes, expected %u", got, f->rsize);
	if (got < RRT_SEQ_FIXED)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
			      "content too short for a sequence");
	*rlen = got;
	return 0;
}

static void *ra_main(void *arg)
{
	struct ra_worker *w = arg;
	const struct rlb_trace_reader *r = w->r;
	struct readahead *ra = r->ra;

	pthread_mutex_lock(&ra->mutex);
	for (;;) {
		struct ra_slot *sl;
		size_t i;
		int code;

		/* frames [head, next) hold distinct slots: next's is free */
		while (!ra->stop &&
		       (ra->next >= ra->end || ra->next - ra->head >= ra->nslots))
			pthread_cond_wait(&ra->work, &ra->mutex);
		if (ra->stop)
			break;
		i = ra->next++;
		sl = &ra->slots[i % ra->nslots];
		ra->busy++;
		pthread_mutex_unlock(&ra->mutex);
		code = decode_frame(r, i, w->dctx, &w->cbuf, &w->ccap,
				    &sl->raw, &sl->rcap, &sl->rlen, &sl->err);
		pthread_mutex_lock(&ra->mutex);
		sl->code = code;
		sl->done = 1;
		ra->busy--;
		pthread_cond_broadcast(&ra->done);
	}
	pthread_mutex_unlock(&ra->mutex);
	return NULL;
}

/*
 * Frame i for the main cursor from the workers, who then go on up to
 * stop.  Any other frame than the one after the last taken (a seek)
 * drops what was read ahead.
 */
static int ra_take(struct rlb_trace_reader *r, struct cursor *c, size_t i,
		   size_t stop, size_t *rlen, struct rlb_err *err)
{
	struct readahead *ra = r->ra;
	struct ra_slot *sl = &ra->slots[i % ra->nslots];
	uint8_t *raw;
	size_t cap;
	unsigned k;
	int ret;

	pthread_mutex_lock(&ra->mutex);
	if (i != ra->head) {
		/* hand nothing more out; wait until no worker fills a slot */
		ra->end = 0;
		while (ra->busy)
			pthread_cond_wait(&ra->done, &ra->mutex);
		for (k = 0; k < ra->nslots; k++)
			ra->slots[k].done = 0;
		ra->head = ra->next = i;
	}
	ra->end = stop < r->nframes ? stop : r->nframes;
	pthread_cond_broadcast(&ra->work);
	while (!sl->done)
		pthread_cond_wait(&ra->done, &ra->mutex);
	ret = sl->code;
	if (ret != 0)
		*err = sl->err;
	*rlen = sl->rlen;
	/* the cursor is done with its frame: its buffer takes the slot's place */
	raw = c->raw;
	cap = c->rcap;
	c->raw = sl->raw;
	c->rcap = sl->rcap;
	sl->raw = raw;
	sl->rcap = cap;
	sl->done = 0;
	ra->head = i + 1;
	ra->taken++;
	pthread_cond_broadcast(&ra->work);
	pthread_mutex_unlock(&ra->mutex);
	return ret;
}

/* Stop and join the workers and free the read-ahead.  NULL is a no-op. */
static void ra_free(struct readahead *ra)
{
	unsigned k;

	if (!ra)
		return;
	pthread_mutex_lock(&ra->mutex);
	ra->stop = 1;
	pthread_cond_broadcast(&ra->work);
	pthread_mutex_unlock(&ra->mutex);
	for (k = 0; k < ra->nworkers; k++)
		pthread_join(ra->w[k].thread, NULL);
	for (k = 0; k < ra->nworkers; k++) {
		ZSTD_freeDCtx(ra->w[k].dctx);
		free(ra->w[k].cbuf);
	}
	for (k = 0; k < ra->nslots; k++)
		free(ra->slots[k].raw);
	pthread_cond_destroy(&ra->done);
	pthread_cond_destroy(&ra->work);
	pthread_mutex_destroy(&ra->mutex);
	free(ra->slots);
	free(ra->w);
	free(ra);
}

/* Decompressed bytes read ahead at most (frames are 8 MiB by default). */
#define RA_BYTES_MAX ((size_t)256 << 20)

int rlb_trace_reader_set_threads(struct rlb_trace_reader *r, unsigned n,
				 struct rlb_err *err)
{
	struct readahead *ra;
	unsigned k;

	size_t i, most = 0, nslots;

	ra_free(r->ra);
	r->ra = NULL;
	if (n > RLB_TRACE_MAX_THREADS)
		n = RLB_TRACE_MAX_THREADS;
	/* two frames a thread, within RA_BYTES_MAX of the largest frames */
	for (i = 0; i < r->nframes; i++)
		if (r->frames[i].rsize > most)
			most = r->frames[i].rsize;
	nslots = 2 * (size_t)n;
	if (most && nslots > RA_BYTES_MAX / most)
		nslots = RA_BYTES_MAX / most;
	if (n > nslots)
		n = (unsigned)nslots;
	if (n < 2)
		return 0;
	ra = calloc(1, sizeof(*ra));
	if (ra) {
		ra->nslots = (unsigned)nslots;
		ra->slots = calloc(ra->nslots, sizeof(*ra->slots));
		ra->w = calloc(n, sizeof(*ra->w));
	}
	if (!ra || !ra->slots || !ra->w || pthread_mutex_init(&ra->mutex, NULL) != 0)
		goto nomem;
	if (pthread_cond_init(&ra->work, NULL) != 0) {
		pthread_mutex_destroy(&ra->mutex);
		goto nomem;
	}
	if (pthread_cond_init(&ra->done, NULL) != 0) {
		pthread_cond_destroy(&ra->work);
		pthread_mutex_destroy(&ra->mutex);
		goto nomem;
	}
	/* workers wait for the first frame taken; they read ra through r */
	r->ra = ra;
	for (k = 0; k < n; k++) {
		struct ra_worker *w = &ra->w[ra->nworkers];

		w->r = r;
		w->dctx = rlb_rrt_dctx_new();
		if (!w->dctx)
			break;
		if (pthread_create(&w->thread, NULL, ra_main, w) != 0) {
			ZSTD_freeDCtx(w->dctx);
			break;
		}
		ra->nworkers++;
	}
	if (ra->nworkers == 0) {
		/* none could start: decode on the consumer, as without */
		ra_free(ra);
		r->ra = NULL;
	}
	return 0;
nomem:
	if (ra) {
		free(ra->slots);
		free(ra->w);
	}
	free(ra);
	return rlb_err_set(err, RLB_ENOMEM, "out of memory");
}

uint64_t rlb_rrt_reader_frames_ahead(const struct rlb_trace_reader *r)
{
	return r->ra ? r->ra->taken : 0;
}

/*
 * Load frame i into the cursor (from the read-ahead for the main cursor
 * when there is one; stop bounds it).  The frame's step, known now, is
 * recorded here, on the consumer's thread.
 */
static int load_frame(struct rlb_trace_reader *r, struct cursor *c, size_t i,
		      size_t stop, struct rlb_err *err)
{
	struct rframe *f = &r->frames[i];
	size_t got = 0;
	int ret;

	if (c == &r->main && r->ra)
		ret = ra_take(r, c, i, stop, &got, err);
	else
		ret = decode_frame(r, i, r->dctx, &r->cbuf, &r->ccap,
				   &c->raw, &c->rcap, &got, err);
	if (ret != 0)
		return ret;
	if (!f->step_known) {
		f->step = rlb_get_u32(c->raw);
		f->step_known = 1;
	}
	c->cur = i;
	c->loaded = 1;
	c->rlen = got;
	c->rpos = 0;
	c->rec = 0;
	return 0;
}

/* Error inside a record: names the frame's offset and the sequence. */
static int rec_err(struct rlb_err *err, const struct rframe *f, uint32_t rec,
		   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int rec_err(struct rlb_err *err, const struct rframe *f, uint32_t rec,
		   const char *fmt, ...)
{
	char msg[RLB_ERR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return rlb_err_set(err, RLB_ECORRUPT,
			   "data frame at offset %llu: sequence %u: %s",
			   (unsigned long long)f->off, rec, msg);
}

/* Decode one rank-coded layer; *pos advances.  Returns 0 or -1 (*why). */
static int decode_rank(const struct rrt_shape *s, const uint8_t *p, size_t len,
		       size_t *pos, uint32_t T, uint16_t *out, int decode,
		       const char **why)
{
	uint32_t K = s->h.topk, E = s->h.experts, C = s->chunk_tokens;
	uint32_t t0, c, j, n, maxn = E < 255 ? E : 255;
	uint8_t lut[256 + 64];	/* slack for rlb_rrt_rank_rest */
	size_t q = *pos, m;

	memset(lut, 0, sizeof(lut));
	for (t0 = 0; t0 < T; t0 += c) {
		c = T - t0 < C ? T - t0 : C;
		m = (size_t)c * K;
		if (q >= len) {
			*why = "rank chunk cut";
			return -1;
		}
		n = p[q++];
		if (n > maxn || len - q < n || len - q - n < m) {
			*why = "rank chunk exceeds the record";
			return -1;
		}
		if (decode) {
			const uint8_t *src = p + q + n;
			uint16_t *o = out + (size_t)t0 * K;
			uint64_t listed[4] = { 0, 0, 0, 0 };

			for (j = 0; j < n; j++) {
				uint8_t id = p[q + j];
				uint64_t bit = 1ull << (id & 63);

				if (id >= E || (listed[id >> 6] & bit)) {
					*why = "bad rank list";
					return -1;
				}
				listed[id >> 6] |= bit;
				lut[j] = id;
			}
			/* The unlisted ids follow, ascending. */
			rlb_rrt_rank_rest(listed, n, E, lut);
			if (rlb_rrt_map_u8(src, o, m, lut) >= E) {
				*why = "rank out of range";
				return -1;
			}
		}
		q += n + m;
	}
	*pos = q;
	return 0;
}

/* Decode a RAW or DELTA layer of tk ids; checks them against experts. */
static int decode_plain(const struct rrt_shape *s, const uint8_t *p,
			size_t tk, uint16_t *o, const char **why)
{
	uint32_t K = s->h.topk, E = s->h.experts;
	uint32_t mx = 0;
	size_t i, t;

	if (s->id_bytes == 1) {
		mx = s->id_coding == RRT_CODING_RAW ? rlb_rrt_widen_u8(p, o, tk) :
			rlb_rrt_undelta_u8(p, o, tk / K, K);
	} else if (s->id_coding == RRT_CODING_RAW) {
		for (i = 0; i < tk; i++) {
			o[i] = rlb_get_u16(p + 2 * i);
			mx = o[i] > mx ? o[i] : mx;
		}
	} else {
		for (t = 0; t < tk; t += K) {
			uint32_t a = 0, k;

			for (k = 0; k < K; k++) {
				a += rlb_get_u16(p + 2 * (t + k));
				o[t + k] = (uint16_t)a;
			}
			mx = a > mx ? a : mx;
		}
	}
	if (mx >= E) {
		*why = "expert id out of range";
		return -1;
	}
	return 0;
}

/*
 * In a SORTED trace each token's ids ascend; DELTA codes only such ids,
 * RAW and RANK can code any.  The first token out of order, or T.
 */
static uint32_t unsorted_token(const uint16_t *o, uint32_t T, uint32_t K)
{
	uint32_t t, k;

	for (t = 0; t < T; t++, o += K)
		for (k = 1; k < K; k++)
			if (o[k] < o[k - 1])
				return t;
	return T;
}

/*
 * Parse the next record of the cursor's frame.  With decode, the ids and
 * gates land in the reader's arrays and seq is filled; without, only the
 * record's metadata is checked and returned.
 */
static int parse_record(struct rlb_trace_reader *r, struct cursor *c,
			struct rlb_seq *seq, int decode, struct rlb_err *err)
{
	const struct rrt_shape *s = &r->s;
	struct rframe *f = &r->frames[c->cur];
	const uint8_t *p = c->raw;
	uint32_t K = s->h.topk, L = s->h.moe_layers, T, l;
	size_t pos = c->rpos, tk, need;
	const char *why = NULL;
	int b = 0;

	if (c->rlen - pos < RRT_SEQ_FIXED)
		return rec_err(err, f, c->rec, "record header cut at raw offset %zu", pos);
	memset(seq, 0, sizeof(*seq));
	seq->step = rlb_get_u32(p + pos);
	seq->group = rlb_get_u32(p + pos + 4);
	seq->sample = rlb_get_u32(p + pos + 8);
	seq->tokens = T = rlb_get_u32(p + pos + 12);
	pos += RRT_SEQ_FIXED;
	if (seq->step != f->step)
		return rec_err(err, f, c->rec, "step %u in a frame of step %u",
			       seq->step, f->step);
	if (c->cur > 0 && r->frames[c->cur - 1].step_known &&
	    seq->step < r->frames[c->cur - 1].step)
		return rec_err(err, f, c->rec, "step %u after step %u",
			       seq->step, r->frames[c->cur - 1].step);
	if (T < 1 || T > RLB_TRACE_MAX_SEQ_TOKENS)
		return rec_err(err, f, c->rec, "token count %u is out of range", T);
	if (r->has_index) {
		const struct rlb_seq_meta *m;

		if (c->rec >= f->seqs)
			return rec_err(err, f, c->rec, "more sequences than the step index lists (%u)",
				       f->seqs);
		m = &r->metas[f->first_seq + c->rec];
		if (m->group != seq->group || m->sample != seq->sample ||
		    m->tokens != T)
			return rec_err(err, f, c->rec,
				       "does not match the step index (group %u, sample %u, %u tokens)",
				       m->group, m->sample, m->tokens);
	}
	tk = (size_t)T * K;
	need = tk * s->id_bytes + (s->gate_coding ? 4 * tk : 0);
	if ((c->rlen - pos) / L < need)
		return rec_err(err, f, c->rec, "%u tokens do not fit in the frame", T);
	if (decode) {
		b = r->buf ^ 1;
		if (rlb_grow(&r->ids[b], &r->ids_cap[b], tk * L, sizeof(*r->ids[b])) != 0 ||
		    (s->gate_coding &&
		     rlb_grow(&r->gates[b], &r->gates_cap[b], tk * L, sizeof(*r->gates[b])) != 0))
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		r->buf = b;
	}
	for (l = 0; l < L; l++) {
		uint16_t *o = decode ? r->ids[b] + (size_t)l * tk : NULL;

		if (s->id_coding == RRT_CODING_RANK) {
			if (decode_rank(s, p, c->rlen, &pos, T, o, decode, &why) != 0)
				return rec_err(err, f, c->rec, "layer %u: %s", l, why);
		} else {
			if (c->rlen - pos < tk * s->id_bytes)
				return rec_err(err, f, c->rec, "layer %u: ids cut", l);
			if (decode && decode_plain(s, p + pos, tk, o, &why) != 0)
				return rec_err(err, f, c->rec, "layer %u: %s", l, why);
			pos += tk * s->id_bytes;
		}
		if (decode && (s->h.flags & RLB_TRACE_F_SORTED) &&
		    s->id_coding != RRT_CODING_DELTA) {
			uint32_t t = unsorted_token(o, T, K);

			if (t < T)
				return rec_err(err, f, c->rec,
					       "layer %u, token %u: ids not ascending in a sorted trace",
					       l, t);
		}
		if (s->gate_coding) {
			if (c->rlen - pos < 4 * tk)
				return rec_err(err, f, c->rec, "layer %u: gates cut", l);
			if (decode) {
				const uint8_t *g = p + pos;
				float *go = r->gates[b] + (size_t)l * tk;
				uint32_t bad = 0;
				size_t i;

				for (i = 0; i < tk; i++) {
					uint32_t v = (uint32_t)g[i] | ((uint32_t)g[tk + i] << 8) |
						     ((uint32_t)g[2 * tk + i] << 16) |
						     ((uint32_t)g[3 * tk + i] << 24);

					/*
					 * Finite and >= 0 (rlb_trace_gate_ok) on the
					 * bits, without a branch: up to FLT_MAX, or -0.
					 */
					bad |= (v > 0x7f7fffffu) & (v != 0x80000000u);
					memcpy(&go[i], &v, 4);
				}
				for (i = 0; bad && i < tk; i++)
					if (!rlb_trace_gate_ok(go[i]))
						return rec_err(err, f, c->rec,
							       "layer %u, token %zu, column %zu: gate %.9g is negative or not finite",
							       l, i / K, i % K, (double)go[i]);
			}
			pos += 4 * tk;
		}
	}
	if (decode) {
		seq->ids = r->ids[b];
		seq->gates = s->gate_coding ? r->gates[b] : NULL;
	}
	c->rpos = pos;
	c->rec++;
	return 0;
}

/*
 * Advance a cursor: 1 with *seq filled, 0 at the end, negative on error.
 * Errors are sticky for the cursor until it is repositioned.
 */
static int cursor_next(struct rlb_trace_reader *r, struct cursor *c,
		       struct rlb_seq *seq, int decode, size_t stop_frame,
		       struct rlb_err *err)
{
	int ret;

	if (c->code) {
		*err = c->err;
		return c->code;
	}
	for (;;) {
		if (c->loaded && c->rpos < c->rlen)
			break;
		if (c->loaded) {
			struct rframe *f = &r->frames[c->cur];

			if (r->has_index && c->rec != f->seqs) {
				ret = rec_err(err, f, c->rec,
					      "frame ends early: the step index lists %u sequences",
					      f->seqs);
				goto fail;
			}
			c->loaded = 0;
			c->cur++;
		}
		if (c->cur >= r->nframes || c->cur >= stop_frame) {
			if (r->scan_code && c->cur >= r->nframes) {
				*err = r->scan_err;
				ret = r->scan_code;
				goto fail;
			}
			return 0;
		}
		ret = load_frame(r, c, c->cur, stop_frame, err);
		if (ret != 0)
			goto fail;
	}
	ret = parse_record(r, c, seq, decode, err);
	if (ret != 0)
		goto fail;
	return 1;
fail:
	c->code = ret;
	c->err = *err;
	return ret;
}

static void cursor_seek(struct cursor *c, size_t frame)
{
	c->cur = frame;
	c->loaded = 0;
	c->code = 0;
	rlb_err_clear(&c->err);
}

/* Learn every frame's step (decoding frames when there is no index). */
/*
 * The step of frame i without decoding the whole frame: its first record
 * starts with the step (u32), so the frame header and first block are
 * enough.  The frame's checksum is verified when it is read.  A first
 * block of under 4 bytes (no writer makes one) falls back to load_frame.
 */
static int peek_step(struct rlb_trace_reader *r, size_t i, struct rlb_err *err)
{
	struct rframe *f = &r->frames[i];
	uint8_t hb[18 + 3], out[4];	/* the largest frame header, a block header */
	struct fhdr fh;
	const char *why = NULL;
	uint32_t last, skip, bb;
	size_t n = f->csize < sizeof(hb) ? f->csize : sizeof(hb), len, zret;
	ZSTD_inBuffer in;
	ZSTD_outBuffer o = { out, sizeof(out), 0 };
	int ret;

	ret = read_at(r, f->off, hb, n, err);
	if (ret != 0)
		return ret;
	if (parse_fhdr(hb, n, &fh, &why) != 0 || fh.size + 3 > n)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
				      "bad frame header");
	if (block_info(hb + fh.size, &last, &skip, &bb, &why) != 0 ||
	    fh.size + 3 + skip > f->csize)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
				      "bad first block");
	len = fh.size + 3 + skip;
	if (rlb_grow(&r->cbuf, &r->ccap, len, 1) != 0)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = read_at(r, f->off, r->cbuf, len, err);
	if (ret != 0)
		return ret;
	in.src = r->cbuf;
	in.size = len;
	in.pos = 0;
	ZSTD_DCtx_reset(r->dctx, ZSTD_reset_session_only);
	zret = ZSTD_decompressStream(r->dctx, &o, &in);
	ZSTD_DCtx_reset(r->dctx, ZSTD_reset_session_only);
	if (ZSTD_isError(zret))
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
				      "corrupt zstd data (%s)", ZSTD_getErrorName(zret));
	if (o.pos < sizeof(out)) {
		cursor_seek(&r->scratch, i);
		ret = load_frame(r, &r->scratch, i, SIZE_MAX, err);
		r->scratch.loaded = 0;
		return ret;
	}
	f->step = rlb_get_u32(out);
	f->step_known = 1;
	return 0;
}

static int ensure_steps(struct rlb_trace_reader *r, struct rlb_err *err)
{
	size_t i, n = 0;
	int ret;

	if (r->steps_ready)
		return 0;
	for (i = 0; i < r->nframes; i++) {
		if (!r->frames[i].step_known) {
			ret = peek_step(r, i, err);
			if (ret != 0)
				return ret;
		}
		if (i && r->frames[i].step < r->frames[i - 1].step)
			return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", r->frames[i].off,
				      "step %u after step %u", r->frames[i].step,
				      r->frames[i - 1].step);
	}
	if (r->scan_code) {
		*err = r->scan_err;
		return r->scan_code;
	}
	r->steps = malloc((r->nframes ? r->nframes : 1) * sizeof(*r->steps));
	if (!r->steps)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; i < r->nframes; i++)
		if (n == 0 || r->steps[n - 1] != r->frames[i].step)
			r->steps[n++] = r->frames[i].step;
	r->nsteps = n;
	r->steps_ready = 1;
	return 0;
}

int rlb_trace_reader_steps(struct rlb_trace_reader *r, const uint32_t **steps,
			   size_t *nsteps, struct rlb_err *err)
{
	struct rlb_err tmp;
	int ret;

	if (!err)
		err = &tmp;
	ret = ensure_steps(r, err);
	if (ret != 0)
		return path_err(r, err, ret);
	*steps = r->steps;
	*nsteps = r->nsteps;
	return 0;
}

/* First frame of step, or nframes. */
static size_t find_step(const struct rlb_trace_reader *r, uint32_t step)
{
	size_t lo = 0, hi = r->nframes;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r->frames[mid].step < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < r->nframes && r->frames[lo].step == step ? lo : r->nframes;
}

/* The first frame of STEP into *first, learning the steps if need be. */
static int locate_step(struct rlb_trace_reader *r, uint32_t step, size_t *first,
		       struct rlb_err *err)
{
	int ret = ensure_steps(r, err);

	if (ret != 0)
		return path_err(r, err, ret);
	*first = find_step(r, step);
	if (*first == r->nframes)
		return rlb_err_set(err, RLB_ENOTFOUND,
				   "trace '%s': step %u is not in the trace",
				   r->path, step);
	return 0;
}

int rlb_trace_reader_step_seqs(struct rlb_trace_reader *r, uint32_t step,
			       struct rlb_seq_meta **metas, size_t *n,
			       struct rlb_err *err)
{
	struct rlb_seq_meta *m = NULL;
	size_t cap = 0, cnt = 0, first, end;
	struct rlb_err tmp;
	struct rlb_seq seq;
	int ret;

	if (!err)
		err = &tmp;
	*metas = NULL;
	*n = 0;
	ret = locate_step(r, step, &first, err);
	if (ret != 0)
		return ret;
	for (end = first; end < r->nframes && r->frames[end].step == step; end++)
		;
	if (r->has_index) {
		uint64_t a = r->frames[first].first_seq;
		uint64_t b = r->frames[end - 1].first_seq + r->frames[end - 1].seqs;

		m = malloc((size_t)(b - a) * sizeof(*m));
		if (!m)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		memcpy(m, r->metas + a, (size_t)(b - a) * sizeof(*m));
		*metas = m;
		*n = (size_t)(b - a);
		return 0;
	}
	cursor_seek(&r->scratch, first);
	while ((ret = cursor_next(r, &r->scratch, &seq, 0, end, err)) == 1) {
		if (rlb_grow(&m, &cap, cnt + 1, sizeof(*m)) != 0) {
			ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
			break;
		}
		m[cnt].step = seq.step;
		m[cnt].group = seq.group;
		m[cnt].sample = seq.sample;
		m[cnt].tokens = seq.tokens;
		cnt++;
	}
	r->scratch.loaded = 0;
	if (ret < 0) {
		free(m);
		return path_err(r, err, ret);
	}
	*metas = m;
	*n = cnt;
	return 0;
}

int rlb_trace_reader_seek_step(struct rlb_trace_reader *r, uint32_t step,
			       struct rlb_err *err)
{
	struct rlb_err tmp;
	size_t i;
	int ret;

	ret = locate_step(r, step, &i, err ? err : &tmp);
	if (ret == 0)
		cursor_seek(&r->main, i);
	return ret;
}

int rlb_trace_reader_rewind(struct rlb_trace_reader *r, struct rlb_err *err)
{
	(void)err;
	cursor_seek(&r->main, 0);
	return 0;
}

int rlb_trace_reader_next(struct rlb_trace_reader *r, struct rlb_seq *seq,
			  struct rlb_err *err)
{
	struct rlb_err tmp;
	int ret;

	if (!err)
		err = &tmp;
	ret = cursor_next(r, &r->main, seq, 1, SIZE_MAX, err);
	if (ret < 0)
		return path_err(r, err, ret);
	return ret;
}

int rlb_trace_verify(const char *path, struct rlb_trace_info *info,
		     struct rlb_err *err)
{
	return rlb_trace_verify_threads(path, 1, info, err);
}

int rlb_trace_verify_threads(const char *path, unsigned threads,
			     struct rlb_trace_info *info, struct rlb_err *err)
{
	struct rlb_trace_reader *r = NULL;
	struct rlb_err tmp;
	struct rlb_seq seq;
	struct stat st;
	size_t done = 0;
	uint64_t id_per_token;
	int ret, have = 0;
	uint32_t last = 0;

	if (!err)
		err = &tmp;
	memset(info, 0, sizeof(*info));
	if (stat(path, &st) == 0)
		info->file_bytes = (uint64_t)st.st_size;
	ret = rlb_trace_reader_open(&r, path, err);
	if (ret == 0)
		ret = rlb_trace_reader_set_threads(r, threads, err);
	if (ret != 0) {
		rlb_trace_reader_free(r);
		return ret;
	}
	info->has_seek_table = r->has_seek;
	info->has_step_index = r->has_index;
	info->truncated = r->truncated;
	info->valid_bytes = r->data_start;
	id_per_token = (uint64_t)r->s.h.topk * r->s.h.moe_layers * r->s.id_bytes;
	while ((ret = cursor_next(r, &r->main, &seq, 1, SIZE_MAX, err)) == 1) {
		/* Count frames as they are passed completely. */
		while (done < r->main.cur) {
			info->frames++;
			info->raw_bytes += r->frames[done].rsize;
			info->valid_bytes = r->frames[done].off + r->frames[done].csize;
			done++;
		}
		info->sequences++;
		info->tokens += seq.tokens;
		info->raw_id_bytes += seq.tokens * id_per_token;
		if (!have || seq.step != last)
			info->steps++;
		if (!have)
			info->first_step = seq.step;
		info->last_step = seq.step;
		have = 1;
		last = seq.step;
	}
	while (ret < 0 && done < r->main.cur) {
		info->frames++;
		info->raw_bytes += r->frames[done].rsize;
		info->valid_bytes = r->frames[done].off + r->frames[done].csize;
		done++;
	}
	if (ret == 0) {
		info->frames = r->nframes;
		info->raw_bytes = 0;
		for (done = 0; done < r->nframes; done++)
			info->raw_bytes += r->frames[done].rsize;
		info->valid_bytes = r->valid_bytes;
	} else {
		path_err(r, err, ret);
	}
	rlb_trace_reader_free(r);
	return ret;
}
