/*
 * trace_impl.h - internals of the trace format shared by trace.c (header,
 * checksums, verify), trace_write.c and the reader (trace_read.c,
 * trace_frames.c, trace_readahead.c; its own internals are in
 * trace_read_impl.h).  The byte layout they implement is
 * trace_format/SPEC.md; keep the two in step.
 */
#ifndef RLB_TRACE_IMPL_H
#define RLB_TRACE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "trace.h"

/* zstd frame magics (zstd_compression_format.md, seekable format). */
#define RRT_ZSTD_MAGIC 0xFD2FB528u
#define RRT_SKIP_MAGIC_MASK 0xFFFFFFF0u
#define RRT_SKIP_MAGIC_BASE 0x184D2A50u
#define RRT_HEADER_MAGIC 0x184D2A52u	/* skippable frame: relibra header */
#define RRT_INDEX_MAGIC 0x184D2A53u	/* skippable frame: step index */
#define RRT_SEEK_MAGIC 0x184D2A5Eu	/* skippable frame: seek table */
#define RRT_SEEKABLE_MAGIC 0x8F92EAB1u	/* last 4 bytes of the seek table */

/* Magic strings opening the header and step index contents. */
#define RRT_HEADER_ID "RLBTRACE"
#define RRT_INDEX_ID "RLBINDEX"
#define RLP_HEADER_ID "RLBPLAN\0"	/* a plan's header (SPEC.md, Part II) */

/* Header content (versions 1.0 and 1.1): field offsets, sizes, limits. */
enum {
	RRT_H_MAGIC = 0,
	RRT_H_MAJOR = 8,
	RRT_H_MINOR = 10,
	RRT_H_FLAGS = 12,
	RRT_H_EXPERTS = 16,
	RRT_H_TOPK = 20,
	RRT_H_LAYERS = 24,
	RRT_H_DENSE = 28,
	RRT_H_SEED = 32,
	RRT_H_ID_BYTES = 40,
	RRT_H_ID_CODING = 41,
	RRT_H_GATE_CODING = 42,
	RRT_H_RESERVED0 = 43,
	RRT_H_CHUNK = 44,
	RRT_H_FRAME_BYTES = 48,
	RRT_H_RESERVED1 = 52,
	RRT_H_MODEL = 56,
	RRT_H_SOURCE = 120,
	RRT_H_END = 152,		/* fixed fields of 1.0 end; CRC-32C follows */
	RRT_H_SIZE = 156,		/* content size of a 1.0 header */
	RRT_H_PERIOD = 152,		/* 1.1: u16 moe_layer_period */
	RRT_H_OFFSET = 154,		/* 1.1: u16 moe_layer_offset */
	RRT_H_END_1_1 = 156,
	RRT_H_SIZE_1_1 = 160,		/* content size of a 1.1 header */
	RRT_H_PATTERN_LEN = 156,	/* 1.2: u16 letters of the layer pattern */
	RRT_H_PATTERN = 160,		/* 1.2: the letters, zero-padded to 4 bytes */
	RRT_H_SIZE_1_2 = 164,		/* content size of a 1.2 header, letters aside */
	RRT_H_MAX = 65536,		/* largest header content accepted */
};

/* Step index content: fixed part, per-frame and per-sequence entries. */
enum {
	RRT_I_FIXED = 24,
	RRT_I_FRAME = 8,
	RRT_I_SEQ = 12,
};

#define RRT_SEEK_FOOTER 9
#define RRT_SEEK_ENTRY 8
#define RRT_SEEK_MAX_FRAMES 0x8000000u	/* seekable format's limit */

/* Flags a 1.x reader must understand; bits 16-31 are optional features. */
#define RRT_FLAGS_KNOWN (RLB_TRACE_F_GATES | RLB_TRACE_F_SORTED)
#define RRT_FLAGS_REQUIRED 0x0000FFFFu

/* Id codings (header byte 41). */
enum {
	RRT_CODING_RAW = 0,	/* ids at their width, [token][k] per layer */
	RRT_CODING_RANK = 1,	/* u8 ids as ranks of a per-chunk frequency list */
	RRT_CODING_DELTA = 2,	/* sorted ids: first id, then differences */
};

