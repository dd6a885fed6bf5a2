/*
 * util.h - small helpers shared by the library: atomic output files,
 * checked number parsing, little-endian field access.
 */
#ifndef RLB_UTIL_H
#define RLB_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * An output file written as PATH.tmp and renamed over PATH on commit, so a
 * failed run never leaves a half-written PATH.  "-" means stdout; a device
 * or a FIFO (/dev/null, /dev/stdout on a pipe), and the file that stdout or
 * stderr is redirected to, are written in place (no rename).  PATH.tmp is
 * locked (flock, exclusive) from open to commit or abort, so that a second
 * run writing the same PATH at once refuses instead of replacing it; the
 * lock holds one file descriptor until then, also after the sync.
 */
struct rlb_atomic_file {
	FILE *fp;
	char *path;
	char *tmp_path;		/* NULL for stdout */
	int slot;		/* in the signal cleanup's list, -1 when not */
	int synced;		/* rlb_atomic_sync done: fp closed, PATH.tmp complete */
	int lock;		/* descriptor holding PATH.tmp's lock, -1 when none */
};

/*
 * Open PATH.tmp for writing ("wb").  On failure nothing is left behind;
 * an empty PATH is RLB_EINVAL.  A PATH.tmp that no run holds (left by a
 * killed run, a link, a FIFO) is replaced, never written through; one
 * that another run holds is RLB_EIO, "another run is writing".  PATH.tmp
 * is listed for rlb_atomic_remove_all until commit or abort.
 */
int rlb_atomic_open(struct rlb_atomic_file *af, const char *path,
		    struct rlb_err *err);
/*
 * Flush, fsync and close PATH.tmp without renaming it, so that a command
 * with several outputs renames them only once every one is complete.  On
 * failure PATH.tmp is removed and af released.
 */
int rlb_atomic_sync(struct rlb_atomic_file *af, struct rlb_err *err);
/*
 * rlb_atomic_sync after a writer to af->fp returned RET: RET when it
 * failed other than on a write (af is left open), else the sync's status,
 * whose message names the file and the reason, as a writer's RLB_EIO
 * cannot (stdio keeps what it failed to write, so the flush fails again).
 */
int rlb_atomic_sync_after(struct rlb_atomic_file *af, int ret,
			  struct rlb_err *err);
/*
 * rlb_atomic_sync unless done, then rename into place; releases af either
 * way.
 */
int rlb_atomic_commit(struct rlb_atomic_file *af, struct rlb_err *err);
/* The file being written, for messages: PATH.tmp, PATH or "stdout". */
const char *rlb_atomic_name(const struct rlb_atomic_file *af);
/*
 * Close and remove the temporary file; releases af.  Safe on a zeroed af;
 * NULL is a no-op.
 */
void rlb_atomic_abort(struct rlb_atomic_file *af);

/*
 * Remove every PATH.tmp still open (async-signal-safe: for a handler of
 * SIGINT or SIGTERM, so that a stopped run leaves no half-written
 * output).  At most RLB_ATOMIC_LISTED are listed at once (more are still
 * written, only not removed by a signal); threads may open and release
 * atomic files at once.
 */
#define RLB_ATOMIC_LISTED 64
void rlb_atomic_remove_all(void);

/* 64-bit FNV-1a of p[0..n), continuing from h (RLB_FNV1A_INIT to start). */
#define RLB_FNV1A_INIT 0xcbf29ce484222325ULL
uint64_t rlb_fnv1a(uint64_t h, const void *p, size_t n);

/*
 * Parse a whole string as a number within [min, max]: decimal (leading
 * zeros too), or hexadecimal after 0x; a double with '.' as its decimal
 * point whatever the host's locale.  Returns 0, or RLB_EPARSE (not a
 * number, leading space, trailing junk) / RLB_ERANGE with a message naming
 * `what`.
 */
int rlb_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out,
		  const char *what, struct rlb_err *err);
int rlb_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out,
		  const char *what, struct rlb_err *err);
int rlb_parse_double(const char *s, double min, double max, double *out,
		     const char *what, struct rlb_err *err);

/*
 * Grow the array *pp (of `size`-byte items, *cap of them) to hold at least
 * need items, doubling from 16.  -1 on overflow or allocation failure, the
 * array then unchanged.
 */
int rlb_grow(void *pp, size_t *cap, size_t need, size_t size);

/*
 * Stable sort of idx[0..n) by a "comes before" test: before(ctx, a, b) is
 * nonzero when a goes strictly before b; entries that neither precedes
 * keep their order.  A bottom-up merge sort; tmp holds n entries.
 */
typedef int (*rlb_before_fn)(const void *ctx, uint32_t a, uint32_t b);
void rlb_sort_stable(uint32_t *idx, uint32_t *tmp, size_t n,
		     rlb_before_fn before, const void *ctx);

/*
 * 1 when the NUL-terminated s is well-formed UTF-8 (no overlong forms, no
 * surrogates, nothing past U+10FFFF), as JSON needs; else 0.
 */
int rlb_utf8_ok(const char *s);
/* Bytes of the well-formed UTF-8 character at s (1 for NUL), or 0. */
size_t rlb_utf8_len(const char *s);

/*
 * A JSON string of any text, such as a file name: its bad UTF-8 bytes
 * become U+FFFD.  NULL when out of memory.
 */
struct json_t;
struct json_t *rlb_json_text(const char *s);
/*
 * A JSON number, or null when v is not finite (JSON has no NaN or
 * infinity).  NULL when out of memory.
 */
struct json_t *rlb_json_real_or_null(double v);
/*
 * Where jansson's parse error JE is: line, column and byte, counting from
 * 1, of the byte it could not take, or of the byte after the last when the
 * input ended early (for these two jansson counts the byte before).
 */
struct json_error_t;
void rlb_json_error_where(const struct json_error_t *je, int *line, int *column,
			  int *byte);

/* Monotonic and thread CPU clocks in nanoseconds. */
uint64_t rlb_now_ns(void);
uint64_t rlb_thread_cpu_ns(void);

/* Little-endian field access for the binary formats. */
static inline void rlb_put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void rlb_put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void rlb_put_u64(uint8_t *p, uint64_t v)
{
	rlb_put_u32(p, (uint32_t)v);
	rlb_put_u32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t rlb_get_u16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t rlb_get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) |
	       ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t rlb_get_u64(const uint8_t *p)
{
	return (uint64_t)rlb_get_u32(p) | ((uint64_t)rlb_get_u32(p + 4) << 32);
}

static inline void rlb_put_f32(uint8_t *p, float f)
{
	uint32_t v;

	memcpy(&v, &f, sizeof(v));
	rlb_put_u32(p, v);
}

static inline float rlb_get_f32(const uint8_t *p)
{
	uint32_t v = rlb_get_u32(p);
	float f;

	memcpy(&f, &v, sizeof(f));
	return f;
}

#ifdef __cplusplus
}
#endif

#endif
