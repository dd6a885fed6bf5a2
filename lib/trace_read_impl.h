/*
 * trace_read_impl.h - internals of the trace reader shared by trace_read.c
 * (open, records, cursors, steps, verify), trace_frames.c (the frame map:
 * seek table, step index, scan) and trace_readahead.c (loading frames,
 * read-ahead threads).  trace_impl.h holds what the writer shares too.
 */
#ifndef RLB_TRACE_READ_IMPL_H
#define RLB_TRACE_READ_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

#include "err.h"
#include "trace.h"
#include "trace_impl.h"

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

/* The read-ahead threads (trace_readahead.c). */
struct readahead;

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
static inline int rrt_read_at(const struct rlb_trace_reader *r, uint64_t off,
			      void *buf, size_t n, struct rlb_err *err)
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
int rlb_rrt_parse_fhdr(const uint8_t *p, size_t n, struct fhdr *fh,
		       const char **why);

/* Block header: size of its bytes after the header and its content bound. */
int rlb_rrt_block_info(const uint8_t *b, uint32_t *last, uint32_t *skip,
		       uint32_t *bound, const char **why);

/*
 * Find the data frames after the header (r->data_start): from the seek
 * table and step index when the file ends with a seek table, else by
 * walking them (r->truncated).  Errors come from the seek table and the
 * index; a walk keeps its error in r->scan_code for the cursors to report.
 */
int rlb_rrt_find_frames(struct rlb_trace_reader *r, struct rlb_err *err);

/*
 * Load frame i into the cursor (from the read-ahead for the main cursor
 * when there is one; stop bounds it).  The frame's step, known now, is
 * recorded here, on the consumer's thread.
 */
int rlb_rrt_load_frame(struct rlb_trace_reader *r, struct cursor *c, size_t i,
		       size_t stop, struct rlb_err *err);

/* Stop and join the workers and free the read-ahead.  NULL is a no-op. */
void rlb_rrt_ra_free(struct readahead *ra);

#endif