/* Gate codings (header byte 42). */
enum {
	RRT_GATES_NONE = 0,
	RRT_GATES_F32 = 1,	/* little-endian f32 split into 4 byte planes */
};

#define RRT_RANK_CHUNK_TOKENS 128	/* tokens per rank-coded chunk (writer) */
#define RRT_RANK_LIST_MAX 32		/* ids listed per chunk (writer) */

/* A data frame's raw content never exceeds this (1 GiB). */
#define RRT_MAX_FRAME_RAW (1u << 30)
#define RRT_DEFAULT_FRAME_BYTES (8u << 20)
#define RRT_SEQ_FIXED 16		/* step, group, sample, tokens */

/* The decoded header plus the coding parameters the records need. */
struct rrt_shape {
	struct rlb_trace_header h;
	unsigned id_bytes;
	unsigned id_coding;
	unsigned gate_coding;
	uint32_t chunk_tokens;
	uint32_t frame_bytes;
};

/* CRC-32C (Castagnoli), reflected, init and final xor 0xFFFFFFFF. */
uint32_t rlb_rrt_crc32c(const void *data, size_t n);
/* Continue a CRC-32C: crc is a previous result (0 to start). */
uint32_t rlb_rrt_crc32c_update(uint32_t crc, const void *data, size_t n);

/*
 * Whether a stored checksum matches the computed one.  A fuzzing build
 * (libFuzzer's FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, `make fuzz`)
 * takes every checksum as right, so that mutated inputs reach the
 * decoders behind them; rlb_rrt_dctx_new likewise skips zstd's.
 */
static inline int rrt_crc_ok(uint32_t stored, uint32_t computed)
{
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
	(void)stored;
	(void)computed;
	return 1;
#else
	return stored == computed;
#endif
}

/* A zstd decompression context for the readers (NULL: out of memory). */
struct ZSTD_DCtx_s *rlb_rrt_dctx_new(void);

/*
 * Validate the model shape of a header (writer side and reader side):
 * experts, topk, layers, flags, NUL-terminated names.  what prefixes the
 * message ("header at offset 0", "trace header").
 */
/* The minor version a header is written as: 0, 1 (periodic layout) or 2 (pattern). */
unsigned rlb_rrt_header_minor(const struct rlb_trace_header *h);
int rlb_rrt_check_shape(const struct rlb_trace_header *h, const char *what,
			struct rlb_err *err);

/* Encode the header frame (8-byte skippable frame header + content). */
/* Content size of the header frame that encodes H: 156 (1.0) or 160 (1.1). */
size_t rlb_rrt_header_size(const struct rlb_trace_header *h);

size_t rlb_rrt_header_encode(const struct rrt_shape *s, uint8_t *out,
			     size_t cap);

/*
 * Decode and check a header content of len bytes (the skippable frame's
 * payload; the frame starts at file offset 0).
 */
int rlb_rrt_header_decode(const uint8_t *p, size_t len, struct rrt_shape *s,
			  struct rlb_err *err);

/*
 * Frames the main cursor took from read-ahead threads since
 * rlb_trace_reader_set_threads (0 without them); for tests.
 */
uint64_t rlb_rrt_reader_frames_ahead(const struct rlb_trace_reader *r);

/* Id decoding kernels (trace.c); rlb_rrt_simd = 0 forces the plain C paths. */
extern int rlb_rrt_simd;
/* Largest byte of p[0..n). */
unsigned rlb_rrt_max_u8(const uint8_t *p, size_t n);
/* Largest value of p[0..n). */
unsigned rlb_rrt_max_u16(const uint16_t *p, size_t n);
/* o[i] = p[i]; returns the largest byte. */
unsigned rlb_rrt_widen_u8(const uint8_t *p, uint16_t *o, size_t n);
/* Prefix sums along each k-wide row of u8 differences; returns the largest. */
unsigned rlb_rrt_undelta_u8(const uint8_t *p, uint16_t *o, size_t rows, unsigned k);
/* o[i] = lut[p[i]] (lut has 256 entries); returns the largest p[i]. */
unsigned rlb_rrt_map_u8(const uint8_t *p, uint16_t *o, size_t n, const uint8_t *lut);
/*
 * Append the expert ids below experts whose bit is clear in listed[4] to
 * lut from index n on, ascending; returns the new length.  lut needs 64
 * bytes of slack past 256.
 */
unsigned rlb_rrt_rank_rest(const uint64_t *listed, unsigned n, unsigned experts,
			   uint8_t *lut);

/* Bytes of the ids of one layer of a T-token sequence, before coding. */
static inline uint64_t rrt_layer_ids(const struct rrt_shape *s, uint32_t tokens)
{
	return (uint64_t)tokens * s->h.topk;
}


/* ------------------------------------------------------------------ */
/* The container shared with plans (container.c).                      */

/*
 * Open PATH read-only; *fd (-1 on failure) and *file_bytes.  Errors (KIND
 * "trace" or "plan" in the message): RLB_EIO when it cannot be opened or
 * is not a regular file.
 */
int rlb_rrt_open(const char *path, const char *kind, int *fd,
		 uint64_t *file_bytes, struct rlb_err *err);

/*
 * What PATH starts with: "trace", "plan" (a relibra header of either,
 * possibly cut, as far as the bytes present tell them apart), or NULL
 * (anything else, or unreadable).  Never waits on a FIFO.
 */
const char *rlb_rrt_probe(const char *path);

/* Read n bytes at off of a file of file_bytes; RLB_ETRUNC when it ends first. */
int rlb_rrt_read_at(int fd, const char *path, uint64_t file_bytes, uint64_t off,
		    void *buf, size_t n, struct rlb_err *err);

/* Record a structural error: "WHAT at offset OFF: message". */
int rlb_rrt_at_err(struct rlb_err *err, int code, const char *what, uint64_t off,
		   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/*
 * Read the header frame that starts the file (a skippable frame with
 * RRT_HEADER_MAGIC, at most max_bytes of content): *content (malloc'd, the
 * caller frees it) and *bytes.  Errors name KIND ("trace", "plan").
 */
int rlb_rrt_read_header_frame(int fd, const char *path, uint64_t file_bytes,
			      const char *kind, uint32_t max_bytes,
			      uint8_t **content, uint32_t *bytes, struct rlb_err *err);

/*
 * Writing the seek table of n data frames: rlb_rrt_seek_table_bytes(n) bytes;
 * begin writes the frame header and the header frame's entry, one
 * rlb_rrt_seek_entry_put per data frame follows, end writes the index frame's
 * entry and the footer.  Each returns the position after what it wrote.
 */
size_t rlb_rrt_seek_table_bytes(size_t n);
uint8_t *rlb_rrt_seek_table_begin(uint8_t *out, size_t n, uint32_t head_bytes);
uint8_t *rlb_rrt_seek_entry_put(uint8_t *p, uint32_t csize, uint32_t dsize);
void rlb_rrt_seek_table_end(uint8_t *p, size_t n, uint32_t index_bytes);

/* What the entries of a seek table may hold. */
struct rrt_seek_limits {
	uint64_t max_frames;		/* data frames */
	uint32_t min_raw;		/* a data frame's decompressed size */
	uint32_t max_raw;
	uint32_t min_index_bytes;	/* the index frame, header included */
};

/*
 * Read and check the seek table of n entries (n from the footer, whose
 * descriptor the caller has checked) ending the file: its frame header,
 * every entry against lim and the file, the header frame's entry against
 * data_start.  frame() receives each data frame's offset and sizes in
 * order; *index_off and *index_bytes the index frame's place.
 */
int rlb_rrt_seek_table_read(int fd, const char *path, uint64_t file_bytes,
			    uint64_t data_start, uint64_t n,
			    const struct rrt_seek_limits *lim,
			    int (*frame)(void *ctx, uint64_t off, uint32_t csize,
				     uint32_t dsize, struct rlb_err *err),
			    void *ctx, uint64_t *index_off, uint64_t *index_bytes,
			    struct rlb_err *err);

#endif
